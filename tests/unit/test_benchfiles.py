"""llmexplore.benchfiles: the end-to-end benchmark result files of vLLM, SGLang, AIPerf, GenAI-Perf and InferenceX.

Each fixture is a small file built from the writer's own key names (the source is cited above it, as in the
module docstring) and every parsed value is asserted exactly; each error case checks that the one-line message
names the file and the rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmexplore.benchfiles import FORMATS, LATENCIES, STATS, TPOT_DEFINITIONS, read_benchmark
from llmexplore.errors import SpecError

KEYS = {"format", "run", "model", "concurrency", "rate_per_s", "requests", "isl", "osl", *LATENCIES,
        "output_tokens_per_s", "requests_per_s", "tpot_definition"}


def _write(tmp_path, name: str, text: str):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _stats(mean=None, median=None, p90=None, p99=None) -> dict:
    return {"mean": mean, "median": median, "p90": p90, "p99": p99}


# vllm-project/vllm vllm/benchmarks/serve.py (009e6d4a1cd6): main_async's result_json (date, backend, label,
# model_id, tokenizer_id, num_prompts, request_rate, burstiness, max_concurrency) merged with benchmark()'s
# result and process_one_metric's mean_/median_/std_/p<P>_<metric>_ms, run with --metric-percentiles 90,99
# and --percentile-metrics ttft,tpot,itl,e2el
VLLM = {
    "date": "20250101-120000", "endpoint_type": "openai", "backend": "openai", "label": None,
    "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
    "num_prompts": 200, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 16,
    "duration": 40.0, "completed": 200, "failed": 0, "total_input_tokens": 204800, "total_output_tokens": 25600,
    "request_throughput": 5.0, "request_goodput": None, "output_throughput": 640.0,
    "total_token_throughput": 5760.0, "max_output_tokens_per_s": 700.0, "max_concurrent_requests": 16,
    "rtfx": 0.0, "latencies": [0.5], "queue_times": [0.0],
    "mean_ttft_ms": 120.5, "median_ttft_ms": 110.25, "std_ttft_ms": 20.0, "p90_ttft_ms": 150.0,
    "p99_ttft_ms": 190.75,
    "mean_tpot_ms": 12.5, "median_tpot_ms": 12.0, "std_tpot_ms": 1.0, "p90_tpot_ms": 14.0, "p99_tpot_ms": 16.0,
    "mean_itl_ms": 12.25, "median_itl_ms": 11.5, "std_itl_ms": 3.0, "p90_itl_ms": 15.0, "p99_itl_ms": 30.0,
    "mean_e2el_ms": 1700.0, "median_e2el_ms": 1650.0, "std_e2el_ms": 100.0, "p90_e2el_ms": 1800.0,
    "p99_e2el_ms": 1990.0,
}

# sgl-project/sglang python/sglang/bench_serving.py (0033168f0f58): benchmark()'s result dict, one JSON object
# appended per run with json.dumps(result) + "\n"; request_rate float("inf") is written as Infinity
SGLANG = {
    "backend": "sglang", "dataset_name": "random", "request_rate": float("inf"), "max_concurrency": 32,
    "sharegpt_output_len": None, "random_input_len": 1024, "random_output_len": 256, "random_range_ratio": 0.0,
    "duration": 50.0, "completed": 400, "total_input_tokens": 409600, "total_output_tokens": 102400,
    "total_output_tokens_retokenized": 102300, "request_throughput": 8.0, "input_throughput": 8192.0,
    "output_throughput": 2048.0, "mean_e2e_latency_ms": 3900.0, "median_e2e_latency_ms": 3800.0,
    "std_e2e_latency_ms": 200.0, "p99_e2e_latency_ms": 4500.0, "mean_ttft_ms": 250.0, "median_ttft_ms": 240.0,
    "std_ttft_ms": 30.0, "p99_ttft_ms": 400.0, "mean_tpot_ms": 14.25, "median_tpot_ms": 14.0, "std_tpot_ms": 1.0,
    "p99_tpot_ms": 18.0, "mean_itl_ms": 14.0, "median_itl_ms": 13.5, "std_itl_ms": 4.0, "p95_itl_ms": 20.0,
    "p99_itl_ms": 45.0, "concurrency": 31.2, "accept_length": None,
}


def _aiperf(unit: str = "ms", scale: float = 1.0) -> dict:
    """ai-dynamo/aiperf (db4f6397d11e) aiperf/common/models/export_models.py JsonExportData: one
    JsonMetricResult {unit, avg, p1..p99, min, max, std} per metric tag; input_config is UserConfig dumped with
    exclude_unset (endpoint.model_names, loadgen.concurrency); was_cancelled / error_summary always set.
    Latencies are written in ``unit``; ``scale`` is that unit's size in ms' inverse (1e6 for ns)."""
    def t(avg, p50, p90, p99):
        return {"unit": unit, "avg": avg * scale, "p1": 0.5 * avg * scale, "p50": p50 * scale, "p90": p90 * scale,
                "p99": p99 * scale, "min": 0.5 * avg * scale, "max": 2 * p99 * scale, "std": 1.0 * scale}
    return {
        "request_throughput": {"unit": "requests/sec", "avg": 3.5},
        "request_latency": t(2500.0, 2400.0, 2900.0, 3100.0),
        "request_count": {"unit": "requests", "avg": 100.0},
        "time_to_first_token": t(180.0, 170.0, 220.0, 260.0),
        "inter_token_latency": t(9.5, 9.25, 11.0, 12.5),
        "inter_chunk_latency": t(9.0, 8.5, 10.5, 14.0),
        "output_token_throughput": {"unit": "tokens/sec", "avg": 890.0},
        "output_sequence_length": {"unit": "tokens", "avg": 255.0, "p50": 256.0},
        "input_sequence_length": {"unit": "tokens", "avg": 1000.0, "p50": 1024.0},
        "total_isl": {"unit": "tokens", "avg": 102400.0},
        "total_osl": {"unit": "tokens", "avg": 25500.0},
        "benchmark_duration": {"unit": "sec", "avg": 28.6},
        "input_config": {"endpoint": {"model_names": ["Qwen/Qwen3-8B"], "type": "chat", "streaming": True},
                         "loadgen": {"concurrency": 8, "request_count": 100}},
        "was_cancelled": False, "error_summary": [],
        "start_time": "2025-10-01T12:00:00", "end_time": "2025-10-01T12:00:28",
    }


# triton-inference-server/perf_analyzer (263c5f6e0c7a) genai-perf/genai_perf/export_data/json_exporter.py:
# Statistics.stats_dict ({unit, avg, p1..p99, min, max, std} per metric, time in ms after scale_data) plus
# input_config = ConfigCommand.to_json_dict() (model_names, perf_analyzer.stimulus, endpoint, ...)
GENAI_PERF = {
    "request_throughput": {"unit": "requests/sec", "avg": 4.0},
    "request_latency": {"unit": "ms", "avg": 2000.0, "p50": 1950.0, "p90": 2300.0, "p99": 2600.0},
    "request_count": {"unit": "count", "avg": 120},
    "time_to_first_token": {"unit": "ms", "avg": 150.0, "p50": 140.0, "p90": 190.0, "p99": 240.0},
    "time_to_second_token": {"unit": "ms", "avg": 20.0},
    "inter_token_latency": {"unit": "ms", "avg": 8.5, "p50": 8.25, "p90": 9.5, "p99": 11.0},
    "output_token_throughput": {"unit": "tokens/sec", "avg": 1000.0},
    "output_token_throughput_per_user": {"unit": "tokens/sec/user", "avg": 117.0},
    "output_sequence_length": {"unit": "tokens", "avg": 250.5},
    "input_sequence_length": {"unit": "tokens", "avg": 2048.0},
    "input_config": {"model_names": ["llama-3-8b"], "endpoint": {"type": "chat"},
                     "perf_analyzer": {"stimulus": {"concurrency": 4}}, "subcommand": "profile"},
}

# SemiAnalysisAI/InferenceX (843c6254ff69) utils/process_result.py: the single-node benchmark row, every *_ms
# key of the vLLM result in seconds with _ms removed (and intvty = 1000 / tpot_ms)
INFX_ROW = {
    "hw": "h200", "conc": 64, "image": "vllm/vllm-openai:v0.11.0", "model": "deepseek-ai/DeepSeek-R1-0528",
    "infmax_model_prefix": "dsr1", "framework": "vllm", "precision": "fp8", "spec_decoding": "none",
    "disagg": False, "isl": 1024, "osl": 1024, "is_multinode": False, "tp": 8, "pp": 1, "dcp_size": 1,
    "pcp_size": 1, "ep": 1, "dp_attention": "false", "tput_per_gpu": 900.0, "output_tput_per_gpu": 450.0,
    "input_tput_per_gpu": 450.0, "mean_ttft": 0.5, "median_ttft": 0.25, "std_ttft": 0.125, "p90_ttft": 0.75,
    "p99_ttft": 1.5, "p99.9_ttft": 2.0, "mean_tpot": 0.03125, "median_tpot": 0.03125, "p90_tpot": 0.0390625,
    "p99_tpot": 0.046875, "mean_intvty": 32.0, "mean_itl": 0.03125, "median_itl": 0.03125, "p90_itl": 0.0625,
    "p99_itl": 0.125, "mean_e2el": 32.5, "median_e2el": 32.0, "p90_e2el": 40.0, "p99_e2el": 48.0,
}


# ---- the formats -----------------------------------------------------------------------------------------
def test_vllm_save_result(tmp_path):
    [run] = read_benchmark(_write(tmp_path, "vllm.json", json.dumps(VLLM)))
    assert set(run) == KEYS
    assert run == {
        "format": "vllm", "run": 0, "model": "meta-llama/Llama-3.1-8B-Instruct", "concurrency": 16,
        "rate_per_s": None, "requests": 200, "isl": 204800 / 200, "osl": 25600 / 200,
        "ttft_ms": _stats(120.5, 110.25, 150.0, 190.75), "tpot_ms": _stats(12.5, 12.0, 14.0, 16.0),
        "itl_ms": _stats(12.25, 11.5, 15.0, 30.0), "e2e_ms": _stats(1700.0, 1650.0, 1800.0, 1990.0),
        "output_tokens_per_s": 640.0, "requests_per_s": 5.0, "tpot_definition": TPOT_DEFINITIONS["vllm"],
    }
    assert "(output tokens - 1)" in run["tpot_definition"]


def test_vllm_defaults_leave_p90_and_e2e_unset_and_read_a_finite_rate(tmp_path):
    """vLLM's defaults: --metric-percentiles 99, --percentile-metrics ttft,tpot,itl (no e2el)."""
    d = {k: v for k, v in VLLM.items() if not (k.startswith("p90_") or k.endswith("e2el_ms"))}
    d.update(request_rate=2.5, max_concurrency=None)
    [run] = read_benchmark(_write(tmp_path, "vllm.json", json.dumps(d)))
    assert run["ttft_ms"] == _stats(120.5, 110.25, None, 190.75)
    assert run["e2e_ms"] == _stats()
    assert (run["rate_per_s"], run["concurrency"]) == (2.5, None)


