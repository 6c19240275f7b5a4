# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of ``fedmm_wire.h``: the wire format of compressed messages.

One family of the public C API; ``fedmm.fedmm_kernels`` cimports every family.
"""
from libc.stdint cimport uint8_t, uint64_t
from fedmm.fedmm_quantize cimport fedmm_quantizer_t

cdef extern from "fedmm_wire.h" nogil:
    const char *FEDMM_WIRE_MAGIC
    int FEDMM_WIRE_VERSION
    int FEDMM_WIRE_HEADER_NBYTES

    ctypedef struct fedmm_wire_header_t:
        int version
        int scheme
        int value_nbytes
        int norm
        int bits
        uint64_t q
        uint64_t block

    uint64_t fedmm_wire_nbytes(const fedmm_quantizer_t *spec, uint64_t q, int value_nbytes)
    int fedmm_identity_encode_f64(const double *x, size_t q, uint8_t *payload, size_t nbytes)
    int fedmm_identity_encode_f32(const float *x, size_t q, uint8_t *payload, size_t nbytes)
    int fedmm_wire_read_header(const uint8_t *payload, size_t nbytes,
                               fedmm_wire_header_t *hdr, const char **reason)
    int fedmm_wire_decode(const uint8_t *payload, size_t nbytes, double *out,
                          size_t out_len, const char **reason)
