"""Speculative decoding as a planner axis (issue 21 §2): searched on and off on every decoding side, priced per
output token, carried in the configuration and its launch lines, refused by the simulator with a reason."""
from __future__ import annotations

import json

import numpy as np
import pytest

from llmexplore import cli
from llmexplore.deployment import DeploymentConfig
from llmexplore.errors import SpecError
from llmexplore.sweeps import plan as sp

Q = dict(model="deepseek-v3", gpu="h200", gpus=16, isl=2000, osl=500, ttft_ms=2000, tpot_ms=50, stat="p90",
         weight_dtypes=("fp8",), kv_dtypes=("fp8",))


@pytest.fixture(scope="module")
def res():
    return sp.plan(**Q, speculative="deepseek-mtp-1")


def test_the_axis_searches_each_configuration_with_and_without_speculation(res):
    t = res["table"]
    ok = t[t["feasible"]]
    spec = ok[ok["speculative"] == "deepseek-mtp-1"]
    plain = ok[ok["speculative"] == ""]
    assert len(spec) and len(plain)
    assert set(spec["label"].str.replace(" +deepseek-mtp-1", "", regex=False)) <= set(plain["label"])
    # the prefill pool never speculates (it does not decode): every speculative disaggregated row is the decode's
    dis = spec[spec["mode"] == "disaggregated"]
    assert dis["label"].str.contains(r"D:\S+ EP\d \+deepseek-mtp-1").all()


def test_a_speculative_row_is_faster_per_user_at_the_same_instance(res):
    """At the same instance shape and dtypes, the speculative twin's decode steps per output token are shorter
    (tau = 1.875 for DeepSeek-V3's MTP at 85-90% acceptance), so it serves more per GPU at the TPOT target."""
    t = res["table"]
    ok = t[t["feasible"] & (t["mode"] == "colocated")]
    for _, r in ok[ok["speculative"] == ""].iterrows():
        twin = ok[ok["label"] == r["label"].replace(" fp8/", " +deepseek-mtp-1 fp8/")]
        if len(twin):
            assert float(twin["tokens_per_s_per_gpu"].iloc[0]) > float(r["tokens_per_s_per_gpu"])


def test_an_acceptance_of_nothing_never_wins():
    """tau = 1 (every draft rejected): speculation costs a draft and a wider verify and emits what plain decoding
    does, so the best configuration is a plain one."""
    r = sp.plan(**Q, speculative="deepseek-mtp-1", speculative_accepted_length=1.0)
    assert r["best"]["speculative"] == ""
    t = r["table"]
    assert (t.loc[t["feasible"] & (t["speculative"] != ""), "tokens_per_s_per_gpu"]
            < r["best"]["tokens_per_s_per_gpu"]).all()


def test_the_configuration_carries_the_spec_and_loads_again(res):
    t = res["table"]
    best = t[t["feasible"] & (t["speculative"] != "")].iloc[0].to_dict()
    assert best["speculative"] == "deepseek-mtp-1"
    cfg = sp.config_of(best, res["question"])
    doc = cfg.to_json()
    side = doc["sides"][-1]
    assert side["speculative"]["name"] == "deepseek-mtp-1" and side["speculative"]["acceptance"] == [0.875]
    again = DeploymentConfig.from_json(json.dumps(doc))
    assert again.to_json() == doc
    if doc["mode"] == "disaggregated":
        assert doc["sides"][0]["speculative"] is None


def test_the_simulator_checks_speculative_decode_pools_and_says_it_does_not_run_colocated_ones(res):
    """A disaggregated row with a speculative decode pool is simulated (issue 21: step_tables.speculative_tables);
    a colocated speculative row says why it is not."""
    t = res["table"]
    spec = t[t["feasible"] & (t["speculative"] != "")]
    colo = spec[spec["mode"] == "colocated"]
    dis = spec[spec["mode"] == "disaggregated"]
    assert len(colo) and len(dis)
    check = sp.simulate_row(colo.iloc[0].to_dict(), res["question"], n_requests=50)
    assert check["status"].startswith("not simulated: the serving simulator runs speculative decoding on a "
                                      "disaggregated decode pool, not on colocated instances")
    check = sp.simulate_row(dis.iloc[0].to_dict(), res["question"], n_requests=200)
    assert check["status"] == "simulated" and check["tpot_sim_ms"] > 0


