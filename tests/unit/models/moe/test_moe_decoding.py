"""The MoE wing per output token (issue 21): pipelines of tp x ep stages and speculative decoding
(llmexplore.models.moe.decode.token_time / token_memory; docs/models.md §4.8, "Per output token").

* Plain decoding is the wing's step and memory exactly (the golden records of notebook 30 rest on it).
* Closed forms: the parts add up to the time per output token; the verify pass is the step over W tokens per
  sequence, and its routed pairs are those of a plain step of W B sequences (same load straggler); a pipeline's ITL
  is max(cycle, pp x the worst stage) with the hop of ceil(b / ep) hidden states split over tp GPUs; the worst
  stage holds ceil(L / pp) / L of the layers' KV and about as much of the weights.
* With uniform routing under pure TP the wing ties to the step engine's per_token door (pipelines and speculation),
  as tests/unit/models/moe/test_moe_engine_tie.py shows for the plain step.
* Bad combinations: one line, the step engine's message (per_token.check_decoding).
"""

import dataclasses
import math

import numpy as np
import pytest

from llmexplore.errors import LlmexploreError, SpecError
from llmexplore.models.moe import decode as moe
from llmexplore.models.step import per_token, pipeline
from llmexplore.models.step.collectives import sendrecv_s
from llmexplore.models.step.engine import Deployment
from llmexplore.models.step.speculative import user_spec

BATCH = np.array([1, 16, 64, 256, 1024])
SPLITS = [(16, 1), (2, 8), (1, 16)]


@pytest.fixture(scope="module", params=SPLITS, ids=lambda s: f"tp{s[0]}ep{s[1]}")
def md(request):
    tp, ep = request.param
    return moe.MoEDeployment.build("deepseek-v3", "h200", 16, tp=tp, ep=ep, redundant=32 if ep > 1 else 0,
                                   layers=8)


def test_plain_decoding_is_the_step_and_the_memory_exactly(md):
    st = moe.step_time(md, BATCH, 2048, skew=2.6)
    tt = moe.token_time(md, BATCH, 2048, skew=2.6)
    assert np.array_equal(tt["tpot_s"], st["step_s"]) and np.array_equal(tt["iteration_s"], st["step_s"])
    for k, v in st.items():
        if k != "step_s":
            assert np.array_equal(tt[k], v), k
    mem, tm = moe.memory_per_gpu(md, BATCH, 2048), moe.token_memory(md, BATCH, 2048)
    for k, v in mem.items():
        assert np.array_equal(tm[k], v), k
    assert not tm["draft_weights_B"].any() and not tm["draft_kv_B"].any()


@pytest.mark.parametrize("kw", [dict(pp=2), dict(pp=4), dict(speculative="deepseek-mtp-1"),
                                dict(speculative="deepseek-mtp-3"), dict(speculative="ngram-5"),
                                dict(speculative="eagle3-llama-3.1-8b")], ids=str)
def test_the_parts_add_up_to_the_time_per_output_token(md, kw):
    r = moe.token_time(md, BATCH, 4096, skew=np.array([[1.0], [2.6]]), **kw)
    np.testing.assert_allclose(sum(r[k] for k in moe.TOKEN_PARTS), r["tpot_s"], rtol=1e-12)
    np.testing.assert_allclose(r["comm_attn_s"] + r["comm_ffn_dense_s"] + r["comm_head_s"] + r["comm_moe_s"],
                               r["comm_s"], rtol=1e-12)
    np.testing.assert_allclose(r["tokens_per_s"], BATCH / r["tpot_s"], rtol=1e-12)
    np.testing.assert_allclose(r["tpot_s"] * r["tokens_per_step"], r["iteration_s"], rtol=1e-12)


def test_the_verify_pass_is_the_step_over_w_tokens_and_routes_the_pairs_of_w_b_sequences(md):
    spec = user_spec(md.model, "ngram-5", 2.5)  # no draft on the GPU: TPOT = (verify + host) / tau exactly
    W = spec.verify_width
    r = moe.token_time(md, BATCH, 2048, skew=2.6, speculative=spec)
    verify = moe.step_time(dataclasses.replace(md, q_tokens=W), BATCH, 2048, skew=2.6)
    np.testing.assert_array_equal(r["pass_s"], verify["step_s"])
    np.testing.assert_allclose(r["tpot_s"], verify["step_s"] / 2.5, rtol=1e-15)
    # the routed pairs of the verify pass are a plain step's of W x B sequences: the same straggler statistics
    plain_wb = moe.step_time(md, W * BATCH, 2048, skew=2.6)
    for k in ("load_straggler", "max_pairs", "distinct_ranks", "active_slots_max", "expected_imbalance"):
        np.testing.assert_allclose(r[k], plain_wb[k], rtol=1e-12, err_msg=k)
    # one query token that needs its logits is the plain step
    one = moe.step_time(dataclasses.replace(md, q_tokens=1, logits_tokens=1), BATCH, 2048, skew=2.6)
    np.testing.assert_array_equal(one["step_s"], moe.step_time(md, BATCH, 2048, skew=2.6)["step_s"])


