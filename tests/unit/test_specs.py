"""Specs: validation rules (SpecError names field and value) and derived quantities from config numbers.

Derived quantities are recomputed here by hand from the published config.json numbers (docs/models.md §2 table),
never read back from the code, so a formula error in ``llmexplore/specs.py`` makes these fail.
"""

import dataclasses

import pytest

from llmexplore import presets
from llmexplore.errors import SpecError
from llmexplore.specs import Hardware, Link, ModelSpec, Runtime

# ---- validation --------------------------------------------------------------------------------------------


def _model_row(**changes):
    """A valid GQA model row (Llama-3-8B config.json numbers) with some fields changed."""
    row = dict(name="m", attention="gqa", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
               intermediate=14336, vocab=128256, sources={"*": "test"})
    row.update(changes)
    return row


def _hw_row(**changes):
    row = dict(name="gpu", hbm_GiB=80, hbm_bw_TBps=3.35, bf16_TFLOPS=989.4, fp8_TFLOPS=1978.9,
               scale_up_link="nvlink4", sources={"*": "test"})
    row.update(changes)
    return row


def _link_row(**changes):
    row = dict(name="lnk", kind="scale-up", line_rate_GBps=450, achievable_GBps=370, latency_us=8,
               sources={"*": "test"})
    row.update(changes)
    return row


def test_valid_rows_build():
    assert ModelSpec.from_dict(_model_row()).layers == 32
    assert Hardware.from_dict(_hw_row()).hbm_GiB == 80
    assert Link.from_dict(_link_row()).efficiency == pytest.approx(370 / 450)


def test_unknown_key_rejected_with_allowed_list():
    with pytest.raises(SpecError) as exc:
        ModelSpec.from_dict(_model_row(layerz=3))
    msg = str(exc.value)
    assert "unknown keys ['layerz']" in msg
    assert "allowed keys are" in msg
    # the allowed list spells out the real field names
    for f in ("layers", "hidden", "kv_heads", "head_dim"):
        assert f"'{f}'" in msg


def test_missing_required_key_named():
    row = _model_row()
    del row["vocab"]
    with pytest.raises(SpecError, match=r"missing required keys \['vocab'\]"):
        ModelSpec.from_dict(row)


@pytest.mark.parametrize("value", [0, -1.0])
def test_hbm_zero_or_negative_rejected(value):
    with pytest.raises(SpecError, match=rf"hbm_GiB must be a finite number in \[1e-6, 1e9\] \[GiB\], got {value!r}"):
        Hardware.from_dict(_hw_row(hbm_GiB=value))


def test_achievable_above_line_rate_rejected():
    with pytest.raises(SpecError, match=r"achievable_GBps \(500\) must be <= line_rate_GBps \(450\)"):
        Link.from_dict(_link_row(achievable_GBps=500))


def test_gqa_heads_not_multiple_of_kv_heads_rejected():
    with pytest.raises(SpecError, match=r"heads \(30\) must be a multiple of kv_heads \(8\)"):
        ModelSpec.from_dict(_model_row(heads=30))


def test_moe_top_k_above_experts_rejected():
    row = _model_row(moe_layers=4, routed_experts=8, experts_per_token=9, moe_intermediate=1024)
    with pytest.raises(SpecError, match=r"experts_per_token \(9\) must be <= routed_experts \(8\)"):
        ModelSpec.from_dict(row)


@pytest.mark.parametrize("field, value, pattern", [
    ("layers", 0, r"layers must be an integer in \[1, 1024\], got 0"),
    ("layers", 2.5, r"layers must be an integer in \[1, 1024\], got 2.5"),
    ("layers", 10**400, r"layers must be an integer in \[1, 1024\], got 1000"),
    ("hidden", "4096", r"hidden must be an integer in \[1, 1,048,576\], got '4096'"),
    ("hidden", True, r"hidden must be an integer in \[1, 1,048,576\], got True"),
    ("vocab", float("inf"), r"vocab must be an integer in \[1, 16,777,216\], got inf"),
    ("tie_embeddings", "yes", r"tie_embeddings must be true or false, got 'yes'"),
    ("qk_norm", 1, r"qk_norm must be true or false, got 1"),
    ("display_name", 7, r"display_name must be a text of at most 200 printable characters, got 7"),
    ("sources", {"*": 3}, r"sources must be a mapping field -> text, got \{'\*': 3\}"),
    ("attention", "mha", r"attention must be one of \['gqa', 'mla'\], got 'mha'"),
])
def test_model_field_rules_name_field_and_value(field, value, pattern):
    with pytest.raises(SpecError, match=pattern):
        ModelSpec.from_dict(_model_row(**{field: value}))


