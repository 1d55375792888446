"""Reference checks: derived quantities against published configs and numbers.

Each expected value is (a) recomputed by hand in the test from the config.json numbers and (b) compared with
the published figure, whose source is cited next to it. Parameter totals "incl. norms" are the HF safetensors
totals (``model.safetensors.index.json`` ``metadata.total_size`` / 2 bytes for the BF16 checkpoints).
"""

import dataclasses
import math

import pytest

from llmexplore import presets
from llmexplore.models.step import decode as att
from llmexplore.models.step.engine import Deployment

pytestmark = pytest.mark.reference

GiB, MiB = 2**30, 2**20


def dense_gqa_params(L, H, hq, hkv, d, I, V, tied, qk_norm=False, norms=True):
    """Decoder-only SwiGLU GQA model (docs/models.md §2): per layer H h_q d + 2 H h_kv d + h_q d H + 3 H I,
    embedding V H (x2 if untied), RMSNorms 2H per layer (+2d with Qwen3 q/k norms) + final H."""
    layer = H * hq * d + 2 * H * hkv * d + hq * d * H + 3 * H * I
    norm = (2 * H + (2 * d if qk_norm else 0)) * L + H if norms else 0
    return L * layer + V * H * (1 if tied else 2) + norm


def deepseek_norms_and_bias(m):
    return m.layers * m.norm_params_per_layer + m.hidden + m.moe_layers * m.routed_experts


# ---- parameter counts --------------------------------------------------------------------------------------

def test_llama3_8b_params():
    # meta-llama/Meta-Llama-3-8B config.json: L 32, H 4096, 32/8 heads, d 128, I 14336, V 128256, untied.
    # HF safetensors total 8,030,261,248 params (index total_size 16,060,522,496 B in BF16).
    n = dense_gqa_params(32, 4096, 32, 8, 128, 14336, 128256, tied=False)
    assert n == 8_030_261_248
    assert presets.model("llama-3-8b").params_total == n
    # docs/models.md §2 "derived" count excludes the norms: 8,029,995,008
    assert dense_gqa_params(32, 4096, 32, 8, 128, 14336, 128256, tied=False, norms=False) == 8_029_995_008


def test_llama32_3b_params_tied():
    # meta-llama/Llama-3.2-3B config.json: L 28, H 3072, 24/8 heads, d 128, I 8192, V 128256, tied embeddings.
    # HF safetensors total 3,212,749,824 params.
    n = dense_gqa_params(28, 3072, 24, 8, 128, 8192, 128256, tied=True)
    assert n == 3_212_749_824
    m = presets.model("llama-3.2-3b")
    assert m.params_total == n
    assert m.params_active == n  # tied table counts once, as the LM head


def qwen3_moe_params(L, H, hq, hkv, d, E, Ie, V) -> int:
    """A Qwen3 MoE model's parameters from its config.json, every layer MoE, untied: Q/K/V/O projections (Q width
    hq*d, which need not equal H), the two layer norms and the q/k norms, E experts of three H x Ie matrices and
    the router, both embedding tables and the final norm."""
    attn = H * hq * d + 2 * H * hkv * d + hq * d * H
    norms = 2 * H + 2 * d
    per_layer = attn + norms + E * 3 * H * Ie + H * E  # + router
    return L * per_layer + 2 * V * H + H  # + final norm


def test_qwen3_30b_a3b_moe_params():
    # Qwen/Qwen3-30B-A3B config.json: L 48 (all MoE), H 2048, 32/4 heads, d 128, q/k norms, 128 experts of
    # I_e 768, top-8, V 151936, untied. HF safetensors index total: 30,532,122,624 params (the model card's
    # "30.5B"); 3,353,032,704 touched per token counting both embedding tables (the card's "3.3B activated";
    # llmexplore's params_active counts the LM head but not the input table, since a lookup reads one row).
    L, H, hq, hkv, d, E, k, Ie, V = 48, 2048, 32, 4, 128, 128, 8, 768, 151936
    total = qwen3_moe_params(L, H, hq, hkv, d, E, Ie, V)
    assert total == 30_532_122_624
    m = presets.model("qwen3-30b-a3b")
    assert m.params_total == total
    assert m.params_active + V * H == 3_353_032_704 == total - L * (E - k) * 3 * H * Ie


