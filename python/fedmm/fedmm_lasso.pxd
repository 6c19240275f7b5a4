# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of ``fedmm_lasso.h``: batched LASSO and the dictionary-learning statistics.

One family of the public C API; ``fedmm.fedmm_kernels`` cimports every family.
"""
from libc.stdint cimport int64_t
from fedmm.fedmm_blas cimport fedmm_blas_int, fedmm_blas_t
from fedmm.fedmm_common cimport fedmm_interrupt_t, fedmm_matrix_mut_t, fedmm_matrix_t

cdef extern from "fedmm_lasso.h" nogil:
    int FEDMM_LASSO_AUTO
    int FEDMM_LASSO_CD
    int FEDMM_LASSO_ACTIVE_SET
    int FEDMM_LASSO_HOMOTOPY
    ctypedef struct fedmm_lasso_options_t:
        double lam
        int positive
        double tol
        int max_iter
        int warm_start
        int method
    size_t fedmm_lasso_gram_work(fedmm_blas_int K)
    int fedmm_lasso_gram_ex(const fedmm_matrix_t *G, const fedmm_matrix_t *C, const double *znorm2,
                            const fedmm_lasso_options_t *opts, const fedmm_matrix_mut_t *H, int *n_iter,
                            int64_t *n_unconverged, double *work, const fedmm_interrupt_t *interrupt)
    int fedmm_lasso_gram(fedmm_blas_int K, fedmm_blas_int b, const double *G,
                         fedmm_blas_int ldg, const double *C, fedmm_blas_int ldc,
                         const double *znorm2, const fedmm_lasso_options_t *opts, double *H,
                         fedmm_blas_int ldh, int *n_iter, int64_t *n_unconverged, double *work)
    int fedmm_lasso_gram_interruptible(fedmm_blas_int K, fedmm_blas_int b, const double *G,
                                       fedmm_blas_int ldg, const double *C, fedmm_blas_int ldc,
                                       const double *znorm2, const fedmm_lasso_options_t *opts,
                                       double *H, fedmm_blas_int ldh, int *n_iter,
                                       int64_t *n_unconverged, double *work,
                                       const fedmm_interrupt_t *interrupt)
    size_t fedmm_dictionary_statistics_work(fedmm_blas_int p, fedmm_blas_int K,
                                            fedmm_blas_int max_segment, int want_objective)
    int fedmm_dictionary_statistics(fedmm_blas_int p, fedmm_blas_int K, fedmm_blas_int b,
                                    const double *D, fedmm_blas_int ldd, const double *Z,
                                    fedmm_blas_int ldz, const fedmm_lasso_options_t *opts,
                                    int64_t n_segments, const int64_t *offsets, double *H,
                                    double *A, double *B, double *objective, int *n_iter,
                                    int64_t *n_unconverged, double *work, const fedmm_blas_t *blas)
    int fedmm_dictionary_statistics_interruptible(
        fedmm_blas_int p, fedmm_blas_int K, fedmm_blas_int b, const double *D, fedmm_blas_int ldd,
        const double *Z, fedmm_blas_int ldz, const fedmm_lasso_options_t *opts, int64_t n_segments,
        const int64_t *offsets, double *H, double *A, double *B, double *objective, int *n_iter,
        int64_t *n_unconverged, double *work, const fedmm_blas_t *blas,
        const fedmm_interrupt_t *interrupt)
    ctypedef struct fedmm_dictionary_statistics_out_t:
        double *H
        double *A
        double *B
        double *objective
        int *n_iter
        int64_t *n_unconverged
    int fedmm_dictionary_statistics_ex(const fedmm_matrix_t *D, const fedmm_matrix_t *Z,
                                       const fedmm_lasso_options_t *opts, int64_t n_segments,
                                       const int64_t *offsets,
                                       const fedmm_dictionary_statistics_out_t *out, double *work,
                                       const fedmm_blas_t *blas, const fedmm_interrupt_t *interrupt)
