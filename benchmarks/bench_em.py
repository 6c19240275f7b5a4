# SPDX-License-Identifier: BSD-3-Clause
"""EM family benchmarks (issues 6 and 13).

- GMM E-step (responsibilities): fedmm's BLAS-3 natural-parameter E-step against
  scikit-learn ``GaussianMixture._estimate_log_prob_resp`` with the same
  parameters, same data, same run (group ``gmm-estep-*``).
- FedEM client-rounds per second on the FedEM Fig. 1 and digits settings
  (needs ``fedmm.algorithms``; ``extra_info['client_rounds_per_s']``).
- Python backend against compiled backend (issue 13), group ``em-backends-<setting>``:
  client-rounds per second of whole ``FedMM.run`` calls (build, set-up exchange and
  rounds; ``extra_info['client_rounds_per_s']``) and of the rounds alone (the History's
  ``wall_time``; ``extra_info['round_client_rounds_per_s']``) on the FedEM Fig. 1
  Gaussian-mixture setting (100 clients, 75% participation, minibatch 20, block-p
  quantization with blocks of 4, α = 1e-2, no monitoring), the Poisson latent-shift
  model and the Remark 1 toy in the same configuration.  ``test_em_backend_ratio``
  alternates the two backends call by call (the host's speed drifts) and records the
  medians and their ratio.  Targets (one thread): ≥ 200,000 client-rounds/s compiled on
  the Fig. 1 setting, ≥ 5× the Python backend.

Run: ``python -m pytest benchmarks/bench_em.py --benchmark-only``
(``-k backend`` for the backend comparison only; ``-s`` prints the medians).
"""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.mixture import GaussianMixture as SkGaussianMixture
from sklearn.mixture._gaussian_mixture import _compute_precision_cholesky

from fedmm.models import GaussianMixture

from _timing import per_second, record_ratio, tag_ratio

ESTEP_CASES = {
    "tied-fig1-2d-G2": ("tied", 10_000, 2, 2),
    "tied-digits-p20-G10": ("tied", 20_000, 20, 10),
    "tied-p50-G30": ("tied", 20_000, 50, 30),
    "full-digits-p20-G10": ("full", 20_000, 20, 10),
    "full-p50-G10": ("full", 20_000, 50, 10),
}


def _estep_problem(covariance, n, p, G, seed=0):
    rng = np.random.default_rng(seed)
    Y = rng.normal(size=(n, p)) + rng.normal(0, 3, (G, p))[rng.integers(0, G, n)]
    gmm = GaussianMixture(G, covariance=covariance)
    s = gmm.init_statistic([Y], rng)
    theta = gmm.T(gmm.statistic(Y, gmm.T(s)))
    sk = SkGaussianMixture(G, covariance_type=covariance)
    sk.weights_, sk.means_, sk.covariances_ = theta.weights, theta.means, theta.covariance
    sk.precisions_cholesky_ = _compute_precision_cholesky(theta.covariance, covariance)
    return Y, gmm, theta, sk


@pytest.mark.parametrize("impl", ["fedmm", "sklearn"])  # outermost: a case's rows run one after the other
@pytest.mark.parametrize("case", list(ESTEP_CASES))
def test_gmm_estep(benchmark, case, impl):
    covariance, n, p, G = ESTEP_CASES[case]
    Y, gmm, theta, sk = _estep_problem(covariance, n, p, G)
    benchmark.group = f"gmm-estep-{case}"
    benchmark.extra_info.update(covariance=covariance, n=n, p=p, G=G)
    # same answer before timing
    np.testing.assert_allclose(gmm.responsibilities(Y, theta), np.exp(sk._estimate_log_prob_resp(Y)[1]), atol=1e-8)
    if impl == "fedmm":
        benchmark(gmm.responsibilities, Y, theta)
    else:
        benchmark(sk._estimate_log_prob_resp, Y)
    tag_ratio(benchmark, "fedmm" if impl == "fedmm" else "reference")


FEDEM_ROUNDS = 20


@pytest.mark.parametrize("setting", ["fig1", "digits"])
def test_fedem_client_rounds(benchmark, setting):
    """Client-rounds per second of FedEM (paper settings: quantization ω = 1, α = 1e-2, minibatch 20)."""
    from fedmm.algorithms import FedMM
    from fedmm.compression import BlockQuantizer
    from fedmm.experiments.fedem import digits_clients, fig1_clients

    if setting == "fig1":
        datas, truth = fig1_clients(10_000, 100, 0)
        model = GaussianMixture(2, known_covariance=truth["covariance"])
        participation, step = 0.75, 1e-2
    else:
        datas = digits_clients(20, 20, 0)
        model = GaussianMixture(10)
        participation, step = 1.0, 1e-3
    S0 = model.init_statistic(datas, np.random.default_rng(0))
    algo = FedMM(model, participation_prob=participation, compressor=BlockQuantizer(block_size=4),
                 control_variate_step=1e-2,
                 step=step, batch_size=20)
    benchmark.group = "fedem-client-rounds"
    histories = []
    benchmark.pedantic(lambda: histories.append(algo.run(datas, FEDEM_ROUNDS, seed=0, init=S0)), rounds=3, iterations=1)
    client_rounds = sum(len(r["active"]) for r in histories[-1].records)
    benchmark.extra_info.update(setting=setting, n_clients=len(datas), rounds=FEDEM_ROUNDS, client_rounds=client_rounds,
                                client_rounds_per_s=per_second(client_rounds, benchmark))


