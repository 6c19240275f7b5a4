# SPDX-License-Identifier: BSD-3-Clause
"""The FedMM round as data: its configuration and the server's and clients' state, as frozen values; and the
state values of the other families (:class:`SubgradientServerState`, :class:`SubgradientClientState`,
:class:`OTServerState`, :class:`OTClientState`) and of a custom algorithm's parties (:class:`ArrayState`).

Three values cross the layers of a run (:mod:`fedmm.algorithms` ↔ :mod:`fedmm.federation` ↔ the
compiled kernels, checkpoints, Ray and Flower):

- :class:`RoundConfig`: what configures a FedMM round and never changes over the rounds of a run
  (the scalars of ``fedmm_round_config_t`` in ``fedmm_kernels.h``, the server's side of the
  selection, and the constant half of each ``fedmm_client_t``: Philox keys, quantizer specs,
  sample counts);
- :class:`ServerState`: what the server carries from one round to the next (``Ŝ_t``, ``V_t``,
  ``θ_t``);
- :class:`ClientState`: what a client carries (``V_{t,i}``, the model's per-sample memory, the
  SPIDER memory).

They hold numbers only (arrays, ints, floats, strings): no party, model or compressor object.
The random streams need no state: party ``i`` draws round ``t`` from ``Philox(key_i, counter=t)``,
so the keys (configuration) and the round index say everything.  The values compare by identity
(``==`` is not element-wise).  Every array is a read-only NumPy array: an array given to a
constructor is copied unless it is already a read-only ndarray of the right dtype, which is shared
as it is (whoever made it read-only promises that nobody writes it through another view; the
parties and :func:`fedmm.federation.compiled_rounds` keep that promise for the arrays they hand over),
and ``from_arrays`` always copies.  :meth:`ServerState.to_arrays` / :meth:`ClientState.to_arrays`
give the flat ``name → array`` dicts a checkpoint stores (:class:`fedmm.federation.Checkpoint`, format
version 2, unchanged), and ``from_arrays`` reads them back.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

__all__ = ["RoundConfig", "ServerState", "ClientState", "SubgradientServerState", "SubgradientClientState",
           "OTServerState", "OTClientState", "ArrayState", "SUBGRADIENT_SERVER_VECTORS", "SUBGRADIENT_CLIENT_VECTORS",
           "SPACES", "MODES", "ORACLES"]

#: Where the clients' messages live: S-space (FedMM) or Θ-space (the parameter-averaging baseline).
SPACES = ("statistic", "parameter")
#: Who draws the participation: ``'select'`` (Algorithm 2), ``'compress'`` / ``'compress-local'`` (Algorithm 4).
MODES = ("select", "compress", "compress-local")
#: The clients' statistic oracles.
ORACLES = ("minibatch", "full", "spider")

_MEMORY = "memory:"
_F64 = np.dtype(np.float64)
_SPIDER_KEYS = ("spider_S", "spider_theta", "spider_epoch")


def _shared(value: Any) -> bool:
    """Whether ``value`` is a read-only float64 vector that a state takes as it is (the fast path)."""
    return type(value) is np.ndarray and value.ndim == 1 and value.dtype == _F64 and not value.flags.writeable


def _readonly(value: Any, name: str, dtype: Any, ndim: int | None = None, shape: tuple | None = None) -> np.ndarray:
    """``value`` as a read-only array of ``dtype`` (shared when it already is one, else a copy)."""
    if isinstance(value, np.ndarray) and not value.flags.writeable and (dtype is None or value.dtype == dtype):
        arr = value
    else:
        try:
            arr = np.array(value, dtype=dtype, copy=True)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"Expected '{name}' to be an array of {np.dtype(dtype) if dtype else 'numbers'}, "
                            f"got {type(value).__name__}") from exc
        arr.flags.writeable = False
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"Expected '{name}' to be {ndim}-dimensional, got shape {arr.shape}")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"Expected '{name}' of shape {shape}, got {arr.shape}")
    return arr


def _frozen_copy(value: Any) -> np.ndarray:
    """A read-only copy of ``value`` (never shared with the caller)."""
    arr = np.array(value, copy=True)
    arr.flags.writeable = False
    return arr


def _choice(value: Any, name: str, allowed: tuple) -> str:
    if value not in allowed:
        raise ValueError(f"Expected '{name}' in {allowed}, got {value!r}")
    return value


def _integer(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"Expected '{name}' to be an int >= {low}, got {value!r}")
    return int(value)


@dataclass(frozen=True, slots=True, eq=False)
class RoundConfig:
    """Everything that configures a FedMM round and does not change over the rounds of a run.

    Built once per run by :meth:`fedmm.algorithms.Server.round_config` from the server and its
    in-process clients; :func:`fedmm.federation.compiled_rounds` runs rounds from it (with the states
    and the compiled model), reading no party object.  The first eight attributes are the fields
    of ``fedmm_round_config_t`` (``fedmm_kernels.h``) under the same names; the per-client arrays
    are the constant half of ``fedmm_client_t``, one row per client in client order.

    Attributes
    ----------
    space : {'statistic', 'parameter'}
        ``fedmm_round_config_t.space``: messages in S-space (FedMM) or Θ-space (the baseline).
    mode : {'select', 'compress', 'compress-local'}
        ``.mode``: Algorithm 2, or Algorithm 4 with the server's or the clients' coins.
    oracle : {'minibatch', 'full', 'spider'}
        ``.oracle``: the clients' statistic oracle (the compiled engine runs the first two).
    project : bool
        ``.project``: apply ``Π`` (``project_theta`` in Θ-space) in the server step
        (``projection='euclidean'``).
    batch : int >= 1
        ``.batch``: minibatch size (each client caps it at its ``n_samples``; 1 for the full oracle).
    p : float in (0, 1]
        ``.p``: participation probability (``count / n_clients`` for a fixed count).
    control_variate_step : float >= 0
        ``.control_variate_step``: α, ``V_i ← V_i + (α/p) Quant(Δ_i)``.
    statistic_max : float > 0
        ``.statistic_max``: the largest magnitude of an entry of a message, ``H``, ``Ŝ`` and ``V``
        the server accepts (the model's ``statistic_bound`` in S-space; ``inf`` in Θ-space).
    n_clients : int >= 1
    count : int
        Clients per round (drawn without replacement), ``-1`` for independent Bernoulli(p) coins.
    weights : ndarray of shape (n_clients,), float64
        ``μ_i`` (non-negative, summing to one).
    message_size : int >= 1
        Length of a message, of ``V`` and of every ``V_i``: ``q`` (S-space) or ``d`` (Θ-space).
    broadcast_nbytes : int >= 0
        Bytes a contacted client receives per round (``Ŝ_t``, ``θ_t``, its coin in Algorithm 4
        with server coins).
    server_key : ndarray of shape (2,), uint64
        Philox key of the server's round streams (its selection at round ``t``).
    client_keys : ndarray of shape (n_clients, 2), uint64
        Philox keys of the clients' round streams (``fedmm_client_t.key``).
    n_samples : ndarray of shape (n_clients,), int64
        Samples per client (``fedmm_client_t.n_samples``).
    quantizers : ndarray of shape (n_clients, 4), int64
        Each client's compressor as ``(scheme, bits, norm, block)`` (its ``quantizer_spec``;
        ``fedmm_client_t.quantizer``).
    payload_nbytes : ndarray of shape (n_clients,), int64
        Bytes of one message of each client (its compressor's ``payload_nbytes``).
    memory_key : str or None
        The entry of :attr:`ClientState.memory` that is the compiled model's per-sample memory
        (``fedmm_client_t.memory``: ``(n_samples, memory_size)`` float64, zeros when a client has
        none yet, as the model's ``compiled_memory`` creates it); None when the compiled model
        keeps none.
    """

    space: str
    mode: str
    oracle: str
    project: bool
    batch: int
    p: float
    control_variate_step: float
    statistic_max: float
    n_clients: int
    count: int
    weights: np.ndarray
    message_size: int
    broadcast_nbytes: int
    server_key: np.ndarray
    client_keys: np.ndarray
    n_samples: np.ndarray
    quantizers: np.ndarray
    payload_nbytes: np.ndarray
    memory_key: str | None = None

    def __reduce__(self) -> tuple:
        # pickled (Ray, a process pool) through the constructor: the arrays come back read-only
        return (type(self), tuple(getattr(self, f.name) for f in fields(self)))

    def __post_init__(self) -> None:
        _choice(self.space, "space", SPACES)
        _choice(self.mode, "mode", MODES)
        _choice(self.oracle, "oracle", ORACLES)
        if not isinstance(self.project, bool):
            raise TypeError(f"Expected 'project' to be a bool, got {type(self.project).__name__}")
        n = _integer(self.n_clients, "n_clients", 1)
        for name in ("batch", "message_size"):
            object.__setattr__(self, name, _integer(getattr(self, name), name, 1))
        object.__setattr__(self, "n_clients", n)
        object.__setattr__(self, "count", _integer(self.count, "count", -1))
        object.__setattr__(self, "broadcast_nbytes", _integer(self.broadcast_nbytes, "broadcast_nbytes", 0))
        p, step, bound = float(self.p), float(self.control_variate_step), float(self.statistic_max)
        if not 0.0 < p <= 1.0:
            raise ValueError(f"Expected 'p' in (0, 1], got {self.p!r}")
        if not (math.isfinite(step) and step >= 0.0):
            raise ValueError(f"Expected 'control_variate_step' to be a finite float >= 0, "
                             f"got {self.control_variate_step!r}")
        if not bound > 0.0:
            raise ValueError(f"Expected 'statistic_max' > 0 (inf: any finite value), got {self.statistic_max!r}")
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "control_variate_step", step)
        object.__setattr__(self, "statistic_max", bound)
        if self.count > n:
            raise ValueError(f"Expected 'count' <= n_clients = {n}, got {self.count}")
        object.__setattr__(self, "weights", _readonly(self.weights, "weights", np.float64, shape=(n,)))
        object.__setattr__(self, "server_key", _readonly(self.server_key, "server_key", np.uint64, shape=(2,)))
        object.__setattr__(self, "client_keys", _readonly(self.client_keys, "client_keys", np.uint64, shape=(n, 2)))
        object.__setattr__(self, "n_samples", _readonly(self.n_samples, "n_samples", np.int64, shape=(n,)))
        object.__setattr__(self, "quantizers", _readonly(self.quantizers, "quantizers", np.int64, shape=(n, 4)))
        object.__setattr__(self, "payload_nbytes",
                           _readonly(self.payload_nbytes, "payload_nbytes", np.int64, shape=(n,)))
        if self.memory_key is not None and not isinstance(self.memory_key, str):
            raise TypeError(f"Expected 'memory_key' to be a str or None, got {type(self.memory_key).__name__}")


@dataclass(frozen=True, slots=True, eq=False)
class ServerState:
    """What a FedMM server carries between rounds (:meth:`fedmm.algorithms.Server.export_state`).

    With the :class:`RoundConfig` (whose keys fix the random streams: round ``t`` draws from
    counter ``t``) this is all the server needs to continue a run bit for bit.

    Attributes
    ----------
    S : ndarray of shape (q,), float64, or None
        The server statistic ``Ŝ_t`` (None for the Θ-space baseline, which holds only ``θ_t``).
    V : ndarray of shape (message_size,), float64
        The aggregated control variate ``V_t``.
    theta_vector : ndarray of shape (d,), float64
        ``θ_t`` as the model's flat vector (``model.theta_vector``).
    theta_vector_prev : ndarray of shape (d,), float64
        ``θ_{t-1}`` (``θ_0`` before the first round).
    """

    V: np.ndarray
    theta_vector: np.ndarray
    theta_vector_prev: np.ndarray
    S: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("V", "theta_vector", "theta_vector_prev"):
            value = getattr(self, name)
            if not _shared(value):
                object.__setattr__(self, name, _readonly(value, name, np.float64, ndim=1))
        if self.theta_vector_prev.shape != self.theta_vector.shape:
            raise ValueError(f"Expected 'theta_vector_prev' of shape {self.theta_vector.shape}, got "
                             f"{self.theta_vector_prev.shape}")
        if self.S is not None and not _shared(self.S):
            object.__setattr__(self, "S", _readonly(self.S, "S", np.float64, ndim=1))

    def __reduce__(self) -> tuple:
        # pickled (Ray, a process pool) through the constructor: the arrays come back read-only
        return (type(self), (self.V, self.theta_vector, self.theta_vector_prev, self.S))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as ``name → array`` (``V``, ``theta_vector``, ``theta_vector_prev`` and ``S`` when
        there is one): what a checkpoint stores under ``server/``.  The arrays are this state's own
        (read-only, not copied)."""
        out = {"V": self.V, "theta_vector": self.theta_vector, "theta_vector_prev": self.theta_vector_prev}
        if self.S is not None:
            out["S"] = self.S
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any]) -> "ServerState":
        """Inverse of :meth:`to_arrays` (a missing ``theta_vector_prev`` defaults to ``theta_vector``).

        Raises
        ------
        ValueError
            ``arrays`` lacks ``V`` or ``theta_vector``, or holds a name that is not a server state's.
        """
        if not isinstance(arrays, Mapping):
            raise TypeError(f"Expected 'arrays' to be a mapping of names to arrays, got {type(arrays).__name__}")
        missing = [k for k in ("V", "theta_vector") if k not in arrays]
        if missing:
            raise ValueError(f"Expected the server state arrays 'V' and 'theta_vector', missing {missing}")
        unknown = sorted(set(arrays) - {"S", "V", "theta_vector", "theta_vector_prev"})
        if unknown:
            raise ValueError(f"Expected only the server state arrays S, V, theta_vector, theta_vector_prev, "
                             f"got {unknown}")
        def copy(name: str) -> np.ndarray | None:
            return None if arrays.get(name) is None else _frozen_copy(np.asarray(arrays[name], dtype=np.float64))

        vec = copy("theta_vector")
        prev = copy("theta_vector_prev")
        return cls(V=copy("V"), theta_vector=vec, theta_vector_prev=vec if prev is None else prev, S=copy("S"))


