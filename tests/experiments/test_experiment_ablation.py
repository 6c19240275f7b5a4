# SPDX-License-Identifier: BSD-3-Clause
"""``fedmm experiment ablation`` (why the Θ-space baseline rises) at tiny sizes, and its measures."""
from __future__ import annotations

import json

import numpy as np
import pytest

import fedmm
from fedmm.algorithms import ParameterAveraging
from fedmm.cli import main
from fedmm.experiments.ablation import MAP_NAMES, map_comparison, median_atom_norm, objective_rise
from fedmm.models import DictionaryLearning
from reference import cli_status, lasso_objective, lasso_sklearn

#: 200 points of dimension 6 in 4 k-means clients of 50, K = 4 atoms, 2 active clients, minibatches of 10.
TINY = ["--samples", "200", "--p", "6", "--K", "4", "--clients", "4", "--active-clients", "2", "--batch-size", "10",
        "--rounds", "8", "--evaluate-every", "2", "--fixed-point-rounds", "5", "--map-points", "3",
        "--minibatch-draws", "2", "--p-sweep", "5,6", "--ridge-sweep", "0.2,0.05", "--no-progress"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ablation")
    status = main(["experiment", "ablation", *TINY, "--seeds", "2", "--first-seed", "3", "--quiet", "--out", str(out)])
    return status, out


def test_tiny_run_writes_runs_figure_and_summary(tiny_run):
    status, out = tiny_run
    assert status == 0
    runs = fedmm.load(out / "ablation.json")
    assert isinstance(runs, fedmm.RunSet)
    curves = {name.rsplit("/seed=", 1)[0] for name in runs}
    assert curves == {"a/FedMM", "a/ParameterAveraging", "b/full participation, no compression",
                      "b/full local batches", "b/full batches + participation, no compression", "d/p=5",
                      "d/eta=0.05", "e/ParameterAveraging, gamma=0.1", "e/FedMM, gamma=0.1", "e/MM (FedMM, gamma=1)"}
    assert {str(h.config["seed"]) for h in runs.values()} == {"3", "4"}
    for name, h in runs.items():
        expected_rounds = 5 if name.startswith("e/") else 8
        assert len(h) == expected_rounds, name
        norms = h.series("median_atom_norm")
        objective = h.series("objective")
        # recorded at θ_0, at the cadence and at the last round; the last is the final dictionary's norm
        assert np.isfinite(norms[0]) and np.isfinite(objective[0])
        assert norms[-1] == pytest.approx(median_atom_norm(h.params["D"]), rel=1e-12)
    # the p sweep ran on data of dimension 5
    assert runs["d/p=5/seed=3"].params["D"].shape == (5, 4)
    maps = runs.metadata["maps"]
    assert sorted(maps) == ["3", "4"]
    assert maps["3"]["rounds"] == [0, 4, 8]
    # the baseline's iterate at its last round is the run's final dictionary
    final = runs["a/ParameterAveraging/seed=3"]
    assert maps["3"]["baseline"][-1]["median_atom_norm"] == pytest.approx(median_atom_norm(final.params["D"]))
    table = json.loads((out / "ablation_summary.json").read_text())
    panels = [row["panel"] for row in table["rows"]]
    assert panels == sorted(panels) and set(panels) == {"(a)", "(b)", "(c)", "(d)", "(e)"}
    sweep = [row["curve"] for row in table["rows"] if row["panel"] == "(d)"]
    assert sweep == ["ParameterAveraging p=5", "ParameterAveraging p=6 (eta=0.2)",
                     "ParameterAveraging eta=0.2 (p=6)", "ParameterAveraging eta=0.05 (p=6)"]
    assert (out / "ablation_summary.txt").read_text().startswith("panel")
    assert (out / "ablation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, option", [
    (["--active-clients", "5"], "--active-clients"),  # more than the 4 clients
    (["--batch-size", "60"], "--batch-size"),  # larger than a client's 50 samples
    (["--fixed-point-step", "2"], "--fixed-point-step"),
    (["--p-sweep", "0,3"], "--p-sweep"),
    (["--ridge-sweep", "x"], "--ridge-sweep"),
    (["--bits", "1"], "--bits"),
    (["--samples", "3"], "--samples"),
])
def test_bad_options_exit_2_naming_the_option(argv, option, tmp_path, capsys):
    assert cli_status(["experiment", "ablation", *TINY, *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"argument {option}" in err
    assert not (tmp_path / "ablation.png").exists()


def test_median_atom_norm_and_rise_against_numpy():
    rng = np.random.default_rng(0)
    theta = rng.standard_normal((7, 5))
    assert median_atom_norm(theta) == pytest.approx(np.median(np.linalg.norm(theta, axis=0)), rel=1e-14)
    curve = np.array([9.0, np.nan, 4.0, 5.0, np.nan, 4.5])
    assert objective_rise(curve) == {"min": 4.0, "argmin": 2, "final": 4.5, "rise": 0.125}
    with pytest.raises(ValueError, match="'theta'"):
        median_atom_norm(np.ones(3))


def _reference_maps(datas, theta, lam, eta):
    """T(Σμ s̄_i) and Σμ T(s̄_i) from scikit-learn's LASSO codes and the ridge closed form."""
    sizes = np.array([len(d) for d in datas], dtype=float)
    mu = sizes / sizes.sum()
    stats = []
    for Z in datas:
        H = lasso_sklearn(theta, Z.T, lam)
        stats.append((H @ H.T / len(Z), Z.T @ H.T / len(Z)))
    K = theta.shape[1]

    def ridge(A, B):
        return np.linalg.solve(A + 2 * eta * np.eye(K), B.T).T  # B (A + 2ηI)^{-1}, A symmetric

    t_of_mean = ridge(sum(m * A for m, (A, _) in zip(mu, stats)), sum(m * B for m, (_, B) in zip(mu, stats)))
    mean_of_t = sum(m * ridge(A, B) for m, (A, B) in zip(mu, stats))
    return t_of_mean, mean_of_t


def _objective(datas, theta, lam, eta):
    Z = np.vstack(datas).T
    return float(np.mean(lasso_objective(theta, Z, lasso_sklearn(theta, Z, lam), lam))) + eta * np.sum(theta ** 2)


def test_maps_against_scikit_learn_lasso_reference():
    """Panel (c)'s deterministic maps equal an independent computation, and they differ on heterogeneous data."""
    rng = np.random.default_rng(1)
    datas = [rng.standard_normal((25, 5)) + 2.0, rng.standard_normal((15, 5)) - 1.0]
    theta = rng.standard_normal((5, 3))
    lam, eta = 0.1, 0.2
    model = DictionaryLearning(3, lam, ridge=eta)
    got = map_comparison(model, datas, theta, batch_size=5, draws=3, rng=0)
    t_of_mean, mean_of_t = _reference_maps(datas, theta, lam, eta)
    # LASSO solves to a relative duality gap of 1e-9: statistics and maps agree to ~1e-6
    for name, ref in zip(MAP_NAMES[:2], (t_of_mean, mean_of_t)):
        assert got[name]["median_atom_norm"] == pytest.approx(median_atom_norm(ref), rel=1e-6)
        assert got[name]["objective"] == pytest.approx(_objective(datas, ref, lam, eta), rel=1e-6)
    # averaging T over heterogeneous clients is not T of the average
    assert abs(median_atom_norm(t_of_mean) - median_atom_norm(mean_of_t)) > 1e-3


def test_one_client_full_batch_baseline_step_is_t_of_mean_statistic():
    """One client, full batch, γ = 1, α = 0: the baseline's step, the three maps and MM coincide."""
    rng = np.random.default_rng(2)
    data = rng.standard_normal((40, 6))
    model = DictionaryLearning(4, 0.1, ridge=0.2)
    algorithm = ParameterAveraging(model, step=1.0, batch_size=None)
    server, _ = algorithm.build([data], seed=5)
    theta0 = np.array(server.theta)
    history = algorithm.run([data], 1, seed=5)
    # a "minibatch" of all 40 samples drawn without replacement is the full batch
    maps = map_comparison(model, [data], theta0, batch_size=40, draws=2, rng=0)
    values = [maps[name]["median_atom_norm"] for name in MAP_NAMES]
    assert values == pytest.approx([values[0]] * 3, rel=1e-12)
    ref, _ = _reference_maps([data], theta0, 0.1, 0.2)
    assert median_atom_norm(history.params["D"]) == pytest.approx(median_atom_norm(ref), rel=1e-6)
    np.testing.assert_allclose(history.params["D"], ref, rtol=1e-5, atol=1e-7)
