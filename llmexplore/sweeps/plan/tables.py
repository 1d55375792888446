"""The tables of notebooks/60_deployment_planner.ipynb: a rate sweep, the top configurations with their
launch flags, and the simulator checks (docs/models.md §8)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ... import _check
from ...errors import SpecError
from .check import SIM_REQUESTS, simulate_config
from .question import Question
from .search import config_of, plan


# ---- tables of notebooks/60_deployment_planner.ipynb ----------------------------------------------------------

__all__ = ["mix_table", "MIX_COLUMNS", "axis_table", "AXIS_COLUMNS", "highest_rate", "planned_rate", "rate_grid", "rate_sweep", "launch_arguments", "shared_flags", "top_table",
            "simulate_best", "check_table", "SWEEP_COLUMNS", "CHECK_COLUMNS", "CHECK_TOP", "TOP", "N_RATES"]

RATE_SHARE_MIN = 1 / 16  # the rate sweep starts at this share of the highest rate any configuration sustains
N_RATES = 8  # rates in the default sweep (each is one plan(): about 0.3 s warm)
TOP = 8  # configurations in the notebook's table
CHECK_TOP = 3  # configurations re-checked with the simulator
SWEEP_COLUMNS = ["rate_per_s", "mode", "label", "gpus", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_ms",
                 "tpot_ms", "feasible"]


def highest_rate(res: dict) -> float:
    """The highest request rate any feasible configuration of a :func:`plan` result sustains within the budget
    and the targets [req/s] (NaN when none is feasible)."""
    ok = res["table"][res["table"]["feasible"]]
    cap = ok["capacity_per_s"].to_numpy(float)
    cap = cap[np.isfinite(cap)]
    return float(cap.max()) if cap.size else float("nan")


def planned_rate(res: dict) -> float:
    """The request rate the best configuration of a :func:`plan` result serves [req/s] (NaN without one)."""
    return float(res["best"]["rate_per_s"]) if res["best"] is not None else float("nan")


def rate_grid(res: dict, n: int = N_RATES) -> np.ndarray:
    """``n`` log-spaced request rates from :data:`RATE_SHARE_MIN` of :func:`highest_rate` to just below it
    [req/s], plus the question's own rate if it has one (empty when nothing is feasible)."""
    n = _check.integer("n", n, lo=2, hi=256)
    top = highest_rate(res)
    if not np.isfinite(top) or top <= 0:
        return np.zeros(0)
    grid = np.geomspace(top * RATE_SHARE_MIN, top * (1 - 1e-6), n)
    q = res["question"]
    if q.rate_per_s is not None and q.rate_per_s < top:
        grid = np.unique(np.r_[grid, q.rate_per_s])
    return grid


def rate_sweep(q: Question, rates) -> pd.DataFrame:
    """The best configuration as the request rate grows: for each rate, :func:`plan` of ``q`` at that rate (the
    fewest GPUs that serve it within the targets) and the best of each mode.

    Rows: one per (rate, mode) with mode "best", "colocated" or "disaggregated": label, gpus,
    tokens_per_s_per_gpu (the rate's output tokens over the GPUs), tokens_per_s_per_user, ttft_ms, tpot_ms and
    feasible (False, with NaN numbers, when no configuration of that mode serves the rate within the budget)."""
    rates = np.asarray(rates, float).ravel()
    bad = rates[~(np.isfinite(rates) & (rates > 0))]
    if bad.size:
        raise SpecError(f"rates must be finite and > 0 [req/s], got {bad[0]!r}")
    rows = []
    for r in rates:
        res = plan(replace(q, rate_per_s=float(r)))
        for mode, row in [("best", res["best"]), *res["best_by_mode"].items()]:
            if row is None:
                rows.append(dict(rate_per_s=float(r), mode=mode, label="", feasible=False))
            else:
                rows.append({**{c: row.get(c) for c in SWEEP_COLUMNS}, "rate_per_s": float(r), "mode": mode,
                             "feasible": True})
    df = pd.DataFrame(rows, columns=SWEEP_COLUMNS)
    for c in SWEEP_COLUMNS:
        if c not in ("mode", "label", "feasible"):
            df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    df["feasible"] = df["feasible"].astype(bool)
    return df


def _flag_groups(command: str | None) -> list[str]:
    """The flags of an engine command with their values ("--tp-size 4"), after the executable, the subcommand
    and the checkpoint (``--model-path X`` included)."""
    import shlex

    if command is None:
        return []
    groups: list[list[str]] = []
    for a in shlex.split(command):
        if a.startswith("--"):
            groups.append([a])
        elif groups:
            groups[-1].append(a)
    return [" ".join(shlex.quote(a) for a in g) for g in groups if g[0] != "--model-path"]


