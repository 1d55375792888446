"""Findings of notebooks/60_deployment_planner.ipynb and ``llmexplore plan``: the question, the best
configuration and its runner-up, the colocated/disaggregated ratio, the frontiers and the simulator check."""

from __future__ import annotations

import numpy as np

from .. import presets
from ..deployment import MODES
from ..sweeps import plan as sp
from . import join, num

__all__ = ["question_text", "best_sentence", "ratio_sentence", "frontier_sentence", "simulation_sentence",
           "summary", "launch_of", "verified_sentence", "cost_sentence", "cost_frontier_sentence", "price_text",
           "OBJECTIVE_WORDS", "cost_frontiers", "at_interactivity", "cost_record", "energy_check",
           "energy_check_sentence", "price_label", "mix_sentence", "mix_record"]

#: how each objective is said
OBJECTIVE_WORDS = {"tokens_per_s_per_gpu": "output tokens/s per GPU", "usd_per_mtok": "$ per million tokens",
                   "j_per_token": "GPU energy per output token"}


def _usd(x: float) -> str:
    """A price per GPU-hour as published: at least two decimals, at most four ($6.305, $1.30)."""
    t = f"{x:,.4f}".rstrip("0")
    return t + "0" * max(0, 2 - len(t.split(".")[1]))


def price_text(q: sp.Question) -> str:
    """'neocloud-on-demand prices (h200 $6.31/GPU-h, 2026-10-24; ...)', or why the answer is not priced."""
    prices = q.priced()
    if prices is None:
        missing = [g for g in q.gpu_types if g not in presets.price_tier(q.tier).prices]
        return (f"not priced: price tier {q.tier} has no price for {', '.join(missing)} (give one with "
                "usd_per_gpu_hour)")
    where = "your" if all(p.source == "given by the user" for p in prices.values()) else q.tier
    return f"{where} prices (" + "; ".join(f"{g} ${_usd(p.usd_per_gpu_hour)}/GPU-h, {p.date}"
                                           for g, p in prices.items()) + ")"


def question_text(q: sp.Question) -> str:
    m = presets.model(q.model)
    types = " or ".join(presets.hardware(g).label for g in q.gpu_types)
    rate = f"{q.rate_per_s:g} req/s" if q.rate_per_s is not None else "the highest rate the budget sustains"
    budget = f" and ${q.budget_usd_per_hour:,.2f}/hour" if q.budget_usd_per_hour is not None else ""
    best_at = "" if q.objective == "tokens_per_s_per_gpu" else f", best by {OBJECTIVE_WORDS[q.objective]}"
    mix = ""
    if q.long_share is not None:
        (si, so), (li, lo) = q.classes()
        mix = (f" ({100 * (1 - q.long_share):.3g}% of {si:,.0f} and {so:,.0f}, {100 * q.long_share:.3g}% of {li:,.0f} "
               f"and {lo:,.0f}; unrouted pools are priced at the mean, routed pools per length)")
    return (f"{m.label} on up to {q.gpus} {types}{budget}: prompts of {q.isl:,} and outputs of {q.osl:,} tokens{mix}, "
            f"{q.stat} TTFT ≤ {q.ttft_ms:,g} ms and {q.stat} TPOT ≤ {q.tpot_ms:,g} ms at {rate}{best_at}; "
            f"{price_text(q)}.")


def _spec_words(row: dict, q: sp.Question | None) -> str:
    """', speculative decoding NAME (k draft tokens, tau tokens per step: ACCEPTANCE SOURCE)' of a row that
    speculates ('' otherwise)."""
    name = str(row.get("speculative") or "")
    if not name or q is None:
        return f", speculative decoding {name}" if name else ""
    s = q.spec()
    given = "your accepted length" if q.speculative_accepted_length is not None else f"measured on {s.conditions}"
    return (f", speculative decoding {name} ({s.draft_tokens} draft token{'s' if s.draft_tokens != 1 else ''}, "
            f"{num(s.tokens_per_step)} tokens per step: {given})")


def _pp(row: dict, side: str) -> str:
    """' x PP2' for a side that is a pipeline of 2 stages ('' otherwise)."""
    p = row.get(f"{side}_pp")
    return f" x PP{p:.0f}" if p == p and p is not None and p > 1 else ""


def _on(row: dict, side: str, q: sp.Question | None) -> str:
    """' on b200' for a side of a question with several GPU types ('' otherwise)."""
    g = str(row.get(f"{side}_gpu") or "")
    return f" on {g}" if g and q is not None and len(q.gpu_types) > 1 else ""


