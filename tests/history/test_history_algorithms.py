# SPDX-License-Identifier: BSD-3-Clause
"""Every algorithm's History: the value at θ_0 in the series, to_pandas/plot, the monitoring-time column,
and a save/load round trip that keeps the final parameter in the model's structure."""
import dataclasses

import numpy as np
import pytest
from reference import gmm_tied_loglik, nonsmooth_objective, nonsmooth_toy_data, poisson_latent_objective

from fedmm import History
from fedmm.algorithms import SASSMM, FedMM, ParameterAveraging
from fedmm.algorithms.fedmls import FedMLS
from fedmm.algorithms.nonsmooth import FedAvg, Scaffnew, Scaffold
from fedmm.models import DictionaryLearning, GaussianMixture, InverseToy, MissingValues, PoissonLatent
from fedmm.models.gmm import GaussianMixtureParams
from fedmm.models.missing import LowRankParams
from fedmm.models.nonsmooth import HingeSVM

N_ROUNDS, EVERY = 5, 2  # the objective is due after rounds t = 1, 3 and the last one, t = 4
DUE = [False, True, False, True, True]
SUPPORT = np.array([-1.0, -0.3, 0.4, 1.0])
PROBS = np.array([0.1, 0.4, 0.3, 0.2])


def _gmm_data(rng):
    centers = np.array([[0.0, 0.0], [4.0, 1.0]])
    return [np.vstack([c + rng.normal(size=(15, 2)) for c in centers]) for _ in range(3)]


def _surrogate_case(name):
    """(algorithm, datas, model, reference F(θ) over the pooled clients' data or None)."""
    rng = np.random.default_rng(3)
    if name in ("FedMM", "ParameterAveraging", "SASSMM"):
        datas = [rng.normal(size=(12, 5)) for _ in range(3)]
        model = DictionaryLearning(3, 0.1, 0.05, n_features=5)
        if name == "SASSMM":
            return SASSMM(model, step=1.0), datas[0], model, None
        cls = FedMM if name == "FedMM" else ParameterAveraging
        return cls(model, step=0.5), datas, model, None
    if name == "FedEM":  # FedMM on a Gaussian mixture with γ = 1 steps
        datas = _gmm_data(rng)
        model = GaussianMixture(2)

        def nll(theta, ds):
            return -np.mean([gmm_tied_loglik(d, theta.weights, theta.means, theta.covariance) for d in ds])
        return FedMM(model, step=1.0), datas, model, nll
    if name == "FedMissEM":
        theta = rng.normal(size=(6, 2)) @ rng.normal(size=(2, 4))
        datas = []
        for _ in range(3):
            X = theta + rng.normal(size=(10, 6, 4))
            datas.append((X, rng.random(X.shape) < 0.8))
        model = MissingValues(2, shape=(6, 4))
        return FedMM(model, step=1.0), datas, model, None
    if name == "FedMM-Poisson":
        datas = [rng.poisson(np.exp(0.8 + rng.choice(SUPPORT, size=40, p=PROBS))).astype(np.float64)
                 for _ in range(3)]
        model = PoissonLatent(SUPPORT, PROBS, lam=0.5)

        def objective(theta, ds):
            return np.mean([poisson_latent_objective(d, theta, SUPPORT, PROBS, 0.5) for d in ds])
        return FedMM(model, step=1.0), datas, model, objective
    raise AssertionError(name)


def _check_history(h, initial_objective):
    # t = 0 row: the objective at θ_0, in the series and in the data frame
    assert h.initial["objective"] == pytest.approx(initial_objective, rel=1e-9)
    assert h.initial["wall_time"] == 0.0
    objective = h.series("objective")
    assert objective[0] == h.initial["objective"]
    np.testing.assert_array_equal(objective[1:], h.column("objective"))
    assert np.isnan(objective[1:][np.logical_not(DUE)]).all() and np.isfinite(objective[1:][DUE]).all()
    pd = pytest.importorskip("pandas")
    df = h.to_pandas()
    assert df.index.tolist() == list(range(N_ROUNDS + 1)) and len(h) == N_ROUNDS
    assert df["objective"].isna().tolist() == [False, *np.logical_not(DUE).tolist()]
    assert df.loc[0, "t"] is pd.NA and df["t"].iloc[1:].tolist() == list(range(N_ROUNDS))
    evaluated = h.to_pandas(["objective"], dropna=True)
    assert evaluated.index.tolist() == [0, 2, 4, 5]
    np.testing.assert_array_equal(evaluated["objective"].to_numpy(dtype=np.float64), objective[[0, 2, 4, 5]])
    # monitor_time: cumulative, unchanged in rounds without monitoring (carried over exactly)
    monitor = h.series("monitor_time")
    assert monitor[0] >= 0.0 and np.all(np.diff(monitor) >= 0.0)
    for k, due in enumerate(DUE, start=1):
        if not due and h.algorithm != "ParameterAveraging":  # the baseline's E_sp is due every round
            assert monitor[k] == monitor[k - 1]
    # plot: the line is the evaluated objective against the rounds completed
    from matplotlib.figure import Figure

    line = h.plot(ax=Figure().add_subplot()).get_lines()[0]
    np.testing.assert_array_equal(line.get_xdata(), [0, 2, 4, 5])
    np.testing.assert_array_equal(line.get_ydata(), objective[[0, 2, 4, 5]])


