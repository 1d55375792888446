"""Figures of the KV transfer area: the prefill x decode byte matrix, fan-out per prefill rank, transfer time
per layout pair and against prompt length, and the fragment table for people.

Every builder reads a table of :mod:`llmexplore.sweeps.transfer`; the ones the live explorer redraws are specs
(:func:`~llmexplore.plots.spec_builder`) whose traces keep their names whatever the layouts.
"""

from __future__ import annotations

import html
import textwrap

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from . import RANK_KEY, RANK_SERIES, base_layout, chosen_marker, fmt, grid_layout, spec_builder, uniform_note
from .disagg import mode_color
from .tables import PeopleTable, people_table

__all__ = ["SERIAL", "PIPELINED", "UNBATCHED", "STAGED", "NOT_SUPPORTED", "IDLE", "byte_matrix_figure",
           "fanout_figure", "pairs_figure", "time_vs_prompt_figure", "fragment_people_table", "FRAGMENT_HEADERS"]

#: names of the two transfer modes (and their colours, shared with the prefill/decode area)
SERIAL, PIPELINED = "serial", "layer-wise pipelined (exposed)"
#: the two alternatives to batched writes: one RDMA write per page, and SGLang-style staging buffers
UNBATCHED, STAGED = "one write per page (unbatched)", "staged (one bulk write per rank pair)"
#: legend entry of the layout pairs the planner refuses, and of the prefill ranks that send nothing
NOT_SUPPORTED = "not supported (hover for why)"
IDLE = "idle: another rank sends the same KV"
_SERIAL_COLOR, _PIPELINED_COLOR = mode_color("serial"), mode_color("layer-wise pipelined")
_FANOUT_COLOR, _SENT_COLOR, _IDLE_COLOR, _REFUSED_COLOR = "#1f77b4", "#ff7f0e", "#7f7f7f", "#b00"
#: largest side of a byte matrix whose cells carry their value as text
_TEXT_CELLS = 16


def _dtick(n: int) -> int | None:
    """One tick per rank up to 32 ranks; plotly's own choice beyond."""
    return 1 if n <= 32 else None


@spec_builder
def byte_matrix_figure(matrix: pd.DataFrame, *,
                       title: str = "Bytes each prefill rank sends each decode rank, one request") -> go.Figure:
    """Heatmap of the MB each prefill rank (rows) sends each decode rank (columns) for one request; ``matrix``
    from :func:`llmexplore.sweeps.transfer.byte_matrix`. Cells carry their value when the matrix is at most
    16 x 16; rank pairs outside the request's DP groups, and pairs the plan does not use, are zero (white)."""
    z = matrix.to_numpy(float)
    rows, cols = z.shape
    small = rows <= _TEXT_CELLS and cols <= _TEXT_CELLS
    top = float(z.max()) if z.size and z.max() > 0 else 1.0
    heat = dict(type="heatmap", name="MB per request", x=list(matrix.columns), y=list(matrix.index), z=z,
                zmin=0.0, zmax=top, colorscale="Blues", xgap=1 if small else 0, ygap=1 if small else 0,
                colorbar=dict(title=dict(text="MB per request")),
                hovertemplate="prefill rank %{y} → decode rank %{x}: %{z:,.1f} MB per request<extra></extra>")
    if small:
        heat["text"] = [[fmt(v) if v > 0 else "" for v in row] for row in z]
        heat["texttemplate"] = "%{text}"
    height = int(min(720, max(400, 150 + 26 * rows))) if small else 560
    layout = base_layout(title, height=height,
                         xaxis=dict(title=dict(text="decode rank (global rank of the decode world)"),
                                    dtick=_dtick(cols), showgrid=False),
                         yaxis=dict(title=dict(text="prefill rank (global)"), autorange="reversed",
                                    dtick=_dtick(rows), showgrid=False))
    return {"data": [heat], "layout": layout}


