"""Benchmark the deployment planner (issue 10): one question, a slider move, the simulator, a capacity plan.

Run: ``.venv/bin/python benchmarks/bench_plan.py`` (or ``make bench``). Medians of repeats, each printed
relative to a fixed numpy reference workload timed in the same process (the machines here are noisy).

* **one question** (target < 1 s): issue 10 §2's Qwen3-32B FP8 on 32 H200, ISL 4,000 / OSL 500, p90 TTFT
  <= 300 ms, TPOT <= 10 ms, every ranks x pipeline size (1, 2, 4) x layout x KV dtype x chunk budget x pool
  pair, both modes, against the same question without pipelines (``Q_NO_NEW_AXES``, the search before issue 21). Timed
  with the planner's per-instance caches cleared (presets already read: they are read once per process), and
  again warm (a slider on the rate or the targets reuses the step tables);
* **the question with speculative decoding** searched on every decoding side (``Q_SPEC``, issue 21: still < 1 s),
  cold, as a ratio to the plain question;
* **two GPU types, priced** (issue 22: < 2 s): the closing note's worked example, Qwen3-32B FP8 on up to 64 H100
  or B200, ISL 8,000 / OSL 300, at 3-year reserved prices, ``--objective usd_per_mtok --budget-usd-per-hour 80``
  (``Q_MIX``: every type alone and every disaggregated pair across them, pipeline sizes 1, 2, 4), cold, as a
  ratio to the one-type question;
* **the simulator**: 10,000 requests on one colocated instance of the best colocated configuration at its
  planned per-instance rate (tables included);
* **a capacity plan** of 16 questions (2 models x 2 GPUs x 2 budgets x 2 TPOT targets) through
  ``capacity_plan``: in this process and on Dask LocalClusters of 1, 2 and 4 single-threaded workers
  (``bench_plan_scaling.measure_scaling``; every run must return the same frame). On a 2-core machine the
  4-worker speed-up cannot exceed 2.

The last line is machine-readable: ``plan_s=… sim_requests_per_s=… dask_speedup_4=…`` (the line before it:
``plan_warm_s=… dask_speedup_2=…``).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_s, print_table, reference_s  # noqa: E402
from bench_plan_scaling import measure_scaling  # noqa: E402

from llmexplore.models.serving import simulator as sv  # noqa: E402
from llmexplore.models.serving.batcher import Scheduler  # noqa: E402
from llmexplore.models.step.engine import Deployment  # noqa: E402
from llmexplore.models.serving.workload import LengthDist, Traffic  # noqa: E402
from llmexplore.sweeps import plan as sp  # noqa: E402
from llmexplore.sweeps.plan import instances as plan_search  # noqa: E402

Q = sp.Question(model="qwen3-32b", gpu="h200", gpus=32, isl=4000, osl=500, ttft_ms=300, tpot_ms=10, stat="p90",
                weight_dtypes=("fp8",))
#: the same question with speculative decoding searched on every decoding side too (issue 21: the new axes, pipeline
#: sizes 1, 2, 4 by default and speculation, stay < 1 s), and without either (the search before issue 21)
Q_SPEC = sp.Question(**{**{f: getattr(Q, f) for f in Q.__dataclass_fields__}, "speculative": "eagle3-llama-3.1-8b"})
Q_NO_NEW_AXES = sp.Question(**{**{f: getattr(Q, f) for f in Q.__dataclass_fields__}, "pipeline_sizes": (1,)})
#: issue 22's reference question: two GPU types priced, cheapest per million tokens within $80/hour
Q_MIX = sp.Question(model="qwen3-32b", gpu="h100-sxm", other_gpus=("b200",), gpus=64, isl=8000, osl=300,
                    ttft_ms=1500, tpot_ms=30, stat="p90", weight_dtypes=("fp8",), kv_dtypes=("fp8",),
                    price_tier="reserved-3yr", objective="usd_per_mtok", budget_usd_per_hour=80.0)
N_SIM = 10_000


def cold(q=Q) -> dict:
    plan_search._instance.cache_clear()
    plan_search._colocated_tables.cache_clear()
    return sp.plan(q)


def capacity_questions() -> list[dict]:
    return [{"model": m, "gpu": g, "gpus": n, "isl": 2000, "osl": 300, "ttft_ms": 1000, "tpot_ms": t,
             "weight_dtypes": ["fp8"]}
            for m in ("llama-3-8b", "qwen3-32b") for g in ("h100-sxm", "h200") for n in (8, 16) for t in (20, 40)]


def _warm() -> None:
    sp.capacity_task({**capacity_questions()[0], "gpus": 2})


def main() -> None:
    logging.getLogger("distributed").setLevel(logging.CRITICAL)  # cluster shutdown chatter, not results
    ref = reference_s()
    res = cold()  # reads the presets once, like any session
    t_cold = median_s(cold, 5)
    t_warm = median_s(lambda: sp.plan(Q, rate_per_s=None), 5)
    t_spec = median_s(lambda: cold(Q_SPEC), 5)
    t_old = median_s(lambda: cold(Q_NO_NEW_AXES), 5)
    t_mix = median_s(lambda: cold(Q_MIX), 3)
    b = res["best_by_mode"]["colocated"]
    dep = Deployment.build(Q.model, Q.gpu, int(b["decode_ranks"]), weight_dtype=b["weight_dtype"],
                           kv_dtype=b["kv_dtype"])
    traffic = Traffic(rate_per_s=float(b["rate_per_s"]) / float(b["n_decode"]), isl=LengthDist.fixed(Q.isl),
                      osl=LengthDist.fixed(Q.osl))
    sched = Scheduler(max_num_seqs=int(b["max_num_seqs"]),
                         max_num_batched_tokens=max(int(b["chunk_tokens"]), int(b["max_num_seqs"])))
    t_sim = median_s(lambda: sv.simulate_colocated(dep, traffic, N_SIM, scheduler=sched, seed=0), 3)
    serial, runs = measure_scaling(sp.capacity_task, capacity_questions(), workers=(), cluster_workers=(1, 2, 4),
                                   repeats=2, warm=_warm)
    speed = {name: s for name, _, s in runs}
    print(f"question: {Q.model} on {Q.gpus} {Q.gpu}, ISL {Q.isl} / OSL {Q.osl}; best "
          f"{res['best']['label']}; {len(res['table'])} configurations")
    rows = [("one question without PP and speculation", t_old, f"{t_old / ref:.1f}x ref", ""),
            ("one question (PP 1, 2, 4), caches cleared", t_cold, f"{t_cold / ref:.1f}x ref, {t_cold / t_old:.2f}x "
             "without PP", "< 1 s"),
            ("one question, warm (slider)", t_warm, f"{t_warm / ref:.1f}x ref", ""),
            ("one question + speculative axis, cold", t_spec, f"{t_spec / ref:.1f}x ref, {t_spec / t_cold:.2f}x "
             "the question", "< 1 s"),
            ("two GPU types, priced, $80/hour budget, cold", t_mix, f"{t_mix / ref:.1f}x ref, {t_mix / t_cold:.2f}x "
             "the question", "< 2 s"),
            (f"simulator, {N_SIM:,} requests, one instance", t_sim, f"{N_SIM / t_sim:,.0f} req/s", ""),
            ("capacity plan, 16 questions, serial", serial, f"{serial / ref:.1f}x ref", "")]
    rows += [(f"capacity plan on {name}", t, f"{s:.2f}x faster", "") for name, t, s in runs]
    rows.append(("reference numpy workload", ref, "1x", ""))
    print_table(rows)
    print(f"plan_mix_s={t_mix:.3f} plan_mix_over_plan={t_mix / t_cold:.2f}")
    print(f"plan_spec_s={t_spec:.3f} plan_spec_over_plan={t_spec / t_cold:.2f} plan_over_no_new_axes="
          f"{t_cold / t_old:.2f}")
    print(f"plan_warm_s={t_warm:.3f} dask_speedup_2={speed.get('dask2', float('nan')):.2f}")
    print(f"plan_s={t_cold:.3f} sim_requests_per_s={N_SIM / t_sim:.0f} "
          f"dask_speedup_4={speed.get('dask4', float('nan')):.2f}")


if __name__ == "__main__":
    main()
