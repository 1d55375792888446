"""Attention layouts TP, CP, DPA, DOP: memory per rank, attention-core FLOPs/bytes, communication, validation
and capacity boundaries (docs/models.md §3.1-3.3, §3.7). Expected values are computed by hand from the config
numbers (docs/models.md §2 table) and the formulas of docs/models.md §3.2/§3.3, not read back from the code."""

import math

import numpy as np
import pytest

from llmexplore import presets
from llmexplore.errors import SpecError
from llmexplore.models.step import decode as att
from llmexplore.models.step.engine import LAYOUTS, Deployment
from llmexplore.models.step.collectives import allgather_s, allreduce_s, alltoall_s, reducescatter_s

GiB = 2**30
PAGE = 16  # data/runtime.yaml default page_tokens (vLLM block_size 16)

# Llama-3-70B config.json: L 80, H 8192, h_q 64, h_kv 8, d 128, I 28672, V 128256, untied
L70, H70, HQ70, HKV70, D70, I70, V70 = 80, 8192, 64, 8, 128, 28672, 128256
# DeepSeek-V3 config.json
L_DS, H_DS, HQ_DS, RQ, RKV, DN, DR, DV = 61, 7168, 128, 1536, 512, 128, 64, 128
W_REP = H_DS * RQ + H_DS * (RKV + DR)  # 15,138,816 (docs/models.md §2)
W_SHARD = RQ * HQ_DS * (DN + DR) + RKV * HQ_DS * (DN + DV) + HQ_DS * DV * H_DS  # 171,966,464


def ceil_pg(s):
    return math.ceil(s / PAGE) * PAGE


@pytest.fixture(scope="module")
def llama70_tp8():
    return Deployment.build("llama-3-70b", "h100-sxm", 8, runtime="uncalibrated")  # formulas use its constants


@pytest.fixture(scope="module")
def dsv3_fp8():
    return Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8", runtime="uncalibrated")


def kv_B(dep, batch, context, layout):
    return float(att.memory_per_rank(dep, batch, context, layout)["kv_B"])


# ---- weights per rank (docs/models.md §3.2) ---------------------------------------------------------------------

def test_llama70_tp8_weights_by_hand(llama70_tp8):
    # TP8: q, o split 8 ways; K/V: max(1, 8 // 8) = 1 of 8 heads; FFN /8; vocab-parallel embedding + LM head;
    # norms replicated. All BF16.
    attn = L70 * ((2 * H70 * HQ70 * D70) / 8 + 2 * H70 * D70 * 1) * 2
    ffn = L70 * 3 * H70 * I70 / 8 * 2
    emb = 2 * V70 * H70 / 8 * 2
    norms = (L70 * 2 * H70 + H70) * 2
    w = llama70_tp8.weight_bytes("TP")
    assert w == {"attention": attn, "ffn": ffn, "embedding": emb, "norms": norms}
    # the weights reported by memory_per_rank are the sum of the parts
    assert float(att.memory_per_rank(llama70_tp8, 1, 1, "TP")["weights_B"]) == attn + ffn + emb + norms


def test_gqa_weights_cp_dpa_full_dop_as_tp(llama70_tp8):
    full = L70 * (2 * H70 * HQ70 * D70 + 2 * H70 * HKV70 * D70) * 2
    assert llama70_tp8.weight_bytes("CP")["attention"] == full
    assert llama70_tp8.weight_bytes("DPA")["attention"] == full
    assert llama70_tp8.weight_bytes("DOP") == llama70_tp8.weight_bytes("TP")


def test_gqa_tp_weights_with_more_ranks_than_kv_heads():
    # T = 16 > h_kv = 8: K/V projections replicated in pairs: per rank 2 H d max(1, 8 // 16) = 2 H d
    dep = Deployment.build("llama-3-70b", "h100-sxm", 16)
    attn = L70 * ((2 * H70 * HQ70 * D70) / 16 + 2 * H70 * D70 * 1) * 2
    assert dep.weight_bytes("TP")["attention"] == attn


