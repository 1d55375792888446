"""Sampling kernels of a decode step: top-k / top-p over the logits (docs/models.md §1.1b).

Most engines sample with one fused kernel (FlashInfer's top-k/top-p sampling, TensorRT-LLM's samplers, or an
argmax for greedy requests) whose time is small next to the LM head, so the step engine does not price it
(``sampler="fused"``, the default). vLLM's PyTorch-native path is different: ``apply_top_k_top_p`` sorts the
whole fp32 ``[rows, vocab]`` logits tensor, then masks and scatters it back, whenever a request sets
``top_p < 1`` or ``top_k``. Its time grows with rows x vocab and reaches milliseconds at serving batch sizes
(``sampler="torch_sort"``):

    t = t0 + c x rows x vocab

fitted to vLLM's own micro-benchmarks of that function (``data/kernels/vllm_topk_topp_torch.csv``, three vLLM
pull requests) by least squares on relative error. vLLM used this path by default from 0.11.1 (PR #26859,
2025-10-15, "Disable FlashInfer sampler by default") until 0.21.0 (PR #40376 enabled FlashInfer's sampler by
default again, as vLLM PR #44405 records), and uses it whenever ``VLLM_USE_FLASHINFER_SAMPLER=0``.

Assumption: the time is the same on every NVIDIA GPU. The tables do not name their GPU (the author's earlier
benchmark, vLLM PR #25824, ran on an H100); at 33.5 M logits the measured 4.2 ms is about 4x the time the
sort's HBM traffic needs on an H100, so the path is bound by its many passes and launches rather than by
bandwidth, and a faster HBM does not shorten it in proportion.
"""

from __future__ import annotations

import csv
import functools

import numpy as np

from .. import presets

__all__ = ["SAMPLERS", "SAMPLER_INFO", "TORCH_SORT_CSV", "torch_sort_table", "torch_sort_params", "sampler_s"]

SAMPLERS = ("fused", "torch_sort")
SAMPLER_INFO = {
    "fused": "one fused top-k/top-p (or greedy) sampling kernel, not priced: FlashInfer, TensorRT-LLM, SGLang, "
             "vLLM >= 0.21",
    "torch_sort": "vLLM's PyTorch sort-based top-k/top-p over the whole logits tensor (vLLM 0.11.1-0.20 default, "
                  "or VLLM_USE_FLASHINFER_SAMPLER=0), when requests set top_p < 1 or top_k",
}
TORCH_SORT_CSV = "kernels/vllm_topk_topp_torch.csv"
BOOTSTRAP_SEED = 20250215  # fixed: draw i of the bootstrap is the same in every process


def torch_sort_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(batch rows, vocab, measured ms) of the PyTorch sort-based top-k/top-p micro-benchmarks
    (``data/kernels/vllm_topk_topp_torch.csv``, re-read when the file changes)."""
    return _read_table(*presets.data_file(TORCH_SORT_CSV))


@functools.cache
def _read_table(path: str, stamp: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with open(path, encoding="utf-8") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    b = np.array([float(r["batch"]) for r in rows])
    v = np.array([float(r["vocab"]) for r in rows])
    ms = np.array([float(r["pytorch_ms"]) for r in rows])
    return b, v, ms


def _fit(b: np.ndarray, v: np.ndarray, ms: np.ndarray) -> tuple[float, float]:
    """Least squares on relative error: minimise sum(((t0 + c b v) / ms - 1)^2). Returns (t0 [s], c [s/logit])."""
    A = np.stack([np.ones_like(b), b * v], axis=1) / ms[:, None]
    t0_ms, c_ms = np.linalg.lstsq(A, np.ones_like(ms), rcond=None)[0]
    return float(t0_ms) * 1e-3, float(c_ms) * 1e-3


def torch_sort_params(draw: int = 0) -> tuple[float, float]:
    """(t0 [s], c [s per logit]) of the sort-based sampler: the fit (draw 0), or the fit to the i-th bootstrap
    resample of the measured rows (draw i >= 1, the kernel draws of models/uncertainty.py). Both parameters are
    kept positive (a resample without large rows cannot pin c; it then keeps the fit's value)."""
    return _params(*presets.data_file(TORCH_SORT_CSV), int(draw))


@functools.cache
def _params(path: str, stamp: float, draw: int) -> tuple[float, float]:
    b, v, ms = _read_table(path, stamp)
    t0, c = _fit(b, v, ms)
    if draw <= 0:
        return t0, c
    rng = np.random.default_rng([BOOTSTRAP_SEED, draw])
    idx = rng.integers(0, len(ms), len(ms))
    bt0, bc = _fit(b[idx], v[idx], ms[idx])
    return (bt0 if bt0 > 0 else t0), (bc if bc > 0 else c)


def sampler_s(sampler: str, rows, vocab: int, draw: int = 0) -> np.ndarray:
    """Time of one step's sampling kernels [s] for ``rows`` logits rows (broadcasts) of ``vocab`` entries:
    0 for "fused", t0 + c rows vocab for "torch_sort"."""
    rows = np.asarray(rows, dtype=float)
    if sampler == "fused":
        return np.zeros_like(rows)
    t0, c = torch_sort_params(draw)
    return t0 + c * rows * float(vocab)
