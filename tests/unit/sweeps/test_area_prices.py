"""Dollars in the area notebooks (issue 22): the price of a notebook's GPU in a tier, the P:D comparison's $/hour
and $/Mtok (notebook 20) and the dollars the prefill GPU time saved by offload is worth (notebook 50)."""

import numpy as np
import pandas as pd
import pytest

from llmexplore import findings, nbparams, sweeps
from llmexplore.errors import SpecError, UnknownPresetError
from llmexplore.sweeps import pricing

H100 = 6.155  # neocloud-on-demand, H100 SXM, USD per GPU-hour (data/prices.yaml, 2026-10-24)


def test_tier_price_and_its_label():
    p = pricing.tier_price("neocloud-on-demand", "h100-sxm")
    assert (p.usd_per_gpu_hour, p.date) == (H100, "2026-10-24")
    assert pricing.DEFAULT_PRICE_TIER == "neocloud-on-demand"
    assert pricing.price_label("neocloud-on-demand", p) == "$6.155 per GPU-hour (neocloud-on-demand, 2026-10-24)"
    assert pricing.price_label("reserved-3yr", pricing.tier_price("reserved-3yr", "h100-sxm")).startswith("$1.30 ")
    assert pricing.tier_price("neocloud-on-demand", "mi300x") is None  # the tier does not list it


def test_not_priced_and_unknown_tier():
    assert pricing.not_priced("neocloud-on-demand", "mi300x") == (
        "not priced: tier neocloud-on-demand has no price for mi300x (tiers that price it: hyperscaler-on-demand, "
        "reserved-3yr, owned-tco)")
    with pytest.raises(UnknownPresetError, match="no prices preset 'spot'"):
        pricing.tier_price("spot", "h100-sxm")
    # the notebooks' parameter check: one line naming the parameter and the tiers
    with pytest.raises(SpecError) as e:
        nbparams.preset_param("PRICE_TIER", "prices", "spot")
    assert str(e.value) == ("PRICE_TIER must name a preset in data/prices.yaml (hyperscaler-on-demand, "
                            "neocloud-on-demand, reserved-3yr, owned-tco), got 'spot'")


# ---- notebook 20 -----------------------------------------------------------------------------------------------


def _pd(gpu="h100-sxm"):
    return sweeps.disagg.setup("llama-3-70b", gpu, rate_per_s=36, ttft_slo_ms=1000, tpot_slo_ms=40)


def _rows():
    return pd.DataFrame([{"mode": "colocated", "link": "-", "gpus": 160.0},
                         {"mode": "disaggregated, pipelined", "link": "roce-400g", "gpus": 72.0},
                         {"mode": "disaggregated, serial", "link": "tcp-100g", "gpus": np.inf}])


def test_with_cost_prices_each_row():
    s = _pd()
    assert sweeps.disagg.tokens_per_s(s) == 36 * (4096 + 256) == 156_672
    c = sweeps.disagg.with_cost(_rows(), s)
    # 72 GPUs x $6.155 = $443.16/h; / (3600 s x 156,672 tokens/s) x 1e6 = $0.7857 per million tokens
    assert c["usd_per_hour"].tolist()[:2] == pytest.approx([160 * H100, 72 * H100])
    assert c["usd_per_hour"][1] == pytest.approx(443.16)
    assert c["usd_per_mtok"][1] == pytest.approx(443.16 / (3600 * 156_672) * 1e6) == pytest.approx(0.78572, abs=1e-5)
    assert c["usd_per_mtok"][0] == pytest.approx(984.8 / (3600 * 156_672) * 1e6)  # $1.746
    assert np.isinf(c["usd_per_mtok"][2])  # meets no SLO: no finite price, never NaN
    assert not c.isna().any().any()


def test_unpriced_gpu_leaves_the_table_without_cost_columns():
    s = _pd("mi300x")
    rows = _rows()
    c = sweeps.disagg.with_cost(rows, s)
    assert list(c.columns) == list(rows.columns)
    assert findings.disagg.comparison_columns(c) == ["mode", "link", "gpus"]
    rec = sweeps.disagg.cost_record(rows, s)
    assert rec["usd_per_gpu_hour"] is None and rec["usd_per_mtok"] == {} and rec["usd_per_hour"] == {}
    assert findings.disagg.cost_sentence(rows, s) == (
        "These pools are not priced: tier neocloud-on-demand has no price for mi300x (tiers that price it: "
        "hyperscaler-on-demand, reserved-3yr, owned-tco); the GPU counts above stand.")


