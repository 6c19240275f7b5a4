# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of the public C API in ``fedmm_kernels.h``.

Downstream Cython code writes ``from fedmm.fedmm_kernels cimport ...`` and
compiles with ``include_dirs=[fedmm.get_include()]``, linking
``fedmm.get_library_dir()/libfedmm_kernels.a``.
"""
from libc.stdint cimport uint8_t, uint32_t, uint64_t

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

    # ---- compression (quantize.c) ----
    const char *FEDMM_WIRE_MAGIC
    int FEDMM_WIRE_VERSION
    int FEDMM_WIRE_HEADER_NBYTES
    int FEDMM_SCHEME_IDENTITY
    int FEDMM_SCHEME_BLOCKP
    int FEDMM_SCHEME_DITHER
    int FEDMM_NORM_NONE
    int FEDMM_NORM_L2
    int FEDMM_NORM_LINF

    ctypedef struct fedmm_wire_header_t:
        int version
        int scheme
        int value_nbytes
        int norm
        int bits
        uint64_t q
        uint64_t block

    uint64_t fedmm_wire_nbytes(int scheme, uint64_t q, uint64_t block, int bits,
                               int norm, int value_nbytes)
    int fedmm_quantize_f64(const double *x, size_t q, size_t block, int bits, int norm,
                           fedmm_bitgen_t *rng, double *out)
    int fedmm_quantize_f32(const float *x, size_t q, size_t block, int bits, int norm,
                           fedmm_bitgen_t *rng, double *out)
    int fedmm_encode_f64(const double *x, size_t q, size_t block, int bits, int norm,
                         int scheme, fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes)
    int fedmm_encode_f32(const float *x, size_t q, size_t block, int bits, int norm,
                         int scheme, fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes)
    int fedmm_identity_encode_f64(const double *x, size_t q, uint8_t *payload, size_t nbytes)
    int fedmm_identity_encode_f32(const float *x, size_t q, uint8_t *payload, size_t nbytes)
    int fedmm_wire_read_header(const uint8_t *payload, size_t nbytes,
                               fedmm_wire_header_t *hdr, const char **reason)
    int fedmm_wire_decode(const uint8_t *payload, size_t nbytes, double *out,
                          size_t out_len, const char **reason)
