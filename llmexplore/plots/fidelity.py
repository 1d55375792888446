"""Figures and tables of the model-fidelity notebook: predicted against measured step times (end to end, before and
after the kernel curves), and the fitted kernel-efficiency curves against their kernel data.

Every builder reads a table of :mod:`llmexplore.sweeps.fidelity`. Points are measurements, lines are the model;
axes are log-scaled where the data span decades, and every axis title carries its unit.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..labels import ENGINE_LABELS, KIND_LABELS, runtime_label
from . import RANK_KEY, RANK_SERIES, base, base_layout, fmt, tidy
from .tables import PeopleTable, people_table

__all__ = ["IDENTITY", "IN_SAMPLE", "band_name", "category_colors", "predicted_vs_measured_figure", "AXES",
           "kernel_curves_figure", "measured_name", "curve_name", "summary_people_table", "category_people_table",
           "not_modelled_people_table", "ranking_people_table", "curve_people_table", "pivot_people_table",
           "rejected_people_table", "sampler_figure"]

IDENTITY = "predicted = measured"
IN_SAMPLE = "in-sample calibration points (fitted to)"
KIND_SYMBOLS = {"decode": "circle", "decode_loaded": "diamond", "prefill": "square"}
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf", "#393b79", "#ad494a", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d",
            "#31a354", "#756bb1", "#636363", "#fd8d3c", "#74c476", "#9e9ac8"]


def band_name(band_pct: float) -> str:
    return f"±{fmt(band_pct, trim=True)}% band"


def category_colors(categories) -> dict[str, str]:
    """One colour per category, in sorted order (the same in every panel)."""
    return {c: _PALETTE[i % len(_PALETTE)] for i, c in enumerate(sorted(set(categories)))}


def _hover_e2e(d: pd.DataFrame) -> list[str]:
    return [f"<b>{r.id}</b><br>{r.model} on {int(r.ranks)}x {r.gpu} ({r.layout}, {r.weight_dtype}), {r.engine}<br>"
            f"{KIND_LABELS.get(r.kind, r.kind)}, batch {fmt(r.batch)}<br>measured {fmt(r.measured_ms, 'ms')}, "
            f"predicted {fmt(r.predicted_ms, 'ms')} ({r.error_pct:+.1f}%)<br>priced with runtime {r.runtime}<br>"
            f"{r.category}" for r in d.itertuples()]


def _band_and_identity(fig: go.Figure, line_x, band_pct: float, *, col: int, legend: bool) -> None:
    """The ±``band_pct`` band around y = x and the y = x line itself on panel ``col`` (legend entries once)."""
    b = band_pct / 100.0
    fig.add_trace(go.Scatter(x=line_x, y=line_x * max(1 - b, 1e-9), mode="lines", line=dict(width=0),
                             hoverinfo="skip", showlegend=False, legendgroup="band", name=band_name(band_pct)),
                  row=1, col=col)
    fig.add_trace(go.Scatter(x=line_x, y=line_x * (1 + b), mode="lines", line=dict(width=0), fill="tonexty",
                             fillcolor="rgba(120,120,120,0.15)", name=band_name(band_pct), legendgroup="band",
                             showlegend=legend, legendrank=2, hoverinfo="name"), row=1, col=col)
    fig.add_trace(go.Scatter(x=line_x, y=line_x, mode="lines", line=dict(color="#444", dash="dash", width=1.5),
                             name=IDENTITY, legendgroup="identity", showlegend=legend, legendrank=1,
                             hoverinfo="name"), row=1, col=col)


def predicted_vs_measured_figure(acc: pd.DataFrame, choices=("scalar", "engine"), *, band_pct: float = 15.0,
                                 title: str = "Predicted against measured step times") -> go.Figure:
    """Predicted against measured time [ms] of every validation row (coloured by model family and GPU, marker by
    kind) and
    every in-sample calibration point (black crosses), one log-log panel per runtime choice (the first one the
    "before"), with the y = x line and a ±``band_pct`` band. ``acc``: :func:`llmexplore.sweeps.fidelity.accuracy_table`."""
    choices = list(choices)
    val = acc[(acc["set"] == "validation") & (acc["status"] == "ok") & acc["choice"].isin(choices)]
    # colour by model family and GPU only (9 entries, not one per full category: 20+ made the legend unreadable);
    # the marker is the phase, the hover names the full category
    val = val.assign(family_gpu=val["category"].astype(str).str.split("|").str[:2].str.join(" | "))
    ins = acc[(acc["set"] == "in-sample") & acc["choice"].isin(choices)]
    colors = category_colors(val["family_gpu"])
    both = pd.concat([val, ins])
    vals = np.concatenate([both["measured_ms"].to_numpy(float), both["predicted_ms"].to_numpy(float)])
    lo, hi = float(np.nanmin(vals)) / 1.6, float(np.nanmax(vals)) * 1.6
    titles = []
    for i, c in enumerate(choices):
        err = val[val["choice"] == c]["abs_error_pct"]
        which = "before" if i == 0 and len(choices) > 1 else "after" if len(choices) > 1 else ""
        titles.append(f"{which + ': ' if which else ''}{runtime_label(c)}, median |error| {err.median():.1f}%")
    fig = make_subplots(rows=1, cols=len(choices), subplot_titles=titles, horizontal_spacing=0.09)
    line_x = np.geomspace(lo, hi, 2)
    for col, c in enumerate(choices, start=1):
        first = col == 1
        _band_and_identity(fig, line_x, band_pct, col=col, legend=first)
        part = val[val["choice"] == c]
        for j, (cat, d) in enumerate(sorted(part.groupby("family_gpu"), key=lambda kv: kv[0])):
            fig.add_trace(go.Scatter(
                x=d["measured_ms"], y=d["predicted_ms"], mode="markers", name=cat, legendgroup=cat, showlegend=first,
                legendrank=RANK_SERIES + j, customdata=_hover_e2e(d), hovertemplate="%{customdata}<extra></extra>",
                marker=dict(color=colors[cat], size=10, symbol=[KIND_SYMBOLS.get(k, "circle") for k in d["kind"]],
                            line=dict(color="#222", width=0.6))), row=1, col=col)
        d = ins[ins["choice"] == c]
        if len(d):
            fig.add_trace(go.Scatter(
                x=d["measured_ms"], y=d["predicted_ms"], mode="markers", name=IN_SAMPLE, legendgroup="in-sample",
                showlegend=first, legendrank=3,
                customdata=[f"<b>{r.id}</b> (in-sample: the presets were fitted to it)<br>{r.model} on "
                            f"{int(r.ranks)}x {r.gpu}, AIConfigurator ({r.engine} kernels)<br>measured "
                            f"{fmt(r.measured_ms, 'ms')}, predicted {fmt(r.predicted_ms, 'ms')} ({r.error_pct:+.1f}%)"
                            for r in d.itertuples()],
                hovertemplate="%{customdata}<extra></extra>",
                marker=dict(color="#000", size=11, symbol="x-thin-open", line=dict(width=2))), row=1, col=col)
    for kind, symbol in KIND_SYMBOLS.items():
        if (val["kind"] == kind).any():
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"marker: {KIND_LABELS[kind]}",
                                     marker=dict(color="#bbb", size=10, symbol=symbol, line=dict(color="#222", width=0.6)),
                                     legendgroup=f"kind-{kind}", legendrank=4, hoverinfo="skip"),
                          row=1, col=1)
    fig.update_xaxes(type="log", range=[math.log10(lo), math.log10(hi)], title_text="measured (ms)")
    fig.update_yaxes(type="log", range=[math.log10(lo), math.log10(hi)], title_text="predicted (ms)")
    layout = base_layout(title, height=680)
    layout["margin"]["b"] = 160
    layout["margin"]["t"] += 20
    fig.update_layout(**layout)
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.14, yanchor="top", font=dict(size=10),
                                  title=dict(text="colour: model family | GPU (the full category is in the hover)<br>",
                                             side="top", font=dict(size=11))))
    return tidy(fig)


# ---- kernel curves ---------------------------------------------------------------------------------------------

#: per kernel class: x title, y title, name of the reference line (None: none), y on a log axis
AXES = {
    "gemm": ("M: rows of the activation (tokens)", "achieved (TFLOP/s)", "datasheet dense peak", True),
    "grouped_gemm": ("tokens per expert (tokens × top-k / experts)", "useful FLOP/s (% of the dense peak)", None, True),
    "attention_decode": ("bytes the kernel reads (MB)", "achieved bandwidth (TB/s)", "datasheet HBM bandwidth", True),
    "all_reduce": ("message size (MB)", "latency (µs)", None, True),
    "deepep_ll": ("bytes a rank sends (MB: tokens × top-k × bytes per copy)", "kernel time (µs)", None, True),
}
_SERIES_COLORS = {"small": "#1f77b4", "medium": "#ff7f0e", "large": "#2ca02c", "KV BF16": "#1f77b4",
                  "KV FP8": "#d62728", "2 GPUs": "#9467bd", "4 GPUs": "#8c564b", "8 GPUs": "#17becf"}
FLOOR = "open markers: tiny kernels (< 2 MB) that set the overhead, not fitted"


def _series_text(kind: str, series: str) -> str:
    return f"{series} shape" if kind in ("gemm", "grouped_gemm") else series


def measured_name(kind: str, series: str) -> str:
    return f"measured, {_series_text(kind, series)}"


def curve_name(kind: str, series: str) -> str:
    return f"fitted curve, {_series_text(kind, series)}"


def _color(series: str, i: int) -> str:
    return _SERIES_COLORS.get(series, _PALETTE[i % len(_PALETTE)])


_SUB = "<span style='font-size:10px'>{}</span>"
SUBTITLE_CHARS = 72  # longest line of a panel's small-print subtitle (about a panel's width at 10 px)
HEAD_CHARS = 85  # longest first line of a panel title (12 px) before its numbers move to the small print


def _panel_title(ct, panel: str) -> str:
    """The panel's title: its curves' median |error| and rows, then in small print whose curve it is (when not the
    engine's own) and the shapes drawn, wrapped at :data:`SUBTITLE_CHARS`."""
    rows = ct.curves[ct.curves["panel"] == panel]
    stats = [f"{r.median_abs_error_pct:.1f}%" + (f" ({r.series})" if r.series else "") for r in rows.itertuples()]
    n = int(rows["rows"].sum())
    head = f"<b>{panel}</b>: median |error| {', '.join(stats)} over {n:,} rows"
    if len(head) - 7 <= HEAD_CHARS:
        lines = [head]
    else:  # many series (e.g. one per EP size): the numbers go to small print, wrapped to the panel's width
        lines, line = [f"<b>{panel}</b>: median |error| over {n:,} rows"], ""
        for part in stats:
            if line and len(line) + 2 + len(part) > SUBTITLE_CHARS:
                lines.append(_SUB.format(line + ","))
                line = part
            else:
                line = f"{line}, {part}" if line else part
        lines.append(_SUB.format(line))
    borrowed = rows[(rows["curve_from"] == "any") & (ct.engine != "any")]
    if len(borrowed):
        lines.append(_SUB.format("engine-neutral curve: the engine's own was rejected"
                                 if borrowed["rejected"].astype(bool).any() else "engine-neutral curve"))
    shapes = ct.panels[ct.panels["panel"] == panel]["shapes"]
    if len(shapes) and len(shapes.iloc[0]):
        names = list(ct.points[ct.points["panel"] == panel]["series"].unique())
        line = ""
        for part in (f"{a}: {b}" for a, b in zip(names, shapes.iloc[0])):
            if line and len(line) + 3 + len(part) > SUBTITLE_CHARS:
                lines.append(_SUB.format(line))
                line = part
            else:
                line = f"{line} · {part}" if line else part
        lines.append(_SUB.format(line))
    return "<br>".join(lines)


def kernel_curves_figure(ct, *, title: str = "Fitted kernel curves against their kernel data") -> go.Figure:
    """Measured kernel rows (points) and the fitted soft-roofline curve (lines) of one kernel class, a panel per
    dtype or variant (up to two per row), with the datasheet peak as a dotted line where it applies. ``ct``: a
    :class:`~llmexplore.sweeps.fidelity.CurveTables` (``gemm_curves``, ``moe_curves``,
    ``decode_attention_curves`` or ``allreduce_curves``)."""
    x_title, y_title, ref_name, ylog = AXES[ct.kind]
    panels = list(ct.panels["panel"])
    if not panels:
        fig = go.Figure()
        fig.update_layout(**base_layout(f"{title} — no kernel rows of this class for this GPU and engine", 300),
                          xaxis=dict(title=dict(text=x_title)), yaxis=dict(title=dict(text=y_title)))
        return fig
    cols = min(2, len(panels))
    nrows = math.ceil(len(panels) / cols)
    titles = [_panel_title(ct, p) for p in panels]
    sub_lines = max(t.count("<br>") for t in titles) + 1
    # pixels: a plot row, the gap between rows (the x-axis title above, the panel titles below) and the top margin
    row_px, gap_px = 330, 80 + 17 * sub_lines
    top_px = 80 + 22 * base_layout(title)["title"]["text"].count("<br>") + 17 * sub_lines
    plots_px = nrows * row_px + (nrows - 1) * gap_px
    fig = make_subplots(rows=nrows, cols=cols, subplot_titles=titles, horizontal_spacing=0.1,
                        vertical_spacing=gap_px / plots_px if nrows > 1 else 0.0)
    shown, floor_shown = set(), False
    series_order = list(pd.unique(ct.points["series"]))
    for i, panel in enumerate(panels):
        r, c = i // cols + 1, i % cols + 1
        pts = ct.points[ct.points["panel"] == panel]
        for series, d in pts.groupby("series", sort=False):
            k = series_order.index(series)
            color = _color(series, k)
            name = measured_name(ct.kind, series)
            hover = [f"{s}<br>{e}<br>x = {fmt(x)}, measured {fmt(y)}<br>time: measured {fmt(mu, 'µs')}, predicted "
                     f"{fmt(pu, 'µs')} ({er:+.1f}%)" for s, e, x, y, mu, pu, er in
                     zip(d["shape"], d["engine"], d["x"], d["y"], d["measured_us"], d["predicted_us"], d["error_pct"])]
            fitted = d["fitted"].to_numpy(bool)
            fig.add_trace(go.Scatter(
                x=d["x"][fitted], y=d["y"][fitted], mode="markers", name=name, legendgroup=name,
                showlegend=name not in shown, legendrank=RANK_SERIES + 2 * k,
                customdata=[h for h, f in zip(hover, fitted) if f], hovertemplate="%{customdata}<extra></extra>",
                marker=dict(color=color, size=6, opacity=0.75)), row=r, col=c)
            if (~fitted).any():  # the tiny kernels that set the overhead: same series, open markers
                fig.add_trace(go.Scatter(
                    x=d["x"][~fitted], y=d["y"][~fitted], mode="markers", name=f"{name} (overhead kernels)",
                    legendgroup=name, showlegend=False, customdata=[h for h, f in zip(hover, fitted) if not f],
                    hovertemplate="%{customdata}<extra></extra>",
                    marker=dict(color=color, size=6, opacity=0.75, symbol="circle-open")), row=r, col=c)
            shown.add(name)
            floor_shown |= bool((~fitted).any())
            ln = ct.lines[(ct.lines["panel"] == panel) & (ct.lines["series"] == series)]
            cname = curve_name(ct.kind, series)
            fig.add_trace(go.Scatter(x=ln["x"], y=ln["y"], mode="lines", name=cname, legendgroup=cname,
                                     showlegend=cname not in shown, legendrank=RANK_SERIES + 2 * k + 1,
                                     line=dict(color=color, width=2.5),
                                     hovertemplate=f"{cname}: %{{y:.4~r}} at x = %{{x:.4~r}}<extra></extra>"),
                          row=r, col=c)
            shown.add(cname)
        ref = ct.panels[ct.panels["panel"] == panel]["ref_y"].iloc[0]
        if ref_name and np.isfinite(ref):
            xs = pts["x"].to_numpy(float)
            fig.add_trace(go.Scatter(x=[xs.min(), xs.max()], y=[ref, ref], mode="lines", name=ref_name,
                                     legendgroup="ref", showlegend=ref_name not in shown, legendrank=RANK_KEY,
                                     line=dict(color="#555", dash="dot", width=1.5),
                                     hovertemplate=f"{ref_name}: {fmt(ref)}<extra></extra>"), row=r, col=c)
            shown.add(ref_name)
    if floor_shown:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=FLOOR, hoverinfo="skip",
                                 legendrank=RANK_KEY + 1, marker=dict(color="#777", symbol="circle-open", size=7)))
    fig.update_xaxes(type="log", title_text=x_title)
    fig.update_yaxes(type="log" if ylog else "linear", title_text=y_title)
    layout = base_layout(title)
    layout["margin"]["t"] = top_px
    fig.update_layout(**layout)
    fig.update_layout(height=top_px + layout["margin"]["b"] + plots_px)
    fig.update_annotations(font=dict(size=12))
    return tidy(fig)


