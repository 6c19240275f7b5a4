# SPDX-License-Identifier: BSD-3-Clause
r"""Optimal-transport benchmarks with a known map (FedMM paper §7.2, after Korotin et al. 2021b).

A benchmark is a pair of measures ``(P, Q)`` on :math:`\mathbb{R}^d` with
``Q = ∇ψ # P`` for a known, strongly convex potential ``ψ``.  By Brenier's
theorem ``∇ψ`` is then *the* quadratic-cost optimal transport map from ``P``
to ``Q``, so a fitted map ``m`` can be scored against it without estimating
any Wasserstein distance, with the metric of Korotin et al. (2021b)

.. math::

    L_2^{UVP}(m) = 100 \cdot
        \frac{\mathbb{E}_{X \sim P} \|m(X) - ∇ψ(X)\|^2}{\operatorname{Var}(Q)},
    \qquad \operatorname{Var}(Q) = \operatorname{tr} \operatorname{Cov}(Q)
    = \sum_k \operatorname{Var}(Y_k)

(a percentage of the target's variance that the map leaves unexplained).
``Var(Q)`` is the *trace* of ``Q``'s covariance.  The
FedMM paper's footnote says the original implementation used "the L1 norm of
the covariance matrix"; that implementation computes
``sample.var(axis=0).sum()``, the sum of the coordinate variances, i.e. the
L1 norm of the covariance's *diagonal* = its trace, not the entrywise L1 norm
``Σ_kl |C_kl|`` (which also counts the off-diagonal covariances and would be
larger whenever coordinates are correlated).  We use the trace.

Everything here is NumPy/SciPy only (no JAX), so it is an independent
reference for maps learned by :mod:`fedmm.algorithms`' OT solvers.

- :func:`known_map_benchmark` → :class:`KnownMapBenchmark`: ``P`` a seeded
  3-component Gaussian mixture, ``ψ`` a seeded input-convex network with a
  strongly convex quadratic term, written in NumPy with its analytic gradient.
- :func:`clustered_map_benchmark` → :class:`ClusteredMapBenchmark`: the hard
  pair, ``P`` pushed onto about ten clusters by a closed-form log-sum-exp potential.
- :func:`icnn_map_benchmark` → :class:`ICNNMapBenchmark`: Korotin et al.'s
  construction, ``P`` pushed by the gradient of a *trained* dense ICNN of the
  solvers' own architecture (:class:`DenseICNN`, weights shipped for d = 16, 32, 64).
- :func:`gaussian_benchmark` → :class:`GaussianBenchmark`: Gaussian ``P`` and
  ``Q``, whose OT map is affine and known in closed form (for tests).
- :func:`gaussian_ot_map`: the closed-form OT map between two Gaussians (the
  "linear map" reference row when applied to the first two moments).
- :func:`client_datasets`: ``P``'s samples split among clients by equal-size
  k-means (the paper's federated setting, ``μ_i = 1/n``).
"""
from __future__ import annotations

import functools
import importlib.resources
import json
from typing import Any, Callable, NamedTuple, TypeVar

import numpy as np
import scipy.linalg
import scipy.special
from scipy.special import expit

from fedmm._memory import check_allocation
from fedmm._validation import as_array, check_int, check_real, check_seed
from fedmm.data.partition import split_by_constrained_kmeans

__all__ = [
    "AffineMap",
    "L2UVP",
    "KnownMapBenchmark",
    "GaussianBenchmark",
    "known_map_benchmark",
    "ClusteredMapBenchmark",
    "clustered_map_benchmark",
    "default_affine_unexplained",
    "DenseICNN",
    "ICNNMapBenchmark",
    "icnn_map_benchmark",
    "ICNN_PAIR_DIMS",
    "KNOWN_MAP_BENCHMARKS",
    "gaussian_benchmark",
    "gaussian_ot_map",
    "client_datasets",
]

#: Monte Carlo samples behind the moments of Q that have no closed form.
MOMENT_SAMPLES = 2**17
#: Default Monte Carlo size of :meth:`KnownMapBenchmark.l2_uvp`.
DEFAULT_EVAL_SAMPLES = 2**14

#: Draws of P on which :func:`clustered_map_benchmark` balances its cells and calibrates its scale.
BALANCE_SAMPLES, CALIBRATION_SAMPLES = 2**14, 2**16


_F = TypeVar("_F", bound=Callable[..., Any])


def _one_blas_thread(func: _F) -> _F:
    """Run ``func`` with one BLAS thread.

    A multi-threaded BLAS splits a product differently for different thread
    counts, which changes its last bits; the benchmarks' draws, maps and
    references must be the same numbers on every machine (the solvers trained
    on them amplify the last bits), so everything here that multiplies
    matrices runs on one thread (``threadpoolctl``, a scikit-learn
    dependency; about a millisecond per call, which looks up the loaded
    BLAS libraries).
    """
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"):
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _stream(seed: Any, key: int, name: str = "seed") -> np.random.Generator:
    """An independent generator per purpose ``key`` from one user seed (``SeedSequence`` spawn keys)."""
    root = check_seed(seed, name)
    return np.random.default_rng(
        np.random.SeedSequence(root.entropy, spawn_key=tuple(root.spawn_key) + (key,), pool_size=root.pool_size)
    )


def _check_points(x: Any, dim: int, name: str = "x") -> np.ndarray:
    x = as_array(x, name, ndim=2, order="C")
    if x.shape[1] != dim:
        raise ValueError(f"Expected '{name}' of shape (n, {dim}), got shape {x.shape}")
    return x


def _sym_sqrt(cov: np.ndarray, name: str, *, inverse: bool = False, psd: bool = False) -> np.ndarray:
    """Symmetric square root (or inverse square root) of a symmetric positive (semi-)definite matrix."""
    w, v = scipy.linalg.eigh(cov)
    tol = 1e-12 * max(float(np.abs(w).max()), 1.0)
    if w.min() < (-tol if psd else tol):
        want = "positive semi-definite" if psd else "positive definite"
        raise ValueError(f"Expected '{name}' to be {want}, got smallest eigenvalue {w.min():.3e}")
    w = np.clip(w, 0.0, None)
    root = 1.0 / np.sqrt(w) if inverse else np.sqrt(w)
    return (v * root) @ v.T


def _check_cov(cov: Any, dim: int, name: str) -> np.ndarray:
    cov = as_array(cov, name, ndim=2)
    if cov.shape != (dim, dim):
        raise ValueError(f"Expected '{name}' of shape ({dim}, {dim}), got shape {cov.shape}")
    if not np.allclose(cov, cov.T, rtol=1e-10, atol=1e-12 * max(1.0, float(np.abs(cov).max()))):
        raise ValueError(f"Expected '{name}' to be symmetric")
    return 0.5 * (cov + cov.T)


class AffineMap:
    r"""The affine map :math:`x \mapsto A (x - c) + b`, applied row-wise.

    Parameters
    ----------
    matrix : array_like of shape (d, d)
        ``A``; invertible if :meth:`inverse` is used.
    offset : array_like of shape (d,)
        ``b``.
    center : array_like of shape (d,), optional
        ``c`` (default 0).

    Examples
    --------
    >>> import numpy as np
    >>> m = AffineMap(2.0 * np.eye(2), np.ones(2))
    >>> m(np.array([[1.0, 0.0]]))
    array([[3., 1.]])
    >>> m.inverse(m(np.array([[1.0, 0.0]])))
    array([[1., 0.]])
    """

    def __init__(self, matrix: Any, offset: Any, center: Any = None) -> None:
        matrix = as_array(matrix, "matrix", ndim=2)
        if matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 1:
            raise ValueError(f"Expected 'matrix' of shape (d, d) with d >= 1, got shape {matrix.shape}")
        dim = matrix.shape[0]
        offset = as_array(offset, "offset", ndim=1)
        if offset.shape != (dim,):
            raise ValueError(f"Expected 'offset' of shape ({dim},), got shape {offset.shape}")
        center = np.zeros(dim) if center is None else as_array(center, "center", ndim=1)
        if center.shape != (dim,):
            raise ValueError(f"Expected 'center' of shape ({dim},), got shape {center.shape}")
        self.matrix, self.offset, self.center = matrix.copy(), offset.copy(), center.copy()
        self.dim = dim

    @_one_blas_thread
    def __call__(self, x: Any) -> np.ndarray:
        """Map the rows of ``x`` (shape (n, d)) to an (n, d) float64 array."""
        x = _check_points(x, self.dim)
        return (x - self.center) @ self.matrix.T + self.offset

    @_one_blas_thread
    def inverse(self, y: Any) -> np.ndarray:
        """Solve ``A (x - c) + b = y`` for the rows of ``y`` (shape (n, d)).

        Raises ``LinAlgError`` if ``A`` is singular.
        """
        y = _check_points(y, self.dim, "y")
        return np.linalg.solve(self.matrix, (y - self.offset).T).T + self.center

    def __repr__(self) -> str:
        return f"AffineMap(dim={self.dim})"


