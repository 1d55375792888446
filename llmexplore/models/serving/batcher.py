"""One serving instance's continuous batcher, and the engine seam (docs/models.md §4.9).

:class:`Batcher` is the scheduler loop of one instance as a class whose methods are its steps, run once per
iteration by :meth:`Batcher.run`:

1. :meth:`~Batcher.arrivals`: requests that arrived join the FCFS waiting queue;
2. :meth:`~Batcher.fast_forward`: a stretch of pure decode between events (an arrival, a finish, memory running
   out) advances without scheduling, as plain iterations when short, as one vectorised span when long;
3. :meth:`~Batcher.schedule`: the running requests first, every decode one token, then the running partial
   prefills in admission order, chunks from the token budget minus the decodes; when the iteration's new KV
   blocks do not fit, :meth:`~Batcher.preempt` evicts the policy's victim until they do;
4. :meth:`~Batcher.admit`: waiting requests FCFS while there is room in ``max_num_seqs``, token budget and
   KV blocks (the policy's admission rule); the first that does not fit stops admission;
5. :meth:`~Batcher.run_iteration`: the iteration is priced from the step tables (:mod:`.step_tables`) plus the
   policy's host time per step, and recorded;
6. :meth:`~Batcher.finish_prefills` and :meth:`~Batcher.finish_decodes`: every decode emits a token, a prefill
   whose last chunk ran emits its first token and joins the decodes; a request that emitted its last token is
   retired (:meth:`~Batcher.retire`, the one place a request leaves).

Requests are in arrival order and the state is a struct of lists (one entry per request), not an object per
request: ``benchmarks/bench_serving.py`` guards the speed. A request's state is a :class:`~.engines.RequestState`.
Decoding requests are not touched each iteration: a decoding request's context is c0 + (it - it0) and it
finishes at iteration ``fin_it``; ``bucket[k]`` counts decoding requests whose (context - iteration) mod
block is k, so the blocks an iteration needs are ``bucket[-it mod block]``.

What differs between serving engines sits behind one :class:`~.engines.EnginePolicy`: the KV memory budget, the
admission rule, the preemption victim, and host time per step and per request. Today's behaviour is
:data:`~.engines.DEFAULT_POLICY` (vLLM V1's scheduler: recompute the most recently admitted request, admit while the
first chunk's blocks fit, no host time); an engine's semantics is one subclass.
"""

from __future__ import annotations

import math
from array import array as _array
from bisect import bisect_right as _bisect_right
from heapq import heappop as _heappop, heappush as _heappush
from collections import deque

import numpy as np

from .engines import _DECODING, _DONE, _PREFILLING, _WAITING, DEFAULT_POLICY, EnginePolicy, Scheduler
from .step_tables import StepTables

__all__ = ["Batcher"]

FF_NUMPY = 24  # pure-decode stretches of at least this many iterations advance as one vectorised span


def _fill_batch(cols, k0: int, B: int) -> None:
    """Pad the batch, decode, weight and prefill-token columns of the iterations recorded from row ``k0`` on
    (start, duration and KV columns already hold them): ``B`` decodes and no prefill in each."""
    k = len(cols[0]) - k0
    if k:
        fill = [B] * k
        cols[2].extend(fill)
        cols[3].extend(fill)
        cols[4].extend(fill)
        cols[5].extend([0] * k)


class _Recorder:
    """Per-iteration series: Python lists for single iterations, numpy blocks for vectorised spans (merged
    by start time at the end)."""

    def __init__(self):
        self.blocks = []
        # start, dur (float64), batch, decode, weight, prefill tokens, kv blocks (int64): compact arrays, 56 B per
        # iteration instead of ~330 B as lists of Python numbers (a million-iteration run keeps every row)
        self.cols = (_array("d"), _array("d"), _array("q"), _array("q"), _array("q"), _array("q"), _array("q"))

    def span(self, start, dur, decode, kv):
        self.blocks.append((start, dur, decode, kv))

    def arrays(self):
        # the times are floats, the counts ints (numpy converts each kind fastest from its own type)
        cols = ([np.frombuffer(c, dtype=float).copy() if len(c) else np.zeros(0) for c in self.cols[:2]]
                + [np.frombuffer(c, dtype=np.int64).astype(float) if len(c) else np.zeros(0) for c in self.cols[2:]])
        if self.blocks:
            start, dur, dec, kv = (np.concatenate([b[k] for b in self.blocks]) for k in range(4))
            zero = np.zeros(start.size)
            extra = (start, dur, dec, dec, dec, zero, kv)
            cols = [np.concatenate([c, e]) for c, e in zip(cols, extra)]
            order = np.argsort(cols[0], kind="stable")
            cols = [c[order] for c in cols]
        return tuple(cols)


