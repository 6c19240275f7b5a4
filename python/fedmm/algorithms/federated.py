# SPDX-License-Identifier: BSD-3-Clause
"""FedMM (FedMM paper, Algorithms 2 and 4) and the Θ-space baseline, as Server and Client objects.

The mathematics of one round is split between a :class:`Server` (holds
``Ŝ_t``, the aggregated control variate ``V_t``, the step schedule, ``T`` and
``Π``) and :class:`Client` objects (private data, control variate ``V_{t,i}``,
own random stream).  They exchange only messages: a :class:`Broadcast` of
arrays down, and compressed ``bytes`` up.  A runtime (``fedmm.runtime``) moves
those messages; nothing here depends on which runtime is used.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from fedmm import kernels
from fedmm._validation import check_in, check_int, check_participation
from fedmm.federation import (LocalRuntime, compiled_rounds, compiled_start_statistics, compiled_unsupported,
                          record_initial)
from fedmm.federation.checkpoint import data_digest
from fedmm.federation.compiled import CompiledRounds, client_unsupported, compiled_statistics
from fedmm.federation.state import ClientState, RoundConfig, ServerState
from fedmm.federation.local import CLIENT_ERROR_POLICIES, record_start_drops
from fedmm.federation.metrics import squared_distance, step_record, update_size
# MAX_STEP_RETRIES: retries of a failed server step (Server.step_without_failing_messages); re-exported
from fedmm.federation.skeleton import MAX_STEP_RETRIES  # noqa: F401
from fedmm.federation.skeleton import (ClientSelection, check_message, control_variate_update, decode_payloads,
                                      guarded_step, step_without_failing_messages, weighted_aggregate)
from fedmm.algorithms._monitor import Cadence
from fedmm.algorithms.base import FederatedAlgorithm, Integer, Options, Rule, StopRun
from fedmm.algorithms._oracle import LocalOracle, check_oracle_args
from fedmm.algorithms._random import (
    CLIENT_PARTY,
    SERVER_PARTY,
    RoundStream,
    check_seed,
    init_generator,
    party_keys,
    party_seed,
)
from fedmm.algorithms._schedule import StepSchedule
from fedmm.algorithms._setup import (
    check_control_variate_step,
    check_compressor,
    check_datas_list,
    check_weights,
    checked_compressors,
    client_compressor,
    normalized_weights,
    participation,
)
from fedmm.compression import Identity
from fedmm.history import History
from fedmm.protocols import SupportsGlobalMoments
from fedmm.models.base import SurrogateModel

logger = logging.getLogger(__name__)

__all__ = ["Broadcast", "Client", "Server", "FedMM", "ParameterAveraging", "StopRun", "BACKENDS", "STARTS",
           "CONTROL_VARIATE_CONVENTIONS", "theta_structure", "theta_template"]

#: Where clients send their updates: FedMM aggregates statistics, the baseline parameters.
SPACES = ("statistic", "parameter")
#: How partial participation is realized (FedMM paper, Appendix D.2).
PARTICIPATION_MODES = ("select", "compress", "compress-local")
#: Which backend runs the rounds: the compiled one when the model and compressors support it.
BACKENDS = ("auto", "python", "compiled")
#: Where the run starts when no ``init`` is given (see :class:`FedMM`, parameter ``start``).
STARTS = ("mean_statistic", "model")
#: How ``control_variate_step`` enters the control-variate updates: FedMM's ``α/p`` or FedEM's ``α``
#: (see :class:`FedMM`).
CONTROL_VARIATE_CONVENTIONS = ("fedmm", "fedem")


#: The set-up exchanges send V_{0,i} and the start statistics uncompressed, in the Identity wire format,
#: whatever the compressors.
_SETUP_CODEC = Identity()
#: Round index of the start broadcast (``start='mean_statistic'``), before the set-up broadcast (``-1``).
START_ROUND = -2


def _beyond(x: np.ndarray, bound: float) -> bool:
    """Whether ``x`` holds a NaN, an infinity or an entry beyond ``bound`` in magnitude (one pass)."""
    largest = float(np.max(np.abs(x))) if x.size else 0.0
    return not (math.isfinite(largest) and largest <= bound)


# --------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class Broadcast:
    """The server's message of round ``t`` (arrays only).

    Attributes
    ----------
    t : int
        Round index (``-1`` for the set-up message).
    statistic : ndarray of shape (q,) or None
        ``Ŝ_t`` (FedMM); None for the Θ-space baseline.
    theta : parameter
        ``θ_t = T(Ŝ_t)`` in the model's format.
    theta_vector : ndarray of shape (d,)
        ``θ_t`` flattened by ``model.theta_vector``.
    coins : ndarray of shape (n,), bool, or None
        Algorithm 4 with server-drawn coins: ``U_{t+1,i}`` for every client.
    """

    t: int
    statistic: np.ndarray | None
    theta: Any
    theta_vector: np.ndarray
    coins: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        """Bytes one client receives (``Ŝ_t`` and ``θ_t`` as float64, its coin as one byte)."""
        size = self.theta_vector.nbytes
        if self.statistic is not None:
            size += self.statistic.nbytes
        return size + (1 if self.coins is not None else 0)

    def to_arrays(self) -> list[np.ndarray]:
        """``[t, Ŝ_t or empty, θ_t flat, coins or empty]`` for array-based transports."""
        empty = np.zeros(0, dtype=np.float64)
        return [
            np.array([self.t], dtype=np.int64),
            empty if self.statistic is None else self.statistic,
            self.theta_vector,
            np.zeros(0, dtype=np.bool_) if self.coins is None else self.coins,
        ]

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray], model: SurrogateModel, like_theta: Any) -> "Broadcast":
        """Inverse of :meth:`to_arrays`; ``like_theta`` gives the parameter's structure."""
        if len(arrays) != 4:
            raise ValueError(f"Expected 4 arrays in a broadcast, got {len(arrays)}")
        t_arr, stat, theta_vec, coins = (np.asarray(a) for a in arrays)
        if t_arr.shape != (1,):
            raise ValueError(f"Expected the round index as an array of shape (1,), got {t_arr.shape}")
        theta_vec = np.asarray(theta_vec, dtype=np.float64)
        return cls(
            t=int(t_arr[0]),
            statistic=None if stat.size == 0 else model.layout.check(np.asarray(stat, dtype=np.float64), "statistic"),
            theta=model.theta_from_vector(theta_vec, like_theta),
            theta_vector=theta_vec,
            coins=None if coins.size == 0 else np.asarray(coins, dtype=np.bool_),
        )


# --------------------------------------------------------------------------- client
class Client:
    """One FedMM worker (Algorithm 2 lines 5-11, Algorithm 4 lines 4-8).

    Parameters
    ----------
    index : int
        Client number ``i``.
    data : client data, already validated by ``model.check_data``
    model : SurrogateModel
    space : {'statistic', 'parameter'}
        FedMM sends ``Quant(S_{t+1,i} − Ŝ_t − V_{t,i})``; the Θ-space
        baseline sends ``Quant(θ(S_{t+1,i}) − θ_t − V_{t,i})`` with
        ``θ(S) = T(S)`` computed locally.
    compressor : compressor of ``fedmm.compression``
    control_variate_step : float >= 0
        Control-variate step ``α``.
    p : float in (0, 1]
        Participation probability (``m/n`` for a fixed count ``m``).
    mode : {'select', 'compress', 'compress-local'}
        ``'select'``: Algorithm 2, the server selects the active clients.
        ``'compress'``: Algorithm 4, every client computes its oracle and its
        message is ``(U/p) Quant(Δ)`` with the coin ``U`` drawn by the server
        (the same coins as Algorithm 2's selection, so the two are coupled).
        ``'compress-local'``: Algorithm 4 with ``U ~ Bernoulli(p)`` drawn by the
        client from its own stream (same law, independent randomness).
        A zero message (``U = 0``) is sent as empty bytes.
    oracle, batch_size, k_in
        See :class:`fedmm.algorithms._oracle.LocalOracle`.
    seed : int or SeedSequence
        Run seed; the client's stream at round ``t`` is ``Philox(key_i, t)``.
    control_variates : {'zero', 'oracle'}
        Initial ``V_{0,i}`` (see :meth:`setup`).
    stream : RoundStream, optional
        The client's round stream when the caller derived it with the
        others (:meth:`FedMM.build` derives every client's Philox key at
        once), holding the key of ``RoundStream(party_seed(seed, 1,
        index))``.  None derives it from ``seed``.

    Notes
    -----
    Protocol: :meth:`setup` once with the server's set-up broadcast, then
    :meth:`step` for every round in which the client is contacted.
    """

    def __init__(self, index: int, data: Any, model: SurrogateModel, *, space: str, compressor: Any,
                 control_variate_step: float, p: float, mode: str, oracle: str, batch_size: int | None,
                 k_in: int | None, seed: int | np.random.SeedSequence, control_variates: str = "zero",
                 stream: RoundStream | None = None) -> None:
        self.index = int(index)
        self.control_variates = control_variates
        self.data = data
        self.model = model
        self.space = space
        self.compressor = compressor
        self.control_variate_step = float(control_variate_step)
        self.p = float(p)
        self.mode = mode
        self.oracle = LocalOracle(model, data, oracle, batch_size, k_in)
        self.stream = RoundStream(party_seed(seed, CLIENT_PARTY, index)) if stream is None else stream
        self.V: np.ndarray | None = None  # V_{t,i}, set by setup()
        self.theta_like: Any = None  # θ_0 of the set-up broadcast (the parameter's structure)
        self._state: ClientState | None = None  # the last state imported or exported (export_state reuses it)

    # -- set-up -------------------------------------------------------------
    def _local_value(self, S: np.ndarray) -> np.ndarray:
        """What the client reports: the statistic (FedMM) or its parameter ``T(S)`` (baseline)."""
        if self.space == "statistic":
            return S
        # θ_{t+1,i} = T(S_{t+1,i}); Π is the identity on plain oracles, but a SPIDER estimate may leave 𝒮.
        return self.model.theta_vector(self.model.T(self.model.project(S)))

    @staticmethod
    def _reference(message: Broadcast, space: str) -> np.ndarray:
        return message.statistic if space == "statistic" else message.theta_vector

    def setup(self, message: Broadcast) -> bytes:
        """Initialise ``V_{0,i}`` from the set-up broadcast: zero, or ``h_i(Ŝ_0)`` (FedMM paper, after Theorem 1).

        ``control_variates='oracle'`` computes ``E_{π_i}[S̄(Z, θ_0)] − Ŝ_0`` on
        the full local data (its parameter-space analogue for the baseline)
        and returns it uncompressed (``Identity`` wire format), so that the
        server's ``V_0 = Σ μ_i V_{0,i}`` is exact.  Returns empty bytes for ``'zero'``.
        """
        ref = self._reference(message, self.space)
        self.theta_like = message.theta  # the parameter's structure, for import_state
        if self.control_variates == "zero":
            self.V = np.zeros_like(ref)
            return b""
        full = self.oracle.statistic(message.theta, None)
        self.V = self._local_value(full) - ref
        return _SETUP_CODEC.encode(self.V, None)

    def start_statistic(self, message: Broadcast) -> bytes:
        """The client's full local statistic ``s̄_i(θ_0) = E_{π_i}[S̄(Z, θ_0)]`` at the start broadcast's ``θ_0``.

        One uncompressed pass over the local data (``Identity`` wire
        format, whatever the compressor); the server averages these into
        ``Ŝ_0 = Π(Σ_i μ_i s̄_i(θ_0))`` (:meth:`Server.mean_statistic`).  The
        client's state is not touched: neither its control variate and random
        stream, nor a model's per-sample memory (the statistic is computed
        without it, e.g. dictionary learning's LASSO codes start cold: codes
        at ``θ_0`` would be a poor warm start for the rounds' first visits).
        """
        return self.start_payload(self.model.statistic(self.data, message.theta, None))

    @staticmethod
    def start_payload(full: np.ndarray) -> bytes:
        """The :meth:`start_statistic` payload of a full local statistic (``Identity`` wire format)."""
        return _SETUP_CODEC.encode(np.asarray(full, dtype=np.float64), None)

    # -- state as data ------------------------------------------------------------
    def export_state(self) -> ClientState:
        """The client's mutable state as a :class:`fedmm.federation.ClientState` value: ``V`` and the
        oracle's memory (its ``to_arrays()`` for code that wants arrays, ``ClientState.from_arrays`` back).

        Together with the constructor arguments this is all a client carries between rounds, so
        ``import_state(export_state())`` on a fresh client built with the same seed continues the run
        bit for bit.

        Arrays the client may still change are copied; read-only ones (those of a state it
        imported and has not changed since) are shared, so exporting after :meth:`import_state`
        costs no copy.
        """
        oracle = self.oracle
        memory = {} if oracle.memory is None else oracle.memory
        if oracle.kind != "spider":
            # the state last imported or exported, while the client holds its very (read-only) arrays: the
            # client replaces V and copies a memory array before writing into it, so the values are the same
            last = self._state
            if (last is not None and last.V is self.V and len(last.memory) == len(memory)
                    and all(memory.get(k) is v for k, v in last.memory.items())):
                return last
            self._state = state = ClientState(V=self.V, memory=memory)
            return state
        arrays = oracle.get_state(copy=False)
        if "spider_S" not in arrays:
            return ClientState(V=self.V, memory=memory)
        return ClientState(V=self.V, memory=memory, spider_S=arrays["spider_S"], spider_theta=arrays["spider_theta"],
                           spider_epoch=int(arrays["spider_epoch"][0]))

    def import_state(self, state: ClientState, like_theta: Any = None) -> None:
        """Continue from ``state`` (a :meth:`export_state` value, possibly of another client object built
        alike, or what :func:`fedmm.federation.compiled_rounds` returns).

        The client takes the state's arrays as they are (read-only: its control variate is replaced,
        never written in place, and the oracle copies a memory array before the model writes into
        it).  ``state.V = None`` leaves the control variate as it is.  ``like_theta``: a parameter
        giving the model's structure (default the set-up broadcast's ``θ_0``).
        """
        if not isinstance(state, ClientState):
            raise TypeError(f"Expected 'state' to be a fedmm.federation.ClientState, got {type(state).__name__}")
        if state.V is not None:
            self.V = state.V
        oracle = self.oracle
        if oracle.kind == "spider":
            oracle.set_state(state.to_arrays(), self.theta_like if like_theta is None else like_theta, copy=False)
        elif oracle.memory is not None:
            oracle.memory.clear()
            oracle.memory.update(state.memory)
        self._state = state

    # -- one round ----------------------------------------------------------
    def _begin(self, message: Broadcast) -> tuple[np.random.Generator, bool, np.ndarray | None, bool]:
        rng = self.stream.at(message.t)
        if self.mode == "compress-local":
            coin = bool(rng.random() < self.p)
        elif self.mode == "compress":
            coin = bool(message.coins[self.index])
        else:
            coin = True
        idx, refresh = self.oracle.plan(message.t, rng)
        return rng, coin, idx, refresh

    def _delta(self, message: Broadcast, idx: np.ndarray | None, refresh: bool, stat: np.ndarray,
               out: np.ndarray | None = None) -> np.ndarray:
        """``Δ = S_{t+1,i} − Ŝ_t − V_{t,i}`` (its parameter-space analogue for the baseline), into ``out``."""
        S = self.oracle.finish(message.t, message.theta, idx, refresh, stat)
        delta = np.subtract(self._local_value(S), self._reference(message, self.space), out=out)
        return np.subtract(delta, self.V, out=delta)

    def _update_control_variate(self, values: np.ndarray | None) -> None:
        if self.control_variate_step:
            # V_{t+1,i} = V_{t,i} + (α U / p) Quant(Δ), with U = 1 here.
            self.V = self.V + self.control_variate_step / self.p * values

    def _finish(self, message: Broadcast, rng: np.random.Generator, coin: bool, idx: np.ndarray | None,
                refresh: bool, stat: np.ndarray) -> bytes:
        delta = self._delta(message, idx, refresh, stat)
        if not coin:
            return b""  # Quant~ = (U/p) Quant(Δ) = 0: nothing to send, V unchanged
        payload = self.compressor.encode(delta, rng)
        # V_{t+1,i} uses the values the server will decode from the payload
        self._update_control_variate(self.compressor.decode(payload) if self.control_variate_step else None)
        return payload

    def step(self, message: Broadcast) -> bytes:
        """Run the client's part of round ``message.t`` and return its encoded message."""
        rng, coin, idx, refresh = self._begin(message)
        stat = self.oracle.statistic(message.theta, idx)
        return self._finish(message, rng, coin, idx, refresh, stat)


