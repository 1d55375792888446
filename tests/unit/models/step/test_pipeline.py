"""Pipeline parallelism on the step engine (llmexplore.models.step.pipeline, docs/models.md §1.5): the rules, the
closed forms, memory per stage, the simulator's virtual engines, and MLPerf's published pipeline results."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from llmexplore.errors import SpecError
from llmexplore.models.serving.step_tables import pipeline_tables, step_tables
from llmexplore.models.step import pipeline as pl
from llmexplore.models.step.decode import max_batch, memory_per_rank, step_time
from llmexplore.models.step.engine import Deployment


def dep(model="llama-2-70b", gpu="h100-sxm", ranks=1, **kw):
    return Deployment.build(model, gpu, ranks, weight_dtype="fp8", kv_dtype="fp8", **kw)


@pytest.mark.parametrize("pp, ranks, words", [
    (81, 1, "pp (81) must be at most the layers of llama-2-70b (80): every pipeline stage holds at least one layer"),
    (0, 1, "pp must be an integer in [1, 128]"),
    (8, 256, "pp x ranks (8 x 256 = 2048) must be at most 1024 GPUs per instance"),
])
def test_bad_pipelines_get_one_line_naming_the_rule(pp, ranks, words):
    with pytest.raises(SpecError) as exc:
        pl.check_pp(dep().model, pp, ranks)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_stages_are_balanced_to_within_one_layer():
    m = dep().model
    assert pl.stage_layers(m, 3) == [27, 27, 26] and sum(pl.stage_layers(m, 7)) == 80
    sm = pl.stage_model(dep(model="deepseek-v3").model, 4)  # 61 layers, the last 58 MoE: the worst stage's 16
    assert (sm.layers, sm.moe_layers, sm.tie_embeddings) == (16, 16, True)


def test_one_stage_is_the_plain_decode_step():
    d = dep(ranks=2)
    b = np.array([1, 16, 256])
    r = pl.pp_decode(d, 1, b, 1000)
    np.testing.assert_allclose(r["itl_s"], step_time(d, b, 1000, "TP")["step_s"])
    np.testing.assert_allclose(pl.pp_max_batch(d, 1, 1000), max_batch(d, 1000, "TP"))


def test_a_micro_batch_goes_through_the_whole_model_plus_the_hops():
    """cycle = the whole model's step on one stage's ranks at the micro-batch, plus pp - 1 sends of its hidden
    states; the time between a sequence's tokens is at least that, and pp micro-batches share each stage."""
    d = dep(ranks=2)
    b = np.array([8, 64, 512])
    r = pl.pp_decode(d, 4, b, 2000)
    mb = np.ceil(b / 4)
    np.testing.assert_allclose(r["micro_batch"], mb)
    st_ = step_time(d, mb, 2000, "TP")
    np.testing.assert_allclose(r["cycle_s"], st_["step_s"] + 3 * pl.hop_s(d, 4, mb))
    assert np.all(r["itl_s"] >= r["cycle_s"]) and np.all(r["itl_s"] >= 4 * r["stage_s"] * (1 - 1e-12))
    np.testing.assert_allclose(r["tokens_per_s"], b / r["itl_s"])


def test_hops_cross_nvlink_inside_a_node_and_the_scale_out_link_beyond():
    d = dep(ranks=4)
    assert pl.hop_link(d, 2).name == d.fabric.scale_up.name
    assert pl.hop_link(d, 4).name == d.fabric.scale_out.name  # 16 GPUs over nodes of 8
    # one micro-batch of 64 Llama-2-70B tokens: 64 x 8192 x 2 B / 4 ranks = 262 kB per rank and hop
    assert float(pl.hop_s(d, 2, 64)) < float(pl.hop_s(d, 4, 64))


def test_a_stage_holds_its_share_of_weights_and_kv():
    """Llama-2-70B FP8 on 2 stages of 1 H100: each GPU holds 40 layers (~half the weights, one vocabulary table) and
    their KV for every sequence: per GPU the same as TP2 within a few %, so the batch that fits is about TP2's."""
    one, two = dep(ranks=1), dep(ranks=2)
    m_pp = pl.pp_memory(one, 2, 64, 2000)
    m_tp = memory_per_rank(two, 64, 2000, "TP")
    assert float(m_pp["weights_B"]) == pytest.approx(float(m_tp["weights_B"]), rel=0.02)
    assert float(m_pp["kv_B"]) == pytest.approx(float(m_tp["kv_B"]), rel=1e-9)
    assert int(pl.pp_max_batch(one, 2, 2000)) == pytest.approx(int(max_batch(two, 2000, "TP")), rel=0.05)
    assert int(pl.pp_max_batch(one, 2, 2000)) > 10 * int(max_batch(one, 2000, "TP"))  # TP1 alone barely fits


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 1024), s=st.integers(16, 16384), pp=st.sampled_from([2, 3, 4, 8]))
def test_more_stages_never_hold_more_per_gpu(b, s, pp):
    d = dep(ranks=1)
    a, c = pl.pp_memory(d, pp, b, s), pl.pp_memory(d, 2 * pp if 2 * pp <= 80 else pp, b, s)
    assert float(c["weights_B"]) <= float(a["weights_B"]) * (1 + 1e-12)
    assert float(c["kv_B"]) <= float(a["kv_B"]) * (1 + 1e-12)


