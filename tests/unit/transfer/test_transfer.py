"""Tests of :mod:`llmexplore.transfer` (issue 7: KV transfer planning) and of ``sweeps/transfer.py``.

* the data model validates every field (UnsupportedPDLayoutError naming it), is frozen, and its plan dicts are
  read-only, equal to plain dicts and pickle;
* worked examples checked by hand (the arithmetic is in the comments);
* hypothesis properties over random valid layouts: the MODELS.md §5 invariants that apply to version 1 (exact
  cover, in-bounds offsets, index consistency, one replica per source, byte conservation, fan-out
  consistency, identity == explicit plan, determinism) and the numpy round-trip check, which must also catch
  a corrupted plan;
* the wire frames: identity, every rejection with its reason, and fuzzing where only UnsupportedPDLayoutError
  may come out;
* plans from model presets, their cost against the link model (models/step/kv_transfer.py), and the sweep tables.

The differential tests against the runtime's own planner are in tests/reference/test_transfer_tokenspeed.py.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
from collections import Counter, defaultdict
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmexplore import presets
from llmexplore.errors import SpecError
from llmexplore.models.step.kv_transfer import kv_request_bytes
from llmexplore.sweeps import transfer as sw
from llmexplore.transfer import (
    BufferKind,
    BufferLayout,
    ParallelLayout,
    PDTransferPlanner,
    RankTransferPlan,
    TransferFragment,
    UnsupportedPDLayoutError,
    decode_transfer_fragments,
    encode_transfer_fragments,
)
from llmexplore.transfer.buffers import model_buffers, model_transfer
from llmexplore.transfer.cost import plan_traffic, transfer_time
from llmexplore.transfer.layout import FRAGMENT_FIELDS, MAX_BYTES, MAX_WORLD, _fragment_ok
from llmexplore.transfer.roundtrip import roundtrip_check

PROPS = settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
KINDS = [k.value for k in BufferKind]
AXES = ["kv_head", "state_channel", "replicated"]


# ---- builders ----------------------------------------------------------------------------------------------

def kv(size, unit, item, *, group=1, index=0, kind=BufferKind.TARGET_K, axis="kv_head", page=16):
    return BufferLayout(index, kind, axis, size, page, unit, item, group)


def planner(tp_p, tp_d, pbs, dbs, *, dp_p=1, dp_d=1, pairing="index"):
    return PDTransferPlanner(prefill_layout=ParallelLayout("prefill", tp_p * dp_p, dp_p),
                             decode_layout=ParallelLayout("decode", tp_d * dp_d, dp_d),
                             prefill_buffers=pbs, decode_buffers=dbs, dp_pairing=pairing)


def spans(plan):
    """(src_rank, buffer_index, src_offset, dst_offset, bytes) of every fragment, in wire order."""
    return [(f.src_rank, f.buffer_index, f.src_byte_offset, f.dst_byte_offset, f.bytes_per_page)
            for f in plan.fragments]


def shard(b: BufferLayout, tp: int, tp_rank: int):
    """The issue's rule, written independently of the planner: [k n, (k+1) n) for a representative rank."""
    g = b.tp_replica_group_size
    if tp_rank % g:
        return None
    n = b.logical_size // (tp // g)
    return (tp_rank // g) * n, (tp_rank // g + 1) * n


# ---- 1. data model validation ----------------------------------------------------------------------------

BASE = {
    ParallelLayout: {"role": "prefill", "world_size": 4, "dp_size": 2},
    BufferLayout: {"buffer_index": 0, "buffer_kind": BufferKind.TARGET_K, "logical_axis": "kv_head",
                   "logical_size": 8, "page_size": 16, "bytes_per_logical_unit": 4096,
                   "item_stride_bytes": 8192, "tp_replica_group_size": 1},
    TransferFragment: {"buffer_index": 0, "buffer_kind": "target_k", "src_rank": 0, "dst_rank": 1,
                       "src_page_stride_bytes": 8192, "dst_page_stride_bytes": 4096, "src_byte_offset": 4096,
                       "dst_byte_offset": 0, "bytes_per_page": 4096, "page_count": None},
}
#: integer fields and their lowest valid value
INT_FIELDS = {
    ParallelLayout: {"world_size": 1, "dp_size": 1},
    BufferLayout: {"buffer_index": 0, "logical_size": 1, "page_size": 1, "bytes_per_logical_unit": 1,
                   "item_stride_bytes": 1, "tp_replica_group_size": 1},
    TransferFragment: {"buffer_index": 0, "src_rank": 0, "dst_rank": 0, "src_page_stride_bytes": 1,
                       "dst_page_stride_bytes": 1, "src_byte_offset": 0, "dst_byte_offset": 0,
                       "bytes_per_page": 1, "page_count": 1},
}
BAD_INTS = [-1, True, False, 2.5, "4", None, 4.0, [4]]


def _bad_int_cases():
    for cls, names in INT_FIELDS.items():
        for name, lo in names.items():
            for v in BAD_INTS + ([0] if lo == 1 else []):
                if name == "page_count" and v is None:
                    continue  # None is the planner's "every page"
                yield pytest.param(cls, name, v, id=f"{cls.__name__}.{name}={v!r}")


@pytest.mark.parametrize("cls, name, value", list(_bad_int_cases()))
def test_bad_integer_fields_are_rejected_naming_the_field(cls, name, value):
    with pytest.raises(UnsupportedPDLayoutError, match=rf"{cls.__name__}\.{name} must be an integer") as err:
        cls(**{**BASE[cls], name: value})
    assert repr(value) in str(err.value)  # the value
    assert isinstance(err.value, ValueError) and isinstance(err.value, SpecError)


@pytest.mark.parametrize("cls, name, value", [
    (ParallelLayout, "role", "train"), (ParallelLayout, "role", None), (ParallelLayout, "role", ["prefill"]),
    (BufferLayout, "logical_axis", "head"), (BufferLayout, "logical_axis", 0),
    (BufferLayout, "logical_axis", None), (BufferLayout, "buffer_kind", "target_q"),
    (BufferLayout, "buffer_kind", 1), (BufferLayout, "buffer_kind", None),
    (BufferLayout, "buffer_kind", ["target_k"]), (TransferFragment, "buffer_kind", "TARGET_K"),
    (TransferFragment, "buffer_kind", b"target_k"),
])
def test_bad_choices_are_rejected_naming_the_field(cls, name, value):
    with pytest.raises(UnsupportedPDLayoutError, match=rf"{cls.__name__}\.{name} must be one of"):
        cls(**{**BASE[cls], name: value})


@pytest.mark.parametrize("cls, name, huge", [(ParallelLayout, "world_size", MAX_WORLD + 1),
                                             (BufferLayout, "item_stride_bytes", MAX_BYTES + 1),
                                             (TransferFragment, "src_rank", MAX_WORLD),
                                             (TransferFragment, "bytes_per_page", MAX_BYTES + 1)])
def test_values_above_the_bounds_are_rejected(cls, name, huge):
    with pytest.raises(UnsupportedPDLayoutError, match=rf"{cls.__name__}\.{name}"):
        cls(**{**BASE[cls], name: huge})


def test_world_not_divisible_by_dp():
    rule = r"ParallelLayout\.world_size must be divisible by dp_size \(4\), got 6"
    with pytest.raises(UnsupportedPDLayoutError, match=rule):
        ParallelLayout("decode", 6, 4)
    assert ParallelLayout("decode", 8, 4).tp_size_per_dp == 2


def test_numpy_integers_and_kind_strings_are_normalised():
    p = ParallelLayout("decode", np.int64(8), np.int32(2))
    assert type(p.world_size) is int and type(p.dp_size) is int and p.tp_size_per_dp == 4
    b = BufferLayout(**{**BASE[BufferLayout], "buffer_kind": "draft_v", "logical_size": np.int16(8)})
    assert b.buffer_kind is BufferKind.DRAFT_V and type(b.logical_size) is int
    f = TransferFragment(**BASE[TransferFragment])
    assert f.buffer_kind is BufferKind.TARGET_K


@pytest.mark.parametrize("side", ["src", "dst"])
def test_fragment_range_past_its_page_stride_is_rejected(side):
    kw = {**BASE[TransferFragment]}
    # src: 4096 + 4096 = 8192 <= 8192 fits; one more byte does not. dst: 0 + 4096 <= 4096; offset 1 does not.
    TransferFragment(**kw)
    kw[f"{side}_byte_offset"] += 1
    rule = rf"TransferFragment\.{side}_byte_offset \+ bytes_per_page must be <= {side}_page_stride"
    with pytest.raises(UnsupportedPDLayoutError, match=rule):
        TransferFragment(**kw)
    with pytest.raises(UnsupportedPDLayoutError, match=r"bytes_per_page"):
        TransferFragment(**{**BASE[TransferFragment], "bytes_per_page": 8193})


def _fragment(src=0, dst=0, index=0, off=0, nbytes=8, stride=16):
    return TransferFragment(index, BufferKind.TARGET_K, src, dst, stride, stride, off, off, nbytes)


def _plan_kw(**changes):
    f0, f1 = _fragment(src=0), _fragment(src=1)
    kw = {"plan_kind": "fragmented", "target_dp_group": 0, "target_prefill_ranks": (0, 1),
          "required_prefill_response_num": 2, "fragments_by_prefill_rank": {0: (f0,), 1: (f1,)},
          "required_dst_info_num_by_prefill_rank": {0: 1, 1: 2}}
    return {**kw, **changes}


@pytest.mark.parametrize("changes, field", [
    ({"plan_kind": "partial"}, "plan_kind"),
    ({"plan_kind": None}, "plan_kind"),
    ({"target_dp_group": -1}, "target_dp_group"),
    ({"target_dp_group": 1.0}, "target_dp_group"),
    ({"target_prefill_ranks": 5}, "target_prefill_ranks"),
    ({"target_prefill_ranks": (1, 0)}, "target_prefill_ranks"),
    ({"target_prefill_ranks": (0, 0)}, "target_prefill_ranks"),
    ({"target_prefill_ranks": (0, "1")}, "target_prefill_ranks"),
    ({"required_prefill_response_num": 3}, "required_prefill_response_num"),
    ({"required_prefill_response_num": True}, "required_prefill_response_num"),
    ({"fragments_by_prefill_rank": [(0, ())]}, "fragments_by_prefill_rank"),
    ({"fragments_by_prefill_rank": {0: (_fragment(src=0),)}}, "fragments_by_prefill_rank"),
    ({"fragments_by_prefill_rank": {0: (_fragment(src=0),), 1: ()}}, "fragments_by_prefill_rank[1]"),
    ({"fragments_by_prefill_rank": {0: (_fragment(src=0),), 1: [_fragment(src=1)]}},
     "fragments_by_prefill_rank[1]"),
    ({"fragments_by_prefill_rank": {0: (_fragment(src=0),), 1: ("x",)}}, "fragments_by_prefill_rank[1]"),
    ({"fragments_by_prefill_rank": {0: (_fragment(src=0),), 1: (_fragment(src=0),)}},
     "fragments_by_prefill_rank[1]"),
    ({"required_dst_info_num_by_prefill_rank": {0: 1}}, "required_dst_info_num_by_prefill_rank"),
    ({"required_dst_info_num_by_prefill_rank": {0: 1, 1: 0}}, "required_dst_info_num_by_prefill_rank[1]"),
    ({"required_dst_info_num_by_prefill_rank": {0: 1, 1: 2.5}}, "required_dst_info_num_by_prefill_rank[1]"),
    ({"plan_kind": "identity"}, "fragments_by_prefill_rank"),  # identity plans carry no fragments
])
def test_bad_plans_are_rejected_naming_the_field(changes, field):
    RankTransferPlan(**_plan_kw())  # the base is valid
    with pytest.raises(UnsupportedPDLayoutError, match="RankTransferPlan") as err:
        RankTransferPlan(**_plan_kw(**changes))
    assert field in str(err.value)


def test_plan_lookup_of_a_non_source_rank():
    plan = RankTransferPlan(**_plan_kw())
    assert plan.required_dst_info_num_for_prefill_rank(1) == 2
    with pytest.raises(UnsupportedPDLayoutError, match=r"prefill_rank must be one of .*\[0, 1\], got 5"):
        plan.required_dst_info_num_for_prefill_rank(5)


def test_everything_is_frozen_and_plan_dicts_are_read_only():
    layout, buf = ParallelLayout(**BASE[ParallelLayout]), BufferLayout(**BASE[BufferLayout])
    frag, plan = TransferFragment(**BASE[TransferFragment]), RankTransferPlan(**_plan_kw())
    for obj, name in [(layout, "world_size"), (buf, "logical_size"), (frag, "src_byte_offset"),
                      (plan, "plan_kind"), (plan, "fragments_by_prefill_rank")]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, getattr(obj, name))
    built = planner(2, 1, (kv(4, 8, 16),), (kv(4, 8, 32),)).plan_for_decode_rank(0)  # fast-path construction
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.plan_kind = "identity"
    for d in (plan.fragments_by_prefill_rank, plan.required_dst_info_num_by_prefill_rank,
              built.fragments_by_prefill_rank, built.required_dst_info_num_by_prefill_rank):
        before = dict(d)
        for name, args in (("__setitem__", (0, 1)), ("__delitem__", (0,)), ("clear", ()), ("pop", (0,)),
                           ("popitem", ()), ("setdefault", (9, 1)), ("update", ({9: 1},))):
            with pytest.raises(TypeError, match="frozen"):
                getattr(d, name)(*args)
        with pytest.raises(TypeError, match="frozen"):
            d |= {9: 1}
        assert d == before and dict(d) == before  # unchanged, and equal to a plain dict
    assert built.required_dst_info_num_by_prefill_rank == {0: 1, 1: 1}
    assert plan.required_dst_info_num_by_prefill_rank == {0: 1, 1: 2}


