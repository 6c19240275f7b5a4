# SPDX-License-Identifier: BSD-3-Clause
"""EM-family models (issue 6): GaussianMixture, PoissonLatent, MissingValues, synthetic_lowrank.

The iterations here call the model methods directly (``s ← s̄(T(s))`` is EM in
the expectation space, FedEM eq. (5)); the same properties through the FedMM
engine are in tests/algorithms/test_fedem.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from sklearn.mixture import GaussianMixture as SkGaussianMixture

from fedmm.data import synthetic_lowrank
from fedmm.models import GaussianMixture, MissingValues, PoissonLatent
from fedmm.models.gmm import _project_capped_simplex
from reference import (
    gmm_full_em_step,
    gmm_tied_em_step,
    gmm_tied_loglik,
    poisson_latent_objective,
    poisson_latent_posterior,
    project_capped_simplex_bisection,
    rank_r_svd,
)


def _mixture_data(rng, n=400, p=3, G=3):
    centers = rng.normal(0.0, 4.0, (G, p))
    labels = rng.integers(0, G, n)
    A = rng.normal(size=(p, p)) * 0.5 + np.eye(p)
    return centers[labels] + rng.normal(size=(n, p)) @ A.T


# ---------------------------------------------------------------- GMM ------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gmm_em_iteration_matches_textbook_em(seed):
    rng = np.random.default_rng(seed)
    Y = _mixture_data(rng)
    gmm = GaussianMixture(3, reg_covar=0.0)
    s = gmm.init_statistic([Y[:150], Y[150:]], rng)
    theta = gmm.T(s)
    ref = (theta.weights, theta.means, theta.covariance)
    prev = gmm_tied_loglik(Y, *ref)
    for _ in range(15):
        s = gmm.project(gmm.statistic(Y, theta))
        theta = gmm.T(s)
        ref = gmm_tied_em_step(Y, *ref)
        np.testing.assert_allclose(theta.weights, ref[0], rtol=0, atol=1e-10)
        np.testing.assert_allclose(theta.means, ref[1], rtol=0, atol=1e-10)
        np.testing.assert_allclose(theta.covariance, ref[2], rtol=0, atol=1e-10)
        ll = gmm_tied_loglik(Y, *ref)
        assert ll >= prev - 1e-12  # EM is monotone
        assert -gmm.objective(Y, theta) == pytest.approx(ll, abs=1e-10)
        prev = ll


def test_gmm_fixed_point_matches_sklearn():
    rng = np.random.default_rng(3)
    Y = _mixture_data(rng, n=300, p=2, G=2)
    gmm = GaussianMixture(2, reg_covar=0.0)
    s = gmm.init_statistic([Y], rng)
    for _ in range(500):
        s = gmm.statistic(Y, gmm.T(s))
    theta = gmm.T(s)
    sk = SkGaussianMixture(2, covariance_type="tied", reg_covar=0.0, tol=1e-14, max_iter=5000,
                           means_init=theta.means + 0.05, random_state=0).fit(Y)
    order = np.argsort(sk.means_[:, 0])
    mine = np.argsort(theta.means[:, 0])
    np.testing.assert_allclose(theta.means[mine], sk.means_[order], atol=1e-6)
    np.testing.assert_allclose(theta.weights[mine], sk.weights_[order], atol=1e-6)
    np.testing.assert_allclose(theta.covariance, sk.covariances_, atol=1e-6)
    np.testing.assert_allclose(gmm.responsibilities(Y, theta)[:, mine], sk.predict_proba(Y)[:, order], atol=1e-5)


def test_gmm_minibatch_and_batch_statistics_agree():
    rng = np.random.default_rng(4)
    Y = _mixture_data(rng, n=200)
    gmm = GaussianMixture(3)
    theta = gmm.T(gmm.init_statistic([Y], rng))
    idx = rng.choice(200, 20, replace=False)
    np.testing.assert_array_equal(gmm.statistic(Y, theta, idx), gmm.statistic(Y[idx], theta))
    datas = [Y[:50], Y[50:]]
    idx = idx[idx < 150]
    stacked = np.stack([gmm.statistic(Y[:50], theta), gmm.statistic(Y[50:], theta, idx)])
    np.testing.assert_array_equal(gmm.statistic_batch(datas, theta, [None, idx]), stacked)
    # mean statistic over clients, weighted by size, is the global statistic
    glob = 0.25 * gmm.statistic(Y[:50], theta) + 0.75 * gmm.statistic(Y[50:], theta)
    np.testing.assert_allclose(glob, gmm.statistic(Y, theta), atol=1e-14)


def test_gmm_T_is_the_minimizer_of_the_surrogate():
    """T(s) minimizes −⟨s, φ(θ)⟩ + ψ(θ) (FedEM eq. (56)-(57)): perturbations do not decrease it."""
    rng = np.random.default_rng(5)
    Y = _mixture_data(rng, n=300, p=2, G=2)
    gmm = GaussianMixture(2, reg_covar=0.0)
    s = gmm.init_statistic([Y], rng)
    s = gmm.statistic(Y, gmm.T(s))
    G = 2
    w, m = s[:G], s[G:].reshape(G, 2)

    def surrogate(weights, means, cov):
        P = np.linalg.inv(cov)
        phi1 = np.log(weights) - 0.5 * np.einsum("gi,ij,gj->g", means, P, means)
        phi2 = means @ P
        psi = 0.5 * np.linalg.slogdet(cov)[1] + 0.5 * np.sum(gmm.second_moment * P)
        return psi - w @ phi1 - np.sum(m * phi2)

    th = gmm.T(s)
    best = surrogate(th.weights, th.means, th.covariance)
    for _ in range(20):
        dw = rng.normal(size=2) * 1e-3
        dw -= dw.mean()
        dm = rng.normal(size=(2, 2)) * 1e-3
        dc = rng.normal(size=(2, 2)) * 1e-3
        assert surrogate(th.weights + dw, th.means + dm, th.covariance + dc + dc.T) > best


def test_gmm_projection_onto_capped_simplex():
    rng = np.random.default_rng(6)
    for _ in range(50):
        v = rng.normal(size=5) * 2
        floor = 0.01
        got = _project_capped_simplex(v, floor)
        np.testing.assert_allclose(got, project_capped_simplex_bisection(v, floor), atol=1e-12)
        assert got.min() >= floor - 1e-15 and got.sum() == pytest.approx(1.0, abs=1e-12)
    gmm = GaussianMixture(3, n_features=2)
    s = gmm.layout.join(weights=[0.7, -0.2, 0.6], means=np.ones((3, 2)))
    ps = gmm.project(s)
    assert gmm.in_domain(ps) and not gmm.in_domain(s)
    np.testing.assert_array_equal(ps[3:], s[3:])  # means block is free


def test_gmm_covariance_guard_and_singular_error():
    rng = np.random.default_rng(7)
    t = rng.normal(size=(100, 1))
    Y = np.hstack([t, 2.0 * t])  # data on a line: the covariance is singular
    with pytest.raises(np.linalg.LinAlgError, match="reg_covar"):
        GaussianMixture(2, reg_covar=0.0).init_statistic([Y], 0)
    gmm = GaussianMixture(2, reg_covar=1e-3)
    s = gmm.init_statistic([Y], 0)
    theta = gmm.T(gmm.statistic(Y, gmm.T(s)))
    assert np.linalg.eigvalsh(theta.covariance).min() >= 1e-3 * (1 - 1e-12)
    # a statistic that implies an indefinite covariance is rejected without regularization
    gmm0 = GaussianMixture(2, reg_covar=0.0).fit_global_moments([rng.normal(size=(10, 2))])
    bad = gmm0.layout.join(weights=[0.5, 0.5], means=10.0 * np.ones((2, 2)))
    with pytest.raises(np.linalg.LinAlgError, match="singular or indefinite"):
        gmm0.T(bad)


def test_gmm_known_covariance_is_kept():
    rng = np.random.default_rng(8)
    Y = _mixture_data(rng, n=200, p=2, G=2)
    cov = np.array([[1.0, 0.3], [0.3, 2.0]])
    gmm = GaussianMixture(2, known_covariance=cov)
    theta = gmm.T(gmm.init_statistic([Y], rng))
    np.testing.assert_array_equal(theta.covariance, cov)
    ref_w, ref_m, _ = gmm_tied_em_step(Y, theta.weights, theta.means, cov)
    theta1 = gmm.T(gmm.statistic(Y, theta))
    np.testing.assert_allclose(theta1.means, ref_m, atol=1e-10)
    np.testing.assert_allclose(theta1.weights, ref_w, atol=1e-10)


def test_gmm_malformed_inputs():
    rng = np.random.default_rng(9)
    Y = rng.normal(size=(5, 2))
    with pytest.raises(ValueError, match="n_components"):
        GaussianMixture(6).init_statistic([Y[:2], Y[2:]], 0)
    with pytest.raises(ValueError, match="n_components"):
        GaussianMixture(0)
    with pytest.raises(ValueError, match="covariance"):
        GaussianMixture(2, covariance="spherical")
    gmm = GaussianMixture(2, n_features=2)
    with pytest.raises(ValueError, match=r"shape \(N, 2\)"):
        gmm.check_data(rng.normal(size=(5, 3)))
    with pytest.raises(ValueError, match="finite"):
        gmm.check_data(np.array([[np.nan, 0.0]]))
    with pytest.raises(ValueError, match="flat statistic"):
        gmm.T(np.zeros(3))
    with pytest.raises(RuntimeError, match="fit_global_moments"):
        gmm.T(gmm.layout.join(weights=[0.5, 0.5], means=np.zeros((2, 2))))
    with pytest.raises(RuntimeError, match="n_features"):
        GaussianMixture(2).layout


# ------------------------------------------------------------ Poisson ------
SUPPORT = np.array([-1.0, -0.3, 0.4, 1.0])
PROBS = np.array([0.1, 0.4, 0.3, 0.2])


def _poisson_counts(rng, n=600, theta=0.8):
    h = rng.choice(SUPPORT, size=n, p=PROBS)
    return rng.poisson(np.exp(theta + h)).astype(np.float64)


@pytest.mark.parametrize("s1,s2,lam", [(2.0, -1.0, 1.0), (0.3, -2.5, 0.1), (7.0, -0.4, 3.0)])
def test_poisson_T_closed_form_is_argmin(s1, s2, lam):
    model = PoissonLatent(SUPPORT, PROBS, lam=lam)
    theta = model.T(model.layout.join(count=[s1], neg_exp_shift=[s2]))
    assert theta == pytest.approx(np.log(s1 / (lam - s2)), abs=1e-15)
    num = minimize_scalar(lambda t: lam * np.exp(t) - s1 * t - s2 * np.exp(t), bracket=(-5, 5), tol=1e-12).x
    assert theta == pytest.approx(num, abs=1e-6)
    explicit = PoissonLatent(SUPPORT, PROBS, lam=lam, parameterization="explicit_mean", mean_count=s1)
    assert explicit.T(np.array([s2])) == pytest.approx(theta, abs=1e-15)


def test_poisson_statistic_matches_scipy_posterior():
    rng = np.random.default_rng(10)
    Z = _poisson_counts(rng, n=200)
    model = PoissonLatent(SUPPORT, PROBS, lam=0.5)
    for theta in (-0.5, 0.3, 1.7):
        post = poisson_latent_posterior(Z, theta, SUPPORT, PROBS)
        np.testing.assert_allclose(model.posterior(Z, theta), post, atol=1e-12)
        s = model.statistic(Z, theta)
        np.testing.assert_allclose(s, [Z.mean(), -(post @ np.exp(SUPPORT)).mean()], atol=1e-12)
        expected = poisson_latent_objective(Z, theta, SUPPORT, PROBS, 0.5)
        assert model.objective(Z, theta) == pytest.approx(expected, abs=1e-10)


@pytest.mark.parametrize("parameterization", ["joint", "explicit_mean"])
def test_poisson_em_root_is_the_map(parameterization):
    rng = np.random.default_rng(11)
    Z = _poisson_counts(rng)
    datas = [Z[:100], Z[100:350], Z[350:]]
    model = PoissonLatent(SUPPORT, PROBS, lam=0.7, parameterization=parameterization)
    s = model.init_statistic(datas, rng)
    for _ in range(300):
        s = model.project(sum(len(d) / len(Z) * model.statistic(d, model.T(s)) for d in datas))
    h = model.statistic(Z, model.T(s)) - s  # mean field h(s) = s̄(T(s)) − s
    assert np.abs(h).max() < 1e-12
    map_theta = minimize_scalar(lambda t: poisson_latent_objective(Z, t, SUPPORT, PROBS, 0.7),
                                bracket=(-2, 2), tol=1e-12).x
    assert model.T(s) == pytest.approx(map_theta, abs=1e-6)


def test_poisson_projection_and_errors():
    model = PoissonLatent(SUPPORT, PROBS, lam=1.0)
    ps = model.project(np.array([-0.5, -10.0]))
    assert ps[0] == model.min_mean and ps[1] == pytest.approx(-np.exp(1.0))
    assert model.project(np.array([2.0, 0.5]))[1] == pytest.approx(-np.exp(-1.0))
    with pytest.raises(ValueError, match="non-negative integer counts"):
        model.check_data([1.0, -2.0])
    with pytest.raises(ValueError, match="non-negative integer counts"):
        model.check_data([1.5])
    with pytest.raises(ValueError, match="lam"):
        PoissonLatent(SUPPORT, lam=0.0)
    with pytest.raises(ValueError, match="probabilities"):
        PoissonLatent(SUPPORT, [0.5, 0.5])
    with pytest.raises(ValueError, match="project s first"):
        model.T(np.array([0.0, -1.0]))
    with pytest.raises(RuntimeError, match="fit_global_moments"):
        PoissonLatent(SUPPORT, parameterization="explicit_mean").T(np.array([-1.0]))


# ------------------------------------------------------- MissingValues ------
def _full_problem(rng, m=30, J=12, L=9, r=2):
    theta = rng.normal(size=(J, r)) @ rng.normal(size=(r, L))
    X = theta + rng.normal(size=(m, J, L))
    return (X, np.ones_like(X, dtype=bool)), X


def test_missing_full_observation_reduces_to_rank_r_svd():
    rng = np.random.default_rng(12)
    data, X = _full_problem(rng)
    model = MissingValues(2)
    s0 = model.init_statistic([data], rng)
    # the statistic no longer depends on θ: one EM step is the rank-r SVD of the mean matrix
    theta = model.T(s0)
    np.testing.assert_allclose(model.statistic(data, theta), X.mean(axis=0).ravel(), atol=1e-13)
    np.testing.assert_allclose(theta.matrix, rank_r_svd(X.mean(axis=0), 2), atol=1e-10)
    theta2 = model.T(model.statistic(data, theta))
    np.testing.assert_allclose(theta2.matrix, rank_r_svd(X.mean(axis=0), 2), atol=1e-10)


def test_missing_gaussian_ridge_T_is_stationary():
    rng = np.random.default_rng(13)
    S = rng.normal(size=(8, 6)) * 3
    model = MissingValues(3, lam=0.5, shape=(8, 6))
    th = model.T(S.ravel())
    resid = th.matrix - S
    np.testing.assert_allclose(resid @ th.V + 0.5 * th.U, 0.0, atol=1e-10)
    np.testing.assert_allclose(resid.T @ th.U + 0.5 * th.V, 0.0, atol=1e-10)


@pytest.mark.parametrize("family", ["poisson", "bernoulli"])
def test_missing_iterative_T_is_stationary(family):
    rng = np.random.default_rng(14)
    J, L, lam = 10, 7, 0.3
    S = rng.poisson(3.0, size=(J, L)).astype(float) if family == "poisson" else rng.random((J, L))
    model = MissingValues(2, family, lam=lam, shape=(J, L))
    th = model.T(S.ravel())
    mean = np.exp(th.matrix) if family == "poisson" else 1.0 / (1.0 + np.exp(-th.matrix))
    scale = np.abs(S).max()
    np.testing.assert_allclose((mean - S) @ th.V + lam * th.U, 0.0, atol=1e-9 * scale)
    np.testing.assert_allclose((mean - S).T @ th.U + lam * th.V, 0.0, atol=1e-9 * scale)


def test_missing_statistic_fills_conditional_means():
    rng = np.random.default_rng(15)
    values = rng.poisson(2.0, size=(4, 3, 5)).astype(float)
    mask = rng.random((4, 3, 5)) < 0.5
    values[~mask] = np.nan
    model = MissingValues(1, "poisson", lam=0.1)
    model.init_statistic([(values, mask)], rng)
    theta = rng.normal(size=(3, 5))
    idx = np.array([0, 2, 3])
    expect = np.zeros((3, 5))
    for i in idx:
        for j in range(3):
            for k in range(5):
                expect[j, k] += values[i, j, k] if mask[i, j, k] else np.exp(theta[j, k])
    np.testing.assert_allclose(model.statistic((values, mask), theta, idx), (expect / 3).ravel(), atol=1e-13)


def test_fedmissem_em_beats_mean_imputation():
    prob = synthetic_lowrank(3, 15, 20, 16, 2, seed=16)
    model = MissingValues(2)
    s = model.init_statistic(prob.datas, 0)
    weights = [d[0].shape[0] / 45 for d in prob.datas]
    errs = []
    for _ in range(60):
        theta = model.T(s)
        errs.append(np.sqrt(np.mean((theta.matrix - prob.theta_star) ** 2)))
        s = sum(w * model.statistic(d, theta) for w, d in zip(weights, prob.datas))
    masks = np.concatenate([d[1] for d in prob.datas])
    truth = np.broadcast_to(prob.theta_star, masks.shape)
    fill = np.nanmean(np.concatenate([d[0] for d in prob.datas]))
    naive = np.sqrt(np.mean((fill - truth[~masks]) ** 2))
    assert model.reconstruction_error(theta, truth, masks) < 0.3 * naive
    assert errs[-1] < errs[0]


def test_missing_malformed_inputs():
    model = MissingValues(2, shape=(4, 3))
    values = np.zeros((2, 4, 3))
    with pytest.raises(ValueError, match="mask' of shape values.shape"):
        model.check_data((values, np.ones((2, 3, 4), dtype=bool)))
    with pytest.raises(ValueError, match="boolean"):
        model.check_data((values, np.full((2, 4, 3), 0.5)))
    with pytest.raises(ValueError, match=r"shape \(m, 4, 3\)"):
        model.check_data((np.zeros((2, 5, 3)), np.ones((2, 5, 3), dtype=bool)))
    with pytest.raises(TypeError, match="values, mask"):
        model.check_data(values)
    with pytest.raises(ValueError, match="rank"):
        MissingValues(5, shape=(4, 3))
    with pytest.raises(ValueError, match="lam"):
        MissingValues(2, "poisson")
    with pytest.raises(ValueError, match="integer counts"):
        MissingValues(2, "poisson", lam=1.0).check_data((np.full((1, 2, 2), 0.5), np.ones((1, 2, 2), dtype=bool)))
    bad = values.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="observed entries"):
        model.check_data((bad, np.ones((2, 4, 3), dtype=bool)))
    model.check_data((bad, np.arange(24).reshape(2, 4, 3) > 0))  # NaN where unobserved is fine


def test_synthetic_lowrank_structure():
    a = synthetic_lowrank(4, 10, 12, 8, 3, family="poisson", seed=3)
    b = synthetic_lowrank(4, 10, 12, 8, 3, family="poisson", seed=3)
    np.testing.assert_array_equal(a.theta_star, b.theta_star)
    assert np.linalg.matrix_rank(a.theta_star - np.log(3.0)) == 3
    rates = []
    for (values, mask), full in zip(a.datas, a.complete):
        assert values.shape == mask.shape == full.shape == (10, 12, 8)
        assert np.isnan(values[~mask]).all() and np.array_equal(values[mask], full[mask])
        rates.append(mask.mean())
    assert rates == sorted(rates) and rates[-1] - rates[0] > 0.2  # heterogeneous clients
    with pytest.raises(ValueError, match="rank"):
        synthetic_lowrank(2, 2, 3, 3, 4)


def test_theta_vector_round_trips():
    rng = np.random.default_rng(17)
    Y = _mixture_data(rng, n=100)
    gmm = GaussianMixture(3)
    theta = gmm.T(gmm.init_statistic([Y], rng))
    back = gmm.theta_from_vector(gmm.theta_vector(theta), theta)
    np.testing.assert_array_equal(gmm.statistic(Y, back), gmm.statistic(Y, theta))
    pois = PoissonLatent(SUPPORT, PROBS)
    assert pois.theta_from_vector(pois.theta_vector(0.25), 0.0) == 0.25
    model = MissingValues(2, lam=0.3, shape=(6, 5))
    th = model.T(rng.normal(size=30))
    back = model.theta_from_vector(model.theta_vector(th), th)
    np.testing.assert_allclose(back.matrix, th.matrix, atol=1e-12)
    assert model.penalty(back) == pytest.approx(model.penalty(th), abs=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_gmm_full_covariance_em_iteration_matches_textbook_em(seed):
    rng = np.random.default_rng(30 + seed)
    Y = _mixture_data(rng, n=300)
    gmm = GaussianMixture(3, covariance="full", reg_covar=0.0)
    s = gmm.init_statistic([Y[:100], Y[100:]], rng)
    theta = gmm.T(s)
    ref = (theta.weights, theta.means, theta.covariance)
    prev = -np.inf
    for _ in range(10):
        s = gmm.project(gmm.statistic(Y, theta))
        w, mu, cov, ll = gmm_full_em_step(Y, *ref)
        assert -gmm.objective(Y, theta) == pytest.approx(ll, abs=1e-10)  # log-likelihood at θ_k
        assert ll >= prev - 1e-12
        prev = ll
        ref = (w, mu, cov)
        theta = gmm.T(s)
        np.testing.assert_allclose(theta.weights, w, rtol=0, atol=1e-10)
        np.testing.assert_allclose(theta.means, mu, rtol=0, atol=1e-10)
        np.testing.assert_allclose(theta.covariance, cov, rtol=0, atol=1e-10)
    sk = SkGaussianMixture(3, covariance_type="full", reg_covar=0.0)
    sk.weights_, sk.means_, sk.covariances_ = theta.weights, theta.means, theta.covariance
    sk.precisions_cholesky_ = np.linalg.inv(np.linalg.cholesky(theta.covariance)).transpose(0, 2, 1)
    np.testing.assert_allclose(gmm.responsibilities(Y, theta), sk.predict_proba(Y), atol=1e-10)
    back = gmm.theta_from_vector(gmm.theta_vector(theta))
    np.testing.assert_array_equal(back.covariance, theta.covariance)


def test_gmm_full_guard_and_errors():
    rng = np.random.default_rng(33)
    Y = _mixture_data(rng, n=60, p=2, G=2)
    gmm = GaussianMixture(2, covariance="full", reg_covar=0.5)
    s = gmm.init_statistic([Y], rng)
    G, p = 2, 2
    s[G + G * p :] = 0.0  # second moments that imply indefinite covariances
    s[:G] = 0.5
    theta = gmm.T(s)
    assert np.linalg.eigvalsh(theta.covariance).min() >= 0.5 * (1 - 1e-12)
    with pytest.raises(np.linalg.LinAlgError, match="reg_covar"):
        GaussianMixture(2, covariance="full", reg_covar=0.0, n_features=2).T(s)
    with pytest.raises(ValueError, match="known_covariance"):
        GaussianMixture(2, covariance="full", known_covariance=np.eye(2))
    with pytest.raises(ValueError, match=r"\(2, 2, 2\)"):
        gmm.parameters([0.5, 0.5], np.zeros((2, 2)), np.eye(2))


@pytest.mark.parametrize("covariance", ["full", "tied"])
def test_compiled_responsibilities_match_scikit_learn_across_chunks(covariance):
    """``fedmm.kernels.gaussian_mixture_responsibilities`` (256-row chunks) against scikit-learn on
    N = 1000 rows (several chunks and a partial one): the posteriors, and the log-normalizer, which
    equals scikit-learn's per-row log-likelihood up to the terms the logits omit."""
    from fedmm import kernels

    rng = np.random.default_rng(3)
    p, G = 4, 3
    Y = rng.normal(size=(1000, p)) + rng.normal(0, 3, (G, p))[rng.integers(0, G, 1000)]
    gmm = GaussianMixture(G, covariance=covariance)
    theta = gmm.T(gmm.statistic(Y, gmm.T(gmm.init_statistic([Y], rng))))
    sk = SkGaussianMixture(G, covariance_type=covariance)
    sk.weights_, sk.means_, sk.covariances_ = theta.weights, theta.means, theta.covariance
    chol = np.linalg.cholesky(theta.covariance)
    sk.precisions_cholesky_ = np.linalg.inv(chol).swapaxes(-1, -2)
    compiled = gmm.compiled_model()
    rho, log_norm = kernels.gaussian_mixture_responsibilities(
        compiled, gmm.compiled_theta(theta, compiled), Y, return_log_norm=True)
    np.testing.assert_allclose(rho, sk.predict_proba(Y), rtol=0, atol=1e-12)
    common = -0.5 * p * np.log(2 * np.pi)
    if covariance == "tied":  # −½ yᵀΣ⁻¹y − ½ ln det Σ, common to every component
        white = np.linalg.solve(chol, Y.T)
        common = common - 0.5 * (white ** 2).sum(axis=0) - np.log(np.diag(chol)).sum()
    np.testing.assert_allclose(log_norm + common, sk.score_samples(Y), rtol=1e-12, atol=1e-10)
    np.testing.assert_array_equal(gmm.responsibilities(Y, theta), rho)
    with pytest.raises(ValueError, match="'data' to contain only finite"):
        kernels.gaussian_mixture_responsibilities(compiled, gmm.compiled_theta(theta, compiled),
                                                  np.full((2, p), np.nan))
    with pytest.raises(ValueError, match=r"shape \(N, 4\)"):
        kernels.gaussian_mixture_responsibilities(compiled, gmm.compiled_theta(theta, compiled), Y[:, :3])
    with pytest.raises(ValueError, match="compiled parameter"):
        kernels.gaussian_mixture_responsibilities(compiled, np.zeros(3), Y)
    with pytest.raises(TypeError, match="GaussianMixture compiled model"):
        kernels.gaussian_mixture_responsibilities(kernels.inverse_toy_model(2), np.zeros(2), Y)
