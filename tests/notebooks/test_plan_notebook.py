"""notebooks/60_deployment_planner.ipynb with its defaults (the run test_all_notebooks makes, shared; the defaults are
small: about 15 s of cells on 2 cores): recorded headline numbers against the package and against the values they
had when the notebook was written."""

import math

import pytest

from llmexplore.sweeps import plan as sp

#: the notebook's defaults: issue 10 §2's reference question (Qwen3-32B FP8 on up to 32 H200, 4000/500 tokens,
#: p90 TTFT <= 300 ms and TPOT <= 10 ms, the highest rate the budget sustains)
QUESTION = sp.Question(model="qwen3-32b", gpu="h200", gpus=32, isl=4000, osl=500, ttft_ms=300, tpot_ms=10, stat="p90",
                       weight_dtypes=("fp8",))


@pytest.fixture(scope="module")
def rec(default_run):
    return default_run("60_deployment_planner.ipynb")[1]


@pytest.fixture(scope="module")
def res():
    return sp.plan(QUESTION)


def test_headline_is_the_packages_answer(rec, res):
    h = rec["headline"]
    assert h["best"]["label"] == res["best"]["label"]
    assert h["best"]["gpus"] == res["best"]["gpus"]
    assert h["best"]["tokens_per_s_per_gpu"] == pytest.approx(res["best"]["tokens_per_s_per_gpu"], rel=1e-9)
    assert h["runner_up"] == res["runner_up"]["label"]
    assert h["margin_pct"] == pytest.approx(res["margin_pct"], rel=1e-9)
    assert h["disagg_over_agg_ratio"] == pytest.approx(res["disagg_over_agg_ratio"], rel=1e-9)
    assert rec["question"].startswith("Qwen3-32B on up to 32 H200")


def test_recorded_headline_numbers(rec):
    # recorded (default runtime) since FP8 GEMMs are priced as the static kernel (issue 19 §3.1): 7 prefill TP2 + 4
    # decode TP4 instances, 30 GPUs, 39.6 req/s, 660 tokens/s/GPU; runner-up P:TP1 0.86% behind; disaggregated
    # 1.88x colocated per GPU. When the notebook was written: 9 TP1 + 5 TP4, 29 GPUs, 23.1 req/s, 399 tokens/s/GPU,
    # P:TP2 3.45% behind, 2.34x
    h = rec["headline"]
    b = h["best"]
    assert b["label"] == "disagg P:TP2 D:TP4 fp8/fp8" and b["mode"] == "disaggregated"
    assert (b["n_prefill"], b["n_decode"], b["gpus"]) == (7, 4, 30)
    assert b["tokens_per_s_per_gpu"] == pytest.approx(660.3, rel=0.02)
    assert b["ttft_ms"] <= 300 and b["tpot_ms"] <= 10 * (1 + 1e-9)  # within the targets
    assert h["runner_up"] == "disagg P:TP1 D:TP4 fp8/fp8" and h["margin_pct"] == pytest.approx(0.86, abs=0.2)
    assert h["disagg_over_agg_ratio"] > 1 and h["disagg_over_agg_ratio"] == pytest.approx(1.88, rel=0.03)
    assert h["frontier_points"]["colocated"] > 0 and h["frontier_points"]["disaggregated"] > 0
    assert rec["searched"] == {"weight": ["fp8"], "kv": ["bf16", "fp8"], "link": ["ib-ndr400"],
                               "modes": ["colocated", "disaggregated"]}
    assert rec["top_labels"][0] == b["label"] and len(rec["top_labels"]) == 8


def test_the_simulator_agrees_within_the_check_tolerance(rec):
    s = rec["simulated"]
    assert s["status"] == "simulated" and s["requests"] == 2000
    assert s["rate_per_s"] == pytest.approx(rec["headline"]["best"]["rate_per_s"], rel=1e-12)
    # the simulator lands within ~10% of the planner's own estimates (recorded: TTFT 224 ms against the planner's
    # 209 ms, TPOT 9.61 ms against 10; before static FP8 GEMMs the planner sat at the 300 ms target and the simulator
    # read 317 ms)
    b = rec["headline"]["best"]
    assert s["ttft_ms"] == pytest.approx(b["ttft_ms"], rel=0.15) and s["tpot_ms"] == pytest.approx(b["tpot_ms"], rel=0.15)
    c = rec["checks"]
    # ranked by the simulation (issue 19 §3): what meets both targets there first, in the planner's order
    assert sorted(c["label"]) == sorted(rec["top_labels"][:3]) and c["status"] == ["simulated"] * 3
    assert c["sim_rank"] == [1, 2, 3] and c["meets_targets_sim"] == sorted(c["meets_targets_sim"], reverse=True)
    assert [rec["top_labels"][r - 1] for r in c["planner_rank"]] == c["label"]
    # the planner's best meets both p90 targets in simulation (224 ms TTFT); before static FP8 GEMMs it missed the
    # TTFT target (317 vs 300 ms) and its runner-up was the best that met both (tests/unit/sweeps/test_plan_area.py
    # keeps that case: test_the_checks_rank_by_the_simulation_and_say_when_the_planners_best_misses)
    assert rec["best_in_simulation"] == {"label": rec["top_labels"][0], "planner_rank": 1,
                                         "planner_best_meets_targets": True}
    assert all(abs(g) < 15 for g in c["ttft_gap_pct"] + c["tpot_gap_pct"])
    assert c["disagrees"] == [abs(a) > 10 or abs(b) > 10 for a, b in zip(c["ttft_gap_pct"], c["tpot_gap_pct"])]


def test_rate_sweep_grows_and_colocated_stops_first(rec):
    r = rec["rate_sweep"]
    rates, best = r["rate_per_s"], r["best_gpus"]
    assert len(rates) == 8 and rates == sorted(rates)
    # more rate, never fewer GPUs; the highest rate within the budget (41.9 req/s) takes 32 GPUs, more than the best
    # configuration per GPU (30 GPUs at 39.6 req/s)
    assert best == sorted(best) and rec["headline"]["best"]["gpus"] <= best[-1] <= 32
    assert all(b == min(g for g in (c, d) if not math.isnan(g)) for b, c, d in
               zip(best, r["colocated_gpus"], r["disaggregated_gpus"]))
    assert all(g <= 32 for g in best)
    assert math.isnan(r["colocated_gpus"][-1])  # colocated cannot reach the highest rate within 32 GPUs
