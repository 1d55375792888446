"""Figures of the KV offload area: recompute against load per tier with the break-evens, who wins over prefix x
bandwidth, the break-even over bandwidth x latency, preloading against the queue wait, a staging replay, what a
hit ratio saves, and measured against modelled load times.

Every builder reads a table of :mod:`llmexplore.sweeps.offload`; the ones the live explorer redraws are specs
(:func:`~llmexplore.plots.spec_builder`) whose traces keep their names when the sliders move (a tier's load
curve is named by its label). Maps are drawn on log10 axes with ticks labelled in the quantity's own units.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from . import RANK_KEY, RANK_MARKER, RANK_SERIES, base_layout, chosen_marker, fmt, grid_layout, ref_trace, spec_builder
from .tables import PeopleTable, people_table

__all__ = ["RECOMPUTE", "BREAK_EVEN", "LOAD_WINS", "RECOMPUTE_WINS", "EXPOSED", "NO_PRELOAD", "H2D", "BUDGET",
           "STAGED", "WITH_PRELOAD", "WITHOUT_PRELOAD", "MEASURED", "PARITY", "tier_color", "load_name",
           "cost_curves_figure", "regime_figure", "break_even_map_figure", "preload_figure", "staging_figure",
           "hit_ratio_figure", "measured_figure", "measured_view", "break_even_people_table", "BREAK_EVEN_HEADERS",
           "SHIFT_HEADERS"]

RECOMPUTE = "recompute on the GPUs"
BREAK_EVEN = "break-even (loading pays from here)"
LOAD_WINS, RECOMPUTE_WINS = "load wins", "recompute wins"
EXPOSED, NO_PRELOAD, H2D = "load exposed after preloading", "load without preloading", "host → GPU copy alone"
BUDGET, STAGED = "staging budget", "staged in host memory"
WITH_PRELOAD, WITHOUT_PRELOAD = "TTFT with preloading", "TTFT without preloading"
MEASURED, PARITY = "measured load", "measured = modelled"

#: one colour per preset tier, kept in every figure (a custom tier takes its base preset's colour)
TIER_COLORS = {"dram-pcie4": "#2ca02c", "dram-pcie5": "#17becf", "nvme-gen4": "#ff7f0e", "nvme-gen5": "#d62728",
               "nfs": "#9467bd"}
_OTHER = ["#8c564b", "#e377c2", "#bcbd22", "#7f7f7f"]
_DASHES = {"dram": "dot", "ssd": "solid", "network": "dash"}
_RECOMPUTE_COLOR = "#222"
_LOAD_COLOR, _RECOMPUTE_REGION = "#9ecae1", "#fdd0a2"


def tier_color(name: str) -> str:
    """The colour of a tier (by preset name; ``"nvme-gen4 (3 GB/s)"`` takes nvme-gen4's)."""
    base = str(name).split(" (")[0]
    if base in TIER_COLORS:
        return TIER_COLORS[base]
    return _OTHER[sum(map(ord, base)) % len(_OTHER)]


def load_name(label: str) -> str:
    """The legend name of a tier's load curve."""
    return f"load from {label}"


def _token_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Ticks at powers of two (in tokens) of a log10 axis: 256, 1k, 4k, 16k, ..."""
    vals = [2.0 ** k for k in range(0, 24, 2) if lo * 0.999 <= 2.0 ** k <= hi * 1.001]
    return [float(np.log10(v)) for v in vals], [f"{v / 1024:g}k" if v >= 1024 else f"{v:g}" for v in vals]


def _positive(y) -> np.ndarray:
    y = np.asarray(y, dtype=float)
    return np.where(y > 0, y, np.nan)


@spec_builder
def cost_curves_figure(curves: pd.DataFrame, table: pd.DataFrame, *, prefix_marker: float | None = None,
                       chosen: str | None = None,
                       title: str = "Recompute vs load of a cached prefix, per storage tier") -> go.Figure:
    """Time to recompute the cached blocks of a prefix and to load them from each tier, against the prefix length
    (log-log), with each tier's break-even marked on its load curve; ``curves`` from
    :func:`llmexplore.sweeps.offload.cost_curves`, ``table`` from :func:`~llmexplore.sweeps.offload.break_even_table`
    (same setup). ``chosen`` (a tier name) draws that tier's curve thicker; ``prefix_marker`` the chosen prefix."""
    data, spans = [], []
    first = curves[curves["tier"] == curves["tier"].iloc[0]]
    x0 = first["prefix_tokens"].to_numpy(float)
    rc = _positive(first["recompute_ms"])
    spans.append(rc[np.isfinite(rc)])
    data.append(dict(type="scatter", x=x0, y=rc, mode="lines", name=RECOMPUTE, legendrank=RANK_SERIES,
                     line=dict(color=_RECOMPUTE_COLOR, width=3),
                     hovertemplate="recompute %{y:,.3~r} ms at %{x:,.0f} tokens<extra></extra>"))
    be_x, be_y, be_text, be_color, be_hover = [], [], [], [], []
    for i, (name, d) in enumerate(curves.groupby("tier", sort=False)):
        label = d["tier_label"].iloc[0]
        x = d["prefix_tokens"].to_numpy(float)
        y = _positive(d["load_ms"])
        spans.append(y[np.isfinite(y)])
        row = table[table["tier"] == name]
        kind = row["kind"].iloc[0] if len(row) and "kind" in row else "ssd"
        data.append(dict(type="scatter", x=x, y=y, mode="lines", name=load_name(label), legendrank=RANK_SERIES + 1 + i,
                         line=dict(color=tier_color(name), dash=_DASHES.get(kind, "solid"),
                                   width=3 if name == chosen else 1.8),
                         hovertemplate=f"{label}: load %{{y:,.3~r}} ms at %{{x:,.0f}} tokens<extra></extra>"))
        if len(row):
            be = float(row["break_even_tokens"].iloc[0])
            ok = np.isfinite(y)
            if np.isfinite(be) and ok.any() and x[ok].min() <= be <= x[ok].max():
                be_x.append(be)
                be_y.append(float(10 ** np.interp(np.log10(be), np.log10(x[ok]), np.log10(y[ok]))))
                be_text.append(f"{be:,.0f}")
                be_color.append(tier_color(name))
                be_hover.append(f"{label}: loading pays from {be:,.0f} tokens (set by the "
                                f"{row['set_by'].iloc[0]})")
    data.append(dict(type="scatter", x=be_x, y=be_y, mode="markers+text", name=BREAK_EVEN, text=be_text,
                     textposition="top left", textfont=dict(size=10), customdata=be_hover, legendrank=RANK_KEY,
                     marker=dict(symbol="diamond", size=11, color=be_color, line=dict(color="#222", width=1)),
                     cliponaxis=False, hovertemplate="%{customdata}<extra></extra>"))
    if prefix_marker is not None and prefix_marker > 0:
        data.append(chosen_marker(prefix_marker, spans, what="prefix",
                                  hover=f"chosen prefix: {fmt(prefix_marker, 'tokens')}"))
    layout = base_layout(title, height=460,
                         xaxis=dict(type="log", title=dict(text="cached prefix (tokens)")),
                         yaxis=dict(type="log", title=dict(text="time to recompute or load the cached blocks (ms)")))
    return {"data": data, "layout": layout}


@spec_builder
def regime_figure(grid: dict, table: pd.DataFrame | None = None, *, prefix_marker: float | None = None,
                  title: str = "Who wins: loading or recomputing, over prefix × read bandwidth") -> go.Figure:
    """The winner over prefix length (x) and the tier's read bandwidth (y), both log scale, with the tier's
    latency and hops kept; ``grid`` from :func:`llmexplore.sweeps.offload.regime_grid`. The preset tiers' read
    bandwidths (``table``: :func:`~llmexplore.sweeps.offload.break_even_table`) are dotted horizontal lines;
    ``prefix_marker`` the chosen prefix."""
    P = np.asarray(grid["prefix_tokens"], float)
    bw = np.asarray(grid["bandwidth_GBps"], float)
    keep = P > 0
    P = P[keep]
    wins = np.asarray(grid["load_wins"], bool)[keep]
    saving = np.asarray(grid["saving_ms"], float)[keep]
    data = [dict(type="heatmap", name="winner", x=P, y=bw, z=wins.T.astype(float), zmin=0, zmax=1,
                 colorscale=[[0, _RECOMPUTE_REGION], [0.5, _RECOMPUTE_REGION], [0.5, _LOAD_COLOR], [1, _LOAD_COLOR]],
                 showscale=False, customdata=saving.T,
                 hovertemplate="%{x:,.0f} tokens at %{y:.3~r} GB/s: loading saves %{customdata:,.4~r} ms "
                               "(negative: recompute wins)<extra></extra>")]
    for name, color in ((LOAD_WINS, _LOAD_COLOR), (RECOMPUTE_WINS, _RECOMPUTE_REGION)):
        data.append(dict(type="scatter", x=[None], y=[None], mode="markers", name=name, legendrank=RANK_SERIES,
                         marker=dict(symbol="square", size=14, color=color, line=dict(color="#999", width=1)),
                         hoverinfo="skip"))
    if table is not None:
        for i, r in enumerate(table.itertuples()):
            if not (bw.min() <= r.read_GBps <= bw.max()):
                continue
            data.append(dict(type="scatter", x=[P.min(), P.max()], y=[r.read_GBps, r.read_GBps], mode="lines+text",
                             name=f"{r.tier_label}: {fmt(r.read_GBps, 'GB/s')}", text=["", _short_tier(r.tier_label)],
                             textposition="top left", textfont=dict(size=10, color=tier_color(r.tier)),
                             line=dict(color=tier_color(r.tier), dash="dot", width=2), legendrank=RANK_KEY + i,
                             hovertemplate=f"{r.tier_label}: {fmt(r.read_GBps, 'GB/s')} device read<extra></extra>"))
    if prefix_marker is not None and prefix_marker > 0:
        data.append(ref_trace(x=float(prefix_marker), span=[bw.min(), bw.max()], name="chosen prefix", color="#555",
                              dash="longdash", legendrank=RANK_MARKER,
                              hover=f"chosen prefix: {fmt(prefix_marker, 'tokens')}"))
    layout = base_layout(title, height=480,
                         xaxis=dict(type="log", title=dict(text="cached prefix (tokens)"),
                                    range=[float(np.log10(P.min())), float(np.log10(P.max()))], showgrid=False),
                         yaxis=dict(type="log", title=dict(text="tier read bandwidth (GB/s)"),
                                    range=[float(np.log10(bw.min())), float(np.log10(bw.max()))], showgrid=False))
    return {"data": data, "layout": layout}


def _short_tier(label: str) -> str:
    base = label.split(" (")[0]
    kind = "DRAM" if "DRAM" in base else "NVMe" if "NVMe" in base else base.split()[0]
    gen = re.search(r"Gen\d+", base)
    return f"{kind} {gen.group(0)}" if gen else kind


@spec_builder
def break_even_map_figure(bmap: dict, table: pd.DataFrame | None = None, *, chosen: str | None = None,
                          title: str = "Break-even prefix over read bandwidth × latency") -> go.Figure:
    """The break-even prefix (colour, log scale, in tokens) over the tier's read bandwidth (x) and per-read
    latency (y), both log scale, for the chosen tier's kind and hops; ``bmap`` from
    :func:`llmexplore.sweeps.offload.break_even_map`. The dashed line is where the term that sets it changes:
    left of it the bandwidth (per token, loading is dearer than recomputing), right of it the latency. The
    preset tiers (``table``: :func:`~llmexplore.sweeps.offload.break_even_table`) are points; a tier of another
    kind (one hop from host memory) has its own break-even in the hover and a hollow marker."""
    bw = np.asarray(bmap["bandwidth_GBps"], float)
    lat = np.maximum(np.asarray(bmap["latency_us"], float), 1e-3)
    tok = np.asarray(bmap["tokens"], float)
    lz = np.log10(tok)
    ct, cl = _token_ticks(tok.min(), tok.max())
    data = [dict(type="heatmap", name="break-even prefix", x=bw, y=lat, z=lz, colorscale="Viridis",
                 zmin=float(lz.min()), zmax=float(max(lz.max(), lz.min() + 1e-9)), customdata=tok,
                 colorbar=dict(title=dict(text="break-even<br>(tokens)"), tickvals=ct, ticktext=cl),
                 hovertemplate="%{x:.3~r} GB/s, %{y:,.3~r} µs: loading pays from %{customdata:,.0f} tokens"
                               "<extra></extra>")]
    by_lat = np.asarray(bmap["set_by"]) == "latency"
    cols = np.flatnonzero(by_lat.all(axis=0))
    if cols.size and cols[0] > 0:
        x = float(np.sqrt(bw[cols[0]] * bw[cols[0] - 1]))
        data.append(ref_trace(x=x, span=[lat.min(), lat.max()], name="set by bandwidth (left) | latency (right)",
                              color="#ff4d4d", dash="dash", legendrank=RANK_KEY,
                              hover=f"at {fmt(x, 'GB/s')} loading a token costs what recomputing it does"))
    if table is not None:
        kind = table.loc[table["tier"] == chosen, "kind"].iloc[0] if chosen in set(table["tier"]) else None
        rows = [r for r in table.itertuples() if bw.min() <= r.read_GBps <= bw.max()]
        same = [r.kind == kind if kind else True for r in rows]
        data.append(dict(type="scatter", name="preset tiers (hollow: another kind of tier)",
                         x=[r.read_GBps for r in rows], y=[max(r.latency_us, 1e-3) for r in rows], mode="markers+text",
                         text=[_short_tier(r.tier_label) for r in rows], textposition="top center",
                         textfont=dict(color="white", size=11),
                         marker=dict(size=[14 if r.tier == chosen else 10 for r in rows],
                                     symbol=["circle" if s else "circle-open" for s in same],
                                     color=[tier_color(r.tier) for r in rows], line=dict(color="white", width=2)),
                         customdata=[f"{r.tier_label}: {fmt(r.read_GBps, 'GB/s')}, {fmt(r.latency_us, 'µs')}; its "
                                     f"break-even {fmt(r.break_even_tokens, 'tokens')} (set by the {r.set_by})"
                                     for r in rows], legendrank=RANK_SERIES,
                         hovertemplate="%{customdata}<extra></extra>"))
    layout = base_layout(title, height=500,
                         xaxis=dict(type="log", title=dict(text="tier read bandwidth (GB/s)"),
                                    range=[float(np.log10(bw.min())), float(np.log10(bw.max()))], showgrid=False),
                         yaxis=dict(type="log", title=dict(text="latency per load (µs)"),
                                    range=[float(np.log10(lat.min())), float(np.log10(lat.max()))], showgrid=False),
                         legend=dict(title=dict(text=""), orientation="h", y=-0.18, x=0))
    layout["margin"]["b"] = 90
    return {"data": data, "layout": layout}


@spec_builder
def preload_figure(curve: pd.DataFrame, *, waits: dict | None = None, prefix_tokens: int | None = None,
                   title: str = "Preloading while the request waits") -> go.Figure:
    """Left: the load of one prefix left on the critical path after preloading during the queue wait, the load
    without preloading, the host → GPU copy alone and the recompute, against the wait [ms]. Right: the
    break-even prefix with preloading against the wait (log scale). ``curve`` from
    :func:`llmexplore.sweeps.offload.preload_curve`; ``waits`` ``{name: ms}`` draws marked waits (the chosen
    one, the M/D/1 wait) in both panels."""
    W = curve["queue_wait_ms"].to_numpy(float)
    what = f" of a {prefix_tokens:,}-token prefix" if prefix_tokens is not None else ""
    layout = base_layout(title, height=440, **grid_layout(2, (f"time on the critical path{what}",
                                                              "break-even prefix with preloading"), spacing=0.12))
    series = [("exposed_ms", EXPOSED, "#1f77b4", "solid", 3), ("load_ms", NO_PRELOAD, "#ff7f0e", "dash", 2),
              ("mem_ms", H2D, "#2ca02c", "dot", 2), ("recompute_ms", RECOMPUTE, _RECOMPUTE_COLOR, "dashdot", 2)]
    data, spans = [], []
    for i, (key, name, color, dash, width) in enumerate(series):
        y = curve[key].to_numpy(float)
        spans.append(y[np.isfinite(y)])
        data.append(dict(type="scatter", x=W, y=y, mode="lines", name=name, legendrank=RANK_SERIES + i,
                         line=dict(color=color, dash=dash, width=width),
                         hovertemplate=f"{name}: %{{y:,.4~r}} ms at a %{{x:,.4~r}} ms wait<extra></extra>"))
    be = curve["break_even_tokens"].to_numpy(float)
    data.append(dict(type="scatter", x=W, y=np.where(np.isfinite(be), be, np.nan), mode="lines", name="break-even prefix",
                     line=dict(color="#9467bd", width=2.5, shape="hv"), legendrank=RANK_SERIES + 5, xaxis="x2",
                     yaxis="y2", hovertemplate="a %{x:,.4~r} ms wait: loading pays from %{y:,.0f} tokens<extra></extra>"))
    bspan = be[np.isfinite(be)]
    for j, (name, ms) in enumerate((waits or {}).items()):
        if ms is None or not np.isfinite(ms) or not (W.min() <= ms <= W.max()):
            continue
        color, dash = ("#555", "longdash") if j == 0 else ("#8c564b", "dashdot")
        data.append(ref_trace(x=float(ms), span=np.concatenate(spans), name=name, color=color, dash=dash,
                              legendrank=RANK_MARKER + j, hover=f"{name}: {fmt(ms, 'ms')}"))
        data.append(ref_trace(x=float(ms), span=bspan if bspan.size else [1, 2], name=f"{name} · break-even", color=color,
                              dash=dash, showlegend=False, xaxis="x2", yaxis="y2", hover=f"{name}: {fmt(ms, 'ms')}"))
    layout["xaxis"]["title"] = dict(text="queue wait before the request runs (ms)")
    layout["xaxis2"]["title"] = dict(text="queue wait before the request runs (ms)")
    layout["yaxis"]["title"] = dict(text="time (ms)")
    layout["yaxis"]["rangemode"] = "tozero"
    layout["yaxis2"].update(title=dict(text="break-even prefix (tokens, log)"), type="log")
    layout["margin"]["t"] += 16
    return {"data": data, "layout": layout}


@spec_builder
def staging_figure(replay: dict, *, title: str = "Lookahead preloading under a staging budget") -> go.Figure:
    """Left: bytes staged in host memory over the replayed queue (a step line) against the budget. Right: each
    request's TTFT with and without preloading, against its arrival. ``replay`` from
    :func:`llmexplore.sweeps.offload.staging_replay`."""
    occ, req, budget = replay["occupancy"], replay["requests"], float(replay["budget_GB"])
    layout = base_layout(title, height=440, **grid_layout(2, ("staged KV blocks over the replay",
                                                              "time to first token per request"), spacing=0.1))
    t = occ["time_s"].to_numpy(float)
    data = [dict(type="scatter", x=t, y=occ["staged_GB"].to_numpy(float), mode="lines", name=STAGED,
                 line=dict(color="#1f77b4", shape="hv", width=2), fill="tozeroy", legendrank=RANK_SERIES,
                 hovertemplate="%{y:,.3~r} GB staged at %{x:,.1f} s<extra></extra>"),
            ref_trace(y=budget, span=[0.0, float(t.max()) if t.size else 1.0], name=f"{BUDGET} ({fmt(budget, 'GB')})",
                      color="#c00", dash="dash", legendrank=RANK_KEY, hover=f"staging budget {fmt(budget, 'GB')}")]
    arr = req["arrival_s"].to_numpy(float)
    custom = [f"{int(p):,}-token prefix" + (", preloaded" if pl else "") + (", recomputed" if rc else "")
              for p, pl, rc in zip(req["prefix_tokens"], req["preloaded"], req["recomputed"])]
    data.append(dict(type="scatter", x=arr, y=req["ttft_no_preload_ms"].to_numpy(float), mode="markers",
                     name=WITHOUT_PRELOAD, marker=dict(color="#ff7f0e", symbol="x", size=6), xaxis="x2", yaxis="y2",
                     legendrank=RANK_SERIES + 1, customdata=custom,
                     hovertemplate="arrived %{x:,.1f} s: %{y:,.4~r} ms without preloading (%{customdata})<extra></extra>"))
    data.append(dict(type="scatter", x=arr, y=req["ttft_ms"].to_numpy(float), mode="markers", name=WITH_PRELOAD,
                     marker=dict(color="#1f77b4", symbol="circle", size=6, opacity=0.8), xaxis="x2", yaxis="y2",
                     legendrank=RANK_SERIES + 2, customdata=custom,
                     hovertemplate="arrived %{x:,.1f} s: %{y:,.4~r} ms with preloading (%{customdata})<extra></extra>"))
    layout["xaxis"]["title"] = dict(text="time (s)")
    layout["yaxis"].update(title=dict(text="staged (GB)"), rangemode="tozero")
    layout["xaxis2"]["title"] = dict(text="arrival time (s)")
    layout["yaxis2"].update(title=dict(text="TTFT (ms)"), rangemode="tozero")
    layout["margin"]["t"] += 16
    return {"data": data, "layout": layout}


@spec_builder
def hit_ratio_figure(gpus: pd.DataFrame, saved: pd.DataFrame, *, hit_marker: float | None = None,
                     tier_label: str = "", rate_per_s: float | None = None,
                     title: str = "What a prefix-cache hit ratio saves") -> go.Figure:
    """Three panels against the hit ratio (share of each prompt's tokens served from the tier): the GPUs the
    prefill pool needs at the request rate for the chosen tier (``gpus``:
    :func:`llmexplore.sweeps.offload.gpus_vs_hit_ratio`), the prefill GPU-seconds saved per request per tier
    (``saved``: :func:`~llmexplore.sweeps.offload.saved_by_tier`) and the storage each distinct prompt's cached
    tokens take. ``hit_marker`` draws the chosen hit ratio."""
    rate = f" at {fmt(rate_per_s, 'req/s', trim=True)}" if rate_per_s is not None else ""
    layout = base_layout(title, height=440, **grid_layout(3, (f"GPUs the prefill pool needs{rate}",
                                                              "GPU time saved per request",
                                                              "storage per distinct prompt"), spacing=0.08))
    own = gpus[gpus["tier"] == gpus["tier"].iloc[0]] if "tier" in gpus else gpus
    h = own["hit_ratio"].to_numpy(float)
    g = own["gpus"].to_numpy(float)
    data = [dict(type="scatter", x=h, y=np.where(np.isfinite(g), g, np.nan), mode="lines+markers",
                 name=f"GPUs needed ({tier_label})" if tier_label else "GPUs needed", legendrank=RANK_SERIES,
                 line=dict(color="#333", shape="hv", width=2.5), marker=dict(size=6),
                 hovertemplate="hit ratio %{x:.0%}: %{y:,.0f} GPUs<extra></extra>")]
    spans = [[0.0], g[np.isfinite(g)]]
    # the tiers it is compared with (gpus_vs_hit_ratio(tiers=...)): thinner, in their own colours
    for j, (name, d) in enumerate(gpus.groupby("tier", sort=False) if "tier" in gpus else ()):
        if j == 0:
            continue
        gd = d["gpus"].to_numpy(float)
        label = d["tier_label"].iloc[0]
        data.append(dict(type="scatter", x=d["hit_ratio"].to_numpy(float), y=np.where(np.isfinite(gd), gd, np.nan),
                         mode="lines", name=f"GPUs needed ({label})", legendrank=RANK_SERIES + j,
                         line=dict(color=tier_color(name), shape="hv", width=1.8, dash="dash"),
                         hovertemplate=f"{label}: %{{y:,.0f}} GPUs at hit ratio %{{x:.0%}}<extra></extra>"))
        spans.append(gd[np.isfinite(gd)])
    for i, (name, d) in enumerate(saved.groupby("tier", sort=False)):
        label = d["tier_label"].iloc[0]
        y = d["saved_gpu_ms"].to_numpy(float) / 1e3
        data.append(dict(type="scatter", x=d["hit_ratio"].to_numpy(float), y=y, mode="lines",
                         name=f"saved with {label}", legendrank=RANK_SERIES + 1 + i, xaxis="x2", yaxis="y2",
                         line=dict(color=tier_color(name), width=2),
                         hovertemplate=f"{label}: %{{y:,.3~r}} GPU-s saved at hit ratio %{{x:.0%}}<extra></extra>"))
    st = own["storage_GB_per_prompt"].to_numpy(float)
    data.append(dict(type="scatter", x=h, y=st, mode="lines", name="cached KV per distinct prompt",
                     legendrank=RANK_SERIES + 20, xaxis="x3", yaxis="y3", line=dict(color="#8c564b", width=2),
                     hovertemplate="hit ratio %{x:.0%}: %{y:,.3~r} GB per prompt<extra></extra>"))
    if hit_marker is not None:
        for k, (ax, span) in enumerate((("", np.concatenate(spans)),
                                        ("2", np.r_[0.0, saved["saved_gpu_ms"].to_numpy(float) / 1e3]),
                                        ("3", np.r_[0.0, st]))):
            tr = ref_trace(x=float(hit_marker), span=span, name="chosen hit ratio" + (f" · {k}" if k else ""),
                           color="#555", dash="longdash", showlegend=k == 0, legendrank=RANK_MARKER,
                           hover=f"chosen hit ratio: {100 * hit_marker:.3g}%", xaxis=f"x{ax}" if ax else None,
                           yaxis=f"y{ax}" if ax else None)
            data.append(tr)
    for ax in ("xaxis", "xaxis2", "xaxis3"):
        layout[ax].update(title=dict(text="hit ratio (share of prompt tokens cached)"), tickformat=".0%")
    layout["yaxis"].update(title=dict(text="GPUs"), rangemode="tozero")
    layout["yaxis2"].update(title=dict(text="GPU-seconds saved per request"), rangemode="tozero")
    layout["yaxis3"].update(title=dict(text="GB per distinct prompt"), rangemode="tozero")
    layout["legend"] = dict(title=dict(text=""), orientation="h", y=-0.22, x=0)
    layout["margin"].update(b=110, t=layout["margin"]["t"] + 16)
    layout["height"] += 60
    return {"data": data, "layout": layout}


@spec_builder
def measured_figure(measured: pd.DataFrame, *,
                    title: str = "Measured vs modelled load time per request") -> go.Figure:
    """Each request's load time as measured on the disk against the model's (log-log) with the line
    measured = modelled; ``measured`` a DataFrame with ``modelled_ms`` and ``measured_ms``
    (:func:`llmexplore.sweeps.offload.measured_load`), optionally ``prefix_tokens``."""
    x = measured["modelled_ms"].to_numpy(float)
    y = measured["measured_ms"].to_numpy(float)
    ok = (x > 0) & (y > 0)
    both = np.r_[x[ok], y[ok]] if ok.any() else np.array([1.0, 10.0])
    lo, hi = float(both.min()) / 1.5, float(both.max()) * 1.5
    custom = ([f"{int(p):,}-token prefix" for p in measured["prefix_tokens"]] if "prefix_tokens" in measured
              else [""] * len(measured))
    data = [dict(type="scatter", x=x, y=y, mode="markers", name=MEASURED, legendrank=RANK_SERIES,
                 marker=dict(color="#1f77b4", size=7, opacity=0.8), customdata=custom,
                 hovertemplate="modelled %{x:,.4~r} ms, measured %{y:,.4~r} ms %{customdata}<extra></extra>"),
            dict(type="scatter", x=[lo, hi], y=[lo, hi], mode="lines", name=PARITY, legendrank=RANK_KEY,
                 line=dict(color="#c00", dash="dash", width=1.5), hoverinfo="name")]
    layout = base_layout(title, height=460,
                         xaxis=dict(type="log", title=dict(text="modelled load time (ms)")),
                         yaxis=dict(type="log", title=dict(text="measured load time (ms)")))
    return {"data": data, "layout": layout}


def measured_view(measured: pd.DataFrame | None) -> go.Figure | None:
    """:func:`measured_figure` of ``measured``, or None (nothing to display) when there is no measurement: the
    notebook then says why in the section's finding
    (:func:`llmexplore.findings.offload.measured_sentence`)."""
    return measured_figure(measured) if measured is not None and len(measured) else None


#: headers of the break-even table for people
BREAK_EVEN_HEADERS = {
    "tier_label": "storage tier", "effective_read_GBps": "effective read [GB/s]", "t_g0_ms": "fixed latency [ms]",
    "a_us_per_token": "recompute [µs/token]", "c_us_per_token": "load [µs/token]",
    "break_even_tokens": "break-even [tokens]", "closed_form_tokens": "closed form [tokens]", "set_by": "set by",
}


#: headers of the columns :func:`llmexplore.sweeps.offload.break_even_shift` adds (plain decoding's values)
SHIFT_HEADERS = {"plain_c_us_per_token": "load, plain [µs/token]",
                 "plain_break_even_tokens": "break-even, plain [tokens]", "plain_set_by": "set by, plain"}


def break_even_people_table(table: pd.DataFrame, *, caption: str = "") -> PeopleTable:
    """:func:`llmexplore.sweeps.offload.break_even_table` for people: one row per tier, the per-token costs,
    the exact break-even (the gate) next to the closed form, and which term sets it; for a
    :func:`~llmexplore.sweeps.offload.break_even_shift` also plain decoding's load cost and break-even beside them
    (how far a pipeline or a draft layer moved it)."""
    headers = dict(BREAK_EVEN_HEADERS)
    if all(c in table for c in SHIFT_HEADERS):
        headers.update(SHIFT_HEADERS)
    return people_table(table, headers, caption=caption)
