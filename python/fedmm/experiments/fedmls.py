# SPDX-License-Identifier: BSD-3-Clause
"""The FedMLS paper's §4 experiment (Figure 1) on scikit-learn's breast-cancer data.

Hinge-loss SVM with a bias (eq. (10)) on the Wisconsin *diagnostic* set bundled
with scikit-learn, standing in for the paper's 699×10 original.  Features are
standardized; by default only the 10 "mean" features are kept (the paper's set
has 10 features, and with all 30 the standardized data are linearly separable,
so ``F* = 0`` and a relative suboptimality is undefined).  The samples are split
among ``n = 10`` clients by k-means (heterogeneous clients), all algorithms start
from zero, use 10% minibatch subgradients, ``T_k = k`` local steps in round ``k``
(FedMLS, FedAvg, Scaffold) or ``p_t = 1/√t`` communication (Scaffnew), and the
step-size rules of the paper: FedMLS ``prox_weight`` ``λ_k = λ0/k``; FedAvg
``step`` ``η_k = η0/√k``; Scaffold ``η_g = √n``, ``η_t = η0/(η_g t)``; Scaffnew
``η_t = η0/√t``.  ``λ0`` and ``η0`` are tuned over powers of ten on separate
tuning seeds; the winners run on ``n_seeds`` seeds.  ``F*`` is exact (HiGHS LP); FedMLS's ball radius defaults
to ``2‖w*‖`` (it contains a minimizer, so ``F*_R = F*``).

Outputs in ``output_dir``: ``fedmls_summary.txt`` (the summary table),
``fedmls_summary.json`` (the same table plus configuration, F*, tuning table
and winners, mean/quantile curves against rounds and against local steps),
``fedmls_histories.json`` (a :class:`fedmm.RunSet` of every final run, named
``"<algorithm>/seed=<s>"``; read it with :func:`fedmm.load`) and
``fedmls_curves.png``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from typing import Any, Sequence

import numpy as np

from fedmm._validation import check_count, check_in, check_int, check_real
from fedmm.algorithms.fedmls import FedMLS
from fedmm.algorithms.nonsmooth import FedAvg, Scaffnew, Scaffold
from fedmm.experiments._common import (
    ExperimentError,
    add_common_options,
    add_deprecated_alias,
    make_log,
    nonneg_int,
    output_dir,
    positive_float,
    positive_float_list,
    positive_int,
    probability,
    resolve_progress,
    run_tasks,
    tune_on_grid,
    write_summary,
)
from fedmm.history import RunSet
from fedmm.models.nonsmooth import HingeSVM

__all__ = ["load_breast_cancer_clients", "run_fedmls_experiment", "add_fedmls_parser", "ALGORITHMS"]

ALGORITHMS = ("FedMLS", "FedAvg", "Scaffold", "Scaffnew")
_TUNING_SEED_OFFSET = 10_000  # tuning seeds never coincide with reported seeds


def load_breast_cancer_clients(
    n_clients: int = 10, *, n_features: int | None = 10, kmeans_seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Standardized breast-cancer data split among clients by k-means.

    Parameters
    ----------
    n_clients : int
        Number of k-means clusters = clients.
    n_features : int or None
        Keep the first ``n_features`` columns (10: the "mean" features); None keeps all 30.
    kmeans_seed : int
        ``random_state`` of scikit-learn's ``KMeans`` (``n_init=10``).

    Returns
    -------
    list of (A, y)
        ``A`` (m_i, d) float64 standardized features, ``y`` (m_i,) labels in {−1, +1}
        (+1 = benign, scikit-learn's class 1).
    """
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits  # a scikit-learn dependency

    n_clients = check_int(n_clients, "n_clients", low=1)
    X, target = load_breast_cancer(return_X_y=True)
    if n_features is not None:
        X = X[:, : check_int(n_features, "n_features", low=1, high=X.shape[1])]
    X = StandardScaler().fit_transform(X)
    y = np.where(target == 1, 1.0, -1.0)
    # one OpenMP thread: 569 points need no more, and spinning threads on a busy machine cost seconds
    with threadpool_limits(limits=1):
        labels = KMeans(n_clusters=n_clients, n_init=10, random_state=kmeans_seed).fit_predict(X)
    return [(np.ascontiguousarray(X[labels == i]), y[labels == i]) for i in range(n_clients)]


