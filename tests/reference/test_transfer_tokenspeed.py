"""Differential tests of :mod:`llmexplore.transfer` against the runtime planner it interoperates with.

Oracle: TokenSpeed's version-1 transfer planner, ``lightseekorg/tokenspeed``
``python/tokenspeed/runtime/pd/transfer_plan.py`` at commit 215acaf14e3394e2f508f748df72e38fb24b90c2
(June 2026, MIT), copied verbatim into ``tests/reference/tokenspeed_transfer_plan_v1.py``. Its held-out unit
case (``test/runtime/distributed/test_pd_transfer_plan.py`` at the parent of commit ed545eac) and the cases
listed in ../shared/design/PEERS.md §1.13 are replayed against both planners; hypothesis then draws random
valid layout pairs and buffer sets and requires the two planners to agree on every plan field by field and
on every wire byte, and random invalid ones that the runtime rejects to be rejected by ours too (ours
rejects a few more: decode DP > prefill DP, where the runtime crashes with ``KeyError``; empty buffer lists;
duplicate buffer indexes; a replicated buffer whose decode item is larger than the prefill item).
"""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmexplore.transfer as ours
from llmexplore.transfer.layout import FRAGMENT_FIELDS

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tokenspeed_transfer_plan_v1 as ts  # the oracle, next to this file

pytestmark = pytest.mark.reference

DIFF = settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
KINDS = [k.value for k in ours.BufferKind]
AXES = ["kv_head", "state_channel", "replicated"]


# ---- helpers -----------------------------------------------------------------------------------------------

def fields(f) -> tuple:
    """A fragment of either implementation as plain values (the BufferKind enums are different classes)."""
    return tuple(getattr(f, n).value if n == "buffer_kind" else getattr(f, n) for n in FRAGMENT_FIELDS)


def build(lib, spec):
    """``lib.PDTransferPlanner`` for a plain-data spec (``lib``: :mod:`llmexplore.transfer` or the oracle)."""
    def buffers(side):
        return tuple(lib.BufferLayout(**{**kw, "buffer_kind": lib.BufferKind(kw["buffer_kind"])})
                     for kw in spec[f"{side}_buffers"])
    return lib.PDTransferPlanner(
        prefill_layout=lib.ParallelLayout("prefill", spec["prefill_world"], spec["prefill_dp"]),
        decode_layout=lib.ParallelLayout("decode", spec["decode_world"], spec["decode_dp"]),
        prefill_buffers=buffers("prefill"), decode_buffers=buffers("decode"))


def flat(plan) -> tuple:
    return tuple(f for fs in plan.fragments_by_prefill_rank.values() for f in fs)