#: The start exchange's answer as :class:`Client` defines it (the compiled start pass computes the same).
_START_STATISTIC = Client.start_statistic


# --------------------------------------------------------------------------- server
class Server:
    """The FedMM server (Algorithm 2 lines 1-4 and 13-17; Algorithm 4 lines 10-13).

    Parameters
    ----------
    model : SurrogateModel
    n_clients : int
    weights : ndarray of shape (n,)
        ``μ_i`` (non-negative, summing to one).
    p : float in (0, 1]
        Participation probability used to unbias the aggregate.
    count : int or None
        Fixed number of active clients per round (uniform without
        replacement, ``p = count/n``); None for independent Bernoulli(p) (A5).
    schedule : StepSchedule
    control_variate_step : float
    projection : {'euclidean', None}
    space : {'statistic', 'parameter'}
    mode : {'select', 'compress', 'compress-local'}
    init : ndarray of shape (q,)
        Initial statistic ``Ŝ_0`` (the baseline starts from ``θ_0 = T(Ŝ_0)``).
    seed : int or SeedSequence
    decoders : sequence of n compressors
        Client ``i``'s payloads are decoded by ``decoders[i]`` (its own compressor).
    """

    #: Stretches of rounds run compiled (:meth:`simulate_rounds`; :class:`fedmm.protocols.CompiledRoundsServer`).
    supports_compiled_rounds = True

    def __init__(self, model: SurrogateModel, n_clients: int, *, weights: np.ndarray, p: float,
                 count: int | None, schedule: StepSchedule, control_variate_step: float, projection: str | None,
                 space: str, mode: str, init: np.ndarray, seed: int | np.random.SeedSequence,
                 decoders: Sequence[Any]) -> None:
        self.model = model
        self.n_clients = int(n_clients)
        self.weights = np.asarray(weights, dtype=np.float64)
        self.p = float(p)
        self.count = count
        self.schedule = schedule
        self.control_variate_step = float(control_variate_step)
        self.projection = projection
        self.space = space
        self.mode = mode
        bound = getattr(model, "statistic_bound", math.inf)
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not bound > 0:
            raise ValueError(f"Expected the model's 'statistic_bound' to be a number > 0 (inf: any finite value), "
                             f"got {bound!r}")
        #: The largest magnitude of an entry of a message, of ``H``, of ``Ŝ`` and of ``V`` the server accepts:
        #: the model's ``statistic_bound`` in S-space, ``inf`` (any finite value) for the Θ-space baseline.
        self.statistic_bound = float(bound) if space == "statistic" else math.inf
        self.decoders = list(decoders)
        if len(self.decoders) != self.n_clients:
            raise ValueError(f"Expected one decoder per client ({self.n_clients}), got {len(self.decoders)}")
        self.stream = RoundStream(party_seed(seed, SERVER_PARTY, 0))
        #: Who each round contacts (and, under Algorithm 4's ``'compress'`` mode, the server's coins).
        self.selection = ClientSelection(self.n_clients, clients_per_round=count,
                                         participation_prob=self.p if count is None else 1.0,
                                         key=self.stream.key, mode=mode)
        self.S: np.ndarray | None = np.array(init, dtype=np.float64, copy=True)
        self._init = self.S  # Ŝ_0 (the baseline keeps it only for start_message)
        self.theta = model.T(self.S)
        self._theta_like = self.theta
        self.theta_vector = model.theta_vector(self.theta)
        self.theta_vector_prev = self.theta_vector
        if space == "parameter":
            self.S = None  # the baseline holds only θ_t
        self.V = np.zeros(self._size)
        self._coins: np.ndarray | None = None
        # the compiled backend's inputs for one set of in-process clients, built once per run (_compiled_setup)
        self._compiled: tuple | None = None
        #: Clients left out of ``Ŝ_0`` by the start exchange (client → why), in increasing order; empty when
        #: every client answered or there was no start exchange (set by :meth:`FedMM.build`).
        self.start_drops: dict[int, str] = {}

    @property
    def _size(self) -> int:
        return self.model.layout.size if self.space == "statistic" else self.theta_vector.shape[0]

    # -- set-up -------------------------------------------------------------
    def setup_message(self) -> Broadcast:
        """The set-up broadcast (round ``-1``) carrying ``Ŝ_0`` and ``θ_0``."""
        return Broadcast(-1, None if self.S is None else self.S, self.theta, self.theta_vector)

    def start_message(self) -> Broadcast:
        """The start broadcast (round ``START_ROUND = -2``) carrying the provisional ``Ŝ_0`` and ``θ_0 = T(Ŝ_0)``.

        Sent before :meth:`setup_message` when the run starts from the mean
        statistic: every client answers with :meth:`Client.start_statistic`.
        """
        return Broadcast(START_ROUND, self._init, self.theta, self.theta_vector)

    def mean_statistic(self, payloads: dict[int, bytes],
                       on_invalid: Callable[[int, str], None] | None = None) -> np.ndarray:
        """``Π(Σ_i μ_i s̄_i(θ_0))`` from every client's :meth:`Client.start_statistic` payload.

        The sum runs over the clients in increasing index order whatever
        the order of ``payloads``, so every runtime gets the same bits.  The
        server's state does not change: build the run's server with this
        statistic as ``init``.

        Parameters
        ----------
        payloads : dict of int to bytes
            Client index → its start statistic.
        on_invalid : callable(i, reason), optional
            The ``'drop'`` fault policy: a payload that fails validation
            (malformed, wrong length, non-finite values or beyond
            :attr:`statistic_bound`) is left out after
            ``on_invalid(i, reason)`` is called, and clients absent from
            ``payloads`` are left out too (the caller knows why).  The mean
            is then re-weighted over the clients ``A`` that are left:
            ``Ŝ_0 = Π(Σ_{i∈A} μ_i s̄_i(θ_0) / Σ_{i∈A} μ_i)`` (the same bits as
            without the policy when every client answered).  Without it, a
            missing client or an invalid payload raises.

        Raises
        ------
        ValueError
            Without ``on_invalid``: a client is missing, or a payload has the
            wrong length or non-finite values.  With it: no client (of
            positive weight) is left.
        """
        if on_invalid is None:
            missing = sorted(set(range(self.n_clients)) - set(payloads))
            if missing:
                raise ValueError("The mean-statistic start needs every client's statistic; missing clients "
                                 f"{missing}")
        size = self.model.layout.size
        total = np.zeros(size, dtype=np.float64)
        used = []
        for i in range(self.n_clients):
            if i not in payloads:
                continue
            try:
                values = _SETUP_CODEC.decode(payloads[i])
                if values.shape != (size,):
                    raise ValueError(f"Client {i} sent a start statistic of length {values.shape}, "
                                     f"expected ({size},)")
                if _beyond(values, self.statistic_bound):
                    if not np.isfinite(values).all():
                        raise ValueError(f"Client {i} sent a start statistic with non-finite values")
                    raise ValueError(f"Client {i} sent a start statistic of magnitude up to "
                                     f"{float(np.max(np.abs(values))):.3g}, beyond the range of "
                                     f"{type(self.model).__name__}'s statistics (statistic_bound = "
                                     f"{self.statistic_bound:.3g})")
            except (ValueError, TypeError) as exc:
                if on_invalid is None:
                    raise
                on_invalid(i, str(exc))
                continue
            total += self.weights[i] * values
            used.append(i)
        if len(used) < self.n_clients:
            mass = float(self.weights[used].sum()) if used else 0.0
            if not mass > 0.0:
                raise ValueError(f"The mean-statistic start has no valid client statistic to average (clients "
                                 f"{used} of {self.n_clients}, total weight {mass})")
            total /= mass  # μ re-weighted over the clients that answered
        return np.asarray(self.model.project(total), dtype=np.float64)

    def setup_aggregate(self, payloads: dict[int, bytes]) -> None:
        """``V_0 = Σ μ_i V_{0,i}`` from the clients' uncompressed initial control variates."""
        V = np.zeros(self._size)
        for i in sorted(payloads):
            if payloads[i]:
                V += self.weights[i] * self._decode(i, payloads[i], _SETUP_CODEC)
        self.V = V

    # -- one round ----------------------------------------------------------
    def select(self, t: int) -> list[int]:
        """Clients contacted at round ``t``: the active set (Alg. 2) or everyone (Alg. 4), increasing
        (:class:`fedmm.federation.ClientSelection`, which also draws Algorithm 4's server coins)."""
        ids, self._coins = self.selection.draw(t)
        return ids

    def broadcast(self, t: int) -> Broadcast:
        """``(Ŝ_t, T(Ŝ_t))`` (line 4); call after :meth:`select` of the same round."""
        return Broadcast(t, self.S, self.theta, self.theta_vector, self._coins)

    @property
    def broadcast_nbytes(self) -> int:
        """Bytes one contacted client receives per round (``Ŝ_t``, ``θ_t`` and, in Algorithm 4 with
        server-drawn coins, its coin)."""
        size = self.theta_vector.nbytes + (0 if self.S is None else self.S.nbytes)
        return size + (1 if self.mode == "compress" else 0)

    def __getstate__(self) -> dict:
        # pickled without the compiled backend's cache (a compiled model, the client objects): rebuilt on use
        state = self.__dict__.copy()
        state["_compiled"] = None
        return state

    # -- the compiled backend (values in, values out) ------------------------------
    def _compiled_setup(self, clients: Sequence[Client]) -> tuple:
        """``(reason, config, compiled model, compiled datas)`` for these in-process clients, built at the
        first call of a run and kept while the same client objects come back (nothing in it changes over
        the rounds: :meth:`import_state` does not touch it)."""
        cached = self._compiled
        if cached is not None and len(cached[0]) == len(clients) and all(a is b for a, b in zip(cached[0], clients)):
            return cached[1]
        setup = self._build_compiled_setup(clients)
        self._compiled = (tuple(clients), setup)
        return setup

    def adopt_compiled_setup(self, other: Server) -> None:
        """Take the compiled backend's inputs ``other`` built for its clients (the round configuration,
        compiled model and data, none of which depends on ``Ŝ_0`` or on any other state), for a server of
        the same configuration: :meth:`FedMM.build` passes the start exchange's server to the rounds' one."""
        self._compiled = other.compiled_setup

    @property
    def compiled_setup(self) -> tuple | None:
        """``(clients, (reason, config, compiled model, compiled datas))`` as built by the first compiled call
        of a run (None before it); see :meth:`adopt_compiled_setup`."""
        return self._compiled

    def _build_compiled_setup(self, clients: Sequence[Client]) -> tuple:
        model = self.model
        n = self.n_clients
        in_order = len(clients) == n and all(c.index == i for i, c in enumerate(clients))
        config = self._make_round_config(clients) if in_order else None
        # before compiled_model(): building a compiled form costs (numba), and a bypassed override must be named
        overrides = model.compiled_overrides()
        if overrides:
            return (f"{type(model).__name__} overrides {', '.join(overrides)} in Python, which the compiled form it "
                    "inherits does not run (redefine compiled_model() too if it does)"), config, None, None
        compiled = model.compiled_model()
        if compiled is None:
            return (f"{type(model).__name__} has no compiled form in this configuration (compiled_model() is None)",
                    config, None, None)
        if not in_order:
            return "the server does not hold every client in index order (a distributed runtime)", None, None, None
        if self.projection not in ("euclidean", None):
            return f"projection={self.projection!r}", config, None, None
        for c in clients:
            reason = client_unsupported(config, c.index)
            if reason is not None:
                return reason, config, None, None
            if (c.space != self.space or c.mode != self.mode or c.p != self.p
                    or c.control_variate_step != self.control_variate_step or c.model is not model
                    or c.oracle.kind != config.oracle):
                return f"client {c.index} is configured differently from the server", config, None, None
            if config.quantizers[c.index, 0] < 0:
                return (f"client {c.index}'s compressor {c.compressor!r} has no compiled quantizer (quantizer_spec)",
                        config, None, None)
        memory_key = None
        if compiled.memory_size and clients[0].oracle.memory is not None:
            # the entry compiled_memory keeps in a client's memory dict: found on a scratch dict, which it
            # must fill with the cold start (zeros) that compiled_rounds gives a client without memory
            scratch: dict = {}
            memory = model.compiled_memory(scratch, clients[0].data)
            if memory is not None:
                memory_key = next((k for k, v in scratch.items() if v is memory), None)
                if (memory_key is None or np.shape(memory) != (clients[0].oracle.n_samples, compiled.memory_size)
                        or np.any(memory)):
                    return (f"{type(model).__name__}.compiled_memory() does not create the zero memory of shape "
                            f"(n_samples, {compiled.memory_size}) in the client's memory dict"), config, None, None
                config = self._make_round_config(clients, memory_key)
        datas = [model.compiled_data(c.data) for c in clients]
        return None, config, compiled, datas

    def _make_round_config(self, clients: Sequence[Client], memory_key: str | None = None) -> RoundConfig:
        msg = self._size
        quantizers = np.full((len(clients), 4), -1, dtype=np.int64)
        payload_nbytes = np.empty(len(clients), dtype=np.int64)
        # (quantizer spec, payload size) of each distinct compressor object: one shared by every client is
        # asked once, not once per client
        known: dict[int, tuple[Any, int]] = {}
        for k, c in enumerate(clients):
            answer = known.get(id(c.compressor))
            if answer is None:
                spec = getattr(c.compressor, "quantizer_spec", None)  # a compressor written in Python has none
                answer = known[id(c.compressor)] = (None if spec is None else spec(msg),
                                                    int(c.compressor.payload_nbytes(msg)))
            if answer[0] is not None:
                quantizers[k] = answer[0]
            payload_nbytes[k] = answer[1]
        oracle = clients[0].oracle.kind
        return RoundConfig(
            space=self.space, mode=self.mode, oracle=oracle, project=self.projection == "euclidean",
            batch=max(c.oracle.batch_size or 1 for c in clients) if oracle == "minibatch" else 1,
            p=self.p, control_variate_step=self.control_variate_step, statistic_max=self.statistic_bound,
            n_clients=self.n_clients,
            count=-1 if self.count is None else int(self.count), weights=self.weights, message_size=msg,
            broadcast_nbytes=self.broadcast_nbytes, server_key=self.stream.key,
            client_keys=np.stack([c.stream.key for c in clients]),
            n_samples=np.array([c.oracle.n_samples for c in clients], dtype=np.int64), quantizers=quantizers,
            payload_nbytes=payload_nbytes,
            memory_key=memory_key)

    def round_config(self, clients: Sequence[Client]) -> RoundConfig:
        """The :class:`fedmm.federation.RoundConfig` of this server's rounds with its in-process ``clients``.

        Built once per run (the first call; later calls with the same client objects return it).

        Raises
        ------
        ValueError
            ``clients`` are not this server's ``n_clients`` clients in index order.
        """
        reason, config, _, _ = self._compiled_setup(clients)
        if config is None:
            raise ValueError(f"Expected 'clients' to be the server's {self.n_clients} clients in index order: {reason}")
        return config

    def compiled_unsupported(self, clients: Sequence[Client]) -> str | None:
        """Why the compiled backend cannot run rounds of this server with ``clients``, or None if it can
        (:class:`fedmm.protocols.CompiledRoundsServer`)."""
        reason, config, _, _ = self._compiled_setup(clients)
        if reason is not None:
            return reason
        msg = config.message_size
        for c in clients:
            if c.V is not None and np.shape(c.V) != (msg,):
                return f"client {c.index} has no control variate of length {msg} (set-up not run)"
        return None

    def compiled_start_statistics(self, clients: Sequence[Client], theta: Any, n_threads: int = 1,
                                  pool: Any = None) -> list[np.ndarray | None] | None:
        """The start exchange's full local statistics ``s̄_i(θ)`` of every client, in one compiled call.

        What :meth:`Client.start_statistic` computes, for all clients at once
        (:func:`fedmm.federation.compiled_statistics`); None, with nothing computed, when
        :meth:`compiled_unsupported` gives a reason.
        """
        if self.compiled_unsupported(clients) is not None:
            return None
        _, _, compiled, datas = self._compiled_setup(clients)
        theta_c = np.array(self.model.compiled_theta(theta, compiled), dtype=np.float64)
        return compiled_statistics(compiled, theta_c, datas, n_threads, pool)

    def simulate_rounds(self, clients: Sequence[Client], t0: int, n_rounds: int, n_threads: int = 1,
                        max_seconds: float = float("inf"), pool: Any = None) -> list[dict[str, Any]] | None:
        """Rounds ``t0, …, t0 + n_rounds − 1`` with all ``clients`` in this process, on the compiled backend.

        :meth:`select`, the contacted clients' :meth:`Client.step` and
        :meth:`aggregate` in one GIL-free call per stretch, with the numbers
        of the Python backend bit for bit: the server's and the clients'
        states (:meth:`export_state`, :meth:`Client.export_state`) go to
        :func:`fedmm.federation.compiled_rounds` with the run's
        :meth:`round_config`, and the states it returns are imported.
        Returns one dict per round run (``record``, ``active``,
        ``n_contacted``, ``bytes_up``, ``bytes_down``, ``seconds``; a last
        ``{"failed": ...}`` when a round failed), or None, with nothing
        changed, when the configuration has no compiled form
        (:meth:`compiled_unsupported` says why).  Fewer than
        ``n_rounds`` rounds (at least one) run when they take more than ``max_seconds``.
        The clients run on ``pool`` (a :class:`fedmm.kernels.WorkerPool` the
        caller keeps across stretches) when given, else on ``n_threads``
        threads started for this call.
        """
        if pool is not None and not isinstance(pool, kernels.WorkerPool):
            raise TypeError(f"Expected 'pool' to be a fedmm.kernels.WorkerPool or None, got {type(pool).__name__}")
        if n_rounds < 1 or any(c.V is None for c in clients) or self.compiled_unsupported(clients) is not None:
            return None
        _, config, compiled, datas = self._compiled[1]  # what compiled_unsupported just looked up
        model = self.model
        before = [c.export_state() for c in clients]
        done: CompiledRounds = compiled_rounds(
            config, self.export_state(), before, model=compiled, datas=datas,
            theta=model.compiled_theta(self.theta, compiled),
            gammas=np.array([self.schedule(t + 1) for t in range(t0, t0 + n_rounds)], dtype=np.float64), t0=t0,
            n_threads=n_threads, max_seconds=max_seconds, pool=pool)
        for c, old, state in zip(clients, before, done.client_states):
            if state is not old:  # a client the rounds did not contact keeps its state
                c.import_state(state)
        if done.completed:
            # the engine checked the new state (finite, within statistic_bound) as aggregate does: taken as it
            # is, in writable copies (S-space: θ = T(Ŝ) as the model's T builds it; Θ-space: θ rebuilt from its
            # vector, as aggregate does)
            new = done.server_state
            theta = model.theta_from_compiled(done.theta, self.theta) if self.space == "statistic" else None
            if new.S is not None:
                self.S = np.array(new.S)
            self.V, self.theta_vector, self.theta_vector_prev = (
                np.array(new.V), np.array(new.theta_vector), np.array(new.theta_vector_prev))
            self.theta = theta if theta is not None else model.theta_from_vector(self.theta_vector, self._theta_like)
            self._coins = None
        return list(done.rounds)

    # -- state as data ----------------------------------------------------------
    def export_state(self) -> ServerState:
        """The server's mutable state as a :class:`fedmm.federation.ServerState` value (read-only copies):
        ``S`` (S-space only), ``V``, ``theta_vector`` and ``theta_vector_prev``.

        With the constructor arguments (which fix the random streams: round ``t`` draws from counter
        ``t``) this is all the server carries between rounds: ``import_state(export_state())`` on a
        fresh server built alike continues the run bit for bit.  ``.to_arrays()`` gives its arrays,
        ``ServerState.from_arrays`` the value back.
        """
        return ServerState(V=self.V, theta_vector=self.theta_vector, theta_vector_prev=self.theta_vector_prev,
                           S=self.S)

    def import_state(self, state: ServerState, theta: Any = None) -> None:
        """Continue from ``state`` (validated: shapes, finite values, ``Ŝ`` in the model's layout);
        ``theta`` (the parameter in the model's structure, optional) saves rebuilding it from
        ``state.theta_vector``.  The server keeps writable copies of the state's arrays."""
        if not isinstance(state, ServerState):
            raise TypeError(f"Expected 'state' to be a fedmm.federation.ServerState, got {type(state).__name__}")
        d = self.theta_vector.shape[0]
        V = np.array(state.V, dtype=np.float64, copy=True)
        vec = np.array(state.theta_vector, dtype=np.float64, copy=True)
        prev = np.array(state.theta_vector_prev, dtype=np.float64, copy=True)
        if V.shape != (self._size,) or vec.shape != (d,) or prev.shape != (d,):
            raise ValueError(f"Expected 'V' of shape ({self._size},) and parameters of shape ({d},), got "
                             f"{V.shape}, {vec.shape}, {prev.shape}")
        if self.space == "statistic":
            if state.S is None:
                raise ValueError("Expected 'S' in the state of a FedMM server")
            S = np.array(self.model.layout.check(state.S, "S"), dtype=np.float64, copy=True)
            if not np.isfinite(S).all():
                raise ValueError("Expected a finite 'S'")
            self.S = S
        for name, arr in (("V", V), ("theta_vector", vec), ("theta_vector_prev", prev)):
            if not np.isfinite(arr).all():
                raise ValueError(f"Expected a finite '{name}'")
        self.V, self.theta_vector, self.theta_vector_prev = V, vec, prev
        self.theta = theta if theta is not None else self.model.theta_from_vector(vec, self._theta_like)
        self._coins = None

    def _decode(self, i: int, payload: bytes, codec: Any = None) -> np.ndarray:
        """The row hook of :func:`fedmm.federation.decode_payloads`: client ``i``'s payload decoded by its
        compressor (or ``codec``), checked by :func:`fedmm.federation.check_message` against
        :attr:`statistic_bound`."""
        values = (self.decoders[i] if codec is None else codec).decode(payload)
        return check_message(i, values, self._size, bound=self.statistic_bound, owner=type(self.model).__name__)

    def _must_send(self, i: int) -> bool:
        """Whether client ``i``'s message this round cannot be empty: it can only under Algorithm 4,
        with a coin drawn by the client or a server coin of 0 (:meth:`select`)."""
        if self.mode == "compress-local":
            return False
        if self.mode == "compress" and self._coins is not None:
            return bool(self._coins[i])
        return self.mode != "compress"

    def aggregate(self, t: int, payloads: dict[int, bytes],
                  on_invalid: Callable[[int, str], None] | None = None) -> dict[str, Any]:
        """Lines 13-17: ``H``, the SA step, the projection and ``V_{t+1}``, atomically.

        Empty payloads count as zero messages where Algorithm 4 sends nothing
        (``U = 0``: a coin the client drew, or a server coin that is 0); from
        a client that must send (Algorithm 2's active clients, a server coin
        of 1) an empty payload is an invalid message like a truncated one.
        Every payload is decoded and validated (length, finite values of
        magnitude at most :attr:`statistic_bound`, the model's) before the
        server's state changes: an invalid one raises ``ValueError`` naming
        the client, or, with ``on_invalid``, is left out of the aggregation
        (the client counts as dropped, Algorithm 2 lines 10-11) after
        ``on_invalid(i, reason)`` is called.  An absurd but finite message
        (``DictionaryLearning`` statistics of 1e300) is refused there like a
        non-finite one: let into the state, it may pass this round's ``T``
        and break the projection of a later round, where no message is at
        fault.

        The step itself is computed into temporaries and committed only when
        it succeeds: ``H = V_t + Σ_i (μ_i/p) Δ_i``, ``Ŝ_{t+1} = Π(Ŝ_t + γ H)``,
        ``θ_{t+1} = T(Ŝ_{t+1})`` and ``V_{t+1}`` must all be finite, ``H``,
        ``Ŝ_{t+1}`` and ``V_{t+1}`` within :attr:`statistic_bound` (messages
        within it can add up beyond it), and ``Π``/``T`` must not raise
        (``ValueError``, including ``numpy.linalg.LinAlgError``, or
        ``ArithmeticError``).  When it
        fails, the server's state is left exactly as it was and, without
        ``on_invalid``, a ``ValueError`` says why (the model's exception
        chained).  With ``on_invalid`` the round goes on without the messages
        that make it fail (:meth:`step_without_failing_messages`), each of
        their clients reported by ``on_invalid(i, reason)``; only a step that
        fails with no message at all (the server's own state or model is at
        fault) still raises.  The usual path costs nothing more: the
        retries run only after a failure.

        Returns the round's monitoring record (``gamma``, ``E_s``/``E_ps`` or
        ``E_p``; a value that overflows float64 is recorded as ``inf`` with a
        ``RuntimeWarning``, see :func:`fedmm.federation.metrics.update_size`).
        """
        gamma = self.schedule(t + 1)
        ids, rows = decode_payloads(t, payloads, self._decode, on_invalid=on_invalid, must_send=self._must_send)
        weights = [self.weights[i] for i in ids]
        step = guarded_step(t, lambda rows, weights: self.candidate_step(gamma, rows, weights), ids, rows, weights,
                            p=self.p, on_invalid=on_invalid)
        S_new, theta, theta_vector, V_new = step
        if self.space == "statistic":
            record = step_record(gamma, squared_distance(theta_vector, self.theta_vector),
                                 squared_distance(S_new, self.S))
            self.S = S_new
        else:
            record = step_record(gamma, squared_distance(theta_vector, self.theta_vector))
        self.theta_vector_prev = self.theta_vector
        self.theta, self.theta_vector, self.V = theta, theta_vector, V_new
        return record

    def candidate_step(self, gamma: float, rows: Sequence[np.ndarray],
                       weights: Sequence[float]) -> tuple[np.ndarray | None, Any, np.ndarray, np.ndarray]:
        """The server step from decoded messages, into new arrays; nothing of the server changes.

        With ``acc = Σ_k (weights[k]/p) rows[k]`` (accumulated in the order
        given, one compiled pass) and ``H = V_t + acc``: S-space
        ``Ŝ_{t+1} = Π(Ŝ_t + γ H)``, ``θ_{t+1} = T(Ŝ_{t+1})``; Θ-space
        ``θ_{t+1} = proj_Θ(θ_t + γ H)``; and ``V_{t+1} = V_t + α acc``.
        Returns ``(Ŝ_{t+1} or None, θ_{t+1}, its vector, V_{t+1})``.

        Raises
        ------
        ValueError
            ``H``, ``Ŝ_{t+1}``, ``θ_{t+1}`` or ``V_{t+1}`` not finite, ``H``,
            ``Ŝ_{t+1}`` or ``V_{t+1}`` with an entry beyond
            :attr:`statistic_bound` in magnitude, or the model's
            ``Π``/``T`` raised it (``numpy.linalg.LinAlgError`` included);
            ``ArithmeticError`` from the model passes through.
        """
        bound = self.statistic_bound
        beyond = "not finite" if bound == math.inf else f"not finite or beyond statistic_bound = {bound:.3g}"
        # overflows are detected below by the range checks, not reported as NumPy warnings
        with np.errstate(over="ignore", invalid="ignore"):
            acc = weighted_aggregate(rows, weights, self._size, p=self.p)
            H = self.V + acc
            if _beyond(H, bound):
                raise ValueError(f"the aggregate H = V_t + sum_i (mu_i/p) Delta_i is {beyond}")
            if self.space == "statistic":
                S_new, theta = self.model.sa_step(self.S, H, gamma, self.projection == "euclidean")
                if _beyond(S_new, bound):
                    raise ValueError(f"the new statistic S_{{t+1}} = Pi(S_t + gamma H) is {beyond}")
            else:
                S_new = None
                theta_half = self.theta_vector + gamma * H
                if not np.isfinite(theta_half).all():
                    raise ValueError("the new parameter theta_t + gamma H is not finite")
                theta = self.model.theta_from_vector(theta_half, self._theta_like)
                if self.projection == "euclidean":
                    theta = self.model.project_theta(theta)
            theta_vector = self.model.theta_vector(theta)
            if not np.isfinite(theta_vector).all():
                raise ValueError("the new parameter theta_{t+1} is not finite")
            V_new = control_variate_update(self.V, acc, self.control_variate_step)
            if _beyond(V_new, bound):
                raise ValueError(f"the new control variate V_{{t+1}} = V_t + α acc is {beyond}")
        return S_new, theta, theta_vector, V_new

    def step_without_failing_messages(self, t: int, gamma: float, ids: Sequence[int], rows: Sequence[np.ndarray],
                                      weights: Sequence[float], error: BaseException
                                      ) -> tuple[tuple, list[tuple[int, str]]]:
        """After :meth:`candidate_step` failed with ``error``: the step without the messages at fault.

        1. The step with no message at all (``acc = 0``) must succeed, else
           the failure is the server's own (its state or its model) and a
           ``ValueError`` is raised, the state unchanged.
        2. The suspects are ranked by the size of their contribution to
           ``acc``, ``‖(μ_i/p) Δ_i‖`` (computed in a scaled form, so that an
           absurd message ranks first even where the norm overflows); the
           step is retried without the ``k`` largest for ``k = 1, …,``
           :data:`MAX_STEP_RETRIES` (at most that many extra steps), the
           others accumulated in client order as usual.
        3. If every retry fails, the round goes on with no message (step 1's
           step) and every sender is reported.

        Returns ``(step, dropped)``: the :meth:`candidate_step` result to
        commit and ``[(i, reason), ...]`` for the clients left out.
        """
        return step_without_failing_messages(t, lambda rows, weights: self.candidate_step(gamma, rows, weights),
                                             ids, rows, weights, error, p=self.p)


