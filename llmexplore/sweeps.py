"""Sweeps: evaluate models over grids and package the results as tidy DataFrames.

One row per (grid point, layout); input columns first, then outputs with units in their names. Infeasible
points keep their numbers (so plots can show *how far* off they are) but carry ``feasible = False`` and a
human-readable ``reason``; "best" choices only consider feasible rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .models import attention as att
from .models import crossover, transitions
from .models.attention import LAYOUTS, Deployment

__all__ = ["layout_table", "best_layout", "layout_curves", "best_layout_grid", "phase_diagram",
           "memory_table", "transition_table", "policy_summary", "log_grid", "boundaries_at",
           "deployment_table", "summary_frame", "POINT_COLUMNS"]

#: columns of :func:`layout_table`, in order
POINT_COLUMNS = ["layout", "feasible", "weights_GB", "kv_GB", "activations_GB", "reserve_GB", "total_GB",
                 "usable_GB", "step_ms", "attention_ms", "core_ms", "ffn_ms", "head_ms", "comm_ms",
                 "overhead_ms", "tokens_per_s", "reason"]


def _reason(total_B, usable_B, feasible) -> np.ndarray:
    total_B, usable_B = np.broadcast_arrays(np.asarray(total_B, float), np.asarray(usable_B, float))
    out = np.full(total_B.shape, "", dtype=object)
    bad = ~np.asarray(feasible, bool)
    if bad.any():
        out[bad] = [f"needs {t / 1e9:.1f} GB per rank > {u / 1e9:.1f} GB usable"
                    for t, u in zip(total_B[bad], usable_B[bad])]
    return out


def layout_table(dep: Deployment, batch: int, context: float, layouts=LAYOUTS) -> pd.DataFrame:
    """Memory per rank (GB, by part) and decode step time (ms, by part) of each layout at one point."""
    rows = []
    for lay in layouts:
        r = att.evaluate(dep, batch, context, lay)
        f = {k: float(np.asarray(v)) for k, v in r.items() if k != "feasible"}
        feasible = bool(np.asarray(r["feasible"]))
        rows.append({
            "layout": lay, "feasible": feasible,
            "weights_GB": f["weights_B"] / 1e9, "kv_GB": f["kv_B"] / 1e9,
            "activations_GB": f["activations_B"] / 1e9, "reserve_GB": f["reserve_B"] / 1e9,
            "total_GB": f["total_B"] / 1e9, "usable_GB": f["usable_B"] / 1e9,
            "step_ms": f["step_s"] * 1e3, "attention_ms": f["attention_s"] * 1e3, "core_ms": f["core_s"] * 1e3,
            "ffn_ms": f["ffn_s"] * 1e3, "head_ms": f["head_s"] * 1e3, "comm_ms": f["comm_s"] * 1e3,
            "overhead_ms": f["overhead_s"] * 1e3, "tokens_per_s": f["tokens_per_s"],
            "reason": _reason(f["total_B"], f["usable_B"], feasible).item(),
        })
    return pd.DataFrame(rows, columns=POINT_COLUMNS)


def best_layout(table: pd.DataFrame) -> str | None:
    """Fastest feasible layout of a :func:`layout_table` (None if nothing fits)."""
    ok = table[table["feasible"]]
    if ok.empty:
        return None
    return str(ok.loc[ok["step_ms"].idxmin(), "layout"])


def layout_curves(dep: Deployment, batch, context, layouts=LAYOUTS) -> pd.DataFrame:
    """Tidy table over a (batch x context) grid: one row per point and layout.

    ``batch`` and ``context`` are 1-D; every combination is evaluated in one broadcast call per layout.
    """
    b = np.asarray(batch, float).ravel()
    s = np.asarray(context, float).ravel()
    frames = []
    for lay in layouts:
        r = att.evaluate(dep, b[:, None], s[None, :], lay)
        shape = (b.size, s.size)
        frames.append(pd.DataFrame({
            "batch": np.broadcast_to(b[:, None], shape).ravel(),
            "context": np.broadcast_to(s[None, :], shape).ravel(),
            "layout": lay,
            "feasible": np.asarray(r["feasible"]).ravel(),
            "weights_GB": np.asarray(r["weights_B"]).ravel() / 1e9,
            "kv_GB": np.asarray(r["kv_B"]).ravel() / 1e9,
            "total_GB": np.asarray(r["total_B"]).ravel() / 1e9,
            "usable_GB": np.asarray(r["usable_B"]).ravel() / 1e9,
            "step_ms": np.asarray(r["step_s"]).ravel() * 1e3,
            "attention_ms": np.asarray(r["attention_s"]).ravel() * 1e3,
            "comm_ms": np.asarray(r["comm_s"]).ravel() * 1e3,
            "tokens_per_s": np.asarray(r["tokens_per_s"]).ravel(),
            "reason": _reason(np.asarray(r["total_B"]).ravel(), np.asarray(r["usable_B"]).ravel(),
                              np.asarray(r["feasible"]).ravel()),
        }))
    return pd.concat(frames, ignore_index=True)


def best_layout_grid(dep: Deployment, batch, context, layouts=LAYOUTS) -> dict[str, np.ndarray]:
    """Best feasible layout on a broadcast grid, without building a DataFrame (fast path for big grids).

    Returns ``best`` (index into ``layouts``, -1 where nothing fits), ``best_step_s`` (inf where nothing
    fits) and ``step_s`` stacked [layout, ...grid].
    """
    steps = []
    for lay in layouts:
        r = att.evaluate(dep, batch, context, lay)
        steps.append(np.where(r["feasible"], r["step_s"], np.inf))
    stacked = np.stack(np.broadcast_arrays(*steps))
    best = np.argmin(stacked, axis=0)
    best_t = np.take_along_axis(stacked, best[None], axis=0)[0]
    return {"best": np.where(np.isfinite(best_t), best, -1), "best_step_s": best_t, "step_s": stacked}


def phase_diagram(dep: Deployment, batch, context, layouts=LAYOUTS) -> dict:
    """Best layout over a batch x context grid plus the exact boundaries from :mod:`.models.crossover`.

    Returns ``{"batch", "context", "best" (labels, "none" where nothing fits) [len(batch), len(context)],
    "boundaries" (DataFrame: batch, context, before, after, kind)}``.
    """
    b = np.asarray(batch, float).ravel()
    s = np.asarray(context, float).ravel()
    g = best_layout_grid(dep, b[:, None], s[None, :], layouts)
    labels = np.array([*layouts, "none"], dtype=object)
    best = labels[np.where(g["best"] < 0, len(layouts), g["best"])]
    bounds, _ = crossover.context_boundaries(dep, b, s_lo=float(s.min()), s_hi=float(s.max()), layouts=layouts)
    bdf = pd.DataFrame([vars(x) for x in bounds], columns=["batch", "context", "before", "after", "kind"])
    return {"batch": b, "context": s, "best": best, "best_step_ms": g["best_step_s"] * 1e3, "boundaries": bdf}


def memory_table(dep: Deployment, batch: int, context: float, layouts=LAYOUTS) -> pd.DataFrame:
    """Memory per rank by part (long form: layout, part, GB) plus the usable line, for stacked bars."""
    rows = []
    for lay in layouts:
        parts = dep.weight_bytes(lay)
        mem = att.memory_per_rank(dep, batch, context, lay)
        items = {"attention weights": parts["attention"], "FFN/MoE weights": parts["ffn"],
                 "embeddings + norms": parts["embedding"] + parts["norms"],
                 "KV cache": float(mem["kv_B"]), "activations": float(mem["activations_B"]),
                 "runtime reserve": float(mem["reserve_B"])}
        for part, v in items.items():
            rows.append({"layout": lay, "part": part, "GB": v / 1e9, "usable_GB": dep.usable_B / 1e9,
                         "feasible": bool(mem["feasible"])})
    return pd.DataFrame(rows)


def transition_table(dep: Deployment, batch: int, context: float, *, weights_resident: bool = False,
                     ) -> pd.DataFrame:
    """All 16 switches X -> Y: KV and weight primitives, bytes per rank, serial and overlapped handoff."""
    rows = []
    for src in LAYOUTS:
        for dst in LAYOUTS:
            tr = transitions.transition(dep, src, dst, batch, context, weights_resident=weights_resident)
            ho = transitions.handoff_time(dep, src, dst, batch, context, weights_resident=weights_resident)
            kv, w = tr["kv"], tr["weights"]
            rows.append({"src": src, "dst": dst, "kv_primitive": kv.primitive, "kv_recv_GB": kv.recv_B / 1e9,
                         "kv_send_GB": kv.send_B / 1e9, "kv_freed_GB": kv.freed_B / 1e9,
                         "weights_primitive": w.primitive, "weights_recv_GB": w.recv_B / 1e9,
                         "serial_ms": ho["serial_s"] * 1e3, "exposed_ms": ho["exposed_s"] * 1e3})
    return pd.DataFrame(rows)


def policy_summary(results: dict[str, dict]) -> pd.DataFrame:
    """One row per policy of :func:`llmexplore.models.scheduler.compare_policies`, fastest first."""
    rows = [{"policy": p, "total_s": r["total_s"], "compute_s": r["total_s"] - r["handoff_total_s"],
             "handoff_s": r["handoff_total_s"], "switches": r["switches"],
             "capped_segments": r["capped_segments"], "infeasible_segments": r["infeasible_segments"]}
            for p, r in results.items()]
    return pd.DataFrame(rows).sort_values("total_s", kind="stable", ignore_index=True)


def log_grid(lo: float, hi: float, n: int, *, integer: bool = False) -> np.ndarray:
    """``n`` log-spaced values in [lo, hi] (unique integers if ``integer``)."""
    g = np.geomspace(lo, hi, int(n))
    return np.unique(np.round(g)) if integer else g


def boundaries_at(dep: Deployment, batch: int, s_lo: float, s_hi: float, layouts=LAYOUTS) -> pd.DataFrame:
    """Exact context lengths where the best layout changes at one batch, with the step times either side."""
    bounds, intervals = crossover.context_boundaries(dep, [batch], s_lo=s_lo, s_hi=s_hi, layouts=layouts)
    rows = [{"batch": b.batch, "context": b.context, "before": b.before, "after": b.after, "kind": b.kind}
            for b in bounds]
    df = pd.DataFrame(rows, columns=["batch", "context", "before", "after", "kind"])
    df["after"] = df["after"].astype(object).where(df["after"].notna(), None)
    return df


def deployment_table(dep: Deployment) -> pd.DataFrame:
    """Model and hardware facts that drive the layouts (derived, with units), as a two-column table."""
    m, hw = dep.model, dep.hardware
    rows = [
        ("model", m.label), ("attention", m.attention.upper()),
        ("parameters (total / active)", f"{m.params_total / 1e9:.2f}B / {m.params_active / 1e9:.2f}B"),
        (f"KV bytes per token ({dep.kv_dtype})", f"{m.kv_bytes_per_token(dep.kv_dtype):,.0f} B"),
        ("GPU", f"{dep.ranks} x {hw.label}: {hw.hbm_GiB:g} GiB, {hw.hbm_bw_TBps:g} TB/s, "
                f"{hw.peak_TFLOPS(dep.weight_dtype):g} TFLOPS ({dep.weight_dtype})"),
        ("scale-up link", f"{dep.fabric.scale_up.label}: {dep.fabric.scale_up.achievable_GBps:g} GB/s achievable"),
        ("usable HBM per rank", f"{dep.usable_B / 1e9:.1f} GB (reserve {dep.runtime.reserve_GiB:g} GiB)"),
    ]
    for lay in LAYOUTS:
        rows.append((f"weights per rank, {lay}", f"{sum(dep.weight_bytes(lay).values()) / 1e9:.1f} GB"))
    return pd.DataFrame(rows, columns=["quantity", "value"])


def summary_frame(values: dict, prefix: str = "") -> pd.DataFrame:
    """A nested dict of headline values as a two-column table (quantity, value), nested keys joined by '.'."""
    rows = []
    for k, v in values.items():
        if isinstance(v, dict):
            rows.extend(summary_frame(v, prefix=f"{prefix}{k}.").itertuples(index=False, name=None))
        else:
            rows.append((f"{prefix}{k}", v))
    return pd.DataFrame(rows, columns=["quantity", "value"])
