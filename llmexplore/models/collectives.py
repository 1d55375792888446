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
count), fitted by least squares on relative error (:func:`deepep_ll_fit`).
"""

from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import presets
from ..specs import Link

__all__ = ["Fabric", "alpha_s", "allreduce_s", "allgather_s", "reducescatter_s", "alltoall_s", "sendrecv_s",
           "deepep_normal_GBps", "deepep_normal_s", "DEEPEP_NORMAL_CSV", "DEEPEP_NORMAL_SMS", "DEEPEP_LL_CSV", "DEEPEP_LL_OPS",
           "deepep_ll_table", "fp8_dispatch_bytes", "deepep_ll_bytes_per_selection", "deepep_ll_fit", "deepep_ll_params", "deepep_ll_s"]

#: DeepEP normal-kernel bandwidths (deepseek-ai/DeepEP README at 1a0c8f6, H800 + CX7 400G; data/kernels/README.md)
DEEPEP_NORMAL_CSV = "kernels/deepep_normal_h800.csv"
#: SMs DeepEP's normal (high-throughput) kernels occupy while they run: ``Buffer.num_sms = 20``, the default
#: SGLang keeps without a --deepep-config (deepseek-ai/DeepEP deep_ep/buffers/legacy.py @ dd758ca). The
#: low-latency kernels with a receive hook (two-batch overlap in decode) hold no SMs while data moves (DeepEP
#: README: "hook-based communication-computation overlapping method that does not occupy any SM resource")
DEEPEP_NORMAL_SMS = 20
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
_LL_SEED = 20250729  # fixed: bootstrap draw i is the same in every process


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


@functools.cache
def _deepep_table(data_dir: str) -> dict:
    """{(op, type): (EP ranks, bottleneck GB/s, measured link's line rate GB/s)} of the DeepEP normal kernels."""
    rows: dict = {}
    with open(Path(data_dir) / DEEPEP_NORMAL_CSV, encoding="utf-8") as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            rows.setdefault((r["op"], r["type"]), []).append(
                (float(r["ep"]), float(r["bottleneck_GBps"]), float(r["link_line_GBps"])))
    return {k: (np.array([e for e, _, _ in sorted(v)]), np.array([b for _, b, _ in sorted(v)]), v[0][2])
            for k, v in rows.items()}


def deepep_normal_GBps(op: str, p: int, fabric: Fabric) -> float:
    """Bottleneck bandwidth of a DeepEP normal-mode ``op`` ("dispatch" or "combine") over p EP ranks [GB/s].

    DeepEP's published figure (H800, data/kernels/deepep_normal_h800.csv): inside one node the NVLink bandwidth
    (153 GB/s dispatch, 158 combine at EP8), across nodes the RDMA bandwidth at EP 16/32/64 (43/58/51 dispatch,
    43/57/50 combine), interpolated in log2(p) and held at the ends; scaled by the deployment's link line rate
    over the measured one (H800 NVLink 200 GB/s, CX7 400G 50 GB/s per direction) [assumption: the kernels keep
    their fraction of the line rate on another link]."""
    G, N = fabric.split(p)
    kind = "intranode" if N == 1 else "internode"
    ep, bw, line = _deepep_table(str(presets.DATA_DIR))[(op, kind)]
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
def deepep_ll_table() -> dict:
    """The low-latency kernel rows: {column: array} of ``data/kernels/aic_deepep_ll.csv`` (re-read when the file
    changes) plus ``dispatch_bytes`` / ``combine_bytes``, the bytes the benchmark counted (GB/s x us)."""
    return _ll_read(*presets.data_file(DEEPEP_LL_CSV))


@functools.cache
def _ll_read(path: str, stamp: float) -> dict:
    with open(path, encoding="utf-8") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    out = {c: np.array([r[c] for r in rows]) for c in ("gpu", "version", "device")}
    for c in ("nodes", "ep", "hidden", "topk", "experts", "tokens", "dispatch_us", "dispatch_GBps", "combine_us",
              "combine_GBps"):
        out[c] = np.array([float(r[c]) for r in rows])
    for op in DEEPEP_LL_OPS:
        out[f"{op}_bytes"] = out[f"{op}_GBps"] * out[f"{op}_us"] * 1e3
    return out


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


def _ll_lsq(t_us: np.ndarray, by: np.ndarray) -> tuple[float, float]:
    """(a [s], B [B/s]) minimising sum(((a + bytes / B) / t - 1)^2)."""
    A = np.stack([1.0 / t_us, by / t_us], axis=1)
    a_us, inv = np.linalg.lstsq(A, np.ones_like(t_us), rcond=None)[0]
    return float(a_us) * 1e-6, 1e6 / float(inv)


def deepep_ll_fit(gpu: str, ep: int, op: str, draw: int = 0) -> dict | None:
    """The fitted low-latency kernel curve t = a + bytes / B of one measured (GPU, EP size, op), or None.

    Fitted on the fine-grained MoE rows (>= :data:`DEEPEP_LL_MIN_EXPERTS` experts). Returns ``a_s``, ``B_Bps``,
    ``rows``, ``median_err_pct`` and ``p90_err_pct`` (|fit / measured - 1| over the rows fitted). ``draw`` i >= 1:
    the fit to the i-th bootstrap resample of the rows (the kernel draws of models/uncertainty.py)."""
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


def deepep_ll_params(gpu: str, op: str, p: int, fabric: Fabric, draw: int = 0) -> tuple[float, float] | None:
    """(a [s], B [B/s]) of DeepEP's low-latency ``op`` over p EP ranks on ``gpu``, or None where no GPU of the
    table is a model for it (then callers price an all-to-all from the links).

    Inside one scale-up domain: the GPU's own single-node fit (measured at 8 ranks, 4 on GB200; the same a and B
    for any p there, an assumption), B scaled by the scale-up link's line rate over the GPU's own link's (1 on
    the GPU's own link; a what-if link keeps the kernels' fraction of the line rate). Across nodes: the
    multi-node fits, measured on H100 at EP 16 / 32 / 64 with a 400 Gb/s NIC per GPU, for every GPU that has a
    single-node table (the low-latency kernels send over RDMA, so the NIC sets B), a and 1/B interpolated in
    log2(p) and held at the ends, B scaled by the scale-out link's line rate over 50 GB/s. Cached per file
    version: a decode step asks for it on every call."""
    if p <= 1:
        return None
    _, N = fabric.split(p)
    line = fabric.scale_up.line_rate_GBps if N == 1 else fabric.scale_out.line_rate_GBps
    return _ll_params(*presets.data_file(DEEPEP_LL_CSV), str(gpu), str(op), int(p), N > 1, float(line), int(draw))


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
    src = gpu if _ll_eps(path, stamp, gpu, True) else "h100-sxm"
    eps = _ll_eps(path, stamp, src, True)
    fits = [_ll_fit(path, stamp, src, e, op, draw) for e in eps]
    if not eps or any(f is None for f in fits):
        return None
    x = np.log2(np.asarray(eps, dtype=float))
    a = float(np.interp(np.log2(p), x, [f["a_s"] for f in fits]))
    inv_B = float(np.interp(np.log2(p), x, [1.0 / f["B_Bps"] for f in fits]))
    return a, line_GBps / DEEPEP_LL_MEASURED_NIC_GBps / inv_B


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
