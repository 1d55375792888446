"""Figures and tables of the deployment planner (notebooks/60_deployment_planner.ipynb): the Pareto frontiers
of colocated and disaggregated serving, the simulated latency distributions of the chosen configuration, the
best configuration as the request rate grows, and the top configurations with their launch flags."""

from __future__ import annotations

import html
import re

import numpy as np
import pandas as pd

from ..deployment import MODES
from . import RANK_KEY, RANK_MARKER, RANK_SERIES, base_layout, fmt, grid_layout, ref_trace, spec_builder
from .disagg import MODE_COLORS as _PD_COLORS
from .tables import PeopleTable, people_table

__all__ = ["MODE_COLORS", "MODE_STYLE", "frontier_figure", "latency_cdf_figure", "rate_figure", "top_people_table", "axis_people_table",
           "check_people_table", "LaunchBlock", "launch_block"]

#: one colour per serving mode, the prefill/decode notebook's (colocated grey, disaggregated pipelined blue)
MODE_COLORS = {"colocated": _PD_COLORS["colocated"], "disaggregated": _PD_COLORS["disaggregated, pipelined"]}
#: dash pattern and marker per mode, so the two stay apart where they overlap
MODE_STYLE = {"colocated": ("dash", "circle"), "disaggregated": ("solid", "diamond")}
BEST_COLOR = "#d62728"
TARGET_COLOR = "#c00"


def _finite(*arrays) -> np.ndarray:
    vals = np.concatenate([np.asarray(a, float).ravel() for a in arrays]) if arrays else np.zeros(0)
    return vals[np.isfinite(vals)]


@spec_builder
def frontier_figure(frontiers: dict, *, configs: pd.DataFrame | None = None, best: dict | None = None,
                    tpot_ms: float | None = None, stat: str = "p90",
                    title: str = "Pareto frontiers: throughput per GPU vs speed per user"):
    """Output tokens/s per GPU (y, log) against tokens/s per user (x = 1000 / TPOT [ms] at ``stat``) for each
    serving mode: the Pareto frontier (points not beaten on both axes) as a line, the feasible configurations
    of the planner's table (``configs``) at their operating points as hollow markers, the chosen ``best`` row as
    a star and the TPOT target as a vertical line at 1000 / ``tpot_ms``. ``frontiers`` is
    :func:`llmexplore.sweeps.plan.plan`'s ``frontiers`` ({mode: frame with tokens_per_s_per_user,
    tokens_per_s_per_gpu, label})."""
    data, ys = [], []
    for rank, mode in enumerate(MODES, start=RANK_SERIES):
        f = frontiers.get(mode)
        f = f.sort_values("tokens_per_s_per_user") if f is not None and len(f) else pd.DataFrame(
            columns=["tokens_per_s_per_user", "tokens_per_s_per_gpu", "label"])
        dash, symbol = MODE_STYLE[mode]
        col = MODE_COLORS[mode]
        x, y = f["tokens_per_s_per_user"].to_numpy(float), f["tokens_per_s_per_gpu"].to_numpy(float)
        ys.append(y)
        data.append(dict(type="scatter", x=x, y=y, name=f"{mode} frontier", mode="lines+markers", legendrank=rank,
                         line=dict(color=col, dash=dash, width=2.5), customdata=f["label"].astype(str).tolist(),
                         marker=dict(color=col, symbol=symbol, size=6, maxdisplayed=40),
                         hovertemplate=(f"{mode}: %{{customdata}}<br>%{{y:,.4~r}} tokens/s/GPU at %{{x:,.3~r}} "
                                        "tokens/s/user<extra></extra>")))
    if configs is not None:
        ok = configs[configs["feasible"]] if "feasible" in configs else configs
        for rank, mode in enumerate(MODES, start=RANK_SERIES + 2):
            c = ok[ok["mode"] == mode]
            y = c["tokens_per_s_per_gpu"].to_numpy(float)
            ys.append(y)
            data.append(dict(type="scatter", x=c["tokens_per_s_per_user"].to_numpy(float), y=y,
                             name=f"{mode} configurations", mode="markers", legendrank=rank,
                             customdata=c["label"].astype(str).tolist(),
                             marker=dict(color=MODE_COLORS[mode], symbol=MODE_STYLE[mode][1] + "-open", size=8),
                             hovertemplate=("%{customdata} at its operating point<br>%{y:,.4~r} tokens/s/GPU, "
                                            "%{x:,.3~r} tokens/s/user<extra></extra>")))
    if best is not None:
        bx, by = float(best["tokens_per_s_per_user"]), float(best["tokens_per_s_per_gpu"])
        ys.append([by])
        data.append(dict(type="scatter", x=[bx], y=[by], name="best configuration", mode="markers",
                         legendrank=RANK_MARKER + 1, customdata=[str(best["label"])],
                         marker=dict(color=BEST_COLOR, symbol="star", size=18, line=dict(color="#222", width=1)),
                         hovertemplate=("best: %{customdata}<br>%{y:,.4~r} tokens/s/GPU at %{x:,.3~r} tokens/s/user"
                                        "<extra></extra>")))
    if tpot_ms is not None:
        x = 1000.0 / float(tpot_ms)
        data.append(ref_trace(x=x, span=_finite(*ys), name=f"TPOT target ({stat} ≤ {fmt(tpot_ms, 'ms', trim=True)})",
                              color=TARGET_COLOR, dash="dash", legendrank=RANK_MARKER,
                              hover=f"{stat} TPOT target {fmt(tpot_ms, 'ms', trim=True)}: {fmt(x)} tokens/s/user"))
    layout = base_layout(title, height=480,
                         xaxis=dict(title=dict(text=f"tokens/s per user (1000 / {stat} TPOT in ms)")),
                         yaxis=dict(type="log", title=dict(text="output tokens/s per GPU")))
    return {"data": data, "layout": layout}


