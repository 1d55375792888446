"""The simulator check: a planned configuration re-run in the iteration-level serving simulator, at its
operating rate or under any traffic (docs/models.md §4.9, §8)."""

from __future__ import annotations

import math

import numpy as np

from ... import _check, presets
from ...deployment import DeploymentConfig
from ...errors import SpecError
from ...models.serving import disagg as dg
from ...models.serving.step_tables import SIM_LAYOUTS
from ...models.step.engine import Deployment
from .question import Question
from .search import config_of

__all__ = ["simulate_row", "simulate_top", "rank_checks", "simulate_config", "CDF_POINTS", "SIM_REQUESTS",
           "SIM_TOLERANCE"]


SIM_REQUESTS = 2000  # requests per simulated check (the summary covers all of them, from an empty start)
SIM_TOLERANCE = 0.10  # relative gap between the analytic estimate and the simulation that is reported


def simulate_row(row: dict, q: Question, *, n_requests: int = SIM_REQUESTS, seed: int = 0) -> dict:
    """Re-check one configuration with the iteration-level serving simulator (:func:`simulate_config`) at its
    operating rate: TTFT and TPOT at the question's statistic, simulated vs analytic, and whether they differ
    by more than :data:`SIM_TOLERANCE`. TP and DPA attention are simulated (``status`` says so otherwise)."""
    out = {"label": row["label"], "ttft_model_ms": row.get("ttft_ms"), "tpot_model_ms": row.get("tpot_ms")}
    if not row.get("feasible"):
        return {**out, "status": "infeasible: not simulated"}
    route = row.get("route_prompt_tokens")
    if route is not None and route == route:
        return {**out, "status": "not simulated: two colocated pools routed by length (the simulator runs one pool "
                                 "per configuration)"}
    if row["decode_layout"] not in SIM_LAYOUTS:
        return {**out, "status": f"not simulated: the simulator runs TP and DPA attention, not "
                                 f"{row['decode_layout']}"}
    try:
        s = simulate_config(config_of(row, q), isl=q.isl, osl=q.osl, rate_per_s=float(row["rate_per_s"]),
                            n_requests=n_requests, runtime=q.runtime, seed=seed)["summary"]
    except SpecError as exc:
        return {**out, "status": f"not simulated: {exc}"}
    ttft, tpot = s[f"ttft_{q.stat}_s"] * 1e3, s[f"tpot_{q.stat}_s"] * 1e3
    d_ttft = ttft / row["ttft_ms"] - 1.0
    d_tpot = tpot / row["tpot_ms"] - 1.0
    flag = abs(d_ttft) > SIM_TOLERANCE or abs(d_tpot) > SIM_TOLERANCE
    return {**out, "status": "simulated", "ttft_sim_ms": ttft, "tpot_sim_ms": tpot, "ttft_gap_pct": 100 * d_ttft,
            "tpot_gap_pct": 100 * d_tpot, "disagrees": bool(flag),
            "meets_targets_sim": bool(ttft <= q.ttft_ms and tpot <= q.tpot_ms), "requests": n_requests,
            "preemptions": int(s.get("preemptions", 0))}


def simulate_top(result: dict, k: int = 3, **kw) -> list[dict]:
    """:func:`simulate_row` for the ``k`` best feasible configurations of a :func:`plan` result, ranked by the
    simulation (:func:`rank_checks`): each carries ``planner_rank`` (1 = the planner's best) and ``sim_rank``."""
    q = result["question"]
    ok = result["table"][result["table"]["feasible"]].head(int(k))
    return rank_checks([{**simulate_row(r, q, **kw), "planner_rank": i + 1}
                        for i, r in enumerate(ok.to_dict("records"))])


def rank_checks(checks: list[dict]) -> list[dict]:
    """The simulator checks ranked by what the simulation says (issue 19 §3: the promise must hold in the
    simulator): configurations that meet both targets in the simulation first, then those that miss one, then
    those not simulated, each group in the planner's order. Adds ``sim_rank`` (1 = the best the simulation
    confirms, if any does)."""
    def group(c):
        if c.get("status") != "simulated":
            return 2
        return 0 if c.get("meets_targets_sim") else 1

    ranked = sorted(checks, key=lambda c: (group(c), c.get("planner_rank", 0)))
    return [{**c, "sim_rank": i + 1} for i, c in enumerate(ranked)]


