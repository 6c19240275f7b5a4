# SPDX-License-Identifier: BSD-3-Clause
"""Path and list options of every ``fedmm`` command, and arguments a command does not know.

Every error is the command's own (its usage line, ``fedmm <command>: error: ...`` naming the option),
exit status 2, and never a traceback.  Lists have one syntax: one word of comma-separated values, from
the command line and from a ``--config`` TOML list alike.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fedmm.cli import build_parser, main
from fedmm.experiments._common import apply_config

COMMANDS = [("demo",), ("experiment", "fig1"), ("experiment", "fig2"), ("experiment", "fedem-fig1"),
            ("experiment", "fedmissem"), ("experiment", "fedmls"), ("experiment", "ot"),
            ("experiment", "ablation")]


def _fails(argv: list[str], capsys) -> str:
    """Run ``fedmm argv``, check exit status 2 and no traceback; the standard error."""
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    return err


def _prog(command: tuple[str, ...]) -> str:
    return "fedmm " + " ".join(command)


def _options(command: tuple[str, ...]):
    return build_parser().parse_args(list(command)).command_parser.options


# --------------------------------------------------------------------------- --out
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_out_naming_an_existing_file_is_refused_by_the_commands_parser(command, tmp_path, capsys):
    file = tmp_path / "results.txt"
    file.write_text("not a directory")
    err = _fails([*command, "--out", str(file)], capsys)
    assert err.startswith(f"usage: {_prog(command)} ")
    assert f"{_prog(command)}: error: argument --out: expected a directory" in err and "existing file" in err
    assert file.read_text() == "not a directory"


@pytest.mark.parametrize("command", [("demo",), ("experiment", "fig1"), ("experiment", "fedmls")], ids=" ".join)
def test_out_below_a_file_is_refused(command, tmp_path, capsys):
    file = tmp_path / "results.txt"
    file.write_text("")
    err = _fails([*command, "--out", str(file / "sub" / "dir")], capsys)
    assert f"{_prog(command)}: error: argument --out:" in err and "below the file" in err and str(file) in err


@pytest.mark.parametrize("command", [("demo",), ("experiment", "fig2"), ("experiment", "ot")], ids=" ".join)
@pytest.mark.parametrize("target", ["existing", "missing/sub"])
def test_out_where_this_user_cannot_write_is_refused(command, target, tmp_path, monkeypatch, capsys):
    locked = tmp_path / "locked"
    (locked / "existing").mkdir(parents=True)
    real_access = os.access

    def access(path, mode, *args, **kwargs):  # the tests may run as root, who may write anywhere
        if str(path).startswith(str(locked)) and mode & os.W_OK:
            return False
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)
    err = _fails([*command, "--out", str(locked / target)], capsys)
    assert f"{_prog(command)}: error: argument --out: expected a directory this user can write into" in err
    assert "not writable" in err
    assert not (locked / "missing").exists()


def test_out_from_a_config_file_and_from_the_deprecated_alias_are_checked(tmp_path, capsys):
    file = tmp_path / "file"
    file.write_text("")
    config = tmp_path / "demo.toml"
    config.write_text(f'out = "{file}"\n')
    err = _fails(["demo", "--config", str(config)], capsys)
    assert "fedmm demo: error: argument --out: expected a directory" in err
    err = _fails(["experiment", "fedmls", "--output-dir", str(file)], capsys)
    assert "fedmm experiment fedmls: error: argument --output-dir: expected a directory" in err


def test_out_accepts_a_new_or_existing_directory(tmp_path):
    parser = build_parser()
    assert parser.parse_args(["demo", "--out", str(tmp_path)]).out == str(tmp_path)
    assert parser.parse_args(["demo", "--out", str(tmp_path / "a" / "b")]).out == str(tmp_path / "a" / "b")
    assert not (tmp_path / "a").exists()  # checked, not created, while parsing


# --------------------------------------------------------------------------- unknown arguments
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_unknown_options_are_reported_by_the_commands_parser(command, capsys):
    err = _fails([*command, "--roundz", "5"], capsys)
    assert err.startswith(f"usage: {_prog(command)} ")
    assert f"{_prog(command)}: error: unrecognized arguments: --roundz 5 (did you mean --rounds?)" in err


def test_unknown_arguments_of_the_group_and_of_fedmm_itself(capsys):
    err = _fails(["experiment", "--roundz"], capsys)
    assert err.startswith("usage: fedmm experiment ") and "fedmm experiment: error: unrecognized arguments" in err
    err = _fails(["--roundz"], capsys)
    assert err.startswith("usage: fedmm ") and "fedmm: error: unrecognized arguments: --roundz" in err


def test_the_installed_command_reports_a_typo_without_traceback(tmp_path):
    done = subprocess.run([sys.executable, "-m", "fedmm", "demo", "--roundz", "5", "--out", str(tmp_path / "x")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == ("fedmm demo: error: unrecognized arguments: --roundz 5 "
                                            "(did you mean --rounds?)")
    assert "Traceback" not in done.stderr and not (tmp_path / "x").exists()


# --------------------------------------------------------------------------- one list syntax
LISTS = [
    (("experiment", "fig1"), "--setting", "settings", "homogeneous,patches", ("homogeneous", "patches")),
    (("experiment", "fig2"), "--beta-grid", "beta_grid", "0.05,0.1", (0.05, 0.1)),
    (("experiment", "fig1"), "--beta-grid", "beta_grid", "0.3", (0.3,)),
    (("experiment", "fedmls"), "--prox-weight-grid", "prox_weight_grid", "0.1,1,10", (0.1, 1.0, 10.0)),
    (("experiment", "fedmls"), "--local-lr-grid", "local_lr_grid", "1e-3,1e-2", (1e-3, 1e-2)),
    (("experiment", "ot"), "--dims", "dims", "16,32,64", (16, 32, 64)),
    (("experiment", "ot"), "--fedmm-steps", "fedmm_steps", "1e-3,3e-3", (1e-3, 3e-3)),
    (("experiment", "ot"), "--fedadam-lrs", "fedadam_lrs", "3e-3", (3e-3,)),
    (("experiment", "ot"), "--hidden-sizes", "hidden_sizes", "64,64,32", (64, 64, 32)),
    (("experiment", "ablation"), "--p-sweep", "p_sweep", "5,10,20", (5, 10, 20)),
    (("experiment", "ablation"), "--ridge-sweep", "ridge_sweep", "0,0.2", (0.0, 0.2)),
]


@pytest.mark.parametrize("command, option, dest, text, values", LISTS, ids=lambda v: v if isinstance(v, str) else None)
def test_every_list_option_takes_one_comma_separated_word(command, option, dest, text, values):
    assert getattr(build_parser().parse_args([*command, option, text]), dest) == values


@pytest.mark.parametrize("command, option, dest, text, values", LISTS, ids=lambda v: v if isinstance(v, str) else None)
@pytest.mark.parametrize("bad", ["{a},,{b}", "{a},", ",{a}", "{a},x", ""])
def test_a_malformed_list_is_refused_naming_the_option(command, option, dest, text, values, bad, capsys):
    a, b = (text.split(",") * 2)[:2]
    err = _fails([*command, option, bad.format(a=a, b=b)], capsys)
    assert f"{_prog(command)}: error: argument {option}: expected " in err and "separated by commas" in err


@pytest.mark.parametrize("command, option, dest, text, values", LISTS, ids=lambda v: v if isinstance(v, str) else None)
def test_a_list_typed_with_spaces_is_refused_with_the_comma_syntax_as_a_hint(command, option, dest, text, values,
                                                                             capsys):
    words = text.split(",")
    if len(words) < 2:
        words = [text, text]
    err = _fails([*command, option, *words[:2]], capsys)
    assert f"{_prog(command)}: error: unrecognized arguments: {words[1]} " in err
    assert f"{option} takes one comma-separated word, e.g. {option} {words[0]},{words[1]}" in err


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_no_option_takes_several_words(command):
    # one syntax for every list: no option consumes more than one word (deprecated aliases aside)
    for dest, action in _options(command).items():
        assert action.nargs in (None, 0), (command, dest, action.nargs)
        if isinstance(action.metavar, str) and action.metavar.endswith(",..."):
            assert getattr(action.type, "comma_list", False), (command, dest)
            assert "comma-separated" in action.help, (command, dest)


@pytest.mark.parametrize("command, toml, dest, values", [
    (("experiment", "fig2"), "beta_grid = [0.05, 0.1]\nsettings = ['homogeneous', 'patches']", "beta_grid",
     (0.05, 0.1)),
    (("experiment", "fig1"), "settings = ['homogeneous', 'patches']", "settings", ("homogeneous", "patches")),
    (("experiment", "fedmls"), "prox_weight_grid = [1, 10]", "prox_weight_grid", (1.0, 10.0)),
    (("experiment", "fedmls"), "local_lr_grid = 0.01", "local_lr_grid", (0.01,)),
    (("experiment", "ot"), "dims = [2, 3]\nhidden_sizes = [8, 8]", "hidden_sizes", (8, 8)),
    (("experiment", "ablation"), "ridge_sweep = [0.0, 0.5]", "ridge_sweep", (0.0, 0.5)),
])
def test_a_config_list_is_the_same_comma_separated_value(command, toml, dest, values, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(toml + "\n")
    args = build_parser().parse_args([*command, "--config", str(config)])
    assert getattr(apply_config(args, ["--config", str(config)]), dest) == values


@pytest.mark.parametrize("command, toml, dest, value", [
    (("experiment", "fig1"), "alpha = 0.2\neta = 0.3\nobjective_every = 4", "ridge", 0.3),
    (("experiment", "fig1"), "alpha = 0.2", "control_variate_step", 0.2),
    (("experiment", "ablation"), "eta_sweep = [0.0, 0.5]", "ridge_sweep", (0.0, 0.5)),
    (("experiment", "fedmls"), "step_grid = 0.01\nbatch_fraction = 0.5", "local_lr_grid", (0.01,)),
    (("experiment", "ot"), "server_steps = 7\nserver_lr = 0.02", "theta_steps", 7),
    (("experiment", "ot"), "server_lr = 0.02", "theta_lr", 0.02),
])
def test_a_config_key_of_the_old_vocabulary_is_read_with_a_note(command, toml, dest, value, tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text(toml + "\n")
    args = build_parser().parse_args([*command, "--config", str(config)])
    assert getattr(apply_config(args, ["--config", str(config)]), dest) == value
    assert "is deprecated; use" in capsys.readouterr().err


def test_a_config_list_for_a_one_value_option_and_a_bad_config_list_are_refused(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text("rounds = [3, 4]\n")
    assert "expected one value for rounds, got a list" in _fails(["demo", "--config", str(config)], capsys)
    config.write_text("beta_grid = [0.05, -1]\n")
    err = _fails(["experiment", "fig2", "--config", str(config)], capsys)
    assert "fedmm experiment fig2: error: argument --beta-grid: expected numbers > 0" in err


# --------------------------------------------------------------------------- the demo's words
def test_demo_help_and_summary_explain_the_columns(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = capsys.readouterr().out
    for words in ("E_s / E_sp = ", "E_ps / E_p = ", "lower is better"):
        assert words in text
    assert main(["demo", "--rounds", "4", "--samples", "120", "--clients", "4", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    summary = (tmp_path / "demo_summary.txt").read_text()
    table, legend = summary.split("\n\n", 1)
    assert "E_s / E_sp" in table.splitlines()[0] and "E_ps / E_p" in table.splitlines()[0]
    assert legend.startswith("Columns: objective = ") and "E_s / E_sp = " in legend and "E_ps / E_p = " in legend
    assert legend.strip() in printed
