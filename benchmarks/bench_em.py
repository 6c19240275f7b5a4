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

ESTEP_CASES = {"fig1-2d-G2": (10_000, 2, 2), "digits-p20-G10": (20_000, 20, 10), "p50-G30": (20_000, 50, 30)}


def _estep_problem(n, p, G, seed=0):
    rng = np.random.default_rng(seed)
    Y = rng.normal(size=(n, p)) + rng.normal(0, 3, (G, p))[rng.integers(0, G, n)]
    gmm = GaussianMixture(G)
    s = gmm.init_statistic([Y], rng)
    theta = gmm.T(s)
    sk = SkGaussianMixture(G, covariance_type="tied")
    sk.weights_, sk.means_, sk.covariances_ = theta.weights, theta.means, theta.covariance
    sk.precisions_cholesky_ = _compute_precision_cholesky(theta.covariance, "tied")
    return Y, gmm, theta, sk


@pytest.mark.parametrize("case", list(ESTEP_CASES))
@pytest.mark.parametrize("impl", ["fedmm", "sklearn"])
def test_gmm_estep(benchmark, case, impl):
    n, p, G = ESTEP_CASES[case]
    Y, gmm, theta, sk = _estep_problem(n, p, G)
    benchmark.group = f"gmm-estep-{case}"
    benchmark.extra_info.update(n=n, p=p, G=G)
    # same answer before timing
    np.testing.assert_allclose(gmm.responsibilities(Y, theta), np.exp(sk._estimate_log_prob_resp(Y)[1]), atol=1e-8)
    if impl == "fedmm":
        benchmark(gmm.responsibilities, Y, theta)
    else:
        benchmark(sk._estimate_log_prob_resp, Y)
