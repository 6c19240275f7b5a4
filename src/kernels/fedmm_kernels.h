/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_kernels.h -- public C API of the fedmm compiled kernels.
 *
 * Pure C99.  No Python, no NumPy, no linked BLAS: every kernel that needs
 * BLAS/LAPACK receives a table of function pointers (fedmm_blas_t) filled by
 * the caller (the Python package fills it from scipy.linalg.cython_blas and
 * cython_lapack; a C program passes its own Fortran BLAS symbols).  Every
 * kernel that draws random numbers receives a fedmm_bitgen_t, which has the
 * exact memory layout of NumPy's bitgen_t (numpy/random/bitgen.h), so the
 * state of a numpy.random.Generator can be used directly.
 *
 * Conventions
 *   - Every kernel returns an int status: FEDMM_OK (0) or a negative
 *     FEDMM_E* code; outputs are undefined on error.
 *   - Matrices are column-major (Fortran order) with an explicit leading
 *     dimension unless a kernel documents otherwise.
 *   - Kernels never allocate unless they document it; workspaces are passed in.
 *   - Kernels are reentrant: no global state.
 */
#ifndef FEDMM_KERNELS_H
#define FEDMM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FEDMM_KERNELS_VERSION_MAJOR 0
#define FEDMM_KERNELS_VERSION_MINOR 1

/* ---- status codes ------------------------------------------------------ */
#define FEDMM_OK 0
#define FEDMM_EINVAL (-1)     /* an argument is out of range               */
#define FEDMM_ENOMEM (-2)     /* an allocation failed                      */
#define FEDMM_ENONFINITE (-3) /* NaN or infinity in an input               */
#define FEDMM_EFORMAT (-4)    /* malformed serialized payload              */
#define FEDMM_ELAPACK (-5)    /* a LAPACK routine returned info != 0       */
#define FEDMM_ENOCONV (-6)    /* an iterative solver hit its iteration cap */

/* Human-readable text of a status code (static storage, never NULL). */
const char *fedmm_strerror(int status);

/* ---- random numbers ---------------------------------------------------- */
/* Layout-identical to NumPy's bitgen_t. */
typedef struct fedmm_bitgen {
    void *state;
    uint64_t (*next_uint64)(void *st);
    uint32_t (*next_uint32)(void *st);
    double (*next_double)(void *st);
    uint64_t (*next_raw)(void *st);
} fedmm_bitgen_t;

/* ---- BLAS / LAPACK table ----------------------------------------------- */
/* Integer type of the BLAS/LAPACK interface (LP64).  The Python build checks
 * at compile time that SciPy's cython_blas uses the same width. */
typedef int fedmm_blas_int;

typedef void (*fedmm_dgemm_t)(const char *transa, const char *transb,
                              const fedmm_blas_int *m, const fedmm_blas_int *n,
                              const fedmm_blas_int *k, const double *alpha,
                              const double *a, const fedmm_blas_int *lda,
                              const double *b, const fedmm_blas_int *ldb,
                              const double *beta, double *c,
                              const fedmm_blas_int *ldc);
typedef void (*fedmm_dsyrk_t)(const char *uplo, const char *trans,
                              const fedmm_blas_int *n, const fedmm_blas_int *k,
                              const double *alpha, const double *a,
                              const fedmm_blas_int *lda, const double *beta,
                              double *c, const fedmm_blas_int *ldc);
typedef void (*fedmm_dgemv_t)(const char *trans, const fedmm_blas_int *m,
                              const fedmm_blas_int *n, const double *alpha,
                              const double *a, const fedmm_blas_int *lda,
                              const double *x, const fedmm_blas_int *incx,
                              const double *beta, double *y,
                              const fedmm_blas_int *incy);
typedef void (*fedmm_dpotrf_t)(const char *uplo, const fedmm_blas_int *n,
                               double *a, const fedmm_blas_int *lda,
                               fedmm_blas_int *info);
typedef void (*fedmm_dpotrs_t)(const char *uplo, const fedmm_blas_int *n,
                               const fedmm_blas_int *nrhs, const double *a,
                               const fedmm_blas_int *lda, double *b,
                               const fedmm_blas_int *ldb, fedmm_blas_int *info);
typedef void (*fedmm_dsyevr_t)(const char *jobz, const char *range,
                               const char *uplo, const fedmm_blas_int *n,
                               double *a, const fedmm_blas_int *lda,
                               const double *vl, const double *vu,
                               const fedmm_blas_int *il, const fedmm_blas_int *iu,
                               const double *abstol, fedmm_blas_int *m,
                               double *w, double *z, const fedmm_blas_int *ldz,
                               fedmm_blas_int *isuppz, double *work,
                               const fedmm_blas_int *lwork, fedmm_blas_int *iwork,
                               const fedmm_blas_int *liwork, fedmm_blas_int *info);

typedef struct fedmm_blas {
    fedmm_dgemm_t dgemm;
    fedmm_dsyrk_t dsyrk;
    fedmm_dgemv_t dgemv;
    fedmm_dpotrf_t dpotrf;
    fedmm_dpotrs_t dpotrs;
    fedmm_dsyevr_t dsyevr;
} fedmm_blas_t;

/* ---- kernel families ---------------------------------------------------- */
/* Each family has its own section below (one header section per source file). */

