# SPDX-License-Identifier: BSD-3-Clause
"""Client-rounds per second of FedMM-OT and FedAdam on the known-map OT benchmark, d = 16 and 64.

Both algorithms run ``N_ROUNDS`` rounds with ``n = 10`` clients (one local
gradient step each per round, minibatches of 128 source and 128 target
points; FedMM-OT adds its default thirty server Adam steps on ``θ`` per round) on dense ICNNs
of Korotin et al.'s MMv2 sizes, in the in-process runtime.  JAX compiles the
loops on their first call and caches them on the ``TransportProblem``; the
first call is timed apart (``extra_info["first_call_seconds"]``,
``extra_info["jit_compile_seconds"]`` = first call − warm median) and the
warm calls are what pytest-benchmark times.  There is no NumPy/SciPy
implementation of ICNN training to time beside it (the gradients of gradients
come from JAX autodiff).  Run::

    python -m pytest benchmarks/bench_ot.py --benchmark-only

``extra_info["client_rounds_per_second"]`` = ``n · N_ROUNDS`` per median second;
``extra_info["device"]`` the JAX device the run used (platform and device kind, as
``History.config["device"]``).

``test_ot_round_ratio`` times one FedMM-OT round against one FedAdam round at the
classes' defaults, which are the settings of ``fedmm experiment ot`` (d = 16, 10 clients
of 500 samples, minibatches of 128, one local step, FedMM-OT's 30 server θ-steps), the
runs alternated call by call, and records the median of FedMM-OT's round time over
FedAdam's (``reference_ratio``, checked by ``benchmarks/regression.py``).  Beside it:

- ``flop_ratio``: the ratio of the rounds' arithmetic counted by XLA
  (``10 ∇_ω W_i + 30 θ-directions`` against ``10 ∇_{ω,θ} W_i``, one minibatch each);
- ``theta_flop_floor``: the 30 θ-directions alone over FedAdam's round, the ratio FedMM-OT
  would keep if its clients' steps and every overhead cost nothing;
- ``theta_budget_ratio``: FedMM-OT's round over the round of FedAdam given the same 30
  server θ-steps (``FedAdam(theta_steps=30)``, the ablation's arm), timed in the same
  alternation.

Every step of either round is one compiled JAX call (the 30 θ-steps are one ``lax.scan``,
one dispatch per round); the rest of a round (minibatch draws, encoding, aggregation,
NumPy↔JAX conversions) is 4-6% of it (measured by timing the compiled calls inside
``run``, d = 16, one thread).  The extra cost of FedMM-OT's round is its θ budget, not
dispatch: at d = 16 the 30 θ-steps alone take about 1.3-1.5× a whole FedAdam round
(1.8× in XLA's flop count), and the clients' ten ω-gradients add about 0.7× (2.1 ms each
against 2.8 ms for a joint gradient), so the same arithmetic cannot come within 1.5× of
FedAdam's round on a CPU; against FedAdam with the same θ-steps the ratio is below 1.
Writing the θ-direction as explicit VJP/JVP products or unrolling the scan gives the same
flop count and no faster loop.
"""
import time

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

from fedmm.algorithms import FedAdam, FedMMOT  # noqa: E402
from fedmm.data import client_datasets, known_map_benchmark  # noqa: E402
from fedmm.models import TransportProblem  # noqa: E402

from _timing import median_seconds, per_second, record_ratio  # noqa: E402

N_CLIENTS = 10
N_ROUNDS = 5
BATCH = 128


@pytest.fixture(scope="module", params=[16, 64], ids=lambda d: f"d={d}")
def setting(request):
    d = request.param
    bench = known_map_benchmark(d, seed=0)
    datas = client_datasets(bench, N_CLIENTS, 200, seed=1, n_init=1)
    target = bench.sample_target(2000, seed=2)
    init = TransportProblem(d, batch_size=BATCH).init(0, identity_steps=100)
    return d, datas, target, init


@pytest.mark.parametrize("name", ["FedMMOT", "FedAdam"])
@pytest.mark.benchmark(group="ot-client-rounds")
def test_ot_rounds(benchmark, setting, name):
    d, datas, target, init = setting
    problem = TransportProblem(d, batch_size=BATCH)  # fresh: its compiled loops are not cached yet
    weights = [1.0 / N_CLIENTS] * N_CLIENTS
    algo = (FedMMOT(problem, weights=weights, local_lr=0.01) if name == "FedMMOT"
            else FedAdam(problem, weights=weights, local_lr=0.01, server_lr=1e-3))
    kwargs = {"target": target, "seed": 0, "init": init}
    started = time.perf_counter()
    history = algo.run(datas, N_ROUNDS, **kwargs)  # compiles
    first = time.perf_counter() - started
    benchmark.extra_info["device"] = history.config["device"]
    benchmark.pedantic(algo.run, args=(datas, N_ROUNDS), kwargs=kwargs, rounds=3, iterations=1)
    median = median_seconds(benchmark)
    benchmark.extra_info["dim"] = d
    benchmark.extra_info["client_rounds"] = N_CLIENTS * N_ROUNDS
    benchmark.extra_info["client_rounds_per_second"] = per_second(N_CLIENTS * N_ROUNDS, benchmark)
    benchmark.extra_info["first_call_seconds"] = first
    benchmark.extra_info["jit_compile_seconds"] = None if median is None else max(0.0, first - median)


