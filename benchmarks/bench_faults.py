# SPDX-License-Identifier: BSD-3-Clause
"""Fault injection: FedMM keeps running, and consistent, while client rounds fail (issue 15).

FedMM on a Gaussian mixture (G = 3, p = 2, 20 clients of 40 samples, every client active, minibatches of
10, 8-bit stochastic rounding, α = 0.1, control variates from the oracle).  A seeded plan
(``tests/fault_injection.py``) makes client rounds fail:

- ``raise``: the client's step raises;
- ``nan``: its payload decodes to NaN (a well-formed Identity payload holding NaN);
- ``truncate``: its payload is cut by 3 bytes;
- ``sleep`` (Ray only): the client sleeps past the round's ``timeout``; in process there is no
  timeout (the round would wait for it), so it is not injected there;
- ``exit`` (Ray only): ``os._exit`` in the actor's process (the actor dies and is replaced); in process
  it would end the run's own process.

Each of raise/nan/truncate hits 10 % of the client rounds; sleep and exit, which cost seconds each
(the timeout, an actor restart), hit a few client rounds.  After every round the check is
``V = Σ_i μ_i V_i`` over the driver's clients (relative gap ≤ 1e-12) and finite ``Ŝ``, ``θ``;
the report gives the rounds completed, the clients dropped per cause (from the records'
``drop_reasons``), the invariant's largest gap and the wall time.

Run the full version (200 rounds): ``python benchmarks/bench_faults.py`` (``--rounds``, ``--no-ray``).
Under pytest (``python -m pytest benchmarks/bench_faults.py``) a short version runs.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests"))  # fault_injection (also done by conftest.py)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from fault_injection import CAUSES, FaultyClient, check_invariants, fault_plan, invariant_gap  # noqa: E402

from fedmm.algorithms import FedMM  # noqa: E402
from fedmm.compression import StochasticRounding  # noqa: E402
from fedmm.federation import LocalRuntime  # noqa: E402
from fedmm.history import History  # noqa: E402
from fedmm.models import GaussianMixture  # noqa: E402

N_CLIENTS = 20
RATE_PER_CAUSE = 0.10
CHEAP = ("raise", "nan", "truncate")

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def datas(n_clients=N_CLIENTS, seed=0):
    rng = np.random.default_rng(seed)
    centers = np.array([[-3.0, 0.0], [0.0, 3.0], [3.0, 0.0]])
    return [centers[rng.choice(3, size=40, p=np.roll([0.6, 0.3, 0.1], i))] + rng.standard_normal((40, 2))
            for i in range(n_clients)]


def algorithm():
    return FedMM(GaussianMixture(3, n_features=2), participation_prob=1.0, control_variate_step=0.1, step=0.5,
                 batch_size=10,
                 control_variates="oracle", compressor=StochasticRounding(bits=8))


def cause_of(reason: str) -> str:
    """The fault a ``drop_reasons`` entry reports."""
    for cause, prefix in CAUSES.items():
        if reason.startswith(prefix):
            return cause
    return "other: " + reason.split(":")[0]


def run_with_faults(runtime, plan, n_rounds, *, sleep=2.0, seed=1):
    """``n_rounds`` of FedMM under ``runtime`` with the faults of ``plan``; invariants checked after every round.

    Returns a dict of figures: rounds completed, injected and dropped client rounds per cause, largest
    invariant gap, wall time (seconds, set-up included), and the History.
    """
    server, inner = algorithm().build(datas(), seed=seed)
    clients = [FaultyClient(c, plan, sleep) for c in inner]
    gaps = []

    def check(t):
        check_invariants(server, clients)
        gaps.append(invariant_gap(server, clients))

    start = time.perf_counter()
    history = runtime.run(server, clients, n_rounds, history=History("FedMM"), callback=check)
    wall = time.perf_counter() - start
    dropped = Counter(cause_of(reason) for r in history.records for reason in r.get("drop_reasons", []))
    wrong = [(r["t"], i, reason) for r in history.records for i, reason in zip(r["dropped"], r.get("drop_reasons", []))
             if (r["t"], i) in plan and cause_of(reason) not in (plan[(r["t"], i)], "exit", "sleep")]
    return {"rounds": len(history.records), "injected": Counter(plan.values()), "dropped": dropped,
            "misreported": wrong, "max_gap": max(gaps, default=0.0), "wall_s": wall, "history": history,
            "undropped": [key for key in plan if key[1] not in history.records[key[0]]["dropped"]]}


def in_process(n_rounds, seed=0):
    plan = fault_plan(seed, N_CLIENTS, n_rounds, RATE_PER_CAUSE * len(CHEAP), CHEAP)
    return run_with_faults(LocalRuntime(compiled=False), plan, n_rounds)


def on_ray(n_rounds, seed=0, rare=None, timeout=1.0, sleep=2.0):
    from fedmm.runtime.ray import RayRuntime

    rare = {"sleep": 3, "exit": 3} if rare is None else rare
    plan = fault_plan(seed, N_CLIENTS, n_rounds, RATE_PER_CAUSE * len(CHEAP), CHEAP, rare=rare)
    runtime = RayRuntime(2, timeout=timeout)
    figures = run_with_faults(runtime, plan, n_rounds, sleep=sleep)
    figures["restarts"] = runtime.restarts
    return figures


def report(name, f):
    causes = sorted(set(f["injected"]) | set(f["dropped"]))
    lines = [f"{name}: {f['rounds']} rounds completed in {f['wall_s']:.1f} s (set-up included); "
             f"max relative gap of V - sum mu_i V_i: {f['max_gap']:.2e}; S, theta finite after every round"]
    lines += [f"  {c:<12} injected {f['injected'].get(c, 0):4d}   dropped {f['dropped'].get(c, 0):4d}" for c in causes]
    if "restarts" in f:
        lines.append(f"  actor restarts: {f['restarts']}")
    if f["misreported"] or f["undropped"]:
        lines.append(f"  MISREPORTED {f['misreported'][:5]}  NOT DROPPED {f['undropped'][:5]}")
    return "\n".join(lines)


def _check(f, n_rounds):
    assert f["rounds"] == n_rounds
    assert f["max_gap"] <= 1e-12
    assert not f["misreported"] and not f["undropped"]


# --------------------------------------------------------------------------- pytest (short versions)
@pytest.mark.benchmark(group="faults")
def bench_faults_in_process(benchmark):
    n_rounds = 20
    f = benchmark.pedantic(in_process, args=(n_rounds,), rounds=1, iterations=1)
    _check(f, n_rounds)
    # in process every injected fault is dropped with its own reason, and nothing else is
    assert f["dropped"] == f["injected"]
    benchmark.extra_info.update(rounds=f["rounds"], injected=dict(f["injected"]), dropped=dict(f["dropped"]))


@pytest.mark.integration
@pytest.mark.benchmark(group="faults")
def bench_faults_ray(benchmark):
    pytest.importorskip("ray", reason="the 'ray' extra is not installed")
    from fedmm.runtime.ray import local_ray

    n_rounds = 12
    with local_ray(num_cpus=2):
        f = benchmark.pedantic(on_ray, args=(n_rounds,), kwargs={"rare": {"sleep": 1, "exit": 1}, "timeout": 2.0,
                                                                 "sleep": 3.0}, rounds=1, iterations=1)
    _check(f, n_rounds)
    assert f["restarts"] >= 1 and f["dropped"]["exit"] >= 1 and f["dropped"]["sleep"] >= 1
    benchmark.extra_info.update(rounds=f["rounds"], injected=dict(f["injected"]), dropped=dict(f["dropped"]),
                                restarts=f["restarts"])


# --------------------------------------------------------------------------- script (full version)
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args(argv)
    f = in_process(args.rounds)
    print(report(f"in process (Python backend, {N_CLIENTS} clients)", f), flush=True)
    _check(f, args.rounds)
    if not args.no_ray:
        from fedmm.runtime.ray import local_ray

        with local_ray(num_cpus=2):
            f = on_ray(args.rounds)
        print(report(f"Ray (2 actors, timeout 1.0 s, sleep 2.0 s, {N_CLIENTS} clients)", f), flush=True)
        _check(f, args.rounds)


if __name__ == "__main__":
    main()
