"""Iteration-level discrete-event simulation of continuous batching (vLLM-style), priced by the step engine
(docs/models.md §4.9).

The analytical serving models (:mod:`.disagg`, docs/models.md §4.5-4.7) use queueing formulas and mean
batches. This module simulates what a serving engine does, one forward iteration at a time, for a stream of
requests (:mod:`.workload`), and reports per-request TTFT, TPOT, inter-token latencies (ITL) and end-to-end
latency, throughput, and the batch and KV-cache occupancy of every iteration.

**Colocated** (:func:`simulate_colocated`): ``instances`` copies of a deployment, requests split round-robin.
Each iteration of an instance, as vLLM V1's scheduler does (:class:`.engines.Scheduler` holds its knobs; the
loop is :class:`.batcher.Batcher`, whose methods are these steps, and what differs between engines sits in
its :class:`.engines.EnginePolicy`):

1. requests that arrived join the FCFS waiting queue;
2. the running requests are scheduled first: every decoding request one token, then the running partial
   prefills, in admission order, chunks from the token budget ``max_num_batched_tokens`` minus the decodes;
3. KV memory is paged in blocks of ``block_tokens``; a request holds ceil(tokens in KV / block) blocks and
   a block is allocated only when a token needs it. If the iteration's new blocks do not fit, requests are
   **preempted by recompute** (vLLM V1's default and only policy): the most recently admitted running
   request is evicted, its blocks freed, and it is put back at the *front* of the waiting queue; when
   readmitted it prefills its prompt and the tokens it already generated again (the shared prefix of
   ``prefix_tokens`` still hits the cache; nothing else does) and then continues decoding. Repeat until the
   iteration fits;
4. waiting requests are admitted FCFS while there are fewer than ``max_num_seqs`` running, token budget is
   left, and the blocks of their first chunk fit; the first that does not fit stops admission;
5. the iteration is priced by the step engine: the GEMMs, FFN, collectives and overheads of all its tokens
   once, the decode attention core at the decodes' mean context, the prefill chunks' causal core, and the
   LM head for every decode and every prefill chunk (:func:`..step.prefill.mixed_step_time`, which it reproduces
   exactly for one chunk; several chunks are priced as one chunk with the same query-key pairs);
6. every decode emits a token; a prefill whose last chunk ran emits its first token (TTFT) and joins the
   decodes; finished requests free their blocks.

**Disaggregated** (:func:`simulate_disaggregated`): prefill instances share one FCFS queue and run batches
of whole prompts up to a token budget (one longer prompt runs alone). Each request's KV then crosses the
link (:func:`..step.kv_transfer.transfer_time`) through the sending instance's NICs, a FIFO server: a transfer
waits for the NICs to finish the previous one. TTFT ends when the KV has arrived (the first token travels
with it). Decode instances (requests round-robin in order of arrival) run the colocated loop with requests
that arrive holding their KV; a preempted request recomputes on the decode instance.

**Speed.** The step engine prices ~50 us per call; a run has ~1e5 iterations. So the step times are
tabulated once per simulation with the vectorised engine (:mod:`.step_tables`), within 0.1 % of direct calls
(tests/unit/models/serving/test_serving.py). Stretches of pure decode between events (arrival, finish, memory
exhaustion) are advanced as one vectorised span. Requests arrive in order, so the loop holds a few Python
lists and a heap, not an object per request or token.

**ITL.** All decodes of an iteration get the same gap (its duration), so ITLs are kept as the iterations'
durations weighted by how many decodes they served, plus one sample per gap that is not one iteration (a
preempted request's gap across its recompute, a transferred request's first decode gap). TPOT of a request
is (last token - first token) / (output - 1), NaN for one-token outputs.

**Data-parallel attention** (``layout="DPA"``, either mode and either side): an instance of T ranks runs one
scheduler per attention-DP rank, as SGLang, vLLM and TensorRT-LLM do. Each rank holds its own requests' whole KV
in its own memory (:func:`.engines.kv_capacity_blocks` with the DPA layout) and admits at most
ceil(max_num_seqs / T) of them (the configuration's ``max_num_seqs`` counts the instance's,
:meth:`.engines.EnginePolicy.dp_rank_scheduler`). Requests are dealt round-robin over the instances' ranks
(SGLang's DP controller's default ``round_robin``) and each rank's iteration is priced with every rank as loaded
as it is (:mod:`.step_tables`, "DPA": exact for balanced ranks, optimistic by their imbalance otherwise). A
disaggregated request's KV goes from the one prefill rank that holds it to one decode rank (TP degree 1 on a DPA
side of the transfer), through that rank's NIC.

Assumptions: TP layout pricing (:func:`..step.prefill.mixed_step_time`), or DPA as above; a cached prefix is counted in the KV of
every request that uses it (shared blocks are not deduplicated); no CPU swap; speculative decoding on a
disaggregated decode pool only (:func:`.step_tables.speculative_tables`: tokens at the cycle's mean rate, every
sequence accepting the mean tau); the prefill instances' KV memory is not limited and they do not wait for the
decode side.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from ... import _check
from ...errors import SpecError
from ...specs import Link
from ..step.engine import Deployment
from ..step.kv_transfer import transfer_time
from .batcher import Batcher
from .engines import DEFAULT_POLICY, EnginePolicy, Scheduler, runtime_policy
from .step_tables import SIM_LAYOUTS, StepTables, TablesCache, speculative_tables, step_tables
from ..step.speculative import check_spec, resolve_spec
from .workload import Traffic, requests

__all__ = ["ServingResult", "simulate_colocated", "simulate_disaggregated", "weighted_quantile", "METRICS",
           "QUANTILES"]

METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
QUANTILES = (0.5, 0.9, 0.99)
MAX_INSTANCES = 1024


# ---- results ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class ServingResult:
    """A simulated run.

    ``requests``: per-request arrays, shape (n,): ``arrival_s``, ``prompt_tokens``, ``output_tokens``,
    ``prefix_tokens``, ``first_token_s``, ``finish_s``, ``ttft_s``, ``tpot_s`` (NaN for one-token outputs),
    ``e2e_s``, ``instance`` (the decode instance in disaggregated mode), ``preemptions``; disaggregated runs
    add ``prefill_done_s``, ``transfer_s`` (transfer start to arrival) and ``prefill_instance``; a DPA side adds
    its attention-DP rank within the instance (``dp_rank``, ``prefill_dp_rank``).
    ``itl_s`` / ``itl_weight``: inter-token gaps and how many gaps each value stands for. ``series``: per
    iteration of every scheduler, ``instance``, ``start_s``, ``step_s``, ``batch`` (requests scheduled),
    ``decode_batch``, ``prefill_tokens``, ``kv_blocks`` (in use) and ``kv_occupancy`` (share of capacity), and
    under DPA ``dp_rank`` (each attention-DP rank schedules its own; its counts are its own).
    ``kv_blocks``: the KV capacity of each scheduler (one per instance; under DPA one per rank).
    ``summary``: mean/p50/p90/p99 of each metric, throughput and counts (see :func:`simulate_colocated`).
    """

    requests: dict
    itl_s: np.ndarray
    itl_weight: np.ndarray
    series: dict
    summary: dict
    kv_blocks: tuple


def weighted_quantile(values, weights, q) -> np.ndarray:
    """Quantiles ``q`` of ``values`` where value i stands for ``weights[i]`` samples (the smallest value
    with at least q of the total weight at or below it)."""
    v = np.asarray(values, dtype=float).ravel()
    w = np.asarray(weights, dtype=float).ravel()
    qs = np.atleast_1d(np.asarray(q, dtype=float))
    keep = w > 0
    v, w = v[keep], w[keep]
    if v.size == 0:
        return np.full(qs.shape, np.nan)
    o = np.argsort(v, kind="stable")
    cw = np.cumsum(w[o])
    idx = np.searchsorted(cw, qs * cw[-1] * (1 - 1e-12), side="left")
    return v[o][np.minimum(idx, v.size - 1)]


def _summary(req: dict, itl: np.ndarray, itl_w: np.ndarray, series: dict) -> dict:
    out = {}
    for name in METRICS:
        if name == "itl_s":
            vals, w = itl, itl_w
            mean = float(np.sum(vals * w) / np.sum(w)) if np.sum(w) > 0 else math.nan
            qs = weighted_quantile(vals, w, QUANTILES)
        else:
            vals = req[name][np.isfinite(req[name])]
            mean = float(vals.mean()) if vals.size else math.nan
            qs = np.quantile(vals, QUANTILES) if vals.size else np.full(len(QUANTILES), np.nan)
        base = name[:-2]
        out[f"{base}_mean_s"] = mean
        for q, v in zip(QUANTILES, qs):
            out[f"{base}_p{round(100 * q)}_s"] = float(v)
    t0, t1 = float(req["arrival_s"].min()), float(req["finish_s"].max())
    span = max(t1 - t0, 1e-300)
    out["makespan_s"] = t1 - t0
    out["output_tokens_per_s"] = float(req["output_tokens"].sum()) / span
    out["requests_per_s"] = req["arrival_s"].size / span
    out["requests"] = int(req["arrival_s"].size)
    out["output_tokens"] = int(req["output_tokens"].sum())
    out["preemptions"] = int(req["preemptions"].sum())
    out["iterations"] = int(series["step_s"].size)
    busy = float(series["step_s"].sum())
    out["mean_decode_batch"] = (float(np.sum(series["decode_batch"] * series["step_s"]) / busy) if busy > 0
                                else 0.0)  # time-weighted over busy iterations
    return out


# ---- public simulations -----------------------------------------------------------------------------------------
def _check_common(traffic, n_requests, instances, name="instances"):
    if not isinstance(traffic, Traffic):
        raise SpecError(f"traffic must be a Traffic (llmexplore.models.serving.workload), got {type(traffic).__name__}")
    k = _check.integer(name, instances, lo=1, hi=MAX_INSTANCES)
    return k


def _check_fit(req: dict, kv_blocks: int, bt: int, where: str) -> None:
    need = -(-(req["prompt_tokens"] + req["output_tokens"]) // bt)
    if np.any(need > kv_blocks):
        i = int(np.argmax(need > kv_blocks))
        raise SpecError(f"request {i} ({int(req['prompt_tokens'][i])} + {int(req['output_tokens'][i])} tokens) "
                        f"needs {int(need[i])} KV blocks of {bt} tokens, more than the {kv_blocks} one {where} "
                        "holds: it could never finish (shorten it, or give the instance more memory)")


def _check_policy(policy, dep: Deployment) -> EnginePolicy:
    """``policy``, or with None the policy of the engine ``dep``'s runtime preset names (``Runtime.engine``), with
    that runtime's serving-stack time per request (``Runtime.request_host_ms`` + ``request_host_us_per_token``)."""
    if policy is None:
        return runtime_policy(dep.runtime)
    if not isinstance(policy, EnginePolicy):
        raise SpecError(f"policy must be an EnginePolicy (llmexplore.models.serving.engines) or None, got "
                        f"{type(policy).__name__}")
    return policy


