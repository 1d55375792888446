"""The command line: presets and layouts output, one-line usage errors, report argument parsing.

Commands run in-process through ``cli.main(argv)``; one test runs the installed ``llmexplore`` script.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from llmexplore import cli, report, sweeps
from llmexplore.errors import SpecError

LAYOUT_ARGS = ["layouts", "--model", "deepseek-v3", "--gpu", "h200", "--ranks", "8", "--batch", "64",
               "--context", "8192", "--weight-dtype", "fp8"]
INFEASIBLE_ARGS = ["layouts", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--ranks", "1", "--batch", "64",
                   "--context", "8192"]


def _strict_json(text):
    """json.loads that rejects NaN/Infinity, as a strict consumer (JavaScript's JSON.parse) would."""
    def reject(token):
        raise ValueError(f"non-standard JSON constant {token}")

    return json.loads(text, parse_constant=reject)


def run(capsys, argv):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, argv):
    code, out, err = run(capsys, argv)
    assert code == 0, err
    return _strict_json(out)


# ---- presets -----------------------------------------------------------------------------------------------
def test_presets_models_json_schema_and_published_values(capsys):
    models = {m["name"]: m for m in run_json(capsys, ["presets", "models", "--json"])}
    assert {"llama-3-70b", "deepseek-v3"} <= set(models)
    for m in models.values():
        for key in ("name", "attention", "layers", "hidden", "moe", "params_total", "params_active",
                    "kv_bytes_per_token_bf16", "kv_bytes_per_token_fp8", "sources"):
            assert key in m, (m["name"], key)
        assert type(m["params_total"]) is int and type(m["params_active"]) is int
        assert isinstance(m["kv_bytes_per_token_bf16"], (int, float))
        assert isinstance(m["sources"], dict) and m["sources"]
        assert m["params_active"] <= m["params_total"]
    llama = models["llama-3-70b"]
    assert llama["params_total"] == 70553706496
    assert llama["kv_bytes_per_token_bf16"] == 80 * 8 * 128 * 2 * 2 == 327680  # L h_kv d (K,V) B
    assert llama["kv_bytes_per_token_fp8"] == 327680 / 2
    ds = models["deepseek-v3"]
    assert ds["kv_bytes_per_token_bf16"] == 61 * (512 + 64) * 2 == 70272  # L (r_kv + d_r) B
    assert ds["kv_bytes_per_token_fp8"] == 35136
    assert ds["moe"] is True and ds["attention"] == "mla"


@pytest.mark.parametrize("kind, names", [
    ("hardware", {"h100-sxm", "h200", "b200", "gb200", "mi300x"}),
    ("links", {"nvlink4", "nvlink5", "ib-ndr400", "roce-400g", "tcp-100g", "pcie4-x16", "pcie5-x16"}),
    ("runtime", {"default"}),
])
def test_presets_json_names_and_sources(capsys, kind, names):
    records = run_json(capsys, ["presets", kind, "--json"])
    assert isinstance(records, list)
    assert names <= {r["name"] for r in records}
    assert all(isinstance(r["sources"], dict) for r in records)


def test_presets_hardware_json_has_fields_and_derived_ridge(capsys):
    h100 = {r["name"]: r for r in run_json(capsys, ["presets", "hardware", "--json"])}["h100-sxm"]
    assert h100["hbm_GiB"] == 79.65 and h100["scale_up_link"] == "nvlink4"
    assert h100["ridge_flops_per_byte_bf16"] == pytest.approx(989.4 / 3.35)


@pytest.mark.parametrize("kind, expected", [
    ("models", ["llama-3-70b", "70.55B", "327,680", "70,272", "35,136"]),
    ("hardware", ["h100-sxm", "mi300x", "nvlink4", "ib-ndr400"]),
    ("links", ["nvlink4", "tcp-100g", "scale-out"]),
    ("runtime", ["default", "eta_mem"]),
])
def test_presets_human_tables(capsys, kind, expected):
    code, out, err = run(capsys, ["presets", kind])
    assert code == 0 and err == ""
    for text in expected:
        assert text in out
    lines = out.rstrip("\n").splitlines()
    assert lines[0].startswith("name")
    assert len(lines) == 1 + len(run_json(capsys, ["presets", kind, "--json"]))