# --------------------------------------------------------------------------- front-ends
def _check_model(model: Any, name: str) -> SurrogateModel:
    if not isinstance(model, SurrogateModel):
        raise TypeError(f"Expected '{name}' to be a fedmm SurrogateModel, got {type(model).__name__}")
    return model


def _check_compressor_or_identity(compressor: Any, name: str) -> Any:
    return check_compressor(Identity() if compressor is None else compressor)


def _check_weights(weights: Any, name: str) -> list[float] | None:
    return check_weights(weights)


class FedMM(FederatedAlgorithm):
    """Federated Majorize-Minimization (FedMM paper, Algorithm 2; Algorithm 4 on request).

    At round ``t`` the server samples active clients, sends ``Ŝ_t`` and
    ``θ_t = T(Ŝ_t)``; each active client ``i`` computes an oracle ``S_{t+1,i}``
    of ``E_{π_i}[S̄(Z, θ_t)]``, sends ``Quant(Δ_{t+1,i})`` with
    ``Δ_{t+1,i} = S_{t+1,i} − Ŝ_t − V_{t,i}`` and updates
    ``V_{t+1,i} = V_{t,i} + (α/p) Quant(Δ_{t+1,i})``; the server sets
    ``H_{t+1} = V_t + p⁻¹ Σ_{i active} μ_i Quant(Δ_{t+1,i})``,
    ``Ŝ_{t+1} = Π(Ŝ_t + γ_{t+1} H_{t+1})`` (Euclidean, ``B_t = I`` as in §6)
    and ``V_{t+1} = V_t + (α/p) Σ_{i active} μ_i Quant(Δ_{t+1,i})``.

    Parameters
    ----------
    model : SurrogateModel
    clients_per_round : int, optional
        Algorithm 2 with a fixed number ``m`` of active clients per round,
        drawn uniformly without replacement (then ``p = m/n``).
    participation_prob : float in (0, 1], optional
        Algorithm 2 with independent Bernoulli(``p``) participation (A5).
        Give at most one of the two; neither means every client every round
        (``participation_prob=1.0``).
    compressor : compressor or sequence of n compressors, default Identity()
        Unbiased compressor(s) of ``fedmm.compression`` (one per client if a sequence).
    control_variate_step : float in [0, 1]
        Control-variate step ``α`` (0 disables the control variates).  The FedMM
        paper's Theorem 1 takes ``α ∈ [0, 1]``, and ``α ≤ 1/(1 + ω_p)`` under
        compression or partial participation; a value above 1 is refused.
    step : float, '1/t', ('sqrt', beta), callable or None
        ``γ_t`` (see :class:`StepSchedule`).  None (the default) takes the
        model's declared ``model.default_step``: ``1.0`` for the EM models
        (``GaussianMixture``, ``PoissonLatent``, ``MissingValues``; exact EM
        with full batches), ``('inverse_sqrt', 1.0)`` (``γ_t = t^{-1/2}``) for
        ``DictionaryLearning`` and the base class; §6's ``('sqrt', β)`` must
        be asked for.  The resolved schedule is ``History.config['step']``, and
        ``History.config['step_source']`` says ``'model default'`` or ``'user'``.
    batch_size : int or None
        Local minibatch size ``b``, a number of samples (an int, unlike the
        non-smooth family's ``batch_size``, which also takes a fraction);
        None = full local batch.
    projection : {'euclidean', None}
        Line 16 with ``B_t = I``; None skips it.
    oracle : {'minibatch', 'full', 'spider'}
        ``'spider'`` is VR-FedEM's estimator with ``k_in`` rounds per epoch.
    k_in : int, optional
    weights : sequence of n non-negative floats, optional
        ``μ_i`` (normalized to sum to one); default ``N_i/N``.
    control_variates : {'zero', 'oracle'}
        ``V_{0,i} = 0`` or ``h_i(Ŝ_0)`` (one full local pass, sent uncompressed).
    control_variate_convention : {'fedmm', 'fedem'}
        How ``control_variate_step`` enters the control-variate updates (Algorithm 2 lines 8
        and 17).  ``'fedmm'`` (default): as written above, the client sets
        ``V_{t+1,i} = V_{t,i} + (α/p) Quant(Δ_{t+1,i})`` and the server
        ``V_{t+1} = V_t + (α/p) Σ_{i active} μ_i Quant(Δ_{t+1,i})``.
        ``'fedem'``: FedEM paper, Algorithm 1 lines 8 and 16, without the
        ``1/p``: ``V_{t+1,i} = V_{t,i} + α Quant(Δ_{t+1,i})`` and
        ``V_{t+1} = V_t + α Σ_{i active} μ_i Quant(Δ_{t+1,i})`` (FedEM's
        ``α n⁻¹ Σ_{i active}`` with ``μ_i = 1/n``), i.e. the ``'fedmm'``
        rounds with the effective step ``α_eff = α p``.  ``H_{t+1}``
        and the aggregation are the same in both.  The two coincide for
        ``p = 1``.  ``History.config`` records ``control_variate_step`` as given
        and the convention; the parties receive ``α_eff``
        (:meth:`effective_control_variate_step`).
    n_threads : int >= 1
        Threads of the in-process runtime.
    backend : {'auto', 'python', 'compiled'}
        Which backend runs the rounds in process (:mod:`fedmm.federation`):
        ``'compiled'`` runs whole stretches of rounds in C (models with a
        :meth:`~fedmm.models.SurrogateModel.compiled_model`, compressors with
        a ``quantizer_spec``, minibatch or full oracles); ``'python'`` the
        reference backend (any model and compressor, real payload bytes);
        ``'auto'`` the compiled one when the configuration allows it.  Both
        give the same numbers; ``History.config['backend']`` records which ran
        (and ``'backend_reason'`` why not the compiled one).
    participation_mode : {'select', 'compress', 'compress-local'}
        Algorithm 2, or Algorithm 4 with server-drawn (coupled) or client-drawn coins.
    start : {'mean_statistic', 'model'}
        ``Ŝ_0`` when :meth:`run` gets no ``init``.  ``'model'``:
        ``Ŝ_0 = model.init_statistic(datas, rng)`` (a statistic chosen by the
        model, e.g. random unit-norm atoms for dictionary learning).
        ``'mean_statistic'`` (default): with ``θ_0 = T(model.init_statistic(...))``,
        ``Ŝ_0 = Π(Σ_i μ_i s̄_i(θ_0))`` where ``s̄_i(θ) = E_{π_i}[S̄(Z, θ)]``:
        one full, uncompressed pass of every client at ``θ_0`` (a start
        exchange before the first round, in every runtime), so that
        ``T(Ŝ_0)`` is one exact MM step from ``θ_0``: the first rounds
        then average statistics of the data instead of pulling an arbitrary
        ``Ŝ_0`` along with ``γ_t``.  The Θ-space baseline starts at
        ``T(Ŝ_0)`` with the same ``Ŝ_0``, so both algorithms start at the same point.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.models import InverseToy
    >>> rng = np.random.default_rng(0)
    >>> datas = [rng.uniform(1, 2, 100), rng.uniform(5, 9, 100)]
    >>> h = FedMM(InverseToy(), step=1.0).run(datas, 3, seed=0)
    >>> bool(abs(h.state["theta"][0] - InverseToy().minimizer(datas, [0.5, 0.5])) < 1e-12)
    True
    """

    #: Where the clients' messages live and the server aggregates: ``'statistic'`` (S-space).
    space = "statistic"
    #: The algorithm's name in ``History.algorithm``.
    name = "FedMM"
    #: The constructor's checks of single arguments (:meth:`FederatedAlgorithm.set_parameters`);
    #: ``clients_per_round``/``participation_prob``, ``step`` and ``oracle``/``batch_size``/``k_in`` are
    #: checked together by the constructor.
    parameter_constraints = {
        "model": Rule(_check_model, "a fedmm SurrogateModel"),
        "compressor": Rule(_check_compressor_or_identity, "a compressor or a sequence of them; None: Identity()"),
        "control_variate_step": Rule(check_control_variate_step, "a real number in [0, 1]"),
        "control_variate_convention": Options(*CONTROL_VARIATE_CONVENTIONS),
        "projection": Options("euclidean", None),
        "weights": Rule(_check_weights, "None or non-negative numbers, one per client"),
        "control_variates": Options("zero", "oracle"),
        "n_threads": Integer(low=1),
        "backend": Options(*BACKENDS),
        "participation_mode": Options(*PARTICIPATION_MODES),
        "start": Options(*STARTS),
    }

    def __init__(self, model: SurrogateModel, *, clients_per_round: int | None = None,
                 participation_prob: float | None = None, compressor: Any = None,
                 control_variate_step: float = 0.0, step: Any = None, batch_size: int | None = None,
                 projection: str | None = "euclidean", oracle: str = "minibatch", k_in: int | None = None,
                 weights: Sequence[float] | None = None, control_variates: str = "zero", n_threads: int = 1,
                 backend: str = "auto", participation_mode: str = "select",
                 start: str = "mean_statistic", control_variate_convention: str = "fedmm") -> None:
        self.set_parameters(model=model)
        self.clients_per_round, self.participation_prob = check_participation(clients_per_round,
                                                                               participation_prob)
        self.set_parameters(compressor=compressor, control_variate_step=control_variate_step,
                            control_variate_convention=control_variate_convention)
        #: Where the step came from: ``'user'`` or ``'model default'`` (``model.default_step``).
        self.step_source = "user" if step is not None else "model default"
        self.schedule = StepSchedule(step if step is not None else model.default_step)
        self.oracle, self.batch_size, self.k_in = check_oracle_args(oracle, batch_size, k_in)
        self.set_parameters(projection=projection, weights=weights, control_variates=control_variates,
                            n_threads=n_threads, backend=backend, participation_mode=participation_mode, start=start)
        if self.participation_mode == "compress-local" and self.clients_per_round is not None:
            raise ValueError("participation_mode='compress-local' draws independent Bernoulli(p) coins: "
                             "pass 'participation_prob', not 'clients_per_round'")

    # -- configuration -----------------------------------------------------
    def config(self) -> dict[str, Any]:
        """JSON-friendly hyper-parameters (stored in ``History.config``)."""
        comp = self.compressor
        return {
            "model": repr(self.model),
            "clients_per_round": self.clients_per_round,
            "participation_prob": self.participation_prob,
            "compressor": [repr(c) for c in comp] if isinstance(comp, (list, tuple)) else repr(comp),
            "control_variate_step": self.control_variate_step,
            "control_variate_convention": self.control_variate_convention,
            "step": self.schedule.description,
            "step_source": self.step_source,
            "batch_size": self.batch_size,
            "projection": self.projection,
            "oracle": self.oracle,
            "k_in": self.k_in,
            "control_variates": self.control_variates,
            "participation_mode": self.participation_mode,
            "start": self.start,
            "n_threads": self.n_threads,
            "backend": self.backend,
        }

    def _check_datas(self, datas: Sequence[Any]) -> list[Any]:
        check_datas_list(datas)
        return [self.model.check_data(d, f"datas[{i}]") for i, d in enumerate(datas)]

    def _weights(self, datas: Sequence[Any]) -> np.ndarray:
        if self.weights is None:
            return normalized_weights([self.model.n_samples(d) for d in datas], len(datas))
        return normalized_weights(self.weights, len(datas))

    def effective_control_variate_step(self, p: float) -> float:
        """The control-variate step of Algorithm 2 (``α`` in ``V += (α/p) Quant(Δ)``) for participation ``p``.

        ``control_variate_step`` for ``control_variate_convention='fedmm'``;
        ``control_variate_step · p`` for ``'fedem'`` (FedEM's ``V += α Quant(Δ)``
        written in FedMM's form).  The parties (:class:`Server`, :class:`Client`)
        receive it as their ``control_variate_step``.
        """
        step = self.control_variate_step
        return step * p if self.control_variate_convention == "fedem" else step

    def _message_size(self, S0: np.ndarray) -> int:
        model = self.model
        return model.layout.size if self.space == "statistic" else model.theta_vector(model.T(S0)).shape[0]

    # -- building the parties ---------------------------------------------
    def build_server(self, n_clients: int, *, weights: Any, init: Any,
                     seed: int | np.random.SeedSequence = 0) -> Server:
        """The :class:`Server` alone, for runtimes where the data stay with remote clients.

        Parameters
        ----------
        n_clients : int
        weights : array_like of shape (n_clients,)
            ``μ_i`` (normalized here), e.g. the clients' reported sample counts.
        init : ndarray of shape (q,)
            ``Ŝ_0`` in 𝒮 (the server cannot call ``init_statistic`` without the data).
        seed : int or SeedSequence

        Raises
        ------
        RuntimeError
            When the model does not know its statistic layout yet (a model
            whose dimensions come from the data, e.g. ``GaussianMixture(3)``
            without ``n_features``): call ``model.prepare(datas)`` first (on
            the data, or on pilot data of the same shape), or build the model
            with its dimensions; a tied ``GaussianMixture`` also needs the
            global moments (``set_global_moments`` with the clients'
            ``local_moments``).
        """
        seed = check_seed(seed)
        n = check_int(n_clients, "n_clients", low=1)
        try:
            self.model.layout
        except (RuntimeError, ValueError) as exc:
            raise RuntimeError(
                f"build_server needs the statistic layout of {type(self.model).__name__}, which it does not know "
                f"yet ({exc}). Call model.prepare(datas) before build_server (FedMM.build and run do it), or "
                "construct the model with its dimensions") from exc
        w = normalized_weights(weights, n)
        S0 = np.array(self.model.layout.check(init, "init"), dtype=np.float64, copy=True)
        if not np.isfinite(S0).all():
            raise ValueError("Expected 'init' to contain only finite values")
        if not self.model.in_domain(S0):
            raise ValueError("Expected 'init' in the surrogate domain 𝒮 (model.project(init) != init)")
        count, p = participation(self.clients_per_round, self.participation_prob, n)
        comps = checked_compressors(self.compressor, n, self._message_size(S0))
        return Server(self.model, n, weights=w, p=p, count=count, schedule=self.schedule,
                      control_variate_step=self.effective_control_variate_step(p), projection=self.projection,
                      space=self.space,
                      mode=self.participation_mode, init=S0, seed=seed, decoders=comps)

    def build_client(self, index: int, data: Any, *, n_clients: int,
                     seed: int | np.random.SeedSequence = 0, check: bool = True) -> Client:
        """Client ``index`` of ``n_clients`` on its own ``data`` (what a remote worker builds).

        With the same ``seed`` it is the client :meth:`build` creates, so a
        remote client reproduces the in-process numbers.  ``check=False``
        skips ``model.check_data`` for data already validated.
        """
        seed = check_seed(seed)
        n = check_int(n_clients, "n_clients", low=1)
        index = check_int(index, "index", low=0, high=n - 1)
        if check:
            data = self.model.check_data(data, f"datas[{index}]")
        _, p = participation(self.clients_per_round, self.participation_prob, n)
        return self._new_client(index, data, n, p, seed)

    def _new_client(self, index: int, data: Any, n: int, p: float, seed: np.random.SeedSequence,
                    key: np.ndarray | None = None) -> Client:
        """:meth:`build_client` on arguments it has checked (``p``: the participation of ``n`` clients; ``key``:
        the client's row of :func:`party_keys`, or None to derive it)."""
        return Client(index, data, self.model, space=self.space,
                      compressor=client_compressor(self.compressor, n, index),
                      control_variate_step=self.effective_control_variate_step(p), p=p, mode=self.participation_mode,
                      oracle=self.oracle, batch_size=self.batch_size, k_in=self.k_in, seed=seed,
                      control_variates=self.control_variates,
                      stream=None if key is None else RoundStream.from_key(key))

    def build(self, datas: Sequence[Any], *, seed: int | np.random.SeedSequence = 0,
              init: np.ndarray | None = None, on_client_error: str = "drop") -> tuple[Server, list[Client]]:
        """Validated :class:`Server` and :class:`Client` objects for ``datas`` (used by every runtime).

        ``init`` (an array) is ``Ŝ_0``; None takes the start chosen by
        ``start`` (see :class:`FedMM`): with ``'mean_statistic'`` the clients'
        full local statistics at ``θ_0 = T(model.init_statistic(...))`` are
        averaged here, in process (:meth:`Client.start_statistic`,
        :meth:`Server.mean_statistic`), before any runtime takes over.

        The start exchange follows the fault policy ``on_client_error``:
        with ``'drop'`` a client whose statistic raises or whose payload
        fails validation is left out of ``Ŝ_0`` (the mean is re-weighted
        over the clients that answered; the server's :attr:`Server.start_drops`
        says who and why, and :meth:`run` records it in
        ``history.initial["dropped"]`` / ``["drop_reasons"]``); the client
        still takes part in the rounds.  With ``'raise'``, or when every
        client fails, a ``RuntimeError`` names the client(s).
        """
        on_client_error = check_in(on_client_error, "on_client_error", CLIENT_ERROR_POLICIES)
        seed = check_seed(seed)
        datas = self._check_datas(datas)
        model = self.model
        model.prepare(datas)  # what the model learns from the data (dimensions, global moments)
        n = len(datas)
        weights = self._weights(datas)
        start_from_mean = init is None and self.start == "mean_statistic"
        if init is None:
            init = model.init_statistic(datas, init_generator(seed))
        server = self.build_server(n, weights=weights, init=init, seed=seed)
        # build_client's checks hold for every client at once: the data were checked above, seed is checked
        _, p = participation(self.clients_per_round, self.participation_prob, n)
        keys = party_keys(seed, CLIENT_PARTY, n)  # every client's stream key in one pass
        clients = [self._new_client(i, d, n, p, seed, keys[i]) for i, d in enumerate(datas)]
        if start_from_mean:
            # the start exchange of every runtime: one uncompressed full pass per client at θ_0 = T(init)
            message = server.start_message()
            payloads = {}
            drops: dict[int, str] = {}
            # the compiled backend computes the same statistics on worker threads (clients that fail there,
            # or a Client whose start_statistic is redefined, answer through start_statistic)
            full = None
            if self.backend != "python" and all(type(c).start_statistic is _START_STATISTIC
                                                and "start_statistic" not in vars(c) for c in clients):
                full = compiled_start_statistics(server, clients, message.theta, self.n_threads)
            for c in clients:
                try:
                    if full is not None and full[c.index] is not None:
                        payloads[c.index] = Client.start_payload(full[c.index])
                        continue
                    payloads[c.index] = c.start_statistic(message)
                except Exception as exc:
                    if on_client_error == "raise":
                        raise RuntimeError(
                            f"Client {c.index} failed in the start exchange ({type(exc).__name__}: {exc}); "
                            "start='mean_statistic' with on_client_error='raise' needs every client's statistic "
                            "at θ_0: fix the client, or pass on_client_error='drop', init= or start='model'"
                        ) from exc
                    drops[c.index] = f"{type(exc).__name__}: {exc}"

            def on_invalid(i: int, reason: str) -> None:
                drops[i] = f"invalid payload: {reason}"

            try:
                S0 = server.mean_statistic(payloads, on_invalid=on_invalid if on_client_error == "drop" else None)
            except ValueError as exc:
                if len(drops) < n:
                    raise
                raise RuntimeError(
                    f"Every client failed in the start exchange ({drops}); start='mean_statistic' needs at least "
                    "one client's statistic at θ_0: fix the clients, or pass init= or start='model'") from exc
            start_server = server
            server = self.build_server(n, weights=weights, init=S0, seed=seed)
            server.start_drops = dict(sorted(drops.items()))
            server.adopt_compiled_setup(start_server)
        return server, clients

    # -- the run's hooks (FederatedAlgorithm.run) ------------------------------------------
    def check_run_args(self, n_rounds: int, evaluate_every: Any, *, monitor_every: Any = 1) -> dict[str, Any]:
        """``evaluate_every`` (>= 0) and ``monitor_every`` (>= 1; None: ``evaluate_every`` when positive,
        else ``n_rounds``, the last round only)."""
        evaluate_every = check_int(evaluate_every, "evaluate_every", low=0)
        if monitor_every is None:
            monitor_every = evaluate_every if evaluate_every else max(n_rounds, 1)
        return {"evaluate_every": evaluate_every, "monitor_every": check_int(monitor_every, "monitor_every", low=1)}

    def build_parties(self, datas: Sequence[Any], *, seed: Any, init: Any, on_client_error: str,
                      run_args: dict[str, Any]) -> tuple[Server, list[Client]]:
        """:meth:`build` (the start exchange follows ``on_client_error``)."""
        return self.build(datas, seed=seed, init=init, on_client_error=on_client_error)

    def check_evaluate_data(self, evaluate_data: Any, *, server: Server, clients: Sequence[Client]) -> Any:
        """One data set in the model's format (``model.check_data``), or None."""
        return None if evaluate_data is None else self.model.check_data(evaluate_data, "evaluate_data")

    def make_monitor(self, server: Server, clients: Sequence[Client], *, n_rounds: int, evaluate_data: Any,
                     run_args: dict[str, Any]) -> "_Monitor":
        """The objective at ``evaluate_every`` and, for the Θ-space baseline, ``E_sp`` at ``monitor_every``."""
        return _Monitor(self.model, server, [c.data for c in clients], run_args["evaluate_every"], evaluate_data,
                        n_rounds, run_args["monitor_every"] if self.space == "parameter" else 0)

    def record_start(self, history: History, *, server: Server, clients: Sequence[Client], monitor: "_Monitor",
                     init: Any, run_args: dict[str, Any]) -> None:
        """The start exchange's drops (``start='mean_statistic'`` without ``init``) and the objective at ``θ_0``."""
        if init is None and self.start == "mean_statistic":
            record_start_drops(history, server.start_drops)
        record_initial(history, monitor.objective if run_args["evaluate_every"] else None)

    def choose_runtime(self, runtime: Any, *, server: Server, clients: Sequence[Client], history: History,
                       on_client_error: str) -> Any:
        """``runtime``, or the in-process one on the backend ``backend`` allows; ``History.config['backend']``
        (and ``'backend_reason'``) say which backend runs the rounds."""
        if runtime is None:
            reason = compiled_unsupported(server, clients)
            if self.backend == "compiled" and reason is not None:
                raise ValueError(f"backend='compiled' cannot run this configuration: {reason}")
            use_compiled = self.backend != "python" and reason is None
            history.config["backend"] = "compiled" if use_compiled else "python"
            if reason is not None and self.backend == "auto":
                history.config["backend_reason"] = reason
                logger.info("%s runs on the Python backend: %s", self.name, reason)
            return LocalRuntime(n_threads=self.n_threads, compiled=use_compiled, on_client_error=on_client_error)
        if isinstance(runtime, LocalRuntime) and runtime.compiled and compiled_unsupported(server, clients) is None:
            history.config["backend"] = "compiled"  # the caller's in-process runtime runs compiled stretches
        else:
            history.config["backend"] = "python"  # other runtimes move Client.step messages
        return runtime

    def fingerprint_config(self) -> dict[str, Any]:
        """:meth:`config` without ``n_threads`` and ``backend`` (both backends give the same numbers), the
        model by its class and public attributes."""
        config = {k: v for k, v in self.config().items() if k not in ("n_threads", "backend", "model")}
        config["model"] = _model_fingerprint(self.model)
        return config

    def fingerprint_fields(self, server: Server, clients: Sequence[Client], *, evaluate_data: Any,
                           run_args: dict[str, Any]) -> dict[str, Any]:
        """The weights ``μ``, the clients' data, ``monitor_every`` and ``evaluate_data``."""
        return {"weights": data_digest([np.asarray(server.weights, dtype=np.float64)]),
                "data": data_digest([c.data for c in clients]), "monitor_every": run_args["monitor_every"],
                "evaluate_data": None if evaluate_data is None else data_digest([evaluate_data])}

    def server_params(self, server: Server) -> dict[str, Any]:
        """``θ`` as named arrays (``model.theta_to_dict``)."""
        return self.model.theta_to_dict(server.theta)

    def callback_state(self, server: Server, clients: Sequence[Client]) -> dict[str, Any]:
        """``"theta"`` (the model's object) and ``"statistic"`` (``Ŝ``; None for the baseline)."""
        return {"theta": server.theta, "statistic": server.S}

    def final_state(self, server: Server, clients: Sequence[Client]) -> dict[str, Any]:
        """``S`` (S-space only) and ``theta`` (flat float64 vectors)."""
        state = {} if server.S is None else {"S": server.S}
        state["theta"] = server.theta_vector
        return state

    def final_theta(self, server: Server, clients: Sequence[Client]) -> Any:
        """The parameter as the model's own object."""
        return server.theta

    def run(self, datas: Sequence[Any], n_rounds: int, *, seed: Any = None,
            init: np.ndarray | None = None, runtime: Any = None, on_client_error: str | None = None,
            progress: bool | None = None, callback: Callable[[int, Mapping[str, Any]], None] | None = None,
            evaluate_every: int = 0, evaluate_data: Any = None, monitor_every: int | None = 1,
            resume: Any = None, checkpoint_every: int = 0, checkpoint_path: Any = None) -> History:
        """Run ``n_rounds`` rounds on the clients' data ``datas``.

        Parameters
        ----------
        datas : list of client data sets (model format, e.g. ``(N_i, p)`` arrays)
        n_rounds : int in [0, 2**31 - 1]
            (``fedmm._validation.MAX_ITERATIONS`` bounds every iteration count.)
        seed : int, SeedSequence, Generator or None
            Root of all randomness (server selection, initial statistic, one
            Philox stream per client), normalized as NumPy does (a Generator is
            drawn from, None takes fresh OS entropy); a run is reproducible bit
            for bit from ``History.config["seed"]`` (``seed_from_repr``).
        init : ndarray of shape (q,), optional
            The initial statistic ``Ŝ_0`` (default: the start chosen by ``start``).
        evaluate_every : int
            Record ``objective`` (``Σ_i μ_i f_i(θ) + g(θ)`` on the clients' data,
            or ``f + g`` on ``evaluate_data``) every this many rounds and at
            the last round; 0 never.  The value at ``θ_0`` goes to
            ``history.initial['objective']`` (the row ``round = 0`` of
            :meth:`History.to_pandas`).
        evaluate_data : data, optional
            A single data set on which to evaluate the objective instead.
        monitor_every : int >= 1 or None
            Cadence of the baseline's ``E_sp`` (needs a full pass over all
            data; None: ``evaluate_every`` when it is positive, else the last
            round only).  Unlike ``evaluate_every`` (the objective, every family's
            evaluation cadence), it paces a quantity only the Θ-space
            baseline records; FedMM's own per-round fields (``E_s``, ``E_ps``)
            are cheap and recorded every round.
        progress : bool or None
            A tqdm progress bar on standard error: True on, False off, None
            (default) on only when standard error is a terminal.
        callback : callable(t, state), optional
            Called after each round ``t`` with a read-only mapping
            (``types.MappingProxyType``): ``state["params"]`` is ``θ_{t+1}`` as
            named arrays (``model.theta_to_dict``, what ``History.params``
            holds at the end), ``state["theta"]`` the same parameter as the
            model's own object (as ``History.theta``) and
            ``state["statistic"]`` ``Ŝ_{t+1}`` (None for the baseline).
            Raising :class:`StopRun` ends the run there: ``run`` returns the History of the
            completed rounds (``config['stopped_early'] = True``) as a normal result.
        runtime : object, optional
            Anything with ``run(server, clients, n_rounds, history=..., monitor=...,
            callback=..., progress=...)`` (:class:`fedmm.protocols.Runtime`; a
            ``TypeError`` otherwise); default the in-process
            :class:`fedmm.federation.LocalRuntime` with this object's ``n_threads`` and
            the backend chosen by ``backend``.
        on_client_error : {'drop', 'raise'} or None
            The default runtime's fault policy: a client whose round raises or
            whose payload fails validation is dropped for that round (recorded
            in ``dropped`` / ``drop_reasons``) and the run goes on, or the
            error propagates.  None (default): ``'drop'``.  With ``runtime``
            given, the runtime's own policy applies (``LocalRuntime(on_client_error=...)``);
            a value that differs from it is refused with a ``ValueError``.
            The start exchange (``start='mean_statistic'``) follows the same
            policy: a client that fails there is left out of ``Ŝ_0``, μ
            re-weighted over the clients that answered, and
            ``history.initial["dropped"]`` / ``["drop_reasons"]`` say who and
            why (``dropped`` is ``[]`` when every client answered); only a
            start where every client fails raises (``RuntimeError``).  A round
            in which every contacted client is dropped is flagged
            ``all_dropped`` in its record (:attr:`History.all_dropped_rounds`)
            and the run ends with a ``RuntimeWarning`` naming those rounds.
        resume : Checkpoint or path, optional
            Continue the run that wrote this :class:`fedmm.federation.Checkpoint`
            (or the file :meth:`~fedmm.federation.Checkpoint.save` wrote) from its
            next round up to ``n_rounds``, as if it had never stopped: the
            result equals the uninterrupted run's bit for bit.  The run must be
            the same (model, hyper-parameters, seed, number of clients, their
            data; ``n_threads`` and ``backend`` may differ): a checkpoint of
            another run is refused with a ``ValueError`` naming what differs.
            ``seed=None`` takes the checkpoint's seed; ``init`` must be None.
        checkpoint_every : int >= 0
            Write a checkpoint to ``checkpoint_path`` after every this many
            rounds (0: only on interrupt).  Writes are atomic (temporary file,
            ``fsync``, rename).
        checkpoint_path : path-like, optional
            Where checkpoints go.  When given, a ``KeyboardInterrupt`` also
            writes the state after the last completed round there.  Whatever
            the path, an interrupted run re-raises ``KeyboardInterrupt`` with
            ``exc.history`` (the completed rounds) and ``exc.checkpoint`` (a
            :class:`~fedmm.federation.Checkpoint` to pass as ``resume``) attached.
            Checkpoints need a runtime whose ``run`` accepts ``start`` and
            ``checkpoint`` (the in-process runtime does).  Any other exception
            that ends the run once its rounds have begun (a client error under
            ``on_client_error='raise'``, a server step that fails, a
            callback's error) carries ``exc.history`` and ``exc.checkpoint``
            alike, and is written to ``checkpoint_path`` too.

        Returns
        -------
        History
            Per round ``t``, ``gamma``, ``E_s``, ``E_ps`` (FedMM) or ``E_p``,
            ``E_sp`` (baseline), ``objective`` (at the cadence), ``active``,
            ``bytes_up``, ``bytes_down``, ``wall_time`` (cumulative seconds,
            monitoring excluded) and ``monitor_time`` (cumulative seconds of
            monitoring); ``initial`` the values at ``θ_0``; ``state`` holds the final
            ``S`` and ``theta`` (flat float64 vectors), ``params`` the final parameter
            as named arrays (``model.theta_to_dict``; both saved with the History), and
            ``history.theta`` the final parameter as the model's own object (e.g. the
            ``(p, K)`` dictionary, or ``GaussianMixtureParams``; in memory only).
        """
        return super().run(datas, n_rounds, seed=seed, init=init, runtime=runtime, on_client_error=on_client_error,
                           progress=progress, callback=callback, evaluate_every=evaluate_every,
                           evaluate_data=evaluate_data, resume=resume, checkpoint_every=checkpoint_every,
                           checkpoint_path=checkpoint_path, monitor_every=monitor_every)

    # -- the parties apart from the data (fedmm.protocols.RemoteAlgorithm) -------------------------------
    def remote_config(self) -> dict[str, Any]:
        """``History.config`` of a run whose parties live apart (:class:`fedmm.protocols.RemoteAlgorithm`).

        The Θ-space baseline runs apart as FedMM does (its clients rebuild ``θ_t`` from the broadcast's
        vector and :meth:`broadcast_layout`); its ``E_sp`` needs every client's data at the server, so a
        run apart records none.
        """
        return self.config()

    def describe_data(self, data: Any, partition_id: int) -> dict[str, np.ndarray]:
        """A node's data description: ``"n-samples"`` and, for a model with global moments
        (:class:`fedmm.protocols.SupportsGlobalMoments`), ``"moments-n"``, ``"moments-sum"``, ``"moments-sumsq"``."""
        model = self.model
        data = model.check_data(data, f"partition {partition_id}")
        out = {"n-samples": np.array([int(model.n_samples(data))], dtype=np.int64)}
        if isinstance(model, SupportsGlobalMoments):
            n, total, total_sq = model.local_moments(data)
            out.update({"moments-n": np.array([int(n)], dtype=np.int64),
                        "moments-sum": np.asarray(total, dtype=np.float64),
                        "moments-sumsq": np.asarray(total_sq, dtype=np.float64)})
        return out

    def _remote_weights(self, descriptions: Sequence[Mapping[str, np.ndarray]]) -> Any:
        """``weights`` if set, else the nodes' sample counts (``μ_i = N_i/N`` once normalized)."""
        if self.weights is not None:
            return self.weights
        return [float(np.asarray(d["n-samples"]).reshape(-1)[0]) for d in descriptions]

    def remote_server(self, n_clients: int, *, descriptions: Sequence[Mapping[str, np.ndarray]], seed: int,
                      init: Any = None, init_datas: Sequence[Any] | None = None, public_data: Any = None) -> Server:
        """The :class:`Server` of a run apart from the data (:class:`fedmm.protocols.RemoteAlgorithm`).

        ``init`` is ``Ŝ_0``; None takes ``model.init_statistic(init_datas, rng)``
        with the generator :meth:`run` uses (``init_datas``: pilot data the
        server holds; default none, which suits models whose initialization
        does not look at the data).  With ``start='mean_statistic'`` that
        statistic only gives ``θ_0``: :meth:`restart_server` builds the run's
        server from the clients' answers.  A model with global moments pools
        the nodes' ``local_moments`` from ``descriptions``.
        """
        if public_data is not None:
            raise TypeError(f"{self.name} takes no 'public_data' (pass a pilot sample as 'init_datas')")
        model = self.model
        S0 = init
        if S0 is None:
            try:
                S0 = model.init_statistic(list(init_datas or []), init_generator(seed))
            except Exception as exc:
                raise ValueError(f"{model!r} cannot build Ŝ_0 without data ({exc}): pass init= or init_datas=") \
                    from exc
        if isinstance(model, SupportsGlobalMoments):  # after init_statistic, which may fit pilot moments
            model.set_global_moments([(int(d["moments-n"][0]), d["moments-sum"], d["moments-sumsq"])
                                      for d in descriptions])
        return self.build_server(n_clients, weights=self._remote_weights(descriptions), init=S0, seed=seed)

    def remote_client(self, index: int, data: Any, *, n_clients: int, seed: int, public_data: Any = None) -> Client:
        """:meth:`build_client` (``public_data`` must be None)."""
        if public_data is not None:
            raise TypeError(f"{self.name} takes no 'public_data'")
        return self.build_client(index, data, n_clients=n_clients, seed=seed)

    def setup_exchange(self) -> bool:
        """True for ``control_variates='oracle'`` (every client's ``V_{0,i}`` reaches the server before round 0)."""
        return self.control_variates == "oracle"

    def start_exchange(self, init: Any) -> bool:
        """True for ``start='mean_statistic'`` without ``init``: ``Ŝ_0 = Π(Σ_i μ_i s̄_i(θ_0))`` needs every client."""
        return init is None and self.start == "mean_statistic"

    def start_message(self, server: Server) -> Broadcast:
        """:meth:`Server.start_message`: ``θ_0`` for the clients' start statistics."""
        return server.start_message()

    def start_reply(self, client: Client, message: Broadcast) -> bytes:
        """:meth:`Client.start_statistic`."""
        return client.start_statistic(message)

    def restart_server(self, server: Server, payloads: Mapping[int, bytes], *, n_clients: int,
                       descriptions: Sequence[Mapping[str, np.ndarray]], seed: int,
                       on_invalid: Callable[[int, str], None] | None = None) -> Server:
        """The run's server at ``Ŝ_0 = Π(Σ_i μ_i s̄_i(θ_0))`` (:meth:`Server.mean_statistic` of the answers)."""
        return self.build_server(n_clients, weights=self._remote_weights(descriptions),
                                 init=server.mean_statistic(dict(payloads), on_invalid=on_invalid), seed=seed)

    def broadcast_layout(self, server: Server) -> str:
        """The structure of ``θ`` (what ``model.theta_from_vector`` needs besides the flat vector)."""
        return theta_structure(server.theta)

    def broadcast_to_arrays(self, message: Broadcast) -> list[np.ndarray]:
        """:meth:`Broadcast.to_arrays`."""
        return message.to_arrays()

    def broadcast_from_arrays(self, arrays: Sequence[np.ndarray], layout: str) -> Broadcast:
        """:meth:`Broadcast.from_arrays` with ``θ``'s structure from :meth:`broadcast_layout`."""
        return Broadcast.from_arrays(arrays, self.model, theta_template(layout))

    def client_state(self, client: Client) -> ClientState:
        """:meth:`Client.export_state`."""
        return client.export_state()

    def client_state_from_arrays(self, arrays: Mapping[str, np.ndarray]) -> ClientState:
        """A :meth:`client_state` value from its ``to_arrays()`` (:meth:`ClientState.from_arrays`)."""
        return ClientState.from_arrays(arrays)

    def restore_client(self, client: Client, state: ClientState, message: Broadcast) -> None:
        """:meth:`Client.import_state` with ``θ``'s structure from ``message``."""
        client.import_state(state, message.theta)

    def estimate(self, server: Server) -> Any:
        """``θ_t`` in the model's format."""
        return server.theta

    def remote_finish_needs_clients(self) -> bool:
        """False: the final state is the server's (``Ŝ``, ``θ``)."""
        return False

    def remote_finish(self, server: Server, history: History,
                      client_states: Mapping[int, Mapping[str, np.ndarray]] | None = None) -> None:
        """``history.state["S"]``, ``["theta"]``, ``params`` and ``theta`` as :meth:`run` sets them."""
        if server.S is not None:
            history.state["S"] = server.S
        history.state["theta"] = server.theta_vector
        history.params = self.model.theta_to_dict(server.theta)
        history.theta = server.theta


