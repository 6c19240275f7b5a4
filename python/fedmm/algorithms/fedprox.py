# SPDX-License-Identifier: BSD-3-Clause
r"""FedProx (Li et al. 2020, "Federated Optimization in Heterogeneous Networks", MLSys, Algorithm 2).

FedAvg whose clients minimize the *proximal* local objective

.. math::

    h_i(u; x) = f_i(u) + \frac{μ}{2}\,\lVert u − x\rVert^2

from the server point :math:`x` instead of :math:`f_i` alone: the term keeps
the local iterates of heterogeneous clients near :math:`x` (``mu = 0`` is
FedAvg).  The local solver is the family's: :math:`T_k` (minibatch)
subgradient steps :math:`u \leftarrow u − η_k (\hat g_i(u) + μ(u − x))`, the
inexact minimizer of :math:`h_i` that Li et al. allow (their γ-inexactness).

This file is the algorithm recipe of ``docs/extending.md``: an algorithm of the
non-smooth family is its hooks (a message, a server's ``broadcast``, a client's
``step_many`` and the front-end's party classes and ``server_options``); selection,
compression, the fault policy, checkpoints, Ray and Flower come from
:class:`~fedmm.algorithms.FederatedAlgorithm` and the family's parties.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fedmm.algorithms.base import Real
from fedmm.algorithms.nonsmooth import FedAvg, FedAvgClient, FedAvgMessage, FedAvgServer, ShareOracle
from fedmm.models.nonsmooth import NonsmoothProblem

__all__ = ["FedProx", "FedProxServer", "FedProxClient", "FedProxMessage"]


class FedProxMessage(FedAvgMessage):
    """FedProx server → clients in round ``k``: FedAvg's ``x``, ``T_k``, ``η_k`` and the proximal weight ``μ``."""

    __slots__ = ("mu",)
    scalar_fields = ("local_steps", "step", "mu")

    def __init__(self, x: np.ndarray, local_steps: int, step: float, mu: float) -> None:
        super().__init__(x, local_steps, step)
        self.mu = mu


class FedProxServer(FedAvgServer):
    """FedAvg's server (selection, decoding, the mean of the clients that answered) that also broadcasts ``μ``."""

    def __init__(self, *args: Any, mu: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mu = mu

    def broadcast(self, t: int) -> FedProxMessage:
        """Round ``k = t + 1``: ``x``, ``T_k``, ``η_k`` and ``μ``."""
        message = super().broadcast(t)
        return FedProxMessage(message.x, message.local_steps, message.step, self.mu)


class FedProxClient(FedAvgClient):
    r"""A FedProx client: :math:`T_k` steps :math:`u \leftarrow u − η_k(\hat g_i(u) + μ(u − x))` from ``x``."""

    @staticmethod
    def step_many(clients: Sequence[FedAvgClient], message: FedProxMessage) -> list[bytes]:
        """The round for a share of clients (one vectorized oracle call per local step)."""
        oracle = ShareOracle(clients, message.local_steps)
        x = message.x
        U = np.tile(x, (len(clients), 1))
        for s in range(message.local_steps):
            U -= message.step * (oracle(U, s) + message.mu * (U - x))
        return [client.upload(U[j], x)[0] for j, client in enumerate(clients)]


class FedProx(FedAvg):
    r"""FedProx: federated averaging of clients that minimize :math:`f_i(u) + \frac{μ}{2}\lVert u − x\rVert^2`.

    Round :math:`k = t + 1`: the server selects :math:`S_k` (Li et al. sample
    ``clients_per_round`` devices; all of them by default), each starts from
    :math:`x` and takes :math:`T_k` steps
    :math:`u \leftarrow u − η_k(\hat g_i(u) + μ(u − x))`, and the server sets
    :math:`x \leftarrow \frac{1}{|R_k|}\sum_{i \in R_k} \hat u_i` over the clients
    :math:`R_k \subseteq S_k` that answered.  ``mu = 0`` is :class:`FedAvg`, bit
    for bit.

    Parameters
    ----------
    model : NonsmoothProblem
    mu : float >= 0
        The proximal weight :math:`μ` (Li et al. tune it in {0.001, 0.01, 0.1, 1}).
    local_lr, local_steps, clients_per_round, participation_prob, compressor, oracle, batch_size, n_threads, batched
        As :class:`FedAvg`.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.models.nonsmooth import HingeSVM
    >>> rng = np.random.default_rng(0)
    >>> datas = [(rng.normal(size=(20, 2)), rng.choice([-1.0, 1.0], 20)) for _ in range(3)]
    >>> h = FedProx(HingeSVM(), mu=0.1, local_lr=0.01).run(datas, 5, seed=0)
    >>> h.config["mu"], len(h)
    (0.1, 5)
    """

    name = "FedProx"
    server_class = FedProxServer
    client_class = FedProxClient
    parameter_constraints = {**FedAvg.parameter_constraints, "mu": Real(low=0.0, high=1e300)}

    def __init__(self, model: NonsmoothProblem, *, local_lr: Any, mu: float = 0.01, local_steps: Any = ("linear", 1),
                 clients_per_round: int | None = None, participation_prob: float | None = None,
                 compressor: Any = None, oracle: str = "minibatch", batch_size: float | int = 0.1,
                 n_threads: int = 1, batched: bool = True) -> None:
        super().__init__(model, local_lr=local_lr, local_steps=local_steps, clients_per_round=clients_per_round,
                         participation_prob=participation_prob, compressor=compressor, oracle=oracle,
                         batch_size=batch_size, n_threads=n_threads, batched=batched)
        self.set_parameters(mu=mu)

    def config(self) -> dict:
        return {**super().config(), "mu": self.mu}

    def server_options(self) -> dict[str, Any]:
        """:class:`FedProxServer`'s ``mu``."""
        return {"mu": self.mu}

    def message_class(self) -> type:
        """:class:`FedProxMessage` (what Flower rebuilds from arrays)."""
        return FedProxMessage