def test_vllm_append_result_gives_one_run_per_line(tmp_path):
    """--append-result writes "\\n" and then one more json.dump per run."""
    second = {**VLLM, "max_concurrency": 32, "completed": 100, "total_input_tokens": 51200}
    runs = read_benchmark(_write(tmp_path, "vllm.json", json.dumps(VLLM) + "\n" + json.dumps(second)))
    assert [(r["run"], r["concurrency"], r["isl"]) for r in runs] == [(0, 16, 1024.0), (1, 32, 512.0)]


def test_sglang_jsonl_of_two_runs_gives_two_dicts(tmp_path):
    second = {**SGLANG, "request_rate": 4.0, "max_concurrency": None, "completed": 200,
              "total_output_tokens": 25600}
    text = json.dumps(SGLANG) + "\n" + json.dumps(second) + "\n"
    assert "Infinity" in text  # what json.dumps(float("inf")) writes, as bench_serving does
    runs = read_benchmark(_write(tmp_path, "sglang_0101_400_1024_256.jsonl", text))
    assert len(runs) == 2
    first, last = runs
    assert set(first) == KEYS
    assert first == {
        "format": "sglang", "run": 0, "model": None, "concurrency": 32, "rate_per_s": None, "requests": 400,
        "isl": 409600 / 400, "osl": 102400 / 400, "ttft_ms": _stats(250.0, 240.0, None, 400.0),
        "tpot_ms": _stats(14.25, 14.0, None, 18.0), "itl_ms": _stats(14.0, 13.5, None, 45.0),
        "e2e_ms": _stats(3900.0, 3800.0, None, 4500.0), "output_tokens_per_s": 2048.0, "requests_per_s": 8.0,
        "tpot_definition": TPOT_DEFINITIONS["sglang"],
    }
    assert (last["run"], last["rate_per_s"], last["concurrency"], last["osl"]) == (1, 4.0, None, 25600 / 200)


