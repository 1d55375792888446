"""Notebook plumbing: plotly set-up, recorded headline numbers, quiet papermill engine, widget display.

Nothing here computes a model; it makes the notebooks behave the same in JupyterLab, Voila, papermill
and the exported HTML reports.

- :func:`setup_notebook` picks a plotly renderer that works live *and* survives ``nbconvert --to html``
  offline (plotly.js inlined once per notebook).
- :func:`record` / :func:`read_records` publish JSON values from a running notebook and read them back
  from the executed ``.ipynb`` (the tests assert on them).
- :class:`QuietWidgetEngine` is the papermill engine ``"llmexplore"``: nbclient without its ipywidgets
  Output emulation, which can stall a run (jupyter/nbclient#312).
- :func:`show` displays a live explorer, with its status line and a short note in its place in static HTML.
- :func:`say` displays one generated finding (a sentence with the headline number) as a paragraph.
- :func:`summarize` lists the headline (title) of every figure the notebook has shown so far, at the parameters
  it runs with: the numbers a Summary must repeat, never stale.
- :func:`check_parameters` validates a notebook's parameters right after its imports, through the package
  function registered for that notebook (:func:`parameter_checker`); the report builder asks the same
  function before it runs anything.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import SpecError, UsageError

RECORD_MIME = "application/vnd.llmexplore.record+json"
#: what JupyterLab and Voila show for a record: nothing visible
RECORD_HTML = '<span class="llmexplore-record" hidden></span>'
MIME = RECORD_MIME  # the name used in STYLE.md
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
NOTE_MIME = "application/vnd.llmexplore.widget-note+json"
PLOTLY_MIME = "application/vnd.plotly.v1+json"

DEFAULT_RENDERER = "plotly_mimetype"  # live: figures as JSON only (the reports select OFFLINE_RENDERER)
OFFLINE_RENDERER = "plotly_mimetype+notebook"
LIVE_HINT = ("Live explorer: open the notebook with `make lab` or `make serve` to move its controls; "
             "the figures above show the default parameters.")
DEFAULT_NOTE = LIVE_HINT

# Non-finite floats are not valid JSON (the kernel's message packer rejects them), so they travel tagged.
_FLOAT_TAG = "$float"


# --------------------------------------------------------------------------------------------------
# plotly


def setup_notebook(renderer: str | None = None, template: str = "plotly") -> None:
    """Configure plotly for a notebook that must render live and in exported HTML; idempotent.

    The renderer is, in order: ``renderer``, env ``PLOTLY_RENDERER``, ``"plotly_mimetype"``. The default renders
    through the mime renderer in JupyterLab and Voila and stores only the figure's JSON, so a notebook saved from
    a plain ``jupyter lab`` stays small (the offline renderer inlines 4.8 MB of plotly.js into it: issue 20
    §1.10). The report builder and the tests select ``"plotly_mimetype+notebook"``, which also stores an HTML
    version of each figure with plotly.js inlined once, so the exported report works offline: export with
    ``make report``. Calling it again with the same settings changes nothing (plotly.js is not inlined twice).
    Returns None so the call leaves no ``Out[...]`` line in the report.
    """
    import plotly.io as pio

    name = renderer or os.environ.get("PLOTLY_RENDERER") or DEFAULT_RENDERER
    if pio.renderers.default != name:
        pio.renderers.default = name
    if pio.templates.default != template:
        pio.templates.default = template
    _watch_headlines()


# --------------------------------------------------------------------------------------------------
# headlines and the summary

#: {cell: title} of the figures shown so far, in the order they were first shown (a cell run again replaces its
#: own); filled by an IPython ``post_run_cell`` hook that :func:`setup_notebook` registers
_HEADLINES: dict[str, str] = {}


def headline_text(title: str) -> str:
    """A figure title as plain text: ``<br>`` breaks become spaces, other tags go, entities are decoded."""
    import html

    text = re.sub(r"<br\s*/?>", " ", str(title or ""), flags=re.I)
    text = html.unescape(re.sub(r"<[^>]+>", "", text))
    return " ".join(text.split())


def _figure_title(value: Any) -> str:
    layout = getattr(value, "layout", None)
    title = getattr(getattr(layout, "title", None), "text", None) if layout is not None else None
    return headline_text(title) if isinstance(title, str) and type(value).__module__.startswith("plotly") else ""


def _on_cell(result) -> None:
    title = _figure_title(getattr(result, "result", None))
    if title:
        info = getattr(result, "info", None)
        key = getattr(info, "cell_id", None) or getattr(info, "raw_cell", None) or str(len(_HEADLINES))
        _HEADLINES[str(key)] = title


def _watch_headlines() -> None:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with the notebook stack
        return
    ip = get_ipython()
    if ip is None:
        return
    callbacks = ip.events.callbacks.get("post_run_cell", [])
    if _on_cell not in callbacks:
        _HEADLINES.clear()
        ip.events.register("post_run_cell", _on_cell)


def headlines() -> list[str]:
    """The titles of the figures this notebook has shown so far, in order (see :func:`summarize`)."""
    return list(_HEADLINES.values())


def summarize(intro: str = "In numbers, at the parameters of this run:") -> None:
    """Display the Summary's headline numbers: the title of every figure shown so far, one bullet each, as the
    notebook computed them (they follow ``-p`` parameters, where prose written by hand would go stale)."""
    from IPython.display import display

    items = headlines()
    if not items:
        raise UsageError("summarize: no figure has been shown yet (call setup_notebook() first, then show figures)")
    md = intro + "\n\n" + "\n".join(f"* {t}" for t in items)
    body = "".join(f"<li>{inline_html(t)}</li>" for t in items)
    display({"text/html": f'<div class="{FINDING_CLASS}">{inline_html(intro)}<ul>{body}</ul></div>',
             "text/markdown": md, "text/plain": md}, raw=True)


# --------------------------------------------------------------------------------------------------
# record / read_records


def _jsonable(value: Any, path: str) -> Any:
    """Return ``value`` as plain JSON types; numpy scalars/arrays become Python numbers/lists."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else {_FLOAT_TAG: repr(float(value))}
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        np = None
    if np is not None:
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.floating):
            return _jsonable(float(value), path)
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in "biuf":
                raise UsageError(f"record: {path} is a numpy array of dtype {value.dtype}; "
                                "only bool, integer and float arrays can be recorded")
            return [_jsonable(v, f"{path}[{i}]") for i, v in enumerate(value.tolist())]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise UsageError(f"record: {path} has a non-string key {k!r}; JSON object keys must be str")
            out[k] = _jsonable(v, f"{path}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise UsageError(f"record: {path} is a {type(value).__module__}.{type(value).__qualname__}, which is not "
                    "JSON-serialisable; record numbers, strings, bools, None, lists/dicts of those, or numpy "
                    "scalars/arrays (convert DataFrames with .to_dict() or pick the headline number)")


