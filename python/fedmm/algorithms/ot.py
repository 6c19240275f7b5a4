# SPDX-License-Identifier: BSD-3-Clause
"""FedMM-OT (FedMM paper §7, Algorithm 3) and FedAdam (Reddi et al. 2021) for Wasserstein-2 maps.

Both solve the federated objective (33) of :class:`fedmm.models.TransportProblem`
(two input-convex potentials ``f_ω``, ``f_θ``; client ``i`` holds samples of its
source distribution ``P_i``, everyone holds the public target samples of ``Q``),
through the same Server/Client split as FedMM: a server object
(:class:`OTServer`, :class:`FedAdamServer`) with ``select``, ``broadcast``,
``aggregate`` and ``export_state``/``import_state`` (:class:`fedmm.federation.OTServerState`), and client
objects (:class:`OTClient`) whose ``step(message)`` returns compressed ``bytes``.  A
runtime (the in-process :class:`fedmm.federation.LocalRuntime`,
:class:`fedmm.runtime.RayRuntime`, or Flower through
:mod:`fedmm.runtime.flower`, whose nodes build their parties with
``build_server`` and ``build_client``) moves the messages; the numbers do not
depend on which one, nor on threads: client ``i`` at round ``t`` draws from
``Philox(key_i, t)``, the server from its own keyed streams.

Needs JAX and optax (``pip install "fedmm[ot]"``), imported on first use.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from fedmm._validation import check_in, check_int, check_participation
from fedmm.algorithms._monitor import Cadence
from fedmm.algorithms.base import FederatedAlgorithm, Integer, OptionalConstraint, Options, Real, Rule
from fedmm.algorithms._random import (
    CLIENT_PARTY,
    SERVER_PARTY,
    RoundStream,
    check_seed,
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
from fedmm.federation import LocalRuntime, record_initial
from fedmm.federation.skeleton import (ClientSelection, check_message, control_variate_update, decode_payloads,
                                      empty_payload_reason, guarded_step, weighted_aggregate)
from fedmm.federation.checkpoint import data_digest
from fedmm.federation.metrics import squared_distance, update_size
from fedmm.federation.state import OTClientState, OTServerState
from fedmm.history import History
from fedmm.models.ot import (
    TransportMap,
    TransportProblem,
    check_device,
    device_info,
    require_jax,
    require_optax,
    x64,
)

__all__ = ["FedMMOT", "FedAdam", "OTBroadcast", "OTClient", "OTServer", "FedAdamServer", "OTSteps"]

#: FedMM-OT's server step on ω (line 14 of Algorithm 3, or an adaptive version).
OMEGA_STEPS = ("sgd", "adam")
#: Index of the server's stream of target minibatches (index 0 selects clients, 1 draws ω_0, θ_0).
_TARGET_STREAM = 2
_INIT_STREAM = 1


# --------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class OTBroadcast:
    """The server's message of round ``t``: the current potentials' parameters.

    Attributes
    ----------
    t : int
        Round index (``-1`` for the set-up message).
    omega, theta : ndarray of shape (n_params,), float64
        ``ω_t`` and ``θ_t``.
    """

    t: int
    omega: np.ndarray
    theta: np.ndarray

    @property
    def nbytes(self) -> int:
        """Bytes one client receives (``ω_t`` and ``θ_t`` as float64)."""
        return int(self.omega.nbytes + self.theta.nbytes)

    def to_arrays(self) -> list[np.ndarray]:
        """``[t, ω_t, θ_t]`` for array-based transports."""
        return [np.array([self.t], dtype=np.int64), self.omega, self.theta]

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> "OTBroadcast":
        """Inverse of :meth:`to_arrays`."""
        if len(arrays) != 3:
            raise ValueError(f"Expected 3 arrays in an OT broadcast, got {len(arrays)}")
        t, omega, theta = (np.asarray(a) for a in arrays)
        if t.shape != (1,):
            raise ValueError(f"Expected the round index as an array of shape (1,), got {t.shape}")
        return cls(int(t[0]), np.asarray(omega, dtype=np.float64), np.asarray(theta, dtype=np.float64))


# --------------------------------------------------------------------------- compiled steps
class OTSteps:
    """The jit-compiled inner loops of both algorithms on one :class:`TransportProblem`.

    NumPy float64 in and out; JAX in float64 inside (:func:`fedmm.models.ot.x64`), on
    ``device`` (JAX's default device when None).  Each call is one compiled function
    (the server's θ-steps of a round are one ``lax.scan``).  The compiled functions take
    the learning rates and Adam's hyper-parameters as arguments and live in the problem's
    cache (:meth:`TransportProblem.compiled`), so every run on one problem compiles once
    per input shape (and device).

    Parameters
    ----------
    model : TransportProblem
    lr, b1, b2, eps : float
        Adam's hyper-parameters (``optax.adam(lr, b1, b2, eps)``): ``lr`` is the learning
        rate of :meth:`theta_adam` and :meth:`adam_step` unless a call gives its own.
    device : jax.Device, str or None
        Where the steps run (:func:`fedmm.models.ot.check_device`); pickled as its platform
        and index, and looked up again where it is unpickled.
    """

    def __init__(self, model: TransportProblem, *, lr: float, b1: float, b2: float, eps: float,
                 device: Any = None) -> None:
        self.model = model
        self.lr, self.b1, self.b2, self.eps = lr, b1, b2, eps
        self.device = check_device(device)
        self._adam_treedef: Any = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_adam_treedef"] = None
        if self.device is not None:  # a jax.Device does not pickle: keep (platform, index among its devices)
            jax, _ = require_jax()
            state["device"] = (self.device.platform, jax.devices(self.device.platform).index(self.device))
        return state

    def __setstate__(self, state: dict) -> None:
        state = {"device": None, **state, "_adam_treedef": None}  # also a copy pickled before 'device' existed
        if "server_lr" in state:  # a copy pickled before 'server_lr' became 'lr'
            state["lr"] = state.pop("server_lr")
        device = state["device"]
        if isinstance(device, tuple):
            jax, _ = require_jax()
            platform, index = device
            try:
                state["device"] = jax.devices(platform)[index]
            except (RuntimeError, IndexError) as exc:
                raise ValueError(f"Expected a '{platform}' device number {index} here for the pinned 'device', "
                                 f"found {jax.devices()}") from exc
        self.__dict__.update(state)

    def on_device(self) -> Any:
        """The context of every step: float64 (:func:`fedmm.models.ot.x64`) on :attr:`device`."""
        return x64(self.device)

    def _hyper(self, lr: float | None = None) -> tuple[float, float, float, float]:
        return (self.lr if lr is None else float(lr)), self.b1, self.b2, self.eps

    def _build(self, name: str) -> Any:
        jax, jnp = require_jax()
        optax = require_optax()
        model = self.model
        mask = np.asarray(model.potential.convex_mask)

        def proj(p: Any) -> Any:
            return jnp.where(mask, jnp.maximum(p, 0.0), p)

        def adam(hyper: Any) -> Any:
            lr, b1, b2, eps = hyper
            return optax.adam(lr, b1=b1, b2=b2, eps=eps)

        if name == "ot.omega_steps":
            grad = jax.grad(model.objective, argnums=0)

            def omega_steps(omega: Any, theta: Any, xs: Any, ys: Any, lr: Any) -> Any:
                def body(o: Any, xy: Any) -> Any:
                    return proj(o - lr * grad(o, theta, xy[0], xy[1])), None
                return jax.lax.scan(body, omega, (xs, ys))[0]
            return jax.jit(omega_steps)
        if name == "ot.joint_steps":
            grad = jax.grad(model.objective, argnums=(0, 1))

            def joint_steps(omega: Any, theta: Any, xs: Any, ys: Any, lr: Any) -> Any:
                def body(c: Any, xy: Any) -> Any:
                    go, gt = grad(c[0], c[1], xy[0], xy[1])
                    return (proj(c[0] - lr * go), proj(c[1] - lr * gt)), None
                return jax.lax.scan(body, (omega, theta), (xs, ys))[0]
            return jax.jit(joint_steps)
        if name == "ot.theta_adam":
            grad = jax.grad(model.target_terms, argnums=1)

            def theta_adam(omega: Any, theta: Any, state: Any, ys: Any, hyper: Any) -> Any:
                opt = adam(hyper)

                def body(c: Any, y: Any) -> Any:
                    upd, st = opt.update(grad(omega, c[0], y), c[1], c[0])
                    return (proj(optax.apply_updates(c[0], upd)), st), None
                return jax.lax.scan(body, (theta, state), ys)[0]
            return jax.jit(theta_adam)
        if name == "ot.adam_step":
            both = np.concatenate([mask, mask])

            def adam_step(params: Any, state: Any, direction: Any, hyper: Any) -> Any:
                upd, st = adam(hyper).update(-direction, state, params)
                p = optax.apply_updates(params, upd)
                convex = mask if params.shape[0] == mask.shape[0] else both  # ω alone, or (ω, θ)
                return jnp.where(convex, jnp.maximum(p, 0.0), p), st
            return jax.jit(adam_step)
        raise KeyError(name)

    def _fn(self, name: str) -> Any:
        return self.model.compiled("ot." + name, lambda: self._build("ot." + name))

    def omega_steps(self, omega: np.ndarray, theta: np.ndarray, xs: np.ndarray, ys: np.ndarray,
                    lr: float) -> np.ndarray:
        """``len(xs)`` projected gradient steps on ``ω ↦ W_i(ω, θ)``: ``ω ← Π(ω − lr ∇_ω W_i(ω, θ; x_k, y_k))``."""
        with self.on_device():
            return np.asarray(self._fn("omega_steps")(omega, theta, xs, ys, lr), dtype=np.float64)

    def joint_steps(self, omega: np.ndarray, theta: np.ndarray, xs: np.ndarray, ys: np.ndarray,
                    lr: float) -> tuple[np.ndarray, np.ndarray]:
        """``len(xs)`` projected steps along ``−(∇_ω W_i, θ-direction)`` (both from the same point).

        The θ-direction is the problem's (:meth:`TransportProblem.grad_theta`: ``λ ∇_θ R_Q`` with
        ``conjugate_step='cycle'``, ``∇_θ W_i`` with ``'joint'``).
        """
        with self.on_device():
            o, t = self._fn("joint_steps")(omega, theta, xs, ys, lr)
            return np.asarray(o, dtype=np.float64), np.asarray(t, dtype=np.float64)

    # -- Adam state as NumPy arrays --------------------------------------------------
    def _treedef(self) -> Any:
        if self._adam_treedef is None:  # built once: optax's init runs eager JAX operations
            jax, jnp = require_jax()
            optax = require_optax()
            with self.on_device():
                self._adam_treedef = jax.tree_util.tree_structure(optax.adam(1e-3).init(jnp.zeros(1)))
        return self._adam_treedef

    def adam_init(self, size: int) -> list[np.ndarray]:
        """The initial Adam state of a parameter of length ``size``, as a list of NumPy arrays
        (optax's ``ScaleByAdamState`` leaves: ``count``, ``mu``, ``nu``)."""
        jax, jnp = require_jax()
        optax = require_optax()
        with self.on_device():
            return [np.array(leaf, copy=True)
                    for leaf in jax.tree_util.tree_leaves(optax.adam(1e-3).init(jnp.zeros(size)))]

    def _state(self, leaves: Sequence[np.ndarray]) -> Any:
        jax, jnp = require_jax()
        return jax.tree_util.tree_unflatten(self._treedef(), [jnp.asarray(leaf) for leaf in leaves])

    @staticmethod
    def _leaves(state: Any) -> list[np.ndarray]:
        jax, _ = require_jax()
        return [np.array(leaf, copy=True) for leaf in jax.tree_util.tree_leaves(state)]

    def theta_adam(self, omega: np.ndarray, theta: np.ndarray, adam: Sequence[np.ndarray],
                   ys: np.ndarray, lr: float | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
        """``len(ys)`` Adam steps along the θ-direction (target minibatches ``ys[k]``), each followed by ``Π``.

        The θ-direction is :meth:`TransportProblem.grad_theta` (``λ ∇_θ R_Q`` by default, ``∇_θ W`` with
        ``conjugate_step='joint'``).  ``lr``: the steps' learning rate (default :attr:`lr`).
        """
        with self.on_device():
            theta_new, state = self._fn("theta_adam")(omega, theta, self._state(adam), ys, self._hyper(lr))
            return np.asarray(theta_new, dtype=np.float64), self._leaves(state)

    def adam_step(self, params: np.ndarray, adam: Sequence[np.ndarray], direction: np.ndarray,
                  lr: float | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
        """One Adam step along ``direction`` (the gradient is ``−direction``) on ``ω`` or on ``(ω, θ)``
        (``params`` of length ``n_params`` or ``2 n_params``), then ``Π`` (or ``Π × Π``).

        ``lr``: the step's learning rate (default :attr:`lr`)."""
        with self.on_device():
            p, state = self._fn("adam_step")(params, self._state(adam), direction, self._hyper(lr))
            return np.asarray(p, dtype=np.float64), self._leaves(state)


def _draw(rng: np.random.Generator, n: int, b: int | None, k: int) -> np.ndarray:
    """``k`` minibatches of ``b`` indices of ``range(n)``, shape ``(k, b)``: without replacement when
    ``b <= n``, with replacement when ``b > n`` (fixed shapes: one compilation); all of ``range(n)``
    in each row when ``b`` is None."""
    if b is None:
        return np.broadcast_to(np.arange(n), (k, n))
    if b > n:
        return rng.integers(0, n, size=(k, b))
    return np.stack([rng.choice(n, size=b, replace=False) for _ in range(k)])


# --------------------------------------------------------------------------- client
class OTClient:
    """One worker of FedMM-OT (Algorithm 3 lines 5-11) or FedAdam.

    Parameters
    ----------
    index : int
    data : ndarray of shape (N_i, d)
        Samples of ``P_i`` (checked by ``model.check_data``).
    target : ndarray of shape (M, d)
        The public target samples.
    steps : OTSteps
    kind : {'fedmm', 'fedadam'}
        ``'fedmm'``: ``ω_i`` from ``local_steps`` projected gradient steps on
        ``W_i(·, θ_t)`` from ``ω_t``, message ``Quant(Δ)`` with
        ``Δ = ω_i − ω_t − V_{t,i}``, then ``V_{t+1,i} = V_{t,i} + (α/p) Quant(Δ)``.
        ``'fedadam'``: ``(ω_i, θ_i)`` from ``local_steps`` projected gradient
        steps on ``W_i`` from ``(ω_t, θ_t)``, message ``Quant((ω_i − ω_t, θ_i − θ_t))``.
    compressor : compressor
    control_variate_step, p : float
    local_steps : int
    local_lr : float
    batch_size, target_batch_size : int or None
        Source / target samples per local step (None: all).
    seed : SeedSequence
        Run seed; the client's stream at round ``t`` is ``Philox(key_i, t)``.
    """

    def __init__(self, index: int, data: np.ndarray, target: np.ndarray, steps: OTSteps, *, kind: str,
                 compressor: Any, control_variate_step: float, p: float, local_steps: int, local_lr: float,
                 batch_size: int | None, target_batch_size: int | None, seed: np.random.SeedSequence) -> None:
        self.index = int(index)
        self.data = data
        self.target = target
        self.steps = steps
        self.kind = kind
        self.compressor = compressor
        self.control_variate_step, self.p = float(control_variate_step), float(p)
        self.local_steps, self.local_lr = local_steps, local_lr
        self.batch_size, self.target_batch_size = batch_size, target_batch_size
        self.stream = RoundStream(party_seed(seed, CLIENT_PARTY, index))
        self.V: np.ndarray | None = None

    @property
    def message_size(self) -> int:
        """Length of this client's messages."""
        n = self.steps.model.n_params
        return n if self.kind == "fedmm" else 2 * n

    def setup(self, message: OTBroadcast) -> bytes:
        """``V_{0,i} = 0`` (FedMM-OT); nothing to send."""
        if self.kind == "fedmm":
            self.V = np.zeros(self.message_size)
        return b""

    def export_state(self) -> OTClientState:
        """The client's state as a frozen value: its control variate ``V`` (FedMM-OT after set-up; its random
        stream is counter-based)."""
        return OTClientState(V=self.V)

    def import_state(self, state: OTClientState, like_theta: Any = None) -> None:
        """Continue from an :meth:`export_state` value (``like_theta`` is not needed: parameters are flat
        vectors); ``state.V = None`` leaves the control variate as it is.

        Raises
        ------
        TypeError
            ``state`` is not an :class:`~fedmm.federation.OTClientState`.
        ValueError
            ``V`` is not a finite vector of this client's message size.
        """
        if not isinstance(state, OTClientState):
            raise TypeError(f"Expected 'state' to be an OTClientState (export_state()), got {type(state).__name__}")
        if state.V is not None:
            if state.V.shape != (self.message_size,) or not np.isfinite(state.V).all():
                raise ValueError(f"Expected a finite control variate 'V' of shape ({self.message_size},), "
                                 f"got shape {state.V.shape}")
            self.V = np.array(state.V, copy=True)

    def step(self, message: OTBroadcast) -> bytes:
        """Run the client's part of round ``message.t`` and return its encoded message."""
        rng = self.stream.at(message.t)
        k = self.local_steps
        xs = self.data[_draw(rng, self.data.shape[0], self.batch_size, k)]
        ys = self.target[_draw(rng, self.target.shape[0], self.target_batch_size, k)]
        if self.kind == "fedmm":
            if self.V is None:
                self.V = np.zeros(self.message_size)
            omega_i = self.steps.omega_steps(message.omega, message.theta, xs, ys, self.local_lr)
            delta = omega_i - message.omega - self.V
        else:
            omega_i, theta_i = self.steps.joint_steps(message.omega, message.theta, xs, ys, self.local_lr)
            delta = np.concatenate([omega_i - message.omega, theta_i - message.theta])
        if not np.isfinite(delta).all():
            raise FloatingPointError(f"client {self.index}: non-finite local update at round {message.t} "
                                     "(lower 'local_lr')")
        payload = self.compressor.encode(delta, rng)
        if self.kind == "fedmm" and self.control_variate_step:
            self.V = self.V + self.control_variate_step / self.p * self.compressor.decode(payload)
        return payload


# --------------------------------------------------------------------------- servers
def _adam_leaves(leaves: Sequence[np.ndarray] | None, name: str, like: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Writable copies of an Adam state's ``leaves`` (the field ``name`` of an :class:`OTServerState`),
    checked against ``like`` (count, shapes; finite values)."""
    leaves = () if leaves is None else leaves
    if len(leaves) != len(like):
        raise ValueError(f"Expected '{name}' with {len(like)} leaves, got {len(leaves)}")
    out = []
    for k, (leaf, ref) in enumerate(zip(leaves, like)):
        a = np.array(leaf, dtype=ref.dtype, copy=True)
        if a.shape != ref.shape or not np.isfinite(a).all():
            raise ValueError(f"Expected a finite '{name}[{k}]' of shape {ref.shape}, got shape {a.shape}")
        out.append(a)
    return out


def _ot_vectors(state: Any, size: int, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Writable copies of the vectors ``names`` of an :class:`OTServerState`, each finite of length ``size``."""
    if not isinstance(state, OTServerState):
        raise TypeError(f"Expected 'state' to be an OTServerState (export_state()), got {type(state).__name__}")
    values = {}
    for name in names:
        a = getattr(state, name)
        if a is None or a.shape != (size,) or not np.isfinite(a).all():
            raise ValueError(f"Expected a finite '{name}' of shape ({size},), got "
                             f"{'none' if a is None else f'shape {a.shape}'}")
        values[name] = np.array(a, copy=True)
    return values


class _OTServerBase:
    """Selection, set-up and payload validation shared by both servers."""

    #: No compiled rounds (:class:`fedmm.protocols.ServerParty`).
    supports_compiled_rounds = False

    def __init__(self, steps: OTSteps, n_clients: int, *, weights: np.ndarray, p: float, count: int | None,
                 omega: np.ndarray, theta: np.ndarray, seed: np.random.SeedSequence, decoders: Sequence[Any],
                 size: int) -> None:
        self.steps = steps
        self.model = steps.model
        self.n_clients = int(n_clients)
        self.weights = np.asarray(weights, dtype=np.float64)
        self.p = float(p)
        self.count = count
        self.decoders = list(decoders)
        if len(self.decoders) != self.n_clients:
            raise ValueError(f"Expected one decoder per client ({self.n_clients}), got {len(self.decoders)}")
        self.size = int(size)
        self.stream = RoundStream(party_seed(seed, SERVER_PARTY, 0))
        #: Who each round contacts (:class:`fedmm.federation.ClientSelection`).
        self.selection = ClientSelection(self.n_clients, clients_per_round=count,
                                         participation_prob=self.p if count is None else 1.0, key=self.stream.key)
        self.omega = np.array(omega, dtype=np.float64, copy=True)
        self.theta = np.array(theta, dtype=np.float64, copy=True)

    def setup_message(self) -> OTBroadcast:
        """The set-up broadcast (round ``-1``) with ``ω_0``, ``θ_0``."""
        return OTBroadcast(-1, self.omega, self.theta)

    def setup_aggregate(self, payloads: Mapping[int, Any]) -> None:
        """Nothing to aggregate: the control variates start at zero (``V_0 = 0``)."""

    def select(self, t: int) -> list[int]:
        """Clients of round ``t``: ``count`` uniformly without replacement, or independent Bernoulli(``p``)."""
        return self.selection.select(t)

    def broadcast(self, t: int) -> OTBroadcast:
        """``(ω_t, θ_t)`` (Algorithm 3 line 4)."""
        return OTBroadcast(t, self.omega, self.theta)

    def transport_map(self) -> TransportMap:
        """The current :class:`TransportMap` ``(∇f_ω, ∇f_θ)``."""
        return self.model.transport_map(self.omega, self.theta)

    def _decode(self, i: int, payload: Any) -> np.ndarray:
        """The row hook of :func:`fedmm.federation.decode_payloads`: every active client sends a message (an
        empty payload is invalid), decoded by its compressor, of :attr:`size` finite values."""
        if not payload:
            raise ValueError(empty_payload_reason(i))
        return check_message(i, self.decoders[i].decode(payload), self.size)

    def server_step(self, t: int, payloads: Mapping[int, Any],
                    on_invalid: Callable[[int, str], None] | None) -> dict[str, Any]:
        """Round ``t``'s server step from its payloads, under the fault policy; nothing of the server changes.

        Every payload is decoded and validated first (:func:`fedmm.federation.decode_payloads`: an invalid
        one raises ``ValueError`` or, with ``on_invalid``, is left out after ``on_invalid(i, reason)``); then
        :meth:`candidate_step` of the valid messages runs under :func:`fedmm.federation.guarded_step`: when
        it fails, a ``ValueError`` says why, or, with ``on_invalid``, the step is retried without the
        largest messages (at most :data:`fedmm.federation.MAX_STEP_RETRIES` retries), each of their clients
        reported by ``on_invalid(i, reason)``.  Returns :meth:`candidate_step`'s new state, to commit.
        """
        ids, rows = decode_payloads(t, payloads, self._decode, on_invalid=on_invalid)
        return guarded_step(t, lambda rows, weights: self.candidate_step(t, rows, weights), ids, rows,
                            [self.weights[i] for i in ids], p=self.p, on_invalid=on_invalid)

    def candidate_step(self, t: int, rows: Sequence[np.ndarray], weights: Sequence[float]) -> dict[str, Any]:
        """The server step of round ``t`` from decoded messages, into new arrays; nothing of the server changes.

        ``acc = Σ_k (weights[k]/p) rows[k]`` (:func:`fedmm.federation.weighted_aggregate`: client order, one
        compiled pass), then the algorithm's step from it (``step_from``).  Returns the new state by name.

        Raises
        ------
        ValueError
            ``acc`` or a value of the new state (the parameters, the control variate, the Adam moments) is
            not finite.
        """
        # overflows are reported by the checks below, not as NumPy warnings
        with np.errstate(over="ignore", invalid="ignore"):
            acc = weighted_aggregate(rows, weights, self.size, p=self.p)
            if not np.isfinite(acc).all():
                raise ValueError("the aggregate sum_i (mu_i/p) Delta_i is not finite")
            new = self.step_from(t, acc)
        bad = [name for name, value in new.items()
               if value is not None and not all(np.isfinite(a).all() for a in (value if isinstance(value, list)
                                                                               else [value]))]
        if bad:
            raise ValueError(f"the server step's new {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not "
                             "finite")
        return new


class OTServer(_OTServerBase):
    """The FedMM-OT server (Algorithm 3 lines 1-4 and 12-17).

    State ``ω_t``, ``θ_t``, ``V_t`` and the Adam state of the ``θ`` updates
    (warm-started across rounds; with ``omega_step='adam'`` also the Adam state
    of the ``ω`` updates).  Round ``t``: ``H = V_t + p⁻¹ Σ μ_i Quant(Δ_i)``,
    ``ω_{t+1} = Π(ω_t + γ_{t+1} H)`` (``omega_step='sgd'``) or one Adam step of
    learning rate ``γ_{t+1}`` fed the gradient ``−H``, then projected
    (``'adam'``), then ``theta_steps`` Adam steps on
    ``θ ↦ W(ω_{t+1}, θ)`` (along the problem's θ-direction,
    :meth:`TransportProblem.grad_theta`; learning rate ``steps.lr``) with target minibatches
    (each projected on ``Θ``), and
    ``V_{t+1} = V_t + (α/p) Σ μ_i Quant(Δ_i)``.
    """

    def __init__(self, steps: OTSteps, n_clients: int, *, weights: np.ndarray, p: float, count: int | None,
                 schedule: StepSchedule, control_variate_step: float, theta_steps: int, target: np.ndarray,
                 target_batch_size: int | None, omega: np.ndarray, theta: np.ndarray,
                 seed: np.random.SeedSequence, decoders: Sequence[Any], omega_step: str = "sgd") -> None:
        super().__init__(steps, n_clients, weights=weights, p=p, count=count, omega=omega, theta=theta, seed=seed,
                         decoders=decoders, size=steps.model.n_params)
        self.omega_step = check_in(omega_step, "omega_step", OMEGA_STEPS)
        self.omega_adam = steps.adam_init(self.size) if self.omega_step == "adam" else None
        self.schedule = schedule
        self.control_variate_step = float(control_variate_step)
        self.theta_steps = int(theta_steps)
        self.target = target
        self.target_batch_size = target_batch_size
        self.target_stream = RoundStream(party_seed(seed, SERVER_PARTY, _TARGET_STREAM))
        self.V = np.zeros(self.size)
        self.adam = steps.adam_init(self.size)

    def aggregate(self, t: int, payloads: Mapping[int, Any],
                  on_invalid: Callable[[int, str], None] | None = None) -> dict[str, Any]:
        """Lines 13-17, atomically.  Every payload is decoded and validated (length, finite values) before
        the state changes: an invalid one raises ``ValueError`` or, with ``on_invalid``, is left out
        (its client counts as dropped) after ``on_invalid(i, reason)``.  The step is computed into
        temporaries (:meth:`candidate_step`) and committed only when the aggregate and every new value
        are finite; a failing step leaves the state as it was and raises ``ValueError`` or, with
        ``on_invalid``, goes on without the messages that make it fail (:meth:`server_step`).

        Returns the record fields ``gamma``, ``E_omega = ‖ω_{t+1} − ω_t‖²/γ²`` and
        ``E_theta = ‖θ_{t+1} − θ_t‖²``.
        """
        gamma = self.schedule(t + 1)
        new = self.server_step(t, payloads, on_invalid)
        omega, theta = new["omega"], new["theta"]
        record = {"gamma": gamma,
                  "E_omega": update_size("E_omega", squared_distance(omega, self.omega), gamma),
                  "E_theta": squared_distance(theta, self.theta)}
        self.omega, self.theta, self.adam, self.omega_adam = omega, theta, new["adam"], new["omega_adam"]
        self.V = new["V"]
        return record

    def step_from(self, t: int, acc: np.ndarray) -> dict[str, Any]:
        """Lines 14-17 from the aggregate ``acc`` into new arrays: ``omega``, ``theta``, ``V``, ``adam`` and
        ``omega_adam`` (None with ``omega_step='sgd'``)."""
        gamma = self.schedule(t + 1)
        omega_adam = self.omega_adam
        if omega_adam is None:
            omega = self.model.potential.project(self.omega + gamma * (self.V + acc))
        else:
            omega, omega_adam = self.steps.adam_step(self.omega, omega_adam, self.V + acc, lr=gamma)
        theta, adam = self.theta, self.adam
        if self.theta_steps:
            rng = self.target_stream.at(t)
            ys = self.target[_draw(rng, self.target.shape[0], self.target_batch_size, self.theta_steps)]
            theta, adam = self.steps.theta_adam(omega, self.theta, self.adam, ys)
        return {"omega": omega, "theta": theta, "V": control_variate_update(self.V, acc, self.control_variate_step),
                "adam": adam, "omega_adam": omega_adam}

    def export_state(self) -> OTServerState:
        """``omega``, ``theta``, ``V`` and the Adam states (``adam``; ``omega_adam`` with
        ``omega_step='adam'``) as a frozen value (read-only copies)."""
        return OTServerState(omega=self.omega, theta=self.theta, V=self.V, adam=tuple(self.adam),
                             omega_adam=None if self.omega_adam is None else tuple(self.omega_adam))

    def import_state(self, state: OTServerState, theta: Any = None) -> None:
        """Continue from an :meth:`export_state` value (validated: shapes and finite values; ``TypeError`` for
        another type, ``ValueError`` naming the field that does not fit this server)."""
        values = _ot_vectors(state, self.size, ("omega", "theta", "V"))
        if state.theta_adam is not None:
            raise ValueError("Expected an OTServer state without 'theta_adam' (FedAdam's), got one")
        if (state.omega_adam is None) != (self.omega_adam is None):
            raise ValueError(f"Expected an OTServer state {'without' if self.omega_adam is None else 'with'} "
                             f"'omega_adam' (omega_step={self.omega_step!r})")
        adam = _adam_leaves(state.adam, "adam", self.adam)
        omega_adam = None if self.omega_adam is None else _adam_leaves(state.omega_adam, "omega_adam", self.omega_adam)
        self.omega, self.theta, self.V, self.adam = values["omega"], values["theta"], values["V"], adam
        self.omega_adam = omega_adam


class FedAdamServer(_OTServerBase):
    """The FedAdam server (Reddi et al. 2021, Algorithm 2 with Adam) on ``(ω, θ)``.

    Round ``t``: ``Δ̄ = p⁻¹ Σ_{active} μ_i Quant(Δ_i)`` (the average pseudo-gradient,
    ``Δ_i = (ω_i − ω_t, θ_i − θ_t)``), one Adam step along ``Δ̄`` (gradient ``−Δ̄``)
    with the server's learning rate (``steps.lr``), then the projection onto ``Θ × Θ``; with
    ``theta_steps > 0``, then that many Adam steps on ``θ`` alone, as FedMM-OT's
    server takes them (learning rate ``theta_lr``; target minibatches of ``target_batch_size``;
    their Adam state carried over rounds).
    """

    def __init__(self, steps: OTSteps, n_clients: int, *, weights: np.ndarray, p: float, count: int | None,
                 omega: np.ndarray, theta: np.ndarray, seed: np.random.SeedSequence,
                 decoders: Sequence[Any], theta_steps: int = 0, theta_lr: float | None = None,
                 target: np.ndarray | None = None, target_batch_size: int | None = None) -> None:
        super().__init__(steps, n_clients, weights=weights, p=p, count=count, omega=omega, theta=theta, seed=seed,
                         decoders=decoders, size=2 * steps.model.n_params)
        self.adam = steps.adam_init(self.size)
        self.theta_steps = int(theta_steps)
        if self.theta_steps and (theta_lr is None or target is None):
            raise ValueError("Expected 'theta_lr' and 'target' with theta_steps > 0")
        self.theta_lr, self.target, self.target_batch_size = theta_lr, target, target_batch_size
        self.target_stream = RoundStream(party_seed(seed, SERVER_PARTY, _TARGET_STREAM))
        self.theta_adam = steps.adam_init(steps.model.n_params) if self.theta_steps else None

    def aggregate(self, t: int, payloads: Mapping[int, Any],
                  on_invalid: Callable[[int, str], None] | None = None) -> dict[str, Any]:
        """Validate every payload, then the Adam step, atomically and under the fault policy of a failing
        step (as :meth:`OTServer.aggregate`).

        Returns ``gamma`` (the server learning rate), ``E_omega = ‖ω_{t+1} − ω_t‖²`` and
        ``E_theta = ‖θ_{t+1} − θ_t‖²``.
        """
        new = self.server_step(t, payloads, on_invalid)
        omega, theta = new["omega"], new["theta"]
        record = {"gamma": self.steps.lr, "E_omega": squared_distance(omega, self.omega),
                  "E_theta": squared_distance(theta, self.theta)}
        self.omega, self.theta, self.adam, self.theta_adam = omega, theta, new["adam"], new["theta_adam"]
        return record

    def step_from(self, t: int, acc: np.ndarray) -> dict[str, Any]:
        """The Adam step along ``acc`` (and the ``θ`` steps) into new arrays: ``omega``, ``theta``, ``adam``
        and ``theta_adam`` (None without ``theta_steps``)."""
        n = self.model.n_params
        params, adam = self.steps.adam_step(np.concatenate([self.omega, self.theta]), self.adam, acc)
        omega, theta = params[:n], params[n:]
        theta_adam = self.theta_adam
        if self.theta_steps:
            rng = self.target_stream.at(t)
            ys = self.target[_draw(rng, self.target.shape[0], self.target_batch_size, self.theta_steps)]
            theta, theta_adam = self.steps.theta_adam(omega, theta, theta_adam, ys, lr=self.theta_lr)
        return {"omega": omega, "theta": theta, "adam": adam, "theta_adam": theta_adam}

    def export_state(self) -> OTServerState:
        """``omega``, ``theta`` and the Adam state (``adam``; with ``theta_steps``, also ``theta_adam``) as a
        frozen value (read-only copies)."""
        return OTServerState(omega=self.omega, theta=self.theta, adam=tuple(self.adam),
                             theta_adam=None if self.theta_adam is None else tuple(self.theta_adam))

    def import_state(self, state: OTServerState, theta: Any = None) -> None:
        """Continue from an :meth:`export_state` value (validated as :meth:`OTServer.import_state`)."""
        values = _ot_vectors(state, self.model.n_params, ("omega", "theta"))
        for name in ("V", "omega_adam"):
            if getattr(state, name) is not None:
                raise ValueError(f"Expected a FedAdamServer state without {name!r} (FedMM-OT's), got one")
        if (state.theta_adam is None) != (self.theta_adam is None):
            raise ValueError(f"Expected a FedAdamServer state {'without' if self.theta_adam is None else 'with'} "
                             f"'theta_adam' (theta_steps={self.theta_steps})")
        theta_adam = None if self.theta_adam is None else _adam_leaves(state.theta_adam, "theta_adam", self.theta_adam)
        adam = _adam_leaves(state.adam, "adam", self.adam)
        self.omega, self.theta, self.adam, self.theta_adam = values["omega"], values["theta"], adam, theta_adam


# --------------------------------------------------------------------------- monitoring
class _Evaluator:
    """Calls the user's ``evaluate(transport_map)`` at its cadence (reporting only, not timed)."""

    def __init__(self, evaluate: Callable[[TransportMap], Mapping[str, float]] | None, every: int,
                 n_rounds: int, server: _OTServerBase) -> None:
        self.evaluate = evaluate
        self.cadence = Cadence(every if evaluate is not None else 0, n_rounds, name="evaluate_every")
        self.server = server

    def fields(self) -> dict[str, float]:
        with self.server.steps.on_device():  # the user's evaluation of the map runs where the steps run
            out = self.evaluate(self.server.transport_map())
        if not isinstance(out, Mapping):
            raise TypeError(f"Expected 'evaluate' to return a dict of str to float, got {type(out).__name__}")
        return {str(k): float(v) for k, v in out.items()}

    def due(self, t: int) -> bool:
        return self.cadence.due(t)

    def __call__(self, t: int, gamma: float) -> dict[str, float]:
        return self.fields() if self.cadence.due(t) else {}


# --------------------------------------------------------------------------- front-ends
def _check_problem(model: Any, name: str) -> TransportProblem:
    if not isinstance(model, TransportProblem):
        raise TypeError(f"Expected '{name}' to be a fedmm TransportProblem, got {type(model).__name__}")
    return model


def _check_compressor_or_identity(compressor: Any, name: str) -> Any:
    return Identity() if compressor is None else check_compressor(compressor)


def _check_weights(weights: Any, name: str) -> list[float] | None:
    return check_weights(weights)


class _FederatedOT(FederatedAlgorithm):
    """Construction, validation and the run's hooks shared by :class:`FedMMOT` and :class:`FedAdam`."""

    name = ""
    kind = ""
    #: Evaluate after every round by default (when ``run`` gets an ``evaluate``).
    default_evaluate_every = 1
    parameter_constraints = {
        "model": Rule(_check_problem, "a fedmm TransportProblem"),
        "compressor": Rule(_check_compressor_or_identity, "a compressor or a sequence of them; None: Identity()"),
        "local_steps": Integer(1, count=True),
        "local_lr": Real(0.0, low_open=True),
        "batch_size": OptionalConstraint(Integer(1)),
        "target_batch_size": OptionalConstraint(Integer(1)),
        "weights": Rule(_check_weights, "None or non-negative numbers, one per client"),
        "identity_steps": Integer(0, count=True),
        "n_threads": Integer(1),
        "theta_steps": Integer(0, count=True),
        "theta_lr": Real(0.0, low_open=True),
        "b1": Real(0.0, 1.0, high_open=True),
        "b2": Real(0.0, 1.0, high_open=True),
        "eps": Real(0.0, low_open=True),
    }

    def _common(self, model: TransportProblem, clients_per_round: int | None, participation_prob: float | None,
                compressor: Any, local_steps: int, local_lr: float, batch_size: int | None,
                target_batch_size: int | None, weights: Sequence[float] | None, identity_steps: int,
                n_threads: int, theta_steps: int, theta_lr: float, b1: float, b2: float, eps: float,
                device: Any = None, steps_lr: float | None = None) -> None:
        """Check and set the shared parameters; :attr:`steps` takes Adam steps at ``steps_lr`` (FedAdam's
        checked ``server_lr``), by default at ``theta_lr`` (FedMM-OT's θ-steps)."""
        self.set_parameters(model=model)
        self.clients_per_round, self.participation_prob = check_participation(clients_per_round,
                                                                               participation_prob)
        self.set_parameters(compressor=compressor, local_steps=local_steps, local_lr=local_lr,
                            batch_size=model.batch_size if batch_size is None else batch_size,
                            target_batch_size=target_batch_size)
        if self.target_batch_size is None:
            self.target_batch_size = self.batch_size
        self.set_parameters(weights=weights, identity_steps=identity_steps, n_threads=n_threads,
                            theta_steps=theta_steps, theta_lr=theta_lr, b1=b1, b2=b2, eps=eps)
        self.steps = OTSteps(model, lr=self.theta_lr if steps_lr is None else steps_lr, b1=self.b1, b2=self.b2,
                             eps=self.eps, device=device)

    @property
    def device(self) -> Any:
        """The pinned ``jax.Device``, or None (JAX's default device at run time)."""
        return self.steps.device

    def config(self) -> dict[str, Any]:
        """JSON-friendly hyper-parameters (stored in ``History.config``)."""
        comp = self.compressor
        return {"model": self.model.config(),
                "clients_per_round": self.clients_per_round, "participation_prob": self.participation_prob,
                "compressor": [repr(c) for c in comp] if isinstance(comp, (list, tuple)) else repr(comp),
                "local_steps": self.local_steps, "local_lr": self.local_lr, "batch_size": self.batch_size,
                "target_batch_size": self.target_batch_size, "identity_steps": self.identity_steps,
                "theta_steps": self.theta_steps, "theta_lr": self.theta_lr, "b1": self.b1, "b2": self.b2,
                "eps": self.eps, "n_threads": self.n_threads, "device": device_info(self.steps.device)}

    # -- validation ----------------------------------------------------------------
    def _check_datas(self, datas: Sequence[Any]) -> list[np.ndarray]:
        check_datas_list(datas, "one (N_i, d) array per client")
        return [self.model.check_data(d, f"datas[{i}]") for i, d in enumerate(datas)]

    def _raw_weights(self, datas: Sequence[np.ndarray]) -> np.ndarray:
        """``μ_i`` before normalization: the user's ``weights``, else the sample counts ``N_i``."""
        if self.weights is None:
            return np.array([d.shape[0] for d in datas], dtype=np.float64)
        return np.asarray(self.weights, dtype=np.float64)

    def _init(self, seed: np.random.SeedSequence, init: Any) -> tuple[np.ndarray, np.ndarray]:
        if init is None:
            with self.steps.on_device():
                return self.model.init(party_seed(seed, SERVER_PARTY, _INIT_STREAM),
                                         identity_steps=self.identity_steps)
        if not isinstance(init, (tuple, list)) or len(init) != 2:
            raise TypeError("Expected 'init' to be a pair (omega_0, theta_0) of parameter vectors")
        omega = self.model.check_omega(init[0])
        theta = self.model.check_theta(init[1])
        for name, v in (("omega", omega), ("theta", theta)):
            if not np.array_equal(self.model.potential.project(v), v):
                raise ValueError(f"Expected 'init' {name}_0 in Θ (non-negative convex-path weights)")
        return omega.copy(), theta.copy()

    # -- building the parties --------------------------------------------------------
    def _server(self, n: int, weights: np.ndarray, count: int | None, p: float, omega: np.ndarray,
                theta: np.ndarray, target: np.ndarray, seed: np.random.SeedSequence,
                comps: list[Any]) -> _OTServerBase:
        raise NotImplementedError

    @property
    def message_size(self) -> int:
        """Length of a client's message: ``n_params`` (FedMM-OT: ``ω``) or ``2 n_params`` (FedAdam: ``(ω, θ)``)."""
        return self.model.n_params * (1 if self.kind == "fedmm" else 2)

    def build_server(self, n_clients: int, *, weights: Any, target: Any, init: Any = None,
                     seed: Any = 0) -> _OTServerBase:
        """The server alone, for runtimes where the data stay with remote clients (Flower).

        Parameters
        ----------
        n_clients : int >= 1
        weights : array_like of shape (n_clients,)
            ``μ_i`` (normalized here), e.g. the clients' reported sample counts.
        target : ndarray of shape (M, d)
            The public target samples (the server's Adam steps on ``θ`` draw from them).
        init : pair of ndarray, optional
            ``(ω_0, θ_0)`` in ``Θ²``; default ``model.init`` on the run's
            initialization stream (as :meth:`run`).
        seed : int or SeedSequence
            The run seed; with the same seed, the server :meth:`build` creates.
        """
        seed = check_seed(seed)
        n = check_int(n_clients, "n_clients", low=1)
        w = normalized_weights(weights, n)
        target = self.model.check_target(target)
        count, p = participation(self.clients_per_round, self.participation_prob, n)
        comps = checked_compressors(self.compressor, n, self.message_size)
        omega, theta = self._init(seed, init)
        return self._server(n, w, count, p, omega, theta, target, seed, comps)

    def build_client(self, index: int, data: Any, *, n_clients: int, target: Any, seed: Any = 0,
                     check: bool = True) -> OTClient:
        """Client ``index`` of ``n_clients`` on its own source samples ``data`` (what a remote worker builds).

        With the same ``seed`` it is the client :meth:`build` creates, so a
        remote client reproduces the in-process numbers.  ``check=False``
        skips the validation of ``data`` and ``target`` (already checked).
        """
        seed = check_seed(seed)
        n = check_int(n_clients, "n_clients", low=1)
        index = check_int(index, "index", low=0, high=n - 1)
        if check:
            data = self.model.check_data(data, f"datas[{index}]")
            target = self.model.check_target(target)
        _, p = participation(self.clients_per_round, self.participation_prob, n)
        return OTClient(index, data, target, self.steps, kind=self.kind,
                        compressor=client_compressor(self.compressor, n, index),
                        control_variate_step=getattr(self, "control_variate_step", 0.0), p=p,
                        local_steps=self.local_steps,
                        local_lr=self.local_lr, batch_size=self.batch_size,
                        target_batch_size=self.target_batch_size, seed=seed)

    def build(self, datas: Sequence[Any], *, target: Any, seed: Any = 0,
              init: Any = None) -> tuple[_OTServerBase, list[OTClient]]:
        """Validated server and :class:`OTClient` objects for ``datas`` (used by every runtime)."""
        seed = check_seed(seed)
        datas = self._check_datas(datas)
        target = self.model.check_target(target)
        n = len(datas)
        server = self.build_server(n, weights=self._raw_weights(datas), target=target, init=init, seed=seed)
        clients = [self.build_client(i, d, n_clients=n, target=target, seed=seed, check=False)
                   for i, d in enumerate(datas)]
        return server, clients

    # -- the run's hooks (FederatedAlgorithm.run) ------------------------------------------
    def check_run_args(self, n_rounds: int, evaluate_every: Any, *, target: Any,
                       evaluate: Any = None) -> dict[str, Any]:
        """``evaluate_every`` (>= 1), the public ``target`` samples (checked when the parties are built)
        and ``evaluate`` (None or callable)."""
        evaluate_every = check_int(evaluate_every, "evaluate_every", low=1)
        if evaluate is not None and not callable(evaluate):
            raise TypeError(f"Expected 'evaluate' to be callable, got {type(evaluate).__name__}")
        return {"evaluate_every": evaluate_every, "target": target, "evaluate": evaluate}

    def build_parties(self, datas: Sequence[Any], *, seed: Any, init: Any, on_client_error: str,
                      run_args: dict[str, Any]) -> tuple[_OTServerBase, list[OTClient]]:
        """:meth:`build` on ``run_args['target']`` (there is no exchange before the rounds)."""
        return self.build(datas, target=run_args["target"], seed=seed, init=init)

    def make_monitor(self, server: _OTServerBase, clients: Sequence[OTClient], *, n_rounds: int,
                     evaluate_data: Any, run_args: dict[str, Any]) -> "_Evaluator | None":
        """``evaluate`` at the ``evaluate_every`` cadence (None without one)."""
        if run_args["evaluate"] is None:
            return None
        return _Evaluator(run_args["evaluate"], run_args["evaluate_every"], n_rounds, server)

    def record_start(self, history: History, *, server: _OTServerBase, clients: Sequence[OTClient],
                     monitor: "_Evaluator | None", init: Any, run_args: dict[str, Any]) -> None:
        """``n_target`` in the config, and ``evaluate`` at ``(ω_0, θ_0)`` (also
        ``history.config["initial_evaluation"]``)."""
        history.config["n_target"] = int(clients[0].target.shape[0])
        record_initial(history)
        if monitor is not None:
            start = time.perf_counter()
            fields = monitor.fields()
            history.initial.update(fields)
            history.initial["monitor_time"] = time.perf_counter() - start
            history.config["initial_evaluation"] = fields

    def choose_runtime(self, runtime: Any, *, server: _OTServerBase, clients: Sequence[OTClient],
                       history: History, on_client_error: str) -> Any:
        """``runtime``, or the in-process one (Python backend) with ``n_threads`` and the fault policy."""
        if runtime is not None:
            return runtime
        return LocalRuntime(n_threads=self.n_threads, compiled=False, on_client_error=on_client_error)

    def fingerprint_fields(self, server: _OTServerBase, clients: Sequence[OTClient], *, evaluate_data: Any,
                           run_args: dict[str, Any]) -> dict[str, Any]:
        """The clients' data, the target samples, the weights ``μ`` and the name of ``evaluate``."""
        evaluate = run_args["evaluate"]
        return {"data": data_digest([c.data for c in clients]), "target": data_digest([clients[0].target]),
                "weights": data_digest([np.asarray(server.weights, dtype=np.float64)]),
                "evaluate": None if evaluate is None else getattr(evaluate, "__qualname__", type(evaluate).__name__)}

    def server_params(self, server: _OTServerBase) -> dict[str, Any]:
        """``{"omega": ω, "theta": θ}`` (copies)."""
        return {"omega": server.omega.copy(), "theta": server.theta.copy()}

    def callback_state(self, server: _OTServerBase, clients: Sequence[OTClient]) -> dict[str, Any]:
        """``"potential"`` (``ω``, Algorithm 3's) and ``"theta"`` (``θ``, its conjugate's)."""
        return {"potential": server.omega, "theta": server.theta}

    def final_state(self, server: _OTServerBase, clients: Sequence[OTClient]) -> dict[str, Any]:
        """``omega`` and ``theta`` (flat float64 copies)."""
        return {"omega": server.omega.copy(), "theta": server.theta.copy()}

    def final_theta(self, server: _OTServerBase, clients: Sequence[OTClient]) -> TransportMap:
        """The final :class:`TransportMap`."""
        return server.transport_map()

    def finish(self, history: History, server: _OTServerBase, clients: Sequence[OTClient]) -> None:
        """``history.transport_map``: the final map (as ``history.theta``)."""
        history.transport_map = history.theta

    def run(self, datas: Sequence[Any], n_rounds: int, *, target: Any, seed: Any = None, init: Any = None,
            runtime: Any = None, on_client_error: str | None = None, progress: bool | None = None,
            callback: Callable[[int, Mapping[str, Any]], None] | None = None, evaluate_every: int = 1,
            evaluate: Callable[[TransportMap], Mapping[str, float]] | None = None, resume: Any = None,
            checkpoint_every: int = 0, checkpoint_path: Any = None) -> History:
        """Run ``n_rounds`` rounds.

        Parameters
        ----------
        datas : list of ndarray of shape (N_i, d)
            Each client's source samples.
        n_rounds : int
        target : ndarray of shape (M, d)
            Public samples of the target ``Q`` (every client and the server hold them).
        seed : int, SeedSequence, Generator or None
            Root of all randomness (initial potentials, client selection,
            minibatches, compression); recorded in ``History.config["seed"]``.
        init : pair of ndarray, optional
            ``(ω_0, θ_0)`` in ``Θ²``; default ``model.init`` on the run's
            initialization stream (with this algorithm's ``identity_steps``).
        runtime : object, optional
            A runtime of :mod:`fedmm.runtime` (e.g. ``RayRuntime``); default
            the in-process ``LocalRuntime(n_threads)`` (Python backend).
        on_client_error : {'drop', 'raise'} or None
            The default runtime's fault policy (None: ``'drop'``); with
            ``runtime`` given, the runtime's own policy applies and a value
            that differs from it is refused.
        progress : bool or None
            A tqdm progress bar on standard error: True on, False off, None
            (default) on only when standard error is a terminal.
        callback : callable(t, state), optional
            Called after each round ``t`` with a read-only mapping
            (``types.MappingProxyType``): ``state["params"]`` is
            ``{"omega": ω_{t+1}, "theta": θ_{t+1}}`` (copies; what
            ``History.params`` holds at the end), ``state["potential"]`` ``ω_{t+1}``
            (the potential's parameters, Algorithm 3's ω) and ``state["theta"]``
            ``θ_{t+1}`` (its conjugate's).
        evaluate_every : int >= 1
            The cadence of ``evaluate`` (every this many rounds and the last).
        evaluate : callable(TransportMap) -> dict of str to float, optional
            Called after rounds at the cadence (every ``evaluate_every`` rounds
            and the last) on the current map; its fields (e.g. ``l2_uvp``) go
            into that round's record, and its value at ``(ω_0, θ_0)`` into
            ``history.initial`` (the row ``round = 0`` of ``history.series``)
            and ``history.config["initial_evaluation"]``.  Not timed.
        resume, checkpoint_every, checkpoint_path
            Checkpoints and resumption, bit for bit (the server's Adam states
            and control variate, the clients' control variates), as
            :meth:`fedmm.algorithms.FederatedAlgorithm.run` describes them.

        Returns
        -------
        History
            Per round ``t``, ``gamma``, ``E_omega``, ``E_theta``, ``active``,
            ``dropped``, ``bytes_up``, ``bytes_down``, ``wall_time`` and the
            ``evaluate`` fields at the cadence; ``history.state`` and
            ``history.params`` hold the final ``omega`` and ``theta`` (flat
            float64; ``params`` is saved with the History as for every
            algorithm), ``history.transport_map`` (and ``history.theta``) the
            final :class:`TransportMap` (in memory only).
        """
        return super().run(datas, n_rounds, seed=seed, init=init, runtime=runtime, on_client_error=on_client_error,
                           progress=progress, callback=callback, evaluate_every=evaluate_every, resume=resume,
                           checkpoint_every=checkpoint_every, checkpoint_path=checkpoint_path, target=target,
                           evaluate=evaluate)

    # -- the parties apart from the data (fedmm.protocols.RemoteAlgorithm) -------------------------------
    def remote_config(self) -> dict[str, Any]:
        """``History.config`` of a run whose parties live apart (:class:`fedmm.protocols.RemoteAlgorithm`)."""
        return self.config()

    def _public_target(self, public_data: Any) -> Any:
        if public_data is None:
            raise ValueError(f"{self.name} needs the public target samples: pass them as 'public_data' (to the "
                             "server and to every client)")
        return public_data

    def describe_data(self, data: Any, partition_id: int) -> dict[str, np.ndarray]:
        """A node's data description: ``"n-samples"``, its ``N_i`` (the default weights ``μ_i = N_i/N``)."""
        data = self.model.check_data(data, f"partition {partition_id}")
        return {"n-samples": np.array([data.shape[0]], dtype=np.int64)}

    def remote_server(self, n_clients: int, *, descriptions: Sequence[Mapping[str, np.ndarray]], seed: int,
                      init: Any = None, init_datas: Sequence[Any] | None = None,
                      public_data: Any = None) -> _OTServerBase:
        """:meth:`build_server` with the nodes' sample counts as weights and ``public_data`` as the target
        samples; ``init`` is ``(ω_0, θ_0)`` (default ``model.init`` on the run's initialization stream)."""
        if init_datas is not None:
            raise TypeError(f"{self.name} takes no 'init_datas' (ω_0, θ_0 come from 'init' or the seed)")
        weights = (self.weights if self.weights is not None
                   else [float(np.asarray(d["n-samples"]).reshape(-1)[0]) for d in descriptions])
        return self.build_server(n_clients, weights=weights, target=self._public_target(public_data), init=init,
                                 seed=seed)

    def remote_client(self, index: int, data: Any, *, n_clients: int, seed: int, public_data: Any = None) -> OTClient:
        """:meth:`build_client` with ``public_data`` as the target samples."""
        return self.build_client(index, data, n_clients=n_clients, target=self._public_target(public_data),
                                 seed=seed)

    def broadcast_from_arrays(self, arrays: Sequence[np.ndarray], layout: str) -> OTBroadcast:
        """:meth:`OTBroadcast.from_arrays`."""
        return OTBroadcast.from_arrays(arrays)

    def client_state(self, client: OTClient) -> OTClientState:
        """:meth:`OTClient.export_state`."""
        return client.export_state()

    def client_state_from_arrays(self, arrays: Mapping[str, np.ndarray]) -> OTClientState:
        """A :meth:`client_state` value from its ``to_arrays()`` (:meth:`OTClientState.from_arrays`)."""
        return OTClientState.from_arrays(arrays)

    def restore_client(self, client: OTClient, state: OTClientState, message: OTBroadcast) -> None:
        """:meth:`OTClient.import_state`."""
        client.import_state(state)

    def estimate(self, server: _OTServerBase) -> TransportMap:
        """The current :class:`~fedmm.models.TransportMap`."""
        return server.transport_map()

    def remote_finish_needs_clients(self) -> bool:
        """False: the final state is the server's (``ω``, ``θ``)."""
        return False

    def remote_finish(self, server: _OTServerBase, history: History,
                      client_states: Mapping[int, Mapping[str, np.ndarray]] | None = None) -> None:
        """``history.state``, ``params``, ``transport_map`` and ``theta`` as :meth:`run` sets them."""
        history.state["omega"] = server.omega.copy()
        history.state["theta"] = server.theta.copy()
        history.params = {"omega": server.omega.copy(), "theta": server.theta.copy()}
        history.transport_map = server.transport_map()
        history.theta = history.transport_map


class FedMMOT(_FederatedOT):
    r"""Pseudo-MM for a federated optimal-transport map (FedMM-OT, FedMM paper §7.1, Algorithm 3).

    Clients hold samples of their source distributions ``P_i``; all hold the
    public target samples of ``Q``.  Round ``t``:

    - client ``i`` (active): ``ω_i(θ_t)`` from ``local_steps`` projected
      gradient steps ``ω ← Π(ω − η ∇_ω W_i(ω, θ_t))`` from ``ω_t`` on
      minibatches of its data and of the target (line 6; the paper's
      experiment: one step); ``Δ_i = ω_i − ω_t − V_{t,i}``, sends ``Quant(Δ_i)``
      and sets ``V_{t+1,i} = V_{t,i} + (α/p) Quant(Δ_i)`` (lines 7-9);
    - server: ``H = V_t + p⁻¹ Σ_{active} μ_i Quant(Δ_i)``,
      ``ω_{t+1} = Π(ω_t + γ_{t+1} H)`` (lines 13-15; with ``omega_step='adam'``
      ``ω_{t+1} = Π(ω_t + γ_{t+1} m̂/(√v̂ + ε))``, Adam's direction of ``H``
      with the moments ``m̂``, ``v̂`` of the successive ``H``), then ``θ_{t+1}`` from
      ``theta_steps`` Adam steps on ``θ ↦ W(ω_{t+1}, θ)`` (along the
      problem's θ-direction, :meth:`TransportProblem.grad_theta`) with target
      minibatches, each projected on ``Θ``, the Adam state carried over
      rounds (line 16, relaxed as in §7.3: the paper takes ten steps, the
      default here is thirty, see ``theta_steps``), and
      ``V_{t+1} = V_t + (α/p) Σ_{active} μ_i Quant(Δ_i)`` (line 17).

    Parameters
    ----------
    model : TransportProblem
    clients_per_round : int, optional
        ``m`` clients per round uniformly without replacement (``p = m/n``).
    participation_prob : float in (0, 1], optional
        Independent Bernoulli(``p``) participation.  Neither: every client every round.
    compressor : compressor or sequence of n compressors, default Identity()
        Unbiased compressor(s) of :mod:`fedmm.compression` for ``Δ_i``.
    control_variate_step : float in [0, 1]
        Control-variate step ``α`` (0 disables the control variates; at most 1,
        as in FedMM's Theorem 1).  Algorithm 3 requires ``α > 0``; the default
        0.01 is the FedMM paper's own value (§6) and lies in Theorem 1's
        ``(0, 1/(1 + ω_p)]`` for any compressor of variance factor ``ω_p <= 99``.
        With every client active and no compression, ``α`` does not change the
        iterates (``H`` is then the clients' mean ``ω_i − ω_t`` whatever ``V``),
        only their float64 rounding.
    step : float, '1/t', ('sqrt', beta) or callable, optional
        ``γ_t``, the server's step on ``ω`` (:class:`~fedmm.algorithms.StepSchedule`);
        default 1 with ``omega_step='sgd'`` (Algorithm 3's largest step, the best of
        ``fedmm experiment ot-ablation``'s grid), 3e-3 with ``'adam'`` (the step
        ``fedmm experiment ot`` tuned at d = 16, 32 and 64 on its default pair,
        :func:`fedmm.data.icnn_map_benchmark`; docs/figures/README.md).
    omega_step : {'sgd', 'adam'}
        The server's step on ``ω``: ``'sgd'`` is line 14 of Algorithm 3,
        ``ω + γ H``; ``'adam'`` moves along Adam's direction of the aggregated
        ``H`` (the server treats ``−H`` as a gradient, as FedAdam does, with
        ``b1``, ``b2``, ``eps`` and learning rate ``γ_t``; its state is part of the
        server's state).  With one gradient step per client, ``H`` is
        ``−η`` times the clients' mean gradient, and the plain step is
        gradient descent on ``ω`` at the rate ``γη`` for every coordinate of an
        ICNN whose layers' gradients differ by orders of magnitude; Adam's
        per-coordinate scaling is what makes it learn (measured on the
        known-map benchmark at d = 16, 300 rounds: L2-UVP 8.9% with ``'sgd'``
        at ``η = 0.003``, 7.6% with ``'adam'`` at ``γ = 10⁻³``; docs/guide/papers.rst).
    local_steps : int >= 1
    local_lr : float > 0
        ``η`` of the clients' gradient steps (plain projected gradient
        steps).  The default 0.003 is ``fedmm experiment ot``'s.  With
        ``omega_step='sgd'`` the scale matters: 0.01 made it unstable at
        ``d = 16 … 64`` (docs/figures/README.md); 0.05 suits ``d = 2``.  With
        ``'adam'`` the server's direction does not depend on the scale of
        ``H``; ``η`` matters only through the clients' projection on ``Θ``
        (and Adam's ``eps``).
    theta_steps : int >= 0
        The server's Adam steps on ``θ`` per round.  The default 30 is ``fedmm experiment ot``'s:
        the paper's ten leave ``θ`` behind ``ω`` at the tuned ``γ`` (L2-UVP spikes,
        docs/figures/README.md).
    theta_lr : float > 0
        Learning rate of those Adam steps on ``θ``.
    b1, b2, eps : float
        Adam's other hyper-parameters (``optax.adam``, for ``θ`` and, with ``omega_step='adam'``,
        ``ω``); ``theta_lr``, ``b1``, ``b2`` and ``eps`` default to Korotin et al.'s centralized
        runs (PyTorch's Adam defaults with ``lr = 1e-3``).
    batch_size : int, optional
        Source samples per local step, a count (default ``model.batch_size``;
        if that is None, the full local data).
    target_batch_size : int, optional
        Target samples per step, on clients and server (default ``batch_size``).
    weights : sequence of n floats, optional
        ``μ_i`` (normalized); default ``N_i/N``.
    identity_steps : int >= 0
        Warm start of ``(ω_0, θ_0)`` when ``run`` gets no ``init``: Adam steps
        fitting ``∇f ≈`` identity (:meth:`TransportProblem.init`), as Korotin
        et al. do before training; from a raw random start the map diverges
        (measured on the Gaussian case: L2-UVP ~1e19 after 30 rounds).
    n_threads : int >= 1
        Threads of the default in-process runtime (results do not depend on it).
    device : jax.Device, str or None
        Where the JAX steps (clients' and server's), the warm start and ``evaluate`` run:
        a ``jax.Device`` (e.g. ``jax.devices("gpu")[0]``), a platform name (``"cpu"``,
        ``"gpu"``: its first device) or None, JAX's default device (the first GPU when
        JAX has one, unless ``jax.default_device`` says otherwise).  Always float64.
        Recorded, with the device that None resolves to, in ``History.config["device"]``
        (``platform`` and ``device_kind``).

    Examples
    --------
    >>> import numpy as np
    >>> from fedmm.models import TransportProblem
    >>> rng = np.random.default_rng(0)
    >>> datas = [rng.normal(size=(200, 2)) for _ in range(3)]
    >>> target = rng.normal(2.0, 1.0, size=(600, 2))
    >>> algo = FedMMOT(TransportProblem(2, hidden_sizes=[16, 16], batch_size=64), local_lr=0.05,
    ...                identity_steps=100)
    >>> h = algo.run(datas, 3, target=target, seed=0)
    >>> h.transport_map(np.zeros((4, 2))).shape, len(h)
    ((4, 2), 3)
    """

    name = "FedMMOT"
    kind = "fedmm"
    parameter_constraints = {**_FederatedOT.parameter_constraints,
                             "omega_step": Options(*OMEGA_STEPS),
                             "control_variate_step": Rule(check_control_variate_step, "a real number in [0, 1]")}

    def __init__(self, model: TransportProblem, *, clients_per_round: int | None = None,
                 participation_prob: float | None = None, compressor: Any = None, control_variate_step: float = 0.01,
                 step: Any = None, local_steps: int = 1, local_lr: float = 0.003, theta_steps: int = 30,
                 theta_lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                 batch_size: int | None = None, target_batch_size: int | None = None,
                 weights: Sequence[float] | None = None, identity_steps: int = 500, n_threads: int = 1,
                 omega_step: str = "adam", device: Any = None) -> None:
        self._common(model, clients_per_round, participation_prob, compressor, local_steps, local_lr,
                     batch_size, target_batch_size, weights, identity_steps, n_threads, theta_steps, theta_lr,
                     b1, b2, eps, device)
        self.set_parameters(omega_step=omega_step, control_variate_step=control_variate_step)
        if step is None:
            step = 1.0 if self.omega_step == "sgd" else 3e-3
        self.schedule = StepSchedule(step)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "control_variate_step": self.control_variate_step,
                "step": self.schedule.description, "omega_step": self.omega_step}

    def _server(self, n: int, weights: np.ndarray, count: int | None, p: float, omega: np.ndarray,
                theta: np.ndarray, target: np.ndarray, seed: np.random.SeedSequence,
                comps: list[Any]) -> OTServer:
        return OTServer(self.steps, n, weights=weights, p=p, count=count, schedule=self.schedule,
                        control_variate_step=self.control_variate_step,
                        theta_steps=self.theta_steps, target=target, target_batch_size=self.target_batch_size,
                        omega=omega, theta=theta, seed=seed, decoders=comps, omega_step=self.omega_step)


class FedAdam(_FederatedOT):
    r"""FedAdam (Reddi et al. 2021) on the federated OT objective (33), the baseline of FedMM paper §7.3.

    Round ``t``: each active client takes ``local_steps`` projected gradient
    steps on ``(ω, θ) ↦ W_i(ω, θ)`` from ``(ω_t, θ_t)`` (minibatches of its data
    and of the target) and sends the pseudo-gradient
    ``Quant((ω_i − ω_t, θ_i − θ_t))``; the server averages
    ``Δ̄ = p⁻¹ Σ_{active} μ_i Quant(Δ_i)`` (the plain mean of the active
    clients' updates for equal weights and a fixed count), takes one Adam
    step along ``Δ̄`` (``optax.adam`` fed the gradient ``−Δ̄``) and projects
    both potentials on ``Θ``.

    Parameters
    ----------
    model, clients_per_round, participation_prob, compressor, local_steps, local_lr, batch_size,
    target_batch_size, weights, identity_steps, n_threads, device
        As :class:`FedMMOT`.
    server_lr : float > 0
        The server's Adam learning rate (tuned in §7.3); the default 3e-3 is the
        rate ``fedmm experiment ot`` tuned at d = 16, 32 and 64 on its default pair
        (:func:`fedmm.data.icnn_map_benchmark`; docs/figures/README.md).
    b1, b2, eps : float
        Adam's other hyper-parameters: Korotin et al.'s centralized ones
        (PyTorch defaults: 0.9, 0.999, 1e-8).
    theta_steps : int >= 0
        Extra Adam steps on ``θ`` alone that the server takes after its step on
        ``(ω, θ)``, on target minibatches and along the problem's θ-direction,
        exactly as :class:`FedMMOT`'s server does (line 16 of Algorithm 3):
        FedAdam given FedMM-OT's server-side θ budget (an ablation; 0, the
        default, is FedAdam of Reddi et al.).
    theta_lr : float > 0
        Learning rate of those steps (as :class:`FedMMOT`'s ``theta_lr``).
    """

    name = "FedAdam"
    kind = "fedadam"
    parameter_constraints = {**_FederatedOT.parameter_constraints, "server_lr": Real(0.0, low_open=True)}

    def __init__(self, model: TransportProblem, *, clients_per_round: int | None = None,
                 participation_prob: float | None = None, compressor: Any = None, local_steps: int = 1,
                 local_lr: float = 0.003, server_lr: float = 3e-3, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-8, batch_size: int | None = None, target_batch_size: int | None = None,
                 weights: Sequence[float] | None = None, identity_steps: int = 500, n_threads: int = 1,
                 device: Any = None, theta_steps: int = 0, theta_lr: float = 1e-3) -> None:
        self.set_parameters(server_lr=server_lr)
        self._common(model, clients_per_round, participation_prob, compressor, local_steps, local_lr,
                     batch_size, target_batch_size, weights, identity_steps, n_threads, theta_steps, theta_lr,
                     b1, b2, eps, device, steps_lr=self.server_lr)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "server_lr": self.server_lr}

    def _server(self, n: int, weights: np.ndarray, count: int | None, p: float, omega: np.ndarray,
                theta: np.ndarray, target: np.ndarray, seed: np.random.SeedSequence,
                comps: list[Any]) -> FedAdamServer:
        return FedAdamServer(self.steps, n, weights=weights, p=p, count=count, omega=omega, theta=theta,
                             seed=seed, decoders=comps, theta_steps=self.theta_steps, theta_lr=self.theta_lr,
                             target=target, target_batch_size=self.target_batch_size)
