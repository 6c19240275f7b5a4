# SPDX-License-Identifier: BSD-3-Clause
"""``fedmm demo``: FedMM against the Θ-space baseline on heterogeneous synthetic dictionary learning.

The setting of FedMM paper §6 (Figure 1, heterogeneous): ``θ*`` with N(0, 1)
entries, 5000 signals ``Z = θ* h`` with 20% N(0, 1) non-zero codes, split into
``n = 20`` equal clusters by constrained k-means (one per client); ``K = 15``,
``λ = 0.1``, ``η = 0.2``; 10 clients per round, minibatches of 50, 8-bit
stochastic rounding, control variates with ``α = 0.01`` and
``γ_t = β/√(β + t)``.  The paper does not state ``p`` for the synthetic data;
the demo uses ``p = 20``.  It tunes β per algorithm in [0.001, 0.05]; from
our start ``Ŝ_0 = (I, (1 + 2η)θ_0)`` such small steps forget ``Ŝ_0`` too slowly
for a short run, and β = 0.5 (shared by both algorithms) was the best
of {0.05, 0.2, 0.5} for both over 600 rounds (``fedmm experiment`` tunes β properly).
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from fedmm.experiments import (
    ExperimentError,
    add_common_options,
    add_deprecated_alias,
    make_log,
    plot_band,
    positive_int,
    resolve_progress,
    run_tasks,
    seed_list,
    tidy_log_axis,
    write_summary,
)
from fedmm.history import History, RunSet

__all__ = ["DemoConfig", "COLUMNS", "run_demo", "plot_histories", "plot_runs", "summary_table", "register"]

#: The two algorithms of the demo, by display name.
ALGORITHMS = ("FedMM", "ParameterAveraging")


@dataclass
class DemoConfig:
    """Parameters of the demo (defaults: FedMM paper §6, heterogeneous synthetic setting)."""

    n_samples: int = 5000
    n_features: int = 20
    n_components: int = 15
    n_clients: int = 20
    active_clients: int = 10
    batch_size: int = 50
    lam: float = 0.1
    ridge: float = 0.2
    control_variate_step: float = 0.01
    beta: float = 0.5
    bits: int = 8
    n_rounds: int = 1000
    evaluate_every: int = 25
    seed: int = 0
    n_threads: int = 1


def make_clients(cfg: DemoConfig) -> list[np.ndarray]:
    """The heterogeneous clients of §6: synthetic signals split by equal-size k-means."""
    from fedmm.data import split_by_constrained_kmeans, synthetic_dictionary

    Z, _, _ = synthetic_dictionary(cfg.n_samples, cfg.n_features, cfg.n_components, seed=cfg.seed)
    # One k-means++ start keeps the split to a few seconds; the clusters are equal-size either way.
    return split_by_constrained_kmeans(Z, cfg.n_clients, seed=cfg.seed, n_init=1)


def _algorithm(name: str, cfg: DemoConfig) -> Any:
    from fedmm.algorithms import FedMM, ParameterAveraging
    from fedmm.compression import StochasticRounding
    from fedmm.models import DictionaryLearning

    model = DictionaryLearning(cfg.n_components, cfg.lam, cfg.ridge)
    cls = {"FedMM": FedMM, "ParameterAveraging": ParameterAveraging}[name]
    return cls(model, clients_per_round=cfg.active_clients, compressor=StochasticRounding(bits=cfg.bits),
               control_variate_step=cfg.control_variate_step, step=("sqrt", cfg.beta), batch_size=cfg.batch_size,
               n_threads=cfg.n_threads)


def _run_task(task: tuple[str, DemoConfig], tick: Callable[[int], None]) -> History:
    """One algorithm on one seed (data and algorithm seeded by ``cfg.seed``)."""
    name, cfg = task
    history = _algorithm(name, cfg).run(make_clients(cfg), cfg.n_rounds, seed=cfg.seed,
                                        evaluate_every=cfg.evaluate_every, monitor_every=cfg.evaluate_every,
                                        callback=lambda t, state: tick(1), progress=False)  # run_tasks' bar
    history.config.update(seed=cfg.seed)
    return history


def run_demo(cfg: DemoConfig, *, progress: bool | None = None) -> dict[str, History]:
    """Run FedMM and ParameterAveraging with identical settings; return their histories.

    ``progress``: a bar per run on standard error; None (default) only when it is a terminal.
    """
    datas = make_clients(cfg)
    histories = {}
    for name in ALGORITHMS:
        histories[name] = _algorithm(name, cfg).run(datas, cfg.n_rounds, seed=cfg.seed,
                                                    evaluate_every=cfg.evaluate_every,
                                                    monitor_every=cfg.evaluate_every, progress=progress)
    return histories


#: What the summary's columns mean, printed under the table (and in ``fedmm demo --help``).
COLUMNS = """\
Columns: objective = the dictionary-learning objective at its last evaluation (lower is better);
E_s / E_sp = how far the aggregated statistic S (the surrogate's parameters) moved in the last monitored
  round, ||S_t+1 - S_t||^2 / gamma_t^2 (squared change over squared step; smaller = closer to a fixed
  point): E_s for FedMM, which averages S; E_sp for ParameterAveraging, on the statistic of its theta;
E_ps / E_p = the same for the dictionary theta, ||theta_t+1 - theta_t||^2 / gamma_t^2: E_ps for FedMM
  (theta = T(S)), E_p for ParameterAveraging, which averages theta;
MB up = megabytes sent by the clients; seconds = wall time of the rounds (monitoring excluded);
  client-rounds/s = client updates per second."""


def _table(histories: dict[str, History]) -> tuple[list[str], list[list[str]]]:
    headers = ["run", "objective", "E_s / E_sp", "E_ps / E_p", "MB up", "seconds", "client-rounds/s"]
    rows = []
    for name, h in histories.items():
        obj = h.column("objective")
        final_obj = obj[np.isfinite(obj)][-1] if np.isfinite(obj).any() else float("nan")
        e_s = _last_finite(h, "E_s" if "E_s" in h.keys() else "E_sp")
        e_p = _last_finite(h, "E_ps" if "E_ps" in h.keys() else "E_p")
        seconds = h.records[-1]["wall_time"] if h.records else 0.0
        client_rounds = sum(len(r["active"]) for r in h.records)
        rate = client_rounds / seconds if seconds > 0 else float("nan")
        rows.append([name, f"{final_obj:.5f}", f"{e_s:.4e}", f"{e_p:.4e}",
                     f"{h.column('bytes_up').sum() / 1e6:.2f}", f"{seconds:.2f}", f"{rate:.0f}"])
    return headers, rows


def summary_table(histories: dict[str, History]) -> str:
    """A plain-text table of final objective, update norms, traffic and speed, with :data:`COLUMNS` under it."""
    header = (f"{'algorithm':<20} {'objective':>11} {'E_s / E_sp':>12} {'E_ps / E_p':>12} "
              f"{'MB up':>8} {'seconds':>8} {'client-rounds/s':>16}")
    lines = [header, "-" * len(header)]
    for name, h in histories.items():
        obj = h.column("objective")
        final_obj = obj[np.isfinite(obj)][-1] if np.isfinite(obj).any() else float("nan")
        e_s = _last_finite(h, "E_s" if "E_s" in h.keys() else "E_sp")
        e_p = _last_finite(h, "E_ps" if "E_ps" in h.keys() else "E_p")
        mb_up = h.column("bytes_up").sum() / 1e6
        seconds = h.records[-1]["wall_time"] if h.records else 0.0
        client_rounds = sum(len(r["active"]) for r in h.records)
        rate = client_rounds / seconds if seconds > 0 else float("nan")
        lines.append(f"{name:<20} {final_obj:>11.5f} {e_s:>12.4e} {e_p:>12.4e} {mb_up:>8.2f} "
                     f"{seconds:>8.2f} {rate:>16.0f}")
    return "\n".join([*lines, "", COLUMNS])


def _last_finite(h: History, name: str) -> float:
    if name not in h.keys():
        return float("nan")
    col = h.column(name)
    col = col[np.isfinite(col)]
    return float(col[-1]) if col.size else float("nan")


def plot_histories(histories: dict[str, History], path: str | os.PathLike) -> None:
    """:func:`plot_runs` of one run per algorithm."""
    plot_runs({name: [h] for name, h in histories.items()}, path)


def _series(h: History, field: str) -> tuple[np.ndarray, np.ndarray]:
    """Rounds 0..T and a field over them (NaN where not evaluated; the objective's t=0 from the config)."""
    y = np.full(len(h) + 1, np.nan)
    if field in h.keys():
        y[1:] = h.column(field)
    if field == "objective" and "initial_objective" in h.config:
        y[0] = float(h.config["initial_objective"])
    return np.arange(len(h) + 1, dtype=np.float64), y


def plot_runs(runs: dict[str, Sequence[History]], path: str | os.PathLike) -> None:
    """Objective and the §6 update norms (log scales) of each algorithm over its seeds, saved as a PNG.

    Parameters
    ----------
    runs : dict of str to sequence of History
        Per algorithm, its runs (one per seed): mean line and ±1 std band.
    path : path-like
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    panels = (
        ("objective", {"FedMM": "objective", "ParameterAveraging": "objective"},
         "dictionary-learning objective (lower is better)"),
        ("change of the aggregated statistic S per round", {"FedMM": "E_s", "ParameterAveraging": "E_sp"},
         "squared change of S / squared step\n" r"$\|S_{t+1} - S_t\|^2/\gamma_t^2$ (E_s, E_sp)"),
        ("change of the dictionary θ per round", {"FedMM": "E_ps", "ParameterAveraging": "E_p"},
         "squared change of θ / squared step\n" r"$\|\theta_{t+1} - \theta_t\|^2/\gamma_t^2$ (E_ps, E_p)"),
    )
    n_seeds = max(len(hs) for hs in runs.values())
    for ax, (title, fields, ylabel) in zip(axes, panels):
        for style, (name, hs) in enumerate(runs.items()):
            field = fields.get(name, fields["FedMM"])
            if not any(field in h.keys() for h in hs):
                continue
            series = [_series(h, field) for h in hs]
            length = max(len(t) for t, _ in series)
            curves = [np.pad(y, (0, length - len(y)), constant_values=np.nan) for _, y in series]
            # seed_bands numbers rounds from 1: shift so that the first entry is round 0
            plot_band(ax, curves, label=f"{name} ({field})", log=True, style=style,
                      x=np.arange(length, dtype=np.float64))
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("communication round t")
        ax.set_ylabel(ylabel, fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="upper right")
        tidy_log_axis(ax)
        if title == "objective":
            _label_the_ends(ax, runs)
    band = "shaded band: ± 1 standard deviation over the seeds" if n_seeds > 1 else "one seed, no band"
    fig.suptitle("fedmm demo: FedMM (averages the statistic S) vs ParameterAveraging (averages the dictionary θ), "
                 "20 heterogeneous clients, synthetic dictionary learning (FedMM paper §6)", fontsize=11)
    fig.text(0.5, 0.005, f"Lines: mean over {n_seeds} seed(s); {band}. Log-scale y axes; the objective's final "
             "values are written at the end of its lines.", ha="center", va="bottom", fontsize=9)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _label_the_ends(ax: Any, runs: dict[str, Sequence[History]]) -> None:
    """Write each algorithm's final mean objective next to the end of its line."""
    for style, (name, hs) in enumerate(runs.items()):
        series = [_series(h, "objective") for h in hs]
        length = min(len(y) for _, y in series)
        stacked = np.vstack([y[:length] for _, y in series])
        finite = np.isfinite(stacked).all(axis=0)
        if not finite.any():
            continue
        last = int(np.flatnonzero(finite)[-1])
        ax.annotate(f"{stacked[:, last].mean():.3f}", (last, stacked[:, last].mean()), fontsize=8,
                    color=f"C{style}", xytext=(3, 0), textcoords="offset points", va="center")
    ax.margins(x=0.08)


def _clients(text: str) -> int:
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"expected an integer >= 2 (half of them are active), got {text!r}")
    return value


def main(args: Any) -> int:
    """Entry point of ``fedmm demo`` (``args`` from :mod:`fedmm.cli`)."""
    if args.samples < args.clients:
        raise ExperimentError(f"expected at least --clients = {args.clients} samples, got {args.samples}",
                              option="--samples")
    base = DemoConfig(n_rounds=args.rounds, n_threads=args.threads, n_samples=args.samples,
                      n_clients=args.clients, active_clients=args.clients // 2,
                      evaluate_every=max(1, args.rounds // 60))
    log = make_log(args)
    os.makedirs(args.out, exist_ok=True)
    seeds = seed_list(args)
    log(f"fedmm demo: heterogeneous synthetic dictionary learning (FedMM paper §6), n={base.n_clients} "
        f"clients, {base.active_clients} active per round, p={base.n_features}, K={base.n_components}, "
        f"{base.bits}-bit quantization, {base.n_rounds} rounds, seeds {seeds[0]}..{seeds[-1]}")
    start = time.perf_counter()
    tasks = [(name, replace(base, seed=seed)) for seed in seeds for name in ALGORITHMS]
    done = run_tasks(_run_task, tasks, jobs=args.jobs, total=len(tasks) * base.n_rounds, desc="fedmm demo",
                     progress=resolve_progress(args))
    run_set = RunSet({f"{name}/seed={cfg.seed}": h for (name, cfg), h in zip(tasks, done)},
                     metadata={"experiment": "demo", "config": vars(base) | {"seeds": seeds}})
    json_path = os.path.join(args.out, "demo.json")
    run_set.save(json_path)
    by_algorithm = {name: [h for (n, _), h in zip(tasks, done) if n == name] for name in ALGORITHMS}
    plot = os.path.join(args.out, "demo.png")
    plot_runs(by_algorithm, plot)
    headers, rows = _table({f"{name} (seed {cfg.seed})": h for (name, cfg), h in zip(tasks, done)})
    summary, files = write_summary(args.out, "demo", headers, rows, notes="\n" + COLUMNS)
    log("")
    log(summary)
    log(f"\nwrote {', '.join([json_path, plot, *(str(f) for f in files)])} ({time.perf_counter() - start:.1f} s)")
    return 0


def register(subparsers: Any) -> None:
    """Add the ``demo`` subcommand to the ``fedmm`` parser."""
    p = subparsers.add_parser("demo", help="FedMM vs the Θ-space baseline on synthetic dictionary learning",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              description="FedMM (averages the clients' statistics S) against the Θ-space baseline\n"
                                          "ParameterAveraging (averages their dictionaries θ) on heterogeneous\n"
                                          "synthetic dictionary learning (FedMM paper §6); writes a JSON run set\n"
                                          "(read it with fedmm.load), a PNG plot and a summary table into --out.\n"
                                          "About 15 s with the defaults on an idle 2-core machine.",
                              epilog="The summary table:\n" + COLUMNS)
    add_common_options(p, name="demo", seeds=1, rounds=DemoConfig.n_rounds)
    p.add_argument("--samples", type=positive_int, default=DemoConfig.n_samples, metavar="N",
                   help="synthetic signals in total (default: %(default)s)")
    p.add_argument("--clients", type=_clients, default=DemoConfig.n_clients, metavar="N",
                   help="clients, at least 2; half of them active per round (default: %(default)s)")
    p.add_argument("--threads", type=positive_int, default=1, metavar="N",
                   help="client threads of the in-process runtime (default: %(default)s)")
    add_deprecated_alias(p, "--seed", dest="first_seed", replacement="--first-seed", type=int)
    p.set_defaults(func=main)
