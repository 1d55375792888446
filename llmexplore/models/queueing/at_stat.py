"""A wait at a statistic: one vocabulary for every queue the planner, the P/D sizing and offload price
(docs/models.md §4.5, §8).

``stat`` is one of :data:`STATS` (``"mean"``, ``"p50"``, ``"p90"``, ``"p99"``). A percentile statistic maps to a
probability (:func:`percentile_of`; the mean maps to p99 for the memory and tail checks that go with it) and a
normal quantile (:func:`z_of`, :data:`Z_SCORES`). The waits:

* :func:`queue_wait`: one M/D/1 server (a prefill server ahead of a preload), exact;
* :func:`pool_wait`: ``servers`` deterministic servers with one shared FCFS queue (exact M/D/1 for one,
  Allen-Cunneen M/D/c beyond), and its percentile form :func:`pool_wait_quantile`;
* :func:`link_wait`: a NIC as an M/D/1 server busy ``busy_s`` per request (0 if the link costs nothing);
* :func:`md1_quantile_fast`: the exact M/D/1 quantile interpolated in rho, for the grids of the sizing loops;
* :func:`poisson_quantile_mean`: the largest mean of a Poisson count whose normal-approximated quantile fits.

All are vectorised and return ``inf`` at or above saturation. Nothing here imports other parts of ``models/``
than :mod:`.core`.
"""

from __future__ import annotations

import functools

import numpy as np

from ... import _check
from ...errors import SpecError
from . import core as qz
from .core import md1_mean_wait, md1_wait_quantile

__all__ = ["STATS", "Z_SCORES", "check_stat", "percentile_of", "z_of", "queue_wait", "pool_wait",
           "pool_wait_quantile", "link_wait", "md1_quantile_fast", "poisson_quantile_mean"]

STATS = ("mean", "p50", "p90", "p99")
PERCENTILE = _PCT = {"mean": 0.99, "p50": 0.5, "p90": 0.9, "p99": 0.99}  # "mean": the memory / tail checks use p99
Z_SCORES = {0.5: 0.0, 0.9: 1.2816, 0.95: 1.6449, 0.99: 2.3263, 0.999: 3.0902}  # standard normal quantiles


def check_stat(stat: str) -> str:
    """``stat`` if it is one of :data:`STATS` (SpecError naming ``stat`` otherwise)."""
    if stat not in STATS:
        raise SpecError(f"stat must be one of {', '.join(STATS)}, got {stat!r}")
    return stat


def percentile_of(stat: str) -> float:
    """Percentile used for the workload's queueing and memory checks under ``stat`` (p99 for the mean)."""
    return _PCT[check_stat(stat)]


def z_of(stat: str) -> float:
    """Normal quantile of the batch statistic: 0 for the mean and the median."""
    return 0.0 if check_stat(stat) == "mean" else Z_SCORES[_PCT[stat]]


def pool_wait(stat: str, lam, service_s, servers) -> np.ndarray:
    """FCFS wait statistic of ``servers`` deterministic servers (one shared queue) at rate ``lam`` [s]:
    mean (exact M/D/1 or Allen-Cunneen M/D/c) or percentile (:func:`pool_wait_quantile`)."""
    lam, S, c = np.broadcast_arrays(np.asarray(lam, float), np.asarray(service_s, float), np.asarray(servers, float))
    if check_stat(stat) != "mean":
        return pool_wait_quantile(_PCT[stat], lam, S, c)
    rho = lam * S / np.maximum(c, 1.0)
    lam_s = np.where(rho < 1, lam, 0.0)
    one = qz.md1_mean_wait(lam_s, S)
    many = qz.mgc_mean_wait(lam_s, S, np.maximum(c, 1.0), cs2=0.0)
    return np.where(rho < 1, np.where(c == 1, one, many), np.inf)


