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
    assert report.notebook_description(nb) == "Which layout wins at decode? More text here."


def test_title_and_description_missing():
    nb = _nb(nbformat.v4.new_markdown_cell("## Only a heading\n\n- a list"))
    assert report.notebook_title(nb) == "Only a heading"
    assert report.notebook_description(nb) == ""


def test_description_is_whole_sentences_on_one_line():
    long = "A first sentence that is long " + "and longer " * 20 + "at last."
    nb = _nb(nbformat.v4.new_markdown_cell(f"# T\n\n**Question.** {long}\nIt goes on. And on."))
    assert report.notebook_description(nb) == long  # whole, never cut with "…"; the label dropped
    nb = _nb(nbformat.v4.new_markdown_cell("# T\n\nShort one.\nSecond one? Third!\n\nNot this."))
    assert report.notebook_description(nb) == "Short one. Second one? Third!"
    nb = _nb(nbformat.v4.new_markdown_cell("# T\n\nThis notebook shows:\n\n- a list\n\nNo full stop"))
    assert report.notebook_description(nb) == "No full stop."
    # issue 20 §1.7: a paragraph that leads into a list keeps its sentences; "i.e." ends none; code spans read plain
    nb = _nb(nbformat.v4.new_markdown_cell("# T\n\nIt trusts the `step` model, i.e. the kernels. How far? It "
                                           "compares two kinds:\n\n* a\n* b"))
    assert report.notebook_description(nb) == "It trusts the step model, i.e. the kernels. How far?"


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
    assert "failed: cell 3: ValueError: boom" in page and "BATCH = 8" in page
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


# ---- notebook parameters -------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("[512, 1024]", [512, 1024]), ("[0.0, 0.5]", [0.0, 0.5]), ("(1, 2)", (1, 2)), ('{"a": 1}', {"a": 1}),
    ("'h200'", "h200"), ('"x y"', "x y"), ("[true, null]", [True, None]), ("[]", []),
])
def test_parse_param_value_reads_literals_safely(text, expected):
    assert parse_param_value(text, "X") == expected


@pytest.mark.parametrize("text", ["[512, 1024", "[__import__('os')]", "{1: [", "[" * 5000])
def test_parse_param_value_rejects_a_broken_literal_naming_the_parameter(text):
    with pytest.raises(SpecError, match=r"^-p PROMPTS .*not a valid Python or JSON literal"):
        parse_param_value(text, "PROMPTS")


def test_parse_param_value_bounds_the_text():
    with pytest.raises(SpecError, match=r"-p BIG: the value is 10,001 characters long; at most 10,000"):
        parse_param_value("1" * 10_001, "BIG")


NB = report.NOTEBOOK_DIR


def test_notebook_names_resolve_with_or_without_suffix():
    assert report._resolve_notebooks(["10_attention_layouts"]) == [NB / "10_attention_layouts.ipynb"]
    assert report._resolve_notebooks(["30_moe_expert_parallel.ipynb", "00_index"]) == [
        NB / "00_index.ipynb", NB / "30_moe_expert_parallel.ipynb"]


def test_unknown_notebook_lists_the_valid_names():
    with pytest.raises(SpecError) as info:
        report._resolve_notebooks(["10_attention"])
    text = str(info.value)
    assert "notebook not found: 10_attention" in text and "\n" not in text
    assert all(name in text for name in report.notebook_names())


def test_plan_skips_a_parameter_where_it_does_not_apply():
    paths = report._resolve_notebooks(None)
    given, notes = report.plan_parameters(paths, {"MODEL": "llama-3-70b"})
    moe = NB / "30_moe_expert_parallel.ipynb"
    assert "MODEL" not in given[moe]
    assert given[NB / "10_attention_layouts.ipynb"] == {"MODEL": "llama-3-70b"}
    assert given[NB / "20_pd_disaggregation.ipynb"] == {"MODEL": "llama-3-70b"}
    (note,) = notes[moe]
    assert "-p MODEL 'llama-3-70b' skipped here" in note and "dense model" in note and "deepseek-v3" in note
    assert notes[NB / "10_attention_layouts.ipynb"] == []


