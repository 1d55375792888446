"""Preset catalogue: the presets with their derived quantities and sources, as records or DataFrames."""

from __future__ import annotations

import dataclasses

import pandas as pd

from . import presets

__all__ = ["preset_records", "preset_frame", "preset_counts", "source_frame"]


def _fields(spec) -> dict:
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "sources"}


def preset_records(kind: str) -> list[dict]:
    """One JSON-friendly dict per preset: its fields, derived quantities and ``sources``."""
    out = []
    for name, spec in presets.table(kind).items():
        row = _fields(spec)
        if kind == "models":
            row.update(spec.summary())
            row["params_non_embedding"] = spec.params_non_embedding
            row["kv_elements_per_token_per_layer"] = spec.kv_elements_per_token_per_layer()
        elif kind == "hardware":
            row["ridge_flops_per_byte_bf16"] = spec.ridge_flops_per_byte("bf16")
            row["ridge_flops_per_byte_fp8"] = spec.ridge_flops_per_byte("fp8")
        elif kind == "links":
            row["efficiency"] = spec.efficiency
        elif kind == "storage":
            row["effective_read_GBps"] = spec.effective_GBps()
        elif kind == "prices":  # one row per tier: its prices as plain data
            row["prices"] = {g: {"usd_per_gpu_hour": p.usd_per_gpu_hour, "date": p.date, "source": p.source}
                             for g, p in spec.prices.items()}
            row["gpus_priced"] = ", ".join(spec.prices)
        elif kind == "power":
            row["all_in_kW"] = spec.all_in_kW
        elif kind == "speculative":
            row["tokens_per_step"] = spec.tokens_per_step
            row["verify_width"] = spec.verify_width
            row["acceptance"] = list(spec.acceptance)
        row["sources"] = dict(spec.sources)
        out.append(row)
    return out


_COLUMNS = {
    "models": ["name", "attention", "layers", "hidden", "heads", "kv_heads", "moe", "params_total",
               "params_active", "kv_bytes_per_token_bf16", "kv_bytes_per_token_fp8"],
    "hardware": ["name", "hbm_GiB", "hbm_bw_TBps", "bf16_TFLOPS", "fp8_TFLOPS", "fp4_TFLOPS",
                 "ridge_flops_per_byte_bf16",
                 "scale_up_link", "scale_up_size", "scale_out_link"],
    "links": ["name", "kind", "line_rate_GBps", "achievable_GBps", "efficiency", "latency_us",
              "latency_per_rank_us"],
    "runtime": ["name", "eta_mem", "eta_compute", "eta_attn_compute", "eta_attn_mem", "kernel_overhead_us",
                "step_overhead_ms",
                "usable_hbm_fraction", "memory_fraction_of", "reserve_GiB", "page_tokens", "engine"],
    "storage": ["name", "kind", "read_GBps", "latency_us", "link_GBps", "h2d_GBps", "queue_depth", "io_KiB",
                "effective_read_GBps", "block_overhead_us"],
    "targets": ["name", "ttft_ms", "tpot_ms", "stat", "e2e_ms"],
    "speculative": ["name", "method", "draft_tokens", "verify_width", "tokens_per_step", "conditions"],
    "power": ["name", "tdp_W", "idle_W", "memory_bound_W", "host_W", "network_W", "pue", "all_in_kW"],
}


def preset_frame(kind: str) -> pd.DataFrame:
    """The presets of one kind as a table (main columns only)."""
    if kind == "prices":  # one row per tier and GPU, with the price's date
        return pd.DataFrame([{"name": r["name"], "gpu": g, "usd_per_gpu_hour": p["usd_per_gpu_hour"], "date": p["date"]}
                             for r in preset_records(kind) for g, p in r["prices"].items()])
    df = pd.DataFrame(preset_records(kind))
    return df[[c for c in _COLUMNS[kind] if c in df.columns]]


def preset_counts() -> dict[str, int]:
    """Number of presets of each kind."""
    return {kind: len(presets.table(kind)) for kind in presets.KINDS}


def source_frame() -> pd.DataFrame:
    """Every numeric preset value with its source (kind, preset, field, value, unit, source)."""
    rows = []
    for kind in presets.KINDS:
        for name, spec in presets.table(kind).items():
            if kind == "prices":  # each GPU's price, with its date, is a value with a source
                rows += [{"kind": kind, "preset": name, "field": f"usd_per_gpu_hour[{g}]", "value": p.usd_per_gpu_hour,
                          "unit": "USD per GPU-hour", "source": f"{p.source} (price of {p.date})"}
                         for g, p in spec.prices.items()]
                continue
            for f in dataclasses.fields(spec):
                if "unit" not in f.metadata:
                    continue
                if f.metadata.get("optional") and getattr(spec, f.name) == f.default:
                    continue
                rows.append({"kind": kind, "preset": name, "field": f.name, "value": getattr(spec, f.name),
                             "unit": f.metadata.get("unit", ""), "source": spec.source_of(f.name)})
    return pd.DataFrame(rows)
