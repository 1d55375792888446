"""Figures of the attention-layout area: step time vs context, phase diagram, memory, switches, scheduler."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..labels import table_decoding
from . import (RANK_MARKER, RANK_SERIES, base, base_layout, distinct_labels, fmt, grid_layout, values_at,
               values_note,  # noqa: F401
               chosen_marker, not_fit_key, spec_builder)

__all__ = ["LAYOUT_COLORS", "LAYOUT_SYMBOLS", "PART_COLORS", "step_time_figure", "phase_diagram_figure",
           "memory_figure", "transition_figure", "scheduler_figure", "policy_figure"]

LAYOUT_COLORS = {"TP": "#1f77b4", "CP": "#ff7f0e", "DPA": "#2ca02c", "DOP": "#9467bd", "none": "#d9d9d9"}
#: a marker per layout, so that curves that coincide stay distinguishable
LAYOUT_SYMBOLS = {"TP": "circle", "CP": "square", "DPA": "diamond", "DOP": "triangle-up"}
PART_COLORS = {"attention weights": "#4c78a8", "FFN/MoE weights": "#72b7b2", "embeddings + norms": "#b279a2",
               "KV cache": "#f58518", "activations": "#e45756", "runtime reserve": "#9d9d9d",
               "draft weights": "#54a24b", "draft KV": "#eeca3b"}


@spec_builder
def step_time_figure(curves: pd.DataFrame, *, title: str = "Decode step time vs context",
                     context_marker: float | None = None) -> go.Figure:
    """Step time (left) and its attention / communication parts (right) vs context, one colour and marker per
    layout. ``curves``: rows of :func:`llmexplore.sweeps.layouts.layout_curves` for a single batch. Points
    that do not fit in memory are drawn dotted (with one legend entry saying so); ``context_marker`` adds a
    vertical "chosen context" line. ``step_time_figure.spec(...)`` gives the same figure as dicts. With a
    pipeline or speculative decoding (the ``decoding`` column) both panels are per output token.
    """
    per_token = table_decoding(curves) != ""
    panels = ("per output token" if per_token else "whole step",
              "attention (solid) and communication (dashed)")
    layout = base_layout(title, **grid_layout(2, panels))
    data, any_bad, finite = [], False, []
    for rank, (lay, g) in enumerate(curves.groupby("layout", sort=False), start=RANK_SERIES):
        g = g.sort_values("context")
        col = LAYOUT_COLORS.get(lay, None)
        ok = g["feasible"].to_numpy(bool)
        x = g["context"].to_numpy(float)
        step = g["tpot_ms"].to_numpy(float)
        any_bad = any_bad or bool((~ok).any())
        finite.append(step[np.isfinite(step)])
        marker = dict(color=col, symbol=LAYOUT_SYMBOLS.get(lay, "circle"), size=7, maxdisplayed=12)
        hover = f"{lay}: %{{y:,.3~r}} ms at %{{x:,.0f}} tokens"
        data += [
            dict(type="scatter", x=x, y=np.where(ok, step, np.nan), name=lay, mode="lines+markers",
                 line=dict(color=col, width=2.5), marker=marker, legendgroup=lay, legendrank=rank,
                 hovertemplate=hover + "<extra></extra>"),
            dict(type="scatter", x=x, y=np.where(ok, np.nan, step), name=f"{lay} (does not fit)",
                 mode="lines", line=dict(color=col, width=1.5, dash="dot"), legendgroup=lay, showlegend=False,
                 hovertemplate=hover + " (does not fit)<extra></extra>"),
            dict(type="scatter", x=x, y=g["attention_ms"].to_numpy(float), name=f"{lay} attention",
                 mode="lines+markers", line=dict(color=col), marker=marker, legendgroup=lay, showlegend=False,
                 xaxis="x2", yaxis="y2", hovertemplate=f"{lay} attention: %{{y:,.3~r}} ms<extra></extra>"),
            dict(type="scatter", x=x, y=g["comm_ms"].to_numpy(float), name=f"{lay} communication",
                 mode="lines", line=dict(color=col, dash="dash"), legendgroup=lay, showlegend=False, xaxis="x2", yaxis="y2",
                 hovertemplate=f"{lay} communication: %{{y:,.3~r}} ms<extra></extra>"),
        ]
    data.append(not_fit_key(any_bad))
    data += _band_traces(curves)
    if context_marker is not None:
        data.append(chosen_marker(context_marker, finite, what="context",
                                  hover=f"chosen context: {fmt(context_marker, 'tokens')}"))
        # the log axis squashes the few percent between layouts the title is about: state them
        fits = {lay: (g["context"].to_numpy(float), np.where(g["feasible"].to_numpy(bool), g["tpot_ms"], np.nan))
                for lay, g in curves.sort_values("context").groupby("layout", sort=False)}
        values_note(layout, values_at(fits, float(context_marker), "ms", what=fmt(context_marker, "tokens")))
    for ax in ("xaxis", "xaxis2"):
        layout[ax].update(type="log", title=dict(text="context length (tokens)"))
    layout["yaxis"].update(type="log", title=dict(text="time per output token (ms)" if per_token
                                                  else "step time (ms)"))
    layout["yaxis2"].update(type="log", title=dict(text="time per output token (ms)" if per_token
                                                   else "time per step (ms)"))
    return {"data": data, "layout": layout}


def _band_traces(curves: pd.DataFrame) -> list[dict]:
    """Shaded P10-P90 bands of the time per output token (columns ``tpot_ms_lo`` / ``tpot_ms_hi``, from
    :func:`llmexplore.sweeps.bands.curves_with_band`) where they have width; one legend entry for all."""
    if "tpot_ms_lo" not in curves.columns:
        return []
    out, first = [], True
    for lay, g in curves.groupby("layout", sort=False):
        g = g.sort_values("context")
        ok = g["feasible"].to_numpy(bool) & np.isfinite(g["tpot_ms_lo"].to_numpy(float))
        lo, hi = g["tpot_ms_lo"].to_numpy(float)[ok], g["tpot_ms_hi"].to_numpy(float)[ok]
        if not ok.any() or not np.any(hi > lo):
            continue
        x = g["context"].to_numpy(float)[ok]
        out.append(dict(type="scatter", x=np.concatenate([x, x[::-1]]), y=np.concatenate([hi, lo[::-1]]),
                        fill="toself", fillcolor=_translucent(LAYOUT_COLORS.get(lay, "#888888")),
                        line=dict(width=0), mode="lines", hoverinfo="skip", legendgroup="band",
                        name="P10-P90 over kernel-parameter draws" if first else f"{lay} band", showlegend=first))
        first = False
    return out


def _translucent(color: str, alpha: float = 0.18) -> str:
    """A hex colour (#rrggbb) as rgba with ``alpha``; other colour strings pass through."""
    if isinstance(color, str) and color.startswith("#") and len(color) == 7:
        r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
        return f"rgba({r},{g},{b},{alpha})"
    return color


#: marker symbols of the crossover boundaries, one per (before, after) pair in order: kinds stay apart in
#: black and white; the memory limits keep their red crosses
_BOUNDARY_SYMBOLS = ["circle", "diamond", "square", "triangle-up", "triangle-down", "pentagon", "hexagon", "star-square"]


def phase_diagram_figure(phase: dict, *, title: str = "Best feasible layout",
                         here: tuple[float, float] | None = None) -> go.Figure:
    """Heatmap of the best layout over batch x context with the exact boundaries overlaid, each crossover
    (from one layout to another) with its own marker, and ``here`` = (context, batch) the chosen point.

    ``phase``: output of :func:`llmexplore.sweeps.phase_diagram`.
    """
    labels = [lay for lay in LAYOUT_COLORS if lay != "none"] + ["none"]
    code = {lab: i for i, lab in enumerate(labels)}
    z = np.vectorize(code.get)(phase["best"]).astype(float)
    n = len(labels)
    scale = []
    for i, lab in enumerate(labels):
        scale += [[i / n, LAYOUT_COLORS[lab]], [(i + 1) / n, LAYOUT_COLORS[lab]]]
    hover = np.char.add(np.char.add(phase["best"].astype(str), ": "),
                        np.char.mod("%.2f ms" + (" per token" if phase.get("decoding") else ""),
                                    np.where(np.isfinite(phase["best_step_ms"]), phase["best_step_ms"], np.nan)))
    fig = go.Figure(go.Heatmap(x=phase["context"], y=phase["batch"], z=z, zmin=-0.5, zmax=n - 0.5,
                               colorscale=scale, showscale=False, text=hover, hoverinfo="x+y+text",
                               opacity=0.55))
    for lab in labels:  # legend entries for the areas
        if (phase["best"] == lab).any():
            fig.add_scatter(x=[None], y=[None], mode="markers", name=lab,
                            marker=dict(symbol="square", size=12, color=LAYOUT_COLORS[lab]))
    bd = phase["boundaries"]
    if len(bd):
        k = 0
        for (before, after, kind), g in bd.groupby(["before", "after", "kind"], dropna=False, sort=False):
            g = g.sort_values("batch")
            name = f"{before} → {after if isinstance(after, str) else 'nothing fits'}"
            name += " (memory limit)" if kind == "memory" else ""
            if kind == "crossover":
                marker = dict(size=7, color=LAYOUT_COLORS.get(after, "black"),
                              symbol=_BOUNDARY_SYMBOLS[k % len(_BOUNDARY_SYMBOLS)], line=dict(width=1, color="black"))
                k += 1
            else:
                marker = dict(size=6, color="#c00", symbol="x-thin-open", line=dict(width=1.5, color="#c00"))
            fig.add_scatter(x=g["context"], y=g["batch"], mode="markers", name=name, marker=marker)
    if here is not None:
        ctx, batch = here
        fig.add_scatter(x=[ctx], y=[batch], mode="markers", name=f"chosen point: batch {fmt(batch)}, context {fmt(ctx)}",
                        marker=dict(symbol="star", size=16, color="white", line=dict(width=2, color="black")),
                        legendrank=RANK_MARKER)
    fig.update_xaxes(type="log", title_text="context length per sequence (tokens)")
    fig.update_yaxes(type="log", title_text="batch (sequences per step)")
    return base(fig, title, height=520)


@spec_builder
def memory_figure(mem: pd.DataFrame, *, title: str = "Memory per rank (worst rank)") -> go.Figure:
    """Stacked bars of memory per rank by part for each layout, the total above each bar (and "does not fit"
    where it exceeds the usable HBM), and the usable-HBM line with its legend entry and value.

    ``mem``: output of :func:`llmexplore.sweeps.layouts.memory_table`.
    """
    order = list(dict.fromkeys(mem["layout"]))
    data = []
    for part, g in mem.groupby("part", sort=False):
        data.append(dict(type="bar", x=g["layout"].tolist(), y=g["GB"].to_numpy(float), name=part,
                         marker=dict(color=PART_COLORS.get(part)),
                         hovertemplate=f"{part}: %{{y:,.1f}} GB<extra>%{{x}}</extra>"))
    usable = float(mem["usable_GB"].iloc[0])
    totals = mem.groupby("layout", sort=False)["GB"].sum().reindex(order).to_numpy(float)
    fits = (mem.groupby("layout", sort=False)["feasible"].all().reindex(order).to_numpy(bool)
            if "feasible" in mem else totals <= usable)
    data.append(dict(type="scatter", x=order, y=totals, mode="text", name="total per rank", showlegend=False,
                     text=[fmt(t, "GB") + ("" if ok else "<br><b>does not fit</b>")
                           for t, ok in zip(totals, fits)],
                     textposition="top center", hoverinfo="skip", cliponaxis=False))
    # the usable line spans the whole plot: drawn on a hidden [0, 1] axis laid over the categorical one
    data.append(dict(type="scatter", x=[0, 1], y=[usable, usable], xaxis="x2", mode="lines",
                     name="usable HBM per rank", line=dict(color="#c00", dash="dash", width=2),
                     hovertemplate=f"usable HBM {fmt(usable, 'GB')} per rank<extra></extra>"))
    top = max(float(np.nanmax(totals)) if totals.size else 0.0, usable) * 1.18
    layout = base_layout(title, barmode="stack",
                         xaxis=dict(title=dict(text="attention layout")),
                         xaxis2=dict(overlaying="x", range=[0, 1], visible=False, fixedrange=True),
                         yaxis=dict(title=dict(text="memory per rank (GB)"), range=[0, top]),
                         annotations=[dict(text=f"usable {fmt(usable, 'GB')}", xref="paper", x=1,
                                           xanchor="right", yref="y", y=usable, yanchor="bottom",
                                           showarrow=False, font=dict(color="#c00"))])
    return {"data": data, "layout": layout}


def transition_figure(table: pd.DataFrame, *, value: str = "exposed_ms",
                      title: str = "Layout switch cost (exposed handoff, ms)") -> go.Figure:
    """4x4 heatmap of switch cost from row layout to column layout, annotated with the KV and weight
    primitives. ``table``: output of :func:`llmexplore.sweeps.transition_table`."""
    order = list(dict.fromkeys(table["src"]))
    z = table.pivot(index="src", columns="dst", values=value).loc[order, order]
    prim = table.assign(label=lambda d: "KV " + d["kv_primitive"] + "<br>W " + d["weights_primitive"]
                        + "<br>" + d[value].map(lambda v: f"{v:.1f} ms"))
    text = prim.pivot(index="src", columns="dst", values="label").loc[order, order]
    # a log colour scale: switch costs span decades, and a linear one paints every small cell the same white
    zv = z.to_numpy(dtype=float)
    pos = zv[np.isfinite(zv) & (zv > 0)]
    with np.errstate(divide="ignore", invalid="ignore"):
        zl = np.where(zv > 0, np.log10(zv), np.nan)
    decades = (np.arange(np.floor(np.log10(pos.min())), np.ceil(np.log10(pos.max())) + 1) if pos.size
               else np.array([0.0]))
    fig = go.Figure(go.Heatmap(z=zl, x=order, y=order, text=text.to_numpy(), texttemplate="%{text}",
                               colorscale="Blues", hoverinfo="text",
                               colorbar=dict(title="ms (log)", tickvals=decades.tolist(),
                                             ticktext=[fmt(10.0 ** k, "ms") for k in decades])))
    fig.update_xaxes(title_text="switch to layout")  # at the bottom: a top axis title collides with the title
    fig.update_yaxes(title_text="switch from layout", autorange="reversed")
    return base(fig, title, height=480)


def scheduler_figure(trace: dict, result: dict, *, title: str = "Transition-aware schedule") -> go.Figure:
    """Batch and context over the trace (top) and the layout chosen per segment (bottom)."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.6, 0.4], vertical_spacing=0.08,
                        specs=[[{"secondary_y": True}], [{}]])
    x = trace["start_step"]
    fig.add_scatter(x=x, y=trace["batch"], name="active sequences", line=dict(color="#333"), row=1, col=1)
    fig.add_scatter(x=x, y=trace["context"], name="context (tokens)", line=dict(color="#888", dash="dash"),
                    row=1, col=1, secondary_y=True)
    lay = result["layout"]
    for name in dict.fromkeys(lay):
        sel = lay == name
        fig.add_scatter(x=x[sel], y=[name] * int(sel.sum()), mode="markers", name=f"runs {name}",
                        marker=dict(color=LAYOUT_COLORS.get(name), size=7, symbol="square"), row=2, col=1)
    sw = result["switched"]
    if sw.any():
        fig.add_scatter(x=x[sw], y=list(lay[sw]), mode="markers", name="switch (handoff paid)",
                        marker=dict(color="black", size=11, symbol="x-thin-open", line=dict(width=2)),
                        row=2, col=1)
    if result["capped"].any():
        fig.add_scatter(x=x[result["capped"]], y=list(lay[result["capped"]]), mode="markers",
                        name="batch capped (does not fit)", marker=dict(color="#c00", size=9,
                                                                         symbol="triangle-down"), row=2, col=1)
    fig.update_yaxes(title_text="active sequences", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="context (tokens)", rangemode="tozero", row=1, col=1, secondary_y=True)
    fig.update_yaxes(title_text="layout", row=2, col=1)
    fig.update_xaxes(title_text="decode step", row=2, col=1)
    return base(fig, title, height=520)


def policy_figure(summary: pd.DataFrame, *, title: str = "Total decode time of the trace by policy") -> go.Figure:
    """Bars of total time (compute + handoff) per policy; ``summary`` from
    :func:`llmexplore.sweeps.policy_summary`."""
    fig = go.Figure()
    fig.add_bar(x=summary["policy"], y=summary["compute_s"], name="decode steps",
                marker_color=[LAYOUT_COLORS.get(p, "#444") for p in summary["policy"]])
    fig.add_bar(x=summary["policy"], y=summary["handoff_s"], name="handoffs", marker_color="#000",
                text=distinct_labels(summary["total_s"], "s"), textposition="outside")
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="policy (static layouts cap the batch when it does not fit)")
    fig.update_yaxes(title_text="time (s)")
    return base(fig, title)
