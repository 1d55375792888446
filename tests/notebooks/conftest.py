"""Run notebooks under papermill and read what they record.

``run_notebook(name, **params) -> (out_path, records)`` executes ``notebooks/<name>`` (or a path) with the
``llmexplore`` engine into ``tmp_path``, serially in this process, and fails the test when

- a cell raises (papermill's error names the cell and shows the traceback),
- a parameter is passed that the notebook's ``parameters`` cell does not define (papermill would silently
  inject it and the test would assert on the defaults), or
- any cell took longer than ``max_cell_s`` (default 60 s): the ipywidgets stall of jupyter/nbclient#312
  waits out the timeout and can then pass silently, so a slow cell is treated as a failure.

Every test in this folder is marked ``notebooks``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
NB_DIR = REPO_ROOT / "notebooks"
FIXTURE_DIR = REPO_ROOT / "tests" / "fixtures"
MAX_CELL_S = 60.0  # a healthy cell here takes well under 5 s
#: cells that do a known amount of heavy work, by a text their source holds: their own limit [s]. Notebook 05's
#: §6 simulates all 2,873 measured benchmarks of validate --e2e (38 s of CPU, 24 s on this machine's two cores
#: idle, 73 s once under make test's load; issue 19): a stall still shows, at the 180 s execution timeout
HEAVY_CELLS = {"sweeps.fidelity.e2e.evaluate(": 150.0}


def _slow_cells(nb_path: Path, durations, max_cell_s: float) -> list:
    """(cell index, seconds) of the cells over their limit: ``max_cell_s``, or a heavy cell's own."""
    import nbformat

    cells = nbformat.read(nb_path, as_version=4).cells
    def limit(i):
        src = cells[i].source if i < len(cells) else ""
        return max([max_cell_s] + [v for k, v in HEAVY_CELLS.items() if k in src])
    return [(i, d) for i, d in durations if d > limit(i)]
EXECUTION_TIMEOUT_S = 180  # per cell; above MAX_CELL_S so a slow cell is reported by duration, not a hang


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.notebooks)
            # make test (pytest-xdist --dist loadgroup): the tests that share the session's report build and
            # default notebook runs go to one worker ("kernels"), so those are made once; the live-kernel,
            # server and browser tests that share nothing with them go together to another ("live")
            live = Path(item.path).name in ('test_parameters_live.py', 'test_infrastructure.py')
            item.add_marker(pytest.mark.xdist_group("live" if live else "kernels"))


def notebook_paths() -> list[Path]:
    """The workbook's notebooks, sorted by name."""
    return sorted(NB_DIR.glob("*.ipynb"))


def resolve_notebook(name: str | Path) -> Path:
    path = Path(name)
    if not path.is_absolute():
        path = NB_DIR / path
    if not path.is_file():
        raise FileNotFoundError(f"no notebook {name!r} (looked for {path})")
    return path


def execute(src: Path, out: Path, params: dict, timeout_s: float = EXECUTION_TIMEOUT_S,
            max_cell_s: float = MAX_CELL_S) -> dict:
    """Execute ``src`` into ``out``; return its records. Fails the test on the conditions in the module doc."""
    import papermill as pm

    from llmexplore.nbtools import cell_durations, read_records
    from llmexplore.report import execute_notebook

    known = pm.inspect_notebook(str(src))
    unknown = sorted(set(params) - set(known))
    if unknown:
        pytest.fail(f"{src.name}: parameter(s) {unknown} are not in its parameters cell {sorted(known)}",
                    pytrace=False)
    execute_notebook(src, out, params, timeout_s)
    slow = _slow_cells(out, cell_durations(out), max_cell_s)
    if slow:
        pytest.fail(f"{src.name}: cell(s) took suspiciously long {[(i, round(d, 1)) for i, d in slow]} "
                    f"(limit {max_cell_s} s; an ipywidgets stall looks like this, jupyter/nbclient#312)",
                    pytrace=False)
    return read_records(out)


@pytest.fixture(scope="session")
def default_run(tmp_path_factory):
    """``default_run(name) -> (out_path, records)``: the notebook executed once per session with its default
    parameters, as ``make report`` runs it. test_all_notebooks and the notebook tests that assert on the
    defaults share these runs (the PD notebook's default run alone takes about a minute on 2 cores), and so
    does tests/browser/test_report_html.py: its report build leaves its executed notebooks in
    ``<basetemp>/default-runs``, which are read here instead of executing the notebooks again."""
    from llmexplore.nbtools import cell_durations, read_records

    cache: dict[str, tuple[Path, dict]] = {}
    shared = tmp_path_factory.getbasetemp() / "default-runs"  # left by tests/browser's report build

    def _run(name):
        src = resolve_notebook(name)
        done = shared / src.name
        if src.name not in cache and done.exists():  # the same run, from the report build
            slow = _slow_cells(done, cell_durations(done), MAX_CELL_S)
            if slow:
                pytest.fail(f"{src.name}: cell(s) took suspiciously long {[(i, round(d, 1)) for i, d in slow]} "
                            f"(limit {MAX_CELL_S} s)", pytrace=False)
            cache[src.name] = (done, read_records(done))
        if src.name not in cache:
            out = tmp_path_factory.mktemp(src.stem) / src.name
            old = os.environ.get("PLOTLY_RENDERER")
            os.environ["PLOTLY_RENDERER"] = "plotly_mimetype+notebook"  # as in the reports
            try:
                cache[src.name] = (out, execute(src, out, {}))
            finally:
                if old is None:
                    os.environ.pop("PLOTLY_RENDERER", None)
                else:
                    os.environ["PLOTLY_RENDERER"] = old
        return cache[src.name]

    return _run


@pytest.fixture
def run_notebook(tmp_path, monkeypatch):
    """``run_notebook(name, **params) -> (out_path, records)``; see the module docstring.

    Keyword-only options ``_timeout_s`` and ``_max_cell_s`` override the limits.
    """
    monkeypatch.setenv("PLOTLY_RENDERER", "plotly_mimetype+notebook")  # as in the reports

    def _run(name, *, _timeout_s: float = EXECUTION_TIMEOUT_S, _max_cell_s: float = MAX_CELL_S, **params):
        src = resolve_notebook(name)
        out = tmp_path / src.name
        if out.exists():  # same notebook twice in one test: keep both
            out = tmp_path / f"{src.stem}.{len(list(tmp_path.glob(src.stem + '*')))}.ipynb"
        records = execute(src, out, params, timeout_s=_timeout_s, max_cell_s=_max_cell_s)
        return out, records

    return _run