# ---- layouts -----------------------------------------------------------------------------------------------
def test_layouts_json_schema_and_consistency(capsys):
    doc = run_json(capsys, [*LAYOUT_ARGS, "--json"])
    assert set(doc) == {"layouts", "best", "best_agreement", "band", "boundaries", "would_fit", "not_resolved",
                        "inputs"}
    assert doc["would_fit"] == []  # something fits
    assert doc["not_resolved"] is None  # every kernel of this deployment has a fitted curve
    rows = doc["layouts"]
    assert [r["layout"] for r in rows] == ["TP", "CP", "DPA", "DOP"]
    for r in rows:
        for key in ("layout", "feasible", "weights_GB", "kv_GB", "activations_GB", "total_GB", "step_ms",
                    "attention_ms", "comm_ms", "reason"):
            assert key in r, key
        assert isinstance(r["feasible"], bool)
        parts = r["weights_GB"] + r["kv_GB"] + r["activations_GB"] + r["reserve_GB"]
        assert r["total_GB"] == pytest.approx(parts, rel=1e-9)
        assert r["feasible"] == (r["total_GB"] <= r["usable_GB"])
        assert r["attention_ms"] <= r["step_ms"] and r["comm_ms"] <= r["step_ms"]
    feasible = [r for r in rows if r["feasible"]]
    assert feasible
    assert doc["best"] == min(feasible, key=lambda r: r["step_ms"])["layout"]
    assert doc["inputs"] == {
        "model": "deepseek-v3", "gpu": "h200", "ranks": 8, "batch": 64, "context": 8192,
        "weight_dtype": "fp8", "kv_dtype": "bf16", "act_dtype": "bf16", "q_tokens": 1, "context_cv": 0.0,
        "sampler": "fused", "runtime": "default", "scale_up_link": "nvlink4", "scale_out_link": "ib-ndr400",
        "pp": 1, "speculative": None, "accepted_length": None,
    }


def test_layouts_human_table_and_best_line(capsys):
    code, out, err = run(capsys, LAYOUT_ARGS)
    assert code == 0 and err == ""
    doc = run_json(capsys, [*LAYOUT_ARGS, "--json"])
    best = next(r for r in doc["layouts"] if r["layout"] == doc["best"])
    lines = out.rstrip("\n").splitlines()
    expected = f"best: {doc['best']} ({best['step_ms']:.1f} ms/step, {best['tokens_per_s']:.0f} tok/s)"
    assert lines[len(doc["layouts"]) + 3] == expected  # right after the table
    # --band (on by default): the best layout's step time over the kernel-parameter draws comes last
    assert lines[-1].startswith(f"{doc['best']} step {best['step_ms']:.2f} ms [")
    for lay in ("TP", "CP", "DPA", "DOP"):
        assert any(line.startswith(lay + " ") for line in lines)
    assert "DeepSeek-V3" in lines[0] and "8x" in lines[0]


def test_layouts_infeasible_is_a_result_not_an_error(capsys):
    doc = run_json(capsys, [*INFEASIBLE_ARGS, "--json"])
    assert doc["best"] is None
    assert all(r["feasible"] is False and "usable" in r["reason"] for r in doc["layouts"])
    code, out, err = run(capsys, INFEASIBLE_ARGS)
    assert code == 0 and err == ""
    assert out.rstrip().splitlines()[-1].startswith("best: none fits (")


