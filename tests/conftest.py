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
