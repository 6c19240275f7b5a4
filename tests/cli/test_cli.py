# SPDX-License-Identifier: BSD-3-Clause
"""One command-line interface for ``fedmm demo`` and every ``fedmm experiment``.

The shared options, their help and defaults, argparse-style errors (exit 2, the option named as typed,
no traceback), deprecated spellings, TOML configs, grid tuning at the edge of its grid and the JSON
every command writes (read back with :func:`fedmm.load`).
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import fedmm
from fedmm.cli import build_parser, main
from fedmm.experiments import experiment_modules
from fedmm.experiments._common import resolve_progress, tune_on_grid

EXPERIMENTS = ("fig1", "fig2", "fedem-fig1", "fedem-digits", "fedmissem", "fedmls")
COMMANDS = [("demo",)] + [("experiment", name) for name in EXPERIMENTS]
COMMON = ("--seeds", "--first-seed", "--rounds", "--jobs", "--out", "--config", "--progress", "--no-progress",
          "--quiet")


def _status(argv: list[str]) -> int:
    """``main(argv)``'s exit status, whether argparse exits or ``main`` returns."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_every_experiment_module_is_covered():
    parser = build_parser()
    for name in EXPERIMENTS:
        assert parser.parse_args(["experiment", name]).func is not None
    assert {"dictionary", "fedem", "fedmls"} <= set(experiment_modules())


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_lists_the_common_options_and_every_default(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*command, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for option in COMMON:
        assert option in text, option
    name = command[-1]
    assert f"results/{name}" in text  # --out has a default
    options = build_parser().parse_args(list(command)).command_parser.options
    assert set(o.lstrip("-").replace("-", "_") for o in COMMON if not o.startswith("--no-")) <= set(options)
    for dest, action in options.items():
        assert action.help and "default" in action.help, (name, dest)


BAD_VALUES = [
    # the list
    (["experiment", "fedmls", "--rounds", "-1"], "--rounds"),
    (["experiment", "fedmls", "--clients", "0"], "--clients"),
    (["experiment", "fedmls", "--lam-powers", "3", "-3"], "--lam-powers"),
    (["experiment", "fedmls", "--prox-weight-powers", "3", "-3"], "--prox-weight-powers"),
    (["experiment", "fedmls", "--step-powers", "0", "-1"], "--step-powers"),
    (["demo", "--rounds", "0"], "--rounds"),
    (["experiment", "fedem-digits", "--monitor-every", "0"], "--monitor-every"),
    (["experiment", "fedem-fig1", "--epochs", "-1"], "--epochs"),
    (["experiment", "fedem-fig1", "--step", "0"], "--step"),
    (["experiment", "fig1", "--active-clients", "30"], "--active-clients"),
    (["experiment", "fig1", "--setting", "ratings"], "--setting"),
    (["experiment", "fig2", "--ratings", "/nonexistent/ratings.dat"], "--ratings"),
    # the common options on every command
    *[([*c, "--seeds", "0"], "--seeds") for c in COMMANDS],
    *[([*c, "--rounds", "-2"], "--rounds") for c in COMMANDS],
    *[([*c, "--jobs", "0"], "--jobs") for c in COMMANDS],
    *[([*c, "--first-seed", "-1"], "--first-seed") for c in COMMANDS],
    *[([*c, "--config", "/nonexistent/config.toml"], "--config") for c in COMMANDS],
    # more of each command
    (["demo", "--clients", "1"], "--clients"),
    (["demo", "--samples", "3", "--clients", "4"], "--samples"),
    (["demo", "--threads", "0"], "--threads"),
    (["experiment", "fedmissem", "--epochs", "0"], "--epochs"),
    (["experiment", "fedmissem", "--family", "cauchy"], "--family"),
    (["experiment", "fedmls", "--features", "31"], "--features"),
    (["experiment", "fedmls", "--batch-size", "1.5"], "--batch-size"),
    (["experiment", "fedmls", "--extend-grid", "-1"], "--extend-grid"),
    (["experiment", "fig2", "--beta-grid", "0.1,-1"], "--beta-grid"),
    (["experiment", "fedmls", "--prox-weight-grid", "1,0"], "--prox-weight-grid"),
    (["experiment", "fedmls", "--local-lr-grid", "0.1,,1"], "--local-lr-grid"),
    (["experiment", "fig1", "--evaluate-every", "0"], "--evaluate-every"),
    (["experiment", "fig1", "--samples", "3"], "--samples"),
]


@pytest.mark.parametrize("argv, option", BAD_VALUES, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_bad_values_exit_2_naming_the_option(argv, option, tmp_path, capsys):
    assert _status([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    prog = "fedmm " + " ".join(argv[:2] if argv[0] == "experiment" else argv[:1])
    assert f"{prog}: error: argument {option}" in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing ran


def test_a_library_value_error_is_reported_without_traceback(tmp_path, capsys):
    # all 30 standardized breast-cancer features are linearly separable: F* = 0 and the run refuses
    argv = ["experiment", "fedmls", "--features", "0", "--rounds", "2", "--seeds", "1", "--tune-seeds", "1",
            "--prox-weight-grid", "1", "--local-lr-grid", "0.01", "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "fedmm experiment fedmls: error: F* = " in err and "≈ 0 (separable data)" in err
    assert "Traceback" not in err


TINY = {
    ("demo",): ["--rounds", "4", "--samples", "120", "--clients", "4"],
    ("experiment", "fig1"): ["--setting", "homogeneous", "--rounds", "4", "--samples", "40", "--p", "5", "--K", "3",
                             "--clients", "4", "--active-clients", "2", "--batch-size", "5", "--beta", "0.05"],
    ("experiment", "fig2"): ["--setting", "homogeneous,heterogeneous", "--rounds", "3", "--samples", "40", "--p",
                             "5", "--K", "3", "--clients", "4", "--active-clients", "2", "--beta-grid", "0.05",
                             "--tune-rounds", "2", "--extend-grid", "0"],
    ("experiment", "fedem-fig1"): ["--rounds", "6", "--monitor-every", "2"],
    ("experiment", "fedem-digits"): ["--rounds", "4", "--monitor-every", "2"],
    ("experiment", "fedmissem"): ["--rounds", "4", "--monitor-every", "2"],
    ("experiment", "fedmls"): ["--rounds", "3", "--tune-seeds", "1", "--prox-weight-grid", "1",
                               "--local-lr-grid", "0.01", "--extend-grid", "0"],
}


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_writes_runs_that_load_and_a_summary(command, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*command, *TINY[command], "--seeds", "2", "--first-seed", "3", "--quiet", "--out", str(out)]) == 0
    assert capsys.readouterr().out == ""  # --quiet
    summaries = sorted(out.glob("*_summary.json"))
    assert len(summaries) == 1 and summaries[0].with_suffix(".txt").is_file()
    table = json.loads(summaries[0].read_text())
    assert table["rows"] and all(set(row) == set(table["headers"]) for row in table["rows"])
    run_files = [p for p in sorted(out.glob("*.json")) if p not in summaries]
    assert run_files
    rounds = int(TINY[command][TINY[command].index("--rounds") + 1])
    for path in run_files:
        runs = fedmm.load(path)
        assert isinstance(runs, fedmm.RunSet)
        seeds = sorted({int(name.rsplit("seed=", 1)[1]) for name in runs})
        assert seeds == [3, 4], path.name
        for name, history in runs.items():
            assert isinstance(history, fedmm.History) and len(history) == rounds, (path.name, name)
            assert history.config["seed"] in (3, 4)
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(out.glob("*.png"))


def test_config_file_is_typed_before_the_command_line(tmp_path, capsys):
    config = tmp_path / "demo.toml"
    config.write_text(f'rounds = 3\nseeds = 1\nsamples = 120\nclients = 4\nprogress = false\n'
                      f'out = "{tmp_path / "a"}"\n')
    assert main(["demo", "--config", str(config), "--rounds", "2", "--quiet"]) == 0
    runs = fedmm.load(tmp_path / "a" / "demo.json")
    assert all(len(h) == 2 for h in runs.values())  # the command line wins over the file
    config.write_text("rounds = 3\nclients = 1\n")
    assert _status(["demo", "--config", str(config)]) == 2
    assert "argument --clients: expected an integer >= 2" in capsys.readouterr().err
    config.write_text("roundz = 3\n")
    assert main(["demo", "--config", str(config)]) == 2
    assert "unknown key(s) ['roundz']" in capsys.readouterr().err


@pytest.mark.parametrize("argv, old, new, dest, value", [
    (["experiment", "fedmls", "-o", "x"], "-o", "--out", "out", "x"),
    (["experiment", "fedmls", "--output-dir", "x"], "--output-dir", "--out", "out", "x"),
    (["experiment", "fedmls", "--lam-powers", "-1", "2"], "--lam-powers", "--prox-weight-grid",
     "prox_weight_grid", (0.1, 1.0, 10.0, 100.0)),
    (["experiment", "fedmls", "--prox-weight-powers", "0", "1"], "--prox-weight-powers", "--prox-weight-grid",
     "prox_weight_grid", (1.0, 10.0)),
    (["experiment", "fedmls", "--eta-powers", "-3", "-1"], "--eta-powers", "--local-lr-grid", "local_lr_grid",
     (0.001, 0.01, 0.1)),
    (["experiment", "fedmls", "--step-powers", "-1", "-1"], "--step-powers", "--local-lr-grid", "local_lr_grid",
     (0.1,)),
    (["experiment", "fedem-fig1", "--seed", "4"], "--seed", "--first-seed", "first_seed", 4),
    (["demo", "--seed", "4"], "--seed", "--first-seed", "first_seed", 4),
    (["experiment", "fig1", "--n-clients", "7"], "--n-clients", "--clients", "n_clients", 7),
    (["experiment", "fig2", "--n-samples", "70"], "--n-samples", "--samples", "n_samples", 70),
    # the names of the one vocabulary (issue 24): the old spellings keep working with a note
    (["experiment", "fig1", "--alpha", "0.2"], "--alpha", "--control-variate-step", "control_variate_step", 0.2),
    (["experiment", "fig2", "--eta", "0.3"], "--eta", "--ridge", "ridge", 0.3),
    (["experiment", "fig1", "--objective-every", "4"], "--objective-every", "--evaluate-every", "evaluate_every", 4),
    (["experiment", "ot", "--eval-every", "4"], "--eval-every", "--evaluate-every", "evaluate_every", 4),
    (["experiment", "ot-ablation", "--eval-every", "4"], "--eval-every", "--evaluate-every", "evaluate_every", 4),
    (["experiment", "ot", "--server-steps", "7"], "--server-steps", "--theta-steps", "theta_steps", 7),
    (["experiment", "ot", "--server-lr", "0.02"], "--server-lr", "--theta-lr", "theta_lr", 0.02),
    (["experiment", "ablation", "--eta-sweep", "0,0.2"], "--eta-sweep", "--ridge-sweep", "ridge_sweep", (0.0, 0.2)),
    (["experiment", "ablation", "--alpha", "0.1"], "--alpha", "--control-variate-step", "control_variate_step", 0.1),
    (["experiment", "fedmls", "--batch-fraction", "0.5"], "--batch-fraction", "--batch-size", "batch_size", 0.5),
    (["experiment", "fedmls", "--step-grid", "0.1,1"], "--step-grid", "--local-lr-grid", "local_lr_grid", (0.1, 1.0)),
    (["experiment", "fedem-fig1", "--alpha-convention", "fedem"], "--alpha-convention",
     "--control-variate-convention", "control_variate_convention", "fedem"),
])
def test_old_spellings_still_work_with_a_deprecation_note(argv, old, new, dest, value, capsys):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    assert f"warning: {old} is deprecated; use {new}" in capsys.readouterr().err


def test_old_spellings_are_hidden_from_help(capsys):
    with pytest.raises(SystemExit):
        main(["experiment", "fedmls", "--help"])
    text = capsys.readouterr().out
    assert "--lam-powers" not in text and "--output-dir" not in text and "--prox-weight-powers" not in text
    assert "--prox-weight-grid" in text and "--local-lr-grid" in text


def test_progress_defaults_to_the_terminal_and_quiet_silences_it():
    parser = build_parser()
    # pytest captures stderr: not a terminal
    assert resolve_progress(parser.parse_args(["demo"])) is False
    assert resolve_progress(parser.parse_args(["demo", "--progress"])) is True
    assert resolve_progress(parser.parse_args(["demo", "--progress", "--quiet"])) is False
    assert resolve_progress(parser.parse_args(["demo", "--no-progress"])) is False


def _score(best: float):
    """Convex in log(β), minimum at ``best``."""
    return lambda values: [math.log(v / best) ** 2 for v in values]


def test_tuning_warns_at_the_edge_of_its_grid():
    warnings: list[str] = []
    found = tune_on_grid(_score(0.3), [0.01, 0.02, 0.05], warn=warnings.append, option="--beta-grid")
    assert found["best"] == 0.05 and found["at_edge"] == "high" and found["extended"] == []
    assert len(warnings) == 1 and "largest value" in warnings[0] and "--extend-grid" in warnings[0]
    warnings.clear()
    found = tune_on_grid(_score(1e-4), [0.01, 0.02, 0.05], warn=warnings.append)
    assert found["best"] == 0.01 and found["at_edge"] == "low" and "smallest value" in warnings[0]
    warnings.clear()
    found = tune_on_grid(_score(0.02), [0.01, 0.02, 0.05], warn=warnings.append)
    assert found["best"] == 0.02 and found["at_edge"] is None and warnings == []


def test_tuning_extends_its_grid_until_the_optimum_is_inside():
    # ratio of the top two values: 2.5; 0.05 → 0.125 → 0.3125 → 0.78125; the optimum 0.3 is bracketed
    warnings: list[str] = []
    found = tune_on_grid(_score(0.3), [0.01, 0.02, 0.05], extend=10, warn=warnings.append)
    np.testing.assert_allclose(found["extended"], [0.125, 0.3125, 0.78125])
    assert found["best"] == pytest.approx(0.3125) and found["at_edge"] is None and warnings == []
    # a bounded number of extensions: still at the edge, and said so
    found = tune_on_grid(_score(0.3), [0.01, 0.02, 0.05], extend=1, warn=warnings.append)
    assert found["best"] == pytest.approx(0.125) and found["at_edge"] == "high"
    assert "after 1 extension(s)" in warnings[0]
    # a diverging candidate (inf) is never chosen, and an inf best is no edge to extend past
    found = tune_on_grid(lambda vs: [math.inf if v > 0.03 else -v for v in vs], [0.01, 0.02, 0.05], extend=3)
    assert found["best"] == 0.02 and found["at_edge"] is None


def test_fig2_extend_grid_reaches_past_the_grid(tmp_path, capsys):
    argv = ["experiment", "fig2", *TINY[("experiment", "fig2")], "--setting", "homogeneous", "--seeds", "1",
            "--beta-grid", "0.002,0.005", "--extend-grid", "1", "--out", str(tmp_path)]
    assert main(argv) == 0
    result = fedmm.load(tmp_path / "fig2_homogeneous.json").metadata
    for name, scores in result["tuning"].items():
        # the objective falls faster with a larger β here, so the grid grows past its top by 0.005/0.002
        assert set(scores) == {"0.002", "0.005", repr(0.005 * 2.5)}
        assert result["beta"][name] == pytest.approx(0.0125)
    assert "warning: the best beta" in capsys.readouterr().err  # still at the (new) top edge


def test_runset_round_trip_and_load_dispatch(tmp_path):
    h = fedmm.History("FedMM", {"seed": 0, "objective": [1.0, float("nan")]})
    h.append(t=0, objective=2.0, active=[0, 1])
    h.state["theta"] = np.arange(3, dtype=np.float64)
    runs = fedmm.RunSet({"FedMM/seed=0": h}, metadata={"experiment": "x", "inf": float("inf")})
    runs.save(tmp_path / "runs.json")
    back = fedmm.load(tmp_path / "runs.json")
    assert isinstance(back, fedmm.RunSet) and back.metadata["inf"] == float("inf")
    assert back["FedMM/seed=0"].equals(h) and list(back) == ["FedMM/seed=0"] and len(back) == 1
    h.save(tmp_path / "one.json")
    assert isinstance(fedmm.load(tmp_path / "one.json"), fedmm.History)
    (tmp_path / "other.json").write_text('{"kind": "table"}')
    with pytest.raises(ValueError, match="History or RunSet"):
        fedmm.load(tmp_path / "other.json")
    with pytest.raises(TypeError, match=r"runs\['a'\]"):
        fedmm.RunSet({"a": {"records": []}})
