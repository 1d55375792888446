"""Data-parallel attention in the serving simulator (issue 19: the 193 attention-DP rows of validate --e2e and the
planner's DPA configurations): each attention-DP rank schedules its own requests, holds their whole KV, and its
iteration is the step engine's DPA step with every rank as loaded (llmexplore/models/serving/step_tables.py,
simulator.py). Checked against the step engine, closed forms (a one-rank DPA instance is a TP1 instance; a
closed loop of identical ranks is the same run on each), the memory argument for DPA on MLA models (TP
replicates the latent KV on every rank, DPA stores it once), and the engines' per-rank knobs."""

import functools

import numpy as np
import pytest

from llmexplore import presets
from llmexplore.errors import SpecError
from llmexplore.models.serving import simulator as sv
from llmexplore.models.serving.engines import Scheduler, kv_capacity_blocks, policy_for
from llmexplore.models.serving.step_tables import step_tables
from llmexplore.models.serving.workload import LengthDist, Traffic
from llmexplore.models.step.decode import step_time
from llmexplore.models.step.engine import Deployment


@functools.cache
def dsv3():
    # DeepSeek-V3 FP8 on 8 H200 under SGLang: the DP-attention deployment SGLang documents for MLA models
    return Deployment.build("deepseek-v3", "h200", 8, runtime="sglang", weight_dtype="fp8", kv_dtype="fp8")


@functools.cache
def dpa_tables():
    return step_tables(dsv3(), max_tokens=4096, max_batch=64, max_context=8192, layout="DPA")


def test_dpa_tables_are_the_engines_dpa_step_with_every_rank_loaded():
    """A rank's decode of b sequences is the engine's DPA step of 8 b (each rank b, the MoE over the gathered
    8 b), exactly; its prefill chunk is the engine's DPA step of one c-token sequence per rank, within the chunk
    core's interpolation (< 0.5 %, as the TP tables)."""
    tb, d = dpa_tables(), dsv3()
    rng = np.random.default_rng(1)
    for _ in range(60):
        b, s = int(rng.integers(1, 65)), float(rng.uniform(1, 8000))
        assert tb.step_s(b, s) == pytest.approx(float(step_time(d, 8 * b, s, "DPA")["step_s"]), rel=1e-9)
        c, x = int(rng.integers(64, 4097)), float(rng.uniform(0, 3000))
        ref = float(step_time(d, 8, x + c / 2.0, "DPA", q_tokens=c, logits_tokens=1)["step_s"])
        assert tb.step_s(0, 0.0, c, x) == pytest.approx(ref, rel=5e-3)
    assert tb.layout == "DPA"


def test_a_one_rank_dpa_instance_is_a_tp1_instance():
    """Closed form: with one rank there is nothing to gather or shard, so the DPA run is the TP run, bit for bit."""
    d1 = Deployment.build("llama-3-8b", "h100-sxm", 1, runtime="vllm")
    tr = Traffic(rate_per_s=6.0, isl=LengthDist.lognormal(800, 0.5, 4096), osl=LengthDist.lognormal(150, 0.5, 1024))
    sch = Scheduler(max_num_seqs=64, max_num_batched_tokens=2048)
    a = sv.simulate_colocated(d1, tr, 300, scheduler=sch, seed=2)
    b = sv.simulate_colocated(d1, tr, 300, scheduler=sch, seed=2, layout="DPA")
    assert a.kv_blocks == b.kv_blocks
    for k in ("first_token_s", "finish_s", "preemptions"):
        assert np.array_equal(a.requests[k], b.requests[k])
    assert np.all(b.requests["dp_rank"] == 0)


def test_each_rank_schedules_its_own_requests_with_its_own_kv():
    """8 ranks, max_num_seqs 128 for the instance: each rank runs at most 16, holds the KV blocks of one DPA rank
    (kv_capacity_blocks with the DPA layout), and the requests go round-robin over the ranks. A closed loop of
    fixed lengths gives every rank the same requests, so every rank runs the same iterations."""
    d = dsv3()
    sch = Scheduler(max_num_seqs=128, max_num_batched_tokens=8192, block_tokens=64)
    tr = Traffic(concurrency=128, isl=LengthDist.fixed(1024), osl=LengthDist.fixed(256))
    res = sv.simulate_colocated(d, tr, 512, scheduler=sch, layout="DPA")
    rank_sch = policy_for("sglang").dp_rank_scheduler(sch, 8)
    assert rank_sch.max_num_seqs == 16 and rank_sch.max_num_batched_tokens == 1024  # SGLang splits its budget
    assert res.kv_blocks == (kv_capacity_blocks(d, rank_sch, "DPA"),) * 8
    R, S = res.requests, res.series
    assert np.array_equal(R["dp_rank"], np.arange(512) % 8) and np.all(R["instance"] == 0)
    assert S["decode_batch"].max() == 16 and set(S["dp_rank"]) == set(range(8))
    per_rank = [S["step_s"][S["dp_rank"] == r] for r in range(8)]
    assert all(np.array_equal(per_rank[0], p) for p in per_rank[1:])
    first = R["first_token_s"].reshape(-1, 8)
    assert np.all(first == first[:, :1])  # the ranks' requests are served identically
    assert np.isfinite(R["tpot_s"]).all() and R["preemptions"].sum() == 0
    # the summary's batch is the instance's: its 8 ranks' together
    w = S["step_s"]
    assert res.summary["mean_decode_batch"] == pytest.approx(8 * np.sum(S["decode_batch"] * w) / np.sum(w))


