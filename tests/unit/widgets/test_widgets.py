"""Explorers driven without a browser: set a control's value, the FigureWidgets and the status change.

Figures are read by trace name (``plots.trace``), never by position, and compared with the static figure the
same builder draws from the same sweep table.
"""

import numpy as np
import pytest

from llmexplore import findings, plots, presets, sweeps, widgets
from llmexplore.errors import LlmexploreError, SpecError, UnknownPresetError
from llmexplore.models.step.engine import Deployment
from llmexplore.plots import trace
from llmexplore.widgets.layouts import CONTEXT_GRID


@pytest.fixture(scope="module")
def app():
    return widgets.layouts.layout_explorer("deepseek-v3", "h200", 8, 64, 8192, "fp8", "bf16")


@pytest.fixture(scope="module")
def pd_app():
    return widgets.disagg.pd_explorer()


@pytest.fixture(scope="module")
def moe_app():
    return widgets.moe.moe_explorer()


@pytest.fixture(scope="module")
def kv_app():
    return widgets.transfer.transfer_explorer()


def _y(tr):
    return np.array(tr.y, dtype=float)


def _same(a, b):
    return np.allclose(np.nan_to_num(np.asarray(a, float), nan=-1), np.nan_to_num(np.asarray(b, float), nan=-1))


def _flat(title: str) -> str:
    return title.replace("<br>", " ")


# --------------------------------------------------------------------------------------------------
# the attention-layout explorer


def test_batch_slider_redraws_step_curves_in_place(app):
    fig = app.figures["step"]
    names = [n for n in ("TP", "CP", "DPA", "DOP")]
    before = {n: _y(trace(fig, n)) for n in names}
    app.controls["batch"].value = 256
    after = {n: _y(trace(fig, n)) for n in names}
    assert app.figures["step"] is fig  # redrawn in place, not rebuilt
    assert any(not _same(before[n], after[n]) for n in names)
    # a bigger batch never makes a step faster (same layout, same context)
    tp_before, tp_after = np.nan_to_num(before["TP"], nan=np.inf), np.nan_to_num(after["TP"], nan=np.inf)
    both = np.isfinite(tp_before) & np.isfinite(tp_after)
    assert np.all(tp_after[both] >= tp_before[both])
    assert "batch 256" in _flat(fig.layout.title.text)
    app.controls["batch"].value = 64


def test_context_slider_moves_the_marker_and_memory_bars(app):
    mem = app.figures["memory"]
    kv_before = _y(trace(mem, "KV cache"))
    app.controls["context"].value = 32768
    assert list(trace(app.figures["step"], "chosen context").x) == [32768, 32768]
    kv_after = _y(trace(mem, "KV cache"))
    assert np.all(kv_after > kv_before)
    app.controls["context"].value = 8192


def test_status_names_the_best_layout(app):
    # the layout the sweep table finds fastest among those that fit (DPA with the kernel curves, 33.2 ms, a hair
    # ahead of DOP's 33.3 ms; DOP with the scalar efficiencies)
    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8", kv_dtype="bf16")
    best = sweeps.layouts.best_layout(sweeps.layouts.layout_table(dep, 64, 8192))
    assert best == "DPA" and f"Best: {best}" in app.status.value
    assert app.last["best"] == best


def test_bad_combination_shows_a_message_not_a_traceback(app):
    app.controls["model"].value = "llama-3.2-3b"  # 24 query heads
    app.controls["ranks"].value = 16  # does not divide 24
    assert "Cannot evaluate" in app.status.value
    assert "ranks (16) must divide the query heads" in app.status.value
    app.controls["ranks"].value = 8
    assert "Best:" in app.status.value
    app.controls["model"].value = "deepseek-v3"


def test_nothing_fits_is_reported(app):
    app.controls["model"].value = "deepseek-v3"
    app.controls["weight_dtype"].value = "bf16"
    app.controls["ranks"].value = 1
    assert "Nothing fits" in app.status.value or "Cannot evaluate" in app.status.value
    app.controls["ranks"].value = 8
    app.controls["weight_dtype"].value = "fp8"


# --------------------------------------------------------------------------------------------------
# A: one figure builder, traces by name, one sweep definition


def _expected_layout_figures(model, gpu, ranks, batch, context, wdt="fp8", kvdt="bf16", runtime="default"):
    dep = Deployment.build(model, gpu, ranks, weight_dtype=wdt, kv_dtype=kvdt, runtime=runtime)
    step = plots.layouts.step_time_figure(sweeps.layouts.layout_curves(dep, [batch], CONTEXT_GRID),
                                          context_marker=context)
    mem = plots.layouts.memory_figure(sweeps.layouts.memory_table(dep, batch, context))
    return step, mem


def _assert_shows(live, static):
    """Every trace of the static figure is in the live one under the same name, with the same data."""
    for want in static.data:
        got = trace(live, want.name)
        assert got.visible is not False, want.name
        for key in ("x", "y"):
            w, g = getattr(want, key), getattr(got, key)
            if w is None:
                continue
            if np.asarray(w).dtype.kind in "iuf":
                assert _same(g, w), (want.name, key)
            else:
                assert list(g) == list(w), (want.name, key)