def test_cost_record_and_sentence():
    s = _pd()
    rec = sweeps.disagg.cost_record(_rows(), s, "hyperscaler-on-demand")
    assert (rec["tier"], rec["gpu"], rec["usd_per_gpu_hour"], rec["date"]) == (
        "hyperscaler-on-demand", "h100-sxm", 6.88, "2026-09-18")
    assert rec["usd_per_hour"]["disaggregated, pipelined | roce-400g"] == pytest.approx(72 * 6.88)  # $495.36
    text = findings.disagg.cost_sentence(_rows(), s, link="roce-400g")
    assert text == ("At $6.155 per GPU-hour (neocloud-on-demand, 2026-10-24) for the H100 SXM 80GB, serving 36 req/s "
                    "x (4,096 + 256) tokens = 156,672 tokens/s (input + output), disaggregated, pipelined over "
                    "roce-400g costs $443 per hour on 72 GPUs, $0.786 per million tokens, against colocated, which "
                    "costs $985 per hour on 160 GPUs, $1.75 per million tokens (55.0% less per token).")
    # the sentence prices at its own tier, whatever columns the table already had
    priced = sweeps.disagg.with_cost(_rows(), s)
    assert "$93.6 per hour on 72 GPUs" in findings.disagg.cost_sentence(priced, s, "reserved-3yr", link="roce-400g")


# ---- notebook 50 -----------------------------------------------------------------------------------------------


def _saved():
    return pd.DataFrame({"hit_ratio": [0.5, 0.5, 0.5, 0.0], "tier": ["dram-pcie4", "nvme-gen4", "nfs", "dram-pcie4"],
                         "tier_label": ["Host DRAM", "Gen4", "NFS", "Host DRAM"],
                         "cached_tokens": [16384.0, 16384.0, 16384.0, 0.0], "loaded": [True, False, True, False],
                         "saved_gpu_ms": [3600.0, 0.0, -360.0, 0.0]})


def test_saved_usd_per_million_requests():
    s = sweeps.offload.setup("llama-3-70b", "h100-sxm", storage="nvme-gen4", tp=8)
    u = sweeps.offload.saved_usd(_saved(), s, 0.5)
    # 3.6 GPU-s x 10^6 requests = 1,000 GPU-hours x $6.155 = $6,155; -0.36 GPU-s: -$615.5
    assert u["usd_per_million_requests"] == pytest.approx({"dram-pcie4": 6155.0, "nvme-gen4": 0.0, "nfs": -615.5})
    assert (u["price_tier"], u["usd_per_gpu_hour"], u["date"]) == ("neocloud-on-demand", H100, "2026-10-24")
    text = findings.offload.saved_usd_sentence(u, _saved(), s)
    assert text == ("At $6.155 per GPU-hour (neocloud-on-demand, 2026-10-24) for the H100 SXM 80GB, the prefill GPU "
                    "time a 50% hit ratio saves is worth $6,155 per million requests from Host DRAM (3.60 GPU-s each) "
                    "and −$616 per million requests from NFS (a loss: 0.360 GPU-s more each); from NVMe SSD, PCIe "
                    "Gen4 x4, the chosen tier, nothing: the gate recomputes the 16,384 cached tokens.")
    with pytest.raises(UnknownPresetError):
        sweeps.offload.saved_usd(_saved(), s, 0.5, "spot")


def test_saved_usd_not_priced():
    s = sweeps.offload.setup("llama-3-70b", "mi300x", storage="nvme-gen4", tp=8)
    u = sweeps.offload.saved_usd(_saved(), s, 0.5)
    assert u["usd_per_gpu_hour"] is None and u["usd_per_million_requests"] == {}
    assert u["saved_gpu_s_per_request"]["dram-pcie4"] == 3.6
    assert findings.offload.saved_usd_sentence(u, _saved(), s) == (
        "The saved GPU time is not priced: tier neocloud-on-demand has no price for mi300x (tiers that price it: "
        "hyperscaler-on-demand, reserved-3yr, owned-tco).")
