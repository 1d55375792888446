"""nbtools without a kernel: record/read_records, setup_notebook, show, the papermill engine."""

import math

import nbformat
import numpy as np
import pytest

from llmexplore import nbtools
from llmexplore.nbtools import RECORD_MIME, WIDGET_VIEW_MIME


@pytest.fixture
def displayed(monkeypatch):
    """Capture what nbtools passes to IPython's display()."""
    calls = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: calls.append((obj, raw)))
    return calls


def _notebook_with(outputs_per_cell):
    nb = nbformat.v4.new_notebook()
    for outputs in outputs_per_cell:
        cell = nbformat.v4.new_code_cell("pass")
        cell.outputs = [nbformat.v4.new_output("display_data", data=d) for d in outputs]
        nb.cells.append(cell)
    return nb


def test_record_publishes_custom_mime_and_text_fallback(displayed):
    nbtools.record("best_batch", np.int64(8))
    (bundle, raw), = displayed
    assert raw is True
    assert bundle[RECORD_MIME] == {"name": "best_batch", "value": 8}
    assert type(bundle[RECORD_MIME]["value"]) is int
    assert bundle["text/plain"] == "best_batch = 8"


@pytest.mark.parametrize("value, expected", [
    (np.float32(0.5), 0.5),
    (np.bool_(True), True),
    (np.arange(3), [0, 1, 2]),
    (np.array([[1.5, 2.0]]), [[1.5, 2.0]]),
    ({"a": np.int32(1), "b": (1, 2)}, {"a": 1, "b": [1, 2]}),
    ("h200", "h200"),
    (None, None),
])
def test_record_converts_numpy_and_containers(displayed, value, expected):
    nbtools.record("x", value)
    assert displayed[0][0][RECORD_MIME]["value"] == expected


@pytest.mark.parametrize("value, match", [
    (object(), "builtins.object.*not JSON-serialisable"),
    ({1: 2}, "non-string key"),
    (np.array(["a"]), "dtype <U1"),
    ([1, {2}], r"x\[1\] is a builtins.set"),
])
def test_record_rejects_non_json_values_clearly(displayed, value, match):
    with pytest.raises(TypeError, match=match):
        nbtools.record("x", value)
    assert displayed == []


def test_record_rejects_dataframe_with_hint(displayed):
    pd = pytest.importorskip("pandas")
    with pytest.raises(TypeError, match="DataFrame.*to_dict"):
        nbtools.record("df", pd.DataFrame({"a": [1]}))


def test_read_records_round_trip_including_non_finite_floats(displayed, tmp_path):
    values = {"inf": float("inf"), "neg": -np.inf, "nan": np.nan, "n": 3, "arr": np.array([1.0, np.inf])}
    for k, v in values.items():
        nbtools.record(k, v)
    nb = _notebook_with([[bundle] for bundle, _ in displayed] + [[{"text/plain": "noise"}]])
    path = tmp_path / "out.ipynb"
    nbformat.write(nb, path)  # must be valid JSON: non-finite floats travel tagged
    got = nbtools.read_records(path)
    assert got["inf"] == math.inf and got["neg"] == -math.inf and math.isnan(got["nan"])
    assert got["n"] == 3 and got["arr"] == [1.0, math.inf]
    assert "inf" in displayed[0][0]["text/plain"]


def test_read_records_last_value_wins(tmp_path):
    nb = _notebook_with([[{RECORD_MIME: {"name": "a", "value": 1}}], [{RECORD_MIME: {"name": "a", "value": 2}}]])
    nbformat.write(nb, tmp_path / "o.ipynb")
    assert nbtools.read_records(tmp_path / "o.ipynb") == {"a": 2}


def test_setup_notebook_sets_offline_renderer_and_is_idempotent(monkeypatch):
    import plotly.io as pio

    monkeypatch.delenv("PLOTLY_RENDERER", raising=False)
    monkeypatch.setattr(pio.renderers, "default", pio.renderers.default)
    monkeypatch.setattr(pio.templates, "default", "simple_white")
    assert nbtools.setup_notebook() is None
    # a plain `jupyter lab`: figures as JSON only, so a saved notebook does not carry 4.8 MB of plotly.js
    assert pio.renderers.default == "plotly_mimetype"
    assert nbtools.setup_notebook(renderer=nbtools.OFFLINE_RENDERER) is None
    assert pio.renderers.default == "plotly_mimetype+notebook"
    assert pio.templates.default == "plotly"
    # Once the renderer has been activated (plotly.js inlined), a second call must not schedule it again,
    # or every re-run of the imports cell would inline another 4.8 MB copy of plotly.js.
    pio.renderers._to_activate = []
    nbtools.setup_notebook(renderer=nbtools.OFFLINE_RENDERER)
    assert pio.renderers._to_activate == []


