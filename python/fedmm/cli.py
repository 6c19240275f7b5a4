# SPDX-License-Identifier: BSD-3-Clause
"""The ``fedmm`` console command: one argparse subcommand per feature.

Each feature registers its subcommand in its own ``_register_*`` function
below (keeps merges of several features trivial).  ``subparsers`` is what
``ArgumentParser.add_subparsers()`` returns (typed ``Any``: its class,
``argparse._SubParsersAction``, is private to argparse).

Every command shares the options of
:func:`fedmm.experiments.add_common_options`; a ``--config`` TOML
file is applied here, before the command runs, and a bad value found after
parsing (an :class:`~fedmm.experiments.ExperimentError` or a
``ValueError`` of the library) is reported as ``fedmm ...: error: ...``
with exit status 2, never as a traceback; so are unrecognized arguments,
by the parser of the command that got them
(:class:`~fedmm.experiments.CommandParser`), and an ``OSError``
while the command writes its results.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

import fedmm
from fedmm.experiments import CommandParser, ExperimentError, apply_config

__all__ = ["build_parser", "main"]


def _register_demo(subparsers: Any) -> None:
    from fedmm.demo import register

    register(subparsers)


def _register_experiment(subparsers: Any) -> None:
    from fedmm.experiments import add_experiment_subcommands

    parser = subparsers.add_parser(
        "experiment",
        help="reproduce a figure of the papers (JSON histories + PNG plots)",
        description="Reproduce the papers' experiments; each writes JSON histories, PNG figures "
        "and a summary table into --out.",
    )
    figures = parser.add_subparsers(dest="figure", metavar="FIGURE")
    add_experiment_subcommands(figures)
    parser.set_defaults(func=lambda args: (parser.print_help(sys.stderr), 2)[1], command_parser=parser)


def build_parser() -> argparse.ArgumentParser:
    """The ``fedmm`` parser with every registered subcommand."""
    parser = CommandParser(prog="fedmm", description="Federated majorize-minimization (FedMM).",
                           epilog="Run 'fedmm COMMAND --help' for a command's options. An option that takes a list "
                           "(--setting, --beta-grid, --dims, ...) takes one word of comma-separated values, e.g. "
                           "--beta-grid 0.05,0.1; --out must name a directory you can write into (created if absent).")
    parser.add_argument("--version", action="version", version=f"fedmm {fedmm.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _register_demo(subparsers)
    _register_experiment(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``fedmm`` command; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    command = getattr(args, "command_parser", parser)
    try:
        if getattr(args, "config", None) is not None:
            args = apply_config(args, _command_argv(argv, command.prog))
        return int(args.func(args) or 0)
    except ExperimentError as exc:
        return _error(command, str(exc), exc.option)
    except ValueError as exc:  # a library check that the command-line checks did not anticipate
        return _error(command, str(exc), None)
    except OSError as exc:  # e.g. --out became unwritable after the check, or a full disk
        where = f": {exc.filename}" if exc.filename else ""
        return _error(command, f"cannot write the results ({exc.strerror or exc}{where})", None)


def _command_argv(argv: list[str], prog: str) -> list[str]:
    """The arguments after the command's name(s) (``prog`` = ``"fedmm experiment fig1"``)."""
    position = 0
    for word in prog.split()[1:]:
        if word in argv[position:]:
            position = argv.index(word, position) + 1
    return argv[position:]


def _error(command: argparse.ArgumentParser, message: str, option: str | None) -> int:
    command.print_usage(sys.stderr)
    prefix = f"argument {option}: " if option else ""
    print(f"{command.prog}: error: {prefix}{message}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
