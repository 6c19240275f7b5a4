# SPDX-License-Identifier: BSD-3-Clause
"""The round mechanics every algorithm family shares: client selection, payload decoding and validation,
the weighted aggregation, the fault policy and the control-variate step.

An algorithm's server supplies only its hooks (how one client's payload becomes a row of numbers, what
the server does with the aggregate); the pieces here are what the FedMM server
(:class:`fedmm.algorithms.Server`), the subgradient family's servers (FedMLS, FedAvg, Scaffold, Scaffnew,
FedProx) and the optimal-transport servers (FedMM-OT, FedAdam) have in common, written once:

- :class:`ClientSelection`: who is contacted at round ``t`` — ``clients_per_round`` clients uniformly without
  replacement, or each client with probability ``participation_prob`` (independent Bernoulli coins); in
  Algorithm 4's ``'compress'`` mode the same draw becomes the server's coins and every client is contacted.
  Round ``t``'s draw is the first draw of the server's stream ``Philox(key, counter=(0, t, 0, 0))``, the
  stream the compiled engine (``fedmm_server_select`` in ``engine.c``) draws from: the same clients on every
  backend and runtime, and nothing to checkpoint.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from fedmm import kernels
from fedmm._validation import check_in, check_int

__all__ = ["ClientSelection", "RoundSelection", "SELECTION_MODES"]

#: Who draws the participation: ``'select'`` (the server contacts the drawn clients: Algorithm 2, FedAvg,
#: Scaffold, Algorithm 3), ``'compress'`` (the draw is the server's coins, every client is contacted:
#: Algorithm 4) and ``'compress-local'`` (every client is contacted and draws its own coin: Algorithm 4).
SELECTION_MODES = ("select", "compress", "compress-local")


class RoundSelection(NamedTuple):
    """The outcome of :meth:`ClientSelection.draw` for one round.

    Attributes
    ----------
    ids : list of int
        The contacted clients, increasing.
    coins : ndarray of shape (n_clients,), bool, or None
        The server's coins in ``'compress'`` mode (client ``i`` sends a message iff ``coins[i]``); None
        otherwise.
    """

    ids: list[int]
    coins: np.ndarray | None


class ClientSelection:
    r"""Which clients round ``t`` contacts, as a pure function of the server's key and ``t``.

    Parameters
    ----------
    n_clients : int >= 1
        :math:`n`.
    clients_per_round : int in [0, n_clients] or None
        Draw this many clients uniformly without replacement
        (:func:`fedmm.kernels.philox_sample_without_replacement`), returned in increasing order.
    participation_prob : float in (0, 1]
        Without ``clients_per_round``: client :math:`i` takes part iff :math:`u_i < p` for the
        stream's first :math:`n` uniform doubles :math:`u_0, \dots, u_{n-1}` (independent
        Bernoulli(:math:`p`) coins; :math:`p = 1` contacts every client and draws nothing).
    key : array_like of 2 uint64, optional
        The server stream's 128-bit Philox key (:attr:`fedmm.algorithms.RoundStream.key`).  Needed
        unless every client takes part in every round.
    mode : {'select', 'compress', 'compress-local'}
        See :data:`SELECTION_MODES`.

    Examples
    --------
    >>> import numpy as np
    >>> selection = ClientSelection(10, clients_per_round=3, key=np.array([1, 2], dtype=np.uint64))
    >>> ids = selection.select(0)
    >>> len(ids), ids == sorted(ids), ids == selection.select(0)
    (3, True, True)
    >>> ClientSelection(4).select(7)
    [0, 1, 2, 3]
    """

    def __init__(self, n_clients: int, *, clients_per_round: int | None = None, participation_prob: float = 1.0,
                 key: Any = None, mode: str = "select") -> None:
        self.n_clients = check_int(n_clients, "n_clients", low=1)
        if clients_per_round is not None:
            clients_per_round = check_int(clients_per_round, "clients_per_round", low=0)
            if clients_per_round > self.n_clients:
                raise ValueError(f"Expected 'clients_per_round' <= n_clients = {self.n_clients}, "
                                 f"got {clients_per_round}")
        self.clients_per_round = clients_per_round
        if isinstance(participation_prob, bool) or not isinstance(participation_prob, (int, float, np.floating)):
            raise TypeError(f"Expected 'participation_prob' to be a float in (0, 1], got {participation_prob!r}")
        self.participation_prob = float(participation_prob)
        if not 0.0 < self.participation_prob <= 1.0:
            raise ValueError(f"Expected 'participation_prob' in (0, 1], got {participation_prob!r}")
        self.mode = check_in(mode, "mode", SELECTION_MODES)
        self.draws = mode != "compress-local" and (clients_per_round is not None or self.participation_prob < 1.0)
        if key is None:
            if self.draws:
                raise ValueError("Expected the server stream's 'key' with partial participation "
                                 "(clients_per_round or participation_prob < 1)")
            self.key = None
        else:
            key = np.array(key, dtype=np.uint64, copy=True)
            if key.shape != (2,):
                raise ValueError(f"Expected 'key' to be 2 uint64 (a 128-bit Philox key), got shape {key.shape}")
            key.flags.writeable = False
            self.key = key
        self._generator: np.random.Generator | None = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_generator"] = None  # rebuilt at the first Bernoulli draw
        return state

    def __repr__(self) -> str:
        return (f"ClientSelection({self.n_clients}, clients_per_round={self.clients_per_round}, "
                f"participation_prob={self.participation_prob}, mode={self.mode!r})")

    def uniforms(self, t: int) -> np.ndarray:
        """The first ``n_clients`` uniform doubles of round ``t``'s stream (what the Bernoulli coins compare
        with ``participation_prob``)."""
        if self.key is None:
            raise ValueError("Expected the server stream's 'key' to draw round uniforms")
        if self._generator is None:
            self._generator = np.random.Generator(np.random.Philox(key=self.key))
        bitgen = self._generator.bit_generator
        state = bitgen.state
        state["state"]["counter"] = np.array([0, t, 0, 0], dtype=np.uint64)
        state["buffer_pos"], state["has_uint32"], state["uinteger"] = 4, 0, 0
        bitgen.state = state
        return self._generator.random(self.n_clients)

    def coins(self, t: int) -> np.ndarray:
        """Round ``t``'s participation coins, one bool per client (the drawn clients are True)."""
        n = self.n_clients
        if not self.draws:
            return np.ones(n, dtype=np.bool_)
        if self.clients_per_round is None:
            return self.uniforms(t) < self.participation_prob
        coins = np.zeros(n, dtype=np.bool_)
        coins[kernels.philox_sample_without_replacement(self.key, t, n, self.clients_per_round)] = True
        return coins

    def draw(self, t: int) -> RoundSelection:
        """Round ``t``'s contacted clients and, in ``'compress'`` mode, the server's coins.

        Parameters
        ----------
        t : int >= 0
            The round.

        Returns
        -------
        RoundSelection
        """
        everyone = list(range(self.n_clients))
        if self.mode == "compress-local":
            return RoundSelection(everyone, None)
        if self.mode == "compress":
            return RoundSelection(everyone, self.coins(t))
        if not self.draws:
            return RoundSelection(everyone, None)
        if self.clients_per_round is None:
            return RoundSelection(np.flatnonzero(self.uniforms(t) < self.participation_prob).tolist(), None)
        drawn = kernels.philox_sample_without_replacement(self.key, t, self.n_clients, self.clients_per_round)
        return RoundSelection(sorted(drawn.tolist()), None)

    def select(self, t: int) -> list[int]:
        """The clients contacted at round ``t``, increasing (:meth:`draw`'s ``ids``)."""
        return self.draw(t).ids
