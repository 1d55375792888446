"""Exact layout crossovers of the time per output token in a pipeline, with speculative decoding and with
sliding-window layers (models/layouts/crossover.py, layout_time_model), against the step engine and a dense sweep."""

import numpy as np
import pytest

from llmexplore import sweeps
from llmexplore.models.layouts import crossover as cx
from llmexplore.models.step import per_token as pt
from llmexplore.models.step.engine import LAYOUTS, Deployment

BATCHES = [1, 8, 64, 256]
CASES = {
    "dsv3-pp2": (dict(model="deepseek-v3", gpu="h200", ranks=8, weight_dtype="fp8"), dict(pp=2)),
    "dsv3-pp3": (dict(model="deepseek-v3", gpu="h200", ranks=8, weight_dtype="fp8"), dict(pp=3)),
    "dsv3-mtp1": (dict(model="deepseek-v3", gpu="h200", ranks=8, weight_dtype="fp8"),
                  dict(speculative="deepseek-mtp-1")),
    "dsv3-mtp3": (dict(model="deepseek-v3", gpu="h200", ranks=8, weight_dtype="fp8"),
                  dict(speculative="deepseek-mtp-3")),
    "llama70-ngram": (dict(model="llama-3-70b", gpu="h100-sxm", ranks=8), dict(speculative="ngram-5")),
    "llama8-eagle3": (dict(model="llama-3-8b", gpu="h100-sxm", ranks=2), dict(speculative="eagle3-llama-3.1-8b")),
    # gpt-oss alternates sliding-window (128 tokens) and full layers: the window is a breakpoint of its own
    "gptoss-plain": (dict(model="gpt-oss-120b", gpu="h100-sxm", ranks=2), {}),
    "gptoss-pp2": (dict(model="gpt-oss-120b", gpu="h100-sxm", ranks=2), dict(pp=2)),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    kw, how = CASES[request.param]
    return Deployment.build(**kw), how


def test_the_time_model_is_the_step_engine(case):
    """The piecewise-linear model of each layout equals the engine's time per output token at every context
    (the kernels' soft roofline is the hard one here: no knee)."""
    dep, how = case
    s = np.array([1.0, 17.0, 127.0, 129.0, 1000.0, 65536.0, 1e6])
    for lay in LAYOUTS:
        tm = cx.layout_time_model(dep, BATCHES, lay, **how)
        ref = pt.token_time(dep, np.array(BATCHES)[:, None], s[None, :], lay, **how)["tpot_s"]
        np.testing.assert_allclose(tm.at(s), ref, rtol=1e-12)


def _best(dep, how, B, grid):
    g = sweeps.layouts.best_layout_grid(dep, B, grid, **how)
    labels = np.array([*LAYOUTS, None], dtype=object)
    return labels[np.where(g["best"] < 0, len(LAYOUTS), g["best"])]


def test_boundaries_agree_with_a_dense_sweep_and_are_exact(case):
    dep, how = case
    s_lo, s_hi = 16.0, float(1 << 19)
    bounds, intervals = cx.context_boundaries(dep, BATCHES, s_lo=s_lo, s_hi=s_hi, **how)
    grid = np.geomspace(s_lo, s_hi, 1501)
    for B in BATCHES:
        iv = intervals[B]
        assert iv[0][0] == s_lo and iv[-1][1] == s_hi
        edges = np.array([x[1] for x in iv[:-1]])
        swept = _best(dep, how, B, grid)
        for s, lab in zip(grid, swept):
            if edges.size and np.min(np.abs(edges - s)) <= 1e-7 * s + 1:
                continue
            (expected,) = [x[2] for x in iv if x[0] <= s <= x[1]][:1]
            assert lab == expected, (B, s, lab, expected)
    for bd in bounds:
        if bd.kind == "crossover":
            t = {lay: float(pt.token_time(dep, bd.batch, bd.context, lay, **how)["tpot_s"])
                 for lay in (bd.before, bd.after)}
            assert t[bd.after] == pytest.approx(t[bd.before], rel=1e-9)
        else:
            assert bd.context == float(pt.token_max_context(dep, bd.batch, bd.before, **how, limit=s_hi))


def test_speculation_moves_the_tp_crossover_both_ways():
    """DeepSeek-V3 FP8 on 8x H200. Per output token the verify pass reads each sequence's KV once for k + 1 tokens,
    so TP's replicated-latent penalty shrinks and, at a small batch, TP stays best to a longer context than without
    speculation. But it also all-reduces k + 1 tokens' attention outputs per sequence, which DPA does not: at batch
    64 that tips the balance, and DPA is best from the shortest context on."""
    from llmexplore.models.step.decode import step_time

    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8")

    def intervals(B, **how):
        return cx.context_boundaries(dep, [B], s_lo=64, s_hi=1 << 18, **how)[1][B]

    plain, mtp = intervals(8), intervals(8, speculative="deepseek-mtp-1")
    assert plain[0][2] == mtp[0][2] == "TP" and mtp[0][1] > 1.2 * plain[0][1], (plain, mtp)
    plain, mtp = intervals(64), intervals(64, speculative="deepseek-mtp-1")
    assert plain[0][2] == "TP" and mtp[0][2] == "DPA", (plain, mtp)
    one = float(step_time(dep, 64, 256, "TP")["comm_attn_s"])
    two = float(step_time(dep, 64, 256, "TP", q_tokens=2, logits_tokens=2)["comm_attn_s"])
    assert two > 1.7 * one and float(step_time(dep, 64, 256, "DPA", q_tokens=2)["comm_attn_s"]) == 0.0


def test_a_pipeline_has_two_branches_and_they_cross():
    """Llama-3-70B on 3 stages of 8 H100 (80 layers: the slowest stage holds 27): the time between tokens is
    pp x the slowest stage where the cores dominate, and the cycle where the hops do; the model finds both."""
    dep = Deployment.build("llama-3-70b", "h100-sxm", 8)
    tm = cx.layout_time_model(dep, [3, 3000], "TP", pp=3)
    assert len(tm.branches) == 2
    s = np.geomspace(16, 1 << 20, 200)
    cyc = pt.token_time(dep, np.array([[3], [3000]]), s, "TP", pp=3)
    np.testing.assert_allclose(tm.at(s), cyc["tpot_s"], rtol=1e-12)
