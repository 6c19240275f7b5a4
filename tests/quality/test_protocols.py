# SPDX-License-Identifier: BSD-3-Clause
"""fedmm.protocols: the built-in classes, and the pure-Python ones of docs/extending.md, satisfy them.

``isinstance`` on a runtime-checkable protocol only checks that the members exist; each check here
also compares every protocol method's signature with the implementation's (:func:`signature_problems`):
whatever a caller may pass according to the protocol, the implementation must accept.
"""
import inspect

import numpy as np
import pytest

from fedmm import protocols as P
from fedmm.algorithms import Broadcast, FedAvg, FedMLS, FedMM, ParameterAveraging, Scaffnew, Scaffold
from fedmm.compression import BlockQuantizer, Identity, StochasticRounding
from fedmm.history import History
from fedmm.models import (DictionaryLearning, GaussianMixture, InverseToy, MissingValues, PoissonLatent,
                          ProximalGradient)
from fedmm.models.nonsmooth import L1Regression
from fedmm.runtime import LocalRuntime, RayRuntime
from protocol_check import assert_satisfies, protocol_members, signature_problems
from reference import extending_recipes, nonsmooth_toy_data

PROTOCOLS = [P.Model, P.Layout, P.SupportsCompiledModel, P.Compressor, P.SupportsQuantize, P.SupportsVarianceBound,
             P.SupportsQuantizerSpec, P.Message, P.ServerParty, P.CompiledRoundsServer, P.ClientParty,
             P.StatefulClientParty, P.SupportsStepMany, P.Monitor, P.Runtime, P.SupportsResume,
             P.SupportsGlobalMoments, P.RemoteAlgorithm, P.PartyState]
def test_the_signature_check_finds_incompatible_methods():
    class Narrow:
        def encode(self, x):  # no rng
            return b""

        def decode(self, payload, strict):  # a required extra argument
            return np.zeros(0)

        def payload_nbytes(self, n):  # renamed parameter
            return 0

    class Wide:
        def encode(self, x, rng=None, *, level=3):
            return b""

        def decode(self, *args, **kwargs):
            return np.zeros(0)

        def payload_nbytes(self, q, dtype=np.float64):
            return 0

    assert isinstance(Narrow(), P.Compressor)  # isinstance alone cannot tell
    assert sorted({p.split(":")[0] for p in signature_problems(Narrow(), P.Compressor)}) == [
        "decode", "encode", "payload_nbytes"]
    assert signature_problems(Wide(), P.Compressor) == []
    assert not isinstance(object(), P.Compressor)
    assert "run: keyword 'history' is not accepted" in signature_problems(
        type("R", (), {"run": lambda self, server, clients, n_rounds: None})(), P.Runtime)


def test_every_public_protocol_is_runtime_checkable_and_documented():
    assert sorted(P.__all__) == sorted([*(p.__name__ for p in PROTOCOLS), "Payload"])
    for proto in PROTOCOLS:
        assert getattr(proto, "_is_runtime_protocol", False), proto
        assert proto.__doc__ and len(proto.__doc__) > 80, proto
        for name, member in protocol_members(proto).items():
            if inspect.isfunction(member) and name != "__call__":
                assert member.__doc__, f"{proto.__name__}.{name} has no docstring"


# --------------------------------------------------------------------------- models
BUILTIN_MODELS = [
    DictionaryLearning(3, 0.1, n_features=4),
    GaussianMixture(3, n_features=2),
    GaussianMixture(2, "full", n_features=3),
    MissingValues(2, shape=(4, 5)),
    PoissonLatent([0.0, 1.0, 2.0]),
    ProximalGradient(n_features=3),
    InverseToy(),
]


@pytest.mark.parametrize("model", BUILTIN_MODELS, ids=lambda m: type(m).__name__)
def test_builtin_models_are_models(model):
    assert_satisfies(model, P.Model)
    assert_satisfies(model.layout, P.Layout)
    # The compiled hook is optional; where a model has it, it has the protocol's signature.
    if hasattr(model, "compiled_model"):
        assert_satisfies(model, P.SupportsCompiledModel)


def test_python_model_of_the_docs_is_a_model():
    assert_satisfies(extending_recipes().GaussianMean(2), P.Model)


