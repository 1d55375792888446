"""The model-fidelity area (notebooks/05_fidelity): tables against llmexplore.validate / calibrate / kernelfit computed
here, figures with titled axes (units) and legends, and sentences whose numbers are the tables' numbers."""

import re

import numpy as np
import pandas as pd
import pytest

from llmexplore import calibrate, plots, presets, validate
from llmexplore.errors import SpecError
from llmexplore.findings import fidelity as ff
from llmexplore.findings import num
from llmexplore.nbtools import parameter_checker
from llmexplore.plots import fidelity as pf
from llmexplore.sweeps import fidelity as sf

DEFAULTS = dict(PRICING="engine", BASELINE="scalar", BAND_PCT=15.0, MARGIN_PCT=5.0, GPU="h100-sxm", ENGINE="trtllm")


@pytest.fixture(scope="module")
def acc():
    return sf.accuracy_table()


@pytest.fixture(scope="module")
def summary(acc):
    return sf.accuracy_summary(acc, band_pct=15.0)


@pytest.fixture(scope="module")
def cats(acc):
    return sf.category_errors(acc)


@pytest.fixture(scope="module")
def kd():
    return sf.kernel_data("h100-sxm", "trtllm")


@pytest.fixture(scope="module")
def tables(kd):
    return {"gemm": sf.gemm_curves(kd), "grouped_gemm": sf.moe_curves(kd),
            "attention_decode": sf.decode_attention_curves(kd), "all_reduce": sf.allreduce_curves(kd)}


# ---- end to end --------------------------------------------------------------------------------------------------


def test_accuracy_table_is_validate_evaluate_per_choice_plus_the_in_sample_points(acc):
    assert list(pd.unique(acc["choice"])) == list(sf.RUNTIMES)
    for choice in sf.RUNTIMES:
        val = acc[(acc["set"] == "validation") & (acc["choice"] == choice)].reset_index(drop=True)
        ref = validate.evaluate(choice)
        assert list(val["id"]) == list(ref["id"])
        assert np.allclose(val["predicted_ms"], ref["predicted_ms"], equal_nan=True)
        ins = acc[(acc["set"] == "in-sample") & (acc["choice"] == choice)]
        points = [p for p in calibrate.load_points(sf.CALIBRATION_CSV) if p.fitted]
        rt = "trtllm" if choice == "engine" else choice  # AIConfigurator's database is TensorRT-LLM's kernels
        assert np.allclose(ins["predicted_ms"], calibrate.predict(points, presets.runtime(rt)))
        assert (ins["runtime"] == rt).all() and len(ins) == 5
    assert np.allclose(acc["abs_error_pct"], acc["error_pct"].abs(), equal_nan=True)


def test_summary_numbers_are_validate_summary(acc, summary):
    for r in summary.itertuples():
        s = validate.summary(validate.evaluate(r.choice))
        assert (r.rows, r.modelled) == (s["rows"], s["modelled"]) and r.rows == len(validate.load())
        assert r.median_abs_error_pct == pytest.approx(s["median_abs_error_pct"])
        assert r.p90_abs_error_pct == pytest.approx(s["p90_abs_error_pct"])
        assert r.worst_category == s["worst_category"]["category"]
        ok = acc[(acc["set"] == "validation") & (acc["choice"] == r.choice) & (acc["status"] == "ok")]
        assert r.within_band == int((ok["error_pct"].abs() <= 15.0).sum())
    by = summary.set_index("choice")["median_abs_error_pct"]
    assert by["engine"] < by["scalar"] and by["default"] < by["scalar"]


def test_category_errors_cover_every_modelled_row_largest_first(acc, cats, validation_ref):
    assert cats["rows"].sum() == validation_ref["modelled"]
    assert list(cats["engine_abs_error_pct"]) == sorted(cats["engine_abs_error_pct"], reverse=True)
    per = validate.summary(validate.evaluate("scalar"))["categories"].set_index("category")
    assert np.allclose(cats.set_index("category").loc[per.index, "scalar_abs_error_pct"], per["median_abs_error_pct"])
    row = cats.iloc[0]
    assert row["category"] == "|".join(row[["family", "gpu", "weight_dtype", "parallelism", "phase"]])


