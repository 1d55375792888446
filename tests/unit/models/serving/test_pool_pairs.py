"""The disaggregated planner's pool pair without the Np x Nd grid (issue 20 §2: ``plan --gpus 4096`` asked for
80 x 4,096 x 4,096 floats, 10 GiB) picks what the grid picks: property test against :func:`pool_pairs`."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llmexplore.models.serving import capacity as pm


def _grid_pick(rate_p, rate_d1, rate_link, rp, rd, budget, target):
    """The selection the planner made on the full grid (before best_pool_pair)."""
    g = pm.pool_pairs(rate_p[None, :], np.array([rate_d1]), rate_link[None, :], [rp], [rd], budget)
    r, gp = g["rate"][0], g["gpus"][0]
    if target is None:
        if r.max() <= 0:
            return None, r.max()
        key = np.where(r > 0, r * (1 + 1e-12) - gp * 1e-15, -np.inf)
        a, b = np.unravel_index(int(np.argmax(key)), r.shape)
    else:
        ok = r >= target
        if not ok.any():
            return None, r.max()
        key = np.where(ok, gp + g["n_p"][:, None] * 1e-6, np.inf)
        a, b = np.unravel_index(int(np.argmin(key)), r.shape)
    return (int(g["n_p"][a]), int(g["n_d"][b]), float(r[a, b]), float(gp[a, b])), r.max()


@settings(max_examples=300, deadline=None, derandomize=True)
@given(n=st.integers(1, 24), rp=st.sampled_from([1, 2, 4, 8]), rd=st.sampled_from([1, 2, 4, 8]),
       budget=st.integers(2, 64), seed=st.integers(0, 10_000), target=st.one_of(st.none(), st.floats(0.1, 30)),
       levels=st.booleans())
def test_best_pool_pair_picks_what_the_grid_picks(n, rp, rd, budget, seed, target, levels):
    rng = np.random.default_rng(seed)
    step = rng.uniform(0.5, 3.0)
    rate_p = np.round(np.cumsum(rng.uniform(0, step, n)), 1 if levels else 6)  # ties when rounded
    rate_p = np.where(np.arange(1, n + 1) * rp <= budget, rate_p, 0.0)
    rate_link = np.round(np.cumsum(rng.uniform(0, 2 * step, n)), 1 if levels else 6)
    rate_d1 = float(np.round(rng.uniform(0.2, 4.0), 1))
    want, grid_max = _grid_pick(rate_p, rate_d1, rate_link, rp, rd, budget, target)
    got = pm.best_pool_pair(rate_p, rate_d1, rate_link, rp, rd, budget, target)
    assert got["max_rate"] == grid_max
    if want is None:
        assert got["n_p"] == 0
    else:
        assert (got["n_p"], got["n_d"], got["gpus"]) == (want[0], want[1], want[3])
        assert got["rate"] == (want[2] if target is None else target)


def test_a_4096_gpu_budget_needs_no_square_grid():
    n = 4096
    rate_p = np.arange(1, n + 1) * 0.5
    rate_link = np.arange(1, n + 1) * 2.0
    got = pm.best_pool_pair(rate_p, 0.25, rate_link, 1, 1, n)
    # the decode side (0.25 req/s per instance) is the bottleneck: n_d = 2 n_p, 3 n_p <= 4096
    assert got["n_p"] == 1365 and got["n_d"] == 2730 and got["rate"] == 682.5
