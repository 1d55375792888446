"""Findings of notebooks/60_deployment_planner.ipynb and ``llmexplore plan``: the question, the best
configuration and its runner-up, the colocated/disaggregated ratio, the frontiers and the simulator check."""

from __future__ import annotations

import numpy as np

from .. import presets
from ..sweeps import plan as sp
from . import num

__all__ = ["question_text", "best_sentence", "ratio_sentence", "frontier_sentence", "simulation_sentence",
           "summary", "launch_of"]


def question_text(q: sp.Question) -> str:
    m, hw = presets.model(q.model), presets.hardware(q.gpu)
    rate = f"{q.rate_per_s:g} req/s" if q.rate_per_s is not None else "the highest rate the budget sustains"
    return (f"{m.label} on up to {q.gpus} {hw.label}: prompts of {q.isl:,} and outputs of {q.osl:,} tokens, "
            f"{q.stat} TTFT ≤ {q.ttft_ms:,g} ms and {q.stat} TPOT ≤ {q.tpot_ms:,g} ms at {rate}.")


def _what(row: dict) -> str:
    if row["mode"] == "colocated":
        return (f"colocated, {row['n_decode']:.0f} instances of {row['decode_layout']}{row['decode_ranks']:.0f} "
                f"({row['weight_dtype']} weights, {row['kv_dtype']} KV, chunk {row['chunk_tokens']:.0f} tokens)")
    return (f"disaggregated, {row['n_prefill']:.0f} prefill instances of TP{row['prefill_ranks']:.0f} and "
            f"{row['n_decode']:.0f} decode instances of {row['decode_layout']}{row['decode_ranks']:.0f} "
            f"({row['weight_dtype']} weights, {row['kv_dtype']} KV, KV over {row['link']})")


def best_sentence(res: dict) -> str:
    q, b, r = res["question"], res["best"], res["runner_up"]
    if b is None:
        reasons = res["table"]["reason"].dropna()
        why = reasons.value_counts().index[0] if len(reasons) else "no configuration was searched"
        return f"No configuration meets the targets within {q.gpus} GPUs; the most common reason: {why}."
    text = (f"Best: {_what(b)}, {b['gpus']:.0f} GPUs serving {num(b['rate_per_s'])} req/s at "
            f"{num(b['tokens_per_s_per_gpu'])} output tokens/s per GPU and {num(b['tokens_per_s_per_user'])} "
            f"tokens/s per user ({q.stat} TTFT {num(b['ttft_ms'])} ms, {q.stat} TPOT {num(b['tpot_ms'])} ms).")
    if r is not None:
        m = res["margin_pct"]
        if q.rate_per_s is None:
            text += f" The runner-up, {r['label']}, is {num(abs(m))}% behind in tokens/s per GPU."
        elif m > 0:
            text += f" The runner-up, {r['label']}, needs {num(m)}% more GPUs ({r['gpus']:.0f})."
        else:
            text += (f" The runner-up, {r['label']}, needs as many GPUs and gives "
                     f"{num(r['tokens_per_s_per_user'])} tokens/s per user.")
    return text


def ratio_sentence(res: dict) -> str:
    c, d = res["best_by_mode"]["colocated"], res["best_by_mode"]["disaggregated"]
    if c is None or d is None:
        which = "colocated" if c is None else "disaggregated"
        return f"No {which} configuration meets the targets, so there is no ratio between the modes."
    ratio = res["disagg_over_agg_ratio"]
    word = "more" if ratio >= 1 else "fewer"
    return (f"Disaggregated serving gives {num(ratio)}x the output tokens/s per GPU of colocated serving "
            f"({num(d['tokens_per_s_per_gpu'])} vs {num(c['tokens_per_s_per_gpu'])}): {num(abs(ratio - 1) * 100)}% "
            f"{word} per GPU.")