@pytest.mark.parametrize("T", [2, 4, 8])
def test_mla_tp_weights_keep_down_projections_replicated(T):
    # docs/models.md §3.2: TP MLA weights = L b_w (W_rep + W_shard / T), not W / T
    dep = Deployment.build("deepseek-v3", "h200", T, weight_dtype="fp8")
    assert dep.weight_bytes("TP")["attention"] == pytest.approx(L_DS * 1 * (W_REP + W_SHARD / T), rel=1e-15)
    assert dep.weight_bytes("CP")["attention"] == L_DS * 1 * (W_REP + W_SHARD)
    assert dep.weight_bytes("DPA")["attention"] == L_DS * 1 * (W_REP + W_SHARD)


def test_dsv3_ffn_and_other_weights(dsv3_fp8):
    # 3 dense layers with FFN /8; 58 MoE layers with (256 routed + 1 shared) / 8 experts of 3 H I_e, FP8,
    # plus a BF16 router (H x E + bias) replicated; vocab-parallel BF16 embedding and head; BF16 norms.
    ffn = 3 * 3 * H_DS * 18432 / 8 * 1 + 58 * ((256 + 1) / 8 * 3 * H_DS * 2048 * 1 + (H_DS * 256 + 256) * 2)
    w = dsv3_fp8.weight_bytes("TP")
    assert w["ffn"] == pytest.approx(ffn, rel=1e-15)
    assert w["embedding"] == 2 * 129280 * H_DS / 8 * 2
    assert w["norms"] == (L_DS * (2 * H_DS + RQ + RKV) + H_DS) * 2


# ---- KV per rank (docs/models.md §3.2 KV table) -----------------------------------------------------------------

