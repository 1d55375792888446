"""Alpha-beta cost of NCCL-style collectives (docs/models.md §1.2).

Bus-bandwidth conventions of NVIDIA/nccl-tests doc/PERFORMANCE.md, with p ranks, B_bus the achievable bus
bandwidth per rank and direction, and alpha(p) = a0 + a1 (p - 1):

==============  ===================================  ======================================
op              n is                                 time
==============  ===================================  ======================================
AllReduce       full buffer                          alpha + 2 (p-1)/p n / B_bus
ReduceScatter   full input per rank                  alpha + (p-1)/p n / B_bus
AllGather       full output per rank                 alpha + (p-1)/p n / B_bus
AllToAll        per-rank send buffer (incl. self)    alpha + (p-1)/p n / B_bus
Send/Recv       message                              alpha + n / B_link
==============  ===================================  ======================================

When a group spans nodes (p > GPUs per scale-up domain, one NIC per GPU, rail-optimised) the collectives
are hierarchical: AllReduce = ReduceScatter(intra) + AllReduce(inter, n/G) + AllGather(intra); AllGather and
ReduceScatter run an inter-node leg on n/G and an intra-node leg on n; AllToAll pipelines the two legs
(DeepEP-style forwarding) and costs the slower one. A single rank communicates nothing (time 0).
Every function broadcasts over ``n_bytes``; ``p`` is an integer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..specs import Link

__all__ = ["Fabric", "alpha_s", "allreduce_s", "allgather_s", "reducescatter_s", "alltoall_s", "sendrecv_s"]


@dataclass(frozen=True)
class Fabric:
    """The links a group of ranks communicates over."""

    scale_up: Link
    scale_out: Link | None = None
    gpus_per_node: int = 8
    #: fitted intra-node collectives (docs/models.md §1.2): {(op, ranks): (alpha_s, bus_Bps[, alpha2_s, bus2_Bps])}
    #: (a second, bandwidth path when the engine switches algorithms by size) with op one of
    #: all_reduce, all_gather, reduce_scatter, alltoall; a flat intra-node collective of a listed size is
    #: alpha + factor (p-1)/p n / bus_Bps, every other one uses the links' alpha(p) and achievable bandwidth
    fitted: tuple = ()

    def fitted_curve(self, op: str, p: int) -> tuple[float, float] | None:
        for (o, q), ab in self.fitted:
            if o == op and q == p:
                return ab
        return None

    def split(self, p: int) -> tuple[int, int]:
        """(G ranks per node, N nodes) for a group of p ranks packed densely into scale-up domains."""
        p = int(p)
        if p <= self.gpus_per_node or self.scale_out is None:
            return p, 1
        if p % self.gpus_per_node:
            from ..errors import SpecError
            raise SpecError(f"ranks ({p}) spanning nodes must be a multiple of the scale-up size "
                            f"({self.gpus_per_node})")
        return self.gpus_per_node, p // self.gpus_per_node


def alpha_s(p: int, link: Link) -> float:
    """Latency term alpha(p) [s]; 0 for a single rank."""
    if p <= 1:
        return 0.0
    return (link.latency_us + link.latency_per_rank_us * (p - 1)) * 1e-6


def _flat(p: int, link: Link, n, factor: float, fitted: tuple[float, float] | None = None) -> np.ndarray:
    n = np.asarray(n, dtype=float)
    if p <= 1:
        return np.zeros_like(n)
    if fitted is not None:
        alpha, bus, *second = fitted
        t = alpha + factor * (p - 1) / p * n / bus
        if second and second[1] > 0:  # a second algorithm (bandwidth path): the engine takes the faster
            t = np.minimum(t, second[0] + factor * (p - 1) / p * n / second[1])
        return t
    return alpha_s(p, link) + factor * (p - 1) / p * n / (link.achievable_GBps * 1e9)


def allreduce_s(n_bytes, p: int, fabric: Fabric) -> np.ndarray:
    """AllReduce of an n-byte buffer over p ranks [s]."""
    G, N = fabric.split(p)
    if N == 1:
        return _flat(G, fabric.scale_up, n_bytes, 2.0, fabric.fitted_curve("all_reduce", G))
    n = np.asarray(n_bytes, dtype=float)
    return (_flat(G, fabric.scale_up, n, 1.0) + _flat(N, fabric.scale_out, n / G, 2.0)
            + _flat(G, fabric.scale_up, n, 1.0))


def allgather_s(n_out_bytes, p: int, fabric: Fabric) -> np.ndarray:
    """AllGather producing n bytes on every rank [s]."""
    return _gather_like(n_out_bytes, p, fabric, "all_gather")


def _gather_like(n, p: int, fabric: Fabric, op: str) -> np.ndarray:
    G, N = fabric.split(p)
    if N == 1:
        return _flat(G, fabric.scale_up, n, 1.0, fabric.fitted_curve(op, G))
    n = np.asarray(n, dtype=float)
    return _flat(N, fabric.scale_out, n / G, 1.0) + _flat(G, fabric.scale_up, n, 1.0)


def reducescatter_s(n_in_bytes, p: int, fabric: Fabric) -> np.ndarray:
    """ReduceScatter of an n-byte input per rank [s] (same cost structure as AllGather)."""
    return _gather_like(n_in_bytes, p, fabric, "reduce_scatter")


def alltoall_s(n_send_bytes, p: int, fabric: Fabric) -> np.ndarray:
    """AllToAll with an n-byte send buffer per rank (all chunks incl. self, uniform) [s]."""
    G, N = fabric.split(p)
    n = np.asarray(n_send_bytes, dtype=float)
    if N == 1:
        return _flat(G, fabric.scale_up, n, 1.0, fabric.fitted_curve("alltoall", G))
    intra = (G - 1) / (G * N) * n / (fabric.scale_up.achievable_GBps * 1e9)
    inter = (N - 1) / N * n / (fabric.scale_out.achievable_GBps * 1e9)
    return alpha_s(N, fabric.scale_out) + alpha_s(G, fabric.scale_up) + np.maximum(intra, inter)


def sendrecv_s(n_bytes, link: Link) -> np.ndarray:
    """Point-to-point transfer of n bytes over one link [s]."""
    n = np.asarray(n_bytes, dtype=float)
    return link.latency_us * 1e-6 + n / (link.achievable_GBps * 1e9)