def test_llama3_70b_params():
    # meta-llama/Meta-Llama-3-70B config.json: L 80, H 8192, 64/8 heads, d 128, I 28672, V 128256, untied.
    # HF safetensors total 70,553,706,496 params; docs/models.md §2 excl. norms 70,552,387,584.
    n = dense_gqa_params(80, 8192, 64, 8, 128, 28672, 128256, tied=False)
    assert n == 70_553_706_496
    assert presets.model("llama-3-70b").params_total == n
    assert dense_gqa_params(80, 8192, 64, 8, 128, 28672, 128256, tied=False, norms=False) == 70_552_387_584


def test_llama33_70b_is_the_llama31_70b_architecture():
    # meta-llama/Llama-3.3-70B-Instruct config.json: the Llama-3.1-70B shapes (L 80, H 8192, 64/8 heads, d 128,
    # I 28672, V 128256, untied), so the same 70,553,706,496 parameters and 320 KiB of BF16 KV per token
    m = presets.model("llama-3.3-70b")
    assert m.params_total == dense_gqa_params(80, 8192, 64, 8, 128, 28672, 128256, tied=False) == 70_553_706_496
    assert m.kv_bytes_per_token("bf16") == 2 * 80 * 8 * 128 * 2 == 327_680


def test_qwen3_235b_a22b_moe_params():
    # Qwen/Qwen3-235B-A22B config.json: L 94 (all MoE), H 4096, 64/4 heads, d 128 (Q width 8192 != H), q/k norms,
    # 128 experts of I_e 1536, top-8, no shared expert, V 151936, untied. Its safetensors index gives
    # metadata.total_size 470,187,269,120 B in BF16: 235,093,634,560 parameters (the card's "235B").
    L, H, hq, hkv, d, E, k, Ie, V = 94, 4096, 64, 4, 128, 128, 8, 1536, 151936
    total = qwen3_moe_params(L, H, hq, hkv, d, E, Ie, V)
    assert total == 235_093_634_560 == 470_187_269_120 // 2
    m = presets.model("qwen3-235b-a22b")
    assert m.params_total == total
    # touched per token: all but the 120 unrouted experts of every layer, and the LM head but not the input table
    assert m.params_active == total - L * (E - k) * 3 * H * Ie - V * H == 21_568_433_664
    assert 22.0e9 < m.params_active + V * H < 22.3e9  # the card's "22B activated" counts both tables
    assert m.kv_bytes_per_token("bf16") == 2 * L * hkv * d * 2 == 192_512


def test_qwen3_4b_params():
    # Qwen/Qwen3-4B config.json: L 36, H 2560, 32/8 heads, explicit head_dim 128, I 9728, V 151936, tied.
    # docs/models.md §2 (norms excluded): total 4,022,272,000, non-embedding 3,633,315,840.
    total = dense_gqa_params(36, 2560, 32, 8, 128, 9728, 151936, tied=True, norms=False)
    assert total == 4_022_272_000
    assert total - 151936 * 2560 == 3_633_315_840
    m = presets.model("qwen3-4b")
    norms = 36 * (2 * 2560 + 2 * 128) + 2560  # incl. Qwen3 q_norm/k_norm
    assert m.params_total - norms == 4_022_272_000
    assert m.params_non_embedding - norms == 3_633_315_840


def test_qwen3_32b_params():
    # Qwen/Qwen3-32B config.json: L 64, H 5120, 64/8 heads, head_dim 128, I 25600, V 151936, untied.
    # docs/models.md §2 (norms excluded): 32,761,446,400
    n = dense_gqa_params(64, 5120, 64, 8, 128, 25600, 151936, tied=False, norms=False)
    assert n == 32_761_446_400
    m = presets.model("qwen3-32b")
    assert m.params_total - (64 * (2 * 5120 + 2 * 128) + 5120) == n


