"""Error bands on records: recompute a record under the kernel curves' parameter draws (models/step/uncertainty.py)
and add ``<key>_lo`` / ``<key>_hi`` next to each headline number.

A record builder is any function ``runtime -> dict``; its numeric leaves named in ``keys`` (dotted paths reach
into nested dicts, e.g. ``"disaggregated.gpus"``) get their band. A runtime without curves gets ``None`` bounds
and ``band.draws == 0`` (no parameter uncertainty to show), never a silent NaN.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from .. import presets
from ..models.step.uncertainty import BAND_PERCENTILES, DRAWS, band, runtime_draws

__all__ = ["with_band", "band_info", "get_path", "resolved", "layout_bands", "boundary_bands", "curves_with_band"]


def get_path(rec: dict, path: str):
    """The value at a dotted path of nested dicts (None when a step is missing)."""
    cur = rec
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _set_path(rec: dict, path: str, value) -> None:
    *head, last = path.split(".")
    cur = rec
    for part in head:
        cur = cur[part]
    cur[last] = value


def _num(v) -> float:
    if isinstance(v, (bool, np.bool_)) or v is None:
        return float("nan")
    try:
        x = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return x if np.isfinite(x) else float("nan")


def band_info(runtime, draws: int, asked: bool = True) -> dict:
    """What a band means, for the JSON ``band`` key and for captions."""
    rt = presets.resolve("runtime", runtime)
    if not asked:
        return {"draws": 0, "percentiles": None, "what": "not computed (--band)"}
    if not draws:
        return {"draws": 0, "percentiles": None,
                "what": f"runtime {rt.name!r} has no fitted kernel curves: no parameter band"}
    return {"draws": draws, "percentiles": list(BAND_PERCENTILES),
            "what": (f"P{BAND_PERCENTILES[0]:g}-P{BAND_PERCENTILES[1]:g} over {draws} draws of the kernel-curve "
                     "parameters (bootstrap covariance over measured kernel shapes); the model's error against "
                     "published measurements is larger (notebook 05_fidelity)")}


def with_band(build: Callable[[object], dict], runtime, keys: Iterable[str], n: int = DRAWS) -> dict:
    """``build(runtime)`` with ``<key>_lo`` / ``<key>_hi`` beside every key in ``keys`` and a ``band`` entry
    (``n`` = 0: no draws, null bounds)."""
    rt = presets.resolve("runtime", runtime)
    rec = build(rt)
    keys = [k for k in keys if get_path(rec, k) is not None]
    rts = runtime_draws(rt, n) if n else []
    samples = np.array([[_num(get_path(build(r), k)) for k in keys] for r in rts]) if rts else None
    for j, k in enumerate(keys):
        if samples is None:
            lo = hi = None
        else:
            col = samples[:, j]
            if np.all(np.isnan(col)):
                lo = hi = None
            else:
                a, b = band(col)
                lo, hi = float(a), float(b)
        _set_path(rec, k + "_lo", lo)
        _set_path(rec, k + "_hi", hi)
    rec["band"] = band_info(rt, len(rts), asked=bool(n))
    return rec


def resolved(lo, hi, axis_lo: float, axis_hi: float) -> bool:
    """A boundary is resolved by the model unless its band is missing or spans the whole axis."""
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return False
    return not (lo <= axis_lo and hi >= axis_hi)


def layout_bands(dep, batch, context, n: int = DRAWS, *, pp=1, speculative=None) -> dict:
    """Per-layout step-time band and how robust the best layout is, at one (batch, context).

    Returns {"step_ms_lo": {layout: lo}, "step_ms_hi": {layout: hi}, "best_agreement": the fraction of draws
    whose fastest feasible layout is the central one (None without curves), "band": band_info}.
    """
    import dataclasses

    from . import layouts as lay

    central = lay.layout_table(dep, batch, context, pp=pp, speculative=speculative)
    best = lay.best_layout(central)
    rts = runtime_draws(dep.runtime, n) if n else []
    if not rts:
        return {"step_ms_lo": {}, "step_ms_hi": {}, "best_agreement": None,
                "band": band_info(dep.runtime, 0, asked=bool(n))}
    steps, agree = [], 0
    for rt in rts:
        t = lay.layout_table(dataclasses.replace(dep, runtime=rt), batch, context, pp=pp, speculative=speculative)
        steps.append(t["tpot_ms"].to_numpy(float))
        agree += lay.best_layout(t) == best
    lo, hi = band(np.array(steps))
    names = list(central["layout"])
    return {"step_ms_lo": dict(zip(names, map(float, lo))), "step_ms_hi": dict(zip(names, map(float, hi))),
            "best_agreement": agree / len(rts), "band": band_info(dep.runtime, len(rts))}


def boundary_bands(dep, batch: int, s_lo: float, s_hi: float, n: int = DRAWS, *, pp=1, speculative=None):
    """The exact layout boundaries at one batch (:func:`llmexplore.sweeps.layouts.boundaries_at`) with their
    band. Memory boundaries do not depend on kernel speed (band = the point). A crossover between layouts A and
    B gets ``context_lo`` / ``context_hi``: P10/P90 over the draws of the context where A and B swap (the two
    layouts alone; a draw in which they do not swap on the axis counts as the end it fell off); ``present`` is
    the fraction of draws in which they swap inside [s_lo, s_hi]; ``resolved`` is False when they swap in fewer
    than half of the draws or the band spans the whole axis: the model cannot place that crossover, and it is
    reported as "not resolved by the model", not as a number. ``pp`` and ``speculative``: the layouts' time per
    output token in a pipeline or with speculative decoding (:mod:`llmexplore.models.step.per_token`)."""
    import dataclasses

    from ..models.step import per_token as pt
    from ..models.layouts import crossover
    from . import layouts as lay

    kw = dict(pp=pp, speculative=speculative)
    out = lay.boundaries_at(dep, batch, s_lo, s_hi, **kw).copy()
    out["context_lo"], out["context_hi"] = out["context"].astype(float), out["context"].astype(float)
    out["present"], out["resolved"] = 1.0, True
    rts = runtime_draws(dep.runtime, n) if n else []
    for i, row in out.iterrows():
        if row.kind != "crossover" or not rts:
            continue
        pair = (row.before, row.after)
        v, hits = [], 0
        for rt in rts:
            d = dataclasses.replace(dep, runtime=rt)
            bounds, _ = crossover.context_boundaries(d, [batch], s_lo=s_lo, s_hi=s_hi, layouts=pair, **kw)
            x = [b.context for b in bounds if b.kind == "crossover"]
            if x:
                v.append(float(x[0]))
                hits += 1
            else:  # no swap on the axis in this draw: it fell off the end where `after` already (or never) wins
                t = {lay_: float(pt.token_time(d, batch, s_lo, lay_, **kw)["tpot_s"]) for lay_ in pair}
                v.append(s_lo if t[row.after] <= t[row.before] else s_hi)
        present = hits / len(rts)
        lo, hi = (float(x) for x in band(np.array(v)))
        out.loc[i, ["context_lo", "context_hi", "present"]] = [lo, hi, present]
        out.loc[i, "resolved"] = bool(present >= 0.5 and resolved(lo, hi, s_lo, s_hi))
    return out


def curves_with_band(dep, batch: int, context, n: int = DRAWS, *, pp=1, speculative=None):
    """:func:`llmexplore.sweeps.layouts.layout_curves` at one batch with ``tpot_ms_lo`` / ``tpot_ms_hi``: the
    P10/P90 of each layout's time per output token over the kernel-parameter draws (equal to ``tpot_ms`` for a
    runtime without curves)."""
    import dataclasses

    from . import layouts as lay

    kw = dict(pp=pp, speculative=speculative)
    central = lay.layout_curves(dep, [batch], context, **kw)
    rts = runtime_draws(dep.runtime, n) if n else []
    if not rts:
        return central.assign(tpot_ms_lo=central["tpot_ms"], tpot_ms_hi=central["tpot_ms"])
    steps = np.array([lay.layout_curves(dataclasses.replace(dep, runtime=rt), [batch], context, **kw)["tpot_ms"]
                      .to_numpy(float) for rt in rts])
    lo, hi = band(steps)
    return central.assign(tpot_ms_lo=lo, tpot_ms_hi=hi)
