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

Pipelines (:mod:`.pipeline`): the ranks are every stage's (stage-major), each prefill rank sends only its stage's
layers, so the serial time's busiest NIC carries one stage's share; layer-pipelined, each prefill stage streams
its layers while it computes them, behind the stages before it (:func:`_stages_exposed`). Speculative decoding
adds the draft layer's KV (one more layer on the last stage) and, per request, the draft's hidden state and
top-k from each last-stage sender to each receiver (``state_B``; :mod:`.buffers`).

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
from .buffers import SPEC_STATE_WRITES, ModelTransfer

__all__ = ["PlanTraffic", "plan_traffic", "transfer_time"]

#: RDMA writes of the staged transfer per (prefill rank, decode rank) pair and request
STAGED_WRITES_PER_PAIR = 1


@dataclass(frozen=True)
class PlanTraffic:
    """Traffic of one request between source group ``prefill_dp_group`` and decode group ``decode_dp_group``,
    per page over all layers. Arrays are indexed by the global rank of each side (every stage of a pipeline:
    rank = stage x ranks per stage + rank in the stage; ranks outside the pair carry zeros); counts and bytes are
    per page, times per request. ``state_B``/``state_writes``: the speculative state (the draft's hidden state
    and top-k) each last-stage sender sends each receiver, per request (not per page; zeros without it)."""

    prefill_dp_group: int
    decode_dp_group: int
    matrix_B: np.ndarray            # [prefill world, decode world] bytes per page
    fragments: np.ndarray           # [prefill world, decode world] writes per page-set (fragments x layers)
    unsent_B: np.ndarray            # [decode world] bytes per page a decode replica must copy locally
    fanout: dict[int, int]          # prefill rank of the source group -> decode ranks it serves
    idle_prefill_ranks: tuple[int, ...]
    page_size: int
    layers: int                     # layers whose KV moves (the target's and the draft's)
    state_B: np.ndarray | None = None       # [prefill world, decode world] bytes per request
    state_writes: np.ndarray | None = None  # [prefill world, decode world] writes per request
    prefill_stage_layers: tuple[int, ...] = ()  # layers of each prefill stage (empty: one stage)
    prefill_stage_world: int = 0                # ranks of one prefill stage (0: one stage)

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

    @property
    def has_state(self) -> bool:
        """Whether a speculative state travels with the KV."""
        return self.state_B is not None and bool(self.state_B.any())

    @property
    def state_total_B(self) -> float:
        """Bytes of the speculative state over the network for the request (all pairs) [B]."""
        return float(self.state_B.sum()) if self.state_B is not None else 0.0

    @property
    def prefill_pp(self) -> int:
        return max(1, len(self.prefill_stage_layers))

    def stage_rows(self, stage: int) -> slice:
        """The prefill ranks (rows) of prefill stage ``stage``."""
        w = self.prefill_stage_world or self.matrix_B.shape[0]
        return slice(stage * w, (stage + 1) * w)