# ---- tables for people -----------------------------------------------------------------------------------------


def summary_people_table(summary: pd.DataFrame) -> PeopleTable:
    """:func:`~llmexplore.sweeps.fidelity.accuracy_summary` for people."""
    band = summary["band_pct"].iloc[0]
    return people_table(summary, {"label": "runtime", "modelled": "rows modelled", "rows": "validation rows",
                                  "median_abs_error_pct": "median |error| [%]", "p90_abs_error_pct": "p90 |error| [%]",
                                  "within_band": f"rows within ±{fmt(band, trim=True)}%",
                                  "worst_category": "worst category",
                                  "worst_median_error_pct": "its median error [%]",
                                  "in_sample_max_abs_error_pct": "in-sample: largest |error| [%]"},
                        digits={"median_abs_error_pct": 1, "p90_abs_error_pct": 1, "worst_median_error_pct": 0,
                                "in_sample_max_abs_error_pct": 1})


def category_people_table(cats: pd.DataFrame, choices) -> PeopleTable:
    """:func:`~llmexplore.sweeps.fidelity.category_errors` for people: the median |error| per runtime choice and the
    sign of the first choice's error (+: the model reads high)."""
    cols = {"family": "model family", "gpu": "GPU", "weight_dtype": "weights", "parallelism": "parallelism",
            "phase": "phase", "rows": "rows"}
    for c in choices:
        cols[f"{c}_abs_error_pct"] = f"median |error|, {runtime_label(c)} [%]"
    cols[f"{choices[0]}_error_pct"] = f"median error, {runtime_label(choices[0])} [%]"
    return people_table(cats, cols, digits={k: 1 for k in cols if k.endswith("_pct")})


