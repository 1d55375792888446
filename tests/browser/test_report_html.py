"""The exported reports open offline in Chromium: every plotly figure renders, nothing is fetched remotely."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import math

import nbformat
import numpy as np
import pytest

from llmexplore.nbtools import headline_text
from llmexplore.report import build_reports
from llmexplore.report.params import notebook_values

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
    # plotly warns when it drops part of a figure (e.g. "matches" between axes of different types)
    assert view.console_warnings == [], f"{name}: console warnings {view.console_warnings[:5]}"


def _figures(executed: Path) -> list[dict]:
    nb = nbformat.read(executed, as_version=4)
    return [o["data"][PLOTLY_MIME] for c in nb.cells for o in c.get("outputs", []) if PLOTLY_MIME in o.get("data", {})]


# ---- what the reader sees ------------------------------------------------------------------------------------
#: the code spans of the rendered prose that are exactly a parameter's name, with the text before each: a
#: placeholder unless the value stands right before it, "32,768 (`PROMPT_TOKENS`)"
_NAME_SPANS_JS = """names => [...document.querySelectorAll('.jp-RenderedMarkdown code, .jp-MarkdownOutput code')]
  .filter(c => names.includes(c.textContent.trim()))
  .map(c => [c.previousSibling ? c.previousSibling.textContent : '', c.textContent.trim()])"""


def placeholders(spans: list[list[str]]) -> list[str]:
    """The ``[text before, NAME]`` code spans that stand for a value instead of following it."""
    return [f"…{before[-40:]}`{name}`" for before, name in spans if not re.search(r"\S \($", before)]


def test_placeholders_check_itself():
    assert placeholders([["of 32,768 (", "PROMPT"], ["receives ", "RATE"], ["(", "RATE"]]) == \
        ["…receives `RATE`", "…(`RATE`"]


_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _summary_js() -> str:
    """The visible text of the Summary section: the cells after the "Summary" heading, up to the next heading."""
    return """() => { const cells = [...document.querySelectorAll('.jp-Cell')];
      const at = cells.findIndex(c => [...c.querySelectorAll('h2')].some(h => h.textContent.trim().startsWith('Summary')));
      if (at < 0) return null;
      let text = '';
      for (const c of cells.slice(at + 1)) { if (c.querySelector('h2, h3')) break; text += c.innerText + '\\n'; }
      return text; }"""


def _values(trace: dict, key: str) -> list:
    v = trace.get(key)
    if isinstance(v, dict) and "bdata" in v:  # plotly's binary arrays
        import base64

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).astype(float).ravel().tolist()
    out: list[float] = []

    def walk(x):
        if isinstance(x, (list, tuple)):
            for y in x:
                walk(y)
        elif isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
            out.append(float(x))
        elif isinstance(x, str) and x:  # a category axis
            out.append(x)

    walk(v)
    return out


def flat_panels(fig: dict) -> list[str]:
    """The panels (x axis, y axis) of a plotly figure whose data take one value only (a flat line, equal bars,
    a uniform heatmap, one category), reference lines of two points left out; an overlaid axis with no data is
    not a panel."""
    values: dict[tuple, list[float]] = {}
    for tr in fig.get("data", []):
        kind = tr.get("type", "scatter")
        if kind in ("table", "parcoords", "sankey", "indicator"):
            continue
        key = "z" if kind in ("heatmap", "contour") else "x" if tr.get("orientation") == "h" else "y"
        v = _values(tr, key)
        if tr.get("mode") == "lines" and len(_values(tr, "x" if key == "y" else "y")) <= 2:
            continue  # a reference line (target, chosen value)
        values.setdefault((tr.get("xaxis", "x"), tr.get("yaxis", "y")), []).extend(v)
    layout = fig.get("layout", {})
    flat = []
    for (xa, ya), v in values.items():
        overlay = layout.get("yaxis" + ya[1:], {}).get("overlaying")
        if not v and overlay:
            continue
        if len({round(x, 9) if isinstance(x, float) else x for x in v}) <= 1:
            flat.append(f"{xa}/{ya}: {len(v)} point(s), {sorted(set(v), key=str)[:2]}")
    return flat


def test_flat_panels_check_itself():
    fig = {"data": [{"type": "bar", "y": [2, 2, 2]}, {"type": "scatter", "y": [1, 2], "xaxis": "x2", "yaxis": "y2"},
                    {"type": "scatter", "mode": "lines", "x": [0, 1], "y": [5, 5], "xaxis": "x2", "yaxis": "y2"},
                    {"type": "heatmap", "z": [[1, 1], [1, 1]], "xaxis": "x3", "yaxis": "y3"}]}
    assert flat_panels(fig) == ["x/y: 3 point(s), [2.0]", "x3/y3: 4 point(s), [1.0]"]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_report_reads_as_findings(chromium_path, built, offline_page, notebook):
    """What issue 20 asks of every report: the prose shows values, not parameter names; the Summary repeats
    every figure's headline numbers; no figure is flat at the defaults unless it says why."""
    out, _ = built
    executed = out / "executed" / notebook.name
    names = sorted(notebook_values(nbformat.read(executed, as_version=4)))
    page = offline_page.page
    page.goto((out / f"{notebook.stem}.html").as_uri(), wait_until="load")
    assert placeholders(page.evaluate(_NAME_SPANS_JS, names)) == [], \
        f"{notebook.name}: parameter names stand in for their values in the prose"
    figures = _figures(executed)
    summary = page.evaluate(_summary_js())
    if figures and not notebook.name.startswith("explorer_"):
        assert summary is not None, f"{notebook.name} has no Summary section"
        missing = {}
        for fig in figures:
            title = headline_text(fig.get("layout", {}).get("title", {}).get("text", ""))
            lost = [n for n in _NUMBER.findall(title) if n not in summary]
            if lost:
                missing[title[:80]] = lost
        assert missing == {}, f"{notebook.name}: the Summary leaves out headline numbers"
    for fig in figures:
        layout = fig.get("layout", {})
        flat = flat_panels(fig)
        reason = (layout.get("meta") or {}).get("uniform") if isinstance(layout.get("meta"), dict) else None
        shown = " ".join(headline_text(a.get("text", "")) for a in layout.get("annotations", []))
        if flat:
            assert reason and headline_text(reason) in shown, \
                f"{notebook.name}: flat figure {headline_text(layout.get('title', {}).get('text', ''))[:80]!r}: {flat}"
    _assert_clean(offline_page, notebook.name)


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


def test_shared_plotly_reports_render_offline(chromium_path, offline_page, tmp_path):
    """``report --shared-plotly``: one plotly.js file for every report, still offline (issue 20 §1.11)."""
    pages = build_reports(tmp_path, notebooks=[FIXTURE], progress=False, timeout_s=120, shared_plotly=True)
    shared = list(tmp_path.glob("plotly-*.min.js"))
    assert len(shared) == 1 and shared[0].stat().st_size > 1_000_000
    html_path = pages[0]
    assert html_path.stat().st_size < 1_000_000 and remote_loads(html_path.read_text(encoding="utf-8")) == []
    page = offline_page.page
    page.goto(html_path.as_uri(), wait_until="load")
    expected = _figure_count(tmp_path / "executed" / FIXTURE.name)
    rendered_js = ("[...document.querySelectorAll('.plotly-graph-div')]"
                   ".filter(d => d.querySelector('.main-svg')).length")
    page.wait_for_function(f"{rendered_js} >= {expected}", timeout=30_000)
    _assert_clean(offline_page, "shared-plotly report")
