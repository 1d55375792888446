"""Benchmark how a CPU-bound sweep of planning questions scales with workers (issue 10 §4).

Run: ``.venv/bin/python benchmarks/bench_plan_scaling.py`` (or ``make bench``). The sweep is
``llmexplore.sweeps.distributed.run_sweep`` over 36 planning questions (4 models x 3 GPUs x 3 GPU counts, each a
5 x 4 batch-by-context grid of the four attention layouts: ``layout_question``, one row per configuration),
run in this process (the baseline), in a local process pool of 2 and 4 workers and on a Dask ``LocalCluster``
of 1, 2 and 4 single-threaded worker processes. Every run is checked to give the same frame as the baseline;
each time is printed as a speed-up over the baseline timed in the same process (the machines here are noisy).

What is timed: a local-pool run includes starting its pool (forked workers inherit the imports); a cluster
run does not include starting the cluster (``run_sweep`` is pointed at an existing one) but its workers are
warmed up first (imports and presets loaded), like a cluster that has run before. Three rounds (or the number given as
the first argument) run every mode in turn; each time is the median of its rounds. Speed-up above the number
of cores is not possible: on a 2-core machine, 4 workers measure the overhead of oversubscription.

``measure_scaling(fn, tasks, ...)`` is reusable: pass another task function (for example a deployment
planner's per-question evaluation) and its tasks. The last line is machine-readable:
``serial_s=… pool2=… pool4=… dask1=… dask2=… dask4=… cores=…`` (speed-ups over the serial run).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time

import pandas as pd

from llmexplore.sweeps.distributed import layout_question, run_sweep

MODELS = ("llama-3-8b", "llama-3-70b", "qwen3-32b", "qwen3-30b-a3b")
GPUS = ("h100-sxm", "h200", "b200")
COUNTS = (2, 4, 8)
BATCH = [1, 4, 16, 64, 256]
CONTEXT = [1024, 4096, 16384, 65536]


def questions() -> list[dict]:
    """One task per (model, GPU, GPU count): a planning question over the batch x context grid."""
    return [{"model": m, "gpu": g, "gpus": n, "batch": BATCH, "context": CONTEXT}
            for m in MODELS for g in GPUS for n in COUNTS]


def _warm() -> None:
    """Run on each Dask worker before timing: import the package and load the presets."""
    from llmexplore.sweeps import distributed

    distributed.layout_question({"model": MODELS[0], "gpu": GPUS[0], "gpus": 2, "batch": [1], "context": [1024]})


def _timed(fn, tasks, **kw) -> tuple[float, pd.DataFrame]:
    t = time.perf_counter()
    frame = run_sweep(fn, tasks, **kw)
    return time.perf_counter() - t, frame


def measure_scaling(fn, tasks, *, workers=(2, 4), cluster_workers=(1, 2, 4), chunk: int = 1, repeats: int = 3,
                    warm=None) -> tuple[float, list[tuple[str, float, float]]]:
    """(serial seconds, [(run name, seconds, speed-up over serial)]) for ``run_sweep(fn, tasks)`` in this
    process, in local pools of ``workers`` processes and on LocalClusters of ``cluster_workers`` processes
    (skipped without dask.distributed). The clusters are started once; then ``repeats`` rounds run every
    mode in turn (so a burst of load from elsewhere hits all modes alike) and each time is the median over the
    rounds. Every run must return the serial run's frame."""
    if warm is not None:
        warm()
    modes = [("serial", {"workers": 1})] + [(f"pool{w}", {"workers": w}) for w in workers]
    with contextlib.ExitStack() as stack:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            print("dask.distributed not installed: pip install -e '.[dask]' for the cluster runs")
            cluster_workers = ()
        for w in cluster_workers:
            lc = stack.enter_context(LocalCluster(n_workers=w, processes=True, threads_per_worker=1,
                                                  dashboard_address=":0"))
            client = stack.enter_context(Client(lc))
            if warm is not None:
                client.run(warm)
            modes.append((f"dask{w}", {"scheduler": client}))
        times: dict[str, list[float]] = {name: [] for name, _ in modes}
        reference = None
        for _ in range(repeats):
            for name, kw in modes:
                s, frame = _timed(fn, tasks, chunk=chunk, **kw)
                if reference is None:
                    reference = frame
                pd.testing.assert_frame_equal(frame, reference)
                times[name].append(s)
    median = {name: statistics.median(v) for name, v in times.items()}
    serial_s = median.pop("serial")
    return serial_s, [(name, s, serial_s / s) for name, s in median.items()]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    repeats = int(argv[0]) if argv else 3  # rounds: `bench_plan_scaling.py 1` for a quick look
    tasks = questions()
    load_before = os.getloadavg()[0]
    serial_s, runs = measure_scaling(layout_question, tasks, warm=_warm, repeats=repeats)
    load_after = os.getloadavg()[0]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{len(tasks)} planning questions, {len(tasks) * len(BATCH) * len(CONTEXT) * 4} configurations, "
          f"{cores} cores; load average {load_before:.1f} before, {load_after:.1f} after (other processes share "
          f"the cores when it is above 0); medians of {repeats} interleaved rounds")
    print(f"{'run':28s} {'seconds':>9s}  {'speed-up':>9s}  {'per worker':>10s}")
    print(f"{'in this process (baseline)':28s} {serial_s:9.2f}  {1.0:8.2f}x  {1.0:10.2f}")
    for name, s, speedup in runs:
        n = int(name.removeprefix("pool").removeprefix("dask"))
        label = f"local pool, {n} workers" if name.startswith("pool") else f"Dask LocalCluster, {n} workers"
        print(f"{label:28s} {s:9.2f}  {speedup:8.2f}x  {speedup / n:10.2f}")
    print(f"serial_s={serial_s:.2f} " + " ".join(f"{name}={speedup:.2f}" for name, _, speedup in runs)
          + f" cores={cores}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