@dataclass(frozen=True, slots=True, eq=False)
class ClientState:
    """What a FedMM client carries between rounds (:meth:`fedmm.algorithms.Client.export_state`).

    With the client's configuration (its row of :class:`RoundConfig`, its data) this is all a
    client needs to continue a run bit for bit: its random stream is ``Philox(key_i, t)``.

    Attributes
    ----------
    V : ndarray of shape (message_size,), float64, or None
        The control variate ``V_{t,i}`` (None before the set-up exchange).
    memory : mapping of str to ndarray
        The model's per-client memory (e.g. dictionary learning's warm-start codes ``'codes'``,
        ``(N_i, K)`` float64), empty when the model keeps none or has not filled it yet.
    spider_S : ndarray of shape (q,), float64, or None
        The SPIDER estimator's running statistic (None: no full pass yet, or another oracle).
    spider_theta : ndarray of shape (d,), float64, or None
        The parameter of the client's previous SPIDER oracle (flat vector).
    spider_epoch : int
        The epoch of the last full SPIDER pass (``-1``: none).
    """

    V: np.ndarray | None = None
    memory: Mapping[str, np.ndarray] = field(default_factory=dict)
    spider_S: np.ndarray | None = None
    spider_theta: np.ndarray | None = None
    spider_epoch: int = -1

    def __post_init__(self) -> None:
        # fast paths: a state is built per client and per compiled stretch
        V = self.V
        if V is not None and not _shared(V):
            object.__setattr__(self, "V", _readonly(V, "V", np.float64, ndim=1))
        memory = self.memory
        if type(memory) is not dict and type(memory) is not MappingProxyType and not isinstance(memory, Mapping):
            raise TypeError(f"Expected 'memory' to be a mapping of names to arrays, got {type(memory).__name__}")
        own = dict(memory)
        for name, value in own.items():
            if type(name) is not str or not name:
                raise TypeError(f"Expected the names of 'memory' to be non-empty str, got {name!r}")
            if type(value) is not np.ndarray or value.flags.writeable:
                own[name] = _readonly(value, f"memory[{name!r}]", None)
        object.__setattr__(self, "memory", MappingProxyType(own))
        if self.spider_S is not None or self.spider_theta is not None:
            if self.spider_S is None or self.spider_theta is None:
                raise ValueError("Expected both 'spider_S' and 'spider_theta', or neither")
            object.__setattr__(self, "spider_S", _readonly(self.spider_S, "spider_S", np.float64, ndim=1))
            object.__setattr__(self, "spider_theta",
                               _readonly(self.spider_theta, "spider_theta", np.float64, ndim=1))
        if type(self.spider_epoch) is not int or self.spider_epoch < -1:
            object.__setattr__(self, "spider_epoch", _integer(self.spider_epoch, "spider_epoch", -1))

    def __reduce__(self) -> tuple:
        # pickled (Ray, a process pool) as its fields, the memory as a plain dict
        return (type(self), (self.V, dict(self.memory), self.spider_S, self.spider_theta, self.spider_epoch))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as ``name → array``: ``V`` (when set), ``memory:<name>`` per memory entry and, after a
        SPIDER full pass, ``spider_S``, ``spider_theta``, ``spider_epoch`` (shape (1,), int64); what a
        checkpoint stores under ``client/<i>/``.  The arrays are this state's own (read-only, not
        copied), except ``spider_epoch``."""
        out = {} if self.V is None else {"V": self.V}
        out.update({_MEMORY + name: value for name, value in self.memory.items()})
        if self.spider_S is not None:
            out.update(spider_S=self.spider_S, spider_theta=self.spider_theta,
                       spider_epoch=np.array([self.spider_epoch], dtype=np.int64))
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any]) -> "ClientState":
        """Inverse of :meth:`to_arrays`.

        Raises
        ------
        ValueError
            ``V`` is not a finite 1-D array, the SPIDER arrays are incomplete, or a name is not a
            client state's.
        """
        if not isinstance(arrays, Mapping):
            raise TypeError(f"Expected 'arrays' to be a mapping of names to arrays, got {type(arrays).__name__}")
        unknown = sorted(k for k in arrays if k != "V" and k not in _SPIDER_KEYS
                         and not (isinstance(k, str) and k.startswith(_MEMORY) and len(k) > len(_MEMORY)))
        if unknown:
            raise ValueError(f"Expected only the client state arrays V, memory:<name>, spider_S, spider_theta, "
                             f"spider_epoch, got {unknown}")
        V = None
        if "V" in arrays:
            V = _frozen_copy(np.asarray(arrays["V"], dtype=np.float64))
            if V.ndim != 1 or not np.isfinite(V).all():
                raise ValueError(f"Expected a finite 1-D control variate 'V', got shape {V.shape}")
        memory = {k[len(_MEMORY):]: _frozen_copy(v) for k, v in arrays.items() if k.startswith(_MEMORY)}
        spider = [k for k in _SPIDER_KEYS if k in arrays]
        if spider and len(spider) != len(_SPIDER_KEYS):
            raise ValueError(f"Expected all of {_SPIDER_KEYS} or none, got {spider}")
        if not spider:
            return cls(V=V, memory=memory)
        return cls(V=V, memory=memory, spider_S=_frozen_copy(np.asarray(arrays["spider_S"], dtype=np.float64)),
                   spider_theta=_frozen_copy(np.asarray(arrays["spider_theta"], dtype=np.float64)),
                   spider_epoch=int(np.asarray(arrays["spider_epoch"]).reshape(-1)[0]))


# -- the other families: the non-smooth subgradient methods and FedMM-OT / FedAdam ---------------------------------
def _optional_vector(owner: Any, name: str) -> None:
    """Freeze ``owner.name`` as a read-only float64 vector (left None when None)."""
    value = getattr(owner, name)
    if value is not None and not _shared(value):
        object.__setattr__(owner, name, _readonly(value, name, np.float64, ndim=1))


def _pcg64_words(value: Any, name: str, rows: int | None = None) -> np.ndarray:
    """A PCG64 stream's position as uint64 words: shape (6,), or (rows, 6) for ``rows`` streams."""
    return _readonly(value, name, np.uint64, shape=(6,) if rows is None else (rows, 6))


