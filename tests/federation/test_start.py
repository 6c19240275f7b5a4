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
    lambda: (FedMM(DictionaryLearning(3, 0.1, ridge=0.2), clients_per_round=2, batch_size=5), _dictionary_clients(4)),
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
        algo = FedMM(DictionaryLearning(3, 0.1, ridge=0.2), clients_per_round=2, batch_size=5, control_variate_step=0.1,
                     compressor=StochasticRounding(bits=8), backend=backend, start=start)
        return algo.run(datas, 6, seed=9, evaluate_every=3)

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
    model = DictionaryLearning(3, 0.1, ridge=0.2)
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


def _failing_toy_clients(failing=(1,)):
    from reference import FailingInverseToy

    rng = np.random.default_rng(3)
    datas = [rng.uniform(1, 3, 20 + 5 * i) for i in range(4)]  # unequal sizes: μ_i ≠ 1/n
    for i in failing:
        datas[i] = np.full(len(datas[i]), FailingInverseToy.FAIL_MARK)
    return FailingInverseToy, datas


def test_a_client_failing_in_the_start_exchange_is_dropped_from_the_mean():
    # Issue 27 item 4: the start exchange follows on_client_error='drop' (the default): client 1 is left out of
    # Ŝ_0, μ re-weighted over the clients that answered, recorded in history.initial; the run goes on.
    model_cls, datas = _failing_toy_clients()
    algo = FedMM(model_cls(), batch_size=4)
    h = algo.run(datas, 3, seed=0)
    assert h.initial["dropped"] == [1]
    assert h.initial["drop_reasons"] == ["RuntimeError: simulated client failure"]
    assert all(r["dropped"] == [1] for r in h.records)
    # Ŝ_0 = Π(Σ_{i≠1} μ_i s̄_i(θ_0) / Σ_{i≠1} μ_i): for InverseToy s̄_i is the local mean, Π the identity
    mu = _sample_weights(datas)
    answered = [0, 2, 3]
    expected = sum(mu[i] * datas[i].mean() for i in answered) / mu[answered].sum()
    server, _ = algo.build(datas, seed=0)
    np.testing.assert_allclose(server.S, [expected], rtol=1e-14)
    assert server.start_drops == {1: "RuntimeError: simulated client failure"}
    # the same run from that Ŝ_0 given as init (no start exchange) has the same rounds
    untimed = [{k: v for k, v in r.items() if k not in ("wall_time", "monitor_time")} for r in h.records]
    again = algo.run(datas, 3, seed=0, init=server.S).records
    assert [{k: v for k, v in r.items() if k not in ("wall_time", "monitor_time")} for r in again] == untimed
    # every client answered: an empty 'dropped', no reasons, the same bits as before
    clean = FedMM(model_cls(), batch_size=4).run(_failing_toy_clients(())[1], 1, seed=0)
    assert clean.initial["dropped"] == [] and "drop_reasons" not in clean.initial


def test_a_start_exchange_drop_is_the_same_on_both_backends(monkeypatch):
    # Client 2 fails only in the start exchange: left out of Ŝ_0, it takes part in every round, which run
    # compiled on backend='compiled' with the Python backend's numbers.
    from fedmm.algorithms import Client
    from fedmm.models import InverseToy

    answer = Client.start_statistic

    def start_statistic(self, message):
        if self.index == 2:
            raise OSError("link down")
        return answer(self, message)

    monkeypatch.setattr(Client, "start_statistic", start_statistic)
    _, datas = _failing_toy_clients(())
    runs = {b: FedMM(InverseToy(), clients_per_round=3, batch_size=4, backend=b).run(datas, 6, seed=1)
            for b in ("python", "compiled")}
    assert runs["compiled"].config["backend"] == "compiled"
    assert runs["python"].equals(runs["compiled"])
    h = runs["compiled"]
    assert h.initial["dropped"] == [2] and h.initial["drop_reasons"] == ["OSError: link down"]
    assert all(r["dropped"] == [] for r in h.records) and any(2 in r["active"] for r in h.records)


