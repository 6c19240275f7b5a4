# SPDX-License-Identifier: BSD-3-Clause
"""Batched LASSO: fedmm vs scikit-learn ``sparse_encode`` (``lasso_cd``, and ``lasso_lars`` as a LARS
reference), NumPy FISTA, and SPAMS's LARS-homotopy ``spams.lasso`` when installed (skipped otherwise).

Run single-threaded (the figures of issue 3 are single-thread figures)::

    OPENBLAS_NUM_THREADS=1 python -m pytest benchmarks/bench_sparse.py --benchmark-group-by=group

A module fixture also caps every BLAS pool at one thread (threadpoolctl).
``extra_info`` of each row reports ``columns_per_s`` (from the median) and
``kkt_violation`` (max over columns of the relative KKT violation, see
tests/reference.py) so that speed is compared at a stated accuracy.
scikit-learn and FISTA are timed on at most ``REFERENCE_COLUMNS`` columns of
the large shapes to keep the run short; columns/s is comparable.
"""
import warnings

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from fedmm.kernels import ConvergenceWarning, dictionary_statistics, lasso

from _timing import per_second, tag_ratio
from reference import lasso_kkt_violation, sparse_codes  # tests/ is on sys.path (conftest.py)

LAM = 0.1
REFERENCE_COLUMNS = 250  # 40 on the overcomplete shape, where sklearn needs ~1e4 sweeps
SHAPES = [(64, 15, 50), (64, 15, 5000), (500, 50, 250), (500, 50, 5000), (64, 256, 2000)]


@pytest.fixture(scope="module", autouse=True)
def _single_thread():
    with threadpool_limits(limits=1):
        yield


def _problem(p, K, b, seed=0):
    """The FedMM §6 synthetic model: N(0,1) dictionary, Z = D h with 20% N(0,1) codes."""
    rng = np.random.default_rng(seed)
    D = rng.standard_normal((p, K))
    data = (D @ sparse_codes(rng, K, b)).T.copy()
    return D, data  # data: one sample per row, as a client holds it


def fista(D, Z, lam, tol=1e-9, max_iter=2000, check_every=10):
    """Batched FISTA on the Gram matrix with the same per-column duality-gap stop."""
    G, C = D.T @ D, D.T @ Z
    znorm2 = np.einsum("ij,ij->j", Z, Z)
    step = 1.0 / np.linalg.eigvalsh(G)[-1]
    H = np.zeros_like(C)
    Y, t = H.copy(), 1.0
    for it in range(max_iter):
        V = Y - step * (G @ Y - C)
        H_new = np.sign(V) * np.maximum(np.abs(V) - step * lam, 0.0)
        t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        Y = H_new + ((t - 1.0) / t_new) * (H_new - H)
        H, t = H_new, t_new
        if it % check_every == 0:
            g = C - G @ H
            s = np.minimum(1.0, lam / np.maximum(np.abs(g).max(axis=0), 1e-300))
            hg = np.einsum("ij,ij->j", H, g)
            r2 = znorm2 - np.einsum("ij,ij->j", C, H) - hg
            gap = 0.5 * (1 - s) ** 2 * r2 + lam * np.abs(H).sum(axis=0) - s * hg
            if np.all(gap <= tol * 0.5 * znorm2):
                break
    return H


def _sklearn(D, Z, lam):
    from sklearn.decomposition import sparse_encode

    # sparse_encode: rows are samples and atoms; its lasso_cd divides alpha by p itself
    return sparse_encode(Z.T, D.T, algorithm="lasso_cd", alpha=lam, max_iter=10_000).T


def _sklearn_lars(D, Z, lam):
    from sklearn.decomposition import sparse_encode

    # the LARS-lasso path (LassoLars on the Gram matrix); like lasso_cd it divides alpha by p itself
    return sparse_encode(Z.T, D.T, algorithm="lasso_lars", alpha=lam).T


def _spams(D, Z, lam):
    import spams

    # mode=2: min 1/2 ||z - D h||^2 + lambda1 ||h||_1, SPAMS's LARS-homotopy with Cholesky updates
    return spams.lasso(np.asfortranarray(Z), D=np.asfortranarray(D), lambda1=lam, mode=2,
                       numThreads=1).toarray()


REFERENCES = {"sklearn": _sklearn, "sklearn-lars": _sklearn_lars, "fista": fista, "spams": _spams}


def _columns_per_s(benchmark, b):
    """From the median; None when timing is off (``--benchmark-disable`` smoke runs)."""
    return per_second(b, benchmark)


def _record(benchmark, D, Z, H, b):
    benchmark.extra_info["columns"] = b
    benchmark.extra_info["columns_per_s"] = _columns_per_s(benchmark, b)
    benchmark.extra_info["kkt_violation"] = float(lasso_kkt_violation(D, Z, H, LAM).max())


