# SPDX-License-Identifier: BSD-3-Clause
"""fedmm.estimators: scikit-learn's estimator checks, the FedMM run each estimator wraps (bit for bit),
and the estimators' answers against scikit-learn and SciPy references.

scikit-learn's checks (``parametrize_with_checks``) all apply and pass, with no expected failure; one
is skipped by scikit-learn itself:

- ``check_array_api_input``: skipped unless ``SCIPY_ARRAY_API=1`` (the estimators take NumPy input
  only; they do not declare array-API support).

What the checks cannot see: they call ``fit(X)`` and ``fit(X, y)``, so they exercise the default
split (``n_clients`` contiguous blocks, one client by default), never ``clients=``; the grouped fit is
tested here (``test_*_reproduces_the_fedmm_run``, ``test_split_rows_*``).  No estimator takes
``sample_weight``, so the sample-weight checks do not run.
"""
import warnings

import numpy as np
import pytest
from scipy.stats import multivariate_normal
from sklearn.base import clone
from sklearn.datasets import load_iris
from sklearn.decomposition import sparse_encode
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture as SkGaussianMixture
from sklearn.utils.estimator_checks import parametrize_with_checks

from fedmm import kernels
from fedmm.algorithms import FedMM
from fedmm.compression import StochasticRounding
from fedmm.estimators import FederatedDictionaryLearning, FederatedGaussianMixture, split_rows
from fedmm.models import DictionaryLearning, GaussianMixture


# --------------------------------------------------------------------------- scikit-learn's checks
@parametrize_with_checks([FederatedGaussianMixture(n_rounds=5, random_state=0),
                          FederatedDictionaryLearning(3, alpha=0.1, n_rounds=5, random_state=0)])
def test_sklearn_estimator_checks(estimator, check):
    # The checks' data (e.g. rows drawn around (100, 100) with 3 atoms in 2-D) make the atoms of the
    # dictionary nearly collinear; the unit-norm block-coordinate update T then stops at its sweep cap
    # and says so with fedmm's ConvergenceWarning (an inner-solver accuracy notice, which this
    # project's pytest configuration turns into an error).  The checks' properties are what is tested.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", kernels.ConvergenceWarning)
        check(estimator)


# --------------------------------------------------------------------------- the split into clients
def test_split_rows_groups_by_label_in_row_order():
    X = np.arange(20.0).reshape(10, 2)
    labels = np.array([3, 1, 3, 2, 1, 1, 3, 2, 2, 3])
    datas, order = split_rows(X, labels)
    assert order.tolist() == [1, 2, 3]
    for data, label in zip(datas, order):
        np.testing.assert_array_equal(data, X[labels == label])
        assert data.flags.c_contiguous and data.dtype == np.float64
    datas, order = split_rows(X, n_clients=3)
    assert order.tolist() == [0, 1, 2] and [d.shape[0] for d in datas] == [4, 3, 3]
    np.testing.assert_array_equal(np.concatenate(datas), X)


def test_split_rows_errors_name_the_argument():
    X = np.zeros((4, 2))
    with pytest.raises(ValueError, match=r"'clients' of shape \(n_samples,\) = \(4,\)"):
        split_rows(X, [0, 1, 0])
    with pytest.raises(ValueError, match="'n_clients' <= n_samples = 4"):
        split_rows(X, n_clients=5)
    Y = np.random.default_rng(0).normal(size=(10, 2))
    with pytest.raises(ValueError, match="n_clients"):
        FederatedGaussianMixture(n_clients=0).fit(Y)
    with pytest.raises(ValueError, match="'alpha'"):
        FederatedDictionaryLearning(alpha=0.0).fit(Y)
    with pytest.raises(ValueError, match="'ridge'"):
        FederatedDictionaryLearning(ridge=-1.0).fit(Y)
    with pytest.raises(ValueError, match="covariance_type"):
        FederatedGaussianMixture(covariance_type="diag").fit(Y)
    with pytest.raises(ValueError, match="init_params"):
        FederatedGaussianMixture(init_params="kmeans").fit(Y)
    with pytest.raises(ValueError, match="n_samples >= n_components = 11"):
        FederatedGaussianMixture(11).fit(Y)


