# SPDX-License-Identifier: BSD-3-Clause
"""The compiled backend (engine.c) and its random streams (random.c) against the Python backend.

* the C Philox replica draws what ``numpy.random.Philox`` draws from the same state;
* ``sample_without_replacement`` is uniform over ordered samples (a count test
  whose tolerance follows from the number of draws);
* whole stretches of compiled rounds (one GIL-free call, several threads) equal
  the Python backend (``Client.step`` with real payload bytes, then
  ``Server.aggregate``) bit for bit: Histories, server and client states.
  Compiled models other than dictionary learning are checked in their own
  test files (e.g. tests/models/test_numba_model.py).
"""
import itertools

import numpy as np
import pytest

from fedmm import _rounds
from fedmm.algorithms import FedMM, ParameterAveraging
from fedmm.algorithms._random import RoundStream, party_seed
from fedmm.compression import BlockQuantizer, Identity, StochasticRounding
from fedmm.federation import ClientState
from fedmm.kernels import sample_without_replacement
from fedmm.models import DictionaryLearning
from reference import participation_kwargs

P, K, LAM, ETA = 8, 5, 0.1, 0.2


def _numpy_philox(key, counter):
    bitgen = np.random.Philox(key=np.asarray(key, dtype=np.uint64))
    state = bitgen.state
    state["state"]["counter"] = np.asarray(counter, dtype=np.uint64)
    state["buffer_pos"] = 4
    bitgen.state = state
    return bitgen, np.random.Generator(bitgen)


@pytest.mark.parametrize("counter", [(0, 0, 0, 0), (0, 7, 0, 0), (2**64 - 3, 2**64 - 1, 5, 0)],
                         ids=["zero", "round-7", "carry"])
def test_philox_replica_draws_what_numpy_draws(counter):
    rng = np.random.default_rng(0)
    kinds = "".join(rng.choice(list("qld"), 400))  # interleaved 64-bit, 32-bit and double draws
    for key in ([0, 0], [2**64 - 1, 12345], rng.integers(0, 2**63, 2).tolist()):
        bitgen, gen = _numpy_philox(key, counter)
        expected = []
        for kind in kinds:
            if kind == "q":
                expected.append(int(bitgen.random_raw()))
            elif kind == "l":
                expected.append(int(gen.integers(0, 2**32, dtype=np.uint32)))  # one next_uint32
            else:
                expected.append(gen.random())
        ours = _rounds.philox_draws(np.array(key, dtype=np.uint64), np.array(counter, dtype=np.uint64), kinds)
        assert ours == expected


def test_sample_without_replacement_is_uniform_over_ordered_samples():
    n, b, draws = 5, 2, 40_000
    rng = np.random.default_rng(1)
    counts = {}
    for _ in range(draws):
        s = sample_without_replacement(n, b, rng)
        assert len(set(s.tolist())) == b and s.min() >= 0 and s.max() < n
        counts[tuple(s.tolist())] = counts.get(tuple(s.tolist()), 0) + 1
    assert set(counts) == set(itertools.permutations(range(n), b))
    prob = 1.0 / len(counts)  # 20 ordered pairs, each (n - b)!/n!
    se = np.sqrt(draws * prob * (1 - prob))
    assert max(abs(c - draws * prob) for c in counts.values()) < 4.5 * se  # 20 cells, 4.5 sigma each


def test_sample_without_replacement_edges_and_errors():
    assert sample_without_replacement(0, 0, 0).shape == (0,)
    assert sorted(sample_without_replacement(7, 7, 0).tolist()) == list(range(7))
    with pytest.raises(ValueError, match="'b'"):
        sample_without_replacement(3, 4, 0)
    with pytest.raises(ValueError, match="'n'"):
        sample_without_replacement(-1, 0, 0)
    with pytest.raises(TypeError, match="'b'"):
        sample_without_replacement(3, 1.5, 0)


def test_round_stream_sample_equals_the_generator_draw():
    stream = RoundStream(party_seed(4, 0, 0))
    for t in (0, 1, 99):
        np.testing.assert_array_equal(stream.sample(t, 20, 10), sample_without_replacement(20, 10, stream.at(t)))


def test_weighted_row_sum_accumulates_like_numpy():
    rng = np.random.default_rng(2)
    rows = [rng.standard_normal(31) for _ in range(6)]
    w = rng.random(6)
    acc = np.zeros(31)
    for wk, r in zip(w, rows):
        acc += np.multiply(wk, r)
    np.testing.assert_array_equal(_rounds.weighted_row_sum(rows, w, 31), acc)
    np.testing.assert_array_equal(_rounds.weighted_row_sum([], np.zeros(0), 4), np.zeros(4))
    with pytest.raises(ValueError, match="length 31"):
        _rounds.weighted_row_sum([rows[0][:30]], w[:1], 31)