def test_setup_notebook_honours_env(monkeypatch):
    import plotly.io as pio

    monkeypatch.setattr(pio.renderers, "default", pio.renderers.default)
    monkeypatch.setenv("PLOTLY_RENDERER", "plotly_mimetype")
    nbtools.setup_notebook()
    assert pio.renderers.default == "plotly_mimetype"
    nbtools.setup_notebook(renderer="notebook")
    assert pio.renderers.default == "notebook"


def test_show_displays_widget_view_with_note_fallbacks(displayed):
    import ipywidgets as W

    box = W.VBox([W.IntSlider()])
    nbtools.show(box, note="Use `make lab` for the live version")
    (bundle, raw), = displayed
    assert raw is True
    assert bundle[WIDGET_VIEW_MIME]["model_id"] == box.model_id
    assert bundle["text/plain"] == "Use `make lab` for the live version"
    assert "<code>make lab</code>" in bundle["text/html"]
    assert "VBox(" not in bundle["text/html"]


def test_show_accepts_explorer_objects_with_view(displayed):
    import ipywidgets as W

    class Explorer:
        view = W.HBox()

    nbtools.show(Explorer())
    assert displayed[0][0][WIDGET_VIEW_MIME]["model_id"] == Explorer.view.model_id


def test_show_rejects_non_widgets(displayed):
    with pytest.raises(TypeError, match="expected an ipywidget"):
        nbtools.show(42)


def test_engine_is_registered_and_empties_widget_registry(monkeypatch):
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import papermill_engines

    engine = papermill_engines.get_engine("llmexplore")
    assert engine is nbtools.QuietWidgetEngine
    seen = {}

    def fake_execute(self, **kwargs):
        seen["registry"] = dict(self.widget_registry)
        seen["timeout"] = self.timeout
        seen["kernel_stderr"] = kwargs.get("stderr")
        return self.nb

    monkeypatch.setattr(PapermillNotebookClient, "execute", fake_execute)

    class NbMan:
        nb = nbformat.v4.new_notebook()

    engine.execute_managed_notebook(NbMan(), "python3", execution_timeout=17)
    import subprocess

    assert seen == {"registry": {}, "timeout": 17, "kernel_stderr": subprocess.DEVNULL}


def test_cell_durations_reads_papermill_metadata():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), nbformat.v4.new_code_cell("1"), nbformat.v4.new_code_cell("2")]
    nb.cells[1].metadata["papermill"] = {"duration": 0.25}
    nb.cells[2].metadata["papermill"] = {"duration": None}
    assert nbtools.cell_durations(nb) == [(1, 0.25)]


def test_show_syncs_nested_figurewidgets_edited_before_display(displayed):
    """plotly only syncs a FigureWidget's full state when it is displayed itself, not inside a VBox."""
    import ipywidgets as W
    import plotly.graph_objects as go

    fig = go.FigureWidget()
    fig.add_scatter(name="a")
    with fig.batch_update():
        fig.data[0].y = [1, 2, 3]
    fig.update_layout(height=333)
    assert fig._widget_data == []  # what a front end would render without the sync
    nbtools.show(W.VBox([W.HBox([W.IntSlider()]), W.VBox([fig])]))
    assert [t["name"] for t in fig._widget_data] == ["a"]
    assert list(fig._widget_data[0]["y"]) == [1, 2, 3]
    assert fig._widget_layout["height"] == 333


def test_record_text_is_short_but_value_keeps_precision(displayed):
    nbtools.record("t", {"DOP": 22.445614454691324, "TP": 1e-7, "n": 3, "xs": list(range(20))})
    bundle = displayed[0][0]
    assert bundle["text/plain"] == "t: DOP 22.45, TP 1e-07, n 3, xs [0, 1, 2, 3, 4, 5, 6, 7, …]"
    assert bundle[RECORD_MIME]["value"]["DOP"] == 22.445614454691324


@pytest.mark.parametrize("value, text", [
    (26.4321, "x = 26.43"), ("DOP", "x = 'DOP'"), (None, "x = None"), ([1, 2], "x = [1, 2]"),
    ({"TP": 36.61, "DOP": 26.43}, "x: TP 36.61, DOP 26.43"),
    ([{"batch": 64, "context": 1186.3}, {"batch": 64}], "x: 2 records"),
    ({"a": {"b": 1}}, "x: 1 record"),
    ({f"k{i}": 1.0 for i in range(40)}, None),
])
def test_record_text_is_one_readable_line(value, text):
    line = nbtools.record_text("x", value)
    assert "\n" not in line and len(line) <= 110
    if text is not None:
        assert line == text
    else:
        assert line.endswith("…")


