"""The kernel-efficiency model (llmexplore/models/step/kernels.py), its fit (llmexplore/kernelfit.py) and its use by
the step engine (docs/models.md §1.2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from llmexplore import kernelfit, presets
from llmexplore.models.step import kernels as K
from llmexplore.models.step.decode import step_time
from llmexplore.models.step.engine import Deployment, kernel_curve, kernel_rates, kernel_s

CURVES = yaml.safe_load((presets.DATA_DIR / "kernel_efficiency.yaml").read_text())


# ---- the soft roofline ------------------------------------------------------------------------------------------
@given(f=st.floats(0, 1e15), b=st.floats(0, 1e12), p=st.floats(1.0, 16.0))
@settings(max_examples=200, deadline=None)
def test_soft_roofline_between_max_and_sum(f, b, p):
    rc, rb = 5e14, 3e12
    t = float(K.soft_roofline_s(f, b, rc, rb, 0.0, p))
    hi, tot = max(f / rc, b / rb), f / rc + b / rb
    assert hi * (1 - 1e-12) <= t <= tot * (1 + 1e-12)


def test_soft_roofline_limits():
    # p = 1 adds the two times, p = inf is the textbook max(), overhead adds
    assert K.soft_roofline_s(2.0, 3.0, 1.0, 1.0, 0.5, 1.0) == pytest.approx(5.5)
    assert K.soft_roofline_s(2.0, 3.0, 1.0, 1.0, 0.5, math.inf) == pytest.approx(3.5)
    # equal times at p = 2: sqrt(2) x
    assert K.soft_roofline_s(1.0, 1.0, 1.0, 1.0, 0.0, 2.0) == pytest.approx(math.sqrt(2))
    # a larger knee is never slower
    ts = [float(K.soft_roofline_s(1.0, 0.7, 1.0, 1.0, 0.0, p)) for p in (1, 2, 4, 8, 16)]
    assert ts == sorted(ts, reverse=True)


@given(st.sampled_from(K.PARAMS), st.floats(-30, 30))
def test_fit_coordinates_round_trip(name, u):
    v = float(K.from_u(name, u))
    lo, hi = K.PARAM_BOUNDS[name]
    assert lo <= v <= hi
    if abs(u) < 15:
        assert float(K.to_u(name, v)) == pytest.approx(u, abs=1e-6)


# ---- work counts ------------------------------------------------------------------------------------------------
def test_gemm_work_closed_form():
    f, b = K.gemm_work(128, 8192, 4096, b_w=1.0, b_in=1.0, b_out=2.0)
    assert f == 2 * 128 * 8192 * 4096
    assert b == 8192 * 4096 * 1 + 128 * 4096 * 1 + 128 * 8192 * 2


def test_mla_attention_flops_match_deepseek_v3_widths():
    # DeepSeek-V3 config.json: kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128.
    # Absorbed decode: 2 x (512 + 64) + 2 x 512 = 2,176 FLOP per head per context token (issue 9 §1);
    # un-absorbed prefill: 2 x (192 + 128) = 640 FLOP per head per query-key pair.
    f_dec, _ = K.attention_work("decode", "mla", batch=1, tokens=1, heads=1)
    assert f_dec == 2176
    f_pre, _ = K.attention_work("prefill", "mla", batch=1, tokens=1, heads=1)
    assert f_pre == 640  # one token: one pair


def test_gqa_decode_bytes_are_the_kv_cache():
    # Llama-3-70B at TP8: one KV head of 128 per rank, BF16: 2 x 128 x 2 B = 512 B per token per layer
    _, b = K.attention_work("decode", "gqa", batch=1, tokens=4096, heads=8, kv_heads=1, head_dim=128, b_kv=2.0)
    assert b == 4096 * 512 + 2 * 8 * 128 * 2


def test_moe_block_tile_padding():
    args = dict(experts=256, topk=8, hidden=7168, inter=2048, moe_ep=8, b_w=1.0, b_a=1.0)
    f1, b1 = K.moe_block_work(64, tile_m=1, **args)
    f128, b128 = K.moe_block_work(64, tile_m=128, **args)
    assert b1 == b128 and f128 >= f1
    # unpadded FLOPs are the pairs' FLOPs: tokens x topk / ep pairs x 2 x 3 H I
    assert f1 == pytest.approx(64 * 8 / 8 * 2 * 3 * 7168 * 2048)
    # at 64 tokens and 32 local experts each hit expert has ~2 rows: a 128-row tile computes ~60x the FLOPs
    assert 30 < f128 / f1 < 128


# ---- the fitted curves ------------------------------------------------------------------------------------------
def test_every_engine_curve_is_physical():
    for engine, gpus in CURVES.items():
        if engine == "rejected":
            continue
        for gpu, curves in gpus.items():
            for key, c in curves.items():
                assert 0 < c["eta_compute"] <= 1.0, (engine, gpu, key)
                assert 0 < c["eta_mem"] <= K.PARAM_BOUNDS["eta_mem"][1], (engine, gpu, key)
                assert c["overhead_us"] <= kernelfit.MAX_OVERHEAD_US, (engine, gpu, key)
                # DeepGEMM's curve stands on its README's 10 published shapes (test_deepgemm_curve_is_pinned_...)
                assert c["points"] >= (10 if key == "grouped_gemm.deepgemm.fp8" else 20), (engine, gpu, key)


def test_fp8_gemms_reach_less_of_their_peak_than_bf16():
    # issue 9 §1: measured FP8 GEMMs reach 47-69% of the FP8 peak, BF16 71-82% of the BF16 peak
    for gpu in kernelfit.GPUS:
        c = CURVES["trtllm"][gpu]
        assert c["gemm.plain.fp8"]["eta_compute"] < c["gemm.plain.bf16"]["eta_compute"], gpu


def test_grouped_gemms_are_less_efficient_than_dense_at_decode_shapes():
    # a DeepSeek-V3 decode MoE layer at 8 tokens per rank vs a dense GEMM of the same FLOPs
    dep = Deployment.build("deepseek-v3", "h200", 8, runtime="trtllm")
    c = kernel_curve(dep, "grouped_gemm")
    assert c is not None and c.source
    f, b = K.moe_block_work(8, 256, 8, 7168, 2048, moe_ep=8, b_w=1.0, b_a=1.0, tile_m=c.tile_m)
    hw = dep.hardware
    t = 2 * c.time_s(f / 2, b / 2, hw.fp8_TFLOPS * 1e12, hw.hbm_bw_TBps * 1e12)
    assert f / t / (hw.fp8_TFLOPS * 1e12) < 0.05  # a few per cent of peak, as measured (issue 9 §1)


@pytest.mark.parametrize("engine,gpu,key", [("trtllm", "h100-sxm", "gemm.plain.bf16"),
                                             ("vllm", "b200", "attention_decode.gqa.bf16"),
                                             ("sglang", "h200", "attention_prefill.mla.bf16")])
def test_yaml_is_in_sync_with_the_fit(engine, gpu, key):
    """Re-fit three curves from data/kernels and compare with data/kernel_efficiency.yaml (regenerate it with
    python -m llmexplore.kernelfit when this fails)."""
    rows = kernelfit.load_rows(gpu, engine)
    cls, variant, dtype = key.split(".")
    part = rows[(rows.cls == cls) & (rows.variant == variant) & (rows.dtype == dtype)]
    c = kernelfit.fit_curve(part, bootstrap=0)
    want = CURVES[engine][gpu][key]
    for name in ("eta_compute", "eta_mem", "knee"):
        assert getattr(c, name) == pytest.approx(want[name], rel=2e-3, abs=2e-3), name
    assert c.overhead_us == pytest.approx(want["overhead_us"], rel=2e-3)
    assert c.median_err_pct == pytest.approx(want["median_err_pct"], abs=0.05)


@pytest.mark.parametrize("gpu", kernelfit.GPUS)
def test_curves_are_pinned_to_their_data(gpu):
    """Each trtllm curve's stated error is what it makes on its kernel rows today, and BF16 GEMMs, the bulk of
    every dense model's time, are within 10% median."""
    rows = kernelfit.load_rows(gpu, "trtllm")
    for key, want in CURVES["trtllm"][gpu].items():
        cls, variant, dtype = key.split(".")
        part = rows[(rows.cls == cls) & (rows.variant == variant) & (rows.dtype == dtype)]
        if "floor" in part.columns:
            part = part[~part["floor"].fillna(False).astype(bool)]
        c = K.Curve(**{k: want[k] for k in ("eta_compute", "eta_mem", "overhead_us", "knee", "tile_m", "eta_mem2",
                                            "overhead2_us") if k in want})
        err = np.abs(kernelfit.predict_rows(part, c) / part.measured_s.to_numpy() - 1) * 100
        assert np.median(err) == pytest.approx(want["median_err_pct"], abs=0.6), key
    assert CURVES["trtllm"][gpu]["gemm.plain.bf16"]["median_err_pct"] < 10


