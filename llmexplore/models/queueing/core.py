"""Queueing layer of the prefill/decode disaggregation model: waiting time, TTFT percentiles (docs/models.md §4.5).

A prefill instance serves one prompt at a time, first come first served (FCFS), so a request's time to first
token is ``TTFT = W + S + transfer``: waiting time W in the queue, its own prefill service time S and the
exposed KV transfer. This module gives W for M/D/1 and M/G/c; :mod:`.mg1` gives it for M/G/1, and
:mod:`.fcfs_sim` simulates the same queues to check them:

* **M/D/1** (Poisson arrivals, one deterministic service time D): exact waiting-time CDF, survival function,
  quantiles and mean (:func:`md1_wait_cdf`, :func:`md1_wait_sf`, :func:`md1_wait_quantile`,
  :func:`md1_mean_wait`), DistServe's mean TTFT with intra-op speedup (:func:`distserve_mean_ttft`).
* **M/G/1** (prompt lengths vary): in :mod:`.mg1`; the Pollaczek–Khinchine mean :func:`pk_mean_wait` is here.
* **M/G/c** (c identical instances behind one FCFS queue): Erlang B/C, the Allen–Cunneen mean and an
  exponential tail with the same mean; both exact for M/M/c (``cs2 = 1``).

Conventions: rates in 1/s (``lam_per_s``), times in s, ``rho = lam * E[S] / c`` the utilisation. Every formula
broadcasts its array arguments (numpy in, numpy out). An unstable queue (``rho >= 1``) is not an error: its
waiting time is infinite, so means and quantiles are ``inf``, ``P(W <= t) = 0`` and ``P(W > t) = 1``. Bad
input (negative rate, non-positive service time, fewer than one server, probability outside [0, 1]) raises
:class:`~llmexplore.errors.SpecError` naming the argument, the value and the rule.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from ... import _check

__all__ = [
    # M/D/1
    "md1_wait_cdf", "md1_wait_sf", "md1_wait_quantile", "md1_mean_wait", "md1_tail", "md1_ttft_quantile",
    "pk_mean_wait",
    "distserve_mean_ttft",
    # M/G/c
    "erlang_b", "erlang_c", "mgc_mean_wait", "mgc_wait_sf", "mgc_wait_quantile",
]

# M/D/1 CDF: the stable Crommelin recursion is used for t/D < _MD1_SWITCH, the exact asymptotic tail beyond.
# At t/D = 40 the tail's relative error (next root of the characteristic equation) is below 1e-13 for
# rho >= 0.05 and the survival probability is below 1e-60 for smaller rho.
_MD1_SWITCH = 40
# Poisson terms (rho*tau)^j / j! with rho*tau < 1 beyond j = 21 are below 2e-20: truncate there.
_MD1_TERMS = 22
_INV_FACT = np.array([1.0 / math.factorial(j) for j in range(_MD1_TERMS + 1)])
MAX_SERVERS = 1 << 20  # servers (instances) in one queue
_ERLANG_GRID = 1 << 22  # terms of the one-pass Erlang B evaluation (servers x largest c); recursion beyond
MAX_PROMPT_TOKENS = 1 << 24  # longest prompt a distribution may reach [tokens]


# ------------------------------------------------------------------------------------------------------------
# input checks


def _first(a: np.ndarray, bad: np.ndarray):
    return float(np.asarray(a)[np.asarray(bad)].flat[0]) if np.ndim(a) else float(a)


def _num(name: str, x: ArrayLike) -> np.ndarray:
    """Numbers (+-inf allowed, NaN not)."""
    return _check.real_array(name, x, allow_inf=True, allow_empty=True)


def _rate(name: str, x: ArrayLike) -> np.ndarray:
    return _check.real_array(name, x, lo=0.0, allow_inf=True, allow_empty=True, unit="1/s")


def _positive(name: str, x: ArrayLike, unit: str = "s") -> np.ndarray:
    return _check.real_array(name, x, lo=0.0, lo_open=True, allow_empty=True, unit=unit)


def _nonneg_finite(name: str, x: ArrayLike, unit: str = "s") -> np.ndarray:
    return _check.real_array(name, x, lo=0.0, allow_empty=True, unit=unit)


def _prob(name: str, x: ArrayLike) -> np.ndarray:
    return _check.real_array(name, x, lo=0.0, hi=1.0, allow_empty=True, rule="a probability in [0, 1]")


def _servers(name: str, c: ArrayLike) -> np.ndarray:
    return _check.real_array(name, c, lo=1, hi=MAX_SERVERS, integer=True, allow_empty=True)


def _time(name: str, t: ArrayLike) -> np.ndarray:
    return _num(name, t)


def _count(name: str, n, hi: int) -> int:
    return _check.integer(name, n, lo=0, hi=hi)


# ------------------------------------------------------------------------------------------------------------
# M/D/1


def _md1_decay(rho: np.ndarray) -> np.ndarray:
    """Root y = theta*D > 0 of rho*(exp(y) - 1) = y, for 0 < rho < 1 (elementwise; other entries NaN).

    Solved as phi(y) = log(expm1(y)/y) = -log(rho): phi is increasing and convex with phi' in (1/2, 1), so
    Newton started at y0 = -2*log(rho) (where phi(y0) >= -log(rho)) descends monotonically to the root.
    """
    rho = np.asarray(rho, dtype=float)
    ok = (rho > 0) & (rho < 1)
    r = np.where(ok, rho, 0.5)
    target = -np.log(r)
    y = 2.0 * target
    for _ in range(100):
        small = y < 1e-3
        ys = np.where(small, 1.0, y)
        ym = np.minimum(ys, 20.0)
        # phi = log(expm1(y)/y): series for small y (no cancellation), log1p(expm1(y)/y - 1) for moderate y,
        # y + log1p(-e^-y) - log(y) for large y (no overflow, e.g. y ~ 700 for rho ~ 1e-300)
        phi = np.where(small, np.log1p(y / 2 + y * y / 6 + y**3 / 24 + y**4 / 120),
                       np.where(ys < 20.0, np.log1p(np.expm1(ym) / ym - 1.0),
                                ys + np.log1p(-np.exp(-ys)) - np.log(ys)))
        dphi = np.where(small, 0.5 + y / 12 - y**3 / 720, 1.0 / -np.expm1(-ys) - 1.0 / ys)
        step = (phi - target) / dphi
        y = y - step
        if np.all(np.abs(step) <= 1e-15 * np.abs(y)):
            break
    return np.where(ok, y, np.nan)


def md1_tail(lam_per_s: ArrayLike, D_s: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Exact asymptotic tail of the M/D/1 waiting time: ``P(W > t) ~ C * exp(-theta * t)`` as t -> inf.

    Parameters
    ----------
    lam_per_s : arrival rate lambda [1/s], >= 0.
    D_s : deterministic service time D [s], > 0.

    Returns
    -------
    (theta_per_s, C) : decay rate [1/s] and prefactor [-], broadcast shape. ``nan`` where rho = lam*D is 0
    or >= 1 (no tail / no stationary law).

    Notes
    -----
    theta is the positive root of the Lundberg equation ``lam * (exp(theta*D) - 1) = theta``; with
    y = theta*D this is ``rho*(e^y - 1) = y``. The prefactor is the Cramér–Lundberg constant for claims of
    size D, ``C = (1 - rho) / (lam*D*e^(theta*D) - 1) = (1 - rho) / (y - (1 - rho))`` (as rho*e^y = rho + y).
    It is also the residue of the waiting-time transform ``(1-rho)s / (s - lam(1 - e^(-sD)))`` at its pole
    s = -theta; the other poles are complex with real part <= -(theta + 0.42/D) for rho >= 0.01 (Lambert-W
    branches), so the relative error of the one-term tail is below 1e-13 from t/D = 40 (rho >= 0.05).
    Checks: C -> 1 and y -> 2(1 - rho) as rho -> 1 (heavy traffic).

    References
    ----------
    Asmussen, *Applied Probability and Queues* (2nd ed., 2003), Ch. XIII (Cramér–Lundberg approximation).
    """
    lam = _rate("lam_per_s", lam_per_s)
    D = _positive("D_s", D_s)
    rho = lam * D
    y = _md1_decay(rho)
    C = (1.0 - rho) / (y - (1.0 - rho))
    return y / D, C


