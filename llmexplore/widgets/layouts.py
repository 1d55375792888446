"""Live explorer of the attention layouts: step time vs context and memory per rank.

Both figures are the notebook's static figures (:func:`llmexplore.plots.layouts.step_time_figure`,
:func:`~llmexplore.plots.layouts.memory_figure`) for the chosen model, GPU, ranks, batch and context, decoded
plainly, in a pipeline of stages, or speculatively (then both are per output token).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from ..deployment import MAX_STAGES
from .. import _check, presets
from ..models.step.engine import Deployment
from ..plots import fmt
from ..plots import layouts as layout_plots
from ..sweeps import layouts as layout_sweeps
from ..units import DTYPE_BYTES
from . import Draw, Explorer, choice_slider, dropdown, log_options, model_dtypes_runtime, preset_name

__all__ = ["LayoutExplorer", "layout_explorer", "CONTEXT_GRID", "NO_SPEC"]

#: the speculative dropdown's entry for plain decoding
NO_SPEC = "none (plain decoding)"

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

    def decoding(self, dep: Deployment) -> dict:
        """The pipeline and speculative decoding of the controls (the fixed accepted length applies to the
        speculative preset it was given with; another preset runs at its own acceptance)."""
        p, f = self.params(), self.fixed
        spec = None if p["speculative"] == NO_SPEC else p["speculative"]
        tau = f.get("accepted_length") if spec is not None and spec == f.get("speculative") else None
        return layout_sweeps.decoding(dep, int(p["pp"]), spec, tau)

    def evaluate(self):
        p = self.params()
        dep = self.deployment()
        dec = self.decoding(dep)
        batch, context = int(p["batch"]), int(p["context"])
        curves = layout_sweeps.layout_curves(dep, [batch], CONTEXT_GRID, **dec)
        mem = layout_sweeps.memory_table(dep, batch, context, **dec)
        table = layout_sweeps.layout_table(dep, batch, context, **dec)
        best = layout_sweeps.best_layout(table)
        where = dep.label() + (f", {layout_sweeps.decoding_of(dep, **dec)}" if dec["pp"] > 1 or dec["speculative"]
                               else "")
        what = "Time per output token" if table["decoding"].iloc[0] else "Decode step time"
        draws = {
            "step": Draw(layout_plots.step_time_figure, curves, {
                "context_marker": context, "title": f"{what} vs context at batch {batch:,} — {where}"}),
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
    per = "per output token" if row.decoding else "per step"
    others = ", ".join(f"{r.layout} {fmt(r.tpot_ms, 'ms')}" + ("" if r.feasible else " (does not fit)")
                       for r in table.itertuples() if r.layout != best)
    return (f"<b>Best: {best}</b> — {fmt(row.tpot_ms, 'ms')} {per}, {fmt(row.tokens_per_s, 'tokens/s')}, "
            f"{fmt(row.total_GB, 'GB')} per rank. Others: {html.escape(others)}.")


def layout_explorer(model: str = "deepseek-v3", gpu: str = "h200", ranks: int = 8, batch: int = 64,
                    context: int = 8192, weight_dtype: str | None = None, kv_dtype: str = "bf16",
                    runtime: str = "default", *, pp: int = 1, speculative: str | None = None,
                    accepted_length: float | None = None) -> LayoutExplorer:
    """Sliders for batch, context and ranks; dropdowns for model, GPU, dtypes, the runtime preset
    (``data/runtime.yaml``: how kernels are priced), pipeline stages and speculative decoding
    (``data/speculative.yaml``; ``accepted_length`` applies to ``speculative``'s preset); two live figures.

    ``weight_dtype`` defaults to the dtype the model's weights are released in. Unknown names raise
    :class:`~llmexplore.errors.SpecError`; values outside the sliders' usual range are added to them.
    """
    model = preset_name("models", "model", model)
    gpu = preset_name("hardware", "gpu", gpu)
    ranks = _check.integer("ranks", ranks, lo=1)
    batch = _check.integer("batch", batch, lo=1)
    context = _check.integer("context", context, lo=1)
    weight_dtype, kv_dtype, runtime = model_dtypes_runtime(model, weight_dtype, kv_dtype, runtime)
    pp = _check.integer("pp", pp, lo=1, hi=MAX_STAGES)
    if speculative is not None:
        speculative = preset_name("speculative", "speculative", speculative)
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
        "pp": choice_slider([1, 2, 4, 8], pp, "pipeline", label=lambda v: "no pipeline" if v == 1 else f"{v} stages"),
        "speculative": dropdown([NO_SPEC, *presets.names("speculative")], speculative or NO_SPEC, "speculative"),
    }
    rows = [["batch", "context", "ranks"], ["model", "gpu", "runtime"], ["weight_dtype", "kv_dtype"],
            ["pp", "speculative"]]
    return LayoutExplorer.build(controls, rows, fixed={"speculative": speculative,
                                                       "accepted_length": accepted_length})
