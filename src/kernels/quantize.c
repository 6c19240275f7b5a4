/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * quantize.c -- unbiased compressors and their wire format.
 *
 * Block-p quantization (FedEM paper, Appendix B) and stochastic rounding /
 * random dithering (FedEM Section 2, QSGD) share one operator: per block
 * x_l of at most `block` coordinates, N = ||x_l||_r (r = 2 or inf), and with
 * s = 2^(bits-1) - 1 levels each coordinate becomes
 *
 *     Q(x)_j = sign(x_j) * k_j * (N / s),   a_j = s |x_j| / N,
 *     k_j = floor(a_j) + B_j,  B_j ~ Bernoulli(a_j - floor(a_j)),
 *
 * so E[Q(x)_j] = x_j.  bits = 2 (s = 1) is block-p quantization:
 * Q(x)_j = N sign(x_j) U_j with U_j ~ Bernoulli(|x_j| / N).
 *
 * Exact Bernoulli sampling with few random bits
 * ---------------------------------------------
 * In double precision a = s |x| / N is evaluated as A / 256 with
 * A = |x| * inv256, inv256 = 256 s / N rounded to double and then raised by
 * ulps until N * inv256 >= 256 s (so |x| == N gives level s exactly).  The
 * level is floor(A) >> 8 plus the Bernoulli of probability f = a - floor(a)
 * in [0, 1).  We want the event {U < f} for U uniform on [0, 1),
 * U = 0.b1 b2 b3 ... in binary.  Write f * 2^8 = T + r with
 * T = floor(f 2^8) = floor(A) mod 256 and r = A - floor(A) in [0, 1) (both
 * exact: scaling by a power of two and subtracting the floor are exact in
 * binary floating point).  With u the first 8 random bits as an integer and
 * U' the remaining bits,
 *     U < f  <=>  u < T,  or  u == T and U' < r.
 * The tie u == T (probability 2^-8) is resolved the same way with 64 more
 * random bits at a time (r * 2^64 = R + r', ...); it ends when the random bits
 * differ from the binary expansion of r, which is finite (a double has at most
 * 1074 fractional bits), or when r' == 0 (then U' >= r: round down).  So the
 * probability of rounding up is exactly f: the only deviation from
 * E[Q(x)] = x is the double-precision evaluation of a = |x| * (s / N)
 * (relative error below 2^-51), not the sampling.  One next_uint64 feeds 8
 * coordinates, which is what makes the kernel fast.
 *
 * Consumption of the random stream (identical in quantize and encode, which
 * share quantize_chunk(), and in the AVX2 and portable loops; documented so
 * that other implementations can reproduce it bit for bit):
 *   for each block, skipped entirely when N == 0:
 *     for each chunk of QCHUNK (= 256) consecutive coordinates of the
 *     block (the last chunk may be shorter, n coordinates):
 *       draw ceil(n / 8) values v_g = next_uint64(); coordinate 8g + k of the
 *       chunk uses the byte u = (v_g >> 8k) & 0xff;
 *       then for each coordinate of the chunk in order whose byte ties
 *       (u == T and r != 0): draw further next_uint64() values as above.
 */
/* The portable loops are written for the auto-vectorizer; GCC's -O2 cost
 * model ("very cheap") leaves them scalar, so this file asks for -O3.
 * Results must not depend on the compiler: no reassociation (no fast-math)
 * and no FMA contraction, whatever the command line says. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("O3", "fp-contract=off")
#endif

#include "fedmm_kernels.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define QCHUNK 256 /* coordinates per chunk: buffers live in L1 */
#define PREFETCH_MIN_BYTES ((size_t)1 << 24) /* inputs beyond the caches */
#define PAIR_MAX_BLOCK 4096                  /* norms by pairs: blocks up to, */
#define PAIR_MAX_BYTES ((size_t)1 << 20)     /* of inputs that stay in L2 */

/* On x86 with GCC or Clang the hot loops also exist as AVX2 intrinsics,
 * chosen per call with __builtin_cpu_supports (no state of our own); other
 * compilers and architectures, and builds with -DFEDMM_NO_SIMD, run the
 * portable loops only.  Both give bit-identical results: the AVX2 code does
 * the same IEEE operations on each coordinate (products, sums in the same
 * order, truncating conversions, max) and never FMA, which target("avx2")
 * does not enable. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) \
    && !defined(FEDMM_NO_SIMD)
#define FEDMM_X86_SIMD 1
#include <immintrin.h>
#define FEDMM_AVX2 __attribute__((target("avx2")))
#define FEDMM_AVX2_INLINE __attribute__((target("avx2"), always_inline)) inline
#endif

static int use_avx2(void)
{
#ifdef FEDMM_X86_SIMD
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

/* index of the lowest set bit of m != 0 */
static int lowest_bit(uint64_t m)
{
#if defined(__GNUC__)
    return __builtin_ctzll(m);
#else
    int k = 0;
    while (!(m & 1)) m >>= 1, ++k;
    return k;
#endif
}

/* table initializers: R256(E) expands to E(0), E(1), ..., E(255) */
#define R4(E, b) E(b), E((b) + 1), E((b) + 2), E((b) + 3)
#define R16(E, b) R4(E, b), R4(E, (b) + 4), R4(E, (b) + 8), R4(E, (b) + 12)
#define R64(E, b) R16(E, b), R16(E, (b) + 16), R16(E, (b) + 32), R16(E, (b) + 48)
#define R256(E) R64(E, 0), R64(E, 64), R64(E, 128), R64(E, 192)

/* ------------------------------------------------------------------------ */
/* little-endian scalar load/store (independent of the host byte order)      */

static void store_u64_le(uint8_t *p, uint64_t v)
{
    for (int k = 0; k < 8; ++k) p[k] = (uint8_t)(v >> (8 * k));
}

static uint64_t load_u64_le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v |= (uint64_t)p[k] << (8 * k);
    return v;
}

static void store_f64_le(uint8_t *p, double x)
{
    uint64_t v;
    memcpy(&v, &x, 8);
    store_u64_le(p, v);
}

static void store_f32_le(uint8_t *p, float x)
{
    uint32_t v;
    memcpy(&v, &x, 4);
    for (int k = 0; k < 4; ++k) p[k] = (uint8_t)(v >> (8 * k));
}

static double load_f64_le(const uint8_t *p)
{
    uint64_t v = load_u64_le(p);
    double x;
    memcpy(&x, &v, 8);
    return x;
}

static float load_f32_le(const uint8_t *p)
{
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) v |= (uint32_t)p[k] << (8 * k);
    float x;
    memcpy(&x, &v, 4);
    return x;
}

/* ------------------------------------------------------------------------ */
/* sizes                                                                     */

