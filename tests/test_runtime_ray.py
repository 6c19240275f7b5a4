# SPDX-License-Identifier: BSD-3-Clause
"""The sharded Ray runtime reproduces the in-process History and drops failing clients."""
import sys

import numpy as np
import pytest

pytest.importorskip("ray", reason="the 'ray' extra is not installed: pip install 'fedmm[ray]'")

from fedmm.algorithms import FedMM, ParameterAveraging  # noqa: E402
from fedmm.compression import StochasticRounding  # noqa: E402
from fedmm.models import DictionaryLearning, GaussianMixture, InverseToy  # noqa: E402
from fedmm.runtime.ray import RayRuntime, local_ray  # noqa: E402
from reference import FailingInverseToy, fedmm_rounds_with_drops  # noqa: E402

# Ray drops handles of its helper processes while they run (a ResourceWarning, not ours).
pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::ResourceWarning")]


@pytest.fixture(scope="module")
def ray_session():
    with local_ray(num_cpus=2) as ray:
        yield ray


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


def test_ray_carries_the_nonsmooth_family(ray_session):
    # FedAvg, Scaffold, Scaffnew and FedMLS run through the same Server/Client split as FedMM: the
    # actors hold the clients' control variates and minibatch streams; the History is the in-process one.
    from reference import nonsmooth_toy_data

    from fedmm.algorithms import FedAvg, FedMLS, Scaffnew, Scaffold
    from fedmm.models.nonsmooth import HingeSVM

    problem = HingeSVM()
    datas = nonsmooth_toy_data("hinge", n_clients=5, m=20, d=3, seed=3)
    for algo in [FedAvg(problem, local_lr=0.05), Scaffold(problem, local_lr=0.05), Scaffnew(problem, local_lr=0.05),
                 FedMLS(problem, prox_weight=("inverse", 1.0), radius=5.0)]:
        ref = algo.run(datas, 5, seed=2, evaluate_every=1)
        got = algo.run(datas, 5, seed=2, evaluate_every=1, runtime=RayRuntime(2))
        assert got.equals(ref), algo.name


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