def test_layouts_says_what_would_fit(capsys):
    # DeepSeek-V3 with BF16 weights does not fit on 8 H200 at any batch; FP8 weights or 16 ranks would
    args = ["layouts", "--model", "deepseek-v3", "--gpu", "h200", "--ranks", "8", "--batch", "64", "--context",
            "8192", "--weight-dtype", "bf16"]
    doc = run_json(capsys, [*args, "--json"])
    assert doc["best"] is None
    would = {w["change"]: w for w in doc["would_fit"]}
    assert would["weight_dtype"]["value"] == "fp8" and would["weight_dtype"]["text"] == "FP8 weights"
    assert would["ranks"]["value"] == 16 and would["ranks"]["layouts"]
    assert "batch" not in would  # the BF16 weights alone exceed the memory: no batch fits
    fp8 = run_json(capsys, [*args[:-1], "fp8", "--json"])  # and the model agrees with each suggestion
    assert fp8["best"] is not None and set(would["weight_dtype"]["layouts"]) == {
        r["layout"] for r in fp8["layouts"] if r["feasible"]}
    code, out, _ = run(capsys, args)
    last = out.rstrip().splitlines()[-1]
    assert code == 0 and last.startswith("best: none fits (closest: ")
    assert "; would fit: FP8 weights (TP, CP, DPA, DOP), or 16 ranks (" in last


def test_layouts_would_fit_a_smaller_batch_or_context(capsys):
    doc = run_json(capsys, ["layouts", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--ranks", "8", "--batch",
                            "4096", "--context", "8192", "--json"])
    would = {w["change"]: w for w in doc["would_fit"]}
    b, s = would["batch"]["value"], would["context"]["value"]
    assert 1 <= b < 4096 and 1 <= s < 8192
    for lay in would["batch"]["layouts"]:
        fits = run_json(capsys, ["layouts", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--ranks", "8",
                                 "--batch", str(b), "--context", "8192", "--json"])
        assert next(r for r in fits["layouts"] if r["layout"] == lay)["feasible"]
        over = run_json(capsys, ["layouts", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--ranks", "8",
                                 "--batch", str(b + 1), "--context", "8192", "--json"])
        assert over["best"] is None