static int valid_scheme_args(int scheme, uint64_t q, uint64_t block, int bits,
                             int norm, int value_nbytes)
{
    if (q < 1 || (value_nbytes != 4 && value_nbytes != 8)) return 0;
    if (scheme == FEDMM_SCHEME_IDENTITY)
        return block == 0 && bits == 0 && norm == FEDMM_NORM_NONE;
    if (scheme == FEDMM_SCHEME_BLOCKP && bits != 2) return 0;
    if (scheme != FEDMM_SCHEME_BLOCKP && scheme != FEDMM_SCHEME_DITHER) return 0;
    if (bits < 2 || bits > 16) return 0;
    if (norm != FEDMM_NORM_L2 && norm != FEDMM_NORM_LINF) return 0;
    return block >= 1 && block <= q;
}

uint64_t fedmm_wire_nbytes(int scheme, uint64_t q, uint64_t block, int bits,
                           int norm, int value_nbytes)
{
    if (!valid_scheme_args(scheme, q, block, bits, norm, value_nbytes)) return 0;
    /* q <= 2^58 keeps every product below 2^64 (and any real payload is far
     * smaller); larger headers are rejected as malformed. */
    if (q > ((uint64_t)1 << 58)) return 0;
    if (scheme == FEDMM_SCHEME_IDENTITY)
        return FEDMM_WIRE_HEADER_NBYTES + q * (uint64_t)value_nbytes;
    uint64_t m = q / block + (q % block != 0);
    return FEDMM_WIRE_HEADER_NBYTES + m * (uint64_t)value_nbytes
           + (q * (uint64_t)bits + 7) / 8;
}

static void write_header(uint8_t *p, int scheme, int value_nbytes, int norm,
                         int bits, uint64_t q, uint64_t block)
{
    memset(p, 0, FEDMM_WIRE_HEADER_NBYTES);
    memcpy(p, FEDMM_WIRE_MAGIC, 4);
    p[4] = FEDMM_WIRE_VERSION;
    p[5] = (uint8_t)scheme;
    p[6] = (uint8_t)value_nbytes;
    p[7] = (uint8_t)norm;
    p[8] = (uint8_t)bits;
    store_u64_le(p + 16, q);
    store_u64_le(p + 24, block);
}

/* ------------------------------------------------------------------------ */
/* block norms                                                               */

/* Sums of squares and maxima of |x_j|, j < n8 (a multiple of 8), added into
 * 8 lanes: lane k takes j = k mod 8 in increasing j.  The order of the
 * additions is part of the result (it fixes the rounding of N). */
#define DEFINE_NORM_LANES(T, SUF)                                               \
    static void norm_lanes_##SUF(const T *x, size_t n8, double ssq[8],         \
                                 double mxa[8])                                 \
    {                                                                           \
        for (size_t j = 0; j < n8; j += 8) {                                    \
            for (size_t k = 0; k < 8; ++k) {                                    \
                double a = fabs((double)x[j + k]);                              \
                ssq[k] += a * a;                                                \
                mxa[k] = a > mxa[k] ? a : mxa[k];                               \
            }                                                                   \
        }                                                                       \
    }

DEFINE_NORM_LANES(double, f64)
DEFINE_NORM_LANES(float, f32)

#ifdef FEDMM_X86_SIMD
/* x[j .. j+8) as two 4-double vectors (float32 widened exactly) */
static FEDMM_AVX2_INLINE void load8_avx2(const void *x, int f32, size_t j,
                                         __m256d *lo, __m256d *hi)
{
    if (f32) {
        __m256 f = _mm256_loadu_ps((const float *)x + j);
        *lo = _mm256_cvtps_pd(_mm256_castps256_ps128(f));
        *hi = _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));
    } else {
        *lo = _mm256_loadu_pd((const double *)x + j);
        *hi = _mm256_loadu_pd((const double *)x + j + 4);
    }
}

/* norm_lanes_* with lanes 0-3 and 4-7 in two vectors; max(a, m) is
 * a > m ? a : m, as in the portable loop. */
static FEDMM_AVX2_INLINE void norm_lanes_avx2(const void *x, int f32, size_t n8,
                                              double ssq[8], double mxa[8])
{
    const __m256d absmask = _mm256_castsi256_pd(_mm256_set1_epi64x(INT64_MAX));
    __m256d s0 = _mm256_loadu_pd(ssq), s1 = _mm256_loadu_pd(ssq + 4);
    __m256d m0 = _mm256_loadu_pd(mxa), m1 = _mm256_loadu_pd(mxa + 4);
    for (size_t j = 0; j < n8; j += 8) {
        __m256d a0, a1;
        load8_avx2(x, f32, j, &a0, &a1);
        a0 = _mm256_and_pd(a0, absmask);
        a1 = _mm256_and_pd(a1, absmask);
        s0 = _mm256_add_pd(s0, _mm256_mul_pd(a0, a0));
        s1 = _mm256_add_pd(s1, _mm256_mul_pd(a1, a1));
        m0 = _mm256_max_pd(a0, m0);
        m1 = _mm256_max_pd(a1, m1);
    }
    _mm256_storeu_pd(ssq, s0);
    _mm256_storeu_pd(ssq + 4, s1);
    _mm256_storeu_pd(mxa, m0);
    _mm256_storeu_pd(mxa + 4, m1);
}

static FEDMM_AVX2 void norm_lanes_avx2_f64(const double *x, size_t n8, double ssq[8],
                                           double mxa[8])
{
    norm_lanes_avx2(x, 0, n8, ssq, mxa);
}