def test_more_verify_tokens_average_out_the_busiest_ranks_excess(md):
    plain = moe.token_time(md, BATCH, 2048, skew=2.6)
    mtp = moe.token_time(md, BATCH, 2048, skew=2.6, speculative="deepseek-mtp-1")
    if md.ep == 1:  # pure TP: every GPU computes its slice of every pair, no busiest rank
        assert np.all(plain["load_straggler"] == 1.0) and np.all(mtp["load_straggler"] == 1.0)
    else:
        assert np.all(mtp["load_straggler"] < plain["load_straggler"])
        assert np.all(mtp["load_straggler"] >= mtp["expected_imbalance"])


def test_a_pipeline_is_max_of_cycle_and_pp_worst_stages(md):
    p = 2
    r = moe.token_time(md, BATCH, 2048, skew=2.6, pp=p)
    mb = np.ceil(BATCH / p)
    st = moe.step_time(md, mb, 2048, skew=2.6)
    np.testing.assert_array_equal(r["pass_s"], st["step_s"])
    link = md.fabric.scale_out  # 2 x 16 GPUs on nodes of 8: the stages meet over the scale-out link
    hop = sendrecv_s(np.ceil(mb / md.ep) * 7168 * 2 / md.tp, link)
    np.testing.assert_allclose(r["hops_s"], (p - 1) * hop, rtol=1e-12)
    np.testing.assert_allclose(r["cycle_s"], st["step_s"] + r["hops_s"], rtol=1e-12)
    # the worst stage: 31 layers, 31 of them MoE (the MoE layers are the last 58 of 61), the LM head
    m = md.model
    stage = (31 * (st["attention_s"] + st["comm_attn_s"]) / 61 + 31 * (st["ffn_moe_s"] + st["comm_moe_s"]) / 58
             + st["head_s"] + st["comm_head_s"] + st["overhead_s"])
    assert m.layers == 61 and m.moe_layers == 58
    np.testing.assert_allclose(r["stage_s"], stage, rtol=1e-12)
    np.testing.assert_allclose(r["iteration_s"], np.maximum(r["cycle_s"], p * stage), rtol=1e-12)


def test_a_pipeline_stage_holds_its_share_of_the_weights_and_kv(md):
    plain = moe.token_memory(md, BATCH, 8192)
    for p in (2, 4):
        r = moe.token_memory(md, BATCH, 8192, pp=p)
        share = math.ceil(61 / p) / 61
        np.testing.assert_allclose(r["kv_B"], share * plain["kv_B"], rtol=1e-12)  # MLA: the same KV per layer
        # weights: the stage's ceil(61 / p) layers are all MoE (the heavier ones: at most their share of the 58
        # MoE layers) and it holds one vocabulary table, not two
        ratio = r["weights_B"][0] / plain["weights_B"][0]
        assert share - 0.02 < ratio < math.ceil(61 / p) / 58 + 0.01, ratio
        assert np.all(r["total_B"] < plain["total_B"])


def test_the_draft_adds_its_layer_and_the_verify_slots(md):
    plain = moe.token_memory(md, BATCH, 2048)
    r = moe.token_memory(md, BATCH, 2048, speculative="deepseek-mtp-1")
    m = md.model
    # one MTP layer: MLA, (E + redundant) / ep expert slots of I_e / tp, shared expert, router, norms, eh_proj
    layer_B = (plain["weights_B"][0] - m.embedding_params * 2 / md.tp) / m.layers
    assert 0.5 * layer_B < r["draft_weights_B"][0] < 2.0 * layer_B
    np.testing.assert_allclose(r["weights_B"], plain["weights_B"] + r["draft_weights_B"], rtol=1e-12)
    # KV: a slot for the draft token (2,048 + 1 tokens: one more page of 16) and the draft's one layer
    slots = moe.token_memory(md, BATCH, 2049)["kv_B"]
    np.testing.assert_allclose(r["kv_B"] - r["draft_kv_B"], slots, rtol=1e-12)
    np.testing.assert_allclose(r["draft_kv_B"], slots / m.layers, rtol=1e-12)


