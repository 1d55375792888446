"""Live explorer of the attention layouts: step time vs context and memory per rank."""

from __future__ import annotations

import html
from dataclasses import dataclass

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from .. import presets
from ..errors import LlmexploreError
from ..models.engine import LAYOUTS, Deployment
from ..plots import TEMPLATE
from ..plots import layouts as layout_plots
from ..sweeps import layouts as layout_sweeps
from . import Explorer, log_options

__all__ = ["LayoutExplorer", "layout_explorer"]

_CONTEXT_GRID = np.geomspace(256, 1 << 20, 80)


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
            curves = layout_sweeps.layout_curves(dep, [batch], _CONTEXT_GRID)
            mem = layout_sweeps.memory_table(dep, batch, context)
            table = layout_sweeps.layout_table(dep, batch, context)
        except LlmexploreError as exc:
            self.fail(exc)
            return
        best = layout_sweeps.best_layout(table)
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


def layout_explorer(model: str = "deepseek-v3", gpu: str = "h200", ranks: int = 8, batch: int = 64,
                    context: int = 8192, weight_dtype: str = "fp8", kv_dtype: str = "bf16") -> LayoutExplorer:
    """Sliders for batch, context and ranks; dropdowns for model, GPU and dtypes; two live figures."""
    batches = sorted(set(log_options(1, 1024)) | {int(batch)})
    contexts = sorted(set(log_options(256, 1 << 20)) | {int(context)})
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
        col = layout_plots.LAYOUT_COLORS[lay]
        step.add_scatter(name=lay, mode="lines", line=dict(color=col, width=2.5), legendgroup=lay)
        step.add_scatter(name=f"{lay} (does not fit)", mode="lines", line=dict(color=col, dash="dot"),
                         legendgroup=lay)
    step.add_scatter(name="chosen context", mode="lines", line=dict(color="#555", dash="dash", width=1))
    step.update_layout(template=TEMPLATE, height=420, margin=dict(l=70, r=30, t=60, b=60),
                       xaxis=dict(type="log", title="context length (tokens)"),
                       yaxis=dict(type="log", title="decode step time (ms)"))
    mem = go.FigureWidget()
    for part, color in layout_plots.PART_COLORS.items():
        mem.add_bar(name=part, marker_color=color)
    mem.add_hline(y=1.0, line=dict(color="#c00", dash="dash"))
    mem.update_layout(template=TEMPLATE, barmode="stack", height=380, margin=dict(l=70, r=30, t=60, b=50),
                      xaxis=dict(title="attention layout"), yaxis=dict(title="memory per rank (GB)"))
    status = W.HTML()
    box = W.VBox([W.HBox([W.VBox([controls["batch"], controls["context"], controls["ranks"]]),
                          W.VBox([controls["model"], controls["gpu"]]),
                          W.VBox([controls["weight_dtype"], controls["kv_dtype"]])]),
                  status, step, mem])
    box.add_class("llmexplore-explorer")
    return LayoutExplorer(controls=controls, figures={"step": step, "memory": mem}, status=status,
                          view=box).connect()
