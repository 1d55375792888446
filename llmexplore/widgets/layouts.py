"""Live explorer of the attention layouts: step time vs context and memory per rank.

Both figures are the notebook's static figures (:func:`llmexplore.plots.layouts.step_time_figure`,
:func:`~llmexplore.plots.layouts.memory_figure`) for the chosen model, GPU, ranks, batch and context.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from .. import _check, presets
from ..models.step.engine import Deployment
from ..plots import fmt
from ..plots import layouts as layout_plots
from ..sweeps import layouts as layout_sweeps
from ..units import DTYPE_BYTES
from . import Draw, Explorer, choice_slider, dropdown, log_options, model_dtypes_runtime, preset_name

__all__ = ["LayoutExplorer", "layout_explorer", "CONTEXT_GRID"]

#: context axis of the step-time figure [tokens]
CONTEXT_GRID = np.geomspace(256, 1 << 20, 80)


@dataclass
class LayoutExplorer(Explorer):
    """Attention-layout explorer (see :func:`layout_explorer`)."""

    FIGURES = ("step", "memory")

    def deployment(self) -> Deployment:
        p = self.params()
        return Deployment.build(p["model"], p["gpu"], int(p["ranks"]), weight_dtype=p["weight_dtype"],
                                kv_dtype=p["kv_dtype"], runtime=p["runtime"])

    def evaluate(self):
        p = self.params()
        dep = self.deployment()
        batch, context = int(p["batch"]), int(p["context"])
        curves = layout_sweeps.layout_curves(dep, [batch], CONTEXT_GRID)
        mem = layout_sweeps.memory_table(dep, batch, context)
        table = layout_sweeps.layout_table(dep, batch, context)
        best = layout_sweeps.best_layout(table)
        where = dep.label()
        draws = {
            "step": Draw(layout_plots.step_time_figure, curves, {
                "context_marker": context, "title": f"Decode step time vs context at batch {batch:,} — {where}"}),
            "memory": Draw(layout_plots.memory_figure, mem, {
                "title": f"Memory per rank at batch {batch:,}, context {context:,} tokens — {where}"}),
        }
        return draws, _status(table, best, batch, context), {"best": best, "table": table}


def _status(table, best: str | None, batch: int, context: int) -> str:
    if best is None:
        why = "; ".join(f"{r.layout}: {r.reason}" for r in table.itertuples())
        return (f"<b>Nothing fits</b> at batch {batch:,} and {context:,} tokens of context. "
                f"{html.escape(why)}. Try fewer sequences, a shorter context, more ranks or FP8.")
    row = table.set_index("layout").loc[best]
    others = ", ".join(f"{r.layout} {fmt(r.step_ms, 'ms')}" + ("" if r.feasible else " (does not fit)")
                       for r in table.itertuples() if r.layout != best)
    return (f"<b>Best: {best}</b> — {fmt(row.step_ms, 'ms')} per step, {fmt(row.tokens_per_s, 'tokens/s')}, "
            f"{fmt(row.total_GB, 'GB')} per rank. Others: {html.escape(others)}.")


def layout_explorer(model: str = "deepseek-v3", gpu: str = "h200", ranks: int = 8, batch: int = 64,
                    context: int = 8192, weight_dtype: str | None = None, kv_dtype: str = "bf16",
                    runtime: str = "default") -> LayoutExplorer:
    """Sliders for batch, context and ranks; dropdowns for model, GPU, dtypes and the runtime preset
    (``data/runtime.yaml``: how kernels are priced); two live figures.

    ``weight_dtype`` defaults to the dtype the model's weights are released in. Unknown names raise
    :class:`~llmexplore.errors.SpecError`; values outside the sliders' usual range are added to them.
    """
    model = preset_name("models", "model", model)
    gpu = preset_name("hardware", "gpu", gpu)
    ranks = _check.integer("ranks", ranks, lo=1)
    batch = _check.integer("batch", batch, lo=1)
    context = _check.integer("context", context, lo=1)
    weight_dtype, kv_dtype, runtime = model_dtypes_runtime(model, weight_dtype, kv_dtype, runtime)
    controls = {
        "batch": choice_slider(log_options(1, 1024), batch, "batch", "sequences"),
        "context": choice_slider(log_options(256, 1 << 20), context, "context", "tokens"),
        "ranks": choice_slider([1, 2, 4, 8, 16, 32], ranks, "ranks T",
                               label=lambda v: f"{v:,} GPU" + ("" if v == 1 else "s")),
        "model": dropdown(presets.names("models"), model, "model"),
        "gpu": dropdown(presets.names("hardware"), gpu, "GPU"),
        "weight_dtype": dropdown(list(DTYPE_BYTES), weight_dtype, "weights"),
        "kv_dtype": dropdown(list(DTYPE_BYTES), kv_dtype, "KV cache"),
        "runtime": dropdown(presets.names("runtime"), runtime, "runtime"),
    }
    rows = [["batch", "context", "ranks"], ["model", "gpu", "runtime"], ["weight_dtype", "kv_dtype"]]
    return LayoutExplorer.build(controls, rows)