# ---- every model command takes the same dtype and runtime options, and honours them -------------------------
_DTYPE_COMMANDS = {
    "layouts": ["layouts", "--model", "deepseek-v3", "--gpu", "h200", "--ranks", "8", "--batch", "8",
                "--context", "4096"],
    "pd": ["pd", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--prompt", "1024", "--output", "64"],
    "moe": ["moe", "--model", "deepseek-v3", "--gpu", "h200", "--gpus", "16", "--batch-tokens", "64"],
    "prefill": ["prefill", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--ranks", "8", "--prompt", "4096",
                "--batch", "4"],
}


@pytest.mark.parametrize("command", list(_DTYPE_COMMANDS))
def test_every_model_command_honours_dtype_and_runtime_options(capsys, command):
    base = _DTYPE_COMMANDS[command]
    ref = run_json(capsys, [*base, "--json"])
    inputs = ref["inputs"]
    assert inputs["kv_dtype"] == "bf16" and inputs["runtime"] == "default"
    released = "fp8" if "deepseek-v3" in base else "bf16"
    assert inputs["weight_dtype"] == released  # default: the model's released dtype
    for flag, value, key in (("--weight-dtype", "fp8" if released == "bf16" else "bf16", "weight_dtype"),
                             ("--kv-dtype", "fp8", "kv_dtype"), ("--runtime", "uncalibrated", "runtime")):
        doc = run_json(capsys, [*base, flag, value, "--json"])
        assert doc["inputs"][key] == value
        assert _strip_inputs(doc) != _strip_inputs(ref), (command, flag)  # the option changed the result
    for flag, bad in (("--weight-dtype", "int4"), ("--kv-dtype", "fp6"), ("--runtime", "fast")):
        code, out, err = run(capsys, [*base, flag, bad])
        assert code == 2 and out == "" and err.count("\n") == 1 and flag in err and bad in err


def _strip_inputs(doc):
    return json.dumps({k: v for k, v in doc.items() if k != "inputs"}, sort_keys=True)


def test_layouts_options_reach_the_deployment(capsys):
    args = [*LAYOUT_ARGS[:-2], "--kv-dtype", "fp8", "--q-tokens", "2", "--context-cv", "0.3",
            "--scale-out-link", "roce-400g", "--json"]
    inputs = run_json(capsys, args)["inputs"]
    assert inputs["weight_dtype"] == "fp8" and inputs["kv_dtype"] == "fp8"  # DeepSeek-V3 is released in FP8
    assert inputs["q_tokens"] == 2 and inputs["context_cv"] == 0.3 and inputs["scale_out_link"] == "roce-400g"


def test_layouts_json_turns_non_finite_numbers_into_null_with_a_reason(capsys, monkeypatch):
    real = sweeps.layouts.layout_table

    def with_inf(dep, batch, context, **kw):
        t = real(dep, batch, context, **kw)
        t.loc[0, "step_ms"] = math.inf
        t.loc[0, "tokens_per_s"] = math.nan
        return t

    monkeypatch.setattr(sweeps.layouts, "layout_table", with_inf)
    doc = run_json(capsys, [*LAYOUT_ARGS, "--json"])  # strict parse: no NaN/Infinity tokens
    tp = doc["layouts"][0]
    assert tp["step_ms"] is None and tp["tokens_per_s"] is None
    assert "step_ms is inf" in tp["reason"] and "tokens_per_s is nan" in tp["reason"]
    assert doc["best"] != "TP"


# ---- bad input: exit 2, exactly one stderr line naming field and value -------------------------------------
_BASE = ["layouts", "--model", "llama-3-70b", "--gpu", "h200", "--ranks", "8", "--batch", "4", "--context",
         "1024"]


def _with(option, value):
    argv = list(_BASE)
    if option in argv:
        argv[argv.index(option) + 1] = value
    else:
        argv += [option, value]
    return argv


BAD_INPUT = {
    "unknown model": (_with("--model", "llama-9"), ["model", "llama-9", "known:", "llama-3-70b"]),
    "unknown gpu": (_with("--gpu", "h900"), ["gpu", "h900", "known:", "h100-sxm"]),
    "unknown runtime": (_with("--runtime", "fast"), ["runtime", "fast", "known:", "default"]),
    "unknown link": (_with("--scale-up-link", "nvlink9"), ["link", "nvlink9", "known:", "nvlink4"]),
    "batch zero": (_with("--batch", "0"), ["--batch must be an integer in [1, 16,777,216], got 0"]),
    "batch negative": (_with("--batch", "-4"), ["--batch", "-4", "[1, 16,777,216]"]),
    "batch non-integer": (_with("--batch", "2.5"), ["--batch", "2.5", "integer"]),
    "batch word": (_with("--batch", "lots"), ["--batch", "lots", "integer"]),
    "context zero": (_with("--context", "0"), ["--context", "0", "[1, 1,073,741,824]"]),
    "context non-integer": (_with("--context", "1e3"), ["--context", "1e3", "integer"]),
    "ranks zero": (_with("--ranks", "0"), ["--ranks must be an integer in [1, 1024], got 0"]),
    "ranks do not divide heads": (_with("--ranks", "6"), ["ranks", "6", "must divide", "64"]),
    "ranks too many": (_with("--ranks", "2048"), ["ranks", "2048", "1024"]),
    "ranks 12 on llama-3-8b": (["layouts", "--model", "llama-3-8b", "--gpu", "h200", "--ranks", "12",
                                      "--batch", "4", "--context", "1024"], ["ranks", "12", "must divide"]),
    "q-tokens zero": (_with("--q-tokens", "0"), ["--q-tokens", "0", "[1, 1,048,576]"]),
    "context-cv negative": (_with("--context-cv", "-0.1"), ["--context-cv", "-0.1", "[0, 100]"]),
    "context-cv nan": (_with("--context-cv", "nan"), ["--context-cv", "nan", "finite"]),
    "bad weight dtype": (_with("--weight-dtype", "int4"), ["--weight-dtype", "int4", "bf16", "fp8"]),
    "bad kv dtype": (_with("--kv-dtype", "fp6"), ["--kv-dtype", "fp6", "bf16", "fp8", "fp4"]),
    "fp4 weights on a GPU without FP4": (_with("--weight-dtype", "fp4"), [
        "--weight-dtype must be a dtype h200 supports, got 'fp4': h200 has no FP4 tensor cores; use bf16 or fp8"]),
    "unknown option": (_BASE + ["--tp", "8"], ["--tp"]),
    "missing required option": (_BASE[:3], ["required", "--gpu", "--ranks", "--batch", "--context"]),
    "missing value": (_BASE + ["--q-tokens"], ["--q-tokens", "expected one argument"]),
    "negative infinity": (_with("--context-cv", "-inf"), ["--context-cv must be a finite number in [0, 100], "
                                                          "got -inf"]),
    "negative exponent": (_with("--batch", "-1e5"), ["--batch must be an integer in [1, 16,777,216], got -1e5"]),
    "value that looks like an option": (_with("--model", "-x"), ["--model: no models preset '-x'"]),
    "flag given twice": (_BASE + ["--batch", "8"], ["--batch given twice (4 and 8); give it once"]),
    "empty value": (_with("--gpu", ""), ["--gpu must be a hardware preset name", "got ''"]),
    "huge integer": (_with("--ranks", "9" * 400), ["--ranks must be an integer in [1, 1024], got 9999"]),
    "unicode digits": (_with("--batch", "\u0664"), ["--batch must be an integer", "\u0664"]),
    "ranks divide, named by flag": (_with("--ranks", "6"), ["--ranks (6) must divide the query heads"]),
    "unknown scale-out link": (_with("--scale-out-link", "x9"), ["--scale-out-link: no links preset 'x9'"]),
    "unknown runtime said as a runtime preset": (_with("--runtime", "x9"), ["--runtime: no runtime preset 'x9'"]),
    "unknown subcommand": (["frobnicate"], ["frobnicate", "report", "presets", "layouts"]),
    "no subcommand": ([], ["required", "COMMAND"]),
    "unknown preset kind": (["presets", "gpus"], ["gpus", "models", "hardware", "links", "runtime"]),
    "unknown option on presets": (["presets", "models", "--csv"], ["--csv"]),
    "report parameter name": (["report", "-p", "2x", "1"], ["-p", "2x", "identifier"]),
    "report parameter twice": (["report", "-p", "BATCH", "1", "-p", "BATCH", "2"], ["BATCH", "twice"]),
    "report parameter without value": (["report", "-p", "BATCH"], ["-p", "expected 2 arguments"]),
    "report timeout": (["report", "--timeout", "0"], ["--timeout", "0", "integer in [1, 86,400]"]),
}


@pytest.mark.parametrize("argv, needles", list(BAD_INPUT.values()), ids=list(BAD_INPUT))
def test_bad_input_is_one_line_on_stderr_and_exit_2(capsys, monkeypatch, argv, needles):
    monkeypatch.setattr(report, "build_reports", lambda **kw: pytest.fail("must not run"))
    code, out, err = run(capsys, argv)
    assert code == 2
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("llmexplore: error: ")
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)


