# SPDX-License-Identifier: BSD-3-Clause
r"""Non-smooth federated baselines of the FedMLS paper §4 (FedAvg, Scaffold, Scaffnew) and what the
non-smooth family shares.

All methods minimize :math:`F(w) = \frac1n \sum_i f_i(w)` for a problem of
:mod:`fedmm.models.nonsmooth` with (stochastic) subgradients of the local
losses :math:`f_i`, using the step-size rules the paper reports for its §4
experiment (the smooth-case defaults of these methods do not converge on
non-smooth problems).  Round ``t = 0, 1, …`` is the paper's round
:math:`k = t + 1`.

- :class:`FedAvg` (local SGD): :math:`T_k` local steps
  :math:`u \leftarrow u − η_k g_i(u)` from the server point,
  :math:`η_k = η_0/\sqrt{k}` (``local_lr`` :math:`= η_0`); the server averages.
- :class:`Scaffold` (Karimireddy et al. 2020, option II control variates):
  server step (``server_lr``) :math:`η_g = \sqrt{n}`, local step
  :math:`η_s = η_0/(η_g s)` (``local_lr`` :math:`= η_0`) at the
  :math:`s`-th local step counted over the whole run.
- :class:`Scaffnew` (ProxSkip, Mishchenko et al. 2022): one local step per
  iteration :math:`s`, communication with probability :math:`p_s = 1/\sqrt{s}`,
  step :math:`η_s = η_0/\sqrt{s}` (``local_lr`` :math:`= η_0`).

The family's vocabulary is the package's: the first argument is the ``model``
(a :class:`~fedmm.models.nonsmooth.NonsmoothProblem`), ``batch_size`` the
minibatch, ``local_lr`` the clients' step (``step`` names only a server's
stochastic-approximation step γ elsewhere), ``server_lr`` Scaffold's server
step, and ``run`` takes ``evaluate_every``/``evaluate_data`` and calls
``callback(t, state)``.

Like :class:`fedmm.algorithms.FedMLS`, each method is a server and clients
that exchange messages (:class:`SubgradientServer`, :class:`SubgradientClient`),
moved by a runtime (:class:`fedmm.runtime.LocalRuntime` by default), so every
runtime carries them and the numbers do not depend on the runtime, on
``n_threads`` or on ``batched``.  The shared pieces are public:
:class:`FederatedSubgradientMethod` (arguments, ``build`` and ``run``),
:class:`SubgradientOracle` (one random stream per client) and
:class:`ShareOracle` (a share of clients evaluated with one vectorized call),
and :func:`decode_vector` (the payload format: little-endian float64).

Every method takes ``compressor=`` (unbiased compressors of
:mod:`fedmm.compression`; each client compresses its message relative to a
vector the server holds, so the aggregate stays unbiased; the default
:class:`~fedmm.compression.Identity` sends the raw float64 vectors) and
follows the runtimes' fault policy (the server averages the clients that
answered; a dropped client keeps its state).  FedAvg and Scaffold sample
clients (``clients_per_round=``/``participation_prob=``); FedMLS and Scaffnew,
whose papers define no client sampling, refuse it.

Every ``run`` returns a :class:`fedmm.History` with, per round ``t``: ``gamma``
(the server's aggregation step, see each method), ``local_steps`` (cumulative,
per client), the method's schedule values, ``active``, ``dropped``,
``bytes_up``/``bytes_down`` (payload sizes), ``wall_time`` (cumulative,
monitoring excluded), ``monitor_time`` (cumulative seconds of monitoring) and,
at the ``evaluate_every`` cadence, ``objective`` :math:`F` at the server
point; ``history.initial`` holds the values at ``x_0``,
``history.state["x"]`` and ``history.params["x"]`` the final server point.
"""
from __future__ import annotations

import math
import struct
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from fedmm._validation import (
    check_int,
    check_participation,
    check_real,
    check_seed,
)
from fedmm.algorithms._monitor import Cadence
from fedmm.algorithms._random import RoundStream, derive_seed
from fedmm.algorithms._schedule import Schedule
from fedmm.algorithms._setup import check_compressor, checked_compressors, client_compressor, participation
from fedmm.algorithms.base import Boolean, FederatedAlgorithm, Integer, OptionalConstraint, Options, Real, Rule
from fedmm.compression import Identity
from fedmm.federation.checkpoint import data_digest
from fedmm.federation import LocalRuntime, record_initial
from fedmm.federation.skeleton import (ClientSelection, control_variate_update, decode_payloads, guarded_step,
                                      mean_aggregate, sum_aggregate)
from fedmm.federation.state import (SUBGRADIENT_CLIENT_VECTORS, SUBGRADIENT_SERVER_VECTORS, SubgradientClientState,
                                   SubgradientServerState)
from fedmm.history import History
from fedmm.models.nonsmooth import NonsmoothProblem, StackedClients

__all__ = [
    "FedAvg", "Scaffold", "Scaffnew",
    "FederatedSubgradientMethod", "SubgradientServer", "SubgradientClient", "SubgradientOracle", "ShareOracle",
    "SetupMessage", "FedAvgServer", "FedAvgClient", "FedAvgMessage", "ScaffoldServer", "ScaffoldClient",
    "ScaffoldMessage", "ScaffoldStepRule", "ScaffnewServer", "ScaffnewClient", "ScaffnewMessage",
    "decode_vector", "encode_vector", "is_uncompressed", "join_parts", "split_parts", "pcg64_state",
    "set_pcg64_state", "scalar_array", "scalar_from_array", "vector_from_array",
]

_WORD = 8  # bytes of one float64 vector entry or one scalar on the wire


