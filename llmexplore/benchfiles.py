"""Readers for the result files real end-to-end serving benchmarks write, so that a user's own measurements can
be set beside the serving simulator (``llmexplore validate --e2e --data FILE``).

:func:`read_benchmark` reads one file and returns one plain dict per benchmark run in it, whatever tool wrote it:
``format``, ``run``, ``model``, ``concurrency``, ``rate_per_s``, ``requests``, ``isl``, ``osl``, ``ttft_ms``,
``tpot_ms``, ``itl_ms``, ``e2e_ms`` (each ``{"mean", "median", "p90", "p99"}``), ``output_tokens_per_s``,
``requests_per_s`` and ``tpot_definition``; None wherever the file does not say. The format is told from the
keys, never from the file name. Every key below was read from the writer's own source:

* ``vllm``: ``vllm bench serve --save-result`` (vllm-project/vllm ``vllm/benchmarks/serve.py`` at 009e6d4a1cd6,
  ``benchmark()``'s ``result`` dict and ``main_async``'s ``result_json``). Flat keys: ``model_id``,
  ``max_concurrency`` (null when unset), ``request_rate`` (a number, or the string ``"inf"``), ``completed``,
  ``total_input_tokens``, ``total_output_tokens``, ``request_throughput``, ``output_throughput`` and, per metric
  ``ttft``/``tpot``/``itl``/``e2el``, ``mean_<m>_ms``, ``median_<m>_ms``, ``std_<m>_ms`` and ``p<P>_<m>_ms`` for
  each ``--metric-percentiles`` P (default ``99`` only, so ``p90`` is None unless asked for; ``e2el`` is written
  only when ``--percentile-metrics`` names it, and ttft/tpot/itl only with a tokenizer). ``--append-result``
  appends one object per line, so a vLLM file may hold several runs, like SGLang's.
* ``sglang``: ``python -m sglang.bench_serving`` (sgl-project/sglang ``python/sglang/bench_serving.py`` at
  0033168f0f58, ``benchmark()``'s ``result`` dict): one JSON object per line, *appended* per run
  (``--output-file``, a ``.jsonl``). Keys as vLLM's, except ``mean/median/std/p99_e2e_latency_ms`` for the
  end-to-end latency, ``total_output_tokens_retokenized``, only ``p99`` (and ``p95_itl_ms``; later versions add
  ``p90_*``), no model name, and ``request_rate`` written as a JSON ``Infinity`` when unset. Its ``concurrency``
  key is the *measured* mean concurrency (sum of latencies / duration); the closed-loop cap is ``max_concurrency``.
* ``aiperf``: NVIDIA AIPerf's ``profile_export_aiperf.json`` (ai-dynamo/aiperf at db4f6397d11e:
  ``aiperf/exporters/json_exporter.py``, ``aiperf/common/models/export_models.py`` ``JsonExportData`` /
  ``JsonMetricResult``). Each metric is an object ``{"unit", "avg", "p1" ... "p50" ... "p90", "p95", "p99",
  "min", "max", "std"}`` under its tag: ``time_to_first_token``, ``inter_token_latency``, ``inter_chunk_latency``,
  ``request_latency``, ``request_count``, ``total_isl``, ``total_osl``, ``input_sequence_length``,
  ``output_sequence_length``, ``request_throughput``, ``output_token_throughput``. Time units are the display unit
  of ``aiperf/common/enums/metric_enums.py`` ``MetricTimeUnit`` (``ns``, ``us``, ``ms``, ``sec``); this reads
  any of them and converts to ms. The run's settings are under ``input_config`` (``UserConfig``, dumped with
  ``exclude_unset``): ``endpoint.model_names`` and ``loadgen.concurrency`` / ``loadgen.request_rate``.
  AIPerf's ``inter_token_latency`` is per request (request_latency - ttft) / (osl - 1)
  (``aiperf/metrics/types/inter_token_latency_metric.py``), i.e. what vLLM calls TPOT, so it is read into
  ``tpot_ms``; ``itl_ms`` is its ``inter_chunk_latency`` (gaps between streamed chunks, pooled over requests).
* ``genai-perf``: Triton GenAI-Perf's ``profile_export_genai_perf.json`` (triton-inference-server/perf_analyzer
  at 263c5f6e0c7a: ``genai-perf/genai_perf/export_data/json_exporter.py``, ``metrics/statistics.py``,
  ``metrics/llm_metrics.py``, ``profile_data_parser/llm_profile_data_parser.py``). The same metric objects as
  AIPerf's (AIPerf copied them), time in ``ms``; ``request_count``, ``input_sequence_length`` and
  ``output_sequence_length`` give the counts (no totals). Its ``inter_token_latency`` is per request
  round((request_latency - ttft) / (output tokens - 1)): TPOT again; it exports no chunk-level ITL, so ``itl_ms``
  is all None. ``input_config`` is the config tree (``model_names``, ``perf_analyzer.stimulus`` =
  ``{"concurrency": N}`` or ``{"request_rate": R}``) or, before 2025-03, the flat argparse namespace (``model``,
  ``concurrency``, ``request_rate``); both are read.
* ``inferencex``: SemiAnalysis InferenceX (formerly InferenceMAX; SemiAnalysisAI/InferenceX at 843c6254ff69).
  Two shapes. (1) A benchmark row, ``agg_<RESULT_FILENAME>.json`` from ``utils/process_result.py``, or an array
  of rows, ``agg_bmk.json`` from ``utils/collect_results.py``: ``hw``, ``model`` (the run's ``model_id``),
  ``conc``, ``isl``, ``osl``, ``tp``/``pp``/``pcp_size`` or the ``prefill_*``/``decode_*`` topology,
  ``output_tput_per_gpu``, and every ``*_ms`` key of the underlying vLLM result converted to *seconds* with
  ``_ms`` removed (``mean_ttft``, ``p99_e2el``, ...). Such a row holds no request count, no request rate and no
  token totals: ``requests`` and ``requests_per_s`` are None, ``output_tokens_per_s`` is
  ``output_tput_per_gpu`` times the GPU count process_result.py divided by (tp * pp * pcp_size on one node; the
  decode GPUs, or all if none, on several), and ``isl``/``osl`` are the harness's *configured*
  ``--random-input-len``/``--random-output-len``, not measured means (with ``--random-range-ratio`` 0.8 the mean
  is about 10 % lower). (2) The raw ``<RESULT_FILENAME>.json`` that InferenceX's copy of vLLM's
  ``benchmark_serving.py`` writes (``utils/bench_serving/benchmark_serving.py``, told apart from vLLM's by its
  ``benchmark_start_time_unix`` key), read exactly as ``vllm``; ``benchmarks/benchmark_lib.sh`` runs it with
  ``--max-concurrency``, ``--request-rate inf`` and percentiles 90, 99, 99.9.

A file is one JSON value or several concatenated (JSON Lines): vLLM's and SGLang's appended runs, one per line.
Anything this cannot read faithfully raises :class:`~llmexplore.errors.SpecError` with one line naming the file
(and, in a file of several runs, the line where the run starts, or the row of an InferenceX array), the key and
the rule; a NaN, an infinite or a negative latency is an error, never a value passed on.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ._check import shown
from .errors import SpecError

__all__ = ["FORMATS", "STATS", "read_benchmark"]

#: the ``format`` values :func:`read_benchmark` returns
FORMATS = ("vllm", "sglang", "aiperf", "genai-perf", "inferencex")
#: the statistics of each latency dict, in this order
STATS = ("mean", "median", "p90", "p99")
#: the latency dicts of a run, each ``{stat: ms}``
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")

# How each writer computes TPOT, read from its calculate_metrics / metric class (module docstring).
_VLLM_TPOT = "(e2e - ttft) / (output tokens - 1) per request with > 1 output token, then averaged over requests"
TPOT_DEFINITIONS = {
    "vllm": _VLLM_TPOT,
    "sglang": _VLLM_TPOT,  # sglang bench_serving.calculate_metrics: same per-request formula as vLLM's
    "aiperf": "AIPerf inter_token_latency: (request_latency - ttft) / (output_sequence_length - 1) per request "
              "with >= 2 output tokens (reasoning tokens counted), statistics over requests",
    "genai-perf": "GenAI-Perf inter_token_latency: (request_latency - ttft) / (output tokens - 1) per request "
                  "with > 1 response and > 1 token, rounded to ns, statistics over requests",
    "inferencex": "vLLM's, from InferenceX's benchmark_serving.py: " + _VLLM_TPOT,
}

#: AIPerf MetricTimeUnit tags (and "s", which a hand-written file may use) -> milliseconds per unit
_MS_PER_UNIT = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "sec": 1000.0, "s": 1000.0}
#: the statistic of AIPerf / GenAI-Perf metric objects behind each of STATS
_PERF_STAT_KEYS = {"mean": "avg", "median": "p50", "p90": "p90", "p99": "p99"}
#: vLLM-style flat keys behind each of STATS, given the metric's name inside the key
_FLAT_STAT_KEYS = {"mean": "mean_{}_ms", "median": "median_{}_ms", "p90": "p90_{}_ms", "p99": "p99_{}_ms"}
#: InferenceX rows: process_result.py strips "_ms" and stores seconds
_INFX_STAT_KEYS = {"mean": "mean_{}", "median": "median_{}", "p90": "p90_{}", "p99": "p99_{}"}
_MS_PER_S = 1000.0
_RATE_UNSET = ("inf", "infinity", "trace", "")  # vLLM writes "inf", SGLang "trace" for timestamped traces

_UNKNOWN = ("not a benchmark result this reads (no 'mean_ttft_ms' or AIPerf 'time_to_first_token' key); reads "
            "vllm bench serve, SGLang bench_serving, AIPerf, GenAI-Perf, InferenceX JSON")


def read_benchmark(path) -> list[dict]:
    """One dict per benchmark run in the file."""
    name = str(path)
    docs = _documents(name, _text(name, Path(path)))
    many = len(docs) > 1
    runs: list[dict] = []
    for line, doc in docs:
        where = f"{name}: line {line}" if many else name
        if isinstance(doc, list):
            if many:
                raise SpecError(f"{where}: a JSON array inside a file of several JSON values; each line must be "
                                "one benchmark result object")
            rows = _inferencex_rows(where, doc)
            runs += [_run(f"{where}: row {i}", row, len(runs) + i) for i, row in enumerate(rows)]
            continue
        if not isinstance(doc, dict):
            raise SpecError(f"{where}: the JSON value is {_kind(doc)}, not an object; a benchmark result is a "
                            "JSON object (one per line in JSON Lines)")
        runs.append(_run(where, doc, len(runs)))
    return runs


# ---- file -> JSON values ---------------------------------------------------------------------------------------
def _text(name: str, p: Path) -> str:
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise SpecError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise SpecError(f"{name}: is a directory; give the benchmark result file itself") from None
    except OSError as e:
        if p.is_dir():  # Windows reports a directory as PermissionError
            raise SpecError(f"{name}: is a directory; give the benchmark result file itself") from None
        raise SpecError(f"{name}: cannot be read ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8-sig")  # -sig: a BOM some editors write is not part of the JSON
    except UnicodeDecodeError as e:
        raise SpecError(f"{name}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); benchmark "
                        "results are JSON text") from None
    if not text.strip():
        raise SpecError(f"{name}: empty file; expected a benchmark result JSON object (or one per line)")
    return text


def _documents(name: str, text: str) -> list[tuple[int, object]]:
    """(line it starts on, value) of each JSON value in ``text``: one for a .json, one per run for JSON Lines.
    raw_decode reads concatenated values, so a pretty-printed object followed by another is read too."""
    decoder = json.JSONDecoder()
    out = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos >= end:
            return out
        try:
            value, after = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:  # its lineno / colno count from the file's start
            raise SpecError(f"{name}: invalid JSON at line {e.lineno} column {e.colno} ({e.msg})") from None
        except RecursionError:  # arrays or objects nested thousands deep
            raise SpecError(f"{name}: the JSON nests its arrays or objects too deeply to read (no benchmark file "
                            "does)") from None
        except ValueError as e:  # an integer of more than 4,300 digits
            raise SpecError(f"{name}: the JSON holds a number too long to read ({str(e).split(';')[0]})") from None
        out.append((text.count("\n", 0, pos) + 1, value))
        pos = after


def _kind(v) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(v), "a number")


# ---- one JSON object -> one run -------------------------------------------------------------------------------
def _detect(d: dict) -> str | None:
    if "tput_per_gpu" in d or "infmax_model_prefix" in d:
        return "inferencex"
    if "mean_e2e_latency_ms" in d or "total_output_tokens_retokenized" in d:
        return "sglang"  # vLLM names the end-to-end latency e2el and never retokenizes
    if any(f"mean_{m}_ms" in d for m in ("ttft", "tpot", "itl", "e2el")):
        return "inferencex" if "benchmark_start_time_unix" in d else "vllm"
    if any(isinstance(d.get(k), dict) and "unit" in d[k] for k in ("time_to_first_token", "request_latency")):
        return "aiperf" if _is_aiperf(d) else "genai-perf"
    return None


def _is_aiperf(d: dict) -> bool:
    """AIPerf's JsonExportData always sets was_cancelled / error_summary; its input_config nests the model under
    endpoint (GenAI-Perf's holds model_names at the top of input_config, or the flat 'model')."""
    cfg = d.get("input_config")
    endpoint = cfg.get("endpoint") if isinstance(cfg, dict) else None
    return ("was_cancelled" in d or "error_summary" in d
            or (isinstance(endpoint, dict) and "model_names" in endpoint)
            or (isinstance(cfg, dict) and "loadgen" in cfg))


def _run(where: str, d: dict, index: int) -> dict:
    fmt = _detect(d)
    if fmt is None:
        raise SpecError(f"{where}: {_UNKNOWN}{_hint(d)}")
    if fmt == "inferencex" and ("tput_per_gpu" in d or "infmax_model_prefix" in d):
        run = _inferencex_row(where, d)
    elif fmt in ("vllm", "inferencex"):
        run = _flat(where, d, e2e_key="e2el")
    elif fmt == "sglang":
        run = _flat(where, d, e2e_key="e2e_latency")
    else:
        run = _perf(where, d, fmt)
    return {"format": fmt, "run": index, **run, "tpot_definition": TPOT_DEFINITIONS[fmt]}


def _hint(d: dict) -> str:
    """A pointer to the right file when ``d`` is a sibling file of one this reads."""
    if "metrics" in d and "metadata" in d:
        return " (this looks like AIPerf's per-request profile_export.jsonl; give profile_export_aiperf.json)"
    if "experiments" in d:
        return (" (this looks like perf_analyzer's profile_export.json; give GenAI-Perf's "
                "profile_export_genai_perf.json)")
    return ""


def _flat(where: str, d: dict, e2e_key: str) -> dict:
    """vLLM's, SGLang's and InferenceX's raw result: flat ``<stat>_<metric>_ms`` keys and token totals."""
    completed = _count(where, d, "completed", required=True)
    sglang = e2e_key == "e2e_latency"
    model = _string(where, d, "model_id") or _string(where, d, "model")
    if model is None and sglang and isinstance(d.get("server_info"), dict):  # later SGLang: /get_server_info
        model = _string(f"{where}: server_info", d["server_info"], "model_path")
    return {
        "model": model,
        "concurrency": _concurrency(where, d, "max_concurrency"),
        "rate_per_s": _rate(where, d, "request_rate"),
        "requests": completed,
        "isl": _per_request(where, d, "total_input_tokens", completed),
        "osl": _per_request(where, d, "total_output_tokens", completed),
        "ttft_ms": _flat_stats(where, d, "ttft", _FLAT_STAT_KEYS),
        "tpot_ms": _flat_stats(where, d, "tpot", _FLAT_STAT_KEYS),
        "itl_ms": _flat_stats(where, d, "itl", _FLAT_STAT_KEYS),
        "e2e_ms": _flat_stats(where, d, e2e_key, _FLAT_STAT_KEYS),
        "output_tokens_per_s": _number(where, d, "output_throughput"),
        "requests_per_s": _number(where, d, "request_throughput"),
    }


def _inferencex_rows(where: str, rows: list) -> list[dict]:
    """An array is read only as InferenceX's collected agg_bmk.json: every element a benchmark row."""
    if not rows:
        raise SpecError(f"{where}: an empty JSON array; expected a benchmark result object")
    for i, row in enumerate(rows):
        if not (isinstance(row, dict) and ("tput_per_gpu" in row or "infmax_model_prefix" in row)):
            hint = ""
            if isinstance(row, dict) and "benchmark" in row and "metric" in row:
                hint = " (this looks like vLLM's .pytorch.json side file; give the result .json beside it)"
            raise SpecError(f"{where}: the JSON value is an array, not an object; only an InferenceX agg_bmk.json "
                            f"array of benchmark rows is read, and row {i} is not one{hint}")
    return rows


def _inferencex_row(where: str, d: dict) -> dict:
    """An InferenceX benchmark row (utils/process_result.py): latencies in seconds, no counts (docstring)."""
    def stats(metric: str) -> dict:
        s = _flat_stats(where, d, metric, _INFX_STAT_KEYS)
        return {k: None if v is None else v * _MS_PER_S for k, v in s.items()}

    return {
        "model": _string(where, d, "model"),
        "concurrency": _concurrency(where, d, "conc"),
        "rate_per_s": None,
        "requests": None,
        "isl": _number(where, d, "isl"),
        "osl": _number(where, d, "osl"),
        "ttft_ms": stats("ttft"),
        "tpot_ms": stats("tpot"),
        "itl_ms": stats("itl"),
        "e2e_ms": stats("e2el"),
        "output_tokens_per_s": _inferencex_output_rate(where, d),
        "requests_per_s": None,
    }


def _inferencex_output_rate(where: str, d: dict) -> float | None:
    """Undo process_result.py's per-GPU division of the run's output_throughput."""
    per_gpu = _number(where, d, "output_tput_per_gpu")
    if per_gpu is None:
        return None
    if d.get("is_multinode"):
        decode = _count(where, d, "num_decode_gpu")
        prefill = _count(where, d, "num_prefill_gpu")
        if decode is None or prefill is None:
            return None
        gpus = decode if decode > 0 else decode + prefill
    else:
        tp = _count(where, d, "tp")
        if tp is None:
            return None
        # pp and pcp_size arrived later; process_result.py defaults both to 1
        gpus = tp * (_count(where, d, "pp") or 1) * (_count(where, d, "pcp_size") or 1)
    if gpus <= 0:
        raise SpecError(f"{where}: the row's GPU count is {gpus}; output_tput_per_gpu needs at least one GPU")
    return per_gpu * gpus


def _perf(where: str, d: dict, fmt: str) -> dict:
    """AIPerf's and GenAI-Perf's metric objects ({unit, avg, p50, p90, p99, ...}) and their input_config."""
    cfg = d.get("input_config")
    cfg = cfg if isinstance(cfg, dict) else {}
    if fmt == "aiperf":
        model = _models(f"{where}: input_config.endpoint", _sub(cfg, "endpoint"), "model_names")
        load, load_where = _sub(cfg, "loadgen"), f"{where}: input_config.loadgen"
    else:
        model = (_models(f"{where}: input_config", cfg, "model_names")
                 or _models(f"{where}: input_config", cfg, "model"))
        stimulus = _sub(_sub(cfg, "perf_analyzer"), "stimulus")
        load, load_where = ((stimulus, f"{where}: input_config.perf_analyzer.stimulus") if stimulus
                            else (cfg, f"{where}: input_config"))  # before 2025-03: flat argparse namespace
    requests = _perf_count(where, d, "request_count")
    return {
        "model": model,
        "concurrency": _concurrency(load_where, load, "concurrency"),
        "rate_per_s": _rate(load_where, load, "request_rate"),
        "requests": requests,
        "isl": _perf_tokens(where, d, "total_isl", "input_sequence_length", requests),
        "osl": _perf_tokens(where, d, "total_osl", "output_sequence_length", requests),
        "ttft_ms": _perf_times(where, d, "time_to_first_token"),
        "tpot_ms": _perf_times(where, d, "inter_token_latency"),
        "itl_ms": _perf_times(where, d, "inter_chunk_latency"),  # absent from GenAI-Perf's export: all None
        "e2e_ms": _perf_times(where, d, "request_latency"),
        "output_tokens_per_s": _perf_rate(where, d, "output_token_throughput"),
        "requests_per_s": _perf_rate(where, d, "request_throughput"),
    }


def _sub(d: dict, key: str) -> dict:
    v = d.get(key)
    return v if isinstance(v, dict) else {}


def _metric(where: str, d: dict, tag: str) -> dict | None:
    m = d.get(tag)
    if m is None:
        return None
    if not isinstance(m, dict):
        raise SpecError(f"{where}: '{tag}' is {_kind(m)}; AIPerf / GenAI-Perf metrics are objects "
                        "{unit, avg, p50, p90, p99, ...}")
    return m


def _perf_times(where: str, d: dict, tag: str) -> dict:
    m = _metric(where, d, tag)
    if m is None:
        return dict.fromkeys(STATS)
    unit = m.get("unit")
    if unit not in _MS_PER_UNIT:
        raise SpecError(f"{where}: '{tag}' has unit {unit!r}, not a time unit this reads "
                        f"({', '.join(_MS_PER_UNIT)})")
    scale = _MS_PER_UNIT[unit]
    out = {}
    for stat, key in _PERF_STAT_KEYS.items():
        v = _number(where, m, key, label=f"{tag}.{key}")
        out[stat] = None if v is None else v * scale
    return out


def _perf_count(where: str, d: dict, tag: str) -> int | None:
    m = _metric(where, d, tag)
    if m is None:
        return None
    n = _count(where, m, "avg", label=f"{tag}.avg")
    if n == 0:
        raise SpecError(f"{where}: '{tag}.avg' is 0; a run with no completed requests has no latencies to "
                        "compare")
    return n


def _perf_tokens(where: str, d: dict, total_tag: str, mean_tag: str, requests: int | None) -> float | None:
    """Mean tokens per request: the file's total / requests where it gives one (AIPerf), else its per-request
    mean (GenAI-Perf)."""
    total = _metric(where, d, total_tag)
    if total is not None and requests:
        t = _number(where, total, "avg", label=f"{total_tag}.avg")
        if t is not None:
            return t / requests
    mean = _metric(where, d, mean_tag)
    return None if mean is None else _number(where, mean, "avg", label=f"{mean_tag}.avg")


def _perf_rate(where: str, d: dict, tag: str) -> float | None:
    m = _metric(where, d, tag)
    if m is None:
        return None
    unit = m.get("unit")
    if not (isinstance(unit, str) and unit.split("/")[-1] in ("sec", "s")):
        raise SpecError(f"{where}: '{tag}' has unit {unit!r}; expected a rate per second (e.g. 'tokens/sec')")
    return _number(where, m, "avg", label=f"{tag}.avg")


# ---- values ------------------------------------------------------------------------------------------------
def _flat_stats(where: str, d: dict, metric: str, keys: dict) -> dict:
    return {stat: _number(where, d, key.format(metric)) for stat, key in keys.items()}


def _number(where: str, d: dict, key: str, label: str | None = None) -> float | None:
    """d[key] as a finite float >= 0, None when absent or null; anything else is an error."""
    v = d.get(key)
    label = label or key
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"{where}: '{label}' is {_kind(v)} ({shown(v)}); expected a number")
    v = float(v)
    if not math.isfinite(v):
        text = "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
        raise SpecError(f"{where}: '{label}' is {text}; latencies, token counts and rates must be finite")
    if v < 0:
        raise SpecError(f"{where}: '{label}' is {v:g}; latencies, token counts and rates must be >= 0")
    return v


