# SPDX-License-Identifier: BSD-3-Clause
"""The mean-statistic start: ``Ŝ_0 = Π(Σ_i μ_i s̄_i(θ_0))`` is one exact MM step from ``θ_0``, in every runtime."""
import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

from fedmm.algorithms import SASSMM, FedMM, ParameterAveraging
from fedmm.algorithms._random import init_generator
from fedmm.compression import StochasticRounding
from fedmm.data import synthetic_dictionary
from fedmm.models import DictionaryLearning, GaussianMixture


def _gmm_clients(n_clients, seed=0):
    """Heterogeneous 2-D clients of a three-component mixture (unequal sizes, so μ_i ≠ 1/n)."""
    rng = np.random.default_rng(seed)
    centers = np.array([[-3.0, 0.0], [0.0, 3.0], [3.0, 0.0]])
    sizes = [30 + 7 * i for i in range(n_clients)]
    return [centers[rng.choice(3, size=n, p=np.roll([0.6, 0.3, 0.1], i))] + rng.standard_normal((n, 2))
            for i, n in enumerate(sizes)]


def _dictionary_clients(n_clients):
    Z, _, _ = synthetic_dictionary(40 * n_clients, 6, 3, seed=1)
    return [Z[40 * i: 40 * i + 25 + 5 * i] for i in range(n_clients)]


def _sample_weights(datas):
    sizes = np.array([len(d) for d in datas], dtype=np.float64)
    return sizes / sizes.sum()


def _em_step_tied(Y, theta):
    """One EM step of a tied-covariance mixture on the pooled data ``Y``, written out with SciPy."""
    log_r = np.stack([np.log(w) + multivariate_normal(m, theta.covariance).logpdf(Y)
                      for w, m in zip(theta.weights, theta.means)], axis=1)
    r = np.exp(log_r - logsumexp(log_r, axis=1, keepdims=True))
    counts = r.sum(axis=0)
    means = (r.T @ Y) / counts[:, None]
    cov = sum((r[:, k, None] * (Y - means[k])).T @ (Y - means[k]) for k in range(len(counts))) / len(Y)
    return counts / len(Y), means, cov


def _model_start(algo, datas, seed):
    """``θ_0 = T(model.init_statistic)`` and the independent ``Π(Σ_i μ_i s̄_i(θ_0))`` (model.statistic per client)."""
    model = algo.model
    model.prepare(datas)
    theta0 = model.T(model.init_statistic(datas, init_generator(seed)))
    mean = sum(w * model.statistic(d, theta0, None) for w, d in zip(_sample_weights(datas), datas))
    return theta0, model.project(mean)


@pytest.mark.parametrize("make", [
    lambda: (FedMM(GaussianMixture(3), clients_per_round=2, batch_size=5), _gmm_clients(4)),
    lambda: (FedMM(DictionaryLearning(3, 0.1, eta=0.2), clients_per_round=2, batch_size=5), _dictionary_clients(4)),
], ids=["gmm", "dictionary"])
def test_mean_statistic_start_is_one_exact_mm_step_from_the_model_start(make):
    algo, datas = make()
    assert algo.start == "mean_statistic"  # the default
    server, _ = algo.build(datas, seed=3)
    _, expected = _model_start(algo, datas, 3)
    # Same mathematics, different summation (the server sums the decoded payloads in client order).
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(server.S, expected, rtol=0, atol=64 * np.finfo(float).eps * scale * len(datas))
    np.testing.assert_allclose(algo.model.theta_vector(server.theta),
                               algo.model.theta_vector(algo.model.T(expected)), rtol=1e-9, atol=1e-12)
    # ... and not the model's own start
    model_server, _ = FedMM(algo.model, start="model").build(datas, seed=3)
    assert not np.allclose(model_server.S, server.S)