def test_say_displays_a_paragraph(displayed):
    nbtools.say("**DOP** is fastest at 26.4 ms per step; `TP` overtakes it below 1,186 tokens <b>")
    (bundle, raw), = displayed
    assert raw is True
    assert bundle["text/html"] == ('<p class="llmexplore-finding"><strong>DOP</strong> is fastest at 26.4 ms per '
                                   'step; <code>TP</code> overtakes it below 1,186 tokens &lt;b&gt;</p>')
    assert bundle["text/markdown"].startswith("**DOP**") and bundle["text/plain"].startswith("**DOP**")


@pytest.mark.parametrize("bad", ["", "   ", None, 3])
def test_say_wants_a_sentence(displayed, bad):
    with pytest.raises(TypeError, match="say: expected a non-empty sentence"):
        nbtools.say(bad)


def test_every_notebook_has_a_parameter_check():
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb")):
        assert nbtools.parameter_checker(path) is not None, f"register a parameter check for {path.name}"
    assert nbtools.parameter_checker("tests/fixtures/explorer_fixture.ipynb") is None
    assert nbtools.parameter_checker("10_attention_layouts") is nbtools.parameter_checker("x/10_attention_layouts.ipynb")


def _defaults(stem):
    import ast

    import papermill as pm

    from llmexplore.report import NOTEBOOK_DIR

    info = pm.inspect_notebook(str(NOTEBOOK_DIR / f"{stem}.ipynb"))
    return {k: ast.literal_eval(v["default"]) for k, v in info.items()}


def test_check_parameters_passes_the_defaults_and_ignores_other_names():
    ns = {**_defaults("10_attention_layouts"), "plots": object(), "_X": 1, "lower": 2}
    assert nbtools.check_parameters("10_attention_layouts", ns) is None


def test_check_parameters_names_the_parameter():
    ns = {**_defaults("10_attention_layouts"), "CONTEXT_MAX": 128}
    with pytest.raises(nbtools.SpecError, match=r"^notebook parameter CONTEXT_MAX must be greater than CONTEXT_MIN"):
        nbtools.check_parameters("10_attention_layouts", ns)
    ns = {**_defaults("30_moe_expert_parallel"), "MODEL": "llama-3-70b"}
    with pytest.raises(nbtools.SpecError, match=r"MODEL = 'llama-3-70b' does not apply to this notebook: .*dense"):
        nbtools.check_parameters("30_moe_expert_parallel", ns)
    ns = {**_defaults("00_index"), "KIND": "gpus"}
    with pytest.raises(nbtools.SpecError, match=r"KIND must be one of"):
        nbtools.check_parameters("00_index", ns)


def test_check_parameters_usage_errors():
    with pytest.raises(TypeError, match="no parameter check is registered for notebook 'nope'"):
        nbtools.check_parameters("nope", {})
    with pytest.raises(TypeError, match="needs parameter 'KIND'"):
        nbtools.check_parameters("00_index", {})


def test_show_puts_the_explorers_status_line_in_the_note(displayed):
    import ipywidgets as W

    class WithText:
        view = W.VBox()
        status_text = "Best: DOP, 26.4 ms per step."

    class WithMethod:
        view = W.VBox()

        def status_text(self):
            return "Fewest GPUs: 72"

    class WithStatusWidget:
        view = W.VBox()
        status = W.HTML('<b>Best: DOP</b> &mdash; 26.43 ms/step')

    for explorer in (WithText(), WithMethod(), WithStatusWidget()):
        nbtools.show(explorer)
    notes = [bundle["text/plain"] for bundle, _ in displayed]
    assert notes[0].startswith("Best: DOP, 26.4 ms per step. Live explorer: open the notebook with `make lab`")
    assert notes[1].startswith("Fewest GPUs: 72. Live explorer")
    assert notes[2].startswith("Best: DOP — 26.43 ms/step. Live explorer")
    assert "<code>make lab</code>" in displayed[0][0]["text/html"]
    nbtools.show(W.VBox())  # a plain widget: the hint alone
    assert displayed[-1][0]["text/plain"] == nbtools.LIVE_HINT


def test_keyed_is_the_per_row_headline_of_a_tidy_table():
    import pandas as pd

    from llmexplore.nbtools import keyed

    t = pd.DataFrame({"mode": ["colocated", "decode"], "link": ["-", "ib"], "tokens": [512, 1024],
                      "gpus": [16, 12.5]})
    assert keyed(t, "mode", "gpus") == {"colocated": 16.0, "decode": 12.5}
    assert keyed(t, ["mode", "link"], "gpus") == {"colocated | -": 16.0, "decode | ib": 12.5}
    assert keyed(t, ["mode", "link"], "tokens", sep="->") == {"colocated->-": 512, "decode->ib": 1024}
    assert list(keyed(t, "tokens", "gpus")) == ["512", "1024"]  # keys are text, as a record's must be