def test_not_modelled_and_ranking(acc, validation_ref):
    nm = sf.not_modelled(acc)
    assert list(nm["id"]) == validation_ref["left_out"]
    assert list(nm["id"]) == ["lmsys-dsv3-gb200-decode-48r"]  # EP72 is modelled since moe_redundant
    assert nm["reason"].str.contains(r"ranks \(48\) must divide the routed experts").all()
    pairs = sf.ranking_pairs(acc, "engine")
    assert list(pairs["a"]) == list(validation_ref["ranking"]["a"]) and list(pairs["agrees"]) == list(validation_ref["ranking"]["agrees"])
    ep = pairs[pairs["a"] == "trtllm-dsr1-b200-bs1-ep8"]
    assert list(ep["differs_in"]) == ["ep"] and not ep["resolved"].any()  # EP8 vs EP4xTP2: not given to the model
    assert len(sf.ranking_pairs(acc, "engine", margin_pct=1000.0)) == 0


def test_runtime_choices_put_the_notebooks_pair_first():
    assert sf.runtime_choices("engine", "scalar") == ("engine", "scalar", "default")
    assert sf.runtime_choices("trtllm", "scalar") == ("trtllm", "scalar", "engine", "default")


# ---- kernel curves -------------------------------------------------------------------------------------------------


def test_kernel_rows_priced_with_the_yaml_curves_reproduce_the_yamls_fit_error(tables):
    cat = sf.curve_catalog()
    own = cat[(cat["engine"] == "trtllm") & (cat["gpu"] == "h100-sxm")].set_index("key")
    for ct in tables.values():
        for r in ct.curves.itertuples():
            assert r.curve_from == "trtllm"
            assert r.rows == own.loc[r.key, "points"], r.key
            # the YAML rounds the parameters, so the error recomputed from them agrees to rounding
            assert r.median_abs_error_pct == pytest.approx(own.loc[r.key, "median_err_pct"], abs=0.1), r.key


def test_a_rejected_curve_is_priced_by_the_engine_neutral_one():
    kd = sf.kernel_data("h100-sxm", "vllm")
    assert kd.curve_from["gemm.block.fp8"] == "any" and "host work" in kd.rejected["gemm.block.fp8"]
    ct = sf.gemm_curves(kd)
    row = ct.curves.set_index("key").loc["gemm.block.fp8"]
    assert row["curve_from"] == "any" and row["rejected"]
    assert "rejected" in pf._panel_title(ct, row["panel"])


def test_gemm_tables_draw_three_shapes_per_dtype_and_the_peak(kd, tables):
    ct = tables["gemm"]
    assert list(ct.panels["panel"]) == ["BF16", "FP8", "FP8 block-scaled"]
    for p in ct.panels.itertuples():
        assert len(p.shapes) == 3 and set(ct.points[ct.points["panel"] == p.panel]["series"]) == set(sf.SIZE_CLASSES)
    bf16 = ct.panels.set_index("panel").loc["BF16", "ref_y"]
    assert bf16 == pytest.approx(presets.hardware("h100-sxm").peak_TFLOPS("bf16"))
    pts = ct.points[ct.points["panel"] == "BF16"]
    assert (pts["y"] < bf16).all()  # achieved below the datasheet peak
    # achieved TFLOP/s = 2 m n k / time: the point's y is its measured time's
    n, k = (float(v.replace(",", "")) for v in pts["shape"].iloc[0].split("= ")[1].split("×"))
    first = pts.iloc[0]
    assert first["y"] == pytest.approx(2 * first["x"] * n * k / (first["measured_us"] * 1e-6) / 1e12)


def test_moe_attention_and_allreduce_tables(tables):
    moe = tables["grouped_gemm"]
    assert ((moe.points["y"] > 0) & (moe.points["y"] < 100)).all()  # % of the dense peak
    att = tables["attention_decode"]
    assert set(att.panels["panel"]) == {"GQA", "MLA"}
    assert (~att.points["fitted"]).any() and att.points[att.points["fitted"]]["y"].max() < 3.35  # TB/s, H100
    ar = tables["all_reduce"]
    assert list(ar.curves["series"]) == ["2 GPUs", "4 GPUs", "8 GPUs"]
    for s, d in ar.lines.groupby("series"):
        assert np.all(np.diff(d["y"]) >= -1e-9), s  # latency grows with the message