def test_deepseek_v3_params():
    # deepseek-ai/DeepSeek-V3 config.json; docs/models.md §2: 671,025,397,760 total and 36,624,596,992 activated
    # (norms and router bias excluded; activated excludes the input embedding and 248 unselected experts per
    # MoE layer). tenstorrent README_WEIGHTS: 671B total, 36.6B active incl. the 0.9B output head.
    H, V = 7168, 129280
    attn = H * 1536 + 1536 * 128 * 192 + H * 576 + 512 * 128 * 256 + 128 * 128 * H  # 187,105,280
    expert = 3 * H * 2048
    dense_ffn = 3 * H * 18432
    router = H * 256
    total = 61 * attn + 3 * dense_ffn + 58 * (257 * expert + router) + 2 * V * H
    active = total - 58 * (256 - 8) * expert - V * H
    assert total == 671_025_397_760
    assert active == 36_624_596_992
    m = presets.model("deepseek-v3")
    extra = deepseek_norms_and_bias(m)
    assert m.params_total - extra == total
    assert m.params_active - extra == active
    assert V * H / 1e9 == pytest.approx(0.93, abs=0.005)  # "0.9B head"
    assert round(active / 1e9, 1) == 36.6


def test_kimi_k2_params():
    # moonshotai/Kimi-K2-Instruct config.json (kimi_k2 = the DeepSeek-V3 architecture): H 7168, 61 layers of
    # which 1 dense, 64 heads (DeepSeek-V3: 128), MLA ranks 1536/512, 384 routed experts of 2048 + 1 shared, top-8,
    # V 163840. The model card: "1T" total, "32B" activated. Counted as for DeepSeek-V3 (norms and router bias
    # apart; activated without the input table and the 376 unselected experts of each MoE layer).
    H, V, heads = 7168, 163840, 64
    attn = H * 1536 + 1536 * heads * 192 + H * 576 + 512 * heads * 256 + heads * 128 * H
    expert = 3 * H * 2048
    total = 61 * attn + 3 * H * 18432 + 60 * (385 * expert + H * 384) + 2 * V * H
    active = total - 60 * (384 - 8) * expert - V * H
    assert total == 1_026_407_202_816 and active == 31_686_066_176
    m = presets.model("kimi-k2")
    extra = deepseek_norms_and_bias(m)
    assert m.params_total - extra == total and m.params_active - extra == active
    assert round(total / 1e12, 2) == 1.03 and round(active / 1e9) == 32  # "1T total, 32B activated"
    # MLA: one latent of 512 + the 64-wide rope key per layer, as DeepSeek-V3 (the heads do not enter the KV)
    assert m.kv_bytes_per_token("bf16") == presets.model("deepseek-v3").kv_bytes_per_token("bf16") == 61 * 576 * 2


# ---- KV bytes per token (PEERS.md §3.1) --------------------------------------------------------------------

@pytest.mark.parametrize("name, L, hkv, d, bf16", [
    ("llama-3-70b", 80, 8, 128, 327_680),  # 320 KiB; llm-d: "305 GB for 1M tokens"; inference-sim#806 ~328 KB
    ("llama-3-8b", 32, 8, 128, 131_072),  # 128 KiB; inference-sim#806 "~128 KB/token"
    ("qwen3-32b", 64, 8, 128, 262_144),  # 256 KiB; head_dim explicit 128, not 5120/64 (LMCache#688)
])
def test_gqa_kv_bytes_per_token(name, L, hkv, d, bf16):
    assert 2 * L * hkv * d * 2 == bf16
    m = presets.model(name)
    assert m.kv_bytes_per_token("bf16") == bf16
    assert m.kv_bytes_per_token("fp8") == bf16 / 2


def test_llama70_kv_public_cross_checks():
    m = presets.model("llama-3-70b")
    # llm-d FS blog: "305 GB for 1M tokens" (GiB): 327,680 x 1e6 B = 305.2 GiB
    assert m.kv_bytes_per_token() * 1e6 / GiB == pytest.approx(305.2, abs=0.05)
    # Mooncake README: "40 GB ~ 128k tokens of LLaMA3-70B" = 40.0 GiB
    assert m.kv_bytes_per_token() * 128 * 1024 / GiB == pytest.approx(40.0, abs=1e-9)
    # per rank at TP8 (PEERS.md §3.1): 40,960 B
    assert m.kv_bytes_per_token() * m.kv_heads_per_rank(8) / m.kv_heads == 40_960