def _state_vectors(state: Any, every: tuple[str, ...], carried: tuple[str, ...], shape: tuple | None, owner: type,
                   optional: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The vectors ``carried`` of a state value as writable copies: each required one present (``optional``
    ones may be None), none of the others of ``every``, all of ``shape`` when given (``ValueError`` naming
    the vector and ``owner``)."""
    foreign = [name for name in every if name not in carried and getattr(state, name) is not None]
    if foreign:
        raise ValueError(f"Expected a {owner.__name__} state with the vectors {list(carried)}, got also {foreign} "
                         "(the state of another method)")
    out = {}
    for name in carried:
        value = getattr(state, name)
        if value is None:
            if name in optional:
                continue
            raise ValueError(f"Expected a {owner.__name__} state with the vector '{name}', got none")
        if shape is not None and value.shape != shape:
            raise ValueError(f"Expected '{name}' of shape {shape}, got {value.shape}")
        out[name] = np.array(value, dtype=np.float64, copy=True)
    return out


def check_batch_size(batch_size: Any) -> float | int:
    """The non-smooth family's ``batch_size``: a fraction in (0, 1] (a float) or a count >= 1 (an int).

    Examples
    --------
    >>> check_batch_size(0.1), check_batch_size(32)
    (0.1, 32)
    >>> check_batch_size(0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: Expected 'batch_size' to be a fraction of each client's samples in (0, 1] (a float) or a ...
    """
    expected = ("Expected 'batch_size' to be a fraction of each client's samples in (0, 1] (a float) or a number "
                "of samples >= 1 (an int)")
    if isinstance(batch_size, (bool, np.bool_)) or not isinstance(batch_size, (int, float, np.integer, np.floating)):
        raise TypeError(f"{expected}, got {type(batch_size).__name__}")
    if isinstance(batch_size, (int, np.integer)):
        if batch_size < 1:
            raise ValueError(f"{expected}, got {batch_size!r}")
        return int(batch_size)
    value = float(batch_size)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{expected}, got {batch_size!r}")
    return value


def minibatch_sizes(batch_size: float | int, counts: np.ndarray) -> np.ndarray:
    """Each client's minibatch ``b_i`` for ``batch_size`` (see :func:`check_batch_size`) and sample counts ``m_i``."""
    counts = np.asarray(counts)
    if isinstance(batch_size, (int, np.integer)):
        return np.maximum(1, np.minimum(int(batch_size), counts)).astype(np.int64)
    return np.maximum(1, np.ceil(batch_size * counts - 1e-12)).astype(np.int64)


# -- oracles ----------------------------------------------------------------------------------
class SubgradientOracle:
    """Subgradients of clients' ``f_i``, full or minibatch, each client drawing from its own stream.

    Parameters
    ----------
    model : NonsmoothProblem
    stacked : StackedClients
        The clients' samples (one client for a :class:`SubgradientClient`'s oracle).
    batch_size : float, int or None
        None: exact subgradients of ``f_i`` (deterministic).  Otherwise each
        client draws ``b_i`` of its ``m_i`` samples uniformly without
        replacement at every local step, and the estimate is scaled by
        ``m_i / b_i`` (unbiased): ``b_i = max(1, ⌈batch_size · m_i⌉)`` for a
        float (a fraction in (0, 1]), ``b_i = min(batch_size, m_i)`` for an
        int (a count, clipped to the client's size).
    seeds : sequence of SeedSequence
        One per client: client ``i`` draws only from its own stream, so results
        do not depend on how clients are grouped.
    chunk : int
        Minibatches are drawn ``chunk`` steps at a time per client (a fixed
        number, so that draws do not depend on the round structure).
    """

    def __init__(
        self,
        model: NonsmoothProblem,
        stacked: StackedClients,
        batch_size: float | int | None,
        seeds: Sequence[np.random.SeedSequence],
        chunk: int = 64,
    ) -> None:
        self.model = model
        self.stacked = stacked
        self.batch_size = batch_size
        self.seeds = list(seeds)
        self.calls = 0
        if batch_size is None:
            return
        counts = stacked.counts
        self._rngs = [np.random.default_rng(s) for s in seeds]
        self.batch = minibatch_sizes(batch_size, counts)
        self.row_offsets = np.concatenate([[0], np.cumsum(self.batch)[:-1]]).astype(np.int64)
        self.scale = counts / self.batch
        self._chunk = int(chunk)
        self._buffer = np.empty((0, int(self.batch.sum())), dtype=np.int64)
        self._pos = 0

    def _refill(self) -> None:
        parts = []
        for rng, m, b, start in zip(self._rngs, self.stacked.counts, self.batch, self.stacked.offsets):
            keys = rng.random((self._chunk, int(m)))
            # the b smallest of m i.i.d. uniforms index a uniform b-subset
            parts.append(np.argpartition(keys, int(b) - 1, axis=1)[:, : int(b)] + start)
        self._buffer = np.hstack(parts)
        self._pos = 0

    def draw(self, n_steps: int) -> np.ndarray:
        """Minibatch rows of the next ``n_steps`` steps, shape (n_steps, B), grouped by client.

        Consumes the streams exactly as ``n_steps`` calls of the oracle would.
        """
        out = np.empty((n_steps, self._buffer.shape[1]), dtype=np.int64)
        filled = 0
        while filled < n_steps:
            if self._pos == self._buffer.shape[0]:
                self._refill()
            take = min(n_steps - filled, self._buffer.shape[0] - self._pos)
            out[filled:filled + take] = self._buffer[self._pos:self._pos + take]
            filled += take
            self._pos += take
        self.calls += n_steps
        return out

    @property
    def row_bounds(self) -> np.ndarray:
        """Client ``i``'s minibatch occupies columns ``row_bounds[i]:row_bounds[i+1]`` of a row draw."""
        return np.concatenate([self.row_offsets, [self.batch.sum()]]).astype(np.int64)

    def __call__(self, W: np.ndarray) -> np.ndarray:
        """``G`` of shape (n, p): row ``i`` estimates a subgradient of ``f_i`` at ``W[i]``."""
        self.calls += 1
        if self.batch_size is None:
            return self.model.subgradients(self.stacked, W)
        if self._pos == self._buffer.shape[0]:
            self._refill()
        rows = self._buffer[self._pos]
        self._pos += 1
        return self.model.subgradients(self.stacked, W, rows, self.row_offsets, self.scale)

    def get_state(self) -> dict[str, np.ndarray]:
        """A copy of the streams' positions as arrays: ``calls`` and, for minibatches, ``rngs`` (each
        stream's PCG64 state, :func:`pcg64_state`), ``buffer`` (the drawn-ahead minibatches) and ``pos``."""
        state: dict[str, np.ndarray] = {"calls": np.array(self.calls, dtype=np.int64)}
        if self.batch_size is not None:
            state.update(rngs=np.stack([pcg64_state(rng) for rng in self._rngs]), buffer=self._buffer.copy(),
                         pos=np.array(self._pos, dtype=np.int64))
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`get_state` snapshot."""
        self.calls = int(state["calls"])
        if self.batch_size is not None:
            rngs = np.asarray(state["rngs"])
            if rngs.shape != (len(self._rngs), 6):
                raise ValueError(f"Expected 'rngs' of shape ({len(self._rngs)}, 6), got {rngs.shape}")
            for rng, s in zip(self._rngs, rngs):
                set_pcg64_state(rng, s)
            self._buffer = np.array(state["buffer"], dtype=np.int64, copy=True)
            self._pos = int(state["pos"])


_MASK64 = (1 << 64) - 1


def pcg64_state(rng: np.random.Generator) -> np.ndarray:
    """A PCG64 generator's state as 6 uint64: the 128-bit ``state`` and ``inc`` (high and low words),
    ``has_uint32`` and ``uinteger`` (what a checkpoint stores; :func:`set_pcg64_state` restores it)."""
    st = rng.bit_generator.state
    if st["bit_generator"] != "PCG64":
        raise ValueError(f"Expected a PCG64 generator, got {st['bit_generator']}")
    state, inc = st["state"]["state"], st["state"]["inc"]
    return np.array([state >> 64, state & _MASK64, inc >> 64, inc & _MASK64, st["has_uint32"], st["uinteger"]],
                    dtype=np.uint64)


def set_pcg64_state(rng: np.random.Generator, words: Any) -> None:
    """Restore :func:`pcg64_state` into the PCG64 generator ``rng``."""
    w = [int(v) for v in np.asarray(words, dtype=np.uint64)]
    if len(w) != 6:
        raise ValueError(f"Expected 6 words of a PCG64 state, got {len(w)}")
    rng.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": (w[0] << 64) | w[1],
                                                                   "inc": (w[2] << 64) | w[3]},
                               "has_uint32": w[4], "uinteger": w[5]}


class ShareOracle:
    """The next ``n_steps`` local steps' subgradients for a share of clients, one vectorized call per step.

    Each client draws its minibatches from its own stream
    (:meth:`SubgradientOracle.draw`), so the numbers do not depend on how
    clients are grouped into shares.  The minibatches are drawn in chunks of
    at most :attr:`ROWS_AHEAD` indices as the steps progress (the same numbers
    as drawing all ``n_steps`` at once), so a round's memory does not grow with
    its number of local steps.

    Parameters
    ----------
    clients : sequence of SubgradientClient
        The share (one problem, same oracle kind).
    n_steps : int
        Local steps of the round.

    Attributes
    ----------
    share : StackedClients
        The share's samples (cached on the share's first client between rounds).
    rows : ndarray of shape (chunk, B) or None
        Row indices into ``share`` of the minibatches of the current chunk of
        steps (None: full subgradients).
    row_bounds : ndarray of shape (len(clients) + 1,) or None
        Client ``j``'s minibatch occupies columns ``row_bounds[j]:row_bounds[j+1]`` of ``rows``.
    scale : ndarray of shape (len(clients),) or None
        ``m_j / b_j`` (unbiased minibatch estimates).
    """

    #: Minibatch indices drawn ahead at most (int64 entries, 8 MiB).
    ROWS_AHEAD = 1 << 20

    def __init__(self, clients: Sequence["SubgradientClient"], n_steps: int) -> None:
        first = clients[0]
        self.model = first.model
        self.share = SubgradientClient.stack_share(clients)
        self.n_steps = n_steps
        self._clients = list(clients)
        self.rows = self.row_bounds = self.scale = None
        self._first = 0  # step index (0-based) of rows[0]
        if first.oracle.batch_size is not None:
            self.row_bounds = np.concatenate([[0], np.cumsum([c.oracle.batch[0] for c in clients])]).astype(np.int64)
            self.scale = np.array([c.oracle.scale[0] for c in clients])
            self.rows = np.empty((0, int(self.row_bounds[-1])), dtype=np.int64)
            self._chunk = max(1, self.ROWS_AHEAD // max(1, int(self.row_bounds[-1])))

    def _draw(self, count: int) -> None:
        """Draw the minibatches of the next ``count`` steps into ``rows``."""
        offsets = self.share.offsets
        self._first += self.rows.shape[0]
        self.rows = np.hstack([c.oracle.draw(count) + offsets[j] for j, c in enumerate(self._clients)])

    def chunks(self):
        """Yield ``(first_step, count, rows)`` covering the ``n_steps`` steps in order (``rows`` None for
        full subgradients, then one chunk), drawing each chunk's minibatches when it is reached."""
        if self.rows is None:
            yield 0, self.n_steps, None
            return
        while self._first + self.rows.shape[0] < self.n_steps:
            self._draw(min(self._chunk, self.n_steps - self._first - self.rows.shape[0]))
            yield self._first, self.rows.shape[0], self.rows

    def __call__(self, U: np.ndarray, step: int) -> np.ndarray:
        """Row ``j``: a (minibatch) subgradient of client ``j``'s ``f`` at ``U[j]`` at local step ``step``
        (0-based; steps are visited in order)."""
        if self.rows is None:
            return self.model.subgradients(self.share, U)
        if step >= self._first + self.rows.shape[0]:
            if step != self._first + self.rows.shape[0] or step >= self.n_steps:
                raise ValueError(f"Expected local steps in order below n_steps={self.n_steps}, got step {step}")
            self._draw(min(self._chunk, self.n_steps - step))
        return self.model.subgradients(self.share, U, self.rows[step - self._first], self.row_bounds[:-1],
                                         self.scale)


# -- messages and payloads ---------------------------------------------------------------------------
def decode_vector(payload: Any, size: int, name: str) -> np.ndarray:
    """A payload of ``size`` little-endian float64 values, validated (length, finiteness).

    Raises
    ------
    ValueError
        If ``payload`` is not bytes of length ``8 · size`` or holds a NaN or an infinity.
    """
    if not isinstance(payload, (bytes, bytearray, memoryview)) or len(payload) != _WORD * size:
        got = len(payload) if isinstance(payload, (bytes, bytearray, memoryview)) else type(payload).__name__
        raise ValueError(f"Expected the {name} to be {_WORD * size} bytes (float64 vector of length {size}), "
                         f"got {got}")
    v = np.frombuffer(payload, dtype="<f8").astype(np.float64)
    if not np.isfinite(v).all():
        raise ValueError(f"Expected the {name} to contain only finite values")
    return v


def encode_vector(v: np.ndarray) -> bytes:
    """``v`` as little-endian float64 bytes (the payload format of the non-smooth family)."""
    return np.ascontiguousarray(v, dtype="<f8").tobytes()


def is_uncompressed(compressor: Any) -> bool:
    """Whether a client with ``compressor`` sends its vectors uncompressed (an :class:`~fedmm.compression.Identity`).

    Such a client keeps the family's raw payload (:func:`encode_vector`: ``8 q`` bytes, no header) and the
    server aggregates the vectors themselves, so the numbers are those of a run without a compressor.
    """
    return isinstance(compressor, Identity)


def join_parts(parts: Sequence[bytes]) -> bytes:
    """Several compressed payloads as one: each part prefixed with its length (little-endian uint32).

    Examples
    --------
    >>> split_parts(join_parts([b"ab", b"c"]), 2, "payload")
    [b'ab', b'c']
    """
    return b"".join(struct.pack("<I", len(part)) + bytes(part) for part in parts)


def split_parts(payload: Any, n_parts: int, name: str) -> list[bytes]:
    """The ``n_parts`` payloads :func:`join_parts` joined, validated (lengths add up to the payload's).

    Raises
    ------
    ValueError
        If ``payload`` is not bytes or its length prefixes do not describe exactly ``n_parts`` parts.
    """
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise ValueError(f"Expected the {name} to be bytes, got {type(payload).__name__}")
    data = bytes(payload)
    parts, pos = [], 0
    for k in range(n_parts):
        if len(data) - pos < 4:
            raise ValueError(f"Expected the {name} to hold {n_parts} length-prefixed parts, got {len(data)} bytes "
                             f"(part {k} has no length)")
        (size,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if size > len(data) - pos:
            raise ValueError(f"Expected the {name}'s part {k} to be {size} bytes, got {len(data) - pos}")
        parts.append(data[pos:pos + size])
        pos += size
    if pos != len(data):
        raise ValueError(f"Expected the {name} to end after its {n_parts} parts, got {len(data) - pos} more bytes")
    return parts
def scalar_array(value: Any, name: str = "value") -> np.ndarray:
    """A message scalar as an array of shape (1,): int64 for an integer, float64 for a real (exact both ways
    with :func:`scalar_from_array`)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"Expected '{name}' to be an int or a float, got {type(value).__name__}")
    return np.array([value], dtype=np.int64 if isinstance(value, (int, np.integer)) else np.float64)


def scalar_from_array(array: Any, name: str = "value") -> int | float:
    """Inverse of :func:`scalar_array`: a Python int or float (``ValueError`` for anything else)."""
    a = np.asarray(array)
    if a.shape != (1,) or a.dtype not in (np.int64, np.float64):
        raise ValueError(f"Expected '{name}' as an int64 or float64 array of shape (1,), got {a.dtype} {a.shape}")
    return a[0].item()


def vector_from_array(array: Any, name: str = "vector") -> np.ndarray:
    """A message vector: a finite 1-D float64 array (a copy), or ``ValueError`` naming ``name``."""
    a = np.asarray(array)
    if a.ndim != 1 or a.dtype != np.float64 or not np.isfinite(a).all():
        raise ValueError(f"Expected '{name}' as a finite 1-D float64 array, got {a.dtype} {a.shape}")
    return np.array(a, copy=True)


class _Message:
    """Base of the server → clients messages: ``nbytes`` counts the vectors and 8 bytes per scalar."""

    __slots__ = ()
    vector_fields: tuple[str, ...] = ()
    scalar_fields: tuple[str, ...] = ()

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: the float64 vectors plus 8 bytes per scalar."""
        return sum(getattr(self, f).nbytes for f in self.vector_fields) + _WORD * len(self.scalar_fields)

    @property
    def theta(self) -> np.ndarray | None:
        """The broadcast point ``x`` (the name runtimes use for a message's parameter; None if there is none)."""
        return getattr(self, "x", None)

    def __repr__(self) -> str:
        fields = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.scalar_fields)
        return f"{type(self).__name__}({fields}, nbytes={self.nbytes})"

    def to_arrays(self) -> list[np.ndarray]:
        """The message as arrays, for array-based transports (Flower): its vectors (float64), then each scalar
        as an array of shape (1,) (int64 for an integer, float64 for a real), in the order of the constructor's
        arguments."""
        vectors = [np.ascontiguousarray(getattr(self, f), dtype=np.float64) for f in self.vector_fields]
        return vectors + [scalar_array(getattr(self, f), f) for f in self.scalar_fields]

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> Any:
        """Inverse of :meth:`to_arrays`.

        Raises
        ------
        ValueError
            If ``arrays`` do not form a message of this class (count, shapes, dtypes, non-finite vectors).
        """
        n_vec, n_all = len(cls.vector_fields), len(cls.vector_fields) + len(cls.scalar_fields)
        if len(arrays) != n_all:
            raise ValueError(f"Expected {n_all} arrays in a {cls.__name__}, got {len(arrays)}")
        vectors = [vector_from_array(a, f"{cls.__name__}.{f}") for a, f in zip(arrays, cls.vector_fields)]
        scalars = [scalar_from_array(a, f"{cls.__name__}.{f}") for a, f in zip(arrays[n_vec:], cls.scalar_fields)]
        return cls(*vectors, *scalars)


class SetupMessage(_Message):
    """The set-up exchange of the non-smooth family: nothing to say (no initial control variates)."""

    __slots__ = ()


class FedAvgMessage(_Message):
    """FedAvg server → clients in round ``k``: the server point ``x``, ``T_k`` and ``η_k``."""

    __slots__ = ("x", "local_steps", "step")
    vector_fields = ("x",)
    scalar_fields = ("local_steps", "step")

    def __init__(self, x: np.ndarray, local_steps: int, step: float) -> None:
        self.x, self.local_steps, self.step = x, local_steps, step


class ScaffoldMessage(_Message):
    """Scaffold server → clients: ``x``, the server control variate ``c``, and the round's local steps
    ``s = first_step + 1, …, first_step + local_steps`` (the clients evaluate :math:`η_s` themselves)."""

    __slots__ = ("x", "c", "first_step", "local_steps")
    vector_fields = ("x", "c")
    scalar_fields = ("first_step", "local_steps")

    def __init__(self, x: np.ndarray, c: np.ndarray, first_step: int, local_steps: int) -> None:
        self.x, self.c, self.first_step, self.local_steps = x, c, first_step, local_steps


class ScaffnewMessage(_Message):
    """Scaffnew server → clients: ``x`` and the local iterations ``s = first_step + 1, …,
    first_step + local_steps`` until the next communication (the clients evaluate :math:`η_s`, :math:`p_s`)."""

    __slots__ = ("x", "first_step", "local_steps")
    vector_fields = ("x",)
    scalar_fields = ("first_step", "local_steps")

    def __init__(self, x: np.ndarray, first_step: int, local_steps: int) -> None:
        self.x, self.first_step, self.local_steps = x, first_step, local_steps


# -- server and client bases ----------------------------------------------------------------------------
class SubgradientServer:
    r"""Base of the non-smooth servers: state ``x``, selection (:class:`fedmm.federation.ClientSelection`),
    payload decoding and validation (:func:`fedmm.federation.decode_payloads` with this family's wire format,
    :meth:`decode_all`).

    Subclasses implement ``broadcast(t)`` and ``aggregate(t, payloads,
    on_invalid=None)`` (returning the round's record, with ``gamma`` among
    its fields), decode with :meth:`decode_all` and list their state arrays
    in ``state_names`` (fields of :class:`~fedmm.federation.SubgradientServerState`:
    :data:`~fedmm.federation.state.SUBGRADIENT_SERVER_VECTORS`).  Their server step is the hook
    ``step_from(t, rows)``: the new state arrays by name from the round's decoded messages (``rows``,
    ``m >= 0`` of them, in client order), computed into new arrays without changing the server;
    ``aggregate`` runs it through :meth:`server_step` (atomic, under the fault policy) and commits
    the result (:meth:`commit`).

    Parameters
    ----------
    n_clients : int
        :math:`N`.
    x0 : ndarray of shape (p,)
        The starting point.
    decoders : sequence of N compressors, optional
        Client ``i``'s compressed payloads are decoded by ``decoders[i]`` (its own compressor); default
        :class:`~fedmm.compression.Identity` for every client (raw float64 payloads, :func:`is_uncompressed`).
    clients_per_round : int or None
        Partial participation: this many clients drawn uniformly without
        replacement every round (FedAvg, Scaffold's Algorithm 1).
    participation_prob : float in (0, 1]
        Partial participation with independent Bernoulli coins (1: every
        client, the default; ignored with ``clients_per_round``).
    seed : SeedSequence, optional
        The server's stream (needed for partial participation).  Round ``t``'s
        selection is the first draw of ``Philox(key, counter=t)``
        (:class:`~fedmm.algorithms.RoundStream`): a pure function of the seed
        and ``t``, the same on every runtime, and nothing to checkpoint.

    Notes
    -----
    Fault policy: clients absent from ``payloads`` (their step failed or timed
    out) and, with ``on_invalid``, clients whose payload fails validation are
    left out; the subclasses then aggregate over the clients that answered.
    Without ``on_invalid`` (the ``'raise'`` policy) every selected client's
    message is needed and an invalid one raises ``ValueError``.  A server step
    that fails on valid messages (a non-finite new ``x`` or control variate:
    finite but huge messages whose sum overflows) changes nothing: it raises
    ``ValueError`` or, with ``on_invalid``, goes on without the messages that
    make it fail (:meth:`server_step`).
    """

    state_names: tuple[str, ...] = ("x",)
    #: No compiled rounds (:class:`fedmm.protocols.ServerParty`).
    supports_compiled_rounds = False

    def __init__(self, n_clients: int, x0: np.ndarray, decoders: Sequence[Any] | None = None, *,
                 clients_per_round: int | None = None, participation_prob: float = 1.0,
                 seed: np.random.SeedSequence | None = None) -> None:
        self.n_clients = n_clients
        self.x = x0.copy()
        self.total_local_steps = 0
        self.decoders = [Identity()] * n_clients if decoders is None else list(decoders)
        if len(self.decoders) != n_clients:
            raise ValueError(f"Expected one decoder per client ({n_clients}), got {len(self.decoders)}")
        self.clients_per_round = clients_per_round
        self.participation_prob = float(participation_prob)
        partial = clients_per_round is not None or self.participation_prob < 1.0
        if partial and seed is None:
            raise ValueError("Expected a 'seed' for the server's stream with partial participation")
        self.stream = RoundStream(seed) if partial else None
        #: Who each round contacts (:class:`fedmm.federation.ClientSelection`).
        self.selection = ClientSelection(n_clients, clients_per_round=clients_per_round,
                                         participation_prob=self.participation_prob,
                                         key=None if self.stream is None else self.stream.key)

    @property
    def theta(self) -> np.ndarray:
        """The current server point ``x`` (the name runtimes use for the server's parameter)."""
        return self.x

    def state(self) -> dict[str, np.ndarray]:
        """Copies of the server's state arrays (what ``run``'s ``callback`` receives)."""
        return {name: getattr(self, name).copy() for name in self.state_names}

    def export_state(self) -> SubgradientServerState:
        """The server's state as a frozen value: its vectors (``state_names``) and ``total_local_steps``,
        what a rolled-back round, a checkpoint or a runtime restores (the selection stream is counter-based:
        it has no position to save).  Its arrays are read-only copies."""
        return SubgradientServerState(**{name: getattr(self, name) for name in self.state_names},
                                      total_local_steps=self.total_local_steps)

    def import_state(self, state: SubgradientServerState, theta: Any = None) -> None:
        """Continue from ``state`` (an :meth:`export_state` value of a server of the same method; ``theta``,
        in the :class:`fedmm.protocols.ServerParty` contract, is not needed here: the parameter is ``x``).

        Raises
        ------
        TypeError
            ``state`` is not a :class:`~fedmm.federation.SubgradientServerState`.
        ValueError
            ``state`` lacks one of this server's vectors, holds one it does not carry (another method's
            state), or a vector's length differs from ``x``'s.
        """
        self._check_state(state, None)
        self._import_vectors(state)

    def _check_state(self, state: Any, coin: bool | None) -> None:
        if not isinstance(state, SubgradientServerState):
            raise TypeError(f"Expected 'state' to be a SubgradientServerState (export_state()), got "
                            f"{type(state).__name__}")
        if coin is None and state.coin is not None:
            raise ValueError(f"Expected a state without a 'coin' stream ({type(self).__name__} flips no coins), "
                             "got one")

    def _import_vectors(self, state: SubgradientServerState) -> None:
        vectors = _state_vectors(state, SUBGRADIENT_SERVER_VECTORS, self.state_names, self.x.shape, type(self))
        for name, value in vectors.items():
            setattr(self, name, value)
        self.total_local_steps = state.total_local_steps

    def setup_message(self) -> SetupMessage:
        """No set-up exchange: an empty message."""
        return SetupMessage()

    def setup_aggregate(self, payloads: dict) -> None:
        """Nothing to aggregate before the first round (see :meth:`setup_message`)."""
        for i, b in payloads.items():
            if b:
                raise ValueError(f"Expected an empty set-up payload from client {i}, got {len(b)} bytes")

    def select(self, t: int) -> list[int]:
        """The clients contacted in round ``t``, sorted: every client, or, with partial participation,
        ``clients_per_round`` of them uniformly without replacement or each with probability
        ``participation_prob`` (the first draw of round ``t``'s server stream)."""
        return self.selection.select(t)

    def decode_all(self, t: int, payloads: dict, size: int, on_invalid: Callable[[int, str], None] | None = None,
                   reference: np.ndarray | None = None, parts: int = 1) -> tuple[list[int], np.ndarray]:
        r"""The valid payloads of round ``t``'s selected clients, decoded and stacked in client order.

        Client ``i`` with an uncompressed decoder (:func:`is_uncompressed`) sends the ``size`` values
        :math:`v_i` themselves (:func:`decode_vector`); otherwise the compressed :math:`v_i − r`
        (``r = reference``, zero when None) cut into ``parts`` equal pieces (one compressor payload,
        or several joined by :func:`join_parts`), decoded here by ``decoders[i]``: the row is
        :math:`r + \mathrm{Quant}(v_i − r)`, whose expectation is :math:`v_i` (the compressors are unbiased).

        Parameters
        ----------
        t : int
            The round (its selection, :meth:`select`, says whose message is expected).
        payloads : dict of int to bytes
            Client index → payload; clients whose step failed are absent.
        size : int
            Values per client.
        on_invalid : callable(i, reason), optional
            The ``'drop'`` fault policy: a payload that fails validation (size,
            malformed compressed part, non-finite values, also after adding
            ``reference``), or one from a client not selected in round ``t``,
            is left out after ``on_invalid(i, reason)``.  Without it such a
            payload, or a selected client's missing payload, raises
            ``ValueError``.
        reference : ndarray of shape (size,), optional
            What the compressed differences are taken from (a vector the server already holds).
        parts : int
            Compressed pieces per payload (Scaffold sends two: ``Δy_i`` and ``Δc_i``).

        Returns
        -------
        ids : list of int
            The clients whose message is aggregated, increasing.
        rows : ndarray of shape (len(ids), size)
        """
        ids, rows = decode_payloads(t, payloads, lambda i, payload: self._decode(i, payload, size, reference, parts),
                                    on_invalid=on_invalid, selected=self.select(t), owner=type(self).__name__)
        return ids, (np.array(rows, dtype=np.float64) if rows else np.empty((0, size)))

    def _decode(self, i: int, payload: Any, size: int, reference: np.ndarray | None, parts: int) -> np.ndarray:
        name = f"payload of client {i}"
        decoder = self.decoders[i]
        if is_uncompressed(decoder):
            return decode_vector(payload, size, name)
        piece = size // parts
        values = np.empty(size)
        for k, part in enumerate(split_parts(payload, parts, name) if parts > 1 else [payload]):
            decoded = np.asarray(decoder.decode(part), dtype=np.float64)
            if decoded.shape != (piece,):
                raise ValueError(f"Expected the {name} (part {k}) to decode to {piece} values, got shape "
                                 f"{decoded.shape}")
            values[k * piece:(k + 1) * piece] = decoded
        if reference is not None:
            values += reference
        if not np.isfinite(values).all():
            raise ValueError(f"Expected the {name} to contain only finite values")
        return values

    def server_step(self, t: int, ids: Sequence[int], rows: np.ndarray,
                    on_invalid: Callable[[int, str], None] | None = None) -> dict[str, np.ndarray]:
        """Round ``t``'s server step from its decoded messages, under the fault policy; nothing of the server
        changes.

        :meth:`candidate_step` of the messages runs under :func:`fedmm.federation.guarded_step`: when it
        fails, a ``ValueError`` says why, or, with ``on_invalid``, the step is retried without the largest
        messages (ranked by ``‖v_i‖``: the family's aggregation is unweighted; at most
        :data:`fedmm.federation.MAX_STEP_RETRIES` retries), each of their clients reported by
        ``on_invalid(i, reason)``.  The usual path costs one finiteness check of the new state.

        Parameters
        ----------
        t : int
            The round.
        ids : list of int
            The senders, increasing (:meth:`decode_all`).
        rows : ndarray of shape (len(ids), size)
            Their decoded messages (:meth:`decode_all`).
        on_invalid : callable(i, reason), optional
            The ``'drop'`` fault policy.

        Returns
        -------
        dict of str to ndarray
            :meth:`candidate_step`'s new state arrays by name, to :meth:`commit`.
        """
        return guarded_step(t, lambda rows, weights: self.candidate_step(t, rows), ids, rows, [1.0] * len(ids),
                            on_invalid=on_invalid)

    def candidate_step(self, t: int, rows: Sequence[np.ndarray] | np.ndarray) -> dict[str, np.ndarray]:
        """The server step of round ``t`` from decoded messages (the subclass's ``step_from``), into new arrays;
        nothing of the server changes.

        Raises
        ------
        ValueError
            A new state array is not finite.
        """
        # overflows are reported by the check below, not as NumPy warnings
        with np.errstate(over="ignore", invalid="ignore"):
            new = self.step_from(t, rows)
        bad = [name for name, value in new.items() if not np.isfinite(value).all()]
        if bad:
            raise ValueError(f"the server step's new {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not "
                             "finite")
        return new

    def commit(self, new: Mapping[str, np.ndarray]) -> None:
        """Make :meth:`server_step`'s new state arrays the server's (no copy)."""
        for name, value in new.items():
            setattr(self, name, value)


class SubgradientClient:
    """Base of the non-smooth clients: private data, an own random stream, state arrays ``state_names``
    (fields of :class:`~fedmm.federation.SubgradientClientState`:
    :data:`~fedmm.federation.state.SUBGRADIENT_CLIENT_VECTORS`).

    Subclasses implement ``step_many(clients, message)`` (the round for a
    share of clients, one vectorized oracle call per local step, identical
    numbers to one :meth:`step` per client) and send with :meth:`upload`.

    Parameters
    ----------
    index : int
        The client's index ``i``.
    model : NonsmoothProblem
    data : StackedClients
        The client's own samples (one client).
    oracle : SubgradientOracle
        Its oracle on ``data`` with its own stream.
    n_clients : int
        ``n``.
    compressor : compressor of fedmm.compression, optional
        What compresses the client's messages (default
        :class:`~fedmm.compression.Identity`: raw float64 payloads).  A
        compressing client draws from its own stream, child ``1`` of its
        oracle's seed, whose position :meth:`export_state` saves.
    """

    state_names: tuple[str, ...] = ()

    def __init__(self, index: int, model: NonsmoothProblem, data: StackedClients, oracle: SubgradientOracle,
                 n_clients: int, compressor: Any = None) -> None:
        self.index = index
        self.model, self.data, self.oracle = model, data, oracle
        self.n_clients = n_clients
        self.compressor = Identity() if compressor is None else compressor
        #: The compression stream (None for an uncompressed client).
        self.compress_rng = (None if is_uncompressed(self.compressor)
                             else np.random.default_rng(derive_seed(oracle.seeds[0], 1)))
        #: The stacked data of the last share of clients this client led in ``stack_share`` (shares are
        #: fixed between rounds, so they are stacked once); None before the first call.
        self.share_cache: tuple[tuple[int, ...], StackedClients] | None = None

    def setup(self, message: SetupMessage) -> bytes:
        """No set-up exchange: an empty payload."""
        return b""

    def step(self, message: Any) -> bytes:
        """One round of local training; returns the payload (see :meth:`upload`)."""
        return type(self).step_many([self], message)[0]

    @staticmethod
    def step_many(clients: Sequence["SubgradientClient"], message: Any) -> list[bytes]:  # pragma: no cover
        raise NotImplementedError

    def upload(self, values: np.ndarray, reference: np.ndarray | None = None,
               parts: int = 1) -> tuple[bytes, np.ndarray]:
        r"""The payload carrying ``values`` and the values the server will decode from it.

        Uncompressed (:func:`is_uncompressed`): ``values`` as float64 bytes
        (:func:`encode_vector`), decoded exactly.  Otherwise
        :math:`d = v − r` (``r = reference``, zero when None) cut into
        ``parts`` equal pieces, each compressed with the client's own stream
        (one part: the compressor's payload itself; several: joined by
        :func:`join_parts`); the server decodes
        :math:`r + \mathrm{Quant}(d)`, unbiased for :math:`v`.

        Returns
        -------
        payload : bytes
        received : ndarray
            What :meth:`SubgradientServer.decode_all` reconstructs (``values`` itself when uncompressed).
        """
        if self.compress_rng is None:
            # the vector itself, not reference + (values − reference): that round trip changes the last bits,
            # and an uncompressed run must keep the numbers of the family before compression existed
            return encode_vector(values), values
        delta = values if reference is None else values - reference
        pieces = np.split(np.ascontiguousarray(delta, dtype=np.float64), parts)
        encoded = [self.compressor.encode(piece, self.compress_rng) for piece in pieces]
        received = np.concatenate([np.asarray(self.compressor.decode(b), dtype=np.float64) for b in encoded])
        if reference is not None:
            received += reference
        return (join_parts(encoded) if parts > 1 else encoded[0]), received

    def export_state(self) -> SubgradientClientState:
        """The client's state as a frozen value: its vectors (``state_names``) and its streams' positions
        (the oracle's minibatch stream, the compression stream): a runtime's snapshot, a checkpoint's client
        state.  Its arrays are read-only copies."""
        return SubgradientClientState(**{name: getattr(self, name) for name in self.state_names},
                                      **self._stream_fields())

    def import_state(self, state: SubgradientClientState, like_theta: Any = None) -> None:
        """Continue from ``state`` (an :meth:`export_state` value of a client of the same method and
        configuration; ``like_theta``, the parameter's structure in the :class:`fedmm.protocols.ClientParty`
        contract, is not needed here).

        Raises
        ------
        TypeError
            ``state`` is not a :class:`~fedmm.federation.SubgradientClientState`.
        ValueError
            ``state`` lacks one of this client's vectors or streams, or holds what it does not carry.
        """
        self._check_state(state)
        for name, value in _state_vectors(state, SUBGRADIENT_CLIENT_VECTORS, self.state_names, None,
                                          type(self)).items():
            setattr(self, name, value)
        self._import_streams(state)

    @staticmethod
    def _check_state(state: Any) -> None:
        if not isinstance(state, SubgradientClientState):
            raise TypeError(f"Expected 'state' to be a SubgradientClientState (export_state()), got "
                            f"{type(state).__name__}")

    def _stream_fields(self) -> dict[str, Any]:
        """The streams' positions as :class:`~fedmm.federation.SubgradientClientState` fields."""
        oracle = self.oracle.get_state()
        return {"oracle_calls": int(oracle["calls"]), "oracle_rngs": oracle.get("rngs"),
                "oracle_buffer": oracle.get("buffer"), "oracle_pos": int(oracle["pos"]) if "pos" in oracle else None,
                "compression": None if self.compress_rng is None else pcg64_state(self.compress_rng)}

    def _import_streams(self, state: SubgradientClientState) -> None:
        owner = type(self).__name__
        minibatch = self.oracle.batch_size is not None
        if (state.oracle_rngs is not None) != minibatch:
            raise ValueError(f"Expected a {owner} state {'with' if minibatch else 'without'} a minibatch stream "
                             "('oracle_rngs', 'oracle_buffer', 'oracle_pos'), got one "
                             f"{'without' if minibatch else 'with'}")
        if (state.compression is not None) != (self.compress_rng is not None):
            compressing = self.compress_rng is not None
            raise ValueError(f"Expected a {owner} state {'with' if compressing else 'without'} a 'compression' "
                             f"stream, got one {'without' if compressing else 'with'}")
        oracle: dict[str, Any] = {"calls": state.oracle_calls}
        if minibatch:
            oracle.update(rngs=state.oracle_rngs, buffer=state.oracle_buffer, pos=state.oracle_pos)
        self.oracle.set_state(oracle)
        if self.compress_rng is not None:
            set_pcg64_state(self.compress_rng, state.compression)

    @staticmethod
    def stack_share(clients: Sequence["SubgradientClient"]) -> StackedClients:
        """The samples of a share of clients stacked in order (cached on the first client: shares are fixed)."""
        first = clients[0]
        key = tuple(c.index for c in clients)
        if first.share_cache is None or first.share_cache[0] != key:
            if len(clients) == 1:
                share = first.data
            else:
                counts = np.array([c.data.design.shape[0] for c in clients], dtype=np.int64)
                share = StackedClients(
                    np.vstack([c.data.design for c in clients]),
                    np.concatenate([c.data.target for c in clients]),
                    np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                    np.repeat(np.arange(len(clients), dtype=np.int64), counts),
                )
            first.share_cache = (key, share)
        return first.share_cache[1]


# -- the method skeleton -------------------------------------------------------------------------------------
class _ObjectiveMonitor:
    """``objective`` ``F`` at the server point on the rounds its :class:`Cadence` makes due."""

    def __init__(self, model: NonsmoothProblem, data: StackedClients, server: SubgradientServer,
                 cadence: Cadence) -> None:
        self.model, self.data, self.server, self.cadence = model, data, server, cadence

    def objective(self) -> float:
        return self.model.objective(self.data, self.server.x)

    def due(self, t: int) -> bool:
        return self.cadence.due(t)

    def __call__(self, t: int, gamma: float) -> dict:
        return {"objective": self.objective()} if self.cadence.due(t) else {}


def _check_problem(model: Any, name: str) -> NonsmoothProblem:
    if not isinstance(model, NonsmoothProblem):
        raise TypeError(f"Expected '{name}' to be a fedmm.models.nonsmooth problem (HingeSVM, L1Regression), "
                        f"got {type(model).__name__}")
    return model


def _check_batch_size(batch_size: Any, name: str) -> float | int:
    return check_batch_size(batch_size)


class FederatedSubgradientMethod(FederatedAlgorithm):
    r"""Base of the non-smooth family (FedMLS, FedAvg, Scaffold, Scaffnew): arguments, ``build`` and ``run``.

    Subclasses set ``name``, implement :meth:`config`, ``build_server`` and
    ``build_client``, and may extend :meth:`final_state`.

    Parameters
    ----------
    model : NonsmoothProblem
        :class:`~fedmm.models.nonsmooth.HingeSVM` or
        :class:`~fedmm.models.nonsmooth.L1Regression`.
    oracle : {"minibatch", "full"}
        Unbiased minibatch estimates or exact subgradients of the ``f_i``.
    batch_size : float in (0, 1] or int >= 1
        Each client's minibatch: a float is a fraction of the client's
        samples (``⌈batch_size · m_i⌉``, at least one; the paper: 0.1), an
        int a number of samples (clipped to the client's ``m_i``).  Unused
        with ``oracle="full"``.
    n_threads : int >= 1
        Threads of the default in-process runtime.
    batched : bool
        Let the default runtime run each thread's share of clients with one
        vectorized call per local step (``step_many``) instead of one call per
        client; the numbers are the same.
    """

    name = "base"
    #: The constructor's checks (:meth:`~fedmm.algorithms.FederatedAlgorithm.set_parameters`); subclasses
    #: extend them with their own arguments.
    parameter_constraints = {
        "model": Rule(_check_problem, "a fedmm.models.nonsmooth problem"),
        "oracle": Options("full", "minibatch"),
        "batch_size": Rule(_check_batch_size, "a fraction in (0, 1] (float) or a count >= 1 (int)"),
        "n_threads": Integer(low=1),
        "batched": Boolean(),
    }

    def __init__(self, model: NonsmoothProblem, *, oracle: str = "minibatch", batch_size: float | int = 0.1,
                 n_threads: int = 1, batched: bool = True) -> None:
        self.set_parameters(model=model, oracle=oracle, batch_size=batch_size, n_threads=n_threads, batched=batched)

    def config(self) -> dict:
        """The hyper-parameters as JSON-friendly values (recorded in ``History.config``)."""
        return {"model": repr(self.model), "oracle": self.oracle,
                "batch_size": self.batch_size if self.oracle == "minibatch" else None}

    def build_server(self, n_clients: int, x0: np.ndarray, seed: np.random.SeedSequence) -> SubgradientServer:
        """The server for ``n_clients`` clients starting at ``x0`` (``seed``: its own stream)."""
        raise NotImplementedError  # pragma: no cover

    def build_client(self, index: int, data: StackedClients, oracle: SubgradientOracle, x0: np.ndarray,
                     n_clients: int) -> SubgradientClient:
        """Client ``index`` on its own ``data`` with its ``oracle``, starting at ``x0``."""
        raise NotImplementedError  # pragma: no cover

    def _build(self, stacked: StackedClients, seed: np.random.SeedSequence, init: Any):
        n, p = stacked.n_clients, stacked.n_params
        x0 = np.zeros(p) if init is None else self.model.check_w(init, p, "init").copy()
        # Streams 0..n-1 for the clients, n for the server (the children seed.spawn(n + 1) would give
        # a fresh seed, derived without mutating it).
        children = [derive_seed(seed, i) for i in range(n + 1)]
        batch_size = self.batch_size if self.oracle == "minibatch" else None
        clients = []
        for i in range(n):
            lo, hi = stacked.offsets[i], stacked.offsets[i + 1]
            own = StackedClients(stacked.design[lo:hi], stacked.target[lo:hi], np.array([0, hi - lo]),
                                 np.zeros(hi - lo, dtype=np.int64))
            oracle = SubgradientOracle(self.model, own, batch_size, [children[i]])
            clients.append(self.build_client(i, own, oracle, x0, n))
        return self.build_server(n, x0, children[n]), clients

    def build(self, datas: Sequence[Any], *, seed: Any = None, init: Any = None):
        """Validated server and clients for ``datas`` (what :meth:`run` hands to the runtime).

        Parameters
        ----------
        datas : list of (A, y)
            The clients' data sets.
        seed : None, int, SeedSequence or Generator
            Root of the clients' minibatch streams and the server's stream
            (see :func:`fedmm.algorithms.check_seed`).
        init : array_like of shape (p,), optional
            The starting point ``x_0`` (default zeros).

        Returns
        -------
        server : SubgradientServer
        clients : list of SubgradientClient
        """
        return self._build(self.model.stack(datas), check_seed(seed), init)

    def final_state(self, server: SubgradientServer, clients: Sequence[SubgradientClient]) -> dict:
        """``History.state`` at the end of a run (the server's state arrays)."""
        return server.state()

    # -- the run's hooks (FederatedAlgorithm.run) ------------------------------------------
    def check_run_args(self, n_rounds: int, evaluate_every: Any) -> dict[str, Any]:
        """``evaluate_every`` (>= 0, the objective's :class:`~fedmm.algorithms.Cadence`)."""
        return {"evaluate_every": Cadence(evaluate_every, n_rounds, name="evaluate_every").every}

    def build_parties(self, datas: Sequence[Any], *, seed: Any, init: Any, on_client_error: str,
                      run_args: dict[str, Any]) -> tuple[SubgradientServer, list[SubgradientClient]]:
        """:meth:`build` (there is no exchange before the rounds); ``run_args['stacked']`` keeps the
        stacked data for the objective."""
        stacked = self.model.stack(datas)
        run_args["stacked"] = stacked
        return self._build(stacked, seed, init)

    def check_evaluate_data(self, evaluate_data: Any, *, server: SubgradientServer,
                            clients: Sequence[SubgradientClient]) -> StackedClients | None:
        """Client data sets with the features of ``datas`` (stacked), or None."""
        if evaluate_data is None:
            return None
        stacked = self.model.stack(evaluate_data, "evaluate_data")
        if stacked.n_params != server.x.shape[0]:
            raise ValueError(f"Expected 'evaluate_data' with the features of 'datas' ({server.x.shape[0]} "
                             f"parameters), got {stacked.n_params}")
        return stacked

    def make_monitor(self, server: SubgradientServer, clients: Sequence[SubgradientClient], *, n_rounds: int,
                     evaluate_data: Any, run_args: dict[str, Any]) -> "_ObjectiveMonitor":
        """The objective ``F`` at the server point at the ``evaluate_every`` cadence (on ``evaluate_data``
        when given)."""
        data = run_args["stacked"] if evaluate_data is None else evaluate_data
        return _ObjectiveMonitor(self.model, data, server, Cadence(run_args["evaluate_every"], n_rounds))

    def record_start(self, history: History, *, server: SubgradientServer, clients: Sequence[SubgradientClient],
                     monitor: "_ObjectiveMonitor", init: Any, run_args: dict[str, Any]) -> None:
        """``F(x_0)`` when the objective is evaluated."""
        record_initial(history, monitor.objective if monitor.cadence else None)

    def choose_runtime(self, runtime: Any, *, server: SubgradientServer, clients: Sequence[SubgradientClient],
                       history: History, on_client_error: str) -> Any:
        """``runtime``, or the in-process one with ``n_threads``, ``batched`` and the fault policy."""
        if runtime is not None:
            return runtime
        return LocalRuntime(n_threads=self.n_threads, batched=self.batched, on_client_error=on_client_error)

    def fingerprint_fields(self, server: SubgradientServer, clients: Sequence[SubgradientClient], *,
                           evaluate_data: Any, run_args: dict[str, Any]) -> dict[str, Any]:
        """The clients' data (and ``evaluate_data``'s) digests."""
        def digest(stacked: StackedClients) -> str:
            return data_digest([stacked.design, stacked.target, stacked.offsets])

        return {"data": data_digest([[c.data.design, c.data.target] for c in clients]),
                "evaluate_data": None if evaluate_data is None else digest(evaluate_data)}

    def server_params(self, server: SubgradientServer) -> dict[str, Any]:
        """``{"x": x}``: the server point (a copy)."""
        return {"x": server.x.copy()}

    def callback_state(self, server: SubgradientServer, clients: Sequence[SubgradientClient]) -> dict[str, Any]:
        """The server's state arrays (copies): ``"x"``, plus ``"c"`` (Scaffold) or ``"y"``, ``"z"`` (FedMLS)."""
        return server.state()

    def final_theta(self, server: SubgradientServer, clients: Sequence[SubgradientClient]) -> Any:
        """The server point ``x`` (a copy)."""
        return server.x.copy()

    def run(self, datas: Sequence[Any], n_rounds: int, *, seed: Any = None, init: Any = None,
            runtime: Any = None, on_client_error: str | None = None, progress: bool | None = None,
            callback: Callable[[int, Mapping[str, Any]], None] | None = None, evaluate_every: int = 0,
            evaluate_data: Sequence[Any] | None = None, resume: Any = None, checkpoint_every: int = 0,
            checkpoint_path: Any = None) -> History:
        r"""Run ``n_rounds`` communication rounds on the clients' data.

        Parameters
        ----------
        datas : list of (A, y)
            Client data sets (see :mod:`fedmm.models.nonsmooth`).
        n_rounds : int >= 0
            Communication rounds; round ``t = 0, 1, …`` is the paper's ``k = t + 1``.
        seed : None, int, SeedSequence or Generator
            Root of all randomness (one minibatch stream per client, the
            server's stream), normalized by :func:`fedmm.algorithms.check_seed`
            (a Generator is advanced; None draws OS entropy).  The normalized
            seed is recorded in ``history.config["seed"]``
            (:func:`fedmm.algorithms.seed_repr`): passing
            ``seed=fedmm.algorithms.seed_from_repr(history.config["seed"])``
            reproduces the run bit for bit.
        init : array_like of shape (p,), optional
            The starting point ``x_0`` (default zeros, as in the paper).
        runtime : object, optional
            Anything with ``run(server, clients, n_rounds, history=, monitor=,
            callback=, progress=)`` (:class:`fedmm.runtime.LocalRuntime`,
            :class:`fedmm.runtime.RayRuntime`); default a local one with this
            object's ``n_threads`` and ``batched``.  The numbers do not depend
            on the runtime.
        progress : bool or None
            A tqdm progress bar on standard error: True on, False off, None
            (default) on only when standard error is a terminal.
        callback : callable(t, state), optional
            Called after round ``t`` (0-based) with a read-only mapping
            (``types.MappingProxyType``): ``state["params"]`` is ``{"x": x}``
            (the server point, what ``History.params`` holds) and the other
            keys the server's state arrays (copies): ``"x"`` for every method,
            plus ``"c"`` (Scaffold) or ``"y"``, ``"z"`` (FedMLS).
        evaluate_every : int >= 0
            Record ``objective`` :math:`F(x)` at the server point every this
            many rounds and at the last round (:class:`fedmm.algorithms.Cadence`);
            0 never.  ``F(x_0)`` then goes to ``history.initial["objective"]``.
        evaluate_data : list of (A, y), optional
            Client data sets on which :math:`F` is evaluated instead of ``datas``
            (e.g. held-out data; :math:`F` averages over their count).
        on_client_error : {'drop', 'raise'} or None
            The default runtime's fault policy (see
            :meth:`fedmm.algorithms.FederatedAlgorithm.run`): under ``'drop'`` a
            client that fails, or whose payload fails validation, is left out of
            that round (its state unchanged, the reason in ``drop_reasons``) and
            the server averages the clients that answered.
        resume, checkpoint_every, checkpoint_path
            Checkpoints and resumption, bit for bit, as
            :meth:`fedmm.algorithms.FederatedAlgorithm.run` describes them.

        Returns
        -------
        History
            One record per round (see the module docstring); ``initial`` the
            values at ``x_0``; ``state`` holds the final server arrays,
            ``params`` and ``theta`` the final point as ``{"x": x}`` and ``x``.
        """
        return super().run(datas, n_rounds, seed=seed, init=init, runtime=runtime, on_client_error=on_client_error,
                           progress=progress, callback=callback, evaluate_every=evaluate_every,
                           evaluate_data=evaluate_data, resume=resume, checkpoint_every=checkpoint_every,
                           checkpoint_path=checkpoint_path)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r}, {self.config()})"

    # -- the parties apart from the data (fedmm.protocols.RemoteAlgorithm) -------------------------------
    def message_class(self) -> type:
        """The class of this method's round messages (its ``from_arrays`` rebuilds them)."""
        raise NotImplementedError  # pragma: no cover

    def remote_config(self) -> dict:
        """``History.config`` of a run whose parties live apart (:class:`fedmm.protocols.RemoteAlgorithm`)."""
        return self.config()

    def describe_data(self, data: Any, partition_id: int) -> dict[str, np.ndarray]:
        """A node's data description: ``"n-samples"`` (its ``m_i``) and ``"n-params"`` (the length of ``x``)."""
        A, _ = self.model.check_data(data, f"partition {partition_id}")
        return {"n-samples": np.array([A.shape[0]], dtype=np.int64),
                "n-params": np.array([self.model.n_params(A.shape[1])], dtype=np.int64)}

    def remote_server(self, n_clients: int, *, descriptions: Sequence[Mapping[str, np.ndarray]], seed: int,
                      init: Any = None, init_datas: Sequence[Any] | None = None,
                      public_data: Any = None) -> SubgradientServer:
        """The server :meth:`run` builds, from the nodes' descriptions (``init``: ``x_0``, default zeros)."""
        for name, value in (("init_datas", init_datas), ("public_data", public_data)):
            if value is not None:
                raise TypeError(f"{self.name} takes no {name!r}")
        n = check_int(n_clients, "n_clients", low=1)
        if len(descriptions) != n:
            raise ValueError(f"Expected {n} data descriptions (one per client), got {len(descriptions)}")
        sizes = [int(np.asarray(d["n-params"]).reshape(-1)[0]) for d in descriptions]
        if len(set(sizes)) != 1:
            raise ValueError(f"Expected every partition's data with the same number of features, got parameter "
                             f"lengths {sizes} (by partition)")
        x0 = np.zeros(sizes[0]) if init is None else self.model.check_w(init, sizes[0], "init").copy()
        # the streams of _build: 0..n-1 for the clients, n for the server
        return self.build_server(n, x0, derive_seed(check_seed(seed), n))

    def remote_client(self, index: int, data: Any, *, n_clients: int, seed: int,
                      public_data: Any = None) -> SubgradientClient:
        """Client ``index`` on its node's ``data``: the client :meth:`run` builds for the same seed."""
        if public_data is not None:
            raise TypeError(f"{self.name} takes no 'public_data'")
        n = check_int(n_clients, "n_clients", low=1)
        index = check_int(index, "index", low=0, high=n - 1)
        own = self.model.stack([self.model.check_data(data, f"partition {index}")])
        batch_size = self.batch_size if self.oracle == "minibatch" else None
        oracle = SubgradientOracle(self.model, own, batch_size, [derive_seed(check_seed(seed), index)])
        return self.build_client(index, own, oracle, np.zeros(own.n_params), n)

    def broadcast_from_arrays(self, arrays: Sequence[np.ndarray], layout: str) -> Any:
        """A round message of :meth:`message_class` rebuilt from its ``to_arrays``."""
        return self.message_class().from_arrays(arrays)

    def client_state(self, client: SubgradientClient) -> SubgradientClientState:
        """The client's :meth:`~SubgradientClient.export_state` (its random streams included)."""
        return client.export_state()

    def client_state_from_arrays(self, arrays: Mapping[str, np.ndarray]) -> SubgradientClientState:
        """A :meth:`client_state` value from its ``to_arrays()`` (:meth:`SubgradientClientState.from_arrays`)."""
        return SubgradientClientState.from_arrays(arrays)

    def restore_client(self, client: SubgradientClient, state: SubgradientClientState, message: Any) -> None:
        """Put a :meth:`client_state` value back into a fresh client (:meth:`~SubgradientClient.import_state`)."""
        client.import_state(state)

    def estimate(self, server: SubgradientServer) -> np.ndarray:
        """The server point ``x`` (what ``run``'s ``objective`` is evaluated at)."""
        return server.x

    def remote_finish_needs_clients(self) -> bool:
        """Whether :meth:`final_state` reads the clients' state (FedMLS); False here."""
        return False

    def remote_finish(self, server: SubgradientServer, history: History,
                      client_states: Mapping[int, SubgradientClientState] | None = None) -> None:
        """``history.state`` (:meth:`final_state`), ``params`` and ``theta`` as :meth:`run` sets them.

        ``client_states[i]`` (client ``i``'s :meth:`client_state`) stand in
        for the clients when :meth:`remote_finish_needs_clients` is true.
        """
        clients: list[Any] = []
        if self.remote_finish_needs_clients():
            if client_states is None or sorted(client_states) != list(range(server.n_clients)):
                raise ValueError(f"{self.name} needs every client's final state, got clients "
                                 f"{sorted(client_states or {})}")
            clients = [client_states[i] for i in range(server.n_clients)]  # the values hold the clients' vectors
        history.state.update(self.final_state(server, clients))
        history.params = {"x": history.state["x"].copy()}
        history.theta = history.state["x"].copy()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _paper_rule(value: Any, name: str, form: str) -> Schedule:
    """A number ``c`` is the constant of the paper's rule ``(form, c)``; anything else is the schedule itself."""
    if _is_number(value):
        return Schedule((form, check_real(value, name, low=0.0, low_open=True)), name=name)
    return Schedule(value, name=name)


