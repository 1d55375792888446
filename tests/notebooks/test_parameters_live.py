"""Every notebook parameter is live: changing it changes a recorded value or a figure, or the notebook rejects
it with one clear message.

For each notebook the test runs a small baseline and then a few variant runs. Every parameter is changed in
exactly one variant and names its *signal*: a recorded value, one trace of one figure, or a text the notebook
records. Parameters share a variant only when none of the others changed in that run can move their signals,
so one parameter cannot mask another: a new MODEL moves every number, so the deployment's parameters are told
apart by the deployment the notebook records (its label names model, GPU, ranks and dtypes), while the grid of
the phase diagram and the length of the reasoning trace can share a run. A last group of runs changes a
parameter to a value that makes no sense and expects the notebook's parameter check to stop it with one
line naming the parameter.

To keep this to about a minute on two cores, all runs share one kernel: each run clears the namespace
(``%reset -f``), injects the parameters with papermill's own ``parameterize_notebook`` and executes the code
cells in order (imports stay cached). Figures are compared through plotly's JSON (renderer
``plotly_mimetype``), records through :func:`llmexplore.nbtools.record`'s MIME bundle.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from llmexplore.nbtools import RECORD_MIME, _unjson

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
PLOTLY = "application/vnd.plotly.v1+json"
CELL_TIMEOUT_S = 120


# ---- running a notebook in a shared kernel ------------------------------------------------------------------


@dataclass
class Run:
    cells: list[tuple[str, list[dict]]]  # (source, display bundles) per code cell
    records: dict[str, Any]
    error: dict | None = None  # {"cell", "ename", "evalue"} of the first failing cell

    def figure(self, marker: str) -> dict:
        for source, outs in self.cells:
            if marker in source:
                figs = [o[PLOTLY] for o in outs if PLOTLY in o]
                if figs:
                    return figs[0]
        raise AssertionError(f"no figure in a cell containing {marker!r}")


class Kernel:
    def __init__(self):
        from jupyter_client.manager import start_new_kernel

        env = {**os.environ, "PLOTLY_RENDERER": "plotly_mimetype"}
        self.km, self.kc = start_new_kernel(kernel_name="python3", cwd=str(NB_DIR), env=env,
                                            extra_arguments=["--IPKernelApp.log_level=ERROR"],
                                            stderr=subprocess.DEVNULL)

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

    def _execute(self, source: str) -> tuple[list[dict], dict | None]:
        outs, errors = [], []

        def hook(msg):
            kind = msg["msg_type"]
            if kind in ("display_data", "execute_result"):
                outs.append(msg["content"]["data"])
            elif kind == "error":
                errors.append(msg["content"])

        reply = self.kc.execute_interactive(source, output_hook=hook, timeout=CELL_TIMEOUT_S, store_history=False,
                                            allow_stdin=False)
        if reply["content"]["status"] == "error" and not errors:
            errors.append(reply["content"])
        return outs, (errors[0] if errors else None)

    def run(self, name: str, params: dict) -> Run:
        from papermill.iorw import load_notebook_node
        from papermill.parameterize import parameterize_notebook

        nb = load_notebook_node(str(NB_DIR / f"{name}.ipynb"))  # as papermill loads it (every cell has tags)
        nb = parameterize_notebook(nb, params, kernel_name="python3", language="python")
        self._execute("%reset -f")
        cells, records = [], {}
        for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
            outs, error = self._execute(cell.source)
            cells.append((cell.source, outs))
            for o in outs:
                if RECORD_MIME in o:
                    records[o[RECORD_MIME]["name"]] = _unjson(o[RECORD_MIME]["value"])
            if error:
                return Run(cells, records, {"cell": i, "ename": error.get("ename"), "evalue": error.get("evalue")})
        return Run(cells, records)


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    yield k
    k.close()


# ---- signals: what a parameter must move ----------------------------------------------------------------------


@dataclass
class Signal:
    """``value(run)`` must differ between the baseline and the variant (or ``check(run)`` hold in it)."""

    what: str
    value: Callable[[Run], Any] | None = None
    check: Callable[[Run], bool] | None = None

    def moved(self, base: Run, variant: Run) -> bool:
        if self.check is not None:
            return self.check(variant)
        return json.dumps(self.value(base), sort_keys=True, default=str) != json.dumps(
            self.value(variant), sort_keys=True, default=str)


def rec(name: str, part: Callable[[Any], Any] = lambda v: v) -> Signal:
    """The recorded value ``name`` (or a part of it)."""
    return Signal(f"record {name}", value=lambda r: part(r.records[name]))


def fig(marker: str, attr: str = "y", trace: int | str = 0) -> Signal:
    """``attr`` of one trace (index, or the first trace with that name) of the figure in the cell containing
    ``marker``."""
    def value(r):
        data = r.figure(marker)["data"]
        tr = data[trace] if isinstance(trace, int) else next(t for t in data if t.get("name") == trace)
        return tr.get(attr)
    return Signal(f"{attr} of trace {trace!r} in the figure of `{marker}`", value=value)


def fig_has_line_at(marker: str, y: float) -> Signal:
    """The figure in the cell containing ``marker`` has a horizontal line at ``y`` (a reference line)."""
    def check(r):
        return any(isinstance(t.get("y"), list) and len(t["y"]) >= 2 and all(v == y for v in t["y"])
                   for t in r.figure(marker)["data"])
    return Signal(f"a line at y = {y} in the figure of `{marker}`", check=check)


def out(marker: str) -> Signal:
    """Everything the cell containing ``marker`` displays (a table, a sentence), records left out."""
    def value(r):
        return next([o for o in outs if RECORD_MIME not in o] for src, outs in r.cells if marker in src)
    return Signal(f"the output of `{marker}`", value=value)


def says(name: str, text: str) -> Signal:
    """The recorded text ``name`` mentions ``text`` (e.g. the deployment's label names the new GPU)."""
    return Signal(f"record {name} mentions {text!r}", check=lambda r: text in str(r.records[name]))


# ---- the cases ------------------------------------------------------------------------------------------------

#: the smallest settings each notebook runs in (the baseline); variants change a few names from here
BASE = {
    "00_index": {},
    "05_fidelity": {},
    "10_attention_layouts": dict(N_CONTEXT=12, N_BATCH=5, TRACE_BATCH=64, TRACE_SEGMENT=4096, FLUCT_SEGMENTS=12),
    "15_speculative_decoding": dict(N_BATCHES=4, N_ACCEPTED=3),
    "20_pd_disaggregation": dict(N_RATES=4, N_BANDWIDTHS=6, PROMPTS=[1024, 4096], OUTPUTS=[128, 512], GRID_MAX=6,
                                 SIM_REQUESTS=5000, PROMPT_SIGMAS=[0.0]),
    "30_moe_expert_parallel": dict(BATCHES=[64, 256, 1024], N_SKEWS=3, MC_TRIALS=20, REDUNDANT=[32]),
    "40_kv_transfer": {},
    "50_ssd_offload": {},
    "60_deployment_planner": dict(N_RATES=3, SIMULATED_REQUESTS=200, TOP=3, SPECULATIVE="eagle3-llama-3.1-8b"),
}

STEP = "step_time_figure("
PHASE = "phase_diagram_figure(phase"
TRACE = "scheduler_figure(trace"
STEADY = "scheduler_figure(steady"
#: (changes, {parameter: signal}) per variant run; each parameter appears once
CASES: dict[str, list[tuple[dict, dict[str, Signal]]]] = {
    "00_index": [
        (dict(KIND="links"), {"KIND": rec("first_table_rows")}),
    ],
    "05_fidelity": [
        # the two runtimes compared each move their own recorded median; the band moves the rows within it
        (dict(PRICING="default", BASELINE="engine", BAND_PCT=25.0),
         {"PRICING": rec("compared", lambda c: c["runtime_median_abs_error_pct"]),
          "BASELINE": rec("compared", lambda c: c["baseline_median_abs_error_pct"]), "BAND_PCT": rec("within_band")}),
        # the kernel set drawn is named in its label; a 30% margin leaves no pair to rank
        (dict(GPU="b200", ENGINE="vllm", MARGIN_PCT=30.0),
         {"GPU": says("kernel_set", "B200"), "ENGINE": says("kernel_set", "vLLM"),
          "MARGIN_PCT": rec("ranking", lambda r: r["pairs"])}),
    ],
    "10_attention_layouts": [
        # the deployment: every section moves, the label says which parameter reached it; the GQA contrast
        # case is a separate deployment with its own label
        (dict(MODEL="llama-3-70b", GPU="b200", RANKS=4, WEIGHT_DTYPE="bf16", KV_DTYPE="fp8", GQA_MODEL="qwen3-4b",
              GQA_GPU="h200", GQA_RANKS=8),
         {"MODEL": says("deployment", "Llama-3-70B"), "GPU": says("deployment", "B200"),
          "RANKS": says("deployment", "on 4x"), "WEIGHT_DTYPE": says("deployment", "weights bf16"),
          "KV_DTYPE": says("deployment", "KV fp8"), "GQA_MODEL": says("gqa_deployment", "Qwen3-4B"),
          "GQA_GPU": says("gqa_deployment", "H200"), "GQA_RANKS": says("gqa_deployment", "on 8x")}),
        (dict(BATCH=32, N_CONTEXT=8, BATCH_MAX=256, TRACE_BATCH=48, FLUCT_MEAN_BATCH=12),
         {"BATCH": rec("boundaries_at_batch", lambda b: [x["batch"] for x in b]), "N_CONTEXT": fig(STEP, "x"),
          "BATCH_MAX": fig(PHASE, "y"), "TRACE_BATCH": rec("policy_total_s"),
          "FLUCT_MEAN_BATCH": rec("steady_policy_total_s")}),
        (dict(CONTEXT=4096, CONTEXT_MIN=512, N_BATCH=4, TRACE_PROMPT=1024, FLUCT_BATCH_SD=1, SEED=1),
         {"CONTEXT": rec("total_GB"), "CONTEXT_MIN": fig(STEP, "x"), "N_BATCH": fig(PHASE, "y"),
          "TRACE_PROMPT": rec("policy_total_s"), "FLUCT_BATCH_SD": rec("steady_policy_total_s"),
          "SEED": fig(TRACE, "y", "active sequences")}),
        (dict(CONTEXT_MAX=65536, TRACE_MEAN_OUTPUT=8192, FLUCT_CONTEXT=8192),
         {"CONTEXT_MAX": rec("boundaries_at_batch"), "TRACE_MEAN_OUTPUT": rec("policy_total_s"),
          "FLUCT_CONTEXT": rec("steady_policy_total_s")}),
        (dict(TRACE_SEGMENT=1024, FLUCT_SEGMENTS=8),
         {"TRACE_SEGMENT": rec("policy_total_s"), "FLUCT_SEGMENTS": rec("steady_policy_total_s")}),
        (dict(HORIZON_STEPS=32, FLUCT_SEGMENT_STEPS=32),
         {"HORIZON_STEPS": rec("policy_total_s"), "FLUCT_SEGMENT_STEPS": fig(STEADY, "x", "active sequences")}),
        # the runtime preset reprices every kernel: every time moves, so it runs alone
        (dict(RUNTIME="scalar"), {"RUNTIME": rec("step_ms")}),
        # a pipeline of two stages: the recorded decoding says so, and the worst stage holds half the weights
        (dict(PP=2), {"PP": says("decoding", "PP2")}),
        # speculative decoding with the user's acceptance: the decoding names the preset, the acceptance moves
        # the time per output token (the step, draft + verify, does not depend on it)
        (dict(SPECULATIVE="deepseek-mtp-1", ACCEPTED_LENGTH=1.6),
         {"SPECULATIVE": says("decoding", "deepseek-mtp-1"), "ACCEPTED_LENGTH": says("decoding", "1.60 tokens")}),
    ],
    "15_speculative_decoding": [
        # the deployment: the recorded label names model, GPU, ranks and dtypes
        (dict(MODEL="deepseek-r1", GPU="b200", RANKS=4, WEIGHT_DTYPE="fp4", KV_DTYPE="fp8"),
         {"MODEL": says("deployment", "DeepSeek-R1"), "GPU": says("deployment", "B200"),
          "RANKS": says("deployment", "on 4x"), "WEIGHT_DTYPE": says("deployment", "weights fp4"),
          "KV_DTYPE": says("deployment", "KV fp8")}),
        # the draft (named in the label), the context (the draft's KV per sequence) and section 1's batch
        (dict(SPECULATIVE="deepseek-mtp-3", CONTEXT=8000, BATCH=4),
         {"SPECULATIVE": says("deployment", "3 draft tokens"), "CONTEXT": rec("memory", lambda m: m["draft_kv_MB_per_seq"]),
          "BATCH": rec("speedup_at_batch")}),
        # the user's acceptance replaces the preset's
        (dict(ACCEPTED_LENGTH=1.5), {"ACCEPTED_LENGTH": rec("tpot_ms")}),
        # the grids: the batch axis of the figure, and the accepted lengths whose break-even batches are recorded
        (dict(BATCH_RANGE=[2, 256], N_BATCHES=5, N_ACCEPTED=4),
         {"BATCH_RANGE": fig("speedup_figure(by_batch,", "x"), "N_BATCHES": fig("speedup_figure(by_batch,", "x"),
          "N_ACCEPTED": rec("breakeven_batch", sorted)}),
        # the runtime preset reprices every kernel: alone
        (dict(RUNTIME="scalar"), {"RUNTIME": rec("plain_tpot_ms")}),
    ],
    "20_pd_disaggregation": [
        # grids and axes, the prompt (its KV bytes move with nothing else here) and the SLO lines
        (dict(N_RATES=3, N_BANDWIDTHS=5, PROMPTS=[2048, 8192], OUTPUTS=[256, 1024], GRID_MAX=4, PROMPT_SIGMAS=[0.25],
              PROMPT=2048, TTFT_SLO_MS=800.0, TPOT_SLO_MS=50.0),
         {"N_RATES": fig("latency_figure(", "x"), "N_BANDWIDTHS": fig("exposed_transfer_figure(", "x"),
          "PROMPTS": rec("pd_ratio_by_prompt", sorted), "OUTPUTS": fig("ratio_figure(by_output", "x"),
          "GRID_MAX": fig("goodput_heatmap_figure(", "x"), "PROMPT_SIGMAS": rec("gpus_by_prompt_sigma", sorted),
          "PROMPT": rec("kv_transfer_GB"), "TTFT_SLO_MS": fig_has_line_at("latency_figure(", 800.0),
          "TPOT_SLO_MS": fig_has_line_at("latency_figure(", 50.0)}),
        # the deployments: the recorded labels say which parameter reached which pool; the rate axis of the
        # latency figure depends on RATE alone
        (dict(MODEL="qwen3-32b", GPU="h200", PREFILL_TP=4, DECODE_TP=2, RATE=30.0),
         {"MODEL": says("deployment", "Qwen3-32B"), "GPU": says("deployment", "H200"),
          "PREFILL_TP": says("deployment", "'prefill': 'Qwen3-32B on 4x"),
          "DECODE_TP": says("deployment", "'decode': 'Qwen3-32B on 2x"), "RATE": fig("latency_figure(", "x")}),
        # the link moves the transfer (not the decode step), the output length the decode step (not the transfer)
        (dict(LINK="ib-ndr400", SIM_REQUESTS=4000, OUTPUT=1024),
         {"LINK": out("say(findings.disagg.transfer_sentence"), "SIM_REQUESTS": rec("queue_check_max_abs_error_pct"),
          "OUTPUT": rec("decode_step_ms")}),
        # the runtime preset reprices every kernel (every time moves); the price tier moves only the price per
        # GPU-hour section 3 uses (hyperscaler on-demand: $6.88 for an H100 SXM, neocloud: $6.155), not a time
        (dict(RUNTIME="scalar", PRICE_TIER="hyperscaler-on-demand"),
         {"RUNTIME": rec("prefill_ms"), "PRICE_TIER": rec("cost", lambda c: c["usd_per_gpu_hour"])}),
        # speculative decoding of the decoding instances (an EAGLE-3 head at 2.5 tokens per step): the decode time
        # per output token moves, and with it the colocated pool
        (dict(SPECULATIVE="eagle3-llama-3.1-8b", ACCEPTED_LENGTH=2.5),
         {"SPECULATIVE": rec("decode_step_ms"), "ACCEPTED_LENGTH": rec("gpus_by_mode")}),
        # a pipeline of 2 decode stages (TP8 each): the time between tokens moves
        (dict(DECODE_PP=2), {"DECODE_PP": rec("decode_step_ms")}),
        # a pipeline of 2 prefill stages (TP8 each): the pools the modes need move
        (dict(PREFILL_PP=2), {"PREFILL_PP": rec("gpus_by_mode")}),
        # the grid extents: each moves the axis of its own figure (or the break-even its grid brackets)
        (dict(RATE_SPAN=[0.5, 1.2], TRANSFER_GBPS=[1, 400], ONE_NIC_GBPS=[2, 200], NIC_PER_GPU_GBPS=[0.5, 200]),
         {"RATE_SPAN": fig("latency_figure(", "x"), "TRANSFER_GBPS": fig("exposed_transfer_figure(", "x"),
          "ONE_NIC_GBPS": fig("gpus_vs_bandwidth_figure(", "x"),
          "NIC_PER_GPU_GBPS": rec("breakeven_GBps_nic_per_gpu")}),
    ],
    "30_moe_expert_parallel": [
        (dict(MODEL="qwen3-30b-a3b"), {"MODEL": rec("step_ms_at_batch")}),
        (dict(GPU="b200"), {"GPU": rec("step_ms_at_batch")}),
        (dict(GPUS=8), {"GPUS": rec("step_ms_at_batch", sorted)}),
        (dict(TP=4, N_SKEWS=4, BATCHES=[64, 256, 512], BATCH=64),
         {"TP": rec("rank_load_max_before_after", sorted), "N_SKEWS": fig("skew_figure(by_skew,", "x"),
          "BATCHES": fig("scenario_figure(", "x"), "BATCH": rec("dispatch_combine_us_at_batch")}),
        (dict(CONTEXT=4096, MC_TRIALS=10), {"CONTEXT": rec("step_ms_at_batch"), "MC_TRIALS": rec("max_load_error_pct")}),
        (dict(SKEW=3.0, REDUNDANT=[16]),
         {"SKEW": rec("dispatch_combine_us_at_batch"), "REDUNDANT": rec("rank_load_max_before_after", sorted)}),
        # the runtime preset reprices every kernel (every time moves); the price tier moves only the price per
        # GPU-hour of section 1's dollars (3-year rental: $1.60 for an H200, neocloud on-demand: $6.305), not a time
        (dict(RUNTIME="scalar", PRICE_TIER="reserved-3yr"),
         {"RUNTIME": rec("step_ms_at_batch"), "PRICE_TIER": rec("price", lambda p: p["usd_per_gpu_hour"])}),
        (dict(MC_TOKENS=[128, 512]), {"MC_TOKENS": rec("max_load_error_pct")}),
        # a pipeline of two stages of the 16 GPUs: the recorded decoding says so
        (dict(PP=2), {"PP": says("decoding", "PP2")}),
        # MTP with the user's acceptance: the decoding names the preset and the accepted length
        (dict(SPECULATIVE="deepseek-mtp-1", ACCEPTED_LENGTH=1.6),
         {"SPECULATIVE": says("decoding", "deepseek-mtp-1"), "ACCEPTED_LENGTH": says("decoding", "1.60 tokens")}),
    ],
    "40_kv_transfer": [
        # the link alone sets the latency, the GPU alone the prefill time, the decode TP the sources per rank
        (dict(LINK="ib-ndr400", GPU="h200", DECODE_TP=2, DP_PAIRING="any"),
         {"LINK": rec("plan", lambda p: p["latency_ms"]), "GPU": rec("plan", lambda p: p["prefill_ms"]),
          "DECODE_TP": rec("sources_per_decode_rank"), "DP_PAIRING": rec("plan", lambda p: p["dp_pairing"])}),
        # the model moves the bytes; each side's DP groups widen its axis of the byte matrix
        (dict(MODEL="qwen3-32b", PREFILL_DP=4, DECODE_DP=2),
         {"MODEL": rec("plan", lambda p: p["request_MB"]), "PREFILL_DP": fig("byte_matrix_figure(", "y"),
          "DECODE_DP": fig("byte_matrix_figure(", "x")}),
        (dict(KV_DTYPE="fp8", PREFILL_TP=4),
         {"KV_DTYPE": rec("plan", lambda p: p["request_MB"]), "PREFILL_TP": rec("sources_per_decode_rank")}),
        # 2,048 tokens fill whole pages of 16 and of 32 tokens: the page size moves the fragments, not the bytes
        (dict(PAGE_SIZE=32, PROMPT_TOKENS=2048),
         {"PAGE_SIZE": rec("fragment_bytes_per_page"), "PROMPT_TOKENS": rec("plan", lambda p: p["request_MB"])}),
        # the runtime prices the prefill the pipelined transfer overlaps (the plan's bytes and links stay)
        (dict(RUNTIME="scalar"), {"RUNTIME": rec("plan", lambda p: p["prefill_ms"])}),
        (dict(PROMPT_RANGE=[1024, 65536]), {"PROMPT_RANGE": rec("serial_ms_by_prompt")}),
        # pipeline stages (issue 21): the plan records the prefill's stages; 2 -> 3 stages over 80 layers make
        # four stage pairs talk (one without pipelines)
        (dict(PREFILL_PP=2, DECODE_PP=3),
         {"PREFILL_PP": rec("plan", lambda p: p["prefill_pp"]), "DECODE_PP": rec("stage_pair_MB")}),
        # an EAGLE-style draft head on Llama-3-70B: its draft layer's KV moves too
        (dict(SPECULATIVE="eagle3-llama-3.1-8b"), {"SPECULATIVE": rec("plan", lambda p: p["draft_MB"])}),
    ],
    "50_ssd_offload": [
        # the deployment: the recorded label names model, GPU, ranks and KV dtype
        (dict(MODEL="qwen3-32b", GPU="h200", TP=4, KV_DTYPE="fp8"),
         {"MODEL": says("deployment", "Qwen3-32B"), "GPU": says("deployment", "H200"), "TP": says("deployment", "on 4x"),
          "KV_DTYPE": says("deployment", "KV fp8")}),
        # the tier and the block size (in the label); the chosen wait and hit ratio are marked on their figures;
        # the runtime reprices the recompute of the decided prefix (whole blocks of 256 or 512 tokens: the same
        # cached tokens, and recomputing them does not depend on the tier)
        (dict(STORAGE="nvme-gen5", BLOCK_TOKENS=512, QUEUE_WAIT_MS=100.0, HIT_RATIO=0.9, RUNTIME="scalar"),
         {"STORAGE": says("deployment", "Gen5"), "BLOCK_TOKENS": says("deployment", "512-token blocks"),
          "QUEUE_WAIT_MS": fig("preload_figure(", "x", "chosen queue wait"),
          "HIT_RATIO": fig("hit_ratio_figure(", "x", "chosen hit ratio"),
          "RUNTIME": rec("point", lambda p: p["recompute_ms"])}),
        # the decided prefix, the staging budget and the prompt a hit ratio is a share of move separate records
        (dict(PREFIX=65536, STAGING_GB=8.0, PROMPT_TOKENS=16384),
         {"PREFIX": rec("point", lambda p: p["cached_tokens"]), "STAGING_GB": rec("staging", lambda s: s["budget_GB"]),
          "PROMPT_TOKENS": rec("saved_gpu_s_at_hit_ratio")}),
        # the request rate and the TTFT target both size the pool: one run each
        (dict(RATE=2.0), {"RATE": rec("queue", lambda q: q["instances"])}),
        (dict(TTFT_SLO_MS=6000.0), {"TTFT_SLO_MS": rec("queue", lambda q: q["instances"])}),
        # the grid extents: each moves the axis of its own figure or curve
        (dict(PREFIX_MAX=262144, NEAR_PREFIX_MAX=32768, BANDWIDTH_RANGE_GBPS=[0.5, 100], LATENCY_RANGE_US=[10, 10000],
              QUEUE_WAIT_RANGE_MS=[0, 500]),
         {"PREFIX_MAX": fig("cost_curves_figure(", "x"), "NEAR_PREFIX_MAX": rec("curve_near"),
          "BANDWIDTH_RANGE_GBPS": rec("map_tokens_range"), "LATENCY_RANGE_US": fig("break_even_map_figure(", "y"),
          "QUEUE_WAIT_RANGE_MS": rec("preload_break_even_tokens")}),
        # a pipeline of two 8-GPU stages on two nodes: each node's drive reads half the blocks (the load halves);
        # an EAGLE draft head adds its own KV layer to every block (the bytes grow by 1/80)
        # (the price tier moves only the price of the GPU time saved, not a load time)
        (dict(PP=2, PRICE_TIER="reserved-3yr"),
         {"PP": rec("point", lambda p: p["load_ms"]), "PRICE_TIER": rec("saved_usd", lambda u: u["usd_per_gpu_hour"])}),
        (dict(SPECULATIVE="eagle3-llama-3.1-8b"), {"SPECULATIVE": rec("point", lambda p: p["bytes_MB"])}),
    ],
    "60_deployment_planner": [
        # the question: its recorded text names each part (the planner answers that question), and the TPOT
        # target moves the frontier figure's target line to 1000 / 20 = 50 tokens/s per user
        (dict(MODEL="llama-3-8b", GPU="h100-sxm", GPUS=16, ISL=2000, OSL=250, TTFT_MS=500.0, TPOT_MS=20.0, STAT="p99",
              RATE=4.0),
         {"MODEL": says("question", "Llama-3-8B"), "GPU": says("question", "H100"), "GPUS": says("question", "up to 16"),
          "ISL": says("question", "prompts of 2,000"), "OSL": says("question", "outputs of 250"),
          "TTFT_MS": says("question", "TTFT ≤ 500 ms"), "STAT": says("question", "p99 TTFT"),
          "RATE": says("question", "at 4 req/s"),
          "TPOT_MS": Signal("a TPOT target line at 50 tokens/s per user in the frontier figure", check=lambda r: any(
              t.get("x") == [50.0, 50.0] for t in r.figure("frontier_figure(")["data"]))}),
        # what is searched, read back from the planner's table
        (dict(WEIGHT_DTYPES=["bf16"], KV_DTYPES=["fp8"], LINK="roce-400g"),
         {"WEIGHT_DTYPES": rec("searched", lambda s: s["weight"]), "KV_DTYPES": rec("searched", lambda s: s["kv"]),
          "LINK": rec("searched", lambda s: s["link"])}),
        # issue 22, cost: the tier, the objective and the $ budget are named in the question; the interactivity
        # the cost frontiers are read at is recorded; a second GPU type is searched (named in the question), and
        # section 2c mixes GPU with another type (its rows are named by type)
        (dict(PRICE_TIER="reserved-3yr", OBJECTIVE="usd_per_mtok", BUDGET_USD_PER_HOUR=150.0, INTERACTIVITY=50.0),
         {"PRICE_TIER": says("question", "reserved-3yr prices"), "OBJECTIVE": says("question", "best by $ per million"),
          "BUDGET_USD_PER_HOUR": says("question", "$150.00/hour"),
          "INTERACTIVITY": rec("cost", lambda c: c["interactivity"])}),
        (dict(OTHER_GPUS=["h100-sxm"], MIX_GPU="h100-sxm"),
         {"OTHER_GPUS": says("question", "H200 SXM 141GB or H100 SXM 80GB"),
          "MIX_GPU": rec("mix", sorted)}),
        # the runtime reprices every configuration; the sizes of the table, the sweep and the simulation are counts
        (dict(RUNTIME="scalar", N_RATES=4, SIMULATED_REQUESTS=300, TOP=5),
         {"RUNTIME": rec("headline", lambda h: h["best"]["tokens_per_s_per_gpu"]),
          "N_RATES": rec("rate_sweep", lambda r: len(r["rate_per_s"])),
          "SIMULATED_REQUESTS": rec("simulated", lambda s: s["requests"]), "TOP": rec("top_labels", len)}),
        # the issue-21 axes: the pipeline sizes searched and the speculative preset name rows of section 6, the
        # user's acceptance moves the speculative row's gain
        (dict(PIPELINE_SIZES=[1, 2]), {"PIPELINE_SIZES": rec("axes_gain_pct", sorted)}),
        (dict(SPECULATIVE="ngram-5"), {"SPECULATIVE": rec("axes_gain_pct", sorted)}),
        (dict(SPECULATIVE_ACCEPTED_LENGTH=2.0),
         {"SPECULATIVE_ACCEPTED_LENGTH": rec("axes_gain_pct", lambda a: a["speculative decoding eagle3-llama-3.1-8b"])}),
    ],
}

#: values that make no sense for a notebook: its parameter check must stop the run in the imports cell
REJECTED = [
    ("00_index", dict(KIND="gpus"), r"KIND must be one of"),
    ("05_fidelity", dict(ENGINE="tgi"), r"ENGINE must be one of"),
    ("05_fidelity", dict(PRICING="fastest"), r"PRICING must be 'engine' \(each row priced by its engine's preset\)"),
    ("05_fidelity", dict(GPU="mi300x"), r"GPU = 'mi300x' does not apply to this notebook: mi300x has no kernel"),
    ("10_attention_layouts", dict(WEIGHT_DTYPE="fp32"), r"WEIGHT_DTYPE must be one of bf16, fp8"),
    ("10_attention_layouts", dict(CONTEXT_MAX=128), r"CONTEXT_MAX must be greater than CONTEXT_MIN"),
    ("10_attention_layouts", dict(RUNTIME="turbo"), r"RUNTIME must name a preset in data/runtime.yaml"),
    ("10_attention_layouts", dict(PP=62), r"PP \(62\) must be at most the layers of deepseek-v3 \(61\)"),
    ("10_attention_layouts", dict(PP=2, SPECULATIVE="deepseek-mtp-1"),
     r"PP \(2\) must be 1 when decoding speculatively with 'deepseek-mtp-1'"),
    ("10_attention_layouts", dict(MODEL="llama-3-70b", SPECULATIVE="deepseek-mtp-1"),
     r"SPECULATIVE 'deepseek-mtp-1' drafts with an MTP module, and llama-3-70b has none"),
    ("10_attention_layouts", dict(ACCEPTED_LENGTH=1.5), r"ACCEPTED_LENGTH must come with speculative"),
    ("20_pd_disaggregation", dict(PREFILL_TP=3), r"PREFILL_TP \(3\) must divide"),
    ("20_pd_disaggregation", dict(SPECULATIVE="deepseek-mtp-1"),
     r"SPECULATIVE 'deepseek-mtp-1' drafts with an MTP module, and llama-3-70b has none"),
    ("20_pd_disaggregation", dict(ACCEPTED_LENGTH=2.0), r"ACCEPTED_LENGTH must come with speculative"),
    ("20_pd_disaggregation", dict(DECODE_PP=81), r"DECODE_PP \(81\) must be at most the layers of llama-3-70b \(80\)"),
    ("20_pd_disaggregation", dict(PREFILL_PP=81), r"PREFILL_PP \(81\) must be at most the layers of llama-3-70b \(80\)"),
    ("20_pd_disaggregation", dict(PRICE_TIER="spot"), r"PRICE_TIER must name a preset in data/prices.yaml \("),
    ("15_speculative_decoding", dict(SPECULATIVE="eagle"), r"SPECULATIVE must name a preset in data/speculative.yaml"),
    ("15_speculative_decoding", dict(MODEL="llama-3-70b"),
     r"MODEL = 'llama-3-70b' does not apply to this notebook: llama-3-70b has no MTP module"),
    ("15_speculative_decoding", dict(ACCEPTED_LENGTH=5.0), r"ACCEPTED_LENGTH must be a finite number in \[1, 2\]"),
    ("30_moe_expert_parallel", dict(MODEL="llama-3-70b"), r"MODEL = 'llama-3-70b' does not apply to this notebook"),
    ("30_moe_expert_parallel", dict(PP=62), r"PP \(62\) must be at most the layers of deepseek-v3 \(61\)"),
    ("30_moe_expert_parallel", dict(PP=2, SPECULATIVE="deepseek-mtp-1"),
     r"PP \(2\) must be 1 when decoding speculatively with 'deepseek-mtp-1'"),
    ("30_moe_expert_parallel", dict(MODEL="qwen3-30b-a3b", SPECULATIVE="deepseek-mtp-1"),
     r"SPECULATIVE 'deepseek-mtp-1' drafts with an MTP module, and qwen3-30b-a3b has none"),
    ("30_moe_expert_parallel", dict(ACCEPTED_LENGTH=1.5), r"ACCEPTED_LENGTH must come with speculative"),
    ("30_moe_expert_parallel", dict(SPECULATIVE="eagle"), r"SPECULATIVE must name a preset in data/speculative.yaml"),
    ("30_moe_expert_parallel", dict(PRICE_TIER="spot"), r"PRICE_TIER must name a preset in data/prices.yaml \("),
    ("40_kv_transfer", dict(DECODE_DP=2), r"DECODE_DP must be <= PREFILL_DP \(1\) with DP_PAIRING = 'index'"),
    ("40_kv_transfer", dict(PREFILL_DP=1024, PREFILL_TP=128), r"PREFILL_TP x PREFILL_DP must be at most 65,536 ranks"),
    ("40_kv_transfer", dict(PREFILL_TP=6), r"PREFILL_TP \(6\) must divide or be a multiple of the KV heads"),
    ("40_kv_transfer", dict(PREFILL_PP=81), r"PREFILL_PP \(81\) must be at most the layers of llama-3-70b \(80\)"),
    ("40_kv_transfer", dict(DECODE_PP=2, SPECULATIVE="eagle3-llama-3.1-8b"),
     r"DECODE_PP \(2\) must be 1 when decoding speculatively with 'eagle3-llama-3.1-8b'"),
    ("40_kv_transfer", dict(SPECULATIVE="deepseek-mtp-1"),
     r"SPECULATIVE 'deepseek-mtp-1' drafts with an MTP module, and llama-3-70b has none"),
    ("50_ssd_offload", dict(STORAGE="floppy"), r"STORAGE must name a preset in data/storage.yaml"),
    ("50_ssd_offload", dict(PRICE_TIER="spot"), r"PRICE_TIER must name a preset in data/prices.yaml \("),
    ("50_ssd_offload", dict(TP=3), r"TP \(3\) must divide the query heads of llama-3-70b"),
    ("50_ssd_offload", dict(HIT_RATIO=1.5), r"HIT_RATIO must be a probability in \[0, 1\]"),
    ("50_ssd_offload", dict(LATENCY_RANGE_US=[100, 10]),
     r"LATENCY_RANGE_US must be a grid extent \[first, last\] with first < last"),
    ("20_pd_disaggregation", dict(TRANSFER_GBPS=400),
     r"TRANSFER_GBPS must be a grid extent \[first, last\] \[GB/s\], got 400"),
    ("50_ssd_offload", dict(TTFT_SLO_MS=500.0), r"TTFT_SLO_MS must exceed the prefill of one PROMPT_TOKENS"),
    ("50_ssd_offload", dict(PP=81), r"PP \(81\) must be at most the layers of llama-3-70b \(80\)"),
    ("50_ssd_offload", dict(PP=80, TP=16), r"PP x TP \(80 x 16 = 1280\) must be at most 1024 GPUs per instance"),
    ("50_ssd_offload", dict(PP=2, SPECULATIVE="eagle3-llama-3.1-8b"),
     r"PP \(2\) must be 1 when decoding speculatively with 'eagle3-llama-3.1-8b'"),
    ("50_ssd_offload", dict(SPECULATIVE="deepseek-mtp-1"),
     r"SPECULATIVE 'deepseek-mtp-1' drafts with an MTP module, and llama-3-70b has none"),
    ("50_ssd_offload", dict(SPECULATIVE="medusa"), r"SPECULATIVE must name a preset in data/speculative.yaml"),
    ("60_deployment_planner", dict(STAT="p95"), r"STAT must be one of mean, p50, p90, p99"),
    ("60_deployment_planner", dict(PIPELINE_SIZES=[200]), r"PIPELINE_SIZES must be an integer in \[1, 128\]"),
    ("60_deployment_planner", dict(SPECULATIVE="deepseek-mtp-1"),
     r"SPECULATIVE 'deepseek-mtp-1' drafts with an MTP module, and qwen3-32b has none"),
    ("60_deployment_planner", dict(WEIGHT_DTYPES=["fp4"]), r"WEIGHT_DTYPES must be a dtype h200 supports"),
    ("60_deployment_planner", dict(PRICE_TIER="spot"), r"PRICE_TIER must name a preset in data/prices.yaml \("),
    ("60_deployment_planner", dict(OBJECTIVE="cheapest"), r"OBJECTIVE must be one of tokens_per_s_per_gpu, usd_per_mtok"),
    ("60_deployment_planner", dict(BUDGET_USD_PER_HOUR=-5.0), r"BUDGET_USD_PER_HOUR must be a finite number in \(0, 1e9\]"),
    ("60_deployment_planner", dict(OTHER_GPUS="b200"), r"OTHER_GPUS must be a list of at most 3 more hardware presets"),
    ("60_deployment_planner", dict(INTERACTIVITY=0.0), r"INTERACTIVITY must be None \(the TPOT target's\) or"),
]


def _parameters(name: str) -> list[str]:
    import papermill as pm

    return list(pm.inspect_notebook(str(NB_DIR / f"{name}.ipynb")))


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_parameter_has_exactly_one_live_case(name):
    covered = [p for changes, signals in CASES[name] for p in changes]
    assert sorted(covered) == sorted(_parameters(name)), (
        f"{name}: each parameter must be changed in exactly one case; missing "
        f"{sorted(set(_parameters(name)) - set(covered))}, repeated {sorted({p for p in covered if covered.count(p) > 1})}")
    for changes, signals in CASES[name]:
        assert set(signals) == set(changes), f"{name}: every changed parameter names its signal ({changes})"
        for p, v in changes.items():
            assert v != BASE[name].get(p, object()), f"{name}: {p} is not changed from the baseline"


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_parameter_moves_its_signal(kernel, name):
    base = kernel.run(name, BASE[name])
    assert base.error is None, f"{name} baseline failed: {base.error}"
    dead = []
    for changes, signals in CASES[name]:
        run = kernel.run(name, {**BASE[name], **changes})
        assert run.error is None, f"{name} with {changes} failed: {run.error}"
        dead += [f"{p} = {changes[p]!r} did not move {s.what}" for p, s in signals.items() if not s.moved(base, run)]
    assert not dead, f"{name}: dead parameters:\n  " + "\n  ".join(dead)


@pytest.mark.parametrize("name, changes, message", REJECTED, ids=[f"{n}-{next(iter(c))}" for n, c, _ in REJECTED])
def test_a_value_that_makes_no_sense_is_rejected_in_one_line(kernel, name, changes, message):
    import re

    run = kernel.run(name, {**BASE[name], **changes})
    assert run.error is not None, f"{name} ran with {changes}; its parameter check should have stopped it"
    imports = next(i for i, (src, _) in enumerate(run.cells) if "check_parameters(" in src)
    assert run.error["cell"] == imports, f"{name}: stopped in cell {run.error['cell']}, not at the parameter check"
    assert run.error["ename"] == "SpecError" and "\n" not in run.error["evalue"]
    assert re.search(message, run.error["evalue"]), run.error["evalue"]
