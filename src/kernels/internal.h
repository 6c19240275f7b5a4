/* SPDX-License-Identifier: BSD-3-Clause
 *
 * internal.h -- helpers shared by the kernel source files.  Private: not
 * installed, not part of the C API, may change at any time.  Functions with
 * external linkage carry the prefix fedmm__ (two underscores) and have hidden
 * visibility in the extension modules like every kernel symbol.
 *
 * The wire codec (wire.c) owns the byte layout of a payload; the fused
 * encoder in quantize.c quantizes and packs in one pass and reaches that
 * layout only through the helpers below (and, in its AVX2 loops, by writing
 * byte-aligned 2- and 8-bit codes in the same LSB-first layout as
 * fedmm__wire_pack_codes; tests/kernels/c_api/payload_hash.c checks the two against
 * each other through a -DFEDMM_NO_SIMD build).
 */
#ifndef FEDMM_INTERNAL_H
#define FEDMM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fedmm_kernels.h"

/* table initializers: R256(E) expands to E(0), E(1), ..., E(255) */
#define R4(E, b) E(b), E((b) + 1), E((b) + 2), E((b) + 3)
#define R16(E, b) R4(E, b), R4(E, (b) + 4), R4(E, (b) + 8), R4(E, (b) + 12)
#define R64(E, b) R16(E, b), R16(E, (b) + 16), R16(E, (b) + 32), R16(E, (b) + 48)
#define R256(E) R64(E, 0), R64(E, 64), R64(E, 128), R64(E, 192)

/* sum_i x[i] y[i] over four partial sums (independent chains: a dot product
 * of length n costs about n/4 additions' latency instead of n); the same
 * operations in the same order wherever it is inlined (lasso.c, linalg.c). */
static inline double fedmm__dot4(fedmm_blas_int n, const double *restrict x, const double *restrict y)
{
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    fedmm_blas_int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += x[i] * y[i];
        s1 += x[i + 1] * y[i + 1];
        s2 += x[i + 2] * y[i + 2];
        s3 += x[i + 3] * y[i + 3];
    }
    for (; i < n; ++i) s0 += x[i] * y[i];
    return (s0 + s1) + (s2 + s3);
}

/* A size or leading dimension of a matrix view (fedmm_matrix_t) that is
 * nonnegative and fits the BLAS integer: the struct-taking entry points
 * refuse any other with FEDMM_EINVAL before converting it. */
static inline int fedmm__fits_blas_int(int64_t v)
{
    return v >= 0 && (int64_t)(fedmm_blas_int)v == v;
}

/* A dictionary's Gram matrix G = D^T D and, when G allows it, its inverse M
 * = G^{-1}, formed once for many dictionary-statistics calls at the same D
 * (every client of a round, every client of the start exchange) instead of
 * once per call (lasso.c).  The buffer (fedmm__gram_size(K) doubles) holds G
 * (K x K, both triangles), then M's state (1.0: M follows, K x K; -1.0:
 * unavailable, as lasso.c's inverse_form decides), then M.  A call given the
 * view computes exactly what it computes on its own: G and M come from the
 * same operations on the same D, and the columns take M at the point where
 * they would form it. */
typedef struct fedmm__gram {
    const double *G;
    const double *M;
    int M_state;
} fedmm__gram_t;
size_t fedmm__gram_size(fedmm_blas_int K);
/* out: fedmm__gram_size(K) doubles; work: K * K doubles. */
int fedmm__gram_form(fedmm_blas_int p, fedmm_blas_int K, const double *D, fedmm_blas_int ldd,
                     double *out, double *work, const fedmm_blas_t *blas);
void fedmm__gram_view(fedmm_blas_int K, const double *buf, fedmm__gram_t *gram);
/* fedmm_dictionary_statistics_interruptible with gram (NULL: formed by the
 * call) formed by fedmm__gram_form from the same D: the same results, bit for
 * bit. */