def test_plans_pickle_and_hash():
    pl = planner(2, 3, (kv(6, 100, 300),), (kv(6, 100, 200),))
    for plan in (*pl.plans(), RankTransferPlan(**_plan_kw())):
        back = pickle.loads(pickle.dumps(plan))
        assert back == plan and back.fragments == plan.fragments
        assert type(back.fragments_by_prefill_rank) is type(plan.fragments_by_prefill_rank)
        with pytest.raises(TypeError):
            back.fragments_by_prefill_rank[0] = ()
        assert hash(back.fragments_by_prefill_rank) == hash(plan.fragments_by_prefill_rank)
    buf = BufferLayout(**BASE[BufferLayout])
    assert pickle.loads(pickle.dumps(buf)) == buf


@pytest.mark.parametrize("kwargs, match", [
    ({"prefill_layout": ParallelLayout("decode", 2)}, r"prefill_layout\.role must be 'prefill'"),
    ({"decode_layout": "decode TP1"}, "decode_layout must be a ParallelLayout"),
    ({"prefill_buffers": []}, "prefill_buffers must hold 1 to"),
    ({"decode_buffers": "kv"}, "decode_buffers must be a sequence"),
    ({"decode_buffers": [kv(4, 8, 32), 3]}, r"decode_buffers\[1\] must be a BufferLayout"),
    ({"prefill_buffers": [kv(4, 8, 16), kv(4, 8, 16, kind=BufferKind.TARGET_V)]}, "distinct buffer_index"),
    ({"decode_buffers": [kv(4, 8, 32), kv(4, 8, 32, index=1)]}, "same count"),
    ({"decode_buffers": [kv(4, 8, 32, index=1)]}, r"decode_buffers\[0\]\.buffer_index must equal"),
    ({"decode_buffers": [kv(4, 8, 32, kind=BufferKind.DRAFT_K)]},
     r"decode_buffers\[0\]\.buffer_kind must equal"),
    ({"decode_buffers": [kv(4, 8, 32, axis="state_channel")]},
     r"decode_buffers\[0\]\.logical_axis must equal"),
    ({"decode_buffers": [kv(8, 8, 64)]}, r"decode_buffers\[0\]\.logical_size must equal"),
    ({"decode_buffers": [kv(4, 4, 32)]}, r"decode_buffers\[0\]\.bytes_per_logical_unit must equal"),
    ({"prefill_buffers": [kv(4, 8, 16, group=3)]},
     r"prefill_buffers\[0\] \(target_k\)\.tp_replica_group_size"),
    ({"prefill_buffers": [kv(3, 8, 16)], "decode_buffers": [kv(3, 8, 24)]},
     r"prefill_buffers\[0\].*logical_size must be divisible"),
    ({"prefill_buffers": [kv(4, 8, 15)]}, r"prefill_buffers\[0\].*item_stride_bytes must hold"),
    ({"decode_buffers": [kv(4, 8, 31)]}, r"decode_buffers\[0\].*item_stride_bytes must hold"),
    ({"dp_pairing": "random"}, "dp_pairing must be one of"),
])
def test_planner_construction_errors_name_the_field(kwargs, match):
    # base: prefill TP2 -> decode TP1, one 4-unit buffer of 8 B units (prefill items 16 B, decode 32 B)
    base = {"prefill_layout": ParallelLayout("prefill", 2), "decode_layout": ParallelLayout("decode", 1),
            "prefill_buffers": [kv(4, 8, 16)], "decode_buffers": [kv(4, 8, 32)]}
    PDTransferPlanner(**base)
    with pytest.raises(UnsupportedPDLayoutError, match=match):
        PDTransferPlanner(**{**base, **kwargs})