@_one_blas_thread
def gaussian_ot_map(mean_p: Any, cov_p: Any, mean_q: Any, cov_q: Any) -> AffineMap:
    r"""The quadratic-cost OT map from :math:`N(m_P, Σ_P)` to :math:`N(m_Q, Σ_Q)`.

    .. math::

        T(x) = A (x - m_P) + m_Q, \qquad
        A = Σ_P^{-1/2} \left(Σ_P^{1/2} Σ_Q Σ_P^{1/2}\right)^{1/2} Σ_P^{-1/2},

    the gradient of the convex potential ``½ (x − m_P)ᵀ A (x − m_P) + m_Qᵀ x``
    (``A`` is symmetric positive semi-definite and ``A Σ_P A = Σ_Q``).  Applied
    to the first two moments of any ``P`` and ``Q`` it is the best *linear*
    transport map, the "linear" reference row of Korotin et al. (2021b).

    Parameters
    ----------
    mean_p, mean_q : array_like of shape (d,)
    cov_p : array_like of shape (d, d)
        Symmetric positive definite.
    cov_q : array_like of shape (d, d)
        Symmetric positive semi-definite.

    Returns
    -------
    AffineMap
        With ``matrix = A``, ``center = m_P``, ``offset = m_Q``.

    Examples
    --------
    >>> import numpy as np
    >>> T = gaussian_ot_map(np.zeros(2), np.eye(2), np.ones(2), 4.0 * np.eye(2))
    >>> T.matrix
    array([[2., 0.],
           [0., 2.]])
    """
    mean_p = as_array(mean_p, "mean_p", ndim=1)
    dim = mean_p.shape[0]
    if dim < 1:
        raise ValueError("Expected 'mean_p' of shape (d,) with d >= 1, got shape (0,)")
    mean_q = as_array(mean_q, "mean_q", ndim=1)
    if mean_q.shape != (dim,):
        raise ValueError(f"Expected 'mean_q' of shape ({dim},) like 'mean_p', got shape {mean_q.shape}")
    cov_p = _check_cov(cov_p, dim, "cov_p")
    cov_q = _check_cov(cov_q, dim, "cov_q")
    root_p = _sym_sqrt(cov_p, "cov_p")
    inv_root_p = _sym_sqrt(cov_p, "cov_p", inverse=True)
    middle = root_p @ cov_q @ root_p
    middle = _sym_sqrt(0.5 * (middle + middle.T), "cov_q", psd=True)
    matrix = inv_root_p @ middle @ inv_root_p
    return AffineMap(0.5 * (matrix + matrix.T), mean_q, mean_p)


class L2UVP(NamedTuple):
    """A Monte Carlo estimate of :math:`L_2^{UVP}` (percent).

    Attributes
    ----------
    value : float
        ``100 · mean_j ‖m(x_j) − ∇ψ(x_j)‖² / Var(Q)`` over ``n_eval`` draws ``x_j ~ P``.
    stderr : float
        Its standard error, ``100 · sd_j(‖m(x_j) − ∇ψ(x_j)‖²) / (√n_eval · Var(Q))``
        (``Var(Q)`` held fixed: it is a constant of the benchmark).
    n_eval : int
        Number of draws.
    """

    value: float
    stderr: float
    n_eval: int


class _Benchmark:
    """What both benchmarks share: sampling Q by pushing P, the metric, the reference maps."""

    dim: int
    seed: Any

    # -- to provide: _sample_source(n, rng), _grad(x), _potential(x), source_moments(), target_moments()
    @_one_blas_thread
    def sample_source(self, n: int, seed: Any) -> np.ndarray:
        """Draw ``n`` points of ``P``.

        Parameters
        ----------
        n : int
            Number of samples, ``n ≥ 1``.
        seed : None, int, SeedSequence or Generator
            Randomness (:func:`fedmm.algorithms.seed_repr` conventions); the same
            seed gives the same points.

        Returns
        -------
        ndarray of shape (n, d), float64
        """
        n = check_int(n, "n", low=1)
        return self._sample_source(n, _stream(seed, 0))

    @_one_blas_thread
    def sample_target(self, n: int, seed: Any) -> np.ndarray:
        """Draw ``n`` points of ``Q = ∇ψ # P``: ``∇ψ(X')`` for fresh ``X' ~ P``.

        These are the public target samples of the federated problem.  The
        stream differs from :meth:`sample_source`'s for the same ``seed``, so
        ``sample_target(n, s)`` is *not* ``true_map(sample_source(n, s))``.

        Returns
        -------
        ndarray of shape (n, d), float64
        """
        n = check_int(n, "n", low=1)
        return self._grad(self._sample_source(n, _stream(seed, 1)))

    @_one_blas_thread
    def true_map(self, x: Any) -> np.ndarray:
        """The OT map ``∇ψ`` applied to the rows of ``x`` (shape (n, d)) → (n, d) float64."""
        return self._grad(_check_points(x, self.dim))

    @_one_blas_thread
    def potential(self, x: Any) -> np.ndarray:
        """The potential ``ψ`` at the rows of ``x`` (shape (n, d)) → (n,) float64."""
        return self._potential(_check_points(x, self.dim))

    def target_variance(self) -> float:
        """``Var(Q) = tr Cov(Q)``, the denominator of :math:`L_2^{UVP}` (see the module docstring)."""
        return float(np.trace(self.target_moments()[1]))

    def identity_map(self) -> AffineMap:
        """The identity map, a reference row (its :math:`L_2^{UVP}` says how far ``Q`` is from ``P``)."""
        return AffineMap(np.eye(self.dim), np.zeros(self.dim))

    @_one_blas_thread
    def linear_map(self) -> AffineMap:
        """The best linear (Gaussian) OT map, fitted from the moments of ``P`` and ``Q``.

        :func:`gaussian_ot_map` applied to :meth:`source_moments` and
        :meth:`target_moments`: the OT map between the Gaussians with the
        same means and covariances as ``P`` and ``Q``.  A learned map that
        does not beat it has learned nothing beyond the first two moments.
        """
        (mean_p, cov_p), (mean_q, cov_q) = self.source_moments(), self.target_moments()
        return gaussian_ot_map(mean_p, cov_p, mean_q, cov_q)

    @_one_blas_thread
    def best_affine_map(self, *, n_fit: int = MOMENT_SAMPLES, seed: Any = 0) -> AffineMap:
        """The least-squares affine regression of ``∇ψ(X)`` on ``X``, fitted on ``n_fit`` draws of ``P``.

        Ordinary least squares of ``Y = ∇ψ(X)`` on ``[X, 1]``: the affine map
        ``x ↦ A x + b`` that minimizes the empirical ``E‖A X + b − ∇ψ(X)‖²``.
        Its :math:`L_2^{UVP}` (on other points) estimates the smallest that
        *any* affine map can reach, i.e. the fraction of ``Var(Q)`` that is
        not explained affinely -- a lower bound for the :meth:`linear_map`'s
        (which is an OT map between moment-matched Gaussians, not a
        regression), and the measure of how nonlinear the benchmark is.
        ``A`` need not be symmetric: this is a reference, not a transport map.

        Parameters
        ----------
        n_fit : int
            Draws of ``P``, at least ``d + 2``.
        seed : None, int, SeedSequence or Generator
            The draws are ``sample_source(n_fit, seed)``.

        Returns
        -------
        AffineMap
        """
        n_fit = check_int(n_fit, "n_fit", low=self.dim + 2)
        check_allocation(8 * n_fit * (3 * self.dim + 2), f"best_affine_map with n_fit={n_fit}")
        x = self.sample_source(n_fit, seed)
        y = self._grad(x)
        mean_x, mean_y = x.mean(axis=0), y.mean(axis=0)
        matrix = np.linalg.lstsq(x - mean_x, y - mean_y, rcond=None)[0].T
        return AffineMap(matrix, mean_y, mean_x)

    def reference_maps(self, *, seed: Any = 0) -> dict[str, AffineMap]:
        """The reference rows of every experiment: ``{"identity", "linear", "best affine"}`` → map.

        :meth:`identity_map`, :meth:`linear_map` and :meth:`best_affine_map` (fitted on
        ``sample_source(2¹⁷, seed)``), in that order.
        """
        return {"identity": self.identity_map(), "linear": self.linear_map(),
                "best affine": self.best_affine_map(seed=seed)}

    def l2_uvp(self, m: Callable[[np.ndarray], Any], *, n_eval: int = DEFAULT_EVAL_SAMPLES,
               seed: Any = 0) -> L2UVP:
        r"""Monte Carlo :math:`L_2^{UVP}(m) = 100 · E_P‖m(X) − ∇ψ(X)‖² / \operatorname{Var}(Q)`.

        Parameters
        ----------
        m : callable
            Maps an (n, d) float64 array of source points to an (n, d) array
            (a fitted ``TransportMap``, an :class:`AffineMap`, any function).
        n_eval : int
            Number of draws ``X ~ P`` (the standard error scales as ``1/√n_eval``).
        seed : None, int, SeedSequence or Generator
            The evaluation points are ``sample_source(n_eval, seed)``; keep it
            fixed to compare maps on the same points.

        Returns
        -------
        L2UVP
            ``(value, stderr, n_eval)``, in percent.
        """
        return self.l2_uvp_evaluator(n_eval=n_eval, seed=seed)(m)

    @_one_blas_thread
    def l2_uvp_evaluator(self, *, n_eval: int = DEFAULT_EVAL_SAMPLES, seed: Any = 0) -> Callable[[Any], L2UVP]:
        """A function ``m ↦`` :meth:`l2_uvp` ``(m)`` on points drawn once (cheaper when called every round).

        The points ``X ~ P`` and ``∇ψ(X)`` are computed here; every call only
        evaluates ``m``.  Same arguments as :meth:`l2_uvp`.
        """
        n_eval = check_int(n_eval, "n_eval", low=2)
        x = self.sample_source(n_eval, seed)
        y = self._grad(x)
        variance = self.target_variance()
        dim = self.dim

        def evaluate(m: Callable[[np.ndarray], Any]) -> L2UVP:
            if not callable(m):
                raise TypeError(f"Expected 'm' to be a callable map of (n, {dim}) arrays, got {type(m).__name__}")
            out = as_array(m(x.copy()), "m(x)", ndim=2, finite=False)
            if out.shape != x.shape:
                raise ValueError(f"Expected 'm' to return an array of shape {x.shape}, got shape {out.shape}")
            err = np.einsum("ij,ij->i", out - y, out - y)
            if not np.isfinite(err).all():
                return L2UVP(float("inf"), float("nan"), n_eval)
            scale = 100.0 / variance
            return L2UVP(float(err.mean() * scale), float(err.std(ddof=1) * scale / np.sqrt(n_eval)), n_eval)

        return evaluate


