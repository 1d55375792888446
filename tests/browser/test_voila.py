"""Voila serves the explorer notebooks live, offline and quietly: moving a slider redraws the FigureWidget.

Voila runs as ``make serve`` runs it: the repository's ``share/jupyter`` on the Jupyter data path, the
``llmexplore`` Voila template (no CDN stylesheets; static plotly figures through their offline HTML version),
the Jinja tree page, on a free 127.0.0.1 port, in its own process group that is always killed afterwards.
Every page must load nothing from outside this machine and log no console error and no page error; the server
log must have no ERROR line. The tree page (``make serve`` serves a directory) and the notebook pages are both
checked: tests/fixtures/explorer_fixture.ipynb always, notebooks/10_attention_layouts.ipynb when it exists.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urljoin

import pytest

pytestmark = pytest.mark.notebooks  # Voila executes the notebook in a kernel

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "explorer_fixture.ipynb"
EXPLORERS = [p for p in (FIXTURE, REPO_ROOT / "notebooks" / "10_attention_layouts.ipynb") if p.exists()]
# keep in sync with `make serve`
SERVE_ENV = {"PLOTLY_RENDERER": "plotly_mimetype+notebook", "JUPYTER_PATH": str(REPO_ROOT / "share" / "jupyter")}
SERVE_ARGS = ["--template=llmexplore", "--classic-tree", "--no-browser", "--Voila.ip=127.0.0.1",
              "--progressive_rendering=True"]
START_TIMEOUT_S = 60
REDRAW_TIMEOUT_MS = 5_000
ERROR_LINE = re.compile(r"\bERROR\b|Traceback \(most recent call last\)")

# Trace data of every FigureWidget on the page (figures inside a widget box; static figures are not).
WIDGET_TRACES_JS = """() => [...document.querySelectorAll('.jupyter-widgets .js-plotly-plot')]
    .map(p => JSON.stringify((p.data || []).map(t => [t.x, t.y, t.z])))"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(proc: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"voila exited with {proc.returncode}:\n{log.read_text()[-3000:]}", pytrace=False)
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    pytest.fail(f"voila did not listen on 127.0.0.1:{port} within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}",
                pytrace=False)


