# SPDX-License-Identifier: BSD-3-Clause
"""FedEM / VR-FedEM / FedMissEM on the FedMM engine (issue 6 acceptance)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

import fedmm
from fedmm.algorithms import FedMM
from fedmm.compression import BlockQuantizer, Identity
from fedmm.data import synthetic_lowrank
from fedmm.experiments.fedem import Fig1Config, MissConfig, run_fedmissem, run_fig1, write_result
from fedmm.models import GaussianMixture, MissingValues, PoissonLatent
from reference import gmm_tied_em_step, gmm_tied_loglik, poisson_latent_objective, rank_r_svd


def _mixture(rng, n=300, p=3, G=3):
    centers = rng.normal(0.0, 3.0, (G, p))
    return centers[rng.integers(0, G, n)] + rng.normal(size=(n, p))


def _exact_em(**kw):
    """One client, full participation, Identity, α = 0, full batch, γ = 1."""
    return FedMM(kw.pop("model"), participation_prob=1.0, compressor=Identity(), control_variate_step=0.0, step=1.0,
                 batch_size=None, **kw)


@pytest.mark.parametrize("seed", [0, 1])
def test_one_fedmm_round_is_one_textbook_em_iteration(seed):
    rng = np.random.default_rng(seed)
    Y = _mixture(rng)
    model = GaussianMixture(3, reg_covar=0.0)
    S0 = model.init_statistic([Y], rng)
    theta0 = model.T(S0)
    thetas = []
    history = _exact_em(model=model).run([Y], 12, seed=seed, init=S0, evaluate_every=1,
                                         callback=lambda t, state: thetas.append(state["theta"]))
    ref = (theta0.weights, theta0.means, theta0.covariance)
    lls = [gmm_tied_loglik(Y, *ref)]
    for theta in thetas:
        ref = gmm_tied_em_step(Y, *ref)
        np.testing.assert_allclose(theta.weights, ref[0], rtol=0, atol=1e-10)
        np.testing.assert_allclose(theta.means, ref[1], rtol=0, atol=1e-10)
        np.testing.assert_allclose(theta.covariance, ref[2], rtol=0, atol=1e-10)
        lls.append(gmm_tied_loglik(Y, *ref))
    assert np.all(np.diff(lls) >= -1e-12)  # EM monotonicity, on the reference log-likelihood
    objective = history.column("objective")  # mean negative log-likelihood at θ_{t+1}
    np.testing.assert_allclose(-objective, lls[1:], atol=1e-10)
    assert np.all(np.diff(objective) <= 1e-12)


SUPPORT = np.array([-1.0, -0.3, 0.4, 1.0])
PROBS = np.array([0.1, 0.4, 0.3, 0.2])


def _poisson_clients(rng, sizes=(150, 250, 200, 400), thetas=(0.2, 0.6, 1.0, 1.4)):
    """Heterogeneous clients: each has its own log-intensity."""
    return [rng.poisson(np.exp(th + rng.choice(SUPPORT, size=m, p=PROBS))).astype(np.float64)
            for m, th in zip(sizes, thetas)]


def _deterministic_em_root(model, datas, S0, n_iter=400):
    mu = np.array([len(d) for d in datas], dtype=np.float64)
    mu /= mu.sum()
    s = S0
    for _ in range(n_iter):
        s = model.project(mu @ np.stack([model.statistic(d, model.T(s)) for d in datas]))
    return s


@pytest.mark.parametrize("parameterization", ["joint", "explicit_mean"])
def test_fedmm_poisson_reaches_the_em_root(parameterization):
    rng = np.random.default_rng(20)
    datas = _poisson_clients(rng)
    model = PoissonLatent(SUPPORT, PROBS, lam=0.5, parameterization=parameterization)
    S0 = model.init_statistic(datas, rng)
    s_star = _deterministic_em_root(model, datas, S0)
    Z = np.concatenate(datas)
    map_theta = minimize_scalar(lambda t: poisson_latent_objective(Z, t, SUPPORT, PROBS, 0.5),
                                bracket=(-2, 2), tol=1e-12).x
    assert model.T(s_star) == pytest.approx(map_theta, abs=1e-6)
    # full local batches, partial participation and control variates: the fixed point is exact
    algo = FedMM(model, participation_prob=0.5, compressor=Identity(), control_variate_step=0.5, step=0.5,
                 batch_size=None,
                 control_variates="oracle")
    h = algo.run(datas, 150, seed=1, init=S0)
    np.testing.assert_allclose(h.state["S"], s_star, atol=1e-9)
    # minibatch oracles with γ_t = 1/t: the error is a sampling error.  Its CLT scale after n
    # evaluations is sd = √(Var Z / s₁² + Var E[e^h|Z] / (λ − s₂)²) / √n (delta method on T);
    # the SA recursion inflates it by about 1/(1 − ρ) (ρ: EM contraction), hence 10 sd.
    n_rounds, b = 300, 20
    algo = FedMM(model, participation_prob=1.0, compressor=Identity(), control_variate_step=0.0, step="1/t",
                 batch_size=b)
    h = algo.run(datas, n_rounds, seed=2, init=S0)
    theta_star = model.T(s_star)
    post = model.posterior(Z, theta_star) @ np.exp(SUPPORT)
    var = np.var(post) / (0.5 + post.mean()) ** 2
    if parameterization == "joint":
        var += np.var(Z) / Z.mean() ** 2
    sd = np.sqrt(var / (n_rounds * b * len(datas)))
    assert abs(model.T(h.state["S"]) - theta_star) < 10 * sd


def test_fedmissem_full_observation_round_is_rank_r_svd():
    rng = np.random.default_rng(21)
    theta = rng.normal(size=(10, 2)) @ rng.normal(size=(2, 8))
    X = theta + rng.normal(size=(25, 10, 8))
    data = (X, np.ones(X.shape, dtype=bool))
    model = MissingValues(2)
    S0 = model.init_statistic([data], rng)
    thetas = []
    _exact_em(model=model).run([data], 2, seed=0, init=S0, callback=lambda t, state: thetas.append(state["theta"]))
    for th in thetas:
        np.testing.assert_allclose(th.matrix, rank_r_svd(X.mean(axis=0), 2), atol=1e-10)


@pytest.mark.parametrize("family,epochs", [("gaussian", 15), ("poisson", 8)])
def test_fedmissem_with_missing_entries_beats_mean_imputation(family, epochs):
    result = run_fedmissem(MissConfig(family=family, n_clients=4, observers_per_client=10, n_rows=15, n_cols=12,
                                      epochs=epochs, monitor_every=10, block_size=4, reference_iters=30))
    assert result["fedmissem"]["rmse_mean"] < 0.5 * result["mean_imputation"]["rmse_mean"]
    assert result["centralized_em"]["rmse_mean"] < result["mean_imputation"]["rmse_mean"]


def test_fedmm_gmm_with_quantization_and_partial_participation_approaches_em():
    rng = np.random.default_rng(22)
    Y = _mixture(rng, n=1200, p=2, G=2)
    datas = np.array_split(Y, 6)
    model = GaussianMixture(2)
    S0 = model.init_statistic(datas, rng)
    s_star = _deterministic_em_root(model, datas, S0, n_iter=300)
    # exact oracles: the control variates learn h_i(s*), the quantized messages vanish and the
    # iteration converges geometrically to the EM root (α = 1/(1 + ω) with ω = 1)
    algo = FedMM(model, participation_prob=0.75, compressor=BlockQuantizer(block_size=4), control_variate_step=0.5,
                 step=0.5,
                 batch_size=None, control_variates="oracle")
    h = algo.run(datas, 700, seed=3, init=S0)
    np.testing.assert_allclose(h.state["S"], s_star, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vr_fedem_has_lower_variance_of_H_than_fedem(seed):
    cfg = Fig1Config(n_samples=1000, n_clients=10, epochs=10, monitor_every=10_000, seed=seed)
    result = run_fig1(cfg)
    fedem, vr = result["runs"]["FedEM"], result["runs"]["VR-FedEM"]
    assert abs(fedem["epochs"][-1] - vr["epochs"][-1]) < 1.5  # equal epochs (up to one refresh)
    assert result["summary"]["VR-FedEM"]["H2_var"] < result["summary"]["FedEM"]["H2_var"]


def test_fig1_writes_json_and_png(tmp_path):
    cfg = Fig1Config(n_samples=400, n_clients=4, epochs=2, monitor_every=3)
    result = run_fig1(cfg)
    json_path, png_path = write_result(result, str(tmp_path), "fig1")
    loaded = fedmm.load(json_path)
    assert isinstance(loaded, fedmm.RunSet) and set(loaded) == {"FedEM/seed=0", "VR-FedEM/seed=0"}
    for name in ("FedEM", "VR-FedEM"):
        history, run = loaded[f"{name}/seed=0"], result["runs"][name]
        assert len(history) == run["n_rounds"] == loaded.metadata["results"][0]["runs"][name]["n_rounds"]
        np.testing.assert_array_equal(history.column("E_s"), run["H2"])  # ‖H_k‖², round by round
        np.testing.assert_array_equal(history.column("epochs"), run["epochs"])
        monitored = np.flatnonzero(np.isfinite(history.column("h2"))) + 1
        np.testing.assert_array_equal(monitored, run["h2_round"])  # every 3 rounds and the last
        np.testing.assert_array_equal(history.column("h2")[monitored - 1], run["h2"])
    with open(png_path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_fedmm_rejects_more_components_than_points():
    Y = np.random.default_rng(23).normal(size=(5, 2))
    with pytest.raises(ValueError, match="n_components"):
        FedMM(GaussianMixture(6), step=1.0).run([Y[:2], Y[2:]], 1)


def test_cli_fedmissem(tmp_path, capsys):
    from fedmm.cli import main

    assert main(["experiment", "fedmissem", "--out", str(tmp_path), "--epochs", "3", "--monitor-every", "2"]) == 0
    assert "RMSE vs hidden values" in capsys.readouterr().out
    result = fedmm.load(tmp_path / "fedmissem.json").metadata["results"][0]
    assert result["fedmissem"]["rmse_hidden"] < result["mean_imputation"]["rmse_hidden"]
    table = json.loads((tmp_path / "fedmissem_summary.json").read_text())
    rows = {row["method"]: row for row in table["rows"]}
    assert float(rows["FedMissEM"]["RMSE vs hidden values"]) == pytest.approx(result["fedmissem"]["rmse_hidden"],
                                                                               abs=5e-5)


def test_broadcast_array_round_trip_keeps_em_parameters():
    """Array transports (Flower, Ray) rebuild θ with model.theta_from_vector: same E-step."""
    from fedmm.algorithms import Broadcast

    rng = np.random.default_rng(24)
    Y = _mixture(rng, n=100)
    for model, data in ((GaussianMixture(3), Y), (GaussianMixture(2, covariance="full"), Y),
                        (MissingValues(2, lam=0.1), synthetic_lowrank(1, 5, 6, 5, 2, seed=0).datas[0]),
                        (PoissonLatent(SUPPORT, PROBS), rng.poisson(2.0, 50).astype(float))):
        S0 = model.init_statistic([data], rng)
        theta = model.T(S0)
        msg = Broadcast(t=3, statistic=S0, theta=theta, theta_vector=model.theta_vector(theta))
        back = Broadcast.from_arrays(msg.to_arrays(), model, theta)
        np.testing.assert_allclose(model.statistic(data, back.theta), model.statistic(data, theta), rtol=0, atol=1e-12)


def test_fedem_threads_and_batching_give_identical_runs():
    rng = np.random.default_rng(25)
    datas = np.array_split(_mixture(rng, n=600, p=2, G=2), 6)
    model = GaussianMixture(2)
    S0 = model.init_statistic(datas, rng)
    runs = [FedMM(model, participation_prob=0.75, compressor=BlockQuantizer(block_size=4), control_variate_step=1e-2,
                  step=1e-2,
                  batch_size=20, n_threads=threads, backend=backend).run(datas, 15, seed=4, init=S0)
            for threads, backend in ((1, "auto"), (2, "auto"), (1, "python"))]
    for other in runs[1:]:
        assert runs[0].equals(other)
        np.testing.assert_array_equal(runs[0].state["S"], other.state["S"])


def test_sklearn_em_reference_from_the_same_start_is_textbook_em():
    """The same-start reference is where textbook EM from θ₀ = T(Ŝ₀) converges, not sklearn's own start."""
    from fedmm.experiments.fedem import sklearn_em_reference

    rng = np.random.default_rng(3)
    Y = _mixture(rng, n=400, p=2, G=3)
    model = GaussianMixture(3, reg_covar=0.0)
    theta0 = model.T(model.init_statistic([Y], rng))
    weights, means, cov = theta0.weights, theta0.means, theta0.covariance
    for _ in range(3000):
        weights, means, cov = gmm_tied_em_step(Y, weights, means, cov)
    expected = gmm_tied_loglik(Y, weights, means, cov)
    found = sklearn_em_reference(Y, theta0, reg_covar=1e-12, tol=1e-12, max_iter=5000)
    # both are EM fixed points from one start; their likelihoods agree to the convergence tolerance
    assert found["same_init"] == pytest.approx(expected, abs=1e-6)
    assert found["same_init_iterations"] >= 2
    # and no worse than the start (EM increases the likelihood)
    assert found["same_init"] >= gmm_tied_loglik(Y, theta0.weights, theta0.means, theta0.covariance)
    assert np.isfinite(found["kmeans_init"])
    full = SimpleNamespace(weights=weights, means=means, covariance=np.stack([cov] * 3))
    with pytest.raises(ValueError, match="tied covariance .* 'theta0'"):
        sklearn_em_reference(Y, full)


def test_digits_result_has_the_same_start_sklearn_reference(tmp_path):
    from fedmm.experiments.fedem import DigitsConfig, run_digits, write_results

    result = run_digits(DigitsConfig(rounds=4, monitor_every=2))
    assert result["config"]["step"] == 2e-2  # the default step: the stand-in moves (see the module docstring)
    for key in ("sklearn_em_log_likelihood", "sklearn_em_kmeans_log_likelihood"):
        assert result[key] > result["initial_log_likelihood"]
    summary, files = write_results([result], tmp_path, "digits")
    assert "same start" in summary and any(f.endswith(".png") for f in files)
