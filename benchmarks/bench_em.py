# SPDX-License-Identifier: BSD-3-Clause
"""EM family benchmarks (issue 6).

- GMM E-step (responsibilities): fedmm's BLAS-3 natural-parameter E-step against
  scikit-learn ``GaussianMixture._estimate_log_prob_resp`` with the same
  parameters, same data, same run (group ``gmm-estep-*``).
- FedEM client-rounds per second on the FedEM Fig. 1 and digits settings
  (needs ``fedmm.algorithms``; ``extra_info['client_rounds_per_s']``).

Run: ``python -m pytest benchmarks/bench_em.py --benchmark-only``.
"""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.mixture import GaussianMixture as SkGaussianMixture
from sklearn.mixture._gaussian_mixture import _compute_precision_cholesky

from fedmm.models import GaussianMixture

from _timing import per_second

ESTEP_CASES = {
    "tied-fig1-2d-G2": ("tied", 10_000, 2, 2),
    "tied-digits-p20-G10": ("tied", 20_000, 20, 10),
    "tied-p50-G30": ("tied", 20_000, 50, 30),
    "full-digits-p20-G10": ("full", 20_000, 20, 10),
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


@pytest.mark.parametrize("case", list(ESTEP_CASES))
@pytest.mark.parametrize("impl", ["fedmm", "sklearn"])
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
    algo = FedMM(model, participation_prob=participation, compressor=BlockQuantizer(block_size=4), alpha=1e-2,
                 step=step, batch_size=20)
    benchmark.group = "fedem-client-rounds"
    histories = []
    benchmark.pedantic(lambda: histories.append(algo.run(datas, FEDEM_ROUNDS, seed=0, init=S0)), rounds=3, iterations=1)
    client_rounds = sum(len(r["active"]) for r in histories[-1].records)
    benchmark.extra_info.update(setting=setting, n_clients=len(datas), rounds=FEDEM_ROUNDS, client_rounds=client_rounds,
                                client_rounds_per_s=per_second(client_rounds, benchmark))
