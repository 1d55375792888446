"""Deployment-planning numerics (docs/models.md §8): the highest Poisson request rate a configuration sustains
within TTFT and TPOT targets at a statistic, integer pool sizes within a GPU budget, and Pareto frontiers.

Everything here is vectorised over configurations: a configuration's sides are reduced to a few numbers (the
prefill time of one prompt, the KV link's busy time and exposed time per request, the decode step time on a
batch grid) and the rates follow from the queueing formulas of :mod:`..queueing.at_stat` (a wait at a statistic):

* prefill pool of n instances (one shared FCFS queue, deterministic service S): the largest rate with
  ``W_stat(lam, S, n) + S + W_link,stat(lam / n) + exposed <= TTFT target`` (bisection, monotone in lam);
* decode instance: the largest mean batch m whose batch statistic (m + z sqrt(m) for a percentile, m for the
  mean) has a step time within the TPOT target and fits memory; Little's law gives its rate
  m / (OSL t(m));
* a disaggregated pool pair (n_p, n_d) sustains min(rate_p[n_p], n_d rate_d1, inbound-link rate[n_d]);
* a colocated instance's rate comes from :func:`.disagg.colocated_from_tables` on a rate grid.

Statistics: ``"mean"``, ``"p50"``, ``"p90"``, ``"p99"`` (:data:`..queueing.at_stat.STATS`). Waits at a
percentile are added to the service
times (quantiles of a sum are not sums of quantiles: conservative, as in :mod:`.disagg`). With ``"mean"`` the
memory check still uses the p99 concurrency (a batch that fits only on average preempts).
"""

from __future__ import annotations

import math

import numpy as np

from ..queueing.at_stat import Z_SCORES, link_wait, poisson_quantile_mean, pool_wait, z_of

__all__ = ["bisect_rate", "prefill_pool_rates",
           "inbound_link_rates", "decode_instance_rate", "pool_pairs", "best_pool_pair", "pareto_front", "decode_batch_at"]

BISECT_STEPS = 40  # halvings of the rate bracket: relative resolution 2**-40


def bisect_rate(ok, hi, steps: int = BISECT_STEPS) -> np.ndarray:
    """Largest rate in [0, hi] (elementwise) with ``ok(rate)`` true, for a predicate monotone in the rate."""
    hi = np.asarray(hi, dtype=float)
    lo = np.zeros_like(hi)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        good = ok(mid)
        lo = np.where(good, mid, lo)
        hi = np.where(good, hi, mid)
    return lo


def prefill_pool_rates(stat: str, ttft_target_s: float, prefill_s, busy_s, exposed_s, n_max: int) -> np.ndarray:
    """Highest rate [1/s] a pool of n = 1..n_max prefill instances sustains within the TTFT target, for k
    configurations at once: inputs of shape (k,) (one prompt's prefill [s], the instance NICs' busy time per
    request [s], the exposed transfer [s]); returns shape (k, n_max), 0 where even an idle pool misses."""
    S = np.asarray(prefill_s, float)[:, None]
    busy = np.asarray(busy_s, float)[:, None]
    exp = np.asarray(exposed_s, float)[:, None]
    n = np.arange(1, int(n_max) + 1, dtype=float)[None, :]
    cap = n / S
    cap = np.minimum(cap, np.where(busy > 0, n / np.where(busy > 0, busy, 1.0), np.inf)) * (1 - 1e-9)

    def ok(lam):
        with np.errstate(invalid="ignore", over="ignore"):
            t = pool_wait(stat, lam, S, n) + S + link_wait(stat, lam / n, busy) + exp
        return t <= ttft_target_s

    rate = bisect_rate(ok, np.broadcast_to(cap, np.broadcast_shapes(S.shape, n.shape)))
    return np.where(S + exp <= ttft_target_s, rate, 0.0)


