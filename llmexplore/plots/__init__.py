"""Figure builders: tidy results in, ``go.Figure`` out. No model computations, no ``.show()``, no files.

One module per area (:mod:`.layouts`, :mod:`.disagg`, :mod:`.moe`, :mod:`.transfer`, :mod:`.offload`,
:mod:`.fidelity`); the shared style lives
here. Every figure has unit-bearing axis titles and a legend entry or label for every line; a layout or serving
mode keeps one colour throughout the workbook; series that can overlap also differ in dash pattern or marker.

The live explorers (:mod:`llmexplore.widgets`) start from these same builders and update traces by name. The
builders they use are written as *specs* (plain dicts, :func:`spec_builder`): ``builder(table)`` returns the
``go.Figure``, ``builder.spec(table)`` the same figure as dicts, which :func:`update_from` applies to a live
figure in place without building and validating a second ``go.Figure`` on every slider move.
"""

from __future__ import annotations

import copy
import functools
import math
import re
import textwrap

import numpy as np
import plotly.graph_objects as go

from ..errors import SpecError

__all__ = ["TEMPLATE", "TITLE_CHARS", "NOT_FIT", "RANK_SERIES", "RANK_KEY", "RANK_MARKER", "ref_line",
           "ref_trace", "base", "base_layout", "tidy_log_axes", "tidy", "distinct_labels", "trace", "fmt", "wrap_title", "figure", "spec_builder", "grid_layout",
           "not_fit_key", "fit_split", "uniform_note", "values_at", "values_note", "chosen_marker", "update_from", "layouts", "disagg", "moe", "transfer", "offload", "fidelity",
           "tables", "plan"]

TEMPLATE = "plotly_white"
#: longest title line [characters]: plotly never wraps titles, and 80 characters of its 17 px title font fill
#: about 750 px, the width of a figure in a JupyterLab notebook next to the file browser
TITLE_CHARS = 80
#: legend entry that explains the dotted segments (points that do not fit in memory)
NOT_FIT = "dotted: does not fit in memory"
#: legend order (``legendrank``) of the data series (+1 each), the keys and the markers of a chosen value, so
#: the legend keeps its order when a live figure adds a trace
RANK_SERIES, RANK_KEY, RANK_MARKER = 10, 900, 1000


# --------------------------------------------------------------------------------------------------
# text


def fmt(value, unit: str = "", *, digits: int = 3, trim: bool = False) -> str:
    """A number for people: thousands separators, ``digits`` significant digits (whole numbers in full), then
    the unit. ``fmt(1000, "ms")`` -> ``"1,000 ms"``, ``fmt(56.23, "req/s")`` -> ``"56.2 req/s"``,
    ``fmt(23.97, "ms")`` -> ``"24.0 ms"``; ``trim`` drops trailing zeros (for values a reader typed:
    ``fmt(0.5, "req/s", trim=True)`` -> ``"0.5 req/s"``). NaN and infinities read ``"—"``."""
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        return f"{value} {unit}".strip()
    if not math.isfinite(v):
        text = "—"
    elif v == round(v) and (abs(v) >= 1 or v == 0):
        text = f"{v:,.0f}"
    else:
        decimals = max(0, digits - 1 - math.floor(math.log10(abs(v))))
        text = f"{v:,.{decimals}f}"
        if trim and "." in text:
            text = text.rstrip("0").rstrip(".")
    return f"{text} {unit}" if unit else text


def distinct_labels(values, unit: str = "", *, most_decimals: int = 3) -> list[str]:
    """Labels for ``values`` (bars side by side) with the fewest decimals that keep different values apart:
    30.5, 30.9 and 31.2 s read "30.5 s", "30.9 s", "31.2 s", not "31 s" three times."""
    v = np.asarray(values, dtype=float)
    for d in range(most_decimals + 1):
        labels = [f"{x:,.{d}f}" for x in v]
        if len(set(labels)) == len(set(np.round(v, most_decimals + 3))):
            break
    return [f"{t} {unit}" if unit else t for t in labels]