def theta_structure(theta: Any) -> str:
    """The container structure of a model parameter ``θ`` as a string (shapes of its arrays).

    :func:`theta_template` turns it back into a ``like`` for
    ``model.theta_from_vector``; a model-specific parameter object gives
    ``"model:"`` (its ``theta_from_vector`` needs no template).

    Examples
    --------
    >>> theta_structure({"b": np.zeros(3), "a": np.ones((1, 2))}), theta_structure(np.zeros((2, 3)))
    ('dict:a=1,2;b=3', 'array:2,3')
    """
    def shape(x: Any) -> str:
        return ",".join(str(d) for d in np.shape(x))

    if isinstance(theta, dict):
        return "dict:" + ";".join(f"{k}={shape(theta[k])}" for k in sorted(theta))
    if isinstance(theta, (tuple, list)) and not hasattr(theta, "_fields"):
        return "seq:" + ";".join(shape(x) for x in theta)
    if isinstance(theta, (np.ndarray, np.generic, float, int)):
        return "array:" + shape(theta)
    return "model:"


def theta_template(structure: str) -> Any:
    """A stand-in ``like`` for ``model.theta_from_vector`` built from :func:`theta_structure`.

    Raises
    ------
    ValueError
        For a string :func:`theta_structure` does not make.
    """
    kind, _, body = str(structure).partition(":")

    def empty(spec: str) -> np.ndarray:
        return np.empty(tuple(int(d) for d in spec.split(",") if d), dtype=np.float64)

    try:
        if kind == "dict":
            return {k: empty(v) for k, v in (item.split("=") for item in body.split(";"))} if body else {}
        if kind == "seq":
            return tuple(empty(s) for s in body.split(";")) if body else ()
        if kind == "array":
            return empty(body)
    except ValueError as exc:
        raise ValueError(f"Expected a parameter structure of theta_structure, got {structure!r} ({exc})") from exc
    if kind == "model":
        return None
    raise ValueError(f"Expected a parameter structure of theta_structure, got {structure!r}")


