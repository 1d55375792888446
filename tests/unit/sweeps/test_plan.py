"""The deployment planner (llmexplore.models.serving.capacity, llmexplore.sweeps.plan, findings.plan): closed forms of the
rate solvers, Pareto frontiers, the issue's reference question, determinism across process pools, and the
simulator re-check."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmexplore import launch
from llmexplore.deployment import MODES
from llmexplore.errors import SpecError
from llmexplore.findings import plan as fp
from llmexplore.models.serving import capacity as pm
from llmexplore.models.queueing import at_stat
from llmexplore.models.queueing import core as qz
from llmexplore.sweeps import plan as sp

#: issue 10 §2: "Qwen3-32B FP8 on 32 H200, ISL 4000 / OSL 500, TTFT <= 300 ms, TPOT <= 10 ms"
REF = sp.Question(model="qwen3-32b", gpu="h200", gpus=32, isl=4000, osl=500, ttft_ms=300, tpot_ms=10, stat="p90",
                  weight_dtypes=("fp8",))


@pytest.fixture(scope="module")
def ref():
    return sp.plan(REF)


# ---- closed forms --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("S,T", [(0.05, 0.3), (0.2, 0.25), (0.01, 1.0)])
def test_prefill_rate_one_instance_matches_the_md1_mean_closed_form(S, T):
    """M/D/1 mean TTFT = lam S^2 / (2 (1 - lam S)) + S = T  =>  lam = 2a / (S^2 + 2 a S), a = T - S."""
    a = T - S
    exact = 2 * a / (S * S + 2 * a * S)
    got = pm.prefill_pool_rates("mean", T, [S], [0.0], [0.0], 1)[0, 0]
    assert got == pytest.approx(exact, rel=1e-6)


def test_prefill_rate_meets_the_target_and_a_little_more_misses():
    S, busy, exp, T = np.array([0.08, 0.2]), np.array([0.01, 0.0]), np.array([0.005, 0.0]), 0.4
    r = pm.prefill_pool_rates("p99", T, S, busy, exp, 4)
    n = np.arange(1, 5)[None, :]

    def ttft(lam):
        return at_stat.pool_wait("p99", lam, S[:, None], n) + S[:, None] + at_stat.link_wait("p99", lam / n, busy[:, None]) \
            + exp[:, None]

    assert np.all(ttft(r) <= T + 1e-9)
    assert np.all(ttft(r * 1.001) > T)
    assert np.all(np.diff(r, axis=1) > 0)  # more instances, more rate


def test_prefill_rate_is_zero_when_an_idle_pool_misses():
    assert pm.prefill_pool_rates("p90", 0.1, [0.2], [0.0], [0.0], 3).max() == 0.0


def test_pool_wait_mean_is_md1_for_one_server_and_allen_cunneen_beyond():
    assert at_stat.pool_wait("mean", 5.0, 0.1, 1) == pytest.approx(float(qz.md1_mean_wait(5.0, 0.1)))
    assert at_stat.pool_wait("mean", 15.0, 0.1, 2) == pytest.approx(float(qz.mgc_mean_wait(15.0, 0.1, 2, cs2=0.0)))
    assert math.isinf(at_stat.pool_wait("mean", 25.0, 0.1, 2))


def test_decode_instance_rate_is_littles_law_at_the_largest_batch_within_target():
    b = np.arange(1, 257, dtype=float)
    t = 0.01 + 1e-4 * b  # 10 ms + 0.1 ms per sequence
    d = pm.decode_instance_rate("mean", 0.02, b, t, 100)
    assert d["mean_batch"] == pytest.approx(100.0)  # t(100) = 20 ms
    assert d["rate_per_s"] == pytest.approx(100 / (100 * 0.02))
    p = pm.decode_instance_rate("p99", 0.02, b, t, 100)
    m = p["mean_batch"]
    assert m + 2.3263 * math.sqrt(m) == pytest.approx(100.0, rel=1e-3)  # its p99 batch sits at the target
    assert pm.decode_instance_rate("p90", 0.005, b, t, 100)["rate_per_s"] == 0.0


# ---- frontier ------------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 100), st.floats(0.1, 100)), min_size=1, max_size=40))
def test_pareto_front_is_exactly_the_undominated_points(pts):
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    front = set(pm.pareto_front(x, y).tolist())

    def dominated(i):
        return np.any((x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i])))

    for i in range(len(pts)):
        if i in front:
            assert not dominated(i)
        else:  # dominated, or a duplicate of a front point
            assert dominated(i) or any(x[j] == x[i] and y[j] == y[i] for j in front)


# ---- the reference question ------------------------------------------------------------------------------
def test_reference_question_has_a_winner_both_frontiers_and_a_ratio(ref):
    b = ref["best"]
    assert b is not None and b["feasible"]
    assert b["gpus"] <= REF.gpus
    assert b["ttft_ms"] <= REF.ttft_ms * (1 + 1e-9) and b["tpot_ms"] <= REF.tpot_ms * (1 + 1e-9)
    assert ref["best_mode"] in MODES
    for mode in MODES:
        assert len(ref["frontiers"][mode]) >= 3
        f = ref["frontiers"][mode]
        assert np.all(np.diff(f["tokens_per_s_per_user"]) > 0) and np.all(np.diff(f["tokens_per_s_per_gpu"]) < 0)
    assert np.isfinite(ref["disagg_over_agg_ratio"]) and ref["disagg_over_agg_ratio"] > 0
    assert np.isfinite(ref["margin_pct"]) and ref["margin_pct"] >= 0
    # tokens/s per GPU is the objective: rate x OSL / GPUs
    assert b["tokens_per_s_per_gpu"] == pytest.approx(b["rate_per_s"] * REF.osl / b["gpus"])


def test_reference_question_gives_the_same_winner_every_run(ref):
    again = sp.plan(REF)
    assert again["best"]["label"] == ref["best"]["label"]
    pd.testing.assert_frame_equal(again["table"], ref["table"])


def test_every_configuration_is_a_row_and_infeasible_ones_say_why(ref):
    t = ref["table"]
    bad = t[~t["feasible"]]
    assert len(bad) and bad["reason"].str.len().gt(0).all()
    assert t.loc[t["feasible"], "reason"].fillna("").eq("").all()
    assert {"colocated", "disaggregated"} <= set(t["mode"])
    assert t.loc[t["feasible"], ["gpus", "rate_per_s", "ttft_ms", "tpot_ms"]].notna().all().all()


def test_a_process_pool_gives_the_same_answer(ref):
    q = sp.Question(**{**REF.__dict__, "kv_dtypes": ("bf16", "fp8")})
    a = sp.plan(q)
    b = sp.plan(q, workers=2)
    pd.testing.assert_frame_equal(a["table"], b["table"], check_dtype=False)
    for mode in MODES:
        pd.testing.assert_frame_equal(a["frontiers"][mode], b["frontiers"][mode], check_dtype=False)


@pytest.mark.slow  # a subprocess / Dask run: the fast tier (-m 'not slow') leaves it out
def test_a_dask_cluster_gives_the_same_answer(ref):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        b = sp.plan(REF, scheduler=c.scheduler_address)
    pd.testing.assert_frame_equal(ref["table"], b["table"], check_dtype=False)
    assert b["best"]["label"] == ref["best"]["label"]


def test_with_a_rate_the_best_serves_it_with_the_fewest_gpus():
    q = sp.Question(**{**REF.__dict__, "rate_per_s": 8.0})
    res = sp.plan(q)
    t = res["table"]
    ok = t[t["feasible"]]
    assert (ok["rate_per_s"] == 8.0).all()
    assert res["best"]["gpus"] == ok["gpus"].min()
    assert (ok["ttft_ms"] <= q.ttft_ms * (1 + 1e-9)).all() and (ok["tpot_ms"] <= q.tpot_ms * (1 + 1e-9)).all()
    # more traffic never needs fewer GPUs
    more = sp.plan(q, rate_per_s=16.0)
    assert more["best"]["gpus"] >= res["best"]["gpus"]


def test_looser_targets_never_lower_the_best_throughput(ref):
    loose = sp.plan(REF, tpot_ms=20.0, ttft_ms=600.0)
    assert loose["best"]["tokens_per_s_per_gpu"] >= ref["best"]["tokens_per_s_per_gpu"] * (1 - 1e-9)


def test_impossible_targets_give_no_best_and_a_reason():
    res = sp.plan(REF, tpot_ms=0.5)
    assert res["best"] is None and res["best_mode"] is None
    assert not res["table"]["feasible"].any()
    assert "TPOT" in fp.best_sentence(res) or "reason" in fp.best_sentence(res)


@pytest.mark.parametrize("field,value,match", [
    ("gpus", 0, "gpus"), ("isl", -1, "isl"), ("stat", "p95", "stat"), ("ttft_ms", float("nan"), "ttft_ms"),
    ("modes", ("both",), "modes"), ("weight_dtypes", ("fp4",), "weight_dtype"), ("rate_per_s", 0, "rate_per_s"),
    ("model", "no-such-model", "model"),
])
def test_bad_questions_name_the_field(field, value, match):
    with pytest.raises(Exception, match=match) as e:
        sp.Question(**{**REF.__dict__, field: value})
    assert isinstance(e.value, (SpecError, KeyError, ValueError))


# ---- output: launch commands, sentences, the simulator check ------------------------------------------------------
def test_best_config_gives_launch_commands_for_every_engine(ref):
    cfg = sp.config_of(ref["best"], REF)
    roles = [s.role for s in cfg.sides]
    assert roles == (["colocated"] if cfg.mode == "colocated" else ["prefill", "decode"])
    for eng in launch.ENGINES:
        cmds = launch.launch_commands(cfg, eng)
        assert [c["role"] for c in cmds] == roles
        assert all(c["command"] or c["note"] for c in cmds)
    doc = fp.summary(ref, top=3)
    assert doc["best"]["config"] == cfg.to_json() and set(doc["best"]["launch"]) == {"vllm", "sglang", "trtllm"}
    assert len(doc["top"]) == 3 and doc["feasible"] <= doc["configurations"]
    assert f"{ref['best']['gpus']:.0f} GPUs" in doc["sentences"][0]


def test_the_simulator_recheck_agrees_with_the_disaggregated_estimate(ref):
    """The analytic disaggregated model (M/D/c prefill queue, NIC queues, Little's law decode) against the
    iteration-level simulator at the same rate: within 20% on TTFT and TPOT at p90 (measured: +5..+11% TTFT,
    -3% TPOT on this question, 2,000 requests)."""
    t = ref["table"]
    row = t[t["feasible"] & (t["mode"] == "disaggregated") & (t["decode_layout"] == "TP")].iloc[0].to_dict()
    chk = sp.simulate_row(row, REF, n_requests=2000)
    assert chk["status"] == "simulated"
    assert abs(chk["ttft_gap_pct"]) < 20 and abs(chk["tpot_gap_pct"]) < 20
    assert chk["disagrees"] == (abs(chk["ttft_gap_pct"]) > 10 or abs(chk["tpot_gap_pct"]) > 10)


def test_simulate_config_returns_distributions(ref):
    cfg = sp.config_of(ref["best"], REF)
    out = sp.simulate_config(cfg, isl=REF.isl, osl=REF.osl, rate_per_s=float(ref["best"]["rate_per_s"]) / 2,
                             n_requests=400)
    for k in ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms"):
        v = out["cdf"][k]
        assert v.size == sp.CDF_POINTS.size and np.all(np.diff(v) >= 0)
    assert out["summary"]["requests"] == 400
    with pytest.raises(SpecError, match="mode"):
        sp.simulate_config({**cfg.to_json(), "mode": "both"}, isl=10, osl=10, rate_per_s=1.0)


def test_capacity_plan_streams_to_parquet_and_resumes(tmp_path):
    """Half the questions, then all of them into the same dataset: the second run only answers the missing
    ones and the result equals an uninterrupted run (issue 10 §4)."""
    qs = [{"model": "llama-3-8b", "gpu": g, "gpus": n, "isl": 1000, "osl": 200, "ttft_ms": 1000, "tpot_ms": 30,
           "weight_dtypes": ["fp8"], "kv_dtypes": ["fp8"]} for g in ("h100-sxm", "h200") for n in (2, 4)]
    whole = sp.capacity_plan(qs, workers=1)
    sp.capacity_plan(qs[:2], out=tmp_path, workers=1)
    parts_before = set(tmp_path.rglob("*.parquet"))
    resumed = sp.capacity_plan(qs, out=tmp_path, workers=1)
    assert len(set(tmp_path.rglob("*.parquet")) - parts_before) >= 1
    pd.testing.assert_frame_equal(whole, resumed, check_dtype=False)
    assert len(whole) == 2 * len(qs) and set(whole["mode"]) == set(MODES)
    assert whole.groupby("task_id")["best_overall"].sum().le(1).all()


def _cli_json(argv, capsys):
    import json

    from llmexplore import cli

    capsys.readouterr()
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


PLAN_ARGV = ["plan", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--isl", "2000", "--osl", "200",
             "--ttft-ms", "500", "--tpot-ms", "20", "--weight-dtype", "fp8", "--json"]


def test_cli_plan_json_is_the_same_with_a_worker_pool(capsys):
    """issue 10 §5: `plan ... --json` has best_mode, best (configuration, launch arguments, metrics),
    disagg_over_agg_ratio and both frontiers, and the answer does not depend on where the search ran."""
    a = _cli_json(PLAN_ARGV, capsys)
    b = _cli_json(PLAN_ARGV + ["--workers", "2"], capsys)
    for d in (a, b):
        d.pop("seconds")
    assert a == b
    assert a["best_mode"] in MODES and a["best"]["mode"] == a["best_mode"]
    assert set(a["frontiers"]) == set(MODES) and all(a["frontiers"][m] for m in MODES)
    assert set(a["best"]["launch"]) == {"vllm", "sglang", "trtllm"} and a["best"]["config"]["sides"]
    assert a["disagg_over_agg_ratio"] > 0


def test_cli_plan_prints_trtllm_serve_with_its_options_file(capsys):
    """Issue 19 §1: `plan --engine trtllm` prints trtllm-serve lines and the YAML file each one reads (FP8 Llama
    runs NVIDIA's ModelOpt checkpoint; FP8 KV is a kv_cache_config field, not a flag)."""
    from llmexplore import cli

    argv = [a for a in PLAN_ARGV if a != "--json"] + ["--kv-dtype", "fp8", "--engine", "trtllm"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "launch (trtllm):" in out and "trtllm-serve nvidia/Llama-3.1-8B-Instruct-FP8 --backend pytorch" in out
    assert "file extra-llm-api-config.yaml:" in out or "file prefill-extra-llm-api-config.yaml:" in out
    assert "dtype: fp8" in out and "--extra_llm_api_options" in out


def test_cli_simulate_reads_a_plan_and_gives_distributions(capsys, tmp_path):
    import json

    doc = _cli_json(PLAN_ARGV, capsys)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    rate = doc["best"]["rate_per_s"] / 2
    s = _cli_json(["simulate", "--config", str(path), "--isl", "2000", "--osl", "200", "--rate", f"{rate:.4f}",
                   "--requests", "300", "--json"], capsys)
    assert s["summary"]["requests"] == 300
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert len(s["cdf"][k]) == len(s["quantiles"])
    assert s["summary"]["ttft_p99_ms"] >= s["summary"]["ttft_p50_ms"]
    assert s["config"] == doc["best"]["config"]



def test_cli_simulate_keys_carry_their_units(capsys, tmp_path):
    """Issue 18 §6: a rate per second stays per second in ``simulate --json`` (it printed
    ``"output_tokens_per_ms": 25707583`` for 25,708 tokens/s); durations are in ms, the makespan in s."""
    import json

    doc = _cli_json(PLAN_ARGV, capsys)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    s = _cli_json(["simulate", "--config", str(path), "--isl", "2000", "--osl", "200", "--rate", "2",
                   "--requests", "200", "--json"], capsys)["summary"]
    assert not any(k.endswith("_per_ms") for k in s), sorted(s)
    assert s["output_tokens_per_s"] == pytest.approx(s["output_tokens"] / s["makespan_s"], rel=1e-12)
    assert s["requests_per_s"] == pytest.approx(s["requests"] / s["makespan_s"], rel=1e-12)
    assert 1 < s["requests_per_s"] < 3  # about the 2 req/s offered, not x 1,000
    assert s["e2e_mean_ms"] > s["ttft_mean_ms"] > 0 and s["e2e_mean_ms"] < 1e3 * s["makespan_s"]

def test_cli_simulate_runs_a_dpa_config_and_sglangs_mixed_chunk(capsys):
    """A DPA side simulates (one scheduler per attention-DP rank); --mixed-chunk is SGLang's knob and is refused
    with another engine's runtime, naming the flag."""
    import json

    from llmexplore import cli

    cfg = {"model": "deepseek-v3", "gpu": "h200", "mode": "colocated", "weight_dtype": "fp8", "kv_dtype": "fp8",
           "link": None, "sides": [{"role": "colocated", "instances": 1, "ranks": 8, "layout": "DPA", "ep": 8,
                                    "max_num_seqs": 64, "chunk_tokens": 8192}]}
    base = ["simulate", "--config", json.dumps(cfg), "--isl", "1000", "--osl", "100", "--concurrency", "32",
            "--requests", "96", "--runtime", "sglang", "--json"]
    apart = _cli_json(base, capsys)["summary"]
    mixed = _cli_json(base + ["--mixed-chunk"], capsys)["summary"]
    assert apart["requests"] == mixed["requests"] == 96 and apart != mixed
    assert apart["mean_decode_batch"] <= 64  # the instance's batch, its 8 ranks' together
    assert cli.main(base[:-3] + ["--runtime", "vllm", "--mixed-chunk"]) == 2
    assert "--mixed-chunk is SGLang's" in capsys.readouterr().err


# ---- the expert-parallel axis -----------------------------------------------------------------------------------
def test_moe_ep_of_all_ranks_is_the_default_and_moe_tp_slices_experts():
    from llmexplore.models.step.decode import step_time
    from llmexplore.models.step.engine import Deployment

    base = Deployment.build("qwen3-30b-a3b", "h200", 8, weight_dtype="fp8")
    same = Deployment.build("qwen3-30b-a3b", "h200", 8, weight_dtype="fp8", moe_ep=8)
    tp = Deployment.build("qwen3-30b-a3b", "h200", 8, weight_dtype="fp8", moe_ep=1)
    b = np.array([1.0, 64.0, 512.0])
    a, s, t = (step_time(d, b, 2048.0, "TP")["ffn_moe_s"] for d in (base, same, tp))
    np.testing.assert_array_equal(a, s)
    assert np.all(t >= a * (1 - 1e-12)) and t[-1] > a[-1]  # slicing 768-wide experts 8 ways never helps here
    for kw, match in [({"moe_ep": 3}, "moe_ep"), ({"moe_ep": 16}, "moe_ep"),
                      ({"moe_ep": 4, "moe_dispatch": "alltoall"}, "all-to-all")]:
        with pytest.raises(SpecError, match=match):
            Deployment.build("qwen3-30b-a3b", "h200", 8, weight_dtype="fp8", **kw)
    with pytest.raises(SpecError, match="MoE models only"):
        Deployment.build("llama-3-8b", "h200", 2, moe_ep=1)


def test_the_planner_searches_the_ep_size_of_moe_instances():
    q = sp.Question(model="qwen3-30b-a3b", gpu="h200", gpus=8, isl=2000, osl=300, ttft_ms=1000, tpot_ms=20,
                    weight_dtypes=("fp8",), kv_dtypes=("fp8",), modes=("colocated",))
    t = sp.plan(q)["table"]
    tp8 = t[(t["decode_ranks"] == 8) & (t["decode_layout"] == "TP")]
    assert {1, 8} <= set(tp8["decode_ep"].dropna().astype(int))
    row = tp8[tp8["decode_ep"] == 1].iloc[0].to_dict()
    assert "EP1" in row["label"] and sp.config_of(row, q).sides[0].ep == 1


def test_sentences_when_nothing_is_feasible_say_so_plainly():
    res = sp.plan(sp.Question(**{**REF.__dict__, "gpus": 1, "tpot_ms": 0.5}))
    assert fp.ratio_sentence(res).startswith("Neither colocated nor disaggregated")
    assert "within 1 GPU;" in fp.best_sentence(res)


def test_simulate_replays_a_trace(tmp_path, capsys):
    """issue 10 §1: a trace CSV of arrival time, prompt and output tokens and an optional prefix id."""
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,prefix_id\n0.0,1000,50,a\n0.1,1200,60,a\n"
                     "0.15,800,40,\n0.4,1000,80,b\n")
    cfg = {"model": "llama-3-8b", "gpu": "h100-sxm", "mode": "colocated", "weight_dtype": "fp8", "kv_dtype": "fp8",
           "sides": [{"role": "colocated", "instances": 1, "ranks": 1, "layout": "TP", "max_num_seqs": 8,
                      "chunk_tokens": 512}]}
    out = sp.simulate_config(cfg, isl=1200, osl=80, trace=str(trace), prefix_ratio=0.5)
    assert out["summary"]["requests"] == 4 and out["summary"]["output_tokens"] == 230
    with pytest.raises(SpecError, match="trace"):
        sp.simulate_config(cfg, isl=1200, osl=80, trace=str(trace), rate_per_s=1.0)
    import json

    s = _cli_json(["simulate", "--config", json.dumps(cfg), "--isl", "1200", "--osl", "80", "--trace", str(trace),
                   "--json"], capsys)
    assert s["summary"]["requests"] == 4


def test_simulated_checks_name_the_best_configuration_the_simulation_confirms(ref):
    t = ref["table"]
    labels = t[t["feasible"]]["label"].head(3).tolist()
    miss = {"status": "simulated", "meets_targets_sim": False}
    hit = {"status": "simulated", "meets_targets_sim": True}
    checks = [{**miss, "label": labels[0]}, {**hit, "label": labels[1]}, {**hit, "label": labels[2]}]
    text = fp.verified_sentence(checks, ref)
    assert "misses a target in the simulation" in text and labels[1] in text and labels[2] not in text
    assert "confirms the best" in fp.verified_sentence([{**hit, "label": labels[0]}], ref)
    assert fp.verified_sentence([{**miss, "label": labels[0]}], ref).startswith("None of the 1 ")
    doc = fp.summary(ref, top=2, simulate=1)
    assert doc["best_simulated"] in (None, labels[0]) and doc["simulated_sentence"]