def test_layout_explorer_starts_from_the_static_builders_and_follows_them(app):
    step, mem = _expected_layout_figures("deepseek-v3", "h200", 8, 64, 8192)
    _assert_shows(app.figures["step"], step)
    _assert_shows(app.figures["memory"], mem)
    app.controls["ranks"].value = 16
    app.controls["context"].value = 65536
    step, mem = _expected_layout_figures("deepseek-v3", "h200", 16, 64, 65536)
    _assert_shows(app.figures["step"], step)
    _assert_shows(app.figures["memory"], mem)
    app.controls["ranks"].value = 8
    app.controls["context"].value = 8192


def test_pd_explorer_uses_the_one_mode_comparison(pd_app):
    app = pd_app
    for link, nics in (("roce-400g", "one per GPU"), ("tcp-100g", "one per instance")):
        app.controls["link"].value = link
        app.controls["nics"].value = nics
        s = sweeps.disagg.setup("llama-3-70b", "h100-sxm", prompt_tokens=4096, output_tokens=256, rate_per_s=36.0,
                                ttft_slo_ms=1000.0, tpot_slo_ms=40.0, nics=None if nics == "one per GPU" else 1)
        rows = sweeps.disagg.mode_rows(s, link)
        best = sweeps.disagg.fewest_gpus(rows)
        bars = trace(app.figures["gpus"], "GPUs")
        assert list(bars.x) == [r["mode"] for r in rows]
        assert list(bars.y) == [r["gpus"] for r in rows]
        assert f"Fewest GPUs: {best['mode']} ({best['gpus']:,})" in app.status_text
        static = plots.disagg.exposed_transfer_figure(
            sweeps.disagg.exposed_vs_bandwidth(s, widgets.disagg.BANDWIDTHS),
            link_GBps=presets.link(link).achievable_GBps)
        _assert_shows(app.figures["exposed"], static)
    app.controls["link"].value = "roce-400g"
    app.controls["nics"].value = "one per GPU"


def test_moe_explorer_prices_each_placement_at_the_chosen_tier():
    """The status line gives each placement's $ per million output tokens: the GPUs' $/hour over the output
    tokens/s (batch / time per output token), at the tier's dated price; a GPU the tier does not price is said
    to be not priced (issue 22)."""
    import re

    from llmexplore import presets

    app = widgets.moe.moe_explorer(price_tier="reserved-3yr")
    price = presets.price_tier("reserved-3yr").prices["h200"]
    assert "$1.60 per GPU-hour (reserved-3yr, 2025-08), 16 GPUs for $25.60/hour" in app.status_text
    at = app.last["at_skew"]
    for r in at.itertuples():  # closed form: 16 GPUs x $1.60 / (3600 x 256 / tpot) x 1e6
        want = 16 * price.usd_per_gpu_hour / (3600 * 256 * 1e3 / r.tpot_ms) * 1e6
        assert r.usd_per_mtok_output == pytest.approx(want, rel=1e-12)
        assert f"${want:,.3g} per million output tokens" in app.status_text
    app.controls["prices"].value = "neocloud-on-demand"  # a dearer tier: every placement costs more
    assert "$6.305 per GPU-hour (neocloud-on-demand, 2026-10-24)" in app.status_text
    assert (app.last["at_skew"]["usd_per_mtok_output"].to_numpy() > at["usd_per_mtok_output"].to_numpy()).all()
    unpriced = widgets.moe.moe_explorer(gpu="mi355x")
    assert "Not priced: tier neocloud-on-demand has no price for mi355x" in unpriced.status_text
    assert not re.search(r"nan", unpriced.status_text, re.I)
    with pytest.raises(UnknownPresetError, match="price_tier: no prices preset 'spot'; known: hyperscaler"):
        widgets.moe.moe_explorer(price_tier="spot")


def test_moe_explorer_adds_and_hides_traces_by_name(moe_app):
    app = moe_app
    fig, loads = app.figures["skew"], app.figures["loads"]
    ep_names = {"static placement", "EPLB, no redundancy", "EPLB + 32 redundant"}
    assert ep_names <= {t.name for t in fig.data if t.visible is not False}
    app.controls["layout"].value = (16, 1)  # pure TP
    shown = {t.name for t in fig.data if t.visible is not False}
    assert "no expert parallelism" in shown and not (ep_names & shown)
    assert app.figures["skew"] is fig and app.figures["loads"] is loads
    app.controls["layout"].value = (2, 8)
    shown = {t.name for t in fig.data if t.visible is not False}
    assert ep_names <= shown and "no expert parallelism" not in shown


# --------------------------------------------------------------------------------------------------
# B: bad input


