# SPDX-License-Identifier: BSD-3-Clause
"""Dictionary update (T map) and PSD projection (issue 3) against NumPy references."""
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.linalg

from fedmm.kernels import ConvergenceWarning, dictionary_update, project_psd
from reference import dictionary_surrogate, psd_projection_eigh


def _statistics(rng, p, K, b=None, rank_deficient=False):
    b = b if b is not None else 3 * K
    H = rng.standard_normal((K, b))
    if rank_deficient:
        H[-1] = 0.0  # an unused atom: A_KK = 0
    Z = rng.standard_normal((p, b))
    return H @ H.T / b, Z @ H.T / b


@pytest.mark.parametrize("p, K, ridge", [(10, 4, 0.2), (64, 15, 0.2), (30, 50, 0.1)])
def test_ridge_update_equals_dense_solve(p, K, ridge):
    rng = np.random.default_rng(0)
    A, B = _statistics(rng, p, K, b=2 * K)
    D = dictionary_update(A, B, ridge=ridge)
    reference = np.linalg.solve(A + 2 * ridge * np.eye(K), B.T).T
    np.testing.assert_allclose(D, reference, rtol=1e-12, atol=1e-12 * np.abs(reference).max())
    # the gradient of the surrogate vanishes: D (A + 2 ridge I) = B
    np.testing.assert_allclose(D @ (A + 2 * ridge * np.eye(K)), B, atol=1e-12)


def test_ridge_update_singular_raises_linalgerror():
    rng = np.random.default_rng(1)
    A, B = _statistics(rng, 8, 5, rank_deficient=True)
    with pytest.raises(np.linalg.LinAlgError, match="positive definite"):
        dictionary_update(A, B, ridge=0.0)
    dictionary_update(A, B, ridge=0.1)  # regularized: fine


