# SPDX-License-Identifier: BSD-3-Clause
"""The extension points of fedmm as :class:`typing.Protocol` classes (``docs/extending.md``).

These describe, structurally, what the engine, the runtimes and the parties
call on each other, so that a user's model, compressor, runtime or algorithm
plugs in without inheriting from fedmm classes and without touching private
attributes.  Each protocol lists only what is *required*; optional hooks have
protocols of their own (``Supports*``), and code that uses them checks for
them (``isinstance(obj, SupportsQuantize)``) and falls back when they are
missing.

The parties of a run (:class:`ServerParty`, :class:`ClientParty`,
:class:`Monitor`) are a declared contract: every server, client and monitor
of every algorithm family implements all of their members, and the engine
and the runtimes call them without probing (no ``hasattr``, no
``inspect.signature``; ``tests/quality/test_architecture.py`` checks it).  What a
party does not have is declared, not absent: :meth:`ServerParty.setup_message`
returns None when there is no set-up exchange, and
:attr:`ServerParty.supports_compiled_rounds` says whether the server runs
compiled stretches of rounds (:class:`CompiledRoundsServer`).

==========================  =================================================  =========================================
protocol                    who implements it                                  who calls it
==========================  =================================================  =========================================
:class:`Model`              ``fedmm.models`` (``SurrogateModel`` subclasses)   the algorithms' server and client parties
:class:`Compressor`         ``fedmm.compression``                              a client (encode), the server (decode)
:class:`Runtime`            ``fedmm.runtime`` (``LocalRuntime``, ...)          an algorithm's ``run``
:class:`ServerParty`        ``fedmm.algorithms`` (``Server``, ...)             every runtime, once per round
:class:`ClientParty`        ``fedmm.algorithms`` (``Client``, ...)             every runtime, for each contacted client
:class:`Monitor`            ``fedmm.algorithms`` (each family's monitor)       every runtime, on the rounds it is due
:class:`RemoteAlgorithm`    every algorithm of ``fedmm.algorithms``            ``fedmm.runtime.flower``
==========================  =================================================  =========================================

A round, as every runtime runs it (``ids``/``payloads`` are Python lists)::

    setup = server.setup_message()                               # once, before round 0 (None: no set-up)
    server.setup_aggregate({c.index: c.setup(setup) for c in clients})
    for t in range(n_rounds):
        ids = server.select(t)
        message = server.broadcast(t)                            # after select(t)
        payloads = {i: clients[i].step(message) for i in ids}    # anywhere: threads, actors, nodes
        record = server.aggregate(t, payloads)                   # failed clients are left out
        history.append(t=t, **record, ...)

The protocols are ``runtime_checkable``: ``isinstance`` checks that the
members exist (not their signatures; ``tests/quality/test_protocols.py`` checks those
for the built-in classes).  They import nothing from the rest of fedmm but
:class:`fedmm.History`, so any layer may use them in annotations.
"""
from __future__ import annotations

from collections.abc import Sized
from typing import Any, Callable, Mapping, Protocol, Sequence, Union, runtime_checkable

import numpy as np

from fedmm.history import History

__all__ = [
    "ClientParty",
    "CompiledRoundsServer",
    "Compressor",
    "Layout",
    "Message",
    "Model",
    "Monitor",
    "PartyState",
    "Payload",
    "RemoteAlgorithm",
    "Runtime",
    "ServerParty",
    "StatefulClientParty",
    "SupportsCompiledModel",
    "SupportsGlobalMoments",
    "SupportsResume",
    "SupportsStepMany",
    "SupportsVarianceBound",
    "SupportsQuantize",
    "SupportsQuantizerSpec",
]

#: What a client sends up: ``bytes`` (or any object whose ``len()`` is the size in bytes of the
#: payload it stands for).  An empty payload (``len() == 0``) is "no message": the server counts
#: the client as inactive in that round (Algorithm 4 with ``U = 0``).
Payload = Union[bytes, Sized]


# --------------------------------------------------------------------------- models
@runtime_checkable
class Layout(Protocol):
    """The blocks of a flat statistic (``fedmm.models.StatisticLayout`` implements it).

    The engine needs only the length of the flat float64 vector that carries
    ``S`` and a shape check of untrusted vectors.
    """

    size: int

    def check(self, s: Any, name: str = "s") -> np.ndarray:
        """``s`` as an array of shape ``(size,)``, or ``ValueError`` naming ``name``."""
        ...


