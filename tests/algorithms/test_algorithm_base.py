# SPDX-License-Identifier: BSD-3-Clause
"""The one ``run`` of :class:`fedmm.algorithms.FederatedAlgorithm` in every family: interrupt then resume
equals the uninterrupted run bit for bit, the fault policy, ``StopRun``, callbacks with ``params``, and the
declared parameter constraints."""
import inspect

import numpy as np
import pytest

from fault_injection import FaultyClient, RoundCountingClient
from fedmm.algorithms import (FedAvg, FederatedAlgorithm, FedMLS, FedMM, FedProx, ParameterAveraging, Scaffnew,
                              Scaffold, Server, StopRun)
from fedmm.federation import Checkpoint, LocalRuntime
from fedmm.models import GaussianMixture, InverseToy
from fedmm.models.nonsmooth import HingeSVM, L1Regression

N_ROUNDS = 6


class FaultyRuntime:
    """The in-process runtime whose clients fail as ``plan[(t, i)]`` says (:class:`FaultyClient`)."""

    resumable = True

    def __init__(self, plan: dict, **kwargs) -> None:
        self.inner = LocalRuntime(**kwargs)
        self.on_client_error = self.inner.on_client_error
        self.plan = plan

    def run(self, server, clients, n_rounds, **kwargs):
        wrap = FaultyClient if isinstance(server, Server) else RoundCountingClient
        return self.inner.run(server, [wrap(c, self.plan) for c in clients], n_rounds, **kwargs)


def _hinge_data():
    rng = np.random.default_rng(0)
    return [(rng.normal(size=(20, 3)), rng.choice([-1.0, 1.0], 20)) for _ in range(4)]


def _l1_data():
    rng = np.random.default_rng(1)
    return [(rng.normal(size=(20, 3)), rng.normal(size=20)) for _ in range(4)]


def _gmm_data():
    rng = np.random.default_rng(2)
    return [rng.normal(size=(40, 2)) + i for i in range(4)]


def _toy_data():
    rng = np.random.default_rng(3)
    return [rng.uniform(1, 2, 60), rng.uniform(5, 9, 60), rng.uniform(2, 3, 30)]


#: name -> (algorithm factory, data factory, run keywords)
FAMILIES = {
    "FedMM": (lambda: FedMM(GaussianMixture(2, "full"), batch_size=8, clients_per_round=3, control_variate_step=0.5),
              _gmm_data, dict(evaluate_every=2)),
    "ParameterAveraging": (lambda: ParameterAveraging(InverseToy(), step=0.5, batch_size=10), _toy_data,
                           dict(evaluate_every=2)),
    "FedMLS": (lambda: FedMLS(L1Regression(), prox_weight=("inverse", 1.0), radius=10.0, batch_size=5), _l1_data,
               dict(evaluate_every=2)),
    "FedAvg": (lambda: FedAvg(HingeSVM(), local_lr=0.01, local_steps=2, batch_size=4), _hinge_data,
               dict(evaluate_every=3)),
    "Scaffold": (lambda: Scaffold(HingeSVM(), local_lr=0.01, local_steps=2), _hinge_data, dict(evaluate_every=1)),
    "FedProx": (lambda: FedProx(L1Regression(), mu=0.3, local_lr=0.01, local_steps=2, batch_size=4,
                                clients_per_round=3), _l1_data, dict(evaluate_every=2)),
    # the coin of every communication comes from the server's stream: a resume must carry its position
    "Scaffnew": (lambda: Scaffnew(HingeSVM(), local_lr=0.01, communication_prob=0.5, batch_size=3), _hinge_data,
                 dict()),
}


def _interrupt_at(k):
    def callback(t, state):
        if t == k:
            raise KeyboardInterrupt
    return callback


