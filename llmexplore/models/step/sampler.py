"""Sampling kernels of a decode step: top-k / top-p over the logits (docs/models.md §1.1b).

Most engines sample with one fused kernel (FlashInfer's top-k/top-p sampling, TensorRT-LLM's samplers, or an
argmax for greedy requests) whose time is small next to the LM head, so the step engine does not price it
(``sampler="fused"``, the default). vLLM's PyTorch-native path is different: ``apply_top_k_top_p`` sorts the
whole fp32 ``[rows, vocab]`` logits tensor, then masks and scatters it back, whenever a request sets
``top_p < 1`` or ``top_k``. Its time grows with rows x vocab and reaches milliseconds at serving batch sizes
(``sampler="torch_sort"``):

    t = t0 + c x rows x vocab

fitted to vLLM's own micro-benchmarks of that function (``data/kernels/vllm_topk_topp_torch.csv``, three vLLM
pull requests) by least squares on relative error (:func:`llmexplore.measured.torch_sort_params`). vLLM used this path by default from 0.11.1 (PR #26859,
2025-10-15, "Disable FlashInfer sampler by default") until 0.21.0 (PR #40376 enabled FlashInfer's sampler by
default again, as vLLM PR #44405 records), and uses it whenever ``VLLM_USE_FLASHINFER_SAMPLER=0``.

Assumption: the time is the same on every NVIDIA GPU. The tables do not name their GPU (the author's earlier
benchmark, vLLM PR #25824, ran on an H100); at 33.5 M logits the measured 4.2 ms is about 4x the time the
sort's HBM traffic needs on an H100, so the path is bound by its many passes and launches rather than by
bandwidth, and a faster HBM does not shorten it in proportion.
"""

from __future__ import annotations

import numpy as np

from ... import measured

__all__ = ["SAMPLERS", "SAMPLER_INFO", "sampler_s"]

SAMPLERS = ("fused", "torch_sort")
SAMPLER_INFO = {
    "fused": "one fused top-k/top-p (or greedy) sampling kernel, not priced: FlashInfer, TensorRT-LLM, SGLang, "
             "vLLM >= 0.21",
    "torch_sort": "vLLM's PyTorch sort-based top-k/top-p over the whole logits tensor (vLLM 0.11.1-0.20 default, "
                  "or VLLM_USE_FLASHINFER_SAMPLER=0), when requests set top_p < 1 or top_k",
}

def sampler_s(sampler: str, rows, vocab: int, draw: int = 0) -> np.ndarray:
    """Time of one step's sampling kernels [s] for ``rows`` logits rows (broadcasts) of ``vocab`` entries:
    0 for "fused", t0 + c rows vocab for "torch_sort"."""
    rows = np.asarray(rows, dtype=float)
    if sampler == "fused":
        return np.zeros_like(rows)
    t0, c = measured.torch_sort_params(draw)
    return t0 + c * rows * float(vocab)