@pytest.mark.parametrize("rank", [-1, 2, True, 1.0, "0", None])
def test_plan_for_an_out_of_range_decode_rank(rank):
    pl = planner(2, 2, (kv(4, 8, 16),), (kv(4, 8, 16),))
    with pytest.raises(UnsupportedPDLayoutError, match=r"decode_rank must be an integer in \[0, 1\]"):
        pl.plan_for_decode_rank(rank)


# ---- 2. worked examples -----------------------------------------------------------------------------------

HEAD = 16 * 128 * 2  # one KV head's page: 16 tokens x head dim 128 x 2 B (BF16) = 4096 B


def test_worked_prefill_tp4_two_heads_to_decode_tp1():
    # 2 KV heads on prefill TP4: every head on a replica group of 4 / 2 = 2 ranks; effective TP 2, shard
    # n = 2 / 2 = 1 head. Rank t represents iff t % 2 == 0: rank 0 holds head [0,1), rank 2 head [1,2),
    # ranks 1 and 3 are replicas. Decode TP1 holds [0,2) in an item of 2 x 4096 = 8192 B.
    pl = planner(4, 1, (kv(2, HEAD, HEAD, group=2),), (kv(2, HEAD, 2 * HEAD),))
    plan = pl.plan_for_decode_rank(0)
    assert plan.plan_kind == "fragmented"
    assert plan.target_prefill_ranks == (0, 2) and plan.required_prefill_response_num == 2
    # head 0 from rank 0: src offset (0 - 0) x 4096 = 0, dst (0 - 0) x 4096 = 0, 1 head = 4096 B;
    # head 1 from rank 2: src (1 - 1) x 4096 = 0, dst (1 - 0) x 4096 = 4096, 4096 B
    assert spans(plan) == [(0, 0, 0, 0, 4096), (2, 0, 0, 4096, 4096)]
    f = plan.fragments[1]
    assert (f.src_page_stride_bytes, f.dst_page_stride_bytes) == (4096, 8192)
    assert (f.dst_rank, f.page_count) == (0, None)
    assert pl.fanout() == {0: 1, 1: 0, 2: 1, 3: 0}
    assert plan.required_dst_info_num_by_prefill_rank == {0: 1, 2: 1}
    assert pl.idle_prefill_ranks() == (1, 3)


def test_worked_prefill_tp2_to_decode_tp3_six_heads():
    # 6 heads: prefill TP2 holds [0,3) | [3,6) in items of 3 x 4096 = 12288 B; decode TP3 holds
    # [0,2) | [2,4) | [4,6) in items of 2 x 4096 = 8192 B.
    pl = planner(2, 3, (kv(6, HEAD, 3 * HEAD),), (kv(6, HEAD, 2 * HEAD),))
    plans = pl.plans()
    assert [p.target_prefill_ranks for p in plans] == [(0,), (0, 1), (1,)]
    # decode 0: [0,2) ∩ [0,3) = [0,2): src 0, dst 0, 2 heads = 8192 B
    assert spans(plans[0]) == [(0, 0, 0, 0, 8192)]
    # decode 1: [2,4) ∩ [0,3) = [2,3): src (2-0) x 4096 = 8192, dst (2-2) x 4096 = 0, 4096 B;
    #           [2,4) ∩ [3,6) = [3,4): src (3-3) x 4096 = 0, dst (3-2) x 4096 = 4096, 4096 B
    assert spans(plans[1]) == [(0, 0, 8192, 0, 4096), (1, 0, 0, 4096, 4096)]
    # decode 2: [4,6) ∩ [3,6) = [4,6): src (4-3) x 4096 = 4096, dst 0, 8192 B
    assert spans(plans[2]) == [(1, 0, 4096, 0, 8192)]
    strides = {(f.src_page_stride_bytes, f.dst_page_stride_bytes) for p in plans for f in p.fragments}
    assert strides == {(12288, 8192)}
    # each prefill rank feeds two decode ranks: 0 -> {0, 1}, 1 -> {1, 2}
    assert pl.fanout() == {0: 2, 1: 2}
    assert [p.required_dst_info_num_by_prefill_rank for p in plans] == [{0: 2}, {0: 2, 1: 2}, {1: 2}]


def test_worked_replicated_buffer():
    # an MLA-like latent, replicated: 16 x (512 + 64) x 2 = 18432 B per page item on every rank. Decode TP
    # rank r reads the whole decode item from prefill TP rank (r x tp_P) // tp_D.
    item = 16 * (512 + 64) * 2
    latent_p, latent_d = kv(1, item, item, axis="replicated"), kv(1, item, item, axis="replicated")
    # TP4 -> TP3: (0x4)//3 = 0, (1x4)//3 = 1, (2x4)//3 = 2; prefill rank 3 sends nothing
    pl = planner(4, 3, (latent_p,), (latent_d,))
    assert [spans(p) for p in pl.plans()] == [[(0, 0, 0, 0, item)], [(1, 0, 0, 0, item)],
                                              [(2, 0, 0, 0, item)]]
    assert pl.fanout() == {0: 1, 1: 1, 2: 1, 3: 0} and pl.idle_prefill_ranks() == (3,)
    # TP2 -> TP4: (0x2)//4 = 0, (1x2)//4 = 0, (2x2)//4 = 1, (3x2)//4 = 1: each prefill rank feeds two
    pl = planner(2, 4, (latent_p,), (latent_d,))
    assert [p.target_prefill_ranks for p in pl.plans()] == [(0,), (0,), (1,), (1,)]
    assert pl.fanout() == {0: 2, 1: 2}
    # a decode item smaller than the prefill item (less padding): the fragment copies the decode item, 18000 B
    pl = planner(1, 2, (kv(1, item, item + 64, axis="replicated"),), (kv(1, item, item, axis="replicated"),))
    f, = pl.plan_for_decode_rank(1).fragments
    assert (f.src_rank, f.bytes_per_page) == (0, item)
    assert (f.src_page_stride_bytes, f.dst_page_stride_bytes) == (item + 64, item)


def test_worked_identity_plan():
    # TP4 -> TP4, 8 heads (2 per rank), K and V, no replica groups: decode rank r receives whole items from
    # prefill rank r, no fragments, fan-out 1
    bufs = (kv(8, HEAD, 2 * HEAD), kv(8, HEAD, 2 * HEAD, index=1, kind=BufferKind.TARGET_V))
    pl = planner(4, 4, bufs, bufs)
    assert pl.is_identity
    for r in range(4):
        plan = pl.plan_for_decode_rank(r)
        assert plan.plan_kind == "identity" and plan.fragments == () and plan.fragments_by_prefill_rank == {}
        assert plan.target_prefill_ranks == (r,) and plan.required_prefill_response_num == 1
        assert plan.required_dst_info_num_by_prefill_rank == {r: 1}
        # spelled out: one whole-shard fragment per buffer (2 heads = 8192 B) from the same rank
        explicit = pl.explicit_plan(r)
        assert explicit.plan_kind == "fragmented" and explicit.target_prefill_ranks == (r,)
        assert spans(explicit) == [(r, 0, 0, 0, 8192), (r, 1, 0, 0, 8192)]
    assert pl.fanout() == {0: 1, 1: 1, 2: 1, 3: 1}
    # a replica group anywhere turns equal TP into a fragmented plan
    g = (kv(2, HEAD, HEAD, group=2),)
    assert planner(4, 4, g, g).plan_for_decode_rank(0).plan_kind == "fragmented"


