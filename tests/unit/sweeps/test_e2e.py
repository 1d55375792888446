"""End-to-end validation of the serving simulator (issue 19 §2, llmexplore/sweeps/fidelity/e2e.py and
``llmexplore validate --e2e``) on aiconfigurator's measured sample (data/validation/serving_e2e.csv)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from llmexplore import cli
from llmexplore.errors import SpecError
from llmexplore.sweeps.fidelity import e2e


@pytest.fixture(scope="module")
def rows():
    return e2e.load()


@pytest.fixture(scope="module")
def table(rows):
    return e2e.evaluate(rows)


def test_the_shipped_table_is_the_extract_of_the_cited_file(rows):
    # 2,873 of the source's 5,221 rows: the models and GPUs with presets (extract_aic_silicon.py)
    assert len(rows) == 2873 and rows["id"].is_unique
    assert set(rows["model_path"]) <= set(e2e.MODELS) and set(rows["system"]) <= set(e2e.SYSTEMS)
    assert (rows["silicon_ttft_ms"] > 0).all() and (rows["silicon_tpot_ms"] > 0).all()
    assert set(rows["backend"]) == {"trtllm", "vllm", "sglang"}


def test_a_row_becomes_the_measured_deployment(rows):
    # TensorRT-LLM, Llama-3.1-70B FP8 on 8 B200, 128 clients in one instance of max batch 128
    r = rows[rows["id"].str.contains("llama_3_1_70b") & (rows["backend"] == "trtllm")].iloc[0].to_dict()
    cfg, runtime, conc = e2e.row_config(r)
    side = cfg["sides"][0]
    assert runtime == "trtllm" and conc == int(r["concurrency"]) and cfg["mode"] == "colocated"
    assert side["ranks"] == int(r["tp_size"]) and side["max_num_seqs"] == int(r["batch_size"])
    assert side["instances"] * side["max_num_seqs"] == conc
    assert cfg["weight_dtype"] == {"fp8": "fp8", "nvfp4": "fp4"}[r["gemm_quant_mode"]]
    # quantised weights come from a quantised checkpoint, for which aiconfigurator infers FP8 KV (module docstring)
    assert cfg["kv_dtype"] == "fp8"
    bf16 = rows[rows["gemm_quant_mode"].isna() & (rows["model_path"] == "Qwen/Qwen3-32B")
                & (rows["mode"] == "agg")].iloc[0].to_dict()
    assert e2e.row_config(bf16)[0]["kv_dtype"] == "bf16" and e2e.row_config(bf16)[0]["weight_dtype"] == "bf16"


def test_a_disaggregated_row_becomes_its_two_pools(rows):
    # SGLang DeepSeek-V3 on GB200: 1 x TP4 prefill worker, 2 x TP4 decode workers of batch 2, 4 clients
    r = rows[(rows["mode"] == "disagg") & rows["prefill_num_workers"].notna()
             & (rows["prefill_attention_dp_size"] <= 1) & (rows["decode_attention_dp_size"] <= 1)].iloc[0].to_dict()
    cfg, runtime, conc = e2e.row_config(r)
    pre, dec = cfg["sides"]
    assert cfg["mode"] == "disaggregated" and runtime == r["backend"] and conc == int(r["concurrency"])
    assert (pre["role"], pre["instances"], pre["ranks"]) == ("prefill", int(r["prefill_num_workers"]),
                                                            int(r["prefill_tp_size"]))
    assert (dec["role"], dec["instances"], dec["ranks"], dec["max_num_seqs"]) == (
        "decode", int(r["decode_num_workers"]), int(r["decode_tp_size"]), int(r["decode_batch_size"]))
    assert pre["chunk_tokens"] is None  # whole prompts on the prefill pool


def test_an_attention_dp_row_becomes_one_scheduler_per_rank(rows):
    # TensorRT-LLM, DeepSeek-R1 FP4 on 8 B200 with attention DP 8 and EP 8: batch 8 per rank, 64 clients, one
    # instance whose max_num_seqs counts its 8 ranks' requests
    r = rows[(rows["attention_dp_size"] == 8) & (rows["batch_size"] == 8) & (rows["mode"] == "agg")].iloc[0].to_dict()
    cfg, runtime, conc = e2e.row_config(r)
    side = cfg["sides"][0]
    assert (side["layout"], side["ranks"], side["ep"], side["max_num_seqs"], side["instances"]) == ("DPA", 8, 8, 64, 1)
    assert conc == 64 and runtime == "trtllm"
    # disaggregated: each side's own layout (SGLang, prefill 4 x DPA4 workers, decode 1 x DPA32)
    d = rows[(rows["mode"] == "disagg") & (rows["prefill_attention_dp_size"] == 4)
             & (rows["decode_attention_dp_size"] == 32) & rows["prefill_num_workers"].notna()].iloc[0].to_dict()
    pre, dec = e2e.row_config(d)[0]["sides"]
    assert (pre["layout"], pre["ranks"], dec["layout"], dec["ranks"]) == ("DPA", 4, "DPA", 32)
    assert dec["max_num_seqs"] == 32 * int(d["decode_batch_size"])


def test_rows_it_cannot_simulate_say_why(rows):
    # attention DP 64 over MoE TP 8 x EP 8: every such row repeats the numbers of an attention-DP-8 row
    dup = rows[(rows["attention_dp_size"] == 64)].iloc[0].to_dict()
    with pytest.raises(SpecError, match="taken as mislabelled"):
        e2e.row_config(dup)
    dis = rows[(rows["mode"] == "disagg") & rows["prefill_num_workers"].isna()].iloc[0].to_dict()
    with pytest.raises(SpecError, match="no prefill and decode worker counts"):
        e2e.row_config(dis)
    with pytest.raises(SpecError, match="no preset for"):
        e2e.row_config(dict(dup, model_path="org/unknown"))
    with pytest.raises(SpecError, match="not resolved: attention TP 2 within each of 4 attention-DP groups"):
        e2e.row_config(dict(dup, tp_size=2.0, attention_dp_size=4.0, moe_tp_size=1.0, moe_ep_size=8.0))


def test_mislabelled_rows_repeat_other_rows_measurements(rows):
    """The evidence for refusing attention DP over a hybrid MoE TP x EP: those rows' measured TTFT and TPOT repeat,
    to every digit, rows of another parallel configuration (21 of 27 at attention DP 64, all 10 at 16)."""
    hyb = rows[(rows["attention_dp_size"] > 1) & (rows["moe_tp_size"] > 1) & (rows["moe_ep_size"] > 1)]
    rest = rows.drop(hyb.index)
    seen = set(zip(rest["silicon_ttft_ms"].round(6), rest["silicon_tpot_ms"].round(6)))
    rep = [(round(a, 6), round(b, 6)) in seen for a, b in zip(hyb["silicon_ttft_ms"], hyb["silicon_tpot_ms"])]
    assert len(hyb) == 37 and sum(rep) == 23


def test_the_whole_table_is_simulated_and_scored(table):
    """The figures recorded when written (issue 19's closing note); a change of the simulator moves them."""
    s = e2e.summary(table)
    assert s["rows"] == 2873 and s["simulated"] == 1876  # 1,702 colocated + 174 disaggregated
    assert (table["status"] == "ok").groupby(table["attention"]).sum().to_dict() == {
        "": 0, "DPA": 89, "TP": 1723, "prefill DPA, decode TP": 54, "prefill TP, decode DPA": 10}
    ok = table[table["status"] == "ok"]
    assert np.isfinite(ok[["ttft_model_ms", "tpot_model_ms"]].to_numpy()).all()
    bad = table[table["status"] != "ok"]
    assert bad[["ttft_model_ms", "tpot_model_ms"]].isna().all().all() and (bad["status"].str.len() > 10).all()
    assert s["tpot_mape_pct"] == pytest.approx(23.4, abs=0.5)
    assert s["tpot_median_abs_pct"] == pytest.approx(15.5, abs=0.5)
    assert s["ttft_mape_pct"] == pytest.approx(87.5, abs=2.0)  # 80.9 with SGLang's prefill mixed in
    assert s["ttft_median_abs_pct"] == pytest.approx(52.2, abs=1.0)
    # every error is what its columns say
    e = 100 * (ok["tpot_model_ms"] / ok["tpot_measured_ms"] - 1)
    assert np.allclose(e, ok["tpot_error_pct"])
    cats = e2e.category_table(table)
    assert set(cats["dimension"]) == set(e2e.CATEGORIES)
    for dim, g in cats.groupby("dimension"):
        assert g["rows"].sum() == (2873 if dim not in ("regime", "attention") else (table[dim] != "").sum())


def test_round_weights_make_a_twenty_round_benchmark_of_four_simulated_turns():
    # AIPerf's profiling phase: every client at once (turn 0), 18 steady turns, the drain; 4 turns simulated
    w = e2e.round_weights(4 * 64, 64)
    assert w.sum() == pytest.approx(1.0) and e2e.ROUNDS == 20
    assert w[:64].sum() == pytest.approx(1 / 20) and w[-64:].sum() == pytest.approx(1 / 20)
    assert w[64:192].sum() == pytest.approx(18 / 20) and np.ptp(w[64:192]) == 0
    # a constant per turn comes back as the 20-round mean: (first + 18 x middle + last) / 20
    v = np.repeat([10.0, 2.0, 2.0, 1.0], 64)
    assert np.dot(w, v) == pytest.approx((10 + 18 * 2 + 1) / 20)
    # two turns: the second stands for the other 19; a remainder joins the last turn; one turn: a plain mean
    assert e2e.round_weights(20, 10)[10:].sum() == pytest.approx(19 / 20)
    assert e2e.round_weights(130, 64)[128:].sum() == pytest.approx(19 / 20 * 2 / 66)
    assert np.allclose(e2e.round_weights(10, 20), 0.1)


def test_n_requests_turns_the_loop_over():
    assert e2e.n_requests(4) == 52 and e2e.n_requests(64) == 256
    assert e2e.n_requests(8192) == 16384  # never fewer than two turns


def test_cli_e2e_prints_the_table_and_its_json(capsys, monkeypatch, rows):
    sub = rows[rows["model_path"] == "Qwen/Qwen3-32B"].head(12)  # a dozen rows: the CLI's shape, not its numbers
    monkeypatch.setattr(e2e, "load", lambda path=None: sub)
    assert cli.main(["validate", "--e2e"]) == 0
    out = capsys.readouterr().out
    assert "measured closed-loop benchmarks simulated" in out and "TPOT MAPE" in out and "peer errors" in out
    assert cli.main(["validate", "--e2e", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["rows"] == 12 and len(doc["rows"]) == 12 and doc["categories"]
    assert cli.main(["validate", "--e2e", "--runtime", "vllm"]) == 2
    assert "give no --runtime" in capsys.readouterr().err


VLLM_RUN = {  # keys of vllm/benchmarks/serve.py's --save-result JSON (see tests/unit/test_benchfiles.py)
    "date": "20261203-120000", "backend": "vllm", "model_id": "Qwen/Qwen3-32B", "tokenizer_id": "Qwen/Qwen3-32B",
    "num_prompts": 64, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 16, "duration": 60.0,
    "completed": 64, "total_input_tokens": 64 * 1000, "total_output_tokens": 64 * 200,
    "request_throughput": 1.07, "request_goodput": None, "output_throughput": 213.3, "total_token_throughput": 1280.0,
    "mean_ttft_ms": 120.0, "median_ttft_ms": 110.0, "std_ttft_ms": 10.0, "p99_ttft_ms": 200.0,
    "mean_tpot_ms": 14.0, "median_tpot_ms": 14.0, "std_tpot_ms": 1.0, "p99_tpot_ms": 18.0,
    "mean_itl_ms": 14.0, "median_itl_ms": 13.0, "std_itl_ms": 2.0, "p99_itl_ms": 30.0,
}
CFG = {"model": "qwen3-32b", "gpu": "h200", "mode": "colocated", "weight_dtype": "fp8", "kv_dtype": "fp8",
       "sides": [{"role": "colocated", "instances": 1, "ranks": 2, "max_num_seqs": 16}]}


def test_your_own_benchmark_json_in(tmp_path, capsys):
    f = tmp_path / "run.json"
    f.write_text(json.dumps(VLLM_RUN))
    assert cli.main(["validate", "--e2e", "--data", str(f), "--config", json.dumps(CFG), "--runtime", "vllm",
                     "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["rows"]
    assert row["status"] == "ok" and row["concurrency"] == 16 and row["isl"] == 1000 and row["osl"] == 200
    assert row["ttft_measured_ms"] == 120.0 and row["tpot_measured_ms"] == 14.0
    assert row["tpot_error_pct"] == pytest.approx(100 * (row["tpot_model_ms"] / 14.0 - 1))
    # the run's own 64 requests are all simulated: their plain mean, not the 20-round weighting of the sample
    from llmexplore.sweeps.plan import simulate_config

    sim = simulate_config(CFG, isl=1000, osl=200, concurrency=16, n_requests=64, runtime="vllm")
    assert row["ttft_model_ms"] == pytest.approx(1e3 * sim["summary"]["ttft_mean_s"], rel=1e-12)
    assert cli.main(["validate", "--e2e", "--data", str(f), "--config", json.dumps(CFG)]) == 0
    assert "1 of 1 runs of run.json simulated" in capsys.readouterr().out


def test_bad_benchmark_input_gets_one_line(tmp_path, capsys):
    f = tmp_path / "run.json"
    f.write_text(json.dumps(VLLM_RUN))
    assert cli.main(["validate", "--e2e", "--data", str(f)]) == 2
    assert "--config must be given with --e2e --data" in capsys.readouterr().err
    junk = tmp_path / "junk.json"
    junk.write_text('{"hello": 1}')
    assert cli.main(["validate", "--e2e", "--data", str(junk), "--config", json.dumps(CFG)]) == 2
    err = capsys.readouterr().err
    assert "junk.json" in err and "not a benchmark result" in err and "Traceback" not in err
    assert cli.main(["validate", "--config", json.dumps(CFG)]) == 2
    assert "--config must come with --e2e --data" in capsys.readouterr().err


def test_the_figure_table_and_sentence_state_the_numbers(table):
    from llmexplore.findings import fidelity as ff
    from llmexplore.plots import fidelity as pf

    fig = pf.serving_vs_measured_figure(table, title="t")
    lay = fig.layout
    assert lay.xaxis.title.text == "measured mean TTFT (ms)" and lay.yaxis2.title.text == "simulated mean TPOT (ms)"
    assert lay.xaxis.type == lay.yaxis2.type == "log"
    legend = [t.name for t in fig.data if t.showlegend is not False and t.name]
    assert legend == ["±25% band", "predicted = measured", "SGLang", "TensorRT-LLM", "vLLM"]
    s = e2e.summary(table)
    assert f"TPOT: MAPE {s['tpot_mape_pct']:.0f}%" in lay.annotations[1].text
    ppl = pf.serving_people_table(e2e.category_table(table))
    assert "TPOT MAPE [%]" in ppl.frame.columns
    text = ff.serving_sentence(table)
    assert f"{s['simulated']:,} on exactly the measured deployment" in text and "not resolved" in text
    rec = ff.serving_record(table)
    assert rec["tpot_mape_pct"] == s["tpot_mape_pct"] and set(rec["by_engine"]) == {"trtllm", "vllm", "sglang"}