static FEDMM_AVX2 void norm_lanes_avx2_f32(const float *x, size_t n8, double ssq[8],
                                           double mxa[8])
{
    norm_lanes_avx2(x, 1, n8, ssq, mxa);
}
#define NORM_LANES(SUF, simd, x, n8, ssq, mxa)                                  \
    ((simd) ? norm_lanes_avx2_##SUF(x, n8, ssq, mxa) : norm_lanes_##SUF(x, n8, ssq, mxa))

/* norm_lanes_avx2 of two blocks, x[0 .. n8) and x[n .. n + n8), in one loop:
 * two independent chains of additions instead of one. */
static FEDMM_AVX2 void norm_lanes2_avx2(const void *x, int f32, size_t n, size_t n8,
                                        double ssq[2][8], double mxa[2][8])
{
    const __m256d absmask = _mm256_castsi256_pd(_mm256_set1_epi64x(INT64_MAX));
    __m256d s0 = _mm256_setzero_pd(), s1 = s0, m0 = s0, m1 = s0;
    __m256d t0 = s0, t1 = s0, p0 = s0, p1 = s0;
    for (size_t j = 0; j < n8; j += 8) {
        __m256d a0, a1, b0, b1;
        load8_avx2(x, f32, j, &a0, &a1);
        load8_avx2(x, f32, n + j, &b0, &b1);
        a0 = _mm256_and_pd(a0, absmask);
        a1 = _mm256_and_pd(a1, absmask);
        b0 = _mm256_and_pd(b0, absmask);
        b1 = _mm256_and_pd(b1, absmask);
        s0 = _mm256_add_pd(s0, _mm256_mul_pd(a0, a0));
        s1 = _mm256_add_pd(s1, _mm256_mul_pd(a1, a1));
        t0 = _mm256_add_pd(t0, _mm256_mul_pd(b0, b0));
        t1 = _mm256_add_pd(t1, _mm256_mul_pd(b1, b1));
        m0 = _mm256_max_pd(a0, m0);
        m1 = _mm256_max_pd(a1, m1);
        p0 = _mm256_max_pd(b0, p0);
        p1 = _mm256_max_pd(b1, p1);
    }
    _mm256_storeu_pd(ssq[0], s0);
    _mm256_storeu_pd(ssq[0] + 4, s1);
    _mm256_storeu_pd(mxa[0], m0);
    _mm256_storeu_pd(mxa[0] + 4, m1);
    _mm256_storeu_pd(ssq[1], t0);
    _mm256_storeu_pd(ssq[1] + 4, t1);
    _mm256_storeu_pd(mxa[1], p0);
    _mm256_storeu_pd(mxa[1] + 4, p1);
}
#else
#define NORM_LANES(SUF, simd, x, n8, ssq, mxa) ((void)(simd), norm_lanes_##SUF(x, n8, ssq, mxa))
#endif

/* Norm of one block of n >= 1 values (block_norm_end_*: from the lanes of
 * its first n - n % 8 values).  Returns FEDMM_ENONFINITE on NaN/inf
 * and FEDMM_EINVAL when max|x_j| > cap.  The result N satisfies
 * max_j |x_j| <= N <= cap (N >= max|x_j| keeps the probabilities <= 1;
 * cap = 2^1023 for float64 keeps s * (N / s) finite, FLT_MAX for float32).
 * Sums of squares run on 8 lanes (lane k takes j = k mod 8). */
#define DEFINE_BLOCK_NORM(T, SUF)                                               \
    static int block_norm_end_##SUF(const T *x, size_t n, int norm, double cap, \
                                    double ssq[8], double mxa[8], double *out)  \
    {                                                                           \
        size_t j = n - n % 8; /* the lanes hold the values before j */         \
        for (int k = 0; j < n; ++j, ++k) {                                      \
            double a = fabs((double)x[j]);                                      \
            ssq[k] += a * a;                                                    \
            mxa[k] = a > mxa[k] ? a : mxa[k];                                   \
        }                                                                       \
        double ss = ((ssq[0] + ssq[1]) + (ssq[2] + ssq[3]))                     \
                    + ((ssq[4] + ssq[5]) + (ssq[6] + ssq[7]));                  \
        double mx = 0;                                                          \
        for (int k = 0; k < 8; ++k) mx = mxa[k] > mx ? mxa[k] : mx;             \
        if (!isfinite(ss)) { /* NaN/inf in x, or an overflowing sum */          \
            for (j = 0; j < n; ++j)                                             \
                if (!isfinite((double)x[j])) return FEDMM_ENONFINITE;           \
        }                                                                       \
        if (mx > cap) return FEDMM_EINVAL; /* |x| too large to quantize */     \
        double nrm = mx;                                                        \
        if (norm == FEDMM_NORM_L2 && mx > 0) {                                  \
            if (isfinite(ss) && mx >= 0x1p-450 && mx <= 0x1p+450) {             \
                nrm = sqrt(ss);                                                 \
            } else { /* scaled sum: no overflow/underflow, x_max/mx == 1 */     \
                double t = 0;                                                   \
                for (j = 0; j < n; ++j) {                                       \
                    double v = fabs((double)x[j]) / mx;                         \
                    t += v * v;                                                 \
                }                                                               \
                nrm = mx * sqrt(t);                                             \
            }                                                                   \
            if (nrm < mx) nrm = mx;                                             \
        }                                                                       \
        if (nrm > cap) nrm = cap; /* still >= mx: cap is the dtype's max */     \
        *out = nrm;                                                             \
        return FEDMM_OK;                                                        \
    }                                                                           \
    static int block_norm_##SUF(const T *x, size_t n, int norm, double cap,    \
                                int simd, double *out)                          \
    {                                                                           \
        double ssq[8] = {0, 0, 0, 0, 0, 0, 0, 0};                               \
        double mxa[8] = {0, 0, 0, 0, 0, 0, 0, 0};                               \
        NORM_LANES(SUF, simd, x, n - n % 8, ssq, mxa);                          \
        return block_norm_end_##SUF(x, n, norm, cap, ssq, mxa, out);            \
    }

DEFINE_BLOCK_NORM(double, f64)
DEFINE_BLOCK_NORM(float, f32)

/* ------------------------------------------------------------------------ */
/* the shared core: codes of one chunk                                       */

/* What one chunk of a block needs.  The codes of a coordinate with value x
 * come from A = (x * pre) * inv256 with inv256 = 256 s / N' (N' = N * pre),
 * rounded up if needed so that N' * inv256 >= 256 s: the coordinates with
 * |x| == N get level s exactly.  A is 256 a exactly (scaling by 256 is
 * exact), level = floor(A / 256) + [U < f] where f = A/256 - floor(A/256);
 * the first 8 bits of U are compared with T = floor(A) mod 256 and ties go
 * to resolve_tie with r = A - floor(A).  Level 0 never carries the sign bit,
 * so a zero decodes to +0.0. */
typedef struct {
    const void *x;   /* the chunk's n input values */
    int f32;         /* x is float (else double) */
    size_t n;        /* 1 <= n <= QCHUNK */
    double pre;      /* 1, or 2^600 for a tiny norm (an exact scaling) */
    double inv256;
    double scale;    /* N / s: value of level 1 */
    int32_t s;       /* levels: 2^(bits-1) - 1 */
    int bits;
    double *out;     /* the chunk's n output values (quantize), or NULL */
    uint8_t *packed; /* the zeroed bit stream (encode), or NULL */
    uint64_t pos;    /* bit position of the chunk's first code in packed */
    const char *ahead; /* n coordinates to prefetch (next block), or NULL */
} chunk_t;

/* x_j in double */
static double chunk_input(const chunk_t *ck, size_t j)
{
    return ck->f32 ? (double)((const float *)ck->x)[j] : ((const double *)ck->x)[j];
}

/* Resolve a tie (the first 8 random bits equal T): returns 1 (round up)
 * with probability r in [0, 1), drawing 64 random bits at a time; draws
 * nothing when r == 0.  Written without data-dependent branches in the
 * usual case (one draw decides), as ties come at random. */
