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
round ``k = 1, …, K`` (the 0-based round ``t = k − 1`` of ``run``) is:

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
``λ_k`` (the ``prox_weight`` argument) enters only the local subgradient weight
``1/(n β_k) = λ_k k/(4n)``.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fedmm import kernels
from fedmm._validation import check_in
from fedmm.algorithms.base import OptionalConstraint, Real, Rule
from fedmm.algorithms._schedule import Schedule
from fedmm.algorithms.nonsmooth import (
    FederatedSubgradientMethod,
    ShareOracle,
    SubgradientClient,
    SubgradientOracle,
    SubgradientServer,
    check_full_participation,
    check_message_compressor,
    compressor_description,
    scalar_array,
    scalar_from_array,
    vector_from_array,
)
from fedmm.algorithms._setup import checked_compressors, client_compressor
from fedmm.federation.skeleton import mean_aggregate
from fedmm.models.nonsmooth import NonsmoothProblem, StackedClients

__all__ = ["FedMLS", "FedMLSServer", "FedMLSClient", "FedMLSMessage", "project_rows_to_ball"]

#: Which backend runs FedMLS's local loops (the names of :data:`fedmm.algorithms.federated.BACKENDS`).
BACKENDS = ("auto", "python", "compiled")
#: The names of the first release: each is refused with its new name.
_OLD_BACKENDS = {"c": "compiled", "numpy": "python"}


def project_rows_to_ball(U: np.ndarray, radius: float | None) -> np.ndarray:
    """Scale each row of ``U`` by ``min(1, R/‖row‖₂)`` in place (no-op for ``radius=None``)."""
    if radius is not None:
        norms = np.sqrt(np.einsum("ij,ij->i", U, U))
        U *= (radius / np.maximum(norms, radius))[:, None]
    return U


def _check_backend(backend: Any, name: str) -> str:
    if isinstance(backend, str) and backend in _OLD_BACKENDS:
        raise ValueError(f"{name}={backend!r} is now {name}={_OLD_BACKENDS[backend]!r}: expected '{name}' in "
                         f"{BACKENDS}")
    return check_in(backend, name, BACKENDS)


def _count_schedule(value: Any, name: str) -> Schedule:
    return Schedule(value, domain="count", name=name)


def _schedule(value: Any, name: str) -> Schedule:
    return Schedule(value, name=name)


