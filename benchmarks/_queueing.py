"""Benchmark the FCFS queue simulator (:func:`llmexplore.models.queueing.fcfs_sim.simulate_fcfs`) on 1M requests.

Imported by ``benchmarks/bench_pd_moe.py`` (it can also run alone). Target: 1M requests with one server in < 2 s on 2 cores. Timings are medians
of 3 runs of the simulator alone (arrivals and service times are generated once, outside the timer):

* ``sim_s``: 1 server, M/D/1 at rho = 0.85 (vectorised Lindley recursion);
* ``sim_c4_s`` / ``sim_c8_s``: 4 / 8 servers with lognormal prompt-length service (heap loop);
* ``sim_c8_det_s``: 8 servers, constant service (exact split into 8 interleaved Lindley recursions).

The last line is machine-readable: ``sim_s=… sim_c4_s=… sim_c8_s=… sim_c8_det_s=…``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_s  # noqa: E402

from llmexplore.models.queueing import mg1  # noqa: E402
from llmexplore.models.queueing import fcfs_sim as sim  # noqa: E402

N = 1_000_000
REPEATS = 3


def bench_queueing(n: int = N) -> dict[str, float]:
    """Median wall time [s] of :func:`simulate_fcfs` on n requests, for 1, 4 and 8 servers."""
    out = {}
    rho = 0.85
    arr1 = sim.poisson_arrivals(rho / 1.0, n, 1)
    svc1 = sim.deterministic_service(1.0, n)
    out["sim_s"] = median_s(lambda: sim.simulate_fcfs(arr1, svc1, 1), REPEATS)
    prompts = sim.lognormal_prompt_tokens(n, median_tokens=1000, sigma=1.0, max_tokens=32768, seed=2)
    svc = mg1.prefill_service_s(prompts, a_s=0.02, b_s_per_token=1e-4, c_s_per_token2=1e-9)
    for c in (4, 8):
        arr = sim.poisson_arrivals(rho * c / float(np.mean(svc)), n, 3 + c)
        out[f"sim_c{c}_s"] = median_s(lambda: sim.simulate_fcfs(arr, svc, c), REPEATS)
    arr8 = sim.poisson_arrivals(rho * 8, n, 4)
    out["sim_c8_det_s"] = median_s(lambda: sim.simulate_fcfs(arr8, svc1, 8), REPEATS)
    return out


def main() -> int:
    r = bench_queueing()
    print(f"simulate_fcfs, {N:,} requests, median of {REPEATS}:")
    print(f"  1 server, constant service (Lindley, vectorised)   {r['sim_s'] * 1e3:8.1f} ms")
    print(f"  4 servers, lognormal prompts (heap loop)           {r['sim_c4_s'] * 1e3:8.1f} ms")
    print(f"  8 servers, lognormal prompts (heap loop)           {r['sim_c8_s'] * 1e3:8.1f} ms")
    print(f"  8 servers, constant service (interleaved Lindley)  {r['sim_c8_det_s'] * 1e3:8.1f} ms")
    print(" ".join(f"{k}={v:.4f}" for k, v in r.items()))
    return 0 if r["sim_s"] < 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