def _assert_same_run(resumed, full):
    assert resumed.equals(full)  # records (timing aside), initial values, final state and params
    assert len(resumed) == len(full)
    for key in full.state:
        assert np.array_equal(np.asarray(resumed.state[key]), np.asarray(full.state[key]))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_is_a_federated_algorithm_with_one_run(family):
    make, _, _ = FAMILIES[family]
    algo = make()
    assert isinstance(algo, FederatedAlgorithm)
    params = inspect.signature(type(algo).run).parameters
    for name in ("seed", "init", "runtime", "on_client_error", "progress", "callback", "evaluate_every",
                 "resume", "checkpoint_every", "checkpoint_path"):
        assert name in params, name


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_interrupt_then_resume_equals_the_uninterrupted_run(family):
    make, datas, kw = FAMILIES[family]
    full = make().run(datas(), N_ROUNDS, seed=4, **kw)
    with pytest.raises(KeyboardInterrupt) as info:
        make().run(datas(), N_ROUNDS, seed=4, callback=_interrupt_at(2), **kw)
    assert len(info.value.history) == 3
    checkpoint = info.value.checkpoint
    assert isinstance(checkpoint, Checkpoint) and checkpoint.next_round == 3
    resumed = make().run(datas(), N_ROUNDS, resume=checkpoint, **kw)
    _assert_same_run(resumed, full)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_checkpoint_every_writes_a_file_that_resumes_bit_for_bit(family, tmp_path):
    make, datas, kw = FAMILIES[family]
    full = make().run(datas(), N_ROUNDS, seed=5, **kw)
    path, kept = tmp_path / "run.ckpt", tmp_path / "after-round-1.ckpt"

    def keep_the_file(t, state):
        if t == 2:  # the file holds the checkpoint written after round 1 (every 2 rounds)
            kept.write_bytes(path.read_bytes())

    checkpointed = make().run(datas(), N_ROUNDS, seed=5, checkpoint_every=2, checkpoint_path=path,
                              callback=keep_the_file, **kw)
    _assert_same_run(checkpointed, full)
    assert Checkpoint.load(path).next_round == N_ROUNDS
    loaded = Checkpoint.load(kept)
    assert loaded.next_round == 2
    assert loaded.fingerprint["algorithm"] == full.algorithm and loaded.fingerprint["data"]
    resumed = make().run(datas(), N_ROUNDS, resume=kept, **kw)
    _assert_same_run(resumed, full)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_checkpoint_of_other_hyper_parameters_or_data_is_refused(family, tmp_path):
    make, datas, kw = FAMILIES[family]
    path = tmp_path / "run.ckpt"
    make().run(datas(), 2, seed=5, checkpoint_every=2, checkpoint_path=path, **kw)
    other = [(2 * d[0], d[1]) if isinstance(d, tuple) else 2 * d for d in datas()]  # other features, same labels
    with pytest.raises(ValueError, match=r"differs in .*\bdata\b"):
        make().run(other, N_ROUNDS, resume=path, **kw)
    with pytest.raises(ValueError, match=r"differs in .*\bseed\b"):
        make().run(datas(), N_ROUNDS, resume=path, seed=6, **kw)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_one_faulty_client(family):
    make, datas, kw = FAMILIES[family]
    # client 1 fails whenever it is contacted: every family drops it with its reason and goes on
    runtime = FaultyRuntime({(t, 1): "raise" for t in range(N_ROUNDS)}, compiled=False)
    history = make().run(datas(), N_ROUNDS, seed=4, runtime=runtime, **kw)
    assert len(history) == N_ROUNDS
    contacted = [r for r in history.records if r["dropped"]]
    assert contacted, "client 1 was never contacted"
    for record in history.records:
        assert 1 not in record["active"]
        if record["dropped"]:
            assert record["dropped"] == [1]
            assert record["drop_reasons"][0].startswith("RuntimeError: injected failure")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_stop_run_and_the_callback_state_in_every_family(family):
    make, datas, kw = FAMILIES[family]
    seen = []

    def callback(t, state):
        assert "params" in state
        with pytest.raises(TypeError):
            state["params"] = None  # read-only
        seen.append({k: np.array(v, copy=True) for k, v in state["params"].items()})
        if t == 1:
            raise StopRun

    history = make().run(datas(), N_ROUNDS, seed=4, callback=callback, **kw)
    assert len(history) == 2 and history.config["stopped_early"] is True
    assert set(seen[-1]) == set(history.params)
    for key, value in history.params.items():
        assert np.array_equal(np.asarray(value), seen[-1][key])


@pytest.mark.parametrize("cls", [FedMM, ParameterAveraging, FedMLS, FedAvg, Scaffold, Scaffnew])
def test_every_declared_constraint_names_its_argument(cls):
    params = inspect.signature(cls.__init__).parameters
    assert cls.parameter_constraints
    for name in cls.parameter_constraints:
        assert name in params, f"{cls.__name__}.parameter_constraints names {name!r}, not an argument"
        with pytest.raises((TypeError, ValueError), match=f"'{name}'"):
            cls.check_parameters(**{name: object()})


@pytest.mark.parametrize("make, arg, error", [
    (lambda: FedMM(GaussianMixture(2), n_threads=0), "n_threads", ValueError),
    (lambda: FedMM(GaussianMixture(2), backend="gpu"), "backend", ValueError),
    (lambda: FedMM(GaussianMixture(2), control_variate_step=2.0), "control_variate_step", ValueError),
    (lambda: FedAvg(HingeSVM(), local_lr=0.1, batched="yes"), "batched", TypeError),
    (lambda: FedAvg(HingeSVM(), local_lr=-1.0), "local_lr", ValueError),
    (lambda: Scaffold(HingeSVM(), local_lr=0.1, server_lr=0.0), "server_lr", ValueError),
    (lambda: Scaffnew(HingeSVM(), local_lr=0.1, max_local_steps=0), "max_local_steps", ValueError),
    (lambda: Scaffnew(HingeSVM(), local_lr=0.1, communication_prob=1.5), "communication_prob", ValueError),
    (lambda: FedMLS(HingeSVM(), prox_weight=1.0, radius=0.0), "radius", ValueError),
    (lambda: FedMLS(HingeSVM(), prox_weight=1.0, backend="c"), "backend", ValueError),
    (lambda: FedMLS(HingeSVM(), prox_weight=1.0, oracle="spider"), "oracle", ValueError),
])
def test_a_bad_value_is_refused_naming_the_argument(make, arg, error):
    with pytest.raises(error, match=f"'{arg}'|{arg}="):
        make()


