"""JupyterLab runs an explorer notebook in a real browser: run all cells, move a slider, the figure redraws.

JupyterLab starts on a free 127.0.0.1 port with a token, throw-away config, data, runtime and workspace
directories (nothing of the user's JupyterLab is read or written) and a temporary notebook directory holding a
copy of tests/fixtures/explorer_fixture.ipynb followed by one cell that shows a real explorer
(``widgets.moe.moe_explorer()``, the smallest). The page is opened as a reader would: the notebook from the
file URL, "Run > Run All Cells" from the menu bar, then a slider moved with the keyboard. Requests outside
this machine are aborted and logged (see conftest.py); page errors fail the test. The server runs in its own
process group, which is always killed afterwards.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.notebooks  # JupyterLab executes the notebook in a kernel

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "explorer_fixture.ipynb"
LIVE_ENV = {"PLOTLY_RENDERER": "plotly_mimetype"}  # keep in sync with `make lab`
START_TIMEOUT_S = 60
RUN_TIMEOUT_MS = 60_000
REDRAW_TIMEOUT_MS = 10_000

# Every plotly figure in the notebook's outputs (FigureWidgets included): [title, [[name, x, y], ...]], as JSON
# strings; plotly.js keeps binary-encoded arrays as typed arrays (``_inputArray``), read here as plain lists.
TRACES_JS = """() => {
    const list = v => v == null ? null : (v._inputArray ? Array.from(v._inputArray)
                                          : (ArrayBuffer.isView(v) ? Array.from(v) : v));
    return [...document.querySelectorAll('.jp-OutputArea .js-plotly-plot')].map(p => JSON.stringify([
        ((p.layout || {}).title || {}).text || '',
        (p.data || []).map(t => [t.name, list(t.x), list(t.y)])]));
}"""


# JupyterLab settings for the throw-away profile: render every cell (the default windowing detaches cells outside
# the viewport, so their figures are not in the page) and do not ask about Jupyter news.
SETTINGS = {"@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
            "@jupyterlab/apputils-extension/notification": {"fetchNews": "false"}}
FIGURES_FILL_JS = """() => [...document.querySelectorAll('.llmexplore-explorer')].every(box => {
    const figs = [...box.querySelectorAll('.js-plotly-plot')];
    return figs.length > 0 && figs.every(p => p._fullLayout && Math.abs(p._fullLayout.width - box.clientWidth) <= 2);
})"""
KERNEL_READY_JS = """() => {
    const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const kernel = panel && panel.sessionContext && panel.sessionContext.session
        && panel.sessionContext.session.kernel;
    return !!kernel && kernel.connectionStatus === 'connected' && kernel.status === 'idle'; }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """Stop JupyterLab and its kernels: SIGTERM to our process group, SIGKILL if it lingers."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass


def _notebook(path: Path) -> None:
    """The explorer fixture plus one cell with a real explorer, without outputs."""
    nb = nbformat.read(FIXTURE, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("from llmexplore import widgets\n\nshow(widgets.moe.moe_explorer())"))
    nbformat.write(nb, path)


@pytest.fixture
def jupyterlab(tmp_path):
    """Start JupyterLab on a temporary notebook directory; yields (base URL, token, notebook name)."""
    root = tmp_path / "notebooks"
    root.mkdir()
    name = "explorer_in_lab.ipynb"
    _notebook(root / name)
    dirs = {k: tmp_path / k.lower() for k in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR")}
    for d in dirs.values():
        d.mkdir()
    settings = tmp_path / "settings"
    for plugin, values in SETTINGS.items():
        path = settings / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    token = secrets.token_hex(16)
    port = _free_port()
    log = tmp_path / "jupyterlab.log"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
           "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}",
           f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}", f"--LabApp.user_settings_dir={settings}",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.expose_app_in_browser=True"]  # window.jupyterapp: the test reads the kernel's state
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    env = {**os.environ, **LIVE_ENV, **{k: str(v) for k, v in dirs.items()}}
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyterlab exited with {proc.returncode}:\n{log.read_text()[-3000:]}", pytrace=False)
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"jupyterlab did not listen within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}",
                            pytrace=False)
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}", token, name
    finally:
        _stop(proc)
        print(f"jupyterlab log tail:\n{log.read_text(errors='replace')[-1500:]}")


def _traces(page) -> list[str]:
    return page.evaluate(TRACES_JS)


def _menu(page, menu: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=menu).first.click()
    page.locator(".lm-Menu-itemLabel", has_text=item).first.click()


def test_run_all_and_move_a_slider(jupyterlab, offline_page):
    base, token, name = jupyterlab
    page = offline_page.page
    t0 = time.monotonic()
    page.goto(f"{base}/lab/tree/{name}?token={token}", timeout=START_TIMEOUT_S * 1000, wait_until="domcontentloaded")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=START_TIMEOUT_S * 1000)
    # "Run All" before the kernel's websocket is connected is silently dropped: wait for a connected, idle kernel
    page.wait_for_function(KERNEL_READY_JS, timeout=START_TIMEOUT_S * 1000)
    opened_s = time.monotonic() - t0
    _menu(page, "Run", "Run All Cells")
    page.wait_for_selector(".jp-OutputArea .js-plotly-plot .main-svg", timeout=RUN_TIMEOUT_MS)
    page.wait_for_function(f"({TRACES_JS})().length >= 4 && ({TRACES_JS})().every(d => !d.endsWith(',[]]'))",
                           timeout=RUN_TIMEOUT_MS)  # the static figure, the fixture's and the explorer's two
    page.wait_for_selector(".widget-slider .noUi-handle", timeout=RUN_TIMEOUT_MS)
    ran_s = time.monotonic() - t0
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    texts = [t for t in errors.all_inner_texts() if "Traceback" in t or "Error" in t]
    assert texts == [], texts

    # the explorer's figures take the width the notebook gives them (plotly alone would stay at 700 px)
    page.wait_for_function(FIGURES_FILL_JS, timeout=REDRAW_TIMEOUT_MS)

    # the fixture's slider: y = slope * x, so End (slope 10) must change the line's y values
    before = _traces(page)
    handle = page.locator(".widget-slider .noUi-handle").first
    handle.focus()
    page.keyboard.press("End")
    page.wait_for_function(f"before => JSON.stringify(({TRACES_JS})()) !== JSON.stringify(before)", arg=before,
                           timeout=REDRAW_TIMEOUT_MS)
    after = _traces(page)
    live = [i for i, d in enumerate(after) if json.loads(d)[0] == "live: y = slope * x"]
    assert len(live) == 1, [json.loads(d)[0] for d in after]
    (name_before, x_before, y_before), = json.loads(before[live[0]])[1]
    (name_after, x_after, y_after), = json.loads(after[live[0]])[1]
    assert name_before == name_after == "line" and x_after == x_before
    assert y_before == [2 * v for v in x_before] and y_after == [10 * v for v in x_after]  # slope 2 -> 10

    # the MoE explorer's batch slider (its second slider): its step-time figure redraws, retitled
    explorer_before = _traces(page)
    batch = page.locator(".llmexplore-explorer .widget-slider .noUi-handle").nth(1)
    batch.focus()
    page.keyboard.press("Home")  # batch 16
    page.wait_for_function(f"() => ({TRACES_JS})().some(d => JSON.parse(d)[0].includes('at batch 16:'))",
                           timeout=REDRAW_TIMEOUT_MS)
    changed = [i for i, (a, b) in enumerate(zip(explorer_before, _traces(page))) if a != b]
    assert changed and all(i not in live for i in changed), changed  # the explorer's figures, not the fixture's
    assert offline_page.page_errors == [], offline_page.page_errors
    print(f"JupyterLab: notebook open and kernel idle {opened_s:.1f} s, all cells run {ran_s:.1f} s, "
          f"total {time.monotonic() - t0:.1f} s; blocked requests: {offline_page.blocked}; "
          f"console errors: {offline_page.console_errors}")
