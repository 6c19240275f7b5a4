# SPDX-License-Identifier: BSD-3-Clause
"""FedMM on dictionary learning (FedMM paper §2.3 and §6): model, centralized MM, 𝒮, control variates."""
import numpy as np
import pytest
from sklearn.decomposition import sparse_encode

from fedmm.algorithms import SASSMM, FedMM
from fedmm.compression import Identity, StochasticRounding
from fedmm.kernels import ConvergenceWarning
from fedmm.models import DictionaryLearning

from reference import engine_centralized_mm

P, K, LAM, ETA = 8, 5, 0.1, 0.2


def _clients(n_clients=6, n_per_client=40, seed=0, spread=3.0):
    """Heterogeneous clients: each uses its own subset of atoms plus a client-specific offset."""
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal((P, K))
    out = []
    for i in range(n_clients):
        codes = rng.standard_normal((n_per_client, K)) * (rng.random((n_per_client, K)) < 0.4)
        codes[:, i % K] += spread
        out.append(np.ascontiguousarray(codes @ theta.T + 0.05 * rng.standard_normal((n_per_client, P))))
    return out


@pytest.fixture(scope="module")
def datas():
    return _clients()


def _model(**kw):
    return DictionaryLearning(K, LAM, kw.pop("eta", ETA), **kw)


def test_statistic_matches_sklearn_codes(datas):
    model = _model()
    data = model.check_data(datas[0])
    theta = np.random.default_rng(1).standard_normal((P, K))
    idx = np.array([1, 5, 9, 20, 33])
    s = model.statistic(data, theta, idx)
    H = sparse_encode(data[idx], theta.T, algorithm="lasso_cd", alpha=LAM, max_iter=100000)
    A = H.T @ H / 5
    B = data[idx].T @ H / 5
    blocks = model.layout.split(s)
    np.testing.assert_allclose(blocks["A"], A, atol=1e-6)
    np.testing.assert_allclose(blocks["B"], B, atol=1e-6)


def test_statistic_batch_equals_stacked_statistics_bitwise(datas):
    model = _model()
    ds = [model.check_data(d) for d in datas]
    theta = np.random.default_rng(2).standard_normal((P, K))
    rng = np.random.default_rng(3)
    idxs = [rng.choice(40, 7, replace=False), None, rng.choice(40, 3, replace=False)]
    batch = model.statistic_batch(ds[:3], theta, idxs)
    for row, d, idx in zip(batch, ds[:3], idxs):
        np.testing.assert_array_equal(row, model.statistic(d, theta, idx))


def test_T_ridge_closed_form_and_unit_norm_constraint():
    rng = np.random.default_rng(4)
    M = rng.standard_normal((K, K))
    A = M @ M.T / K
    B = rng.standard_normal((P, K))
    model = DictionaryLearning(K, LAM, ETA, n_features=P)
    s = model.layout.join(A=A, B=B)
    np.testing.assert_allclose(model.T(s), np.linalg.solve(A + 2 * ETA * np.eye(K), B.T).T, rtol=1e-10)
    unit = DictionaryLearning(K, LAM, ETA, "unit_norm", n_features=P)
    theta = unit.T(s)
    assert (np.linalg.norm(theta, axis=0) <= 1 + 1e-10).all()

    def surrogate(th):
        return 0.5 * np.trace(th.T @ th @ A) - np.trace(th.T @ B) + ETA * np.sum(th * th)

    for _ in range(20):  # no feasible perturbation does better
        other = unit.project_theta(theta + 0.05 * rng.standard_normal(theta.shape))
        assert surrogate(theta) <= surrogate(other) + 1e-9


def test_unit_norm_update_tolerance_is_the_models():
    """``update_tol`` reaches the BCD kernel: a loose T is within its tolerance of a tight one."""
    rng = np.random.default_rng(14)
    M = rng.standard_normal((K, K + 3))
    A, B = M @ M.T / K, 3.0 * rng.standard_normal((P, K))
    s = DictionaryLearning(K, LAM, ETA, n_features=P).layout.join(A=A, B=B)
    tight = DictionaryLearning(K, LAM, ETA, "unit_norm", n_features=P, update_tol=1e-13, update_max_iter=10_000).T(s)
    loose = DictionaryLearning(K, LAM, ETA, "unit_norm", n_features=P, update_tol=1e-3).T(s)
    one_sweep = DictionaryLearning(K, LAM, ETA, "unit_norm", n_features=P, update_tol=0.0, update_max_iter=1)
    assert 0 < np.abs(loose - tight).max() < 1e-1
    with pytest.warns(ConvergenceWarning):
        assert np.abs(one_sweep.T(s) - tight).max() > np.abs(loose - tight).max()
    with pytest.raises(ValueError, match="update_tol"):
        DictionaryLearning(K, LAM, update_tol=-1.0)


def test_project_is_psd_projection_of_first_block():
    rng = np.random.default_rng(5)
    model = DictionaryLearning(K, LAM, ETA, n_features=P)
    s = rng.standard_normal(model.layout.size)
    out = model.project(s)
    blocks, before = model.layout.split(out), model.layout.split(s)
    w = np.linalg.eigvalsh(blocks["A"])
    assert w.min() >= -1e-12
    np.testing.assert_array_equal(blocks["B"], before["B"])
    sym = 0.5 * (before["A"] + before["A"].T)
    ws, U = np.linalg.eigh(sym)
    np.testing.assert_allclose(blocks["A"], (U * np.maximum(ws, 0)) @ U.T, atol=1e-12)
    np.testing.assert_allclose(model.project(out), out, atol=1e-12)
    assert model.in_domain(out) and not model.in_domain(s)