# --------------------------------------------------------------------------- the wrapped FedMM run
@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(5)
    X = np.concatenate([rng.normal(m, 1.0, size=(60, 3)) for m in (-4.0, 0.0, 4.0)])
    rng.shuffle(X)
    clients = rng.integers(0, 4, size=X.shape[0])
    return X, clients


@pytest.mark.parametrize("covariance_type", ["full", "tied"])
def test_gaussian_mixture_reproduces_the_fedmm_run(blobs, covariance_type):
    X, clients = blobs
    settings = dict(clients_per_round=3, compressor=StochasticRounding(8), batch_size=20, step=("inverse_sqrt", 1.0))
    est = FederatedGaussianMixture(3, covariance_type=covariance_type, n_rounds=15, init_params="random_from_data",
                                   control_variate_step=0.1, random_state=7, **settings).fit(X, clients=clients)
    datas = [X[clients == c] for c in np.unique(clients)]
    ref = FedMM(GaussianMixture(3, covariance_type), alpha=0.1, **settings).run(datas, 15, seed=7)
    assert est.history_.equals(ref)
    np.testing.assert_array_equal(est.means_, ref.theta.means)
    np.testing.assert_array_equal(est.covariances_, ref.theta.covariance)
    np.testing.assert_array_equal(est.weights_, ref.theta.weights)
    assert est.n_iter_ == 15 and est.n_features_in_ == 3 and est.initial_statistic_ is None
    assert est.client_labels_.tolist() == [0, 1, 2, 3]


def test_gaussian_mixture_kmeanspp_start_is_passed_to_fedmm(blobs):
    X, clients = blobs
    est = FederatedGaussianMixture(3, n_rounds=10, random_state=3).fit(X, clients=clients)
    datas = [X[clients == c] for c in np.unique(clients)]
    ref = FedMM(GaussianMixture(3, "full")).run(datas, 10, seed=3, init=est.initial_statistic_)
    assert est.history_.equals(ref)
    # Ŝ_0 is the E-step at (1/G, k-means++ seeds, pooled covariance): its means block, divided by its
    # weights block, are the M-step means of one EM step from seeds that are rows of X.
    model = GaussianMixture(3, "full")
    model.prepare(datas)
    theta0 = model.T(est.initial_statistic_)
    assert np.all(np.abs(theta0.means).max(axis=1) < 8.0)


def test_n_init_keeps_the_best_run(blobs):
    X, _ = blobs
    runs = [FederatedGaussianMixture(3, n_rounds=8, init_params="random_from_data", random_state=s)
            for s in (np.random.SeedSequence(11, spawn_key=(k,)) for k in range(3))]
    scores = [r.fit(X).score(X) for r in runs]
    best = FederatedGaussianMixture(3, n_rounds=8, n_init=3, init_params="random_from_data", random_state=11).fit(X)
    assert best.score(X) == max(scores)
    assert best.lower_bound_ == pytest.approx(best.score(X), rel=1e-12)


def test_dictionary_learning_reproduces_the_fedmm_run(blobs):
    X, clients = blobs
    est = FederatedDictionaryLearning(4, alpha=0.2, ridge=0.1, n_rounds=12, batch_size=16, clients_per_round=2,
                                      random_state=4).fit(X, clients=clients)
    datas = [X[clients == c] for c in np.unique(clients)]
    model = DictionaryLearning(4, 0.2, 0.1, "unit_norm", tol=1e-6, update_tol=1e-6, update_max_iter=1000)
    ref = FedMM(model, batch_size=16, clients_per_round=2).run(datas, 12, seed=4)
    assert est.history_.equals(ref)
    np.testing.assert_array_equal(est.components_, np.asarray(ref.theta).T)
    assert np.all(np.linalg.norm(est.components_, axis=1) <= 1.0 + 1e-12)


def test_random_state_forms():
    X = np.random.default_rng(0).normal(size=(40, 2))
    a = FederatedGaussianMixture(2, n_rounds=4, random_state=5).fit(X)
    b = FederatedGaussianMixture(2, n_rounds=4, random_state=np.random.RandomState(9)).fit(X)
    c = FederatedGaussianMixture(2, n_rounds=4, random_state=np.random.RandomState(9)).fit(X)
    assert a.history_.config["seed"] == 5
    assert b.history_.equals(c.history_)
    assert clone(a).fit(X).history_.equals(a.history_)
    with pytest.raises(TypeError, match="random_state"):
        FederatedGaussianMixture(random_state="seed").fit(X)