def _check_names(arrays: Any, what: str, required: tuple, optional: tuple) -> None:
    """Refuse a non-mapping, a missing required name or a name of no field (``ValueError`` naming them)."""
    if not isinstance(arrays, Mapping):
        raise TypeError(f"Expected 'arrays' to be a mapping of names to arrays, got {type(arrays).__name__}")
    missing = [k for k in required if k not in arrays]
    if missing:
        raise ValueError(f"Expected the {what} arrays {list(required)}, missing {missing}")
    unknown = sorted(str(k) for k in arrays if k not in required and k not in optional)
    if unknown:
        raise ValueError(f"Expected only the {what} arrays {sorted(required + optional)}, got {unknown}")


def _scalar(arrays: Mapping[str, Any], name: str, kind: type) -> Any:
    """The one number stored as the array ``arrays[name]`` (0-d or of one element)."""
    a = np.asarray(arrays[name])
    if a.size != 1:
        raise ValueError(f"Expected '{name}' to hold one number, got shape {a.shape}")
    return kind(a.reshape(-1)[0])


#: The vectors a non-smooth server may carry: ``x`` (every method), ``c`` (Scaffold), ``y``, ``z`` (FedMLS).
SUBGRADIENT_SERVER_VECTORS = ("x", "c", "y", "z")
#: The vectors a non-smooth client may carry: ``c`` (Scaffold), ``x``, ``y``, ``z`` (FedMLS), ``h``,
#: ``x_hat`` (Scaffnew).
SUBGRADIENT_CLIENT_VECTORS = ("c", "x", "y", "z", "h", "x_hat")


