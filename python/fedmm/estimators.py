# SPDX-License-Identifier: BSD-3-Clause
"""scikit-learn estimators that fit by FedMM: :class:`FederatedGaussianMixture`, :class:`FederatedDictionaryLearning`.

Each estimator simulates a federation in one process: the rows of ``X`` are
split between clients by the ``clients`` argument of ``fit`` (one label per
row, like scikit-learn's ``groups``), and :class:`fedmm.algorithms.FedMM`
runs on those clients' data with the estimator's hyper-parameters.  The run
is exactly the one ``FedMM(...).run(datas, n_rounds, seed=...)`` would give:
the estimator adds scikit-learn's conventions around it and keeps the run's
:class:`fedmm.History` as ``history_``.

Conventions (scikit-learn's)
----------------------------
- Every hyper-parameter is an ``__init__`` argument stored unchanged and
  validated in ``fit``; ``get_params``/``set_params`` come from
  :class:`sklearn.base.BaseEstimator`.
- Fitted attributes end with an underscore; ``n_features_in_`` (and
  ``feature_names_in_`` for a DataFrame) are set by ``fit``.
- The names follow scikit-learn where it has one and the core elsewhere:
  ``random_state`` is passed as the core's ``seed`` (below),
  ``control_variate_step`` is :class:`~fedmm.algorithms.FedMM`'s
  ``control_variate_step`` (``α``), and ``alpha`` is scikit-learn's ℓ1
  penalty (the model's ``lam``; :class:`FederatedDictionaryLearning`), as
  ``ridge`` is :class:`~fedmm.models.DictionaryLearning`'s ``ridge``.
- ``random_state``: None (fresh OS entropy, recorded in
  ``history_.config['seed']``), an int (the ``seed`` of ``FedMM.run``), a
  ``numpy.random.RandomState`` (an int seed is drawn from it) or a
  ``numpy.random.Generator`` (a seed is drawn from it, as ``FedMM.run`` does).
- ``clients=None``: the rows are split into ``n_clients`` contiguous blocks
  of near-equal size, in row order (``numpy.array_split``; with the default
  ``n_clients=1`` one client holds everything, i.e. centralized MM).
  Otherwise the clients are the distinct labels of ``clients`` in sorted
  order (``numpy.unique``), each client's rows kept in their order in ``X``.

The module is the top layer of the package: it imports the algorithms and
models, and nothing in fedmm imports it.
"""
from __future__ import annotations

import logging
import numbers
import os
import tempfile
import warnings
from typing import Any, Iterator

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, DensityMixin, TransformerMixin
from sklearn.cluster import kmeans_plusplus
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from fedmm import kernels
from fedmm._validation import as_array, check_bool, check_count, check_in, check_int, check_real
from fedmm.algorithms import check_control_variate_step, check_compressor
from fedmm.algorithms import FedMM, StopRun, check_seed
from fedmm.federation import Checkpoint, data_digest
from fedmm.models import DictionaryLearning, GaussianMixture

__all__ = ["FederatedGaussianMixture", "FederatedDictionaryLearning", "split_rows"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- helpers
def split_rows(X: np.ndarray, clients: Any = None, n_clients: int = 1) -> tuple[list[np.ndarray], np.ndarray]:
    """The clients' data sets of the estimators: ``X``'s rows grouped by client.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    clients : array_like of shape (n_samples,), optional
        The client of each row (any labels ``numpy.unique`` can sort).  None:
        ``n_clients`` contiguous blocks of near-equal size in row order.
    n_clients : int >= 1
        Number of blocks when ``clients`` is None (at most ``n_samples``).

    Returns
    -------
    datas : list of ndarray
        One C-contiguous float64 ``(N_i, n_features)`` array per client, rows in
        their order in ``X``.
    labels : ndarray of shape (n_clients,)
        The client labels, in the order of ``datas`` (``0 .. n_clients − 1``
        for the default split).

    Examples
    --------
    >>> X = np.arange(12.0).reshape(6, 2)
    >>> datas, labels = split_rows(X, clients=["b", "a", "b", "a", "a", "b"])
    >>> labels.tolist(), [d[:, 0].tolist() for d in datas]
    (['a', 'b'], [[2.0, 6.0, 8.0], [0.0, 4.0, 10.0]])
    >>> [d.shape[0] for d in split_rows(X, n_clients=4)[0]]
    [2, 2, 1, 1]
    """
    X = as_array(X, "X", ndim=2)
    n = X.shape[0]
    if clients is None:
        n_clients = check_int(n_clients, "n_clients", low=1)
        if n_clients > n:
            raise ValueError(f"Expected 'n_clients' <= n_samples = {n} (each client needs a row), got {n_clients}")
        return ([np.ascontiguousarray(b, dtype=np.float64) for b in np.array_split(X, n_clients)],
                np.arange(n_clients))
    groups = np.asarray(clients)
    if groups.ndim != 1 or groups.shape[0] != n:
        raise ValueError(f"Expected 'clients' of shape (n_samples,) = ({n},), one label per row of X, "
                         f"got shape {groups.shape}")
    try:
        labels, inverse = np.unique(groups, return_inverse=True)
    except TypeError as exc:
        raise TypeError(f"Expected 'clients' labels that can be sorted (ints or strings), got {exc}") from None
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=labels.shape[0]))[:-1]
    return [np.ascontiguousarray(X[rows], dtype=np.float64) for rows in np.split(order, bounds)], labels