@pytest.mark.parametrize("model, gpus", [("mixtral-8x7b", 8), ("qwen3-30b-a3b", 16), ("deepseek-v3", 16)])
@pytest.mark.parametrize("pp", [2, 4])
def test_uniform_pure_tp_pipelines_tie_to_the_step_engine(model, gpus, pp):
    md = moe.MoEDeployment.build(model, "h200", gpus, tp=gpus, ep=1, weight_dtype="fp8")
    dep = Deployment.build(model, "h200", gpus, weight_dtype="fp8", moe_ep=1)
    wing = moe.token_time(md, BATCH, 4096, pp=pp)
    engine = per_token.token_time(dep, BATCH, 4096, "TP", pp=pp)
    for k in ("cycle_s", "hops_s"):
        np.testing.assert_allclose(wing[k], pipeline.pp_decode(dep, pp, BATCH, 4096)[k], rtol=1e-12, err_msg=k)
    if md.model.dense_layers == 0:  # every layer alike: the engine's ceil(L/pp)/L of the layers is the wing's
        np.testing.assert_allclose(wing["tpot_s"], engine["tpot_s"], rtol=1e-12)
    else:  # DeepSeek-V3: the worst stage's layers are all MoE, the engine's its share of the 3 dense ones too
        st = moe.step_time(md, np.ceil(BATCH / pp), 4096)
        ls, L, Lm = math.ceil(61 / pp), 61, 58
        moe_layer = (st["ffn_moe_s"] + st["comm_moe_s"]) / Lm
        dense_layer = (st["ffn_dense_s"] + st["comm_ffn_dense_s"]) / (L - Lm)
        eng = pipeline.pp_decode(dep, pp, BATCH, 4096)
        np.testing.assert_allclose(wing["stage_s"] - eng["stage_s"], ls * (L - Lm) / L * (moe_layer - dense_layer),
                                   rtol=1e-9)
        assert np.all(wing["tpot_s"] >= engine["tpot_s"] * (1 - 1e-12))
    wm, em = moe.token_memory(md, BATCH, 4096, pp=pp), per_token.token_memory(dep, BATCH, 4096, "TP", pp=pp)
    for k in ("weights_B", "kv_B", "activations_B", "total_B", "feasible"):
        np.testing.assert_allclose(wm[k], em[k], rtol=1e-12, err_msg=k)


@pytest.mark.parametrize("spec", ["deepseek-mtp-1", "deepseek-mtp-3", "eagle3-llama-3.1-8b", "ngram-5"])
def test_uniform_pure_tp_speculation_ties_to_the_step_engine(spec):
    md = moe.MoEDeployment.build("deepseek-v3", "h200", 8, tp=8, ep=1, weight_dtype="fp8")
    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8", moe_ep=1)
    wing = moe.token_time(md, BATCH, 4096, speculative=spec)
    engine = per_token.token_time(dep, BATCH, 4096, "TP", speculative=spec)
    for k in ("tpot_s", "draft_s", "host_s", "attention_s", "head_s", "overhead_s"):
        np.testing.assert_allclose(wing[k], engine[k], rtol=1e-12, err_msg=k)
    np.testing.assert_allclose(wing["ffn_dense_s"] + wing["ffn_moe_s"], engine["ffn_s"], rtol=1e-12)
    wm, em = moe.token_memory(md, BATCH, 4096, speculative=spec), per_token.token_memory(dep, BATCH, 4096, "TP",
                                                                                         speculative=spec)
    for k in ("weights_B", "kv_B", "activations_B", "total_B", "draft_weights_B", "draft_kv_B", "feasible"):
        np.testing.assert_allclose(wm[k], em[k], rtol=1e-12, err_msg=k)


def test_skew_reaches_the_mtp_layer():
    md = moe.MoEDeployment.build("deepseek-v3", "h200", 16, tp=1, ep=16, layers=8)
    flat = moe.token_time(md, 1024, 2048, skew=1.0, speculative="deepseek-mtp-1")
    hot = moe.token_time(md, 1024, 2048, skew=4.0, speculative="deepseek-mtp-1")
    assert np.all(hot["draft_s"] > flat["draft_s"])


@pytest.mark.parametrize("kw, message", [
    (dict(pp=2, speculative="deepseek-mtp-1"), "pp (2) must be 1 when decoding speculatively with 'deepseek-mtp-1'"),
    (dict(pp=62), "pp (62) must be at most the layers of deepseek-v3 (61)"),
    (dict(pp=128), "pp (128) must be at most the layers of deepseek-v3 (61)"),
    (dict(speculative="eagle"), "speculative: no speculative preset 'eagle'"),
])
def test_bad_combinations_are_one_line_naming_the_argument(kw, message):
    md = moe.MoEDeployment.build("deepseek-v3", "h200", 16, tp=2, ep=8)
    with pytest.raises(LlmexploreError) as e:
        moe.token_time(md, 64, 2048, **kw)
    assert str(e.value).startswith(message.split()[0]) and message in str(e.value)
    assert "\n" not in str(e.value) in str(e.value) and "\n" not in str(e.value)