# --------------------------------------------------------------------------- compressors
@pytest.mark.parametrize("comp", [Identity(), BlockQuantizer(4), StochasticRounding(8, norm="inf", block_size=3)],
                         ids=repr)
def test_builtin_compressors_are_compressors_with_the_simulation_hooks(comp):
    assert_satisfies(comp, P.Compressor, P.SupportsQuantize, P.SupportsVarianceBound)
    if hasattr(comp, "quantizer_spec"):
        assert_satisfies(comp, P.SupportsQuantizerSpec)
    rng = np.random.default_rng(3)
    x = rng.normal(size=7)
    payload = comp.encode(x, np.random.default_rng(5))
    assert len(payload) == comp.payload_nbytes(7)  # exact for every built-in format
    np.testing.assert_array_equal(comp.decode(payload), comp.quantize(x, np.random.default_rng(5)))


def test_pure_python_sparsifier_is_a_compressor_and_nothing_more():
    sparsifier = extending_recipes().BernoulliSparsifier(0.5)
    assert_satisfies(sparsifier, P.Compressor, P.SupportsVarianceBound)
    assert not isinstance(sparsifier, P.SupportsQuantize)
    assert not isinstance(sparsifier, P.SupportsQuantizerSpec)
    x = np.linspace(-1.0, 1.0, 9)
    # Unbiased: the mean over many draws is x (per coordinate variance (1 − p)/p x_j²).
    draws = np.stack([sparsifier.decode(sparsifier.encode(x, np.random.default_rng(s))) for s in range(4000)])
    np.testing.assert_array_less(np.abs(draws.mean(axis=0) - x), 5 * np.abs(x) / np.sqrt(4000) + 1e-300)


# --------------------------------------------------------------------------- runtimes and parties
class CaptureRuntime:
    """A runtime that runs nothing and keeps what an algorithm hands to it."""

    def run(self, server, clients, n_rounds, *, history, monitor=None, callback=None, progress=False):
        self.server, self.clients, self.monitor, self.callback = server, clients, monitor, callback
        return history


@pytest.mark.parametrize("runtime", [LocalRuntime(), LocalRuntime(n_threads=2, compiled=False),
                                     RayRuntime(n_actors=1),  # constructing it does not start Ray
                                     CaptureRuntime()], ids=lambda r: type(r).__name__)
def test_runtimes_are_runtimes(runtime):
    assert_satisfies(runtime, P.Runtime)


def test_runtime_of_the_docs_is_a_runtime():
    assert_satisfies(extending_recipes().SequentialRuntime(), P.Runtime)


@pytest.mark.parametrize("algorithm", [FedMM, ParameterAveraging])
def test_fedmm_parties_messages_and_monitor(algorithm):
    datas = [np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0])]
    capture = CaptureRuntime()
    algorithm(InverseToy(), control_variate_step=0.5).run(datas, 3, seed=0, runtime=capture, evaluate_every=1,
                                           callback=lambda t, state: None)
    assert_satisfies(capture.server, P.ServerParty)
    for client in capture.clients:
        assert_satisfies(client, P.ClientParty, P.StatefulClientParty)
    message = capture.server.setup_message()
    assert isinstance(message, Broadcast)
    assert_satisfies(message, P.Message)
    assert_satisfies(capture.server.broadcast(0), P.Message)
    assert_satisfies(capture.monitor, P.Monitor)
    assert callable(capture.callback)


def test_fedmls_parties_and_message():
    # FedMLS's clients carry export_state/import_state: runtimes that move clients between processes carry them.
    capture = CaptureRuntime()
    FedMLS(L1Regression(), local_steps=2, prox_weight=("inverse", 1.0), oracle="full").run(
        nonsmooth_toy_data("l1"), 2, runtime=capture)
    assert_satisfies(capture.server, P.ServerParty)
    assert_satisfies(capture.server.setup_message(), P.Message)
    for client in capture.clients:
        assert_satisfies(client, P.ClientParty)
        assert_satisfies(client, P.StatefulClientParty)
    assert_satisfies(capture.monitor, P.Monitor)