@pytest.mark.parametrize("rank_deficient", [False, True])
def test_unit_norm_update_monotone_and_feasible(rank_deficient):
    rng = np.random.default_rng(2)
    p, K = 12, 6
    A, B = _statistics(rng, p, K, rank_deficient=rank_deficient)
    B *= 5.0  # make the unit-norm constraint active
    if rank_deficient:  # unused atom with a nonzero linear term (e.g. quantization noise)
        B[:, -1] = rng.standard_normal(p)
    D = rng.standard_normal((p, K))
    values = [dictionary_surrogate(D / np.maximum(1, np.linalg.norm(D, axis=0)), A, B)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for _ in range(30):  # one sweep at a time
            D = dictionary_update(A, B, D, constraint="unit_norm", max_iter=1)
            assert (np.linalg.norm(D, axis=0) <= 1 + 1e-12).all()
            values.append(dictionary_surrogate(D, A, B))
    assert np.all(np.diff(values) <= 1e-12 * np.abs(values).max())
    D_conv = dictionary_update(A, B, D, constraint="unit_norm", tol=1e-12, max_iter=10_000)
    # fixed point of the projected block update = optimality of the constrained problem
    for j in range(K):
        v = B[:, j] - D_conv @ A[:, j] + A[j, j] * D_conv[:, j]
        if A[j, j] > 0:
            u = v / A[j, j]
            np.testing.assert_allclose(D_conv[:, j], u / max(1.0, np.linalg.norm(u)), atol=1e-9)
        else:
            np.testing.assert_allclose(D_conv[:, j], v / np.linalg.norm(v), atol=1e-9)
    assert dictionary_surrogate(D_conv, A, B) <= values[-1] + 1e-12


def test_unit_norm_with_ridge_and_inactive_constraint_matches_ridge():
    rng = np.random.default_rng(3)
    A, B = _statistics(rng, 10, 5)
    B *= 1e-3  # tiny columns: the norm constraint is inactive
    D = dictionary_update(A, B, np.zeros((10, 5)), constraint="unit_norm", ridge=0.3, tol=1e-14,
                          max_iter=100_000)
    np.testing.assert_allclose(D, dictionary_update(A, B, ridge=0.3), atol=1e-12)


def test_dictionary_update_bad_inputs():
    A, B = np.eye(3), np.ones((4, 3))
    with pytest.raises(ValueError, match="'A' of shape"):
        dictionary_update(np.eye(2), B)
    with pytest.raises(ValueError, match="'constraint'"):
        dictionary_update(A, B, constraint="l1")
    with pytest.raises(ValueError, match="'ridge'"):
        dictionary_update(A, B, ridge=-1.0)
    with pytest.raises(TypeError, match="eta"):  # the kernels say 'ridge', as DictionaryLearning does
        dictionary_update(A, B, eta=0.1)
    with pytest.raises(ValueError, match="'D0' of shape"):
        dictionary_update(A, B, np.ones((3, 3)), constraint="unit_norm")
    with pytest.raises(ValueError, match="'B' to contain only finite"):
        dictionary_update(A, np.full((4, 3), np.inf))


def _psd_inputs(rng, K):
    X = rng.standard_normal((K, K))
    psd = X @ X.T / K
    V = np.linalg.qr(rng.standard_normal((K, K)))[0]
    w = np.abs(rng.standard_normal(K))
    w[:2] = [-1e-3, -2e-3][: min(K, 2)]
    nearly = (V * w) @ V.T
    arbitrary = rng.standard_normal((K, K))
    singular = X[:, : K // 2] @ X[:, : K // 2].T
    return {"psd": psd, "nearly": nearly, "arbitrary": arbitrary, "singular": singular,
            "zero": np.zeros((K, K)), "negdef": -psd}


@pytest.mark.parametrize("K", [1, 2, 15, 50])
@pytest.mark.parametrize("kind", ["psd", "nearly", "arbitrary", "singular", "zero", "negdef"])
def test_project_psd_matches_eigh_clip(K, kind):
    rng = np.random.default_rng(K)
    A = _psd_inputs(rng, K)[kind]
    P = project_psd(A)
    scale = max(np.linalg.norm(A), 1e-300)
    np.testing.assert_array_equal(P, P.T)
    assert np.linalg.eigvalsh(P).min() >= -1e-12 * scale
    np.testing.assert_allclose(P, psd_projection_eigh(A), atol=1e-10 * scale, rtol=0)
    np.testing.assert_allclose(project_psd(P), P, atol=1e-12 * scale, rtol=0)  # idempotent


@pytest.mark.parametrize("scale", [1e-300, 1e-200, 1e-80, 1e80, 1e200, 1e300])
@pytest.mark.parametrize("kind", ["nearly", "arbitrary", "psd"])
@pytest.mark.parametrize("K", [2, 15, 50])
def test_project_psd_is_scale_equivariant(K, kind, scale):
    """Π(c A) = c Π(A) for c > 0: matrices far from unit scale (where LAPACK's bisection and the
    Schur-complement inertia count would square entries into under- or overflow) are projected to
    the same relative accuracy as unit-scale ones."""
    A = _psd_inputs(np.random.default_rng(K), K)[kind]
    P = project_psd(scale * A)
    expected = psd_projection_eigh(A)
    norm = np.linalg.norm(A)
    np.testing.assert_allclose(P / scale, expected, atol=1e-10 * norm, rtol=0)


def _with_spectrum(rng, w):
    V = np.linalg.qr(rng.standard_normal((len(w), len(w))))[0]
    return (V * np.asarray(w)) @ V.T


@pytest.mark.parametrize("K", [8, 40, 200])
def test_project_psd_few_negative_eigenvalues_matches_eigh_clip(K):
    """The few-negative-eigenvalues path (bisection, inverse iteration, back-transformation) on
    hard spectra: a repeated negative eigenvalue, negative eigenvalues of very different sizes, a
    tridiagonal form that splits into blocks (diagonal input), and as many negatives as the path
    takes (K/4)."""
    rng = np.random.default_rng(K)
    positive = np.abs(rng.standard_normal(K)) + 0.1
    cases = {
        "repeated": np.concatenate([[-1e-3] * 3, positive[3:]]),
        "spread": np.concatenate([[-1.0, -1e-6, -1e-12], positive[3:]]),
        "quarter": np.concatenate([-np.abs(rng.standard_normal(K // 4)), positive[K // 4:]]),
        "cluster_at_zero": np.concatenate([[-1e-14, 0.0, 1e-14], positive[3:]]),
    }
    inputs = {name: _with_spectrum(rng, w) for name, w in cases.items()}
    # diagonal with the negative entries last: Cholesky stops late, the tridiagonal form splits
    inputs["diagonal"] = np.diag(np.concatenate([positive[2:], [-0.5, -2.0]]))
    for name, A in inputs.items():
        P = project_psd(A)
        scale = np.linalg.norm(A)
        np.testing.assert_array_equal(P, P.T)
        np.testing.assert_allclose(P, psd_projection_eigh(A), atol=1e-10 * scale, rtol=0, err_msg=name)


def test_project_psd_symmetrizes_stacks_and_out():
    rng = np.random.default_rng(4)
    stack = rng.standard_normal((5, 7, 7))
    stack[1] = stack[1] @ stack[1].T  # PSD but not via the same path
    P = project_psd(stack)
    assert P.shape == stack.shape
    np.testing.assert_allclose(P, psd_projection_eigh(stack), atol=1e-12)
    for s in range(5):
        np.testing.assert_array_equal(P[s], project_psd(stack[s]))
    # non-symmetric input is symmetrized first
    np.testing.assert_array_equal(project_psd(stack[0]), project_psd(stack[0].T))
    out = np.empty_like(stack)
    assert project_psd(stack, out=out) is out
    np.testing.assert_array_equal(out, P)
    inplace = stack.copy()
    project_psd(inplace, out=inplace)
    np.testing.assert_array_equal(inplace, P)
    # F-ordered and float32 inputs
    np.testing.assert_array_equal(project_psd(np.asfortranarray(stack[2])), P[2])
    assert project_psd(stack[2].astype(np.float32)).dtype == np.float64


def test_project_psd_bad_inputs():
    with pytest.raises(ValueError, match="'A' to contain only finite"):
        project_psd(np.array([[1.0, np.nan], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="'A' to contain only finite"):
        project_psd(np.array([[np.inf, 0.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"'A' of shape \(K, K\)"):
        project_psd(np.ones((2, 3)))
    with pytest.raises(ValueError, match="dimension"):
        project_psd(np.ones(3))
    with pytest.raises(ValueError, match="'out'"):
        project_psd(np.eye(3), out=np.empty((3, 3), dtype=np.float32))


def test_linalg_threads_equal_serial():
    rng = np.random.default_rng(5)
    mats = [rng.standard_normal((40, 40)) for _ in range(8)]
    stats = [_statistics(rng, 30, 12) for _ in range(8)]
    serial = [project_psd(m) for m in mats], [dictionary_update(A, B, ridge=0.2) for A, B in stats]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = (list(pool.map(project_psd, mats)),
                    list(pool.map(lambda s: dictionary_update(*s, ridge=0.2), stats)))
    for a, b in zip(serial[0] + serial[1], parallel[0] + parallel[1]):
        np.testing.assert_array_equal(a, b)


def _projection_paths(A):
    """The per-matrix path codes of the compiled kernel (2: negative eigenpairs only, 3: all of them)."""
    from fedmm import _linalg

    return _linalg.project_psd(np.ascontiguousarray(A, dtype=np.float64), None, True)[1]


@pytest.mark.parametrize("K", [2, 3, 8, 15, 24, 25, 50, 120])
def test_project_psd_few_negatives_matches_eigh_clip(K):
    """Few small negative eigenvalues next to a positive spectrum (statistics that are PSD up to
    compression noise): the result is within 1e-10 ||A||_F of eigh + clip on random spectra,
    clusters, negative and positive eigenvalues near zero, and many negatives."""
    rng = np.random.default_rng(100 + K)
    for trial in range(12):
        positive = np.abs(rng.standard_normal(K)) + 0.1
        n_neg = 1 + trial % min(K - 1, 4)
        spectra = {
            "random": np.concatenate([-(10.0 ** rng.uniform(-8, -1, n_neg)), positive[n_neg:]]),
            "cluster": np.concatenate([[-1e-3] * n_neg, positive[n_neg:]]),
            "near_zero": np.concatenate([[-1e-3, -1e-14, 1e-13, 1e-11][: min(K, 4)], positive[4:]]),
            "spread": np.concatenate([[-1.0, -1e-6, -1e-12][: min(K - 1, 3)], positive[3:]]),
            "many": np.concatenate([-np.abs(rng.standard_normal(K // 2)), positive[K // 2:]]),
        }
        for name, w in spectra.items():
            A = _with_spectrum(rng, w[:K])
            P = project_psd(A)
            scale = np.linalg.norm(A)
            np.testing.assert_array_equal(P, P.T)
            np.testing.assert_allclose(P, psd_projection_eigh(A), atol=1e-10 * scale, rtol=0,
                                       err_msg=f"{name} K={K}")


def test_project_psd_noisy_statistics_and_stack():
    """A PSD statistic plus symmetric noise (the FedMM server's compressed aggregate), one at a
    time and stacked: same results as eigh + clip, the stack equal to the one-by-one results."""
    rng = np.random.default_rng(7)
    K = 15
    stack = []
    for _ in range(40):
        H = rng.standard_normal((K, 2 * K))
        E = 1e-3 * rng.standard_normal((K, K))
        stack.append(H @ H.T / (2 * K) + E + E.T)
    stack = np.stack(stack)
    P = project_psd(stack)
    for s in range(len(stack)):
        np.testing.assert_allclose(P[s], psd_projection_eigh(stack[s]),
                                   atol=1e-10 * np.linalg.norm(stack[s]), rtol=0)
        np.testing.assert_array_equal(P[s], project_psd(stack[s]))


def _nearly_psd_family(rng, K):
    """G Gᵀ/(2K) − 0.5 u uᵀ/K with G (K, 2K), u (K, 2): a Marchenko-Pastur spectrum (ratio 1/2, lower
    edge ≈ 0.09) minus a rank-2 term of size ≈ 0.5, so 0, 1 or 2 negative eigenvalues of the size of
    the smallest positive ones."""
    G = rng.standard_normal((K, 2 * K))
    u = rng.standard_normal((K, 2))
    return G @ G.T / (2 * K) - 0.5 * u @ u.T / K


@pytest.mark.parametrize("K", [15, 50, 200])
def test_project_psd_nearly_psd_family_matches_eigh_clip(K):
    """Issue 28: on 50 draws of the nearly-PSD family (the draws of benchmarks/bench_psd.py) every
    indefinite draw computes only its negative eigenpairs (never all of them: path 2 below K = 24,
    the certified shift-invert Lanczos path 4 from there), and the result equals eigh + clip to
    10 K eps ||A||_F in the Frobenius norm (eps: machine epsilon; measured: at most 0.62 K eps
    ||A||_F)."""
    rng = np.random.default_rng(28_000 + K)
    draws, negative = 50, 0
    tol = 10 * K * np.finfo(np.float64).eps
    for _ in range(draws):
        A = _nearly_psd_family(rng, K)
        P = project_psd(A)
        np.testing.assert_array_equal(P, P.T)
        assert np.linalg.norm(P - psd_projection_eigh(A)) <= tol * np.linalg.norm(A)
        indefinite = np.linalg.eigvalsh(A)[0] < 0
        negative += int(indefinite)
        assert _projection_paths(A)[0] == ((2 if K < 24 else 4) if indefinite else 0)
    assert negative >= draws // 2  # the family is what it claims: mostly indefinite


@pytest.mark.parametrize("K", [15, 50])
def test_project_psd_many_negatives_take_the_full_path(K):
    """A random symmetric matrix (about K/2 negative eigenvalues) is projected from all eigenpairs
    (path 3) even where the partial path is tried first (any Cholesky bound below K = 24): the
    tridiagonal form's Sturm count hands it over before bisection."""
    rng = np.random.default_rng(K)
    for _ in range(10):
        X = rng.standard_normal((K, K))
        A = X + X.T
        np.testing.assert_allclose(project_psd(A), psd_projection_eigh(A), atol=10 * K * np.finfo(float).eps
                                   * np.linalg.norm(A), rtol=0)
        assert _projection_paths(A)[0] == 3


def _frobenius_error(A):
    """||project_psd(A) - eigh + clip||_F in units of K eps ||A||_F, and the path taken."""
    P = project_psd(A)
    np.testing.assert_array_equal(P, P.T)
    K = A.shape[0]
    err = np.linalg.norm(P - psd_projection_eigh(A)) / (K * np.finfo(np.float64).eps * np.linalg.norm(A))
    return err, _projection_paths(A)[0]


@pytest.mark.parametrize("K", [50, 200])
def test_project_psd_lanczos_path_certified(K):
    """The shift-invert Lanczos path (4) on two equal negative eigenvalues, two of different sizes and
    draws of the nearly-PSD family: within 10 K eps ||A||_F of eigh + clip, and the same bits on
    every call and in a stack."""
    rng = np.random.default_rng(2_800 + K)
    positive = np.abs(rng.standard_normal(K)) + 0.1
    spectra = {
        "repeated": np.concatenate([[-1e-3] * 2, positive[2:]]),
        "spread": np.concatenate([[-0.2, -1e-3], positive[2:]]),
    }
    mats = [_with_spectrum(rng, w) for w in spectra.values()]
    mats += [_nearly_psd_family(np.random.default_rng(K + seed), K) for seed in range(6)]
    stack = []
    for A in mats:
        if np.linalg.eigvalsh(A)[0] >= 0:
            continue
        err, path = _frobenius_error(A)
        assert path == 4
        assert err <= 10
        first = project_psd(A)
        np.testing.assert_array_equal(first, project_psd(A.copy()))  # deterministic
        stack.append(A)
    assert len(stack) >= 5
    P = project_psd(np.stack(stack))
    for A, Ps in zip(stack, P):
        np.testing.assert_array_equal(Ps, project_psd(A))


@pytest.mark.parametrize("K", [50, 200])
def test_project_psd_lanczos_certificate_falls_back(K):
    """Inputs where the Lanczos path is tried (Cholesky passes the first quarter of the columns) but
    no certificate can be had take the exact path instead, with the same accuracy: negative
    eigenvalues inside S^{-1}'s spectrum (positive eigenvalues down to 1e-8: slow convergence, large
    factors), eigenvalues clustered at zero (no reliable inertia), exactly singular PSD input, and
    more negative eigenvalues than the path takes (5)."""
    rng = np.random.default_rng(2_900 + K)
    positive = np.abs(rng.standard_normal(K)) + 0.1
    spectra = {
        "slow": np.concatenate([[-1e-3, -2e-3], np.logspace(-8, 0, K - 2)]),
        "cluster_at_zero": np.concatenate([[-1e-3, -1e-14, 0.0, 1e-14], positive[4:]]),
        "singular_psd": np.concatenate([[0.0] * 3, positive[3:]]),
        "five": np.concatenate([-1e-3 * (1.0 + np.arange(5)), positive[5:]]),
    }
    for name, w in spectra.items():
        A = _with_spectrum(rng, w)
        assert scipy.linalg.lapack.dpotrf(A)[1] - 1 > K // 4, name  # the Lanczos path is tried
        err, path = _frobenius_error(A)
        assert path in (1, 2, 3), name
        assert err <= 10, name
        np.testing.assert_array_equal(project_psd(A), project_psd(A.copy()))
