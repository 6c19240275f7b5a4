# SPDX-License-Identifier: BSD-3-Clause
"""The sharded Ray runtime reproduces the in-process History and drops failing clients."""
import shutil
import sys

import numpy as np
import pytest

pytest.importorskip("ray", reason="the 'ray' extra is not installed: pip install 'fedmm[ray]'")

from fedmm.algorithms import FedMM, ParameterAveraging  # noqa: E402
from fedmm.compression import StochasticRounding  # noqa: E402
from fedmm.federation import Checkpoint  # noqa: E402
from fedmm.history import TIMING_FIELDS, History  # noqa: E402
from fedmm.models import DictionaryLearning, GaussianMixture, InverseToy  # noqa: E402
from fedmm.runtime.ray import RayRuntime  # noqa: E402
from reference import FailingInverseToy, fedmm_rounds_with_drops  # noqa: E402

# Ray drops handles of its helper processes while they run (a ResourceWarning, not ours).  ``ray_session``: the
# session's two-CPU local Ray (tests/conftest.py).
pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::ResourceWarning")]


def _gmm_clients(n_clients, seed=0):
    rng = np.random.default_rng(seed)
    centers = np.array([[-3.0, 0.0], [0.0, 3.0], [3.0, 0.0]])
    datas = []
    for i in range(n_clients):
        labels = rng.choice(3, size=40, p=np.roll([0.6, 0.3, 0.1], i))
        datas.append(centers[labels] + rng.standard_normal((40, 2)))
    return datas


def test_ray_reproduces_in_process_gmm(ray_session):
    # SPIDER memory, control variates from the oracle and 8-bit compression all live in the actors.
    datas = _gmm_clients(7)
    algo = FedMM(GaussianMixture(3), clients_per_round=4, control_variate_step=0.2, step=0.5, batch_size=10,
                 oracle="spider",
                 k_in=2, control_variates="oracle", compressor=StochasticRounding(bits=8))
    ref = algo.run(datas, 5, seed=11)
    got = algo.run(datas, 5, seed=11, runtime=RayRuntime(2))
    assert got.equals(ref)
    assert all(r["dropped"] == [] for r in got.records)
    assert sum(r["bytes_up"] for r in got.records) > 0


@pytest.mark.parametrize("model", ["dictionary", "mixture", "toy"])
def test_ray_reproduces_in_process_with_the_defaults(ray_session, model):
    # Issue 27 item 1: the default start and, for dictionary learning, warm-start codes that reach the actors
    # read-only (Ray's object store) and are written by the first round.
    if model == "dictionary":
        datas = [np.random.default_rng(i).standard_normal((40, 8)) for i in range(4)]
        algo = FedMM(DictionaryLearning(3, lam=0.1, ridge=0.2), participation_prob=1.0, batch_size=10, step=0.5)
    elif model == "mixture":
        datas = _gmm_clients(4)
        algo = FedMM(GaussianMixture(3), participation_prob=1.0, batch_size=10, step=0.5)
    else:
        datas = [np.random.default_rng(i).uniform(1, 3, 30) for i in range(4)]
        algo = FedMM(InverseToy(), participation_prob=1.0, batch_size=10, step=0.5)
    ref = algo.run(datas, 3, seed=0)
    errors = []
    got = algo.run(datas, 3, seed=0, runtime=RayRuntime(1, errors=errors))
    assert errors == []
    assert [r["dropped"] for r in got.records] == [[]] * 3 and got.initial["dropped"] == []
    assert got.equals(ref)