def test_help_and_version_exit_0(capsys):
    assert cli.main(["--help"]) == 0
    assert "layouts" in capsys.readouterr().out
    assert cli.main(["layouts", "--help"]) == 0
    assert "--context-cv" in capsys.readouterr().out
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("llmexplore ")


# ---- report ------------------------------------------------------------------------------------------------
@pytest.fixture
def fake_build(monkeypatch, tmp_path):
    calls = []

    def build_reports(**kwargs):
        calls.append(kwargs)
        out = Path(kwargs["out_dir"])
        return [out / "a.html", out / "b.html", out / "index.html"]

    monkeypatch.setattr(report, "build_reports", build_reports)
    return calls


def test_report_parses_parameters_and_out(capsys, fake_build, tmp_path):
    out_dir = str(tmp_path / "r")
    code, out, err = run(capsys, ["report", "--out", out_dir, "-p", "BATCH", "8", "-p", "CV", "0.25",
                                  "--parameter", "FIT_ONLY", "true", "-p", "MODEL", "deepseek-v3",
                                  "-p", "OFF", "False", "-p", "BIG", "1e3"])
    assert code == 0 and err == ""
    (kw,) = fake_build
    assert kw["out_dir"] == out_dir
    params = kw["parameters"]
    assert params == {"BATCH": 8, "CV": 0.25, "FIT_ONLY": True, "MODEL": "deepseek-v3", "OFF": False,
                      "BIG": 1000.0}
    assert type(params["BATCH"]) is int and type(params["CV"]) is float and params["FIT_ONLY"] is True
    assert type(params["BIG"]) is float
    assert out.splitlines() == [str(Path(out_dir) / n) for n in ("a.html", "b.html", "index.html")]


