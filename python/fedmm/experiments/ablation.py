# SPDX-License-Identifier: BSD-3-Clause
"""Why the Θ-space baseline of FedMM paper §6 rises: an ablation of Figure 1 (heterogeneous setting).

``fedmm experiment ablation`` runs FedMM and ``ParameterAveraging`` (the
"naive" baseline, :class:`fedmm.algorithms.ParameterAveraging`) on Figure 1's
heterogeneous synthetic setting (5000 points, ``p = 20``, ``K = 15``, 20
equal k-means clients; problem (28) with ``λ = 0.1``, ``η = 0.2``) and takes
the baseline apart, one factor at a time.  The variants of Figure 1 are those
of :func:`fedmm.experiments.dictionary.figure_variants` (10 of 20 clients per
round, minibatches of 50, 8-bit stochastic rounding, ``α = 0.01``) with the
step ``γ_t = β/√(β + t)``, ``β = 0.05``.  Panels and table rows:

(a) objective and median atom norm ``med_k ‖θ_k‖₂`` along runs of FedMM
    and the baseline;
(b) the baseline with full participation and no compression, with full
    local batches (``S_{t+1,i} = s̄_i(θ_t) = E_{π_i}[S̄(Z, θ_t)]``), and with both:
    which factor makes the objective rise;
(c) at the baseline's iterates ``θ_t``: the three maps
    ``T(Σ_i μ_i s̄_i(θ))`` (what FedMM averages towards),
    ``Σ_i μ_i T(s̄_i(θ))`` (the deterministic baseline, eq. (21)) and
    ``E[Σ_i μ_i T(s_i^b(θ))]`` over minibatch statistics ``s_i^b`` of ``b``
    local samples (what the minibatch baseline averages towards; ``T`` is
    nonlinear, so a minibatch ``T`` is biased): their atom norms and objectives;
(d) the rise ``(f_T − min_t f_t)/min_t f_t`` of the baseline over a sweep of
    the dimension ``p`` and of the ridge weight ``η``;
(e) deterministic limits: full batches, full participation, no compression,
    ``α = 0`` and a constant step ``γ`` (default 0.1): the baseline against
    FedMM with the same step and exact MM (FedMM with ``γ = 1``, i.e.
    ``θ_{t+1} = T(Σ_i μ_i s̄_i(θ_t))``).

Outputs in ``--out``: ``ablation.json`` (a :class:`fedmm.RunSet`: one
:class:`fedmm.History` per curve and seed, named ``"<panel>/<curve>/seed=<s>"``,
with the field ``median_atom_norm`` at the objective's cadence; the maps of
panel (c) and the configuration are its metadata; read it with
:func:`fedmm.load`), ``ablation.png`` (the five panels) and
``ablation_summary.txt`` / ``.json``.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from fedmm._validation import check_int, check_real
from fedmm.experiments._common import (
    ExperimentError,
    add_common_options,
    add_deprecated_alias,
    make_log,
    nonneg_float,
    nonneg_float_list,
    nonneg_int,
    plot_band,
    positive_float,
    positive_int,
    positive_int_list,
    resolve_progress,
    run_tasks,
    tidy_log_axis,
    write_summary,
)
from fedmm.experiments.dictionary import DictionaryConfig, Variant, build_setting, figure_variants
from fedmm.history import History, RunSet

logger = logging.getLogger(__name__)

__all__ = [
    "MAP_NAMES",
    "AblationConfig",
    "median_atom_norm",
    "map_comparison",
    "objective_rise",
    "run_ablation",
    "plot_ablation",
    "add_ablation_parser",
]

#: Names of the three maps of panel (c), in the order of :func:`map_comparison`'s outputs.
MAP_NAMES = ("T(mean full S)", "mean T(full S_i)", "mean T(minibatch S_i)")


@dataclasses.dataclass
class AblationConfig:
    """Settings of ``fedmm experiment ablation`` (defaults: Figure 1, heterogeneous setting).

    Attributes
    ----------
    seeds, first_seed : int
        Runs per curve, seeds ``first_seed .. first_seed + seeds - 1``.
    rounds : int
        Rounds of the runs of panels (a), (b) and (d).
    beta : float > 0
        Step ``γ_t = β/√(β + t)`` of panels (a), (b) and (d).
    evaluate_every : int or None
        Objective and atom-norm cadence (None: ``max(1, rounds // 100)``).
    p, K, n_samples, data_seed : int
        Synthetic data (:func:`fedmm.data.synthetic_dictionary`), split into
        ``n_clients`` equal k-means clusters.
    n_clients, active_clients, batch_size, bits : int
        Figure 1's participation, minibatch and stochastic rounding.
    control_variate_step, lam, ridge : float
        Control-variate step ``α``, ``λ`` and ``η`` of problem (28).
    p_sweep, ridge_sweep : tuple
        Dimensions and ridge weights of panel (d).
    map_points : int
        Iterates of the baseline (evenly spaced rounds, ``θ_0`` and ``θ_T``
        included) at which panel (c) evaluates the three maps.
    minibatch_draws : int
        Minibatch draws averaged for ``E[Σ_i μ_i T(s_i^b)]`` in panel (c).
    fixed_point_rounds : int
        Rounds of the deterministic runs of panel (e).
    fixed_point_step : float in (0, 1]
        Constant step of the baseline and of FedMM in panel (e).
    jobs : int
        Worker processes.
    """

    seeds: int = 1
    first_seed: int = 0
    rounds: int = 3000
    beta: float = 0.05
    evaluate_every: int | None = None
    p: int = 20
    K: int = 15
    n_samples: int = 5000
    data_seed: int = 0
    n_clients: int = 20
    active_clients: int = 10
    batch_size: int = 50
    bits: int = 8
    control_variate_step: float = 0.01
    lam: float = 0.1
    ridge: float = 0.2
    p_sweep: tuple[int, ...] = (10, 20, 50, 100)
    ridge_sweep: tuple[float, ...] = (0.2, 0.02)
    map_points: int = 13
    minibatch_draws: int = 20
    fixed_point_rounds: int = 1500
    fixed_point_step: float = 0.1
    jobs: int = 1

    def validated(self) -> "AblationConfig":
        """A checked copy; a bad value raises :class:`ExperimentError` naming the option."""
        c = dataclasses.replace(self)

        def checked(name: str, check: Callable[[], Any]) -> Any:
            try:
                return check()
            except (TypeError, ValueError) as exc:
                raise ExperimentError(str(exc), option="--" + name.replace("_", "-")) from None

        for name in ("seeds", "rounds", "p", "K", "n_samples", "n_clients", "batch_size", "map_points",
                     "minibatch_draws", "fixed_point_rounds", "jobs"):
            setattr(c, name, checked(name, lambda n=name: check_int(getattr(c, n), n, low=1)))
        for name in ("first_seed", "data_seed"):
            setattr(c, name, checked(name, lambda n=name: check_int(getattr(c, n), n, low=0)))
        if c.evaluate_every is not None:
            c.evaluate_every = checked("evaluate_every", lambda: check_int(c.evaluate_every, "evaluate_every",
                                                                             low=1))
        c.active_clients = checked("active_clients", lambda: check_int(
            c.active_clients, "active_clients (at most --clients)", low=1, high=c.n_clients))
        c.bits = checked("bits", lambda: check_int(c.bits, "bits", low=2, high=32))
        c.beta = checked("beta", lambda: check_real(c.beta, "beta", low=0.0, low_open=True))
        c.fixed_point_step = checked("fixed_point_step", lambda: check_real(
            c.fixed_point_step, "fixed_point_step", low=0.0, high=1.0, low_open=True))
        c.control_variate_step = checked("control_variate_step", lambda: check_real(
            c.control_variate_step, "control_variate_step", low=0.0))
        c.lam = checked("lam", lambda: check_real(c.lam, "lam", low=0.0, low_open=True))
        c.ridge = checked("ridge", lambda: check_real(c.ridge, "ridge", low=0.0))
        c.p_sweep = tuple(checked("p_sweep", lambda v=v: check_int(v, "p_sweep entry", low=1)) for v in c.p_sweep)
        c.ridge_sweep = tuple(checked("ridge_sweep", lambda v=v: check_real(v, "ridge_sweep entry", low=0.0))
                              for v in c.ridge_sweep)
        if c.n_samples < c.n_clients:
            raise ExperimentError(f"expected at least --clients = {c.n_clients} samples, got {c.n_samples}",
                                  option="--samples")
        if c.batch_size > c.n_samples // c.n_clients:
            raise ExperimentError(f"expected a minibatch of at most {c.n_samples // c.n_clients} samples "
                                  f"(the size of a client), got {c.batch_size}", option="--batch-size")
        return c

    @property
    def every(self) -> int:
        """The objective's cadence in the runs of panels (a), (b) and (d)."""
        return self.evaluate_every if self.evaluate_every is not None else max(1, self.rounds // 100)


# --------------------------------------------------------------------------- measures
def median_atom_norm(theta: Any) -> float:
    """Median Euclidean norm of the atoms (columns) of a dictionary.

    ``med_k ‖θ_{:,k}‖₂`` for ``θ`` of shape ``(p, K)``.

    Parameters
    ----------
    theta : array_like of shape (p, K)

    Returns
    -------
    float

    Examples
    --------
    >>> median_atom_norm([[3.0, 0.0, 1.0], [4.0, 2.0, 0.0]])
    2.0
    """
    theta = np.asarray(theta, dtype=np.float64)
    if theta.ndim != 2 or theta.size == 0:
        raise ValueError(f"Expected 'theta' of shape (p, K) with p, K >= 1, got shape {theta.shape}")
    return float(np.median(np.sqrt(np.einsum("pk,pk->k", theta, theta))))


def objective_rise(objectives: Sequence[float]) -> dict[str, float]:
    """Minimum, its position, final value and relative rise ``(f_last − min f)/min f`` of a curve.

    Parameters
    ----------
    objectives : sequence of float
        Objective values in round order (NaN entries, rounds without an
        evaluation, are skipped).

    Returns
    -------
    dict
        ``min``, ``argmin`` (index into ``objectives``), ``final`` and ``rise``.

    Examples
    --------
    >>> objective_rise([5.0, float("nan"), 4.0, 4.4])
    {'min': 4.0, 'argmin': 2, 'final': 4.4, 'rise': 0.10000000000000009}
    """
    values = np.asarray(objectives, dtype=np.float64)
    finite = np.flatnonzero(np.isfinite(values))
    if finite.size == 0:
        raise ValueError("Expected at least one finite value in 'objectives'")
    k = int(finite[np.argmin(values[finite])])
    low, final = float(values[k]), float(values[finite[-1]])
    return {"min": low, "argmin": k, "final": final, "rise": (final - low) / abs(low)}


def map_comparison(model: Any, datas: Sequence[np.ndarray], theta: Any, *, batch_size: int, draws: int,
                   rng: Any = None) -> dict[str, dict[str, float]]:
    """The three server maps of panel (c) at one dictionary ``θ``.

    With ``s̄_i = E_{π_i}[S̄(Z, θ)]`` (client ``i``'s full local statistic),
    ``s_i^b`` the statistic of ``b`` local samples drawn without replacement
    and ``μ_i = N_i/N``:

    - ``T(Σ_i μ_i s̄_i)``: one deterministic MM step (FedMM's target);
    - ``Σ_i μ_i T(s̄_i)``: the deterministic baseline's target (eq. (21));
    - ``E[Σ_i μ_i T(s_i^b)]``: the minibatch baseline's target, the mean
      over ``draws`` independent minibatch draws (every client, every draw).

    Parameters
    ----------
    model : fedmm.models.DictionaryLearning
    datas : sequence of ndarray of shape (N_i, p)
    theta : array_like of shape (p, K)
    batch_size : int
        ``b``, at most ``min_i N_i``.
    draws : int >= 1
    rng : seed or numpy.random.Generator, optional

    Returns
    -------
    dict
        For each name of :data:`MAP_NAMES`: ``{"median_atom_norm": ..., "objective": ...}``
        (the objective ``Σ_i μ_i f_i + η‖θ‖²_F`` at the map's output).
    """
    rng = np.random.default_rng(rng)
    datas = [model.check_data(d, f"datas[{i}]") for i, d in enumerate(datas)]
    sizes = np.array([d.shape[0] for d in datas], dtype=np.float64)
    batch_size = check_int(batch_size, "batch_size", low=1, high=int(sizes.min()))
    draws = check_int(draws, "draws", low=1)
    weights = sizes / sizes.sum()
    theta = np.asfortranarray(theta, dtype=np.float64)
    full = model.statistic_batch(datas, theta, [None] * len(datas))
    t_of_mean = model.T(weights @ full)
    mean_of_t = sum(w * model.T(row) for w, row in zip(weights, full))
    minibatch = np.zeros_like(t_of_mean)
    for _ in range(draws):
        idxs = [rng.choice(d.shape[0], batch_size, replace=False) for d in datas]
        rows = model.statistic_batch(datas, theta, idxs)
        minibatch += sum(w * model.T(row) for w, row in zip(weights, rows))
    minibatch /= draws
    all_data = np.vstack(datas)
    out = {}
    for name, value in zip(MAP_NAMES, (t_of_mean, mean_of_t, minibatch)):
        # Σ_i μ_i f_i with μ_i = N_i/N is the mean over all samples.
        out[name] = {"median_atom_norm": median_atom_norm(value), "objective": model.objective(all_data, value)}
    return out


# --------------------------------------------------------------------------- one run
@dataclasses.dataclass(frozen=True)
class _Run:
    panel: str
    curve: str
    variant: Variant
    active_clients: int
    step: Any
    ridge: float
    seed: int
    rounds: int
    every: int
    datas: tuple
    K: int
    lam: float
    map_rounds: tuple = ()
    minibatch_draws: int = 0
    map_batch: int = 0


def _run_one(run: _Run, tick: Callable[[int], None]) -> dict:
    """One run (in a worker process when ``jobs > 1``); the JSON dict of its History."""
    from fedmm.algorithms import FedMM, ParameterAveraging
    from fedmm.compression import Identity, StochasticRounding
    from fedmm.models import DictionaryLearning

    v = run.variant
    model = DictionaryLearning(run.K, run.lam, ridge=run.ridge)
    algorithm = {"FedMM": FedMM, "ParameterAveraging": ParameterAveraging}[v.algorithm](
        model, clients_per_round=run.active_clients,
        compressor=Identity() if v.bits is None else StochasticRounding(bits=v.bits),
        control_variate_step=v.control_variate_step, step=run.step, batch_size=v.batch_size)
    datas = list(run.datas)
    server, _ = algorithm.build(datas, seed=run.seed)
    norms = {0: median_atom_norm(server.theta)}
    snapshots = {0: np.array(server.theta)} if 0 in run.map_rounds else {}
    done = [0]

    def after_round(t: int, state: Any) -> None:
        theta = state["theta"]
        done[0] += 1
        r = done[0]
        if r % run.every == 0 or r == run.rounds:
            norms[r] = median_atom_norm(theta)
        if r in run.map_rounds:
            snapshots[r] = np.array(theta)
        tick(1)

    # monitor_every=rounds: the baseline's E_sp (a full pass over the data) only at the last round
    history = algorithm.run(datas, run.rounds, seed=run.seed, progress=False, callback=after_round,
                            evaluate_every=run.every, monitor_every=run.rounds)
    history.initial["median_atom_norm"] = norms.pop(0)
    for r, value in norms.items():
        history.records[r - 1]["median_atom_norm"] = value
    history.config.update(panel=run.panel, curve=run.curve, ridge=run.ridge)
    out = history.to_dict()
    if run.map_rounds:
        maps = {"rounds": [], "baseline": [], **{name: {"median_atom_norm": [], "objective": []}
                                                 for name in MAP_NAMES}}
        all_data = np.vstack(datas)
        for r in sorted(snapshots):
            compared = map_comparison(model, datas, snapshots[r], batch_size=run.map_batch,
                                      draws=run.minibatch_draws, rng=[run.seed, r])
            maps["rounds"].append(r)
            maps["baseline"].append({"median_atom_norm": median_atom_norm(snapshots[r]),
                                     "objective": model.objective(all_data, snapshots[r])})
            for name in MAP_NAMES:
                for key in ("median_atom_norm", "objective"):
                    maps[name][key].append(compared[name][key])
        out["maps"] = maps
    return out


def _series(history: dict, name: str) -> np.ndarray:
    """``name`` at rounds 0..T of a JSON-coded History (NaN where not evaluated)."""
    return History.from_dict(history).series(name)


# --------------------------------------------------------------------------- the experiment
def _plan(config: AblationConfig, data: dict[tuple[int, int], tuple]) -> list[_Run]:
    """Every run of the ablation (the shared ones once)."""
    fig1 = DictionaryConfig(figure="fig1", control_variate_step=config.control_variate_step,
                            batch_size=config.batch_size, bits=config.bits)
    fedmm_v, baseline_v = figure_variants(fig1)
    sqrt_step = ("sqrt", config.beta)
    n = config.n_clients
    every = config.every
    map_rounds = tuple(sorted({int(round(x)) for x in np.linspace(0, config.rounds, config.map_points)}))
    fp_every = max(1, config.fixed_point_rounds // 100)
    runs = []
    for seed in range(config.first_seed, config.first_seed + config.seeds):
        def add(panel: str, curve: str, variant: Variant, active: int, step: Any = sqrt_step, p: int = config.p,
                ridge: float = config.ridge, rounds: int = config.rounds, each: int = every, **extra: Any) -> None:
            runs.append(_Run(panel, curve, variant, active, step, ridge, seed, rounds, each, data[(p, seed)],
                             config.K, config.lam, **extra))

        add("a", "FedMM", fedmm_v, config.active_clients)
        add("a", "ParameterAveraging", baseline_v, config.active_clients, map_rounds=map_rounds,
            minibatch_draws=config.minibatch_draws, map_batch=config.batch_size)
        add("b", "full participation, no compression",
            dataclasses.replace(baseline_v, bits=None), n)
        add("b", "full local batches", dataclasses.replace(baseline_v, batch_size=None), config.active_clients)
        add("b", "full batches + participation, no compression",
            dataclasses.replace(baseline_v, batch_size=None, bits=None), n)
        for p in config.p_sweep:
            if p != config.p:
                add("d", f"p={p}", baseline_v, config.active_clients, p=p)
        for ridge in config.ridge_sweep:
            if ridge != config.ridge:
                add("d", f"eta={ridge:g}", baseline_v, config.active_clients, ridge=ridge)
        exact = Variant("deterministic", "FedMM", 0.0, None, None)
        gamma = config.fixed_point_step
        for curve, algorithm, step in ((f"ParameterAveraging, gamma={gamma:g}", "ParameterAveraging", gamma),
                                       (f"FedMM, gamma={gamma:g}", "FedMM", gamma),
                                       ("MM (FedMM, gamma=1)", "FedMM", 1.0)):
            add("e", curve, dataclasses.replace(exact, algorithm=algorithm), n, step=step,
                rounds=config.fixed_point_rounds, each=fp_every)
    return runs


def run_ablation(config: AblationConfig, out_dir: str | os.PathLike, *, progress: bool | None = None,
                 log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every curve of the ablation over the seeds; write the RunSet JSON, the PNG and the summary.

    Parameters
    ----------
    config : AblationConfig
    out_dir : path-like
        Created if missing; receives ``ablation.json``, ``ablation.png``,
        ``ablation_summary.txt`` and ``ablation_summary.json``.
    progress : bool or None
        Progress bar on standard error; None (default) only when it is a terminal.
    log : callable(str), optional
        Receives progress messages (default: this module's logger at INFO level).

    Returns
    -------
    dict
        ``{"summary": str, "rows": [...], "files": [paths], "runs": {name: History dict}, "maps": {seed: ...}}``.
    """
    if log is None:
        log = logger.info
    config = config.validated()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    data = {}
    for p in dict.fromkeys((config.p, *config.p_sweep)):
        setting = build_setting("heterogeneous", DictionaryConfig(
            figure="fig1", settings=("heterogeneous",), p=p, K=config.K, n_samples=config.n_samples,
            n_clients=config.n_clients, data_seed=config.data_seed))
        for seed in range(config.first_seed, config.first_seed + config.seeds):
            data[(p, seed)] = tuple(setting["datas"])
        log(f"[ablation] p={p}: {setting['description']}")
    runs = _plan(config, data)
    results = run_tasks(_run_one, runs, jobs=config.jobs, total=sum(r.rounds for r in runs),
                        desc="ablation: rounds", progress=progress)
    histories: dict[str, dict] = {}
    maps: dict[int, dict] = {}
    for run, result in zip(runs, results):
        if "maps" in result:
            maps[run.seed] = result.pop("maps")
        histories[f"{run.panel}/{run.curve}/seed={run.seed}"] = result
    rows = _summary_rows(config, runs, histories, maps)
    metadata = {"config": _jsonable(config), "map_names": list(MAP_NAMES),
                "maps": {str(seed): m for seed, m in maps.items()}}
    json_path = out / "ablation.json"
    RunSet({name: History.from_dict(h) for name, h in histories.items()}, metadata=metadata).save(json_path)
    png = out / "ablation.png"
    plot_ablation(config, runs, histories, maps, png)
    headers = ["panel", "curve", "runs", "min objective", "round of min", "objective at T",
               "rise (T-min)/min", "median atom norm t=0", "median atom norm at T"]
    notes = (f"(mean ± std over {config.seeds} seed(s); T = {config.rounds} rounds in (a), (b), (d), "
             f"{config.fixed_point_rounds} in (e); objective every {config.every} rounds "
             f"({max(1, config.fixed_point_rounds // 100)} in (e)); (c): the three maps at the baseline's θ_0 "
             f"('t=0' columns) and θ_T ('at T' columns), {config.minibatch_draws} minibatch draws of "
             f"{config.batch_size}; total {time.perf_counter() - started:.0f} s)")
    summary, summary_files = write_summary(out, "ablation", headers, rows, notes=notes,
                                           extra={"config": _jsonable(config)})
    files = [json_path, png, *summary_files]
    return {"summary": summary, "rows": rows, "files": [str(f) for f in files], "runs": histories, "maps": maps}


def _jsonable(config: AblationConfig) -> dict[str, Any]:
    out = dataclasses.asdict(config)
    out["p_sweep"], out["ridge_sweep"] = list(config.p_sweep), list(config.ridge_sweep)
    out["evaluate_every"] = config.every
    return out


def _mean_std(values: Sequence[float], fmt: str = ".4g") -> str:
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0 or not np.isfinite(arr).all():
        return "-"
    return f"{arr.mean():{fmt}}" + (f" ± {arr.std():.2g}" if arr.size > 1 else "")


def _curves(runs: Sequence[_Run], histories: dict[str, dict]) -> dict[tuple[str, str], list[dict]]:
    grouped: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        grouped.setdefault((run.panel, run.curve), []).append(histories[f"{run.panel}/{run.curve}/seed={run.seed}"])
    return grouped


def _sweep_curves(config: AblationConfig, grouped: dict) -> list[tuple[str, list[dict]]]:
    """Panel (d)'s curves in sweep order (the Figure 1 baseline stands for p = config.p and η = config.ridge)."""
    base = grouped[("a", "ParameterAveraging")]
    out = [(f"p={p}" + (f" (eta={config.ridge:g})" if p == config.p else ""),
            base if p == config.p else grouped[("d", f"p={p}")]) for p in config.p_sweep]
    out += [(f"eta={eta:g} (p={config.p})", base if eta == config.ridge else grouped[("d", f"eta={eta:g}")])
            for eta in config.ridge_sweep]
    return out


def _summary_rows(config: AblationConfig, runs: Sequence[_Run], histories: dict[str, dict],
                  maps: dict[int, dict]) -> list[list[str]]:
    grouped = _curves(runs, histories)
    rows = []

    def curve_row(panel: str, curve: str, group: list[dict]) -> list[str]:
        stats = [objective_rise(_series(h, "objective")) for h in group]
        norms = [_series(h, "median_atom_norm") for h in group]
        return [panel, curve, str(len(group)), _mean_std([s["min"] for s in stats]),
                _mean_std([s["argmin"] for s in stats], ".0f"), _mean_std([s["final"] for s in stats]),
                _mean_std([100 * s["rise"] for s in stats], ".2f") + " %",
                _mean_std([n[0] for n in norms], ".3f"), _mean_std([n[np.isfinite(n)][-1] for n in norms], ".3f")]

    for (panel, curve), group in grouped.items():
        if panel in ("a", "b", "e"):
            rows.append(curve_row(f"({panel})", curve, group))
        if (panel, curve) == ("a", "ParameterAveraging"):
            rows.append(curve_row("(b)", "ParameterAveraging as Figure 1", group))
    for name in ("baseline θ itself", *MAP_NAMES):
        first = [m["baseline"][0] if name.startswith("baseline") else
                 {k: m[name][k][0] for k in ("median_atom_norm", "objective")} for m in maps.values()]
        last = [m["baseline"][-1] if name.startswith("baseline") else
                {k: m[name][k][-1] for k in ("median_atom_norm", "objective")} for m in maps.values()]
        rows.append(["(c)", name, str(len(maps)), "-", "-", _mean_std([v["objective"] for v in last]), "-",
                     _mean_std([v["median_atom_norm"] for v in first], ".3f"),
                     _mean_std([v["median_atom_norm"] for v in last], ".3f")])
    for curve, group in _sweep_curves(config, grouped):
        rows.append(curve_row("(d)", "ParameterAveraging " + curve, group))
    order = {"(a)": 0, "(b)": 1, "(c)": 2, "(d)": 3, "(e)": 4}
    return sorted(rows, key=lambda r: order[r[0]])  # stable: curves keep their order within a panel


# --------------------------------------------------------------------------- figure
def plot_ablation(config: AblationConfig, runs: Sequence[_Run], histories: dict[str, dict], maps: dict[int, dict],
                  path: str | os.PathLike) -> None:
    """The five panels of the ablation, one row each: objective (left) and an explanation (right).

    Rows: (a) FedMM vs the baseline, objective and median atom norm;
    (b) the baseline's factors, objective and median atom norm; (c) the
    three maps at the baseline's iterates, median atom norm and objective;
    (d) the baseline's objective relative to its minimum over the p and η
    sweeps, and the final rise per sweep value; (e) deterministic limits,
    objective and median atom norm.  Lines are means over seeds with a ±1
    standard deviation band.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    grouped = _curves(runs, histories)
    fig, axes = plt.subplots(5, 2, figsize=(14, 24))

    def draw(ax: Any, groups: list[tuple[str, list[dict]]], field: str, log: bool, clip: bool = False,
             relative: bool = False) -> None:
        lows = []
        for style, (label, group) in enumerate(groups):
            curves = [_series(h, field) for h in group]
            if relative:
                curves = [c / np.nanmin(c) for c in curves]
            lows.append(np.nanmin([np.nanmin(c) for c in curves]))
            plot_band(ax, curves, label=label, log=log, style=style, x=np.arange(len(curves[0]), dtype=float))
        if clip and relative:
            ax.set_ylim(0.995, 1.12)
        elif clip:  # the first rounds' large values would flatten the part that matters
            ax.set_ylim(0.97 * min(lows), 1.2 * min(lows))
        ax.set_xlabel("communication round t")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        tidy_log_axis(ax)

    objective_label = "objective of problem (28)\n(lower is better)"
    norm_label = r"median atom norm $\mathrm{med}_k\,\|\theta_k\|_2$"
    panel_a = [(c, grouped[("a", c)]) for c in ("FedMM", "ParameterAveraging")]
    draw(axes[0, 0], panel_a, "objective", True, clip=True)
    axes[0, 0].set(title=f"(a) Figure 1 variants (β = {config.beta:g}): objective (y clipped)",
                   ylabel=objective_label)
    draw(axes[0, 1], panel_a, "median_atom_norm", True)
    axes[0, 1].set(title="(a) atom norms along the runs", ylabel=norm_label)

    panel_b = [("as Figure 1 (10 of 20 clients, b = 50, 8 bits)", grouped[("a", "ParameterAveraging")])]
    panel_b += [(curve, group) for (panel, curve), group in grouped.items() if panel == "b"]
    draw(axes[1, 0], panel_b, "objective", True, clip=True)
    axes[1, 0].set(title="(b) ParameterAveraging: which factor makes the rise (y clipped)", ylabel=objective_label)
    draw(axes[1, 1], panel_b, "median_atom_norm", True)
    axes[1, 1].set(title="(b) ParameterAveraging: atom norms", ylabel=norm_label)

    for col, (key, ylabel) in enumerate((("median_atom_norm", norm_label), ("objective", objective_label))):
        ax = axes[2, col]
        names = ("baseline θ itself", *MAP_NAMES)
        values = []
        for style, name in enumerate(names):
            per_seed = [np.array([v[key] for v in m["baseline"]]) if style == 0 else np.array(m[name][key])
                        for m in maps.values()]
            values.append(np.concatenate(per_seed))
            rounds = next(iter(maps.values()))["rounds"]
            plot_band(ax, per_seed, label=name, log=True, style=style, x=np.asarray(rounds, dtype=float))
        # the baseline's first iterates (random θ_0) would flatten the maps' curves: clip at their range
        maps_values = np.concatenate(values[1:])
        ax.set_ylim(0.9 * min(maps_values.min(), values[0].min()), 1.1 * maps_values.max())
        ax.set_xlabel("round t of the baseline's iterate θ_t (Figure 1 variant)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        tidy_log_axis(ax)
    axes[2, 0].set_title(f"(c) maps at the baseline's θ_t: atom norms (minibatch b = {config.batch_size}, "
                         f"{config.minibatch_draws} draws; y clipped)")
    axes[2, 1].set_title("(c) maps at the baseline's θ_t: objective at their output (y clipped)")

    sweeps = _sweep_curves(config, grouped)
    draw(axes[3, 0], [(f"ParameterAveraging {c}", g) for c, g in sweeps], "objective", False, clip=True,
         relative=True)
    axes[3, 0].set(title="(d) baseline over p and η: objective / its minimum (y clipped)",
                   ylabel=r"$f(\theta_t) / \min_s f(\theta_s)$")
    ax = axes[3, 1]
    rises = [[100 * objective_rise(_series(h, "objective"))["rise"] for h in g] for _, g in sweeps]
    positions = np.arange(len(sweeps))
    ax.bar(positions, [np.mean(r) for r in rises], yerr=[np.std(r) for r in rises] if config.seeds > 1 else None,
           color=["C0"] * len(config.p_sweep) + ["C1"] * len(config.ridge_sweep), capsize=3)
    ax.set_xticks(positions, [c for c, _ in sweeps], rotation=20, fontsize=8)
    ax.set(title=f"(d) rise of the baseline after its minimum, T = {config.rounds}",
           ylabel=r"$(f_T - \min_t f_t)/\min_t f_t$ (%)")
    ax.grid(alpha=0.3, axis="y")

    panel_e = [(curve, group) for (panel, curve), group in grouped.items() if panel == "e"]
    draw(axes[4, 0], panel_e, "objective", True, clip=True)
    axes[4, 0].set(title="(e) deterministic: full batches and participation, no compression, α = 0 (y clipped)",
                   ylabel=objective_label)
    axes[4, 0].set_xscale("log")
    draw(axes[4, 1], panel_e, "median_atom_norm", True)
    axes[4, 1].set(title="(e) deterministic: atom norms", ylabel=norm_label)
    axes[4, 1].set_xscale("log")
    for ax in axes.flat:
        ax.title.set_fontsize(10)
    fig.suptitle("Why the Θ-space baseline rises (FedMM paper §6, heterogeneous synthetic setting, "
                 f"p = {config.p}, K = {config.K}, {config.n_clients} clients)")
    band = "band: ± 1 std over the seeds" if config.seeds > 1 else "one seed, no band"
    fig.text(0.5, 0.004, f"Lines: mean over {config.seeds} seed(s); {band}; markers only distinguish the curves. "
             "'y clipped': the first rounds' larger objective is cut off.", ha="center", va="bottom", fontsize=9)
    fig.tight_layout(rect=(0, 0.01, 1, 0.99))
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------- command line
def _step(text: str) -> float:
    import argparse

    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a step in (0, 1], got {text!r}")
    return value


def add_ablation_parser(subparsers: Any) -> None:
    """Register ``fedmm experiment ablation``."""
    d = AblationConfig()
    text = ("Ablation of the Θ-space baseline of FedMM paper Figure 1 (heterogeneous): atom norms, "
            "minibatch vs full statistics, p and eta sweeps, deterministic fixed points")
    parser = subparsers.add_parser("ablation", help=text, description=text + ". Options given here override the "
                                   "--config file, which overrides the defaults.")
    add_common_options(parser, name="ablation", seeds=d.seeds, rounds=d.rounds,
                       rounds_help="rounds of the runs of panels (a), (b), (d)")

    def opt(flag: str, dest: str, kind: Callable, metavar: str, help_text: str) -> None:
        default = getattr(d, dest)
        shown = ",".join(f"{v:g}" for v in default) if isinstance(default, tuple) else default
        parser.add_argument(flag, dest=dest, type=kind, default=default, metavar=metavar,
                            help=f"{help_text} (default: {shown})")

    opt("--beta", "beta", positive_float, "BETA", "step gamma_t = beta/sqrt(beta+t) of panels (a), (b), (d)")
    parser.add_argument("--evaluate-every", dest="evaluate_every", type=positive_int, default=None, metavar="N",
                        help="objective and atom-norm cadence of panels (a), (b), (d) (default: rounds/100)")
    opt("--p", "p", positive_int, "P", "dimension of the synthetic signals")
    opt("--K", "K", positive_int, "K", "number of atoms")
    opt("--samples", "n_samples", positive_int, "N", "total number of samples")
    opt("--data-seed", "data_seed", nonneg_int, "SEED", "seed of the data set")
    opt("--clients", "n_clients", positive_int, "N", "number of clients")
    opt("--active-clients", "active_clients", positive_int, "M", "active clients per round in Figure 1's variants")
    opt("--batch-size", "batch_size", positive_int, "B", "local minibatch of Figure 1's variants and of panel (c)")
    opt("--bits", "bits", positive_int, "B", "bits per coordinate of Figure 1's stochastic rounding, 2..32")
    opt("--control-variate-step", "control_variate_step", nonneg_float, "ALPHA",
        "control-variate step alpha of panels (a), (b), (d)")
    opt("--lam", "lam", positive_float, "LAMBDA", "l1 weight lambda of problem (28)")
    opt("--ridge", "ridge", nonneg_float, "ETA", "ridge weight eta of problem (28)")
    opt("--p-sweep", "p_sweep", positive_int_list, "P,...", "dimensions of panel (d), comma-separated")
    opt("--ridge-sweep", "ridge_sweep", nonneg_float_list, "ETA,...", "ridge weights of panel (d), comma-separated")
    opt("--map-points", "map_points", positive_int, "N", "baseline iterates at which panel (c) compares the maps")
    opt("--minibatch-draws", "minibatch_draws", positive_int, "N", "minibatch draws averaged in panel (c)")
    opt("--fixed-point-rounds", "fixed_point_rounds", positive_int, "N", "rounds of the deterministic runs (e)")
    opt("--fixed-point-step", "fixed_point_step", _step, "GAMMA", "constant step of the deterministic runs (e)")
    for old, dest, new, kind in (("--objective-every", "evaluate_every", "--evaluate-every", positive_int),
                                 ("--alpha", "control_variate_step", "--control-variate-step", nonneg_float),
                                 ("--eta", "ridge", "--ridge", nonneg_float),
                                 ("--eta-sweep", "ridge_sweep", "--ridge-sweep", nonneg_float_list)):
        add_deprecated_alias(parser, old, dest=dest, replacement=new, type=kind)
    parser.set_defaults(func=_command)


_OPTION_KEYS = tuple(f.name for f in dataclasses.fields(AblationConfig))


def _command(args: Any) -> int:
    config = AblationConfig(**{key: getattr(args, key) for key in _OPTION_KEYS if hasattr(args, key)})
    log = make_log(args)
    result = run_ablation(config, args.out, progress=resolve_progress(args), log=log)
    log(result["summary"])
    log("wrote " + ", ".join(result["files"]))
    return 0

