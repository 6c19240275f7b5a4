# SPDX-License-Identifier: BSD-3-Clause
"""Non-smooth federated baselines of the FedMLS paper §4: FedAvg, Scaffold, Scaffnew.

All three minimize ``F(w) = (1/n) Σ_i f_i(w)`` for a problem of
:mod:`fedmm.models.nonsmooth` with (stochastic) subgradients of the local
losses ``f_i``, using the step-size rules the paper reports for its §4
experiment (the smooth-case defaults of these methods do not converge on
non-smooth problems):

- :class:`FedAvg` (local SGD): ``T_k`` local steps ``u ← u − η_k g_i(u)`` from the
  server point, ``η_k = η0/√k`` in round ``k``; the server averages.
- :class:`Scaffold` (Karimireddy et al. 2020, option II control variates):
  global step ``η_g = √n``, local step ``η_t = η0/(η_g t)`` at the ``t``-th local
  step counted over the whole run.
- :class:`Scaffnew` (ProxSkip, Mishchenko et al. 2022): one local step per
  iteration ``t``, communication with probability ``p_t = 1/√t``, step
  ``η_t = η0/√t``.

This module also holds what FedMLS shares with them: step-size schedules,
the client-vectorized (minibatch) subgradient oracle with one random stream per
client, and argument checks.  Every ``run`` returns a :class:`fedmm.History`
with, per communication round, ``objective`` ``F`` at the server point,
cumulative per-client ``local_steps``, ``bytes_up``/``bytes_down`` (float64
vectors moved in that round, all clients) and cumulative ``wall_time`` (s);
``history.state["x"]`` is the final server point.
"""
from __future__ import annotations

import math
import numbers
import time
from typing import Any, Sequence

import numpy as np

from fedmm._validation import check_in, check_int, check_real
from fedmm.history import History
from fedmm.models.nonsmooth import NonsmoothProblem, StackedClients

__all__ = ["FedAvg", "Scaffold", "Scaffnew", "Linear", "Inverse", "InverseSqrt", "FederatedSubgradientMethod",
           "check_schedule", "evaluate_schedule", "describe_schedule"]

_FLOAT_BYTES = 8


# -- schedules ------------------------------------------------------------------
class _Schedule:
    """``k ↦ c · k**power`` (a picklable, printable callable)."""

    power = 0.0

    def __init__(self, c: float) -> None:
        self.c = check_real(c, "c", low=0.0, low_open=True)

    def __call__(self, k: int) -> float:
        return self.c * k**self.power

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.c!r})"


class Linear(_Schedule):
    """``k ↦ c·k`` (e.g. ``T_k = T0·k`` local steps; an integer when ``c`` is one).

    Examples
    --------
    >>> Linear(2)(3)
    6
    """

    power = 1

    def __init__(self, c: float) -> None:
        super().__init__(c)
        if isinstance(c, numbers.Integral):
            self.c = int(c)

    def __call__(self, k: int):
        return self.c * k


class Inverse(_Schedule):
    """``k ↦ c/k`` (e.g. ``λ_k = λ0/k``).

    Examples
    --------
    >>> Inverse(1.0)(4)
    0.25
    """

    power = -1.0


class InverseSqrt(_Schedule):
    """``k ↦ c/√k`` (e.g. ``η_k = η0/√k``).

    Examples
    --------
    >>> InverseSqrt(1.0)(4)
    0.5
    """

    power = -0.5


def check_schedule(value: Any, name: str, *, integer: bool) -> Any:
    """A positive number (int ≥ 1 if ``integer``) or a callable of the round/step index."""
    if callable(value):
        return value
    if integer:
        return check_int(value, name, low=1)
    return check_real(value, name, low=0.0, low_open=True)


def evaluate_schedule(schedule: Any, k: int, name: str, *, integer: bool) -> Any:
    """The value of a schedule (a number, or a callable of ``k``) at round or step ``k``, checked as
    :func:`check_schedule` checks constants (``name(k)`` in errors)."""
    if not callable(schedule):
        return schedule
    v = schedule(k)
    if integer:
        if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral) and float(v).is_integer():
            v = int(v)
        return check_int(v, f"{name}({k})", low=1)
    return check_real(v, f"{name}({k})", low=0.0, low_open=True)


