# SPDX-License-Identifier: BSD-3-Clause
"""FedProx (Li et al. 2020), the algorithm recipe of docs/extending.md: its round against an independent
NumPy reference, ``mu = 0`` against FedAvg, and the engine features it gets from the skeleton (compression,
client sampling, the fault policy, checkpoints).  Ray and Flower: tests/runtime/test_runtime_ray.py and
tests/runtime/test_runtime_flower.py carry it with the rest of the non-smooth family."""
import numpy as np
import pytest
from reference import nonsmooth_toy_data

from fedmm.algorithms import FedAvg, FedProx
from fedmm.compression import StochasticRounding
from fedmm.models.nonsmooth import HingeSVM, L1Regression


def _reference_fedprox(model, datas, n_rounds, mu, eta0, local_steps):
    """FedProx with exact subgradients, client by client in plain NumPy (Li et al. 2020, Algorithm 2 with
    every device and the local solver u ← u − η_k (∂f_i(u) + μ(u − x)), η_k = η0/√k, T_k = local_steps)."""
    x = np.zeros(model.stack(datas).n_params)
    for k in range(1, n_rounds + 1):
        eta = eta0 / np.sqrt(k)
        us = []
        for data in datas:
            u = x.copy()
            for _ in range(local_steps):
                u = u - eta * (model.subgradient(data, u) + mu * (u - x))
            us.append(u)
        x = np.mean(us, axis=0)
    return x


@pytest.mark.parametrize("model, kind", [(HingeSVM(), "hinge"), (L1Regression(), "l1")])
@pytest.mark.parametrize("mu", [0.5, 3.0])
def test_fedprox_round_is_the_proximal_local_solver(model, kind, mu):
    datas = nonsmooth_toy_data(kind, n_clients=4, m=15, d=3, seed=2)
    algo = FedProx(model, mu=mu, local_lr=0.05, local_steps=3, oracle="full")
    history = algo.run(datas, 5, seed=0)
    expected = _reference_fedprox(model, datas, 5, mu, 0.05, 3)
    np.testing.assert_allclose(history.state["x"], expected, rtol=1e-12, atol=1e-12)
    # the proximal term matters: FedAvg (mu = 0) ends elsewhere
    assert not np.allclose(_reference_fedprox(model, datas, 5, 0.0, 0.05, 3), expected, rtol=0, atol=1e-6)


def test_mu_zero_is_fedavg_bit_for_bit():
    datas = nonsmooth_toy_data("hinge", n_clients=4, seed=3)
    kw = dict(local_lr=0.05, local_steps=("linear", 1), batch_size=0.3)
    fedavg = FedAvg(HingeSVM(), **kw).run(datas, 6, seed=1, evaluate_every=1)
    fedprox = FedProx(HingeSVM(), mu=0.0, **kw).run(datas, 6, seed=1, evaluate_every=1)
    # the same numbers; the broadcast carries μ (8 more bytes per contacted client)
    assert fedprox.equals(fedavg, ignore=("wall_time", "monitor_time", "bytes_down"))
    np.testing.assert_array_equal(fedprox["bytes_down"] - fedavg["bytes_down"], 8 * 4)


def test_a_large_mu_keeps_the_clients_near_the_server_point():
    # h_i is μ-strongly convex around x: with μη < 1 every local step contracts u − x, so the first round's
    # move shrinks as μ grows (|x_1 − x_0| ≤ η T max‖∂f_i‖ for any μ, and → 0 as μ → 1/η).
    datas = nonsmooth_toy_data("l1", n_clients=4, seed=4)
    moves = [np.linalg.norm(FedProx(L1Regression(), mu=mu, local_lr=0.05, local_steps=5, oracle="full")
                            .run(datas, 1, seed=0).state["x"]) for mu in (0.0, 5.0, 19.0)]
    assert moves[0] > moves[1] > moves[2] > 0


def test_fedprox_with_sampling_compression_a_faulty_client_and_resume(tmp_path):
    from test_algorithm_base import FaultyRuntime

    datas = nonsmooth_toy_data("hinge", n_clients=5, seed=5)

    def make():
        return FedProx(HingeSVM(), mu=0.2, local_lr=0.05, local_steps=2, batch_size=0.5, clients_per_round=3,
                       compressor=StochasticRounding(bits=8))

    plan = {(t, 1): "raise" for t in range(8)}
    full = make().run(datas, 8, seed=7, runtime=FaultyRuntime(plan, compiled=False), evaluate_every=2)
    assert all(len(r["active"]) + len(r["dropped"]) == 3 for r in full.records)
    assert any(r["dropped"] == [1] for r in full.records)
    assert all(1 not in r["active"] for r in full.records)
    assert full.config["mu"] == 0.2 and full.config["clients_per_round"] == 3

    def stop(t, state):
        if t == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        make().run(datas, 8, seed=7, runtime=FaultyRuntime(plan, compiled=False), evaluate_every=2,
                   callback=stop, checkpoint_path=tmp_path / "fedprox.ckpt")
    assert len(info.value.history) == 4
    resumed = make().run(datas, 8, runtime=FaultyRuntime(plan, compiled=False), evaluate_every=2,
                         resume=tmp_path / "fedprox.ckpt")
    assert resumed.equals(full, ignore=("wall_time", "monitor_time"))


@pytest.mark.parametrize("bad, match", [(dict(mu=-1.0), "mu"), (dict(mu=float("nan")), "mu"),
                                        (dict(mu="0.1"), "mu"), (dict(local_lr=0.0), "local_lr"),
                                        (dict(clients_per_round=0), "clients_per_round")])
def test_bad_arguments_name_themselves(bad, match):
    kw = {"local_lr": 0.05, **bad}
    with pytest.raises((TypeError, ValueError), match=match):
        FedProx(HingeSVM(), **kw)
