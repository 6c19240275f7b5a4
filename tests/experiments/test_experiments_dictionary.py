# SPDX-License-Identifier: BSD-3-Clause
"""End-to-end tests of ``fedmm experiment fig1|fig2`` (FedMM paper §6) at small sizes."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import fedmm
from fedmm.cli import build_parser, main
from fedmm.experiments._common import apply_config, seed_bands
from fedmm.experiments.dictionary import DictionaryConfig, config_from_args, run_dictionary_figure

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: A homogeneous setting small enough for the test suite: 40 points of dimension 6, K = 4 atoms,
#: 4 clients with 2 active per round, minibatches of 10.
SMALL = ["--samples", "40", "--p", "6", "--K", "4", "--clients", "4", "--active-clients", "2",
         "--batch-size", "10", "--no-progress"]


def _curve(history, field: str) -> np.ndarray:
    return history.column(field)


def _load(path: Path) -> dict:
    """A fig1/fig2 RunSet file as the experiment's result: metadata plus runs per curve, in seed order."""
    runs = fedmm.load(path)
    assert isinstance(runs, fedmm.RunSet)
    result = dict(runs.metadata)
    result["runs"] = {name: [runs[k] for k in runs if k.split("/seed=")[0] == name] for name in result["algorithm"]}
    return result


@pytest.fixture(scope="module")
def fig1_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fig1")
    status = main(["experiment", "fig1", "--setting", "homogeneous", "--rounds", "20", "--seeds", "2",
                   "--beta", "0.05", "--out", str(out), *SMALL])
    return status, out


def test_fig1_command_writes_json_png_and_summary(fig1_run, capsys):
    status, out = fig1_run
    assert status == 0
    png = (out / "fig1.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    result = _load(out / "fig1_homogeneous.json")
    assert result["beta"] == {"FedMM": 0.05, "ParameterAveraging": 0.05}
    assert set(result["runs"]) == {"FedMM", "ParameterAveraging"}
    for name, fields in (("FedMM", ("E_s", "E_ps")), ("ParameterAveraging", ("E_p", "E_sp"))):
        histories = result["runs"][name]
        assert [h.config["seed"] for h in histories] == [0, 1]
        for h in histories:
            assert len(h) == 20
            for field in (*fields, "objective"):
                values = _curve(h, field)
                assert np.isfinite(values).all() and (values >= 0).all(), (name, field)
            assert all(len(r["active"]) == 2 for r in h.records)
    # The two seeds are different runs, each reproducible: same seed, same numbers.
    a, b = result["runs"]["FedMM"]
    assert not np.array_equal(_curve(a, "E_s"), _curve(b, "E_s"))
    summary = (out / "fig1_summary.txt").read_text()
    assert "FedMM" in summary and "ParameterAveraging" in summary and "homogeneous" in summary
    table = json.loads((out / "fig1_summary.json").read_text())
    assert [row["curve"] for row in table["rows"]] == ["FedMM", "ParameterAveraging"]
    assert all(row["beta"] == "0.05" and row["runs ok"] == "2/2" for row in table["rows"])


def test_fig1_fedmm_objective_non_increasing_on_homogeneous_data(fig1_run):
    """FedMM paper §6: 'when using FedMM, [the objective] monotonically decays'."""
    _, out = fig1_run
    result = _load(out / "fig1_homogeneous.json")
    histories = result["runs"]["FedMM"]
    _, mean, _ = seed_bands([_curve(h, "objective") for h in histories])
    initial = np.mean([h.config["initial_objective"] for h in histories])
    curve = np.concatenate([[initial], mean])
    assert (np.diff(curve) <= 0).all(), np.diff(curve)
    assert curve[-1] < 0.95 * curve[0]


def test_seeds_in_parallel_processes_give_the_same_runs(fig1_run, tmp_path):
    _, out = fig1_run
    status = main(["experiment", "fig1", "--setting", "homogeneous", "--rounds", "20", "--seeds", "2",
                   "--beta", "0.05", "--out", str(tmp_path), "--jobs", "2", *SMALL])
    assert status == 0
    serial = fedmm.load(out / "fig1_homogeneous.json")
    parallel = fedmm.load(tmp_path / "fig1_homogeneous.json")
    assert list(serial) == list(parallel)
    assert all(serial[name].equals(parallel[name]) for name in serial)


def test_fig2_full_batches_and_beta_tuning(tmp_path):
    out = tmp_path / "fig2"
    status = main(["experiment", "fig2", "--setting", "homogeneous", "--rounds", "6", "--seeds", "1",
                   "--tune-rounds", "4", "--beta-grid", "0.005,0.05", "--extend-grid", "0", "--out", str(out),
                   *SMALL])
    assert status == 0
    result = _load(out / "fig2_homogeneous.json")
    assert set(result["runs"]) == {"alpha=0", "alpha=0.01"}
    for name, scores in result["tuning"].items():
        assert set(scores) == {"0.005", "0.05"}
        best = min(scores, key=lambda b: (scores[b], float(b)))
        assert result["beta"][name] == float(best)
        history = result["runs"][name][0]
        assert history.config["batch_size"] is None and history.config["control_variate_step"] == float(name[6:])
    assert (out / "fig2.png").is_file()


def test_heterogeneous_setting_uses_equal_kmeans_clients(tmp_path):
    config = DictionaryConfig(figure="fig1", settings=("heterogeneous",), seeds=1, rounds=3, beta=0.05,
                              n_samples=60, p=5, K=3, n_clients=3, active_clients=2, batch_size=5)
    result = run_dictionary_figure(config, tmp_path, progress=False, log=lambda s: None)
    history = result["results"]["heterogeneous"]["runs"]["FedMM"][0]
    assert history["config"]["n_clients"] == 3 and len(history["records"]) == 3
    assert len(fedmm.load(tmp_path / "fig1_heterogeneous.json")["FedMM/seed=0"]) == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seeds", "0"], "argument --seeds: expected an integer >= 1, got '0'"),
        (["--rounds", "-3"], "argument --rounds: expected an integer >= 1, got '-3'"),
        (["--active-clients", "30"], "argument --active-clients: expected at most --clients = 20"),
        (["--beta", "-0.1"], "argument --beta: expected a finite number > 0"),
        (["--beta-grid", "0.1,0"], "argument --beta-grid"),
        (["--setting", "ratings"], "ratings.dat"),
        (["--setting", "ratings", "--ratings", "/nonexistent/ratings.dat"],
         "argument --ratings: expected an existing file"),
        (["--bits", "40"], "argument --bits: expected 2..32 bits"),
    ],
)
def test_bad_options_give_clear_errors(tmp_path, capsys, args, message):
    argv = ["experiment", "fig1", *args, "--out", str(tmp_path)]
    try:
        status = main(argv)
    except SystemExit as exc:  # errors found by argparse itself
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    assert "fedmm experiment fig1: error:" in err and message in err and "Traceback" not in err


