# SPDX-License-Identifier: BSD-3-Clause
"""Per-round overhead of the distributed runtimes against the in-process runtime.

Every client runs a Gaussian-mixture EM step (FedEM, tied covariance, G = 3,
p = 2, 40 samples per client, minibatches of 10, 8-bit stochastic rounding,
α = 0.1, every client active).  The per-round time is the median of the
History's round-to-round ``wall_time`` increments (the round loop only:
selection, broadcast, client steps, transport, aggregation; not Ray start-up
or actor creation), measured for the in-process runtime and for the other
runtime in the same test, so ``extra_info`` holds both and their difference.

- Ray: 2 actors, 20 / 200 / 2,000 clients (one Client.step per client in each actor).
- Flower: the simulation runtime (Ray-backed) with 3 clients.

Run: ``python -m pytest benchmarks/bench_runtimes.py --benchmark-only -s``
(the figures are in ``extra_info``: ``--benchmark-json out.json``).
"""
import os

import numpy as np
import pytest

from fedmm.algorithms import FedMM
from fedmm.compression import StochasticRounding
from fedmm.models import GaussianMixture

from _timing import record_ratio

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Flower's simulation starts Ray itself (not through fedmm.runtime.ray, which sets this too): without it
# Ray 2.5x warns a FutureWarning at ray.init, an error under the suite's filterwarnings = error.
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

N_ROUNDS = 8
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def _clients(n_clients):
    rng = np.random.default_rng(0)
    centers = np.array([[-3.0, 0.0], [0.0, 3.0], [3.0, 0.0]])
    return [centers[rng.integers(3, size=40)] + rng.standard_normal((40, 2)) for _ in range(n_clients)]


def _algorithm():
    return FedMM(GaussianMixture(3, n_features=2), participation_prob=1.0, control_variate_step=0.1, step=0.5,
                 batch_size=10,
                 compressor=StochasticRounding(bits=8))


def _per_round(history):
    return float(np.median(np.diff(np.concatenate([[0.0], history.column("wall_time")]))))


def _record(benchmark, history, reference, n_clients):
    ours, local = _per_round(history), _per_round(reference)
    benchmark.extra_info.update({"n_clients": n_clients, "per_round_s": ours, "in_process_per_round_s": local,
                                 "overhead_per_round_s": ours - local, "ratio": ours / local,
                                 "same_history": history.equals(reference)})
    record_ratio(benchmark, ours / local)
    assert history.equals(reference)


@pytest.fixture(scope="module")
def ray_session():
    pytest.importorskip("ray", reason="the 'ray' extra is not installed")
    from fedmm.runtime.ray import local_ray

    with local_ray(num_cpus=2) as ray:
        yield ray


@pytest.mark.parametrize("n_clients", [20, 200, 2000])
@pytest.mark.benchmark(group="runtime-ray")
def bench_ray_round_overhead(benchmark, ray_session, n_clients):
    from fedmm.runtime.ray import RayRuntime

    datas = _clients(n_clients)
    algo = _algorithm()
    reference = algo.run(datas, N_ROUNDS, seed=1)
    history = benchmark.pedantic(algo.run, args=(datas, N_ROUNDS), kwargs={"seed": 1, "runtime": RayRuntime(2)},
                                 rounds=1, iterations=1)
    _record(benchmark, history, reference, n_clients)


@pytest.mark.benchmark(group="runtime-flower")
def bench_flower_simulation_round_overhead(benchmark):
    pytest.importorskip("flwr", reason="the 'flower' extra is not installed")
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    import fedmm.runtime.flower as ff

    datas = _clients(3)
    algo = _algorithm()
    reference = algo.run(datas, N_ROUNDS, seed=1)
    out = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid, context):
        out["history"] = ff.FedMMStrategy(algo, 3, seed=1, init_datas=datas).run(grid, N_ROUNDS, timeout=120.0)

    backend = {"init_args": {"num_cpus": 2, "_node_ip_address": "127.0.0.1", "log_to_driver": False},
               "client_resources": {"num_cpus": 1}}

    def simulate():
        run_simulation(server_app, ff.client_app(algo, lambda pid, context: datas[pid]), 3, backend_config=backend)
        return out["history"]

    history = benchmark.pedantic(simulate, rounds=1, iterations=1)
    _record(benchmark, history, reference, 3)