static int resolve_tie(double r, fedmm_bitgen_t *rng)
{
    while (r != 0.0) {
        double big = r * 0x1p64; /* exact, < 2^64 */
        double whole = floor(big);
        /* (uint64_t)whole, without the branch x86-64 compilers emit for it */
        uint64_t top = whole >= 0x1p63;
        uint64_t w = (uint64_t)(int64_t)(whole - (double)top * 0x1p63) | top << 63;
        uint64_t v = rng->next_uint64(rng->state);
        if (v != w) return v < w;
        r = big - whole; /* exact */
    }
    return 0;
}

/* value of a code: (-1)^sign * (level * scale), scale = N / s */
static double code_value(uint32_t code, int bits, double scale)
{
    uint32_t level = code & ((1u << (bits - 1)) - 1u);
    double v = (double)level * scale;
    return (code >> (bits - 1)) ? -v : v;
}

/* Write `bits` bits of code into a bit stream at bit position pos
 * (LSB-first); touches only the bits of that code. */
static void put_bits(uint8_t *dst, uint64_t pos, uint32_t code, int bits)
{
    uint8_t *p = dst + (pos >> 3);
    unsigned sh = (unsigned)(pos & 7);
    uint32_t v = code << sh;
    uint32_t m = ((1u << bits) - 1u) << sh;
    unsigned nb = (sh + (unsigned)bits + 7) >> 3;
    for (unsigned k = 0; k < nb; ++k)
        p[k] = (uint8_t)((p[k] & ~(m >> (8 * k))) | (v >> (8 * k)));
}

static uint32_t get_bits(const uint8_t *src, uint64_t pos, int bits)
{
    const uint8_t *p = src + (pos >> 3);
    unsigned sh = (unsigned)(pos & 7);
    unsigned nb = (sh + (unsigned)bits + 7) >> 3;
    uint32_t v = 0;
    for (unsigned k = 0; k < nb; ++k) v |= (uint32_t)p[k] << (8 * k);
    return (v >> sh) & ((1u << bits) - 1u);
}

/* Write n codes from bit position pos on. */
static void pack_codes(uint8_t *dst, uint64_t pos, const uint16_t *codes, size_t n,
                       int bits)
{
    size_t j = 0;
    if ((pos & 7) == 0) {
        uint8_t *p = dst + (pos >> 3);
        switch (bits) {
        case 2:
            for (; j + 4 <= n; j += 4)
                *p++ = (uint8_t)(codes[j] | codes[j + 1] << 2 | codes[j + 2] << 4
                                 | codes[j + 3] << 6);
            break;
        case 4:
            for (; j + 2 <= n; j += 2) *p++ = (uint8_t)(codes[j] | codes[j + 1] << 4);
            break;
        case 8:
            for (; j < n; ++j) *p++ = (uint8_t)codes[j];
            break;
        case 16:
            for (; j < n; ++j) {
                p[0] = (uint8_t)codes[j];
                p[1] = (uint8_t)(codes[j] >> 8);
                p += 2;
            }
            break;
        default:
            break;
        }
    }
    for (; j < n; ++j) put_bits(dst, pos + (uint64_t)j * (uint64_t)bits, codes[j], bits);
}

static void dequantize_codes(const uint16_t *codes, size_t n, int bits, double scale,
                             double *out)
{
    const uint32_t mask = (1u << (bits - 1)) - 1u;
    const int shift = bits - 1;
    for (size_t j = 0; j < n; ++j) {
        uint32_t c = codes[j];
        /* times +-1 is exact: the same value as code_value() */
        double sign = 1.0 - 2.0 * (double)(int32_t)(c >> shift);
        out[j] = ((double)(int32_t)(c & mask) * scale) * sign;
    }
}

/* Codes of the chunk's coordinates j0 .. j0+n-1 into its output (values or
 * bit stream). */
static void emit_codes(const chunk_t *ck, size_t j0, const uint16_t *codes, size_t n)
{
    if (ck->out)
        dequantize_codes(codes, n, ck->bits, ck->scale, ck->out + j0);
    else
        pack_codes(ck->packed, ck->pos + (uint64_t)j0 * (uint64_t)ck->bits, codes, n,
                   ck->bits);
}

/* Portable chunk: draws its ceil(n/8) words, writes the codes without the
 * ties resolved and sets bit j of ties (words of 64) where coordinate j
 * ties.  The fixed trip count QCHUNK lets the compiler vectorize. */
static void chunk_portable(const chunk_t *ck, fedmm_bitgen_t *rng,
                           uint64_t ties[QCHUNK / 64])
{
    uint8_t u[QCHUNK];
    uint8_t tie[QCHUNK];
    double xd[QCHUNK];
    int32_t sai[QCHUNK];
    uint16_t codes[QCHUNK];
    const size_t n = ck->n;
    const int shift = ck->bits - 1;
    const int32_t s = ck->s;
    size_t ngroups = (n + 7) / 8;
    for (size_t g = 0; g < ngroups; ++g) {
        uint64_t v = rng->next_uint64(rng->state);
        for (size_t k = 0; k < 8; ++k) u[8 * g + k] = (uint8_t)(v >> (8 * k));
    }
    memset(u + ngroups * 8, 0, QCHUNK - ngroups * 8);
    for (size_t j = 0; j < QCHUNK; ++j) xd[j] = j < n ? chunk_input(ck, j) * ck->pre : 0.0;
    /* The signed product keeps the sign: trunc(x * inv256) =
     * sign(x) trunc(|x| inv256), and a nonzero level implies a nonzero
     * truncation. */
    for (size_t j = 0; j < QCHUNK; ++j) sai[j] = (int32_t)(xd[j] * ck->inv256);
    for (size_t j = 0; j < QCHUNK; ++j) {
        int32_t Ai = sai[j] < 0 ? -sai[j] : sai[j];
        int32_t T = Ai & 255;
        int32_t uj = u[j];
        int32_t c = (Ai >> 8) + (uj < T);
        c = c > s ? s : c;
        int32_t neg = (sai[j] < 0) & (c != 0);
        codes[j] = (uint16_t)(c | (neg << shift));
        tie[j] = (uint8_t)(uj == T);
    }
    for (size_t j = 0; j < n; ++j) ties[j / 64] |= (uint64_t)tie[j] << (j % 64);
    emit_codes(ck, 0, codes, n);
}

#ifdef FEDMM_X86_SIMD
/* bit k of b moved to bit 2k: packs 8 one-bit fields into 2-bit fields */
#define SPREAD2(b)                                                              \
    (((b) & 1) | ((b) & 2) << 1 | ((b) & 4) << 2 | ((b) & 8) << 3                  \
     | ((b) & 16) << 4 | ((b) & 32) << 5 | ((b) & 64) << 6 | ((b) & 128) << 7)
static const uint16_t SPREAD2_LUT[256] = {R256(SPREAD2)};