def test_worked_data_parallel_index_pairing():
    # prefill TP2 x DP2 (ranks 0,1 | 2,3) -> decode TP1 x DP2 (ranks 0 | 1), 4 heads of 4096 B.
    # Decode rank 1 = DP group 1 // 1 = 1, TP rank 0: it receives from prefill ranks 1 x 2 + {0, 1} = {2, 3}.
    pl = planner(2, 1, (kv(4, HEAD, 2 * HEAD),), (kv(4, HEAD, 4 * HEAD),), dp_p=2, dp_d=2)
    plan = pl.plan_for_decode_rank(1)
    assert plan.target_dp_group == 1 and plan.target_prefill_ranks == (2, 3)
    # rank 2 holds heads [0,2) -> dst 0; rank 3 holds [2,4) -> dst 2 x 4096 = 8192; 8192 B each
    assert spans(plan) == [(2, 0, 0, 0, 8192), (3, 0, 0, 8192, 8192)]
    assert {f.dst_rank for f in plan.fragments} == {1}
    assert pl.plan_for_decode_rank(0).target_prefill_ranks == (0, 1)
    assert pl.fanout() == {0: 1, 1: 1, 2: 1, 3: 1}
    # the group may be named, but only its own under "index"
    assert pl.plan_for_decode_rank(1, prefill_dp_group=1) == plan
    with pytest.raises(UnsupportedPDLayoutError, match=r"prefill_dp_group must be 1 .*dp_pairing='index'"):
        pl.plan_for_decode_rank(1, prefill_dp_group=0)
    # decode DP 1 < prefill DP 2: prefill group 1 serves nobody under version 1
    pl = planner(2, 1, (kv(4, HEAD, 2 * HEAD),), (kv(4, HEAD, 4 * HEAD),), dp_p=2, dp_d=1)
    assert pl.fanout() == {0: 1, 1: 1, 2: 0, 3: 0}


def test_worked_dp_pairing_any():
    # prefill TP2 x DP2 (groups {0,1}, {2,3}) -> decode TP1 x DP4: decode groups 2 and 3 have no prefill
    # group of the same index. Version 1 ("index") refuses at construction; "any" plans from the group the
    # request ran on.
    args = (2, 1, (kv(4, HEAD, 2 * HEAD),), (kv(4, HEAD, 4 * HEAD),))
    rule = r"decode_layout\.dp_size must be <= prefill_layout\.dp_size \(2\)"
    with pytest.raises(UnsupportedPDLayoutError, match=rule) as err:
        planner(*args, dp_p=2, dp_d=4)
    assert "dp_pairing='any'" in str(err.value)
    pl = planner(*args, dp_p=2, dp_d=4, pairing="any")
    plan = pl.plan_for_decode_rank(3, prefill_dp_group=1)
    assert plan.target_dp_group == 1 and plan.target_prefill_ranks == (2, 3)  # ranks of prefill group 1
    assert spans(plan) == [(2, 0, 0, 0, 8192), (3, 0, 0, 8192, 8192)]
    assert pl.plan_for_decode_rank(3, prefill_dp_group=0).target_prefill_ranks == (0, 1)
    assert pl.plan_for_decode_rank(0).target_prefill_ranks == (0, 1)  # own-index group by default
    assert pl.source_groups(3) == (0, 1)
    with pytest.raises(UnsupportedPDLayoutError, match="prefill_dp_group must be given for decode rank 3"):
        pl.plan_for_decode_rank(3)
    with pytest.raises(UnsupportedPDLayoutError, match=r"prefill_dp_group must be an integer in \[0, 1\]"):
        pl.plan_for_decode_rank(3, prefill_dp_group=2)
    # fan-out per source group: one decode rank (decode TP1) per request
    assert pl.fanout(1) == {2: 1, 3: 1} and pl.fanout() == {0: 1, 1: 1, 2: 1, 3: 1}
    assert roundtrip_check(pl, prefill_dp_group=1).ok


# ---- 3. properties over random valid layouts ---------------------------------------------------------------

def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def layouts(draw, identity=None, pairing=None):
    """Random valid planner arguments (small enough for the numpy round trip) and a source group choice.
    ``identity``: force (True) equal TP and no replica groups, or leave it to chance (None)."""
    plain = draw(st.booleans()) if identity is None else identity
    tp_p = draw(st.integers(1, 6))
    tp_d = tp_p if plain or draw(st.booleans()) else draw(st.integers(1, 6))
    pairing = pairing or draw(st.sampled_from(["index", "any"]))
    dp_p = draw(st.integers(1, 2))
    dp_d = draw(st.integers(1, dp_p if pairing == "index" else 3))
    n = draw(st.integers(1, 4))
    indexes = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n, unique=True))
    pbs, dbs = [], []
    for idx in indexes:
        axis = draw(st.sampled_from(AXES))
        kind = draw(st.sampled_from(KINDS))
        unit = draw(st.integers(1, 6))
        if axis == "replicated":
            size = draw(st.integers(1, 4))
            item_p = draw(st.integers(1, 2 * size * unit))
            item_d = draw(st.integers(1, item_p))
            g_p = g_d = 1
        else:
            g_p = 1 if plain else draw(st.sampled_from(_divisors(tp_p)))
            g_d = 1 if plain else draw(st.sampled_from(_divisors(tp_d)))
            e_p, e_d = tp_p // g_p, tp_d // g_d
            size = math.lcm(e_p, e_d) * draw(st.integers(1, 2))
            item_p = size // e_p * unit + draw(st.integers(0, unit + 1))
            item_d = size // e_d * unit + draw(st.integers(0, unit + 1))
        pbs.append(BufferLayout(idx, kind, axis, size, draw(st.integers(1, 32)), unit, item_p, g_p))
        dbs.append(BufferLayout(idx, kind, axis, size, draw(st.integers(1, 32)), unit, item_d, g_d))
    pl = planner(tp_p, tp_d, pbs, dbs, dp_p=dp_p, dp_d=dp_d, pairing=pairing)
    group = draw(st.integers(0, dp_p - 1)) if pairing == "any" else None
    return pl, group