@pytest.mark.parametrize("ranks", [3, 64])
def test_ranks_outside_the_slider_extend_it(ranks):
    app = widgets.layouts.layout_explorer(ranks=ranks)
    assert app.controls["ranks"].value == ranks and app.controls["ranks"].label == f"{ranks} GPUs"
    if ranks == 3:  # 3 does not divide DeepSeek-V3's 128 heads: said in the status line
        assert "ranks (3) must divide the query heads" in app.status_text
        assert all(f.layout.title.text.startswith("Not updated") for f in app.figures.values())
    else:
        assert "Best:" in app.status_text


@pytest.mark.parametrize("make, kwargs, needles", [
    (widgets.layouts.layout_explorer, {"model": "gpt-5"}, ["model", "'gpt-5'", "deepseek-v3"]),
    (widgets.layouts.layout_explorer, {"gpu": "tpu-v9"}, ["gpu", "'tpu-v9'", "h200"]),
    (widgets.layouts.layout_explorer, {"kv_dtype": "int3"}, ["kv_dtype", "'int3'", "fp8"]),
    (widgets.layouts.layout_explorer, {"batch": 0}, ["batch", ">= 1", "0"]),
    (widgets.disagg.pd_explorer, {"link": "carrier-pigeon"}, ["link", "'carrier-pigeon'", "roce-400g"]),
    (widgets.disagg.pd_explorer, {"rate": -1.0}, ["rate", "> 0", "-1.0"]),
    (widgets.moe.moe_explorer, {"model": "llama-3-70b"}, ["llama-3-70b", "no MoE layers", "deepseek-v3"]),
    (widgets.moe.moe_explorer, {"redundant": 4.5}, ["redundant", "integer", "4.5"]),
    (widgets.transfer.transfer_explorer, {"model": "gpt-5"}, ["model", "'gpt-5'", "llama-3-70b"]),
    (widgets.transfer.transfer_explorer, {"page_size": 0}, ["page_size", "0"]),
    (widgets.transfer.transfer_explorer, {"dp_pairing": "random"}, ["dp_pairing", "'random'", "any"]),
    (widgets.offload.offload_explorer, {"storage": "floppy"}, ["storage", "'floppy'", "nvme-gen4"]),
    (widgets.offload.offload_explorer, {"hit_ratio": 1.5}, ["hit_ratio", "1.5"]),
    (widgets.offload.offload_explorer, {"read_GBps": 0}, ["read_GBps", "(0, 100000]", "got 0"]),
])
def test_unknown_names_and_broken_rules_raise_at_construction(make, kwargs, needles):
    with pytest.raises(LlmexploreError) as err:
        make(**kwargs)
    assert isinstance(err.value, (SpecError, UnknownPresetError))
    assert all(n in str(err.value) for n in needles), str(err.value)


def test_rate_and_skew_are_never_clamped():
    pd_app = widgets.disagg.pd_explorer(rate=1e6)
    assert pd_app.controls["rate"].value == 1e6 and pd_app.controls["rate"].label == "1,000,000 req/s"
    assert "No pool" in pd_app.status_text and "1,000,000 req/s" in pd_app.status_text
    moe_app = widgets.moe.moe_explorer(skew=40)
    assert moe_app.controls["skew"].value == 40 and moe_app.controls["skew"].label == "40×"
    assert "Cannot evaluate" in moe_app.status_text and "32" in moe_app.status_text  # E/k = 256/8
    moe_app.controls["skew"].value = 3.0  # a valid skew redraws, even with 40 still on the slider
    assert moe_app.status_text.startswith("At skew 3×")
    assert not moe_app.figures["skew"].layout.title.text.startswith("Not updated")


def test_gpus_without_a_split_say_so():
    app = widgets.moe.moe_explorer(gpus=24)
    assert app.controls["layout"].value == (2, 8)  # the requested split was added, not a TraitError
    assert "no TP x EP split of 24 GPUs" in app.status_text
    assert all(f.layout.title.text.startswith("Not updated") for f in app.figures.values())


def test_after_an_error_the_figures_do_not_look_current(app):
    step, mem = app.figures["step"], app.figures["memory"]
    title = step.layout.title.text
    app.controls["model"].value = "llama-3.2-3b"
    app.controls["ranks"].value = 16  # does not divide 24 heads
    for fig in (step, mem):
        assert fig.layout.title.text.startswith("Not updated: ranks (16) must divide")
        assert {t.opacity for t in fig.data if t.visible is not False} == {widgets.STALE_OPACITY}
        assert fig.layout.paper_bgcolor == widgets.STALE_BACKGROUND
    app.controls["ranks"].value = 8
    app.controls["model"].value = "deepseek-v3"
    for fig in (step, mem):
        assert not fig.layout.title.text.startswith("Not updated")
        assert {t.opacity for t in fig.data} == {None} and fig.layout.paper_bgcolor is None
    assert step.layout.title.text == title


# --------------------------------------------------------------------------------------------------
# C: what a reader sees


