"""Iteration-level serving simulator (llmexplore.models.serving.simulator): tables against the engine, an exact queueing
result, Little's law and conservation, preemption, invariants (hypothesis), disaggregation, and one published
online-serving measurement.

Measured when these tests were written (Llama-3-70B FP8 on 2x H100, runtime trtllm):

* step-time tables vs direct engine calls: decode steps exact to 1e-15 (the core is linear in the context
  between nodes), mixed iterations within 1e-4 (9e-5 worst of 300 random points), the chunk core alone within
  0.12 %;
* prefill-only M/D/1 (2,000-token prompts, service D = 165.8 ms, one-token outputs, max_num_seqs = 1, 27,000
  requests after warm-up): mean wait -0.26 % (rho 0.5, standard error 2.0 %) and -3.3 % (rho 0.8, standard
  error 5.0 %) from Pollaczek-Khinchine, i.e. within sampling error;
* the NIM comparison: see :func:`test_nim_online_serving_llama70b_fp8_tp2_h100`.
"""

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmexplore import presets
from llmexplore.errors import SpecError
from llmexplore.models.queueing import core as qz
from llmexplore.models.serving import simulator as sv
from llmexplore.models.serving.engines import (ENGINE_POLICIES, EnginePolicy, Scheduler, SglangPolicy, TrtllmPolicy,
                                               kv_capacity_blocks, policy_for)
from llmexplore.models.serving.step_tables import step_tables
from llmexplore.models.step.decode import memory_per_rank, step_time
from llmexplore.models.step.engine import Deployment
from llmexplore.models.step.prefill import mixed_step_time
from llmexplore.models.serving.workload import LengthDist, Traffic
from llmexplore.units import GiB


@functools.cache
def dep():
    return Deployment.build("llama-3-70b", "h100-sxm", 2, runtime="trtllm", weight_dtype="fp8", kv_dtype="fp8")


@functools.cache
def tables():
    # TensorRT-LLM runs whole prompts (no chunked prefill): an iteration carries up to the longest prompt
    # (20,000 tokens in the tests here) beside a full batch
    return step_tables(dep(), max_tokens=20_000 + 256, max_batch=256, max_context=20_000)


SMALL = Scheduler(max_num_seqs=8, max_num_batched_tokens=256)


@functools.cache
def small_tables():
    # whole prompts (TensorRT-LLM without chunking) run beyond the budget: up to the longest prompt beside the batch
    return step_tables(dep(), max_tokens=1200 + 8, max_batch=8, max_context=4096)


#: vLLM V1's semantics (the base policy: chunked prefill, no serving-stack time): what the generic checks below
#: exercise; dep()'s own runtime (trtllm) runs TensorRT-LLM's, checked in the trtllm tests
VLLM = EnginePolicy()


def mixed_traffic(rate=3.0):
    return Traffic(rate_per_s=rate, isl=LengthDist.lognormal(1000, 0.8, 8192),
                   osl=LengthDist.lognormal(200, 0.8, 2048))


# ---- tables ----------------------------------------------------------------------------------------------------
def test_tables_match_the_step_engine():
    """Interpolation error of the tables: decode exact, mixed < 1e-3 (measured 9e-5), chunk core < 0.5 %
    (measured 0.12 %)."""
    tb, d = tables(), dep()
    rng = np.random.default_rng(0)
    dec, mix, core = [], [], []
    for _ in range(200):
        b, s = int(rng.integers(1, 257)), float(rng.uniform(1, 19_000))
        dec.append(tb.step_s(b, s) / float(step_time(d, b, s, "TP")["step_s"]) - 1)
        b = int(rng.integers(0, 256))
        c, x = int(rng.integers(1, 8192 - b + 1)), float(rng.uniform(0, 10_000))
        ref = mixed_step_time(d, b, s, c, x)
        mix.append(tb.step_s(b, s, c, x) / float(ref["step_s"]) - 1)
        core.append(tb.chunk_core_s(c, x) / float(ref["chunk_core_s"]) - 1)
    assert np.max(np.abs(dec)) < 1e-9
    assert np.max(np.abs(mix)) < 1e-3
    assert np.max(np.abs(core)) < 5e-3


