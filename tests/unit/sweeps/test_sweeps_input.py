"""Hostile input to the sweep functions the notebooks and explorers call: one SpecError naming the field."""

from __future__ import annotations

import pytest

from llmexplore import sweeps
from llmexplore.errors import SpecError
from llmexplore.models.step.engine import Deployment


@pytest.fixture(scope="module")
def dep():
    return Deployment.build("llama-3-70b", "h100-sxm", 8)


@pytest.fixture(scope="module")
def pd_setup():
    return sweeps.disagg.setup("llama-3-70b", "h100-sxm")


@pytest.mark.parametrize("call, field", [
    (lambda d, s: sweeps.layouts.layout_curves(d, "8", [1024]), "batch"),
    (lambda d, s: sweeps.layouts.layout_curves(d, [8], [1e300]), "context"),
    (lambda d, s: sweeps.layouts.phase_diagram(d, [1, float("nan")], [1024, 2048]), "batch"),
    (lambda d, s: sweeps.disagg.mode_rows(s, 5), "link"),
    (lambda d, s: sweeps.disagg.exposed_vs_bandwidth(s, [-1.0]), "bandwidths_GBps"),
    (lambda d, s: sweeps.disagg.gpus_vs_bandwidth(s, "x"), "bandwidths_GBps"),
    (lambda d, s: sweeps.disagg.latency_vs_rate(s, [0.0]), "rates"),
    (lambda d, s: sweeps.moe.moe_records(sweeps.moe.config(tp=2, ep=8), None, 2048, 2.6), "batch"),
    (lambda d, s: sweeps.moe.step_vs_skew(tp=2, ep=8, skews="x"), "skews"),
    (lambda d, s: sweeps.moe.step_vs_batch(batches=[0]), "batches"),
    (lambda d, s: sweeps.log_grid(0, 10, 5), "lo"),
])
def test_sweeps_reject_hostile_input_naming_the_field(dep, pd_setup, call, field):
    with pytest.raises(SpecError, match=rf"^{field} must be"):
        call(dep, pd_setup)


def test_a_scalar_rate_is_a_one_point_sweep(pd_setup):
    assert len(sweeps.disagg.latency_vs_rate(pd_setup, 10.0)) == 2  # colocated and disaggregated


def test_grid_axes_need_not_broadcast(dep):
    """batch and context are the two axes of a grid (any lengths), not arrays to broadcast."""
    assert len(sweeps.layouts.layout_curves(dep, [1, 2, 4], [1024, 2048])) == 3 * 2 * 4
    phase = sweeps.layouts.phase_diagram(dep, [1, 8, 64], [1024, 4096])
    assert phase["best"].shape == (3, 2)