def check_message_compressor(compressor: Any) -> Any:
    """The family's ``compressor=``: None is :class:`~fedmm.compression.Identity` (no compression); else one
    compressor or a sequence of one per client (:func:`fedmm.algorithms.check_compressor`)."""
    return Identity() if compressor is None else check_compressor(compressor)


def compressor_description(compressor: Any) -> Any:
    """``compressor`` for ``History.config``: its repr, or the list of the per-client reprs."""
    if isinstance(compressor, (list, tuple)):
        return [repr(c) for c in compressor]
    return repr(compressor)


def check_full_participation(method: str, clients_per_round: Any, participation_prob: Any,
                             why: str) -> tuple[None, float | None]:
    """Refuse client sampling for a method whose paper does not define it.

    ``clients_per_round`` must be None and ``participation_prob`` None or 1
    (every client, what the method does); otherwise a ``ValueError`` names
    the argument, and ``why`` says where the method's paper leaves it out.
    Returns the two, validated.
    """
    count, prob = check_participation(clients_per_round, participation_prob)
    for name, value, full in (("clients_per_round", count, count is None),
                              ("participation_prob", prob, prob is None or prob == 1.0)):
        if not full:
            raise ValueError(f"{method} does not sample clients: {why}; expected '{name}' to be None, "
                             f"got {value!r}")
    return count, prob