@runtime_checkable
class Model(Protocol):
    """A surrogate model in the linearly parameterized form MM-1/MM-2 of the FedMM paper.

    ``U(θ; s) = g(θ) + ψ(θ) − ⟨s, φ(θ)⟩`` with ``T(s) = argmin_θ U(θ; s)``;
    a client estimates its local mean field ``E_{π_i}[S̄(Z, θ)]``.

    Who calls what, and when:

    - the front-end (``FedMM.run``), once: :meth:`check_data` on every
      client's data, ``prepare(datas)`` (what the model learns from the data
      before ``layout`` is read: dimensions, global moments),
      :meth:`n_samples` (the default weights ``μ_i = N_i/N``),
      :meth:`init_statistic` (``Ŝ_0``, unless the user passes one);
    - the front-end's constructor, when no ``step`` is given:
      ``default_step`` (the model's declared step schedule ``γ_t``);
    - a client, every round it is contacted: :meth:`statistic` at the
      broadcast ``θ_t`` on its minibatch (its minibatch, SPIDER and batched
      oracles are built on it by the algorithm);
    - the server, every round: :meth:`project` and :meth:`T` (the SA step
      ``Ŝ_{t+1} = Π(Ŝ_t + γ H)``, ``θ_{t+1} = T(Ŝ_{t+1})``),
      :meth:`theta_vector` (distances, messages) and
      :meth:`theta_from_vector` (rebuilding ``θ`` from a flat vector: the
      Θ-space baseline, remote clients, saved states);
    - the monitor, at its cadence: :meth:`objective`.

    ``fedmm.models.SurrogateModel`` implements this protocol with defaults
    for everything but :meth:`statistic`, :meth:`T`, :meth:`objective`,
    :meth:`init_statistic` and ``layout``; ``FedMM`` currently requires a
    subclass of it, which also supplies the engine's further defaulted
    members: ``statistic_batch`` (several clients at one ``θ``, equal to
    stacked :meth:`statistic` calls), ``sa_step`` (one compiled server step
    where a model has one), ``in_domain``, ``project_theta``,
    ``uses_memory`` (per-client warm starts), the set-up hook
    ``prepare(datas)`` (a no-op by default; ``GaussianMixture`` learns ``p``
    and the global moments, ``MissingValues`` its matrix shape),
    ``statistic_bound`` (the largest magnitude of a statistic's entry that
    ``project`` and ``T`` handle, ``inf`` by default: the server refuses
    messages and steps beyond it), ``compiled_overrides()`` and
    ``default_step`` (``('inverse_sqrt', 1.0)``, i.e. ``γ_t = t^{-1/2}``, by
    default; ``1.0`` for the EM models, whose full-batch rounds are then
    exact EM).

    Optional compiled hook (the compiled backend of the round, :mod:`fedmm.federation`):
    ``compiled_model()`` returns a handle the compiled backend can run (the
    C struct of function pointers), or None to stay on the Python backend;
    see :class:`SupportsCompiledModel`.

    Attributes
    ----------
    layout : Layout
        The blocks of ``S``; ``S`` travels as one flat float64 vector of
        ``layout.size``.  It may be known only once the data have been seen
        (``DictionaryLearning`` without ``n_features`` sets it in
        :meth:`check_data`, ``GaussianMixture`` in ``prepare``), so check a
        model against this protocol after that.
    """

    layout: Layout

    def statistic(self, data: Any, theta: Any, idx: np.ndarray | None = None) -> np.ndarray:
        """Mean of ``S̄(Z_j, θ)`` over the samples ``idx`` of ``data`` (all when None).

        Deterministic given its arguments (randomness lives in the
        minibatch ``idx`` the caller draws).  Returns a float64 array of
        shape ``(layout.size,)``.
        """
        ...

    def T(self, s: np.ndarray) -> Any:
        """``argmin_θ g(θ) + ψ(θ) − ⟨s, φ(θ)⟩`` for ``s`` in ``𝒮``, in the model's parameter format."""
        ...

    def project(self, s: np.ndarray) -> np.ndarray:
        """Euclidean projection of ``s`` onto ``𝒮`` (the identity where ``𝒮`` is the whole space)."""
        ...

    def objective(self, data: Any, theta: Any) -> float:
        """``f(θ) + g(θ)`` with ``f`` the mean loss over ``data`` (reporting only)."""
        ...

    def init_statistic(self, datas: Sequence[Any], rng: np.random.Generator) -> np.ndarray:
        """A valid starting statistic ``Ŝ_0`` in ``𝒮`` (``rng``: the run's initialization stream)."""
        ...

    def theta_vector(self, theta: Any) -> np.ndarray:
        """The parameter ``θ`` flattened to one float64 vector."""
        ...

    def theta_from_vector(self, vector: np.ndarray, like: Any) -> Any:
        """Inverse of :meth:`theta_vector`; ``like`` is a parameter giving the structure."""
        ...

    def check_data(self, data: Any, name: str = "data") -> Any:
        """Validate one client's data and return it in the form :meth:`statistic` takes."""
        ...

    def n_samples(self, data: Any) -> int:
        """Number of samples in one client's (checked) data."""
        ...


