# SPDX-License-Identifier: BSD-3-Clause
"""The compiled backend: stretches of FedMM rounds in one call of ``engine.c``, on values.

Its functions take and return data only: a :class:`~fedmm.federation.state.RoundConfig`, a
:class:`~fedmm.federation.state.ServerState`, one :class:`~fedmm.federation.state.ClientState` per client,
the compiled model (a :class:`fedmm.kernels.CompiledModel`), the clients' data in its format and
the compiled parameter.  They read no attribute of a server or client object
(``tests/quality/test_architecture.py`` checks it): :meth:`fedmm.algorithms.Server.simulate_rounds`
exports the states, calls :func:`compiled_rounds` and imports the states it returns.  The inputs are
never changed; the kernel works on copies, which become the returned states.  Numbers are those of
the Python backend bit for bit: ``engine.c`` performs the operations of :meth:`Client.step` and
:meth:`Server.aggregate` in the same order, and the Python backend calls the same compiled model
callbacks.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fedmm import kernels
from fedmm.federation.metrics import step_record
from fedmm.federation.state import ClientState, RoundConfig, ServerState

__all__ = ["CompiledRounds", "client_unsupported", "compiled_rounds", "compiled_statistics", "config_unsupported",
           "MINIBATCH_SHUFFLE_MAX"]

#: Minibatches of clients with at most this many samples are drawn by the compiled partial
#: Fisher-Yates shuffle (O(N_i) workspace); larger clients draw with NumPy (Python backend).
MINIBATCH_SHUFFLE_MAX = 4096


def config_unsupported(config: RoundConfig) -> str | None:
    """Why the compiled engine cannot run rounds configured by ``config``, or None if it can.

    The engine runs the minibatch and full oracles (not SPIDER), minibatches drawn by its own
    shuffle (clients of at most :data:`MINIBATCH_SHUFFLE_MAX` samples) and compressors with a
    quantizer spec (no row of ``config.quantizers`` is ``-1``).  Whether the model has a compiled
    form, and whether the clients are configured like the server, are the parties' business
    (:meth:`fedmm.algorithms.Server.compiled_unsupported`).
    """
    if not isinstance(config, RoundConfig):
        raise TypeError(f"Expected 'config' to be a RoundConfig, got {type(config).__name__}")
    if config.oracle not in ("minibatch", "full"):
        return client_unsupported(config, 0)
    # the first client with a reason, without a Python loop over the clients when there is none
    bad = config.quantizers[:, 0] < 0
    if config.oracle == "minibatch":
        bad = bad | (config.n_samples > MINIBATCH_SHUFFLE_MAX)
    bad = np.flatnonzero(bad)
    if bad.size == 0:
        return None
    k = int(bad[0])
    return client_unsupported(config, k) or f"client {k}'s compressor has no compiled quantizer (quantizer_spec)"


def client_unsupported(config: RoundConfig, k: int) -> str | None:
    """Why the compiled engine cannot run client ``k``'s rounds configured by ``config`` (its oracle, its
    number of samples), or None; :func:`config_unsupported` asks it for every client."""
    if config.oracle not in ("minibatch", "full"):
        return f"oracle={config.oracle!r} (the SPIDER estimator runs on the Python backend)"
    n = int(config.n_samples[k])
    if config.oracle == "minibatch" and n > MINIBATCH_SHUFFLE_MAX:
        return f"client {k} has {n} > {MINIBATCH_SHUFFLE_MAX} samples (its minibatches are drawn by NumPy)"
    return None


def compiled_statistics(model: kernels.CompiledModel, theta: np.ndarray, datas: Sequence[np.ndarray],
                        n_threads: int = 1, pool: kernels.WorkerPool | None = None) -> list[np.ndarray | None]:
    """Every client's full local statistic ``s̄_i(θ)`` at the compiled parameter ``theta``, in one call.

    What :meth:`fedmm.algorithms.Client.start_statistic` computes (the model's statistic over the
    client's whole data set, without per-sample memory), for all ``datas`` (the clients' data in the
    compiled model's format) at once on ``pool`` (or a :class:`fedmm.kernels.WorkerPool` of
    ``n_threads`` made for the call), with the same numbers whatever the threads.  Returns one
    statistic per client, in order (None for a client whose statistic failed: the caller reruns
    it in Python, which raises the error its fault policy handles).  As in :func:`compiled_rounds`,
    ``datas`` are data the model's ``check_data`` accepted: they are not scanned for NaN again.
    """
    S, status, n_bad = kernels.full_statistics(model, np.array(theta, dtype=np.float64), list(datas), n_threads,
                                               pool, check_finite=False)
    total = int(n_bad[status == 0].sum())
    if total:
        warnings.warn(f"{total} inner-solver columns hit their iteration cap in the start exchange's statistics",
                      kernels.ConvergenceWarning, stacklevel=3)
    return [S[i] if status[i] == 0 else None for i in range(len(datas))]


@dataclass(frozen=True, slots=True, eq=False)
class CompiledRounds:
    """What :func:`compiled_rounds` returns: the states after the rounds it ran and their records.

    Attributes
    ----------
    server_state : ServerState
        After the last completed round (the given state when none completed).
    client_states : tuple of ClientState
        Every client's state, in client order.  When a round failed, the contacted clients'
        ``V`` are as before it, but their per-sample memory may hold its values (as after a
        Python round whose client then failed).
    theta : ndarray of shape (model.theta_size,), float64
        The compiled parameter after the last completed round (read-only); the model's
        ``theta_from_compiled`` gives ``θ`` in the model's structure.
    rounds : tuple of dict
        One dict per completed round (``record``: what :meth:`Server.aggregate` returns;
        ``active``: the clients whose message was aggregated; ``n_contacted``; ``bytes_up``;
        ``bytes_down``; ``seconds``), then ``{"failed": reason, "t": t, "client": i}`` when round
        ``t`` failed in client ``i``'s round (``i = -1``: the server step).
    """

    server_state: ServerState
    client_states: tuple
    theta: np.ndarray
    rounds: tuple

    @property
    def completed(self) -> int:
        """The number of rounds that completed."""
        return len(self.rounds) - (1 if self.rounds and "failed" in self.rounds[-1] else 0)


def _working_copy(value: Any) -> np.ndarray:
    """A writeable, C-contiguous float64 copy for the kernel to update in place."""
    return np.array(value, dtype=np.float64, order="C", copy=True)


def _working_copies(values: Sequence[Any], shapes: Sequence[tuple]) -> list[np.ndarray]:
    """Writeable C-contiguous float64 copies of ``values`` (zeros where a value is None), of ``shapes``, as
    views of one new block (one allocation for every client: a stretch copies every client's arrays)."""
    sizes = [math.prod(shape) for shape in shapes]
    block = np.empty(sum(sizes), dtype=np.float64)
    out, start = [], 0
    for value, shape, size in zip(values, shapes, sizes):
        view = block[start:start + size].reshape(shape)
        if value is None:
            view.fill(0.0)
        else:
            np.copyto(view, value)
        out.append(view)
        start += size
    return out


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr


def compiled_rounds(config: RoundConfig, server_state: ServerState, client_states: Sequence[ClientState], *,
                    model: kernels.CompiledModel, datas: Sequence[np.ndarray], theta: np.ndarray,
                    gammas: np.ndarray, t0: int, n_threads: int = 1, max_seconds: float = float("inf"),
                    pool: kernels.WorkerPool | None = None) -> CompiledRounds:
    """Rounds ``t0, …, t0 + len(gammas) − 1`` of a FedMM run, in one compiled call.

    Parameters
    ----------
    config : RoundConfig
        The run's round configuration (:func:`config_unsupported` must give None).
    server_state : ServerState
        The server's state before round ``t0``.
    client_states : sequence of ClientState
        Every client's state before round ``t0``, in client order, each with a control variate
        of length ``config.message_size`` (after the set-up exchange).
    model : fedmm.kernels.CompiledModel
        The compiled surrogate model (``SurrogateModel.compiled_model()``).
    datas : sequence of ndarray
        Every client's data in the compiled model's format (``SurrogateModel.compiled_data``).
    theta : ndarray of shape (model.theta_size,)
        The compiled parameter of ``θ_{t0}`` (``SurrogateModel.compiled_theta``).
    gammas : ndarray of shape (R,)
        The step sizes ``γ_{t+1}`` of the rounds.
    t0 : int
        The first round.
    n_threads, pool
        The contacted clients of a round run on ``pool`` when given (its threads persist across
        calls; ``n_threads`` is then ignored), else on a :class:`fedmm.kernels.WorkerPool` of
        ``n_threads`` made for this call (none for one thread).  The numbers do not depend on either.
    max_seconds : float
        Fewer rounds (at least one) run when they take more than this.

    Returns
    -------
    CompiledRounds
        The new states, the compiled parameter and one record per round.  Rounds are atomic: when
        a client's round or the server step fails in round ``t``, the rounds before it are
        committed and the records end with ``{"failed": ...}``; the caller reruns round ``t`` on
        the Python backend, which applies its fault policy.

    Raises
    ------
    ValueError
        The states or data do not match ``config`` (number of clients, control variates of
        length ``config.message_size``; the kernel checks the data and memories), or
        ``config`` is one the engine does not run (:func:`config_unsupported`).
    TypeError
        An argument of the wrong type.
    """
    if pool is not None and not isinstance(pool, kernels.WorkerPool):
        raise TypeError(f"Expected 'pool' to be a fedmm.kernels.WorkerPool or None, got {type(pool).__name__}")
    if not isinstance(server_state, ServerState):
        raise TypeError(f"Expected 'server_state' to be a ServerState, got {type(server_state).__name__}")
    reason = config_unsupported(config)
    if reason is not None:
        raise ValueError(f"Expected a 'config' the compiled engine runs, got one with {reason}")
    n, msg = config.n_clients, config.message_size
    if len(client_states) != n or len(datas) != n:
        raise ValueError(f"Expected {n} client states and data sets (config.n_clients), got "
                         f"{len(client_states)} and {len(datas)}")
    for k, state in enumerate(client_states):
        if not isinstance(state, ClientState):
            raise TypeError(f"Expected 'client_states[{k}]' to be a ClientState, got {type(state).__name__}")
        if state.V is None or state.V.shape != (msg,):
            raise ValueError(f"Expected 'client_states[{k}]' to hold a control variate of length {msg} "
                             f"(after the set-up exchange), got {None if state.V is None else state.V.shape}")
    if (server_state.S is None) != (config.space == "parameter") or server_state.V.shape != (msg,):
        raise ValueError(f"Expected 'server_state' of a {config.space}-space server with V of length {msg}")
    gammas = np.ascontiguousarray(gammas, dtype=np.float64)
    if gammas.ndim != 1 or gammas.shape[0] < 1:
        raise ValueError(f"Expected 'gammas' of shape (R,) with R >= 1, got {gammas.shape}")
    key = config.memory_key
    if key is None:
        memories = [None] * n
    else:  # a client without memory yet gets the cold start (zeros), as SurrogateModel.compiled_memory creates it
        given = [state.memory.get(key) for state in client_states]
        memories = _working_copies(given, [(int(config.n_samples[k]), model.memory_size) if m is None else m.shape
                                           for k, m in enumerate(given)])
    V_block = np.array([state.V for state in client_states], dtype=np.float64)  # (n, msg), one allocation
    Vs = list(V_block)
    S = None if config.space == "parameter" else _working_copy(server_state.S)
    V = _working_copy(server_state.V)
    theta = _working_copy(theta)
    theta_prev = np.empty_like(theta)
    senders, n_senders, n_contacted, dist, seconds, n_bad, failure = kernels.run_rounds(
        model, config.space, config.mode, config.oracle, config.project, config.batch, config.p,
        config.control_variate_step, config.count, config.weights / config.p, config.server_key, list(datas),
        memories, Vs,
        config.client_keys, config.quantizers, S, V, theta, theta_prev, t0, gammas, n_threads, max_seconds, pool,
        statistic_max=config.statistic_max)
    if n_bad:
        warnings.warn(f"{n_bad} inner-solver columns hit their iteration cap in the compiled rounds "
                      f"{t0}..{t0 + len(n_senders) - 1}", kernels.ConvergenceWarning, stacklevel=3)
    # Algorithm 2 without a failed round: the clients no round selected were not contacted, and their
    # states are the ones given (the same objects); every other client gets a new state
    touched = None
    if config.mode == "select" and failure is None:
        touched = np.zeros(n, dtype=bool)
        for row, count in zip(senders, n_senders.tolist()):
            touched[row[:count]] = True
    V_block.flags.writeable = False
    V_rows = list(V_block)  # read-only views now
    clients_after = tuple(
        state if touched is not None and not touched[k] else
        ClientState(V=V_rows[k], memory=state.memory if key is None else {**state.memory, key: _frozen(memories[k])},
                    spider_S=state.spider_S, spider_theta=state.spider_theta, spider_epoch=state.spider_epoch)
        for k, state in enumerate(client_states))
    failed = () if failure is None else ({"failed": failure[2], "t": failure[0], "client": failure[1]},)
    if len(n_senders) == 0:
        return CompiledRounds(server_state, clients_after, _frozen(theta), failed)
    d = model.d
    server_after = ServerState(V=_frozen(V), theta_vector=_frozen(theta[:d].copy()),
                               theta_vector_prev=_frozen(theta_prev[:d].copy()),
                               S=None if S is None else _frozen(S))
    nbytes = config.payload_nbytes.tolist()
    message_nbytes = config.broadcast_nbytes
    statistic = config.space == "statistic"
    out = []
    # Python floats and ints once (the records are what Server.aggregate returns, to the bit)
    for gamma, (d_s, d_theta), ids, count, contacted, wall in zip(
            gammas.tolist(), dist.tolist(), senders.tolist(), n_senders.tolist(), n_contacted.tolist(),
            seconds.tolist()):
        del ids[count:]
        out.append({"record": step_record(gamma, d_theta, d_s if statistic else None),
                    "active": ids, "n_contacted": contacted, "bytes_up": sum([nbytes[i] for i in ids]),
                    "bytes_down": contacted * message_nbytes, "seconds": wall})
    return CompiledRounds(server_after, clients_after, _frozen(theta), tuple(out) + failed)
