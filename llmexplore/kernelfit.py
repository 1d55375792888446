"""Fit the kernel-efficiency curves (:mod:`llmexplore.models.step.kernels`) to kernel-level measurements.

Reads the CSVs in ``data/kernels/`` (aiconfigurator 0.12.0's per-kernel database, and kernel tables published in
the kernels' own repositories: DeepGEMM on H800, aiter's tuned A8W8 GEMMs on MI300X; see its README), turns every
row into (FLOPs, HBM bytes, datasheet peak, bandwidth, measured time) with the *same* work formulas the step
engine uses, and fits one soft roofline per (engine, GPU, class, variant, dtype):

    minimise  sum_rows ln(t_pred / t_meas)^2          (relative error, every row weighted alike)

by Levenberg-Marquardt in the unbounded coordinates of :func:`~llmexplore.models.step.kernels.to_u`. Grouped
(MoE) curves also pick the M tile (1, 16, 32, 64, 128 rows) that fits best. Engine ``any`` pools the three
engines' rows: the engine-neutral curves of the ``default`` runtime.

Parameter uncertainty: a bootstrap over whole measured *curves* (every row of one shape swept along m, tokens,
context or prompt), ``BOOTSTRAP`` refits with a fixed seed; ``cov_u`` is the covariance of the refitted
parameters. Rows along one sweep share their shape's systematic error, so resampling rows would understate
the uncertainty.

This module does file I/O and uses pandas; the models never import it. ``python -m llmexplore.kernelfit`` runs it and
writes ``data/kernel_efficiency.yaml``; a test re-fits a few curves and checks the file is in sync.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from . import presets
from .models.step.kernels import (PARAM_BOUNDS, PARAMS, Curve, attention_work, curve_key, from_u, gemm_work,
                             moe_block_work, soft_roofline_s, to_u)
from .lsq import levenberg_marquardt

__all__ = ["KERNEL_DIR", "ENGINES", "GPUS", "ROCM_GPUS", "DTYPES", "BOOTSTRAP", "load_rows", "fit_curve", "fit_all", "to_yaml",
           "predict_rows"]

KERNEL_DIR = presets.DATA_DIR / "kernels"
ENGINES = ("trtllm", "vllm", "sglang")
GPUS = ("h100-sxm", "h200", "b200")
#: GPUs without aiconfigurator data whose curves come from kernel tables of their own vendor's libraries
#: (ROCM_GEMM below); fitted by fit_all after GPUS, so adding them changes no other curve
ROCM_GPUS = ("mi300x",)
#: database dtype -> (our dtype, GEMM variant). fp8_block is DeepGEMM-style 1x128 / 128x128 block scaling.
DTYPES = {"bfloat16": ("bf16", "plain"), "fp8": ("fp8", "plain"), "fp8_block": ("fp8", "block"),
          "nvfp4": ("fp4", "plain")}
ELEM_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5625}  # NVFP4: 4 bits + an FP8 scale per 16 elements
BOOTSTRAP = 24  # curve-bootstrap refits per curve [modelling choice: enough for a stable 4x4 covariance]
SEED = 20261201
MOE_TILES = (1, 16, 32, 64, 128)
#: DeepGEMM's grouped FP8 GEMMs (data/kernels/deepgemm_grouped_h800.csv, measured on H800 SXM5) price the MoE of
#: DeepEP deployments (Deployment.moe_dispatch == "alltoall") on these GPU presets [assumption: H800 = H100 SXM
#: compute: the same GH100 die, SMs, clocks and HBM3; only NVLink differs]
DEEPGEMM_GPUS = {"h100-sxm": "deepgemm_grouped_h800.csv"}
#: contiguous-layout expert segments are aligned to 128 rows (DeepGEMM get_m_alignment_for_contiguous_layout())
DEEPGEMM_M_ALIGN = 128
#: MI300X FP8 GEMMs: AMD's tuned per-shape times of aiter's CK rowwise A8W8 GEMM on MI300X (cu_num 304, gfx942),
#: Llama-3.1-70B/405B projection shapes, m = 1..16384 (data/kernels/aiter_a8w8_gemm_mi300x.csv, ROCm/aiter fbb52ddf,
#: titled as PR #1092). Timed with INT8 inputs [assumption: FP8 runs at the same speed: the same byte per element and the same
#: 2,614.9 TFLOPS/TOPS dense peak on MI300X; the PR's own table times the untuned FP8 (e4m3fnuz) kernel at
#: 17.6 us for m=1, n=1280, k=8192, the INT8 tuned row 16.0 us]. Fitted as ``gemm.plain.fp8`` for the engines
#: listed [assumption: vLLM's ROCm FP8 linear layers (hipBLASLt / aiter) run at these kernels' speed; no per-shape
#: hipBLASLt FP8 table for MI300X was found]
ROCM_GEMM = {"mi300x": ("aiter_a8w8_gemm_mi300x.csv", ("vllm",))}
#: context-MLA kernels measured in the absorbed form (MQA over the 576-wide latent, V 512): aiconfigurator's SGLang
#: collector on Hopper sets v_head_dim = kv_lora_rank and head_dim = 576 for every backend but trtllm_mla
#: (collector/sglang/collect_mla.py at ai-dynamo/aiconfigurator e23be5a79, the commit that collected SGLang 0.5.14)
ABSORBED_CONTEXT_MLA_KERNELS = {"sglang": ("flash_attention",)}
MIN_GEMM_DIM = 256  # n and k of the GEMM rows fitted: smaller matrices appear in no model here
GQA_HEAD_DIM = 128  # every GQA preset (Llama-3, Qwen3) uses 128; other head dims run other kernel paths
GQA_MAX_GROUP = 8  # query heads per KV head in the presets (Llama-3-70B 64/8, Qwen3-32B 64/8)
MAX_ROWS = 4000
#: plausibility of a fitted curve as an engine's *production* kernel: a fixed cost above MAX_OVERHEAD_US means
#: the measurement timed host work (quantisation launches, JIT) that CUDA graphs hide in serving (vLLM's
#: block-FP8 GEMM rows: 74-203 us, while the engine runs DeepSeek-V3 decode steps of ~17 ms with ~600 GEMMs);
#: a bandwidth efficiency below MIN_ETA_MEM means a fallback path (SGLang's FP8-KV MLA decode reads at 9% of HBM
#: bandwidth, 5x slower than its BF16 one). Rejected curves are listed in the YAML and the engine uses the
#: engine-neutral curve instead. [modelling choice]
MAX_OVERHEAD_US = 50.0
MIN_ETA_MEM = 0.2
FLOOR_BYTES = 2e6  # decode-attention kernels this small measure the fixed overhead (launch, prologue, tail)
MIN_DECODE_KV = 256  # tokens of KV per sequence in the decode-attention rows fitted
#: L2 cache per GPU [B]: NVIDIA H100 whitepaper (50 MB, H200 the same die); B200: 126 MB reported by
#: chipsandcheese.com "Nvidia's B200" (2025) [assumption until a datasheet states it]
L2_BYTES = {"h100-sxm": 50e6, "h200": 50e6, "b200": 126e6}  # rows per curve fit (a deterministic subsample beyond): the fit's cost, not its accuracy


def _peak_flops(gpu: str, dtype: str) -> float:
    """Datasheet dense peak of a GEMM input dtype on a GPU preset [FLOP/s]."""
    hw = presets.hardware(gpu)
    if dtype == "fp4":
        fp4 = getattr(hw, "fp4_TFLOPS", 0.0) or 0.0
        return (fp4 if fp4 > 0 else 2.0 * hw.fp8_TFLOPS) * 1e12
    return hw.peak_TFLOPS(dtype) * 1e12


def _read(cls_file: str, gpu: str, engine: str) -> pd.DataFrame | None:
    p = KERNEL_DIR / f"aic_{cls_file}_{gpu}_{engine}.csv"
    return pd.read_csv(p, comment="#") if p.exists() else None


def _frame(df: pd.DataFrame, cls: str, variant: str, dtype: str, flops, bytes_, curve_cols, gpu, engine,
           peak_dtype: str) -> pd.DataFrame:
    out = pd.DataFrame({"engine": engine, "gpu": gpu, "cls": cls, "variant": variant, "dtype": dtype,
                        "flops": np.asarray(flops, dtype=float), "bytes": np.asarray(bytes_, dtype=float),
                        "measured_s": df["latency_us"].to_numpy(float) * 1e-6})
    out["peak_flops"] = _peak_flops(gpu, peak_dtype)
    out["hbm_Bps"] = presets.hardware(gpu).hbm_bw_TBps * 1e12
    out["curve"] = df[curve_cols].astype(str).agg("|".join, axis=1).to_numpy() if curve_cols else "all"
    for c in df.columns:
        if c not in ("latency_us",):
            out[f"x_{c}"] = df[c].to_numpy()
    return out


def load_rows(gpu: str, engine: str) -> pd.DataFrame:
    """Every usable kernel row of one GPU and engine, with its work and the datasheet peaks (one row per
    measurement): columns engine, gpu, cls, variant, dtype, flops, bytes, measured_s, peak_flops, hbm_Bps,
    curve (the shape's id for the bootstrap), and x_<column> for the raw columns."""
    frames = []
    g = _read("gemm", gpu, engine)
    if g is not None:
        g = g[(g.n >= MIN_GEMM_DIM) & (g.k >= MIN_GEMM_DIM) & g.dtype.isin(list(DTYPES))]
        for dt, part in g.groupby("dtype"):
            ours, variant = DTYPES[dt]
            b = ELEM_BYTES[ours]
            f, by = gemm_work(part.m, part.n, part.k, b_w=b, b_in=b)
            if dt == "fp8":  # the rows time dynamic quantisation too: the served GEMM is the static one
                part = _static_fp8(part, f, by, gpu, engine)
            frames.append(_frame(part, "gemm", variant, ours, f, by, ["kernel", "n", "k"], gpu, engine, ours))
    m = _read("moe", gpu, engine)
    if m is not None:
        m = m[m.dtype.isin(list(DTYPES)) & ~m.kernel.str.contains("nongated")]
        for dt, part in m.groupby("dtype"):
            ours, variant = DTYPES[dt]
            frames.append(_frame(part, "grouped_gemm", variant, ours, np.nan, np.nan,
                                 ["kernel", "experts", "topk", "hidden", "inter", "moe_tp", "moe_ep"], gpu, engine,
                                 ours))
    for file, kind, variant in (("generation_attention", "decode", "gqa"), ("context_attention", "prefill", "gqa"),
                                ("generation_mla", "decode", "mla"), ("context_mla", "prefill", "mla")):
        a = _read(file, gpu, engine)
        if a is None:
            continue
        a = a[a.dtype == "bfloat16"]  # BF16 compute (the activations' dtype here); the KV dtype varies
        if variant == "gqa":  # the shapes of the GQA presets: head_dim 128, at most 8 query heads per KV head
            a = a[(a.head_dim == GQA_HEAD_DIM) & (a.heads <= GQA_MAX_GROUP * a.kv_heads)]
        for kv, part in a.groupby("kv_dtype"):
            if kv not in DTYPES:
                continue
            ours = DTYPES[kv][0]
            tok = part.kv_len if kind == "decode" else part.isl
            kvh = part.kv_heads if variant == "gqa" else 1
            hd = part.head_dim if variant == "gqa" else 128
            f, by = attention_work(kind, variant, batch=part.batch, tokens=tok, heads=part.heads, kv_heads=kvh,
                                   head_dim=hd, b_kv=ELEM_BYTES[ours])
            if file == "context_mla":  # rows timed in the absorbed form carry that form's work (same curve key)
                absorbed = part.kernel.isin(ABSORBED_CONTEXT_MLA_KERNELS.get(engine, ())).to_numpy()
                fa, ba = attention_work(kind, "mla_absorbed", batch=part.batch, tokens=tok, heads=part.heads)
                f, by = np.where(absorbed, fa, f), np.where(absorbed, ba, by)
            if kind == "decode":  # a micro-benchmark that repeats one kernel reads a KV smaller than L2 from
                # L2; a model reads each layer's own KV from HBM, so only kernels larger than L2 are fitted
                # and contexts of serving (>= MIN_DECODE_KV tokens): below, a per-sequence setup cost that the
                # roofline has no term for dominates (batch 2048 x 7 tokens)
                # The tiny kernels (< FLOOR_BYTES) are kept apart: their latency is the kernel's overhead.
                big = (np.asarray(by) >= L2_BYTES[gpu]) & (part.kv_len.to_numpy() >= MIN_DECODE_KV)
                keep = big | (np.asarray(by) < FLOOR_BYTES)
                part, f, by, big = part[keep], np.asarray(f)[keep], np.asarray(by)[keep], big[keep]
            cols = ["kernel", "batch", "heads"] + (["kv_heads", "head_dim"] if variant == "gqa" else [])
            fr = _frame(part, f"attention_{kind}", variant, ours, f, by, cols, gpu, engine, "bf16")
            if kind == "decode":
                fr["floor"] = ~big
            frames.append(fr)
    frames += _deepgemm_frames(gpu, engine)
    frames += _rocm_gemm_frames(gpu, engine)
    frames += _comm_frames(gpu, engine)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def compute_scale_us(gpu: str, engine: str, m, k) -> np.ndarray:
    """The dynamic-quantisation overhead inside aiconfigurator's per-tensor FP8 GEMM rows at (m, k) [us]: its
    ``compute_scale`` table (data/kernels/aic_compute_scale_<gpu>_<engine>.csv: dynamic minus static FP8 GEMM,
    >= 0), linear in log m along the nearest measured k (in log k); 0 where the engine has no table.

    Why: aiconfigurator's GEMM collector builds the FP8 Linear without an ``input_scale``, so TensorRT-LLM's
    FP8QDQ path computes the activation scale at run time and the timed GEMM includes it
    (collector/trtllm/collect_gemm.py at ai-dynamo/aiconfigurator 095f58a5: "the collected fp8 GEMM includes the
    compute-scale overhead. AIC derives fp8_static at query time by subtracting that overhead"). A served FP8
    checkpoint (ModelOpt, llm-compressor) carries static input scales and skips that kernel: 7-8.5 us per GEMM
    on H100/H200/B200 under TensorRT-LLM at decode sizes, 0.4-1.3 us under vLLM, 0 under SGLang."""
    m = np.asarray(m, dtype=float)
    k = np.asarray(k, dtype=float)
    p = KERNEL_DIR / f"aic_compute_scale_{gpu}_{engine}.csv"
    if not p.exists():
        return np.zeros(np.broadcast(m, k).shape)
    t = pd.read_csv(p, comment="#")
    t = t[t.dtype == "fp8"]
    ks = np.sort(t.k.unique().astype(float))
    near = ks[np.abs(np.log(k)[..., None] - np.log(ks)).argmin(axis=-1)]
    out = np.zeros(np.broadcast(m, k).shape)
    for kv in np.unique(near):
        row = t[t.k == kv].sort_values("m")
        sel = near == kv
        out[sel] = np.interp(np.log(np.broadcast_to(m, out.shape)[sel]), np.log(row.m.to_numpy(float)),
                             row.latency_us.to_numpy(float))
    return out


def _static_fp8(part: pd.DataFrame, flops, bytes_, gpu: str, engine: str) -> pd.DataFrame:
    """Per-tensor FP8 GEMM rows as the static-scale GEMM a served checkpoint runs: the measured latency less
    :func:`compute_scale_us`, floored at the row's datasheet roofline (an overhead table interpolated
    separately from the GEMM's may cross it; aiconfigurator floors its fp8_static query the same way)."""
    cs = compute_scale_us(gpu, engine, part.m, part.k)
    hw = presets.hardware(gpu)
    sol_us = np.maximum(np.asarray(flops) / _peak_flops(gpu, "fp8"),
                        np.asarray(bytes_) / (hw.hbm_bw_TBps * 1e12)) * 1e6
    out = part.copy()
    out["latency_us"] = np.maximum(part.latency_us.to_numpy(float) - cs, sol_us)
    return out


def _deepgemm_frames(gpu: str, engine: str) -> list[pd.DataFrame]:
    """DeepGEMM's grouped FP8 GEMM rows (one grouped GEMM per row: F = 2 G m n k, M = G (n k + m k) + 2 G m n
    with FP8 inputs and BF16 output) as ``grouped_gemm.deepgemm.fp8`` rows. The kernel is the same under every
    engine (SGLang, vLLM and TensorRT-LLM call DeepGEMM for DeepEP MoE on Hopper), so every engine's set gets them."""
    name = DEEPGEMM_GPUS.get(gpu)
    if name is None:
        return []
    d = pd.read_csv(KERNEL_DIR / name, comment="#")
    G, m = d.groups.to_numpy(float), d.m_per_group.to_numpy(float)
    f, by = gemm_work(m, d.n, d.k, b_w=ELEM_BYTES["fp8"], b_in=ELEM_BYTES["fp8"])
    fr = _frame(d, "grouped_gemm", "deepgemm", "fp8", G * f, G * by, ["layout", "groups", "n", "k"], gpu, engine,
                "fp8")
    return [fr]


def _rocm_gemm_frames(gpu: str, engine: str) -> list[pd.DataFrame]:
    """aiter's tuned A8W8 GEMM rows on an AMD GPU (ROCM_GEMM) as ``gemm.plain.fp8`` rows: one byte per input
    element, BF16 output (gemm_work), priced against the FP8 peak."""
    name, engines = ROCM_GEMM.get(gpu, (None, ()))
    if name is None or engine not in engines:
        return []
    d = pd.read_csv(KERNEL_DIR / name, comment="#")
    d = d[(d.n >= MIN_GEMM_DIM) & (d.k >= MIN_GEMM_DIM)]
    b = ELEM_BYTES["fp8"]
    f, by = gemm_work(d.m, d.n, d.k, b_w=b, b_in=b)
    return [_frame(d, "gemm", "plain", "fp8", f, by, ["kernel", "n", "k"], gpu, engine, "fp8")]


#: bus-traffic factor of each collective: t = alpha + factor (p-1)/p n / bus bandwidth (n: the full buffer)
COMM_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "alltoall": 1.0}