def plan_traffic(mt: ModelTransfer, *, decode_dp_group: int = 0, prefill_dp_group: int | None = None
                 ) -> PlanTraffic:
    """Traffic of one request into ``decode_dp_group`` (of every decode stage) from ``prefill_dp_group`` (of
    every prefill stage; default: the group of the same index, or group 0 when there is none under
    ``dp_pairing="any"``)."""
    pl = mt.planner
    pipe = mt.pipeline
    pp_p, pp_d = mt.prefill_pp, mt.decode_pp
    wp, wd = pl.prefill_layout.world_size, pl.decode_layout.world_size
    h = _check.integer("decode_dp_group", decode_dp_group, lo=0, hi=pl.decode_layout.dp_size - 1)
    if prefill_dp_group is None and pl.dp_pairing == "any" and h >= pl.prefill_layout.dp_size:
        prefill_dp_group = 0
    matrix = np.zeros((pp_p * wp, pp_d * wd))
    writes = np.zeros((pp_p * wp, pp_d * wd))
    unsent = np.zeros(pp_d * wd)
    state = np.zeros((pp_p * wp, pp_d * wd))
    state_writes = np.zeros((pp_p * wp, pp_d * wd))
    pos_of = {b.buffer_index: i for i, b in enumerate(pl.decode_buffers)}
    group = None
    last = (pp_p - 1) * wp  # the first rank of the last prefill stage: it sends the speculative state
    spans, d_ranges = pipe.buffer_layers, pipe.decode_ranges
    for b in range(pp_d):
        for r in range(b * wd + h * pl.decode_tp, b * wd + (h + 1) * pl.decode_tp):
            got = np.zeros(len(pl.decode_buffers), dtype=bool)
            plan = pipe.plan_for_decode_rank(r, prefill_dp_group)
            group = plan.target_dp_group
            for lf in plan.fragments:
                f, n = lf.fragment, lf.layers
                got[pos_of[f.buffer_index]] = True
                matrix[f.src_rank, r] += f.bytes_per_page * n
                writes[f.src_rank, r] += n
                if mt.state_B and f.src_rank >= last:
                    state[f.src_rank, r] = mt.state_B
                    state_writes[f.src_rank, r] = SPEC_STATE_WRITES
            lo_b, hi_b = d_ranges[b]
            for i, dbuf in enumerate(pl.decode_buffers):  # a non-representative decode replica: nothing arrives
                n = max(0, min(hi_b, spans[i][1]) - max(lo_b, spans[i][0]))
                if not got[i] and n:
                    unsent[r] += dbuf.bytes_per_logical_unit * (dbuf.logical_size * dbuf.tp_replica_group_size
                                                                // pl.decode_tp) * n
    fan = pipe.fanout(group) if pl.dp_pairing == "any" else \
        {p: n for p, n in pipe.fanout().items() if (p % wp) // pl.prefill_tp == group}
    idle = pipe.idle_prefill_ranks(group)
    stage_layers, stage_world = (pipe.prefill_stage_layers, wp) if pp_p > 1 else ((), 0)
    return PlanTraffic(group, h, matrix, writes, unsent, fan, idle, mt.page_size, pipe.layers,
                       state if mt.state_B else None, state_writes if mt.state_B else None, stage_layers,
                       stage_world)


def _load(traffic: PlanTraffic, pages: np.ndarray, batched_ops: bool, rows: slice | None = None
          ) -> tuple[np.ndarray, np.ndarray]:
    """(bytes through the busiest NIC, writes the busiest rank posts) of one request, broadcast over ``pages``;
    ``rows``: only the traffic of these prefill ranks (one stage's). The speculative state adds its bytes and
    writes once per request, not per page."""
    per = 1.0 if batched_ops else pages
    if rows is None and not traffic.has_state:
        return traffic.busiest_B * pages, traffic.max_writes * per + 0 * pages
    m = traffic.matrix_B if rows is None else traffic.matrix_B[rows]
    w = traffic.fragments if rows is None else traffic.fragments[rows]
    if not traffic.has_state:
        return (float(max(m.sum(axis=1).max(), m.sum(axis=0).max())) * pages,
                float(max(w.sum(axis=1).max(), w.sum(axis=0).max())) * per + 0 * pages)
    sb = traffic.state_B if rows is None else traffic.state_B[rows]
    sw = traffic.state_writes if rows is None else traffic.state_writes[rows]
    P = np.asarray(pages, dtype=float)[..., None]
    Q = np.asarray(per, dtype=float)[..., None] if not batched_ops else 1.0
    busiest = np.maximum((m.sum(axis=1) * P + sb.sum(axis=1)).max(axis=-1),
                         (m.sum(axis=0) * P + sb.sum(axis=0)).max(axis=-1))
    ops = np.maximum((w.sum(axis=1) * Q + sw.sum(axis=1)).max(axis=-1),
                     (w.sum(axis=0) * Q + sw.sum(axis=0)).max(axis=-1))
    return busiest, ops + 0 * pages


def _stages_exposed(traffic: PlanTraffic, link: Link, pages, compute_s, hop_s, op_overhead_us: float,
                    batched_ops: bool) -> np.ndarray:
    """Exposed transfer time of a pipelined prefill whose stages stream their own layers' KV [s].

    Stage s computes its n_s of the N layers in C_s = n_s / N x ``compute_s`` (the whole model's prefill on one
    stage's ranks), from A_s = sum_{j<s} (C_j + hop) (the prompt's hidden states cross each stage boundary), and
    its NICs send its layers as it computes them: its sends end at F_s = A_s + C_s + X_s, X_s the one-stage
    closed form (:func:`~llmexplore.models.step.kv_transfer.pipelined_exposed_s`) of its own traffic. A decode NIC
    that also receives the previous stage's layers serves them first: F_s >= F_{s-1} + (T_s - alpha). The
    prefill ends at E = A_last + C_last (:func:`llmexplore.models.step.pipeline.pp_prefill`'s latency); exposed
    = max_s F_s - E [assumption: layers of one stage compute at one rate; stages of one side use separate NICs]."""
    n = traffic.prefill_stage_layers
    c = np.asarray(compute_s, dtype=float) / sum(n)
    hop = np.zeros_like(c) if hop_s is None else np.asarray(hop_s, dtype=float)
    start = np.zeros(np.broadcast_shapes(c.shape, hop.shape, np.shape(pages)))
    end = prev = prev_cols = None
    for s, ns in enumerate(n):
        rows = traffic.stage_rows(s)
        busy, ops = _load(traffic, pages, batched_ops, rows)
        t = link_time_s(link, busy, ops, op_overhead_us)
        Cs = ns * c
        F = start + Cs + pipelined_exposed_s(t["transfer_s"], Cs, ns, latency_s=t["latency_s"])
        cols = traffic.matrix_B[rows].sum(axis=0) > 0
        if prev is not None and bool((cols & prev_cols).any()):
            F = np.maximum(F, prev + t["transfer_s"] - t["latency_s"])
        end = F if end is None else np.maximum(end, F)
        prev, prev_cols = F, cols
        done = start + Cs
        start = done + hop
    return end - done


def transfer_time(traffic: PlanTraffic, link: Link, prompt_tokens, *, prefill_s=None, hop_s=None,
                  op_overhead_us: float = 1.0, batched_ops: bool = True, hbm_GBps: float | None = None
                  ) -> dict[str, np.ndarray]:
    """Transfer time of one request of ``prompt_tokens`` (array) [s]: ``serial_s`` and its parts
    (``bandwidth_s``, ``ops_s``, ``latency_s``), ``busiest_B`` and ``n_ops``; with ``prefill_s`` (the prefill
    compute time of the same prompts: with prefill stages, the whole model's on one stage's ranks, and ``hop_s``
    the prompt's stage-to-stage send) also ``pipelined_s``, the exposed time when each layer is sent as soon
    as it is computed (:func:`_stages_exposed` with stages); with ``hbm_GBps`` (achievable HBM bandwidth of one
    GPU) also ``staged_s``, the time through a staging buffer (module docstring). ``batched_ops``: one write per
    fragment and layer (Mooncake/NIXL batch the pages); else one per fragment, layer and page."""
    S = _check.real_array("prompt_tokens", prompt_tokens, lo=1, integer=True, unit="tokens")
    op_overhead_us = _check.number("op_overhead_us", op_overhead_us, lo=0, hi=1e6, unit="us")
    pages = np.ceil(S / traffic.page_size)
    busiest, n_ops = _load(traffic, pages, batched_ops)
    t = link_time_s(link, busiest, n_ops, op_overhead_us)
    out = {"serial_s": t["transfer_s"], "bandwidth_s": t["bandwidth_s"], "ops_s": t["ops_s"],
           "latency_s": t["latency_s"], "busiest_B": busiest, "n_ops": n_ops}
    if prefill_s is not None:
        C = _check.real_array("prefill_s", prefill_s, lo=0, unit="s")
        if traffic.prefill_pp == 1:
            out["pipelined_s"] = pipelined_exposed_s(t["transfer_s"], C, traffic.layers, latency_s=t["latency_s"])
        else:
            hop = None if hop_s is None else _check.real_array("hop_s", hop_s, lo=0, unit="s")
            out["pipelined_s"] = _stages_exposed(traffic, link, pages, C, hop, op_overhead_us, batched_ops)
    if hbm_GBps is not None:
        hbm = _check.number("hbm_GBps", hbm_GBps, lo=0.0, lo_open=True, hi=1e6, unit="GB/s") * 1e9
        staged = link_time_s(link, busiest, traffic.max_pairs * STAGED_WRITES_PER_PAIR + 0 * pages, op_overhead_us)
        copies = 2.0 * (traffic.sent_B.max() + traffic.received_B.max()) * pages / hbm
        out["staged_s"] = staged["transfer_s"] + copies
        out["staging_copy_s"] = copies
    return out