def test_sglang_measured_concurrency_is_not_the_cap(tmp_path):
    """SGLang's 'concurrency' is the measured mean (31.2 here); the cap is max_concurrency."""
    [run] = read_benchmark(_write(tmp_path, "s.jsonl", json.dumps({**SGLANG, "max_concurrency": None})))
    assert run["concurrency"] is None


def test_aiperf_in_ms(tmp_path):
    [run] = read_benchmark(_write(tmp_path, "profile_export_aiperf.json", json.dumps(_aiperf(), indent=2)))
    assert set(run) == KEYS
    assert run == {
        "format": "aiperf", "run": 0, "model": "Qwen/Qwen3-8B", "concurrency": 8, "rate_per_s": None,
        "requests": 100, "isl": 102400 / 100, "osl": 25500 / 100,
        "ttft_ms": _stats(180.0, 170.0, 220.0, 260.0), "tpot_ms": _stats(9.5, 9.25, 11.0, 12.5),
        "itl_ms": _stats(9.0, 8.5, 10.5, 14.0), "e2e_ms": _stats(2500.0, 2400.0, 2900.0, 3100.0),
        "output_tokens_per_s": 890.0, "requests_per_s": 3.5, "tpot_definition": TPOT_DEFINITIONS["aiperf"],
    }


