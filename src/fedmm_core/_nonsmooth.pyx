# SPDX-License-Identifier: BSD-3-Clause
"""Cython wrapper of the FedMLS local-round kernel (``nonsmooth.c``).

Private module: the checked public face is :func:`fedmm.kernels.fedmls_local_round`.
Arrays must already have the documented dtypes and be C-contiguous; ``U`` and
``U_avg`` are written in place.  The loop runs without the GIL in slices of
bounded work (:data:`SLICE_WORK` multiply-adds), with a check for interrupts
(Ctrl-C) between slices; the slices give the same numbers bit for bit as one call.
"""
import numpy as np

from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport int64_t

from fedmm.fedmm_nonsmooth cimport (FEDMM_LOSS_HINGE, FEDMM_LOSS_L1, fedmm_fedmls_local_steps_ex,
                                    fedmm_minibatches_t, fedmm_nonsmooth_data_t)

include "status.pxi"

LOSS_HINGE = FEDMM_LOSS_HINGE
LOSS_L1 = FEDMM_LOSS_L1

#: Work of one slice without the GIL, in multiply-adds (a few milliseconds): the
#: longest a Ctrl-C waits before the loop stops.
SLICE_WORK = 1 << 22


def steps_per_slice(Py_ssize_t n, Py_ssize_t p, Py_ssize_t rows_per_step):
    """Local steps per slice: about :data:`SLICE_WORK` multiply-adds, at least one step."""
    cdef Py_ssize_t per_step = 2 * p * rows_per_step + 4 * n * p + 1
    return max(1, SLICE_WORK // per_step)


def fedmls_local_round(
    int loss,
    const double[:, ::1] design,
    const double[::1] target,
    const int64_t[::1] offsets,
    Py_ssize_t first_step,
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
    """Run local steps ``first_step+1 .. first_step+n_steps`` of every client; ``rows=None`` for
    full subgradients (else ``rows[r]`` is step ``first_step+1+r``)."""
    cdef Py_ssize_t n = U.shape[0], p = U.shape[1]
    cdef double[::1] work = np.empty(p, dtype=np.float64)
    cdef const int64_t[:, ::1] rows_v
    cdef const int64_t[::1] row_off_v
    cdef const double[::1] scale_v
    cdef const int64_t *rows_ptr = NULL
    cdef const int64_t *row_off_ptr = NULL
    cdef const double *scale_ptr = NULL
    cdef size_t row_stride = 0
    cdef Py_ssize_t done = 0, chunk, todo
    cdef fedmm_nonsmooth_data_t data
    cdef fedmm_minibatches_t batches
    cdef int status = FEDMM_OK
    if first_step < 0 or n_steps < 0:
        raise ValueError(f"Expected 'first_step' and 'n_steps' >= 0, got {first_step} and {n_steps}")
    if rows is not None:
        rows_v = rows
        row_off_v = row_offsets
        scale_v = scale
        if rows_v.shape[0] < n_steps:
            raise ValueError(f"Expected 'rows' with at least {n_steps} steps, got {rows_v.shape[0]}")
        row_off_ptr = &row_off_v[0]
        scale_ptr = &scale_v[0]
        row_stride = rows_v.shape[1]
    data.loss, data.n_clients, data.p = loss, n, p
    data.design, data.target, data.offsets = &design[0, 0], &target[0], &offsets[0]
    chunk = steps_per_slice(n, p, row_stride if rows is not None else design.shape[0])
    while True:
        todo = min(chunk, n_steps - done)
        # no rows for an empty slice (n_steps == 0): the kernel then only validates and copies U
        rows_ptr = &rows_v[done, 0] if rows is not None and todo > 0 else NULL
        batches.rows, batches.row_stride, batches.row_offsets, batches.scale = (
            rows_ptr, row_stride, row_off_ptr, scale_ptr)
        with nogil:
            status = fedmm_fedmls_local_steps_ex(&data, &batches, first_step + done, todo, weight, radius,
                                                 &V[0, 0], &U[0, 0], &U_avg[0, 0], &work[0])
        if status != FEDMM_OK:
            check_status(status, "fedmls_local_round failed")
        done += todo
        if done >= n_steps:
            break
        PyErr_CheckSignals()
