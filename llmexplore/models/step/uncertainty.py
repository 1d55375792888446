"""Error bands from the kernel curves' parameter uncertainty (issue 9 §3, docs/models.md §1.1a).

Each fitted curve carries the covariance of its parameters from a bootstrap over measured kernel shapes
(``cov_u``). A *draw* perturbs every curve of a kernel set at once (independently between curves, with a fixed
seed per draw and curve: :func:`llmexplore.models.step.engine.perturbed`); a runtime selects draw i with
``kernel_draw = i``. Any quantity the models compute from a runtime, however derived (a step time, a crossover
context, a pool size, a break-even), gets its band by recomputing it under ``DRAWS`` draws:

    band = [P10, P90] of the quantity over the draws   (an 80% interval; the central value is the fit's)

This is the uncertainty of the parameters given the kernel data, not the model's error against the world;
that is measured on the validation set (notebook 05_fidelity) and is larger. A runtime without curves
(``scalar``, ``uncalibrated``) has no draws and no band.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ...specs import Runtime
from .engine import resolve_runtime

__all__ = ["DRAWS", "BAND_PERCENTILES", "has_band", "runtime_draws", "band", "band_of"]

DRAWS = 16  # draws per band: the P10/P90 of 16 draws moves by ~1/4 of the band between seeds [modelling choice]
BAND_PERCENTILES = (10.0, 90.0)


def has_band(runtime) -> bool:
    """True when the runtime prices kernels with fitted curves (the only source of a parameter band)."""
    return bool(resolve_runtime(runtime).kernel_set)


def runtime_draws(runtime, n: int = DRAWS) -> list[Runtime]:
    """The runtime under draws 1..n of its curves' parameters ([] for a runtime without curves)."""
    rt = resolve_runtime(runtime)
    if not rt.kernel_set:
        return []
    return [dataclasses.replace(rt, kernel_draw=i) for i in range(1, n + 1)]


def band(samples) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) = the BAND_PERCENTILES of ``samples`` over their first axis (draws); NaN-aware, so a draw in
    which a quantity does not exist (e.g. no crossover) is left out rather than poisoning the band."""
    a = np.asarray(samples, dtype=float)
    with np.errstate(all="ignore"):
        lo, hi = np.nanpercentile(a, BAND_PERCENTILES, axis=0)
    return lo, hi


def band_of(fn: Callable[[Runtime], object], runtime, n: int = DRAWS) -> dict:
    """``fn(runtime)`` and its band: {"value", "lo", "hi", "draws"} (lo = hi = None without curves).

    ``fn`` maps a runtime to a number or an array; it is called once with the runtime and once per draw.
    """
    rt = resolve_runtime(runtime)
    value = np.asarray(fn(rt), dtype=float)
    rts = runtime_draws(rt, n)
    if not rts:
        return {"value": value, "lo": None, "hi": None, "draws": 0}
    samples = np.stack([np.asarray(fn(r), dtype=float) for r in rts])
    lo, hi = band(samples)
    return {"value": value, "lo": lo, "hi": hi, "draws": len(rts)}