def test_unknown_setting_and_bad_config_files(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["experiment", "fig1", "--setting", "moons", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "invalid choice: 'moons'" in capsys.readouterr().err
    bad_key = tmp_path / "bad.toml"
    bad_key.write_text('figure = "fig1"\nrownds = 3\n')
    assert main(["experiment", "fig1", "--config", str(bad_key), "--out", str(tmp_path)]) == 2
    assert "unknown key(s) ['rownds']" in capsys.readouterr().err
    broken = tmp_path / "broken.toml"
    broken.write_text("seeds = = 3\n")
    assert main(["experiment", "fig1", "--config", str(broken), "--out", str(tmp_path)]) == 2
    assert "broken.toml is not valid TOML" in capsys.readouterr().err
    assert main(["experiment", "fig2", "--config", str(EXAMPLES / "fig1_dictionary.toml")]) == 2
    assert "figure = 'fig1' but the command is 'fig2'" in capsys.readouterr().err
    bad_value = tmp_path / "bad_value.toml"
    bad_value.write_text("rounds = -2\n")
    with pytest.raises(SystemExit) as exc:
        main(["experiment", "fig1", "--config", str(bad_value)])
    assert exc.value.code == 2 and "argument --rounds: expected an integer >= 1, got '-2'" in capsys.readouterr().err


def _parse_with_config(argv: list[str]):
    args = build_parser().parse_args(argv)
    return apply_config(args, argv[2:]) if args.config is not None else args


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("fig*.toml")), ids=lambda p: p.name)
def test_example_configs_are_valid(path, tmp_path):
    ratings = tmp_path / "ratings.dat"
    ratings.write_text("1::1::5::0\n")
    figure = path.name[:4]
    args = _parse_with_config(["experiment", figure, "--config", str(path), "--ratings", str(ratings)])
    config, out_dir = config_from_args(args)
    assert config.figure == figure and out_dir.startswith("out/")
    assert config.n_clients == 20 and config.active_clients == 10 and config.lam == 0.1 and config.ridge == 0.2
    assert all(0.001 <= b <= 0.05 for b in config.beta_grid)