def test_dpa_stores_mla_kv_once_where_tp_replicates_it():
    """DeepSeek's MLA latent is one 576-wide vector per token and layer, not split by heads, so every TP rank
    holds each request's whole latent: TP8 holds no more tokens than one GPU's spare memory. DPA8 stores each
    request's latent on one rank only, so the instance holds up to 8x the tokens: the reason SGLang gives for its
    DP attention on DeepSeek (LMSYS blog on SGLang v0.4, 2024-12-04: the KV cache is no longer duplicated over
    the TP ranks). Measured here 6.5x (each DPA rank also holds the replicated attention weights); a GQA model
    under DPA holds 0.44x (its KV was split by heads under TP already)."""
    d = dsv3()
    tp = kv_capacity_blocks(d, Scheduler(max_num_seqs=256, max_num_batched_tokens=8192, block_tokens=64))
    dpa = kv_capacity_blocks(d, Scheduler(max_num_seqs=32, max_num_batched_tokens=1024, block_tokens=64), "DPA")
    assert 6.0 < 8 * dpa / tp < 8.0
    # a GQA model's KV is split by heads under TP, so DPA gains nothing and loses the memory of the replicated
    # attention weights: fewer tokens per instance
    ll = Deployment.build("llama-3-70b", "h100-sxm", 8, runtime="vllm")
    tp_l = kv_capacity_blocks(ll, Scheduler(max_num_seqs=256, max_num_batched_tokens=8192))
    dpa_l = kv_capacity_blocks(ll, Scheduler(max_num_seqs=32, max_num_batched_tokens=8192), "DPA")
    assert 8 * dpa_l < tp_l


def test_engines_split_the_instance_knobs_per_rank():
    """SGLang divides chunked_prefill_size and max_running_requests by the attention-DP size (sglang 0.5.23,
    srt/arg_groups/parallel_hook.py, srt/mem_cache/kv_cache_configurator.py); vLLM's and TensorRT-LLM's token
    budgets are each rank's own."""
    sch = Scheduler(max_num_seqs=100, max_num_batched_tokens=16384)
    sg = policy_for("sglang").dp_rank_scheduler(sch, 8)
    vl = policy_for("vllm").dp_rank_scheduler(sch, 8)
    tr = policy_for("trtllm").dp_rank_scheduler(sch, 8)
    assert (sg.max_num_seqs, sg.max_num_batched_tokens) == (13, 2048)
    assert (vl.max_num_seqs, vl.max_num_batched_tokens) == (13, 16384) == (tr.max_num_seqs, tr.max_num_batched_tokens)


def test_disaggregated_dpa_closed_loop_is_exact_and_per_rank():
    """DPA on both sides of a disaggregated DeepSeek deployment: the closed loop's fixed point holds exactly
    (request C + j arrives at the j-th finish), every decode rank is one of the instance's, and a request's KV
    leaves the one prefill rank that computed it."""
    d = dsv3()
    c = 48
    tr = Traffic(concurrency=c, isl=LengthDist.lognormal(1500, 0.3, 4096), osl=LengthDist.lognormal(100, 0.3, 400))
    res = sv.simulate_disaggregated(d, d, presets.link("ib-ndr400"), tr, 4 * c, prefill_instances=1,
                                    decode_instances=1, prefill_tokens=4096, prefill_layout="DPA",
                                    decode_layout="DPA",
                                    decode_scheduler=Scheduler(max_num_seqs=128, max_num_batched_tokens=8192,
                                                               block_tokens=64), seed=4)
    R = res.requests
    arr, fin = R["arrival_s"], R["finish_s"]
    assert np.all(arr[:c] == 0) and np.array_equal(arr[c:], np.sort(fin)[:arr.size - c])
    assert set(R["dp_rank"]) == set(range(8)) and set(R["prefill_dp_rank"]) == set(range(8))
    assert np.all(R["instance"] == 0) and np.all(R["prefill_instance"] == 0) and len(res.kv_blocks) == 8
    assert np.all(R["transfer_s"] > 0) and np.all(R["ttft_s"] > R["transfer_s"])


def test_layouts_the_simulator_cannot_run_are_refused():
    d = dsv3()
    with pytest.raises(SpecError, match=r"layout must be one of \['TP', 'DPA'\], got 'DOP'"):
        sv.simulate_colocated(d, Traffic(rate_per_s=1.0), 10, layout="DOP")
    with pytest.raises(SpecError, match=r"decode_layout must be one of"):
        sv.simulate_disaggregated(d, d, presets.link("ib-ndr400"), Traffic(rate_per_s=1.0), 10, decode_layout="CP")
    with pytest.raises(SpecError, match="tables must be of layout DPA"):
        sv.simulate_colocated(d, Traffic(rate_per_s=1.0), 10, layout="DPA",
                              tables=step_tables(d, max_tokens=8192, max_batch=256, max_context=4096))
