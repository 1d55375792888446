"""Calibration: CSV validation, the fit of the shipped AIConfigurator set, and the shipped default in sync."""

from pathlib import Path

import pytest

from llmexplore import cli, presets
from llmexplore.errors import SpecError
from llmexplore import calibrate

DATA = Path(__file__).resolve().parents[2] / "data" / "calibration" / "aic-llama31-70b-tp8-h100.csv"


@pytest.fixture(scope="module")
def points():
    return calibrate.load_points(DATA)


@pytest.fixture(scope="module")
def result(points):
    return calibrate.fit(points, name="default")


def test_shipped_set_has_the_published_points(points):
    # AIConfigurator 0.12.0, Meta-Llama-3.1-70B BF16 TP8 H100, ISL 4096 / OSL 256
    dec = {p.batch: p.measured for p in points if p.kind == "decode"}
    assert dec == {1: 9.986, 8: 10.454, 32: 14.596, 128: 23.55}
    assert [p.measured for p in points if p.kind == "prefill"] == [171.62]


def test_fit_reproduces_measurements(result):
    rows = {r["point"]: r for r in result["table"]}
    for r in result["table"]:
        assert abs(r["error_pct"]) < 8.0, r  # one roofline shape cannot follow B=8->32 exactly (-7.4%)
    assert result["rms_error_pct"] < 5.0
    assert abs(rows["prefill S=4096 P=0"]["error_pct"]) < 1.0
    # memory rows are predictions, not fits: weights 16.43 GiB and KV 0.166 GiB/sequence (AIConfigurator)
    assert rows["weights/GPU"]["predicted"] == pytest.approx(16.43, abs=0.005)
    assert rows["KV/seq s=4352"]["predicted"] == pytest.approx(0.166, abs=0.0005)
    # the fit improves on the uncalibrated start
    before = sum((r["predicted_before"] / r["measured"] - 1) ** 2 for r in result["table"] if r["fitted"])
    after = sum((r["predicted"] / r["measured"] - 1) ** 2 for r in result["table"] if r["fitted"])
    assert after < before


def test_fitted_parameters_are_physical(result):
    rt = result["runtime"]
    assert 0.6 < rt.eta_mem < 0.95 and 0.4 < rt.eta_compute < 0.9 and 0.3 < rt.eta_attn_mem < 0.95
    assert 0 < rt.kernel_overhead_us < 10 and 0 < rt.step_overhead_ms < 3


def test_shipped_scalar_is_this_fit(result):
    """The ``scalar`` preset (the default before the kernel curves) is the five-parameter fit of the set."""
    shipped = presets.runtime("scalar")
    for f in calibrate.FIT_FIELDS:
        assert getattr(shipped, f) == pytest.approx(getattr(result["runtime"], f), rel=2e-3), f


@pytest.mark.parametrize("name", ["default", "trtllm"])
def test_shipped_curve_runtimes_are_the_overhead_fit(points, name):
    """With kernel curves, only the overheads are fitted to the (in-sample) end-to-end set (issue 9 §2); the
    shipped presets hold that fit."""
    shipped = presets.runtime(name)
    assert calibrate.fit_fields(shipped) == calibrate.OVERHEAD_FIELDS
    res = calibrate.fit(points, start=name, name=name)
    for f in calibrate.OVERHEAD_FIELDS:
        assert getattr(shipped, f) == pytest.approx(getattr(res["runtime"], f), rel=5e-3, abs=2e-4), f
    for f in ("eta_mem", "eta_compute"):  # the scalars stay untouched
        assert getattr(res["runtime"], f) == getattr(shipped, f)
    assert res["rms_error_pct"] < 12.0  # in-sample: the curves are fitted to kernels only


def test_overlay_round_trip(tmp_path, result, monkeypatch):
    path = tmp_path / "cal.yaml"
    rt = result["runtime"].replace(name="my-cal")
    path.write_text(calibrate.overlay_yaml(rt, str(DATA)))
    monkeypatch.setenv("LLMEXPLORE_PRESETS", str(path))
    presets.clear_cache()
    try:
        loaded = presets.runtime("my-cal")
        assert loaded.unsourced_fields() == []
        for f in calibrate.FIT_FIELDS:
            assert getattr(loaded, f) == pytest.approx(getattr(rt, f), rel=1e-5)
    finally:
        monkeypatch.delenv("LLMEXPLORE_PRESETS")
        presets.clear_cache()