int fedmm__dictionary_statistics_gram(
    fedmm_blas_int p, fedmm_blas_int K, fedmm_blas_int b, const double *D, fedmm_blas_int ldd,
    const double *Z, fedmm_blas_int ldz, const fedmm_lasso_options_t *opts, int64_t n_segments,
    const int64_t *offsets, double *H, double *A, double *B, double *objective, int *n_iter,
    int64_t *n_unconverged, double *work, const fedmm_blas_t *blas,
    const fedmm_interrupt_t *interrupt, const fedmm__gram_t *gram);

/* Largest vector length a payload may announce: q <= 2^58 keeps every size
 * product below 2^64 (any real payload is far smaller). */
#define FEDMM__WIRE_MAX_Q ((uint64_t)1 << 58)

/* The validity rule of a quantizer spec for vectors of length q, shared by
 * fedmm_quantizer_check (quantize.c) and fedmm_wire_nbytes (wire.c), in
 * uint64_t so that a header's q is judged the same on every platform. */
static inline int fedmm__quantizer_valid(const fedmm_quantizer_t *spec, uint64_t q)
{
    if (spec == NULL || q < 1 || q > FEDMM__WIRE_MAX_Q) return 0;
    if (spec->scheme == FEDMM_SCHEME_IDENTITY)
        return spec->block == 0 && spec->bits == 0 && spec->norm == FEDMM_NORM_NONE;
    if (spec->scheme != FEDMM_SCHEME_BLOCKP && spec->scheme != FEDMM_SCHEME_DITHER) return 0;
    if (spec->scheme == FEDMM_SCHEME_BLOCKP && spec->bits != 2) return 0;
    if (spec->bits < 2 || spec->bits > 16) return 0;
    if (spec->norm != FEDMM_NORM_L2 && spec->norm != FEDMM_NORM_LINF) return 0;
    return spec->block >= 1 && (uint64_t)spec->block <= q;
}

/* ---- little-endian scalars (independent of the host byte order) ---------- */

static inline void fedmm__store_u64_le(uint8_t *p, uint64_t v)
{
    for (int k = 0; k < 8; ++k) p[k] = (uint8_t)(v >> (8 * k));
}

static inline uint64_t fedmm__load_u64_le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v |= (uint64_t)p[k] << (8 * k);
    return v;
}

static inline void fedmm__store_f64_le(uint8_t *p, double x)
{
    uint64_t v;
    memcpy(&v, &x, 8);
    fedmm__store_u64_le(p, v);
}

static inline void fedmm__store_f32_le(uint8_t *p, float x)
{
    uint32_t v;
    memcpy(&v, &x, 4);
    for (int k = 0; k < 4; ++k) p[k] = (uint8_t)(v >> (8 * k));
}

static inline double fedmm__load_f64_le(const uint8_t *p)
{
    uint64_t v = fedmm__load_u64_le(p);
    double x;
    memcpy(&x, &v, 8);
    return x;
}

static inline float fedmm__load_f32_le(const uint8_t *p)
{
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) v |= (uint32_t)p[k] << (8 * k);
    float x;
    memcpy(&x, &v, 4);
    return x;
}

/* ---- codes and the bit stream (the layout of wire.c) --------------------- */

/* Value of a code (sign << (bits-1) | level): (-1)^sign * (level * scale),
 * scale = N / s.  The decoder and the fused quantizer both use it. */
static inline double fedmm__wire_code_value(uint32_t code, int bits, double scale)
{
    uint32_t level = code & ((1u << (bits - 1)) - 1u);
    double v = (double)level * scale;
    return (code >> (bits - 1)) ? -v : v;
}

/* Write `bits` bits of code into a bit stream at bit position pos
 * (LSB-first); touches only the bits of that code. */
static inline void fedmm__wire_put_bits(uint8_t *dst, uint64_t pos, uint32_t code, int bits)
{
    uint8_t *p = dst + (pos >> 3);
    unsigned sh = (unsigned)(pos & 7);
    uint32_t v = code << sh;
    uint32_t m = ((1u << bits) - 1u) << sh;
    unsigned nb = (sh + (unsigned)bits + 7) >> 3;
    for (unsigned k = 0; k < nb; ++k)
        p[k] = (uint8_t)((p[k] & ~(m >> (8 * k))) | (v >> (8 * k)));
}

