# SPDX-License-Identifier: BSD-3-Clause
"""The FedMM paper's §7.3 experiment (Figure 3): FedMM-OT against FedAdam on a known-map OT benchmark.

For every dimension ``d`` (default 16, 32, 64) the benchmark chosen by
``--benchmark`` (seed ``--benchmark-seed``): ``icnn`` (the default,
:func:`fedmm.data.icnn_map_benchmark`, the gradient of a trained ICNN, weights
shipped for d = 16, 32, 64 and seed 0), ``hard``
(:func:`fedmm.data.clustered_map_benchmark`, any d and seed) or ``easy``
(:func:`fedmm.data.known_map_benchmark`), gives the
source ``P_d`` (3-component Gaussian mixture, the same for all three), the target ``Q_d = ∇ψ # P_d``
and the true map ``∇ψ``; ``n = 10`` clients hold ``P_d``'s samples split by
equal-size k-means (``μ_i = 1/n``), everyone holds ``--n-target`` public
samples of ``Q_d``.  Both algorithms learn dense ICNN potentials
(:class:`fedmm.models.TransportProblem`, Korotin et al.'s MMv2 sizes unless
``--hidden-sizes``) from the same warm start per seed (``--identity-steps``
Adam steps fitting ``∇f ≈`` identity): FedMM-OT (Algorithm 3: one local
gradient step on ``ω`` per client, the server's step ``γ`` on ``ω`` along
Adam's direction of the aggregate (``--omega-step``), ``--theta-steps`` Adam
steps on ``θ`` at ``--theta-lr``) and FedAdam (one local step on ``(ω, θ)``, server Adam on the
averaged update).  Each algorithm's step on ``ω`` is tuned on the first seed
over its own grid (``--fedmm-steps``, ``--fedadam-lrs``) with the same score,
the mean L2-UVP over the last tenth of the evaluations; the winner's tuning
run is kept as the first seed's final run.  The metric is L2-UVP (percent of
``Var(Q_d)`` left unexplained, evaluated on ``--n-eval`` fixed points of
``P_d`` every ``--evaluate-every`` rounds); the identity map, the linear
(Gaussian) OT map and the least-squares affine map are reference rows, and the
summary also records the linear map's L2-UVP on every pair available at ``d``
(``linear_map_l2_uvp``), so that every result says how hard its pair is.

Why ``icnn`` by default: it is built as Korotin et al. build their
Mix3toMix10 pairs (which are not available here): the map is the gradient of
an ICNN of the solvers' own architecture, trained to push ``P`` towards ten
Gaussians, so a solver can represent it, and the linear map leaves 54 / 63 /
68% of ``Var(Q)`` unexplained at d = 16 / 32 / 64 (Korotin et al.'s: about 42 /
55 / 64%).  On the easy pair the linear map leaves only about 8%, too little
room to rank solvers; the hard pair's sharp cells are beyond what these ICNNs
fit (centralized training stops 21–26 points below its linear map).  The
figures and tables on docs/figures/README.md say which benchmark made them.

``--cycle-weight`` is ``λ`` of objective (33) (weight of the cycle regularizer
``R_Q``; default 1).  ``--clients 1 --per-client 5000`` runs the centralized
alternating scheme (one client with full participation: FedMM-OT is then that
scheme step for step) on 5000 samples of ``P``.

``--conjugate-step`` chooses the θ-direction (:class:`fedmm.models.TransportProblem`):
``cycle`` (default) descends ``λ R_Q`` only, as Korotin et al. (2021a, Appendix C.1)
do; ``joint`` descends the full θ-gradient of (33), whose Fenchel-Young term
pushes ``∇f_θ`` away from the inverse of ``∇f_ω`` (it should be maximized over
θ): with it the centralized scheme diverges for ``λ = 1`` and settles at the
linear map's L2-UVP for ``λ = 10``.

Measured on the easy benchmark at d = 16 (seed 0, MMv2 sizes 64,64,32, batch 128):
the linear map leaves 8.2% of ``Var(Q)`` unexplained, and an ICNN of these sizes
fitted directly to the true map (supervised, 2000 Adam steps) leaves 2.4%.
The paper's ten θ-steps per round leave the conjugate behind ``ω`` at the
larger ``γ`` (L2-UVP spikes), hence ``--theta-steps 30`` by default; results
per dimension are on docs/figures/README.md.

Outputs in ``--out``: ``ot_histories.json`` (a :class:`fedmm.RunSet` of every
run, tuning runs included), ``ot_summary.txt``/``ot_summary.json`` (the
table, the tuning scores and winners, the curves) and ``ot_curves.png``.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

from fedmm._validation import check_count, check_in, check_int, check_real
from fedmm.data.ot import ICNN_PAIR_DIMS, KNOWN_MAP_BENCHMARKS, client_datasets
from fedmm.experiments._common import (
    ExperimentError,
    add_common_options,
    add_deprecated_alias,
    make_log,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_float_list,
    positive_int,
    positive_int_list,
    require_ot_extra,
    resolve_progress,
    run_tasks,
    seed_list,
    tune_on_grid,
    write_summary,
)
from fedmm.history import History, RunSet
from fedmm.algorithms.ot import OMEGA_STEPS, FedAdam, FedMMOT  # JAX is imported only when the algorithms run
from fedmm.models.ot import CONJUGATE_STEPS, TransportProblem

_LABELS = {"FedMMOT": "FedMM-OT", "FedAdam": "FedAdam"}
#: Each algorithm's tuned step on ω: its grid's configuration key, the parameter's name and the grid's option.
_TUNED = {"FedMMOT": ("fedmm_steps", "step", "--fedmm-steps"),
          "FedAdam": ("fedadam_lrs", "server_lr", "--fedadam-lrs")}

__all__ = ["run_ot_experiment", "plot_ot_curves", "add_ot_parser", "check_icnn_pair", "DEFAULTS"]


def _default(cls: Any, name: str) -> Any:
    """The default of ``cls``'s constructor argument ``name``: the classes' defaults are the experiment's
    settings (one source of truth)."""
    return inspect.signature(cls).parameters[name].default


def _same_default(name: str) -> Any:
    """The default of ``name`` shared by :class:`FedMMOT` and :class:`FedAdam` (an error if they differ)."""
    value = _default(FedMMOT, name)
    if _default(FedAdam, name) != value:
        raise RuntimeError(f"FedMMOT and FedAdam disagree on the default of '{name}'")
    return value


#: Defaults of :func:`run_ot_experiment` (and of the command's options).  The settings both algorithms
#: share and FedMM-OT's θ-steps are the classes' own defaults (:class:`fedmm.models.TransportProblem`,
#: :class:`FedMMOT`, :class:`FedAdam`); the grids of the tuned steps are the experiment's.
DEFAULTS: dict[str, Any] = {
    "dims": (16, 32, 64),
    "n_rounds": 1000,
    "n_clients": 10,
    "n_per_client": 500,
    "n_target": 5000,
    "hidden_sizes": _default(TransportProblem, "hidden_sizes"),
    "cycle_weight": _default(TransportProblem, "cycle_weight"),
    "conjugate_step": _default(TransportProblem, "conjugate_step"),
    "batch_size": _default(TransportProblem, "batch_size"),
    "local_lr": _same_default("local_lr"),  # 0.003: 0.01 made omega_step='sgd' unstable at d = 16..64
    "omega_step": _default(FedMMOT, "omega_step"),
    "fedmm_steps": (1e-3, 3e-3),
    "theta_steps": _default(FedMMOT, "theta_steps"),  # 30: the paper's 10 leave θ behind ω (L2-UVP spikes)
    "theta_lr": _default(FedMMOT, "theta_lr"),
    "fedadam_lrs": (1e-3, 3e-3),
    "extend_grid": 1,
    "identity_steps": 300,
    "evaluate_every": 10,
    "n_eval": 4096,
    "benchmark_seed": 0,
    "benchmark": "icnn",
}


def _evaluated_rounds(n_rounds: int, every: int) -> list[int]:
    """Rounds after which ``run`` evaluates: every ``every``-th and the last (round 0: the initial map)."""
    return [0] + [t for t in range(1, n_rounds + 1) if t % every == 0 or t == n_rounds]


def _one_run(algo: Any, datas, target, init, seed: int, n_rounds: int, every: int, evaluator,
             tick: Callable[[int], None]) -> tuple[History | None, list[float], str | None]:
    """Run one algorithm; on divergence (a non-finite state), keep the curve evaluated so far."""
    values: list[float] = []

    def evaluate(m):
        est = evaluator(m)
        values.append(est.value)
        return {"l2_uvp": est.value, "l2_uvp_stderr": est.stderr}

    done = [0]

    def callback(t, state):
        done[0] += 1
        tick(1)

    try:
        h = algo.run(datas, n_rounds, target=target, seed=seed, init=init, progress=False, callback=callback,
                     evaluate_every=every, evaluate=evaluate)  # run_tasks' bar
    except (ValueError, FloatingPointError) as exc:  # a diverging run: the state became non-finite
        tick(n_rounds - done[0])
        curve = values + [float("inf")] * (len(_evaluated_rounds(n_rounds, every)) - len(values))
        return None, curve, f"diverged after {done[0]} round(s): {str(exc)[:200]}"
    return h, values, None


def _score(curve: Sequence[float]) -> float:
    """Tuning score of one run: the mean L2-UVP over the last tenth of its evaluations (at least the
    last one), so that one noisy evaluation does not decide; ``inf`` for a diverged run."""
    tail = np.asarray(curve[-max(1, len(curve) // 10):], dtype=np.float64)
    return float(tail.mean()) if tail.size and np.isfinite(tail).all() else float("inf")


def check_icnn_pair(benchmark: str, dims: Sequence[int], seed: int) -> None:
    """:class:`ExperimentError` (a ``ValueError`` naming ``--dims`` or ``--benchmark-seed``) unless the ``'icnn'``
    pair has shipped weights for every dimension and the seed."""
    if benchmark != "icnn":
        return
    missing = [d for d in dims if d not in ICNN_PAIR_DIMS]
    if missing:
        raise ExperimentError(f"Expected 'dims' in {list(ICNN_PAIR_DIMS)} with benchmark='icnn' (the dimensions "
                              f"with shipped weights; --benchmark hard takes any), got {missing}", option="--dims")
    if seed != 0:
        raise ExperimentError(f"Expected benchmark_seed=0 with benchmark='icnn' (the shipped weights were trained "
                              f"on P of seed 0), got {seed}", option="--benchmark-seed")


def _algorithm_task(task: dict, tick: Callable[[int], None]) -> dict:
    """One algorithm at one dimension: its grid on the first seed, then the other seeds at the tuned
    step (the benchmark, split and warm starts are rebuilt from their seeds, so tasks run in any
    process and order with the same results); the FedMM-OT task also evaluates the reference maps."""
    d, name, cfg = task["dim"], task["algorithm"], task["config"]
    started = time.perf_counter()
    bench = KNOWN_MAP_BENCHMARKS[cfg["benchmark"]](d, seed=cfg["benchmark_seed"])
    datas = client_datasets(bench, cfg["n_clients"], cfg["n_per_client"], seed=[cfg["benchmark_seed"], 1])
    target = bench.sample_target(cfg["n_target"], seed=[cfg["benchmark_seed"], 2])
    evaluator = bench.l2_uvp_evaluator(n_eval=cfg["n_eval"], seed=[cfg["benchmark_seed"], 3])
    out: dict[str, Any] = {"dim": d, "algorithm": name}
    if task["references"]:
        references = {ref: evaluator(m) for ref, m in bench.reference_maps(seed=[cfg["benchmark_seed"], 4]).items()}
        linear_by_benchmark = {}  # how hard each pair is: its linear map's L2-UVP on its own evaluation points
        for other_name, make in KNOWN_MAP_BENCHMARKS.items():
            if other_name == "icnn" and (d not in ICNN_PAIR_DIMS or cfg["benchmark_seed"] != 0):
                continue  # weights shipped for these dimensions and seed 0 only
            other = bench if other_name == cfg["benchmark"] else make(d, seed=cfg["benchmark_seed"])
            value = references["linear"] if other is bench else other.l2_uvp(
                other.linear_map(), n_eval=cfg["n_eval"], seed=[cfg["benchmark_seed"], 3])
            linear_by_benchmark[other_name] = {"l2_uvp": value.value, "stderr": value.stderr}
        out.update(references={k: {"l2_uvp": v.value, "stderr": v.stderr} for k, v in references.items()},
                   linear_map_l2_uvp=linear_by_benchmark, target_variance=bench.target_variance())
    problem = TransportProblem(d, hidden_sizes=cfg["hidden_sizes"], cycle_weight=cfg["cycle_weight"],
                               batch_size=cfg["batch_size"], conjugate_step=cfg["conjugate_step"])
    weights = [1.0 / cfg["n_clients"]] * cfg["n_clients"]
    inits = {s: problem.init(s, identity_steps=cfg["identity_steps"]) for s in task["seeds"]}
    rounds, every = cfg["n_rounds"], cfg["evaluate_every"]
    common = {"weights": weights, "batch_size": cfg["batch_size"], "local_lr": cfg["local_lr"]}

    def run(value, seed):
        if name == "FedMMOT":
            algo = FedMMOT(problem, step=value, omega_step=cfg["omega_step"], theta_steps=cfg["theta_steps"],
                           theta_lr=cfg["theta_lr"], **common)
        else:
            algo = FedAdam(problem, server_lr=value, **common)
        return _one_run(algo, datas, target, inits[seed], seed, rounds, every, evaluator, tick)

    key, param, option = _TUNED[name]
    first = task["seeds"][0]
    warnings: list[str] = []
    tried: dict[float, tuple] = {}

    def score(values: list[float]) -> list[float]:
        scores = []
        for value in values:
            tried[value] = run(value, first)
            scores.append(_score(tried[value][1]))
        return scores

    # The step on ω is tuned on the first seed over the algorithm's own grid, with the same score for both.
    tuned = tune_on_grid(score, cfg[key], extend=cfg["extend_grid"], name=f"{name} {param} (d={d})",
                         option=option, warn=warnings.append)
    best = tuned["best"]
    runs = {s: (tried[best] if s == first else run(best, s)) for s in task["seeds"]}
    tuning_histories, histories, notes = {}, {}, []
    for value, (h, _, failure) in tried.items():
        if h is not None:
            tuning_histories[f"d={d}/{name}({param}={value:g})/seed={first}"] = h.to_dict()
        if failure:
            notes.append(f"d={d} {name} {param}={value:g} seed={first}: {failure}")
    for s, (h, _, failure) in runs.items():
        if h is not None:
            histories[f"d={d}/{name}/seed={s}"] = h.to_dict()
        if failure and s != first:
            notes.append(f"d={d} {name} seed={s}: {failure}")
    out.update(curves={str(s): r[1] for s, r in runs.items()}, tuning=tuned, best=best, warnings=warnings,
               notes=notes, tuning_histories=tuning_histories, histories=histories,
               hidden_sizes=list(problem.potential.hidden_sizes), elapsed_seconds=time.perf_counter() - started)
    return out


def _dimension_result(d: int, parts: dict[str, dict], rounds: int, every: int) -> dict:
    """Merge the two algorithms' task results of dimension ``d`` into its summary entry."""
    fedmm, fedadam = parts["FedMMOT"], parts["FedAdam"]
    # the RunSet's order: every tuning run, then the final runs (FedMM-OT's first in each)
    histories = {**fedmm["tuning_histories"], **fedadam["tuning_histories"], **fedmm["histories"],
                 **fedadam["histories"]}
    return {
        "dim": d,
        "rounds": _evaluated_rounds(rounds, every),
        "curves": {name: part["curves"] for name, part in parts.items()},
        "references": fedmm["references"],
        "linear_map_l2_uvp": fedmm["linear_map_l2_uvp"],
        "tuning": {name: part["tuning"] for name, part in parts.items()},
        "fedadam_lr": fedadam["best"],
        "fedmm_step": fedmm["best"],
        "warnings": fedmm["warnings"] + fedadam["warnings"],
        "notes": fedmm["notes"] + fedadam["notes"],
        "histories": histories,
        "hidden_sizes": fedmm["hidden_sizes"],
        "target_variance": fedmm["target_variance"],
        "elapsed_seconds": fedmm["elapsed_seconds"] + fedadam["elapsed_seconds"],
    }