@runtime_checkable
class SupportsCompiledModel(Protocol):
    """Optional model hook: run the model inside the compiled backend.

    Called once per run by the engine when it chooses a backend.  Returns a
    compiled-model handle (the C struct ``fedmm_model_t`` of function pointers,
    e.g. built from numba ``cfunc``\\ s) or None when this instance cannot run
    compiled (then the Python backend runs it, with the same numbers).
    """

    def compiled_model(self) -> Any:
        """The compiled-model handle, or None."""
        ...


# --------------------------------------------------------------------------- compressors
@runtime_checkable
class Compressor(Protocol):
    """An unbiased compressor of client messages (assumption A4/A6).

    ``E[decode(encode(x, rng))] = x`` and
    ``E‖decode(encode(x, rng)) − x‖² ≤ ω ‖x‖²`` over the randomness of
    ``rng``.  Unbiasedness is what the theory needs; the engine does not
    check it (a biased compressor runs, and converges to something else).

    Who calls what, and when:

    - the front-end, once per run: ``decode(encode(zeros(q), rng))`` as a
      probe that the compressor handles messages of length ``q``;
    - a client, every round it sends: :meth:`encode` on its message
      ``Δ_{t+1,i}`` with its own stream for that round, and :meth:`decode`
      of its own payload when it keeps control variates (``α > 0``);
    - the server, every round: :meth:`decode` of each non-empty payload it
      aggregates (payloads are untrusted bytes: validate every field and
      raise ``ValueError`` on any mismatch);
    - the in-process batched path and byte accounting: :meth:`payload_nbytes`.

    ``fedmm.compression.Compressor`` is the abstract base class of the
    built-in compressors (shared wire format, compiled kernels); a user
    compressor needs only the three methods below, and then runs on the
    Python backend with real payloads (``FedMM(..., batched=False)``).

    Optional hooks: ``quantize`` (:class:`SupportsQuantize`, the batched
    in-process path without packing), ``variance_bound`` (:class:`SupportsVarianceBound`),
    ``quantizer_spec`` (:class:`SupportsQuantizerSpec`, the compiled
    backend).
    """

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> bytes:
        """``Quant(x)`` as payload bytes.

        Parameters
        ----------
        x : ndarray of shape (q,), float64
        rng : numpy.random.Generator
            The only source of randomness (a run is reproducible bit for bit).
        """
        ...

    def decode(self, payload: bytes) -> np.ndarray:
        """The float64 vector of shape ``(q,)`` a payload carries (``ValueError`` if malformed)."""
        ...

    def payload_nbytes(self, q: int) -> int:
        """Size in bytes of :meth:`encode`'s payload for a length-``q`` vector.

        Exact when the size depends on ``q`` only (every built-in
        compressor); an upper bound for variable-length formats (e.g. a
        sparsifier).  The batched simulation reports it as the bytes sent;
        the wire path counts ``len(payload)``.
        """
        ...


