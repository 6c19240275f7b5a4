# SPDX-License-Identifier: BSD-3-Clause
"""FedMLS: federated learning with multiple local steps for non-smooth convex problems.

Palenzuela, Dadras, Yurtsever, Löfstedt, "Provable reduction in communication
rounds for non-smooth convex federated learning", Algorithm 1: MOPES
(Thekumparampil et al. 2020) applied to the product-space reformulation
``min_X (1/n) Σ_i f_i(x^i)`` s.t. ``x^1 = … = x^n``, where the projection onto
the consensus set is the server's averaging and the approximate prox of
``(1/n) f_i / β_k`` is a client's local loop.

With ``β_k = 4/(λ_k k)``, ``γ_k = 2/(k+1)``, ``θ_t = 2(t+1)/(t(t+3))`` and the
initialization ``z_1 = z_0^i = x_0^i = y_1^i = x_0 = y_1 = y_0`` (paper: zeros),
round ``k = 1, …, K`` is:

client ``i`` (receives ``y_k``)::

    v = z_{k−1}^i − (y_k^i − y_k)/(β_k λ_k)
    u_0 = ũ_0 = z_{k−1}^i
    for t = 1..T_k:
        û_t = u_{t−1} − (1/(1 + t/2)) ((1/(n β_k)) ĝ_i(u_{t−1}) + u_{t−1} − v)
        u_t = û_t · min(1, R/‖û_t‖)                      (no projection if R is None)
        ũ_t = (1 − θ_t) ũ_{t−1} + θ_t u_t
    z_k^i = u_{T_k};  x_k^i = (1 − γ_k) x_{k−1}^i + γ_k ũ_{T_k}
    y_{k+1}^i = (1 − γ_{k+1}) x_k^i + γ_{k+1} z_k^i          (sent to the server)

server::

    x_k = (1 − γ_k) x_{k−1} + γ_k z_k
    y_{k+1} = (1 − γ_{k+1}) x_k + γ_{k+1} z_k
    z_{k+1} = z_k − (y_{k+1} − (1/n) Σ_i y_{k+1}^i)/(β_{k+1} λ_{k+1})

and the output is ``x_K``.  Note ``1/(β_k λ_k) = k/4`` does not depend on ``λ``;
``λ_k`` enters only the local subgradient weight ``1/(n β_k) = λ_k k/(4n)``.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from fedmm._validation import check_real
from fedmm.algorithms.nonsmooth import (
    Inverse,
    Linear,
    _check_schedule,
    _describe,
    _evaluate,
    _FederatedSubgradientMethod,
)
from fedmm.history import History

__all__ = ["FedMLS", "Linear", "Inverse"]


def project_rows_to_ball(U: np.ndarray, radius: float | None) -> np.ndarray:
    """Scale each row of ``U`` by ``min(1, R/‖row‖₂)`` in place (no-op for ``radius=None``)."""
    if radius is not None:
        norms = np.sqrt(np.einsum("ij,ij->i", U, U))
        U *= (radius / np.maximum(norms, radius))[:, None]
    return U


class FedMLS(_FederatedSubgradientMethod):
    """FedMLS (the FedMLS paper's Algorithm 1), all clients participating.

    Parameters
    ----------
    problem : NonsmoothProblem
        :class:`~fedmm.models.nonsmooth.HingeSVM` or
        :class:`~fedmm.models.nonsmooth.L1Regression`.
    local_steps : int or callable
        ``T_k ≥ 1`` local steps in round ``k``; a callable ``k ↦ T_k`` such as
        ``Linear(1)`` (``T_k = k``, the paper's §4 choice).
    lam : float or callable
        ``λ_k > 0``; a callable ``k ↦ λ_k`` such as ``Inverse(lam0)`` (``λ0/k``, the
        paper's §4 choice) or a constant (Corollary 3.2).
    radius : float or None
        ``R > 0`` of the Euclidean ball ``‖u‖ ≤ R`` the local iterates are
        projected on (it should contain a minimizer); None for no projection.
    oracle : {"full", "minibatch"}
        Exact subgradients of ``f_i`` or unbiased minibatch estimates.
    batch_fraction : float
        Fraction of local samples per minibatch (the paper: 0.1).

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.models.nonsmooth import L1Regression
    >>> rng = np.random.default_rng(0)
    >>> datas = [(rng.normal(size=(20, 3)), rng.normal(size=20)) for _ in range(4)]
    >>> algo = FedMLS(L1Regression(), local_steps=Linear(1), lam=Inverse(1.0), radius=10.0, oracle="full")
    >>> hist = algo.run(datas, 50)
    >>> f_star = L1Regression().minimize(datas).value
    >>> bool(hist["objective"][-1] - f_star < 1e-2 * f_star)
    True
    """

    name = "FedMLS"

    def __init__(
        self,
        problem,
        local_steps: Any,
        lam: Any,
        radius: float | None = None,
        *,
        oracle: str = "minibatch",
        batch_fraction: float = 0.1,
    ) -> None:
        super().__init__(problem, oracle, batch_fraction)
        self.local_steps = _check_schedule(local_steps, "local_steps", integer=True)
        self.lam = _check_schedule(lam, "lam", integer=False)
        self.radius = None if radius is None else check_real(radius, "radius", low=0.0, low_open=True)

    def _config(self) -> dict:
        return {"local_steps": _describe(self.local_steps), "lam": _describe(self.lam), "radius": self.radius}

    def run(self, datas: Sequence[Any], n_rounds: int, *, seed: Any = 0, x0: Any = None) -> History:
        """Run ``n_rounds`` communication rounds.

        Parameters
        ----------
        datas : list of (A, y)
            Client data sets (see :mod:`fedmm.models.nonsmooth`).
        n_rounds : int
            ``K ≥ 1``.
        seed : int or SeedSequence
            Root of the per-client minibatch streams (ignored by ``oracle="full"``).
        x0 : ndarray of shape (p,), optional
            ``y_0`` (default zeros, as in the paper).

        Returns
        -------
        History
            Per round ``t = k``: ``objective = F(x_k)``, ``local_steps`` (cumulative
            per client), ``lam = λ_k``, ``T = T_k``, ``bytes_up``, ``bytes_down``,
            ``wall_time``; ``state["x"] = x_K``, ``state["z_clients"]`` (n, p).
        """
        stacked, n_rounds, x0, oracle, _, history = self._setup(datas, n_rounds, seed, x0)
        n = stacked.n_clients
        radius = self.radius
        # server state (x, z, y) and client states (rows i of Xc, Zc, Yc)
        x, z, y = x0.copy(), x0.copy(), x0.copy()
        Xc, Zc, Yc = (np.tile(x0, (n, 1)) for _ in range(3))
        start, steps = time.perf_counter(), 0
        for k in range(1, n_rounds + 1):
            T = _evaluate(self.local_steps, k, "local_steps", integer=True)
            lam = _evaluate(self.lam, k, "lam", integer=False)
            gamma, gamma_next = 2.0 / (k + 1), 2.0 / (k + 2)
            weight = lam * k / (4.0 * n)  # 1/(n β_k)
            # -- clients: approximate prox of (1/n) f_i / β_k at v (eq. (9)) --
            V = Zc - (k / 4.0) * (Yc - y)
            U = Zc.copy()
            U_avg = Zc.copy()
            for t in range(1, T + 1):
                G = oracle(U)
                G *= weight
                G += U
                G -= V
                U -= G / (1.0 + 0.5 * t)
                project_rows_to_ball(U, radius)
                theta = 2.0 * (t + 1) / (t * (t + 3))
                U_avg *= 1.0 - theta
                U_avg += theta * U
            Zc = U
            Xc = (1.0 - gamma) * Xc + gamma * U_avg
            Yc = (1.0 - gamma_next) * Xc + gamma_next * Zc
            # -- server: interpolation and the consensus (projection) step --
            x = (1.0 - gamma) * x + gamma * z
            y = (1.0 - gamma_next) * x + gamma_next * z
            z = z - ((k + 1) / 4.0) * (y - Yc.mean(axis=0))
            steps += T
            self._record(history, stacked, k, x, steps, 1, 1, start, lam=lam, T=T)
        history.state["x"] = x
        history.state["z_clients"] = Zc
        return history
