# SPDX-License-Identifier: BSD-3-Clause
"""Runs that go wrong say so (issue 27): rounds in which every client was dropped are flagged and warned
about, an exception that ends a run carries the completed rounds, and memory that comes back read-only
(Ray's object store, pickle buffers) is copied before a model writes into it."""
import pickle
import warnings

import numpy as np
import pytest

from fedmm.algorithms import SASSMM, FedAvg, FedMM
from fedmm.federation import LocalRuntime
from fedmm.history import History
from fedmm.models import DictionaryLearning, InverseToy
from fedmm.models.nonsmooth import HingeSVM
from reference import FailingInverseToy, nonsmooth_toy_data


def _toy_clients(n=4, seed=3):
    rng = np.random.default_rng(seed)
    return [rng.uniform(1, 3, 20 + 5 * i) for i in range(n)]


def _untimed(records):
    return [{k: v for k, v in r.items() if k not in ("wall_time", "monitor_time")} for r in records]


# --------------------------------------------------------------------------- (a) every client dropped
def test_rounds_in_which_every_client_is_dropped_are_flagged_and_warned_about(tmp_path):
    # Clients 0 and 2 fail every round; with clients_per_round=2 some rounds contact only failing clients.
    datas = _toy_clients()
    for i in (0, 2):
        datas[i] = np.full(len(datas[i]), FailingInverseToy.FAIL_MARK)
    algo = FedMM(FailingInverseToy(), clients_per_round=2, batch_size=4, start="model")
    with pytest.warns(RuntimeWarning, match=r"every contacted client was dropped in round\(s\) ") as caught:
        h = algo.run(datas, 12, seed=0)
    expected = [r["t"] for r in h.records if r["active"] == [] and sorted(r["dropped"]) == [0, 2]]
    assert expected, "the seed must give a round that contacts only the failing clients"
    assert h.all_dropped_rounds == expected
    assert all(r.get("all_dropped") is (r["t"] in expected) or ("all_dropped" not in r and r["t"] not in expected)
               for r in h.records)
    assert len(caught) == 1 and ", ".join(map(str, expected)) in str(caught[0].message)
    path = tmp_path / "h.json"
    h.save(path)
    loaded = History.load(path)
    assert loaded.all_dropped_rounds == expected and loaded.equals(h)
    # a file written before the field existed loads with no such rounds
    old = h.to_dict()
    for record in old["records"]:
        record.pop("all_dropped", None)
    assert History.from_dict(old).all_dropped_rounds == []


def test_a_run_with_no_fully_dropped_round_does_not_warn():
    datas = _toy_clients()
    datas[1] = np.full(len(datas[1]), FailingInverseToy.FAIL_MARK)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h = FedMM(FailingInverseToy(), participation_prob=1.0, batch_size=4).run(datas, 3, seed=0)
    assert h.all_dropped_rounds == [] and all(r["dropped"] == [1] for r in h.records)


def test_every_client_failing_every_round_is_no_success():
    datas = [np.full(20, FailingInverseToy.FAIL_MARK) for _ in range(3)]
    with pytest.warns(RuntimeWarning, match=r"round\(s\) 0, 1, 2;"):
        h = FedMM(FailingInverseToy(), participation_prob=1.0, batch_size=4, start="model").run(datas, 3, seed=0)
    assert h.all_dropped_rounds == [0, 1, 2]


# --------------------------------------------------------------------------- (b) exc.history on any error
class _Stop(Exception):
    pass


def _stop_at(t_stop):
    def callback(t, state):
        if t == t_stop:
            raise _Stop(f"stop at round {t}")
    return callback


@pytest.mark.parametrize("backend", ["python", "compiled"])
def test_an_exception_that_ends_a_fedmm_run_carries_its_history_and_a_checkpoint(backend, tmp_path):
    datas = _toy_clients()
    algo = FedMM(InverseToy(), clients_per_round=3, control_variate_step=0.5, batch_size=4, backend=backend)
    ref = algo.run(datas, 6, seed=2)
    path = tmp_path / "run.ckpt"
    with pytest.raises(_Stop) as info:
        algo.run(datas, 6, seed=2, callback=_stop_at(3), checkpoint_path=path)
    exc = info.value
    completed = len(exc.history.records)
    assert completed == 4  # the callback runs after its round is committed, on either backend
    assert _untimed(exc.history.records) == _untimed(ref.records[:completed])
    assert exc.checkpoint.next_round == completed and path.exists()
    assert algo.run(datas, 6, resume=exc.checkpoint).equals(ref)
    assert algo.run(datas, 6, resume=path).equals(ref)