def test_deepseek_v3_kv_bytes_per_token():
    # 61 layers x (kv_lora_rank 512 + qk_rope 64) = 576 per layer, not TP-sharded (AIConfigurator memory.py)
    m = presets.model("deepseek-v3")
    assert m.kv_bytes_per_token("bf16") == 61 * 576 * 2 == 70_272
    assert m.kv_bytes_per_token("fp8") == 61 * 576 == 35_136


def test_llama32_3b_lmcache_block():
    # docs/models.md §2: a 256-token block (LMCache chunk size) of Llama-3.2-3B in BF16 is 29,360,128 B = 28 MiB
    m = presets.model("llama-3.2-3b")
    block = 256 * 2 * 28 * 8 * 128 * 2
    assert block == 29_360_128 == 28 * MiB
    assert 256 * m.kv_bytes_per_token("bf16") == block


# ---- AIConfigurator memory numbers -------------------------------------------------------------------------

def test_llama70_tp8_weights_per_gpu_aiconfigurator():
    # AIConfigurator reports 16.43 GiB of weights per GPU for Meta-Llama-3.1-70B at TP8 (BF16):
    # 70,553,706,496 params x 2 B / 8 = 16.427 GiB (norms replicated add 2.3 MB: 16.429 GiB)
    dep = Deployment.build("llama-3-70b", "h100-sxm", 8)
    w = float(att.memory_per_rank(dep, 1, 1, "TP")["weights_B"])
    assert round(w / GiB, 2) == 16.43
    assert 70_553_706_496 * 2 / 8 <= w <= 70_553_706_496 * 2 / 8 + 80 * 2 * 8192 * 2 + 8192 * 2


def test_llama70_tp8_kv_per_sequence_aiconfigurator():
    # AIConfigurator: 0.166 GiB of KV per sequence per GPU at 4352 tokens, Llama-3.1-70B TP8 BF16
    # = 4352 x 40,960 B = 178,257,920 B (4352 = 272 pages of 16, no rounding)
    dep = Deployment.build("llama-3-70b", "h100-sxm", 8)
    kv = float(att.memory_per_rank(dep, 1, 4352, "TP")["kv_B"])
    assert kv == 4352 * 40_960
    assert round(kv / GiB, 3) == 0.166


# ---- hardware ----------------------------------------------------------------------------------------------

def test_h100_ridge_point():
    # docs/models.md §1.1 and §7.1: H100 SXM 989.4 TFLOPS dense BF16 / 3.35 TB/s = 295 FLOP/B
    assert round(presets.hardware("h100-sxm").ridge_flops_per_byte("bf16")) == 295


@pytest.mark.parametrize("name, hbm, bw, bf16, fp8", [
    # HBM as the driver reports it, GiB: H100 nvidia-smi 81,559 MiB (modal-labs/modal-client#2797);
    # H200 ~143,771 MiB (PEERS §3.2); B200 183,359 MiB (NVIDIA/TensorRT-LLM#10278); MI300X 8 x 25,767,706,624 B
    # (ROCm/legacy-rocm-build#4750). Bandwidth and dense peaks: datasheets (sparse figures halved); B200 7.7 TB/s
    # as AIConfigurator and the driver-reported 7680-bit bus (pytorch/ao#4002).
    ("h100-sxm", 81_559 / 1024, 3.35, 989.4, 1978.9),
    ("h200", 143_771 / 1024, 4.8, 989.4, 1978.9),
    ("b200", 183_359 / 1024, 7.7, 2250, 4500),
    ("mi300x", 8 * 25_767_706_624 / 2**30, 5.3, 1307.4, 2614.9),
])
def test_accelerator_constants(name, hbm, bw, bf16, fp8):
    # docs/models.md §7.1 table (dense peaks)
    hw = presets.hardware(name)
    assert hw.hbm_GiB == pytest.approx(hbm, abs=0.01)  # the preset is rounded to 0.01 GiB
    assert (hw.hbm_bw_TBps, hw.bf16_TFLOPS, hw.fp8_TFLOPS) == (bw, bf16, fp8)
    assert hw.fp8_TFLOPS == pytest.approx(2 * hw.bf16_TFLOPS, rel=1e-3)