def not_modelled_people_table(nm: pd.DataFrame) -> PeopleTable:
    return people_table(nm, {"id": "row", "model": "model", "gpu": "GPU", "ranks": "ranks", "layout": "layout",
                             "measured_ms": "measured [ms]", "reason": "why the model cannot represent it"})


def ranking_people_table(pairs: pd.DataFrame) -> PeopleTable:
    return people_table(pairs, {"a": "row a", "b": "row b", "differs_in": "deployments differ in",
                                "a_measured_ms": "a measured [ms]", "b_measured_ms": "b measured [ms]",
                                "a_predicted_ms": "a predicted [ms]", "b_predicted_ms": "b predicted [ms]",
                                "resolved": "model tells them apart", "agrees": "same order"})


def curve_people_table(catalog: pd.DataFrame, gpu: str, engine: str) -> PeopleTable:
    """The curves of one engine set and GPU with their kernel-level fit error and parameters."""
    d = catalog[(catalog["gpu"] == gpu) & (catalog["engine"] == engine)]
    cols = {"key": "curve (class.variant.dtype)", "points": "kernel rows", "median_err_pct": "median |error| [%]",
            "p90_err_pct": "p90 |error| [%]", "eta_compute": "η compute", "eta_mem": "η memory",
            "overhead_us": "overhead [µs]", "knee": "knee p", "tile_m": "M tile"}
    if engine == "any":
        cols["from_engine"] = "engine's curve"
    return people_table(d, cols, digits={"median_err_pct": 1, "p90_err_pct": 1, "eta_compute": 3, "eta_mem": 3,
                                         "overhead_us": 1, "knee": 1},
                        caption=f"Every curve of the {engine} set on {gpu} (data/kernel_efficiency.yaml)")


