# SPDX-License-Identifier: BSD-3-Clause
"""Where FedMM-OT's advantage over FedAdam comes from: an ablation of the FedMM paper's Figure 3.

``fedmm experiment ot-ablation`` runs, on the same known-map benchmark, client
split, public target samples and warm start as ``fedmm experiment ot``
(:func:`fedmm.data.icnn_map_benchmark` by default, d = 16, 32, 64; ``--benchmark hard`` for
:func:`fedmm.data.clustered_map_benchmark`, ``--benchmark easy`` for
:func:`fedmm.data.known_map_benchmark`), one ingredient at a time:

``alg3``
    FedMM-OT as Algorithm 3 is written: the server's step on ``ω`` is
    ``ω + γ H`` (``omega_step="sgd"``), ``--few-theta-steps`` (10) Adam steps on ``θ`` per round;
``adam-omega``
    the same with the server's step on ``ω`` along Adam's direction of ``H``
    (``omega_step="adam"``): with one local step, the step on ``ω`` that FedAdam takes;
``adam-omega-theta``
    and with ``--theta-steps`` (30) Adam steps on ``θ`` per round (``fedmm experiment ot``'s setting);
``fedadam``
    FedAdam (one Adam step on the averaged ``(ω, θ)`` update);
``fedadam-theta``
    FedAdam whose server also takes ``--theta-steps`` Adam steps on ``θ`` per round, as FedMM-OT's
    (:class:`fedmm.algorithms.FedAdam` ``theta_steps``): the same server-side ``θ`` budget;
``central``
    the same ICNN pair trained centrally with the same number of gradient
    evaluations: one client holding all clients' data, ``n`` iterations per
    round (one ``ω``-gradient on a minibatch of ``--batch-size``, then
    ``--theta-steps / n`` Adam steps on ``θ``), i.e. ``n`` ``ω``-gradients and
    ``--theta-steps`` ``θ``-gradients per round, as ``adam-omega-theta`` -- but
    sequential, on i.i.d. minibatches of the pooled data: the limit a federated
    method can approach.

Every arm but ``central`` has ``n = --clients`` k-means clients, all active,
one local gradient step per round (``--local-lr``), minibatches of
``--batch-size`` source and target samples.  Each arm's step is tuned on the
first seed over its own grid (``--sgd-steps`` for ``alg3``, ``--fedmm-steps``
for the two other FedMM-OT arms, ``--fedadam-lrs`` for both FedAdam arms,
``--central-steps``), with the score of ``fedmm experiment ot`` (the mean
L2-UVP over the last tenth of the evaluations); the winner's run is the first
seed's final run.  ``θ``-steps use Adam with learning rate ``--theta-lr`` in
every arm that takes them.

Outputs in ``--out``: ``ot_ablation_histories.json`` (a :class:`fedmm.RunSet`
of every run, tuning runs included, named ``"d=<d>/<arm>(step=<v>)/seed=<s>"``
and ``"d=<d>/<arm>/seed=<s>"``), ``ot_ablation_summary.txt`` / ``.json`` (per
arm: the tuned step, the final and the best L2-UVP, mean over seeds; the linear
and best affine maps' L2-UVP as reference rows) and ``ot_ablation.png``.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from fedmm._validation import check_in, check_int, check_real
from fedmm.data.ot import KNOWN_MAP_BENCHMARKS, client_datasets
from fedmm.experiments._common import (
    ExperimentError,
    add_common_options,
    add_deprecated_alias,
    make_log,
    nonneg_int,
    positive_float,
    positive_float_list,
    positive_int,
    positive_int_list,
    require_ot_extra,
    resolve_progress,
    run_tasks,
    tidy_log_axis,
    tune_on_grid,
    write_summary,
)
from fedmm.experiments.ot import check_icnn_pair
from fedmm.history import History, RunSet

__all__ = ["ARMS", "OTAblationConfig", "run_ot_ablation", "plot_ot_ablation", "add_ot_ablation_parser"]

#: The arms, in the order of the table, with their labels.
ARMS: dict[str, str] = {
    "alg3": "FedMM-OT, Algorithm 3 as written (SGD step on ω, few θ-steps)",
    "adam-omega": "FedMM-OT, Adam step on ω, few θ-steps",
    "adam-omega-theta": "FedMM-OT, Adam step on ω, many θ-steps",
    "fedadam": "FedAdam",
    "fedadam-theta": "FedAdam + many server θ-steps",
    "central": "centralized, same gradient evaluations",
}
#: Which grid of :class:`OTAblationConfig` tunes each arm's step.
_GRIDS = {"alg3": "sgd_steps", "adam-omega": "fedmm_steps", "adam-omega-theta": "fedmm_steps",
          "fedadam": "fedadam_lrs", "fedadam-theta": "fedadam_lrs", "central": "central_steps"}


@dataclasses.dataclass
class OTAblationConfig:
    """Settings of ``fedmm experiment ot-ablation`` (defaults: ``fedmm experiment ot``'s at d = 16).

    Attributes
    ----------
    seeds, first_seed : int
        Seeds ``first_seed .. first_seed + seeds − 1`` (initial potentials, minibatches); the first tunes.
    rounds : int
        Communication rounds per run (the centralized arm: ``rounds × n_clients`` iterations).
    dims : tuple of int
        Dimensions ``d``.
    benchmark : {'hard', 'easy', 'icnn'}
        :data:`fedmm.data.KNOWN_MAP_BENCHMARKS`.
    n_clients, n_per_client, n_target : int
        k-means clients, samples of ``P`` per client, public samples of ``Q``.
    hidden_sizes : tuple of int or None
        Both ICNNs' hidden sizes (None: Korotin et al.'s MMv2 sizes per ``d``).
    batch_size : int
        Source and target samples per gradient step (clients and server).
    local_lr : float
        The clients' gradient step ``η``.
    few_theta_steps, theta_steps : int
        ``θ``-steps per round of ``alg3``/``adam-omega`` and of ``adam-omega-theta``/``fedadam-theta``
        (``theta_steps`` a multiple of ``n_clients``: ``central`` takes ``theta_steps / n_clients`` per iteration).
    theta_lr : float
        Adam's learning rate on ``θ`` in every arm that takes ``θ``-steps.
    sgd_steps, fedmm_steps, fedadam_lrs, central_steps : tuple of float
        Grids of the tuned steps (see the module docstring).
    extend_grid : int
        Extensions of a grid past its edge when the best value lies there.
    identity_steps, evaluate_every, n_eval, benchmark_seed : int
        As ``fedmm experiment ot``.
    arms : tuple of str
        The arms to run (default: all of :data:`ARMS`).
    jobs : int
        Worker processes (one task per dimension and arm).
    """

    seeds: int = 2
    first_seed: int = 0
    rounds: int = 1000
    dims: tuple[int, ...] = (16,)
    benchmark: str = "icnn"
    n_clients: int = 10
    n_per_client: int = 500
    n_target: int = 5000
    hidden_sizes: tuple[int, ...] | None = None
    batch_size: int = 128
    local_lr: float = 0.003
    few_theta_steps: int = 10
    theta_steps: int = 30
    theta_lr: float = 1e-3
    sgd_steps: tuple[float, ...] = (0.3, 1.0)
    fedmm_steps: tuple[float, ...] = (3e-3, 9e-3)
    fedadam_lrs: tuple[float, ...] = (3e-3, 9e-3)
    central_steps: tuple[float, ...] = (1e-3, 3e-3)
    extend_grid: int = 0
    identity_steps: int = 300
    evaluate_every: int = 10
    n_eval: int = 4096
    benchmark_seed: int = 0
    arms: tuple[str, ...] = tuple(ARMS)
    jobs: int = 1

    def validated(self) -> "OTAblationConfig":
        """A checked copy; a bad value raises :class:`ExperimentError` naming the option."""
        c = dataclasses.replace(self)

        def checked(name: str, check: Callable[[], Any]) -> Any:
            try:
                return check()
            except (TypeError, ValueError) as exc:
                raise ExperimentError(str(exc), option="--" + name.replace("_", "-")) from None

        for name in ("seeds", "rounds", "n_clients", "n_per_client", "n_target", "batch_size", "few_theta_steps",
                     "theta_steps", "evaluate_every", "jobs"):
            setattr(c, name, checked(name, lambda n=name: check_int(getattr(c, n), n, low=1)))
        for name in ("first_seed", "extend_grid", "identity_steps", "benchmark_seed"):
            setattr(c, name, checked(name, lambda n=name: check_int(getattr(c, n), n, low=0)))
        c.n_eval = checked("n_eval", lambda: check_int(c.n_eval, "n_eval", low=2))
        c.benchmark = checked("benchmark", lambda: check_in(c.benchmark, "benchmark", tuple(KNOWN_MAP_BENCHMARKS)))
        for name in ("local_lr", "theta_lr"):
            setattr(c, name, checked(name, lambda n=name: check_real(getattr(c, n), n, low=0.0, low_open=True)))
        c.dims = tuple(checked("dims", lambda v=v: check_int(v, "dims entry", low=1)) for v in c.dims)
        if not c.dims:
            raise ExperimentError("expected at least one dimension", option="--dims")
        check_icnn_pair(c.benchmark, c.dims, c.benchmark_seed)
        if c.hidden_sizes is not None:
            c.hidden_sizes = tuple(checked("hidden_sizes", lambda v=v: check_int(v, "hidden_sizes entry", low=1))
                                   for v in c.hidden_sizes)
        for name in set(_GRIDS.values()):
            values = tuple(checked(name, lambda v=v, n=name: check_real(v, f"{n} entry", low=0.0, low_open=True))
                           for v in getattr(c, name))
            if not values:
                raise ExperimentError("expected at least one value", option="--" + name.replace("_", "-"))
            setattr(c, name, values)
        c.sgd_steps = tuple(checked("sgd_steps", lambda v=v: check_real(v, "sgd_steps entry (Algorithm 3's step)",
                                                                        low=0.0, high=1.0, low_open=True))
                            for v in c.sgd_steps)
        c.arms = tuple(dict.fromkeys(checked("arms", lambda a=a: check_in(a, "arms entry", tuple(ARMS)))
                                     for a in c.arms))
        if not c.arms:
            raise ExperimentError(f"expected at least one arm of {', '.join(ARMS)}", option="--arms")
        if "central" in c.arms and c.theta_steps % c.n_clients:
            raise ExperimentError(f"expected a multiple of --clients = {c.n_clients} (the centralized arm takes "
                                  f"theta-steps / clients θ-steps per iteration), got {c.theta_steps}",
                                  option="--theta-steps")
        return c


# --------------------------------------------------------------------------- runs
def _setting(d: int, c: OTAblationConfig) -> dict:
    """Benchmark, client split, target samples, evaluator and reference maps of dimension ``d``."""
    bench = KNOWN_MAP_BENCHMARKS[c.benchmark](d, seed=c.benchmark_seed)
    datas = client_datasets(bench, c.n_clients, c.n_per_client, seed=[c.benchmark_seed, 1])
    target = bench.sample_target(c.n_target, seed=[c.benchmark_seed, 2])
    evaluator = bench.l2_uvp_evaluator(n_eval=c.n_eval, seed=[c.benchmark_seed, 3])
    references = {name: evaluator(m) for name, m in bench.reference_maps(seed=[c.benchmark_seed, 4]).items()}
    return {"datas": datas, "target": target, "evaluator": evaluator,
            "references": {k: {"l2_uvp": v.value, "stderr": v.stderr} for k, v in references.items()}}


def _algorithm(arm: str, step: float, problem: Any, c: OTAblationConfig) -> tuple[Any, int]:
    """The arm's algorithm at its step, and the number of its iterations per round."""
    from fedmm.algorithms import FedAdam, FedMMOT  # needs the 'ot' extra (jax, optax)

    n = c.n_clients
    common = {"batch_size": c.batch_size, "local_lr": c.local_lr}
    fed = {"weights": [1.0 / n] * n, **common}
    if arm == "alg3":
        return FedMMOT(problem, omega_step="sgd", step=step, theta_steps=c.few_theta_steps,
                       theta_lr=c.theta_lr, **fed), 1
    if arm in ("adam-omega", "adam-omega-theta"):
        steps = c.few_theta_steps if arm == "adam-omega" else c.theta_steps
        return FedMMOT(problem, omega_step="adam", step=step, theta_steps=steps, theta_lr=c.theta_lr, **fed), 1
    if arm in ("fedadam", "fedadam-theta"):
        extra = c.theta_steps if arm == "fedadam-theta" else 0
        return FedAdam(problem, server_lr=step, theta_steps=extra, theta_lr=c.theta_lr, **fed), 1
    return FedMMOT(problem, omega_step="adam", step=step, theta_steps=c.theta_steps // n,
                   theta_lr=c.theta_lr, **common), n


