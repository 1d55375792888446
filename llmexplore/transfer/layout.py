"""The data model of a prefill -> decode KV transfer plan (version 1 of the runtime protocol).

Names, fields and their order follow the version-1 planner of serving runtimes such as TokenSpeed
(``lightseekorg/tokenspeed`` ``python/tokenspeed/runtime/pd/transfer_plan.py`` at commit 215acaf1, June 2026), so
that plans and wire frames interoperate. Every class is frozen and validates on construction: a violation raises
:class:`~llmexplore.errors.UnsupportedPDLayoutError` naming the field, the value and the rule (the runtime
raises it only for a few rules and lets the others surface later as ``KeyError`` or out-of-bounds copies).

Units: ranks are global ranks of their side's world; byte offsets and strides are bytes within one page item
(the bytes of one buffer, e.g. one layer's K, for one page of ``page_size`` tokens on one rank). The logical
axis of a sharded buffer (KV heads, state channels) is outermost inside an item, so a range of logical units
is one contiguous byte range (FlashInfer's HND paged layout; an NHD layout would split it per token).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

import numpy as np

from .._check import shown
from ..errors import UnsupportedPDLayoutError

__all__ = ["UnsupportedPDLayoutError", "ParallelLayout", "BufferKind", "BufferLayout", "TransferFragment",
           "RankTransferPlan", "ROLES", "AXES", "PLAN_KINDS", "MAX_WORLD", "MAX_BYTES", "MAX_LOGICAL"]

ROLES = ("prefill", "decode")
AXES = ("kv_head", "state_channel", "replicated")
PLAN_KINDS = ("identity", "fragmented")
#: largest world (ranks on one side) a layout may declare; a bound so that planning stays a bounded loop
MAX_WORLD = 1 << 16
#: largest byte count or offset of one page item (1 TiB: far above any real page)
MAX_BYTES = 1 << 40
#: largest logical extent of a buffer (heads, channels)
MAX_LOGICAL = 1 << 24


def _int(owner: str, name: str, value: Any, lo: int, hi: int) -> int:
    """``value`` as an int in [lo, hi]: Python and numpy integers only (no bool, float or string)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        hi_text = f"{hi:,}" if hi >= 10000 else str(hi)
        raise UnsupportedPDLayoutError(f"{owner}.{name} must be an integer in [{lo}, {hi_text}], got {shown(value)}")
    return int(value)


