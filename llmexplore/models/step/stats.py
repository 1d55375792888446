"""Statistical helpers of the load-imbalance models (no scipy dependency).

* expected maxima of independent normals (closed form for identical ones, quadrature otherwise);
* conditional Poisson sampling (CPS): the maximum-entropy law of a k-subset with given inclusion
  probabilities (Hajek 1964), through elementary symmetric polynomials: its odds, inclusion probabilities
  and a sequential sampler.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ... import _check
from ...errors import SpecError

__all__ = ["check_experts_k", "distinct_ranks_uniform",
           "expected_max_std_normal", "expected_max_normal", "expected_max_piecewise", "poly_mul_linear", "poly_mul",
           "esp_suffix", "cps_inclusion", "cps_odds", "cps_sample", "PI_MAX"]

N_GRID = 33  # quadrature points for expected maxima


@functools.lru_cache(maxsize=256)
def expected_max_std_normal(n: int) -> float:
    """E[max of n i.i.d. standard normals], z_n (docs/models.md §3.3).

    z_1 = 0, z_2 = 1/sqrt(pi) = 0.5642, z_4 = 1.0294, z_8 = 1.4236, z_16 = 1.7660, z_32 = 2.0697.
    (sqrt(2 ln n) overestimates at small n: 2.04 for n = 8.) Computed by quadrature of
    x * n * phi(x) * Phi(x)**(n-1) on [-12, 12].
    """
    n = _check.integer("n", n, lo=1, hi=1 << 20)
    if n == 1:
        return 0.0
    x = np.linspace(-12.0, 12.0, 24001)
    phi = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    cdf = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x]))
    integrand = x * n * phi * cdf ** (n - 1)
    return float(np.sum((integrand[1:] + integrand[:-1]) * 0.5 * np.diff(x)))


# ---- expected maxima of independent normals ----------------------------------------------------------------
@functools.cache
def _cdf_table() -> tuple[np.ndarray, float, float]:
    """Phi on [-9, 9] every 1/256 (math.erfc): linear interpolation error < 5e-7."""
    z = np.arange(-9 * 256, 9 * 256 + 1) / 256.0
    return np.array([0.5 * math.erfc(-v / math.sqrt(2.0)) for v in z]), -9.0, 256.0


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF by table interpolation (absolute error < 5e-7; 0 or 1 beyond |z| = 9)."""
    table, z0, per = _cdf_table()
    u = (np.clip(z, z0, -z0) - z0) * per
    i = np.minimum(u.astype(np.intp), table.size - 2)
    f = u - i
    return table[i] + f * (table[i + 1] - table[i])


