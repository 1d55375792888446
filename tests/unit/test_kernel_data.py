"""data/kernels/: kernel-level measurements extracted from aiconfigurator (issue 9 groundwork)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llmexplore.kernelfit import L2_BYTES
import yaml

ROOT = Path(__file__).resolve().parents[2]
KDIR = ROOT / "data" / "kernels"
DEEPEP_LL = KDIR / "aic_deepep_ll.csv"  # aiconfigurator's DeepEP low-latency tables, every GPU in one file
CSVS = sorted(set(KDIR.glob("aic_*.csv")) - {DEEPEP_LL})  # aiconfigurator's kernel database, a file per class
OWN_CSVS = sorted(KDIR.glob("own_*.csv"))  # measured by this project (benchmarks/gpu/)
OTHER_CSVS = sorted(set(KDIR.glob("*.csv")) - set(CSVS) - {DEEPEP_LL} - set(OWN_CSVS))  # published (DeepGEMM, ...)
README = (KDIR / "README.md").read_text()
HW = yaml.safe_load((ROOT / "data" / "hardware.yaml").read_text())

COLUMNS = {
    "gemm": ["kernel", "dtype", "m", "n", "k", "latency_us"],
    "moe": ["kernel", "dtype", "tokens", "experts", "topk", "hidden", "inter", "moe_tp", "moe_ep", "latency_us"],
    "context_attention": ["kernel", "dtype", "kv_dtype", "batch", "isl", "heads", "kv_heads", "head_dim", "latency_us"],
    "generation_attention": ["kernel", "dtype", "kv_dtype", "batch", "kv_len", "heads", "kv_heads", "head_dim", "latency_us"],
    "context_mla": ["kernel", "dtype", "kv_dtype", "batch", "isl", "heads", "tp", "latency_us"],
    "generation_mla": ["kernel", "dtype", "kv_dtype", "batch", "kv_len", "heads", "tp", "latency_us"],
    "allreduce_custom": ["kernel", "dtype", "ranks", "message_elems", "message_bytes", "latency_us"],
    "allreduce_nccl": ["collective", "dtype", "ranks", "message_elems", "message_bytes", "latency_us"],
    # dynamic minus static per-tensor FP8 GEMM (kernelfit.compute_scale_us): zero is a measurement here
    "compute_scale": ["kernel", "dtype", "m", "k", "latency_us"],
}
NAME = re.compile(r"^aic_(?P<cls>" + "|".join(COLUMNS) + r")_(?P<gpu>[a-z0-9-]+)_(?P<eng>trtllm|sglang|vllm|nccl)\.csv$")


def load(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, comment="#")


def parts(path: Path) -> dict:
    m = NAME.match(path.name)
    assert m, f"unexpected file name {path.name}"
    return m.groupdict()


def of_class(cls: str) -> list[Path]:
    return [p for p in CSVS if NAME.match(p.name) and NAME.match(p.name)["cls"] == cls]


def test_expected_coverage():
    assert len(CSVS) >= 30
    for gpu in ("h100-sxm", "h200", "b200"):
        for cls in ("gemm", "moe", "context_attention", "generation_attention", "allreduce_nccl"):
            assert any(parts(p)["gpu"] == gpu and parts(p)["cls"] == cls for p in CSVS), (gpu, cls)
    total = sum(p.stat().st_size for p in CSVS)
    assert total < 8e6, f"data/kernels is {total/1e6:.1f} MB; keep it compact"


@pytest.mark.parametrize("path", CSVS, ids=lambda p: p.name)
def test_csv_parses_with_documented_columns_and_provenance(path):
    info = parts(path)
    assert info["gpu"] in HW
    df = load(path)
    assert len(df) > 0
    assert path.stat().st_size < 1e6
    cols = COLUMNS[info["cls"]]
    assert list(df.columns[: len(cols)]) == cols or set(cols) <= set(df.columns)
    assert set(df.columns) - set(cols) <= {"backend", "implementation"}
    lat = df["latency_us"].to_numpy(float)
    assert np.all(np.isfinite(lat)) and (np.all(lat >= 0) if info["cls"] == "compute_scale" else np.all(lat > 0))
    for c in cols:
        if c not in ("kernel", "dtype", "kv_dtype", "collective", "latency_us"):
            assert (df[c] > 0).all(), c
    # provenance: header and README row agree on version, source path and sha256
    head = path.read_text().splitlines()[:2]
    m = re.match(r"# source: aiconfigurator_core (\S+) \(Apache-2.0, NVIDIA\) (\S+)$", head[0])
    assert m, head[0]
    version, src = m.groups()
    sha = re.match(r"# sha256: ([0-9a-f]{64})$", head[1]).group(1)
    row = [ln for ln in README.splitlines() if ln.startswith(f"| `{path.name}` |")]
    assert len(row) == 1, f"{path.name} has no provenance row in data/kernels/README.md"
    assert f"`{src}`" in row[0] and f"`{sha}`" in row[0]
    assert f"aiconfigurator_core version: **{version}**" in README
    assert "Apache License, Version 2.0" in README


@pytest.mark.parametrize("path", OTHER_CSVS, ids=lambda p: p.name)
def test_published_kernel_tables_cite_their_source(path):
    """Kernel tables copied from a project's own publication: a '# source:' header naming the repository file
    and commit (or the repository's pull requests whose descriptions hold the table, by URL), a row in
    data/kernels/README.md, positive finite numbers."""
    head = path.read_text().splitlines()[0]
    assert re.match(r"# source: \S+/\S+ .*((commit|@) ?[0-9a-f]{7,40}|https://github\.com/\S+/\S+/pull/\d+)",
                    head), head
    assert path.name in README, f"{path.name} is not described in data/kernels/README.md"
    df = load(path)
    assert len(df) > 0 and path.stat().st_size < 1e6
    num = df.select_dtypes("number").to_numpy(float)
    assert np.all(np.isfinite(num)) and np.all(num > 0)


@pytest.mark.parametrize("path", OWN_CSVS, ids=lambda p: p.name)
def test_own_kernel_measurements_name_their_script_device_and_method(path):
    """Our own GPU measurements: a header naming the script in benchmarks/gpu/ (which exists), the date, the
    device and the method, a row in data/kernels/README.md, positive finite numbers."""
    head = path.read_text().splitlines()[:3]
    m = re.match(r"# source: own measurement, (benchmarks/gpu/\S+\.py), (\d{4}-\d{2}-\d{2})$", head[0])
    assert m, head[0]
    assert (ROOT / m.group(1)).is_file(), m.group(1)
    assert head[1].startswith("# device: ") and "torch" in head[1], head[1]
    assert head[2].startswith("# method: "), head[2]
    assert f"| `{path.name}` |" in README
    df = load(path)
    assert len(df) > 0 and path.stat().st_size < 1e6
    num = df.select_dtypes("number").to_numpy(float)
    assert np.all(np.isfinite(num)) and np.all(num > 0)


PEAK_KEY = {"bfloat16": "bf16_TFLOPS", "fp8": "fp8_TFLOPS", "fp8_block": "fp8_TFLOPS"}


@pytest.mark.parametrize("path", of_class("gemm"), ids=lambda p: p.name)
def test_gemm_never_beats_dense_peak(path):
    gpu = parts(path)["gpu"]
    df = load(path)
    df = df[df["dtype"].isin(list(PEAK_KEY))]
    assert len(df) > 0
    tflops = 2.0 * df["m"] * df["n"] * df["k"] / (df["latency_us"] * 1e-6) / 1e12
    peak = df["dtype"].map(lambda d: HW[gpu][PEAK_KEY[d]])
    worst = (tflops / peak).max()
    assert worst <= 1.0, f"{path.name}: {worst:.2f} x dense peak"


@pytest.mark.parametrize("path", of_class("moe"), ids=lambda p: p.name)
def test_moe_active_expert_flops_below_peak(path):
    """Lower bound on MoE work: tokens*topk routed rows through up+gate (2*inter) and down (inter).

    Non-gated experts (kernel name contains "nongated", e.g. Nemotron relu^2) have no gate: 2 matrices, not 3.
    """
    gpu = parts(path)["gpu"]
    df = load(path)
    df = df[df["dtype"].isin(list(PEAK_KEY))]
    if df.empty:
        pytest.skip("no bf16/fp8 rows")
    inter_local = df["inter"] / df["moe_tp"]
    tokens_local = df["tokens"] * df["topk"] / df["moe_ep"]
    mats = np.where(df["kernel"].str.contains("nongated"), 2, 3)
    flops = 2.0 * tokens_local * df["hidden"] * mats * inter_local
    tflops = flops / (df["latency_us"] * 1e-6) / 1e12
    peak = df["dtype"].map(lambda d: HW[gpu][PEAK_KEY[d]])
    assert (tflops / peak).max() <= 1.0


@pytest.mark.parametrize("path", of_class("context_attention"), ids=lambda p: p.name)
def test_prefill_attention_below_peak(path):
    gpu = parts(path)["gpu"]
    df = load(path)
    # causal: QK^T and PV, 2 matmuls x 2 FLOP x isl^2/2 x head_dim per head
    flops = 2.0 * df["batch"] * df["heads"] * df["isl"] ** 2 * df["head_dim"]
    tflops = flops / (df["latency_us"] * 1e-6) / 1e12
    peak = df["dtype"].map(lambda d: HW[gpu][PEAK_KEY.get(d, "bf16_TFLOPS")])
    assert (tflops / peak).max() <= 1.0


@pytest.mark.parametrize("path", of_class("generation_attention"), ids=lambda p: p.name)
def test_decode_attention_below_hbm_bandwidth(path):
    gpu = parts(path)["gpu"]
    df = load(path)
    kv_bytes = df["kv_dtype"].map({"bfloat16": 2, "fp8": 1})
    assert kv_bytes.notna().all()
    read = df["batch"] * df["kv_len"] * 2 * df["kv_heads"] * df["head_dim"] * kv_bytes
    tbps = read / (df["latency_us"] * 1e-6) / 1e12
    # a micro-benchmark that repeats one kernel reads a KV smaller than L2 from L2, which can beat HBM
    # (e.g. 1.06x on H100 at 17 MB); the bound holds for kernels that cannot fit (llmexplore.kernelfit.L2_BYTES)
    # head_dim 192 rows are DeepSeek-style heads whose V is 128 wide, so 2 x 192 over-counts their bytes
    big = (read >= L2_BYTES[gpu]) & (df["head_dim"] <= 128)
    assert big.sum() > 10
    assert (tbps[big] / HW[gpu]["hbm_bw_TBps"]).max() <= 1.0


@pytest.mark.parametrize("path", of_class("allreduce_custom") + of_class("allreduce_nccl"), ids=lambda p: p.name)
def test_collective_latency_grows_with_message_size(path):
    df = load(path)
    keys = [c for c in df.columns if c not in ("message_elems", "message_bytes", "latency_us")]
    for key, g in df.groupby(keys):
        g = g.sort_values("message_elems")
        small, large = g.iloc[: max(1, len(g) // 4)], g.iloc[-max(1, len(g) // 4):]
        assert large["latency_us"].min() > small["latency_us"].max(), (path.name, key)
        # bandwidth term: the largest message takes much longer than the smallest
        assert g["latency_us"].iloc[-1] > 3 * g["latency_us"].iloc[0], (path.name, key)


def test_deepep_low_latency_table_provenance_and_units():
    """aic_deepep_ll.csv: one README provenance row per aiconfigurator source file (path + sha256), the documented
    columns, and the benchmark's bandwidth = bytes / time with the bytes DeepEP's test counts per routed copy
    (FP8 dispatch H + 4 H/128 + 16, BF16 combine 2H): the rows of 128 tokens (1,024 copies, of which the test
    masks at most 10 at random) carry between 1,014 and 1,024 copies' bytes."""
    head = DEEPEP_LL.read_text().splitlines()[0]
    assert re.match(r"# source: aiconfigurator_core 0\.12\.0 \(Apache-2.0, NVIDIA\) ", head), head
    rows = [ln for ln in README.splitlines() if ln.startswith("| `aic_deepep_ll.csv` |")]
    assert len(rows) == 5
    assert all(re.search(r"`aiconfigurator_core/systems/data/\S+/comm/sglang/\S+/wideep_deepep_ll_perf\.parquet` \| "
                         r"`[0-9a-f]{64}` \|$", r) for r in rows)
    df = load(DEEPEP_LL)
    assert list(df.columns) == ["gpu", "version", "device", "nodes", "ep", "hidden", "topk", "experts", "tokens",
                                "dispatch_us", "dispatch_GBps", "combine_us", "combine_GBps"]
    assert set(df.gpu) <= set(HW) and set(df.gpu) == {"h100-sxm", "h200", "b200", "gb200"}
    assert (df.ep == df.nodes * np.where(df.gpu == "gb200", 4, 8)).all()
    num = df[["hidden", "topk", "experts", "tokens", "dispatch_us", "dispatch_GBps", "combine_us", "combine_GBps"]]
    assert np.isfinite(num.to_numpy(float)).all() and (num > 0).all().all()
    r = df[(df.tokens == 128) & (df.experts >= 64)]
    for op, per_copy in (("dispatch", r.hidden + 4 * (r.hidden // 128) + 16), ("combine", 2 * r.hidden)):
        copies = r[f"{op}_GBps"] * r[f"{op}_us"] * 1e3 / per_copy
        assert (copies <= 128 * r.topk + 1).all() and (copies >= 128 * r.topk - 10 - 1).all(), op


def test_static_fp8_rows_drop_the_dynamic_scale_kernel():
    """kernelfit fits the static per-tensor FP8 GEMM: aiconfigurator's FP8 rows less its compute_scale table
    (TensorRT-LLM: 7-8.5 us per GEMM at decode sizes on H100/H200/B200; SGLang: 0), floored at the roofline."""
    from llmexplore import kernelfit

    for gpu in ("h100-sxm", "h200", "b200"):
        cs = kernelfit.compute_scale_us(gpu, "trtllm", [1, 4, 16], [8192, 3584, 1024])
        assert np.all((cs > 6.5) & (cs < 9.0)), (gpu, cs)
        assert np.all(kernelfit.compute_scale_us(gpu, "sglang", [1, 64], [8192, 8192]) == 0)
        raw = load(KDIR / f"aic_gemm_{gpu}_trtllm.csv")
        rows = kernelfit.load_rows(gpu, "trtllm")
        fp8 = rows[(rows.cls == "gemm") & (rows.variant == "plain") & (rows.dtype == "fp8")]
        raw = raw[(raw.dtype == "fp8") & (raw.n >= kernelfit.MIN_GEMM_DIM) & (raw.k >= kernelfit.MIN_GEMM_DIM)]
        assert len(fp8) == len(raw)
        saved_us = raw.latency_us.to_numpy(float) - fp8.measured_s.to_numpy() * 1e6
        small = raw.m.to_numpy() <= 16
        assert np.all(saved_us >= 0) and np.median(saved_us[small]) > 5.0
        sol_s = np.maximum(fp8.flops / fp8.peak_flops, fp8.bytes / fp8.hbm_Bps).to_numpy()
        assert np.all(fp8.measured_s.to_numpy() >= sol_s * (1 - 1e-9))