def _what(row: dict, q: sp.Question | None = None) -> str:
    spec = _spec_words(row, q)
    route = row.get("route_prompt_tokens")
    if row["mode"] == "colocated" and route is not None and route == route:
        lg = f" on {row['long_gpu']}" if q is not None and len(q.gpu_types) > 1 else ""
        return (f"two colocated pools routed by length: prompts of up to {route:,.0f} tokens to "
                f"{row['n_decode']:.0f} instances of TP{row['decode_ranks']:.0f}{_pp(row, 'decode')}"
                f"{_on(row, 'decode', q)} (chunk {row['chunk_tokens']:.0f}), longer ones to {row['n_long']:.0f} "
                f"instances of TP{row['long_ranks']:.0f}{_pp(row, 'long')}{lg} (chunk {row['long_chunk_tokens']:.0f}) "
                f"({row['weight_dtype']} weights, {row['kv_dtype']} KV{spec})")
    if row["mode"] == "colocated":
        return (f"colocated, {row['n_decode']:.0f} instances of {row['decode_layout']}{row['decode_ranks']:.0f}"
                f"{_pp(row, 'decode')}{_on(row, 'decode', q)} ({row['weight_dtype']} weights, {row['kv_dtype']} KV, "
                f"chunk {row['chunk_tokens']:.0f} tokens{spec})")
    return (f"disaggregated, {row['n_prefill']:.0f} prefill instances of TP{row['prefill_ranks']:.0f}"
            f"{_pp(row, 'prefill')}{_on(row, 'prefill', q)} and {row['n_decode']:.0f} decode instances of "
            f"{row['decode_layout']}{row['decode_ranks']:.0f}{_pp(row, 'decode')}{_on(row, 'decode', q)} "
            f"({row['weight_dtype']} weights, "
            f"{row['kv_dtype']} KV, KV over {row['link']}{spec})")


def best_sentence(res: dict) -> str:
    q, b, r = res["question"], res["best"], res["runner_up"]
    if b is None:
        reasons = res["table"]["reason"].dropna()
        why = reasons.value_counts().index[0] if len(reasons) else "no configuration was searched"
        return (f"No configuration meets the targets within {q.gpus} GPU{'s' if q.gpus != 1 else ''}; the most common "
                f"reason: {why}.")
    text = (f"Best: {_what(b, q)}, {b['gpus']:.0f} GPUs serving {num(b['rate_per_s'])} req/s at "
            f"{num(b['tokens_per_s_per_gpu'])} output tokens/s per GPU and {num(b['tokens_per_s_per_user'])} "
            f"tokens/s per user ({q.stat} TTFT {num(b['ttft_ms'])} ms, {q.stat} TPOT {num(b['tpot_ms'])} ms).")
    if r is not None:
        m = res["margin_pct"]
        if q.objective == "usd_per_mtok":
            text += (f" The runner-up, {r['label']}, costs {num(abs(m))}% more per million tokens "
                     f"(${r['usd_per_mtok_total']:.4g}).")
        elif q.objective == "j_per_token":
            text += (f" The runner-up, {r['label']}, uses {num(abs(m))}% more GPU energy per output token "
                     f"({r['j_per_token']:.3g} J).")
        elif q.rate_per_s is None:
            text += f" The runner-up, {r['label']}, is {num(abs(m))}% behind in tokens/s per GPU."
        elif m > 0:
            text += f" The runner-up, {r['label']}, needs {num(m)}% more GPUs ({r['gpus']:.0f})."
        else:
            text += (f" The runner-up, {r['label']}, needs as many GPUs and gives "
                     f"{num(r['tokens_per_s_per_user'])} tokens/s per user.")
    return text


def cost_sentence(res: dict) -> str:
    """What the best configuration costs and uses: $/hour, $ per million input / output / all tokens with the
    prices' tier and dates, GPU energy per output token and output tokens/s per MW of all-in power (or why a
    number is not given)."""
    q, b = res["question"], res["best"]
    if b is None:
        return "Nothing is priced: no configuration meets the targets."
    parts = []
    if b.get("usd_per_hour") == b.get("usd_per_hour"):
        parts.append(f"It costs ${b['usd_per_hour']:,.2f}/hour at {price_text(q)}: ${b['usd_per_mtok_total']:.4g} per "
                     f"million tokens (${b['usd_per_mtok_input']:.4g} per million input tokens, "
                     f"${b['usd_per_mtok_output']:.4g} per million output tokens)")
    else:
        parts.append(f"It is {price_text(q)}")
    if b.get("j_per_token") == b.get("j_per_token"):
        parts.append(f"its GPUs use {b['j_per_token']:.3g} J per output token (board energy, prefill included) and "
                     f"it serves {num(b['tokens_per_s_per_MW'])} output tokens/s per MW of all-in power")
    else:
        parts.append("J/token is not given: " + ", ".join(g for g in q.gpu_types if g not in presets.names("power"))
                     + " has no power preset (data/power.yaml)")
    return "; ".join(parts) + "."


