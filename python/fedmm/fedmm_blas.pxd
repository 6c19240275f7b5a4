# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of ``fedmm_blas.h``: the BLAS / LAPACK table.

One family of the public C API; ``fedmm.fedmm_kernels`` cimports every family.
"""
cdef extern from "fedmm_blas.h" nogil:
    ctypedef int fedmm_blas_int

    ctypedef void (*fedmm_dgemm_t)(const char *, const char *, const fedmm_blas_int *,
                                   const fedmm_blas_int *, const fedmm_blas_int *,
                                   const double *, const double *, const fedmm_blas_int *,
                                   const double *, const fedmm_blas_int *, const double *,
                                   double *, const fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dsyrk_t)(const char *, const char *, const fedmm_blas_int *,
                                   const fedmm_blas_int *, const double *, const double *,
                                   const fedmm_blas_int *, const double *, double *,
                                   const fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dgemv_t)(const char *, const fedmm_blas_int *,
                                   const fedmm_blas_int *, const double *, const double *,
                                   const fedmm_blas_int *, const double *,
                                   const fedmm_blas_int *, const double *, double *,
                                   const fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dpotrf_t)(const char *, const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dpotrs_t)(const char *, const fedmm_blas_int *,
                                    const fedmm_blas_int *, const double *,
                                    const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dsyevr_t)(const char *, const char *, const char *,
                                    const fedmm_blas_int *, double *, const fedmm_blas_int *,
                                    const double *, const double *, const fedmm_blas_int *,
                                    const fedmm_blas_int *, const double *, fedmm_blas_int *,
                                    double *, double *, const fedmm_blas_int *,
                                    fedmm_blas_int *, double *, const fedmm_blas_int *,
                                    fedmm_blas_int *, const fedmm_blas_int *,
                                    fedmm_blas_int *) noexcept nogil

    ctypedef void (*fedmm_dsytrf_t)(const char *, const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil

    ctypedef void (*fedmm_dsyevd_t)(const char *, const char *, const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, double *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dtrtri_t)(const char *, const char *, const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dsytrd_t)(const char *, const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, double *, double *, double *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dstebz_t)(const char *, const char *, const fedmm_blas_int *, const double *,
                                    const double *, const fedmm_blas_int *, const fedmm_blas_int *,
                                    const double *, const double *, const double *, fedmm_blas_int *,
                                    fedmm_blas_int *, double *, fedmm_blas_int *, fedmm_blas_int *,
                                    double *, fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dstein_t)(const fedmm_blas_int *, const double *, const double *,
                                    const fedmm_blas_int *, const double *, const fedmm_blas_int *,
                                    const fedmm_blas_int *, double *, const fedmm_blas_int *, double *,
                                    fedmm_blas_int *, fedmm_blas_int *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dorm2r_t)(const char *, const char *, const fedmm_blas_int *,
                                    const fedmm_blas_int *, const fedmm_blas_int *, const double *,
                                    const fedmm_blas_int *, const double *, double *,
                                    const fedmm_blas_int *, double *, fedmm_blas_int *) noexcept nogil
    ctypedef void (*fedmm_dormtr_t)(const char *, const char *, const char *, const fedmm_blas_int *,
                                    const fedmm_blas_int *, const double *, const fedmm_blas_int *,
                                    const double *, double *, const fedmm_blas_int *, double *,
                                    const fedmm_blas_int *, fedmm_blas_int *) noexcept nogil

    ctypedef void (*fedmm_dtrsv_t)(const char *, const char *, const char *, const fedmm_blas_int *,
                                   const double *, const fedmm_blas_int *, double *,
                                   const fedmm_blas_int *) noexcept nogil

    ctypedef struct fedmm_blas_t:
        fedmm_dgemm_t dgemm
        fedmm_dsyrk_t dsyrk
        fedmm_dgemv_t dgemv
        fedmm_dpotrf_t dpotrf
        fedmm_dpotrs_t dpotrs
        fedmm_dsyevr_t dsyevr
        fedmm_dsytrf_t dsytrf
        fedmm_dsyevd_t dsyevd
        fedmm_dtrtri_t dtrtri
        fedmm_dsytrd_t dsytrd
        fedmm_dstebz_t dstebz
        fedmm_dstein_t dstein
        fedmm_dorm2r_t dorm2r
        fedmm_dormtr_t dormtr
        fedmm_dtrsv_t dtrsv