def wrap_title(text: str, width: int = TITLE_CHARS) -> str:
    """``text`` with ``<br>`` breaks so that no line is longer than ``width`` characters.

    Breaks go at the " — " separators between the parts of a title first, then between words; a title that
    already has ``<br>`` keeps it.
    """
    lines = []
    for part in re.split(r"<br\s*/?>", text or ""):
        line = ""
        for seg in part.split(" — "):
            joined = f"{line} — {seg}" if line else seg
            if len(joined) <= width:
                line = joined
                continue
            if line:
                lines.append(line + " —")
            pieces = textwrap.wrap(seg, width, break_long_words=False, break_on_hyphens=False) or [""]
            lines.extend(pieces[:-1])
            line = pieces[-1]
        lines.append(line)
    return "<br>".join(lines)


# --------------------------------------------------------------------------------------------------
# layout


def base_layout(title: str, height: int = 420, **more) -> dict:
    """The shared layout as a dict: template, wrapped title (the top margin grows with its lines), height."""
    text = wrap_title(title)
    lines = text.count("<br>") + 1
    layout = dict(template=TEMPLATE, title=dict(text=text), height=height + 22 * (lines - 1),
                  legend=dict(title=dict(text="")), margin=dict(l=70, r=30, t=70 + 22 * (lines - 1), b=60))
    layout.update(more)
    return layout


def base(fig: go.Figure, title: str, height: int = 420) -> go.Figure:
    """Apply :func:`base_layout` to a figure built with the ``go.Figure`` API (and :func:`tidy_log_axes`)."""
    fig.update_layout(**base_layout(title, height))
    return tidy(fig)


def tidy(fig: go.Figure) -> go.Figure:
    """:func:`tidy_log_axes` on a figure built without :func:`base` (its own layout calls)."""
    ticks = tidy_log_axes([t.to_plotly_json() for t in fig.data], fig.layout.to_plotly_json())
    if ticks:
        fig.update_layout(ticks)
    return fig


def _finite(values) -> np.ndarray:
    try:
        a = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError):
        return np.empty(0)
    return a[np.isfinite(a) & (a > 0)]


def tidy_log_axes(data: list[dict], layout: dict) -> dict:
    """Tick steps for the log axes of a figure that set none: over two decades or more only the powers of ten
    are labelled (plotly's default also labels 2, 3, ... 9 of every decade, which collide), over less the
    1-2-5 steps with whole labels. Returns ``{axis: {"dtick": ...}}`` and applies it to ``layout`` (a dict) in place."""
    spans: dict[str, list[np.ndarray]] = {}
    for tr in data:
        for letter in ("x", "y"):
            axis = str(tr.get(letter + "axis") or letter)
            name = letter + "axis" + axis[1:]
            if letter in tr and tr[letter] is not None:
                spans.setdefault(name, []).append(_finite(tr[letter]))
    out = {}
    for name, arrays in spans.items():
        ax = layout.get(name)
        if not isinstance(ax, dict) or ax.get("type") != "log" or any(k in ax for k in ("dtick", "tickvals")):
            continue
        vals = np.concatenate(arrays) if arrays else np.empty(0)
        rng = ax.get("range")
        if not (rng and len(rng) == 2 and all(isinstance(r, (int, float)) for r in rng)):
            rng = None
        if rng:
            decades = abs(float(rng[1]) - float(rng[0]))
        elif vals.size:
            decades = float(np.log10(vals.max() / vals.min()))
        else:
            continue
        if decades >= 2:
            out[name] = {"dtick": 1}
        elif decades >= 0.7:
            # 1-2-5 steps with whole labels ("20", "50", "100"): plotly's own "D2" labels only the digit ("2",
            # "5"). Three decades to spare each side, so a live figure whose range moves keeps its ticks.
            lo_e = (math.floor(min(map(float, rng))) if rng else math.floor(math.log10(vals.min()))) - 3
            hi_e = (math.ceil(max(map(float, rng))) if rng else math.ceil(math.log10(vals.max()))) + 3
            ticks = [m * 10.0 ** e for e in range(lo_e, hi_e + 1) for m in (1, 2, 5)]
            out[name] = {"tickmode": "array", "tickvals": ticks, "ticktext": [fmt(t, trim=True) for t in ticks]}
    for name, ticks in out.items():
        layout[name].update(ticks)
    return out