def launch_arguments(row: dict, q: Question, engine: str, *, leave_out=(), reasons: list | None = None) -> str:
    """A configuration's launch flags for ``engine``, role by role ("prefill x9: --tensor-parallel-size 1 ...;
    decode x5: ..."), without the flags in ``leave_out``; the engine's reason when it cannot express a role
    (with ``reasons`` given, the reason is appended there instead and the cell says only "not expressible")."""
    from ... import launch

    parts = []
    for e in launch.launch_commands(config_of(row, q), engine):
        head = f"{e['role']} x{e['instances']}"
        if e["command"]:
            flags = [f for f in _flag_groups(e["command"]) if f not in set(leave_out)] + _file_fields(e)
            parts.append(f"{head}: {' '.join(flags) or '(only the shared flags)'}")
        elif reasons is not None:
            reasons.append(e["note"])
            parts.append(f"{head}: not expressible")
        else:
            parts.append(f"{head}: not expressible ({e['note']})")
    return "; ".join(parts)


def _file_fields(entry: dict) -> list[str]:
    """The fields of the files a launch command reads (TensorRT-LLM's extra-options YAML) as ``[name: a.b=v,
    ...]``, so that rows which differ only there (KV dtype, attention data parallelism) still read apart."""
    import yaml

    out = []
    for name, text in (entry.get("files") or {}).items():
        doc = yaml.safe_load(text) or {}
        fields = [f"{k}.{kk}={vv}" if isinstance(v, dict) else f"{k}={v}" for k, v in doc.items()
                  for kk, vv in (v.items() if isinstance(v, dict) else [(None, None)])]
        out.append(f"[{name}: {', '.join(fields)}]")
    return out


def shared_flags(res: dict, k: int = TOP, engine: str = "vllm") -> list[str]:
    """The flags (with values) that every role of every one of the ``k`` best configurations takes in
    ``engine``: :func:`top_table` lists them once instead of in every row (none with fewer than two rows)."""
    from ... import launch

    q = res["question"]
    rows = res["table"][res["table"]["feasible"]].head(int(k)).to_dict("records")
    if len(rows) < 2:
        return []
    sets = [set(_flag_groups(e["command"])) for r in rows for e in launch.launch_commands(config_of(r, q), engine)]
    if not sets or any(not s for s in sets):
        return []
    common = set.intersection(*sets)
    return [f for f in _flag_groups(next(e["command"] for e in launch.launch_commands(config_of(rows[0], q), engine)))
            if f in common]


def top_table(res: dict, k: int = TOP) -> pd.DataFrame:
    """The ``k`` best feasible configurations of a :func:`plan` result with their launch flags for vLLM, SGLang
    and TensorRT-LLM (columns of :data:`TABLE_COLUMNS` plus ``vllm``, ``sglang`` and ``trtllm``; an engine that
    can express none of the rows has no column). Why an engine cannot express a role is in
    ``attrs["not_expressible"]`` ({engine: [reasons]}), each reason once. Flags every row takes
    (:func:`shared_flags`) are left out of the rows and listed in ``attrs["shared_flags"]`` ({engine: text})."""
    k = _check.integer("k", k, lo=1, hi=10_000)
    q = res["question"]
    ok = res["table"][res["table"]["feasible"]].head(k).reset_index(drop=True)
    from ... import launch

    shared = {eng: shared_flags(res, k, eng) for eng in launch.ENGINES}
    inexpressible = {}
    for eng in launch.ENGINES:
        why: list = []
        cells = [launch_arguments(r, q, eng, leave_out=shared[eng], reasons=why) for r in ok.to_dict("records")]
        if why:  # each reason once, in attrs, not repeated in every cell
            inexpressible[eng] = list(dict.fromkeys(why))
        if not all(c and all(p.endswith("not expressible") for p in c.split("; ")) for c in cells):
            ok[eng] = cells
    ok.attrs["shared_flags"] = {eng: " ".join(v) for eng, v in shared.items()}
    ok.attrs["not_expressible"] = inexpressible
    return ok