# ---- the engine uses them ---------------------------------------------------------------------------------------
def test_runtimes_choose_their_kernel_sets():
    assert Deployment.build("llama-3-70b", "h100-sxm", 8, runtime="default").kernels.engine == "any"
    for e in ("trtllm", "vllm", "sglang"):
        assert Deployment.build("llama-3-70b", "h100-sxm", 8, runtime=e).kernels.engine == e
    assert Deployment.build("llama-3-70b", "h100-sxm", 8, runtime="scalar").kernels is None
    gb = Deployment.build("llama-3-70b", "gb200", 8, runtime="default").kernels
    assert gb.gpu == "b200" and "b200" in gb.note
    mi = Deployment.build("llama-3-70b", "mi300x", 8, runtime="default").kernels  # aiter's FP8 GEMM table only
    assert mi.engine == "any" and mi.gpu == "mi300x" and set(mi.curves) == {MI300X_GEMM}
    assert Deployment.build("llama-3-70b", "mi300x", 8, runtime="vllm").kernels.curves.keys() == {MI300X_GEMM}
    for e in ("trtllm", "sglang"):  # no MI300X rows of these engines: scalar efficiencies
        assert Deployment.build("llama-3-70b", "mi300x", 8, runtime=e).kernels is None


def test_rejected_curves_fall_back_to_the_neutral_one():
    for engine, gpus in CURVES.get("rejected", {}).items():
        for gpu, keys in gpus.items():
            got = presets.kernel_curves(engine, gpu)[1]
            for key in keys:
                assert key not in CURVES[engine][gpu]
                assert got[key] == {**CURVES["any"][gpu][key]}


