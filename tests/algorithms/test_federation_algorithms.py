# SPDX-License-Identifier: BSD-3-Clause
"""SA-SSMM, FedMM (Algorithms 1, 2, 4), the Θ-space baseline, runtimes and argument checks."""
import numpy as np
import pytest

from fedmm import History
from fedmm.history import TIMING_FIELDS
from fedmm.algorithms import SASSMM, FedMM, ParameterAveraging, StepSchedule
from fedmm.compression import Identity, StochasticRounding
from fedmm.models import InverseToy, ProximalGradient

from reference import engine_centralized_mm, engine_heterogeneous_positive, participation_kwargs


@pytest.fixture(scope="module")
def toy_datas():
    return engine_heterogeneous_positive([40, 25, 60, 30, 45, 20], np.random.default_rng(3))


def _mu(datas):
    n = np.array([len(d) for d in datas], dtype=np.float64)
    return n / n.sum()


def _regression_clients(rng, n_clients=5, n=60, d=5, shift=2.0):
    """Heterogeneous least-squares clients: each has its own covariate mean."""
    theta = rng.standard_normal(d)
    out = []
    for i in range(n_clients):
        X = rng.standard_normal((n, d)) + shift * rng.standard_normal(d)
        out.append((X, X @ theta + 0.1 * rng.standard_normal(n)))
    return out


def _lasso_model(datas):
    m = ProximalGradient("least_squares", "l1", rho=1.0, lam=0.05)
    return ProximalGradient("least_squares", "l1", rho=1.0 / m.lipschitz(datas), lam=0.05)


# --------------------------------------------------------------------------- Remark 1
@pytest.mark.parametrize("participation,alpha", [(1.0, 0.0), (0.5, 0.5), (3, 0.3)])
def test_remark1_fedmm_and_baseline_limits(toy_datas, participation, alpha):
    """S-space aggregation reaches θ* = (Σ μ_i E_i[Z])^{-1/2}; Θ-space reaches Σ μ_i E_i[Z]^{-1/2}."""
    mu = _mu(toy_datas)
    means = np.array([d.mean() for d in toy_datas])
    theta_star = (mu @ means) ** -0.5
    theta_naive = mu @ means**-0.5
    assert abs(theta_star - theta_naive) > 0.1  # the two limits really differ
    kw = dict(**participation_kwargs(participation), control_variate_step=alpha, step=0.5 if alpha else 1.0,
              oracle="full", control_variates="zero")
    n_rounds = 400 if alpha else 5
    h = FedMM(InverseToy(), **kw).run(toy_datas, n_rounds, seed=4)
    g = ParameterAveraging(InverseToy(), **kw).run(toy_datas, n_rounds, seed=4)
    assert abs(h.state["theta"][0] - theta_star) <= 1e-8
    assert abs(g.state["theta"][0] - theta_naive) <= 1e-8


def test_remark1_with_quantization_converges_exactly(toy_datas):
    """Unbiased compression of Δ → 0 keeps the exact fixed point (control variates absorb heterogeneity)."""
    comp = StochasticRounding(bits=8)
    mu = _mu(toy_datas)
    theta_star = (mu @ np.array([d.mean() for d in toy_datas])) ** -0.5
    h = FedMM(InverseToy(), participation_prob=0.5, compressor=comp, control_variate_step=0.5, step=0.5, oracle="full",
              control_variates="oracle").run(toy_datas, 400, seed=5)
    assert abs(h.state["theta"][0] - theta_star) <= 1e-8


def test_remark1_with_user_weights(toy_datas):
    weights = np.array([3.0, 1.0, 1.0, 1.0, 1.0, 3.0])
    mu = weights / weights.sum()
    means = np.array([d.mean() for d in toy_datas])
    h = FedMM(InverseToy(), step=1.0, oracle="full", weights=weights).run(toy_datas, 2, seed=0)
    g = ParameterAveraging(InverseToy(), step=1.0, oracle="full", weights=weights).run(toy_datas, 2, seed=0)
    assert abs(h.state["theta"][0] - (mu @ means) ** -0.5) <= 1e-12
    assert abs(g.state["theta"][0] - mu @ means**-0.5) <= 1e-12
    assert abs((mu @ means) ** -0.5 - (_mu(toy_datas) @ means) ** -0.5) > 1e-2  # weights matter


