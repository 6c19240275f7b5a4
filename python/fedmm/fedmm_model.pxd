# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of ``fedmm_model.h``: the compiled surrogate model (the vtable of the round
engine).

One family of the public C API; ``fedmm.fedmm_kernels`` cimports every family.
"""
from libc.stdint cimport int64_t

cdef extern from "fedmm_model.h" nogil:
    ctypedef size_t (*fedmm_statistic_work_fn)(const void *ctx, int64_t b) noexcept nogil
    ctypedef int (*fedmm_statistic_fn)(const void *ctx, const double *theta, const double *data,
                                       int64_t n_samples, const int64_t *idx, int64_t b,
                                       double *memory, double *out, int64_t *n_unconverged,
                                       double *work) noexcept nogil
    ctypedef int (*fedmm_inplace_fn)(const void *ctx, double *x, double *work) noexcept nogil
    ctypedef int (*fedmm_map_fn)(const void *ctx, const double *s, double *theta,
                                 double *work) noexcept nogil
    ctypedef struct fedmm_model_t:
        const void *ctx
        int64_t q
        int64_t d
        int64_t theta_size
        int64_t sample_size
        int64_t memory_size
        size_t server_work
        fedmm_statistic_work_fn statistic_work
        fedmm_statistic_fn statistic
        fedmm_inplace_fn project
        fedmm_map_fn T
        fedmm_inplace_fn derive
        fedmm_inplace_fn project_theta
    int fedmm_model_check(const fedmm_model_t *model)