def test_fp8_weights_are_not_twice_as_fast_as_bf16_in_compute():
    """A compute-bound prefill in FP8 gains less than the 2x datasheet ratio (FP8 GEMMs reach less of their
    peak), and decode (weight-bound) gains close to 2x on the GEMM part."""
    bf = Deployment.build("llama-3-70b", "h100-sxm", 8, runtime="trtllm", weight_dtype="bf16")
    f8 = Deployment.build("llama-3-70b", "h100-sxm", 8, runtime="trtllm", weight_dtype="fp8")
    pre = [float(step_time(d, 1, 4096, "TP", q_tokens=8192, logits_tokens=1)["ffn_s"]) for d in (bf, f8)]
    assert 1.0 < pre[0] / pre[1] < 1.8
    assert kernel_rates(f8, "gemm").flops_per_s < 2 * kernel_rates(bf, "gemm").flops_per_s


def test_mla_prefill_uses_the_prefill_kernel_and_unabsorbed_flops():
    """A 2,048-token DeepSeek-V3 prefill chunk over 1,024 tokens of average context on TP8: the core is the
    prefill curve at 640 FLOP per head per pair (un-absorbed), not the decode curve at 2,176."""
    dep = Deployment.build("deepseek-v3", "h200", 8, runtime="trtllm")
    q, ctx, h = 2048, 1024.0, dep.model.heads / 8
    got = float(step_time(dep, 1, ctx, "TP", q_tokens=q, logits_tokens=1)["core_s"])
    qo = q * h * ((512 + 64) + 512) * dep.b_a
    per_layer = kernel_s(dep, "attention_prefill", 2 * q * h * (192 + 128) * ctx, ctx * h * (192 + 128) * dep.b_a + qo)
    assert got == pytest.approx(dep.model.layers * float(per_layer), rel=1e-9)
    absorbed = kernel_s(dep, "attention_decode", 2 * q * h * 2176 / 2 * ctx, ctx * 576 * dep.b_kv + qo)
    assert got < dep.model.layers * float(absorbed)