def _check_plan(pl: PDTransferPlanner, r: int, group, plan) -> int:
    """The per-plan invariants (MODELS.md §5: 2-6, 12); returns the bytes per page the plan delivers."""
    tp_p, tp_d = pl.prefill_tp, pl.decode_tp
    d_tp = r % tp_d
    g = r // tp_d if group is None else group
    base = g * tp_p
    assert plan.target_dp_group == g
    keys = list(plan.fragments_by_prefill_rank)
    assert keys == sorted(keys) == list(plan.target_prefill_ranks)  # grouped by ascending prefill rank
    assert plan.required_prefill_response_num == len(plan.target_prefill_ranks)
    assert all(base <= p < base + tp_p for p in plan.target_prefill_ranks)
    pos = {b.buffer_index: i for i, b in enumerate(pl.decode_buffers)}
    by_buf = defaultdict(list)
    for p, fs in plan.fragments_by_prefill_rank.items():
        order = [pos[f.buffer_index] for f in fs]
        assert order == sorted(set(order))  # buffer order within a rank, one fragment per buffer
        for f in fs:
            i = pos[f.buffer_index]
            pb, db = pl.prefill_buffers[i], pl.decode_buffers[i]
            assert (f.src_rank, f.dst_rank, f.buffer_kind, f.page_count) == (p, r, db.buffer_kind, None)
            assert f.src_page_stride_bytes == pb.item_stride_bytes
            assert f.dst_page_stride_bytes == db.item_stride_bytes
            # in bounds on both sides
            assert 0 <= f.src_byte_offset and f.src_byte_offset + f.bytes_per_page <= pb.item_stride_bytes
            assert 0 <= f.dst_byte_offset and f.dst_byte_offset + f.bytes_per_page <= db.item_stride_bytes
            by_buf[i].append(f)
    delivered = 0
    for i, (pb, db) in enumerate(zip(pl.prefill_buffers, pl.decode_buffers)):
        fs = by_buf[i]
        if db.logical_axis == "replicated":  # exactly one fragment: the whole decode item
            f, = fs
            assert (f.src_rank - base, f.src_byte_offset, f.dst_byte_offset) == ((d_tp * tp_p) // tp_d, 0, 0)
            assert f.bytes_per_page == db.item_stride_bytes
            delivered += f.bytes_per_page
            continue
        iv = shard(db, tp_d, d_tp)
        if iv is None:  # a non-representative decode replica receives nothing for this buffer
            assert fs == []
            continue
        u = db.bytes_per_logical_unit
        want = (iv[1] - iv[0]) * u
        # exact cover: the destination ranges tile [0, shard bytes) with no gap and no overlap
        cover = sorted((f.dst_byte_offset, f.dst_byte_offset + f.bytes_per_page) for f in fs)
        assert cover[0][0] == 0 and cover[-1][1] == want
        assert all(a[1] == b[0] for a, b in pairwise(cover))
        for f in fs:
            p_tp = f.src_rank - base
            assert p_tp % pb.tp_replica_group_size == 0  # one replica per source: representatives only
            piv = shard(pb, tp_p, p_tp)
            assert f.src_byte_offset % u == f.dst_byte_offset % u == f.bytes_per_page % u == 0
            # index consistency: the same global logical units on both sides, inside the source's shard
            assert piv[0] + f.src_byte_offset // u == iv[0] + f.dst_byte_offset // u
            assert piv[0] + (f.src_byte_offset + f.bytes_per_page) // u <= piv[1]
        assert sum(f.bytes_per_page for f in fs) == want  # byte conservation
        delivered += want
    return delivered


@settings(PROPS, max_examples=120)
@given(case=layouts())
def test_plan_invariants(case):
    pl, group = case
    tp_p, tp_d = pl.prefill_tp, pl.decode_tp
    world_d = pl.decode_layout.world_size
    plans = [pl.plan_for_decode_rank(r, group) for r in range(world_d)]
    explicit = [pl.explicit_plan(r, group) for r in range(world_d)]
    delivered = [_check_plan(pl, r, group, e) for r, e in enumerate(explicit)]
    for r, plan in enumerate(plans):
        if pl.is_identity:
            assert plan.plan_kind == "identity" and plan.fragments == ()
            assert plan.target_prefill_ranks == explicit[r].target_prefill_ranks
        else:
            assert plan == explicit[r]
    # conservation over a decode DP group: each sharded unit arrives once, each replicated item per rank
    for h in range(pl.decode_layout.dp_size):
        got = sum(delivered[h * tp_d: (h + 1) * tp_d])
        assert got == sum(b.logical_size * b.bytes_per_logical_unit if b.logical_axis != "replicated"
                          else tp_d * b.item_stride_bytes for b in pl.decode_buffers)
    # fan-out consistency
    if pl.dp_pairing == "index":
        counts = Counter(p for plan in plans for p in plan.target_prefill_ranks)
        assert pl.fanout() == {p: counts[p] for p in range(pl.prefill_layout.world_size)}
        for g in range(pl.decode_layout.dp_size):  # every prefill rank of a served group sends or is idle
            ranks = set(range(g * tp_p, (g + 1) * tp_p))
            idle = set(pl.idle_prefill_ranks(g))
            assert idle == {p for p in ranks if counts[p] == 0}
    else:
        for h in range(pl.decode_layout.dp_size):  # per request: one decode group, from the source group
            counts = Counter(p for plan in plans[h * tp_d: (h + 1) * tp_d] for p in plan.target_prefill_ranks)
            assert pl.fanout(group) == {p: counts[p] for p in range(group * tp_p, (group + 1) * tp_p)}
    for plan in plans:
        assert plan.required_dst_info_num_by_prefill_rank == {p: counts[p] for p in plan.target_prefill_ranks}
    # determinism: a fresh planner from equal inputs (lists, not tuples) plans the same, byte for byte
    again = planner(tp_p, tp_d, list(pl.prefill_buffers), list(pl.decode_buffers),
                    dp_p=pl.prefill_layout.dp_size, dp_d=pl.decode_layout.dp_size, pairing=pl.dp_pairing)
    assert [again.plan_for_decode_rank(r, group) for r in range(world_d)] == plans
    assert [encode_transfer_fragments(again.explicit_plan(r, group).fragments) for r in range(world_d)] == \
        [encode_transfer_fragments(e.fragments) for e in explicit]


@settings(PROPS, max_examples=60)
@given(case=layouts())
def test_roundtrip_check_passes_on_every_valid_plan(case):
    pl, group = case
    rt = roundtrip_check(pl, pages=2, prefill_dp_group=group)
    assert rt.ok, rt.first_mismatch
    assert rt.mismatched_B == 0 and rt.overwritten_B == 0 and rt.first_mismatch == ""
    # checked: every representative decode shard and every replicated decode item (up to the global
    # width), times the pages
    want, not_sent = 0, []
    for r in range(pl.decode_layout.world_size):
        for b in pl.decode_buffers:
            if b.logical_axis == "replicated":
                want += min(b.item_stride_bytes, b.logical_size * b.bytes_per_logical_unit)
            elif shard(b, pl.decode_tp, r % pl.decode_tp) is None:
                not_sent.append((r, b.buffer_index))
            else:
                want += b.logical_size // (pl.decode_tp // b.tp_replica_group_size) * b.bytes_per_logical_unit
    assert rt.checked_B == 2 * want
    assert list(rt.not_sent) == not_sent


@settings(PROPS, max_examples=40)
@given(case=layouts(identity=True))
def test_identity_plan_equals_the_explicit_plan(case):
    pl, group = case
    assert pl.is_identity
    moved = 0
    for r in range(pl.decode_layout.world_size):
        plan, explicit = pl.plan_for_decode_rank(r, group), pl.explicit_plan(r, group)
        assert plan.plan_kind == "identity" and explicit.plan_kind == "fragmented"
        p = plan.target_prefill_ranks[0]
        assert explicit.target_prefill_ranks == (p,) and p % pl.prefill_tp == r % pl.decode_tp
        assert plan.required_dst_info_num_by_prefill_rank == {p: 1}
        assert explicit.required_dst_info_num_by_prefill_rank == {p: 1}
        for f, db in zip(explicit.fragments, pl.decode_buffers):  # one whole-shard fragment per buffer
            assert (f.src_rank, f.buffer_index) == (p, db.buffer_index)
            assert (f.src_byte_offset, f.dst_byte_offset) == (0, 0)
        assert len(explicit.fragments) == len(pl.decode_buffers)
        moved += sum(f.bytes_per_page for f in explicit.fragments)
    # the two forms deliver the same bytes: the round trip agrees byte for byte either way
    whole, spelled = roundtrip_check(pl, prefill_dp_group=group, explicit=False), roundtrip_check(
        pl, prefill_dp_group=group)
    assert whole.ok and spelled.ok and whole.checked_B == spelled.checked_B
    # and the explicit plans move exactly the shards (sharded) and decode items (replicated)
    assert moved == pl.decode_layout.world_size * sum(
        b.item_stride_bytes if b.logical_axis == "replicated" else b.logical_size // pl.decode_tp
        * b.bytes_per_logical_unit for b in pl.decode_buffers)


def _corrupt(plan: RankTransferPlan, how: str) -> RankTransferPlan:
    """``plan`` with one fragment changed (still a valid RankTransferPlan: only the round trip can tell)."""
    fs = list(plan.fragments)
    f = fs[0]
    if how == "src_offset":
        fs[0] = dataclasses.replace(f, src_byte_offset=f.src_byte_offset + 8)
    elif how == "dst_offset":
        fs[0] = dataclasses.replace(f, dst_byte_offset=f.dst_byte_offset + 8)
    elif how == "short":
        fs[0] = dataclasses.replace(f, bytes_per_page=f.bytes_per_page - 8)
    elif how == "drop":
        fs = fs[1:]
    elif how == "duplicate":
        fs = fs + [f]
    elif how == "wrong_rank":
        fs = [dataclasses.replace(x, src_rank=1 - x.src_rank) for x in fs]
    by: dict[int, list] = {}
    for x in fs:
        by.setdefault(x.src_rank, []).append(x)
    ranks = tuple(sorted(by))
    return RankTransferPlan("fragmented", plan.target_dp_group, ranks, len(ranks),
                            {p: tuple(by[p]) for p in ranks}, {p: 1 for p in ranks})


@pytest.mark.parametrize("how", ["src_offset", "dst_offset", "short", "drop", "duplicate", "wrong_rank"])
def test_roundtrip_check_catches_a_corrupted_plan(how, monkeypatch):
    # prefill TP2 -> decode TP1, 4 units of 8 B: prefill items 16 B + 16 B padding, decode item 32 B + 8 B
    pl = planner(2, 1, (kv(4, 8, 32),), (kv(4, 8, 40),))
    assert roundtrip_check(pl).ok
    good = pl.explicit_plan(0)
    assert spans(good) == [(0, 0, 0, 0, 16), (1, 0, 0, 16, 16)]
    bad = _corrupt(good, how)
    monkeypatch.setattr(pl, "explicit_plan", lambda r, g=None: bad)
    rt = roundtrip_check(pl, pages=3)
    assert not rt.ok
    # per page: src_offset reads bytes 8..24 of rank 0 (8 of them padding) for dst 0..16: 16 wrong bytes;
    # dst_offset writes dst 8..24: bytes 0..8 unwritten, 8..16 misplaced (16 wrong), 16..24 written twice;
    # short leaves dst 8..16 unwritten (8); drop leaves 0..16 unwritten (16); wrong_rank swaps the two
    # halves (32); duplicate writes 0..16 twice but every byte is right
    wrong = {"src_offset": 16, "dst_offset": 16, "short": 8, "drop": 16, "wrong_rank": 32, "duplicate": 0}
    assert rt.mismatched_B == 3 * wrong[how]
    assert rt.overwritten_B == 3 * {"dst_offset": 8, "duplicate": 16}.get(how, 0)
    if rt.mismatched_B:
        assert rt.first_mismatch.startswith("decode rank 0, buffer 0 (target_k), page 0")


def test_roundtrip_check_catches_a_planner_that_sends_from_a_replica(monkeypatch):
    # prefill TP4 with 2 heads (groups of 2) -> TP1: a plan that reads head 1 from rank 3 (a replica) is still
    # byte-correct (replicas hold the same head), but one that reads head 1 from rank 1 (a replica of head 0)
    # is not: the check compares the bytes, not the rank numbers.
    pl = planner(4, 1, (kv(2, 8, 8, group=2),), (kv(2, 8, 16),))
    good = pl.explicit_plan(0)
    f0, f1 = good.fragments
    for src, ok in ((3, True), (1, False)):
        bad = RankTransferPlan("fragmented", 0, (0, src), 2,
                               {0: (f0,), src: (dataclasses.replace(f1, src_rank=src),)}, {0: 1, src: 1})
        monkeypatch.setattr(pl, "explicit_plan", lambda r, g=None, bad=bad: bad)
        assert roundtrip_check(pl).ok is ok


# ---- 4. wire frames ----------------------------------------------------------------------------------------

fragment_values = st.fixed_dictionaries({
    "buffer_index": st.integers(0, MAX_BYTES), "buffer_kind": st.sampled_from(KINDS),
    "src_rank": st.integers(0, MAX_WORLD - 1), "dst_rank": st.integers(0, MAX_WORLD - 1),
    "src_stride": st.integers(1, MAX_BYTES), "dst_stride": st.integers(1, MAX_BYTES),
    "bytes": st.integers(1, MAX_BYTES), "page_count": st.none() | st.integers(1, MAX_BYTES),
    "a": st.floats(0, 1), "b": st.floats(0, 1)})


def _valid_fragment(v) -> TransferFragment:
    src, dst = max(v["src_stride"], v["bytes"]), max(v["dst_stride"], v["bytes"])
    return TransferFragment(v["buffer_index"], v["buffer_kind"], v["src_rank"], v["dst_rank"], src, dst,
                            int(v["a"] * (src - v["bytes"])), int(v["b"] * (dst - v["bytes"])), v["bytes"],
                            v["page_count"])


def _as_dict(f: TransferFragment) -> dict:
    return {n: getattr(f, n).value if n == "buffer_kind" else getattr(f, n) for n in FRAGMENT_FIELDS}


@settings(PROPS, max_examples=150)
@given(values=st.lists(fragment_values, max_size=8))
def test_encode_then_decode_is_the_identity(values):
    frags = tuple(_valid_fragment(v) for v in values)
    version, payload = encode_transfer_fragments(frags)
    assert version == b"1"
    # exactly json.dumps with compact separators, keys in field order
    assert payload == json.dumps([_as_dict(f) for f in frags], separators=(",", ":")).encode("ascii")
    if frags:
        assert list(json.loads(payload)[0]) == list(FRAGMENT_FIELDS)
    else:
        assert payload == b"[]"
    back = decode_transfer_fragments(version, payload)
    assert back == frags and all(type(f) is TransferFragment for f in back)
    assert decode_transfer_fragments(bytearray(version), memoryview(payload)) == frags
    assert encode_transfer_fragments(back) == (version, payload)


def test_encode_rejects_what_is_not_a_fragment():
    good = TransferFragment(**BASE[TransferFragment])
    with pytest.raises(UnsupportedPDLayoutError, match=r"fragments\[1\] must be a TransferFragment"):
        encode_transfer_fragments([good, _as_dict(good)])
    assert encode_transfer_fragments(iter([good])) == encode_transfer_fragments((good,))


@pytest.mark.parametrize("frames", [(None, None), (b"", b""), (None, b""), (bytearray(), memoryview(b""))])
def test_empty_frames_mean_no_fragments(frames):
    assert decode_transfer_fragments(*frames) == ()


@pytest.mark.parametrize("frames, missing", [((b"1", None), "payload"), ((b"1", b""), "payload"),
                                             ((None, b"[]"), "version"), ((b"", b"[]"), "version")])
def test_one_frame_missing(frames, missing):
    rule = f"incomplete transfer plan frames: the {missing} frame"
    with pytest.raises(UnsupportedPDLayoutError, match=rule):
        decode_transfer_fragments(*frames)


@pytest.mark.parametrize("version, match", [
    (b"2", "unsupported transfer plan protocol version=2"), (b"0", "version=0"), (b"01", None),
    (b"x", "version_frame must be the ASCII digits"), (b"1 ", "ASCII digits"), (b" 1", "ASCII digits"),
    (b"-1", "ASCII digits"), (b"1.0", "ASCII digits"), (b"\xff", "ASCII digits"), (b"1\n", "ASCII digits"),
    (b"9" * 10, "ASCII digits"), ("1", "version_frame must be bytes or None"),
    (1, "version_frame must be bytes"),
])
def test_bad_versions(version, match):
    if match is None:  # leading zeros still spell version 1
        assert decode_transfer_fragments(version, b"[]") == ()
        return
    with pytest.raises(UnsupportedPDLayoutError, match=match):
        decode_transfer_fragments(version, b"[]")


def test_non_bytes_payload():
    with pytest.raises(UnsupportedPDLayoutError, match="payload_frame must be bytes or None, got '\\[\\]'"):
        decode_transfer_fragments(b"1", "[]")


GOOD = _as_dict(TransferFragment(**BASE[TransferFragment]))


def _payload(**changes) -> bytes:
    return json.dumps([{**GOOD, **changes}]).encode()


@pytest.mark.parametrize("payload, match", [
    (b"[", "must be UTF-8 JSON"), (b"{]", "must be UTF-8 JSON"), (b"not json", "must be UTF-8 JSON"),
    (b"\xff\xfe[]", "must be UTF-8 JSON"), (b"\xef\xbb\xbf[]", "must be UTF-8 JSON"),
    (b"[] []", "UTF-8 JSON"),
    (b"[" * 100_000, "must be UTF-8 JSON"),
    (b'{"a": 1}', "must hold a JSON array of fragments, got a dict"), (b"1", "JSON array"),
    (b'"s"', "JSON array"),
    (b"null", "JSON array"), (b"[1]", "fragment 0 must be a JSON object"), (b"[[]]", "JSON object"),
    (json.dumps([GOOD, 1]).encode(), "fragment 1 must be a JSON object"),
    (json.dumps([{k: v for k, v in GOOD.items() if k != "dst_rank"}]).encode(), r"missing \['dst_rank'\]"),
    (_payload(extra=1), r"unknown \[\"'extra'\"\]"),
    (json.dumps([{k: GOOD[k] for k in reversed(FRAGMENT_FIELDS)}]).encode(), None),  # key order is free
    (_payload()[:-2] + b', "src_rank": 0}]', "key 'src_rank' appears twice"),
    (_payload(src_rank=2.0), "src_rank must be an integer, got 2.0"),
    (_payload(src_rank=2.5), "src_rank must be an integer"),
    (_payload(src_rank=True), "src_rank must be an integer"),
    (_payload(src_rank="2"), "src_rank must be an integer, got '2'"),
    (_payload(bytes_per_page=None), "bytes_per_page must be an integer"),
    (_payload(page_count=1.0), "page_count must be an integer or null"),
    (_payload(page_count=False), "page_count must be an integer or null"),
    (_payload(page_count="3"), "page_count must be an integer or null"),
    (_payload(buffer_kind=3), "buffer_kind must be a string"),
    (_payload(buffer_kind=None), "buffer_kind must be"),
    (_payload(buffer_kind=["target_k"]), "buffer_kind must be a string"),
    (_payload(buffer_kind={"v": "target_k"}), "buffer_kind must be a string"),
    (_payload(buffer_kind="target_q"), r"buffer_kind must be one of \['target_k'"),
    (_payload(buffer_kind="TARGET_K"), "buffer_kind must be one of"),
    (_payload(src_rank=-1), r"src_rank must be an integer in \[0"),
    (_payload(page_count=0), "page_count must be an integer in"),
    (_payload(src_byte_offset=4097), r"src_byte_offset \+ bytes_per_page must be <= src_page_stride_bytes"),
    (_payload().replace(b'"buffer_index": 0', b'"buffer_index": ' + b"9" * 5000), "UTF-8 JSON"),  # beyond
    # Python's int-from-text limit (4300 digits)
    (_payload().replace(b'"bytes_per_page": 4096', b'"bytes_per_page": NaN'), "NaN is not a JSON number"),
    (_payload().replace(b'"dst_rank": 1', b'"dst_rank": Infinity'), "Infinity is not a JSON number"),
    (_payload().replace(b'"dst_rank": 1', b'"dst_rank": -Infinity'), "-Infinity is not a JSON number"),
    (_payload().replace(b'"dst_rank": 1', b'"dst_rank": 1e400'), "dst_rank must be an integer, got inf"),
])
def test_bad_payloads_say_why(payload, match):
    if match is None:
        assert decode_transfer_fragments(b"1", payload) == (TransferFragment(**BASE[TransferFragment]),)
        return
    with pytest.raises(UnsupportedPDLayoutError, match=match):
        decode_transfer_fragments(b"1", payload)


def _check_decoded(out):
    assert isinstance(out, tuple)
    for f in out:  # everything that comes out is a fragment the constructor accepts
        assert type(f) is TransferFragment
        assert TransferFragment(**{n: getattr(f, n) for n in FRAGMENT_FIELDS}) == f


def _decode_or_reject(version, payload):
    try:
        out = decode_transfer_fragments(version, payload)
    except UnsupportedPDLayoutError as exc:
        assert str(exc)  # a reason
        return None
    _check_decoded(out)
    return out


@settings(PROPS, max_examples=300)
@given(version=st.binary(max_size=4) | st.sampled_from([b"1"]), payload=st.binary(max_size=200))
def test_fuzz_decode_arbitrary_bytes(version, payload):
    _decode_or_reject(version, payload)


@st.composite
def mutated_payloads(draw):
    frags = [_valid_fragment(v) for v in draw(st.lists(fragment_values, min_size=1, max_size=3))]
    data = bytearray(encode_transfer_fragments(frags)[1])
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["flip", "insert", "delete", "replace"]))
        if op == "flip" and i < len(data):
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[i:i] = draw(st.sampled_from([b"-", b"0", b".5", b"e9", b",", b"[", b"]", b"{", b"}", b'"',
                                              b"null", b"true", b" ", b"\\", b"\xff", b"9" * 20]))
        elif op == "delete" and i < len(data):
            del data[i: i + draw(st.integers(1, 8))]
        elif op == "replace" and i < len(data):
            data[i] = draw(st.integers(0, 255))
    return bytes(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 1 << 41) | st.floats(allow_nan=False) | st.text(max_size=4)
    | st.sampled_from(KINDS),
    lambda kids: st.lists(kids, max_size=2) | st.dictionaries(st.text(max_size=3), kids, max_size=2),
    max_leaves=4)