def cost_frontiers(points) -> dict:
    """Per mode, the frontier of $ per million tokens (lowest) against tokens/s per user (highest): the points
    no other point beats on both, ordered by tokens/s per user."""
    import pandas as pd

    from ..models.serving.capacity import pareto_front

    out = {}
    cols = ["tokens_per_s_per_user", "usd_per_mtok_total", "label"]
    for mode in MODES:
        p = points[points["mode"] == mode] if len(points) and "usd_per_mtok_total" in points else points.iloc[0:0]
        p = p[p["usd_per_mtok_total"] > 0] if len(p) else p
        if not len(p):
            out[mode] = pd.DataFrame(columns=cols)
            continue
        idx = pareto_front(p["tokens_per_s_per_user"].to_numpy(), 1.0 / p["usd_per_mtok_total"].to_numpy())
        out[mode] = p.iloc[idx][cols].reset_index(drop=True)
    return out


def at_interactivity(front, tokens_per_s_per_user: float) -> float:
    """$ per million tokens on a cost frontier at ``tokens_per_s_per_user``, interpolated linearly between its
    points. Below the frontier's slowest point that point's price (it serves every user at least that fast, and
    nothing slower is cheaper); NaN above its fastest (no configuration is that fast)."""
    if not len(front):
        return float("nan")
    x = front["tokens_per_s_per_user"].to_numpy(float)
    y = front["usd_per_mtok_total"].to_numpy(float)
    if tokens_per_s_per_user > x[-1]:
        return float("nan")
    return float(np.interp(tokens_per_s_per_user, x, y))  # np.interp holds y[0] below x[0]


def cost_frontier_sentence(res: dict, tokens_per_s_per_user: float | None = None) -> str:
    """Each mode's $ per million tokens at an interactivity (default: the TPOT target's), read off its cost
    frontier."""
    q = res["question"]
    x = 1000.0 / q.tpot_ms if tokens_per_s_per_user is None else float(tokens_per_s_per_user)
    fr = cost_frontiers(res["points"])
    if all(not len(f) for f in fr.values()):
        return f"No cost frontier: {price_text(q)}." if q.priced() is None else \
            "No configuration meets the TTFT target, so there is no cost frontier."
    said, faster = [], []
    for mode, f in fr.items():
        if mode not in q.modes:
            continue
        v = at_interactivity(f, x)
        if v != v:
            said.append(f"{mode} no configuration that fast" if len(f) else f"{mode} none meeting the TTFT target")
            continue
        said.append(f"{mode} ${v:.4g}")
        if x < float(f["tokens_per_s_per_user"].iloc[0]):
            faster.append(f"{mode}'s cheapest configuration already gives "
                          f"{num(float(f['tokens_per_s_per_user'].iloc[0]))}")
    note = f"; {join(faster)} tokens/s per user" if faster else ""
    return (f"At {num(x)} tokens/s per user the cost frontiers give {join(said)} per million tokens "
            f"(interpolated between configurations{note}; {price_text(q)}).")


def price_label(q: sp.Question) -> str:
    """The prices a figure's axis names: 'reserved-3yr: h100-sxm $1.30/GPU-h (2025-08), ...' ('' unpriced)."""
    prices = q.priced()
    if prices is None:
        return ""
    return f"{q.tier}: " + ", ".join(f"{g} ${_usd(p.usd_per_gpu_hour)}/GPU-h ({p.date})" for g, p in prices.items())


def cost_record(res: dict, tokens_per_s_per_user: float | None = None) -> dict:
    """The recorded cost and energy of a plan: the best configuration's $/hour, $ per million input / output / all
    tokens, J per output token and tokens/s per MW (None where not priced or powered), and each mode's cost
    frontier at the interactivity (default: the TPOT target's)."""
    q, b = res["question"], res["best"]
    x = 1000.0 / q.tpot_ms if tokens_per_s_per_user is None else float(tokens_per_s_per_user)

    def val(k):
        v = None if b is None else b.get(k)
        return None if v is None or v != v else float(v)

    fr = cost_frontiers(res["points"])
    at = {m: at_interactivity(f, x) for m, f in fr.items()}
    return {k: val(k) for k in ("usd_per_hour", "usd_per_mtok_input", "usd_per_mtok_output", "usd_per_mtok_total",
                                "j_per_token", "tokens_per_s_per_MW")} | {
        "prefill_gpu": None if b is None else (b.get("prefill_gpu") or None),
        "decode_gpu": None if b is None else b.get("decode_gpu"),
        "frontier_usd_per_mtok": {m: (None if v != v else v) for m, v in at.items()}, "interactivity": x}