def _validated_X(estimator: Any, X: Any, **kwargs: Any) -> np.ndarray:
    """``sklearn.utils.validation.validate_data`` (float64), its refusals naming ``'X'``."""
    try:
        return validate_data(estimator, X, dtype=np.float64, **kwargs)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"Expected 'X' to be a finite real array of shape (n_samples, n_features): {exc}") from exc


def _seed_of(random_state: Any) -> Any:
    """``random_state`` as a seed of ``FedMM.run`` (see the module docstring)."""
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, (bool, np.bool_)) or not (
            random_state is None or isinstance(random_state, (numbers.Integral, np.random.Generator,
                                                              np.random.SeedSequence))):
        raise TypeError("Expected 'random_state' to be None, an int, a numpy RandomState, Generator or SeedSequence, "
                        f"got {type(random_state).__name__}")
    return random_state


def _run_seeds(random_state: Any, n_init: int) -> Iterator[np.random.SeedSequence]:
    """The seeds of the ``n_init`` runs, one at a time: the root itself for one run, else its children
    ``0 .. n_init − 1`` (``SeedSequence.spawn``'s children, built without mutating the root)."""
    root = check_seed(_seed_of(random_state), "random_state")
    if n_init == 1:
        yield root
        return
    for k in range(n_init):
        yield np.random.SeedSequence(root.entropy, spawn_key=(*root.spawn_key, k), pool_size=root.pool_size)


class _FederatedMixin:
    """What both estimators share: the FedMM configuration and the split of ``X`` into clients."""

    def _check_federation(self) -> None:
        check_count(self.n_rounds, "n_rounds", low=1)
        check_int(self.n_clients, "n_clients", low=1)
        if self.clients_per_round is not None:
            check_int(self.clients_per_round, "clients_per_round", low=1)
        check_control_variate_step(self.control_variate_step, "control_variate_step")
        if self.compressor is not None:
            check_compressor(self.compressor)
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size", low=1)

    def _algorithm(self, model: Any) -> FedMM:
        """The FedMM that ``fit`` runs (same arguments as documented in the class)."""
        return FedMM(model, clients_per_round=self.clients_per_round, compressor=self.compressor,
                     control_variate_step=self.control_variate_step, step=self.step, batch_size=self.batch_size)

    def _clients(self, X: np.ndarray, clients: Any) -> list[np.ndarray]:
        datas, labels = split_rows(X, clients, self.n_clients)
        self.client_labels_ = labels
        return datas