# --------------------------------------------------------------------------- Algorithm 1
class _RecordingToy(InverseToy):
    def __init__(self):
        super().__init__()
        self.seen = []

    def statistic(self, data, theta, idx=None):
        s = super().statistic(data, theta, idx)
        self.seen.append(s)
        return s


def test_sassmm_one_over_t_is_running_mean_of_oracles(toy_datas):
    model = _RecordingToy()
    means = []
    h = SASSMM(model, step="1/t", batch_size=5, start="model").run(
        toy_datas[0], 50, seed=7, callback=lambda t, state: means.append(state["statistic"].copy()))
    oracles = np.array(model.seen)[:, 0]
    assert oracles.std() > 0  # genuinely stochastic oracles
    running = np.cumsum(oracles) / np.arange(1, 51)
    np.testing.assert_allclose(np.array(means)[:, 0], running, rtol=1e-13)
    np.testing.assert_allclose(h.state["S"][0], oracles.mean(), rtol=1e-13)


def test_step_schedules():
    assert StepSchedule("1/t")(4) == 0.25
    assert StepSchedule(0.3)(100) == 0.3
    assert StepSchedule(("sqrt", 0.05))(10) == pytest.approx(0.05 / np.sqrt(10.05), rel=1e-15)
    assert StepSchedule(lambda t: 1.0 / (t + 1))(1) == 0.5
    with pytest.raises(ValueError, match="gamma_2"):
        StepSchedule(lambda t: 2.0 * (t > 1) + 0.1)(2)
    with pytest.raises(ValueError, match="step"):
        StepSchedule(1.5)
    with pytest.raises(ValueError, match="sqrt"):
        StepSchedule(("log", 1.0))


# --------------------------------------------------------------------------- Algorithm 2 as centralized MM
def test_full_participation_identity_full_batch_is_centralized_mm():
    """p = 1, Identity, α = 0, full batches, γ = 1: the iteration (22) on the mixture of clients."""
    rng = np.random.default_rng(8)
    datas = _regression_clients(rng)
    model = _lasso_model(datas)
    mu = _mu([d[0] for d in datas])
    S0 = np.zeros(5)
    trajectory = []
    FedMM(model, participation_prob=1.0, compressor=Identity(), control_variate_step=0.0, step=1.0, oracle="full").run(
        datas, 25, seed=0, init=S0, callback=lambda t, state: trajectory.append(state["statistic"].copy()))
    ref = engine_centralized_mm(lambda d, th: model.statistic(d, th), model.T, datas, mu, S0, 25)
    np.testing.assert_allclose(np.array(trajectory), np.array(ref[1:]), rtol=1e-13, atol=1e-14)


# --------------------------------------------------------------------------- Algorithm 2 vs Algorithm 4
def _alg_kwargs(compressor=None):
    return dict(participation_prob=0.5, compressor=compressor or Identity(), control_variate_step=0.3, step=0.2,
                batch_size=4,
                control_variates="oracle")


def test_algorithm4_coupled_equals_algorithm2(toy_datas):
    comp = StochasticRounding(bits=4)
    h2 = FedMM(InverseToy(), **_alg_kwargs(comp), participation_mode="select").run(toy_datas, 30, seed=11)
    h4 = FedMM(InverseToy(), **_alg_kwargs(comp), participation_mode="compress").run(toy_datas, 30, seed=11)
    assert h2.equals(h4, ignore=(*TIMING_FIELDS, "bytes_down"))
    assert sum(len(r["active"]) for r in h2.records) < 30 * len(toy_datas)  # partial participation happened


def test_algorithm4_local_coins_same_law(toy_datas):
    """Independent coins drawn by the clients: same law of Ŝ_T (two-sample test on mean and variance)."""
    R, T = 300, 6
    finals = {}
    for mode in ("select", "compress-local"):
        finals[mode] = np.array([
            FedMM(InverseToy(), **_alg_kwargs(), participation_mode=mode).run(toy_datas, T, seed=s).state["S"][0]
            for s in range(R)
        ])
    a, b = finals["select"], finals["compress-local"]
    assert not np.array_equal(a, b)  # uncoupled randomness
    se = np.sqrt(a.var(ddof=1) / R + b.var(ddof=1) / R)
    assert abs(a.mean() - b.mean()) <= 4.5 * se
    # Variance ratio of two independent samples of size R: log-ratio has sd ≈ sqrt(2/(R-1)) (× kurtosis factor).
    assert abs(np.log(a.var(ddof=1) / b.var(ddof=1))) <= 6 * np.sqrt(2 / (R - 1))


