"""Findings of notebooks/30_moe_expert_parallel.ipynb: the scenario, redundancy vs skew, rank loads, communication and the Monte Carlo check."""

from __future__ import annotations

import pandas as pd

from ..sweeps.moe import comm_at_batch, max_relative_load, redundancy_gain_pct
from . import num

__all__ = ["pretty_label", "scenario_sentence", "redundancy_sentence", "skew_title", "load_sentence", "comm_sentence", "max_load_sentence"]


def pretty_label(label: str) -> str:
    """A configuration label in words: ``"TP2xEP8 +32 EPLB"`` -> ``"TP2xEP8 with EPLB and 32 redundant experts"``."""
    head, _, rest = label.partition(" ")
    if rest == "static":
        return f"{head} (static placement)"
    if rest.endswith("EPLB"):
        n = rest.split()[0].lstrip("+")
        return f"{head} with EPLB" + ("" if n in ("", "0") else f" and {n} redundant experts")
    return label


def scenario_sentence(scenario: pd.DataFrame, batch: int, *, short: bool = False) -> str:
    """Section 1: the fastest feasible configuration at one batch against pure TP."""
    at = scenario[scenario["batch"] == batch]
    ok = at[at["feasible"]]
    if ok.empty:
        return f"Nothing fits at batch {batch:,}."
    best = ok.loc[ok["step_ms"].idxmin()]
    tp = at[at["ep"] == 1]
    if short:
        head = f"{pretty_label(best['layout'])} fastest at batch {batch:,}: {num(best['step_ms'])} ms/step"
        return head + (f" vs {num(tp.iloc[0]['step_ms'])} ms for {tp.iloc[0]['layout']}" if len(tp) else "")
    text = (f"At batch {batch:,} the fastest configuration is {pretty_label(best['layout'])}, at "
            f"{num(best['step_ms'])} ms per step")
    if len(tp) and tp.iloc[0]["layout"] != best["layout"]:
        r = tp.iloc[0]
        fits = "" if r["feasible"] else ", and it does not fit in memory"
        text += f", against {num(r['step_ms'])} ms for pure {r['layout']}{fits}"
    bad = at[~at["feasible"]]["layout"].tolist()
    if bad and not (len(tp) and bad == [tp.iloc[0]["layout"]]):
        text += f"; {', '.join(bad)} do not fit"
    return text + "."


def redundancy_sentence(small: pd.DataFrame, large: pd.DataFrame, skew: float, batch: int, large_batch: int
                        ) -> str:
    """Section 2: what redundant experts do to the step time at a small and at a large batch."""
    g_small, g_large = redundancy_gain_pct(small, skew), redundancy_gain_pct(large, skew)
    red = next(p for p in small["placement"] if "redundant" in p)
    verdict = ("they pay only at the large batch" if g_small < 0 < g_large else
               "they pay at both batches" if g_small > 0 and g_large > 0 else
               "they do not pay at either batch" if g_small <= 0 and g_large <= 0 else "they pay only at the small batch")

    def effect(g):
        return f"{abs(g):.1f}% {'faster' if g > 0 else 'slower'}"

    return (f"At skew {skew:g}, {red.replace('EPLB + ', '')} experts make the step {effect(g_small)} on "
            f"{small['layout'].iloc[0].split(' ')[0]} at batch {batch:,} and {effect(g_large)} on "
            f"{large['layout'].iloc[0].split(' ')[0]} at batch {large_batch:,}: {verdict}.")


def skew_title(by_skew: pd.DataFrame, skew: float, batch: int) -> str:
    """Title of a :func:`step_vs_skew` figure: the redundancy gain at the skew, in words."""
    gain = redundancy_gain_pct(by_skew, skew)
    layout = by_skew["layout"].iloc[0].split(" ")[0]
    effect = f"{abs(gain):.1f}% {'faster' if gain > 0 else 'slower'}"
    return f"{layout} at batch {batch:,}: redundant experts make the step {effect} at skew {skew:g}"


def load_sentence(loads: pd.DataFrame, *, short: bool = False) -> str:
    """Section 3: the busiest EP rank's load over the mean, static vs the placement."""
    mx = max_relative_load(loads)
    placed = next(k for k in mx if k != "static")
    if short:
        return f"Busiest EP rank: {mx['static']:.3f}× the mean load static, {mx[placed]:.3f}× with {placed}"
    return (f"The busiest EP rank carries {mx['static']:.3f}× the mean load with the static placement and "
            f"{mx[placed]:.3f}× with {pretty_label(placed).replace(' with ', ', ', 1)}.")


def comm_sentence(by_batch: pd.DataFrame, batch: int, *, short: bool = False) -> str:
    """Section 4: dispatch + combine per MoE layer at one batch, cheapest and dearest EP split."""
    comm = comm_at_batch(by_batch, batch)
    ep = {k: v for k, v in comm.items() if v > 0}
    if not ep:
        return f"No split of these GPUs uses expert parallelism at batch {batch:,}."
    lo, hi = min(ep, key=ep.get), max(ep, key=ep.get)
    none = [k for k, v in comm.items() if v == 0]
    if short:
        return f"All-to-alls per MoE layer at batch {batch:,}: {num(ep[lo])} µs on {lo} to {num(ep[hi])} µs on {hi}"
    text = (f"At batch {batch:,}, dispatch and combine cost {num(ep[lo])} µs per MoE layer on {lo} and "
            f"{num(ep[hi])} µs on {hi}")
    if none:
        text += f"; {', '.join(none)} {'has' if len(none) == 1 else 'have'} no all-to-all"
    return text + "."


def max_load_sentence(mc: pd.DataFrame, trials: int) -> str:
    """Section 5: the analytic busiest-rank load against Monte Carlo."""
    err = mc["error_pct"].abs().max()
    return (f"The analytic expected busiest-rank load is within {err:.2f}% of {trials:,} Monte Carlo routings "
            f"for {mc['tokens'].min():,}–{mc['tokens'].max():,} tokens.")