# --------------------------------------------------------------------------- fused rounds
def _clients(n_clients=6, n_per_client=40, seed=0):
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal((P, K))
    out = []
    for i in range(n_clients):
        codes = rng.standard_normal((n_per_client + i, K)) * (rng.random((n_per_client + i, K)) < 0.5)
        out.append(np.ascontiguousarray(codes @ theta.T + 0.05 * rng.standard_normal((n_per_client + i, P))))
    return out


COMPRESSORS = {
    "identity": Identity(),
    "dither8": StochasticRounding(bits=8),
    "blockp": BlockQuantizer(block_size=16, norm="inf"),
}


@pytest.mark.parametrize("algorithm", [FedMM, ParameterAveraging], ids=["fedmm", "baseline"])
def test_compiled_and_python_histories_identical_across_threads(algorithm):
    datas = _clients()
    runs = [algorithm(DictionaryLearning(K, LAM, ETA), clients_per_round=3, compressor=StochasticRounding(bits=6),
                      control_variate_step=0.02, step=("sqrt", 0.05), batch_size=9, n_threads=n_threads,
                      backend=backend)
            .run(datas, 12, seed=2, evaluate_every=4)
            for n_threads, backend in ((1, "compiled"), (2, "compiled"), (1, "python"))]
    assert [h.config["backend"] for h in runs] == ["compiled", "compiled", "python"]
    for h in runs[1:]:
        assert h.equals(runs[0])


class _PythonRounding:
    """A compressor written in Python (encode/decode only): it has no compiled quantizer."""

    def __init__(self):
        self.inner = StochasticRounding(bits=8)

    def encode(self, x, rng=None):
        return self.inner.encode(x, rng)

    def decode(self, payload):
        return self.inner.decode(payload)

    def payload_nbytes(self, q):
        return self.inner.payload_nbytes(q)

    def __repr__(self):
        return "_PythonRounding()"


@pytest.mark.parametrize("project", [True, False])
def test_compiled_server_step_equals_project_then_T(project):
    """DictionaryLearning.sa_step (one kernel call) == SurrogateModel.sa_step (add, project, T) bit for bit."""
    from fedmm.models.base import SurrogateModel

    model = DictionaryLearning(K, LAM, ETA, n_features=P)
    rng = np.random.default_rng(3)
    for shift in (0.0, 0.3, 3.0):  # positive definite, a few and many negative eigenvalues after the step
        M = rng.standard_normal((K, K))
        S = model.layout.join(A=M @ M.T / K + (1.0 if not project else 0.0) * np.eye(K), B=rng.standard_normal((P, K)))
        H = model.layout.join(A=-shift * np.eye(K) + 0.1 * rng.standard_normal((K, K)),
                              B=rng.standard_normal((P, K)))
        gamma = 0.3 if project else 0.01
        ours, ref = model.sa_step(S, H, gamma, project), SurrogateModel.sa_step(model, S, H, gamma, project)
        np.testing.assert_array_equal(ours[0], ref[0])
        np.testing.assert_array_equal(ours[1], ref[1])
    with pytest.raises(ValueError, match="finite"):
        model.sa_step(S, np.full_like(H, np.nan), 0.1, project)


def _set_up_fedmm():
    """A FedMM server and its clients after the set-up exchange (8-bit rounding, 3 clients a round)."""
    server, clients = FedMM(DictionaryLearning(K, LAM, ETA), clients_per_round=3, compressor=StochasticRounding(bits=8),
                            batch_size=5).build(_clients(), seed=0)
    setup = server.setup_message()
    server.setup_aggregate({c.index: c.setup(setup) for c in clients})
    return server, clients


# --------------------------------------------------------------------------- compiled stretches of rounds
def test_squared_distance_sums_in_its_documented_order():
    rng = np.random.default_rng(4)
    for n in (0, 1, 3, 4, 7, 525):
        a, b = rng.standard_normal(n) * 1e3, rng.standard_normal(n)
        d = a - b
        s = [0.0, 0.0, 0.0, 0.0]
        for j in range(n - n % 4):
            s[j % 4] += d[j] * d[j]
        for j in range(n - n % 4, n):
            s[0] += d[j] * d[j]
        assert _rounds.squared_distance(a, b) == (s[0] + s[1]) + (s[2] + s[3])
        np.testing.assert_allclose(_rounds.squared_distance(a, b), np.sum(d * d), rtol=1e-13)
    with pytest.raises(ValueError, match="equal length"):
        _rounds.squared_distance(np.zeros(3), np.zeros(4))


