"""Findings of notebooks/15_speculative_decoding.ipynb: one batch, the speed-up against batch and acceptance, the
draft's memory, and the published checks."""

from __future__ import annotations

import math

import pandas as pd

from ..sweeps.speculative import SpecSetup, breakeven_batches, breakeven_lengths, check_errors, own_length_rows
from . import join, num

__all__ = ["point_sentence", "batch_sentence", "batch_title", "map_title", "map_sentence", "memory_sentence", "checks_sentence",
           "checks_title", "explorer_status"]


def _spec_words(s: SpecSetup) -> str:
    sp = s.spec
    return f"{sp.label} ({sp.method} draft of {sp.draft_tokens}, {sp.verify_width} tokens verified per sequence)"


def point_sentence(pt: dict, s: SpecSetup) -> str:
    """Section 1: the step's parts at one batch and the speed-up."""
    verdict = "pays" if pt["speedup"] > 1 else "does not pay"
    return (f"With {_spec_words(s)} on {s.dep.label()}, one decode iteration at batch {pt['batch']:,} and "
            f"{pt['context']:,} tokens of context drafts in {num(pt['draft_ms'])} ms and verifies "
            f"{pt['verify_width']} tokens per sequence in {num(pt['verify_ms'])} ms (a plain step takes "
            f"{num(pt['plain_ms'])} ms). At {num(pt['tokens_per_step'])} tokens per step (measured on "
            f"{s.spec.conditions}) TPOT falls from {num(pt['plain_tpot_ms'])} to {num(pt['tpot_ms'])} ms: "
            f"{num(pt['speedup'])}x, so speculation {verdict} here.")


def _breakeven_words(be: dict[str, float]) -> list[str]:
    never = [tau for tau, b in be.items() if b == 0]
    always = [tau for tau, b in be.items() if math.isinf(b)]
    out = [f"at {join(never)} tokens per step it never pays"] if never else []
    out += [f"at {tau} it stops paying above batch {num(b)}" for tau, b in be.items() if 0 < b < math.inf]
    if always:
        out.append(f"at {join(always)} it pays at every batch shown")
    return out


def batch_sentence(df: pd.DataFrame, s: SpecSetup, *, short: bool = False) -> str:
    """Section 2: the speed-up at the smallest and largest batch for the preset's acceptance, and where it stops
    paying for each accepted length."""
    own = own_length_rows(df, s)
    if own.empty:
        own = df[df["accepted_length"] == df["accepted_length"].max()].sort_values("batch")
    first, last = own.iloc[0], own.iloc[-1]
    peak = own.loc[own["speedup"].idxmax()]
    if short:
        return (f"{s.spec.label}: {num(first['speedup'])}x at batch {first['batch']:,}, "
                f"{num(last['speedup'])}x at {last['batch']:,} ({num(s.spec.tokens_per_step)} tokens per step)")
    be = breakeven_batches(df)
    text = (f"At the preset's {num(s.spec.tokens_per_step)} tokens per step the speed-up is {num(first['speedup'])}x at "
            f"batch {first['batch']:,} and {num(last['speedup'])}x at batch {last['batch']:,} (highest "
            f"{num(peak['speedup'])}x at batch {peak['batch']:,}): the verify pass carries k + 1 tokens per sequence "
            "through every GEMM, which costs little while the step reads weights and a lot once it computes")
    if s.dep.model.is_moe:
        text += (", and in an MoE model the extra tokens also reach more experts, whose weights must be read, until "
                 "the batch already reaches them all")
    return text + ". Over the accepted lengths shown, " + join(_breakeven_words(be)) + "."


def batch_title(df: pd.DataFrame, s: SpecSetup) -> str:
    return batch_sentence(df, s, short=True)


def map_sentence(df: pd.DataFrame) -> str:
    """Section 3: the least accepted length that pays at each end of the batch grid and at the hardest batch."""
    return map_title(df, long=True)


def map_title(df: pd.DataFrame, *, long: bool = False) -> str:
    """Section 3's title: the accepted length from which speculation pays at the smallest batch and at the hardest
    one (:func:`~llmexplore.sweeps.speculative.breakeven_lengths`)."""
    pays = df[df["speedup"] > 1.0]
    if pays.empty:
        return "Speculation pays nowhere on this grid"
    need = breakeven_lengths(df)
    first = need.index.min()
    hardest = need.idxmax()
    head = ("Speculation pays wherever the map is blue" if long else "Speculation pays above the dashed line")
    text = f"{head}: at batch {first:,} from {num(need[first])} tokens per step"
    if hardest != first:
        text += (f", at batch {hardest:,} only from {num(need[hardest])}" if math.isfinite(need[hardest]) else
                 f", at batch {hardest:,} at no accepted length shown")
    last = need.index.max()
    if long and last not in (first, hardest):
        text += f", and at batch {last:,} from {num(need[last])}"
    return text + ("." if long else "")


def memory_sentence(mem: dict, s: SpecSetup) -> str:
    """Section 3: what the draft costs in memory."""
    return (f"The draft costs {num(mem['draft_weights_GB'])} GB of weights per GPU and {num(mem['draft_kv_MB_per_seq'])} "
            f"MB of KV per sequence at {s.context:,} tokens, and each sequence reserves {s.spec.verify_width - 1} "
            f"extra KV slot{'s' if s.spec.verify_width != 2 else ''} for its drafts: the largest batch falls from "
            f"{mem['max_batch_plain']:,} to {mem['max_batch_spec']:,} ({num(mem['batch_lost_pct'])}% fewer).")


def checks_sentence(checks: pd.DataFrame, *, short: bool = False) -> str:
    """Section 4: the largest error of each published study."""
    err = check_errors(checks)
    parts = [f"{study} {num(e)}%" for study, e in err.items()]
    if short:
        return f"Published speed-ups against the model: largest error {join(parts)}"
    worst = checks.loc[checks["error_pct"].abs().idxmax()]
    return (f"Against {len(checks)} published points from {len(err)} studies the largest errors are {join(parts)}. "
            f"The worst point is {worst['id']} (model {num(worst['model_value'])}, published {num(worst['published'])}, "
            f"{worst['error_pct']:+.1f}%): the model keeps more of the speed-up than the engines at long drafts and "
            "large batches, whose per-step launch and sampling costs it does not charge.")


def checks_title(checks: pd.DataFrame) -> str:
    return checks_sentence(checks, short=True)


def explorer_status(pt: dict, s: SpecSetup, cap: int) -> str:
    """The explorer's line: the speed-up at the chosen batch and acceptance."""
    fits = "" if pt["batch"] <= cap else f" <b>It does not fit in memory with the draft (at most {cap:,}).</b>"
    verdict = "pays" if pt["speedup"] > 1 else "does not pay"
    return (f"At batch {pt['batch']:,} and {num(pt['tokens_per_step'])} tokens per step, speculation {verdict}: "
            f"TPOT {num(pt['tpot_ms'])} ms against {num(pt['plain_tpot_ms'])} ms plain ({num(pt['speedup'])}x)." + fits)