def _blocks(dep: Deployment, sched: Scheduler, where: str, policy: EnginePolicy, layout: str = "TP",
            speculative=None) -> int:
    # a policy written before DPA was simulated takes (dep, scheduler): TP calls it so
    if speculative is not None:
        kv = policy.kv_blocks(dep, sched, layout, speculative)
    else:
        kv = policy.kv_blocks(dep, sched) if layout == "TP" else policy.kv_blocks(dep, sched, layout)
    if kv < 1:
        raise SpecError(f"the {where} has no memory left for KV blocks: the weights, activations and reserve of "
                        f"{dep.label()}{' (DPA)' if layout == 'DPA' else ''} exceed its usable HBM (more ranks or "
                        f"smaller weights)")
    return kv


def _layout(name: str, layout, dep: Deployment) -> int:
    """Attention-DP ranks per instance of a side run with ``layout`` (1 for TP); SpecError naming ``name``."""
    _check.choice(name, layout, SIM_LAYOUTS)
    dep.check_layout(layout)
    return dep.ranks if layout == "DPA" else 1


def _schedulers(k: int, ranks: int, concurrency: int | None) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The schedulers requests are dealt to: (instance, attention-DP rank, clients) of each, j = 0.. in dealing
    order (request i goes to scheduler i mod their number: the instances in turn, then the ranks). A closed
    loop's clients split as evenly as they go; under DPA a rank with no client is left out (it idles), while an
    instance without one is an error."""
    S = k * ranks
    j = np.arange(S)
    inst, rank = j % k, j // k
    if concurrency is None:
        return inst, rank, [0] * S
    conc = [concurrency // S + (i < concurrency % S) for i in range(S)]
    if concurrency < k:
        raise SpecError(f"concurrency ({concurrency}) must be >= instances ({k})")
    keep = [i for i in range(S) if conc[i] > 0]
    return inst[keep], rank[keep], [conc[i] for i in keep]


class _Runs:
    """Batcher runs of one simulation by their inputs. A run is deterministic, so schedulers given the same
    requests (the ranks of a DPA instance under a closed loop of fixed lengths, or a decode server whose arrivals
    did not move between two passes of the closed-loop fixed point) share one run, exactly. Holds the runs of
    the current pass and the one before (:meth:`next_pass`), so memory stays at two passes' worth."""

    def __init__(self):
        self.prev, self.cur = {}, {}

    def run(self, tables, scheduler, kv, arrival, prompt, output, prefix, *, have_kv=False, concurrency=0,
            policy=DEFAULT_POLICY) -> tuple:
        # a closed loop overwrites the arrivals, so they are not part of its key
        key = (kv, have_kv, concurrency, b"" if concurrency else np.ascontiguousarray(arrival, dtype=float).tobytes(),
               np.ascontiguousarray(prompt).tobytes(), np.ascontiguousarray(output).tobytes(),
               np.ascontiguousarray(prefix).tobytes())
        out = self.cur.get(key)
        if out is None:
            out = self.prev.get(key)
            if out is None:
                out = Batcher(tables, scheduler, kv, arrival, prompt, output, prefix, have_kv=have_kv,
                              concurrency=concurrency, policy=policy).run()
            self.cur[key] = out
        return out

    def next_pass(self) -> None:
        self.prev, self.cur = self.cur, {}