def test_aiperf_in_ns_is_converted_to_ms(tmp_path):
    """AIPerf's metrics are recorded in ns (MetricTimeUnit.NANOSECONDS); an export left in ns reads the same."""
    d = _aiperf(unit="ns", scale=1e6)
    d["input_config"]["loadgen"] = {"request_rate": 2.5}
    [run] = read_benchmark(_write(tmp_path, "profile_export_aiperf.json", json.dumps(d)))
    assert run["ttft_ms"] == pytest.approx(_stats(180.0, 170.0, 220.0, 260.0), rel=1e-12)
    assert run["e2e_ms"] == pytest.approx(_stats(2500.0, 2400.0, 2900.0, 3100.0), rel=1e-12)
    assert (run["rate_per_s"], run["concurrency"]) == (2.5, None)


def test_aiperf_without_totals_uses_the_per_request_means(tmp_path):
    d = _aiperf()
    del d["total_isl"], d["total_osl"]
    [run] = read_benchmark(_write(tmp_path, "a.json", json.dumps(d)))
    assert (run["isl"], run["osl"]) == (1000.0, 255.0)


def test_genai_perf(tmp_path):
    [run] = read_benchmark(_write(tmp_path, "profile_export_genai_perf.json", json.dumps(GENAI_PERF, indent=2)))
    assert set(run) == KEYS
    assert run == {
        "format": "genai-perf", "run": 0, "model": "llama-3-8b", "concurrency": 4, "rate_per_s": None,
        "requests": 120, "isl": 2048.0, "osl": 250.5, "ttft_ms": _stats(150.0, 140.0, 190.0, 240.0),
        "tpot_ms": _stats(8.5, 8.25, 9.5, 11.0), "itl_ms": _stats(), "e2e_ms": _stats(2000.0, 1950.0, 2300.0, 2600.0),
        "output_tokens_per_s": 1000.0, "requests_per_s": 4.0, "tpot_definition": TPOT_DEFINITIONS["genai-perf"],
    }


def test_genai_perf_before_the_config_tree(tmp_path):
    """Before 2025-03 input_config was vars(args): model (a list), concurrency, request_rate."""
    d = {**GENAI_PERF, "input_config": {"model": ["gpt2"], "concurrency": None, "request_rate": 3.0}}
    [run] = read_benchmark(_write(tmp_path, "g.json", json.dumps(d)))
    assert (run["format"], run["model"], run["concurrency"], run["rate_per_s"]) == ("genai-perf", "gpt2", None, 3.0)


def test_inferencex_row(tmp_path):
    [run] = read_benchmark(_write(tmp_path, "agg_dsr1.json", json.dumps(INFX_ROW, indent=2)))
    assert set(run) == KEYS
    assert run == {
        "format": "inferencex", "run": 0, "model": "deepseek-ai/DeepSeek-R1-0528", "concurrency": 64,
        "rate_per_s": None, "requests": None, "isl": 1024.0, "osl": 1024.0,
        "ttft_ms": _stats(500.0, 250.0, 750.0, 1500.0), "tpot_ms": _stats(31.25, 31.25, 39.0625, 46.875),
        "itl_ms": _stats(31.25, 31.25, 62.5, 125.0), "e2e_ms": _stats(32500.0, 32000.0, 40000.0, 48000.0),
        "output_tokens_per_s": 450.0 * 8, "requests_per_s": None, "tpot_definition": TPOT_DEFINITIONS["inferencex"],
    }


