# SPDX-License-Identifier: BSD-3-Clause
"""Independent NumPy/SciPy reference implementations used by the tests (one section per family)."""
from __future__ import annotations

import numpy as np


# =============================================================================
# EM family (issue 6): textbook EM for the tied Gaussian mixture, Poisson with
# a latent shift, rank-r SVD, simplex projection.  Written from the textbook
# formulas (log-densities from scipy.stats), not from fedmm's parameterization.
# =============================================================================
from scipy import stats  # noqa: E402  (kept in this section: merges stay trivial)
from scipy.special import logsumexp  # noqa: E402


def gmm_tied_log_joint(Y, weights, means, cov):
    """``log π_ℓ + log 𝒩(y_j; μ_ℓ, Σ)``, shape (N, G), from scipy.stats."""
    return np.stack(
        [np.log(w) + stats.multivariate_normal(mean=mu, cov=cov).logpdf(Y) for w, mu in zip(weights, means)],
        axis=1,
    ).reshape(len(Y), len(weights))


def gmm_tied_loglik(Y, weights, means, cov):
    """Mean log-likelihood of the tied-covariance mixture (nats per example)."""
    return float(logsumexp(gmm_tied_log_joint(Y, weights, means, cov), axis=1).mean())


def gmm_tied_em_step(Y, weights, means, cov):
    """One textbook EM iteration (E-step responsibilities, weighted M-step with pooled covariance)."""
    log_joint = gmm_tied_log_joint(Y, weights, means, cov)
    resp = np.exp(log_joint - logsumexp(log_joint, axis=1, keepdims=True))
    nk = resp.sum(axis=0)
    new_weights = nk / len(Y)
    new_means = (resp.T @ Y) / nk[:, None]
    new_cov = np.zeros((Y.shape[1], Y.shape[1]))
    for k in range(len(weights)):
        d = Y - new_means[k]
        new_cov += (resp[:, k, None] * d).T @ d
    return new_weights, new_means, new_cov / len(Y)


def poisson_latent_posterior(Z, theta, support, probabilities):
    """Posterior of the latent shift given counts, from scipy.stats.poisson, shape (N, K)."""
    logp = np.log(probabilities) + stats.poisson.logpmf(np.asarray(Z)[:, None], np.exp(theta + np.asarray(support)))
    return np.exp(logp - logsumexp(logp, axis=1, keepdims=True))


def poisson_latent_objective(Z, theta, support, probabilities, lam):
    """FedMM eq. (43): mean −log Σ_k w_k Poisson(Z; e^{θ+h_k}) + λ eᶿ."""
    logp = np.log(probabilities) + stats.poisson.logpmf(np.asarray(Z)[:, None], np.exp(theta + np.asarray(support)))
    return float(-logsumexp(logp, axis=1).mean() + lam * np.exp(theta))


def rank_r_svd(X, r):
    """Best rank-r approximation of X (Eckart–Young)."""
    u, s, vt = np.linalg.svd(X, full_matrices=False)
    return (u[:, :r] * s[:r]) @ vt[:r]


def project_capped_simplex_bisection(v, floor):
    """Projection onto {x ≥ floor, Σx = 1} by bisection on the KKT multiplier."""
    lo, hi = v.min() - 1.0, v.max()
    for _ in range(200):
        tau = 0.5 * (lo + hi)
        if np.maximum(v - tau, floor).sum() > 1.0:
            lo = tau
        else:
            hi = tau
    return np.maximum(v - 0.5 * (lo + hi), floor)
