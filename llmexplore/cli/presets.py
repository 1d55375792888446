"""``llmexplore presets KIND``: list presets with their derived quantities.

List the presets of one kind (built-in data/*.yaml plus any files named in LLMEXPLORE_PRESETS) with their
derived quantities.
"""

from __future__ import annotations

from typing import Any, Mapping

from ._framework import EXIT_OK, Col, billions, command, format_table, print_json

__all__ = ["add", "run"]


def _links_of(r: Mapping[str, Any]) -> str:
    up = f"{r['scale_up_link']} x{r['scale_up_size']}"
    return f"{up} + {r['scale_out_link']}" if r.get("scale_out_link") else up


#: kind -> (record builder, human table columns)
#: table columns of `presets KIND` (the records come from llmexplore.catalog.preset_records)
PRESET_VIEWS: dict[str, list[Col]] = {
    "models": [
        Col("name", "name"), Col("attention", "attention"), Col("layers", "layers"), Col("hidden", "hidden"),
        Col("moe", "moe"), Col("params_total", "params_total", billions),
        Col("params_active", "params_active", billions),
        Col("kv_bytes_per_token_bf16", "KV B/token bf16", ",.0f"),
        Col("kv_bytes_per_token_fp8", "KV B/token fp8", ",.0f"),
    ],
    "hardware": [
        Col("name", "name"), Col("hbm_GiB", "hbm_GiB", "g"), Col("hbm_bw_TBps", "hbm_bw_TBps", "g"),
        Col("bf16_TFLOPS", "bf16_TFLOPS", "g"), Col("fp8_TFLOPS", "fp8_TFLOPS", "g"),
        Col("fp4_TFLOPS", "fp4_TFLOPS", lambda v: f"{v:g}" if v else "-"),
        Col("ridge_flops_per_byte_bf16", "ridge bf16 FLOP/B", ".0f"), Col("links", "links"),
    ],
    "links": [
        Col("name", "name"), Col("kind", "kind"), Col("line_rate_GBps", "line_rate_GBps", "g"),
        Col("achievable_GBps", "achievable_GBps", "g"), Col("efficiency", "efficiency", ".0%"),
        Col("latency_us", "latency_us", "g"), Col("latency_per_rank_us", "+us/rank", "g"),
    ],
    "runtime": [
        Col("name", "name"), Col("eta_mem", "eta_mem", "g"), Col("eta_compute", "eta_compute", "g"),
        Col("eta_attn_compute", "eta_attn_compute", "g"), Col("eta_attn_mem", "eta_attn_mem", "g"),
        Col("kernel_overhead_us", "kernel_overhead_us", "g"),
        Col("step_overhead_ms", "step_overhead_ms", "g"),
        Col("usable_hbm_fraction", "usable_hbm_fraction", "g"), Col("memory_fraction_of", "of"),
        Col("reserve_GiB", "reserve_GiB", "g"), Col("page_tokens", "page_tokens", "d"), Col("engine", "engine"),
    ],
    "storage": [
        Col("name", "name"), Col("kind", "kind"), Col("read_GBps", "read_GBps", "g"),
        Col("latency_us", "latency_us", "g"), Col("link_GBps", "link_GBps", "g"), Col("h2d_GBps", "h2d_GBps", "g"),
        Col("queue_depth", "QD", "d"), Col("io_KiB", "io_KiB", "d"),
        Col("effective_read_GBps", "effective GB/s", ".2f"), Col("block_overhead_us", "us/block", "g"),
    ],
    "targets": [
        Col("name", "name"), Col("ttft_ms", "ttft_ms", "g"), Col("tpot_ms", "tpot_ms", "g"), Col("stat", "stat"),
        Col("e2e_ms", "e2e_ms", lambda v: f"{v:g}" if v else "-"),
    ],
    "prices": [  # one line per tier and GPU
        Col("name", "tier"), Col("gpu", "gpu"), Col("usd_per_gpu_hour", "$/GPU-hour", ".2f"), Col("date", "date"),
    ],
    "power": [
        Col("name", "gpu"), Col("tdp_W", "TDP W", "g"), Col("idle_W", "idle W", "g"),
        Col("memory_bound_W", "HBM-bound W", "g"), Col("host_W", "host W", "g"), Col("network_W", "network W", "g"),
        Col("pue", "PUE", "g"), Col("all_in_kW", "all-in kW", ".3f"),
    ],
}


def add(sub) -> None:
    p = command(sub, "presets", __doc__, help="list presets with their derived quantities")
    p.add_argument("kind", choices=list(PRESET_VIEWS), help="which presets")
    p.add_argument("--json", action="store_true",
                   help="a JSON list of objects (every field, sources included)")
    p.set_defaults(func=run)


def run(args) -> int:
    from .. import catalog

    cols = PRESET_VIEWS[args.kind]
    records = catalog.preset_records(args.kind)
    if args.json:
        print_json(records)
        return EXIT_OK
    if args.kind == "prices":
        records = [{"name": r["name"], "gpu": g, **p} for r in records for g, p in r["prices"].items()]
    if args.kind == "hardware":
        for r in records:
            r["links"] = _links_of(r)
    print(format_table(records, cols))
    return EXIT_OK