def test_plan_fails_when_a_parameter_applies_nowhere():
    with pytest.raises(SpecError, match=r"-p MODEL 'llama-3-70b' applies to no selected notebook \(30_moe"):
        report.plan_parameters([NB / "30_moe_expert_parallel.ipynb"], {"MODEL": "llama-3-70b"})


@pytest.mark.parametrize("params, match", [
    ({"BATCH": "abc"}, r"10_attention_layouts, 30_moe_expert_parallel: BATCH must be an integer .*got 'abc'"),
    ({"WEIGHT_DTYPE": "fp32"}, r"10_attention_layouts: WEIGHT_DTYPE must be one of bf16, fp8, fp4 .*got 'fp32'"),
    ({"WEIGHT_DTYPE": "fp4"}, r"10_attention_layouts, 15_speculative_decoding: WEIGHT_DTYPE must be a dtype h200 "
                              r"supports, got 'fp4': "
                              r"h200 has no FP4 tensor cores"),
    ({"CONTEXT_MAX": 100}, r"CONTEXT_MAX must be greater than CONTEXT_MIN \(256\), got 100"),
    ({"PROMPTS": [512, "x"]}, r"20_pd_disaggregation: PROMPTS\[1\] must be an integer"),
    ({"RANKS": 3}, r"RANKS \(3\) must divide the query heads of deepseek-v3"),
    ({"TP": 3}, r"TP must be one of \[8, 4, 2, 1\]"),
    ({"MODEL": "nope"}, r"MODEL must name a preset in data/models.yaml"),
    ({"SIM_REQUESTS": 10**12}, r"SIM_REQUESTS must be an integer in \[1000, 20,000,000\]"),
])
def test_plan_rejects_bad_values_before_anything_runs(params, match):
    with pytest.raises(SpecError, match=match) as info:
        report.plan_parameters(report._resolve_notebooks(None), params)
    assert "\n" not in str(info.value)


def test_plan_accepts_lists_and_the_readme_examples():
    given, notes = report.plan_parameters(report._resolve_notebooks(None),
                                          {"PROMPTS": [512, 1024], "BATCH": 32, "MODEL": "qwen3-30b-a3b"})
    assert given[NB / "20_pd_disaggregation.ipynb"]["PROMPTS"] == [512, 1024]
    assert given[NB / "30_moe_expert_parallel.ipynb"] == {"BATCH": 32, "MODEL": "qwen3-30b-a3b"}
    # Qwen3-30B-A3B has no MTP module for notebook 15's MTP draft: skipped there, with the reason, and only there
    assert given[NB / "15_speculative_decoding.ipynb"] == {"BATCH": 32}
    assert {p.name: n for p, n in notes.items() if n} == {"15_speculative_decoding.ipynb": [
        "-p MODEL 'qwen3-30b-a3b' skipped here: qwen3-30b-a3b has no MTP module, which SPECULATIVE = 'deepseek-mtp-1' "
        "drafts with; this notebook then needs a model that has one (deepseek-v3, deepseek-r1), or a draft-head or "
        "n-gram SPECULATIVE; the notebook's default 'deepseek-v3' is used"]}


def test_build_reports_checks_parameters_before_running(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "execute_notebook", lambda *a, **k: pytest.fail("must not run"))
    with pytest.raises(SpecError, match="BATCH must be an integer"):
        report.build_reports(tmp_path / "out", parameters={"BATCH": "abc"}, progress=False)
    assert not (tmp_path / "out").exists()