@pytest.mark.parametrize(  # outermost: a shape's rows run one after the other
    "impl", ["fedmm", "fedmm-cd", "fedmm-active_set", "fedmm-homotopy", "sklearn", "sklearn-lars", "fista", "spams"]
)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "p{}-K{}-b{}".format(*s))
def test_lasso(benchmark, shape, impl):
    p, K, b = shape
    benchmark.group = f"lasso p={p} K={K} b={b}"
    D, data = _problem(p, K, b)
    if impl.startswith("fedmm"):
        method = impl.partition("-")[2] or "auto"
        if method == "cd" and K > p:
            pytest.skip("coordinate descent alone crawls on overcomplete D (see active_set)")
        Z = data.T  # the F-ordered (p, b) view the engine passes, no copy
        if K > p:  # seconds per call: one round is enough
            H = benchmark.pedantic(lasso, args=(D, Z, LAM), kwargs={"method": method}, rounds=1)
        else:
            H = benchmark(lasso, D, Z, LAM, method=method)
    elif impl == "spams":  # compiled: all columns, like fedmm
        pytest.importorskip("spams")
        Z = np.asfortranarray(data.T)
        fn = REFERENCES[impl]
        H = benchmark.pedantic(fn, args=(D, Z, LAM), rounds=1 if K > p else 5)
    else:
        Z = np.asfortranarray(data[: REFERENCE_COLUMNS if K <= p else 40].T)
        b = Z.shape[1]
        fn = REFERENCES[impl]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # sklearn's ConvergenceWarning on hard shapes
            H = benchmark.pedantic(fn, args=(D, Z, LAM), rounds=3 if K <= p else 1)
    _record(benchmark, D, Z, H, b)
    if impl.startswith("fedmm") or impl == "sklearn":  # the other references are not compared
        tag_ratio(benchmark, "fedmm" if impl.startswith("fedmm") else "reference")


@pytest.mark.parametrize("n_clients", [20])
def test_statistics_segmented_vs_separate(benchmark, n_clients):
    """One segmented call for 20 clients' minibatches (p=64, K=15, b=50 each)."""
    p, K, b = 64, 15, 50
    D, data = _problem(p, K, b * n_clients)
    Z = data.T
    offsets = np.arange(0, b * n_clients + 1, b)
    benchmark.group = "statistics 20 clients x 50 columns"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        benchmark(dictionary_statistics, D, Z, LAM, segments=offsets)
    benchmark.extra_info["columns_per_s"] = _columns_per_s(benchmark, b * n_clients)


@pytest.mark.parametrize("impl", ["validated", "previous-numpy-checks"])
def test_lasso_gram_validation_cost(benchmark, impl):
    """The checked ``lasso_gram`` at b = 50 (one GIL-free pass over G and C for finiteness, symmetry
    and the diagonal) against the same solve preceded by the NumPy checks it used before
    (``np.isfinite`` twice, ``np.allclose(G, G.T)``, the diagonal): the validation's share of a call."""
    from fedmm.kernels import lasso_gram

    benchmark.group = "lasso_gram validation p=64 K=15 b=50"
    D, data = _problem(64, 15, 50)
    G, C = np.asfortranarray(D.T @ D), np.asfortranarray(D.T @ data.T)

    def numpy_checks_then_solve():
        assert np.isfinite(G).all() and np.isfinite(C).all()
        assert np.allclose(G, G.T, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(G).max(initial=0.0))))
        assert not (np.diagonal(G) < 0).any()
        return lasso_gram(G, C, LAM)

    fn = (lambda: lasso_gram(G, C, LAM)) if impl == "validated" else numpy_checks_then_solve
    H = benchmark(fn)
    np.testing.assert_array_equal(H, lasso_gram(G, C, LAM))
    tag_ratio(benchmark, "fedmm" if impl == "validated" else "reference")


@pytest.mark.parametrize("impl", ["fedmm", "sklearn"])
def test_lasso_dense_codes(benchmark, impl):
    """Dense codes (p = 64, K = 15, N(0, 1) codes on every atom, λ = 0.1): the regime of a
    dictionary-learning round at a well-conditioned dictionary, where nearly every column keeps all
    K atoms and fedmm solves it in one Newton step from the least-squares point.  scikit-learn's
    ``sparse_encode`` (``lasso_cd``) on the first ``REFERENCE_COLUMNS`` columns of the same data is
    the yardstick; ``columns_per_s`` compares the two."""
    rng = np.random.default_rng(0)
    p, K, b = 64, 15, 5000
    D = rng.standard_normal((p, K))
    Z = np.asfortranarray(D @ rng.standard_normal((K, b)) + 0.1 * rng.standard_normal((p, b)))
    benchmark.group = "lasso dense codes p=64 K=15"
    if impl == "fedmm":
        H = benchmark(lasso, D, Z, LAM)
    else:
        Z = np.asfortranarray(Z[:, :REFERENCE_COLUMNS])
        b = Z.shape[1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            H = benchmark.pedantic(_sklearn, args=(D, Z, LAM), rounds=3)
    _record(benchmark, D, Z, H, b)
    benchmark.extra_info["full_support_share"] = float((H != 0).all(axis=0).mean())
    tag_ratio(benchmark, "fedmm" if impl == "fedmm" else "reference")
