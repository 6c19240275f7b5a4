# SPDX-License-Identifier: BSD-3-Clause
"""Cython wrapper of the FedMLS local-round kernel (``nonsmooth.c``).

Private module: the checked public face is :func:`fedmm.kernels.fedmls_local_round`.
Arrays must already have the documented dtypes and be C-contiguous; ``U`` and
``U_avg`` are written in place.  The kernel runs without the GIL.
"""
import numpy as np

from libc.stdint cimport int64_t

from fedmm_kernels cimport (
    FEDMM_LOSS_HINGE,
    FEDMM_LOSS_L1,
    FEDMM_OK,
    fedmm_fedmls_local_round,
    fedmm_strerror,
)

LOSS_HINGE = FEDMM_LOSS_HINGE
LOSS_L1 = FEDMM_LOSS_L1


def fedmls_local_round(
    int loss,
    const double[:, ::1] design,
    const double[::1] target,
    const int64_t[::1] offsets,
    Py_ssize_t n_steps,
    object rows,
    object row_offsets,
    object scale,
    double weight,
    double radius,
    const double[:, ::1] V,
    double[:, ::1] U,
    double[:, ::1] U_avg,
):
    """Run ``n_steps`` local steps of every client; ``rows=None`` for full subgradients."""
    cdef Py_ssize_t n = U.shape[0], p = U.shape[1]
    cdef double[::1] work = np.empty(p, dtype=np.float64)
    cdef const int64_t[:, ::1] rows_v
    cdef const int64_t[::1] row_off_v
    cdef const double[::1] scale_v
    cdef const int64_t *rows_ptr = NULL
    cdef const int64_t *row_off_ptr = NULL
    cdef const double *scale_ptr = NULL
    cdef size_t row_stride = 0
    cdef int status
    if rows is not None:
        rows_v = rows
        row_off_v = row_offsets
        scale_v = scale
        if rows_v.shape[0] < n_steps:
            raise ValueError(f"Expected 'rows' with at least {n_steps} steps, got {rows_v.shape[0]}")
        rows_ptr = &rows_v[0, 0]
        row_off_ptr = &row_off_v[0]
        scale_ptr = &scale_v[0]
        row_stride = rows_v.shape[1]
    with nogil:
        status = fedmm_fedmls_local_round(
            loss, n, p, &design[0, 0], &target[0], &offsets[0], n_steps,
            rows_ptr, row_stride, row_off_ptr, scale_ptr, weight, radius,
            &V[0, 0], &U[0, 0], &U_avg[0, 0], &work[0])
    if status != FEDMM_OK:
        raise ValueError(f"fedmls_local_round failed: {fedmm_strerror(status).decode()}")
