"""Preloading a cached prefix while its request waits, and the lookahead planner under a staging budget
(docs/models.md §6.3-6.4).

Exposed load. A waiting request whose blocks start moving W seconds before it is scheduled can have them
staged in host memory by then; only the last hop (host -> GPU, which needs the GPU memory the scheduler
allocates at admission) stays on its critical path:

    g_exposed(P, W) = g_mem(P) + max(0, g(P) - g_mem(P) - W),   benefit = g(P) - g_exposed = min(W, g - g_mem)

with g the tier's load time (:func:`llmexplore.models.offload.cost.load_s`) and g_mem the host -> GPU copy of the
same blocks. A dram tier gains nothing (its blocks already sit in host memory). As W grows the break-even
falls to the host-memory one.

Wait. W comes from the queueing model: the M/D/1 waiting time of a prefill server at an arrival rate
(:func:`llmexplore.models.queueing.at_stat.queue_wait`, mean or a quantile; docs/models.md §4.5).

Planner. Given the waiting requests (prefix length, expected start) and a staging budget in bytes, choose whom
to preload: the highest benefit per staged byte first, skipping a request that no longer fits (then trying
smaller ones), never over budget, never one request twice, and say why each was or was not chosen. Greedy by
density with skipping gives a total benefit that never falls when the budget grows (the first request that
changes status when the budget grows is denser than everything it displaces and larger than the room they
used). :func:`simulate_staging` replays a queue through one prefill server with the planner re-run at every
arrival and departure, recording the staged bytes over time.

Every function takes ``pp`` (pipeline stages) and ``speculative`` (a draft's layer loaded and recomputed with the
target's) as :mod:`llmexplore.models.offload.cost` does: g and g_mem are the worst stage's, the staged bytes one
copy of every layer (each node stages its own stages' layers), and a pipeline replays as a server that accepts a
new prompt every service time while each prompt's TTFT is its latency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ... import _check
from ...errors import SpecError
from ...specs import StorageTier
from ..step.engine import Deployment
from .cost import DEFAULT_BLOCK_TOKENS, MAX_PREFIX, _block, hop_times, load_s, recompute_parts, recompute_s

__all__ = ["exposed_load_s", "break_even_preload", "Candidate", "PreloadChoice", "plan_preloads",
           "simulate_staging"]



def exposed_load_s(dep: Deployment, tier: StorageTier, prefix_tokens, wait_s, *, kv_dtype: str | None = None,
                   block_tokens: int = DEFAULT_BLOCK_TOKENS, pipelined: bool = True, pp=1,
                   speculative=None) -> dict[str, np.ndarray]:
    """Load time left on the critical path when loading starts ``wait_s`` before the request runs [s]
    (broadcast over ``prefix_tokens`` and ``wait_s``): ``exposed_s``, ``load_s`` (no preload), ``mem_s`` (the
    host -> GPU hop alone), ``benefit_s`` and ``staged_B`` (host bytes the preload holds, one copy)."""
    W = _check.real_array("wait_s", wait_s, lo=0, hi=1e6, unit="s")
    ld = load_s(dep, tier, prefix_tokens, kv_dtype=kv_dtype, block_tokens=block_tokens, pipelined=pipelined, pp=pp,
                speculative=speculative)
    g = ld["load_s"]
    if tier.kind == "dram":
        mem = g
    else:
        h = hop_times(dep, tier, kv_dtype=kv_dtype, block_tokens=block_tokens, pp=pp, speculative=speculative)
        mem = np.where(ld["blocks"] > 0, ld["blocks"] * h["h2d_s"], 0.0)
    g, mem, W = np.broadcast_arrays(g, mem, W)
    exposed = mem + np.maximum(0.0, g - mem - W)
    staged = np.broadcast_to(ld["bytes_B"], exposed.shape) if tier.kind != "dram" else np.zeros(exposed.shape)
    return {"exposed_s": exposed, "load_s": g, "mem_s": mem, "benefit_s": g - exposed, "staged_B": staged}


def break_even_preload(dep: Deployment, tier: StorageTier, wait_s, *, kv_dtype: str | None = None,
                       block_tokens: int = DEFAULT_BLOCK_TOKENS, pipelined: bool = True, suffix_tokens: int = 256,
                       max_tokens: int = 1 << 19, pp=1, speculative=None) -> np.ndarray:
    """Break-even prefix with a preload started ``wait_s`` (array) ahead [tokens]: the block multiple from
    which loading (with the exposed cost) beats recomputing for every longer prefix; ``inf`` if never up to
    ``max_tokens``. At ``wait_s = 0`` it equals :func:`~llmexplore.models.offload.cost.break_even`."""
    B = _block(block_tokens)
    max_tokens = _check.integer("max_tokens", max_tokens, lo=B, hi=MAX_PREFIX, unit="tokens")
    W = np.atleast_1d(_check.real_array("wait_s", wait_s, lo=0, hi=1e6, unit="s"))
    _check.grid_size("wait_s x blocks", (W.size, 1), (1, max_tokens // B))
    n = np.arange(1, max_tokens // B + 1, dtype=float)
    f = recompute_s(dep, n * B, suffix_tokens=suffix_tokens, pp=pp, speculative=speculative)
    e = exposed_load_s(dep, tier, n[:, None] * B, W.ravel()[None, :], kv_dtype=kv_dtype, block_tokens=B,
                       pipelined=pipelined, pp=pp, speculative=speculative)["exposed_s"]
    losing = (f[:, None] - e) < 0                       # [blocks, waits]
    any_losing = losing.any(axis=0)
    last = n.size - 1 - np.argmax(losing[::-1], axis=0)  # last losing block index per wait
    tokens = np.where(~any_losing, float(B), np.where(last == n.size - 1, np.inf, (last + 2.0) * B))
    return tokens.reshape(W.shape)


@dataclass(frozen=True)
class Candidate:
    """A waiting request: ``request_id``, its cached ``prefix_tokens`` and when it is expected to start
    (``start_in_s`` from now)."""

    request_id: str
    prefix_tokens: int
    start_in_s: float


@dataclass(frozen=True)
class PreloadChoice:
    """The planner's answer for one request: chosen or not, and why; benefit and staged bytes of its preload."""

    request_id: str
    prefix_tokens: int
    start_in_s: float
    staged_B: float
    benefit_s: float
    chosen: bool
    reason: str


