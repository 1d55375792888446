"""Live explorers: ipywidgets controls + plotly FigureWidgets redrawn in place.

Each builder returns an explorer with ``controls`` (dict of widgets), ``figures`` (FigureWidgets), ``status``
(an HTML line: the headline or a readable error), ``status_text`` (the same line as plain text, for the note
that stands in for the explorer in static reports), ``view`` (the box to display) and ``update()``.

One definition of what is drawn: an explorer computes the same sweep tables as the notebook's static cells
and draws them with the same figure builders (:mod:`llmexplore.plots`). Its FigureWidgets start as
``go.FigureWidget(builder(table))``; every redraw recomputes the tables and applies ``builder.spec(table)`` to
the live figures by trace name (:func:`llmexplore.plots.update_from`).

Rules every explorer follows:

- *Unknown names* raise at construction, as everywhere in the package: an unknown model, GPU or link
  :class:`~llmexplore.errors.UnknownPresetError` ("model: no models preset 'x'; known: ..."), an unknown dtype
  or a value that breaks a rule everywhere (a batch of 0, 4.5 ranks) :class:`~llmexplore.errors.SpecError`
  naming the argument, the value and the rule or the known names.
- *Values outside a control's usual range* (ranks 3, a rate of 1e6 req/s, skew 40) are added to the control
  (:func:`choice_slider`): never clamped, never a raw ``TraitError``.
- *Combinations the models reject* (ranks that do not divide the heads, nothing fits) are reported in the
  status line; the figures are greyed out and retitled "Not updated: <reason>" until a redraw succeeds.

Widgets can be driven without a browser: set ``controls[name].value`` and the figures update.
"""

from __future__ import annotations

import html
import math
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, ClassVar, NamedTuple

import anywidget
import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import traitlets

from .. import _check, presets
from ..errors import LlmexploreError, SpecError
from ..plots import TEMPLATE, TITLE_CHARS, fmt, update_from, wrap_title
from ..units import DTYPE_BYTES

__all__ = ["Explorer", "Draw", "FitWidth", "choice_slider", "typed", "typed_value", "log_options", "nice_options", "mark_stale", "preset_name",
           "dtype_name", "layouts", "disagg", "moe", "transfer", "offload", "plan", "speculative"]

#: what a figure looks like while it shows a configuration that could not be evaluated
STALE_OPACITY = 0.25
STALE_BACKGROUND = "#efefef"
STALE_PREFIX = "Not updated: "
#: class of the parts of a status line that only make sense next to the live figures (left out of status_text)
LIVE_ONLY = "llmexplore-live-only"


class Draw(NamedTuple):
    """One figure of an explorer: a builder of :mod:`llmexplore.plots`, its table and keyword arguments."""

    builder: Callable
    table: object
    kwargs: dict

    def figure(self) -> go.Figure:
        return self.builder(self.table, **self.kwargs)

    def spec(self) -> dict:
        return self.builder.spec(self.table, **self.kwargs)


