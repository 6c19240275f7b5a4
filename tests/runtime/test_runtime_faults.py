# SPDX-License-Identifier: BSD-3-Clause
"""One fault policy under Ray (issue 15): a client that raises, misses the deadline, whose actor dies or
whose payload is invalid is dropped for the round with its reason, and the run goes on; the in-process
runtime with the same faults gives the same History; V = Σ μ_i V_i holds over the driver's clients after
every round; a dead actor is replaced and its clients come back; too few CPUs is a clear error."""
import numpy as np
import pytest

pytest.importorskip("ray", reason="the 'ray' extra is not installed: pip install 'fedmm[ray]'")

from fault_injection import CAUSES, FaultyClient, check_invariants  # noqa: E402

from fedmm.algorithms import FedMM  # noqa: E402
from fedmm.compression import StochasticRounding  # noqa: E402
from fedmm.federation import LocalRuntime  # noqa: E402
from fedmm.history import History  # noqa: E402
from fedmm.models import GaussianMixture  # noqa: E402
from fedmm.runtime.ray import RayRuntime  # noqa: E402

# Ray drops handles of its helper processes while they run (a ResourceWarning, not ours).
pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::ResourceWarning")]


def _datas(n_clients=4):
    rng = np.random.default_rng(1)
    centers = np.array([[-3.0, 0.0], [0.0, 3.0], [3.0, 0.0]])
    return [centers[rng.choice(3, size=40, p=np.roll([0.6, 0.3, 0.1], i))] + rng.standard_normal((40, 2))
            for i in range(n_clients)]


ALGO = FedMM(GaussianMixture(3, n_features=2), participation_prob=1.0, control_variate_step=0.3, step=0.5,
             batch_size=10,
             control_variates="oracle", compressor=StochasticRounding(bits=8))


def _run(runtime, plan, n_rounds, *, sleep=1.0, seed=3, callback=None):
    """``n_rounds`` of ALGO with the faults of ``plan``; V = Σ μ_i V_i and finite Ŝ, θ checked after every round."""
    server, inner = ALGO.build(_datas(), seed=seed)
    clients = [FaultyClient(c, plan, sleep) for c in inner]

    def check(t):
        check_invariants(server, clients)
        if callback is not None:
            callback(t)

    history = runtime.run(server, clients, n_rounds, history=History("FedMM"), callback=check)
    history.state.update(S=server.S, theta=server.theta_vector)
    return history, server, clients


def _without_reasons(history):
    out = History(history.algorithm)
    for record in history.records:
        out.append(**{k: v for k, v in record.items() if k != "drop_reasons"})
    out.state.update(history.state)
    return out


def test_too_few_cpus_is_a_clear_error_at_setup(ray_session):
    # the session's Ray (tests/conftest.py) has two CPUs: three one-CPU actors cannot all start
    with pytest.raises(ValueError, match=r"n_actors=3.*needs 3 CPUs but the Ray cluster has 2"):
        _run(RayRuntime(3, setup_timeout=30.0), {}, 1)


def test_raise_nan_and_truncated_payloads_are_dropped_as_in_process(ray_session):
    plan = {(0, 1): "raise", (1, 2): "nan", (1, 0): "truncate", (2, 3): "raise", (3, 1): "nan", (3, 2): "truncate"}
    errors = []
    got, server, clients = _run(RayRuntime(2, timeout=60.0, errors=errors), plan, 5)
    ref, ref_server, ref_clients = _run(LocalRuntime(compiled=False), plan, 5)
    assert got.equals(ref)  # records (dropped, drop_reasons, E_s, ...) and final Ŝ, θ, bit for bit
    for t, record in enumerate(got.records):
        expected = sorted(i for (u, i) in plan if u == t)
        assert record["dropped"] == expected
        assert record["active"] == [i for i in range(4) if i not in expected]
        for i, reason in zip(record["dropped"], record.get("drop_reasons", [])):
            assert reason.startswith(CAUSES[plan[(t, i)]]), reason
    assert sorted((t, i) for t, i, _ in errors) == sorted(plan)
    for c, r in zip(clients, ref_clients):  # the driver's clients end where the in-process ones do
        np.testing.assert_array_equal(c.V, r.V)


def test_on_client_error_raise_propagates_the_clients_exception(ray_session):
    with pytest.raises(RuntimeError, match="injected failure"):
        _run(RayRuntime(2, on_client_error="raise"), {(1, 2): "raise"}, 3)
    with pytest.raises(ValueError, match="malformed payload"):
        _run(RayRuntime(2, on_client_error="raise"), {(1, 2): "truncate"}, 3)