@pytest.mark.parametrize("row, message", [
    ("nonsense,llama-3-70b,h100-sxm,8,bf16,bf16,1,4096,,,10,ms,x", "kind must be one of"),
    ("decode,llama-3-70b,h100-sxm,8,bf16,bf16,1,4096,,,10,s,x", "unit for kind 'decode' must be 'ms'"),
    ("decode,llama-3-70b,h100-sxm,8,bf16,bf16,1,,,,10,ms,x", "column 'context' is required"),
    ("decode,llama-3-70b,h100-sxm,8,bf16,bf16,1,4096,,,-3,ms,x",
     r"bad.csv:2: measured must be a finite number in \[0.001, 1e7\] \[ms\], got -3.0"),
    ("decode,llama-3-70b,h100-sxm,8,bf16,bf16,1,4096,,,1e300,ms,x",
     r"bad.csv:2: measured must be a finite number in \[0.001, 1e7\] \[ms\], got 1e\+300"),
    ("decode,llama-3-70b,h100-sxm,8,bf16,bf16,1,4096,,,1e-320,ms,x",
     r"bad.csv:2: measured must be a finite number in \[0.001, 1e7\] \[ms\], got 1e-320"),
    ("weights,llama-3-70b,h100-sxm,8,bf16,bf16,,,,,nan,GiB,x", r"bad.csv:2: measured must be .*\[GiB\], got nan"),
    ("decode,llama-3-70b,h100-sxm,3,bf16,bf16,1,4096,,,10,ms,x", r"bad.csv:2: ranks \(3\) must divide the query"),
    ("decode,llama-3-70b,h100-sxm,8,int4,bf16,1,4096,,,10,ms,x", r"bad.csv:2: weight_dtype must be one of"),
    ("decode,llama-3-70b,h100-sxm," + "9" * 400 + ",bf16,bf16,1,4096,,,10,ms,x",
     r"bad.csv:2: ranks must be an integer in \[1, 1024\], got 9999"),
    ("decode,llama-3-70b,h100-sxm,8,bf16,bf16,0x10,4096,,,10,ms,x", r"bad.csv:2: batch must be an integer"),
    ("prefill,llama-3-70b,h100-sxm,8,bf16,bf16,1,,100,100,10,ms,x", r"bad.csv:2: prefix_tokens must be an integer "
                                                                    r"in \[0, 99\] \[tokens\], got 100"),
    ("decode,llama-3-70b,h100-sxm,8,bf16,bf16,1,4096,,,10,ms,x,extra", r"bad.csv:2: a row must have at most as "
                                                                        r"many fields as the header \(13\), got 14"),
    ("decode,llama-9,h100-sxm,8,bf16,bf16,1,4096,,,10,ms,x", "no models preset 'llama-9'"),
    ("prefill,llama-3-70b,h100-sxm,8,bf16,bf16,1,,,0,10,ms,x", "column 'prompt_tokens' is required"),
])
def test_bad_rows_name_line_and_column(tmp_path, row, message):
    f = tmp_path / "bad.csv"
    f.write_text(",".join(calibrate.COLUMNS) + "\n" + row + "\n")
    with pytest.raises(SpecError, match=message):
        calibrate.load_points(f)