def test_link_kind_and_runtime_fraction_rules():
    with pytest.raises(SpecError, match=r"kind must be one of .*got 'wifi'"):
        Link.from_dict(_link_row(kind="wifi"))
    rt = presets.runtime("default")
    with pytest.raises(SpecError, match=r"eta_mem must be a finite number in \[1e-6, 1\], got 1.2"):
        dataclasses.replace(rt, eta_mem=1.2)
    with pytest.raises(SpecError, match=r"page_tokens must be an integer in \[1, 65,536\] \[tokens\], got 0"):
        dataclasses.replace(rt, page_tokens=0)


def test_spec_error_is_value_error():
    with pytest.raises(ValueError):
        Hardware.from_dict(_hw_row(hbm_GiB=0))


def test_mla_requires_latent_dims():
    ds = presets.model("deepseek-v3")
    with pytest.raises(SpecError, match=r"kv_lora_rank must be >= 1 for MLA attention, got 0"):
        dataclasses.replace(ds, kv_lora_rank=0)


def test_specs_are_frozen():
    m = presets.model("llama-3-8b")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.layers = 1
    with pytest.raises(TypeError):
        m.sources["*"] = "changed"


# ---- parameters per projection, from config.json numbers ---------------------------------------------------

# deepseek-ai/DeepSeek-V3 config.json: hidden 7168, heads 128, q_lora_rank 1536, kv_lora_rank 512,
# qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128 (docs/models.md §2 table)
H, HQ, RQ, RKV, DN, DR, DV = 7168, 128, 1536, 512, 128, 64, 128


def test_deepseek_v3_mla_projection_shapes():
    p = presets.model("deepseek-v3").attn_params_per_layer
    assert p == {
        "q_a": H * RQ,  # 11,010,048
        "q_b": RQ * HQ * (DN + DR),  # 37,748,736
        "kv_a": H * (RKV + DR),  # 4,128,768
        "kv_b": RKV * HQ * (DN + DV),  # 16,777,216
        "o": HQ * DV * H,  # 117,440,512
    }


def test_deepseek_v3_replicated_and_sharded_mla_weights():
    # docs/models.md §2: W_rep = q_a + kv_a = 15,138,816; W_shard = q_b + kv_b + o = 171,966,464
    m = presets.model("deepseek-v3")
    assert H * RQ + H * (RKV + DR) == 15_138_816
    assert RQ * HQ * (DN + DR) + RKV * HQ * (DN + DV) + HQ * DV * H == 171_966_464
    assert m.mla_replicated_params_per_layer == 15_138_816
    assert sum(m.attn_params_per_layer.values()) - m.mla_replicated_params_per_layer == 171_966_464


def test_mla_without_query_compression_uses_full_q():
    m = dataclasses.replace(presets.model("deepseek-v3"), q_lora_rank=0)
    p = m.attn_params_per_layer
    assert p["q"] == H * HQ * (DN + DR)
    assert "q_a" not in p and "q_b" not in p
    assert m.mla_replicated_params_per_layer == H * (RKV + DR)


def test_qwen3_head_dim_explicit_not_hidden_over_heads():
    # Qwen/Qwen3-32B config.json: hidden 5120, heads 64, kv 8, head_dim 128 (explicit; 5120/64 = 80 is wrong,
    # LMCache#688 in PEERS.md §3.1)
    p = presets.model("qwen3-32b").attn_params_per_layer
    assert p["q"] == 5120 * 64 * 128 and p["o"] == 64 * 128 * 5120
    assert p["k"] == p["v"] == 5120 * 8 * 128


def test_norm_params_per_layer():
    # input + post-attention RMSNorm (2H); Qwen3 adds q_norm and k_norm over head_dim; MLA adds q_a/kv_a norms
    assert presets.model("llama-3-8b").norm_params_per_layer == 2 * 4096
    assert presets.model("qwen3-4b").norm_params_per_layer == 2 * 2560 + 2 * 128
    assert presets.model("deepseek-v3").norm_params_per_layer == 2 * 7168 + 1536 + 512


