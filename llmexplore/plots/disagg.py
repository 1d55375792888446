"""Figures of the prefill/decode area: latency vs rate, exposed transfer, GPUs vs bandwidth, pool sizes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import (RANK_KEY, RANK_MARKER, RANK_SERIES, TEMPLATE, base, base_layout, fmt, ref_line,  # noqa: F401
               ref_trace, spec_builder)

__all__ = ["MODE_COLORS", "latency_figure", "exposed_transfer_figure", "mode_gpus_figure",
           "gpus_vs_bandwidth_figure", "ratio_figure", "goodput_heatmap_figure", "link_comparison_figure",
           "mode_color"]

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


#: dash pattern and marker per transfer mode, so that the two curves stay apart where they meet
_TRANSFER_STYLE = {"serial": ("solid", "circle"), "layer-wise pipelined": ("dash", "diamond")}


@spec_builder
def exposed_transfer_figure(df: pd.DataFrame, *, title: str = "Exposed KV-transfer time vs link bandwidth",
                            link_GBps: float | None = None, link_name: str = "chosen link") -> go.Figure:
    """Exposed transfer time of one request vs achievable bandwidth per GPU, serial vs layer-wise pipelined,
    with the prefill time for scale; ``df`` from :func:`llmexplore.sweeps.disagg.exposed_vs_bandwidth`.
    ``link_GBps`` marks a link's achievable bandwidth with a vertical "chosen link" line."""
    data, finite = [], []
    for rank, (mode, g) in enumerate(df.groupby("mode", sort=False), start=RANK_SERIES):
        dash, symbol = _TRANSFER_STYLE.get(mode, ("solid", "circle"))
        col = mode_color(mode)
        y = g["exposed_ms"].to_numpy(float)
        finite.append(y)
        data.append(dict(type="scatter", x=g["bandwidth_GBps"].to_numpy(float), y=y, name=mode,
                         mode="lines+markers", line=dict(color=col, dash=dash, width=2.5), legendrank=rank,
                         marker=dict(color=col, symbol=symbol, size=7, maxdisplayed=12),
                         hovertemplate=f"{mode}: %{{y:,.3~r}} ms at %{{x:,.3~r}} GB/s<extra></extra>"))
    prefill = float(df["prefill_ms"].iloc[0])
    data.append(ref_trace(y=prefill, span=df["bandwidth_GBps"], name="prefill of one prompt", color="#555",
                          dash="dot", hover=f"prefill of one prompt: {fmt(prefill, 'ms')}", legendrank=RANK_KEY))
    if link_GBps is not None:
        data.append(ref_trace(x=float(link_GBps), span=np.concatenate(finite + [[prefill]]), name="chosen link",
                              color="#c00", dash="longdash", legendrank=RANK_MARKER,
                              hover=f"{link_name}: {fmt(link_GBps, 'GB/s', trim=True)}"))
    layout = base_layout(title,
                         xaxis=dict(type="log", title=dict(text="achievable link bandwidth per GPU (GB/s)")),
                         yaxis=dict(type="log", title=dict(text="exposed transfer time (ms)")))
    return {"data": data, "layout": layout}


@spec_builder
def mode_gpus_figure(rows, *, best: str | None = None,
                     title: str = "GPUs per serving mode at the target rate and SLOs") -> go.Figure:
    """Bars of the GPUs each serving mode needs (colocated, disaggregated with serial or pipelined transfer),
    labelled with the pool sizes; ``rows`` are :func:`llmexplore.sweeps.disagg.mode_rows` records (or their
    DataFrame). A mode that no pool can serve within the SLOs gets a zero-height bar saying so; ``best``
    (e.g. :func:`~llmexplore.sweeps.disagg.fewest_gpus`'s mode) is outlined."""
    rows = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else list(rows)
    modes, gpus, text, hover = [], [], [], []
    for r in rows:
        g = float(r["gpus"])
        ok = np.isfinite(g)
        modes.append(r["mode"])
        gpus.append(g if ok else 0.0)
        if not ok:
            text.append("no pool meets the SLOs")
        elif r["mode"] == "colocated":
            text.append(f"{fmt(g)} GPUs<br>{fmt(r['n_decode'])} instances")
        else:
            text.append(f"{fmt(g)} GPUs<br>{fmt(r['n_prefill'])} prefill + {fmt(r['n_decode'])} decode")
        hover.append(r.get("reason") or "")
    colors = [mode_color(m) or "#444" for m in modes]
    outline = [3 if m == best else 0 for m in modes]
    data = [dict(type="bar", x=modes, y=gpus, name="GPUs", text=text, textposition="outside",
                 cliponaxis=False, marker=dict(color=colors, line=dict(color="#222", width=outline)), showlegend=False,
                 customdata=hover, hovertemplate="%{x}: %{y:,.0f} GPUs<br>%{customdata}<extra></extra>")]
    top = max(gpus + [1.0]) * 1.3
    layout = base_layout(title, height=380, xaxis=dict(title=dict(text="serving mode")),
                         yaxis=dict(title=dict(text="GPUs at the target rate and SLOs"), range=[0, top]))
    return {"data": data, "layout": layout}


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
            ref_line(fig, x=bw, span=[0, top], name=f"{mode.split(', ')[1]} pays from {fmt(bw, 'GB/s')}",
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