def _candidates(candidates: Iterable) -> list[Candidate]:
    out = []
    for i, c in enumerate(candidates):
        if not isinstance(c, Candidate):
            try:
                rid, p, t = c
            except (TypeError, ValueError):
                raise SpecError(f"candidates[{i}] must be a Candidate or a (request_id, prefix_tokens, "
                                f"start_in_s) triple, got {c!r}") from None
            c = Candidate(str(rid), p, t)
        _check.integer(f"candidates[{i}].prefix_tokens", c.prefix_tokens, lo=0, hi=MAX_PREFIX, unit="tokens")
        _check.number(f"candidates[{i}].start_in_s", c.start_in_s, lo=0, hi=1e6, unit="s")
        out.append(c)
    return out


def plan_preloads(dep: Deployment, tier: StorageTier, candidates: Sequence, budget_B: float, *,
                  kv_dtype: str | None = None, block_tokens: int = DEFAULT_BLOCK_TOKENS, pipelined: bool = True,
                  suffix_tokens: int = 256, lookahead: int | None = None, pp=1,
                  speculative=None) -> list[PreloadChoice]:
    """Choose which waiting requests to preload within ``budget_B`` staged bytes (module docstring).

    ``candidates``: :class:`Candidate` or (request_id, prefix_tokens, start_in_s) in queue order;
    ``lookahead``: only the first so many are considered (all if None). Returns one :class:`PreloadChoice`
    per candidate, in the order given; the chosen ones' ``staged_B`` sum to at most ``budget_B``.
    """
    budget = _check.number("budget_B", budget_B, lo=0, hi=1e18, unit="B")
    cands = _candidates(candidates)
    if lookahead is not None:
        lookahead = _check.integer("lookahead", lookahead, lo=0, hi=1 << 20)
    if not cands:
        return []
    P = np.array([c.prefix_tokens for c in cands], dtype=float)
    W = np.array([c.start_in_s for c in cands], dtype=float)
    dec = {"pp": pp, "speculative": speculative}
    ex = exposed_load_s(dep, tier, P, W, kv_dtype=kv_dtype, block_tokens=block_tokens, pipelined=pipelined, **dec)
    ld = load_s(dep, tier, P, kv_dtype=kv_dtype, block_tokens=block_tokens, pipelined=pipelined, **dec)
    rc = recompute_s(dep, ld["cached_tokens"], suffix_tokens=suffix_tokens, **dec)
    staged = ld["bytes_B"]
    reasons: list[str | None] = [None] * len(cands)
    seen: set[str] = set()
    for i, c in enumerate(cands):
        if c.request_id in seen:
            reasons[i] = "already listed: a request is preloaded at most once"
        elif lookahead is not None and i >= lookahead:
            reasons[i] = f"beyond the lookahead ({lookahead} requests)"
        elif ld["blocks"][i] == 0:
            reasons[i] = "no full block cached"
        elif tier.kind == "dram":
            reasons[i] = "a dram tier's blocks already sit in host memory: nothing to stage"
        elif rc[i] < ex["exposed_s"][i]:
            reasons[i] = (f"recompute is cheaper even preloaded ({rc[i] * 1e3:.3g} ms vs "
                          f"{ex['exposed_s'][i] * 1e3:.3g} ms exposed)")
        elif ex["benefit_s"][i] <= 0:
            reasons[i] = "no time to preload: it starts now"
        seen.add(c.request_id)
    order = sorted((i for i in range(len(cands)) if reasons[i] is None),
                   key=lambda i: (-ex["benefit_s"][i] / staged[i], i))
    left = budget
    chosen = [False] * len(cands)
    for i in order:
        if staged[i] <= left:
            chosen[i] = True
            left -= staged[i]
            reasons[i] = (f"chosen: saves {ex['benefit_s'][i] * 1e3:.3g} ms for {staged[i] / 1e6:.3g} MB staged "
                          f"({ex['benefit_s'][i] * 1e3 / (staged[i] / 1e9):.3g} ms per GB)")
        else:
            reasons[i] = f"over budget: needs {staged[i] / 1e6:.3g} MB, {left / 1e6:.3g} MB left"
    return [PreloadChoice(c.request_id, c.prefix_tokens, c.start_in_s, float(staged[i]),
                          float(ex["benefit_s"][i]) if chosen[i] else 0.0, chosen[i], reasons[i])
            for i, c in enumerate(cands)]