def test_nvlink4_constants():
    # docs/models.md §7.2: NVLink4 450 GB/s/dir line rate, ~370 GB/s NCCL ring busbw (nccl-tests#212)
    lk = presets.link("nvlink4")
    assert (lk.line_rate_GBps, lk.achievable_GBps) == (450, 370)
    assert math.isclose(lk.efficiency, 370 / 450)


# ---- gpt-oss (issue 21 §3): openai/gpt-oss-120b and -20b config.json; model card 116.83B / 5.13B and
# 20.91B / 3.61B parameters ------------------------------------------------------------------------------------
def gpt_oss_params(L, E, H=2880, hq=64, hkv=8, d=64, Ie=2880, V=201088) -> tuple[int, int]:
    """(total, active) of a gpt-oss config by hand: attention with q/k/v/o biases and one sink per head, every
    layer MoE with E experts (SwiGLU with biases: gate_up H x 2 I_e + 2 I_e, down I_e x H + H), a router with bias,
    two RMSNorms per layer, untied embedding and LM head, a final norm; active = 4 experts, no input embedding."""
    attn = H * hq * d + hq * d + 2 * (H * hkv * d + hkv * d) + hq * d * H + H + hq
    expert = H * 2 * Ie + 2 * Ie + Ie * H + H
    layer = attn + E * expert + (H * E + E) + 2 * H
    total = L * layer + 2 * V * H + H
    return total, total - L * (E - 4) * expert - V * H


@pytest.mark.parametrize("name, L, E, card_total, card_active", [
    ("gpt-oss-120b", 36, 128, 116.83e9, 5.13e9), ("gpt-oss-20b", 24, 32, 20.91e9, 3.61e9)])
def test_gpt_oss_params_match_the_config_and_the_model_card(name, L, E, card_total, card_active):
    m = presets.model(name)
    total, active = gpt_oss_params(L, E)
    assert (m.params_total, m.params_active) == (total, active)
    assert m.params_total == pytest.approx(card_total, abs=0.005e9)
    assert m.params_active == pytest.approx(card_active, abs=0.005e9)


def test_gpt_oss_120b_pinned():
    m = presets.model("gpt-oss-120b")
    assert (m.params_total, m.params_active) == (116_829_156_672, 5_132_849_472)
    assert m.kv_bytes_per_token("bf16") == 36 * 2 * 8 * 64 * 2 == 73_728


def test_gpt_oss_sliding_window_kv_is_bounded_by_the_window():
    """Half the layers attend over 128 tokens: at 8,192 tokens a sequence holds 18 x 8,192 + 18 x 128 layer-tokens,
    50.8% of what full attention in every layer would (a planner that charged every layer the whole context
    over-charged gpt-oss's KV by about 2x, issue 21)."""
    m = presets.model("gpt-oss-120b")
    assert m.kv_layer_tokens(8192) == 18 * 8192 + 18 * 128
    assert m.kv_bytes_per_sequence(8192, "bf16") / (m.kv_bytes_per_token("bf16") * 8192) == pytest.approx(
        (8192 + 128) / (2 * 8192))
    assert m.kv_bytes_per_sequence(100, "bf16") == m.kv_bytes_per_token("bf16") * 100  # within the window


def test_gpt_oss_120b_fits_one_80gb_gpu_as_its_model_card_says():
    """OpenAI's model card: gpt-oss-120b 'fits into a single 80GB GPU' (MXFP4 experts). On one H100 (79.65 GiB as
    nvidia-smi reports it) the model holds its 63.8 GB of weights and 30 sequences of 8,192 tokens; with every
    layer at full attention it would hold 15."""
    from llmexplore.models.step.decode import max_batch

    d = Deployment.build("gpt-oss-120b", "h100-sxm", 1)
    assert d.weight_dtype == "mxfp4" and sum(d.weight_bytes("TP").values()) == pytest.approx(63.79e9, rel=0.01)
    n = int(max_batch(d, 8192, "TP"))
    full = dataclasses.replace(d, model=d.model.replace(sliding_layers=0, sliding_window=0))
    assert n == 30 and int(max_batch(full, 8192, "TP")) == 15
