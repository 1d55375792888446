#!/usr/bin/env python3
"""Extract compact per-kernel CSVs from the measurement database shipped with aiconfigurator.

aiconfigurator (NVIDIA, Apache-2.0) is NOT a dependency of llmexplore. Install it in a scratch
environment and point this script at it; it writes the CSVs next to itself (data/kernels/) and
rewrites the provenance table in data/kernels/README.md between the PROVENANCE markers.

    python3 -m venv /tmp/aicvenv && /tmp/aicvenv/bin/pip install aiconfigurator==0.12.0
    /tmp/aicvenv/bin/python data/kernels/extract_aiconfigurator.py \
        /tmp/aicvenv/lib/python3.11/site-packages            # or .../aiconfigurator_core
    # or, from a wheel (no install needed, but pandas + pyarrow must be importable):
    python data/kernels/extract_aiconfigurator.py aiconfigurator_core-0.12.0-*.whl

Since 0.12 the database lives in the `aiconfigurator_core` distribution (a dependency of
`aiconfigurator`), under aiconfigurator_core/systems/data/<gpu>/<op>/<engine>/<version>/*.parquet.

Requirements: Python >= 3.10, numpy, pandas, pyarrow (to read parquet). Deterministic: the same
input gives byte-identical CSVs.

Selection rules (documented in README.md):
* engine version: the "current" slot of systems/query_versions.yaml for that engine
  (trtllm/sglang/vllm); when a table is absent there, the newest OLDER version holding it
  (aiconfigurator's own backward-fill rule). NCCL: the newest NCCL version.
* rows: filters per class (below), then "whole-curve" thinning: rows are grouped into curves
  (all columns fixed except the sweep axis); curves are split into strata (dtype, kernel, ...)
  and within each stratum every s-th curve (in sha256-of-key order, a deterministic shuffle) is kept, s the smallest stride that
  brings the file under its row cap. Sweeps are never cut, so each curve is complete.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import math
import re
import sys
import tempfile
import zipfile
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent

GPUS = {  # aiconfigurator system dir -> llmexplore data/hardware.yaml key
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
}
ENGINES = ("trtllm", "sglang", "vllm")

# class -> spec. rename: source column -> CSV column. sweep: the axis kept whole.
# strata: columns whose every value is kept. filters: (column, value) equality filters.
CLASSES = {
    "gemm": dict(
        op="gemm", file="gemm_perf.parquet", cap=5000,
        rename={"kernel_source": "kernel", "gemm_dtype": "dtype", "m": "m", "n": "n", "k": "k"},
        sweep="m", strata=["dtype", "kernel"], filters=[]),
    "moe": dict(
        op="moe", file="moe_perf.parquet", cap=3000,
        rename={"kernel_source": "kernel", "moe_dtype": "dtype", "num_tokens": "tokens",
                "num_experts": "experts", "topk": "topk", "hidden_size": "hidden",
                "inter_size": "inter", "moe_tp_size": "moe_tp", "moe_ep_size": "moe_ep"},
        sweep="tokens", strata=["dtype", "kernel"], filters=[("distribution", "balanced")]),
    "context_attention": dict(
        op="attention", file="context_attention_perf.parquet", cap=1500,
        rename={"kernel_source": "kernel", "attn_dtype": "dtype", "kv_cache_dtype": "kv_dtype",
                "batch_size": "batch", "isl": "isl", "num_heads": "heads",
                "num_key_value_heads": "kv_heads", "head_dim": "head_dim"},
        sweep="isl", strata=["dtype", "kv_dtype", "kernel"], filters=[("window_size", 0), ("beam_width", 1)]),
    "generation_attention": dict(
        op="attention", file="generation_attention_perf.parquet", cap=1500,
        rename={"kernel_source": "kernel", "attn_dtype": "dtype", "kv_cache_dtype": "kv_dtype",
                "batch_size": "batch", "step": "kv_len", "num_heads": "heads",
                "num_key_value_heads": "kv_heads", "head_dim": "head_dim"},
        sweep="kv_len", strata=["kv_dtype", "kernel"], filters=[("window_size", 0), ("beam_width", 1), ("isl", 1)]),
    "context_mla": dict(
        op="mla", file="context_mla_perf.parquet", cap=1500,
        rename={"kernel_source": "kernel", "mla_dtype": "dtype", "kv_cache_dtype": "kv_dtype",
                "batch_size": "batch", "isl": "isl", "num_heads": "heads", "tp_size": "tp"},
        sweep="isl", strata=["dtype", "kv_dtype", "kernel"], filters=[]),
    "generation_mla": dict(
        op="mla", file="generation_mla_perf.parquet", cap=1500,
        rename={"kernel_source": "kernel", "mla_dtype": "dtype", "kv_cache_dtype": "kv_dtype",
                "batch_size": "batch", "step": "kv_len", "num_heads": "heads", "tp_size": "tp"},
        sweep="kv_len", strata=["dtype", "kv_dtype", "kernel"], filters=[("isl", 1)]),
    "allreduce_custom": dict(
        op="comm", file="custom_allreduce_perf.parquet", cap=4000,
        rename={"kernel_source": "kernel", "allreduce_dtype": "dtype", "num_gpus": "ranks",
                "message_size": "message_elems"},
        sweep="message_elems", strata=["dtype", "kernel"], filters=[]),
    # the dynamic-quantization overhead inside the collected per-tensor FP8 GEMM rows: latency = dynamic FP8
    # GEMM - static FP8 GEMM (aiconfigurator's compute_scale table; its GEMM collector gives the weights no
    # input_scale, so the timed Linear computes the activation scale; kernelfit subtracts it, as
    # aiconfigurator's fp8_static query does). Zero rows are kept: zero is a measurement here (SGLang's FP8
    # GEMM rows carry no such overhead), not a failed one.
    "compute_scale": dict(
        op="quantize", file="computescale_perf.parquet", cap=2000, keep_zero=True,
        rename={"kernel_source": "kernel", "quant_dtype": "dtype", "m": "m", "k": "k"},
        sweep="m", strata=["dtype", "kernel"], filters=[]),
}
NCCL = dict(
    op="comm", file="nccl_perf.parquet", cap=4000,
    rename={"op_name": "collective", "nccl_dtype": "dtype", "num_gpus": "ranks", "message_size": "message_elems"},
    sweep="message_elems", strata=["collective", "dtype"], filters=[])

ELEM_BYTES = {"half": 2, "bfloat16": 2, "float16": 2, "fp16": 2, "int8": 1, "fp8": 1, "float32": 4}

# DeepEP low-latency (LL) dispatch/combine kernel times (SGLang's WideEP collectors), one CSV for every GPU.
# (aiconfigurator system dir, llmexplore GPU, version dir, node_num kept, EP ranks per node): single-node
# tables from the newest collection of each GPU (the collector uses the whole node: 8 GPUs, 4 on GB200);
# the multi-node rows (2/4/8 nodes of 8 GPUs) exist only in H100's 0.5.6.post2 table. H200's 0.5.6.post2
# table is the same numbers with another device label (checked below), so it is not a second measurement.
DEEPEP_LL = [
    ("h100_sxm", "h100-sxm", "0.5.12", "single", 8),
    ("h200_sxm", "h200", "0.5.12", "single", 8),
    ("b200_sxm", "b200", "0.5.12", "single", 8),
    ("gb200", "gb200", "0.5.12", "single", 4),
    ("h100_sxm", "h100-sxm", "0.5.6.post2", "multi", 8),
]
DEEPEP_LL_COPIES = [("h200_sxm", "0.5.6.post2", "h100_sxm", "0.5.6.post2")]
DEEPEP_LL_CSV = "aic_deepep_ll.csv"
DEEPEP_LL_FILE = "wideep_deepep_ll_perf.parquet"


def vkey(v: str):
    """Sort key for engine versions such as 1.3.0rc20, 0.5.6.post2, 2.27.3 (pre-releases sort first)."""
    m = re.match(r"^(\d+(?:\.\d+)*)(?:(rc|a|b|\.dev)(\d+))?(?:\.post(\d+))?", v)
    if not m:
        return ((), 0, 0, 0)
    rel = tuple(int(x) for x in m.group(1).split("."))
    pre = (-1, int(m.group(3))) if m.group(2) else (0, 0)
    post = int(m.group(4)) if m.group(4) else 0
    return (rel, pre, post)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def locate(src: Path, tmp: Path) -> tuple[Path, str, str]:
    """Return (aiconfigurator_core package dir, distribution version, how it was found)."""
    orig = src
    if src.is_file() and src.suffix == ".whl":
        with zipfile.ZipFile(src) as z:
            z.extractall(tmp)
        src = tmp
    for cand in (src, src / "aiconfigurator_core", src.parent / "aiconfigurator_core"):
        if (cand / "systems" / "data").is_dir():
            core = cand
            break
    else:
        sys.exit(f"no aiconfigurator_core/systems/data under {src}")
    version = "unknown"
    for meta in sorted(core.parent.glob("aiconfigurator_core-*.dist-info/METADATA")):
        m = re.search(r"^Version: (\S+)", meta.read_text(), re.M)
        if m:
            version = m.group(1)
    return core, version, ("wheel " + orig.name) if orig.suffix == ".whl" else "an installed copy"


def current_versions(core: Path) -> dict[str, str]:
    text = (core / "systems" / "query_versions.yaml").read_text()
    block = text.split("defaults:", 1)[1].split("overrides:", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r'^\s+(\w+): \{current: "([^"]+)"', block, re.M)}


def pick(base: Path, file: str, current: str | None) -> Path | None:
    """The table from the `current` version dir, else from the newest older version (backward fill)."""
    if not base.is_dir():
        return None
    versions = sorted((d.name for d in base.iterdir() if (d / file).is_file()), key=vkey)
    if current is not None:
        versions = [v for v in versions if vkey(v) <= vkey(current)]
    return base / versions[-1] / file if versions else None


def thin(df: pd.DataFrame, sweep: str, strata: list[str], cap: int) -> tuple[pd.DataFrame, int]:
    """Keep every s-th whole curve within each stratum; s is the smallest stride meeting `cap`."""
    cols = [c for c in df.columns if c not in ("latency_us", sweep)]
    curve_cols = [c for c in cols if c not in strata]
    df = df.sort_values(cols + [sweep], kind="mergesort").reset_index(drop=True)
    if not curve_cols:
        return df, 1
    curve_id = df.groupby(cols, sort=True, dropna=False).ngroup()
    # rank of the curve inside its stratum, in a deterministic pseudo-random order (sha256 of the curve's
    # key): a stride over the sorted keys would keep e.g. only k = 32 GEMMs; a stride over hashed keys
    # samples every shape region evenly
    first = df.assign(_cid=curve_id).drop_duplicates("_cid").copy()
    first["_h"] = [hashlib.sha256(repr(tuple(str(v) for v in row)).encode()).hexdigest()
                   for row in first[curve_cols].itertuples(index=False)]
    first = first.sort_values(strata + ["_h"] if strata else ["_h"], kind="mergesort")
    rank = first.groupby(strata, sort=False, dropna=False).cumcount() if strata else pd.Series(range(len(first)), index=first.index)
    rank_of = dict(zip(first["_cid"], rank))
    r = curve_id.map(rank_of)
    for s in range(1, 10_000):
        keep = (r % s) == 0
        if keep.sum() <= cap:
            return df[keep].reset_index(drop=True), s
    return df, 1


def extract_one(path: Path, spec: dict, extra_cols: tuple[str, ...] = ()) -> tuple[pd.DataFrame, dict]:
    raw = pd.read_parquet(path)
    info = {"source_rows": len(raw), "framework": str(raw["framework"].iloc[0]),
            "engine_version": str(raw["version"].iloc[0]), "device": str(raw["device"].iloc[0])}
    for col, val in spec["filters"]:
        if col in raw.columns:
            raw = raw[raw[col] == val]
    ren = dict(spec["rename"])
    for c in extra_cols:
        if c in raw.columns:
            ren[c] = c
    df = raw[list(ren)].rename(columns=ren).copy()
    df["latency_us"] = (raw["latency"].astype(float) * 1000.0).round(4)  # aiconfigurator stores ms
    for c in df.columns:
        if c != "latency_us" and (df[c].dtype == object or str(df[c].dtype).startswith("string")):
            df[c] = df[c].astype(str)
    lo_ok = (df["latency_us"] >= 0) if spec.get("keep_zero") else (df["latency_us"] > 0)
    df = df[pd.Series(df["latency_us"]).apply(math.isfinite) & lo_ok]
    # duplicates of the same key (repeat measurements): keep the median
    keys = [c for c in df.columns if c != "latency_us"]
    df = df.groupby(keys, as_index=False, sort=True)["latency_us"].median()
    out, stride = thin(df, spec["sweep"], spec["strata"], spec["cap"])
    if "message_elems" in out.columns:
        eb = out["dtype"].map(ELEM_BYTES)
        out.insert(out.columns.get_loc("message_elems") + 1, "message_bytes", (out["message_elems"] * eb).astype("Int64"))
    info.update(filtered_rows=len(df), rows=len(out), stride=stride)
    return out, info


def extract_deepep_ll(core: Path, version: str, out: Path) -> list[tuple]:
    """Write data/kernels/aic_deepep_ll.csv (every DeepEP LL table of :data:`DEEPEP_LL`); provenance rows."""
    data = core / "systems" / "data"
    cols = ["hidden_size", "num_topk", "num_experts", "num_token", "dispatch_avg_t_us", "dispatch_bandwidth_gbps",
            "combine_avg_t_us", "combine_bandwidth_gbps"]
    for gdir, ver, other, over in DEEPEP_LL_COPIES:
        a = pd.read_parquet(data / gdir / "comm" / "sglang" / ver / DEEPEP_LL_FILE)
        b = pd.read_parquet(data / other / "comm" / "sglang" / over / DEEPEP_LL_FILE)
        key = ["node_num"] + cols
        same = a[key].sort_values(key).reset_index(drop=True).equals(b[key].sort_values(key).reset_index(drop=True))
        if not same:
            sys.exit(f"{gdir}/{ver} is no longer a copy of {other}/{over}: add it to DEEPEP_LL")
    frames, prov = [], []
    for gdir, gpu, ver, nodes, per_node in DEEPEP_LL:
        path = data / gdir / "comm" / "sglang" / ver / DEEPEP_LL_FILE
        raw = pd.read_parquet(path)
        raw = raw[raw["node_num"] == 1] if nodes == "single" else raw[raw["node_num"] > 1]
        df = pd.DataFrame({"gpu": gpu, "version": ver, "device": raw["device"].astype(str),
                           "nodes": raw["node_num"].astype(int), "ep": raw["node_num"].astype(int) * per_node})
        for c in cols:
            df[c] = raw[c].to_numpy()
        frames.append(df)
        rel = path.relative_to(core.parent).as_posix()
        prov.append((DEEPEP_LL_CSV, "deepep_ll", gpu, "sglang",
                     {"engine_version": ver, "rows": len(df), "filtered_rows": len(df),
                      "source_rows": len(pd.read_parquet(path)), "stride": 1}, rel, sha256(path), list(df.columns)))
    df = pd.concat(frames, ignore_index=True).rename(columns={
        "hidden_size": "hidden", "num_topk": "topk", "num_experts": "experts", "num_token": "tokens",
        "dispatch_avg_t_us": "dispatch_us", "dispatch_bandwidth_gbps": "dispatch_GBps",
        "combine_avg_t_us": "combine_us", "combine_bandwidth_gbps": "combine_GBps"})
    df = df.sort_values(["gpu", "version", "nodes", "hidden", "experts", "topk", "tokens"], kind="mergesort")
    header = (f"# source: aiconfigurator_core {version} (Apache-2.0, NVIDIA) systems/data/<gpu>/comm/sglang/<version>/"
              f"{DEEPEP_LL_FILE} (SGLang WideEP collectors, DeepEP low-latency kernels); files and sha256 in README.md\n"
              "# timed: Kineto GPU time of DeepEP's low-latency dispatch (FP8 with 1x128 scales) and combine (BF16) kernels "
              "(collector/wideep/sglang/deepep, return_recv_hook False), rank 0; tokens = tokens per rank; GBps = the "
              "benchmark's bytes / time, bytes = routed selections (a few are masked at random) x bytes per selection\n"
              "# ep = nodes x GPUs per node (8; 4 on GB200, whose collector uses the whole 4-GPU node); the multi-node rows "
              "are H100's 0.5.6.post2 collection (2/4/8 nodes, 400 Gb/s InfiniBand per GPU by aiconfigurator's h100_sxm "
              "system file), the single-node rows each GPU's 0.5.12 collection\n")
    buf = io.StringIO()
    df.to_csv(buf, index=False, lineterminator="\n", float_format="%.6g")
    (out / DEEPEP_LL_CSV).write_text(header + buf.getvalue())
    print(f"{DEEPEP_LL_CSV:55s} {len(df):6d} rows")
    return prov


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="site-packages dir, aiconfigurator_core package dir, or aiconfigurator_core wheel")
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        core, version, where = locate(args.source.resolve(), Path(tmp))
        current = current_versions(core)
        data = core / "systems" / "data"
        rows = []
        for old in args.out.glob("aic_*.csv"):
            old.unlink()
        jobs = []
        for gpu in GPUS:
            for cls, spec in CLASSES.items():
                for eng in ENGINES:
                    jobs.append((gpu, cls, eng, spec, data / gpu / spec["op"] / eng, current.get(eng)))
            jobs.append((gpu, "allreduce_nccl", "nccl", NCCL, data / gpu / "comm" / "nccl", None))
        for gpu, cls, eng, spec, base, cur in jobs:
            p = pick(base, spec["file"], cur)
            if p is None:
                continue
            extra = ("backend", "implementation") if cls == "allreduce_custom" else ()
            df, info = extract_one(p, spec, extra)
            name = f"aic_{cls}_{GPUS[gpu]}_{eng}.csv"
            rel = p.relative_to(core.parent).as_posix()
            header = (f"# source: aiconfigurator_core {version} (Apache-2.0, NVIDIA) {rel}\n"
                      f"# sha256: {sha256(p)}\n"
                      f"# device: {info['device']}; engine: {info['framework']} {info['engine_version']}; "
                      f"rows {info['rows']} of {info['filtered_rows']} after filters ({info['source_rows']} in source), "
                      f"curve stride {info['stride']}; latency_us = median measured kernel latency in microseconds\n")
            buf = io.StringIO()
            df.to_csv(buf, index=False, lineterminator="\n", float_format="%.6g")
            (args.out / name).write_text(header + buf.getvalue())
            rows.append((name, cls, GPUS[gpu], eng, info, rel, sha256(p), list(df.columns)))
            print(f"{name:55s} {info['rows']:6d} rows (stride {info['stride']}) <- {rel}")
        rows.extend(extract_deepep_ll(core, version, args.out))
    table = ["| CSV | class | GPU | engine (version) | rows kept / after filters / in source | stride | source file in aiconfigurator_core " + version + " | sha256 |",
             "|---|---|---|---|---|---|---|---|"]
    for name, cls, gpu, eng, info, rel, digest, cols in rows:
        table.append(f"| `{name}` | {cls} | {gpu} | {eng} ({info['engine_version']}) | "
                     f"{info['rows']} / {info['filtered_rows']} / {info['source_rows']} | {info['stride']} | `{rel}` | `{digest}` |")
    readme = args.out / "README.md"
    text = readme.read_text() if readme.exists() else "<!-- PROVENANCE START -->\n<!-- PROVENANCE END -->\n"
    block = (f"<!-- PROVENANCE START -->\naiconfigurator_core version: **{version}** (extracted from `{where}`)\n\n"
             + "\n".join(table) + "\n<!-- PROVENANCE END -->")
    text = re.sub(r"<!-- PROVENANCE START -->.*<!-- PROVENANCE END -->", lambda _: block, text, flags=re.S)
    readme.write_text(text)


if __name__ == "__main__":
    main()