/* Read the `bits`-bit code at bit position pos. */
static inline uint32_t fedmm__wire_get_bits(const uint8_t *src, uint64_t pos, int bits)
{
    const uint8_t *p = src + (pos >> 3);
    unsigned sh = (unsigned)(pos & 7);
    unsigned nb = (sh + (unsigned)bits + 7) >> 3;
    uint32_t v = 0;
    for (unsigned k = 0; k < nb; ++k) v |= (uint32_t)p[k] << (8 * k);
    return (v >> sh) & ((1u << bits) - 1u);
}

/* Write the n codes codes[0 .. n) from bit position pos on (wire.c). */
void fedmm__wire_pack_codes(uint8_t *dst, uint64_t pos, const uint16_t *codes, size_t n,
                            int bits);

/* Store the norm of block b (value_nbytes 4: rounded to float32; 8: as is)
 * into the payload's norm array. */
static inline void fedmm__wire_store_norm(uint8_t *norms, size_t b, int value_nbytes, double nrm)
{
    if (value_nbytes == 4) fedmm__store_f32_le(norms + 4 * b, (float)nrm);
    else fedmm__store_f64_le(norms + 8 * b, nrm);
}

/* Lay out a quantized payload of nbytes bytes for spec (BLOCKP or DITHER)
 * and q values of value_nbytes bytes (wire.c): checks that nbytes is
 * fedmm_wire_nbytes(spec, q, value_nbytes), writes the header, zeroes the
 * packed codes (padding included) and returns where the ceil(q/block) norms
 * (*norms) and the codes (*packed) go.  FEDMM_EINVAL (nothing written) on
 * a size mismatch or an invalid spec. */
int fedmm__wire_begin_payload(const fedmm_quantizer_t *spec, uint64_t q, int value_nbytes,
                              uint8_t *payload, size_t nbytes, uint8_t **norms,
                              uint8_t **packed);

/* ---- compiled models: the vtable filled from one static table per model ---- */

/* The callbacks of a compiled model (the function members of fedmm_model_t,
 * fedmm_model.h).  Each model's C file holds them in a static const table;
 * fedmm__model_fill is the one place that fills a fedmm_model_t. */
typedef struct fedmm__model_ops {
    fedmm_statistic_work_fn statistic_work;
    fedmm_statistic_fn statistic;
    fedmm_inplace_fn project;       /* NULL: S is the whole space */
    fedmm_map_fn T;
    fedmm_inplace_fn derive;        /* NULL: theta_size == d */
    fedmm_inplace_fn project_theta; /* NULL: identity */
} fedmm__model_ops_t;

/* The sizes of a compiled model (the size members of fedmm_model_t). */
typedef struct fedmm__model_sizes {
    int64_t q;
    int64_t d;
    int64_t theta_size;
    int64_t sample_size;
    int64_t memory_size;
    size_t server_work;
} fedmm__model_sizes_t;

/* *model = the model of context ctx with the callbacks *ops and the sizes
 * (every other byte zero). */
static inline void fedmm__model_fill(fedmm_model_t *model, const void *ctx, const fedmm__model_ops_t *ops,
                                     fedmm__model_sizes_t sizes)
{
    memset(model, 0, sizeof(*model));
    model->ctx = ctx;
    model->q = sizes.q;
    model->d = sizes.d;
    model->theta_size = sizes.theta_size;
    model->sample_size = sizes.sample_size;
    model->memory_size = sizes.memory_size;
    model->server_work = sizes.server_work;
    model->statistic_work = ops->statistic_work;
    model->statistic = ops->statistic;
    model->project = ops->project;
    model->T = ops->T;
    model->derive = ops->derive;
    model->project_theta = ops->project_theta;
}

#endif /* FEDMM_INTERNAL_H */
