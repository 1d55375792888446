"""A small Levenberg-Marquardt least-squares solver (numpy only), shared by the step calibration
(:mod:`llmexplore.calibrate`) and the kernel-curve fit (:mod:`llmexplore.kernelfit`).

Minimises ``r(u) @ r(u)`` over an unbounded parameter vector u (callers map bounded physical parameters to
u, e.g. with a logit), with a forward-difference Jacobian and Marquardt's diagonal damping.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["levenberg_marquardt"]


def levenberg_marquardt(residuals: Callable[[np.ndarray], np.ndarray], u0, *, max_iter: int = 60,
                        h: float = 1e-4, rtol: float = 1e-10) -> dict:
    """Minimise the sum of squared ``residuals(u)`` from ``u0``.

    Returns ``u`` (solution), ``r`` (residuals there), ``jac`` (forward-difference Jacobian at the solution,
    for a covariance), ``cost`` (r @ r) and ``iterations``. Stops when a step lowers the cost by less than
    ``rtol`` relative, or when no damping makes progress.
    """
    u = np.array(u0, dtype=float)
    r = residuals(u)
    cost = float(r @ r)

    def jacobian(u, r):
        J = np.empty((r.size, u.size))
        for j in range(u.size):
            du = np.zeros_like(u)
            du[j] = h
            J[:, j] = (residuals(u + du) - r) / h
        return J

    lam, it = 1e-2, 0
    for it in range(1, max_iter + 1):
        J = jacobian(u, r)
        g, A = J.T @ r, J.T @ J
        improved = done = False
        for _ in range(12):
            step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-9), -g)
            r_new = residuals(u + step)
            c_new = float(r_new @ r_new)
            if np.isfinite(c_new) and c_new < cost:
                u, r, lam, improved = u + step, r_new, max(lam / 3, 1e-7), True
                done = cost - c_new < rtol * max(cost, 1.0)
                cost = c_new
                break
            lam *= 4
        if not improved or done:
            break
    return {"u": u, "r": r, "jac": jacobian(u, r), "cost": cost, "iterations": it}