class FedMLS(FederatedSubgradientMethod):
    r"""FedMLS (the FedMLS paper's Algorithm 1), all clients participating.

    Algorithm 1 has every client take part in every round: the paper leaves
    partial participation (a block-coordinate variant of MOPES) to future
    work (§5), so ``clients_per_round`` and ``participation_prob`` are
    refused.  A client that fails (its step raised, or its message is
    invalid) is left out of the round's consensus step, which averages the
    :math:`y_{k+1}^i` of the clients that answered (with none, :math:`z`
    stays), and keeps its state :math:`x^i, z^i, y^i`.

    With a ``compressor`` client :math:`i` sends
    :math:`\mathrm{Quant}(y_{k+1}^i − y_k)`, its message relative to the
    point :math:`y_k` it received (the server's own), and the server uses
    :math:`\hat y_{k+1}^i = y_k + \mathrm{Quant}(y_{k+1}^i − y_k)`: the
    consensus step :math:`z_{k+1}` is affine in
    :math:`\frac1n\sum_i \hat y_{k+1}^i`, so its expectation over the
    compression is the uncompressed step (unbiased compressors), with error
    :math:`\mathbb{E}\|\hat y^i − y^i\|^2 \leq ω\|y_{k+1}^i − y_k\|^2`.  The
    clients keep their exact :math:`y^i`.  An
    :class:`~fedmm.compression.Identity` compressor (the default) sends
    :math:`y_{k+1}^i` itself as raw float64 (the numbers and ``bytes_up`` of a
    run without compression, bit for bit).

    Parameters
    ----------
    model : NonsmoothProblem
        :class:`~fedmm.models.nonsmooth.HingeSVM` or
        :class:`~fedmm.models.nonsmooth.L1Regression`.
    prox_weight : float or Schedule spec
        :math:`λ_k > 0`, the paper's :math:`λ_k` (the MOPES prox parameter; it sets
        the weight :math:`1/(nβ_k) = λ_k k/(4n)` of the local subgradients):
        a number is a constant (Corollary 3.2); ``("inverse", λ0)`` is
        :math:`λ_0/k` (the paper's §4 choice); any
        :class:`~fedmm.algorithms.Schedule` spec or callable ``k -> λ_k``.
    local_steps : int or Schedule spec
        :math:`T_k \geq 1` local steps in round :math:`k`; default
        ``("linear", 1)``, i.e. :math:`T_k = k` (the paper's §4 choice).
    radius : float or None
        :math:`R > 0` of the Euclidean ball :math:`\|u\| \leq R` the local iterates
        are projected on (it should contain a minimizer); None for no projection.
    oracle : {"minibatch", "full"}
        Unbiased minibatch estimates or exact subgradients of the :math:`f_i`.
    batch_size : float in (0, 1] or int >= 1
        Each client's minibatch: a fraction of its samples (float; the paper:
        0.1) or a number of samples (int, clipped to the client's size); see
        :class:`~fedmm.algorithms.nonsmooth.FederatedSubgradientMethod`.
    compressor : compressor or sequence of n compressors, optional
        Unbiased compressor(s) of :mod:`fedmm.compression` for the clients'
        messages (one per client if a sequence); default
        :class:`~fedmm.compression.Identity`.
    clients_per_round, participation_prob : None
        Refused (``ValueError``) unless None (``participation_prob=1.0``, every
        client, is accepted): see above.
    backend : {"auto", "python", "compiled"}
        ``"compiled"``: each round's local loops run in the compiled kernel
        :func:`fedmm.kernels.fedmls_local_round` (GIL released; the problem
        needs a ``kernel_loss``); ``"python"``: the same loop with one
        vectorized NumPy oracle call per local step; ``"auto"`` (default): the
        compiled one when the problem has a ``kernel_loss``.  Both consume the
        same random draws; results agree to rounding.  ``History.config["backend"]``
        records the one that ran.
    n_threads, batched
        The default runtime's threads and batching (see
        :class:`~fedmm.algorithms.nonsmooth.FederatedSubgradientMethod`); the
        numbers do not depend on them.

    Notes
    -----
    ``run`` records per round ``t``: ``gamma`` (:math:`γ_k = 2/(k+1)`),
    ``prox_weight`` (:math:`λ_k`), ``T`` (:math:`T_k`), ``local_steps``
    (cumulative per client), ``active``, ``dropped``, ``bytes_up``,
    ``bytes_down``, ``wall_time`` and ``objective`` :math:`F(x_k)` at the
    ``evaluate_every`` cadence; ``history.state`` holds ``x`` (:math:`x_K`) and
    ``z_clients`` (the clients' :math:`z_K^i`, shape (n, p)).

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.models.nonsmooth import L1Regression
    >>> rng = np.random.default_rng(0)
    >>> datas = [(rng.normal(size=(20, 3)), rng.normal(size=20)) for _ in range(4)]
    >>> algo = FedMLS(L1Regression(), prox_weight=("inverse", 1.0), radius=10.0, oracle="full")
    >>> hist = algo.run(datas, 50, evaluate_every=10)
    >>> f_star = L1Regression().minimize(datas).value
    >>> bool(hist["objective"][-1] - f_star < 1e-2 * f_star)
    True
    """

    name = "FedMLS"
    parameter_constraints = {
        **FederatedSubgradientMethod.parameter_constraints,
        "backend": Rule(_check_backend, f"one of {BACKENDS}"),
        "local_steps": Rule(_count_schedule, "an int >= 1 or a Schedule spec of counts"),
        "prox_weight": Rule(_schedule, "a number > 0 or a Schedule spec"),
        "radius": OptionalConstraint(Real(0.0, low_open=True)),
    }

    def __init__(
        self,
        model: NonsmoothProblem,
        *,
        prox_weight: Any,
        local_steps: Any = ("linear", 1),
        radius: float | None = None,
        compressor: Any = None,
        clients_per_round: None = None,
        participation_prob: None = None,
        oracle: str = "minibatch",
        batch_size: float | int = 0.1,
        backend: str = "auto",
        n_threads: int = 1,
        batched: bool = True,
    ) -> None:
        participating = check_full_participation(
            "FedMLS", clients_per_round, participation_prob,
            "Algorithm 1 of the FedMLS paper has every client take part in every round (its §5 leaves partial "
            "participation, a block-coordinate variant of MOPES, to future work)")
        super().__init__(model, oracle=oracle, batch_size=batch_size, n_threads=n_threads, batched=batched)
        self.set_parameters(backend=backend)
        if self.backend == "compiled" and model.kernel_loss is None:
            raise ValueError(f"backend='compiled' does not support {model!r} (it has no kernel_loss); use "
                             "backend='python' or 'auto'")
        #: The backend that runs the local loops: ``'compiled'`` or ``'python'`` (``'auto'`` resolved).
        self.backend = (self.backend if self.backend != "auto"
                        else ("compiled" if model.kernel_loss is not None else "python"))
        self.set_parameters(local_steps=local_steps, prox_weight=prox_weight, radius=radius)
        self.compressor = check_message_compressor(compressor)
        self.clients_per_round, self.participation_prob = participating

    def config(self) -> dict:
        return {**super().config(), "local_steps": self.local_steps.description,
                "prox_weight": self.prox_weight.description, "radius": self.radius, "backend": self.backend,
                "clients_per_round": self.clients_per_round, "participation_prob": self.participation_prob,
                "compressor": compressor_description(self.compressor)}

    def build_server(self, n_clients: int, x0: np.ndarray, seed: np.random.SeedSequence) -> "FedMLSServer":
        return FedMLSServer(n_clients, x0, self.local_steps, self.prox_weight,
                            checked_compressors(self.compressor, n_clients, x0.shape[0]))

    def build_client(self, index: int, data: StackedClients, oracle: SubgradientOracle, x0: np.ndarray,
                     n_clients: int) -> "FedMLSClient":
        return FedMLSClient(index, self.model, data, oracle, x0, n_clients, self.radius, self.backend,
                            client_compressor(self.compressor, n_clients, index))

    def final_state(self, server: "FedMLSServer", clients: Sequence["FedMLSClient"]) -> dict:
        """``x`` (:math:`x_K`) and ``z_clients`` (the clients' :math:`z_K^i`, shape (n, p))."""
        return {"x": server.x.copy(), "z_clients": np.stack([c.z for c in clients])}

    # -- the parties apart from the data (fedmm.protocols.RemoteAlgorithm; the rest is the base's) ---------
    def message_class(self) -> type:
        """:class:`FedMLSMessage`."""
        return FedMLSMessage

    def remote_finish_needs_clients(self) -> bool:
        """True: ``history.state["z_clients"]`` holds the clients' :math:`z_K^i`."""
        return True

    def remote_server(self, n_clients: int, *, descriptions: Sequence[Any], seed: int, init: Any = None,
                      init_datas: Sequence[Any] | None = None, public_data: Any = None) -> "FedMLSServer":
        """The base's server; ``init`` is refused: the clients start at :math:`x_0` too
        (:math:`z_0^i = x_0^i = y_1^i = x_0`), and a client built apart starts at the paper's :math:`x_0 = 0`."""
        if init is not None:
            raise TypeError("FedMLS with its parties apart starts at x_0 = 0 (its clients hold x_0 too: "
                            "z_0^i = x_0^i = y_1^i = x_0): pass no 'init'")
        return super().remote_server(n_clients, descriptions=descriptions, seed=seed, init_datas=init_datas,
                                     public_data=public_data)


