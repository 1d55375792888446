"""Findings of notebooks/10_attention_layouts.ipynb: the deployment, memory, step time, phase diagram, GQA contrast, switches and the scheduler."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..models.step.engine import LAYOUTS, Deployment
from ..models.step.per_token import check_decoding, token_memory
from ..models.step.pipeline import stage_layers
from ..sweeps.layouts import best_layout, layout_table
from ..units import from_si
from . import in_ms, in_tokens, join, num

__all__ = ["deployment_sentence", "memory_sentence", "best_layout_sentence", "phase_sentence", "boundaries_sentence", "closed_form_sentence", "contrast_sentence", "transition_sentence", "policy_sentence", "schedule_title"]


def deployment_sentence(dep: Deployment, *, pp=1, speculative=None) -> str:
    """Section 1: the deployment and its weights per rank by layout (the worst pipeline stage's, the draft's
    included), and how it decodes."""
    p, spec = check_decoding(dep, pp, speculative)
    by = {lay: from_si(float(token_memory(dep, 1, 1, lay, pp=p, speculative=spec)["weights_B"]), "GB")
          for lay in LAYOUTS}
    groups: dict[str, list[str]] = {}
    for lay, gb in by.items():
        groups.setdefault(f"{gb:.1f}", []).append(lay)
    parts = [f"{gb} GB under {join(lays)}" for gb, lays in groups.items()]
    parts[0] = parts[0].replace(" GB under", " GB of weights per rank under", 1)
    m = dep.model
    how = ""
    if p > 1:
        how = (f" It decodes in a pipeline of {p} stages of {dep.ranks} GPUs ({p * dep.ranks} in all; up to "
               f"{max(stage_layers(m, p))} layers a stage), so every time below is the time between a sequence's "
               "tokens and the batch is the pipeline's, dealt over its micro-batches.")
    elif spec is not None:
        how = (f" It decodes speculatively with {spec.name} ({spec.method}, {spec.draft_tokens} draft "
               f"token{'s' * (spec.draft_tokens != 1)}, {spec.tokens_per_step:.2f} tokens per verify step: "
               f"{spec.conditions}), so every time below is per output token and the weights include the draft's.")
    return (f"{m.label} ({m.attention.upper()}, {m.params_total / 1e9:,.0f}B parameters) on {dep.ranks} × "
            f"{dep.hardware.label} with {dep.weight_dtype.upper()} weights and {dep.kv_dtype.upper()} KV holds "
            f"{join(parts)}, of {from_si(dep.usable_B, 'GB'):.1f} GB usable.{how}")


def memory_sentence(table: pd.DataFrame, batch: int, context: float, *, short: bool = False) -> str:
    """Section 2: which layout needs the most memory per rank at the point, and what does not fit."""
    top = table.loc[table["total_GB"].idxmax()]
    low = table.loc[table["total_GB"].idxmin()]
    usable = float(table["usable_GB"].iloc[0])
    where = f"batch {batch:,} × {in_tokens(context)}"
    if short:
        return f"{top['layout']} needs the most memory: {top['total_GB']:.1f} of {usable:.1f} GB per rank ({where})"
    bad = table[~table["feasible"]]["layout"].tolist()
    fits = "every layout fits" if not bad else (
        "nothing fits" if len(bad) == len(table) else f"{join(bad)} {'does' if len(bad) == 1 else 'do'} not fit")
    return (f"At {where} {fits}: {top['layout']} needs the most memory, {top['total_GB']:.1f} GB per rank of "
            f"{usable:.1f} GB usable, and {low['layout']} the least, {low['total_GB']:.1f} GB.")


def best_layout_sentence(table: pd.DataFrame, boundaries: pd.DataFrame | None = None, *, batch: int | None = None,
                         context: float | None = None, short: bool = False) -> str:
    """Section 3: the fastest feasible layout at the point, its step time, and the boundaries around it, e.g.
    "DOP is fastest at 26.4 ms per step; TP overtakes it below 1,186 tokens".

    ``table``: :func:`layout_table` at (batch, context); ``boundaries``: :func:`boundaries_at` at that batch.
    """
    best = best_layout(table)
    at = f" at batch {batch:,} and {in_tokens(context)}" if batch is not None and context is not None else ""
    if best is None:
        return f"Nothing fits{at}." if not short else f"Nothing fits{at}"
    per = "per output token" if "decoding" in table.columns and str(table["decoding"].iloc[0]) else "per step"
    t = float(table.loc[table["layout"] == best, "tpot_ms"].iloc[0])
    others = table[(table["layout"] != best) & table["feasible"]].sort_values("tpot_ms")
    around = []
    if boundaries is not None and len(boundaries) and context is not None:
        b = boundaries.sort_values("context")
        below = b[(b["context"] <= context) & (b["after"] == best) & (b["kind"] == "crossover")]
        above = b[(b["context"] > context) & (b["before"] == best)]
        def unresolved(r) -> bool:  # a banded crossover the kernel-parameter draws cannot place
            return "resolved" in r.index and r["kind"] == "crossover" and not bool(r["resolved"])

        if len(below):
            r = below.iloc[-1]
            around.append(f"where {r['before']} overtakes it is not resolved by the model" if unresolved(r) else
                          f"{r['before']} overtakes it below {in_tokens(r['context'])}")
        if len(above):
            r = above.iloc[0]
            if r["kind"] == "memory" and not isinstance(r["after"], str):
                around.append(f"it stops fitting above {in_tokens(r['context'])}")
            elif r["kind"] == "memory":
                around.append(f"above {in_tokens(r['context'])} it stops fitting and {r['after']} takes over")
            elif unresolved(r):
                around.append(f"where {r['after']} takes over is not resolved by the model")
            else:
                around.append(f"{r['after']} takes over above {in_tokens(r['context'])}")
    if short:
        head = f"{best} is fastest at {in_ms(t)} {per}"
        return head + ("; " + around[0] if around else "")
    runner = f" (next: {others.iloc[0]['layout']}, {in_ms(others.iloc[0]['tpot_ms'])})" if len(others) else ""
    text = f"{best} is fastest{at}, at {in_ms(t)} {per}{runner}"
    return text + ("; " + " and ".join(around) if around else "") + "."


def phase_sentence(phase: dict, *, short: bool = False, subject: str = "") -> str:
    """Section 4 and 5: how much of the batch x context grid each layout wins (and where nothing fits);
    ``subject`` (e.g. the model's name) starts the sentence."""
    best = np.asarray(phase["best"])
    labels, counts = np.unique(best, return_counts=True)
    share = {str(lab): 100.0 * c / best.size for lab, c in zip(labels, counts)}
    order = [lab for lab in sorted(share, key=share.get, reverse=True) if lab != "none"]
    b, s = np.asarray(phase["batch"]), np.asarray(phase["context"])
    if not order:
        return "Nothing fits anywhere on the grid."
    top = order[0]
    lead = f"{subject}: " if subject else ""
    if short:
        return f"{lead}{top} is the best layout on {share[top]:.0f}% of the batch × context grid"
    rest = [f"{lab} {share[lab]:.0f}%" for lab in order[1:]]
    none = f"; nothing fits on {share['none']:.0f}%" if "none" in share else ""
    return (f"{lead}Over batches {b.min():,.0f}–{b.max():,.0f} and contexts {s.min():,.0f}–{s.max():,.0f} tokens, "
            f"{top} is the best layout on {share[top]:.0f}% of the grid"
            + (f" ({', '.join(rest)})" if rest else "") + f"{none}.")


def boundaries_sentence(boundaries: pd.DataFrame, batch: int, s_lo: float, s_hi: float) -> str:
    """Section 4: the best layout along the context axis at one batch, with the exact boundaries. With the
    columns of :func:`llmexplore.sweeps.bands.boundary_bands`, each crossover also gets its parameter band, and
    one the model cannot place is said to be not resolved instead of given as a number."""
    if not len(boundaries):
        return f"At batch {batch:,} the best layout does not change between {in_tokens(s_lo)} and {in_tokens(s_hi)}."
    b = boundaries.sort_values("context")
    banded = "resolved" in b.columns

    def at(r) -> str:
        if banded and r["kind"] == "crossover":
            if not bool(r["resolved"]):
                return "a crossover not resolved by the model (its band spans the axis)"
            if r["context_hi"] > r["context_lo"]:
                return f"{in_tokens(r['context'])} [{num(r['context_lo'])}-{num(r['context_hi'])}]"
        return in_tokens(r["context"])

    first = b.iloc[0]["before"]
    parts = [f"{first} is best up to {at(b.iloc[0])}"]
    for i in range(len(b)):
        r = b.iloc[i]
        if not isinstance(r["after"], str):
            parts.append("and beyond that nothing fits")
            break
        parts.append(f"then {r['after']}" + (f" up to {at(b.iloc[i + 1])}" if i + 1 < len(b) else
                                              f" up to {in_tokens(s_hi)}"))
    text = f"At batch {batch:,}, " + ", ".join(parts) + "."
    cross = b[b["kind"] == "crossover"] if banded else b.iloc[:0]
    if len(cross) and ((cross["context_hi"] > cross["context_lo"]) | ~cross["resolved"].astype(bool)).any():
        text += (" Brackets: P10-P90 of the crossover over 16 draws of the kernel curves' parameters; memory limits "
                 "do not depend on them.")
    return text


def closed_form_sentence(dep: Deployment, tokens: float | None, boundaries: pd.DataFrame, batch: int, *,
                         decoding: str = "") -> str:
    """Section 4: the MLA closed-form TP/DPA crossover next to the exact boundary of the full model (``decoding``:
    the boundaries' pipeline or speculative preset, '' for plain decoding, which the closed form assumes)."""
    if tokens is None:
        return (f"The closed form applies to MLA models only; {dep.model.label} uses "
                f"{dep.model.attention.upper()}.")
    exact = boundaries[(boundaries["before"] == "TP") & (boundaries["kind"] == "crossover")]
    model = (f"the full model has TP give way to {exact.iloc[0]['after']} at {in_tokens(exact.iloc[0]['context'])}"
             if len(exact) else "in the full model TP never gives way on this axis")
    if decoding:
        model += f" with {decoding} (the closed form is for plain decoding)"
    return (f"The closed form puts the TP/DPA crossover at B·s* = {num(tokens)} context tokens per step "
            f"({in_tokens(tokens / batch)} per sequence at batch {batch:,}); {model}.")


def contrast_sentence(dep: Deployment, phase: dict, batch: int, context: float, *, pp=1,
                      speculative=None, asked=None) -> str:
    """Section 5: the grouped-query contrast case, its grid shares and its best layout at the point; ``asked``:
    the speculative decoding of the main deployment, said to be left out when ``dep``'s model cannot run its draft
    (:func:`llmexplore.sweeps.layouts.contrast_decoding`)."""
    table = layout_table(dep, batch, context, pp=pp, speculative=speculative)
    m = dep.model
    why = f" (more ranks than its {m.kv_heads} KV heads)" if not m.is_mla and dep.ranks > m.kv_heads else ""
    point = best_layout_sentence(table, batch=batch, context=context)
    plain = ""
    if asked is not None and speculative is None:
        plain = f" It decodes without speculation: {asked.name}'s MTP draft needs an MTP module, and {m.label} has none."
    return (f"{m.label} on {dep.ranks} × {dep.hardware.label}{why}: {phase_sentence(phase, short=True)}; "
            f"{point[0].lower() + point[1:] if point.startswith('Nothing') else point}{plain}")


def transition_sentence(table: pd.DataFrame, *, short: bool = False) -> str:
    """Section 6: the most expensive switch (exposed handoff) and what the other direction costs."""
    moves = table[table["src"] != table["dst"]]
    worst = moves.loc[moves["exposed_ms"].idxmax()]
    dst = worst["dst"]
    into = moves[(moves["dst"] == dst) & np.isclose(moves["exposed_ms"], worst["exposed_ms"])]["src"].tolist()
    if short:
        return f"Switching into {dst} costs up to {in_ms(worst['exposed_ms'])} of exposed handoff"
    out_of = moves[moves["src"] == dst]["exposed_ms"].max()
    other = moves[moves["dst"] != dst]["exposed_ms"].max()
    return (f"Switching into {dst} is the expensive direction: {in_ms(worst['exposed_ms'])} of exposed handoff "
            f"from {join(into)} (KV {worst['kv_primitive']}), while switching out of {dst} costs at most "
            f"{in_ms(out_of)} and any switch not into {dst} at most {in_ms(other)}.")


def policy_sentence(policies: pd.DataFrame, *, trace: str = "the reasoning trace", short: bool = False) -> str:
    """Section 7: the transition-aware schedule against the myopic one and the best static layout."""
    p = policies.set_index("policy")
    static = p.loc[[lay for lay in LAYOUTS if lay in p.index]]
    best_static = static["total_s"].idxmin()
    aware, myopic, st = p.loc["aware"], p.loc["myopic"], static.loc[best_static]
    def versus(t, ref):
        pct = 100.0 * (t / ref - 1)
        return "level with" if abs(pct) < 0.05 else f"{abs(pct):.1f}% {'slower' if pct > 0 else 'faster'} than"

    if short:
        return (f"Transition-aware: {num(aware['total_s'])} s with {int(aware['switches'])} switches, "
                f"{versus(aware['total_s'], st['total_s'])} static {best_static}")
    return (f"On {trace} the transition-aware schedule takes {num(aware['total_s'])} s with "
            f"{int(aware['switches'])} switches: {versus(aware['total_s'], st['total_s'])} the best static layout "
            f"({best_static}, {num(st['total_s'])} s) and {versus(aware['total_s'], myopic['total_s'])} the myopic "
            f"schedule ({num(myopic['total_s'])} s, {int(myopic['switches'])} switches).")


def schedule_title(result: dict, policy: str) -> str:
    """Title of a schedule figure: how often the policy switched and whether it had to cap the batch."""
    capped = int(result["capped_segments"])
    cap = f", capped the batch in {capped} segment{'s' * (capped != 1)}" if capped else ", never capped the batch"
    return f"The {policy} schedule switched layout {int(result['switches'])} times{cap}"


def switches(results: dict, policies=("aware", "myopic")) -> dict:
    """Layout switches per policy of a schedule comparison (``{policy: result}`` of the policy sweep)."""
    return {p: results[p]["switches"] for p in policies}


__all__ += ['switches']
