# SPDX-License-Identifier: BSD-3-Clause
"""Private wrappers of the surrogate-space linear algebra (src/kernels/linalg.c).

Arguments are validated by :mod:`fedmm.kernels`; this layer allocates outputs
and workspaces (including the LAPACK workspace query) with the GIL and runs
each kernel inside ``nogil``.  LAPACK failures raise ``LinAlgError``.
"""
import numpy as np

cimport numpy as cnp
from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc

from fedmm.fedmm_kernels cimport *

include "blas_table.pxi"
include "status.pxi"

cnp.import_array()


cdef dict _RIDGE_MESSAGES = {
    FEDMM_ELAPACK: ("{what}: A + 2*ridge*I is not positive definite (Cholesky failed); "
                    "use ridge > 0 or a positive definite A"),
}
cdef dict _SA_STEP_MESSAGES = {
    FEDMM_ENONFINITE: "Expected a finite statistic S + gamma * H (NaN or inf in the server step)",
    FEDMM_ELAPACK: "{what}: LAPACK failed (eigensolver, or A + 2*ridge*I not positive definite)",
}


cdef int _raise_ridge(int status) except -1:
    """The exception of a failed ridge update (no-op on success)."""
    return check_status(status, "dictionary_update", _RIDGE_MESSAGES)


def dictionary_update_ridge(const double[::1, :] A, const double[::1, :] B, double ridge):
    """Return D = B (A + 2 ridge I)^{-1}, F-ordered (p, K)."""
    cdef fedmm_blas_int K = A.shape[0]
    cdef fedmm_blas_int p = B.shape[0]
    if A.shape[1] != K or B.shape[1] != K:
        raise ValueError(f"Expected A (K, K) and B (p, K), got {A.shape=}, {B.shape=}")
    D_arr = np.empty((p, K), dtype=np.float64, order="F")
    cdef double[::1, :] D = D_arr
    cdef double[::1] work = np.empty(fedmm_dictionary_update_ridge_work(p, K), dtype=np.float64)
    cdef int status
    with nogil:
        status = fedmm_dictionary_update_ridge(p, K, &A[0, 0], K, &B[0, 0], p, ridge, &D[0, 0], p,
                                               &work[0], &_BLAS)
    _raise_ridge(status)
    return D_arr


def dictionary_update_ridge_flat(const double[::1] s, fedmm_blas_int K, fedmm_blas_int p, double ridge):
    """``dictionary_update_ridge(asfortranarray(0.5 * (A + A.T)), asfortranarray(B), ridge)`` for the flat
    statistic ``s = [vec(A), vec(B)]`` (C order), with the same arithmetic: the server's per-round ``T``."""
    if s.shape[0] != K * K + p * K:
        raise ValueError(f"Expected a statistic of length K*K + p*K = {K * K + p * K}, got {s.shape[0]}")
    D_arr = np.empty((p, K), dtype=np.float64, order="F")
    cdef double[::1, :] D = D_arr
    cdef double[::1] work = np.empty(fedmm_dictionary_update_ridge_flat_work(p, K), dtype=np.float64)
    cdef int status
    with nogil:
        status = fedmm_dictionary_update_ridge_flat(p, K, &s[0], ridge, &D[0, 0], p, &work[0], &_BLAS)
    _raise_ridge(status)
    return D_arr


