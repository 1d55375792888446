"""What a transfer plan costs: bytes per rank, fragments, the busiest link, and time over an interconnect.

Traffic of one request. A request's KV goes from one prefill DP group to one decode DP group; every group
pair has the same plan up to a rank offset, so the cost of one request is read off the pair (source group
``g``, decode group ``h``). Per page and over all layers (``layer_repeat``):

* ``matrix_B[p, r]``: bytes prefill rank p sends decode rank r = sum of its fragments' ``bytes_per_page``;
* sent by p = row sum, received by r = column sum; fragments per rank likewise (each fragment is one
  RDMA write per layer, or per layer and page when writes are not batched);
* decode ranks that hold a replica of a head (decode TP > KV heads) but are not its representative receive
  nothing under version 1 (``unsent_B``): the decode instance must copy it locally.

Time of a request of S tokens (pages = ceil(S / page_size)) over ``link`` with one NIC per GPU
(rail-optimised nodes): the busiest NIC carries max(max_p sent_p, max_r received_r) * pages bytes, and the
rank posting the most writes pays their per-operation overhead (:func:`~llmexplore.models.step.kv_transfer.link_time_s`):

    t_serial = alpha + n_ops * o_op + busiest_B / (eta B_link)

Layer-pipelined, each layer's KV leaves as soon as the prefill computed it
(:func:`~llmexplore.models.step.kv_transfer.pipelined_exposed_s`, closed form of the per-layer recurrence).

Staged (``staged_s``): each prefill rank gathers what it sends a decode rank into one contiguous staging buffer,
sends it as one bulk write per (prefill rank, decode rank) pair, and the decode rank scatters it into its pages
(SGLang's staging buffer, sglang PR #19890 and #35036: "~30,000 small RDMA requests per request" reduced
~1000x; an engine-level test collapsed from 4,792 MB/s with 1 entry to 15.5 MB/s with 4,096). Gather and
scatter each read and write the bytes once in HBM, serially with the network transfer (no chunk overlap, an
upper bound):

    t_staged = alpha + max_rank(pairs) * o_op + 2 max_p sent_p / BW_hbm + busiest_B / (eta B) + 2 max_r recv_r / BW_hbm
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _check
from ..models.step.kv_transfer import link_time_s, pipelined_exposed_s
from ..specs import Link
from .buffers import ModelTransfer

__all__ = ["PlanTraffic", "plan_traffic", "transfer_time"]

#: RDMA writes of the staged transfer per (prefill rank, decode rank) pair and request
STAGED_WRITES_PER_PAIR = 1


@dataclass(frozen=True)
class PlanTraffic:
    """Traffic of one request between source group ``prefill_dp_group`` and decode group ``decode_dp_group``,
    per page over all layers. Arrays are indexed by the global rank of each side (ranks outside the pair
    carry zeros); counts and bytes are per page, times per request."""

    prefill_dp_group: int
    decode_dp_group: int
    matrix_B: np.ndarray            # [prefill world, decode world] bytes per page
    fragments: np.ndarray           # [prefill world, decode world] writes per page-set (fragments x layers)
    unsent_B: np.ndarray            # [decode world] bytes per page a decode replica must copy locally
    fanout: dict[int, int]          # prefill rank of the source group -> decode ranks it serves
    idle_prefill_ranks: tuple[int, ...]
    page_size: int
    layers: int

    @property
    def sent_B(self) -> np.ndarray:
        return self.matrix_B.sum(axis=1)

    @property
    def received_B(self) -> np.ndarray:
        return self.matrix_B.sum(axis=0)

    @property
    def busiest_B(self) -> float:
        """Bytes per page through the busiest NIC (one per rank)."""
        return float(max(self.sent_B.max(), self.received_B.max()))

    @property
    def busiest_rank(self) -> str:
        """Which rank's NIC is the busiest: ``"prefill 3"`` or ``"decode 0"`` (sender on a tie)."""
        s, r = self.sent_B, self.received_B
        return f"prefill {int(s.argmax())}" if s.max() >= r.max() else f"decode {int(r.argmax())}"

    @property
    def max_writes(self) -> float:
        """Writes (per layer set) posted by the busiest rank: the most fragments any one rank sends or receives."""
        return float(max(self.fragments.sum(axis=1).max(), self.fragments.sum(axis=0).max()))

    @property
    def max_pairs(self) -> int:
        """Most (prefill rank, decode rank) pairs any one rank takes part in: the bulk writes of a staged
        transfer on its busiest rank."""
        linked = self.matrix_B > 0
        return int(max(linked.sum(axis=1).max(), linked.sum(axis=0).max()))

    @property
    def total_B(self) -> float:
        """Bytes per page over the network for the request (all ranks)."""
        return float(self.matrix_B.sum())


