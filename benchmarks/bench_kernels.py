"""Benchmark the kernel-efficiency model (issue 9 §5): the step-time grid and the slider redraw with the fitted
curves, against the scalar runtime in the same process, and the cost of an error band.

Run: ``.venv/bin/python benchmarks/bench_kernels.py`` (or ``make bench``). Machines here are noisy: every timing
is a median of repeats, printed as a ratio to the scalar model and to a fixed numpy workload timed in the same
process. Targets: 1,000 x 1,000 grid < 1 s on 2 cores (as before the curves), redraw < 100 ms, a 16-draw band
of a 100-point step-time line < 1 s. The last line is machine-readable: ``grid_s=… redraw_ms=… …``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_s as _median_s  # noqa: E402
from _timing import redraw_ms as _redraw_ms  # noqa: E402
from _timing import print_table, reference_s  # noqa: E402

from llmexplore import widgets  # noqa: E402
from llmexplore.models.step import decode as att  # noqa: E402
from llmexplore.models.step.engine import Deployment  # noqa: E402
from llmexplore.models.step.uncertainty import band_of  # noqa: E402

N_GRID = 1000  # batch values x context values
N_LINE = 100  # points of the banded line


def main() -> int:
    ref = reference_s()
    batch = np.arange(1, N_GRID + 1, dtype=float)[:, None]
    context = np.geomspace(128, 1 << 20, N_GRID)[None, :]
    times = {}
    for rt in ("scalar", "default"):
        dep = Deployment.build("deepseek-v3", "h200", 8, runtime=rt)
        times[rt] = _median_s(lambda: att.evaluate_all(dep, batch, context))
    grid_s = times["default"]

    line = np.geomspace(128, 1 << 20, N_LINE)

    def line_ms(rt):
        d = Deployment.build("llama-3-70b", "h100-sxm", 8, runtime=rt)
        return att.step_time(d, 64, line, "TP")["step_s"] * 1e3

    band_s = _median_s(lambda: band_of(line_ms, "default"), repeats=3)

    redraw_ms = _redraw_ms(widgets.layouts.layout_explorer(), "batch", [32, 64, 128, 256, 64, 16, 64])

    rows = [
        ("reference numpy workload", ref, "baseline", "-"),
        (f"evaluate_all {N_GRID}x{N_GRID}, scalar runtime", times["scalar"], f"{times['scalar'] / ref:.1f}x ref", "-"),
        (f"evaluate_all {N_GRID}x{N_GRID}, kernel curves", grid_s,
         f"{grid_s / times['scalar']:.2f}x scalar", "< 1 s"),
        (f"16-draw band of a {N_LINE}-point line", band_s, f"{band_s / ref:.1f}x ref", "< 1 s"),
        ("layout explorer redraw (median)", redraw_ms / 1e3, f"{redraw_ms / 1e3 / ref:.2f}x ref", "< 0.1 s"),
    ]
    print_table(rows)
    print(f"grid_s={grid_s:.3f} curves_over_scalar={grid_s / times['scalar']:.2f} band_s={band_s:.3f} "
          f"redraw_ms={redraw_ms:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
