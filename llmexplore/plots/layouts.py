"""Figures of the attention-layout area: step time vs context, phase diagram, memory, switches, scheduler."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import TEMPLATE, base, ref_line  # noqa: F401

__all__ = ["LAYOUT_COLORS", "PART_COLORS", "step_time_figure", "phase_diagram_figure", "memory_figure",
           "transition_figure", "scheduler_figure", "policy_figure"]

LAYOUT_COLORS = {"TP": "#1f77b4", "CP": "#ff7f0e", "DPA": "#2ca02c", "DOP": "#9467bd", "none": "#d9d9d9"}
PART_COLORS = {"attention weights": "#4c78a8", "FFN/MoE weights": "#72b7b2", "embeddings + norms": "#b279a2",
               "KV cache": "#f58518", "activations": "#e45756", "runtime reserve": "#9d9d9d"}


def step_time_figure(curves: pd.DataFrame, *, title: str = "Decode step time vs context",
                     context_marker: float | None = None) -> go.Figure:
    """Step time (left) and its attention / communication parts (right) vs context, one colour per layout.

    ``curves``: rows of :func:`llmexplore.sweeps.layout_curves` for a single batch. Infeasible points are
    drawn dotted (they do not fit in memory).
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=("whole step", "attention kernels (solid), "
                                                        "communication (dashed)"), horizontal_spacing=0.1)
    for lay, g in curves.groupby("layout", sort=False):
        g = g.sort_values("context")
        col = LAYOUT_COLORS.get(lay, None)
        ok = g["feasible"].to_numpy()
        fig.add_scatter(x=g["context"], y=np.where(ok, g["step_ms"], np.nan), name=lay, mode="lines",
                        line=dict(color=col, width=2.5), legendgroup=lay, row=1, col=1)
        fig.add_scatter(x=g["context"], y=np.where(ok, np.nan, g["step_ms"]), name=f"{lay} (does not fit)",
                        mode="lines", line=dict(color=col, width=1.5, dash="dot"), legendgroup=lay,
                        showlegend=bool((~ok).any()), row=1, col=1)
        fig.add_scatter(x=g["context"], y=g["attention_ms"], name=f"{lay} attention", mode="lines",
                        line=dict(color=col), legendgroup=lay, showlegend=False, row=1, col=2)
        fig.add_scatter(x=g["context"], y=g["comm_ms"], name=f"{lay} communication", mode="lines",
                        line=dict(color=col, dash="dash"), legendgroup=lay, showlegend=False, row=1, col=2)
    if context_marker is not None:
        fig.add_vline(x=context_marker, line=dict(color="#555", dash="dash", width=1))
    for c in (1, 2):
        fig.update_xaxes(type="log", title_text="context length (tokens)", row=1, col=c)
    fig.update_yaxes(title_text="step time (ms)", type="log", row=1, col=1)
    fig.update_yaxes(title_text="time per step (ms)", type="log", row=1, col=2)
    return base(fig, title)


def phase_diagram_figure(phase: dict, *, title: str = "Best feasible layout") -> go.Figure:
    """Heatmap of the best layout over batch x context with the exact boundaries overlaid.

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
                        np.char.mod("%.2f ms", np.where(np.isfinite(phase["best_step_ms"]),
                                                        phase["best_step_ms"], np.nan)))
    fig = go.Figure(go.Heatmap(x=phase["context"], y=phase["batch"], z=z, zmin=-0.5, zmax=n - 0.5,
                               colorscale=scale, showscale=False, text=hover, hoverinfo="x+y+text",
                               opacity=0.55))
    for lab in labels:  # legend entries for the areas
        if (phase["best"] == lab).any():
            fig.add_scatter(x=[None], y=[None], mode="markers", name=lab,
                            marker=dict(symbol="square", size=12, color=LAYOUT_COLORS[lab]))
    bd = phase["boundaries"]
    if len(bd):
        for (before, after, kind), g in bd.groupby(["before", "after", "kind"], dropna=False, sort=False):
            g = g.sort_values("batch")
            name = f"{before} → {after if isinstance(after, str) else 'nothing fits'}"
            name += " (memory limit)" if kind == "memory" else ""
            fig.add_scatter(x=g["context"], y=g["batch"], mode="markers", name=name,
                            marker=dict(size=5, color="black" if kind == "crossover" else "#c00",
                                        symbol="circle" if kind == "crossover" else "x-thin-open",
                                        line=dict(width=1.5, color="#c00")))
    fig.update_xaxes(type="log", title_text="context length per sequence (tokens)")
    fig.update_yaxes(type="log", title_text="batch (sequences per step)")
    return base(fig, title, height=520)


def memory_figure(mem: pd.DataFrame, *, title: str = "Memory per rank (worst rank)") -> go.Figure:
    """Stacked bars of memory per rank by part for each layout, with the usable-HBM line.

    ``mem``: output of :func:`llmexplore.sweeps.memory_table`.
    """
    fig = go.Figure()
    for part, g in mem.groupby("part", sort=False):
        fig.add_bar(x=g["layout"], y=g["GB"], name=part, marker_color=PART_COLORS.get(part))
    usable = float(mem["usable_GB"].iloc[0])
    fig.add_hline(y=usable, line=dict(color="#c00", dash="dash"),
                  annotation_text=f"usable HBM {usable:.0f} GB", annotation_position="top left")
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="attention layout")
    fig.update_yaxes(title_text="memory per rank (GB)")
    return base(fig, title)


def transition_figure(table: pd.DataFrame, *, value: str = "exposed_ms",
                      title: str = "Layout switch cost (exposed handoff, ms)") -> go.Figure:
    """4x4 heatmap of switch cost from row layout to column layout, annotated with the KV and weight
    primitives. ``table``: output of :func:`llmexplore.sweeps.transition_table`."""
    order = list(dict.fromkeys(table["src"]))
    z = table.pivot(index="src", columns="dst", values=value).loc[order, order]
    prim = table.assign(label=lambda d: "KV " + d["kv_primitive"] + "<br>W " + d["weights_primitive"]
                        + "<br>" + d[value].map(lambda v: f"{v:.1f} ms"))
    text = prim.pivot(index="src", columns="dst", values="label").loc[order, order]
    fig = go.Figure(go.Heatmap(z=z.to_numpy(), x=order, y=order, text=text.to_numpy(), texttemplate="%{text}",
                               colorscale="Blues", colorbar=dict(title="ms"), hoverinfo="text"))
    fig.update_xaxes(title_text="switch to layout", side="top")
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
                text=[f"{t:,.0f} s" for t in summary["total_s"]], textposition="outside")
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="policy (static layouts cap the batch when it does not fit)")
    fig.update_yaxes(title_text="time (s)")
    return base(fig, title)
