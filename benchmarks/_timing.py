"""Shared timing helpers for the benchmarks: medians of repeats and a fixed reference workload."""

from __future__ import annotations

import statistics
import time

import numpy as np


def median_s(fn, repeats: int = 5) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls [s]."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def redraw_ms(app, control: str, values) -> float:
    """Median time [ms] for an explorer to redraw after its ``control`` is set to each of ``values`` in turn
    (a value equal to the current one is skipped: setting it would not redraw)."""
    times = []
    for v in values:
        if app.controls[control].value == v:
            continue
        t = time.perf_counter()
        app.controls[control].value = v
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def reference_s() -> float:
    """A fixed numpy workload (20 elementwise passes over 1e6 doubles) to express timings as ratios."""
    x = np.linspace(1.0, 2.0, 1_000_000)

    def work():
        y = x
        for _ in range(10):
            y = np.maximum(y * 1.0001, x) + 1e-9
        return y

    return median_s(work)


def print_table(rows) -> None:
    """Rows of (measurement, seconds, relative-to-reference text, target text) as an aligned table."""
    print(f"{'measurement':48s} {'seconds':>10s}  {'relative':>12s}  target")
    for name, v, rel, target in rows:
        print(f"{name:48s} {v:10.4f}  {rel:>12s}  {target}")