def _assemble(req: dict, first, finish, npre, inst, extra_all, series_parts, kv_blocks, more=None,
              ranks=None, tokens_per_step: float = 1.0) -> ServingResult:
    """The result from per-scheduler parts: ``series_parts`` [(instance, series tuple)], ``kv_blocks`` the
    capacity of each part's scheduler, ``ranks`` (DPA) each part's attention-DP rank. ``tokens_per_step`` tau > 1:
    the parts decode speculatively, their iterations standing for 1 / tau of a draft + verify cycle
    (:func:`.step_tables.speculative_tables`); the ITL is restored to what a client sees, a burst of tau tokens per
    cycle: a gap of the cycle (tau x the iteration) for 1 / tau of the tokens and none for the rest."""
    req = dict(req)
    req["first_token_s"] = first
    req["finish_s"] = finish
    req["ttft_s"] = first - req["arrival_s"]
    req["e2e_s"] = finish - req["arrival_s"]
    with np.errstate(invalid="ignore", divide="ignore"):
        req["tpot_s"] = np.where(req["output_tokens"] > 1, (finish - first) / (req["output_tokens"] - 1), np.nan)
    req["instance"] = inst
    req["preemptions"] = npre
    if more:
        req.update(more)
    cols = ("start_s", "step_s", "batch", "decode_batch", "weight", "prefill_tokens", "kv_blocks")
    series = {c: np.concatenate([p[k] for _, p in series_parts]) for k, c in enumerate(cols)}
    series["instance"] = np.concatenate([np.full(p[0].size, j) for j, p in series_parts]).astype(np.int64)
    cap = np.concatenate([np.full(p[0].size, float(kv_blocks[i])) for i, (_, p) in enumerate(series_parts)])
    if ranks is not None:
        series["dp_rank"] = np.concatenate([np.full(p[0].size, r) for r, (_, p) in zip(ranks, series_parts)]
                                           ).astype(np.int64)
    series["kv_occupancy"] = series["kv_blocks"] / cap
    for c in ("batch", "decode_batch", "prefill_tokens", "kv_blocks"):
        series[c] = series[c].astype(np.int64)
    weight = series.pop("weight")
    if tokens_per_step > 1:
        tau = float(tokens_per_step)
        burst = float(np.sum(weight)) * (1.0 - 1.0 / tau)
        itl = np.concatenate([series["step_s"] * tau, [0.0], extra_all])
        itl_w = np.concatenate([weight / tau, [burst], np.ones(extra_all.size)])
    else:
        itl = np.concatenate([series["step_s"], extra_all])
        itl_w = np.concatenate([weight, np.ones(extra_all.size)])
    keep = itl_w > 0
    return ServingResult(requests=req, itl_s=itl[keep], itl_weight=itl_w[keep], series=series,
                         summary=_summary(req, itl[keep], itl_w[keep], series), kv_blocks=tuple(kv_blocks))