def test_objective_is_the_lasso_value(datas):
    model = _model()
    data = model.check_data(datas[1])
    theta = np.random.default_rng(6).standard_normal((P, K))
    H = sparse_encode(data, theta.T, algorithm="lasso_cd", alpha=LAM, max_iter=100000)
    expected = np.mean(0.5 * np.sum((data - H @ theta.T) ** 2, axis=1) + LAM * np.abs(H).sum(axis=1))
    expected += ETA * np.sum(theta**2)
    assert model.objective(data, theta) == pytest.approx(expected, rel=1e-7)


def test_fedmm_full_participation_is_centralized_mm_with_monotone_objective(datas):
    """p = 1, Identity, α = 0, full batches, γ = 1: eq. (22) exactly; MM decreases the objective.

    Cold LASSO starts, so that the oracles are the very statistics of the reference loop.
    """
    model = _model(warm_start=False)
    traj = []
    h = FedMM(model, participation_prob=1.0, compressor=Identity(), control_variate_step=0.0, step=1.0,
              oracle="full").run(
        datas, 15, seed=7, evaluate_every=1, callback=lambda t, state: traj.append(state["statistic"].copy()))
    ds = [model.check_data(d) for d in datas]
    mu = np.full(len(ds), 1.0 / len(ds))
    S0 = _initial_statistic(model, datas, 7)  # the run's own Ŝ_0
    ref = engine_centralized_mm(lambda d, th: model.statistic(d, th), model.T, ds, mu, S0, 15)
    np.testing.assert_allclose(np.array(traj), np.array(ref[1:]), rtol=1e-10, atol=1e-12)  # rounding only
    obj = np.concatenate([[h.config["initial_objective"]], h.column("objective")])
    assert np.all(np.diff(obj) <= 1e-9 * np.abs(obj[:-1]))
    assert obj[-1] < obj[0]


def _initial_statistic(model, datas, seed):
    server, _ = FedMM(model).build(datas, seed=seed)
    return server.S


def _hetero_run(alpha, seed, datas, n_rounds=150, projection="euclidean", callback=None):
    return FedMM(_model(), participation_prob=0.5, compressor=StochasticRounding(bits=4), control_variate_step=alpha,
                 step=0.05, batch_size=10, projection=projection).run(datas, n_rounds, seed=seed, callback=callback)


def test_statistic_stays_in_domain_every_round(datas):
    model = _model()
    model.check_data(datas[0])
    inside = []
    _hetero_run(0.01, 0, datas, n_rounds=60, callback=lambda t,
                state: inside.append(model.in_domain(state["statistic"])))
    assert all(inside)
    # Without the projection of line 16, quantization and control variates leave 𝕄_K⁺.
    outside = []
    _hetero_run(0.01, 0, datas, n_rounds=60, projection=None,
                callback=lambda t, state: outside.append(model.in_domain(state["statistic"])))
    assert not all(outside)


def test_control_variates_lower_final_E_s_with_heterogeneity(datas):
    """α = 0.01 vs α = 0 under partial participation and quantization (FedMM paper Fig. 2)."""
    finals = {0.0: [], 0.01: []}
    for seed in range(4):
        for alpha in finals:
            h = _hetero_run(alpha, seed, datas)
            finals[alpha].append(h.column("E_s")[-20:].mean())
    assert all(a < b for a, b in zip(finals[0.01], finals[0.0])), finals


def test_threaded_and_backend_paths_identical_with_quantization(datas):
    runs = []
    for n_threads, backend in ((1, "compiled"), (2, "compiled"), (1, "python"), (2, "python")):
        algo = FedMM(_model(), clients_per_round=4, compressor=StochasticRounding(bits=8), control_variate_step=0.05,
                     step=0.1,
                     batch_size=8, n_threads=n_threads, backend=backend, control_variates="oracle")
        runs.append(algo.run(datas, 10, seed=3, evaluate_every=5))
    for h in runs[1:]:
        assert h.equals(runs[0])


def test_spider_with_one_inner_loop_is_the_full_batch_oracle(datas):
    kw = dict(participation_prob=1.0, control_variate_step=0.0, step=0.5)
    a = FedMM(_model(), oracle="spider", batch_size=5, k_in=1, **kw).run(datas, 6, seed=1)
    b = FedMM(_model(), oracle="full", **kw).run(datas, 6, seed=1)
    np.testing.assert_array_equal(a.state["S"], b.state["S"])


def test_sassmm_dictionary_objective_decreases(datas):
    data = np.concatenate(datas)
    h = SASSMM(_model(), step="1/t", batch_size=20).run(data, 80, seed=0, evaluate_every=20)
    obj = h.column("objective")
    assert obj[np.isfinite(obj)][-1] < h.config["initial_objective"]


def test_warm_started_codes_agree_with_cold_starts(datas):
    """Warm starts change only the LASSO iterations, not the statistics (to the solver tolerance)."""
    trajectories = []
    for warm in (True, False):
        traj = []
        FedMM(DictionaryLearning(K, LAM, ETA, warm_start=warm), clients_per_round=3, control_variate_step=0.1, step=0.3,
              batch_size=10).run(datas, 15, seed=4, callback=lambda t, state: traj.append(state["statistic"].copy()))
        trajectories.append(np.array(traj))
    np.testing.assert_allclose(trajectories[0], trajectories[1], rtol=1e-6, atol=1e-8)