def test_readouts_are_formatted():
    app = widgets.disagg.pd_explorer(rate=56.2)
    assert app.controls["rate"].label == "56.2 req/s"
    assert app.controls["ttft_slo"].label == "1,000 ms" and app.controls["tpot_slo"].label == "40 ms"
    assert app.controls["prompt"].label == "4,096 tokens"
    lay = widgets.layouts.layout_explorer(context=131072)
    assert lay.controls["context"].label == "131,072 tokens" and lay.controls["batch"].label == "64 sequences"


def _all_figures(*apps):
    return [(k, f) for a in apps for k, f in a.figures.items()]


def test_titles_fit_and_every_line_is_labelled(app, pd_app, moe_app, kv_app):
    for key, fig in _all_figures(app, pd_app, moe_app, kv_app):
        for line in fig.layout.title.text.split("<br>"):
            assert len(line) <= plots.TITLE_CHARS, (key, line)
        shown = [t for t in fig.data if t.visible is not False]
        in_legend = {t.legendgroup or t.name for t in shown if t.showlegend is not False}
        for t in shown:
            drawn = t.type == "scatter" and "lines" in (t.mode or "") and np.isfinite(_y(t)).any()
            if drawn and t.showlegend is False:
                # a line without its own entry belongs to a group that has one (its subplot title says which
                # part it is), or it is labelled as the dotted "does not fit" part
                assert t.legendgroup in in_legend, (key, t.name)
        dotted = [t for t in shown if t.type == "scatter" and t.line.dash == "dot" and np.isfinite(_y(t)).any()]
        if dotted and key in ("step", "skew"):
            assert trace(fig, plots.NOT_FIT).showlegend is True, key


def test_usable_hbm_line_and_does_not_fit_have_legend_entries():
    lay = widgets.layouts.layout_explorer(batch=1024, context=131072)  # nothing fits
    usable = trace(lay.figures["memory"], "usable HBM per rank")
    assert usable.showlegend is not False and "GB" in usable.hovertemplate
    assert trace(lay.figures["step"], plots.NOT_FIT).showlegend is True
    assert "Nothing fits" in lay.status_text


def test_no_chart_is_empty(app, pd_app, moe_app, kv_app):
    moe_app.controls["layout"].value = (16, 1)  # TP16: one bar per GPU, all at the mean load
    try:
        bars = [t for t in moe_app.figures["loads"].data if t.type == "bar" and t.visible is not False]
        assert len(bars) == 1 and list(bars[0].x) == list(range(1, 17)) and set(bars[0].y) == {1.0}
        for key, fig in _all_figures(app, pd_app, moe_app, kv_app):
            assert any(np.isfinite(_y(t)).any() for t in fig.data if t.visible is not False and t.y is not None), key
    finally:
        moe_app.controls["layout"].value = (2, 8)


def test_overlapping_series_differ_in_more_than_colour(app, pd_app, moe_app):
    for key, fig in (("step", app.figures["step"]), ("exposed", pd_app.figures["exposed"]),
                     ("skew", moe_app.figures["skew"])):
        series = [t for t in fig.data if t.visible is not False and t.showlegend is not False
                  and t.legendrank is not None and t.legendrank < plots.RANK_KEY]
        looks = {(t.line.dash or "solid", t.marker.symbol if "markers" in t.mode else None) for t in series}
        assert len(series) >= 2 and len(looks) == len(series), (key, looks)


def test_status_text_is_the_status_line_without_html(app, pd_app, moe_app, kv_app):
    for a in (app, pd_app, moe_app, kv_app):
        text = a.status_text
        assert text and "<" not in text and "&amp;" not in text
    assert app.status_text.startswith(f"Best: {app.last['best']} — ")
    assert pd_app.status_text.startswith("Fewest GPUs: disaggregated, pipelined")
    assert moe_app.status_text.startswith("At skew 2.6×: static placement")
    assert kv_app.status_text.startswith("Prefill TP8 → decode TP4 of Llama-3-70B: each decode rank gathers from 2")


def test_moving_a_slider_back_reuses_the_tables():
    app = widgets.layouts.layout_explorer()
    calls = []
    evaluate = app.evaluate
    app.evaluate = lambda: calls.append(1) or evaluate()
    app.controls["batch"].value = 128
    app.controls["batch"].value = 64  # shown at construction: remembered
    assert len(calls) == 1 and "batch 64" in _flat(app.figures["step"].layout.title.text)
    app.controls["batch"].value = 128
    assert len(calls) == 1 and "batch 128" in _flat(app.figures["step"].layout.title.text)


def test_figures_take_the_width_the_browser_reports(moe_app):
    fit = moe_app.view.children[-1]
    assert isinstance(fit, widgets.FitWidth)
    assert all(f.layout.width is None for f in moe_app.figures.values())  # headless: plotly's autosize
    fit.width = 1100  # what the browser reports for the explorer's box
    assert [f.layout.width for f in moe_app.figures.values()] == [1100, 1100]
    fit.width = 200  # a very narrow box: the figures keep a readable width
    assert [f.layout.width for f in moe_app.figures.values()] == [widgets.MIN_FIGURE_WIDTH] * 2
    moe_app.controls["batch"].value = 512  # a redraw keeps the width
    assert [f.layout.width for f in moe_app.figures.values()] == [widgets.MIN_FIGURE_WIDTH] * 2
    moe_app.controls["batch"].value = 256


