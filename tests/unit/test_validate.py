"""The end-to-end validation set (data/validation/e2e.csv) and the model's recorded accuracy on it.

The set is never fitted to (data/validation/README.md); these tests pin the accuracy the closing note of issue 9
reports, so a change that worsens it shows up here, and check the set's own integrity."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llmexplore import presets, validate
from llmexplore.errors import SpecError


@pytest.fixture(scope="module")
def rows():
    return validate.load()


@pytest.fixture(scope="module")
def by_engine():
    return validate.evaluate("engine")


def test_every_row_is_cited_and_uses_presets(rows):
    assert rows.id.is_unique
    assert set(rows.kind) <= {"decode", "decode_loaded", "prefill"}
    assert (rows.unit == "ms").all() and (rows.measured > 0).all()
    assert rows.source_url.str.startswith("http").all() and rows.quote.str.len().gt(5).all()
    for col, kind in (("model", "models"), ("gpu", "hardware")):
        assert set(rows[col]) <= set(presets.names(kind)), col
    loaded = rows[rows.kind == "decode_loaded"]
    assert loaded.isl.notna().all() and loaded.osl.notna().all()


def test_rows_the_model_cannot_represent_say_why(by_engine):
    bad = by_engine[by_engine.status != "ok"]
    # GB200 on 48 ranks: 256 experts do not divide, and the source does not say how many redundant slots it ran
    assert list(bad.id) == ["lmsys-dsv3-gb200-decode-48r"]
    assert bad.status.str.contains(r"ranks \(48\) must divide the routed experts of deepseek-v3 \(256\)").all()
    assert bad.predicted_ms.isna().all()


def test_recorded_accuracy(by_engine):
    """Engine-matched curve presets: median |error| 6.4% over 51 of 52 rows (17.2% for the scalar runtime, the
    default before the curves). Over the first 43 rows (before 9 ML.ENERGY TP1/TP2 rows that are easy for
    the model were added for the ranking check) 9.5%. Before the per-tensor FP8 GEMMs were fitted as the static
    kernel a served checkpoint runs (aiconfigurator's rows time TensorRT-LLM's dynamic activation scale too;
    issue 19 §3.1) the figures were 5.6% and 6.5%: the seven NVIDIA NIM Llama-3.3-70B FP8 rows (TensorRT-LLM,
    client-side TTFT and ITL, so they include the serving stack's time that the step model leaves out) went
    from +2..+7% to -4..-11%. Before the LMSYS rows carried the data-parallel dense FFN and
    LM head and the redundant expert slots their sources ran (moe_redundant, dp_dense, dp_lm_head; the EP72 decode
    row was not modelled until then) and SGLang's DeepEP path kept a whole shared expert per rank: 5.0% over 50
    rows, 16.1% and 6.1%, with the EP32 prefill rows at -5 to 0% (the model then also priced a dense-FFN gather
    they did not run). Before vLLM 0.11.1's sort-based top-p sampler was priced
    on the 28 ML.ENERGY rows (their harness sends top_p 0.95; docs/models.md §1.1b) the figures were 6.7%,
    18.2% and 8.7%. Before DeepGEMM's curve, DeepEP's per-node dispatch,
    two-batch overlap and the absorbed pricing of SGLang's MLA prefill rows (issue 9) the figures were 8.6% and
    19.7% (14.7% over the first 43 rows), with the three LMSYS EP32 prefill rows at +201 to +215%."""
    s = validate.summary(by_engine)
    assert s["modelled"] == 51 and s["rows"] == 52
    assert s["median_abs_error_pct"] == pytest.approx(6.4, abs=0.3)
    scalar = validate.summary(validate.evaluate("scalar"))
    assert scalar["median_abs_error_pct"] == pytest.approx(17.2, abs=0.3)
    assert s["median_abs_error_pct"] < scalar["median_abs_error_pct"] - 8
    first43 = by_engine.iloc[:43]
    assert validate.summary(first43)["median_abs_error_pct"] == pytest.approx(9.5, abs=0.3)


def test_loaded_decode_follows_the_nim_concurrency_sweep(by_engine):
    """NVIDIA NIM Llama-3.3-70B FP8 TP2 H100, ISL 5000 / OSL 500: ITL 21.8 / 38.8 / 59.7 ms at concurrency
    5 / 25 / 50. Pure decode would miss the interleaved prefills by up to 2x; the loaded step is within 10%."""
    nim = by_engine[by_engine.id.isin(["nim-l70-h100-d5", "nim-l70-h100-d25", "nim-l70-h100-d50"])]
    assert len(nim) == 3 and (nim.error_pct.abs() < 10).all()
    assert np.all(np.diff(nim.sort_values("batch").predicted_ms) > 0)


def test_summary_and_ranking_shapes(by_engine):
    s = validate.summary(by_engine)
    assert isinstance(s["categories"], pd.DataFrame) and s["categories"].rows.sum() == s["modelled"]
    r = validate.ranking(by_engine)
    assert list(r.columns) == ["a", "b", "measured_ratio", "predicted_ratio", "resolved", "agrees"]
    # 7 pairs over the 5% margin: 6 ML.ENERGY 1-vs-2-GPU pairs, all ordered as measured (the model overstates
    # the 2-GPU speed-up by 3-9%), and one DeepSeek pair that differs only in EP size, which the step model does
    # not represent (unresolved, not counted as agreeing)
    assert len(r) == 7 and int(r.resolved.sum()) == 6 and bool(r[r.resolved].agrees.all())
    unresolved = r[~r.resolved]
    assert set(unresolved.a) | set(unresolved.b) <= {"trtllm-dsr1-b200-bs1-ep8", "trtllm-dsr1-b200-bs1-nomtp"}


def test_cli_validate_json(capsys):
    import json

    from llmexplore import cli

    assert cli.main(["validate", "--runtime", "default", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["modelled"] == 51 and doc["summary"]["rows"] == 52
    assert doc["summary"]["median_abs_error_pct"] == pytest.approx(10.3, abs=0.3)  # 10.0 before static FP8
    assert {"category", "rows", "median_abs_error_pct"} <= set(doc["categories"][0])
    assert len(doc["rows"]) == 52 and doc["inputs"]["runtime"] == "default"
    assert cli.main(["validate", "--runtime", "nonsense"]) == 2
    assert "--runtime: no runtime preset 'nonsense'" in capsys.readouterr().err


def test_an_unknown_runtime_is_an_error_not_a_table_of_failures():
    from llmexplore.errors import UnknownPresetError

    with pytest.raises(UnknownPresetError, match="no runtime preset 'nope'"):
        validate.evaluate("nope")


def _own_rows(tmp_path, *extra: str) -> Path:
    """A CSV in the shipped columns: one published row and one of 'your own'."""
    head, *rows = validate.VALIDATION_CSV.read_text().splitlines()
    nim = next(r for r in rows if r.startswith("nim-l70-h100-d1,"))
    own = "my-1,decode,llama-3-8b,h100-sxm,1,TP,1,,bf16,bf16,,,16,2000,,,,8.5,ms" + "," * (head.count(",") - 18)
    path = tmp_path / "mine.csv"
    path.write_text("\n".join([head, nim, own, *extra]) + "\n")
    return path


def test_your_own_measurements_go_through_the_same_table(tmp_path, capsys):
    import json

    from llmexplore import cli

    path = _own_rows(tmp_path)
    table = validate.evaluate("engine", validate.load(path))
    assert list(table.id) == ["nim-l70-h100-d1", "my-1"] and (table.status == "ok").all()
    assert list(table.runtime) == ["trtllm", "default"]  # no engine given: the engine-neutral curves
    shipped = validate.evaluate("engine")
    assert table.predicted_ms.iloc[0] == shipped.set_index("id").predicted_ms["nim-l70-h100-d1"]
    assert cli.main(["validate", "--data", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["rows"] == 2 and doc["inputs"]["data"] == str(path)
    # an unknown model preset is that row's "not modelled", not a crash
    other = tmp_path / "other.csv"
    other.write_text(path.read_text().replace("my-1,decode,llama-3-8b", "my-1,decode,llama-9"))
    t = validate.evaluate("engine", validate.load(other))
    assert t.set_index("id").status["my-1"].startswith("not modelled: model: no models preset 'llama-9'")


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("my-1,decode,", "my-1,decod,"), "line 3: kind must be one of ['decode', 'decode_loaded', "
                                                           "'prefill'], got 'decod'"),
    (lambda t: t.replace(",16,2000,", ",16,abc,"), "line 3: context must be a finite number > 0 for a decode row, "
                                                  "got 'abc'"),
    (lambda t: t.replace(",16,2000,", ",0,2000,"), "line 3: batch must be an integer >= 1 for a decode row, got 0"),
    (lambda t: t.replace("my-1,decode,llama-3-8b,h100-sxm,1,TP", "my-1,decode,llama-3-8b,h100-sxm,1,XP"),
     "line 3: layout must be one of ['TP', 'CP', 'DPA', 'DOP'], got 'XP'"),
    (lambda t: t.replace(",8.5,ms", ",8.5,s"), "line 3: unit must be 'ms', got 's'"),
    (lambda t: t.replace(",8.5,ms", ",-8.5,ms"), "line 3: measured must be a finite number >= 0.001"),
    (lambda t: t.replace("my-1,", "nim-l70-h100-d1,"), "line 3: id must be unique, got 'nim-l70-h100-d1' again"),
    (lambda t: t.split("\n")[0].replace("measured,", "") + "\n", "missing column(s) ['measured']"),
    (lambda t: t.split("\n")[0] + "\n", "no rows (only a header)"),
])
def test_a_bad_csv_names_the_line_column_and_rule(tmp_path, edit, message, capsys):
    from llmexplore import cli
    from llmexplore.errors import SpecError

    path = _own_rows(tmp_path)
    path.write_text(edit(path.read_text()))
    with pytest.raises(SpecError, match=re.escape(message)):
        validate.load(path)
    assert cli.main(["validate", "--data", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_validate_data_must_be_a_file(tmp_path, capsys):
    from llmexplore import cli

    for bad in (str(tmp_path / "missing.csv"), str(tmp_path)):
        assert cli.main(["validate", "--data", bad]) == 2
        assert "--data must be an existing CSV file, got '" in capsys.readouterr().err


def test_cli_says_when_no_row_is_modelled(tmp_path, capsys):
    """Issue 20 §2: with no row modelled the headline printed "median |error| nan%"; it now says there is no error
    to report, and each row's status says why."""
    import pandas as pd

    from llmexplore import cli

    one = pd.read_csv(validate.VALIDATION_CSV).head(1).assign(ranks=3)  # 3 ranks cannot split Llama's 64 heads
    path = tmp_path / "rows.csv"
    one.to_csv(path, index=False)
    assert cli.main(["validate", "--data", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("0 of 1 given measurements modelled") and "nan" not in out
    assert "not modelled: ranks (3) must divide the query heads" in out


def test_a_measured_time_below_a_microsecond_is_refused(tmp_path):
    """Issue 20 §2: 1e-320 ms passed (> 0) and read as an error of +inf %."""
    head = validate.VALIDATION_CSV.read_text().splitlines()[0]
    path = tmp_path / "tiny.csv"
    path.write_text(head + "\n" + "my-1,decode,llama-3-8b,h100-sxm,1,TP,1,,bf16,bf16,,,16,2000,,,,1e-320,ms"
                    + "," * (head.count(",") - 18) + "\n")
    with pytest.raises(SpecError, match=r"line 2: measured must be a finite number >= 0.001 and <= 86,400,000"):
        validate.load(path)


def test_ranking_is_every_pair_in_row_order_and_bounded(tmp_path):
    """Issue 20 §2: the ranking looped over pairs with DataFrame.iloc (52 s for 1,000 rows of one workload); it is
    now one numpy pass per group, the same pairs in the same order, and a group too large to pair is one line."""
    ids = [f"r{k}" for k in range(6)]
    table = pd.DataFrame({"id": ids, "status": "ok", "model": "m", "gpu": "g", "kind": "decode", "batch": 8,
                          "context": 1000, "prompt_tokens": np.nan,
                          "measured_ms": [10.0, 10.2, 12.0, 9.0, 15.0, 10.0],
                          "predicted_ms": [11.0, 11.0, 13.0, 8.0, 16.0, 12.0]})
    want = []
    for i in range(6):  # the definition, as two loops
        for j in range(i + 1, 6):
            mr = table.measured_ms[i] / table.measured_ms[j]
            if abs(mr - 1) * 100 > 5:
                pr = table.predicted_ms[i] / table.predicted_ms[j]
                res = abs(pr - 1) > 1e-9
                want.append((ids[i], ids[j], mr, pr, res, bool(res and (mr > 1) == (pr > 1))))
    got = validate.ranking(table)
    assert [tuple(r) for r in got.itertuples(index=False)] == want
    big = pd.concat([table] * 400, ignore_index=True).assign(id=lambda d: [f"x{k}" for k in range(len(d))])
    with pytest.raises(SpecError, match=r"at most 2,000 rows of one model, GPU, phase and workload .* got 2,400 rows"):
        validate.ranking(big)