def run_ot_experiment(
    output_dir: str | os.PathLike,
    *,
    seeds: Sequence[int] = (0, 1),
    jobs: int = 1,
    progress: bool = False,
    plot: bool = True,
    warn: Callable[[str], None] | None = None,
    **options: Any,
) -> dict:
    """Run the experiment (see the module docstring) and write its files.

    Parameters
    ----------
    output_dir : path
        Created if missing.
    seeds : sequence of int
        Seeds of the reported runs (initial potentials, client minibatches);
        the first also tunes FedAdam's server learning rate.
    jobs : int
        Worker processes, one (dimension, algorithm) pair per task.
    progress : bool
        One progress bar (rounds) on stderr.
    plot : bool
        Write ``ot_curves.png``.
    warn : callable(str), optional
        Receives warnings (a tuned value at the edge of its grid, diverged runs).
    **options
        Overrides of :data:`DEFAULTS`: ``dims``, ``n_rounds``, ``n_clients``,
        ``n_per_client``, ``n_target``, ``hidden_sizes`` (None: MMv2 sizes
        per dimension), ``cycle_weight`` (``λ`` of eq. (33), the weight of the
        cycle regularizer ``R_Q``), ``conjugate_step`` (the θ-direction, see
        :class:`fedmm.models.TransportProblem`), ``batch_size``, ``local_lr`` (clients' gradient step,
        both algorithms), ``omega_step`` (FedMM-OT's server step on ``ω``,
        ``'sgd'`` or ``'adam'``), ``fedmm_steps`` (grid of its ``γ``),
        ``theta_steps`` and ``theta_lr`` (FedMM-OT's Adam on ``θ``),
        ``fedadam_lrs`` (grid), ``extend_grid`` (extensions past
        the grid's edge, :func:`fedmm.experiments._common.tune_on_grid`), ``identity_steps``,
        ``evaluate_every``, ``n_eval``, ``benchmark_seed``, ``benchmark`` (``'hard'``, ``'easy'`` or
        ``'icnn'``, :data:`fedmm.data.KNOWN_MAP_BENCHMARKS`; ``'icnn'`` needs ``dims`` in 16, 32, 64 and
        ``benchmark_seed=0``).

    Returns
    -------
    dict
        The content of ``ot_summary.json``.
    """
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise TypeError(f"Unknown option(s) {unknown}; expected some of {sorted(DEFAULTS)}")
    cfg = {**DEFAULTS, **options}
    dims = [check_int(d, "dims", low=1) for d in cfg["dims"]]
    if not dims:
        raise ValueError("Expected at least one dimension in 'dims'")
    seeds = [check_int(s, "seeds", low=0) for s in seeds]
    if not seeds:
        raise ValueError("Expected at least one seed in 'seeds'")
    for key in ("n_rounds", "n_clients", "n_per_client", "n_target", "batch_size", "evaluate_every", "n_eval"):
        cfg[key] = check_int(cfg[key], key, low=2 if key == "n_eval" else 1)
    cfg["identity_steps"] = check_count(cfg["identity_steps"], "identity_steps", low=0)
    cfg["theta_steps"] = check_count(cfg["theta_steps"], "theta_steps", low=0)
    for key in ("local_lr", "theta_lr"):
        cfg[key] = check_real(cfg[key], key, low=0.0, low_open=True)
    cfg["cycle_weight"] = check_real(cfg["cycle_weight"], "cycle_weight", low=0.0)
    cfg["conjugate_step"] = check_in(cfg["conjugate_step"], "conjugate_step", CONJUGATE_STEPS)
    if cfg["conjugate_step"] == "cycle" and cfg["cycle_weight"] == 0:
        raise ValueError("Expected 'cycle_weight' > 0 with conjugate_step='cycle'")
    cfg["omega_step"] = check_in(cfg["omega_step"], "omega_step", OMEGA_STEPS)
    cfg["benchmark"] = check_in(cfg["benchmark"], "benchmark", tuple(KNOWN_MAP_BENCHMARKS))
    cfg["benchmark_seed"] = check_int(cfg["benchmark_seed"], "benchmark_seed", low=0)
    check_icnn_pair(cfg["benchmark"], dims, cfg["benchmark_seed"])
    for key in ("fedadam_lrs", "fedmm_steps"):
        cfg[key] = [check_real(v, key, low=0.0, low_open=True) for v in cfg[key]]
        if not cfg[key]:
            raise ValueError(f"Expected at least one value in '{key}'")
    cfg["extend_grid"] = check_int(cfg["extend_grid"], "extend_grid", low=0)
    if cfg["hidden_sizes"] is not None:
        cfg["hidden_sizes"] = [check_int(h, "hidden_sizes", low=1) for h in cfg["hidden_sizes"]]
    cfg["dims"] = dims
    jobs = check_int(jobs, "jobs", low=1)
    started = time.perf_counter()
    os.makedirs(output_dir, exist_ok=True)

    n_runs = len(cfg["fedadam_lrs"]) + len(cfg["fedmm_steps"]) + 2 * (len(seeds) - 1)  # without grid extensions
    # one task per (dimension, algorithm), the largest dimension (the longest tasks) first, so that
    # parallel workers finish together
    tasks = [{"dim": d, "algorithm": name, "references": name == "FedMMOT", "seeds": seeds, "config": cfg}
             for d in sorted(dims, reverse=True) for name in _TUNED]
    parts = run_tasks(_algorithm_task, tasks, jobs=min(jobs, len(tasks)), total=len(dims) * n_runs * cfg["n_rounds"],
                      desc="ot experiment", progress=progress)
    results = [_dimension_result(d, {p["algorithm"]: p for p in parts if p["dim"] == d}, cfg["n_rounds"],
                                 cfg["evaluate_every"]) for d in dims]  # the order the user gave
    for r in results:
        for text in r["warnings"] + r["notes"]:
            if warn is not None:
                warn(text)

    histories = RunSet({name: History.from_dict(h) for r in results for name, h in r["histories"].items()},
                       metadata={"experiment": "ot", "config": {**cfg, "seeds": seeds}})
    histories.save(os.path.join(output_dir, "ot_histories.json"))

    headers = ["d", "method", "tuned step on ω", f"L2-UVP % at round {cfg['n_rounds']} (mean)", "min", "max",
               "seeds"]
    rows = []
    for r in results:
        d = r["dim"]
        for name, label in (("FedMMOT", f"γ = {r['fedmm_step']:g}"), ("FedAdam", f"lr = {r['fedadam_lr']:g}")):
            finals = np.array([c[-1] for c in r["curves"][name].values()], dtype=np.float64)
            rows.append([d, _LABELS[name], label, f"{finals.mean():.3g}", f"{finals.min():.3g}",
                         f"{finals.max():.3g}", len(finals)])
        for name, ref in r["references"].items():
            rows.append([d, f"{name} map (reference)", "-", f"{ref['l2_uvp']:.3g} ± {ref['stderr']:.2g} (s.e.)",
                         "-", "-", "-"])
    grid = lambda key: [float(f"{v:g}") for v in cfg[key]]  # noqa: E731
    hardness = "; ".join(f"d={r['dim']}: " + ", ".join(f"{k} {v['l2_uvp']:.3g}%" for k, v in
                                                         r["linear_map_l2_uvp"].items()) for r in results)
    notes = (f"Benchmark: {cfg['benchmark']} (seed {cfg['benchmark_seed']}); linear-map L2-UVP of every pair: "
             f"{hardness}. "
             f"L2-UVP = 100 E_P||m(X) - grad psi(X)||^2 / tr Cov(Q) on {cfg['n_eval']} fixed points of P. "
             f"FedMM-OT: server step gamma on omega ({cfg['omega_step']}) tuned over {grid('fedmm_steps')}, "
             f"{cfg['theta_steps']} Adam steps on theta per round (lr {cfg['theta_lr']:g}); FedAdam: server lr "
             f"tuned over {grid('fedadam_lrs')}; both on seed {seeds[0]} (grids extended past an edge up to "
             f"{cfg['extend_grid']} time(s); values tried per d in ot_summary.json), score = mean L2-UVP over "
             "the last tenth of the evaluations.")
    summary = {
        "experiment": "ot",
        "config": {**cfg, "seeds": seeds},
        "dimensions": {str(r["dim"]): {k: v for k, v in r.items() if k != "histories"} for r in results},
        "elapsed_seconds": time.perf_counter() - started,
    }
    summary["table"], _ = write_summary(output_dir, "ot", headers, rows, notes=notes, extra=summary)
    if plot:
        plot_ot_curves(summary, os.path.join(output_dir, "ot_curves.png"))
    return summary


