# SPDX-License-Identifier: BSD-3-Clause
"""The cells of the engine-feature matrix (issue 24): every algorithm with its data, {full, partial participation
where the method defines it} × {no compression, 8-bit}, one faulty client, an interrupt then a resume.

Shared by ``tests/federation/test_matrix.py`` (in process, compiled backend, Ray) and
``tests/runtime/test_runtime_flower.py`` (Flower's simulation), so that every runtime runs the same cells.
"""
from __future__ import annotations

import numpy as np
from fault_injection import ANY_ROUND, CAUSES, FaultyClient
from reference import nonsmooth_toy_data

from fedmm.algorithms import FedAvg, FedMLS, FedMM, FedProx, ParameterAveraging, Scaffnew, Scaffold
from fedmm.compression import StochasticRounding
from fedmm.federation import LocalRuntime
from fedmm.models import GaussianMixture, InverseToy
from fedmm.models.nonsmooth import HingeSVM, L1Regression

N_ROUNDS = 5
STOP = 2  # the interrupt: Ctrl-C once round STOP is complete
FAULTY = 1  # client 1 raises whenever it is contacted
PLAN = {(ANY_ROUND, FAULTY): "raise"}


def gmm_data():
    rng = np.random.default_rng(2)
    return [rng.normal(size=(30, 2)) + i for i in range(4)]


def toy_data():
    rng = np.random.default_rng(3)
    return [rng.uniform(1, 2, 40), rng.uniform(5, 9, 40), rng.uniform(2, 3, 30), rng.uniform(1, 4, 30)]


def hinge_data():
    return nonsmooth_toy_data("hinge", n_clients=4, m=20, d=3, seed=3)


def l1_data():
    return nonsmooth_toy_data("l1", n_clients=4, m=20, d=3, seed=4)


def q8(compressed):
    """8-bit stochastic rounding of the clients' messages, or None (no compression)."""
    return StochasticRounding(bits=8) if compressed else None


def sampling(partial, m=3):
    """``clients_per_round=m`` with partial participation, else nothing (every client every round)."""
    return {"clients_per_round": m} if partial else {}


#: name -> (factory(partial, compressed, **extra), data, run keywords, whether the method defines client sampling);
#: ``extra`` (``backend=``) only for the methods with two backends (FedMM, ParameterAveraging, FedMLS).
ALGORITHMS = {
    "FedMM": (lambda partial, compressed, **kw: FedMM(GaussianMixture(2, "full"), batch_size=8,
                                                      control_variate_step=0.5, compressor=q8(compressed),
                                                      **sampling(partial), **kw),
              gmm_data, dict(evaluate_every=2), True),
    "ParameterAveraging": (lambda partial, compressed, **kw: ParameterAveraging(
        InverseToy(), step=0.5, batch_size=10, compressor=q8(compressed), **sampling(partial), **kw),
        toy_data, dict(evaluate_every=2), True),
    "FedMLS": (lambda partial, compressed, **kw: FedMLS(L1Regression(), prox_weight=("inverse", 1.0), radius=10.0,
                                                        batch_size=5, compressor=q8(compressed), **kw),
               l1_data, dict(evaluate_every=2), False),
    "FedAvg": (lambda partial, compressed: FedAvg(HingeSVM(), local_lr=0.05, local_steps=2, batch_size=4,
                                                  compressor=q8(compressed), **sampling(partial)),
               hinge_data, dict(evaluate_every=2), True),
    "FedProx": (lambda partial, compressed: FedProx(HingeSVM(), mu=0.3, local_lr=0.05, local_steps=2, batch_size=4,
                                                    compressor=q8(compressed), **sampling(partial)),
                hinge_data, dict(evaluate_every=2), True),
    "Scaffold": (lambda partial, compressed: Scaffold(HingeSVM(), local_lr=0.05, local_steps=2,
                                                      compressor=q8(compressed), **sampling(partial)),
                 hinge_data, dict(evaluate_every=1), True),
    "Scaffnew": (lambda partial, compressed: Scaffnew(L1Regression(), local_lr=0.05, communication_prob=0.5,
                                                      batch_size=3, compressor=q8(compressed)),
                 l1_data, dict(), False),
}
#: The optimal-transport family (client sampling defined: FedMM-OT's Algorithm 3, FedAdam): see :func:`ot_algorithm`.
OT_ALGORITHMS = ("FedMMOT", "FedAdam")