def pivot_people_table(pivot: pd.DataFrame) -> PeopleTable:
    """:func:`~llmexplore.sweeps.fidelity.fit_error_pivot` for people (— where a set has no such curve)."""
    cols = {"key": "curve"} | {c: f"{c} [%]" for c in pivot.columns if c != "key"}
    return people_table(pivot, cols, digits={c: 1 for c in pivot.columns if c != "key"},
                        caption="Median |error| of every curve over its kernel rows, per engine set and GPU")


def rejected_people_table(rej: pd.DataFrame) -> PeopleTable:
    return people_table(rej, {"engine": "engine", "gpu": "GPU", "key": "curve", "reason": "why it was rejected"},
                        caption="Curves rejected as not the engine's production kernel (the engine-neutral curve "
                                "prices those kernels)")


def sampler_figure(df: pd.DataFrame, *, band_pct: float = 15.0, title: str | None = None) -> go.Figure:
    """Error of the rows that sampled with vLLM's sort-based top-k/top-p (:func:`~..sweeps.fidelity.sampler_effect`)
    against batch size: with the sampler priced and with it left out, the ±``band_pct`` band shaded."""
    fig = go.Figure()
    if not len(df):
        return base(fig, title or "No validation row samples with the sort-based sampler")
    x = df["batch"].astype(float)
    lo, hi = float(x.min()) / 1.5, float(x.max()) * 1.5
    fig.add_trace(go.Scatter(x=[lo, hi, hi, lo], y=[-band_pct, -band_pct, band_pct, band_pct], fill="toself",
                             mode="lines", line=dict(width=0), fillcolor="rgba(120,120,120,0.12)",
                             name=band_name(band_pct), hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=[lo, hi], y=[0, 0], mode="lines", line=dict(color="#444", dash="dash", width=1),
                             name="predicted = measured", hoverinfo="skip"))
    hover = [f"{r.id}<br>{r.model} on {r.gpu}, batch {r.batch}" for r in df.itertuples()]
    for col, name, color, symbol in (("error_fused_pct", "sampler left out", "#bbbbbb", "circle-open"),
                                     ("error_pct", "sort-based sampler priced", "#1f77b4", "circle")):
        fig.add_trace(go.Scatter(x=x, y=df[col], mode="markers", name=name, text=hover,
                                 marker=dict(color=color, symbol=symbol, size=9, line=dict(width=1.5, color=color)),
                                 hovertemplate="%{text}<br>error %{y:+.1f}%<extra></extra>"))
    fig.update_xaxes(type="log", range=[math.log10(lo), math.log10(hi)], title_text="decode batch (sequences)")
    fig.update_yaxes(title_text="error: predicted / measured − 1 (%)")
    return base(fig, title or "vLLM 0.11.1's sort-based top-p sampler, priced and left out")


