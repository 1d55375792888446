"""Measured kernel tables and their small fits, read from ``data/kernels/*.csv`` and cached per file version.

This is the data layer beside :mod:`.presets`: the only place where a model's measured table is read and fitted,
so that nothing in ``models/`` reads a file (``tests/unit/test_layers.py``). Each reader caches on the file's
(path, modification time), so an edited table is read again (:func:`.presets.data_file`).

* DeepEP's *normal* kernels (:func:`deepep_normal_table`): published bottleneck bandwidths per EP size
  (``data/kernels/deepep_normal_h800.csv``), priced by :func:`llmexplore.models.step.collectives.deepep_normal_s`.
* DeepEP's *low-latency* kernels (:func:`deepep_ll_table`, :func:`deepep_ll_fit`, :func:`deepep_ll_params`):
  aiconfigurator's SGLang WideEP tables (``data/kernels/aic_deepep_ll.csv``), t = a + bytes / B fitted per GPU,
  EP size and op by least squares on relative error (docs/models.md §1.2).
* vLLM's PyTorch sort-based sampler (:func:`torch_sort_table`, :func:`torch_sort_params`): t = t0 + c rows vocab
  fitted to vLLM's micro-benchmarks (``data/kernels/vllm_topk_topp_torch.csv``, docs/models.md §1.1b).

Bootstrap draws (``draw`` i >= 1) refit a resample of the rows with a fixed seed per draw, for the kernel bands
of :mod:`llmexplore.models.step.uncertainty`.
"""

from __future__ import annotations

import csv
import functools

import numpy as np

from . import presets

__all__ = ["DEEPEP_NORMAL_CSV", "DEEPEP_LL_CSV", "DEEPEP_LL_OPS", "DEEPEP_LL_MIN_EXPERTS",
           "DEEPEP_LL_MEASURED_NIC_GBps", "TORCH_SORT_CSV", "deepep_normal_table", "deepep_ll_table",
           "deepep_ll_fit", "deepep_ll_params", "torch_sort_table", "torch_sort_fit", "torch_sort_params"]

#: DeepEP normal-kernel bandwidths (deepseek-ai/DeepEP README at 1a0c8f6, H800 + CX7 400G; data/kernels/README.md)
DEEPEP_NORMAL_CSV = "kernels/deepep_normal_h800.csv"
#: DeepEP low-latency kernel times (aiconfigurator_core 0.12.0 SGLang WideEP tables; data/kernels/README.md)
DEEPEP_LL_CSV = "kernels/aic_deepep_ll.csv"
DEEPEP_LL_OPS = ("dispatch", "combine")
#: the low-latency fits use fine-grained MoE shapes only (>= 64 experts: DeepSeek-V3/R1, Qwen3 MoE, Kimi K2...).
#: With 8 or 16 experts (Mixtral-like) the measured kernels are up to 7x slower than the fit at 1,024 tokens:
#: every copy lands on an expert that few SMs receive for, a regime the bytes / bandwidth form does not describe.
DEEPEP_LL_MIN_EXPERTS = 64
#: line rate of the NIC the multi-node rows were measured on: 400 Gb/s InfiniBand (aiconfigurator's h100_sxm
#: system file: "1:1 CX7 NDR 400Gb/s per node") = 50 GB/s per direction
DEEPEP_LL_MEASURED_NIC_GBps = 50.0
#: GPU whose multi-node low-latency fits stand in for a GPU measured on one node only
DEEPEP_LL_MULTI_NODE_GPU = "h100-sxm"
_LL_SEED = 20250729  # fixed: bootstrap draw i is the same in every process

#: vLLM's PyTorch-native top-k/top-p micro-benchmarks (vLLM PRs #33538, #42191, #51507; data/kernels/README.md)
TORCH_SORT_CSV = "kernels/vllm_topk_topp_torch.csv"
TORCH_SORT_SEED = 20250215  # fixed: draw i of the bootstrap is the same in every process


def _rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


# ---- DeepEP normal kernels -----------------------------------------------------------------------------------
def deepep_normal_table() -> dict:
    """{(op, "intranode" | "internode"): (EP ranks, bottleneck GB/s, measured link's line rate GB/s)} of DeepEP's
    normal kernels (EP sizes ascending)."""
    return _normal_read(*presets.data_file(DEEPEP_NORMAL_CSV))