def test_algorithm_of_the_docs_has_protocol_parties():
    r = extending_recipes()
    assert_satisfies(r.GDServer(np.zeros(2), np.ones(1), 0.5), P.ServerParty)
    assert_satisfies(r.GDClient(0, np.ones((3, 2))), P.ClientParty)
    assert_satisfies(r.ThetaMessage(0, np.zeros(2)), P.Message)


def test_runtime_protocol_returns_the_history_it_was_given():
    capture = CaptureRuntime()
    history = History("x")
    assert capture.run(None, [], 0, history=history) is history


# --------------------------------------------------------------------------- the declared contract
def _parties(capture):
    """The server, the clients and the monitor a run handed to ``capture`` (a CaptureRuntime)."""
    return capture.server, capture.clients, capture.monitor


def _assert_declared_parties(server, clients, monitor, compiled):
    """Every member the engine and the runtimes call without probing exists, with a compatible signature."""
    assert_satisfies(server, P.ServerParty)
    assert type(server).supports_compiled_rounds is compiled
    if compiled:
        assert_satisfies(server, P.CompiledRoundsServer)
    for client in clients:
        assert_satisfies(client, P.ClientParty, P.StatefulClientParty)
    assert_satisfies(monitor, P.Monitor)
    # the state round-trips: what a failed round's rollback relies on
    state = server.export_state()
    server.import_state(state)
    assert all(np.array_equal(state.to_arrays()[k], v) for k, v in server.export_state().to_arrays().items())


@pytest.mark.parametrize("algorithm", [FedMM, ParameterAveraging])
def test_fedmm_family_declares_the_contract(algorithm):
    capture = CaptureRuntime()
    algorithm(InverseToy(), control_variate_step=0.5).run([np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0])], 3,
                                                          seed=0, runtime=capture, evaluate_every=1)
    _assert_declared_parties(*_parties(capture), compiled=True)


@pytest.mark.parametrize("make", [
    lambda: FedMLS(L1Regression(), local_steps=2, prox_weight=("inverse", 1.0), oracle="full"),
    lambda: FedAvg(L1Regression(), local_lr=0.1, oracle="full"),
    lambda: Scaffold(L1Regression(), local_lr=0.1, oracle="full"),
    lambda: Scaffnew(L1Regression(), local_lr=0.1, oracle="full"),
], ids=["FedMLS", "FedAvg", "Scaffold", "Scaffnew"])
def test_subgradient_family_declares_the_contract(make):
    capture = CaptureRuntime()
    make().run(nonsmooth_toy_data("l1"), 2, runtime=capture)
    server, clients, monitor = _parties(capture)
    _assert_declared_parties(server, clients, monitor, compiled=False)
    assert all(isinstance(c, P.SupportsStepMany) for c in clients)  # batched by LocalRuntime(batched=True)
    # the server's state covers what a round changes: a round rolled back to it leaves no trace
    saved = server.export_state()
    before = saved.to_arrays()
    server.select(0)
    message = server.broadcast(0)
    server.aggregate(0, {c.index: c.step(message) for c in clients})
    changed = server.export_state().to_arrays()
    assert any(not np.array_equal(changed[k], before[k]) for k in before)
    server.import_state(saved)
    after = server.export_state().to_arrays()
    assert set(after) == set(before) and all(np.array_equal(after[k], before[k]) for k in before)


def test_ot_family_declares_the_contract():
    pytest.importorskip("jax", reason='the optimal-transport extra is not installed: pip install "fedmm[ot]"')
    pytest.importorskip("optax", reason='the optimal-transport extra is not installed: pip install "fedmm[ot]"')
    from fedmm.algorithms import FedAdam, FedMMOT
    from fedmm.models.ot import TransportProblem

    rng = np.random.default_rng(3)
    datas = [rng.normal(loc=i, size=(20, 2)) for i in range(2)]
    target = rng.normal(size=(20, 2))
    model = TransportProblem(2, hidden_sizes=[4], batch_size=8)
    for algorithm in (FedMMOT, FedAdam):
        capture = CaptureRuntime()
        algorithm(model).run(datas, 1, target=target, seed=0, runtime=capture, evaluate=lambda m: {"e": 0.0})
        _assert_declared_parties(*_parties(capture), compiled=False)
        assert_satisfies(algorithm(model), P.RemoteAlgorithm)


