"""Pipeline parallelism as a planner axis (issue 21 §1): searched by default (1, 2, 4 stages), carried in the
configuration, run by the simulator as virtual engines, refused with one line where it cannot apply."""
from __future__ import annotations

import json

import numpy as np
import pytest

from llmexplore import presets
from llmexplore.deployment import DeploymentConfig
from llmexplore.errors import SpecError
from llmexplore.sweeps import plan as sp

Q = dict(model="llama-2-70b", gpu="h100-sxm", gpus=8, isl=300, osl=291, ttft_ms=2000, tpot_ms=200, stat="p99",
         weight_dtypes=("fp8",), kv_dtypes=("fp8",))


@pytest.fixture(scope="module")
def res():
    return sp.plan(**Q)


def test_pipelines_are_searched_by_default_and_can_be_left_out(res):
    t = res["table"]
    assert set(t.loc[t["feasible"], "decode_pp"].dropna().astype(int)) == {1, 2, 4}
    assert t["label"].str.contains(" PP2").any()
    plain = sp.plan(**Q, pipeline_sizes=(1,))["table"]
    assert not plain["label"].str.contains(" PP").any()
    assert set(plain.loc[plain["feasible"], "decode_pp"].dropna().astype(int)) == {1}


def test_a_pipeline_instance_counts_all_its_gpus(res):
    t = res["table"]
    ok = t[t["feasible"] & (t["decode_pp"] > 1) & (t["mode"] == "colocated")]
    assert len(ok)
    r = ok.iloc[0]
    assert r["gpus"] == r["n_decode"] * r["decode_ranks"] * r["decode_pp"] <= 8


def test_the_configuration_carries_the_stages_and_loads_again(res):
    t = res["table"]
    row = t[t["feasible"] & (t["decode_pp"] > 1)].iloc[0].to_dict()
    cfg = sp.config_of(row, res["question"])
    doc = cfg.to_json()
    assert doc["sides"][-1]["pp"] == row["decode_pp"] and cfg.gpus == row["gpus"]
    assert DeploymentConfig.from_json(json.dumps(doc)).to_json() == doc


def test_the_simulator_runs_a_pipeline_as_virtual_engines_and_agrees_as_a_plain_instance_does(res):
    """A pipeline row is simulated (pp virtual engines per instance), and its gap to the analytic estimate is the
    plain instances' of the same question, within 20 points: on this question (batches of ~1,000 that 800 requests
    do not fill) both read high against the simulation (p99 TPOT -49 % with PP4 decode, -55 % with TP2)."""
    t = res["table"]
    ok = t[t["feasible"] & (t["mode"] == "disaggregated")]
    pipe = sp.simulate_row(ok[ok["decode_pp"] > 1].iloc[0].to_dict(), res["question"], n_requests=800)
    plain = sp.simulate_row(ok[ok["decode_pp"] == 1].iloc[0].to_dict(), res["question"], n_requests=800)
    assert pipe["status"] == plain["status"] == "simulated"
    assert abs(pipe["tpot_gap_pct"] - plain["tpot_gap_pct"]) < 20


@pytest.mark.parametrize("kw, words", [
    (dict(pipeline_sizes=(200,)), "pipeline_sizes must be an integer in [1, 128]"),
    (dict(pipeline_sizes=()), "pipeline_sizes must name at least one pipeline size"),
    (dict(pipeline_sizes=(81, 90)), "pipeline_sizes must hold a size of at most the layers of llama-2-70b (80)"),
])
def test_bad_pipeline_sizes_get_one_line(kw, words):
    with pytest.raises(SpecError) as exc:
        sp.Question(**{**Q, **kw})
    assert words in str(exc.value)


def test_speculation_and_pipelines_are_not_combined(res):
    from llmexplore.models.serving import disagg as dg
    from llmexplore.models.step.engine import Deployment

    d = Deployment.build("deepseek-v3", "h200", 8)
    with pytest.raises(SpecError, match=r"pp \(2\) must be 1 when decoding speculatively with 'deepseek-mtp-1'"):
        dg.decode_side(d, dg.Workload(prompt_tokens=100, output_tokens=10), pp=2, speculative="deepseek-mtp-1")