# --------------------------------------------------------------------------- Python vs compiled backend
BACKEND_ROUNDS = 200
SUPPORT = np.array([-1.0, -0.3, 0.4, 1.0])
PROBS = np.array([0.1, 0.4, 0.3, 0.2])


def _backend_setting(setting):
    """(model, datas, S0) of a 100-client setting; ``gmm-fig1`` is FedEM's Fig. 1 (10,000 2-D points)."""
    from fedmm.experiments.fedem import fig1_clients
    from fedmm.models import InverseToy, PoissonLatent

    rng = np.random.default_rng(0)
    if setting == "gmm-fig1":
        datas, truth = fig1_clients(10_000, 100, 0)
        model = GaussianMixture(2, known_covariance=truth["covariance"])
    elif setting == "poisson":
        thetas = rng.uniform(0.0, 1.5, 100)
        datas = [rng.poisson(np.exp(th + rng.choice(SUPPORT, size=100, p=PROBS))).astype(np.float64)
                 for th in thetas]
        model = PoissonLatent(SUPPORT, PROBS, lam=0.5)
    else:
        datas = [rng.uniform(0.5, 1.5 + i / 50, 100) for i in range(100)]
        model = InverseToy()
    return model, datas, model.init_statistic(datas, rng)


def _backend_algorithm(model, backend):
    from fedmm.algorithms import FedMM
    from fedmm.compression import BlockQuantizer

    return FedMM(model, participation_prob=0.75, compressor=BlockQuantizer(block_size=4), control_variate_step=1e-2,
                 step=1e-2,
                 batch_size=20, backend=backend, n_threads=1)


BACKEND_SETTINGS = ["gmm-fig1", "poisson", "toy"]


@pytest.mark.parametrize("backend", ["python", "compiled"])
@pytest.mark.parametrize("setting", BACKEND_SETTINGS)
def test_em_backend_client_rounds(benchmark, setting, backend):
    """Client-rounds per second of one backend (one thread, no monitoring)."""
    model, datas, S0 = _backend_setting(setting)
    algo = _backend_algorithm(model, backend)
    benchmark.group = f"em-backends-{setting}"
    histories = []
    benchmark.pedantic(lambda: histories.append(algo.run(datas, BACKEND_ROUNDS, seed=0, init=S0)), rounds=5,
                       iterations=1, warmup_rounds=1)
    h = histories[-1]
    assert h.config["backend"] == backend
    client_rounds = sum(len(r["active"]) for r in h.records)
    round_rates = [client_rounds / x.records[-1]["wall_time"] for x in histories]
    benchmark.extra_info.update(setting=setting, backend=backend, rounds=BACKEND_ROUNDS, client_rounds=client_rounds,
                                client_rounds_per_s=per_second(client_rounds, benchmark),
                                round_client_rounds_per_s=float(np.median(round_rates)))
    tag_ratio(benchmark, "fedmm" if backend == "compiled" else "reference")


@pytest.mark.parametrize("setting", BACKEND_SETTINGS)
def test_em_backend_ratio(benchmark, setting):
    """Python and compiled backends alternated call by call; medians of each and their ratio in ``extra_info``
    (both the whole-run rate and the rounds-only rate).  The two backends' Histories are checked equal."""
    import time

    model, datas, S0 = _backend_setting(setting)
    algos = {b: _backend_algorithm(model, b) for b in ("python", "compiled")}
    seconds = {b: [] for b in algos}
    round_seconds = {b: [] for b in algos}
    last = {}

    def pair():
        for b, algo in algos.items():
            start = time.perf_counter()
            last[b] = algo.run(datas, BACKEND_ROUNDS, seed=0, init=S0)
            seconds[b].append(time.perf_counter() - start)
            round_seconds[b].append(last[b].records[-1]["wall_time"])

    benchmark.group = f"em-backends-{setting}"
    benchmark.pedantic(pair, rounds=5, iterations=1, warmup_rounds=1)
    assert last["python"].equals(last["compiled"])
    client_rounds = sum(len(r["active"]) for r in last["compiled"].records)
    info = {"setting": setting, "rounds": BACKEND_ROUNDS, "client_rounds": client_rounds}
    for b in algos:
        info[f"{b}_client_rounds_per_s"] = client_rounds / float(np.median(seconds[b]))
        info[f"{b}_round_client_rounds_per_s"] = client_rounds / float(np.median(round_seconds[b]))
    info["ratio"] = info["compiled_client_rounds_per_s"] / info["python_client_rounds_per_s"]
    info["round_ratio"] = info["compiled_round_client_rounds_per_s"] / info["python_round_client_rounds_per_s"]
    benchmark.extra_info.update(info)
    # the regression ratio: compiled time over Python time, median over the interleaved pairs (warm-up left out)
    kept = slice(1, None) if len(seconds["compiled"]) > 1 else slice(None)
    record_ratio(benchmark, np.median(np.divide(seconds["compiled"][kept], seconds["python"][kept])))
    print(f"\n{setting}: python {info['python_client_rounds_per_s']:,.0f} client-rounds/s "
          f"(rounds only {info['python_round_client_rounds_per_s']:,.0f}), compiled "
          f"{info['compiled_client_rounds_per_s']:,.0f} "
          f"(rounds only {info['compiled_round_client_rounds_per_s']:,.0f}), "
          f"ratio {info['ratio']:.1f}x (rounds only {info['round_ratio']:.1f}x)")
