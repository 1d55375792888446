"""The round-trip check: apply a plan to synthetic pages with numpy and compare every decode page with the page
cut directly from the global tensor (docs/models.md §9.4; MODELS.md §5 invariant 13).

Each byte of the global tensor of buffer b is a unique 64-bit code of (buffer position, logical unit, byte in
the unit, page); padding bytes of an item (beyond the rank's shard) get a code that no real byte has, per rank,
so a fragment that reads padding, a wrong head, a wrong byte or a wrong page shows up as a mismatch. Prefill
ranks hold their shard (replicas hold identical copies); the plan is applied page-vectorised with numpy; every
byte of every decode rank's shard must then equal the global tensor's, and no byte outside any fragment may
be written twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import _check
from .planner import PDTransferPlanner

__all__ = ["RoundTrip", "roundtrip_check", "pipeline_roundtrip_check"]

_UNSET = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
_PAD = np.uint64(1) << np.uint64(62)  # padding codes: bit 62 set, never set in a real byte's code


@dataclass(frozen=True)
class RoundTrip:
    """Outcome of :func:`roundtrip_check`: ``ok`` when every checked byte matched and nothing was written twice."""

    checked_B: int
    mismatched_B: int
    overwritten_B: int
    #: (decode rank, buffer index) pairs that received nothing because the rank is not its replica group's
    #: representative (version 1: the decode instance copies them locally)
    not_sent: tuple[tuple[int, int], ...] = field(default=())
    first_mismatch: str = ""

    @property
    def ok(self) -> bool:
        return self.mismatched_B == 0 and self.overwritten_B == 0 and self.checked_B > 0


def _unit_interval(b, tp: int, tp_rank: int, representative_only: bool) -> tuple[int, int] | None:
    g = b.tp_replica_group_size
    if representative_only and tp_rank % g:
        return None
    n = b.logical_size // (tp // g)
    k = tp_rank // g
    return k * n, (k + 1) * n


def _global(pos: int, b, pages: int) -> np.ndarray:
    """[pages, logical_size * unit] codes of the global tensor of buffer position ``pos``."""
    units = b.logical_size * b.bytes_per_logical_unit
    byte = np.arange(units, dtype=np.uint64)
    page = np.arange(pages, dtype=np.uint64)[:, None]
    return ((np.uint64(pos) << np.uint64(48)) | (page << np.uint64(32)) | byte[None, :])


def roundtrip_check(planner: PDTransferPlanner, *, pages: int = 2, prefill_dp_group: int | None = None,
                    decode_ranks=None, explicit: bool = True) -> RoundTrip:
    """Apply ``planner``'s plans for ``decode_ranks`` (default: all) to synthetic prefill pages and compare.

    ``explicit``: apply identity plans in their explicit form (whole shards from the same-position rank);
    with False an identity plan copies whole items (``min`` of the two item strides). Buffers up to
    2**32 bytes per page item and 2**14 pages (the code layout).
    """
    pages = _check.integer("pages", pages, lo=1, hi=1 << 14)
    pl = planner
    world_d = pl.decode_layout.world_size
    ranks = range(world_d) if decode_ranks is None else [int(r) for r in decode_ranks]
    pb, db = pl.prefill_buffers, pl.decode_buffers
    globals_ = [_global(i, b, pages) for i, b in enumerate(pb)]
    pos_of = {b.buffer_index: i for i, b in enumerate(pb)}

    def prefill_item(rank: int, i: int) -> np.ndarray:
        b = pb[i]
        item = np.full((pages, b.item_stride_bytes), _PAD | (np.uint64(rank) << np.uint64(20)), dtype=np.uint64)
        item += np.arange(b.item_stride_bytes, dtype=np.uint64)[None, :] & np.uint64(0xFFFFF)
        if b.logical_axis == "replicated":
            n = min(b.item_stride_bytes, globals_[i].shape[1])
            item[:, :n] = globals_[i][:, :n]
            return item
        lo, hi = _unit_interval(b, pl.prefill_tp, rank % pl.prefill_tp, representative_only=False)
        u = b.bytes_per_logical_unit
        item[:, : (hi - lo) * u] = globals_[i][:, lo * u: hi * u]
        return item

    cache: dict[tuple[int, int], np.ndarray] = {}
    checked = mismatched = overwritten = 0
    not_sent: list[tuple[int, int]] = []
    first = ""
    for r in ranks:
        plan = pl.explicit_plan(r, prefill_dp_group) if explicit else pl.plan_for_decode_rank(r, prefill_dp_group)
        dst = [np.full((pages, b.item_stride_bytes), _UNSET, dtype=np.uint64) for b in db]
        writes = [np.zeros((pages, b.item_stride_bytes), dtype=np.int32) for b in db]
        if plan.plan_kind == "identity":
            p = plan.target_prefill_ranks[0]
            for i, b in enumerate(db):
                src = cache.setdefault((p, i), prefill_item(p, i))
                n = min(b.item_stride_bytes, pb[i].item_stride_bytes)
                dst[i][:, :n] = src[:, :n]
                writes[i][:, :n] += 1
        for f in plan.fragments:
            i = pos_of[f.buffer_index]
            src = cache.get((f.src_rank, i))
            if src is None:
                src = cache[(f.src_rank, i)] = prefill_item(f.src_rank, i)
            n = f.bytes_per_page
            dst[i][:, f.dst_byte_offset: f.dst_byte_offset + n] = src[:, f.src_byte_offset: f.src_byte_offset + n]
            writes[i][:, f.dst_byte_offset: f.dst_byte_offset + n] += 1
        d_tp = r % pl.decode_tp
        for i, b in enumerate(db):
            overwritten += int((writes[i] > 1).sum())
            if b.logical_axis == "replicated":
                want = globals_[i][:, : b.item_stride_bytes]
                got = dst[i][:, : want.shape[1]]
            else:
                iv = _unit_interval(b, pl.decode_tp, d_tp, representative_only=True)
                if iv is None:
                    not_sent.append((r, b.buffer_index))
                    if writes[i].any():
                        overwritten += int(writes[i].sum())  # v1 sends nothing to a non-representative replica
                    continue
                u = b.bytes_per_logical_unit
                want = globals_[i][:, iv[0] * u: iv[1] * u]
                got = dst[i][:, : want.shape[1]]
            bad = got != want
            checked += want.size
            if bad.any():
                mismatched += int(bad.sum())
                if not first:
                    pg, byte = map(int, np.argwhere(bad)[0])
                    first = (f"decode rank {r}, buffer {b.buffer_index} ({b.buffer_kind.value}), page {pg}, byte "
                             f"{byte}: got code {int(got[pg, byte]):#x}, want {int(want[pg, byte]):#x}")
    return RoundTrip(checked, mismatched, overwritten, tuple(not_sent), first)


_ABSENT = np.uint64(1) << np.uint64(61)  # a layer the source rank's stage does not hold: never a real byte's code


def pipeline_roundtrip_check(pipe, *, pages: int = 1, prefill_dp_group: int | None = None,
                             decode_ranks=None) -> RoundTrip:
    """The round-trip check of a pipelined plan (:class:`~.pipeline.PipelineTransferPlanner`), layer by layer.

    Every layer a decode rank's stage holds of every buffer must arrive exactly once, byte for byte, from a
    prefill rank whose stage holds that layer: a prefill rank offers the codes of :func:`roundtrip_check` for
    its own stage's layers and codes no real byte has (bit 61 and its rank) for any other layer, so a fragment
    from the wrong stage, a missing layer (nothing written) or a layer sent twice shows. Layers are checked per
    segment on which nothing changes (the fragments' layer ranges and the stages' bounds), and counted for every
    layer of it. ``decode_ranks``: global decode ranks (default: every one)."""
    pages = _check.integer("pages", pages, lo=1, hi=1 << 14)
    sp = pipe.stage_planner
    pb, db = sp.prefill_buffers, sp.decode_buffers
    wp, wd = pipe.prefill_stage_world, pipe.decode_stage_world
    globals_ = [_global(i, b, pages) for i, b in enumerate(pb)]
    pos_of = {b.buffer_index: i for i, b in enumerate(pb)}
    ranks = range(pipe.decode_world) if decode_ranks is None else [int(r) for r in decode_ranks]
    cache: dict[tuple[int, int], np.ndarray] = {}

    def held(rank: int, i: int) -> np.ndarray:
        key = (rank, i)
        if key not in cache:
            b = pb[i]
            local = rank % wp
            item = np.full((pages, b.item_stride_bytes), _PAD | (np.uint64(rank) << np.uint64(20)), dtype=np.uint64)
            item += np.arange(b.item_stride_bytes, dtype=np.uint64)[None, :] & np.uint64(0xFFFFF)
            if b.logical_axis == "replicated":
                n = min(b.item_stride_bytes, globals_[i].shape[1])
                item[:, :n] = globals_[i][:, :n]
            else:
                lo, hi = _unit_interval(b, sp.prefill_tp, local % sp.prefill_tp, representative_only=False)
                u = b.bytes_per_logical_unit
                item[:, : (hi - lo) * u] = globals_[i][:, lo * u: hi * u]
            cache[key] = item
        return cache[key]

    checked = mismatched = overwritten = 0
    not_sent: list[tuple[int, int]] = []
    first = ""
    for R in ranks:
        plan = pipe.plan_for_decode_rank(R, prefill_dp_group)
        b_stage = R // wd
        d_lo, d_hi = pipe.decode_ranges[b_stage]
        d_tp = (R % wd) % sp.decode_tp
        for i, b in enumerate(db):
            s_lo, s_hi = max(d_lo, pipe.buffer_layers[i][0]), min(d_hi, pipe.buffer_layers[i][1])
            frs = [f for f in plan.fragments if pos_of[f.buffer_index] == i]
            for f in frs:  # a layer outside what this decode rank holds of the buffer: written where nothing is
                outside = f.layers - max(0, min(f.layer_end, s_hi) - max(f.layer_start, s_lo))
                overwritten += outside * f.bytes_per_page * pages
            if s_lo >= s_hi:
                continue
            iv = None if b.logical_axis == "replicated" else _unit_interval(b, sp.decode_tp, d_tp,
                                                                           representative_only=True)
            if b.logical_axis != "replicated" and iv is None:
                not_sent.append((R, b.buffer_index))
                overwritten += sum(f.layers * f.bytes_per_page for f in frs) * pages
                continue
            cuts = {s_lo, s_hi}
            cuts.update(x for f in frs for x in (f.layer_start, f.layer_end) if s_lo < x < s_hi)
            cuts.update(x for lo, hi in pipe.prefill_ranges for x in (lo, hi) if s_lo < x < s_hi)
            cuts = sorted(cuts)
            for lo, hi in zip(cuts, cuts[1:]):  # nothing changes inside [lo, hi): check layer lo for all of them
                n = hi - lo
                dst = np.full((pages, b.item_stride_bytes), _UNSET, dtype=np.uint64)
                writes = np.zeros((pages, b.item_stride_bytes), dtype=np.int32)
                for f in frs:
                    if not f.layer_start <= lo < f.layer_end:
                        continue
                    g = f.fragment
                    a_lo, a_hi = pipe.prefill_ranges[g.src_rank // wp]
                    src = held(g.src_rank, i) if a_lo <= lo < a_hi else np.full(
                        (pages, pb[i].item_stride_bytes), _ABSENT | np.uint64(g.src_rank), dtype=np.uint64)
                    k = g.bytes_per_page
                    dst[:, g.dst_byte_offset: g.dst_byte_offset + k] = src[:, g.src_byte_offset: g.src_byte_offset + k]
                    writes[:, g.dst_byte_offset: g.dst_byte_offset + k] += 1
                overwritten += int((writes > 1).sum()) * n
                if iv is None:
                    want = globals_[i][:, : b.item_stride_bytes]
                else:
                    u = b.bytes_per_logical_unit
                    want = globals_[i][:, iv[0] * u: iv[1] * u]
                got = dst[:, : want.shape[1]]
                bad = got != want
                checked += want.size * n
                if bad.any():
                    mismatched += int(bad.sum()) * n
                    if not first:
                        pg, byte = map(int, np.argwhere(bad)[0])
                        first = (f"decode rank {R}, buffer {b.buffer_index} ({b.buffer_kind.value}), layers "
                                 f"{lo}-{hi - 1}, page {pg}, byte {byte}: got code {int(got[pg, byte]):#x}, want "
                                 f"{int(want[pg, byte]):#x}")
    return RoundTrip(checked, mismatched, overwritten, tuple(not_sent), first)