def plot_ot_curves(summary: dict, path: str | os.PathLike) -> None:
    """One panel per dimension: L2-UVP against rounds, mean over seeds with a min–max band, reference lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = summary["dimensions"]
    # the legend's long labels need two panels' width per column: one column below three panels
    legend_columns = 2 if len(dims) >= 3 else 1
    legend_rows = -(-4 // legend_columns)
    height = 3.4 + 0.22 * legend_rows + 0.5
    fig, axes = plt.subplots(1, len(dims), figsize=(max(4.6 * len(dims), 9.2), height), squeeze=False)
    colors = {"FedMMOT": "C0", "FedAdam": "C1"}
    labels = _LABELS
    handles = {}
    for ax, (d, r) in zip(axes[0], dims.items()):
        x = np.asarray(r["rounds"])
        values = []
        for name, by_seed in r["curves"].items():
            curves = np.array([np.where(np.isfinite(c), c, np.nan) for c in by_seed.values()], dtype=np.float64)
            with np.errstate(all="ignore"):
                mean, low, high = np.nanmean(curves, 0), np.nanmin(curves, 0), np.nanmax(curves, 0)
            cfg = summary["config"]
            theta_steps = cfg.get("theta_steps", cfg.get("server_steps"))  # a summary written before the rename
            theta_lr = cfg.get("theta_lr", cfg.get("server_lr"))
            label = (f"FedMM-OT (server step on ω: {cfg['omega_step']}, γ tuned per d; {theta_steps} "
                     f"θ-Adam steps per round, lr {theta_lr:g})"
                     if name == "FedMMOT" else "FedAdam (server lr tuned per d)")
            line, = ax.plot(x, mean, color=colors[name], lw=1.6, label=label)
            if curves.shape[0] > 1:
                ax.fill_between(x, low, high, color=colors[name], alpha=0.2, lw=0)
            handles[name] = line
            values.append(curves[np.isfinite(curves)])
        for ref, style in (("linear", "--"), ("identity", ":")):
            value = r["references"][ref]["l2_uvp"]
            handles[ref] = ax.axhline(value, color="0.35", ls=style, lw=1.2, label=f"{ref} map")
            values.append(np.array([value]))
        finite = np.concatenate(values)
        finite = finite[np.isfinite(finite) & (finite > 0)]
        # Curves that diverge (far above the identity map) leave the scale, with a note.
        top = 3.0 * r["references"]["identity"]["l2_uvp"]
        off = [labels[n] for n, c in r["curves"].items()
               if any(not np.isfinite(v) or v > top for curve in c.values() for v in curve)]
        shown = finite[finite <= top]
        if shown.size and shown.max() / shown.min() > 10:  # from the identity map (~100%) down to a few %
            ax.set_yscale("log")
        if off:
            low = shown.min() if shown.size else top / 100
            ax.set_ylim(low / 1.3 if ax.get_yscale() == "log" else 0.0, top)
            ax.text(0.02, 0.97, f"off scale (diverging): {', '.join(off)}", transform=ax.transAxes, va="top",
                    fontsize=8, color="C3")
        ax.set_title(f"d = {d}   (FedMM-OT γ {r['fedmm_step']:g}, FedAdam lr {r['fedadam_lr']:g})", fontsize=10)
        ax.set_xlabel("communication rounds")
        ax.set_ylabel("L2-UVP (% of Var(Q) unexplained)")
        ax.grid(True, which="both", alpha=0.3)
    cfg = summary["config"]
    n_seeds = len(cfg["seeds"])
    band = f"mean over {n_seeds} seeds, band = min–max over seeds" if n_seeds > 1 else "one seed"
    fig.legend(list(handles.values()), [h.get_label() for h in handles.values()], loc="lower center",
               ncol=legend_columns, frameon=False)
    fig.suptitle(f"FedMM-OT vs FedAdam on the {cfg.get('benchmark', 'easy')} known-map OT benchmark: L2-UVP "
                 f"against rounds (lower is better)\n"
                 f"n = {cfg['n_clients']} k-means clients, {band}", fontsize=10)
    fig.tight_layout(rect=(0, (0.22 * legend_rows + 0.1) / height, 1, 1 - 0.5 / height))
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- command line --------------------------------------------------------------------------------
def _hidden_sizes(text: str) -> Any:
    return "MMv2" if text.strip().lower() == "mmv2" else positive_int_list(text)


_hidden_sizes.comma_list = True  # type: ignore[attr-defined]  # a TOML list is joined with commas (apply_config)


def add_ot_parser(subparsers: Any) -> Any:
    """Register ``ot`` on an ``argparse`` subparsers object (``fedmm experiment ot``)."""
    parser = subparsers.add_parser(
        "ot",
        help="FedMM paper Fig. 3: FedMM-OT vs FedAdam, L2-UVP on a known-map OT benchmark (needs fedmm[ot])",
        description=__doc__.split("\n\n")[0],
    )
    add_common_options(parser, name="ot", seeds=2, rounds=DEFAULTS["n_rounds"],
                       rounds_help="communication rounds per run")
    d = DEFAULTS

    def opt(flag, default, help_text, **kwargs):
        shown = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in default) \
            if isinstance(default, (tuple, list)) else default
        parser.add_argument(flag, default=default, help=f"{help_text} (default: {shown})", **kwargs)

    opt("--dims", d["dims"], "dimensions d, comma-separated", type=positive_int_list, metavar="D,...")
    opt("--clients", d["n_clients"], "number of k-means clients n", type=positive_int, metavar="N", dest="n_clients")
    opt("--per-client", d["n_per_client"], "samples of P per client", type=positive_int, metavar="N",
        dest="n_per_client")
    opt("--n-target", d["n_target"], "public samples of Q", type=positive_int, metavar="N")
    opt("--hidden-sizes", "MMv2", "hidden sizes of both ICNNs, comma-separated; MMv2: "
        "[max(2d,64), max(2d,64), max(d,32)]", type=_hidden_sizes, metavar="H,...")
    opt("--cycle-weight", d["cycle_weight"], "weight lambda of the cycle regularizer R_Q in the objective (33)",
        type=nonneg_float, metavar="LAMBDA")
    opt("--conjugate-step", d["conjugate_step"], "theta-direction: 'cycle' = lambda grad_theta R_Q (Korotin et al. "
        "2021a), 'joint' = full grad_theta of (33) (diverges or stalls at the linear map)",
        choices=list(CONJUGATE_STEPS))
    opt("--batch-size", d["batch_size"], "source and target samples per gradient step", type=positive_int,
        metavar="B")
    opt("--local-lr", d["local_lr"], "clients' gradient step (both algorithms)", type=positive_float, metavar="LR")
    opt("--theta-steps", d["theta_steps"], "FedMM-OT: server Adam steps on theta per round", type=nonneg_int,
        metavar="N")
    add_deprecated_alias(parser, "--server-steps", dest="theta_steps", replacement="--theta-steps", type=nonneg_int)
    opt("--theta-lr", d["theta_lr"], "FedMM-OT: learning rate of the server's Adam steps on theta",
        type=positive_float, metavar="LR")
    add_deprecated_alias(parser, "--server-lr", dest="theta_lr", replacement="--theta-lr", type=positive_float)
    opt("--omega-step", d["omega_step"], "FedMM-OT: the server's step on omega, 'sgd' = omega + gamma H "
        "(Algorithm 3 line 14), 'adam' = gamma times Adam's direction of H", choices=list(OMEGA_STEPS))
    opt("--fedmm-steps", d["fedmm_steps"],
        "FedMM-OT: server steps gamma on omega tried, comma-separated (tuned on the first seed)",
        type=positive_float_list, metavar="GAMMA,...")
    opt("--fedadam-lrs", d["fedadam_lrs"],
        "FedAdam server learning rates tried, comma-separated (tuned on the first seed)",
        type=positive_float_list, metavar="LR,...")
    opt("--extend-grid", d["extend_grid"], "extend each grid past its edge up to N times when the best "
        "value lies there", type=nonneg_int, metavar="N")
    opt("--identity-steps", d["identity_steps"], "warm start: Adam steps fitting grad f = identity",
        type=nonneg_int, metavar="N")
    opt("--evaluate-every", d["evaluate_every"], "evaluate L2-UVP every N rounds (and the last)", type=positive_int,
        metavar="N")
    add_deprecated_alias(parser, "--eval-every", dest="evaluate_every", replacement="--evaluate-every",
                         type=positive_int)
    opt("--n-eval", d["n_eval"], "fixed points of P on which L2-UVP is evaluated", type=positive_int, metavar="N")
    opt("--benchmark-seed", d["benchmark_seed"], "seed of the benchmark, the client split and the target samples",
        type=nonneg_int, metavar="S")
    opt("--benchmark", d["benchmark"], "known-map pair: 'icnn' = fedmm.data.icnn_map_benchmark (Korotin et al.'s "
        "construction: the gradient of a trained ICNN of the solvers' architecture; the linear map leaves "
        "54/63/68%% of Var(Q) unexplained at d = 16/32/64; d = 16, 32, 64 and benchmark seed 0 only), 'hard' = "
        "fedmm.data.clustered_map_benchmark (a closed-form map onto ten clusters, any d; the linear map leaves "
        "about 42/53/64%%), 'easy' = fedmm.data.known_map_benchmark (the linear map leaves about 8%%; the pair "
        "of the earlier results)", choices=list(KNOWN_MAP_BENCHMARKS))
    parser.add_argument("--plot", action=argparse.BooleanOptionalAction, default=True,
                        help="write ot_curves.png (default: %(default)s)")
    parser.set_defaults(func=_main)
    return parser


def _main(args: Any) -> int:
    if args.n_eval < 2:
        raise ExperimentError(f"expected at least 2 evaluation points, got {args.n_eval}", option="--n-eval")
    require_ot_extra("fedmm experiment ot")
    hidden = None if args.hidden_sizes == "MMv2" else list(args.hidden_sizes)
    summary = run_ot_experiment(
        args.out,
        seeds=seed_list(args),
        jobs=args.jobs,
        progress=resolve_progress(args),
        plot=args.plot,
        warn=lambda text: print(f"fedmm experiment ot: warning: {text}", file=sys.stderr),
        dims=args.dims, n_rounds=args.rounds, n_clients=args.n_clients, n_per_client=args.n_per_client,
        n_target=args.n_target, hidden_sizes=hidden, cycle_weight=args.cycle_weight, batch_size=args.batch_size,
        conjugate_step=args.conjugate_step,
        local_lr=args.local_lr,
        omega_step=args.omega_step, fedmm_steps=args.fedmm_steps,
        theta_steps=args.theta_steps, theta_lr=args.theta_lr, fedadam_lrs=args.fedadam_lrs,
        extend_grid=args.extend_grid,
        identity_steps=args.identity_steps, evaluate_every=args.evaluate_every, n_eval=args.n_eval,
        benchmark_seed=args.benchmark_seed, benchmark=args.benchmark,
    )
    log = make_log(args)
    log(summary["table"])
    for d, r in summary["dimensions"].items():
        tried = {name: ", ".join(f"{v:g}" for v in t["grid"]) for name, t in r["tuning"].items()}
        log(f"d={d}: FedMM-OT gamma {r['fedmm_step']:g} won the grid [{tried['FedMMOT']}]; "
            f"FedAdam server lr {r['fedadam_lr']:g} won the grid [{tried['FedAdam']}]")
    files = ["ot_summary.txt", "ot_summary.json", "ot_histories.json"] + (["ot_curves.png"] if args.plot else [])
    log(f"wrote {', '.join(os.path.join(args.out, f) for f in files)}")
    return 0
