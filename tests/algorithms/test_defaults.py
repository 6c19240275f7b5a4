# SPDX-License-Identifier: BSD-3-Clause
"""Defaults that work per model (``default_step``), SA-SSMM's default schedule, the Θ-space baseline's
monitoring cadence, and the model set-up hook ``SurrogateModel.prepare``.

Targets:

- EM (Gaussian mixture on iris, 3 clients = the 3 contiguous thirds of the rows, i.e. one species
  each): scikit-learn's ``GaussianMixture`` run to convergence (``tol=1e-14``) from the same
  ``θ⁰`` as FedMM, so both are EM towards the same fixed point; FedMM with its default step must be
  within 1 % of that NLL in a stated number of rounds (the paper's ``('sqrt', 0.05)``, the old default,
  is not: the test can fail).
- Dictionary learning (unit-norm atoms, ``λ = 0.1``): the objective of scikit-learn's one-pass
  ``MiniBatchDictionaryLearning`` (``max_iter=1``, minibatches of 256), scored with the exact LASSO
  evaluation ``DictionaryLearning.objective``, as in ``benchmarks/bench_centralized_dl.py``.
"""
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from sklearn.datasets import load_iris
from sklearn.decomposition import MiniBatchDictionaryLearning
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture as SkGaussianMixture

from fedmm import kernels
from fedmm.algorithms import SASSMM, FedMM, ParameterAveraging
from fedmm.algorithms.sassmm import DETERMINISTIC_STEP, STOCHASTIC_STEP
from fedmm.data import image_patches, synthetic_dictionary
from fedmm.models import (DictionaryLearning, GaussianMixture, InverseToy, MissingValues, PoissonLatent,
                          ProximalGradient, SurrogateModel)
from fedmm.models.missing import MissingData

LAM = 0.1
BATCH = 256


# --------------------------------------------------------------------------- declared defaults
@pytest.mark.parametrize("model, expected", [
    (GaussianMixture(2), 1.0),
    (PoissonLatent([-0.5, 0.0, 0.5]), 1.0),
    (MissingValues(1), 1.0),
    (InverseToy(), 1.0),
    (ProximalGradient(), 1.0),
    (DictionaryLearning(3, 0.1), ("inverse_sqrt", 1.0)),
])
def test_each_model_declares_its_default_step_and_fedmm_records_it(model, expected):
    assert model.default_step == expected
    algo = FedMM(model)
    assert algo.step_source == "model default"
    assert algo.schedule.spec == expected and algo.schedule(1) == 1.0  # γ_1 = 1 for both forms
    assert algo.config()["step_source"] == "model default"
    user = FedMM(model, step=0.5)
    assert user.step_source == "user" and user.config()["step"] == "0.5"


def test_history_config_records_the_resolved_step():
    datas = [np.array([1.0, 2.0]), np.array([4.0, 5.0, 6.0])]
    h = FedMM(InverseToy()).run(datas, 2, seed=0)
    assert h.config["step"] == "1.0" and h.config["step_source"] == "model default"
    # γ = 1 with full batches: one round lands on θ* = (Σ μ_i E_i[Z])^{-1/2} (Remark 1).
    assert h.state["theta"][0] == pytest.approx(InverseToy().minimizer(datas, [0.4, 0.6]), rel=1e-15)
    h = FedMM(DictionaryLearning(2, 0.1)).run([np.eye(3), np.ones((2, 3))], 1, seed=0)
    assert h.config["step"] == "inverse_sqrt(1.0)"


def test_sassmm_default_step_follows_the_oracle():
    assert SASSMM(InverseToy()).schedule.description == repr(DETERMINISTIC_STEP)
    assert SASSMM(InverseToy(), oracle="full").schedule.description == repr(DETERMINISTIC_STEP)
    assert SASSMM(InverseToy(), batch_size=4).schedule.spec == STOCHASTIC_STEP
    assert SASSMM(InverseToy(), batch_size=4, step=0.3).schedule.description == "0.3"
    h = SASSMM(InverseToy(), batch_size=2).run(np.arange(1.0, 7.0), 4, seed=0)
    np.testing.assert_allclose(h["gamma"], np.arange(1, 5) ** -0.5, rtol=0, atol=0)


