/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_quantize.h -- unbiased quantizers and the fused encoders (quantize.c).
 *
 * One family of the public C API; fedmm_kernels.h includes every family
 * header and states the conventions they share (status codes, column-major
 * matrices, caller-provided workspaces).  This header compiles on its own.
 */
#ifndef FEDMM_QUANTIZE_H
#define FEDMM_QUANTIZE_H

#include "fedmm_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- quantizers (quantize.c) -------------------------------------------- */
/* Unbiased compressors of FedEM (Dieuleveut et al. 2021): block-p
 * quantization (App. B) and stochastic rounding / random dithering (Sec. 2).
 * Per block x_l (the last block may be shorter) with N = ||x_l||_r,
 * r in {2, inf}, and s = 2^(bits-1) - 1 levels:
 *     Q(x)_j = sign(x_j) k_j N / s,  k_j = floor(a_j) + Bernoulli(a_j - floor(a_j)),
 *     a_j = s |x_j| / N,
 * so E[Q(x)] = x; bits = 2 (s = 1) is block-p quantization.  The Bernoulli
 * draws are exact (see quantize.c): 8 random bits per coordinate, ties
 * resolved with further bits.  Blocks with N = 0 draw nothing.  On error
 * the generator may have been advanced and outputs are undefined.
 * On x86 with GCC or Clang the kernels run AVX2 loops when the CPU has AVX2
 * (portable loops otherwise, or when the library is built with
 * -DFEDMM_NO_SIMD); payloads, values and the random numbers drawn are the
 * same bit for bit on every build. */
#define FEDMM_SCHEME_IDENTITY 0
#define FEDMM_SCHEME_BLOCKP 1
#define FEDMM_SCHEME_DITHER 2
#define FEDMM_NORM_NONE 0
#define FEDMM_NORM_L2 1
#define FEDMM_NORM_LINF 2

/* A compressor as the compiled kernels see it (the value of
 * Compressor.quantizer_spec(q) in Python, fields in this order):
 *   scheme  FEDMM_SCHEME_IDENTITY, FEDMM_SCHEME_BLOCKP or FEDMM_SCHEME_DITHER;
 *   bits    bits per coordinate on the wire: 2 for block-p, 2..16 for
 *           dithering (s = 2^(bits-1) - 1 levels), 0 for identity;
 *   norm    FEDMM_NORM_L2 or FEDMM_NORM_LINF (FEDMM_NORM_NONE for identity);
 *   block   the effective block size in coordinates, 1 <= block <= q
 *           (0 for identity). */
typedef struct fedmm_quantizer {
    int scheme;
    int bits;
    int norm;
    size_t block;
} fedmm_quantizer_t;

/* FEDMM_OK when *spec is a valid quantizer for vectors of length q
 * (1 <= q <= 2^58, the field rules above), FEDMM_EINVAL otherwise (also for
 * spec == NULL).  The kernels below run this check themselves. */
int fedmm_quantizer_check(const fedmm_quantizer_t *spec, size_t q);

/* Fused quantize-and-dequantize: out[j] = Q(x)_j (float64, length q), the
 * values a receiver decodes; x and out must not overlap (ties re-read x
 * after out is written).  spec: FEDMM_SCHEME_BLOCKP or
 * FEDMM_SCHEME_DITHER (identity is FEDMM_EINVAL here: see
 * fedmm_quantizer_apply).  Consumes the random stream exactly like
 * fedmm_encode_*.  FEDMM_ENONFINITE on NaN/inf in x, FEDMM_EINVAL on an
 * invalid spec (fedmm_quantizer_check), rng == NULL, or |x_j| > 2^1023
 * (float64; norms are capped there so that decoded values stay finite). */
int fedmm_quantize_f64(const double *x, size_t q, const fedmm_quantizer_t *spec,
                       fedmm_bitgen_t *rng, double *out);
/* float32 input: norms are computed in double and rounded to float32 (the
 * value type sent on the wire) before use. */
int fedmm_quantize_f32(const float *x, size_t q, const fedmm_quantizer_t *spec,
                       fedmm_bitgen_t *rng, double *out);

/* Quant(x) with any compressor, what a client of the round engine sends:
 * out = x for FEDMM_SCHEME_IDENTITY (a copy, no check of the values, rng
 * unused and may be NULL; out may equal x), fedmm_quantize_f64(x, q, spec,
 * rng, out) otherwise (x and out must not overlap).  FEDMM_EINVAL when fedmm_quantizer_check(spec, q)
 * fails; other codes as fedmm_quantize_f64. */
int fedmm_quantizer_apply(const fedmm_quantizer_t *spec, const double *x, size_t q,
                          fedmm_bitgen_t *rng, double *out);

/* Quantize x and write the whole payload (header included, layout in the
 * wire section below) into payload[0 .. nbytes), nbytes ==
 * fedmm_wire_nbytes(spec, q, 8) (f64) or (spec, q, 4) (f32; norms sent as
 * float32).  One pass: the codes are packed as they are drawn, and the
 * random stream is consumed exactly as by fedmm_quantize_* (the decoded
 * payload equals their output bit for bit).  FEDMM_SCHEME_IDENTITY writes
 * the identity payload (fedmm_identity_encode_*; rng unused, may be NULL).
 * FEDMM_EINVAL on an invalid spec, a wrong nbytes or rng == NULL;
 * FEDMM_ENONFINITE as fedmm_quantize_*. */
int fedmm_encode_f64(const double *x, size_t q, const fedmm_quantizer_t *spec,
                     fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes);
int fedmm_encode_f32(const float *x, size_t q, const fedmm_quantizer_t *spec,
                     fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes);

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_QUANTIZE_H */
