"""Live explorer of speculative decoding: the speed-up in TPOT against batch at the acceptance on the slider.

The figure is the notebook's (:func:`llmexplore.plots.speculative.speedup_figure`) for one accepted length, with
the chosen batch marked; the status line gives the speed-up and both TPOTs there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from ..models.step.speculative import resolve_spec, spec_max_batch
from ..plots import fmt
from ..plots import speculative as spec_plots
from ..sweeps import speculative as spec_sweeps
from ..findings import speculative as spec_findings
from . import Draw, Explorer, choice_slider, log_options, preset_name

__all__ = ["SpecExplorer", "spec_explorer", "BATCH_GRID"]

#: batch axis of the explorer's figure [sequences]
BATCH_GRID = np.unique(np.round(np.geomspace(1, 1024, 31)))
#: points of the acceptance slider between 1 (nothing accepted) and k + 1 (everything accepted)
N_ACCEPTANCE = 41


@dataclass
class SpecExplorer(Explorer):
    """Speculative-decoding explorer (see :func:`spec_explorer`)."""

    FIGURES = ("speedup",)

    def evaluate(self):
        p, f = self.params(), self.fixed
        s = spec_sweeps.setup(f["model"], f["gpu"], f["ranks"], speculative=f["speculative"],
                              accepted_length=float(p["accepted_length"]), context=int(p["context"]),
                              runtime=f["runtime"], weight_dtype=f["weight_dtype"], kv_dtype=f["kv_dtype"])
        batch = int(p["batch"])
        df = spec_sweeps.speedup_vs_batch(s, BATCH_GRID)
        pt = spec_sweeps.point(s, batch)
        cap = int(spec_max_batch(s.dep, s.spec, s.context, s.layout, limit=1 << 16))
        title = (f"{s.spec.label} on {s.dep.label()}: speed-up vs batch at {fmt(p['accepted_length'], trim=True)} "
                 f"tokens per step, {s.context:,} tokens of context")
        draws = {"speedup": Draw(spec_plots.speedup_figure, df, {"batch_marker": batch, "title": title,
                                                                 "series_name": "speed-up at the chosen acceptance"})}
        return draws, spec_findings.explorer_status(pt, s, cap), {"point": pt, "table": df, "max_batch": cap}


def spec_explorer(model: str = "deepseek-v3", gpu: str = "h200", ranks: int = 8, *, speculative="deepseek-mtp-1",
                  accepted_length: float | None = None, batch: int = 32, context: int = 2000,
                  runtime: str = "default", weight_dtype: str | None = None, kv_dtype: str = "bf16") -> SpecExplorer:
    """Sliders for the accepted length (mean tokens per verify step, 1 to k + 1; default the preset's), the batch
    and the context. Unknown names, an MTP draft on a model without an MTP module and values outside the rules
    raise :class:`~llmexplore.errors.SpecError`."""
    model = preset_name("models", "model", model)
    gpu = preset_name("hardware", "gpu", gpu)
    runtime = preset_name("runtime", "runtime", runtime)
    s = spec_sweeps.setup(model, gpu, ranks, speculative=speculative, accepted_length=accepted_length,
                          context=context, runtime=runtime, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    batch = _check.integer("batch", batch, lo=1, hi=1 << 20)
    k = s.spec.draft_tokens
    taus = sorted({round(float(x), 3) for x in np.linspace(1.0, k + 1.0, N_ACCEPTANCE)}
                  | {round(s.spec.tokens_per_step, 3)})
    controls = {
        "accepted_length": choice_slider(taus, round(s.spec.tokens_per_step, 3), "accepted length",
                                         label=lambda v: f"{fmt(v, trim=True)} tokens/step"),
        "batch": choice_slider(log_options(1, 1024), batch, "batch", "sequences"),
        "context": choice_slider(log_options(256, 131072), s.context, "context", "tokens"),
    }
    fixed = {"model": model, "gpu": gpu, "ranks": s.dep.ranks, "speculative": resolve_spec(speculative), "runtime": runtime,
             "weight_dtype": s.dep.weight_dtype, "kv_dtype": s.dep.kv_dtype}
    return SpecExplorer.build(controls, [["accepted_length", "batch"], ["context"]], fixed=fixed)