def _unjson(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {_FLOAT_TAG}:
            return float(value[_FLOAT_TAG])
        return {k: _unjson(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unjson(v) for v in value]
    return value


def _short_repr(value: Any, max_items: int = 8) -> str:
    """Readable text for a recorded value: floats to 4 significant digits, long lists elided.

    Only the ``text/plain`` shown in notebooks; the recorded JSON keeps full precision.
    """
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        items = [_short_repr(v, max_items) for v in value[:max_items]]
        return "[" + ", ".join(items + (["…"] if len(value) > max_items else [])) + "]"
    if isinstance(value, dict):
        items = [f"{k!r}: {_short_repr(v, max_items)}" for k, v in list(value.items())[:max_items]]
        return "{" + ", ".join(items + (["…"] if len(value) > max_items else [])) + "}"
    return repr(value)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _is_flat(value: Any) -> bool:
    """A scalar or a list of scalars (what fits on one line)."""
    return _is_scalar(value) or (isinstance(value, list) and all(_is_scalar(v) for v in value))


def record_text(name: str, value: Any, width: int = 110) -> str:
    """The one line a notebook shows for a recorded value (the report leaves records out).

    Scalars and flat lists read ``name = 26.43``; a mapping of those ``name: TP 36.61, DOP 26.43``; anything
    more nested is summarised (``name: 2 records``). Longer lines are cut at ``width`` characters with "…".
    """
    if _is_flat(value):
        text = f"{name} = {_short_repr(value)}"
    elif isinstance(value, dict) and all(_is_flat(v) for v in value.values()):
        text = f"{name}: " + ", ".join(f"{k} {_short_repr(v)}" for k, v in value.items())
    else:
        n = len(value)
        text = f"{name}: {n} {'record' if n == 1 else 'records'}"
    return text if len(text) <= width else text[: width - 1] + "…"


def keyed(table, key: str | list, value: str, *, sep: str = " | ") -> dict:
    """``{key: value}`` of every row of a tidy table, the form a notebook records a per-row headline in
    (``record("step_ms", keyed(table, "layout", "step_ms"))``). ``key``: a column, or columns whose text is
    joined with ``sep`` ("decode | ib-ndr400"); keys are the columns' text (``astype(str)``)."""
    cols = [key] if isinstance(key, str) else list(key)
    keys = table[cols[0]].astype(str)
    for c in cols[1:]:
        keys = keys + sep + table[c].astype(str)
    return dict(zip(keys, table[value]))


def record(name: str, value: Any) -> None:
    """Publish a JSON-serialisable value so tests can read it from the executed notebook.

    numpy scalars and arrays are converted; ``inf``/``nan`` survive the round trip. Anything else that is
    not JSON (a DataFrame, a spec object) raises ``TypeError`` naming the value's type. The notebook shows
    nothing in JupyterLab and Voila (an empty HTML output: a record is for the tests, not a line in a live app)
    and one readable line (:func:`record_text`) in plain-text front ends; the HTML reports leave records out,
    since each section states its finding in words (:func:`say`).
    """
    from IPython.display import display

    if not isinstance(name, str) or not name:
        raise UsageError(f"record: name must be a non-empty str, got {name!r}")
    payload = _jsonable(value, name)
    # JupyterLab and Voila render the empty HTML (the record is for the tests, not a debug line in a live app);
    # plain-text front ends (a console, nbconvert --to script) still show the readable line
    display({RECORD_MIME: {"name": name, "value": payload}, "text/html": RECORD_HTML,
             "text/plain": record_text(name, _unjson(payload))}, raw=True)


def record_all(values: Mapping[str, Any]) -> None:
    """:func:`record` every ``{name: value}`` of ``values``, in order (a findings function's headline records)."""
    for name, value in values.items():
        record(name, value)


def read_records(path: str | os.PathLike) -> dict[str, Any]:
    """Return ``{name: value}`` for every :func:`record` call in an executed notebook (last one wins)."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    return {p["name"]: _unjson(p["value"]) for c in nb.cells for o in c.get("outputs", [])
            if (p := o.get("data", {}).get(RECORD_MIME))}


# --------------------------------------------------------------------------------------------------
# findings

FINDING_CLASS = "llmexplore-finding"


def inline_html(text: str) -> str:
    """Markdown-lite to HTML: escaped, with ``**bold**``, ``*italic*`` and `` `code` `` spans."""
    import html

    body = html.escape(text)
    body = re.sub(r"`([^`]+)`", r"<code>\1</code>", body)
    body = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", body)
    return re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", body)


def say(text: str) -> None:
    """Display one generated finding (a sentence with the headline number) as a paragraph.

    The sentence comes from a package function (e.g. :func:`llmexplore.findings.layouts.best_layout_sentence`);
    JupyterLab and the reports show it as a paragraph, not as a code output.
    """
    from IPython.display import display

    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"say: expected a non-empty sentence (str), got {text!r}")
    display({"text/html": f'<p class="{FINDING_CLASS}">{inline_html(text.strip())}</p>',
             "text/markdown": text.strip(), "text/plain": text.strip()}, raw=True)


# --------------------------------------------------------------------------------------------------
# notebook parameters


def _registry() -> dict[str, Callable[[Mapping[str, Any]], dict[str, str]]]:
    from . import nbparams

    return {
        "00_index": nbparams.check_index_parameters,
        "05_fidelity": nbparams.check_fidelity_parameters,
        "10_attention_layouts": nbparams.check_layouts_parameters,
        "15_speculative_decoding": nbparams.check_speculative_parameters,
        "20_pd_disaggregation": nbparams.check_disagg_parameters,
        "30_moe_expert_parallel": nbparams.check_moe_parameters,
        "40_kv_transfer": nbparams.check_transfer_parameters,
        "50_ssd_offload": nbparams.check_offload_parameters,
        "60_deployment_planner": nbparams.check_plan_parameters,
    }


def parameter_checker(notebook: str | os.PathLike) -> Callable[[Mapping[str, Any]], dict[str, str]] | None:
    """The package function that validates the parameters of ``notebook`` (a path, file name or stem), or
    None for a notebook without one (test fixtures).

    A checker takes ``{NAME: value}`` (every parameter of the notebook), raises
    :class:`~llmexplore.errors.SpecError` naming the parameter for a value that is wrong everywhere, and
    returns ``{NAME: why}`` for values that are fine in general but do not apply to this notebook (a dense
    ``MODEL`` for the MoE notebook). One registry line per notebook.
    """
    stem = Path(notebook).name
    stem = stem[: -len(".ipynb")] if stem.endswith(".ipynb") else stem
    return _registry().get(stem)


def check_parameters(notebook: str, namespace: Mapping[str, Any]) -> None:
    """Validate a notebook's parameters right after its imports: one clear error instead of a failure deep
    inside a later cell. ``namespace`` is the notebook's ``globals()``; its UPPER_CASE names are checked.

    Raises :class:`~llmexplore.errors.SpecError` naming the parameter, its value and the rule (or why it
    does not apply to this notebook). Returns None, so the call leaves no output.
    """
    checker = parameter_checker(notebook)
    if checker is None:
        raise UsageError(f"check_parameters: no parameter check is registered for notebook {notebook!r}; "
                         f"known: {sorted(_registry())}")
    params = {k: v for k, v in namespace.items() if re.fullmatch(r"[A-Z][A-Z0-9_]*", k)}
    try:
        not_applicable = checker(params)
    except SpecError as exc:
        raise SpecError(f"notebook parameter {exc}") from None
    except KeyError as exc:
        raise UsageError(f"check_parameters: {notebook} needs parameter {exc.args[0]!r}, which is not "
                         "defined; pass the notebook's globals()") from None
    if not_applicable:
        name, why = next(iter(not_applicable.items()))
        raise SpecError(f"notebook parameter {name} = {params.get(name)!r} does not apply to this notebook: {why}")


# --------------------------------------------------------------------------------------------------
# widgets


def note_html(note: str) -> str:
    """The HTML that stands in for a live widget in static reports (`code` spans become <code>)."""
    import html

    body = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(note))
    return f'<div class="llmexplore-widget-note"><p><em>{body}</em></p></div>'


def _sync_figure_widgets(widget: Any, _seen: set[int] | None = None) -> None:
    """Push the current state of every ``go.FigureWidget`` inside ``widget`` to its model before display.

    plotly (6.x-7.x, anywidget) sends edits made before a FigureWidget is first rendered as one-shot
    ``_py2js_*`` events that a front end created later never sees; plotly only re-syncs the full state in
    ``FigureWidget._repr_mimebundle_`` (plotly/plotly.py#4956), which is not called for a figure nested in
    a ``VBox``. Without this, an explorer whose figure is filled by ``update()`` before display renders
    empty (or with its constructor's state) in JupyterLab and Voila.
    """
    seen = set() if _seen is None else _seen
    if id(widget) in seen:
        return
    seen.add(id(widget))
    try:
        from plotly.basewidget import BaseFigureWidget
    except ImportError:  # pragma: no cover - plotly without anywidget
        BaseFigureWidget = ()
    if BaseFigureWidget and isinstance(widget, BaseFigureWidget):
        widget._repr_mimebundle_()  # sets _widget_layout/_widget_data from the figure's current state
        return
    for child in getattr(widget, "children", None) or ():
        _sync_figure_widgets(child, seen)


def status_text(widget: Any) -> str:
    """Plain text of an explorer's status line ('' if it has none): ``status_text`` (attribute or method)
    when the explorer provides it, else its ``status`` HTML widget with the tags removed."""
    import html

    text = getattr(widget, "status_text", None)
    if callable(text):
        text = text()
    if not isinstance(text, str):
        status = getattr(widget, "status", None)
        value = getattr(status, "value", None)
        text = html.unescape(re.sub(r"<[^>]+>", "", value)) if isinstance(value, str) else ""
    return " ".join(text.split())


def explorer_note(widget: Any) -> str:
    """What a static report shows in place of an explorer: its status line, then how to open it live."""
    status = status_text(widget)
    if not status:
        return LIVE_HINT
    return f"{status.rstrip('.')}. {LIVE_HINT}"


def show(widget: Any, note: str | None = None, *, static: Any = None) -> None:
    """Display a live widget; static HTML (nbconvert, no kernel) shows ``note`` instead.

    ``note`` defaults to :func:`explorer_note`: the explorer's own status line for the default parameters,
    then how to open it live.

    The output carries the widget view (rendered by JupyterLab and Voila, which rank it above HTML) plus
    ``text/html`` and ``text/plain`` versions of the note. nbconvert renders the widget view only when the
    notebook's saved widget state holds that model, and the reports drop that state, so they show the
    note rather than a raw ``VBox(...)`` repr or an empty box. Accepts any ipywidget (or an object with a
    ``.view`` widget, like the explorers in :mod:`llmexplore.widgets`).

    It also pushes the current state of nested ``go.FigureWidget`` s to the front end first (see
    :func:`_sync_figure_widgets`): display explorers with ``show()``, not as a bare ``.view``.

    ``static``: a plotly figure of what the explorer opens on, for the reports only: it stands in the static
    HTML above the note (the live front ends show the explorer instead, so a live page has no stale copy of
    it), and its title counts as a headline for :func:`summarize`.
    """
    from IPython.display import display

    view = getattr(widget, "view", widget)
    if note is None:
        note = explorer_note(widget)
    if not callable(getattr(view, "_repr_mimebundle_", None)):
        raise UsageError(f"show: expected an ipywidget or an object with a .view widget, got {type(view).__qualname__}")
    _sync_figure_widgets(view)
    bundle = view._repr_mimebundle_()
    if isinstance(bundle, tuple):  # (data, metadata) form
        bundle = bundle[0]
    if not bundle or WIDGET_VIEW_MIME not in bundle:
        raise UsageError(f"show: {type(view).__qualname__} is not a displayable widget")
    data = {
        WIDGET_VIEW_MIME: bundle[WIDGET_VIEW_MIME],
        "text/html": note_html(note),
        "text/plain": note,
        NOTE_MIME: {"note": note},
    }
    if static is not None:
        import plotly.io as pio

        if _figure_title(static):
            _HEADLINES[f"show:{_figure_title(static)}"] = _figure_title(static)
        # the figure as the renderer would display it (plotly.js is on the page from the earlier figures)
        figure_html = pio.to_html(static, full_html=False, include_plotlyjs=False)
        data["text/html"] = figure_html + data["text/html"]
        data[PLOTLY_MIME] = static.to_plotly_json()
    display(data, raw=True)


# --------------------------------------------------------------------------------------------------
# papermill engine


def _make_engine():
    """Build the engine class on first use: importing papermill costs ~1.5 s, which notebooks should not pay."""
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine
    from papermill.log import logger
    from papermill.utils import merge_kwargs, remove_args

    class QuietWidgetEngine(NBClientEngine):
        """papermill engine ``"llmexplore"``: nbclient with ``widget_registry = {}``.

        nbclient normally emulates ``ipywidgets.Output`` by sending on the shell socket while it awaits
        the cell's reply; about 1 run in 7 then stalls until the timeout (jupyter/nbclient#312). With an
        empty registry nothing is emulated: widget state is still recorded, Output widgets just keep no
        outputs. The kernel process's own stderr goes to /dev/null: cell output (warnings included) still
        arrives through the kernel's messages, and a timeout no longer dumps the kernel's shutdown traceback
        into the terminal. Registered under the ``papermill.engine`` entry point; use
        ``engine_name="llmexplore"``.
        """

        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, log_output=False, stdout_file=None,
                                     stderr_file=None, start_timeout=60, execution_timeout=None, **kwargs):
            # Same as NBClientEngine.execute_managed_notebook, plus the empty widget registry.
            kwargs = remove_args(["input_path"], **kwargs)
            safe_kwargs = remove_args(["timeout", "startup_timeout"], **kwargs)
            final_kwargs = merge_kwargs(
                safe_kwargs,
                timeout=execution_timeout if execution_timeout else kwargs.get("timeout"),
                startup_timeout=start_timeout,
                kernel_name=kernel_name,
                log=logger,
                log_output=log_output,
                stdout_file=stdout_file,
                stderr_file=stderr_file,
            )
            client = PapermillNotebookClient(nb_man, **final_kwargs)
            client.widget_registry = {}
            return client.execute(stderr=subprocess.DEVNULL)

    QuietWidgetEngine.__module__ = __name__
    QuietWidgetEngine.__qualname__ = "QuietWidgetEngine"
    return QuietWidgetEngine


_ENGINE = None


def __getattr__(name: str):
    # Lazy module attribute (PEP 562) so `import llmexplore.nbtools` stays cheap inside notebooks.
    global _ENGINE
    if name == "QuietWidgetEngine":
        if _ENGINE is None:
            _ENGINE = _make_engine()
        return _ENGINE
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def cell_durations(path_or_nb: Any) -> list[tuple[int, float]]:
    """``[(cell_index, seconds), ...]`` for the code cells papermill timed in an executed notebook."""
    import nbformat

    nb = path_or_nb
    if isinstance(path_or_nb, (str, os.PathLike, Path)):
        nb = nbformat.read(str(path_or_nb), as_version=4)
    out = []
    for i, cell in enumerate(nb.cells):
        duration = cell.get("metadata", {}).get("papermill", {}).get("duration")
        if cell.cell_type == "code" and duration is not None:
            out.append((i, float(duration)))
    return out