@spec_builder
def cost_frontier_figure(fronts: dict, *, interactivity: float | None = None, price_label: str = "",
                         title: str = "What a million tokens costs against the speed each user sees"):
    """$ per million tokens (input and output together, y, log) against tokens/s per user (x) on each mode's
    cost frontier (``fronts``: {mode: frame with tokens_per_s_per_user, usd_per_mtok_total, label}, points no
    other point of the mode beats on both), with the chosen interactivity as a vertical line; ``price_label``
    names the prices and their dates in the y-axis title."""
    data, ys = [], []
    for rank, mode in enumerate(MODES, start=RANK_SERIES):
        f = fronts.get(mode)
        if f is None or not len(f):
            continue
        dash, symbol = MODE_STYLE[mode]
        col = MODE_COLORS[mode]
        y = f["usd_per_mtok_total"].to_numpy(float)
        ys.append(y)
        data.append(dict(type="scatter", x=f["tokens_per_s_per_user"].to_numpy(float), y=y, name=f"{mode} frontier",
                         mode="lines+markers", legendrank=rank, line=dict(color=col, dash=dash, width=2.5),
                         customdata=f["label"].astype(str).tolist(),
                         marker=dict(color=col, symbol=symbol, size=6, maxdisplayed=40),
                         hovertemplate=(f"{mode}: %{{customdata}}<br>$%{{y:,.4~r}} per million tokens at "
                                        "%{x:,.3~r} tokens/s/user<extra></extra>")))
    if interactivity is not None and ys:
        data.append(ref_trace(x=float(interactivity), span=_finite(*ys), name=f"{fmt(interactivity)} tokens/s per user",
                              color=TARGET_COLOR, dash="dash", legendrank=RANK_MARKER,
                              hover=f"interactivity {fmt(interactivity)} tokens/s/user"))
    ytitle = "$ per million tokens (input + output)" + (f"<br>{price_label}" if price_label else "")
    layout = base_layout(title, height=460, xaxis=dict(title=dict(text="tokens/s per user (1000 / TPOT in ms)")),
                         yaxis=dict(type="log", title=dict(text=ytitle)))
    return {"data": data, "layout": layout}


