"""Figures of the prefill/decode area: latency vs rate, exposed transfer, GPUs vs bandwidth, pool sizes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import TEMPLATE, base, ref_line  # noqa: F401

__all__ = ["MODE_COLORS", "latency_figure", "exposed_transfer_figure", "gpus_vs_bandwidth_figure", "ratio_figure",
           "goodput_heatmap_figure", "link_comparison_figure", "mode_color"]

MODE_COLORS = {"colocated": "#7f7f7f", "disaggregated, serial": "#d62728", "disaggregated, pipelined": "#1f77b4",
               "serial": "#d62728", "layer-wise pipelined": "#1f77b4"}


def mode_color(mode: str) -> str | None:
    for key, col in MODE_COLORS.items():
        if mode.startswith(key):
            return col
    return None


def latency_figure(df: pd.DataFrame, *, ttft_slo_ms: float | None = None, tpot_slo_ms: float | None = None,
                      title: str = "TTFT and TPOT vs arrival rate (p99)") -> go.Figure:
    """TTFT (left) and TPOT (right) percentiles vs arrival rate per mode; ``df`` from
    :func:`llmexplore.sweeps.pd.latency_vs_rate`. Missing points: the queue is unstable or memory overflows."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("time to first token", "time per output token"),
                        horizontal_spacing=0.1)
    for i, (mode, g) in enumerate(df.groupby("mode", sort=False)):
        col = "#7f7f7f" if mode.startswith("colocated") else "#1f77b4"
        ttft = np.where(np.isfinite(g["ttft_ms"]), g["ttft_ms"], np.nan)
        tpot = np.where(np.isfinite(g["tpot_ms"]), g["tpot_ms"], np.nan)
        fig.add_scatter(x=g["rate_per_s"], y=ttft, name=mode, line=dict(color=col), legendgroup=mode, row=1, col=1)
        fig.add_scatter(x=g["rate_per_s"], y=tpot, name=mode, line=dict(color=col), legendgroup=mode,
                        showlegend=False, row=1, col=2)
    if ttft_slo_ms:
        ref_line(fig, y=ttft_slo_ms, span=df["rate_per_s"], name="SLO", row=1, col=1)
    if tpot_slo_ms:
        ref_line(fig, y=tpot_slo_ms, span=df["rate_per_s"], name="SLO", row=1, col=2, showlegend=not ttft_slo_ms)
    for c in (1, 2):
        fig.update_xaxes(title_text="arrival rate (requests/s)", row=1, col=c)
    fig.update_yaxes(title_text="TTFT p99 (ms)", type="log", row=1, col=1)
    fig.update_yaxes(title_text="TPOT p99 (ms)", type="log", row=1, col=2)
    return base(fig, title)


def exposed_transfer_figure(df: pd.DataFrame, *, title: str = "Exposed KV-transfer time vs link bandwidth"
                            ) -> go.Figure:
    """Exposed transfer time of one request vs achievable bandwidth per GPU, serial vs layer-wise pipelined,
    with the prefill time for scale; ``df`` from :func:`llmexplore.sweeps.pd.exposed_vs_bandwidth`."""
    fig = go.Figure()
    for mode, g in df.groupby("mode", sort=False):
        fig.add_scatter(x=g["bandwidth_GBps"], y=g["exposed_ms"], name=mode, line=dict(color=mode_color(mode)))
    ref_line(fig, y=float(df["prefill_ms"].iloc[0]), span=df["bandwidth_GBps"], name="prefill of one prompt",
              color="#555", dash="dot")
    fig.update_xaxes(type="log", title_text="achievable link bandwidth per GPU (GB/s)")
    fig.update_yaxes(type="log", title_text="exposed transfer time (ms)")
    return base(fig, title)