def assert_same_plans(mine: ours.PDTransferPlanner, ref: ts.PDTransferPlanner) -> int:
    """Every decode rank's plan equal field by field, and the wire frames byte-identical and mutually
    decodable. Returns the number of fragments compared."""
    assert mine.fanout() == ref._required_dst_info_num_by_prefill_rank
    world = ref.decode_layout.world_size
    n = 0
    for r in range(world):
        a, b = mine.plan_for_decode_rank(r), ref.plan_for_decode_rank(r)
        assert a.plan_kind == b.plan_kind, r
        assert a.target_dp_group == b.target_dp_group, r
        assert a.target_prefill_ranks == b.target_prefill_ranks, r
        assert a.required_prefill_response_num == b.required_prefill_response_num, r
        assert a.required_dst_info_num_by_prefill_rank == b.required_dst_info_num_by_prefill_rank, r
        assert list(a.fragments_by_prefill_rank) == list(b.fragments_by_prefill_rank), r  # same order too
        for p, fs in b.fragments_by_prefill_rank.items():
            assert [fields(f) for f in a.fragments_by_prefill_rank[p]] == [fields(f) for f in fs], (r, p)
        for p in b.target_prefill_ranks:
            assert a.required_dst_info_num_for_prefill_rank(p) == b.required_dst_info_num_for_prefill_rank(p)
        # wire: byte-identical encoding, and each side decodes the other's frames
        frames = ours.encode_transfer_fragments(a.fragments)
        ref_frames = ts.encode_transfer_fragments(flat(b))
        assert frames == ref_frames, r
        assert [fields(f) for f in ts.decode_transfer_fragments(*frames)] == [fields(f) for f in a.fragments]
        assert ours.decode_transfer_fragments(*ref_frames) == a.fragments
        n += len(a.fragments)
    # out-of-range decode ranks: both reject with UnsupportedPDLayoutError
    for bad in (-1, world):
        with pytest.raises(ts.UnsupportedPDLayoutError):
            ref.plan_for_decode_rank(bad)
        with pytest.raises(ours.UnsupportedPDLayoutError, match="decode_rank"):
            mine.plan_for_decode_rank(bad)
    return n


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def valid_specs(draw, max_tp: int = 8, max_dp: int = 3):
    """A valid layout pair and buffer set as plain data: TP/DP on both sides (decode DP <= prefill DP), 1-5
    buffers of random kinds and axes, replica groups dividing each side's TP, logical sizes divisible by both
    effective TPs, items that hold their shard (with random slack), page sizes and strides that differ
    between the sides, replicated buffers whose decode item is at most the prefill item."""
    tp_p = draw(st.integers(1, max_tp))
    tp_d = tp_p if draw(st.booleans()) else draw(st.integers(1, max_tp))
    dp_p = draw(st.integers(1, max_dp))
    dp_d = draw(st.integers(1, dp_p))
    n = draw(st.integers(1, 5))
    indexes = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n, unique=True))
    plain = draw(st.booleans())  # replica groups of 1 everywhere: identity plans when tp_p == tp_d
    pbs, dbs = [], []
    for idx in indexes:
        axis = draw(st.sampled_from(AXES))
        unit = draw(st.integers(1, 48))
        common = {"buffer_index": idx, "buffer_kind": draw(st.sampled_from(KINDS)), "logical_axis": axis,
                  "bytes_per_logical_unit": unit}
        if axis == "replicated":
            size = draw(st.integers(1, 8))
            item_p = draw(st.integers(1, 3 * size * unit))
            item_d = draw(st.integers(1, item_p))
            g_p = 1 if plain else draw(st.integers(1, 3))  # not validated for replicated buffers
            g_d = 1 if plain else draw(st.integers(1, 3))
        else:
            g_p = 1 if plain else draw(st.sampled_from(divisors(tp_p)))
            g_d = 1 if plain else draw(st.sampled_from(divisors(tp_d)))
            e_p, e_d = tp_p // g_p, tp_d // g_d
            size = math.lcm(e_p, e_d) * draw(st.integers(1, 3))
            item_p = size // e_p * unit + draw(st.integers(0, 2 * unit))
            item_d = size // e_d * unit + draw(st.integers(0, 2 * unit))
        for out, item, g in ((pbs, item_p, g_p), (dbs, item_d, g_d)):
            out.append({**common, "logical_size": size, "page_size": draw(st.integers(1, 64)),
                        "item_stride_bytes": item, "tp_replica_group_size": g})
    return {"prefill_world": tp_p * dp_p, "prefill_dp": dp_p, "decode_world": tp_d * dp_d, "decode_dp": dp_d,
            "prefill_buffers": pbs, "decode_buffers": dbs}


# ---- held-out cases ----------------------------------------------------------------------------------------

def _kv(lib, size, unit, item, group=1, index=0, page=1, axis="kv_head"):
    return lib.BufferLayout(buffer_index=index, buffer_kind=lib.BufferKind.TARGET_K, logical_axis=axis,
                            logical_size=size, page_size=page, bytes_per_logical_unit=unit,
                            item_stride_bytes=item, tp_replica_group_size=group)


def _pair(lib, tp_p, tp_d, pb, db):
    return lib.PDTransferPlanner(prefill_layout=lib.ParallelLayout(role="prefill", world_size=tp_p),
                                 decode_layout=lib.ParallelLayout(role="decode", world_size=tp_d),
                                 prefill_buffers=(pb,), decode_buffers=(db,))