# ---- collectives ------------------------------------------------------------------------------------------------
def test_fitted_allreduce_replaces_the_link_assumption():
    """TensorRT-LLM's custom all-reduce on 8 H100s takes 3.6 us for 16 KB, 26 us for 1 MB and 1.09 ms for 256 MB
    (aiconfigurator rows); the link preset's assumed alpha of 8 + 0.5 x 7 us would have charged 11.5 us for
    16 KB, 160 times per Llama-3-70B decode step. The two-path curve follows all three."""
    from llmexplore.models.step.collectives import allreduce_s

    dep = Deployment.build("llama-3-70b", "h100-sxm", 8, runtime="trtllm")
    assert dict(dep.fabric.fitted)[("all_reduce", 8)]
    t = float(allreduce_s(16384, 8, dep.fabric)) * 1e6
    assert 2.5 < t < 6.0
    assert float(allreduce_s(1 << 20, 8, dep.fabric)) * 1e6 == pytest.approx(26.0, rel=0.15)
    assert float(allreduce_s(1 << 28, 8, dep.fabric)) * 1e6 == pytest.approx(1089.6, rel=0.15)
    # golden partner (issue 18 §5): the model's value when written, to 1e-9; a deliberate change shows here
    pinned_us = [3.6301546888166603, 25.37490008426628, 1120.7212708907255]
    assert [float(allreduce_s(n, 8, dep.fabric)) * 1e6 for n in (16384, 1 << 20, 1 << 28)] == pytest.approx(
        pinned_us, rel=1e-9)
    scalar = Deployment.build("llama-3-70b", "h100-sxm", 8, runtime="scalar")
    assert scalar.fabric.fitted == ()
    assert float(allreduce_s(16384, 8, scalar.fabric)) * 1e6 == pytest.approx(11.5 + 2 * 7 / 8 * 16384 / 370e3, rel=1e-6)


def test_fitted_collectives_scale_with_another_link():
    """On another scale-up link the measured curve is scaled by the links' latency and bandwidth ratios."""
    from llmexplore.models.step.collectives import allreduce_s

    own = Deployment.build("llama-3-70b", "h100-sxm", 8, runtime="trtllm")
    pcie = Deployment.build("llama-3-70b", "h100-sxm", 8, runtime="trtllm", scale_up_link="pcie5-x16")
    a_own, b_own, *_ = dict(own.fabric.fitted)[("all_reduce", 8)]
    a, b, *_ = dict(pcie.fabric.fitted)[("all_reduce", 8)]
    nv, pc = presets.link("nvlink4"), presets.link("pcie5-x16")
    assert b / b_own == pytest.approx(pc.achievable_GBps / nv.achievable_GBps)
    assert a / a_own == pytest.approx((pc.latency_us + 7 * pc.latency_per_rank_us) / (nv.latency_us + 7 * nv.latency_per_rank_us))
    assert float(allreduce_s(1 << 24, 8, pcie.fabric)) > float(allreduce_s(1 << 24, 8, own.fabric))


def test_a_replaced_runtime_refreshes_the_fitted_collectives():
    import dataclasses

    dep = Deployment.build("llama-3-70b", "h100-sxm", 8, runtime="trtllm")
    scalar = dataclasses.replace(dep, runtime=presets.runtime("scalar"))
    assert dep.fabric.fitted and scalar.fabric.fitted == ()


# ---- DPA with all-to-all expert dispatch (DeepEP) ------------------------------------------------------------
def test_alltoall_dispatch_moves_only_the_routed_tokens():
    """DeepSeek-V3 prefill on 32 H100 with data-parallel attention: an all-gather sends every rank's tokens to all
    31 others; DeepEP sends each token only to its top-8 experts' ranks (FP8 out, BF16 back), so the MoE
    layers' communication shrinks while the dense layers stay as they are; the experts run DeepGEMM's kernels
    (test_deepep_deployments_price_experts_with_deepgemm), everything else is unchanged."""
    g = Deployment.build("deepseek-v3", "h100-sxm", 32)
    a = Deployment.build("deepseek-v3", "h100-sxm", 32, moe_dispatch="alltoall")
    rg = step_time(g, 128, 2048.0, "DPA", q_tokens=4096, logits_tokens=1)
    ra = step_time(a, 128, 2048.0, "DPA", q_tokens=4096, logits_tokens=1)
    assert float(ra["comm_ffn_moe_s"]) < 0.8 * float(rg["comm_ffn_moe_s"])
    assert float(ra["ffn_moe_s"]) < float(rg["ffn_moe_s"])
    for k in ("ffn_dense_s", "attention_s", "comm_ffn_dense_s", "comm_attn_s"):
        assert float(ra[k]) == pytest.approx(float(rg[k]), rel=1e-12), k
    # the TP layout's communication does not change
    assert float(step_time(a, 64, 4096, "TP")["comm_s"]) == float(step_time(g, 64, 4096, "TP")["comm_s"])
    with pytest.raises(Exception, match="moe_dispatch must be one of"):
        Deployment.build("deepseek-v3", "h100-sxm", 32, moe_dispatch="deepep")