def test_the_pd_area_sizes_pipelined_decode_pools_in_all_their_gpus():
    """Area 20 (sweeps.disagg) with decode_pp: a decode instance of TP4 x PP2 counts 8 GPUs, holds about TP8's
    batch (the same weights per GPU), and takes longer between tokens (the whole model on 4 GPUs)."""
    from llmexplore.sweeps import disagg as sd

    kw = dict(rate_per_s=36, ttft_slo_ms=1000, tpot_slo_ms=40)
    tp8 = sd.point_summary(sd.setup("llama-3-70b", "h100-sxm", decode_tp=8, **kw))
    pipe = sd.point_summary(sd.setup("llama-3-70b", "h100-sxm", decode_tp=4, decode_pp=2, **kw))
    assert pipe["decode_batch_cap"] == pytest.approx(tp8["decode_batch_cap"], rel=0.05)
    assert pipe["decode_step_ms"] > tp8["decode_step_ms"]
    d = pipe["disaggregated"]
    assert d["gpus"] == d["prefill_instances"] * 8 + d["decode_instances"] * 8
    from llmexplore.findings import disagg as fd

    s = sd.setup("llama-3-70b", "h100-sxm", decode_tp=4, decode_pp=2, **kw)
    assert "a sequence's tokens come 21.4 ms apart at batch 64 on TP4 x PP2" in fd.request_sentence(pipe, s)
    with pytest.raises(SpecError, match="decode_pp must be an integer"):
        sd.setup("llama-3-70b", "h100-sxm", decode_pp=0)
    with pytest.raises(SpecError, match="decode_pp \\(2\\) must be 1 when decoding speculatively"):
        sd.setup("llama-3-70b", "h100-sxm", decode_pp=2, speculative="ngram-5")


def test_a_pipelined_prefill_pool_queues_on_its_service_and_answers_with_its_latency():
    """Area 20 with prefill_pp (issue 21): a TP8 x PP2 prefill instance of Llama-3-70B on H100 accepts a prompt
    every stage's share (40 of 80 layers: half the prompt) while each prompt still takes the whole model's prefill
    plus one hop; one instance's p99 TTFT is the exact M/D/1 wait on that service plus the latency."""
    from llmexplore.models.queueing.at_stat import pool_wait_quantile
    from llmexplore.models.serving import disagg as dg
    from llmexplore.models.step import pipeline as pl
    from llmexplore.sweeps import disagg as sd

    s = sd.setup("llama-3-70b", "h100-sxm", prefill_pp=2, rate_per_s=36, ttft_slo_ms=1000, tpot_slo_ms=40)
    pre, dec = s.sides()
    r = pl.pp_prefill(s.prefill, 2, 4096)
    assert pre.prefill_s == pytest.approx(float(r["service_s"]), rel=1e-12)
    assert pre.prefill_latency_s == pytest.approx(float(r["latency_s"]), rel=1e-12)
    assert pre.prefill_s == pytest.approx(pre.prefill_latency_s / 2, rel=0.01) and pre.gpus == 16
    lam = 8.0
    want = float(pool_wait_quantile(0.99, lam, pre.prefill_s, 1.0)) + pre.prefill_latency_s
    assert float(dg.prefill_ttft_quantile(pre, 0.99, lam, 1)) == pytest.approx(want, rel=1e-12)
    # each stage sends its own layers' KV over its own NICs: half the bytes on a prefill NIC, all of a decode
    # instance's share on its NICs
    one = sd.setup("llama-3-70b", "h100-sxm", rate_per_s=36, ttft_slo_ms=1000, tpot_slo_ms=40)
    link = presets.link("roce-400g")
    x1 = dg.transfer_side(*one.sides(), link, one.workload)
    x2 = dg.transfer_side(pre, dec, link, s.workload)
    assert x2["link_busy_s"] == pytest.approx(x1["link_busy_s"] / 2, rel=1e-12)
    assert x2["link_busy_decode_s"] == pytest.approx(x1["link_busy_decode_s"], rel=1e-12)
    p = sd.point_summary(s)
    d = p["disaggregated"]
    assert d["gpus"] == d["prefill_instances"] * 16 + d["decode_instances"] * 8
    assert p["prefill_service_ms"] == pytest.approx(pre.prefill_s * 1e3, rel=1e-12)
    assert p["prefill_ms"] == pytest.approx(pre.prefill_latency_s * 1e3, rel=1e-12)
    with pytest.raises(SpecError, match=r"prefill_pp \(81\) must be at most the layers of llama-3-70b \(80\)"):
        sd.setup("llama-3-70b", "h100-sxm", prefill_pp=81)


def test_variable_prompts_through_a_pipelined_prefill_add_each_prompts_latency():
    """Lognormal prompts, several instances: T = W + latency(S), with W the wait on the pipeline's service times;
    the same pool without a pipeline answers with its own S (pp = 1 path unchanged), and the pipeline's tail is
    at least its longest-latency share above its wait."""
    from llmexplore.models.serving import disagg as dg
    from llmexplore.sweeps import disagg as sd

    kw = dict(prompt_sigma=0.8, rate_per_s=20, ttft_slo_ms=3000, tpot_slo_ms=60)
    pre1, _ = sd.setup("llama-3-70b", "h100-sxm", **kw).sides()
    pre2, _ = sd.setup("llama-3-70b", "h100-sxm", prefill_pp=2, **kw).sides()
    assert np.all(pre2.latency_s > pre2.service_s) and pre2.service_s.size == pre1.service_s.size
    q1 = float(dg.prefill_ttft_quantile(pre1, 0.99, 10.0, 4))
    q2 = float(dg.prefill_ttft_quantile(pre2, 0.99, 10.0, 4))
    # half the service per prompt at the same rate: far less waiting, the same latency per prompt (+ one hop)
    assert q2 < q1 and q2 > float(np.quantile(pre2.latency_s, 0.5))
