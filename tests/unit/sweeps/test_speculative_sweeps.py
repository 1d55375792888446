"""The speculative-decoding sweeps (llmexplore.sweeps.speculative) behind notebooks/15: the break-even batch
interpolation against a closed form, the preset's own rows, memory marking and bad grids."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from llmexplore.errors import SpecError
from llmexplore.sweeps import speculative as sp


@pytest.fixture(scope="module")
def setup():
    return sp.setup("deepseek-v3", "h200", 8, speculative="deepseek-mtp-1", context=2000)


def test_breakeven_interpolates_in_log_batch_and_marks_never_and_always():
    # speed-up 1.5 at batch 16, 0.5 at batch 64: falls through 1 halfway in log2 -> batch 32 exactly
    df = pd.DataFrame({"accepted_length": [1.5] * 3 + [1.0] * 2 + [2.0] * 2,
                       "batch": [64, 16, 4, 1, 8, 1, 8],
                       "speedup": [0.5, 1.5, 1.8, 0.9, 0.8, 1.9, 1.2]})
    be = sp.breakeven_batches(df)
    assert be["1.50"] == pytest.approx(32.0, rel=1e-12)
    assert be["1.00"] == 0.0
    assert math.isinf(be["2.00"])


def test_own_length_rows_are_the_presets_acceptance_by_batch(setup):
    taus = sp.accepted_length_options(setup.spec, 9)  # the 9-point grid for k = 1 holds 1.875 -> 1.88
    assert setup.spec.tokens_per_step in taus
    assert min(abs(t - setup.spec.tokens_per_step) for t in taus if t != setup.spec.tokens_per_step) >= 0.01
    df = sp.speedup_vs_batch(setup, [256, 1, 16], taus)
    own = sp.own_length_rows(df, setup)
    assert list(own["batch"]) == [1, 16, 256]
    assert (own["accepted_length"] == setup.spec.tokens_per_step).all()
    assert len(df) == 3 * len(taus)
    # nothing accepted: the draft and the wider verify cost time and buy no tokens
    worst = df[df["accepted_length"] == 1.0]
    assert (worst["speedup"] < 1).all()


def test_batches_past_the_drafts_memory_are_marked_not_dropped(setup):
    cap = sp.memory_summary(setup)
    big = 4 * 2 ** 16
    df = sp.speedup_vs_batch(setup, [1, big])
    assert list(df["feasible"]) == [True, False]
    assert "does not fit with the draft" in df["reason"].iloc[1]
    assert np.isfinite(df["speedup"]).all()
    assert cap  # the summary names both caps


@pytest.mark.parametrize("bad", [[], [0], "eight", [[1, 2]]])
def test_bad_batch_grids_name_the_field(setup, bad):
    with pytest.raises(SpecError, match="batches"):
        sp.speedup_vs_batch(setup, bad)


def test_breakeven_length_is_the_closed_form_tau_over_speedup(setup):
    # at a fixed batch the cycle does not depend on acceptance, so speed-up = tau * plain / cycle and the
    # break-even length is tau / speedup from any row; the interpolation between grid lengths must find it
    df = sp.speedup_vs_batch(setup, [1, 16, 512], sp.accepted_length_options(setup.spec, 9))
    need = sp.breakeven_lengths(df)
    closed = (df["accepted_length"] / df["speedup"]).groupby(df["batch"]).agg(["min", "max"])
    assert np.allclose(closed["min"], closed["max"], rtol=1e-9)  # the same from every row: linear in tau
    assert np.allclose(need.to_numpy(), closed["min"].to_numpy(), rtol=1e-9)
    assert 1.0 < need.loc[1] < need.loc[16]  # the verify pass's extra rows cost more once the step computes


def test_breakeven_length_marks_never_and_always():
    df = pd.DataFrame({"batch": [1, 1, 2, 2], "accepted_length": [1.0, 2.0, 1.0, 2.0],
                       "speedup": [0.5, 0.9, 1.1, 1.4]})
    need = sp.breakeven_lengths(df)
    assert math.isinf(need.loc[1]) and need.loc[2] == 1.0
