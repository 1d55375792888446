"""Live explorers: ipywidgets controls + plotly FigureWidgets redrawn in place.

Each builder returns an explorer with ``controls`` (dict of widgets), ``figures`` (FigureWidgets),
``status`` (an HTML line: the headline or a readable error), ``view`` (the box to display) and ``update()``.
``update()`` calls the same model and sweep functions as the static figures; it never raises into the
widget: bad combinations (ranks that do not divide the heads, nothing fits) are reported in ``status``.
Widgets can be driven without a browser: set ``controls[name].value`` and the figures update.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from . import plots, presets, sweeps
from .errors import LLMExploreError
from .models.attention import LAYOUTS, Deployment

__all__ = ["Explorer", "LayoutExplorer", "layout_explorer", "PDExplorer", "pd_explorer", "MoEExplorer", "moe_explorer"]

_CONTEXT_GRID = np.geomspace(256, 1 << 20, 80)


@dataclass
class Explorer:
    """Controls, live figures, a status line and the box that displays them; ``update()`` redraws."""

    controls: dict[str, W.ValueWidget]
    figures: dict[str, go.FigureWidget]
    status: W.HTML
    view: W.Widget
    fixed: dict = field(default_factory=dict)
    last: dict = field(default_factory=dict)

    def params(self) -> dict:
        return {k: w.value for k, w in self.controls.items()}

    def fail(self, exc: Exception) -> None:
        """Show a readable error in the status line instead of raising into the widget."""
        self.status.value = f'<span style="color:#b00">Cannot evaluate: {html.escape(str(exc))}</span>'
        self.last = {"error": str(exc)}

    def connect(self) -> "Explorer":
        """Redraw on every control change, draw once, and return self."""
        for w in self.controls.values():
            w.observe(self.update, names="value")
        self.update()
        return self

    def update(self, *_) -> None:  # pragma: no cover - every explorer overrides it
        raise NotImplementedError


@dataclass
class LayoutExplorer(Explorer):
    """Attention-layout explorer (see :func:`layout_explorer`)."""

    def deployment(self) -> Deployment:
        p = self.params()
        return Deployment.build(p["model"], p["gpu"], int(p["ranks"]), weight_dtype=p["weight_dtype"],
                                kv_dtype=p["kv_dtype"])

    def update(self, *_) -> None:
        p = self.params()
        try:
            dep = self.deployment()
            batch, context = int(p["batch"]), float(p["context"])
            curves = sweeps.layout_curves(dep, [batch], _CONTEXT_GRID)
            mem = sweeps.memory_table(dep, batch, context)
            table = sweeps.layout_table(dep, batch, context)
        except LLMExploreError as exc:
            self.fail(exc)
            return
        best = sweeps.best_layout(table)
        self.last = {"best": best, "table": table}
        fig = self.figures["step"]
        with fig.batch_update():
            for i, lay in enumerate(LAYOUTS):
                g = curves[curves["layout"] == lay]
                ok = g["feasible"].to_numpy()
                fig.data[2 * i].x = g["context"].to_numpy()
                fig.data[2 * i].y = np.where(ok, g["step_ms"], np.nan)
                fig.data[2 * i + 1].x = g["context"].to_numpy()
                fig.data[2 * i + 1].y = np.where(ok, np.nan, g["step_ms"])
            fig.data[-1].x = [context, context]
            feasible_ms = table["step_ms"].to_numpy()
            fig.data[-1].y = [max(float(np.nanmin(feasible_ms)) * 0.9, 1e-3), float(np.nanmax(feasible_ms)) * 1.1]
            fig.layout.title.text = f"Step time vs context at batch {batch} — {dep.label()}"
        mfig = self.figures["memory"]
        with mfig.batch_update():
            for i, (part, g) in enumerate(mem.groupby("part", sort=False)):
                mfig.data[i].x = g["layout"].to_numpy()
                mfig.data[i].y = g["GB"].to_numpy()
            mfig.layout.shapes[0].y0 = mfig.layout.shapes[0].y1 = dep.usable_B / 1e9
            mfig.layout.title.text = f"Memory per rank at batch {batch}, context {int(context):,} tokens"
        if best is None:
            self.status.value = ("<b>Nothing fits</b> at this batch and context: "
                                 + html.escape("; ".join(f"{r.layout}: {r.reason}" for r in table.itertuples())))
        else:
            row = table.set_index("layout").loc[best]
            others = ", ".join(f"{r.layout} {r.step_ms:.1f} ms" + ("" if r.feasible else " (does not fit)")
                               for r in table.itertuples() if r.layout != best)
            self.status.value = (f"<b>Best: {best}</b> — {row.step_ms:.2f} ms/step, "
                                 f"{row.tokens_per_s:,.0f} tok/s, {row.total_GB:.1f} GB per rank. "
                                 f"Others: {html.escape(others)}")


def _log_options(lo: int, hi: int) -> list[int]:
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return out


def layout_explorer(model: str = "deepseek-v3", gpu: str = "h200", ranks: int = 8, batch: int = 64,
                    context: int = 8192, weight_dtype: str = "fp8", kv_dtype: str = "bf16") -> LayoutExplorer:
    """Sliders for batch, context and ranks; dropdowns for model, GPU and dtypes; two live figures."""
    batches = sorted(set(_log_options(1, 1024)) | {int(batch)})
    contexts = sorted(set(_log_options(256, 1 << 20)) | {int(context)})
    style = {"description_width": "90px"}
    controls = {
        "batch": W.SelectionSlider(options=batches, value=int(batch), description="batch",
                                   continuous_update=False, style=style),
        "context": W.SelectionSlider(options=contexts, value=int(context), description="context (tok)",
                                     continuous_update=False, style=style),
        "ranks": W.SelectionSlider(options=[1, 2, 4, 8, 16, 32], value=int(ranks), description="ranks T",
                                   continuous_update=False, style=style),
        "model": W.Dropdown(options=presets.names("models"), value=model, description="model", style=style),
        "gpu": W.Dropdown(options=presets.names("hardware"), value=gpu, description="GPU", style=style),
        "weight_dtype": W.Dropdown(options=["bf16", "fp8"], value=weight_dtype, description="weights",
                                   style=style),
        "kv_dtype": W.Dropdown(options=["bf16", "fp8"], value=kv_dtype, description="KV cache", style=style),
    }
    step = go.FigureWidget()
    for lay in LAYOUTS:
        col = plots.LAYOUT_COLORS[lay]
        step.add_scatter(name=lay, mode="lines", line=dict(color=col, width=2.5), legendgroup=lay)
        step.add_scatter(name=f"{lay} (does not fit)", mode="lines", line=dict(color=col, dash="dot"),
                         legendgroup=lay)
    step.add_scatter(name="chosen context", mode="lines", line=dict(color="#555", dash="dash", width=1))
    step.update_layout(template=plots.TEMPLATE, height=420, margin=dict(l=70, r=30, t=60, b=60),
                       xaxis=dict(type="log", title="context length (tokens)"),
                       yaxis=dict(type="log", title="decode step time (ms)"))
    mem = go.FigureWidget()
    for part, color in plots.PART_COLORS.items():
        mem.add_bar(name=part, marker_color=color)
    mem.add_hline(y=1.0, line=dict(color="#c00", dash="dash"))
    mem.update_layout(template=plots.TEMPLATE, barmode="stack", height=380, margin=dict(l=70, r=30, t=60, b=50),
                      xaxis=dict(title="attention layout"), yaxis=dict(title="memory per rank (GB)"))
    status = W.HTML()
    box = W.VBox([W.HBox([W.VBox([controls["batch"], controls["context"], controls["ranks"]]),
                          W.VBox([controls["model"], controls["gpu"]]),
                          W.VBox([controls["weight_dtype"], controls["kv_dtype"]])]),
                  status, step, mem])
    box.add_class("llmexplore-explorer")
    return LayoutExplorer(controls=controls, figures={"step": step, "memory": mem}, status=status,
                          view=box).connect()


# ---- prefill/decode disaggregation ----------------------------------------------------------------------------
@dataclass
class PDExplorer(Explorer):
    """Prefill/decode explorer (see :func:`pd_explorer`)."""

    def update(self, *_) -> None:
        from . import pd_sweeps
        from .models import disagg

        p = self.params()
        try:
            s = pd_sweeps.setup(self.fixed["model"], self.fixed["gpu"], prefill_tp=self.fixed["prefill_tp"],
                                decode_tp=self.fixed["decode_tp"], prompt_tokens=int(p["prompt"]),
                                output_tokens=int(p["output"]), rate_per_s=float(p["rate"]),
                                ttft_slo_ms=float(p["ttft_slo"]), tpot_slo_ms=float(p["tpot_slo"]),
                                weight_dtype=self.fixed["weight_dtype"], kv_dtype=self.fixed["kv_dtype"],
                                nics=None if p["nics"] == "one per GPU" else 1)
            pre, dec = s.sides()
            link = presets.link(p["link"])
            rows = []
            for piped in (False, True):
                x = disagg.transfer_side(pre, dec, link, s.workload, pipelined=piped, nics=s.nics)
                z = disagg.size_pools(pre, dec, x, s.workload)
                rows.append(("disaggregated, " + ("pipelined" if piped else "serial"), z, x))
            co = disagg.size_colocated(s.prefill, s.workload, chunk_tokens=(256, 512, 1024, 2048))
            ex = pd_sweeps.exposed_vs_bandwidth(s, self.fixed["bandwidths"])
        except LLMExploreError as exc:
            self.fail(exc)
            return
        modes = ["colocated"] + [r[0] for r in rows]
        gpus = [co["gpus"]] + [r[1]["gpus"] for r in rows]
        fig = self.figures["gpus"]
        with fig.batch_update():
            fig.data[0].x = modes
            fig.data[0].y = [g if np.isfinite(g) else None for g in gpus]
            fig.data[0].text = [f"{g:.0f}" if np.isfinite(g) else "no pool meets the SLOs" for g in gpus]
            fig.layout.title.text = (f"GPUs for {p['rate']:g} req/s, {int(p['prompt']):,} + {int(p['output'])} tokens, "
                                     f"over {link.label}")
        efig = self.figures["exposed"]
        with efig.batch_update():
            for i, (mode, g) in enumerate(ex.groupby("mode", sort=False)):
                efig.data[i].x = g["bandwidth_GBps"].to_numpy()
                efig.data[i].y = g["exposed_ms"].to_numpy()
            efig.data[2].x = [float(ex["bandwidth_GBps"].min()), float(ex["bandwidth_GBps"].max())]
            efig.data[2].y = [pre.prefill_s * 1e3] * 2
            efig.data[3].x = [link.achievable_GBps] * 2
            efig.data[3].y = [float(ex["exposed_ms"].min()), float(ex["exposed_ms"].max())]
        self.last = {"colocated": co, "disaggregated": {r[0]: r[1] for r in rows}}
        prefer = {"colocated": 0, "disaggregated, pipelined": 1, "disaggregated, serial": 2}  # ties
        best = min(zip(gpus, modes), key=lambda t: (t[0], prefer[t[1]]))
        if not np.isfinite(best[0]):
            self.status.value = "<b>No pool of up to 64 instances meets both SLOs.</b> Relax the SLOs or the rate."
            return
        z = rows[1][1]
        split = (f"{z['n_p']} prefill + {z['n_d']} decode instances, TTFT p99 {z['ttft_s'] * 1e3:.0f} ms, "
                 f"TPOT p99 {z['tpot_s'] * 1e3:.1f} ms" if z["feasible"] else z["reason"])
        self.status.value = (f"<b>Fewest GPUs: {best[1]} ({best[0]:.0f})</b>. Disaggregated, pipelined: "
                             f"{html.escape(split)}. Prefill of one prompt {pre.prefill_s * 1e3:.0f} ms; "
                             f"KV {rows[1][2]['physical_B'] / 1e9:.2f} GB per request.")


def pd_explorer(model: str = "llama-3-70b", gpu: str = "h100-sxm", *, prefill_tp: int = 8, decode_tp: int = 8,
                link: str = "roce-400g", prompt: int = 4096, output: int = 256, rate: float = 36.0,
                ttft_slo_ms: float = 1000.0, tpot_slo_ms: float = 40.0, weight_dtype: str = "bf16",
                kv_dtype: str = "bf16") -> PDExplorer:
    """Sliders for prompt and output length, arrival rate and SLOs; dropdowns for the link and NICs."""
    style = {"description_width": "110px"}
    prompts = sorted(set(_log_options(256, 65536)) | {int(prompt)})
    outputs = sorted(set(_log_options(16, 8192)) | {int(output)})
    controls = {
        "prompt": W.SelectionSlider(options=prompts, value=int(prompt), description="prompt (tok)",
                                    continuous_update=False, style=style),
        "output": W.SelectionSlider(options=outputs, value=int(output), description="output (tok)",
                                    continuous_update=False, style=style),
        "rate": W.FloatLogSlider(value=rate, base=10, min=-1, max=3, step=0.05, description="rate (req/s)",
                                 continuous_update=False, style=style),
        "ttft_slo": W.FloatLogSlider(value=ttft_slo_ms, base=10, min=2, max=4.5, step=0.05,
                                     description="TTFT SLO (ms)", continuous_update=False, style=style),
        "tpot_slo": W.FloatLogSlider(value=tpot_slo_ms, base=10, min=0.7, max=3, step=0.05,
                                     description="TPOT SLO (ms)", continuous_update=False, style=style),
        "link": W.Dropdown(options=presets.names("links"), value=link, description="link", style=style),
        "nics": W.Dropdown(options=["one per GPU", "one per instance"], value="one per GPU",
                           description="NICs", style=style),
    }
    gfig = go.FigureWidget()
    gfig.add_bar(name="GPUs", marker_color=[plots.MODE_COLORS["colocated"],
                                            plots.MODE_COLORS["disaggregated, serial"],
                                            plots.MODE_COLORS["disaggregated, pipelined"]],
                 textposition="outside", showlegend=False)
    gfig.update_layout(template=plots.TEMPLATE, height=380, margin=dict(l=70, r=30, t=60, b=50),
                       xaxis=dict(title="serving mode"), yaxis=dict(title="GPUs at the rate and SLOs",
                                                                    rangemode="tozero"))
    efig = go.FigureWidget()
    efig.add_scatter(name="serial", line=dict(color=plots.MODE_COLORS["serial"]))
    efig.add_scatter(name="layer-wise pipelined", line=dict(color=plots.MODE_COLORS["layer-wise pipelined"]))
    efig.add_scatter(name="prefill of one prompt", line=dict(color="#555", dash="dot"))
    efig.add_scatter(name="chosen link", line=dict(color="#c00", dash="dash"))
    efig.update_layout(template=plots.TEMPLATE, height=380, margin=dict(l=70, r=30, t=60, b=50),
                       title="Exposed KV transfer vs link bandwidth",
                       xaxis=dict(type="log", title="achievable bandwidth per NIC (GB/s)"),
                       yaxis=dict(type="log", title="exposed transfer (ms)"))
    status = W.HTML()
    box = W.VBox([W.HBox([W.VBox([controls["prompt"], controls["output"], controls["rate"]]),
                          W.VBox([controls["ttft_slo"], controls["tpot_slo"]]),
                          W.VBox([controls["link"], controls["nics"]])]), status, gfig, efig])
    box.add_class("llmexplore-explorer")
    fixed = {"model": model, "gpu": gpu, "prefill_tp": prefill_tp, "decode_tp": decode_tp,
             "weight_dtype": weight_dtype, "kv_dtype": kv_dtype, "bandwidths": np.geomspace(0.5, 900, 40)}
    return PDExplorer(controls=controls, figures={"gpus": gfig, "exposed": efig}, status=status, view=box,
                      fixed=fixed).connect()


# ---- MoE expert parallelism -------------------------------------------------------------------------------------
@dataclass
class MoEExplorer(Explorer):
    """MoE explorer (see :func:`moe_explorer`)."""

    def update(self, *_) -> None:
        from . import moe_sweeps

        p = self.params()
        f = self.fixed
        tp, ep = p["layout"]
        try:
            df = moe_sweeps.step_vs_skew(f["model"], f["gpu"], f["gpus"], tp=tp, ep=ep,
                                         redundant=int(p["redundant"]) if ep > 1 else 0, batch=int(p["batch"]),
                                         context=f["context"], skews=f["skews"])
            loads = (moe_sweeps.rank_loads(moe_sweeps.config(f["model"], f["gpu"], f["gpus"], tp=tp, ep=ep,
                                                             redundant=int(p["redundant"])), skew=p["skew"])
                     if ep > 1 else None)
        except LLMExploreError as exc:
            self.fail(exc)
            return
        fig = self.figures["skew"]
        names = list(dict.fromkeys(df["placement"]))
        with fig.batch_update():
            for i in range(3):
                if i < len(names):
                    g = df[df["placement"] == names[i]]
                    fig.data[i].x, fig.data[i].y, fig.data[i].name = g["skew"].to_numpy(), g["step_ms"].to_numpy(), names[i]
                    fig.data[i].visible = True
                else:
                    fig.data[i].visible = False
            fig.data[3].x = [p["skew"], p["skew"]]
            fig.data[3].y = [float(df["step_ms"].min()) * 0.98, float(df["step_ms"].max()) * 1.02]
            fig.layout.title.text = f"{df['layout'].iloc[-1]}: step time vs skew at batch {int(p['batch'])}"
        lfig = self.figures["loads"]
        with lfig.batch_update():
            if loads is None:
                for tr in lfig.data:
                    tr.x, tr.y = [], []
                lfig.layout.title.text = "Pure TP: every GPU holds a slice of every expert (no rank imbalance)"
            else:
                for i, (name, g) in enumerate(loads.groupby("placement", sort=False)):
                    lfig.data[i].x, lfig.data[i].y, lfig.data[i].name = (g["rank_by_load"].to_numpy(),
                                                                        g["relative_load"].to_numpy(), name)
                lfig.data[2].x, lfig.data[2].y = [0.5, ep + 0.5], [1, 1]
                lfig.layout.title.text = f"Routed tokens per EP rank at skew {p['skew']:.2f}, busiest first"
        at = df.loc[(df["skew"] - p["skew"]).abs().groupby(df["placement"], sort=False).idxmin().to_numpy()]
        self.last = {"at_skew": at}
        text = "; ".join(f"<b>{html.escape(r.placement)}</b> {r.step_ms:.2f} ms/step "
                         f"(MoE layer {r.moe_layer_us:.0f} us)" for r in at.itertuples())
        if not bool(at["feasible"].all()):
            text = "<b>Does not fit in memory at this batch.</b> " + text
        self.status.value = text


def moe_explorer(model: str = "deepseek-v3", gpu: str = "h200", gpus: int = 16, *, tp: int = 2, ep: int = 8,
                 batch: int = 256, context: int = 2048, skew: float = 2.6, redundant: int = 32) -> MoEExplorer:
    """Sliders for skew, batch and redundant experts; a dropdown for the tp x ep split."""
    from . import moe_sweeps

    style = {"description_width": "120px"}
    opts = [(label, (t, e)) for label, t, e in moe_sweeps.layout_options(gpus, model)]
    controls = {
        "skew": W.FloatSlider(value=skew, min=1.0, max=5.0, step=0.1, description="hot-expert skew",
                              continuous_update=False, style=style),
        "batch": W.SelectionSlider(options=sorted(set(_log_options(16, 8192)) | {int(batch)}), value=int(batch),
                                   description="batch", continuous_update=False, style=style),
        "redundant": W.SelectionSlider(options=[0, 16, 32, 64], value=int(redundant),
                                       description="redundant experts", continuous_update=False, style=style),
        "layout": W.Dropdown(options=opts, value=(tp, ep), description="TP x EP", style=style),
    }
    sfig = go.FigureWidget()
    for col in ("#d62728", "#ff7f0e", "#1f77b4"):
        sfig.add_scatter(mode="lines", line=dict(color=col))
    sfig.add_scatter(name="chosen skew", mode="lines", line=dict(color="#555", dash="dash", width=1))
    sfig.update_layout(template=plots.TEMPLATE, height=380, margin=dict(l=70, r=30, t=60, b=50),
                       xaxis=dict(title="hot-expert skew (max / mean expert load)"),
                       yaxis=dict(title="decode step (ms)"))
    lfig = go.FigureWidget()
    lfig.add_bar(marker_color="#d62728")
    lfig.add_bar(marker_color="#1f77b4")
    lfig.add_scatter(name="balanced", mode="lines", line=dict(color="#333", dash="dash"))
    lfig.update_layout(template=plots.TEMPLATE, barmode="group", height=360, margin=dict(l=70, r=30, t=60, b=50),
                       xaxis=dict(title="EP rank (sorted by load)", dtick=1), yaxis=dict(title="load / mean load"))
    status = W.HTML()
    box = W.VBox([W.HBox([W.VBox([controls["skew"], controls["batch"]]),
                          W.VBox([controls["redundant"], controls["layout"]])]), status, sfig, lfig])
    box.add_class("llmexplore-explorer")
    fixed = {"model": model, "gpu": gpu, "gpus": gpus, "context": context, "skews": np.linspace(1.0, 5.0, 21)}
    return MoEExplorer(controls=controls, figures={"skew": sfig, "loads": lfig}, status=status, view=box,
                       fixed=fixed).connect()