def test_ray_start_exchange_and_rounds_follow_the_fault_policy(ray_session):
    # Issue 27 item 4 and (a), (b) on Ray: client 3 fails at θ_0 (left out of Ŝ_0, μ re-weighted) and in every
    # round it is contacted; one client per round, so some rounds drop every contacted client.
    rng = np.random.default_rng(3)
    datas = [rng.uniform(1, 3, 20 + 5 * i) for i in range(4)]
    datas[3] = np.full(35, FailingInverseToy.FAIL_MARK)
    algo = FedMM(FailingInverseToy(), clients_per_round=1, batch_size=4, step=0.5)
    with pytest.warns(RuntimeWarning, match="every contacted client was dropped"):
        ref = algo.run(datas, 8, seed=4)
    with pytest.warns(RuntimeWarning, match="every contacted client was dropped"):
        got = algo.run(datas, 8, seed=4, runtime=RayRuntime(2))
    assert got.equals(ref)
    assert got.initial["dropped"] == [3] and "simulated client failure" in got.initial["drop_reasons"][0]
    first = ref.all_dropped_rounds[0]
    assert got.all_dropped_rounds == ref.all_dropped_rounds and first > 0
    # 'raise': the start exchange raises; with start='model' the first failing round ends the run, and the
    # exception carries the rounds completed before it
    with pytest.raises(RuntimeError, match="Client 3 failed in the start exchange"):
        algo.run(datas, 8, seed=4, runtime=RayRuntime(2, on_client_error="raise"))
    model_start = FedMM(FailingInverseToy(), clients_per_round=1, batch_size=4, step=0.5, start="model")
    with pytest.warns(RuntimeWarning, match="every contacted client was dropped"):
        ref = model_start.run(datas, 8, seed=4)
    with pytest.raises(RuntimeError, match="simulated client failure") as info:
        model_start.run(datas, 8, seed=4, runtime=RayRuntime(2, on_client_error="raise"))
    completed = info.value.history.records
    assert len(completed) == ref.all_dropped_rounds[0]
    assert [r["E_s"] for r in completed] == [r["E_s"] for r in ref.records[:len(completed)]]
    assert info.value.checkpoint.next_round == len(completed)


def test_ray_reproduces_parameter_averaging(ray_session):
    rng = np.random.default_rng(2)
    datas = [rng.uniform(1, 3, 30) for _ in range(5)]
    algo = ParameterAveraging(InverseToy(), participation_prob=0.6, control_variate_step=0.3, step=0.5, batch_size=4)
    runtime = RayRuntime(2)  # one Client.step per client: payloads are real bytes
    assert algo.run(datas, 4, seed=5, runtime=runtime).equals(algo.run(datas, 4, seed=5))


def test_ray_drops_and_reports_a_failing_client(ray_session):
    # Batched evaluation fails for the whole share, then each client is retried alone (real bytes).
    rng = np.random.default_rng(3)
    datas = [rng.uniform(1, 3, 20) for _ in range(6)]
    datas[4] = np.full(20, FailingInverseToy.FAIL_MARK)
    algo = FedMM(FailingInverseToy(), participation_prob=1.0, control_variate_step=0.5, step=0.5, batch_size=5,
                 start="model")  # the mean-statistic start would need client 4's statistic
    errors = []
    h = algo.run(datas, 3, seed=7, runtime=RayRuntime(2, errors=errors))
    rounds, S, theta = fedmm_rounds_with_drops(algo, datas, 3, 7, failing={4})
    for rec, (ids, E_s, _) in zip(h.records, rounds):
        assert rec["dropped"] == [4]
        assert rec["active"] == [i for i in ids if i != 4]
        assert rec["E_s"] == E_s
    np.testing.assert_array_equal(h.state["S"], S)
    np.testing.assert_array_equal(h.state["theta"], theta)
    assert [(t, i) for t, i, _ in errors] == [(0, 4), (1, 4), (2, 4)]
    assert all("simulated client failure" in e for *_, e in errors)


# --------------------------------------------------------------------------- checkpoint and resume (issue 24 item 4)
def _interrupt_at(stop, before=None):
    def callback(t, state):
        if t == stop:
            if before is not None:
                before()
            raise KeyboardInterrupt
    return callback


def test_fedmm_on_ray_checkpoints_and_resumes_bit_for_bit(ray_session, tmp_path):
    # SPIDER memories, 8-bit compression, 3 of 5 clients a round, client 3 failing in every round (dropped
    # with its reason, from the start exchange on): interrupted at round 4 on Ray, resumed on Ray from the
    # interrupt's checkpoint and in process from the one Ray's run wrote after round 3 -- both are the
    # uninterrupted in-process run, bit for bit.
    rng = np.random.default_rng(3)
    datas = [rng.uniform(1, 3, 20 + 5 * i) for i in range(5)]
    datas[3] = np.full(35, FailingInverseToy.FAIL_MARK)
    algo = FedMM(FailingInverseToy(), clients_per_round=3, batch_size=4, step=0.5, oracle="spider", k_in=2,
                 control_variate_step=0.3, compressor=StochasticRounding(bits=8))
    kw = dict(evaluate_every=2)
    ref = algo.run(datas, 7, seed=4, **kw)
    assert any(r["dropped"] == [3] for r in ref.records) and ref.initial["dropped"] == [3]
    path, periodic = tmp_path / "run.ckpt", tmp_path / "after-round-3.ckpt"
    with pytest.raises(KeyboardInterrupt) as info:
        algo.run(datas, 7, seed=4, runtime=RayRuntime(2), checkpoint_every=2, checkpoint_path=path,
                 callback=_interrupt_at(4, before=lambda: shutil.copyfile(path, periodic)), **kw)
    exc = info.value
    # the round whose callback raised is complete: History, server and driver's clients after round 4
    assert len(exc.history) == 5 and exc.checkpoint.next_round == 5
    assert Checkpoint.load(path).next_round == 5 and Checkpoint.load(periodic).next_round == 4
    for a, b in zip(exc.history.records, ref.records):
        assert {k: v for k, v in a.items() if k not in TIMING_FIELDS} == \
            {k: v for k, v in b.items() if k not in TIMING_FIELDS}
    on_ray = algo.run(datas, 7, resume=path, runtime=RayRuntime(2), **kw)
    in_process = algo.run(datas, 7, resume=periodic, **kw)
    assert on_ray.equals(ref) and in_process.equals(ref)
    resumed_wall = [r["wall_time"] for r in on_ray.records]
    assert resumed_wall == sorted(resumed_wall)  # wall_time goes on from the checkpoint's last record
    # a resumed in-process checkpoint continues on Ray too
    with pytest.raises(KeyboardInterrupt) as info:
        algo.run(datas, 7, seed=4, callback=_interrupt_at(1), **kw)
    assert algo.run(datas, 7, resume=info.value.checkpoint, runtime=RayRuntime(1), **kw).equals(ref)