def energy_check() -> dict:
    """The J per output token check against ML.ENERGY (:mod:`llmexplore.sweeps.fidelity.energy`): the summary of
    the end-to-end energy and of the power model alone."""
    from ..sweeps.fidelity import energy as fe

    t = fe.energy_table()
    return {"energy": fe.energy_summary(t), "power": fe.energy_summary(t, "power_error_pct")}


def energy_check_sentence(check: dict) -> str:
    e, p = check["energy"]["all"], check["power"]["all"]
    return (f"Checked against ML.ENERGY's measured GPU energy per output token ({e['rows']} saturated vLLM 0.11.1 "
            f"servers on H100 and B200, never fitted): the model's J per output token is off by {num(e['mape_pct'])}% "
            f"on average (median {e['median_pct']:+.1f}%, {num(e['within_25_pct'])}% of rows within 25%); fed the "
            f"measured step times and throughput, the power model alone is off by a median {num(p['median_abs_pct'])}% "
            f"(it reads low on the MoE models, whose expert-parallel communication draws power the roofline does "
            f"not count). Prompt lengths are not published (1,000 tokens assumed).")


def mix_record(mix) -> dict:
    """{choice: $ per million tokens (None: none feasible)} of :func:`llmexplore.sweeps.plan.mix_table`."""
    return {r["choice"]: (None if r["usd_per_mtok_total"] != r["usd_per_mtok_total"] else float(r["usd_per_mtok_total"]))
            for r in mix.to_dict("records")}


def mix_sentence(mix, q: sp.Question) -> str:
    """Whether mixing GPU types is cheaper per million tokens than the best single type, by how much, and with
    which configuration."""
    m = mix.set_index("choice")
    rec = mix_record(mix)
    singles = {k: v for k, v in rec.items() if k != "a mix of types" and v is not None}
    mixed = rec.get("a mix of types")
    if not singles and mixed is None:
        return "No configuration meets the targets on these GPU types, alone or mixed."
    if mixed is None:
        return "No mix of GPU types meets the targets; " + ", ".join(f"{k}: ${v:.4g}" for k, v in singles.items()) + \
            " per million tokens."
    best_single = min(singles, key=singles.get) if singles else None
    head = (f"Mixing types, {m.loc['a mix of types', 'label']} costs ${mixed:.4g} per million tokens "
            f"({m.loc['a mix of types', 'gpus']:.0f} GPUs, ${m.loc['a mix of types', 'usd_per_hour']:,.2f}/hour)")
    if best_single is None:
        return head + "; no single type meets the targets."
    gap = 100.0 * (mixed / singles[best_single] - 1.0)
    word = f"{num(-gap)}% less than" if gap < 0 else f"{num(gap)}% more than"
    return (f"{head}: {word} the best single type, {best_single} (${singles[best_single]:.4g}, "
            f"{m.loc[best_single, 'label']}); prices {m.loc['a mix of types', 'price_dates'] or price_text(q)}.")


def ratio_sentence(res: dict) -> str:
    c, d = res["best_by_mode"]["colocated"], res["best_by_mode"]["disaggregated"]
    if c is None and d is None:
        return "Neither colocated nor disaggregated serving meets the targets, so there is no ratio between the modes."
    if c is None or d is None:
        which = "colocated" if c is None else "disaggregated"
        return f"No {which} configuration meets the targets, so there is no ratio between the modes."
    ratio = res["disagg_over_agg_ratio"]
    word = "more" if ratio >= 1 else "fewer"
    return (f"Disaggregated serving gives {num(ratio)}x the output tokens/s per GPU of colocated serving "
            f"({num(d['tokens_per_s_per_gpu'])} vs {num(c['tokens_per_s_per_gpu'])}): {num(abs(ratio - 1) * 100)}% "
            f"{word} per GPU.")


