"""Findings in words: the sentence each notebook section ends with, and the figure titles built from it.

One module per area (:mod:`.layouts`, :mod:`.disagg`, :mod:`.moe`, :mod:`.transfer`,
:mod:`.offload`, :mod:`.fidelity`). Every sentence is computed
from the same tables the figures show (the sweeps), so the headline number in the text is the number in the
figure; a ``short=True`` variant of a sentence is the figure's title. Shared here: how numbers read in a sentence.
"""

from __future__ import annotations

import numpy as np

__all__ = ["num", "in_ms", "in_tokens", "join", "layouts", "disagg", "moe", "transfer", "offload", "fidelity", "plan",
           "speculative"]


def num(x: float, digits: int = 3) -> str:
    """A number for a sentence: thousands separators, ``digits`` significant digits (at least the integer
    part): 171.6 -> "172", 23.03 -> "23.0", 8.071 -> "8.07", 0.07361 -> "0.0736"."""
    x = float(x)
    if not np.isfinite(x):
        return "∞" if x > 0 else "n/a"
    if x == 0:
        return "0"
    places = max(0, digits - 1 - int(np.floor(np.log10(abs(x)))))
    return f"{x:,.{places}f}" if places <= 4 else f"{x:.{digits}g}"


def in_ms(x: float) -> str:
    return f"{num(x)} ms"


def in_tokens(x: float) -> str:
    return f"{float(x):,.0f} tokens"


def join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


from . import disagg, fidelity, layouts, moe, offload, plan, speculative, transfer  # noqa: E402  (area modules use the helpers above)