def _choice(owner: str, name: str, value: Any, options: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in options:
        raise UnsupportedPDLayoutError(f"{owner}.{name} must be one of {list(options)!r}, got {shown(value)}")
    return value


def _set(obj, name: str, value) -> None:
    object.__setattr__(obj, name, value)  # normalising a field of a frozen dataclass in __post_init__


class BufferKind(str, Enum):
    """What a buffer holds: the target model's K or V, the draft model's (speculative decoding), or a
    recurrent (Mamba) state. The string values are the wire format."""

    TARGET_K = "target_k"
    TARGET_V = "target_v"
    DRAFT_K = "draft_k"
    DRAFT_V = "draft_v"
    MAMBA_STATE = "mamba_state"


_KIND_BY_VALUE = {k.value: k for k in BufferKind}


def _kind(owner: str, value: Any) -> BufferKind:
    if isinstance(value, BufferKind):
        return value
    if isinstance(value, str) and value in _KIND_BY_VALUE:
        return _KIND_BY_VALUE[value]
    raise UnsupportedPDLayoutError(f"{owner}.buffer_kind must be one of {list(_KIND_BY_VALUE)!r}, "
                                   f"got {shown(value)}")


@dataclass(frozen=True)
class ParallelLayout:
    """One side of the deployment: ``world_size`` ranks split into ``dp_size`` data-parallel groups of
    ``tp_size_per_dp`` tensor-parallel ranks each; rank = dp_group * tp_size_per_dp + tp_rank."""

    role: Literal["prefill", "decode"]
    world_size: int
    dp_size: int = 1

    def __post_init__(self):
        _choice("ParallelLayout", "role", self.role, ROLES)
        _set(self, "world_size", _int("ParallelLayout", "world_size", self.world_size, 1, MAX_WORLD))
        _set(self, "dp_size", _int("ParallelLayout", "dp_size", self.dp_size, 1, MAX_WORLD))
        if self.world_size % self.dp_size:
            raise UnsupportedPDLayoutError(
                f"ParallelLayout.world_size must be divisible by dp_size ({self.dp_size}), got {self.world_size} "
                f"({self.role})")

    @property
    def tp_size_per_dp(self) -> int:
        """Tensor-parallel ranks per data-parallel group."""
        return self.world_size // self.dp_size

    def __str__(self) -> str:
        return f"{self.role} TP{self.tp_size_per_dp}" + (f" x DP{self.dp_size}" if self.dp_size > 1 else "")


@dataclass(frozen=True)
class BufferLayout:
    """The layout of one cache or state buffer on one side.

    ``logical_size`` units along ``logical_axis`` (KV heads, state channels; ``replicated``: every rank holds
    the whole buffer) of ``bytes_per_logical_unit`` bytes each per page; one page item of this buffer on a rank
    spans ``item_stride_bytes``. ``tp_replica_group_size`` TP ranks hold the same shard (GQA/MQA with more TP
    ranks than KV heads): only the first rank of each group is its representative.
    """

    buffer_index: int
    buffer_kind: BufferKind
    logical_axis: Literal["kv_head", "state_channel", "replicated"]
    logical_size: int
    page_size: int
    bytes_per_logical_unit: int
    item_stride_bytes: int
    tp_replica_group_size: int = 1

    def __post_init__(self):
        o = "BufferLayout"
        _set(self, "buffer_index", _int(o, "buffer_index", self.buffer_index, 0, MAX_BYTES))
        _set(self, "buffer_kind", _kind(o, self.buffer_kind))
        _choice(o, "logical_axis", self.logical_axis, AXES)
        _set(self, "logical_size", _int(o, "logical_size", self.logical_size, 1, MAX_LOGICAL))
        _set(self, "page_size", _int(o, "page_size", self.page_size, 1, MAX_LOGICAL))
        _set(self, "bytes_per_logical_unit", _int(o, "bytes_per_logical_unit", self.bytes_per_logical_unit, 1,
                                                  MAX_BYTES))
        _set(self, "item_stride_bytes", _int(o, "item_stride_bytes", self.item_stride_bytes, 1, MAX_BYTES))
        _set(self, "tp_replica_group_size", _int(o, "tp_replica_group_size", self.tp_replica_group_size, 1,
                                                 MAX_WORLD))

    @property
    def label(self) -> str:
        return f"{self.buffer_index}:{self.buffer_kind.value}"


#: field names of a fragment, in wire order
FRAGMENT_FIELDS = ("buffer_index", "buffer_kind", "src_rank", "dst_rank", "src_page_stride_bytes",
                   "dst_page_stride_bytes", "src_byte_offset", "dst_byte_offset", "bytes_per_page", "page_count")


@dataclass(frozen=True)
class TransferFragment:
    """One contiguous byte range copied per page: from ``src_rank``'s page item of buffer ``buffer_index``,
    bytes ``[src_byte_offset, +bytes_per_page)``, to ``dst_rank``'s page item at ``dst_byte_offset``. Page p
    of the request is at ``p * src_page_stride_bytes`` (resp. dst). ``page_count``: pages covered, ``None``
    meaning every page of the request (the planner always emits ``None``).

    Both ranges must lie inside their page item (offset + bytes <= stride): a fragment that would read or
    write past its page is rejected, also when it arrives over the wire.
    """

    buffer_index: int
    buffer_kind: BufferKind
    src_rank: int
    dst_rank: int
    src_page_stride_bytes: int
    dst_page_stride_bytes: int
    src_byte_offset: int
    dst_byte_offset: int
    bytes_per_page: int
    page_count: int | None = None

    def __post_init__(self):
        o = "TransferFragment"
        _set(self, "buffer_index", _int(o, "buffer_index", self.buffer_index, 0, MAX_BYTES))
        _set(self, "buffer_kind", _kind(o, self.buffer_kind))
        for name in ("src_rank", "dst_rank"):
            _set(self, name, _int(o, name, getattr(self, name), 0, MAX_WORLD - 1))
        for name in ("src_page_stride_bytes", "dst_page_stride_bytes", "bytes_per_page"):
            _set(self, name, _int(o, name, getattr(self, name), 1, MAX_BYTES))
        for name in ("src_byte_offset", "dst_byte_offset"):
            _set(self, name, _int(o, name, getattr(self, name), 0, MAX_BYTES))
        if self.page_count is not None:
            _set(self, "page_count", _int(o, "page_count", self.page_count, 1, MAX_BYTES))
        for side in ("src", "dst"):
            off, stride = getattr(self, f"{side}_byte_offset"), getattr(self, f"{side}_page_stride_bytes")
            if off + self.bytes_per_page > stride:
                raise UnsupportedPDLayoutError(
                    f"TransferFragment.{side}_byte_offset + bytes_per_page must be <= {side}_page_stride_bytes "
                    f"({stride}): the range must stay inside its page item, got {off} + {self.bytes_per_page}")


_new = object.__new__


def _fragment_ok(buffer_index, src_rank, dst_rank, src_page_stride_bytes, dst_page_stride_bytes, src_byte_offset,
                 dst_byte_offset, bytes_per_page, page_count) -> bool:
    """Whether these int fields pass every range rule of :class:`TransferFragment` (the wire decoder's fast
    path; on False it builds the fragment to get the precise message). A property test keeps the two equal."""
    return (0 <= buffer_index <= MAX_BYTES and 0 <= src_rank < MAX_WORLD and 0 <= dst_rank < MAX_WORLD
            and 1 <= src_page_stride_bytes <= MAX_BYTES and 1 <= dst_page_stride_bytes <= MAX_BYTES
            and 1 <= bytes_per_page <= MAX_BYTES and 0 <= src_byte_offset <= MAX_BYTES
            and 0 <= dst_byte_offset <= MAX_BYTES and (page_count is None or 1 <= page_count <= MAX_BYTES)
            and src_byte_offset + bytes_per_page <= src_page_stride_bytes
            and dst_byte_offset + bytes_per_page <= dst_page_stride_bytes)


def _fragment(*values) -> TransferFragment:
    """A fragment the planner built (valid by construction, checked by the property tests): no re-validation,
    which would triple the cost of planning a large world."""
    f = _new(TransferFragment)
    f.__dict__.update(zip(FRAGMENT_FIELDS, values))
    return f


class _FrozenDict(dict):
    """A read-only dict (plans are frozen): equal to, and printed like, a plain dict; pickles."""

    def _readonly(self, *args, **kwargs):
        raise TypeError("a transfer plan is frozen: its mappings cannot be changed")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _readonly

    def __hash__(self):
        return hash(tuple(self.items()))

    def __reduce__(self):
        return (type(self), (dict(self),))


@dataclass(frozen=True)
class RankTransferPlan:
    """What one decode rank receives for one request.

    ``identity``: whole page items from the one prefill rank at the same position (no fragments);
    ``fragmented``: ``fragments_by_prefill_rank`` (ascending rank, buffer order within a rank).
    ``target_dp_group`` is the prefill DP group it receives from, ``target_prefill_ranks`` the ranks that send
    (``required_prefill_response_num`` of them: the completion signals it awaits), and
    ``required_dst_info_num_by_prefill_rank`` the fan-out of each: how many decode ranks of a request that
    prefill rank serves (it waits for that many destination descriptors before sending).
    """

    plan_kind: Literal["identity", "fragmented"]
    target_dp_group: int
    target_prefill_ranks: tuple[int, ...]
    required_prefill_response_num: int
    fragments_by_prefill_rank: dict[int, tuple[TransferFragment, ...]]
    required_dst_info_num_by_prefill_rank: dict[int, int]

    def __post_init__(self):
        o = "RankTransferPlan"
        _choice(o, "plan_kind", self.plan_kind, PLAN_KINDS)
        _set(self, "target_dp_group", _int(o, "target_dp_group", self.target_dp_group, 0, MAX_WORLD - 1))
        try:
            ranks = tuple(_int(o, "target_prefill_ranks[]", r, 0, MAX_WORLD - 1) for r in self.target_prefill_ranks)
        except TypeError:
            raise UnsupportedPDLayoutError(f"{o}.target_prefill_ranks must be a sequence of ranks, "
                                           f"got {shown(self.target_prefill_ranks)}") from None
        if list(ranks) != sorted(set(ranks)):
            raise UnsupportedPDLayoutError(f"{o}.target_prefill_ranks must be distinct and ascending, got {ranks}")
        _set(self, "target_prefill_ranks", ranks)
        n = _int(o, "required_prefill_response_num", self.required_prefill_response_num, 0, MAX_WORLD)
        if n != len(ranks):
            raise UnsupportedPDLayoutError(f"{o}.required_prefill_response_num must equal the number of "
                                           f"target_prefill_ranks ({len(ranks)}), got {n}")
        frags, fan = self.fragments_by_prefill_rank, self.required_dst_info_num_by_prefill_rank
        if not isinstance(frags, dict) or not isinstance(fan, dict):
            raise UnsupportedPDLayoutError(f"{o}: fragments_by_prefill_rank and required_dst_info_num_by_prefill_rank "
                                           f"must be dicts keyed by prefill rank")
        want = set() if self.plan_kind == "identity" else set(ranks)
        if set(frags) != want:
            rule = "be empty for an identity plan" if self.plan_kind == "identity" else \
                "have exactly the target_prefill_ranks as keys"
            raise UnsupportedPDLayoutError(f"{o}.fragments_by_prefill_rank must {rule}, got keys {sorted(frags)}")
        for rank, fs in frags.items():
            if not isinstance(fs, tuple) or not fs or not all(isinstance(f, TransferFragment) for f in fs):
                raise UnsupportedPDLayoutError(f"{o}.fragments_by_prefill_rank[{rank}] must be a non-empty tuple of "
                                               f"TransferFragment, got {shown(fs)}")
            if any(f.src_rank != rank for f in fs):
                raise UnsupportedPDLayoutError(f"{o}.fragments_by_prefill_rank[{rank}] holds a fragment whose "
                                               f"src_rank is not {rank}")
        if set(fan) != set(ranks):
            raise UnsupportedPDLayoutError(f"{o}.required_dst_info_num_by_prefill_rank must have exactly the "
                                           f"target_prefill_ranks as keys, got {sorted(fan)}")
        for rank, k in fan.items():
            _int(o, f"required_dst_info_num_by_prefill_rank[{rank}]", k, 1, MAX_WORLD)
        _set(self, "fragments_by_prefill_rank", _FrozenDict(frags))
        _set(self, "required_dst_info_num_by_prefill_rank", _FrozenDict(fan))

    def required_dst_info_num_for_prefill_rank(self, prefill_rank: int) -> int:
        """Fan-out of ``prefill_rank`` (one of this plan's sources)."""
        if prefill_rank not in self.required_dst_info_num_by_prefill_rank:
            raise UnsupportedPDLayoutError(f"prefill_rank must be one of this plan's target_prefill_ranks "
                                           f"{list(self.target_prefill_ranks)}, got {shown(prefill_rank)}")
        return self.required_dst_info_num_by_prefill_rank[prefill_rank]

    @property
    def fragments(self) -> tuple[TransferFragment, ...]:
        """Every fragment, in wire order (ascending prefill rank, buffer order within a rank)."""
        return tuple(f for fs in self.fragments_by_prefill_rank.values() for f in fs)


def _plan(*values) -> RankTransferPlan:
    """A plan the planner built (valid by construction): no re-validation."""
    p = _new(RankTransferPlan)
    p.__dict__.update(zip(_PLAN_FIELDS, values))
    return p


_PLAN_FIELDS = ("plan_kind", "target_dp_group", "target_prefill_ranks", "required_prefill_response_num",
                "fragments_by_prefill_rank", "required_dst_info_num_by_prefill_rank")
