"""Every CLI question of tests/behaviour/capture.py answers as it did at dc193f3 (issue 18 §6: behaviour unchanged
by the restructuring), but for the one named fix (``simulate --json``'s rates per second).

A golden test: it pins the model's current values, so a deliberate change of a number shows up here as a diff to
review and recapture (``python tests/behaviour/capture.py capture tests/behaviour/cli_answers.json``), never as
a silent drift. Relative tolerance 1e-6: the same code on another CPU or numpy build may differ in the last bits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capture import CASES, capture_cli, compare

HERE = Path(__file__).parent
GOLDEN = json.loads((HERE / "cli_answers.json").read_text())
REL_TOL = 1e-6


@pytest.fixture(scope="module")
def answers(at_repo_root):
    return {"cli": capture_cli()}


@pytest.fixture(scope="module")
def at_repo_root():
    import os

    root = HERE.parents[1]
    old = os.getcwd()
    os.chdir(root)  # the CASES name files relative to the repository root
    yield
    os.chdir(old)


def test_every_case_is_in_the_golden_file():
    assert sorted(GOLDEN["cli"]) == sorted(name for name, _ in CASES)


def test_cli_answers_are_unchanged(answers):
    diffs = compare(GOLDEN, answers, rel_tol=REL_TOL)
    assert not diffs, f"{len(diffs)} answer(s) moved:\n" + "\n".join(diffs[:40])


def test_the_checker_sees_a_moved_number_and_a_removed_key():
    before = {"cli": {"x": {"status": 0, "answer": {"a_ms": 1.0, "b": [1, 2], "seconds": 3.0}}}}
    same = {"cli": {"x": {"status": 0, "answer": {"a_ms": 1.0 + 1e-12, "b": [1, 2], "seconds": 9.0, "new": 1}}}}
    moved = {"cli": {"x": {"status": 0, "answer": {"a_ms": 1.001, "b": [1, 2]}}}}
    gone = {"cli": {"x": {"status": 0, "answer": {"b": [1, 2]}}}}
    assert compare(before, same) == []
    assert compare(before, moved) == ["cli/x/answer/a_ms: 1.0 -> 1.001"]
    assert compare(before, gone) == ["cli/x/answer/a_ms: removed"]