class ParameterAveraging(FedMM):
    """The "naive" Θ-space baseline of FedMM paper §6 (eq. (21) with FedMM's machinery).

    How §6 is read here: "at step t+1, each active agent computes a new
    surrogate and optimizes it to obtain a new local parameter θ^i_{t+1}; it
    communicates θ^i_{t+1} to the server, which aggregates the parameters of
    active agents ... This naive algorithm exactly mirrors FedMM, except that
    the communications and the server aggregation step occur in the parameter
    space".  So every line of Algorithm 2 is kept with ``Ŝ_t`` replaced by the
    parameter ``θ_t`` and the oracle ``S_{t+1,i}`` by the local parameter
    ``θ_{t+1,i} = T(S_{t+1,i})`` (same oracle, same selection, compression,
    control variates and step sizes):

    - client: ``Δ_{t+1,i} = T(S_{t+1,i}) − θ_t − V_{t,i}`` (``S_{t+1,i}``
      computed at ``θ_t``), sends ``Quant(Δ_{t+1,i})``,
      ``V_{t+1,i} = V_{t,i} + (α/p) Quant(Δ_{t+1,i})``;
    - server: ``H = V_t + p⁻¹ Σ_{active} μ_i Quant(Δ_{t+1,i})``,
      ``θ_{t+1} = Π_Θ(θ_t + γ_{t+1} H)`` (``model.project_theta``; the
      identity where ``Θ`` is the whole space), ``V_{t+1} = V_t + (α/p) Σ μ_i Quant(Δ)``.

    With ``p = 1``, no compression, ``α = 0``, full-batch oracles and ``γ = 1``
    this is exactly eq. (21): ``θ_{t+1} = Σ_i μ_i T(E_{π_i}[S̄(Z, θ_t)])``.
    It is initialised at ``θ_0 = T(Ŝ_0)`` with FedMM's ``Ŝ_0`` for the same seed.

    Monitoring (§6): ``E_p = ‖θ_{t+1} − θ_t‖²/γ²_{t+1}`` every round and
    ``E_sp = ‖𝒯(θ_{t+1}) − 𝒯(θ_t)‖²/γ²_{t+1}`` with
    ``𝒯(θ) = Σ_i μ_i E_{π_i}[S̄(Z, θ)]`` (a full pass over every client's
    data; the paper writes ``1/n``, equal to ``μ_i`` for its equal-size
    clients) every ``monitor_every`` rounds.  ``history.state`` has ``theta`` only.

    By default (``monitor_every=None`` in :meth:`run`) ``E_sp`` is evaluated
    at the objective's cadence (``evaluate_every``), or only at the last
    round when no objective is asked for: at every round, its full pass over
    all data would cost more than the rounds themselves.

    Examples
    --------
    On the loss of Remark 1, averaging parameters converges to
    ``Σ_i μ_i E_i[Z]^{-1/2}`` instead of the minimizer ``(Σ_i μ_i E_i[Z])^{-1/2}``:

    >>> import numpy as np
    >>> from fedmm.models import InverseToy
    >>> rng = np.random.default_rng(0)
    >>> datas = [rng.uniform(1, 2, 100), rng.uniform(5, 9, 100)]
    >>> h = ParameterAveraging(InverseToy(), step=1.0, batch_size=None).run(datas, 3, seed=0)
    >>> naive = 0.5 * (datas[0].mean() ** -0.5 + datas[1].mean() ** -0.5)
    >>> bool(abs(h.state["theta"][0] - naive) < 1e-12)
    True
    >>> bool(h.state["theta"][0] > InverseToy().minimizer(datas, [0.5, 0.5]) + 0.1)
    True
    """

    space = "parameter"
    name = "ParameterAveraging"

    def run(self, datas: Sequence[Any], n_rounds: int, *, seed: Any = None,
            init: np.ndarray | None = None, runtime: Any = None, on_client_error: str | None = None,
            progress: bool | None = None, callback: Callable[[int, Mapping[str, Any]], None] | None = None,
            evaluate_every: int = 0, evaluate_data: Any = None, monitor_every: int | None = None,
            resume: Any = None, checkpoint_every: int = 0, checkpoint_path: Any = None) -> History:
        """:meth:`FedMM.run` with ``E_sp`` at the objective's cadence by default.

        Parameters
        ----------
        monitor_every : int >= 1 or None
            Rounds between evaluations of ``E_sp`` (and the last round).
            None (the default): ``evaluate_every`` when it is positive, else
            ``n_rounds`` (the last round only).
        datas, n_rounds, seed, init, runtime, on_client_error, progress, callback, evaluate_every, evaluate_data, \
resume, checkpoint_every, checkpoint_path
            As :meth:`FedMM.run`.
        """
        return super().run(datas, n_rounds, seed=seed, init=init, runtime=runtime, on_client_error=on_client_error,
                           progress=progress, callback=callback, evaluate_every=evaluate_every,
                           evaluate_data=evaluate_data, resume=resume, checkpoint_every=checkpoint_every,
                           checkpoint_path=checkpoint_path, monitor_every=monitor_every)


