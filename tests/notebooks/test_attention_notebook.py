"""notebooks/10_attention_layouts.ipynb under papermill with small grids: its recorded headline values must
agree with the package computed directly in this process, and with the published-config closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from llmexplore import sweeps
from llmexplore.models.step import decode as att
from llmexplore.models.step.engine import LAYOUTS, Deployment

SMALL = dict(N_CONTEXT=24, N_BATCH=10, TRACE_SEGMENT=2048, FLUCT_SEGMENTS=24)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Run once per module (a notebook run is ~10 s); the run_notebook fixture is function-scoped."""
    from conftest import execute, resolve_notebook

    src = resolve_notebook("10_attention_layouts.ipynb")
    out = tmp_path_factory.mktemp("nb10") / src.name
    return execute(src, out, SMALL)


def test_best_layout_and_step_times_match_the_package(executed):
    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8", kv_dtype="bf16")
    table = sweeps.layouts.layout_table(dep, 64, 8192)
    assert executed["best_layout"] == sweeps.layouts.best_layout(table)
    for row in table.itertuples():
        assert executed["step_ms"][row.layout] == pytest.approx(row.step_ms, rel=1e-12)
        assert executed["total_GB"][row.layout] == pytest.approx(row.total_GB, rel=1e-12)


def test_mla_replication_makes_tp_the_most_memory_hungry(executed):
    # MLA: TP replicates the 70,272 B/token latent on every rank, the other layouts hold 1/T of it
    # (docs/models.md §3.2), so TP needs the most memory at batch 64 x 8192 tokens.
    assert max(executed["total_GB"], key=executed["total_GB"].get) == "TP"


def test_closed_form_crossover_is_the_published_config_value(executed):
    # docs/models.md §3.5: DeepSeek-V3 W_shard = 171,966,464 params x 1 B (FP8) / 1152 B (BF16 latent, 576 x 2)
    assert executed["mla_closed_form_tokens"] == pytest.approx(171_966_464 / 1152, rel=1e-12)


def test_recorded_boundaries_are_exact_crossovers(executed):
    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8")
    bounds = executed["boundaries_at_batch"]
    assert bounds, "the default batch should cross at least one boundary between 256 and 262,144 tokens"
    for b in bounds:
        if b["kind"] == "crossover":
            s = np.array(b["context"])
            t_before = att.step_time(dep, 64, s, b["before"])["step_s"]
            t_after = att.step_time(dep, 64, s, b["after"])["step_s"]
            assert t_before == pytest.approx(t_after, rel=1e-9)
        else:
            mem = att.memory_per_rank(dep, 64, [b["context"], b["context"] + 16], b["before"])
            assert mem["feasible"].tolist() == [True, False]


def test_switch_into_tp_is_the_expensive_direction(executed):
    h = executed["handoff_exposed_ms"]
    assert h["DPA->TP"] > 10 * h["TP->DPA"]  # all-gather of the replicated latent vs discard (+ weights)
    assert h["DPA->DOP"] == 0.0 and h["DOP->DPA"] > 0.0  # same KV; DOP->DPA all-gathers the weights


def test_transition_aware_schedule_beats_every_static_layout_on_the_reasoning_trace(executed):
    totals = executed["policy_total_s"]
    static = min(totals[lay] for lay in LAYOUTS)
    assert totals["aware"] <= static
    assert totals["aware"] <= totals["myopic"] * (1 + 1e-12)
    # 256 requests of up to ~100k tokens fit on 8 H200 in some layout at every segment: nothing is capped
    assert executed["aware_capped_segments"] == 0


def test_aware_switches_less_than_myopic_near_a_crossover(executed):
    # Not a theorem that the aware policy is faster: when it declines a switch it can miss a saving. What it
    # must do is thrash less, and it may not lose more than a sliver to the myopic policy.
    sw = executed["steady_switches"]
    assert sw["aware"] < sw["myopic"]
    totals = executed["steady_policy_total_s"]
    assert totals["aware"] <= totals["myopic"] * (1 + 1e-3)


def test_gqa_contrast_runs(executed):
    assert executed["gqa_best_at_default"] in LAYOUTS