# ---- serving end to end (issue 19 §2) ----------------------------------------------------------------------------

ENGINE_COLORS = {"trtllm": "#76b900", "vllm": "#1f77b4", "sglang": "#d62728"}


def serving_vs_measured_figure(table: pd.DataFrame, *, band_pct: float = 25.0,
                               title: str = "The serving simulator against real engines") -> go.Figure:
    """Simulated against measured mean TTFT and TPOT [ms] of every simulated closed-loop benchmark, one log-log
    panel per metric, coloured by engine, with the y = x line and a ±``band_pct`` band. ``table``:
    :func:`llmexplore.sweeps.fidelity.e2e.evaluate`."""
    ok = table[table["status"] == "ok"]
    metrics = (("ttft", "TTFT"), ("tpot", "TPOT"))
    titles = []
    for m, name in metrics:
        e = ok[f"{m}_error_pct"].abs()
        titles.append(f"{name}: MAPE {e.mean():.0f}%, median |error| {e.median():.0f}% ({len(ok):,} benchmarks)")
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.09)
    for col, (m, name) in enumerate(metrics, start=1):
        vals = np.concatenate([ok[f"{m}_measured_ms"].to_numpy(float), ok[f"{m}_model_ms"].to_numpy(float)])
        lo, hi = float(np.nanmin(vals)) / 1.5, float(np.nanmax(vals)) * 1.5
        line_x = np.geomspace(lo, hi, 2)
        first = col == 1
        _band_and_identity(fig, line_x, band_pct, col=col, legend=first)
        for j, (eng, d) in enumerate(sorted(ok.groupby("engine"), key=lambda kv: kv[0])):
            text = [f"<b>{r.id}</b><br>{r.family} on {r.gpu}, {ENGINE_LABELS.get(r.engine, r.engine)}, "
                    f"{int(r.concurrency)} clients, ISL {r.isl:,} / OSL {r.osl:,}<br>measured "
                    f"{fmt(getattr(r, m + '_measured_ms'), 'ms')}, simulated {fmt(getattr(r, m + '_model_ms'), 'ms')} "
                    f"({getattr(r, m + '_error_pct'):+.0f}%)" for r in d.itertuples()]
            fig.add_trace(go.Scatter(
                x=d[f"{m}_measured_ms"], y=d[f"{m}_model_ms"], mode="markers",
                name=ENGINE_LABELS.get(eng, eng), legendgroup=eng, showlegend=first, legendrank=RANK_SERIES + j,
                customdata=text, hovertemplate="%{customdata}<extra></extra>",
                marker=dict(color=ENGINE_COLORS.get(eng, "#888"), size=5, opacity=0.55)), row=1, col=col)
        fig.update_xaxes(type="log", range=[math.log10(lo), math.log10(hi)], title_text=f"measured mean {name} (ms)",
                         row=1, col=col)
        fig.update_yaxes(type="log", range=[math.log10(lo), math.log10(hi)], title_text=f"simulated mean {name} (ms)",
                         row=1, col=col)
    layout = base_layout(title, height=600)
    layout["margin"]["b"] = 120
    fig.update_layout(**layout)
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.16, yanchor="top"))
    return tidy(fig)


def serving_people_table(cats: pd.DataFrame) -> PeopleTable:
    """:func:`llmexplore.sweeps.fidelity.e2e.category_table` for people."""
    return people_table(cats, {"dimension": "by", "category": "category", "rows": "benchmarks",
                               "simulated": "simulated", "ttft_mape_pct": "TTFT MAPE [%]",
                               "ttft_median_error_pct": "TTFT median error [%]", "tpot_mape_pct": "TPOT MAPE [%]",
                               "tpot_median_error_pct": "TPOT median error [%]"},
                        digits={"ttft_mape_pct": 0, "ttft_median_error_pct": 0, "tpot_mape_pct": 1,
                                "tpot_median_error_pct": 1})