def _model_fingerprint(model: Any) -> dict[str, Any]:
    """The model's class and public attributes (arrays by digest): what a checkpoint's model must match."""
    out: dict[str, Any] = {"class": f"{type(model).__module__}.{type(model).__qualname__}"}
    for name, value in sorted(vars(model).items()):
        if name.startswith("_"):
            continue
        if value is None or isinstance(value, (bool, int, float, str)):
            out[name] = value
        elif isinstance(value, (np.ndarray, np.generic, list, tuple)):
            try:
                out[name] = data_digest([value])
            except TypeError:
                out[name] = type(value).__name__
        else:
            out[name] = type(value).__name__
    return out


# --------------------------------------------------------------------------- monitoring
class _Monitor:
    """Objective and ``E_sp`` evaluations at their cadences (reporting only)."""

    def __init__(self, model: SurrogateModel, server: Server, datas: list[Any], evaluate_every: int,
                 evaluate_data: Any, n_rounds: int, sp_every: int) -> None:
        self.model = model
        self.server = server
        self.datas = datas
        self.objective_cadence = Cadence(evaluate_every, n_rounds, name="evaluate_every")
        self.objective_data = evaluate_data
        self.sp_cadence = Cadence(sp_every, n_rounds, name="monitor_every")
        self._mean_field_cache: tuple[np.ndarray, np.ndarray] | None = None

    def objective(self) -> float:
        theta = self.server.theta
        if self.objective_data is not None:
            return float(self.model.objective(self.objective_data, theta))
        return float(sum(w * self.model.objective(d, theta) for w, d in zip(self.server.weights, self.datas)))

    def _mean_field(self, theta_vector: np.ndarray) -> np.ndarray:
        """``𝒯(θ) = Σ_i μ_i E_{π_i}[S̄(Z, θ)]`` (cached for the last θ)."""
        if self._mean_field_cache is not None and np.array_equal(self._mean_field_cache[0], theta_vector):
            return self._mean_field_cache[1]
        theta = self.model.theta_from_vector(theta_vector, self.server.theta)
        stats = self.model.statistic_batch(self.datas, theta, [None] * len(self.datas))
        value = self.server.weights @ stats
        self._mean_field_cache = (theta_vector, value)
        return value

    def due(self, t: int) -> bool:
        """Whether the record of round ``t`` gets a field from :meth:`__call__` (else it returns ``{}``)."""
        return self.sp_cadence.due(t) or self.objective_cadence.due(t)

    def __call__(self, t: int, gamma: float) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.sp_cadence.due(t):
            before = self._mean_field(self.server.theta_vector_prev)
            after = self._mean_field(self.server.theta_vector)
            out["E_sp"] = update_size("E_sp", squared_distance(after, before), gamma)
        if self.objective_cadence.due(t):
            out["objective"] = self.objective()
        return out
