# SPDX-License-Identifier: BSD-3-Clause
"""Hinge SVM and ℓ1 regression: oracles against dense references, exact LP optima."""
import doctest

import numpy as np
import pytest
from reference import (
    nonsmooth_loss,
    nonsmooth_objective,
    nonsmooth_subgradient,
    nonsmooth_toy_data,
    projected_subgradient_min,
)

import fedmm.models.nonsmooth as nonsmooth_module
from fedmm.algorithms.nonsmooth import SubgradientOracle
from fedmm.models.nonsmooth import HingeSVM, L1Regression

PROBLEMS = [
    ("hinge", HingeSVM(), True),
    ("hinge", HingeSVM(fit_intercept=False), False),
    ("l1", L1Regression(), False),
    ("l1", L1Regression(fit_intercept=True), True),
]


@pytest.mark.parametrize("kind,problem,intercept", PROBLEMS)
def test_values_and_subgradients_match_dense_reference(kind, problem, intercept):
    datas = nonsmooth_toy_data(kind, n_clients=3, m=9, d=4, seed=2)
    rng = np.random.default_rng(0)
    st = problem.stack(datas)
    W = rng.normal(size=(3, st.n_params))
    G = problem.subgradients(st, W)
    for i, (A, y) in enumerate(datas):
        assert problem.value((A, y), W[i]) == pytest.approx(nonsmooth_loss(kind, A, y, W[i], intercept), rel=1e-13)
        ref = nonsmooth_subgradient(kind, A, y, W[i], intercept)
        np.testing.assert_allclose(problem.subgradient((A, y), W[i]), ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(G[i], ref, rtol=1e-12, atol=1e-12)
    assert problem.objective(datas, W[0]) == pytest.approx(nonsmooth_objective(kind, datas, W[0], intercept))


@pytest.mark.parametrize("kind,problem", [("hinge", HingeSVM()), ("l1", L1Regression())])
def test_minibatch_oracle_is_unbiased(kind, problem):
    datas = nonsmooth_toy_data(kind, n_clients=3, m=20, d=3, seed=4)
    st = problem.stack(datas)
    W = np.random.default_rng(1).normal(size=(3, st.n_params)) * 0.3
    full = problem.subgradients(st, W)
    seeds = np.random.SeedSequence(5).spawn(3)
    oracle = SubgradientOracle(problem, st, 0.1, seeds)
    assert list(oracle.batch) == [2, 2, 2] and np.allclose(oracle.scale, 10.0)
    draws = np.array([oracle(W) for _ in range(4000)])
    mean, se = draws.mean(axis=0), draws.std(axis=0, ddof=1) / np.sqrt(draws.shape[0])
    # 5 standard errors: the chance of a false failure over 24 coordinates is < 1e-4
    assert np.all(np.abs(mean - full) <= 5 * se + 1e-12)


@pytest.mark.parametrize("kind,problem,intercept", [PROBLEMS[0], PROBLEMS[2]])
def test_lp_optimum_matches_projected_subgradient_reference(kind, problem, intercept):
    datas = nonsmooth_toy_data(kind, n_clients=3, m=10, d=2, seed=3)
    opt = problem.minimize(datas)
    assert opt.value == pytest.approx(problem.objective(datas, opt.w), rel=1e-12)
    assert opt.gap <= 1e-7 * max(1.0, opt.value)
    best, values = projected_subgradient_min(kind, datas, intercept, n_iter=6000, step0=0.5)
    # F* is a lower bound on every point the reference visits ...
    assert values.min() >= opt.value - 1e-7 * max(1.0, opt.value)
    # ... and the reference's best iterate approaches it (O(1/√T) method, T = 6000)
    assert best - opt.value <= 2e-3 * max(1.0, opt.value)


@pytest.mark.parametrize("kind,problem,intercept", [PROBLEMS[0], PROBLEMS[2]])
def test_ball_constrained_optimum_by_cutting_planes(kind, problem, intercept):
    datas = nonsmooth_toy_data(kind, n_clients=3, m=10, d=2, seed=3)
    free = problem.minimize(datas)
    radius = 0.5 * np.linalg.norm(free.w)  # binding constraint
    opt = problem.minimize(datas, radius, tol=1e-7)
    assert opt.n_cuts > 0 and np.linalg.norm(opt.w) <= radius * (1 + 1e-12)
    assert opt.lower_bound <= opt.value <= opt.lower_bound + 1e-7 * max(1.0, opt.value)
    assert opt.value > free.value  # the ball excludes every unconstrained minimizer here
    best, values = projected_subgradient_min(kind, datas, intercept, radius=radius, n_iter=6000, step0=0.5)
    assert values.min() >= opt.lower_bound - 1e-9
    assert best - opt.value <= 2e-3 * max(1.0, opt.value)
    # a ball that contains the LP solution changes nothing
    loose = problem.minimize(datas, 2 * np.linalg.norm(free.w))
    assert loose.n_cuts == 0 and loose.value == pytest.approx(free.value, rel=1e-12)


def test_bad_data_raise_clear_errors():
    A, y = np.ones((4, 2)), np.array([1.0, -1.0, 1.0, -1.0])
    svm = HingeSVM()
    with pytest.raises(ValueError, match=r"labels in \{-1, \+1\}"):
        svm.check_data((A, np.array([0.0, 1.0, 1.0, 1.0])))
    with pytest.raises(ValueError, match=r"y\)' of shape \(4,\)"):
        svm.check_data((A, y[:3]))
    with pytest.raises(ValueError, match="columns like datas\\[0\\]"):
        svm.stack([(A, y), (np.ones((4, 3)), y)])
    with pytest.raises(ValueError, match="finite"):
        L1Regression().stack([(np.full((2, 2), np.nan), np.zeros(2))])
    with pytest.raises(TypeError, match="pair \\(A, y\\)"):
        svm.stack([A])
    with pytest.raises(ValueError, match="non-empty list"):
        svm.stack([])
    with pytest.raises(ValueError, match=r"'w' of shape \(3,\)"):
        svm.objective([(A, y)], np.zeros(2))
    with pytest.raises(ValueError, match=r"'radius' in \(0.0, inf\]"):
        svm.minimize([(A, y)], radius=0.0)


def test_module_examples():
    failures, _ = doctest.testmod(nonsmooth_module, optionflags=doctest.ELLIPSIS)
    assert failures == 0