def _make(name: str, problem, value: float, *, radius, oracle: str, batch_size: float):
    common = {"oracle": oracle, "batch_size": batch_size}
    if name == "FedMLS":  # T_k = k, λ_k = λ0/k
        return FedMLS(problem, local_steps=("linear", 1), prox_weight=("inverse", value), radius=radius, **common)
    if name == "FedAvg":  # T_k = k, η_k = η0/√k
        return FedAvg(problem, local_steps=("linear", 1), local_lr=value, **common)
    if name == "Scaffold":  # T_k = k, η_t = η0/(√n t)
        return Scaffold(problem, local_steps=("linear", 1), local_lr=value, **common)
    return Scaffnew(problem, local_lr=value, **common)  # η_t = η0/√t, p_t = 1/√t


def _run_task(task: tuple, tick: Any) -> Any:
    """One run (a worker process's task when ``jobs > 1``)."""
    name, value, seed, datas, radius, oracle, batch_size, n_rounds = task
    algo = _make(name, HingeSVM(), value, radius=radius, oracle=oracle, batch_size=batch_size)
    history = algo.run(list(datas), n_rounds, seed=seed, progress=False, evaluate_every=1)  # run_tasks' bar
    history.config.update(seed=seed, tuned_value=value)
    tick(n_rounds)
    return history


def _relative(objective: np.ndarray, f_star: float) -> np.ndarray:
    return (objective - f_star) / abs(f_star)