@spec_builder
def latency_cdf_figure(sim: dict, *, ttft_ms: float, tpot_ms: float, stat: str = "p90",
                       title: str = "Simulated latency distributions of the best configuration"):
    """Cumulative distributions of TTFT (left) and per-request TPOT (right) from the serving simulator
    (``sim`` from :func:`llmexplore.sweeps.plan.simulate_best`: ``cdf`` {metric: values [ms]} at
    ``quantiles``), with the targets as vertical lines, the statistic's quantile as a horizontal line and the
    planner's analytic estimate (``sim["row"]``) as a marker on it. A configuration that was not simulated
    leaves the curves empty (the title says why)."""
    q = np.asarray(sim.get("quantiles", np.linspace(0.01, 0.99, 99)), float)
    cdf = sim.get("cdf") or {}
    row = sim.get("row")
    mode = (row or {}).get("mode", "disaggregated")
    col = MODE_COLORS.get(mode, "#1f77b4")
    lay = grid_layout(2, ("time to first token", "time per output token"), spacing=0.12)
    data = []
    level = None if stat == "mean" else float(stat[1:]) / 100
    for i, (metric, target, label) in enumerate((("ttft", ttft_ms, "TTFT"), ("tpot", tpot_ms, "TPOT")), start=1):
        axes = {} if i == 1 else dict(xaxis="x2", yaxis="y2")
        x = np.asarray(cdf.get(f"{metric}_ms", []), float)
        data.append(dict(type="scatter", x=x, y=q[: x.size], name="simulated" if i == 1 else f"simulated ({label})",
                         mode="lines", line=dict(color=col, width=2.5), legendrank=RANK_SERIES, showlegend=i == 1,
                         hovertemplate=f"{label}: %{{y:.0%}} of requests within %{{x:,.4~r}} ms<extra></extra>",
                         **axes))
        model = float(row[f"{metric}_ms"]) if row is not None else np.nan
        if level is not None:
            data.append(ref_trace(y=level, span=[0.0, float(_finite(x, [target, model]).max())],
                                  name=f"{stat} of requests" if i == 1 else f"{stat} of requests ({label})",
                                  color="#777", dash="dot", showlegend=i == 1, legendrank=RANK_KEY,
                                  hover=f"{stat}: {level:.0%} of requests", **_ref_axes(i)))
        data.append(ref_trace(x=float(target), span=[0, 1], name=f"{label} target ({stat} ≤ "
                              f"{fmt(target, 'ms', trim=True)})", color=TARGET_COLOR, dash="dash",
                              legendrank=RANK_MARKER + i, **_ref_axes(i)))
        if row is not None and level is not None:
            data.append(dict(type="scatter", x=[model], y=[level], name=f"planner's {stat} estimate" if i == 1 else
                             f"planner's {stat} estimate ({label})",
                             mode="markers", legendrank=RANK_MARKER + 3 + i, showlegend=i == 1,
                             marker=dict(color=BEST_COLOR, symbol="x", size=11),
                             hovertemplate=f"planner's {stat} {label}: %{{x:,.4~r}} ms<extra></extra>", **axes))
    for i, label in ((1, "TTFT (ms)"), (2, "TPOT of a request (ms)")):
        sfx = "" if i == 1 else "2"
        lay[f"xaxis{sfx}"].update(title=dict(text=label), rangemode="tozero")
        lay[f"yaxis{sfx}"].update(title=dict(text="share of requests (CDF)"), range=[0, 1.02], tickformat=".0%")
    layout = base_layout(title, height=450, **lay)
    layout["margin"]["t"] += 20  # room for the subplot titles under a two-line title
    return {"data": data, "layout": layout}


def _ref_axes(i: int) -> dict:
    return {} if i == 1 else dict(xaxis="x2", yaxis="y2")