def _short(reason: str, limit: int = 110) -> str:
    text = " ".join(str(reason).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def mark_stale(fig: go.Figure, reason: str) -> None:
    """Grey out a live figure and retitle it "Not updated: <reason>": it still shows the last configuration
    that could be evaluated. The next successful redraw (:func:`~llmexplore.plots.update_from`) restores it."""
    with fig.batch_update():
        for tr in fig.data:
            if tr.visible is not False:
                tr.opacity = STALE_OPACITY
        fig.layout.title = dict(text=wrap_title(STALE_PREFIX + _short(reason)), font=dict(color="#b00"))
        fig.layout.paper_bgcolor = STALE_BACKGROUND
        fig.layout.plot_bgcolor = STALE_BACKGROUND


class FitWidth(anywidget.AnyWidget):
    """An invisible widget that reports the width its box has, so the box's figures can take it.

    plotly's FigureWidget (plotly 7, anywidget) sizes itself once, when it is first drawn, and never again: in
    JupyterLab it is drawn before the output area has its width and stays at plotly's default 700 px however
    wide the notebook is. This widget spans the explorer's box, watches its own width in the browser and
    sends it to Python (debounced) whenever it changes: on display, when the file browser is hidden, when the
    window is resized. :class:`Explorer` then sets that width on its figures.
    """

    width = traitlets.Int(0).tag(sync=True)
    _esm = """
    export default {
      render({ model, el }) {
        el.style.height = "0px";
        let timer = null;
        const observer = new ResizeObserver((entries) => {
          const width = Math.floor(entries[0].contentRect.width);
          if (width > 0 && width !== model.get("width")) {
            clearTimeout(timer);
            timer = setTimeout(() => { model.set("width", width); model.save_changes(); }, 150);
          }
        });
        observer.observe(el);
        return () => { observer.disconnect(); clearTimeout(timer); };
      },
    };
    """


#: narrowest width an explorer's figures are drawn at [px] (below it they scroll sideways)
MIN_FIGURE_WIDTH = 480
#: average width of a character of plotly's 17 px title font [px], and the title's left offset
TITLE_CHAR_PX, TITLE_OFFSET_PX = 9, 60


def fit_title(fig: go.Figure, width: int) -> None:
    """Re-wrap the title of a figure drawn ``width`` px wide so that no line is cut off, growing the top margin
    (and the height, so the plot keeps its size) by one title line per extra line."""
    text = fig.layout.title.text or ""
    chars = max(30, min(TITLE_CHARS, (int(width) - TITLE_OFFSET_PX) // TITLE_CHAR_PX))
    wrapped = wrap_title(text.replace(" —<br>", " — ").replace("<br>", " "), chars)
    extra = wrapped.count("<br>") - text.count("<br>")
    if wrapped != text:
        with fig.batch_update():
            fig.layout.title.text = wrapped
            if extra:
                fig.layout.margin.t = (fig.layout.margin.t or 70) + 22 * extra
                fig.layout.height = (fig.layout.height or 420) + 22 * extra


def _placeholder(reason: str) -> go.FigureWidget:
    """The figure of an explorer whose first configuration cannot be evaluated: empty, titled with why."""
    fig = go.FigureWidget(layout=dict(template=TEMPLATE, height=380, margin=dict(l=70, r=30, t=90, b=60)))
    mark_stale(fig, reason)
    return fig


@dataclass
class Explorer:
    """Controls, live figures, a status line and the box that displays them; ``update()`` redraws.

    Subclasses implement :meth:`evaluate` (tables -> figures, status line, records) and list their figures in
    ``FIGURES``; :meth:`build` creates the FigureWidgets from the builders and wires the controls.
    """

    controls: dict[str, W.ValueWidget]
    figures: dict[str, go.FigureWidget]
    status: W.HTML
    view: W.Widget
    fixed: dict = field(default_factory=dict)
    last: dict = field(default_factory=dict)
    #: results of :meth:`evaluate` for the most recent parameter sets (moving a slider back is instant)
    memo: OrderedDict = field(default_factory=OrderedDict, repr=False)

    FIGURES: ClassVar[tuple[str, ...]] = ()
    MEMO_SIZE: ClassVar[int] = 32

    # -- what subclasses provide

    def evaluate(self) -> tuple[dict[str, Draw], str, dict]:  # pragma: no cover - every explorer overrides it
        """The figures (by key), the status line (HTML) and the records of the current parameters; raises a
        :class:`~llmexplore.errors.LlmexploreError` when the models reject them."""
        raise NotImplementedError

    # -- shared behaviour

    def params(self) -> dict:
        return {k: w.value for k, w in self.controls.items()}

    @property
    def status_text(self) -> str:
        """The status line as plain text (no HTML): what a static report shows in the explorer's place."""
        text = re.sub(rf'<i class="{LIVE_ONLY}">.*?</i>', "", self.status.value or "", flags=re.S)
        text = re.sub(r"<br\s*/?>", " ", text)
        return " ".join(html.unescape(re.sub(r"<[^>]+>", "", text)).split())

    def fail(self, exc: Exception) -> None:
        """Show a readable error in the status line instead of raising into the widget, and mark every figure
        as not current."""
        reason = str(exc)
        self.status.value = (f'<span style="color:#b00"><b>Cannot evaluate:</b> {html.escape(reason)}</span> '
                             f'<i class="{LIVE_ONLY}">The figures below are greyed out: they still show the last '
                             "configuration that could be evaluated.</i>")
        self.last = {"error": reason}
        for fig in self.figures.values():
            mark_stale(fig, reason)
            if fig.layout.width:
                fit_title(fig, fig.layout.width)

    def evaluated(self) -> tuple[dict[str, Draw], str, dict]:
        """:meth:`evaluate`, remembered for the last ``MEMO_SIZE`` parameter sets (errors are not remembered)."""
        key = tuple(self.params().items())
        try:
            hit = self.memo.get(key)
        except TypeError:  # an unhashable control value: no memo
            return self.evaluate()
        if hit is None:
            hit = self.memo[key] = self.evaluate()
            while len(self.memo) > self.MEMO_SIZE:
                self.memo.popitem(last=False)
        else:
            self.memo.move_to_end(key)
        return hit

    def fit_width(self, change) -> None:
        """Draw every figure at the width the explorer's box has in the browser (see :class:`FitWidth`), its
        title wrapped to that width."""
        width = max(int(change["new"]), MIN_FIGURE_WIDTH)
        for fig in self.figures.values():
            if fig.layout.width != width:
                fig.layout.width = width
            fit_title(fig, width)

    def update(self, *_) -> None:
        """Recompute the tables for the current controls and redraw every figure in place (by trace name)."""
        try:
            draws, status, last = self.evaluated()
        except LlmexploreError as exc:
            self.fail(exc)
            return
        for key, draw in draws.items():
            fig = self.figures[key]
            update_from(fig, draw.spec())
            if fig.layout.width:
                fit_title(fig, fig.layout.width)
        self.status.value = status
        self.last = last

    @classmethod
    def build(cls, controls: dict, rows: list[list[str]], *, fixed: dict | None = None) -> "Explorer":
        """Create the explorer: FigureWidgets from the builders at the initial parameters (or placeholders
        that say why they cannot be drawn), the view (controls in ``rows`` of columns, the status line, the
        figures), and the redraw on every control change."""
        status = W.HTML(layout=W.Layout(margin="4px 0 8px 0"))
        app = cls(controls=controls, figures={}, status=status, view=W.VBox(), fixed=dict(fixed or {}))
        try:
            draws, text, last = app.evaluated()
        except LlmexploreError as exc:
            app.figures = {key: _placeholder(str(exc)) for key in cls.FIGURES}
            app.fail(exc)
        else:
            app.figures = {key: go.FigureWidget(draws[key].figure()) for key in cls.FIGURES}
            app.status.value, app.last = text, last
        columns = [W.VBox([typed(controls[name]) for name in col], layout=W.Layout(margin="0 16px 0 0"))
                   for col in rows]
        fit = FitWidth(layout=W.Layout(width="100%"))
        fit.observe(app.fit_width, names="width")
        app.view = W.VBox([W.HBox(columns, layout=W.Layout(flex_flow="row wrap")), status,
                           *app.figures.values(), fit])
        app.view.add_class("llmexplore-explorer")
        for w in controls.values():
            w.observe(app.update, names="value")
        return app


# --------------------------------------------------------------------------------------------------
# controls

STYLE = {"description_width": "140px"}
SLIDER_LAYOUT = {"width": "430px"}


def log_options(lo: int, hi: int) -> list[int]:
    """Powers of two times ``lo`` up to ``hi``: 256, 512, ..., for token and batch sliders."""
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return out


def nice_options(lo: float, hi: float, mantissas=(1, 1.5, 2, 3, 5, 7)) -> list[float]:
    """Round values from ``lo`` to ``hi``: 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1, 1.5, ... (for rates and SLOs)."""
    out = []
    for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in mantissas:
            v = round(m * 10.0 ** k, 10)
            if lo <= v <= hi:
                out.append(v)
    return out


def choice_slider(values, value, description: str, unit: str = "", *, label=None) -> W.SelectionSlider:
    """A slider over ``values`` whose readout is formatted with its unit ("8,192 tokens", "1,000 ms").

    ``value`` is added to the options if it is not one of them (an explorer extends its control rather than
    clamping the value or raising a ``TraitError``). In an explorer it gets a box to type a value into
    (:func:`typed`)."""
    label = label or (lambda v: fmt(v, unit, trim=True))
    options = sorted(set(values) | {value})
    slider = W.SelectionSlider(options=[(label(v), v) for v in options], value=value, description=description,
                               continuous_update=False, style=STYLE, layout=W.Layout(**SLIDER_LAYOUT))
    slider._llmexplore_label = label  # what typed() labels a typed value with
    return slider


#: the largest value a slider's box takes (any model bound is far below; the explorer names the real rule)
MAX_TYPED = 1e15


def typed_value(slider: W.SelectionSlider, text: str):
    """Put the number ``text`` on ``slider`` (added to its options, labelled as the others) and return it; a
    SpecError naming the control when it is not a number of the slider's kind (whole for integer sliders)."""
    values = [v for _, v in slider.options]
    whole = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values)
    try:
        x = float(str(text).replace(",", "").replace("_", "").strip())
    except ValueError:
        x = float("nan")
    positive = min(values) > 0  # a slider of batches, tokens, rates: its typed value must be positive too
    if (not np.isfinite(x) or x < 0 or (positive and x == 0) or (whole and x != int(x)) or x > MAX_TYPED):
        raise SpecError(f"{slider.description} must be {'a whole number' if whole else 'a number'} "
                        f"{'> 0' if positive else '>= 0'} and at most {MAX_TYPED:.0e}, got {_check.shown(text)}")
    v = int(x) if whole else x
    if v not in values:
        label = getattr(slider, "_llmexplore_label", str)
        slider.options = [(label(o), o) for o in sorted(set(values) | {v})]
    slider.value = v
    return v


def typed(control):
    """``control`` with a box to type its value into, when it is a numeric choice slider (sliders snap to their
    options; a reader often has the exact number): Enter puts it on the slider, extending its options. Other
    controls come back as they are."""
    if not isinstance(control, W.SelectionSlider) or not hasattr(control, "_llmexplore_label"):
        return control
    box = W.Text(value="", placeholder="type", continuous_update=False, layout=W.Layout(width="86px"),
                 tooltip=f"type a value for {control.description} and press Enter")
    box.add_class("llmexplore-typed")

    def submit(change):
        text = change["new"].strip()
        if not text:
            return
        try:
            typed_value(control, text)
        except SpecError as exc:
            box.layout.border = "1px solid #b00"
            box.tooltip = str(exc)
            return
        box.layout.border = None
        box.value = ""

    box.observe(submit, names="value")
    return W.HBox([control, box])


def dropdown(options, value, description: str) -> W.Dropdown:
    """A dropdown over ``options`` (``(label, value)`` pairs or values), with ``value`` added if missing."""
    opts = list(options)
    values = [o[1] if isinstance(o, tuple) else o for o in opts]
    if value not in values:
        opts.append(value)
    return W.Dropdown(options=opts, value=value, description=description, style=STYLE,
                      layout=W.Layout(width="430px"))


def preset_name(kind: str, field_name: str, value) -> str:
    """``value`` if it names a preset of ``kind``; otherwise the package's UnknownPresetError naming the
    argument, the value and the known names (SpecError for a value that is not a name at all)."""
    presets.resolve(kind, value)
    if not isinstance(value, str):
        raise SpecError(f"{field_name} must be a preset name (text), got {_check.shown(value)}")
    return value


def dtype_name(field_name: str, value) -> str:
    """``value`` if it is a dtype the models know (``bf16``, ``fp8``, ...); else SpecError listing them."""
    return _check.choice(field_name, value, list(DTYPE_BYTES))



def model_dtypes_runtime(model: str, weight_dtype: str | None, kv_dtype: str, runtime: str
                         ) -> tuple[str, str, str]:
    """The checked ``(weight_dtype, kv_dtype, runtime)`` of an explorer of the (already checked) ``model``;
    ``weight_dtype`` None is the dtype the model's weights are released in."""
    released = presets.model(model).weight_dtype
    return (dtype_name("weight_dtype", released if weight_dtype is None else weight_dtype),
            dtype_name("kv_dtype", kv_dtype), preset_name("runtime", "runtime", runtime))

from . import disagg, layouts, moe, offload, plan, speculative, transfer  # noqa: E402  (area modules build on Explorer)
