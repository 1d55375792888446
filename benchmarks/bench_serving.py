"""Benchmark the iteration-level serving simulator (:mod:`llmexplore.models.serving.simulator`).

Run: ``.venv/bin/python benchmarks/bench_serving.py`` (or ``make bench``). Medians of repeats, each printed
relative to a fixed numpy reference workload timed in the same process (the machines here are noisy).

* **colocated, 10,000 requests on one instance** (target < 2 s): Llama-3-70B FP8 on 2x H100 (runtime
  trtllm), Poisson arrivals at 4 req/s, lognormal prompts (median 1,000 tokens, sigma 0.8, at most 8,192) and
  outputs (median 200, sigma 0.8, at most 2,048), vLLM's defaults (256 sequences, 8,192-token budget):
  about 68,000 iterations with a mean decode batch of ~42. Includes building the step-time tables.
* the tables alone (:func:`llmexplore.models.serving.step_tables.step_tables`);
* **disaggregated**, 10,000 requests of 4,096 + 256 tokens at 6 req/s on 2 prefill and 1 decode instance of
  Llama-3-70B on 8x H100 over RoCE 400G with one NIC per instance.

The last line is machine-readable: ``colocated_s=… colocated_req_per_s=… disagg_s=…``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_s, print_table, reference_s  # noqa: E402

from llmexplore import presets  # noqa: E402
from llmexplore.models.serving import simulator as sv  # noqa: E402
from llmexplore.models.serving.step_tables import step_tables  # noqa: E402
from llmexplore.models.step.engine import Deployment  # noqa: E402
from llmexplore.models.serving.workload import LengthDist, Traffic  # noqa: E402

N = 10_000
REPEATS = 3


def main() -> None:
    dep = Deployment.build("llama-3-70b", "h100-sxm", 2, runtime="trtllm", weight_dtype="fp8", kv_dtype="fp8")
    traffic = Traffic(rate_per_s=4.0, isl=LengthDist.lognormal(1000, 0.8, 8192),
                      osl=LengthDist.lognormal(200, 0.8, 2048))
    d8 = Deployment.build("llama-3-70b", "h100-sxm", 8)
    dis = Traffic(rate_per_s=6.0, isl=LengthDist.fixed(4096), osl=LengthDist.fixed(256))
    link = presets.link("roce-400g")
    ref = reference_s()
    result = {}

    def colocated():
        result["c"] = sv.simulate_colocated(dep, traffic, N, seed=1)

    def disagg():
        result["d"] = sv.simulate_disaggregated(d8, d8, link, dis, N, prefill_instances=2, decode_instances=1,
                                                seed=0, nics=1)

    t_col = median_s(colocated, REPEATS)
    t_tab = median_s(lambda: step_tables(dep, max_tokens=8192, max_batch=256, max_context=10_241), REPEATS)
    t_dis = median_s(disagg, REPEATS)
    s = result["c"].summary
    print(f"colocated: {s['iterations']:,} iterations, mean decode batch {s['mean_decode_batch']:.1f}, "
          f"TTFT mean {s['ttft_mean_s'] * 1e3:.0f} ms, TPOT mean {s['tpot_mean_s'] * 1e3:.1f} ms")
    d = result["d"].summary
    print(f"disaggregated: {d['iterations']:,} decode iterations, TTFT mean {d['ttft_mean_s'] * 1e3:.0f} ms, "
          f"TPOT mean {d['tpot_mean_s'] * 1e3:.1f} ms")
    print_table([
        (f"colocated, {N:,} requests, one instance", t_col, f"{t_col / ref:.1f}x ref", "< 2 s"),
        ("step-time tables (part of the above)", t_tab, f"{t_tab / ref:.2f}x ref", ""),
        (f"disaggregated, {N:,} requests, 2P + 1D", t_dis, f"{t_dis / ref:.1f}x ref", ""),
        ("reference numpy workload", ref, "1x", ""),
    ])
    print(f"colocated_s={t_col:.3f} colocated_req_per_s={N / t_col:.0f} disagg_s={t_dis:.3f} "
          f"colocated_vs_ref={t_col / ref:.2f}")


if __name__ == "__main__":
    main()