def inbound_link_rates(stat: str, slack_s, busy_s, n_max: int) -> np.ndarray:
    """Highest rate [1/s] n = 1..n_max decode instances' inbound NICs take while their wait stays within
    ``slack_s`` (the TTFT target minus an idle prefill and the exposed transfer), shape (k, n_max)."""
    slack = np.asarray(slack_s, float)[:, None]
    busy = np.asarray(busy_s, float)[:, None]
    n = np.arange(1, int(n_max) + 1, dtype=float)[None, :]
    if not np.any(busy > 0):
        return np.where(slack >= 0, np.inf, 0.0) * np.ones_like(n)
    cap = np.where(busy > 0, n / np.where(busy > 0, busy, 1.0) * (1 - 1e-9), np.inf)

    def ok(lam):
        with np.errstate(invalid="ignore", over="ignore"):
            return link_wait(stat, lam / n, busy) <= slack

    finite = np.where(np.isfinite(cap), cap, 1.0)
    rate = bisect_rate(ok, np.broadcast_to(finite, np.broadcast_shapes(busy.shape, n.shape)))
    rate = np.where(np.isfinite(cap), rate, np.inf)
    return np.where(slack >= 0, rate, 0.0)


def _monotone(step_s: np.ndarray) -> np.ndarray:
    return np.maximum.accumulate(np.asarray(step_s, dtype=float))


def decode_batch_at(batches, step_s, tpot_target_s: float) -> float:
    """Largest (fractional) batch whose step time is within the target on the batch grid (linear between grid
    points; 0 if even batch 1 misses)."""
    b = np.asarray(batches, float)
    t = _monotone(step_s)
    if t.size == 0 or t[0] > tpot_target_s:
        return 0.0
    if t[-1] <= tpot_target_s:
        return float(b[-1])
    i = int(np.searchsorted(t, tpot_target_s, side="right"))  # t[i-1] <= target < t[i]
    t0, t1 = t[i - 1], t[i]
    return float(b[i - 1] + (b[i] - b[i - 1]) * (tpot_target_s - t0) / (t1 - t0)) if t1 > t0 else float(b[i - 1])


def decode_instance_rate(stat: str, tpot_target_s: float, batches, step_s, output_tokens: int) -> dict:
    """Highest rate [1/s] one decode instance sustains within the TPOT target (Little's law at the largest
    mean batch m whose batch statistic meets the target and fits memory: the grid ends at the memory cap).

    Returns ``rate_per_s``, ``mean_batch`` m, ``batch_stat`` (the batch the target is checked at) and
    ``tpot_s`` (the step at that batch)."""
    b_star = decode_batch_at(batches, step_s, tpot_target_s)
    if b_star < 1.0:
        return {"rate_per_s": 0.0, "mean_batch": 0.0, "batch_stat": 0.0, "tpot_s": np.inf}
    z = z_of(stat)
    # memory: the p99 concurrency (z = 2.33) must fit the grid's cap; the target: the stat's batch
    cap = float(np.asarray(batches)[-1])
    m_mem = float(poisson_quantile_mean(Z_SCORES[0.99], cap))
    m = min(float(poisson_quantile_mean(z, b_star)), m_mem)
    t_m = float(np.interp(max(m, 1.0), batches, _monotone(step_s)))
    b_stat = m + z * np.sqrt(m)
    return {"rate_per_s": m / (output_tokens * t_m), "mean_batch": m, "batch_stat": b_stat,
            "tpot_s": float(np.interp(max(b_stat, 1.0), batches, _monotone(step_s)))}


def pool_pairs(rate_p: np.ndarray, rate_d1: np.ndarray, rate_link: np.ndarray, ranks_p, ranks_d, budget: int
               ) -> dict:
    """Every (n_p, n_d) pool pair of k configurations: sustained rate min(prefill pool, n_d decode instances,
    inbound link) and GPUs; pairs beyond the budget get rate 0. Shapes: rate_p (k, Np), rate_d1 (k,),
    rate_link (k, Nd); returns ``rate`` and ``gpus`` of shape (k, Np, Nd) and ``n_p``, ``n_d`` grids."""
    Np = rate_p.shape[1]
    Nd = rate_link.shape[1]
    n_p = np.arange(1, Np + 1, dtype=float)
    n_d = np.arange(1, Nd + 1, dtype=float)
    dec = np.minimum(n_d[None, :] * np.asarray(rate_d1, float)[:, None], rate_link)
    rate = np.minimum(rate_p[:, :, None], dec[:, None, :])
    gpus = (n_p[None, :, None] * np.asarray(ranks_p, float)[:, None, None]
            + n_d[None, None, :] * np.asarray(ranks_d, float)[:, None, None])
    rate = np.where(gpus <= budget, rate, 0.0)
    return {"rate": rate, "gpus": gpus, "n_p": n_p, "n_d": n_d}