@pytest.mark.parametrize("lib", [ours, ts], ids=["llmexplore", "tokenspeed"])
def test_held_out_replicated_prefill_kv_heads_to_decode_full_kv_heads(lib):
    # TokenSpeed test_replicated_prefill_kv_heads_transfer_to_decode_full_kv_heads: prefill TP4 with 2 KV
    # heads (replica group 2), items of 16384 B = 64 units of 256 B; decode TP1, one item of 32768 B = 128
    # units. The layouts are the ones its _build_buffer_layout_pair returns (page_size 1; asserted there:
    # logical 128, replica group 2 on prefill and 1 on decode).
    pl = _pair(lib, 4, 1, _kv(lib, 128, 256, 16_384, group=2), _kv(lib, 128, 256, 32_768))
    plan = pl.plan_for_decode_rank(0)
    assert plan.plan_kind == "fragmented"
    assert plan.target_prefill_ranks == (0, 2)  # ranks 1 and 3 are non-representative replicas
    assert plan.required_prefill_response_num == 2
    assert plan.required_dst_info_num_by_prefill_rank == {0: 1, 2: 1}
    first_head, = plan.fragments_by_prefill_rank[0]
    second_head, = plan.fragments_by_prefill_rank[2]
    def span(f):
        return f.src_byte_offset, f.dst_byte_offset, f.bytes_per_page
    assert span(first_head) == (0, 0, 16_384)
    assert span(second_head) == (0, 16_384, 16_384)
    assert (first_head.src_page_stride_bytes, first_head.dst_page_stride_bytes) == (16_384, 32_768)


@pytest.mark.parametrize("lib", [ours, ts], ids=["llmexplore", "tokenspeed"])
def test_held_out_tp2_to_tp3_six_heads(lib):
    # PEERS.md §1.13: TP2 -> TP3 on 6 heads targets [(0,), (0, 1), (1,)]. Heads of 100 B: prefill ranks hold
    # [0,3) and [3,6); decode ranks [0,2), [2,4), [4,6).
    pl = _pair(lib, 2, 3, _kv(lib, 6, 100, 300), _kv(lib, 6, 100, 200))
    plans = [pl.plan_for_decode_rank(r) for r in range(3)]
    assert [p.target_prefill_ranks for p in plans] == [(0,), (0, 1), (1,)]
    got = [[(f.src_rank, f.src_byte_offset, f.dst_byte_offset, f.bytes_per_page) for f in flat(p)]
           for p in plans]
    assert got == [[(0, 0, 0, 200)], [(0, 200, 0, 100), (1, 0, 100, 100)], [(1, 100, 0, 200)]]
    assert [p.required_dst_info_num_by_prefill_rank for p in plans] == [{0: 2}, {0: 2, 1: 2}, {1: 2}]


@pytest.mark.parametrize("lib", [ours, ts], ids=["llmexplore", "tokenspeed"])
def test_held_out_tp2_to_tp1_and_tp1_to_tp2(lib):
    # PEERS.md §1.13: TP2 -> TP1 targets prefill ranks (0, 1)
    plan = _pair(lib, 2, 1, _kv(lib, 2, 8, 8), _kv(lib, 2, 8, 16)).plan_for_decode_rank(0)
    assert plan.target_prefill_ranks == (0, 1)
    got = [(f.src_byte_offset, f.dst_byte_offset, f.bytes_per_page) for f in flat(plan)]
    assert got == [(0, 0, 8), (0, 8, 8)]
    # TP1 -> TP2: decode rank 1's k fragment: src offset 8, dst 0, 8 bytes, strides 16/8
    f, = flat(_pair(lib, 1, 2, _kv(lib, 2, 8, 16), _kv(lib, 2, 8, 8)).plan_for_decode_rank(1))
    assert (f.src_rank, f.dst_rank, f.src_byte_offset, f.dst_byte_offset, f.bytes_per_page) == (0, 1, 8, 0, 8)
    assert (f.src_page_stride_bytes, f.dst_page_stride_bytes) == (16, 8)


@pytest.mark.parametrize("tp_p, tp_d, p_args, d_args, fragments", [
    (4, 1, (128, 256, 16_384, 2), (128, 256, 32_768), 2),
    (2, 3, (6, 100, 300), (6, 100, 200), 4),
    (2, 1, (2, 8, 8), (2, 8, 16), 2),
    (1, 2, (2, 8, 16), (2, 8, 8), 2),
    (4, 4, (8, 4, 8), (8, 4, 8), 0),  # identity: no fragments
])
def test_held_out_cases_agree_field_by_field(tp_p, tp_d, p_args, d_args, fragments):
    n = assert_same_plans(_pair(ours, tp_p, tp_d, _kv(ours, *p_args), _kv(ours, *d_args)),
                          _pair(ts, tp_p, tp_d, _kv(ts, *p_args), _kv(ts, *d_args)))
    assert n == fragments


# ---- random valid configurations ---------------------------------------------------------------------------