def test_an_mtp_draft_needs_the_models_mtp_module_and_stages_fit_one_instance():
    mix = moe.MoEDeployment.build("mixtral-8x7b", "h200", 8, tp=1, ep=8)
    with pytest.raises(SpecError, match="speculative 'deepseek-mtp-1' drafts with an MTP module, and mixtral-8x7b "
                                        "has none"):
        moe.token_memory(mix, 64, 2048, speculative="deepseek-mtp-1")
    big = moe.MoEDeployment.build("deepseek-v3", "h200", 256, tp=1, ep=256)
    with pytest.raises(SpecError, match=r"pp x gpus \(8 x 256 = 2048\) must be at most 1024 GPUs per instance"):
        moe.check_decoding(big, 8)
    assert moe.check_decoding(big, 4)[0] == 4


def test_why_speculation_pays_least_under_ep_at_large_batches():
    """docs/models.md §4.8: at 4,096 sequences of 2,048 tokens nearly every part of a DPA+EP16 step grows with the
    second token of the verify pass (the all-to-all bytes, the MLA attention's FLOPs, the routed GEMMs), while
    TP16's step is mostly the replicated latent KV, read once for both tokens."""
    W = 2
    ep = moe.MoEDeployment.build("deepseek-v3", "h200", 16, tp=1, ep=16, layers=8)
    p, v = moe.step_time(ep, 4096, 2048, skew=2.6), moe.step_time(dataclasses.replace(ep, q_tokens=W), 4096, 2048,
                                                                  skew=2.6)
    for k, lo in (("comm_s", 1.8), ("attention_s", 1.7), ("ffn_moe_s", 1.5)):
        assert v[k] / p[k] > lo, k
    tp = moe.MoEDeployment.build("deepseek-v3", "h200", 16, tp=16, ep=1)
    p, v = moe.step_time(tp, 4096, 2048), moe.step_time(dataclasses.replace(tp, q_tokens=W), 4096, 2048)
    assert p["attention_s"] > 0.5 * p["step_s"] and v["attention_s"] / p["attention_s"] < 1.15


@pytest.mark.parametrize("skew", [1.0, 2.6])
def test_published_sglang_mtp_speedups_on_h200_tp8(skew):
    """SGLang docs/basic_usage/deepseek.md at sgl-project/sglang f26e4af5 (Multi-token Prediction): DeepSeek-V3 MTP
    'the decoding speed can be improved by 1.8x for batch size 1 and 1.5x for batch size 32 respectively on H200 TP8
    setting', accepted length ~1.9 (sgl-project/sglang PR #3582; data/validation/speculative.csv rows
    sglang-h200-v3-mtp-b1/-b32, context 1,500 as there). SGLang's TP8 slices every expert (MoE-TP, the wing's
    ep = 1). The wing reads 1.72x (-4.4 %) and 1.50x (+0.0 %), and a hot-expert skew barely moves them: under pure
    TP every GPU computes its slice of every hit expert, so skew only changes which experts are hit."""
    md = moe.MoEDeployment.build("deepseek-v3", "h200", 8, tp=8, ep=1, runtime="sglang", weight_dtype="fp8")
    spec = user_spec(md.model, "deepseek-mtp-1", 1.9)
    plain = moe.token_time(md, np.array([1, 32]), 1500, skew=skew)
    mtp = moe.token_time(md, np.array([1, 32]), 1500, skew=skew, speculative=spec)
    speedup = plain["tpot_s"] / mtp["tpot_s"]
    np.testing.assert_allclose(speedup, [1.8, 1.5], rtol=0.06)


def test_stages_inside_one_node_meet_over_the_scale_up_link():
    md = moe.MoEDeployment.build("qwen3-30b-a3b", "h200", 4, tp=1, ep=4)
    assert moe.hop_link(md, 2) is md.fabric.scale_up  # 2 x 4 GPUs in a node of 8
    assert moe.hop_link(md, 4) is md.fabric.scale_out
    r = moe.token_time(md, 64, 2048, pp=2)
    np.testing.assert_allclose(r["hops_s"], sendrecv_s(np.ceil(32 / 4) * md.model.hidden * 2, md.fabric.scale_up),
                               rtol=1e-12)