def test_cli_calibrate(capsys, tmp_path):
    out = tmp_path / "cal.yaml"
    assert cli.main(["calibrate", "--data", str(DATA), "--save", str(out), "--name", "fitted"]) == 0
    text = capsys.readouterr().out
    assert "rms" in text and "decode B=128" in text and out.is_file()
    import json
    assert cli.main(["calibrate", "--data", str(DATA), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["fitted"]) == set(calibrate.FIT_FIELDS) and len(doc["points"]) == 7
    assert cli.main(["calibrate", "--data", str(tmp_path / "missing.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.csv" in err[0]


# ---- hostile files ---------------------------------------------------------------------------------------------
def _csv_text():
    return DATA.read_text(encoding="utf-8")


def test_csv_with_a_byte_order_mark_loads(tmp_path):
    f = tmp_path / "bom.csv"
    f.write_bytes(b"\xef\xbb\xbf" + DATA.read_bytes())
    assert len(calibrate.load_points(f)) == len(calibrate.load_points(DATA))


def test_csv_not_utf8_is_one_clear_error(tmp_path):
    f = tmp_path / "latin1.csv"
    f.write_bytes(_csv_text().replace("AIConfigurator", "AIConfigurat\xe9r", 1).encode("latin-1"))
    with pytest.raises(SpecError, match=r"calibration CSV 'latin1.csv' must be UTF-8 text, got byte 0xe9 on "
                                        r"line 2 \(offset \d+\); save it as UTF-8"):
        calibrate.load_points(f)


def test_csv_with_an_unbalanced_quote_is_rejected_not_truncated(tmp_path):
    lines = _csv_text().splitlines()
    lines[2] = lines[2].replace(',"AIConfigurator', ',"AIConfigurator "quoted', 1)  # opens a quote left open
    f = tmp_path / "quote.csv"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"quote.csv:3: .*quote"):
        calibrate.load_points(f)
    lines = _csv_text().splitlines()
    lines[2] = lines[2].replace('batch 8"', "batch 8", 1)  # the quote closes on the next line
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"quote.csv:3: "):
        calibrate.load_points(f)
    lines = _csv_text().splitlines()
    lines[2] = lines[2].replace('batch 8"', 'batch 8\n  continued"', 1)  # a well-formed quote over two lines
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"quote.csv:3: a quoted field runs over several lines \(lines 3-4\)"):
        calibrate.load_points(f)
    lines = _csv_text().splitlines()
    lines[-1] = lines[-1].rstrip('"')  # the last quote never closes: rows must not silently vanish
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SpecError, match=rf"quote.csv:{len(lines)}: not valid CSV \(unexpected end of data\)"):
        calibrate.load_points(f)


def test_csv_over_the_size_limit(tmp_path):
    f = tmp_path / "big.csv"
    f.write_text(_csv_text() + "\n" * calibrate.MAX_CSV_BYTES, encoding="utf-8")
    with pytest.raises(SpecError, match=r"must be at most 1,048,576 bytes"):
        calibrate.load_points(f)


@pytest.mark.parametrize("make, needle", [
    (lambda tmp: tmp / "missing" / "cal.yaml", "--save must be in an existing directory"),
    (lambda tmp: tmp, "--save must be a file to write, not a directory, got the directory"),
])
def test_cli_calibrate_save_target_checked_before_the_fit(capsys, tmp_path, monkeypatch, make, needle):
    monkeypatch.setattr(calibrate, "fit", lambda *a, **k: pytest.fail("the fit must not run"))
    code = cli.main(["calibrate", "--data", str(DATA), "--save", str(make(tmp_path))])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and needle in err, err


def test_cli_calibrate_names_its_flags(capsys, tmp_path):
    assert cli.main(["calibrate", "--data", str(DATA), "--start", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmexplore: error: --start: no runtime preset 'nope'; known:") and err.count("\n") == 1
    assert cli.main(["calibrate", "--data", str(tmp_path)]) == 2
    assert "--data must be an existing file" in capsys.readouterr().err


def test_fit_parameters_stay_in_range_for_extreme_measurements(tmp_path):
    # measurements at the edges of the accepted range: the fit stays finite and inside BOUNDS
    lines = _csv_text().splitlines()
    lines[1] = lines[1].replace("9.986,ms", "10000000,ms")
    f = tmp_path / "extreme.csv"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    res = calibrate.fit(calibrate.load_points(f), max_iter=5)
    for field, (lo, hi) in calibrate.BOUNDS.items():
        assert lo <= getattr(res["runtime"], field) <= hi
