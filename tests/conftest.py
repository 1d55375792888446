"""Fixtures shared by several test folders."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def validation_ref():
    """``llmexplore.validate``'s own numbers for the engine-matched choice: rows, modelled rows, the rows left
    out, the ranking (what the fidelity sweeps and notebook must agree with)."""
    from llmexplore import validate

    table = validate.evaluate("engine")
    s = validate.summary(table)
    return {"rows": s["rows"], "modelled": s["modelled"], "left_out": list(table[table.status != "ok"]["id"]),
            "ranking": validate.ranking(table)}


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The closing lines say when browser tests were skipped, why, and how to run them (issue 20 §1.12): a fresh
    machine without Chromium skips them, and a reader of "N passed, 14 skipped" should not have to dig."""
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if "tests/browser/" in str(getattr(r, "nodeid", "")).replace("\\", "/")]
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} browser test(s) skipped: no Chromium or Playwright here. Install Debian's chromium "
            "(sudo apt-get install chromium) or set CHROMIUM=/path/to/chrome, then run: make test "
            "PYTEST_ARGS='tests/browser'. CI (CI=true) fails instead of skipping.", yellow=True)