def _counting_simulate_rounds(monkeypatch):
    """Count the stretches Server.simulate_rounds ran (None results are declines)."""
    from fedmm.algorithms import federated  # noqa: F401  (Server is defined there)

    calls = {"ran": 0, "declined": 0}
    original = federated.Server.simulate_rounds

    def counted(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        calls["declined" if out is None else "ran"] += 1
        return out

    monkeypatch.setattr(federated.Server, "simulate_rounds", counted)
    return calls


MODES = [("select", 3), ("select", 0.5), ("select", 1.0), ("compress", 3), ("compress", 0.5),
         ("compress-local", 0.5)]


@pytest.mark.parametrize("algorithm", [FedMM, ParameterAveraging], ids=["fedmm", "baseline"])
@pytest.mark.parametrize("mode,participation", MODES,
                         ids=["count", "bernoulli", "all", "alg4-count", "alg4-bernoulli", "alg4-local"])
@pytest.mark.parametrize("compressor", list(COMPRESSORS), ids=list(COMPRESSORS))
@pytest.mark.parametrize("alpha", [0.0, 0.03], ids=["no-cv", "cv"])
def test_compiled_stretches_equal_the_per_round_path(monkeypatch, alpha, compressor, mode, participation, algorithm):
    """Whole rounds in C (selection, clients, aggregation, SA step, T) == the per-client wire path, bit for bit."""
    from fedmm.federation import local

    datas = _clients()
    calls = _counting_simulate_rounds(monkeypatch)
    monkeypatch.setattr(local, "_STRETCH_SECONDS", float("inf"))  # stretches end at the monitor only

    def run(n_threads, backend, **kw):
        algo = algorithm(DictionaryLearning(K, LAM, ETA), **participation_kwargs(participation),
                         compressor=COMPRESSORS[compressor], control_variate_step=alpha, step=("sqrt", 0.1),
                         batch_size=6,
                         n_threads=n_threads, backend=backend, control_variates="oracle" if alpha else "zero",
                         participation_mode=mode)
        if algorithm is ParameterAveraging:
            kw["monitor_every"] = 1  # E_sp every round (its default is the objective's cadence)
        return algo.run(datas, 23, seed=7, **kw)

    ref = run(1, "python", evaluate_every=5)
    assert calls == {"ran": 0, "declined": 0} and ref.config["backend"] == "python"
    for n_threads in (1, 2):
        h = run(n_threads, "compiled", evaluate_every=5)
        assert h.config["backend"] == "compiled"
        assert h.equals(ref)
        for key in ref.state:
            np.testing.assert_array_equal(h.state[key], ref.state[key])
    # stretches end at the monitor's rounds: 5, 10, 15, 20 and the last (E_sp every round for the baseline)
    expected = 23 if algorithm is ParameterAveraging else 5
    assert calls == {"ran": 2 * expected, "declined": 0}
    walls = ref.column("wall_time")
    assert np.all(np.diff(walls) >= 0)


def test_compiled_stretches_with_a_callback_see_every_round(monkeypatch):
    """With a callback every round is its own stretch, and the callback sees the per-round path's states."""
    datas = _clients()
    calls = _counting_simulate_rounds(monkeypatch)
    seen = {"compiled": [], "python": []}
    for backend in seen:
        FedMM(DictionaryLearning(K, LAM, ETA), clients_per_round=4, compressor=StochasticRounding(bits=8),
              control_variate_step=0.05,
              batch_size=5, backend=backend).run(
            datas, 6, seed=1, callback=lambda t, state, b=backend: seen[b].append(
                (t, state["statistic"].copy(), state["theta"].copy())))
    assert calls["ran"] == 6
    for (t_a, S_a, th_a), (t_b, S_b, th_b) in zip(seen["compiled"], seen["python"], strict=True):
        assert t_a == t_b
        np.testing.assert_array_equal(S_a, S_b)
        np.testing.assert_array_equal(th_a, th_b)


def test_compiled_stretches_decline_other_configurations(monkeypatch):
    datas = _clients()
    calls = _counting_simulate_rounds(monkeypatch)
    for kw, reason in ((dict(model=DictionaryLearning(K, LAM, ETA, "unit_norm")), "no compiled form"),
                       (dict(compressor=_PythonRounding()), "no compiled quantizer"),
                       (dict(oracle="spider", k_in=2), "SPIDER")):
        base = dict(model=DictionaryLearning(K, LAM, ETA), clients_per_round=3, batch_size=5,
                    compressor=StochasticRounding(bits=8))
        base.update(kw)
        model = base.pop("model")
        h_auto = FedMM(model, **base).run(datas, 4, seed=0)
        assert h_auto.config["backend"] == "python" and reason in h_auto.config["backend_reason"]
        h_plain = FedMM(model, backend="python", **base).run(datas, 4, seed=0)
        assert h_auto.equals(h_plain)
        with pytest.raises(ValueError, match=f"backend='compiled' cannot run this configuration: .*{reason}"):
            FedMM(model, backend="compiled", **base).run(datas, 4, seed=0)
    assert calls["ran"] == 0


def test_stretch_ends_where_python_must_run():
    from fedmm.federation.local import _STRETCH, LocalRuntime

    class Due:
        def __init__(self, rounds):
            self.rounds = rounds

        def due(self, t):
            return t in self.rounds

        def __call__(self, t, gamma):
            return {}

    end = LocalRuntime._stretch_end
    assert end(0, 1000, None, None) == _STRETCH
    assert end(990, 1000, None, None) == 1000
    assert end(3, 1000, Due({9, 20}), None) == 10
    assert end(10, 1000, Due({9, 20}), None) == 21
    assert end(3, 1000, Due(set()), lambda t: None) == 4  # a callback after every round
    assert end(3, 1000, Due(range(1000)), None) == 4  # a monitor due every round (every monitor declares due)


def test_compiled_stretch_rejects_malformed_client_state():
    server, clients = _set_up_fedmm()
    state = clients[4].export_state().to_arrays()
    state["memory:codes"] = np.zeros((3, K))
    clients[4].import_state(ClientState.from_arrays(state))
    S_before = server.S.copy()
    with pytest.raises(ValueError, match=r"memories\[4\]"):
        server.simulate_rounds(clients, 0, 3)
    np.testing.assert_array_equal(server.S, S_before)  # nothing ran


@pytest.mark.parametrize("shape", [(1, 3), (6, 1), (1, 1)], ids=["p=1", "K=1", "p=K=1"])
@pytest.mark.parametrize("algorithm", [FedMM, ParameterAveraging], ids=["fedmm", "baseline"])
def test_compiled_stretches_on_degenerate_shapes(algorithm, shape):
    """p = 1 or K = 1: θ is both row- and column-major, and the server's two copies of it must not alias."""
    p, k = shape
    rng = np.random.default_rng(0)
    datas = [np.ascontiguousarray(rng.standard_normal((30, p))) for _ in range(4)]
    histories = [algorithm(DictionaryLearning(k, 0.05, 0.2), clients_per_round=2, compressor=StochasticRounding(bits=6),
                           control_variate_step=0.05, batch_size=5, backend=backend).run(datas, 15, seed=1)
                 for backend in ("compiled", "python")]
    assert histories[0].equals(histories[1])


def test_compiled_stretches_cut_short_by_time_give_the_same_history(monkeypatch):
    """A stretch that runs out of time returns the rounds it ran; the runtime carries on from there."""
    from fedmm.federation import local

    server, clients = _set_up_fedmm()
    assert len(server.simulate_rounds(clients, 0, 5, max_seconds=0.0)) == 1  # at least one round, then stop
    datas = _clients()
    calls = _counting_simulate_rounds(monkeypatch)
    monkeypatch.setattr(local, "_STRETCH_SECONDS", 0.0)
    algo = dict(clients_per_round=3, compressor=StochasticRounding(bits=8), control_variate_step=0.05, batch_size=5)
    cut = FedMM(DictionaryLearning(K, LAM, ETA), **algo).run(datas, 9, seed=4, evaluate_every=4)
    ref = FedMM(DictionaryLearning(K, LAM, ETA), backend="python", **algo).run(datas, 9, seed=4, evaluate_every=4)
    assert calls["ran"] == 9  # one round per call
    assert cut.equals(ref)


@pytest.mark.parametrize("algorithm", [FedMM, ParameterAveraging], ids=["fedmm", "baseline"])
def test_compiled_stretches_without_warm_starts_and_with_client_weights(algorithm):
    """Cold LASSO starts (no remembered codes) and user weights μ_i through the compiled stretches."""
    datas = _clients()
    weights = np.arange(1.0, len(datas) + 1.0)
    runs = [algorithm(DictionaryLearning(K, LAM, ETA, warm_start=False), participation_prob=0.6,
                      compressor=BlockQuantizer(block_size=8), control_variate_step=0.1, step="1/t", batch_size=4,
                      weights=weights,
                      n_threads=n_threads, backend=backend).run(datas, 11, seed=9)
            for n_threads, backend in ((2, "compiled"), (1, "python"))]
    assert runs[0].equals(runs[1])


def test_history_records_the_backend_of_a_callers_local_runtime():
    from fedmm.algorithms import FedMM
    from fedmm.federation import LocalRuntime
    from fedmm.models import GaussianMixture

    rng = np.random.default_rng(0)
    datas = [rng.normal(size=(50, 2)) + i for i in range(3)]
    algorithm = FedMM(GaussianMixture(2, n_features=2), step=0.5, batch_size=10)
    compiled = algorithm.run(datas, 4, seed=1, runtime=LocalRuntime(compiled=True))
    python = algorithm.run(datas, 4, seed=1, runtime=LocalRuntime(compiled=False))
    assert compiled.config["backend"] == "compiled" and python.config["backend"] == "python"
    assert compiled.equals(python)