def simulate_staging(dep: Deployment, tier: StorageTier, arrivals_s, prefix_tokens, service_s, budget_B: float, *,
                     kv_dtype: str | None = None, block_tokens: int = DEFAULT_BLOCK_TOKENS, lookahead: int = 16,
                     suffix_tokens: int = 256, latency_s=None, pp=1, speculative=None) -> dict[str, np.ndarray]:
    """Replay a queue through one FIFO prefill server with lookahead preloading under a staging budget.

    ``arrivals_s`` (sorted), ``prefix_tokens`` and ``service_s`` (each request's prefill time without its
    load) are per request; ``latency_s`` (per request, default ``service_s``) is a pipeline's prefill latency,
    while ``service_s`` is how long it holds the server (the stage's share). At every arrival and departure the planner re-plans for the waiting requests
    (their expected start = the server's backlog ahead of them); a chosen request's blocks stay staged until
    it starts. A request's load costs its exposed time (:func:`exposed_load_s` with the time it was staged
    for) and is skipped when recompute is cheaper. Returns event ``time_s`` and ``staged_B`` (the occupancy
    step function), and per request ``start_s``, ``ttft_s`` (start + exposed load + service [+ recompute of
    the cached tokens when the gate chose it] - arrival, with the latency in place of the service for a
    pipeline), ``exposed_s``, ``recomputed`` and ``preloaded``; the server is held for the exposed load, the
    service and the recompute's service time.
    """
    t_arr = _check.real_array("arrivals_s", np.atleast_1d(arrivals_s), lo=0, hi=1e9, unit="s")
    P = _check.real_array("prefix_tokens", np.atleast_1d(prefix_tokens), lo=0, hi=MAX_PREFIX, integer=True)
    S = _check.real_array("service_s", np.atleast_1d(service_s), lo=0, hi=1e6, unit="s")
    lat = S if latency_s is None else _check.real_array("latency_s", np.atleast_1d(latency_s), lo=0, hi=1e6, unit="s")
    if not (t_arr.shape == P.shape == S.shape == lat.shape) or t_arr.ndim != 1:
        raise SpecError(f"arrivals_s, prefix_tokens, service_s and latency_s must be 1-D of one length, got shapes "
                        f"{t_arr.shape}, {P.shape}, {S.shape}, {lat.shape}")
    if t_arr.size > 20_000:
        raise SpecError(f"arrivals_s must hold at most 20,000 requests, got {t_arr.size:,}")
    if np.any(np.diff(t_arr) < 0):
        raise SpecError("arrivals_s must be sorted (non-decreasing)")
    budget = _check.number("budget_B", budget_B, lo=0, hi=1e18, unit="B")
    N = t_arr.size
    dec = {"pp": pp, "speculative": speculative}
    ld = load_s(dep, tier, P, kv_dtype=kv_dtype, block_tokens=block_tokens, **dec)
    parts = recompute_parts(dep, ld["cached_tokens"], suffix_tokens=suffix_tokens, **dec)
    rc, rc_held = parts["latency_s"], parts["service_s"]
    staged_at = np.full(N, np.nan)   # when a request's preload started
    start = np.full(N, np.nan)
    exposed = np.zeros(N)
    recomputed = np.zeros(N, dtype=bool)
    times, occupancy = [0.0], [0.0]
    free_at = 0.0        # when the server finishes what it has started
    nxt = 0              # next request to start (FIFO)
    arrived = 0
    now = 0.0
    while nxt < N:
        # the next event: an arrival, or the server freeing for the next arrived request
        t_next_arrival = t_arr[arrived] if arrived < N else math.inf
        t_next_start = max(free_at, t_arr[nxt]) if nxt < arrived else math.inf
        if t_next_arrival <= t_next_start:
            now = t_next_arrival
            arrived += 1
        else:
            now = t_next_start
            i = nxt
            staged_for = now - staged_at[i] if not np.isnan(staged_at[i]) else 0.0
            ex = float(exposed_load_s(dep, tier, P[i], staged_for, kv_dtype=kv_dtype,
                                      block_tokens=block_tokens, **dec)["exposed_s"])
            if ld["blocks"][i] > 0 and ex <= rc[i]:
                exposed[i] = ex            # the gate: load (what is left of it after the preload)
            else:
                recomputed[i] = True       # the gate: recompute the cached tokens inside the prefill
            start[i] = now
            free_at = now + exposed[i] + S[i] + (rc_held[i] if recomputed[i] else 0.0)
            nxt += 1
        # re-plan for the waiting requests not started: their expected start is the backlog ahead of them
        waiting = list(range(nxt, arrived))
        if waiting:
            ahead = max(free_at, now) - now
            cands = []
            for j in waiting:
                cands.append(Candidate(str(j), int(P[j]), ahead))
                ahead += S[j]
            held = [j for j in waiting if not np.isnan(staged_at[j])]
            held_B = float(sum(ld["bytes_B"][j] for j in held))
            fresh = [c for c in cands if np.isnan(staged_at[int(c.request_id)])]
            for ch in plan_preloads(dep, tier, fresh, max(0.0, budget - held_B), kv_dtype=kv_dtype,
                                    block_tokens=block_tokens, suffix_tokens=suffix_tokens,
                                    lookahead=max(0, lookahead - len(held)), **dec):
                if ch.chosen:
                    staged_at[int(ch.request_id)] = now
        occ = float(sum(ld["bytes_B"][j] for j in range(nxt, arrived) if not np.isnan(staged_at[j])))
        times.append(now)
        occupancy.append(occ)
    ttft = start + exposed + lat + np.where(recomputed, rc, 0.0) - t_arr
    return {"time_s": np.array(times), "staged_B": np.array(occupancy), "start_s": start, "ttft_s": ttft,
            "exposed_s": exposed, "recomputed": recomputed, "preloaded": ~np.isnan(staged_at)}