# ---- exact queueing result -------------------------------------------------------------------------------------
@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_prefill_only_batch_of_one_is_md1(rho):
    """Equal prompts, one-token outputs, max_num_seqs = 1: each request is one prefill iteration of constant
    length D, served FCFS, so the wait is M/D/1 and its mean is Pollaczek-Khinchine rho D / (2 (1 - rho)).
    Tolerance: 4 standard errors from 25 batch means (busy periods make waits autocorrelated)."""
    tb = tables()
    D = tb.step_s(0, 0.0, 2000, 0.0)
    tr = Traffic(rate_per_s=rho / D, isl=LengthDist.fixed(2000), osl=LengthDist.fixed(1))
    r = sv.simulate_colocated(dep(), tr, 30_000, seed=3, tables=tb, policy=VLLM,
                              scheduler=Scheduler(max_num_seqs=1, max_num_batched_tokens=8192))
    assert np.allclose(r.series["step_s"], D, rtol=1e-12)  # one constant service per request
    w = (r.requests["ttft_s"] - D)[3000:]
    means = np.array([b.mean() for b in np.array_split(w, 25)])
    se = means.std(ddof=1) / np.sqrt(means.size)
    exact = float(qz.md1_mean_wait(rho / D, D))
    assert exact == pytest.approx(rho * D / (2 * (1 - rho)))
    assert abs(w.mean() - exact) < 4 * se, (w.mean(), exact, se)
    assert se < 0.06 * exact  # the run is long enough for the check to mean something


# ---- Little's law, conservation, monotonicity --------------------------------------------------------------------
def test_littles_law_and_conservation():
    r = sv.simulate_colocated(dep(), mixed_traffic(), 1500, seed=1, tables=tables(), policy=VLLM)
    R, s, S = r.requests, r.series, r.summary
    assert np.isfinite(R["finish_s"]).all() and S["preemptions"] == 0
    assert S["output_tokens"] == R["output_tokens"].sum()
    # every token after the first is one inter-token gap, and the gaps of a request add up to last - first
    assert r.itl_weight.sum() == pytest.approx(float((R["output_tokens"] - 1).sum()))
    assert float(r.itl_s @ r.itl_weight) == pytest.approx(float(np.sum(R["finish_s"] - R["first_token_s"])),
                                                          rel=1e-9)
    # Little: time-average decode batch over the run = throughput x mean residence in decode
    T = R["finish_s"].max()
    residence = np.where(R["output_tokens"] > 1, R["finish_s"] - R["first_token_s"], 0.0)
    mean_batch = float(np.sum(s["decode_batch"] * s["step_s"])) / T
    assert mean_batch == pytest.approx(R["arrival_s"].size / T * residence.mean(), rel=1e-9)
    # decode tokens emitted by the iterations = output tokens minus the first tokens (prefill emits those)
    assert int(s["decode_batch"].sum()) == int((R["output_tokens"] - 1).sum())
    assert (s["batch"] <= 256).all() and (s["prefill_tokens"] + s["decode_batch"] <= 8192).all()
    assert np.all(np.diff(s["start_s"]) > 0) and (R["ttft_s"] > 0).all()


def test_higher_rate_never_lowers_mean_ttft():
    """Same seed: the arrival times scale with 1/rate and the lengths are the same (common random numbers)."""
    ttft = [sv.simulate_colocated(dep(), mixed_traffic(rate), 800, seed=5, tables=tables(), policy=VLLM).summary["ttft_mean_s"]
            for rate in (1.0, 3.0, 6.0, 9.0)]
    assert all(a <= b * 1.001 for a, b in zip(ttft, ttft[1:])), ttft
    assert ttft[-1] > 1.5 * ttft[0]


def test_deterministic_for_a_seed():
    a = sv.simulate_colocated(dep(), mixed_traffic(), 300, seed=9, tables=tables())  # the runtime's (TensorRT-LLM)
    b = sv.simulate_colocated(dep(), mixed_traffic(), 300, seed=9, tables=tables())
    c = sv.simulate_colocated(dep(), mixed_traffic(), 300, seed=10, tables=tables())
    assert all(np.array_equal(a.requests[k], b.requests[k], equal_nan=True) for k in a.requests)
    assert a.summary == b.summary and a.summary != c.summary