@pytest.mark.parametrize("kw, words", [
    (dict(model="llama-3-70b", speculative="deepseek-mtp-1"), "llama-3-70b has none (mtp_layers 0)"),
    (dict(speculative="deepseek-mtp-1", speculative_accepted_length=2.5), "in [1, 2] [tokens], got 2.5"),
    (dict(speculative_accepted_length=2.0), "must come with speculative"),
    (dict(speculative="nope"), "no speculative preset 'nope'"),
])
def test_bad_speculative_questions_get_one_line(kw, words):
    with pytest.raises((SpecError, KeyError)) as exc:
        sp.Question(**{**Q, **kw})
    assert words in str(exc.value)


def test_cli_plan_with_speculative_prints_it_in_the_answer_and_launch(capsys):
    code = cli.main(["plan", "--model", "deepseek-v3", "--gpu", "h200", "--gpus", "16", "--isl", "2000", "--osl",
                     "500", "--weight-dtype", "fp8", "--kv-dtype", "fp8", "--speculative", "deepseek-mtp-3",
                     "--speculative-accepted-length", "2.5", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    spec_side = [s for s in doc["best"]["config"]["sides"] if s["speculative"]]
    assert spec_side and spec_side[0]["speculative"]["accepted_length"] == 2.5
    assert "speculative decoding deepseek-mtp-3" in doc["sentences"][0]
    assert "your accepted length" in doc["sentences"][0]
    cmd = " ".join(e["command"] or "" for e in doc["best"]["launch"]["vllm"])
    assert '"method":"mtp","num_speculative_tokens":3' in cmd
    code = cli.main(["plan", "--model", "qwen3-32b", "--gpu", "h200", "--gpus", "8", "--isl", "2000", "--osl",
                     "500", "--speculative", "deepseek-mtp-1"])
    _, err = capsys.readouterr()
    assert code != 0 and err.count("\n") == 1 and "--speculative 'deepseek-mtp-1' drafts with an MTP module" in err


def test_speculative_decode_side_is_priced_per_output_token():
    from llmexplore.models.serving import disagg as dg
    from llmexplore.models.step.engine import Deployment
    from llmexplore.models.step.speculative import spec_step

    dep = Deployment.build("deepseek-v3", "h200", 8)
    wl = dg.Workload(prompt_tokens=2000, output_tokens=500)
    dec = dg.decode_side(dep, wl, points=12, speculative="deepseek-mtp-1")
    want = spec_step(dep, "deepseek-mtp-1", dec.batches, wl.decode_context)["tpot_s"]
    np.testing.assert_allclose(dec.step_s, want)
    assert dec.batch_cap < dg.decode_side(dep, wl, points=12).batch_cap  # draft weights, KV and verify slots


def test_the_pd_area_decodes_speculatively_where_asked():
    """Area 20 (sweeps.disagg): speculation on every decoding instance lowers the decode time per output token and
    the colocated pool the SLOs need; the prefill pool is untouched; bad combinations name the argument."""
    from llmexplore.sweeps import disagg as sd

    kw = dict(rate_per_s=36, ttft_slo_ms=1000, tpot_slo_ms=40)
    plain = sd.point_summary(sd.setup("llama-3-70b", "h100-sxm", **kw))
    spec = sd.point_summary(sd.setup("llama-3-70b", "h100-sxm", speculative="eagle3-llama-3.1-8b",
                                     accepted_length=2.5, **kw))
    assert spec["decode_step_ms"] < plain["decode_step_ms"] and spec["prefill_ms"] == plain["prefill_ms"]
    assert spec["colocated"]["gpus"] < plain["colocated"]["gpus"]
    with pytest.raises(SpecError, match="accepted_length must come with speculative"):
        sd.setup("llama-3-70b", "h100-sxm", accepted_length=2.0)
    with pytest.raises(SpecError, match="llama-3-70b has none"):
        sd.setup("llama-3-70b", "h100-sxm", speculative="deepseek-mtp-1")