@st.composite
def structured_payloads(draw):
    """Objects with the right keys and arbitrary JSON values: reaches the per-field type checks."""
    objs = []
    for _ in range(draw(st.integers(1, 3))):
        obj = dict(GOOD)
        for name in draw(st.lists(st.sampled_from(FRAGMENT_FIELDS), max_size=3, unique=True)):
            obj[name] = draw(json_values)
        objs.append(obj)
    return json.dumps(objs).encode()


@settings(PROPS, max_examples=300)
@given(payload=mutated_payloads() | structured_payloads())
def test_fuzz_decode_mutated_payloads(payload):
    _decode_or_reject(b"1", payload)


def test_decoder_rejects_an_unhashable_buffer_kind_cleanly():
    # regression: a list or object buffer_kind with otherwise valid int fields raised TypeError (unhashable)
    for kind in (["target_k"], {"a": 1}, []):
        with pytest.raises(UnsupportedPDLayoutError, match="buffer_kind must be a string"):
            decode_transfer_fragments(b"1", _payload(buffer_kind=kind))


edge_ints = st.one_of(st.integers(-2, 40), st.integers(-(1 << 42), 1 << 42),
                      st.sampled_from([0, 1, MAX_WORLD - 1, MAX_WORLD, MAX_BYTES - 1, MAX_BYTES,
                                       MAX_BYTES + 1]))


