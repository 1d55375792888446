"""Figure builders: tidy results in, ``go.Figure`` out. No model computations, no ``.show()``, no files.

Every figure has unit-bearing axis titles and a legend; layouts keep one colour throughout the workbook.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = ["TEMPLATE", "LAYOUT_COLORS", "step_time_figure", "phase_diagram_figure", "memory_figure",
           "transition_figure", "scheduler_figure", "policy_figure"]

TEMPLATE = "plotly_white"
LAYOUT_COLORS = {"TP": "#1f77b4", "CP": "#ff7f0e", "DPA": "#2ca02c", "DOP": "#9467bd", "none": "#d9d9d9"}
PART_COLORS = {"attention weights": "#4c78a8", "FFN/MoE weights": "#72b7b2", "embeddings + norms": "#b279a2",
               "KV cache": "#f58518", "activations": "#e45756", "runtime reserve": "#9d9d9d"}


def _ref_line(fig: go.Figure, *, y=None, x=None, span, name: str, color: str = "#c00", dash: str = "dash",
              row=None, col=None, showlegend: bool = True) -> None:
    """A horizontal (``y``) or vertical (``x``) reference line drawn as a named trace over ``span``.

    Used instead of ``add_hline(annotation_text=...)``: plotly places annotations on log axes in log10 units,
    which silently puts the label (and the autorange) at 10**value.
    """
    lo, hi = float(np.nanmin(span)), float(np.nanmax(span))
    xs, ys = ([lo, hi], [y, y]) if y is not None else ([x, x], [lo, hi])
    kw = {} if row is None else dict(row=row, col=col)
    fig.add_scatter(x=xs, y=ys, mode="lines", name=name, line=dict(color=color, dash=dash, width=1.5),
                    showlegend=showlegend, hoverinfo="name", **kw)


def _base(fig: go.Figure, title: str, height: int = 420) -> go.Figure:
    fig.update_layout(template=TEMPLATE, title=title, height=height, legend_title_text="",
                      margin=dict(l=70, r=30, t=70, b=60))
    return fig


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
    return _base(fig, title)


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
    return _base(fig, title, height=520)


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
    return _base(fig, title)


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
    return _base(fig, title, height=480)


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
    return _base(fig, title, height=520)


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
    return _base(fig, title)


# ---- prefill/decode disaggregation ----------------------------------------------------------------------------
MODE_COLORS = {"colocated": "#7f7f7f", "disaggregated, serial": "#d62728", "disaggregated, pipelined": "#1f77b4",
               "serial": "#d62728", "layer-wise pipelined": "#1f77b4"}


def _mode_color(mode: str) -> str | None:
    for key, col in MODE_COLORS.items():
        if mode.startswith(key):
            return col
    return None


def pd_latency_figure(df: pd.DataFrame, *, ttft_slo_ms: float | None = None, tpot_slo_ms: float | None = None,
                      title: str = "TTFT and TPOT vs arrival rate (p99)") -> go.Figure:
    """TTFT (left) and TPOT (right) percentiles vs arrival rate per mode; ``df`` from
    :func:`llmexplore.pd_sweeps.latency_vs_rate`. Missing points: the queue is unstable or memory overflows."""
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
        _ref_line(fig, y=ttft_slo_ms, span=df["rate_per_s"], name="SLO", row=1, col=1)
    if tpot_slo_ms:
        _ref_line(fig, y=tpot_slo_ms, span=df["rate_per_s"], name="SLO", row=1, col=2, showlegend=not ttft_slo_ms)
    for c in (1, 2):
        fig.update_xaxes(title_text="arrival rate (requests/s)", row=1, col=c)
    fig.update_yaxes(title_text="TTFT p99 (ms)", type="log", row=1, col=1)
    fig.update_yaxes(title_text="TPOT p99 (ms)", type="log", row=1, col=2)
    return _base(fig, title)


def exposed_transfer_figure(df: pd.DataFrame, *, title: str = "Exposed KV-transfer time vs link bandwidth"
                            ) -> go.Figure:
    """Exposed transfer time of one request vs achievable bandwidth per GPU, serial vs layer-wise pipelined,
    with the prefill time for scale; ``df`` from :func:`llmexplore.pd_sweeps.exposed_vs_bandwidth`."""
    fig = go.Figure()
    for mode, g in df.groupby("mode", sort=False):
        fig.add_scatter(x=g["bandwidth_GBps"], y=g["exposed_ms"], name=mode, line=dict(color=_mode_color(mode)))
    _ref_line(fig, y=float(df["prefill_ms"].iloc[0]), span=df["bandwidth_GBps"], name="prefill of one prompt",
              color="#555", dash="dot")
    fig.update_xaxes(type="log", title_text="achievable link bandwidth per GPU (GB/s)")
    fig.update_yaxes(type="log", title_text="exposed transfer time (ms)")
    return _base(fig, title)


def gpus_vs_bandwidth_figure(df: pd.DataFrame, breakeven: dict | None = None, *,
                             title: str = "GPUs needed at the target rate vs link bandwidth") -> go.Figure:
    """GPUs (pools sized for the SLOs) vs link bandwidth: disaggregated serial / pipelined vs colocated, with
    the break-even bandwidths marked; ``df`` from :func:`llmexplore.pd_sweeps.gpus_vs_bandwidth`."""
    fig = go.Figure()
    for mode, g in df.groupby("mode", sort=False):
        y = np.where(np.isfinite(g["gpus"]), g["gpus"], np.nan)
        fig.add_scatter(x=g["bandwidth_GBps"], y=y, name=mode, mode="lines", line_shape="hv",
                        line=dict(color=_mode_color(mode), dash="dash" if mode == "colocated" else "solid"))
    co = df.loc[df["mode"] == "colocated", "gpus"]
    top = 3.0 * float(co.iloc[0]) if len(co) and np.isfinite(co.iloc[0]) else float(np.nanmax(
        np.where(np.isfinite(df["gpus"]), df["gpus"], np.nan)))
    for mode, bw in (breakeven or {}).items():
        if np.isfinite(bw):
            _ref_line(fig, x=bw, span=[0, top], name=f"{mode.split(', ')[1]} pays from {bw:.1f} GB/s",
                      color=_mode_color(mode), dash="dot")
    fig.update_xaxes(type="log", title_text="achievable link bandwidth per instance NIC (GB/s)")
    fig.update_yaxes(title_text="GPUs (prefill + decode, or colocated)", range=[0, top])
    return _base(fig, title)


def pd_ratio_figure(df: pd.DataFrame, *, x: str = "prompt_tokens", title: str = "Pool sizes vs prompt length"
                    ) -> go.Figure:
    """P:D GPU ratio (left) and total GPUs (right) vs a workload field per mode; ``df`` from
    :func:`llmexplore.pd_sweeps.pool_sizes_vs`."""
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
    return _base(fig, title)


def goodput_heatmap_figure(grid: dict, *, title: str = "Goodput per GPU by pool sizes (req/s per GPU)"
                           ) -> go.Figure:
    """Highest rate per GPU meeting both SLOs for each (prefill, decode) instance count; ``grid`` from
    :func:`llmexplore.pd_sweeps.goodput_grid`. The best pair is marked."""
    z = grid["rate_per_gpu"]
    i, j = np.unravel_index(np.argmax(z), z.shape)
    fig = go.Figure(go.Heatmap(x=grid["n"], y=grid["n"], z=z, colorscale="Viridis",
                               colorbar=dict(title="req/s/GPU")))
    fig.add_scatter(x=[grid["n"][j]], y=[grid["n"][i]], mode="markers+text", name="best",
                    marker=dict(symbol="star", size=14, color="white", line=dict(color="black", width=1)),
                    text=[f" {z[i, j]:.3f}"], textposition="middle right")
    fig.update_xaxes(title_text="decode instances")
    fig.update_yaxes(title_text="prefill instances")
    return _base(fig, title, height=480)


def link_comparison_figure(df: pd.DataFrame, *, title: str = "GPUs needed: colocated vs disaggregated"
                           ) -> go.Figure:
    """Bars of GPUs per mode and link; ``df`` from :func:`llmexplore.pd_sweeps.link_comparison`."""
    fig = go.Figure()
    for mode, g in df.groupby("mode", sort=False):
        y = np.where(np.isfinite(g["gpus"]), g["gpus"], np.nan)
        fig.add_bar(x=g["link"], y=y, name=mode, marker_color=_mode_color(mode),
                    text=[f"{v:.0f}" if np.isfinite(v) else "none fits" for v in g["gpus"]], textposition="outside")
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="link (colocated needs none)")
    fig.update_yaxes(title_text="GPUs at the target rate and SLOs", rangemode="tozero")
    return _base(fig, title)


# ---- MoE expert parallelism ------------------------------------------------------------------------------------
PLACEMENT_COLORS = {"static placement": "#d62728", "EPLB, no redundancy": "#ff7f0e", "static": "#d62728",
                    "no expert parallelism": "#7f7f7f"}


def _placement_color(name: str) -> str:
    return PLACEMENT_COLORS.get(name, "#1f77b4")


def moe_skew_figure(df: pd.DataFrame, *, title: str = "Decode step vs hot-expert skew") -> go.Figure:
    """Step time (left) and MoE-layer time (right) vs skew per placement; ``df`` from
    :func:`llmexplore.moe_sweeps.step_vs_skew`."""
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
    return _base(fig, title)


def moe_rank_load_figure(df: pd.DataFrame, *, title: str = "Routed tokens per EP rank, busiest first"
                         ) -> go.Figure:
    """Relative load per EP rank (1 = balanced) before and after rebalancing; ``df`` from
    :func:`llmexplore.moe_sweeps.rank_loads`."""
    fig = go.Figure()
    for name, g in df.groupby("placement", sort=False):
        fig.add_bar(x=g["rank_by_load"], y=g["relative_load"], name=name, marker_color=_placement_color(name))
    fig.add_scatter(x=[df["rank_by_load"].min() - 0.5, df["rank_by_load"].max() + 0.5], y=[1, 1], mode="lines",
                    name="balanced", line=dict(color="#333", dash="dash"))
    lo = float(df["relative_load"].min())
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="EP rank (sorted by load)", dtick=1)
    fig.update_yaxes(title_text="load / mean load", range=[min(0.8, lo - 0.02), None])
    return _base(fig, title)


def moe_comm_figure(df: pd.DataFrame, *, title: str = "One MoE layer: routed GEMMs, dispatch and combine"
                    ) -> go.Figure:
    """Routed-GEMM, dispatch and combine time per MoE layer vs batch, one panel per parallel layout; ``df``
    from :func:`llmexplore.moe_sweeps.step_vs_batch`. Dotted: the batch does not fit in memory."""
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
    return _base(fig, title)


def moe_scenario_figure(df: pd.DataFrame, *, title: str = "DeepSeek-V3 on 16 GPUs: decode step vs batch"
                        ) -> go.Figure:
    """Step time vs batch for every configuration of :func:`llmexplore.moe_sweeps.scenario_table`;
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
    return _base(fig, title)
