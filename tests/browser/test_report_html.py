"""The exported reports open offline in Chromium: every plotly figure renders, nothing is fetched remotely."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from llmexplore.report import build_reports

#: builds the reports, so it runs kernels too. The session's report build (every notebook, in the setup of the
#: first test here) gets a hang guard of its own instead of the suite's 300 s per test: on a shared 2-core machine
#: with another CPU-bound process it took longer than 300 s (each cell still has its 120 s timeout and the stall
#: guard of tests/notebooks/conftest.py)
pytestmark = [pytest.mark.notebooks, pytest.mark.timeout(1800)]

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "explorer_fixture.ipynb"
NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb")) + [FIXTURE]
PLOTLY_MIME = "application/vnd.plotly.v1+json"

# Tags that make the browser fetch something; URLs inside <script> bodies (plotly.js is full of them) are
# not loads, so script bodies are blanked before grepping.
_SCRIPT_BODY = re.compile(r"(<script\b[^>]*>).*?(</script\s*>)", re.I | re.S)
_REMOTE_LOAD = re.compile(r"<(?:script|link|img|iframe|frame|source|embed|video|audio|track|input|object)\b"
                          r"[^>]*?\b(?:src|href|data|srcset|poster)\s*=\s*[\"']?((?:https?:)?//[^\"'\s>]+)", re.I)


def remote_loads(page: str) -> list[str]:
    return _REMOTE_LOAD.findall(_SCRIPT_BODY.sub(r"\1\2", page))


def test_remote_loads_grep_itself():
    page = ('<script src="https://cdn.x/a.js"></script><script>var a = "<img src=\'https://no\'>";</script>'
            '<link href="//cdn.x/b.css" rel="stylesheet"><a href="https://fine">x</a><img src="local.png">')
    assert remote_loads(page) == ["https://cdn.x/a.js", "//cdn.x/b.css"]


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """The reports as ``make report`` builds them (default parameters). Their executed notebooks are left in
    ``<basetemp>/default-runs`` for tests/notebooks' ``default_run``, which reuses them instead of executing
    every notebook a second time (the suite runs tests/browser first)."""
    out = tmp_path_factory.mktemp("reports")
    pages = build_reports(out, notebooks=NOTEBOOKS, progress=False, timeout_s=120)
    shared = tmp_path_factory.getbasetemp() / "default-runs"
    shared.mkdir(exist_ok=True)
    for nb in NOTEBOOKS:
        done = out / "executed" / nb.name
        if done.exists() and not (shared / nb.name).exists():
            shutil.copy2(done, shared / nb.name)
    return out, pages


def _figure_count(executed: Path) -> int:
    nb = nbformat.read(executed, as_version=4)
    return sum(PLOTLY_MIME in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


def _assert_clean(view, name):
    assert view.blocked == [], f"{name} tried to load from the network: {view.blocked}"
    assert view.page_errors == [], f"{name}: JavaScript errors {view.page_errors}"
    assert view.console_errors == [], f"{name}: console errors {view.console_errors}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_report_renders_every_figure_offline(chromium_path, built, offline_page, notebook):
    out, pages = built
    html_path = out / f"{notebook.stem}.html"
    assert html_path in pages
    source = html_path.read_text(encoding="utf-8")
    assert remote_loads(source) == []
    # nbconvert's CDN defaults (require.js, MathJax and mermaid on cdnjs, the widget manager on unpkg) are gone;
    # plotly.js itself mentions jsdelivr/cdn.plot.ly in strings it never loads for these charts.
    assert "cdnjs" not in source and "unpkg.com" not in source

    expected = _figure_count(out / "executed" / notebook.name)
    if not notebook.name.startswith("00_"):  # 00_* is the workbook's index: prose and tables only
        assert expected >= 1, f"{notebook.name} shows no static plotly figure in its report"
    page = offline_page.page
    page.goto(html_path.as_uri(), wait_until="load")
    rendered_js = ("[...document.querySelectorAll('.plotly-graph-div')]"
                   ".filter(d => d.querySelector('.main-svg')).length")
    page.wait_for_function(f"{rendered_js} >= {expected}", timeout=30_000)
    assert page.evaluate(rendered_js) == expected
    assert page.evaluate("document.querySelectorAll('.plotly-graph-div').length") == expected
    # widget views are replaced by the note, never a raw repr
    body = page.inner_text("body")
    assert "VBox(children" not in body and "FigureWidget({" not in body
    _assert_clean(offline_page, notebook.name)


def test_index_links_every_report_offline(chromium_path, built, offline_page):
    out, pages = built
    index = out / "index.html"
    assert pages[-1] == index
    source = index.read_text(encoding="utf-8")
    assert remote_loads(source) == []
    page = offline_page.page
    page.goto(index.as_uri(), wait_until="load")
    hrefs = page.eval_on_selector_all("li a", "els => els.map(e => e.getAttribute('href'))")
    assert hrefs == [p.name for p in pages[:-1]]
    titles = page.eval_on_selector_all("li .title", "els => els.map(e => e.textContent.trim())")
    assert all(titles) and "Explorer fixture" in titles
    descriptions = page.eval_on_selector_all("li .desc", "els => els.map(e => e.textContent.trim())")
    assert all(descriptions), f"every notebook needs a one-line description under its title: {descriptions}"
    page.click("text=Explorer fixture")
    page.wait_for_selector(".plotly-graph-div .main-svg")
    _assert_clean(offline_page, "index.html")