def _md1_table(rho_u: np.ndarray, kmax: int) -> np.ndarray:
    """F_k = P(W <= k*D) for k = 0..kmax, one row per rho (0 <= rho < 1), by the Crommelin recursion.

    From F((k-1)D) = e^-rho * sum_{j=0}^{k-1} rho^j/j! F((k-j)D):
    ``F_k = e^rho F_{k-1} - sum_{j=1}^{k-1} rho^j/j! F_{k-j}``, F_0 = 1 - rho. The characteristic roots of
    this convolution recurrence are z = 1 and z = e^{s_m D} with |z| < 1, so round-off does not grow
    exponentially (unlike Erlang's alternating series); the error is ~1e-14 at k = 40.
    """
    rho_u = np.asarray(rho_u, dtype=float)
    F = np.empty((rho_u.size, kmax + 1))
    F[:, 0] = 1.0 - rho_u
    pw = rho_u[:, None] ** np.arange(_MD1_TERMS + 1) * _INV_FACT  # rho^j / j!
    e_rho = np.exp(rho_u)
    for k in range(1, kmax + 1):
        acc = e_rho * F[:, k - 1]
        for j in range(1, min(k - 1, _MD1_TERMS) + 1):
            acc = acc - pw[:, j] * F[:, k - j]
        F[:, k] = acc
    return F