def dictionary_sa_step(const double[::1] S, const double[::1] H, double gamma, fedmm_blas_int K,
                       fedmm_blas_int p, double ridge, bint project):
    """``(S_new, D)`` of ``fedmm_dictionary_sa_step``: ``S_new = Π(S + γH)`` and ``D = T(S_new)`` (ridge),
    D a fresh F-ordered (p, K) array."""
    cdef Py_ssize_t q = K * K + p * K
    if S.shape[0] != q or H.shape[0] != q:
        raise ValueError(f"Expected statistics of length K*K + p*K = {q}, got {S.shape[0]} and {H.shape[0]}")
    S_new_arr = np.empty(q, dtype=np.float64)
    D_arr = np.empty((p, K), dtype=np.float64, order="F")
    cdef double[::1] S_new = S_new_arr
    cdef double[::1, :] D = D_arr
    cdef double[::1] work = np.empty(fedmm_dictionary_sa_step_work(p, K), dtype=np.float64)
    cdef fedmm_blas_int[::1] iwork = np.empty(max(<Py_ssize_t>fedmm_project_psd_iwork(K), 1), dtype=np.intc)
    cdef int status
    with nogil:
        status = fedmm_dictionary_sa_step(p, K, &S[0], &H[0], gamma, ridge, project, &S_new[0], &D[0, 0],
                                          &work[0], &iwork[0], &_BLAS)
    check_status(status, "dictionary SA step", _SA_STEP_MESSAGES)
    return S_new_arr, D_arr