@dataclass(frozen=True, slots=True, eq=False)
class SubgradientServerState:
    """What a server of the non-smooth family carries between rounds (FedMLS, FedAvg, FedProx, Scaffold,
    Scaffnew: :meth:`fedmm.algorithms.SubgradientServer.export_state`).

    The selection needs no state (round ``t`` draws from ``Philox(key, t)``); Scaffnew's coins come
    from a stream that advances, whose position is ``coin``.

    Attributes
    ----------
    x : ndarray of shape (p,), float64
        The server point.
    c : ndarray of shape (p,), float64, or None
        Scaffold's server control variate.
    y, z : ndarray of shape (p,), float64, or None
        FedMLS's ``y_k`` and ``z_k``.
    total_local_steps : int >= 0
        Local steps taken so far (each client's count; Scaffold's and Scaffnew's step index ``s``).
    coin : ndarray of shape (6,), uint64, or None
        Scaffnew's coin stream (its PCG64 state, ``fedmm.algorithms.nonsmooth.pcg64_state``).
    """

    x: np.ndarray
    c: np.ndarray | None = None
    y: np.ndarray | None = None
    z: np.ndarray | None = None
    total_local_steps: int = 0
    coin: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.x is None:
            raise ValueError("Expected the server point 'x', got None")
        for name in SUBGRADIENT_SERVER_VECTORS:
            _optional_vector(self, name)
            value = getattr(self, name)
            if value is not None and value.shape != self.x.shape:
                raise ValueError(f"Expected '{name}' of shape {self.x.shape} (that of 'x'), got {value.shape}")
        object.__setattr__(self, "total_local_steps", _integer(self.total_local_steps, "total_local_steps", 0))
        if self.coin is not None:
            object.__setattr__(self, "coin", _pcg64_words(self.coin, "coin"))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as ``name → array``: the vectors it holds, ``total_local_steps`` (0-d int64) and
        ``coin`` (when set); what a checkpoint stores under ``server/``.  The vectors are this state's own
        (read-only, not copied)."""
        out = {name: getattr(self, name) for name in SUBGRADIENT_SERVER_VECTORS if getattr(self, name) is not None}
        out["total_local_steps"] = np.array(self.total_local_steps, dtype=np.int64)
        if self.coin is not None:
            out["coin"] = self.coin
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any]) -> "SubgradientServerState":
        """Inverse of :meth:`to_arrays` (every array copied).

        Raises
        ------
        ValueError
            ``x`` or ``total_local_steps`` is missing, or a name is not a field of this state.
        """
        _check_names(arrays, "non-smooth server state", ("x", "total_local_steps"),
                     ("c", "y", "z", "coin"))
        fields = {name: _frozen_copy(np.asarray(arrays[name], dtype=np.float64))
                  for name in SUBGRADIENT_SERVER_VECTORS if name in arrays}
        coin = arrays.get("coin")
        return cls(**fields, total_local_steps=_scalar(arrays, "total_local_steps", int),
                   coin=None if coin is None else _frozen_copy(np.asarray(coin, dtype=np.uint64)))

    def __reduce__(self) -> tuple:
        # pickled (Ray, a process pool) through the constructor: the arrays come back read-only
        return (type(self), (self.x, self.c, self.y, self.z, self.total_local_steps, self.coin))


@dataclass(frozen=True, slots=True, eq=False)
class SubgradientClientState:
    """What a client of the non-smooth family carries between rounds
    (:meth:`fedmm.algorithms.SubgradientClient.export_state`).

    Its minibatch and compression streams advance (they are not counter-based), so their positions
    are part of the state.

    Attributes
    ----------
    c : ndarray of shape (p,), float64, or None
        Scaffold's client control variate ``c_i``.
    x, y, z : ndarray of shape (p,), float64, or None
        FedMLS's ``x_k^i``, ``y_k^i``, ``z_k^i``.
    h, x_hat : ndarray of shape (p,), float64, or None
        Scaffnew's control variate ``h_i`` and the last ``x̂_i`` (None before the first round).
    ratio : float or None
        Scaffnew's ``p/η`` of the last communication.
    oracle_calls : int >= 0
        Subgradient oracle calls so far.
    oracle_rngs : ndarray of shape (1, 6), uint64, or None
        The minibatch stream (its PCG64 state), None for exact subgradients.
    oracle_buffer : ndarray of shape (k, b), int64, or None
        The minibatches drawn ahead (with ``oracle_rngs``).
    oracle_pos : int or None
        How many rows of ``oracle_buffer`` are used (with ``oracle_rngs``).
    compression : ndarray of shape (6,), uint64, or None
        The compression stream of a compressing client (its PCG64 state).
    """

    c: np.ndarray | None = None
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    z: np.ndarray | None = None
    h: np.ndarray | None = None
    x_hat: np.ndarray | None = None
    ratio: float | None = None
    oracle_calls: int = 0
    oracle_rngs: np.ndarray | None = None
    oracle_buffer: np.ndarray | None = None
    oracle_pos: int | None = None
    compression: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in SUBGRADIENT_CLIENT_VECTORS:
            _optional_vector(self, name)
        if self.ratio is not None:
            ratio = float(self.ratio)
            if not math.isfinite(ratio):
                raise ValueError(f"Expected a finite 'ratio', got {self.ratio!r}")
            object.__setattr__(self, "ratio", ratio)
        object.__setattr__(self, "oracle_calls", _integer(self.oracle_calls, "oracle_calls", 0))
        stream = (self.oracle_rngs, self.oracle_buffer, self.oracle_pos)
        if any(v is None for v in stream) and any(v is not None for v in stream):
            raise ValueError("Expected all of 'oracle_rngs', 'oracle_buffer', 'oracle_pos' (a minibatch stream) "
                             "or none of them")
        if self.oracle_rngs is not None:
            rngs = _readonly(self.oracle_rngs, "oracle_rngs", np.uint64, ndim=2)
            object.__setattr__(self, "oracle_rngs", _pcg64_words(rngs, "oracle_rngs", rngs.shape[0]))
            object.__setattr__(self, "oracle_buffer",
                               _readonly(self.oracle_buffer, "oracle_buffer", np.int64, ndim=2))
            object.__setattr__(self, "oracle_pos", _integer(self.oracle_pos, "oracle_pos", 0))
        if self.compression is not None:
            object.__setattr__(self, "compression", _pcg64_words(self.compression, "compression"))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as ``name → array``: the vectors it holds, ``ratio`` (0-d float64, when set),
        ``oracle_calls`` (0-d int64), the minibatch stream ``oracle_rngs``, ``oracle_buffer``,
        ``oracle_pos`` (0-d int64) and ``compression`` (when set); what a checkpoint stores under
        ``client/<i>/``.  The arrays are this state's own (read-only, not copied), except the 0-d ones."""
        out = {name: getattr(self, name) for name in SUBGRADIENT_CLIENT_VECTORS if getattr(self, name) is not None}
        if self.ratio is not None:
            out["ratio"] = np.array(self.ratio, dtype=np.float64)
        out["oracle_calls"] = np.array(self.oracle_calls, dtype=np.int64)
        if self.oracle_rngs is not None:
            out.update(oracle_rngs=self.oracle_rngs, oracle_buffer=self.oracle_buffer,
                       oracle_pos=np.array(self.oracle_pos, dtype=np.int64))
        if self.compression is not None:
            out["compression"] = self.compression
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any]) -> "SubgradientClientState":
        """Inverse of :meth:`to_arrays` (every array copied).

        Raises
        ------
        ValueError
            ``oracle_calls`` is missing, the minibatch stream is incomplete, or a name is not a field of
            this state.
        """
        _check_names(arrays, "non-smooth client state", ("oracle_calls",),
                     SUBGRADIENT_CLIENT_VECTORS + ("ratio", "oracle_rngs", "oracle_buffer", "oracle_pos",
                                                   "compression"))
        fields: dict[str, Any] = {name: _frozen_copy(np.asarray(arrays[name], dtype=np.float64))
                                  for name in SUBGRADIENT_CLIENT_VECTORS if name in arrays}
        if "ratio" in arrays:
            fields["ratio"] = _scalar(arrays, "ratio", float)
        if "oracle_rngs" in arrays or "oracle_buffer" in arrays or "oracle_pos" in arrays:
            missing = [k for k in ("oracle_rngs", "oracle_buffer", "oracle_pos") if k not in arrays]
            if missing:
                raise ValueError(f"Expected all of oracle_rngs, oracle_buffer, oracle_pos or none, missing {missing}")
            fields.update(oracle_rngs=_frozen_copy(np.asarray(arrays["oracle_rngs"], dtype=np.uint64)),
                          oracle_buffer=_frozen_copy(np.asarray(arrays["oracle_buffer"], dtype=np.int64)),
                          oracle_pos=_scalar(arrays, "oracle_pos", int))
        if "compression" in arrays:
            fields["compression"] = _frozen_copy(np.asarray(arrays["compression"], dtype=np.uint64))
        return cls(**fields, oracle_calls=_scalar(arrays, "oracle_calls", int))

    def __reduce__(self) -> tuple:
        # pickled (Ray, a process pool) through the constructor: the arrays come back read-only
        return (type(self), tuple(getattr(self, name) for name in self.__slots__))


