# SPDX-License-Identifier: BSD-3-Clause
"""The state values of the non-smooth and OT families (and ArrayState): frozen, numbers only, read-only arrays,
round trips through arrays and pickle bit for bit, strict ``from_arrays``, and a run continued from exported
values equal to the uninterrupted run."""
import dataclasses
import pickle

import numpy as np
import pytest

from fedmm.algorithms import FedAvg, FedMLS, FedProx, Scaffnew, Scaffold
from fedmm.compression import StochasticRounding
from fedmm.federation import (ArrayState, Checkpoint, OTClientState, OTServerState, SubgradientClientState,
                              SubgradientServerState, import_arrays)
from fedmm.history import History
from fedmm.models.nonsmooth import L1Regression
from reference import nonsmooth_toy_data

SUBGRADIENT = {
    "FedMLS": lambda: FedMLS(L1Regression(), local_steps=2, prox_weight=1.0, backend="python", batch_size=4),
    "FedAvg": lambda: FedAvg(L1Regression(), local_lr=0.1, batch_size=3, clients_per_round=2,
                             compressor=StochasticRounding(bits=8)),
    "FedProx": lambda: FedProx(L1Regression(), mu=0.5, local_lr=0.1, batch_size=3),
    "Scaffold": lambda: Scaffold(L1Regression(), local_lr=0.1, local_steps=2, compressor=StochasticRounding(bits=8)),
    "Scaffnew": lambda: Scaffnew(L1Regression(), local_lr=0.1, communication_prob=0.5, batch_size=3),
}


def _rounds(server, clients, rounds):
    for t in rounds:
        ids = server.select(t)
        message = server.broadcast(t)
        server.aggregate(t, {i: clients[i].step(message) for i in ids})