@functools.cache
def _normal_read(path: str, stamp: float) -> dict:
    rows: dict = {}
    for r in _rows(path):
        rows.setdefault((r["op"], r["type"]), []).append(
            (float(r["ep"]), float(r["bottleneck_GBps"]), float(r["link_line_GBps"])))
    return {k: (np.array([e for e, _, _ in sorted(v)]), np.array([b for _, b, _ in sorted(v)]), v[0][2])
            for k, v in rows.items()}


# ---- DeepEP low-latency kernels ------------------------------------------------------------------------------
def deepep_ll_table() -> dict:
    """The low-latency kernel rows: {column: array} of ``data/kernels/aic_deepep_ll.csv`` plus ``dispatch_bytes`` /
    ``combine_bytes``, the bytes the benchmark counted (GB/s x us)."""
    return _ll_read(*presets.data_file(DEEPEP_LL_CSV))


@functools.cache
def _ll_read(path: str, stamp: float) -> dict:
    rows = _rows(path)
    out = {c: np.array([r[c] for r in rows]) for c in ("gpu", "version", "device")}
    for c in ("nodes", "ep", "hidden", "topk", "experts", "tokens", "dispatch_us", "dispatch_GBps", "combine_us",
              "combine_GBps"):
        out[c] = np.array([float(r[c]) for r in rows])
    for op in DEEPEP_LL_OPS:
        out[f"{op}_bytes"] = out[f"{op}_GBps"] * out[f"{op}_us"] * 1e3
    return out


def _ll_lsq(t_us: np.ndarray, by: np.ndarray) -> tuple[float, float]:
    """(a [s], B [B/s]) minimising sum(((a + bytes / B) / t - 1)^2)."""
    A = np.stack([1.0 / t_us, by / t_us], axis=1)
    a_us, inv = np.linalg.lstsq(A, np.ones_like(t_us), rcond=None)[0]
    return float(a_us) * 1e-6, 1e6 / float(inv)


def deepep_ll_fit(gpu: str, ep: int, op: str, draw: int = 0) -> dict | None:
    """The fitted low-latency kernel curve t = a + bytes / B of one measured (GPU, EP size, op), or None.

    Fitted on the fine-grained MoE rows (>= :data:`DEEPEP_LL_MIN_EXPERTS` experts). Returns ``a_s``, ``B_Bps``,
    ``rows``, ``median_err_pct`` and ``p90_err_pct`` (|fit / measured - 1| over the rows fitted). ``draw`` i >= 1:
    the fit to the i-th bootstrap resample of the rows."""
    return _ll_fit(*presets.data_file(DEEPEP_LL_CSV), str(gpu), int(ep), str(op), int(draw))


@functools.cache
def _ll_fit(path: str, stamp: float, gpu: str, ep: int, op: str, draw: int) -> dict | None:
    tb = _ll_read(path, stamp)
    sel = (tb["gpu"] == gpu) & (tb["ep"] == ep) & (tb["experts"] >= DEEPEP_LL_MIN_EXPERTS)
    if sel.sum() < 3:
        return None
    t, by = tb[f"{op}_us"][sel], tb[f"{op}_bytes"][sel]
    a, B = _ll_lsq(t, by)
    err = np.abs((a * 1e6 + by / B * 1e6) / t - 1.0) * 100.0
    fit = {"a_s": a, "B_Bps": B, "rows": int(sel.sum()), "median_err_pct": float(np.median(err)),
           "p90_err_pct": float(np.percentile(err, 90))}
    if draw > 0:
        rng = np.random.default_rng([_LL_SEED, draw, ep, DEEPEP_LL_OPS.index(op)])
        idx = rng.integers(0, t.size, t.size)
        ba, bB = _ll_lsq(t[idx], by[idx])
        fit.update(a_s=ba if ba > 0 else a, B_Bps=bB if bB > 0 else B)
    return fit


def _ll_eps(path: str, stamp: float, gpu: str, multi: bool) -> list[int]:
    tb = _ll_read(path, stamp)
    sel = (tb["gpu"] == gpu) & ((tb["nodes"] > 1) if multi else (tb["nodes"] == 1))
    return sorted({int(e) for e in tb["ep"][sel]})