def _inverse_sqrt_rule(value: Any, name: str) -> Schedule:
    return _paper_rule(value, name, "inverse_sqrt")


def _count_schedule(value: Any, name: str) -> Schedule:
    return Schedule(value, domain="count", name=name)


#: ``local_lr`` of FedAvg and Scaffnew: a number ``η_0`` of ``η_0/√k``, or any schedule.
_INVERSE_SQRT_LR = Rule(_inverse_sqrt_rule, "a number eta_0 > 0 of eta_0/sqrt(k), or a Schedule spec")
#: ``local_steps``: ``T_k >= 1``.
_LOCAL_STEPS = Rule(_count_schedule, "an int >= 1 or a Schedule spec of counts")


# -- FedAvg ----------------------------------------------------------------------------------------------------
class FedAvgServer(SubgradientServer):
    """FedAvg's server: selects the round's clients, broadcasts ``x``, ``T_k``, ``η_k``; sets ``x`` to the mean
    of the clients that answered.

    ``decoders``, ``clients_per_round``, ``participation_prob`` and ``seed``: see :class:`SubgradientServer`.
    """

    def __init__(self, n_clients: int, x0: np.ndarray, local_steps: Schedule, step: Schedule,
                 decoders: Sequence[Any] | None = None, *, clients_per_round: int | None = None,
                 participation_prob: float = 1.0, seed: np.random.SeedSequence | None = None) -> None:
        super().__init__(n_clients, x0, decoders, clients_per_round=clients_per_round,
                         participation_prob=participation_prob, seed=seed)
        self.local_steps, self.step = local_steps, step
        self._round: tuple[int, float] | None = None

    def broadcast(self, t: int) -> FedAvgMessage:
        """Round ``k = t + 1``: ``x`` with ``T_k`` and ``η_k``."""
        k = t + 1
        T, step = self.local_steps(k), self.step(k)
        self._round = (T, step)
        return FedAvgMessage(self.x.copy(), T, step)

    def aggregate(self, t: int, payloads: dict, on_invalid: Any = None) -> dict:
        r""":math:`x \leftarrow \frac{1}{|R|} \sum_{i \in R} \hat u_i` over the clients :math:`R` whose valid
        message arrived (:math:`\hat u_i = u_i`, or :math:`x + \mathrm{Quant}(u_i − x)` compressed);
        ``x`` is unchanged when no client answered.  Atomic, under the fault policy (:meth:`server_step`)."""
        T, step = self._round
        ids, U = self.decode_all(t, payloads, self.x.shape[0], on_invalid, reference=self.x)
        self.commit(self.server_step(t, ids, U, on_invalid))
        self.total_local_steps += T
        return {"gamma": 1.0, "step": step, "local_steps": T, "total_local_steps": self.total_local_steps}

    def step_from(self, t: int, rows: Sequence[np.ndarray] | np.ndarray) -> dict[str, np.ndarray]:
        """The new ``x``: the mean of the messages (``x`` itself without any)."""
        return {"x": mean_aggregate(rows, self.x.shape[0]) if len(rows) else self.x}


