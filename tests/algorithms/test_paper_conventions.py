# SPDX-License-Identifier: BSD-3-Clause
"""The papers' conventions as options: FedEM's control-variate step (α without 1/p) and FedMissEM's
entry-wise minibatches."""
import numpy as np
import pytest

from fedmm.algorithms import FedMM
from fedmm.compression import BlockQuantizer
from fedmm.federation import Checkpoint
from fedmm.models import GaussianMixture, MissingValues


def _gmm_clients(n_clients, seed=0):
    rng = np.random.default_rng(seed)
    centers = np.array([[-3.0, 0.0], [0.0, 3.0], [3.0, 0.0]])
    sizes = [40 + 5 * i for i in range(n_clients)]
    return [centers[rng.choice(3, size=n, p=np.roll([0.6, 0.3, 0.1], i))] + rng.standard_normal((n, 2))
            for i, n in enumerate(sizes)]


def _run(alpha, convention, backend, *, n_rounds=12, **participation):
    algo = FedMM(GaussianMixture(3, n_features=2), control_variate_step=alpha, control_variate_convention=convention,
                 step=0.5,
                 batch_size=8, compressor=BlockQuantizer(block_size=4), backend=backend, **participation)
    return algo.run(_gmm_clients(6), n_rounds, seed=3)


@pytest.mark.parametrize("backend", ["python", "compiled"])
@pytest.mark.parametrize("participation", [dict(clients_per_round=3), dict(participation_prob=0.4)],
                         ids=["count", "bernoulli"])
def test_fedem_control_variate_convention_is_fedmm_with_alpha_times_p(backend, participation):
    alpha = 0.3
    p = 3 / 6 if "clients_per_round" in participation else 0.4
    fedem = _run(alpha, "fedem", backend, **participation)
    fedmm = _run(alpha * p, "fedmm", backend, **participation)
    assert fedem.config["backend"] == backend and fedem.config["control_variate_convention"] == "fedem"
    assert fedem.config["control_variate_step"] == alpha
    assert fedem.equals(fedmm)
    # and it is a different run from FedMM's convention with the same α (the control variates matter here)
    assert not np.array_equal(fedem.state["S"], _run(alpha, "fedmm", backend, **participation).state["S"])


def test_control_variate_conventions_coincide_with_full_participation():
    assert _run(0.3, "fedem", "python").equals(_run(0.3, "fedmm", "python"))


def test_control_variate_convention_is_checked_and_in_the_checkpoint_fingerprint(tmp_path):
    with pytest.raises(ValueError, match="control_variate_convention"):
        FedMM(GaussianMixture(3), control_variate_convention="FedEM paper")
    datas = _gmm_clients(4)
    path = tmp_path / "run.ckpt"
    FedMM(GaussianMixture(3, n_features=2), control_variate_step=0.1, clients_per_round=2, batch_size=8,
          control_variate_convention="fedem").run(datas, 3, seed=0, checkpoint_path=str(path), checkpoint_every=1)
    ckpt = Checkpoint.load(str(path))
    assert ckpt.fingerprint["config"]["control_variate_convention"] == "fedem"
    other = FedMM(GaussianMixture(3, n_features=2), control_variate_step=0.1, clients_per_round=2, batch_size=8)
    with pytest.raises(ValueError, match="control_variate_convention"):
        other.run(datas, 5, seed=0, resume=str(path))


def test_cli_fedem_experiment_control_variate_convention(tmp_path, capsys):
    import fedmm
    from fedmm.cli import main

    assert main(["experiment", "fedmissem", "--out", str(tmp_path), "--rounds", "2", "--monitor-every", "2",
                 "--control-variate-convention", "fedem"]) == 0
    loaded = fedmm.load(tmp_path / "fedmissem.json")
    assert loaded.metadata["results"][0]["config"]["control_variate_convention"] == "fedem"
    assert all(h.config["control_variate_convention"] == "fedem" for h in loaded.values())
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["experiment", "fedem-fig1", "--control-variate-convention", "paper"])
    assert exc.value.code == 2
    assert "--control-variate-convention" in capsys.readouterr().err