def _md1_cdf_rec(n: np.ndarray, rho: np.ndarray, idx: np.ndarray, table: np.ndarray) -> np.ndarray:
    """P(W <= n*D) for 0 <= n < _MD1_SWITCH (flat arrays); ``table[idx]`` is the F_k row of each element.

    Crommelin's form: for (k-1)D <= t < kD and tau = k - t/D in (0, 1],
    ``P(W <= t) = e^(-rho tau) * sum_{j=0}^{k-1} (rho tau)^j / j! * F_{k-j}`` -- all terms positive.
    """
    k = np.floor(n).astype(np.intp) + 1
    tau = k - n
    x = rho * tau
    term = np.ones_like(x)
    s = np.zeros_like(x)
    for j in range(0, _MD1_TERMS + 1):
        use = j <= k - 1
        s = s + np.where(use, term * table[idx, np.maximum(k - j, 0)], 0.0)
        term = term * x / (j + 1)
    return np.exp(-x) * s


def _md1_prepare(n: np.ndarray, rho: np.ndarray):
    """Flatten broadcast (n, rho); build the recursion table over the distinct stable rho values."""
    n, rho = np.broadcast_arrays(n, rho)
    shape = n.shape
    n = n.ravel().astype(float)
    rho = rho.ravel().astype(float)
    stable = rho < 1.0
    rho_u, idx = np.unique(np.where(stable, rho, 0.0), return_inverse=True)
    table = _md1_table(rho_u, _MD1_SWITCH + 2)
    y = _md1_decay(rho_u)[idx]
    C = (1.0 - rho) / (y - (1.0 - rho))
    return shape, n, rho, stable, idx, table, y, C


def _md1_cdf_sf(n: ArrayLike, rho: ArrayLike):
    """(CDF, SF) of W/D at n for utilisation rho, vectorised; sf accurate to ~1e-12 relative in the tail."""
    shape, n, rho, stable, idx, table, y, C = _md1_prepare(n, rho)
    cdf = np.zeros_like(n)
    sf = np.ones_like(n)
    tail = stable & (n >= _MD1_SWITCH) & (rho > 0)
    body = stable & (n >= 0) & (rho > 0) & ~tail
    if body.any():
        f = np.minimum(_md1_cdf_rec(n[body], rho[body], idx[body], table), 1.0)
        cdf[body] = f
        sf[body] = 1.0 - f
    if tail.any():
        s = C[tail] * np.exp(-y[tail] * n[tail])
        sf[tail] = s
        cdf[tail] = 1.0 - s
    zero_load = stable & (rho == 0) & (n >= 0)  # no arrivals: W = 0
    cdf[zero_load], sf[zero_load] = 1.0, 0.0
    return cdf.reshape(shape), sf.reshape(shape)


def md1_wait_cdf(t_s: ArrayLike, lam_per_s: ArrayLike, D_s: ArrayLike) -> np.ndarray:
    """Exact M/D/1 waiting-time CDF ``P(W <= t)`` (FCFS), accurate to ~1e-14 absolute for every t.

    Parameters
    ----------
    t_s : waiting time t [s]; negative t gives 0.
    lam_per_s : Poisson arrival rate lambda [1/s], >= 0.
    D_s : deterministic service time D [s], > 0.

    Returns
    -------
    P(W <= t), broadcast shape of the three arguments. 0 where rho = lam*D >= 1 (W is infinite).

    Notes
    -----
    Erlang (1909): ``P(W <= t) = (1-rho) * sum_{k=0}^{floor(t/D)} [lam(kD - t)]^k / k! * exp(-lam(kD - t))``,
    with an atom ``P(W = 0) = 1 - rho``. That alternating series loses ~log10(e^{lam t}) digits: in double
    precision its error is already 7e-8 at rho = 0.85, t/D = 20 and it is useless by t/D = 35. This function
    evaluates the same function through Crommelin's positive form (see ``_md1_table``; derivation: the FCFS
    customer arriving at 0 has left by x + D iff N(-tau) + A(-tau, 0] <= k and A(-tau, 0] <= k - 1, with N the
    number in system and A Poisson arrivals, iterated over the M/D/1 identity
    N(t+D) = (N(t)-1)^+ + A(t, t+D]),
    which is stable, for t/D < 40, and through the exact asymptotic tail ``1 - C exp(-theta t)`` of
    :func:`md1_tail` beyond, where the two agree to < 1e-13.

    References
    ----------
    Erlang, A. K. (1909); Crommelin, C. D. (1932) "Delay probability formulas when the holding times are
    constant", P.O. Electr. Engr. J. 25; Franx, G. J. (2001) "A simple solution for the M/D/c waiting time
    distribution", Oper. Res. Lett. 29(5):221-229.
    """
    lam = _rate("lam_per_s", lam_per_s)
    D = _positive("D_s", D_s)
    t = _time("t_s", t_s)
    return _md1_cdf_sf(t / D, lam * D)[0]


def md1_wait_sf(t_s: ArrayLike, lam_per_s: ArrayLike, D_s: ArrayLike) -> np.ndarray:
    """M/D/1 survival function ``P(W > t)`` [-]; same arguments and accuracy as :func:`md1_wait_cdf`.

    For t/D >= 40 it is the exact asymptotic tail, so tiny tail probabilities keep their relative accuracy
    (~1e-13); below that it is ``1 - P(W <= t)`` (absolute accuracy ~1e-14). 1 where rho >= 1.
    """
    lam = _rate("lam_per_s", lam_per_s)
    D = _positive("D_s", D_s)
    t = _time("t_s", t_s)
    return _md1_cdf_sf(t / D, lam * D)[1]


def md1_wait_quantile(p: ArrayLike, lam_per_s: ArrayLike, D_s: ArrayLike) -> np.ndarray:
    """p-quantile of the M/D/1 waiting time [s]: the smallest t with ``P(W <= t) >= p``.

    Parameters
    ----------
    p : probability in [0, 1] (0.99 for p99).
    lam_per_s : arrival rate [1/s], >= 0.
    D_s : service time [s], > 0.

    Returns
    -------
    W_p [s], broadcast shape. 0 where p <= 1 - rho (the atom ``P(W = 0) = 1 - rho``); inf where p = 1 or
    rho >= 1.

    Notes
    -----
    Inverts :func:`md1_wait_cdf`: in the asymptotic region (W_p >= 40 D) by the closed form
    ``log(C / (1 - p)) / theta``; otherwise the unit interval [k, k+1) (in units of D) holding the quantile
    is found from the table F_k = P(W <= kD) and bisected 56 times (error < 2^-56 D).
    """
    pp = _prob("p", p)
    lam = _rate("lam_per_s", lam_per_s)
    D = _positive("D_s", D_s)
    rho = lam * D
    pp, rho, D = np.broadcast_arrays(pp, rho, D)
    shape = pp.shape
    pf, rf, Df = pp.ravel(), rho.ravel(), D.ravel()
    _, _, _, stable, idx, table, y, C = _md1_prepare(np.zeros_like(rf), rf)
    out = np.zeros_like(pf)
    out[~stable | (pf >= 1.0)] = np.inf
    need = stable & (pf < 1.0) & (pf > 1.0 - rf)
    with np.errstate(divide="ignore", invalid="ignore"):
        n_tail = np.log(C / (1.0 - pf)) / y
    tail = need & (n_tail >= _MD1_SWITCH)
    out[tail] = n_tail[tail]
    body = need & ~tail
    if body.any():
        p_b, r_b, i_b = pf[body], rf[body], idx[body]
        # table[i, k] = F(kD); the quantile lies in [k, k+1) with k = #{m >= 0 : F_m < p} - 1
        k = np.sum(table[i_b, :_MD1_SWITCH + 1] < p_b[:, None], axis=1) - 1
        lo = k.astype(float)
        hi = lo + 1.0
        for _ in range(56):
            mid = 0.5 * (lo + hi)
            below = _md1_cdf_rec(mid, r_b, i_b, table) < p_b
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
        out[body] = hi
    return (out * Df).reshape(shape)