def _leaves(value: Any, name: str) -> tuple[np.ndarray, ...] | None:
    """An optimizer state as a tuple of read-only arrays (their dtypes kept), or None."""
    if value is None:
        return None
    if isinstance(value, np.ndarray) or not isinstance(value, (list, tuple)):
        raise TypeError(f"Expected '{name}' to be a sequence of arrays (the Adam state's leaves), "
                        f"got {type(value).__name__}")
    return tuple(_readonly(leaf, f"{name}[{k}]", None) for k, leaf in enumerate(value))


def _leaves_from(arrays: Mapping[str, Any], prefix: str) -> tuple[np.ndarray, ...] | None:
    """The leaves stored as ``<prefix>0``, ``<prefix>1``, ... (None when there is none)."""
    count = sum(1 for k in arrays if isinstance(k, str) and _leaf_index(k, prefix) is not None)
    if count == 0:
        return None
    missing = [f"{prefix}{k}" for k in range(count) if f"{prefix}{k}" not in arrays]
    if missing:
        raise ValueError(f"Expected the leaves {prefix}0..{prefix}{count - 1}, missing {missing}")
    return tuple(_frozen_copy(np.asarray(arrays[f"{prefix}{k}"])) for k in range(count))


def _leaf_index(name: str, prefix: str) -> int | None:
    rest = name[len(prefix):] if name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() and str(int(rest)) == rest else None


