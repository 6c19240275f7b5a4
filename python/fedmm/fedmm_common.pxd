# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of ``fedmm_common.h``: status codes, the interrupt check and the random-
number generator type.

One family of the public C API; ``fedmm.fedmm_kernels`` cimports every family.
"""
from libc.stdint cimport int64_t, uint32_t, uint64_t

cdef extern from "fedmm_common.h" nogil:
    int FEDMM_KERNELS_VERSION_MAJOR
    int FEDMM_KERNELS_VERSION_MINOR

    int FEDMM_OK
    int FEDMM_EINVAL
    int FEDMM_ENOMEM
    int FEDMM_ENONFINITE
    int FEDMM_EFORMAT
    int FEDMM_ELAPACK
    int FEDMM_ENOCONV
    int FEDMM_EINTR
    int FEDMM_ERANGE

    const char *fedmm_strerror(int status)
    int64_t FEDMM_INTERRUPT_WORK
    ctypedef int (*fedmm_poll_fn)(void *arg) noexcept nogil
    ctypedef struct fedmm_interrupt_t:
        fedmm_poll_fn poll
        void *arg

    ctypedef struct fedmm_bitgen_t:
        void *state
        uint64_t (*next_uint64)(void *st) noexcept nogil
        uint32_t (*next_uint32)(void *st) noexcept nogil
        double (*next_double)(void *st) noexcept nogil
        uint64_t (*next_raw)(void *st) noexcept nogil

    ctypedef struct fedmm_matrix_t:
        const double *data
        int64_t rows
        int64_t cols
        int64_t ld

    ctypedef struct fedmm_matrix_mut_t:
        double *data
        int64_t rows
        int64_t cols
        int64_t ld