def link_wait(stat: str, lam, busy_s) -> np.ndarray:
    """Wait statistic of a NIC (an M/D/1 server busy ``busy_s`` per request) fed at ``lam`` [s]; 0 if
    the link costs nothing."""
    lam, busy = np.broadcast_arrays(np.asarray(lam, float), np.asarray(busy_s, float))
    pos = busy > 0
    b = np.where(pos, busy, 1.0)
    if check_stat(stat) == "mean":
        rho = lam * b
        w = np.where(rho < 1, qz.md1_mean_wait(np.where(rho < 1, lam, 0.0), b), np.inf)
    else:
        w = md1_quantile_fast(_PCT[stat], lam, b)
    return np.where(pos, w, 0.0)


def queue_wait(stat: str, rate_per_s, service_s) -> np.ndarray:
    """Waiting time of a request at one prefill server, M/D/1 (Poisson arrivals, deterministic service) [s]:
    the mean or a quantile ("p50", "p90", "p99"), exact (:func:`.core.md1_wait_quantile`). ``inf`` at or above
    saturation (rate * service >= 1)."""
    check_stat(stat)
    lam = _check.real_array("rate_per_s", rate_per_s, lo=0, hi=1e9, unit="1/s")
    D = _check.real_array("service_s", service_s, lo=0, lo_open=True, hi=1e6, unit="s")
    lam, D = np.broadcast_arrays(lam, D)
    rho = lam * D
    out = np.full(lam.shape, np.inf)
    ok = rho < 1
    if stat == "mean":
        out[ok] = md1_mean_wait(lam[ok], D[ok])
    else:
        out[ok] = md1_wait_quantile(_PCT[stat], lam[ok], D[ok])
    return out


@functools.lru_cache(maxsize=8)
def _md1_table(p: float) -> tuple[np.ndarray, np.ndarray]:
    """W_p / D of M/D/1 as a function of rho alone, tabulated once per percentile from the exact
    :func:`.core.md1_wait_quantile` (dense towards rho = 1 and around the atom at rho = 1 - p)."""
    rho = np.unique(np.concatenate([1.0 - np.geomspace(1e-5, 1.0, 3000), np.linspace(0.0, 0.999, 2000),
                                    (1.0 - p) + np.linspace(-0.002, 0.002, 401)]))
    rho = rho[(rho >= 0) & (rho < 1)]
    return rho, qz.md1_wait_quantile(p, rho, 1.0)


def md1_quantile_fast(p: float, lam, service_s) -> np.ndarray:
    """Exact M/D/1 waiting-time quantile interpolated in rho (relative error < 2e-3) [s]; inf if rho >= 1."""
    rho_t, w_t = _md1_table(float(p))
    lam = np.asarray(lam, dtype=float)
    D = np.asarray(service_s, dtype=float)
    rho = lam * D
    out = np.interp(rho, rho_t, w_t) * D
    out = np.where(rho < 1, out, np.inf)
    near = (rho > rho_t[-1]) & (rho < 1)  # beyond the table: the exact series
    if np.any(near):
        lam_b, D_b = np.broadcast_arrays(lam, D)
        out = np.array(out, dtype=float)
        out[near] = qz.md1_wait_quantile(p, lam_b[near], D_b[near])
    return out


def pool_wait_quantile(p: float, lam, service_s, servers) -> np.ndarray:
    """p-quantile of the FCFS wait of ``servers`` deterministic servers fed at ``lam`` [s]: exact M/D/1
    (interpolated) for one, Allen-Cunneen M/D/c beyond; inf where unstable. Broadcasts."""
    lam = np.asarray(lam, dtype=float)
    c = np.asarray(servers, dtype=float)
    one = md1_quantile_fast(p, lam / c, service_s)  # exact (interpolated) for a single server
    many = qz.mgc_wait_quantile(p, lam, service_s, np.maximum(c, 1), cs2=0.0)
    return np.where(c == 1, one, many)


def poisson_quantile_mean(z: float, capacity) -> np.ndarray:
    """Largest mean m of a Poisson count whose normal-approximated quantile m + z sqrt(m) fits ``capacity``."""
    c = np.maximum(np.asarray(capacity, dtype=float), 0.0)
    return ((-z + np.sqrt(z * z + 4.0 * c)) / 2.0) ** 2