class FedAvgClient(SubgradientClient):
    """A FedAvg client: ``T_k`` steps ``u ← u − η_k ĝ_i(u)`` from ``x``; sends ``u`` (uncompressed) or
    ``Quant(u − x)`` (:meth:`SubgradientClient.upload`)."""

    @staticmethod
    def step_many(clients: Sequence[SubgradientClient], message: FedAvgMessage) -> list[bytes]:
        """The round for a share of clients (one vectorized oracle call per local step)."""
        oracle = ShareOracle(clients, message.local_steps)
        U = np.tile(message.x, (len(clients), 1))
        for s in range(message.local_steps):
            U -= message.step * oracle(U, s)
        return [client.upload(U[j], message.x)[0] for j, client in enumerate(clients)]


class FedAvg(FederatedSubgradientMethod):
    r"""Federated averaging (local subgradient method) with :math:`η_k = η_0/\sqrt{k}`.

    Round :math:`k = t + 1`: the server selects the clients :math:`S_k` (all of
    them by default), each starts from the server point :math:`x`, runs
    :math:`T_k` steps :math:`u \leftarrow u − η_k \hat g_i(u)` (:math:`\hat g_i`
    a (minibatch) subgradient of :math:`f_i`), and the server sets
    :math:`x \leftarrow \frac{1}{|R_k|} \sum_{i \in R_k} \hat u_i` over the
    clients :math:`R_k \subseteq S_k` that answered (recorded ``gamma = 1``).

    With a ``compressor`` client :math:`i` sends :math:`\mathrm{Quant}(u_i − x)`,
    the difference from the point the server holds, and the server uses
    :math:`\hat u_i = x + \mathrm{Quant}(u_i − x)`: so the update is
    :math:`x \leftarrow x + \frac{1}{|R_k|}\sum_{i \in R_k} \mathrm{Quant}(u_i − x)`,
    whose expectation over the compression is the uncompressed one (the
    compressors are unbiased), and whose error
    :math:`\mathbb{E}\|\hat u_i − u_i\|^2 \leq ω\|u_i − x\|^2` vanishes as the
    local steps shrink.  An :class:`~fedmm.compression.Identity` compressor
    (the default) sends :math:`u_i` itself as raw float64 (the numbers and
    ``bytes_up`` of a run without compression, bit for bit).

    Parameters
    ----------
    model : NonsmoothProblem
    local_lr : float or Schedule spec
        The clients' step: a number is :math:`η_0` of the paper's rule
        :math:`η_k = η_0/\sqrt{k}`; any other :class:`~fedmm.algorithms.Schedule`
        spec (a callable ``k -> η_k``, ``("inverse", c)``, a ``Schedule``...)
        gives :math:`η_k` itself (recorded per round as ``step``).
    local_steps : int or Schedule spec
        :math:`T_k \geq 1`; default ``("linear", 1)``, i.e. :math:`T_k = k` (the paper's choice).
    clients_per_round : int, optional
        Partial participation (FedAvg's client sampling, McMahan et al. 2017):
        :math:`|S_k| = m` clients drawn uniformly without replacement each round
        from the server's own stream (reproducible, the same on every runtime);
        the average stays unweighted, as the objective :math:`\frac1n\sum_i f_i`.
    participation_prob : float in (0, 1], optional
        Partial participation with each client in :math:`S_k` independently
        with this probability (a round may select nobody: ``x`` stays).  At most
        one of the two; default every client.
    compressor : compressor or sequence of n compressors, optional
        Unbiased compressor(s) of :mod:`fedmm.compression` for the clients'
        messages (one per client if a sequence); default
        :class:`~fedmm.compression.Identity`.
    oracle, batch_size, n_threads, batched
        See :class:`FederatedSubgradientMethod`.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.models.nonsmooth import HingeSVM
    >>> rng = np.random.default_rng(0)
    >>> datas = [(rng.normal(size=(20, 2)), rng.choice([-1.0, 1.0], 20)) for _ in range(3)]
    >>> h = FedAvg(HingeSVM(), local_lr=0.01).run(datas, 5, seed=0, evaluate_every=1)
    >>> h["local_steps"].tolist(), h["t"].tolist()
    ([1.0, 2.0, 3.0, 4.0, 5.0], [0.0, 1.0, 2.0, 3.0, 4.0])
    """

    name = "FedAvg"
    parameter_constraints = {**FederatedSubgradientMethod.parameter_constraints,
                             "local_steps": _LOCAL_STEPS, "local_lr": _INVERSE_SQRT_LR}

    def __init__(self, model: NonsmoothProblem, *, local_lr: Any, local_steps: Any = ("linear", 1),
                 clients_per_round: int | None = None, participation_prob: float | None = None,
                 compressor: Any = None, oracle: str = "minibatch", batch_size: float | int = 0.1,
                 n_threads: int = 1, batched: bool = True) -> None:
        super().__init__(model, oracle=oracle, batch_size=batch_size, n_threads=n_threads, batched=batched)
        self.set_parameters(local_steps=local_steps, local_lr=local_lr)
        self.clients_per_round, self.participation_prob = check_participation(clients_per_round,
                                                                               participation_prob)
        self.compressor = check_message_compressor(compressor)

    def config(self) -> dict:
        return {**super().config(), "local_steps": self.local_steps.description,
                "local_lr": self.local_lr.description, "clients_per_round": self.clients_per_round,
                "participation_prob": self.participation_prob,
                "compressor": compressor_description(self.compressor)}

    #: The parties :meth:`build_server` and :meth:`build_client` make: a variant of FedAvg (FedProx) names
    #: its own and adds its server's arguments in :meth:`server_options`.
    server_class: type = FedAvgServer
    client_class: type = FedAvgClient

    def server_options(self) -> dict[str, Any]:
        """Extra keyword arguments of :attr:`server_class` (none for FedAvg)."""
        return {}

    def build_server(self, n_clients, x0, seed):
        count, prob = participation(self.clients_per_round, self.participation_prob, n_clients)
        return self.server_class(n_clients, x0, self.local_steps, self.local_lr,
                                 checked_compressors(self.compressor, n_clients, x0.shape[0]),
                                 clients_per_round=count, participation_prob=prob, seed=seed, **self.server_options())

    def build_client(self, index, data, oracle, x0, n_clients):
        return self.client_class(index, self.model, data, oracle, n_clients,
                                 client_compressor(self.compressor, n_clients, index))

    def message_class(self) -> type:
        """:class:`FedAvgMessage`."""
        return FedAvgMessage