def _round_trip(h, tmp_path):
    path = tmp_path / f"{h.algorithm}.json"
    h.save(path)
    g = History.load(path)
    assert g.equals(h, ignore=())  # timing columns too: the file keeps every float bit for bit
    assert set(g.params) == set(h.params) and g.theta is None
    return g


@pytest.mark.parametrize("name", ["FedMM", "ParameterAveraging", "SASSMM", "FedEM", "FedMissEM", "FedMM-Poisson"])
def test_surrogate_algorithms_history(name, tmp_path):
    algo, datas, model, reference = _surrogate_case(name)
    pooled = [datas] if name == "SASSMM" else datas
    S0 = model.init_statistic(pooled, np.random.default_rng(5))
    theta0 = model.T(S0)
    if name == "SASSMM":
        h = algo.run(datas, N_ROUNDS, seed=1, init=S0, evaluate_every=EVERY)
    else:
        h = algo.run(datas, N_ROUNDS, seed=1, init=S0, evaluate_every=EVERY, progress=False)
    sizes = np.array([model.n_samples(d) for d in pooled], dtype=np.float64)
    if reference is None:  # F(θ_0) = Σ_i μ_i f_i(θ_0) with the model's f_i
        initial = float(sizes / sizes.sum() @ [model.objective(d, theta0) for d in pooled])
    else:  # an independent formula (scipy.stats densities); equal-size clients
        assert np.all(sizes == sizes[0])
        initial = reference(theta0, pooled)
    _check_history(h, initial)
    g = _round_trip(h, tmp_path)
    # the final parameter in the model's structure, rebuilt from the saved file alone
    theta = model.theta_from_dict(g.params)
    assert type(theta) is type(h.theta)
    np.testing.assert_array_equal(model.theta_vector(theta), h.state["theta"])
    if isinstance(theta, GaussianMixtureParams):
        assert set(g.params) == {"weights", "means", "covariance"}
        for f in dataclasses.fields(theta):
            if f.compare:
                np.testing.assert_array_equal(getattr(theta, f.name), getattr(h.theta, f.name))
    elif isinstance(theta, LowRankParams):
        np.testing.assert_array_equal(theta.U, h.theta.U)
        np.testing.assert_array_equal(theta.V, h.theta.V)
    elif isinstance(model, DictionaryLearning):
        assert g.params["D"].shape == (5, 3)
        np.testing.assert_array_equal(theta, h.theta)


@pytest.mark.parametrize("cls,kwargs", [
    (FedMLS, dict(prox_weight=("inverse", 2.0), radius=5.0, local_steps=2)),
    (FedAvg, dict(local_lr=0.05, local_steps=2)),
    (Scaffold, dict(local_lr=0.05, local_steps=2)),
    (Scaffnew, dict(local_lr=0.05, communication_prob=0.5)),
])
def test_nonsmooth_family_history(cls, kwargs, tmp_path):
    datas = nonsmooth_toy_data("hinge", n_clients=3, m=12, d=3)
    h = cls(HingeSVM(), oracle="full", **kwargs).run(datas, N_ROUNDS, seed=2, evaluate_every=EVERY, progress=False)
    # x_0 = 0: every hinge term is max(0, 1 − 0) = 1, F(0) = (1/n) Σ_i m_i = 12 (checked against the reference)
    assert nonsmooth_objective("hinge", datas, np.zeros(4), True) == 12.0
    _check_history(h, 12.0)
    g = _round_trip(h, tmp_path)
    np.testing.assert_array_equal(g.params["x"], h.state["x"])
    np.testing.assert_array_equal(h.theta, h.state["x"])
    assert g.config["initial_objective"] == 12.0  # kept for readers of older files


def test_theta_dict_validation():
    gmm = GaussianMixture(2)
    with pytest.raises(ValueError, match="'covariance'"):
        gmm.theta_from_dict({"weights": [0.5, 0.5], "means": np.zeros((2, 2))})
    with pytest.raises(ValueError, match="single key 'D'"):
        DictionaryLearning(3, 0.1).theta_from_dict({"theta": np.zeros((2, 3))})
    with pytest.raises(ValueError, match="'U' and 'V'"):
        MissingValues(2).theta_from_dict({"U": np.zeros((3, 2))})
    with pytest.raises(TypeError, match="non-empty dict"):
        InverseToy().theta_from_dict({})


def test_default_theta_dict_round_trips_arrays_dicts_and_tuples():
    model = InverseToy()
    a, b = np.arange(6.0).reshape(2, 3), np.array([1.5, -2.0])
    assert set(model.theta_to_dict(a)) == {"theta"}
    np.testing.assert_array_equal(model.theta_from_dict(model.theta_to_dict(a)), a)
    back = model.theta_from_dict(model.theta_to_dict({"b": b, "a": a}))
    assert set(back) == {"a", "b"} and np.array_equal(back["a"], a) and np.array_equal(back["b"], b)
    back = model.theta_from_dict(model.theta_to_dict((a, b)))
    assert isinstance(back, tuple) and np.array_equal(back[0], a) and np.array_equal(back[1], b)