@settings(DIFF, max_examples=150)
@given(spec=valid_specs())
def test_random_valid_layouts_plan_like_the_runtime(spec):
    mine, ref = build(ours, spec), build(ts, spec)
    assert_same_plans(mine, ref)
    same_tp = spec["prefill_world"] // spec["prefill_dp"] == spec["decode_world"] // spec["decode_dp"]
    groups = [b["tp_replica_group_size"] for side in ("prefill_buffers", "decode_buffers")
              for b in spec[side]]
    assert mine.is_identity == (same_tp and set(groups) == {1})


fragment_values = st.fixed_dictionaries({
    "buffer_index": st.integers(0, 1 << 40), "buffer_kind": st.sampled_from(KINDS),
    "src_rank": st.integers(0, (1 << 16) - 1), "dst_rank": st.integers(0, (1 << 16) - 1),
    "stride": st.integers(1, 1 << 40), "dst_stride": st.integers(1, 1 << 40),
    "bytes": st.integers(1, 1 << 40),
    "page_count": st.none() | st.integers(1, 1 << 40), "a": st.floats(0, 1), "b": st.floats(0, 1)})


def _fragment_kwargs(v) -> dict:
    """Valid fragment fields from drawn numbers: offsets placed so that offset + bytes <= stride."""
    src_stride, dst_stride = max(v["stride"], v["bytes"]), max(v["dst_stride"], v["bytes"])
    return {"buffer_index": v["buffer_index"], "buffer_kind": v["buffer_kind"], "src_rank": v["src_rank"],
            "dst_rank": v["dst_rank"], "src_page_stride_bytes": src_stride,
            "dst_page_stride_bytes": dst_stride,
            "src_byte_offset": int(v["a"] * (src_stride - v["bytes"])),
            "dst_byte_offset": int(v["b"] * (dst_stride - v["bytes"])), "bytes_per_page": v["bytes"],
            "page_count": v["page_count"]}


@settings(DIFF, max_examples=150)
@given(values=st.lists(fragment_values, max_size=6))
def test_random_fragments_encode_like_the_runtime(values):
    kws = [_fragment_kwargs(v) for v in values]
    def made(lib):
        return tuple(lib.TransferFragment(**{**kw, "buffer_kind": lib.BufferKind(kw["buffer_kind"])})
                     for kw in kws)
    mine, ref = made(ours), made(ts)
    frames = ours.encode_transfer_fragments(mine)
    assert frames == ts.encode_transfer_fragments(ref)
    assert frames[0] == b"1"
    assert [fields(f) for f in ts.decode_transfer_fragments(*frames)] == [fields(f) for f in mine]
    assert ours.decode_transfer_fragments(*ts.encode_transfer_fragments(ref)) == mine


# ---- invalid configurations --------------------------------------------------------------------------------

MUTATIONS = ["drop_decode_buffer", "field_mismatch", "bad_group", "bad_logical", "small_item", "bad_layout",
             "bad_buffer_value", "decode_dp_greater", "duplicate_index", "empty", "replicated_bigger"]


@st.composite
def mutated_specs(draw):
    """A valid spec with one rule (possibly) broken; some mutations may happen to keep it valid."""
    spec = copy.deepcopy(draw(valid_specs(max_tp=6, max_dp=2)))
    how = draw(st.sampled_from(MUTATIONS))
    pbs, dbs = spec["prefill_buffers"], spec["decode_buffers"]
    i = draw(st.integers(0, len(pbs) - 1))
    side = draw(st.sampled_from(["prefill", "decode"]))
    bufs = pbs if side == "prefill" else dbs
    tp = spec[f"{side}_world"] // spec[f"{side}_dp"]
    if how == "drop_decode_buffer":
        dbs.pop(i)
    elif how == "field_mismatch":
        name = draw(st.sampled_from(["buffer_index", "buffer_kind", "logical_axis", "logical_size",
                                     "bytes_per_logical_unit"]))
        old = dbs[i][name]
        if name == "buffer_kind":
            dbs[i][name] = draw(st.sampled_from([k for k in KINDS if k != old]))
        elif name == "logical_axis":
            dbs[i][name] = draw(st.sampled_from([a for a in AXES if a != old]))
        else:
            dbs[i][name] = old + draw(st.integers(1, 5))
    elif how == "bad_group":
        bufs[i]["tp_replica_group_size"] = draw(st.integers(1, 2 * tp + 1))
    elif how == "bad_logical":
        size = draw(st.integers(1, 64))
        pbs[i]["logical_size"] = dbs[i]["logical_size"] = size
    elif how == "small_item":
        bufs[i]["item_stride_bytes"] = draw(st.integers(1, bufs[i]["item_stride_bytes"]))
    elif how == "bad_layout":
        spec[f"{side}_world"] = draw(st.integers(-1, 12))
        spec[f"{side}_dp"] = draw(st.integers(-1, 4))
    elif how == "bad_buffer_value":
        name = draw(st.sampled_from(["logical_size", "page_size", "bytes_per_logical_unit",
                                     "item_stride_bytes", "tp_replica_group_size"]))
        bufs[i][name] = draw(st.integers(-3, 0))
    elif how == "decode_dp_greater":
        dp = spec["prefill_dp"] + draw(st.integers(1, 2))
        spec["decode_world"] = spec["decode_world"] // spec["decode_dp"] * dp
        spec["decode_dp"] = dp
    elif how == "duplicate_index":
        j = draw(st.integers(0, len(pbs) - 1))
        pbs[j]["buffer_index"] = dbs[j]["buffer_index"] = pbs[i]["buffer_index"]
    elif how == "empty":
        pbs.clear()
        dbs.clear()
    elif how == "replicated_bigger":
        for p, d in zip(pbs, dbs):
            if p["logical_axis"] == "replicated":
                d["item_stride_bytes"] = p["item_stride_bytes"] + draw(st.integers(0, 64))
    return how, spec


