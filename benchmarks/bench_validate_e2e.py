"""Benchmark ``llmexplore validate --e2e`` (:func:`llmexplore.sweeps.fidelity.e2e.evaluate`, issue 19 §2).

Run: ``.venv/bin/python benchmarks/bench_validate_e2e.py``. One run of the whole shipped table (2,873 measured
closed-loop benchmarks, 1,876 of them simulated, rows of one configuration and load sharing one simulation, on
every core), printed relative to a fixed numpy reference workload timed in the same process (the machines here
are noisy). Target: under a minute on 2 cores. Measured 24-33 s on this 2-core machine (38 s in one process)
since data-parallel attention is simulated (153 more rows, 37 of them on 32-rank instances); 13-16 s before.

The last line is machine-readable: ``e2e_s=… rows=… simulated=… e2e_vs_ref=…``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_s, print_table, reference_s  # noqa: E402

from llmexplore.sweeps.fidelity import e2e  # noqa: E402


def main() -> None:
    ref = reference_s()
    rows = e2e.load()
    out = {}

    def run():
        out["t"] = e2e.evaluate(rows)

    t = median_s(run, 1)
    s = e2e.summary(out["t"])
    print(f"{s['simulated']:,} of {s['rows']:,} simulated: TPOT MAPE {s['tpot_mape_pct']:.1f}%, TTFT MAPE "
          f"{s['ttft_mape_pct']:.0f}%")
    print_table([
        (f"validate --e2e, {s['rows']:,} benchmarks", t, f"{t / ref:.0f}x ref", "< 60 s"),
        ("reference numpy workload", ref, "1x", ""),
    ])
    print(f"e2e_s={t:.2f} rows={s['rows']} simulated={s['simulated']} e2e_vs_ref={t / ref:.0f}")


if __name__ == "__main__":
    main()
