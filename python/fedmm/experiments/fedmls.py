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

Outputs in ``output_dir``: ``fedmls_summary.json`` (configuration, F*, tuning
table and winners, mean/quantile curves against rounds and against local
steps), ``fedmls_histories.json`` (every History of the final runs) and
``fedmls_curves.png``.
"""
from __future__ import annotations

import json
import os
import time
import warnings
from typing import Any, Sequence

import numpy as np

from fedmm._progress import progress_bar
from fedmm._validation import check_in, check_int, check_real
from fedmm.algorithms.fedmls import FedMLS
from fedmm.algorithms.nonsmooth import FedAvg, Scaffnew, Scaffold
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


def _make(name: str, problem, value: float, *, radius, oracle: str, batch_fraction: float):
    common = {"oracle": oracle, "batch_fraction": batch_fraction}
    if name == "FedMLS":  # T_k = k, λ_k = λ0/k
        return FedMLS(problem, local_steps=("linear", 1), prox_weight=("inverse", value), radius=radius, **common)
    if name == "FedAvg":  # T_k = k, η_k = η0/√k
        return FedAvg(problem, local_steps=("linear", 1), step=value, **common)
    if name == "Scaffold":  # T_k = k, η_t = η0/(√n t)
        return Scaffold(problem, local_steps=("linear", 1), step=value, **common)
    return Scaffnew(problem, step=value, **common)  # η_t = η0/√t, p_t = 1/√t


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
    batch_fraction: float = 0.1,
    prox_weight_grid: Sequence[float] = tuple(10.0 ** np.arange(-2, 4)),
    step_grid: Sequence[float] = tuple(10.0 ** np.arange(-5, 1)),
    radius: float | None = None,
    algorithms: Sequence[str] = ALGORITHMS,
    kmeans_seed: int = 0,
    plot: bool = True,
    progress: bool | None = None,
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
        Seeds of the reported runs (0 … n_seeds − 1).
    tune_seeds : int
        Seeds per grid value when tuning (10000 …, disjoint from the reported seeds).
    oracle, batch_fraction
        Subgradient oracle of all algorithms (the paper: 10% minibatches).
    prox_weight_grid, step_grid : sequence of float
        Powers of ten tried for FedMLS's ``λ0`` (``prox_weight``) and the
        baselines' ``η0`` (``step``).
    radius : float, optional
        FedMLS's ball radius; default ``2‖w*‖``.  If the ball excludes the
        LP minimizer, ``F*`` is the ball-constrained optimum (cutting planes).
    algorithms : sequence of str
        Subset of ``ALGORITHMS``.
    plot : bool
        Write ``fedmls_curves.png`` (matplotlib, Agg backend).
    progress : bool or None
        A progress bar (tqdm, counted in runs) on standard error: True on,
        False off, None (default) on only when standard error is a terminal.

    Returns
    -------
    dict
        The content of ``fedmls_summary.json``.
    """
    n_rounds = check_int(n_rounds, "n_rounds", low=1)
    n_seeds = check_int(n_seeds, "n_seeds", low=1)
    tune_seeds = check_int(tune_seeds, "tune_seeds", low=1)
    oracle = check_in(oracle, "oracle", ("full", "minibatch"))
    for a in algorithms:
        check_in(a, "algorithms", ALGORITHMS)
    prox_weight_grid = [check_real(v, "prox_weight_grid", low=0.0, low_open=True) for v in prox_weight_grid]
    step_grid = [check_real(v, "step_grid", low=0.0, low_open=True) for v in step_grid]
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
    if not abs(f_star) > 0:
        raise ValueError("F* = 0 (separable data): relative suboptimality is undefined; use fewer features")

    grids = {a: (prox_weight_grid if a == "FedMLS" else step_grid) for a in algorithms}
    n_jobs = sum(len(g) * tune_seeds for g in grids.values()) + len(algorithms) * n_seeds
    bar = progress_bar(progress, total=n_jobs, desc="fedmls experiment", unit="run")

    def run(name, value, seed):
        algo = _make(name, problem, value, radius=radius, oracle=oracle, batch_fraction=batch_fraction)
        h = algo.run(datas, n_rounds, seed=seed, objective_every=1, progress=False)  # the experiment's bar
        if bar is not None:
            bar.update(1)
        return h

    tuning, winners = {}, {}
    for name in algorithms:
        table = {}
        for value in grids[name]:
            hs = [run(name, value, _TUNING_SEED_OFFSET + s) for s in range(tune_seeds)]
            table[repr(value)] = _score(hs, f_star)
        tuning[name] = table
        best = min(table, key=table.get)
        winners[name] = float(best)

    final = {name: [run(name, winners[name], s) for s in range(n_seeds)] for name in algorithms}
    if bar is not None:
        bar.close()

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
            "parameter": "prox_weight0" if name == "FedMLS" else "step0",
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
        "batch_fraction": batch_fraction if oracle == "minibatch" else None,
        "schedules": {
            "FedMLS": "T_k = k, prox_weight lambda_k = prox_weight0 / k",
            "FedAvg": "T_k = k, step eta_k = step0 / sqrt(k)",
            "Scaffold": "T_k = k, eta_g = sqrt(n), step eta_t = step0 / (eta_g t)",
            "Scaffnew": "communication_prob p_t = 1 / sqrt(t), step eta_t = step0 / sqrt(t)",
        },
        "tuning_score": "mean relative suboptimality over the last 10% of rounds, mean over tuning seeds",
        "tuning": tuning,
        "winners": winners,
        "local_step_grid": local_step_grid.tolist(),
        "curves": curves,
        "elapsed_seconds": time.perf_counter() - started,
    }
    with open(os.path.join(output_dir, "fedmls_summary.json"), "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=1)
    with open(os.path.join(output_dir, "fedmls_histories.json"), "w", encoding="utf-8") as fh:
        json.dump({name: {str(s): h.to_dict() for s, h in enumerate(hs)} for name, hs in final.items()}, fh)
    if plot:
        plot_fedmls_curves(summary, os.path.join(output_dir, "fedmls_curves.png"))
    return summary


def plot_fedmls_curves(summary: dict, path: str | os.PathLike) -> None:
    """Two panels: relative suboptimality against rounds and against local steps (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    rounds = np.arange(1, summary["n_rounds"] + 1)
    steps = np.asarray(summary["local_step_grid"])
    for name, c in summary["curves"].items():
        label = f"{name} ({c['parameter']}={summary['winners'][name]:g})"
        for ax, x, key in ((axes[0], rounds, "rounds"), (axes[1], steps, "local_steps")):
            band = {q: np.array([np.nan if v is None else v for v in c[key][q]]) for q in ("mean", "q10", "q90")}
            line, = ax.plot(x, band["mean"], label=label)
            ax.fill_between(x, band["q10"], band["q90"], color=line.get_color(), alpha=0.2)
    for ax, xlabel in zip(axes, ("communication rounds", "local steps per client")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("(F(x) − F*) / F*")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"Hinge SVM, breast cancer, n={summary['data']['n_clients']} k-means clients, "
        f"{summary['n_seeds']} seeds (mean, 10–90% band)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- command line --------------------------------------------------------------------------------
def add_fedmls_parser(subparsers: Any) -> Any:
    """Register ``fedmls`` on an ``argparse`` subparsers object (``fedmm experiment fedmls``)."""
    parser = subparsers.add_parser(
        "fedmls",
        help="FedMLS paper Fig. 1: FedMLS, FedAvg, Scaffold, Scaffnew on the breast-cancer SVM",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--out", "--output-dir", "-o", dest="output_dir", metavar="DIR", default="fedmm-fedmls",
                        help="output directory for JSON and PNG")
    parser.add_argument("--rounds", type=int, default=100, help="communication rounds K")
    parser.add_argument("--seeds", type=int, default=20, help="seeds of the reported runs")
    parser.add_argument("--tune-seeds", type=int, default=3, help="seeds per grid value when tuning")
    parser.add_argument("--clients", type=int, default=10, help="number of k-means clients")
    parser.add_argument("--features", type=int, default=10, help="first features kept (0: all 30)")
    parser.add_argument("--oracle", choices=("minibatch", "full"), default="minibatch")
    parser.add_argument("--batch-fraction", type=float, default=0.1)
    parser.add_argument("--radius", type=float, default=None, help="FedMLS ball radius (default 2‖w*‖)")
    parser.add_argument("--prox-weight-powers", "--lam-powers", dest="prox_weight_powers", type=int, nargs=2,
                        default=(-2, 3), metavar=("LO", "HI"),
                        help="FedMLS prox_weight λ0 grid 10^LO … 10^HI (λ_k = λ0/k)")
    parser.add_argument("--step-powers", "--eta-powers", dest="step_powers", type=int, nargs=2, default=(-5, 0),
                        metavar=("LO", "HI"), help="baselines' step η0 grid 10^LO … 10^HI")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--progress", action="store_true")
    parser.set_defaults(func=_main)
    return parser


def _main(args: Any) -> int:
    summary = run_fedmls_experiment(
        args.output_dir,
        n_clients=args.clients,
        n_features=args.features or None,
        n_rounds=args.rounds,
        n_seeds=args.seeds,
        tune_seeds=args.tune_seeds,
        oracle=args.oracle,
        batch_fraction=args.batch_fraction,
        prox_weight_grid=tuple(10.0 ** np.arange(args.prox_weight_powers[0], args.prox_weight_powers[1] + 1)),
        step_grid=tuple(10.0 ** np.arange(args.step_powers[0], args.step_powers[1] + 1)),
        radius=args.radius,
        plot=not args.no_plot,
        progress=True if args.progress else None,
    )
    for name, value in summary["winners"].items():
        final = np.mean(summary["curves"][name]["final_relative_suboptimality"])
        print(f"{name:9s} {summary['curves'][name]['parameter']}={value:g}  "
              f"mean final relative suboptimality {final:.3e}")
    print(f"wrote {os.path.join(args.output_dir, 'fedmls_summary.json')}")
    return 0
