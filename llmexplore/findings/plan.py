"""Findings of notebooks/60_deployment_planner.ipynb and ``llmexplore plan``: the question, the best
configuration and its runner-up, the colocated/disaggregated ratio, the frontiers and the simulator check."""

from __future__ import annotations

import numpy as np

from .. import presets
from ..deployment import MODES
from ..sweeps import plan as sp
from . import join, num

__all__ = ["question_text", "best_sentence", "ratio_sentence", "frontier_sentence", "simulation_sentence",
           "summary", "launch_of", "verified_sentence"]


def question_text(q: sp.Question) -> str:
    m, hw = presets.model(q.model), presets.hardware(q.gpu)
    rate = f"{q.rate_per_s:g} req/s" if q.rate_per_s is not None else "the highest rate the budget sustains"
    return (f"{m.label} on up to {q.gpus} {hw.label}: prompts of {q.isl:,} and outputs of {q.osl:,} tokens, "
            f"{q.stat} TTFT ≤ {q.ttft_ms:,g} ms and {q.stat} TPOT ≤ {q.tpot_ms:,g} ms at {rate}.")


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


def _what(row: dict, q: sp.Question | None = None) -> str:
    spec = _spec_words(row, q)
    if row["mode"] == "colocated":
        return (f"colocated, {row['n_decode']:.0f} instances of {row['decode_layout']}{row['decode_ranks']:.0f}"
                f"{_pp(row, 'decode')} ({row['weight_dtype']} weights, {row['kv_dtype']} KV, chunk "
                f"{row['chunk_tokens']:.0f} tokens{spec})")
    return (f"disaggregated, {row['n_prefill']:.0f} prefill instances of TP{row['prefill_ranks']:.0f}"
            f"{_pp(row, 'prefill')} and {row['n_decode']:.0f} decode instances of "
            f"{row['decode_layout']}{row['decode_ranks']:.0f}{_pp(row, 'decode')} ({row['weight_dtype']} weights, "
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
        "sentences": [best_sentence(res), ratio_sentence(res), frontier_sentence(res)],
        "inputs": {f: getattr(q, f) for f in ("model", "gpu", "gpus", "isl", "osl", "ttft_ms", "tpot_ms", "stat",
                                              "rate_per_s", "runtime", "weight_dtypes", "kv_dtypes", "modes")}
        | {"link": q.link_name()},
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