def test_a_failing_start_client_still_raises_under_on_client_error_raise():
    model_cls, datas = _failing_toy_clients()
    with pytest.raises(RuntimeError, match=r"Client 1 failed in the start exchange .*on_client_error='raise'"):
        FedMM(model_cls(), batch_size=4).run(datas, 2, seed=0, on_client_error="raise")
    # the policy of a runtime given to run() decides
    from fedmm.federation import LocalRuntime

    with pytest.raises(RuntimeError, match=r"Client 1 failed in the start exchange"):
        FedMM(model_cls(), batch_size=4).run(datas, 2, seed=0, runtime=LocalRuntime(on_client_error="raise"))
    # the model's own start needs no exchange: the failing client is dropped round by round
    h = FedMM(model_cls(), batch_size=4, start="model").run(datas, 2, seed=0)
    assert all(r["dropped"] == [1] for r in h.records) and "dropped" not in h.initial


def test_every_client_failing_the_start_exchange_is_a_clear_error():
    model_cls, datas = _failing_toy_clients(failing=(0, 1, 2, 3))
    with pytest.raises(RuntimeError, match=r"Every client failed in the start exchange .*start='model'"):
        FedMM(model_cls(), batch_size=4).run(datas, 2, seed=0)
    with pytest.raises(ValueError, match="on_client_error"):
        FedMM(model_cls(), batch_size=4).build(datas, on_client_error="ignore")


def test_mean_statistic_drops_invalid_and_missing_payloads_under_the_drop_policy():
    from fault_injection import nan_payload

    datas = _gmm_clients(3)
    algo = FedMM(GaussianMixture(3), batch_size=5, start="model")
    server, clients = algo.build(datas, seed=0)
    message = server.start_message()
    payloads = {c.index: c.start_statistic(message) for c in clients}
    full = server.mean_statistic(payloads)
    assert np.array_equal(server.mean_statistic(payloads, on_invalid=lambda i, r: None), full)  # same bits
    invalid = {}
    payloads[1] = nan_payload(algo.model.layout.size)
    got = server.mean_statistic(payloads, on_invalid=invalid.__setitem__)
    assert list(invalid) == [1] and "non-finite" in invalid[1]
    del payloads[1]
    assert np.array_equal(server.mean_statistic(payloads, on_invalid=invalid.__setitem__), got)  # missing: left out
    # the re-weighted mean over clients 0 and 2
    w = server.weights[[0, 2]] / server.weights[[0, 2]].sum()
    stats = [clients[i].oracle.statistic(message.theta, None) for i in (0, 2)]
    np.testing.assert_allclose(got, algo.model.project(w[0] * stats[0] + w[1] * stats[1]), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="no valid client statistic"):
        server.mean_statistic({}, on_invalid=invalid.__setitem__)


def test_mean_statistic_refuses_a_start_statistic_beyond_the_model_s_bound():
    # A finite but absurd start statistic (1e300 > DictionaryLearning.statistic_bound) is refused like a NaN.
    from fault_injection import absurd_payload

    algo = FedMM(DictionaryLearning(3, 0.1, ridge=0.2), batch_size=5, start="model")
    server, clients = algo.build(_dictionary_clients(3), seed=0)
    message = server.start_message()
    payloads = {c.index: c.start_statistic(message) for c in clients}
    reference = server.mean_statistic({i: payloads[i] for i in (0, 2)}, on_invalid=lambda i, r: None)
    payloads[1] = absurd_payload(algo.model.layout.size)
    invalid = {}
    got = server.mean_statistic(payloads, on_invalid=invalid.__setitem__)
    assert list(invalid) == [1] and "statistic_bound" in invalid[1]
    assert np.array_equal(got, reference)
    with pytest.raises(ValueError, match="beyond the range"):
        server.mean_statistic(payloads)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