# --------------------------------------------------------------------------- control variates
def test_control_variates_cancel_with_homogeneous_clients_and_no_compression():
    rng = np.random.default_rng(12)
    X = rng.standard_normal((80, 5))
    data = (X, X @ rng.standard_normal(5))
    datas = [data] * 4
    model = _lasso_model(datas)
    runs = []
    for alpha, init in ((0.0, "zero"), (0.4, "zero"), (0.7, "oracle")):
        traj = []
        FedMM(model, participation_prob=1.0, control_variate_step=alpha, step=0.3, batch_size=10,
              control_variates=init).run(
            datas, 20, seed=2, callback=lambda t, state: traj.append(state["statistic"].copy()))
        runs.append(np.array(traj))
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(runs[2], runs[0], rtol=1e-12, atol=1e-13)


# --------------------------------------------------------------------------- runtimes and reproducibility
@pytest.mark.parametrize("oracle,extra", [("minibatch", {}), ("spider", {"k_in": 3})])
def test_threaded_backends_and_repeated_runs_identical(oracle, extra):
    rng = np.random.default_rng(13)
    datas = _regression_clients(rng, n_clients=7)
    model = _lasso_model(datas)
    ref = None
    for n_threads in (1, 2):
        for backend in ("auto", "python"):
            algo = FedMM(model, participation_prob=0.6, control_variate_step=0.2, step=0.3, batch_size=8, oracle=oracle,
                         n_threads=n_threads, backend=backend, **extra)
            h = algo.run(datas, 12, seed=21, evaluate_every=4)
            if ref is None:
                ref = h
            assert h.equals(ref)
    assert not FedMM(model, participation_prob=0.6, control_variate_step=0.2, step=0.3, batch_size=8, oracle=oracle,
                     **extra).run(datas, 12, seed=22).equals(ref)


def test_history_fields_and_json_round_trip(tmp_path, toy_datas):
    h = FedMM(InverseToy(), participation_prob=0.5, control_variate_step=0.1, step=0.5, batch_size=4).run(
        toy_datas, 6, seed=1, evaluate_every=2)
    g = ParameterAveraging(InverseToy(), participation_prob=0.5, control_variate_step=0.1, step=0.5, batch_size=4).run(
        toy_datas, 6, seed=1, evaluate_every=2)
    for rec in h.records:
        assert {"t", "gamma", "E_s", "E_ps", "active", "bytes_up", "bytes_down", "wall_time"} <= set(rec)
        assert rec["bytes_up"] == len(rec["active"]) * Identity().payload_nbytes(1)
    for rec in g.records:
        assert {"t", "gamma", "E_p"} <= set(rec)
        assert ("E_sp" in rec) == ("objective" in rec)  # E_sp at the objective's cadence by default
    assert np.isfinite(h.column("objective")[1::2]).all() and np.isnan(h.column("objective")[0::2]).all()
    path = tmp_path / "h.json"
    h.save(path)
    assert History.load(path).equals(h, ignore=())
    # The same seed gives both algorithms the same start θ_0.
    assert h.config["initial_objective"] == g.config["initial_objective"]


def test_E_s_and_E_ps_match_the_definitions(toy_datas):
    states = []
    h = FedMM(InverseToy(), participation_prob=0.5, control_variate_step=0.1, step=("sqrt", 0.5), batch_size=4).run(
        toy_datas, 8, seed=3, callback=lambda t, state: states.append((state["statistic"].copy(),
                                                                       state["theta"].copy())))
    S0 = InverseToy().T  # noqa: F841 - only the differences below matter
    for t in range(1, 8):
        gamma = 0.5 / np.sqrt(0.5 + t + 1)
        assert h.records[t]["gamma"] == pytest.approx(gamma, rel=1e-15)
        ds = states[t][0] - states[t - 1][0]
        dp = states[t][1] - states[t - 1][1]
        assert h.records[t]["E_s"] == pytest.approx(float(ds @ ds) / gamma**2, rel=1e-12)
        assert h.records[t]["E_ps"] == pytest.approx(float(dp @ dp) / gamma**2, rel=1e-12)


