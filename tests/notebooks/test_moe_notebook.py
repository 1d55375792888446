"""notebooks/30_moe_expert_parallel.ipynb with its defaults (the run test_all_notebooks makes, shared): recorded
values against the package."""

import math

import nbformat
import pytest

from llmexplore import sweeps


@pytest.fixture(scope="module")
def run(default_run):
    return default_run("30_moe_expert_parallel.ipynb")


@pytest.fixture(scope="module")
def rec(run):
    return run[1]


def test_scenario_values_match_the_package(rec):
    df = sweeps.moe.scenario_table("deepseek-v3", "h200", 16, batch=(256,), redundant=(32,))
    for row in df.itertuples():
        assert rec["step_ms_at_batch"][row.layout] == pytest.approx(row.step_ms, rel=1e-9)
    s = rec["step_ms_at_batch"]
    assert s["TP2xEP8 static"] < s["TP16"] and s["DPA+EP16 static"] < s["TP16"]


def test_rebalancing_flattens_the_ranks(rec):
    imb = rec["imbalance_before_after"]
    assert imb["TP2xEP8 static"] > imb["TP2xEP8 +0 EPLB"] > imb["TP2xEP8 +32 EPLB"] >= 1.0
    loads = rec["rank_load_max_before_after"]
    assert loads["static"] > 1.03 and min(loads.values()) < 1.01


def test_redundancy_sign_flips_with_batch(rec):
    assert rec["redundancy_gain_pct_small_batch"] < 0 < rec["redundancy_gain_pct_large_batch"]


def test_pure_tp_has_no_all_to_all(rec):
    dc = rec["dispatch_combine_us_at_batch"]
    assert dc["TP16"] == 0 and all(v > 0 for k, v in dc.items() if k != "TP16")


def test_monte_carlo_check(rec):
    assert all(abs(e) < 2.0 for e in rec["max_load_error_pct"].values())


def test_plain_decoding_by_default(rec):
    """PP = 1 and SPECULATIVE = None (issue 21): the time per output token is the step, nothing is sped up, and
    section 3's busiest rank carries the placement's imbalance plus routing noise."""
    assert rec["decoding"] == "" and rec["speedup_at_batch"] == {}
    assert rec["tpot_ms_at_batch"] == rec["step_ms_at_batch"]
    [(name, strag)] = rec["load_straggler_at_batch"].items()
    assert name == "plain" and strag > rec["imbalance_before_after"]["TP2xEP8 +32 EPLB"]


def test_dollars_per_million_output_tokens_at_batch(run, rec):
    """Issue 22: neocloud on-demand prices an H200 at $6.305 per GPU-hour (2026-10-24); every layout rents the same
    16 GPUs ($100.88/h) and serves batch / tpot = 256 / tpot output tokens/s, so $/Mtok = 16 x 6.305 / (3600 x
    256 / tpot) x 1e6 and the cheapest layout is the fastest."""
    p, usd, tpot = rec["price"], rec["usd_per_mtok_at_batch"], rec["tpot_ms_at_batch"]
    assert p == {"tier": "neocloud-on-demand", "gpu": "h200", "usd_per_gpu_hour": 6.305, "date": "2026-10-24"}
    assert set(usd) == set(tpot) and all(rec["feasible_at_batch"].values())
    for layout, ms in tpot.items():
        assert 0 < usd[layout] < math.inf
        assert usd[layout] == pytest.approx(16 * 6.305 / (3600 * 256 / (ms / 1e3)) * 1e6, rel=1e-9)
    assert min(usd, key=usd.get) == min(tpot, key=tpot.get) == "TP2xEP8 +0 EPLB"
    # TP2xEP8 with EPLB: $3.18 per million output tokens (8,818 tokens/s) against TP16's $4.28 (6,551 tokens/s)
    assert usd["TP2xEP8 +0 EPLB"] == pytest.approx(3.178, abs=1e-3) and usd["TP16"] == pytest.approx(4.277, abs=1e-3)
    nb = nbformat.read(run[0], as_version=4)
    said = [o["data"]["text/markdown"] for c in nb.cells for o in c.get("outputs", [])
            if "text/markdown" in o.get("data", {}) and "cost_sentence(" in c.source]
    assert said == [(
        "At $6.305 per GPU-hour (neocloud-on-demand, 2026-10-24) for the H200 SXM 141GB, every layout rents the same "
        "16 GPUs for $100.88 per hour, so the cheapest per million output tokens at batch 256 is the fastest, TP2xEP8 "
        "with EPLB: $3.18 per million output tokens (8,818 output tokens/s), 25.7% less than pure TP16 at $4.28 "
        "(6,551 output tokens/s).")]
