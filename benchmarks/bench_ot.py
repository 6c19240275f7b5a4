# SPDX-License-Identifier: BSD-3-Clause
"""Client-rounds per second of FedMM-OT and FedAdam on the known-map OT benchmark, d = 16 and 64.

Both algorithms run ``N_ROUNDS`` rounds with ``n = 10`` clients (one local
gradient step each per round, minibatches of 128 source and 128 target
points; FedMM-OT adds ten server Adam steps on ``θ`` per round) on dense ICNNs
of Korotin et al.'s MMv2 sizes, in the in-process runtime.  JAX compiles the
loops on their first call and caches them on the ``TransportProblem``; the
first call is timed apart (``extra_info["first_call_seconds"]``,
``extra_info["jit_compile_seconds"]`` = first call − warm median) and the
warm calls are what pytest-benchmark times.  There is no NumPy/SciPy
implementation of ICNN training to time beside it (the gradients of gradients
come from JAX autodiff).  Run::

    python -m pytest benchmarks/bench_ot.py --benchmark-only

``extra_info["client_rounds_per_second"]`` = ``n · N_ROUNDS`` per median second.
"""
import time

import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

from fedmm.algorithms import FedAdam, FedMMOT  # noqa: E402
from fedmm.data import client_datasets, known_map_benchmark  # noqa: E402
from fedmm.models import TransportProblem  # noqa: E402

from _timing import median_seconds, per_second  # noqa: E402

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
    algo.run(datas, N_ROUNDS, **kwargs)  # compiles
    first = time.perf_counter() - started
    benchmark.pedantic(algo.run, args=(datas, N_ROUNDS), kwargs=kwargs, rounds=3, iterations=1)
    median = median_seconds(benchmark)
    benchmark.extra_info["dim"] = d
    benchmark.extra_info["client_rounds"] = N_CLIENTS * N_ROUNDS
    benchmark.extra_info["client_rounds_per_second"] = per_second(N_CLIENTS * N_ROUNDS, benchmark)
    benchmark.extra_info["first_call_seconds"] = first
    benchmark.extra_info["jit_compile_seconds"] = None if median is None else max(0.0, first - median)