# ---- DeepEP deployments: DeepGEMM grouped GEMMs, DeepEP normal kernels, two-batch overlap (issue 9) ----------
DEEPGEMM = "grouped_gemm.deepgemm.fp8"


def test_deepgemm_rows_are_the_readme_table():
    """latency_us is derived from the README's TFLOPS; the README's own bandwidth column must agree with the
    bytes the fit counts (FP8 A and B, BF16 C), which pins the work formula to the published kernel."""
    import pandas as pd

    d = pd.read_csv(presets.DATA_DIR / "kernels" / "deepgemm_grouped_h800.csv", comment="#")
    f = 2.0 * d.groups * d.m_per_group * d.n * d.k
    assert np.allclose(f / (d.tflops * 1e12) * 1e6, d.latency_us, rtol=2e-3)
    by = d.groups * (d.n * d.k + d.m_per_group * d.k) + 2.0 * d.groups * d.m_per_group * d.n
    assert np.allclose(by / (d.latency_us * 1e-6) / 1e9, d.memory_GBps, rtol=3e-3)


def test_deepgemm_curve_is_pinned_to_its_data():
    """The DeepGEMM curve reproduces its 10 H800 rows (median error as stated, < 5%), reaches 2/3 of the FP8
    peak on the contiguous prefill shapes as published (1214-1346 of 1979 TFLOPS), and is the same kernel under
    every engine."""
    rows = kernelfit.load_rows("h100-sxm", "sglang")
    part = rows[(rows.cls == "grouped_gemm") & (rows.variant == "deepgemm")]
    assert len(part) == 10
    want = CURVES["any"]["h100-sxm"][DEEPGEMM]
    c = K.Curve(**{k: want[k] for k in ("eta_compute", "eta_mem", "overhead_us", "knee", "tile_m")})
    err = np.abs(kernelfit.predict_rows(part, c) / part.measured_s.to_numpy() - 1) * 100
    assert np.median(err) == pytest.approx(want["median_err_pct"], abs=0.1)
    assert np.median(err) < 5 and err.max() < 10
    assert c.tile_m == kernelfit.DEEPGEMM_M_ALIGN == 128
    assert 0.6 < c.eta_compute < 0.75
    for engine in ("trtllm", "vllm", "sglang"):
        assert CURVES[engine]["h100-sxm"][DEEPGEMM]["eta_compute"] == want["eta_compute"]
    fit = kernelfit.fit_curve(part, bootstrap=0)
    assert fit.eta_compute == pytest.approx(want["eta_compute"], rel=2e-3)


def test_deepep_deployments_price_experts_with_deepgemm():
    dep = Deployment.build("deepseek-v3", "h100-sxm", 32, runtime="sglang", moe_dispatch="alltoall")
    assert kernel_curve(dep, "grouped_gemm").source.endswith(DEEPGEMM)
    gather = Deployment.build("deepseek-v3", "h100-sxm", 32, runtime="sglang")
    assert kernel_curve(gather, "grouped_gemm").source.endswith("grouped_gemm.block.fp8")
    bf16 = Deployment.build("deepseek-v3", "h100-sxm", 32, runtime="sglang", moe_dispatch="alltoall",
                            weight_dtype="bf16")
    assert not kernel_curve(bf16, "grouped_gemm").source.endswith(DEEPGEMM)
    h200 = Deployment.build("deepseek-v3", "h200", 32, runtime="sglang", moe_dispatch="alltoall")
    assert kernel_curve(h200, "grouped_gemm").source.endswith("grouped_gemm.block.fp8")  # no H200 rows


def test_sglang_context_mla_rows_are_priced_in_the_form_they_were_timed():
    """aiconfigurator's SGLang collector times Hopper context MLA absorbed (one 576/512-wide latent head): a
    4 x 4096-token, 128-head row takes 16.4 ms, 168 TFLOPS at the un-absorbed 640 FLOP per head-pair but 570 at
    the 2,176 it computes, FlashAttention-3 territory. Priced so, the SGLang prefill curve is as efficient as
    TensorRT-LLM's, not 3x slower."""
    rows = kernelfit.load_rows("h100-sxm", "sglang")
    r = rows[(rows.cls == "attention_prefill") & (rows.variant == "mla") & (rows.dtype == "bf16")
             & (rows.x_batch == 4) & (rows.x_isl == 4096) & (rows.x_heads == 128)].iloc[0]
    pairs = 4096 * 4097 / 2
    assert r.flops == pytest.approx(2 * 4 * 128 * (576 + 512) * pairs)
    assert r.flops / r.measured_s / 1e12 == pytest.approx(570, rel=0.02)
    sg, tr = (CURVES[e]["h100-sxm"]["attention_prefill.mla.bf16"]["eta_compute"] for e in ("sglang", "trtllm"))
    assert sg > 0.8 * tr
    f, b = K.attention_work("prefill", "mla_absorbed", batch=1, tokens=2, heads=2)
    assert f == pytest.approx(2 * 2 * (576 + 512) * 3) and b == pytest.approx(2 * (2 * (576 + 512) + 576) * 2)


