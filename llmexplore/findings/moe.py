"""Findings of notebooks/30_moe_expert_parallel.ipynb: the scenario, redundancy vs skew, rank loads, communication
and the Monte Carlo check.

With a pipeline or speculative decoding (a table's ``decoding`` column not empty) every time is the time per output
token (``tpot_ms``) and the sentences say so; plain decoding reads as it always did ("per step")."""

from __future__ import annotations

import pandas as pd

from .. import presets
from ..labels import table_decoding
from ..sweeps import pricing
from ..sweeps.moe import comm_at_batch, max_relative_load, priced, redundancy_gain_pct
from . import num

__all__ = ["pretty_label", "scenario_sentence", "redundancy_sentence", "skew_title", "load_sentence", "comm_sentence",
           "max_load_sentence", "decoding_sentence", "straggler_sentence", "cost_sentence"]


def _time(df: pd.DataFrame) -> str:
    """The column the sentences compare: the step for plain decoding, the time per output token otherwise."""
    return "tpot_ms" if table_decoding(df) else "step_ms"


def _pass(df: pd.DataFrame) -> str:
    """Which pass a per-MoE-layer time is of: '' (the step), ' of the verify pass', ' of one micro-batch'."""
    d = table_decoding(df)
    return "" if not d else (" of one micro-batch's step" if d.startswith("PP") else " of the verify pass")


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
    col, dec = _time(scenario), table_decoding(scenario)
    best = ok.loc[ok[col].idxmin()]
    tp = at[at["ep"] == 1]
    if short:
        per = "ms/step" if not dec else f"ms per output token ({dec.split(' (')[0]})"
        head = f"{pretty_label(best['layout'])} fastest at batch {batch:,}: {num(best[col])} {per}"
        return head + (f" vs {num(tp.iloc[0][col])} ms for {tp.iloc[0]['layout']}" if len(tp) else "")
    how = "" if not dec else (f" in a pipeline of {dec[2:]} stages ({int(best['gpus']):,} GPUs)"
                               if dec.startswith("PP") else f" decoding with {dec}")
    text = (f"At batch {batch:,}{how} the fastest configuration is {pretty_label(best['layout'])}, at "
            f"{num(best[col])} ms per {'step' if not dec else 'output token'}")
    if len(tp) and tp.iloc[0]["layout"] != best["layout"]:
        r = tp.iloc[0]
        fits = "" if r["feasible"] else ", and it does not fit in memory"
        text += f", against {num(r[col])} ms for pure {r['layout']}{fits}"
    bad = at[~at["feasible"]]["layout"].tolist()
    if bad and not (len(tp) and bad == [tp.iloc[0]["layout"]]):
        text += f"; {', '.join(bad)} do not fit"
    return text + "." + (f" {decoding_sentence(scenario, batch)}" if dec else "")


def cost_sentence(scenario: pd.DataFrame, batch: int, gpu: str, tier: str = pricing.DEFAULT_PRICE_TIER) -> str:
    """Section 1: what the configurations cost at ``batch`` at ``tier``'s price of ``gpu`` (with the price's date;
    :func:`~llmexplore.sweeps.moe.priced`, docs/models.md §8.7): the cheapest per million output tokens among
    those that fit, against pure TP. The configurations of a scenario rent the same GPUs, so the cheapest per token
    is the one that serves the most output tokens per second, the fastest, and the sentence says so: the dollars
    are what is new, not the ranking. "Not priced" where the tier has no price for the GPU."""
    hw = presets.resolve("hardware", gpu)
    price = pricing.tier_price(tier, hw.name)
    if price is None:
        return f"These layouts are {pricing.not_priced(tier, hw.name)}; the times above stand."
    at = priced(scenario[scenario["batch"] == batch], hw.name, tier)
    ok = at[at["feasible"]]
    gpus = sorted({int(g) for g in at["gpus"]})
    text = f"At {pricing.price_label(tier, price)} for the {hw.label}"
    if len(gpus) == 1:
        text += f", every layout rents the same {gpus[0]:,} GPUs for ${at['usd_per_hour'].iloc[0]:,.2f} per hour"
    if ok.empty:
        return text + f"; nothing fits at batch {batch:,}, so nothing has a price per output token."
    best = ok.loc[ok["usd_per_mtok_output"].idxmin()]

    def cost(r, unit=" per million output tokens"):
        return f"${num(r['usd_per_mtok_output'])}{unit} ({num(r['tokens_per_s'])} output tokens/s)"

    name = (f"pure {best['layout']}" if best["ep"] == 1 else pretty_label(best["layout"]))
    text += (f", so the cheapest per million output tokens at batch {batch:,} is the fastest, {name}: {cost(best)}"
             if len(gpus) == 1 else f"; the cheapest per million output tokens at batch {batch:,} is {name} on "
                                    f"{int(best['gpus']):,} GPUs: {cost(best)}")
    tp = at[at["ep"] == 1]
    if len(tp) and tp.iloc[0]["layout"] != best["layout"]:
        r = tp.iloc[0]
        if r["feasible"]:
            saved = 100 * (1 - best["usd_per_mtok_output"] / r["usd_per_mtok_output"])
            text += f", {num(saved)}% less than pure {r['layout']} at {cost(r, '')}"
    bad = at[~at["feasible"]]["layout"].tolist()
    if bad:
        one = len(bad) == 1
        text += (f"; {', '.join(bad)} {'does' if one else 'do'} not fit in memory, so "
                 f"{'it has' if one else 'they have'} no price per token")
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

    what = "the step" if not table_decoding(small) else "the time per output token"
    return (f"At skew {skew:g}, {red.replace('EPLB + ', '')} experts make {what} {effect(g_small)} on "
            f"{small['layout'].iloc[0].split(' ')[0]} at batch {batch:,} and {effect(g_large)} on "
            f"{large['layout'].iloc[0].split(' ')[0]} at batch {large_batch:,}: {verdict}.")


