# SPDX-License-Identifier: BSD-3-Clause
"""Independent NumPy/SciPy reference implementations used by the tests (one section per family)."""
from __future__ import annotations

import numpy as np

# =========================================================================== engine
# References for the FedMM engine (issue 4): the deterministic iterations the
# algorithms must reproduce, written as plain loops.


def engine_centralized_mm(statistic, T, datas, weights, S0, n_iter):
    """FedMM paper eq. (22): ``s_{t+1} = Σ_i μ_i E_{π_i}[S̄(Z, T(s_t))]``.

    ``statistic(data, theta)`` is the full-batch mean of ``S̄`` on one client's data.
    Returns the list ``[s_0, s_1, ..., s_{n_iter}]``.
    """
    s = np.array(S0, dtype=np.float64)
    out = [s]
    for _ in range(n_iter):
        theta = T(s)
        s = sum(w * statistic(d, theta) for w, d in zip(weights, datas))
        out.append(s)
    return out


def engine_ista(X, y, lam, rho, n_iter, theta0=None):
    """Proximal gradient (ISTA) on ``mean ½(y − Xθ)² + lam ‖θ‖₁`` with step ``rho``."""
    theta = np.zeros(X.shape[1]) if theta0 is None else np.array(theta0, dtype=np.float64)
    for _ in range(n_iter):
        grad = X.T @ (X @ theta - y) / X.shape[0]
        z = theta - rho * grad
        theta = np.sign(z) * np.maximum(np.abs(z) - rho * lam, 0.0)
    return theta


def engine_heterogeneous_positive(n_clients, n_per_client, rng):
    """Positive samples whose client means differ by an order of magnitude (Remark 1 data)."""
    scales = np.geomspace(0.2, 20.0, n_clients)
    return [rng.gamma(4.0, s / 4.0, size=n_per_client) for s in scales]