def test_deepep_normal_kernels_send_one_copy_per_node():
    """Hand calculation for DeepSeek-V3 prefill on 4 nodes x 8 H100 (EP32), 16,384 tokens per rank: a token's 8
    experts (uniform over 256, 64 per node) reach E[d] = 4 (1 - C(192, 8) / C(256, 8)) = 3.61 distinct nodes,
    each sent one FP8 copy (7,168 + 4 x 56 scale bytes) over RDMA at DeepEP's 58 GB/s (EP32 dispatch), combined
    back in BF16 (14,336 B) at 57 GB/s; alpha as the hierarchical all-to-all. Per-expert copies (the low-latency
    kernels, decode steps) would carry 8 / 3.61 = 2.2x the bytes."""
    import math as m_

    from llmexplore.models.step.decode import deepep_layer_s
    from llmexplore.models.step.collectives import alltoall_s, alpha_s, deepep_ll_params, deepep_normal_GBps

    dep = Deployment.build("deepseek-v3", "h100-sxm", 32, runtime="sglang", moe_dispatch="alltoall")
    fab = dep.fabric
    d = 4 * (1 - m_.comb(192, 8) / m_.comb(256, 8))
    assert d == pytest.approx(3.6142, abs=1e-4)
    assert deepep_normal_GBps("dispatch", 32, fab) == 58.0 and deepep_normal_GBps("combine", 32, fab) == 57.0
    alpha = alpha_s(8, fab.scale_up) + alpha_s(4, fab.scale_out)
    n = 16384
    want = 2 * alpha + n * d * 7392 / 58e9 + n * d * 14336 / 57e9
    assert float(deepep_layer_s(dep, n, 4096)) == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(0.0225, rel=2e-3)  # 22.5 ms per MoE layer (vs 46 ms per-expert)
    # decode steps (one query token) send one copy per routed expert with the low-latency kernels, priced by their
    # measured curves (tests/unit/models/step/test_deepep_ll.py); on MI300X, which has none, as link-priced all-to-alls
    (a_d, B_d), (a_c, B_c) = (deepep_ll_params("h100-sxm", op, 32, fab) for op in ("dispatch", "combine"))
    ll = a_d + n * 8 * (7168 + 4 * 56 + 16) / B_d + a_c + n * 8 * 14336 / B_c
    assert float(deepep_layer_s(dep, n, 1)) == pytest.approx(ll, rel=1e-12)
    amd = Deployment.build("deepseek-v3", "mi300x", 8, runtime="sglang", moe_dispatch="alltoall")
    a2a = alltoall_s(n * 8 * 7168 * 1.0, 8, amd.fabric) + alltoall_s(n * 8 * 7168 * 2.0, 8, amd.fabric)
    assert float(deepep_layer_s(amd, n, 1)) == pytest.approx(float(a2a), rel=1e-12)
    # between the measured EP sizes the bandwidth is interpolated in log2(EP), beyond them held
    assert deepep_normal_GBps("dispatch", 24, fab) == pytest.approx(43 + (58 - 43) * m_.log2(1.5))
    assert deepep_normal_GBps("dispatch", 128, fab) == 51.0
    # inside one node: NVLink, scaled from H800's 200 GB/s line to H100's 450
    assert deepep_normal_GBps("dispatch", 8, fab) == pytest.approx(153 * 450 / 200)