def test_gmm_mean_statistic_start_equals_an_em_step_written_out():
    datas = _gmm_clients(5, seed=2)
    algo = FedMM(GaussianMixture(3), participation_prob=0.5, batch_size=4)
    server, _ = algo.build(datas, seed=4)
    theta0, _ = _model_start(algo, datas, 4)
    weights, means, cov = _em_step_tied(np.concatenate(datas), theta0)
    # A handful of float64 roundings per entry on O(10) values.
    np.testing.assert_allclose(server.theta.weights, weights, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(server.theta.means, means, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(server.theta.covariance, cov, rtol=1e-10, atol=1e-12)


def test_start_is_reproducible_and_both_backends_agree():
    datas = _dictionary_clients(4)

    def run(backend, start="mean_statistic"):
        algo = FedMM(DictionaryLearning(3, 0.1, eta=0.2), clients_per_round=2, batch_size=5, alpha=0.1,
                     compressor=StochasticRounding(bits=8), backend=backend, start=start)
        return algo.run(datas, 6, seed=9, objective_every=3)

    ref = run("python")
    assert ref.config["start"] == "mean_statistic"
    assert run("python").equals(ref)
    assert run("compiled").equals(ref)
    other = run("python", start="model")
    assert other.config["start"] == "model"
    assert other.initial["objective"] > ref.initial["objective"]


def test_parameter_averaging_starts_at_fedmm_start():
    datas = _gmm_clients(4)
    fed, _ = FedMM(GaussianMixture(3), batch_size=5).build(datas, seed=1)
    base, _ = ParameterAveraging(GaussianMixture(3), batch_size=5).build(datas, seed=1)
    np.testing.assert_array_equal(base.theta_vector, fed.theta_vector)


def test_explicit_init_overrides_the_start():
    datas = _gmm_clients(3)
    algo = FedMM(GaussianMixture(3), batch_size=5)
    S0 = GaussianMixture(3).init_statistic(datas, init_generator(0))
    server, _ = algo.build(datas, seed=0, init=S0)
    np.testing.assert_array_equal(server.S, S0)


def test_sassmm_mean_statistic_start_is_one_full_mm_iteration():
    Z, _, _ = synthetic_dictionary(120, 6, 3, seed=3)
    model = DictionaryLearning(3, 0.1, eta=0.2)
    mean = SASSMM(model, step=1.0).run(Z, 2, seed=5)
    plain = SASSMM(model, step=1.0, start="model").run(Z, 3, seed=5)
    # γ = 1 and full batches: the mean-statistic start is the model start's first iteration
    # (up to the rounding of Ŝ_0 + (s̄ − Ŝ_0) against s̄, carried through two MM steps).
    np.testing.assert_allclose(mean.state["S"], plain.state["S"], rtol=1e-9, atol=1e-12)
    assert mean.config["start"] == "mean_statistic" and plain.config["start"] == "model"


def test_start_is_checked_and_part_of_the_checkpoint_fingerprint(tmp_path):
    with pytest.raises(ValueError, match="start"):
        FedMM(GaussianMixture(3), start="zeros")
    with pytest.raises(ValueError, match="start"):
        SASSMM(GaussianMixture(3), start="zeros")
    datas = _gmm_clients(3)
    path = tmp_path / "run.ckpt"
    FedMM(GaussianMixture(3), batch_size=5).run(datas, 2, seed=0, checkpoint_every=2, checkpoint_path=path)
    with pytest.raises(ValueError, match=r"differs in .*\bconfig\b"):
        FedMM(GaussianMixture(3), batch_size=5, start="model").run(datas, 4, resume=path)


def test_mean_statistic_refuses_a_missing_client():
    datas = _gmm_clients(3)
    algo = FedMM(GaussianMixture(3), batch_size=5, start="model")
    server, clients = algo.build(datas, seed=0)
    message = server.start_message()
    payloads = {c.index: c.start_statistic(message) for c in clients[:2]}
    with pytest.raises(ValueError, match=r"missing clients \[2\]"):
        server.mean_statistic(payloads)


def test_a_client_failing_in_the_start_exchange_is_named():
    from reference import FailingInverseToy

    rng = np.random.default_rng(3)
    datas = [rng.uniform(1, 3, 20) for _ in range(3)]
    datas[1] = np.full(20, FailingInverseToy.FAIL_MARK)
    with pytest.raises(RuntimeError, match=r"Client 1 failed in the start exchange .*start='model'"):
        FedMM(FailingInverseToy(), batch_size=4).run(datas, 2, seed=0)
    # the model's own start needs no exchange: the failing client is dropped round by round
    h = FedMM(FailingInverseToy(), batch_size=4, start="model").run(datas, 2, seed=0)
    assert all(r["dropped"] == [1] for r in h.records)
