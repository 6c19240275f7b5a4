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
        FederatedGaussianMixture(covariance_type="diagonal").fit(Y)
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
    est = FederatedGaussianMixture(3, covariance_type=covariance_type, tol=0.0, n_rounds=15,
                                   init_params="random_from_data",
                                   control_variate_step=0.1, random_state=7, **settings).fit(X, clients=clients)
    datas = [X[clients == c] for c in np.unique(clients)]
    ref = FedMM(GaussianMixture(3, covariance_type), control_variate_step=0.1, **settings).run(datas, 15, seed=7)
    assert est.history_.equals(ref)
    np.testing.assert_array_equal(est.means_, ref.theta.means)
    np.testing.assert_array_equal(est.covariances_, ref.theta.covariance)
    np.testing.assert_array_equal(est.weights_, ref.theta.weights)
    assert est.n_iter_ == 15 and est.n_features_in_ == 3 and est.initial_statistic_ is None
    assert est.client_labels_.tolist() == [0, 1, 2, 3]


def test_gaussian_mixture_kmeanspp_start_is_passed_to_fedmm(blobs):
    X, clients = blobs
    est = FederatedGaussianMixture(3, tol=0.0, n_rounds=10, random_state=3).fit(X, clients=clients)
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
    runs = [FederatedGaussianMixture(3, tol=0.0, n_rounds=8, init_params="random_from_data", random_state=s)
            for s in (np.random.SeedSequence(11, spawn_key=(k,)) for k in range(3))]
    scores = [r.fit(X).score(X) for r in runs]
    best = FederatedGaussianMixture(3, tol=0.0, n_rounds=8, n_init=3, init_params="random_from_data",
                                    random_state=11).fit(X)
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
    a = FederatedGaussianMixture(2, tol=0.0, n_rounds=4, random_state=5).fit(X)
    b = FederatedGaussianMixture(2, tol=0.0, n_rounds=4, random_state=np.random.RandomState(9)).fit(X)
    c = FederatedGaussianMixture(2, tol=0.0, n_rounds=4, random_state=np.random.RandomState(9)).fit(X)
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
    est = FederatedGaussianMixture(3, tol=0.0, n_rounds=30, init_params="random_from_data", random_state=1).fit(X)
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


# --------------------------------------------------------------------------- scikit-learn parity (issue 25)
def _sklearn_from_statistic(s, covariance_type, n_features, G=3, **kwargs):
    """scikit-learn's GaussianMixture started at θ_0 = T(Ŝ_0) (the FedMM run's first broadcast), reg_covar=0."""
    w = s[:G]
    means = s[G:G + G * n_features].reshape(G, n_features) / w[:, None]
    second = s[G + G * n_features:].reshape(G, n_features, n_features) / w[:, None, None]
    cov = second - means[:, :, None] * means[:, None, :]
    if covariance_type == "full":
        precisions = np.linalg.inv(cov)
    else:
        var = np.diagonal(cov, axis1=1, axis2=2)
        precisions = 1.0 / (var if covariance_type == "diag" else var.mean(axis=1))
    return SkGaussianMixture(G, covariance_type=covariance_type, weights_init=w / w.sum(), means_init=means,
                             precisions_init=precisions, reg_covar=0.0, **kwargs)


