"""Figure builders: expected traces, log axes and unit-bearing titles (rendering is tested in the browser)."""

import numpy as np
import plotly.graph_objects as go
import pytest

from llmexplore import plots, sweeps
from llmexplore.errors import SpecError
from llmexplore.models.layouts import policy
from llmexplore.models.step.engine import Deployment


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
    fig = plots.layouts.phase_diagram_figure(ph, here=(8192, 64))
    assert fig.data[0].type == "heatmap"
    assert any("→" in (t.name or "") for t in fig.data)
    # issue 20 §1.8: each crossover its own marker, and the chosen point marked
    crossings = [t for t in fig.data if "→" in (t.name or "") and "memory" not in t.name]
    assert len({t.marker.symbol for t in crossings}) == len(crossings)
    star = next(t for t in fig.data if (t.name or "").startswith("chosen point"))
    assert (star.x[0], star.y[0]) == (8192, 64) and star.name == "chosen point: batch 64, context 8,192"
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert "tokens" in fig.layout.xaxis.title.text and "batch" in fig.layout.yaxis.title.text


def test_memory_and_transition_figures(dep):
    mem = plots.layouts.memory_figure(sweeps.layouts.memory_table(dep, 64, 8192))
    assert {t.name for t in mem.data} >= {"KV cache", "attention weights", "FFN/MoE weights"}
    assert "GB" in mem.layout.yaxis.title.text
    table = sweeps.layouts.transition_table(dep, 64, 8192)
    tr = plots.layouts.transition_figure(table)
    assert tr.data[0].type == "heatmap" and np.asarray(tr.data[0].z).shape == (4, 4)
    # issue 20 §1.8: a log colour scale, so the small switch costs are not all one white
    z = np.asarray(tr.data[0].z, dtype=float)
    pos = table["exposed_ms"][table["exposed_ms"] > 0]
    assert np.nanmax(z) == pytest.approx(np.log10(pos.max())) and np.nanmin(z) == pytest.approx(np.log10(pos.min()))
    assert all(t.endswith("ms") for t in tr.data[0].colorbar.ticktext)


def test_scheduler_and_policy_figures(dep):
    trace = policy.reasoning_trace(batch=64, mean_output_tokens=4096, segment_steps=1024)
    res = policy.compare_policies(dep, trace)
    fig = plots.layouts.scheduler_figure(trace, res["aware"])
    assert any(t.name == "active sequences" for t in fig.data)
    pol = plots.layouts.policy_figure(sweeps.layouts.policy_summary(res))
    assert list(pol.data[0].x)[0] == sweeps.layouts.policy_summary(res)["policy"].iloc[0]
    assert "(s)" in pol.layout.yaxis.title.text
    labels = list(pol.data[1].text)  # bars of different totals never share a label (issue 20 §1.8: "31 s" x 3)
    totals = sweeps.layouts.policy_summary(res)["total_s"].round(6)
    assert len(set(labels)) == totals.nunique()


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
    kv = sweeps.transfer.setup(prefill_tp=16, decode_tp=4)
    return [
        (plots.layouts.step_time_figure, (curves,), {"context_marker": 8192}),
        (plots.layouts.memory_figure, (sweeps.layouts.memory_table(dep, 64, 8192),), {}),
        (plots.disagg.exposed_transfer_figure, (sweeps.disagg.exposed_vs_bandwidth(s, [1, 10, 100]),),
         {"link_GBps": 45.0}),
        (plots.disagg.mode_gpus_figure, (sweeps.disagg.mode_rows(s),), {"best": "disaggregated, pipelined"}),
        (plots.moe.skew_figure, (sweeps.moe.step_vs_skew(tp=2, ep=8, skews=[1.0, 2.0, 3.0]),), {"skew_marker": 2.6}),
        (plots.moe.rank_load_figure, (sweeps.moe.rank_loads(md),), {}),
        (plots.transfer.byte_matrix_figure, (sweeps.transfer.byte_matrix(kv),), {}),
        (plots.transfer.fanout_figure, (sweeps.transfer.prefill_rank_table(kv),), {}),
        (plots.transfer.pairs_figure, (sweeps.transfer.layout_pairs(pairs=[(8, 4), (6, 4)]),), {"chosen": (8, 4)}),
        (plots.transfer.time_vs_prompt_figure, (sweeps.transfer.time_vs_prompt(kv, [1024, 4096]),),
         {"prompt_marker": 4096}),
        *_offload_builders(),
    ]


