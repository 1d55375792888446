"""KV-cache bytes of a request and the time to move them from a prefill to a decode instance (docs/models.md §4.1-4.2).

Bytes. The logical KV of a prompt of S tokens is ceil_pg(S) * kv (kv = KV bytes per token, all layers).
Physical bytes are larger when the decode side replicates: GQA with decode TP > h_kv holds every KV head on
T_d / h_kv ranks; MLA holds the whole latent on every decode TP rank (factor T_d), unless the decode instance
receives one copy and forwards it over its own NVLink (``forward_replicas``).

Senders. Each GPU has its own NIC (rail-optimised nodes), so an instance ships its shards in parallel: GQA
prefill ranks send their own heads (only one representative per replica group when T_p > h_kv); for MLA every
prefill rank holds the latent and the token range is split over the T_p ranks. Receivers: each decode rank
receives its own shard.

Time. t = alpha + n_ops * o_op + max(max_r in_r, max_p out_p) / (eta B_link), with n_ops the RDMA writes a
decode rank receives (one per page, layer and K/V tensor unless the engine batches them per layer).
Layer-wise pipelining streams layer l as soon as the prefill finishes it: with compute C_l and transfer
t_x(l) on a serial link, X_l = max(X_{l-1}, C_l) + t_x(l) and the exposed time is X_L - C_L; for uniform
layers exposed = t_x if t_x <= t_c else t_x + (L-1)(t_x - t_c) (Splitwise arXiv 2311.18677; Mooncake).
All functions broadcast over the prompt length.
"""

from __future__ import annotations

import numpy as np

from ...errors import SpecError
from ...specs import Link, ModelSpec

__all__ = ["kv_request_bytes", "transfer_time", "link_time_s", "pipelined_exposed_s"]


def _check_tp(name: str, tp: int, model: ModelSpec) -> int:
    if isinstance(tp, bool) or int(tp) != tp or tp < 1:
        raise SpecError(f"{name} must be an integer >= 1, got {tp!r}")
    tp = int(tp)
    if not model.is_mla and model.kv_heads % tp and tp % model.kv_heads:
        raise SpecError(f"{name} ({tp}) must divide or be a multiple of the KV heads of {model.name} "
                        f"({model.kv_heads})")
    return tp


def kv_request_bytes(model: ModelSpec, prompt_tokens, *, kv_dtype: str = "bf16", page_tokens: int = 16,
                     prefill_tp: int = 1, decode_tp: int = 1, forward_replicas: bool = False) -> dict:
    """KV bytes one request moves from prefill to decode [B].

    Returns ``logical_B`` (one copy), ``physical_B`` (over the network, all ranks), ``replication`` (physical
    / logical), ``senders`` and ``receivers`` (ranks that send / receive in parallel), ``out_per_rank_B``
    (worst prefill rank) and ``in_per_rank_B`` (worst decode rank).
    """
    S = np.asarray(prompt_tokens, dtype=float)
    if np.any(S < 1) or not np.all(np.isfinite(S)):
        raise SpecError(f"prompt_tokens must be >= 1, got {float(np.min(S)):g}")
    tp_p = _check_tp("prefill_tp", prefill_tp, model)
    tp_d = _check_tp("decode_tp", decode_tp, model)
    if int(page_tokens) < 1:
        raise SpecError(f"page_tokens must be >= 1, got {page_tokens!r}")
    kv_layer = model.kv_bytes_per_token_per_layer(kv_dtype)
    Ls = model.sliding_layers  # a sliding-window layer holds (and sends) at most its window
    logical = ((model.layers - Ls) * np.ceil(S / page_tokens)
               + (Ls * np.ceil(np.minimum(S, model.sliding_window) / page_tokens) if Ls else 0.0)) * page_tokens * kv_layer
    if model.is_mla:
        rep = 1.0 if forward_replicas else float(tp_d)
        senders = tp_p
        receivers = 1 if forward_replicas else tp_d
    else:
        h = model.kv_heads
        rep = 1.0 if (forward_replicas or tp_d <= h) else tp_d / h
        senders = min(tp_p, h)
        receivers = min(tp_d, h) if forward_replicas else tp_d
    physical = logical * rep
    return {"logical_B": logical, "physical_B": physical, "replication": rep, "senders": senders,
            "receivers": receivers, "out_per_rank_B": physical / senders,
            "in_per_rank_B": physical / receivers}


