# SPDX-License-Identifier: BSD-3-Clause
"""``fedmm experiment ot`` (FedMM paper Fig. 3) at tiny sizes: files, tables, options and errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

import fedmm  # noqa: E402
from fedmm.cli import build_parser, main  # noqa: E402
from reference import cli_status  # noqa: E402
from fedmm.data import KNOWN_MAP_BENCHMARKS, clustered_map_benchmark, known_map_benchmark  # noqa: E402
from fedmm.experiments.ot import _evaluated_rounds, _score  # noqa: E402  (own module's helpers, tested directly)

TINY = ["--benchmark", "hard", "--dims", "2,3", "--rounds", "3", "--clients", "3", "--per-client", "20",
        "--n-target", "60", "--hidden-sizes", "8,8", "--batch-size", "16", "--fedadam-lrs", "1e-3,1e-2",
        "--fedmm-steps", "1e-3,1e-2", "--extend-grid", "0", "--identity-steps", "5", "--evaluate-every", "2",
        "--n-eval", "50"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ot")
    status = main(["experiment", "ot", *TINY, "--seeds", "2", "--first-seed", "3", "--quiet", "--out", str(out)])
    return status, out


def test_tiny_run_writes_loadable_runs_summary_and_figure(tiny_run):
    status, out = tiny_run
    assert status == 0
    runs = fedmm.load(out / "ot_histories.json")
    assert isinstance(runs, fedmm.RunSet)
    # per d and algorithm: 2 tuning runs on seed 3 (the winner's is reused as its final run), a final run on seed 4
    for d in (2, 3):
        names = sorted(n for n in runs if n.startswith(f"d={d}/"))
        assert names == sorted([f"d={d}/FedAdam(server_lr=0.001)/seed=3", f"d={d}/FedAdam(server_lr=0.01)/seed=3",
                                f"d={d}/FedMMOT(step=0.001)/seed=3", f"d={d}/FedMMOT(step=0.01)/seed=3",
                                f"d={d}/FedAdam/seed=3", f"d={d}/FedAdam/seed=4",
                                f"d={d}/FedMMOT/seed=3", f"d={d}/FedMMOT/seed=4"])
        for name, param in (("FedMMOT", "step"), ("FedAdam", "server_lr")):
            tuned = float(runs[f"d={d}/{name}/seed=3"].config[param])  # FedMMOT's step: its description
            assert runs[f"d={d}/{name}({param}={tuned:g})/seed=3"].to_dict() == runs[f"d={d}/{name}/seed=3"].to_dict()
            assert float(runs[f"d={d}/{name}/seed=4"].config[param]) == tuned
    for name, h in runs.items():
        assert len(h) == 3 and h.config["seed"] in (3, 4), name
        evaluated = np.asarray(h["l2_uvp"])
        assert np.isfinite(evaluated[[1, 2]]).all() and np.isnan(evaluated[0])  # rounds 2 and 3 (the last)
    table = json.loads((out / "ot_summary.json").read_text())
    assert (out / "ot_summary.txt").read_text().startswith("d ")
    methods = [(row["d"], row["method"]) for row in table["rows"]]
    for d in (2, 3):
        for method in ("FedMM-OT", "FedAdam", "identity map (reference)", "linear map (reference)",
                       "best affine map (reference)"):
            assert (d, method) in methods
    assert (out / "ot_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_parallel_tasks_give_the_in_process_results(tiny_run, tmp_path):
    """``--jobs 3``: the (dimension, algorithm) tasks run in worker processes, in any order, and the runs,
    tuning and references equal the in-process run's bit for bit (each task rebuilds its inputs from seeds)."""
    _, serial = tiny_run
    out = tmp_path / "parallel"
    assert main(["experiment", "ot", *TINY, "--seeds", "2", "--first-seed", "3", "--quiet", "--no-plot",
                 "--jobs", "3", "--out", str(out)]) == 0
    one, many = fedmm.load(serial / "ot_histories.json"), fedmm.load(out / "ot_histories.json")
    assert list(one) == list(many)
    for name in one:
        assert np.array_equal(np.asarray(one[name]["l2_uvp"]), np.asarray(many[name]["l2_uvp"]), equal_nan=True), name
        assert sorted(one[name].params) == sorted(many[name].params), name
        for key, value in one[name].params.items():
            assert np.array_equal(value, many[name].params[key]), (name, key)
    first, second = (json.loads((d / "ot_summary.json").read_text())["dimensions"] for d in (serial, out))
    for d in first:
        for key in ("curves", "references", "linear_map_l2_uvp", "tuning", "fedadam_lr", "fedmm_step",
                    "hidden_sizes", "target_variance", "rounds"):
            assert first[d][key] == second[d][key], (d, key)