@spec_builder
def rate_figure(sweep: pd.DataFrame, *, rate_per_s: float | None = None, gpus: int | None = None,
                title: str = "The best configuration as the request rate grows"):
    """GPUs needed (left) and output tokens/s per GPU (right) against the request rate, colocated vs
    disaggregated (the best of each mode at each rate; ``sweep`` from
    :func:`llmexplore.sweeps.plan.rate_sweep`); the GPU budget ``gpus`` as a horizontal line and the planned
    ``rate_per_s`` as a vertical one. A mode that cannot serve a rate within the budget has no point there."""
    lay = grid_layout(2, ("GPUs needed", "output tokens/s per GPU"), spacing=0.12)
    data, spans = [], {1: [], 2: []}
    for rank, mode in enumerate(MODES, start=RANK_SERIES):
        g = sweep[sweep["mode"] == mode].sort_values("rate_per_s")
        dash, symbol = MODE_STYLE[mode]
        col = MODE_COLORS[mode]
        for i, (ycol, unit) in enumerate((("gpus", "GPUs"), ("tokens_per_s_per_gpu", "tokens/s/GPU")), start=1):
            y = np.where(g["feasible"], g[ycol].to_numpy(float), np.nan)
            spans[i].append(y)
            data.append(dict(type="scatter", x=g["rate_per_s"].to_numpy(float), y=y, mode="lines+markers",
                             name=mode if i == 1 else f"{mode} ({unit})", legendgroup=mode, showlegend=i == 1,
                             legendrank=rank, line=dict(color=col, dash=dash, width=2.5),
                             marker=dict(color=col, symbol=symbol, size=8),
                             customdata=g["label"].astype(str).tolist(),
                             hovertemplate=(f"{mode}: %{{customdata}}<br>%{{y:,.4~r}} {unit} at %{{x:,.3~r}} req/s"
                                            "<extra></extra>"),
                             **({} if i == 1 else dict(xaxis="x2", yaxis="y2"))))
    if gpus is not None:
        data.append(ref_trace(y=float(gpus), span=sweep["rate_per_s"], name=f"GPU budget ({int(gpus):,})",
                              color="#555", dash="dot", legendrank=RANK_KEY))
        spans[1].append([gpus])
    if rate_per_s is not None and np.isfinite(rate_per_s):
        for i in (1, 2):
            data.append(ref_trace(x=float(rate_per_s), span=_finite(*spans[i]), name="planned rate" if i == 1 else
                                  "planned rate (tokens/s/GPU)", color=BEST_COLOR, dash="longdash", showlegend=i == 1,
                                  legendrank=RANK_MARKER, hover=f"planned rate: {fmt(rate_per_s, 'req/s')}",
                                  **_ref_axes(i)))
    for i in (1, 2):
        sfx = "" if i == 1 else "2"
        lay[f"xaxis{sfx}"].update(title=dict(text="request rate (requests/s)"), type="log")
    lay["yaxis"].update(title=dict(text="GPUs (prefill + decode, or colocated)"), rangemode="tozero")
    lay["yaxis2"].update(title=dict(text="output tokens/s per GPU"), rangemode="tozero")
    return {"data": data, "layout": base_layout(title, height=430, **lay)}


#: the engines' names in table headers and launch blocks
ENGINE_TITLES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


def top_people_table(top: pd.DataFrame, stat: str = "p90") -> PeopleTable:
    """The top configurations (:func:`llmexplore.sweeps.plan.top_table`) for people: sizes, throughput,
    latency at ``stat``, $ per hour and per million tokens and GPU energy per output token (where priced and
    powered), and the vLLM, SGLang and TensorRT-LLM flags per role."""
    shared = {k: v for k, v in top.attrs.get("shared_flags", {}).items() if v}
    names = ENGINE_TITLES
    caption = ("Every configuration below also takes " + "; ".join(f"in {names.get(k, k)}: {v}" for k, v in
                                                                   shared.items())) if shared else ""
    for eng, why in top.attrs.get("not_expressible", {}).items():
        none = eng not in top.columns
        caption += (f"{'. ' if caption else ''}{names.get(eng, eng)} cannot express "
                    f"{'any of these configurations' if none else 'the roles marked so'}: {'; '.join(why)}")
    return people_table(top, {
        "label": "configuration", "gpus": "GPUs", "n_prefill": "prefill instances",
        "n_decode": "decode / colocated instances", "rate_per_s": "rate [req/s]",
        "tokens_per_s_per_gpu": "output tokens/s per GPU", "tokens_per_s_per_user": "tokens/s per user",
        "ttft_ms": f"TTFT {stat} [ms]", "tpot_ms": f"TPOT {stat} [ms]", "max_num_seqs": "max running requests",
        **{c: h for c, h in (("usd_per_hour", "$ per hour"), ("usd_per_mtok_total", "$ per million tokens"),
                             ("j_per_token", "GPU J per output token"))
           if c in top.columns and top[c].notna().any()},  # left out where not priced or powered (said above)
        **{e: f"{t} flags" for e, t in ENGINE_TITLES.items() if e in top.columns}}, caption=caption)


