"""Benchmark the step engine's vectorised prefill and the MoE skew sweeps behind the sliders.

Run: ``.venv/bin/python benchmarks/bench_engine_moe.py`` (or ``make bench``). Medians of repeats, each printed
relative to a fixed numpy reference workload timed in the same process (the machines here are noisy), and
the vectorised prefill against a per-prompt loop (the way prefill was evaluated before it was vectorised).

* recompute (prefill) time over 1,000 prefix lengths x 1,000 link bandwidths: the offload area's grid
  (target well under 0.2 s);
* the same 1,000 prefills one prompt at a time, as a baseline for the speed-up;
* MoE decode step vs 50 skews for TP16, TP2xEP8 static and TP2xEP8 + 32 EPLB, with the explorer's 8 sampled
  placements: cold (placements computed) and redrawn after a batch change (placements memoised), target
  < 0.1 s each; and the redraw with all 58 MoE layers (the expected maximum over ranks dominates);
* the Monte Carlo routing check of one notebook figure (200 trials x 128 tokens; target < 0.5 s).

The last line is machine-readable: ``prefill_grid_s=… prefill_speedup=… moe_cold_s=… moe_redraw_s=… mc_s=…``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_s, print_table, reference_s  # noqa: E402

from llmexplore.models.moe import decode as moe  # noqa: E402
from llmexplore.models.moe import routing  # noqa: E402
from llmexplore.models.step.decode import step_time  # noqa: E402
from llmexplore.models.step.engine import Deployment  # noqa: E402
from llmexplore.models.step.prefill import prefill_time  # noqa: E402


def _prefill_loop(dep: Deployment, prompts: np.ndarray) -> np.ndarray:
    """One step-engine call per prompt (the pre-vectorisation evaluation), for the speed-up baseline."""
    out = np.empty(prompts.size)
    for i, S in enumerate(prompts):
        d = dataclasses.replace(dep, q_tokens=int(S), logits_tokens=1, context_cv=0.0)
        out[i] = float(step_time(d, 1, max(S / 2.0, 1.0), "TP")["step_s"])
    return out


def _moe_sweep(mds, skew, batch, *, cold: bool) -> None:
    if cold:
        moe.clear_memo()
    for m in mds:
        moe.step_time(m, batch, 2048, skew=skew)


def main() -> int:
    ref = reference_s()
    dep = Deployment.build("llama-3-70b", "h100-sxm", 8)
    prefixes = np.unique(np.round(np.geomspace(256, 131072, 1000)))
    bandwidths = np.geomspace(0.5, 64.0, 1000)  # GB/s
    kv_B = dep.model.kv_bytes_per_token(dep.kv_dtype) * prefixes

    def grid():
        recompute = prefill_time(dep, prefixes + 1, 0)["prefill_s"]  # recompute the prefix (+1 new token)
        load = kv_B[:, None] / (bandwidths[None, :] * 1e9)
        return np.minimum(recompute[:, None], load)

    loop_prompts = prefixes + 1
    vec = prefill_time(dep, loop_prompts, 0)["prefill_s"]
    assert np.allclose(vec, _prefill_loop(dep, loop_prompts), rtol=1e-12), "vectorised prefill != loop"
    t_grid = median_s(grid, 7)
    t_vec = median_s(lambda: prefill_time(dep, loop_prompts, 0), 7)
    t_loop = median_s(lambda: _prefill_loop(dep, loop_prompts), 3)

    def build(tp, ep, red=0, bal=None, layers=None):
        return moe.MoEDeployment.build("deepseek-v3", "h200", 16, tp=tp, ep=ep, redundant=red, balance=bal,
                                       layers=layers)

    skew = np.linspace(1.0, 6.0, 50)
    few = [build(16, 1, layers=8), build(2, 8, 0, "none", layers=8), build(2, 8, 32, layers=8)]
    full = [build(16, 1), build(2, 8, 0, "none"), build(2, 8, 32)]
    t_cold = median_s(lambda: _moe_sweep(few, skew, 512, cold=True), 5)
    _moe_sweep(few, skew, 64, cold=False)  # the first draw fills the memo
    t_redraw = median_s(lambda: _moe_sweep(few, skew, 1024, cold=False), 5)
    _moe_sweep(full, skew, 64, cold=False)
    t_redraw_full = median_s(lambda: _moe_sweep(full, skew, 1024, cold=False), 5)
    lp = routing.layer_probs(routing.skew_probs(2.6, 256, 8), 1, seed=0)
    t_mc = median_s(lambda: routing.rank_load_mc(lp, 8, 128, ranks=8, trials=200, seed=5), 5)

    rows = [
        ("reference numpy workload", ref, "baseline", "-"),
        ("recompute vs load, 1000 prefixes x 1000 bandwidths", t_grid, f"{t_grid / ref:.1f}x ref", "< 0.2 s"),
        ("prefill of 1000 prompt lengths, vectorised", t_vec, f"{t_vec / ref:.2f}x ref", "-"),
        ("prefill of 1000 prompt lengths, one at a time", t_loop, f"{t_loop / ref:.1f}x ref", "-"),
        ("  speed-up of the vectorised prefill", t_loop / t_vec, "ratio", ">= 20x"),
        ("MoE 50-skew sweep, 3 layouts, cold (8 layers)", t_cold, f"{t_cold / ref:.1f}x ref", "< 0.1 s"),
        ("MoE 50-skew sweep, 3 layouts, redraw (8 layers)", t_redraw, f"{t_redraw / ref:.1f}x ref", "< 0.1 s"),
        ("MoE 50-skew sweep, 3 layouts, redraw (58 layers)", t_redraw_full, f"{t_redraw_full / ref:.1f}x ref",
         "-"),
        ("Monte Carlo routing, 200 trials x 128 tokens", t_mc, f"{t_mc / ref:.1f}x ref", "< 0.5 s"),
    ]
    print_table(rows)
    print(f"prefill_grid_s={t_grid:.4f} prefill_speedup={t_loop / t_vec:.0f} moe_cold_s={t_cold:.3f} "
          f"moe_redraw_s={t_redraw:.3f} mc_s={t_mc:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
