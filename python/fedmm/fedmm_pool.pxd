# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of ``fedmm_pool.h``: the worker pool.

One family of the public C API; ``fedmm.fedmm_kernels`` cimports every family.
"""
from libc.stdint cimport int64_t

cdef extern from "fedmm_pool.h" nogil:
    ctypedef struct fedmm_pool_t:
        pass
    ctypedef void (*fedmm_pool_task_fn)(void *ctx, int64_t item, int worker) noexcept nogil
    int fedmm_pool_create(int n_threads, int64_t spin_ns, fedmm_pool_t **pool)
    void fedmm_pool_destroy(fedmm_pool_t *pool)
    int fedmm_pool_size(const fedmm_pool_t *pool)
    int fedmm_pool_run(fedmm_pool_t *pool, int64_t n_items, fedmm_pool_task_fn fn, void *ctx)