def test_a_client_error_under_raise_carries_the_completed_rounds():
    datas = _toy_clients()
    datas[3] = np.full(len(datas[3]), FailingInverseToy.FAIL_MARK)
    algo = FedMM(FailingInverseToy(), clients_per_round=1, batch_size=4, start="model")
    with pytest.warns(RuntimeWarning, match="every contacted client was dropped"):
        ref = algo.run(datas, 8, seed=4)  # drops client 3 where it is contacted, alone
    first = next(r["t"] for r in ref.records if r["dropped"])
    assert first > 0
    with pytest.raises(RuntimeError, match="simulated client failure") as info:
        algo.run(datas, 8, seed=4, on_client_error="raise")
    assert _untimed(info.value.history.records) == _untimed(ref.records[:first])
    assert info.value.checkpoint.next_round == first


def test_an_exception_that_ends_a_nonsmooth_or_sassmm_run_carries_its_history():
    datas = nonsmooth_toy_data("hinge", n_clients=4, m=20, d=3, seed=3)
    algo = FedAvg(HingeSVM(), local_lr=0.05)
    ref = algo.run(datas, 5, seed=1)
    with pytest.raises(_Stop) as info:
        algo.run(datas, 5, seed=1, callback=_stop_at(2))
    assert 2 <= len(info.value.history.records) <= 3
    assert _untimed(info.value.history.records) == _untimed(ref.records[:len(info.value.history.records)])
    sassmm = SASSMM(InverseToy(), step=0.5, batch_size=5)
    with pytest.raises(_Stop) as info:
        sassmm.run(_toy_clients()[0], 5, seed=0, callback=_stop_at(1))
    assert [r["t"] for r in info.value.history.records] == [0, 1]


def test_the_runtime_itself_attaches_the_history():
    datas = _toy_clients()
    algo = FedMM(InverseToy(), participation_prob=1.0, batch_size=4)
    server, clients = algo.build(datas, seed=0)
    history = History("FedMM")

    def callback(t):
        if t == 1:
            raise _Stop

    with pytest.raises(_Stop) as info:
        LocalRuntime(compiled=False).run(server, clients, 4, history=history, callback=callback)
    # the callback runs once its round is committed: rounds 0 and 1 are in the History
    assert info.value.history is history and len(history.records) == 2


# --------------------------------------------------------------------------- item 1: read-only memory
@pytest.mark.parametrize("backend", ["python", "compiled"])
def test_read_only_warm_start_codes_are_copied_before_they_are_written(backend):
    # What a Ray worker receives: the warm-start codes of a client as a read-only view.
    datas = [np.random.default_rng(i).standard_normal((40, 8)) for i in range(3)]
    algo = FedMM(DictionaryLearning(3, lam=0.1, ridge=0.2), participation_prob=1.0, batch_size=10, step=0.5,
                 backend=backend)
    ref = algo.run(datas, 3, seed=0)
    server, clients = algo.build(datas, seed=0)
    for c, data in zip(clients, datas):
        # the start exchange leaves the codes cold (absent = zeros); give them as a read-only view of zeros
        assert "codes" not in c.oracle.memory
        codes = np.zeros((data.shape[0], 3))
        codes.flags.writeable = False
        c.oracle.memory["codes"] = codes
    runtime = LocalRuntime(compiled=backend == "compiled")
    h = History("FedMM", dict(ref.config))
    h.initial.update(ref.initial)
    runtime.run(server, clients, 3, history=h)
    assert h.all_dropped_rounds == [] and all(r["dropped"] == [] for r in h.records)
    assert _untimed(h.records) == _untimed(ref.records)
    # a Python round then writes the codes the clients hold (the compiled rounds hand them back read-only,
    # as state values): each is copied first, and the run goes on as the uninterrupted one
    LocalRuntime(compiled=False).run(server, clients, 4, history=h, start=3)
    assert _untimed(h.records) == _untimed(algo.run(datas, 4, seed=0).records)
    assert all(c.oracle.memory["codes"].flags.writeable for c in clients)


def test_an_unpickled_client_owns_writable_memory():
    datas = [np.random.default_rng(i).standard_normal((40, 8)) for i in range(2)]
    algo = FedMM(DictionaryLearning(3, lam=0.1, ridge=0.2), participation_prob=1.0, batch_size=10, step=0.5)
    _, clients = algo.build(datas, seed=0)
    clients[0].oracle.memory["codes"] = np.random.default_rng(0).standard_normal((40, 3))  # as after a round
    buffers = []
    blob = pickle.dumps(clients[0], protocol=5, buffer_callback=buffers.append)
    assert buffers, "NumPy arrays travel out of band, as in Ray's object store"
    copy = pickle.loads(blob, buffers=[bytes(b.raw()) for b in buffers])  # read-only buffers
    codes = copy.oracle.memory["codes"]
    assert codes.flags.writeable and np.array_equal(codes, clients[0].oracle.memory["codes"])