def test_report_defaults(capsys, fake_build):
    code, out, _ = run(capsys, ["report"])
    assert code == 0
    (kw,) = fake_build
    assert kw["out_dir"] == "reports" and kw["parameters"] == {}
    assert kw["notebooks"] is None and kw["progress"] is True and "timeout_s" not in kw
    assert out.splitlines()[-1].endswith("index.html")


def test_report_notebooks_timeout_quiet(capsys, fake_build):
    assert cli.main(["report", "--notebook", "01_x.ipynb", "--notebook", "02_y", "--timeout", "60",
                     "--quiet"]) == 0
    (kw,) = fake_build
    assert kw["notebooks"] == ["01_x.ipynb", "02_y"] and kw["timeout_s"] == 60.0 and kw["progress"] is False


def test_report_unknown_parameter_is_bad_input(capsys, monkeypatch):
    def build_reports(**kwargs):
        raise SpecError("parameter(s) ['BATCHH'] are not defined in the parameters cell of any of [...]")

    monkeypatch.setattr(report, "build_reports", build_reports)
    code, out, err = run(capsys, ["report", "-p", "BATCHH", "8"])
    assert code == 2 and out == "" and err.count("\n") == 1 and "BATCHH" in err


def test_report_failure_exits_1_without_traceback(capsys, monkeypatch):
    def build_reports(**kwargs):
        raise report.ReportError("1 of 2 notebook(s) failed:\n  x.ipynb: cell 3: ZeroDivisionError")

    monkeypatch.setattr(report, "build_reports", build_reports)
    code, out, err = run(capsys, ["report"])
    assert code == 1 and out == ""
    assert err.startswith("llmexplore: error: ") and "x.ipynb" in err and "Traceback" not in err


