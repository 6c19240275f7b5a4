# SPDX-License-Identifier: BSD-3-Clause
"""Deterministic fault injection for the runtimes' fault policy (issue 15): a client wrapper whose step
raises, sleeps, ends its process or sends an invalid payload in chosen rounds, a seeded plan of which
client fails when and how, and the state invariant a round must keep.

Shared by ``tests/runtime/test_runtime_faults.py`` and ``benchmarks/bench_faults.py`` (one copy only).
"""
from __future__ import annotations

import os
import time

import numpy as np

from fedmm.compression import Identity

#: The ways a client round can fail, and the prefix of the ``drop_reasons`` entry each one leads to.
CAUSES = {
    "raise": "RuntimeError: injected failure",
    "sleep": "timeout",
    "exit": "actor died",
    "nan": "invalid payload: malformed payload: identity payload holds a non-finite value",
    "truncate": "invalid payload: malformed payload: payload size does not match its header",
    "absurd": "invalid payload: Client ",  # "... {i} sent values of magnitude up to 1e+300, beyond ..."
}


def absurd_payload(q: int, value: float = 1e300) -> bytes:
    """A well-formed Identity payload of length ``q``, every value ``value``: finite, but far beyond what a
    server state can hold (the server must refuse it like a non-finite one)."""
    return Identity().encode(np.full(q, value))


def nan_payload(q: int) -> bytes:
    """A well-formed Identity payload of length ``q`` whose values are NaN (the decoder must refuse it)."""
    payload = Identity().encode(np.zeros(q))
    return payload[:len(payload) - 8 * q] + np.full(q, np.nan).tobytes()


#: The round of a plan key ``(ANY_ROUND, i)``: client ``i`` fails so in every round (the only key a client whose
#: messages carry no round index ``t`` can use, e.g. the subgradient family's).
ANY_ROUND = None


class FaultyClient:
    """A :class:`fedmm.algorithms.Client` whose round ``t`` fails as ``plan[(t, index)]`` says
    (``plan[(ANY_ROUND, index)]``: every round).

    ``'raise'``: ``RuntimeError('injected failure')``; ``'sleep'``: sleeps
    ``sleep`` seconds, then answers (late); ``'exit'``: ``os._exit(1)`` (ends
    the process: only under Ray); ``'nan'``: runs its step, then sends a
    payload that decodes to NaN; ``'absurd'``: runs its step, then sends
    1e300 everywhere; ``'truncate'``: its payload cut by 3 bytes.
    Everything else is the wrapped client's.
    """

    def __init__(self, client, plan: dict, sleep: float = 1.0) -> None:
        self.client = client
        self.plan = {key: cause for key, cause in plan.items() if key[1] == client.index}
        self.sleep = float(sleep)

    @property
    def index(self) -> int:
        return self.client.index

    @property
    def V(self):
        return self.client.V

    @property
    def data(self):
        return self.client.data

    def setup(self, message):
        return self.client.setup(message)

    def export_state(self):
        return self.client.export_state()

    def import_state(self, state, like_theta=None):
        self.client.import_state(state, like_theta)

    def step(self, message):
        if (ANY_ROUND, self.index) in self.plan:
            cause = self.plan[(ANY_ROUND, self.index)]
        else:  # a client with nothing planned reads no round index
            cause = self.plan.get((int(message.t), self.index)) if self.plan else None
        if cause == "raise":
            raise RuntimeError("injected failure")
        if cause == "exit":
            os._exit(1)
        if cause == "sleep":
            time.sleep(self.sleep)
        payload = self.client.step(message)
        if cause == "nan":
            return nan_payload(self.client.V.shape[0])
        if cause == "absurd":
            return absurd_payload(self.client.V.shape[0])
        if cause == "truncate":
            return payload[:-3]
        return payload


class RoundCountingClient(FaultyClient):
    """:class:`FaultyClient` for messages without a round index (the non-smooth family's): round ``t`` of
    ``plan[(t, index)]`` is the client's ``t``-th step (every client steps once per round it is contacted)."""

    def __init__(self, client, plan: dict) -> None:
        super().__init__(client, plan)
        self.steps = 0

    def step(self, message):
        t = self.steps
        self.steps += 1
        if self.plan.get((t, self.index)) == "raise":
            raise RuntimeError("injected failure")
        return self.client.step(message)


def fault_plan(seed: int, n_clients: int, n_rounds: int, rate: float, causes, rare=None) -> dict:
    """``{(t, i): cause}``: each client round fails with probability ``rate``, its cause drawn uniformly
    from ``causes``; ``rare`` (cause → count) adds that many client rounds of each listed cause at
    seeded places (expensive causes, e.g. a process exit under Ray).  Deterministic for a given seed."""
    rng = np.random.default_rng(seed)
    causes = list(causes)
    plan = {}
    if causes:
        fails = rng.random((n_rounds, n_clients)) < rate
        picks = rng.integers(len(causes), size=(n_rounds, n_clients))
        plan = {(int(t), int(i)): causes[picks[t, i]] for t, i in zip(*np.nonzero(fails))}
    for cause, count in (rare or {}).items():
        free = [k for k in range(n_rounds * n_clients) if divmod(k, n_clients) not in plan]
        for k in rng.choice(free, size=count, replace=False):
            plan[divmod(int(k), n_clients)] = cause
    return plan


def invariant_gap(server, clients) -> float:
    """``‖V − Σ_i μ_i V_i‖ / max(1, ‖V‖)`` over the driver's clients (0 up to rounding when rounds are atomic)."""
    total = sum(w * c.V for w, c in zip(server.weights, clients))
    return float(np.linalg.norm(server.V - total) / max(1.0, np.linalg.norm(server.V)))


def check_invariants(server, clients, tol: float = 1e-12) -> None:
    """Raise AssertionError unless ``V = Σ μ_i V_i`` (relative ``tol``) and ``Ŝ``, ``θ`` are finite."""
    gap = invariant_gap(server, clients)
    assert gap <= tol, f"V - sum_i mu_i V_i: relative gap {gap:.3g}"
    assert np.isfinite(server.S).all(), "non-finite S"
    assert np.isfinite(server.theta_vector).all(), "non-finite theta"