def test_titles_are_wrapped_to_the_width_the_figures_get():
    app = widgets.layouts.layout_explorer()
    fig = app.figures["step"]
    height, top = fig.layout.height, fig.layout.margin.t
    app.view.children[-1].width = 500  # a narrow notebook
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) > 2 and all(len(x) * widgets.TITLE_CHAR_PX + widgets.TITLE_OFFSET_PX <= 500 for x in lines)
    assert fig.layout.margin.t - top == fig.layout.height - height == 22 * (len(lines) - 2)
    app.controls["batch"].value = 128  # a redraw keeps the narrow wrapping
    assert fig.layout.title.text.split("<br>")[0].startswith("Decode step time")
    assert all(len(x) * widgets.TITLE_CHAR_PX + widgets.TITLE_OFFSET_PX <= 500
               for x in fig.layout.title.text.split("<br>"))
    app.view.children[-1].width = 1200  # wide again: back to the static figure's wrapping
    assert fig.layout.title.text.count("<br>") == 1 and fig.layout.margin.t == top


def test_status_text_of_an_error_leaves_out_the_hint_about_the_figures():
    app = widgets.layouts.layout_explorer(ranks=3)
    assert "greyed out" in app.status.value
    assert app.status_text == "Cannot evaluate: ranks (3) must divide the query heads of deepseek-v3 (128)"


# --------------------------------------------------------------------------------------------------
# the KV transfer explorer


def test_transfer_explorer_redraws_in_place_from_the_static_builders(kv_app):
    app = kv_app
    matrix, fanout, pairs = (app.figures[k] for k in ("matrix", "fanout", "pairs"))
    assert np.asarray(trace(matrix, "MB per request").z).shape == (8, 4)
    app.controls["decode_tp"].value = 2
    try:
        assert app.figures["matrix"] is matrix and app.figures["pairs"] is pairs
        s = sweeps.transfer.setup("llama-3-70b", prefill_tp=8, decode_tp=2)
        want = sweeps.transfer.byte_matrix(s).to_numpy()
        assert np.allclose(np.asarray(trace(matrix, "MB per request").z, float), want)
        _assert_shows(fanout, plots.transfer.fanout_figure(sweeps.transfer.prefill_rank_table(s)))
        static = plots.transfer.pairs_figure(sweeps.transfer.layout_pairs(
            "llama-3-70b", widgets.transfer.pairs_around(s.model, 8, 2)), chosen=(8, 2))
        _assert_shows(pairs, static)
        assert "<b>TP8 → TP2</b>" in pairs.layout.xaxis.ticktext
        assert "each decode rank gathers from 4 prefill ranks" in app.status_text
        assert app.last["summary"]["max_sources"] == 4
    finally:
        app.controls["decode_tp"].value = 4


def test_transfer_explorer_reports_a_layout_the_planner_refuses(kv_app):
    app = kv_app
    app.controls["decode_dp"].value = 2  # version 1: decode DP group 1 has no prefill group
    try:
        assert app.status_text.startswith("Cannot evaluate: decode_layout.dp_size must be <= prefill_layout.dp_size "
                                          "(1) with dp_pairing='index'")
        assert "Traceback" not in app.status.value
        assert all(f.layout.title.text.startswith("Not updated") for f in app.figures.values())
        app.controls["dp_pairing"].value = "any"  # any prefill group may serve any decode group
        assert app.status_text.startswith("Prefill TP8 → decode TP4 x DP2 of Llama-3-70B")
        assert np.asarray(trace(app.figures["matrix"], "MB per request").z).shape == (8, 8)
        assert not any(f.layout.title.text.startswith("Not updated") for f in app.figures.values())
    finally:
        app.controls["dp_pairing"].value = "index"
        app.controls["decode_dp"].value = 1
    assert app.status_text.startswith("Prefill TP8 → decode TP4 of Llama-3-70B")
    odd = widgets.transfer.transfer_explorer(prefill_tp=6)  # not on the slider, and not a divisor of 8 heads
    assert odd.controls["prefill_tp"].value == 6 and odd.controls["prefill_tp"].label == "6 GPUs"
    assert odd.status_text == ("Cannot evaluate: prefill_tp (6) must divide or be a multiple of the KV heads of "
                               "llama-3-70b (8)")


def test_transfer_explorer_redraws_on_every_control():
    """Each control recomputes and redraws (a new parameter set each time: computed, not remembered). How fast
    is measured by benchmarks/bench_explorers.py (about 40 ms on a 2-core machine), not asserted here: no
    wall-clock assertion belongs in make test."""
    app = widgets.transfer.transfer_explorer()
    start = [f.to_json() for f in app.figures.values()]
    for name, value in (("decode_tp", 8), ("page_size", 32), ("model", "qwen3-32b"), ("prefill_dp", 2),
                        ("decode_dp", 2), ("kv_dtype", "fp8"), ("link", "ib-ndr400")):
        app.controls[name].value = value
        assert "Cannot evaluate" not in app.status_text, name
    assert [f.to_json() for f in app.figures.values()] != start