@runtime_checkable
class SupportsQuantize(Protocol):
    """Optional compressor hook: ``Quant(x)`` as values, without packing (the batched simulation).

    Must equal ``decode(encode(x, rng2))`` bit for bit when ``rng2`` starts
    from the state of ``rng`` (the batched and wire paths then give the same
    numbers).  A compressor may also have ``quantize_many(X, rngs)`` (row
    ``k`` is ``quantize(X[k], rngs[k])``) for one call per round.
    """

    def quantize(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``Quant(x)``, float64 of shape ``(q,)``."""
        ...


@runtime_checkable
class SupportsVarianceBound(Protocol):
    """Optional compressor hook: the variance constant of A4, reported and used by step-size rules."""

    def variance_bound(self, q: int) -> float:
        """``ω`` with ``E‖Quant(x) − x‖² ≤ ω‖x‖²`` for every ``x`` of length ``q``."""
        ...


@runtime_checkable
class SupportsQuantizerSpec(Protocol):
    """Optional compressor hook: run the compressor inside the compiled backend.

    Called by the engine when it chooses a backend, for the message length
    ``q``.  Returns a spec the compiled backend can run (the Python view of
    ``fedmm_quantizer_t``: scheme, bits, norm, block) or None when it cannot
    (then the Python backend runs, with the same numbers).
    """

    def quantizer_spec(self, q: int) -> Any:
        """The compiled view of this compressor for length-``q`` messages, or None."""
        ...


# --------------------------------------------------------------------------- parties and messages
@runtime_checkable
class Message(Protocol):
    """What the server sends down (``fedmm.algorithms.Broadcast``, ``FedMLSMessage``).

    Runtimes move it without looking inside; they read only its size.  It
    must be picklable for runtimes that ship it to other processes (Ray).
    """

    @property
    def nbytes(self) -> int:
        """Bytes one client receives (counted in ``bytes_down``)."""
        ...


@runtime_checkable
class PartyState(Protocol):
    """A party's state between rounds as a frozen value of numbers only (no party, model or compressor).

    What runtimes move (threads, Ray actors, Flower nodes) and checkpoints store: the built-in families'
    are :class:`fedmm.federation.ServerState`, :class:`~fedmm.federation.ClientState` (FedMM),
    :class:`~fedmm.federation.SubgradientServerState`, :class:`~fedmm.federation.SubgradientClientState`
    (FedMLS, FedAvg, FedProx, Scaffold, Scaffnew), :class:`~fedmm.federation.OTServerState`,
    :class:`~fedmm.federation.OTClientState` (FedMM-OT, FedAdam); a custom algorithm's parties may use
    :class:`~fedmm.federation.ArrayState`.  Its class rebuilds it from :meth:`to_arrays` with a
    classmethod ``from_arrays(arrays)`` (what a checkpoint's resume calls), and it must pickle (Ray).
    """

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as ``name → array`` (dtypes a :class:`fedmm.federation.Checkpoint` stores)."""
        ...


@runtime_checkable
class ServerParty(Protocol):
    """The server of a federated algorithm: whom to contact, what to send, how to aggregate.

    Holds the global state (``Ŝ_t``, ``V_t``, the step schedule, its own
    random stream) and never sees client data.  Runtimes call, in this
    order: :meth:`setup_message` and (when it returned a message)
    :meth:`setup_aggregate` once, then per round ``t = 0, 1, …``:
    :meth:`select`, :meth:`broadcast`, :meth:`aggregate`; around a round they
    may take the state out and put it back (:meth:`export_state`,
    :meth:`import_state`: a failed round leaves no trace; checkpoints store
    the state's ``to_arrays()``).  All calls happen in one process (the driver).

    Attributes
    ----------
    supports_compiled_rounds : bool
        A class attribute: True when the server is a
        :class:`CompiledRoundsServer` (its ``simulate_rounds`` runs stretches
        of rounds in one compiled call; the in-process runtime uses it with
        ``compiled=True``), False otherwise.
    """

    supports_compiled_rounds: bool

    def setup_message(self) -> Message | None:
        """The set-up broadcast, sent to every client before round 0 (e.g. ``Ŝ_0`` for ``V_{0,i}``),
        or None when the algorithm has no set-up exchange (then :meth:`setup_aggregate` is not called)."""
        ...

    def setup_aggregate(self, payloads: Mapping[int, Payload]) -> None:
        """Aggregate every client's answer to :meth:`setup_message` (client index → payload)."""
        ...

    def select(self, t: int) -> list[int]:
        """Indices of the clients contacted in round ``t``, sorted (drawn from the server's stream)."""
        ...

    def broadcast(self, t: int) -> Message:
        """The message of round ``t`` to every selected client; called after :meth:`select` of ``t``."""
        ...

    def aggregate(self, t: int, payloads: Mapping[int, Payload],
                  on_invalid: Callable[[int, str], None] | None = None) -> dict[str, Any]:
        """Take the server's step of round ``t`` from the received payloads (client index → payload).

        Clients that failed or timed out are absent from ``payloads``;
        empty payloads are zero messages.  Returns the round's record
        fields (e.g. ``gamma``, ``E_s``), which the runtime completes with
        ``t``, ``active``, ``dropped``, bytes and time
        (``fedmm.runtime.local.round_record``).

        ``on_invalid`` (the runtimes pass it under the ``'drop'`` fault
        policy): a payload that fails the server's validation is left out,
        its client counted as dropped, after ``on_invalid(i, reason)`` and
        before the state changes.  Without it an invalid payload raises
        ``ValueError``.
        """
        ...

    def export_state(self) -> PartyState:
        """The server's mutable state as a frozen value (what a checkpoint or a rolled-back round restores):
        a :class:`PartyState` (the built-in families': :class:`fedmm.federation.ServerState`,
        :class:`~fedmm.federation.SubgradientServerState`, :class:`~fedmm.federation.OTServerState`)."""
        ...

    def import_state(self, state: PartyState, theta: Any = None) -> None:
        """Continue from an :meth:`export_state` value (of this server or of one built alike); ``theta``
        (the parameter in the model's structure, optional) saves rebuilding it."""
        ...


@runtime_checkable
class CompiledRoundsServer(ServerParty, Protocol):
    """A server whose stretches of rounds run in one compiled call (``supports_compiled_rounds = True``).

    The in-process runtime with ``compiled=True`` calls :meth:`simulate_rounds`
    instead of the per-round calls, with the same numbers.  The compiled engine itself works on
    values (:class:`fedmm.federation.RoundConfig`, :class:`fedmm.federation.ServerState`,
    :class:`fedmm.federation.ClientState`): the server turns itself and its clients into them.
    """

    def compiled_unsupported(self, clients: Sequence["ClientParty"]) -> str | None:
        """Why the compiled backend cannot run this server's rounds with ``clients`` (all of them, in
        this process), or None if it can."""
        ...

    def compiled_start_statistics(self, clients: Sequence["ClientParty"], theta: Any, n_threads: int = 1,
                                  pool: Any = None) -> list[np.ndarray | None] | None:
        """Every client's full local statistic at ``theta`` (the start exchange) in one compiled call, or
        None, with nothing computed, when :meth:`compiled_unsupported` gives a reason."""
        ...

    def simulate_rounds(self, clients: Sequence["ClientParty"], t0: int, n_rounds: int, n_threads: int = 1,
                        max_seconds: float = float("inf"), pool: Any = None) -> list[dict[str, Any]] | None:
        """Rounds ``t0, …, t0 + n_rounds − 1`` (fewer when they take more than ``max_seconds``, at least one).

        Returns one dict per round run (``record``, ``active``,
        ``bytes_up``, ``bytes_down``, ``seconds``; a last ``{"failed": ...}``
        entry when a round failed and left no trace), or None, with nothing
        changed, when this configuration has no compiled form.  ``pool``: the
        :class:`fedmm.kernels.WorkerPool` the runtime keeps for the run
        (None: ``n_threads`` threads for this call).
        """
        ...


@runtime_checkable
class ClientParty(Protocol):
    """A client of a federated algorithm: private data, local state, its own random stream.

    Runtimes call :meth:`setup` once with the set-up message (when the
    server has one), then :meth:`step` in every round the server selected
    it; around a round they may take its state out and put it back
    (:meth:`export_state`, :meth:`import_state`: a failed client's round leaves no
    trace, and runtimes whose workers do not keep the client objects carry
    it).  Its randomness in round ``t`` must depend only on (run seed,
    ``index``, ``t``), so that the numbers do not depend on the runtime, the
    threads or the order of calls.

    Optional hook: a static ``step_many(clients, message)`` (several
    clients of one type and one round in one call, equal to their
    :meth:`step` results; :class:`SupportsStepMany`), used by
    ``LocalRuntime(batched=True)``.  Whole compiled rounds are the server's
    business (:class:`CompiledRoundsServer`).

    Attributes
    ----------
    index : int
        The client's number ``i`` in ``0..n_clients-1`` (the key of its
        payloads in :meth:`ServerParty.aggregate`).
    """

    index: int

    def setup(self, message: Message) -> Payload:
        """Answer the set-up message (``b""`` when there is nothing to send)."""
        ...

    def step(self, message: Message) -> Payload:
        """Run this client's part of the round ``message`` belongs to; return its payload."""
        ...

    def export_state(self) -> PartyState:
        """The client's mutable state (control variate, oracle memory, streams that advance, ...) as a frozen
        :class:`PartyState` (the built-in families': :class:`fedmm.federation.ClientState`,
        :class:`~fedmm.federation.SubgradientClientState`, :class:`~fedmm.federation.OTClientState`)."""
        ...

    def import_state(self, state: PartyState, like_theta: Any = None) -> None:
        """Continue from an :meth:`export_state` value; ``like_theta`` is a model parameter giving ``θ``'s
        structure."""
        ...


@runtime_checkable
class SupportsStepMany(Protocol):
    """A client class whose round runs for several of its clients in one call (FedMLS and its baselines).

    The in-process runtime with ``batched=True`` gives each thread's share of
    contacted clients to ``type(share[0]).step_many(share, message)`` when
    the clients are of such a class (``isinstance(client,
    SupportsStepMany)``), and calls :meth:`step` per client otherwise.
    """

    @staticmethod
    def step_many(clients: Sequence[Any], message: Message) -> list[Payload]:
        """The payloads of ``clients`` (one type, one round) for ``message``: equal, in order, to their
        :meth:`step` results."""
        ...


@runtime_checkable
class StatefulClientParty(ClientParty, Protocol):
    """A client whose state can be taken out and put back: every :class:`ClientParty` now.

    ``import_state(export_state())`` on a fresh client built with the same
    arguments continues the run bit for bit.  Kept as a name for the
    annotations that spell out that runtimes carry the state.
    """

    def export_state(self) -> PartyState:
        """The client's mutable state as a frozen :class:`PartyState`."""
        ...

    def import_state(self, state: PartyState, like_theta: Any = None) -> None:
        """Continue from an :meth:`export_state` value; ``like_theta`` is a model parameter giving ``θ``'s
        structure."""
        ...


# --------------------------------------------------------------------------- runtimes
@runtime_checkable
class Monitor(Protocol):
    """Reporting after a round: ``monitor(t, gamma)`` returns extra record fields (objective, ``E_sp``).

    :meth:`due` says whether round ``t`` gets fields (the monitor is called
    only then); a runtime that runs stretches of rounds compiled ends a
    stretch there.  Its time is not counted in ``wall_time``; it goes to the
    record's cumulative ``monitor_time`` (``fedmm.runtime.run_monitor``).
    """

    def due(self, t: int) -> bool:
        """Whether round ``t`` gets the monitor's fields (True every round for a monitor of every round)."""
        ...

    def __call__(self, t: int, gamma: float) -> Mapping[str, Any]:
        ...


@runtime_checkable
class Runtime(Protocol):
    """Moves messages between a server and its clients; knows nothing of the mathematics.

    Called once by an algorithm's ``run`` (``FedMM.run(..., runtime=...)``)
    after it has built the parties.
    """

    def run(self, server: ServerParty, clients: Sequence[ClientParty], n_rounds: int, *,
            history: History, monitor: Monitor | None = None,
            callback: Callable[[int], None] | None = None, progress: bool | None = None) -> History:
        """Run the set-up exchange and ``n_rounds`` rounds; append one record per round to ``history``.

        Parameters
        ----------
        server : ServerParty
            Lives in this process.
        clients : sequence of ClientParty
            ``clients[i].index == i``; the runtime may ship them elsewhere
            (then they must be picklable and, for the final state to come
            back, :class:`StatefulClientParty`).
        n_rounds : int
        history : History
            Each round appends ``t``, the fields of ``server.aggregate``,
            ``active``, ``dropped``, ``bytes_up``, ``bytes_down`` and
            ``wall_time`` (cumulative, monitoring excluded), then the
            monitor's fields and ``monitor_time`` (cumulative seconds of
            monitoring; ``fedmm.runtime.finish_round`` does all of this); the set-up exchange's bytes go to
            ``history.config["setup_bytes_up"/"setup_bytes_down"]``.
        monitor : Monitor, optional
            Called after each round's aggregation, on the rounds it is due.
        callback : callable(t), optional
            Called after each round's record is appended.
        progress : bool or None
            A progress bar on standard error: True on, False off, None on
            only when standard error is a terminal.

        Returns
        -------
        History
            ``history``.
        """
        ...


@runtime_checkable
class SupportsResume(Runtime, Protocol):
    """A runtime that continues a run from a checkpoint and writes checkpoints (``FedMM.run(resume=...)``).

    Declared by the class attribute ``resumable = True``; its :meth:`run`
    also takes ``start`` (the first round to run, the parties and the
    History holding the state after round ``start − 1``) and ``checkpoint``
    (a :class:`fedmm.federation.CheckpointWriter`, called after every round),
    as :meth:`fedmm.runtime.LocalRuntime.run` does.
    """

    resumable: bool


# --------------------------------------------------------------------------- models (optional hook)
@runtime_checkable
class SupportsGlobalMoments(Protocol):
    """Optional model hook: a model that standardizes with moments pooled over every client's data.

    ``fedmm.models.GaussianMixture`` implements it.  An algorithm whose
    clients live apart (:class:`RemoteAlgorithm`) pools them: each client
    reports :meth:`local_moments` in its data description, and the server
    calls :meth:`set_global_moments` with all of them.
    """

    def local_moments(self, data: Any) -> tuple[int, np.ndarray, np.ndarray]:
        """``(n, Σ_j z_j, Σ_j z_j²)`` over one client's (checked) data."""
        ...

    def set_global_moments(self, moments: Sequence[tuple[int, np.ndarray, np.ndarray]]) -> None:
        """Pool every client's :meth:`local_moments`."""
        ...


# --------------------------------------------------------------------------- algorithms apart from their data
@runtime_checkable
class RemoteAlgorithm(Protocol):
    """An algorithm whose server and clients are built apart, each from what it holds (Flower).

    Every algorithm of :mod:`fedmm.algorithms` implements it (``FedMM``,
    ``FedMMOT``, ``FedAdam``, ``FedMLS``, ``FedAvg``, ``Scaffold``,
    ``Scaffnew``); ``fedmm.runtime.flower`` calls nothing else on an
    algorithm, and refuses an object that does not implement it with a
    ``TypeError`` naming this protocol.  The parties it builds are those of
    every runtime (:class:`ServerParty`, :class:`ClientParty`).

    The calls, in order:

    1. at start-up, on each node: :meth:`describe_data` of its data; on the
       server: :meth:`remote_config` (the History's configuration; it refuses
       a configuration that cannot run apart) and :meth:`remote_server` with
       every node's description;
    2. when :meth:`start_exchange` says so, :meth:`start_message` goes to
       every node, which answers :meth:`start_reply`, and
       :meth:`restart_server` builds the run's server from the answers;
    3. when :meth:`setup_exchange` says so, every node answers the server's
       ``setup_message()`` before round 0 (otherwise a node without state
       runs its client's ``setup`` on its first round);
    4. per round, the server's broadcast goes down as
       :meth:`broadcast_to_arrays` (with :meth:`broadcast_layout`, computed
       once per server), each node rebuilds it with
       :meth:`broadcast_from_arrays` and its client with
       :meth:`remote_client` (fresh on every message), puts the state it
       kept back with :meth:`restore_client` and keeps the client's state
       after the step as :meth:`client_state`;
    5. after the last round, when :meth:`remote_finish_needs_clients` says so,
       every node sends its :meth:`client_state`; :meth:`remote_finish` fills the
       History as the in-process ``run`` does.

    Checkpoints and resume need nothing more: while a run writes checkpoints,
    each node also sends its :meth:`client_state` up with its payload (the
    server keeps the accepted ones in the checkpoint), and a resumed run sends
    each node its state back, which the node restores with
    :meth:`restore_client` as it restores the state it kept itself.
    ``client_state`` must therefore hold everything a client carries between
    rounds (its random streams included), its ``to_arrays()`` as arrays of the
    dtypes a :class:`fedmm.federation.Checkpoint` stores (float64, int64, int32,
    uint64, uint8, bool); the node keeps and sends those arrays, and
    :meth:`client_state_from_arrays` turns them back into the value.

    :meth:`estimate` gives the argument of a server-side objective.

    Attributes
    ----------
    name : str
        The History's algorithm name.
    """

    name: str

    def remote_config(self) -> dict[str, Any]:
        """``History.config`` of a run apart (the hyper-parameters, JSON-friendly).

        Raises
        ------
        TypeError
            When this configuration cannot run with its parties apart (e.g.
            FedMM's Θ-space ``ParameterAveraging``).
        """
        ...

    def describe_data(self, data: Any, partition_id: int) -> dict[str, np.ndarray]:
        """What a node tells the server about its data at start-up (arrays only).

        Parameters
        ----------
        data : client data
            The node's data, validated here (errors name ``partition <partition_id>``).
        partition_id : int

        Returns
        -------
        dict of str to ndarray
            At least ``"n-samples"`` (int64, shape (1,)); every entry reaches :meth:`remote_server`.
        """
        ...

    def remote_server(self, n_clients: int, *, descriptions: Sequence[Mapping[str, np.ndarray]], seed: int,
                      init: Any = None, init_datas: Sequence[Any] | None = None, public_data: Any = None) -> Any:
        """The server party, built without the clients' data.

        Parameters
        ----------
        n_clients : int
        descriptions : sequence of mapping
            ``descriptions[i]``: partition ``i``'s :meth:`describe_data`.
        seed : int
            The run seed; with the same seed (and ``init``) the server the in-process ``run`` builds.
        init : optional
            The algorithm's starting point (as ``run``'s ``init``).
        init_datas : list of client data, optional
            Data the server may look at to initialize (FedMM's pilot data).
        public_data : optional
            Data every party holds (FedMM-OT's public target samples).

        Raises
        ------
        TypeError
            For an argument this algorithm does not take.
        """
        ...

    def remote_client(self, index: int, data: Any, *, n_clients: int, seed: int, public_data: Any = None) -> Any:
        """Client ``index`` on its node's ``data``: the client the in-process ``run`` builds for the same seed."""
        ...

    def setup_exchange(self) -> bool:
        """Whether every client must answer the server's set-up message before round 0
        (FedMM with ``control_variates='oracle'``)."""
        ...

    def start_exchange(self, init: Any) -> bool:
        """Whether the server of :meth:`remote_server` (with this ``init``) needs every client's answer
        to a start message before the set-up exchange (FedMM's ``start='mean_statistic'``)."""
        ...

    def start_message(self, server: Any) -> Message:
        """The start broadcast when :meth:`start_exchange` is true (``TypeError`` otherwise)."""
        ...

    def start_reply(self, client: Any, message: Message) -> bytes:
        """A client's answer to the start broadcast (``TypeError`` without a start exchange)."""
        ...

    def restart_server(self, server: Any, payloads: Mapping[int, bytes], *, n_clients: int,
                       descriptions: Sequence[Mapping[str, np.ndarray]], seed: int,
                       on_invalid: Callable[[int, str], None] | None = None) -> Any:
        """The server of the run, built from the clients' start answers ``payloads[i]``.

        With ``on_invalid`` (the ``'drop'`` fault policy) ``payloads`` may
        lack the clients that failed, and an invalid answer is left out after
        ``on_invalid(i, reason)``; without it every client's valid answer is
        needed.  ``TypeError`` without a start exchange.
        """
        ...

    def broadcast_layout(self, server: Any) -> str:
        """What a node needs, besides the arrays, to rebuild a broadcast of ``server`` (may be empty)."""
        ...

    def broadcast_to_arrays(self, message: Message) -> list[np.ndarray]:
        """The server's message (round, set-up or start broadcast) as arrays."""
        ...

    def broadcast_from_arrays(self, arrays: Sequence[np.ndarray], layout: str) -> Message:
        """Inverse of :meth:`broadcast_to_arrays` (``ValueError`` for arrays that do not form a message)."""
        ...

    def client_state(self, client: Any) -> PartyState:
        """The client's state as a frozen value (its ``to_arrays()`` is what its node keeps between messages)."""
        ...

    def client_state_from_arrays(self, arrays: Mapping[str, np.ndarray]) -> PartyState:
        """A :meth:`client_state` value from its ``to_arrays()`` (``ValueError`` for arrays that form none)."""
        ...

    def restore_client(self, client: Any, state: PartyState, message: Message) -> None:
        """Put a :meth:`client_state` value back into a client fresh from :meth:`remote_client`, before it
        handles ``message``."""
        ...

    def estimate(self, server: Any) -> Any:
        """The server's current estimate: the argument of a server-side objective."""
        ...

    def remote_finish_needs_clients(self) -> bool:
        """Whether :meth:`remote_finish` needs every client's final :meth:`client_state` (FedMLS: its ``z_K^i``)."""
        ...

    def remote_finish(self, server: Any, history: History,
                      client_states: Mapping[int, PartyState] | None = None) -> None:
        """Put the final state into ``history`` (``state``, ``params``, ``theta``) as the in-process ``run`` does.

        ``client_states[i]``: client ``i``'s last :meth:`client_state`, given
        when :meth:`remote_finish_needs_clients` is true.
        """
        ...
