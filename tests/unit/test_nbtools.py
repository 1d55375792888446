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
    assert pio.renderers.default == "plotly_mimetype+notebook"
    assert pio.templates.default == "plotly"
    # Once the renderer has been activated (plotly.js inlined), a second call must not schedule it again,
    # or every re-run of the imports cell would inline another 4.8 MB copy of plotly.js.
    pio.renderers._to_activate = []
    nbtools.setup_notebook()
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
        return self.nb

    monkeypatch.setattr(PapermillNotebookClient, "execute", fake_execute)

    class NbMan:
        nb = nbformat.v4.new_notebook()

    engine.execute_managed_notebook(NbMan(), "python3", execution_timeout=17)
    assert seen == {"registry": {}, "timeout": 17}


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
    assert bundle["text/plain"] == "t = {'DOP': 22.45, 'TP': 1e-07, 'n': 3, 'xs': [0, 1, 2, 3, 4, 5, 6, 7, …]}"
    assert bundle[RECORD_MIME]["value"]["DOP"] == 22.445614454691324
