# SPDX-License-Identifier: BSD-3-Clause
"""Independent NumPy/SciPy reference implementations used by the tests (one section per family)."""
from __future__ import annotations

import numpy as np

# =====================================================================================
# ---- FedMLS and non-smooth problems (issue 7) ----
# Written from the FedMLS paper's formulas without using fedmm code: the dense
# losses/subgradients, a projected subgradient method (the reference for F*),
# MOPES in its matrix form (4)-(5) on the product space (7), and Algorithm 1
# with one Python loop per client (the "plain NumPy" loop of the benchmark).
# =====================================================================================


def nonsmooth_design(kind, A, fit_intercept):
    """Rows a_j, with a trailing 1 when the problem has a bias."""
    A = np.asarray(A, dtype=np.float64)
    return np.hstack([A, np.ones((A.shape[0], 1))]) if fit_intercept else A


def nonsmooth_loss(kind, A, y, w, fit_intercept):
    """f_i(w) = Σ_j ℓ(a_jᵀw, y_j) for kind in {"hinge", "l1"}."""
    z = nonsmooth_design(kind, A, fit_intercept) @ w
    if kind == "hinge":
        return float(np.sum(np.clip(1.0 - y * z, 0.0, None)))
    return float(np.sum(np.abs(z - y)))


def nonsmooth_subgradient(kind, A, y, w, fit_intercept):
    """One subgradient of f_i at w (hinge: −Σ_{y z<1} y_j a_j; l1: Σ sign(z_j − y_j) a_j)."""
    X = nonsmooth_design(kind, A, fit_intercept)
    z = X @ w
    g = np.zeros(X.shape[1])
    for a, label, zj in zip(X, y, z):  # deliberately plain: an independent reference
        if kind == "hinge":
            if label * zj < 1.0:
                g -= label * a
        else:
            g += np.sign(zj - label) * a
    return g


def nonsmooth_subgradient_vectorized(kind, X, y, w):
    """Same subgradient as :func:`nonsmooth_subgradient`, vectorized, on the design X."""
    z = X @ w
    coef = np.where(y * z < 1.0, -y, 0.0) if kind == "hinge" else np.sign(z - y)
    return X.T @ coef


def nonsmooth_objective(kind, datas, w, fit_intercept):
    """F(w) = (1/n) Σ_i f_i(w)."""
    return sum(nonsmooth_loss(kind, A, y, w, fit_intercept) for A, y in datas) / len(datas)


def projected_subgradient_min(kind, datas, fit_intercept, *, radius=None, n_iter=20000, step0=1.0):
    """Centralized projected subgradient method with normalized steps step0/√t.

    Returns (best value, every evaluated value): every value is an upper bound on F*
    (every iterate is feasible), and the best converges to F* as O(1/√n_iter).
    """
    n = len(datas)
    X = np.vstack([nonsmooth_design(kind, A, fit_intercept) for A, _ in datas])
    y = np.concatenate([b for _, b in datas])
    loss = (lambda z: np.clip(1.0 - y * z, 0.0, None)) if kind == "hinge" else (lambda z: np.abs(z - y))
    w = np.zeros(X.shape[1])
    values = []
    for t in range(1, n_iter + 1):
        values.append(loss(X @ w).sum() / n)
        g = nonsmooth_subgradient_vectorized(kind, X, y, w) / n
        gn = np.linalg.norm(g)
        if gn == 0.0:
            break
        w = w - step0 / np.sqrt(t) * g / gn
        if radius is not None and np.linalg.norm(w) > radius:
            w = w * radius / np.linalg.norm(w)
    values.append(loss(X @ w).sum() / n)
    return min(values), np.array(values)