_OT_LEAVES = ("adam_", "omega_adam_", "theta_adam_")


@dataclass(frozen=True, slots=True, eq=False)
class OTServerState:
    """What a FedMM-OT or FedAdam server carries between rounds
    (:meth:`fedmm.algorithms.OTServer.export_state`, :meth:`fedmm.algorithms.FedAdamServer.export_state`).

    The selection and the target minibatches need no state (round ``t`` draws from ``Philox(key, t)``).

    Attributes
    ----------
    omega, theta : ndarray of shape (n_params,), float64
        The potentials' parameters ``ω_t``, ``θ_t`` (flat vectors).
    V : ndarray of shape (n_params,), float64, or None
        FedMM-OT's aggregated control variate ``V_t`` (None for FedAdam).
    adam : tuple of ndarray
        The Adam state of the server's step: FedMM-OT's steps on ``θ``, FedAdam's step on ``(ω, θ)``
        (optax's ``ScaleByAdamState`` leaves ``count``, ``mu``, ``nu``, dtypes kept).
    omega_adam : tuple of ndarray, or None
        FedMM-OT's Adam state of ``ω`` (``omega_step='adam'``).
    theta_adam : tuple of ndarray, or None
        FedAdam's Adam state of its extra server steps on ``θ`` (``theta_steps > 0``).
    """

    omega: np.ndarray
    theta: np.ndarray
    V: np.ndarray | None = None
    adam: tuple = ()
    omega_adam: tuple | None = None
    theta_adam: tuple | None = None

    def __post_init__(self) -> None:
        for name in ("omega", "theta"):
            if getattr(self, name) is None:
                raise ValueError(f"Expected '{name}', got None")
            _optional_vector(self, name)
        _optional_vector(self, "V")
        object.__setattr__(self, "adam", _leaves(self.adam, "adam"))
        object.__setattr__(self, "omega_adam", _leaves(self.omega_adam, "omega_adam"))
        object.__setattr__(self, "theta_adam", _leaves(self.theta_adam, "theta_adam"))

    def __reduce__(self) -> tuple:
        return (type(self), (self.omega, self.theta, self.V, self.adam, self.omega_adam, self.theta_adam))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as ``name → array``: ``omega``, ``theta``, ``V`` (when set) and the Adam leaves as
        ``adam_<k>``, ``omega_adam_<k>``, ``theta_adam_<k>``; what a checkpoint stores under ``server/``.
        The arrays are this state's own (read-only, not copied)."""
        out = {"omega": self.omega, "theta": self.theta}
        if self.V is not None:
            out["V"] = self.V
        for prefix, leaves in zip(_OT_LEAVES, (self.adam, self.omega_adam, self.theta_adam)):
            out.update({f"{prefix}{k}": leaf for k, leaf in enumerate(leaves or ())})
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any]) -> "OTServerState":
        """Inverse of :meth:`to_arrays` (every array copied).

        Raises
        ------
        ValueError
            ``omega`` or ``theta`` is missing, the leaves of an Adam state are not numbered ``0..k-1``,
            or a name is not a field of this state.
        """
        if not isinstance(arrays, Mapping):
            raise TypeError(f"Expected 'arrays' to be a mapping of names to arrays, got {type(arrays).__name__}")
        leaves = tuple(k for k in arrays if isinstance(k, str)
                       and any(_leaf_index(k, p) is not None for p in _OT_LEAVES))
        _check_names(arrays, "OT server state", ("omega", "theta"), ("V",) + leaves)
        vectors = {name: _frozen_copy(np.asarray(arrays[name], dtype=np.float64))
                   for name in ("omega", "theta", "V") if name in arrays}
        adam, omega_adam, theta_adam = (_leaves_from(arrays, p) for p in _OT_LEAVES)
        return cls(**vectors, adam=adam or (), omega_adam=omega_adam, theta_adam=theta_adam)