def test_two_batch_overlap_hand_calculation():
    """Two micro-batches over L layers of compute c and communication m (whole step per layer):
    L max(c, m) + min(c, m) / 2. c = 3, m = 2, L = 10: the compute stream runs 30, B's last m/2 = 1 sticks out."""
    from llmexplore.models.step.decode import two_batch_overlap_s

    assert float(two_batch_overlap_s(3.0, 2.0, 10)) == pytest.approx(31.0)
    assert float(two_batch_overlap_s(2.0, 3.0, 10)) == pytest.approx(31.0)
    assert float(two_batch_overlap_s(3.0, 0.0, 10)) == pytest.approx(30.0)  # nothing to hide
    assert np.allclose(two_batch_overlap_s(np.array([1.0, 4.0]), 2.0, 5), [10.5, 21.0])
    # the communication kernels hold a share f of the SMs while they run: the overlapped compute takes f m longer
    # (c = 3, m = 2, f = 20/132: 10 x (3 + 0.303) + 1); comm-bound layers stay comm-bound (c = 1, m = 3, f = 0.2:
    # 1 + 0.6 < 3, so 10 x 3 + 0.5)
    assert float(two_batch_overlap_s(3.0, 2.0, 10, 20 / 132)) == pytest.approx(10 * (3 + 2 * 20 / 132) + 1.0)
    assert float(two_batch_overlap_s(1.0, 3.0, 10, 0.2)) == pytest.approx(30.5)


def test_two_batch_overlap_hides_the_moe_alltoall_in_the_step():
    """With TBO the step loses exactly the hidden all-to-all (the overlapped compute running on the SMs DeepEP's
    normal kernels leave: 112 of H100's 132), the parts still add up, and the overlap is off by default (every
    engine's default) and changes nothing outside DPA + alltoall."""
    from llmexplore.models.step.decode import two_batch_overlap_s
    from llmexplore.models.step.collectives import DEEPEP_NORMAL_SMS

    kw = dict(runtime="sglang", moe_dispatch="alltoall")
    off = Deployment.build("deepseek-v3", "h100-sxm", 32, **kw)
    on = Deployment.build("deepseek-v3", "h100-sxm", 32, two_batch_overlap=True, **kw)
    assert off.two_batch_overlap is False
    args = (128, 2048.0, "DPA")
    r0 = step_time(off, *args, q_tokens=4096, logits_tokens=1)
    r1 = step_time(on, *args, q_tokens=4096, logits_tokens=1)
    L, Lm = on.model.layers, on.model.moe_layers
    c = (float(r0["attention_s"]) / L) + float(r0["ffn_moe_s"]) / Lm  # one MoE layer's compute
    mm = float(r0["comm_ffn_moe_s"]) / Lm
    exposed = float(two_batch_overlap_s(c, mm, Lm, DEEPEP_NORMAL_SMS / on.hardware.sms)) - Lm * c
    assert float(r1["comm_ffn_moe_s"]) == pytest.approx(exposed, rel=1e-9)
    assert float(r1["comm_hidden_s"]) == pytest.approx(Lm * mm - exposed, rel=1e-9)
    assert float(r1["step_s"]) == pytest.approx(float(r0["step_s"]) - float(r1["comm_hidden_s"]), rel=1e-12)
    parts = sum(float(r1[k]) for k in ("attention_s", "ffn_s", "head_s", "comm_s", "overhead_s"))
    assert float(r1["step_s"]) == pytest.approx(parts, rel=1e-12)
    assert float(r0["comm_hidden_s"]) == 0.0
    for lay in ("TP", "DOP"):
        assert float(step_time(on, 64, 4096, lay)["step_s"]) == float(step_time(off, 64, 4096, lay)["step_s"])
    with pytest.raises(Exception, match="two_batch_overlap must be true or false"):
        Deployment.build("deepseek-v3", "h100-sxm", 32, two_batch_overlap="yes")


# ---- MI300X: aiter's tuned A8W8 GEMM table (issue 9) ----------------------------------------------------------
MI300X_GEMM = "gemm.plain.fp8"


