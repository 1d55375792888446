"""The energy roofline and the dollar arithmetic (llmexplore/models/step/energy.py, cost.py; docs/models.md §9):
closed forms, the power cap, and the presets' validation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmexplore import presets
from llmexplore.errors import SpecError, UnknownPresetError
from llmexplore.models.step import cost as co
from llmexplore.models.step import energy as en
from llmexplore.models.step.engine import Deployment, kernel_rates
from llmexplore.models.step.prefill import prefill_flops
from llmexplore.specs import GpuPower, PriceTier

POWER = GpuPower.from_dict({"name": "h100-sxm", "tdp_W": 700, "idle_W": 100, "memory_bound_W": 400, "host_W": 500,
                            "network_W": 100, "pue": 1.25, "sources": {"*": "test numbers"}})


def test_rates_are_the_kernel_anchors():
    """A GEMM at the fitted curve's asymptotic rate draws TDP; a stream at its bandwidth draws memory_bound_W."""
    dep = Deployment.build("llama-3-8b", "h100-sxm", 1, weight_dtype="bf16")
    r = en.energy_rates(dep, POWER)
    k = kernel_rates(dep, "gemm", "bf16")
    assert r.J_per_flop * k.flops_per_s == pytest.approx(600.0)
    assert r.J_per_byte * k.bytes_per_s == pytest.approx(300.0)
    # an FP8 FLOP costs about half a BF16 one on Hopper (the FP8 GEMM runs about twice as fast at the same power)
    r8 = en.energy_rates(Deployment.build("llama-3-8b", "h100-sxm", 1, weight_dtype="fp8"), POWER)
    assert 0.35 < r8.J_per_flop / r.J_per_flop < 0.65


def test_step_energy_closed_form_and_cap():
    r = en.EnergyRates(idle_W=100.0, tdp_W=700.0, J_per_flop=1e-12, J_per_byte=1e-10)
    # 2 GPUs, 10 ms, 1e12 FLOP and 1e9 B: 2*100*0.01 + 1 + 0.1 J
    assert float(en.step_energy_J(r, 2, 0.01, 1e12, 1e9)) == pytest.approx(2.0 + 1.1)
    # work that would need more than TDP is capped at it: 2 GPUs x 700 W x 10 ms
    assert float(en.step_energy_J(r, 2, 0.01, 1e15, 0.0)) == pytest.approx(14.0)
    assert float(en.dynamic_J(r, 2, 0.01, 1e15, 0.0)) == pytest.approx(12.0)


@settings(max_examples=60, deadline=None)
@given(t=st.floats(1e-5, 10), f=st.floats(0, 1e17), b=st.floats(0, 1e13), g=st.integers(1, 64))
def test_board_power_between_idle_and_tdp(t, f, b, g):
    r = en.EnergyRates(idle_W=80.0, tdp_W=700.0, J_per_flop=8e-13, J_per_byte=9e-11)
    p = float(en.step_energy_J(r, g, t, f, b)) / (g * t)
    assert 80.0 - 1e-9 <= p <= 700.0 + 1e-9


def test_decode_work_counts_weights_kv_and_flops():
    """Llama-3-8B BF16 on one GPU, batch 1, context 1,000: FLOPs = 2 x active matmul params + LM head + attention,
    bytes = all weights (every rank's copy) + 1,000 tokens of KV (131,072 B each)."""
    dep = Deployment.build("llama-3-8b", "h100-sxm", 1, weight_dtype="bf16", kv_dtype="bf16")
    m = dep.model
    flops, bytes_ = en.decode_work(dep, "TP", 1, 1000)
    w = sum(dep.weight_bytes("TP").values())
    assert float(bytes_) == pytest.approx(w + 1000 * m.kv_bytes_per_token("bf16"))
    assert m.kv_bytes_per_token("bf16") == 131072
    attn = 2 * m.heads * (m.qk_head_dim + m.o_head_dim) * m.layers * 1000
    assert float(flops) == pytest.approx(float(prefill_flops(m, 1)) - m.heads * (m.qk_head_dim + m.o_head_dim)
                                         * m.layers + attn, rel=1e-9)


def test_moe_decode_reads_only_the_experts_its_tokens_touch():
    """Qwen3-30B-A3B (128 experts, top-8): one token touches 8/128 of each layer's routed experts; 4,096 tokens
    touch essentially all of them."""
    dep = Deployment.build("qwen3-30b-a3b", "h100-sxm", 1, weight_dtype="bf16")
    m = dep.model
    assert float(en._experts_touched(m, 1)) == pytest.approx(8 / 128)
    routed = m.moe_layers * m.routed_experts * m.expert_params * 2
    full = sum(dep.weight_bytes("TP").values())
    one = float(en._weights_read_B(dep, "TP", 1))
    assert one == pytest.approx(full - routed + routed * 8 / 128)
    assert float(en._weights_read_B(dep, "TP", 4096)) == pytest.approx(full, rel=1e-9)