def frontier_sentence(res: dict) -> str:
    """Each mode's frontier at the TPOT target (the most tokens/s per GPU among its points at least that fast
    per user) and at its peak throughput."""
    q = res["question"]
    x_target = 1000.0 / q.tpot_ms
    at, peak = [], []
    for mode, f in res["frontiers"].items():
        if not len(f):
            continue
        x, y = f["tokens_per_s_per_user"].to_numpy(), f["tokens_per_s_per_gpu"].to_numpy()
        fast = y[x >= x_target * (1 - 1e-9)]
        at.append(f"{mode} {num(fast.max())}" if fast.size else f"{mode} no point")
        k = int(np.argmax(y))
        peak.append(f"{mode} {num(y[k])} at {num(x[k])} tokens/s per user")
    if not at:
        return "No configuration meets the TTFT target, so neither frontier has a point."
    return (f"At the TPOT target ({num(x_target)} tokens/s per user) the frontiers reach {join(at)} output "
            f"tokens/s per GPU; slower users let them peak at {join(peak)} (points meeting the TTFT target).")


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


def _planner_best(checks: list[dict]) -> dict | None:
    """The check of the planner's best configuration (``planner_rank`` 1; the first check without ranks)."""
    return next((c for c in checks if c.get("planner_rank") == 1), checks[0] if checks else None)


def verified_sentence(checks: list[dict], res: dict) -> str:
    """Which simulated configuration is the best that also meets the targets in the simulation (the checks
    ranked by :func:`llmexplore.sweeps.plan.rank_checks`, or in the planner's order), said plainly when the
    planner's best misses."""
    t = res["table"]
    ok = [c for c in checks if c.get("meets_targets_sim")]
    done = [c for c in checks if c.get("status") == "simulated"]
    if not done:
        return "No configuration checked could be simulated (the reasons are above), so the simulation confirms none."
    if not ok:
        return (f"None of the {len(done)} configurations simulated meets both targets in the simulation; "
                "loosen the targets or add GPUs.")
    c = min(ok, key=lambda x: x.get("planner_rank", 0))
    best = _planner_best(checks)
    if c["label"] == best["label"]:
        return f"The simulation confirms the best configuration, {c['label']}, within both targets."
    row = t[t["label"] == c["label"]].iloc[0]
    return (f"The planner's best configuration, {best['label']}, misses a target in the simulation; the best one "
            f"that meets both there is {c['label']} ({row['gpus']:.0f} GPUs, {num(row['tokens_per_s_per_gpu'])} "
            f"tokens/s per GPU, {num(row['rate_per_s'])} req/s): deploy that one.")


def launch_of(row: dict, q: sp.Question) -> dict:
    """Launch commands of one configuration for each engine ({engine: [{role, instances, gpus_per_instance,
    command, note}]})."""
    from .. import launch

    cfg = sp.config_of(row, q)
    return {eng: launch.launch_commands(cfg, eng) for eng in launch.ENGINES}


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
        best["config"] = sp.config_of(best, q).to_json()
        best["launch"] = launch_of(res["best"], q)
    checks = sp.simulate_top(res, simulate) if simulate else []
    for c in checks:
        c["sentence"] = simulation_sentence(c, q)
    verified = next((c["label"] for c in checks if c.get("meets_targets_sim")), None)  # checks: ranked
    verified_row = None
    if verified is not None:
        row = t[t["label"] == verified].iloc[0].to_dict()
        verified_row = {"label": verified, "config": sp.config_of(row, q).to_json(), "launch": launch_of(row, q)}
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
        "best_simulated": verified, "best_simulated_deployment": verified_row,
        "simulated_sentence": verified_sentence(checks, res) if checks else "",
        "question_text": question_text(q),
        "sentences": [best_sentence(res), cost_sentence(res), ratio_sentence(res), frontier_sentence(res),
                      cost_frontier_sentence(res)],
        "cost_frontiers": {k: v.to_dict("records") for k, v in cost_frontiers(res["points"]).items()},
        "prices": {g: {"usd_per_gpu_hour": p.usd_per_gpu_hour, "date": p.date, "source": p.source}
                   for g, p in (q.priced() or {}).items()},
        "inputs": {f: getattr(q, f) for f in ("model", "gpu", "gpus", "isl", "osl", "ttft_ms", "tpot_ms", "stat",
                                              "rate_per_s", "runtime", "weight_dtypes", "kv_dtypes", "modes",
                                              "other_gpus", "objective", "budget_usd_per_hour",
                                              "usd_per_gpu_hour", "long_share", "long_isl", "long_osl")}
        | {"link": q.link_name(), "price_tier": q.tier},
        "seconds": res["seconds"],
    }


# ---- notebooks/60_deployment_planner.ipynb: titles, the simulator, the rate sweep ------------------------------

