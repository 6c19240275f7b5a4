# SPDX-License-Identifier: BSD-3-Clause
"""What a run costs before its first round: building 10,000 clients.

A researcher's simulation of tens of thousands of clients pays the set-up of
every client at each ``FedMM.run`` call: its data checked, its Philox key
derived from the run seed, its objects built.  With FedEM Fig. 1's mixture
(100 samples per client, 2-D), a round of 7,500 active clients takes about
14 ms on one thread, so a per-client set-up of 50 µs (this project's machine,
before ``build`` derived the keys at once) is half a second, over 30 rounds.

``test_build``: ``FedMM.build`` (every check, the model's global moments, the
server, the clients with their keys derived at once) against the reference, the
same clients built one at a time through ``FedMM.build_client`` (each checks its
data and derives its own ``SeedSequence``; what ``build`` did per client before,
and what a remote worker does for its one client), alternated call by call.  The
keys are checked equal.

``extra_info["reference_ratio"]`` is fedmm's median time over the reference's
(lower is better), ``per_client_us`` fedmm's median per client.

Run: ``python -m pytest benchmarks/bench_setup.py --benchmark-only``
"""
import time

import numpy as np
import pytest

from fedmm.algorithms import FedMM
from fedmm.compression import BlockQuantizer
from fedmm.models import GaussianMixture

from _timing import record_ratio

N_CLIENTS, PER_CLIENT, REPEATS = 10_000, 100, 7


@pytest.fixture(scope="module")
def fig1():
    """FedEM Fig. 1's two 2-D Gaussians (weights 0.3/0.7, one known covariance), 100 samples per client."""
    rng = np.random.default_rng(0)
    cov = np.array([[1.0, 0.4], [0.4, 0.8]])
    labels = rng.choice(2, size=N_CLIENTS * PER_CLIENT, p=[0.3, 0.7])
    Y = np.array([[-1.0, 1.0], [1.5, -0.5]])[labels] + rng.standard_normal((labels.size, 2)) @ np.linalg.cholesky(cov).T
    return [np.ascontiguousarray(part) for part in np.array_split(Y, N_CLIENTS)], cov


def _alternate(ours, reference):
    """Median seconds of each over ``REPEATS`` alternated calls (after one untimed call of each)."""
    ours(), reference()
    t_ours, t_ref = [], []
    for _ in range(REPEATS):
        for f, out in ((ours, t_ours), (reference, t_ref)):
            begin = time.perf_counter()
            f()
            out.append(time.perf_counter() - begin)
    return float(np.median(t_ours)), float(np.median(t_ref))


@pytest.mark.benchmark(group="setup")
def test_build(benchmark, fig1):
    datas, cov = fig1
    model = GaussianMixture(2, known_covariance=cov)
    algo = FedMM(model, control_variate_step=1e-2, step=1e-2, batch_size=20, compressor=BlockQuantizer(block_size=4),
                 participation_prob=0.75, backend="compiled")
    init = model.init_statistic(datas, np.random.default_rng(0))

    def build():
        return algo.build(datas, seed=0, init=init)

    def one_at_a_time():
        return [algo.build_client(i, d, n_clients=N_CLIENTS, seed=0) for i, d in enumerate(datas)]

    _, clients = build()
    reference = one_at_a_time()
    assert all(np.array_equal(a.stream.key, b.stream.key) for a, b in zip(clients, reference))
    ours, ref = _alternate(build, one_at_a_time)
    benchmark.pedantic(build, rounds=1, iterations=1)
    record_ratio(benchmark, ours / ref)
    benchmark.extra_info["per_client_us"] = ours / N_CLIENTS * 1e6
    benchmark.extra_info["reference_per_client_us"] = ref / N_CLIENTS * 1e6

