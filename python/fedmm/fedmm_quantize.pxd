# SPDX-License-Identifier: BSD-3-Clause
# cython: language_level=3
"""Cython declarations of ``fedmm_quantize.h``: unbiased quantizers and the fused encoders.

One family of the public C API; ``fedmm.fedmm_kernels`` cimports every family.
"""
from libc.stdint cimport uint8_t
from fedmm.fedmm_common cimport fedmm_bitgen_t

cdef extern from "fedmm_quantize.h" nogil:
    int FEDMM_SCHEME_IDENTITY
    int FEDMM_SCHEME_BLOCKP
    int FEDMM_SCHEME_DITHER
    int FEDMM_NORM_NONE
    int FEDMM_NORM_L2
    int FEDMM_NORM_LINF

    ctypedef struct fedmm_quantizer_t:
        int scheme
        int bits
        int norm
        size_t block

    int fedmm_quantizer_check(const fedmm_quantizer_t *spec, size_t q)
    int fedmm_quantize_f64(const double *x, size_t q, const fedmm_quantizer_t *spec,
                           fedmm_bitgen_t *rng, double *out)
    int fedmm_quantize_f32(const float *x, size_t q, const fedmm_quantizer_t *spec,
                           fedmm_bitgen_t *rng, double *out)
    int fedmm_quantizer_apply(const fedmm_quantizer_t *spec, const double *x, size_t q,
                              fedmm_bitgen_t *rng, double *out)
    int fedmm_encode_f64(const double *x, size_t q, const fedmm_quantizer_t *spec,
                         fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes)
    int fedmm_encode_f32(const float *x, size_t q, const fedmm_quantizer_t *spec,
                         fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes)
