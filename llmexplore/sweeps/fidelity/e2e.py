"""End-to-end validation of the serving simulator (issue 19 §2, ``llmexplore validate --e2e``): what a user gets,
mean TTFT and TPOT of a real engine under a closed-loop benchmark, against the iteration-level simulator run on
exactly the measured configuration. Never fitted: no number here feeds a calibration.

**The shipped set** (``data/validation/serving_e2e.csv``; its README section and ``extract_aic_silicon.py`` give
the provenance): the 2,873 rows of AIConfigurator's measured sample (ai-dynamo/aiconfigurator 095f58a5,
``systems/silicon_sample.csv``, Apache-2.0) whose model and GPU have presets here: DeepSeek-R1/V3, Llama-3.1-8B
and 70B and Qwen3-32B on H100, H200, B200 and GB200, under TensorRT-LLM, vLLM and SGLang, colocated ("agg") and
disaggregated. Each row is one benchmark: ``silicon_concurrency`` clients in a closed loop with fixed ISL and
OSL, and the measured TTFT and TPOT [ms].

**How a row is simulated** (:func:`row_config`):

* model: the checkpoint's architecture preset (:data:`MODELS`); weights FP8 for ``fp8`` / ``fp8_block``, FP4 for
  ``nvfp4``; KV FP8 wherever the weights are quantised so, BF16 otherwise [assumption: the source gives no KV
  dtype. An engine serves FP8 and NVFP4 GEMMs from a checkpoint quantised that way, and for such a checkpoint
  aiconfigurator itself, the sample's publisher, infers FP8 KV (``quant_algo`` fp8, fp8_block or nvfp4 sets
  ``kvcache_quant_mode`` fp8: aic-core ``sdk/models/helpers.py`` ``_infer_quant_modes_from_raw_config`` at
  095f58a5). The measurements agree where memory decides: Llama-3.1-70B FP4 on one B200 at 64 clients of
  1,024 + 8,192 tokens needs 193 GB of BF16 KV, more than the GPU has, yet was served at 241 ms TTFT];
* colocated: ``concurrency / batch_size`` instances of ``tp_size`` GPUs, ``max_num_seqs`` = ``batch_size`` (the
  engine's max batch, which the sample records), expert parallelism ``moe_ep_size``; weights as
  ``gemm_quant_mode`` says, the checkpoint's own dtype where no precision is recorded;
* attention data parallelism (``attention_dp_size`` D > 1 with ``tp_size`` 1, on either mode's side): a DPA
  instance of D ranks (one scheduler per rank, :mod:`llmexplore.models.serving.simulator`), the recorded batch
  per rank (so ``max_num_seqs`` = D x ``batch_size``, and D x batch clients per instance on the colocated rows),
  MoE TP x EP as recorded, dispatch by all-gather [assumption: the sample records no MoE communication backend.
  TensorRT-LLM selects all-to-all only with multi-node NVLink (GB200) or DeepEP enabled by environment
  variables (``select_alltoall_method_type`` in its fused-MoE modules), AIConfigurator's SGLang templates pass
  ``--enable-dp-attention`` without ``--moe-a2a-backend``, so gather everywhere; on GB200 TensorRT-LLM's MNNVL
  all-to-all is not priced];
* disaggregated: ``prefill_num_workers`` x TP ``prefill_tp_size`` prefill instances (whole prompts, one per
  batch at these fixed lengths, as every such row's ``prefill_batch_size`` of 1 says) and ``decode_num_workers`` x TP ``decode_tp_size`` decode instances of max batch
  ``decode_batch_size``, over the GPU's scale-out link [assumption: the source does not say whether the pools
  shared an NVLink domain]; the closed loop is the disaggregated simulator's fixed point
  (:func:`llmexplore.models.serving.simulator.simulate_disaggregated`);
* runtime: the row's engine preset (``trtllm``, ``vllm``, ``sglang``), so the engine's KV budget and admission
  rule (:mod:`llmexplore.models.serving.engines`); token budget :func:`chunk_tokens`;
* traffic: a closed loop of ``concurrency`` requests, :func:`n_requests` of them; the model's TTFT and TPOT are
  the simulator's means as the benchmark measures them (:data:`ROUNDS`, :func:`round_weights`), and over the
  requests after the first ``concurrency`` (``*_steady_ms``, the synchronised start left out); TPOT per request
  (last token - first token) / (output - 1). The source states neither the statistic nor the TPOT definition
  [assumption: means, per-request TPOT, as aiconfigurator's own comparison treats them: one number per row].

Not simulated, with the reason in ``status``: disaggregated rows whose source records no worker counts, rank
counts the model's heads or experts do not divide (GB200 NVL72 slices of 20-52 GPUs), pipeline parallelism,
attention TP within attention-DP groups, deployments whose weights leave no KV memory, and the 37 rows that record
attention DP over a hybrid MoE TP x EP (16 over 4 x 4, 64 over 8 x 8). Those are taken as mislabelled: 23 of them
repeat, to every digit, the measured TTFT and TPOT of rows with another parallel configuration (attention DP 4 or
8), and their ids name ``tp4_ep4`` or ``tp8_ep8``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ... import _check, presets
from ...errors import SpecError

__all__ = ["E2E_CSV", "MODELS", "SYSTEMS", "CHUNK_TOKENS", "chunk_tokens", "load", "row_config", "n_requests", "round_weights", "ROUNDS",
           "evaluate",
           "summary", "category_table", "evaluate_runs", "METRICS"]

E2E_CSV = presets.DATA_DIR / "validation" / "serving_e2e.csv"
#: checkpoint -> architecture preset
MODELS = {"deepseek-ai/DeepSeek-R1": "deepseek-r1", "deepseek-ai/DeepSeek-V3": "deepseek-v3",
          "nvidia/DeepSeek-R1-NVFP4": "deepseek-r1", "meta-llama/Llama-3.1-70B": "llama-3-70b",
          "meta-llama/Llama-3.1-8B-Instruct": "llama-3-8b", "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3-8b",
          "Qwen/Qwen3-32B": "qwen3-32b", "nvidia/Qwen3-32B-NVFP4": "qwen3-32b"}
#: aiconfigurator system -> GPU preset
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200", "gb200": "gb200"}
WEIGHTS = {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4", "bf16": "bf16", "bfloat16": "bf16"}
#: the KV dtype of a row by its GEMM quantisation (module docstring: aiconfigurator's inference for a checkpoint
#: quantised so)
KV = {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp8", "bf16": "bf16", "bfloat16": "bf16"}
#: token budget of an iteration: TensorRT-LLM's max_num_tokens default 8192 (data/engines.yaml scheduling.trtllm)
#: and vLLM's max_num_batched_tokens for its API server on GPUs of this class [assumption: the sample does not
#: record it]; SGLang's is its own chunked_prefill_size default by GPU memory (chunk_tokens)
CHUNK_TOKENS = 8192
#: requests per simulation: enough for the closed loop to turn over a few times, bounded for speed [modelling
#: choice: the source does not say how many requests each benchmark ran]
MIN_REQUESTS, TURNS, MAX_REQUESTS = 48, 4, 8000
#: rounds of the closed loop the benchmark measures: aiconfigurator's generated benchmark runs AIPerf with
#: ``--num-requests concurrency x 20`` after ``--warmup-request-count concurrency x 2``
#: (src/aiconfigurator/generator/config/backend_templates/benchmark/bench_run.sh.j2, BENCH_MULTI_ROUND default
#: 20; its sflow generator the same with a warmup of ``concurrency``), and AIPerf waits for every warmup request
#: to return before its profiling phase issues the first credits (aiperf/timing/credit_issuing_strategy.py
#: ``_execute_phases`` at ai-dynamo/aiperf db4f6397), so every client starts at once [assumption: the sample's
#: rows were measured this way; the source does not say]
ROUNDS = 20
#: simulations per batch of the process pool (one Parquet part each: run_sweep): small enough to balance the
#: longest-first order over the workers, large enough that writing the parts costs little
CHUNK = 8
METRICS = ("ttft", "tpot")
_CONC = re.compile(r"silicon_concurrency=(\d+)")


def load(path: str | Path | None = None) -> pd.DataFrame:
    """The measured rows (the source's columns) plus ``concurrency`` (the benchmark's clients: the
    ``silicon_concurrency`` of ``silicon_data_source``, else ``batch_size``). SpecError naming the file for a
    file that is not this table. ``path`` None: the shipped :data:`E2E_CSV`."""
    path = E2E_CSV if path is None else path
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot be read as the serving table ({exc})") from None
    need = {"id", "backend", "model_path", "system", "mode", "isl", "osl", "silicon_ttft_ms", "silicon_tpot_ms"}
    if not need <= set(df.columns):
        raise SpecError(f"{path}: not the serving table (missing columns {sorted(need - set(df.columns))})")
    conc = df["silicon_data_source"].astype(str).str.extract(_CONC, expand=False).astype(float)
    fallback = df["batch_size"] if "batch_size" in df else df["decode_batch_size"]
    df["concurrency"] = conc.fillna(fallback)
    return df


def _int(row, col) -> int:
    v = row.get(col)
    return int(v) if v is not None and not (isinstance(v, float) and math.isnan(v)) else 0


def row_config(row) -> tuple[dict, str, int]:
    """(DeploymentConfig JSON, runtime preset, concurrency) of one measured row; SpecError with the reason it
    cannot be simulated (the row's ``status``)."""
    if row["model_path"] not in MODELS:
        raise SpecError(f"not modelled: no preset for {row['model_path']}")
    if row["system"] not in SYSTEMS:
        raise SpecError(f"not modelled: no preset for GPU {row['system']}")
    if not row["concurrency"] > 0:  # NaN too
        raise SpecError("not modelled: the row records no concurrency")
    model = MODELS[row["model_path"]]
    spec = presets.model(model)
    wq = next((row.get(c) for c in ("gemm_quant_mode", "precision") if isinstance(row.get(c), str)),
              spec.weight_dtype)  # no precision recorded (Llama-3.1-8B rows): the checkpoint's own dtype
    if wq not in WEIGHTS:
        raise SpecError(f"not modelled: weight quantisation {wq!r}")
    conc = int(row["concurrency"])
    cfg = {"model": model, "gpu": SYSTEMS[row["system"]], "weight_dtype": WEIGHTS[wq], "kv_dtype": KV[wq],
           "link": None}
    engine, gpu = str(row["backend"]), SYSTEMS[row["system"]]
    if row["mode"] != "agg":
        sides = []
        for role in ("prefill", "decode"):
            if _int(row, f"{role}_num_workers") < 1:
                raise SpecError("not resolved: the source records no prefill and decode worker counts for this "
                                "disaggregated benchmark")
            sides.append(_side(row, f"{role}_", role, spec.is_moe, conc, _int(row, f"{role}_num_workers"),
                               None if role == "prefill" else chunk_tokens(engine, gpu)))
        return {**cfg, "mode": "disaggregated", "sides": sides}, engine, conc
    side = _side(row, "", "colocated", spec.is_moe, conc, None, chunk_tokens(engine, gpu))
    return {**cfg, "mode": "colocated", "sides": [side]}, engine, conc


def _side(row, pre: str, role: str, moe: bool, conc: int, instances: int | None, chunk: int | None) -> dict:
    """One side of a row's configuration from its ``pre``-prefixed parallel columns (module docstring).
    ``instances`` None (colocated): the clients over the instance's batch."""
    if _int(row, f"{pre}pp_size") > 1:
        raise SpecError("not resolved: pipeline parallelism (issue 21)")
    tp, adp = _int(row, f"{pre}tp_size"), max(_int(row, f"{pre}attention_dp_size"), 1)
    if tp < 1:
        raise SpecError(f"not modelled: the row gives no {pre}tp size")
    if adp > 1 and tp > 1:
        raise SpecError(f"not resolved: attention TP {tp} within each of {adp} attention-DP groups (the simulator "
                        f"runs TP or pure DP attention)")
    ranks = tp * adp
    ep = max(_int(row, f"{pre}moe_ep_size"), 1) if moe else 1
    moe_tp = max(_int(row, f"{pre}moe_tp_size"), 1)
    moe_ranks = moe_tp * ep
    if moe and adp > 1 and moe_tp > 1 and ep > 1:
        raise SpecError(f"not modelled: attention DP {adp} with MoE TP {moe_tp} x EP {ep}, recorded so only on rows "
                        f"whose measured TTFT and TPOT repeat to every digit those of rows with attention DP {ep} "
                        f"(and whose ids name tp{ep}_ep{ep}), so the parallel columns are taken as mislabelled")
    if moe and adp > 1 and moe_ranks != ranks:
        raise SpecError(f"not modelled: the row's attention ranks (tp {tp} x dp {adp} = {ranks}) are not its MoE "
                        f"ranks (tp x ep = {moe_ranks}), so its parallel sizes describe no one instance")
    # the recorded batch is per attention-DP rank: clients = batch x dp x instances on the colocated rows
    seqs = (_int(row, f"{pre}batch_size") or -(-conc // adp)) * adp
    if instances is None:
        instances = max(1, conc // seqs)
    return {"role": role, "instances": instances, "ranks": ranks, "layout": "DPA" if adp > 1 else "TP", "ep": ep,
            "max_num_seqs": seqs, "chunk_tokens": chunk}


def chunk_tokens(engine: str, gpu: str) -> int:
    """The iteration's token budget a row's engine runs with by default on ``gpu``: SGLang's chunked_prefill_size
    (:func:`~llmexplore.models.step.engine.sglang_chunked_prefill_size`: 16,384 on B200), else :data:`CHUNK_TOKENS`."""
    from ...models.step.engine import sglang_chunked_prefill_size

    if engine == "sglang":
        return sglang_chunked_prefill_size(presets.hardware(gpu).hbm_GiB)
    return CHUNK_TOKENS


def n_requests(concurrency: int) -> int:
    """Requests simulated for a closed loop of ``concurrency`` clients: ``TURNS`` turns of the loop, at least
    ``MIN_REQUESTS`` after the first, at most ``MAX_REQUESTS`` (the largest loops run fewer turns, never fewer
    than two); :func:`round_weights` turns them into the benchmark's :data:`ROUNDS` rounds."""
    return int(max(min(max(TURNS * concurrency, MIN_REQUESTS + concurrency), MAX_REQUESTS), 2 * concurrency))


def round_weights(n: int, concurrency: int, rounds: int = ROUNDS) -> np.ndarray:
    """Weights [1] over ``n`` simulated requests of a closed loop of ``concurrency`` clients (in submission
    order) that turn their means into those of a ``rounds``-round benchmark: turn ``k // concurrency`` (the last
    holds any remainder); the first turn (every client at once) and the last (the loop draining) count once each,
    the turns between share the other ``rounds - 2`` (with two turns simulated, the second takes them). Sums to 1.
    Simulating every round of the largest loops would cost 5x more for the same steady state."""
    c = max(int(concurrency), 1)
    turns = max(n // c, 1)
    turn = np.minimum(np.arange(n) // c, turns - 1)
    if turns == 1:
        return np.full(n, 1.0 / n)
    per_turn = np.full(turns, (rounds - 2) / max(turns - 2, 1))
    per_turn[0] = 1.0
    per_turn[-1] = 1.0 if turns > 2 else rounds - 1.0
    size = np.bincount(turn, minlength=turns).astype(float)
    return per_turn[turn] / size[turn] / rounds


def _simulate(cfg: dict, runtime: str, isl: int, osl: int, concurrency: int | None, rate_per_s: float | None,
              n: int, *, rounds: int | None = ROUNDS, tables_cache=None) -> dict:
    """The simulator's means on one configuration as the benchmark reports them (``ttft_model_ms``,
    ``tpot_model_ms``: a closed loop that starts every client at once after its warmup drained and runs
    ``rounds`` rounds, :func:`round_weights`; ``rounds`` None, or an open loop: the plain mean over the ``n``
    requests, for a run whose every request is simulated), and over the requests after the first
    ``concurrency`` (``ttft_steady_ms``, ``tpot_steady_ms``: the loop with its synchronised start left out, for
    the sensitivity to how the clients started)."""
    from ..plan import simulate_config

    out = simulate_config(cfg, isl=isl, osl=osl, concurrency=concurrency, rate_per_s=rate_per_s, n_requests=n,
                          runtime=runtime, tables_cache=tables_cache)
    s, req = out["summary"], out["per_request"]
    n_done = len(req["ttft_s"])
    closed = concurrency is not None and concurrency < n_done
    w_bench = (round_weights(n_done, concurrency, rounds) if closed and rounds is not None
               else np.full(n_done, 1.0 / max(n_done, 1)))
    w_steady = np.where(np.arange(n_done) >= (concurrency if closed else 0), 1.0, 0.0)

    def mean_ms(name, w):
        v = np.asarray(req[name], dtype=float)
        ok = np.isfinite(v) & (w > 0)
        return float(np.sum(v[ok] * w[ok]) / np.sum(w[ok])) * 1e3 if ok.any() else np.nan

    return {"ttft_model_ms": mean_ms("ttft_s", w_bench), "tpot_model_ms": mean_ms("tpot_s", w_bench),
            "ttft_steady_ms": mean_ms("ttft_s", w_steady), "tpot_steady_ms": mean_ms("tpot_s", w_steady),
            "output_tokens_per_s_model": s["output_tokens_per_s"], "preemptions": s["preemptions"]}


def regime(concurrency_per_instance: float) -> str:
    """The load regime of a closed loop by clients per decode instance (bins of the sample's concurrency grid,
    4-8 / 16-64 / 128+: a reporting choice, not a model parameter)."""
    c = concurrency_per_instance
    return "c<=8" if c <= 8 else "c16-64" if c <= 64 else "c>=128"


#: the step tables of the :func:`evaluate` call a process is working for: (call token, TablesCache). One call's
#: simulations share them (exact: :class:`~llmexplore.models.serving.step_tables.TablesCache`); a new call starts
#: afresh, so presets changed between calls are never served stale tables
_TABLES: list = [None, None]


def _tables_for(token: str):
    from ...models.serving.step_tables import TablesCache

    if _TABLES[0] != token:
        _TABLES[:] = [token, TablesCache()]
    return _TABLES[1]


def _simulation_task(task: dict) -> list[dict]:
    """One simulation of :func:`evaluate` as a :func:`..distributed.run_sweep` task: its means, or in ``why`` the
    reason it cannot run (top level, so worker processes can import it)."""
    try:
        got = _simulate(json.loads(task["config"]), task["runtime"], task["isl"], task["osl"], task["concurrency"],
                        None, n_requests(task["concurrency"]), tables_cache=_tables_for(task["call"]))
    except SpecError as exc:
        why = (f"not modelled: at {task['runtime']}'s default memory fraction the weights leave no KV memory, so "
               f"the benchmark must have set a larger one (not recorded in the source)"
               if "no memory left for KV" in str(exc) else f"not modelled: {exc}")
        return [{"why": why}]
    return [{**got, "why": ""}]


def evaluate(rows: pd.DataFrame | None = None, *, progress=None, workers: int | None = None) -> pd.DataFrame:
    """One row per measurement: id, family (model preset), gpu, engine, mode, isl, osl, concurrency, regime,
    attention (the sides' layout, "TP" or "DPA", or "prefill TP, decode DPA" where they differ),
    ``ttft``/``tpot`` ``_measured_ms``, ``_model_ms`` and ``_error_pct`` (model / measured - 1, signed),
    preemptions, and ``status`` ("ok", or why the row is not simulated, with NaN numbers). Rows of one
    configuration and load share one simulation; the simulations run on ``workers`` local processes
    (:func:`..distributed.run_sweep`; default: every core, 1 in this process). ``progress(i, n)`` is called
    for each row once its numbers are in."""
    from ..distributed import run_sweep

    import uuid

    rows = load() if rows is None else rows
    recs, keys, tasks = [], [], {}
    call = uuid.uuid4().hex  # this call's step tables (_tables_for)
    for r in rows.to_dict("records"):
        rec = {"id": r["id"], "family": MODELS.get(r["model_path"], r["model_path"]),
               "gpu": SYSTEMS.get(r["system"], r["system"]), "engine": r["backend"],
               "engine_version": r.get("backend_version"),
               "mode": "colocated" if r["mode"] == "agg" else "disaggregated",
               "isl": int(r["isl"]), "osl": int(r["osl"]), "concurrency": r["concurrency"],
               "ttft_measured_ms": float(r["silicon_ttft_ms"]), "tpot_measured_ms": float(r["silicon_tpot_ms"])}
        key = None
        try:
            cfg, runtime, conc = row_config(r)
            rec["regime"] = regime(conc / cfg["sides"][-1]["instances"])
            lay = [sd["layout"] for sd in cfg["sides"]]
            rec["attention"] = lay[0] if len(set(lay)) == 1 else f"prefill {lay[0]}, decode {lay[1]}"
            key = "|".join((json.dumps(cfg, sort_keys=True), runtime, str(rec["isl"]), str(rec["osl"]), str(conc)))
            tasks.setdefault(key, {"task_id": key, "config": json.dumps(cfg, sort_keys=True), "runtime": runtime,
                                   "isl": rec["isl"], "osl": rec["osl"], "concurrency": conc, "call": call})
        except SpecError as exc:
            rec.update(regime="", attention="", ttft_model_ms=np.nan, tpot_model_ms=np.nan, status=str(exc))
        recs.append(rec)
        keys.append(key)
    done: dict = {}
    if tasks:
        # the longest simulations first, so the last ones to finish are short (clients x output tokens)
        order = sorted(tasks.values(), key=lambda t: -t["concurrency"] * t["osl"])
        res = run_sweep(_simulation_task, order, workers=workers, chunk=CHUNK)
        failed = res[res["error"] != ""] if "error" in res else res.iloc[:0]
        if len(failed):  # a bug, not a modelling limit (those come back in "why"): say which simulation
            raise RuntimeError(f"validate --e2e: the simulation of {failed['task_id'].iloc[0]} failed: "
                               f"{failed['error'].iloc[0]}")
        done = {r["task_id"]: r for r in res.to_dict("records")}
    cols = ("ttft_model_ms", "tpot_model_ms", "ttft_steady_ms", "tpot_steady_ms", "output_tokens_per_s_model",
            "preemptions")
    for i, (rec, key) in enumerate(zip(recs, keys)):
        if key is not None:
            got = done[key]
            if got["why"]:
                rec.update(ttft_model_ms=np.nan, tpot_model_ms=np.nan, status=got["why"])
            else:
                rec.update({c: got[c] for c in cols}, status="ok")
                rec["preemptions"] = int(rec["preemptions"])
        if progress is not None:
            progress(i + 1, len(recs))
    df = pd.DataFrame(recs)
    for m in METRICS:
        df[f"{m}_error_pct"] = 100.0 * (df[f"{m}_model_ms"] / df[f"{m}_measured_ms"] - 1.0)
        df[f"{m}_steady_error_pct"] = 100.0 * (df.get(f"{m}_steady_ms", np.nan) / df[f"{m}_measured_ms"] - 1.0)
    return df


def _stats(g: pd.DataFrame) -> dict:
    ok = g[g["status"] == "ok"]
    rec = {"rows": len(g), "simulated": len(ok)}
    for m in METRICS:
        e = ok[f"{m}_error_pct"].to_numpy(float)
        rec[f"{m}_mape_pct"] = float(np.mean(np.abs(e))) if e.size else np.nan
        rec[f"{m}_median_abs_pct"] = float(np.median(np.abs(e))) if e.size else np.nan
        rec[f"{m}_median_error_pct"] = float(np.median(e)) if e.size else np.nan
        st = ok[f"{m}_steady_error_pct"].to_numpy(float) if f"{m}_steady_error_pct" in ok else np.array([])
        rec[f"{m}_steady_mape_pct"] = float(np.mean(np.abs(st))) if st.size else np.nan
        rec[f"{m}_steady_median_error_pct"] = float(np.median(st)) if st.size else np.nan
    return rec


def summary(table: pd.DataFrame) -> dict:
    """Over every simulated row: rows, simulated, and per metric MAPE, median |error| and median signed error
    [%]; ``not_simulated``: the reasons and their counts."""
    s = _stats(table)
    bad = table[table["status"] != "ok"]["status"]
    s["not_simulated"] = {k: int(v) for k, v in bad.str.replace(r"\(\d+\)", "(n)", regex=True).value_counts().items()}
    return s


CATEGORIES = ("family", "gpu", "engine", "mode", "regime", "attention")


def category_table(table: pd.DataFrame, by=CATEGORIES) -> pd.DataFrame:
    """The error per category: one row per value of each column of ``by`` (``dimension``, ``category``), with
    :func:`summary`'s numbers; categories with no simulated row keep NaN errors."""
    rows = []
    for dim in by:
        _check.choice("by", dim, tuple(table.columns))
        for val, g in table.groupby(dim, sort=True):
            if dim in ("regime", "attention") and val == "":
                continue
            rows.append({"dimension": dim, "category": val, **_stats(g)})
    return pd.DataFrame(rows)


def evaluate_runs(runs: list[dict], cfg, *, runtime: str) -> pd.DataFrame:
    """A user's own benchmark runs (:func:`llmexplore.benchfiles.read_benchmark`) against the simulator on the
    deployment ``cfg`` they ran (a DeploymentConfig or its JSON): per run the measured and simulated mean TTFT,
    TPOT (the run's own definition, in ``tpot_definition``) and output throughput, and the signed errors [%].
    A run with neither a concurrency nor a request rate, or without mean lengths, is reported, not simulated."""
    from ...deployment import DeploymentConfig

    cfg = DeploymentConfig.from_json(cfg).to_json()
    out = []
    for r in runs:
        rec = {"run": r["run"], "format": r["format"], "concurrency": r["concurrency"], "rate_per_s": r["rate_per_s"],
               "isl": r["isl"], "osl": r["osl"], "ttft_measured_ms": r["ttft_ms"]["mean"],
               "tpot_measured_ms": r["tpot_ms"]["mean"], "output_tokens_per_s_measured": r["output_tokens_per_s"],
               "tpot_definition": r["tpot_definition"]}
        if r["isl"] is None or r["osl"] is None:
            rec["status"] = "not simulated: the file gives no mean input and output lengths"
        elif r["concurrency"] is None and r["rate_per_s"] is None:
            rec["status"] = "not simulated: the file gives neither a concurrency nor a request rate"
        else:
            conc = r["concurrency"]
            rate = None if conc is not None else r["rate_per_s"]
            n = int(r["requests"] or n_requests(conc or 64))
            try:
                # every request of the run is simulated (its own count): its plain mean, not a 20-round one
                rec.update(_simulate(cfg, runtime, max(1, round(r["isl"])), max(1, round(r["osl"])), conc, rate,
                                     min(n, 100_000), rounds=None), status="ok")
            except SpecError as exc:
                rec["status"] = f"not simulated: {exc}"
        out.append(rec)
    df = pd.DataFrame(out)
    for m in ("ttft", "tpot"):
        model = df.get(f"{m}_model_ms", pd.Series(np.nan, index=df.index)).astype(float)
        df[f"{m}_error_pct"] = 100.0 * (model / df[f"{m}_measured_ms"].astype(float) - 1.0)
    thr = df.get("output_tokens_per_s_model", pd.Series(np.nan, index=df.index)).astype(float)
    df["throughput_error_pct"] = 100.0 * (thr / df["output_tokens_per_s_measured"].astype(float) - 1.0)
    return df