@dataclass(frozen=True, slots=True, eq=False)
class OTClientState:
    """What a FedMM-OT or FedAdam client carries between rounds (:meth:`fedmm.algorithms.OTClient.export_state`):
    its random stream is ``Philox(key_i, t)``, so only FedMM-OT's control variate remains.

    Attributes
    ----------
    V : ndarray of shape (n_params,), float64, or None
        The control variate ``V_{t,i}`` (None for FedAdam, and for FedMM-OT before the set-up exchange).
    """

    V: np.ndarray | None = None

    def __post_init__(self) -> None:
        _optional_vector(self, "V")

    def __reduce__(self) -> tuple:
        return (type(self), (self.V,))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """``{"V": V}`` (empty without one): what a checkpoint stores under ``client/<i>/``."""
        return {} if self.V is None else {"V": self.V}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any]) -> "OTClientState":
        """Inverse of :meth:`to_arrays` (``V`` copied; ``ValueError`` naming any other name)."""
        _check_names(arrays, "OT client state", (), ("V",))
        return cls(V=None if arrays.get("V") is None else _frozen_copy(np.asarray(arrays["V"], dtype=np.float64)))


@dataclass(frozen=True, slots=True, eq=False)
class ArrayState:
    """A party's state as named read-only arrays: the state value of a custom algorithm's parties
    (``docs/extending.md``) whose state needs no class of its own.

    Attributes
    ----------
    arrays : mapping of str to ndarray
        The state's arrays (read-only; copied unless already read-only ndarrays), in the dtypes a
        :class:`fedmm.federation.Checkpoint` stores.
    """

    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.arrays, Mapping):
            raise TypeError(f"Expected 'arrays' to be a mapping of names to arrays, got {type(self.arrays).__name__}")
        own = {}
        for name, value in self.arrays.items():
            if type(name) is not str or not name:
                raise TypeError(f"Expected the names of 'arrays' to be non-empty str, got {name!r}")
            own[name] = _readonly(value, f"arrays[{name!r}]", None)
        object.__setattr__(self, "arrays", MappingProxyType(own))

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def __reduce__(self) -> tuple:
        return (type(self), (dict(self.arrays),))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays as a dict (this state's own, read-only, not copied)."""
        return dict(self.arrays)

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any]) -> "ArrayState":
        """Inverse of :meth:`to_arrays` (every array copied)."""
        if not isinstance(arrays, Mapping):
            raise TypeError(f"Expected 'arrays' to be a mapping of names to arrays, got {type(arrays).__name__}")
        return cls({name: _frozen_copy(value) for name, value in arrays.items()})