@spec_builder
def fanout_figure(ranks: pd.DataFrame, *, title: str = "Fan-out and bytes sent per prefill rank") -> go.Figure:
    """Decode ranks each prefill rank of the source group serves (left) and the MB it sends for one request
    (right); ``ranks`` from :func:`llmexplore.sweeps.transfer.prefill_rank_table`. Ranks that send nothing
    (another rank of their replica group, or another holder of a replicated buffer, sends it) are marked
    "idle" with a grey cross on both panels."""
    layout = base_layout(title, **grid_layout(2, ("decode ranks each prefill rank serves (fan-out)",
                                                  "bytes each prefill rank sends"), spacing=0.12))
    x = ranks["prefill_rank"].to_numpy()
    idle = ranks["idle"].to_numpy(bool)
    writes = ranks["writes"].to_numpy(float)
    data = [
        dict(type="bar", x=x, y=ranks["fanout"].to_numpy(float), name="fan-out (decode ranks served)",
             marker=dict(color=_FANOUT_COLOR), legendrank=RANK_SERIES,
             hovertemplate="prefill rank %{x} serves %{y} decode rank(s)<extra></extra>"),
        dict(type="bar", x=x, y=ranks["sent_MB"].to_numpy(float), name="sent (MB per request)",
             marker=dict(color=_SENT_COLOR), legendrank=RANK_SERIES + 1, xaxis="x2", yaxis="y2", customdata=writes,
             hovertemplate="prefill rank %{x} sends %{y:,.1f} MB in %{customdata:,.0f} RDMA writes<extra></extra>"),
    ]
    for i, axes in enumerate(({}, {"xaxis": "x2", "yaxis": "y2"})):
        data.append(dict(type="scatter", x=x[idle], y=np.zeros(int(idle.sum())), mode="markers+text",
                         name=IDLE if i == 0 else f"{IDLE} · sent", text=["idle"] * int(idle.sum()),
                         textposition="top center", textfont=dict(color=_IDLE_COLOR, size=10),
                         marker=dict(symbol="x", size=9, color=_IDLE_COLOR), legendgroup=IDLE,
                         showlegend=bool(idle.any()) and i == 0, legendrank=RANK_KEY, cliponaxis=False,
                         hovertemplate="prefill rank %{x}: idle, sends nothing<extra></extra>", **axes))
    fan_top = max(float(ranks["fanout"].max()) if len(ranks) else 1.0, 1.0)
    sent_top = max(float(ranks["sent_MB"].max()) if len(ranks) else 1.0, 1e-9)
    lo_x, hi_x = (float(x.min()) - 0.5, float(x.max()) + 0.5) if len(x) else (-0.5, 0.5)
    for ax in ("xaxis", "xaxis2"):  # a fixed range: the "idle" labels must not widen it
        layout[ax].update(title=dict(text="prefill rank (global)"), dtick=_dtick(len(ranks)), range=[lo_x, hi_x])
    layout["margin"]["t"] += 16  # room between the title and the panel titles
    layout["yaxis"].update(title=dict(text="decode ranks served"), range=[0, fan_top * 1.2], dtick=1 if fan_top <= 8
                           else None)
    layout["yaxis2"].update(title=dict(text="sent per request (MB)"), range=[0, sent_top * 1.2])
    if (len(ranks) > 1 and not idle.any() and ranks["fanout"].nunique() == 1
            and ranks["sent_MB"].round(6).nunique() == 1):
        uniform_note(layout, f"All {len(ranks)} prefill ranks alike: the two layouts split the KV evenly, so "
                             "each serves the same decode ranks and sends the same bytes")
    return {"data": data, "layout": layout}


def _wrap(text: str, width: int = 60) -> str:
    return "<br>".join(textwrap.wrap(html.escape(str(text)), width)) or ""


