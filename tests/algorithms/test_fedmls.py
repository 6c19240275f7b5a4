# SPDX-License-Identifier: BSD-3-Clause
"""FedMLS (FedMLS paper Alg. 1) and its non-smooth baselines FedAvg, Scaffold, Scaffnew."""
import doctest

import numpy as np
import pytest
from reference import (
    centralized_subgradient_descent,
    fedmls_per_client,
    mopes_product_space,
    nonsmooth_design,
    nonsmooth_subgradient_vectorized,
    nonsmooth_toy_data,
)
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

import fedmm
import fedmm.algorithms.fedmls as fedmls_module
from fedmm import History
from fedmm.algorithms.fedmls import FedMLS
from fedmm.algorithms.nonsmooth import FedAvg, Scaffnew, Scaffold
from fedmm.models.nonsmooth import HingeSVM, L1Regression
from fedmm.runtime import LocalRuntime


def _reference_subgradient(kind, datas, intercept):
    designs = [nonsmooth_design(kind, A, intercept) for A, _ in datas]
    return lambda i, u: nonsmooth_subgradient_vectorized(kind, designs[i], datas[i][1], u)


# -- convergence: the O(1/K) trend of Corollary 3.2 / Remark 3.3 ---------------------------
# Deterministic subgradients, T_k = k, λ_k = λ0/k (the paper's practical rule), ball radius
# 2‖w*‖ + 1 (contains a minimizer, so F*_R = F*).  Theory: F(x_K) − F* = O(1/K).
# Tolerance: the slope of log(F(x_k) − F*) against log k, fitted over k ∈ [K/4, K], must be
# ≤ −0.9 (the rate 1/K within 0.1 in the exponent; faster is allowed, the bound is an upper
# bound), and F(x_K) must reach F* within ε = 5e-3 relative.
@pytest.mark.parametrize("kind,problem,lam0", [("l1", L1Regression(), 0.3), ("hinge", HingeSVM(), 3.0)])
def test_fedmls_suboptimality_follows_one_over_k_and_reaches_optimum(kind, problem, lam0):
    datas = nonsmooth_toy_data(kind, n_clients=4, m=15, d=3, seed=1)
    opt = problem.minimize(datas)
    radius = 2 * np.linalg.norm(opt.w) + 1
    K = 200
    algo = FedMLS(problem, local_steps=("linear", 1), prox_weight=("inverse", lam0), radius=radius, oracle="full")
    hist = algo.run(datas, K, evaluate_every=1)
    gap = hist["objective"] - opt.value
    assert np.all(gap >= -1e-9 * opt.value)  # F* from the LP is a true lower bound
    k = np.arange(1, K + 1)
    tail = k >= K // 4
    slope = np.polyfit(np.log(k[tail]), np.log(gap[tail]), 1)[0]
    assert slope <= -0.9, f"suboptimality decays like k^{slope:.2f}, expected at least 1/k"
    assert gap[-1] <= 5e-3 * opt.value
    assert hist["total_local_steps"][-1] == K * (K + 1) / 2


def test_stochastic_fedmls_reaches_optimum_on_average():
    # 10% minibatches: E[F(x_K)] − F* is small; checked on the mean of 3 seeds (observed ≈ 8e-3)
    problem = HingeSVM()
    datas = nonsmooth_toy_data("hinge", n_clients=4, m=30, d=3, seed=1)
    opt = problem.minimize(datas)
    f_star = opt.value
    algo = FedMLS(problem, prox_weight=("inverse", 1.0), radius=2 * np.linalg.norm(opt.w) + 1, oracle="minibatch")
    finals = [algo.run(datas, 100, seed=s, evaluate_every=100)["objective"][-1] for s in range(3)]
    assert np.mean(finals) - f_star <= 2e-2 * f_star


# -- FedMLS is MOPES on the product space ----------------------------------------------------
def test_one_client_one_local_step_is_centralized_mopes():
    problem = L1Regression()
    datas = nonsmooth_toy_data("l1", n_clients=1, m=20, d=3, seed=5)
    sub = _reference_subgradient("l1", datas, False)
    K = 40
    hist = FedMLS(problem, local_steps=1, prox_weight=("inverse", 2.0), radius=5.0, oracle="full").run(
        datas, K, evaluate_every=1)
    ref = mopes_product_space(sub, 1, 3, K, lambda k: 1, lambda k: 2.0 / k, 5.0)
    x_ref = ref[-1]
    np.testing.assert_allclose(hist.state["x"], x_ref, rtol=1e-11, atol=1e-12)
    f_ref = [problem.objective(datas, x) for x in ref]
    np.testing.assert_allclose(hist["objective"], f_ref, rtol=1e-11)


