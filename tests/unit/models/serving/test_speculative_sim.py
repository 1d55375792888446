"""Speculative decoding in the serving simulator (issue 21 §2): a disaggregated decode pool decodes speculatively,
its iterations in output tokens at the draft + verify cycle's time per token (step_tables.speculative_tables), its
KV capacity less the draft's, its ITL restored to bursts of tau tokens; colocated speculative serving is refused."""
from __future__ import annotations

import numpy as np
import pytest

from llmexplore import presets
from llmexplore.errors import SpecError
from llmexplore.models.serving import simulator as sv
from llmexplore.models.serving.engines import Scheduler, kv_capacity_blocks
from llmexplore.models.serving.step_tables import speculative_tables, step_tables
from llmexplore.models.serving.workload import LengthDist, Traffic
from llmexplore.models.step.engine import Deployment
from llmexplore.models.step.speculative import spec_step

DEP = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8")
MTP = "deepseek-mtp-1"  # 1 draft token, 1.875 tokens per verify step (the preset's)


def test_a_decode_only_iteration_costs_the_cycle_over_the_accepted_length():
    tb = step_tables(DEP, max_tokens=1024, max_batch=128, max_context=9000)
    st = speculative_tables(tb, MTP)
    for b, s in [(1, 1.0), (8, 2048.0), (64, 4096.0), (128, 8192.0)]:
        want = float(spec_step(DEP, MTP, b, s)["tpot_s"])
        assert st.step_s(b, s) == pytest.approx(want, rel=2e-3)  # the tables' context interpolation
        assert st.step_s(b, s) < tb.step_s(b, s)  # MTP pays at these batches (docs/models.md §1.4)
    # prefill parts are the plain tables' (a recompute prefills as ever)
    assert st.shared_s == tb.shared_s and st.head_s == tb.head_s
    np.testing.assert_array_equal(st.chunk_core, tb.chunk_core)


def test_the_draft_takes_kv_capacity():
    """DeepSeek-V3's MTP module is one more MLA layer (61 -> 62 layers of latent KV per token) and 1.66 GB of
    weights per GPU, and every running sequence keeps one verify slot: fewer blocks, by a little more than 1/62."""
    sched = Scheduler(max_num_seqs=256, max_num_batched_tokens=2048)
    plain, mtp = kv_capacity_blocks(DEP, sched), kv_capacity_blocks(DEP, sched, speculative=MTP)
    assert mtp < plain * 61 / 62
    assert mtp > plain * 61 / 62 * 0.9


def _run(rate, n=400, spec=MTP):
    tr = Traffic(rate_per_s=rate, isl=LengthDist.fixed(2000), osl=LengthDist.fixed(200))
    return sv.simulate_disaggregated(DEP, DEP, presets.link("roce-400g"), tr, n, prefill_instances=4,
                                     decode_instances=1, decode_scheduler=Scheduler(max_num_seqs=128,
                                                                                    max_num_batched_tokens=2048),
                                     decode_speculative=spec, seed=1)


def test_a_lone_request_decodes_at_the_speculative_time_per_token():
    """One request at a time: its TPOT is the mean over its decode of the cycle over tau at batch 1."""
    r = _run(0.05, n=20)
    tpot = np.nanmedian(r.requests["tpot_s"])
    ctx = np.arange(2001, 2200)
    want = float(np.mean(spec_step(DEP, MTP, 1, ctx)["tpot_s"]))
    assert tpot == pytest.approx(want, rel=0.01)
    plain = _run(0.05, n=20, spec=None)
    assert np.nanmedian(plain.requests["tpot_s"]) > 1.3 * tpot  # MTP's speed-up at batch 1 (1.68x, §1.4)


def test_the_itl_comes_in_bursts_of_the_accepted_length():
    """A client sees tau tokens per cycle: 1 / tau of the gaps are a whole cycle, the rest none."""
    r = _run(2.0)
    tau = 1.875
    zero = float(np.sum(r.itl_weight[r.itl_s == 0.0]))
    total = float(np.sum(r.itl_weight))
    assert zero / total == pytest.approx(1 - 1 / tau, rel=0.05)  # the transfers' first gaps are whole
    # the longest gaps are cycles: tau x a token's time
    assert r.summary["itl_p99_s"] > 1.5 * r.summary["tpot_p50_s"]


def test_the_planner_check_simulates_a_speculative_decode_pool_and_refuses_a_colocated_one():
    from llmexplore.deployment import DeploymentConfig, SideConfig
    from llmexplore.sweeps.plan.check import simulate_config

    spec = presets.resolve("speculative", MTP)
    base = dict(model="deepseek-v3", gpu="h200", weight_dtype="fp8", kv_dtype="bf16")
    colo = DeploymentConfig(**base, mode="colocated", sides=(
        SideConfig("colocated", 1, 8, max_num_seqs=64, chunk_tokens=2048, speculative=spec),))
    with pytest.raises(SpecError, match="not on colocated instances"):
        simulate_config(colo, isl=1000, osl=100, rate_per_s=1.0, n_requests=20)
    dis = DeploymentConfig(**base, mode="disaggregated", link="roce-400g", sides=(
        SideConfig("prefill", 2, 8, max_num_seqs=1), SideConfig("decode", 1, 8, max_num_seqs=64, speculative=spec)))
    plain = DeploymentConfig(**base, mode="disaggregated", link="roce-400g", sides=(
        SideConfig("prefill", 2, 8, max_num_seqs=1), SideConfig("decode", 1, 8, max_num_seqs=64)))
    a = simulate_config(dis, isl=1000, osl=100, rate_per_s=2.0, n_requests=60)["summary"]
    b = simulate_config(plain, isl=1000, osl=100, rate_per_s=2.0, n_requests=60)["summary"]
    assert a["tpot_p50_s"] < b["tpot_p50_s"] / 1.3  # the pool decodes speculatively
    assert a["ttft_p50_s"] == pytest.approx(b["ttft_p50_s"], rel=0.02)  # the prefill side does not
