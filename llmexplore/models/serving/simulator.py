"""Iteration-level discrete-event simulation of continuous batching (vLLM-style), priced by the step engine
(docs/models.md §4.9).

The analytical serving models (:mod:`.disagg`, docs/models.md §4.5-4.7) use queueing formulas and mean
batches. This module simulates what a serving engine does, one forward iteration at a time, for a stream of
requests (:mod:`.workload`), and reports per-request TTFT, TPOT, inter-token latencies (ITL) and end-to-end
latency, throughput, and the batch and KV-cache occupancy of every iteration.

**Colocated** (:func:`simulate_colocated`): ``instances`` copies of a deployment, requests split round-robin.
Each iteration of an instance, as vLLM V1's scheduler does (``Scheduler`` holds its knobs):

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
tabulated once per simulation with the vectorised engine (:func:`step_tables`): the part shared by all
tokens exactly for every token count, the LM head exactly for every logit count, the decode attention core
on batch x a geometric context grid (linear in the context between nodes), the chunk core on a token x
context grid (log-linear in tokens, linear in context). Measured against direct calls, the table is within
0.1 % (tests/unit/test_serving.py). Stretches of pure decode between events (arrival, finish, memory
exhaustion) are advanced as one vectorised span. Requests arrive in order, so the loop holds a few Python
lists and a heap, not an object per request or token.

**ITL.** All decodes of an iteration get the same gap (its duration), so ITLs are kept as the iterations'
durations weighted by how many decodes they served, plus one sample per gap that is not one iteration (a
preempted request's gap across its recompute, a transferred request's first decode gap). TPOT of a request
is (last token - first token) / (output - 1), NaN for one-token outputs.

Assumptions: TP layout pricing (:func:`..step.prefill.mixed_step_time`); a cached prefix is counted in the KV of
every request that uses it (shared blocks are not deduplicated); no CPU swap, no speculative decoding; the
prefill instances' KV memory is not limited and they do not wait for the decode side.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ... import _check
from ...errors import SpecError
from ...specs import Link
from ..step.decode import core_s, memory_per_rank, step_time
from ..step.engine import MAX_CONTEXT, Deployment
from ..step.kv_transfer import transfer_time
from .workload import Traffic, requests

__all__ = ["Scheduler", "StepTables", "ServingResult", "step_tables", "kv_capacity_blocks", "simulate_colocated",
           "simulate_disaggregated", "weighted_quantile", "METRICS", "QUANTILES"]

METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
QUANTILES = (0.5, 0.9, 0.99)
MAX_INSTANCES = 1024
_FF_NUMPY = 24  # pure-decode stretches of at least this many iterations advance as one vectorised span


@dataclass(frozen=True)
class Scheduler:
    """Scheduler knobs of one instance (vLLM names).

    ``max_num_seqs``: most requests running at once; ``max_num_batched_tokens``: token budget of one
    iteration (decodes count one each; prefill chunks fill the rest); ``block_tokens``: KV block size;
    ``kv_blocks``: KV capacity in blocks (None: from the deployment's memory, :func:`kv_capacity_blocks`).
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_tokens: int = 16
    kv_blocks: int | None = None

    def __post_init__(self) -> None:
        seqs = _check.integer("max_num_seqs", self.max_num_seqs, lo=1, hi=1 << 16)
        tok = _check.integer("max_num_batched_tokens", self.max_num_batched_tokens, lo=1, hi=1 << 20,
                             unit="tokens")
        if tok < seqs:
            raise SpecError(f"max_num_batched_tokens must be >= max_num_seqs ({seqs}) so every running request "
                            f"can decode in one iteration (vLLM's rule), got {tok}")
        object.__setattr__(self, "max_num_seqs", seqs)
        object.__setattr__(self, "max_num_batched_tokens", tok)
        object.__setattr__(self, "block_tokens", _check.integer("block_tokens", self.block_tokens, lo=1,
                                                                hi=65536, unit="tokens"))
        if self.kv_blocks is not None:
            object.__setattr__(self, "kv_blocks", _check.integer("kv_blocks", self.kv_blocks, lo=1, hi=1 << 40))


def kv_capacity_blocks(dep: Deployment, scheduler: Scheduler = Scheduler()) -> int:
    """KV blocks one instance holds: (usable HBM - weights - activations of a full token budget - runtime
    reserve) per rank / (KV bytes per token per rank x ``block_tokens``), on the TP layout
    (:func:`..step.decode.memory_per_rank`). 0 if the weights do not fit."""
    page = dep.runtime.page_tokens
    mem = memory_per_rank(dep, scheduler.max_num_batched_tokens, 1, "TP")
    free = float(mem["usable_B"] - mem["weights_B"] - mem["activations_B"] - mem["reserve_B"])
    per_token = float(memory_per_rank(dep, 1, page, "TP")["kv_B"]) / page
    return max(0, int(free // (per_token * scheduler.block_tokens)))


# ---- step-time tables ---------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class StepTables:
    """Step times of one deployment, tabulated for the simulator [s] (see :func:`step_tables`).

    ``shared_s[m]``: everything but the attention cores and the LM head for m tokens; ``head_s[n]``: LM head
    and embedding/logit collectives for n logits; ``dec_core`` [batch, context node] over ``ctx_grid``;
    ``chunk_core`` [token node, context node] over ``chunk_grid`` x ``ctx_grid``.
    """

    dep: Deployment
    shared_s: list
    head_s: list
    ctx_grid: np.ndarray
    dec_core: np.ndarray
    chunk_grid: np.ndarray
    chunk_core: np.ndarray
    _ctx: list = field(repr=False, default_factory=list)
    _dec_rows: list = field(repr=False, default_factory=list)
    _chunk_log: list = field(repr=False, default_factory=list)
    _chunk_rows: list = field(repr=False, default_factory=list)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_ctx", self.ctx_grid.tolist())
        object.__setattr__(self, "_dec_rows", [r.tolist() for r in self.dec_core])
        object.__setattr__(self, "_chunk_log", np.log(self.chunk_grid).tolist())
        object.__setattr__(self, "_chunk_rows", [r.tolist() for r in self.chunk_core])

    @property
    def max_tokens(self) -> int:
        return len(self.shared_s) - 1

    @property
    def max_batch(self) -> int:
        return len(self.dec_core) - 1

    def _lerp_ctx(self, row: list, s: float) -> float:
        g = self._ctx
        i = bisect.bisect_right(g, s) - 1
        if i < 0:
            i = 0
        elif i >= len(g) - 1:
            i = len(g) - 2
        f = (s - g[i]) / (g[i + 1] - g[i])
        return row[i] + f * (row[i + 1] - row[i])

    def decode_core_s(self, batch: int, context: float) -> float:
        """Decode attention core of ``batch`` sequences at mean ``context`` [s]."""
        return self._lerp_ctx(self._dec_rows[batch], context)

    def chunk_core_s(self, tokens: int, context: float) -> float:
        """Causal core of a prefill chunk of ``tokens`` after ``context`` cached tokens [s]."""
        lg = self._chunk_log
        u = math.log(tokens)
        i = bisect.bisect_right(lg, u) - 1
        if i >= len(lg) - 1:
            i = len(lg) - 2
        a = self._lerp_ctx(self._chunk_rows[i], context)
        b = self._lerp_ctx(self._chunk_rows[i + 1], context)
        f = (u - lg[i]) / (lg[i + 1] - lg[i])
        return math.exp(math.log(a) + f * (math.log(b) - math.log(a)))

    def step_s(self, decode_batch: int, decode_context: float, chunk_tokens: int = 0, chunk_context: float = 0.0,
               chunks: int | None = None) -> float:
        """One iteration [s]: ``decode_batch`` decodes at mean ``decode_context`` and ``chunk_tokens`` prefill
        tokens after ``chunk_context`` cached ones, in ``chunks`` requests (default 1 if any)."""
        n_lm = decode_batch + (chunks if chunks is not None else int(chunk_tokens > 0))
        t = self.shared_s[decode_batch + chunk_tokens] + self.head_s[n_lm]
        if decode_batch:
            t += self.decode_core_s(decode_batch, decode_context)
        if chunk_tokens:
            t += self.chunk_core_s(chunk_tokens, chunk_context)
        return t


def step_tables(dep: Deployment, *, max_tokens: int, max_batch: int, max_context: int) -> StepTables:
    """Tabulate a deployment's iteration times for :func:`simulate_colocated` (a few ms with the vectorised
    engine). ``max_tokens``: most tokens in one iteration; ``max_batch``: most decodes (and logits) in one;
    ``max_context``: longest context [tokens]."""
    if not isinstance(dep, Deployment):
        raise SpecError(f"dep must be a Deployment, got {type(dep).__name__}")
    M = _check.integer("max_tokens", max_tokens, lo=1, hi=1 << 22, unit="tokens")
    B = _check.integer("max_batch", max_batch, lo=1, hi=1 << 16)
    S = _check.integer("max_context", max_context, lo=1, hi=MAX_CONTEXT, unit="tokens")
    B = min(B, M)
    d1 = dataclasses.replace(dep, q_tokens=1, logits_tokens=None, context_cv=0.0)
    L = dep.model.layers
    m = np.arange(1, M + 1, dtype=float)
    st = step_time(d1, m, 1.0, "TP")
    shared = np.asarray(st["step_s"] - st["core_s"] - st["head_s"] - st["comm_head_s"], dtype=float)
    n = np.arange(1, B + 1, dtype=float)
    hd = step_time(d1, np.arange(1, B + 2, dtype=float), 1.0, "TP")  # decodes + one chunk's logit
    head = np.asarray(hd["head_s"] + hd["comm_head_s"], dtype=float)
    ctx = np.unique(np.concatenate([[0.0, 1.0], np.round(np.geomspace(1.0, S + 2.0, 72))]))
    dec = np.asarray(step_time(d1, n[:, None], np.maximum(ctx, 1.0)[None, :], "TP")["core_s"], dtype=float)
    # integers up to 32 (the decode/prefill kernel switch is at 16 queries), geometric beyond
    cg = np.unique(np.concatenate([np.arange(1.0, min(M, 32) + 1), np.round(np.geomspace(32, max(M, 33), 48))]))
    cg = cg[cg <= max(M, 2)]
    if cg.size < 2:
        cg = np.array([1.0, 2.0])
    chunk = L * np.asarray(core_s(d1, 1, np.maximum(ctx[None, :] + cg[:, None] / 2.0, 1.0), "TP", cg[:, None]),
                           dtype=float)
    return StepTables(dep=dep, shared_s=[0.0] + shared.tolist(), head_s=[0.0] + head.tolist(), ctx_grid=ctx,
                      dec_core=np.vstack([np.zeros(ctx.size), dec]), chunk_grid=cg, chunk_core=chunk)


# ---- results ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class ServingResult:
    """A simulated run.

    ``requests``: per-request arrays, shape (n,): ``arrival_s``, ``prompt_tokens``, ``output_tokens``,
    ``prefix_tokens``, ``first_token_s``, ``finish_s``, ``ttft_s``, ``tpot_s`` (NaN for one-token outputs),
    ``e2e_s``, ``instance`` (the decode instance in disaggregated mode), ``preemptions``; disaggregated runs
    add ``prefill_done_s``, ``transfer_s`` (transfer start to arrival) and ``prefill_instance``.
    ``itl_s`` / ``itl_weight``: inter-token gaps and how many gaps each value stands for. ``series``: per
    iteration of every instance, ``instance``, ``start_s``, ``step_s``, ``batch`` (requests scheduled),
    ``decode_batch``, ``prefill_tokens``, ``kv_blocks`` (in use) and ``kv_occupancy`` (share of capacity).
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


# ---- one instance ------------------------------------------------------------------------------------------------
class _Recorder:
    """Per-iteration series: Python lists for single iterations, numpy blocks for vectorised spans (merged
    by start time at the end)."""

    def __init__(self):
        self.blocks = []
        self.cols = ([], [], [], [], [], [], [])  # start, dur, batch, decode, weight, prefill tokens, kv blocks

    def span(self, start, dur, decode, kv):
        self.blocks.append((start, dur, decode, kv))

    def arrays(self):
        cols = [np.asarray(c, dtype=float) for c in self.cols]
        if self.blocks:
            start, dur, dec, kv = (np.concatenate([b[k] for b in self.blocks]) for k in range(4))
            zero = np.zeros(start.size)
            extra = (start, dur, dec, dec, dec, zero, kv)
            cols = [np.concatenate([c, e]) for c, e in zip(cols, extra)]
            order = np.argsort(cols[0], kind="stable")
            cols = [c[order] for c in cols]
        return tuple(cols)


def _run_instance(tb: StepTables, sched: Scheduler, kv_blocks: int, arrival, prompt, output, prefix, *,
                  have_kv: bool = False, concurrency: int = 0):
    """Simulate one instance. Requests are in arrival order (``concurrency`` > 0: closed loop, the first
    ``concurrency`` released at 0 and each later one when a request finishes; ``arrival`` is overwritten).
    ``have_kv``: requests arrive holding their prompt's KV and first token (a disaggregated decode instance).
    Returns (first_token_s, finish_s, preemptions, arrival_s, itl extra samples, series tuple)."""
    n = len(prompt)
    bt = sched.block_tokens
    max_seqs = sched.max_num_seqs
    budget_all = sched.max_num_batched_tokens
    shared, head = tb.shared_s, tb.head_s
    dec_rows, ctx_np = tb._dec_rows, tb.ctx_grid
    decode_core, chunk_core = tb.decode_core_s, tb.chunk_core_s
    P = [int(v) for v in prompt]
    O = [int(v) for v in output]
    X0 = [int(v) for v in prefix]
    arr = [float(v) for v in arrival]
    nan = math.nan
    first = [arr[i] if have_kv else nan for i in range(n)]
    finish = [nan] * n
    last_tok = list(arr) if have_kv else [0.0] * n
    fresh = [have_kv] * n          # arrives holding its KV (enters decode directly)
    g = [1 if have_kv else 0] * n  # tokens generated
    x = [0] * n if have_kv else list(X0)  # tokens computed in the current prefill pass
    Lc = list(P)                   # tokens to compute in the current prefill pass
    state = [0] * n                # 0 waiting / not arrived, 1 prefilling, 2 decoding, 3 done
    it0 = [0] * n
    c0 = [0] * n
    g0 = [0] * n
    key = [0] * n
    fin_it = [0] * n
    npre = [0] * n
    extra = []                     # ITL samples that are not one iteration
    bucket = [0] * bt              # decoding requests by (context - iteration) mod block
    heap = []                      # (finish iteration, request)
    waiting = deque()
    running = []                   # admission order (lazy: finished entries skipped)
    prefilling = []
    n_running = 0
    B = 0                          # decoding requests
    sum_ctx = 0                    # their total context [tokens]
    used = 0                       # KV blocks in use
    now = 0.0
    it = 0
    ptr = 0                        # next request to arrive (open loop) / to release (closed loop)
    if concurrency:
        for i in range(min(concurrency, n)):
            arr[i] = 0.0
            waiting.append(i)
        ptr = min(concurrency, n)
    rec = _Recorder()
    cs, cd, cb, cdec, cw, cp, ck = rec.cols
    done = 0

    def cdiv(a):
        return -(-a // bt)

    while done < n:
        if not concurrency:
            while ptr < n and arr[ptr] <= now:
                waiting.append(ptr)
                ptr += 1
        # ---- fast-forward a stretch of pure decode ---------------------------------------------------------
        if B and not prefilling:
            while heap and (state[heap[0][1]] != 2 or fin_it[heap[0][1]] != heap[0][0]):
                heapq.heappop(heap)
            n_max = heap[0][0] - it
            can_admit = False
            if waiting and n_running < max_seqs:
                h = waiting[0]
                dec_need = bucket[(-it) % bt]
                if fresh[h]:
                    need = cdiv(P[h] + 1)
                else:
                    need = cdiv(x[h] + min(Lc[h] - x[h], budget_all - B))
                can_admit = need <= kv_blocks - used - dec_need
            if 0 < n_max < _FF_NUMPY and not can_admit:
                # a short stretch: plain Python iterations (numpy's fixed cost would dominate)
                base = shared[B] + head[B]
                it_start = it
                for _ in range(n_max):
                    if not concurrency and not waiting and ptr < n and arr[ptr] <= now:
                        break
                    need = bucket[(-it) % bt]
                    if need > kv_blocks - used:
                        break
                    used += need
                    t = base + decode_core(B, sum_ctx / B)
                    cs.append(now)
                    cd.append(t)
                    cb.append(B)
                    cdec.append(B)
                    cw.append(B)
                    cp.append(0)
                    ck.append(used)
                    sum_ctx += B
                    now += t
                    it += 1
                if it > it_start:
                    continue  # arrivals are pulled at the top; no progress means the blocks ran out: schedule
            elif n_max >= _FF_NUMPY and not can_admit:
                js = np.arange(n_max)
                cum = np.cumsum(np.asarray(bucket)[(-(it + js)) % bt])
                nn = int(np.searchsorted(cum, kv_blocks - used, side="right"))
                dur = shared[B] + head[B] + np.interp(sum_ctx / B + js, ctx_np, dec_rows[B])
                starts = now + np.cumsum(dur) - dur
                if not concurrency and not waiting and ptr < n:
                    nn = min(nn, int(np.searchsorted(starts, arr[ptr], side="left")))
                if nn >= 1:
                    d = dur[:nn]
                    kv = used + cum[:nn]
                    rec.span(starts[:nn], d, np.full(nn, float(B)), kv.astype(float))
                    now = float(starts[nn - 1] + d[-1])
                    used += int(cum[nn - 1])
                    sum_ctx += B * nn
                    it += nn
                    continue
        # ---- schedule: running first, preempting on KV overflow --------------------------------------------
        while True:
            dec_need = bucket[(-it) % bt]
            budget = budget_all - B
            chunks = []
            pre_need = 0
            for r in prefilling:
                if budget <= 0:
                    break
                c = Lc[r] - x[r]
                if c > budget:
                    c = budget
                pre_need += cdiv(x[r] + c) - cdiv(x[r])
                chunks.append((r, c))
                budget -= c
            if dec_need + pre_need <= kv_blocks - used:
                break
            # preempt (recompute) the most recently admitted running request
            while state[running[-1]] not in (1, 2):
                running.pop()
            r = running.pop()
            if state[r] == 2:
                k = it - it0[r]
                c = c0[r] + k
                g[r] = g0[r] + k
                used -= cdiv(c)
                bucket[key[r]] -= 1
                B -= 1
                sum_ctx -= c
                last_tok[r] = now
            else:
                used -= cdiv(x[r])
                prefilling.remove(r)
            state[r] = 0
            Lc[r] = P[r] + g[r]
            x[r] = min(X0[r], Lc[r] - 1)
            fresh[r] = False
            npre[r] += 1
            n_running -= 1
            waiting.appendleft(r)
        # ---- admit waiting requests FCFS -------------------------------------------------------------------
        demand = dec_need + pre_need
        n_ext = 0
        ext = None
        while waiting and n_running < max_seqs and budget > 0:
            r = waiting[0]
            if fresh[r]:
                need = cdiv(P[r] + 1)
                if need > kv_blocks - used - demand:
                    break
                waiting.popleft()
                used += cdiv(P[r])
                demand += need - cdiv(P[r])
                c = P[r]
                it0[r], c0[r], g0[r] = it, c, 1
                key[r] = (c - it) % bt
                fin_it[r] = it + O[r] - 2
                heapq.heappush(heap, (fin_it[r], r))
                bucket[key[r]] += 1
                B += 1
                sum_ctx += c
                state[r] = 2
                fresh[r] = False
                budget -= 1
                n_ext += 1
                if ext is None:
                    ext = []
                ext.append(r)
            else:
                c = Lc[r] - x[r]
                if c > budget:
                    c = budget
                need = cdiv(x[r] + c)
                if need > kv_blocks - used - demand:
                    break
                waiting.popleft()
                used += cdiv(x[r])
                demand += need - cdiv(x[r])
                state[r] = 1
                prefilling.append(r)
                chunks.append((r, c))
                budget -= c
            running.append(r)
            n_running += 1
        if not B and not chunks:
            if n_running:
                raise RuntimeError("serving simulator stalled with running requests and nothing to schedule")
            if concurrency or ptr >= n:
                if waiting:
                    raise RuntimeError("serving simulator stalled: a request cannot be admitted into empty memory")
                break
            now = max(now, arr[ptr])
            continue
        # ---- price and run the iteration ---------------------------------------------------------------
        used += demand  # the iteration's new blocks (decodes, running and admitted chunks)
        cp_tok = 0
        pairs = 0.0
        for r, c in chunks:
            cp_tok += c
            pairs += c * (x[r] + c / 2.0)
        t = shared[B + cp_tok] + head[B + len(chunks)]
        if B:
            t += decode_core(B, sum_ctx / B)
        if cp_tok:
            xe = pairs / cp_tok - cp_tok / 2.0
            t += chunk_core(cp_tok, xe if xe > 0 else 0.0)
        end = now + t
        cs.append(now)
        cd.append(t)
        cb.append(B + len(chunks))
        cdec.append(B)
        cw.append(B - n_ext)
        cp.append(cp_tok)
        ck.append(used)
        if ext:
            for r in ext:
                extra.append(end - last_tok[r])
        sum_ctx += B
        # prefill chunks
        if chunks:
            ended = False
            for r, c in chunks:
                x[r] += c
                if x[r] < Lc[r]:
                    continue
                ended = True
                g[r] += 1
                if first[r] != first[r]:  # NaN: the first token
                    first[r] = end
                else:
                    extra.append(end - last_tok[r])
                if g[r] >= O[r]:
                    used -= cdiv(x[r])
                    state[r] = 3
                    finish[r] = end
                    n_running -= 1
                    done += 1
                    if concurrency and ptr < n:
                        arr[ptr] = end
                        waiting.append(ptr)
                        ptr += 1
                    continue
                c = Lc[r]
                it0[r], c0[r], g0[r] = it + 1, c, g[r]
                key[r] = (c - it - 1) % bt
                fin_it[r] = it + O[r] - g[r]
                heapq.heappush(heap, (fin_it[r], r))
                bucket[key[r]] += 1
                B += 1
                sum_ctx += c
                state[r] = 2
            if ended:
                prefilling = [r for r in prefilling if state[r] == 1]
        # decodes that emitted their last token
        while heap and heap[0][0] <= it:
            f, r = heapq.heappop(heap)
            if state[r] != 2 or fin_it[r] != f:
                continue
            c = c0[r] + (it - it0[r]) + 1
            used -= cdiv(c)
            bucket[key[r]] -= 1
            B -= 1
            sum_ctx -= c
            state[r] = 3
            finish[r] = end
            n_running -= 1
            done += 1
            if concurrency and ptr < n:
                arr[ptr] = end
                waiting.append(ptr)
                ptr += 1
        if len(running) > 2 * n_running + 64:
            running = [r for r in running if state[r] in (1, 2)]
        now = end
        it += 1
    return (np.asarray(first), np.asarray(finish), np.asarray(npre), np.asarray(arr), np.asarray(extra, dtype=float),
            rec.arrays())


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


def _blocks(dep: Deployment, sched: Scheduler, where: str) -> int:
    kv = sched.kv_blocks if sched.kv_blocks is not None else kv_capacity_blocks(dep, sched)
    if kv < 1:
        raise SpecError(f"the {where} has no memory left for KV blocks: the weights, activations and reserve of "
                        f"{dep.label()} exceed its usable HBM (more ranks or smaller weights)")
    return kv


def _assemble(req: dict, first, finish, npre, inst, extra_all, series_parts, kv_blocks, more=None) -> ServingResult:
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
    cap = np.concatenate([np.full(p[0].size, float(kv_blocks[j])) for j, p in series_parts])
    series["kv_occupancy"] = series["kv_blocks"] / cap
    for c in ("batch", "decode_batch", "prefill_tokens", "kv_blocks"):
        series[c] = series[c].astype(np.int64)
    weight = series.pop("weight")
    itl = np.concatenate([series["step_s"], extra_all])
    itl_w = np.concatenate([weight, np.ones(extra_all.size)])
    keep = itl_w > 0
    return ServingResult(requests=req, itl_s=itl[keep], itl_weight=itl_w[keep], series=series,
                         summary=_summary(req, itl[keep], itl_w[keep], series), kv_blocks=tuple(kv_blocks))


def simulate_colocated(dep: Deployment, traffic: Traffic, n_requests: int | None = None, *, instances: int = 1,
                       scheduler: Scheduler = Scheduler(), seed=0, tables: StepTables | None = None
                       ) -> ServingResult:
    """Simulate ``n_requests`` of ``traffic`` on ``instances`` colocated instances of ``dep`` (continuous
    batching with chunked prefill, the loop of the module docstring); request i goes to instance
    i mod ``instances`` (a closed-loop ``concurrency`` is split the same way).

    Returns a :class:`ServingResult`; its ``summary`` has ``{ttft,tpot,itl,e2e}_{mean,p50,p90,p99}_s``,
    ``output_tokens_per_s`` and ``requests_per_s`` (over first arrival to last finish), ``preemptions``,
    ``iterations``, ``mean_decode_batch`` (time-weighted over busy iterations) and ``makespan_s``.
    Deterministic for a ``seed``. ``tables``: precomputed :func:`step_tables` (built when None).
    """
    k = _check_common(traffic, n_requests, instances)
    if not isinstance(scheduler, Scheduler):
        raise SpecError(f"scheduler must be a Scheduler, got {type(scheduler).__name__}")
    if not isinstance(dep, Deployment):
        raise SpecError(f"dep must be a Deployment, got {type(dep).__name__}")
    req = requests(traffic, n_requests, seed)
    kv = _blocks(dep, scheduler, "instance")
    _check_fit(req, kv, scheduler.block_tokens, "instance")
    n = req["prompt_tokens"].size
    if tables is None:
        tables = step_tables(dep, max_tokens=scheduler.max_num_batched_tokens, max_batch=scheduler.max_num_seqs,
                             max_context=int((req["prompt_tokens"] + req["output_tokens"]).max()) + 1)
    elif (tables.max_tokens < scheduler.max_num_batched_tokens or tables.max_batch < scheduler.max_num_seqs):
        raise SpecError("tables must cover the scheduler's max_num_batched_tokens and max_num_seqs; build them with "
                        "step_tables(dep, max_tokens=..., max_batch=..., max_context=...)")
    first, finish, npre = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=np.int64)
    arrival = np.array(req["arrival_s"])
    inst = np.arange(n) % k
    extra, parts = [], []
    for j in range(k):
        idx = np.nonzero(inst == j)[0]
        if idx.size == 0:
            parts.append((j, tuple(np.zeros(0) for _ in range(7))))
            continue
        conc = 0
        if traffic.concurrency is not None:
            conc = traffic.concurrency // k + (j < traffic.concurrency % k)
            if conc == 0:
                raise SpecError(f"concurrency ({traffic.concurrency}) must be >= instances ({k})")
        f, e, p, a, x, s = _run_instance(tables, scheduler, kv, arrival[idx], req["prompt_tokens"][idx],
                                         req["output_tokens"][idx], req["prefix_tokens"][idx], concurrency=conc)
        first[idx], finish[idx], npre[idx], arrival[idx] = f, e, p, a
        extra.append(x)
        parts.append((j, s))
    req["arrival_s"] = arrival
    return _assemble(req, first, finish, npre, inst, np.concatenate(extra) if extra else np.zeros(0), parts,
                     [kv] * k)


def simulate_disaggregated(prefill_dep: Deployment, decode_dep: Deployment, link: Link, traffic: Traffic,
                           n_requests: int | None = None, *, prefill_instances: int = 1, decode_instances: int = 1,
                           prefill_tokens: int = 8192, decode_scheduler: Scheduler = Scheduler(), seed=0,
                           nics: int | None = None, batched_ops: bool = True, op_overhead_us: float = 1.0
                           ) -> ServingResult:
    """Simulate ``n_requests`` of open-loop ``traffic`` on a disaggregated deployment (module docstring).

    Prefill: ``prefill_instances`` of ``prefill_dep`` behind one FCFS queue, each running batches of whole
    prompts of at most ``prefill_tokens`` new tokens (one longer prompt alone). Transfer: the prompt's KV
    (:func:`..step.kv_transfer.transfer_time` with both sides' TP degrees, the decode KV dtype and page size,
    ``nics``, ``batched_ops``, ``op_overhead_us``) queues FIFO on the sending instance's NICs, which are busy
    for its bandwidth and operation time; it arrives ``transfer_s`` after it starts. Decode:
    ``decode_instances`` of ``decode_dep`` with ``decode_scheduler``, requests dealt round-robin in order of
    arrival. TTFT = KV arrival - request arrival. Returns a :class:`ServingResult` (``requests`` adds
    ``prefill_done_s``, ``transfer_s``, ``prefill_instance``).
    """
    kp = _check_common(traffic, n_requests, prefill_instances, "prefill_instances")
    kd = _check.integer("decode_instances", decode_instances, lo=1, hi=MAX_INSTANCES)
    for nm, d in (("prefill_dep", prefill_dep), ("decode_dep", decode_dep)):
        if not isinstance(d, Deployment):
            raise SpecError(f"{nm} must be a Deployment, got {type(d).__name__}")
    if not isinstance(link, Link):
        raise SpecError(f"link must be a Link preset (llmexplore.presets.link), got {type(link).__name__}")
    if traffic.concurrency is not None:
        raise SpecError("closed-loop concurrency is simulated for colocated serving only; give a rate_per_s or a "
                        "trace for the disaggregated simulation")
    if not isinstance(decode_scheduler, Scheduler):
        raise SpecError(f"decode_scheduler must be a Scheduler, got {type(decode_scheduler).__name__}")
    if prefill_dep.model.name != decode_dep.model.name:
        raise SpecError(f"prefill_dep and decode_dep must serve the same model, got {prefill_dep.model.name} and "
                        f"{decode_dep.model.name}")
    budget = _check.integer("prefill_tokens", prefill_tokens, lo=1, hi=1 << 20, unit="tokens")
    req = requests(traffic, n_requests, seed)
    kv = _blocks(decode_dep, decode_scheduler, "decode instance")
    _check_fit(req, kv, decode_scheduler.block_tokens, "decode instance")
    n = req["prompt_tokens"].size
    P, X0 = req["prompt_tokens"], req["prefix_tokens"]
    new = (P - X0).tolist()
    # ---- prefill pool: one FCFS queue, batches of whole prompts ---------------------------------------------------
    Sctx = int((P + req["output_tokens"]).max()) + 1
    tp = step_tables(prefill_dep, max_tokens=max(budget, int(max(new))), max_batch=min(budget, 1 << 16),
                     max_context=Sctx)
    arr = req["arrival_s"].tolist()
    x0 = X0.tolist()
    done_p = np.zeros(n)
    inst_p = np.zeros(n, dtype=np.int64)
    free = [(0.0, j) for j in range(kp)]
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
        dur = tp.shared_s[tok] + tp.head_s[k - ptr] + tp.chunk_core_s(tok, xe if xe > 0 else 0.0)
        done_p[ptr:k] = t + dur
        inst_p[ptr:k] = j
        ptr = k
        heapq.heappush(free, (t + dur, j))
    # ---- KV transfer: FIFO on the sending instance's NICs ---------------------------------------------------------
    tr = transfer_time(prefill_dep.model, link, P.astype(float), kv_dtype=decode_dep.kv_dtype,
                       page_tokens=decode_dep.runtime.page_tokens, prefill_tp=prefill_dep.ranks,
                       decode_tp=decode_dep.ranks, op_overhead_us=op_overhead_us, batched_ops=batched_ops, nics=nics)
    busy = np.broadcast_to(tr["bandwidth_s"] + tr["ops_s"], P.shape)
    total = np.broadcast_to(tr["transfer_s"], P.shape)
    order = np.lexsort((np.arange(n), done_p))
    nic_free = [0.0] * kp
    arrive = np.zeros(n)
    for i in order.tolist():
        j = int(inst_p[i])
        st = max(float(done_p[i]), nic_free[j])
        nic_free[j] = st + float(busy[i])
        arrive[i] = st + float(total[i])
    # ---- decode pool ----------------------------------------------------------------------------------------------
    first = arrive.copy()
    finish = np.where(req["output_tokens"] <= 1, arrive, np.nan)
    npre = np.zeros(n, dtype=np.int64)
    inst = np.full(n, -1, dtype=np.int64)
    todo = np.nonzero(req["output_tokens"] > 1)[0]
    todo = todo[np.lexsort((todo, arrive[todo]))]
    td = step_tables(decode_dep, max_tokens=decode_scheduler.max_num_batched_tokens,
                     max_batch=decode_scheduler.max_num_seqs, max_context=Sctx)
    extra, parts = [], []
    for j in range(kd):
        idx = todo[j::kd]
        if idx.size == 0:
            parts.append((j, tuple(np.zeros(0) for _ in range(7))))
            continue
        f, e, p, _, x, s = _run_instance(td, decode_scheduler, kv, arrive[idx], P[idx], req["output_tokens"][idx],
                                         X0[idx], have_kv=True)
        finish[idx], npre[idx], inst[idx] = e, p, j
        extra.append(x)
        parts.append((j, s))
    more = {"prefill_done_s": done_p, "transfer_s": arrive - done_p, "prefill_instance": inst_p}
    return _assemble(req, first, finish, npre, inst, np.concatenate(extra) if extra else np.zeros(0), parts,
                     [kv] * kd, more)
