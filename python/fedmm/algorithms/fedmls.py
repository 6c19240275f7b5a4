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

from typing import Any, Sequence

import numpy as np

from fedmm import kernels
from fedmm._validation import check_in, check_int, check_real
from fedmm.algorithms.nonsmooth import (
    Inverse,
    Linear,
    SubgradientOracle,
    check_schedule,
    describe_schedule,
    evaluate_schedule,
    FederatedSubgradientMethod,
)
from fedmm.engine import LocalRuntime
from fedmm.history import History
from fedmm.models.nonsmooth import NonsmoothProblem, StackedClients

__all__ = ["FedMLS", "FedMLSServer", "FedMLSClient", "FedMLSMessage", "Linear", "Inverse"]


def project_rows_to_ball(U: np.ndarray, radius: float | None) -> np.ndarray:
    """Scale each row of ``U`` by ``min(1, R/‖row‖₂)`` in place (no-op for ``radius=None``)."""
    if radius is not None:
        norms = np.sqrt(np.einsum("ij,ij->i", U, U))
        U *= (radius / np.maximum(norms, radius))[:, None]
    return U


class FedMLS(FederatedSubgradientMethod):
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
    backend : {"c", "numpy"}
        ``"c"``: each round's local loops run in the compiled kernel
        :func:`fedmm.kernels.fedmls_local_round` (GIL released); ``"numpy"``: the
        same loop with one vectorized NumPy oracle call per local step.  Both
        consume the same random draws; results agree to rounding.

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
        backend: str = "c",
    ) -> None:
        super().__init__(problem, oracle, batch_fraction)
        self.backend = check_in(backend, "backend", ("c", "numpy"))
        if backend == "c" and problem.kernel_loss is None:
            raise ValueError(f"backend='c' does not support {problem!r}; use backend='numpy'")
        self.local_steps = check_schedule(local_steps, "local_steps", integer=True)
        self.lam = check_schedule(lam, "lam", integer=False)
        self.radius = None if radius is None else check_real(radius, "radius", low=0.0, low_open=True)

    def _config(self) -> dict:
        return {"local_steps": describe_schedule(self.local_steps), "lam": describe_schedule(self.lam), "radius": self.radius,
                "backend": self.backend}

    def build(self, stacked: StackedClients, x0: np.ndarray, seeds: Sequence[np.random.SeedSequence]):
        """The :class:`FedMLSServer` and one :class:`FedMLSClient` per client."""
        fraction = self.batch_fraction if self.oracle == "minibatch" else None
        server = FedMLSServer(stacked.n_clients, x0, self.local_steps, self.lam)
        clients = []
        for i in range(stacked.n_clients):
            lo, hi = stacked.offsets[i], stacked.offsets[i + 1]
            own = StackedClients(stacked.design[lo:hi], stacked.target[lo:hi], np.array([0, hi - lo]),
                                 np.zeros(hi - lo, dtype=np.int64))
            oracle = SubgradientOracle(self.problem, own, fraction, [seeds[i]])
            clients.append(FedMLSClient(i, self.problem, own, oracle, x0, stacked.n_clients, self.radius,
                                        self.backend))
        return server, clients

    def run(self, datas: Sequence[Any], n_rounds: int, *, seed: Any = 0, x0: Any = None,
            runtime: Any = None, n_threads: int = 1, batched: bool = True, objective_every: int = 1) -> History:
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
        runtime : object, optional
            A runtime with ``run(server, clients, n_rounds, history=, monitor=)``
            (:class:`fedmm.runtime.LocalRuntime` protocol); default a local one with
            ``n_threads`` threads, ``batched`` (one kernel call per thread's share of
            clients) or not.  Results do not depend on these choices.

        Returns
        -------
        History
            Per round ``t = k``: ``objective = F(x_k)``, ``local_steps`` (cumulative
            per client), ``lam = λ_k``, ``T = T_k``, ``gamma = γ_k``, ``active``,
            ``bytes_up``, ``bytes_down`` (payload sizes), ``wall_time`` (cumulative,
            monitoring excluded); ``state["x"] = x_K``, ``state["z_clients"]`` (n, p).
        """
        stacked, n_rounds, x0, oracle, _, history = self._setup(datas, n_rounds, seed, x0)
        server, clients = self.build(stacked, x0, oracle.seeds)
        if runtime is None:
            runtime = LocalRuntime(n_threads=n_threads)

        objective_every = check_int(objective_every, "objective_every", low=0)

        def monitor(t: int, gamma: float) -> dict:
            if objective_every and ((t + 1) % objective_every == 0 or t + 1 == n_rounds):
                return {"objective": self.problem.objective(stacked, server.x)}
            return {}

        runtime.run(server, clients, n_rounds, history=history, monitor=monitor)
        history.state["x"] = server.x.copy()
        history.state["z_clients"] = np.stack([c.z for c in clients])
        return history


class FedMLSMessage:
    """Server → clients in round ``k``: ``y_k`` and the round's ``T_k``, ``λ_k``."""

    __slots__ = ("k", "y", "local_steps", "lam", "header")

    def __init__(self, k: int, y: np.ndarray, local_steps: int, lam: float, header: bool = True) -> None:
        self.k, self.y, self.local_steps, self.lam, self.header = k, y, local_steps, lam, header

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: ``y_k`` (float64) plus ``k``, ``T_k``, ``λ_k`` (8 bytes each)."""
        return self.y.nbytes + (24 if self.header else 0)


class FedMLSServer:
    """The server of Algorithm 1: state ``x_k``, ``z_k``, ``y_k`` (lines 5, 17-19)."""

    def __init__(self, n_clients: int, x0: np.ndarray, local_steps: Any, lam: Any) -> None:
        self.n_clients = n_clients
        self.x, self.z, self.y = x0.copy(), x0.copy(), x0.copy()
        self.local_steps, self.lam = local_steps, lam
        self.total_local_steps = 0
        self._round: tuple[int, int, float] | None = None

    def setup_message(self) -> FedMLSMessage:
        """FedMLS has no set-up exchange (no control variates): an empty message."""
        return FedMLSMessage(0, np.empty(0), 0, 0.0, header=False)

    def setup_aggregate(self, payloads: dict) -> None:
        """Nothing to aggregate before round 1 (see :meth:`setup_message`)."""
        for i, b in payloads.items():
            if b:
                raise ValueError(f"Expected an empty set-up payload from client {i}, got {len(b)} bytes")

    def select(self, t: int) -> list[int]:
        """All clients participate (Algorithm 1)."""
        return list(range(self.n_clients))

    def broadcast(self, t: int) -> FedMLSMessage:
        """Round ``k = t + 1``: send ``y_k`` with ``T_k`` and ``λ_k``."""
        k = t + 1
        T = evaluate_schedule(self.local_steps, k, "local_steps", integer=True)
        lam = evaluate_schedule(self.lam, k, "lam", integer=False)
        self._round = (k, T, lam)
        return FedMLSMessage(k, self.y.copy(), T, lam)

    def aggregate(self, t: int, payloads: dict) -> dict:
        """Decode the ``y_{k+1}^i``, then ``x_k``, ``y_{k+1}`` and the consensus step ``z_{k+1}``."""
        k, T, lam = self._round
        if sorted(payloads) != list(range(self.n_clients)):
            raise ValueError(f"FedMLS needs every client's message, got clients {sorted(payloads)}")
        p = self.x.shape[0]
        mean_y = np.zeros(p)
        for i in range(self.n_clients):
            mean_y += decode_vector(payloads[i], p, f"payload of client {i}")
        mean_y /= self.n_clients
        gamma, gamma_next = 2.0 / (k + 1), 2.0 / (k + 2)
        self.x = (1.0 - gamma) * self.x + gamma * self.z
        self.y = (1.0 - gamma_next) * self.x + gamma_next * self.z
        self.z = self.z - ((k + 1) / 4.0) * (self.y - mean_y)
        self.total_local_steps += T
        return {"t": k, "gamma": gamma, "lam": lam, "T": T, "local_steps": self.total_local_steps}


def decode_vector(payload: Any, size: int, name: str) -> np.ndarray:
    """A payload of ``size`` little-endian float64 values, validated (length, finiteness)."""
    if not isinstance(payload, (bytes, bytearray, memoryview)) or len(payload) != 8 * size:
        got = len(payload) if isinstance(payload, (bytes, bytearray, memoryview)) else type(payload).__name__
        raise ValueError(f"Expected the {name} to be {8 * size} bytes (float64 vector of length {size}), got {got}")
    v = np.frombuffer(payload, dtype="<f8").astype(np.float64)
    if not np.isfinite(v).all():
        raise ValueError(f"Expected the {name} to contain only finite values")
    return v


class FedMLSClient:
    """Client ``i`` of Algorithm 1: private data, state ``x^i``, ``z^i``, ``y^i``, own random stream.

    :meth:`step` runs lines 6-16 (the approximate prox of ``(1/n) f_i / β_k`` by
    ``T_k`` projected subgradient steps with averaging) and returns
    ``y_{k+1}^i`` as little-endian float64 bytes.
    """

    def __init__(self, index: int, problem: NonsmoothProblem, data: StackedClients, oracle: SubgradientOracle,
                 x0: np.ndarray, n_clients: int, radius: float | None, backend: str) -> None:
        self.index = index
        self.problem, self.data, self.oracle = problem, data, oracle
        self.n_clients, self.radius, self.backend = n_clients, radius, backend
        self.x, self.z, self.y = x0.copy(), x0.copy(), x0.copy()
        #: The stacked data of the last share of clients this client led in ``step_many`` (the shares are
        #: fixed between rounds, so they are stacked once); None before the first call.
        self.share_cache: tuple[tuple[int, ...], StackedClients] | None = None

    def setup(self, message: FedMLSMessage) -> bytes:
        """No set-up exchange in FedMLS: an empty payload."""
        return b""

    def step(self, message: FedMLSMessage) -> bytes:
        """One round of local training; returns the payload ``y_{k+1}^i``."""
        return FedMLSClient.step_many([self], message)[0]

    @staticmethod
    def step_many(clients: Sequence["FedMLSClient"], message: FedMLSMessage) -> list[bytes]:
        """The same round for several clients with one kernel call (identical results)."""
        first = clients[0]
        k, T = message.k, message.local_steps
        weight = message.lam * k / (4.0 * first.n_clients)  # 1/(n β_k)
        gamma, gamma_next = 2.0 / (k + 1), 2.0 / (k + 2)
        Z = np.stack([c.z for c in clients])
        V = Z - (k / 4.0) * (np.stack([c.y for c in clients]) - message.y)
        U, U_avg = Z.copy(), Z.copy()
        key = tuple(c.index for c in clients)
        if first.share_cache is None or first.share_cache[0] != key:  # shares are fixed between rounds: stack once
            first.share_cache = (key, _stack_share(clients))
        share = first.share_cache[1]
        minibatch = first.oracle.batch_fraction is not None
        rows = row_bounds = scale = None
        if minibatch:  # each client draws T steps from its own stream, shifted to share rows
            rows = np.hstack([c.oracle.draw(T) + share.offsets[j] for j, c in enumerate(clients)])
            row_bounds = np.concatenate([[0], np.cumsum([c.oracle.batch[0] for c in clients])]).astype(np.int64)
            scale = np.array([c.oracle.scale[0] for c in clients])
        if first.backend == "c":
            kernels.fedmls_local_round(first.problem.kernel_loss, share.design, share.target, share.offsets,
                                       V, U, U_avg, n_steps=T, weight=weight, radius=first.radius,
                                       rows=rows, row_offsets=row_bounds, scale=scale)
        else:
            for t in range(1, T + 1):
                if minibatch:
                    G = first.problem.subgradients(share, U, rows[t - 1], row_bounds[:-1], scale)
                else:
                    G = first.problem.subgradients(share, U)
                G *= weight
                G += U
                G -= V
                U -= G / (1.0 + 0.5 * t)
                project_rows_to_ball(U, first.radius)
                theta = 2.0 * (t + 1) / (t * (t + 3))
                U_avg *= 1.0 - theta
                U_avg += theta * U
        payloads = []
        for j, c in enumerate(clients):
            c.z = U[j].copy()
            c.x = (1.0 - gamma) * c.x + gamma * U_avg[j]
            c.y = (1.0 - gamma_next) * c.x + gamma_next * c.z
            payloads.append(c.y.astype("<f8").tobytes())
        return payloads


def _stack_share(clients: Sequence[FedMLSClient]) -> StackedClients:
    if len(clients) == 1:
        return clients[0].data
    counts = np.array([c.data.design.shape[0] for c in clients], dtype=np.int64)
    return StackedClients(
        np.vstack([c.data.design for c in clients]),
        np.concatenate([c.data.target for c in clients]),
        np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        np.repeat(np.arange(len(clients), dtype=np.int64), counts),
    )