class _MixtureSource(_Benchmark):
    """A Gaussian-mixture source ``P`` (attributes ``weights``, ``means``, ``covariances``, ``_chol``)."""

    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray
    _chol: np.ndarray

    def _sample_source(self, n: int, rng: np.random.Generator) -> np.ndarray:
        labels = rng.choice(self.weights.size, size=n, p=self.weights)
        z = rng.standard_normal((n, self.dim))
        x = np.empty_like(z)
        for k in range(self.weights.size):  # K = 3 components, vectorized over samples
            rows = labels == k
            x[rows] = z[rows] @ self._chol[k].T + self.means[k]
        return x

    @_one_blas_thread
    def source_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Exact mean (d,) and covariance (d, d) of the mixture ``P``."""
        mean = self.weights @ self.means
        centered = self.means - mean
        cov = np.einsum("k,kij->ij", self.weights, self.covariances) + (centered.T * self.weights) @ centered
        return mean, 0.5 * (cov + cov.T)

    @_one_blas_thread
    def target_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean (d,) and covariance (d, d) of ``Q``, estimated once from ``MOMENT_SAMPLES`` = 2¹⁷ draws.

        ``Q`` has no closed-form moments; the draws come from a stream of the
        benchmark's seed, so the estimate is a fixed constant of the benchmark
        (relative error of ``tr Cov(Q)`` of order ``√(2/2¹⁷) ≈ 0.4%``; by
        construction ``tr Cov(Q) = d`` for this estimate).
        """
        return self._target_moments[0].copy(), self._target_moments[1].copy()

    def _standardize_target(self, seed_sequence: Any) -> float:
        """Estimate Q's moments on 2¹⁷ draws; return the ``c > 0`` with ``tr Cov(cQ) = d`` and store cQ's moments."""
        y = self._grad(self._sample_source(MOMENT_SAMPLES, _stream(seed_sequence, 3)))
        mean, cov = y.mean(axis=0), np.cov(y, rowvar=False)
        c = float(np.sqrt(self.dim / np.trace(cov)))
        self._target_moments = (mean * c, 0.5 * (cov + cov.T) * c * c)
        return c


def _mixture_source(rng: np.random.Generator, dim: int, n_components: int):
    """``P`` of :func:`known_map_benchmark`: weights, means, covariances (standardized: ``E‖X‖² = d``)."""
    means = rng.standard_normal((n_components, dim))
    rotations = rng.standard_normal((n_components, dim, dim))
    rotations /= np.linalg.norm(rotations, axis=2, keepdims=True)
    covariances = 0.25 * rotations @ rotations.transpose(0, 2, 1) + 1e-6 * np.eye(dim)
    weights = np.full(n_components, 1.0 / n_components)
    second_moment = float(weights @ (np.einsum("kii->k", covariances) + np.einsum("ki,ki->k", means, means)))
    scale = np.sqrt(second_moment / dim)
    return weights, means / scale, covariances / scale**2


class KnownMapBenchmark(_MixtureSource):
    r"""Gaussian mixture ``P`` pushed by the gradient of a seeded input-convex potential.

    Built by :func:`known_map_benchmark`; see it for the construction.

    Attributes
    ----------
    dim : int
    seed : int or None
        As given to :func:`known_map_benchmark` (``None`` if a generator was passed).
    weights : ndarray of shape (K,)
        Mixture weights of ``P`` (``1/K`` each).
    means : ndarray of shape (K, d)
    covariances : ndarray of shape (K, d, d)
        Components of ``P`` (standardized so that ``E‖X‖² = d``).
    strong_convexity : float
        ``cλ``: ``∇²ψ ⪰ cλ I`` after the final rescaling by ``c``.
    output_scale : float
        ``c``, the factor that standardizes ``Q`` (``tr Cov(Q) = d``).
    hidden_sizes : tuple of int
        Widths ``(h₁, h₂)`` of the potential's network.
    beta : float
        ``β``, the calibrated scale of the network part of ``ψ``.
    """

    def __init__(self, dim, seed, seed_sequence, *, weights, means, covariances, layers, strong_convexity,
                 nonlinearity):
        self.dim, self.seed = dim, seed
        self.weights, self.means, self.covariances = weights, means, covariances
        self._seed_sequence = seed_sequence
        self._chol = np.linalg.cholesky(covariances)
        self._a1, self._b1, self._w2, self._a2, self._b2, self._v = layers
        self.hidden_sizes = (self._a1.shape[0], self._a2.shape[0])
        # Calibrate β (folded into v): RMS of the network part = nonlinearity × RMS of λx, E‖X‖² = d.
        self.strong_convexity = 0.0
        raw = self._grad(self._sample_source(2**14, _stream(seed_sequence, 2)))
        rms = float(np.sqrt(np.einsum("ij,ij->i", raw, raw).mean()))
        self.beta = nonlinearity * strong_convexity * np.sqrt(dim) / rms if rms > 0 else 0.0
        self._v = self._v * self.beta
        self.strong_convexity = strong_convexity
        # Standardize Q like P (tr Cov(Q) = d): ψ ← cψ, c > 0, keeps ∇ψ an OT map.
        c = self._standardize_target(seed_sequence)
        self.output_scale = c
        self.strong_convexity *= c
        self._v = self._v * c

    def _hidden(self, x: np.ndarray):
        u1 = x @ self._a1.T + self._b1
        z1 = np.logaddexp(0.0, u1)
        u2 = z1 @ self._w2.T + x @ self._a2.T + self._b2
        return u1, z1, u2

    def _potential(self, x: np.ndarray) -> np.ndarray:
        _, _, u2 = self._hidden(x)
        return 0.5 * self.strong_convexity * np.einsum("ij,ij->i", x, x) + np.logaddexp(0.0, u2) @ self._v

    def _grad(self, x: np.ndarray) -> np.ndarray:
        u1, _, u2 = self._hidden(x)
        g2 = expit(u2) * self._v                 # ∂ψ/∂u2, (n, h2), ≥ 0
        g1 = (g2 @ self._w2) * expit(u1)        # ∂ψ/∂u1 through the non-negative path, (n, h1)
        return self.strong_convexity * x + g2 @ self._a2 + g1 @ self._a1

    def __repr__(self) -> str:
        return f"KnownMapBenchmark(dim={self.dim}, seed={self.seed!r}, hidden_sizes={self.hidden_sizes})"