def test_router_params_include_correction_bias():
    # DeepSeek-V3: gate weight 256 x 7168 plus e_score_correction_bias (256)
    assert presets.model("deepseek-v3").router_params == 256 * 7168 + 256


# ---- KV geometry -------------------------------------------------------------------------------------------


def test_kv_elements_per_token_per_layer():
    assert presets.model("llama-3-70b").kv_elements_per_token_per_layer() == 2 * 8 * 128
    assert presets.model("deepseek-v3").kv_elements_per_token_per_layer() == 512 + 64  # latent + rope key


def test_kv_bytes_unknown_dtype_names_field():
    with pytest.raises(SpecError, match=r"kv_dtype must be one of .*got 'int3'"):
        presets.model("llama-3-8b").kv_bytes_per_token("int3")


@pytest.mark.parametrize("tp, expected", [(1, 8), (2, 4), (4, 2), (8, 1), (16, 1), (32, 1)])
def test_kv_heads_per_rank_gqa(tp, expected):
    # vLLM/SGLang ModelConfig.get_num_kv_heads: max(1, total_num_kv_heads // tensor_parallel_size)
    assert presets.model("llama-3-70b").kv_heads_per_rank(tp) == max(1, 8 // tp) == expected


@pytest.mark.parametrize("tp", [1, 2, 8, 16])
def test_kv_heads_per_rank_mla_is_one_latent(tp):
    assert presets.model("deepseek-v3").kv_heads_per_rank(tp) == 1


def test_ridge_point_and_peak_selection():
    h100 = presets.hardware("h100-sxm")
    assert h100.peak_TFLOPS("fp8") == 1978.9
    assert h100.peak_TFLOPS("bf16") == h100.peak_TFLOPS("fp16") == 989.4
    # docs/models.md §1.1: 989.4e12 / 3.35e12 = 295.3 FLOP/B
    assert h100.ridge_flops_per_byte("bf16") == pytest.approx(989.4 / 3.35, rel=1e-12)
    assert h100.ridge_flops_per_byte("fp8") == pytest.approx(1978.9 / 3.35, rel=1e-12)
    with pytest.raises(SpecError):
        h100.peak_TFLOPS("int4")


def test_runtime_preset_is_a_runtime():
    assert isinstance(presets.runtime(), Runtime)


# ---- one integer rule everywhere: 4 and np.int64(4) yes; 4.5, True and '4' no ----------------------------------
def _integer_sites():
    from llmexplore import sweeps
    from llmexplore.models.step import decode as att
    from llmexplore.models.serving import disagg
    from llmexplore.models.moe import decode as moe
    from llmexplore.models.step.engine import Deployment

    dep = Deployment.build("llama-3-8b", "h100-sxm", 2)
    return {
        "ModelSpec.layers": lambda v: ModelSpec.from_dict(_model_row(layers=v)).layers,
        "Runtime.page_tokens": lambda v: dataclasses.replace(presets.runtime("default"), page_tokens=v).page_tokens,
        "Deployment ranks": lambda v: Deployment.build("llama-3-8b", "h100-sxm", v).ranks,
        "step_time batch": lambda v: float(att.step_time(dep, v, 1024, "TP")["step_s"]),
        "MoEDeployment gpus": lambda v: moe.MoEDeployment.build("qwen3-30b-a3b", "h100-sxm", v, tp=1, ep=4).gpus,
        "Workload prompt_tokens": lambda v: disagg.Workload(prompt_tokens=v).prompt_tokens,
        "setup prefill_tp": lambda v: sweeps.disagg.setup("llama-3-8b", "h100-sxm", prefill_tp=v).prefill.ranks,
        "boundaries_at batch": lambda v: len(sweeps.layouts.boundaries_at(dep, v, 1, 1000)),
    }


@pytest.mark.parametrize("site", list(_integer_sites()))
def test_the_same_integer_rule_everywhere(site):
    import numpy as np

    f = _integer_sites()[site]
    assert f(4) == f(np.int64(4)) == f(np.int32(4))
    for bad in (4.5, True, "4", np.float64(4.5), None, 4 + 0j):
        with pytest.raises(SpecError, match="must be an integer"):
            f(bad)