CDF_POINTS = np.linspace(0.01, 0.99, 99)  # quantiles of the distributions returned for plotting


#: the most output tokens one simulation produces (requests x mean output length): every token keeps an ITL
#: sample and every iteration a record, so memory grows with both (50,000 requests of 100 tokens at batch 2.7:
#: 0.57 GB). The largest run of validate --e2e's sample has 1.34e8 (16,384 requests of 8,192 tokens at batches
#: of thousands).
MAX_SIM_OUTPUT_TOKENS = 150_000_000
#: the most requests one simulation runs (the e2e sample's largest is 16,384)
MAX_SIM_REQUESTS = 200_000


def simulate_config(cfg, *, isl: int, osl: int, rate_per_s: float | None = None,
                    concurrency: int | None = None, n_requests: int = SIM_REQUESTS, runtime: str = "default",
                    isl_sigma: float = 0.0, osl_sigma: float = 0.0, seed: int = 0, trace=None,
                    prefix_ratio: float = 0.0, sampler: str = "fused",
                    capacity_scheduler_policy: str | None = None, request_host_ms: float | None = None,
                    enable_mixed_chunk: bool | None = None, tables_cache=None) -> dict:
    """Simulate one configuration (a :class:`~llmexplore.deployment.DeploymentConfig` or its JSON) under Poisson
    arrivals at ``rate_per_s``, a closed loop of ``concurrency`` requests, or a recorded ``trace`` (a CSV path for
    :func:`llmexplore.traces.load_trace`: its arrivals and lengths replace ``isl``/``osl``, which then only
    size the step tables' context); lengths fixed or lognormal (median ``isl``/``osl`` and log-sd); a share
    ``prefix_ratio`` of each prompt is a cached shared prefix; ``sampler`` is ``Deployment.sampler`` of every
    side (docs/models.md §1.1b). The scheduler's semantics are those of the engine the runtime preset names
    (:func:`llmexplore.models.serving.engines.policy_for`); ``capacity_scheduler_policy`` sets TensorRT-LLM's
    (``GUARANTEED_NO_EVICT``, its default, or ``MAX_UTILIZATION``) and needs a runtime of that engine;
    ``enable_mixed_chunk`` sets SGLang's (False, its default: prefill iterations run apart from the decodes) and
    needs a runtime of that engine; ``tables_cache`` (a
    :class:`~llmexplore.models.serving.step_tables.TablesCache`) shares step tables over a batch of calls. Each
    request spends the runtime preset's serving-stack time (``request_host_ms`` + ``request_host_us_per_token`` x
    its prompt tokens) before it reaches the scheduler; ``request_host_ms`` given replaces it with a fixed time
    per request (0: the pure engine).

    Returns ``summary`` (the simulator's: mean/p50/p90/p99 of TTFT, TPOT, ITL and E2E [s], throughput,
    preemptions, mean decode batch), ``cdf`` ({metric: values [ms] at :data:`CDF_POINTS`}), ``series`` (batch
    and KV occupancy over time, at most 2,000 points per instance), ``config``, ``per_request`` (the simulator's
    per-request arrays, :class:`~llmexplore.models.serving.simulator.ServingResult`) and ``not_resolved`` (why
    the step times are not resolved by kernel data, :func:`~llmexplore.models.step.engine.not_resolved_reason`;
    empty when they are)."""
    from ...models.serving import simulator as sv
    from ...models.serving.engines import Scheduler, runtime_policy
    from ...models.serving.workload import LengthDist, Traffic
    from ...models.serving.step_tables import PipelineTablesCache
    from ...models.step.pipeline import stage_deployment

    cfg = DeploymentConfig.from_json(cfg)
    spec_sides = [s.role for s in cfg.sides if s.speculative is not None]
    if any(r != "decode" for r in spec_sides):  # step_tables.speculative_tables: decode-only iterations
        raise SpecError(f"the serving simulator runs speculative decoding on a disaggregated decode pool, not on "
                        f"colocated instances (a prefill chunk beside speculative decodes is not simulated; the "
                        f"{spec_sides[0]} side's {cfg.side(spec_sides[0]).speculative.name}): its TTFT and TPOT "
                        "are the analytic model's only")
    isl = _check.integer("isl", isl, lo=1, hi=dg.MAX_WORKLOAD_TOKENS, unit="tokens")
    osl = _check.integer("osl", osl, lo=1, hi=dg.MAX_WORKLOAD_TOKENS, unit="tokens")
    n_requests = _check.integer("requests", n_requests, lo=1, hi=MAX_SIM_REQUESTS)

    def dist(med, sig):
        return LengthDist.fixed(med) if not sig else LengthDist.lognormal(med, sig)

    if trace is not None:
        from ...traces import load_trace

        if rate_per_s is not None or concurrency is not None:
            raise SpecError("trace replays its own arrivals: give no rate_per_s or concurrency with it")
        traffic = load_trace(trace, prefix_ratio=prefix_ratio)
        n_requests = min(n_requests, len(traffic.trace))
    else:
        traffic = Traffic(rate_per_s=rate_per_s, concurrency=concurrency, isl=dist(isl, isl_sigma),
                          osl=dist(osl, osl_sigma), prefix_ratio=prefix_ratio)
    # the simulator steps through every iteration and keeps its records (~330 B each, ~3.5 us of work): with one
    # decode per iteration in the worst case that is one iteration per output token
    if trace is not None:
        outputs = float(np.sum(np.asarray(traffic.trace.output_tokens[:n_requests], dtype=float)))
        what = f"the trace's first {n_requests:,} requests hold {outputs:,.0f}"
    else:
        mean_osl = osl * math.exp(osl_sigma ** 2 / 2) if osl_sigma else osl
        outputs = n_requests * mean_osl
        what = f"requests × osl = {n_requests:,} × {osl:,} = {outputs:,.0f}"
    if outputs > MAX_SIM_OUTPUT_TOKENS:
        raise SpecError(f"requests × osl must be at most {MAX_SIM_OUTPUT_TOKENS:,} output tokens (every token keeps "
                        f"an ITL sample and every iteration a record: gigabytes beyond that), got {what}; simulate "
                        "fewer of them or shorter outputs")
    for s in cfg.sides:
        if s.layout not in SIM_LAYOUTS:
            raise SpecError(f"the simulator runs TP and DPA attention; config side {s.role!r} has layout "
                            f"{s.layout!r}")

    moe = presets.model(cfg.model).is_moe
    engine = presets.runtime(runtime).engine
    knobs = {}
    if capacity_scheduler_policy is not None:
        if engine != "trtllm":
            raise SpecError(f"capacity_scheduler_policy is TensorRT-LLM's: it needs a runtime preset of that engine "
                            f"(engine 'trtllm'), got runtime {runtime!r} (engine {engine!r})")
        knobs["capacity_scheduler_policy"] = capacity_scheduler_policy
    if enable_mixed_chunk is not None:
        if engine != "sglang":
            raise SpecError(f"enable_mixed_chunk is SGLang's: it needs a runtime preset of that engine (engine "
                            f"'sglang'), got runtime {runtime!r} (engine {engine!r})")
        knobs["enable_mixed_chunk"] = _check.boolean("enable_mixed_chunk", enable_mixed_chunk)
    if request_host_ms is not None:  # the caller's serving-stack time (0: the pure engine) replaces the preset's
        ms = _check.number("request_host_ms", request_host_ms, lo=0, hi=1e4, unit="ms")
        knobs.update(request_host_s=ms / 1e3, request_host_s_per_token=0.0)
    policy = runtime_policy(presets.runtime(runtime), **knobs)

    def dep(s):
        # a DPA side's MoE dispatch is its own (all-to-all runs only as DPA; a TP side gathers)
        return Deployment.build(cfg.model, s.gpu or cfg.gpu, s.ranks, runtime=runtime, weight_dtype=cfg.weight_dtype,
                                kv_dtype=cfg.kv_dtype, moe_ep=s.ep if moe and s.ep != s.ranks else None,
                                sampler=sampler,
                                moe_dispatch=s.moe_dispatch if moe and s.layout == "DPA" else "gather")

    # a pipeline-parallel side runs as pp virtual engines per instance (vLLM's virtual engines, TensorRT-LLM's and
    # SGLang's micro-batches): each with 1/pp of the requests, of max_num_seqs and of the KV blocks, and an
    # iteration of pp times the slowest stage (step_tables.pipeline_tables)
    stages = {}

    def side_scheduler(s, d, seqs, tokens):
        if s.pp == 1:
            return Scheduler(max_num_seqs=seqs, max_num_batched_tokens=tokens, block_tokens=d.runtime.page_tokens)
        blocks = policy.kv_blocks(stage_deployment(d, s.pp), Scheduler(block_tokens=d.runtime.page_tokens)) // s.pp
        return Scheduler(max_num_seqs=max(1, -(-seqs // s.pp)), max_num_batched_tokens=tokens,
                         block_tokens=d.runtime.page_tokens, kv_blocks=max(int(blocks), 1))

    if any(s.pp > 1 for s in cfg.sides):
        for s in cfg.sides:
            if s.pp > 1:
                stages[(repr(dep(s)), s.role != "prefill")] = s.pp
        tables_cache = PipelineTablesCache(stages, tables_cache)
    if len(cfg.sides) == 2 and cfg.mode == "colocated":
        raise SpecError("a configuration of two colocated pools routed by length is not simulated (the simulator runs "
                        "one pool): simulate each pool alone with its own side and its requests' lengths")
    if cfg.mode == "colocated":
        s = cfg.side("colocated")
        seqs = s.max_num_seqs
        chunk = max(s.chunk_tokens or 2048, seqs)
        d = dep(s)
        # KV blocks of the runtime's page size (the one the memory model pages with)
        res = sv.simulate_colocated(d, traffic, n_requests, instances=s.instances * s.pp,
                                    scheduler=side_scheduler(s, d, seqs, chunk),
                                    seed=seed, policy=policy, layout=s.layout, tables_cache=tables_cache)
    else:
        p, d = cfg.side("prefill"), cfg.side("decode")
        link = presets.link(cfg.link or presets.hardware(p.gpu or cfg.gpu).scale_out_link or "roce-400g")
        seqs = d.max_num_seqs
        dd = dep(d)
        res = sv.simulate_disaggregated(dep(p), dd, link, traffic, n_requests,
                                        prefill_instances=p.instances * p.pp, decode_instances=d.instances * d.pp,
                                        prefill_tokens=max(isl, 1),
                                        decode_scheduler=side_scheduler(d, dd, seqs, max(seqs, 2048)),
                                        seed=seed, policy=policy, prefill_layout=p.layout,
                                        decode_layout=d.layout, tables_cache=tables_cache,
                                        decode_speculative=d.speculative)
    req = res.requests
    cdf = {}
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        v = req[name][np.isfinite(req[name])]
        cdf[name[:-2] + "_ms"] = (np.quantile(v, CDF_POINTS) * 1e3 if v.size else np.full(CDF_POINTS.size, np.nan))
    cdf["itl_ms"] = sv.weighted_quantile(res.itl_s, res.itl_weight, CDF_POINTS) * 1e3
    ser = res.series
    step = max(1, ser["step_s"].size // 2000)
    series = {k: np.asarray(ser[k])[::step] for k in ("instance", "start_s", "decode_batch", "kv_occupancy")
              if k in ser}
    from ...models.step.engine import not_resolved_reason

    why = list(dict.fromkeys(r for r in (not_resolved_reason(dep(s)) for s in cfg.sides) if r))
    return {"summary": res.summary, "cdf": cdf, "quantiles": CDF_POINTS, "series": series, "config": cfg.to_json(),
            "per_request": req, "not_resolved": why}