def test_summary_curves_and_references_are_consistent(tiny_run):
    _, out = tiny_run
    summary = json.loads((out / "ot_summary.json").read_text())
    runs = fedmm.load(out / "ot_histories.json")
    for d in ("2", "3"):
        r = summary["dimensions"][d]
        assert r["rounds"] == [0, 2, 3]
        for name, key in (("FedAdam", "fedadam_lr"), ("FedMMOT", "fedmm_step")):
            assert r[key] in (1e-3, 1e-2)
            assert r["tuning"][name]["best"] == r[key]
            # the score of the winner is that of the first seed's final run (three evaluations: the last one)
            assert r["tuning"][name]["scores"][repr(r[key])] == r["curves"][name]["3"][-1]
        for name in ("FedMMOT", "FedAdam"):
            for seed, curve in r["curves"][name].items():
                h = runs[f"d={d}/{name}/seed={seed}"]
                assert curve[0] == h.config["initial_evaluation"]["l2_uvp"]
                np.testing.assert_array_equal(curve[1:], np.asarray(h["l2_uvp"])[[1, 2]])
        # reference rows against an independent evaluation of the same benchmark on the same points; the
        # summary records the linear-map L2-UVP of every pair built at d (no icnn weights at d = 2, 3)
        assert summary["config"]["benchmark"] == "hard"
        assert set(r["linear_map_l2_uvp"]) == {"hard", "easy"}
        for name, make in (("hard", clustered_map_benchmark), ("easy", known_map_benchmark)):
            bench = make(int(d), seed=0)
            ref = bench.l2_uvp(bench.linear_map(), n_eval=50, seed=[0, 3])
            assert r["linear_map_l2_uvp"][name]["l2_uvp"] == pytest.approx(ref.value, rel=1e-12)
        assert r["references"]["linear"] == r["linear_map_l2_uvp"]["hard"]


def test_grid_edge_warning_and_config_file(tmp_path, capsys):
    config = tmp_path / "ot.toml"
    config.write_text('rounds = 2\ndims = "2"\nfedadam_lrs = "1e-3"\n')
    argv = ["experiment", "ot", *TINY[:2], *TINY[6:], "--config", str(config), "--no-progress",
            "--out", str(tmp_path / "o")]
    argv[argv.index("--fedadam-lrs") + 1:argv.index("--fedadam-lrs") + 1] = []
    del argv[argv.index("--fedadam-lrs"):argv.index("--fedadam-lrs") + 2]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "FedAdam server lr 0.001 won the grid [0.001]" in captured.out
    assert "warning: the best FedAdam server_lr (d=2) = 0.001 is the largest value of its grid" in captured.err
    runs = fedmm.load(tmp_path / "o" / "ot_histories.json")
    assert {len(h) for h in runs.values()} == {2} and all(n.startswith("d=2/") for n in runs)