def test_prefill_latency_is_the_whole_model_and_the_pipeline_takes_a_prompt_per_stage_time():
    d = dep(ranks=1)
    r = pl.pp_prefill(d, 2, 1024)
    from llmexplore.models.step.prefill import prefill_time

    t = float(prefill_time(d, 1024)["prefill_s"])
    assert float(r["latency_s"]) == pytest.approx(t + float(pl.hop_s(d, 2, 1024)))
    assert float(r["service_s"]) == pytest.approx(t / 2, rel=0.02)


def test_the_simulators_virtual_engine_takes_pp_times_the_slowest_stage():
    """pipeline_tables: one virtual engine's iteration = pp x (ceil(L/pp)/L of the layers + LM head + overhead),
    the analytic model's stage bound at the same micro-batch (pp_decode's stage_s)."""
    d = dep(ranks=2)
    tb = step_tables(d, max_tokens=512, max_batch=256, max_context=4096)
    ve = pipeline_tables(tb, 4)
    for mb, s in ((8, 1000.0), (64, 3000.0)):
        want = 4 * float(pl.pp_decode(d, 4, 4 * mb, s)["stage_s"])
        assert ve.step_s(mb, s) == pytest.approx(want, rel=0.01)
    assert pipeline_tables(tb, 1) is tb


# ---- published: MLPerf Inference v5.0, Llama-2-70B, 8x H100-SXM-80GB ----------------------------------------
# NVIDIA DGX-H100_H100-SXM-80GBx8_TRT, closed, llama2-70b-99.9 Server: "Completed tokens per second: 31106.28",
# VALID, target_qps 107 (results/.../Server/performance/run_1/mlperf_log_summary.txt in
# mlcommons/inference_results_v5.0, read in the copy ntuhpc/mlperf_inference_results_v5.0 @cf354115), with the
# H100_SXM_80GB_PP2x4 configuration: TensorRT-LLM, TP 1 x PP 2, four instances, FP8 weights and KV, batch 1024.
# Cisco C885A_H100_SXMx8_TRT (same round), TP 2 x 4 instances, batch 2048: 26599.38 tokens/s.
MLPERF_PP2_TOKENS_PER_S = 31106.28
MLPERF_TP2_TOKENS_PER_S = 26599.38
MLPERF_OSL = MLPERF_PP2_TOKENS_PER_S / 107  # 290.7 output tokens per request (tokens/s over the target rate)


def test_pipeline_decode_throughput_against_mlperf_pp2_and_tp2():
    """Decode throughput per GPU of TP1 x PP2 against TP2 at the largest batch each holds at MLPerf's mean context
    (~440 tokens: 300 in + half of 291 out; both hold ~1,040 sequences, near the submissions' batch caps of 1,024
    and 2,048): the published PP2/TP2 ratio is 1.169, the model's 1.063 (-9.1 %): PP2 wins for the same reason in
    both (no all-reduce per layer, the same KV room), by less in the model. Decode alone serves more than a whole
    benchmark run (which also prefills every prompt): the model's 5,980 tokens/s per GPU is an upper bound on
    MLPerf's 3,888. Golden values pin the model; the published ratio is stated with its error."""
    ctx = 440
    pp2, tp2 = dep(ranks=1), dep(ranks=2)
    cap_pp, cap_tp = int(pl.pp_max_batch(pp2, 2, ctx)), int(max_batch(tp2, ctx, "TP"))
    assert (cap_pp, cap_tp) == (1043, 1041)
    y_pp = float(pl.pp_decode(pp2, 2, cap_pp, ctx)["tokens_per_s"]) / 2
    y_tp = float(cap_tp / step_time(tp2, cap_tp, ctx, "TP")["step_s"]) / 2
    published = MLPERF_PP2_TOKENS_PER_S / MLPERF_TP2_TOKENS_PER_S
    ratio = y_pp / y_tp
    assert published == pytest.approx(1.169, abs=1e-3)
    assert ratio == pytest.approx(1.063, rel=0.01)  # golden
    assert -0.15 < ratio / published - 1 < 0.0  # the measured error (-9.1 %), stated
    assert y_pp > MLPERF_PP2_TOKENS_PER_S / 8  # decode alone bounds the served throughput from above


def test_the_planner_expresses_pipelines_for_the_mlperf_question():
    """plan on the MLPerf server question (ISL 300 [assumption], OSL 291, p99 TTFT 2 s / TPOT 200 ms): pipelines are
    searched, the best configuration is written with the engines' PP flags, and the best tokens/s per GPU is within
    30 % of MLPerf's 3,888 (measured: -26 %, docs/models.md §1.5)."""
    from llmexplore.sweeps import plan as sp

    r = sp.plan(model="llama-2-70b", gpu="h100-sxm", gpus=8, isl=300, osl=round(MLPERF_OSL), ttft_ms=2000,
                tpot_ms=200, stat="p99")
    t = r["table"]
    assert (t.loc[t["feasible"], "decode_pp"] > 1).any() and (t.loc[t["feasible"], "prefill_pp"] > 1).any()
    best = r["best"]
    y = float(best["tokens_per_s_per_gpu"])
    assert abs(y / (MLPERF_PP2_TOKENS_PER_S / 8) - 1) < 0.30
    assert y > float(sp.plan(r["question"], pipeline_sizes=(1,))["best"]["tokens_per_s_per_gpu"])  # PP helps
    cfg = sp.config_of(best, r["question"]).to_json()
    assert math.prod([cfg["sides"][-1]["ranks"], cfg["sides"][-1]["pp"]]) * cfg["sides"][-1]["instances"] <= 8