def _stop(proc: subprocess.Popen) -> None:
    """Stop voila and its kernels: SIGTERM to the process group we created, SIGKILL if it lingers."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass


@pytest.fixture
def voila(tmp_path):
    """``start(path)`` serves a notebook or a directory; yields the base URL. On teardown the server is stopped
    and its log is checked for ERROR lines."""
    procs = []

    def start(target: Path) -> str:
        port = _free_port()
        log = tmp_path / f"voila-{port}.log"
        cwd = target if target.is_dir() else target.parent
        proc = subprocess.Popen(
            [sys.executable, "-m", "voila", str(target), f"--port={port}", *SERVE_ARGS],
            cwd=cwd, env={**os.environ, **SERVE_ENV}, stdin=subprocess.DEVNULL,
            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        procs.append((proc, log))
        _wait_listening(proc, port, log)
        return f"http://127.0.0.1:{port}/"

    yield start
    for proc, _ in procs:
        _stop(proc)
    for _, log in procs:
        errors = [line for line in log.read_text(errors="replace").splitlines() if ERROR_LINE.search(line)]
        assert errors == [], f"the Voila server log ({log.name}) has errors:\n" + "\n".join(errors)


def assert_offline_and_quiet(offline) -> None:
    """No request left the machine, and the browser logged no console error and no page error."""
    problems = ([f"request outside this machine: {u}" for u in offline.blocked]
                + [f"console error: {e}" for e in offline.console_errors]
                + [f"page error: {e}" for e in offline.page_errors])
    assert problems == [], "the page is not offline and quiet:\n" + "\n".join(problems)


def _traces(page) -> list[str]:
    return page.evaluate(WIDGET_TRACES_JS)


def _wait_rendered(page) -> None:
    page.wait_for_selector(".jupyter-widgets .js-plotly-plot .main-svg", timeout=START_TIMEOUT_S * 1000)
    page.wait_for_selector(".widget-slider .noUi-handle", timeout=START_TIMEOUT_S * 1000)
    page.wait_for_function(f"({WIDGET_TRACES_JS})().every(d => d !== '[]')", timeout=START_TIMEOUT_S * 1000)


@pytest.mark.parametrize("notebook", EXPLORERS, ids=[p.name for p in EXPLORERS])
def test_slider_redraws_figurewidget(voila, offline_page, notebook):
    page = offline_page.page
    t0 = time.monotonic()
    page.goto(voila(notebook), timeout=START_TIMEOUT_S * 1000, wait_until="domcontentloaded")
    _wait_rendered(page)
    first_render_s = time.monotonic() - t0

    body = page.inner_text("body")
    assert "Traceback" not in body and "There was an error" not in body, body[:2000]
    assert page.locator(".llmexplore-widget-note").count() == 0, "the static-report note must not show live"
    # record() values are for the tests: a live app shows none of their "name = value" lines (issue 20 §1.4)
    names = set(re.findall(r'record\(\\"(\w+)\\"', notebook.read_text(encoding="utf-8")))
    shown = [n for n in names if re.search(rf"(?m)^{n}( =|: )", body)]
    assert shown == [], f"record lines visible live: {shown}"

    before = _traces(page)
    assert before, "no FigureWidget found on the page"
    handles = page.locator(".widget-slider .noUi-handle")
    changed, tried = False, []
    for i in range(min(handles.count(), 3)):  # first slider normally; a slider at its end is skipped
        handle = handles.nth(i)
        readout = handle.locator("xpath=ancestor::*[contains(@class,'widget-slider')][1]//*[contains(@class,"
                                 "'widget-readout')]")
        for key in ("End", "Home"):
            start_value = readout.inner_text() if readout.count() else None
            handle.focus()
            page.keyboard.press(key)
            if readout.count() and readout.inner_text() == start_value:
                continue  # already at that end
            tried.append((i, key, start_value, readout.inner_text() if readout.count() else None))
            try:
                page.wait_for_function(f"before => JSON.stringify(({WIDGET_TRACES_JS})()) !== JSON.stringify(before)",
                                       arg=before, timeout=REDRAW_TIMEOUT_MS)
                changed = True
            except Exception:  # noqa: BLE001 - try the next slider
                pass
            break
        if changed:
            break
    assert changed, f"moving sliders {tried} did not change any FigureWidget within {REDRAW_TIMEOUT_MS} ms"
    assert _traces(page) != before
    page.wait_for_timeout(500)  # late console messages (a figure's PNG cache, fonts) arrive after the redraw
    assert_offline_and_quiet(offline_page)
    print(f"{notebook.name}: first render {first_render_s:.1f} s, offline and quiet")


def test_tree_page_and_notebook_are_offline_and_quiet(voila, offline_page, tmp_path):
    """``make serve`` serves a directory: its tree page, then a notebook opened from it."""
    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(FIXTURE, served / FIXTURE.name)
    page = offline_page.page
    page.goto(voila(served), timeout=START_TIMEOUT_S * 1000, wait_until="load")
    link = page.locator(f"a:has-text('{FIXTURE.name}')")
    link.first.wait_for(timeout=START_TIMEOUT_S * 1000)
    assert page.locator("i.fa-book").first.evaluate("e => getComputedStyle(e, '::before').content") != "none", \
        "the tree's notebook icon has no glyph: FontAwesome (bundled with Voila) did not load"
    page.wait_for_timeout(500)
    assert_offline_and_quiet(offline_page)
    page.goto(urljoin(page.url, link.first.get_attribute("href")), timeout=START_TIMEOUT_S * 1000,
              wait_until="domcontentloaded")  # the tree opens notebooks in a new tab: follow the link here
    _wait_rendered(page)
    page.wait_for_timeout(500)
    assert_offline_and_quiet(offline_page)
