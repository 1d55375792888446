"""Figures of the MoE area: step time vs skew, load per EP rank, where a MoE layer's time goes, the scenario.

A table decoded with a pipeline or speculatively (its ``decoding`` column not empty) is drawn by its time per output
token (``tpot_ms``), and the axes say so; per-MoE-layer times are of one pass (a micro-batch's step, the verify
pass)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..labels import table_decoding
from . import (RANK_MARKER, RANK_SERIES, TEMPLATE, base, base_layout, fmt, grid_layout,  # noqa: F401
               chosen_marker, fit_split, not_fit_key, ref_line, ref_trace, spec_builder, values_at, values_note)

__all__ = ["PLACEMENT_COLORS", "skew_figure", "rank_load_figure", "comm_figure", "scenario_figure"]

PLACEMENT_COLORS = {"static placement": "#d62728", "EPLB, no redundancy": "#ff7f0e", "static": "#d62728",
                    "no expert parallelism": "#7f7f7f"}


def _placement_color(name: str) -> str:
    return PLACEMENT_COLORS.get(name, "#1f77b4")


def _time_col(df: pd.DataFrame) -> str:
    """``tpot_ms`` for a pipeline or speculative decoding, ``step_ms`` (the same number) for plain decoding."""
    return "tpot_ms" if table_decoding(df) else "step_ms"


def _layer_panel(df: pd.DataFrame) -> str:
    d = table_decoding(df)
    return "one MoE layer" if not d else ("one MoE layer (a micro-batch)" if d.startswith("PP")
                                          else "one MoE layer (verify pass)")


#: dash pattern and marker per placement (in table order), so that curves that coincide stay distinguishable;
#: dotted is kept for "does not fit in memory"
_PLACEMENT_STYLE = [("solid", "circle"), ("dash", "square"), ("dashdot", "diamond"),
                    ("longdash", "triangle-up")]


@spec_builder
def skew_figure(df: pd.DataFrame, *, title: str = "Decode step vs hot-expert skew",
                skew_marker: float | None = None) -> go.Figure:
    """Step time (left; the time per output token with a pipeline or speculative decoding) and MoE-layer time
    (right, one pass's) vs skew per placement; ``df`` from :func:`llmexplore.sweeps.moe.step_vs_skew`. A placement
    whose batch does not fit in memory is dotted (one legend entry says so); ``skew_marker`` adds a vertical
    "chosen skew" line."""
    ycol, per_token = _time_col(df), bool(table_decoding(df))
    layout = base_layout(title, **grid_layout(2, ("per output token" if per_token else "whole decode step",
                                                  _layer_panel(df))))
    data, any_bad, finite = [], False, []
    for i, (name, g) in enumerate(df.groupby("placement", sort=False)):
        col = _placement_color(name)
        dash, symbol = _PLACEMENT_STYLE[i % len(_PLACEMENT_STYLE)]
        fits = bool(g["feasible"].all()) if "feasible" in g else True
        any_bad = any_bad or not fits
        label = name if fits else f"{name} (does not fit)"
        line = dict(color=col, width=2.5, dash=dash if fits else "dot")
        marker = dict(color=col, symbol=symbol, size=7, maxdisplayed=12)
        x, step = g["skew"].to_numpy(float), g[ycol].to_numpy(float)
        finite.append(step)
        data += [
            dict(type="scatter", x=x, y=step, name=name, mode="lines+markers", line=line, marker=marker,
                 legendgroup=name, legendrank=RANK_SERIES + i,
                 hovertemplate=f"{label}: %{{y:,.3~r}} ms at skew %{{x:.2f}}<extra></extra>"),
            dict(type="scatter", x=x, y=g["moe_layer_us"].to_numpy(float), name=f"{name} · MoE layer",
                 mode="lines+markers", line=line, marker=marker, legendgroup=name, showlegend=False,
                 xaxis="x2", yaxis="y2",
                 hovertemplate=f"{label}: MoE layer %{{y:,.3~r}} µs at skew %{{x:.2f}}<extra></extra>"),
        ]
    data.append(not_fit_key(any_bad))
    if skew_marker is not None:
        data.append(chosen_marker(skew_marker, finite, what="skew",
                                  hover=f"chosen skew: {fmt(skew_marker, trim=True)}×"))
    for ax in ("xaxis", "xaxis2"):
        layout[ax].update(title=dict(text="skew (max / mean expert load)"))
    layout["yaxis"].update(title=dict(text="time per output token (ms)" if per_token else "step time (ms)"))
    layout["yaxis2"].update(title=dict(text="MoE layer (µs)"))
    return {"data": data, "layout": layout}


@spec_builder
def rank_load_figure(df: pd.DataFrame, *, title: str = "Routed tokens per EP rank, busiest first",
                     rank_title: str = "EP rank (sorted by load)") -> go.Figure:
    """Relative load per EP rank (1 = balanced) before and after rebalancing; ``df`` from
    :func:`llmexplore.sweeps.moe.rank_loads` (or :func:`~llmexplore.sweeps.moe.gpu_loads`, which also covers
    pure TP, one bar per GPU). ``rank_title`` names the x axis."""
    data = []
    for i, (name, g) in enumerate(df.groupby("placement", sort=False)):
        data.append(dict(type="bar", x=g["rank_by_load"].to_numpy(), y=g["relative_load"].to_numpy(float),
                         name=name, marker=dict(color=_placement_color(name)), legendrank=RANK_SERIES + i,
                         hovertemplate=f"{name}: %{{y:.3f}} × the mean load<extra>rank %{{x}}</extra>"))
    lo_x, hi_x = float(df["rank_by_load"].min()) - 0.5, float(df["rank_by_load"].max()) + 0.5
    data.append(dict(type="scatter", x=[lo_x, hi_x], y=[1, 1], mode="lines", name="balanced (mean load)",
                     line=dict(color="#333", dash="dash"), hoverinfo="name", legendrank=RANK_MARKER))
    lo, hi = float(df["relative_load"].min()), float(df["relative_load"].max())
    layout = base_layout(title, barmode="group",
                         xaxis=dict(title=dict(text=rank_title), dtick=1, range=[lo_x, hi_x]),
                         yaxis=dict(title=dict(text="load / mean load"),
                                    range=[min(0.8, lo - 0.02), max(1.1, hi + 0.05)]))
    return {"data": data, "layout": layout}


def comm_figure(df: pd.DataFrame, *, title: str = "One MoE layer: routed GEMMs, dispatch and combine",
                batch_marker: float | None = None) -> go.Figure:
    """Routed-GEMM, dispatch and combine time per MoE layer vs batch, one panel per parallel layout; ``df``
    from :func:`llmexplore.sweeps.moe.step_vs_batch` (one pass's layer: the step, a pipeline micro-batch's, the
    verify pass's). Every panel has the same log time axis (heights compare across panels); dotted: the batch does
    not fit in memory; ``batch_marker``: the chosen batch."""
    layouts = list(dict.fromkeys(df["layout"]))
    fig = make_subplots(rows=1, cols=len(layouts), subplot_titles=layouts, shared_yaxes=True,
                        horizontal_spacing=0.03)
    parts = [("routed_layer_us", "routed expert GEMMs", "#1f77b4"), ("dispatch_layer_us", "dispatch", "#2ca02c"),
             ("combine_layer_us", "combine", "#ff7f0e")]
    spans = []
    for c, lay in enumerate(layouts, start=1):
        g = df[df["layout"] == lay]
        for key, name, col in parts:
            solid, dotted = fit_split(g[key], g["feasible"])
            spans.append(g[key].to_numpy(dtype=float))
            fig.add_scatter(x=g["batch"], y=solid, name=name, line=dict(color=col), legendgroup=name,
                            showlegend=c == 1, row=1, col=c,
                            hovertemplate=f"{name}: %{{y:,.3g}} µs at batch %{{x:,}}<extra>{lay}</extra>")
            fig.add_scatter(x=g["batch"], y=dotted, name=name, showlegend=False, line=dict(color=col, dash="dot"),
                            legendgroup=name, row=1, col=c, hoverinfo="skip")
        if batch_marker is not None:
            fig.add_trace(chosen_marker(batch_marker, spans, what="batch", hover=f"batch {fmt(batch_marker)}"),
                          row=1, col=c)
            fig.data[-1].showlegend = c == 1
        fig.update_xaxes(type="log", title_text="batch", row=1, col=c)
    fig.add_trace(not_fit_key(not bool(df["feasible"].all())))
    # shared_yaxes makes panels 2.. match panel 1; each must also be a log axis, or plotly drops the match
    fig.update_yaxes(type="log", showticklabels=True)
    d = table_decoding(df)
    of = "" if not d else (" of a micro-batch" if d.startswith("PP") else " of the verify pass")
    fig.update_yaxes(title_text=f"time per MoE layer{of} (µs)", row=1, col=1)
    return base(fig, title)


def scenario_figure(df: pd.DataFrame, *, title: str = "DeepSeek-V3 on 16 GPUs: decode step vs batch",
                    batch_marker: float | None = None) -> go.Figure:
    """Step time vs batch for every configuration of :func:`llmexplore.sweeps.moe.scenario_table` (the time per
    output token with a pipeline or speculative decoding); dotted where the batch does not fit in memory;
    ``batch_marker``: the chosen batch, with each configuration's time there stated on the figure (the log axis
    squashes their differences)."""
    col = _time_col(df)
    fig = go.Figure()
    palette = ["#7f7f7f", "#d62728", "#ff7f0e", "#1f77b4", "#17becf", "#9467bd", "#8c564b", "#e377c2", "#2ca02c"]
    fits, spans = {}, []
    for i, (lay, g) in enumerate(df.groupby("layout", sort=False)):
        colour = palette[i % len(palette)]
        solid, dotted = fit_split(g[col], g["feasible"])
        fig.add_scatter(x=g["batch"], y=solid, name=lay, line=dict(color=colour), legendgroup=lay)
        fig.add_scatter(x=g["batch"], y=dotted, name=f"{lay} (does not fit)",
                        line=dict(color=colour, dash="dot"), legendgroup=lay, showlegend=False)
        fits[lay] = (g["batch"].to_numpy(float), solid)
        spans.append(g[col].to_numpy(float))
    fig.add_trace(not_fit_key(not bool(df["feasible"].all())))
    if batch_marker is not None:
        fig.add_trace(chosen_marker(batch_marker, spans, what="batch", hover=f"batch {fmt(batch_marker)}"))
    gpus = int(df["gpus"].iloc[0]) if "gpus" in df and len(df) else int(df["tp"].iloc[0] * df["ep"].iloc[0])
    fig.update_xaxes(type="log", title_text=f"batch (sequences per step, all {gpus:,} GPUs)")
    fig.update_yaxes(type="log", title_text="time per output token (ms)" if col == "tpot_ms" else "decode step (ms)")
    fig = base(fig, title)
    if batch_marker is not None:
        lay = fig.layout.to_plotly_json()
        values_note(lay, values_at(fits, float(batch_marker), "ms", what=f"batch {fmt(batch_marker)}"))
        fig.update_layout(annotations=lay["annotations"])
    return fig