# --------------------------------------------------------------------------- one round, FedMM-OT / FedAdam
#: ``fedmm experiment ot``'s data sizes (python/fedmm/experiments/ot.py DEFAULTS; the algorithms' settings are
#: the classes' defaults, which that command uses).
RATIO_DIM, RATIO_PER_CLIENT, RATIO_TARGET, RATIO_ROUNDS = 16, 500, 5000, 5


def _flops(fn, *args):
    import jax

    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost["flops"])


def _flop_ratios(problem, omega, theta, x, y, theta_steps):
    """XLA's flop count of FedMM-OT's round (10 ω-gradients, ``theta_steps`` θ-directions) over FedAdam's
    (10 joint gradients), and of the θ-directions alone over FedAdam's round."""
    import jax

    from fedmm.models.ot import x64

    with x64():
        grad_omega = _flops(jax.grad(problem.objective, argnums=0), omega, theta, x, y)
        grad_both = _flops(jax.grad(problem.objective, argnums=(0, 1)), omega, theta, x, y)
        direction = _flops(jax.grad(problem.target_terms, argnums=1), omega, theta, y)
    fedadam = N_CLIENTS * grad_both
    return (N_CLIENTS * grad_omega + theta_steps * direction) / fedadam, theta_steps * direction / fedadam


@pytest.mark.benchmark(group="ot-round-ratio")
def test_ot_round_ratio(benchmark):
    """FedMM-OT's round over FedAdam's round, alternated call by call (medians of the rounds' own wall time)."""
    d = RATIO_DIM
    bench = known_map_benchmark(d, seed=0)
    datas = client_datasets(bench, N_CLIENTS, RATIO_PER_CLIENT, seed=1, n_init=1)
    target = bench.sample_target(RATIO_TARGET, seed=2)
    problem = TransportProblem(d)  # the defaults are the experiment's settings (minibatches of 128)
    assert problem.batch_size == BATCH
    init = problem.init(0, identity_steps=100)
    weights = [1.0 / N_CLIENTS] * N_CLIENTS
    algos = {"FedMMOT": FedMMOT(problem, weights=weights), "FedAdam": FedAdam(problem, weights=weights)}
    theta_steps = algos["FedMMOT"].theta_steps
    algos["FedAdam+theta"] = FedAdam(problem, weights=weights, theta_steps=theta_steps)
    kwargs = {"target": target, "seed": 0, "init": init}
    seconds = {name: [] for name in algos}
    last = {}

    def pair():
        for name, algo in algos.items():
            last[name] = algo.run(datas, RATIO_ROUNDS, **kwargs)
            seconds[name].append(last[name].records[-1]["wall_time"] / RATIO_ROUNDS)  # rounds only, per round

    for algo in algos.values():
        algo.run(datas, 1, **kwargs)  # compiles
    benchmark.pedantic(pair, rounds=7, iterations=1, warmup_rounds=1)
    kept = slice(1, None) if len(seconds["FedAdam"]) > 1 else slice(None)  # the warm-up pair is left out
    per_round = {name: float(np.median(v[kept])) for name, v in seconds.items()}
    ratio = float(np.median(np.divide(seconds["FedMMOT"][kept], seconds["FedAdam"][kept])))
    budget_ratio = float(np.median(np.divide(seconds["FedMMOT"][kept], seconds["FedAdam+theta"][kept])))
    rng = np.random.default_rng(0)
    x, y = datas[0][:BATCH], target[rng.choice(target.shape[0], BATCH, replace=False)]
    flop_ratio, theta_floor = _flop_ratios(problem, init[0], init[1], x, y, theta_steps)
    info = {"dim": d, "n_clients": N_CLIENTS, "batch_size": BATCH, "theta_steps": theta_steps,
            "rounds": RATIO_ROUNDS, "device": last["FedMMOT"].config["device"], "round_ratio": ratio,
            "theta_budget_ratio": budget_ratio, "flop_ratio": flop_ratio, "theta_flop_floor": theta_floor}
    for name, sec in per_round.items():
        info[f"{name}_round_seconds"] = sec
        info[f"{name}_client_rounds_per_second"] = N_CLIENTS / sec
    benchmark.extra_info.update(info)
    if benchmark.stats is not None:  # timing on (not --benchmark-disable)
        record_ratio(benchmark, ratio)
    print(f"\nd = {d}: FedMM-OT {per_round['FedMMOT'] * 1e3:.1f} ms/round, FedAdam {per_round['FedAdam'] * 1e3:.1f} "
          f"ms/round, ratio {ratio:.2f} (flop ratio {flop_ratio:.2f}, of which the θ-steps {theta_floor:.2f}); "
          f"FedAdam with {theta_steps} θ-steps {per_round['FedAdam+theta'] * 1e3:.1f} ms/round, "
          f"FedMM-OT / it {budget_ratio:.2f}")