def dictionary_update_unit_norm(const double[::1, :] A, const double[::1, :] B, D0, double ridge,
                                double tol, int max_iter):
    """Return ``(D, n_iter, converged)``; D is a fresh F-ordered (p, K) array."""
    cdef fedmm_blas_int K = A.shape[0]
    cdef fedmm_blas_int p = B.shape[0]
    if A.shape[1] != K or B.shape[1] != K:
        raise ValueError(f"Expected A (K, K) and B (p, K), got {A.shape=}, {B.shape=}")
    D_arr = np.array(D0, dtype=np.float64, order="F", copy=True)
    if D_arr.shape != (p, K):
        raise ValueError(f"Expected 'D0' of shape ({p}, {K}), got {D_arr.shape}")
    cdef double[::1, :] D = D_arr
    cdef double[::1] work = np.empty(p, dtype=np.float64)
    cdef int n_iter = 0, done = 0, chunk
    cdef int status = FEDMM_ENOCONV
    cdef fedmm_matrix_t A_view = fedmm_matrix_t(&A[0, 0], K, K, K)
    cdef fedmm_matrix_t B_view = fedmm_matrix_t(&B[0, 0], p, K, p)
    cdef fedmm_matrix_mut_t D_view = fedmm_matrix_mut_t(&D[0, 0], p, K, p)
    # Sweeps in slices of ~2**22 multiply-adds with a check for Ctrl-C between them: a sweep
    # depends on D only, so the slices give the same D and sweep count bit for bit as one call.
    chunk = <int> max(1, min(max_iter, (1 << 22) // (2 * <Py_ssize_t> K * K * p + 1)))
    while done < max_iter:
        chunk = min(chunk, max_iter - done)
        with nogil:
            status = fedmm_dictionary_update_unit_norm_ex(&A_view, &B_view, ridge, tol, chunk, &D_view, &n_iter,
                                                          &work[0])
        done += n_iter
        if status != FEDMM_ENOCONV:
            break
        PyErr_CheckSignals()
    if status != FEDMM_ENOCONV:
        check_status(status, "dictionary_update")
    return D_arr, done, status == FEDMM_OK


def project_psd(cnp.ndarray A, out=None, bint want_path=False):
    """Project sym(A) onto the PSD cone, for A (K, K) or a stack (m, K, K).

    ``A`` must be float64 (the public wrapper converts), other layouts are
    copied to C order;
    ``out`` (same shape, C-contiguous float64, writeable; may be ``A``) is
    allocated when None.  Returns ``out``, or ``(out, path)`` with the
    per-matrix path codes of ``fedmm_project_psd`` when ``want_path``.  Raw
    pointers instead of memoryviews: this runs every round on small matrices.
    """
    cdef int ndim = A.ndim
    if ndim != 2 and ndim != 3:
        raise ValueError(f"Expected 'A' with 2 or 3 dimension(s), got shape {(<object>A).shape}")
    if A.shape[ndim - 1] != A.shape[ndim - 2] or A.shape[ndim - 1] == 0:
        raise ValueError(
            f"Expected 'A' of shape (K, K) or (m, K, K) with K >= 1, got {(<object>A).shape}")
    if A.dtype != np.float64:
        raise ValueError(f"Expected 'A' of dtype float64, got {A.dtype}")
    if not cnp.PyArray_IS_C_CONTIGUOUS(A):
        A = np.ascontiguousarray(A)
    cdef cnp.ndarray result
    if out is None:
        result = cnp.PyArray_EMPTY(ndim, A.shape, cnp.NPY_FLOAT64, 0)
    else:
        result = out
        if (result.dtype != np.float64 or not cnp.PyArray_IS_C_CONTIGUOUS(result)
                or not result.flags.writeable or (<object>result).shape != (<object>A).shape):
            raise ValueError(
                f"Expected 'out' to be a writeable C-contiguous float64 ndarray of shape "
                f"{(<object>A).shape}")
    cdef fedmm_blas_int K = A.shape[ndim - 1]
    cdef int64_t m = A.shape[0] if ndim == 3 else 1
    path_arr = np.zeros(m, dtype=np.intc) if want_path else None
    if m == 0:
        return (result, path_arr) if want_path else result
    cdef int *path = <int *>cnp.PyArray_DATA(path_arr) if want_path else NULL
    cdef double *work = <double *>malloc(fedmm_project_psd_work(K) * sizeof(double))
    cdef fedmm_blas_int *iwork = <fedmm_blas_int *>malloc(
        fedmm_project_psd_iwork(K) * sizeof(fedmm_blas_int))
    cdef const double *A_ptr = <const double *>cnp.PyArray_DATA(A)
    cdef double *out_ptr = <double *>cnp.PyArray_DATA(result)
    cdef int status = FEDMM_ENOMEM
    if work != NULL and iwork != NULL:
        with nogil:
            status = fedmm_project_psd(K, m, A_ptr, out_ptr, work, iwork, path, &_BLAS)
    free(work)
    free(iwork)
    check_status(status, "project_psd", {
        FEDMM_ENOMEM: f"{{what}}: cannot allocate the workspace for K={K}",
        FEDMM_ELAPACK: "{what}: the symmetric eigensolver (dsyevr) did not converge",
        FEDMM_ENONFINITE: "Expected 'A' to contain only finite values (no NaN or inf)",
    })
    return (result, path_arr) if want_path else result


cdef extern from "math.h" nogil:
    int isfinite(double x)
    double fabs(double x)


def check_gram(const double[::1, :] G, const double[::1, :] C, double rtol=1e-12):
    """One GIL-free pass of the checks of a Gram-form LASSO input (``lasso_gram``).

    Returns 0 when ``G`` (K x K) and ``C`` (K x b), both F-contiguous float64,
    are finite, ``G`` is symmetric in the sense of ``np.allclose(G, G.T,
    rtol, atol=rtol * max(1, max|G|))`` and has a nonnegative diagonal; else 1
    (``G`` not finite), 2 (not symmetric), 3 (negative diagonal) or 4 (``C``
    not finite).
    """
    cdef Py_ssize_t K = G.shape[0], b = C.shape[1], i, j
    cdef double top = 1.0, a, d, atol
    cdef int status = 0
    with nogil:
        for j in range(G.shape[1]):
            for i in range(K):
                a = G[i, j]
                if not isfinite(a):
                    status = 1
                    break
                if fabs(a) > top:
                    top = fabs(a)
            if status:
                break
        if status == 0:
            atol = rtol * top
            for j in range(K):
                if G[j, j] < 0.0:
                    status = 3
                    break
                for i in range(j + 1, K):
                    d = fabs(G[i, j] - G[j, i])
                    if d > atol + rtol * fabs(G[j, i]) and d > atol + rtol * fabs(G[i, j]):
                        status = 2
                        break
                if status:
                    break
        if status == 0:
            for j in range(b):
                for i in range(C.shape[0]):
                    if not isfinite(C[i, j]):
                        status = 4
                        break
                if status:
                    break
    return status
