# SPDX-License-Identifier: BSD-3-Clause
"""Surrogate models InverseToy and ProximalGradient (FedMM paper Remark 1 and Example 1)."""
import numpy as np
import pytest
from sklearn.linear_model import Lasso

from fedmm.algorithms import SASSMM
from fedmm.models import InverseToy, ProximalGradient

from reference import engine_ista


def _regression(rng, n=200, d=6):
    X = rng.standard_normal((n, d))
    theta = np.array([1.5, 0.0, -2.0, 0.0, 0.5, 0.0])[:d]
    y = X @ theta + 0.1 * rng.standard_normal(n)
    return X, y


def test_inverse_toy_T_and_objective_minimum():
    m = InverseToy()
    z = np.array([2.0, 6.0])
    s = m.statistic(z, None)
    assert s.shape == (1,) and s[0] == 4.0
    theta = m.T(s)
    assert theta[0] == 0.5
    # T(s) minimizes E[Z]θ + 1/θ: neighbours are worse.
    f = m.objective(z, theta)
    assert f < m.objective(z, theta * 1.01) and f < m.objective(z, theta * 0.99)


def test_inverse_toy_rejects_non_positive_samples():
    with pytest.raises(ValueError, match="positive"):
        InverseToy().check_data(np.array([1.0, -0.5]))


def test_theta_vector_round_trip_structures():
    m = InverseToy()
    for like in (np.zeros((2, 3)), (np.zeros(2), np.zeros((2, 2))), {"b": np.zeros(3), "a": np.zeros((1, 2))}):
        v = np.arange(m.theta_vector(like).size, dtype=np.float64)
        back = m.theta_from_vector(v, like)
        np.testing.assert_array_equal(m.theta_vector(back), v)
    with pytest.raises(ValueError, match="shape"):
        m.theta_from_vector(np.zeros(5), np.zeros(4))


def test_proximal_statistic_is_gradient_step():
    rng = np.random.default_rng(0)
    X, y = _regression(rng)
    m = ProximalGradient("least_squares", "l1", rho=0.3, lam=0.1)
    data = m.check_data((X, y))
    theta = rng.standard_normal(X.shape[1])
    idx = np.array([3, 7, 11])
    expected = theta - 0.3 * X[idx].T @ (X[idx] @ theta - y[idx]) / 3
    np.testing.assert_allclose(m.statistic(data, theta, idx), expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("penalty", ["l1", "l2", "box", None])
def test_proximal_T_is_the_prox(penalty):
    """T(s) = argmin ρ g(θ) + ½‖θ − s‖², checked against a dense grid per coordinate."""
    m = ProximalGradient("least_squares", penalty, rho=0.5, lam=0.8, lower=-0.3, upper=0.4, n_features=4)
    s = np.array([-1.2, -0.1, 0.25, 0.9])
    theta = m.T(s)
    grid = np.linspace(-2, 2, 400001)
    for j in range(4):
        if penalty == "l1":
            g = 0.8 * np.abs(grid)
        elif penalty == "l2":
            g = 0.4 * grid**2
        elif penalty == "box":
            g = np.where((grid >= -0.3) & (grid <= 0.4), 0.0, np.inf)
        else:
            g = 0.0 * grid
        best = grid[np.argmin(0.5 * g + 0.5 * (grid - s[j]) ** 2)]
        assert abs(theta[j] - best) <= 2e-5


def test_logistic_labels_checked():
    m = ProximalGradient("logistic", None, rho=1.0)
    with pytest.raises(ValueError, match="labels"):
        m.check_data((np.ones((3, 2)), np.array([0.0, 1.0, 1.0])))


def test_sassmm_full_batch_gamma_one_is_ista_and_reaches_sklearn_lasso():
    """Example 1: SA-SSMM with γ = 1 and full batches is proximal gradient."""
    rng = np.random.default_rng(1)
    X, y = _regression(rng)
    m = ProximalGradient("least_squares", "l1", rho=1.0, lam=0.05)
    rho = 1.0 / m.lipschitz([(X, y)])
    m = ProximalGradient("least_squares", "l1", rho=rho, lam=0.05)
    h = SASSMM(m, step=1.0, oracle="full").run((X, y), 60, seed=0)
    np.testing.assert_allclose(h.state["theta"], engine_ista(X, y, 0.05, rho, 60), rtol=0, atol=1e-12)
    h = SASSMM(m, step=1.0, oracle="full").run((X, y), 3000, seed=0)
    ref = Lasso(alpha=0.05, fit_intercept=False, tol=1e-12, max_iter=100000).fit(X, y).coef_
    np.testing.assert_allclose(h.state["theta"], ref, atol=1e-8)


def test_logistic_objective_decreases_under_mm():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((150, 4))
    y = np.where(X @ np.array([1.0, -1.0, 0.5, 0.0]) + 0.3 * rng.standard_normal(150) > 0, 1.0, -1.0)
    m = ProximalGradient("logistic", "l2", rho=1.0, lam=0.1)
    m = ProximalGradient("logistic", "l2", rho=1.0 / m.lipschitz([(X, y)]), lam=0.1)
    h = SASSMM(m, step=1.0, oracle="full", start="model").run((X, y), 40, seed=0, evaluate_every=1)
    obj = np.concatenate([[h.config["initial_objective"]], h.column("objective")])
    assert np.all(np.diff(obj) <= 1e-13)  # MM: monotone
    assert obj[-1] < obj[0] - 0.05