def test_llama70_tp8_kv_per_sequence_and_page_rounding(llama70_tp8):
    per_tok = 2 * L70 * D70 * 2 * max(1, HKV70 // 8)  # 40,960 B per token per rank (PEERS.md §3.1)
    assert per_tok == 40_960
    assert kv_B(llama70_tp8, 1, 4352, "TP") == 4352 * per_tok  # 272 full pages
    assert kv_B(llama70_tp8, 1, 4353, "TP") == 273 * PAGE * per_tok  # one more token -> one more page
    assert kv_B(llama70_tp8, 1, 1, "TP") == PAGE * per_tok
    assert kv_B(llama70_tp8, 5, 4353, "TP") == 5 * 273 * PAGE * per_tok


@pytest.mark.parametrize("T, heads_per_rank", [(1, 8), (2, 4), (4, 2), (8, 1), (16, 1)])
def test_gqa_tp_kv_is_head_sharded(T, heads_per_rank):
    dep = Deployment.build("llama-3-70b", "h100-sxm", T)
    assert kv_B(dep, 3, 1000, "TP") == 3 * ceil_pg(1000) * 2 * L70 * D70 * 2 * heads_per_rank


@pytest.mark.parametrize("T", [1, 2, 4, 8])
@pytest.mark.parametrize("kv_dtype, per_tok", [("bf16", 70_272), ("fp8", 35_136)])
def test_mla_tp_kv_is_replicated(T, kv_dtype, per_tok):
    # MLA latent (512 + 64) x 61 layers is held in full on every TP rank, independent of T
    dep = Deployment.build("deepseek-v3", "h200", T, weight_dtype="fp8", kv_dtype=kv_dtype)
    assert kv_B(dep, 4, 5000, "TP") == 4 * ceil_pg(5000) * per_tok


@pytest.mark.parametrize("s, pages_worst", [(1, 1), (100, 1), (128, 1), (129, 2), (1000, 8), (4096, 32)])
def test_cp_worst_rank_holds_ceil_pages_over_T(llama70_tp8, s, pages_worst):
    # pages dealt round-robin: the worst rank holds ceil(ceil(s/16) / 8) pages of every sequence, full KV
    assert pages_worst == math.ceil(math.ceil(s / PAGE) / 8)
    assert kv_B(llama70_tp8, 3, s, "CP") == 3 * pages_worst * PAGE * 327_680


@pytest.mark.parametrize("layout", ["DPA", "DOP"])
@pytest.mark.parametrize("B, worst", [(1, 1), (8, 1), (9, 2), (16, 2), (17, 3), (64, 8)])
def test_dpa_dop_worst_rank_holds_ceil_B_over_T_sequences(llama70_tp8, layout, B, worst):
    assert kv_B(llama70_tp8, B, 1000, layout) == worst * ceil_pg(1000) * 327_680


def test_dpa_context_imbalance_adds_z_sqrt_n(dsv3_fp8):
    # docs/models.md §3.3: E[max_j X_j] ~ m mu + sigma sqrt(m) z_T; here m = ceil(B/T) = 4, cv = 0.5,
    # z_8 = 1.4236
    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8", context_cv=0.5)
    n = 4
    share = n + 0.5 * dep.z_ranks * math.sqrt(n)
    assert dep.z_ranks == pytest.approx(1.4236, abs=1e-4)
    assert kv_B(dep, 32, 4096, "DPA") == pytest.approx(share * 4096 * 70_272, rel=1e-12)
    # TP and CP do not depend on the assignment
    assert kv_B(dep, 32, 4096, "TP") == kv_B(dsv3_fp8, 32, 4096, "TP")


def test_memory_total_is_sum_of_parts_and_feasibility(llama70_tp8):
    for lay in LAYOUTS:
        m = att.memory_per_rank(llama70_tp8, 16, 8192, lay)
        parts = m["weights_B"] + m["kv_B"] + m["activations_B"] + m["reserve_B"]
        assert float(m["total_B"]) == pytest.approx(float(parts), rel=1e-15)
        # usable = gpu_memory_utilization (vLLM default 0.9) x the capacity the driver reports
        # (nvidia-smi: 81,559 MiB on an H100 SXM "80GB")
        assert float(m["usable_B"]) == pytest.approx(0.9 * 81_559 * 2**20, rel=1e-4)
        assert float(m["reserve_B"]) == 3.5 * GiB  # AIConfigurator other_mem 3.5 GiB
        assert bool(m["feasible"]) == (float(m["total_B"]) <= float(m["usable_B"]))
    # 141 GB of BF16 weights do not fit replicated: CP and DPA replicate 20+ GB of attention weights per rank
    assert bool(att.memory_per_rank(llama70_tp8, 1, 1, "TP")["feasible"])


# ---- attention core (docs/models.md §1.1 and §3.3 attention-core table) -----------------------------------------

@pytest.mark.parametrize("T", [2, 4, 8])
def test_tp_mla_core_bytes_independent_of_T(T):
    dep = Deployment.build("deepseek-v3", "h200", T, weight_dtype="fp8")
    B, q = 16, 1
    co = att.core_coefficients(dep, B, "TP")
    # FLOPs per context token: 2 q (h_q / T) (2 r_kv + d_r); bytes: the full 576-wide latent, b_kv = 2
    assert float(co["f1"]) == B * 2 * q * (HQ_DS / T) * (2 * RKV + DR)
    assert float(co["m1"]) == B * (RKV + DR) * 2
    # query read (576 wide) and output write (512 wide) of the local heads, BF16
    assert float(co["m0"]) == B * q * (HQ_DS / T) * (RKV + DR + RKV) * 2


@pytest.mark.parametrize("T", [1, 2, 4, 8])
def test_tp_gqa_core_bytes_shrink_by_T(T):
    dep = Deployment.build("llama-3-70b", "h100-sxm", T)
    B = 16
    co = att.core_coefficients(dep, B, "TP")
    assert float(co["f1"]) == B * 4 * (HQ70 / T) * D70
    assert float(co["m1"]) == B * 2 * D70 * 2 * (HKV70 / T)
    # intensity 2 (h_q / h_kv) q / b_kv = 8 FLOP/B for Llama-3-70B (docs/models.md §1.1), whatever T
    assert float(co["f1"] / co["m1"]) == pytest.approx(8.0)


def test_cp_core_splits_context(llama70_tp8):
    B, T = 16, 8
    co = att.core_coefficients(llama70_tp8, B, "CP")
    assert float(co["f1"]) == B / T * 4 * HQ70 * D70  # all heads, 1/T of every sequence's tokens
    assert float(co["m1"]) == B / T * 2 * HKV70 * D70 * 2
    assert float(co["m0"]) == B * HQ70 * 2 * D70 * 2  # every rank reads all queries, writes partial O


@pytest.mark.parametrize("B, n", [(8, 1), (9, 2), (64, 8)])
def test_dpa_core_owned_sequences_all_heads(dsv3_fp8, B, n):
    co = att.core_coefficients(dsv3_fp8, B, "DPA")
    assert float(co["f1"]) == n * 2 * HQ_DS * (2 * RKV + DR)
    assert float(co["m1"]) == n * (RKV + DR) * 2
    assert float(co["m0"]) == n * HQ_DS * (RKV + DR + RKV) * 2


def test_dop_core_flops_and_kv_bytes_like_dpa(dsv3_fp8):
    # DOP's attention core is batch-sharded like DPA (docs/models.md §3.3: "DPA, DOP" share one row)
    dpa = att.core_coefficients(dsv3_fp8, 64, "DPA")
    dop = att.core_coefficients(dsv3_fp8, 64, "DOP")
    assert float(dop["f1"]) == float(dpa["f1"])
    assert float(dop["m1"]) == float(dpa["m1"])


def test_mla_tp_core_time_independent_of_T_when_memory_bound():
    # docs/models.md §1.1: splitting heads divides FLOPs, not latent bytes, so TP MLA attention time does not
    # shrink with T. At T >= 2, h_q/T <= 64 heads: 2*64*1088/1152 = 121 FLOP/B < effective ridge
    # (0.67 * 989.4e12) / (0.85 * 4.8e12) = 162 FLOP/B on H200, so the core is memory-bound.
    B, s = 8, 32768
    t = {}
    for T in (2, 4, 8):
        dep = Deployment.build("deepseek-v3", "h200", T, weight_dtype="fp8", runtime="uncalibrated")
        qo = B * (HQ_DS / T) * (RKV + DR + RKV) * 2
        flops = B * s * 2 * (HQ_DS / T) * (2 * RKV + DR)
        bytes_ = B * s * (RKV + DR) * 2 + qo
        assert flops / (0.67 * 989.4e12) < bytes_ / (0.85 * 4.8e12)
        t[T] = float(att.step_time(dep, B, s, "TP")["core_s"])
        assert t[T] == pytest.approx(L_DS * (bytes_ / (0.85 * 4.8e12) + 2e-6), rel=1e-12)
    assert t[8] == pytest.approx(t[2], rel=0.005)  # only the small query/output term changes


# ---- communication (docs/models.md §3.3 communication, §3.7 items 2-5) ------------------------------------------

def _head_comm(dep, n):
    """Vocab-parallel embedding AllReduce + FP32 logits AllGather (same in every layout)."""
    return allreduce_s(n * dep.model.hidden * 2, dep.ranks, dep.fabric) + allgather_s(
        n * dep.model.vocab * 4, dep.ranks, dep.fabric)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_communication_independent_of_context(llama70_tp8, dsv3_fp8, layout):
    for dep in (llama70_tp8, dsv3_fp8):
        c = att.step_time(dep, 32, np.array([1, 128, 4096, 131072]), layout)["comm_s"]
        assert np.all(c == c[0])


def test_tp_comm_by_hand(llama70_tp8):
    B, T = 32, 8
    n = B * H70 * 2  # N_tok H b_a; attention O-proj and FFN down-proj AllReduce per layer
    expected = L70 * 2 * allreduce_s(n, T, llama70_tp8.fabric) + _head_comm(llama70_tp8, B)
    got = float(att.step_time(llama70_tp8, B, 1000, "TP")["comm_s"])
    assert got == pytest.approx(float(expected), rel=1e-12)
    # by the NCCL formula: AllReduce = alpha + 2 (T-1)/T n / B_bus with alpha = 8 + 0.5*7 us, 370 GB/s
    assert float(allreduce_s(n, T, llama70_tp8.fabric)) == pytest.approx(11.5e-6 + 2 * 7 / 8 * n / 370e9)


def test_dpa_has_no_attention_side_communication(llama70_tp8):
    # only the FFN boundary: AllGather + ReduceScatter of the padded tokens N_pad = T ceil(B/T), plus the head
    B, T = 9, 8
    n_pad = T * math.ceil(B / T)  # 16
    fab = llama70_tp8.fabric
    x = n_pad * H70 * 2
    expected = (L70 * (allgather_s(x, T, fab) + reducescatter_s(x, T, fab)) + _head_comm(llama70_tp8, n_pad)
                + allgather_s(x, T, fab))
    got = float(att.step_time(llama70_tp8, B, 1000, "DPA")["comm_s"])
    assert got == pytest.approx(float(expected), rel=1e-12)


def test_dpa_ffn_sees_padded_batch(llama70_tp8):
    # SGLang pads DP-attention batches: B = 9 on 8 ranks runs the FFN on 16 tokens
    assert float(att.step_time(llama70_tp8, 9, 1000, "DPA")["ffn_s"]) == pytest.approx(
        float(att.step_time(llama70_tp8, 16, 1000, "TP")["ffn_s"]), rel=1e-12)


def test_cp_comm_is_partial_output_merge(llama70_tp8):
    # n_O = N_tok h_q (d_v b_a + 4 B of LSE / sums); latency-only LSE-max AllReduce; then the TP FFN AllReduce
    B, T, fab = 32, 8, llama70_tp8.fabric
    n_o = B * HQ70 * (D70 * 2 + 4)
    per_layer = allreduce_s(n_o, T, fab) + allreduce_s(0.0, T, fab) + allreduce_s(B * H70 * 2, T, fab)
    expected = L70 * per_layer + _head_comm(llama70_tp8, B)
    got = float(att.step_time(llama70_tp8, B, 1000, "CP")["comm_s"])
    assert got == pytest.approx(float(expected), rel=1e-12)


def test_dop_comm_by_hand_and_above_tp(dsv3_fp8, llama70_tp8):
    # MLA absorbed: Q travels 576-wide per local head, O 512-wide; then the O-proj AllReduce (as TP)
    B, T, fab = 64, 8, dsv3_fp8.fabric
    send_q = B * (HQ_DS / T) * (RKV + DR) * 2
    send_o = B * (HQ_DS / T) * RKV * 2
    ar = allreduce_s(B * H_DS * 2, T, fab)
    expected = (L_DS * (alltoall_s(send_q, T, fab) + alltoall_s(send_o, T, fab) + 2 * ar)
                + _head_comm(dsv3_fp8, B))
    dop = float(att.step_time(dsv3_fp8, B, 1000, "DOP")["comm_s"])
    assert dop == pytest.approx(float(expected), rel=1e-12)
    for dep in (dsv3_fp8, llama70_tp8):
        for b in (1, 8, 64, 256):
            assert float(att.step_time(dep, b, 1000, "DOP")["comm_s"]) > float(
                att.step_time(dep, b, 1000, "TP")["comm_s"])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_single_rank_has_no_communication(layout):
    dep = Deployment.build("llama-3-8b", "h100-sxm", 1)
    assert float(att.step_time(dep, 8, 1000, layout)["comm_s"]) == 0.0


# ---- step-time bookkeeping ---------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_step_time_is_sum_of_parts(dsv3_fp8, layout):
    r = att.step_time(dsv3_fp8, np.array([1, 16, 128])[:, None], np.array([100, 10000])[None, :], layout)
    parts = r["attention_s"] + r["ffn_s"] + r["head_s"] + r["comm_s"] + r["overhead_s"]
    np.testing.assert_allclose(r["step_s"], parts, rtol=1e-14)
    assert np.all(r["core_s"] < r["attention_s"])
    np.testing.assert_allclose(r["tokens_per_s"], np.array([1, 16, 128])[:, None] / r["step_s"], rtol=1e-14)
    assert np.all(r["overhead_s"] == 0.5e-3)  # data/runtime.yaml uncalibrated step_overhead_ms


def test_cp_and_dpa_replicate_projection_weights(llama70_tp8):
    # docs/models.md §3.3 projections table: at batch 1 the projections are weight-read bound; CP and DPA stream
    # the full attention weights W_attn, TP streams W_attn / 8, so they differ by
    # L (1 - 1/T) W_attn b_w / (eta BW)
    # (up to activation bytes of one token, < 1e-3 of the weights)
    w_attn = 2 * H70 * HQ70 * D70 + 2 * H70 * HKV70 * D70
    diff = L70 * (1 - 1 / 8) * w_attn * 2 / (0.85 * 3.35e12)
    tp = float(att.step_time(llama70_tp8, 1, 16, "TP")["attention_s"])
    for lay in ("CP", "DPA"):
        other = float(att.step_time(llama70_tp8, 1, 16, lay)["attention_s"])
        assert other - tp == pytest.approx(diff, rel=2e-3)


# ---- validation --------------------------------------------------------------------------------------------

def test_ranks_must_divide_query_heads():
    with pytest.raises(SpecError, match=r"ranks \(3\) must divide the query heads of llama-3-70b \(64\)"):
        Deployment.build("llama-3-70b", "h100-sxm", 3)


def test_ranks_must_divide_ffn_intermediate():
    m = presets.model("llama-3-8b").replace(intermediate=14337)
    with pytest.raises(SpecError, match=r"ranks \(2\) must divide the FFN intermediate size of llama-3-8b "
                                        r"\(14337\)"):
        Deployment.build(m, "h100-sxm", 2)


def test_ranks_must_divide_routed_experts():
    m = presets.model("deepseek-v3").replace(routed_experts=264)  # 264 % 16 = 8, still a multiple of 8 groups
    with pytest.raises(SpecError,
                       match=r"ranks \(16\) must divide the routed experts of deepseek-v3 \(264\)"):
        Deployment.build(m, "h100-sxm", 16, weight_dtype="fp8")


def test_kv_heads_rule():
    # T must divide h_kv or be a multiple of it (vLLM: replicate KV heads only when T > h_kv, in whole groups)
    m = presets.model("llama-3-8b").replace(heads=48, kv_heads=12)
    with pytest.raises(SpecError, match=r"ranks \(8\) must divide or be a multiple of the KV heads of "
                                        r"llama-3-8b \(12\)"):
        Deployment.build(m, "h100-sxm", 8)
    Deployment.build(m, "h100-sxm", 4)  # 4 | 12 is fine


@pytest.mark.parametrize("kwargs, pattern", [
    (dict(ranks=0), r"ranks must be an integer in \[1, 1024\], got 0"),
    (dict(ranks=2.5), r"ranks must be an integer in \[1, 1024\], got 2.5"),
    (dict(ranks="8"), r"ranks must be an integer in \[1, 1024\], got '8'"),
    (dict(ranks=10**400), r"ranks must be an integer in \[1, 1024\], got 1000"),
    (dict(ranks=True), r"ranks must be an integer in \[1, 1024\], got True"),
    (dict(weight_dtype="int4"), r"weight_dtype must be one of .*got 'int4'"),
    (dict(weight_dtype="fp4"), r"^weight_dtype must be a dtype h100-sxm supports, got 'fp4': h100-sxm has no FP4 "
                               r"tensor cores; use bf16 or fp8$"),
    (dict(kv_dtype="fp6"), r"kv_dtype must be one of .*got 'fp6'"),
    (dict(q_tokens=0), r"q_tokens must be an integer in \[1, 1,048,576\], got 0"),
    (dict(context_cv=-0.1), r"context_cv must be a finite number in \[0, 100\], got -0.1"),
    (dict(context_cv=1j), r"context_cv must be a finite number in \[0, 100\], got 1j"),
])
def test_deployment_field_errors(kwargs, pattern):
    args = dict(model="llama-3-8b", gpu="h100-sxm", ranks=8)
    args.update(kwargs)
    with pytest.raises(SpecError, match=pattern):
        Deployment.build(**args)


def test_ranks_spanning_nodes_unevenly():
    # a model where 12 ranks divide heads, KV heads and FFN, on 8-GPU nodes
    m = presets.model("llama-3-8b").replace(heads=48, kv_heads=12, intermediate=14400)
    with pytest.raises(SpecError, match=r"ranks \(12\) spanning nodes must be a multiple of the scale-up "
                                        r"size \(8\)"):
        Deployment.build(m, "h100-sxm", 12)


@pytest.mark.parametrize("batch, context, pattern", [
    (0, 10, r"batch must be an integer in \[1, 16,777,216\], got 0"),
    (1.5, 10, r"batch must be an integer in \[1, 16,777,216\], got 1.5"),
    ([4, -2], 10, r"batch must be an integer in \[1, 16,777,216\], got -2"),
    ("8", 10, r"batch must be an integer in \[1, 16,777,216\], got '8'"),
    (1, 0, r"context must be a finite number in \[1, 1,073,741,824\], got 0"),
    (1, float("nan"), r"context must be a finite number in \[1, 1,073,741,824\], got nan"),
    (1, 1j, r"context must be a finite number in \[1, 1,073,741,824\], got 1j"),
    ([], 10, r"batch must not be empty"),
])
def test_batch_context_errors(llama70_tp8, batch, context, pattern):
    with pytest.raises(SpecError, match=pattern):
        att.step_time(llama70_tp8, batch, context, "TP")


def test_unknown_layout(llama70_tp8):
    with pytest.raises(SpecError, match=r"layout must be one of \['TP', 'CP', 'DPA', 'DOP'\], got 'EP'"):
        att.memory_per_rank(llama70_tp8, 1, 1, "EP")


# ---- capacity boundaries -----------------------------------------------------------------------------------

def _feasible(dep, b, s, lay):
    return bool(att.memory_per_rank(dep, b, s, lay)["feasible"])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_max_batch_is_exact_boundary(dsv3_fp8, layout):
    contexts = np.array([1000.0, 8192.0, 65536.0])
    mb = att.max_batch(dsv3_fp8, contexts, layout)
    for s, b in zip(contexts, mb):
        b = int(b)
        if b >= 1:
            assert _feasible(dsv3_fp8, b, s, layout)
        assert not _feasible(dsv3_fp8, b + 1, s, layout)


def test_max_batch_upper_bound_by_hand(llama70_tp8):
    # ignoring activations, B <= (usable - weights - reserve) / (KV of one sequence)
    w = sum(llama70_tp8.weight_bytes("TP").values())
    bound = math.floor((0.9 * 81_559 * 2**20 - w - 3.5 * GiB) / (4096 * 40_960))  # nvidia-smi capacity
    b = int(att.max_batch(llama70_tp8, 4096, "TP"))
    assert 0.97 * bound <= b <= bound


def test_max_batch_zero_when_nothing_fits():
    # DeepSeek-V3 in BF16 (1.34 TB) on 8x H100 does not fit at any batch
    dep = Deployment.build("deepseek-v3", "h100-sxm", 8, weight_dtype="bf16")
    assert float(att.max_batch(dep, 1000, "TP")) == 0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_max_context_is_exact_page_boundary(dsv3_fp8, layout):
    batches = np.array([1, 8, 64])
    mc = att.max_context(dsv3_fp8, batches, layout)
    for b, s in zip(batches, mc):
        s = int(s)
        assert s % PAGE == 0
        if s >= PAGE:
            assert _feasible(dsv3_fp8, b, s, layout)
        assert not _feasible(dsv3_fp8, b, s + 1, layout)  # one more token opens one more page
        assert not _feasible(dsv3_fp8, b, s + PAGE, layout)


# ---- hostile API input: always a SpecError (never ValueError/TypeError/OverflowError), '8' is not 8 ----------
HOSTILE = ["8", {"a": 1}, 1 + 2j, 10**400, True, None, [1, "a"], np.array(["x"]), float("nan"), -1, 1e300, b"8",
           [], [[1], [1, 2]], np.bool_(True)]


@pytest.mark.parametrize("where", ["batch", "context", "layout", "q_tokens", "logits_tokens"])
@pytest.mark.parametrize("value", HOSTILE, ids=repr)
@pytest.mark.parametrize("fn", ["step_time", "memory_per_rank"])
def test_hostile_inputs_raise_spec_error(llama70_tp8, fn, where, value):
    if fn == "memory_per_rank" and where in ("q_tokens", "logits_tokens"):
        return
    if value is None and where in ("q_tokens", "logits_tokens"):
        return  # None: the deployment's own
    args = {"batch": 4, "context": 1024, "layout": "TP"}
    kw = {}
    if where in args:
        args[where] = value
    else:
        kw = {"q_tokens": 4, where: value} if where == "logits_tokens" else {where: value}
    with pytest.raises(SpecError) as exc:
        getattr(att, fn)(llama70_tp8, args["batch"], args["context"], args["layout"], **kw)
    assert type(exc.value) is SpecError
    assert where.split("_")[0] in str(exc.value)


def test_same_integer_rule_everywhere(llama70_tp8):
    ok = [att.step_time(llama70_tp8, b, 1024, "TP")["step_s"] for b in (4, np.int64(4), 4.0, np.float32(4))]
    assert all(x == ok[0] for x in ok)
    for bad in (4.5, True, "4"):
        with pytest.raises(SpecError, match=r"batch must be an integer in \[1, 16,777,216\]"):
            att.step_time(llama70_tp8, bad, 1024, "TP")
        with pytest.raises(SpecError, match=r"ranks must be an integer in \[1, 1024\]"):
            Deployment.build("llama-3-8b", "h100-sxm", bad)


def test_grids_are_bounded_before_allocating(llama70_tp8):
    b = np.arange(1, 4001)[:, None]
    s = np.arange(1, 4001)[None, :] * 16.0
    with pytest.raises(SpecError, match=r"batch and context must span at most 4,194,304 points per call, got "
                                        r"shape \(4000, 4000\) = 16,000,000"):
        att.memory_per_rank(llama70_tp8, b, s, "TP")
    with pytest.raises(SpecError, match=r"must span at most 4,194,304 points"):
        att.step_time(llama70_tp8, b, s, "TP")
    with pytest.raises(SpecError, match=r"batch and context must broadcast against each other, got shapes "
                                        r"\(2,\), \(3,\)"):
        att.step_time(llama70_tp8, [1, 2], [1, 2, 3], "TP")
    with pytest.raises(SpecError, match=r"limit must be an integer in \[1, 16,777,216\], got 1e\+300"):
        att.max_batch(llama70_tp8, 1024, "TP", limit=1e300)
    with pytest.raises(SpecError, match=r"limit must be a finite number in \[1, 1,073,741,824\] \[tokens\]"):
        att.max_context(llama70_tp8, 8, "TP", limit=float("inf"))
