"""Attention-layout sweeps: tidy tables of memory per rank and step time for TP, CP, DPA and DOP.

One row per (grid point, layout); input columns first, then outputs with units in their names. Infeasible
points keep their numbers but carry ``feasible = False`` and a human-readable ``reason``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..models import attention as att
from ..models import crossover, transitions
from ..models.engine import LAYOUTS, Deployment, check_batch_context
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
    """One row per policy of :func:`llmexplore.models.scheduler.compare_policies`, fastest first."""
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

    batch = _check.integer("batch", batch, lo=1, hi=att.MAX_BATCH)
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


# ---- findings in words and notebook parameters ------------------------------------------------------------
# The sentences each section of notebooks/10_attention_layouts.ipynb ends with, and the figure titles built
# from them (``short=True``): the headline number in words, computed from the same tables the figures show.


def _n(x: float, digits: int = 3) -> str:
    """A number for a sentence: thousands separators, ``digits`` significant digits (at least the integer
    part): 171.6 -> "172", 23.03 -> "23.0", 8.071 -> "8.07", 0.07361 -> "0.0736"."""
    x = float(x)
    if not np.isfinite(x):
        return "∞" if x > 0 else "n/a"
    if x == 0:
        return "0"
    places = max(0, digits - 1 - int(np.floor(np.log10(abs(x)))))
    return f"{x:,.{places}f}" if places <= 4 else f"{x:.{digits}g}"


def _ms(x: float) -> str:
    return f"{_n(x)} ms"


def _tokens(x: float) -> str:
    return f"{float(x):,.0f} tokens"


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def deployment_sentence(dep: Deployment) -> str:
    """Section 1: the deployment and its weights per rank by layout."""
    by = {lay: from_si(sum(dep.weight_bytes(lay).values()), "GB") for lay in LAYOUTS}
    groups: dict[str, list[str]] = {}
    for lay, gb in by.items():
        groups.setdefault(f"{gb:.1f}", []).append(lay)
    parts = [f"{gb} GB under {_join(lays)}" for gb, lays in groups.items()]
    parts[0] = parts[0].replace(" GB under", " GB of weights per rank under", 1)
    m = dep.model
    return (f"{m.label} ({m.attention.upper()}, {m.params_total / 1e9:,.0f}B parameters) on {dep.ranks} × "
            f"{dep.hardware.label} with {dep.weight_dtype.upper()} weights and {dep.kv_dtype.upper()} KV holds "
            f"{_join(parts)}, of {from_si(dep.usable_B, 'GB'):.1f} GB usable.")


def memory_sentence(table: pd.DataFrame, batch: int, context: float, *, short: bool = False) -> str:
    """Section 2: which layout needs the most memory per rank at the point, and what does not fit."""
    top = table.loc[table["total_GB"].idxmax()]
    low = table.loc[table["total_GB"].idxmin()]
    usable = float(table["usable_GB"].iloc[0])
    where = f"batch {batch:,} × {_tokens(context)}"
    if short:
        return f"{top['layout']} needs the most memory: {top['total_GB']:.1f} of {usable:.1f} GB per rank ({where})"
    bad = table[~table["feasible"]]["layout"].tolist()
    fits = "every layout fits" if not bad else (
        "nothing fits" if len(bad) == len(table) else f"{_join(bad)} {'does' if len(bad) == 1 else 'do'} not fit")
    return (f"At {where} {fits}: {top['layout']} needs the most memory, {top['total_GB']:.1f} GB per rank of "
            f"{usable:.1f} GB usable, and {low['layout']} the least, {low['total_GB']:.1f} GB.")


def best_layout_sentence(table: pd.DataFrame, boundaries: pd.DataFrame | None = None, *, batch: int | None = None,
                         context: float | None = None, short: bool = False) -> str:
    """Section 3: the fastest feasible layout at the point, its step time, and the boundaries around it, e.g.
    "DOP is fastest at 26.4 ms per step; TP overtakes it below 1,186 tokens".

    ``table``: :func:`layout_table` at (batch, context); ``boundaries``: :func:`boundaries_at` at that batch.
    """
    best = best_layout(table)
    at = f" at batch {batch:,} and {_tokens(context)}" if batch is not None and context is not None else ""
    if best is None:
        return f"Nothing fits{at}." if not short else f"Nothing fits{at}"
    t = float(table.loc[table["layout"] == best, "step_ms"].iloc[0])
    others = table[(table["layout"] != best) & table["feasible"]].sort_values("step_ms")
    around = []
    if boundaries is not None and len(boundaries) and context is not None:
        b = boundaries.sort_values("context")
        below = b[(b["context"] <= context) & (b["after"] == best) & (b["kind"] == "crossover")]
        above = b[(b["context"] > context) & (b["before"] == best)]
        if len(below):
            r = below.iloc[-1]
            around.append(f"{r['before']} overtakes it below {_tokens(r['context'])}")
        if len(above):
            r = above.iloc[0]
            if r["kind"] == "memory" and not isinstance(r["after"], str):
                around.append(f"it stops fitting above {_tokens(r['context'])}")
            elif r["kind"] == "memory":
                around.append(f"above {_tokens(r['context'])} it stops fitting and {r['after']} takes over")
            else:
                around.append(f"{r['after']} takes over above {_tokens(r['context'])}")
    if short:
        head = f"{best} is fastest at {_ms(t)} per step"
        return head + ("; " + around[0] if around else "")
    runner = f" (next: {others.iloc[0]['layout']}, {_ms(others.iloc[0]['step_ms'])})" if len(others) else ""
    text = f"{best} is fastest{at}, at {_ms(t)} per step{runner}"
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
    """Section 4: the best layout along the context axis at one batch, with the exact boundaries."""
    if not len(boundaries):
        return f"At batch {batch:,} the best layout does not change between {_tokens(s_lo)} and {_tokens(s_hi)}."
    b = boundaries.sort_values("context")
    first = b.iloc[0]["before"]
    parts = [f"{first} is best up to {_tokens(b.iloc[0]['context'])}"]
    for i in range(len(b)):
        r = b.iloc[i]
        end = b.iloc[i + 1]["context"] if i + 1 < len(b) else None
        if not isinstance(r["after"], str):
            parts.append("and beyond that nothing fits")
            break
        parts.append(f"then {r['after']}" + (f" up to {_tokens(end)}" if end is not None else
                                              f" up to {_tokens(s_hi)}"))
    return f"At batch {batch:,}, " + ", ".join(parts) + "."


def closed_form_sentence(dep: Deployment, tokens: float | None, boundaries: pd.DataFrame, batch: int) -> str:
    """Section 4: the MLA closed-form TP/DPA crossover next to the exact boundary of the full model."""
    if tokens is None:
        return (f"The closed form applies to MLA models only; {dep.model.label} uses "
                f"{dep.model.attention.upper()}.")
    exact = boundaries[(boundaries["before"] == "TP") & (boundaries["kind"] == "crossover")]
    model = (f"the full model has TP give way to {exact.iloc[0]['after']} at {_tokens(exact.iloc[0]['context'])}"
             if len(exact) else "in the full model TP never gives way on this axis")
    return (f"The closed form puts the TP/DPA crossover at B·s* = {_n(tokens)} context tokens per step "
            f"({_tokens(tokens / batch)} per sequence at batch {batch:,}); {model}.")


def contrast_sentence(dep: Deployment, phase: dict, batch: int, context: float) -> str:
    """Section 5: the grouped-query contrast case, its grid shares and its best layout at the point."""
    table = layout_table(dep, batch, context)
    m = dep.model
    why = f" (more ranks than its {m.kv_heads} KV heads)" if not m.is_mla and dep.ranks > m.kv_heads else ""
    point = best_layout_sentence(table, batch=batch, context=context)
    return (f"{m.label} on {dep.ranks} × {dep.hardware.label}{why}: {phase_sentence(phase, short=True)}; "
            f"{point[0].lower() + point[1:] if point.startswith('Nothing') else point}")


def transition_sentence(table: pd.DataFrame, *, short: bool = False) -> str:
    """Section 6: the most expensive switch (exposed handoff) and what the other direction costs."""
    moves = table[table["src"] != table["dst"]]
    worst = moves.loc[moves["exposed_ms"].idxmax()]
    dst = worst["dst"]
    into = moves[(moves["dst"] == dst) & np.isclose(moves["exposed_ms"], worst["exposed_ms"])]["src"].tolist()
    if short:
        return f"Switching into {dst} costs up to {_ms(worst['exposed_ms'])} of exposed handoff"
    out_of = moves[moves["src"] == dst]["exposed_ms"].max()
    other = moves[moves["dst"] != dst]["exposed_ms"].max()
    return (f"Switching into {dst} is the expensive direction: {_ms(worst['exposed_ms'])} of exposed handoff "
            f"from {_join(into)} (KV {worst['kv_primitive']}), while switching out of {dst} costs at most "
            f"{_ms(out_of)} and any switch not into {dst} at most {_ms(other)}.")


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
        return (f"Transition-aware: {_n(aware['total_s'])} s with {int(aware['switches'])} switches, "
                f"{versus(aware['total_s'], st['total_s'])} static {best_static}")
    return (f"On {trace} the transition-aware schedule takes {_n(aware['total_s'])} s with "
            f"{int(aware['switches'])} switches: {versus(aware['total_s'], st['total_s'])} the best static layout "
            f"({best_static}, {_n(st['total_s'])} s) and {versus(aware['total_s'], myopic['total_s'])} the myopic "
            f"schedule ({_n(myopic['total_s'])} s, {int(myopic['switches'])} switches).")


def schedule_title(result: dict, policy: str) -> str:
    """Title of a schedule figure: how often the policy switched and whether it had to cap the batch."""
    capped = int(result["capped_segments"])
    cap = f", capped the batch in {capped} segment{'s' * (capped != 1)}" if capped else ", never capped the batch"
    return f"The {policy} schedule switched layout {int(result['switches'])} times{cap}"


#: weight and KV dtypes the notebook (and its live explorer) offers
NOTEBOOK_DTYPES = ("bf16", "fp8")


def _preset_param(name: str, kind: str, value):
    """The preset of ``kind`` a notebook parameter names; SpecError naming the parameter and the choices."""
    from .. import presets
    from ..errors import SpecError, UnknownPresetError

    try:
        return presets.resolve(kind, value)
    except (UnknownPresetError, SpecError):
        raise SpecError(f"{name} must name a preset in data/{kind}.yaml ({', '.join(presets.names(kind))}), "
                        f"got {value!r}") from None


def _int_param(name: str, value, lo: int, hi: int) -> int:
    from .. import _check

    return _check.integer(name, value, lo=lo, hi=hi)


def _built(names: str, make, rename: dict[str, str] | None = None):
    """``make()`` with any error re-worded to name the notebook parameters involved: a message that starts
    with an argument in ``rename`` (``"ranks (3) must divide ..."``) gets the parameter's name instead."""
    from ..errors import LlmexploreError, SpecError

    try:
        return make()
    except LlmexploreError as exc:
        text = str(exc)
        arg = next((a for a in (rename or {}) if text.startswith(a + " ")), None)
        raise SpecError(rename[arg] + text[len(arg):] if arg else f"{names}: {text}") from None