def mopes_product_space(subgradient, n, p, n_rounds, local_steps, lam, radius):
    """MOPES, eqs. (4)-(5), literally, on X ∈ R^{p×n} for problem (7).

    ``subgradient(i, u)`` returns a subgradient of f_i at u; F(X) = (1/n) Σ f_i(x^i) so
    column i of ∇F(U) is subgradient(i, u^i)/n.  𝒳 = consensus set (projection = column
    mean), 𝒳' = columns in the ball of radius R.  ``local_steps(k)``, ``lam(k)``.
    Returns the consensus columns x_k (server iterates) of X_1..X_K as an array (K, p).
    """
    X = np.zeros((p, n))
    Z = np.zeros((p, n))
    Xp = np.zeros((p, n))
    Zp = np.zeros((p, n))
    out = []
    for k in range(1, n_rounds + 1):
        lam_k = lam(k)
        beta = 4.0 / (lam_k * k)
        gamma = 2.0 / (k + 1)
        Y = (1 - gamma) * X + gamma * Z
        Yp = (1 - gamma) * Xp + gamma * Zp
        W = Z - (Y - Yp) / (beta * lam_k)
        Z_new = np.repeat(W.mean(axis=1, keepdims=True), n, axis=1)  # proj onto consensus
        V = Zp - (Yp - Y) / (beta * lam_k)
        U = Zp.copy()
        U_avg = Zp.copy()
        for t in range(1, local_steps(k) + 1):
            grad = np.column_stack([subgradient(i, U[:, i]) for i in range(n)]) / n
            U_hat = U - (grad / beta + U - V) / (1 + t / 2)
            if radius is not None:
                norms = np.linalg.norm(U_hat, axis=0)
                U_hat = U_hat * np.minimum(1.0, radius / np.maximum(norms, 1e-300))
            U = U_hat
            theta = 2 * (t + 1) / (t * (t + 3))
            U_avg = (1 - theta) * U_avg + theta * U
        Z, Zp = Z_new, U
        X = (1 - gamma) * X + gamma * Z
        Xp = (1 - gamma) * Xp + gamma * U_avg
        out.append(X[:, 0].copy())
    return np.array(out)


def fedmls_per_client(subgradient, n, p, n_rounds, local_steps, lam, radius, minibatch=None):
    """FedMLS Algorithm 1 with a Python loop over clients (plain NumPy).

    ``minibatch``: None (exact subgradients) or a callable ``(i) -> idx`` giving the
    rows of client i's next minibatch; ``subgradient(i, u, idx)`` then estimates.
    Returns the server iterates x_1..x_K, shape (K, p).
    """
    x = np.zeros(p)
    z = np.zeros(p)
    y = np.zeros(p)
    xs = [np.zeros(p) for _ in range(n)]
    zs = [np.zeros(p) for _ in range(n)]
    ys = [np.zeros(p) for _ in range(n)]
    out = []
    for k in range(1, n_rounds + 1):
        lam_k = lam(k)
        beta = 4.0 / (lam_k * k)
        gamma, gamma_next = 2.0 / (k + 1), 2.0 / (k + 2)
        for i in range(n):
            v = zs[i] - (ys[i] - y) / (beta * lam_k)
            u = zs[i].copy()
            u_avg = zs[i].copy()
            for t in range(1, local_steps(k) + 1):
                g = subgradient(i, u) if minibatch is None else subgradient(i, u, minibatch(i))
                u_hat = u - (g / (n * beta) + u - v) / (1 + t / 2)
                norm = np.linalg.norm(u_hat)
                u = u_hat if radius is None or norm <= radius else u_hat * (radius / norm)
                theta = 2 * (t + 1) / (t * (t + 3))
                u_avg = (1 - theta) * u_avg + theta * u
            zs[i] = u
            xs[i] = (1 - gamma) * xs[i] + gamma * u_avg
            ys[i] = (1 - gamma_next) * xs[i] + gamma_next * zs[i]
        x = (1 - gamma) * x + gamma * z
        y = (1 - gamma_next) * x + gamma_next * z
        z = z - (y - sum(ys) / n) * (k + 1) / 4.0
        out.append(x.copy())
    return np.array(out)


def centralized_subgradient_descent(subgradient, n, p, n_iter, step):
    """x_{t+1} = x_t − step(t) (1/n) Σ_i g_i(x_t) from 0; returns x_1..x_T, shape (T, p)."""
    x = np.zeros(p)
    out = []
    for t in range(1, n_iter + 1):
        x = x - step(t) * sum(subgradient(i, x) for i in range(n)) / n
        out.append(x.copy())
    return np.array(out)


def nonsmooth_toy_data(kind, n_clients=4, m=15, d=3, seed=1):
    """Small heterogeneous client data sets: client i's features are shifted by its own mean.

    hinge: labels sign(a·(1, −1, 0.5, …) + noise) in {−1, +1}; l1: b = A·1 + t(2) noise + i.
    """
    rng = np.random.default_rng(seed)
    direction = np.resize([1.0, -1.0, 0.5], d)
    datas = []
    for i in range(n_clients):
        A = rng.normal(size=(m, d)) + 1.5 * rng.normal(size=d)
        if kind == "hinge":
            y = np.where(A @ direction + rng.normal(size=m) > 0, 1.0, -1.0)
        else:
            y = A @ np.ones(d) + rng.standard_t(2, size=m) + i
        datas.append((A, y))
    return datas