@functools.lru_cache(maxsize=None)
def _grid(cols: int, titles: tuple, spacing: float) -> dict:
    from plotly.subplots import make_subplots

    lay = make_subplots(rows=1, cols=cols, subplot_titles=titles or None, horizontal_spacing=spacing
                        ).layout.to_plotly_json()
    lay.pop("template", None)
    return lay


def grid_layout(cols: int, titles=(), spacing: float = 0.1) -> dict:
    """Axes (``xaxis``, ``xaxis2``, ...) and subplot titles of a one-row grid, as :func:`make_subplots` lays
    them out (computed once per shape); traces of column ``c`` > 1 use ``xaxis="x{c}"``, ``yaxis="y{c}"``."""
    return copy.deepcopy(_grid(int(cols), tuple(titles), float(spacing)))


# --------------------------------------------------------------------------------------------------
# reference lines


def ref_trace(*, y=None, x=None, span, name: str, color: str = "#c00", dash: str = "dash",
              showlegend: bool = True, xaxis: str | None = None, yaxis: str | None = None,
              hover: str | None = None, legendrank: int | None = None) -> dict:
    """A horizontal (``y``) or vertical (``x``) reference line over ``span`` as a named scatter trace (dict).

    Traces, not ``add_hline(annotation_text=...)``: they get a legend entry, and plotly places annotations on
    log axes in log10 units, which silently puts the label (and the autorange) at 10**value.
    """
    vals = np.asarray(span, dtype=float)
    vals = vals[np.isfinite(vals)]
    lo, hi = (float(vals.min()), float(vals.max())) if vals.size else (np.nan, np.nan)
    xs, ys = ([lo, hi], [y, y]) if y is not None else ([x, x], [lo, hi])
    tr = dict(type="scatter", x=xs, y=ys, mode="lines", name=name, showlegend=showlegend,
              line=dict(color=color, dash=dash, width=1.5))
    if hover:
        tr["hovertemplate"] = hover + "<extra></extra>"
    else:
        tr["hoverinfo"] = "name"
    if legendrank is not None:
        tr["legendrank"] = legendrank
    if xaxis:
        tr["xaxis"] = xaxis
    if yaxis:
        tr["yaxis"] = yaxis
    return tr


def chosen_marker(x: float, spans, *, what: str, hover: str) -> dict:
    """The dashed vertical "chosen <what>" line at ``x`` over the y-range of the finite values in ``spans``
    (a list of arrays): the explorers' current slider value, drawn the same way in every figure."""
    return ref_trace(x=float(x), span=np.concatenate(spans) if spans else [], name=f"chosen {what}", color="#555",
                     dash="longdash", legendrank=RANK_MARKER, hover=hover)

def ref_line(fig: go.Figure, *, y=None, x=None, span, name: str, color: str = "#c00", dash: str = "dash",
             row=None, col=None, showlegend: bool = True) -> None:
    """Add :func:`ref_trace` to a figure (in subplot ``row``, ``col`` if given)."""
    kw = {} if row is None else dict(row=row, col=col)
    fig.add_trace(ref_trace(y=y, x=x, span=span, name=name, color=color, dash=dash, showlegend=showlegend),
                  **kw)


def fit_split(values, ok) -> tuple[np.ndarray, np.ndarray]:
    """``(solid, dotted)``: ``values`` where they fit (``ok``) and where they do not, the dotted part extended
    to the neighbouring fitting points so that the two join (a lone fitting point between points that do not
    fit is then on a line, not an isolated dot)."""
    v = np.asarray(values, dtype=float)
    ok = np.asarray(ok, dtype=bool)
    near = ~ok
    near[1:] |= ~ok[:-1]
    near[:-1] |= ~ok[1:]
    return np.where(ok, v, np.nan), np.where(near, v, np.nan)