def _only_ours_rejects(spec) -> list[str]:
    """The rules our planner adds to the runtime's (the field each names)."""
    why = []
    pbs, dbs = spec["prefill_buffers"], spec["decode_buffers"]
    if not pbs or not dbs:
        why.append("buffers")
    for bufs in (pbs, dbs):
        idx = [b["buffer_index"] for b in bufs]
        if len(set(idx)) != len(idx):
            why.append("buffer_index")
    if spec["decode_dp"] > spec["prefill_dp"]:
        why.append("dp_size")
    for p, d in zip(pbs, dbs):
        replicated = p["logical_axis"] == d["logical_axis"] == "replicated"
        if replicated and d["item_stride_bytes"] > p["item_stride_bytes"]:
            why.append("item_stride_bytes")
    return why


def _outcome(lib, spec):
    try:
        return "ok", build(lib, spec)
    except lib.UnsupportedPDLayoutError as exc:
        return "rejected", exc
    except KeyError as exc:  # the runtime's fan-out count when a decode DP group has no prefill partner
        assert lib is ts, exc
        return "keyerror", exc


@settings(DIFF, max_examples=300)
@given(case=mutated_specs())
def test_invalid_layouts_the_runtime_rejects_are_rejected(case):
    how, spec = case
    ref_kind, ref = _outcome(ts, spec)
    mine_kind, mine = _outcome(ours, spec)
    extra = _only_ours_rejects(spec)
    if ref_kind == "rejected":
        assert mine_kind == "rejected", (how, ref)
        assert isinstance(mine, ValueError)
    elif ref_kind == "keyerror":
        assert mine_kind == "rejected" and "dp_size" in extra, how
    elif extra:
        assert mine_kind == "rejected", (how, extra)
        assert any(name in str(mine) for name in extra), (how, extra, str(mine))
    else:  # both accept: the mutation kept the configuration valid, so the plans must agree
        assert mine_kind == "ok", (how, mine)
        assert_same_plans(mine, ref)


# ---- what only ours rejects, spelled out -------------------------------------------------------------------

def _spec(tp_p=2, dp_p=1, tp_d=1, dp_d=1, prefill=None, decode=None):
    kv = {"buffer_index": 0, "buffer_kind": "target_k", "logical_axis": "kv_head", "logical_size": 4,
          "page_size": 16, "bytes_per_logical_unit": 64, "item_stride_bytes": 256, "tp_replica_group_size": 1}
    return {"prefill_world": tp_p * dp_p, "prefill_dp": dp_p, "decode_world": tp_d * dp_d, "decode_dp": dp_d,
            "prefill_buffers": [kv] if prefill is None else prefill,
            "decode_buffers": [kv] if decode is None else decode}


def test_decode_dp_greater_than_prefill_dp_keyerror_in_runtime_clear_error_in_ours():
    spec = _spec(tp_p=2, dp_p=1, tp_d=1, dp_d=2)
    with pytest.raises(KeyError):
        build(ts, spec)
    with pytest.raises(ours.UnsupportedPDLayoutError, match=r"decode_layout\.dp_size") as err:
        build(ours, spec)
    assert "dp_pairing='any'" in str(err.value)