@_one_blas_thread
def known_map_benchmark(
    dim: int,
    *,
    seed: Any,
    n_components: int = 3,
    hidden_sizes: tuple[int, int] = (16, 16),
    sharpness: float = 8.0,
    nonlinearity: float = 3.0,
    strong_convexity: float = 1.0,
) -> KnownMapBenchmark:
    r"""A Gaussian-mixture source pushed by the gradient of a known strongly convex potential.

    **Source** ``P``: a mixture of ``K = n_components`` Gaussians with equal
    weights, means with i.i.d. ``N(0, 1)`` coordinates and covariances
    ``0.25 · R_k R_kᵀ`` (``R_k`` Gaussian with unit-norm rows, so every
    coordinate has within-component variance 0.25), all rescaled by one scalar
    so that ``E‖X‖² = d`` (as Korotin et al. 2021b standardize their mixtures).

    **Potential** ``ψ``: a two-hidden-layer input-convex network with softplus
    activations ``s(u) = log(1 + eᵘ)``,

    .. math::

        z_1 = s(A_1 x + b_1), \quad z_2 = s(W_2 z_1 + A_2 x + b_2), \quad
        ψ(x) = \frac{λ}{2}\|x\|^2 + β\, v^\top z_2,

    with ``W₂ ≥ 0`` and ``v ≥ 0`` entrywise (half-normal draws), ``A₁, A₂``
    with i.i.d. ``N(0, sharpness²/d)`` entries, ``b₁ ~ N(0, 1)`` and ``b₂``
    centering the second layer.  ``ψ`` is convex because ``s`` is convex and
    non-decreasing and the convex path has non-negative weights, and
    ``λ``-strongly convex thanks to the quadratic term: ``∇²ψ ⪰ λ I``; ``s`` is
    smooth with ``0 < s'' ≤ 1/4``, so ``∇ψ`` is a smooth bi-Lipschitz bijection
    and, by Brenier's theorem, the unique OT map from ``P`` to ``Q = ∇ψ # P``.
    The gradient is analytic:

    .. math::

        ∇ψ(x) = λ x + A_2^\top g_2 + A_1^\top g_1, \quad
        g_2 = β\, v ⊙ σ(u_2), \quad g_1 = (W_2^\top g_2) ⊙ σ(u_1),

    with ``σ = s'`` the logistic function.  Why this choice: it is the
    architecture family the issue names (an ICNN with random non-negative
    weights), but smooth (softplus instead of CELU) so that the true map has
    no kinks, and narrow with large input weights (``sharpness``) so that
    every unit switches on and off inside ``P``'s support: with wide layers of
    random units the map averages out to nearly affine (the best linear map
    then leaves well under 1% of the variance unexplained, and the benchmark
    could not tell a nonlinear solver from a linear one).  ``β`` is set so
    that the RMS of the nonlinear part ``‖∇ψ(X) − λX‖`` is ``nonlinearity``
    times the RMS of ``‖λX‖`` (computed on 2¹⁴ draws of a stream of the
    seed).  Finally ``ψ`` is multiplied by the ``c > 0`` that makes
    ``tr Cov(Q) = d`` (2¹⁷ draws), so that ``Q`` is standardized like ``P``;
    ``cψ`` is still strongly convex, so ``∇(cψ)`` is still the OT map.  With the defaults the best
    linear map leaves roughly 5–15% of ``Var(Q)`` unexplained for d = 16 … 64 and the identity 100%
    or more.

    Parameters
    ----------
    dim : int
        Dimension ``d ≥ 1``.
    seed : None, int, SeedSequence or Generator
        Everything (``P``, ``ψ``, the moments of ``Q``) is a deterministic
        function of it; keyword-only and required.
    n_components : int
        ``K ≥ 1`` mixture components (the paper: 3).
    hidden_sizes : (int, int)
        Widths ``(h₁, h₂)`` of the potential's layers, each ≥ 1.
    sharpness : float in (0, 1e100]
        Scale ``> 0`` of the input weights (larger: a more nonlinear map).
    nonlinearity : float in [0, 1e100]
        RMS ratio ``≥ 0`` of the network part of ``∇ψ`` to ``λ x`` (0: ``∇ψ = λ x``).
    strong_convexity : float in (0, 1e100]
        ``λ > 0``.

    Returns
    -------
    KnownMapBenchmark

    Examples
    --------
    >>> bench = known_map_benchmark(4, seed=0)
    >>> x = bench.sample_source(3, seed=1)
    >>> bench.true_map(x).shape
    (3, 4)
    >>> bench.l2_uvp(bench.true_map).value
    0.0
    """
    dim = check_int(dim, "dim", low=1)
    n_components = check_int(n_components, "n_components", low=1)
    try:
        h1, h2 = hidden_sizes
    except (TypeError, ValueError):
        raise ValueError(f"Expected 'hidden_sizes' to be a pair of positive ints, got {hidden_sizes!r}") from None
    h1, h2 = check_int(h1, "hidden_sizes[0]", low=1), check_int(h2, "hidden_sizes[1]", low=1)
    check_allocation(8 * (n_components * (dim * dim + dim + 1) + dim * (h1 + h2) + h1 * h2 + h1 + h2),
                     f"known_map_benchmark with dim={dim}, n_components={n_components}, "
                     f"hidden_sizes={(h1, h2)}")
    # at most 1e100: the potential's weights scale with them and larger values overflow float64
    sharpness = check_real(sharpness, "sharpness", low=0.0, high=1e100, low_open=True)
    nonlinearity = check_real(nonlinearity, "nonlinearity", low=0.0, high=1e100)
    strong_convexity = check_real(strong_convexity, "strong_convexity", low=0.0, high=1e100, low_open=True)
    root = check_seed(seed)
    rng_p, rng_psi = _stream(root, 0), _stream(root, 1)

    weights, means, covariances = _mixture_source(rng_p, dim, n_components)

    a1 = rng_psi.standard_normal((h1, dim)) * (sharpness / np.sqrt(dim))
    b1 = rng_psi.standard_normal(h1)
    w2 = np.abs(rng_psi.standard_normal((h2, h1))) / np.sqrt(h1)
    a2 = rng_psi.standard_normal((h2, dim)) * (sharpness / np.sqrt(dim))
    b2 = rng_psi.standard_normal(h2) - w2 @ np.logaddexp(0.0, b1)
    v = np.abs(rng_psi.standard_normal(h2))

    return KnownMapBenchmark(
        dim, seed if isinstance(seed, (int, np.integer)) else None, root,
        weights=weights, means=means, covariances=covariances, layers=(a1, b1, w2, a2, b2, v),
        strong_convexity=strong_convexity, nonlinearity=nonlinearity,
    )


