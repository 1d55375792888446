"""M/G/1: the prefill queue of one instance when prompt lengths vary (docs/models.md §4.5).

Poisson arrivals at rate lam, one server, FCFS, service S with a general distribution (prompt lengths vary, so
prefill times do). Provided here:

* the Pollaczek-Khinchine mean wait (exact) and the two-moment exponential tail of the wait (an
  approximation, measured 9-18 % low at p99 for lognormal prompts: prefer the next two);
* the Cramer-Lundberg tail ``P(W > t) ~ C exp(-theta t)`` for an empirical (discrete) service distribution,
  exact asymptotically;
* the exact sojourn-time (wait + own service) quantile by FFT of the Benes form of the Pollaczek-Khinchine
  formula (:func:`mg1_sojourn_quantile_fft`);
* the service laws that make the queue M/G/1: lognormal prompt lengths (:func:`lognormal_prompt_pmf`) and a
  quadratic prefill time (:func:`prefill_service_s`).

Conventions and input checks as in :mod:`.core`; :mod:`.fcfs_sim` checks these against simulations.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from ...errors import SpecError
from .core import _count, _first, _nonneg_finite, _positive, _prob, _rate, _time, pk_mean_wait

#: longest prompt of a prompt-length distribution [tokens]: the pmf holds one probability per length, so this
#: bounds its arrays (32 MB each) before anything is allocated
MAX_PMF_TOKENS = 1 << 22

__all__ = ["MAX_PMF_TOKENS", "mg1_mean_wait", "mg1_wait_sf", "mg1_wait_quantile", "mg1_lundberg",
           "mg1_wait_sf_lundberg",
           "mg1_wait_quantile_lundberg", "mg1_sojourn_quantile_fft", "lognormal_prompt_pmf", "prefill_service_s"]


# ------------------------------------------------------------------------------------------------------------
# M/G/1


def mg1_mean_wait(lam_per_s: ArrayLike, mean_service_s: ArrayLike, service_second_moment_s2: ArrayLike
                  ) -> np.ndarray:
    """Pollaczek–Khinchine mean waiting time of M/G/1 [s]: ``E[W] = lam E[S^2] / (2 (1 - rho))``.

    Parameters
    ----------
    lam_per_s : arrival rate [1/s], >= 0.
    mean_service_s : E[S] [s], > 0.
    service_second_moment_s2 : E[S^2] [s^2], >= E[S]^2.

    Returns
    -------
    E[W] [s]; inf where rho = lam E[S] >= 1. Exact for any service distribution (FCFS).
    """
    lam = _rate("lam_per_s", lam_per_s)
    m1 = _positive("mean_service_s", mean_service_s)
    m2 = _positive("service_second_moment_s2", service_second_moment_s2, unit="s^2")
    if (m2 < m1 * m1 * (1 - 1e-12)).any():
        bad = m2 < m1 * m1 * (1 - 1e-12)
        raise SpecError(f"service_second_moment_s2 must be >= mean_service_s**2, got "
                        f"{_first(np.broadcast_to(m2, bad.shape), bad)}")
    return pk_mean_wait(lam, m1, m2)


def mg1_wait_sf(t_s: ArrayLike, lam_per_s: ArrayLike, mean_service_s: ArrayLike,
                service_second_moment_s2: ArrayLike) -> np.ndarray:
    """Two-moment exponential tail of the M/G/1 waiting time: ``P(W > t) ~ rho exp(-rho t / E[W])`` [-].

    It keeps the exact ``P(W > 0) = rho`` and the exact Pollaczek–Khinchine mean (E[W] of
    :func:`mg1_mean_wait`); the conditional wait given W > 0 is taken exponential, which is exact for M/M/1
    and the heavy-traffic limit of M/G/1 (Kingman). It is the ``c = 1`` case of :func:`mgc_wait_sf`. For
    prompt mixes it is only an approximation, and it tends to *underestimate* p99 (lognormal prompts,
    cs2 ~1.5: -25 % at rho = 0.5, -9 % at rho = 0.85); :func:`mg1_wait_sf_lundberg` is within a few % there.
    Returns 1 where rho >= 1, 1 for t < 0.
    """
    t = _time("t_s", t_s)
    lam = _rate("lam_per_s", lam_per_s)
    rho = lam * _positive("mean_service_s", mean_service_s)
    ew = mg1_mean_wait(lam, mean_service_s, service_second_moment_s2)
    with np.errstate(divide="ignore", invalid="ignore"):
        sf = rho * np.exp(-rho * np.maximum(t, 0.0) / ew)
    sf = np.where(rho > 0, sf, 0.0)
    return np.where((rho >= 1.0) | (t < 0), 1.0, sf)


def mg1_wait_quantile(p: ArrayLike, lam_per_s: ArrayLike, mean_service_s: ArrayLike,
                      service_second_moment_s2: ArrayLike) -> np.ndarray:
    """p-quantile [s] of the exponential M/G/1 tail of :func:`mg1_wait_sf`: ``(E[W]/rho) log(rho / (1 - p))``.

    0 where p <= 1 - rho, inf where p = 1 or rho >= 1.
    """
    pp = _prob("p", p)
    lam = _rate("lam_per_s", lam_per_s)
    rho = lam * _positive("mean_service_s", mean_service_s)
    ew = mg1_mean_wait(lam, mean_service_s, service_second_moment_s2)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = ew / rho * np.log(rho / (1.0 - pp))
    q = np.where(pp <= 1.0 - rho, 0.0, q)
    return np.where((rho >= 1.0) | (pp >= 1.0), np.inf, q)


def _logsumexp_rows(z: np.ndarray) -> np.ndarray:
    m = np.max(z, axis=-1, keepdims=True)
    return (m + np.log(np.sum(np.exp(z - m), axis=-1, keepdims=True)))[..., 0]


def mg1_lundberg(lam_per_s: ArrayLike, service_values_s: ArrayLike, weights: ArrayLike | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Cramér–Lundberg tail of the M/G/1 waiting time for a discrete service distribution.

    ``P(W > t) ~ C exp(-theta t)`` as t -> inf, exact asymptotically for any service law with a finite
    moment generating function near theta -- in particular for service times of bounded prompt lengths given
    as samples or as a histogram (:func:`lognormal_prompt_pmf`).

    Parameters
    ----------
    lam_per_s : arrival rate [1/s], >= 0, any shape.
    service_values_s : service-time support points or samples [s], 1-D, > 0.
    weights : probabilities of the support points (normalised here); None = equally likely samples.

    Returns
    -------
    (theta_per_s, C), each shaped like ``lam_per_s``; nan where rho >= 1 or lam = 0.

    Notes
    -----
    theta > 0 solves ``lam (E[e^(theta S)] - 1) = theta``; ``C = (1 - rho) / (lam E[S e^(theta S)] - 1)``.
    Solved as ``h(theta) = log(1 + theta/lam) - log E[e^(theta S)] = 0`` (h concave, h(0) = 0), by Newton from
    ``theta_0 = 2 (1 - rho) / (lam E[S^2]) = 1/E[W]`` where h <= 0, which descends monotonically to the root;
    log-sum-exp keeps large theta*S finite. For constant S this is :func:`md1_tail`; for exponential S it is
    the exact M/M/1 tail (theta = mu - lam, C = rho). Heavy-tailed service (untruncated lognormal) has no
    exponential tail: truncate at the context limit first.

    References
    ----------
    Asmussen, *Applied Probability and Queues* (2003), XIII.5; Abate, Choudhury, Whitt (1994) "Waiting-time
    tail probabilities in queues with long-tail service-time distributions", Queueing Systems 16.
    """
    lam = _rate("lam_per_s", lam_per_s)
    s = _positive("service_values_s", service_values_s).ravel()
    if s.size == 0:
        raise SpecError("service_values_s must hold at least one value, got an empty array")
    if weights is None:
        w = np.full(s.size, 1.0 / s.size)
    else:
        w = _nonneg_finite("weights", weights, unit="-").ravel()
        if w.size != s.size or w.sum() <= 0:
            raise SpecError(f"weights must have one entry per service value ({s.size}) and a positive sum, "
                            f"got {w.size} entries summing to {w.sum()}")
        w = w / w.sum()
    logw = np.log(np.where(w > 0, w, 1.0)) + np.where(w > 0, 0.0, -np.inf)
    m1, m2 = float(w @ s), float(w @ (s * s))
    shape = lam.shape
    lf = lam.ravel()
    ok = (lf > 0) & (lf * m1 < 1.0)
    L = np.where(ok, lf, 0.5 / m1)[:, None]
    th = 2.0 * (1.0 - L * m1) / (L * m2)                        # start: h(theta_0) <= 0
    for _ in range(200):
        z = th * s[None, :] + logw[None, :]                   # log of w_i e^{theta s_i}
        logM = _logsumexp_rows(z)[:, None]
        tilt_mean = np.sum(np.exp(z - logM) * s[None, :], axis=1, keepdims=True)   # E_theta[S]
        h = np.log1p(th / L) - logM
        dh = 1.0 / (L + th) - tilt_mean
        step = h / dh
        th = th - step
        if np.all(np.abs(step) <= 1e-14 * th):
            break
    z = th * s[None, :] + logw[None, :]
    logM = _logsumexp_rows(z)[:, None]
    tilt_mean = np.sum(np.exp(z - logM) * s[None, :], axis=1, keepdims=True)
    # lam E[S e^{theta S}] = lam M(theta) E_theta[S] = (lam + theta) E_theta[S] at the root
    C = (1.0 - L * m1) / ((L + th) * tilt_mean - 1.0)
    theta = np.where(ok, th[:, 0], np.nan).reshape(shape)
    return theta, np.where(ok, C[:, 0], np.nan).reshape(shape)