def md1_mean_wait(lam_per_s: ArrayLike, D_s: ArrayLike) -> np.ndarray:
    """Mean M/D/1 waiting time [s]: ``E[W] = lam * D^2 / (2 (1 - rho))``, rho = lam*D; inf where rho >= 1.

    Pollaczek–Khinchine with E[S^2] = D^2; DistServe (arXiv 2401.09670, §3.1) uses exactly this.
    """
    lam = _rate("lam_per_s", lam_per_s)
    D = _positive("D_s", D_s)
    return pk_mean_wait(lam, D, D * D)


def pk_mean_wait(lam: np.ndarray, m1: np.ndarray, m2: np.ndarray) -> np.ndarray:
    """Pollaczek-Khinchine mean wait of M/G/1 [s]: lam E[S^2] / (2 (1 - rho)), inf where rho = lam E[S] >= 1.

    Unchecked arrays (callers validate): rate [1/s], E[S] [s], E[S^2] [s^2].
    """
    rho = lam * m1
    with np.errstate(divide="ignore", invalid="ignore"):
        w = lam * m2 / (2.0 * (1.0 - rho))
    return np.where(rho < 1.0, w, np.inf)


def md1_ttft_quantile(p: ArrayLike, lam_per_s: ArrayLike, D_s: ArrayLike, *,
                      transfer_s: ArrayLike = 0.0) -> np.ndarray:
    """p-quantile of TTFT on one M/D/1 prefill instance [s]: ``W_p + D + transfer`` (exact: S is constant).

    ``transfer_s`` is the exposed KV-transfer (plus router) time [s], added as a constant (docs/models.md §4.5).
    """
    tr = _nonneg_finite("transfer_s", transfer_s)
    return md1_wait_quantile(p, lam_per_s, D_s) + np.asarray(D_s, dtype=float) + tr


def distserve_mean_ttft(lam_per_s: ArrayLike, D_s: ArrayLike, *, speedup: ArrayLike = 1.0) -> np.ndarray:
    """DistServe's mean TTFT of one prefill instance with intra-op (tensor) parallelism [s].

    ``Avg_TTFT = D/K + lam * D^2 / (2 K (K - lam D))``: an M/D/1 queue whose service time D (single GPU) is
    shortened K-fold by intra-op parallelism (K = ``speedup`` >= 1; in practice K < number of GPUs because of
    communication). ``speedup = 1`` gives ``D + md1_mean_wait``. inf where lam*D >= K.

    References
    ----------
    Zhong et al., "DistServe", OSDI 2024 (arXiv 2401.09670), §3.1, Eq. (2).
    """
    lam = _rate("lam_per_s", lam_per_s)
    D = _positive("D_s", D_s)
    K = _positive("speedup", speedup, unit="-")
    Dk = D / K                                                     # effective service time [s]
    return Dk + md1_mean_wait(lam, Dk)


# ------------------------------------------------------------------------------------------------------------
# M/G/c