class ClusteredMapBenchmark(_MixtureSource):
    r"""Gaussian mixture ``P`` pushed onto ``K`` clusters by a log-sum-exp potential (the hard known-map pair).

    Built by :func:`clustered_map_benchmark`; see it for the construction.

    Attributes
    ----------
    dim : int
    seed : int or None
        As given to :func:`clustered_map_benchmark` (``None`` if a generator was passed).
    weights, means, covariances
        The components of ``P`` (those of :func:`known_map_benchmark` for the same ``seed``).
    directions : ndarray of shape (K, d)
        ``b_k``, the vectors of the log-sum-exp part (``∇ψ(x) − λx`` is a convex combination of ``β b_k``).
    offsets : ndarray of shape (K,)
        ``c_k``, balancing the ``K`` cells to equal mass under ``P``.
    temperature : float
        ``τ``.
    strong_convexity : float
        ``λ``: ``∇²ψ ⪰ λ I`` (after the standardization of ``Q``).
    beta : float
        ``β``, the scale of the log-sum-exp part (after the standardization of ``Q``).
    output_scale : float
        The factor that standardized ``Q`` (``tr Cov(Q) = d``).
    affine_unexplained : float
        The calibration target: the fraction of ``Var(Q)`` that the least-squares affine map of ``∇ψ(X)`` on
        ``X`` leaves unexplained on the calibration sample.
    max_affine_unexplained : float
        The largest fraction reachable with these directions (``β → ∞``), on the same sample.
    """

    def __init__(self, dim, seed, seed_sequence, *, weights, means, covariances, directions, temperature,
                 affine_unexplained):
        self.dim, self.seed = dim, seed
        self.weights, self.means, self.covariances = weights, means, covariances
        self._chol = np.linalg.cholesky(covariances)
        self.directions, self.temperature = directions, temperature
        self.n_pieces = directions.shape[0]
        self.strong_convexity, self.beta = 1.0, 0.0
        self.offsets = self._balanced_offsets(self._sample_source(BALANCE_SAMPLES, _stream(seed_sequence, 2)))
        # Calibrate β: T = λx + βG(x); least squares of T on [x, 1] leaves β²r of λ²a + 2λβc + β²g unexplained.
        x = self._sample_source(CALIBRATION_SAMPLES, _stream(seed_sequence, 4))
        g_x = self._gates(x) @ directions
        xc, gc = x - x.mean(axis=0), g_x - g_x.mean(axis=0)
        resid = gc - xc @ np.linalg.lstsq(xc, gc, rcond=None)[0]
        r, g = float(np.vdot(resid, resid)), float(np.vdot(gc, gc))
        a, c = float(np.vdot(xc, xc)), float(np.vdot(xc, gc))
        self.max_affine_unexplained = r / g if g > 0 else 0.0
        if self.max_affine_unexplained < 1e-3:
            raise ValueError(f"Expected a nonlinear potential, but its log-sum-exp part is affine on P (largest "
                             f"unexplained fraction {self.max_affine_unexplained:.2g}); raise 'n_pieces' or lower "
                             "'temperature'")
        if affine_unexplained is None:
            affine_unexplained = min(default_affine_unexplained(dim), 0.9 * self.max_affine_unexplained)
        elif affine_unexplained >= 0.99 * self.max_affine_unexplained:
            raise ValueError(
                f"Expected 'affine_unexplained' below {0.99 * self.max_affine_unexplained:.3f} (99% of the largest "
                f"fraction this potential reaches, {self.max_affine_unexplained:.3f}; raise 'n_pieces' or lower "
                f"'temperature' for more), got {affine_unexplained}")
        t = affine_unexplained
        self.affine_unexplained = t
        self.beta = (t * c + np.sqrt(t * t * c * c + (r - t * g) * t * a)) / (r - t * g)
        # Standardize Q like P (tr Cov(Q) = d): ψ ← sψ, s > 0, keeps ∇ψ an OT map.
        s = self._standardize_target(seed_sequence)
        self.output_scale = s
        self.strong_convexity *= s
        self.beta *= s

    def _balanced_offsets(self, x: np.ndarray, max_iter: int = 1000) -> np.ndarray:
        """``c`` such that every soft cell ``E_P[softmax((Bx + c)/τ)_k]`` is ``1/K`` on the sample ``x``
        (the dual fixed point of entropic semi-discrete OT onto ``K`` equal masses)."""
        u = x @ self.directions.T
        k = self.n_pieces
        self.offsets = -u.mean(axis=0)
        for _ in range(max_iter):
            mass = self._gates(x, u).mean(axis=0)
            err = np.log(k * mass)
            if np.abs(err).max() < 1e-8:
                break
            self.offsets = self.offsets - self.temperature * err
        return self.offsets

    def _gates(self, x: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
        """``softmax((B x + c)/τ)`` per row, (n, K)."""
        z = ((x @ self.directions.T) if u is None else u) + self.offsets
        z = z / self.temperature
        z -= z.max(axis=1, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(axis=1, keepdims=True)
        return z

    def _potential(self, x: np.ndarray) -> np.ndarray:
        z = (x @ self.directions.T + self.offsets) / self.temperature
        return (0.5 * self.strong_convexity * np.einsum("ij,ij->i", x, x)
                + self.beta * self.temperature * scipy.special.logsumexp(z, axis=1))

    def _grad(self, x: np.ndarray) -> np.ndarray:
        return self.strong_convexity * x + self.beta * (self._gates(x) @ self.directions)

    def __repr__(self) -> str:
        return (f"ClusteredMapBenchmark(dim={self.dim}, seed={self.seed!r}, n_pieces={self.n_pieces}, "
                f"affine_unexplained={self.affine_unexplained:.3g})")


def default_affine_unexplained(dim: int) -> float:
    r"""The default calibration target of :func:`clustered_map_benchmark`: ``min(0.52, 0.12 + 0.08 log₂(d/2))``.

    0.36 / 0.44 / 0.52 at d = 16 / 32 / 64 (0.20 at d = 4): with these, the
    linear (Gaussian) OT map leaves about 42 / 53 / 64% of ``Var(Q)``
    unexplained, close to what it leaves on Korotin et al.'s Mix3toMix10
    pairs (about 42 / 55 / 64%, measured on a re-creation of those pairs).

    Parameters
    ----------
    dim : int
        ``d ≥ 1``.

    Returns
    -------
    float

    Examples
    --------
    >>> [round(default_affine_unexplained(d), 2) for d in (16, 32, 64)]
    [0.36, 0.44, 0.52]
    """
    dim = check_int(dim, "dim", low=1)
    return float(min(0.52, max(0.02, 0.12 + 0.08 * np.log2(dim / 2.0))))


@_one_blas_thread
def clustered_map_benchmark(
    dim: int,
    *,
    seed: Any,
    n_components: int = 3,
    n_pieces: int = 10,
    temperature: float = 0.1,
    affine_unexplained: float | None = None,
) -> ClusteredMapBenchmark:
    r"""The hard known-map benchmark: ``P`` (3 Gaussians) pushed onto about ``K = 10`` clusters.

    Built like Korotin et al.'s (2021b) Mix3toMix10 pairs in spirit -- a
    3-component Gaussian mixture ``P`` and a target ``Q = ∇ψ # P`` that is
    strongly non-Gaussian, close to a mixture of ten clusters -- but **not
    their pair**: their ``ψ`` is an ICNN trained to push ``P`` onto a
    10-component mixture, ours is constructed in closed form.

    **Source** ``P``: exactly that of :func:`known_map_benchmark` with the
    same ``seed`` and ``n_components`` (equal weights, standardized so that
    ``E‖X‖² = d``).

    **Potential**:

    .. math::

        ψ(x) = \frac{λ}{2}\|x\|^2 + β τ \log \sum_{k=1}^{K} \exp\frac{b_k^\top x + c_k}{τ},
        \qquad
        ∇ψ(x) = λ x + β \sum_k \operatorname{softmax}_k\Big(\frac{Bx + c}{τ}\Big) b_k .

    ``ψ`` is convex (log-sum-exp of affine functions) and ``λ``-strongly
    convex; its Hessian ``λ I + (β/τ) Bᵀ(diag(w) − w wᵀ) B`` (``w`` the
    softmax) is symmetric positive definite, so ``∇ψ`` is, by Brenier's
    theorem, the OT map from ``P`` to ``Q``; it is exact and costs
    ``O(n K d)``.  The construction:

    - the ``b_k`` are ``K`` Gaussian directions drawn in the orthogonal
      complement of the span of ``P``'s centred component means (the whole
      space when that complement is ``{0}``, e.g. ``d ≤ 2``), each scaled so
      that ``b_kᵀ X`` has unit variance *within* a component: every cell
      ``argmax_k (b_kᵀ x + c_k)`` cuts through all three components (a
      function of the component alone would be affine in ``x``, because three
      means are affinely independent);
    - the offsets ``c_k`` give every soft cell the mass ``1/K`` under ``P``
      (fixed-point iterations on 2¹⁴ draws): ``x ↦ β Σ_k softmax_k b_k`` is
      then the entropic semi-discrete OT map from ``P`` to ``K`` equal
      masses at ``β b_k``, and ``Q`` is close to a mixture of ``K`` clusters
      (translated pieces of ``P``, blurred by ``λ x``);
    - ``β`` is set in closed form so that the least-squares affine map of
      ``∇ψ(X)`` on ``X`` leaves the fraction ``affine_unexplained`` of
      ``Var(Q)`` unexplained on 2¹⁶ draws (as ``β`` grows from 0 the
      fraction grows from 0 to :attr:`~ClusteredMapBenchmark.max_affine_unexplained`,
      about 0.6 at d ≥ 16 with the defaults);
    - finally ``ψ`` is multiplied by the ``s > 0`` that makes ``tr Cov(Q) = d``
      (2¹⁷ draws), as in :func:`known_map_benchmark`.

    Everything is a deterministic function of ``seed``; ``d = 64`` takes
    a few seconds.  Measured with the defaults and ``seed = 0``
    (docs/figures/README.md): the best affine map leaves 36 / 44 / 52% and the
    linear OT map (:meth:`~ClusteredMapBenchmark.linear_map`) about 42 / 53 /
    64% of ``Var(Q)`` unexplained at d = 16 / 32 / 64, where
    :func:`known_map_benchmark` leaves 7 and 8%.

    Parameters
    ----------
    dim : int
        Dimension ``d ≥ 1``.
    seed : None, int, SeedSequence or Generator
        Keyword-only and required.
    n_components : int
        Components of ``P``, ``≥ 1`` (the paper: 3).
    n_pieces : int
        ``K ≥ 2``, the affine pieces of the log-sum-exp, i.e. the clusters of ``Q``.
    temperature : float in [0.001, 100]
        ``τ``, in units of the within-component standard deviation of ``b_kᵀ X``:
        the width of the transitions between cells (smaller: a sharper, harder map).
    affine_unexplained : float in (0, 1), optional
        The calibration target (see above); default
        :func:`default_affine_unexplained` ``(dim)`` (0.36 / 0.44 / 0.52 at d = 16 / 32 / 64), lowered
        to 0.9 times the largest reachable fraction where that is smaller.  A value at or
        above 99% of the reachable fraction raises ``ValueError``.

    Returns
    -------
    ClusteredMapBenchmark

    Examples
    --------
    >>> bench = clustered_map_benchmark(16, seed=0)
    >>> round(bench.affine_unexplained, 2)
    0.36
    >>> bench.l2_uvp(bench.true_map).value
    0.0
    """
    dim = check_int(dim, "dim", low=1)
    n_components = check_int(n_components, "n_components", low=1)
    n_pieces = check_int(n_pieces, "n_pieces", low=2)
    # below 1e-3 the soft cells are hard steps and (B x + c)/τ overflows for far-out points
    temperature = check_real(temperature, "temperature", low=1e-3, high=100.0)
    if affine_unexplained is not None:
        affine_unexplained = check_real(affine_unexplained, "affine_unexplained", low=0.0, high=1.0,
                                        low_open=True, high_open=True)
    check_allocation(8 * (n_components * (dim * dim + dim + 1) + MOMENT_SAMPLES * (2 * dim + n_pieces + 2)),
                     f"clustered_map_benchmark with dim={dim}, n_components={n_components}, n_pieces={n_pieces}")
    root = check_seed(seed)
    weights, means, covariances = _mixture_source(_stream(root, 0), dim, n_components)
    # Directions orthogonal to the span of the centred means, unit within-component variance each.
    centred = means - weights @ means
    _, sing, vt = np.linalg.svd(centred, full_matrices=True)
    rank = int((sing > 1e-10 * max(1.0, float(sing.max(initial=0.0)))).sum())
    basis = vt[rank:].T if rank < dim else np.eye(dim)
    directions = (basis @ _stream(root, 1).standard_normal((basis.shape[1], n_pieces))).T
    within = np.einsum("k,kij->ij", weights, covariances)
    directions /= np.sqrt(np.einsum("ki,ij,kj->k", directions, within, directions))[:, None]
    return ClusteredMapBenchmark(
        dim, seed if isinstance(seed, (int, np.integer)) else None, root, weights=weights, means=means,
        covariances=covariances, directions=directions, temperature=temperature,
        affine_unexplained=affine_unexplained,
    )


#: Dimensions with shipped weights for :func:`icnn_map_benchmark` (``fedmm/data/ot_pairs/icnn_d{d}.npz``).
ICNN_PAIR_DIMS = (16, 32, 64)
#: Rows per block when the dense ICNN is evaluated (bounds the temporaries to a few MiB per hidden unit).
ICNN_BLOCK_ROWS = 4096


class DenseICNN:
    r"""NumPy evaluation of a dense ICNN potential and its gradient (the architecture of ``fedmm.models.ICNN``).

    For hidden sizes :math:`h_1, \dots, h_L`, rank :math:`R` and strong convexity :math:`c`:

    .. math::

        z_1 = q_1(x), \qquad z_{k+1} = σ(C_k z_k + q_{k+1}(x)), \qquad
        f(x) = w^\top z_L + \tfrac{c}{2}\|x\|^2,

    with :math:`q_k(x)_j = \sum_r (a_{k,r,j}^\top x)^2 + W_{k,j}^\top x + b_{k,j}`,
    :math:`σ` CELU (``α = 1``) or softplus, and :math:`C_k, w ≥ 0`.  The
    gradient is back-propagated by hand:

    .. math::

        ∇f(x) = c x + \sum_k \big(2 A_k (δ_k ⊙ A_k^\top x) + W_k^\top δ_k\big),
        \quad δ_L = w ⊙ σ'(u_L),\ δ_{k} = (C_k^\top δ_{k+1}) ⊙ σ'(u_k),\ δ_1 = C_1^\top δ_2,

    with :math:`u_k` the pre-activations (no activation, so no :math:`σ'`, on
    the first layer).  The flat parameter layout is ``fedmm.models.ICNN``'s
    (for ``k = 1..L``: ``A_k`` ``(D, R, h_k)``, ``W_k`` ``(h_k, D)``, ``b_k``
    ``(h_k,)``; then ``C_k`` ``(h_{k+1}, h_k)`` for ``k = 1..L-1``; then ``w``
    ``(h_L,)``; row-major), so parameters learned by the package's solvers
    evaluate here without JAX.  ``f`` is convex when every ``C_k`` and ``w`` is
    non-negative (checked) and ``c``-strongly convex.

    Parameters
    ----------
    dim : int
    hidden_sizes : tuple of int
    params : ndarray of shape (n_params,), float64
    rank : int
    strong_convexity : float
    activation : {'celu', 'softplus'}

    Attributes
    ----------
    params : ndarray of shape (n_params,), float64
        A read-only copy of the flat parameters.
    n_params : int
    """

    def __init__(self, dim: int, hidden_sizes: tuple[int, ...], params: np.ndarray, *, rank: int,
                 strong_convexity: float, activation: str) -> None:
        self.dim, self.hidden_sizes, self.rank = dim, tuple(hidden_sizes), rank
        self.strong_convexity, self.activation = strong_convexity, activation
        shapes = []
        for k, h in enumerate(self.hidden_sizes):
            shapes += [(f"A{k}", (dim, rank, h)), (f"W{k}", (h, dim)), (f"b{k}", (h,))]
        for k in range(len(self.hidden_sizes) - 1):
            shapes.append((f"C{k}", (self.hidden_sizes[k + 1], self.hidden_sizes[k])))
        shapes.append(("w", (self.hidden_sizes[-1],)))
        self.n_params = int(sum(int(np.prod(shape)) for _, shape in shapes))
        params = as_array(params, "params", ndim=1)  # finite float64
        if params.shape != (self.n_params,):
            raise ValueError(f"Expected 'params' of shape ({self.n_params},) for dim={dim}, hidden_sizes="
                             f"{list(self.hidden_sizes)}, rank={rank}, got {params.shape}")
        blocks, at = {}, 0
        for name, shape in shapes:
            size = int(np.prod(shape))
            blocks[name] = np.ascontiguousarray(params[at:at + size].reshape(shape))
            at += size
        for name in [n for n, _ in shapes if n[0] in "Cw"]:
            if (blocks[name] < 0).any():
                raise ValueError(f"Expected the convex-path weights of 'params' ({name}) to be non-negative (an "
                                 "input-convex network), got a negative entry")
        self._blocks = blocks
        self.params = params.copy()
        self.params.flags.writeable = False
        # A_k as (D, R h_k) for one product per layer
        self._a = [blocks[f"A{k}"].reshape(dim, rank * h) for k, h in enumerate(self.hidden_sizes)]

    def _forward(self, x: np.ndarray):
        """Per layer: ``A_kᵀx`` (n, R, h), the pre-activation ``u_k`` (n, h) and ``z_k``."""
        b = self._blocks
        projs, pres, z = [], [], None
        for k, h in enumerate(self.hidden_sizes):
            proj = (x @ self._a[k]).reshape(x.shape[0], self.rank, h)
            q = np.einsum("nrh,nrh->nh", proj, proj) + x @ b[f"W{k}"].T + b[f"b{k}"]
            if k == 0:
                u = q
                z = q
            else:
                u = z @ b[f"C{k - 1}"].T + q
                z = (np.where(u > 0.0, u, np.expm1(np.minimum(u, 0.0))) if self.activation == "celu"
                     else np.logaddexp(0.0, u))
            projs.append(proj)
            pres.append(u)
        return projs, pres, z

    def _slope(self, u: np.ndarray) -> np.ndarray:
        """``σ'(u)``."""
        return np.where(u > 0.0, 1.0, np.exp(np.minimum(u, 0.0))) if self.activation == "celu" else expit(u)

    def value(self, x: np.ndarray) -> np.ndarray:
        """``f`` at the rows of ``x`` (n, D) → (n,), in blocks of ``ICNN_BLOCK_ROWS`` rows."""
        out = np.empty(x.shape[0])
        for lo in range(0, x.shape[0], ICNN_BLOCK_ROWS):
            xb = x[lo:lo + ICNN_BLOCK_ROWS]
            z = self._forward(xb)[2]
            out[lo:lo + ICNN_BLOCK_ROWS] = z @ self._blocks["w"] + 0.5 * self.strong_convexity * np.einsum(
                "ij,ij->i", xb, xb)
        return out

    def gradient(self, x: np.ndarray) -> np.ndarray:
        """``∇f`` at the rows of ``x`` (n, D) → (n, D), in blocks of ``ICNN_BLOCK_ROWS`` rows."""
        b = self._blocks
        out = np.empty_like(x)
        for lo in range(0, x.shape[0], ICNN_BLOCK_ROWS):
            xb = x[lo:lo + ICNN_BLOCK_ROWS]
            projs, pres, _ = self._forward(xb)
            grad = self.strong_convexity * xb
            g = np.broadcast_to(b["w"], (xb.shape[0], b["w"].size))  # ∂f/∂z_L
            for k in range(len(self.hidden_sizes) - 1, -1, -1):
                delta = g * self._slope(pres[k]) if k > 0 else g  # ∂f/∂u_k (∂f/∂q_k)
                weighted = (projs[k] * delta[:, None, :]).reshape(xb.shape[0], -1)
                grad = grad + 2.0 * (weighted @ self._a[k].T) + delta @ b[f"W{k}"]
                if k > 0:
                    g = delta @ b[f"C{k - 1}"]
            out[lo:lo + ICNN_BLOCK_ROWS] = grad
        return out


class ICNNMapBenchmark(_MixtureSource):
    r"""Gaussian mixture ``P`` pushed by the gradient of a dense ICNN (Korotin et al.'s construction).

    Built by :func:`icnn_map_benchmark`; see it for the construction.

    Attributes
    ----------
    dim : int
    seed : int or None
        The seed of ``P`` (the source of :func:`known_map_benchmark` for that seed).
    weights, means, covariances
        The components of ``P``.
    network : DenseICNN
        The potential before standardization (``ψ = s f``).
    output_scale : float
        ``s``, the factor that standardized ``Q`` (``tr Cov(Q) = d``).
    strong_convexity : float
        ``s c``: ``∇²ψ ⪰ s c I``.
    provenance : dict
        How the shipped weights were made (empty for weights passed by the caller).
    """

    def __init__(self, dim, seed, seed_sequence, *, weights, means, covariances, network, provenance):
        self.dim, self.seed = dim, seed
        self.weights, self.means, self.covariances = weights, means, covariances
        self._chol = np.linalg.cholesky(covariances)
        self.network, self.provenance = network, provenance
        self.output_scale = 1.0
        s = self._standardize_target(seed_sequence)
        self.output_scale = s
        self.strong_convexity = s * network.strong_convexity

    def _potential(self, x: np.ndarray) -> np.ndarray:
        return self.output_scale * self.network.value(x)

    def _grad(self, x: np.ndarray) -> np.ndarray:
        return self.output_scale * self.network.gradient(x)

    def __repr__(self) -> str:
        return (f"ICNNMapBenchmark(dim={self.dim}, seed={self.seed!r}, "
                f"hidden_sizes={list(self.network.hidden_sizes)})")


def _shipped_icnn(dim: int) -> tuple[np.ndarray, dict, dict]:
    """The shipped weights for ``dim`` (validated: untrusted bytes), their architecture and provenance."""
    resource = importlib.resources.files("fedmm.data").joinpath("ot_pairs", f"icnn_d{dim}.npz")
    with resource.open("rb") as fh, np.load(fh, allow_pickle=False) as npz:
        if set(npz.files) != {"params", "architecture", "provenance"}:
            raise ValueError(f"Expected the arrays params, architecture, provenance in {resource}, got {npz.files}")
        params = np.asarray(npz["params"], dtype=np.float64)
        architecture = json.loads(str(npz["architecture"]))
        provenance = json.loads(str(npz["provenance"]))
    if params.ndim != 1 or not np.isfinite(params).all():
        raise ValueError(f"Expected finite 1-D parameters in {resource}")
    return params, architecture, provenance


@_one_blas_thread
def icnn_map_benchmark(
    dim: int,
    *,
    seed: Any = 0,
    params: Any = None,
    hidden_sizes: Any = None,
    rank: int = 1,
    strong_convexity: float = 1e-4,
    activation: str = "celu",
) -> ICNNMapBenchmark:
    r"""The trained-ICNN known-map pair: ``P`` (3 Gaussians) pushed by the gradient of a dense ICNN.

    Korotin et al.'s (2021b) construction, with this package's solver: the
    potential is an ICNN of the architecture the solvers fit
    (``fedmm.models.ICNN``, Korotin et al.'s MMv2 sizes by default), *trained*
    to push ``P`` onto a 10-component Gaussian mixture, and then ``Q`` is
    **defined** as ``∇ψ # P``, so that ``∇ψ`` is exactly the OT map (Brenier:
    ``ψ`` is strongly convex).  ``Q`` is close to, not equal to, the 10-component
    mixture.  **This is not Korotin et al.'s pair** (their weights, their
    mixtures): the weights shipped for d = 16, 32, 64 were trained here, by
    ``fedmm experiment ot-pair`` (centralized FedMM-OT, the provenance is in
    :attr:`ICNNMapBenchmark.provenance`), and their hardness is measured on the
    results page (docs/figures/README.md).  Unlike
    :func:`clustered_map_benchmark`, whose sharp cells an ICNN approximates
    only roughly, this map lies in the solvers' own model class, as in
    Korotin et al.'s benchmark.

    **Source** ``P``: exactly that of :func:`known_map_benchmark` with the same
    ``seed`` (3 components, ``E‖X‖² = d``).

    **Potential**: ``ψ = s f`` with ``f`` the :class:`DenseICNN` of the
    parameters and ``s > 0`` the factor that makes ``tr Cov(Q) = d``
    (2¹⁷ draws), as for the other pairs.  Evaluated in NumPy (no JAX).

    Parameters
    ----------
    dim : int
        ``d``; with the shipped weights one of 16, 32, 64.
    seed : int
        Seed of ``P``.  The shipped weights were trained on ``P`` of seed 0 and
        need ``seed=0``.
    params : array_like of shape (n_params,), optional
        Flat ICNN parameters in ``fedmm.models.ICNN``'s layout (e.g. a
        ``History.params['omega']`` of the package's OT solvers); default: the
        shipped weights for ``dim``.  With ``params`` the architecture comes
        from the next four arguments; without it, from the shipped file (the
        four arguments are then not used).
    hidden_sizes : sequence of int, optional
        Default ``[max(2d, 64), max(2d, 64), max(d, 32)]`` (MMv2).
    rank : int
    strong_convexity : float >= 0
    activation : {'celu', 'softplus'}

    Returns
    -------
    ICNNMapBenchmark

    Examples
    --------
    >>> bench = icnn_map_benchmark(16)
    >>> bench.l2_uvp(bench.true_map).value
    0.0
    """
    dim = check_int(dim, "dim", low=1)
    if params is None:
        if dim not in ICNN_PAIR_DIMS:
            raise ValueError(f"Expected 'dim' in {ICNN_PAIR_DIMS} (the dimensions with shipped weights), got "
                             f"{dim}; pass 'params' for another dimension")
        seed = check_int(seed, "seed", low=0)
        if seed != 0:
            raise ValueError(f"Expected seed=0 with the shipped weights (they were trained on P of seed 0), "
                             f"got {seed}")
        flat, architecture, provenance = _shipped_icnn(dim)
        if architecture.get("dim") != dim:
            raise ValueError(f"Expected shipped weights of dimension {dim}, got {architecture.get('dim')}")
        hidden_sizes, rank = architecture["hidden_sizes"], architecture["rank"]
        strong_convexity, activation = architecture["strong_convexity"], architecture["activation"]
    else:
        flat, provenance = as_array(params, "params", ndim=1), {}
    if hidden_sizes is None:
        hidden_sizes = [max(2 * dim, 64), max(2 * dim, 64), max(dim, 32)]
    if isinstance(hidden_sizes, (str, bytes)) or not hasattr(hidden_sizes, "__len__") or len(hidden_sizes) == 0:
        raise ValueError(f"Expected 'hidden_sizes' to be a non-empty sequence of positive ints, got {hidden_sizes!r}")
    sizes = tuple(check_int(h, f"hidden_sizes[{k}]", low=1) for k, h in enumerate(hidden_sizes))
    rank = check_int(rank, "rank", low=1)
    strong_convexity = check_real(strong_convexity, "strong_convexity", low=0.0, high=1e100)
    if activation not in ("celu", "softplus"):
        raise ValueError(f"Expected 'activation' in ('celu', 'softplus'), got {activation!r}")
    check_allocation(8 * (flat.size + ICNN_BLOCK_ROWS * (rank + 4) * max(sizes) * len(sizes)),
                     f"icnn_map_benchmark with dim={dim}, hidden_sizes={list(sizes)}")
    network = DenseICNN(dim, sizes, flat, rank=rank, strong_convexity=strong_convexity, activation=activation)
    root = check_seed(seed)
    weights, means, covariances = _mixture_source(_stream(root, 0), dim, 3)
    return ICNNMapBenchmark(dim, seed if isinstance(seed, (int, np.integer)) else None, root, weights=weights,
                            means=means, covariances=covariances, network=network, provenance=provenance)


#: The known-map benchmarks by name (``fedmm experiment ot --benchmark``): ``"hard"`` is
#: :func:`clustered_map_benchmark`, ``"easy"`` is :func:`known_map_benchmark`, ``"icnn"`` is
#: :func:`icnn_map_benchmark` (shipped weights, d = 16, 32, 64, seed 0).
KNOWN_MAP_BENCHMARKS: dict[str, Callable[..., Any]] = {"hard": clustered_map_benchmark, "easy": known_map_benchmark,
                                                     "icnn": icnn_map_benchmark}


class GaussianBenchmark(_Benchmark):
    r"""Gaussian ``P = N(m_P, Σ_P)`` and ``Q = N(m_Q, Σ_Q)``: the OT map is affine and known.

    Built by :func:`gaussian_benchmark`.  ``ψ(x) = ½ (x − m_P)ᵀ A (x − m_P) + m_Qᵀ x``
    with ``A`` from :func:`gaussian_ot_map`, so ``∇ψ = `` :attr:`map`, and
    every moment is exact (``Var(Q) = tr Σ_Q``).

    Attributes
    ----------
    dim : int
    mean_p, mean_q : ndarray of shape (d,)
    cov_p, cov_q : ndarray of shape (d, d)
    map : AffineMap
        The true OT map.
    """

    def __init__(self, dim, seed, mean_p, cov_p, mean_q, cov_q):
        self.dim, self.seed = dim, seed
        self.mean_p, self.cov_p, self.mean_q, self.cov_q = mean_p, cov_p, mean_q, cov_q
        self.map = gaussian_ot_map(mean_p, cov_p, mean_q, cov_q)
        self._chol = np.linalg.cholesky(cov_p)

    def _sample_source(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.standard_normal((n, self.dim)) @ self._chol.T + self.mean_p

    def _grad(self, x: np.ndarray) -> np.ndarray:
        return self.map(x)

    def _potential(self, x: np.ndarray) -> np.ndarray:
        c = x - self.mean_p
        return 0.5 * np.einsum("ij,ij->i", c @ self.map.matrix, c) + x @ self.mean_q

    @_one_blas_thread
    def source_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Exact ``(m_P, Σ_P)``."""
        return self.mean_p.copy(), self.cov_p.copy()

    @_one_blas_thread
    def target_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Exact ``(m_Q, Σ_Q)``."""
        return self.mean_q.copy(), self.cov_q.copy()

    def __repr__(self) -> str:
        return f"GaussianBenchmark(dim={self.dim}, seed={self.seed!r})"


def _random_spd(rng: np.random.Generator, dim: int, low: float, high: float) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    q *= np.sign(np.diag(r))
    eig = rng.uniform(low, high, size=dim)
    cov = (q * eig) @ q.T
    return 0.5 * (cov + cov.T)


@_one_blas_thread
def gaussian_benchmark(dim: int, *, seed: Any) -> GaussianBenchmark:
    """Gaussian-to-Gaussian benchmark with a closed-form (affine) OT map, same interface as :class:`KnownMapBenchmark`.

    ``m_P, m_Q`` have i.i.d. ``N(0, 1)`` coordinates; ``Σ_P, Σ_Q`` have
    random orthonormal eigenvectors and eigenvalues uniform in ``[0.5, 2]``.

    Parameters
    ----------
    dim : int
        Dimension ``d ≥ 1``.
    seed : None, int, SeedSequence or Generator
        Keyword-only and required.

    Returns
    -------
    GaussianBenchmark

    Examples
    --------
    >>> bench = gaussian_benchmark(3, seed=0)
    >>> bool(round(bench.l2_uvp(bench.linear_map()).value, 12) == 0.0)
    True
    """
    dim = check_int(dim, "dim", low=1)
    check_allocation(8 * 8 * dim * dim, f"gaussian_benchmark with dim={dim}")
    rng = _stream(seed, 0)
    mean_p, mean_q = rng.standard_normal(dim), rng.standard_normal(dim)
    cov_p, cov_q = _random_spd(rng, dim, 0.5, 2.0), _random_spd(rng, dim, 0.5, 2.0)
    return GaussianBenchmark(dim, seed if isinstance(seed, (int, np.integer)) else None,
                             mean_p, cov_p, mean_q, cov_q)


@_one_blas_thread
def client_datasets(
    benchmark: _Benchmark,
    n_clients: int = 10,
    n_per_client: int = 1000,
    *,
    seed: Any,
    n_init: int = 4,
) -> list[np.ndarray]:
    """Federated split of ``P``: ``n_clients · n_per_client`` draws split by equal-size k-means.

    The FedMM paper's §7.3 setting: draws of ``P`` are split among ``n``
    clients with :func:`fedmm.data.split_by_constrained_kmeans`, one cluster
    per client, every cluster of exactly ``n_per_client`` points (so the
    weights ``μ_i = 1/n`` of objective (33) are also the sample shares).

    Parameters
    ----------
    benchmark : KnownMapBenchmark or GaussianBenchmark
    n_clients : int
        Number of clients ``n ≥ 1``.
    n_per_client : int
        Samples per client, ``≥ 1``.
    seed : None, int, SeedSequence or Generator
        Randomness of the draws and of the k-means++ starts; keyword-only, required.
    n_init : int
        k-means starts (see :func:`fedmm.data.constrained_kmeans`).

    Returns
    -------
    list of ndarray of shape (n_per_client, d), float64, C-ordered
    """
    if not isinstance(benchmark, _Benchmark):
        raise TypeError(
            "Expected 'benchmark' to be a KnownMapBenchmark or GaussianBenchmark, "
            f"got {type(benchmark).__name__}"
        )
    n_clients = check_int(n_clients, "n_clients", low=1)
    n_per_client = check_int(n_per_client, "n_per_client", low=1)
    check_allocation(8 * n_clients * n_per_client * (benchmark.dim + 2) if isinstance(benchmark, _Benchmark) else 0,
                     f"client_datasets with n_clients={n_clients}, n_per_client={n_per_client}")
    x = benchmark.sample_source(n_clients * n_per_client, _stream(seed, 0))
    return split_by_constrained_kmeans(x, n_clients, seed=_stream(seed, 1), n_init=n_init)
