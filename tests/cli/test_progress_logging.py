# SPDX-License-Identifier: BSD-3-Clause
"""One progress rule everywhere (None = on only when standard error is a terminal), and library code
that logs instead of printing."""
import ast
import io
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from fedmm import _progress
from fedmm.algorithms import FedMM
from fedmm.algorithms.nonsmooth import FedAvg
from fedmm.experiments._common import run_tasks
from fedmm.models import InverseToy
from fedmm.models.nonsmooth import HingeSVM

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "fedmm"


class _Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self):
        return True


def _toy_datas():
    rng = np.random.default_rng(0)
    return [rng.uniform(0.5, 2.0, size=8) for _ in range(3)]


def test_progress_rule():
    assert _progress.progress_enabled(None, _Terminal()) is True
    assert _progress.progress_enabled(None, io.StringIO()) is False
    closed = io.StringIO()
    closed.close()
    assert _progress.progress_enabled(None, closed) is False
    assert _progress.progress_enabled(True, io.StringIO()) is True
    assert _progress.progress_enabled(False, _Terminal()) is False
    for bad in ("yes", 1, np.bool_(True)):
        with pytest.raises(TypeError, match="'progress'"):
            _progress.progress_enabled(bad)


def test_auto_progress_is_silent_when_stderr_is_not_a_terminal(capsys):
    FedMM(InverseToy()).run(_toy_datas(), 4, seed=0)  # progress=None by default
    FedAvg(HingeSVM(), local_lr=0.1, oracle="full").run(
        [(np.eye(3), np.array([1.0, -1.0, 1.0]))] * 2, 3, seed=0)
    assert run_tasks(lambda task, tick: tick(1) or task, [1, 2], total=2, desc="tasks") == [1, 2]
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_auto_progress_draws_on_a_terminal_and_forced_progress_anywhere(monkeypatch, capsys):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    FedMM(InverseToy()).run(_toy_datas(), 4, seed=0)
    assert "FedMM" in terminal.getvalue() and "4/4" in terminal.getvalue()
    monkeypatch.undo()
    FedMM(InverseToy()).run(_toy_datas(), 4, seed=0, progress=True)
    captured = capsys.readouterr()
    assert "4/4" in captured.err and captured.out == ""  # the bar goes to standard error only
    with pytest.raises(TypeError, match="'progress'"):
        FedMM(InverseToy()).run(_toy_datas(), 2, seed=0, progress="auto")


def test_backend_fallback_is_logged(caplog):
    from fedmm.compression import Compressor, Identity

    class Plain(Identity):  # a compressor without a compiled quantizer: the Python backend
        def quantizer_spec(self, q):
            return None

    assert issubclass(Plain, Compressor)
    with caplog.at_level(logging.INFO, logger="fedmm.algorithms.federated"):
        h = FedMM(InverseToy(), compressor=Plain()).run(_toy_datas(), 2, seed=0)
    assert h.config["backend"] == "python"
    assert any("Python backend" in r.getMessage() and r.name == "fedmm.algorithms.federated"
               for r in caplog.records)


def _print_calls_outside_commands(path):
    """``print(...)`` calls not inside command-line code: ``fedmm/cli.py``, a ``main``, a handler of
    parsed ``args``, or an argparse action (a function taking the ``parser``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def visit(node, in_command):
        for child in ast.iter_child_nodes(node):
            command = in_command
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                params = [a.arg for a in child.args.posonlyargs + child.args.args]
                command = in_command or child.name == "main" or params[:1] == ["args"] or "parser" in params
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == "print"
                    and not command):
                found.append(f"{path}:{child.lineno}")
            visit(child, command)

    visit(tree, path.name == "cli.py" and path.parent.name == "fedmm")
    return found


def test_library_code_logs_instead_of_printing():
    offenders = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _print_calls_outside_commands(path)]
    assert offenders == []


def test_the_print_check_finds_prints(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f(x):\n    print(x)\n\ndef main(argv):\n    print(argv)\n\n"
                     "def _cmd(args):\n    print(args)\n", encoding="utf-8")
    assert [hit.split(":")[-1] for hit in _print_calls_outside_commands(probe)] == ["2"]
