"""Per-kernel roofline (docs/models.md §1.1).

A step is a *sequence* of kernels; each kernel k with F_k FLOPs and M_k bytes of HBM traffic takes

    t_k = max(F_k / (eta_c * P_peak), M_k / (eta_m * BW_hbm)) + t_overhead

Summing per-kernel maxima (not max of sums) keeps the fact that decode projections are memory-bound while,
say, MLA attention can be compute-bound in the same layer. All functions broadcast over numpy arrays.
"""

from __future__ import annotations

import numpy as np

__all__ = ["roofline_s", "kernel_time_s", "gemm_flops_bytes", "memory_bound_tokens"]


def roofline_s(flops, bytes_, flops_per_s: float, bytes_per_s: float, overhead_s: float = 0.0) -> np.ndarray:
    """max(flops / flops_per_s, bytes / bytes_per_s) + overhead [s]: the roofline, written once.

    ``flops_per_s`` and ``bytes_per_s`` are *achieved* throughputs (efficiency x peak); the step engine
    (:mod:`.engine`) chooses them per kernel class. Broadcasts over ``flops`` and ``bytes_``.
    """
    return np.maximum(np.asarray(flops, dtype=float) / flops_per_s,
                      np.asarray(bytes_, dtype=float) / bytes_per_s) + overhead_s


def kernel_time_s(flops, bytes_, *, peak_flops: float, bw_Bps: float, eta_compute: float, eta_mem: float,
                  overhead_s: float = 0.0) -> np.ndarray:
    """Roofline time of one kernel [s].

    Parameters
    ----------
    flops : array_like
        Floating-point operations [FLOP] (one multiply-accumulate = 2).
    bytes_ : array_like
        Bytes read from and written to HBM [B].
    peak_flops : float
        Dense peak of the datatype [FLOP/s].
    bw_Bps : float
        HBM bandwidth [B/s].
    eta_compute, eta_mem : float
        Achieved fractions of the peaks.
    overhead_s : float
        Fixed per-kernel time (launch gap, tail) [s].
    """
    return roofline_s(flops, bytes_, eta_compute * peak_flops, eta_mem * bw_Bps, overhead_s)


def gemm_flops_bytes(m_tokens, k_in, n_out, *, b_w: float, b_a: float):
    """FLOPs and HBM bytes of an (m x k) @ (k x n) GEMM with weights streamed once.

    F = 2 m k n;  M = k n b_w + m (k + n) b_a   (weights, input and output activations).
    Returns ``(flops, bytes)``; broadcasts over ``m_tokens``, ``k_in`` and ``n_out``.
    """
    m = np.asarray(m_tokens, dtype=float)
    k = np.asarray(k_in, dtype=float)
    n = np.asarray(n_out, dtype=float)
    return 2.0 * m * k * n, k * n * b_w + m * (k + n) * b_a


def memory_bound_tokens(peak_flops: float, bw_Bps: float, b_w: float) -> float:
    """Tokens below which a decode GEMM is memory-bound: m* = (P/BW) b_w / 2 (H100 BF16: ~295)."""
    return peak_flops / bw_Bps * b_w / 2.0