def _run(algo: Any, per_round: int, datas: list, target: np.ndarray, init: Any, seed: int, c: OTAblationConfig,
         evaluator: Callable, tick: Callable[[int], None]) -> tuple[dict | None, list[float], str | None]:
    """One run of ``c.rounds`` rounds (``per_round`` iterations each); the L2-UVP curve at rounds
    0, ``evaluate_every``, ..., and the last; on divergence the curve so far, then ``inf``."""
    values: list[float] = []
    every = c.evaluate_every * per_round
    n_iter = c.rounds * per_round
    expected = 1 + len([t for t in range(1, c.rounds + 1) if t % c.evaluate_every == 0 or t == c.rounds])
    done = [0]

    def evaluate(m: Any) -> dict[str, float]:
        est = evaluator(m)
        values.append(est.value)
        return {"l2_uvp": est.value, "l2_uvp_stderr": est.stderr}

    def callback(t: int, state: Any) -> None:
        done[0] += 1
        if done[0] % per_round == 0:
            tick(1)

    try:
        h = algo.run(datas, n_iter, target=target, seed=seed, init=init, evaluate=evaluate, evaluate_every=every,
                     callback=callback)
    except (ValueError, FloatingPointError) as exc:  # a diverging run: the state became non-finite
        tick(c.rounds - done[0] // per_round)
        return None, values + [float("inf")] * (expected - len(values)), \
            f"diverged after {done[0]} iteration(s): {str(exc)[:200]}"
    return h.to_dict(), values, None


def _score(curve: Sequence[float]) -> float:
    """Mean L2-UVP over the last tenth of the evaluations (``fedmm experiment ot``'s tuning score)."""
    tail = np.asarray(curve[-max(1, len(curve) // 10):], dtype=np.float64)
    return float(tail.mean()) if tail.size and np.isfinite(tail).all() else float("inf")


def _arm_task(task: dict, tick: Callable[[int], None]) -> dict:
    """One arm at one dimension: its grid on the first seed, then the other seeds at the tuned step."""
    from fedmm.models import TransportProblem

    c, d, arm = task["config"], task["dim"], task["arm"]
    started = time.perf_counter()
    s = _setting(d, c)
    problem = TransportProblem(d, hidden_sizes=None if c.hidden_sizes is None else list(c.hidden_sizes),
                               batch_size=c.batch_size)
    seeds = list(range(c.first_seed, c.first_seed + c.seeds))
    inits = {seed: problem.init(seed, identity_steps=c.identity_steps) for seed in seeds}
    pooled = [np.vstack(s["datas"])]

    def run(step: float, seed: int) -> tuple:
        algo, per_round = _algorithm(arm, step, problem, c)
        datas = pooled if arm == "central" else s["datas"]
        return _run(algo, per_round, datas, s["target"], inits[seed], seed, c, s["evaluator"], tick)

    tried: dict[float, tuple] = {}
    warnings: list[str] = []

    def score(values: list[float]) -> list[float]:
        out = []
        for value in values:
            if arm == "alg3" and value > 1.0:  # a grid extension past Algorithm 3's largest step, γ = 1
                out.append(float("inf"))
                continue
            tried[value] = run(value, seeds[0])
            out.append(_score(tried[value][1]))
        return out

    grid = _GRIDS[arm]
    tuned = tune_on_grid(score, getattr(c, grid), extend=c.extend_grid, name=f"{arm} step (d={d})",
                         option="--" + grid.replace("_", "-"), warn=warnings.append)
    best = tuned["best"]
    finals = {seeds[0]: tried[best], **{seed: run(best, seed) for seed in seeds[1:]}}
    histories, notes = {}, []
    for value, (h, _, failure) in tried.items():
        if h is not None:
            histories[f"d={d}/{arm}(step={value:g})/seed={seeds[0]}"] = h
        if failure:
            notes.append(f"d={d} {arm} step={value:g} seed={seeds[0]}: {failure}")
    for seed, (h, _, failure) in finals.items():
        if h is not None:
            histories[f"d={d}/{arm}/seed={seed}"] = h
        if failure and seed != seeds[0]:
            notes.append(f"d={d} {arm} seed={seed}: {failure}")
    return {"dim": d, "arm": arm, "step": best, "tuning": tuned, "warnings": warnings, "notes": notes,
            "curves": {str(seed): r[1] for seed, r in finals.items()}, "references": s["references"],
            "histories": histories, "hidden_sizes": list(problem.potential.hidden_sizes),
            "elapsed_seconds": time.perf_counter() - started}


def _budget(arm: str, c: OTAblationConfig) -> str:
    """Gradient evaluations per round: ω-gradients (on clients) + θ-steps (on the server)."""
    n = c.n_clients
    theta = {"alg3": c.few_theta_steps, "adam-omega": c.few_theta_steps, "fedadam": 0}.get(arm, c.theta_steps)
    omega = f"{n} (ω,θ)" if arm.startswith("fedadam") else f"{n} ω"
    return f"{omega} + {theta} θ"


def run_ot_ablation(config: OTAblationConfig, out_dir: str | os.PathLike, *, progress: bool | None = None,
                    warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every arm at every dimension over the seeds; write the RunSet JSON, the summary and the PNG.

    Parameters
    ----------
    config : OTAblationConfig
    out_dir : path-like
        Created if missing; receives ``ot_ablation_histories.json``, ``ot_ablation_summary.txt``,
        ``ot_ablation_summary.json`` and ``ot_ablation.png``.
    progress : bool or None
        Progress bar on standard error; None (default) only when it is a terminal.
    warn : callable(str), optional
        Receives warnings (a tuned step at the edge of its grid, diverged runs).

    Returns
    -------
    dict
        The content of ``ot_ablation_summary.json`` plus ``"summary"`` (the printed table) and ``"files"``.
    """
    c = config.validated()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tasks = [{"config": c, "dim": d, "arm": arm} for d in sorted(c.dims, reverse=True) for arm in c.arms]
    n_runs = sum(len(getattr(c, _GRIDS[arm])) + c.seeds - 1 for arm in c.arms) * len(c.dims)
    results = run_tasks(_arm_task, tasks, jobs=min(c.jobs, len(tasks)), total=n_runs * c.rounds,
                        desc="ot ablation: rounds", progress=progress)
    by_key = {(r["dim"], r["arm"]): r for r in results}
    for r in results:
        for text in r["warnings"] + r["notes"]:
            if warn is not None:
                warn(text)
    histories = {name: History.from_dict(h) for r in results for name, h in r["histories"].items()}
    json_path = out / "ot_ablation_histories.json"
    jsonable = {**dataclasses.asdict(c), "dims": list(c.dims), "arms": list(c.arms)}
    RunSet(histories, metadata={"experiment": "ot-ablation", "config": jsonable}).save(json_path)

    rounds = [0] + [t for t in range(1, c.rounds + 1) if t % c.evaluate_every == 0 or t == c.rounds]
    headers = ["d", "arm", "what", "gradients per round", "tuned step", f"final L2-UVP % (round {c.rounds})",
               "best L2-UVP % (min over rounds)", "seeds"]
    rows, dims = [], {}
    for d in c.dims:
        entry = dims[str(d)] = {"rounds": rounds, "arms": {}}
        for arm in c.arms:
            r = by_key[(d, arm)]
            curves = np.array(list(r["curves"].values()), dtype=np.float64)
            finals = curves[:, -1]
            bests = np.array([np.min(np.where(np.isfinite(cv), cv, np.inf)) for cv in curves])
            entry["arms"][arm] = {"step": r["step"], "tuning": r["tuning"], "curves": r["curves"],
                                  "final_mean": float(finals.mean()), "best_mean": float(bests.mean()),
                                  "elapsed_seconds": r["elapsed_seconds"]}
            rows.append([d, arm, ARMS[arm], _budget(arm, c), f"{r['step']:g}",
                         f"{finals.mean():.3g} ({', '.join(f'{v:.3g}' for v in finals)})",
                         f"{bests.mean():.3g}", len(finals)])
        refs = by_key[(d, c.arms[0])]["references"]
        entry["references"] = refs
        for name in ("linear", "best affine", "identity"):
            rows.append([d, f"{name} map", "reference", "-", "-",
                         f"{refs[name]['l2_uvp']:.3g} ± {refs[name]['stderr']:.2g} (s.e.)", "-", "-"])
    notes = (f"{c.benchmark} benchmark (seed {c.benchmark_seed}), {c.n_clients} k-means clients x "
             f"{c.n_per_client} samples, {c.n_target} target samples, batch {c.batch_size}, local lr {c.local_lr:g}, "
             f"few/many theta-steps = {c.few_theta_steps}/{c.theta_steps} (Adam lr {c.theta_lr:g}); each arm's step "
             f"tuned on seed {c.first_seed} over its grid (sgd {list(c.sgd_steps)}, fedmm {list(c.fedmm_steps)}, "
             f"fedadam {list(c.fedadam_lrs)}, central {list(c.central_steps)}; extended up to {c.extend_grid} "
             f"time(s)), score = mean L2-UVP over the last tenth of the evaluations; final = mean over seeds "
             f"(each seed in brackets), best = mean over seeds of each curve's minimum; L2-UVP on {c.n_eval} fixed "
             f"points of P every {c.evaluate_every} rounds; total {time.perf_counter() - started:.0f} s.")
    summary = {"experiment": "ot-ablation", "config": jsonable, "dimensions": dims,
               "elapsed_seconds": time.perf_counter() - started}
    text, summary_files = write_summary(out, "ot_ablation", headers, rows, notes=notes, extra=summary)
    png = out / "ot_ablation.png"
    plot_ot_ablation(summary, png)
    return {**summary, "summary": text, "files": [str(p) for p in (json_path, *summary_files, png)]}


def plot_ot_ablation(summary: dict, path: str | os.PathLike) -> None:
    """One panel per dimension: each arm's L2-UVP against rounds (mean over seeds, min–max band), references."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = summary["config"]
    dims = summary["dimensions"]
    fig, axes = plt.subplots(1, len(dims), figsize=(max(11.0, 5.5 * len(dims)), 6.4), squeeze=False)
    styles = {"alg3": ("C0", ":"), "adam-omega": ("C0", "--"), "adam-omega-theta": ("C0", "-"),
              "fedadam": ("C1", "--"), "fedadam-theta": ("C1", "-"), "central": ("k", "-")}
    handles: dict[str, Any] = {}
    for ax, (d, entry) in zip(axes[0], dims.items()):
        x = np.asarray(entry["rounds"], dtype=np.float64)
        top = 2.0 * entry["references"]["identity"]["l2_uvp"]
        for arm, a in entry["arms"].items():
            curves = np.array([np.asarray(v, dtype=np.float64) for v in a["curves"].values()])
            curves = np.where(np.isfinite(curves) & (curves <= top), curves, np.nan)  # diverged: off the scale
            color, style = styles[arm]
            with np.errstate(all="ignore"):
                mean, low, high = np.nanmean(curves, 0), np.nanmin(curves, 0), np.nanmax(curves, 0)
            line, = ax.plot(x, mean, color=color, ls=style, lw=1.5,
                            label=f"{arm} (step {a['step']:.3g}): {ARMS[arm]}")
            if curves.shape[0] > 1:
                ax.fill_between(x, low, high, color=color, alpha=0.12, lw=0)
            handles[arm] = line
        for ref, style in (("linear", "-."), ("best affine", (0, (1, 3)))):
            handles[ref] = ax.axhline(entry["references"][ref]["l2_uvp"], color="0.45", ls=style, lw=1.1,
                                      label=f"{ref} map")
        ax.set_yscale("log")
        tidy_log_axis(ax)
        ax.set_title(f"d = {d}", fontsize=10)
        ax.set_xlabel("communication rounds")
        ax.set_ylabel("L2-UVP (% of Var(Q) unexplained)")
        ax.grid(True, which="both", alpha=0.3)
    n_seeds = cfg["seeds"]
    band = f"mean over {n_seeds} seeds, band = min–max" if n_seeds > 1 else "one seed"
    fig.legend(list(handles.values()), [h.get_label() for h in handles.values()], loc="lower center", ncol=2,
               frameon=False, fontsize=8)
    fig.suptitle(f"FedMM-OT ablation on the {cfg['benchmark']} known-map benchmark: L2-UVP against rounds, lower "
                 f"is better\n({cfg['n_clients']} k-means clients; {band})", fontsize=10)
    fig.tight_layout(rect=(0, 0.17, 1, 0.94))
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------- command line
def _arm_list(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [t for t in names if t not in ARMS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected arms among {', '.join(ARMS)}, got {text!r}")
    return names


_arm_list.comma_list = True  # type: ignore[attr-defined]  # a TOML list is joined with commas (apply_config)


def add_ot_ablation_parser(subparsers: Any) -> None:
    """Register ``fedmm experiment ot-ablation``."""
    d = OTAblationConfig()
    text = ("Ablation of FedMM paper Fig. 3: Algorithm 3 as written, + Adam on omega, + more theta-steps, FedAdam, "
            "FedAdam with the same theta-steps, centralized training (needs fedmm[ot])")
    parser = subparsers.add_parser("ot-ablation", help=text, description=text + ". Options given here override "
                                   "the --config file, which overrides the defaults.")
    add_common_options(parser, name="ot-ablation", seeds=d.seeds, rounds=d.rounds,
                       rounds_help="communication rounds per run (centralized: rounds x clients iterations)")

    def opt(flag: str, dest: str, kind: Callable, metavar: str, help_text: str) -> None:
        default = getattr(d, dest)
        shown = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in default) \
            if isinstance(default, tuple) else default
        parser.add_argument(flag, dest=dest, type=kind, default=default, metavar=metavar,
                            help=f"{help_text} (default: {shown})")

    opt("--dims", "dims", positive_int_list, "D,...", "dimensions d, comma-separated")
    parser.add_argument("--benchmark", choices=list(KNOWN_MAP_BENCHMARKS), default=d.benchmark,
                        help="known-map benchmark: 'icnn' = fedmm.data.icnn_map_benchmark (d = 16, 32, 64, "
                             "benchmark seed 0), 'hard' = fedmm.data.clustered_map_benchmark, 'easy' = "
                             "fedmm.data.known_map_benchmark (default: %(default)s)")
    opt("--arms", "arms", _arm_list, "ARM,...", "arms to run, comma-separated")
    opt("--clients", "n_clients", positive_int, "N", "number of k-means clients n")
    opt("--per-client", "n_per_client", positive_int, "N", "samples of P per client")
    opt("--n-target", "n_target", positive_int, "N", "public samples of Q")
    parser.add_argument("--hidden-sizes", dest="hidden_sizes", type=positive_int_list, default=None, metavar="H,...",
                        help="hidden sizes of both ICNNs, comma-separated (default: Korotin et al.'s MMv2 sizes "
                             "[max(2d,64), max(2d,64), max(d,32)])")
    opt("--batch-size", "batch_size", positive_int, "B", "source and target samples per gradient step")
    opt("--local-lr", "local_lr", positive_float, "LR", "clients' gradient step (every arm)")
    opt("--few-theta-steps", "few_theta_steps", positive_int, "N", "theta-steps per round of alg3 and adam-omega "
        "(the paper's 10)")
    opt("--theta-steps", "theta_steps", positive_int, "N", "theta-steps per round of adam-omega-theta, "
        "fedadam-theta and (spread over its iterations) central; a multiple of --clients")
    opt("--theta-lr", "theta_lr", positive_float, "LR", "Adam learning rate of the theta-steps")
    opt("--sgd-steps", "sgd_steps", positive_float_list, "GAMMA,...", "alg3: server steps gamma tried, in (0, 1]")
    opt("--fedmm-steps", "fedmm_steps", positive_float_list, "GAMMA,...", "adam-omega(-theta): server Adam "
        "steps gamma on omega tried")
    opt("--fedadam-lrs", "fedadam_lrs", positive_float_list, "LR,...", "fedadam(-theta): server Adam learning "
        "rates tried")
    opt("--central-steps", "central_steps", positive_float_list, "GAMMA,...", "central: Adam steps on omega tried")
    opt("--extend-grid", "extend_grid", nonneg_int, "N", "extend each grid past its edge up to N times when the "
        "best value lies there")
    opt("--identity-steps", "identity_steps", nonneg_int, "N", "warm start: Adam steps fitting grad f = identity")
    opt("--evaluate-every", "evaluate_every", positive_int, "N", "evaluate L2-UVP every N rounds (and the last)")
    add_deprecated_alias(parser, "--eval-every", dest="evaluate_every", replacement="--evaluate-every",
                         type=positive_int)
    opt("--n-eval", "n_eval", positive_int, "N", "fixed points of P on which L2-UVP is evaluated")
    opt("--benchmark-seed", "benchmark_seed", nonneg_int, "S", "seed of the benchmark, the split and the target")
    parser.set_defaults(func=_command)


_OPTION_KEYS = tuple(f.name for f in dataclasses.fields(OTAblationConfig))


def _command(args: Any) -> int:
    require_ot_extra("fedmm experiment ot-ablation")
    values = {key: getattr(args, key) for key in _OPTION_KEYS if hasattr(args, key)}
    for key in ("dims", "sgd_steps", "fedmm_steps", "fedadam_lrs", "central_steps", "arms", "hidden_sizes"):
        if values.get(key) is not None:
            values[key] = tuple(values[key])
    config = OTAblationConfig(**values)
    log = make_log(args)
    result = run_ot_ablation(config, args.out, progress=resolve_progress(args),
                             warn=lambda text: print(f"fedmm experiment ot-ablation: warning: {text}",
                                                     file=sys.stderr))
    log(result["summary"])
    log("wrote " + ", ".join(result["files"]))
    return 0