@spec_builder
def pairs_figure(pairs: pd.DataFrame, *, chosen: tuple[int, int] | None = None,
                 title: str = "KV transfer of one request per layout pair") -> go.Figure:
    """Serial and layer-pipelined (exposed) transfer time of one request per layout pair, log scale; ``pairs``
    from :func:`llmexplore.sweeps.transfer.layout_pairs`. A pair the planner refuses gets a red cross at the
    foot of the axis whose hover gives the planner's reason; ``chosen`` (prefill TP, decode TP) is outlined
    and its label set in bold."""
    labels = pairs["layouts"].astype(str).tolist()
    ok = pairs["feasible"].to_numpy(bool)
    serial = np.where(ok, pairs["serial_ms"].to_numpy(float), np.nan)
    pipe = np.where(ok, pairs["pipelined_ms"].to_numpy(float), np.nan)
    is_chosen = np.array([chosen is not None and (int(p), int(d)) == tuple(chosen)
                          for p, d in zip(pairs["prefill_tp"], pairs["decode_tp"])], dtype=bool)
    outline = dict(color="#222", width=[2.5 if c else 0 for c in is_chosen])

    def col(name, default=np.nan):
        return pairs[name].to_numpy() if name in pairs else np.full(len(pairs), default, dtype=object)

    notes = []
    for busiest, mb, src, fan, copy, pre in zip(col("busiest", ""), col("busiest_MB"), col("max_sources"),
                                                col("max_fanout"), col("local_copy_MB"), col("prefill_ms")):
        if not isinstance(busiest, str) or not busiest:
            notes.append("")
            continue
        text = (f"busiest NIC {busiest}: {fmt(mb, 'MB')}<br>{fmt(src)} source(s) per decode rank, "
                f"fan-out {fmt(fan)}")
        if np.isfinite(float(copy)) and copy > 0:
            text += f"<br>decode replicas copy {fmt(copy, 'MB')} locally"
        text += f"<br>prefill {fmt(pre, 'ms')}" if np.isfinite(float(pre)) else "<br>no prefill model at this TP"
        notes.append(text)
    data = [
        dict(type="bar", x=labels, y=serial, name=SERIAL, marker=dict(color=_SERIAL_COLOR, line=outline),
             legendrank=RANK_SERIES, text=[fmt(v) if np.isfinite(v) else "" for v in serial],
             textposition="outside", textfont=dict(size=10), cliponaxis=False, customdata=notes,
             hovertemplate="%{x}: %{y:,.3~r} ms serial<br>%{customdata}<extra></extra>"),
        dict(type="bar", x=labels, y=pipe, name=PIPELINED,
             marker=dict(color=_PIPELINED_COLOR, line=outline, pattern=dict(shape="/", fgcolor="white")),
             legendrank=RANK_SERIES + 1, text=[fmt(v) if np.isfinite(v) else "" for v in pipe],
             textposition="outside", textfont=dict(size=10), cliponaxis=False,
             hovertemplate="%{x}: %{y:,.3~r} ms exposed, pipelined layer by layer<extra></extra>"),
    ]
    finite = np.concatenate([serial[np.isfinite(serial)], pipe[np.isfinite(pipe)]])
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.1, 10.0)
    foot = lo / 2.5
    bad = ~ok
    reasons = [_wrap(r) for r in pairs["reason"].where(bad, "").astype(str)]
    data.append(dict(type="scatter", x=[l for l, b in zip(labels, bad) if b], y=[foot] * int(bad.sum()),
                     mode="markers+text", name=NOT_SUPPORTED, text=["not supported"] * int(bad.sum()),
                     textposition="top center", textfont=dict(color=_REFUSED_COLOR, size=10),
                     marker=dict(symbol="x", size=11, color=_REFUSED_COLOR), showlegend=bool(bad.any()),
                     legendrank=RANK_KEY, cliponaxis=False, customdata=[r for r, b in zip(reasons, bad) if b],
                     hovertemplate="%{x}: not supported<br>%{customdata}<extra></extra>"))
    ticks = [f"<b>{l}</b>" if c else l for l, c in zip(labels, is_chosen)]
    xtitle = "layout pair (prefill TP → decode TP; bold: the chosen pair)" if is_chosen.any() else \
        "layout pair (prefill TP → decode TP)"
    layout = base_layout(title, barmode="group", bargap=0.25,
                         xaxis=dict(title=dict(text=xtitle), type="category", tickmode="array", tickvals=labels,
                                    ticktext=ticks, categoryorder="array", categoryarray=labels),
                         yaxis=dict(title=dict(text="transfer time of one request (ms)"), type="log",
                                    range=[float(np.log10(lo / 4)), float(np.log10(hi * 4))]))
    return {"data": data, "layout": layout}