def test_request_energy_adds_idle_prefill_and_decode_share():
    # 1,000 W idle in all, 2 req/s: 500 J per request of idle; prefill 30 J; 100 steps of 64 J at batch 32: 200 J
    e = en.request_energy_J(1000.0, 2.0, 30.0, 64.0, 32.0, 100.0)
    assert float(e) == pytest.approx(500 + 30 + 200)
    # speculative decoding: tau 2 tokens per step halves the steps
    assert float(en.request_energy_J(1000.0, 2.0, 30.0, 64.0, 32.0, 100.0, 2.0)) == pytest.approx(500 + 30 + 100)


def test_dollars_and_megawatts():
    # $100/hour serving 1,000 tokens/s: 3.6M tokens per hour -> $27.78 per million
    assert float(co.usd_per_mtok(100.0, 1000.0)) == pytest.approx(100 / 3.6)
    assert math.isinf(float(co.usd_per_mtok(100.0, 0.0)))
    assert float(co.usd_of_gpu_seconds(3600.0, 2.5)) == pytest.approx(2.5)
    assert float(co.tokens_per_s_per_MW(1000.0, 2.0)) == pytest.approx(5e5)
    assert POWER.all_in_kW == pytest.approx((700 + 500 + 100) * 1.25 / 1e3)


def test_power_presets_add_up_to_the_published_all_in_figure():
    """data/power.yaml's H100 parts give SemiAnalysis InferenceX's 1.73 kW all-in per H100 (constants.ts @ 77ca49a)."""
    assert presets.power("h100-sxm").all_in_kW == pytest.approx(1.73, abs=0.005)


def test_every_shipped_price_is_dated_and_sourced():
    for name in presets.names("prices"):
        tier = presets.price_tier(name)
        for gpu, p in tier.prices.items():
            assert gpu in presets.names("hardware")
            assert 0 < p.usd_per_gpu_hour < 100 and p.source.strip() and p.date[:2] == "20"


@pytest.mark.parametrize("row, message", [
    ({"h100-sxm": {"usd_per_gpu_hour": -1, "date": "2026-01", "source": "x"}}, "price of h100-sxm must be"),
    ({"h100-sxm": {"usd_per_gpu_hour": float("nan"), "date": "2026-01", "source": "x"}}, "price of h100-sxm must be"),
    ({"h100-sxm": {"usd_per_gpu_hour": 2, "date": "January 2026", "source": "x"}}, "must be an ISO date"),
    ({"h100-sxm": {"usd_per_gpu_hour": 2, "date": "2026-01"}}, "missing ['source']"),
    ({"h100-sxm": {"usd_per_gpu_hour": 2, "date": "2026-01", "source": "x", "currency": "EUR"}}, "unknown keys"),
    ({}, "non-empty mapping"),
])
def test_bad_price_rows_are_one_clear_line(row, message):
    with pytest.raises(SpecError) as exc:
        PriceTier.from_dict({"name": "mine", "prices": row})
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_unknown_tier_and_missing_price_name_what_exists():
    with pytest.raises(UnknownPresetError, match=r"no prices preset 'cheap'; known: .*neocloud-on-demand"):
        presets.price_tier("cheap")
    tier = presets.price_tier("reserved-3yr")
    with pytest.raises(SpecError, match=r"price tier 'reserved-3yr' has no price for gpu 'l40s' \(it prices"):
        tier.price("l40s")


def test_power_rule_idle_below_memory_bound_below_tdp():
    with pytest.raises(SpecError, match="idle_W < memory_bound_W <= tdp_W"):
        GpuPower.from_dict({"name": "x", "tdp_W": 700, "idle_W": 500, "memory_bound_W": 400, "host_W": 1,
                            "network_W": 1, "pue": 1.1})
    with pytest.raises(SpecError, match="pue must be"):
        GpuPower.from_dict({"name": "x", "tdp_W": 700, "idle_W": 50, "memory_bound_W": 400, "host_W": 1,
                            "network_W": 1, "pue": 0.5})


def test_user_file_adds_a_tier_and_checks_its_gpus(tmp_path, monkeypatch):
    f = tmp_path / "mine.yaml"
    f.write_text("prices:\n  mine:\n    prices:\n      h200: {usd_per_gpu_hour: 2.1, date: 2026-12-01, source: quote}\n")
    monkeypatch.setenv("LLMEXPLORE_PRESETS", str(f))
    presets.clear_cache()
    try:
        assert presets.price_tier("mine").price("h200").usd_per_gpu_hour == 2.1
        assert presets.price_tier("mine").price("h200").date == "2026-12-01"  # an unquoted YAML date
        f.write_text("prices:\n  mine:\n    prices:\n      h900: {usd_per_gpu_hour: 2.1, date: 2026-12, source: q}\n")
        presets.clear_cache()
        with pytest.raises(SpecError, match="must name hardware presets, got 'h900'"):
            presets.price_tier("mine")
    finally:
        monkeypatch.delenv("LLMEXPLORE_PRESETS")
        presets.clear_cache()
