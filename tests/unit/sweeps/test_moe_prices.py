"""Dollars in notebook 30 (issue 22): each MoE layout's $/hour and $ per million output tokens at one batch
(sweeps.moe.priced), the price it used (sweeps.pricing.price_record) and the sentence (findings.moe.cost_sentence);
'not priced' where the tier has no price for the GPU."""

import math

import numpy as np
import pandas as pd
import pytest

from llmexplore import findings, nbparams, sweeps
from llmexplore.errors import SpecError, UnknownPresetError
from llmexplore.sweeps import pricing

H200 = 6.305  # neocloud-on-demand, H200, USD per GPU-hour (data/prices.yaml, 2026-10-24)


def _rows():
    """Three layouts of 16 GPUs at batch 256: output tokens/s as the model gives them (batch / tpot)."""
    return pd.DataFrame({"layout": ["TP16", "TP2xEP8 +0 EPLB", "DPA+EP16 static"], "ep": [1, 8, 16],
                         "gpus": [16, 16, 16], "batch": [256, 256, 256], "tokens_per_s": [6000.0, 8000.0, 7000.0],
                         "feasible": [True, True, False]})


def test_priced_in_closed_form():
    c = sweeps.moe.priced(_rows(), "h200")
    # 16 GPUs x $6.305 = $100.88/h; / (3600 s x 8,000 tokens/s) x 1e6 = $3.5028 per million output tokens
    assert c["usd_per_hour"].tolist() == pytest.approx([16 * H200] * 3)
    assert c["usd_per_hour"][0] == pytest.approx(100.88)
    assert c["usd_per_mtok_output"][1] == pytest.approx(100.88 / (3600 * 8000) * 1e6)
    assert c["usd_per_mtok_output"][1] == pytest.approx(3.50278, abs=1e-5)
    assert c["usd_per_mtok_output"][0] == pytest.approx(100.88 / (3600 * 6000) * 1e6)  # $4.670
    assert math.isnan(c["usd_per_mtok_output"][2])  # does not fit: no price per token, the feasible column says why
    assert sweeps.moe.usd_per_mtok_at_batch(c)["TP2xEP8 +0 EPLB"] == pytest.approx(3.50278, abs=1e-5)
    assert list(_rows().columns) == list(sweeps.moe.priced(_rows(), "h200", "reserved-3yr").columns)[:6]


def test_priced_scenario_is_the_throughput_ranking():
    at = sweeps.moe.scenario_table("deepseek-v3", "h200", 16, batch=(256,), redundant=(32,))
    c = sweeps.moe.priced(at, "h200")
    # output tokens/s = batch / time per output token; every layout rents the same 16 GPUs
    want = 16 * H200 / (3600 * 256 / (c["tpot_ms"] / 1e3)) * 1e6
    assert np.allclose(c["usd_per_mtok_output"], want, rtol=1e-9) and np.isfinite(c["usd_per_mtok_output"]).all()
    assert c.loc[c["usd_per_mtok_output"].idxmin(), "layout"] == c.loc[c["tpot_ms"].idxmin(), "layout"]


def test_price_record():
    assert pricing.price_record("neocloud-on-demand", "h200") == {
        "tier": "neocloud-on-demand", "gpu": "h200", "usd_per_gpu_hour": H200, "date": "2026-10-24"}
    assert pricing.price_record("neocloud-on-demand", "mi300x") == {
        "tier": "neocloud-on-demand", "gpu": "mi300x", "usd_per_gpu_hour": None, "date": None}


def test_not_priced():
    rows = _rows()
    c = sweeps.moe.priced(rows, "mi300x")  # neocloud-on-demand lists no MI300X
    assert list(c.columns) == list(rows.columns) and sweeps.moe.usd_per_mtok_at_batch(c) == {}
    assert sweeps.moe.shown_columns(c, ["layout", "usd_per_hour", "usd_per_mtok_output", "feasible"]) == [
        "layout", "feasible"]
    assert findings.moe.cost_sentence(rows, 256, "mi300x") == (
        "These layouts are not priced: tier neocloud-on-demand has no price for mi300x (tiers that price it: "
        "hyperscaler-on-demand, reserved-3yr, owned-tco); the times above stand.")


def test_unknown_tier():
    with pytest.raises(UnknownPresetError, match="no prices preset 'spot'"):
        sweeps.moe.priced(_rows(), "h200", "spot")
    with pytest.raises(UnknownPresetError, match="no prices preset 'spot'"):
        findings.moe.cost_sentence(_rows(), 256, "h200", "spot")
    # the notebook's parameter check: one line naming the parameter and the tiers
    p = {"MODEL": "deepseek-v3", "GPU": "h200", "RUNTIME": "default", "PRICE_TIER": "spot"}
    with pytest.raises(SpecError) as e:
        nbparams.check_moe_parameters(p)
    assert str(e.value) == ("PRICE_TIER must name a preset in data/prices.yaml (hyperscaler-on-demand, "
                            "neocloud-on-demand, reserved-3yr, owned-tco), got 'spot'")


def test_cost_sentence():
    assert findings.moe.cost_sentence(_rows(), 256, "h200") == (
        "At $6.305 per GPU-hour (neocloud-on-demand, 2026-10-24) for the H200 SXM 141GB, every layout rents the same "
        "16 GPUs for $100.88 per hour, so the cheapest per million output tokens at batch 256 is the fastest, TP2xEP8 "
        "with EPLB: $3.50 per million output tokens (8,000 output tokens/s), 25.0% less than pure TP16 at $4.67 "
        "(6,000 output tokens/s); DPA+EP16 static does not fit in memory, so it has no price per token.")
    # pure TP the fastest; nothing fitting
    fast_tp = _rows().assign(tokens_per_s=[9000.0, 8000.0, 7000.0])
    assert ", so the cheapest per million output tokens at batch 256 is the fastest, pure TP16: $3.11 per million " \
           "output tokens (9,000 output tokens/s); DPA+EP16" in findings.moe.cost_sentence(fast_tp, 256, "h200")
    none = _rows().assign(feasible=False)
    assert findings.moe.cost_sentence(none, 256, "h200", "reserved-3yr").endswith(
        "every layout rents the same 16 GPUs for $25.60 per hour; nothing fits at batch 256, so nothing has a price "
        "per output token.")