def _score(histories, f_star: float) -> float:
    """Mean relative suboptimality over the last 10% of rounds, averaged over seeds."""
    tails = []
    for h in histories:
        rel = _relative(h["objective"], f_star)
        tails.append(rel[-max(1, len(rel) // 10):].mean())
    score = float(np.mean(tails))
    return score if np.isfinite(score) else float("inf")


def _curves_vs_steps(histories, f_star: float, grid: np.ndarray) -> np.ndarray:
    """Relative suboptimality at the last communication with ``local_steps ≤ s``, per seed."""
    out = np.full((len(histories), grid.size), np.nan)
    for r, h in enumerate(histories):
        steps, rel = h["total_local_steps"], _relative(h["objective"], f_star)
        pos = np.searchsorted(steps, grid, side="right") - 1
        ok = pos >= 0
        out[r, ok] = rel[pos[ok]]
    return out


def _summarize(curves: np.ndarray) -> dict:
    """Mean and 10%/90% quantiles over seeds (None where no seed has a value yet)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN, kept as None
        stats = {
            "mean": np.nanmean(curves, axis=0),
            "q10": np.nanquantile(curves, 0.1, axis=0),
            "q90": np.nanquantile(curves, 0.9, axis=0),
        }
    return {k: [float(v) if np.isfinite(v) else None for v in a] for k, a in stats.items()}


def run_fedmls_experiment(
    output_dir: str | os.PathLike,
    *,
    n_clients: int = 10,
    n_features: int | None = 10,
    n_rounds: int = 100,
    n_seeds: int = 20,
    tune_seeds: int = 3,
    oracle: str = "minibatch",
    batch_size: float = 0.1,
    prox_weight_grid: Sequence[float] = tuple(10.0 ** np.arange(-2, 4)),
    local_lr_grid: Sequence[float] = tuple(10.0 ** np.arange(-5, 1)),
    radius: float | None = None,
    algorithms: Sequence[str] = ALGORITHMS,
    kmeans_seed: int = 0,
    plot: bool = True,
    progress: bool | None = None,
    first_seed: int = 0,
    extend_grid: int = 3,
    jobs: int = 1,
    warn: Any = None,
) -> dict:
    """Reproduce the FedMLS paper's Figure 1 (see the module docstring).

    Parameters
    ----------
    output_dir : path
        Created if missing; receives the JSON files and the PNG.
    n_clients, n_features, kmeans_seed
        Data split (see :func:`load_breast_cancer_clients`).
    n_rounds : int
        Communication rounds ``K`` per run.
    n_seeds : int
        Seeds of the reported runs (first_seed … first_seed + n_seeds − 1).
    first_seed : int
        Seed of the first reported run.
    tune_seeds : int
        Seeds per grid value when tuning (10000 …, disjoint from the reported seeds).
    oracle, batch_size
        Subgradient oracle of all algorithms (the paper: 10% minibatches).
    prox_weight_grid, local_lr_grid : sequence of float
        Powers of ten tried for FedMLS's ``λ0`` (``prox_weight``) and the
        baselines' ``η0`` (``step``).
    extend_grid : int
        When a winner is at an edge of its grid, extend the grid past that
        edge (by the ratio of its two edge values, 10 for the default
        grids) at most this many times (0: only warn; default 3).
    jobs : int
        Worker processes (runs in parallel).
    warn : callable(str), optional
        Receives a warning for every winner at the edge of its grid.
    radius : float, optional
        FedMLS's ball radius; default ``2‖w*‖``.  If the ball excludes the
        LP minimizer, ``F*`` is the ball-constrained optimum (cutting planes).
    algorithms : sequence of str
        Subset of ``ALGORITHMS``.
    plot : bool
        Write ``fedmls_curves.png`` (matplotlib, Agg backend).
    progress : bool or None
        A progress bar (tqdm) on standard error: True on, False off, None
        (default) on only when standard error is a terminal.

    Returns
    -------
    dict
        The content of ``fedmls_summary.json`` (and ``"table"``: the summary table as text).
    """
    n_rounds = check_count(n_rounds, "n_rounds", low=1)
    n_seeds = check_int(n_seeds, "n_seeds", low=1)
    tune_seeds = check_int(tune_seeds, "tune_seeds", low=1)
    oracle = check_in(oracle, "oracle", ("full", "minibatch"))
    for a in algorithms:
        check_in(a, "algorithms", ALGORITHMS)
    prox_weight_grid = [check_real(v, "prox_weight_grid", low=0.0, low_open=True) for v in prox_weight_grid]
    local_lr_grid = [check_real(v, "local_lr_grid", low=0.0, low_open=True) for v in local_lr_grid]
    os.makedirs(output_dir, exist_ok=True)
    started = time.perf_counter()

    datas = load_breast_cancer_clients(n_clients, n_features=n_features, kmeans_seed=kmeans_seed)
    problem = HingeSVM()
    free = problem.minimize(datas)
    if radius is None:
        radius = 2.0 * float(np.linalg.norm(free.w))
    radius = check_real(radius, "radius", low=0.0, low_open=True)
    optimum = problem.minimize(datas, radius)
    f_star = optimum.value
    # F(0) = N/n (every hinge term is 1 at w = 0): an F* that small relative to it is 0 up to the LP's rounding
    f_zero = sum(A.shape[0] for A, _ in datas) / len(datas)
    if not f_star > 1e-9 * f_zero:
        raise ValueError(f"F* = {f_star:.3g} ≈ 0 (separable data): the relative suboptimality (F - F*)/F* is "
                         "undefined; use fewer features")

    grids = {a: (prox_weight_grid if a == "FedMLS" else local_lr_grid) for a in algorithms}
    first_seed = check_int(first_seed, "first_seed", low=0)
    common = (tuple(datas), radius, oracle, batch_size, n_rounds)

    def run(name: str, values: Sequence[float], seeds: Sequence[int], desc: str) -> list:
        tasks = [(name, value, seed, *common) for value in values for seed in seeds]
        return run_tasks(_run_task, tasks, jobs=jobs, total=len(tasks) * n_rounds, desc=desc, progress=progress)

    tuning, winners, at_edge = {}, {}, {}
    tune = range(_TUNING_SEED_OFFSET, _TUNING_SEED_OFFSET + tune_seeds)
    for name in algorithms:
        def evaluate(values: list[float], name: str = name) -> list[float]:
            hs = run(name, values, tune, f"fedmls: tuning {name}")
            return [_score(hs[i * tune_seeds:(i + 1) * tune_seeds], f_star) for i in range(len(values))]

        found = tune_on_grid(evaluate, grids[name], extend=extend_grid,
                             name=f"{'prox_weight0' if name == 'FedMLS' else 'local_lr0'} of {name}",
                             option="--prox-weight-grid" if name == "FedMLS" else "--local-lr-grid", warn=warn)
        tuning[name] = found["scores"]
        winners[name] = found["best"]
        at_edge[name] = found["at_edge"]

    seeds = list(range(first_seed, first_seed + n_seeds))
    final = {name: run(name, [winners[name]], seeds, f"fedmls: {name} x {n_seeds} seeds") for name in algorithms}

    max_steps = max(float(h["total_local_steps"][-1]) for hs in final.values() for h in hs)
    local_step_grid = np.unique(np.geomspace(1, max_steps, 200).round())
    curves = {}
    for name, hs in final.items():
        by_round = np.array([_relative(h["objective"], f_star) for h in hs])
        curves[name] = {
            "rounds": _summarize(by_round),
            "local_steps": _summarize(_curves_vs_steps(hs, f_star, local_step_grid)),
            "final_relative_suboptimality": by_round[:, -1].tolist(),
            "total_local_steps": [float(h["total_local_steps"][-1]) for h in hs],
            "parameter": "prox_weight0" if name == "FedMLS" else "local_lr0",
        }
    summary = {
        "experiment": "fedmls",
        "data": {
            "source": "sklearn.datasets.load_breast_cancer (Wisconsin diagnostic), standardized",
            "n_features": n_features if n_features is not None else datas[0][0].shape[1],
            "n_clients": n_clients,
            "client_sizes": [int(A.shape[0]) for A, _ in datas],
            "split": f"KMeans(n_clusters={n_clients}, n_init=10, random_state={kmeans_seed})",
        },
        "problem": "hinge-loss SVM with bias, F(w) = (1/n) sum_i sum_j max(0, 1 - y_j (x.a_j + theta))",
        "f_star": f_star,
        "f_star_certified_gap": optimum.gap,
        "radius": radius,
        "unconstrained_minimizer_norm": float(np.linalg.norm(free.w)),
        "n_rounds": n_rounds,
        "n_seeds": n_seeds,
        "tune_seeds": tune_seeds,
        "oracle": oracle,
        "batch_size": batch_size if oracle == "minibatch" else None,
        "schedules": {
            "FedMLS": "T_k = k, prox_weight lambda_k = prox_weight0 / k",
            "FedAvg": "T_k = k, local_lr eta_k = local_lr0 / sqrt(k)",
            "Scaffold": "T_k = k, server_lr eta_g = sqrt(n), local_lr eta_t = local_lr0 / (eta_g t)",
            "Scaffnew": "communication_prob p_t = 1 / sqrt(t), local_lr eta_t = local_lr0 / sqrt(t)",
        },
        "tuning_score": "mean relative suboptimality over the last 10% of rounds, mean over tuning seeds",
        "tuning": tuning,
        "winners": winners,
        "winner_at_grid_edge": at_edge,
        "first_seed": first_seed,
        "local_step_grid": local_step_grid.tolist(),
        "curves": curves,
        "elapsed_seconds": time.perf_counter() - started,
    }
    RunSet({f"{name}/seed={seed}": h for name, hs in final.items() for seed, h in zip(seeds, hs)},
           metadata={"experiment": "fedmls", "f_star": f_star, "winners": winners, "seeds": seeds}
           ).save(os.path.join(output_dir, "fedmls_histories.json"))
    headers = ["algorithm", "tuned parameter", "winner", "final rel. subopt. (mean)", "10%", "90%",
               "local steps/client"]
    rows = []
    for name in algorithms:
        c = curves[name]
        final_rel = np.asarray(c["final_relative_suboptimality"])
        win = f"{winners[name]:g}" + (f" ({at_edge[name]} edge of grid)" if at_edge[name] else "")
        rows.append([name, c["parameter"], win, f"{final_rel.mean():.3e}", f"{np.quantile(final_rel, 0.1):.3e}",
                     f"{np.quantile(final_rel, 0.9):.3e}", f"{np.mean(c['total_local_steps']):.0f}"])
    notes = (f"(relative suboptimality (F - F*)/F* after {n_rounds} rounds over {n_seeds} seeds; F* = {f_star:.6g}; "
             "winner: best grid value by the mean relative suboptimality over the last 10% of rounds on "
             f"{tune_seeds} tuning seed(s))")
    summary["table"], _ = write_summary(output_dir, "fedmls", headers, rows, notes=notes, extra=summary)
    if plot:
        plot_fedmls_curves(summary, os.path.join(output_dir, "fedmls_curves.png"))
    return summary


def plot_fedmls_curves(summary: dict, path: str | os.PathLike) -> None:
    """Two panels: relative suboptimality against rounds and against local steps (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    rounds = np.arange(1, summary["n_rounds"] + 1)
    steps = np.asarray(summary["local_step_grid"])
    styles = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))
    for k, (name, c) in enumerate(summary["curves"].items()):
        label = f"{name} ({c['parameter']}={summary['winners'][name]:g})"
        ls, marker = styles[k % len(styles)]
        for ax, x, key in ((axes[0], rounds, "rounds"), (axes[1], steps, "local_steps")):
            band = {q: np.array([np.nan if v is None else v for v in c[key][q]]) for q in ("mean", "q10", "q90")}
            line, = ax.plot(x, band["mean"], label=label, ls=ls, marker=marker, markevery=max(1, len(x) // 8),
                            markersize=4, markerfacecolor="none")
            ax.fill_between(x, band["q10"], band["q90"], color=line.get_color(), alpha=0.2, lw=0)
    for ax, xlabel, title in zip(axes, ("communication round k (log scale)", "local steps per client (log scale)"),
                                 ("against communication rounds", "against local computation")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("relative suboptimality (F − F*)/F*, lower is better")
    fig.suptitle(
        f"FedMLS paper Fig. 1: hinge SVM on breast cancer, {summary['data']['n_clients']} k-means clients, "
        f"{summary['n_seeds']} seeds", fontsize=11)
    fig.text(0.5, 0.005, "Lines: mean over the seeds; shaded band: 10%–90% quantiles over the seeds; "
             "parameters tuned on separate seeds.", ha="center", va="bottom", fontsize=9)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- command line --------------------------------------------------------------------------------
#: Default tuning grids of the command line: powers of ten, 10^-2 … 10^3 for λ0 and 10^-5 … 10^0 for η0.
_PROX_WEIGHT_GRID = tuple(10.0 ** np.arange(-2, 4))
_LOCAL_LR_GRID = tuple(10.0 ** np.arange(-5, 1))


def _grid_text(grid: Sequence[float]) -> str:
    return ",".join(f"{v:g}" for v in grid)


def add_fedmls_parser(subparsers: Any) -> Any:
    """Register ``fedmls`` on an ``argparse`` subparsers object (``fedmm experiment fedmls``)."""
    parser = subparsers.add_parser(
        "fedmls",
        help="FedMLS paper Fig. 1: FedMLS, FedAvg, Scaffold, Scaffnew on the breast-cancer SVM",
        description=__doc__.split("\n\n")[0],
    )
    add_common_options(parser, name="fedmls", seeds=20, rounds=100, rounds_help="communication rounds K")
    parser.add_argument("--tune-seeds", type=positive_int, default=3, metavar="N",
                        help="seeds per grid value when tuning (default: %(default)s)")
    parser.add_argument("--clients", type=positive_int, default=10, metavar="N",
                        help="number of k-means clients, at most 569 (default: %(default)s)")
    parser.add_argument("--features", type=nonneg_int, default=10, metavar="D",
                        help="first features kept, 0 for all 30 (default: %(default)s)")
    parser.add_argument("--oracle", choices=("minibatch", "full"), default="minibatch",
                        help="subgradient oracle of every algorithm (default: %(default)s)")
    parser.add_argument("--batch-size", type=_batch_size_arg, default=0.1, metavar="B",
                        help="minibatch size: a fraction of a client's samples (0.1), or a number of samples (an "
                        "integer such as 8) (default: %(default)s)")
    add_deprecated_alias(parser, "--batch-fraction", dest="batch_size", replacement="--batch-size",
                         type=probability)
    parser.add_argument("--radius", type=positive_float, default=None, metavar="R",
                        help="FedMLS ball radius (default: 2‖w*‖)")
    parser.add_argument("--prox-weight-grid", type=positive_float_list, default=_PROX_WEIGHT_GRID, metavar="L,...",
                        help="FedMLS prox_weight λ0 values tried, comma-separated, λ_k = λ0/k "
                        f"(default: {_grid_text(_PROX_WEIGHT_GRID)})")
    parser.add_argument("--local-lr-grid", type=positive_float_list, default=_LOCAL_LR_GRID, metavar="ETA,...",
                        help="baselines' local_lr η0 values tried, comma-separated "
                        f"(default: {_grid_text(_LOCAL_LR_GRID)})")
    add_deprecated_alias(parser, "--step-grid", dest="local_lr_grid", replacement="--local-lr-grid",
                         type=positive_float_list)
    parser.add_argument("--extend-grid", type=nonneg_int, default=3, metavar="N",
                        help="when a winner is at an edge of its grid, extend the grid past that edge (by the "
                        "ratio of its two edge values, 10 for the default grids) at most N times; 0 only warns "
                        "(default: %(default)s)")
    parser.add_argument("--plot", action=argparse.BooleanOptionalAction, default=True,
                        help="write fedmls_curves.png (default: %(default)s)")
    add_deprecated_alias(parser, "--output-dir", dest="out", replacement="--out", type=output_dir)
    add_deprecated_alias(parser, "-o", dest="out", replacement="--out", type=output_dir)
    for old, dest, new in (("--prox-weight-powers", "prox_weight_grid", "--prox-weight-grid"),
                           ("--lam-powers", "prox_weight_grid", "--prox-weight-grid"),
                           ("--step-powers", "local_lr_grid", "--local-lr-grid"),
                           ("--eta-powers", "local_lr_grid", "--local-lr-grid")):
        add_deprecated_alias(parser, old, dest=dest, replacement=f"{new} (the grid's values, comma-separated)",
                             type=int, nargs=2, convert=_powers_grid)
    parser.set_defaults(func=_main)
    return parser


def _batch_size_arg(text: str) -> float | int:
    """``--batch-size``: an integer is a number of samples (>= 1), anything else a fraction in (0, 1]."""
    try:
        count = int(text)
    except ValueError:
        return probability(text)
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a number of samples >= 1 or a fraction in (0, 1], got {text!r}")
    return count


def _powers_grid(values: Sequence[int]) -> tuple[float, ...]:
    """``convert`` of the deprecated ``--prox-weight-powers LO HI``: the grid 10^LO, …, 10^HI."""
    lo, hi = values
    if lo > hi:
        raise argparse.ArgumentTypeError(f"expected LO <= HI, got {lo} {hi} (an empty range)")
    return tuple(10.0 ** np.arange(lo, hi + 1))


def _main(args: Any) -> int:
    if args.clients > 569:
        raise ExperimentError(f"expected at most 569 clients (the data set's samples), got {args.clients}",
                              option="--clients")
    if args.features > 30:
        raise ExperimentError(f"expected at most 30 features (0 for all), got {args.features}", option="--features")
    summary = run_fedmls_experiment(
        args.out,
        n_clients=args.clients,
        n_features=args.features or None,
        n_rounds=args.rounds,
        n_seeds=args.seeds,
        first_seed=args.first_seed,
        tune_seeds=args.tune_seeds,
        oracle=args.oracle,
        batch_size=args.batch_size,
        prox_weight_grid=args.prox_weight_grid,
        local_lr_grid=args.local_lr_grid,
        radius=args.radius,
        plot=args.plot,
        progress=resolve_progress(args),
        extend_grid=args.extend_grid,
        jobs=args.jobs,
        warn=lambda text: print(f"fedmm experiment fedmls: warning: {text}", file=sys.stderr),
    )
    log = make_log(args)
    log(summary["table"])
    log(f"wrote {', '.join(os.path.join(args.out, f) for f in _OUTPUTS if f.endswith('.json') or args.plot)}")
    return 0


_OUTPUTS = ("fedmls_summary.txt", "fedmls_summary.json", "fedmls_histories.json", "fedmls_curves.png")
