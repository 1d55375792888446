"""notebooks/05_fidelity.ipynb with its defaults (the run test_all_notebooks makes, shared): the recorded headline
numbers against llmexplore.validate and data/kernel_efficiency.yaml read here, the accuracy pinned as in
tests/unit/test_validate.py, and the sentences the report shows stating the same numbers."""

import nbformat
import pytest
import yaml

from llmexplore import presets, validate
from llmexplore.findings import num

#: median |error| [%] over the representable validation rows, per runtime choice (engine-matched curve presets,
#: engine-neutral curves, the scalar pre-curve model), when this test was written (52 rows in data/validation/e2e.csv,
#: 50 representable); re-pin together with tests/unit/test_validate.py when the set or the model changes
PINNED = {"engine": 6.4, "default": 10.3, "scalar": 17.2}  # 5.6 and 10.0 before static FP8 GEMMs (issue 19)
WORST = "mla-moe|h100-sxm|fp8|DPA72|decode"  # LMSYS's DeepSeek-V3 EP72 decode on 9 x 8 H100 (-31%), modelled since
# moe_redundant; before it LMSYS's DPA16 H200 decode (-25% with DeepEP's low-latency kernels priced from measured
# kernel times, -21% with its source's DP dense FFN and LM head), before that ML.ENERGY's DeepSeek-V3.1 on B200
# (-23%) led, MI300X's category read -50% until
# aiter's MI300X FP8 GEMM table priced its GEMMs, and SGLang's DPA32 wide-EP prefill +207% before DeepEP, DeepGEMM
# and two-batch overlap were modelled


@pytest.fixture(scope="module")
def run(default_run):
    return default_run("05_fidelity.ipynb")


@pytest.fixture(scope="module")
def rec(run):
    return run[1]


def _said(path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n".join(o["data"]["text/markdown"] for c in nb.cells for o in c.get("outputs", [])
                     if "text/markdown" in o.get("data", {}))


def test_rows_and_the_median_error_per_runtime(rec, validation_ref):
    assert rec["rows"] == validation_ref["rows"] == len(validate.load()) and rec["modelled"] == validation_ref["modelled"]
    for choice, value in rec["median_abs_error_pct"].items():
        assert value == pytest.approx(validate.summary(validate.evaluate(choice))["median_abs_error_pct"])
    assert set(rec["median_abs_error_pct"]) == set(PINNED)
    for choice, pinned in PINNED.items():
        assert rec["median_abs_error_pct"][choice] == pytest.approx(pinned, abs=0.3), choice
    assert rec["median_abs_error_pct"]["engine"] < rec["median_abs_error_pct"]["scalar"] - 5
    assert rec["compared"] == {"runtime": "engine", "baseline": "scalar",
                               "runtime_median_abs_error_pct": rec["median_abs_error_pct"]["engine"],
                               "baseline_median_abs_error_pct": rec["median_abs_error_pct"]["scalar"]}
    assert all(0 < n <= rec["modelled"] for n in rec["within_band"].values())
    assert rec["within_band"]["engine"] > rec["within_band"]["scalar"]


def test_worst_category_rows_not_modelled_and_the_ranking(rec, validation_ref):
    assert rec["worst_category"]["category"] == WORST and rec["worst_category"]["median_error_pct"] < -20
    assert rec["category_abs_error_pct"][WORST] == pytest.approx(abs(rec["worst_category"]["median_error_pct"]))
    assert rec["not_modelled"] == validation_ref["left_out"]
    assert rec["not_modelled"] == ["lmsys-dsv3-gb200-decode-48r"]  # EP72 is modelled since moe_redundant
    r = validation_ref["ranking"]
    assert rec["ranking"] == {"pairs": len(r), "resolved": int(r.resolved.sum()), "agrees": int(r.agrees.sum())}
    assert rec["ranking"]["pairs"] >= 1