def describe_schedule(value: Any) -> Any:
    """A JSON-friendly description of a schedule for ``History.config``."""
    return value if isinstance(value, (int, float, str)) or value is None else repr(value)


# -- shared machinery ---------------------------------------------------------------
def _seed_sequence(seed: Any) -> np.random.SeedSequence:
    if isinstance(seed, np.random.SeedSequence):
        return seed
    return np.random.SeedSequence(check_int(seed, "seed", low=0))


class SubgradientOracle:
    """Subgradients of all clients' ``f_i`` at once, full or minibatch.

    Parameters
    ----------
    problem : NonsmoothProblem
    stacked : StackedClients
    batch_fraction : float or None
        None: exact subgradients of ``f_i`` (deterministic).  Otherwise each
        client draws ``b_i = ⌈batch_fraction · m_i⌉`` of its samples uniformly
        without replacement at every local step, and the estimate is scaled by
        ``m_i / b_i`` (unbiased).
    seeds : sequence of SeedSequence
        One per client: client ``i`` draws only from its own stream, so results
        do not depend on how clients are grouped.
    chunk : int
        Minibatches are drawn ``chunk`` steps at a time per client (a fixed
        number, so that draws do not depend on the round structure).
    """

    def __init__(
        self,
        problem: NonsmoothProblem,
        stacked: StackedClients,
        batch_fraction: float | None,
        seeds: Sequence[np.random.SeedSequence],
        chunk: int = 64,
    ) -> None:
        self.problem = problem
        self.stacked = stacked
        self.batch_fraction = batch_fraction
        self.seeds = list(seeds)
        self.calls = 0
        if batch_fraction is None:
            return
        counts = stacked.counts
        self._rngs = [np.random.default_rng(s) for s in seeds]
        self.batch = np.maximum(1, np.ceil(batch_fraction * counts - 1e-12)).astype(np.int64)
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
        if self.batch_fraction is None:
            return self.problem.subgradients(self.stacked, W)
        if self._pos == self._buffer.shape[0]:
            self._refill()
        rows = self._buffer[self._pos]
        self._pos += 1
        return self.problem.subgradients(self.stacked, W, rows, self.row_offsets, self.scale)


class FederatedSubgradientMethod:
    """Argument handling and the run skeleton shared by FedMLS and the baselines."""

    name = "base"

    def __init__(self, problem: NonsmoothProblem, oracle: str, batch_fraction: float) -> None:
        if not isinstance(problem, NonsmoothProblem):
            raise TypeError(
                f"Expected 'problem' to be a fedmm.models.nonsmooth problem (HingeSVM, L1Regression), "
                f"got {type(problem).__name__}"
            )
        self.problem = problem
        self.oracle = check_in(oracle, "oracle", ("full", "minibatch"))
        self.batch_fraction = check_real(batch_fraction, "batch_fraction", low=0.0, high=1.0, low_open=True)

    def _config(self) -> dict:  # pragma: no cover - subclasses
        raise NotImplementedError

    def _setup(self, datas, n_rounds, seed, x0):
        stacked = self.problem.stack(datas)
        n_rounds = check_int(n_rounds, "n_rounds", low=1)
        p = stacked.n_params
        x0 = np.zeros(p) if x0 is None else self.problem.check_w(x0, p, "x0").copy()
        ss = _seed_sequence(seed)
        children = ss.spawn(stacked.n_clients + 1)  # one stream per client, one for the server
        fraction = self.batch_fraction if self.oracle == "minibatch" else None
        oracle = SubgradientOracle(self.problem, stacked, fraction, children[:-1])
        config = dict(self._config(), problem=repr(self.problem), oracle=self.oracle,
                      batch_fraction=fraction, n_rounds=n_rounds, n_clients=stacked.n_clients,
                      seed=int(seed) if not isinstance(seed, np.random.SeedSequence) else repr(seed))
        history = History(self.name, config)
        return stacked, n_rounds, x0, oracle, np.random.default_rng(children[-1]), history

    def _record(self, history, stacked, k, x, steps, n_vectors_up, n_vectors_down, start, **extra):
        n, p = stacked.n_clients, stacked.n_params
        history.append(
            t=k,
            objective=self.problem.objective(stacked, x),
            local_steps=int(steps),
            bytes_up=int(n * n_vectors_up * p * _FLOAT_BYTES),
            bytes_down=int(n * n_vectors_down * p * _FLOAT_BYTES),
            wall_time=time.perf_counter() - start,
            **extra,
        )