def _offload_builders():
    s = sweeps.offload.setup(storage="nvme-gen4")
    table = sweeps.offload.break_even_table(s)
    return [
        (plots.offload.cost_curves_figure, (sweeps.offload.cost_curves(s, [256, 4096, 65536]),),
         {"table": table, "prefix_marker": 32768, "chosen": "nvme-gen4"}),
        (plots.offload.regime_figure, (sweeps.offload.regime_grid(s, [256, 4096, 65536], [1, 10, 100]),),
         {"table": table, "prefix_marker": 4096}),
        (plots.offload.break_even_map_figure, (sweeps.offload.break_even_map(s, [1, 10, 100], [10, 100, 1000]),),
         {"table": table, "chosen": "nvme-gen4"}),
        (plots.offload.preload_figure, (sweeps.offload.preload_curve(s, 32768, [0, 50, 500]),),
         {"waits": {"chosen queue wait": 50.0, "mean M/D/1 wait": 300.0}, "prefix_tokens": 32768}),
        (plots.offload.staging_figure, (sweeps.offload.staging_replay(s, requests=20, rate_per_s=0.5),), {}),
        (plots.offload.hit_ratio_figure, (sweeps.offload.gpus_vs_hit_ratio(s, [0, 0.5, 1.0], statistic="mean"),
                                          sweeps.offload.saved_by_tier(s, [0, 0.5, 1.0])),
         {"hit_marker": 0.5, "tier_label": "NVMe", "rate_per_s": 1.0}),
        (plots.offload.measured_figure, (sweeps.offload.measured_load({"modelled_ms": [1.0, 2.0],
                                                                       "measured_ms": [1.1, 2.3]}),), {}),
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


# --------------------------------------------------------------------------------------------------
# KV transfer planning


@pytest.fixture(scope="module")
def kv():
    return sweeps.transfer.setup("llama-3-70b", prefill_tp=8, decode_tp=4)


def test_byte_matrix_figure_is_a_labelled_heatmap(kv):
    matrix = sweeps.transfer.byte_matrix(kv)
    fig = plots.transfer.byte_matrix_figure(matrix)
    heat = plots.trace(fig, "MB per request")
    assert heat.type == "heatmap" and np.asarray(heat.z).shape == (8, 4)
    assert np.allclose(np.asarray(heat.z, float), matrix.to_numpy())
    assert heat.colorbar.title.text == "MB per request" and heat.zmin == 0
    assert heat.text[0][0] == "168" and heat.text[0][1] == ""  # values on the cells that carry bytes only
    assert "decode rank" in fig.layout.xaxis.title.text and "prefill rank" in fig.layout.yaxis.title.text
    assert fig.layout.yaxis.autorange == "reversed"  # rank 0 at the top, as in the matrix
    big = plots.transfer.byte_matrix_figure(sweeps.transfer.byte_matrix(
        sweeps.transfer.setup(prefill_tp=8, decode_tp=4, prefill_dp=4, decode_dp=4)))
    assert np.asarray(plots.trace(big, "MB per request").z).shape == (32, 16)
    assert plots.trace(big, "MB per request").text is None


def test_fanout_figure_marks_idle_ranks():
    busy = plots.transfer.fanout_figure(sweeps.transfer.prefill_rank_table(sweeps.transfer.setup(prefill_tp=8,
                                                                                                  decode_tp=4)))
    assert list(plots.trace(busy, "fan-out (decode ranks served)").y) == [1] * 8
    none = plots.trace(busy, plots.transfer.IDLE)
    assert none.showlegend is False and len(none.x) == 0
    ranks = sweeps.transfer.prefill_rank_table(sweeps.transfer.setup(prefill_tp=16, decode_tp=8))
    fig = plots.transfer.fanout_figure(ranks)
    idle = plots.trace(fig, plots.transfer.IDLE)
    assert idle.showlegend is True and list(idle.x) == list(range(1, 16, 2)) and set(idle.text) == {"idle"}
    assert list(plots.trace(fig, f"{plots.transfer.IDLE} · sent").x) == list(range(1, 16, 2))  # both panels
    sent = plots.trace(fig, "sent (MB per request)")
    assert sent.yaxis == "y2" and list(sent.y)[1] == 0 and list(sent.y)[0] == pytest.approx(167.77216)
    assert fig.layout.yaxis.title.text == "decode ranks served" and "(MB)" in fig.layout.yaxis2.title.text
    assert all(fig.layout[a].title.text == "prefill rank (global)" for a in ("xaxis", "xaxis2"))


def test_pairs_figure_shows_refused_pairs_with_the_reason():
    pairs = sweeps.transfer.layout_pairs("llama-3-70b", [(8, 1), (8, 4), (8, 8), (6, 4)])
    fig = plots.transfer.pairs_figure(pairs, chosen=(8, 4))
    serial, pipe = plots.trace(fig, plots.transfer.SERIAL), plots.trace(fig, plots.transfer.PIPELINED)
    assert list(serial.x) == ["TP8 → TP1", "TP8 → TP4", "TP8 → TP8", "TP6 → TP4"]
    assert np.isnan(serial.y[3]) and np.isnan(pipe.y[3]) and all(np.isfinite(serial.y[:3]))
    assert serial.y[0] > serial.y[1] > serial.y[2] and all(p < s for p, s in zip(pipe.y[:3], serial.y[:3]))
    refused = plots.trace(fig, plots.transfer.NOT_SUPPORTED)
    assert list(refused.x) == ["TP6 → TP4"] and refused.showlegend is True
    assert "prefill_tp (6) must divide or be a multiple of the KV heads" in refused.customdata[0].replace("<br>", " ")
    assert list(serial.marker.line.width) == [0, 2.5, 0, 0]  # the chosen pair is outlined
    assert "<b>TP8 → TP4</b>" in fig.layout.xaxis.ticktext
    assert fig.layout.yaxis.type == "log" and "(ms)" in fig.layout.yaxis.title.text
    assert "busiest NIC decode 0: 336 MB" in serial.customdata[1]
    ok = plots.transfer.pairs_figure(pairs.iloc[:3])
    assert plots.trace(ok, plots.transfer.NOT_SUPPORTED).showlegend is False
    assert "bold" not in ok.layout.xaxis.title.text


def test_time_vs_prompt_figure(kv):
    df = sweeps.transfer.time_vs_prompt(kv, [1024, 4096, 16384])
    fig = plots.transfer.time_vs_prompt_figure(df, prompt_marker=4096)
    names = [t.name for t in fig.data]
    assert names[:2] == [plots.transfer.SERIAL, plots.transfer.PIPELINED] and "chosen prompt" in names
    assert plots.transfer.UNBATCHED in names and plots.transfer.STAGED in names
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert "(tokens)" in fig.layout.xaxis.title.text and "(ms)" in fig.layout.yaxis.title.text
    assert list(plots.trace(fig, "chosen prompt").x) == [4096, 4096]
    lines = [t for t in fig.data if t.legendrank is not None and t.legendrank < plots.RANK_KEY]
    assert len({(t.line.dash, t.marker.symbol) for t in lines}) == len(lines)  # not told apart by colour alone


def test_fragment_table_for_people(kv):
    table = plots.transfer.fragment_people_table(sweeps.transfer.fragment_table(kv))
    assert len(table) == 16
    assert list(table.frame.columns) == ["decode rank", "plan", "prefill rank", "buffer", "buffer kind",
                                         "source offset [B]", "destination offset [B]", "bytes per page [B]",
                                         "source page item [B]", "destination page item [B]"]
    assert table.frame["destination offset [B]"].tolist()[:4] == ["0", "0", "4,096", "4,096"]


# --------------------------------------------------------------------------------------------------
# KV offload


@pytest.fixture(scope="module")
def off():
    s = sweeps.offload.setup("llama-3-70b", "h100-sxm", storage="nvme-gen4", tp=8)
    return s, sweeps.offload.break_even_table(s)


def test_offload_cost_curves_mark_each_break_even_on_its_load_curve(off):
    s, table = off
    curves = sweeps.offload.cost_curves(s, sweeps.log_grid(256, 1 << 20, 60, integer=True))
    fig = plots.offload.cost_curves_figure(curves, table, prefix_marker=32768, chosen="nvme-gen4")
    names = [t.name for t in fig.data]
    assert names[0] == plots.offload.RECOMPUTE and "chosen prefix" in names
    assert {plots.offload.load_name(label) for label in table["tier_label"]} <= set(names)
    be = plots.trace(fig, plots.offload.BREAK_EVEN)
    assert sorted(be.x) == sorted(table["break_even_tokens"])  # every finite break-even within the axis
    tokens = float(table.set_index("tier").loc["nvme-gen4", "break_even_tokens"])  # 40,192 with the defaults
    gen4 = list(be.x).index(tokens)
    load = curves[curves["tier"] == "nvme-gen4"]
    assert be.y[gen4] == pytest.approx(np.interp(tokens, load["prefix_tokens"], load["load_ms"]), rel=0.05)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert "(tokens)" in fig.layout.xaxis.title.text and "(ms)" in fig.layout.yaxis.title.text
    assert plots.trace(fig, plots.offload.load_name("NVMe SSD, PCIe Gen4 x4")).line.width == 3  # the chosen tier


def test_offload_maps_have_log_axes_units_tiers_and_the_set_by_boundary(off):
    s, table = off
    grid = sweeps.offload.regime_grid(s, sweeps.log_grid(256, 1 << 20, 50, integer=True), np.geomspace(0.5, 100, 40))
    fig = plots.offload.regime_figure(grid, table, prefix_marker=32768)
    assert fig.data[0].type == "heatmap" and np.asarray(fig.data[0].z).shape == (40, 50)
    names = [t.name for t in fig.data]
    assert plots.offload.LOAD_WINS in names and plots.offload.RECOMPUTE_WINS in names
    assert "NVMe SSD, PCIe Gen4 x4: 7 GB/s" in names and "chosen prefix" in names
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert "(tokens)" in fig.layout.xaxis.title.text and "(GB/s)" in fig.layout.yaxis.title.text
    bmap = sweeps.offload.break_even_map(s, np.geomspace(0.5, 100, 40), np.geomspace(1, 1e4, 30))
    fig = plots.offload.break_even_map_figure(bmap, table, chosen="nvme-gen4")
    heat = fig.data[0]
    assert heat.type == "heatmap" and "tokens" in heat.colorbar.title.text
    assert np.allclose(np.asarray(heat.z), np.log10(bmap["tokens"]))
    boundary = plots.trace(fig, "set by bandwidth (left) | latency (right)")
    first_latency_bw = bmap["bandwidth_GBps"][np.flatnonzero((bmap["set_by"] == "latency").all(axis=0))[0]]
    assert boundary.x[0] < first_latency_bw and boundary.x[0] > first_latency_bw / 1.2
    points = plots.trace(fig, "preset tiers (hollow: another kind of tier)")
    assert len(points.x) == 5 and list(points.marker.symbol).count("circle-open") == 3  # the dram and nfs tiers
    assert "(GB/s)" in fig.layout.xaxis.title.text and "(µs)" in fig.layout.yaxis.title.text


def test_offload_preload_staging_hit_ratio_and_measured_figures(off):
    s, _ = off
    curve = sweeps.offload.preload_curve(s, 32768, [0, 10, 50, 200, 1000])
    fig = plots.offload.preload_figure(curve, waits={"chosen queue wait": 20.0, "mean M/D/1 wait": 364.0},
                                       prefix_tokens=32768)
    names = [t.name for t in fig.data]
    assert {plots.offload.EXPOSED, plots.offload.NO_PRELOAD, plots.offload.H2D, plots.offload.RECOMPUTE,
            "break-even prefix", "chosen queue wait", "mean M/D/1 wait"} <= set(names)
    assert list(plots.trace(fig, "break-even prefix").y) == list(curve["break_even_tokens"])
    assert fig.layout.yaxis2.type == "log" and all("(ms)" in t for t in (fig.layout.xaxis.title.text,
                                                                       fig.layout.yaxis.title.text))
    replay = sweeps.offload.staging_replay(s, requests=30, rate_per_s=0.5, budget_GB=12.0)
    fig = plots.offload.staging_figure(replay)
    staged = plots.trace(fig, plots.offload.STAGED)
    assert staged.line.shape == "hv" and max(staged.y) <= 12.0
    assert plots.trace(fig, "staging budget (12 GB)").y[0] == 12.0
    assert {plots.offload.WITH_PRELOAD, plots.offload.WITHOUT_PRELOAD} <= {t.name for t in fig.data}
    assert "(GB)" in fig.layout.yaxis.title.text and "(ms)" in fig.layout.yaxis2.title.text
    gpus = sweeps.offload.gpus_vs_hit_ratio(s, [0, 0.5, 1.0], statistic="mean")
    saved = sweeps.offload.saved_by_tier(s, [0, 0.5, 1.0])
    fig = plots.offload.hit_ratio_figure(gpus, saved, hit_marker=0.5, tier_label="NVMe", rate_per_s=10.0)
    names = [t.name for t in fig.data]
    assert "GPUs needed (NVMe)" in names and "saved with Host DRAM over PCIe Gen4 x16" in names
    assert "cached KV per distinct prompt" in names and "chosen hit ratio" in names
    assert "at 10 req/s" in fig.layout.annotations[0].text
    assert [fig.layout[a].title.text for a in ("yaxis", "yaxis2", "yaxis3")] == [
        "GPUs", "GPU-seconds saved per request", "GB per distinct prompt"]
    measured = sweeps.offload.measured_load({"modelled_s": [0.001, 0.002], "measured_s": [0.0012, float("nan")]})
    assert list(measured["measured_ms"]) == [1.2]  # seconds to ms; a request that did not load is dropped
    fig = plots.offload.measured_figure(measured)
    parity = plots.trace(fig, plots.offload.PARITY)
    assert list(parity.x) == list(parity.y) and fig.layout.xaxis.type == "log"
    assert "(ms)" in fig.layout.xaxis.title.text and "(ms)" in fig.layout.yaxis.title.text
    assert plots.offload.measured_view(None) is None and plots.offload.measured_view(measured.iloc[:0]) is None
    assert isinstance(plots.offload.measured_view(measured), go.Figure)
    with pytest.raises(SpecError, match="measured_ms"):
        sweeps.offload.measured_load({"modelled_ms": [1.0]})