/* ---- compression (quantize.c) ---- */
/* Unbiased compressors of FedEM (Dieuleveut et al. 2021): block-p
 * quantization (App. B) and stochastic rounding / random dithering (Sec. 2).
 * Per block x_l (the last block may be shorter) with N = ||x_l||_r,
 * r in {2, inf}, and s = 2^(bits-1) - 1 levels:
 *     Q(x)_j = sign(x_j) k_j N / s,  k_j = floor(a_j) + Bernoulli(a_j - floor(a_j)),
 *     a_j = s |x_j| / N,
 * so E[Q(x)] = x; bits = 2 (s = 1) is block-p quantization.  The Bernoulli
 * draws are exact (see quantize.c): 8 random bits per coordinate, ties
 * resolved with further bits.  Blocks with N = 0 draw nothing.
 * `block` is the effective block size, 1 <= block <= q.  On error the
 * generator may have been advanced and outputs are undefined.
 * Wire format (docs/wire-format.md): 32-byte little-endian header, then
 * ceil(q/block) norms (float32 or float64), then the codes
 * (sign << (bits-1) | level) packed LSB-first at `bits` bits each. */
#define FEDMM_WIRE_MAGIC "FMMQ"
#define FEDMM_WIRE_VERSION 1
#define FEDMM_WIRE_HEADER_NBYTES 32
#define FEDMM_SCHEME_IDENTITY 0
#define FEDMM_SCHEME_BLOCKP 1
#define FEDMM_SCHEME_DITHER 2
#define FEDMM_NORM_NONE 0
#define FEDMM_NORM_L2 1
#define FEDMM_NORM_LINF 2

/* Decoded fixed header of a payload. */
typedef struct fedmm_wire_header {
    int version;      /* byte 4 */
    int scheme;       /* byte 5: FEDMM_SCHEME_* */
    int value_nbytes; /* byte 6: 4 = float32, 8 = float64 norms/values */
    int norm;         /* byte 7: FEDMM_NORM_* */
    int bits;         /* byte 8: bits per coordinate (0 for identity) */
    uint64_t q;       /* bytes 16..23: vector length */
    uint64_t block;   /* bytes 24..31: block size (0 for identity) */
} fedmm_wire_header_t;

/* Exact payload size in bytes for these header fields; 0 if they are
 * invalid (as the decoder would reject them).  Identity: 32 + q*value_nbytes;
 * quantizers: 32 + ceil(q/block)*value_nbytes + ceil(q*bits/8). */
uint64_t fedmm_wire_nbytes(int scheme, uint64_t q, uint64_t block, int bits,
                           int norm, int value_nbytes);

/* Fused quantize-and-dequantize: out[j] = Q(x)_j (float64, length q), the
 * values a receiver decodes.  Consumes the random stream exactly like
 * fedmm_encode_*.  FEDMM_ENONFINITE on NaN/inf in x, FEDMM_EINVAL on bad
 * arguments (bits outside 2..16, norm not L2/LINF, block outside 1..q) or
 * on |x_j| > 2^1023 (float64; norms are capped there so that decoded values
 * stay finite). */
int fedmm_quantize_f64(const double *x, size_t q, size_t block, int bits, int norm,
                       fedmm_bitgen_t *rng, double *out);
/* float32 input: norms are computed in double and rounded to float32 (the
 * value type sent on the wire) before use. */
int fedmm_quantize_f32(const float *x, size_t q, size_t block, int bits, int norm,
                       fedmm_bitgen_t *rng, double *out);

/* Quantize x and write the whole payload (header included) into
 * payload[0 .. nbytes), nbytes == fedmm_wire_nbytes(scheme, q, block, bits,
 * norm, 8 or 4).  scheme is FEDMM_SCHEME_BLOCKP (bits must be 2) or
 * FEDMM_SCHEME_DITHER. */
int fedmm_encode_f64(const double *x, size_t q, size_t block, int bits, int norm,
                     int scheme, fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes);
int fedmm_encode_f32(const float *x, size_t q, size_t block, int bits, int norm,
                     int scheme, fedmm_bitgen_t *rng, uint8_t *payload, size_t nbytes);

/* Identity payload: header + the q raw values (little-endian). */
int fedmm_identity_encode_f64(const double *x, size_t q, uint8_t *payload, size_t nbytes);
int fedmm_identity_encode_f32(const float *x, size_t q, uint8_t *payload, size_t nbytes);

/* Validate the header of untrusted bytes payload[0 .. nbytes) and that
 * nbytes is exactly the size it announces.  FEDMM_EFORMAT with *reason (a
 * static string, if reason != NULL) when malformed. */
int fedmm_wire_read_header(const uint8_t *payload, size_t nbytes,
                           fedmm_wire_header_t *hdr, const char **reason);

/* Decode any payload into out[0 .. out_len), out_len == q (float64).
 * Validates the header, the size, every norm (finite, >= 0) and the padding
 * bits before writing; never reads outside payload[0 .. nbytes).  Decoded
 * value: (-1)^sign * (level * (N / s)), evaluated in double. */
int fedmm_wire_decode(const uint8_t *payload, size_t nbytes, double *out,
                      size_t out_len, const char **reason);

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_KERNELS_H */