def test_kernel_curves_drawn_match_the_yaml(rec):
    doc = yaml.safe_load(presets.KERNEL_FILE.read_text())
    assert rec["kernel_set"] == "TensorRT-LLM kernels on H100 SXM 80GB"
    curves = doc["trtllm"]["h100-sxm"]
    for key, median in rec["curve_median_abs_error_pct"].items():
        assert median == pytest.approx(curves[key]["median_err_pct"], abs=0.1), key
    assert {"gemm.plain.bf16", "grouped_gemm.plain.bf16", "attention_decode.mla.bf16", "comm.all_reduce.p8"} <= set(
        rec["curve_median_abs_error_pct"])
    n = sum(len(g) for e, gpus in doc.items() if e != "rejected" for g in gpus.values())
    assert rec["curves"] == n
    assert rec["rejected_curves"] == sum(len(k) for g in doc["rejected"].values() for k in g.values())


def test_the_report_states_the_headline_numbers_in_words(run, rec):
    r = rec["ranking"]
    text = _said(run[0])
    for choice in ("engine", "scalar", "default"):
        assert f"{num(rec['median_abs_error_pct'][choice])}%" in text
    assert f"{rec['modelled']} of {rec['rows']} published measurements" in text and f"`{WORST}`" in text
    assert "host time" in text and "live chat traffic" in text
    assert f"the model tells {r['resolved']} of them apart and orders {r['agrees']} correctly" in text


def test_deepep_low_latency_curves_recorded_and_said(run, rec):
    """Section 3's DeepEP low-latency figure (H100: its own single-node rows and the 2/4/8-node rows): the recorded
    median |error| of each curve is the fit's own (tests/unit/models/step/test_deepep_ll.py pins the fits to their rows)."""
    from llmexplore import findings, sweeps
    from llmexplore.measured import deepep_ll_fit

    got = rec["deepep_ll_median_abs_error_pct"]
    assert len(got) == 8
    for key, median in got.items():
        _, op, ep = key.split(".")
        assert median == pytest.approx(deepep_ll_fit("h100-sxm", int(ep[2:]), op)["median_err_pct"]), key
        assert median < 6.0
    assert findings.fidelity.deepep_ll_sentence(sweeps.fidelity.deepep_ll_curves("h100-sxm")) in _said(run[0])


def test_eight_figures(run):
    """The figures are there (seven, and §6's serving figure since issue 19) (how long the notebook takes is not asserted: no wall-clock assertion belongs in make
    test; the stall guard of tests/notebooks/conftest.py still fails a cell that hangs)."""
    nb = nbformat.read(run[0], as_version=4)
    figures = [o for c in nb.cells for o in c.get("outputs", []) if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) == 8


def test_the_sampler_effect_is_recorded_and_said(run, rec):
    """The 28 ML.ENERGY rows (vLLM 0.11.1, top-p sampling) priced with and without the sort-based sampler: their
    median error at batch >= 64 is -18.3% without it and -4.5% with it (tests/unit/models/step/test_sampler.py pins why)."""
    from llmexplore import findings, sweeps

    effect = sweeps.fidelity.sampler_effect("engine")
    got = rec["sampler_effect"]
    assert got == pytest.approx(findings.fidelity.sampler_headline(effect))
    assert got["rows"] == len(effect) == 28 and (got["high_rows"], got["low_rows"]) == (11, 17)
    assert got["high_left_out_pct"] == pytest.approx(-18.3, abs=0.3)
    assert got["high_priced_pct"] == pytest.approx(-4.5, abs=0.3)
    assert got["low_left_out_pct"] == pytest.approx(-4.6, abs=0.3) and abs(got["low_priced_pct"]) < 1.5
    assert findings.fidelity.sampler_sentence(effect) in _said(run[0])


def test_serving_end_to_end_section_records_what_validate_e2e_prints(rec, run):
    """Section 6 (issue 19 §2): the simulator against aiconfigurator's measured closed-loop benchmarks; the record
    is llmexplore.sweeps.fidelity.e2e's summary, and the sentence states its numbers."""
    s = rec["serving_e2e"]
    assert s["rows"] == 2873 and s["simulated"] == 1876
    assert s["tpot_mape_pct"] == pytest.approx(23.4, abs=0.5) and set(s["by_engine"]) == {"trtllm", "vllm", "sglang"}
    said = _said(run[0])
    assert f"MAPE {s['tpot_mape_pct']:.1f}%" in said and "Mean TTFT is not resolved" in said
    assert f"off by {s['tpot_mape_pct']:.1f}% on average" in said  # and the Summary repeats it
