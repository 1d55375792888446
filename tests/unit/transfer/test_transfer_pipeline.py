"""Tests of pipeline stages and speculative decoding in KV transfer plans (issue 21; llmexplore/transfer/pipeline.py,
buffers.py, cost.py, roundtrip.py and sweeps/transfer.py).

* the stage rule as TensorRT-LLM's cache transceiver states it (``TargetRanksInfoForDP``,
  cpp/tensorrt_llm/executor/cache_transmission/cacheSplitConcat.cu at NVIDIA/TensorRT-LLM a2b02652: a peer stage is
  a target iff its layer range meets this one's, and it sends the layers they share), rewritten here independently;
* hypothesis properties over random layouts, buffers and stage splits: every byte of every layer arrives exactly
  once, from a rank whose stage holds the layer, at a rank whose stage holds it, fan-out consistency, the
  layer-by-layer round-trip check (which must also catch a corrupted plan), and one stage on each side is the
  version-1 plan exactly;
* worked examples: 2 -> 3 stages over Llama-3-70B's 80 layers, equal PP on DeepSeek-V3, per-stage byte totals
  against the request's KV, DeepSeek-V3's MTP draft layer against its config.json, SGLang's speculative state;
* the pipelined prefill's exposed time against a brute-force per-layer recurrence, and the rejections.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmexplore import presets
from llmexplore.errors import SpecError, UnknownPresetError
from llmexplore.models.step.engine import Deployment
from llmexplore.models.step.kv_transfer import kv_request_bytes, pipelined_exposed_s
from llmexplore.models.step.per_token import check_decoding
from llmexplore.models.step.pipeline import stage_layers
from llmexplore.sweeps import transfer as sw
from llmexplore.transfer import BufferKind, BufferLayout, ParallelLayout, PDTransferPlanner, UnsupportedPDLayoutError
from llmexplore.transfer.buffers import SPEC_STATE_WRITES, model_transfer, spec_state_bytes
from llmexplore.transfer.cost import plan_traffic, transfer_time
from llmexplore.transfer.pipeline import LayerFragment, PipelineTransferPlanner, layer_ranges, stage_overlaps
from llmexplore.transfer.roundtrip import pipeline_roundtrip_check, roundtrip_check

PROPS = settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
LLAMA70 = presets.model("llama-3-70b")
DSV3 = presets.model("deepseek-v3")
ROCE = presets.link("roce-400g")


def _pairs_by_hand(prefill_counts, decode_counts):
    """TensorRT-LLM's rule, written out: for each decode stage, every prefill stage with
    ``selfStart < peerEnd and selfEnd > peerStart``, sending ``min(ends) - max(starts)`` layers."""
    def bounds(counts):
        out, lo = [], 0
        for n in counts:
            out.append((lo, lo + n))
            lo += n
        return out
    out = set()
    for b, (s0, s1) in enumerate(bounds(decode_counts)):
        for a, (p0, p1) in enumerate(bounds(prefill_counts)):
            if s0 < p1 and s1 > p0:
                out.add((a, b, max(p0, s0), min(p1, s1)))
    return out


# ---- 1. the stage rule ------------------------------------------------------------------------------------

@settings(PROPS, max_examples=200)
@given(p=st.lists(st.integers(1, 9), min_size=1, max_size=6), data=st.data())
def test_stage_overlaps_follow_tensorrt_llm_and_cover_every_layer_once(p, data):
    total = sum(p)
    d_pp = data.draw(st.integers(1, total))
    cuts = sorted(data.draw(st.lists(st.integers(1, total - 1), min_size=d_pp - 1, max_size=d_pp - 1,
                                     unique=True))) if d_pp > 1 else []
    d = [b - a for a, b in zip([0, *cuts], [*cuts, total])]
    pairs = stage_overlaps(p, d)
    assert {(x.prefill_stage, x.decode_stage, x.layer_start, x.layer_end) for x in pairs} == _pairs_by_hand(p, d)
    # every layer in exactly one pair; per stage the pairs add up to its layers (TensorRT-LLM's TLLM_CHECK)
    layers = Counter(l for x in pairs for l in range(x.layer_start, x.layer_end))
    assert layers == Counter(range(total))
    for a, n in enumerate(p):
        assert sum(x.layers for x in pairs if x.prefill_stage == a) == n
    for b, n in enumerate(d):
        assert sum(x.layers for x in pairs if x.decode_stage == b) == n
    assert layer_ranges(p)[-1][1] == total


def test_two_to_three_stages_over_eighty_layers():
    """Llama-3-70B, prefill TP8 x PP2 -> decode TP4 x PP3: stage_layers splits 80 into 40 + 40 and 27 + 27 + 26
    (the first stages take the remainder); four of the six stage pairs talk."""
    assert stage_layers(LLAMA70, 2) == [40, 40] and stage_layers(LLAMA70, 3) == [27, 27, 26]
    mt = model_transfer(LLAMA70, prefill_tp=8, decode_tp=4, prefill_pp=2, decode_pp=3)
    assert [(x.prefill_stage, x.decode_stage, x.layer_start, x.layer_end) for x in mt.pipeline.pairs] == [
        (0, 0, 0, 27), (0, 1, 27, 40), (1, 1, 40, 54), (1, 2, 54, 80)]
    # one layer of one page: K and V of 8 heads of 16 tokens x 128 x 2 B = 2 x 8 x 4096 = 65,536 B
    per_layer = 2 * 8 * 16 * 128 * 2
    assert mt.pipeline.stage_bytes_per_page() == {(0, 0): 27 * per_layer, (0, 1): 13 * per_layer,
                                                 (1, 1): 14 * per_layer, (1, 2): 26 * per_layer}
    s = sw.setup("llama-3-70b", prefill_tp=8, decode_tp=4, prefill_pp=2, decode_pp=3, prompt_tokens=4096)
    table = sw.stage_pair_table(s)
    assert table["MB"].tolist() == pytest.approx([27 * per_layer * 256 / 1e6, 13 * per_layer * 256 / 1e6,
                                                  14 * per_layer * 256 / 1e6, 26 * per_layer * 256 / 1e6])
    assert table["MB"].tolist()[0] == pytest.approx(452.984832)  # 27 layers of a 4,096-token request
    # decode stage 1 (layers 27-53) gathers from both prefill stages: 2 ranks of each (TP8 -> TP4)
    plan = mt.pipeline.plan_for_decode_rank(4)  # decode stage 1, TP rank 0
    assert plan.decode_stage == 1 and plan.target_prefill_ranks == (0, 1, 8, 9)
    assert {(f.src_rank, f.layer_start, f.layer_end) for f in plan.fragments} == {
        (0, 27, 40), (1, 27, 40), (8, 40, 54), (9, 40, 54)}
    assert [(sp.prefill_stage, sp.layer_start, sp.layer_end) for sp in plan.stage_plans] == [(0, 27, 40),
                                                                                           (1, 40, 54)]
    # every prefill rank feeds one decode rank of each of the two decode stages it meets
    assert mt.pipeline.fanout() == dict.fromkeys(range(16), 2)


def test_equal_pipelines_pair_stage_i_with_stage_i_only():
    mt = model_transfer(DSV3, prefill_tp=8, decode_tp=4, prefill_pp=4, decode_pp=4)
    assert stage_layers(DSV3, 4) == [16, 15, 15, 15]
    assert [(x.prefill_stage, x.decode_stage, x.layers) for x in mt.pipeline.pairs] == [
        (0, 0, 16), (1, 1, 15), (2, 2, 15), (3, 3, 15)]
    tr = plan_traffic(mt)
    W_p, W_d = 8, 4
    for a in range(4):
        for b in range(4):
            block = tr.matrix_B[a * W_p:(a + 1) * W_p, b * W_d:(b + 1) * W_d]
            assert (block.sum() > 0) == (a == b)


# ---- 2. one stage on each side is version 1 exactly --------------------------------------------------------

@pytest.mark.parametrize("model, tp_p, tp_d, kw", [
    (LLAMA70, 8, 4, {}), (LLAMA70, 16, 8, {}), (LLAMA70, 2, 8, {}), (DSV3, 8, 16, {}),
    (DSV3, 8, 4, {"draft_layers": 1}),
    (LLAMA70, 8, 8, {"prefill_dp": 2, "decode_dp": 2}), (LLAMA70, 4, 2, {"prefill_dp": 2, "decode_dp": 3,
                                                                     "dp_pairing": "any"})])
def test_without_pipelines_every_plan_is_the_version_1_plan(model, tp_p, tp_d, kw):
    mt = model_transfer(model, prefill_tp=tp_p, decode_tp=tp_d, **kw)
    pl, pipe = mt.planner, mt.pipeline
    assert (mt.prefill_pp, mt.decode_pp, mt.pipelined, len(pipe.pairs)) == (1, 1, False, 1)
    g = 0 if pl.dp_pairing == "any" else None
    for r in range(pl.decode_layout.world_size):
        if g is None and r // pl.decode_tp >= pl.prefill_layout.dp_size:
            continue
        v1, explicit, mine = pl.plan_for_decode_rank(r, g), pl.explicit_plan(r, g), pipe.plan_for_decode_rank(r, g)
        assert [f.fragment for f in mine.fragments] == list(explicit.fragments)
        assert [(f.layer_start, f.layer_end) for f in mine.fragments] == [
            (0, model.layers) if f.buffer_kind in (BufferKind.TARGET_K, BufferKind.TARGET_V)
            else (model.layers, model.layers + kw.get("draft_layers", 0)) for f in explicit.fragments]
        assert (mine.plan_kind, mine.target_prefill_ranks, mine.required_prefill_response_num) == (
            v1.plan_kind, v1.target_prefill_ranks, v1.required_prefill_response_num)
        assert mine.required_dst_info_num_by_prefill_rank == v1.required_dst_info_num_by_prefill_rank
    assert pipe.fanout(g) == pl.fanout(g) and pipe.idle_prefill_ranks() == pl.idle_prefill_ranks()


# ---- 3. properties over random pipelined layouts -----------------------------------------------------------

@st.composite
def pipelines(draw):
    """A random valid version-1 stage planner (small), a target/draft layer count, stage splits of each side and a
    source group."""
    tp_p = draw(st.integers(1, 4))
    tp_d = draw(st.sampled_from([tp_p, draw(st.integers(1, 4))]))
    pairing = draw(st.sampled_from(["index", "any"]))
    dp_p = draw(st.integers(1, 2))
    dp_d = draw(st.integers(1, dp_p if pairing == "index" else 2))
    L = draw(st.integers(1, 12))
    D = draw(st.integers(0, 2))
    pbs, dbs, spans = [], [], []
    for idx in range(draw(st.integers(1, 3))):
        axis = draw(st.sampled_from(["kv_head", "replicated"]))
        unit = draw(st.integers(1, 4))
        kind = draw(st.sampled_from([BufferKind.TARGET_K, BufferKind.TARGET_V] + ([BufferKind.DRAFT_K] if D else [])))
        if axis == "replicated":
            item = draw(st.integers(1, 8))
            pbs.append(BufferLayout(idx, kind, axis, 1, 16, item, item))
            dbs.append(BufferLayout(idx, kind, axis, 1, 16, item, draw(st.integers(1, item))))
        else:
            size = math.lcm(tp_p, tp_d) * draw(st.integers(1, 2))
            pbs.append(BufferLayout(idx, kind, axis, size, 16, unit, size // tp_p * unit))
            dbs.append(BufferLayout(idx, kind, axis, size, 16, unit, size // tp_d * unit))
        spans.append((L, L + D) if kind == BufferKind.DRAFT_K else (0, L))
    pl = PDTransferPlanner(prefill_layout=ParallelLayout("prefill", tp_p * dp_p, dp_p),
                           decode_layout=ParallelLayout("decode", tp_d * dp_d, dp_d),
                           prefill_buffers=pbs, decode_buffers=dbs, dp_pairing=pairing)
    total = L + D

    def split():
        pp = draw(st.integers(1, min(total, 4)))
        cuts = sorted(draw(st.lists(st.integers(1, total - 1), min_size=pp - 1, max_size=pp - 1, unique=True))) \
            if pp > 1 else []
        return [b - a for a, b in zip([0, *cuts], [*cuts, total])]

    pipe = PipelineTransferPlanner(pl, prefill_stage_layers=split(), decode_stage_layers=split(),
                                   buffer_layers=spans)
    group = draw(st.integers(0, dp_p - 1)) if pairing == "any" else None
    return pipe, group


@settings(PROPS, max_examples=120)
@given(case=pipelines())
def test_pipelined_plan_invariants(case):
    pipe, group = case
    sp = pipe.stage_planner
    wp, wd = pipe.prefill_stage_world, pipe.decode_stage_world
    pos = {b.buffer_index: i for i, b in enumerate(sp.prefill_buffers)}
    plans = {}
    for R in range(pipe.decode_world):
        if group is None and (R % wd) // sp.decode_tp >= sp.prefill_layout.dp_size:
            continue  # version 1: a decode group without a prefill group of its index (not drawn here)
        plan = plans[R] = pipe.plan_for_decode_rank(R, group)
        b = R // wd
        d_lo, d_hi = pipe.decode_ranges[b]
        local = sp.explicit_plan(R % wd, group)
        assert plan.decode_stage == b and plan.decode_rank == R
        srcs = [f.src_rank for f in plan.fragments]
        assert srcs == sorted(srcs) and plan.target_prefill_ranks == tuple(sorted(set(srcs)))
        assert plan.required_prefill_response_num == len(plan.target_prefill_ranks)
        covered = defaultdict(Counter)  # (buffer, layer) -> the stage-local fragments that deliver it
        for f in plan.fragments:
            assert isinstance(f, LayerFragment) and f.dst_rank == R and f.layers >= 1
            a = f.src_rank // wp
            p_lo, p_hi = pipe.prefill_ranges[a]
            s_lo, s_hi = pipe.buffer_layers[pos[f.buffer_index]]
            # a prefill rank sends only layers its stage holds, to a decode rank whose stage holds them, of a
            # buffer that has those layers
            assert p_lo <= f.layer_start and f.layer_end <= p_hi
            assert d_lo <= f.layer_start and f.layer_end <= d_hi
            assert s_lo <= f.layer_start and f.layer_end <= s_hi
            g = f.fragment
            key = (g.buffer_index, g.src_rank % wp, g.src_byte_offset, g.dst_byte_offset, g.bytes_per_page)
            for layer in range(f.layer_start, f.layer_end):
                covered[(pos[f.buffer_index], layer)][key] += 1
        # exact cover: every layer of this stage, of every buffer that has it, gets the version-1 fragments of
        # the decode rank's local plan exactly once
        for i, (s_lo, s_hi) in enumerate(pipe.buffer_layers):
            want = Counter((f.buffer_index, f.src_rank, f.src_byte_offset, f.dst_byte_offset, f.bytes_per_page)
                           for f in local.fragments if pos[f.buffer_index] == i)
            for layer in range(max(s_lo, d_lo), min(s_hi, d_hi)):
                assert covered.pop((i, layer), Counter()) == want
        assert not covered
    # fan-out consistency: the decode ranks of one decode group (every stage) that draw from each prefill rank
    for h in range(sp.decode_layout.dp_size):
        ranks = [b * wd + h * sp.decode_tp + d for b in range(pipe.decode_pp) for d in range(sp.decode_tp)]
        if not all(r in plans for r in ranks):
            continue
        counts = Counter(p for r in ranks for p in plans[r].target_prefill_ranks)
        for r in ranks:
            assert plans[r].required_dst_info_num_by_prefill_rank == {p: counts[p] for p in
                                                                      plans[r].target_prefill_ranks}
        src = next(iter(counts)) % wp // sp.prefill_tp if counts else 0
        fan = pipe.fanout(group)
        for p in range(pipe.prefill_world):
            if (p % wp) // sp.prefill_tp == src and (group is not None or src < sp.decode_layout.dp_size):
                assert fan[p] == counts[p]
        idle = set(pipe.idle_prefill_ranks(src))
        assert idle == {p for p in range(pipe.prefill_world) if (p % wp) // sp.prefill_tp == src and counts[p] == 0}
    # the layer-by-layer round trip: every layer of every decode rank's stage, byte for byte
    rt = pipeline_roundtrip_check(pipe, pages=2, prefill_dp_group=group, decode_ranks=list(plans))
    assert rt.ok, rt.first_mismatch
    # determinism
    again = PipelineTransferPlanner(sp, prefill_stage_layers=list(pipe.prefill_stage_layers),
                                    decode_stage_layers=list(pipe.decode_stage_layers),
                                    buffer_layers=list(pipe.buffer_layers))
    assert all(again.plan_for_decode_rank(r, group) == plans[r] for r in plans)


def _corrupt(monkeypatch, pipe, how):
    build = pipe._build

    def bad(R, g):
        plan = build(R, g)
        frags = list(plan.fragments)
        f = frags[0]
        if how == "wrong_stage" and pipe.prefill_pp > 1:  # the same bytes from the same rank of another stage
            w = pipe.prefill_stage_world
            other = (f.src_rank // w + 1) % pipe.prefill_pp
            g2 = type(f.fragment)(**{**f.fragment.__dict__, "src_rank": other * w + f.src_rank % w})
            frags[0] = LayerFragment(g2, f.layer_start, f.layer_end)
        elif how == "missing_layer":
            frags[0] = LayerFragment(f.fragment, f.layer_start + 1, f.layer_end) if f.layers > 1 else None
        elif how == "twice":
            frags.append(f)
        return type(plan)(**{**plan.__dict__, "fragments": tuple(x for x in frags if x is not None)})

    monkeypatch.setattr(pipe, "_build", bad)
    pipe._plans.clear()


@pytest.mark.parametrize("how", ["wrong_stage", "missing_layer", "twice"])
def test_pipeline_roundtrip_catches_a_corrupted_plan(how, monkeypatch):
    mt = model_transfer(LLAMA70, prefill_tp=8, decode_tp=4, prefill_pp=2, decode_pp=3)
    assert pipeline_roundtrip_check(mt.pipeline).ok
    _corrupt(monkeypatch, mt.pipeline, how)
    rt = pipeline_roundtrip_check(mt.pipeline)
    assert not rt.ok
    assert (rt.overwritten_B > 0) if how == "twice" else (rt.mismatched_B > 0)


# ---- 4. bytes per stage against the request's KV -----------------------------------------------------------

@pytest.mark.parametrize("model, tp_p, tp_d", [("llama-3-70b", 8, 4), ("llama-3-70b", 2, 8), ("qwen3-32b", 4, 8),
                                               ("deepseek-v3", 8, 16), ("deepseek-v3", 1, 4)])
@pytest.mark.parametrize("pp_p, pp_d", [(1, 2), (2, 1), (2, 3), (3, 3), (4, 7)])
def test_each_stage_sends_exactly_its_layer_share_of_the_request(model, tp_p, tp_d, pp_p, pp_d):
    """GQA without decode replication and MLA without forwarding: one request's bytes over the network are
    kv_request_bytes' physical bytes (models/step/kv_transfer.py), and prefill stage s sends exactly n_s / L of
    them (its layers' share), decode stage b receives n_b / L."""
    m = presets.model(model)
    mt = model_transfer(m, prefill_tp=tp_p, decode_tp=tp_d, prefill_pp=pp_p, decode_pp=pp_d)
    tr = plan_traffic(mt)
    S, page = 4096, 16
    physical = float(kv_request_bytes(m, S, page_tokens=page, prefill_tp=tp_p, decode_tp=tp_d)["physical_B"])
    pages = S // page
    assert tr.total_B * pages == physical
    per_layer = physical / m.layers  # an integer number of bytes
    assert per_layer == int(per_layer)
    wp, wd = mt.planner.prefill_layout.world_size, mt.planner.decode_layout.world_size
    for a, n in enumerate(stage_layers(m, pp_p)):
        assert tr.matrix_B[a * wp:(a + 1) * wp].sum() * pages == n * per_layer
    for b, n in enumerate(stage_layers(m, pp_d)):
        assert tr.matrix_B[:, b * wd:(b + 1) * wd].sum() * pages == n * per_layer
    assert pipeline_roundtrip_check(mt.pipeline, pages=1).ok


# ---- 5. speculative decoding -------------------------------------------------------------------------------

def test_deepseek_v3_mtp_draft_layer_is_one_mla_layer_from_its_config():
    """DeepSeek-V3 config.json: kv_lora_rank 512, qk_rope_head_dim 64, num_nextn_predict_layers 1; the MTP
    module's attention is MLA like every layer's, so its KV is 512 + 64 = 576 values per token, 1,152 B in BF16."""
    assert (DSV3.kv_lora_rank, DSV3.qk_rope_head_dim, DSV3.mtp_layers) == (512, 64, 1)
    mt = model_transfer(DSV3, prefill_tp=8, decode_tp=4, speculative="deepseek-mtp-1")
    assert mt.draft_layers == 1 and mt.layer_repeat == (61, 1)
    draft, = [b for b in mt.planner.prefill_buffers if b.buffer_kind == BufferKind.DRAFT_K]
    assert draft.logical_axis == "replicated" and draft.bytes_per_logical_unit == 16 * 576 * 2  # one 16-token page
    assert [(x.layer_start, x.layer_end) for x in mt.pipeline.pairs] == [(0, 62)]  # the draft is layer 61
    s = sw.setup("deepseek-v3", gpu="h200", prefill_tp=8, decode_tp=4, speculative="deepseek-mtp-1",
                 prompt_tokens=4096)
    rec = sw.plan_summary(s)
    # the latent is replicated on every decode rank: 4 copies of 4,096 tokens x 1,152 B
    assert rec["draft_MB"] == pytest.approx(4 * 4096 * 1152 / 1e6, rel=1e-12)
    plain = sw.plan_summary(sw.setup("deepseek-v3", gpu="h200", prefill_tp=8, decode_tp=4, prompt_tokens=4096))
    assert rec["request_MB"] == pytest.approx(plain["request_MB"] + rec["draft_MB"] + rec["spec_state_MB"], rel=1e-12)
    assert rec["roundtrip_ok"] and rec["speculative"] == "deepseek-mtp-1"


def test_the_speculative_state_is_sglangs_hidden_state_and_top_k():
    """SGLang's metadata buffers for PD + speculative decoding (disaggregation/utils.py): output_hidden_states of
    hidden_size in the model dtype (BF16), output_topk_p 16 x float32, output_topk_index 16 x int64; sent by
    each last-stage prefill rank to each decode rank it feeds. N-gram lookup has none."""
    spec = presets.resolve("speculative", "deepseek-mtp-1")
    assert spec_state_bytes(DSV3, spec) == 7168 * 2 + 16 * 4 + 16 * 8 == 14528
    assert spec_state_bytes(LLAMA70, presets.resolve("speculative", "ngram-5")) == 0
    assert spec_state_bytes(LLAMA70, None) == 0
    mt = model_transfer(LLAMA70, prefill_tp=8, decode_tp=4, speculative="eagle3-llama-3.1-8b")
    tr = plan_traffic(mt)
    linked = tr.matrix_B > 0  # the (sender, receiver) pairs that carry KV
    assert (tr.state_B > 0).tolist() == linked.tolist() and tr.state_total_B == linked.sum() * (8192 * 2 + 192)
    assert tr.state_writes.sum() == linked.sum() * SPEC_STATE_WRITES
    ngram = model_transfer(LLAMA70, prefill_tp=8, decode_tp=4, speculative="ngram-5")
    assert ngram.draft_layers == 0 and not plan_traffic(ngram).has_state
    assert [b.buffer_kind for b in ngram.planner.prefill_buffers] == [BufferKind.TARGET_K, BufferKind.TARGET_V]
    # the state adds its bytes once per request (not per page) and its writes to the busiest NIC and rank
    t = transfer_time(tr, ROCE, [16, 4096])
    plain = transfer_time(plan_traffic(model_transfer(LLAMA70, prefill_tp=8, decode_tp=4, draft_layers=1)), ROCE,
                          [16, 4096])
    np.testing.assert_allclose(t["busiest_B"] - plain["busiest_B"], 2 * (8192 * 2 + 192))  # 2 sources per rank
    np.testing.assert_allclose(t["n_ops"] - plain["n_ops"], 2 * SPEC_STATE_WRITES)


# ---- 6. rejections ----------------------------------------------------------------------------------------

def test_a_pipeline_with_a_draft_is_refused_with_the_decode_steps_own_message():
    dep = Deployment.build("llama-3-70b", "h100-sxm", 4)
    with pytest.raises(SpecError) as want:
        check_decoding(dep, 2, "eagle3-llama-3.1-8b")
    for side, kw in (("decode", {"decode_pp": 2}), ("prefill", {"prefill_pp": 2})):
        with pytest.raises(UnsupportedPDLayoutError) as got:
            model_transfer(LLAMA70, prefill_tp=4, decode_tp=4, speculative="eagle3-llama-3.1-8b", **kw)
        assert str(got.value) == f"{side}_" + str(want.value)  # "pp (2) must be 1 ..." named for its side


@pytest.mark.parametrize("kw, message", [
    ({"prefill_pp": 81}, r"^prefill_pp \(81\) must be at most the layers of llama-3-70b \(80\)"),
    ({"decode_pp": 0}, r"^pp must be an integer in \[1, 128\]|^decode_pp"),
    ({"decode_pp": 2.5}, r"pp must be an integer"),
    ({"prefill_tp": 8, "prefill_pp": 200}, r"prefill_pp|pp must be an integer in \[1, 128\]"),
    ({"prefill_tp": 512, "prefill_pp": 4}, r"^prefill_pp x prefill_tp \(4 x 512 = 2048\) must be at most 1024"),
    ({"speculative": "deepseek-mtp-1"}, r"^speculative 'deepseek-mtp-1' drafts with an MTP module, and "
                                        r"llama-3-70b has none"),
    ({"speculative": "ngram-5", "draft_layers": 1}, r"^draft_layers must be 0 when speculative is given"),
])
def test_bad_pipelines_and_speculation_are_refused_in_one_line(kw, message):
    base = {"prefill_tp": 8, "decode_tp": 4}
    with pytest.raises(SpecError, match=message) as err:
        model_transfer(LLAMA70, **{**base, **kw})
    assert "\n" not in str(err.value)


def test_an_unknown_speculative_preset_is_named():
    with pytest.raises(UnknownPresetError, match=r"speculative: no speculative preset 'medusa'; known: deepseek-mtp-1"):
        model_transfer(LLAMA70, prefill_tp=8, decode_tp=4, speculative="medusa")


def test_pipeline_planner_validates_its_arguments():
    pl = model_transfer(LLAMA70, prefill_tp=8, decode_tp=4).planner
    ok = dict(prefill_stage_layers=[40, 40], decode_stage_layers=[80], buffer_layers=[(0, 80), (0, 80)])
    PipelineTransferPlanner(pl, **ok)
    for change, match in ((dict(decode_stage_layers=[79]), r"decode_stage_layers must add up to the prefill's 80"),
                          (dict(prefill_stage_layers=[40, 0, 40]), r"prefill_stage_layers\[1\] must be an integer"),
                          (dict(buffer_layers=[(0, 80)]), r"buffer_layers must give one layer range per buffer"),
                          (dict(buffer_layers=[(0, 81), (0, 80)]), r"buffer_layers\[0\] must be a non-empty range"),
                          (dict(prefill_stage_layers=[]), r"prefill_stage_layers must hold at least one stage")):
        with pytest.raises(UnsupportedPDLayoutError, match=match):
            PipelineTransferPlanner(pl, **{**ok, **change})
    with pytest.raises(UnsupportedPDLayoutError, match=r"decode_rank must be an integer in \[0, 3\]"):
        PipelineTransferPlanner(pl, **ok).plan_for_decode_rank(4)


# ---- 7. time: the pipelined prefill ------------------------------------------------------------------------

def _fifo_exposed(counts, compute_s, hop, stage_T, lat, shared):
    """Brute force: layers computed one by one (stage s's at compute_s / N each, a hop between stages), each
    stage's NIC queue a FIFO that sends one layer in (T_s - alpha) / n_s; a stage that shares a decode NIC with the
    previous one waits for it. Returns the exposed time after the last layer's compute."""
    N = sum(counts)
    c = compute_s / N
    t, free, ends = 0.0, -math.inf, []
    for s, n in enumerate(counts):
        if s:
            t += hop
        tx = (stage_T[s] - lat) / n
        q = free if (s and shared) else -math.inf
        for _ in range(n):
            t += c
            q = max(q, t) + tx
        free = q
        ends.append(q + lat)
    return max(ends) - t


@pytest.mark.parametrize("decode_pp, link", [(1, "roce-400g"), (2, "roce-400g"), (1, "tcp-100g"), (2, "tcp-100g")])
@pytest.mark.parametrize("compute_ms", [0.5, 20.0, 160.0])
def test_stages_exposed_time_is_the_per_layer_recurrence(decode_pp, link, compute_ms):
    """Prefill TP8 x PP2 (40 + 40 layers) into decode TP8 x PP1 (one decode NIC receives both stages' layers: a
    shared FIFO) or PP2 (stage i to stage i: separate NICs)."""
    lk = presets.link(link)
    mt = model_transfer(LLAMA70, prefill_tp=8, decode_tp=8, prefill_pp=2, decode_pp=decode_pp)
    tr = plan_traffic(mt)
    S = 4096
    hop = 2e-4
    got = float(transfer_time(tr, lk, S, prefill_s=compute_ms * 1e-3, hop_s=hop)["pipelined_s"])
    # each stage's own transfer: one head's K and V of 40 layers per rank and page, 2 writes per layer
    pages = S / 16
    T = lk.latency_us * 1e-6 + 80 * 1e-6 + 2 * 4096 * 40 * pages / (lk.achievable_GBps * 1e9)
    want = _fifo_exposed([40, 40], compute_ms * 1e-3, hop, [T, T], lk.latency_us * 1e-6, shared=decode_pp == 1)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert got > 0


def test_one_prefill_stage_keeps_the_one_stage_closed_form():
    tr = plan_traffic(model_transfer(LLAMA70, prefill_tp=8, decode_tp=4, decode_pp=2))
    t = transfer_time(tr, ROCE, [1024, 4096], prefill_s=[0.04, 0.16])
    want = pipelined_exposed_s(t["serial_s"], np.array([0.04, 0.16]), 80, latency_s=t["latency_s"])
    np.testing.assert_array_equal(t["pipelined_s"], want)


def test_pipelines_split_the_busiest_nics_bytes_and_price_the_pipelined_prefill():
    plain = sw.plan_summary(sw.setup("llama-3-70b", prefill_tp=8, decode_tp=8))
    pp = sw.plan_summary(sw.setup("llama-3-70b", prefill_tp=8, decode_tp=8, prefill_pp=2, decode_pp=2))
    assert pp["request_MB"] == pytest.approx(plain["request_MB"], rel=1e-12)  # the same KV, once
    assert pp["busiest_MB"] == pytest.approx(plain["busiest_MB"] / 2, rel=1e-12)  # each NIC: one stage's layers
    assert (pp["prefill_pp"], pp["decode_pp"], pp["stage_pairs"], pp["roundtrip_ok"]) == (2, 2, 2, True)
    # the pipelined prefill: the whole model on one stage's 8 ranks, then the prompt's hidden states cross the
    # stage boundary (16 GPUs span two 8-GPU nodes: the scale-out link) -- pp_prefill's latency
    from llmexplore.models.step.pipeline import pp_prefill
    dep = Deployment.build("llama-3-70b", "h100-sxm", 8)
    assert pp["prefill_ms"] == pytest.approx(float(pp_prefill(dep, 2, 4096)["latency_s"]) * 1e3, rel=1e-12)
    assert pp["prefill_ms"] > plain["prefill_ms"]
    table = sw.time_vs_prompt(sw.setup("llama-3-70b", prefill_tp=8, decode_tp=8, prefill_pp=2), [1024, 8192])
    assert (table["pipelined_ms"] > 0).all() and (table["pipelined_ms"] < table["serial_ms"]).all()


def test_layout_pairs_and_tables_carry_the_pipelines():
    df = sw.layout_pairs("llama-3-70b", pairs=[(8, 4), (3, 4)], prefill_pp=2, decode_pp=3, prompt_tokens=1024)
    assert df["layouts"].tolist() == ["TP8xPP2 → TP4xPP3", "TP3xPP2 → TP4xPP3"]
    assert df["feasible"].tolist() == [True, False] and "prefill_tp (3)" in df["reason"][1]
    s = sw.setup("llama-3-70b", prefill_tp=8, decode_tp=4, prefill_pp=2, decode_pp=3)
    dec, pre = sw.decode_rank_table(s), sw.prefill_rank_table(s)
    assert dec["stage"].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert dec["layers"].tolist()[::4] == ["0–26", "27–53", "54–79"]
    assert dec["sources"].tolist() == [2] * 4 + [4] * 4 + [2] * 4  # decode stage 1 meets both prefill stages
    assert pre["stage"].tolist() == [0] * 8 + [1] * 8 and set(pre["fanout"]) == {2}
    assert sw.byte_matrix(s).shape == (16, 12)
    frags = sw.fragment_table(s)
    assert set(zip(frags["layer_start"], frags["layer_end"])) == {(0, 27), (27, 40), (40, 54), (54, 80)}
    assert sw.stage_pair_table(s)["MB"].sum() == pytest.approx(sw.plan_summary(s, check=False)["request_MB"])
    # the TokenSpeed-style round trip of one stage pair is the version-1 check of the stage planner
    assert roundtrip_check(s.mt.planner, pages=1).ok


# ---- 8. findings --------------------------------------------------------------------------------------------

def test_findings_say_which_stages_talk_and_what_the_draft_adds():
    from llmexplore.findings import transfer as ft

    s = sw.setup("llama-3-70b", prefill_tp=8, decode_tp=4, prefill_pp=2, decode_pp=3)
    assert ft.stage_sentence(sw.stage_pair_table(s)) == (
        "Prefill stage 0 (layers 0–39) to decode stages 0 and 1; prefill stage 1 (layers 40–79) to decode stages 1 "
        "and 2: 4 of the 2 × 3 stage pairs talk, moving 218–453 MB each per request; a prefill rank never sends a "
        "layer its stage does not hold.")
    summary = sw.plan_summary(s, check=False)
    assert "With 2 prefill and 3 decode pipeline stages, each prefill rank sends only its stage's layers: 4 stage " \
           "pairs talk." in ft.plan_sentence(summary, s)
    equal = sw.setup("deepseek-v3", gpu="h200", prefill_tp=8, decode_tp=8, prefill_pp=2, decode_pp=2)
    assert "each stage only to the stage of the same index" in ft.stage_sentence(sw.stage_pair_table(equal))
    spec = sw.setup("deepseek-v3", gpu="h200", prefill_tp=8, decode_tp=4, speculative="deepseek-mtp-1")
    rec = sw.plan_summary(spec, check=False)
    assert ft.spec_sentence(rec).startswith("With deepseek-mtp-1, the draft layer's KV moves as one more layer on the "
                                            "last stage (18.9 MB, 1.61% of the request)")
    assert ft.stage_sentence(sw.stage_pair_table(spec)).startswith("No pipeline stages: all 61 layers and the "
                                                                   "draft's 1 go")
    ngram = sw.plan_summary(sw.setup("llama-3-70b", speculative="ngram-5"), check=False)
    assert ft.spec_sentence(ngram) == ("ngram-5 drafts by n-gram lookup on the CPU: no draft model, so no draft KV "
                                       "or hidden state moves.")
    assert ft.spec_sentence(sw.plan_summary(sw.setup("llama-3-70b"), check=False)) == ""
    rows = dict(ft.summary_table(summary).itertuples(index=False))
    assert rows["pipeline stages (prefill, decode)"] == "PP2, PP3: 4 stage pair(s) talk"