def erlang_b(servers: ArrayLike, offered_load: ArrayLike) -> np.ndarray:
    """Erlang B blocking probability B(c, a) [-], vectorised; stable for c up to thousands.

    Parameters
    ----------
    servers : c, integer >= 1.
    offered_load : a = lam / mu = lam E[S] [Erlang], >= 0.

    Notes
    -----
    ``B(c, a) = (a^c / c!) / sum_{k<=c} a^k / k!``, evaluated in log space (log-sum-exp over k, log c! as a
    cumulative sum of logs) in one vectorised pass, so it neither overflows nor loops over c. Beyond
    ``_ERLANG_GRID`` terms in all it falls back to the recursion ``B(0, a) = 1``, ``B(k, a) = a B(k-1, a) /
    (k + a B(k-1, a))`` (every step a ratio of positive numbers); the two agree to ~1e-13 (tested).
    """
    return _erlang_b(_servers("servers", servers), _rate("offered_load", offered_load))


def _erlang_b(c: np.ndarray, a: np.ndarray) -> np.ndarray:
    """:func:`erlang_b` on validated arrays."""
    c, a = np.broadcast_arrays(c, a)
    cmax = int(c.max(initial=1))
    if c.size * (cmax + 1) > _ERLANG_GRID:
        return _erlang_b_recursion(c, a, cmax)
    k = np.arange(cmax + 1.0)
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(k[1:]))])
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = k * np.log(a)[..., None] - log_fact  # log(a^k / k!)
    terms[..., 0] = 0.0  # a^0 / 0! = 1, also for a = 0
    terms = np.where(k <= c[..., None], terms, -np.inf)
    top = terms.max(-1, keepdims=True)
    log_sum = top[..., 0] + np.log(np.exp(terms - top).sum(-1))
    last = np.take_along_axis(terms, c.astype(np.intp)[..., None], -1)[..., 0]
    return np.exp(last - log_sum)


def _erlang_b_recursion(c: np.ndarray, a: np.ndarray, cmax: int) -> np.ndarray:
    """The recursion over k = 1..c of each element, on the elements sorted by c so that step k touches only
    those with c >= k (a suffix): work sum(c), not size x max(c) (a 4,096-GPU plan has c = 1..4,096)."""
    flat_c = c.ravel()
    order = np.argsort(flat_c, kind="stable")
    cs = flat_c[order]
    av = a.ravel()[order].astype(float)
    B = np.ones(cs.shape)
    starts = np.searchsorted(cs, np.arange(1, cmax + 1), side="left")  # first element with c >= k
    for k, i in enumerate(starts, start=1):
        if i >= B.size:
            break
        aB = av[i:] * B[i:]
        B[i:] = aB / (k + aB)
    out = np.empty(B.shape)
    out[order] = B
    return out.reshape(c.shape)


def erlang_c(servers: ArrayLike, offered_load: ArrayLike) -> np.ndarray:
    """Erlang C: probability that an arrival waits in M/M/c, ``C = B / (1 - rho (1 - B))``, rho = a/c [-].

    1 where rho >= 1 (everyone waits). Uses :func:`erlang_b`, so it is stable for large c.
    """
    return _erlang_c(_servers("servers", servers), _rate("offered_load", offered_load))


def _erlang_c(c: np.ndarray, a: np.ndarray) -> np.ndarray:
    """:func:`erlang_c` on validated arrays."""
    B = _erlang_b(c, a)
    rho = a / c
    return np.where(rho < 1.0, B / (1.0 - rho * (1.0 - B)), 1.0)


def _mgc_common(lam_per_s, mean_service_s, servers, cs2):
    lam = _rate("lam_per_s", lam_per_s)
    m1 = _positive("mean_service_s", mean_service_s)
    c = _servers("servers", servers)
    v = _nonneg_finite("cs2", cs2, unit="-")
    a = lam * m1                                                   # offered load [Erlang]
    pw = _erlang_c(c, a)                                           # P(wait) for M/M/c
    gap = c / m1 - lam                                             # c mu - lam [1/s]
    return lam, m1, c, v, a, pw, gap


