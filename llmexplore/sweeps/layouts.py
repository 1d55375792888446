"""Attention-layout sweeps: tidy tables of memory per rank and step time for TP, CP, DPA and DOP.

One row per (grid point, layout); input columns first, then outputs with units in their names. Infeasible
points keep their numbers but carry ``feasible = False`` and a human-readable ``reason``.

Every function takes ``pp`` (pipeline stages, each of the deployment's ranks running the layout) and
``speculative`` (a speculative-decoding preset or SpecDecode) and then compares the layouts by the time per output
token, ``tpot_ms`` (:mod:`llmexplore.models.step.per_token`); ``step_ms`` is the iteration (the step, a pipeline's
time between a sequence's tokens, or a draft + verify cycle), equal to ``tpot_ms`` for plain decoding, and the
``decoding`` column says which ('' plain, 'PP2', or the speculative preset).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..models.layouts import crossover
from ..models.layouts import transitions
from ..models.step import per_token as pt
from ..models.step.engine import LAYOUTS, MAX_BATCH, Deployment, check_batch_context
from ..models.step.pipeline import hop_link, stage_deployment, stage_layers
from ..models.step.speculative import check_spec, user_spec
from ..errors import SpecError
from ..units import from_si
from . import shown_columns as _shown, tidy

__all__ = ["layout_table", "best_layout", "layout_curves", "best_layout_grid", "phase_diagram",
           "memory_table", "transition_table", "policy_summary", "boundaries_at", "deployment_table",
           "decoding", "contrast_decoding", "decoding_of", "shown_columns", "POINT_COLUMNS"]

#: columns of :func:`layout_table`, in order (the ``_ms`` parts add up to ``tpot_ms``; ``core_ms`` is in
#: ``attention_ms``)
POINT_COLUMNS = ["layout", "decoding", "feasible", "weights_GB", "kv_GB", "activations_GB", "reserve_GB",
                 "total_GB", "usable_GB", "draft_weights_GB", "draft_kv_GB", "step_ms", "tpot_ms",
                 "tokens_per_step", "attention_ms", "core_ms", "ffn_ms", "head_ms", "comm_ms", "overhead_ms",
                 "draft_ms", "host_ms", "hops_ms", "stall_ms", "tokens_per_s", "reason"]


_POINT_OUTPUTS = ["feasible", "weights_B", "kv_B", "activations_B", "reserve_B", "total_B", "usable_B",
                  "draft_weights_B", "draft_kv_B", "iteration_s", "tpot_s", "tokens_per_step", "attention_s",
                  "core_s", "ffn_s", "head_s", "comm_s", "overhead_s", "draft_s", "host_s", "hops_s", "stall_s",
                  "tokens_per_s"]


def _evaluate(dep: Deployment, batch, context, layout: str, pp, speculative) -> dict[str, np.ndarray]:
    """Memory and time per output token of one layout (:mod:`llmexplore.models.step.per_token`), merged."""
    return {**pt.token_memory(dep, batch, context, layout, pp=pp, speculative=speculative),
            **pt.token_time(dep, batch, context, layout, pp=pp, speculative=speculative)}


def decoding(dep: Deployment, pp=1, speculative=None, accepted_length=None) -> dict:
    """``{"pp": ..., "speculative": ...}`` for the functions of this module (and the layout models): ``pp`` checked,
    ``speculative`` resolved and checked against the model with ``accepted_length`` in its place when given
    (:func:`llmexplore.models.step.speculative.user_spec`). SpecError naming the argument (``pp ...``,
    ``speculative ...``, ``accepted_length ...``) for a bad value or a combination the models refuse."""
    spec = user_spec(dep.model, speculative, accepted_length)
    p, spec = pt.check_decoding(dep, pp, spec)
    return {"pp": p, "speculative": spec}


def contrast_decoding(dep: Deployment, main: dict) -> dict:
    """The main deployment's :func:`decoding` (``main``) for another deployment ``dep`` (the notebook's GQA
    contrast): the same pipeline (SpecError naming ``pp`` if ``dep`` cannot take it) and the same speculative
    decoding where its draft runs on ``dep``'s model (an MTP draft needs the model's MTP module), plain decoding
    otherwise (the findings say so)."""
    spec = main.get("speculative")
    if spec is not None:
        try:
            check_spec(dep.model, spec)
        except SpecError:
            spec = None
    p, spec = pt.check_decoding(dep, main.get("pp", 1), spec)
    return {"pp": p, "speculative": spec}


def decoding_of(dep: Deployment, pp=1, speculative=None) -> str:
    """The ``decoding`` column: '' for plain decoding, 'PP2', or the speculative preset and its accepted length
    (SpecError for a combination the models refuse)."""
    return pt.decoding_label(*pt.check_decoding(dep, pp, speculative))


#: columns that only speak for a pipeline or speculative decoding (left out of a plain table's display)
_DECODING_COLUMNS = {"tpot_ms", "tokens_per_step", "draft_weights_GB", "draft_kv_GB", "draft_ms", "host_ms",
                     "hops_ms", "stall_ms"}


def shown_columns(table: pd.DataFrame, columns) -> list[str]:
    """``columns`` of a :func:`layout_table` to display: the pipeline and speculative-decoding ones (``tpot_ms``,
    ``draft_ms``, ``hops_ms``, ...) only where they say something (:func:`llmexplore.sweeps.shown_columns`)."""
    return _shown(table, columns, _DECODING_COLUMNS)


def _tidy_point(r: dict, keep, **kw) -> dict:
    out = tidy(r, keep=keep, **kw)
    out["step_ms"] = out.pop("iteration_ms")
    return out


def _reason(total_GB, usable_GB, feasible) -> np.ndarray:
    """'needs X GB per rank > Y GB usable' where a point does not fit, '' elsewhere."""
    total_GB, usable_GB = np.broadcast_arrays(np.asarray(total_GB, float), np.asarray(usable_GB, float))
    out = np.full(total_GB.shape, "", dtype=object)
    bad = ~np.asarray(feasible, bool)
    if bad.any():
        out[bad] = [f"needs {t:.1f} GB per rank > {u:.1f} GB usable" for t, u in zip(total_GB[bad], usable_GB[bad])]
    return out


def layout_table(dep: Deployment, batch: int, context: float, layouts=LAYOUTS, *, pp=1,
                 speculative=None) -> pd.DataFrame:
    """Memory per rank (GB, by part) and time per output token (ms, by part) of each layout at one point."""
    rows = []
    label = decoding_of(dep, pp, speculative)
    for lay in layouts:
        r = _evaluate(dep, batch, context, lay, pp, speculative)
        row = {"layout": lay, "decoding": label, **_tidy_point(r, _POINT_OUTPUTS, scalar=True)}
        row["reason"] = _reason(row["total_GB"], row["usable_GB"], row["feasible"]).item()
        rows.append(row)
    return pd.DataFrame(rows, columns=POINT_COLUMNS)


def best_layout(table: pd.DataFrame) -> str | None:
    """Fastest feasible layout of a :func:`layout_table`, by time per output token (None if nothing fits)."""
    ok = table[table["feasible"]]
    if ok.empty:
        return None
    return str(ok.loc[ok["tpot_ms"].idxmin(), "layout"])


def layout_curves(dep: Deployment, batch, context, layouts=LAYOUTS, *, pp=1, speculative=None) -> pd.DataFrame:
    """Tidy table over a (batch x context) grid: one row per point and layout.

    ``batch`` and ``context`` are 1-D; every combination is evaluated in one broadcast call per layout.
    """
    b = check_batch_context(np.atleast_1d(batch), 1)[0].ravel()  # two axes of a grid: checked apart
    s = check_batch_context(1, np.atleast_1d(context))[1].ravel()
    frames = []
    shape = (b.size, s.size)
    label = decoding_of(dep, pp, speculative)
    for lay in layouts:
        r = _tidy_point(_evaluate(dep, b[:, None], s[None, :], lay, pp, speculative), _CURVE_OUTPUTS)
        cols = {k: np.broadcast_to(v, shape).ravel() for k, v in r.items()}
        frames.append(pd.DataFrame({
            "batch": np.broadcast_to(b[:, None], shape).ravel(),
            "context": np.broadcast_to(s[None, :], shape).ravel(),
            "layout": lay, "decoding": label, **cols,
            "reason": _reason(cols["total_GB"], cols["usable_GB"], cols["feasible"]),
        }))
    return pd.concat(frames, ignore_index=True)


_CURVE_OUTPUTS = ["feasible", "weights_B", "kv_B", "total_B", "usable_B", "iteration_s", "tpot_s", "attention_s",
                  "comm_s", "draft_s", "hops_s", "stall_s", "tokens_per_s"]


def best_layout_grid(dep: Deployment, batch, context, layouts=LAYOUTS, *, pp=1, speculative=None
                     ) -> dict[str, np.ndarray]:
    """Best feasible layout on a broadcast grid, by time per output token, without building a DataFrame (fast
    path for big grids).

    Returns ``best`` (index into ``layouts``, -1 where nothing fits), ``best_step_s`` (its time per output token,
    inf where nothing fits) and ``step_s`` (every layout's) stacked [layout, ...grid].
    """
    steps = []
    for lay in layouts:
        r = _evaluate(dep, batch, context, lay, pp, speculative)
        steps.append(np.where(r["feasible"], r["tpot_s"], np.inf))
    stacked = np.stack(np.broadcast_arrays(*steps))
    best = np.argmin(stacked, axis=0)
    best_t = np.take_along_axis(stacked, best[None], axis=0)[0]
    return {"best": np.where(np.isfinite(best_t), best, -1), "best_step_s": best_t, "step_s": stacked}


def phase_diagram(dep: Deployment, batch, context, layouts=LAYOUTS, *, pp=1, speculative=None) -> dict:
    """Best layout over a batch x context grid plus the exact boundaries from :mod:`.models.crossover`.

    Returns ``{"batch", "context", "best" (labels, "none" where nothing fits) [len(batch), len(context)],
    "best_step_ms" (its time per output token), "boundaries" (DataFrame: batch, context, before, after, kind),
    "decoding"}``.
    """
    b = check_batch_context(np.atleast_1d(batch), 1)[0].ravel()  # two axes of a grid: checked apart
    s = check_batch_context(1, np.atleast_1d(context))[1].ravel()
    g = best_layout_grid(dep, b[:, None], s[None, :], layouts, pp=pp, speculative=speculative)
    labels = np.array([*layouts, "none"], dtype=object)
    best = labels[np.where(g["best"] < 0, len(layouts), g["best"])]
    bounds, _ = crossover.context_boundaries(dep, b, s_lo=float(s.min()), s_hi=float(s.max()), layouts=layouts,
                                             pp=pp, speculative=speculative)
    bdf = pd.DataFrame([vars(x) for x in bounds], columns=["batch", "context", "before", "after", "kind"])
    return {"batch": b, "context": s, "best": best, "best_step_ms": from_si(g["best_step_s"], "ms"), "boundaries": bdf,
            "decoding": decoding_of(dep, pp, speculative)}


def memory_table(dep: Deployment, batch: int, context: float, layouts=LAYOUTS, *, pp=1, speculative=None
                 ) -> pd.DataFrame:
    """Memory per rank by part (long form: layout, part, GB) plus the usable line, for stacked bars. With ``pp``
    stages the worst stage's weights and KV; with speculative decoding the draft's weights and KV as parts of
    their own (the target's KV includes the verify slots)."""
    p, spec = pt.check_decoding(dep, pp, speculative)
    wdep = stage_deployment(dep, p) if p > 1 else dep
    rows = []
    for lay in layouts:
        parts = wdep.weight_bytes(lay)
        mem = pt.token_memory(dep, batch, context, lay, pp=p, speculative=spec)
        dw, dkv = float(mem["draft_weights_B"]), float(mem["draft_kv_B"])
        items = {"attention weights": parts["attention"], "FFN/MoE weights": parts["ffn"],
                 "embeddings + norms": parts["embedding"] + parts["norms"],
                 "KV cache": float(mem["kv_B"]) - dkv, "activations": float(mem["activations_B"]),
                 "runtime reserve": float(mem["reserve_B"])}
        if spec is not None:
            items.update({"draft weights": dw, "draft KV": dkv})
        for part, v in items.items():
            rows.append({"layout": lay, "part": part, "GB": from_si(v, "GB"), "usable_GB": from_si(dep.usable_B, "GB"),
                         "feasible": bool(mem["feasible"])})
    return pd.DataFrame(rows)


def transition_table(dep: Deployment, batch: int, context: float, *, weights_resident: bool = False,
                     pp=1, speculative=None) -> pd.DataFrame:
    """All 16 switches X -> Y: KV and weight primitives, bytes per rank, serial and overlapped handoff (with
    ``pp`` stages the worst stage's layers, with ``speculative`` decoding the draft layer too)."""
    rows = []
    kw = dict(weights_resident=weights_resident, pp=pp, speculative=speculative)
    for src in LAYOUTS:
        for dst in LAYOUTS:
            tr = transitions.transition(dep, src, dst, batch, context, **kw)
            ho = transitions.handoff_time(dep, src, dst, batch, context, **kw)
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


def boundaries_at(dep: Deployment, batch: int, s_lo: float, s_hi: float, layouts=LAYOUTS, *, pp=1,
                  speculative=None) -> pd.DataFrame:
    """Exact context lengths in [s_lo, s_hi] where the best layout changes at one batch (columns ``batch``,
    ``context``, ``before``, ``after`` (None: nothing fits beyond), ``kind``); memory limits are page-exact.
    SpecError unless ``batch`` is one integer in [1, 2**24] and 1 <= s_lo < s_hi <= 2**30."""
    from .. import _check  # (imported here: this function's own check)

    batch = _check.integer("batch", batch, lo=1, hi=MAX_BATCH)
    bounds, intervals = crossover.context_boundaries(dep, [batch], s_lo=s_lo, s_hi=s_hi, layouts=layouts, pp=pp,
                                                     speculative=speculative)
    rows = [{"batch": b.batch, "context": b.context, "before": b.before, "after": b.after, "kind": b.kind}
            for b in bounds]
    df = pd.DataFrame(rows, columns=["batch", "context", "before", "after", "kind"])
    df["after"] = df["after"].astype(object).where(df["after"].notna(), None)
    return df


def deployment_table(dep: Deployment, *, pp=1, speculative=None) -> pd.DataFrame:
    """Model and hardware facts that drive the layouts (derived, with units), as a two-column table; with ``pp``
    stages or ``speculative`` decoding, how they decode and the worst rank's weights."""
    m, hw = dep.model, dep.hardware
    p, spec = pt.check_decoding(dep, pp, speculative)
    rows = [
        ("model", m.label), ("attention", m.attention.upper()),
        ("parameters (total / active)", f"{m.params_total / 1e9:.2f}B / {m.params_active / 1e9:.2f}B"),
        (f"KV bytes per token ({dep.kv_dtype})", f"{m.kv_bytes_per_token(dep.kv_dtype):,.0f} B"),
        ("GPU", f"{dep.ranks} x {hw.label}: {hw.hbm_GiB:g} GiB, {hw.hbm_bw_TBps:g} TB/s, "
                f"{hw.peak_TFLOPS(dep.weight_dtype):g} TFLOPS ({dep.weight_dtype})"),
        ("scale-up link", f"{dep.fabric.scale_up.label}: {dep.fabric.scale_up.achievable_GBps:g} GB/s achievable"),
        ("usable HBM per rank", f"{from_si(dep.usable_B, 'GB'):.1f} GB (reserve {dep.runtime.reserve_GiB:g} GiB)"),
    ]
    if p > 1:
        link = hop_link(dep, p)
        rows.append(("pipeline", f"{p} stages x {dep.ranks} GPUs ({p * dep.ranks} in all), "
                                 f"{'/'.join(map(str, stage_layers(m, p)))} layers, activations over {link.label}"))
    if spec is not None:
        rows.append(("speculative decoding", f"{spec.name}: {spec.method}, {spec.draft_tokens} draft tokens, "
                                             f"{spec.tokens_per_step:.2f} tokens per step ({spec.conditions})"))
    for lay in LAYOUTS:
        w = pt.token_memory(dep, 1, 1, lay, pp=p, speculative=spec)["weights_B"]
        rows.append((f"weights per rank, {lay}", f"{from_si(float(w), 'GB'):.1f} GB"))
    return pd.DataFrame(rows, columns=["quantity", "value"])


# ---- notebook parameters ---------------------------------------------------------------------------------


#: weight and KV dtypes the notebook accepts (fp4 weights only on a GPU with FP4 tensor cores)
NOTEBOOK_DTYPES = ("bf16", "fp8", "fp4")
