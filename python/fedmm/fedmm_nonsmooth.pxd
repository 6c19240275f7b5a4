# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of ``fedmm_nonsmooth.h``: the local loop of FedMLS on non-smooth problems.

One family of the public C API; ``fedmm.fedmm_kernels`` cimports every family.
"""
from libc.stdint cimport int64_t

cdef extern from "fedmm_nonsmooth.h" nogil:
    int FEDMM_LOSS_HINGE
    int FEDMM_LOSS_L1
    int fedmm_fedmls_local_round(int loss, size_t n, size_t p, const double *design,
                                 const double *target, const int64_t *offsets, size_t n_steps,
                                 const int64_t *rows, size_t row_stride,
                                 const int64_t *row_offsets, const double *scale,
                                 double weight, double radius, const double *V, double *U,
                                 double *U_avg, double *work)
    int fedmm_fedmls_local_steps(int loss, size_t n, size_t p, const double *design,
                                 const double *target, const int64_t *offsets, size_t first_step,
                                 size_t n_steps, const int64_t *rows, size_t row_stride,
                                 const int64_t *row_offsets, const double *scale,
                                 double weight, double radius, const double *V, double *U,
                                 double *U_avg, double *work)
    ctypedef struct fedmm_nonsmooth_data_t:
        int loss
        size_t n_clients
        size_t p
        const double *design
        const double *target
        const int64_t *offsets
    ctypedef struct fedmm_minibatches_t:
        const int64_t *rows
        size_t row_stride
        const int64_t *row_offsets
        const double *scale
    int fedmm_fedmls_local_steps_ex(const fedmm_nonsmooth_data_t *data, const fedmm_minibatches_t *batches,
                                    size_t first_step, size_t n_steps, double weight, double radius,
                                    const double *V, double *U, double *U_avg, double *work)