def uniform_note(layout: dict, text: str) -> dict:
    """Say on the figure why its values are all the same (a note under the plot area, below the axis titles)
    and mark it in ``layout["meta"]["uniform"]``, which the report checks read: a flat figure must say why."""
    layout.setdefault("meta", {})["uniform"] = text
    lines = wrap_title(text, 120)
    layout.setdefault("annotations", []).append(
        dict(text=lines, xref="paper", yref="paper", x=0, y=0, yanchor="top", yshift=-58, xanchor="left",
             showarrow=False, align="left", font=dict(size=12, color="#555")))
    margin = layout.setdefault("margin", {})
    margin["b"] = margin.get("b", 60) + 18 * (lines.count("<br>") + 1) + 8
    layout["height"] = layout.get("height", 420) + 18 * (lines.count("<br>") + 1) + 8
    return layout


def values_at(series: dict, x: float, unit: str, *, what: str) -> str:
    """"at <what>: A 33.2 · B 33.3 · C 36.9 ms" — each series' value at ``x``, interpolated on log axes from its
    points that are finite, smallest first (``series``: {name: (xs, ys)}); "does not fit" outside a series' range.
    What a log axis squashes (a few percent between curves), a figure states in numbers."""
    parts = []
    for name, (xs, ys) in series.items():
        xs, ys = np.asarray(xs, float), np.asarray(ys, float)
        ok = np.isfinite(xs) & np.isfinite(ys) & (xs > 0) & (ys > 0)
        if ok.sum() >= 1 and xs[ok].min() <= x <= xs[ok].max():
            order = np.argsort(xs[ok])
            v = float(np.exp(np.interp(np.log(x), np.log(xs[ok][order]), np.log(ys[ok][order]))))
            parts.append((v, f"{name} {fmt(v, unit)}"))
        else:
            parts.append((np.inf, f"{name} does not fit"))
    parts.sort(key=lambda p: p[0])
    lines = [" · ".join(t for _, t in parts[i:i + 3]) for i in range(0, len(parts), 3)]  # three per line
    return f"at {what}: " + "<br>".join(lines)


def values_note(layout: dict, text: str, *, axis: str = "") -> dict:
    """``text`` (e.g. :func:`values_at`) in a box at the top left of the panel of x axis ``x{axis}``."""
    layout.setdefault("annotations", []).append(
        dict(text=text, xref=f"x{axis} domain", yref=f"y{axis} domain", x=0.01, y=0.99, xanchor="left", yanchor="top",
             showarrow=False, align="left", font=dict(size=11, color="#333"), bgcolor="rgba(255,255,255,0.85)",
             bordercolor="#ccc", borderwidth=1))
    return layout


def not_fit_key(shown: bool, **axes) -> dict:
    """The legend entry explaining dotted segments (a trace with no points); listed only when ``shown``."""
    return dict(type="scatter", x=[None], y=[None], mode="lines", name=NOT_FIT, showlegend=bool(shown),
                line=dict(color="#777", dash="dot", width=1.5), hoverinfo="skip", legendrank=RANK_KEY, **axes)


# --------------------------------------------------------------------------------------------------
# specs and live figures


def figure(spec: dict) -> go.Figure:
    """The ``go.Figure`` of a spec (``{"data": [trace dicts], "layout": {...}}``), its log axes' ticks tidied
    (:func:`tidy_log_axes`)."""
    tidy_log_axes(spec["data"], spec["layout"])
    return go.Figure(data=spec["data"], layout=spec["layout"])


def spec_builder(fn):
    """Decorate a function that returns a figure spec so that calling it returns the ``go.Figure``;
    ``builder.spec(...)`` returns the spec itself (what :func:`update_from` applies to a live figure)."""

    @functools.wraps(fn)
    def build(*args, **kwargs) -> go.Figure:
        return figure(fn(*args, **kwargs))

    build.spec = fn
    return build