def best_pool_pair(rate_p: np.ndarray, rate_d1: float, rate_link: np.ndarray, ranks_p: float, ranks_d: float,
                   budget: int, target_rate: float | None = None, *, usd_p: float = 0.0, usd_d: float = 0.0,
                   budget_usd: float = math.inf, by_cost: bool = False) -> dict:
    """The (n_p, n_d) pool pair :func:`pool_pairs` would pick for one configuration, without its Np x Nd grid
    (a 4,096-GPU budget made that 80 x 4,096 x 4,096 floats, 10 GiB): O(Np log Nd).

    ``rate_p`` (Np,) prefill-pool rates by instances, ``rate_link`` (Nd,) inbound link rates by decode instances.
    Without ``target_rate``: the highest sustained rate min(prefill pool, decode pool, link) within the budget,
    then the fewest GPUs, then the fewest prefill instances. With it: the fewest GPUs that sustain it, then the
    fewest prefill instances. Returns ``n_p``, ``n_d``, ``rate``, ``gpus`` (0 and NaN where none) and
    ``max_rate``, the highest rate any pair within the budget sustains.

    ``usd_p`` / ``usd_d``: the price of one prefill / decode instance [USD/hour]; ``budget_usd`` bounds the pair's
    price as ``budget`` bounds its GPUs; ``by_cost``: the lowest price replaces the fewest GPUs in the order, and without ``target_rate`` the lowest
    price per request served (USD/hour over rate) comes first."""
    rate_p = np.asarray(rate_p, float)
    rate_link = np.asarray(rate_link, float)
    Np, Nd = rate_p.size, rate_link.size
    n_p = np.arange(1, Np + 1, dtype=float)
    n_d = np.arange(1, Nd + 1, dtype=float)
    dec = np.minimum(n_d * float(rate_d1), rate_link)
    best_dec = np.maximum.accumulate(dec)  # the best decode side with at most n_d instances
    # the most decode instances the budget leaves next to n_p prefill instances (0: none)
    room = np.clip(np.floor((budget - n_p * ranks_p) / ranks_d + 1e-9), 0, Nd)
    if math.isfinite(budget_usd) and usd_d > 0:  # the decode instances the price budget leaves, too
        room = np.minimum(room, np.clip(np.floor((budget_usd - n_p * usd_p) / usd_d * (1 + 1e-12)), 0, Nd))
    room = room.astype(int)
    usable = room >= 1
    top = np.where(usable, np.minimum(rate_p, best_dec[np.maximum(room, 1) - 1]), 0.0)
    max_rate = float(top.max()) if top.size else 0.0
    want = top if target_rate is None else np.where(top >= target_rate, target_rate, 0.0)
    want = np.where(usable & (rate_p >= want) & (want > 0), want, 0.0)
    # the fewest decode instances whose decode side reaches each n_p's rate (best_dec is sorted)
    nd_need = np.searchsorted(best_dec, want, side="left") + 1
    ok = (want > 0) & (nd_need <= room)
    if not ok.any():
        return {"n_p": 0, "n_d": 0, "rate": 0.0, "gpus": np.nan, "max_rate": max_rate}
    gpus = n_p * ranks_p + nd_need * ranks_d
    usd = n_p * usd_p + nd_need * usd_d
    spend = usd if by_cost else gpus
    if target_rate is None and by_cost:  # the lowest price per request served, then the highest rate
        order = np.lexsort((n_p, -want, np.where(want > 0, usd / np.maximum(want, 1e-300), np.inf)))
    elif target_rate is None:
        order = np.lexsort((n_p, spend, -want))  # highest rate, then fewest GPUs (lowest price), then fewest prefill
    else:
        order = np.lexsort((n_p, spend))
    i = int(next(j for j in order if ok[j]))
    return {"n_p": int(n_p[i]), "n_d": int(nd_need[i]), "rate": float(want[i]), "gpus": float(gpus[i]),
            "usd_per_hour": float(usd[i]), "max_rate": max_rate}


def pareto_front(x, y) -> np.ndarray:
    """Indices of the points not dominated in (larger x, larger y), ordered by x ascending."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y) & (y > 0)
    idx = np.nonzero(ok)[0]
    if idx.size == 0:
        return idx
    order = idx[np.lexsort((-y[idx], -x[idx]))]  # x descending, then y descending
    keep, best = [], -np.inf
    for i in order:
        if y[i] > best:
            keep.append(i)
            best = y[i]
    return np.array(keep[::-1], dtype=int)