def _missing_client(seed=0, m=6, J=4, L=5, family="gaussian"):
    from fedmm.data import synthetic_lowrank

    return synthetic_lowrank(1, m, J, L, 2, family=family, seed=seed).datas[0]


def _rows_statistic_reference(model, data, theta, idx):
    """The row-wise minibatch statistic as the model computed it before the entry-wise option (formula copy)."""
    values, mask = data[0][idx], data[1][idx]
    b = values.shape[0]
    observed_sum = np.where(mask, values, 0.0).sum(axis=0)
    return (observed_sum / b + (1.0 - mask.sum(axis=0) / b) * model.mean(model._as_matrix(theta))).ravel()


@pytest.mark.parametrize("family", ["gaussian", "bernoulli"])
def test_entrywise_minibatch_statistic_is_unbiased_for_the_full_statistic(family):
    from fedmm.algorithms._oracle import LocalOracle

    lam = 0.0 if family == "gaussian" else 0.1
    model = MissingValues(2, family, lam=lam, minibatch="entries")
    data = model.check_data(_missing_client(family=family))
    model.prepare([data])
    m, J, L = data[0].shape
    assert model.n_samples(data) == m * J * L
    theta = model.T(model.init_statistic([data], np.random.default_rng(1)))
    full = model.statistic(data, theta)
    np.testing.assert_array_equal(full, MissingValues(2, family, lam=lam).statistic(data, theta))  # idx=None alike
    oracle = LocalOracle(model, data, "minibatch", 7, None)
    rng = np.random.default_rng(5)
    draws = np.array([model.statistic(data, theta, oracle.plan(t, rng)[0]) for t in range(4000)])
    mean, se = draws.mean(axis=0), draws.std(axis=0, ddof=1) / np.sqrt(len(draws))
    assert se.max() > 0  # a random estimate
    np.testing.assert_array_less(np.abs(mean - full), 5.0 * se + 1e-12)
    # the entries that are missing for every observer carry no noise: their estimate is always ψ'(θ)
    never = ~data[1].any(axis=0).ravel()
    if never.any():
        np.testing.assert_array_equal(draws[:, never], np.broadcast_to(full[never], draws[:, never].shape))


def test_rowwise_minibatch_is_the_default_and_unchanged():
    model = MissingValues(2)
    assert model.minibatch == "rows"
    data = model.check_data(_missing_client(seed=2))
    model.prepare([data])
    assert model.n_samples(data) == data[0].shape[0]
    theta = model.T(model.init_statistic([data], np.random.default_rng(0)))
    for idx in ([0, 3], [5, 1, 2]):
        np.testing.assert_array_equal(model.statistic(data, theta, np.array(idx)),
                                      _rows_statistic_reference(model, data, theta, np.array(idx)))
    with pytest.raises(ValueError, match="minibatch"):
        MissingValues(2, minibatch="cells")


def test_fedmissem_with_entrywise_minibatches_runs_and_is_deterministic():
    from fedmm.data import synthetic_lowrank

    datas = synthetic_lowrank(3, 8, 6, 5, 2, seed=4).datas
    runs = [FedMM(MissingValues(2, minibatch="entries"), batch_size=40, step=0.5, control_variate_step=0.1,
                  clients_per_round=2).run(datas, 5, seed=1) for _ in range(2)]
    assert runs[0].equals(runs[1]) and runs[0].config["backend"] == "python"
    assert np.isfinite(runs[0].state["S"]).all()


def test_cli_fedmissem_entrywise_minibatches(tmp_path, capsys):
    import fedmm
    from fedmm.cli import main

    assert main(["experiment", "fedmissem", "--out", str(tmp_path), "--epochs", "3", "--monitor-every", "2",
                 "--minibatch", "entries"]) == 0
    result = fedmm.load(tmp_path / "fedmissem.json").metadata["results"][0]
    assert result["config"]["minibatch"] == "entries"
    assert result["fedmissem"]["rmse_hidden"] < result["mean_imputation"]["rmse_hidden"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["experiment", "fedmissem", "--minibatch", "cells"])
    assert exc.value.code == 2 and "--minibatch" in capsys.readouterr().err