# ---- the installed entry point ----------------------------------------------------------------------------
@pytest.mark.slow  # a subprocess / Dask run: the fast tier (-m 'not slow') leaves it out
def test_installed_entry_point_and_python_m():
    script = Path(sys.executable).with_name("llmexplore")
    assert script.exists(), "pip install -e . should install the llmexplore console script"
    ok = subprocess.run([str(script), *LAYOUT_ARGS, "--json"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert _strict_json(ok.stdout)["best"] is not None
    bad = subprocess.run([sys.executable, "-m", "llmexplore", *_with("--batch", "0")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == "llmexplore: error: --batch must be an integer in [1, 16,777,216], got 0\n"


# ---- the sizes and values the fuzz found: bounded, one line, the flag the user typed -------------------
_MOE = ["moe", "--model", "deepseek-v3", "--gpu", "h200", "--gpus", "16", "--batch-tokens", "64"]
_PD = ["pd", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--prompt", "1024", "--output", "64"]
FOUND_BY_FUZZ = {
    "redundant experts 1e7 (used to hang)": ([*_MOE, "--redundant-experts", "10000000"],
                                             "--redundant-experts must be an integer in [0, 4096], got 10000000"),
    "redundant experts 1e12 (used to allocate terabytes)": ([*_MOE, "--redundant-experts", "1e12"],
                                                            "--redundant-experts must be an integer in [0, 4096], "
                                                            "got 1e12"),
    "1e12-token lognormal prompts (used to allocate 7 TiB)": (
        [*_PD[:5], "--prompt", "1000000000000", "--output", "64", "--prompt-sigma", "3"],
        "--prompt must be an integer in [1, 1,048,576], got 1000000000000"),
    "rate -inf (used to be 'expected one argument')": ([*_PD, "--rate", "-inf"],
                                                        "--rate must be a finite number in (0, 1e9], got -inf"),
    "prefill-tp 3 (used to say 'prefill_tp: ranks')": ([*_PD, "--prefill-tp", "3"],
                                                       "--prefill-tp (3) must divide the query heads of "
                                                       "llama-3-70b (64)"),
    "an abbreviation is not expanded (--tp is not --tpot-ms)": ([*_PD, "--tp", "8"], "unrecognized arguments: --tp 8"),
    "moe --ep does not divide the experts": ([*_MOE[:5], "--gpus", "512", "--batch-tokens", "64", "--ep", "512",
                                              "--redundant-experts", "256"], "--ep must divide the routed experts"),
    "skew beyond E/k": ([*_MOE, "--skew", "40"], "--skew (max/mean expert load) must be <= E/k = 256/8 = 32"),
}


@pytest.mark.parametrize("argv, needle", list(FOUND_BY_FUZZ.values()), ids=list(FOUND_BY_FUZZ))
def test_found_by_fuzz_one_line_naming_the_flag(capsys, argv, needle):
    code, out, err = run(capsys, argv)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert needle in err, (needle, err)


def test_output_dir_rule_for_report_out(tmp_path):
    from llmexplore.cli._framework import output_dir

    rule = output_dir()
    a_file = tmp_path / "a.html"
    a_file.write_text("x")
    assert rule.convert(str(tmp_path)) == str(tmp_path) and rule.convert(str(tmp_path / "new" / "dir"))
    for bad in (str(a_file), "", "x" * 5000, "a\x00b"):
        with pytest.raises(ValueError):
            rule.convert(bad)
    assert rule.rule == "a directory (existing or to create) whose names are at most 255 bytes each, not a file"
    with pytest.raises(ValueError):
        rule.convert("x" * 256)  # one name the file system refuses (issue 20 §2: --out of 5,000 characters)


def test_layouts_with_a_pipeline_or_speculation_compare_the_time_per_output_token(capsys):
    """--pp and --speculative (issue 21): the rows say how they decode, the best layout is the one with the least
    time per output token, and the two together are refused in one line naming both flags."""
    doc = run_json(capsys, [*LAYOUT_ARGS, "--speculative", "deepseek-mtp-1", "--accepted-length", "1.7", "--no-band",
                            "--json"])
    rows = doc["layouts"]
    assert {r["decoding"] for r in rows} == {"deepseek-mtp-1 (1.70 tokens per step)"}
    assert all(r["step_ms"] == pytest.approx(1.7 * r["tpot_ms"], rel=1e-9) for r in rows)
    assert doc["best"] == min((r for r in rows if r["feasible"]), key=lambda r: r["tpot_ms"])["layout"]
    assert (doc["inputs"]["speculative"], doc["inputs"]["accepted_length"]) == ("deepseek-mtp-1", 1.7)
    pp = run_json(capsys, [*LAYOUT_ARGS, "--pp", "2", "--no-band", "--json"])
    assert {r["decoding"] for r in pp["layouts"]} == {"PP2"} and pp["inputs"]["pp"] == 2
    assert all(r["hops_ms"] > 0 for r in pp["layouts"])
    code, out, err = run(capsys, [*LAYOUT_ARGS, "--pp", "2", "--speculative", "ngram-5"])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--pp (2) must be 1 when decoding speculatively with 'ngram-5'" in err


def test_pd_with_pipelined_prefill_instances(capsys):
    """pd --prefill-pp (issue 21): the prompt's latency and the pipeline's service time both reported, the pools
    count each prefill instance's stages, and the JSON says the stages."""
    doc = run_json(capsys, [*_PD, "--prefill-pp", "2", "--no-band", "--json"])
    assert doc["inputs"]["prefill_pp"] == 2
    assert doc["prefill_service_ms"] < 0.55 * doc["prefill_ms"]  # a stage's share: half the layers
    d = doc["disaggregated"]
    assert d["gpus"] == d["prefill_instances"] * 16 + d["decode_instances"] * 8
    code, out, _ = run(capsys, [*_PD, "--prefill-pp", "2", "--no-band"])
    assert code == 0 and "TP8 x PP2, a new prompt every" in out


def test_moe_with_a_pipeline_or_speculation_compares_the_time_per_output_token(capsys):
    """moe --pp / --speculative / --accepted-length (issue 21): both rows (the split asked for and pure TP) decode the
    same way and say so, the verify pass's time per output token is the cycle over tau, and a pipeline of P stages
    of the N GPUs has P x N GPUs; bad combinations are one line naming the flags (the step engine's message)."""
    base = ["moe", "--model", "deepseek-v3", "--gpu", "h200", "--gpus", "16", "--batch-tokens", "256", "--ep", "8",
            "--skew", "2.6"]
    plain = run_json(capsys, [*base, "--json"])
    assert plain["decoding"] == "" and plain["tpot_ms"] == plain["step_ms"] and "speedup" not in plain
    assert (plain["inputs"]["pp"], plain["inputs"]["speculative"], plain["inputs"]["accepted_length"]) == (1, None,
                                                                                                          None)
    doc = run_json(capsys, [*base, "--speculative", "deepseek-mtp-1", "--accepted-length", "1.7", "--json"])
    for row in (doc, doc["pure_tp"]):
        assert row["decoding"] == "deepseek-mtp-1 (1.70 tokens per step)"
        assert row["step_ms"] == pytest.approx(1.7 * row["tpot_ms"], rel=1e-12) and row["draft_ms"] > 0
        assert row["speedup"] == pytest.approx(row["plain_ms"] / row["tpot_ms"], rel=1e-12)
    assert doc["plain_ms"] == pytest.approx(plain["step_ms"], rel=1e-12)
    assert (doc["inputs"]["speculative"], doc["inputs"]["accepted_length"]) == ("deepseek-mtp-1", 1.7)
    pp = run_json(capsys, [*base, "--pp", "2", "--json"])
    assert pp["decoding"] == "PP2" and pp["gpus"] == 32 and pp["hops_ms"] > 0 and pp["inputs"]["pp"] == 2
    assert pp["memory_GB"] < plain["memory_GB"]
    code, out, err = run(capsys, [*base, "--pp", "2"])
    assert code == 0 and "decoding PP2 on 32 GPUs" in out and "ms/token" in out
    for extra, needle in [(["--pp", "2", "--speculative", "ngram-5"],
                           "--pp (2) must be 1 when decoding speculatively with 'ngram-5'"),
                          (["--pp", "62"], "--pp (62) must be at most the layers of deepseek-v3 (61)"),
                          (["--accepted-length", "1.5"], "--accepted-length must come with --speculative"),
                          (["--speculative", "deepseek-mtp-1", "--accepted-length", "3"],
                           "--accepted-length must be a finite number in [1, 2]")]:
        code, out, err = run(capsys, [*base, *extra])
        assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err
    code, out, err = run(capsys, ["moe", "--model", "mixtral-8x7b", "--gpu", "h200", "--gpus", "8", "--batch-tokens",
                                  "64", "--speculative", "deepseek-mtp-1"])
    assert code == 2 and "--speculative 'deepseek-mtp-1' drafts with an MTP module, and mixtral-8x7b has none" in err

