# SPDX-License-Identifier: BSD-3-Clause
"""FedMLS local steps per second on the breast-cancer SVM (10 k-means clients).

Ours -- ``backend="compiled"`` (each round's local loops in the compiled kernel
``fedmm.kernels.fedmls_local_round``) and ``backend="python"`` (all clients
advanced together, one vectorized oracle call per local step) -- against a plain
NumPy implementation of the same Algorithm 1 loop (one Python loop per client,
NumPy per-client subgradients, ``tests/reference.py``), timed in the same session.  Run::

    python -m pytest benchmarks/bench_fedmls.py --benchmark-only

``extra_info["local_steps_per_second"]`` counts client-local steps (n · Σ_k T_k)
per second of the median run.
"""

import numpy as np
import pytest

from reference import fedmls_per_client, nonsmooth_design, nonsmooth_subgradient_vectorized

from fedmm.algorithms import FedMLS
from fedmm.experiments.fedmls import load_breast_cancer_clients
from fedmm.models.nonsmooth import HingeSVM

from _timing import per_second, tag_ratio

N_ROUNDS = 30  # T_k = k: 465 local steps per client, 4650 in all
LAM0 = 1.0  # prox_weight λ_k = LAM0/k


@pytest.fixture(scope="module")
def setup():
    datas = load_breast_cancer_clients(10)
    problem = HingeSVM()
    radius = 2 * float(np.linalg.norm(problem.minimize(datas).w))
    total_steps = len(datas) * N_ROUNDS * (N_ROUNDS + 1) // 2
    return datas, problem, radius, total_steps


def _report(benchmark, total_steps):
    benchmark.extra_info["local_steps"] = total_steps
    benchmark.extra_info["local_steps_per_second"] = per_second(total_steps, benchmark)


@pytest.mark.parametrize("backend", ["compiled", "python"])
@pytest.mark.parametrize("oracle", ["full", "minibatch"])
@pytest.mark.benchmark(group="fedmls-breast-cancer")
def test_fedmls(benchmark, setup, oracle, backend):
    datas, problem, radius, total_steps = setup
    algo = FedMLS(problem, local_steps=("linear", 1), prox_weight=("inverse", LAM0), radius=radius, oracle=oracle,
                  backend=backend)
    benchmark.pedantic(algo.run, args=(datas, N_ROUNDS), kwargs={"seed": 0, "evaluate_every": 0},
                       rounds=5, iterations=1)
    _report(benchmark, total_steps)
    tag_ratio(benchmark, "fedmm", key=f"{benchmark.group} {oracle}")


@pytest.mark.parametrize("oracle", ["full", "minibatch"])
@pytest.mark.benchmark(group="fedmls-breast-cancer")
def test_fedmls_plain_numpy_per_client(benchmark, setup, oracle):
    datas, _, radius, total_steps = setup
    designs = [nonsmooth_design("hinge", A, True) for A, _ in datas]
    labels = [y for _, y in datas]
    rngs = [np.random.default_rng(i) for i in range(len(datas))]
    batch = [max(1, int(np.ceil(0.1 * y.size))) for y in labels]

    def subgradient(i, u, idx=None):
        if idx is None:
            return nonsmooth_subgradient_vectorized("hinge", designs[i], labels[i], u)
        scale = labels[i].size / idx.size
        return scale * nonsmooth_subgradient_vectorized("hinge", designs[i][idx], labels[i][idx], u)

    def minibatch(i):
        return rngs[i].choice(labels[i].size, size=batch[i], replace=False)

    def run():
        return fedmls_per_client(subgradient, len(datas), designs[0].shape[1], N_ROUNDS,
                                 lambda k: k, lambda k: LAM0 / k, radius,
                                 minibatch=minibatch if oracle == "minibatch" else None)

    benchmark.pedantic(run, rounds=5, iterations=1)
    _report(benchmark, total_steps)
    tag_ratio(benchmark, "reference", key=f"{benchmark.group} {oracle}")