__all__ += ["axis_sentence", "headline", "searched", "frontier_title", "launch_texts", "launch_sentence", "simulated_record", "simulated_sentence",
            "checks_record", "best_in_simulation", "checks_sentence", "rate_record", "rate_sentence"]

HEADLINE_FIELDS = ("label", "mode", "gpus", "n_prefill", "n_decode", "rate_per_s", "tokens_per_s_per_gpu",
                   "tokens_per_s_per_user", "ttft_ms", "tpot_ms", "max_num_seqs")


def headline(res: dict) -> dict:
    """The recorded headline of a plan: the best configuration's fields (:data:`HEADLINE_FIELDS`, None when
    nothing is feasible), the runner-up's label, the margin [%] and the disaggregated/colocated ratio."""
    b, r = res["best"], res["runner_up"]
    return {"best": None if b is None else {k: b.get(k) for k in HEADLINE_FIELDS},
            "runner_up": None if r is None else r["label"], "margin_pct": float(res["margin_pct"]),
            "disagg_over_agg_ratio": float(res["disagg_over_agg_ratio"]),
            "frontier_points": {m: int(len(f)) for m, f in res["frontiers"].items()},
            "configurations": int(len(res["table"])), "feasible": int(res["table"]["feasible"].sum())}


def searched(res: dict) -> dict:
    """What the search covered, read from its table: the weight and KV dtypes, the links of the
    disaggregated rows and the serving modes."""
    t = res["table"]

    def vals(col, rows=t):
        return sorted(str(v) for v in rows[col].dropna().unique() if str(v))

    return {"weight": vals("weight_dtype"), "kv": vals("kv_dtype"),
            "link": vals("link", t[t["mode"] == "disaggregated"]), "modes": vals("mode", t[t["mode"] != "any"])}


def frontier_title(res: dict) -> str:
    """Title of the frontier figure: the best configuration at the TPOT target and the ratio between modes."""
    q, b = res["question"], res["best"]
    if b is None:
        return f"No configuration meets {q.stat} TTFT ≤ {q.ttft_ms:,g} ms and TPOT ≤ {q.tpot_ms:,g} ms"
    ratio = res["disagg_over_agg_ratio"]
    tail = f" — disaggregated/colocated: {num(ratio)}x per GPU" if np.isfinite(ratio) else ""
    return (f"Best within the {q.stat} targets: {b['label']}, {num(b['tokens_per_s_per_gpu'])} tokens/s/GPU at "
            f"{num(b['tokens_per_s_per_user'])} tokens/s/user{tail}")


def launch_texts(res: dict) -> dict:
    """The best configuration's launch steps as text per engine ({"vllm": text, "sglang": text, "trtllm": text}; empty when
    nothing is feasible): :func:`llmexplore.launch.launch_text`."""
    from .. import launch

    if res["best"] is None:
        return {}
    cfg = sp.config_of(res["best"], res["question"])
    return {eng: launch.launch_text(cfg, eng) for eng in launch.ENGINES}


def axis_sentence(axes, res: dict) -> str:
    """What pipelines and speculation buy on this question (:func:`llmexplore.sweeps.plan.axis_table`)."""
    rows = axes.to_dict("records")
    base = rows[0]
    q = res["question"]
    if base["label"] == "none meets the targets":
        return "No configuration without a pipeline or speculation meets the targets, so there is nothing to compare."
    unit = "tokens/s per GPU" if q.rate_per_s is None else "fewer GPUs"
    parts = []
    for r in rows[1:]:
        if r["label"] == "none meets the targets":
            parts.append(f"with a {r['axis']} no configuration meets the targets")
        else:
            more = "more" if r["gain_pct"] >= 0 else "less"
            what = (f"{num(abs(r['gain_pct']))}% {more} {unit}" if q.rate_per_s is None
                    else f"{num(r['gain_pct'])}% {unit}" if r["gain_pct"] >= 0 else f"{num(-r['gain_pct'])}% more GPUs")
            parts.append(f"the best {r['axis']} ({r['label']}) gives {what}")
    if not parts:
        return (f"Without a pipeline or speculation the best is {base['label']}; no other axis was searched "
                "(pipeline_sizes 1, no speculative preset).")
    return (f"Without a pipeline or speculation the best is {base['label']} at {num(base['tokens_per_s_per_gpu'])} "
            f"tokens/s per GPU; " + join(parts) + ".")