@pytest.mark.parametrize("make", [
    lambda b, n: (FedMM(GaussianMixture(3), clients_per_round=2, batch_size=5, backend=b, n_threads=n),
                  _gmm_clients(5)),
    lambda b, n: (FedMM(DictionaryLearning(3, 0.1, ridge=0.2), clients_per_round=2, batch_size=5, backend=b,
                        n_threads=n), _dictionary_clients(5)),
], ids=["gmm", "dictionary"])
def test_compiled_start_exchange_gives_the_python_start_bit_for_bit(make, n_threads, monkeypatch):
    # The compiled backend computes the start statistics on worker threads (kernels.full_statistics), not
    # through Client.start_statistic: the same Ŝ_0 bits whatever the threads, and the clients' memory untouched.
    from fedmm.algorithms import Client

    ref_server, _ = make("python", 1)[0].build(make("python", 1)[1], seed=2)
    calls = []
    answer = Client.start_statistic
    algo, datas = make("compiled", n_threads)
    server, clients = algo.build(datas, seed=2)
    np.testing.assert_array_equal(server.S, ref_server.S)
    assert all(c.oracle.memory is None or not c.oracle.memory.get("codes", np.zeros(1)).any() for c in clients)

    def counted(self, message):
        calls.append(self.index)
        return answer(self, message)

    monkeypatch.setattr(Client, "start_statistic", counted)  # a redefined answer runs in Python
    server2, _ = make("compiled", n_threads)[0].build(datas, seed=2)
    np.testing.assert_array_equal(server2.S, ref_server.S)
    assert calls == list(range(len(datas)))


def test_the_rounds_server_reuses_the_start_exchange_compiled_setup():
    # FedMM.build hands the compiled inputs built for the start exchange to the rounds' server (built again at
    # the new Ŝ_0): not rebuilt, and the rounds on it give the Python backend's numbers.
    def make(backend):
        return FedMM(DictionaryLearning(3, 0.1, ridge=0.2), clients_per_round=2, batch_size=5, backend=backend)

    datas = _dictionary_clients(5)
    server, clients = make("compiled").build(datas, seed=2)
    setup = server.compiled_setup
    assert setup is not None and len(setup[0]) == len(clients)
    assert all(a is b for a, b in zip(setup[0], clients))
    assert server.compiled_unsupported(clients) is None
    assert server.compiled_setup is setup
    history = make("compiled").run(datas, 6, seed=2, evaluate_every=3)
    assert history.config["backend"] == "compiled"
    assert history.equals(make("python").run(datas, 6, seed=2, evaluate_every=3))


def test_full_statistics_rows_equal_the_model_statistic():
    from fedmm import kernels

    datas = _dictionary_clients(4)
    model = DictionaryLearning(3, 0.1, ridge=0.2, n_features=datas[0].shape[1])
    model.prepare(datas)
    theta = model.T(model.init_statistic(datas, init_generator(0)))
    compiled = model.compiled_model()
    S, status, n_bad = kernels.full_statistics(compiled, model.compiled_theta(theta, compiled),
                                               [np.ascontiguousarray(d) for d in datas], n_threads=3)
    assert status.tolist() == [0] * 4 and n_bad.tolist() == [0] * 4
    for i, d in enumerate(datas):
        np.testing.assert_array_equal(S[i], model.statistic(d, theta, None))
    with pytest.raises(ValueError, match="datas\\[1\\]"):
        kernels.full_statistics(compiled, model.compiled_theta(theta, compiled), [datas[0], datas[1][:, :2]])
    # check_finite=False (the start exchange's data, already accepted by check_data): the same rows, the shapes
    # still checked, and a NaN is not scanned for but reported by the kernel as its client's status
    theta_c = model.compiled_theta(theta, compiled)
    unchecked = [np.ascontiguousarray(d) for d in datas]
    S2, status2, _ = kernels.full_statistics(compiled, theta_c, unchecked, check_finite=False)
    np.testing.assert_array_equal(S2, S)
    with pytest.raises(ValueError, match="datas\\[1\\]"):
        kernels.full_statistics(compiled, theta_c, [datas[0], datas[1][:, :2]], check_finite=False)
    unchecked[2] = unchecked[2].copy()
    unchecked[2][1, 0] = np.nan
    with pytest.raises(ValueError, match="datas\\[2\\]"):
        kernels.full_statistics(compiled, theta_c, unchecked)
    _, status3, _ = kernels.full_statistics(compiled, theta_c, unchecked, check_finite=False)
    assert status3[2] != 0 and status3[[0, 1, 3]].tolist() == [0, 0, 0]
    with pytest.raises(TypeError, match="check_finite"):
        kernels.full_statistics(compiled, theta_c, unchecked, check_finite="no")