def test_curve_catalog_pivot_and_rejected():
    cat = sf.curve_catalog()
    assert len(cat) > 200 and set(cat["engine"]) == {"trtllm", "vllm", "sglang", "any"}
    assert (cat["median_err_pct"] <= cat["p90_err_pct"]).all()
    piv = sf.fit_error_pivot(cat)
    assert piv.columns[0] == "key" and piv.shape[1] == 13
    assert piv.set_index("key").loc["gemm.plain.bf16", "trtllm h100-sxm"] == \
        cat[(cat.engine == "trtllm") & (cat.gpu == "h100-sxm") & (cat.key == "gemm.plain.bf16")]["median_err_pct"].iloc[0]
    rej = sf.rejected_curves()
    assert {("vllm", "gemm.block.fp8"), ("sglang", "attention_decode.mla.fp8")} <= set(zip(rej.engine, rej.key))


# ---- figures -------------------------------------------------------------------------------------------------------

UNIT = re.compile(r"\((ms|tokens|TFLOP/s|MB|TB/s|µs|% of the dense peak)\)|\(tokens × top-k / experts\)")


def _axes(fig):
    lay = fig.layout.to_plotly_json()
    return {k: v for k, v in lay.items() if re.fullmatch(r"[xy]axis\d*", k)}


def _assert_titled(fig):
    for name, ax in _axes(fig).items():
        text = (ax.get("title") or {}).get("text", "")
        assert text and UNIT.search(text), f"{name} title {text!r} names no unit"
    assert fig.layout.title.text
    legend = [t.name for t in fig.data if t.showlegend is not False and t.name]
    assert legend, "no legend entry"
    return legend


def test_predicted_vs_measured_figure(acc, validation_ref):
    fig = pf.predicted_vs_measured_figure(acc, ("scalar", "engine"), band_pct=15.0, title="t")
    legend = _assert_titled(fig)
    assert {pf.IDENTITY, pf.band_name(15.0), pf.IN_SAMPLE, "marker: prefill"} <= set(legend)
    assert all(ax.get("type") == "log" for ax in _axes(fig).values())
    full = acc[(acc["set"] == "validation") & (acc["status"] == "ok")]["category"].astype(str)
    cats = set(full.str.split("|").str[:2].str.join(" | "))
    assert cats <= set(legend)  # every model family | GPU is in the legend once (issue 20: 27 entries were too many)
    assert len(legend) <= 20
    hovers = " ".join(h for t in fig.data if t.name in cats for h in t.customdata)
    assert all(c in hovers for c in set(full))  # the full category is still there, in the hover
    right = [t for t in fig.data if t.xaxis == "x2" and t.name in cats]
    val = acc[(acc["set"] == "validation") & (acc["choice"] == "engine") & (acc["status"] == "ok")]
    assert sum(len(t.x) for t in right) == len(val) == validation_ref["modelled"]
    band = [t for t in fig.data if t.name == pf.band_name(15.0) and t.xaxis == "x"]
    assert band[1].y[0] / band[1].x[0] == pytest.approx(1.15) and band[0].y[0] / band[0].x[0] == pytest.approx(0.85)
    scalar = validate.summary(validate.evaluate("scalar"))["median_abs_error_pct"]
    assert f"median |error| {scalar:.1f}%" in fig.layout.annotations[0].text


@pytest.mark.parametrize("kind", ["gemm", "grouped_gemm", "attention_decode", "all_reduce"])
def test_kernel_curves_figures_have_units_legends_points_and_lines(tables, kind):
    ct = tables[kind]
    fig = pf.kernel_curves_figure(ct, title="t")
    legend = _assert_titled(fig)
    for series in ct.points["series"].unique():
        assert pf.measured_name(kind, series) in legend and pf.curve_name(kind, series) in legend
    if kind in ("gemm", "attention_decode"):
        assert pf.AXES[kind][2] in legend  # the datasheet peak
    drawn = sum(len(t.x) for t in fig.data if t.mode == "markers" and t.x is not None and len(t.x) and t.x[0] is not None)
    assert drawn == len(ct.points)
    for panel in ct.panels["panel"]:  # each panel title states its curves' median |error|
        r = ct.curves[ct.curves["panel"] == panel].iloc[0]
        assert any(f"{r.median_abs_error_pct:.1f}%" in a.text and panel in a.text for a in fig.layout.annotations)


