"""Transition-aware scheduler: traces, capping, switch accounting, policy relations."""

import numpy as np
import pytest

from llmexplore.errors import SpecError
from llmexplore.models.layouts import policy
from llmexplore.models.step.engine import LAYOUTS, Deployment


@pytest.fixture(scope="module")
def dep():
    return Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8")


def test_reasoning_trace_drains_and_grows():
    tr = policy.reasoning_trace(batch=128, prompt_tokens=1000, mean_output_tokens=2000, segment_steps=100)
    assert tr["batch"][0] == 128
    assert np.all(np.diff(tr["batch"]) <= 0) and np.all(np.diff(tr["context"]) > 0)
    assert tr["context"][0] == 1000 + 100
    assert np.all(tr["expected_remaining_steps"] > 0)


def test_trace_rejects_bad_input():
    with pytest.raises(SpecError, match="batch must be an integer >= 1, got 0"):
        policy.reasoning_trace(batch=0)
    with pytest.raises(SpecError, match="segment"):
        policy.fluctuating_trace(segments=0)


def test_static_policy_never_switches_and_matches_segment_costs(dep):
    tr = policy.reasoning_trace(batch=64, mean_output_tokens=4096, segment_steps=512)
    costs = policy.segment_costs(dep, tr)
    for k, lay in enumerate(LAYOUTS):
        r = policy.run_policy(dep, tr, lay, costs=costs)
        assert r["switches"] == 0 and r["handoff_total_s"] == 0
        assert r["total_s"] == pytest.approx(float(np.sum(costs["step_s"][:, k] * tr["steps"])))


def test_myopic_runs_the_fastest_layout_every_segment(dep):
    tr = policy.reasoning_trace(batch=256, mean_output_tokens=16384, segment_steps=2048)
    costs = policy.segment_costs(dep, tr)
    r = policy.run_policy(dep, tr, "myopic", costs=costs)
    assert list(r["layout"]) == [LAYOUTS[i] for i in np.argmin(costs["step_s"], axis=1)]
    assert r["switches"] == int(np.sum(r["layout"][1:] != r["layout"][:-1]))


def test_aware_policy_pays_only_when_worth_it(dep):
    tr = policy.fluctuating_trace(mean_batch=8, batch_sd=3, context=16384, segments=64, segment_steps=16)
    res = policy.compare_policies(dep, tr)
    assert res["aware"]["switches"] < res["myopic"]["switches"]
    # an infinite switch margin turns the aware policy into "stay where you started"
    stay = policy.run_policy(dep, tr, "aware", margin=1e12)
    assert len(set(stay["layout"])) <= 1 + stay["capped_segments"]


def test_capping_when_nothing_fits_full_batch(dep):
    # 1024 sequences of 128k tokens do not fit in any layout on 8 H200: the batch is capped, not an error.
    tr = {"start_step": np.array([0.0]), "steps": np.array([10.0]), "batch": np.array([1024.0]),
          "context": np.array([131072.0]), "expected_remaining_steps": np.array([10.0])}
    costs = policy.segment_costs(dep, tr)
    assert not costs["feasible"].any()
    r = policy.run_policy(dep, tr, "aware", costs=costs)
    assert r["capped_segments"] == 1
    k = LAYOUTS.index(r["layout"][0])
    cap = costs["batch_cap"][0, k]
    assert 1 <= cap < 1024 and r["batch_served"][0] == cap
    assert np.isfinite(r["total_s"])


def test_policy_name_validated(dep):
    tr = policy.reasoning_trace(batch=8, mean_output_tokens=512, segment_steps=256)
    with pytest.raises(SpecError, match="policy must be"):
        policy.run_policy(dep, tr, "fastest")