def test_help_shows_every_option_with_its_default(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["experiment", "ot", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for option in ("--seeds", "--rounds", "--jobs", "--out", "--config", "--progress", "--no-progress", "--quiet",
                   "--dims", "--fedadam-lrs", "results/ot"):
        assert option in text
    options = build_parser().parse_args(["experiment", "ot"]).command_parser.options
    for dest, action in options.items():
        assert action.help and "default" in action.help, dest


@pytest.mark.parametrize("argv, option", [
    (["--dims", "0"], "--dims"),
    (["--dims", "16,x"], "--dims"),
    (["--rounds", "0"], "--rounds"),
    (["--seeds", "0"], "--seeds"),
    (["--jobs", "0"], "--jobs"),
    (["--fedadam-lrs", "1e-3,-1"], "--fedadam-lrs"),
    (["--fedmm-steps", "0"], "--fedmm-steps"),
    (["--omega-step", "newton"], "--omega-step"),
    (["--benchmark", "korotin"], "--benchmark"),
    (["--local-lr", "0"], "--local-lr"),
    (["--cycle-weight", "-1"], "--cycle-weight"),
    (["--hidden-sizes", "8,0"], "--hidden-sizes"),
    (["--n-eval", "1"], "--n-eval"),
    (["--config", "/nonexistent/ot.toml"], "--config"),
    (["--benchmark", "icnn", "--dims", "16,20"], "--dims"),
    (["--benchmark", "icnn", "--dims", "16", "--benchmark-seed", "1"], "--benchmark-seed"),
])
def test_bad_values_exit_2_naming_the_option(argv, option, tmp_path, capsys):
    assert cli_status(["experiment", "ot", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert option in err and "Traceback" not in err


def test_tuning_score_is_the_mean_of_the_last_tenth_and_inf_for_a_diverged_run():
    assert _score([5.0, 4.0, 3.0]) == 3.0
    assert _score(list(range(1, 21))) == 19.5
    assert _score([3.0] * 15 + [np.inf]) == np.inf
    assert _score([2.0] * 9 + [np.nan]) == np.inf


def test_evaluated_rounds():
    assert _evaluated_rounds(7, 3) == [0, 3, 6, 7]
    assert _evaluated_rounds(4, 1) == [0, 1, 2, 3, 4]
    assert _evaluated_rounds(2, 5) == [0, 2]


def test_extend_grid_tries_past_the_edge_of_the_fedadam_grid(tmp_path, capsys):
    """A one-value grid is always at its edge: ``--extend-grid 1`` adds one value past it (and says so)."""
    tiny = [a for a in TINY if a not in ("2,3", "1e-3,1e-2")]
    tiny[tiny.index("--dims") + 1:tiny.index("--dims") + 1] = ["2"]
    tiny[tiny.index("--fedadam-lrs") + 1:tiny.index("--fedadam-lrs") + 1] = ["1e-3"]
    tiny[tiny.index("--fedmm-steps") + 1:tiny.index("--fedmm-steps") + 1] = ["1e-3"]
    del tiny[tiny.index("--extend-grid"):tiny.index("--extend-grid") + 2]
    assert main(["experiment", "ot", *tiny, "--seeds", "1", "--extend-grid", "1", "--no-plot",
                 "--out", str(tmp_path)]) == 0
    runs = fedmm.load(tmp_path / "ot_histories.json")
    tried = sorted(n for n in runs if n.startswith("d=2/FedAdam(server_lr="))
    assert len(tried) == 2 and "d=2/FedAdam(server_lr=0.001)/seed=0" in tried
    tried = sorted(n for n in runs if n.startswith("d=2/FedMMOT(step="))
    assert len(tried) == 2 and "d=2/FedMMOT(step=0.001)/seed=0" in tried
    assert "after 1 extension(s)" in capsys.readouterr().err


def test_cycle_weight_is_the_lambda_of_every_run(tmp_path):
    """``--cycle-weight`` is the ``λ`` of objective (33) of both algorithms' problem (default 1)."""
    tiny = [a for a in TINY if a != "2,3"]
    tiny[tiny.index("--dims") + 1:tiny.index("--dims") + 1] = ["2"]
    assert main(["experiment", "ot", *tiny, "--seeds", "1", "--cycle-weight", "2.5", "--no-plot", "--quiet",
                 "--out", str(tmp_path)]) == 0
    runs = fedmm.load(tmp_path / "ot_histories.json")
    assert {h.config["model"]["cycle_weight"] for h in runs.values()} == {2.5}
    summary = json.loads((tmp_path / "ot_summary.json").read_text())
    assert summary["config"]["cycle_weight"] == 2.5
    assert build_parser().parse_args(["experiment", "ot"]).cycle_weight == 1.0


def test_easy_benchmark_option(tmp_path):
    """``--benchmark easy`` runs on :func:`fedmm.data.known_map_benchmark` (the reference rows say so)."""
    tiny = [a for a in TINY if a != "2,3"]
    tiny[tiny.index("--dims") + 1:tiny.index("--dims") + 1] = ["2"]
    assert main(["experiment", "ot", *tiny, "--seeds", "1", "--benchmark", "easy", "--no-plot", "--quiet",
                 "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "ot_summary.json").read_text())
    assert summary["config"]["benchmark"] == "easy" and set(KNOWN_MAP_BENCHMARKS) == {"easy", "hard", "icnn"}
    r = summary["dimensions"]["2"]
    assert r["references"]["linear"] == r["linear_map_l2_uvp"]["easy"]
    assert "Benchmark: easy" in (tmp_path / "ot_summary.txt").read_text()


def test_icnn_benchmark_option(tmp_path):
    """``--benchmark icnn`` runs on the shipped trained-ICNN pair; its reference rows match an independent
    evaluation of :func:`fedmm.data.icnn_map_benchmark` on the same points."""
    from fedmm.data import icnn_map_benchmark

    tiny = [a for a in TINY if a != "2,3"]
    tiny[tiny.index("--dims") + 1:tiny.index("--dims") + 1] = ["16"]
    assert main(["experiment", "ot", *tiny, "--rounds", "2", "--seeds", "1", "--benchmark", "icnn", "--no-plot",
                 "--quiet", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "ot_summary.json").read_text())
    r = summary["dimensions"]["16"]
    bench = icnn_map_benchmark(16)
    ref = bench.l2_uvp(bench.linear_map(), n_eval=50, seed=[0, 3])
    assert r["references"]["linear"]["l2_uvp"] == pytest.approx(ref.value, rel=1e-12)
    assert r["references"]["linear"] == r["linear_map_l2_uvp"]["icnn"]
    assert set(r["linear_map_l2_uvp"]) == {"easy", "hard", "icnn"}
