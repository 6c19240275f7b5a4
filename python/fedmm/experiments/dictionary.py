# SPDX-License-Identifier: BSD-3-Clause
"""Dictionary-learning experiments of the FedMM paper §6 (Figures 1 and 2).

Figure 1 (impact of the aggregation space): FedMM against the Θ-space
baseline ``ParameterAveraging``, both with 10 of 20 clients active per
round, minibatches of 50 local samples, 8-bit stochastic rounding of every
message and control variates with ``α = 0.01``.  Figure 2 (impact of the
control variates): FedMM with ``α = 0`` against ``α = 0.01``, full local
batches, no compression, ``V_{0,i} = 0``.  Problem (28):
``min_θ (1/n) Σ_i E_{π_i}[min_h ½‖Z − θh‖² + λ‖h‖₁] + η‖θ‖²_F`` with
``λ = 0.1``, ``η = 0.2``; step ``γ_t = β/√(β + t)`` with ``β`` tuned per
algorithm and setting on a grid in ``[0.001, 0.05]``.

Data settings: ``homogeneous`` (250 synthetic points copied to every
client), ``heterogeneous`` (5000 synthetic points split by exact equal-size
k-means), ``patches`` (5000 normalized 8×8 patches of scikit-learn's sample
images, split the same way; the stand-in for MovieLens 1M, which cannot be
downloaded here) and ``ratings`` (a MovieLens ``ratings.dat`` the user
supplies, 5000 most active users × 500 most rated movies).  The synthetic
dimension, not given in the paper, is ``p = 20`` by default.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from fedmm._validation import check_int, check_real
from fedmm.data import (
    image_patches,
    load_movielens_ratings,
    split_by_constrained_kmeans,
    split_homogeneous,
    synthetic_dictionary,
)
from fedmm.experiments._common import ExperimentError, format_table, plot_band, read_toml, run_tasks

logger = logging.getLogger(__name__)

__all__ = [
    "FIGURES",
    "SETTINGS",
    "DictionaryConfig",
    "Variant",
    "add_dictionary_parser",
    "build_setting",
    "figure_variants",
    "run_dictionary_figure",
]

FIGURES = ("fig1", "fig2")
SETTINGS = ("homogeneous", "heterogeneous", "patches", "ratings")

#: Per-setting data sizes: number of samples N, dimension p, number of atoms K (paper §6;
#: p of the synthetic settings is our choice; p = 64 for 8×8 patches, where K = 15 keeps the figure cheap).
SETTING_DEFAULTS: dict[str, dict[str, int]] = {
    "homogeneous": {"n_samples": 250, "p": 20, "K": 15},
    "heterogeneous": {"n_samples": 5000, "p": 20, "K": 15},
    "patches": {"n_samples": 5000, "p": 64, "K": 15},
    "ratings": {"n_samples": 5000, "p": 500, "K": 50},
}

#: Column titles and, per algorithm, the History field plotted in them (paper's notation).
_PANELS = {
    "fig1": (
        ("objective (28)", {"FedMM": "objective", "ParameterAveraging": "objective"}),
        (r"$\mathcal{E}^{p,s}$ (FedMM), $\mathcal{E}^{p}$ (naive)", {"FedMM": "E_ps", "ParameterAveraging": "E_p"}),
        (r"$\mathcal{E}^{s}$ (FedMM), $\mathcal{E}^{s,p}$ (naive)", {"FedMM": "E_s", "ParameterAveraging": "E_sp"}),
    ),
    "fig2": (
        ("objective (28)", {"FedMM": "objective"}),
        (r"parameter update $\mathcal{E}^{p,s}$", {"FedMM": "E_ps"}),
        (r"surrogate update $\mathcal{E}^{s}$", {"FedMM": "E_s"}),
    ),
}


@dataclasses.dataclass(frozen=True)
class Variant:
    """One curve of a figure: an algorithm with its hyper-parameters (all but the step)."""

    name: str
    algorithm: str  # "FedMM" or "ParameterAveraging"
    alpha: float
    batch_size: int | None  # None: full local batch, S_{t+1,i} = E_{π_i}[S̄(Z, θ_t)]
    bits: int | None  # None: no compression


@dataclasses.dataclass
class DictionaryConfig:
    """Settings of a Figure 1 / Figure 2 run (defaults: the paper's, §6).

    Attributes
    ----------
    figure : {'fig1', 'fig2'}
    settings : tuple of str
        Rows of the figure, from :data:`SETTINGS`.
    seeds : int
        Independent runs per curve (seeds ``0 .. seeds-1``).
    rounds : int
        Communication rounds ``T_max``.
    n_clients, active_clients : int
        ``n = 20`` clients, 10 active per round (``p = 0.5``).
    lam, eta : float
        ``λ = 0.1``, ``η = 0.2`` of eq. (28).
    batch_size : int
        Local minibatch of Figure 1 (Figure 2 uses full local batches).
    bits : int
        Bits per coordinate of Figure 1's stochastic rounding (Figure 2: none).
    alpha : float
        Control-variate step (Figure 1; Figure 2 compares 0 with this value).
    beta : float, dict or None
        Step ``γ_t = β/√(β + t)``: one value for every curve, a dict
        ``{variant name: β}``, or None to tune ``β`` on ``beta_grid``.
    beta_grid : tuple of float
        Candidates for the tuning, in ``[0.001, 0.05]`` as in the paper.
    tune_rounds, tune_seeds : int
        Length and number of the tuning runs (seeds ``10000 + k``, disjoint
        from the reported runs); a candidate's score is the mean objective
        over the last quarter of its recorded values.
    objective_every : int
        Evaluate the objective (and the baseline's ``E^{s,p}``) every this many rounds.
    data_seed : int
        Seed of the data set (one data set for all runs).
    p, K, n_samples : int or None
        Override the per-setting sizes of :data:`SETTING_DEFAULTS`.
    ratings_path : str or None
        The MovieLens ``ratings.dat`` of the ``ratings`` setting.
    jobs : int
        Worker processes (runs of different seeds in parallel).
    """

    figure: str = "fig1"
    settings: tuple[str, ...] = ("homogeneous", "heterogeneous", "patches")
    seeds: int = 10
    rounds: int = 300
    n_clients: int = 20
    active_clients: int = 10
    lam: float = 0.1
    eta: float = 0.2
    batch_size: int = 50
    bits: int = 8
    alpha: float = 0.01
    beta: Any = None
    beta_grid: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)
    tune_rounds: int = 50
    tune_seeds: int = 1
    objective_every: int = 1
    data_seed: int = 0
    p: int | None = None
    K: int | None = None
    n_samples: int | None = None
    ratings_path: str | None = None
    jobs: int = 1

    def validated(self) -> "DictionaryConfig":
        """A checked copy (bad values raise :class:`ExperimentError` naming the option)."""
        try:
            return self._validated()
        except (TypeError, ValueError) as exc:
            raise ExperimentError(str(exc)) from None

    def _validated(self) -> "DictionaryConfig":
        c = dataclasses.replace(self)
        if c.figure not in FIGURES:
            raise ValueError(f"Expected 'figure' in {FIGURES}, got {c.figure!r}")
        settings = (c.settings,) if isinstance(c.settings, str) else tuple(c.settings)
        if not settings:
            raise ValueError("Expected at least one setting")
        for s in settings:
            if s not in SETTINGS:
                raise ValueError(f"Expected settings among {SETTINGS}, got {s!r}")
        c.settings = tuple(dict.fromkeys(settings))
        c.seeds = check_int(c.seeds, "seeds", low=1)
        c.rounds = check_int(c.rounds, "rounds", low=1)
        c.n_clients = check_int(c.n_clients, "n_clients", low=1)
        c.active_clients = check_int(c.active_clients, "active_clients", low=1, high=c.n_clients)
        c.lam = check_real(c.lam, "lam", low=0.0)
        c.eta = check_real(c.eta, "eta", low=0.0)
        c.batch_size = check_int(c.batch_size, "batch_size", low=1)
        c.bits = check_int(c.bits, "bits", low=2, high=32)
        c.alpha = check_real(c.alpha, "alpha", low=0.0)
        c.beta_grid = tuple(check_real(b, "beta_grid entry", low=0.0, low_open=True) for b in c.beta_grid)
        if not c.beta_grid:
            raise ValueError("Expected a non-empty 'beta_grid'")
        names = [v.name for v in figure_variants(c)]
        if isinstance(c.beta, dict):
            unknown = set(c.beta) - set(names)
            if unknown:
                raise ValueError(f"Expected 'beta' keys among {names}, got {sorted(unknown)}")
            c.beta = {k: check_real(v, f"beta[{k!r}]", low=0.0, low_open=True) for k, v in c.beta.items()}
        elif c.beta is not None:
            c.beta = check_real(c.beta, "beta", low=0.0, low_open=True)
        c.tune_rounds = check_int(c.tune_rounds, "tune_rounds", low=1)
        c.tune_seeds = check_int(c.tune_seeds, "tune_seeds", low=1)
        c.objective_every = check_int(c.objective_every, "objective_every", low=1)
        c.data_seed = check_int(c.data_seed, "data_seed", low=0)
        for name in ("p", "K", "n_samples"):
            if getattr(c, name) is not None:
                setattr(c, name, check_int(getattr(c, name), name, low=1))
        c.jobs = check_int(c.jobs, "jobs", low=1)
        if "ratings" in c.settings:
            if c.ratings_path is None:
                raise ValueError(
                    "The 'ratings' setting needs a MovieLens ratings.dat file (--ratings FILE or "
                    "'ratings_path' in the config); MovieLens 1M cannot be downloaded here — "
                    "use the 'patches' setting for a bundled real-data stand-in"
                )
            if not Path(c.ratings_path).is_file():
                raise ValueError(f"Expected 'ratings_path' to be an existing file, got {c.ratings_path!r}")
        return c

    def beta_for(self, variant: str) -> float | None:
        """The fixed ``β`` of a variant, or None when it is to be tuned."""
        if isinstance(self.beta, dict):
            return self.beta.get(variant)
        return self.beta

    @classmethod
    def from_mapping(cls, values: dict[str, Any], *, source: str = "config") -> "DictionaryConfig":
        """Build from a dict (e.g. a TOML file), rejecting unknown keys by name."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise ExperimentError(f"{source}: unknown key(s) {unknown}; valid keys are {sorted(fields)}")
        kwargs = dict(values)
        for key in ("settings", "beta_grid"):
            if key in kwargs and isinstance(kwargs[key], list):
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)


def figure_variants(config: DictionaryConfig) -> list[Variant]:
    """The curves of Figure 1 or Figure 2 with the configured hyper-parameters."""
    if config.figure == "fig1":
        return [
            Variant("FedMM", "FedMM", config.alpha, config.batch_size, config.bits),
            Variant("ParameterAveraging", "ParameterAveraging", config.alpha, config.batch_size, config.bits),
        ]
    return [
        Variant("alpha=0", "FedMM", 0.0, None, None),
        Variant(f"alpha={config.alpha:g}", "FedMM", config.alpha, None, None),
    ]


# --------------------------------------------------------------------------- data settings
def build_setting(setting: str, config: DictionaryConfig) -> dict[str, Any]:
    """Client data of one setting.

    Returns
    -------
    dict
        ``datas`` (list of ``(N_i, p)`` arrays), ``objective_data`` (one
        array on which the objective (28) equals the clients' average, or
        None), ``p``, ``K``, ``n_samples`` and a ``description``.
    """
    sizes = dict(SETTING_DEFAULTS[setting])
    for key in ("n_samples", "K"):
        if getattr(config, key) is not None:
            sizes[key] = getattr(config, key)
    if config.p is not None and setting != "patches":
        sizes["p"] = config.p
    n_samples, p, n = sizes["n_samples"], sizes["p"], config.n_clients
    objective_data = None
    if setting in ("homogeneous", "heterogeneous"):
        Z, _, _ = synthetic_dictionary(n_samples, p, sizes["K"], seed=config.data_seed)
        if setting == "homogeneous":
            datas = split_homogeneous(Z, n)
            objective_data = Z  # every client holds Z: the average of the f_i is f on Z
            description = f"synthetic, {n_samples} points copied to each of {n} clients"
        else:
            datas = split_by_constrained_kmeans(Z, n, seed=config.data_seed)
            description = f"synthetic, {n_samples} points in {n} equal k-means clusters"
    elif setting == "patches":
        X = image_patches(n_samples, patch_size=8, seed=config.data_seed)
        datas = split_by_constrained_kmeans(X, n, seed=config.data_seed)
        description = f"{n_samples} 8x8 image patches in {n} equal k-means clusters"
    else:
        X = load_movielens_ratings(config.ratings_path, n_users=n_samples, n_movies=p)
        datas = split_by_constrained_kmeans(X, n, seed=config.data_seed)
        description = f"MovieLens {n_samples} users x {p} movies in {n} equal k-means clusters"
    if n_samples < n:
        raise ExperimentError(f"setting {setting!r}: n_samples={n_samples} is smaller than n_clients={n}")
    return {"datas": datas, "objective_data": objective_data, "description": description, **sizes}


# --------------------------------------------------------------------------- one run
@dataclasses.dataclass(frozen=True)
class _Task:
    setting: str
    variant: Variant
    beta: float
    seed: int
    rounds: int
    objective_every: int
    K: int
    lam: float
    eta: float
    active_clients: int
    datas: tuple
    objective_data: Any


def _run_task(task: _Task, tick: Callable[[int], None]) -> dict:
    """One run of one variant (executed in a worker process when ``jobs > 1``)."""
    from fedmm.algorithms import FedMM, ParameterAveraging
    from fedmm.compression import Identity, StochasticRounding
    from fedmm.models import DictionaryLearning

    variant = task.variant
    model = DictionaryLearning(task.K, task.lam, eta=task.eta)
    compressor = Identity() if variant.bits is None else StochasticRounding(bits=variant.bits)
    algorithm = {"FedMM": FedMM, "ParameterAveraging": ParameterAveraging}[variant.algorithm](
        model,
        clients_per_round=task.active_clients,
        compressor=compressor,
        alpha=variant.alpha,
        step=("sqrt", task.beta),
        batch_size=variant.batch_size,
    )
    done = [0]

    def count_round(t: int, S: Any, theta: Any) -> None:
        done[0] += 1
        tick(1)

    try:
        history = algorithm.run(
            list(task.datas), task.rounds, seed=task.seed,
            objective_every=task.objective_every, objective_data=task.objective_data,
            monitor_every=task.objective_every, callback=count_round, progress=False,  # run_tasks' bar
        )
    except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
        # A diverging run (e.g. non-finite iterates caught by a kernel's input check) is a result,
        # not a crash of the whole figure: keep the failure and where it happened.
        tick(task.rounds - done[0])
        return {"algorithm": variant.algorithm, "records": [],
                "config": {"seed": task.seed, "setting": task.setting, "variant": variant.name,
                           "beta": task.beta, "failed_round": done[0],
                           "failure": f"{type(exc).__name__}: {exc}"}}
    history.config.update(setting=task.setting, variant=variant.name, beta=task.beta)
    return history.to_dict()


def _tail_objective(history: dict) -> float:
    """Mean objective over the last quarter of the recorded values (inf if any is not finite)."""
    values = [r["objective"] for r in history["records"] if r.get("objective") is not None]
    values = [v if isinstance(v, (int, float)) else math.inf for v in values]  # JSON-coded inf/nan
    if not values or not all(math.isfinite(v) for v in values):
        return math.inf
    tail = values[-max(1, len(values) // 4):]
    return float(np.mean(tail))


def _column(history: dict, name: str, length: int | None = None) -> np.ndarray:
    """One field of a JSON-coded history over rounds, NaN where absent (padded to ``length``)."""
    records = history["records"]
    out = np.full(max(len(records), length or 0), np.nan)
    for i, record in enumerate(records):
        value = record.get(name)
        if isinstance(value, (int, float)):
            out[i] = value
        elif isinstance(value, dict) and "__float__" in value:  # History's JSON code for inf/nan
            out[i] = float(value["__float__"])
    return out


# --------------------------------------------------------------------------- the command
def run_dictionary_figure(config: DictionaryConfig, out_dir: str | os.PathLike, *,
                          progress: bool | None = None, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Tune ``β``, run every curve over the seeds, write JSON, PNG and the summary table.

    Writes, in ``out_dir``: ``<figure>_<setting>.json`` (config, data
    description, tuning scores, chosen ``β``, every run's
    :class:`fedmm.History`), ``<figure>.png`` (one row per setting, mean ± 1
    std bands over seeds) and ``<figure>_summary.txt``.

    Returns
    -------
    dict
        ``{"summary": str, "files": [paths], "results": {setting: {...}}}``.

    ``progress``: bars on standard error, None (default) only when it is a
    terminal.  ``log`` receives the progress messages (default: this
    module's :mod:`logging` logger at INFO level; the command line passes ``print``).
    """
    if log is None:
        log = logger.info
    config = config.validated()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    variants = figure_variants(config)
    started = time.perf_counter()
    data = {}
    for setting in config.settings:
        data[setting] = build_setting(setting, config)
        log(f"[{config.figure}] {setting}: {data[setting]['description']}, "
            f"p={data[setting]['p']}, K={data[setting]['K']}")

    def make_task(setting: str, variant: Variant, beta: float, seed: int, rounds: int, every: int) -> _Task:
        d = data[setting]
        return _Task(setting, variant, beta, seed, rounds, every, d["K"], config.lam, config.eta,
                     config.active_clients, tuple(d["datas"]), d["objective_data"])

    # 1. β tuning on separate seeds (only for the curves without a fixed β).
    tune_every = max(1, config.tune_rounds // 10)
    tune_keys, tune_tasks = [], []
    for setting in config.settings:
        for variant in variants:
            if config.beta_for(variant.name) is None:
                for beta in config.beta_grid:
                    for k in range(config.tune_seeds):
                        tune_keys.append((setting, variant.name, beta))
                        tune_tasks.append(make_task(setting, variant, beta, 10_000 + k, config.tune_rounds,
                                                    tune_every))
    scores: dict[tuple[str, str], dict[float, list[float]]] = {}
    if tune_tasks:
        tuned = run_tasks(_run_task, tune_tasks, jobs=config.jobs, total=len(tune_tasks) * config.tune_rounds,
                          desc=f"{config.figure}: tuning beta", progress=progress)
        for (setting, name, beta), history in zip(tune_keys, tuned):
            scores.setdefault((setting, name), {}).setdefault(beta, []).append(_tail_objective(history))
    chosen: dict[tuple[str, str], float] = {}
    for setting in config.settings:
        for variant in variants:
            fixed = config.beta_for(variant.name)
            if fixed is not None:
                chosen[(setting, variant.name)] = fixed
            else:
                table = {b: float(np.mean(v)) for b, v in scores[(setting, variant.name)].items()}
                chosen[(setting, variant.name)] = min(table, key=lambda b: (table[b], b))

    # 2. The reported runs: seeds 0 .. seeds-1 for every curve.
    keys, tasks = [], []
    for setting in config.settings:
        for variant in variants:
            for seed in range(config.seeds):
                keys.append((setting, variant.name))
                tasks.append(make_task(setting, variant, chosen[(setting, variant.name)], seed, config.rounds,
                                       config.objective_every))
    histories = run_tasks(_run_task, tasks, jobs=config.jobs, total=len(tasks) * config.rounds,
                          desc=f"{config.figure}: rounds x seeds", progress=progress)
    runs: dict[tuple[str, str], list[dict]] = {}
    for key, history in zip(keys, histories):
        runs.setdefault(key, []).append(history)

    # 3. Outputs.
    files, results, rows = [], {}, []
    for setting in config.settings:
        result = {
            "figure": config.figure,
            "setting": setting,
            "description": data[setting]["description"],
            "sizes": {k: data[setting][k] for k in ("n_samples", "p", "K")},
            "config": _jsonable_config(config),
            "algorithm": {v.name: v.algorithm for v in variants},
            "beta": {v.name: chosen[(setting, v.name)] for v in variants},
            "tuning": {
                v.name: {repr(b): float(np.mean(s)) for b, s in scores.get((setting, v.name), {}).items()}
                for v in variants
            },
            "runs": {v.name: runs[(setting, v.name)] for v in variants},
        }
        results[setting] = result
        path = out / f"{config.figure}_{setting}.json"
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(result, handle)
        files.append(path)
        rows.extend(_summary_rows(config.figure, setting, result))
    png = out / f"{config.figure}.png"
    plot_figure(config.figure, results, png)
    files.append(png)
    headers = ["setting", "curve", "beta", "runs ok", "objective t=0", "objective t=T",
               "E^s | E^s,p (tail)", "E^p,s | E^p (tail)", "s/run"]
    summary = format_table(headers, rows)
    summary += (f"\n(mean ± std over {config.seeds} seeds; 'tail' = mean over the last 10% of "
                f"{config.rounds} rounds; total {time.perf_counter() - started:.0f} s)")
    summary_path = out / f"{config.figure}_summary.txt"
    summary_path.write_text(summary + "\n", encoding="utf-8")
    files.append(summary_path)
    return {"summary": summary, "files": [str(f) for f in files], "results": results}


def _jsonable_config(config: DictionaryConfig) -> dict[str, Any]:
    out = dataclasses.asdict(config)
    out["settings"] = list(config.settings)
    out["beta_grid"] = list(config.beta_grid)
    return out


def _mean_std(values: Sequence[float]) -> str:
    arr = np.asarray(values, dtype=np.float64)
    if not np.isfinite(arr).all():
        return f"non-finite in {int((~np.isfinite(arr)).sum())}/{arr.size}"
    return f"{arr.mean():.4g} ± {arr.std():.2g}"


def _summary_rows(figure: str, setting: str, result: dict) -> list[list[str]]:
    rows = []
    panels = _PANELS[figure]
    rounds = result["config"]["rounds"]
    tail = slice(rounds - max(1, rounds // 10), rounds)
    for name, histories in result["runs"].items():
        algorithm = result["algorithm"][name]
        ok = [h for h in histories if "failure" not in h["config"]]
        failed = [h["config"]["failed_round"] for h in histories if "failure" in h["config"]]
        status = f"{len(ok)}/{len(histories)}" + (f" (failed at rounds {failed})" if failed else "")
        if not ok:
            rows.append([setting, name, f"{result['beta'][name]:g}", status] + ["-"] * 5)
            continue

        def tail_mean(field: str) -> list[float]:
            means = []
            for h in ok:
                values = _column(h, field, rounds)[tail]
                values = values[~np.isnan(values)]
                means.append(float(values.mean()) if values.size else np.nan)
            return means

        def final(field: str) -> list[float]:
            columns = [_column(h, field, rounds) for h in ok]
            return [c[~np.isnan(c)][-1] if (~np.isnan(c)).any() else np.nan for c in columns]

        initial = [h["config"].get("initial_objective", np.nan) for h in ok]
        seconds = [h["records"][-1].get("wall_time", np.nan) for h in ok]
        rows.append([setting, name, f"{result['beta'][name]:g}", status, _mean_std(initial),
                     _mean_std(final("objective")), _mean_std(tail_mean(panels[2][1][algorithm])),
                     _mean_std(tail_mean(panels[1][1][algorithm])), f"{np.mean(seconds):.2f}"])
    return rows


def plot_figure(figure: str, results: dict[str, dict], path: str | os.PathLike) -> None:
    """The paper's figure layout: one row per setting; objective, E^p-type and E^s-type columns."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    panels = _PANELS[figure]
    settings = list(results)
    fig, axes = plt.subplots(len(settings), 3, figsize=(13.5, 3.3 * len(settings)), squeeze=False)
    for row, setting in enumerate(settings):
        result = results[setting]
        for col, (title, fields) in enumerate(panels):
            ax = axes[row, col]
            for name, histories in result["runs"].items():
                label = f"{name} (β={result['beta'][name]:g})"
                field = fields[result["algorithm"][name]]
                curves = [_column(h, field, result["config"]["rounds"]) for h in histories]
                plot_band(ax, curves, label=label, log=col > 0)
            ax.set_title(title if row == 0 else "", fontsize=10)
            ax.set_xlabel("communication round t")
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel(setting)
                ax.legend(fontsize=8)
    fig.suptitle({"fig1": "Impact of the aggregation space (FedMM paper, Figure 1)",
                  "fig2": "Impact of the control variates (FedMM paper, Figure 2)"}[figure])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- command line
_OPTION_KEYS = ("settings", "seeds", "rounds", "jobs", "beta", "beta_grid", "tune_rounds", "tune_seeds",
                "objective_every", "data_seed", "p", "K", "n_samples", "ratings_path", "n_clients",
                "active_clients", "batch_size", "alpha")


def add_dictionary_parser(subparsers: Any) -> None:
    """Register ``fedmm experiment fig1`` and ``fedmm experiment fig2``."""
    helps = {
        "fig1": "FedMM paper Figure 1: FedMM vs parameter averaging (objective, E^p/E^{p,s}, E^s/E^{s,p})",
        "fig2": "FedMM paper Figure 2: control variates alpha=0 vs alpha=0.01, full local batches",
    }
    for figure in FIGURES:
        parser = subparsers.add_parser(figure, help=helps[figure], description=helps[figure] + ". "
                                       "Options given here override the --config file, which overrides "
                                       "the paper's defaults.")
        parser.add_argument("--setting", dest="settings", nargs="+", choices=SETTINGS, default=None,
                            metavar="SETTING",
                            help=f"data settings, rows of the figure, among {', '.join(SETTINGS)} "
                            "(default: homogeneous heterogeneous patches)")
        parser.add_argument("--seeds", metavar="N", type=int, default=None,
                            help="independent runs per curve (default 10)")
        parser.add_argument("--rounds", metavar="R", type=int, default=None,
                            help="communication rounds (default 300)")
        parser.add_argument("--out", metavar="DIR", default=None,
                            help="output directory for JSON, PNG and summary (required)")
        parser.add_argument("--jobs", metavar="J", type=int, default=None,
                            help="worker processes for seeds in parallel")
        parser.add_argument("--config", metavar="FILE.toml", default=None,
                            help="TOML file with any of the options (see examples/)")
        parser.add_argument("--beta", metavar="BETA", type=float, default=None,
                            help="fixed step parameter beta of gamma_t = beta/sqrt(beta+t) (default: tuned)")
        parser.add_argument("--beta-grid", metavar="B1,B2,...", type=_float_list, default=None,
                            help="comma-separated tuning grid (default 0.001,0.002,0.005,0.01,0.02,0.05)")
        parser.add_argument("--tune-rounds", metavar="R", type=int, default=None,
                            help="rounds of each tuning run (default 50)")
        parser.add_argument("--tune-seeds", metavar="N", type=int, default=None,
                            help="seeds per tuning candidate (default 1)")
        parser.add_argument("--objective-every", metavar="K", type=int, default=None,
                            help="evaluate the objective every k rounds (default 1)")
        parser.add_argument("--data-seed", metavar="SEED", type=int, default=None,
                            help="seed of the data set (default 0)")
        parser.add_argument("--p", metavar="P", type=int, default=None, help="synthetic dimension (default 20)")
        parser.add_argument("--K", metavar="K", type=int, default=None,
                            help="number of atoms (default 15; 50 for MovieLens ratings)")
        parser.add_argument("--n-samples", metavar="N", type=int, default=None,
                            help="total number of samples")
        parser.add_argument("--ratings", metavar="FILE", dest="ratings_path", default=None,
                            help="MovieLens ratings.dat for the 'ratings' setting")
        parser.add_argument("--n-clients", metavar="N", type=int, default=None, help="number of clients (default 20)")
        parser.add_argument("--active-clients", metavar="M", type=int, default=None,
                            help="active clients per round (default 10)")
        parser.add_argument("--batch-size", metavar="B", type=int, default=None,
                            help="local minibatch of Figure 1 (default 50)")
        parser.add_argument("--alpha", metavar="ALPHA", type=float, default=None,
                            help="control-variate step (default 0.01)")
        parser.add_argument("--no-progress", action="store_true", help="no progress bars")
        parser.set_defaults(func=_command, figure=figure)


def _float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        import argparse

        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def config_from_args(args: Any) -> tuple[DictionaryConfig, str]:
    """Merge defaults < ``--config`` TOML < command-line options; returns (config, out_dir)."""
    values: dict[str, Any] = {}
    out_dir = None
    if args.config is not None:
        values = dict(read_toml(args.config))
        out_dir = values.pop("out", None)
        if values.get("figure", args.figure) != args.figure:
            raise ExperimentError(f"{args.config}: figure = {values['figure']!r} but the command is {args.figure!r}")
        values.pop("figure", None)
        values = {("settings" if k == "setting" else k): v for k, v in values.items()}
    for key in _OPTION_KEYS:
        value = getattr(args, key, None)
        if value is not None:
            values[key] = value
    if args.out is not None:
        out_dir = args.out
    if out_dir is None:
        raise ExperimentError("an output directory is required: --out DIR (or 'out' in the config file)")
    config = DictionaryConfig.from_mapping({"figure": args.figure, **values},
                                           source=args.config or "options")
    return config.validated(), str(out_dir)


def _command(args: Any) -> int:
    import sys

    try:
        config, out_dir = config_from_args(args)
    except ExperimentError as exc:
        print(f"fedmm experiment {args.figure}: error: {exc}", file=sys.stderr)
        return 2
    result = run_dictionary_figure(config, out_dir, progress=False if args.no_progress else None, log=print)
    print(result["summary"])
    print("wrote " + ", ".join(result["files"]))
    return 0