def _same_state(a, b):
    """Nested client/server states (dicts of arrays, or state values: their ``to_arrays()``) equal bit for bit."""
    a, b = (v.to_arrays() if hasattr(v, "to_arrays") else v for v in (a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and set(a) == set(b) and all(_same_state(a[k], b[k]) for k in a)
    return np.array_equal(np.asarray(a), np.asarray(b))


class _Snapshots:
    """A checkpoint writer for ``runtime.run`` (``due(t)``, a call after round ``t``): the server's and
    clients' states and the History every ``every`` rounds, keyed by the next round."""

    def __init__(self, server, clients, history, every):
        self.server, self.clients, self.history, self.every = server, clients, history, every
        self.saved = {}

    def due(self, t):
        return (t + 1) % self.every == 0

    def __call__(self, t):
        if self.due(t):
            self.saved[t + 1] = _snapshot(self.server, self.clients, self.history)


def _snapshot(server, clients, history):
    return server.export_state(), [c.export_state() for c in clients], history.copy()


def _rounds(runtime, build, n_rounds, *, resume=None, stop=None, every=0):
    """Rounds of fresh parties from ``build()`` on ``runtime``: from a snapshot (``resume``), interrupted by
    a callback after round ``stop``, with snapshots every ``every`` rounds; ``(History, server, clients,
    {next round: snapshot})``."""
    server, clients = build()
    history, start = History("run"), 0
    if resume is not None:
        server_state, client_states, done = resume
        server.import_state(server_state)
        for c, state in zip(clients, client_states):
            c.import_state(state)
        history, start = done.copy(), len(done.records)
    snapshots = _Snapshots(server, clients, history, every or 10**9)

    def callback(t):
        if t == stop:
            raise KeyboardInterrupt

    try:
        runtime.run(server, clients, n_rounds, history=history, callback=callback, start=start, checkpoint=snapshots)
    except KeyboardInterrupt as exc:
        assert stop is not None and exc.history is history and len(history) == stop + 1
        return history, server, clients, snapshots.saved
    assert stop is None
    history.state.update(server.export_state().to_arrays())
    return history, server, clients, snapshots.saved


def test_ot_family_on_ray_drops_a_faulty_client_and_resumes_bit_for_bit(ray_session):
    # FedMM-OT (3 of 4 clients a round, 8-bit) and FedAdam with client 1 failing in rounds 1 and 3: on Ray the
    # History (drop reasons included), the server and every client are the in-process ones; interrupted after
    # round 2 and resumed on Ray from the driver's parties, or in process from the snapshot Ray's run took
    # after round 1, the run is the uninterrupted one.
    from fault_injection import FaultyClient

    from fedmm.algorithms import FedAdam, FedMMOT
    from fedmm.federation import LocalRuntime
    from fedmm.models import TransportProblem

    rng = np.random.default_rng(3)
    datas = [rng.normal(loc=i, size=(20, 2)) for i in range(4)]
    target = rng.normal(size=(20, 2))
    problem = TransportProblem(2, hidden_sizes=[4], batch_size=8)
    plan = {(1, 1): "raise", (3, 1): "raise"}
    for algo in (FedMMOT(problem, clients_per_round=3, identity_steps=5, compressor=StochasticRounding(bits=8)),
                 FedAdam(problem, identity_steps=5)):
        def build(algo=algo):
            server, clients = algo.build(datas, target=target, seed=5)
            return server, [FaultyClient(c, plan) for c in clients]

        ref, _, ref_clients, _ = _rounds(LocalRuntime(compiled=False), build, 5)
        assert [r["dropped"] for r in ref.records][1] == [1], algo.name
        assert ref.records[1]["drop_reasons"] == ["RuntimeError: injected failure"], algo.name
        part, server, clients, ray_snapshots = _rounds(RayRuntime(2), build, 5, stop=2, every=2)
        got, _, got_clients, _ = _rounds(RayRuntime(1), build, 5, resume=_snapshot(server, clients, part))
        assert got.equals(ref), algo.name
        assert all(_same_state(a.export_state(), b.export_state()) for a, b in zip(got_clients, ref_clients)), algo.name
        # Ray's run took its snapshot after round 1 (the driver's clients then held their committed states)
        assert list(ray_snapshots) == [2], algo.name
        assert _rounds(LocalRuntime(compiled=False), build, 5, resume=ray_snapshots[2])[0].equals(ref), algo.name


def _nonsmooth(name):
    from fedmm.algorithms import FedAvg, FedMLS, FedProx, Scaffnew, Scaffold
    from fedmm.compression import StochasticRounding
    from fedmm.models.nonsmooth import HingeSVM

    problem = HingeSVM()
    return {"FedAvg": lambda: FedAvg(problem, local_lr=0.05), "Scaffold": lambda: Scaffold(problem, local_lr=0.05),
            "Scaffnew": lambda: Scaffnew(problem, local_lr=0.05),
            "FedProx": lambda: FedProx(problem, mu=0.5, local_lr=0.05, compressor=StochasticRounding(bits=8)),
            "FedMLS": lambda: FedMLS(problem, prox_weight=("inverse", 1.0), radius=5.0)}[name]()


@pytest.mark.parametrize("name", ["FedAvg", "Scaffold", "FedMLS", "Scaffnew", "FedProx"])
def test_nonsmooth_family_on_ray_drops_a_faulty_client_and_resumes_bit_for_bit(ray_session, name):
    # A client failing in round 2 is dropped with its reason, on Ray as in process: the same History and the
    # same parties.  Interrupted after round 1 on Ray and resumed on Ray from the snapshot (fresh parties, a
    # timeout: the actors' deadline path), the run is the uninterrupted in-process one, bit for bit.
    from fault_injection import RoundCountingClient
    from reference import nonsmooth_toy_data

    from fedmm.federation import LocalRuntime

    algo = _nonsmooth(name)
    datas = nonsmooth_toy_data("hinge", n_clients=5, m=20, d=3, seed=3)

    def build(fail=None):
        server, clients = algo.build(datas, seed=2)
        if fail is not None:
            clients[2] = RoundCountingClient(clients[2], {(fail - 1, 2): "raise"})  # its fail-th step raises
        return server, clients

    runs = []
    for runtime in (LocalRuntime(batched=False), RayRuntime(2)):
        server, clients = build(fail=3)
        history = runtime.run(server, clients, 4, history=History("run"))
        runs.append((history, server.export_state().to_arrays(), [c.export_state().to_arrays() for c in clients]))
    (history, server_state, states), (ray_history, ray_server_state, ray_states) = runs
    assert [r["dropped"] for r in history.records] == [[], [], [2], []]
    assert "injected failure" in str(history.records[2]["drop_reasons"])
    assert ray_history.equals(history)
    assert _same_state(ray_server_state, server_state)
    assert all(_same_state(a, b) for a, b in zip(ray_states, states))
    ref, _, ref_clients, _ = _rounds(LocalRuntime(), build, 4)
    stopped, ray_server, ray_clients, _ = _rounds(RayRuntime(2), build, 4, stop=1)
    snapshot = _snapshot(ray_server, ray_clients, stopped)
    got, _, got_clients, _ = _rounds(RayRuntime(1, timeout=60.0), build, 4, resume=snapshot)
    assert all(_same_state(a.export_state(), b.export_state()) for a, b in zip(got_clients, ref_clients))
    assert got.equals(ref)


def test_missing_ray_gives_an_import_error_naming_the_extra(monkeypatch):
    from fedmm.runtime import ray as ray_runtime

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install 'fedmm\[ray\]'"):
        ray_runtime._import_ray()


def test_ray_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n_actors"):
        RayRuntime(0)
    with pytest.raises(ValueError, match="timeout"):
        RayRuntime(2, timeout=0.0)
