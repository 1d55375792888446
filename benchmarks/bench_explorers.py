"""Benchmark the live explorers: one slider move, from the control's new value to redrawn figures.

Run: ``.venv/bin/python benchmarks/bench_explorers.py`` (or ``make bench``). Each explorer is built with its
notebook defaults, then one slider is moved through several values and back, with the explorer's memo of
recent parameter sets cleared before each move (so every redraw computes); the median redraw is printed in seconds and as a ratio to the fixed numpy reference workload
of :mod:`_timing`, timed in the same process. The redraw is split into the sweep tables (``evaluate``) and the
figure update (spec + :func:`llmexplore.plots.update_from`), so a slow redraw points at the layer to fix.
Target: a redraw well under 0.2 s (sliders feel instant). The last line is machine-readable:
``layouts_ms=… pd_ms=… moe_ms=… transfer_ms=…``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import print_table, reference_s  # noqa: E402

from llmexplore import widgets  # noqa: E402
from llmexplore.plots import update_from  # noqa: E402

CASES = [  # explorer, slider, values it moves through (the default comes back last)
    ("layouts", widgets.layouts.layout_explorer, "batch", [32, 128, 256, 16, 512, 64]),
    ("layouts", widgets.layouts.layout_explorer, "context", [4096, 32768, 131072, 2048, 65536, 8192]),
    ("pd", widgets.disagg.pd_explorer, "prompt", [2048, 8192, 1024, 16384, 512, 4096]),
    ("pd", widgets.disagg.pd_explorer, "rate", [20.0, 50.0, 10.0, 70.0, 30.0, 36.0]),
    ("moe", widgets.moe.moe_explorer, "batch", [128, 512, 1024, 64, 2048, 256]),
    ("moe", widgets.moe.moe_explorer, "skew", [2.0, 3.0, 4.0, 1.5, 3.5, 2.6]),
    ("transfer", widgets.transfer.transfer_explorer, "decode_tp", [8, 2, 16, 1, 32, 4]),
    ("transfer", widgets.transfer.transfer_explorer, "page_size", [32, 64, 8, 128, 1, 16]),
]


def _split(app) -> tuple[float, float]:
    """(evaluate seconds, figure-update seconds) of one redraw at the current controls."""
    t0 = time.perf_counter()
    draws, _, _ = app.evaluate()
    t1 = time.perf_counter()
    for key, draw in draws.items():
        update_from(app.figures[key], draw.spec())
    return t1 - t0, time.perf_counter() - t1


def main() -> int:
    ref = reference_s()
    rows = [("reference numpy workload", ref, "baseline", "-")]
    per_explorer: dict[str, list[float]] = {}
    apps = {}
    for name, make, control, values in CASES:
        app = apps.get(name) or apps.setdefault(name, make())
        redraws, evals, draws = [], [], []
        for v in values:
            app.memo.clear()  # time the computation, not the memo of values shown before
            t = time.perf_counter()
            app.controls[control].value = v  # observe -> update(): tables and figures
            redraws.append(time.perf_counter() - t)
            e, d = _split(app)
            evals.append(e)
            draws.append(d)
        med = statistics.median(redraws)
        per_explorer.setdefault(name, []).append(med)
        rows.append((f"{name}: move '{control}' (median redraw)", med, f"{med / ref:.2f}x ref", "< 0.2 s"))
        for part, times in (("sweep tables", evals), ("figure update", draws)):
            m = statistics.median(times)
            rows.append((f"  of which {part}", m, f"{m / ref:.2f}x ref", "-"))
    print_table(rows)
    print(" ".join(f"{name}_ms={max(v) * 1e3:.1f}" for name, v in per_explorer.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
