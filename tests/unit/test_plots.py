"""Figure builders: expected traces, log axes and unit-bearing titles (rendering is tested in the browser)."""

import numpy as np
import pytest

from llmexplore import plots, sweeps
from llmexplore.models import scheduler
from llmexplore.models.engine import Deployment


@pytest.fixture(scope="module")
def dep():
    return Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8")


def _titles(fig):
    return [fig.layout[k].title.text for k in fig.layout if k.startswith(("xaxis", "yaxis"))]


def test_step_time_figure(dep):
    fig = plots.layouts.step_time_figure(sweeps.layouts.layout_curves(dep, [64], np.geomspace(256, 1 << 18, 20)))
    names = {t.name for t in fig.data}
    assert {"TP", "CP", "DPA", "DOP"} <= names
    assert fig.layout.xaxis.type == "log"
    titles = _titles(fig)
    assert len(titles) == 4 and all(("(ms)" in t or "(tokens)" in t) for t in titles)


def test_phase_diagram_figure_has_areas_and_boundaries(dep):
    ph = sweeps.layouts.phase_diagram(dep, [1, 8, 64, 512], np.geomspace(256, 1 << 18, 30))
    fig = plots.layouts.phase_diagram_figure(ph)
    assert fig.data[0].type == "heatmap"
    assert any("→" in (t.name or "") for t in fig.data)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert "tokens" in fig.layout.xaxis.title.text and "batch" in fig.layout.yaxis.title.text


def test_memory_and_transition_figures(dep):
    mem = plots.layouts.memory_figure(sweeps.layouts.memory_table(dep, 64, 8192))
    assert {t.name for t in mem.data} >= {"KV cache", "attention weights", "FFN/MoE weights"}
    assert "GB" in mem.layout.yaxis.title.text
    tr = plots.layouts.transition_figure(sweeps.layouts.transition_table(dep, 64, 8192))
    assert tr.data[0].type == "heatmap" and np.asarray(tr.data[0].z).shape == (4, 4)


def test_scheduler_and_policy_figures(dep):
    trace = scheduler.reasoning_trace(batch=64, mean_output_tokens=4096, segment_steps=1024)
    res = scheduler.compare_policies(dep, trace)
    fig = plots.layouts.scheduler_figure(trace, res["aware"])
    assert any(t.name == "active sequences" for t in fig.data)
    pol = plots.layouts.policy_figure(sweeps.layouts.policy_summary(res))
    assert list(pol.data[0].x)[0] == sweeps.layouts.policy_summary(res)["policy"].iloc[0]
    assert "(s)" in pol.layout.yaxis.title.text
