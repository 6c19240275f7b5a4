/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * quantize.c -- unbiased compressors: the quantizer arithmetic (block norms,
 * exact Bernoulli draws, levels) and the fused quantize-and-pack encoder.
 * The wire format itself (headers, packing, decoding) is in wire.c; the
 * encoder reaches it through internal.h.
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
#include "internal.h"

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


static void dequantize_codes(const uint16_t *codes, size_t n, int bits, double scale,
                             double *out)
{
    const uint32_t mask = (1u << (bits - 1)) - 1u;
    const int shift = bits - 1;
    for (size_t j = 0; j < n; ++j) {
        uint32_t c = codes[j];
        /* times +-1 is exact: the same value as fedmm__wire_code_value() */
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
        fedmm__wire_pack_codes(ck->packed, ck->pos + (uint64_t)j0 * (uint64_t)ck->bits, codes,
                               n, ck->bits);
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
 * stream of 2 or 8 bits per code, written here in the LSB-first layout of
 * wire.c, so that the hot layouts need no second pass over the codes);
 * EMIT_CODES collects 16-bit codes for fedmm__wire_pack_codes().
 * Interleaving the draws with the arithmetic lets the generator's latency
 * overlap with the work. */
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
                ck->out[j] = fedmm__wire_code_value(code, ck->bits, ck->scale);
            else
                fedmm__wire_put_bits(ck->packed, ck->pos + (uint64_t)j * (uint64_t)ck->bits,
                                     code, ck->bits);
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
        if (norm_dst) fedmm__wire_store_norm(norm_dst, b, f32 ? 4 : 8, nrm);
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
/* ------------------------------------------------------------------------ */
/* entry points                                                              */

int fedmm_quantizer_check(const fedmm_quantizer_t *spec, size_t q)
{
    return fedmm__quantizer_valid(spec, (uint64_t)q) ? FEDMM_OK : FEDMM_EINVAL;
}

/* A quantizer (BLOCKP or DITHER) valid for length q, and a generator. */
static int check_quant_args(const fedmm_quantizer_t *spec, size_t q, const void *rng)
{
    if (fedmm_quantizer_check(spec, q) != FEDMM_OK || spec->scheme == FEDMM_SCHEME_IDENTITY ||
        rng == NULL)
        return FEDMM_EINVAL;
    return FEDMM_OK;
}

int fedmm_quantize_f64(const double *x, size_t q, const fedmm_quantizer_t *spec,
                       fedmm_bitgen_t *rng, double *out)
{
    if (check_quant_args(spec, q, rng) != FEDMM_OK || x == NULL || out == NULL)
        return FEDMM_EINVAL;
    return drive(x, 0, q, spec->block, spec->bits, spec->norm, rng, out, NULL, NULL);
}

int fedmm_quantize_f32(const float *x, size_t q, const fedmm_quantizer_t *spec,
                       fedmm_bitgen_t *rng, double *out)
{
    if (check_quant_args(spec, q, rng) != FEDMM_OK || x == NULL || out == NULL)
        return FEDMM_EINVAL;
    return drive(x, 1, q, spec->block, spec->bits, spec->norm, rng, out, NULL, NULL);
}

int fedmm_quantizer_apply(const fedmm_quantizer_t *spec, const double *x, size_t q,
                          fedmm_bitgen_t *rng, double *out)
{
    if (fedmm_quantizer_check(spec, q) != FEDMM_OK || x == NULL || out == NULL) return FEDMM_EINVAL;
    if (spec->scheme == FEDMM_SCHEME_IDENTITY) {
        if (out != x) memmove(out, x, q * sizeof(double));
        return FEDMM_OK;
    }
    return fedmm_quantize_f64(x, q, spec, rng, out);
}

/* The fused encoder: wire.c lays out the payload (header, zeroed codes),
 * drive() writes the norms and the codes in the same pass as the draws. */
static int encode_common(const void *x, int value_nbytes, size_t q,
                         const fedmm_quantizer_t *spec, fedmm_bitgen_t *rng, uint8_t *payload,
                         size_t nbytes)
{
    if (fedmm_quantizer_check(spec, q) != FEDMM_OK || x == NULL || payload == NULL)
        return FEDMM_EINVAL;
    if (spec->scheme == FEDMM_SCHEME_IDENTITY) /* no randomness: rng unused */
        return value_nbytes == 4 ? fedmm_identity_encode_f32((const float *)x, q, payload, nbytes)
                                 : fedmm_identity_encode_f64((const double *)x, q, payload, nbytes);
    if (rng == NULL) return FEDMM_EINVAL;
    uint8_t *norm_dst, *packed;
    int st = fedmm__wire_begin_payload(spec, q, value_nbytes, payload, nbytes, &norm_dst, &packed);
    if (st != FEDMM_OK) return st;
    return drive(x, value_nbytes == 4, q, spec->block, spec->bits, spec->norm, rng, NULL,
                 norm_dst, packed);
}

int fedmm_encode_f64(const double *x, size_t q, const fedmm_quantizer_t *spec,
                     fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes)
{
    return encode_common(x, 8, q, spec, rng, payload, nbytes);
}

int fedmm_encode_f32(const float *x, size_t q, const fedmm_quantizer_t *spec,
                     fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes)
{
    return encode_common(x, 4, q, spec, rng, payload, nbytes);
}