def test_tables_for_people(acc, summary, cats):
    t = pf.summary_people_table(summary)
    assert "median |error| [%]" in t.frame.columns and len(t) == 3
    t = pf.category_people_table(cats, sf.RUNTIMES)
    assert len(t) == len(cats) and any("[%]" in c for c in t.frame.columns)
    cat = sf.curve_catalog()
    assert len(pf.curve_people_table(cat, "h100-sxm", "trtllm")) == len(cat[(cat.engine == "trtllm") & (cat.gpu == "h100-sxm")])
    assert len(pf.rejected_people_table(sf.rejected_curves())) == len(sf.rejected_curves())
    assert len(pf.ranking_people_table(sf.ranking_pairs(acc, "engine", margin_pct=1000.0))) == 0


# ---- sentences -----------------------------------------------------------------------------------------------------


def test_accuracy_sentences_state_the_tables_numbers(summary, validation_ref):
    by = summary.set_index("choice")
    text = ff.accuracy_sentence(summary, "engine", "scalar")
    for choice in sf.RUNTIMES:
        assert f"{num(by.loc[choice, 'median_abs_error_pct'])}%" in text
    assert f"{by.loc['engine', 'within_band']} of them fall within ±15%" in text
    assert f"{validation_ref['modelled']} of {validation_ref['rows']}" in text
    short = ff.accuracy_sentence(summary, "engine", "scalar", short=True)
    assert len(short) < 2 * plots.TITLE_CHARS and f"{num(by.loc['scalar', 'median_abs_error_pct'])}%" in short
    ins = ff.in_sample_sentence(summary, "engine", "scalar")
    assert f"{num(by.loc['engine', 'in_sample_max_abs_error_pct'])}%" in ins and "5 in-sample points" in ins


def test_category_sentence_names_the_worst_and_counts_the_gains(cats):
    text = ff.category_sentence(cats, "engine", "scalar")
    worst = cats.iloc[0]
    assert f"`{worst['category']}`" in text and ff.pct(worst["engine_error_pct"], sign=True) in text
    better = int((cats["engine_abs_error_pct"] < cats["scalar_abs_error_pct"]).sum())
    assert f"in {better} of {len(cats)} categories" in text


def test_kernel_sentences_state_each_curves_error(tables):
    for kind, fn in (("gemm", ff.gemm_sentence), ("grouped_gemm", ff.moe_sentence),
                     ("attention_decode", ff.attention_sentence), ("all_reduce", ff.allreduce_sentence)):
        ct = tables[kind]
        for short in (False, True):
            text = fn(ct, short=short)
            for r in ct.curves.itertuples():
                assert f"{num(r.median_abs_error_pct)}%" in text, (kind, short, text)
    gemm = tables["gemm"]
    best = gemm.points[gemm.points["panel"] == "BF16"]["y"].max()
    assert f"reaches {num(best)} TFLOP/s" in ff.gemm_sentence(gemm)


def test_fit_error_sentence_counts_curves_and_rejections():
    cat, rej = sf.curve_catalog(), sf.rejected_curves()
    text = ff.fit_error_sentence(cat, rej)
    assert f"holds {len(cat)} curves" in text and f"{len(rej)} fitted curves were rejected" in text
    assert f"{num(cat['median_err_pct'].median())}%" in text