# --------------------------------------------------------------------------------------------------
# the KV offload explorer


@pytest.fixture(scope="module")
def off_app():
    return widgets.offload.offload_explorer()


def test_offload_explorer_starts_from_the_notebook_figures(off_app):
    s = sweeps.offload.setup()
    assert off_app.status_text.startswith(
        "Llama-3-70B on 8x H100 SXM 80GB, NVMe SSD, PCIe Gen4 x4: a 32,768-token prefix (128 blocks, 10,737 MB) "
        "recomputes in 1,469 ms and loads in 1,537 ms → recompute (break-even 40,192 tokens, set by the bandwidth)")
    costs = off_app.figures["costs"]
    static = plots.offload.cost_curves_figure(sweeps.offload.cost_curves(s, widgets.offload.CURVE_PREFIXES),
                                              sweeps.offload.break_even_table(s))
    for name in (plots.offload.RECOMPUTE, plots.offload.load_name("NVMe SSD, PCIe Gen4 x4")):
        assert _same(trace(costs, name).y, trace(static, name).y)
    assert 40192.0 in list(trace(costs, plots.offload.BREAK_EVEN).x)
    assert set(off_app.figures) == {"costs", "regime", "map", "preload"}


def test_offload_sliders_redraw_in_place(off_app):
    costs, preload, regime = off_app.figures["costs"], off_app.figures["preload"], off_app.figures["regime"]
    exposed = _y(trace(preload, plots.offload.EXPOSED))
    off_app.controls["prefix"].value = 65536
    assert off_app.figures["preload"] is preload and not _same(exposed, _y(trace(preload, plots.offload.EXPOSED)))
    assert list(trace(costs, "chosen prefix").x) == [65536.0, 65536.0]
    assert "a 65,536-token prefix" in off_app.status_text
    off_app.controls["queue_wait_ms"].value = 100.0
    assert "after a 100 ms queue wait" in off_app.status_text
    assert list(trace(preload, "chosen queue wait").x) == [100.0, 100.0]
    off_app.controls["hit_ratio"].value = 1.0
    # loaded exactly when the cached tokens reach the break-even (40,192 tokens: 32,768 are recomputed)
    be = off_app.last["point"]["break_even_tokens"]
    assert (f"A hit ratio of 100% of a 32,768-token prompt caches 32,768 tokens: "
            f"{'loaded' if 32768 >= be else 'recomputed (below the break-even)'}") in off_app.status_text
    # a faster drive: the chosen tier's load curve and its break-even move, the regime map keeps its axes
    gen4 = _y(trace(costs, plots.offload.load_name("NVMe SSD, PCIe Gen4 x4")))
    off_app.controls["read_GBps"].value = 20
    fast = trace(costs, plots.offload.load_name("NVMe SSD, PCIe Gen4 x4 (20 GB/s)"))
    assert fast.visible is not False and np.nanmax(_y(fast) / gen4) < 1
    assert trace(costs, plots.offload.load_name("NVMe SSD, PCIe Gen4 x4")).visible is False
    assert "break-even 256 tokens (one block), set by the latency" in off_app.status_text
    assert regime.data[0].type == "heatmap"


def test_offload_tier_dropdown_sets_its_bandwidth_and_latency(off_app):
    off_app.controls["storage"].value = "nfs"
    nfs = presets.storage("nfs")
    assert off_app.controls["read_GBps"].value == nfs.read_GBps and off_app.controls["latency_us"].value == nfs.latency_us
    assert "NFS over 25 GbE:" in off_app.status_text and "(" not in off_app.status_text.split(":")[0].split(",")[-1]
    off_app.controls["storage"].value = "nvme-gen4"
    assert off_app.controls["read_GBps"].value == 7.0


def test_offload_explorer_reports_a_deployment_it_cannot_evaluate(off_app):
    off_app.controls["model"].value = "llama-3.2-3b"
    off_app.controls["tp"].value = 16  # more ranks than the 24 query heads divide
    assert "Cannot evaluate" in off_app.status_text and "16" in off_app.status_text
    assert all(f.layout.title.text.startswith("Not updated") for f in off_app.figures.values())
    off_app.controls["tp"].value = 1
    assert off_app.status_text.startswith("Llama-3.2-3B on 1x H100 SXM 80GB, NVMe SSD, PCIe Gen4 x4")
    assert not off_app.figures["costs"].layout.title.text.startswith("Not updated")


# --------------------------------------------------------------------------------------------------
# the runtime dropdown (every explorer): the preset that prices the kernels (data/runtime.yaml)


def _runtime_options(app) -> list:
    return [o[1] if isinstance(o, tuple) else o for o in app.controls["runtime"].options]


