"""Every notebook's recorded headline values, run with its defaults, are those of dc193f3 (issue 18 §6).

A golden partner of the notebook tests' published-number checks: those allow +-20-30% against a paper, this
pins the model's current value (relative 1e-6, for another CPU's last bits), so a deliberate change shows as a
diff to review. Recapture with ``python tests/behaviour/capture.py capture OUT.json --notebooks --no-cli`` and
copy its ``notebooks`` into ``tests/behaviour/notebook_records.json``, saying in the commit what moved and why.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest



BEHAVIOUR = Path(__file__).resolve().parents[1] / "behaviour"
sys.path.insert(0, str(BEHAVIOUR))
from capture import diff  # noqa: E402

GOLDEN = json.loads((BEHAVIOUR / "notebook_records.json").read_text())["notebooks"]
REL_TOL = 1e-6


def test_every_notebook_has_golden_records():
    notebooks = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
    assert sorted(GOLDEN) == notebooks


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_recorded_values_are_unchanged(default_run, name):
    _, records = default_run(f"{name}.ipynb")
    moved = diff(GOLDEN[name], records, name, rel_tol=REL_TOL)
    assert not moved, f"{len(moved)} recorded value(s) moved:\n" + "\n".join(moved[:40])