def plan_traffic(mt: ModelTransfer, *, decode_dp_group: int = 0, prefill_dp_group: int | None = None
                 ) -> PlanTraffic:
    """Traffic of one request into ``decode_dp_group`` from ``prefill_dp_group`` (default: the group of the
    same index, or group 0 when there is none under ``dp_pairing="any"``)."""
    pl = mt.planner
    world_p, world_d = pl.prefill_layout.world_size, pl.decode_layout.world_size
    h = _check.integer("decode_dp_group", decode_dp_group, lo=0, hi=pl.decode_layout.dp_size - 1)
    if prefill_dp_group is None and pl.dp_pairing == "any" and h >= pl.prefill_layout.dp_size:
        prefill_dp_group = 0
    matrix = np.zeros((world_p, world_d))
    writes = np.zeros((world_p, world_d))
    unsent = np.zeros(world_d)
    pos_of = {b.buffer_index: i for i, b in enumerate(pl.decode_buffers)}
    group = None
    for r in range(h * pl.decode_tp, (h + 1) * pl.decode_tp):
        plan = pl.explicit_plan(r, prefill_dp_group)
        group = plan.target_dp_group
        got = np.zeros(len(pl.decode_buffers), dtype=bool)
        for f in plan.fragments:
            i = pos_of[f.buffer_index]
            got[i] = True
            matrix[f.src_rank, r] += f.bytes_per_page * mt.layer_repeat[i]
            writes[f.src_rank, r] += mt.layer_repeat[i]
        for i, b in enumerate(pl.decode_buffers):  # a non-representative decode replica: nothing arrives
            if not got[i]:
                unsent[r] += b.bytes_per_logical_unit * (b.logical_size * b.tp_replica_group_size
                                                         // pl.decode_tp) * mt.layer_repeat[i]
    return PlanTraffic(group, h, matrix, writes, unsent, pl.fanout(group) if pl.dp_pairing == "any" else
                       {p: n for p, n in pl.fanout().items() if p // pl.prefill_tp == group},
                       pl.idle_prefill_ranks(group), mt.page_size, mt.model.layers)


def transfer_time(traffic: PlanTraffic, link: Link, prompt_tokens, *, prefill_s=None, op_overhead_us: float = 1.0,
                  batched_ops: bool = True, hbm_GBps: float | None = None) -> dict[str, np.ndarray]:
    """Transfer time of one request of ``prompt_tokens`` (array) [s]: ``serial_s`` and its parts
    (``bandwidth_s``, ``ops_s``, ``latency_s``), ``busiest_B`` and ``n_ops``; with ``prefill_s`` (the prefill
    compute time of the same prompts) also ``pipelined_s``, the exposed time when each layer is sent as soon
    as it is computed; with ``hbm_GBps`` (achievable HBM bandwidth of one GPU) also ``staged_s``, the time
    through a staging buffer (module docstring). ``batched_ops``: one write per fragment and layer
    (Mooncake/NIXL batch the pages); else one per fragment, layer and page."""
    S = _check.real_array("prompt_tokens", prompt_tokens, lo=1, integer=True, unit="tokens")
    op_overhead_us = _check.number("op_overhead_us", op_overhead_us, lo=0, hi=1e6, unit="us")
    pages = np.ceil(S / traffic.page_size)
    busiest = traffic.busiest_B * pages
    n_ops = traffic.max_writes * (1.0 if batched_ops else pages) + 0 * pages
    t = link_time_s(link, busiest, n_ops, op_overhead_us)
    out = {"serial_s": t["transfer_s"], "bandwidth_s": t["bandwidth_s"], "ops_s": t["ops_s"],
           "latency_s": t["latency_s"], "busiest_B": busiest, "n_ops": n_ops}
    if prefill_s is not None:
        C = _check.real_array("prefill_s", prefill_s, lo=0, unit="s")
        out["pipelined_s"] = pipelined_exposed_s(t["transfer_s"], C, traffic.layers, latency_s=t["latency_s"])
    if hbm_GBps is not None:
        hbm = _check.number("hbm_GBps", hbm_GBps, lo=0.0, lo_open=True, hi=1e6, unit="GB/s") * 1e9
        staged = link_time_s(link, busiest, traffic.max_pairs * STAGED_WRITES_PER_PAIR + 0 * pages, op_overhead_us)
        copies = 2.0 * (traffic.sent_B.max() + traffic.received_B.max()) * pages / hbm
        out["staged_s"] = staged["transfer_s"] + copies
        out["staging_copy_s"] = copies
    return out
