"""Benchmark the attention-layout model: big grid, single-point loop, slider redraw.

Run: ``.venv/bin/python benchmarks/bench_layouts.py`` (or ``make bench``). Machines here are noisy, so every
timing is a median of repeats and is also printed as a ratio to a fixed numpy reference workload timed in the
same process. Targets: grid < 1 s on 2 cores, grid >= 100x faster per point than the loop,
redraw < 100 ms. The last line is machine-readable: ``grid_s=… speedup=… redraw_ms=…``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_s as _median_s  # noqa: E402
from _timing import redraw_ms as _redraw_ms  # noqa: E402
from _timing import reference_s  # noqa: E402
from _timing import print_table  # noqa: E402

from llmexplore import sweeps, widgets  # noqa: E402
from llmexplore.models.step import decode as att  # noqa: E402
from llmexplore.models.step.engine import LAYOUTS, Deployment  # noqa: E402

N_GRID = 1000  # batch values x context values
N_LOOP = 400  # sampled points evaluated one at a time (x 4 layouts)
REPEATS = 5


def main() -> int:
    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8")
    batch = np.arange(1, N_GRID + 1, dtype=float)[:, None]
    context = np.geomspace(128, 1 << 20, N_GRID)[None, :]
    ref = reference_s()

    grid_s = _median_s(lambda: att.evaluate_all(dep, batch, context))
    best_s = _median_s(lambda: sweeps.layouts.best_layout_grid(dep, batch, context))

    rng = np.random.default_rng(0)
    bi = rng.integers(0, N_GRID, N_LOOP)
    si = rng.integers(0, N_GRID, N_LOOP)
    pts = list(zip(batch[bi, 0], context[0, si]))

    def loop():
        for b, s in pts:
            for lay in LAYOUTS:
                att.evaluate(dep, b, s, lay)

    loop_s = _median_s(loop, repeats=3)
    per_point_grid = grid_s / (N_GRID * N_GRID)
    per_point_loop = loop_s / N_LOOP
    speedup = per_point_loop / per_point_grid

    redraw_ms = _redraw_ms(widgets.layouts.layout_explorer(), "batch", [32, 64, 128, 256, 64, 16, 64])

    rows = [
        ("reference numpy workload", ref, "baseline", "-"),
        (f"evaluate_all, {N_GRID}x{N_GRID} grid, 4 layouts", grid_s, f"{grid_s / ref:.1f}x ref", "< 1 s"),
        (f"best_layout_grid, {N_GRID}x{N_GRID}", best_s, f"{best_s / ref:.1f}x ref", "-"),
        (f"single-point loop, {N_LOOP} points x 4 layouts", loop_s, f"{loop_s / ref:.1f}x ref", "-"),
        ("per point: loop / grid", speedup, "ratio", ">= 100x"),
        ("slider redraw (median)", redraw_ms / 1e3, f"{redraw_ms / 1e3 / ref:.2f}x ref", "< 0.1 s"),
    ]
    print_table(rows)
    print(f"grid_s={grid_s:.3f} speedup={speedup:.0f} redraw_ms={redraw_ms:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
