"""Figures of the MoE area: step time vs skew, load per EP rank, where a MoE layer's time goes, the scenario."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import TEMPLATE, base, ref_line  # noqa: F401

__all__ = ["PLACEMENT_COLORS", "skew_figure", "rank_load_figure", "comm_figure", "scenario_figure"]

PLACEMENT_COLORS = {"static placement": "#d62728", "EPLB, no redundancy": "#ff7f0e", "static": "#d62728",
                    "no expert parallelism": "#7f7f7f"}


def _placement_color(name: str) -> str:
    return PLACEMENT_COLORS.get(name, "#1f77b4")


def skew_figure(df: pd.DataFrame, *, title: str = "Decode step vs hot-expert skew") -> go.Figure:
    """Step time (left) and MoE-layer time (right) vs skew per placement; ``df`` from
    :func:`llmexplore.sweeps.moe.step_vs_skew`."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("whole decode step", "one MoE layer"),
                        horizontal_spacing=0.1)
    for name, g in df.groupby("placement", sort=False):
        col = _placement_color(name)
        fig.add_scatter(x=g["skew"], y=g["step_ms"], name=name, line=dict(color=col), legendgroup=name,
                        row=1, col=1)
        fig.add_scatter(x=g["skew"], y=g["moe_layer_us"], name=name, line=dict(color=col), legendgroup=name,
                        showlegend=False, row=1, col=2)
    for c in (1, 2):
        fig.update_xaxes(title_text="hot-expert skew (max / mean expert load)", row=1, col=c)
    fig.update_yaxes(title_text="step time (ms)", row=1, col=1)
    fig.update_yaxes(title_text="MoE layer (us)", row=1, col=2)
    return base(fig, title)


def rank_load_figure(df: pd.DataFrame, *, title: str = "Routed tokens per EP rank, busiest first"
                         ) -> go.Figure:
    """Relative load per EP rank (1 = balanced) before and after rebalancing; ``df`` from
    :func:`llmexplore.sweeps.moe.rank_loads`."""
    fig = go.Figure()
    for name, g in df.groupby("placement", sort=False):
        fig.add_bar(x=g["rank_by_load"], y=g["relative_load"], name=name, marker_color=_placement_color(name))
    fig.add_scatter(x=[df["rank_by_load"].min() - 0.5, df["rank_by_load"].max() + 0.5], y=[1, 1], mode="lines",
                    name="balanced", line=dict(color="#333", dash="dash"))
    lo = float(df["relative_load"].min())
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="EP rank (sorted by load)", dtick=1)
    fig.update_yaxes(title_text="load / mean load", range=[min(0.8, lo - 0.02), None])
    return base(fig, title)


def comm_figure(df: pd.DataFrame, *, title: str = "One MoE layer: routed GEMMs, dispatch and combine"
                    ) -> go.Figure:
    """Routed-GEMM, dispatch and combine time per MoE layer vs batch, one panel per parallel layout; ``df``
    from :func:`llmexplore.sweeps.moe.step_vs_batch`. Dotted: the batch does not fit in memory."""
    layouts = list(dict.fromkeys(df["layout"]))
    fig = make_subplots(rows=1, cols=len(layouts), subplot_titles=layouts, shared_yaxes=True,
                        horizontal_spacing=0.03)
    parts = [("routed_layer_us", "routed expert GEMMs", "#1f77b4"), ("dispatch_layer_us", "dispatch", "#2ca02c"),
             ("combine_layer_us", "combine", "#ff7f0e")]
    for c, lay in enumerate(layouts, start=1):
        g = df[df["layout"] == lay]
        for key, name, col in parts:
            fig.add_scatter(x=g["batch"], y=g[key].where(g["feasible"]), name=name, line=dict(color=col),
                            legendgroup=name, showlegend=c == 1, row=1, col=c)
            fig.add_scatter(x=g["batch"], y=g[key].where(~g["feasible"]), name=name, showlegend=False,
                            line=dict(color=col, dash="dot"), legendgroup=name, row=1, col=c)
        fig.update_xaxes(type="log", title_text="batch", row=1, col=c)
    fig.update_yaxes(type="log", title_text="time per MoE layer (us)", row=1, col=1)
    return base(fig, title)


def scenario_figure(df: pd.DataFrame, *, title: str = "DeepSeek-V3 on 16 GPUs: decode step vs batch"
                        ) -> go.Figure:
    """Step time vs batch for every configuration of :func:`llmexplore.sweeps.moe.scenario_table`;
    dotted where the batch does not fit in memory."""
    fig = go.Figure()
    palette = ["#7f7f7f", "#d62728", "#ff7f0e", "#1f77b4", "#17becf", "#9467bd", "#8c564b", "#e377c2", "#2ca02c"]
    for i, (lay, g) in enumerate(df.groupby("layout", sort=False)):
        col = palette[i % len(palette)]
        fig.add_scatter(x=g["batch"], y=g["step_ms"].where(g["feasible"]), name=lay, line=dict(color=col),
                        legendgroup=lay)
        fig.add_scatter(x=g["batch"], y=g["step_ms"].where(~g["feasible"]), name=f"{lay} (does not fit)",
                        line=dict(color=col, dash="dot"), legendgroup=lay, showlegend=False)
    fig.update_xaxes(type="log", title_text="batch (sequences per step, all 16 GPUs)")
    fig.update_yaxes(type="log", title_text="decode step (ms)")
    return base(fig, title)