def _comm_frames(gpu: str, engine: str) -> list[pd.DataFrame]:
    """Intra-node collectives: the engine's own all-reduce (its CUDA-graph path: what a served step runs) and
    NCCL's all-gather, reduce-scatter and all-to-all (and all-reduce when the engine has no custom one).
    Work: F = 0, M = factor (p-1)/p n bus bytes, priced against the GPU's scale-up link line rate."""
    hw = presets.hardware(gpu)
    line_Bps = presets.link(hw.scale_up_link).line_rate_GBps * 1e9
    frames = []
    custom = _read("allreduce_custom", gpu, engine)
    if custom is not None:
        path = custom.get("backend", custom.get("implementation"))
        custom = custom[~path.astype(str).str.contains("eager")] if path is not None else custom
        custom = custom.assign(collective="all_reduce")
    nccl = _read("allreduce_nccl", gpu, "nccl")
    if nccl is not None:
        nccl = nccl[nccl.dtype.isin(["half", "bfloat16"])]
        if custom is not None and len(custom):
            nccl = nccl[nccl.collective != "all_reduce"]
    for part in (custom, nccl):
        if part is None or not len(part):
            continue
        for (op, ranks), g in part.groupby(["collective", "ranks"]):
            if op not in COMM_FACTOR:
                continue
            bus = COMM_FACTOR[op] * (ranks - 1) / ranks * g.message_bytes.to_numpy(float)
            fr = _frame(g, "comm", str(op), f"p{int(ranks)}", np.zeros(len(g)), bus, ["kernel" if "kernel" in g
                        else "collective"], gpu, engine, "bf16")
            fr["hbm_Bps"] = line_Bps
            fr["curve"] = f"{op}|{ranks}|" + pd.Series(np.arange(len(g)) // 4).astype(str).to_numpy()
            frames.append(fr)
    return frames


def _moe_work(rows: pd.DataFrame, tile_m: int):
    b = rows["dtype"].map(ELEM_BYTES).to_numpy(float)
    return moe_block_work(rows.x_tokens.to_numpy(float), rows.x_experts.to_numpy(float), rows.x_topk.to_numpy(float),
                          rows.x_hidden.to_numpy(float), rows.x_inter.to_numpy(float),
                          moe_tp=rows.x_moe_tp.to_numpy(float), moe_ep=rows.x_moe_ep.to_numpy(float), b_w=b, b_a=b,
                          tile_m=tile_m)


def predict_rows(rows: pd.DataFrame, curve: Curve) -> np.ndarray:
    """Predicted time [s] of kernel rows (one class, variant and dtype) under ``curve``. A grouped-GEMM row is
    the whole MoE block: two kernels of half its work each."""
    if rows["cls"].iloc[0] == "grouped_gemm" and rows["variant"].iloc[0] != "deepgemm":
        f, by = _moe_work(rows, curve.tile_m)
        one = soft_roofline_s(f / 2, by / 2, curve.eta_compute * rows.peak_flops.to_numpy(),
                              curve.eta_mem * rows.hbm_Bps.to_numpy(), curve.overhead_us * 1e-6, curve.knee)
        return 2.0 * one
    t = soft_roofline_s(rows.flops.to_numpy(), rows["bytes"].to_numpy(),
                        curve.eta_compute * rows.peak_flops.to_numpy(), curve.eta_mem * rows.hbm_Bps.to_numpy(),
                        curve.overhead_us * 1e-6, curve.knee)
    if curve.two_path:  # the second (bandwidth) path of a collective: the faster of the two
        t = np.minimum(t, curve.overhead2_us * 1e-6 + rows["bytes"].to_numpy() / (curve.eta_mem2 * rows.hbm_Bps.to_numpy()))
    return t


_START = Curve(eta_compute=0.6, eta_mem=0.7, overhead_us=5.0, knee=2.0, eta_mem2=0.7, overhead2_us=20.0)


def _two_path_start(rows: pd.DataFrame) -> Curve:
    """Starting point of a two-path fit: a straight line through the smallest third of the messages (the latency
    path) and one through the largest third (the bandwidth path); from any single start the min() leaves one
    path without gradient."""
    by, t = rows["bytes"].to_numpy(float), rows.measured_s.to_numpy(float)
    order = np.argsort(by)
    k = max(len(by) // 3, 2)
    bw = rows.hbm_Bps.to_numpy(float)[0]

    def line(idx):
        slope, icpt = np.polyfit(by[idx], t[idx], 1)
        eta = float(np.clip(1.0 / max(slope, 1e-30) / bw, 0.01, 1.1))
        return eta, float(np.clip(icpt * 1e6, 0.1, 250.0))

    (e1, a1), (e2, a2) = line(order[:k]), line(order[-k:])
    return Curve(eta_compute=1.0, eta_mem=e1, overhead_us=a1, knee=16.0, eta_mem2=e2, overhead2_us=a2)


#: parameters held fixed per class: GQA decode attention does 4 h d FLOPs per 2 h_kv d b_kv bytes (16 FLOP/B
#: at 8 query heads per KV head, 1/18 of H100's ridge), so its compute term cannot be identified from the data
#: and is pinned out of the way; the fit then has only bandwidth and overhead to explain the rows
FIXED = {("attention_decode", "gqa"): {"eta_compute": 1.0, "knee": PARAM_BOUNDS["knee"][1]},
         # MLA decode keeps its compute term (absorbed MLA is compute-heavy) but the hard corner: the
         # crossover closed forms need a decode core that is piecewise linear in the context length
         ("attention_decode", "mla"): {"knee": PARAM_BOUNDS["knee"][1]},
         **{("comm", op): {"eta_compute": 1.0, "knee": PARAM_BOUNDS["knee"][1]}
            for op in ("all_reduce", "all_gather", "reduce_scatter", "alltoall")}}
#: curves with a second (bandwidth) path: the engines' custom all-reduce switches from a one-shot kernel (low
#: latency, each rank reads all p - 1 peers: poor marginal bandwidth) to a two-shot/ring one (higher latency,
#: 2 (p-1)/p n bus bytes) as messages grow: H100 TP8 TensorRT-LLM 3.6 us at 16 KB, 26 us at 1 MB, 1.09 ms at
#: 256 MB, which no single alpha + n / B line follows (-60% at 1 MB, +54% at 256 MB)
TWO_PATH = {("comm", "all_reduce")}


def _curve(u, tile_m: int, two_path: bool) -> Curve:
    vals = {n: float(from_u(n, x)) for n, x in zip(PARAMS, u)}
    if not two_path:
        vals.update(eta_mem2=0.0, overhead2_us=0.0)
    return Curve(**vals, tile_m=tile_m)


def _fit_u(rows: pd.DataFrame, tile_m: int, u0: np.ndarray) -> tuple[np.ndarray, float]:
    cls_variant = (rows["cls"].iloc[0], rows["variant"].iloc[0])
    two_path = cls_variant in TWO_PATH
    fixed = dict(FIXED.get(cls_variant, {}))
    if not two_path:  # the second path does not exist: its coordinates are pinned (and ignored)
        fixed.update(eta_mem2=PARAM_BOUNDS["eta_mem2"][0], overhead2_us=PARAM_BOUNDS["overhead2_us"][0])
    if "floor" in rows.columns and rows["floor"].fillna(False).astype(bool).any():
        # decode attention: the overhead is the median latency of the tiny kernels, the rest is fitted to the
        # kernels larger than L2 (load_rows)
        floor = rows["floor"].fillna(False).astype(bool).to_numpy()
        fixed["overhead_us"] = float(np.median(rows.measured_s.to_numpy()[floor]) * 1e6)
        rows = rows[~floor]
    meas = rows.measured_s.to_numpy()
    free = [i for i, n in enumerate(PARAMS) if n not in fixed]
    full = np.array(u0, dtype=float)
    for i, n in enumerate(PARAMS):
        if n in fixed:
            full[i] = float(to_u(n, fixed[n]))

    def expand(v):
        u = full.copy()
        u[free] = v
        return u

    def residuals(v):
        return np.log(predict_rows(rows, _curve(expand(v), tile_m, two_path)) / meas)

    sol = levenberg_marquardt(residuals, full[free], max_iter=80)
    return expand(sol["u"]), sol["cost"]


def fit_curve(rows: pd.DataFrame, *, bootstrap: int = BOOTSTRAP, seed: int = SEED, source: str = "") -> Curve:
    """Fit one soft roofline to the rows of one (engine, GPU, class, variant, dtype); see the module doc."""
    if len(rows) > MAX_ROWS:  # deterministic thinning of whole curves' rows
        rows = rows.iloc[np.linspace(0, len(rows) - 1, MAX_ROWS).astype(int)]
    rows = rows.reset_index(drop=True)
    two_path = (rows["cls"].iloc[0], rows["variant"].iloc[0]) in TWO_PATH
    u0 = _two_path_start(rows).u() if two_path else _START.u()
    tiles = MOE_TILES if rows["cls"].iloc[0] == "grouped_gemm" else (1,)
    if rows["variant"].iloc[0] == "deepgemm":  # rows are single GEMMs of aligned segments: the tile is DeepGEMM's
        tiles = (DEEPGEMM_M_ALIGN,)
    best = None
    for tile in tiles:
        u, cost = _fit_u(rows, tile, u0)
        if best is None or cost < best[2] - 1e-9:
            best = (tile, u, cost)
    tile, u, _ = best
    curve = _curve(u, tile, two_path)
    fitted = rows  # the overhead rows set t0; the error is stated over the fitted rows
    if "floor" in rows.columns:
        fitted = rows[~rows["floor"].fillna(False).astype(bool)].reset_index(drop=True)
    err = np.abs(predict_rows(fitted, curve) / fitted.measured_s.to_numpy() - 1.0)
    cov = np.zeros((len(PARAMS), len(PARAMS)))
    ids = rows["curve"].to_numpy()
    shapes = np.unique(ids)
    if bootstrap and len(shapes) >= 4:
        rng = np.random.default_rng(seed)
        index = {s: np.flatnonzero(ids == s) for s in shapes}
        draws = []
        for _ in range(bootstrap):
            pick = rng.choice(shapes, size=len(shapes), replace=True)
            sub = rows.iloc[np.concatenate([index[s] for s in pick])]
            draws.append(_fit_u(sub, tile, u)[0])
        cov = np.cov(np.array(draws).T)
    return Curve(eta_compute=curve.eta_compute, eta_mem=curve.eta_mem, overhead_us=curve.overhead_us,
                 knee=curve.knee, eta_mem2=curve.eta_mem2, overhead2_us=curve.overhead2_us, tile_m=tile,
                 points=len(fitted), median_err_pct=float(np.median(err) * 100),
                 p90_err_pct=float(np.percentile(err, 90) * 100),
                 cov_u=tuple(tuple(float(x) for x in row) for row in cov), source=source)


def fit_all(*, engines=ENGINES + ("any",), gpus=GPUS + ROCM_GPUS, bootstrap: int = BOOTSTRAP, progress=None) -> dict:
    """{engine: {gpu: {curve key: Curve}}} for every curve the data hold.

    ``any`` (engine-neutral) is, per curve, the engine's curve that best describes the *pooled* rows of all
    engines (lowest median |error| over them), with its error restated over those rows. A single fit to the
    pooled rows would average kernels that behave differently (e.g. vLLM's block-FP8 GEMM carries a ~80 us
    fixed cost the others do not) and describe none of them; the consensus curve is one engine's real kernel.
    """
    out: dict = {}
    rejected: dict = {}
    per_engine_names = [e for e in engines if e != "any"] or list(ENGINES)
    for gpu in gpus:
        rows_of = {e: load_rows(gpu, e) for e in ENGINES}
        fitted: dict = {}
        for engine in ENGINES:
            rows = rows_of[engine]
            if not len(rows):
                continue
            for (cls, variant, dtype), part in rows.groupby(["cls", "variant", "dtype"], sort=True):
                key = curve_key(cls, variant, dtype)
                data = (f"data/kernels/{ROCM_GEMM[gpu][0]} (ROCm/aiter)" if gpu in ROCM_GEMM else
                        f"data/kernels/aic_*_{gpu}_{engine}.csv (aiconfigurator 0.12.0)")
                src = f"fitted by python -m llmexplore.kernelfit to {len(part)} kernel rows of {data}"
                c = fit_curve(part, bootstrap=bootstrap, source=src)
                why = implausible(c, cls)
                if why:
                    rejected.setdefault(engine, {}).setdefault(gpu, {})[key] = why
                    if progress:
                        progress(engine, gpu, key + " REJECTED: " + why, c)
                    continue
                fitted.setdefault(engine, {})[key] = c
                if engine in per_engine_names:
                    out.setdefault(engine, {}).setdefault(gpu, {})[key] = c
                    if progress:
                        progress(engine, gpu, key, c)
        if "any" not in engines:
            continue
        pooled = pd.concat([r for r in rows_of.values() if len(r)], ignore_index=True)
        for (cls, variant, dtype), part in pooled.groupby(["cls", "variant", "dtype"], sort=True):
            key = curve_key(cls, variant, dtype)
            if "floor" in part.columns:
                part = part[~part["floor"].fillna(False).astype(bool)]
            best = None
            for engine, curves in fitted.items():
                if key not in curves:
                    continue
                err = np.abs(predict_rows(part, curves[key]) / part.measured_s.to_numpy() - 1.0)
                if best is None or np.median(err) < best[0]:
                    best = (float(np.median(err)), engine, curves[key], err)
            if best is None:
                continue
            med, engine, c, err = best
            c = Curve(eta_compute=c.eta_compute, eta_mem=c.eta_mem, overhead_us=c.overhead_us, knee=c.knee,
                      eta_mem2=c.eta_mem2, overhead2_us=c.overhead2_us, tile_m=c.tile_m, points=len(part), median_err_pct=med * 100,
                      p90_err_pct=float(np.percentile(err, 90) * 100), cov_u=c.cov_u,
                      source=f"{engine}'s curve: the best of the engines' over all {len(part)} rows of {gpu}")
            out.setdefault("any", {}).setdefault(gpu, {})[key] = c
            if progress:
                progress("any", gpu, key, c)
    if rejected:
        out["rejected"] = rejected
    return out


def implausible(c: Curve, cls: str) -> str:
    """Why a fitted curve cannot be an engine's production kernel ("" if it can); see MAX_OVERHEAD_US. The
    bandwidth rule applies to decode attention only: elsewhere the rows are mostly compute-bound and eta_mem is
    weakly identified."""
    if c.overhead_us > MAX_OVERHEAD_US:
        return f"fixed cost {c.overhead_us:.0f} us > {MAX_OVERHEAD_US:.0f} us: the rows time host work"
    if cls == "attention_decode" and c.eta_mem < MIN_ETA_MEM:
        return f"bandwidth efficiency {c.eta_mem:.2f} < {MIN_ETA_MEM}: a fallback kernel path"
    return ""


def to_yaml(sets: dict) -> str:
    """The ``data/kernel_efficiency.yaml`` text for fitted sets (rounded for a readable diff)."""
    import yaml

    doc = {}
    for engine, gpus in sets.items():
        if engine == "rejected":
            doc["rejected"] = gpus
            continue
        for gpu, curves in gpus.items():
            block = {}
            for key, c in sorted(curves.items()):
                block[key] = {
                    "eta_compute": round(c.eta_compute, 4), "eta_mem": round(c.eta_mem, 4),
                    "overhead_us": round(c.overhead_us, 3), "knee": round(c.knee, 3), "tile_m": int(c.tile_m),
                    **({"eta_mem2": round(c.eta_mem2, 4), "overhead2_us": round(c.overhead2_us, 3)}
                       if c.two_path else {}),
                    "points": int(c.points), "median_err_pct": round(c.median_err_pct, 2),
                    "p90_err_pct": round(c.p90_err_pct, 2),
                    **({"from_engine": c.source.split("'")[0]} if engine == "any" else {}),
                    "cov_u": [[float(f"{x:.4g}") for x in row] for row in c.cov_u]}
            doc.setdefault(engine, {})[gpu] = block
    head = ("# Kernel-efficiency curves (llmexplore/models/step/kernels.py, docs/models.md §1.2): one soft roofline\n"
            "#   t = overhead + ((F / (eta_compute P))^knee + (M / (eta_mem BW))^knee)^(1/knee)\n"
            "# per engine, GPU and <class>.<variant>.<dtype>, fitted by `python -m llmexplore.kernelfit` to the kernel rows\n"
            "# in data/kernels/ (aiconfigurator 0.12.0 per-kernel database, Apache-2.0, and kernel tables from the kernels'\n"
            "# own repositories: DeepGEMM on H800, aiter's A8W8 GEMM on MI300X; see its README). Never\n"
            "# fitted to end-to-end numbers. `any` pools the three engines (the engine-neutral `default` runtime).\n"
            "# points: rows fitted; *_err_pct: |pred/meas - 1| over them; cov_u: parameter covariance in the fit\n"
            "# coordinates (kernels.to_u), from a bootstrap over measured shapes. A test keeps this file in sync.\n")
    text = yaml.safe_dump(doc, sort_keys=False, width=200, default_flow_style=None)
    return head + text


def main(argv: list[str] | None = None) -> int:
    """``python -m llmexplore.kernelfit [--out FILE]``: re-fit every curve and write the YAML (about 2 minutes)."""
    import argparse
    import sys
    import time

    ap = argparse.ArgumentParser(prog="python -m llmexplore.kernelfit", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(presets.KERNEL_FILE), help="YAML to write (default: %(default)s)")
    ap.add_argument("--bootstrap", type=int, default=BOOTSTRAP, help="curve-bootstrap refits per curve")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()

    def progress(engine, gpu, key, c):
        print(f"{engine:7s} {gpu:9s} {key:32s} {c.points:5d} rows  median |err| {c.median_err_pct:5.1f}%  "
              f"p90 {c.p90_err_pct:5.1f}%", file=sys.stderr)

    sets = fit_all(bootstrap=args.bootstrap, progress=progress)
    Path(args.out).write_text(to_yaml(sets), encoding="utf-8")
    print(f"wrote {args.out} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
