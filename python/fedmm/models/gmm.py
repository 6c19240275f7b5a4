# SPDX-License-Identifier: BSD-3-Clause
"""Gaussian mixture (tied or full covariances) as a FedMM/FedEM model.

FedEM paper (Dieuleveut, Fort, Moulines, Robin, 2021), Appendix F.1.  With
``G`` components in ``ℝᵖ``, weights ``π``, means ``μ_ℓ`` and one covariance
``Σ``, the complete-data sufficient statistic of an example ``y`` with label
``z`` is ``s(y, z) = (1_{z=ℓ}, y 1_{z=ℓ})_ℓ`` and the E-step gives

.. math::

    \\bar s(y, θ) = (ρ_ℓ(y), ρ_ℓ(y) y)_{ℓ=1..G},\\qquad
    ρ_ℓ(y) = \\frac{π_ℓ\\,\\mathcal N(y; μ_ℓ, Σ)}{\\sum_u π_u\\,\\mathcal N(y; μ_u, Σ)} .

The M-step ``T`` (eq. (60)-(62)) needs the global second moment
``M₂ = N⁻¹ Σ_i y_i y_iᵀ``, aggregated once at start-up from the clients' local
sums (:meth:`GaussianMixture.local_moments` on each client,
:meth:`GaussianMixture.set_global_moments` on the server, or
:meth:`GaussianMixture.fit_global_moments` for both in one process)::

    π_ℓ = s⁽¹⁾_ℓ / Σ_u s⁽¹⁾_u,   μ_ℓ = s⁽²⁾_ℓ / s⁽¹⁾_ℓ,   Σ = M₂ − Σ_ℓ s⁽¹⁾_ℓ μ_ℓ μ_ℓᵀ.

A known, fixed covariance (FedEM Fig. 1) is selected with ``known_covariance``.

The statistic (E-step), the projection and ``T`` (M-step) run in C
(``models_em.c``, :func:`fedmm.kernels.gaussian_mixture_model`): the model
calls the very callbacks that the compiled round engine runs, so FedMM's
Python and compiled backends give the same numbers bit for bit.

``covariance="full"`` (one covariance per component; not in the paper, the
standard extension) adds the block ``s⁽³⁾_ℓ = mean_j ρ_ℓ(y_j) y_j y_jᵀ`` and
``Σ_ℓ = s⁽³⁾_ℓ / s⁽¹⁾_ℓ − μ_ℓ μ_ℓᵀ``; it needs no global moment.

FedEM's GMM (App. F.1) runs in ``𝒮 = ℝ^q``, but eq. (60)-(62) are defined only
for ``s⁽¹⁾_ℓ > 0`` and ``Σ(s) ≻ 0``: compressed or control-variate corrected
statistics leave that set (FedMM paper §5, "Challenges in the analysis": "a
scalar quantization of a positive semidefinite matrix is not ensured to be a
positive semidefinite matrix"), so :meth:`GaussianMixture.project` maps them back (FedMM Alg. 2 line 16) and ``T``
guards the covariance numerically (``reg_covar``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from fedmm import kernels
from fedmm._validation import (as_array, as_rng, check_in, check_index, check_int, check_real, check_statistic,
                               index_range_error)
from fedmm.models._compiled import CompiledCallbacks, array_key
from fedmm.models.base import StatisticLayout, SurrogateModel

__all__ = ["GaussianMixture", "GaussianMixtureParams"]

_LOG_2PI = float(np.log(2.0 * np.pi))


@dataclass(frozen=True)
class GaussianMixtureParams:
    """Parameters ``θ = (π, μ, Σ)`` of a Gaussian mixture.

    Build it with :meth:`GaussianMixture.parameters` (which validates and
    pre-computes the quantities the E-step needs).

    Attributes
    ----------
    weights : ndarray of shape (G,)
        Mixture weights ``π`` (positive, summing to one).
    means : ndarray of shape (G, p)
        Component means ``μ_ℓ``, one per row.
    covariance : ndarray of shape (p, p) (tied) or (G, p, p) (full)
        Covariance(s) ``Σ`` (symmetric positive definite).
    natural_means : ndarray of shape (p, G), or None (full)
        Tied: ``Σ⁻¹ μᵀ``; the E-step logits are ``Y Σ⁻¹μᵀ + offsets``.
    offsets : ndarray of shape (G,)
        Tied: ``log π_ℓ − ½ μ_ℓᵀ Σ⁻¹ μ_ℓ``; full: ``log π_ℓ − ½ ln det Σ_ℓ``.
    whitening : ndarray of shape (p, p) (tied) or (p, G p) (full)
        ``L⁻ᵀ`` with ``Σ = L Lᵀ`` (so ``‖y L⁻ᵀ‖² = yᵀ Σ⁻¹ y``); full: the
        ``G`` matrices ``L_ℓ⁻ᵀ`` side by side.
    shifts : ndarray of shape (G p,), or None (tied)
        Full: ``μ_ℓ L_ℓ⁻ᵀ`` side by side, so that ``Y W − shifts`` holds the
        whitened residuals of every component (one GEMM).
    log_det : float
        ``ln det Σ`` (tied; 0 for full, whose determinants are in ``offsets``).
    buffer : ndarray of shape (theta_size,), read-only
        The compiled parameter (:func:`fedmm.kernels.gaussian_mixture_model`):
        ``(π, vec μ, vec Σ)`` then the derived quantities; every array above
        is a read-only view into it.
    """

    weights: np.ndarray
    means: np.ndarray
    covariance: np.ndarray
    natural_means: np.ndarray = field(repr=False)
    offsets: np.ndarray = field(repr=False)
    whitening: np.ndarray = field(repr=False)
    shifts: np.ndarray | None = field(repr=False)
    log_det: float = field(repr=False)
    buffer: np.ndarray | None = field(default=None, repr=False, compare=False)


class GaussianMixture(CompiledCallbacks, SurrogateModel):
    """Gaussian mixture fitted by (federated) EM.

    Parameters
    ----------
    n_components : int
        Number of components ``G`` (≥ 1).
    covariance : {"tied", "full"}
        One covariance shared by all components (FedEM App. F.1), or one per component.
    reg_covar : float in [0, 1e300], default 1e-6
        Positive-definite guard of ``T``: the eigenvalues of ``Σ(s)`` are
        clipped from below at ``reg_covar`` (in data units squared).  A
        covariance whose eigenvalues are all above the floor is returned
        unchanged, so exact EM is unaffected.  When the spread
        ``λ_max / reg_covar`` exceeds about ``1 / (p ε)`` the rebuilt matrix may
        be indefinite in floating point; the floor is then raised to the
        smallest ``2ᵏ p ε λ_max`` (``k ≥ 0``, ``ε`` the float64 machine epsilon)
        for which it has a Cholesky factor, so ``T`` never fails for
        ``reg_covar > 0`` and positive weights.  With ``reg_covar=0`` a singular
        or indefinite ``Σ(s)`` raises :class:`numpy.linalg.LinAlgError`.
    known_covariance : array_like of shape (p, p), optional
        A fixed, known covariance (FedEM Fig. 1; tied only): ``T`` then
        estimates only the weights and the means.
    min_weight : float, default 1e-10
        Floor of the weights block in :meth:`project`: the valid set of the
        weights block is ``{w : w_ℓ ≥ min_weight, Σ_ℓ w_ℓ = 1}`` so that
        ``μ_ℓ = s⁽²⁾_ℓ / s⁽¹⁾_ℓ`` is always defined.
    n_features : int, optional
        Dimension ``p``; otherwise taken from the global moments.

    Notes
    -----
    Statistic layout: ``("weights", (G,))`` holds the mean responsibilities
    and ``("means", (G, p))`` the responsibility-weighted data means
    ``mean_j ρ_ℓ(y_j) y_j``; "full" adds ``("second", (G, p, p))``, the
    responsibility-weighted second moments.  A client's data is an ndarray of
    shape ``(N_i, p)``, one example per row.

    The E-step uses the natural parameterization of FedEM eq. (56): the
    logits ``Y Σ⁻¹μᵀ + (log π_ℓ − ½ μ_ℓᵀΣ⁻¹μ_ℓ)`` differ from the
    log-densities by a term that depends on ``y`` only, so one GEMM and a
    row-wise log-sum-exp give the responsibilities — no loop over samples or
    components.  "full" whitens the data against every component in one GEMM
    with the stacked ``L_ℓ⁻ᵀ``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> Y = np.concatenate([rng.normal(-3, 1, (50, 2)), rng.normal(3, 1, (50, 2))])
    >>> gmm = GaussianMixture(2)
    >>> s = gmm.init_statistic([Y], rng)
    >>> for _ in range(20):
    ...     s = gmm.statistic(Y, gmm.T(s))
    >>> np.round(np.sort(gmm.T(s).means[:, 0]), 0)
    array([-3.,  3.])
    """

    _data_ndim = (2,)  # statistic() reads float64 arrays of this ndim without check_data

    #: ``γ = 1``: with full-batch oracles and full participation each round is one exact EM
    #: iteration (FedEM paper Alg. 1 with ``γ = 1``); pass a decreasing schedule such as
    #: ``('inverse_sqrt', 1.0)`` with minibatches, partial participation or compression.
    default_step = 1.0

    def __init__(
        self,
        n_components: int,
        covariance: str = "tied",
        *,
        reg_covar: float = 1e-6,
        known_covariance: Any = None,
        min_weight: float = 1e-10,
        n_features: int | None = None,
    ) -> None:
        self.n_components = check_int(n_components, "n_components", low=1)
        self.covariance = check_in(covariance, "covariance", ("tied", "full"))
        self.reg_covar = check_real(reg_covar, "reg_covar", low=0.0, high=1e300)
        self.min_weight = check_real(min_weight, "min_weight", low=0.0)
        if self.min_weight * self.n_components >= 1.0:
            raise ValueError(f"Expected 'min_weight' < 1/n_components (n_components={self.n_components}: the "
                             f"weights sum to one), got {self.min_weight!r}")
        self.known_covariance = None
        self.second_moment: np.ndarray | None = None
        self.first_moment: np.ndarray | None = None
        self.n_total: int | None = None
        self.n_features: int | None = None
        self._layout: StatisticLayout | None = None
        if n_features is not None:
            self._set_features(check_int(n_features, "n_features", low=1), "n_features")
        if known_covariance is not None:
            if self.covariance != "tied":
                raise ValueError("Expected covariance='tied' with 'known_covariance', got covariance='full'")
            cov = as_array(known_covariance, "known_covariance", ndim=2)
            if cov.shape[0] != cov.shape[1]:
                raise ValueError(f"Expected 'known_covariance' to be square (p, p), got {cov.shape}")
            self._set_features(cov.shape[0], "known_covariance")
            self.known_covariance = self._guard_covariance(0.5 * (cov + cov.T), "known_covariance")

    # -- dimensions ---------------------------------------------------------
    def _set_features(self, p: int, source: str) -> None:
        if self.n_features is not None and self.n_features != p:
            raise ValueError(f"Expected '{source}' with p = {self.n_features} features, got p = {p}")
        if self.n_features is None:
            self.n_features = int(p)
            G, p = self.n_components, self.n_features
            blocks = [("weights", (G,)), ("means", (G, p))]
            if self.covariance == "full":
                blocks.append(("second", (G, p, p)))
            self._layout = StatisticLayout(blocks)

    @property
    def layout(self) -> StatisticLayout:  # type: ignore[override]
        if self._layout is None:
            raise RuntimeError(
                "GaussianMixture does not know the data dimension yet: pass n_features=, "
                "known_covariance=, or call prepare(datas) (or set_global_moments(moments) on a server "
                "without the data)"
            )
        return self._layout

    # -- start-up: global moments --------------------------------------------
    def local_moments(self, data: Any) -> tuple[int, np.ndarray, np.ndarray]:
        """A client's local sums ``(N_i, Σ_j y_j, Σ_j y_j y_jᵀ)`` sent once at start-up.

        Returns
        -------
        n : int
        sum_y : ndarray of shape (p,)
        sum_yyT : ndarray of shape (p, p)
        """
        return self._moments(self.check_data(data))

    @staticmethod
    def _moments(Y: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        """:meth:`local_moments` of data already through :meth:`check_data`."""
        return Y.shape[0], Y.sum(axis=0), Y.T @ Y

    def set_global_moments(self, moments: Sequence[tuple[int, np.ndarray, np.ndarray]]) -> None:
        """Aggregate the clients' :meth:`local_moments` into ``M₂ = N⁻¹ Σ y yᵀ`` (server side)."""
        if len(moments) == 0:
            raise ValueError("Expected 'moments' from at least one client, got none")
        p = np.shape(moments[0][1])[0]
        self._set_features(p, "moments")
        self._aggregate_moments([(m, as_array(sy, f"moments[{i}][1]", ndim=1),
                                  as_array(syy, f"moments[{i}][2]", ndim=2)) for i, (m, sy, syy) in enumerate(moments)])

    def _aggregate_moments(self, moments: Sequence[tuple[int, np.ndarray, np.ndarray]]) -> None:
        """The aggregation of :meth:`set_global_moments` on checked moments (in client order)."""
        n = sum(int(m[0]) for m in moments)
        p = self.n_features
        sum_y = np.zeros(p)
        sum_yy = np.zeros((p, p))
        for _, sy, syy in moments:
            sum_y += sy
            sum_yy += syy
        self.n_total = n
        self.first_moment = sum_y / n
        m2 = sum_yy / n
        self.second_moment = 0.5 * (m2 + m2.T)

    def fit_global_moments(self, datas: Sequence[Any]) -> "GaussianMixture":
        """:meth:`local_moments` on every client then :meth:`set_global_moments`; returns ``self``."""
        self.set_global_moments([self.local_moments(d) for d in datas])
        return self

    def prepare(self, datas: Sequence[Any]) -> None:
        """Learn ``p`` from the clients' data and aggregate the global moments (:meth:`fit_global_moments`).

        Every client must have the same number of features (and the one
        given by ``n_features`` or ``known_covariance``, if any).

        Examples
        --------
        >>> gmm = GaussianMixture(2)
        >>> gmm.prepare([np.zeros((3, 4)), np.ones((5, 4))])
        >>> gmm.n_features, gmm.layout.size
        (4, 10)
        """
        if isinstance(datas, np.ndarray) or len(datas) == 0:
            raise ValueError("Expected 'datas' to be a non-empty list with one (N_i, p) array per client")
        checked = []
        for i, d in enumerate(datas):
            Y = self.check_data(d, f"datas[{i}]")
            self._set_features(Y.shape[1], f"datas[{i}]")
            checked.append(Y)
        # the moments of fit_global_moments, from the arrays just checked (no second validation pass)
        self._aggregate_moments([self._moments(Y) for Y in checked])

    # -- data ---------------------------------------------------------------
    def check_data(self, data: Any, name: str = "data") -> np.ndarray:
        Y = as_array(data, name, ndim=2, order="C")
        if Y.shape[0] == 0:
            raise ValueError(f"Expected '{name}' to hold at least one sample, got shape {Y.shape}")
        if self.n_features is not None and Y.shape[1] != self.n_features:
            raise ValueError(f"Expected '{name}' of shape (N, {self.n_features}), got {Y.shape}")
        return Y

    # -- parameters ---------------------------------------------------------
    def parameters(self, weights: Any, means: Any, covariance: Any) -> GaussianMixtureParams:
        """Validate ``(π, μ, Σ)`` and pre-compute the E-step quantities.

        Raises
        ------
        numpy.linalg.LinAlgError
            If ``covariance`` is not positive definite.
        """
        G = self.n_components
        w = as_array(weights, "weights", ndim=1)
        mu = as_array(means, "means", ndim=2)
        cov = as_array(covariance, "covariance", ndim=(2, 3))
        if w.shape != (G,):
            raise ValueError(f"Expected 'weights' of shape ({G},), got {w.shape}")
        if np.any(w <= 0.0):
            raise ValueError("Expected 'weights' to be positive")
        p = mu.shape[1]
        if p == 0:
            raise ValueError(f"Expected 'means' of shape ({G}, p) with p >= 1, got {mu.shape}")
        want = (p, p) if self.covariance == "tied" else (G, p, p)
        if mu.shape[0] != G or cov.shape != want:
            raise ValueError(
                f"Expected 'means' of shape ({G}, p) and 'covariance' of shape {want} for "
                f"covariance={self.covariance!r}, got {mu.shape}, {cov.shape}"
            )
        self._set_features(p, "means")
        return self._make_params(w, mu, cov)

    def _params_from_buffer(self, buf: np.ndarray) -> GaussianMixtureParams:
        """The parameter object viewing a compiled parameter ``buf`` (owned, made read-only)."""
        buf.flags.writeable = False
        G, p = self.n_components, self.n_features
        Gp, pp = G * p, p * p
        w, mu = buf[:G], buf[G:G + Gp].reshape(G, p)
        if self.covariance == "tied":
            d = G + Gp + pp
            cov = buf[G + Gp:d].reshape(p, p)
            natural_means = buf[d:d + Gp].reshape(G, p).T  # Σ⁻¹μᵀ, (p, G), column-major
            offsets = buf[d + Gp:d + Gp + G]
            whitening = buf[d + Gp + G:d + Gp + G + pp].reshape(p, p)
            return GaussianMixtureParams(w, mu, cov, natural_means, offsets, whitening, None,
                                         float(buf[d + Gp + G + pp]), buf)
        d = G + Gp + G * pp
        cov = buf[G + Gp:d].reshape(G, p, p)
        whitening = buf[d:d + p * Gp].reshape(p, Gp)
        shifts = buf[d + p * Gp:d + p * Gp + Gp]
        offsets = buf[d + p * Gp + Gp:d + p * Gp + Gp + G]
        return GaussianMixtureParams(w, mu, cov, None, offsets, whitening, shifts, 0.0, buf)

    def _make_params(self, w: np.ndarray, mu: np.ndarray, cov: np.ndarray) -> GaussianMixtureParams:
        """:meth:`parameters` without the argument checks (inputs already validated): the compiled
        ``derive`` (Cholesky factors, whitening, natural means, offsets)."""
        vector = np.concatenate([w, mu.ravel(), cov.ravel()])
        try:
            buf = self._kernel().derive(vector)
        except np.linalg.LinAlgError:
            raise np.linalg.LinAlgError("Expected 'covariance' to be positive definite (its Cholesky "
                                        "factorization failed)") from None
        return self._params_from_buffer(buf)

    def _as_params(self, theta: Any) -> GaussianMixtureParams:
        if isinstance(theta, GaussianMixtureParams):
            return theta
        if isinstance(theta, dict):
            return self.parameters(theta["weights"], theta["means"], theta["covariance"])
        raise TypeError(
            "Expected 'theta' to be GaussianMixtureParams or a dict with weights/means/covariance, "
            f"got {type(theta).__name__}"
        )

    def theta_vector(self, theta: Any) -> np.ndarray:
        """``(π, vec μ, vec Σ)`` as one float64 vector (length ``G + Gp + p²``, or ``G + Gp + Gp²``)."""
        th = self._as_params(theta)
        return np.concatenate([th.weights, th.means.ravel(), th.covariance.ravel()])

    def theta_to_dict(self, theta: Any) -> dict[str, np.ndarray]:
        """``{"weights": π (G,), "means": μ (G, p), "covariance": Σ (p, p) or (G, p, p)}`` (float64 copies)."""
        th = self._as_params(theta)
        return {"weights": np.array(th.weights, dtype=np.float64, copy=True),
                "means": np.array(th.means, dtype=np.float64, copy=True),
                "covariance": np.array(th.covariance, dtype=np.float64, copy=True)}

    def theta_from_dict(self, arrays: dict[str, Any]) -> GaussianMixtureParams:
        """Inverse of :meth:`theta_to_dict` (validated by :meth:`parameters`)."""
        missing = [k for k in ("weights", "means", "covariance") if not isinstance(arrays, dict) or k not in arrays]
        if missing:
            raise ValueError(f"Expected 'arrays' with keys 'weights', 'means' and 'covariance', missing {missing}")
        return self.parameters(arrays["weights"], arrays["means"], arrays["covariance"])

    def theta_from_vector(self, vector: np.ndarray, like: Any = None) -> GaussianMixtureParams:
        """Inverse of :meth:`theta_vector` (``like`` is not needed)."""
        G, p = self.n_components, self.layout.shape("means")[1]
        cov_shape = (p, p) if self.covariance == "tied" else (G, p, p)
        size = G + G * p + int(np.prod(cov_shape))
        v = as_array(vector, "vector", ndim=1)
        if v.shape != (size,):
            raise ValueError(f"Expected 'vector' to be a flat parameter of shape ({size},), got {v.shape}")
        return self.parameters(v[:G], v[G : G + G * p].reshape(G, p), v[G + G * p :].reshape(cov_shape))

    # -- E-step ---------------------------------------------------------------
    def responsibilities(self, data: Any, theta: Any, *, return_log_norm: bool = False) -> Any:
        """Posterior probabilities ``ρ_ℓ(y_j)`` of the components, shape ``(N, G)``.

        With ``return_log_norm`` also returns ``log Σ_ℓ exp(logit_ℓ)`` per row
        (shape ``(N,)``), where the logits omit the terms common to all
        components (tied: ``−½ yᵀΣ⁻¹y − ½ ln det Σ``; both: ``−(p/2) ln 2π``).
        """
        Y = np.asarray(data, dtype=np.float64)
        if Y.ndim != 2 or Y.shape[1] != self.n_features:
            raise ValueError(f"Expected 'data' of shape (N, {self.n_features}), got {Y.shape}")
        # compiled E-step (fedmm_gmm_responsibilities): one GEMM per 256-row chunk, GIL released
        compiled = self._kernel()
        return kernels.gaussian_mixture_responsibilities(compiled, self._compiled_buffer(theta, compiled), Y,
                                                         return_log_norm=return_log_norm)

    def _compiled_buffer(self, theta: Any, compiled: Any) -> np.ndarray:
        """The compiled parameter of ``theta`` (its own buffer, or derived from its flat vector)."""
        th = self._as_params(theta)
        buf = th.buffer
        if buf is not None and buf.shape == (compiled.theta_size,) and buf.dtype == np.float64:
            return buf
        return compiled.derive(self.theta_vector(th))

    def statistic(self, data: Any, theta: Any, idx: np.ndarray | None = None) -> np.ndarray:
        """The E-step on the samples ``idx`` (all if None): ``mean_j (ρ_ℓ(y_j), ρ_ℓ(y_j) y_j[, ρ_ℓ(y_j) y_j y_jᵀ])``.

        One compiled call (``fedmm_gmm_model``'s statistic): one GEMM with the
        natural means (tied) or the stacked whitening matrices (full), a
        row-wise log-sum-exp, and the weighted sums (GEMMs).
        """
        Y = self._statistic_data(data)
        if Y.shape[1] != self.n_features:
            raise ValueError(f"Expected 'data' of shape (N, {self.n_features}), got {Y.shape}")
        idx = check_index(idx, Y.shape[0], bounds=False)
        compiled = self._kernel()
        buf = self._compiled_buffer(theta, compiled)
        try:
            out, _ = compiled.statistic(buf, Y, idx)
        except IndexError:  # the compiled loop tests every index (see check_index)
            raise index_range_error(idx, Y.shape[0]) from None
        return out

    # -- M-step ---------------------------------------------------------------
    def _guard_covariance(self, cov: np.ndarray, what: str = "Σ(s)") -> np.ndarray:
        """Floor the eigenvalues of a symmetric ``(p, p)`` matrix or ``(G, p, p)`` stack at ``reg_covar``
        (:func:`fedmm.kernels.floor_eigenvalues`, the guard that ``T`` applies in C)."""
        try:
            return kernels.floor_eigenvalues(cov, self.reg_covar)[0]
        except np.linalg.LinAlgError:
            raise np.linalg.LinAlgError(
                f"The covariance {what} is singular or indefinite (eigenvalues "
                f"{np.linalg.eigvalsh(cov)}); use reg_covar > 0 to floor its eigenvalues"
            ) from None

    def T(self, s: np.ndarray) -> GaussianMixtureParams:
        """M-step (FedEM eq. (60)-(62)) with the positive-definite guard of ``reg_covar``.

        ``π = s⁽¹⁾ / Σ s⁽¹⁾``, ``μ_ℓ = s⁽²⁾_ℓ / s⁽¹⁾_ℓ`` and ``Σ = sym(M₂ − Σ_ℓ s⁽²⁾_ℓ μ_ℓᵀ)``
        (tied; ``known_covariance`` if given) or ``Σ_ℓ = sym(s⁽³⁾_ℓ / s⁽¹⁾_ℓ − μ_ℓ μ_ℓᵀ)`` (full),
        eigenvalues floored at ``reg_covar`` (raised where rounding would leave the floored matrix
        without a Cholesky factor, see ``reg_covar``); one compiled call.  Defined for every
        statistic with positive weights when ``reg_covar > 0``; :meth:`project` gives those.
        """
        s = check_statistic(s, self.layout.size)
        G = self.n_components
        w = s[:G]
        if np.any(w <= 0.0):
            raise ValueError(f"Expected the weights block of 's' to be positive (project it first), got {w}")
        if self.covariance == "tied" and self.known_covariance is None and self.second_moment is None:
            raise RuntimeError("GaussianMixture.T needs the global second moment: call prepare(datas) or "
                               "fit_global_moments(datas) first (set_global_moments(moments) on a server "
                               "without the data)")
        try:
            buf = self._kernel().T(s)
        except np.linalg.LinAlgError:
            raise np.linalg.LinAlgError(
                "The covariance Σ(s) is singular or indefinite (no Cholesky factor); use reg_covar > 0 to floor "
                "its eigenvalues"
            ) from None
        return self._params_from_buffer(buf)

    def project(self, s: np.ndarray) -> np.ndarray:
        """Map a statistic into the set where ``T`` is defined (FedMM Alg. 2 line 16); a new array.

        FedEM eq. (60)-(62) (App. F.1) need ``s⁽¹⁾_ℓ > 0`` and a positive
        definite ``Σ(s)``; aggregated, compressed or control-variate corrected
        statistics need not satisfy either.  Two exact Euclidean projections,
        one after the other:

        1. the weights block onto ``Δ = {w : w_ℓ ≥ min_weight, Σ_ℓ w_ℓ = 1}``
           (sort-based capped-simplex projection), the other blocks fixed;
        2. "full" only: each ``s⁽³⁾_ℓ``, with the projected ``s⁽¹⁾_ℓ`` and
           ``s⁽²⁾_ℓ`` fixed, onto ``{X symmetric : X − s⁽²⁾_ℓ s⁽²⁾_ℓᵀ / s⁽¹⁾_ℓ ⪰ 0}``:
           ``s⁽³⁾_ℓ ← B_ℓ + Π_PSD(sym(s⁽³⁾_ℓ) − B_ℓ)`` with
           ``B_ℓ = s⁽²⁾_ℓ s⁽²⁾_ℓᵀ / s⁽¹⁾_ℓ`` (:func:`fedmm.kernels.project_psd`'s
           C kernel), the exact projection of ``s⁽³⁾_ℓ`` onto that translated
           cone.  ``sym(s⁽³⁾_ℓ)`` is kept bit for bit when it is already in it
           (exact E-step statistics).  With ``min_weight = 0`` an empty
           component (``s⁽¹⁾_ℓ = 0``) gets ``s⁽²⁾_ℓ = 0`` and ``Π_PSD(sym(s⁽³⁾_ℓ))``.

        The output lies in the convex set
        ``𝒮 = {s : w ∈ Δ, [[s⁽¹⁾_ℓ, s⁽²⁾_ℓᵀ], [s⁽²⁾_ℓ, s⁽³⁾_ℓ]] ⪰ 0 for all ℓ}``
        ("full"; every exact E-step statistic satisfies the moment-matrix
        constraint, a weighted sum of ``[[1, yᵀ], [y, y yᵀ]] ⪰ 0``), on which every ``Σ_ℓ(s) = (s⁽³⁾_ℓ − B_ℓ) / s⁽¹⁾_ℓ``
        is positive semi-definite and ``T`` (with ``reg_covar > 0``) is
        defined; points of ``𝒮`` are left in place (up to rounding), so the map
        is idempotent.  It is not the joint Euclidean projection onto ``𝒮``
        (which couples the blocks and has no closed form).  "tied": step 1 only
        — ``Σ(s) = M₂ − Σ_ℓ B_ℓ ⪯ M₂`` stays bounded and ``T``'s floor keeps it
        positive definite for any positive weights.
        """
        return self._kernel().project(check_statistic(s, self.layout.size))

    # -- compiled backend -----------------------------------------------------
    def _compiled_key(self) -> Any:
        tied_moment = self.covariance == "tied" and self.known_covariance is None
        return (self.n_components, self.n_features, self.covariance, self.reg_covar, self.min_weight,
                array_key(self.second_moment) if tied_moment else None, array_key(self.known_covariance))

    def _build_compiled(self) -> Any:
        p = self.layout.shape("means")[1]  # raises the documented error while p is unknown
        tied_moment = self.covariance == "tied" and self.known_covariance is None
        return kernels.gaussian_mixture_model(
            self.n_components, p, self.covariance, reg_covar=self.reg_covar, min_weight=self.min_weight,
            second_moment=self.second_moment if tied_moment else None, known_covariance=self.known_covariance)

    def compiled_model(self) -> Any:
        """:func:`fedmm.kernels.gaussian_mixture_model` with this model's constants (the callbacks its
        :meth:`statistic`, :meth:`project` and :meth:`T` run); None while ``p`` or, for a tied covariance
        to estimate, the global second moment is unknown (a subclass that overrides those methods runs on
        the Python backend, see :meth:`~fedmm.models.SurrogateModel.compiled_overrides`)."""
        if self.n_features is None:
            return None
        if self.covariance == "tied" and self.known_covariance is None and self.second_moment is None:
            return None
        return self._kernel()

    def compiled_theta(self, theta: Any, compiled: Any) -> np.ndarray:
        """A writeable copy of the compiled parameter that ``theta`` carries."""
        return np.array(self._compiled_buffer(theta, compiled), dtype=np.float64, copy=True)

    def theta_from_compiled(self, buffer: np.ndarray, like: Any = None) -> GaussianMixtureParams:
        """The parameter viewing a copy of the compiled parameter ``buffer``."""
        return self._params_from_buffer(np.array(buffer, dtype=np.float64, copy=True))

    # -- start-up and monitoring ------------------------------------------
    def init_statistic(self, datas: Sequence[Any], rng: Any, *, means: Any = None) -> np.ndarray:
        """FedEM §4 initialization: ``Ŝ₀ = s̄(π⁰, μ⁰, Σ̂₀)``.

        ``π⁰ = 1/G``, the means are ``G`` distinct examples drawn uniformly
        among all clients' examples (or ``means``), ``Σ̂₀`` is the empirical
        covariance of all examples (or ``known_covariance``).  Also
        aggregates the global moments (:meth:`fit_global_moments`).

        Parameters
        ----------
        datas : sequence of (N_i, p) arrays
        rng : Generator, int, SeedSequence or None
            Draws the initial means (unused when ``means`` is given).
        means : array_like of shape (G, p), optional
            Initial means ``μ⁰`` chosen by the caller (e.g. k-means++ seeds).
        """
        rng = as_rng(rng)
        datas = [self.check_data(d, f"datas[{i}]") for i, d in enumerate(datas)]
        self.fit_global_moments(datas)
        N = self.n_total
        G = self.n_components
        if means is not None:
            means = as_array(means, "means", ndim=2)
            if means.shape != (G, self.n_features):
                raise ValueError(f"Expected 'means' of shape (G, p) = ({G}, {self.n_features}), got {means.shape}")
        elif G > N:
            raise ValueError(f"Expected 'n_components' ≤ the number of examples {N}, got {G}")
        else:
            picks = np.sort(rng.choice(N, size=G, replace=False))
            sizes = np.array([d.shape[0] for d in datas])
            owner = np.searchsorted(np.cumsum(sizes), picks, side="right")
            offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            means = np.stack([datas[c][j - offsets[c]] for c, j in zip(owner, picks)])
        if self.known_covariance is not None:
            cov = self.known_covariance
        else:
            cov = self.second_moment - np.outer(self.first_moment, self.first_moment)
            cov = self._guard_covariance(0.5 * (cov + cov.T), "empirical covariance")
        if self.covariance == "full":
            cov = np.repeat(cov[None], G, axis=0)
        theta0 = self.parameters(np.full(G, 1.0 / G), means, cov)
        s0 = np.zeros(self.layout.size)
        for d in datas:
            s0 += (d.shape[0] / N) * self.statistic(d, theta0)
        return self.project(s0)

    def log_likelihood(self, data: Any, theta: Any) -> np.ndarray:
        """Log-density ``log Σ_ℓ π_ℓ 𝒩(y_j; μ_ℓ, Σ)`` of each example, shape ``(N,)``."""
        th = self._as_params(theta)
        Y = self.check_data(data)
        _, log_norm = self.responsibilities(Y, th, return_log_norm=True)
        log_norm -= 0.5 * Y.shape[1] * _LOG_2PI
        if th.natural_means is None:
            return log_norm
        white = Y @ th.whitening
        quad = np.einsum("ij,ij->i", white, white)
        return log_norm - 0.5 * quad - 0.5 * th.log_det

    def objective(self, data: Any, theta: Any) -> float:
        """Mean negative log-likelihood of ``data`` (nats per example)."""
        return -float(self.log_likelihood(data, theta).mean())


def _project_capped_simplex(w: np.ndarray, floor: float) -> np.ndarray:
    """Euclidean projection onto ``{x : x ≥ floor, Σ x = 1}`` (Held et al.; sort-based), compiled."""
    return kernels.project_capped_simplex(w, floor)