# -- Scaffold ----------------------------------------------------------------------------------------------------
class ScaffoldStepRule:
    r"""Scaffold's non-smooth step rule :math:`η_s = η_0/(η_g s)` (a picklable callable ``s -> η_s``).

    ``local_lr`` is :math:`η_0`, ``server_lr`` :math:`η_g`.
    """

    def __init__(self, local_lr: float, server_lr: float) -> None:
        self.local_lr, self.server_lr = local_lr, server_lr

    def __call__(self, s: int) -> float:
        return self.local_lr / (self.server_lr * s)

    def __repr__(self) -> str:
        return f"ScaffoldStepRule({self.local_lr!r}, server_lr={self.server_lr!r})"


class ScaffoldServer(SubgradientServer):
    """Scaffold's server: state ``x`` and the control variate ``c``.

    ``decoders``, ``clients_per_round``, ``participation_prob`` and ``seed``: see :class:`SubgradientServer`.
    """

    state_names = ("x", "c")

    def __init__(self, n_clients: int, x0: np.ndarray, local_steps: Schedule, server_lr: float,
                 decoders: Sequence[Any] | None = None, *, clients_per_round: int | None = None,
                 participation_prob: float = 1.0, seed: np.random.SeedSequence | None = None) -> None:
        super().__init__(n_clients, x0, decoders, clients_per_round=clients_per_round,
                         participation_prob=participation_prob, seed=seed)
        self.c = np.zeros_like(x0)
        self.local_steps, self.server_lr = local_steps, server_lr
        self._T = 0

    def broadcast(self, t: int) -> ScaffoldMessage:
        """Round ``k = t + 1``: ``x``, ``c`` and the round's :math:`T_k` local steps."""
        self._T = self.local_steps(t + 1)
        return ScaffoldMessage(self.x.copy(), self.c.copy(), self.total_local_steps, self._T)

    def aggregate(self, t: int, payloads: dict, on_invalid: Any = None) -> dict:
        r""":math:`x \leftarrow x + \frac{η_g}{|R|} \sum_{i \in R} Δy_i`,
        :math:`c \leftarrow c + \frac1N \sum_{i \in R} Δc_i` over the clients :math:`R` whose valid message
        arrived (Karimireddy et al. 2020, Algorithm 1 lines 16-17, with :math:`R` for the sampled
        :math:`S`: a dropped client's :math:`c_i` is unchanged, so :math:`c = \frac1N \sum_i c_i` holds);
        compressed, :math:`Δy_i`, :math:`Δc_i` are the decoded :math:`\mathrm{Quant}` values.  Atomic, under
        the fault policy (:meth:`server_step`)."""
        ids, deltas = self.decode_all(t, payloads, 2 * self.x.shape[0], on_invalid, parts=2)
        self.commit(self.server_step(t, ids, deltas, on_invalid))
        self.total_local_steps += self._T
        return {"gamma": self.server_lr, "local_steps": self._T, "total_local_steps": self.total_local_steps}

    def step_from(self, t: int, rows: Sequence[np.ndarray] | np.ndarray) -> dict[str, np.ndarray]:
        """The new ``x`` and ``c`` from the messages ``[Δy_i, Δc_i]`` (``x``, ``c`` themselves without any)."""
        if not len(rows):
            return {"x": self.x, "c": self.c}
        p = self.x.shape[0]
        deltas = np.asarray(rows)  # the decoded (m, 2p) array itself, or the rows of a retry stacked
        return {"x": self.x + self.server_lr * mean_aggregate(deltas[:, :p], p),
                "c": control_variate_update(self.c, sum_aggregate(deltas[:, p:], p), 1.0, n_clients=self.n_clients)}