class FedAvg(FederatedSubgradientMethod):
    """Federated averaging (local subgradient method) with ``η_k = η0/√k``.

    Round ``k``: every client starts from the server point ``x``, runs ``T_k``
    steps ``u ← u − η_k ĝ_i(u)`` (``ĝ_i`` a (minibatch) subgradient of ``f_i``),
    and the server sets ``x ← (1/n) Σ_i u_i``.

    Parameters
    ----------
    problem : NonsmoothProblem
    local_steps : int or callable
        ``T_k ≥ 1`` (e.g. ``Linear(1)`` for ``T_k = k``, the paper's choice).
    eta : float or callable
        ``η0`` of the rule ``η_k = η0/√k``, or a callable ``k ↦ η_k``.
    oracle : {"minibatch", "full"}
    batch_fraction : float
        Fraction of local samples per minibatch (the paper: 0.1).
    """

    name = "FedAvg"

    def __init__(self, problem, local_steps, eta, *, oracle="minibatch", batch_fraction=0.1):
        super().__init__(problem, oracle, batch_fraction)
        self.local_steps = check_schedule(local_steps, "local_steps", integer=True)
        eta = check_schedule(eta, "eta", integer=False)
        self.eta = eta if callable(eta) else InverseSqrt(eta)

    def _config(self):
        return {"local_steps": describe_schedule(self.local_steps), "eta": describe_schedule(self.eta)}

    def run(self, datas, n_rounds, *, seed=0, x0=None) -> History:
        """Run ``n_rounds`` rounds on the clients' ``(A, y)`` data; see the class docstring."""
        stacked, n_rounds, x, oracle, _, history = self._setup(datas, n_rounds, seed, x0)
        n = stacked.n_clients
        start, steps = time.perf_counter(), 0
        for k in range(1, n_rounds + 1):
            T = evaluate_schedule(self.local_steps, k, "local_steps", integer=True)
            eta = evaluate_schedule(self.eta, k, "eta", integer=False)
            U = np.tile(x, (n, 1))
            for _ in range(T):
                U -= eta * oracle(U)
            x = U.mean(axis=0)
            steps += T
            self._record(history, stacked, k, x, steps, 1, 1, start, eta=eta, T=T)
        history.state["x"] = x
        return history


class Scaffold(FederatedSubgradientMethod):
    """Scaffold with option-II control variates, non-smooth step rule of the FedMLS paper.

    Round ``k`` (full participation): each client ``i`` starts ``u = x`` and runs
    ``T_k`` steps ``u ← u − η_t (ĝ_i(u) − c_i + c)``, ``t`` counting all local
    steps of the run, then ``c_i⁺ = c_i − c + (x − u)/Σ_s η_s`` (option II with
    the sum of this round's step sizes, which is ``T η_l`` for a constant step);
    the server sets ``x ← x + η_g · mean(u − x)`` and ``c ← c + mean(c_i⁺ − c_i)``.

    Parameters
    ----------
    problem : NonsmoothProblem
    local_steps : int or callable
        ``T_k ≥ 1``.
    eta : float or callable
        ``η0`` of ``η_t = η0/(η_g t)``, or a callable ``t ↦ η_t``.
    global_step : float, optional
        ``η_g``; default ``√n`` (the paper, after Karimireddy et al.).
    oracle, batch_fraction
        As in :class:`FedAvg`.
    """

    name = "Scaffold"

    def __init__(self, problem, local_steps, eta, *, global_step=None, oracle="minibatch", batch_fraction=0.1):
        super().__init__(problem, oracle, batch_fraction)
        self.local_steps = check_schedule(local_steps, "local_steps", integer=True)
        self.eta = check_schedule(eta, "eta", integer=False)
        self.global_step = None if global_step is None else check_real(
            global_step, "global_step", low=0.0, low_open=True)

    def _config(self):
        return {"local_steps": describe_schedule(self.local_steps), "eta": describe_schedule(self.eta),
                "global_step": self.global_step}

    def run(self, datas, n_rounds, *, seed=0, x0=None) -> History:
        """Run ``n_rounds`` rounds; see the class docstring."""
        stacked, n_rounds, x, oracle, _, history = self._setup(datas, n_rounds, seed, x0)
        n, p = stacked.n_clients, stacked.n_params
        eta_g = math.sqrt(n) if self.global_step is None else self.global_step
        c, C = np.zeros(p), np.zeros((n, p))
        start, t = time.perf_counter(), 0
        for k in range(1, n_rounds + 1):
            T = evaluate_schedule(self.local_steps, k, "local_steps", integer=True)
            U = np.tile(x, (n, 1))
            correction = c - C  # c − c_i, fixed during the round
            eta_sum = 0.0
            for _ in range(T):
                t += 1
                eta = self.eta / (eta_g * t) if not callable(self.eta) else evaluate_schedule(self.eta, t, "eta", integer=False)
                U -= eta * (oracle(U) + correction)
                eta_sum += eta
            C_new = C - c + (x - U) / eta_sum
            x = x + eta_g * (U - x).mean(axis=0)
            c = c + (C_new - C).mean(axis=0)
            C = C_new
            self._record(history, stacked, k, x, t, 2, 2, start, T=T)
        history.state["x"] = x
        history.state["c"] = c
        return history


