"""Figure builders: expected traces, log axes and unit-bearing titles (rendering is tested in the browser)."""

import numpy as np
import plotly.graph_objects as go
import pytest

from llmexplore import plots, sweeps
from llmexplore.errors import SpecError
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


# --------------------------------------------------------------------------------------------------
# shared style and the live-figure machinery


@pytest.mark.parametrize("value, unit, kw, text", [
    (1000, "ms", {}, "1,000 ms"), (56.23, "req/s", {}, "56.2 req/s"), (23.97, "ms", {}, "24.0 ms"),
    (0.5, "req/s", {"trim": True}, "0.5 req/s"), (1e6, "req/s", {}, "1,000,000 req/s"), (72.0, "", {}, "72"),
    (float("inf"), "GPUs", {}, "— GPUs"), (float("nan"), "", {}, "—"), (0.000123456, "s", {}, "0.000123 s"),
])
def test_fmt(value, unit, kw, text):
    assert plots.fmt(value, unit, **kw) == text


def test_wrap_title_breaks_at_the_parts_then_words():
    title = "Decode step time vs context at batch 64 — DeepSeek-V3 on 8x H200 SXM 141GB, weights fp8, KV bf16"
    lines = plots.wrap_title(title).split("<br>")
    assert lines[0] == "Decode step time vs context at batch 64 —" and all(len(x) <= plots.TITLE_CHARS for x in lines)
    assert plots.wrap_title("short") == "short"
    long = "word " * 40
    assert all(len(x) <= 30 for x in plots.wrap_title(long, 30).split("<br>"))


def _builders(dep):
    curves = sweeps.layouts.layout_curves(dep, [64], np.geomspace(256, 1 << 20, 30))
    s = sweeps.disagg.setup()
    md = sweeps.moe.config(tp=2, ep=8, redundant=32)
    return [
        (plots.layouts.step_time_figure, (curves,), {"context_marker": 8192}),
        (plots.layouts.memory_figure, (sweeps.layouts.memory_table(dep, 64, 8192),), {}),
        (plots.disagg.exposed_transfer_figure, (sweeps.disagg.exposed_vs_bandwidth(s, [1, 10, 100]),),
         {"link_GBps": 45.0}),
        (plots.disagg.mode_gpus_figure, (sweeps.disagg.mode_rows(s),), {"best": "disaggregated, pipelined"}),
        (plots.moe.skew_figure, (sweeps.moe.step_vs_skew(tp=2, ep=8, skews=[1.0, 2.0, 3.0]),), {"skew_marker": 2.6}),
        (plots.moe.rank_load_figure, (sweeps.moe.rank_loads(md),), {}),
    ]


def test_spec_builders_return_the_figure_of_their_spec(dep):
    for build, args, kw in _builders(dep):
        fig = build(*args, **kw)
        again = plots.figure(build.spec(*args, **kw))
        assert fig.to_plotly_json()["data"].__len__() == len(again.data), build.__name__
        assert [t.name for t in fig.data] == [t.name for t in again.data]
        names = [t.name for t in fig.data]
        assert len(set(names)) == len(names), f"{build.__name__}: trace names must be unique: {names}"
        assert fig.layout.template.layout.paper_bgcolor == "white"  # plotly_white