def _iteration_tokens(req: dict, scheduler: Scheduler, policy: EnginePolicy) -> int:
    """Most tokens one iteration can carry: the scheduler's budget, or when prompts run whole (no chunked
    prefill) the longest prompt (or recompute after a preemption, prompt + output) beside a full batch."""
    budget = scheduler.max_num_batched_tokens
    if policy.chunked_prefill:
        return budget
    # a preempted request recomputes its prompt and what it generated; reservation to completion never preempts
    longest = req["prompt_tokens"] if policy.reserve_to_completion else req["prompt_tokens"] + req["output_tokens"]
    return max(budget, int(longest.max()) + scheduler.max_num_seqs)


def simulate_colocated(dep: Deployment, traffic: Traffic, n_requests: int | None = None, *, instances: int = 1,
                       scheduler: Scheduler = Scheduler(), seed=0, tables: StepTables | None = None,
                       policy: EnginePolicy | None = None, layout: str = "TP",
                       tables_cache: TablesCache | None = None) -> ServingResult:
    """Simulate ``n_requests`` of ``traffic`` on ``instances`` colocated instances of ``dep`` (continuous
    batching with chunked prefill, the loop of the module docstring); request i goes to instance
    i mod ``instances`` (a closed-loop ``concurrency`` is split the same way).

    Returns a :class:`ServingResult`; its ``summary`` has ``{ttft,tpot,itl,e2e}_{mean,p50,p90,p99}_s``,
    ``output_tokens_per_s`` and ``requests_per_s`` (over first arrival to last finish), ``preemptions``,
    ``iterations`` (of every scheduler), ``mean_decode_batch`` (per instance, time-weighted over busy
    iterations; a DPA instance's sums its ranks') and ``makespan_s``.
    Deterministic for a ``seed``. ``tables``: precomputed :func:`.step_tables.step_tables` (built when None).
    ``policy``: the serving engine's semantics (:class:`.engines.EnginePolicy`); None: those of the engine the
    runtime preset names (``dep.runtime.engine``: ``trtllm`` reserves blocks to completion, the others and
    engine-neutral presets run the base policy). ``layout`` "DPA": each instance's ranks schedule their own
    requests (module docstring), ``scheduler`` is the instance's (its ``max_num_seqs`` split over the ranks,
    its ``kv_blocks``, if given, each rank's) and ``tables`` must be DPA tables. ``tables_cache``: a
    :class:`.step_tables.TablesCache` the tables come from when ``tables`` is None (the same numbers, built once
    for a batch of simulations).
    """
    k = _check_common(traffic, n_requests, instances)
    if not isinstance(scheduler, Scheduler):
        raise SpecError(f"scheduler must be a Scheduler, got {type(scheduler).__name__}")
    if not isinstance(dep, Deployment):
        raise SpecError(f"dep must be a Deployment, got {type(dep).__name__}")
    policy = _check_policy(policy, dep)
    T = _layout("layout", layout, dep)
    sched = policy.dp_rank_scheduler(scheduler, T) if layout == "DPA" else scheduler
    where = "attention-DP rank" if layout == "DPA" else "instance"
    req = requests(traffic, n_requests, seed)
    kv = _blocks(dep, sched, where, policy, layout)
    _check_fit(req, kv, sched.block_tokens, where)
    n = req["prompt_tokens"].size
    tokens = _iteration_tokens(req, sched, policy)
    if tables is None:
        build = step_tables if tables_cache is None else tables_cache.get
        tables = build(dep, max_tokens=tokens, max_batch=sched.max_num_seqs,
                       max_context=int((req["prompt_tokens"] + req["output_tokens"]).max()) + 1, layout=layout)
    elif tables.max_tokens < tokens or tables.max_batch < sched.max_num_seqs or tables.layout != layout:
        raise SpecError(f"tables must be of layout {layout} and cover the iteration's {tokens:,} tokens (the "
                        f"scheduler's max_num_batched_tokens, or with whole prompts the longest one beside a full "
                        f"batch) and max_num_seqs ({sched.max_num_seqs}{' per rank' if layout == 'DPA' else ''}); "
                        f"build them with step_tables(dep, max_tokens=..., max_batch=..., max_context=..., "
                        f"layout=...)")
    first, finish, npre = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=np.int64)
    arrival = np.array(req["arrival_s"])
    s_inst, s_rank, s_conc = _schedulers(k, T, traffic.concurrency)
    who = np.arange(n) % s_inst.size
    extra, parts = [], []
    runs = _Runs()
    for j in range(s_inst.size):
        idx = np.nonzero(who == j)[0]
        if idx.size == 0:
            parts.append((int(s_inst[j]), tuple(np.zeros(0) for _ in range(7))))
            continue
        f, e, p, a, x, s = runs.run(tables, sched, kv, arrival[idx], req["prompt_tokens"][idx],
                                    req["output_tokens"][idx], req["prefix_tokens"][idx], concurrency=s_conc[j],
                                    policy=policy)
        first[idx], finish[idx], npre[idx], arrival[idx] = f, e, p, a
        extra.append(x)
        parts.append((int(s_inst[j]), s))
    req["arrival_s"] = arrival
    more = {"dp_rank": s_rank[who]} if layout == "DPA" else None
    res = _assemble(req, first, finish, npre, s_inst[who], np.concatenate(extra) if extra else np.zeros(0), parts,
                    [kv] * s_inst.size, more, s_rank.tolist() if layout == "DPA" else None)
    return _per_instance_batch(res, s_inst.size / k)