# --------------------------------------------------------------------------- answers against references
def test_gaussian_mixture_is_sklearn_em_from_the_same_start():
    # One client, full batches, γ = 1: round t is one EM iteration (clients' E-step at θ_t, server's M-step
    # gives θ_{t+1}), from θ_0 = T(Ŝ_0), the broadcast of a 0-round run with the same seed.  scikit-learn
    # runs the same 30 EM iterations from θ_0 (its covariance guard adds reg_covar to the diagonal: 0 here;
    # ours floors eigenvalues at 1e-6, which does nothing on iris).
    X = load_iris().data
    # (random_state=0 starts with two rows of one tight cluster: a covariance collapses to the 1e-6 floor,
    # where scikit-learn, without reg_covar, stops with an error.)
    est = FederatedGaussianMixture(3, n_rounds=30, init_params="random_from_data", random_state=1).fit(X)
    model = GaussianMixture(3, "full")
    model.prepare([X])
    theta0 = model.theta_from_vector(FedMM(GaussianMixture(3, "full")).run([X], 0, seed=1).state["theta"])
    sk = SkGaussianMixture(3, covariance_type="full", weights_init=theta0.weights, means_init=theta0.means,
                           precisions_init=np.linalg.inv(theta0.covariance), reg_covar=0.0, tol=0.0, max_iter=30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # tol=0: scikit-learn runs all 30 and says so
        sk.fit(X)
    np.testing.assert_allclose(est.means_, sk.means_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(est.weights_, sk.weights_, rtol=1e-8)
    np.testing.assert_allclose(est.covariances_, sk.covariances_, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(est.score_samples(X), sk.score_samples(X), rtol=1e-8)
    np.testing.assert_allclose(est.predict_proba(X), sk.predict_proba(X), atol=1e-8)


def test_gaussian_mixture_density_methods_against_scipy(blobs):
    X, clients = blobs
    est = FederatedGaussianMixture(3, n_rounds=20, random_state=0).fit(X, clients=clients)
    dens = sum(w * multivariate_normal(m, c).pdf(X) for w, m, c in zip(est.weights_, est.means_, est.covariances_))
    np.testing.assert_allclose(est.score_samples(X), np.log(dens), rtol=1e-10)
    assert est.score(X) == pytest.approx(np.log(dens).mean(), rel=1e-10)
    proba = est.predict_proba(X)
    joint = np.stack([w * multivariate_normal(m, c).pdf(X)
                      for w, m, c in zip(est.weights_, est.means_, est.covariances_)], axis=1)
    np.testing.assert_allclose(proba, joint / joint.sum(axis=1, keepdims=True), atol=1e-12)
    np.testing.assert_array_equal(est.predict(X), proba.argmax(axis=1))
    np.testing.assert_array_equal(clone(est).fit_predict(X, clients=clients), est.predict(X))
    # Σ⁻¹ = U Uᵀ with U = precisions_cholesky_
    for U, C in zip(est.precisions_cholesky_, est.covariances_):
        np.testing.assert_allclose(U @ U.T, np.linalg.inv(C), rtol=1e-9)
    # Information criteria: k = G p(p+1)/2 + G p + G − 1 free parameters (full covariances).
    n, k = X.shape[0], 3 * 6 + 3 * 3 + 2
    assert est.bic(X) == pytest.approx(-2 * est.score(X) * n + k * np.log(n), rel=1e-12)
    assert est.aic(X) == pytest.approx(-2 * est.score(X) * n + 2 * k, rel=1e-12)


def test_dictionary_learning_transform_is_the_lasso_of_sklearn(blobs):
    X, clients = blobs
    est = FederatedDictionaryLearning(5, alpha=0.3, n_rounds=10, random_state=0, tol=1e-12).fit(X, clients=clients)
    codes = est.transform(X)
    ref = sparse_encode(X, est.components_, algorithm="lasso_cd", alpha=0.3, max_iter=100_000)
    np.testing.assert_allclose(codes, ref, atol=1e-6)
    est.set_params(transform_alpha=1.0)
    assert np.count_nonzero(est.transform(X)) < np.count_nonzero(codes)  # a larger λ gives sparser codes
    # The training objective (28) at the fitted dictionary, from the codes of transform:
    # mean ½‖x − hD‖² + λ‖h‖₁ equals DictionaryLearning.objective.
    est.set_params(transform_alpha=None)
    residual = X - codes @ est.components_
    ours = np.mean(0.5 * np.sum(residual ** 2, axis=1) + 0.3 * np.abs(codes).sum(axis=1))
    model = DictionaryLearning(5, 0.3, n_features=3, tol=1e-12)
    assert ours == pytest.approx(model.objective(X, est.components_.T), rel=1e-8)


# --------------------------------------------------------------------------- dictionary learning: transformer API
def test_dictionary_learning_inverse_transform_is_sklearns(blobs):
    # scikit-learn's MiniBatchDictionaryLearning.inverse_transform is codes @ components_, for any codes
    from sklearn.decomposition import MiniBatchDictionaryLearning

    X, clients = blobs
    est = FederatedDictionaryLearning(3, alpha=0.2, n_rounds=8, random_state=0).fit(X, clients=clients)
    codes = est.transform(X)
    np.testing.assert_array_equal(est.inverse_transform(codes), codes @ est.components_)
    sk = MiniBatchDictionaryLearning(3, alpha=0.2, max_iter=2, random_state=0).fit(X)
    sk.components_ = est.components_.copy()
    np.testing.assert_allclose(est.inverse_transform(codes), sk.inverse_transform(codes), rtol=0, atol=1e-12)
    assert np.linalg.norm(X - est.inverse_transform(codes)) < np.linalg.norm(X)  # the codes explain part of X
    with pytest.raises(ValueError, match="'X' of shape \\(n_samples, n_components\\)"):
        est.inverse_transform(X[:, :2])


def test_dictionary_learning_feature_names_and_pandas_output_as_sklearn(blobs):
    pd = pytest.importorskip("pandas")
    from sklearn.decomposition import MiniBatchDictionaryLearning

    X, clients = blobs
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    est = FederatedDictionaryLearning(4, alpha=0.2, n_rounds=5, random_state=0).fit(frame, clients=clients)
    sk = MiniBatchDictionaryLearning(4, alpha=0.2, max_iter=2, random_state=0).fit(frame)
    names = est.get_feature_names_out()
    # the same convention as scikit-learn's: the lower-case class name and the atom's index
    assert names.tolist() == [n.replace("minibatchdictionarylearning", "federateddictionarylearning")
                              for n in sk.get_feature_names_out()]
    assert names.tolist() == [f"federateddictionarylearning{i}" for i in range(4)]
    est.set_output(transform="pandas")
    out = est.transform(frame)
    assert isinstance(out, pd.DataFrame)
    assert out.columns.tolist() == names.tolist() and out.index.equals(frame.index)
    np.testing.assert_array_equal(out.to_numpy(), est.set_output(transform="default").transform(frame))


def test_dictionary_learning_score_is_minus_the_objective(blobs):
    X, clients = blobs
    est = FederatedDictionaryLearning(3, alpha=0.3, ridge=0.05, n_rounds=10, tol=1e-12,
                                      random_state=1).fit(X, clients=clients)
    # minus mean_j [½‖x_j − h_j D‖² + α‖h_j‖₁] − η‖D‖²_F, the codes h_j from scikit-learn's LASSO
    codes = sparse_encode(X, est.components_, algorithm="lasso_cd", alpha=0.3, max_iter=100_000)
    residual = X - codes @ est.components_
    ref = -(np.mean(0.5 * np.sum(residual ** 2, axis=1) + 0.3 * np.abs(codes).sum(axis=1))
            + 0.05 * np.sum(est.components_ ** 2))
    assert est.score(X) == pytest.approx(ref, rel=1e-8)
    # the training alpha, not transform_alpha; and more rounds fit the training rows better
    assert est.set_params(transform_alpha=5.0).score(X) == est.set_params(transform_alpha=None).score(X)
    short = FederatedDictionaryLearning(3, alpha=0.3, ridge=0.05, n_rounds=1, random_state=1).fit(X, clients=clients)
    assert short.score(X) < est.score(X)


@pytest.mark.parametrize("options", [{}, {"batch_size": 16, "clients_per_round": 2, "control_variate_step": 0.1,
                                          "compressor": StochasticRounding(bits=8), "step": ("sqrt", 0.5)}])
def test_dictionary_learning_partial_fit_continues_the_run(blobs, options):
    X, clients = blobs
    one = FederatedDictionaryLearning(3, alpha=0.2, n_rounds=9, random_state=3, **options).fit(X, clients=clients)
    parts = FederatedDictionaryLearning(3, alpha=0.2, n_rounds=4, random_state=3, **options)
    parts.partial_fit(X, clients=clients)  # unfitted: fit
    parts.set_params(n_rounds=2).partial_fit(X, clients=clients)
    parts.set_params(n_rounds=3).partial_fit(X, clients=clients)
    # bit for bit one run of 4 + 2 + 3 rounds: same dictionary, same records (timings aside)
    np.testing.assert_array_equal(parts.components_, one.components_)
    assert parts.n_iter_ == one.n_iter_ == 9 and len(parts.history_) == 9
    timing = ["wall_time", "monitor_time"]
    assert parts.history_.to_pandas().drop(columns=timing).equals(one.history_.to_pandas().drop(columns=timing))
    assert parts.history_.config == one.history_.config


def test_dictionary_learning_partial_fit_on_new_rows_starts_from_the_fitted_statistic(blobs):
    X, clients = blobs
    est = FederatedDictionaryLearning(3, alpha=0.2, n_rounds=6, n_clients=2, random_state=0).fit(X[:90])
    S = est.history_.state["S"]
    est.partial_fit(X[90:])
    ref = FedMM(DictionaryLearning(3, 0.2, 0.0, "unit_norm", tol=1e-6, update_tol=1e-6, update_max_iter=1000)).run(
        split_rows(X[90:], n_clients=2)[0], 6, seed=0, init=S)
    np.testing.assert_array_equal(est.components_, np.asarray(ref.theta).T)
    assert est.n_iter_ == 12 and len(est.history_) == 6
    with pytest.raises(ValueError, match="'n_components'"):
        est.set_params(n_components=4).partial_fit(X)
    with pytest.raises(ValueError, match="features"):
        est.set_params(n_components=3).partial_fit(X[:, :2])


def test_dictionary_learning_grid_search_routes_clients(blobs):
    from sklearn.model_selection import GridSearchCV

    X, clients = blobs
    est = FederatedDictionaryLearning(3, n_rounds=4, random_state=0)
    search = GridSearchCV(est, {"alpha": [0.05, 1.0]}, cv=3).fit(X, clients=clients)  # scored by score()
    assert search.best_estimator_.client_labels_.tolist() == np.unique(clients).tolist()
    scores = search.cv_results_["mean_test_score"]
    assert np.all(np.isfinite(scores)) and search.best_params_["alpha"] == [0.05, 1.0][int(np.argmax(scores))]


# --------------------------------------------------------------------------- fedmm's ConvergenceWarning
def test_convergence_warning_is_sklearns():
    import subprocess
    import sys

    from sklearn.exceptions import ConvergenceWarning as SkConvergenceWarning

    assert issubclass(kernels.ConvergenceWarning, SkConvergenceWarning)
    assert issubclass(kernels.ConvergenceWarning, UserWarning)
    rng = np.random.default_rng(0)
    D, Z = rng.standard_normal((6, 4)), rng.standard_normal((6, 5))
    with pytest.warns(kernels.ConvergenceWarning, match="max_iter=1"):
        kernels.lasso(D, Z, 0.01, max_iter=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", SkConvergenceWarning)  # scikit-learn's filter silences fedmm's warning
        kernels.lasso(D, Z, 0.01, max_iter=1)
    # importing fedmm (and its kernels) does not import scikit-learn: the class is built on first lookup
    code = ("import sys, fedmm, fedmm.kernels; assert 'sklearn' not in sys.modules; "
            "from fedmm.kernels import ConvergenceWarning as C; import sklearn.exceptions as E; "
            "assert issubclass(C, E.ConvergenceWarning) and 'sklearn' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