def mix_people_table(mix: pd.DataFrame) -> PeopleTable:
    """Each GPU type alone against a mix of types (:func:`llmexplore.sweeps.plan.mix_table`) for people."""
    return people_table(mix, {
        "choice": "GPU types", "label": "cheapest configuration", "gpus": "GPUs", "rate_per_s": "rate [req/s]",
        "tokens_per_s_per_gpu": "output tokens/s per GPU", "usd_per_hour": "$ per hour",
        "usd_per_mtok_total": "$ per million tokens", "j_per_token": "GPU J per output token",
        "price_dates": "prices of"}, missing="—")


def check_people_table(checks: pd.DataFrame, stat: str = "p90") -> PeopleTable:
    """The analytic estimates against the simulator (:func:`llmexplore.sweeps.plan.check_table`) for people."""
    return people_table(checks, {
        "sim_rank": "rank, simulated", "planner_rank": "rank, planner",
        "label": "configuration", "status": "status", "ttft_model_ms": f"TTFT {stat}, planner [ms]",
        "ttft_sim_ms": f"TTFT {stat}, simulated [ms]", "ttft_gap_pct": "TTFT gap [%]",
        "tpot_model_ms": f"TPOT {stat}, planner [ms]", "tpot_sim_ms": f"TPOT {stat}, simulated [ms]",
        "tpot_gap_pct": "TPOT gap [%]", "disagrees": "more than 10% apart",
        "meets_targets_sim": "meets the targets, simulated"}, digits={"ttft_gap_pct": 1, "tpot_gap_pct": 1})


def axis_people_table(axes: pd.DataFrame, stat: str = "p90") -> PeopleTable:
    """What pipelines and speculation buy (:func:`llmexplore.sweeps.plan.axis_table`) for people."""
    return people_table(axes, {
        "axis": "searched", "label": "best configuration", "gpus": "GPUs",
        "tokens_per_s_per_gpu": "output tokens/s per GPU", "tokens_per_s_per_user": "tokens/s per user",
        "ttft_ms": f"TTFT {stat} [ms]", "tpot_ms": f"TPOT {stat} [ms]", "gain_pct": "gain [%]"},
        digits={"gain_pct": 1})


def shell_lines(text: str, width: int = 100) -> str:
    """Each command line of ``text`` longer than ``width`` split before its ``--flags`` with `` \\``
    continuations (what a shell reads as the same command); lines that are not commands stay as they are."""
    out = []
    for line in text.splitlines():
        if len(line) <= width or " --" not in line or line.lstrip().startswith(("#", "note:")):
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        head, *flags = re.split(r" (?=--[A-Za-z])", line.strip())
        out.append(indent + head + (" \\" if flags else ""))
        for k, f in enumerate(flags):
            out.append(indent + "    " + f + (" \\" if k < len(flags) - 1 else ""))
    return "\n".join(out)


class LaunchBlock:
    """Launch commands shown as preformatted text, one block per engine (HTML in notebooks and reports)."""

    def __init__(self, texts: dict[str, str], titles: dict[str, str] | None = None):
        self.texts = dict(texts)
        self.titles = dict(titles or {})

    def _repr_html_(self) -> str:
        if not self.texts:
            return "<p><em>No configuration meets the targets: nothing to launch.</em></p>"
        # one flag per line with shell continuations: a narrow page never breaks a token, and the block still
        # pastes into a shell as it is; a line longer than the page scrolls instead of wrapping
        parts = [f"<p><strong>{html.escape(self.titles.get(k, k))}</strong></p>"
                 f'<pre class="llmexplore-launch" style="white-space:pre;overflow-x:auto"><code>'
                 f"{html.escape(shell_lines(v))}</code></pre>"
                 for k, v in self.texts.items()]
        return '<div class="llmexplore-launch-block">' + "".join(parts) + "</div>"

    def __repr__(self) -> str:
        if not self.texts:
            return "No configuration meets the targets: nothing to launch."
        return "\n".join(f"{self.titles.get(k, k)}:\n{v}" for k, v in self.texts.items())


def launch_block(texts: dict[str, str]) -> LaunchBlock:
    """The best configuration's launch steps (:func:`llmexplore.findings.plan.launch_texts`) as text blocks."""
    return LaunchBlock(texts, ENGINE_TITLES)
