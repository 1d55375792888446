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

MoE dispatch and combine of DeepEP's *normal* kernels (:func:`deepep_normal_s`, docs/models.md §1.2) are priced
from DeepEP's published kernel bandwidths (``data/kernels/deepep_normal_h800.csv``), in the units the benchmark
counts them: across nodes a token crosses RDMA once per distinct destination *node* (then NVLink forwards it to
the ranks there), inside one node once per distinct destination *rank*.

DeepEP's *low-latency* kernels (decode; :func:`deepep_ll_s`) are priced from measured kernel times
(``data/kernels/aic_deepep_ll.csv``: aiconfigurator's SGLang WideEP tables, 1-1,024 tokens per rank): per GPU,
per EP size and per op, t = a + bytes / B with bytes = tokens x top-k x bytes per selection (the benchmark's own
count), fitted by least squares on relative error (:func:`llmexplore.measured.deepep_ll_fit`). The tables are
read and fitted in :mod:`llmexplore.measured`; nothing here reads a file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ... import measured
from ...specs import Link

__all__ = ["Fabric", "alpha_s", "allreduce_s", "allgather_s", "reducescatter_s", "alltoall_s", "sendrecv_s",
           "deepep_normal_GBps", "deepep_normal_s", "DEEPEP_NORMAL_SMS", "fp8_dispatch_bytes",
           "deepep_ll_bytes_per_selection", "deepep_ll_params", "deepep_ll_s"]

#: SMs DeepEP's normal (high-throughput) kernels occupy while they run: ``Buffer.num_sms = 20``, the default
#: SGLang keeps without a --deepep-config (deepseek-ai/DeepEP deep_ep/buffers/legacy.py @ dd758ca). The
#: low-latency kernels with a receive hook (two-batch overlap in decode) hold no SMs while data moves (DeepEP
#: README: "hook-based communication-computation overlapping method that does not occupy any SM resource")
DEEPEP_NORMAL_SMS = 20

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
            from ...errors import SpecError
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


def deepep_normal_GBps(op: str, p: int, fabric: Fabric) -> float:
    """Bottleneck bandwidth of a DeepEP normal-mode ``op`` ("dispatch" or "combine") over p EP ranks [GB/s].

    DeepEP's published figure (H800, data/kernels/deepep_normal_h800.csv): inside one node the NVLink bandwidth
    (153 GB/s dispatch, 158 combine at EP8), across nodes the RDMA bandwidth at EP 16/32/64 (43/58/51 dispatch,
    43/57/50 combine), interpolated in log2(p) and held at the ends; scaled by the deployment's link line rate
    over the measured one (H800 NVLink 200 GB/s, CX7 400G 50 GB/s per direction) [assumption: the kernels keep
    their fraction of the line rate on another link]."""
    G, N = fabric.split(p)
    kind = "intranode" if N == 1 else "internode"
    ep, bw, line = measured.deepep_normal_table()[(op, kind)]
    link = fabric.scale_up if N == 1 else fabric.scale_out
    return float(np.interp(np.log2(p), np.log2(ep), bw)) * link.line_rate_GBps / line


def deepep_normal_s(tokens, payload_B: float, copies, p: int, fabric: Fabric, op: str) -> np.ndarray:
    """DeepEP normal-mode ``op`` of ``tokens`` tokens per rank over p EP ranks [s].

    t = alpha + tokens x copies x payload / B_op(p): ``copies`` is the expected number of distinct destination
    nodes of a token (its own included: DeepEP's benchmark counts RDMA bytes so) when p spans nodes, of distinct
    destination ranks inside one node; ``payload_B`` the bytes per copy (FP8 dispatch H + 4 H/128, BF16 combine
    2H); B_op from :func:`deepep_normal_GBps`; alpha as :func:`alltoall_s`. Broadcasts over ``tokens`` and
    ``copies``."""
    n = np.asarray(tokens, dtype=float) * np.asarray(copies, dtype=float) * payload_B
    if p <= 1:
        return np.zeros_like(n)
    G, N = fabric.split(p)
    alpha = alpha_s(G, fabric.scale_up) + (alpha_s(N, fabric.scale_out) if N > 1 else 0.0)
    return alpha + n / (deepep_normal_GBps(op, p, fabric) * 1e9)


# ---- DeepEP low-latency kernels ------------------------------------------------------------------------------
def fp8_dispatch_bytes(hidden: int, *, scale_block: int = 128) -> int:
    """FP8 dispatch payload of one token copy [B]: H bytes + one FP32 scale per 1x128 block, H + 4 ceil(H/128)
    (DeepSeek-V3, H = 7168: 7,392 B; DeepEP's FP8 dispatch)."""
    return int(hidden) + 4 * math.ceil(int(hidden) / scale_block)


def deepep_ll_bytes_per_selection(hidden: int, op: str, *, fp8: bool = True) -> float:
    """Bytes one routed copy of a token carries in DeepEP's low-latency kernels, as its benchmark counts them:
    FP8 dispatch H + 4 H/128 (1x128 scales) + 16 (tests/test_low_latency.py ``num_fp8_bytes``), BF16 dispatch
    or combine 2H."""
    H = int(hidden)
    if op == "dispatch" and fp8:
        return float(fp8_dispatch_bytes(H) + 16)
    return 2.0 * H


def deepep_ll_params(gpu: str, op: str, p: int, fabric: Fabric, draw: int = 0) -> tuple[float, float] | None:
    """(a [s], B [B/s]) of DeepEP's low-latency ``op`` over p EP ranks on ``gpu``, or None where no GPU of the
    table is a model for it (then callers price an all-to-all from the links).

    Inside one scale-up domain: the GPU's own single-node fit (measured at 8 ranks, 4 on GB200; the same a and B
    for any p there, an assumption), B scaled by the scale-up link's line rate over the GPU's own link's (1 on
    the GPU's own link; a what-if link keeps the kernels' fraction of the line rate). Across nodes: the
    multi-node fits, measured on H100 at EP 16 / 32 / 64 with a 400 Gb/s NIC per GPU, for every GPU that has a
    single-node table (the low-latency kernels send over RDMA, so the NIC sets B), a and 1/B interpolated in
    log2(p) and held at the ends, B scaled by the scale-out link's line rate over 50 GB/s
    (:func:`llmexplore.measured.deepep_ll_params`, cached per file version: a decode step asks for it on every
    call)."""
    if p <= 1:
        return None
    _, N = fabric.split(p)
    line = fabric.scale_up.line_rate_GBps if N == 1 else fabric.scale_out.line_rate_GBps
    return measured.deepep_ll_params(gpu, op, p, N > 1, line, draw)




def deepep_ll_s(op: str, selections, hidden: int, p: int, gpu: str, fabric: Fabric, *, fp8: bool = True,
                draw: int = 0) -> np.ndarray | None:
    """DeepEP low-latency ``op`` of one MoE layer on one rank [s]: a + selections x bytes per selection / B, with
    ``selections`` the routed copies the rank sends (tokens x top-k; broadcasts), or None where
    :func:`deepep_ll_params` has no curve."""
    ab = deepep_ll_params(gpu, op, p, fabric, draw)
    if ab is None:
        return None
    a, B = ab
    return a + np.asarray(selections, dtype=float) * deepep_ll_bytes_per_selection(hidden, op, fp8=fp8) / B