def test_every_explorer_offers_every_runtime_preset(app, pd_app, moe_app, kv_app, off_app):
    for a in (app, pd_app, moe_app, kv_app, off_app):
        assert _runtime_options(a) == presets.names("runtime") and a.controls["runtime"].value == "default"
    with pytest.raises(UnknownPresetError, match="runtime"):
        widgets.layouts.layout_explorer(runtime="warp-drive")


def test_runtime_dropdown_reprices_the_layout_explorer():
    app = widgets.layouts.layout_explorer("deepseek-v3", "h200", 8, 64, 8192, "fp8", "bf16", runtime="default")
    before = app.status_text
    app.controls["runtime"].value = "scalar"
    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8", kv_dtype="bf16", runtime="scalar")
    table = sweeps.layouts.layout_table(dep, 64, 8192)
    best = sweeps.layouts.best_layout(table)
    step_ms = float(table.set_index("layout").loc[best, "step_ms"])
    assert app.status_text != before
    assert app.status_text.startswith(f"Best: {best} — {plots.fmt(step_ms, 'ms')} per step")
    step, mem = _expected_layout_figures("deepseek-v3", "h200", 8, 64, 8192, runtime="scalar")
    _assert_shows(app.figures["step"], step)
    app.controls["runtime"].value = "default"
    assert app.status_text == before


def test_runtime_dropdown_reprices_the_pd_explorer(pd_app):
    app = pd_app
    before = app.status_text
    try:
        app.controls["runtime"].value = "scalar"
        s = sweeps.disagg.setup("llama-3-70b", "h100-sxm", prompt_tokens=4096, output_tokens=256, rate_per_s=36.0,
                                ttft_slo_ms=1000.0, tpot_slo_ms=40.0, runtime="scalar")
        prefill_ms = float(sweeps.disagg.exposed_vs_bandwidth(s, widgets.disagg.BANDWIDTHS)["prefill_ms"].iloc[0])
        rows = sweeps.disagg.mode_rows(s, "roce-400g")
        assert app.status_text != before and f"Prefill of one prompt {plots.fmt(prefill_ms, 'ms')};" in app.status_text
        assert list(trace(app.figures["gpus"], "GPUs").y) == [r["gpus"] for r in rows]
    finally:
        app.controls["runtime"].value = "default"
    assert app.status_text == before


def test_runtime_dropdown_reprices_the_moe_explorer(moe_app):
    app = moe_app
    before, curve = app.status_text, _y(trace(app.figures["skew"], "static placement"))
    try:
        app.controls["runtime"].value = "scalar"
        df = sweeps.moe.step_vs_skew("deepseek-v3", "h200", 16, tp=2, ep=8, redundant=32, batch=256, context=2048,
                                     skews=[2.6], runtime="scalar")
        static = float(df.set_index("placement").loc["static placement", "step_ms"])
        assert app.status_text.startswith(f"At skew 2.6×: static placement {plots.fmt(static, 'ms')} per step")
        assert app.status_text != before and not _same(curve, _y(trace(app.figures["skew"], "static placement")))
    finally:
        app.controls["runtime"].value = "default"
    assert app.status_text == before


def test_runtime_dropdown_reprices_the_transfer_explorer(kv_app):
    from llmexplore.findings import transfer as ft

    app = kv_app
    before = app.status_text
    try:
        app.controls["runtime"].value = "scalar"
        s = sweeps.transfer.setup("llama-3-70b", prefill_tp=8, decode_tp=4, runtime="scalar")
        summary = sweeps.transfer.plan_summary(s)
        # the plan and its transfer times do not depend on the runtime; the prefill they hide behind does
        assert app.last["summary"]["prefill_ms"] == pytest.approx(summary["prefill_ms"], rel=1e-12)
        assert app.status_text == (f"{ft.plan_sentence(summary, s)} The prefill it overlaps takes "
                                   f"{findings.num(summary['prefill_ms'])} ms on prefill TP8.")
        assert app.status_text != before
    finally:
        app.controls["runtime"].value = "default"
    assert app.status_text == before


def test_runtime_dropdown_reprices_the_offload_explorer():
    app = widgets.offload.offload_explorer()
    before = app.status_text
    app.controls["runtime"].value = "scalar"
    s = sweeps.offload.setup(runtime="scalar")
    point = sweeps.offload.point_summary(s, 32768, queue_wait_ms=20.0)
    assert app.status_text != before
    assert f"recomputes in {findings.num(point['recompute_ms'])} ms" in app.status_text
    static = plots.offload.cost_curves_figure(sweeps.offload.cost_curves(s, widgets.offload.CURVE_PREFIXES),
                                              sweeps.offload.break_even_table(s))
    assert _same(trace(app.figures["costs"], plots.offload.RECOMPUTE).y, trace(static, plots.offload.RECOMPUTE).y)
    app.controls["runtime"].value = "default"
    assert app.status_text == before