def test_resumable_runtimes_declare_it():
    assert_satisfies(LocalRuntime(), P.SupportsResume)
    assert LocalRuntime.resumable is True
    assert_satisfies(RayRuntime(n_actors=1), P.SupportsResume)
    # declared, not inferred from run()'s parameters: a runtime of the docs does not resume
    assert not isinstance(CaptureRuntime(), P.SupportsResume)


# --------------------------------------------------------------------------- algorithms with their parties apart
def remote_run(algo, datas, n_rounds, seed, *, init=None, init_datas=None, public_data=None):
    """The :class:`fedmm.protocols.RemoteAlgorithm` calls in the order ``fedmm.runtime.flower`` makes them, in
    process and without Flower: a fresh client per message, every message through arrays, every client state
    through ``client_state(...).to_arrays()``/``client_state_from_arrays``/``restore_client`` (what a node keeps),
    the server built from data descriptions."""
    from fedmm.runtime.local import record_initial, record_start_drops, round_record

    history = History(algo.name, algo.remote_config())
    n = len(datas)
    descriptions = [algo.describe_data(d, i) for i, d in enumerate(datas)]
    server = algo.remote_server(n, descriptions=descriptions, seed=seed, init=init, init_datas=init_datas,
                                public_data=public_data)
    layout = algo.broadcast_layout(server)

    def fresh(i):
        return algo.remote_client(i, datas[i], n_clients=n, seed=seed, public_data=public_data)

    def down(message):  # copies: nothing shared with the server's message
        return algo.broadcast_from_arrays([np.array(a, copy=True) for a in algo.broadcast_to_arrays(message)], layout)

    if algo.start_exchange(init):
        start = algo.start_message(server)
        server = algo.restart_server(server, {i: algo.start_reply(fresh(i), down(start)) for i in range(n)},
                                     n_clients=n, descriptions=descriptions, seed=seed)
        layout = algo.broadcast_layout(server)
        record_start_drops(history, {})
    states = {}
    if algo.setup_exchange():
        setup, payloads = server.setup_message(), {}
        for i in range(n):
            client = fresh(i)
            payloads[i] = client.setup(down(setup))
            states[i] = algo.client_state(client).to_arrays()
        server.setup_aggregate(payloads)
    record_initial(history)
    for t in range(n_rounds):
        ids = server.select(t)
        message = server.broadcast(t)
        payloads = {}
        for i in ids:
            client, mine = fresh(i), down(message)
            if i in states:
                algo.restore_client(client, algo.client_state_from_arrays(states[i]), mine)
            else:
                client.setup(mine)
            payloads[i] = client.step(mine)
            states[i] = algo.client_state(client).to_arrays()
        record = server.aggregate(t, payloads)
        history.append(**round_record(t, record, ids, [payloads[i] for i in ids], message, 0.0, {}), monitor_time=0.0)
    finals = ({i: algo.client_state_from_arrays(states[i]) for i in range(n)} if algo.remote_finish_needs_clients()
              else None)
    algo.remote_finish(server, history, finals)
    return history


SUBGRADIENT = [
    lambda: FedMLS(L1Regression(), local_steps=("linear", 1), prox_weight=("inverse", 1.0), radius=50.0),
    lambda: FedMLS(L1Regression(), local_steps=2, prox_weight=1.0, backend="python", batch_size=4),
    lambda: FedAvg(L1Regression(), local_lr=0.1),
    lambda: Scaffold(L1Regression(), local_lr=0.1, local_steps=2),
    lambda: Scaffnew(L1Regression(), local_lr=0.1, communication_prob=0.5, batch_size=3),
]
SUBGRADIENT_IDS = ["FedMLS-compiled", "FedMLS-python", "FedAvg", "Scaffold", "Scaffnew"]


@pytest.mark.parametrize("make", SUBGRADIENT, ids=SUBGRADIENT_IDS)
def test_subgradient_family_apart_reproduces_run(make):
    # Clients rebuilt for every message from their node's data, state and random streams as arrays: the same
    # History (every record, the final state, FedMLS's z_clients included) as run() in process.
    algo, datas = make(), nonsmooth_toy_data("l1")
    assert_satisfies(algo, P.RemoteAlgorithm)
    ref = algo.run(datas, 4, seed=11)
    got = remote_run(algo, datas, 4, 11)
    assert got.equals(ref)
    assert sorted(got.state) == sorted(ref.state) and len(got) == 4


