"""Small statistical helpers used by the load-imbalance models (no scipy dependency)."""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["expected_max_std_normal"]


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
