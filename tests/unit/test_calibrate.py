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


def test_shipped_default_is_this_fit(result):
    shipped = presets.runtime("default")
    for f in calibrate.FIT_FIELDS:
        assert getattr(shipped, f) == pytest.approx(getattr(result["runtime"], f), rel=2e-3), f


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
    ("decode,llama-3-70b,h100-sxm,8,bf16,bf16,1,4096,,,-3,ms,x", "measured must be a finite number >= 0"),
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
