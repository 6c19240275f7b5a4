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
"""
import numpy as np
import pytest
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
