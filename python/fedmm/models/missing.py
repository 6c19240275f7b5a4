# SPDX-License-Identifier: BSD-3-Clause
"""FedMissEM: low-rank exponential-family model with missing entries (FedEM §4, App. F.2, Alg. 7).

Each *observer* provides a ``J × L`` matrix ``X`` of which only the entries in
``Ω`` (a boolean mask) are observed.  Entries are independent with density
``x ↦ ρ(x) exp(x θ_{jl} − ψ(θ_{jl}))`` and ``θ = U Vᵀ`` has rank ``r``.  The
complete-data statistic of an observer is the matrix ``X`` itself, so the
E-step fills the missing entries with their conditional mean ``ψ'(θ_{jl})``:

.. math::

    \\bar s(X, Ω; θ)_{jl} = 1_{(j,l)∈Ω}\\, X_{jl} + 1_{(j,l)∉Ω}\\, ψ'(θ_{jl}),

and the M-step is

.. math::

    T(s) = \\operatorname{argmin}_{θ = UVᵀ} \\sum_{jl} ψ(θ_{jl}) − ⟨s, θ⟩
           + \\tfrac{λ}{2}(‖U‖_F^2 + ‖V‖_F^2).

Families: ``"gaussian"`` (unit variance, ``ψ(τ) = τ²/2``; ``T`` is the rank-r
SVD of ``s`` with its singular values soft-thresholded by ``λ``),
``"poisson"`` (``ψ(τ) = eᵗ``, log-intensity) and ``"bernoulli"``
(``ψ(τ) = ln(1 + eᵗ)``, log-odds); the last two have an iterative M-step
(damped Newton with the exact Hessian on ``(U, V)``, started from the
rank-r SVD of ``(ψ')⁻¹(s)``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.special import expit, gammaln, logit

from fedmm._validation import as_array, check_count, check_in, check_index, check_int, check_real, check_statistic
from fedmm.models.base import StatisticLayout, SurrogateModel

__all__ = ["MissingValues", "MissingData", "LowRankParams"]

#: What a minibatch of :class:`MissingValues` samples: whole observers or single entries.
MINIBATCHES = ("rows", "entries")

_MAX_LOG_INTENSITY = 30.0  # e^30 ≈ 1e13 counts: beyond any data; keeps Newton trial points finite


class MissingData(NamedTuple):
    """One client's FedMissEM data: ``m`` observers, each a ``J × L`` matrix.

    Attributes
    ----------
    values : ndarray of shape (m, J, L), float64
        Observations; entries where ``mask`` is False are ignored (may be NaN).
    mask : ndarray of shape (m, J, L), bool
        True where the entry is observed (``(j, l) ∈ Ω``).
    """

    values: np.ndarray
    mask: np.ndarray


@dataclass(frozen=True)
class LowRankParams:
    """``θ = U Vᵀ`` with ``U`` of shape (J, r) and ``V`` of shape (L, r)."""

    U: np.ndarray
    V: np.ndarray

    @property
    def matrix(self) -> np.ndarray:
        """``θ = U Vᵀ``, shape (J, L)."""
        return self.U @ self.V.T


class MissingValues(SurrogateModel):
    """Low-rank matrix model with missing entries, fitted by FedMissEM.

    Parameters
    ----------
    rank : int
        Rank ``r`` of ``θ``.
    family : {"gaussian", "poisson", "bernoulli"}
        Exponential family of the entries.
    lam : float, default 0.0
        Ridge penalty ``λ/2 (‖U‖² + ‖V‖²)`` (per observer, as in FedEM App. F.2).
        Must be positive for "poisson" and "bernoulli" (otherwise ``T`` is
        unbounded when ``s`` reaches the boundary of its domain).
    shape : tuple (J, L), optional
        Matrix shape; otherwise taken from the data by :meth:`init_statistic`.
    max_iter : int, default 500
        Newton iterations of the iterative M-step.
    tol : float, default 1e-10
        Stop when the largest gradient entry is below ``tol · max(1, max|s|)``.
    minibatch : {"rows", "entries"}, default "rows"
        What a minibatch oracle samples.  ``"rows"``: one sample is one
        observer (a whole ``J × L`` matrix); a batch ``B`` of ``b`` observers
        gives ``S_B = b⁻¹ Σ_{o∈B} s̄(X_o, Ω_o; θ)``.  ``"entries"`` (FedEM
        Alg. 7, which samples matrix entries): one sample is one entry
        ``(o, j, l)`` of one observer, so :meth:`n_samples` is ``m J L``, and a
        batch ``B`` of ``b`` entries drawn uniformly without replacement gives

        .. math::

            S_B = ψ'(θ) + \\frac{J L}{b} \\sum_{(o,j,l)∈B} 1_{(j,l)∈Ω_o}\\,
                  (X_{o,jl} − ψ'(θ_{jl}))\\, e_{jl},

        the conditional mean everywhere plus a Horvitz-Thompson estimate of
        the observed residual: each entry is in ``B`` with probability
        ``b/(mJL)``, so ``E[S_B] = s̄_i(θ)``, the full-data statistic, and
        the missing entries (whose residual is zero) add no noise.  Alg. 7
        draws a product set ``I_k × J_k`` and leaves ``Δ`` at zero outside
        it, which is unbiased only up to the factor ``|I_k||J_k|/(IJ)``.
        Full-batch statistics (``idx=None``) are the same in both modes.

    Notes
    -----
    A client's data is a :class:`MissingData` ``(values, mask)`` (or a plain
    2-tuple), both of shape ``(m, J, L)``: one *sample* is one observer.  The
    statistic is the flat ``J × L`` matrix (layout ``("filled", (J, L))``).
    :meth:`project` clips ``s`` to the closed convex hull of the data space:
    ``s ≥ 0`` (poisson), ``0 ≤ s ≤ 1`` (bernoulli), nothing (gaussian).
    ``θ`` is a :class:`LowRankParams`; :meth:`theta_vector` flattens ``U Vᵀ``
    (the factors themselves are only defined up to an invertible ``r × r`` map).
    """

    #: ``γ = 1``: exact EM with full-batch oracles (FedEM paper §4 with ``γ = 1``).
    default_step = 1.0

    def __init__(
        self,
        rank: int,
        family: str = "gaussian",
        *,
        lam: float = 0.0,
        shape: tuple[int, int] | None = None,
        max_iter: int = 500,
        tol: float = 1e-10,
        minibatch: str = "rows",
    ) -> None:
        self.rank = check_int(rank, "rank", low=1)
        self.family = check_in(family, "family", ("gaussian", "poisson", "bernoulli"))
        self.lam = check_real(lam, "lam", low=0.0)
        if self.family != "gaussian" and self.lam == 0.0:
            raise ValueError(f"Expected 'lam' > 0 for family={self.family!r} (the M-step is unbounded otherwise)")
        self.max_iter = check_count(max_iter, "max_iter", low=1)
        self.tol = check_real(tol, "tol", low=0.0, low_open=True)
        self.minibatch = check_in(minibatch, "minibatch", MINIBATCHES)
        self.shape: tuple[int, int] | None = None
        if shape is not None:
            self._set_shape(shape, "shape")

    def __repr__(self) -> str:
        return (f"MissingValues(rank={self.rank}, family={self.family!r}, lam={self.lam!r}, shape={self.shape}, "
                f"max_iter={self.max_iter}, tol={self.tol!r}, minibatch={self.minibatch!r})")

    def _set_shape(self, shape: Any, source: str) -> None:
        if len(shape) != 2:
            raise ValueError(f"Expected '{source}' to be (J, L), got {shape}")
        J, L = (check_int(int(v), source, low=1) for v in shape)
        if self.rank > min(J, L):
            raise ValueError(f"Expected 'rank' ≤ min(J, L) = {min(J, L)}, got {self.rank}")
        if self.shape is not None and self.shape != (J, L):
            raise ValueError(f"Expected '{source}' of shape (m, {self.shape[0]}, {self.shape[1]}), "
                             f"got matrices of shape {(J, L)}")
        self.shape = (J, L)

    def prepare(self, datas: Sequence[Any]) -> None:
        """Learn the matrix shape ``(J, L)`` from the clients' ``(values, mask)`` data (all must agree)."""
        for i, d in enumerate(datas):
            self._set_shape(np.shape(d[0])[1:], f"datas[{i}].values")  # refuses a shape that differs

    @property
    def layout(self) -> StatisticLayout:  # type: ignore[override]
        if self.shape is None:
            raise RuntimeError("MissingValues does not know (J, L) yet: pass shape= or call prepare(datas)")
        return StatisticLayout([("filled", self.shape)])

    # -- data ---------------------------------------------------------------
    def check_data(self, data: Any, name: str = "data") -> MissingData:
        if not isinstance(data, tuple) or len(data) != 2:
            raise TypeError(f"Expected '{name}' to be a (values, mask) pair, got {type(data).__name__}")
        values = as_array(data[0], f"{name}.values", ndim=3, finite=False, order="C")
        mask_in = np.asarray(data[1])
        if mask_in.shape != values.shape:
            raise ValueError(f"Expected '{name}.mask' of shape values.shape = {values.shape}, got {mask_in.shape}")
        if mask_in.dtype != np.bool_:
            if not np.issubdtype(mask_in.dtype, np.number) or not np.isin(mask_in, (0, 1)).all():
                raise ValueError(f"Expected '{name}.mask' to be boolean (or 0/1), got dtype {mask_in.dtype}")
        mask = mask_in.astype(bool, copy=False)
        if values.shape[0] == 0:
            raise ValueError(f"Expected '{name}' to hold at least one observer, got shape {values.shape}")
        if self.shape is not None and values.shape[1:] != self.shape:
            raise ValueError(f"Expected '{name}.values' of shape (m, {self.shape[0]}, {self.shape[1]}), "
                             f"got {values.shape}")
        observed = values[mask]
        if not np.isfinite(observed).all():
            raise ValueError(f"Expected the observed entries of '{name}.values' to be finite")
        if self.family == "poisson" and (np.any(observed < 0) or np.any(observed != np.floor(observed))):
            raise ValueError(f"Expected the observed entries of '{name}.values' to be non-negative integer counts")
        if self.family == "bernoulli" and not np.isin(observed, (0.0, 1.0)).all():
            raise ValueError(f"Expected the observed entries of '{name}.values' to be 0 or 1")
        return MissingData(values, mask)

    def n_samples(self, data: Any) -> int:
        """Observers ``m`` (``minibatch="rows"``) or entries ``m J L``, observed or missing (``"entries"``)."""
        shape = np.shape(data[0])
        return int(np.prod(shape[:3])) if self.minibatch == "entries" else int(shape[0])

    # -- family -------------------------------------------------------------
    def mean(self, theta_matrix: np.ndarray) -> np.ndarray:
        """``ψ'(θ)``: the expected value of an entry (conditional mean of a missing one)."""
        if self.family == "gaussian":
            return theta_matrix
        if self.family == "poisson":
            return np.exp(np.minimum(theta_matrix, _MAX_LOG_INTENSITY))
        return expit(theta_matrix)

    def _as_matrix(self, theta: Any) -> np.ndarray:
        if isinstance(theta, LowRankParams):
            return theta.matrix
        mat = as_array(theta, "theta", ndim=2)
        if self.shape is not None and mat.shape != self.shape:
            raise ValueError(f"Expected 'theta' of shape {self.shape}, got {mat.shape}")
        return mat

    def theta_vector(self, theta: Any) -> np.ndarray:
        return self._as_matrix(theta).ravel()

    def theta_to_dict(self, theta: Any) -> dict[str, np.ndarray]:
        """``{"U": (J, r), "V": (L, r)}`` for :class:`LowRankParams`; ``{"theta": (J, L)}`` for a plain matrix."""
        if isinstance(theta, LowRankParams):
            return {"U": np.array(theta.U, dtype=np.float64, copy=True),
                    "V": np.array(theta.V, dtype=np.float64, copy=True)}
        return {"theta": np.array(self._as_matrix(theta), dtype=np.float64, copy=True)}

    def theta_from_dict(self, arrays: dict[str, Any]) -> Any:
        """Inverse of :meth:`theta_to_dict`: :class:`LowRankParams` from ``U`` and ``V`` (or the matrix)."""
        if isinstance(arrays, dict) and set(arrays) == {"U", "V"}:
            U, V = as_array(arrays["U"], "arrays['U']", ndim=2), as_array(arrays["V"], "arrays['V']", ndim=2)
            if U.shape[1] != V.shape[1]:
                raise ValueError(f"Expected 'U' and 'V' with the same number of columns, got {U.shape}, {V.shape}")
            return LowRankParams(np.array(U, dtype=np.float64), np.array(V, dtype=np.float64))
        if isinstance(arrays, dict) and set(arrays) == {"theta"}:
            return self._as_matrix(np.array(arrays["theta"], dtype=np.float64))
        raise ValueError(f"Expected 'arrays' with keys 'U' and 'V' (or 'theta'), got {arrays!r}")

    def theta_from_vector(self, vector: np.ndarray, like: Any = None) -> LowRankParams:
        """Balanced factors ``(U Σ^½, V Σ^½)`` of the rank-r SVD of the flat ``θ`` (the ridge
        solutions of ``T`` are balanced, so the penalty is preserved)."""
        v = as_array(vector, "vector", ndim=1)
        if v.shape != (self.layout.size,):
            raise ValueError(f"Expected 'vector' to be a flat parameter of shape ({self.layout.size},), got {v.shape}")
        return self._svd_factors(v.reshape(self.shape))

    # -- E-step ---------------------------------------------------------------
    def statistic(self, data: Any, theta: Any, idx: np.ndarray | None = None) -> np.ndarray:
        if type(data) is not MissingData:  # what check_data returns passes unchecked (the hot path)
            data = self.check_data(data)
        values, mask = data
        if self.minibatch == "entries" and idx is not None:
            return self._entry_statistic(values, mask, theta, check_index(idx, values.size))
        idx = check_index(idx, values.shape[0])
        if idx is not None:
            values, mask = values[idx], mask[idx]
        b = values.shape[0]
        observed_sum = np.where(mask, values, 0.0).sum(axis=0)
        missing_frac = 1.0 - mask.sum(axis=0) / b
        filled = observed_sum / b + missing_frac * self.mean(self._as_matrix(theta))
        return filled.ravel()

    def _entry_statistic(self, values: np.ndarray, mask: np.ndarray, theta: Any, idx: np.ndarray) -> np.ndarray:
        """``ψ'(θ) + (JL/b) Σ_{(o,j,l)∈B} 1_Ω (X − ψ'(θ))_{jl} e_{jl}`` for flat entry indices ``idx``."""
        _, J, L = values.shape
        mean = self.mean(self._as_matrix(theta))
        observer, row, col = np.unravel_index(idx, values.shape)
        observed = mask[observer, row, col]
        residual = np.where(observed, values[observer, row, col] - mean[row, col], 0.0)
        acc = np.bincount(row * L + col, weights=residual, minlength=J * L)
        return mean.ravel() + (J * L / idx.shape[0]) * acc

    # -- M-step ---------------------------------------------------------------
    def T(self, s: np.ndarray) -> LowRankParams:
        S = check_statistic(s, self.layout.size).reshape(self.shape)
        if self.family == "gaussian":
            return self._svd_factors(S, shrink=self.lam)
        lo, hi = (0.0, np.inf) if self.family == "poisson" else (0.0, 1.0)
        if np.any(S < lo) or np.any(S > hi):
            raise ValueError(f"Expected 's' in [{lo}, {hi}] for family={self.family!r} (project it first)")
        return self._iterative_T(S)

    def _svd_factors(self, S: np.ndarray, shrink: float = 0.0) -> LowRankParams:
        """Rank-r SVD with singular values soft-thresholded by ``shrink``, split evenly into U and V."""
        u, sig, vt = np.linalg.svd(S, full_matrices=False)
        r = self.rank
        root = np.sqrt(np.maximum(sig[:r] - shrink, 0.0))
        return LowRankParams(u[:, :r] * root, vt[:r].T * root)

    def _psi(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``ψ(θ)``, ``ψ'(θ)``, ``ψ''(θ)`` (Poisson: continued linearly above the cap, keeping it convex and finite)."""
        if self.family == "poisson":
            capped = np.minimum(theta, _MAX_LOG_INTENSITY)
            d1 = np.exp(capped)
            d2 = np.where(theta > _MAX_LOG_INTENSITY, 0.0, d1)
            return d1 + d1 * (theta - capped), d1, d2
        d1 = expit(theta)
        return np.logaddexp(0.0, theta), d1, d1 * (1.0 - d1)

    def _iterative_T(self, S: np.ndarray) -> LowRankParams:
        """Newton's method with the exact Hessian on ``(U, V)``, started from the rank-r SVD
        of ``(ψ')⁻¹(s)`` (deterministic in ``s``).  The problem is convex in ``U`` and in
        ``V`` but not jointly: the Hessian is damped (Levenberg-Marquardt, Cholesky
        solves) until it is positive definite and the step decreases the objective."""
        J, L = S.shape
        r = self.rank
        lam = self.lam
        eps = 1e-3
        if self.family == "poisson":
            start = np.log(S + eps)
        else:
            start = logit(np.clip(S, eps, 1.0 - eps))
        init = self._svd_factors(start)
        eye_r = np.eye(r)

        def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return x[: J * r].reshape(J, r), x[J * r :].reshape(L, r)

        def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
            U, V = split(x)
            theta = U @ V.T
            psi, d1, _ = self._psi(theta)
            resid = d1 - S
            val = float(psi.sum() - (S * theta).sum() + 0.5 * lam * (np.sum(U * U) + np.sum(V * V)))
            return val, np.concatenate([(resid @ V + lam * U).ravel(), (resid.T @ U + lam * V).ravel()])

        def hess(x: np.ndarray) -> np.ndarray:
            U, V = split(x)
            _, d1, d2 = self._psi(U @ V.T)
            n_u = J * r
            H = np.zeros((n_u + L * r, n_u + L * r))
            huu = np.zeros((J, r, J, r))
            huu[np.arange(J), :, np.arange(J), :] = np.einsum("jl,la,lb->jab", d2, V, V) + lam * eye_r
            hvv = np.zeros((L, r, L, r))
            hvv[np.arange(L), :, np.arange(L), :] = np.einsum("jl,ja,jb->lab", d2, U, U) + lam * eye_r
            huv = np.einsum("jl,la,jb->jalb", d2, V, U) + np.einsum("jl,ab->jalb", d1 - S, eye_r)
            H[:n_u, :n_u] = huu.reshape(n_u, n_u)
            H[n_u:, n_u:] = hvv.reshape(L * r, L * r)
            H[:n_u, n_u:] = huv.reshape(n_u, L * r)
            H[n_u:, :n_u] = H[:n_u, n_u:].T
            return H

        x = np.concatenate([init.U.ravel(), init.V.ravel()])
        gtol = self.tol * max(1.0, float(np.abs(S).max()))
        f, g = fun(x)
        damping = 0.0
        eye = np.eye(x.shape[0])
        for _ in range(self.max_iter):
            if np.abs(g).max() <= gtol:
                break
            H = hess(x)
            scale = max(1.0, float(np.abs(np.diag(H)).max()))
            # Levenberg-Marquardt: the smallest damping that makes the model positive
            # definite (Cholesky succeeds) and the step decrease the objective (Armijo)
            for _ in range(80):
                try:
                    factor = cho_factor(H + damping * eye)
                except np.linalg.LinAlgError:
                    damping = max(4.0 * damping, 1e-10 * scale)
                    continue
                step = -cho_solve(factor, g)
                f_new, g_new = fun(x + step)
                if f_new <= f + 1e-4 * float(g @ step):
                    break
                damping = max(4.0 * damping, 1e-10 * scale)
            else:
                break  # no decrease possible at machine precision
            x, f, g = x + step, f_new, g_new
            damping *= 0.25
        if not np.isfinite(f):
            raise FloatingPointError("MissingValues.T: the iterative M-step diverged")
        U, V = split(x)
        return LowRankParams(U.copy(), V.copy())

    def project(self, s: np.ndarray) -> np.ndarray:
        out = np.array(check_statistic(s, self.layout.size), dtype=np.float64, copy=True)
        if self.family == "poisson":
            np.maximum(out, 0.0, out=out)
        elif self.family == "bernoulli":
            np.clip(out, 0.0, 1.0, out=out)
        return out

    # -- start-up and monitoring ------------------------------------------
    def init_statistic(self, datas: Sequence[Any], rng: Any) -> np.ndarray:
        """``Ŝ₀``: observed entries kept, missing ones filled with the global mean of all observed entries."""
        checked = []
        for i, d in enumerate(datas):
            if self.shape is None:
                self._set_shape(np.shape(d[0])[1:], f"datas[{i}].values")
            checked.append(self.check_data(d, f"datas[{i}]"))
        n_obs = sum(int(d.mask.sum()) for d in checked)
        if n_obs == 0:
            raise ValueError("Expected at least one observed entry in 'datas'")
        fill = sum(float(np.where(d.mask, d.values, 0.0).sum()) for d in checked) / n_obs
        M = sum(d.values.shape[0] for d in checked)
        s0 = np.zeros(self.layout.size)
        for d in checked:
            b = d.values.shape[0]
            filled = np.where(d.mask, d.values, fill).sum(axis=0) / b
            s0 += (b / M) * filled.ravel()
        return self.project(s0)

    def penalty(self, theta: LowRankParams) -> float:
        """``λ/2 (‖U‖² + ‖V‖²)``."""
        return 0.5 * self.lam * float(np.sum(theta.U**2) + np.sum(theta.V**2))

    def objective(self, data: Any, theta: Any) -> float:
        """Mean over observers of the observed entries' negative log-likelihood (nats) plus the penalty."""
        values, mask = data if type(data) is MissingData else self.check_data(data)
        th = self._as_matrix(theta)
        y = np.where(mask, values, 0.0)
        if self.family == "gaussian":
            nll = 0.5 * (y - th) ** 2 + 0.5 * np.log(2.0 * np.pi)
        elif self.family == "poisson":
            nll = np.exp(th) - y * th + gammaln(y + 1.0)
        else:
            nll = np.logaddexp(0.0, th) - y * th
        total = float(np.where(mask, nll, 0.0).sum()) / values.shape[0]
        return total + (self.penalty(theta) if isinstance(theta, LowRankParams) else 0.0)

    def reconstruction_error(self, theta: Any, truth: np.ndarray, mask: np.ndarray) -> float:
        """Root-mean-square error of ``ψ'(θ)`` against ``truth`` on the entries where ``mask`` is False.

        Parameters
        ----------
        theta : LowRankParams or ndarray of shape (J, L)
        truth : ndarray of shape (m, J, L) or (J, L)
            Hidden values (or true means) to compare with.
        mask : ndarray of bool, same shape as ``truth``
            Observed entries (excluded from the error).
        """
        truth = np.asarray(truth, dtype=np.float64)
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != truth.shape:
            raise ValueError(f"Expected 'mask' of shape truth.shape = {truth.shape}, got {mask.shape}")
        missing = ~mask
        if not missing.any():
            raise ValueError("Expected at least one missing entry in 'mask'")
        pred = np.broadcast_to(self.mean(self._as_matrix(theta)), truth.shape)
        return float(np.sqrt(np.mean((pred[missing] - truth[missing]) ** 2)))