@pytest.mark.parametrize("backend", ["compiled", "python"])
@pytest.mark.parametrize("kind,problem,intercept", [("hinge", HingeSVM(), True), ("l1", L1Regression(), False)])
def test_fedmls_equals_mopes_on_product_space_and_per_client_algorithm(kind, problem, intercept, backend):
    datas = nonsmooth_toy_data(kind, n_clients=3, m=8, d=2, seed=7)
    p = 2 + int(intercept)
    sub = _reference_subgradient(kind, datas, intercept)
    K, T, lam = 15, (lambda k: k + 1), (lambda k: 0.5 / k)
    hist = FedMLS(problem, local_steps=T, prox_weight=lam, radius=1.5, oracle="full", backend=backend).run(datas, K)
    mopes = mopes_product_space(sub, 3, p, K, T, lam, 1.5)
    per_client = fedmls_per_client(sub, 3, p, K, T, lam, 1.5)
    np.testing.assert_allclose(per_client, mopes, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(hist.state["x"], mopes[-1], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind,problem", [("hinge", HingeSVM()), ("l1", L1Regression())])
def test_compiled_and_numpy_local_loops_agree_with_minibatches(kind, problem):
    # same per-client streams, same draws: the two backends differ only by rounding
    datas = nonsmooth_toy_data(kind, n_clients=4, m=25, d=3, seed=8)
    runs = [FedMLS(problem, local_steps=("linear", 2), prox_weight=("inverse", 1.0), radius=3.0, backend=b).run(
        datas, 20, seed=4, evaluate_every=1) for b in ("compiled", "python")]
    np.testing.assert_allclose(runs[0]["objective"], runs[1]["objective"], rtol=1e-11)
    np.testing.assert_allclose(runs[0].state["x"], runs[1].state["x"], rtol=1e-10, atol=1e-12)


def test_compiled_loop_is_thread_safe():
    # the kernel runs without the GIL; concurrent runs must match serial ones exactly
    from concurrent.futures import ThreadPoolExecutor

    problem = HingeSVM()
    datas = nonsmooth_toy_data("hinge", n_clients=4, m=40, d=3, seed=9)
    algo = FedMLS(problem, local_steps=("linear", 3), prox_weight=("inverse", 1.0), radius=5.0)
    serial = [algo.run(datas, 15, seed=s).state["x"] for s in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(lambda s: algo.run(datas, 15, seed=s).state["x"], range(4)))
    for a, b in zip(serial, threaded):
        np.testing.assert_array_equal(a, b)


def test_server_client_split_does_not_change_the_numbers():
    # the local runtime with threads and/or one client per call reproduces the batched run exactly
    problem = L1Regression()
    datas = nonsmooth_toy_data("l1", n_clients=5, m=20, d=3, seed=6)
    algo = FedMLS(problem, prox_weight=("inverse", 1.0), radius=10.0)
    reference = algo.run(datas, 12, seed=2, evaluate_every=1)
    for n_threads, batched in [(1, False), (2, True), (2, False)]:
        runtime = LocalRuntime(n_threads=n_threads, batched=batched)
        assert algo.run(datas, 12, seed=2, evaluate_every=1, runtime=runtime).equals(reference)
    assert reference.records[0]["active"] == [0, 1, 2, 3, 4]
    assert reference.records[0]["bytes_up"] == 5 * 3 * 8 and reference.records[0]["bytes_down"] == 5 * (3 * 8 + 24)


def test_server_rejects_malformed_payloads():
    from fedmm.algorithms.fedmls import FedMLSServer

    server = FedMLSServer(2, np.zeros(3), 1, 1.0)
    server.broadcast(0)
    with pytest.raises(ValueError, match="payload of client 1.*24 bytes"):
        server.aggregate(0, {0: np.zeros(3).tobytes(), 1: b"\x00" * 23})
    with pytest.raises(ValueError, match="only finite values"):
        server.aggregate(0, {0: np.zeros(3).tobytes(), 1: np.array([0.0, np.nan, 0.0]).tobytes()})
    with pytest.raises(ValueError, match="every client's message"):
        server.aggregate(0, {0: np.zeros(3).tobytes()})


def test_kernel_rejects_bad_arguments():
    from fedmm.kernels import fedmls_local_round

    design, target = np.ones((4, 2)), np.array([1.0, -1.0, 1.0, 1.0])
    offsets = np.array([0, 2, 4])
    V, U, U_avg = np.zeros((2, 2)), np.zeros((2, 2)), np.zeros((2, 2))
    kw = dict(n_steps=3, weight=0.1)
    with pytest.raises(ValueError, match="'loss' to be one of"):
        fedmls_local_round("huber", design, target, offsets, V, U, U_avg, **kw)
    with pytest.raises(ValueError, match="'offsets' increasing from 0 to N=4"):
        fedmls_local_round("hinge", design, target, np.array([0, 3, 3]), V, U, U_avg, **kw)
    with pytest.raises(ValueError, match="writeable C-contiguous float64 array of shape \\(2, 2\\)"):
        fedmls_local_round("hinge", design, target, offsets, V, np.zeros((2, 2), order="F")[:, :1], U_avg, **kw)
    with pytest.raises(ValueError, match="invalid argument"):  # row 3 is client 1's, listed for client 0
        fedmls_local_round("hinge", design, target, offsets, V, U, U_avg, rows=np.array([[3, 2]] * 3),
                           row_offsets=np.array([0, 1, 2]), scale=np.ones(2), **kw)
    assert not U.any()  # nothing written on error


# -- baselines -------------------------------------------------------------------------------
def test_baselines_with_one_local_step_are_the_centralized_subgradient_method():
    problem = HingeSVM()
    datas = nonsmooth_toy_data("hinge", n_clients=3, m=10, d=2, seed=2)
    sub = _reference_subgradient("hinge", datas, True)
    K, eta0 = 25, 0.05
    # FedAvg, T = 1: x ← x − η_k (1/n) Σ g_i(x), η_k = η0/√k
    fedavg = FedAvg(problem, local_steps=1, local_lr=eta0, oracle="full").run(datas, K).state["x"]
    ref = centralized_subgradient_descent(sub, 3, 3, K, lambda t: eta0 / np.sqrt(t))
    np.testing.assert_allclose(fedavg, ref[-1], rtol=1e-11, atol=1e-13)
    # Scaffold, T = 1: c = mean c_i, so x ← x − η_g η_t (1/n) Σ g_i(x) with η_t = η0/(η_g t)
    scaffold = Scaffold(problem, local_steps=1, local_lr=eta0, oracle="full").run(datas, K).state["x"]
    ref = centralized_subgradient_descent(sub, 3, 3, K, lambda t: eta0 / t)
    np.testing.assert_allclose(scaffold, ref[-1], rtol=1e-10, atol=1e-13)
    # Scaffnew, p ≡ 1: communicates every step, x ← x − η_t (1/n) Σ g_i(x)
    hist = Scaffnew(problem, local_lr=eta0, communication_prob=1.0, oracle="full").run(datas, K)
    ref = centralized_subgradient_descent(sub, 3, 3, K, lambda t: eta0 / np.sqrt(t))
    np.testing.assert_allclose(hist.state["x"], ref[-1], rtol=1e-10, atol=1e-13)
    assert list(hist["total_local_steps"]) == list(range(1, K + 1))


def _kmeans_svm_clients(n_clients=5, n_samples=200, seed=0):
    rng = np.random.default_rng(seed)
    A = 2.0 * rng.normal(size=(n_samples, 2))
    y = np.where(A @ np.array([1.0, -0.5]) + 0.8 * rng.normal(size=n_samples) > 0.3, 1.0, -1.0)
    with threadpool_limits(limits=1):  # OpenMP threads spin on a busy machine
        labels = KMeans(n_clients, n_init=10, random_state=0).fit_predict(A)
    kmeans = [(A[labels == i], y[labels == i]) for i in range(n_clients)]
    perm = rng.permutation(n_samples)
    iid = [(A[perm[i::n_clients]], y[perm[i::n_clients]]) for i in range(n_clients)]
    return kmeans, iid


def test_fedavg_client_drift_on_kmeans_clients():
    # Same rounds and local steps (T_k = k) for both; FedAvg's η0 tuned over powers of ten.
    problem = HingeSVM()
    kmeans, iid = _kmeans_svm_clients()
    opt = problem.minimize(kmeans)
    K = 100
    fedmls = FedMLS(problem, prox_weight=("inverse", 1.0), radius=2 * np.linalg.norm(opt.w) + 1, oracle="full")
    gap_fedmls = fedmls.run(kmeans, K, evaluate_every=K)["objective"][-1] - opt.value
    assert gap_fedmls <= 1e-3 * opt.value
    best_fedavg = np.inf
    for eta0 in [1e-4, 1e-3, 1e-2, 1e-1, 1.0]:
        gaps = FedAvg(problem, local_lr=eta0, oracle="full").run(kmeans, K, evaluate_every=1)["objective"] - opt.value
        best_fedavg = min(best_fedavg, gaps[K // 2:].min())
    assert best_fedavg >= 3.0 * gap_fedmls
    # the plateau comes from heterogeneity: the same data split i.i.d. stalls lower
    for eta0 in [1e-2, 1e-1]:
        fedavg = FedAvg(problem, local_lr=eta0, oracle="full")
        plateau_kmeans = fedavg.run(kmeans, 60, evaluate_every=1)["objective"][-20:].min()
        plateau_iid = fedavg.run(iid, 60, evaluate_every=1)["objective"][-20:].min()
        assert plateau_kmeans - opt.value >= 2.0 * (plateau_iid - opt.value)


# -- reproducibility and errors -------------------------------------------------------------
def _algorithms(problem):
    return [
        FedMLS(problem, prox_weight=("inverse", 1.0), radius=10.0),
        FedAvg(problem, local_steps=3, local_lr=0.01),
        Scaffold(problem, local_lr=0.01),
        Scaffnew(problem, local_lr=0.01),
    ]


def test_same_seed_same_history_and_seed_matters(tmp_path):
    problem = HingeSVM()
    datas = nonsmooth_toy_data("hinge", n_clients=3, m=20, d=3, seed=0)
    for algo in _algorithms(problem):
        h1 = algo.run(datas, 12, seed=11, evaluate_every=1)
        h2 = algo.run(datas, 12, seed=11, evaluate_every=1)
        h3 = algo.run(datas, 12, seed=12, evaluate_every=1)
        assert h1.equals(h2), algo.name
        assert not np.array_equal(h1.state["x"], h3.state["x"]), algo.name
        h1.save(tmp_path / "h.json")
        assert History.load(tmp_path / "h.json").equals(h1), algo.name
        assert set(h1.keys()) >= {"objective", "local_steps", "bytes_up", "bytes_down", "wall_time"}


def test_bad_parameters_raise_clear_errors():
    problem = L1Regression()
    datas = nonsmooth_toy_data("l1", n_clients=2, m=5, d=2, seed=0)
    with pytest.raises(ValueError, match=r"'radius' in \(0.0, inf\]"):
        FedMLS(problem, prox_weight=1.0, radius=0.0)
    with pytest.raises(ValueError, match=r"'radius' in \(0.0, inf\]"):
        FedMLS(problem, prox_weight=1.0, radius=-1.0)
    with pytest.raises(ValueError, match=r"'local_steps' in \[1, 2147483647\]"):
        FedMLS(problem, local_steps=0, prox_weight=1.0)
    with pytest.raises(ValueError, match=r"'local_steps\(1\)' in \[1, 2147483647\]"):
        FedMLS(problem, local_steps=lambda k: k - 1, prox_weight=1.0).run(datas, 3)
    with pytest.raises(ValueError, match=r"'prox_weight' in \(0.0, 1e\+300\]"):
        FedMLS(problem, prox_weight=0.0)
    with pytest.raises(ValueError, match=r"'prox_weight\(2\)'"):
        FedMLS(problem, prox_weight=lambda k: 1.0 if k == 1 else float("nan")).run(datas, 3)
    with pytest.raises(ValueError, match=r"'init' of shape \(2,\)"):
        FedMLS(problem, prox_weight=1.0).run(datas, 3, init=np.zeros(3))
    with pytest.raises(ValueError, match="columns like datas\\[0\\]"):
        FedMLS(problem, prox_weight=1.0).run([datas[0], (np.ones((5, 3)), np.ones(5))], 3)
    with pytest.raises(ValueError, match=r"'n_rounds' in \[0, 2147483647\]"):
        FedMLS(problem, prox_weight=1.0).run(datas, -1)
    with pytest.raises(ValueError, match="'oracle' to be one of"):
        FedMLS(problem, prox_weight=1.0, oracle="exact")
    with pytest.raises(ValueError, match=r"'batch_size' to be a fraction of each client's samples in \(0, 1\]"):
        FedAvg(problem, local_lr=0.1, batch_size=0.0)
    with pytest.raises(ValueError, match=r"'communication_prob' in \(0.0, 1.0\]"):
        Scaffnew(problem, local_lr=0.1, communication_prob=1.5)
    with pytest.raises(ValueError, match=r"'communication_prob\(11\)' in \(0.0, 1.0\]"):
        Scaffnew(problem, local_lr=0.1, communication_prob=lambda s: 0.1 * s, oracle="full").run(datas, 30, seed=0)
    with pytest.raises(ValueError, match=r"'local_lr' in \(0.0, 1e\+300\]"):
        Scaffold(problem, local_steps=1, local_lr=-0.1)
    with pytest.raises(ValueError, match=r"'evaluate_every' in \[0, inf\]"):
        FedAvg(problem, local_lr=0.1).run(datas, 2, evaluate_every=-1)
    with pytest.raises(TypeError, match="'model' to be a fedmm.models.nonsmooth problem"):
        FedMLS("svm", prox_weight=1.0)
    with pytest.raises(TypeError, match="positional"):  # hyper-parameters are keyword-only
        FedMLS(problem, 1, 1.0)
    with pytest.raises(TypeError, match="prox_weight"):
        FedMLS(problem)
    with pytest.raises(ValueError, match="'seed' to be a non-negative seed, got -1"):
        FedAvg(problem, local_lr=0.1).run(datas, 2, seed=-1)
    with pytest.raises(TypeError, match="'seed' to be None, a non-negative int"):
        FedAvg(problem, local_lr=0.1).run(datas, 2, seed=1.5)


def test_module_examples():
    failures, _ = doctest.testmod(fedmls_module)
    assert failures == 0


# -- the experiment ------------------------------------------------------------------------------
def test_experiment_writes_curves_and_reports_winners(tmp_path):
    import argparse
    import json

    from fedmm.experiments.fedmls import add_fedmls_parser, load_breast_cancer_clients

    datas = load_breast_cancer_clients(10)
    assert sum(A.shape[0] for A, _ in datas) == 569 and all(A.shape[1] == 10 for A, _ in datas)
    pooled = np.vstack([A for A, _ in datas])
    np.testing.assert_allclose(pooled.mean(axis=0), 0.0, atol=1e-12)  # standardized
    assert len({round(float(y.mean()), 3) for _, y in datas}) > 3  # heterogeneous label mixes

    parser = argparse.ArgumentParser()
    add_fedmls_parser(parser.add_subparsers(dest="experiment"))
    args = parser.parse_args(["fedmls", "-o", str(tmp_path), "--rounds", "6", "--seeds", "2",
                              "--tune-seeds", "1", "--prox-weight-grid", "1,10", "--step-grid", "0.01",
                              "--extend-grid", "0"])
    assert args.func(args) == 0
    summary = json.loads((tmp_path / "fedmls_summary.json").read_text())
    assert summary["winners"]["FedMLS"] in (1.0, 10.0) and summary["winners"]["FedAvg"] == 0.01
    assert summary["f_star"] > 0 and summary["f_star_certified_gap"] <= 1e-7 * summary["f_star"]
    for name in ("FedMLS", "FedAvg", "Scaffold", "Scaffnew"):
        curve = summary["curves"][name]
        assert len(curve["rounds"]["mean"]) == 6
        assert all(v >= -1e-9 for v in curve["final_relative_suboptimality"])
    assert (tmp_path / "fedmls_curves.png").stat().st_size > 10_000
    histories = fedmm.load(tmp_path / "fedmls_histories.json")
    assert isinstance(histories, fedmm.RunSet) and len(histories) == 4 * 2
    assert histories["FedMLS/seed=1"].state["x"].shape == (11,)
    np.testing.assert_allclose(  # the table's last column is the curve's, seed by seed
        [(histories[f"FedAvg/seed={s}"]["objective"][-1] - summary["f_star"]) / summary["f_star"] for s in (0, 1)],
        summary["curves"]["FedAvg"]["final_relative_suboptimality"], rtol=1e-12)
    row = {r["algorithm"]: r for r in summary["rows"]}["FedAvg"]
    assert row["winner"] == "0.01 (high edge of grid)"  # a one-value grid: the winner is at its edge
