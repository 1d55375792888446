"""The notebook runner and the report builder, exercised on small notebooks (kernel needed, no browser)."""

from pathlib import Path

import nbformat
import pytest

from llmexplore import report
from llmexplore.nbtools import read_records

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "explorer_fixture.ipynb"


def _write_nb(path: Path, *sources: str, params: str | None = None) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells.append(nbformat.v4.new_markdown_cell(f"# {path.stem}\n\nA throwaway notebook for a test."))
    if params is not None:
        nb.cells.append(nbformat.v4.new_code_cell(params, metadata={"tags": ["parameters"]}))
    nb.cells.extend(nbformat.v4.new_code_cell(s) for s in sources)
    nbformat.write(nb, path)
    return path


def test_run_notebook_injects_parameters_and_reads_records(run_notebook):
    out, records = run_notebook(FIXTURE, SLOPE=3, N_POINTS=5)
    assert records == {"last_y": 12}
    nb = nbformat.read(out, as_version=4)
    assert "injected-parameters" in nb.cells[2].metadata.get("tags", [])
    view = [o for c in nb.cells for o in c.get("outputs", []) if "application/vnd.jupyter.widget-view+json" in
            o.get("data", {})]
    assert len(view) == 1 and "Live explorer" in view[0]["data"]["text/plain"]
    assert nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]  # state is still saved


def test_run_notebook_rejects_unknown_parameter(run_notebook):
    with pytest.raises(pytest.fail.Exception, match=r"\['BATCH'\] are not in its parameters cell"):
        run_notebook(FIXTURE, BATCH=8)


def test_run_notebook_fails_on_a_slow_cell(run_notebook, tmp_path):
    src = _write_nb(tmp_path / "slow.ipynb", "import time\ntime.sleep(1.2)", params="X = 1")
    with pytest.raises(pytest.fail.Exception, match=r"slow.ipynb: cell\(s\) took suspiciously long \[\(2, 1\.\d"):
        run_notebook(src, _max_cell_s=1.0)


def test_run_notebook_times_out_instead_of_hanging(run_notebook, tmp_path):
    src = _write_nb(tmp_path / "hang.ipynb", "import time\ntime.sleep(60)", params="X = 1")
    with pytest.raises(Exception, match="(?i)timed? ?out|timeout"):
        run_notebook(src, _timeout_s=3)


def test_build_reports_end_to_end(tmp_path, capsys):
    """Parameters go only where defined; a failure names notebook + error after the others were built."""
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    fixture = src_dir / "20_fixture.ipynb"
    fixture.write_bytes(FIXTURE.read_bytes())
    plain = _write_nb(src_dir / "10_plain.ipynb", "from llmexplore.nbtools import record\nrecord('answer', 42)")
    broken = _write_nb(src_dir / "30_broken.ipynb", "x = 1", "1 / 0", params="SLOPE = 1")
    out = tmp_path / "out"
    (out).mkdir()
    (out / "30_broken.html").write_text("stale")

    with pytest.raises(report.ReportError) as info:
        report.build_reports(out, parameters={"SLOPE": 4}, notebooks=[broken, fixture, plain], timeout_s=60)
    message = str(info.value)
    assert "1 of 3 notebook(s) failed" in message
    assert "30_broken.ipynb: cell" in message and "ZeroDivisionError: division by zero" in message and "1 / 0" in message
    assert message.splitlines()[1] == "  30_broken.ipynb: cell 3 (`1 / 0`): ZeroDivisionError: division by zero"

    stderr = capsys.readouterr().err
    assert "[1/3] executing 10_plain.ipynb … " in stderr and "[3/3] executing 30_broken.ipynb … FAILED" in stderr

    assert read_records(out / "executed" / "20_fixture.ipynb") == {"last_y": 76}  # SLOPE=4 injected
    assert read_records(out / "executed" / "10_plain.ipynb") == {"answer": 42}  # no parameters cell: untouched
    assert sorted(p.name for p in out.glob("*.html")) == ["10_plain.html", "20_fixture.html", "index.html"]
    index = (out / "index.html").read_text()
    assert 'href="10_plain.html">10_plain</a>' in index and 'href="20_fixture.html">Explorer fixture</a>' in index
    assert "30_broken" in index and "ZeroDivisionError" in index
    assert not list(src_dir.glob("*executed*")) and sorted(p.name for p in src_dir.iterdir()) == [
        "10_plain.ipynb", "20_fixture.ipynb", "30_broken.ipynb"]

    page = (out / "20_fixture.html").read_text()
    assert report.remote_resources(page) == []
    assert "Live explorer" in page and "VBox(" not in page and "<title>Explorer fixture</title>" in page
    assert page.count("Plotly.newPlot") == 1 or page.count('class="plotly-graph-div"') == 1


def test_a_timed_out_cell_is_named_in_one_line(tmp_path, capsys):
    src = _write_nb(tmp_path / "hang.ipynb", "import time\n\ntime.sleep(60)", params="X = 1")
    with pytest.raises(report.ReportError) as info:
        report.build_reports(tmp_path / "out", notebooks=[src], timeout_s=3)
    assert str(info.value).splitlines()[1:] == [
        "  hang.ipynb: cell 2 (`import time`) timed out after 3 s (raise it with --timeout)"]
    err = capsys.readouterr().err
    assert "Traceback" not in err and "IPKernelApp" not in err and "Timeout waiting" not in err
    assert "hang.ipynb: cell 2 (`import time`) timed out after 3 s" in err


def test_building_one_notebook_keeps_the_others_in_the_index(tmp_path):
    plain = _write_nb(tmp_path / "10_plain.ipynb", "from llmexplore.nbtools import say\nsay('Ten is more.')")
    other = _write_nb(tmp_path / "20_other.ipynb", "1 + 1")
    out = tmp_path / "out"
    report.build_reports(out, notebooks=[plain], progress=False, timeout_s=60)
    report.build_reports(out, notebooks=[other], progress=False, timeout_s=60)
    index = (out / "index.html").read_text()
    assert 'href="10_plain.html"' in index and 'href="20_other.html"' in index
    page = (out / "10_plain.html").read_text()
    assert 'class="llmexplore-finding">Ten is more.</p>' in page
