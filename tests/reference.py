# SPDX-License-Identifier: BSD-3-Clause
"""Independent NumPy/SciPy/scikit-learn references used by the tests.

One labeled section per kernel family; test files import from here and never
copy a reference.
"""
from __future__ import annotations

import numpy as np

# ---- sparse coding / linalg (issue 3) ---------------------------------------


def lasso_objective(D, Z, H, lam):
    """Per-column 1/2 ||z_j - D h_j||^2 + lam ||h_j||_1."""
    R = Z - D @ H
    return 0.5 * np.sum(R * R, axis=0) + lam * np.abs(H).sum(axis=0)


def lasso_kkt_violation(D, Z, H, lam, positive=False):
    """Largest KKT violation per column, relative to lam.

    With g = D^T (z - D h): on the support g_k = lam sign(h_k); off the support
    |g_k| <= lam (positive LASSO: g_k <= lam).  Returns max over k of the
    violation divided by lam.
    """
    g = D.T @ (Z - D @ H)
    on = H != 0
    off_violation = np.maximum(g if positive else np.abs(g), lam) - lam
    on_violation = np.abs(g - lam * np.sign(H))
    return np.where(on, on_violation, off_violation).max(axis=0) / lam


def lasso_sklearn(D, Z, lam, positive=False, tol=1e-13, max_iter=200_000):
    """Reference codes from scikit-learn's ``Lasso``, one column at a time.

    sklearn minimizes (1 / (2 n)) ||y - X w||^2 + alpha ||w||_1 with n = p
    samples here, so alpha = lam / p gives our problem scaled by 1/p.
    """
    from sklearn.linear_model import Lasso

    p, K = D.shape
    H = np.zeros((K, Z.shape[1]))
    model = Lasso(alpha=lam / p, fit_intercept=False, positive=positive, tol=tol,
                  max_iter=max_iter, selection="cyclic")
    for j in range(Z.shape[1]):
        H[:, j] = model.fit(D, Z[:, j]).coef_
    return H


def psd_projection_eigh(A):
    """Projection of sym(A) onto the PSD cone by eigh and clipping (stack-aware)."""
    S = 0.5 * (A + np.swapaxes(A, -1, -2))
    w, V = np.linalg.eigh(S)
    return (V * np.maximum(w, 0.0)[..., None, :]) @ np.swapaxes(V, -1, -2)


def dictionary_surrogate(D, A, B, eta=0.0):
    """U(D) = 1/2 tr(D^T D A) - tr(D^T B) + eta ||D||_F^2."""
    return 0.5 * np.trace(D.T @ D @ A) - np.trace(D.T @ B) + eta * np.sum(D * D)


def sparse_codes(rng, K, b, density=0.2):
    """Codes with ``density`` N(0, 1) nonzeros (the §6 synthetic model)."""
    return rng.standard_normal((K, b)) * (rng.random((K, b)) < density)