def skew_title(by_skew: pd.DataFrame, skew: float, batch: int) -> str:
    """Title of a :func:`step_vs_skew` figure: the redundancy gain at the skew, in words."""
    gain = redundancy_gain_pct(by_skew, skew)
    layout = by_skew["layout"].iloc[0].split(" ")[0]
    effect = f"{abs(gain):.1f}% {'faster' if gain > 0 else 'slower'}"
    dec = table_decoding(by_skew)
    if dec:
        return (f"{layout} {dec.split(' (')[0]} at batch {batch:,}: redundant experts make the time per output "
                f"token {effect} at skew {skew:g}")
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
    of = _pass(by_batch)
    if short:
        return (f"All-to-alls per MoE layer{of} at batch {batch:,}: {num(ep[lo])} µs on {lo} to {num(ep[hi])} µs "
                f"on {hi}")
    text = (f"At batch {batch:,}, dispatch and combine cost {num(ep[lo])} µs per MoE layer{of} on {lo} and "
            f"{num(ep[hi])} µs on {hi}")
    if none:
        text += f"; {', '.join(none)} {'has' if len(none) == 1 else 'have'} no all-to-all"
    return text + "."


def max_load_sentence(mc: pd.DataFrame, trials: int) -> str:
    """Section 5: the analytic busiest-rank load against Monte Carlo."""
    err = mc["error_pct"].abs().max()
    return (f"The analytic expected busiest-rank load is within {err:.2f}% of {trials:,} Monte Carlo routings "
            f"for {mc['tokens'].min():,}–{mc['tokens'].max():,} tokens.")


def decoding_sentence(scenario: pd.DataFrame, batch: int) -> str:
    """Section 1 with a pipeline or speculative decoding: its speed-up at ``batch`` (the plain step of one stage over
    the time per output token: the ``speedup`` column) on pure TP and on each expert-parallel split's static
    placement, and the feasible configuration and batch where it pays least. '' for plain decoding."""
    dec = table_decoding(scenario)
    if not dec or "speedup" not in scenario:
        return ""
    at = scenario[scenario["batch"] == batch]
    rows = list(at[at["balance"] == "none"].itertuples())  # pure TP and each EP split's static placement
    names = [f"{num(r.speedup)}× on {r.layout.replace(' static', '')}" for r in rows]
    parts = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    if dec.startswith("PP"):
        p = int(dec[2:])
        gpus = int(at["gpus"].iloc[0])
        head = (f"A pipeline of {p} stages ({gpus:,} GPUs, micro-batches of {-(-batch // p):,} sequences) at batch "
                f"{batch:,}: speed-up {parts} (static placements), against one stage of {gpus // p:,} GPUs without "
                f"it (its plain step over the time per output token)")
    else:
        head = (f"Speculative decoding with {dec} at batch {batch:,}: speed-up {parts} (static placements; the "
                f"plain step over the time per output token)")
    ok = scenario[scenario["feasible"]]
    if ok.empty:
        return head + "; nothing fits in memory."
    worst = ok.loc[ok["speedup"].idxmin()]
    return (head + f"; among the configurations that fit it pays least at batch {int(worst['batch']):,} on "
                   f"{pretty_label(worst['layout'])}: {num(worst['speedup'])}×.")


def straggler_sentence(straggler: pd.DataFrame) -> str:
    """Section 3 at the notebook's batch: the busiest EP rank's expected pairs over the mean, plain and as the
    decoding routes them (a :func:`~llmexplore.sweeps.moe.straggler_table`)."""
    plain = straggler.iloc[0]
    text = (f"At the notebook's batch one MoE layer routes {int(plain['routed_tokens']):,} tokens, and the busiest "
            f"EP rank of {pretty_label(plain['layout'])} receives {plain['load_straggler']:.3f}× the mean routed "
            f"pairs ({plain['expected_imbalance']:.3f}× from the placement, the rest routing noise)")
    if len(straggler) < 2:
        return text + "."
    other = straggler.iloc[-1]
    fewer = other["load_straggler"] < plain["load_straggler"]
    verb = "more" if other["routed_tokens"] > plain["routed_tokens"] else "fewer"
    return (text + f"; with {other['decoding']} a pass routes {int(other['routed_tokens']):,}, and {verb} tokens "
                   f"{'average out' if fewer else 'add to'} the noise: {other['load_straggler']:.3f}× (the "
                   f"placement's {other['expected_imbalance']:.3f}× stays), and the busiest rank's routed GEMMs take "
                   f"{other['time_straggler']:.3f}× the mean rank's (plain {plain['time_straggler']:.3f}×).")
