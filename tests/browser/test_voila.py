"""Voila serves an explorer notebook live: moving a slider redraws the FigureWidget.

Runs on tests/fixtures/explorer_fixture.ipynb always, and on notebooks/10_attention_layouts.ipynb when it
exists. Voila runs as `make serve` runs it (same renderer env), on a free 127.0.0.1 port, in its own process
group that is always killed afterwards.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.notebooks  # Voila executes the notebook in a kernel

REPO_ROOT = Path(__file__).resolve().parents[2]
EXPLORERS = [REPO_ROOT / "tests" / "fixtures" / "explorer_fixture.ipynb",
             REPO_ROOT / "notebooks" / "10_attention_layouts.ipynb"]
EXPLORERS = [p for p in EXPLORERS if p.exists()]
SERVE_ENV = {"PLOTLY_RENDERER": "plotly_mimetype"}  # keep in sync with `make serve`
START_TIMEOUT_S = 60
REDRAW_TIMEOUT_MS = 5_000
# jupyterlab-plotly's mime renderer caches a PNG with model.setData(), which Voila's output models lack;
# the static figure still renders. Upstream, harmless, and not ours to fix.
KNOWN_PAGE_ERRORS = ("setData is not a function",)

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
    procs = []

    def start(notebook: Path) -> str:
        port = _free_port()
        log = tmp_path / f"voila-{port}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "voila", str(notebook), "--no-browser", f"--port={port}",
             "--Voila.ip=127.0.0.1", "--show_tracebacks=True"],
            cwd=notebook.parent, env={**os.environ, **SERVE_ENV}, stdin=subprocess.DEVNULL,
            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(proc)
        _wait_listening(proc, port, log)
        return f"http://127.0.0.1:{port}/"

    yield start
    for proc in procs:
        _stop(proc)


def _traces(page) -> list[str]:
    return page.evaluate(WIDGET_TRACES_JS)


@pytest.mark.parametrize("notebook", EXPLORERS, ids=[p.name for p in EXPLORERS])
def test_slider_redraws_figurewidget(voila, offline_page, notebook):
    page = offline_page.page
    t0 = time.monotonic()
    page.goto(voila(notebook), timeout=START_TIMEOUT_S * 1000, wait_until="domcontentloaded")
    page.wait_for_selector(".jupyter-widgets .js-plotly-plot .main-svg", timeout=START_TIMEOUT_S * 1000)
    page.wait_for_selector(".widget-slider .noUi-handle", timeout=START_TIMEOUT_S * 1000)
    page.wait_for_function(f"({WIDGET_TRACES_JS})().every(d => d !== '[]')", timeout=START_TIMEOUT_S * 1000)
    first_render_s = time.monotonic() - t0

    body = page.inner_text("body")
    assert "Traceback" not in body and "There was an error" not in body, body[:2000]
    assert page.locator(".llmexplore-widget-note").count() == 0, "the static-report note must not show live"

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
    errors = [e for e in offline_page.page_errors if not any(k in e for k in KNOWN_PAGE_ERRORS)]
    assert errors == [], errors
    print(f"{notebook.name}: first render {first_render_s:.1f} s; blocked (cosmetic CDN icons): "
          f"{offline_page.blocked}")