@pytest.mark.parametrize("make", SUBGRADIENT, ids=SUBGRADIENT_IDS)
def test_subgradient_messages_and_states_round_trip_through_arrays(make):
    algo, datas = make(), nonsmooth_toy_data("l1")
    server, clients = algo.build(datas, seed=3)
    message = server.broadcast(0)
    arrays = algo.broadcast_to_arrays(message)
    assert all(isinstance(a, np.ndarray) for a in arrays)
    again = algo.broadcast_from_arrays(arrays, algo.broadcast_layout(server))
    assert type(again) is type(message) and again.nbytes == message.nbytes
    assert again.to_arrays().__len__() == len(arrays)
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(again.to_arrays(), arrays))
    clients[0].step(message)
    state = algo.client_state(clients[0]).to_arrays()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    assert algo.client_state_from_arrays(state).to_arrays().keys() == clients[0].export_state().to_arrays().keys()
    with pytest.raises(ValueError, match="arrays"):
        algo.broadcast_from_arrays(arrays[:-1], "")
    with pytest.raises(ValueError, match="finite"):
        algo.broadcast_from_arrays([np.full_like(arrays[0], np.nan), *arrays[1:]], "")


def test_remote_algorithm_refusals_name_the_argument():
    datas = nonsmooth_toy_data("l1")
    algo = FedAvg(L1Regression(), local_lr=0.1)
    descriptions = [algo.describe_data(d, i) for i, d in enumerate(datas)]
    with pytest.raises(ValueError, match="partition 2"):
        algo.describe_data((np.zeros((3, 2)), np.zeros(4)), 2)
    with pytest.raises(TypeError, match="public_data"):
        algo.remote_server(4, descriptions=descriptions, seed=0, public_data=datas)
    with pytest.raises(ValueError, match="same number of features"):
        algo.remote_server(2, descriptions=[descriptions[0], algo.describe_data((np.zeros((3, 5)), np.zeros(3)), 1)],
                           seed=0)
    with pytest.raises(TypeError, match="start exchange"):
        algo.start_message(None)
    with pytest.raises(TypeError, match="init"):
        FedMLS(L1Regression(), prox_weight=1.0).remote_server(4, descriptions=descriptions, seed=0, init=np.ones(3))
    baseline = ParameterAveraging(InverseToy())  # runs apart too (Flower): its configuration is its run's
    assert baseline.remote_config() == baseline.config()


@pytest.mark.parametrize("algorithm", [FedMM, ParameterAveraging])
def test_fedmm_family_implements_the_remote_contract(algorithm):
    assert_satisfies(algorithm(InverseToy()), P.RemoteAlgorithm)


def test_the_gaussian_mixture_declares_global_moments_and_others_do_not():
    assert_satisfies(GaussianMixture(2, n_features=2), P.SupportsGlobalMoments)
    assert not isinstance(InverseToy(), P.SupportsGlobalMoments)
    # what a node describes is what the server pools: the moments of every client's data
    datas = [np.random.default_rng(i).normal(size=(10, 2)) for i in range(2)]
    algo = FedMM(GaussianMixture(2, n_features=2))
    described = algo.describe_data(datas[0], 0)
    assert sorted(described) == ["moments-n", "moments-sum", "moments-sumsq", "n-samples"]
    assert sorted(FedMM(InverseToy()).describe_data(np.array([1.0, 2.0]), 0)) == ["n-samples"]


@pytest.mark.parametrize("kwargs", [dict(control_variates="oracle", start="model"), dict(start="mean_statistic"),
                                    dict(clients_per_round=2, compressor=StochasticRounding(bits=8))],
                         ids=["oracle", "mean_statistic", "partial-8bit"])
def test_fedmm_apart_reproduces_run(kwargs):
    datas = [np.random.default_rng(i).normal(size=(20, 2)) + 2 * i for i in range(3)]
    algo = FedMM(GaussianMixture(2, n_features=2), step=0.5, batch_size=5, control_variate_step=0.5, **kwargs)
    ref = algo.run(datas, 3, seed=5)
    got = remote_run(algo, datas, 3, 5, init_datas=datas)
    assert got.equals(ref)
