# SPDX-License-Identifier: BSD-3-Clause
"""Round state as data: a run saved mid-way and restored into fresh parties continues bit for bit,
and every client's payload is decoded with its own compressor."""
import numpy as np
import pytest

from fedmm.algorithms import FedMM, ParameterAveraging
from fedmm.compression import BlockQuantizer, Identity, StochasticRounding
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
    second.set_state(first.get_state())
    for fresh, old in zip(second_clients, first_clients):
        fresh.set_state(old.get_state(), old.theta_like)
    if backend == "python":
        _python_rounds(second, second_clients, range(5, 12))
    else:
        assert len(second.simulate_rounds(second_clients, 5, 7)) == 7
    _assert_same_state(second.get_state(), server.get_state())
    for a, b in zip(second_clients, clients):
        _assert_same_state(a.get_state(), b.get_state())


def test_server_state_is_validated():
    server, _ = _set_up(FedMM(InverseToy(), step=0.5), [np.ones(5) * 2.0, np.ones(4) * 3.0], seed=0)
    state = server.get_state()
    with pytest.raises(ValueError, match="'V' of shape"):
        server.set_state({**state, "V": np.zeros(3)})
    with pytest.raises(ValueError, match="finite 'S'"):
        server.set_state({**state, "S": np.full_like(state["S"], np.nan)})
    with pytest.raises(ValueError, match="'S' in the state"):
        server.set_state({k: v for k, v in state.items() if k != "S"})


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