/* Levels of 8 coordinates a0|a1 with random word v, before the clamp to
 * s: the lanes of chunk_portable's loops.  *sai gets the signed truncations
 * (their sign is the code's sign where the level is nonzero; sai == 0
 * implies level 0), *tie the 8-bit mask of ties. */
static FEDMM_AVX2_INLINE __m256i group_levels_avx2(__m256d a0, __m256d a1,
                                                   const chunk_t *ck, uint64_t v,
                                                   __m256i *sai, unsigned *tie)
{
    const __m256d inv = _mm256_set1_pd(ck->inv256);
    __m128i i0 = _mm256_cvttpd_epi32(_mm256_mul_pd(a0, inv));
    __m128i i1 = _mm256_cvttpd_epi32(_mm256_mul_pd(a1, inv));
    *sai = _mm256_inserti128_si256(_mm256_castsi128_si256(i0), i1, 1);
    __m256i Ai = _mm256_abs_epi32(*sai);
    __m256i T = _mm256_and_si256(Ai, _mm256_set1_epi32(255));
    __m256i u = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)&v));
    __m256i up = _mm256_cmpgt_epi32(T, u); /* -1 where u < T */
    *tie = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(u, T)));
    return _mm256_sub_epi32(_mm256_srli_epi32(Ai, 8), up);
}

/* sign-magnitude codes c | (sai < 0 && c != 0) << (bits - 1) */
static FEDMM_AVX2_INLINE __m256i group_codes_avx2(__m256i c, __m256i sai, int bits)
{
    __m256i neg = _mm256_srli_epi32(_mm256_sign_epi32(c, sai), 31);
    return _mm256_or_si256(c, _mm256_sll_epi32(neg, _mm_cvtsi32_si128(bits - 1)));
}

enum { EMIT_VALUES, EMIT_BITS2, EMIT_BITS8, EMIT_CODES };

/* chunk_portable with AVX2 for pre == 1, eight coordinates (one random
 * word) at a time; emit is a constant of each inlined copy.  The codes go
 * straight to the output in the common layouts (values, or a byte-aligned
 * stream of 2 or 8 bits per code); EMIT_CODES collects 16-bit codes for
 * pack_codes().  Interleaving the draws with the arithmetic lets the
 * generator's latency overlap with the work. */
static FEDMM_AVX2_INLINE void chunk_avx2(const chunk_t *ck, int f32, int emit,
                                         fedmm_bitgen_t *rng,
                                         uint64_t ties[QCHUNK / 64])
{
    uint16_t codes[QCHUNK];
    uint8_t tie8[QCHUNK / 8] = {0};
    const size_t n = ck->n, nfull = n / 8;
    uint8_t *dst = ck->packed ? ck->packed + ck->pos / 8 : NULL;
    /* locals, not reloaded from *ck and *rng after every call */
    const void *x = ck->x;
    const char *ahead = ck->ahead;
    double *out = ck->out;
    uint64_t (*next_uint64)(void *) = rng->next_uint64;
    void *state = rng->state;
    __m256i sai, c;
    unsigned tie;
    for (size_t g = 0; g < nfull; ++g) {
        uint64_t v = next_uint64(state);
        __m256d a0, a1;
        if (ahead) _mm_prefetch(ahead + 8 * g * (f32 ? 4 : 8), _MM_HINT_T0);
        load8_avx2(x, f32, 8 * g, &a0, &a1);
        c = group_levels_avx2(a0, a1, ck, v, &sai, &tie);
        tie8[g] = (uint8_t)tie;
        if (emit != EMIT_BITS2) c = _mm256_min_epi32(c, _mm256_set1_epi32(ck->s));
        if (emit == EMIT_VALUES) { /* (-level) * scale == -(level * scale) */
            const __m256d scale = _mm256_set1_pd(ck->scale);
            __m256i sc = _mm256_sign_epi32(c, sai);
            __m256d v0 = _mm256_cvtepi32_pd(_mm256_castsi256_si128(sc));
            __m256d v1 = _mm256_cvtepi32_pd(_mm256_extracti128_si256(sc, 1));
            _mm256_storeu_pd(out + 8 * g, _mm256_mul_pd(v0, scale));
            _mm256_storeu_pd(out + 8 * g + 4, _mm256_mul_pd(v1, scale));
        } else if (emit == EMIT_BITS2) { /* s = 1: level min(c, 1) is [c > 0] */
            unsigned lv = (unsigned)_mm256_movemask_ps(
                _mm256_castsi256_ps(_mm256_cmpgt_epi32(c, _mm256_setzero_si256())));
            unsigned sg = lv & (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(sai));
            uint16_t w = (uint16_t)(SPREAD2_LUT[lv] | SPREAD2_LUT[sg] << 1);
            memcpy(dst + 2 * g, &w, 2); /* x86: little-endian */
        } else if (emit == EMIT_BITS8) {
            const __m256i byte0 = _mm256_setr_epi8(
                0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
            __m256i b = _mm256_shuffle_epi8(group_codes_avx2(c, sai, 8), byte0);
            b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
            _mm_storel_epi64((__m128i *)(dst + 8 * g), _mm256_castsi256_si128(b));
        } else {
            __m256i code = group_codes_avx2(c, sai, ck->bits);
            __m256i c16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(code, code), 0x08);
            _mm_storeu_si128((__m128i *)(codes + 8 * g), _mm256_castsi256_si128(c16));
        }
    }
    if (n % 8) { /* last, partial group: zero padding, its codes via codes[] */
        double tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (size_t k = 0; 8 * nfull + k < n; ++k) tail[k] = chunk_input(ck, 8 * nfull + k);
        uint64_t v = rng->next_uint64(rng->state);
        c = group_levels_avx2(_mm256_loadu_pd(tail), _mm256_loadu_pd(tail + 4), ck, v,
                              &sai, &tie);
        c = _mm256_min_epi32(c, _mm256_set1_epi32(ck->s));
        tie8[nfull] = (uint8_t)(tie & ((1u << (n % 8)) - 1u));
        __m256i code = group_codes_avx2(c, sai, ck->bits);
        __m256i c16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(code, code), 0x08);
        _mm_storeu_si128((__m128i *)(codes + 8 * nfull), _mm256_castsi256_si128(c16));
        if (emit != EMIT_CODES) emit_codes(ck, 8 * nfull, codes + 8 * nfull, n % 8);
    }
    if (emit == EMIT_CODES) emit_codes(ck, 0, codes, n);
    memcpy(ties, tie8, sizeof tie8); /* x86: byte g holds bits 8g .. 8g+7 */
}

