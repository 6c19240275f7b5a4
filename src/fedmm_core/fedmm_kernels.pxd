# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of the public C API in ``fedmm_kernels.h``.

Downstream Cython code writes ``from fedmm.fedmm_kernels cimport ...`` and
compiles with ``include_dirs=[fedmm.get_include()]``, linking
``fedmm.get_library_dir()/libfedmm_kernels.a``.
"""
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "fedmm_kernels.h" nogil:
    int FEDMM_KERNELS_VERSION_MAJOR
    int FEDMM_KERNELS_VERSION_MINOR

    int FEDMM_OK
    int FEDMM_EINVAL
    int FEDMM_ENOMEM
    int FEDMM_ENONFINITE
    int FEDMM_EFORMAT
    int FEDMM_ELAPACK
    int FEDMM_ENOCONV

    const char *fedmm_strerror(int status)

    ctypedef struct fedmm_bitgen_t:
        void *state
        uint64_t (*next_uint64)(void *st) noexcept nogil
        uint32_t (*next_uint32)(void *st) noexcept nogil
        double (*next_double)(void *st) noexcept nogil
        uint64_t (*next_raw)(void *st) noexcept nogil

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

    ctypedef struct fedmm_blas_t:
        fedmm_dgemm_t dgemm
        fedmm_dsyrk_t dsyrk
        fedmm_dgemv_t dgemv
        fedmm_dpotrf_t dpotrf
        fedmm_dpotrs_t dpotrs
        fedmm_dsyevr_t dsyevr

    # ---- kernel families: one section per C source file ----
