"""notebooks/15_speculative_decoding.ipynb with its defaults (the run test_all_notebooks makes, shared): recorded
values against the package and the world."""

import pytest

from llmexplore import presets, sweeps


@pytest.fixture(scope="module")
def rec(default_run):
    return default_run("15_speculative_decoding.ipynb")[1]


def test_one_iteration_is_the_packages_and_pays_at_batch_1(rec):
    s = sweeps.speculative.setup("deepseek-v3", "h200", 8, speculative="deepseek-mtp-1", context=2000)
    pt = sweeps.speculative.point(s, 1)
    assert rec["speedup_at_batch"] == pytest.approx(pt["speedup"], rel=1e-12)
    assert rec["tpot_ms"] * presets.speculative("deepseek-mtp-1").tokens_per_step == pytest.approx(
        pt["cycle_ms"], rel=1e-12)
    # DeepSeek-V3 technical report section 5.4.3: MTP at 85-90% acceptance "delivering 1.8 times TPS"; SGLang
    # reports 1.8x at batch 1 on H200 TP8 (tests/unit/models/step/test_speculative.py): within 10 %
    assert rec["speedup_at_batch"] == pytest.approx(1.8, rel=0.10)
    assert rec["plain_tpot_ms"] > rec["tpot_ms"]
    assert "DeepSeek-V3 on 8x H200" in rec["deployment"] and "DeepSeek MTP, 1 draft token" in rec["deployment"]


def test_speculation_never_pays_when_nothing_is_accepted_and_always_at_the_preset(rec):
    be = rec["breakeven_batch"]
    assert be["1.00"] == 0.0  # every draft rejected: pure cost at every batch
    assert be["1.88"] == float("inf")  # the preset's 1.875 pays over the whole grid (1-512)


def test_the_draft_costs_memory(rec):
    m = rec["memory"]
    assert m["max_batch_spec"] < m["max_batch_plain"]
    assert 1.3 < m["draft_weights_GB"] < 1.8  # one MoE layer + attention of DeepSeek-V3 in FP8 over 8 ranks


def test_published_checks_are_within_their_measured_errors(rec):
    err = rec["check_errors_pct"]
    assert set(err) == {"trtllm-b200-r1", "sglang-h200-v3", "eagle3-sglang-h100"}
    assert err["sglang-h200-v3"] < 6 and err["trtllm-b200-r1"] < 15 and err["eagle3-sglang-h100"] < 31
