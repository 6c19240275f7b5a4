# SPDX-License-Identifier: BSD-3-Clause
"""``fedmm experiment ot-ablation`` end to end at a tiny size (d = 4, a few rounds): files, table, arms, errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

import fedmm  # noqa: E402
from fedmm.cli import main  # noqa: E402
from fedmm.experiments.ot_ablation import ARMS, OTAblationConfig  # noqa: E402
from reference import cli_status  # noqa: E402

TINY = ["--benchmark", "hard", "--dims", "4", "--rounds", "3", "--clients", "2", "--per-client", "30",
        "--n-target", "60", "--hidden-sizes", "8,8", "--batch-size", "16", "--few-theta-steps", "1",
        "--theta-steps", "4", "--identity-steps", "5", "--evaluate-every", "2", "--n-eval", "50", "--sgd-steps", "1",
        "--fedmm-steps", "1e-3,1e-2", "--fedadam-lrs", "1e-3", "--central-steps", "1e-3"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ot_ablation")
    status = main(["experiment", "ot-ablation", *TINY, "--seeds", "2", "--first-seed", "1", "--quiet",
                   "--out", str(out)])
    return status, out


def test_tiny_ablation_writes_runs_table_and_figure(tiny_run):
    status, out = tiny_run
    assert status == 0
    runs = fedmm.load(out / "ot_ablation_histories.json")
    for arm in ARMS:
        assert f"d=4/{arm}/seed=1" in runs and f"d=4/{arm}/seed=2" in runs
    # the two-value grid of the adam-omega arms: both tried on the first seed, the winner reused as its final run
    for arm in ("adam-omega", "adam-omega-theta"):
        assert {f"d=4/{arm}(step=0.001)/seed=1", f"d=4/{arm}(step=0.01)/seed=1"} <= set(runs)
    # what each arm is: Algorithm 3's SGD step, Adam on ω, θ-steps, FedAdam's θ budget
    assert runs["d=4/alg3/seed=1"].config["omega_step"] == "sgd"
    assert runs["d=4/alg3/seed=1"].config["theta_steps"] == 1
    assert runs["d=4/adam-omega/seed=1"].config["omega_step"] == "adam"
    assert runs["d=4/adam-omega/seed=1"].config["theta_steps"] == 1
    assert runs["d=4/adam-omega-theta/seed=1"].config["theta_steps"] == 4
    assert runs["d=4/fedadam/seed=1"].config["theta_steps"] == 0
    assert runs["d=4/fedadam-theta/seed=1"].config["theta_steps"] == 4
    # centralized: one client with all 2 x 30 samples, 2 iterations per round with 4 / 2 θ-steps each
    central = runs["d=4/central/seed=1"]
    assert central.config["n_clients"] == 1 and len(central) == 3 * 2 and central.config["theta_steps"] == 2
    for arm in ARMS:
        if arm != "central":
            assert runs[f"d=4/{arm}/seed=1"].config["n_clients"] == 2 and len(runs[f"d=4/{arm}/seed=1"]) == 3
    summary = json.loads((out / "ot_ablation_summary.json").read_text())
    entry = summary["dimensions"]["4"]
    assert entry["rounds"] == [0, 2, 3]
    for arm in ARMS:
        a = entry["arms"][arm]
        curves = np.array(list(a["curves"].values()))
        assert curves.shape == (2, 3) and np.isfinite(curves).all()
        assert a["final_mean"] == pytest.approx(curves[:, -1].mean())
        assert a["best_mean"] == pytest.approx(curves.min(axis=1).mean())
        h = runs[f"d=4/{arm}/seed=1"]
        assert curves[0, 0] == h.config["initial_evaluation"]["l2_uvp"]
        assert curves[0, -1] == np.asarray(h["l2_uvp"])[-1]  # the curve is the run's evaluation
    arms = [row["arm"] for row in summary["rows"]]
    assert arms == list(ARMS) + ["linear map", "best affine map", "identity map"]
    assert (out / "ot_ablation_summary.txt").read_text().startswith("d ")
    assert (out / "ot_ablation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, option", [
    (["--sgd-steps", "2"], "--sgd-steps"),
    (["--theta-steps", "3"], "--theta-steps"),
    (["--arms", "fedavg"], "--arms"),
    (["--benchmark", "korotin"], "--benchmark"),
    (["--dims", "0"], "--dims"),
    (["--n-eval", "1"], "--n-eval"),
    (["--benchmark", "icnn"], "--dims"),  # TINY's d = 4 has no shipped weights
    (["--benchmark", "icnn", "--dims", "16", "--benchmark-seed", "2"], "--benchmark-seed"),
])
def test_bad_values_exit_2_naming_the_option(argv, option, tmp_path, capsys):
    assert cli_status(["experiment", "ot-ablation", *TINY, *argv, "--quiet", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert option in err and "Traceback" not in err


def test_config_defaults_are_the_experiments():
    c = OTAblationConfig()
    assert (c.benchmark, c.dims, c.n_clients, c.batch_size, c.theta_steps, c.few_theta_steps) == \
        ("icnn", (16,), 10, 128, 30, 10)
    assert c.validated().arms == tuple(ARMS)