def test_update_from_matches_traces_by_name():
    live = go.FigureWidget(go.Figure([go.Scatter(name="a", x=[1, 2], y=[1, 2], opacity=0.3),
                                      go.Scatter(name="b", x=[1, 2], y=[2, 3]),
                                      go.Scatter(name="c", x=[1, 2], y=[3, 4], visible="legendonly")]))
    a, b, c = live.data
    spec = {"data": [dict(type="scatter", name="c", x=[1, 2], y=[9, 9]),
                     dict(type="scatter", name="a", x=[1, 2], y=[5, 6]),
                     dict(type="scatter", name="d", x=[1, 2], y=[7, 8])],
            "layout": {"title": {"text": "new"}, "template": "plotly_white"}}
    plots.update_from(live, spec)
    assert live.data[0] is a and list(a.y) == [5, 6] and a.opacity is None  # updated in place, reset
    assert b.visible is False  # no longer in the figure: hidden
    assert list(c.y) == [9, 9] and c.visible == "legendonly"  # the reader hid it: stays hidden
    assert live.data[3].name == "d" and list(live.data[3].y) == [7, 8]  # new name: added
    assert live.layout.title.text == "new"
    plots.update_from(live, {"data": spec["data"] + [dict(type="scatter", name="b", y=[1])], "layout": {}})
    assert b.visible is None and list(b.y) == [1] and b.x is None
    with pytest.raises(SpecError, match="uniquely named"):
        plots.update_from(live, {"data": [dict(type="scatter", name="a"), dict(type="scatter", name="a")]})


def test_update_from_keeps_a_readers_zoom_unless_the_spec_sets_a_range():
    live = go.FigureWidget(go.Figure(layout={"xaxis": {"title": {"text": "x"}}}))
    live.layout.xaxis.range = [0, 5]  # as a zoom in the browser would set it
    plots.update_from(live, {"data": [], "layout": {"xaxis": {"title": {"text": "x (new)"}}}})
    assert live.layout.xaxis.title.text == "x (new)" and tuple(live.layout.xaxis.range) == (0, 5)
    plots.update_from(live, {"data": [], "layout": {"xaxis": {"title": {"text": "x"}, "range": [1, 2]}}})
    assert tuple(live.layout.xaxis.range) == (1, 2)


def test_mode_gpus_figure_labels_every_mode():
    rows = [{"mode": "colocated", "gpus": 136, "n_prefill": np.nan, "n_decode": 17, "reason": "chunk budget 512"},
            {"mode": "disaggregated, serial", "gpus": np.inf, "n_prefill": np.nan, "n_decode": np.nan,
             "reason": "the prefill pool cannot meet the SLOs"},
            {"mode": "disaggregated, pipelined", "gpus": 72, "n_prefill": 7, "n_decode": 2, "reason": ""}]
    fig = plots.disagg.mode_gpus_figure(rows, best="disaggregated, pipelined")
    bars = plots.trace(fig, "GPUs")
    assert list(bars.y) == [136, 0, 72]
    assert list(bars.text) == ["136 GPUs<br>17 instances", "no pool meets the SLOs", "72 GPUs<br>7 prefill + 2 decode"]
    assert list(bars.marker.line.width) == [0, 0, 3]


def test_memory_figure_has_the_usable_line_in_its_legend(dep):
    mem = sweeps.layouts.memory_table(dep, 1024, 131072)  # nothing fits
    fig = plots.layouts.memory_figure(mem)
    usable = plots.trace(fig, "usable HBM per rank")
    assert usable.showlegend is not False and usable.xaxis == "x2" and list(usable.x) == [0, 1]
    assert "does not fit" in " ".join(plots.trace(fig, "total per rank").text)
    assert fig.layout.yaxis.range[1] > max(plots.trace(fig, "total per rank").y)


def test_step_time_figure_explains_dotted_segments(dep):
    curves = sweeps.layouts.layout_curves(dep, [1024], np.geomspace(256, 1 << 20, 20))
    fig = plots.layouts.step_time_figure(curves)
    assert plots.trace(fig, plots.NOT_FIT).showlegend is True
    fits = sweeps.layouts.layout_curves(dep, [1], [256, 512])
    assert plots.trace(plots.layouts.step_time_figure(fits), plots.NOT_FIT).showlegend is False


def test_rank_load_figure_under_pure_tp_is_not_empty():
    md = sweeps.moe.config(tp=16, ep=1)
    fig = plots.moe.rank_load_figure(sweeps.moe.gpu_loads(md), rank_title="GPU")
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(bars) == 1 and len(bars[0].x) == 16 and set(bars[0].y) == {1.0}
    assert fig.layout.xaxis.title.text == "GPU"