def test_weakest_sentence_gives_the_documented_causes(acc, cats):
    text = ff.weakest_sentence(acc, cats, "engine")
    top = cats.head(3)
    for r in top.itertuples():
        assert f"`{r.category}`" in text and ff.pct(r.engine_error_pct, sign=True) in text
    ok = acc[(acc["set"] == "validation") & (acc["choice"] == "engine") & (acc["status"] == "ok")]
    for r in top.itertuples():  # each of the three names its documented cause
        assert ff.cause(ok[ok["category"] == r.category]) in text, r.category
    assert "host time" in text  # LMSYS's EP72 decode leads
    assert ff.cause(ok[ok["category"] == "dense|mi300x|fp8|TP8|decode"]).startswith("MI300X has kernel data for its FP8 GEMMs only")
    assert ff.cause(ok[ok["id"] == "nim-l70-h100-d1"]) == ff.NO_CAUSE
    mle = ok[ok["id"].str.startswith("mle-")]
    hi = mle[mle["batch"] >= ff.HIGH_BATCH]
    assert ff.pct(hi["error_pct"].median(), sign=True) in ff.interference_sentence(acc, "engine")


def test_not_modelled_and_ranking_sentences(acc, validation_ref):
    nm = sf.not_modelled(acc)
    text = ff.not_modelled_sentence(nm, validation_ref["rows"])
    assert text.startswith(f"{len(validation_ref['left_out'])} of the {validation_ref['rows']} rows") and "48 ranks" in text
    pairs = sf.ranking_pairs(acc, "engine")
    text = ff.ranking_sentence(pairs, "engine")
    r = validation_ref["ranking"]
    assert f"{len(r)} pair" in text and "only in ep" in text
    assert f"tells {int(r.resolved.sum())} of them apart and orders {int(r.agrees.sum())} correctly" in text
    assert "cannot check" in ff.ranking_sentence(sf.ranking_pairs(acc, "engine", margin_pct=1000.0), "engine",
                                                 margin_pct=1000.0)


def test_recap_sentence(acc, summary, cats):
    text = ff.recap_sentence(acc, summary, cats, "engine", "scalar")
    by = summary.set_index("choice")
    assert f"{num(by.loc['engine', 'median_abs_error_pct'])}%" in text and f"`{cats.iloc[0]['category']}`" in text


# ---- notebook parameters ---------------------------------------------------------------------------------------------


def test_notebook_parameters():
    check = parameter_checker("05_fidelity")
    assert check(DEFAULTS) == {}
    assert check({**DEFAULTS, "PRICING": "trtllm", "ENGINE": "any", "GPU": "b200"}) == {}
    assert "borrows the b200 curves" in check({**DEFAULTS, "GPU": "gb200"})["GPU"]
    assert "no kernel measurements" in check({**DEFAULTS, "GPU": "mi300x"})["GPU"]
    for bad, message in ((dict(ENGINE="tgi"), "ENGINE must be one of"), (dict(PRICING="fast"), "PRICING must be"),
                         (dict(BASELINE=3), "BASELINE must be"), (dict(BAND_PCT=0), "BAND_PCT"),
                         (dict(MARGIN_PCT=-1), "MARGIN_PCT"), (dict(GPU="a100"), "GPU must name a preset")):
        with pytest.raises(SpecError, match=message):
            check({**DEFAULTS, **bad})


def test_sampler_effect_table_and_figure():
    import pandas as pd

    from llmexplore import plots, sweeps
    from llmexplore.findings import fidelity as ff

    effect = sweeps.fidelity.sampler_effect("engine")
    assert len(effect) == 28 and effect.id.str.startswith("mle-").all()
    assert list(effect.columns) == ["id", "model", "gpu", "batch", "error_pct", "error_fused_pct"]
    assert (effect.batch.diff().dropna() >= 0).all()
    # the sort only adds time, so every row's prediction rises: its error is above the one without it
    assert (effect.error_pct > effect.error_fused_pct).all()
    fig = plots.fidelity.sampler_figure(effect, title=ff.sampler_sentence(effect, short=True))
    names = [t.name for t in fig.data]
    assert "sort-based sampler priced" in names and "sampler left out" in names and "±15% band" in names
    assert fig.layout.xaxis.title.text == "decode batch (sequences)" and "%" in fig.layout.yaxis.title.text
    assert "−18.3% left out, −4.45% priced" in fig.layout.title.text
    empty = effect.iloc[:0]
    assert "No validation row" in plots.fidelity.sampler_figure(empty).layout.title.text
    assert ff.sampler_sentence(pd.DataFrame(columns=effect.columns)).startswith("No validation row")