def test_run_arguments_are_checked_in_one_place():
    algo, datas = FedAvg(HingeSVM(), local_lr=0.01), _hinge_data()
    with pytest.raises(ValueError, match="'checkpoint_path'"):
        algo.run(datas, 2, checkpoint_every=1)
    with pytest.raises(TypeError, match="'callback'"):
        algo.run(datas, 2, callback=3)
    with pytest.raises(ValueError, match="'on_client_error'"):
        algo.run(datas, 2, on_client_error="ignore")
    with pytest.raises(ValueError, match="'init' to be None"):
        checkpoint = None
        try:
            algo.run(datas, 2, seed=0, callback=_interrupt_at(0))
        except KeyboardInterrupt as exc:
            checkpoint = exc.checkpoint
        algo.run(datas, 2, resume=checkpoint, init=np.zeros(3))


# --------------------------------------------------------------------------- FedMM-OT and FedAdam
@pytest.fixture(scope="module")
def ot_setup(ot_toy):
    """The shared OT problem (tests/conftest.py) with three of its clients."""
    problem, datas, target = ot_toy
    return problem, datas[:3], target


def _ot_algorithm(kind, problem):
    from fedmm.algorithms import FedAdam, FedMMOT

    if kind == "FedMMOT":  # partial participation, control variates, Adam on ω and θ: all in the state
        return FedMMOT(problem, local_lr=0.05, identity_steps=5, theta_steps=2, clients_per_round=2,
                       control_variate_step=0.5)
    return FedAdam(problem, local_lr=0.05, identity_steps=5, theta_steps=1, participation_prob=0.7)


def _mean_norm(target):
    def evaluate(transport_map):
        return {"mean_norm": float(np.mean(np.linalg.norm(transport_map(target), axis=1)))}
    return evaluate


@pytest.mark.parametrize("kind", ["FedMMOT", "FedAdam"])
def test_ot_interrupt_then_resume_from_the_file_equals_the_uninterrupted_run(kind, ot_setup, tmp_path):
    problem, datas, target = ot_setup
    kw = dict(target=target, evaluate=_mean_norm(target), evaluate_every=2)
    full = _ot_algorithm(kind, problem).run(datas, 4, seed=1, **kw)
    path = tmp_path / "ot.ckpt"
    with pytest.raises(KeyboardInterrupt) as info:
        _ot_algorithm(kind, problem).run(datas, 4, seed=1, callback=_interrupt_at(1), checkpoint_path=path, **kw)
    assert info.value.checkpoint.next_round == 2 and Checkpoint.load(path).next_round == 2
    resumed = _ot_algorithm(kind, problem).run(datas, 4, resume=path, **kw)
    _assert_same_run(resumed, full)
    assert resumed.initial["mean_norm"] == full.initial["mean_norm"]
    with pytest.raises(ValueError, match=r"differs in .*\btarget\b"):
        _ot_algorithm(kind, problem).run(datas, 4, resume=path, **{**kw, "target": target + 1.0})


def test_ot_faulty_client_is_dropped_and_stop_run_and_params(ot_setup):
    problem, datas, target = ot_setup
    runtime = FaultyRuntime({(t, 1): "raise" for t in range(3)}, compiled=False)
    seen = []

    def callback(t, state):
        seen.append(sorted(state))
        if t == 2:
            raise StopRun

    history = _ot_algorithm("FedMMOT", problem).run(datas, 5, target=target, seed=2, runtime=runtime,
                                                    callback=callback)
    assert len(history) == 3 and history.config["stopped_early"] is True
    assert seen[0] == ["params", "potential", "theta"]
    dropped = [r for r in history.records if r["dropped"]]
    assert dropped and all(r["dropped"] == [1] and 1 not in r["active"] for r in dropped)
    assert all(r["drop_reasons"][0].startswith("RuntimeError: injected failure") for r in dropped)
    assert set(history.params) == {"omega", "theta"}


def test_ot_constraints_name_their_argument(ot_setup):
    from fedmm.algorithms import FedAdam, FedMMOT

    problem = ot_setup[0]
    for cls in (FedMMOT, FedAdam):
        params = inspect.signature(cls.__init__).parameters
        for name in cls.parameter_constraints:
            assert name in params
            with pytest.raises((TypeError, ValueError), match=f"'{name}'"):
                cls.check_parameters(**{name: object()})
    with pytest.raises(ValueError, match="'b1'"):
        FedMMOT(problem, b1=1.0)
    with pytest.raises(ValueError, match="'theta_lr'"):
        FedAdam(problem, theta_lr=0.0)
    with pytest.raises(ValueError, match="'omega_step'"):
        FedMMOT(problem, omega_step="rmsprop")
    assert inspect.signature(FedMMOT.run).parameters["evaluate_every"].default == 1