def test_mi300x_gemm_rows_are_the_aiter_table():
    """The tuner's own bandwidth column equals (m k + n k + 2 m n) bytes / latency, the bytes the fit counts for an
    8-bit GEMM with BF16 output, and no row beats MI300X's HBM bandwidth or its 8-bit dense peak (the tuner rotates
    its inputs, so no weight matrix is served from the 256 MB Infinity Cache)."""
    import pandas as pd

    d = pd.read_csv(presets.DATA_DIR / "kernels" / "aiter_a8w8_gemm_mi300x.csv", comment="#")
    assert len(d) == 427 and d.dtype.eq("int8").all()
    f, by = K.gemm_work(d.m, d.n, d.k, b_w=1.0, b_in=1.0)
    assert np.allclose(by / (d.latency_us * 1e-6) / 1e9, d.bw_GBps, rtol=1e-3)
    assert np.allclose(f / (d.latency_us * 1e-6) / 1e12, d.tflops, rtol=1e-2, atol=0.01)
    hw = presets.hardware("mi300x")
    assert (by / (d.latency_us * 1e-6)).max() < hw.hbm_bw_TBps * 1e12
    assert (f / (d.latency_us * 1e-6)).max() < hw.fp8_TFLOPS * 1e12
    # the four Llama-3.1-70B TP8 projections at every decode batch 1..256 the tuner swept
    for n, k in ((1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584)):
        assert {1, 16, 32, 64, 128, 256} <= set(d[(d.n == n) & (d.k == k)].m), (n, k)


def test_mi300x_gemm_curve_is_pinned_to_its_data():
    """The MI300X FP8 GEMM curve reproduces its 427 rows (median error as stated, < 10%), was fitted for vLLM and
    is the engine-neutral one too; a Llama-3.1-70B TP8 decode layer's four projections at batch 1 take about what
    the table says (60.6 us measured), three times the weights at datasheet HBM bandwidth (20.1 us)."""
    rows = kernelfit.load_rows("mi300x", "vllm")
    assert set(rows.cls) == {"gemm"} and len(rows) == 427
    want = CURVES["vllm"]["mi300x"][MI300X_GEMM]
    assert CURVES["any"]["mi300x"][MI300X_GEMM]["eta_mem"] == want["eta_mem"]
    assert set(CURVES["vllm"]["mi300x"]) == {MI300X_GEMM} and "mi300x" not in CURVES["trtllm"]
    c = K.Curve(**{k: want[k] for k in ("eta_compute", "eta_mem", "overhead_us", "knee", "tile_m")})
    err = np.abs(kernelfit.predict_rows(rows, c) / rows.measured_s.to_numpy() - 1) * 100
    assert np.median(err) == pytest.approx(want["median_err_pct"], abs=0.1)
    assert np.median(err) < 10
    fit = kernelfit.fit_curve(rows, bootstrap=0)
    for name in ("eta_compute", "eta_mem", "knee"):
        assert getattr(fit, name) == pytest.approx(want[name], rel=2e-3, abs=2e-3), name
    assert fit.overhead_us == pytest.approx(want["overhead_us"], rel=2e-3)
    dep = Deployment.build("llama-3-70b", "mi300x", 8, runtime="vllm", weight_dtype="fp8")
    shapes = ((1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584))
    t = sum(float(kernel_s(dep, "gemm", *K.gemm_work(1, n, k, b_w=1.0, b_in=1.0), dtype="fp8")) for n, k in shapes)
    measured = sum(float(rows[(rows.x_m == 1) & (rows.x_n == n) & (rows.x_k == k)].measured_s.iloc[0])
                   for n, k in shapes)
    assert measured * 1e6 == pytest.approx(60.6, abs=0.1)
    overhead = len(shapes) * dep.runtime.kernel_overhead_us * 1e-6  # the runtime's gap between kernels
    assert t - overhead == pytest.approx(measured, rel=0.15)
    # golden partner (issue 18 §5): the model's value when written, to 1e-9; a deliberate change shows here
    assert t - overhead == pytest.approx(5.679161919206374e-05, rel=1e-9)
    weights = sum(n * k for n, k in shapes) / (dep.hardware.hbm_bw_TBps * 1e12)
    assert t > 2.5 * weights


def test_mi300x_prices_only_its_fp8_gemms_with_the_curve():
    """BF16 GEMMs (LM head), attention and elementwise kernels have no MI300X rows: they keep the scalar
    efficiencies, and the all-reduce keeps the link preset's assumed alpha (no fitted collectives)."""
    dep = Deployment.build("llama-3-70b", "mi300x", 8, runtime="default", weight_dtype="fp8")
    assert f"mi300x/{MI300X_GEMM}" in kernel_curve(dep, "gemm").source
    for kind, dtype in (("gemm", "bf16"), ("attention", None), ("elementwise", None)):
        assert kernel_curve(dep, kind, dtype) is None, kind
    rt, hw = dep.runtime, dep.hardware
    r = kernel_rates(dep, "attention")
    assert r.bytes_per_s == pytest.approx(rt.eta_attn_mem * hw.hbm_bw_TBps * 1e12)
    assert dep.fabric.fitted == ()
