# SPDX-License-Identifier: BSD-3-Clause
"""Batched LASSO and dictionary statistics (issue 3) against independent references."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fedmm.kernels import ConvergenceWarning, dictionary_statistics, lasso, lasso_gram
from reference import (
    lasso_duality_gap,
    lasso_kkt_violation,
    lasso_objective,
    lasso_sklearn,
    sparse_codes,
)

KKT_TOL = 1e-7
OBJ_RTOL = 1e-9


def _problem(rng, p, K, b, noise=0.1, cond=None):
    D = rng.standard_normal((p, K))
    if cond is not None:  # singular values spread geometrically over [1/cond, 1]
        U, _, Vt = np.linalg.svd(D, full_matrices=False)
        D = (U * np.geomspace(1.0, 1.0 / cond, min(p, K))) @ Vt
    Z = D @ sparse_codes(rng, K, b) + noise * rng.standard_normal((p, b))
    return D, Z


def _check_against_sklearn(D, Z, lam, H, positive=False):
    assert lasso_kkt_violation(D, Z, H, lam, positive).max() <= KKT_TOL
    ref = lasso_sklearn(D, Z, lam, positive=positive)
    ours, theirs = lasso_objective(D, Z, H, lam), lasso_objective(D, Z, ref, lam)
    np.testing.assert_allclose(ours, theirs, rtol=OBJ_RTOL)
    # ours is the exact minimizer up to rounding: never worse than the reference
    assert np.all(ours <= theirs * (1 + 1e-12))


@pytest.mark.parametrize("method", ["auto", "cd", "active_set", "homotopy"])
@pytest.mark.parametrize(
    "p, K, lam, cond",
    [(20, 8, 0.1, None), (30, 15, 0.5, None), (20, 8, 0.05, 1e3), (12, 30, 0.2, None),
     (100, 40, 0.02, None)],
    ids=["random", "random-bigger-lam", "ill-conditioned", "overcomplete", "dense-codes"],
)
def test_lasso_matches_sklearn(p, K, lam, cond, method):
    rng = np.random.default_rng(0)
    D, Z = _problem(rng, p, K, 12, cond=cond)
    H = lasso(D, Z, lam, method=method)
    assert H.shape == (K, 12)
    _check_against_sklearn(D, Z, lam, H)


@pytest.mark.parametrize("method", ["auto", "active_set", "homotopy"])
def test_lasso_overcomplete_k256_converges(method):
    rng = np.random.default_rng(1)
    D, Z = _problem(rng, 64, 256, 3)
    H, n_iter = lasso(D, Z, 0.1, return_n_iter=True, method=method)
    assert (H != 0).sum(axis=0).max() <= 64  # a LASSO support never exceeds p here
    assert lasso_kkt_violation(D, Z, H, 0.1).max() <= KKT_TOL
    assert (n_iter < 1000).all()
    # scikit-learn does not converge on this shape: certify the objective by the duality gap
    # instead (P(h) - P* <= gap), i.e. within OBJ_RTOL of the optimum.
    assert np.all(lasso_duality_gap(D, Z, H, 0.1) <= OBJ_RTOL * lasso_objective(D, Z, H, 0.1))
    H_gram = lasso_gram(D.T @ D, D.T @ Z, 0.1, method="active_set", znorm2=(Z * Z).sum(axis=0))
    np.testing.assert_allclose(
        lasso_objective(D, Z, H_gram, 0.1), lasso_objective(D, Z, H, 0.1), rtol=OBJ_RTOL
    )


@pytest.mark.parametrize("method", ["cd", "active_set", "homotopy"])
def test_positive_lasso(method):
    rng = np.random.default_rng(2)
    D, Z = _problem(rng, 20, 10, 10)
    H = lasso(D, Z, 0.1, positive=True, method=method)
    assert (H >= 0).all()
    _check_against_sklearn(D, Z, 0.1, H, positive=True)


@pytest.mark.parametrize("method", ["auto", "homotopy"])
def test_zero_columns_and_lambda_above_lambda_max(method):
    rng = np.random.default_rng(3)
    D, Z = _problem(rng, 16, 6, 5)
    Z[:, 2] = 0.0
    H = lasso(D, Z, 0.1, method=method)
    assert (H[:, 2] == 0).all()
    lam_max = np.abs(D.T @ Z).max()
    assert (lasso(D, Z, lam_max, method=method) == 0).all()
    assert (lasso(D, Z, 2 * lam_max, method=method) == 0).all()
    assert (lasso(D, Z, 0.999 * lam_max, method=method) != 0).any()


def test_duplicated_and_zero_atoms():
    rng = np.random.default_rng(4)
    D, Z = _problem(rng, 16, 6, 8)
    D_degenerate = np.column_stack([D, D[:, 1], np.zeros(16), D[:, 3]])
    for method in ("cd", "active_set", "homotopy"):
        H = lasso(D_degenerate, Z, 0.1, method=method)
        assert (H[7] == 0).all()  # the zero atom is never used
        assert lasso_kkt_violation(D_degenerate, Z, H, 0.1).max() <= KKT_TOL
        # duplicated atoms do not change the optimal value
        np.testing.assert_allclose(
            lasso_objective(D_degenerate, Z, H, 0.1),
            lasso_objective(D, Z, lasso(D, Z, 0.1), 0.1),
            rtol=OBJ_RTOL,
        )


@pytest.mark.parametrize("method", ["cd", "active_set", "homotopy"])
def test_warm_start_same_solution_fewer_iterations(method):
    rng = np.random.default_rng(6)
    D, Z = _problem(rng, 40, 20, 30)
    H, it_cold = lasso(D, Z, 0.1, method=method, return_n_iter=True)
    H_near = lasso(D, Z, 0.11, method=method)
    H_warm, it_warm = lasso(D, Z, 0.1, H0=H_near, method=method, return_n_iter=True)
    np.testing.assert_allclose(
        lasso_objective(D, Z, H_warm, 0.1), lasso_objective(D, Z, H, 0.1), rtol=OBJ_RTOL
    )
    assert it_warm.sum() < it_cold.sum()
    _, it_exact = lasso(D, Z, 0.1, H0=H, method=method, return_n_iter=True)
    assert it_exact.max() <= 1


@pytest.mark.parametrize("cond", [None, 30.0], ids=["well", "moderate"])
def test_nearly_full_supports(cond):
    """The FedMM §6 regime (p = 20, K = 15, dense codes): Newton steps from G^{-1} on supports missing
    at most 4 atoms (when G is well enough conditioned) and least-squares cold starts give the same
    minimizers as scikit-learn, cold, warm from zero codes and warm from nearby codes."""
    rng = np.random.default_rng(11)
    D = rng.standard_normal((20, 15))
    if cond is not None:
        U, _, Vt = np.linalg.svd(D, full_matrices=False)
        D = (U * np.geomspace(1.0, 1.0 / cond, 15)) @ Vt
    Z = D @ rng.standard_normal((15, 40)) + 0.05 * rng.standard_normal((20, 40))
    lam = 0.02 / (cond or 1.0)  # small against the smallest singular value: dense codes
    H = lasso(D, Z, lam)
    assert (H != 0).sum(axis=0).mean() >= 11  # nearly full supports: the regime under test
    _check_against_sklearn(D, Z, lam, H)
    np.testing.assert_array_equal(lasso(D, Z, lam, H0=np.zeros_like(H)), H)  # zero codes = cold start
    H_near = lasso(D, Z, 1.3 * lam)
    _check_against_sklearn(D, Z, lam, lasso(D, Z, lam, H0=H_near))
    _check_against_sklearn(D, Z, lam, lasso(D, Z, lam, method="active_set"))


def test_layouts_and_views():
    rng = np.random.default_rng(7)
    p, K = 12, 5
    D = rng.standard_normal((p, K))
    data = rng.standard_normal((40, p))  # one sample per row, as in fedmm.data
    idx = np.array([3, 1, 30, 7, 7])
    Z_view = data[idx].T
    assert Z_view.flags.f_contiguous
    H = lasso(D, Z_view, 0.1)
    np.testing.assert_array_equal(H, lasso(np.ascontiguousarray(D), np.ascontiguousarray(Z_view), 0.1))
    Z32 = Z_view.astype(np.float32)
    np.testing.assert_array_equal(lasso(D, Z32, 0.1), lasso(D, Z32.astype(np.float64), 0.1))
    assert lasso(D, np.empty((p, 0)), 0.1).shape == (K, 0)


@pytest.mark.parametrize("znorm", [True, False])
def test_lasso_gram_equals_lasso(znorm):
    rng = np.random.default_rng(8)
    D, Z = _problem(rng, 20, 8, 10)
    znorm2 = (Z * Z).sum(axis=0) if znorm else None
    H = lasso_gram(D.T @ D, D.T @ Z, 0.1, znorm2=znorm2)
    assert lasso_kkt_violation(D, Z, H, 0.1).max() <= KKT_TOL
    np.testing.assert_allclose(H, lasso(D, Z, 0.1), rtol=1e-9, atol=1e-12)


def test_nonconvergence_warns():
    rng = np.random.default_rng(9)
    D, Z = _problem(rng, 30, 20, 4, cond=1e4)
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        lasso(D, Z, 1e-3, max_iter=1, method="cd")


def test_statistics_definition_and_objective():
    rng = np.random.default_rng(10)
    D, Z = _problem(rng, 15, 7, 20)
    A, B, H, obj = dictionary_statistics(D, Z, 0.1, return_codes=True, return_objective=True)
    b = Z.shape[1]
    np.testing.assert_array_equal(H, lasso(D, Z, 0.1))
    np.testing.assert_allclose(A, H @ H.T / b, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(A, A.T)
    np.testing.assert_allclose(B, Z @ H.T / b, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(obj, lasso_objective(D, Z, H, 0.1), rtol=1e-12)


def test_segmented_statistics_bit_identical():
    rng = np.random.default_rng(11)
    D, Z = _problem(rng, 24, 9, 57)
    offsets = np.array([0, 10, 10, 31, 32, 57])
    A, B, H, obj = dictionary_statistics(D, Z, 0.1, segments=offsets, return_codes=True,
                                         return_objective=True)
    assert A.shape == (5, 9, 9) and B.shape == (5, 24, 9)
    for s in range(5):
        lo, hi = offsets[s], offsets[s + 1]
        if hi == lo:
            assert (A[s] == 0).all() and (B[s] == 0).all()
            continue
        As, Bs, Hs, objs = dictionary_statistics(
            D, np.array(Z[:, lo:hi], order="F"), 0.1, return_codes=True, return_objective=True
        )
        np.testing.assert_array_equal(A[s], As)
        np.testing.assert_array_equal(B[s], Bs)
        np.testing.assert_array_equal(H[:, lo:hi], Hs)
        np.testing.assert_array_equal(obj[lo:hi], objs)


def test_threads_equal_serial():
    rng = np.random.default_rng(12)
    problems = [_problem(rng, 30, 12, 40) for _ in range(8)]

    def run(problem):
        return dictionary_statistics(problem[0], problem[1], 0.1)

    serial = [run(pb) for pb in problems]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = list(pool.map(run, problems))
    for (A1, B1), (A2, B2) in zip(serial, parallel):
        np.testing.assert_array_equal(A1, A2)
        np.testing.assert_array_equal(B1, B2)


def test_bad_inputs():
    rng = np.random.default_rng(13)
    D, Z = _problem(rng, 10, 4, 3)
    with pytest.raises(ValueError, match="'Z' of shape"):
        lasso(D, Z[:5], 0.1)
    Zn = Z.copy()
    Zn[0, 0] = np.nan
    with pytest.raises(ValueError, match="'Z' to contain only finite"):
        lasso(D, Zn, 0.1)
    Zn[0, 0] = np.inf
    with pytest.raises(ValueError, match="'Z' to contain only finite"):
        dictionary_statistics(D, Zn.T.copy().T, 0.1)  # F-ordered: checked in the kernel
    Dn = D.copy()
    Dn[1, 1] = np.nan
    with pytest.raises(ValueError, match="'D' to contain only finite"):
        lasso(Dn, Z, 0.1)
    for bad_lam in (-1.0, 0.0):
        with pytest.raises(ValueError, match="'lam'"):
            lasso(D, Z, bad_lam)
    with pytest.raises(ValueError, match="'H0' of shape"):
        lasso(D, Z, 0.1, H0=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="'method'"):
        lasso(D, Z, 0.1, method="lars")
    with pytest.raises(ValueError, match="'segments'"):
        dictionary_statistics(D, Z, 0.1, segments=[0, 2, 1, 3])
    with pytest.raises(ValueError, match="'segments'"):
        dictionary_statistics(D, Z, 0.1, segments=[0, 2])
    with pytest.raises(ValueError, match="'G' to be symmetric"):
        lasso_gram(np.triu(np.ones((4, 4))), D.T @ Z, 0.1)
    with pytest.raises(ValueError, match="'G' to be positive semidefinite"):
        lasso_gram(-np.eye(4), D.T @ Z, 0.1)
    G = D.T @ D
    for name, bad_G, bad_C in [("G", np.where(np.eye(4) > 0, np.nan, G), D.T @ Z),
                               ("G", np.where(np.eye(4) > 0, np.inf, G), D.T @ Z),
                               ("C", G, np.full((4, Z.shape[1]), np.nan))]:
        with pytest.raises(ValueError, match=f"'{name}' to contain only finite"):
            lasso_gram(bad_G, bad_C, 0.1)
    # the symmetry test is np.allclose's with rtol = 1e-12 and atol scaled by max |G|
    almost = G * 1e6
    almost[0, 1] *= 1 + 1e-14
    lasso_gram(almost, 1e3 * D.T @ Z, 0.1)
    almost[0, 1] *= 1 + 1e-9
    with pytest.raises(ValueError, match="'G' to be symmetric"):
        lasso_gram(almost, 1e3 * D.T @ Z, 0.1)


def _lars_lasso_path_reference(D, Z, lam):
    """scikit-learn's LARS-lasso path (``lars_path``, Gram form) evaluated at ``lam``, column by column.

    ``lars_path`` scales the penalty by the number of samples: alpha = lam / p."""
    from sklearn.linear_model import lars_path

    p, K = D.shape
    H = np.zeros((K, Z.shape[1]))
    for j in range(Z.shape[1]):
        alphas, _, coefs = lars_path(D, Z[:, j], Gram=D.T @ D, method="lasso", alpha_min=lam / p,
                                     max_iter=10 * K)
        # the path ends at alpha_min (or at the last kink above it): interpolate linearly in alpha
        target = lam / p
        if alphas[-1] > target * (1 + 1e-12):
            raise AssertionError("lars_path stopped before lam")
        k = np.searchsorted(-alphas, -target)
        if alphas[k] == target or k == 0:
            H[:, j] = coefs[:, k]
        else:
            w = (alphas[k - 1] - target) / (alphas[k - 1] - alphas[k])
            H[:, j] = (1 - w) * coefs[:, k - 1] + w * coefs[:, k]
    return H


@pytest.mark.parametrize("positive", [False, True])
@pytest.mark.parametrize("p, K", [(64, 256), (40, 12)], ids=["overcomplete", "undercomplete"])
def test_homotopy_equals_lars_path(p, K, positive):
    """The homotopy against an independent LARS-lasso path (scikit-learn's ``lars_path``): the same
    minimizer, objective to 1e-9 relative; its KKT conditions hold to rounding error; it takes fewer
    steps than the active set on the overcomplete shape (one per kink instead of about two per atom)."""
    rng = np.random.default_rng(21)
    D, Z = _problem(rng, p, K, 4)
    lam = 0.1
    H, n_iter = lasso(D, Z, lam, method="homotopy", positive=positive, return_n_iter=True)
    assert lasso_kkt_violation(D, Z, H, lam, positive).max() <= 1e-10
    # scikit-learn's positive lars_path does not reach the minimizer (its objective is higher than
    # ours, which satisfies KKT); its positive Lasso (coordinate descent) is the reference there
    ref = (lasso_sklearn(D, Z, lam, positive=True) if positive
           else _lars_lasso_path_reference(D, Z, lam))
    np.testing.assert_allclose(lasso_objective(D, Z, H, lam), lasso_objective(D, Z, ref, lam),
                               rtol=OBJ_RTOL)
    if positive:
        assert (H >= 0).all()
    _, n_iter_active = lasso(D, Z, lam, method="active_set", positive=positive, return_n_iter=True)
    if K > p:
        assert (H != 0).sum(axis=0).max() <= p
        assert n_iter.sum() < n_iter_active.sum()


def test_homotopy_is_the_overcomplete_auto_choice_and_gram_form_agrees():
    """``auto`` runs the homotopy when K > p (same codes bit for bit), and ``lasso_gram`` with
    ``method="homotopy"`` solves the same problems from G and C."""
    rng = np.random.default_rng(22)
    D, Z = _problem(rng, 20, 50, 6)
    H = lasso(D, Z, 0.05, method="homotopy")
    np.testing.assert_array_equal(lasso(D, Z, 0.05), H)
    Hg = lasso_gram(D.T @ D, D.T @ Z, 0.05, method="homotopy", znorm2=(Z * Z).sum(axis=0))
    np.testing.assert_allclose(lasso_objective(D, Z, Hg, 0.05), lasso_objective(D, Z, H, 0.05),
                               rtol=OBJ_RTOL)
    # dictionary statistics use the same solver (codes equal to lasso's bit for bit)
    _, _, Hs = dictionary_statistics(D, Z, 0.05, return_codes=True)
    np.testing.assert_array_equal(Hs, H)


@pytest.mark.parametrize("method", ["auto", "active_set"])
def test_dense_codes_on_an_ill_conditioned_dictionary_take_few_steps(method):
    # The dictionary θ_1 = T(S_0) after the mean-statistic start of the FedMM experiments (p = 64, K = 15): the
    # signals span the K columns of θ*, θ_1 = θ* X with X a product of random K x K factors, cond(DᵀD) ~ 1e5, and
    # the codes keep 11-15 atoms.  The active set's Newton step from the least-squares point changes the sign of
    # several coefficients at once; moving to the best breakpoint (not the first) takes 3-4 steps per cold column
    # where one breakpoint per step took about 13.
    from fedmm.data import synthetic_dictionary
    from fedmm.models import DictionaryLearning

    Z, _, _ = synthetic_dictionary(1000, 64, 15, seed=0)
    model = DictionaryLearning(15, 0.1, 0.2, n_features=64)
    theta0 = np.random.default_rng(8).standard_normal((64, 15))  # seed 0 would draw θ* itself
    theta1 = model.T(model.statistic(Z, theta0))
    assert np.linalg.cond(theta1.T @ theta1) > 1e4
    H, n_iter = lasso(theta1, Z[:200].T, 0.1, return_n_iter=True, method=method)
    assert (H != 0).sum(axis=0).mean() > 11
    assert n_iter[1:].mean() <= 6  # the first column, with no dense predecessor, starts from h = 0
    _check_against_sklearn(theta1, Z[:200].T, 0.1, H)


@pytest.mark.parametrize("method", ["auto", "active_set"])
@pytest.mark.parametrize("max_iter", [2, 1000])
def test_full_support_codes_are_one_newton_step_from_the_least_squares_point(method, max_iter):
    # Dense codes at a well-conditioned dictionary (the codes of a dictionary-learning round near a random
    # start: every atom active): after the first column, a cold column starts at the least-squares point
    # G⁻¹c and, when the Newton step x = G⁻¹(c − λ sign) keeps every sign, x is the solution in one step.
    # Checked against NumPy's solve of that system and the KKT conditions, with the iteration cap at the
    # smallest value that certifies such a column (2: the step, then the KKT test) and at the default.
    rng = np.random.default_rng(3)
    D = rng.standard_normal((64, 15))
    Z = D @ rng.standard_normal((15, 300)) + 0.1 * rng.standard_normal((64, 300))
    lam = 0.1
    if max_iter == 2:  # only the first column (cold from h = 0, 15 atoms to add) needs more steps
        with pytest.warns(ConvergenceWarning, match="1 of 300 columns"):
            H, n_iter = lasso(D, Z, lam, method=method, max_iter=max_iter, return_n_iter=True)
    else:
        H, n_iter = lasso(D, Z, lam, method=method, max_iter=max_iter, return_n_iter=True)
    # the columns after the first (cold from h = 0) start at the least-squares point
    H, n_iter, Z = H[:, 1:], n_iter[1:], Z[:, 1:]
    G, C = D.T @ D, D.T @ Z
    full = (H != 0).all(axis=0)
    assert full.mean() > 0.9
    closed = np.linalg.solve(G, C - lam * np.sign(H))
    np.testing.assert_allclose(H[:, full], closed[:, full], rtol=1e-10, atol=1e-12)
    assert (n_iter[full] == 1).all()
    assert lasso_kkt_violation(D, Z, H, lam).max() <= KKT_TOL


def _duplicated_atom(rng, p, K):
    D = rng.standard_normal((p, K))
    D[:, 3] = D[:, 1]  # G singular: no inverse (the solver's G^{-1} path is unavailable)
    return D


@pytest.mark.parametrize("case", ["dense_codes", "well_conditioned", "ill_conditioned", "duplicated_atom",
                                  "overcomplete"])
def test_compiled_dictionary_model_reads_its_per_parameter_gram_bit_for_bit(case):
    """The compiled dictionary model forms ``DᵀD`` and its inverse once per parameter (``T``, ``derive``)
    and every client statistic reads them: the statistic and the updated warm-start memory equal those
    of :func:`dictionary_statistics`, which forms them itself, bit for bit, whether the inverse is
    available or not, on cold and warm columns alike."""
    from fedmm import kernels

    rng = np.random.default_rng(28)
    p, K = {"overcomplete": (24, 70)}.get(case, (64, 15))
    if case == "ill_conditioned":
        D, Z = _problem(rng, p, K, 120, cond=3e3)
    elif case == "dense_codes":  # nearly full supports: the columns take G^{-1} from the parameter
        D, Z = rng.standard_normal((p, K)), 3.0 * rng.standard_normal((p, 120))
    elif case == "duplicated_atom":
        D = _duplicated_atom(rng, p, K)
        Z = D @ sparse_codes(rng, K, 120) + 0.1 * rng.standard_normal((p, 120))
    else:
        D, Z = _problem(rng, p, K, 120)
    data = np.ascontiguousarray(Z.T)
    model = kernels.dictionary_model(p, K, 0.1, 0.2)
    theta = model.derive(D.ravel())
    assert theta.shape == (model.theta_size,)
    gram = theta[2 * p * K:]
    np.testing.assert_array_equal(gram[:K * K].reshape(K, K), gram[:K * K].reshape(K, K).T)
    state = 1.0 if case in ("dense_codes", "well_conditioned") else -1.0
    assert gram[K * K] == state  # the inverse is available exactly where the solver would form it
    memory = np.zeros((data.shape[0], K))
    reference = memory.copy()
    for idx in (None, rng.choice(data.shape[0], 40, replace=False), rng.choice(data.shape[0], 60, replace=False)):
        rows = np.arange(data.shape[0]) if idx is None else idx
        S, _ = model.statistic(theta, data, idx, memory if idx is not None else None)
        A, B, H = dictionary_statistics(D, data[rows].T, 0.1, H0=reference[rows].T if idx is not None else None,
                                        return_codes=True)
        np.testing.assert_array_equal(S, np.concatenate([A.ravel(), B.ravel()]))
        if case == "dense_codes":
            assert (H != 0).sum(axis=0).mean() > K - 2
        if idx is not None:
            reference[rows] = H.T
            np.testing.assert_array_equal(memory, reference)
    # T forms the same per-parameter data as derive does from T's dictionary
    T_theta = model.T(S)
    np.testing.assert_array_equal(T_theta, model.derive(T_theta[:p * K]))