def trace(fig: go.Figure, name: str):
    """The trace called ``name`` in ``fig`` (SpecError listing the names if there is none): explorers update
    traces by name, never by position."""
    for tr in fig.data:
        if tr.name == name:
            return tr
    raise SpecError(f"trace must be one of {[tr.name for tr in fig.data]}, got {name!r}")


def _same(a, b) -> bool:
    """Plotly property values equal (arrays element-wise, NaN equal to NaN, tuples equal to lists)."""
    if a is b:
        return True
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(
            _same(a[k], b[k]) for k in a)
    seq = (list, tuple, np.ndarray)
    if isinstance(a, seq) or isinstance(b, seq):
        if not (isinstance(a, seq) and isinstance(b, seq)) or len(a) != len(b):
            return False
        x, y = np.asarray(a), np.asarray(b)
        if x.dtype.kind in "iuf" and y.dtype.kind in "iuf":
            return x.shape == y.shape and bool(np.array_equal(x, y, equal_nan=True))
        return all(_same(p, q) for p, q in zip(list(a), list(b)))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


_AXIS = re.compile(r"^[xy]axis\d*$")
_VIEW_STATE = ("range", "autorange")  # axis keys a reader's zoom sets; kept unless the spec sets them
#: layout keys an explorer may set that a spec does not always carry: cleared when the spec lacks them
_CLEARED = {"annotations": (), "shapes": (), "paper_bgcolor": None, "plot_bgcolor": None, "meta": None}


def update_from(fig: go.Figure, new) -> None:
    """Make ``fig`` (a live ``go.FigureWidget``) show ``new`` (a spec or a figure) in place.

    Traces are matched by name: a trace of ``new`` updates the trace of ``fig`` with that name (only the
    properties that changed are sent; properties it lacks are reset), a new name adds a trace, and traces of
    ``fig`` whose name is not in ``new`` are hidden. A trace the reader hid from the legend stays hidden. The
    layout is merged; axis zoom survives unless ``new`` sets a range. Names in ``new`` must be unique.
    """
    spec = new if isinstance(new, dict) else new.to_plotly_json()
    data = list(spec.get("data", []))
    if isinstance(spec.get("layout"), dict):
        tidy_log_axes(data, spec["layout"])  # the same ticks as the figure it started as
    names = [t.get("name") for t in data]
    if None in names or len(set(names)) != len(names):
        raise SpecError(f"update_from needs uniquely named traces, got {names}")
    have = {}
    for tr in fig.data:
        have.setdefault(tr.name, tr)
    with fig.batch_update():
        for t in data:
            tr = have.get(t["name"])
            if tr is None:
                fig.add_trace(t)
                continue
            cur = tr.to_plotly_json()
            for key, value in t.items():
                if key not in ("type", "uid") and (key not in cur or not _same(cur[key], value)):
                    tr[key] = value
            for key in cur:
                if key not in t and key not in ("type", "uid"):
                    if key == "visible" and cur[key] == "legendonly":
                        continue
                    tr[key] = None
        wanted = set(names)
        for tr in fig.data:
            if tr.name not in wanted and tr.visible is not False:
                tr.visible = False
        layout = {k: v for k, v in spec.get("layout", {}).items() if k != "template"}
        cur = fig.layout.to_plotly_json()
        for key, value in layout.items():
            old = cur.get(key)
            if _AXIS.match(key) and isinstance(value, dict) and isinstance(old, dict):
                kept = {k: v for k, v in old.items() if k in _VIEW_STATE and k not in value}
                if not _same({k: v for k, v in old.items() if k not in kept}, value):
                    fig.layout[key] = {**value, **kept}
            elif not _same(old, value):
                fig.layout[key] = value
        for key, empty in _CLEARED.items():
            if key not in layout and cur.get(key) not in (None, (), []):
                fig.layout[key] = empty


from . import disagg, fidelity, layouts, moe, offload, plan, speculative, tables, transfer  # noqa: E402  (area modules use the style above)