# --------------------------------------------------------------------------- EM: Gaussian mixture
@pytest.fixture(scope="module")
def iris_clients():
    X = load_iris().data
    return X, [np.ascontiguousarray(b) for b in np.array_split(X, 3)]


def _sklearn_em_optimum(X, theta0, covariance):
    """NLL of scikit-learn's EM run to convergence from θ⁰ (same fixed point as FedMM's EM)."""
    sk = SkGaussianMixture(3, covariance_type=covariance, weights_init=theta0.weights, means_init=theta0.means,
                           precisions_init=np.linalg.inv(theta0.covariance), reg_covar=0.0, tol=1e-14,
                           max_iter=5000).fit(X)
    assert sk.converged_
    return -sk.score(X)


# (covariance, init seed, rounds): the seeds' starts reach the optimum within 1 % after 22 (tied) and
# 21 (full) rounds (measured); the test allows 40.
@pytest.mark.parametrize("covariance, init_seed, rounds", [("tied", 2, 40), ("full", 1, 40)])
def test_gmm_default_step_reaches_sklearn_em_within_one_percent(iris_clients, covariance, init_seed, rounds):
    X, datas = iris_clients
    model = GaussianMixture(3, covariance)
    model.prepare(datas)
    S0 = model.init_statistic(datas, np.random.default_rng(init_seed))
    optimum = _sklearn_em_optimum(X, model.T(S0), covariance)
    h = FedMM(GaussianMixture(3, covariance)).run(datas, rounds, seed=0, init=S0, evaluate_every=rounds)
    assert h["objective"][-1] <= 1.01 * optimum
    assert h["objective"][-1] >= optimum - 1e-9 * abs(optimum)  # EM never goes below its fixed point's NLL
    # The paper's dictionary-learning schedule, the former default, moves the NLL by a few percent only.
    slow = FedMM(GaussianMixture(3, covariance), step=("sqrt", 0.05)).run(datas, rounds, seed=0, init=S0,
                                                                          evaluate_every=rounds)
    assert slow["objective"][-1] > 1.1 * optimum


@pytest.mark.slow
def test_tied_gmm_default_reaches_sklearns_best_iris_fit(iris_clients):
    # From this start EM finds the best tied fit scikit-learn finds over 10 k-means starts (NLL 1.709).
    X, datas = iris_clients
    best = min(-SkGaussianMixture(3, covariance_type="tied", random_state=s, tol=1e-10, max_iter=2000)
               .fit(X).score(X) for s in range(10))
    model = GaussianMixture(3)
    model.prepare(datas)
    S0 = model.init_statistic(datas, np.random.default_rng(2))
    h = FedMM(GaussianMixture(3)).run(datas, 40, seed=0, init=S0, evaluate_every=40)
    assert h["objective"][-1] <= 1.01 * best


def test_poisson_default_step_reaches_the_map_within_one_percent():
    rng = np.random.default_rng(3)
    support = np.array([-1.0, -0.3, 0.4, 1.0])
    datas = [rng.poisson(np.exp(0.8 + rng.choice(support, size=300))).astype(np.float64) for _ in range(3)]
    model = PoissonLatent(support, lam=1.0)
    pooled = np.concatenate(datas)
    exact = minimize_scalar(lambda th: model.objective(pooled, th), bounds=(-5, 5), method="bounded",
                            options={"xatol": 1e-12})
    h = FedMM(PoissonLatent(support, lam=1.0)).run(datas, 20, seed=0, evaluate_every=20)
    assert h["objective"][-1] <= exact.fun + 0.01 * abs(exact.fun)
    assert abs(h.state["theta"][0] - exact.x) <= 0.01 * abs(exact.x)