class FedMLSMessage:
    """Server → clients in round ``k``: ``y_k`` and the round's ``T_k``, ``λ_k`` (``prox_weight``)."""

    __slots__ = ("k", "y", "local_steps", "prox_weight")

    def __init__(self, k: int, y: np.ndarray, local_steps: int, prox_weight: float) -> None:
        self.k, self.y, self.local_steps, self.prox_weight = k, y, local_steps, prox_weight

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: ``y_k`` (float64) plus ``k``, ``T_k``, ``λ_k`` (8 bytes each)."""
        return self.y.nbytes + 24

    @property
    def theta(self) -> np.ndarray:
        """The broadcast point ``y_k`` (the name runtimes use for a message's parameter)."""
        return self.y

    def to_arrays(self) -> list[np.ndarray]:
        """``[y_k, k, T_k, λ_k]`` for array-based transports (Flower): ``y_k`` float64, each scalar an array of
        shape (1,) (int64 ``k`` and ``T_k``, float64 ``λ_k``)."""
        return [np.ascontiguousarray(self.y, dtype=np.float64), scalar_array(self.k, "k"),
                scalar_array(self.local_steps, "local_steps"), scalar_array(self.prox_weight, "prox_weight")]

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> "FedMLSMessage":
        """Inverse of :meth:`to_arrays` (``ValueError`` for arrays that do not form a message)."""
        if len(arrays) != 4:
            raise ValueError(f"Expected 4 arrays in a FedMLSMessage, got {len(arrays)}")
        return cls(scalar_from_array(arrays[1], "FedMLSMessage.k"), vector_from_array(arrays[0], "FedMLSMessage.y"),
                   scalar_from_array(arrays[2], "FedMLSMessage.local_steps"),
                   scalar_from_array(arrays[3], "FedMLSMessage.prox_weight"))


class FedMLSServer(SubgradientServer):
    """The server of Algorithm 1: state ``x_k``, ``z_k``, ``y_k`` (lines 5, 17-19).

    ``decoders``: see :class:`~fedmm.algorithms.nonsmooth.SubgradientServer`.
    """

    state_names = ("x", "y", "z")

    def __init__(self, n_clients: int, x0: np.ndarray, local_steps: Any, prox_weight: Any,
                 decoders: Sequence[Any] | None = None) -> None:
        super().__init__(n_clients, x0, decoders)
        self.z, self.y = x0.copy(), x0.copy()
        self.local_steps = Schedule(local_steps, domain="count", name="local_steps")
        self.prox_weight = Schedule(prox_weight, name="prox_weight")
        self._round: tuple[int, int, float] | None = None

    def broadcast(self, t: int) -> FedMLSMessage:
        """Round ``k = t + 1``: send ``y_k`` with ``T_k`` and ``λ_k``."""
        k = t + 1
        T = self.local_steps(k)
        prox_weight = self.prox_weight(k)
        self._round = (k, T, prox_weight)
        return FedMLSMessage(k, self.y.copy(), T, prox_weight)

    def aggregate(self, t: int, payloads: dict, on_invalid: Any = None) -> dict:
        """Decode the ``y_{k+1}^i``, then ``x_k``, ``y_{k+1}`` and the consensus step ``z_{k+1}``.

        The mean of the ``y_{k+1}^i`` runs over the clients whose valid message arrived (compressed:
        ``y_k + Quant(y_{k+1}^i − y_k)``); when none did, ``z_{k+1} = z_k``.  Atomic, under the fault policy
        (:meth:`~fedmm.algorithms.nonsmooth.SubgradientServer.server_step`).
        """
        k, T, prox_weight = self._round
        ids, ys = self.decode_all(t, payloads, self.x.shape[0], on_invalid, reference=self.y)
        self.commit(self.server_step(t, ids, ys, on_invalid))
        self.total_local_steps += T
        return {"gamma": 2.0 / (k + 1), "prox_weight": prox_weight, "local_steps": T,
                "total_local_steps": self.total_local_steps}

    def step_from(self, t: int, rows: Sequence[np.ndarray] | np.ndarray) -> dict[str, np.ndarray]:
        """Lines 17-19 from the messages ``y_{k+1}^i``: the new ``x``, ``y`` and ``z`` (``z`` itself without any)."""
        k = self._round[0]
        gamma, gamma_next = 2.0 / (k + 1), 2.0 / (k + 2)
        x = (1.0 - gamma) * self.x + gamma * self.z
        y = (1.0 - gamma_next) * x + gamma_next * self.z
        z = self.z - ((k + 1) / 4.0) * (y - mean_aggregate(rows, self.x.shape[0], order="client")) if len(rows) \
            else self.z
        return {"x": x, "y": y, "z": z}


class FedMLSClient(SubgradientClient):
    """Client ``i`` of Algorithm 1: private data, state ``x^i``, ``z^i``, ``y^i``, own random stream.

    :meth:`step` runs lines 6-16 (the approximate prox of ``(1/n) f_i / β_k`` by
    ``T_k`` projected subgradient steps with averaging) and returns
    ``y_{k+1}^i`` as little-endian float64 bytes, or, with a ``compressor``,
    ``Quant(y_{k+1}^i − y_k)`` (:meth:`~fedmm.algorithms.nonsmooth.SubgradientClient.upload`).
    """

    state_names = ("x", "z", "y")

    def __init__(self, index: int, model: NonsmoothProblem, data: StackedClients, oracle: SubgradientOracle,
                 x0: np.ndarray, n_clients: int, radius: float | None, backend: str, compressor: Any = None) -> None:
        super().__init__(index, model, data, oracle, n_clients, compressor)
        self.radius, self.backend = radius, backend
        self.x, self.z, self.y = x0.copy(), x0.copy(), x0.copy()

    @staticmethod
    def step_many(clients: Sequence["FedMLSClient"], message: FedMLSMessage) -> list[bytes]:
        """The same round for several clients with one kernel call (identical results)."""
        first = clients[0]
        k, T = message.k, message.local_steps
        weight = message.prox_weight * k / (4.0 * first.n_clients)  # 1/(n β_k)
        gamma, gamma_next = 2.0 / (k + 1), 2.0 / (k + 2)
        Z = np.stack([c.z for c in clients])
        V = Z - (k / 4.0) * (np.stack([c.y for c in clients]) - message.y)
        U, U_avg = Z.copy(), Z.copy()
        oracle = ShareOracle(clients, T)
        if first.backend == "compiled":
            share = oracle.share
            for first_step, count, rows in oracle.chunks():  # bounded minibatch memory per call
                kernels.fedmls_local_round(first.model.kernel_loss, share.design, share.target, share.offsets,
                                           V, U, U_avg, n_steps=count, first_step=first_step, weight=weight,
                                           radius=first.radius, rows=rows, row_offsets=oracle.row_bounds,
                                           scale=oracle.scale)
        else:
            for t in range(1, T + 1):
                G = oracle(U, t - 1)
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
            payloads.append(c.upload(c.y, message.y)[0])
        return payloads
