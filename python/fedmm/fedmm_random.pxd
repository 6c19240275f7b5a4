# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of ``fedmm_random.h``: counter-based Philox streams and sampling without
replacement.

One family of the public C API; ``fedmm.fedmm_kernels`` cimports every family.
"""
from libc.stdint cimport int64_t, uint32_t, uint64_t
from fedmm.fedmm_common cimport fedmm_bitgen_t

cdef extern from "fedmm_random.h" nogil:
    ctypedef struct fedmm_philox_t:
        uint64_t counter[4]
        uint64_t key[2]
        uint64_t buffer[4]
        int buffer_pos
        int has_uint32
        uint32_t uinteger
    void fedmm_philox_seek(fedmm_philox_t *state, const uint64_t *key, const uint64_t *counter)
    uint64_t fedmm_philox_next_uint64(void *state)
    uint32_t fedmm_philox_next_uint32(void *state)
    double fedmm_philox_next_double(void *state)
    void fedmm_philox_bitgen(fedmm_philox_t *state, fedmm_bitgen_t *bitgen)
    int fedmm_sample_without_replacement(fedmm_bitgen_t *rng, int64_t n, int64_t b, int64_t *out,
                                         int64_t *work)