# ---- preemption ------------------------------------------------------------------------------------------------
def test_tiny_kv_memory_preempts_by_recompute_and_still_finishes():
    """vLLM V1's semantics (the base policy; the trtllm runtime's own is the test below)."""
    tr = mixed_traffic(3.0)
    vllm = EnginePolicy()
    roomy = sv.simulate_colocated(dep(), tr, 600, seed=1, tables=tables(), policy=vllm)
    tiny = sv.simulate_colocated(dep(), tr, 600, seed=1, tables=tables(), scheduler=Scheduler(kv_blocks=900),
                                 policy=vllm)
    assert roomy.summary["preemptions"] == 0
    assert tiny.summary["preemptions"] > 10 and tiny.requests["preemptions"].max() >= 1
    assert np.isfinite(tiny.requests["finish_s"]).all()
    assert tiny.summary["output_tokens"] == roomy.summary["output_tokens"]
    assert tiny.series["kv_blocks"].max() <= 900 and tiny.series["kv_occupancy"].max() <= 1.0
    assert tiny.summary["e2e_mean_s"] > roomy.summary["e2e_mean_s"]
    # recompute: a preempted request's gaps include its wait and its re-prefill
    R = tiny.requests
    hit = (R["preemptions"] > 0) & (R["output_tokens"] > 1)
    assert np.nanmean(R["tpot_s"][hit]) > np.nanmean(R["tpot_s"][~hit & (R["output_tokens"] > 1)])
    assert tiny.itl_weight.sum() == pytest.approx(float((tiny.requests["output_tokens"] - 1).sum()))


def test_trtllm_reserves_blocks_to_completion_and_never_preempts():
    """TensorRT-LLM's GUARANTEED_NO_EVICT (the trtllm runtime's engine): on the same tiny memory that makes the
    base policy preempt, no request is ever preempted, the blocks admitted to completion never exceed the
    capacity, and every request finishes with the same output."""
    tr = mixed_traffic(3.0)
    tiny = Scheduler(kv_blocks=900)
    assert dep().runtime.engine == "trtllm"
    trt = sv.simulate_colocated(dep(), tr, 600, seed=1, tables=tables(), scheduler=tiny)  # the runtime's policy
    rt = dep().runtime  # the runtime's policy carries its serving-stack time
    same = sv.simulate_colocated(dep(), tr, 600, seed=1, tables=tables(), scheduler=tiny,
                                 policy=TrtllmPolicy(request_host_s=rt.request_host_ms / 1e3,
                                                     request_host_s_per_token=rt.request_host_us_per_token / 1e6))
    assert trt.summary == same.summary
    vllm = sv.simulate_colocated(dep(), tr, 600, seed=1, tables=tables(), scheduler=tiny, policy=EnginePolicy())
    assert trt.summary["preemptions"] == 0 < vllm.summary["preemptions"]
    assert np.isfinite(trt.requests["finish_s"]).all()
    assert trt.summary["output_tokens"] == vllm.summary["output_tokens"]
    assert trt.series["kv_blocks"].max() <= 900
    # admitting only what can finish keeps fewer requests running than vLLM's optimistic admission
    assert trt.summary["mean_decode_batch"] < vllm.summary["mean_decode_batch"]


def test_sglang_reserves_prompt_and_clipped_output():
    """SGLang's PrefillAdder with fixed-length (ignore-EOS) requests: admission counts each request's prompt + at
    most 4,096 output tokens (CLIP_MAX_NEW_TOKENS). Outputs within the clip never preempt, as with a reservation
    to completion; 6,000-token outputs are admitted more densely than TensorRT-LLM's reservation of all of them
    and are preempted (SGLang retracts) when they outgrow it."""
    short = Traffic(rate_per_s=3.0, isl=LengthDist.lognormal(800, 0.3), osl=LengthDist.lognormal(300, 0.3))
    tiny = Scheduler(kv_blocks=900)
    sg = sv.simulate_colocated(dep(), short, 300, seed=1, tables=tables(), scheduler=tiny, policy=SglangPolicy())
    vl = sv.simulate_colocated(dep(), short, 300, seed=1, tables=tables(), scheduler=tiny, policy=EnginePolicy())
    assert sg.summary["preemptions"] == 0 < vl.summary["preemptions"]
    assert np.isfinite(sg.requests["finish_s"]).all() and sg.series["kv_blocks"].max() <= 900
    long_out = Traffic(concurrency=12, isl=LengthDist.fixed(500), osl=LengthDist.fixed(6000))
    mem = Scheduler(kv_blocks=3000)  # 48,000 tokens: 10 of 4,596-token reservations, 7 of 6,500
    tb = step_tables(dep(), max_tokens=8192 + 256, max_batch=256, max_context=6600)
    sgl = sv.simulate_colocated(dep(), long_out, 24, tables=tb, scheduler=mem, policy=SglangPolicy())
    trt = sv.simulate_colocated(dep(), long_out, 24, tables=tb, scheduler=mem, policy=TrtllmPolicy())
    assert sgl.summary["mean_decode_batch"] > trt.summary["mean_decode_batch"]
    assert trt.summary["preemptions"] == 0 < sgl.summary["preemptions"]
    assert type(policy_for("sglang")) is SglangPolicy and SglangPolicy.reserve_output_tokens == 4096