# --------------------------------------------------------------------------- argument checks
@pytest.mark.parametrize("kwargs,exc,match", [
    ({"participation_prob": 0.0}, ValueError, "participation_prob"),
    ({"participation_prob": 1.5}, ValueError, "participation_prob"),
    ({"participation_prob": True}, TypeError, "participation_prob"),
    ({"clients_per_round": 0}, ValueError, "clients_per_round"),
    ({"clients_per_round": 2.5}, TypeError, "clients_per_round"),
    ({"clients_per_round": 2, "participation_prob": 0.5}, ValueError, "at most one of 'clients_per_round'"),
    ({"clients_per_round": 2, "participation_mode": "compress-local"}, ValueError, "participation_prob"),
    ({"backend": "gpu"}, ValueError, "backend"),
    ({"control_variate_step": -0.1}, ValueError, "control_variate_step"),
    ({"step": 0.0}, ValueError, "step"),
    ({"oracle": "sgd"}, ValueError, "oracle"),
    ({"oracle": "spider", "batch_size": 3}, ValueError, "k_in"),
    ({"control_variates": "ones"}, ValueError, "control_variates"),
    ({"n_threads": 0}, ValueError, "n_threads"),
])
def test_bad_configuration_raises(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        FedMM(InverseToy(), **kwargs)


def test_build_makes_the_clients_build_client_makes():
    """A remote worker builds its one client with build_client; the in-process build derives every client's key
    in one pass and checks the data once: the same clients (streams, compressors, participation)."""
    rng = np.random.default_rng(0)
    datas = [rng.exponential(size=5 + i % 3) + 0.5 for i in range(23)]
    compressors = [StochasticRounding(bits=4 + i % 3) for i in range(23)]
    algo = FedMM(InverseToy(), clients_per_round=7, compressor=compressors)
    _, clients = algo.build(datas, seed=11)
    for i, c in enumerate(clients):
        alone = algo.build_client(i, datas[i], n_clients=23, seed=11)
        np.testing.assert_array_equal(c.stream.key, alone.stream.key)
        assert c.compressor is alone.compressor is compressors[i]
        assert (c.index, c.p, c.control_variate_step) == (alone.index, alone.p, alone.control_variate_step) == (
            i, 7 / 23, algo.control_variate_step)
        np.testing.assert_array_equal(c.stream.at(2).random(3), alone.stream.at(2).random(3))
    with pytest.raises(ValueError, match=r"one compressor per client \(n_clients=22\), got 23"):
        algo.build_client(0, datas[0], n_clients=22, seed=11)


def test_bad_run_arguments_raise(toy_datas):
    with pytest.raises(ValueError, match="one compressor per client"):
        FedMM(InverseToy(), compressor=[Identity()] * 2).run(toy_datas, 1)
    with pytest.raises(ValueError, match="clients_per_round"):
        FedMM(InverseToy(), clients_per_round=10).run(toy_datas, 1)
    with pytest.raises(ValueError, match=r"datas\[1\].*at least one sample"):
        FedMM(InverseToy()).run([toy_datas[0], np.zeros(0)], 1)
    with pytest.raises(ValueError, match=r"datas\[0\].*finite"):
        FedMM(InverseToy()).run([np.array([1.0, np.nan])], 1)
    with pytest.raises(ValueError, match="at least one client"):
        FedMM(InverseToy()).run([], 1)
    with pytest.raises(ValueError, match="weights"):
        FedMM(InverseToy(), weights=[1.0, 2.0]).run(toy_datas, 1)
    with pytest.raises(ValueError, match="'init'"):
        FedMM(InverseToy()).run(toy_datas, 1, init=np.array([-1.0]))
    with pytest.raises(TypeError, match="positional"):
        FedMM(InverseToy(), 0.5)
    with pytest.raises(ValueError, match="seed"):
        FedMM(InverseToy()).run(toy_datas, 1, seed=-3)


class _BrokenCompressor:
    """Returns a message of the wrong length."""

    def encode(self, x, rng):
        return Identity().encode(np.append(x, 0.0), rng)

    def decode(self, payload):
        return Identity().decode(payload)


def test_compressor_for_wrong_length_raises(toy_datas):
    with pytest.raises(ValueError, match="length 1"):
        FedMM(InverseToy(), compressor=_BrokenCompressor()).run(toy_datas, 1)


def test_server_rejects_malformed_payload(toy_datas):
    server, clients = FedMM(InverseToy()).build(toy_datas, seed=0)
    ids = server.select(0)
    with pytest.raises(ValueError):
        server.aggregate(0, {ids[0]: b"garbage"})


# --------------------------------------------------------------------------- SPIDER oracle
def test_spider_oracle_removes_the_minibatch_noise_floor():
    """VR-FedEM's SPIDER estimator (FedEM paper Alg. 2): with a constant step, minibatch SA stalls at a
    noise floor while SPIDER (full refresh every k_in rounds) converges to the exact fixed point."""
    rng = np.random.default_rng(14)
    datas = _regression_clients(rng, n_clients=3, n=80)
    model = _lasso_model(datas)
    X = np.concatenate([d[0] for d in datas])
    y = np.concatenate([d[1] for d in datas])
    exact = FedMM(model, step=1.0, oracle="full").run(datas, 2000, seed=0).state["theta"]
    kw = dict(participation_prob=1.0, step=0.5, batch_size=4)
    err = {}
    for oracle, extra in (("minibatch", {}), ("spider", {"k_in": 10})):
        err[oracle] = np.mean([
            np.linalg.norm(FedMM(model, oracle=oracle, **kw, **extra).run(datas, 300, seed=s).state["theta"] - exact)
            for s in range(3)
        ])
    assert err["spider"] < 1e-3 * err["minibatch"], err
    # Single node: SA-SSMM with the same oracle.
    # (the error decays geometrically, about 100x per 100 rounds here: 400 rounds clear the bound by 50x)
    single = SASSMM(model, step=0.5, batch_size=4, oracle="spider", k_in=10).run((X, y), 400, seed=0)
    central = SASSMM(model, step=1.0, oracle="full").run((X, y), 2000, seed=0)
    assert np.linalg.norm(single.state["theta"] - central.state["theta"]) < 1e-3 * err["minibatch"]


# --------------------------------------------------------------------------- message-only protocol
def test_bytes_up_arrays_down_protocol_reproduces_run(toy_datas):
    """A runtime that only moves Broadcast arrays down and bytes up gives the in-process result."""
    from fedmm.algorithms import Broadcast

    algo = FedMM(InverseToy(), participation_prob=0.5, compressor=StochasticRounding(bits=8), control_variate_step=0.2,
                 step=0.3,
                 batch_size=4, control_variates="oracle")
    ref = algo.run(toy_datas, 8, seed=5)  # default backend
    server, clients = algo.build(toy_datas, seed=5)
    like = server.theta

    def deliver(message):
        return Broadcast.from_arrays([np.array(a, copy=True) for a in message.to_arrays()], algo.model, like)

    setup = deliver(server.setup_message())
    server.setup_aggregate({c.index: c.setup(setup) for c in clients})
    for t in range(8):
        ids = server.select(t)
        message = deliver(server.broadcast(t))
        payloads = {i: clients[i].step(message) for i in ids}
        assert all(type(b) is bytes for b in payloads.values())
        server.aggregate(t, payloads)
    np.testing.assert_array_equal(server.S, ref.state["S"])


# --------------------------------------------------------------------------- the one vocabulary (issue 24)
@pytest.mark.parametrize("algorithm", ["FedMM", "ParameterAveraging", "SASSMM"])
def test_callback_state_is_read_only_with_params_theta_and_statistic(algorithm, toy_datas):
    seen = []
    callback = lambda t, state: seen.append(state)  # noqa: E731
    if algorithm == "SASSMM":
        h = SASSMM(InverseToy(), step=0.5, batch_size=10).run(toy_datas[0], 3, seed=1, callback=callback)
    else:
        cls = FedMM if algorithm == "FedMM" else ParameterAveraging
        h = cls(InverseToy(), step=0.5, control_variate_step=0.5).run(toy_datas, 3, seed=1, callback=callback)
    assert len(seen) == 3
    last = seen[-1]
    np.testing.assert_array_equal(last["params"]["theta"], h.params["theta"])
    np.testing.assert_array_equal(np.atleast_1d(last["theta"]), h.state["theta"])
    if algorithm == "ParameterAveraging":
        assert last["statistic"] is None
    else:
        np.testing.assert_array_equal(last["statistic"], h.state["S"])
    with pytest.raises(TypeError):
        last["params"] = {}