def test_inferencex_collected_array_and_multinode_gpu_count(tmp_path):
    """utils/collect_results.py writes a JSON array of rows; a multinode row divides output by decode GPUs."""
    multi = {k: v for k, v in INFX_ROW.items() if k not in ("tp", "pp", "pcp_size")}
    multi.update(is_multinode=True, num_prefill_gpu=8, num_decode_gpu=16, conc=256)
    runs = read_benchmark(_write(tmp_path, "agg_bmk.json", json.dumps([INFX_ROW, multi])))
    assert [(r["run"], r["concurrency"], r["output_tokens_per_s"]) for r in runs] == [(0, 64, 3600.0),
                                                                                       (1, 256, 450.0 * 16)]


def test_inferencex_raw_benchmark_serving_result(tmp_path):
    """InferenceX's copy of benchmark_serving.py adds benchmark_start_time_unix; otherwise vLLM's keys."""
    d = {**VLLM, "benchmark_start_time_unix": 1.7e9, "benchmark_end_time_unix": 1.7e9 + 40, "p99.9_ttft_ms": 200.0}
    [run] = read_benchmark(_write(tmp_path, "dsr1_fp8.json", json.dumps(d)))
    assert (run["format"], run["requests"], run["isl"]) == ("inferencex", 200, 1024.0)
    assert run["ttft_ms"] == _stats(120.5, 110.25, 150.0, 190.75)


def test_every_format_has_a_tpot_definition():
    assert set(TPOT_DEFINITIONS) == set(FORMATS) and STATS == ("mean", "median", "p90", "p99")
    assert all(0 < len(s) <= 200 for s in TPOT_DEFINITIONS.values())


def test_a_path_string_and_a_bom_are_accepted(tmp_path):
    p = tmp_path / "bom.json"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(VLLM).encode())
    assert read_benchmark(str(p))[0]["requests"] == 200


# ---- errors: each names the file and the rule -------------------------------------------------------------
def _error(path) -> str:
    with pytest.raises(SpecError) as e:
        read_benchmark(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path) + ":")
    return msg


def test_missing_file(tmp_path):
    assert "no such file" in _error(tmp_path / "nope.json")


def test_directory(tmp_path):
    assert "is a directory" in _error(tmp_path)


def test_unreadable_file(tmp_path, monkeypatch):
    """A permission error (simulated: chmod 0 does not stop root, which CI may run as)."""
    p = _write(tmp_path, "locked.json", json.dumps(VLLM))

    def denied(self):
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(Path, "read_bytes", denied)
    msg = _error(p)
    assert "cannot be read (Permission denied)" in msg


def test_undecodable_bytes(tmp_path):
    p = tmp_path / "latin1.json"
    p.write_bytes(b'{"model_id": "caf\xe9"}')
    msg = _error(p)
    assert "not UTF-8 text" in msg and "0xe9" in msg and "offset 17" in msg


def test_invalid_json_says_line_and_column(tmp_path):
    msg = _error(_write(tmp_path, "bad.json", '{\n  "completed": 3,\n  "mean_ttft_ms": ,\n}'))
    assert "invalid JSON at line 3 column 19" in msg


def test_invalid_json_on_a_later_line_of_jsonl(tmp_path):
    msg = _error(_write(tmp_path, "runs.jsonl", json.dumps(SGLANG) + "\n" + '{"completed": 1,'))
    assert "invalid JSON at line 2" in msg


def test_empty_file(tmp_path):
    assert "empty file" in _error(_write(tmp_path, "empty.json", " \n\n"))


@pytest.mark.parametrize("text, kind", [("[1, 2]", "an array"), ('"hello"', "a string"), ("3.5", "a number"),
                                        ("null", "null"), ("[]", "an empty JSON array")])
def test_json_that_is_not_an_object(tmp_path, text, kind):
    msg = _error(_write(tmp_path, "scalar.json", text))
    assert kind in msg and ("not an object" in msg or "expected a benchmark result object" in msg)


def test_vllm_pytorch_side_file_is_pointed_at_the_result(tmp_path):
    side = [{"benchmark": {"name": "vLLM benchmark"}, "model": {"name": "m"}, "metric": {"name": "p99_ttft_ms"}}]
    assert ".pytorch.json side file" in _error(_write(tmp_path, "r.pytorch.json", json.dumps(side)))


