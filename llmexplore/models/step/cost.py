"""Dollars and provisioned power of served tokens (docs/models.md §8.7): the arithmetic every area shares.

A deployment of GPUs renting at p USD per GPU-hour each costs sum(p) per hour; serving r tokens per second it
costs ``usd_per_mtok = usd_per_hour / (3600 r) x 1e6`` per million of them. Provisioned all-in power (GPU, host,
network, facility: :attr:`~llmexplore.specs.GpuPower.all_in_kW`) turns throughput into tokens/s per MW.
"""

from __future__ import annotations

import numpy as np

__all__ = ["usd_per_mtok", "usd_of_gpu_seconds", "tokens_per_s_per_MW"]


def usd_per_mtok(usd_per_hour, tokens_per_s) -> np.ndarray:
    """USD per million tokens of a deployment costing ``usd_per_hour`` that serves ``tokens_per_s`` tokens/s
    (inf where it serves none). Broadcasts."""
    u = np.asarray(usd_per_hour, float)
    r = np.asarray(tokens_per_s, float)
    with np.errstate(divide="ignore"):
        return np.where(r > 0, u / (3600.0 * np.where(r > 0, r, 1.0)) * 1e6, np.inf)


def usd_of_gpu_seconds(gpu_seconds, usd_per_gpu_hour: float) -> np.ndarray:
    """The price of ``gpu_seconds`` GPU-seconds at ``usd_per_gpu_hour`` [USD]. Broadcasts."""
    return np.asarray(gpu_seconds, float) * usd_per_gpu_hour / 3600.0


def tokens_per_s_per_MW(tokens_per_s, all_in_kW) -> np.ndarray:
    """Tokens/s per MW of provisioned all-in power ``all_in_kW`` [kW, summed over the deployment's GPUs]."""
    return np.asarray(tokens_per_s, float) / (np.asarray(all_in_kW, float) / 1e3)