def simulate_disaggregated(prefill_dep: Deployment, decode_dep: Deployment, link: Link, traffic: Traffic,
                           n_requests: int | None = None, *, prefill_instances: int = 1, decode_instances: int = 1,
                           prefill_tokens: int = 8192, decode_scheduler: Scheduler = Scheduler(), seed=0,
                           nics: int | None = None, batched_ops: bool = True, op_overhead_us: float = 1.0,
                           policy: EnginePolicy | None = None, prefill_layout: str = "TP",
                           decode_layout: str = "TP", tables_cache: TablesCache | None = None,
                           decode_speculative=None) -> ServingResult:
    """Simulate ``n_requests`` of open-loop ``traffic`` on a disaggregated deployment (module docstring).

    Prefill: ``prefill_instances`` of ``prefill_dep`` behind one FCFS queue, each running batches of whole
    prompts of at most ``prefill_tokens`` new tokens (one longer prompt alone). Transfer: the prompt's KV
    (:func:`..step.kv_transfer.transfer_time` with both sides' TP degrees, the decode KV dtype and page size,
    ``nics``, ``batched_ops``, ``op_overhead_us``) queues FIFO on the sending instance's NICs, which are busy
    for its bandwidth and operation time; it arrives ``transfer_s`` after it starts. Decode:
    ``decode_instances`` of ``decode_dep`` with ``decode_scheduler``, requests dealt round-robin in order of
    arrival. TTFT = KV arrival - request arrival. ``policy`` (:class:`.engines.EnginePolicy`; None: that of
    the engine ``decode_dep``'s runtime preset names): the engine's semantics on both sides; its per-request host time delays a request's arrival at the prefill queue, its
    per-step host time lengthens every prefill batch and decode iteration. Returns a :class:`ServingResult`
    (``requests`` adds ``prefill_done_s``, ``transfer_s``, ``prefill_instance``). ``prefill_layout`` /
    ``decode_layout`` "DPA": that side's ranks each serve their own requests (module docstring): a prefill rank
    runs its own batches (``prefill_tokens`` each), a decode rank has its own KV and ceil(max_num_seqs / ranks)
    of ``decode_scheduler``'s requests. ``tables_cache``: as :func:`simulate_colocated` takes it.
    ``decode_speculative`` (a speculative-decoding preset or SpecDecode): the decode instances decode
    speculatively, their iterations in output tokens at the cycle's time per token
    (:func:`.step_tables.speculative_tables`), their KV capacity less the draft's weights, KV and verify slots
    (:func:`.engines.kv_capacity_blocks`), the ITL in bursts of tau tokens (:func:`_assemble`).
    """
    kp = _check_common(traffic, n_requests, prefill_instances, "prefill_instances")
    kd = _check.integer("decode_instances", decode_instances, lo=1, hi=MAX_INSTANCES)
    for nm, d in (("prefill_dep", prefill_dep), ("decode_dep", decode_dep)):
        if not isinstance(d, Deployment):
            raise SpecError(f"{nm} must be a Deployment, got {type(d).__name__}")
    if not isinstance(link, Link):
        raise SpecError(f"link must be a Link preset (llmexplore.presets.link), got {type(link).__name__}")
    if not isinstance(decode_scheduler, Scheduler):
        raise SpecError(f"decode_scheduler must be a Scheduler, got {type(decode_scheduler).__name__}")
    if prefill_dep.model.name != decode_dep.model.name:
        raise SpecError(f"prefill_dep and decode_dep must serve the same model, got {prefill_dep.model.name} and "
                        f"{decode_dep.model.name}")
    budget = _check.integer("prefill_tokens", prefill_tokens, lo=1, hi=1 << 20, unit="tokens")
    policy = _check_policy(policy, decode_dep)
    Tp = _layout("prefill_layout", prefill_layout, prefill_dep)
    Td = _layout("decode_layout", decode_layout, decode_dep)
    if decode_layout == "DPA":
        decode_scheduler = policy.dp_rank_scheduler(decode_scheduler, Td)
    where = "decode attention-DP rank" if decode_layout == "DPA" else "decode instance"
    spec = resolve_spec(decode_speculative)
    if spec is not None:
        check_spec(decode_dep.model, spec)
    req = requests(traffic, n_requests, seed)
    kv = _blocks(decode_dep, decode_scheduler, where, policy, decode_layout, spec)
    _check_fit(req, kv, decode_scheduler.block_tokens, where)
    n = req["prompt_tokens"].size
    P, X0 = req["prompt_tokens"], req["prefix_tokens"]
    new = (P - X0).tolist()
    # ---- prefill pool: one FCFS queue, batches of whole prompts ---------------------------------------------------
    Sctx = int((P + req["output_tokens"]).max()) + 1
    build = step_tables if tables_cache is None else tables_cache.get
    tp = build(prefill_dep, max_tokens=max(budget, int(max(new))), max_batch=min(budget, 1 << 16),
               max_context=Sctx, layout=prefill_layout, decodes=False)
    host = policy.request_host_s + policy.request_host_s_per_token * P  # the serving stack, per request [s]
    x0 = X0.tolist()
    tr = transfer_time(prefill_dep.model, link, P.astype(float), kv_dtype=decode_dep.kv_dtype,
                       page_tokens=decode_dep.runtime.page_tokens, prefill_tp=prefill_dep.ranks // Tp,
                       decode_tp=decode_dep.ranks // Td, op_overhead_us=op_overhead_us, batched_ops=batched_ops,
                       nics=nics)
    busy = np.broadcast_to(tr["bandwidth_s"] + tr["ops_s"], P.shape)
    total = np.broadcast_to(tr["transfer_s"], P.shape)
    td = build(decode_dep, max_tokens=_iteration_tokens(req, decode_scheduler, policy),
               max_batch=decode_scheduler.max_num_seqs, max_context=Sctx, layout=decode_layout)
    td = speculative_tables(td, spec)
    # the servers of each side: an instance each, or under DPA each instance's ranks (dealt instances first)
    args = (req, n, kp * Tp, kd * Td, budget, tp, td, kv, policy, decode_scheduler, P, X0, new, x0, busy, total,
            _Runs())
    if traffic.concurrency is None:
        out = _disagg_pass(req["arrival_s"] + host, *args)
    else:  # closed loop: iterate to the fixed point of "the next request arrives when one finishes"
        out = _closed_loop_fixed_point(traffic.concurrency, host, args)
    first, finish, npre, srv, extra, parts, more = out
    # server j is instance j mod k, attention-DP rank j // k (_schedulers' dealing order)
    inst = np.where(srv >= 0, srv % kd, -1)
    pj = more["prefill_instance"]
    more["prefill_instance"] = pj % kp
    if prefill_layout == "DPA":
        more["prefill_dp_rank"] = pj // kp
    if decode_layout == "DPA":
        more["dp_rank"] = np.where(srv >= 0, srv // kd, -1)
    parts = [(j % kd, p) for j, p in parts]
    ranks = [j // kd for j in range(kd * Td)] if decode_layout == "DPA" else None
    res = _assemble(req, first, finish, npre, inst, np.concatenate(extra) if extra else np.zeros(0), parts,
                    [kv] * (kd * Td), more, ranks, spec.tokens_per_step if spec is not None else 1.0)
    return _per_instance_batch(res, Td)


def _per_instance_batch(res: ServingResult, schedulers_per_instance: float) -> ServingResult:
    """The summary's ``mean_decode_batch`` per instance: a DPA instance's is its ranks' (their time-weighted mean
    per scheduler x the schedulers an instance runs; the ranks run in lockstep)."""
    if schedulers_per_instance != 1:
        res.summary["mean_decode_batch"] *= schedulers_per_instance
    return res


#: fixed-point passes a disaggregated closed loop may take (each a whole simulation); a loop that has not
#: converged by then is refused rather than reported [modelling choice: converged loops here take 3-40]
MAX_CLOSED_LOOP_PASSES = 200


def _closed_loop_fixed_point(concurrency: int, host: np.ndarray, args: tuple):
    """A closed loop of ``concurrency`` clients on the staged disaggregated simulation: the first
    ``concurrency`` requests arrive at 0 and request ``concurrency + j`` at the ``j``-th finish (as the colocated
    Batcher releases them). The staged passes (prefill, transfer, decode) need every arrival up front, so the
    arrivals are iterated, a_{k+1} = [0] * C ++ sort(finish(a_k))[:n - C], from every request at 0, until they
    no longer move; the result then meets the closed-loop condition exactly. SpecError when
    :data:`MAX_CLOSED_LOOP_PASSES` passes do not get there."""
    req, n = args[0], args[1]
    c = min(int(concurrency), n)
    a = np.zeros(n)
    for _ in range(MAX_CLOSED_LOOP_PASSES):
        out = _disagg_pass(a + host, *args)
        args[-1].next_pass()  # the decode runs of this pass stay reusable in the next
        nxt = np.concatenate([np.zeros(c), np.sort(out[1])[:n - c]])
        if np.array_equal(nxt, a):
            req["arrival_s"] = a
            return out
        a = nxt
    raise SpecError(f"not resolved: the disaggregated closed loop of {concurrency:,} clients did not settle in "
                    f"{MAX_CLOSED_LOOP_PASSES} passes of the staged simulation")


def _disagg_pass(arrival_at_queue, req, n, kp, kd, budget, tp, td, kv, policy, decode_scheduler, P, X0, new, x0,
                 busy, total, runs):
    """One pass of the staged disaggregated simulation for arrivals at the prefill queue [s] (in request order):
    (first token, finish, preemptions, decode instance, ITL extras, series parts, prefill/transfer columns)."""
    arr = np.asarray(arrival_at_queue, dtype=float).tolist()
    done = [0.0] * n
    srv = [0] * n
    free = [(0.0, j) for j in range(kp)]
    cost = {}  # batch duration by (tokens, prompts, effective context): fixed lengths repeat one batch
    ptr = 0
    while ptr < n:
        t_free, j = heapq.heappop(free)
        t = max(t_free, arr[ptr])
        k, tok, pairs = ptr, 0, 0.0
        while k < n and arr[k] <= t and (k == ptr or tok + new[k] <= budget) and k - ptr < tp.max_batch:
            tok += new[k]
            pairs += new[k] * (x0[k] + new[k] / 2.0)
            k += 1
        xe = pairs / tok - tok / 2.0
        key = (tok, k - ptr, xe)
        dur = cost.get(key)
        if dur is None:
            dur = cost[key] = (tp.shared_s[tok] + tp.head_s[k - ptr] + tp.chunk_core_s(tok, xe if xe > 0 else 0.0)
                               + policy.step_host_s)
        end = t + dur
        done[ptr:k] = [end] * (k - ptr)
        srv[ptr:k] = [j] * (k - ptr)
        ptr = k
        heapq.heappush(free, (end, j))
    done_p = np.asarray(done)
    inst_p = np.asarray(srv, dtype=np.int64)
    # ---- KV transfer: FIFO on the sending instance's NICs ---------------------------------------------------------
    order = np.lexsort((np.arange(n), done_p))
    nic_free = [0.0] * kp
    arrive_l = [0.0] * n
    busy_l, total_l = busy.tolist(), total.tolist()
    for i in order.tolist():
        j = srv[i]
        st = done[i] if done[i] > nic_free[j] else nic_free[j]
        nic_free[j] = st + busy_l[i]
        arrive_l[i] = st + total_l[i]
    arrive = np.asarray(arrive_l)
    # ---- decode pool ----------------------------------------------------------------------------------------------
    first = arrive.copy()
    finish = np.where(req["output_tokens"] <= 1, arrive, np.nan)
    npre = np.zeros(n, dtype=np.int64)
    inst = np.full(n, -1, dtype=np.int64)
    todo = np.nonzero(req["output_tokens"] > 1)[0]
    todo = todo[np.lexsort((todo, arrive[todo]))]
    extra, parts = [], []
    for j in range(kd):
        idx = todo[j::kd]
        if idx.size == 0:
            parts.append((j, tuple(np.zeros(0) for _ in range(7))))
            continue
        f, e, p, _, x, s = runs.run(td, decode_scheduler, kv, arrive[idx], P[idx], req["output_tokens"][idx],
                                    X0[idx], have_kv=True, policy=policy)
        finish[idx], npre[idx], inst[idx] = e, p, j
        extra.append(x)
        parts.append((j, s))
    more = {"prefill_done_s": done_p, "transfer_s": arrive - done_p, "prefill_instance": inst_p}
    return first, finish, npre, inst, extra, parts, more
