# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of ``fedmm_linalg.h``: dictionary updates and the PSD projection.

One family of the public C API; ``fedmm.fedmm_kernels`` cimports every family.
"""
from libc.stdint cimport int64_t
from fedmm.fedmm_blas cimport fedmm_blas_int, fedmm_blas_t
from fedmm.fedmm_common cimport fedmm_matrix_mut_t, fedmm_matrix_t

cdef extern from "fedmm_linalg.h" nogil:
    size_t fedmm_dictionary_update_ridge_work(fedmm_blas_int p, fedmm_blas_int K)
    int fedmm_dictionary_update_ridge(fedmm_blas_int p, fedmm_blas_int K, const double *A,
                                      fedmm_blas_int lda, const double *B, fedmm_blas_int ldb,
                                      double eta, double *D, fedmm_blas_int ldd, double *work,
                                      const fedmm_blas_t *blas)
    int fedmm_dictionary_update_unit_norm(fedmm_blas_int p, fedmm_blas_int K, const double *A,
                                          fedmm_blas_int lda, const double *B,
                                          fedmm_blas_int ldb, double eta, double tol,
                                          int max_iter, double *D, fedmm_blas_int ldd,
                                          int *n_iter, double *work)
    int fedmm_dictionary_update_unit_norm_ex(const fedmm_matrix_t *A, const fedmm_matrix_t *B, double eta,
                                             double tol, int max_iter, const fedmm_matrix_mut_t *D,
                                             int *n_iter, double *work)
    size_t fedmm_project_psd_work(fedmm_blas_int K)
    size_t fedmm_project_psd_iwork(fedmm_blas_int K)
    int fedmm_project_psd(fedmm_blas_int K, int64_t n_matrices, const double *A, double *out,
                          double *work, fedmm_blas_int *iwork, int *path,
                          const fedmm_blas_t *blas)

    size_t fedmm_dictionary_update_ridge_flat_work(fedmm_blas_int p, fedmm_blas_int K)
    int fedmm_dictionary_update_ridge_flat(fedmm_blas_int p, fedmm_blas_int K, const double *s,
                                           double eta, double *D, fedmm_blas_int ldd, double *work,
                                           const fedmm_blas_t *blas)
    size_t fedmm_dictionary_sa_step_work(fedmm_blas_int p, fedmm_blas_int K)
    int fedmm_dictionary_sa_step(fedmm_blas_int p, fedmm_blas_int K, const double *S,
                                 const double *H, double gamma, double eta, int project,
                                 double *S_new, double *D, double *work, fedmm_blas_int *iwork,
                                 const fedmm_blas_t *blas)