class ScaffoldClient(SubgradientClient):
    r"""A Scaffold client with control variate ``c_i``; sends ``(Δy_i, Δc_i) = (u − x, c_i⁺ − c_i)`` (2p values).

    ``step_size`` is the schedule :math:`s \mapsto η_s` of the run's local steps.  With a compressor it sends
    :math:`\mathrm{Quant}(Δy_i)` and :math:`\mathrm{Quant}(Δc_i)` as two parts (:func:`join_parts`) and
    sets :math:`c_i \leftarrow c_i + \mathrm{Quant}(Δc_i)`, the value the server adds to ``c``.
    """

    state_names = ("c",)

    def __init__(self, index, model, data, oracle, n_clients, x0: np.ndarray, step_size: Schedule,
                 compressor: Any = None) -> None:
        super().__init__(index, model, data, oracle, n_clients, compressor)
        self.c = np.zeros_like(x0)
        self.step_size = step_size

    @staticmethod
    def step_many(clients: Sequence["ScaffoldClient"], message: ScaffoldMessage) -> list[bytes]:
        """The round for a share of clients (one vectorized oracle call per local step)."""
        first = clients[0]
        oracle = ShareOracle(clients, message.local_steps)
        x = message.x
        U = np.tile(x, (len(clients), 1))
        C = np.stack([c.c for c in clients])
        correction = message.c - C  # c − c_i, fixed during the round
        step_sum = 0.0
        for s in range(message.local_steps):
            step = first.step_size(message.first_step + s + 1)
            U -= step * (oracle(U, s) + correction)
            step_sum += step
        C_new = C - message.c + (x - U) / step_sum
        payloads = []
        p = x.shape[0]
        for j, client in enumerate(clients):
            payload, received = client.upload(np.concatenate([U[j] - x, C_new[j] - C[j]]), parts=2)
            payloads.append(payload)
            # compressed: c_i moves by what the server adds to c, so c = (1/N) Σ_i c_i holds exactly
            client.c = C_new[j].copy() if client.compress_rng is None else C[j] + received[p:]
        return payloads


def _scaffold_lr(value: Any, name: str) -> Schedule | float:
    """Scaffold's ``local_lr``: a number ``η_0`` (of ``η_0/(η_g s)``, kept as a float), or a schedule."""
    if _is_number(value):
        return check_real(value, name, low=0.0, high=1e300, low_open=True)
    return Schedule(value, name=name)


class Scaffold(FederatedSubgradientMethod):
    r"""Scaffold with option-II control variates and the FedMLS paper's non-smooth step rule.

    Round :math:`k = t + 1` (Karimireddy et al. 2020, Algorithm 1): the server
    samples the clients :math:`S` (all of them by default); each client
    :math:`i \in S` starts :math:`u = x` and runs :math:`T_k` steps
    :math:`u \leftarrow u − η_s (\hat g_i(u) − c_i + c)`, :math:`s` counting all
    local steps of the run, then
    :math:`c_i^+ = c_i − c + (x − u)/\sum_s η_s` (option II with the sum of this
    round's step sizes, :math:`T η_l` for a constant step) and sends
    :math:`Δy_i = u − x`, :math:`Δc_i = c_i^+ − c_i`; the server sets
    :math:`x \leftarrow x + \frac{η_g}{|S|}\sum_{i \in S} Δy_i` (:math:`η_g`
    recorded as ``gamma``) and :math:`c \leftarrow c + \frac1N \sum_{i \in S} Δc_i`.
    A client that fails (its step raised, or its message is invalid) is left
    out of both sums, :math:`S` replaced by the clients that answered, and
    keeps its :math:`c_i`.

    With a ``compressor`` the client sends :math:`\mathrm{Quant}(Δy_i)` and
    :math:`\mathrm{Quant}(Δc_i)` (both are already differences from what the
    server holds) and adds :math:`\mathrm{Quant}(Δc_i)` to :math:`c_i`: the
    server's sums use the decoded values, so their expectation is the
    uncompressed update (unbiased compressors) and
    :math:`c = \frac1N \sum_i c_i` holds exactly.  An
    :class:`~fedmm.compression.Identity` compressor (the default) sends the raw
    float64 values (the numbers and ``bytes_up`` of a run without compression).

    Parameters
    ----------
    model : NonsmoothProblem
    local_lr : float or Schedule spec
        The clients' step: a number is :math:`η_0` of :math:`η_s = η_0/(η_g s)`;
        any other :class:`~fedmm.algorithms.Schedule` spec gives :math:`η_s`
        itself (indexed by the local step ``s`` of the run).
    local_steps : int or Schedule spec
        :math:`T_k \geq 1`; default ``("linear", 1)`` (:math:`T_k = k`).
    server_lr : float, optional
        The server's step :math:`η_g`; default :math:`\sqrt{n}` (the paper,
        after Karimireddy et al.), whatever the participation.
    clients_per_round : int, optional
        :math:`|S| = m` clients sampled uniformly without replacement each
        round from the server's own stream (reproducible, the same on every
        runtime).
    participation_prob : float in (0, 1], optional
        Each client in :math:`S` independently with this probability (a round
        may sample nobody: ``x`` and ``c`` stay).  At most one of the two;
        default every client.
    compressor : compressor or sequence of n compressors, optional
        Unbiased compressor(s) of :mod:`fedmm.compression` for the clients'
        messages; default :class:`~fedmm.compression.Identity`.
    oracle, batch_size, n_threads, batched
        See :class:`FederatedSubgradientMethod`.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.models.nonsmooth import HingeSVM
    >>> rng = np.random.default_rng(0)
    >>> datas = [(rng.normal(size=(20, 2)), rng.choice([-1.0, 1.0], 20)) for _ in range(4)]
    >>> h = Scaffold(HingeSVM(), local_lr=0.01, local_steps=3).run(datas, 4, seed=0)
    >>> h["total_local_steps"].tolist(), float(h["gamma"][0]), sorted(h.state)
    ([3.0, 6.0, 9.0, 12.0], 2.0, ['c', 'x'])
    """

    name = "Scaffold"
    parameter_constraints = {**FederatedSubgradientMethod.parameter_constraints,
                             "local_steps": _LOCAL_STEPS,
                             "local_lr": Rule(_scaffold_lr, "a number eta_0 in (0, 1e300] or a Schedule spec"),
                             "server_lr": OptionalConstraint(Real(0.0, 1e300, low_open=True))}

    def __init__(self, model: NonsmoothProblem, *, local_lr: Any, local_steps: Any = ("linear", 1),
                 server_lr: float | None = None, clients_per_round: int | None = None,
                 participation_prob: float | None = None, compressor: Any = None, oracle: str = "minibatch",
                 batch_size: float | int = 0.1, n_threads: int = 1, batched: bool = True) -> None:
        super().__init__(model, oracle=oracle, batch_size=batch_size, n_threads=n_threads, batched=batched)
        self.local_lr: Schedule | float
        self.set_parameters(local_steps=local_steps, local_lr=local_lr, server_lr=server_lr)
        self.clients_per_round, self.participation_prob = check_participation(clients_per_round,
                                                                               participation_prob)
        self.compressor = check_message_compressor(compressor)

    def config(self) -> dict:
        local_lr = (self.local_lr.description if isinstance(self.local_lr, Schedule)
                    else f"{self.local_lr!r}/(server_lr*s)")
        return {**super().config(), "local_steps": self.local_steps.description, "local_lr": local_lr,
                "server_lr": self.server_lr, "clients_per_round": self.clients_per_round,
                "participation_prob": self.participation_prob,
                "compressor": compressor_description(self.compressor)}

    def _server_lr(self, n_clients: int) -> float:
        return math.sqrt(n_clients) if self.server_lr is None else self.server_lr

    def local_lr_schedule(self, n_clients: int) -> Schedule:
        r""":math:`s \mapsto η_s` for ``n_clients`` clients (:math:`η_0/(η_g s)` when ``local_lr`` is a number)."""
        if isinstance(self.local_lr, Schedule):
            return self.local_lr
        return Schedule(ScaffoldStepRule(self.local_lr, self._server_lr(n_clients)), name="local_lr")

    def build_server(self, n_clients, x0, seed):
        count, prob = participation(self.clients_per_round, self.participation_prob, n_clients)
        return ScaffoldServer(n_clients, x0, self.local_steps, self._server_lr(n_clients),
                              checked_compressors(self.compressor, n_clients, x0.shape[0]),
                              clients_per_round=count, participation_prob=prob, seed=seed)

    def build_client(self, index, data, oracle, x0, n_clients):
        return ScaffoldClient(index, self.model, data, oracle, n_clients, x0, self.local_lr_schedule(n_clients),
                              client_compressor(self.compressor, n_clients, index))

    def message_class(self) -> type:
        """:class:`ScaffoldMessage`."""
        return ScaffoldMessage


