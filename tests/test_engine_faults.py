# SPDX-License-Identifier: BSD-3-Clause
"""One fault policy in process (issue 15, first increment): a client whose round raises or whose payload
fails validation is dropped for the round (Algorithm 2 lines 10-11) and the run goes on; rounds are
atomic, so V = Σ μ_i V_i holds after every round, failed ones and Ctrl-C included."""
import numpy as np
import pytest

from fedmm.algorithms import FedMM
from fedmm.compression import StochasticRounding
from fedmm.engine import LocalRuntime
from fedmm.history import History
from fedmm.models import DictionaryLearning

from reference import FailingInverseToy, fedmm_rounds_with_drops


def _toy_datas(failing=4):
    rng = np.random.default_rng(3)
    datas = [rng.uniform(1, 3, 20) for _ in range(6)]
    if failing is not None:
        datas[failing] = np.full(20, FailingInverseToy.FAIL_MARK)
    return datas


def _invariant_gap(server, clients):
    """‖V − Σ_i μ_i V_i‖ / max(1, ‖V‖)."""
    total = sum(w * c.V for w, c in zip(server.weights, clients))
    return float(np.linalg.norm(server.V - total) / max(1.0, np.linalg.norm(server.V)))


@pytest.mark.parametrize("n_threads", [1, 2])
def test_a_raising_client_is_dropped_and_the_run_equals_algorithm_2_without_it(n_threads):
    datas = _toy_datas()
    algo = FedMM(FailingInverseToy(), participation_prob=1.0, alpha=0.5, step=0.5, batch_size=5,
                 n_threads=n_threads)
    h = algo.run(datas, 4, seed=7)
    assert h.config["backend"] == "python"  # the subclass overrides statistic: no compiled form
    rounds, S, theta = fedmm_rounds_with_drops(algo, datas, 4, 7, failing={4})
    for rec, (ids, E_s, _) in zip(h.records, rounds, strict=True):
        assert rec["dropped"] == [4] and rec["active"] == [i for i in ids if i != 4]
        assert rec["drop_reasons"] == ["RuntimeError: simulated client failure"]
        assert rec["E_s"] == E_s
    np.testing.assert_array_equal(h.state["S"], S)
    np.testing.assert_array_equal(h.state["theta"], theta)
    with pytest.raises(RuntimeError, match="simulated client failure"):
        algo.run(datas, 4, seed=7, on_client_error="raise")


class _Garbling(StochasticRounding):
    """8-bit rounding whose payloads from the clients in ``bad`` are cut short (a corrupted message)."""

    def __init__(self, bad):
        super().__init__(bits=8)
        self.bad = bad

    def encode(self, x, rng=None):
        payload = super().encode(x, rng)
        return payload[:-3] if self.bad and np.any(x) else payload  # the set-up probe (zeros) passes

    def quantizer_spec(self, q):
        return None  # a user compressor: Python backend

    def __repr__(self):
        return f"_Garbling({self.bad})"


@pytest.mark.parametrize("alpha,caught_by", [(0.0, "invalid payload: malformed payload"),
                                             (0.2, "ValueError: malformed payload")],
                         ids=["server-validation", "client-decode"])
def test_an_invalid_payload_drops_its_client_and_restores_its_state(alpha, caught_by):
    """α = 0: the server's validation rejects the payload; α > 0: the client's own decode (for V) fails first."""
    rng = np.random.default_rng(0)
    datas = [np.ascontiguousarray(rng.standard_normal((30, 5))) for _ in range(4)]
    comps = [_Garbling(i == 2) for i in range(4)]
    algo = FedMM(DictionaryLearning(3, 0.1, 0.2), participation_prob=1.0, compressor=comps, alpha=alpha,
                 batch_size=6, control_variates="oracle")
    server, clients = algo.build(datas, seed=1)
    h = LocalRuntime().run(server, clients, 5, history=History("FedMM"))
    assert all(r["dropped"] == [2] and r["active"] == [0, 1, 3] and r["drop_reasons"][0].startswith(caught_by)
               for r in h.records)
    assert _invariant_gap(server, clients) < 1e-14
    # client 2's control variate never moved: its messages were never aggregated
    fresh, fresh_clients = algo.build(datas, seed=1)
    setup = fresh.setup_message()
    fresh.setup_aggregate({c.index: c.setup(setup) for c in fresh_clients})
    np.testing.assert_array_equal(clients[2].V, fresh_clients[2].V)
    with pytest.raises(ValueError, match="malformed payload"):
        server2, clients2 = algo.build(datas, seed=1)
        LocalRuntime(on_client_error="raise").run(server2, clients2, 2, history=History("FedMM"))


@pytest.mark.parametrize("backend", ["python", "compiled"])
def test_ctrl_c_leaves_consistent_parties_and_attaches_the_completed_rounds(backend):
    rng = np.random.default_rng(2)
    datas = [np.ascontiguousarray(rng.standard_normal((30, 5))) for _ in range(5)]
    algo = FedMM(DictionaryLearning(3, 0.1, 0.2), clients_per_round=3, compressor=StochasticRounding(bits=8),
                 alpha=0.3, batch_size=6, backend=backend)
    server, clients = algo.build(datas, seed=4)

    def interrupt(t):
        if t == 5:
            raise KeyboardInterrupt

    runtime = LocalRuntime(compiled=backend == "compiled")
    with pytest.raises(KeyboardInterrupt) as info:
        runtime.run(server, clients, 10, history=History("FedMM"), callback=interrupt)
    completed = info.value.history
    # the Python backend undoes the interrupted round; the compiled one had committed it before the callback
    assert [r["t"] for r in completed.records] == list(range(5 if backend == "python" else 6))
    assert _invariant_gap(server, clients) < 1e-14
    # and the parties are exactly where an uninterrupted run is after those rounds
    ref_server, ref_clients = algo.build(datas, seed=4)
    LocalRuntime(compiled=backend == "compiled").run(ref_server, ref_clients, len(completed.records),
                                                     history=History("FedMM"))
    for key, value in ref_server.get_state().items():
        np.testing.assert_array_equal(server.get_state()[key], value)


def test_a_failing_client_inside_a_compiled_stretch_commits_the_rounds_before_it():
    """The compiled backend reruns a failed round on the Python backend, which drops the client."""
    rng = np.random.default_rng(5)
    datas = [np.ascontiguousarray(rng.standard_normal((30, 5))) for _ in range(4)]
    algo = FedMM(DictionaryLearning(3, 0.1, 0.2), participation_prob=1.0, compressor=StochasticRounding(bits=8),
                 alpha=0.1, batch_size=30, backend="compiled")
    server, clients = algo.build(datas, seed=3)
    h = LocalRuntime().run(server, clients, 3, history=History("FedMM"))
    assert all(r["dropped"] == [] for r in h.records)  # healthy: nothing dropped
    clients[1].data[:] = np.inf  # a client whose data went bad mid-run: its compiled round fails
    h2 = LocalRuntime().run(server, clients, 3, history=History("FedMM"))
    assert [r["dropped"] for r in h2.records] == [[1], [1], [1]]
    assert _invariant_gap(server, clients) < 1e-14
