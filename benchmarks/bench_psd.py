# SPDX-License-Identifier: BSD-3-Clause
"""PSD projection: fedmm ``project_psd`` vs ``numpy.linalg.eigh`` + clip.

Run single-threaded::

    OPENBLAS_NUM_THREADS=1 python -m pytest benchmarks/bench_psd.py --benchmark-group-by=group

Inputs (FedMM server side, first statistic block): ``psd`` = H Hᵀ/b (positive
definite, what most rounds see), ``nearly`` = positive spectrum with two
small negative eigenvalues (aggregated or quantized statistics), and
``arbitrary`` = a random symmetric matrix (half of the spectrum negative).
``extra_info["max_abs_diff"]`` is the largest deviation between the two
results, scaled by ‖A‖_F.

``test_project_psd_many_draws`` (issue 28) times ``project_psd`` against
``scipy.linalg.eigh`` + clip on ``DRAWS`` random draws of the nearly-PSD family
``G Gᵀ/(2K) − 0.5 u uᵀ/K`` (G of shape (K, 2K), u of shape (K, 2): a
Marchenko-Pastur spectrum minus a rank-2 term, so 0, 1 or 2 negative
eigenvalues as small as the smallest positive ones) and on ``ARBITRARY_DRAWS``
random symmetric matrices, in the same run: per draw, ``REPEATS`` interleaved
repetitions of each (a repetition times ``INNER[K]`` calls), the ratio of the
medians; ``extra_info`` holds the worst and the median ratio over the draws
(target: worst ≥ 4 on the family, ≥ 1 on arbitrary input).  The timer is the
calling thread's CPU time (one BLAS thread: the work done, whatever else the
machine runs).  Print the table with ``-s``::

    OPENBLAS_NUM_THREADS=1 python -m pytest benchmarks/bench_psd.py -k many_draws --benchmark-only -s
"""
import time

import numpy as np
import pytest
import scipy.linalg
from threadpoolctl import threadpool_limits

from fedmm.kernels import project_psd

from _timing import tag_ratio


@pytest.fixture(scope="module", autouse=True)
def _single_thread():
    with threadpool_limits(limits=1):
        yield


