"""The planner: which prefill rank sends which byte ranges of which buffer to each decode rank.

Version-1 rules (TokenSpeed ``PDTransferPlanner``, commit 215acaf1), kept exactly under ``dp_pairing="index"``:

* Buffers pair up by position: same count; each pair has the same index, kind, axis, logical size and bytes
  per logical unit (page size and item stride may differ).
* A non-replicated buffer on a side with TP size t and replica group g: g divides t; with effective TP
  e = t / g, e divides the logical size L; the item holds its shard (item_stride // unit >= L / e).
* Decode rank r is TP rank ``r % tp_D`` of DP group ``r // tp_D`` and receives from the prefill DP group with
  the same index (prefill rank = group * tp_P + prefill TP rank).
* Shard of TP rank t: none unless ``t % g == 0`` (only a replica group's first rank represents it), else the
  interval [k n, (k+1) n) of the logical axis, k = t // g, n = L / e.
* Identity plan when every buffer has replica group 1 on both sides and tp_P == tp_D: whole items from the
  prefill rank at the same position, no fragments.
* Otherwise fragmented: a replicated buffer is one whole-decode-item fragment from prefill TP rank
  ``(tp_rank_D * tp_P) // tp_D``; a sharded buffer gets one fragment per representative prefill rank whose
  interval meets the decode rank's, with offsets of the intersection relative to each side's interval start.
  Fragments are grouped by prefill rank (ascending), in buffer order within a rank.
* Fan-out: for every prefill rank, how many decode ranks' plans draw from it.

Beyond version 1 (and stricter where version 1 would crash later or copy out of bounds):

* ``dp_pairing="any"``: a request may go from any prefill DP group to any decode DP group (as routers do);
  ``plan_for_decode_rank(r, prefill_dp_group=g)`` plans from group g with the same rules, and the fan-out is
  per source group. Under ``"index"`` a decode world with more DP groups than prefill is an error at
  construction (version 1 raises ``KeyError`` while counting fan-out).
* A replicated buffer whose decode item is larger than its prefill item is rejected (version 1 would copy
  past the source item); buffer lists must be non-empty with distinct indexes.

Speed: everything that does not depend on the DP group (the fragments of each decode TP rank and the fan-out
of each prefill TP rank) is computed once per layout pair and buffer set, cached across planner instances,
and each plan once per (decode rank, source group): planning 256 decode ranks from 256 prefill ranks with
five buffers takes a few milliseconds (``benchmarks/bench_transfer.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable

import numpy as np

from .._check import shown
from ..errors import UnsupportedPDLayoutError
from .layout import (
    BufferLayout,
    ParallelLayout,
    RankTransferPlan,
    TransferFragment,
    FRAGMENT_FIELDS,
    _FrozenDict,
    _plan,
)

__all__ = ["PDTransferPlanner", "DP_PAIRINGS", "MAX_BUFFERS"]

DP_PAIRINGS = ("index", "any")
#: most buffers a side may declare (a per-layer K and V of a 512-layer model and its draft fits)
MAX_BUFFERS = 4096


@dataclass(frozen=True)
class _Template:
    """The DP-group-independent part of every plan of one layout pair (see :func:`_template`)."""

    identity: bool
    #: per decode TP rank: ((prefill TP rank, buffer position, src offset, dst offset, bytes per page), ...)
    #: sorted by prefill TP rank, buffer order within a rank
    pieces: tuple[tuple[tuple[int, int, int, int, int], ...], ...]
    #: per prefill TP rank: the decode TP ranks (of one DP group) whose plan draws from it
    fanout: tuple[int, ...]
    #: per decode TP rank: (prefill TP rank, the fragment's fields with placeholder ranks) of each piece
    fields: tuple[tuple[tuple[int, dict], ...], ...]
    #: plans built so far, by (decode rank, prefill DP group): shared by every planner of this layout pair
    plans: dict


def _shard(buffer: BufferLayout, tp: int, tp_rank: int) -> tuple[int, int] | None:
    """[start, end) of the logical axis that ``tp_rank`` represents, or None (a non-first replica)."""
    g = buffer.tp_replica_group_size
    if tp_rank % g:
        return None
    n = buffer.logical_size // (tp // g)
    k = tp_rank // g
    return k * n, (k + 1) * n


@lru_cache(maxsize=256)
def _template(tp_p: int, tp_d: int, prefill_buffers: tuple[BufferLayout, ...],
              decode_buffers: tuple[BufferLayout, ...]) -> _Template:
    identity = tp_p == tp_d and all(
        p.tp_replica_group_size == 1 and d.tp_replica_group_size == 1 for p, d in zip(prefill_buffers, decode_buffers))
    pieces = []
    for d_rank in range(tp_d):
        out = []
        for pos, (pb, db) in enumerate(zip(prefill_buffers, decode_buffers)):
            if pb.logical_axis == "replicated":
                out.append(((d_rank * tp_p) // tp_d, pos, 0, 0, db.item_stride_bytes))
                continue
            dst = _shard(db, tp_d, d_rank)
            if dst is None:
                continue
            g_p = pb.tp_replica_group_size
            n_p = pb.logical_size // (tp_p // g_p)
            unit = pb.bytes_per_logical_unit
            # the representative prefill shards k that meet [dst0, dst1): k n_p < dst1 and (k+1) n_p > dst0
            for k in range(dst[0] // n_p, (dst[1] - 1) // n_p + 1):
                lo, hi = max(dst[0], k * n_p), min(dst[1], (k + 1) * n_p)
                out.append((k * g_p, pos, (lo - k * n_p) * unit, (lo - dst[0]) * unit, (hi - lo) * unit))
        out.sort(key=lambda piece: piece[0])  # stable: buffer order kept within a prefill rank
        pieces.append(tuple(out))
    fanout = [0] * tp_p
    for out in pieces:
        for p_rank in {piece[0] for piece in out}:
            fanout[p_rank] += 1
    fields = tuple(tuple((p_tp, dict(zip(FRAGMENT_FIELDS, (
        prefill_buffers[pos].buffer_index, prefill_buffers[pos].buffer_kind, -1, -1,
        prefill_buffers[pos].item_stride_bytes, decode_buffers[pos].item_stride_bytes, src_off, dst_off, nbytes,
        None)))) for p_tp, pos, src_off, dst_off, nbytes in out) for out in pieces)
    return _Template(identity, tuple(pieces), tuple(fanout), fields, {})


def _groups(lo: int, hi: int) -> str:
    return f"decode DP group {lo}" if hi - lo == 1 else f"decode DP groups {lo}..{hi - 1}"


def _buffers(name: str, value: Any) -> tuple[BufferLayout, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise UnsupportedPDLayoutError(f"{name} must be a sequence of BufferLayout, got {shown(value)}")
    out = tuple(value)
    if not 1 <= len(out) <= MAX_BUFFERS:
        raise UnsupportedPDLayoutError(f"{name} must hold 1 to {MAX_BUFFERS} buffers, got {len(out)}")
    for i, b in enumerate(out):
        if not isinstance(b, BufferLayout):
            raise UnsupportedPDLayoutError(f"{name}[{i}] must be a BufferLayout, got {shown(b)}")
    indexes = [b.buffer_index for b in out]
    if len(set(indexes)) != len(indexes):
        dup = next(i for i in indexes if indexes.count(i) > 1)
        raise UnsupportedPDLayoutError(f"{name} must have distinct buffer_index values, got {dup} twice")
    return out


class PDTransferPlanner:
    """Plans, for each decode rank, the byte ranges each prefill rank sends it (module docstring for the
    rules). Construction validates everything; :meth:`plan_for_decode_rank` then never fails for a rank in
    range.

    Parameters
    ----------
    prefill_layout, decode_layout : the two sides (roles "prefill" and "decode").
    prefill_buffers, decode_buffers : the buffers of one page on each side, paired by position.
    dp_pairing : "index" (version 1: decode DP group k receives from prefill DP group k) or "any" (any prefill
        DP group may feed any decode DP group; choose it per request).
    """

    def __init__(self, *, prefill_layout: ParallelLayout, decode_layout: ParallelLayout,
                 prefill_buffers: Iterable[BufferLayout], decode_buffers: Iterable[BufferLayout],
                 dp_pairing: str = "index"):
        for name, layout, role in (("prefill_layout", prefill_layout, "prefill"),
                                   ("decode_layout", decode_layout, "decode")):
            if not isinstance(layout, ParallelLayout):
                raise UnsupportedPDLayoutError(f"{name} must be a ParallelLayout, got {shown(layout)}")
            if layout.role != role:
                raise UnsupportedPDLayoutError(f"{name}.role must be {role!r}, got {layout.role!r}")
        if not isinstance(dp_pairing, str) or dp_pairing not in DP_PAIRINGS:
            raise UnsupportedPDLayoutError(f"dp_pairing must be one of {list(DP_PAIRINGS)!r}, got {shown(dp_pairing)}")
        self.prefill_layout = prefill_layout
        self.decode_layout = decode_layout
        self.prefill_buffers = _buffers("prefill_buffers", prefill_buffers)
        self.decode_buffers = _buffers("decode_buffers", decode_buffers)
        self.dp_pairing = dp_pairing
        self._validate_pairs()
        for side in ("prefill", "decode"):
            self._validate_alignment(side)
        if dp_pairing == "index" and decode_layout.dp_size > prefill_layout.dp_size:
            raise UnsupportedPDLayoutError(
                f"decode_layout.dp_size must be <= prefill_layout.dp_size ({prefill_layout.dp_size}) with "
                f"dp_pairing='index' (decode DP group k receives from prefill DP group k), got "
                f"{decode_layout.dp_size}: {_groups(prefill_layout.dp_size, decode_layout.dp_size)} would have no "
                f"source; use dp_pairing='any' to route each request from any prefill DP group")
        self._t = _template(self.prefill_tp, self.decode_tp, self.prefill_buffers, self.decode_buffers)
        self._plans: dict[tuple[int, int], RankTransferPlan] = self._t.plans

    # ---- validation ------------------------------------------------------------------------------------------
    def _validate_pairs(self) -> None:
        pb, db = self.prefill_buffers, self.decode_buffers
        if len(pb) != len(db):
            raise UnsupportedPDLayoutError(f"prefill_buffers and decode_buffers must pair up by position (same "
                                           f"count), got {len(pb)} and {len(db)} buffers")
        for i, (p, d) in enumerate(zip(pb, db)):
            for field in ("buffer_index", "buffer_kind", "logical_axis", "logical_size", "bytes_per_logical_unit"):
                pv, dv = getattr(p, field), getattr(d, field)
                if pv != dv:
                    show = (lambda v: v.value) if field == "buffer_kind" else (lambda v: v)
                    raise UnsupportedPDLayoutError(f"decode_buffers[{i}].{field} must equal prefill_buffers[{i}]."
                                                   f"{field} ({show(pv)!r}), got {show(dv)!r}")
            if p.logical_axis == "replicated" and d.item_stride_bytes > p.item_stride_bytes:
                raise UnsupportedPDLayoutError(
                    f"decode_buffers[{i}].item_stride_bytes must be <= prefill_buffers[{i}].item_stride_bytes "
                    f"({p.item_stride_bytes}) for a replicated buffer (the whole decode item is copied from one "
                    f"prefill item), got {d.item_stride_bytes}")

    def _validate_alignment(self, side: str) -> None:
        tp = self.prefill_tp if side == "prefill" else self.decode_tp
        for i, b in enumerate(self.prefill_buffers if side == "prefill" else self.decode_buffers):
            if b.logical_axis == "replicated":
                continue
            where = f"{side}_buffers[{i}] ({b.buffer_kind.value})"
            g = b.tp_replica_group_size
            if tp % g:
                raise UnsupportedPDLayoutError(f"{where}.tp_replica_group_size must divide the {side} TP size per "
                                               f"DP group ({tp}), got {g}")
            eff = tp // g
            if b.logical_size % eff:
                raise UnsupportedPDLayoutError(
                    f"{where}.logical_size must be divisible by the effective {side} TP size (TP {tp} / replica "
                    f"group {g} = {eff}), got {b.logical_size}")
            have, need = b.item_stride_bytes // b.bytes_per_logical_unit, b.logical_size // eff
            if have < need:
                raise UnsupportedPDLayoutError(
                    f"{where}.item_stride_bytes must hold the rank's shard of {need} logical units of "
                    f"{b.bytes_per_logical_unit} B (>= {need * b.bytes_per_logical_unit} B), got {b.item_stride_bytes}")

    # ---- sizes -----------------------------------------------------------------------------------------------
    @property
    def prefill_tp(self) -> int:
        return self.prefill_layout.tp_size_per_dp

    @property
    def decode_tp(self) -> int:
        return self.decode_layout.tp_size_per_dp

    @property
    def is_identity(self) -> bool:
        """Whether every plan is an identity plan (equal TP, no replica groups)."""
        return self._t.identity

    def source_groups(self, decode_rank: int) -> tuple[int, ...]:
        """The prefill DP groups ``decode_rank`` may receive from: its own index under "index", all under "any"."""
        r = self._decode_rank(decode_rank)
        if self.dp_pairing == "index":
            return (r // self.decode_tp,)
        return tuple(range(self.prefill_layout.dp_size))

    def _decode_rank(self, decode_rank: Any) -> int:
        world = self.decode_layout.world_size
        if isinstance(decode_rank, bool) or not isinstance(decode_rank, (int, np.integer)) \
                or not 0 <= decode_rank < world:
            raise UnsupportedPDLayoutError(f"decode_rank must be an integer in [0, {world - 1}] (the decode world), "
                                           f"got {shown(decode_rank)}")
        return int(decode_rank)

    def _group(self, decode_rank: int, prefill_dp_group: Any) -> int:
        own = decode_rank // self.decode_tp
        dp_p = self.prefill_layout.dp_size
        if prefill_dp_group is None:
            if own < dp_p:
                return own
            raise UnsupportedPDLayoutError(
                f"prefill_dp_group must be given for decode rank {decode_rank}: its DP group {own} has no prefill "
                f"DP group of the same index (prefill has {dp_p}); choose one in [0, {dp_p - 1}]")
        prefill_dp_group = self._prefill_group(prefill_dp_group)
        if self.dp_pairing == "index" and prefill_dp_group != own:
            raise UnsupportedPDLayoutError(
                f"prefill_dp_group must be {own} (the decode rank's own DP group) with dp_pairing='index', got "
                f"{prefill_dp_group}; use dp_pairing='any' to plan from another group")
        return prefill_dp_group

    def _prefill_group(self, value: Any) -> int:
        dp_p = self.prefill_layout.dp_size
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < dp_p:
            raise UnsupportedPDLayoutError(f"prefill_dp_group must be an integer in [0, {dp_p - 1}] (the prefill DP "
                                           f"groups), got {shown(value)}")
        return int(value)

    # ---- plans -----------------------------------------------------------------------------------------------
    def plan_for_decode_rank(self, decode_rank: int, prefill_dp_group: int | None = None) -> RankTransferPlan:
        """The plan of ``decode_rank`` for a request prefilled by ``prefill_dp_group`` (default: the group of
        the same index; required under ``dp_pairing="any"`` when no such group exists)."""
        r = self._decode_rank(decode_rank)
        g = self._group(r, prefill_dp_group)
        key = (r, g)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._build(r, g)
        return plan

    def explicit_plan(self, decode_rank: int, prefill_dp_group: int | None = None) -> RankTransferPlan:
        """The plan of ``decode_rank`` spelled out as fragments even where the answer is an identity plan (one
        fragment per buffer: the shard or the whole replicated item from the same-position rank). Identity and
        explicit plans move the same bytes (a property test checks it); costs and the round-trip check use
        this form."""
        r = self._decode_rank(decode_rank)
        g = self._group(r, prefill_dp_group)
        return self._build(r, g, explicit=True) if self._t.identity else self.plan_for_decode_rank(r, g)

    def _build(self, r: int, g: int, explicit: bool = False) -> RankTransferPlan:
        tp_p = self.prefill_tp
        d_rank = r % self.decode_tp
        base = g * tp_p
        fan = self._t.fanout
        if self._t.identity and not explicit:
            p = base + d_rank
            return _plan("identity", g, (p,), 1, _FrozenDict(), _FrozenDict({p: fan[d_rank]}))
        by_rank: dict[int, list[TransferFragment]] = {}
        new = object.__new__
        for p_tp, fields in self._t.fields[d_rank]:
            f = new(TransferFragment)
            d = f.__dict__
            d.update(fields)  # the fields of a valid fragment (checked by the property tests): no re-validation
            d["src_rank"] = base + p_tp
            d["dst_rank"] = r
            by_rank.setdefault(base + p_tp, []).append(f)
        ranks = tuple(by_rank)  # already ascending: pieces are sorted by prefill TP rank
        return _plan("fragmented", g, ranks, len(ranks),
                     _FrozenDict((p, tuple(fs)) for p, fs in by_rank.items()),
                     _FrozenDict((p, fan[p - base]) for p in ranks))

    def plans(self, prefill_dp_group: int | None = None) -> tuple[RankTransferPlan, ...]:
        """The plan of every decode rank, in rank order (each from its own-index group, or from
        ``prefill_dp_group`` under ``dp_pairing="any"``)."""
        return tuple(self.plan_for_decode_rank(r, prefill_dp_group) for r in range(self.decode_layout.world_size))

    def fanout(self, prefill_dp_group: int | None = None) -> dict[int, int]:
        """Fan-out of every prefill rank: how many decode ranks' plans draw from it.

        Under "index" (version 1) over the whole prefill world: a group without a decode partner has 0.
        Under "any", per request: the ranks of ``prefill_dp_group`` (all groups if None) with the number of
        decode ranks of the one decode group the request goes to that draw from each.
        """
        tp_p, dp_p = self.prefill_tp, self.prefill_layout.dp_size
        if prefill_dp_group is not None:
            groups = [self._prefill_group(prefill_dp_group)]
        else:
            groups = range(dp_p)
        served = self.decode_layout.dp_size if self.dp_pairing == "index" else dp_p
        return {g * tp_p + t: (self._t.fanout[t] if g < served else 0) for g in groups for t in range(tp_p)}

    def idle_prefill_ranks(self, prefill_dp_group: int = 0) -> tuple[int, ...]:
        """Prefill ranks of a serving group that send nothing (non-representative replicas): they still join
        the completion handshake with no data."""
        base = self._prefill_group(prefill_dp_group) * self.prefill_tp
        return tuple(base + t for t, n in enumerate(self._t.fanout) if n == 0)

    def __repr__(self) -> str:
        return (f"PDTransferPlanner({self.prefill_layout} -> {self.decode_layout}, {len(self.prefill_buffers)} "
                f"buffers, dp_pairing={self.dp_pairing!r})")