def gpus_vs_bandwidth_figure(df: pd.DataFrame, breakeven: dict | None = None, *,
                             title: str = "GPUs needed at the target rate vs link bandwidth") -> go.Figure:
    """GPUs (pools sized for the SLOs) vs link bandwidth: disaggregated serial / pipelined vs colocated, with
    the break-even bandwidths marked; ``df`` from :func:`llmexplore.sweeps.pd.gpus_vs_bandwidth`."""
    fig = go.Figure()
    for mode, g in df.groupby("mode", sort=False):
        y = np.where(np.isfinite(g["gpus"]), g["gpus"], np.nan)
        fig.add_scatter(x=g["bandwidth_GBps"], y=y, name=mode, mode="lines", line_shape="hv",
                        line=dict(color=mode_color(mode), dash="dash" if mode == "colocated" else "solid"))
    co = df.loc[df["mode"] == "colocated", "gpus"]
    top = 3.0 * float(co.iloc[0]) if len(co) and np.isfinite(co.iloc[0]) else float(np.nanmax(
        np.where(np.isfinite(df["gpus"]), df["gpus"], np.nan)))
    for mode, bw in (breakeven or {}).items():
        if np.isfinite(bw):
            ref_line(fig, x=bw, span=[0, top], name=f"{mode.split(', ')[1]} pays from {bw:.1f} GB/s",
                      color=mode_color(mode), dash="dot")
    fig.update_xaxes(type="log", title_text="achievable link bandwidth per instance NIC (GB/s)")
    fig.update_yaxes(title_text="GPUs (prefill + decode, or colocated)", range=[0, top])
    return base(fig, title)


def ratio_figure(df: pd.DataFrame, *, x: str = "prompt_tokens", title: str = "Pool sizes vs prompt length"
                    ) -> go.Figure:
    """P:D GPU ratio (left) and total GPUs (right) vs a workload field per mode; ``df`` from
    :func:`llmexplore.sweeps.pd.pool_sizes_vs`."""
    labels = {"prompt_tokens": "prompt length (tokens)", "output_tokens": "output length (tokens)",
              "rate_per_s": "arrival rate (requests/s)"}
    fig = make_subplots(rows=1, cols=2, subplot_titles=("prefill GPUs : decode GPUs", "GPUs at the target rate"),
                        horizontal_spacing=0.1)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"]
    for i, (mode, g) in enumerate(df.groupby("mode", sort=False)):
        col = "#7f7f7f" if mode == "colocated" else palette[i % len(palette)]
        if mode != "colocated":
            fig.add_scatter(x=g[x], y=g["pd_gpu_ratio"], name=mode, line=dict(color=col),
                            legendgroup=mode, row=1, col=1)
        fig.add_scatter(x=g[x], y=np.where(np.isfinite(g["gpus"]), g["gpus"], np.nan), name=mode,
                        line=dict(color=col, dash="dash" if mode == "colocated" else "solid"), legendgroup=mode,
                        showlegend=mode == "colocated", row=1, col=2)
    for c in (1, 2):
        fig.update_xaxes(type="log", title_text=labels.get(x, x), row=1, col=c)
    fig.update_yaxes(title_text="P:D ratio (GPUs)", row=1, col=1)
    fig.update_yaxes(title_text="GPUs", rangemode="tozero", row=1, col=2)
    return base(fig, title)


def goodput_heatmap_figure(grid: dict, *, title: str = "Goodput per GPU by pool sizes (req/s per GPU)"
                           ) -> go.Figure:
    """Highest rate per GPU meeting both SLOs for each (prefill, decode) instance count; ``grid`` from
    :func:`llmexplore.sweeps.pd.goodput_grid`. The best pair is marked."""
    z = grid["rate_per_gpu"]
    i, j = np.unravel_index(np.argmax(z), z.shape)
    fig = go.Figure(go.Heatmap(x=grid["n"], y=grid["n"], z=z, colorscale="Viridis",
                               colorbar=dict(title="req/s/GPU")))
    fig.add_scatter(x=[grid["n"][j]], y=[grid["n"][i]], mode="markers+text", name="best",
                    marker=dict(symbol="star", size=14, color="white", line=dict(color="black", width=1)),
                    text=[f" {z[i, j]:.3f}"], textposition="middle right")
    fig.update_xaxes(title_text="decode instances")
    fig.update_yaxes(title_text="prefill instances")
    return base(fig, title, height=480)


def link_comparison_figure(df: pd.DataFrame, *, title: str = "GPUs needed: colocated vs disaggregated"
                           ) -> go.Figure:
    """Bars of GPUs per mode and link; ``df`` from :func:`llmexplore.sweeps.pd.link_comparison`."""
    fig = go.Figure()
    for mode, g in df.groupby("mode", sort=False):
        y = np.where(np.isfinite(g["gpus"]), g["gpus"], np.nan)
        fig.add_bar(x=g["link"], y=y, name=mode, marker_color=mode_color(mode),
                    text=[f"{v:.0f}" if np.isfinite(v) else "none fits" for v in g["gpus"]], textposition="outside")
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="link (colocated needs none)")
    fig.update_yaxes(title_text="GPUs at the target rate and SLOs", rangemode="tozero")
    return base(fig, title)