def test_build_reports_refuses_a_file_as_out_dir(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(SpecError, match="--out .* is a file"):
        report.build_reports(tmp_path / "f", notebooks=["00_index"], progress=False)


# ---- what a report shows -------------------------------------------------------------------------------------


def test_clean_for_report_drops_records_links_reports_and_adds_the_banner():
    from llmexplore.nbtools import RECORD_MIME

    code = nbformat.v4.new_code_cell("record('x', 1)")
    code.outputs = [_output({RECORD_MIME: {"name": "x", "value": 1}, "text/plain": "x = 1"}),
                    _output({"text/html": "<p>kept</p>"})]
    md = nbformat.v4.new_markdown_cell("Next: [PD](20_pd_disaggregation.ipynb), [sec](10_a.ipynb#top), "
                                       "[web](https://x.org/a.ipynb) and [file](data/x.yaml).")
    nb = _nb(nbformat.v4.new_markdown_cell("# Title"), md, code)
    banner = report.parameters_banner({"BATCH": 32}, ["-p MODEL 'llama-3-70b' skipped here: dense"])
    cleaned, _ = report.clean_for_report(nb, banner=banner)
    assert [c.cell_type for c in cleaned.cells] == ["markdown", "markdown", "markdown", "code"]
    assert cleaned.cells[1].source == ('<div class="llmexplore-banner">Built with <code>BATCH = 32</code>; the other '
                                       "parameters have the notebook's defaults.<br><strong>Note:</strong> -p MODEL "
                                       "&#x27;llama-3-70b&#x27; skipped here: dense.</div>")
    assert report.parameters_banner({}, []) == ""
    assert cleaned.cells[2].source == ("Next: [PD](20_pd_disaggregation.html), [sec](10_a.html#top), "
                                       "[web](https://x.org/a.ipynb) and [file](data/x.yaml).")
    assert [o["data"] for o in cleaned.cells[3].outputs] == [{"text/html": "<p>kept</p>"}]


def test_index_keeps_reports_of_earlier_builds(tmp_path):
    (tmp_path / "10_a.html").write_text("a")
    first = report._Outcome(tmp_path / "10_a.ipynb", html=tmp_path / "10_a.html", title="A", description="Why A.",
                            parameters={"BATCH": 32}, built="2026-01-01 10:00")
    report.write_index([first], tmp_path, {"BATCH": 32})
    (tmp_path / "20_b.html").write_text("b")
    second = report._Outcome(tmp_path / "20_b.ipynb", html=tmp_path / "20_b.html", title="B", description="Why B.",
                             notes=["-p MODEL 'x' skipped here: dense", "3 stderr output(s) left out"])
    page = report.write_index([second], tmp_path).read_text()
    assert page.index('href="10_a.html"') < page.index('href="20_b.html"')
    assert "parameters: BATCH = 32" in page and "built 2026-01-01 10:00" in page and "default parameters" in page
    assert "Note: -p MODEL &#x27;x&#x27; skipped here: dense" in page and "stderr" not in page
    (tmp_path / "10_a.html").unlink()  # a report that is gone leaves the index
    page = report.write_index([], tmp_path).read_text()
    assert "10_a" not in page and 'href="20_b.html"' in page
    (tmp_path / "reports.json").write_text("not json")  # an unreadable manifest is ignored, not fatal
    assert "20_b" not in report.write_index([], tmp_path).read_text()


def test_describe_failure_names_the_cell_of_a_timeout(tmp_path):
    from nbclient.exceptions import CellTimeoutError

    nb = _nb(nbformat.v4.new_markdown_cell("# t"), nbformat.v4.new_code_cell("X = 1"),
             nbformat.v4.new_code_cell("X = 2"), nbformat.v4.new_code_cell("import time\n\ntime.sleep(60)"),
             nbformat.v4.new_code_cell("never()"))
    nb.cells[1].metadata["tags"] = ["parameters"]
    nb.cells[2].metadata["tags"] = ["injected-parameters"]
    for c in nb.cells[1:4]:
        c.metadata["papermill"] = {"start_time": "2026-01-01T00:00:00"}
    nb.cells[3].outputs = [nbformat.v4.new_output("error", ename="CellTimeoutError", evalue="", traceback=[])]
    nbformat.write(nb, tmp_path / "x.ipynb")
    text = report.describe_failure(CellTimeoutError("A cell timed out...\n" * 20), tmp_path / "x.ipynb", 3)
    assert text == "cell 2 (`import time`) timed out after 3 s (raise it with --timeout)"