def deepep_ll_params(gpu: str, op: str, p: int, multi_node: bool, line_GBps: float,
                     draw: int = 0) -> tuple[float, float] | None:
    """(a [s], B [B/s]) of DeepEP's low-latency ``op`` over p EP ranks on ``gpu``, whose group spans nodes or not
    (``multi_node``) and whose link has line rate ``line_GBps`` (the scale-up link inside a node, the scale-out
    link across nodes), or None where no GPU of the table is a model for it.

    Inside one scale-up domain: the GPU's own single-node fit (measured at 8 ranks, 4 on GB200; the same a and B
    for any p there, an assumption), B scaled by the link's line rate over the GPU's own link's. Across nodes:
    the multi-node fits, measured on H100 at EP 16 / 32 / 64 with a 400 Gb/s NIC per GPU, for every GPU that has
    a single-node table (the low-latency kernels send over RDMA, so the NIC sets B), a and 1/B interpolated in
    log2(p) and held at the ends, B scaled by the line rate over 50 GB/s (docs/models.md §1.2)."""
    return _ll_params(*presets.data_file(DEEPEP_LL_CSV), str(gpu), str(op), int(p), bool(multi_node),
                      float(line_GBps), int(draw))


@functools.cache
def _ll_params(path: str, stamp: float, gpu: str, op: str, p: int, multi: bool, line_GBps: float,
               draw: int) -> tuple[float, float] | None:
    single = _ll_eps(path, stamp, gpu, False)
    if not single:
        return None
    if not multi:
        f = _ll_fit(path, stamp, gpu, single[0], op, draw)
        if f is None:
            return None
        own = presets.hardware(gpu).scale_up_link
        return f["a_s"], f["B_Bps"] * (line_GBps / presets.link(own).line_rate_GBps if own else 1.0)
    src = gpu if _ll_eps(path, stamp, gpu, True) else DEEPEP_LL_MULTI_NODE_GPU
    eps = _ll_eps(path, stamp, src, True)
    fits = [_ll_fit(path, stamp, src, e, op, draw) for e in eps]
    if not eps or any(f is None for f in fits):
        return None
    x = np.log2(np.asarray(eps, dtype=float))
    a = float(np.interp(np.log2(p), x, [f["a_s"] for f in fits]))
    inv_B = float(np.interp(np.log2(p), x, [1.0 / f["B_Bps"] for f in fits]))
    return a, line_GBps / DEEPEP_LL_MEASURED_NIC_GBps / inv_B


# ---- the PyTorch sort-based sampler --------------------------------------------------------------------------
def torch_sort_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(batch rows, vocab, measured ms) of the PyTorch sort-based top-k/top-p micro-benchmarks."""
    return _sort_read(*presets.data_file(TORCH_SORT_CSV))


@functools.cache
def _sort_read(path: str, stamp: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = _rows(path)
    b = np.array([float(r["batch"]) for r in rows])
    v = np.array([float(r["vocab"]) for r in rows])
    ms = np.array([float(r["pytorch_ms"]) for r in rows])
    return b, v, ms


def torch_sort_fit(b: np.ndarray, v: np.ndarray, ms: np.ndarray) -> tuple[float, float]:
    """Least squares on relative error: minimise sum(((t0 + c b v) / ms - 1)^2). Returns (t0 [s], c [s/logit])."""
    A = np.stack([np.ones_like(b), b * v], axis=1) / ms[:, None]
    t0_ms, c_ms = np.linalg.lstsq(A, np.ones_like(ms), rcond=None)[0]
    return float(t0_ms) * 1e-3, float(c_ms) * 1e-3


def torch_sort_params(draw: int = 0) -> tuple[float, float]:
    """(t0 [s], c [s per logit]) of the sort-based sampler: the fit (draw 0), or the fit to the i-th bootstrap
    resample of the measured rows (draw i >= 1). Both parameters are kept positive (a resample without large
    rows cannot pin c; it then keeps the fit's value)."""
    return _sort_params(*presets.data_file(TORCH_SORT_CSV), int(draw))


@functools.cache
def _sort_params(path: str, stamp: float, draw: int) -> tuple[float, float]:
    b, v, ms = _sort_read(path, stamp)
    t0, c = torch_sort_fit(b, v, ms)
    if draw <= 0:
        return t0, c
    rng = np.random.default_rng([TORCH_SORT_SEED, draw])
    idx = rng.integers(0, len(ms), len(ms))
    bt0, bc = torch_sort_fit(b[idx], v[idx], ms[idx])
    return (bt0 if bt0 > 0 else t0), (bc if bc > 0 else c)