def _input(kind, K, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "psd":
        H = rng.standard_normal((K, 4 * K))
        return H @ H.T / (4 * K)
    if kind == "nearly":
        V = np.linalg.qr(rng.standard_normal((K, K)))[0]
        w = np.abs(rng.standard_normal(K)) + 0.1
        w[:2] = [-1e-3, -1e-4]
        return (V * w) @ V.T
    X = rng.standard_normal((K, K))
    return X + X.T


def eigh_clip(A):
    """The obvious NumPy way: symmetrize, eigh, clip, reassemble."""
    S = 0.5 * (A + A.T)
    w, V = np.linalg.eigh(S)
    return (V * np.maximum(w, 0.0)) @ V.T


@pytest.mark.parametrize("impl", ["fedmm", "numpy"])
@pytest.mark.parametrize("kind", ["psd", "nearly", "arbitrary"])
@pytest.mark.parametrize("K", [15, 50, 200])
def test_project_psd(benchmark, K, kind, impl):
    benchmark.group = f"project_psd K={K} {kind}"
    A = _input(kind, K)
    fn = project_psd if impl == "fedmm" else eigh_clip
    P = benchmark(fn, A)
    other = eigh_clip(A) if impl == "fedmm" else project_psd(A)
    benchmark.extra_info["max_abs_diff"] = float(np.abs(P - other).max() / np.linalg.norm(A))
    tag_ratio(benchmark, "fedmm" if impl == "fedmm" else "reference")


@pytest.mark.parametrize("impl", ["fedmm", "numpy"])
def test_project_psd_stack(benchmark, impl):
    """100 clients' K=15 blocks at once (e.g. projecting every client's statistic)."""
    benchmark.group = "project_psd stack 100 x K=15 nearly"
    stack = np.stack([_input("nearly", 15, seed) for seed in range(100)])
    fn = project_psd if impl == "fedmm" else eigh_clip_stack
    benchmark(fn, stack)
    tag_ratio(benchmark, "fedmm" if impl == "fedmm" else "reference")


def eigh_clip_stack(stack):
    S = 0.5 * (stack + np.swapaxes(stack, 1, 2))
    w, V = np.linalg.eigh(S)
    return (V * np.maximum(w, 0.0)[:, None, :]) @ np.swapaxes(V, 1, 2)


DRAWS, ARBITRARY_DRAWS, REPEATS = 50, 10, 15
INNER = {15: 20, 50: 4, 200: 1}


def nearly_psd_family(rng, K):
    """``G Gᵀ/(2K) − 0.5 u uᵀ/K``, G of shape (K, 2K), u of shape (K, 2) (issue 28)."""
    G = rng.standard_normal((K, 2 * K))
    u = rng.standard_normal((K, 2))
    return G @ G.T / (2 * K) - 0.5 * u @ u.T / K


def scipy_eigh_clip(A):
    """The reference of issue 28: ``scipy.linalg.eigh``, then ``V diag(max(w, 0)) Vᵀ``."""
    S = 0.5 * (A + A.T)
    w, V = scipy.linalg.eigh(S)
    return (V * np.maximum(w, 0.0)) @ V.T


def _ratio(A, inner):
    """eigh + clip time over project_psd time: medians of REPEATS interleaved repetitions."""
    seconds = {"eigh": [], "fedmm": []}
    for _ in range(REPEATS):
        for name, fn in (("eigh", scipy_eigh_clip), ("fedmm", project_psd)):
            start = time.thread_time()
            for _ in range(inner):
                fn(A)
            seconds[name].append(time.thread_time() - start)
    return float(np.median(seconds["eigh"]) / np.median(seconds["fedmm"]))


@pytest.mark.parametrize("K", [15, 50, 200])
def test_project_psd_many_draws(benchmark, K):
    benchmark.group = f"project_psd many draws K={K}"
    rng = np.random.default_rng(28_000 + K)
    family = [nearly_psd_family(rng, K) for _ in range(DRAWS)]
    arbitrary = [X + X.T for X in (rng.standard_normal((K, K)) for _ in range(ARBITRARY_DRAWS))]
    for A in family + arbitrary:  # same result as the reference on every draw
        assert np.linalg.norm(project_psd(A) - scipy_eigh_clip(A)) <= 1e-11 * np.linalg.norm(A)
    ratios = {}

    def measure():
        ratios["family"] = [_ratio(A, INNER[K]) for A in family]
        ratios["arbitrary"] = [_ratio(A, INNER[K]) for A in arbitrary]

    benchmark.pedantic(measure, rounds=1, iterations=1)
    info = benchmark.extra_info
    n_negative = [int(np.linalg.eigvalsh(A)[0] < 0) for A in family]
    indefinite = [r for r, neg in zip(ratios["family"], n_negative) if neg]
    info["draws"], info["indefinite_draws"] = DRAWS, len(indefinite)
    info["worst_ratio"] = min(ratios["family"])
    info["median_ratio"] = float(np.median(ratios["family"]))
    info["worst_ratio_indefinite"] = min(indefinite) if indefinite else None
    info["median_ratio_indefinite"] = float(np.median(indefinite)) if indefinite else None
    info["arbitrary_worst_ratio"] = min(ratios["arbitrary"])
    info["arbitrary_median_ratio"] = float(np.median(ratios["arbitrary"]))
    print(f"\nK={K}: family worst {info['worst_ratio']:.2f} median {info['median_ratio']:.2f} "
          f"({len(indefinite)} indefinite: worst {info['worst_ratio_indefinite']:.2f} "
          f"median {info['median_ratio_indefinite']:.2f}); arbitrary worst "
          f"{info['arbitrary_worst_ratio']:.2f} median {info['arbitrary_median_ratio']:.2f}")