def frontier_sentence(res: dict) -> str:
    parts = []
    for mode, f in res["frontiers"].items():
        if len(f):
            top = f.iloc[int(np.argmax(f["tokens_per_s_per_gpu"].to_numpy()))]
            fast = f.iloc[int(np.argmax(f["tokens_per_s_per_user"].to_numpy()))]
            parts.append(f"{mode} from {num(top['tokens_per_s_per_gpu'])} tokens/s/GPU at "
                         f"{num(top['tokens_per_s_per_user'])} tokens/s/user to {num(fast['tokens_per_s_per_user'])} "
                         f"tokens/s/user at {num(fast['tokens_per_s_per_gpu'])} tokens/s/GPU")
    if not parts:
        return "No configuration meets the TTFT target, so neither frontier has a point."
    return "Frontiers (TTFT target met): " + "; ".join(parts) + "."


def simulation_sentence(check: dict, q: sp.Question) -> str:
    if check["status"] != "simulated":
        return f"{check['label']}: {check['status']}."
    verdict = ("disagrees with the analytic estimate by more than 10%" if check["disagrees"]
               else "agrees with the analytic estimate within 10%")
    meets = "meets" if check["meets_targets_sim"] else "misses"
    return (f"{check['label']}: simulated {q.stat} TTFT {num(check['ttft_sim_ms'])} ms (model "
            f"{num(check['ttft_model_ms'])}, {check['ttft_gap_pct']:+.0f}%), {q.stat} TPOT "
            f"{num(check['tpot_sim_ms'])} ms (model {num(check['tpot_model_ms'])}, {check['tpot_gap_pct']:+.0f}%) "
            f"over {check['requests']:,} requests: it {verdict} and {meets} the targets.")


def launch_of(row: dict, q: sp.Question) -> dict:
    """Launch commands of one configuration for each engine ({engine: [{role, instances, gpus_per_instance,
    command, note}]})."""
    from .. import launch

    cfg = sp.config_of(row, q)
    return {eng: launch.launch_commands(cfg, eng) for eng in ("vllm", "sglang")}


def _clean(d):
    if d is None:
        return None
    return {k: v for k, v in d.items()}


def summary(res: dict, *, top: int = 8, simulate: int = 0) -> dict:
    """The answer as plain data (what ``llmexplore plan --json`` prints): best (with config and launch
    commands), runner-up, margin, best per mode, ratio, frontiers, the top rows, the infeasible reasons, the
    simulator check of the ``simulate`` best configurations, sentences, inputs and timing."""
    q = res["question"]
    t = res["table"]
    best = _clean(res["best"])
    if best is not None:
        best["config"] = sp.config_of(best, q)
        best["launch"] = launch_of(res["best"], q)
    checks = sp.simulate_top(res, simulate) if simulate else []
    for c in checks:
        c["sentence"] = simulation_sentence(c, q)
    bad = t[~t["feasible"]]
    reasons = (bad.groupby("reason").size().sort_values(ascending=False).reset_index(name="configurations")
               .to_dict("records") if len(bad) else [])
    return {
        "best_mode": res["best_mode"], "best": best, "runner_up": _clean(res["runner_up"]),
        "margin_pct": res["margin_pct"], "disagg_over_agg_ratio": res["disagg_over_agg_ratio"],
        "best_by_mode": {k: _clean(v) for k, v in res["best_by_mode"].items()},
        "frontiers": {k: v.to_dict("records") for k, v in res["frontiers"].items()},
        "top": t[t["feasible"]].head(int(top)).to_dict("records"), "infeasible": reasons,
        "configurations": int(len(t)), "feasible": int(t["feasible"].sum()), "simulation": checks,
        "question_text": question_text(q),
        "sentences": [best_sentence(res), ratio_sentence(res), frontier_sentence(res)],
        "inputs": {f: getattr(q, f) for f in ("model", "gpu", "gpus", "isl", "osl", "ttft_ms", "tpot_ms", "stat",
                                              "rate_per_s", "runtime", "weight_dtypes", "kv_dtypes", "modes")}
        | {"link": q.link_name()},
        "seconds": res["seconds"],
    }