@settings(PROPS, max_examples=400)
@given(ints=st.lists(edge_ints, min_size=8, max_size=8), page_count=st.none() | edge_ints)
def test_fast_path_check_agrees_with_the_constructor(ints, page_count):
    bi, src, dst, sps, dps, so, do, bpp = ints
    try:
        TransferFragment(bi, BufferKind.DRAFT_V, src, dst, sps, dps, so, do, bpp, page_count)
        ok = True
    except UnsupportedPDLayoutError:
        ok = False
    assert _fragment_ok(bi, src, dst, sps, dps, so, do, bpp, page_count) is ok


def test_planner_frames_roundtrip_for_a_large_world():
    # prefill TP8 -> decode TP16 with 16 heads and two buffers: every plan encodes and decodes to itself
    def bufs(item):
        return kv(16, HEAD, item), kv(16, HEAD, item, index=1, kind=BufferKind.TARGET_V)
    pl = planner(8, 16, bufs(2 * HEAD), bufs(HEAD))
    for plan in pl.plans():
        assert decode_transfer_fragments(*encode_transfer_fragments(plan.fragments)) == plan.fragments


# ---- 5. plans from model presets, and their cost -----------------------------------------------------------

LLAMA70 = presets.model("llama-3-70b")
DSV3 = presets.model("deepseek-v3")


def test_model_buffers_llama_3_70b():
    # 8 KV heads, head dim 128, page 16, BF16: one head's page = 16 x 128 x 2 = 4096 B
    assert (LLAMA70.kv_heads, LLAMA70.head_dim) == (8, 128)
    k, v = model_buffers(LLAMA70, 8, page_size=16)
    assert (k.buffer_kind, v.buffer_kind, k.buffer_index, v.buffer_index) == (BufferKind.TARGET_K,
                                                                              BufferKind.TARGET_V, 0, 1)
    assert (k.logical_axis, k.logical_size, k.bytes_per_logical_unit, k.page_size) == ("kv_head", 8, 4096, 16)
    assert (k.item_stride_bytes, k.tp_replica_group_size) == (4096, 1)  # TP8: one head per rank
    k4, _ = model_buffers(LLAMA70, 4)
    assert (k4.item_stride_bytes, k4.tp_replica_group_size) == (2 * 4096, 1)  # TP4: two heads per rank
    k16, _ = model_buffers(LLAMA70, 16)
    # TP16: each head on 16 / 8 = 2 ranks
    assert (k16.item_stride_bytes, k16.tp_replica_group_size) == (4096, 2)
    assert model_buffers(LLAMA70, 8, page_size=32, kv_dtype="fp8")[0].bytes_per_logical_unit == 32 * 128 * 1


def test_model_transfer_llama_tp8_to_tp4():
    mt = model_transfer(LLAMA70, prefill_tp=8, decode_tp=4)
    assert mt.layer_repeat == (80, 80) and mt.label == "TP8 → TP4"
    plan = mt.planner.plan_for_decode_rank(1)
    # decode rank 1 holds heads [2,4): head 2 from prefill rank 2 at dst 0, head 3 from rank 3 at dst 4096;
    # K (buffer 0) then V (buffer 1) within a rank
    assert spans(plan) == [(2, 0, 0, 0, 4096), (2, 1, 0, 0, 4096), (3, 0, 0, 4096, 4096),
                           (3, 1, 0, 4096, 4096)]
    assert mt.planner.fanout() == dict.fromkeys(range(8), 1)


def test_model_transfer_llama_tp16_replica_groups():
    mt = model_transfer(LLAMA70, prefill_tp=16, decode_tp=8)
    pl = mt.planner
    assert pl.idle_prefill_ranks() == tuple(range(1, 16, 2))  # odd ranks are replicas of their even neighbour
    assert [p.target_prefill_ranks for p in pl.plans()] == [(2 * r,) for r in range(8)]
    assert roundtrip_check(pl, pages=1).ok


@pytest.mark.parametrize("side", ["prefill_tp", "decode_tp"])
def test_model_transfer_rejects_a_tp_that_does_not_fit_the_heads(side):
    kw = {"prefill_tp": 8, "decode_tp": 4, side: 3}
    rule = rf"{side} \(3\) must divide or be a multiple of the KV heads of llama-3-70b \(8\)"
    with pytest.raises(UnsupportedPDLayoutError, match=rule):
        model_transfer(LLAMA70, **kw)