def _lundberg_terms(lam_per_s, service_values_s, weights):
    """(lam, theta, C, rho) of the Cramer-Lundberg tail for rates ``lam_per_s`` (validated)."""
    lam = _rate("lam_per_s", lam_per_s)
    s = _positive("service_values_s", service_values_s).ravel()
    theta, C = mg1_lundberg(lam, s, weights)                       # validates weights
    m1 = float(np.average(s, weights=weights)) if weights is not None else float(s.mean())
    return lam, theta, C, lam * m1


def mg1_wait_sf_lundberg(t_s: ArrayLike, lam_per_s: ArrayLike, service_values_s: ArrayLike,
                         weights: ArrayLike | None = None) -> np.ndarray:
    """M/G/1 tail ``P(W > t) ~ min(rho, C exp(-theta t))`` from :func:`mg1_lundberg` [-].

    Asymptotically exact; capped at the exact ``P(W > 0) = rho`` because at small t the one-term asymptotic
    can exceed it. Accurate for the p99 and beyond when the tail is in its exponential regime (check against
    :func:`.fcfs_sim.simulate_fcfs`). ``t_s`` broadcasts against ``lam_per_s``; 1 where rho >= 1.
    """
    t = _time("t_s", t_s)
    lam, theta, C, rho = _lundberg_terms(lam_per_s, service_values_s, weights)
    sf = np.minimum(rho, C * np.exp(-theta * np.maximum(t, 0.0)))
    sf = np.where(lam == 0, 0.0, sf)
    return np.where((rho >= 1.0) | (t < 0), 1.0, sf)


