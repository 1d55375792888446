"""Statistical helpers of the load-imbalance models: expected maxima of normals (no scipy dependency)."""

from __future__ import annotations

import functools
import math

import numpy as np

from ..errors import SpecError

__all__ = ["expected_max_std_normal", "expected_max_normal", "expected_max_piecewise"]

N_GRID = 33  # quadrature points for expected maxima


@functools.lru_cache(maxsize=256)
def expected_max_std_normal(n: int) -> float:
    """E[max of n i.i.d. standard normals], z_n (MODELS.md §3.3).

    z_1 = 0, z_2 = 1/sqrt(pi) = 0.5642, z_4 = 1.0294, z_8 = 1.4236, z_16 = 1.7660, z_32 = 2.0697.
    (sqrt(2 ln n) overestimates at small n: 2.04 for n = 8.) Computed by quadrature of
    x * n * phi(x) * Phi(x)**(n-1) on [-12, 12].
    """
    n = int(n)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
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
    :func:`expected_max_std_normal` (MODELS §4.8); with sd = 0 it is max(mean).
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


