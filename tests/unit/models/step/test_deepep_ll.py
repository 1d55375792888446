"""DeepEP low-latency dispatch/combine: the curves fitted to measured kernel times (data/kernels/aic_deepep_ll.csv,
aiconfigurator_core 0.12.0's SGLang WideEP tables) and their use in the DPA decode step and the MoE model.

Pinned against the kernel rows themselves, never against end-to-end numbers (docs/models.md §1.2)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmexplore import presets
from llmexplore.models.moe import alltoall
from llmexplore.models.moe import decode as moe
from llmexplore.models.step.decode import deepep_layer_s
from llmexplore.measured import DEEPEP_LL_CSV, DEEPEP_LL_MIN_EXPERTS, DEEPEP_LL_OPS, deepep_ll_fit
from llmexplore.models.step.collectives import deepep_ll_bytes_per_selection, deepep_ll_params, deepep_ll_s
from llmexplore.models.step.engine import Deployment

ROWS = pd.read_csv(presets.DATA_DIR / DEEPEP_LL_CSV, comment="#")
FITTED = [(g, int(e)) for g, e in ROWS[["gpu", "ep"]].drop_duplicates().itertuples(index=False)]


def _fab(gpu: str, ranks: int = 8):
    return Deployment.build("deepseek-v3", gpu, ranks, runtime="sglang", moe_dispatch="alltoall").fabric


def test_bytes_per_routed_copy_are_deepeps_count():
    """DeepEP tests/test_low_latency.py: num_fp8_bytes = hidden + hidden / 128 * 4 + 16; BF16 2 x hidden."""
    assert deepep_ll_bytes_per_selection(7168, "dispatch") == 7408
    assert deepep_ll_bytes_per_selection(7168, "dispatch", fp8=False) == 14336
    assert deepep_ll_bytes_per_selection(7168, "combine") == 14336


@pytest.mark.parametrize("gpu,ep", FITTED, ids=lambda x: str(x))
@pytest.mark.parametrize("op", DEEPEP_LL_OPS)
def test_every_fit_reproduces_its_kernel_rows(gpu, ep, op):
    """Each (GPU, EP, op) curve against the rows it was fitted to: the multi-node H100 rows (DeepSeek-V3's shape,
    2-256 tokens per rank) within a few percent, the single-node rows (14 MoE shapes from 2,048 to 7,168 wide,
    1-1,024 tokens) within 10% at the median and 25% at the 90th percentile; a and B positive."""
    f = deepep_ll_fit(gpu, ep, op)
    sel = (ROWS.gpu == gpu) & (ROWS.ep == ep) & (ROWS.experts >= DEEPEP_LL_MIN_EXPERTS)
    assert f["rows"] == int(sel.sum()) > 10
    r = ROWS[sel]
    bytes_ = r[f"{op}_GBps"] * r[f"{op}_us"] * 1e3
    pred_us = (f["a_s"] + bytes_ / f["B_Bps"]) * 1e6
    err = (pred_us / r[f"{op}_us"] - 1).abs() * 100
    assert float(err.median()) == pytest.approx(f["median_err_pct"])
    multi = ep > 8
    assert f["median_err_pct"] <= (4.0 if multi else 10.0)
    assert f["p90_err_pct"] <= (8.0 if multi else 25.0)
    assert 5e-6 < f["a_s"] < 40e-6 and 40e9 < f["B_Bps"] < 1e12


def test_published_ep16_rows_at_a_few_tokens_per_rank():
    """The table's EP16 rows (2 x 8 H100, 400 Gb/s NICs; DeepSeek-V3 shape) and the model on 2 x 8 H200, whose
    multi-node curve is H100's (same NIC): at 2 tokens per rank 22.6 us dispatch, 25.9 us combine (the fixed
    latency dominates); at 128, 102.1 / 186.2 us (DeepEP's own README on H800: 118 / 195 us). The worst of these,
    combine at 2 tokens, is 11% above the row (the fit's intercept, 26.3 us, is set by all 13 token counts)."""
    fab = _fab("h200", 16)
    for tokens, disp, comb in ((2, 22.57, 25.9), (32, 40.07, 60.93), (128, 102.1, 186.17)):
        got_d = float(deepep_ll_s("dispatch", tokens * 8, 7168, 16, "h200", fab)) * 1e6
        got_c = float(deepep_ll_s("combine", tokens * 8, 7168, 16, "h200", fab)) * 1e6
        assert got_d == pytest.approx(disp, rel=0.12) and got_c == pytest.approx(comb, rel=0.12), tokens


def test_between_and_beyond_the_measured_ep_sizes():
    """a and 1/B interpolated in log2(EP) between 16 and 32 nodes' fits, held beyond EP64; inside one node the
    GPU's own single-node fit for any EP size; a faster NIC raises B in proportion to its line rate."""
    fab = _fab("h100-sxm", 32)
    f16, f32, f64 = (deepep_ll_fit("h100-sxm", e, "combine") for e in (16, 32, 64))
    a24, B24 = deepep_ll_params("h100-sxm", "combine", 24, fab)
    assert a24 == pytest.approx(f16["a_s"] + (f32["a_s"] - f16["a_s"]) * np.log2(1.5))
    assert 1 / B24 == pytest.approx(1 / f16["B_Bps"] + (1 / f32["B_Bps"] - 1 / f16["B_Bps"]) * np.log2(1.5))
    assert deepep_ll_params("h100-sxm", "combine", 128, fab) == pytest.approx((f64["a_s"], f64["B_Bps"]))
    one = deepep_ll_fit("h100-sxm", 8, "combine")
    assert deepep_ll_params("h100-sxm", "combine", 4, fab) == (one["a_s"], one["B_Bps"])
    fast = Deployment.build("deepseek-v3", "h100-sxm", 32, runtime="sglang", moe_dispatch="alltoall",
                            scale_out_link="roce-400g").fabric
    slow_B = deepep_ll_params("h100-sxm", "combine", 32, fab)[1]
    assert deepep_ll_params("h100-sxm", "combine", 32, fast)[1] == pytest.approx(
        slow_B * fast.scale_out.line_rate_GBps / 50.0)
    # GB200's single-node rows are 4 GPUs (its collector uses the whole 4-GPU node), its own fit
    assert deepep_ll_params("gb200", "dispatch", 8, _fab("gb200")) == pytest.approx(
        (deepep_ll_fit("gb200", 4, "dispatch")["a_s"], deepep_ll_fit("gb200", 4, "dispatch")["B_Bps"]))


def test_no_curve_without_measurements():
    """MI300X has no DeepEP table (DeepEP is NVIDIA-only): callers keep the link-priced all-to-all; one rank sends
    nothing."""
    amd = _fab("mi300x")
    assert deepep_ll_params("mi300x", "dispatch", 8, amd) is None
    assert deepep_ll_s("dispatch", 16, 7168, 8, "mi300x", amd) is None
    assert deepep_ll_params("h100-sxm", "dispatch", 1, _fab("h100-sxm")) is None


def test_bootstrap_draws_are_fixed_and_near_the_fit():
    fit = deepep_ll_fit("b200", 8, "dispatch")
    d1, d1b, d2 = (deepep_ll_fit("b200", 8, "dispatch", i) for i in (1, 1, 2))
    assert d1 == d1b and d1["a_s"] != d2["a_s"]
    for d in (d1, d2):
        assert d["a_s"] == pytest.approx(fit["a_s"], rel=0.3) and d["B_Bps"] == pytest.approx(fit["B_Bps"], rel=0.3)


def test_dpa_decode_layer_uses_the_curves():
    """A DPA16 decode step of DeepSeek-V3 on 2 x 8 H200 at 2 sequences per rank: dispatch + combine of 16
    FP8 / BF16 copies per rank, a + copies x bytes / B each (about 48 us per MoE layer)."""
    dep = Deployment.build("deepseek-v3", "h200", 16, runtime="sglang", weight_dtype="fp8", moe_dispatch="alltoall")
    (a_d, B_d), (a_c, B_c) = (deepep_ll_params("h200", op, 16, dep.fabric) for op in DEEPEP_LL_OPS)
    want = a_d + 16 * 7408 / B_d + a_c + 16 * 14336 / B_c
    assert float(deepep_layer_s(dep, 2, 1)) == pytest.approx(want, rel=1e-12)
    assert 40e-6 < want < 56e-6


def test_moe_expert_dispatch_uses_the_curves_and_skew_raises_it():
    """MoE model, DPA + EP16 on H200, per-expert dispatch: uniform routing gives exactly a + N_loc k bytes / B;
    a hot expert makes the busiest rank receive more, so the time grows; TP x EP groups keep the link model."""
    md = moe.MoEDeployment.build("deepseek-v3", "h200", 16, tp=1, ep=16, dispatch="expert")
    r1 = moe.step_time(md, 256, 4096, skew=1.0)
    (a_d, B_d), (a_c, B_c) = (deepep_ll_params("h200", op, 16, md.fabric) for op in DEEPEP_LL_OPS)
    n_loc = 256 / 16
    assert float(r1["dispatch_layer_s"]) == pytest.approx(a_d + n_loc * 8 * 7408 / B_d, rel=1e-9)
    assert float(r1["combine_layer_s"]) == pytest.approx(a_c + n_loc * 8 * 14336 / B_c, rel=1e-9)
    r3 = moe.step_time(md, 256, 4096, skew=3.0)
    assert float(r3["dispatch_layer_s"]) > float(r1["dispatch_layer_s"])
    grouped = moe.MoEDeployment.build("deepseek-v3", "h200", 16, tp=2, ep=8, dispatch="expert")
    assert alltoall.low_latency_curves(grouped) is None