def test_empty_buffer_lists_accepted_by_runtime_rejected_by_ours():
    spec = _spec(prefill=[], decode=[])
    assert build(ts, spec).plan_for_decode_rank(0).target_prefill_ranks == ()  # a plan that moves nothing
    with pytest.raises(ours.UnsupportedPDLayoutError, match="prefill_buffers must hold 1 to"):
        build(ours, spec)


def test_duplicate_buffer_indexes_accepted_by_runtime_rejected_by_ours():
    k = _spec()["prefill_buffers"][0]
    v = {**k, "buffer_kind": "target_v"}  # same buffer_index 0
    spec = _spec(prefill=[k, v], decode=[k, v])
    assert len(flat(build(ts, spec).plan_for_decode_rank(0))) == 4
    with pytest.raises(ours.UnsupportedPDLayoutError, match="distinct buffer_index"):
        build(ours, spec)


def test_replicated_decode_item_larger_than_prefill_item_rejected_by_ours():
    rep = {"buffer_index": 0, "buffer_kind": "target_k", "logical_axis": "replicated", "logical_size": 1,
           "page_size": 16, "bytes_per_logical_unit": 512, "item_stride_bytes": 512,
           "tp_replica_group_size": 1}
    spec = _spec(prefill=[rep], decode=[{**rep, "item_stride_bytes": 1024}])
    f, = flat(build(ts, spec).plan_for_decode_rank(0))
    assert f.bytes_per_page > f.src_page_stride_bytes  # the runtime would copy past the 512 B source item
    with pytest.raises(ours.UnsupportedPDLayoutError, match=r"decode_buffers\[0\]\.item_stride_bytes") as err:
        build(ours, spec)
    assert "1024" in str(err.value) and "512" in str(err.value)


# ---- pipeline stages (issue 21): every stage pair is the runtime's version-1 plan between local ranks ---------

@settings(DIFF, max_examples=80)
@given(spec=valid_specs(max_tp=6, max_dp=2), data=st.data())
def test_every_stage_pair_of_a_pipelined_plan_is_the_runtimes_plan(spec, data):
    """A pipelined plan (llmexplore.transfer.pipeline: layer ranges intersected as TensorRT-LLM's
    TargetRanksInfoForDP does) moves, between each prefill stage and decode stage that share layers, exactly the
    fragments TokenSpeed's version-1 planner gives the two stages' local ranks, with the same wire bytes; its
    sources are those of every stage it meets, offset by stage x ranks per stage."""
    from llmexplore.transfer.pipeline import PipelineTransferPlanner

    mine, ref = build(ours, spec), build(ts, spec)
    layers = data.draw(st.integers(1, 10))

    def split():
        pp = data.draw(st.integers(1, min(layers, 4)))
        cuts = sorted(data.draw(st.lists(st.integers(1, layers - 1), min_size=pp - 1, max_size=pp - 1,
                                         unique=True))) if pp > 1 else []
        return [b - a for a, b in zip([0, *cuts], [*cuts, layers])]

    pipe = PipelineTransferPlanner(mine, prefill_stage_layers=split(), decode_stage_layers=split(),
                                   buffer_layers=[(0, layers)] * len(mine.prefill_buffers))
    wp, wd = mine.prefill_layout.world_size, mine.decode_layout.world_size
    for R in range(pipe.decode_world):
        plan = pipe.plan_for_decode_rank(R)
        b_plan = ref.plan_for_decode_rank(R % wd)
        met = [p.prefill_stage for p in pipe.pairs if p.decode_stage == R // wd]
        assert plan.target_prefill_ranks == tuple(a * wp + p for a in met for p in b_plan.target_prefill_ranks)
        assert [sp.prefill_stage for sp in plan.stage_plans] == met
        for sp in plan.stage_plans:
            if b_plan.plan_kind == "fragmented":
                assert [fields(f) for f in sp.fragments] == [fields(f) for f in flat(b_plan)]
                assert ours.encode_transfer_fragments(sp.fragments) == ts.encode_transfer_fragments(flat(b_plan))
            else:  # identity: whole items from the same-position rank of that stage (the explicit form)
                assert {f.src_rank for f in sp.fragments} == set(b_plan.target_prefill_ranks)