# --------------------------------------------------------------------------- Gaussian mixture
class FederatedGaussianMixture(_FederatedMixin, DensityMixin, BaseEstimator):
    """Gaussian mixture fitted by federated EM (FedEM = FedMM with :class:`fedmm.models.GaussianMixture`).

    The model is ``p(x) = Σ_ℓ π_ℓ 𝒩(x; μ_ℓ, Σ_ℓ)`` (``covariance_type`` as
    in scikit-learn: one full covariance per component, one shared
    ``'tied'``, one diagonal per component ``'diag'`` or one variance per
    component ``'spherical'``).  Each FedMM round is, with the defaults (full
    batches, every client, no compression, ``γ = 1``), one exact EM iteration
    on the pooled data: the clients' E-step statistics (responsibilities and
    weighted moments) are averaged with weights ``N_i/N`` and the server's
    M-step gives ``θ_{t+1}``.

    Parameters
    ----------
    n_components : int, default 1
        Number of components ``G``.
    covariance_type : {'full', 'tied', 'diag', 'spherical'}, default 'full'
        As in :class:`sklearn.mixture.GaussianMixture`.  ``'diag'`` and
        ``'spherical'`` use the full statistic (the clients' messages are those
        of ``'full'``) with the constrained M-step: the variances are the
        diagonal of the full M-step's covariance (``'diag'``), or its mean over
        the features (``'spherical'``), scikit-learn's formulas.  That M-step
        runs in Python, so these two types run on FedMM's Python backend
        (slower per round than the compiled ``'full'``/``'tied'``).
    tol : float >= 0, default 1e-3
        Convergence threshold, scikit-learn's: the fit stops when the mean
        log-likelihood of the training data (all clients' rows) changes by less
        than ``tol`` between two consecutive parameters ``θ_{k−1}``, ``θ_k``;
        like scikit-learn (whose iteration ``n`` evaluates the likelihood at
        ``θ_{n−1}`` before its M-step), one more round then runs, so with exact
        EM ``n_iter_`` and the parameters equal scikit-learn's.  The
        likelihood is evaluated after every round (one more pass over the
        data per round; in a deployment, each client reports its
        log-likelihood sum).  0 disables early stopping.
    reg_covar : float >= 0, default 1e-6
        Floor of the covariances' eigenvalues (of the variances for ``'diag'``
        and ``'spherical'``), in data units squared.  (scikit-learn adds it to
        the diagonal instead; the two agree with ``reg_covar=0``.)
    n_rounds : int >= 1, default 100
        Most FedMM rounds per run (scikit-learn's ``max_iter``).
    n_init : int >= 1, default 1
        Independent runs; the one with the lowest final negative
        log-likelihood is kept.  Run ``k`` of ``n_init > 1`` uses the ``k``-th
        child of ``random_state``'s ``SeedSequence``.
    init_params : {'k-means++', 'random_from_data'}, default 'k-means++'
        Initial means: k-means++ seeds (:func:`sklearn.cluster.kmeans_plusplus`
        on the clients' rows; in a deployment, ``G`` exchanges in which each
        client reports its sum of squared distances to the seeds so far), or
        ``G`` distinct rows drawn uniformly (the FedEM paper's §4 start,
        ``GaussianMixture.init_statistic``'s default).  Either way
        ``π⁰ = 1/G``, ``Σ⁰`` is the pooled covariance and ``Ŝ_0`` is the
        clients' averaged E-step statistic at ``θ⁰``.  From uniform draws, EM
        with ``covariance_type='full'`` often stalls at a saddle when two
        draws fall in one cluster (3 of 4 seeds on two well-separated
        clusters after 100 rounds); k-means++ seeds avoid it.
    step : float, str, tuple, callable or None, default None
        FedMM's ``γ_t`` (:class:`fedmm.algorithms.StepSchedule`).  None:
        ``0.05`` with a ``compressor`` (on PCA-20 digits split by label, 8-bit
        stochastic rounding with ``γ = 1`` leaves the mean log-likelihood near
        ``−1e7``; ``γ = 0.05`` comes within about 10 nats of the uncompressed
        fit), otherwise ``GaussianMixture.default_step`` (``1.0``, exact EM).
        Use a smaller or decreasing step with ``batch_size`` or
        ``clients_per_round``.
    n_clients : int >= 1, default 1
        Number of contiguous blocks of rows when ``fit`` gets no ``clients``.
    clients_per_round : int, optional
        Clients drawn per round (default: all).
    compressor : fedmm compressor, optional
        Unbiased compressor of the clients' messages (default none).
    control_variate_step : float >= 0, default 0.0
        FedMM's ``control_variate_step`` ``α`` (0: no control variates).
    batch_size : int, optional
        Local minibatch size (default: full local batches).
    random_state : None, int, RandomState or Generator
        Root of all randomness of the run(s), passed as the core's ``seed``
        (see the module docstring).
    warm_start : bool, default False
        If True and the estimator is fitted, ``fit`` starts from the last
        fit's final statistic ``Ŝ`` (``history_.state['S']``) with one run
        (``n_init`` and ``init_params`` are ignored), as scikit-learn's
        ``warm_start``.  With exact EM, ``k`` rounds then ``m`` warm-started
        rounds give the parameters of one ``k + m``-round fit; a step schedule
        restarts at its first value.
    verbose : int >= 0, default 0
        0: silent; 1: a progress bar of the rounds (on standard error, the
        package's progress rule with ``progress=True``); 2: also one
        ``logging`` INFO record per round (logger ``fedmm.estimators``) with
        the mean log-likelihood and its change.

    Attributes
    ----------
    weights_ : ndarray of shape (n_components,)
    means_ : ndarray of shape (n_components, n_features)
    covariances_ : ndarray
        Shape as scikit-learn's: ``(n_components, n_features, n_features)``
        ('full'), ``(n_features, n_features)`` ('tied'), ``(n_components,
        n_features)`` ('diag') or ``(n_components,)`` ('spherical').
    precisions_cholesky_ : ndarray, same shape as ``covariances_``
        Upper-triangular ``U`` with ``Σ⁻¹ = U Uᵀ`` (scikit-learn's
        convention; ``1/sqrt`` of the variances for 'diag' and 'spherical').
    converged_ : bool
        Whether the kept run stopped on ``tol`` before ``n_rounds``.
    n_iter_ : int
        Rounds the kept run ran (``n_rounds`` unless it converged).
    history_ : fedmm.History
        The kept run's History (``config`` holds the algorithm's settings and
        the seed; ``config['stopped_early']`` when it converged).
    lower_bound_ : float
        Mean log-likelihood of the training data at the final parameters.
    initial_statistic_ : ndarray of shape (q,) or None
        ``Ŝ_0`` of the kept run with ``init_params='k-means++'`` or a warm
        start (the ``init`` passed to ``FedMM.run``); None with
        ``'random_from_data'`` (FedMM's own).
    client_labels_ : ndarray
        The clients, in the order of FedMM's client indices.
    n_features_in_ : int

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(-4, 1, (100, 2)), rng.normal(4, 1, (100, 2))])
    >>> gm = FederatedGaussianMixture(2, n_rounds=30, random_state=0).fit(X, clients=np.arange(200) % 4)
    >>> np.round(np.sort(gm.means_[:, 0]))
    array([-4.,  4.])
    >>> gm.converged_, gm.n_iter_ < 30
    (True, True)
    >>> gm.predict(np.array([[-4.0, -4.0], [4.0, 4.0]])).tolist() == np.argsort(gm.means_[:, 0]).tolist()
    True
    >>> Xs, ys = gm.sample(5)
    >>> Xs.shape, ys.shape
    ((5, 2), (5,))
    """

    def __init__(self, n_components: int = 1, *, covariance_type: str = "full", tol: float = 1e-3,
                 reg_covar: float = 1e-6, n_rounds: int = 100, n_init: int = 1, init_params: str = "k-means++",
                 step: Any = None, n_clients: int = 1,
                 clients_per_round: int | None = None, compressor: Any = None, control_variate_step: float = 0.0,
                 batch_size: int | None = None, random_state: Any = None, warm_start: bool = False,
                 verbose: int = 0) -> None:
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.tol = tol
        self.reg_covar = reg_covar
        self.n_rounds = n_rounds
        self.n_init = n_init
        self.init_params = init_params
        self.step = step
        self.n_clients = n_clients
        self.clients_per_round = clients_per_round
        self.compressor = compressor
        self.control_variate_step = control_variate_step
        self.batch_size = batch_size
        self.random_state = random_state
        self.warm_start = warm_start
        self.verbose = verbose

    def _model(self, n_features: int | None = None) -> GaussianMixture:
        if self.covariance_type in ("diag", "spherical"):
            return _ConstrainedGaussianMixture(self.n_components, self.covariance_type, reg_covar=self.reg_covar,
                                               n_features=n_features)
        return GaussianMixture(self.n_components, self.covariance_type, reg_covar=self.reg_covar,
                               n_features=n_features)

    def _algorithm(self, model: Any) -> FedMM:
        """The FedMM that ``fit`` runs: the mixin's, with the default step under compression (see ``step``)."""
        step = self.step
        if step is None and self.compressor is not None:
            step = _COMPRESSED_STEP
        return FedMM(model, clients_per_round=self.clients_per_round, compressor=self.compressor,
                     control_variate_step=self.control_variate_step, step=step, batch_size=self.batch_size)

    def fit(self, X: Any, y: Any = None, *, clients: Any = None) -> "FederatedGaussianMixture":
        """Run FedMM on the clients' rows of ``X`` until the likelihood changes by less than ``tol``.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
        y : ignored
        clients : array_like of shape (n_samples,), optional
            The client of each row (see the module docstring for the default).

        Returns
        -------
        self

        Warns
        -----
        fedmm.kernels.ConvergenceWarning
            When ``tol > 0`` and the kept run did not converge within ``n_rounds``.
        """
        previous = getattr(self, "history_", None)
        X = _validated_X(self, X, ensure_min_samples=2)
        check_int(self.n_components, "n_components", low=1)
        check_in(self.covariance_type, "covariance_type", ("full", "tied", "diag", "spherical"))
        tol = check_real(self.tol, "tol", low=0.0, high=1e300)
        check_real(self.reg_covar, "reg_covar", low=0.0, high=1e300)
        n_init = check_count(self.n_init, "n_init", low=1)
        check_in(self.init_params, "init_params", ("k-means++", "random_from_data"))
        warm_start = check_bool(self.warm_start, "warm_start")
        verbose = check_int(self.verbose, "verbose", low=0)
        self._check_federation()
        if self.n_components > X.shape[0]:
            raise ValueError(f"Expected n_samples >= n_components = {self.n_components}, got n_samples = {X.shape[0]}")
        datas = self._clients(X, clients)
        pooled = np.concatenate(datas)
        warm = None
        if warm_start and previous is not None and previous.state.get("S") is not None:
            warm = np.asarray(previous.state["S"], dtype=np.float64)
            if warm.shape != (self._model(X.shape[1]).layout.size,):
                raise ValueError("Expected 'X' with the previous fit's n_features for warm_start=True "
                                 f"(its statistic has {warm.size} entries), got n_features = {X.shape[1]}")
            n_init = 1
        best = None
        for seed in _run_seeds(self.random_state, n_init):
            model = self._model()
            init = None
            if warm is not None:
                model.prepare(datas)
                init = model.project(warm)
            elif self.init_params == "k-means++":
                model.prepare(datas)
                state = int(np.random.default_rng(seed).integers(np.iinfo(np.int32).max))
                centers, _ = kmeans_plusplus(pooled, self.n_components, random_state=state)
                init = model.init_statistic(datas, None, means=centers)
            algorithm = self._algorithm(model)
            stopper = None
            if tol > 0.0 or verbose >= 2:
                theta0 = model.T(init) if init is not None else algorithm.run(datas, 0, seed=seed).theta
                stopper = _ToleranceStop(model, datas, tol, verbose >= 2, theta0)
            history = algorithm.run(datas, self.n_rounds, seed=seed, init=init, progress=verbose >= 1,
                                    callback=stopper)
            nll = sum(model.objective(d, history.theta) * d.shape[0] for d in datas) / X.shape[0]
            if best is None or nll < best[0]:
                best = (nll, history, init, bool(history.config.get("stopped_early", False)))
        nll, history, init, converged = best
        if tol > 0.0 and not converged:
            warnings.warn(f"FederatedGaussianMixture did not converge: the mean log-likelihood still changed by "
                          f"tol = {tol:g} or more after n_rounds = {self.n_rounds} rounds; raise n_rounds or tol",
                          kernels.ConvergenceWarning, stacklevel=2)
        self.initial_statistic_ = init
        theta = history.theta
        self.history_ = history
        self.weights_ = np.array(theta.weights, dtype=np.float64)
        self.means_ = np.array(theta.means, dtype=np.float64)
        cov = np.array(theta.covariance, dtype=np.float64)
        self.covariances_ = _sklearn_covariances(cov, self.covariance_type)
        self.precisions_cholesky_ = self._precisions_cholesky(self.covariances_)
        self.lower_bound_ = -float(nll)
        self.converged_ = converged
        self.n_iter_ = len(history)
        return self

    def _precisions_cholesky(self, cov: np.ndarray) -> np.ndarray:
        """``U = L⁻ᵀ`` with ``Σ = L Lᵀ``, so that ``Σ⁻¹ = U Uᵀ`` (per component for a stack); ``1/sqrt`` of
        the variances for 'diag' and 'spherical' (scikit-learn's shapes)."""
        if self.covariance_type in ("diag", "spherical"):
            return 1.0 / np.sqrt(cov)
        L = np.linalg.cholesky(cov)
        eye = np.broadcast_to(np.eye(cov.shape[-1]), cov.shape)
        return np.triu(np.swapaxes(np.linalg.solve(L, eye), -1, -2))  # exactly upper-triangular

    def _full_covariances(self) -> np.ndarray:
        """``covariances_`` as the model's ``(G, p, p)`` stack (or ``(p, p)`` tied)."""
        cov = self.covariances_
        if self.covariance_type == "diag":
            return cov[:, :, None] * np.eye(cov.shape[1])
        if self.covariance_type == "spherical":
            return cov[:, None, None] * np.eye(self.means_.shape[1])
        return cov

    def _fitted_params(self) -> tuple[GaussianMixture, Any]:
        check_is_fitted(self, "weights_")
        model = self._model(self.means_.shape[1])
        return model, model.parameters(self.weights_, self.means_, self._full_covariances())

    def score_samples(self, X: Any) -> np.ndarray:
        """Log-density ``log p(x)`` of each row (nats), shape ``(n_samples,)``."""
        model, theta = self._fitted_params()
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return model.log_likelihood(X, theta)

    def score(self, X: Any, y: Any = None) -> float:
        """Mean log-likelihood of the rows of ``X`` (nats per sample)."""
        return float(self.score_samples(X).mean())

    def predict_proba(self, X: Any) -> np.ndarray:
        """Posterior probabilities of the components, shape ``(n_samples, n_components)``."""
        model, theta = self._fitted_params()
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return model.responsibilities(X, theta)

    def predict(self, X: Any) -> np.ndarray:
        """The most probable component of each row, shape ``(n_samples,)``."""
        return self.predict_proba(X).argmax(axis=1)

    def fit_predict(self, X: Any, y: Any = None, *, clients: Any = None) -> np.ndarray:
        """:meth:`fit` then :meth:`predict` on the same rows."""
        return self.fit(X, y, clients=clients).predict(X)

    def sample(self, n_samples: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Draw rows from the fitted mixture, as :meth:`sklearn.mixture.GaussianMixture.sample`.

        The same draws as scikit-learn's: the component counts are
        multinomial with ``weights_``, then each component's rows (grouped by
        component, in component order) are drawn with
        ``multivariate_normal`` ('full', 'tied') or as ``mean + z·sqrt(var)``
        ('diag', 'spherical'), from ``random_state`` (an int or RandomState
        as scikit-learn's ``check_random_state``; a Generator is drawn from; a
        SeedSequence seeds a new Generator).  With an int ``random_state`` and
        equal parameters the rows equal scikit-learn's.

        Parameters
        ----------
        n_samples : int >= 1, default 1

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
        y : ndarray of shape (n_samples,)
            The component of each row.
        """
        check_is_fitted(self, "weights_")
        n_samples = check_int(n_samples, "n_samples", low=1)
        state = _seed_of(self.random_state)
        if isinstance(state, np.random.SeedSequence):
            rng = np.random.default_rng(state)
        elif isinstance(state, np.random.Generator):
            rng = state
        else:
            rng = check_random_state(state)
        counts = rng.multinomial(n_samples, self.weights_)
        if self.covariance_type in ("full", "tied"):
            covs = self.covariances_ if self.covariance_type == "full" else [self.covariances_] * len(counts)
            X = np.vstack([rng.multivariate_normal(mean, c, int(k)) for mean, c, k in zip(self.means_, covs, counts)])
        else:
            p = self.means_.shape[1]
            X = np.vstack([mean + rng.standard_normal(size=(int(k), p)) * np.sqrt(c)
                           for mean, c, k in zip(self.means_, self.covariances_, counts)])
        y = np.concatenate([np.full(int(k), j, dtype=int) for j, k in enumerate(counts)])
        return X, y

    def _n_parameters(self) -> int:
        G, p = self.means_.shape
        cov = {"full": G * p * (p + 1) // 2, "tied": p * (p + 1) // 2, "diag": G * p,
               "spherical": G}[self.covariance_type]
        return int(cov + G * p + G - 1)

    def bic(self, X: Any) -> float:
        """Bayesian information criterion ``−2 log L + k ln N`` on ``X`` (lower is better)."""
        n = np.shape(X)[0]
        return -2.0 * self.score(X) * n + self._n_parameters() * np.log(n)

    def aic(self, X: Any) -> float:
        """Akaike information criterion ``−2 log L + 2k`` on ``X`` (lower is better)."""
        return -2.0 * self.score(X) * np.shape(X)[0] + 2.0 * self._n_parameters()


#: FederatedGaussianMixture's step when a compressor is given and ``step`` is None (see its docstring).
_COMPRESSED_STEP = 0.05


def _sklearn_covariances(cov: np.ndarray, covariance_type: str) -> np.ndarray:
    """The model's covariance stack in scikit-learn's shape for ``covariance_type``."""
    if covariance_type == "diag":
        return np.ascontiguousarray(np.diagonal(cov, axis1=1, axis2=2))
    if covariance_type == "spherical":
        return np.ascontiguousarray(cov[:, 0, 0])
    return cov


class _ConstrainedGaussianMixture(GaussianMixture):
    """'full' mixture statistic with the 'diag' or 'spherical' M-step (scikit-learn's formulas).

    ``T``: ``π``, ``μ`` as 'full'; the variances are the diagonal of the full
    M-step's covariance ``s⁽³⁾_ℓ / s⁽¹⁾_ℓ − μ_ℓ μ_ℓᵀ`` ('diag') or its mean
    over the features ('spherical'), floored at ``reg_covar``; ``θ`` holds them
    as diagonal ``(G, p, p)`` matrices, so the E-step, likelihood and
    projection are the full model's.  ``T`` runs in Python, so FedMM runs the
    model on its Python backend (``compiled_overrides``).
    """

    def __init__(self, n_components: int, kind: str, *, reg_covar: float, n_features: int | None = None) -> None:
        super().__init__(n_components, "full", reg_covar=reg_covar, n_features=n_features)
        self.kind = kind

    def T(self, s: np.ndarray) -> Any:
        s = np.asarray(s, dtype=np.float64)
        if s.shape != (self.layout.size,):
            raise ValueError(f"Expected 's' of shape ({self.layout.size},), got {s.shape}")
        G, p = self.n_components, self.n_features
        w = s[:G]
        if np.any(w <= 0.0):
            raise ValueError(f"Expected the weights block of 's' to be positive (project it first), got {w}")
        means = s[G:G + G * p].reshape(G, p) / w[:, None]
        second = np.diagonal(s[G + G * p:].reshape(G, p, p), axis1=1, axis2=2)
        var = second / w[:, None] - means * means
        if self.kind == "spherical":
            var = np.repeat(var.mean(axis=1, keepdims=True), p, axis=1)
        var = np.maximum(var, self.reg_covar)
        if np.any(var <= 0.0):
            raise np.linalg.LinAlgError("A variance of Σ(s) is zero or negative; use reg_covar > 0 to floor it")
        return self.parameters(w / w.sum(), means, var[:, :, None] * np.eye(p))


class _ToleranceStop:
    """FedMM ``callback`` of :class:`FederatedGaussianMixture`: scikit-learn's stopping rule on the change
    of the mean log-likelihood (see ``tol``), raising :class:`fedmm.algorithms.StopRun` one round after
    the change falls below ``tol``; optionally logs each round."""

    def __init__(self, model: GaussianMixture, datas: list[np.ndarray], tol: float, log: bool, theta0: Any) -> None:
        self.model, self.datas, self.tol, self.log = model, datas, tol, log
        self.n = sum(d.shape[0] for d in datas)
        self.last = self.mean_log_likelihood(theta0)
        self.stop_next = False

    def mean_log_likelihood(self, theta: Any) -> float:
        return -sum(self.model.objective(d, theta) * d.shape[0] for d in self.datas) / self.n

    def __call__(self, t: int, state: Any) -> None:
        if self.stop_next:
            raise StopRun
        value = self.mean_log_likelihood(state["theta"])
        change = value - self.last
        self.last = value
        if self.log:
            logger.info("round %d: mean log-likelihood %.10g (change %.3g)", t + 1, value, change)
        if self.tol > 0.0 and abs(change) < self.tol:
            self.stop_next = True


# --------------------------------------------------------------------------- dictionary learning
class FederatedDictionaryLearning(_FederatedMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                                  BaseEstimator):
    """Sparse dictionary learning by FedMM (FedMM paper §2.3 and §6, :class:`fedmm.models.DictionaryLearning`).

    Minimizes ``(1/N) Σ_j min_h ½‖x_j − hD‖² + α‖h‖₁ + η‖D‖²_F`` over
    dictionaries ``D`` (``components_``, one atom per row), with atoms in
    the unit ball (``‖D_k‖ ≤ 1``) by default, as scikit-learn's
    :class:`~sklearn.decomposition.DictionaryLearning` (same ½ and ``α``
    conventions: ``alpha`` here is its ``alpha``).  :meth:`transform`
    returns the LASSO codes ``h`` of each row (fedmm's batched LASSO kernel).

    Parameters
    ----------
    n_components : int, optional
        Number of atoms ``K`` (default ``n_features``).
    alpha : float in (0, 1e150], default 1.0
        ℓ1 weight of the codes ``λ`` (scikit-learn's ``alpha``; the model's ``lam``).
    ridge : float >= 0, default 0.0
        ``η`` of the penalty ``η‖D‖²_F`` (:class:`~fedmm.models.DictionaryLearning`'s ``ridge``).
    constraint : {'unit_norm', None}, default 'unit_norm'
        Atoms in the unit ball, or free atoms (then ``ridge`` or the codes
        must make ``T`` well-posed).
    transform_alpha : float > 0, optional
        ``λ`` of :meth:`transform` (default ``alpha``).
    tol : float >= 0, default 1e-6
        Relative duality gap of the LASSO solves (training and :meth:`transform`)
        and largest atom step of the unit-norm dictionary update ``T``.
    max_iter : int >= 1, default 1000
        Iteration cap of each LASSO solve and sweep cap of the dictionary update.
    n_rounds : int >= 1, default 100
        FedMM rounds of :meth:`fit`, and the rounds that each
        :meth:`partial_fit` adds (no early stopping).
    step : float, str, tuple, callable or None, default None
        FedMM's ``γ_t``; None: ``DictionaryLearning.default_step``
        (``γ_t = t^{-1/2}``).
    n_clients, clients_per_round, compressor, control_variate_step, batch_size, random_state
        As in :class:`FederatedGaussianMixture`.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        The dictionary ``D`` (atoms as rows).
    n_iter_ : int
        Rounds run in all, over :meth:`fit` and the :meth:`partial_fit` calls
        that continued it.
    history_ : fedmm.History
        The run's History (every round since the last restart).
    client_labels_ : ndarray
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        The column names of ``X``, when ``fit`` got a DataFrame (only then).

    Notes
    -----
    As scikit-learn's transformers, the estimator has
    :meth:`get_feature_names_out` (``federateddictionarylearning0``, ...,
    like :class:`~sklearn.decomposition.MiniBatchDictionaryLearning`'s
    ``minibatchdictionarylearning0``, ...) and so ``set_output(transform="pandas")``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 5))
    >>> dl = FederatedDictionaryLearning(3, alpha=0.1, n_rounds=20, n_clients=4, random_state=0).fit(X)
    >>> dl.components_.shape, dl.transform(X).shape
    ((3, 5), (200, 3))
    >>> bool(np.all(np.linalg.norm(dl.components_, axis=1) <= 1 + 1e-12))
    True
    """

    def __init__(self, n_components: int | None = None, *, alpha: float = 1.0, ridge: float = 0.0,
                 constraint: str | None = "unit_norm", transform_alpha: float | None = None, tol: float = 1e-6,
                 max_iter: int = 1000, n_rounds: int = 100, step: Any = None, n_clients: int = 1,
                 clients_per_round: int | None = None, compressor: Any = None, control_variate_step: float = 0.0,
                 batch_size: int | None = None, random_state: Any = None) -> None:
        self.n_components = n_components
        self.alpha = alpha
        self.ridge = ridge
        self.constraint = constraint
        self.transform_alpha = transform_alpha
        self.tol = tol
        self.max_iter = max_iter
        self.n_rounds = n_rounds
        self.step = step
        self.n_clients = n_clients
        self.clients_per_round = clients_per_round
        self.compressor = compressor
        self.control_variate_step = control_variate_step
        self.batch_size = batch_size
        self.random_state = random_state

    def _model(self, n_features: int, lam: float | None = None) -> DictionaryLearning:
        K = n_features if self.n_components is None else self.n_components
        return DictionaryLearning(K, self.alpha if lam is None else lam, self.ridge, self.constraint,
                                  n_features=n_features, tol=self.tol, max_iter=self.max_iter,
                                  update_tol=self.tol, update_max_iter=self.max_iter)

    def fit(self, X: Any, y: Any = None, *, clients: Any = None) -> "FederatedDictionaryLearning":
        """Run FedMM on the clients' rows of ``X``.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
        y : ignored
        clients : array_like of shape (n_samples,), optional
            The client of each row (see the module docstring for the default).

        Returns
        -------
        self
        """
        X = _validated_X(self, X)
        if self.n_components is not None:
            check_int(self.n_components, "n_components", low=1)
        if self.transform_alpha is not None:
            check_real(self.transform_alpha, "transform_alpha", low=0.0, low_open=True)
        check_real(self.alpha, "alpha", low=0.0, high=1e150, low_open=True)
        check_real(self.ridge, "ridge", low=0.0, high=1e150)
        self._check_federation()
        model = self._model(X.shape[1])  # checks constraint, tol, max_iter
        datas = self._clients(X, clients)
        seed = check_seed(_seed_of(self.random_state), "random_state")
        self._run(model, datas, self.n_rounds, seed=seed)
        return self

    def _run(self, model: DictionaryLearning, datas: list[np.ndarray], n_rounds: int, **kwargs: Any) -> None:
        """``FedMM.run`` with ``kwargs``; keeps its History, the dictionary and the run's state after the last
        round (the :class:`fedmm.federation.Checkpoint` that :meth:`partial_fit` resumes)."""
        with tempfile.TemporaryDirectory(prefix="fedmm-estimator-") as tmp:
            path = os.path.join(tmp, "state.ckpt")
            history = self._algorithm(model).run(datas, n_rounds, checkpoint_every=n_rounds, checkpoint_path=path,
                                                 **kwargs)
            self._checkpoint = Checkpoint.load(path)
        self._continued_params = self._continuation_params()
        self._continued_data = data_digest(datas)
        self.history_ = history
        self.components_ = np.ascontiguousarray(np.asarray(history.theta, dtype=np.float64).T)
        self.n_iter_ = len(history)

    def _continuation_params(self) -> dict[str, Any]:
        """The hyper-parameters that must not change for :meth:`partial_fit` to resume the previous run."""
        return {k: v for k, v in self.get_params(deep=False).items() if k != "n_rounds"}

    def partial_fit(self, X: Any, y: Any = None, *, clients: Any = None) -> "FederatedDictionaryLearning":
        """Run ``n_rounds`` more FedMM rounds on the clients' rows of ``X``, continuing the previous state.

        On an unfitted estimator this is :meth:`fit`.  When ``X`` and
        ``clients`` split into the same clients' data as the previous
        :meth:`fit`/:meth:`partial_fit` call, and no hyper-parameter other
        than ``n_rounds`` changed since, the run is resumed where it stopped
        (server statistic, control variates, step-size index, each client's
        random stream): ``fit`` with ``n_rounds=a`` then ``partial_fit`` with
        ``n_rounds=b`` gives bit for bit the dictionary and History of one
        ``fit`` with ``n_rounds=a + b``.  Otherwise (new rows, a new split,
        changed hyper-parameters) a new FedMM run of ``n_rounds`` rounds
        starts from the previous server statistic ``Ŝ`` (the ``init`` of
        ``FedMM.run``), with its own step-size schedule from ``t = 1``, no
        control variates and the seed ``random_state``.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
        y : ignored
        clients : array_like of shape (n_samples,), optional
            The client of each row (see the module docstring for the default).

        Returns
        -------
        self
        """
        if not hasattr(self, "components_"):
            return self.fit(X, y, clients=clients)
        X = _validated_X(self, X, reset=False)
        check_real(self.alpha, "alpha", low=0.0, high=1e150, low_open=True)
        check_real(self.ridge, "ridge", low=0.0, high=1e150)
        self._check_federation()
        model = self._model(X.shape[1])
        if model.n_components != self.components_.shape[0]:
            raise ValueError(f"Expected 'n_components' = {self.components_.shape[0]}, the fitted dictionary's "
                             f"number of atoms, to continue it with partial_fit, got {self.n_components}")
        datas = self._clients(X, clients)
        previous = self._checkpoint
        same_run = (self._continuation_params() == self._continued_params
                    and len(datas) == len(previous.client_states)
                    and data_digest(datas) == self._continued_data)
        if same_run:
            n_iter = self.n_iter_ - previous.next_round
            self._run(model, datas, previous.next_round + self.n_rounds, resume=previous)
        else:
            n_iter = self.n_iter_
            seed = check_seed(_seed_of(self.random_state), "random_state")
            self._run(model, datas, self.n_rounds, seed=seed, init=self.history_.state["S"])
        self.n_iter_ += n_iter
        return self

    def transform(self, X: Any) -> np.ndarray:
        """The codes ``h = argmin_h ½‖x − hD‖² + λ‖h‖₁`` of each row (``λ = transform_alpha``),
        shape ``(n_samples, n_components)``."""
        check_is_fitted(self, "components_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        lam = self.alpha if self.transform_alpha is None else self.transform_alpha
        # X.T is the F-ordered (p, n) block the kernel reads without a copy; codes come back (K, n)
        return np.ascontiguousarray(kernels.lasso(self.components_.T, X.T, lam, tol=self.tol,
                                                  max_iter=self.max_iter).T)

    def inverse_transform(self, X: Any) -> np.ndarray:
        """The rows ``h D`` that codes ``h`` stand for: ``X @ components_``, shape ``(n_samples, n_features)``.

        As :meth:`sklearn.decomposition.MiniBatchDictionaryLearning.inverse_transform`:
        ``inverse_transform(transform(X))`` approximates ``X`` up to the
        shrinkage of the ℓ1 penalty.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_components)
            Codes, e.g. from :meth:`transform`.
        """
        check_is_fitted(self, "components_")
        try:
            X = check_array(X, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"Expected 'X' to be a finite real array of codes: {exc}") from exc
        if X.shape[1] != self.components_.shape[0]:
            raise ValueError(f"Expected 'X' of shape (n_samples, n_components) = (n_samples, "
                             f"{self.components_.shape[0]}), codes of the fitted atoms, got {X.shape}")
        return X @ self.components_

    def score(self, X: Any, y: Any = None) -> float:
        """Minus the dictionary-learning objective per sample on ``X`` (higher is better).

        ``−( mean_j min_h [½‖x_j − hD‖² + α‖h‖₁] + η‖D‖²_F )``: the training
        objective (FedMM paper eq. (28), with ``α = alpha``, not
        ``transform_alpha``, and ``η = ridge``) at the fitted dictionary, the
        codes solved by the LASSO kernel to ``tol``.  It is a loss to minimize
        negated, as scikit-learn's scorers are, so ``GridSearchCV`` picks the
        dictionary that represents held-out rows best.  (Comparable across
        ``alpha`` values only with care: the penalty is part of it.)

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        float
        """
        check_is_fitted(self, "components_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        model = self._model(X.shape[1])
        return -model.objective(X, np.asfortranarray(self.components_.T))

    @property
    def _n_features_out(self) -> int:
        """Number of atoms, the names of :meth:`get_feature_names_out` (``ClassNamePrefixFeaturesOutMixin``)."""
        return self.components_.shape[0]

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags
