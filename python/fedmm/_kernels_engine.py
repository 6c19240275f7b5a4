# SPDX-License-Identifier: BSD-3-Clause
"""Checked Python faces of ``engine.c``: compiled surrogate models and stretches of FedMM rounds."""
from __future__ import annotations

from typing import Any

import numpy as np

from fedmm import _engine
from fedmm._validation import as_array, check_bool, check_count, check_int, check_real

#: Largest dimension the compiled models accept: BLAS/LAPACK take 32-bit integers.
_BLAS_INT_MAX = 2**31 - 1

__all__ = ["CompiledModel", "dictionary_model", "sample_model", "gaussian_mixture_model",
           "gaussian_mixture_responsibilities", "poisson_latent_model",
           "inverse_toy_model", "project_capped_simplex", "floor_eigenvalues", "run_rounds", "full_statistics",
           "WorkerPool",
           "LASSO_METHODS", "DICTIONARY_MODEL_MAX_WORK", "dictionary_model_max_iter"]

#: The compiled model handle (``fedmm_model_t`` with its context), see :class:`fedmm._engine.CompiledModel`.
CompiledModel = _engine.CompiledModel
#: Persistent worker threads for :func:`run_rounds` (``fedmm_pool_t``), see :class:`fedmm._engine.WorkerPool`.
WorkerPool = _engine.WorkerPool
#: LASSO methods of the C solver, by name (``FEDMM_LASSO_*``).
LASSO_METHODS = {"auto": 0, "cd": 1, "active_set": 2, "homotopy": 3}
#: Largest worst-case work, in multiply-adds, of one LASSO column inside a compiled round:
#: ``max_iter · (K² + 4K)`` (a sweep or an active-set step costs at most about ``K² + 4K``).
#: Compiled rounds run without checking for Ctrl-C, so :func:`dictionary_model` refuses a
#: ``max_iter`` above it (2**32 multiply-adds: seconds per column, not hours).
DICTIONARY_MODEL_MAX_WORK = 2**32


def dictionary_model_max_iter(n_components: int) -> int:
    """Largest ``max_iter`` :func:`dictionary_model` accepts for ``K = n_components`` atoms.

    ``DICTIONARY_MODEL_MAX_WORK // (K² + 4K)``: one column's solve then stays
    below :data:`DICTIONARY_MODEL_MAX_WORK` multiply-adds.
    """
    k = check_int(n_components, "n_components", low=1, high=_BLAS_INT_MAX)
    return max(1, DICTIONARY_MODEL_MAX_WORK // (k * k + 4 * k))


def dictionary_model(n_features: int, n_components: int, lam: float, ridge: float = 0.0, *, tol: float = 1e-9,
                     max_iter: int = 1000, method: str = "auto") -> CompiledModel:
    """Dictionary learning with the ridge ``T`` as a compiled model (``fedmm_dictionary_model``).

    Statistic ``[vec(H Hᵀ/b), vec(Z Hᵀ/b)]`` (FedMM paper eq. (18)) of the
    LASSO codes ``H`` (warm-started from the client's per-sample memory of
    ``n_components`` values), projection onto ``𝕄_K⁺ × ℝ^{p×K}``, and
    ``T(s) = s⁽²⁾ (sym(s⁽¹⁾) + 2ηI)⁻¹`` (``η = ridge``, as
    :class:`fedmm.models.DictionaryLearning`'s).  The compiled parameter is the
    dictionary row-major, then column-major, then ``DᵀD`` and its inverse as the LASSO uses them,
    formed once per parameter (by ``T`` and :meth:`~CompiledModel.derive`) for every client's
    statistic (``theta_size = 2pK + K² + 1``, ``+ K²`` when ``K ≤ 64``).

    A compiled round runs without the GIL and without checking for Ctrl-C,
    so the LASSO's work is bounded up front: ``max_iter`` (iterations per
    column, each at most about ``K² + 4K`` multiply-adds) may be at most
    :func:`dictionary_model_max_iter` ``(K)`` ``= DICTIONARY_MODEL_MAX_WORK //
    (K² + 4K)`` (2**32 multiply-adds per column), and a larger value raises
    ``ValueError`` naming ``max_iter``.  (The Python faces,
    :func:`fedmm.kernels.lasso` and :func:`fedmm.kernels.dictionary_statistics`,
    check for Ctrl-C while they run and accept up to 2**31 − 1.)
    """
    p = check_int(n_features, "n_features", low=1, high=_BLAS_INT_MAX)
    k = check_int(n_components, "n_components", low=1, high=_BLAS_INT_MAX)
    lam = check_real(lam, "lam", low=0.0, low_open=True)
    ridge = check_real(ridge, "ridge", low=0.0)
    tol = check_real(tol, "tol", low=0.0)
    max_iter = check_count(max_iter, "max_iter", low=1)
    if max_iter > dictionary_model_max_iter(k):
        raise ValueError(
            f"Expected 'max_iter' <= {dictionary_model_max_iter(k)} for n_components={k}: a compiled round "
            f"cannot be interrupted, so one LASSO column is bounded to max_iter * (K^2 + 4K) <= 2**32 "
            f"multiply-adds; got max_iter={max_iter} (the Python backend accepts it)")
    if method not in LASSO_METHODS:
        raise ValueError(f"Expected 'method' in {sorted(LASSO_METHODS)}, got {method!r}")
    return _engine.dictionary_model(p, k, lam, ridge, tol, max_iter, LASSO_METHODS[method])


def sample_model(q: int, d: int, sample_size: int, statistic: int, T: int, project: int = 0,
                 constants: Any = None, name: str = "sample model") -> CompiledModel:
    """A compiled model from the C addresses of per-sample functions (``fedmm_sample_model``).

    Parameters
    ----------
    q, d, sample_size : int
        Lengths of the statistic, of the flat parameter and of one data row.
    statistic : int
        Address of ``int f(const double *constants, const double *theta,
        const double *z, double *out)`` writing ``S̄(z, θ)`` (length ``q``)
        for one row ``z``; the engine averages over the minibatch in row
        order.  Returns 0, or a nonzero code on failure.
    T : int
        Address of ``int T(const double *constants, const double *s, double *theta)``.
    project : int, optional
        Address of ``int project(const double *constants, double *s)`` (0: ``𝒮`` is the whole space).
    constants : array_like of float64, optional
        Read-only values every function receives (kept alive by the model).
    name : str
        Used in error messages.
    """
    q = check_int(q, "q", low=1)
    d = check_int(d, "d", low=1)
    sample_size = check_int(sample_size, "sample_size", low=1)
    for value, label in ((statistic, "statistic"), (T, "T"), (project, "project")):
        check_int(value, label, low=0)
    consts = None if constants is None else np.ascontiguousarray(constants, dtype=np.float64).ravel()
    if consts is not None and not np.isfinite(consts).all():
        raise ValueError("Expected 'constants' to be finite")
    return _engine.sample_model(q, d, sample_size, int(statistic), int(T), int(project), consts, str(name))


def gaussian_mixture_model(n_components: int, n_features: int, covariance: str = "tied", *,
                           reg_covar: float = 1e-6, min_weight: float = 0.0, second_moment: Any = None,
                           known_covariance: Any = None) -> CompiledModel:
    """The Gaussian mixture of FedEM App. F.1 as a compiled model (``fedmm_gmm_model``).

    Statistic: the mean responsibilities, the responsibility-weighted means
    and (``covariance="full"``) second moments of a minibatch, the layout of
    :class:`fedmm.models.GaussianMixture`; ``T`` is the M-step (FedEM eq.
    (60)-(62)) with the eigenvalue floor ``reg_covar``, the projection maps
    the weights block onto ``{w ≥ min_weight, Σ w = 1}``.  The compiled
    parameter is ``(π, μ, Σ)`` flattened, then the E-step's derived
    quantities (see ``fedmm_kernels.h``).

    Parameters
    ----------
    n_components, n_features : int
        ``G`` and ``p``.
    covariance : {"tied", "full"}
    reg_covar : float >= 0
    min_weight : float, ``0 <= G·min_weight < 1``
    second_moment : array_like of shape (p, p), optional
        Tied: the global ``M₂ = N⁻¹ Σ y yᵀ`` that ``T`` needs (copied).
    known_covariance : array_like of shape (p, p), optional
        Tied: a fixed, positive-definite covariance (copied); ``T`` then keeps it.
    """
    G = check_int(n_components, "n_components", low=1, high=_BLAS_INT_MAX)
    p = check_int(n_features, "n_features", low=1, high=_BLAS_INT_MAX)
    if covariance not in ("tied", "full"):
        raise ValueError(f"Expected 'covariance' in ('tied', 'full'), got {covariance!r}")
    reg_covar = check_real(reg_covar, "reg_covar", low=0.0)
    min_weight = check_real(min_weight, "min_weight", low=0.0, high=1.0 / G, high_open=True)
    if covariance == "full" and (second_moment is not None or known_covariance is not None):
        raise ValueError("Expected neither 'second_moment' nor 'known_covariance' with covariance='full'")
    if second_moment is not None:
        second_moment = as_array(second_moment, "second_moment", ndim=2)
    if known_covariance is not None:
        known_covariance = as_array(known_covariance, "known_covariance", ndim=2)
    return _engine.gaussian_mixture_model(G, p, covariance, reg_covar, min_weight, second_moment, known_covariance)


def gaussian_mixture_responsibilities(model: CompiledModel, theta: Any, data: Any, *,
                                      return_log_norm: bool = False) -> Any:
    """Posterior probabilities of the components of a :func:`gaussian_mixture_model` (its E-step).

    ``ρ_ℓ(y) = softmax_ℓ(logit_ℓ(y))`` with ``logit_ℓ(y) = ln π_ℓ − ½ ln det Σ_ℓ
    − ½ ‖L_ℓ⁻¹(y − μ_ℓ)‖²`` (``Σ_ℓ = L_ℓ L_ℓᵀ``; the tied case drops the
    terms common to all components, ``−½ yᵀΣ⁻¹y − ½ ln det Σ``).  Rows go in
    chunks of 256: one GEMM per chunk (every component's whitened rows at
    once for full covariances), no ``N × G p`` temporary; the GIL is released.

    Parameters
    ----------
    model : CompiledModel
        Made by :func:`gaussian_mixture_model`.
    theta : ndarray of shape (model.theta_size,)
        The compiled parameter with its derived quantities (``model.derive``).
    data : array_like of shape (N, p)
        Rows (converted to C-contiguous float64).
    return_log_norm : bool
        Also return ``log Σ_ℓ exp(logit_ℓ(y))`` per row (shape ``(N,)``).

    Returns
    -------
    ndarray of shape (N, G), or (it, ndarray of shape (N,))
    """
    if not isinstance(model, CompiledModel):
        raise TypeError(f"Expected 'model' to be a CompiledModel, got {type(model).__name__}")
    theta = np.ascontiguousarray(theta, dtype=np.float64)
    Y = np.ascontiguousarray(data, dtype=np.float64)
    if Y.ndim != 2:
        raise ValueError(f"Expected 'data' of shape (N, p), got shape {Y.shape}")
    if not np.isfinite(Y).all():
        raise ValueError("Expected 'data' to contain only finite values")
    return _engine.gaussian_mixture_responsibilities(model, theta, Y, bool(return_log_norm))


def poisson_latent_model(support: Any, log_prior: Any, *, lam: float = 1.0, parameterization: str = "joint",
                         min_mean: float = 1e-12, mean_count: float | None = None) -> CompiledModel:
    """The Poisson model with a latent log-intensity shift (FedMM App. C.1) as a compiled model.

    ``support`` holds the ``h_k`` and ``log_prior`` the ``log w_k``; data rows
    are single counts.  See :class:`fedmm.models.PoissonLatent` for the two
    parameterizations; the compiled parameter is ``(θ, eᶿ)``.
    """
    h = np.array(as_array(support, "support"), dtype=np.float64).ravel()
    logw = np.array(as_array(log_prior, "log_prior"), dtype=np.float64).ravel()
    if h.shape[0] == 0 or logw.shape != h.shape:
        raise ValueError(f"Expected non-empty 'support' and 'log_prior' of equal length, got {h.shape}, {logw.shape}")
    lam = check_real(lam, "lam", low=0.0, low_open=True)
    if parameterization not in ("joint", "explicit_mean"):
        raise ValueError(f"Expected 'parameterization' in ('joint', 'explicit_mean'), got {parameterization!r}")
    min_mean = check_real(min_mean, "min_mean", low=0.0, low_open=True)
    if mean_count is not None:  # explicit mean: E_π[Z]; None while unknown (T then fails)
        mean_count = check_real(mean_count, "mean_count", low=0.0, low_open=True)
    return _engine.poisson_latent_model(h, logw, np.exp(h), lam, min_mean,
                                        float("nan") if mean_count is None else float(mean_count), parameterization)


def inverse_toy_model(floor: float = 1e-12) -> CompiledModel:
    """The toy of FedMM Remark 1 (``ℓ(Z, θ) = Zθ + 1/θ``) as a compiled model: ``S̄ = Z``,
    ``T(s) = 1/√s``, projections onto ``[floor, ∞)``."""
    return _engine.inverse_toy_model(check_real(floor, "floor", low=0.0, low_open=True))


def project_capped_simplex(v: Any, floor: float = 0.0) -> np.ndarray:
    """Euclidean projection of ``v`` (shape ``(n,)``) onto ``{x : x ≥ floor, Σ x = 1}`` (sort-based).

    Examples
    --------
    >>> project_capped_simplex([0.7, -0.2, 0.6], 0.05)
    array([0.525, 0.05 , 0.425])
    """
    arr = as_array(v, "v", order="C")
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise ValueError(f"Expected 'v' of shape (n,) with n >= 1, got {arr.shape}")
    floor = check_real(floor, "floor", low=0.0, high=1.0 / arr.shape[0], high_open=True)
    return _engine.project_capped_simplex(arr, floor)


def floor_eigenvalues(A: Any, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """The eigenvalues of the symmetric matrix ``A`` (shape ``(p, p)``, or a stack ``(m, p, p)``) floored at
    ``floor`` (``fedmm_floor_eigenvalues``): a matrix whose eigenvalues are all above the floor comes back
    unchanged, bit for bit; ``floor = 0`` raises :class:`numpy.linalg.LinAlgError` on a matrix that is
    not positive definite.  Returns the floored copy and which matrices were rebuilt (shape ``(m,)``).
    """
    floor = check_real(floor, "floor", low=0.0)
    A = as_array(A, "A", ndim=(2, 3), order="C")
    if A.shape[-1] != A.shape[-2] or A.shape[-1] == 0:
        raise ValueError(f"Expected 'A' to be a square matrix (p, p) or a stack (m, p, p) with p >= 1, "
                         f"got shape {A.shape}")
    return _engine.floor_eigenvalues(A, floor)


def run_rounds(model: CompiledModel, space: str, mode: str, oracle: str, project: bool, batch: int, p: float,
               control_variate_step: float, count: int, weights: np.ndarray, server_key: np.ndarray, datas: list,
               memories: list, Vs: list, keys: np.ndarray, quantizers: np.ndarray, S: np.ndarray | None,
               V: np.ndarray, theta: np.ndarray, theta_prev: np.ndarray, t0: int, gammas: np.ndarray,
               n_threads: int = 1, max_seconds: float = float("inf"), pool: WorkerPool | None = None, *,
               statistic_max: float = float("inf")) -> tuple:
    """Whole FedMM rounds ``t0, …, t0 + R − 1`` (``R = len(gammas)``) in one GIL-free call.

    Per round ``t``: the server's selection (``fedmm_server_select``), every
    contacted client's round (``fedmm_client_round``) on the threads of
    ``pool`` (without one, on a :class:`WorkerPool` of ``n_threads`` made for
    this call, or on the calling thread when ``n_threads == 1``), then the
    server step (``fedmm_server_step``) on the senders' messages in client
    order.  The federation layer (:func:`fedmm.federation.compiled_rounds`) builds the
    arguments from the server's and the clients' state; the arrays are read
    as they are (the kernel checks their lengths), and those updated in place
    must be contiguous, writeable float64.

    Parameters
    ----------
    model : CompiledModel
        The compiled surrogate model (:func:`dictionary_model`, ...).
    space : {'statistic', 'parameter'}
        Aggregation space (S-space FedMM or Θ-space parameter averaging).
    mode : {'select', 'compress'}
        ``'select'``: ``count`` clients per round drawn by the server (``count
        == -1``: a coin with probability ``p`` per client); ``'compress'``:
        every client, each sending with probability ``p``.
    oracle : {'minibatch', 'full'}
        The clients' statistic oracle.
    project : bool
        Euclidean projection of the aggregated statistic.
    batch : int
        Minibatch size (1 with the full oracle).
    p : float in (0, 1]
        Participation probability.
    control_variate_step : float
        Control-variate step α.
    count : int
        Clients per round, -1 for independent participation.
    weights : ndarray of shape (n,), float64
        ``μ_i / p`` per client.
    server_key : ndarray of shape (2,), uint64
        Philox key of the server's round stream.
    datas, memories, Vs : list of length n
        Per client: its data as :meth:`~fedmm.models.SurrogateModel.compiled_data` returns it, its
        per-sample memory (``compiled_memory``) and its control variate ``V_i`` (float64, updated in
        place).
    keys : ndarray of shape (n, 2), uint64
        The clients' Philox keys.
    quantizers : ndarray of shape (n, 4), int64
        Per client ``(scheme, bits, norm, block)`` of its compressor (``quantizer_spec``).
    S : ndarray of shape (q,), float64, or None
        The server statistic ``Ŝ_t`` (S-space; None in Θ-space), updated in place.
    V : ndarray, float64
        The server's control variate, updated in place.
    theta, theta_prev : ndarray, float64
        The compiled parameter, updated in place; ``theta_prev`` receives
        ``theta`` before the last completed round.
    t0 : int
        First round.
    gammas : ndarray of shape (R,), float64
        Step sizes ``γ_{t+1}`` of the rounds.
    n_threads : int, default 1
        Threads for the clients when no ``pool`` is given.
    max_seconds : float, default inf
        Stop after the first round that ends later than this after the call
        started (at least one round runs).
    pool : WorkerPool, optional
        Persistent worker threads kept across calls by the caller.
    statistic_max : float, default inf
        In S-space a round whose messages, aggregate, new ``S`` or new ``V``
        hold an entry beyond it in magnitude fails (``FEDMM_ERANGE``).

    Returns
    -------
    senders : ndarray of shape (R', n), int64
        Row ``r``: the clients whose message round ``r`` aggregated, in
        ``senders[r, :n_senders[r]]`` (increasing).
    n_senders, n_contacted : ndarray of shape (R',), int64
    dist : ndarray of shape (R', 2)
        ``(‖Ŝ_{t+1} − Ŝ_t‖², ‖θ_{t+1} − θ_t‖²)`` (flat parameters).
    seconds : ndarray of shape (R',)
        Wall time of each round.
    n_unconverged : int
        Inner-solver columns that hit their iteration cap.
    failure : tuple or None
        ``(t, client, reason)`` when round ``t`` failed in a client's round
        (``client`` its index) or in the server step (``client = -1``); the
        rounds before it are complete and round ``t`` left no trace.
    """
    return _engine.run_rounds(model, space, mode, oracle, project, batch, p, control_variate_step, count, weights,
                              server_key, datas, memories, Vs, keys, quantizers, S, V, theta, theta_prev, t0, gammas,
                              n_threads, max_seconds, pool, statistic_max)


def full_statistics(model: CompiledModel, theta: np.ndarray, datas: list, n_threads: int = 1,
                    pool: WorkerPool | None = None, *,
                    check_finite: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every client's full statistic at one compiled parameter, on worker threads (the start exchange).

    See :func:`fedmm._engine.full_statistics`: returns ``(S, status, n_unconverged)``, row ``i`` of
    ``S`` being ``model.statistic`` over all of ``datas[i]`` without per-sample memory (valid where
    ``status[i] == 0``).  The numbers do not depend on ``n_threads`` or ``pool``.
    ``check_finite=False`` skips the scan of every value of ``datas`` for NaN and infinity (for data
    a model's ``check_data`` already accepted); the shapes are checked either way.
    """
    if not isinstance(model, CompiledModel):
        raise TypeError(f"Expected 'model' to be a CompiledModel, got {type(model).__name__}")
    if pool is not None and not isinstance(pool, WorkerPool):
        raise TypeError(f"Expected 'pool' to be a WorkerPool or None, got {type(pool).__name__}")
    n_threads = check_int(n_threads, "n_threads", low=1, high=4096)
    theta = as_array(theta, "theta", ndim=1, order="C")
    if theta.shape != (model.theta_size,):
        raise ValueError(f"Expected 'theta' of shape ({model.theta_size},), got {theta.shape}")
    if not isinstance(datas, list):
        raise TypeError(f"Expected 'datas' to be a list of arrays, got {type(datas).__name__}")
    check_finite = check_bool(check_finite, "check_finite")
    datas = [as_array(d, f"datas[{k}]", ndim=2, order="C", finite=check_finite) for k, d in enumerate(datas)]
    for k, d in enumerate(datas):
        if d.shape[0] < 1 or d.shape[1] != model.sample_size:
            raise ValueError(f"Expected 'datas[{k}]' of shape (N >= 1, {model.sample_size}), got {d.shape}")
    return _engine.full_statistics(model, theta, datas, n_threads, pool)