def test_sglang_runs_its_prefill_batches_apart_from_the_decodes():
    """SGLang without --enable-mixed-chunk (its default, sglang 0.5.23 srt/arg_groups/fields/schedule.py): the
    scheduler runs a prefill batch before the decodes whenever a prompt can run ("Run prefill first if possible",
    Scheduler.get_next_batch_to_run). No iteration carries both; the decodes wait, so TPOT rises against the same
    engine with its prefill mixed in, and an isolated request is served the same either way (closed form)."""
    tr = mixed_traffic(3.0)
    apart = sv.simulate_colocated(dep(), tr, 400, seed=2, tables=tables(), policy=SglangPolicy())
    mixed = sv.simulate_colocated(dep(), tr, 400, seed=2, tables=tables(), policy=SglangPolicy(enable_mixed_chunk=True))
    S = apart.series
    assert not ((S["prefill_tokens"] > 0) & (S["decode_batch"] > 0)).any()
    assert ((mixed.series["prefill_tokens"] > 0) & (mixed.series["decode_batch"] > 0)).any()
    assert apart.summary["tpot_mean_s"] > mixed.summary["tpot_mean_s"]
    # a prefill-only iteration carries the prompts alone: the whole budget goes to them
    assert S["prefill_tokens"].max() == Scheduler().max_num_batched_tokens
    one = Traffic(rate_per_s=0.01, isl=LengthDist.fixed(1500), osl=LengthDist.fixed(50))
    a = sv.simulate_colocated(dep(), one, 3, tables=tables(), policy=SglangPolicy())
    b = sv.simulate_colocated(dep(), one, 3, tables=tables(), policy=SglangPolicy(enable_mixed_chunk=True))
    assert np.allclose(a.requests["finish_s"], b.requests["finish_s"], rtol=1e-12)
    assert repr(SglangPolicy()).startswith("SglangPolicy(enable_mixed_chunk=False")
    with pytest.raises(SpecError, match="enable_mixed_chunk must be"):
        SglangPolicy(enable_mixed_chunk="yes")


def test_the_engine_policies_cover_the_runtime_engines():
    from llmexplore.specs import RUNTIME_ENGINES

    assert sorted(ENGINE_POLICIES) == sorted(RUNTIME_ENGINES)
    assert isinstance(policy_for("trtllm"), TrtllmPolicy) and type(policy_for("vllm")) is EnginePolicy
    with pytest.raises(SpecError, match=r"engine must be one of .* got 'tgi'"):
        policy_for("tgi")
    assert not policy_for("trtllm", capacity_scheduler_policy="MAX_UTILIZATION").reserve_to_completion
    with pytest.raises(SpecError, match=r"capacity_scheduler_policy must be one of \['GUARANTEED_NO_EVICT', "
                                        r"'MAX_UTILIZATION'\], got 'STATIC_BATCH'"):
        TrtllmPolicy(capacity_scheduler_policy="STATIC_BATCH")


def test_trtllm_max_utilization_preempts_like_the_base_policy():
    tr, tiny = mixed_traffic(3.0), Scheduler(kv_blocks=900)
    # with chunked prefill on, MAX_UTILIZATION is the base policy; with TensorRT-LLM's default whole prompts it
    # still pauses (preempts) when blocks run out
    mu = sv.simulate_colocated(dep(), tr, 600, seed=1, tables=tables(), scheduler=tiny,
                               policy=TrtllmPolicy(capacity_scheduler_policy="MAX_UTILIZATION",
                                                   enable_chunked_prefill=True))
    base = sv.simulate_colocated(dep(), tr, 600, seed=1, tables=tables(), scheduler=tiny, policy=EnginePolicy())
    assert mu.summary == base.summary and mu.summary["preemptions"] > 0
    whole = sv.simulate_colocated(dep(), tr, 600, seed=1, tables=tables(), scheduler=tiny,
                                  policy=TrtllmPolicy(capacity_scheduler_policy="MAX_UTILIZATION"))
    assert whole.summary["preemptions"] > 0 and np.isfinite(whole.requests["finish_s"]).all()


def test_a_request_that_can_never_fit_is_an_error():
    tr = Traffic(rate_per_s=1.0, isl=LengthDist.fixed(4000), osl=LengthDist.fixed(100))
    with pytest.raises(SpecError, match=r"request 0 \(4000 \+ 100 tokens\) needs 257 KV blocks of 16 tokens, more "
                                        r"than the 100 one instance holds"):
        sv.simulate_colocated(dep(), tr, 5, scheduler=Scheduler(kv_blocks=100))


# ---- invariants -------------------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 40), rate=st.floats(0.5, 200.0), isl=st.integers(1, 600), osl=st.integers(1, 80),
       sigma=st.sampled_from([0.0, 0.8]), prefix=st.sampled_from([0.0, 0.5]), seqs=st.integers(1, 8),
       budget=st.integers(8, 256), spare=st.integers(0, 200), seed=st.integers(0, 2**31), closed=st.booleans(),
       reserve=st.booleans(), chunked=st.booleans(), mixed=st.booleans())
def test_invariants(n, rate, isl, osl, sigma, prefix, seqs, budget, spare, seed, closed, reserve, chunked, mixed):
    """Under both admission rules: vLLM's optimistic one (the base policy) and TensorRT-LLM's reservation to
    completion, which must never preempt; TensorRT-LLM with chunked prefill or whole prompts (its default); and
    either with prefill chunks sharing the decodes' iterations or running apart (SGLang's default)."""
    isl_d = LengthDist.lognormal(isl, sigma, 1200) if sigma else LengthDist.fixed(isl)
    osl_d = LengthDist.lognormal(osl, sigma, 200) if sigma else LengthDist.fixed(osl)
    kw = dict(concurrency=seqs + 1) if closed else dict(rate_per_s=rate)
    tr = Traffic(isl=isl_d, osl=osl_d, prefix_ratio=prefix, **kw)
    longest = isl_d.max + osl_d.max
    sched = Scheduler(max_num_seqs=seqs, max_num_batched_tokens=max(budget, seqs),
                         kv_blocks=-(-longest // 16) + spare)
    policy = TrtllmPolicy(enable_chunked_prefill=chunked) if reserve else EnginePolicy()
    policy.mixed_prefill = mixed
    r = sv.simulate_colocated(dep(), tr, n, seed=seed, scheduler=sched, tables=small_tables(), policy=policy)
    R, s = r.requests, r.series
    if reserve:
        assert r.summary["preemptions"] == 0
    assert np.isfinite(R["finish_s"]).all() and np.isfinite(R["first_token_s"]).all()
    assert (R["ttft_s"] > 0).all() and (R["ttft_s"] <= R["e2e_s"] + 1e-12).all()
    assert (R["first_token_s"] >= R["arrival_s"]).all()
    one = R["output_tokens"] == 1
    assert np.isnan(R["tpot_s"][one]).all() and (R["tpot_s"][~one] > 0).all()
    assert (R["finish_s"][one] == R["first_token_s"][one]).all()
    assert (R["prefix_tokens"] < R["prompt_tokens"]).all()
    assert r.summary["output_tokens"] == R["output_tokens"].sum() and r.summary["requests"] == n
    assert r.itl_weight.sum() == pytest.approx(float((R["output_tokens"] - 1).sum()))
    assert float(r.itl_s @ r.itl_weight) == pytest.approx(float(np.sum(R["finish_s"] - R["first_token_s"])),
                                                          rel=1e-9, abs=1e-12)
    assert (s["batch"] <= seqs).all() and (s["kv_blocks"] <= sched.kv_blocks).all()
    within = s["prefill_tokens"] + s["decode_batch"] <= sched.max_num_batched_tokens
    if policy.chunked_prefill:
        assert within.all()
    else:  # whole prompts: beyond the budget only as the iteration's one prompt
        assert (within | (s["batch"] - s["decode_batch"] == 1)).all()
        # ... and every prompt's tokens (less its cached prefix) ran exactly once: nothing recomputed
        assert s["prefill_tokens"].sum() == (R["prompt_tokens"] - R["prefix_tokens"]).sum()
        assert r.summary["preemptions"] == 0
    assert (s["step_s"] > 0).all() and np.all(np.diff(s["start_s"]) > 0)
    if not mixed:  # prompts and decodes never share an iteration
        assert not ((s["prefill_tokens"] > 0) & (s["decode_batch"] > 0)).any()
    if closed:  # a finished request is replaced at once: its successor arrives at a finish time
        later = R["arrival_s"][seqs + 1:]
        assert np.isin(later, R["finish_s"]).all()


# ---- concurrency mode and a published measurement ---------------------------------------------------------------
def test_closed_loop_keeps_concurrency_in_flight():
    tr = Traffic(concurrency=6, isl=LengthDist.fixed(300), osl=LengthDist.fixed(40))
    r = sv.simulate_colocated(dep(), tr, 120, seed=0, tables=tables(), policy=VLLM)
    R = r.requests
    t = np.sort(np.concatenate([R["arrival_s"], R["finish_s"]]))
    mid = (t[:-1] + t[1:]) / 2
    inflight = ((R["arrival_s"][None, :] <= mid[:, None]) & (R["finish_s"][None, :] > mid[:, None])).sum(1)
    busy = mid < R["finish_s"][-6:].min()  # until the last six are draining
    assert (inflight[busy] == 6).all() and inflight.max() == 6


NIM = {  # concurrency: (mean TTFT [ms], mean ITL [ms]) of NVIDIA NIM 1.8.0, Llama-3.3-70B-Instruct FP8 TP2 H100
    1: (406.77, 18.58), 5: (546.7, 21.83), 25: (688.69, 38.75), 50: (834.51, 59.73)}
#: golden partner (issue 18 §5): the simulator's (mean TTFT, mean TPOT) [ms] when written, to 1e-9; a deliberate
#: change shows here
NIM_PINNED_MS = {1: (378.17064420983587, 16.946170320672), 5: (665.0471574524304, 19.89752161287879),
                 25: (730.4178930028601, 37.29895791011508), 50: (749.2213063022084, 59.38357460316751)}  # moved ~1e-6 when the tables' grids were fixed (TablesCache)


@pytest.mark.reference
@pytest.mark.parametrize("concurrency", sorted(NIM))
def test_nim_online_serving_llama70b_fp8_tp2_h100(concurrency):
    """Published online-serving measurement: NVIDIA NIM LLMs Benchmarking 1.0.0, Performance page
    (https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance.md), Llama-3.3-70b-instruct, NIM 1.8.0,
    2 x H100 80G, fp8, TP2, 5000 input / 500 output tokens, closed-loop AIPerf clients at concurrency C; the
    same rows as data/validation/e2e.csv nim-l70-h100-*. Simulated with the repo's choices for these rows
    (engine-matched runtime ``trtllm``, FP8 KV, so TensorRT-LLM's admission, whole prompts and the serving-stack
    time) and the simulator's defaults (a token budget of 8,192, max_num_seqs 256, 16-token blocks): 20 C requests,
    the first 2 C (the synchronised start) dropped.
    Nothing was fitted to these numbers. The page's ITL is AIPerf's per-request (e2e - TTFT) / (OSL - 1), i.e.
    the simulator's TPOT. Errors measured when written (simulated / measured - 1):

    ====  ==========================  ==========================
    C     mean TTFT (sim vs NIM)      mean ITL (sim TPOT vs NIM)
    ====  ==========================  ==========================
    1     378.2 vs 406.77 ms, -7.0 %   16.95 vs 18.58 ms, -8.8 %
    5     665.0 vs 546.7 ms, +21.6 %   19.90 vs 21.83 ms, -8.9 %
    25    730.4 vs 688.69 ms, +6.1 %   37.30 vs 38.75 ms, -3.7 %
    50    749.2 vs 834.51 ms, -10.2 %  59.38 vs 59.73 ms, -0.6 %
    ====  ==========================  ==========================

    With TensorRT-LLM's own iteration shape (whole prompts: enable_chunked_prefill defaults to False) and the
    serving stack's time per request (5.64 ms + 1.25 us per prompt token, measured for vLLM 0.19.0; the trtllm
    preset assumes the same), both since issue 19. Before, with 8,192-token chunks and no stack time: TTFT -10.0 /
    -29.2 / -12.4 / -13.2 %, ITL within 9 %; before static FP8 GEMMs ITL read +4.7..+11.8 %.

    Asserted: within 30 % (client-side HTTP/streaming overhead, the engine's scheduler (TensorRT-LLM's
    in-flight batching is assumed to behave like vLLM's chunked prefill) and the kernel curves all differ).
    """
    ttft_ms, itl_ms = NIM[concurrency]
    tr = Traffic(concurrency=concurrency, isl=LengthDist.fixed(5000), osl=LengthDist.fixed(500))
    r = sv.simulate_colocated(dep(), tr, 20 * concurrency, seed=0, tables=tables())
    keep = slice(2 * concurrency, None)
    sim_ttft = float(np.mean(r.requests["ttft_s"][keep])) * 1e3
    sim_tpot = float(np.mean(r.requests["tpot_s"][keep])) * 1e3
    assert sim_ttft == pytest.approx(ttft_ms, rel=0.30)
    assert sim_tpot == pytest.approx(itl_ms, rel=0.30)
    assert (sim_ttft, sim_tpot) == pytest.approx(NIM_PINNED_MS[concurrency], rel=1e-9)


# ---- disaggregated ------------------------------------------------------------------------------------------
@functools.cache
def disagg_run(link="roce-400g", rate=6.0, n=1500):
    d8 = Deployment.build("llama-3-70b", "h100-sxm", 8)
    tr = Traffic(rate_per_s=rate, isl=LengthDist.fixed(4096), osl=LengthDist.fixed(128))
    return sv.simulate_disaggregated(d8, d8, presets.link(link), tr, n, prefill_instances=2, decode_instances=1,
                                     seed=0, nics=1)


def test_disaggregated_invariants():
    r = disagg_run()
    R = r.requests
    assert np.isfinite(R["finish_s"]).all() and r.summary["output_tokens"] == R["output_tokens"].sum()
    assert (R["prefill_done_s"] > R["arrival_s"]).all()
    assert np.allclose(R["first_token_s"], R["prefill_done_s"] + R["transfer_s"])
    assert (R["transfer_s"] > 0).all() and (R["ttft_s"] <= R["e2e_s"]).all()
    assert set(np.unique(R["prefill_instance"])) == {0, 1} and (R["instance"] == 0).all()
    assert (r.series["prefill_tokens"] == 0).all()  # decode instances never prefill without preemption
    assert r.itl_weight.sum() == pytest.approx(float((R["output_tokens"] - 1).sum()))


def test_a_slower_link_raises_ttft_through_the_nic_queue():
    fast, slow = disagg_run("roce-400g"), disagg_run("tcp-100g")
    assert slow.summary["ttft_mean_s"] > fast.summary["ttft_mean_s"]
    assert slow.requests["transfer_s"].mean() > fast.requests["transfer_s"].mean()
    # the NIC is a FIFO server: a transfer never overlaps the previous one on the same instance
    R = slow.requests
    for j in (0, 1):
        idx = np.nonzero(R["prefill_instance"] == j)[0]
        idx = idx[np.argsort(R["prefill_done_s"][idx], kind="stable")]
        end = R["first_token_s"][idx]
        assert np.all(np.diff(end) > 0)


@pytest.mark.parametrize("c", [1, 6, 40])
def test_disaggregated_closed_loop_is_exact(c):
    """Issue 19: a closed loop of C clients on the disaggregated simulation, the fixed point of "the next request
    arrives when one finishes": the first C arrive at 0, request C + j at the j-th finish, exactly; never more
    than C in flight; one client runs its requests back to back; Little's law holds over the run."""
    d8 = Deployment.build("llama-3-70b", "h100-sxm", 8)
    d4 = Deployment.build("llama-3-70b", "h100-sxm", 4)
    tr = Traffic(concurrency=c, isl=LengthDist.lognormal(1500, 0.4), osl=LengthDist.lognormal(120, 0.5))
    res = sv.simulate_disaggregated(d8, d4, presets.link("roce-400g"), tr, 4 * c + 20, prefill_instances=1,
                                    decode_instances=2, seed=3)
    R = res.requests
    arr, fin = R["arrival_s"], R["finish_s"]
    n = arr.size
    assert np.all(arr[:c] == 0) and np.array_equal(arr[c:], np.sort(fin)[:n - c])
    events = np.concatenate([arr, fin])
    in_flight = [(np.sum((arr <= t) & (fin > t))) for t in events]
    assert max(in_flight) <= c and max(in_flight) == c
    assert np.all(R["ttft_s"] > 0) and np.all(fin >= R["first_token_s"])
    if c == 1:
        assert np.array_equal(arr[1:], fin[:-1])
    # Little's law: C = throughput x mean residence, over the span where every client is busy
    span = np.sort(fin)[n - c - 1]  # the last release
    busy = np.sum(np.minimum(fin, span) - np.minimum(arr, span))
    assert busy / span == pytest.approx(c, rel=1e-9)


def test_disaggregated_rejects_bad_input():
    d8 = Deployment.build("llama-3-70b", "h100-sxm", 8)
    with pytest.raises(SpecError, match="link must be a Link preset"):
        sv.simulate_disaggregated(d8, d8, "roce-400g", Traffic(rate_per_s=1), 10)


# ---- input checks -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, match", [
    (dict(max_num_seqs=0), r"max_num_seqs must be an integer in \[1, 65,536\], got 0"),
    (dict(max_num_seqs=512, max_num_batched_tokens=256), "max_num_batched_tokens must be >= max_num_seqs"),
    (dict(block_tokens=0), "block_tokens must be an integer"),
    (dict(kv_blocks=0), "kv_blocks must be an integer"),
])
def test_scheduler_validation(kwargs, match):
    with pytest.raises(SpecError, match=match):
        Scheduler(**kwargs)


def test_simulate_rejects_bad_arguments():
    with pytest.raises(SpecError, match="traffic must be a Traffic"):
        sv.simulate_colocated(dep(), {"rate": 1}, 10)
    with pytest.raises(SpecError, match="instances must be an integer"):
        sv.simulate_colocated(dep(), mixed_traffic(), 10, instances=0)
    with pytest.raises(SpecError, match="concurrency \\(2\\) must be >= instances \\(3\\)"):
        sv.simulate_colocated(dep(), Traffic(concurrency=2), 10, instances=3, tables=tables())


def test_kv_capacity_from_memory():
    """FP8 Llama-3-70B on 2x H100 (79.65 GiB per rank), 80 layers x 4 KV heads x 128 x 2 x 1 B = 81,920 B per token
    per rank. vLLM's rule: 0.9 x 79.65 = 71.7 GiB - 33.8 GiB weights - 4.8 GiB activations of an 8,192-token
    budget - 3.5 GiB reserve = 29.6 GiB of KV, ~24k blocks of 16. TensorRT-LLM's rule (the trtllm runtime):
    0.9 x (79.65 - 33.8 - 4.8 - 3.5) = 33.8 GiB, ~27.7k blocks."""
    vllm = Deployment.build("llama-3-70b", "h100-sxm", 2, runtime="vllm", weight_dtype="fp8", kv_dtype="fp8")
    assert 23_000 < kv_capacity_blocks(vllm) < 25_000
    assert 27_000 < kv_capacity_blocks(dep()) < 28_500
    assert kv_capacity_blocks(dep(), Scheduler(block_tokens=32)) == kv_capacity_blocks(dep()) // 2


def test_trtllm_memory_rule_serves_what_the_total_rule_refuses():
    """Llama-3-70B FP8 on one H100 ran at 3,378 tok/s under TensorRT-LLM (issue 19's held-out set): its
    free_gpu_memory_fraction applies to what the weights leave, so the KV cache gets a share of ~10 GiB; 0.9 of
    the total leaves nothing beside 67.7 GiB of weights, activations and reserve."""
    kw = dict(weight_dtype="fp8", kv_dtype="fp8")
    trt = Deployment.build("llama-3-70b", "h100-sxm", 1, runtime="trtllm", **kw)
    vllm = Deployment.build("llama-3-70b", "h100-sxm", 1, runtime="vllm", **kw)
    assert kv_capacity_blocks(vllm) == 0 < kv_capacity_blocks(trt)
    mem = memory_per_rank(trt, 8192, 1, "TP")
    left = trt.hardware.hbm_GiB * GiB - mem["weights_B"] - mem["activations_B"] - mem["reserve_B"]
    assert float(mem["kv_budget_B"]) == pytest.approx(0.9 * float(left), rel=1e-12)
    r = sv.simulate_colocated(trt, Traffic(concurrency=8, isl=LengthDist.fixed(1000), osl=LengthDist.fixed(200)), 32)
    assert r.summary["output_tokens_per_s"] > 0 and r.summary["preemptions"] == 0


def test_several_instances_split_the_load():
    one = sv.simulate_colocated(dep(), mixed_traffic(6.0), 600, seed=2, tables=tables(), policy=VLLM)
    two = sv.simulate_colocated(dep(), mixed_traffic(6.0), 600, seed=2, tables=tables(), instances=2, policy=VLLM)
    assert set(np.unique(two.requests["instance"])) == {0, 1}
    assert two.summary["tpot_mean_s"] < one.summary["tpot_mean_s"]
    assert set(np.unique(two.series["instance"])) == {0, 1}


def test_weighted_quantile():
    v, w = np.array([3.0, 1.0, 2.0]), np.array([1, 2, 1])
    assert sv.weighted_quantile(v, w, [0.25, 0.5, 0.75, 1.0]).tolist() == [1.0, 1.0, 2.0, 3.0]
    assert np.isnan(sv.weighted_quantile([], [], 0.5)).all()