# --------------------------------------------------------------------------- dictionary learning
def _one_pass_target(X, K):
    est = MiniBatchDictionaryLearning(n_components=K, alpha=LAM, batch_size=BATCH, max_iter=1, fit_algorithm="cd",
                                      random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # scikit-learn's own inner solver, not ours
        est.fit(X)
    return _scorer(X.shape[1], K).objective(X, est.components_.T.copy())


def _scorer(p, K):
    return DictionaryLearning(K, LAM, constraint="unit_norm", n_features=p, tol=1e-9, update_tol=1e-9)


def _trainer(K, update_tol=1e-6, update_max_iter=5000):
    # Inner solvers: the LASSO to a duality gap of 1e-6, the atoms of T to steps of update_tol.
    return DictionaryLearning(K, LAM, constraint="unit_norm", tol=1e-6, update_tol=update_tol,
                              update_max_iter=update_max_iter)


@pytest.fixture(scope="module")
def synthetic():
    X, _, _ = synthetic_dictionary(2000, 20, 15, seed=0)
    return X, _one_pass_target(X, 15)


def test_fedmm_dictionary_default_step_reaches_sklearn_one_pass(synthetic):
    # 4 clients of 500 contiguous rows, full batches: t^{-1/2} reached the target at round 60 (measured;
    # objective checked every 10 rounds); the paper's ('sqrt', 0.05) was at 2.90 against 1.95 after 400.
    X, target = synthetic
    datas = np.array_split(X, 4)
    h = FedMM(_trainer(15)).run(datas, 70, seed=0)
    final = _scorer(20, 15).objective(X, h.theta)
    assert final <= 1.01 * target
    slow = FedMM(_trainer(15), step=("sqrt", 0.05)).run(datas, 70, seed=0)
    assert _scorer(20, 15).objective(X, slow.theta) > 1.2 * target


def test_sassmm_default_schedule_reaches_sklearn_one_pass_synthetic(synthetic):
    # Minibatches of 256: t^{-1/2} reached it at step 60 (checked every 5); 1/t had not after 200 (2.30).
    X, target = synthetic
    h = SASSMM(_trainer(15), batch_size=BATCH).run(X, 70, seed=0)
    assert h.config["step"] == "inverse_sqrt(1.0)"
    assert _scorer(20, 15).objective(X, h.theta) <= 1.01 * target
    averaging = SASSMM(_trainer(15), batch_size=BATCH, step="1/t").run(X, 70, seed=0)
    assert _scorer(20, 15).objective(X, averaging.theta) > 1.1 * target


@pytest.mark.slow
def test_sassmm_default_schedule_reaches_sklearn_one_pass_patches():
    # 5120 normalized 8×8 patches, K = 100: t^{-1/2} reached it at step 30 (checked every 5; 1/t was at
    # 1.105 against 1.097 after 200 steps).
    X = image_patches(BATCH * 20, seed=0)
    target = _one_pass_target(X, 100)
    # T's block-coordinate sweeps crawl on the ill-conditioned s⁽¹⁾ of the first minibatches (K = 100):
    # they stop at 500 sweeps with atom steps above 1e-4 in a few steps and say so; the objective
    # below is scored with exact solvers.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kernels.ConvergenceWarning)
        h = SASSMM(_trainer(100, 1e-4, 500), batch_size=BATCH).run(X, 35, seed=0)
    assert _scorer(64, 100).objective(X, h.theta) <= 1.01 * target


# --------------------------------------------------------------------------- Θ-space baseline monitoring
@pytest.fixture
def toy_datas():
    rng = np.random.default_rng(0)
    return [rng.uniform(1, 2, 30), rng.uniform(5, 9, 20), rng.uniform(2, 3, 25)]


def test_parameter_averaging_monitors_at_the_objective_cadence_by_default(toy_datas):
    h = ParameterAveraging(InverseToy(), step=0.5, batch_size=5).run(toy_datas, 10, seed=1, evaluate_every=4)
    due = [t for t in range(10) if (t + 1) % 4 == 0 or t == 9]
    assert [r["t"] for r in h.records if "E_sp" in r] == due
    assert [r["t"] for r in h.records if "objective" in r] == due
    silent = ParameterAveraging(InverseToy(), step=0.5, batch_size=5).run(toy_datas, 10, seed=1)
    assert [r["t"] for r in silent.records if "E_sp" in r] == [9]  # no objective: the last round only
    every = ParameterAveraging(InverseToy(), step=0.5, batch_size=5).run(toy_datas, 10, seed=1, monitor_every=1)
    assert all("E_sp" in r for r in every.records)
    # Monitoring is reporting only: the iterates are the same.
    assert np.array_equal(every.state["theta"], silent.state["theta"])
    with pytest.raises(ValueError, match="monitor_every"):
        ParameterAveraging(InverseToy()).run(toy_datas, 3, monitor_every=0)


# --------------------------------------------------------------------------- the set-up hook
def _blobs(seed=0, p=3, sizes=(40, 60, 50)):
    rng = np.random.default_rng(seed)
    return [rng.normal(loc=3.0 * i, size=(n, p)) for i, n in enumerate(sizes)]


def test_base_prepare_is_a_documented_no_op():
    model = InverseToy()
    assert model.prepare([np.ones(3)]) is None
    assert "prepare" in SurrogateModel.__dict__ and SurrogateModel.prepare.__doc__


def test_gmm_prepare_learns_p_and_the_moments_from_the_data():
    datas = _blobs()
    model = GaussianMixture(3)
    model.prepare(datas)
    X = np.concatenate(datas)
    assert model.n_features == 3 and model.layout.size == 3 + 3 * 3
    np.testing.assert_allclose(model.second_moment, X.T @ X / X.shape[0], rtol=1e-13)
    model.prepare(datas)  # idempotent
    assert model.n_features == 3
    with pytest.raises(ValueError, match=r"datas\[1\]"):
        GaussianMixture(2).prepare([datas[0], datas[1][:, :2]])
    with pytest.raises(ValueError, match=r"datas\[0\]"):
        GaussianMixture(2, n_features=4).prepare(datas)


def test_build_server_with_init_for_a_gmm_without_n_features():
    datas = _blobs()
    reference = GaussianMixture(3)
    S0 = reference.init_statistic(datas, np.random.default_rng(0))
    weights = [d.shape[0] for d in datas]
    # Without the data the server cannot know p: a clear error naming the hook.
    with pytest.raises(RuntimeError, match=r"prepare\(datas\)"):
        FedMM(GaussianMixture(3)).build_server(3, weights=weights, init=S0)
    model = GaussianMixture(3)
    model.prepare(datas)
    server = FedMM(model).build_server(3, weights=weights, init=S0)
    np.testing.assert_array_equal(server.theta.means, reference.T(S0).means)
    # A remote server gets p and M₂ from the clients' local moments instead.
    remote = GaussianMixture(3)
    remote.set_global_moments([remote.local_moments(d) for d in datas])
    server = FedMM(remote).build_server(3, weights=weights, init=S0)
    np.testing.assert_array_equal(server.theta.covariance, reference.T(S0).covariance)


def test_fedmm_and_sassmm_with_init_call_prepare():
    datas = _blobs()
    S0 = GaussianMixture(3).init_statistic(datas, np.random.default_rng(0))
    h = FedMM(GaussianMixture(3)).run(datas, 3, seed=0, init=S0)
    ref = FedMM(GaussianMixture(3, n_features=3)).run(datas, 3, seed=0, init=S0)
    assert h.equals(ref)  # prepare did what n_features= and the moments would
    X = np.concatenate(datas)
    S0 = GaussianMixture(3).init_statistic([X], np.random.default_rng(1))
    h = SASSMM(GaussianMixture(3), batch_size=10).run(X, 5, seed=0, init=S0)
    assert len(h) == 5 and np.isfinite(h["E_s"]).all()


def test_missing_values_and_poisson_prepare():
    rng = np.random.default_rng(0)
    datas = [MissingData(rng.normal(size=(4, 5, 6)), rng.random((4, 5, 6)) < 0.7) for _ in range(2)]
    model = MissingValues(2)
    model.prepare(datas)
    assert model.shape == (5, 6) and model.layout.size == 30
    with pytest.raises(ValueError, match=r"datas\[1\]"):
        MissingValues(2).prepare([datas[0], MissingData(np.zeros((2, 5, 7)), np.ones((2, 5, 7), bool))])
    counts = [np.array([1.0, 2.0, 3.0]), np.array([0.0, 4.0])]
    poisson = PoissonLatent([-0.5, 0.5], parameterization="explicit_mean")
    poisson.prepare(counts)
    assert poisson.mean_count == pytest.approx(2.0, rel=1e-15)
    joint = PoissonLatent([-0.5, 0.5])
    joint.prepare(counts)
    assert joint.mean_count is None  # the joint parameterization needs nothing from the data
