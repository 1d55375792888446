"""report.py pieces that need no kernel: parameter parsing, titles, cleaning, offline export, index."""

import nbformat
import pytest

from llmexplore import report
from llmexplore.errors import SpecError
from llmexplore.nbtools import WIDGET_VIEW_MIME, note_html
from llmexplore.report import parse_param_value, remote_resources


@pytest.mark.parametrize("text, expected", [
    ("8", 8), ("-3", -3), ("0.5", 0.5), ("1e3", 1000.0), (".25", 0.25), ("inf", float("inf")),
    ("true", True), ("True", True), ("FALSE", False), ("none", None),
    ("h200_sxm", "h200_sxm"), ("llama3_70b", "llama3_70b"), ("1e", "1e"), ("nan_model", "nan_model"), ("", ""),
])
def test_parse_param_value(text, expected):
    value = parse_param_value(text)
    assert value == expected and type(value) is type(expected)


def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


def test_title_and_description_from_markdown():
    nb = _nb(nbformat.v4.new_code_cell("X = 1"),
             nbformat.v4.new_markdown_cell("# Attention **layouts**\n\nWhich [layout](https://x) wins at decode? "
                                           "More text here.\n\n- overview"))
    assert report.notebook_title(nb) == "Attention layouts"
    assert report.notebook_description(nb) == "Which layout wins at decode?"


def test_title_and_description_missing():
    nb = _nb(nbformat.v4.new_markdown_cell("## Only a heading\n\n- a list"))
    assert report.notebook_title(nb) == "Only a heading"
    assert report.notebook_description(nb) == ""


def test_description_is_truncated_to_one_line():
    nb = _nb(nbformat.v4.new_markdown_cell("# T\n\n" + "word " * 100))
    desc = report.notebook_description(nb)
    assert len(desc) <= 200 and desc.endswith("…") and "\n" not in desc


def _output(data):
    return nbformat.v4.new_output("display_data", data=data)


def test_clean_for_report_replaces_widgets_and_strips_remote_tags():
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [
        _output({WIDGET_VIEW_MIME: {"model_id": "a"}, "text/plain": "VBox(children=(...))"}),
        _output({WIDGET_VIEW_MIME: {"model_id": "b"}, "text/html": note_html("mine"), "text/plain": "mine"}),
        _output({"text/html": '<script src="https://cdnjs.cloudflare.com/mathjax.js"></script>'
                              '<link rel="stylesheet" href="//cdn.x/a.css"><div id="plot">ok</div>'}),
        nbformat.v4.new_output("stream", name="stderr", text="DeprecationWarning: ..."),
        nbformat.v4.new_output("stream", name="stdout", text="kept"),
    ]
    nb = _nb(cell)
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"a": {}}}}
    cleaned, notes = report.clean_for_report(nb)
    outs = cleaned.cells[0].outputs
    assert "widgets" not in cleaned.metadata and "widgets" in nb.metadata  # input untouched
    assert all(WIDGET_VIEW_MIME not in o.get("data", {}) for o in outs)
    assert "Live explorer" in outs[0].data["text/html"] and "VBox" not in outs[0].data["text/plain"]
    assert "mine" in outs[1].data["text/html"]
    assert outs[2].data["text/html"] == '<div id="plot">ok</div>'
    assert [o.get("name") for o in outs if o.output_type == "stream"] == ["stdout"]
    assert any("stderr" in n for n in notes) and any("nbtools.show" in n for n in notes)


def test_remote_resources_finds_loads_not_links():
    page = """<html><head><script src="https://cdn.example/a.js"></script><script src="local.js"></script>
    <link rel="stylesheet" href="//cdn.example/b.css"><style>@import "https://f.example/c.css";</style>
    <script type="module">import "https://cdn.plot.ly/plotly.min"</script></head>
    <body><a href="https://docs.example">docs</a><img src="data:image/png;base64,AAA">
    <img srcset="x.png 1x, https://i.example/y.png 2x"><script>var s = "https://in.a.string/";</script></body></html>"""
    assert remote_resources(page) == ["https://cdn.example/a.js", "//cdn.example/b.css", "https://f.example/c.css",
                                      "https://cdn.plot.ly/plotly.min", "https://i.example/y.png"]


def test_export_html_has_no_cdn_and_no_inputs(tmp_path):
    code = nbformat.v4.new_code_cell("SECRET_SOURCE = 1")
    code.outputs = [_output({"text/html": "<b>visible output</b>", "text/plain": "x"})]
    nb = _nb(nbformat.v4.new_markdown_cell("# Title\n\nSome $x$ text."), code)
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2,
                                                                            "version_minor": 0}}
    cleaned, _ = report.clean_for_report(nb)
    page = report.export_html(cleaned, tmp_path / "t.html").read_text()
    assert "<b>visible output</b>" in page and "SECRET_SOURCE" not in page
    assert remote_resources(page) == []
    for cdn in ("cdnjs", "unpkg", "jsdelivr", "require.min.js", "mathjax"):
        assert cdn not in page.lower()


def test_write_index_lists_reports_offline(tmp_path):
    ok = report._Outcome(tmp_path / "10_a.ipynb", html=tmp_path / "10_a.html", title="A & B", description="Why?")
    bad = report._Outcome(tmp_path / "20_b.ipynb", title="B", error="cell 3: ValueError: boom")
    page = report.write_index([ok, bad], tmp_path, {"BATCH": 8}).read_text()
    assert '<a href="10_a.html">A &amp; B</a>' in page and "Why?" in page
    assert "failed: cell 3: ValueError: boom" in page and "BATCH=8" in page
    assert remote_resources(page) == []


def test_build_reports_rejects_unknown_parameter_before_running(tmp_path):
    fixture = report.REPO_ROOT / "tests" / "fixtures" / "explorer_fixture.ipynb"
    with pytest.raises(SpecError, match=r"\[.BATCHX.\] are not defined"):
        report.build_reports(tmp_path, parameters={"BATCHX": 1}, notebooks=[fixture], progress=False)
    assert not (tmp_path / "index.html").exists()


def test_build_reports_refuses_to_write_into_notebook_dir(tmp_path):
    src = tmp_path / "nb.ipynb"
    nbformat.write(_nb(nbformat.v4.new_markdown_cell("# x")), src)
    with pytest.raises(SpecError, match="overwrite the source notebooks"):
        report.build_reports(tmp_path, notebooks=[src], progress=False)


def test_build_reports_missing_notebook(tmp_path):
    with pytest.raises(SpecError, match="notebook not found: nope.ipynb"):
        report.build_reports(tmp_path, notebooks=["nope.ipynb"], progress=False)