/* one copy of chunk_avx2 per output layout */
#define DEFINE_CHUNK_AVX2(SUF, F32)                                             \
    static FEDMM_AVX2 void chunk_avx2_##SUF(const chunk_t *ck, fedmm_bitgen_t *rng, \
                                            uint64_t ties[QCHUNK / 64])         \
    {                                                                           \
        if (ck->out)                                                            \
            chunk_avx2(ck, F32, EMIT_VALUES, rng, ties);                        \
        else if (ck->pos % 8 == 0 && ck->bits == 2)                             \
            chunk_avx2(ck, F32, EMIT_BITS2, rng, ties);                         \
        else if (ck->pos % 8 == 0 && ck->bits == 8)                             \
            chunk_avx2(ck, F32, EMIT_BITS8, rng, ties);                         \
        else                                                                    \
            chunk_avx2(ck, F32, EMIT_CODES, rng, ties);                         \
    }
DEFINE_CHUNK_AVX2(f64, 0)
DEFINE_CHUNK_AVX2(f32, 1)
#endif

/* Quantize one chunk into its output.  The ceil(n/8) words of the chunk
 * are drawn first, then each tie, in coordinate order, draws its own. */
static void quantize_chunk(const chunk_t *ck, int simd, fedmm_bitgen_t *rng)
{
    uint64_t ties[QCHUNK / 64] = {0, 0, 0, 0};
#ifdef FEDMM_X86_SIMD
    if (simd && ck->pre == 1.0 && ck->f32) /* tiny norms take the portable path */
        chunk_avx2_f32(ck, rng, ties);
    else if (simd && ck->pre == 1.0)
        chunk_avx2_f64(ck, rng, ties);
    else
        chunk_portable(ck, rng, ties);
#else
    (void)simd;
    chunk_portable(ck, rng, ties);
#endif
    for (size_t w = 0; w < QCHUNK / 64; ++w) {
        for (uint64_t m = ties[w]; m != 0; m &= m - 1) {
            size_t j = 64 * w + (size_t)lowest_bit(m);
            double xd = chunk_input(ck, j) * ck->pre;
            double A = fabs(xd) * ck->inv256;
            int32_t Ai = (int32_t)A;
            /* rewritten either way: rounding down gives the code already there */
            int32_t c = (Ai >> 8) + resolve_tie(A - (double)Ai, rng);
            c = c > ck->s ? ck->s : c;
            uint32_t code = (uint32_t)c | (uint32_t)((xd < 0) & (c != 0)) << (ck->bits - 1);
            if (ck->out)
                ck->out[j] = code_value(code, ck->bits, ck->scale);
            else
                put_bits(ck->packed, ck->pos + (uint64_t)j * (uint64_t)ck->bits, code,
                         ck->bits);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* quantize / encode drivers                                                 */

/* Norms are rounded to the payload's value type before use, so that the
 * probabilities and the decoded values both use the transmitted norm.  For
 * float32 input the norm is rounded to float32 (round to nearest keeps
 * N >= max|x_j| because max|x_j| is itself a float32). */
static int norm_of_block(const void *x, int f32, size_t n, int norm, int simd,
                         double *out)
{
    if (!f32) return block_norm_f64((const double *)x, n, norm, 0x1p1023, simd, out);
    int st = block_norm_f32((const float *)x, n, norm, (double)FLT_MAX, simd, out);
    if (st == FEDMM_OK) *out = (double)(float)*out;
    return st;
}

/* norm_of_block of two consecutive blocks of n values each: norms nrm[k]
 * with statuses st[k]; with AVX2 their norm chains run side by side. */
static void norm_of_pair(const void *x, int f32, size_t n, int norm, int simd,
                         double nrm[2], int st[2])
{
#ifdef FEDMM_X86_SIMD
    if (simd) {
        double ssq[2][8], mxa[2][8];
        norm_lanes2_avx2(x, f32, n, n - n % 8, ssq, mxa);
        for (size_t k = 0; k < 2; ++k) {
            if (f32) {
                st[k] = block_norm_end_f32((const float *)x + k * n, n, norm,
                                           (double)FLT_MAX, ssq[k], mxa[k], &nrm[k]);
                if (st[k] == FEDMM_OK) nrm[k] = (double)(float)nrm[k];
            } else {
                st[k] = block_norm_end_f64((const double *)x + k * n, n, norm, 0x1p1023,
                                           ssq[k], mxa[k], &nrm[k]);
            }
        }
        return;
    }
#endif
    const size_t itemsize = f32 ? sizeof(float) : sizeof(double);
    for (size_t k = 0; k < 2; ++k)
        st[k] = norm_of_block((const char *)x + k * n * itemsize, f32, n, norm, simd, &nrm[k]);
}

/* One driver for both input types and both outputs: out (values) or
 * packed (+ norm_dst) -- exactly one of them is non-NULL.  The random stream
 * is consumed by quantize_chunk() only, identically for both outputs. */
static int drive(const void *x, int f32, size_t q, size_t block, int bits, int norm,
                 fedmm_bitgen_t *rng, double *out, uint8_t *norm_dst, uint8_t *packed)
{
    const int simd = use_avx2();
    const size_t itemsize = f32 ? sizeof(float) : sizeof(double);
    const int32_t s = ((int32_t)1 << (bits - 1)) - 1;
    size_t nblocks = q / block + (q % block != 0);
    /* Cached input in small blocks: the norms of two full blocks at once
     * (short norm chains are latency-bound; from L3 or DRAM the two streams
     * lose more than that).  The second result waits for its block, so
     * errors come in block order after the same draws as one at a time. */
    const int pairs = block <= PAIR_MAX_BLOCK && q * itemsize <= PAIR_MAX_BYTES;
    double pair_nrm[2] = {0, 0};
    int pair_st[2] = {FEDMM_OK, FEDMM_OK}, have_next = 0;
    for (size_t b = 0; b < nblocks; ++b) {
        size_t start = b * block;
        size_t len = q - start < block ? q - start : block;
        const char *xb = (const char *)x + start * itemsize;
        double nrm;
        int st;
        if (have_next) {
            nrm = pair_nrm[1];
            st = pair_st[1];
            have_next = 0;
        } else if (pairs && start + 2 * block <= q) {
            norm_of_pair(xb, f32, len, norm, simd, pair_nrm, pair_st);
            nrm = pair_nrm[0];
            st = pair_st[0];
            have_next = 1;
        } else {
            st = norm_of_block(xb, f32, len, norm, simd, &nrm);
        }
        if (st != FEDMM_OK) return st;
        if (norm_dst) {
            if (f32) store_f32_le(norm_dst + 4 * b, (float)nrm);
            else store_f64_le(norm_dst + 8 * b, nrm);
        }
        if (nrm == 0.0) { /* zero block: all codes 0, no randomness */
            if (out) memset(out + start, 0, len * sizeof(double));
            continue;
        }
        /* tiny N: s / N would overflow; scale x and N by 2^600 (exact) */
        int tiny = nrm < 0x1p-1000;
        double nsc = tiny ? nrm * 0x1p600 : nrm;
        double inv256 = 256.0 * s / nsc;
        while (nsc * inv256 < 256.0 * s) inv256 = nextafter(inv256, INFINITY);
        chunk_t ck = {NULL, f32, 0, tiny ? 0x1p600 : 1.0, inv256, nrm / (double)s, s,
                      bits, NULL, packed, 0, NULL};
        for (size_t c0 = 0; c0 < len; c0 += QCHUNK) {
            ck.x = xb + c0 * itemsize;
            ck.n = len - c0 < QCHUNK ? len - c0 : QCHUNK;
            if (out) ck.out = out + start + c0;
            ck.pos = (uint64_t)(start + c0) * (uint64_t)bits;
            /* Input larger than the caches: load the next block's
             * coordinates while this block's codes are computed, so that
             * its norm does not wait for DRAM (small blocks gain nothing,
             * and cached input only loses). */
            size_t next = start + c0 + block;
            ck.ahead = q * itemsize > PREFETCH_MIN_BYTES && block >= 2 * QCHUNK
                               && next + ck.n <= q
                           ? (const char *)x + next * itemsize
                           : NULL;
            quantize_chunk(&ck, simd, rng);
        }
    }
    return FEDMM_OK;
}

static int check_quant_args(size_t q, size_t block, int bits, int norm, const void *rng)
{
    if (q < 1 || block < 1 || block > q || bits < 2 || bits > 16 || rng == NULL)
        return FEDMM_EINVAL;
    if (norm != FEDMM_NORM_L2 && norm != FEDMM_NORM_LINF) return FEDMM_EINVAL;
    if ((uint64_t)q > ((uint64_t)1 << 58)) return FEDMM_EINVAL;
    return FEDMM_OK;
}

int fedmm_quantize_f64(const double *x, size_t q, size_t block, int bits, int norm,
                       fedmm_bitgen_t *rng, double *out)
{
    int st = check_quant_args(q, block, bits, norm, rng);
    if (st != FEDMM_OK || x == NULL || out == NULL) return FEDMM_EINVAL;
    return drive(x, 0, q, block, bits, norm, rng, out, NULL, NULL);
}

int fedmm_quantize_f32(const float *x, size_t q, size_t block, int bits, int norm,
                       fedmm_bitgen_t *rng, double *out)
{
    int st = check_quant_args(q, block, bits, norm, rng);
    if (st != FEDMM_OK || x == NULL || out == NULL) return FEDMM_EINVAL;
    return drive(x, 1, q, block, bits, norm, rng, out, NULL, NULL);
}

static int encode_common(const void *x, int value_nbytes, size_t q, size_t block,
                         int bits, int norm, int scheme, fedmm_bitgen_t *rng,
                         uint8_t *payload, size_t nbytes)
{
    int st = check_quant_args(q, block, bits, norm, rng);
    if (st != FEDMM_OK || x == NULL || payload == NULL) return FEDMM_EINVAL;
    if (scheme != FEDMM_SCHEME_BLOCKP && scheme != FEDMM_SCHEME_DITHER) return FEDMM_EINVAL;
    uint64_t want = fedmm_wire_nbytes(scheme, q, block, bits, norm, value_nbytes);
    if (want == 0 || want != (uint64_t)nbytes) return FEDMM_EINVAL;
    size_t nblocks = q / block + (q % block != 0);
    uint8_t *norm_dst = payload + FEDMM_WIRE_HEADER_NBYTES;
    uint8_t *packed = norm_dst + nblocks * (size_t)value_nbytes;
    write_header(payload, scheme, value_nbytes, norm, bits, q, block);
    memset(packed, 0, (size_t)(payload + nbytes - packed));
    return drive(x, value_nbytes == 4, q, block, bits, norm, rng, NULL, norm_dst, packed);
}

int fedmm_encode_f64(const double *x, size_t q, size_t block, int bits, int norm,
                     int scheme, fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes)
{
    return encode_common(x, 8, q, block, bits, norm, scheme, rng, payload, nbytes);
}

int fedmm_encode_f32(const float *x, size_t q, size_t block, int bits, int norm,
                     int scheme, fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes)
{
    return encode_common(x, 4, q, block, bits, norm, scheme, rng, payload, nbytes);
}

int fedmm_identity_encode_f64(const double *x, size_t q, uint8_t *payload, size_t nbytes)
{
    uint64_t want = fedmm_wire_nbytes(FEDMM_SCHEME_IDENTITY, q, 0, 0, FEDMM_NORM_NONE, 8);
    if (x == NULL || payload == NULL || want == 0 || want != (uint64_t)nbytes) return FEDMM_EINVAL;
    for (size_t j = 0; j < q; ++j)
        if (!isfinite(x[j])) return FEDMM_ENONFINITE;
    write_header(payload, FEDMM_SCHEME_IDENTITY, 8, FEDMM_NORM_NONE, 0, q, 0);
    for (size_t j = 0; j < q; ++j) store_f64_le(payload + FEDMM_WIRE_HEADER_NBYTES + 8 * j, x[j]);
    return FEDMM_OK;
}

int fedmm_identity_encode_f32(const float *x, size_t q, uint8_t *payload, size_t nbytes)
{
    uint64_t want = fedmm_wire_nbytes(FEDMM_SCHEME_IDENTITY, q, 0, 0, FEDMM_NORM_NONE, 4);
    if (x == NULL || payload == NULL || want == 0 || want != (uint64_t)nbytes) return FEDMM_EINVAL;
    for (size_t j = 0; j < q; ++j)
        if (!isfinite(x[j])) return FEDMM_ENONFINITE;
    write_header(payload, FEDMM_SCHEME_IDENTITY, 4, FEDMM_NORM_NONE, 0, q, 0);
    for (size_t j = 0; j < q; ++j) store_f32_le(payload + FEDMM_WIRE_HEADER_NBYTES + 4 * j, x[j]);
    return FEDMM_OK;
}

/* ------------------------------------------------------------------------ */
/* decode                                                                    */

#define FAIL(msg)                     \
    do {                              \
        if (reason) *reason = (msg);  \
        return FEDMM_EFORMAT;         \
    } while (0)

int fedmm_wire_read_header(const uint8_t *payload, size_t nbytes,
                           fedmm_wire_header_t *hdr, const char **reason)
{
    if (reason) *reason = "ok";
    if (payload == NULL || hdr == NULL) {
        if (reason) *reason = "NULL argument";
        return FEDMM_EINVAL;
    }
    if (nbytes < FEDMM_WIRE_HEADER_NBYTES) FAIL("payload shorter than the 32-byte header");
    if (memcmp(payload, FEDMM_WIRE_MAGIC, 4) != 0) FAIL("bad magic (expected \"FMMQ\")");
    if (payload[4] != FEDMM_WIRE_VERSION) FAIL("unsupported format version (expected 1)");
    for (int k = 9; k < 16; ++k)
        if (payload[k] != 0) FAIL("reserved header bytes 9..15 are not zero");
    hdr->version = payload[4];
    hdr->scheme = payload[5];
    hdr->value_nbytes = payload[6];
    hdr->norm = payload[7];
    hdr->bits = payload[8];
    hdr->q = load_u64_le(payload + 16);
    hdr->block = load_u64_le(payload + 24);
    if (hdr->scheme > FEDMM_SCHEME_DITHER) FAIL("unknown scheme (expected 0, 1 or 2)");
    if (hdr->value_nbytes != 4 && hdr->value_nbytes != 8)
        FAIL("bad value dtype code (expected 4 = float32 or 8 = float64)");
    if (hdr->q < 1) FAIL("length q is zero");
    if (hdr->scheme == FEDMM_SCHEME_IDENTITY) {
        if (hdr->norm != FEDMM_NORM_NONE || hdr->bits != 0 || hdr->block != 0)
            FAIL("identity payload must have norm kind 0, bits 0 and block size 0");
    } else {
        if (hdr->scheme == FEDMM_SCHEME_BLOCKP && hdr->bits != 2)
            FAIL("block-p payload must have bits = 2");
        if (hdr->bits < 2 || hdr->bits > 16) FAIL("bits per coordinate outside 2..16");
        if (hdr->norm != FEDMM_NORM_L2 && hdr->norm != FEDMM_NORM_LINF)
            FAIL("bad norm kind (expected 1 = L2 or 2 = Linf)");
        if (hdr->block < 1 || hdr->block > hdr->q) FAIL("block size outside 1..q");
    }
    if (hdr->q > ((uint64_t)1 << 58)) FAIL("length q too large");
    if ((uint64_t)(size_t)hdr->q != hdr->q) FAIL("length q does not fit in memory");
    uint64_t want = fedmm_wire_nbytes(hdr->scheme, hdr->q, hdr->block, hdr->bits,
                                      hdr->norm, hdr->value_nbytes);
    if (want == 0) FAIL("inconsistent header");
    if ((uint64_t)nbytes != want) FAIL("payload size does not match its header");
    return FEDMM_OK;
}

/* signed level of each code packed in one byte, for the aligned fast paths:
 * value = LUT entry * scale reproduces code_value() exactly ((-k) * s ==
 * -(k * s) in IEEE arithmetic; -0.0 for a sign bit on level 0). */
#define L2V(c) (((c) & 1) ? (((c) & 2) ? -1.0 : 1.0) : (((c) & 2) ? -0.0 : 0.0))
#define E2(b) {L2V((b) & 3), L2V(((b) >> 2) & 3), L2V(((b) >> 4) & 3), L2V(((b) >> 6) & 3)}
#define L4V(c) (((c) & 8) ? -(double)((c) & 7) : (double)((c) & 7))
#define E4(b) {L4V((b) & 15), L4V(((b) >> 4) & 15)}
#define L8V(b) (((b) & 128) ? -(double)((b) & 127) : (double)((b) & 127))

static const double LUT2[256][4] = {R256(E2)};
static const double LUT4[256][2] = {R256(E4)};
static const double LUT8[256] = {R256(L8V)};

static void unpack_block(const uint8_t *src, uint64_t pos, size_t n, int bits,
                         double scale, double *out)
{
    size_t j = 0;
    if ((pos & 7) == 0) {
        const uint8_t *p = src + (pos >> 3);
        switch (bits) {
        case 2:
            for (; j + 4 <= n; j += 4, ++p) {
                const double *e = LUT2[*p];
                out[j] = e[0] * scale;
                out[j + 1] = e[1] * scale;
                out[j + 2] = e[2] * scale;
                out[j + 3] = e[3] * scale;
            }
            break;
        case 4:
            for (; j + 2 <= n; j += 2, ++p) {
                const double *e = LUT4[*p];
                out[j] = e[0] * scale;
                out[j + 1] = e[1] * scale;
            }
            break;
        case 8:
            for (; j < n; ++j) out[j] = LUT8[p[j]] * scale;
            break;
        case 16:
            for (; j < n; ++j, p += 2)
                out[j] = code_value((uint32_t)p[0] | (uint32_t)p[1] << 8, 16, scale);
            break;
        default:
            break;
        }
    }
    for (; j < n; ++j) out[j] = code_value(get_bits(src, pos + (uint64_t)j * bits, bits), bits, scale);
}

int fedmm_wire_decode(const uint8_t *payload, size_t nbytes, double *out,
                      size_t out_len, const char **reason)
{
    fedmm_wire_header_t h;
    int st = fedmm_wire_read_header(payload, nbytes, &h, reason);
    if (st != FEDMM_OK) return st;
    if (out == NULL || (uint64_t)out_len != h.q) {
        if (reason) *reason = "output length does not match q";
        return FEDMM_EINVAL;
    }
    const size_t q = (size_t)h.q;
    const int vb = h.value_nbytes;
    const uint8_t *body = payload + FEDMM_WIRE_HEADER_NBYTES;
    if (h.scheme == FEDMM_SCHEME_IDENTITY) {
        for (size_t j = 0; j < q; ++j) {
            double v = vb == 8 ? load_f64_le(body + 8 * j) : (double)load_f32_le(body + 4 * j);
            if (!isfinite(v)) FAIL("identity payload holds a non-finite value");
            out[j] = v;
        }
        return FEDMM_OK;
    }
    const size_t block = (size_t)h.block;
    const int bits = h.bits;
    const size_t nblocks = q / block + (q % block != 0);
    const uint8_t *packed = body + nblocks * (size_t)vb;
    /* validate everything before writing any output */
    for (size_t b = 0; b < nblocks; ++b) {
        double nrm = vb == 8 ? load_f64_le(body + 8 * b) : (double)load_f32_le(body + 4 * b);
        if (!isfinite(nrm) || signbit(nrm)) FAIL("a block norm is negative or not finite");
    }
    uint64_t total_bits = (uint64_t)q * (uint64_t)bits;
    if (total_bits % 8 != 0) {
        uint8_t last = packed[total_bits / 8];
        if (last >> (total_bits % 8)) FAIL("padding bits of the last byte are not zero");
    }
    const double s = (double)((1 << (bits - 1)) - 1);
    for (size_t b = 0; b < nblocks; ++b) {
        double nrm = vb == 8 ? load_f64_le(body + 8 * b) : (double)load_f32_le(body + 4 * b);
        size_t start = b * block;
        size_t len = q - start < block ? q - start : block;
        unpack_block(packed, (uint64_t)start * (uint64_t)bits, len, bits, nrm / s, out + start);
    }
    return FEDMM_OK;
}
