"""Sweeps: evaluate the models over grids and package the results as tidy tables (one row per point).

One module per area (:mod:`.layouts`, :mod:`.disagg`, :mod:`.moe`, ..., :mod:`.fidelity`: the model against
measurements; :mod:`.prefill` holds the record of
the ``prefill`` command); each builds its result records once, and the notebooks, the explorers and the command
line all read them. Shared here: grids and the one unit conversion
from model outputs (seconds, bytes) to table columns (``step_ms``, ``kv_GB``): :func:`tidy`.

Infeasible points keep their numbers (so plots can show *how far* off they are) but carry ``feasible =
False`` and a human-readable ``reason``; "best" choices only consider feasible rows.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from .. import _check
from ..units import display_name, from_si, si_unit_of

__all__ = ["log_grid", "tidy", "summary_frame", "shown_columns", "DEFAULT_UNITS", "layouts",
           "disagg", "moe", "transfer", "offload", "prefill", "fidelity", "bands", "plan", "speculative", "pricing"]

#: display unit of each SI base unit in tables
DEFAULT_UNITS = {"s": "ms", "B": "GB"}


def shown_columns(table, columns, optional, *, always=()) -> list[str]:
    """``columns`` of ``table`` to display, the ``optional`` ones (what only a pipeline or speculative decoding
    fills) where they say something: ``tpot_ms`` where it differs from ``step_ms``, ``tokens_per_step`` where it
    is not 1, ``gpus`` beyond one stage's tp x ep, those in ``always`` whenever present, the rest where not all
    zero. Columns missing from ``table`` are left out."""
    def speaks(c: str) -> bool:
        if c not in optional or c in always:
            return True
        v = table[c].to_numpy(float)
        if c == "tpot_ms":
            return not np.allclose(v, table["step_ms"].to_numpy(float))
        if c == "tokens_per_step":
            return not np.allclose(v, 1.0)
        if c == "gpus" and {"tp", "ep"} <= set(table.columns):
            return bool(np.any(v != (table["tp"] * table["ep"]).to_numpy(float)))
        return bool(np.any(v != 0))

    return [c for c in columns if c in table.columns and speaks(c)]


def tidy(parts: Mapping[str, object], units: Mapping[str, str] | None = None, *, keep=None,
         scalar: bool = False) -> dict:
    """Model outputs renamed and rescaled for tables: ``step_s`` -> ``step_ms``, ``kv_B`` -> ``kv_GB``.

    Parameters
    ----------
    parts : mapping of name -> value (numbers or arrays); names ending in ``_s`` are seconds, ``_B`` bytes.
    units : per-name display unit overriding :data:`DEFAULT_UNITS` (e.g. ``{"moe_layer_s": "us"}``).
    keep : names to keep, in this order (default: all); names without a unit suffix pass unchanged.
    scalar : convert every value to a Python float/bool (one point) instead of keeping arrays.

    Returns
    -------
    dict with the display names as keys.
    """
    units = dict(units or {})
    out = {}
    for name in (keep if keep is not None else parts):
        value = parts[name]
        base = si_unit_of(name)
        if base is not None:
            unit = units.get(name, DEFAULT_UNITS[base])
            name, value = display_name(name, unit), from_si(np.asarray(value, dtype=float), unit)
        if scalar:
            value = np.asarray(value)
            value = bool(value) if value.dtype == bool else float(value)
        out[name] = value
    return out


def log_grid(lo: float, hi: float, n: int, *, integer: bool = False) -> np.ndarray:
    """``n`` log-spaced values in [lo, hi] (unique integers if ``integer``)."""
    lo = _check.number("lo", lo, lo=0.0, lo_open=True)
    hi = _check.number("hi", hi, lo=lo)
    n = _check.integer("n", n, lo=1, hi=100_000)
    g = np.geomspace(lo, hi, n)
    return np.unique(np.round(g)) if integer else g


def summary_frame(values: dict, prefix: str = "") -> pd.DataFrame:
    """A nested dict of headline values as a two-column table (quantity, value), nested keys joined by '.'."""
    rows = []
    for k, v in values.items():
        if isinstance(v, dict):
            rows.extend(summary_frame(v, prefix=f"{prefix}{k}.").itertuples(index=False, name=None))
        else:
            rows.append((f"{prefix}{k}", v))
    return pd.DataFrame(rows, columns=["quantity", "value"])



from . import bands, disagg, fidelity, layouts, moe, offload, plan, prefill, pricing, speculative, transfer  # noqa: E402
