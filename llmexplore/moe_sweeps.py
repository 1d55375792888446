"""Sweeps for MoE expert parallelism: tidy tables built from :mod:`llmexplore.models.moe`.

``layers`` is how many independent hot-expert placements each step averages over: 8 keep step times within
1% of all 58 DeepSeek-V3 MoE layers and make sweeps several times faster (see ``MoEDeployment``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import SpecError
from .models import moe

__all__ = ["LAYERS", "layout_options", "config", "scenario_table", "step_vs_skew", "step_vs_batch", "rank_loads",
           "max_load_check", "redundancy_gain_pct", "comm_at_batch", "max_relative_load"]

LAYERS = 8


def layout_options(gpus: int, model: str = "deepseek-v3") -> list[tuple[str, int, int]]:
    """(label, tp, ep) for every split of ``gpus`` whose tp divides the expert width: pure TP first."""
    from . import presets

    m = presets.model(model)
    out = []
    for tp in sorted((d for d in range(1, gpus + 1) if gpus % d == 0), reverse=True):
        ep = gpus // tp
        if m.moe_intermediate % tp or m.routed_experts % ep:
            continue
        label = f"TP{tp}" if ep == 1 else (f"DPA+EP{ep}" if tp == 1 else f"TP{tp}xEP{ep}")
        out.append((label, tp, ep))
    return out


def config(model="deepseek-v3", gpu="h200", gpus: int = 16, *, tp: int, ep: int, redundant: int = 0,
           balance: str | None = None, weight_dtype="fp8", layers: int | None = LAYERS, **kw) -> moe.MoEDeployment:
    """A validated :class:`~llmexplore.models.moe.MoEDeployment` (a thin wrapper with the sweep defaults)."""
    return moe.MoEDeployment.build(model, gpu, gpus, tp=tp, ep=ep, redundant=redundant, balance=balance,
                                   weight_dtype=weight_dtype, layers=layers, **kw)


def scenario_table(gpu: str = "h200", *, batch=(64, 256, 1024, 4096), context: int = 2048, skew: float = 2.6,
                   redundant=(16, 32), layers: int | None = LAYERS) -> pd.DataFrame:
    """Issue #3's scenario: DeepSeek-V3 FP8 on 2 x 8 GPUs, TP16 vs TP2xEP8 vs DPA+EP16, static / EPLB /
    EPLB with redundant slots, at a hot-expert skew; one row per configuration and batch."""
    return pd.DataFrame(moe.scenario_dsv3_16gpu(gpu, batch=list(batch), context=context, skew=skew,
                                                redundant=tuple(redundant), layers=layers))


def _balances(ep: int, redundant: int) -> list[tuple[str, str | None, int]]:
    if ep == 1:
        return [("no expert parallelism", None, 0)]
    rows = [("static placement", "none", 0), ("EPLB, no redundancy", "eplb", 0)]
    if redundant:
        rows.append((f"EPLB + {redundant} redundant", "eplb", redundant))
    return rows


def step_vs_skew(model="deepseek-v3", gpu="h200", gpus: int = 16, *, tp: int, ep: int, redundant: int = 32,
                 batch: int = 256, context: int = 2048, skews=np.linspace(1.0, 4.0, 25),
                 layers: int | None = LAYERS, weight_dtype="fp8") -> pd.DataFrame:
    """Decode step and MoE-layer time vs hot-expert skew for static, EPLB and EPLB + redundant placements."""
    skews = np.asarray(skews, dtype=float)
    frames = []
    for label, bal, red in _balances(ep, redundant):
        md = config(model, gpu, gpus, tp=tp, ep=ep, redundant=red, balance=bal, layers=layers,
                    weight_dtype=weight_dtype)
        r = moe.step_time(md, batch, context, skew=skews)
        fits = bool(np.all(moe.memory_per_gpu(md, batch, context)["feasible"]))
        frames.append(pd.DataFrame({
            "skew": skews, "placement": label, "layout": md.label(), "step_ms": np.broadcast_to(r["step_s"], skews.shape) * 1e3,
            "moe_layer_us": np.broadcast_to(r["moe_layer_s"], skews.shape) * 1e6,
            "routed_layer_us": np.broadcast_to(r["routed_layer_s"], skews.shape) * 1e6,
            "time_straggler": np.broadcast_to(r["time_straggler"], skews.shape),
            "load_straggler": np.broadcast_to(r["load_straggler"], skews.shape), "feasible": fits}))
    return pd.concat(frames, ignore_index=True)


def step_vs_batch(model="deepseek-v3", gpu="h200", gpus: int = 16, *, batches=(16, 64, 256, 1024, 4096),
                  context: int = 2048, skew: float = 2.6, layers: int | None = LAYERS,
                  weight_dtype="fp8") -> pd.DataFrame:
    """Per MoE layer: routed GEMMs, dispatch and combine time vs batch, for every tp x ep split (static)."""
    b = np.asarray(batches, dtype=float)
    frames = []
    for label, tp, ep in layout_options(gpus, model):
        md = config(model, gpu, gpus, tp=tp, ep=ep, layers=layers, weight_dtype=weight_dtype)
        r = moe.step_time(md, b, context, skew=skew)
        mem = moe.memory_per_gpu(md, b, context)
        frames.append(pd.DataFrame({
            "batch": b, "layout": label, "tp": tp, "ep": ep,
            "step_ms": np.broadcast_to(r["step_s"], b.shape) * 1e3,
            "routed_layer_us": np.broadcast_to(r["routed_layer_s"], b.shape) * 1e6,
            "dispatch_layer_us": np.broadcast_to(r["dispatch_layer_s"], b.shape) * 1e6,
            "combine_layer_us": np.broadcast_to(r["combine_layer_s"], b.shape) * 1e6,
            "moe_layer_us": np.broadcast_to(r["moe_layer_s"], b.shape) * 1e6,
            "feasible": np.broadcast_to(mem["feasible"], b.shape)}))
    return pd.concat(frames, ignore_index=True)


def rank_loads(md: moe.MoEDeployment, *, skew: float = 2.6) -> pd.DataFrame:
    """Expected share of routed tokens on each EP rank (mean over the placements' layers), before (static)
    and after this deployment's placement; 1/ep is perfect balance."""
    if md.ep == 1:
        raise SpecError("rank_loads needs expert parallelism (ep > 1)")
    sh = moe.expected_rank_shares(md, skew=skew)
    before = np.asarray(sh["before"]).reshape(-1, md.ep)
    after = np.asarray(sh["after"]).reshape(-1, md.ep)
    # the busiest rank differs by layer: report each layer's ranks sorted from busiest to idlest
    b = -np.sort(-before, axis=1).mean(axis=0)
    a = -np.sort(-after, axis=1).mean(axis=0)
    rank = np.arange(1, md.ep + 1)
    return pd.concat([
        pd.DataFrame({"rank_by_load": rank, "placement": "static", "share": b, "relative_load": b * md.ep}),
        pd.DataFrame({"rank_by_load": rank, "placement": md.label(), "share": a, "relative_load": a * md.ep}),
    ], ignore_index=True)


def max_load_check(md: moe.MoEDeployment, *, skew: float = 2.6, tokens=(64, 256, 1024), trials: int = 200,
                   seed: int = 0) -> pd.DataFrame:
    """Expected maximum routed pairs per rank: the analytic approximation vs Monte Carlo of top-k routing."""
    lp = moe.layer_probs(moe.skew_probs(skew, md.model.routed_experts, md.model.experts_per_token), 1, seed)
    k = md.model.experts_per_token
    p2l = moe.eplb_placement(lp, ranks=md.ep, redundant=md.redundant) if md.balance == "eplb" else None
    rows = []
    for n in tokens:
        a = moe.rank_load(lp, k, int(n), ranks=md.ep, phy2log=p2l)
        mc = moe.rank_load_mc(lp, k, int(n), ranks=md.ep, phy2log=p2l, trials=trials, seed=seed)
        am, mm = float(np.mean(a["max_pairs"])), float(np.mean(mc["max_pairs"]))
        rows.append({"tokens": int(n), "pairs_per_rank_mean": float(np.mean(a["mean_pairs"])),
                     "max_pairs_analytic": am, "max_pairs_monte_carlo": mm,
                     "monte_carlo_se": float(np.mean(mc["max_pairs_se"])), "error_pct": 100 * (am / mm - 1)})
    return pd.DataFrame(rows)


def redundancy_gain_pct(by_skew: pd.DataFrame, skew: float) -> float:
    """Step-time saving [%] of the redundant-expert placement over the static one at the skew point nearest
    ``skew`` in a :func:`step_vs_skew` table (negative: redundancy is slower)."""
    at = by_skew.loc[(by_skew["skew"] - skew).abs() == (by_skew["skew"] - skew).abs().min()]
    red = at[at["placement"].str.contains("redundant")]["step_ms"]
    static = at[at["placement"] == "static placement"]["step_ms"]
    if red.empty or static.empty:
        raise SpecError("redundancy_gain_pct needs a static and a redundant placement in the table")
    return float(100.0 * (1.0 - red.iloc[0] / static.iloc[0]))


def comm_at_batch(by_batch: pd.DataFrame, batch: int) -> dict[str, float]:
    """Dispatch + combine time per MoE layer [us] of each layout at one batch of a :func:`step_vs_batch`
    table."""
    at = by_batch[by_batch["batch"] == batch]
    return dict(zip(at["layout"], (at["dispatch_layer_us"] + at["combine_layer_us"]).astype(float)))


def max_relative_load(loads: pd.DataFrame) -> dict[str, float]:
    """Busiest rank's load / mean load per placement of a :func:`rank_loads` table."""
    return loads.groupby("placement", sort=False)["relative_load"].max().astype(float).to_dict()