def transfer_time(model: ModelSpec, link: Link, prompt_tokens, *, kv_dtype: str = "bf16",
                  page_tokens: int = 16, prefill_tp: int = 1, decode_tp: int = 1, op_overhead_us: float = 1.0,
                  batched_ops: bool = True, forward_replicas: bool = False, nics: int | None = None) -> dict:
    """Serial (whole-request) KV transfer time [s] and its parts.

    ``op_overhead_us`` is the fixed cost of one RDMA write / memcpy descriptor [assumption: 1-2 us unbatched,
    docs/models.md §1.3]; with ``batched_ops`` (the default: Mooncake/NIXL batch transfers) one operation per layer
    and tensor, else one per page, layer and tensor (vLLM's 16-token pages make that 40,960 writes for a
    4096-token Llama-3-70B prompt). ``nics``: NICs each side's ranks share (default: one per rank, as on
    rail-optimised RDMA nodes; a TCP node often has one).
    Returns ``transfer_s``, ``bandwidth_s`` (bytes / achievable bandwidth of the busiest rank),
    ``ops_s``, ``latency_s``, ``n_ops`` (per decode rank) and the bytes of :func:`kv_request_bytes`.
    """
    if op_overhead_us < 0:
        raise SpecError(f"op_overhead_us must be >= 0, got {op_overhead_us!r}")
    kv = kv_request_bytes(model, prompt_tokens, kv_dtype=kv_dtype, page_tokens=page_tokens, prefill_tp=prefill_tp,
                          decode_tp=decode_tp, forward_replicas=forward_replicas)
    S = np.asarray(prompt_tokens, dtype=float)
    tensors = 1 if model.is_mla else 2  # latent vs separate K and V
    sources = kv["senders"] / max(1, min(kv["senders"], kv["receivers"]))  # prefill ranks feeding one decode rank
    pages = np.ceil(S / page_tokens)
    per_layer_ops = tensors * (1.0 if batched_ops else pages) * max(1.0, sources)
    n_ops = model.layers * per_layer_ops
    if nics is not None and (int(nics) != nics or nics < 1):
        raise SpecError(f"nics must be an integer >= 1, got {nics!r}")
    share_out = 1.0 if nics is None else max(1.0, kv["senders"] / nics)  # ranks sharing one NIC
    share_in = 1.0 if nics is None else max(1.0, kv["receivers"] / nics)
    busiest = np.maximum(kv["in_per_rank_B"] * share_in, kv["out_per_rank_B"] * share_out)
    return {**kv, **link_time_s(link, busiest, n_ops, op_overhead_us), "n_ops": n_ops}


def link_time_s(link: Link, busiest_B, n_ops, op_overhead_us: float = 1.0) -> dict:
    """Time to move one request's KV over ``link`` [s]: alpha + n_ops * o_op + busiest_B / (eta B).

    ``busiest_B``: bytes through the busiest NIC (the most any one rank sends or receives, with one NIC per
    rank); ``n_ops``: the operations (RDMA writes) that rank posts. Returns ``transfer_s``, ``bandwidth_s``,
    ``ops_s`` and ``latency_s``, broadcast over the array arguments. Shared by :func:`transfer_time` and the
    plan cost of :mod:`llmexplore.transfer.cost`.
    """
    bandwidth = np.asarray(busiest_B, dtype=float) / (link.achievable_GBps * 1e9)
    ops = np.asarray(n_ops, dtype=float) * op_overhead_us * 1e-6
    latency = link.latency_us * 1e-6
    total = latency + ops + bandwidth
    return {"transfer_s": total, "bandwidth_s": bandwidth + 0 * total, "ops_s": ops + 0 * total,
            "latency_s": np.full(np.shape(total), latency)}


def pipelined_exposed_s(transfer_s, compute_s, layers: int, *, latency_s=0.0) -> np.ndarray:
    """Exposed transfer time when each layer's KV is sent as soon as the prefill computed it [s].

    Uniform layers: per-layer transfer t_x = (transfer_s - latency_s) / L and compute t_c = compute_s / L;
    exposed = latency + (t_x if t_x <= t_c else t_x + (L - 1)(t_x - t_c)), the closed form of the
    recurrence X_l = max(X_{l-1}, C_l) + t_x (docs/models.md §4.2). Without pipelining the exposed time is
    ``transfer_s`` itself.
    """
    T = np.asarray(transfer_s, dtype=float)
    C = np.asarray(compute_s, dtype=float)
    lat = np.asarray(latency_s, dtype=float)
    L = int(layers)
    tx = (T - lat) / L
    tc = C / L
    return lat + np.where(tx <= tc, tx, tx + (L - 1) * (tx - tc))