def test_a_killed_actor_drops_its_clients_for_the_round_and_is_replaced(ray_session):
    # Client 0 ends its actor's process in round 1: clients 0 and 1 (same actor) are dropped for that round
    # only; a fresh actor built from the driver's committed states serves them from round 2 on.
    runtime = RayRuntime(2, timeout=60.0)
    got, server, clients = _run(runtime, {(1, 0): "exit"}, 4)
    assert runtime.restarts == 1
    assert [r["dropped"] for r in got.records] == [[], [0, 1], [], []]
    assert [r["active"] for r in got.records] == [[0, 1, 2, 3], [2, 3], [0, 1, 2, 3], [0, 1, 2, 3]]
    assert all(reason.startswith("actor died") for reason in got.records[1]["drop_reasons"])
    # the same numbers as in process with clients 0 and 1 failing in round 1
    ref, _, _ = _run(LocalRuntime(compiled=False), {(1, 0): "raise", (1, 1): "raise"}, 4)
    assert _without_reasons(got).equals(_without_reasons(ref))


def test_a_sleeping_client_is_dropped_alone_and_its_late_result_is_never_applied(ray_session):
    # Client 1 sleeps 5 s in round 0 with timeout=3: it is dropped (its actor answers at 80 % of the timeout
    # with client 0's payload), reported busy in round 1, and its round-0 update, finished after the
    # deadline, is discarded: round 2 starts it again from its committed state.
    def wait_for_the_sleeper(t):
        if t == 1:
            import time

            time.sleep(8.0)  # the sleeper's thread ends ~2 s before round 2 starts

    got, server, clients = _run(RayRuntime(2, timeout=3.0), {(0, 1): "sleep"}, 4, sleep=5.0,
                                callback=wait_for_the_sleeper)
    assert [r["dropped"] for r in got.records] == [[1], [1], [], []]
    assert got.records[0]["active"] == [0, 2, 3]  # client 0 shares client 1's actor
    assert got.records[0]["drop_reasons"] == ["timeout: no answer within the deadline"]
    assert got.records[1]["drop_reasons"] == ["timeout: still running round 0"]
    ref, _, ref_clients = _run(LocalRuntime(compiled=False), {(0, 1): "raise", (1, 1): "raise"}, 4)
    assert _without_reasons(got).equals(_without_reasons(ref))
    np.testing.assert_array_equal(clients[1].V, ref_clients[1].V)


def test_a_setup_that_does_not_answer_in_time_is_a_timeout_error(ray_session):
    class SlowSetup(FaultyClient):
        def setup(self, message):
            import time

            time.sleep(30.0)
            return super().setup(message)

    server, inner = ALGO.build(_datas(), seed=0)
    with pytest.raises(TimeoutError, match="setup_timeout=2.0"):
        RayRuntime(2, setup_timeout=2.0).run(server, [SlowSetup(c, {}) for c in inner], 1, history=History("FedMM"))


def test_an_actor_answers_at_its_deadline_with_the_healthy_clients_results():
    # The actor body alone (no Ray): two clients sleep past the deadline; the other four still answer,
    # in order, with the payloads and states a plain step gives; the sleepers are then busy until they wake.
    import time

    from fedmm.runtime import ray as ray_runtime

    plan = {(0, 1): "sleep", (0, 4): "sleep"}
    server, inner = ALGO.build(_datas(6), seed=2)
    setup = server.setup_message()
    shard = ray_runtime._Shard([FaultyClient(c, plan, sleep=1.5) for c in inner])
    shard.setup(setup)
    ref_server, ref = ALGO.build(_datas(6), seed=2)
    for c in ref:
        c.setup(setup)
    message = server.broadcast(0)
    answers = shard.step(message, list(range(6)), {}, budget=0.5, deadline=time.time() + 0.5)
    assert [a[0] for a in answers] == list(range(6))
    for i, payload, state, failure in answers:
        if i in (1, 4):
            assert payload is None and failure[0] == "timeout: no answer within the deadline"
        else:
            assert failure is None and payload == ref[i].step(message)
            np.testing.assert_array_equal(state.V, ref[i].V)  # the ClientState value
    again = shard.step(server.broadcast(1), [1, 2], {}, budget=0.5, deadline=time.time() + 0.5)
    assert again[0][3][0] == "timeout: still running round 0" and again[1][3] is None
    deadline = time.monotonic() + 30.0
    while shard.busy and time.monotonic() < deadline:
        time.sleep(0.1)
    assert shard.busy == {}  # the late steps ended and were discarded
