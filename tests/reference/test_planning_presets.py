"""Reference checks of the deployment-planning presets (issue 10): the MLPerf Inference models against their
published parameter totals, and the latency targets against the MLPerf Inference rules.

Each count is recomputed by hand from the config.json numbers (as in tests/reference/test_published.py) and
compared with the published figure, whose source is cited next to it.
"""

import dataclasses

import pytest

from llmexplore import presets

pytestmark = pytest.mark.reference


def dense_gqa_params(L, H, hq, hkv, d, I, V):
    """Untied SwiGLU GQA decoder: per layer q, k, v, o and gate/up/down, 2 RMSNorms; final norm; 2 V H."""
    layer = H * hq * d + 2 * H * hkv * d + hq * d * H + 3 * H * I + 2 * H
    return L * layer + H + 2 * V * H


# ---- parameter counts --------------------------------------------------------------------------------------

def test_llama2_70b_params():
    # meta-llama/Llama-2-70b-hf config.json: L 80, H 8192, 64/8 heads, d 128, I 28672, V 32000, untied.
    # 68,976,648,192 params: the count third-party catalogs list for the HF checkpoint (e.g. 68976648192 for
    # meta-llama/Llama-2-70b-chat-hf); Llama 2 paper arXiv 2307.09288: "70B".
    n = dense_gqa_params(80, 8192, 64, 8, 128, 28672, 32000)
    assert n == 68_976_648_192
    m = presets.model("llama-2-70b")
    assert m.params_total == n
    assert round(n / 1e9, 1) == 69.0
    assert m.weight_dtype == "fp16"  # config.json torch_dtype float16
    # GQA with 8 KV heads: 2 x 8 x 128 x 80 layers x 2 B = 320 KiB per token in BF16/FP16
    assert m.kv_bytes_per_token("fp16") == 327_680


def test_llama31_405b_params():
    # meta-llama/Llama-3.1-405B config.json: L 126, H 16384, 128/8 heads, d 128, I 53248, V 128256, untied.
    # HF safetensors total 405,853,388,800 params ("405.85B"); Llama 3 paper arXiv 2407.21783: "405B".
    n = dense_gqa_params(126, 16384, 128, 8, 128, 53248, 128256)
    assert n == 405_853_388_800
    m = presets.model("llama-3.1-405b")
    assert m.params_total == n
    assert round(n / 1e9, 1) == 405.9
    assert m.kv_bytes_per_token() == 126 * 2 * 8 * 128 * 2  # 516,096 B per token in BF16


def test_mixtral_8x7b_params():
    # mistralai/Mixtral-8x7B-v0.1 config.json: L 32, H 4096, 32/8 heads, d 128, 8 experts of I 14336, top-2,
    # every layer MoE, router H x 8 without bias, V 32000, untied. HF checkpoint 46,702,792,704 params; Mistral
    # AI's release post (quoted in Azure/azureml-assets mistralai-Mixtral-8x7B-Instruct-v01/description.md):
    # "46.7B total parameters but only uses 12.9B parameters per token"; arXiv 2401.04088 abstract: "access to
    # 47B parameters, but only uses 13B active". The 12.9B counts both embedding tables; llmexplore's params_active
    # leaves out the input table (a lookup reads one row of it).
    L, H, hq, hkv, d, E, k, Ie, V = 32, 4096, 32, 8, 128, 8, 2, 14336, 32000
    attn = H * hq * d + 2 * H * hkv * d + hq * d * H
    expert = 3 * H * Ie
    total = L * (attn + 2 * H + E * expert + H * E) + H + 2 * V * H
    assert total == 46_702_792_704
    m = presets.model("mixtral-8x7b")
    assert m.is_moe and m.dense_layers == 0 and m.shared_experts == 0 and not m.router_bias
    assert m.params_total == total
    touched = total - L * (E - k) * expert  # both embedding tables counted, as published
    assert m.params_active + V * H == touched == 12_879_925_248
    assert round(touched / 1e9, 1) == 12.9
    assert round(total / 1e9, 1) == 46.7


def test_deepseek_r1_is_deepseek_v3():
    # deepseek-ai/DeepSeek-R1 README: "DeepSeek-R1-Zero & DeepSeek-R1 are trained based on DeepSeek-V3-Base. For
    # more details regarding the model architecture, please refer to DeepSeek-V3"; 671B total, 37B activated,
    # released in FP8 like V3. Every architecture field equals the deepseek-v3 preset's.
    r1, v3 = presets.model("deepseek-r1"), presets.model("deepseek-v3")
    skip = {"name", "display_name", "sources"}
    for f in dataclasses.fields(r1):
        if f.name not in skip:
            assert getattr(r1, f.name) == getattr(v3, f.name), f.name
    assert r1.weight_dtype == "fp8"
    # 671,025,397,760 total and 36,624,596,992 activated without norms and router bias (docs/models.md §2,
    # tests/reference/test_published.py::test_deepseek_v3_params): "671B total, 37B activated"
    extra = r1.layers * r1.norm_params_per_layer + r1.hidden + r1.moe_layers * r1.routed_experts
    assert r1.params_total - extra == 671_025_397_760
    assert r1.params_active - extra == 36_624_596_992
    assert round(r1.params_total / 1e9) == 671 and round(r1.params_active / 1e9) == 37


# ---- latency targets ----------------------------------------------------------------------------------------

#: mlcommons/inference loadgen/mlperf.conf at b66003e10e2db4b8c36a448b0545ec90fcc6e9e9: <benchmark>.Server.
#: ttft_latency and tpot_latency [ms], target_latency = 0 (no end-to-end target), checked at
#: *.Server.target_latency_percentile = 99 (loadgen/results.h: token_target_latency_percentile and
#: target_tpot_percentile both take settings.target_latency_percentile)
MLPERF_SERVER = {
    "mlperf-llama-2-70b-server": ("llama-2-70b", 2000, 200),             # llama2-70b
    "mlperf-llama-2-70b-interactive": ("llama-2-70b", 450, 40),          # llama2-70b-interactive
    "mlperf-llama-3.1-405b-server": ("llama-3.1-405b", 6000, 175),       # llama3_1-405b
    "mlperf-llama-3.1-405b-interactive": ("llama-3.1-405b", 4500, 80),   # llama3_1-405b-interactive
    "mlperf-mixtral-8x7b-server": ("mixtral-8x7b", 2000, 200),           # mixtral-8x7b
    "mlperf-deepseek-r1-server": ("deepseek-r1", 2000, 80),              # deepseek-r1
    "mlperf-deepseek-r1-interactive": ("deepseek-r1", 1500, 15),         # deepseek-r1-interactive
}


@pytest.mark.parametrize("name", list(MLPERF_SERVER))
def test_mlperf_server_targets(name):
    model, ttft, tpot = MLPERF_SERVER[name]
    t = presets.target(name)
    assert (t.ttft_ms, t.tpot_ms, t.stat, t.e2e_ms) == (ttft, tpot, "p99", 0)
    assert t.unsourced_fields() == [] and "mlperf.conf" in t.source_of("ttft_ms")
    assert model in presets.names("models")  # each target's model is a preset


def test_every_builtin_target_is_an_mlperf_one():
    assert set(presets.names("targets")) == set(MLPERF_SERVER)
