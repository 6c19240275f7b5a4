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

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedmm.history import History

__all__ = ["DemoConfig", "run_demo", "plot_histories", "summary_table"]


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
    eta: float = 0.2
    alpha: float = 0.01
    beta: float = 0.5
    bits: int = 8
    n_rounds: int = 1000
    objective_every: int = 25
    seed: int = 0
    n_threads: int = 1


def make_clients(cfg: DemoConfig) -> list[np.ndarray]:
    """The heterogeneous clients of §6: synthetic signals split by equal-size k-means."""
    from fedmm.data import split_by_constrained_kmeans, synthetic_dictionary

    Z, _, _ = synthetic_dictionary(cfg.n_samples, cfg.n_features, cfg.n_components, seed=cfg.seed)
    # One k-means++ start keeps the split to a few seconds; the clusters are equal-size either way.
    return split_by_constrained_kmeans(Z, cfg.n_clients, seed=cfg.seed, n_init=1)


def run_demo(cfg: DemoConfig, *, progress: bool | None = None) -> dict[str, History]:
    """Run FedMM and ParameterAveraging with identical settings; return their histories.

    ``progress``: a bar per run on standard error; None (default) only when it is a terminal.
    """
    from fedmm.algorithms import FedMM, ParameterAveraging
    from fedmm.compression import StochasticRounding
    from fedmm.models import DictionaryLearning

    datas = make_clients(cfg)
    histories = {}
    for cls in (FedMM, ParameterAveraging):
        model = DictionaryLearning(cfg.n_components, cfg.lam, cfg.eta)
        algo = cls(model, clients_per_round=cfg.active_clients, compressor=StochasticRounding(bits=cfg.bits),
                   alpha=cfg.alpha, step=("sqrt", cfg.beta), batch_size=cfg.batch_size,
                   n_threads=cfg.n_threads)
        histories[cls.__name__] = algo.run(datas, cfg.n_rounds, seed=cfg.seed,
                                           objective_every=cfg.objective_every,
                                           monitor_every=cfg.objective_every, progress=progress)
    return histories


def summary_table(histories: dict[str, History]) -> str:
    """A plain-text table of final objective, update norms, traffic and speed."""
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
    return "\n".join(lines)


def _last_finite(h: History, name: str) -> float:
    if name not in h.keys():
        return float("nan")
    col = h.column(name)
    col = col[np.isfinite(col)]
    return float(col[-1]) if col.size else float("nan")


def plot_histories(histories: dict[str, History], path: str | os.PathLike) -> None:
    """Objective and the §6 update norms (log scale) of each history, saved as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    panels = (
        ("objective", ("objective",), "objective (28)"),
        ("surrogate space", ("E_s", "E_sp"), r"$\mathcal{E}^s$ (FedMM), $\mathcal{E}^{s,p}$ (baseline)"),
        ("parameter space", ("E_ps", "E_p"), r"$\mathcal{E}^{p,s}$ (FedMM), $\mathcal{E}^p$ (baseline)"),
    )
    for ax, (title, fields, ylabel) in zip(axes, panels):
        for name, h in histories.items():
            for field in fields:
                if field not in h.keys():
                    continue
                y = h.column(field)
                t = h.column("t") + 1
                if field == "objective" and "initial_objective" in h.config:
                    y = np.concatenate([[h.config["initial_objective"]], y])
                    t = np.concatenate([[0.0], t])
                ok = np.isfinite(y)
                ax.plot(t[ok], y[ok], label=f"{name} {field}")
        if title != "objective":
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(args: Any) -> int:
    """Entry point of ``fedmm demo`` (``args`` from :mod:`fedmm.cli`)."""
    if args.clients < 2:
        raise SystemExit("fedmm demo: --clients must be at least 2")
    cfg = DemoConfig(n_rounds=args.rounds, seed=args.seed, n_threads=args.threads, n_samples=args.samples,
                     n_clients=args.clients, active_clients=args.clients // 2,
                     objective_every=max(1, args.rounds // 60))
    os.makedirs(args.out, exist_ok=True)
    print(f"fedmm demo: heterogeneous synthetic dictionary learning (FedMM paper §6), n={cfg.n_clients} "
          f"clients, {cfg.active_clients} active per round, p={cfg.n_features}, K={cfg.n_components}, "
          f"{cfg.bits}-bit quantization, {cfg.n_rounds} rounds")
    start = time.perf_counter()
    histories = run_demo(cfg, progress=False if args.no_progress else None)
    print()
    print(summary_table(histories))
    for name, h in histories.items():
        h.save(os.path.join(args.out, f"{name}.json"))
    plot = os.path.join(args.out, "demo.png")
    plot_histories(histories, plot)
    print(f"\nwrote {', '.join(f'{n}.json' for n in histories)} and demo.png to {os.path.abspath(args.out)} "
          f"({time.perf_counter() - start:.1f} s)")
    return 0


def register(subparsers: Any) -> None:
    """Add the ``demo`` subcommand to the ``fedmm`` parser."""
    p = subparsers.add_parser("demo", help="FedMM vs the Θ-space baseline on synthetic dictionary learning",
                              description="FedMM against the Θ-space baseline on heterogeneous synthetic "
                                          "dictionary learning (FedMM paper §6); writes JSON histories and "
                                          "a PNG plot.")
    p.add_argument("--out", default="fedmm-demo", help="output directory (default: ./fedmm-demo)")
    p.add_argument("--rounds", type=int, default=DemoConfig.n_rounds, help="rounds per algorithm")
    p.add_argument("--seed", type=int, default=0, help="random seed of data and algorithms")
    p.add_argument("--samples", type=int, default=DemoConfig.n_samples, help="synthetic signals in total")
    p.add_argument("--clients", type=int, default=DemoConfig.n_clients,
                   help="clients (half of them active per round)")
    p.add_argument("--threads", type=int, default=1, help="client threads of the in-process runtime")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.set_defaults(func=main)