def simulate_best(res: dict, *, n_requests: int = SIM_REQUESTS, seed: int = 0) -> dict:
    """:func:`simulate_config` of the best configuration of a :func:`plan` result at its planned rate, plus
    ``row`` (the configuration's table row), ``rate_per_s``, ``requests`` and ``status`` ("simulated", or why
    not: nothing is feasible, or a layout the simulator does not run; ``cdf`` is then None)."""
    q, b = res["question"], res["best"]
    out = {"row": b, "requests": int(n_requests), "rate_per_s": np.nan, "cdf": None, "summary": None}
    if b is None:
        return {**out, "status": "not simulated: no configuration meets the targets"}
    out["rate_per_s"] = float(b["rate_per_s"])
    try:
        sim = simulate_config(config_of(b, q), isl=q.isl, osl=q.osl, rate_per_s=float(b["rate_per_s"]),
                              n_requests=n_requests, runtime=q.runtime, seed=seed)
    except SpecError as exc:
        return {**out, "status": f"not simulated: {exc}"}
    return {**out, **sim, "status": "simulated"}


CHECK_COLUMNS = ["sim_rank", "planner_rank", "label", "status", "ttft_model_ms", "ttft_sim_ms", "ttft_gap_pct",
                 "tpot_model_ms", "tpot_sim_ms", "tpot_gap_pct", "disagrees", "meets_targets_sim"]


def check_table(checks: list[dict]) -> pd.DataFrame:
    """:func:`simulate_top`'s checks as a table (:data:`CHECK_COLUMNS`; NaN where a row was not simulated)."""
    return pd.DataFrame(list(checks)).reindex(columns=CHECK_COLUMNS)


AXIS_COLUMNS = ["axis", "label", "gpus", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_ms", "tpot_ms",
                "gain_pct"]


def axis_table(res: dict) -> pd.DataFrame:
    """What the issue-21 axes buy on this question: the best feasible configuration without a pipeline or
    speculation, with each pipeline size searched (the pipeline on the decode or colocated side) and with
    speculative decoding, each with ``gain_pct`` [%] over the first in tokens/s per GPU (no rate given) or in
    GPUs saved (a rate given). Rows that no configuration reaches say so (``label`` "none meets the targets")."""
    t, q = res["table"], res["question"]
    ok = t[t["feasible"]]
    pp = ok["decode_pp"].fillna(1).astype(int)
    spec = ok["speculative"].fillna("").astype(str)
    groups = [("no pipeline, no speculation", ok[(pp == 1) & (spec == "")])]
    groups += [(f"pipeline of {p} stages", ok[pp == p]) for p in q.pipeline_sizes if p > 1]
    if q.speculative is not None:
        groups.append((f"speculative decoding {q.speculative}", ok[spec != ""]))
    rows, base = [], None
    for axis, g in groups:
        if not len(g):
            rows.append({"axis": axis, "label": "none meets the targets"})
            continue
        b = g.iloc[0]  # the table is ordered best first
        if base is None:
            base = b
        gain = (100.0 * (b["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"] - 1.0) if q.rate_per_s is None
                else 100.0 * (base["gpus"] / b["gpus"] - 1.0))
        rows.append({"axis": axis, **{c: b[c] for c in AXIS_COLUMNS[1:-1]}, "gain_pct": gain})
    return pd.DataFrame(rows).reindex(columns=AXIS_COLUMNS)


#: the columns of :func:`mix_table`
MIX_COLUMNS = ["choice", "label", "gpus", "rate_per_s", "tokens_per_s_per_gpu", "usd_per_hour", "usd_per_mtok_total",
               "j_per_token", "price_dates"]


def mix_table(q: Question, other_gpu: str) -> pd.DataFrame:
    """What a second GPU type buys: the question asked for the lowest $ per million tokens with ``other_gpu`` as
    well as its own types, and its best configuration on each type alone (colocated or both pools on it) and
    mixing them (a disaggregated pair across the types or pools routed by length on two types). Columns
    :data:`MIX_COLUMNS`; a choice with no feasible configuration is a row with its reason in ``label``."""
    types = tuple(dict.fromkeys((*q.gpu_types, other_gpu)))
    res = plan(replace(q, other_gpus=types[1:], objective="usd_per_mtok"))
    t = res["table"][res["table"]["feasible"]]
    used = t.apply(lambda r: frozenset(g for g in (r["prefill_gpu"], r["decode_gpu"], r["long_gpu"]) if g), axis=1)
    rows = []
    for g in types:
        rows.append((f"{g} alone", t[used == frozenset({g})]))
    rows.append(("a mix of types", t[used.map(len) > 1]))
    out = []
    for choice, sub in rows:
        if len(sub):
            out.append({"choice": choice, **{c: sub.iloc[0][c] for c in MIX_COLUMNS[1:]}})
        else:
            out.append({"choice": choice, "label": "no configuration meets the targets"})
    return pd.DataFrame(out).reindex(columns=MIX_COLUMNS)
