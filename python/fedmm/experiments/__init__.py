# SPDX-License-Identifier: BSD-3-Clause
"""Reproductions of the papers' figures (``fedmm experiment ...``).

Every module ``fedmm.experiments.<name>`` that defines
``add_<name>_parser(subparsers)`` contributes sub-commands of
``fedmm experiment``: the function receives the argparse sub-parsers object
of ``fedmm experiment``, adds its parsers and sets ``func`` (a callable
``func(args) -> int`` exit status) as their default.  Modules are found at
run time, so a new experiment needs no edit here; a module whose optional
dependencies are missing is skipped.

Every command shares the options of
:func:`add_common_options` (``--seeds``,
``--first-seed``, ``--rounds``, ``--jobs``, ``--out``, ``--config``,
``--progress/--no-progress``, ``--quiet``) and writes its runs as a
:class:`fedmm.RunSet` JSON file (read with :func:`fedmm.load`), PNG figures
and a summary table (``<name>_summary.txt`` and ``<name>_summary.json``).

- :mod:`fedmm.experiments.ablation` — why the Θ-space baseline of FedMM paper §6, Figure 1 rises.
- :mod:`fedmm.experiments.dictionary` — FedMM paper §6, Figures 1 and 2.
- :mod:`fedmm.experiments.fedem` — FedEM paper §4 (Fig. 1, Fig. 3 setting) and FedMissEM.
- :mod:`fedmm.experiments.fedmls` — FedMLS paper §4, Figure 1.
- :mod:`fedmm.experiments.ot` — FedMM paper §7.3, Figure 3 (needs the ``ot`` extra to run).
- :mod:`fedmm.experiments.ot_ablation` — where FedMM-OT's advantage in Figure 3 comes from (``ot`` extra).
- :mod:`fedmm.experiments.ot_pair` — trains the weights of the trained-ICNN known-map pair (``ot`` extra).

The command-line machinery every command (and ``fedmm demo``) shares is
exported here: the common option set (:func:`add_common_options`,
:func:`resolve_progress`, :func:`make_log`, :func:`seed_list`), the parser
that knows its options (:class:`CommandParser`), TOML configs
(:func:`apply_config`), hidden deprecated spellings
(:func:`add_deprecated_alias`), argparse value types (:func:`positive_int`),
the error the CLI reports without a traceback (:class:`ExperimentError`),
tasks behind one progress bar (:func:`run_tasks`), band plots
(:func:`plot_band`, :func:`tidy_log_axis`) and the summary table
(:func:`write_summary`).
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from fedmm.experiments._common import (
    CommandParser,
    ExperimentError,
    add_common_options,
    add_deprecated_alias,
    apply_config,
    make_log,
    plot_band,
    positive_int,
    require_ot_extra,
    resolve_progress,
    run_tasks,
    seed_list,
    tidy_log_axis,
    write_summary,
)

__all__ = ["add_experiment_subcommands", "experiment_modules",
           # the machinery the commands share
           "CommandParser", "ExperimentError", "add_common_options", "add_deprecated_alias", "apply_config",
           "make_log", "plot_band", "positive_int", "require_ot_extra", "resolve_progress", "run_tasks", "seed_list",
           "tidy_log_axis", "write_summary"]


def experiment_modules() -> list[str]:
    """Names of the public experiment modules of this package, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def add_experiment_subcommands(subparsers: Any) -> list[str]:
    """Call ``add_<name>_parser(subparsers)`` of every importable experiment module.

    Returns
    -------
    list of str
        The modules that registered sub-commands.
    """
    registered = []
    for name in experiment_modules():
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ImportError:
            continue  # optional dependency of that experiment not installed
        add_parser = getattr(module, f"add_{name}_parser", None)
        if add_parser is not None:
            add_parser(subparsers)
            registered.append(name)
    return registered