def test_model_buffers_deepseek_v3_mla_is_one_replicated_buffer():
    b, = model_buffers(DSV3, 8, page_size=16)
    # latent 512 + RoPE key 64 elements per token, BF16: 16 x 576 x 2 = 18432 B per page, on every rank
    assert (b.logical_axis, b.logical_size, b.buffer_kind) == ("replicated", 1, BufferKind.TARGET_K)
    assert b.item_stride_bytes == b.bytes_per_logical_unit == 16 * (512 + 64) * 2 == 18432
    mt = model_transfer(DSV3, prefill_tp=8, decode_tp=4, draft_layers=1)
    assert [x.buffer_kind for x in mt.planner.prefill_buffers] == [BufferKind.TARGET_K, BufferKind.DRAFT_K]
    assert mt.layer_repeat == (61, 1)


def test_draft_layers_add_draft_k_and_v():
    mt = model_transfer(LLAMA70, prefill_tp=8, decode_tp=8, draft_layers=2)
    kinds = [b.buffer_kind for b in mt.planner.decode_buffers]
    assert kinds == [BufferKind.TARGET_K, BufferKind.TARGET_V, BufferKind.DRAFT_K, BufferKind.DRAFT_V]
    assert [b.buffer_index for b in mt.planner.decode_buffers] == [0, 1, 2, 3]
    assert mt.layer_repeat == (80, 80, 2, 2)
    assert mt.planner.is_identity


@pytest.mark.parametrize("model, tp_p, tp_d", [
    ("llama-3-70b", 8, 4), ("llama-3-70b", 16, 2), ("llama-3-70b", 2, 8), ("llama-3-70b", 4, 4),
    ("llama-3-8b", 1, 8), ("qwen3-32b", 16, 1), ("deepseek-v3", 8, 4), ("deepseek-v3", 1, 16)])
@pytest.mark.parametrize("page", [16, 64])
def test_plan_traffic_matches_the_link_model_bytes(model, tp_p, tp_d, page):
    # GQA without decode replication (decode TP <= KV heads), and MLA without forwarding: bytes per page over
    # the network x pages == kv_request_bytes' physical bytes
    m = presets.model(model)
    assert m.is_mla or tp_d <= m.kv_heads
    tr = plan_traffic(model_transfer(m, prefill_tp=tp_p, decode_tp=tp_d, page_size=page))
    S = np.array([1, 100, 4096, 100_003])
    pages = np.ceil(S / page)
    physical = kv_request_bytes(m, S, page_tokens=page, prefill_tp=tp_p, decode_tp=tp_d)["physical_B"]
    np.testing.assert_allclose(tr.total_B * pages, physical, rtol=1e-12)
    assert tr.unsent_B.sum() == 0


def test_transfer_time_by_hand():
    link = presets.resolve("links", "roce-400g")
    tr = plan_traffic(model_transfer(LLAMA70, prefill_tp=8, decode_tp=4))
    # per page over 80 layers: a prefill rank sends K + V of its one head = 2 x 4096 x 80 = 655360 B; a decode
    # rank receives that from 2 ranks = 1310720 B: the busiest NIC is a decode one
    assert tr.sent_B[:8].tolist() == [655360] * 8 and tr.received_B.tolist() == [1310720] * 4
    assert tr.busiest_B == 1310720 and tr.busiest_rank == "decode 0"
    # writes: a decode rank receives 4 fragments (K, V from 2 ranks) x 80 layers = 320
    assert tr.max_writes == 320
    S = 4096
    pages = S / 16
    t = transfer_time(tr, link, S, op_overhead_us=1.0, prefill_s=np.array([0.0, 0.01, 0.2]))
    serial = link.latency_us * 1e-6 + 320 * 1e-6 + 1310720 * pages / (link.achievable_GBps * 1e9)
    assert float(t["serial_s"]) == pytest.approx(serial, rel=1e-12)
    assert float(t["busiest_B"]) == 1310720 * pages and float(t["n_ops"]) == 320
    assert float(t["ops_s"]) == pytest.approx(320e-6) and float(t["latency_s"]) == pytest.approx(25e-6)
    assert np.all(t["pipelined_s"] <= t["serial_s"] + 1e-15)
    assert t["pipelined_s"][0] == pytest.approx(serial)  # no compute to hide behind: nothing overlaps
    assert t["pipelined_s"][2] < serial / 10  # 200 ms of prefill hides nearly all of it
    unbatched = transfer_time(tr, link, S, batched_ops=False)
    assert float(unbatched["n_ops"]) == 320 * pages
    # staged: one bulk write per (prefill, decode) pair; the busiest rank (a decode rank) is in 2 pairs;
    # gather and scatter read and write the busiest sender's and receiver's bytes once each in HBM
    # (3000 GB/s here)
    assert tr.max_pairs == 2
    staged = transfer_time(tr, link, S, hbm_GBps=3000.0)
    copies = 2 * (655360 + 1310720) * pages / 3000e9
    want = link.latency_us * 1e-6 + 2 * 1e-6 + 1310720 * pages / (link.achievable_GBps * 1e9) + copies
    assert float(staged["staging_copy_s"]) == pytest.approx(copies, rel=1e-12)
    assert float(staged["staged_s"]) == pytest.approx(want, rel=1e-12)


# ---- 6. sweeps/transfer.py ---------------------------------------------------------------------------------

SUMMARY_KEYS = {"model", "layouts", "prefill", "decode", "dp_pairing", "page_size", "kv_dtype",
                "prompt_tokens", "link", "plan_kind", "max_sources", "max_fanout", "idle_prefill_ranks",
                "fragments_per_layer", "writes", "busiest", "request_MB", "busiest_MB", "local_copy_MB",
                "serial_ms", "bandwidth_ms", "ops_ms", "latency_ms", "pipelined_ms", "prefill_ms",
                "roundtrip_ok", "roundtrip_checked_B"}


def test_plan_summary_for_two_layout_pairs():
    frag = sw.plan_summary(sw.setup("llama-3-70b", prefill_tp=8, decode_tp=4, prompt_tokens=4096))
    same = sw.plan_summary(sw.setup("llama-3-70b", prefill_tp=8, decode_tp=8, prompt_tokens=4096))
    for rec in (frag, same):
        assert SUMMARY_KEYS <= set(rec)  # (other columns may be added)
        assert rec["roundtrip_ok"] is True and rec["roundtrip_checked_B"] > 0
        # one logical copy of the KV: 4096 tokens x 327680 B/token (2 x 80 layers x 8 heads x 128 x 2 B)
        assert rec["request_MB"] == pytest.approx(4096 * 327680 / 1e6)
        assert rec["local_copy_MB"] == 0
        assert 0 < rec["pipelined_ms"] <= rec["serial_ms"]
        assert rec["serial_ms"] == pytest.approx(rec["bandwidth_ms"] + rec["ops_ms"] + rec["latency_ms"])
        if "unbatched_ms" in rec:  # one write per page and fragment: never faster than batched
            assert rec["unbatched_ms"] >= rec["serial_ms"]
    assert (frag["plan_kind"], frag["max_sources"], frag["max_fanout"], frag["fragments_per_layer"]) == (
        "fragmented", 2, 1, 16)  # 4 decode ranks x (K, V) x 2 sources
    assert frag["busiest"] == "decode 0" and frag["busiest_MB"] == pytest.approx(frag["request_MB"] / 4)
    assert (same["plan_kind"], same["max_sources"], same["max_fanout"], same["fragments_per_layer"]) == (
        "identity", 1, 1, 16)  # 8 ranks x (K, V), in explicit form
    assert same["busiest_MB"] == pytest.approx(same["request_MB"] / 8)
    assert frag["layouts"] == "TP8 → TP4" and same["layouts"] == "TP8 → TP8"


def test_layout_pairs_marks_an_impossible_pair_infeasible():
    df = sw.layout_pairs("llama-3-70b", pairs=[(3, 4), (8, 4)], prompt_tokens=1024)
    assert df["feasible"].tolist() == [False, True]
    assert "prefill_tp (3)" in df["reason"][0] and df["reason"][1] == ""
    assert np.isnan(df["serial_ms"][0]) and df["serial_ms"][1] > 0
    with pytest.raises(SpecError, match=r"pairs\[0\] must be a \(prefill_tp, decode_tp\) pair"):
        sw.layout_pairs("llama-3-70b", pairs=[8])
