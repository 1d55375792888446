"""Figures of the speculative-decoding area: speed-up vs batch per accepted length, the speed-up map over batch and
accepted length, and the published checks. Figure builders are specs (:func:`~llmexplore.plots.spec_builder`)
whose traces keep their names when the sliders move."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..models.step.speculative import SAME_LENGTH_TOKENS
from . import RANK_KEY, RANK_SERIES, base, base_layout, chosen_marker, fmt, ref_trace, spec_builder

__all__ = ["speedup_figure", "speedup_map_figure", "checks_figure"]


def _series_name(tau: float, own: float | None) -> str:
    name = f"{fmt(tau, trim=True)} tokens per step"
    return name + " (the preset's)" if own is not None and abs(tau - own) < SAME_LENGTH_TOKENS else name


@spec_builder
def speedup_figure(df: pd.DataFrame, *, own_length: float | None = None, batch_marker: float | None = None,
                   series_name: str | None = None,
                   title: str = "Speculative decoding: speed-up in TPOT vs batch") -> go.Figure:
    """Speed-up (plain TPOT / speculative TPOT) vs batch, one line per accepted length, with the break-even line at
    1x; ``df`` from :func:`llmexplore.sweeps.speculative.speedup_vs_batch`. Batches that do not fit with the
    draft's memory are drawn hollow. ``batch_marker``: the explorer's chosen batch; ``series_name``: the one
    series' name whatever its accepted length (the explorer's, so the trace keeps its name as the slider moves)."""
    data, spans = [], [np.array([1.0])]
    taus = sorted(df["accepted_length"].unique())
    colors = _colors(len(taus))
    for rank, (tau, col) in enumerate(zip(taus, colors), start=RANK_SERIES):
        g = df[df["accepted_length"] == tau].sort_values("batch")
        y = g["speedup"].to_numpy(float)
        spans.append(y)
        own = len(taus) == 1 or (own_length is not None and abs(tau - own_length) < SAME_LENGTH_TOKENS)
        name = series_name if series_name and len(taus) == 1 else _series_name(tau, own_length)
        data.append(dict(type="scatter", x=g["batch"].to_numpy(float), y=y, name=name,
                         mode="lines+markers", legendrank=rank,
                         line=dict(color=col, width=3.5 if own else 2, dash="solid" if own else "dot"),
                         marker=dict(color=col, size=6, symbol=np.where(g["feasible"], "circle", "circle-open").tolist()),
                         customdata=np.stack([g["tpot_ms"], g["plain_tpot_ms"]], axis=1),
                         hovertemplate=(f"{fmt(tau, trim=True)} tokens/step, batch %{{x:,.0f}}: %{{y:.2f}}x "
                                        "(TPOT %{customdata[0]:.3~r} ms vs %{customdata[1]:.3~r} ms)<extra></extra>")))
    data.append(ref_trace(y=1.0, span=df["batch"], name="break-even (1x)", color="#c00", dash="dash",
                          legendrank=RANK_KEY, hover="below this line speculation is slower than plain decoding"))
    if batch_marker is not None:
        data.append(chosen_marker(batch_marker, spans, what="batch", hover=f"batch {fmt(batch_marker)}"))
    layout = base_layout(title,
                         xaxis=dict(type="log", title=dict(text="decode batch (sequences)")),
                         yaxis=dict(title=dict(text="speed-up in TPOT (x, plain / speculative)"), rangemode="tozero"))
    return {"data": data, "layout": layout}


def speedup_map_figure(df: pd.DataFrame, *, title: str = "Where speculation pays: speed-up over batch and "
                                                         "accepted length") -> go.Figure:
    """Heat map of the speed-up over (batch, accepted length), with the 1x contour; ``df`` from
    :func:`llmexplore.sweeps.speculative.speedup_vs_batch` over several accepted lengths."""
    z = df.pivot(index="accepted_length", columns="batch", values="speedup")
    fig = go.Figure(go.Heatmap(x=[str(int(b)) for b in z.columns], y=z.index.to_numpy(float), z=z.to_numpy(float),
                               colorscale="RdBu", zmid=1.0, colorbar=dict(title="speed-up (x)"),
                               hovertemplate="batch %{x}, %{y:.2f} tokens/step: %{z:.2f}x<extra></extra>"))
    fig.add_contour(x=[str(int(b)) for b in z.columns], y=z.index.to_numpy(float), z=z.to_numpy(float),
                    contours=dict(start=1.0, end=1.0, size=1.0, coloring="none", showlabels=True),
                    line=dict(color="black", width=2, dash="dash"), showscale=False, name="1x (break-even)",
                    showlegend=True, hoverinfo="skip")
    fig.update_xaxes(title_text="decode batch (sequences)", type="category")
    fig.update_yaxes(title_text="accepted length (tokens per verify step)")
    fig = base(fig, title, height=460)
    fig.update_layout(legend=dict(orientation="h", x=0.0, y=-0.18, xanchor="left", yanchor="top"))
    return fig


def checks_figure(checks: pd.DataFrame, *, title: str = "Published speed-ups against the model") -> go.Figure:
    """Model against published values, one marker per published point and a colour per study, with the 1:1 line
    and a ±15 % band; ``checks`` from :func:`llmexplore.sweeps.speculative.published_checks`."""
    fig = go.Figure()
    lo = float(min(checks["published"].min(), checks["model_value"].min())) * 0.9
    hi = float(max(checks["published"].max(), checks["model_value"].max())) * 1.1
    xs = np.array([lo, hi])
    fig.add_scatter(x=xs, y=xs, mode="lines", name="model = published", line=dict(color="#555", dash="dash"))
    fig.add_scatter(x=np.r_[xs, xs[::-1]], y=np.r_[xs * 1.15, xs[::-1] * 0.85], fill="toself", mode="lines",
                    line=dict(width=0), fillcolor="rgba(120,120,120,0.15)", name="±15 %", hoverinfo="skip")
    for (study, g), col in zip(checks.groupby("study", sort=False), _colors(checks["study"].nunique())):
        label = {"speedup": "speed-up", "ratio": "speed-up / speed-up at the first batch"}[g["kind"].iloc[0]]
        fig.add_scatter(x=g["published"], y=g["model_value"], mode="markers", name=f"{study} ({label})",
                        marker=dict(color=col, size=10), customdata=np.stack([g["id"], g["error_pct"]], axis=1),
                        hovertemplate="%{customdata[0]}: published %{x:.3~r}, model %{y:.3~r} "
                                      "(%{customdata[1]:+.1f} %)<extra></extra>")
    fig.update_xaxes(title_text="published (x)")
    fig.update_yaxes(title_text="model (x)")
    return base(fig, title, height=460)


def _colors(n: int) -> list[str]:
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
    return [palette[i % len(palette)] for i in range(n)]