def _assert_same_arrays(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _assert_frozen(state):
    field = dataclasses.fields(state)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(state, field, None)
    arrays = state.to_arrays()
    assert arrays and all(isinstance(v, np.ndarray) for v in arrays.values())
    for name, value in arrays.items():
        if value.ndim:  # the 0-d scalars are built on demand; every stored array is read-only
            assert not value.flags.writeable, name
            with pytest.raises(ValueError, match="read-only"):
                value[...] = 0


def _subgradient_parties(name, n_rounds):
    algo = SUBGRADIENT[name]()
    server, clients = algo.build(nonsmooth_toy_data("l1"), seed=5)
    _rounds(server, clients, range(n_rounds))
    return algo, server, clients


@pytest.mark.parametrize("name", sorted(SUBGRADIENT))
def test_subgradient_states_are_frozen_and_round_trip_bit_for_bit(name):
    _, server, clients = _subgradient_parties(name, 3)
    for state, cls in [(server.export_state(), SubgradientServerState),
                       *((c.export_state(), SubgradientClientState) for c in clients)]:
        assert type(state) is cls
        _assert_frozen(state)
        again = cls.from_arrays(state.to_arrays())
        _assert_same_arrays(again.to_arrays(), state.to_arrays())
        unpickled = pickle.loads(pickle.dumps(state))
        _assert_same_arrays(unpickled.to_arrays(), state.to_arrays())
        assert all(not v.flags.writeable for v in unpickled.to_arrays().values() if v.ndim)


@pytest.mark.parametrize("name", sorted(SUBGRADIENT))
def test_subgradient_run_continues_from_exported_values(name):
    # the uninterrupted run: 7 rounds
    _, server, clients = _subgradient_parties(name, 7)
    # 3 rounds, the values carried as Ray carries them (pickled), imported into fresh parties, 4 more rounds
    algo, first, first_clients = _subgradient_parties(name, 3)
    carried = pickle.loads(pickle.dumps((first.export_state(), [c.export_state() for c in first_clients])))
    second, second_clients = algo.build(nonsmooth_toy_data("l1"), seed=5)
    second.import_state(carried[0])
    for client, state in zip(second_clients, carried[1]):
        client.import_state(state)
    _rounds(second, second_clients, range(3, 7))
    _assert_same_arrays(second.export_state().to_arrays(), server.export_state().to_arrays())
    for a, b in zip(second_clients, clients):
        _assert_same_arrays(a.export_state().to_arrays(), b.export_state().to_arrays())


def test_subgradient_parties_refuse_another_methods_state():
    _, scaffold, scaffold_clients = _subgradient_parties("Scaffold", 1)
    _, fedavg, fedavg_clients = _subgradient_parties("FedAvg", 1)
    _, scaffnew, _ = _subgradient_parties("Scaffnew", 1)
    with pytest.raises(ValueError, match=r"\['c'\]"):
        fedavg.import_state(scaffold.export_state())
    with pytest.raises(ValueError, match="'c'"):
        scaffold.import_state(fedavg.export_state())
    with pytest.raises(ValueError, match="'coin'"):
        scaffnew.import_state(fedavg.export_state())
    with pytest.raises(ValueError, match="'coin'"):
        fedavg.import_state(scaffnew.export_state())
    _, exact_clients = FedAvg(L1Regression(), local_lr=0.1, oracle="full").build(nonsmooth_toy_data("l1"), seed=5)
    with pytest.raises(ValueError, match="without a minibatch stream"):
        exact_clients[0].import_state(fedavg_clients[0].export_state())
    _, _, fedprox_clients = _subgradient_parties("FedProx", 1)  # FedAvg's clients, uncompressed
    with pytest.raises(ValueError, match="without a 'compression' stream"):
        fedprox_clients[0].import_state(fedavg_clients[0].export_state())
    with pytest.raises(ValueError, match="'c'"):
        scaffold_clients[0].import_state(fedavg_clients[0].export_state())
    with pytest.raises(TypeError, match="SubgradientServerState"):
        fedavg.import_state(fedavg.export_state().to_arrays())
    with pytest.raises(TypeError, match="SubgradientClientState"):
        fedavg_clients[0].import_state(fedavg.export_state())
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        SubgradientServerState(x=np.zeros(4), c=np.zeros(3))


def test_subgradient_from_arrays_names_what_is_missing_or_unknown():
    _, server, clients = _subgradient_parties("Scaffnew", 2)
    arrays, client_arrays = server.export_state().to_arrays(), clients[0].export_state().to_arrays()
    with pytest.raises(ValueError, match="missing \\['total_local_steps'\\]"):
        SubgradientServerState.from_arrays({k: v for k, v in arrays.items() if k != "total_local_steps"})
    with pytest.raises(ValueError, match="missing \\['x'\\]"):
        SubgradientServerState.from_arrays({k: v for k, v in arrays.items() if k != "x"})
    with pytest.raises(ValueError, match="\\['bogus'\\]"):
        SubgradientServerState.from_arrays({**arrays, "bogus": np.zeros(1)})
    with pytest.raises(ValueError, match="missing \\['oracle_calls'\\]"):
        SubgradientClientState.from_arrays({k: v for k, v in client_arrays.items() if k != "oracle_calls"})
    with pytest.raises(ValueError, match="missing \\['oracle_buffer'\\]"):
        SubgradientClientState.from_arrays({k: v for k, v in client_arrays.items() if k != "oracle_buffer"})
    with pytest.raises(ValueError, match="\\['oracle_extra'\\]"):
        SubgradientClientState.from_arrays({**client_arrays, "oracle_extra": np.zeros(1)})
    with pytest.raises(TypeError, match="'arrays'"):
        SubgradientClientState.from_arrays([("oracle_calls", 0)])


def test_a_checkpoint_of_values_resumes_into_fresh_parties(tmp_path):
    _, server, clients = _subgradient_parties("Scaffnew", 3)
    path = tmp_path / "run.ckpt"
    Checkpoint(fingerprint={"run": 1}, next_round=0, server_state=server.export_state(),
               client_states=[c.export_state() for c in clients], history=History("Scaffnew")).save(path)
    loaded = Checkpoint.load(path)
    algo = SUBGRADIENT["Scaffnew"]()
    fresh, fresh_clients = algo.build(nonsmooth_toy_data("l1"), seed=5)
    import_arrays(fresh, loaded.server_state)
    for client, arrays in zip(fresh_clients, loaded.client_states):
        import_arrays(client, arrays)
    _assert_same_arrays(fresh.export_state().to_arrays(), server.export_state().to_arrays())
    for a, b in zip(fresh_clients, clients):
        _assert_same_arrays(a.export_state().to_arrays(), b.export_state().to_arrays())
    with pytest.raises(TypeError, match="'server_state'"):
        Checkpoint(fingerprint={}, next_round=0, server_state=object(), client_states=[], history=History("x"))


def test_array_state_is_frozen_and_round_trips():
    state = ArrayState({"theta": np.arange(3.0), "count": np.array([2], dtype=np.int64)})
    _assert_frozen(state)
    assert state["theta"] is state.arrays["theta"]
    with pytest.raises(TypeError):
        state.arrays["theta"] = np.zeros(3)  # the mapping is read-only too
    for again in (ArrayState.from_arrays(state.to_arrays()), pickle.loads(pickle.dumps(state))):
        _assert_same_arrays(again.to_arrays(), state.to_arrays())
        assert not again["theta"].flags.writeable
    with pytest.raises(TypeError, match="non-empty str"):
        ArrayState({1: np.zeros(1)})


# --------------------------------------------------------------------------- the OT family
@pytest.fixture(scope="module")
def ot_case():
    pytest.importorskip("jax", reason='the optimal-transport extra is not installed: pip install "fedmm[ot]"')
    pytest.importorskip("optax", reason='the optimal-transport extra is not installed: pip install "fedmm[ot]"')
    from fedmm.models.ot import TransportProblem

    rng = np.random.default_rng(3)
    datas = [rng.normal(loc=i, size=(20, 2)) for i in range(3)]
    target = rng.normal(size=(20, 2))
    return TransportProblem(2, hidden_sizes=[4], batch_size=8), datas, target


def _ot_algorithms():
    from fedmm.algorithms import FedAdam, FedMMOT

    return {"FedMMOT": lambda m: FedMMOT(m, compressor=StochasticRounding(bits=8), participation_prob=0.7,
                                         omega_step="sgd"),
            "FedMMOT-adam": lambda m: FedMMOT(m, omega_step="adam"),
            "FedAdam": lambda m: FedAdam(m, theta_steps=2)}


def _ot_parties(ot_case, name, n_rounds):
    model, datas, target = ot_case
    algo = _ot_algorithms()[name](model)
    server, clients = algo.build(datas, target=target, seed=1)
    setup = server.setup_message()
    if setup is not None:
        server.setup_aggregate({c.index: c.setup(setup) for c in clients})
    _rounds(server, clients, range(n_rounds))
    return algo, server, clients


@pytest.mark.parametrize("name", ["FedMMOT", "FedMMOT-adam", "FedAdam"])
def test_ot_states_round_trip_and_a_run_continues_from_them(ot_case, name):
    _, server, clients = _ot_parties(ot_case, name, 4)
    algo, first, first_clients = _ot_parties(ot_case, name, 2)
    server_state = first.export_state()
    assert type(server_state) is OTServerState
    _assert_frozen(server_state)
    assert (server_state.V is None) == (name == "FedAdam")
    assert (server_state.omega_adam is None) != (name == "FedMMOT-adam")
    assert (server_state.theta_adam is None) != (name == "FedAdam")
    for state, cls in [(server_state, OTServerState), *((c.export_state(), OTClientState) for c in first_clients)]:
        assert type(state) is cls
        _assert_same_arrays(cls.from_arrays(state.to_arrays()).to_arrays(), state.to_arrays())
        _assert_same_arrays(pickle.loads(pickle.dumps(state)).to_arrays(), state.to_arrays())
    model, datas, target = ot_case
    second, second_clients = algo.build(datas, target=target, seed=1)
    second.import_state(pickle.loads(pickle.dumps(server_state)))
    for client, old in zip(second_clients, first_clients):
        client.import_state(pickle.loads(pickle.dumps(old.export_state())))
    _rounds(second, second_clients, range(2, 4))
    _assert_same_arrays(second.export_state().to_arrays(), server.export_state().to_arrays())
    for a, b in zip(second_clients, clients):
        _assert_same_arrays(a.export_state().to_arrays(), b.export_state().to_arrays())


def test_ot_states_refuse_what_they_do_not_hold(ot_case):
    _, fedmm_server, fedmm_clients = _ot_parties(ot_case, "FedMMOT", 1)
    _, adam_server, _ = _ot_parties(ot_case, "FedAdam", 1)
    arrays = fedmm_server.export_state().to_arrays()
    with pytest.raises(ValueError, match="missing \\['omega'\\]"):
        OTServerState.from_arrays({k: v for k, v in arrays.items() if k != "omega"})
    with pytest.raises(ValueError, match="\\['adam_x'\\]"):
        OTServerState.from_arrays({**arrays, "adam_x": np.zeros(1)})
    with pytest.raises(ValueError, match="missing \\['adam_1'\\]"):
        OTServerState.from_arrays({k: v for k, v in arrays.items() if k != "adam_1"})
    with pytest.raises(ValueError, match="\\['W'\\]"):
        OTClientState.from_arrays({"W": np.zeros(2)})
    with pytest.raises(ValueError, match="'V'"):
        adam_server.import_state(fedmm_server.export_state())
    with pytest.raises(ValueError, match="'V'"):
        fedmm_server.import_state(adam_server.export_state())
    with pytest.raises(TypeError, match="OTClientState"):
        fedmm_clients[0].import_state(fedmm_server.export_state())
    with pytest.raises(ValueError, match="control variate 'V'"):
        fedmm_clients[0].import_state(OTClientState(V=np.zeros(1)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fedmm_clients[0].export_state().V = None