def _count(where: str, d: dict, key: str, required: bool = False, label: str | None = None) -> int | None:
    label = label or key
    if d.get(key) is None:
        if required:
            raise SpecError(f"{where}: no '{label}' key (the number of completed requests)")
        return None
    v = _number(where, d, key, label=label)
    if v != int(v):
        raise SpecError(f"{where}: '{label}' is {v:g}; expected a whole number")
    if required and v == 0:
        raise SpecError(f"{where}: '{label}' is 0; a run with no completed requests has no latencies to compare")
    return int(v)


def _per_request(where: str, d: dict, total_key: str, completed: int) -> float | None:
    total = _number(where, d, total_key)
    return None if total is None else total / completed


def _concurrency(where: str, d: dict, key: str) -> int | None:
    if d.get(key) in (None, ""):  # GenAI-Perf's config writes an unset value as ""
        return None
    n = _count(where, d, key)
    if n < 1:
        raise SpecError(f"{where}: '{key}' is {n}; a concurrency cap is at least 1 (null when unset)")
    return n


def _rate(where: str, d: dict, key: str) -> float | None:
    """Requests per second of an open-loop run; None for "send all at once" (inf) or a timestamped trace."""
    v = d.get(key)
    if v is None or (isinstance(v, str) and v.strip().lower() in _RATE_UNSET):
        return None
    if isinstance(v, float) and v == math.inf:  # SGLang json.dumps(float("inf")) -> Infinity
        return None
    r = _number(where, d, key)
    if r == 0:
        raise SpecError(f"{where}: '{key}' is 0; a request rate is > 0 (or inf / null when unset)")
    return r


def _string(where: str, d: dict, key: str) -> str | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise SpecError(f"{where}: '{key}' is {_kind(v)} ({shown(v)}); expected the model name as a string")
    return v


def _models(where: str, d: dict, key: str) -> str | None:
    """A model list (AIPerf / GenAI-Perf --model-names) as the comma-separated string the CLI takes."""
    v = d.get(key)
    if v in (None, "", []):
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return ",".join(v)
    raise SpecError(f"{where}: '{key}' is {_kind(v)} ({shown(v)}); expected a model name or a list of names")