class Scaffnew(FederatedSubgradientMethod):
    """Scaffnew (ProxSkip for federated learning) with ``p_t = 1/√t``, ``η_t = η0/√t``.

    Iteration ``t``: ``x̂_i = x_i − η_t (ĝ_i(x_i) − h_i)``; with probability
    ``p_t`` (one coin for all clients, from the server's stream) the clients
    communicate and set ``x_i = (1/n) Σ_j (x̂_j − (η_t/p_t) h_j)``, otherwise
    ``x_i = x̂_i``; then ``h_i ← h_i + (p_t/η_t)(x_i − x̂_i)``.  A communication
    round ends at each communication; ``n_rounds`` counts communications.

    Parameters
    ----------
    problem : NonsmoothProblem
    eta : float or callable
        ``η0`` of ``η_t = η0/√t``, or a callable ``t ↦ η_t``.
    probability : callable or float, optional
        ``p_t ∈ (0, 1]``; default ``t ↦ 1/√t`` (the paper).
    max_local_steps : int
        Raise ``RuntimeError`` rather than run longer than this many iterations.
    oracle, batch_fraction
        As in :class:`FedAvg`.
    """

    name = "Scaffnew"

    def __init__(self, problem, eta, *, probability=None, oracle="minibatch", batch_fraction=0.1,
                 max_local_steps=10**7):
        super().__init__(problem, oracle, batch_fraction)
        eta = check_schedule(eta, "eta", integer=False)
        self.eta = eta if callable(eta) else InverseSqrt(eta)
        if probability is None:
            probability = InverseSqrt(1.0)
        elif not callable(probability):
            probability = _check_probability_value(probability)
        self.probability = probability
        self.max_local_steps = check_int(max_local_steps, "max_local_steps", low=1)

    def _config(self):
        return {"eta": describe_schedule(self.eta), "probability": describe_schedule(self.probability)}

    def run(self, datas, n_rounds, *, seed=0, x0=None) -> History:
        """Run until ``n_rounds`` communications happened; see the class docstring."""
        stacked, n_rounds, x, oracle, coin, history = self._setup(datas, n_rounds, seed, x0)
        n, p = stacked.n_clients, stacked.n_params
        X, H = np.tile(x, (n, 1)), np.zeros((n, p))
        start, t, k = time.perf_counter(), 0, 0
        while k < n_rounds:
            t += 1
            if t > self.max_local_steps:
                raise RuntimeError(f"Scaffnew exceeded max_local_steps={self.max_local_steps} "
                                   f"after {k} of {n_rounds} communications")
            eta = evaluate_schedule(self.eta, t, "eta", integer=False)
            prob = _check_probability_value(evaluate_schedule(self.probability, t, "probability", integer=False))
            X_hat = X - eta * (oracle(X) - H)
            if coin.random() < prob:
                x = (X_hat - (eta / prob) * H).mean(axis=0)
                X = np.tile(x, (n, 1))
                H += (prob / eta) * (X - X_hat)
                k += 1
                self._record(history, stacked, k, x, t, 1, 1, start, eta=eta, probability=prob)
            else:
                X = X_hat  # h_i unchanged: x_i − x̂_i = 0
        history.state["x"] = x
        return history


def _check_probability_value(value: Any) -> float:
    return check_real(value, "probability", low=0.0, high=1.0, low_open=True)