@pytest.mark.parametrize("covariance_type", ["full", "diag", "spherical"])
def test_tol_n_iter_converged_and_covariance_types_are_sklearn_em(covariance_type):
    # One client, full batches, γ = 1, no compression: each round is one EM iteration.  scikit-learn's
    # iteration n evaluates the lower bound at θ_{n−1} then runs the M-step; FedMM's tol rule stops one
    # round after |ℓ(θ_k) − ℓ(θ_{k−1})| < tol, so n_iter_, converged_ and the parameters are the same.
    X = load_iris().data
    est = FederatedGaussianMixture(3, covariance_type=covariance_type, tol=1e-4, reg_covar=0.0, n_rounds=200,
                                   random_state=0).fit(X)
    sk = _sklearn_from_statistic(est.initial_statistic_, covariance_type, 4, tol=1e-4, max_iter=200).fit(X)
    assert sk.converged_ and est.converged_
    assert est.n_iter_ == sk.n_iter_ < 200
    assert est.history_.config["stopped_early"] is True and len(est.history_) == est.n_iter_
    assert est.covariances_.shape == sk.covariances_.shape
    np.testing.assert_allclose(est.means_, sk.means_, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(est.weights_, sk.weights_, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(est.covariances_, sk.covariances_, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(est.precisions_cholesky_, sk.precisions_cholesky_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(est.score_samples(X), sk.score_samples(X), rtol=1e-9)
    assert est.bic(X) == pytest.approx(sk.bic(X), rel=1e-9)
    # One round short of convergence: neither converges, both warn, both ran all their iterations.
    short = sk.n_iter_ - 1
    with pytest.warns(kernels.ConvergenceWarning, match="did not converge"):
        est_short = clone(est).set_params(n_rounds=short).fit(X)
    with pytest.warns(ConvergenceWarning):
        sk_short = clone(sk).set_params(max_iter=short).fit(X)
    assert (est_short.converged_, est_short.n_iter_) == (sk_short.converged_, sk_short.n_iter_) == (False, short)


def test_tol_zero_runs_every_round_and_stops_nothing(blobs):
    X, _ = blobs
    est = FederatedGaussianMixture(3, tol=0.0, n_rounds=12, random_state=0).fit(X)
    assert est.n_iter_ == 12 and not est.converged_ and "stopped_early" not in est.history_.config


def test_warm_start_continues_the_fit(blobs):
    X, clients = blobs
    one = FederatedGaussianMixture(3, tol=0.0, n_rounds=10, random_state=2).fit(X, clients=clients)
    two = FederatedGaussianMixture(3, tol=0.0, n_rounds=4, random_state=2).fit(X, clients=clients)
    two.set_params(warm_start=True, n_rounds=6).fit(X, clients=clients)
    assert two.n_iter_ == 6
    np.testing.assert_allclose(two.means_, one.means_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(two.covariances_, one.covariances_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(two.weights_, one.weights_, rtol=1e-10)
    # warm_start=False (the default) starts afresh: the same fit again
    again = clone(one).fit(X, clients=clients)
    np.testing.assert_array_equal(again.means_, one.means_)
    with pytest.raises(ValueError, match="'X'.*warm_start"):
        two.fit(X[:, :2], clients=clients)


@pytest.mark.parametrize("covariance_type", ["full", "tied", "diag", "spherical"])
def test_sample_is_sklearns_sample(blobs, covariance_type):
    X, _ = blobs
    est = FederatedGaussianMixture(3, covariance_type=covariance_type, tol=0.0, n_rounds=20, random_state=4).fit(X)
    sk = SkGaussianMixture(3, covariance_type=covariance_type, random_state=4)
    for name in ("weights_", "means_", "covariances_", "precisions_cholesky_"):
        setattr(sk, name, getattr(est, name))
    n = 4000
    Xs, ys = est.sample(n)
    Xk, yk = sk.sample(n)
    assert Xs.shape == (n, 3) and ys.shape == (n,)
    # the same draws as scikit-learn from the same random_state and parameters
    np.testing.assert_array_equal(ys, yk)
    np.testing.assert_allclose(Xs, Xk, rtol=1e-12, atol=1e-12)
    # and the moments of the fitted mixture: counts within 5 binomial sd, means within 5 sd of the mean
    full = np.broadcast_to(_full_cov(est), (3, 3, 3))
    for j in range(3):
        count = np.sum(ys == j)
        assert abs(count - n * est.weights_[j]) < 5 * np.sqrt(n * est.weights_[j] * (1 - est.weights_[j]))
        sd = np.sqrt(np.diag(full[j]) / count)
        assert np.all(np.abs(Xs[ys == j].mean(axis=0) - est.means_[j]) < 5 * sd)
    with pytest.raises(ValueError, match="n_samples"):
        est.sample(0)


def _full_cov(est):
    cov = est.covariances_
    p = est.means_.shape[1]
    return {"full": cov, "tied": cov, "diag": cov[:, :, None] * np.eye(p) if cov.ndim == 2 else cov,
            "spherical": cov[:, None, None] * np.eye(p) if cov.ndim == 1 else cov}[est.covariance_type]


def test_verbose_shows_the_progress_bar_and_logs_rounds(blobs, capsys, caplog):
    X, _ = blobs
    FederatedGaussianMixture(3, n_rounds=5, tol=0.0, random_state=0).fit(X)
    assert capsys.readouterr().err == ""
    with caplog.at_level("INFO", logger="fedmm.estimators"):
        FederatedGaussianMixture(3, n_rounds=5, tol=0.0, verbose=2, random_state=0).fit(X)
    assert "round" in capsys.readouterr().err  # tqdm's bar (progress=True)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [f"round {k}" for k in range(1, 6)]
    with pytest.raises(ValueError, match="verbose"):
        FederatedGaussianMixture(verbose=-1).fit(X)
    with pytest.raises(ValueError, match="tol"):
        FederatedGaussianMixture(tol=-1.0).fit(X)
    with pytest.raises(TypeError, match="warm_start"):
        FederatedGaussianMixture(warm_start="yes").fit(X)


def test_compressed_fit_default_step_is_close_to_the_uncompressed_fit():
    """PCA-20 digits, one client per label, 8-bit stochastic rounding with the default step (0.05 under
    compression): within 12 nats per sample of the uncompressed fit for every one of 10 seeds (γ = 1 under
    the same compression ends near −1e7)."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA

    X, y = load_digits(return_X_y=True)
    Z = PCA(20, random_state=0).fit_transform(X)
    for seed in range(10):
        plain = FederatedGaussianMixture(10, random_state=seed).fit(Z, clients=y)
        packed = FederatedGaussianMixture(10, compressor=StochasticRounding(bits=8), random_state=seed)
        packed.fit(Z, clients=y)
        assert packed.score(Z) > plain.score(Z) - 12.0, seed


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
