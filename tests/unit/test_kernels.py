"""The kernel-efficiency model (llmexplore/models/kernels.py), its fit (llmexplore/kernelfit.py) and its use by
the step engine (docs/models.md §1.2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from llmexplore import kernelfit, presets
from llmexplore.models import kernels as K
from llmexplore.models.attention import step_time
from llmexplore.models.engine import Deployment, kernel_curve, kernel_rates, kernel_s

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
                assert c["points"] >= 20, (engine, gpu, key)


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
    assert Deployment.build("llama-3-70b", "mi300x", 8, runtime="default").kernels is None  # no kernel data: scalars


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
    from llmexplore.models.collectives import allreduce_s

    dep = Deployment.build("llama-3-70b", "h100-sxm", 8, runtime="trtllm")
    assert dict(dep.fabric.fitted)[("all_reduce", 8)]
    t = float(allreduce_s(16384, 8, dep.fabric)) * 1e6
    assert 2.5 < t < 6.0
    assert float(allreduce_s(1 << 20, 8, dep.fabric)) * 1e6 == pytest.approx(26.0, rel=0.15)
    assert float(allreduce_s(1 << 28, 8, dep.fabric)) * 1e6 == pytest.approx(1089.6, rel=0.15)
    scalar = Deployment.build("llama-3-70b", "h100-sxm", 8, runtime="scalar")
    assert scalar.fabric.fitted == ()
    assert float(allreduce_s(16384, 8, scalar.fabric)) * 1e6 == pytest.approx(11.5 + 2 * 7 / 8 * 16384 / 370e3, rel=1e-6)


def test_fitted_collectives_scale_with_another_link():
    """On another scale-up link the measured curve is scaled by the links' latency and bandwidth ratios."""
    from llmexplore.models.collectives import allreduce_s

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
    layers' communication shrinks while the expert compute and the dense layers stay as they are."""
    g = Deployment.build("deepseek-v3", "h100-sxm", 32)
    a = Deployment.build("deepseek-v3", "h100-sxm", 32, moe_dispatch="alltoall")
    rg = step_time(g, 128, 2048.0, "DPA", q_tokens=4096, logits_tokens=1)
    ra = step_time(a, 128, 2048.0, "DPA", q_tokens=4096, logits_tokens=1)
    assert float(ra["comm_ffn_moe_s"]) < 0.8 * float(rg["comm_ffn_moe_s"])
    for k in ("ffn_s", "attention_s", "comm_ffn_dense_s", "comm_attn_s"):
        assert float(ra[k]) == pytest.approx(float(rg[k]), rel=1e-12), k
    # TP and dense models do not change
    assert float(step_time(a, 64, 4096, "TP")["step_s"]) == float(step_time(g, 64, 4096, "TP")["step_s"])
    with pytest.raises(Exception, match="moe_dispatch must be one of"):
        Deployment.build("deepseek-v3", "h100-sxm", 32, moe_dispatch="deepep")