def test_cli_overrides_config_file(tmp_path):
    args = _parse_with_config(["experiment", "fig1", "--config", str(EXAMPLES / "fig1_dictionary.toml"),
                               "--seeds", "3", "--out", str(tmp_path)])
    config, out_dir = config_from_args(args)
    assert config.seeds == 3 and config.rounds == 300 and out_dir == str(tmp_path)
    assert config.jobs == 2 and config.evaluate_every == 5  # from the file


def test_version_flag(capsys):
    import fedmm

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and fedmm.__version__ in capsys.readouterr().out


def test_seed_bands_mean_and_std_skip_missing_values():
    curves = [np.array([1.0, np.nan, 3.0, np.nan]), np.array([3.0, 2.0, np.nan, np.nan])]
    rounds, mean, std = seed_bands(curves)
    np.testing.assert_array_equal(rounds, [1, 2, 3])
    np.testing.assert_allclose(mean, [2.0, 2.0, 3.0])
    np.testing.assert_allclose(std, [1.0, 0.0, 0.0])


def test_summary_reports_failed_runs(fig1_run):
    from fedmm.experiments.dictionary import _summary_rows

    _, out = fig1_run
    result = json.loads((out / "fig1_homogeneous.json").read_text())
    result = {**result["metadata"],
              "runs": {name: [h for key, h in result["runs"].items() if key.startswith(name + "/")]
                       for name in result["metadata"]["algorithm"]}}
    result["runs"]["ParameterAveraging"][1] = {
        "algorithm": "ParameterAveraging", "records": [],
        "config": {"seed": 1, "failed_round": 7, "failure": "ValueError: non-finite"},
    }
    rows = {row[1]: row for row in _summary_rows("fig1", "homogeneous", result)}
    assert rows["FedMM"][3] == "2/2"
    assert rows["ParameterAveraging"][3] == "1/2 (failed at rounds [7])"
    assert "±" in rows["ParameterAveraging"][5]


def test_beta_tuning_defaults_to_the_reported_horizon_and_an_extending_grid():
    config = DictionaryConfig(rounds=123).validated()
    assert config.tune_rounds == 123 and config.extend_grid == 4
    assert DictionaryConfig(rounds=123, tune_rounds=40).validated().tune_rounds == 40
    args = build_parser().parse_args(["experiment", "fig1", "--rounds", "77"])
    config, _ = config_from_args(args)
    assert config.tune_rounds == 77 and config.extend_grid == 4


def test_tuning_score_is_the_mean_objective_over_the_last_tenth_of_the_rounds():
    from fedmm.experiments.dictionary import _tail_objective

    # 100 rounds, objective every 5 rounds: the last 10% are rounds 95 and 100
    records = [{"t": t, **({"objective": float(t)} if (t + 1) % 5 == 0 else {})} for t in range(100)]
    assert _tail_objective({"config": {}, "records": records}) == pytest.approx((95 + 100 - 2) / 2)
    records[50]["objective"] = {"__float__": "inf"}  # a diverged evaluation anywhere disqualifies the run
    assert _tail_objective({"config": {}, "records": records}) == float("inf")
    assert _tail_objective({"config": {"failure": "x"}, "records": []}) == float("inf")


def test_fig1_default_grid_extends_past_its_top_edge(tmp_path):
    # one grid value is always at an edge: the default extension tries 4 more (ratio 2), on 3 tuning rounds
    status = main(["experiment", "fig1", "--setting", "homogeneous", "--rounds", "3", "--seeds", "1",
                   "--beta-grid", "0.05", "--out", str(tmp_path), *SMALL])
    assert status == 0
    result = _load(tmp_path / "fig1_homogeneous.json")
    assert result["config"]["tune_rounds"] == 3
    for name, scores in result["tuning"].items():
        powers = np.log2(np.array([float(b) for b in scores]) / 0.05)
        np.testing.assert_allclose(powers, np.round(powers), atol=1e-9)  # 0.05 · 2^k
        best = np.log2(result["beta"][name] / 0.05)
        # four extensions, or fewer when the best value got inside the grid tried
        assert len(scores) == 5 or powers.min() < best < powers.max()
