"""Live explorer of MoE expert parallelism: step time vs skew and routed load per EP rank."""

from __future__ import annotations

import html
from dataclasses import dataclass

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from ..errors import LlmexploreError
from ..plots import TEMPLATE
from ..sweeps import moe as moe_sweeps
from . import Explorer, log_options

__all__ = ["MoEExplorer", "moe_explorer"]


@dataclass
class MoEExplorer(Explorer):
    """MoE explorer (see :func:`moe_explorer`)."""

    def update(self, *_) -> None:
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
        except LlmexploreError as exc:
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
    style = {"description_width": "120px"}
    opts = [(label, (t, e)) for label, t, e in moe_sweeps.layout_options(gpus, model)]
    controls = {
        "skew": W.FloatSlider(value=skew, min=1.0, max=5.0, step=0.1, description="hot-expert skew",
                              continuous_update=False, style=style),
        "batch": W.SelectionSlider(options=sorted(set(log_options(16, 8192)) | {int(batch)}), value=int(batch),
                                   description="batch", continuous_update=False, style=style),
        "redundant": W.SelectionSlider(options=[0, 16, 32, 64], value=int(redundant),
                                       description="redundant experts", continuous_update=False, style=style),
        "layout": W.Dropdown(options=opts, value=(tp, ep), description="TP x EP", style=style),
    }
    sfig = go.FigureWidget()
    for col in ("#d62728", "#ff7f0e", "#1f77b4"):
        sfig.add_scatter(mode="lines", line=dict(color=col))
    sfig.add_scatter(name="chosen skew", mode="lines", line=dict(color="#555", dash="dash", width=1))
    sfig.update_layout(template=TEMPLATE, height=380, margin=dict(l=70, r=30, t=60, b=50),
                       xaxis=dict(title="hot-expert skew (max / mean expert load)"),
                       yaxis=dict(title="decode step (ms)"))
    lfig = go.FigureWidget()
    lfig.add_bar(marker_color="#d62728")
    lfig.add_bar(marker_color="#1f77b4")
    lfig.add_scatter(name="balanced", mode="lines", line=dict(color="#333", dash="dash"))
    lfig.update_layout(template=TEMPLATE, barmode="group", height=360, margin=dict(l=70, r=30, t=60, b=50),
                       xaxis=dict(title="EP rank (sorted by load)", dtick=1), yaxis=dict(title="load / mean load"))
    status = W.HTML()
    box = W.VBox([W.HBox([W.VBox([controls["skew"], controls["batch"]]),
                          W.VBox([controls["redundant"], controls["layout"]])]), status, sfig, lfig])
    box.add_class("llmexplore-explorer")
    fixed = {"model": model, "gpu": gpu, "gpus": gpus, "context": context, "skews": np.linspace(1.0, 5.0, 21)}
    return MoEExplorer(controls=controls, figures={"skew": sfig, "loads": lfig}, status=status, view=box,
                       fixed=fixed).connect()