def mg1_wait_quantile_lundberg(p: ArrayLike, lam_per_s: ArrayLike, service_values_s: ArrayLike,
                               weights: ArrayLike | None = None) -> np.ndarray:
    """p-quantile [s] of :func:`mg1_wait_sf_lundberg`: ``log(C / (1 - p)) / theta``, 0 where p <= 1 - rho.

    ``p`` broadcasts against ``lam_per_s``; inf where p = 1 or rho >= 1.
    """
    pp = _prob("p", p)
    lam, theta, C, rho = _lundberg_terms(lam_per_s, service_values_s, weights)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.maximum(np.log(C / (1.0 - pp)) / theta, 0.0)
    q = np.where(pp <= 1.0 - rho, 0.0, q)
    return np.where((rho >= 1.0) | (pp >= 1.0), np.inf, q)


# ------------------------------------------------------------------------------------------------------------
# prompt-length distribution and prefill service time


_erfc = np.frompyfunc(math.erfc, 1, 1)


def _norm_cdf_sf(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    zz = np.asarray(z, dtype=float) / math.sqrt(2.0)
    return 0.5 * _erfc(-zz).astype(float), 0.5 * _erfc(zz).astype(float)


def lognormal_prompt_pmf(*, median_tokens: float, sigma: float, max_tokens: int, min_tokens: int = 1
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Exact distribution of :func:`.fcfs_sim.lognormal_prompt_tokens`: ``(tokens, prob)``, 1-D over min..max_tokens.

    ``P(k) = P(k - 1/2 <= X < k + 1/2)`` for X lognormal(log median, sigma), with the clipped mass on the two
    end points. Feed ``prefill_service_s(tokens, ...)`` and ``prob`` to :func:`.mg1.mg1_lundberg` (as weights) or
    take moments with ``np.average`` for :func:`.mg1.mg1_mean_wait` / :func:`mgc_mean_wait`.
    """
    med = float(_positive("median_tokens", median_tokens, unit="tokens"))
    sg = float(_nonneg_finite("sigma", sigma, unit="-"))
    lo = _count("min_tokens", min_tokens, MAX_PMF_TOKENS)
    hi = _count("max_tokens", max_tokens, MAX_PMF_TOKENS)
    if lo < 1 or hi < lo:
        raise SpecError(f"need 1 <= min_tokens <= max_tokens, got min_tokens={lo}, max_tokens={hi}")
    k = np.arange(lo, hi + 1, dtype=float)
    if sg == 0.0:
        p = (k == min(max(np.round(med), lo), hi)).astype(float)
        return k, p
    edges = np.concatenate([[lo - 0.5], k + 0.5])                     # bin edges in tokens
    z = (np.log(edges) - math.log(med)) / sg
    cdf, sf = _norm_cdf_sf(z)
    # mass between consecutive edges; differences of the smaller of CDF/SF keep the tails accurate
    p = np.where(z[1:] <= 0, cdf[1:] - cdf[:-1], sf[:-1] - sf[1:])
    p[0] = cdf[1]                                                   # everything below lo + 1/2
    p[-1] = sf[-2]                                                  # everything at or above hi - 1/2
    return k, p / p.sum()


def prefill_service_s(prompt_tokens: ArrayLike, *, a_s: float, b_s_per_token: float,
                      c_s_per_token2: float = 0.0) -> np.ndarray:
    """Prefill service time [s] of prompts of S tokens: ``a + b S + c S^2`` (fixed overhead, linear GEMMs,
    quadratic causal attention; fit a, b, c to the roofline prefill time). Shape of ``prompt_tokens``."""
    S = _nonneg_finite("prompt_tokens", prompt_tokens, unit="tokens")
    a = float(_nonneg_finite("a_s", a_s))
    b = float(_nonneg_finite("b_s_per_token", b_s_per_token, unit="s/token"))
    c = float(_nonneg_finite("c_s_per_token2", c_s_per_token2, unit="s/token^2"))
    out = a + b * S + c * S * S
    if (out <= 0).any():
        raise SpecError(f"service time must be > 0: a_s + b_s_per_token*S + c_s_per_token2*S^2 = 0 for "
                        f"S = {_first(S, out <= 0)}")
    return out


# ------------------------------------------------------------------------------------------------------------
# M/G/1 sojourn time, exact up to discretisation


def mg1_sojourn_quantile_fft(p: float, lam_per_s: float, service_values_s: ArrayLike,
                             weights: ArrayLike | None = None, *, cells_per_mean: int = 256,
                             tail: float = 1e-7) -> float:
    """p-quantile of the M/G/1 FCFS sojourn time T = W + S for a discrete service law [s].

    Uses the Benes form of the Pollaczek-Khinchine formula: W = sum of a geometric(rho) number of residual
    service times, so on a time grid of step h = E[S] / ``cells_per_mean`` the characteristic function of W is
    (1 - rho) / (1 - rho phi_e) with phi_e that of the equilibrium residual law f_e(x) = P(S > x) / E[S];
    T = W + S adds an independent service (FCFS: the wait does not depend on the request's own size).
    Both steps are FFT convolutions over a horizon where P(W > x) < ``tail`` (from the Cramer-Lundberg decay
    rate); masses are split linearly between neighbouring grid points so means are kept, and the result is
    exact up to about one grid step. Returns inf when rho >= 1.
    """
    lam = float(_rate("lam_per_s", lam_per_s))
    pp = float(_prob("p", p))
    s = _positive("service_values_s", service_values_s).ravel()
    w = np.full(s.size, 1.0 / s.size) if weights is None else _nonneg_finite("weights", weights, unit="-").ravel()
    w = w / w.sum()
    m1 = float(w @ s)
    rho = lam * m1
    if rho >= 1.0:
        return float("inf")
    if lam == 0.0:
        order = np.argsort(s)
        return float(s[order][np.searchsorted(np.cumsum(w[order]), pp - 1e-12)])
    theta, _ = mg1_lundberg(lam, s, w)
    h = m1 / cells_per_mean
    horizon = float(s.max()) + math.log(1.0 / tail) / float(theta) + 2 * float(s.max())
    n = 1 << int(math.ceil(math.log2(horizon / h + 1)))
    n = min(n, 1 << 22)
    # service support points split linearly between the two grid points around them (keeps E[S] exact)
    x = np.minimum(s / h, n - 2.0)
    k0 = np.floor(x).astype(int)
    frac = x - k0
    pmf_s = (np.bincount(k0, weights=w * (1 - frac), minlength=n) + np.bincount(k0 + 1, weights=w * frac,
                                                                               minlength=n))[:n]
    surv = 1.0 - np.cumsum(pmf_s)  # P(S > kh) on the grid
    cell = np.clip(surv, 0.0, None) * h / m1  # residual mass of [kh, (k+1)h), centred at (k + 1/2) h
    fe = 0.5 * cell + 0.5 * np.concatenate([[0.0], cell[:-1]])  # split between k and k+1: mean preserved
    fe /= fe.sum()
    phi_e = np.fft.rfft(fe)
    pmf_w = np.fft.irfft((1.0 - rho) / (1.0 - rho * phi_e), n)
    pmf_t = np.fft.irfft(np.fft.rfft(np.clip(pmf_w, 0.0, None)) * np.fft.rfft(pmf_s), n)
    cdf = np.cumsum(np.clip(pmf_t, 0.0, None))
    cdf /= cdf[-1]
    i = int(np.searchsorted(cdf, pp))
    return float(min(i, n - 1) * h)
