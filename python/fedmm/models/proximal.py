# SPDX-License-Identifier: BSD-3-Clause
"""Quadratic (proximal-gradient) surrogates, Example 1 of the FedMM paper."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fedmm._validation import as_array, check_in, check_index, check_int, check_real, check_statistic
from fedmm.models.base import StatisticLayout, SurrogateModel

__all__ = ["ProximalGradient"]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so that exp never overflows.
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


class ProximalGradient(SurrogateModel):
    """Quadratic surrogate of a smooth loss plus a proximable penalty (FedMM Example 1).

    For ``f(θ) = E[ℓ(Z, θ)]`` with an ``L_f``-Lipschitz gradient and
    ``ρ ∈ (0, 1/L_f]``, MM-1/MM-2 hold with ``ψ(θ) = ‖θ‖²/(2ρ)``,
    ``φ(θ) = θ/ρ``::

        S̄(Z, τ) = τ − ρ ∇_θ ℓ(Z, τ),        T(s) = prox_{ρg}(s),

    so SA-SSMM with ``γ = 1`` and full batches is proximal gradient descent.

    Parameters
    ----------
    loss : {'least_squares', 'logistic'}
        ``½(y − xᵀθ)²`` or ``log(1 + exp(−y xᵀθ))`` with labels ``y ∈ {−1, +1}``.
    penalty : {'l1', 'l2', 'box', None}
        ``g(θ) = lam ‖θ‖₁``, ``(lam/2) ‖θ‖²``, the indicator of
        ``[lower, upper]^d``, or none.
    rho : float > 0
        Step of the quadratic surrogate; must not exceed ``1/L_f``
        (for least squares ``L_f`` is the largest eigenvalue of ``E[x xᵀ]``,
        for logistic a quarter of it; see :meth:`lipschitz`).
    lam : float >= 0, default 0.0
        Penalty level for 'l1' and 'l2'.
    lower, upper : float, default -1.0, 1.0
        Box bounds for 'box'.

    Notes
    -----
    A client's data is a tuple ``(X, y)`` with ``X`` of shape ``(N_i, d)`` and
    ``y`` of shape ``(N_i,)``.  ``θ`` is an ndarray of shape ``(d,)`` and the
    statistic (in ``𝒮 = ℝ^d``) has the same size.  ``d`` is taken from the
    first data checked unless ``n_features`` is given.

    Examples
    --------
    The LASSO ``min_θ (1/2N) ‖y − Xθ‖² + λ‖θ‖₁`` on two clients: FedMM with every client, full
    batches and ``γ = 1`` is proximal gradient descent on the pooled data, so it reaches
    scikit-learn's solution:

    >>> import numpy as np
    >>> from sklearn.linear_model import Lasso
    >>> from fedmm.algorithms import FedMM
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 5))
    >>> y = X @ np.array([1.0, 0.0, -2.0, 0.0, 0.5]) + 0.1 * rng.standard_normal(200)
    >>> clients = [(X[:80], y[:80]), (X[80:], y[80:])]
    >>> L = ProximalGradient().lipschitz(clients, [0.4, 0.6])   # weights μ_i = N_i / N
    >>> model = ProximalGradient("least_squares", "l1", rho=1.0 / L, lam=0.1)
    >>> h = FedMM(model, step=1.0, batch_size=None).run(clients, 300, seed=0)
    >>> ref = Lasso(alpha=0.1, fit_intercept=False, tol=1e-12).fit(X, y).coef_
    >>> bool(np.abs(h.state["theta"] - ref).max() < 1e-8)
    True
    """

    def __init__(
        self,
        loss: str = "least_squares",
        penalty: str | None = "l1",
        rho: float = 1.0,
        *,
        lam: float = 0.0,
        lower: float = -1.0,
        upper: float = 1.0,
        n_features: int | None = None,
    ) -> None:
        self.loss = check_in(loss, "loss", ("least_squares", "logistic"))
        self.penalty = check_in(penalty, "penalty", ("l1", "l2", "box", None))
        self.rho = check_real(rho, "rho", low=0.0, low_open=True)
        self.lam = check_real(lam, "lam", low=0.0)
        self.lower = check_real(lower, "lower")
        self.upper = check_real(upper, "upper")
        if self.penalty == "box" and not self.lower < self.upper:
            raise ValueError(f"Expected 'lower' < 'upper' for the box penalty, got {lower} and {upper}")
        self.n_features = None if n_features is None else check_int(n_features, "n_features", low=1)
        self._layout: StatisticLayout | None = None

    # -- layout -------------------------------------------------------------
    @property
    def layout(self) -> StatisticLayout:  # type: ignore[override]
        if self.n_features is None:
            raise ValueError("ProximalGradient does not know the dimension d yet: pass n_features "
                             "or call check_data on a client's data first")
        if self._layout is None or self._layout.size != self.n_features:
            self._layout = StatisticLayout([("theta", (self.n_features,))])
        return self._layout

    def n_samples(self, data: Any) -> int:
        return int(np.shape(data[0])[0])

    def check_data(self, data: Any, name: str = "data") -> tuple[np.ndarray, np.ndarray]:
        if not isinstance(data, (tuple, list)) or len(data) != 2:
            raise TypeError(f"Expected '{name}' to be a tuple (X, y), got {type(data).__name__}")
        X = as_array(data[0], f"{name}[0] (X)", ndim=2, order="C")
        y = as_array(data[1], f"{name}[1] (y)", ndim=1)
        if X.shape[0] == 0:
            raise ValueError(f"Expected '{name}' to hold at least one sample, got X of shape {X.shape}")
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"Expected X and y of '{name}' with equal lengths, got {X.shape} and {y.shape}")
        if self.loss == "logistic" and not np.isin(y, (-1.0, 1.0)).all():
            raise ValueError(f"Expected labels of '{name}' in {{-1, +1}} for the logistic loss")
        if self.n_features is None:
            self.n_features = X.shape[1]
        elif X.shape[1] != self.n_features:
            raise ValueError(f"Expected X of '{name}' with {self.n_features} columns, got {X.shape}")
        return X, y

    def _client_data(self, data: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(X, y)`` as checked by :meth:`check_data`; a pair of float64 arrays of matching shapes passes
        without scanning the values again (the hot path)."""
        if (type(data) is tuple and len(data) == 2 and type(data[0]) is np.ndarray and type(data[1]) is np.ndarray
                and data[0].dtype == np.float64 and data[1].dtype == np.float64 and data[0].ndim == 2
                and data[1].shape == (data[0].shape[0],) and data[0].shape[0] > 0
                and data[0].shape[1] == self.n_features):
            return data
        return self.check_data(data)

    def _theta(self, theta: Any) -> np.ndarray:
        th = theta if type(theta) is np.ndarray and theta.dtype == np.float64 else as_array(theta, "theta")
        if th.shape != (self.layout.size,):
            raise ValueError(f"Expected 'theta' of shape ({self.layout.size},), got {th.shape}")
        return th

    # -- client side --------------------------------------------------------
    def _gradient(self, X: np.ndarray, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
        margin = X @ theta
        if self.loss == "least_squares":
            r = margin - y
        else:
            r = -y * _sigmoid(-y * margin)
        return X.T @ r / X.shape[0]

    def statistic(self, data: Any, theta: Any, idx: np.ndarray | None = None) -> np.ndarray:
        """``τ − ρ ∇f_B(τ)`` with ``f_B`` the mean loss over the samples ``idx``."""
        X, y = self._client_data(data)
        idx = check_index(idx, X.shape[0])
        if idx is not None:
            X, y = X[idx], y[idx]
        theta = self._theta(theta)
        return theta - self.rho * self._gradient(X, y, theta)

    # -- server side --------------------------------------------------------
    def T(self, s: np.ndarray) -> np.ndarray:
        """``prox_{ρg}(s)``: soft-thresholding, shrinkage, clipping or the identity."""
        s = check_statistic(s, self.layout.size)
        if self.penalty == "l1":
            t = self.rho * self.lam
            return np.sign(s) * np.maximum(np.abs(s) - t, 0.0)
        if self.penalty == "l2":
            return s / (1.0 + self.rho * self.lam)
        if self.penalty == "box":
            return np.clip(s, self.lower, self.upper)
        return np.array(s, dtype=np.float64, copy=True)

    def project_theta(self, theta: Any) -> np.ndarray:
        theta = np.asarray(theta, dtype=np.float64)
        return np.clip(theta, self.lower, self.upper) if self.penalty == "box" else theta

    def init_statistic(self, datas: Sequence[Any], rng: np.random.Generator) -> np.ndarray:
        """``Ŝ_0 = 0`` (so ``θ_0 = prox_{ρg}(0)``)."""
        return np.zeros(self.layout.size)

    # -- monitoring ---------------------------------------------------------
    def penalty_value(self, theta: np.ndarray) -> float:
        """``g(θ)``."""
        if self.penalty == "l1":
            return self.lam * float(np.abs(theta).sum())
        if self.penalty == "l2":
            return 0.5 * self.lam * float(theta @ theta)
        if self.penalty == "box":
            inside = bool(((theta >= self.lower) & (theta <= self.upper)).all())
            return 0.0 if inside else float("inf")
        return 0.0

    def objective(self, data: Any, theta: Any) -> float:
        """Mean loss over ``data`` plus ``g(θ)``."""
        X, y = self.check_data(data)
        theta = self._theta(theta)
        margin = X @ theta
        if self.loss == "least_squares":
            loss = 0.5 * float(np.mean((y - margin) ** 2))
        else:
            loss = float(np.mean(np.logaddexp(0.0, -y * margin)))
        return loss + self.penalty_value(theta)

    def lipschitz(self, datas: Sequence[Any], weights: Sequence[float] | None = None) -> float:
        """``L_f`` of the (μ-weighted) mean loss: ``λ_max(Σ μ_i X_iᵀX_i/N_i)`` (÷4 for logistic)."""
        if weights is None:
            weights = [1.0 / len(datas)] * len(datas)
        cov = sum(float(w) * (d[0].T @ d[0]) / d[0].shape[0] for w, d in zip(weights, datas))
        top = float(np.linalg.eigvalsh(cov)[-1])
        return top / 4.0 if self.loss == "logistic" else top

    def __repr__(self) -> str:
        return (f"ProximalGradient(loss={self.loss!r}, penalty={self.penalty!r}, rho={self.rho!r}, "
                f"lam={self.lam!r})")
