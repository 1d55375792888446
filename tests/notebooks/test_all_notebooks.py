"""Every notebook in notebooks/ runs with its default parameters and records at least one value."""

from pathlib import Path

import nbformat
import pytest

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))


def test_workbook_has_notebooks():
    assert NOTEBOOKS, f"no notebooks in {NB_DIR}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_with_defaults(default_run, path):
    out, records = default_run(path.name)
    assert records, f"{path.name} recorded nothing; call nbtools.record() for its headline numbers"
    nb = nbformat.read(out, as_version=4)
    assert not [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