def mgc_mean_wait(lam_per_s: ArrayLike, mean_service_s: ArrayLike, servers: ArrayLike, *,
                  cs2: ArrayLike = 1.0) -> np.ndarray:
    """Allen–Cunneen mean waiting time of M/G/c [s]: ``E[W] ~ C(c, a) / (c mu - lam) * (1 + cs2) / 2``.

    Parameters
    ----------
    lam_per_s : arrival rate to the shared FCFS queue [1/s], >= 0.
    mean_service_s : E[S] = 1/mu [s], > 0.
    servers : c identical instances, integer >= 1.
    cs2 : squared coefficient of variation of service, Var[S]/E[S]^2 (0 deterministic, 1 exponential).

    Returns
    -------
    E[W] [s]; inf where rho = lam E[S] / c >= 1.

    Notes
    -----
    ``C(c, a)/(c mu - lam)`` is the exact M/M/c mean; the factor ``(c_a^2 + c_s^2)/2`` with c_a^2 = 1
    (Poisson) scales it to general service. Exact for M/M/c (cs2 = 1) and for M/G/1 (it reduces to
    Pollaczek–Khinchine); an approximation otherwise. Measured against simulation (see
    tests/unit/models/queueing/test_queueing.py): M/D/c, c = 2/4/8, too low by 1/2/4 % at rho = 0.85, 3/6/10 % at
    rho = 0.7 and 6/12/21 % at rho = 0.5; lognormal prompts (cs2 ~1.56), c = 2/4, too high by 2/5 % at
    rho = 0.85 and 4/10 % at rho = 0.7.

    References
    ----------
    Allen, *Probability, Statistics and Queueing Theory* (1990), §6; Whitt (1993) "Approximations for the
    GI/G/m queue", Production and Operations Management 2(2).
    """
    lam, m1, c, v, a, pw, gap = _mgc_common(lam_per_s, mean_service_s, servers, cs2)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = pw / gap * (1.0 + v) / 2.0
    return np.where(a < c, w, np.inf)


def mgc_wait_sf(t_s: ArrayLike, lam_per_s: ArrayLike, mean_service_s: ArrayLike, servers: ArrayLike, *,
                cs2: ArrayLike = 1.0) -> np.ndarray:
    """M/G/c waiting-time tail ``P(W > t) ~ C(c, a) exp(-(c mu - lam) t * 2 / (1 + cs2))`` [-].

    Exact for M/M/c (cs2 = 1), where the conditional wait given W > 0 is exponential with rate c mu - lam.
    Otherwise it keeps the Erlang-C probability of waiting and takes the conditional wait exponential with the
    Allen–Cunneen mean, so its integral equals :func:`mgc_mean_wait` (for c = 1 it is :func:`.mg1.mg1_wait_sf`).
    The exponential conditional wait is the heavy-traffic limit for GI/G/c (Köllerström 1974); at moderate
    load it is an approximation. Measured p99 error (tests/unit/models/queueing/test_queueing.py): M/D/c, c = 2/4/8,
    +5/+5/+4 % at rho = 0.85, +8/+6/+1 % at rho = 0.7, +12/0/-24 % at rho = 0.5; lognormal prompts
    (cs2 ~1.56), c = 2/4: -8/-6 % at rho = 0.85, -13/-4 % at rho = 0.7 (too low for right-skewed service).
    1 where rho >= 1 or t < 0.
    """
    t = _time("t_s", t_s)
    lam, m1, c, v, a, pw, gap = _mgc_common(lam_per_s, mean_service_s, servers, cs2)
    with np.errstate(over="ignore", invalid="ignore"):
        sf = pw * np.exp(-gap * np.maximum(t, 0.0) * 2.0 / (1.0 + v))
    return np.where((a >= c) | (t < 0), 1.0, sf)


def mgc_wait_quantile(p: ArrayLike, lam_per_s: ArrayLike, mean_service_s: ArrayLike, servers: ArrayLike, *,
                      cs2: ArrayLike = 1.0) -> np.ndarray:
    """p-quantile [s] of :func:`mgc_wait_sf`: ``(1 + cs2) / (2 (c mu - lam)) * log(C(c, a) / (1 - p))``.

    0 where p <= 1 - C(c, a); inf where p = 1 or rho >= 1. Exact for M/M/c (cs2 = 1).
    """
    pp = _prob("p", p)
    lam, m1, c, v, a, pw, gap = _mgc_common(lam_per_s, mean_service_s, servers, cs2)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = (1.0 + v) / (2.0 * gap) * np.log(pw / (1.0 - pp))
    q = np.where(pp <= 1.0 - pw, 0.0, q)
    return np.where((a >= c) | (pp >= 1.0), np.inf, q)
