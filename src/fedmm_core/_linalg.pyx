# SPDX-License-Identifier: BSD-3-Clause
"""Private wrappers of the surrogate-space linear algebra (src/kernels/linalg.c).

Arguments are validated by :mod:`fedmm.kernels`; this layer allocates outputs
and workspaces (including the LAPACK workspace query) with the GIL and runs
each kernel inside ``nogil``.  LAPACK failures raise ``LinAlgError``.
"""
import numpy as np
from numpy.linalg import LinAlgError

from libc.stdint cimport int64_t

from fedmm_kernels cimport *

include "blas_table.pxi"


def dictionary_update_ridge(const double[::1, :] A, const double[::1, :] B, double eta):
    """Return D = B (A + 2 eta I)^{-1}, F-ordered (p, K)."""
    cdef fedmm_blas_int K = A.shape[0]
    cdef fedmm_blas_int p = B.shape[0]
    if A.shape[1] != K or B.shape[1] != K:
        raise ValueError(f"Expected A (K, K) and B (p, K), got {A.shape=}, {B.shape=}")
    D_arr = np.empty((p, K), dtype=np.float64, order="F")
    cdef double[::1, :] D = D_arr
    cdef double[::1] work = np.empty(fedmm_dictionary_update_ridge_work(p, K), dtype=np.float64)
    cdef int status
    with nogil:
        status = fedmm_dictionary_update_ridge(p, K, &A[0, 0], K, &B[0, 0], p, eta, &D[0, 0], p,
                                               &work[0], &_BLAS)
    if status == FEDMM_ELAPACK:
        raise LinAlgError(
            "dictionary_update: A + 2*eta*I is not positive definite (Cholesky failed); "
            "use eta > 0 or a positive definite A")
    if status != FEDMM_OK:
        raise ValueError(f"dictionary_update: {fedmm_strerror(status).decode()}")
    return D_arr


def dictionary_update_unit_norm(const double[::1, :] A, const double[::1, :] B, D0, double eta,
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
    cdef int n_iter = 0
    cdef int status
    with nogil:
        status = fedmm_dictionary_update_unit_norm(p, K, &A[0, 0], K, &B[0, 0], p, eta, tol,
                                                   max_iter, &D[0, 0], p, &n_iter, &work[0])
    if status != FEDMM_OK and status != FEDMM_ENOCONV:
        raise ValueError(f"dictionary_update: {fedmm_strerror(status).decode()}")
    return D_arr, n_iter, status == FEDMM_OK


def project_psd(const double[:, :, ::1] A, double[:, :, ::1] out):
    """Project every matrix of the C-contiguous stack A (m, K, K) into out.

    ``out`` may be ``A`` itself.  Returns the per-matrix path codes
    (0: Cholesky, 1: partial eigendecomposition, 2: all eigenpairs).
    """
    cdef fedmm_blas_int K = A.shape[1]
    cdef int64_t m = A.shape[0]
    if A.shape[2] != K or out.shape[0] != m or out.shape[1] != K or out.shape[2] != K:
        raise ValueError(f"Expected matching (m, K, K) stacks, got {A.shape=}, {out.shape=}")
    path_arr = np.zeros(m, dtype=np.intc)
    if m == 0:
        return path_arr
    cdef int[::1] path = path_arr
    cdef fedmm_blas_int lwork = 0, liwork = 0
    cdef int status = fedmm_project_psd_query(K, &lwork, &liwork, &_BLAS)
    if status != FEDMM_OK:
        raise LinAlgError(f"project_psd: LAPACK workspace query failed ({fedmm_strerror(status).decode()})")
    cdef double[::1] work = np.empty(fedmm_project_psd_work(K, lwork), dtype=np.float64)
    cdef fedmm_blas_int[::1] iwork = np.empty(fedmm_project_psd_iwork(K, liwork), dtype=np.intc)
    with nogil:
        status = fedmm_project_psd(K, m, &A[0, 0, 0], &out[0, 0, 0], &work[0], lwork, &iwork[0],
                                   liwork, &path[0], &_BLAS)
    if status == FEDMM_ELAPACK:
        raise LinAlgError("project_psd: the symmetric eigensolver (dsyevr) did not converge")
    if status == FEDMM_ENONFINITE:
        raise ValueError("Expected 'A' to contain only finite values (no NaN or inf)")
    if status != FEDMM_OK:
        raise ValueError(f"project_psd: {fedmm_strerror(status).decode()}")
    return path_arr