def launch_sentence(res: dict) -> str:
    """How the best configuration launches: its instances per role and which engines can express it."""
    from .. import launch

    if res["best"] is None:
        return "No configuration meets the targets, so there is nothing to launch."
    cfg = sp.config_of(res["best"], res["question"])
    roles = join([f"{s.instances} {s.role} instance{'s' if s.instances != 1 else ''} of {s.ranks * s.pp} "
                  f"GPU{'s' if s.ranks * s.pp != 1 else ''}" + (f" ({s.pp} pipeline stages of {s.ranks})" if s.pp > 1
                                                                   else "") for s in cfg.sides])
    table = launch.engine_table()["engines"]
    ok, no = [], []
    for eng in launch.ENGINES:
        name = f"{table[eng]['display_name']} {table[eng]['release']}"
        missing = [e for e in launch.launch_commands(cfg, eng) if e["command"] is None]
        (no if missing else ok).append((name, missing[0]["note"] if missing else ""))
    text = f"The best configuration runs as {roles}"
    if ok:
        text += f", launched with {join([n for n, _ in ok])} as above"
    if no:
        text += "; " + "; ".join(f"{n} cannot express it ({why.rstrip('.')})" for n, why in no)
    if cfg.mode == "disaggregated" and ok:
        text += ", with a router in front of the two pools"
    return text + "."


def _stat_ms(sim: dict, metric: str, stat: str) -> float:
    return float(sim["summary"][f"{metric}_{stat}_s"]) * 1e3


def simulated_record(sim: dict, q: sp.Question) -> dict:
    """What the notebook records of :func:`llmexplore.sweeps.plan.simulate_best`: status, requests, rate, and
    the simulated TTFT and TPOT at the question's statistic [ms] (NaN when not simulated)."""
    ok = sim["status"] == "simulated"
    return {"status": sim["status"], "requests": sim["requests"], "rate_per_s": sim["rate_per_s"],
            "ttft_ms": _stat_ms(sim, "ttft", q.stat) if ok else float("nan"),
            "tpot_ms": _stat_ms(sim, "tpot", q.stat) if ok else float("nan"),
            "preemptions": int(sim["summary"].get("preemptions", 0)) if ok else 0}


def simulated_sentence(sim: dict, q: sp.Question, *, short: bool = False) -> str:
    """The simulator's verdict on the best configuration at its planned rate."""
    if sim["status"] != "simulated":
        return f"The best configuration is {sim['status']}."
    b = sim["row"]
    ttft, tpot = _stat_ms(sim, "ttft", q.stat), _stat_ms(sim, "tpot", q.stat)
    miss = [f"{name} by {num(100 * (v / t - 1))}%" for name, v, t in (("TTFT", ttft, q.ttft_ms), ("TPOT", tpot, q.tpot_ms))
            if v > t]
    verdict = ("meets both targets" if not miss else "misses " + join(miss))
    if short:
        return (f"Simulated {q.stat}: TTFT {num(ttft)} ms (target {q.ttft_ms:,g}), TPOT {num(tpot)} ms (target "
                f"{q.tpot_ms:,g}) — {b['label']} at {num(sim['rate_per_s'])} req/s {verdict}")
    return (f"Simulated over {sim['requests']:,} requests at its planned {num(sim['rate_per_s'])} req/s, {b['label']} "
            f"has {q.stat} TTFT {num(ttft)} ms (planner {num(b['ttft_ms'])}, target {q.ttft_ms:,g}) and {q.stat} "
            f"TPOT {num(tpot)} ms (planner {num(b['tpot_ms'])}, target {q.tpot_ms:,g}): it {verdict}"
            + (" (the planner sizes the pools to sit right at the targets, so a gap within the 10% the check "
               "allows can land on either side of them)" if miss else "") + ".")


def checks_record(checks: list[dict]) -> dict:
    """The ranked simulator checks as the notebook records them: ``{column: [values]}`` of
    :func:`llmexplore.sweeps.plan.check_table`."""
    return sp.check_table(checks).to_dict("list")


def best_in_simulation(checks: list[dict]) -> dict:
    """What the notebook records of the ranked checks: the best configuration that meets both targets in the
    simulation (None if none does), its rank by the planner, and whether the planner's best meets them."""
    meets = [c for c in checks if c.get("meets_targets_sim")]
    first = min(meets, key=lambda c: c.get("planner_rank", 0)) if meets else None
    best = _planner_best(checks)
    return {"label": None if first is None else first["label"],
            "planner_rank": None if first is None else first.get("planner_rank"),
            "planner_best_meets_targets": bool(best is not None and best.get("meets_targets_sim"))}