def ot_algorithm(name, problem, partial, compressed):
    """FedMM-OT or FedAdam on ``problem`` (a ``TransportProblem``), 2 clients a round with partial participation."""
    from fedmm.algorithms import FedAdam, FedMMOT

    cls = FedMMOT if name == "FedMMOT" else FedAdam
    extra = {"control_variate_step": 0.5} if name == "FedMMOT" else {}
    return cls(problem, local_lr=0.05, identity_steps=5, theta_steps=1, compressor=q8(compressed),
               **sampling(partial, 2), **extra)


def cells(samples):
    """The ``(partial, compressed)`` cells of a method (``samples``: whether it defines client sampling)."""
    return [(partial, compressed) for partial in ((False, True) if samples else (False,))
            for compressed in (False, True)]


def cell_id(name, partial, compressed):
    return f"{name}-{'partial' if partial else 'full'}-{'8bit' if compressed else 'raw'}"


def all_cells():
    """``(name, partial, compressed)`` of every cell, the optimal-transport family's included."""
    samples = {**{name: entry[3] for name, entry in ALGORITHMS.items()}, **dict.fromkeys(OT_ALGORITHMS, True)}
    return [(name, partial, compressed) for name, s in samples.items() for partial, compressed in cells(s)]


class FaultyLocalRuntime(LocalRuntime):
    """The in-process runtime (Python backend) with client :data:`FAULTY` raising in every round."""

    def run(self, server, clients, n_rounds, **kwargs):
        return super().run(server, [FaultyClient(c, PLAN) for c in clients], n_rounds, **kwargs)


class FaultyRemote:
    """An algorithm whose client :data:`FAULTY` raises in every round, for the runtimes whose parties live apart
    (Flower): every member of the :class:`fedmm.protocols.RemoteAlgorithm` contract is the algorithm's, but
    :meth:`remote_client` wraps the client (the runtime sees the contract only)."""

    def __init__(self, algorithm):
        self.algorithm = algorithm

    def __getattr__(self, name):
        if name.startswith("__") or name == "algorithm":  # unpickling: no delegation before __dict__ is back
            raise AttributeError(name)
        return getattr(self.algorithm, name)

    def remote_client(self, index, data, **kwargs):
        return FaultyClient(self.algorithm.remote_client(index, data, **kwargs), PLAN)

    def start_reply(self, client, message):  # the start exchange is not a round: the wrapped client answers
        return self.algorithm.start_reply(client.client, message)


def stop_callback(t, state):
    """A run's ``callback``: Ctrl-C once round :data:`STOP` is complete."""
    if t == STOP:
        raise KeyboardInterrupt


#: How Flower's server words a client's exception (the node's error reply, which names the exception's message
#: only): the prefix of the drop reason.
FLOWER_REASON = "client error: "


def assert_faulty_client_dropped(history, prefix=CAUSES["raise"]):
    """Client :data:`FAULTY` contacted at least once, and dropped with its reason whenever it was (never
    aggregated): a reason that starts with ``prefix`` (in process and on Ray, the exception; on Flower,
    :data:`FLOWER_REASON`) and names the injected failure."""
    contacted = [r for r in history.records if FAULTY in r["dropped"]]
    assert contacted, "the faulty client was never contacted"
    for record in history.records:
        assert FAULTY not in record["active"]
        if FAULTY in record["dropped"]:
            reason = record["drop_reasons"][record["dropped"].index(FAULTY)]
            assert reason.startswith(prefix) and "injected failure" in reason, reason
