"""Attention-layout sweeps: tidy tables of memory per rank and step time for TP, CP, DPA and DOP.

One row per (grid point, layout); input columns first, then outputs with units in their names. Infeasible
points keep their numbers but carry ``feasible = False`` and a human-readable ``reason``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..models.step import decode as att
from ..models.layouts import crossover
from ..models.layouts import transitions
from ..models.step.engine import LAYOUTS, MAX_BATCH, Deployment, check_batch_context
from ..units import from_si
from . import tidy

__all__ = ["layout_table", "best_layout", "layout_curves", "best_layout_grid", "phase_diagram",
           "memory_table", "transition_table", "policy_summary", "boundaries_at", "deployment_table",
           "POINT_COLUMNS"]

#: columns of :func:`layout_table`, in order
POINT_COLUMNS = ["layout", "feasible", "weights_GB", "kv_GB", "activations_GB", "reserve_GB", "total_GB",
                 "usable_GB", "step_ms", "attention_ms", "core_ms", "ffn_ms", "head_ms", "comm_ms",
                 "overhead_ms", "tokens_per_s", "reason"]


_POINT_OUTPUTS = ["feasible", "weights_B", "kv_B", "activations_B", "reserve_B", "total_B", "usable_B", "step_s",
                  "attention_s", "core_s", "ffn_s", "head_s", "comm_s", "overhead_s", "tokens_per_s"]


def _reason(total_GB, usable_GB, feasible) -> np.ndarray:
    """'needs X GB per rank > Y GB usable' where a point does not fit, '' elsewhere."""
    total_GB, usable_GB = np.broadcast_arrays(np.asarray(total_GB, float), np.asarray(usable_GB, float))
    out = np.full(total_GB.shape, "", dtype=object)
    bad = ~np.asarray(feasible, bool)
    if bad.any():
        out[bad] = [f"needs {t:.1f} GB per rank > {u:.1f} GB usable" for t, u in zip(total_GB[bad], usable_GB[bad])]
    return out


def layout_table(dep: Deployment, batch: int, context: float, layouts=LAYOUTS) -> pd.DataFrame:
    """Memory per rank (GB, by part) and decode step time (ms, by part) of each layout at one point."""
    rows = []
    for lay in layouts:
        r = att.evaluate(dep, batch, context, lay)
        row = {"layout": lay, **tidy(r, keep=_POINT_OUTPUTS, scalar=True)}
        row["reason"] = _reason(row["total_GB"], row["usable_GB"], row["feasible"]).item()
        rows.append(row)
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
    b = check_batch_context(np.atleast_1d(batch), 1)[0].ravel()  # two axes of a grid: checked apart
    s = check_batch_context(1, np.atleast_1d(context))[1].ravel()
    frames = []
    shape = (b.size, s.size)
    for lay in layouts:
        r = tidy(att.evaluate(dep, b[:, None], s[None, :], lay), keep=_CURVE_OUTPUTS)
        cols = {k: np.broadcast_to(v, shape).ravel() for k, v in r.items()}
        frames.append(pd.DataFrame({
            "batch": np.broadcast_to(b[:, None], shape).ravel(),
            "context": np.broadcast_to(s[None, :], shape).ravel(),
            "layout": lay, **cols,
            "reason": _reason(cols["total_GB"], cols["usable_GB"], cols["feasible"]),
        }))
    return pd.concat(frames, ignore_index=True)


_CURVE_OUTPUTS = ["feasible", "weights_B", "kv_B", "total_B", "usable_B", "step_s", "attention_s", "comm_s",
                  "tokens_per_s"]


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
    b = check_batch_context(np.atleast_1d(batch), 1)[0].ravel()  # two axes of a grid: checked apart
    s = check_batch_context(1, np.atleast_1d(context))[1].ravel()
    g = best_layout_grid(dep, b[:, None], s[None, :], layouts)
    labels = np.array([*layouts, "none"], dtype=object)
    best = labels[np.where(g["best"] < 0, len(layouts), g["best"])]
    bounds, _ = crossover.context_boundaries(dep, b, s_lo=float(s.min()), s_hi=float(s.max()), layouts=layouts)
    bdf = pd.DataFrame([vars(x) for x in bounds], columns=["batch", "context", "before", "after", "kind"])
    return {"batch": b, "context": s, "best": best, "best_step_ms": from_si(g["best_step_s"], "ms"), "boundaries": bdf}


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
            rows.append({"layout": lay, "part": part, "GB": from_si(v, "GB"), "usable_GB": from_si(dep.usable_B, "GB"),
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
            rows.append({"src": src, "dst": dst, "kv_primitive": kv.primitive,
                         **tidy({"kv_recv_B": kv.recv_B, "kv_send_B": kv.send_B, "kv_freed_B": kv.freed_B},
                                scalar=True),
                         "weights_primitive": w.primitive, **tidy({"weights_recv_B": w.recv_B}, scalar=True),
                         **tidy(ho, keep=["serial_s", "exposed_s"], scalar=True)})
    return pd.DataFrame(rows)


def policy_summary(results: dict[str, dict]) -> pd.DataFrame:
    """One row per policy of :func:`llmexplore.models.layouts.policy.compare_policies`, fastest first."""
    rows = [{"policy": p, "total_s": r["total_s"], "compute_s": r["total_s"] - r["handoff_total_s"],
             "handoff_s": r["handoff_total_s"], "switches": r["switches"],
             "capped_segments": r["capped_segments"], "infeasible_segments": r["infeasible_segments"]}
            for p, r in results.items()]
    return pd.DataFrame(rows).sort_values("total_s", kind="stable", ignore_index=True)


def boundaries_at(dep: Deployment, batch: int, s_lo: float, s_hi: float, layouts=LAYOUTS) -> pd.DataFrame:
    """Exact context lengths in [s_lo, s_hi] where the best layout changes at one batch (columns ``batch``,
    ``context``, ``before``, ``after`` (None: nothing fits beyond), ``kind``); memory limits are page-exact.
    SpecError unless ``batch`` is one integer in [1, 2**24] and 1 <= s_lo < s_hi <= 2**30."""
    from .. import _check  # (imported here: this function's own check)

    batch = _check.integer("batch", batch, lo=1, hi=MAX_BATCH)
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
        ("usable HBM per rank", f"{from_si(dep.usable_B, 'GB'):.1f} GB (reserve {dep.runtime.reserve_GiB:g} GiB)"),
    ]
    for lay in LAYOUTS:
        rows.append((f"weights per rank, {lay}", f"{from_si(sum(dep.weight_bytes(lay).values()), 'GB'):.1f} GB"))
    return pd.DataFrame(rows, columns=["quantity", "value"])


# ---- notebook parameters ---------------------------------------------------------------------------------


#: weight and KV dtypes the notebook accepts (fp4 weights only on a GPU with FP4 tensor cores)
NOTEBOOK_DTYPES = ("bf16", "fp8", "fp4")