@spec_builder
def time_vs_prompt_figure(df: pd.DataFrame, *, prompt_marker: float | None = None,
                          title: str = "KV transfer time vs prompt length") -> go.Figure:
    """Transfer time of one request against prompt length (log-log): serial with batched writes, exposed when
    pipelined layer by layer, with one RDMA write per page (unbatched) and through a staging buffer (one bulk
    write per rank pair), with the prefill compute time for scale; ``df`` from
    :func:`llmexplore.sweeps.transfer.time_vs_prompt` (a series whose column is missing is left out).
    ``prompt_marker`` draws the "chosen prompt" line."""
    x = df["prompt_tokens"].to_numpy(float)
    series = [("serial_ms", SERIAL, _SERIAL_COLOR, "solid", "circle"),
              ("pipelined_ms", PIPELINED, _PIPELINED_COLOR, "dash", "diamond"),
              ("unbatched_ms", UNBATCHED, "#9467bd", "dashdot", "triangle-up"),
              ("staged_ms", STAGED, "#2ca02c", "longdash", "square"),
              ("prefill_ms", "prefill compute of the prompt", "#555", "dot", "x")]
    data, finite = [], []
    for i, (key, name, color, dash, symbol) in enumerate(series):
        if key not in df:
            continue
        y = df[key].to_numpy(float)
        finite.append(y[np.isfinite(y)])
        data.append(dict(type="scatter", x=x, y=y, name=name, mode="lines+markers", legendrank=RANK_SERIES + i,
                         line=dict(color=color, dash=dash, width=2.5 if i < 2 else 1.8),
                         marker=dict(color=color, symbol=symbol, size=7, maxdisplayed=14),
                         hovertemplate=f"{name}: %{{y:,.3~r}} ms at %{{x:,.0f}} tokens<extra></extra>"))
    if prompt_marker is not None:
        data.append(chosen_marker(prompt_marker, finite, what="prompt",
                                  hover=f"chosen prompt: {fmt(prompt_marker, 'tokens')}"))
    layout = base_layout(title, xaxis=dict(type="log", title=dict(text="prompt length (tokens)")),
                         yaxis=dict(type="log", title=dict(text="time per request (ms)")))
    return {"data": data, "layout": layout}


#: headers of the fragment table (units in brackets; offsets and strides are bytes within one page item)
FRAGMENT_HEADERS = {
    "decode_rank": "decode rank", "plan": "plan", "prefill_rank": "prefill rank", "buffer": "buffer",
    "kind": "buffer kind", "src_offset_B": "source offset [B]", "dst_offset_B": "destination offset [B]",
    "bytes_per_page": "bytes per page [B]", "src_stride_B": "source page item [B]",
    "dst_stride_B": "destination page item [B]", "layer_start": "first layer", "layer_end": "layers end (exclusive)",
}


def fragment_people_table(frags: pd.DataFrame, *, caption: str = "") -> PeopleTable:
    """The fragments of :func:`llmexplore.sweeps.transfer.fragment_table` for people: one row per fragment,
    offsets, length and page-item strides in bytes (one layer) and, where fragments differ in them (pipeline
    stages, a draft's layer), the layers it repeats for."""
    cols = {c: h for c, h in FRAGMENT_HEADERS.items() if c in frags}
    if {"layer_start", "layer_end"} <= set(frags) and len(frags[["layer_start", "layer_end"]].drop_duplicates()) <= 1:
        cols = {c: h for c, h in cols.items() if c not in ("layer_start", "layer_end")}  # every layer, every row
    return people_table(frags, cols, caption=caption)