# -- Scaffnew ----------------------------------------------------------------------------------------------------
class ScaffnewServer(SubgradientServer):
    """Scaffnew's server: flips the communication coins (its own stream) and averages at each communication.

    ``decoders``: see :class:`SubgradientServer` (every client takes part in every communication).
    """

    def __init__(self, n_clients: int, x0: np.ndarray, step: Schedule, communication_prob: Schedule,
                 max_local_steps: int, seed: np.random.SeedSequence, decoders: Sequence[Any] | None = None) -> None:
        super().__init__(n_clients, x0, decoders)
        self.step, self.communication_prob = step, communication_prob
        self.max_local_steps = max_local_steps
        self.coin = np.random.default_rng(seed)
        self._round: tuple[int, float, float] | None = None

    def broadcast(self, t: int) -> ScaffnewMessage:
        r"""Flip coins :math:`s = s_0 + 1, s_0 + 2, …` until one succeeds (probability :math:`p_s`);
        send ``x`` and the local iterations until then."""
        s0 = s = self.total_local_steps
        while True:
            s += 1
            if s > self.max_local_steps:
                raise RuntimeError(f"Scaffnew exceeded max_local_steps={self.max_local_steps} "
                                   f"after {t} communications")
            step = self.step(s)
            prob = self.communication_prob(s)
            if self.coin.random() < prob:
                break
        self._round = (s - s0, step, prob)
        return ScaffnewMessage(self.x.copy(), s0, s - s0)

    def export_state(self) -> SubgradientServerState:
        """:meth:`SubgradientServer.export_state` with the coins' stream (``coin``, :func:`pcg64_state`)."""
        return SubgradientServerState(x=self.x, total_local_steps=self.total_local_steps, coin=pcg64_state(self.coin))

    def import_state(self, state: SubgradientServerState, theta: Any = None) -> None:
        """:meth:`SubgradientServer.import_state`, the coins' stream included (``ValueError`` without one)."""
        self._check_state(state, True)
        if state.coin is None:
            raise ValueError("Expected a ScaffnewServer state with its 'coin' stream, got none")
        self._import_vectors(state)
        set_pcg64_state(self.coin, state.coin)

    def aggregate(self, t: int, payloads: dict, on_invalid: Any = None) -> dict:
        r""":math:`x = \frac{1}{|R|} \sum_{j \in R} (\hat x_j − (η/p) h_j)` over the clients :math:`R` whose
        valid message arrived (compressed: :math:`x_{\text{sent}} + \mathrm{Quant}(\hat x_j − (η/p) h_j −
        x_{\text{sent}})`); ``x`` is unchanged when no client answered.  Atomic, under the fault policy
        (:meth:`server_step`)."""
        T, step, prob = self._round
        ids, X = self.decode_all(t, payloads, self.x.shape[0], on_invalid, reference=self.x)
        self.commit(self.server_step(t, ids, X, on_invalid))
        self.total_local_steps += T
        return {"gamma": 1.0, "step": step, "communication_prob": prob, "local_steps": T,
                "total_local_steps": self.total_local_steps}

    def step_from(self, t: int, rows: Sequence[np.ndarray] | np.ndarray) -> dict[str, np.ndarray]:
        """The new ``x``: the mean of the messages (``x`` itself without any)."""
        return {"x": mean_aggregate(rows, self.x.shape[0]) if len(rows) else self.x}


class ScaffnewClient(SubgradientClient):
    r"""A Scaffnew client with control variate :math:`h_i`.

    It applies the previous communication's update
    :math:`h_i \leftarrow h_i + (p/η)(x − \hat x_i)` when the next message
    brings ``x``, runs the round's local iterations and sends
    :math:`v_i = \hat x_i − (η/p) h_i`.  ``step_size`` and ``communication_prob`` are the
    schedules :math:`η_s`, :math:`p_s`.  With a compressor it sends
    :math:`\mathrm{Quant}(v_i − x)` (``x`` the point it received) and keeps
    :math:`\hat x_i + e_i` for the next update of :math:`h_i`, with
    :math:`e_i = \mathrm{Quant}(v_i − x) − (v_i − x)` the compression error:
    the server averages the decoded :math:`v_i + e_i`, so
    :math:`\sum_i h_i = 0` is kept as without compression.
    """

    def __init__(self, index, model, data, oracle, n_clients, x0: np.ndarray, step_size: Schedule,
                 communication_prob: Schedule, compressor: Any = None) -> None:
        super().__init__(index, model, data, oracle, n_clients, compressor)
        self.step_size, self.communication_prob = step_size, communication_prob
        self.h = np.zeros_like(x0)
        self.x_hat: np.ndarray | None = None  # x̂_i of the last communication
        self.ratio = 0.0                      # its p/η

    @staticmethod
    def step_many(clients: Sequence["ScaffnewClient"], message: ScaffnewMessage) -> list[bytes]:
        """The round for a share of clients (one vectorized oracle call per local step)."""
        first, x = clients[0], message.x
        for client in clients:
            if client.x_hat is not None:  # not in place: unpickled state may be read-only (Ray)
                client.h = client.h + client.ratio * (x - client.x_hat)
        oracle = ShareOracle(clients, message.local_steps)
        X = np.tile(x, (len(clients), 1))
        H = np.stack([c.h for c in clients])
        for s in range(message.local_steps):
            step = first.step_size(message.first_step + s + 1)
            X = X - step * (oracle(X, s) - H)
        prob = first.communication_prob(message.first_step + message.local_steps)
        out = X - (step / prob) * H
        payloads = []
        for j, client in enumerate(clients):
            payload, received = client.upload(out[j], x)
            payloads.append(payload)
            client.x_hat = X[j].copy() if client.compress_rng is None else X[j] + (received - out[j])
            client.ratio = prob / step
        return payloads

    def export_state(self) -> SubgradientClientState:
        """``h_i``, the last ``x̂_i`` (None before the first round), ``ratio`` (``p/η``) and the streams'
        positions, as a frozen value."""
        return SubgradientClientState(h=self.h, x_hat=self.x_hat, ratio=self.ratio, **self._stream_fields())

    def import_state(self, state: SubgradientClientState, like_theta: Any = None) -> None:
        """Continue from an :meth:`export_state` value (``ValueError`` without ``h`` and ``ratio``, or with
        another method's vectors)."""
        self._check_state(state)
        if state.ratio is None:
            raise ValueError("Expected a ScaffnewClient state with its 'ratio', got none")
        vectors = _state_vectors(state, SUBGRADIENT_CLIENT_VECTORS, ("h", "x_hat"), None, type(self),
                                 optional=("x_hat",))
        self.h, self.x_hat, self.ratio = vectors["h"], vectors.get("x_hat"), state.ratio
        self._import_streams(state)


def _communication_prob(value: Any, name: str) -> Schedule:
    """Scaffnew's ``communication_prob``: ``p_s`` in (0, 1] (None: the paper's ``1/√s``)."""
    return Schedule(("inverse_sqrt", 1.0) if value is None else value, domain="unit", name=name)


class Scaffnew(FederatedSubgradientMethod):
    r"""Scaffnew (ProxSkip for federated learning) with :math:`p_s = 1/\sqrt{s}`, :math:`η_s = η_0/\sqrt{s}`.

    Local iteration :math:`s`: :math:`\hat x_i = x_i − η_s (\hat g_i(x_i) − h_i)`;
    with probability :math:`p_s` (one coin for all clients, from the server's
    stream) the clients communicate and set
    :math:`x_i = \frac1n \sum_j (\hat x_j − (η_s/p_s) h_j)`, otherwise
    :math:`x_i = \hat x_i`; then :math:`h_i \leftarrow h_i + (p_s/η_s)(x_i − \hat x_i)`.
    A round ends at each communication: ``n_rounds`` counts communications,
    ``T`` the local steps of the round.  A client that fails (its step raised,
    or its message is invalid) is left out of the average (over the clients
    that answered) and keeps its state, so it applies its pending
    :math:`h_i` update at its next communication.

    Every client takes part in every communication: Scaffnew (ProxSkip,
    Mishchenko et al. 2022, as the FedMLS paper §2 and §4 run it) does not
    sample clients (partial participation is a later method, TAMUNA, Condat
    et al. 2023, FedMLS paper §2), so ``clients_per_round`` and
    ``participation_prob`` are refused.  With a ``compressor`` each client
    sends :math:`\mathrm{Quant}(v_i − x)`, its message relative to the point
    it received, and the server averages
    :math:`x + \mathrm{Quant}(v_i − x)`: unbiased for the uncompressed average
    (see :class:`ScaffnewClient` for the control variates).  An
    :class:`~fedmm.compression.Identity` compressor (the default) sends the raw
    float64 values (the numbers and ``bytes_up`` of a run without compression).

    Parameters
    ----------
    model : NonsmoothProblem
    local_lr : float or Schedule spec
        The clients' step: a number is :math:`η_0` of :math:`η_s = η_0/\sqrt{s}`;
        any other :class:`~fedmm.algorithms.Schedule` spec gives :math:`η_s`
        itself (recorded per round as ``step``).
    communication_prob : float or Schedule spec, optional
        :math:`p_s \in (0, 1]` (a number is a constant); default
        ``("inverse_sqrt", 1.0)``, i.e. :math:`1/\sqrt{s}` (the paper).
    max_local_steps : int
        Raise ``RuntimeError`` rather than run longer than this many iterations.
    compressor : compressor or sequence of n compressors, optional
        Unbiased compressor(s) of :mod:`fedmm.compression` for the clients'
        messages; default :class:`~fedmm.compression.Identity`.
    clients_per_round, participation_prob : None
        Refused (``ValueError``) unless None (``participation_prob=1.0``, every
        client, is accepted): see above.
    oracle, batch_size, n_threads, batched
        See :class:`FederatedSubgradientMethod`.

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.models.nonsmooth import HingeSVM
    >>> rng = np.random.default_rng(0)
    >>> datas = [(rng.normal(size=(20, 2)), rng.choice([-1.0, 1.0], 20)) for _ in range(4)]
    >>> h = Scaffnew(HingeSVM(), local_lr=0.01, communication_prob=0.5).run(datas, 6, seed=0)
    >>> len(h), bool((h["local_steps"] >= 1).all()), bool(h["total_local_steps"][-1] == h["local_steps"].sum())
    (6, True, True)
    """

    name = "Scaffnew"
    parameter_constraints = {**FederatedSubgradientMethod.parameter_constraints,
                             "local_lr": _INVERSE_SQRT_LR,
                             "communication_prob": Rule(_communication_prob, "a probability in (0, 1] or a Schedule "
                                                        "spec of them; None: 1/sqrt(s)"),
                             "max_local_steps": Integer(1, count=True)}

    def __init__(self, model: NonsmoothProblem, *, local_lr: Any, communication_prob: Any = ("inverse_sqrt", 1.0),
                 max_local_steps: int = 10**7, compressor: Any = None, clients_per_round: None = None,
                 participation_prob: None = None, oracle: str = "minibatch", batch_size: float | int = 0.1,
                 n_threads: int = 1, batched: bool = True) -> None:
        participating = check_full_participation(
            "Scaffnew", clients_per_round, participation_prob,
            "ProxSkip's Scaffnew (Mishchenko et al. 2022), as the FedMLS paper runs it (§2, §4), communicates "
            "with every client; client sampling is another method (TAMUNA, Condat et al. 2023, FedMLS paper §2)")
        super().__init__(model, oracle=oracle, batch_size=batch_size, n_threads=n_threads, batched=batched)
        self.set_parameters(local_lr=local_lr, communication_prob=communication_prob, max_local_steps=max_local_steps)
        self.compressor = check_message_compressor(compressor)
        self.clients_per_round, self.participation_prob = participating

    def config(self) -> dict:
        return {**super().config(), "local_lr": self.local_lr.description,
                "communication_prob": self.communication_prob.description, "max_local_steps": self.max_local_steps,
                "clients_per_round": self.clients_per_round, "participation_prob": self.participation_prob,
                "compressor": compressor_description(self.compressor)}

    def build_server(self, n_clients, x0, seed):
        return ScaffnewServer(n_clients, x0, self.local_lr, self.communication_prob, self.max_local_steps, seed,
                              checked_compressors(self.compressor, n_clients, x0.shape[0]))

    def build_client(self, index, data, oracle, x0, n_clients):
        return ScaffnewClient(index, self.model, data, oracle, n_clients, x0, self.local_lr, self.communication_prob,
                              client_compressor(self.compressor, n_clients, index))

    def message_class(self) -> type:
        """:class:`ScaffnewMessage`."""
        return ScaffnewMessage
