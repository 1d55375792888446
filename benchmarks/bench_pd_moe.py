"""Benchmark the prefill/decode and calibration machinery.

Run: ``.venv/bin/python benchmarks/bench_pd_moe.py`` (or ``make bench``). Medians of repeats, each also printed
relative to a fixed numpy reference workload timed in the same process (the machines here are noisy).

* the queue simulation: 1M requests (target < 2 s), plus 4 and 8 servers;
* pool sizing over every (prefill, decode) pool size up to 64 each, with queueing and transfer (< 50 ms);
* the calibration fit of the shipped AIConfigurator set (< 5 s);
* (context) the MoE scenario, if the MoE model is present.

The last line is machine-readable: ``sim_s=… sizing_ms=… fit_s=…``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _queueing import bench_queueing  # noqa: E402
from _timing import median_s as _median_s  # noqa: E402
from _timing import reference_s  # noqa: E402
from _timing import print_table  # noqa: E402

from llmexplore import presets, sweeps  # noqa: E402
from llmexplore import calibrate  # noqa: E402
from llmexplore.models.serving import disagg  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "calibration" / "aic-llama31-70b-tp8-h100.csv"


def main() -> int:
    ref = reference_s()
    q = bench_queueing()
    s = sweeps.disagg.setup("llama-3-70b", "h100-sxm", rate_per_s=36, ttft_slo_ms=1000, tpot_slo_ms=40)
    pre, dec = s.sides()
    x = disagg.transfer_side(pre, dec, presets.link("roce-400g"), s.workload)
    disagg.size_pools(pre, dec, x, s.workload, n_max=64)  # warm the M/D/1 table once
    sizing = _median_s(lambda: disagg.size_pools(pre, dec, x, s.workload, n_max=64), 7)
    pts = calibrate.load_points(DATA)
    fit = _median_s(lambda: calibrate.fit(pts), 3)
    rows = [
        ("reference numpy workload", ref, "baseline", "-"),
        ("queue simulation, 1M requests, 1 server", q["sim_s"], f"{q['sim_s'] / ref:.1f}x ref", "< 2 s"),
        ("queue simulation, 1M requests, 4 servers", q["sim_c4_s"], f"{q['sim_c4_s'] / ref:.1f}x ref", "-"),
        ("queue simulation, 1M requests, 8 servers", q["sim_c8_s"], f"{q['sim_c8_s'] / ref:.1f}x ref", "-"),
        ("pool sizing, 64 x 64 (prefill, decode) pools", sizing, f"{sizing / ref:.1f}x ref", "< 0.05 s"),
        ("calibration fit (AIConfigurator H100 set)", fit, f"{fit / ref:.1f}x ref", "< 5 s"),
    ]
    print_table(rows)
    print(f"sim_s={q['sim_s']:.3f} sizing_ms={sizing * 1e3:.1f} fit_s={fit:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
