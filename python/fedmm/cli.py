# SPDX-License-Identifier: BSD-3-Clause
"""The ``fedmm`` console command: one argparse subcommand per feature.

Each feature registers its subcommand in its own ``_register_*`` function
below (keeps merges of several features trivial).  ``subparsers`` is what
``ArgumentParser.add_subparsers()`` returns (typed ``Any``: its class,
``argparse._SubParsersAction``, is private to argparse).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

import fedmm

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
    parser.set_defaults(func=lambda args: (parser.print_help(sys.stderr), 2)[1])


def build_parser() -> argparse.ArgumentParser:
    """The ``fedmm`` parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="fedmm", description="Federated majorize-minimization (FedMM).")
    parser.add_argument("--version", action="version", version=f"fedmm {fedmm.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _register_demo(subparsers)
    _register_experiment(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``fedmm`` command; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