def checks_sentence(checks: list[dict], q: sp.Question) -> str:
    """The simulator's verdict on the best configurations: how many meet both targets in the simulation, which is
    the best that does (and whether the planner's best misses, with by how much), and where the simulation and
    the analytic estimate are more than 10% apart."""
    done = [c for c in checks if c["status"] == "simulated"]
    if not checks:
        return "No configuration meets the targets, so none was simulated."
    if not done:
        return f"None of the {len(checks)} best configurations could be simulated: {checks[0]['status']}."
    meets = [c for c in done if c.get("meets_targets_sim")]
    head = (f"Of the {len(done)} best configurations simulated ({done[0]['requests']:,} requests each), "
            f"{len(meets)} meet{'s' if len(meets) == 1 else ''} both {q.stat} targets in the simulation")
    best = _planner_best(checks)
    parts = []
    if best is not None and best["status"] == "simulated" and not best.get("meets_targets_sim"):
        over = [f"{m} {num(best[f'{k}_sim_ms'])} ms against the {t:,g} ms target, planner "
                f"{num(best[f'{k}_model_ms'])} ms"
                for m, k, t in (("TTFT", "ttft", q.ttft_ms), ("TPOT", "tpot", q.tpot_ms))
                if best[f"{k}_sim_ms"] > t]
        parts.append(f"the planner's best, {best['label']}, misses there ({join(over)})")
        if meets:
            first = min(meets, key=lambda c: c.get("planner_rank", 0))
            parts.append(f"the best that meets both is {first['label']}" +
                         (f" (the planner's number {first['planner_rank']})" if "planner_rank" in first else ""))
    elif best is not None and best.get("meets_targets_sim"):
        parts.append(f"the planner's best, {best['label']}, among them")
    bad = [c for c in done if c["disagrees"]]

    def gaps(c):
        out = [f"{m} {c[f'{m.lower()}_gap_pct']:+.0f}%" for m in ("TTFT", "TPOT")
               if abs(c[f"{m.lower()}_gap_pct"]) > 10]
        return f"{c['label']} ({join(out)})"

    n_agree = len(done) - len(bad)
    agree = (f"{n_agree} agree{'s' if n_agree == 1 else ''} with the planner's estimates within 10%"
             + ("; more than 10% apart: " + join([gaps(c) for c in bad]) if bad else ""))
    return head + (": " + "; ".join(parts) if parts else "") + ". " + agree[0].upper() + agree[1:] + "."


def rate_record(sweep) -> dict:
    """The rate sweep as recorded: the rates and, per mode, the GPUs needed (NaN where a mode cannot serve it)."""
    out = {"rate_per_s": sweep[sweep["mode"] == "best"]["rate_per_s"].tolist()}
    for mode in ("best", *MODES):
        out[f"{mode}_gpus"] = sweep[sweep["mode"] == mode]["gpus"].tolist()
    return out


def rate_sentence(sweep, q: sp.Question, *, short: bool = False) -> str:
    """How the best configuration grows with the request rate, and where each mode stops."""
    b = sweep[(sweep["mode"] == "best") & sweep["feasible"]]
    if not len(b):
        return (f"No configuration serves any of these rates within {q.gpus} GPU{'s' if q.gpus != 1 else ''} and the "
                "targets.")
    lo, hi = b.iloc[0], b.iloc[-1]
    text = (f"From {num(lo['rate_per_s'])} to {num(hi['rate_per_s'])} req/s the best configuration grows from "
            f"{lo['gpus']:.0f} to {hi['gpus']:.0f} GPUs and from {num(lo['tokens_per_s_per_gpu'])} to "
            f"{num(hi['tokens_per_s_per_gpu'])} output tokens/s per GPU")
    if short:
        return text
    c = sweep[sweep["mode"] == "colocated"].set_index("rate_per_s")
    d = sweep[sweep["mode"] == "disaggregated"].set_index("rate_per_s")
    both = c["feasible"] & d["feasible"]
    fewer = int((d.loc[both, "gpus"] < c.loc[both, "gpus"]).sum())
    parts = [f"disaggregated needs fewer GPUs than colocated at {fewer} of the {int(both.sum())} rates both can "
             "serve"] if both.any() else []
    for mode, t in (("colocated", c), ("disaggregated", d)):
        if not t["feasible"].all():
            served = t.index[t["feasible"]]
            parts.append(f"{mode} serving cannot serve any of them" if not len(served) else
                         f"{mode} serving stops above {num(served.max())} req/s within {q.gpus} "
                         f"GPU{'s' if q.gpus != 1 else ''}")
    return text + (": " + "; ".join(parts) if parts else "") + "."