def check_notebook_parameters(p) -> dict[str, str]:
    """Validate the parameters of ``notebooks/10_attention_layouts.ipynb`` (``{NAME: value}``).

    Raises SpecError naming the parameter, the value and the rule; returns ``{}`` (every valid value applies).
    Bounds keep a report run to minutes: at most 1,000 points per grid axis and 100,000 trace segments.
    """
    from .. import _check
    from ..errors import SpecError
    from ..models.engine import MAX_BATCH, MAX_CONTEXT, MAX_RANKS

    for name, kind in (("MODEL", "models"), ("GPU", "hardware"), ("GQA_MODEL", "models"), ("GQA_GPU", "hardware")):
        _preset_param(name, kind, p[name])
    for name in ("WEIGHT_DTYPE", "KV_DTYPE"):
        if not isinstance(p[name], str) or p[name] not in NOTEBOOK_DTYPES:
            raise SpecError(f"{name} must be one of {', '.join(NOTEBOOK_DTYPES)} (the dtypes this notebook and "
                            f"its explorer offer), got {p[name]!r}")
    for name in ("RANKS", "GQA_RANKS"):
        _int_param(name, p[name], 1, MAX_RANKS)
    _int_param("BATCH", p["BATCH"], 1, MAX_BATCH)
    _int_param("BATCH_MAX", p["BATCH_MAX"], 1, MAX_BATCH)
    _check.number("CONTEXT", p["CONTEXT"], lo=1, hi=MAX_CONTEXT)
    lo = _check.number("CONTEXT_MIN", p["CONTEXT_MIN"], lo=1, hi=MAX_CONTEXT)
    hi = _check.number("CONTEXT_MAX", p["CONTEXT_MAX"], lo=1, hi=MAX_CONTEXT)
    if hi <= lo:
        raise SpecError(f"CONTEXT_MAX must be greater than CONTEXT_MIN ({p['CONTEXT_MIN']!r}), got {p['CONTEXT_MAX']!r}")
    _int_param("N_CONTEXT", p["N_CONTEXT"], 2, 1000)
    _int_param("N_BATCH", p["N_BATCH"], 1, 1000)
    _int_param("TRACE_BATCH", p["TRACE_BATCH"], 1, 1 << 16)
    _int_param("TRACE_PROMPT", p["TRACE_PROMPT"], 1, MAX_CONTEXT)
    _check.number("TRACE_MEAN_OUTPUT", p["TRACE_MEAN_OUTPUT"], lo=1, hi=1 << 24)
    seg = _int_param("TRACE_SEGMENT", p["TRACE_SEGMENT"], 1, 1 << 24)
    if p["TRACE_MEAN_OUTPUT"] / seg > 100_000:
        raise SpecError(f"TRACE_SEGMENT must be at least TRACE_MEAN_OUTPUT / 100,000 (at most 100,000 segments "
                        f"per trace), got {seg!r}")
    _check.number("HORIZON_STEPS", p["HORIZON_STEPS"], lo=1, hi=1e12)
    _check.number("FLUCT_MEAN_BATCH", p["FLUCT_MEAN_BATCH"], lo=1, hi=MAX_BATCH)
    _check.number("FLUCT_BATCH_SD", p["FLUCT_BATCH_SD"], lo=0, hi=MAX_BATCH)
    _check.number("FLUCT_CONTEXT", p["FLUCT_CONTEXT"], lo=1, hi=MAX_CONTEXT)
    _int_param("FLUCT_SEGMENTS", p["FLUCT_SEGMENTS"], 1, 100_000)
    _int_param("FLUCT_SEGMENT_STEPS", p["FLUCT_SEGMENT_STEPS"], 1, 1 << 24)
    _int_param("SEED", p["SEED"], 0, 2**32 - 1)
    _built("MODEL, GPU, RANKS", lambda: Deployment.build(p["MODEL"], p["GPU"], p["RANKS"],
                                                          weight_dtype=p["WEIGHT_DTYPE"], kv_dtype=p["KV_DTYPE"]),
           {"ranks": "RANKS"})
    _built("GQA_MODEL, GQA_GPU, GQA_RANKS", lambda: Deployment.build(p["GQA_MODEL"], p["GQA_GPU"], p["GQA_RANKS"]),
           {"ranks": "GQA_RANKS"})
    return {}