def test_an_object_of_none_of_the_formats(tmp_path):
    msg = _error(_write(tmp_path, "my.json", json.dumps({"throughput": 3})))
    assert msg == (f"{tmp_path / 'my.json'}: not a benchmark result this reads (no 'mean_ttft_ms' or AIPerf "
                   "'time_to_first_token' key); reads vllm bench serve, SGLang bench_serving, AIPerf, GenAI-Perf, "
                   "InferenceX JSON")


def test_aiperf_per_request_records_are_pointed_at_the_summary(tmp_path):
    record = {"metadata": {"session_num": 0}, "metrics": {"request_latency": {"value": 3.0, "unit": "ms"}}}
    assert "profile_export_aiperf.json" in _error(_write(tmp_path, "profile_export.jsonl", json.dumps(record)))


def test_zero_completed_requests(tmp_path):
    msg = _error(_write(tmp_path, "v.json", json.dumps({**VLLM, "completed": 0})))
    assert "'completed' is 0" in msg and "no completed requests" in msg


def test_zero_completed_requests_aiperf(tmp_path):
    d = _aiperf()
    d["request_count"]["avg"] = 0
    assert "'request_count.avg' is 0" in _error(_write(tmp_path, "a.json", json.dumps(d)))


def test_missing_completed(tmp_path):
    d = {k: v for k, v in VLLM.items() if k != "completed"}
    assert "no 'completed' key" in _error(_write(tmp_path, "v.json", json.dumps(d)))


def test_negative_latency(tmp_path):
    msg = _error(_write(tmp_path, "v.json", json.dumps({**VLLM, "p99_tpot_ms": -3.0})))
    assert "'p99_tpot_ms' is -3" in msg and ">= 0" in msg


@pytest.mark.parametrize("literal, shown", [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity")])
def test_non_finite_latency_is_never_passed_on(tmp_path, literal, shown):
    text = json.dumps(VLLM).replace('"mean_ttft_ms": 120.5', f'"mean_ttft_ms": {literal}')
    msg = _error(_write(tmp_path, "v.json", text))
    assert f"'mean_ttft_ms' is {shown}" in msg and "must be finite" in msg


def test_non_finite_latency_in_aiperf_names_the_metric(tmp_path):
    text = json.dumps(_aiperf()).replace('"p99": 260.0', '"p99": NaN')
    assert "'time_to_first_token.p99' is NaN" in _error(_write(tmp_path, "a.json", text))


def test_a_bad_run_of_a_jsonl_names_its_line(tmp_path):
    text = json.dumps(SGLANG) + "\n\n" + json.dumps({**SGLANG, "mean_ttft_ms": -1})
    assert _error(_write(tmp_path, "s.jsonl", text)).startswith(f"{tmp_path / 's.jsonl'}: line 3: 'mean_ttft_ms'")


def test_a_bad_row_of_an_inferencex_array_names_its_row(tmp_path):
    rows = [INFX_ROW, {**INFX_ROW, "mean_ttft": -0.5}]
    assert ": row 1: 'mean_ttft' is -0.5" in _error(_write(tmp_path, "agg_bmk.json", json.dumps(rows)))


def test_unknown_time_unit(tmp_path):
    d = _aiperf()
    d["request_latency"]["unit"] = "minutes"
    msg = _error(_write(tmp_path, "a.json", json.dumps(d)))
    assert "'request_latency' has unit 'minutes'" in msg and "ns, us, ms, sec" in msg


def test_a_throughput_not_per_second(tmp_path):
    d = _aiperf()
    d["output_token_throughput"]["unit"] = "tokens/min"
    assert "expected a rate per second" in _error(_write(tmp_path, "a.json", json.dumps(d)))


@pytest.mark.parametrize("key, value, rule", [
    ("mean_ttft_ms", "fast", "expected a number"), ("mean_ttft_ms", True, "expected a number"),
    ("completed", 2.5, "expected a whole number"), ("max_concurrency", 0, "at least 1"),
    ("request_rate", 0, "a request rate is > 0"), ("model_id", 7, "expected the model name as a string"),
])
def test_values_of_the_wrong_kind(tmp_path, key, value, rule):
    msg = _error(_write(tmp_path, "v.json", json.dumps({**VLLM, key: value})))
    assert f"'{key}'" in msg and rule in msg