class Batcher:
    """The continuous batcher of one instance (module docstring). Requests are in arrival order.

    ``concurrency`` > 0: a closed loop, the first ``concurrency`` requests released at 0 and each later one when
    a request finishes (``arrival`` is overwritten). ``have_kv``: requests arrive holding their prompt's KV and
    first token (a disaggregated decode instance). :meth:`run` returns (first_token_s, finish_s, preemptions,
    arrival_s, ITL samples that are not one iteration, series tuple).
    """

    # attributes, not a dict: the loop reads them ~1e5 times per run
    __slots__ = ("n", "tb", "policy", "bt", "max_seqs", "budget_all", "kv_blocks", "concurrency", "P", "O", "X0",
                 "arr", "host_s", "ready", "first", "finish", "last_tok", "fresh", "g", "x", "Lc", "state", "it0",
                 "c0", "g0", "key", "fin_it", "npre", "extra", "bucket", "heap", "waiting", "running", "prefilling",
                 "n_running", "B", "sum_ctx", "used", "now", "it", "ptr", "released", "done", "rec", "_ff", "_dec",
                 "_price", "reserve", "final", "committed", "mixed", "stall",
                 "stall_new")

    def __init__(self, tables: StepTables, scheduler: Scheduler, kv_blocks: int, arrival, prompt, output, prefix,
                 *, have_kv: bool = False, concurrency: int = 0, policy: EnginePolicy = DEFAULT_POLICY) -> None:
        n = self.n = len(prompt)
        self.tb, self.policy = tables, policy
        self.bt = scheduler.block_tokens
        self.max_seqs = scheduler.max_num_seqs
        self.budget_all = scheduler.max_num_batched_tokens
        self.kv_blocks = kv_blocks
        self.concurrency = concurrency
        self.P = [int(v) for v in prompt]
        self.O = [int(v) for v in output]
        self.X0 = [int(v) for v in prefix]
        self.arr = [float(v) for v in arrival]  # arrival at the serving stack (closed loop: release) [s]
        # ... and at this instance's scheduler, after the policy's per-request host time (none for requests that
        # arrive holding their KV: they passed the stack on the prefill side)
        host = not have_kv and (policy.request_host_s or policy.request_host_s_per_token)
        self.host_s = [policy.request_host(p) for p in self.P] if host else [0.0] * n
        self.ready = [a + h for a, h in zip(self.arr, self.host_s)] if host else list(self.arr)
        self.first = [self.arr[i] if have_kv else math.nan for i in range(n)]
        self.finish = [math.nan] * n
        self.last_tok = list(self.arr) if have_kv else [0.0] * n
        self.fresh = [have_kv] * n          # arrives holding its KV (enters decode directly)
        self.g = [1 if have_kv else 0] * n  # tokens generated
        self.x = [0] * n if have_kv else list(self.X0)  # tokens computed in the current prefill pass
        self.Lc = list(self.P)              # tokens to compute in the current prefill pass
        self.state = [_WAITING] * n
        self.it0 = [0] * n                  # decode bookkeeping: iteration, context and tokens at decode start
        self.c0 = [0] * n
        self.g0 = [0] * n
        self.key = [0] * n                  # (context - iteration) mod block of a decoding request
        self.fin_it = [0] * n               # iteration of its last token
        self.npre = [0] * n                 # preemptions
        self.extra = []                     # ITL samples that are not one iteration
        self.bucket = [0] * self.bt         # decoding requests by key
        self.heap = []                      # (finish iteration, request)
        self.waiting = deque()
        self.running = []                   # admission order (lazy: finished entries skipped)
        self.prefilling = []
        self.n_running = 0
        self.B = 0                          # decoding requests
        self.sum_ctx = 0                    # their total context [tokens]
        self.used = 0                       # KV blocks in use
        self.now = 0.0
        self.it = 0
        self.ptr = 0                        # next request to join the waiting queue
        self.released = n                   # requests that exist so far (closed loop: released)
        self.done = 0
        self.rec = _Recorder()
        # reservation to completion (EnginePolicy.reserve_to_completion): each request's blocks at its last token,
        # and the sum of those of the admitted requests, which never exceeds the capacity
        self.reserve = bool(policy.reserve_to_completion)
        cap = policy.reserve_output_tokens  # None: every output token
        self.final = ([-(-(p + (o if cap is None else min(o, cap))) // self.bt) for p, o in zip(self.P, self.O)]
                      if self.reserve else [])
        self.committed = 0
        # prefill apart from the decodes (EnginePolicy.mixed_prefill False): the decodes wait through prefill-only
        # iterations, so their next gap is those iterations' time (``stall``, since the last decode iteration)
        # plus the decode iteration's own; a request whose first token came from one of them (``stall_new``:
        # (request, first token time)) has its gap from that token on
        self.mixed = bool(policy.mixed_prefill)
        self.stall = 0.0
        self.stall_new = []
        # what fast_forward reads on every call, none of it ever rebound: one attribute load instead of many
        self._ff = (self.heap, self.state, self.fin_it, self.bucket, self.bt, self.waiting, self.fresh, self.P,
                    self.x, self.Lc, tables.shared_s, tables.head_s, tables._ctx, tables._dec_rows, self.rec.cols,
                    self.ready, policy.step_host_s, policy.admits)
        # ... what pricing an iteration reads
        self._price = (tables.shared_s, tables.head_s, tables.decode_core_s, tables.chunk_core_s, self.rec.cols,
                       policy.step_host_s, self.x, self.last_tok, self.extra)
        # ... and what starting and ending a decode touch
        self._dec = (self.it0, self.c0, self.g0, self.key, self.fin_it, self.O, self.heap, self.bucket, self.state,
                     self.bt)
        if concurrency:
            self.released = min(concurrency, n)
            for i in range(n):
                self.arr[i] = 0.0 if i < self.released else math.nan
                self.ready[i] = self.host_s[i] if i < self.released else math.nan

    # ---- the loop ----------------------------------------------------------------------------------------------
    def run(self) -> tuple:
        """Run until every request finished; see the class docstring for what it returns."""
        n, ready, heap, waiting = self.n, self.ready, self.heap, self.waiting
        # the steps, bound once (the loop runs ~1e5 times)
        fast_forward, schedule, admit, run_iteration = self.fast_forward, self.schedule, self.admit, self.run_iteration
        finish_prefills, finish_decodes = self.finish_prefills, self.finish_decodes
        mixed, fresh = self.mixed, self.fresh
        while self.done < n:
            if self.ptr < self.released and ready[self.ptr] <= self.now:
                self.arrivals()
            # a stretch needs decodes, no prefill, and no finish due now (the heap's top, stale or not, is later)
            if self.B and not self.prefilling and not self.stall and heap[0][0] > self.it and fast_forward():
                continue
            if not mixed and (self.prefilling or (waiting and not fresh[waiting[0]])):
                # a prefill-only iteration first, if any prompt can run (SGLang: "run prefill first if possible")
                chunks, demand, budget = self.schedule_prefill()
                if waiting:  # prompts only: a request arriving with its KV joins a decode iteration
                    demand, _ = admit(chunks, demand, budget, arrivals=False)
                if chunks:
                    end = self.run_prefill_iteration(chunks, demand)
                    finish_prefills(chunks, end, self.it)  # the decodes did not move: they go on at ``it``
                    self.now = end
                    continue
            chunks, demand, budget = schedule(mixed)
            admitted = ()
            if waiting:
                demand, admitted = admit(chunks, demand, budget, mixed)
            if not self.B and not chunks:
                if not self.idle():
                    break
                continue
            end = run_iteration(chunks, demand, admitted)
            if chunks:
                finish_prefills(chunks, end, self.it + 1)
            if heap and heap[0][0] <= self.it:
                finish_decodes(end)
            self.now = end
            self.it += 1
        return (np.asarray(self.first), np.asarray(self.finish), np.asarray(self.npre), np.asarray(self.arr),
                np.asarray(self.extra, dtype=float), self.rec.arrays())

    def arrivals(self) -> None:
        """The requests that reached the scheduler by now join the waiting queue."""
        ready, rel, now, waiting = self.ready, self.released, self.now, self.waiting
        ptr = self.ptr
        while ptr < rel and ready[ptr] <= now:
            waiting.append(ptr)
            ptr += 1
        self.ptr = ptr

    def idle(self) -> bool:
        """Nothing to run: jump to the next arrival (True), or stop when none is left (False)."""
        if self.n_running:
            raise RuntimeError("serving simulator stalled with running requests and nothing to schedule")
        if self.ptr >= self.released:
            if self.waiting:
                raise RuntimeError("serving simulator stalled: a request cannot be admitted into empty memory")
            return False
        self.now = max(self.now, self.ready[self.ptr])
        return True

    # ---- 2. fast-forward --------------------------------------------------------------------------------------
    def fast_forward(self) -> bool:
        """Advance a stretch of pure decode up to the next event without scheduling; True if it advanced.

        Nothing is prefilling and no waiting request could be admitted now. A short stretch (< ``FF_NUMPY``
        iterations) runs as plain Python iterations (numpy's fixed cost would dominate), a long one as one
        vectorised span. Either stops at the next finish, at the next arrival when nothing waits, and when the
        blocks run out; a short stretch with nothing waiting runs the finishing iteration too (retiring its
        requests, exactly as the scheduler would) and goes on to the next finish.""" 
        (heap, state, fin_it, bucket, bt, waiting, fresh, P, x, Lc, shared, head, g, dec_rows, cols, ready, step_host,
         admits) = self._ff
        it, B, used, kv_blocks = self.it, self.B, self.used, self.kv_blocks
        while heap and (state[heap[0][1]] != _DECODING or fin_it[heap[0][1]] != heap[0][0]):
            _heappop(heap)
        n_max = heap[0][0] - it  # > 0: run() calls this only when the top is later than now
        if waiting and self.n_running < self.max_seqs:
            h = waiting[0]
            if fresh[h]:
                need = -(-(P[h] + 1) // bt)
            else:
                need = -(-(x[h] + min(Lc[h] - x[h], self.budget_all - (B if self.mixed else 0))) // bt)
            if admits(need, kv_blocks - used - bucket[(-it) % bt]) and (
                    not self.reserve or self.committed + self.final[h] <= kv_blocks):
                return False
        ptr, rel = self.ptr, self.released
        now, sum_ctx = self.now, self.sum_ctx
        if 0 < n_max < FF_NUMPY:
            cs, cd, ck = cols[0], cols[1], cols[6]
            it_start = it
            last = len(g) - 2
            while True:
                base = shared[B] + head[B]
                # StepTables.decode_core_s written out: the mean context only grows in a stretch, so the grid
                # cell is found once and then moved forward (the same cell and the same arithmetic as the method)
                row = dec_rows[B]
                i = min(max(_bisect_right(g, sum_ctx / B) - 1, 0), last)
                # the iterations up to the next finish and, when nothing waits (so the scheduler would only
                # run the decodes), the finishing iteration too: its requests retire here
                span = n_max if waiting else n_max + 1
                # the next arrival ends the stretch when nothing waits (then it would be admitted)
                next_arrival = ready[ptr] if not waiting and ptr < rel else math.inf
                k0 = len(cs)  # the batch columns of this stretch are filled once, below (they hold B throughout)
                for k in range(span):
                    if next_arrival <= now:
                        break
                    need = bucket[(-it) % bt]
                    if need > kv_blocks - used:
                        break
                    used += need
                    s_ctx = sum_ctx / B
                    while i < last and g[i + 1] <= s_ctx:
                        i += 1
                    f = (s_ctx - g[i]) / (g[i + 1] - g[i])
                    t = base + (row[i] + f * (row[i + 1] - row[i]))
                    if step_host:
                        t += step_host
                    cs.append(now)
                    cd.append(t)
                    ck.append(used)
                    sum_ctx += B
                    if k == n_max:  # the finishing iteration
                        _fill_batch(cols, k0, B)
                        k0 = len(cs)
                        self.it, self.used, self.sum_ctx = it, used, sum_ctx
                        self.finish_decodes(now + t)
                        used, sum_ctx, B, rel = self.used, self.sum_ctx, self.B, self.released
                    now += t
                    it += 1
                else:
                    if span > n_max and B:  # past a finish with decodes left: on to the next finish
                        while state[heap[0][1]] != _DECODING or fin_it[heap[0][1]] != heap[0][0]:
                            _heappop(heap)
                        n_max = heap[0][0] - it
                        if 0 < n_max < FF_NUMPY:
                            continue
                _fill_batch(cols, k0, B)
                break
            self.it, self.used, self.now, self.sum_ctx = it, used, now, sum_ctx
            return it > it_start  # no progress means the blocks ran out: schedule (and preempt)
        if n_max >= FF_NUMPY:  # 0 < n_max here
            js = np.arange(n_max)
            cum = np.cumsum(np.asarray(bucket)[(-(it + js)) % bt])
            nn = int(np.searchsorted(cum, kv_blocks - used, side="right"))
            tb = self.tb
            dur = shared[B] + head[B] + np.interp(sum_ctx / B + js, tb.ctx_grid, dec_rows[B])
            if step_host:
                dur = dur + step_host
            starts = now + np.cumsum(dur) - dur
            if not waiting and ptr < rel:
                nn = min(nn, int(np.searchsorted(starts, ready[ptr], side="left")))
            if nn >= 1:
                d = dur[:nn]
                kv = used + cum[:nn]
                self.rec.span(starts[:nn], d, np.full(nn, float(B)), kv.astype(float))
                self.now = float(starts[nn - 1] + d[-1])
                self.used = used + int(cum[nn - 1])
                self.sum_ctx = sum_ctx + B * nn
                self.it = it + nn
                return True
        return False

    # ---- 3. schedule the running requests ----------------------------------------------------------------------
    def schedule(self, prompts: bool = True) -> tuple[list, int, int]:
        """The running requests' part of the iteration: (prefill chunks [(request, tokens)], the blocks the
        decodes and chunks need, the token budget left), preempting until those blocks fit. ``prompts`` False
        (a decode iteration of a policy that prefills apart): the decodes only."""
        if not self.prefilling or not prompts:  # decodes only (the common case): nothing to chunk
            dec_need = self.bucket[(-self.it) % self.bt]
            if dec_need <= self.kv_blocks - self.used:
                return [], dec_need, self.budget_all - self.B
            if not prompts:
                while dec_need > self.kv_blocks - self.used:
                    self.preempt(self.policy.victim(self.running, self.state))
                    dec_need = self.bucket[(-self.it) % self.bt]
                return [], dec_need, self.budget_all - self.B
        bt, bucket = self.bt, self.bucket
        Lc, x = self.Lc, self.x
        bt = self.bt
        while True:
            dec_need = bucket[(-self.it) % bt]
            budget = self.budget_all - self.B
            chunks = []
            pre_need = 0
            for r in self.prefilling:
                if budget <= 0:
                    break
                c = Lc[r] - x[r]
                if c > budget:
                    c = budget
                pre_need += -(-(x[r] + c) // bt) + (-x[r] // bt)  # new blocks of the chunk
                chunks.append((r, c))
                budget -= c
            if dec_need + pre_need <= self.kv_blocks - self.used:
                return chunks, dec_need + pre_need, budget
            self.preempt(self.policy.victim(self.running, self.state))

    def schedule_prefill(self) -> tuple[list, int, int]:
        """A prefill-only iteration's part for the running prefills (no decodes, the whole token budget): (chunks,
        their new blocks, the budget left). Chunks are taken in admission order while their blocks fit, and
        nothing is preempted for them: a prefill that does not fit waits for a decode iteration, which preempts
        if its own blocks do not fit (SGLang admits a prefill only into free memory and retracts decodes)."""
        bt, Lc, x = self.bt, self.Lc, self.x
        while True:
            budget = self.budget_all
            free = self.kv_blocks - self.used
            chunks = []
            need = 0
            for r in self.prefilling:
                if budget <= 0:
                    break
                c = min(Lc[r] - x[r], budget)
                more = -(-(x[r] + c) // bt) + (-x[r] // bt)
                if need + more > free:
                    break
                need += more
                chunks.append((r, c))
                budget -= c
            if chunks or self.B or not self.prefilling:
                return chunks, need, budget
            # partial prefills hold the memory and no decode runs to free it: evict one, as a decode would
            self.preempt(self.policy.victim(self.running, self.state))

    def preempt(self, r: int) -> None:
        """Evict running request ``r`` by recompute: free its blocks and put it back at the front of the
        waiting queue; readmitted, it prefills its prompt and the tokens it generated again (the shared prefix
        still hits the cache)."""
        if self.state[r] == _DECODING:
            k = self.it - self.it0[r]
            c = self.c0[r] + k
            self.g[r] = self.g0[r] + k
            self.used -= -(-c // self.bt)
            self.bucket[self.key[r]] -= 1
            self.B -= 1
            self.sum_ctx -= c
            # its last token: the last decode iteration's end, before any prefill-only iterations since (or the
            # one that gave its first token)
            self.last_tok[r] = next((f for q, f in self.stall_new if q == r), self.now - self.stall)
        else:
            self.used -= -(-self.x[r] // self.bt)
            self.prefilling.remove(r)
        self.state[r] = _WAITING
        if self.reserve:
            self.committed -= self.final[r]
        self.Lc[r] = self.P[r] + self.g[r]
        self.x[r] = min(self.X0[r], self.Lc[r] - 1)
        self.fresh[r] = False
        self.npre[r] += 1
        self.n_running -= 1
        self.waiting.appendleft(r)

    # ---- 4. admit waiting requests -------------------------------------------------------------------------------
    def admit(self, chunks: list, demand: int, budget: int, prompts: bool = True,
              arrivals: bool = True) -> tuple[int, list]:
        """Admit waiting requests FCFS into this iteration (appending their chunks to ``chunks``); returns the
        iteration's block demand and the requests that arrived holding KV and decode from now on. A policy that
        prefills apart admits only prompts into a prefill-only iteration (``arrivals`` False) and only requests
        arriving with their KV into a decode iteration (``prompts`` False): admission stops at the first request
        of the other kind."""
        waiting = self.waiting
        admitted = []
        state, P, Lc, x = self.state, self.P, self.Lc, self.x
        bt, admits = self.bt, self.policy.admits
        reserve, final = self.reserve, self.final
        chunked = self.policy.chunked_prefill
        while waiting and self.n_running < self.max_seqs and budget > 0:
            r = waiting[0]
            if reserve and self.committed + final[r] > self.kv_blocks:
                break  # its blocks to completion do not fit beside the admitted requests' (no eviction later)
            free = self.kv_blocks - self.used - demand
            if self.fresh[r]:
                if not arrivals:
                    break
                need = -(-(P[r] + 1) // bt)
                if not admits(need, free):
                    break
                waiting.popleft()
                held = -(-P[r] // bt)  # the prompt's blocks, arriving with it
                self.used += held
                demand += need - held
                self.start_decode(r, P[r], self.it, 1)
                self.fresh[r] = False
                budget -= 1
                admitted.append(r)
            else:
                if not prompts:
                    break
                c = Lc[r] - x[r]
                if c > budget:
                    if chunked:
                        c = budget
                    elif chunks:  # whole prompts only: it waits for an iteration with room (head of line)
                        break
                    # else the iteration's only prompt: it runs whole beyond the budget (TensorRT-LLM without
                    # chunking needs max_num_tokens >= the longest prompt; the deployment is assumed to set it)
                need = -(-(x[r] + c) // bt)
                if not admits(need, free):
                    break
                waiting.popleft()
                held = -(-x[r] // bt)  # the cached prefix's blocks
                self.used += held
                demand += need - held
                state[r] = _PREFILLING
                self.prefilling.append(r)
                chunks.append((r, c))
                budget -= c
            self.running.append(r)
            self.n_running += 1
            if reserve:
                self.committed += final[r]
        if len(self.running) > 2 * self.n_running + 64:  # drop the finished and preempted entries now and then
            self.running = [r for r in self.running if state[r] in (_PREFILLING, _DECODING)]
        return demand, admitted

    def start_decode(self, r: int, context: int, it: int, generated: int) -> None:
        """Request ``r`` decodes from iteration ``it`` on at ``context`` tokens, having ``generated`` tokens."""
        it0, c0, g0, key, fin_it, O, heap, bucket, state, bt = self._dec
        it0[r], c0[r], g0[r] = it, context, generated
        k = key[r] = (context - it) % bt
        f = fin_it[r] = it + O[r] - generated - 1
        _heappush(heap, (f, r))
        bucket[k] += 1
        self.B += 1
        self.sum_ctx += context
        state[r] = _DECODING

    # ---- 5. price and run the iteration --------------------------------------------------------------------------
    def run_prefill_iteration(self, chunks: list, demand: int) -> float:
        """A prefill-only iteration (EnginePolicy.mixed_prefill False): allocate its blocks, price its chunks
        alone and record it (no decodes; the decodes' wait goes into ``stall``); returns its end time [s]."""
        shared, head, _, chunk_core, cols, step_host, x, _, _ = self._price
        used = self.used = self.used + demand
        cp_tok, pairs = 0, 0.0
        for r, c in chunks:
            cp_tok += c
            pairs += c * (x[r] + c / 2.0)
        xe = pairs / cp_tok - cp_tok / 2.0
        t = shared[cp_tok] + head[len(chunks)] + chunk_core(cp_tok, xe if xe > 0 else 0.0) + step_host
        cs, cd, cb, cdec, cw, cp, ck = cols
        cs.append(self.now)
        cd.append(t)
        cb.append(len(chunks))
        cdec.append(0)
        cw.append(0)
        cp.append(cp_tok)
        ck.append(used)
        self.stall += t
        return self.now + t

    def run_iteration(self, chunks: list, demand: int, admitted: list) -> float:
        """Allocate the iteration's new blocks, price it (the step tables plus the policy's host time per
        step) and record it; returns its end time [s]."""
        shared, head, decode_core, chunk_core, cols, step_host, x, last_tok, extra = self._price
        used = self.used = self.used + demand
        B, sum_ctx = self.B, self.sum_ctx
        cp_tok = 0
        if chunks:
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
        if step_host:
            t += step_host
        now = self.now
        end = now + t
        cs, cd, cb, cdec, cw, cp, ck = cols
        cs.append(now)
        cd.append(t)
        cb.append(B + len(chunks))
        cdec.append(B)
        if self.stall:  # the decodes waited through prefill-only iterations: one longer gap each
            cw.append(0)
            new = [(r, f) for r, f in self.stall_new if self.state[r] == _DECODING and self.it0[r] == self.it]
            extra.extend([t + self.stall] * (B - len(admitted) - len(new)))
            extra.extend(end - f for _, f in new)
            self.stall, self.stall_new = 0.0, []
        else:
            cw.append(B - len(admitted))
        cp.append(cp_tok)
        ck.append(used)
        if admitted:
            extra.extend(end - last_tok[r] for r in admitted)
        self.sum_ctx = sum_ctx + B
        return end

    # ---- 6. emit tokens, retire ------------------------------------------------------------------------------------
    def finish_prefills(self, chunks: list, end: float, next_it: int) -> None:
        """The chunks ran: a prefill whose last chunk ran emits a token (its first, or the next after a
        recompute) and decodes from iteration ``next_it`` (the next decode iteration), or retires if that was its
        last."""
        x, Lc, g, first, state = self.x, self.Lc, self.g, self.first, self.state
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
                self.extra.append(end - self.last_tok[r])
            if g[r] >= self.O[r]:
                self.retire(r, end, -(-x[r] // self.bt))
                continue
            self.start_decode(r, Lc[r], next_it, g[r])
            if next_it == self.it:  # a prefill-only iteration's: its first gap ends at the next decode iteration
                self.stall_new.append((r, end))
        if ended:
            self.prefilling = [r for r in self.prefilling if state[r] == _PREFILLING]

    def finish_decodes(self, end: float) -> None:
        """Decoding requests that emitted their last token in this iteration retire."""
        it0, c0, _, key, fin_it, _, heap, bucket, state, bt = self._dec
        it = self.it
        while heap and heap[0][0] <= it:
            f, r = _heappop(heap)
            if state[r] != _DECODING or fin_it[r] != f:
                continue
            c = c0[r] + (it - it0[r]) + 1
            bucket[key[r]] -= 1
            self.B -= 1
            self.sum_ctx -= c
            self.retire(r, end, -(-c // bt))

    def retire(self, r: int, end: float, blocks: int) -> None:
        """Request ``r`` emitted its last token at ``end``: free its ``blocks``, mark it done and, in a closed
        loop, release the next request (it reaches the scheduler after the per-request host time)."""
        self.used -= blocks
        if self.reserve:
            self.committed -= self.final[r]
        self.state[r] = _DONE
        self.finish[r] = end
        self.n_running -= 1
        self.done += 1
        if self.concurrency and self.released < self.n:
            self.arr[self.released] = end
            self.ready[self.released] = end + self.host_s[self.released]
            self.released += 1