def test_layout_explorer_turns_to_time_per_output_token_with_a_pipeline_or_speculation():
    """The pipeline slider and the speculative dropdown (issue 21): the figures and the status line are per output
    token, the figures are the static builders' for the same decoding, and PP with a draft is said, not raised."""
    app = widgets.layouts.layout_explorer(speculative="deepseek-mtp-1", accepted_length=1.7)
    dep = Deployment.build("deepseek-v3", "h200", 8, kv_dtype="bf16")
    dec = sweeps.layouts.decoding(dep, 1, "deepseek-mtp-1", 1.7)
    table = sweeps.layouts.layout_table(dep, 64, 8192, **dec)
    best = sweeps.layouts.best_layout(table)
    assert f"Best: {best}" in app.status_text and "per output token" in app.status_text
    assert app.figures["step"].layout.yaxis.title.text == "time per output token (ms)"
    app.controls["pp"].value = 2
    assert "must be 1 when decoding speculatively" in app.status_text
    app.controls["speculative"].value = widgets.layouts.NO_SPEC
    assert "Best:" in app.status_text and "PP2" in app.figures["step"].layout.title.text
    app.controls["pp"].value = 1
    assert "per step" in app.status_text and app.figures["step"].layout.yaxis.title.text == "step time (ms)"


def test_moe_explorer_turns_to_time_per_output_token_with_a_pipeline_or_speculation():
    """The MoE explorer's pipeline slider and speculative dropdown (issue 21): the skew figure is the static builder's
    for the same decoding (time per output token), the status line says per output token, the accepted length
    given applies to its preset only, and PP with a draft is said in the status line, not raised."""
    app = widgets.moe.moe_explorer(speculative="deepseek-mtp-1", accepted_length=1.7)
    dec = sweeps.moe.decoding(sweeps.moe.config(tp=2, ep=8), 1, "deepseek-mtp-1", 1.7)
    static = sweeps.moe.step_vs_skew(tp=2, ep=8, redundant=32, batch=256, skews=[2.6], **dec)
    assert "deepseek-mtp-1 (1.70 tokens per step)" in app.status_text and "per output token" in app.status_text
    first = static.iloc[0]
    assert f"{plots.fmt(first.tpot_ms, 'ms')} per output token" in app.status_text
    fig = app.figures["skew"]
    assert fig.layout.yaxis.title.text == "time per output token (ms)"
    assert "time per output token" in fig.layout.title.text
    skews = np.unique(np.r_[np.linspace(1.0, 5.0, widgets.moe.N_SKEW), 2.6])  # the explorer's axis (E/k = 32 > 5)
    _assert_shows(fig, plots.moe.skew_figure(sweeps.moe.step_vs_skew(tp=2, ep=8, redundant=32, batch=256,
                                                                     skews=skews, **dec), skew_marker=2.6))
    app.controls["pp"].value = 2
    assert "Cannot evaluate: pp (2) must be 1 when decoding speculatively" in app.status_text
    app.controls["speculative"].value = widgets.moe.NO_SPEC
    assert "PP2" in app.status_text and "PP2" in app.figures["skew"].layout.title.text
    app.controls["speculative"].value = "ngram-5"  # another preset runs at its own acceptance
    assert "ngram-5 (1.37 tokens per step)" not in app.status_text  # still PP2: refused
    app.controls["pp"].value = 1
    assert "ngram-5 (1.37 tokens per step)" in app.status_text
    app.controls["speculative"].value = widgets.moe.NO_SPEC
    assert "per step" in app.status_text and app.figures["skew"].layout.yaxis.title.text == "step time (ms)"


def test_transfer_explorer_pipeline_sliders_and_speculative_dropdown():
    """The pipeline sliders and the speculative dropdown (issue 21): the byte matrix gains every stage's ranks, the
    figures are the static builders' for the same stages, and a pipeline with a draft is said, not raised."""
    app = widgets.transfer.transfer_explorer(prefill_pp=2, decode_pp=3)
    s = sweeps.transfer.setup("llama-3-70b", prefill_tp=8, decode_tp=4, prefill_pp=2, decode_pp=3)
    z = np.asarray(trace(app.figures["matrix"], "MB per request").z, float)
    assert z.shape == (16, 12) and np.allclose(z, sweeps.transfer.byte_matrix(s).to_numpy())
    _assert_shows(app.figures["fanout"], plots.transfer.fanout_figure(sweeps.transfer.prefill_rank_table(s)))
    assert "2 prefill and 3 decode pipeline stages" in app.status_text and "x PP2 (pipelined)" in app.status_text
    app.controls["speculative"].value = "eagle3-llama-3.1-8b"
    assert app.status_text.startswith("Cannot evaluate: prefill_pp (2) must be 1 when decoding speculatively")
    assert "Traceback" not in app.status.value
    app.controls["prefill_pp"].value = 1
    app.controls["decode_pp"].value = 1
    assert "the draft layer's KV moves as one more layer" in app.status_text
    app.controls["speculative"].value = widgets.transfer.NO_SPEC
    assert app.status_text.startswith("Prefill TP8 → decode TP4 of Llama-3-70B")
