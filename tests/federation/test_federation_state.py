# SPDX-License-Identifier: BSD-3-Clause
"""Round state as data: a run saved mid-way and restored into fresh parties continues bit for bit,
and every client's payload is decoded with its own compressor."""
import numpy as np
import pytest

from fedmm.algorithms import FedMM, ParameterAveraging
from fedmm.compression import BlockQuantizer, Identity, StochasticRounding
from fedmm.federation import ClientState, ServerState
from fedmm.models import DictionaryLearning, InverseToy


def _dictionary_clients(n=5, seed=0):
    rng = np.random.default_rng(seed)
    return [np.ascontiguousarray(rng.standard_normal((30 + i, 6))) for i in range(n)]


def _set_up(algo, datas, seed):
    server, clients = algo.build(datas, seed=seed)
    setup = server.setup_message()
    server.setup_aggregate({c.index: c.setup(setup) for c in clients})
    return server, clients


def _python_rounds(server, clients, rounds):
    for t in rounds:
        ids = server.select(t)
        message = server.broadcast(t)
        server.aggregate(t, {i: clients[i].step(message) for i in ids})


def _assert_same_state(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.parametrize("algorithm", [FedMM, ParameterAveraging], ids=["fedmm", "baseline"])
@pytest.mark.parametrize("backend", ["python", "compiled"])
def test_restored_parties_continue_bit_for_bit(algorithm, backend):
    datas = _dictionary_clients()
    algo = algorithm(DictionaryLearning(4, 0.1, 0.2), participation_prob=0.6, compressor=StochasticRounding(bits=8),
                     control_variate_step=0.05, step=("sqrt", 0.1), batch_size=7, control_variates="oracle")
    # the uninterrupted run: 12 rounds
    server, clients = _set_up(algo, datas, seed=3)
    _python_rounds(server, clients, range(12))
    # 5 rounds, then every party's state copied into freshly built parties, then 7 more rounds
    first, first_clients = _set_up(algo, datas, seed=3)
    _python_rounds(first, first_clients, range(5))
    second, second_clients = algo.build(datas, seed=3)
    # through their arrays, as a checkpoint or a Flower node keeps them
    second.import_state(ServerState.from_arrays(first.export_state().to_arrays()))
    for fresh, old in zip(second_clients, first_clients):
        fresh.import_state(ClientState.from_arrays(old.export_state().to_arrays()), old.theta_like)
    if backend == "python":
        _python_rounds(second, second_clients, range(5, 12))
    else:
        assert len(second.simulate_rounds(second_clients, 5, 7)) == 7
    _assert_same_state(second.export_state().to_arrays(), server.export_state().to_arrays())
    for a, b in zip(second_clients, clients):
        _assert_same_state(a.export_state().to_arrays(), b.export_state().to_arrays())


def test_server_state_is_validated():
    server, _ = _set_up(FedMM(InverseToy(), step=0.5), [np.ones(5) * 2.0, np.ones(4) * 3.0], seed=0)
    state = server.export_state().to_arrays()
    with pytest.raises(ValueError, match="'V' of shape"):
        server.import_state(ServerState.from_arrays({**state, "V": np.zeros(3)}))
    with pytest.raises(ValueError, match="finite 'S'"):
        server.import_state(ServerState.from_arrays({**state, "S": np.full_like(state["S"], np.nan)}))
    with pytest.raises(ValueError, match="'S' in the state"):
        server.import_state(ServerState.from_arrays({k: v for k, v in state.items() if k != "S"}))


@pytest.mark.parametrize("backend", ["python", "compiled"])
def test_each_payload_is_decoded_with_its_clients_compressor(backend):
    """Clients with different compressors: the server decodes each one's payload with its own."""
    datas = _dictionary_clients(n=4)
    comps = [Identity(), StochasticRounding(bits=4), BlockQuantizer(block_size=5), StochasticRounding(bits=8)]
    run = FedMM(DictionaryLearning(4, 0.1, 0.2), participation_prob=1.0, compressor=comps, control_variate_step=0.1,
                batch_size=6,
                backend=backend).run(datas, 6, seed=1)
    assert run.config["backend"] == backend
    ref = FedMM(DictionaryLearning(4, 0.1, 0.2), participation_prob=1.0, compressor=comps, control_variate_step=0.1,
                batch_size=6,
                backend="python").run(datas, 6, seed=1)
    assert run.equals(ref)
    # byte counts are each client's own payload size
    q = DictionaryLearning(4, 0.1, 0.2, n_features=6).layout.size
    assert run.records[0]["bytes_up"] == sum(c.payload_nbytes(q) for c in comps)


class _RawFloat64:
    """A compressor written in Python with a wire format of its own: 4 magic bytes, then the values."""

    MAGIC = b"RAW8"

    def encode(self, x, rng=None):
        return self.MAGIC + np.ascontiguousarray(x, dtype="<f8").tobytes()

    def decode(self, payload):
        payload = bytes(payload)
        if payload[:4] != self.MAGIC or (len(payload) - 4) % 8:
            raise ValueError("not a RAW8 payload")
        return np.frombuffer(payload[4:], dtype="<f8").astype(np.float64)

    def payload_nbytes(self, q):
        return 4 + 8 * q


def test_python_compressor_with_its_own_format_next_to_builtin_ones():
    """Only client 1's compressor can read its payloads: the server must decode per client."""
    datas = _dictionary_clients(n=3)
    mixed = [StochasticRounding(bits=8), _RawFloat64(), StochasticRounding(bits=8)]
    builtin = [StochasticRounding(bits=8), Identity(), StochasticRounding(bits=8)]
    kw = dict(participation_prob=1.0, control_variate_step=0.1, batch_size=6)
    h = FedMM(DictionaryLearning(4, 0.1, 0.2), compressor=mixed, **kw).run(datas, 5, seed=2)
    assert h.config["backend"] == "python" and "quantizer_spec" in h.config["backend_reason"]
    ref = FedMM(DictionaryLearning(4, 0.1, 0.2), compressor=builtin, backend="python", **kw).run(datas, 5, seed=2)
    for a, b in zip(h.records, ref.records, strict=True):  # same values: RAW8 carries x exactly, as Identity
        assert {k: v for k, v in a.items() if k not in ("bytes_up", "wall_time", "monitor_time")} == \
               {k: v for k, v in b.items() if k not in ("bytes_up", "wall_time", "monitor_time")}
    np.testing.assert_array_equal(h.state["theta"], ref.state["theta"])


@pytest.mark.parametrize("backend", ["python", "compiled"])
def test_history_theta_is_the_parameter_in_the_models_structure(backend):
    datas = _dictionary_clients()
    model = DictionaryLearning(4, 0.1, 0.2)
    h = FedMM(model, clients_per_round=2, batch_size=5, backend=backend).run(datas, 3, seed=0)
    assert isinstance(h.theta, np.ndarray) and h.theta.shape == (6, 4)
    np.testing.assert_array_equal(h.theta.ravel(), h.state["theta"])  # the flat vector is its row-major copy
    toy = FedMM(InverseToy(), step=1.0, oracle="full").run([np.full(4, 2.0), np.full(4, 8.0)], 2, seed=0)
    assert toy.theta == pytest.approx(5.0 ** -0.5, rel=1e-15)  # θ* = (Σ μ_i E_i[Z])^{-1/2}


# --------------------------------------------------------------------------- the state values
def _fedmm_parties(seed=0, **kw):
    algo = FedMM(DictionaryLearning(4, 0.1, 0.2), clients_per_round=3, compressor=StochasticRounding(bits=8),
                 control_variate_step=0.05, batch_size=6, control_variates="oracle", **kw)
    return _set_up(algo, _dictionary_clients(), seed)


def test_state_values_hold_the_parties_numbers_read_only():
    import dataclasses

    from fedmm.federation import ClientState, ServerState

    server, clients = _fedmm_parties()
    _python_rounds(server, clients, range(3))  # the clients now remember LASSO codes
    state = server.export_state()
    _assert_same_state(state.to_arrays(), {"V": server.V, "theta_vector": server.theta_vector,
                                           "theta_vector_prev": server.theta_vector_prev, "S": server.S})
    assert all(not a.flags.writeable for a in state.to_arrays().values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.V = np.zeros(3)
    exported = [c.export_state() for c in clients]
    for c, cs in zip(clients, exported):
        np.testing.assert_array_equal(cs.V, c.V)
        assert "codes" in cs.memory and not cs.memory["codes"].flags.writeable
        with pytest.raises(TypeError):
            cs.memory["codes"] = np.zeros(2)  # a read-only mapping
        with pytest.raises(ValueError, match="read-only"):
            cs.memory["codes"][0, 0] = 1.0
    # values: the clients' later rounds do not change them
    before = [cs.to_arrays()["memory:codes"].copy() for cs in exported]
    _python_rounds(server, clients, range(3, 9))
    assert any(not np.array_equal(c.export_state().to_arrays()["memory:codes"], b) for c, b in zip(clients, before))
    for cs, b in zip(exported, before):
        np.testing.assert_array_equal(cs.memory["codes"], b)
    # from_arrays inverts to_arrays and copies what it is given
    raw = {k: v.copy() for k, v in server.export_state().to_arrays().items()}
    back = ServerState.from_arrays(raw)
    raw["V"][:] = np.nan
    assert np.isfinite(back.V).all()
    arrays = clients[0].export_state().to_arrays()
    _assert_same_state(ClientState.from_arrays(arrays).to_arrays(), arrays)


def test_state_values_refuse_what_they_do_not_hold():
    from fedmm.federation import ClientState, ServerState

    with pytest.raises(ValueError, match="only the server state arrays"):
        ServerState.from_arrays({"V": np.zeros(2), "theta_vector": np.zeros(3), "omega": np.zeros(1)})
    with pytest.raises(ValueError, match="'V' and 'theta_vector'"):
        ServerState.from_arrays({"V": np.zeros(2)})
    with pytest.raises(ValueError, match="theta_vector_prev"):
        ServerState(V=np.zeros(2), theta_vector=np.zeros(3), theta_vector_prev=np.zeros(4))
    with pytest.raises(ValueError, match="only the client state arrays"):
        ClientState.from_arrays({"V": np.zeros(2), "codes": np.zeros((2, 2))})
    with pytest.raises(ValueError, match="spider"):
        ClientState.from_arrays({"spider_S": np.zeros(2)})
    with pytest.raises(ValueError, match="finite 1-D control variate"):
        ClientState.from_arrays({"V": np.array([np.nan])})


def test_server_and_client_import_what_they_export():
    server, clients = _fedmm_parties(seed=4)
    _python_rounds(server, clients, range(4))
    fresh, fresh_clients = _fedmm_parties(seed=4)
    fresh.import_state(server.export_state())
    for new, old in zip(fresh_clients, clients):
        new.import_state(old.export_state())
    _python_rounds(server, clients, range(4, 8))
    _python_rounds(fresh, fresh_clients, range(4, 8))  # imported read-only memory: the oracle copies it first
    _assert_same_state(fresh.export_state().to_arrays(), server.export_state().to_arrays())
    for a, b in zip(fresh_clients, clients):
        _assert_same_state(a.export_state().to_arrays(), b.export_state().to_arrays())
    with pytest.raises(TypeError, match="ServerState"):
        server.import_state(server.export_state().to_arrays())
    with pytest.raises(TypeError, match="ClientState"):
        clients[0].import_state(clients[0].export_state().to_arrays())


def test_compiled_rounds_take_values_and_leave_them_unchanged():
    from fedmm.federation import compiled_rounds, config_unsupported

    server, clients = _fedmm_parties(seed=2)
    ref, ref_clients = _fedmm_parties(seed=2)
    _python_rounds(ref, ref_clients, range(5))
    config = server.round_config(clients)
    assert config_unsupported(config) is None and config.memory_key == "codes"
    model = server.model
    compiled = model.compiled_model()
    server_state = server.export_state()
    client_states = [c.export_state() for c in clients]
    snapshot = [s.to_arrays() for s in client_states]
    snapshot = [{k: v.copy() for k, v in s.items()} for s in snapshot]
    done = compiled_rounds(config, server_state, client_states, model=compiled,
                           datas=[model.compiled_data(c.data) for c in clients],
                           theta=model.compiled_theta(server.theta, compiled),
                           gammas=np.array([server.schedule(t + 1) for t in range(5)]), t0=0)
    assert done.completed == 5 and len(done.rounds) == 5
    for state, before in zip(client_states, snapshot):  # the inputs are values: unchanged
        _assert_same_state(state.to_arrays(), before)
    _assert_same_state(done.server_state.to_arrays(), ref.export_state().to_arrays())
    for state, c in zip(done.client_states, ref_clients):
        _assert_same_state(state.to_arrays(), c.export_state().to_arrays())
    # the server's own stretch does the same through export/import
    assert len(server.simulate_rounds(clients, 0, 5)) == 5
    _assert_same_state(server.export_state().to_arrays(), ref.export_state().to_arrays())
    with pytest.raises(ValueError, match="control variate of length"):
        compiled_rounds(config, server_state, [client_states[0]] * 4 + [type(client_states[0])()], model=compiled,
                        datas=[model.compiled_data(c.data) for c in clients], theta=done.theta,
                        gammas=np.ones(1), t0=5)


def test_round_config_is_built_once_per_run(monkeypatch):
    """One RoundConfig per server for the whole run, however many compiled stretches (one per round here)."""
    from fedmm.algorithms import federated

    built = []
    original = federated.Server._build_compiled_setup

    def counted(self, clients):
        built.append(id(self))
        return original(self, clients)

    monkeypatch.setattr(federated.Server, "_build_compiled_setup", counted)
    algo = FedMM(DictionaryLearning(4, 0.1, 0.2), clients_per_round=2, batch_size=5, backend="compiled")
    h = algo.run(_dictionary_clients(), 7, seed=0, evaluate_every=1)  # a stretch per round
    assert h.config["backend"] == "compiled"
    assert len(built) == len(set(built)) <= 2  # the start exchange's provisional server, then the run's


def test_round_config_mirrors_the_c_struct():
    """The first fields of RoundConfig are fedmm_round_config_t's, in order (the engine header)."""
    import dataclasses
    import re
    from pathlib import Path

    from fedmm.federation import RoundConfig

    headers = sorted((Path(__file__).resolve().parents[2] / "src").rglob("*.h"))
    text = next(h.read_text() for h in headers if "} fedmm_round_config_t;" in h.read_text())
    body = re.search(r"typedef struct fedmm_round_config \{(.*?)\} fedmm_round_config_t;", text, re.S).group(1)
    c_fields = re.findall(r"(\w+);", body)
    assert [f.name for f in dataclasses.fields(RoundConfig)][:len(c_fields)] == c_fields


def test_a_checkpoint_stores_the_state_values_as_their_arrays(tmp_path):
    from fedmm.federation import Checkpoint
    from fedmm.history import History

    server, clients = _fedmm_parties(seed=5)
    _python_rounds(server, clients, range(2))
    h = History("FedMM", {})
    h.append(round=0)
    h.append(round=1)
    ck = Checkpoint(fingerprint={"x": 1}, next_round=2, server_state=server.export_state(),
                    client_states=[c.export_state() for c in clients], history=h)
    ck.save(tmp_path / "ck")
    back = Checkpoint.load(tmp_path / "ck")
    _assert_same_state(back.server_state, server.export_state().to_arrays())
    for state, c in zip(back.client_states, clients):
        _assert_same_state(state, c.export_state().to_arrays())


def test_parties_and_states_pickle_after_compiled_rounds():
    """A Ray worker or a process pool receives them: the server's compiled cache is not pickled."""
    import pickle

    server, clients = _fedmm_parties(seed=6)
    assert len(server.simulate_rounds(clients, 0, 3)) == 3
    state = clients[0].export_state()
    back = pickle.loads(pickle.dumps(state))
    _assert_same_state(back.to_arrays(), state.to_arrays())
    assert not back.memory["codes"].flags.writeable
    server2, clients2 = pickle.loads(pickle.dumps((server, clients)))
    assert len(server2.simulate_rounds(clients2, 3, 2)) == 2
    assert len(server.simulate_rounds(clients, 3, 2)) == 2
    _assert_same_state(server2.export_state().to_arrays(), server.export_state().to_arrays())