def expected_max_piecewise(mu, sd, a_f, m0, a_m, *, n_grid: int = N_GRID, chunk: int = 1 << 21):
    """E[max_r h_r(X_r)] for independent X_r ~ N(mu_r, sd_r) and h_r(X) = max(a_f X, m0_r + a_m X).

    ``mu, sd, m0`` have shape [..., R] (broadcast); ``a_f, a_m`` > 0 are scalars or broadcast likewise.
    Quadrature of E = L + int_L^U (1 - prod_r P(h_r(X_r) <= x)) dx on ``n_grid`` points between
    L = max_r h_r(mu_r - 6 sd_r) and U = max_r h_r(mu_r + 6 sd_r).
    """
    mu, sd, a_f, m0, a_m = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (mu, sd, a_f, m0, a_m)))
    lead, R = mu.shape[:-1], mu.shape[-1]
    flat = [v.reshape(-1, R) for v in (mu, sd, a_f, m0, a_m)]
    n = flat[0].shape[0]
    out = np.empty(n)
    step = max(1, chunk // (n_grid * R))
    u = np.linspace(0.0, 1.0, n_grid)
    for s in range(0, n, step):
        m_, s_, af, b0, am = (v[s:s + step] for v in flat)
        h = lambda x: np.maximum(af * x, b0 + am * x)  # noqa: E731
        lo = h(m_ - 6.0 * s_).max(-1)
        hi = h(m_ + 6.0 * s_).max(-1)
        x = lo[:, None] + (hi - lo)[:, None] * u[None, :]  # [n, M]
        xinv = np.minimum(x[..., None] / af[:, None, :], (x[..., None] - b0[:, None, :]) / am[:, None, :])
        sdg = s_[:, None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            z = (xinv - m_[:, None, :]) / np.where(sdg > 0, sdg, 1.0)
        cdf = np.where(sdg > 0, _norm_cdf(z), (xinv >= m_[:, None, :]).astype(float))
        tail = 1.0 - cdf.prod(-1)  # P(max > x), [n, M]
        dx = (hi - lo) / (n_grid - 1)
        out[s:s + step] = lo + dx * (tail.sum(-1) - 0.5 * (tail[:, 0] + tail[:, -1]))
    return out.reshape(lead)


def expected_max_normal(mean, sd, axis: int = -1) -> np.ndarray:
    """Expected maximum of independent normals N(mean_i, sd_i^2) along ``axis``.

    Quadrature of E[max] = L + int_L^U (1 - prod_i Phi((x - mean_i)/sd_i)) dx (33 points over +-6 sd;
    error < 1e-5 sd). With equal means and sds it equals mean + sd z_n, z_n =
    :func:`expected_max_std_normal` (docs/models.md §4.8); with sd = 0 it is max(mean).
    """
    m = np.moveaxis(np.asarray(mean, dtype=float), axis, -1)
    s = np.moveaxis(np.asarray(sd, dtype=float), axis, -1)
    m, s = np.broadcast_arrays(m, s)
    if np.any(s < 0) or not np.all(np.isfinite(s)):
        raise SpecError("sd must be finite and >= 0")
    # exchangeable items (all means and sds equal): closed form mean + sd z_n; quadrature for the rest
    same = np.all(m == m[..., :1], axis=-1) & np.all(s == s[..., :1], axis=-1)
    out = m[..., 0] + s[..., 0] * expected_max_std_normal(m.shape[-1])
    if not np.all(same):
        out = np.array(out, dtype=float)
        out[~same] = expected_max_piecewise(m[~same], s[~same], 1.0, 0.0, 1.0)
    return out


# ---- conditional Poisson sampling ------------------------------------------------------------------------
PI_MAX = 1.0 - 1e-12  # inclusion probabilities are clipped here before forming odds pi/(1 - pi)


def poly_mul_linear(c: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Multiply truncated polynomials c (coefficients on the last axis) by (1 + a t)."""
    out = c.copy()
    out[..., 1:] += a[..., None] * c[..., :-1]
    return out


def poly_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Product of truncated polynomials (same degree), coefficients on the last axis."""
    K = a.shape[-1]
    out = np.zeros(np.broadcast_shapes(a.shape, b.shape))
    for i in range(K):
        out[..., i:] += a[..., i:i + 1] * b[..., :K - i]
    return out


def esp_suffix(o: np.ndarray, k: int) -> np.ndarray:
    """S[..., i, j] = e_j(o_i, ..., o_{E-1}) for i = 0..E, j = 0..k (elementary symmetric polynomials)."""
    E = o.shape[-1]
    S = np.zeros(o.shape[:-1] + (E + 1, k + 1))
    S[..., E, 0] = 1.0
    for i in range(E - 1, -1, -1):
        S[..., i, :] = S[..., i + 1, :]
        S[..., i, 1:] += o[..., i, None] * S[..., i + 1, :-1]
    return S


def cps_inclusion(o: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Inclusion probabilities of CPS with odds o, and the suffix table: pi_e = o_e e_{k-1}(o_-e) / e_k(o)."""
    E = o.shape[-1]
    S = esp_suffix(o, k)
    pre = np.zeros(o.shape[:-1] + (k + 1,))
    pre[..., 0] = 1.0
    loo = np.empty(o.shape)  # e_{k-1}(o without e)
    for e in range(E):
        loo[..., e] = (pre[..., :k] * S[..., e + 1, :k][..., ::-1]).sum(-1)  # sum_j pre_j S_{e+1, k-1-j}
        pre = poly_mul_linear(pre, o[..., e])
    return o * loo / S[..., 0, k, None], S


def cps_odds(pi: np.ndarray, k: int, *, tol: float = 1e-10,
              max_iter: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """CPS odds whose inclusion probabilities equal ``pi`` (fixed point on logits); returns (odds, suffix)."""
    target = np.clip(pi, 1e-300, PI_MAX)
    logit_t = np.log(target) - np.log1p(-target)
    lo = logit_t.copy()
    for _ in range(max_iter):
        o = np.exp(lo - lo.max(-1, keepdims=True))
        cur, S = cps_inclusion(o, k)
        cur = np.clip(cur, 1e-300, PI_MAX)
        err = logit_t - (np.log(cur) - np.log1p(-cur))
        lo = lo + err
        if np.max(np.abs(cur - target)) < tol:
            break
    o = np.exp(lo - lo.max(-1, keepdims=True))
    return o, esp_suffix(o, k)


def cps_sample(S: np.ndarray, o: np.ndarray, k: int, rows: int, rng) -> np.ndarray:
    """Draw ``rows`` k-sets from CPS(o) by the sequential method; returns sorted expert ids [rows, k]."""
    E = o.shape[-1]
    left = np.full(rows, k)
    chosen = np.empty((rows, k), dtype=np.int64)
    ar = np.arange(rows)
    for i in range(E):
        active = left > 0
        j = np.maximum(left, 1)
        prob = np.where(active, o[i] * S[i + 1, j - 1] / S[i, j], 0.0)
        take = rng.random(rows) < prob
        if np.any(take):
            chosen[ar[take], k - left[take]] = i
            left = left - take
    return chosen


# ---- routing combinatorics shared by the decode step and the MoE wing -------------------------------------
def check_experts_k(n_experts, k) -> tuple[int, int]:
    """(E, k) as ints: SpecError unless both are integers >= 1 and k <= E."""
    for name, v in (("n_experts", n_experts), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise SpecError(f"{name} must be an integer >= 1, got {v!r}")
    if k > n_experts:
        raise SpecError(f"k (experts per token, {k}) must be <= n_experts ({n_experts})")
    return int(n_experts), int(k)


def distinct_ranks_uniform(n_experts: int, k: int, ranks) -> np.ndarray:
    """E[d], distinct EP ranks among a token's k experts, uniform routing (docs/models.md §4.8).

    E[d] = R (1 - C(E - E/R, k) / C(E, k)) for R ranks holding E/R experts each (broadcasts over ``ranks``).
    DeepSeek-V3 (E = 256, k = 8): 5.29 for R = 8, 6.52 for R = 16, and k = 8 for R = E = 256.
    """
    E, k = check_experts_k(n_experts, k)
    R = np.asarray(ranks)
    if np.any(R < 1) or np.any(E % R):
        raise SpecError(f"ranks must divide n_experts ({E}), got {R}")
    m = E / R
    # C(E - m, k) / C(E, k) = prod_{i<k} (E - m - i) / (E - i)
    i = np.arange(k)
    ratio = np.prod(np.maximum(E - m[..., None] - i, 0.0) / (E - i), axis=-1)
    return R * (1.0 - ratio)
