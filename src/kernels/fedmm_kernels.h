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
#define FEDMM_EINTR (-7)      /* stopped by the caller's fedmm_interrupt_t  */
#define FEDMM_ERANGE (-8)     /* a value beyond the range a model handles  */

/* Human-readable text of a status code (static storage, never NULL). */
const char *fedmm_strerror(int status);

/* An optional interrupt check for kernels whose loops can run long (the
 * *_interruptible entry points).  The kernel calls poll(arg) after about
 * every FEDMM_INTERRUPT_WORK multiply-adds of its loop; a nonzero return
 * stops it with FEDMM_EINTR (outputs undefined, as on every error).  poll
 * only observes: a run it never stops gives the same results, bit for bit,
 * as a run without it.  The Python package polls for Ctrl-C (taking the GIL
 * back for that moment); a C program may poll a flag set by its own signal
 * handler or a deadline. */
#define FEDMM_INTERRUPT_WORK ((int64_t)1 << 22)
typedef int (*fedmm_poll_fn)(void *arg);
typedef struct fedmm_interrupt {
    fedmm_poll_fn poll;
    void *arg;
} fedmm_interrupt_t;

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

typedef void (*fedmm_dsytrf_t)(const char *uplo, const fedmm_blas_int *n, double *a,
                               const fedmm_blas_int *lda, fedmm_blas_int *ipiv, double *work,
                               const fedmm_blas_int *lwork, fedmm_blas_int *info);

typedef void (*fedmm_dsyevd_t)(const char *jobz, const char *uplo, const fedmm_blas_int *n,
                               double *a, const fedmm_blas_int *lda, double *w, double *work,
                               const fedmm_blas_int *lwork, fedmm_blas_int *iwork,
                               const fedmm_blas_int *liwork, fedmm_blas_int *info);

typedef void (*fedmm_dtrtri_t)(const char *uplo, const char *diag, const fedmm_blas_int *n,
                               double *a, const fedmm_blas_int *lda, fedmm_blas_int *info);

/* Symmetric tridiagonal reduction and the pieces of a partial eigensolver
 * (project_psd's few-negative-eigenvalues path). */
typedef void (*fedmm_dsytrd_t)(const char *uplo, const fedmm_blas_int *n, double *a,
                               const fedmm_blas_int *lda, double *d, double *e, double *tau,
                               double *work, const fedmm_blas_int *lwork, fedmm_blas_int *info);
typedef void (*fedmm_dstebz_t)(const char *range, const char *order, const fedmm_blas_int *n,
                               const double *vl, const double *vu, const fedmm_blas_int *il,
                               const fedmm_blas_int *iu, const double *abstol, const double *d,
                               const double *e, fedmm_blas_int *m, fedmm_blas_int *nsplit,
                               double *w, fedmm_blas_int *iblock, fedmm_blas_int *isplit,
                               double *work, fedmm_blas_int *iwork, fedmm_blas_int *info);
typedef void (*fedmm_dstein_t)(const fedmm_blas_int *n, const double *d, const double *e,
                               const fedmm_blas_int *m, const double *w,
                               const fedmm_blas_int *iblock, const fedmm_blas_int *isplit,
                               double *z, const fedmm_blas_int *ldz, double *work,
                               fedmm_blas_int *iwork, fedmm_blas_int *ifail, fedmm_blas_int *info);
typedef void (*fedmm_dorm2r_t)(const char *side, const char *trans, const fedmm_blas_int *m,
                               const fedmm_blas_int *n, const fedmm_blas_int *k, const double *a,
                               const fedmm_blas_int *lda, const double *tau, double *c,
                               const fedmm_blas_int *ldc, double *work, fedmm_blas_int *info);
typedef void (*fedmm_dormtr_t)(const char *side, const char *uplo, const char *trans,
                               const fedmm_blas_int *m, const fedmm_blas_int *n, const double *a,
                               const fedmm_blas_int *lda, const double *tau, double *c,
                               const fedmm_blas_int *ldc, double *work,
                               const fedmm_blas_int *lwork, fedmm_blas_int *info);

typedef struct fedmm_blas {
    fedmm_dgemm_t dgemm;
    fedmm_dsyrk_t dsyrk;
    fedmm_dgemv_t dgemv;
    fedmm_dpotrf_t dpotrf;
    fedmm_dpotrs_t dpotrs;
    fedmm_dsyevr_t dsyevr;
    fedmm_dsytrf_t dsytrf; /* symmetric indefinite LDL^T (no kernel uses it since 0.2; kept for the layout) */
    fedmm_dsyevd_t dsyevd; /* all eigenpairs (divide and conquer); NULL: dsyevr is used */
    /* Members appended later stay at the end (callers built against an older
     * header leave them zero): NULL means "not available", and a kernel that
     * needs one returns FEDMM_EINVAL (documented where it applies). */
    fedmm_dtrtri_t dtrtri; /* triangular inverse (the Gaussian mixture's whitening) */
    /* project_psd's partial eigensolver (all five, or it falls back to dsyevr) */
    fedmm_dsytrd_t dsytrd;
    fedmm_dstebz_t dstebz;
    fedmm_dstein_t dstein;
    fedmm_dorm2r_t dorm2r;
    fedmm_dormtr_t dormtr;
} fedmm_blas_t;

/* ---- kernel families ---------------------------------------------------- */
/* Each family has its own section below (one header section per source file). */

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

/* ---- wire format (wire.c) ------------------------------------------------- */
/* Self-describing payloads (docs/wire-format.md): a 32-byte little-endian
 * header (magic "FMMQ", version, scheme, value dtype, norm kind, bits, q,
 * block), then for the quantizers ceil(q/block) norms (float32 or float64)
 * and the codes (sign << (bits-1) | level) packed LSB-first at `bits` bits
 * each, the last byte zero-padded; for the identity the q raw values. */
#define FEDMM_WIRE_MAGIC "FMMQ"
#define FEDMM_WIRE_VERSION 1
#define FEDMM_WIRE_HEADER_NBYTES 32

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

/* Exact size in bytes of the payload of spec for q values with
 * value_nbytes (4 or 8) bytes per norm/value; 0 if they are invalid (as the
 * decoder would reject them: fedmm_quantizer_check, q <= 2^58).
 * Identity: 32 + q*value_nbytes; quantizers: 32 +
 * ceil(q/block)*value_nbytes + ceil(q*bits/8). */
uint64_t fedmm_wire_nbytes(const fedmm_quantizer_t *spec, uint64_t q, int value_nbytes);

/* Identity payload: header + the q raw values (little-endian).
 * nbytes == fedmm_wire_nbytes(identity spec, q, 8 or 4); FEDMM_ENONFINITE
 * on NaN/inf in x. */
int fedmm_identity_encode_f64(const double *x, size_t q, uint8_t *payload, size_t nbytes);
int fedmm_identity_encode_f32(const float *x, size_t q, uint8_t *payload, size_t nbytes);

/* Validate the header of untrusted bytes payload[0 .. nbytes) and that
 * nbytes is exactly the size it announces.  FEDMM_EFORMAT with *reason (a
 * static string, if reason != NULL) when malformed. */
int fedmm_wire_read_header(const uint8_t *payload, size_t nbytes,
                           fedmm_wire_header_t *hdr, const char **reason);

/* Decode any payload into out[0 .. out_len), out_len == q (float64).
 * Validates the header, the size, every norm (finite, >= 0), the padding
 * bits, that every decoded value is finite (identity: no NaN/inf value;
 * quantizers: no level * (N / s) overflows, possible only for a norm within
 * a rounding of DBL_MAX) before writing anything: out is left untouched on
 * any error.  Never reads outside payload[0 .. nbytes).  Decoded value:
 * (-1)^sign * (level * (N / s)), evaluated in double. */
int fedmm_wire_decode(const uint8_t *payload, size_t nbytes, double *out,
                      size_t out_len, const char **reason);

/* ---- sparse coding (lasso.c) -------------------------------------------- */
/* How a batched LASSO is solved (FedMM paper eq. (16), 1/2 convention of
 * eq. (28)): for every column j,
 *     H[:,j] = argmin_h 1/2 ||z_j - D h||^2 + lam ||h||_1   (h >= 0 if positive).
 *   lam         the l1 weight, > 0 (the duality gap certifies nothing at 0);
 *   positive    != 0: constrain h >= 0;
 *   tol         column j stops when its duality gap is <= tol * 1/2 ||z_j||^2
 *               (relative; floored at 2.2e-13), >= 0;
 *   max_iter    cap on the iterations per column (active-set steps plus
 *               sweeps), >= 0; a column that hits it counts as unconverged;
 *   warm_start  != 0: start from the values in H (negative entries clipped
 *               when positive), else from 0;
 *   method      FEDMM_LASSO_CD (coordinate descent + Newton on a stable
 *               support), FEDMM_LASSO_ACTIVE_SET (feature-sign active-set
 *               search, handing over to coordinate descent if its support
 *               matrix G_SS becomes singular), FEDMM_LASSO_HOMOTOPY (LARS-
 *               lasso path from h = 0 down to lam with Cholesky up- and
 *               downdates, ended by an exact solve on the final support;
 *               a nonzero warm start, a numerically dependent atom or a
 *               failed final check hands the column to the active set) or
 *               FEDMM_LASSO_AUTO (active set while the support has at most
 *               min(24, max(4, K/2)) atoms, then coordinate descent; in
 *               fedmm_dictionary_statistics the homotopy when K > p and the
 *               active set uncapped when p < 2K <= 2p).
 * The kernels return FEDMM_EINVAL when opts is NULL or a field is out of
 * range. */
#define FEDMM_LASSO_AUTO 0
#define FEDMM_LASSO_CD 1
#define FEDMM_LASSO_ACTIVE_SET 2
#define FEDMM_LASSO_HOMOTOPY 3
typedef struct fedmm_lasso_options {
    double lam;
    int positive;
    double tol;
    int max_iter;
    int warm_start;
    int method;
} fedmm_lasso_options_t;

/* Batched LASSO on the Gram matrix: H[:,j] = argmin_h 1/2 h^T G h -
 * C[:,j]^T h + lam ||h||_1 with the options *opts, i.e. the LASSO above with
 * G = D^T D, C = D^T Z.  G: K x K symmetric (both triangles, ldg), C: K x b
 * (ldc), H: K x b (ldh), column-major.  Coordinate descent with the gradient
 * kept up to date and a Newton step on a stable support, or the active set
 * (opts->method).  znorm2[j] = ||z_j||^2 scales column j's stopping test;
 * znorm2 == NULL uses a certified bound from G, C alone.  n_iter[j]
 * (optional) receives the iterations used; *n_unconverged (optional) the
 * number of columns that hit max_iter.
 * work: fedmm_lasso_gram_work(K) doubles. */
size_t fedmm_lasso_gram_work(fedmm_blas_int K);
int fedmm_lasso_gram(fedmm_blas_int K, fedmm_blas_int b, const double *G,
                     fedmm_blas_int ldg, const double *C, fedmm_blas_int ldc,
                     const double *znorm2, const fedmm_lasso_options_t *opts, double *H,
                     fedmm_blas_int ldh, int *n_iter, int64_t *n_unconverged, double *work);
/* fedmm_lasso_gram with an interrupt check (interrupt may be NULL: never
 * stopped): FEDMM_EINTR when interrupt->poll asked to stop.  One column can
 * run up to opts->max_iter iterations of about K^2 multiply-adds each (hours
 * with tol = 0 and a large max_iter), so the check runs inside the column
 * loops, every FEDMM_INTERRUPT_WORK multiply-adds. */
int fedmm_lasso_gram_interruptible(fedmm_blas_int K, fedmm_blas_int b, const double *G,
                                   fedmm_blas_int ldg, const double *C, fedmm_blas_int ldc,
                                   const double *znorm2, const fedmm_lasso_options_t *opts,
                                   double *H, fedmm_blas_int ldh, int *n_iter,
                                   int64_t *n_unconverged, double *work,
                                   const fedmm_interrupt_t *interrupt);

/* Dictionary-learning statistics fused with the solve (FedMM eq. (18)):
 * H = LASSO codes of Z (p x b, leading dim ldz) on D (p x K, ldd) with the
 * options *opts, then for every segment s = [offsets[s], offsets[s+1]) of
 * columns, of length b_s,
 *     A[s] = H_s H_s^T / b_s   (K x K),     B[s] = Z_s H_s^T / b_s   (p x K),
 * stored contiguously (A: n_segments K*K blocks, B: n_segments p*K blocks,
 * column-major; either may be NULL).  offsets has n_segments + 1 entries,
 * offsets[0] = 0, nondecreasing, offsets[n_segments] = b.  An empty segment
 * has zero statistics.  Every segment runs exactly the calls a one-segment
 * call on its own columns would, so results agree bit for bit.
 * objective[j] (optional) = 1/2 ||z_j - D h_j||^2 + lam ||h_j||_1 from the
 * explicit residual.  H (K x b, ld K) is always written (and read when
 * opts->warm_start); see fedmm_lasso_gram for n_iter and n_unconverged.
 * work: fedmm_dictionary_statistics_work(p, K, max segment length,
 * objective != NULL) doubles.  Returns FEDMM_ENONFINITE if a column of Z
 * has a non-finite norm. */
size_t fedmm_dictionary_statistics_work(fedmm_blas_int p, fedmm_blas_int K,
                                        fedmm_blas_int max_segment, int want_objective);
int fedmm_dictionary_statistics(fedmm_blas_int p, fedmm_blas_int K, fedmm_blas_int b,
                                const double *D, fedmm_blas_int ldd, const double *Z,
                                fedmm_blas_int ldz, const fedmm_lasso_options_t *opts,
                                int64_t n_segments, const int64_t *offsets, double *H,
                                double *A, double *B, double *objective, int *n_iter,
                                int64_t *n_unconverged, double *work, const fedmm_blas_t *blas);
/* fedmm_dictionary_statistics with an interrupt check (as
 * fedmm_lasso_gram_interruptible; interrupt may be NULL). */
int fedmm_dictionary_statistics_interruptible(
    fedmm_blas_int p, fedmm_blas_int K, fedmm_blas_int b, const double *D, fedmm_blas_int ldd,
    const double *Z, fedmm_blas_int ldz, const fedmm_lasso_options_t *opts, int64_t n_segments,
    const int64_t *offsets, double *H, double *A, double *B, double *objective, int *n_iter,
    int64_t *n_unconverged, double *work, const fedmm_blas_t *blas,
    const fedmm_interrupt_t *interrupt);

/* ---- counter-based random streams and sampling (random.c) ---------------- */
/* Philox4x64-10 with NumPy's state layout semantics: numpy.random.Philox with
 * key `key` and counter `counter` (buffer empty) produces the same uint64,
 * uint32 and double draws as fedmm_philox_seek(st, key, counter) followed by
 * the fedmm_philox_next_* functions (the next draw first increments the
 * 256-bit counter, then yields the four outputs of its block in order; a
 * 32-bit draw returns the low half of a 64-bit draw and keeps the high half
 * for the next 32-bit draw).  fedmm_philox_bitgen fills a fedmm_bitgen_t so
 * that every kernel taking a generator can draw from it. */
typedef struct fedmm_philox {
    uint64_t counter[4];
    uint64_t key[2];
    uint64_t buffer[4];
    int buffer_pos;
    int has_uint32;
    uint32_t uinteger;
} fedmm_philox_t;
void fedmm_philox_seek(fedmm_philox_t *state, const uint64_t key[2], const uint64_t counter[4]);
uint64_t fedmm_philox_next_uint64(void *state);
uint32_t fedmm_philox_next_uint32(void *state);
double fedmm_philox_next_double(void *state);
void fedmm_philox_bitgen(fedmm_philox_t *state, fedmm_bitgen_t *bitgen);

/* b distinct indices drawn uniformly from 0..n-1, in the order of a partial
 * Fisher-Yates shuffle: out[i] is a uniform pick among the n - i indices
 * not yet taken, by masked rejection on next_uint32 (n - 1 - i < 2^32) or
 * next_uint64.  work: n int64 (overwritten).  0 <= b <= n. */
int fedmm_sample_without_replacement(fedmm_bitgen_t *rng, int64_t n, int64_t b, int64_t *out,
                                     int64_t *work);

/* ---- aggregation and update sizes (engine.c) ----------------------------- */
#define FEDMM_SPACE_STATISTIC 0
#define FEDMM_SPACE_PARAMETER 1

/* The server's aggregate of the decoded messages (FedMM Alg. 2 line 13):
 * out = sum_k weights[k] * rows[k] (each of length q), accumulated in the
 * order k = 0..m-1 as out = out + weights[k] * rows[k] (one rounding for the
 * product, one for the sum: no fused multiply-add), i.e. exactly what the
 * NumPy expression does.  m = 0 gives zeros. */
void fedmm_weighted_sum(int64_t m, size_t q, const double *weights, const double *const *rows,
                        double *out);
/* Columns [lo, hi) of fedmm_weighted_sum (out[j] for lo <= j < hi only, the
 * same operations in the same order: the same bits), so that disjoint column
 * ranges can be summed on different threads. */
void fedmm_weighted_sum_columns(int64_t m, size_t lo, size_t hi, const double *weights,
                                const double *const *rows, double *out);

/* ||a - b||^2 over n doubles, as four partial sums over j mod 4 (the tail
 * goes to the first) combined as (s0 + s1) + (s2 + s3): one fixed order of
 * operations, shared by every recorded update size (E^s, E^{p,s}, E^p).
 * That plain sum is returned whenever it is finite and >= 2^-900 (no square
 * can have over- or underflowed to matter).  Otherwise the differences are
 * scaled by the power of two 2^e of max |a_j - b_j| (exact), summed in the
 * same order and scaled back once by 2^(2e) (as LAPACK's dnrm2 scales):
 * finite whenever the true value is representable, +inf when it exceeds
 * DBL_MAX (or a difference a_j - b_j overflows), NaN if an input is NaN. */
double fedmm_squared_distance(size_t n, const double *a, const double *b);

/* ---- dictionary update and PSD projection (linalg.c) ---------------------- */
/* Ridge T map (FedMM eq. (17) with g = eta ||D||_F^2 and the 1/2 convention
 * of eq. (28)): D = B (A + 2 eta I)^{-1} by Cholesky (dpotrf/dpotrs).
 * A: K x K (lda), B: p x K (ldb), D: p x K (ldd), column-major.
 * FEDMM_ELAPACK when A + 2 eta I is not positive definite.
 * work: fedmm_dictionary_update_ridge_work(p, K) doubles. */
size_t fedmm_dictionary_update_ridge_work(fedmm_blas_int p, fedmm_blas_int K);
int fedmm_dictionary_update_ridge(fedmm_blas_int p, fedmm_blas_int K, const double *A,
                                  fedmm_blas_int lda, const double *B, fedmm_blas_int ldb,
                                  double eta, double *D, fedmm_blas_int ldd, double *work,
                                  const fedmm_blas_t *blas);

/* Unit-norm T map: minimize 1/2 tr(D^T D A) - tr(D^T B) + eta ||D||_F^2 over
 * ||d_j|| <= 1 by block-coordinate descent on the columns (Mairal, Bach,
 * Ponce, Sapiro 2010, Algorithm 2), starting from the D passed in.  Column j:
 * d_j = u / max(1, ||u||), u = (b_j - sum_{k!=j} d_k A_kj) / (A_jj + 2 eta);
 * an unused atom (A_jj + 2 eta == 0) becomes v/||v|| or is kept.  Sweeps until
 * the largest column step max_j ||d_j^new - d_j^old|| <= tol; FEDMM_ENOCONV
 * after max_iter sweeps (D then holds the last iterate).  *n_iter: sweeps.
 * work: p doubles. */
int fedmm_dictionary_update_unit_norm(fedmm_blas_int p, fedmm_blas_int K, const double *A,
                                      fedmm_blas_int lda, const double *B,
                                      fedmm_blas_int ldb, double eta, double tol,
                                      int max_iter, double *D, fedmm_blas_int ldd,
                                      int *n_iter, double *work);

/* Euclidean projection onto the PSD cone of sym(A) = (A + A^T)/2 for a stack
 * of n_matrices K x K matrices (contiguous, column-major; out may equal A):
 * out = sum_i max(lambda_i, 0) v_i v_i^T.  Paths (recorded in path[s] when
 * path != NULL): 0 -- Cholesky succeeds, sym(A) is returned (positive
 * definite); otherwise Cholesky's stopping column c bounds the number of
 * negative eigenvalues by K - c + 1 (Cauchy interlacing) and: 4 -- when that
 * bound is small (<= max(K/3, 8 + K/4); any bound below K = 24), Cholesky
 * continues with symmetric pivoting until a small Schur complement T
 * remains; when T has <= 4 + K/8 negative eigenvalues (the inertia of
 * sym(A)), the negative eigenpairs come from a rational Krylov space
 * (sym(A)^{-1}, then Rayleigh-quotient shifts (sym(A) - theta I)^{-1}, all
 * through that Schur complement) and Rayleigh-Ritz, out = sym(A) -
 * sum_{theta_i<0} theta_i u_i u_i^T, accepted only when the Ritz residuals
 * are small and a Cholesky factorization of out + 1e-12 ||sym(A)||_F I
 * succeeds (then out is within (2 sqrt(2) 1e-11 + sqrt(K) 1e-12)
 * ||sym(A)||_F of the projection in the Frobenius norm);
 * otherwise 2 -- when the bound is <= K/4, only the
 * negative eigenpairs are computed (tridiagonal reduction, bisection and
 * inverse iteration, or dsyevr RANGE='V' on (-inf, 0]) and out = sym(A) -
 * sum_{lambda_i<0} lambda_i v_i v_i^T; 1 -- that range held no eigenvalue
 * (singular PSD), sym(A) is returned; 3 -- otherwise all eigenpairs (dsyevd
 * or dsyevr by size) and the update uses the smaller side of the spectrum.
 * The result is exactly symmetric.  FEDMM_ENONFINITE on NaN/inf, FEDMM_ELAPACK when LAPACK fails.
 * work: fedmm_project_psd_work(K) doubles, iwork: fedmm_project_psd_iwork(K)
 * ints (sizes from the LAPACK documentation, no workspace query needed). */
size_t fedmm_project_psd_work(fedmm_blas_int K);
size_t fedmm_project_psd_iwork(fedmm_blas_int K);
int fedmm_project_psd(fedmm_blas_int K, int64_t n_matrices, const double *A, double *out,
                      double *work, fedmm_blas_int *iwork, int *path,
                      const fedmm_blas_t *blas);

/* The ridge T of a flat statistic s = [vec(A) (K x K), vec(B) (p x K)], both
 * blocks row-major (the layout of fedmm.models.DictionaryLearning):
 * D = B (sym(A) + 2 eta I)^{-1} with sym(A) = (A + A^T) / 2, through
 * fedmm_dictionary_update_ridge.  D: p x K column-major (ldd).  work:
 * fedmm_dictionary_update_ridge_flat_work(p, K) doubles. */
size_t fedmm_dictionary_update_ridge_flat_work(fedmm_blas_int p, fedmm_blas_int K);
int fedmm_dictionary_update_ridge_flat(fedmm_blas_int p, fedmm_blas_int K, const double *s,
                                       double eta, double *D, fedmm_blas_int ldd, double *work,
                                       const fedmm_blas_t *blas);

/* One server step of FedMM on dictionary learning with the ridge T (FedMM
 * Alg. 2 lines 15-16, then T for line 4), for the flat statistic layout
 * [vec(A) (K x K), vec(B) (p x K, row-major)] of length q = K*K + p*K:
 *     S_new = S + gamma H                    (elementwise: product, then sum),
 *     S_new = (proj_PSD(sym(A_new)), B_new)   when project != 0 (fedmm_project_psd),
 *     D     = B_new (sym(A_new) + 2 eta I)^{-1}   (fedmm_dictionary_update_ridge_flat),
 * D: p x K column-major (ld p).  FEDMM_ENONFINITE if S_new is not finite,
 * FEDMM_ELAPACK as the kernels it calls.  work:
 * fedmm_dictionary_sa_step_work(p, K) doubles, iwork:
 * fedmm_project_psd_iwork(K) ints. */
size_t fedmm_dictionary_sa_step_work(fedmm_blas_int p, fedmm_blas_int K);
int fedmm_dictionary_sa_step(fedmm_blas_int p, fedmm_blas_int K, const double *S, const double *H,
                             double gamma, double eta, int project, double *S_new, double *D,
                             double *work, fedmm_blas_int *iwork, const fedmm_blas_t *blas);

/* ---- compiled surrogate models and the FedMM round engine (engine.c) ---- */
/* A surrogate model as the compiled round engine sees it (FedMM paper,
 * MM-1/MM-2): a statistic S of q doubles, the map T, the projection Pi onto
 * the surrogate domain, and the oracle S̄(Z, theta) averaged over a minibatch.
 * Any model that fills this struct (in C, in Cython, or as numba cfuncs) runs
 * inside fedmm_client_round / fedmm_server_step without Python.
 *
 * The compiled parameter is one buffer of theta_size doubles: its first d
 * entries are the flat parameter (Python's model.theta_vector(theta)), the
 * rest are quantities derived from them that the oracle needs (for example a
 * column-major copy of a dictionary, or the Cholesky factors of covariances).
 * A client's data are n_samples rows of sample_size doubles (row-major).
 * Every callback returns FEDMM_OK or a negative FEDMM_E* code, must not keep
 * pointers across calls, and must be reentrant: clients run on several
 * threads at once with separate workspaces.
 *
 *   statistic(ctx, theta, data, n_samples, idx, b, memory, out, n_unconverged, work)
 *       out[0..q) = b^{-1} sum_{j<b} S̄(data row idx[j], theta); idx == NULL
 *       means the rows 0..b-1 (b == n_samples).  memory: the client's
 *       per-sample memory, n_samples rows of memory_size doubles (warm
 *       starts of an inner solver), read and written at the rows idx; NULL
 *       when memory_size == 0 or the model runs without it.  *n_unconverged
 *       is incremented by the inner solver's unconverged columns (may stay
 *       untouched).  work: statistic_work(ctx, b) doubles.
 *   project(ctx, s, work)       s <- Pi(s) in place; NULL: S is the whole space.
 *   T(ctx, s, theta, work)      theta[0..theta_size) = T(s) with its derived
 *                               part; theta holds the previous parameter on
 *                               entry (a warm start for iterative T).
 *   derive(ctx, theta, work)    theta[d..theta_size) from theta[0..d); NULL
 *                               when theta_size == d.
 *   project_theta(ctx, theta, work)
 *                               theta[0..d) <- projection onto Theta (the
 *                               parameter-space baseline); NULL: identity.
 * server_work doubles serve project, T, derive and project_theta (a model
 * that needs integer workspace carves it from these doubles). */
typedef size_t (*fedmm_statistic_work_fn)(const void *ctx, int64_t b);
typedef int (*fedmm_statistic_fn)(const void *ctx, const double *theta, const double *data,
                                  int64_t n_samples, const int64_t *idx, int64_t b,
                                  double *memory, double *out, int64_t *n_unconverged,
                                  double *work);
typedef int (*fedmm_inplace_fn)(const void *ctx, double *x, double *work);
typedef int (*fedmm_map_fn)(const void *ctx, const double *s, double *theta, double *work);
typedef struct fedmm_model {
    const void *ctx;
    int64_t q;
    int64_t d;
    int64_t theta_size;
    int64_t sample_size;
    int64_t memory_size;
    size_t server_work;
    fedmm_statistic_work_fn statistic_work;
    fedmm_statistic_fn statistic;
    fedmm_inplace_fn project;       /* s <- Pi(s) */
    fedmm_map_fn T;
    fedmm_inplace_fn derive;        /* theta[d..theta_size) from theta[0..d) */
    fedmm_inplace_fn project_theta; /* theta[0..d) onto Theta */
} fedmm_model_t;

/* Checks the sizes and mandatory callbacks of a model (FEDMM_EINVAL if not). */
int fedmm_model_check(const fedmm_model_t *model);

/* How a round runs (FedMM paper Alg. 2; Alg. 4 with mode COMPRESS*).
 *   space    FEDMM_SPACE_STATISTIC (FedMM: messages in S-space, length q) or
 *            FEDMM_SPACE_PARAMETER (the Theta-space baseline: messages are
 *            theta vectors, length d; the client sends T(Pi(S_i)));
 *   mode     FEDMM_MODE_SELECT (Alg. 2: the server contacts the active
 *            clients), FEDMM_MODE_COMPRESS (Alg. 4: every client computes;
 *            the coin U_i, drawn by the server, decides whether it sends),
 *            FEDMM_MODE_COMPRESS_LOCAL (Alg. 4, U_i ~ Bernoulli(p) drawn by
 *            the client as the first draw of its round stream);
 *   oracle   FEDMM_ORACLE_MINIBATCH (batch rows without replacement, batch
 *            capped at the client's n_samples) or FEDMM_ORACLE_FULL;
 *   project  apply Pi (or project_theta) in the server step;
 *   p        participation probability (m/n for a fixed count m);
 *   alpha    control-variate step: V_i <- V_i + (alpha/p) Quant(Delta_i),
 *            V <- V + alpha sum_i (mu_i/p) Quant(Delta_i);
 *   statistic_max  S-space: the largest magnitude of an entry of a message,
 *            of H, of S' and of the new V that the server step accepts (the
 *            range the model's Pi and T handle; 0 or +inf: any finite
 *            value).  Theta-space: unused (finite values). */
#define FEDMM_MODE_SELECT 0
#define FEDMM_MODE_COMPRESS 1
#define FEDMM_MODE_COMPRESS_LOCAL 2
#define FEDMM_ORACLE_MINIBATCH 0
#define FEDMM_ORACLE_FULL 1
typedef struct fedmm_round_config {
    int space;
    int mode;
    int oracle;
    int project;
    int64_t batch;
    double p;
    double alpha;
    double statistic_max;
} fedmm_round_config_t;

/* One client as the engine sees it: its data, per-sample memory (NULL or
 * n_samples x memory_size), control variate V (message length), the key of
 * its counter-based Philox streams (round t draws from counter (0, t, 0, 0))
 * and its compressor. */
typedef struct fedmm_client {
    const double *data;
    int64_t n_samples;
    double *memory;
    double *V;
    uint64_t key[2];
    fedmm_quantizer_t quantizer;
} fedmm_client_t;

/* Message length of a configuration: q (S-space) or d (Theta-space). */
int64_t fedmm_message_size(const fedmm_model_t *model, const fedmm_round_config_t *cfg);

/* One client's part of round t (Alg. 2 lines 5-11, Alg. 4 lines 4-8), what
 * fedmm.algorithms.Client.step computes:
 *   1. the stream Philox(key, (0, t, 0, 0)); COMPRESS_LOCAL: U = (next_double < p);
 *      COMPRESS: U = coin (the server's); SELECT: U = 1;
 *   2. idx = fedmm_sample_without_replacement(stream, n_samples, min(batch, n_samples))
 *      (minibatch oracle), or all rows (full oracle);
 *   3. S_i = model statistic at theta over idx (with the client's memory);
 *   4. L = S_i (S-space) or T(Pi(S_i))[0..d) (Theta-space);
 *   5. Delta = (L - ref) - V (ref: S_t, or theta_t[0..d));
 *   6. U = 0: *sent = 0 and nothing else changes; else out = Quant(Delta)
 *      drawn from the same stream (fedmm_quantizer_apply), *sent = 1, and
 *      V <- V + (alpha/p) out when alpha != 0.
 * work: fedmm_client_round_work(model, cfg, max n_samples) doubles; iwork:
 * fedmm_client_round_iwork(max n_samples) int64. */
size_t fedmm_client_round_work(const fedmm_model_t *model, const fedmm_round_config_t *cfg,
                               int64_t max_n_samples);
size_t fedmm_client_round_iwork(int64_t max_n_samples);
int fedmm_client_round(const fedmm_model_t *model, const fedmm_round_config_t *cfg,
                       fedmm_client_t *client, uint64_t t, int coin, const double *theta,
                       const double *ref, double *out, int *sent, int64_t *n_unconverged,
                       double *work, int64_t *iwork);

/* The server's selection of round t (Alg. 2 line 2), drawn from
 * Philox(key, (0, t, 0, 0)): count >= 0: count distinct clients
 * (fedmm_sample_without_replacement), sorted; count < 0: independent coins
 * next_double < p for i = 0..n-1.  SELECT: ids = the active clients;
 * COMPRESS: ids = all n clients and coins[i] = U_i; COMPRESS_LOCAL: ids = all
 * clients, nothing drawn.  ids: n int64, *m receives their number; coins: n
 * bytes (written for COMPRESS only; may be NULL otherwise); work: n int64. */
int fedmm_server_select(const uint64_t key[2], uint64_t t, int64_t n, int64_t count, double p,
                        int mode, int64_t *ids, int64_t *m, uint8_t *coins, int64_t *work);

/* The server's part of a round (Alg. 2 lines 13-17, then T for line 4):
 *   acc = sum_k weights[k] values[k]  (fedmm_weighted_sum, k in order;
 *         weights[k] = mu_i / p of the k-th sender, values m rows of the
 *         message length),  H = V + acc,
 *   S-space:     S' = S + gamma H; Pi(S') when cfg->project; theta = T(S');
 *                dist[0] = ||S' - S||^2;
 *   Theta-space: theta' = theta + gamma H; project_theta when cfg->project;
 *                derive; dist[0] = 0;
 *   dist[1] = ||theta'[0..d) - theta[0..d)||^2;  V <- V + alpha acc.
 * S, V and theta are updated in place (S unused in Theta-space), and only
 * when the step succeeds.  FEDMM_ENONFINITE when an entry of a message, of
 * H, of S' or theta' or of the new V is NaN or infinite; FEDMM_ERANGE when a
 * finite one of a message, of H, of S' (after Pi) or of the new V exceeds
 * cfg->statistic_max (S-space); the model's status when Pi or T fails.  work:
 * fedmm_server_step_work(model, cfg, m) doubles. */
size_t fedmm_server_step_work(const fedmm_model_t *model, const fedmm_round_config_t *cfg,
                              int64_t m);
/* fedmm_server_step after its first part: acc (the weighted sum of the
 * messages, already checked) given, then H = V + acc and the rest, the same
 * operations (fedmm_server_step calls it).  work:
 * fedmm_server_update_work(model, cfg) doubles. */
size_t fedmm_server_update_work(const fedmm_model_t *model, const fedmm_round_config_t *cfg);
int fedmm_server_update(const fedmm_model_t *model, const fedmm_round_config_t *cfg, const double *acc,
                        double gamma, double *S, double *V, double *theta, double *dist, double *work);
/* FEDMM_OK when every x_j is finite with |x_j| <= bound (bound may be
 * INFINITY); FEDMM_ENONFINITE on NaN or infinity, FEDMM_ERANGE on a finite
 * value beyond the bound. */
int fedmm_check_range(size_t n, const double *x, double bound);
/* The bound fedmm_server_step holds messages to: cfg->statistic_max in
 * S-space when positive, else INFINITY. */
double fedmm_message_bound(const fedmm_round_config_t *cfg);
int fedmm_server_step(const fedmm_model_t *model, const fedmm_round_config_t *cfg, int64_t m,
                      const double *weights, const double *values, double gamma, double *S,
                      double *V, double *theta, double *dist, double *work);

/* ---- worker pool (pool.c) ------------------------------------------------ */
/* A small pool of persistent worker threads that run the items 0..n_items-1
 * of a job: fedmm_pool_run(pool, n_items, fn, ctx) calls fn(ctx, k, worker)
 * once for every k, on the calling thread (worker 0) and the pool's
 * n_threads - 1 threads (workers 1..n_threads-1), and returns when every
 * call has returned.  Items go to whichever thread asks next (one shared
 * atomic counter: a dynamic schedule); fn must therefore make its results
 * depend on k only, never on worker (worker only picks a per-thread
 * workspace), and then a job gives the same results, bit for bit, for
 * every n_threads and every interleaving.  The caller never waits for a
 * thread that has not started an item: a worker that the operating system
 * has not scheduled yet simply finds no item left.  A job that took
 * longer than the calling thread alone would have (a worker lost its core
 * in the middle of an item: another process keeps that core busy) makes
 * the next 1, 2, 4, ..., 256 jobs (doubling while that goes on) run on the
 * calling thread alone; a job that gains from the workers resets it.  Who
 * runs an item never changes the results.
 *
 * Waits: a thread with nothing to do spins for at most spin_ns nanoseconds
 * (a CPU pause per test), then sleeps on a condition variable (a futex on
 * Linux) and uses no CPU until the next job or the end of the job it waits
 * for.  So idle workers between the jobs of a busy caller cost nothing to
 * a process on another core, and a short spin_ns (a few microseconds)
 * keeps the wake-up latency of back-to-back jobs low.
 *
 * Worker threads block every signal: signals go to the other threads of
 * the process (a Python program's main thread gets Ctrl-C).  A pool may
 * serve one job at a time: fedmm_pool_run must not be called concurrently
 * on one pool, nor from inside fn.  Builds without POSIX threads (the meson
 * option threads=none) run every job on the calling thread, and
 * fedmm_pool_size is then 1.
 *
 * fedmm_pool_create: n_threads >= 1 (the caller included), spin_ns >= 0;
 * FEDMM_EINVAL otherwise, FEDMM_ENOMEM when a thread cannot be started (no
 * pool is then left behind).  fedmm_pool_destroy(NULL) does nothing; it
 * joins the workers, so none outlives it. */
typedef struct fedmm_pool fedmm_pool_t;
typedef void (*fedmm_pool_task_fn)(void *ctx, int64_t item, int worker);
int fedmm_pool_create(int n_threads, int64_t spin_ns, fedmm_pool_t **pool);
void fedmm_pool_destroy(fedmm_pool_t *pool);
int fedmm_pool_size(const fedmm_pool_t *pool);
int fedmm_pool_run(fedmm_pool_t *pool, int64_t n_items, fedmm_pool_task_fn fn, void *ctx);

/* Dictionary learning as a compiled model (FedMM paper §2.3, §6 with the ridge
 * T of weight eta): q = K*K + p*K (blocks A then B, row-major), d = p*K (the
 * dictionary row-major), theta_size = 2 p K (then column-major), memory_size
 * = K (warm-start codes).  The statistic gathers the minibatch and its codes
 * and calls fedmm_dictionary_statistics; project is fedmm_project_psd on the
 * A block; T is fedmm_dictionary_update_ridge_flat.  lasso holds the solver's
 * options (positive must be 0; warm_start is ignored: the codes warm-start
 * from the client's memory when it has one).  The context must outlive the
 * model. */
typedef struct fedmm_dictionary_model {
    fedmm_blas_int p;
    fedmm_blas_int K;
    double eta;
    fedmm_lasso_options_t lasso;
    const fedmm_blas_t *blas;
} fedmm_dictionary_model_t;
int fedmm_dictionary_model(const fedmm_dictionary_model_t *ctx, fedmm_model_t *model);

/* A model whose statistic is a per-sample function (for example a numba
 * cfunc): S̄(z, theta) of one row z is written into out[0..q) by
 * sample_statistic(constants, theta, z, out), and the engine averages:
 * out = (sum_{j<b} s_j) / b, accumulated in row order.  T(constants, s,
 * theta) and project(constants, s) are optional per-model functions (T is
 * required to run the server step).  theta_size == d (no derived part). */
typedef int (*fedmm_sample_statistic_fn)(const double *constants, const double *theta,
                                         const double *z, double *out);
typedef int (*fedmm_sample_map_fn)(const double *constants, const double *s, double *theta);
typedef int (*fedmm_sample_project_fn)(const double *constants, double *s);
typedef struct fedmm_sample_model {
    const double *constants;
    int64_t q;
    int64_t d;
    int64_t sample_size;
    fedmm_sample_statistic_fn sample_statistic;
    fedmm_sample_map_fn T;
    fedmm_sample_project_fn project;
} fedmm_sample_model_t;
int fedmm_sample_model(const fedmm_sample_model_t *ctx, fedmm_model_t *model);

/* ---- EM-family surrogate models as compiled models (models_em.c) ---- */
/* The Gaussian mixture (FedEM paper App. F.1, tied or full covariances), the
 * Poisson model with a latent log-intensity shift (FedMM paper App. C.1) and
 * the toy of FedMM paper Remark 1, each as a fedmm_model_t.  The Python
 * models (fedmm.models.GaussianMixture, PoissonLatent, InverseToy) call these
 * very callbacks for their statistic, projection and T, so that the Python
 * and the compiled backends compute the same numbers.  Every context must
 * outlive its model and the arrays it points to. */

/* Euclidean projection of v (n values) onto the capped simplex
 * {x : x_i >= floor, sum_i x_i = 1} (0 <= floor, n floor < 1), sort-based
 * (Held, Wolfe, Crowder): u = sort(v - floor) decreasing, tau = (sum_{k<=r}
 * u_k - (1 - n floor)) / (r + 1) for the last r with u_r > that ratio, and
 * out_i = max(v_i - floor - tau, 0) + floor.  out may equal v.  work: n
 * doubles.  FEDMM_ENONFINITE on NaN/inf in v. */
int fedmm_project_capped_simplex(int64_t n, const double *v, double floor, double *out,
                                 double *work);

/* Eigenvalue floor of a stack of n_matrices symmetric p x p matrices, in
 * place (the positive-definite guard of the mixture's T).  Per matrix A:
 *   floor > 0: unchanged (bit for bit) when A - floor I has a Cholesky
 *     factor; else A <- sym(V diag(max(lambda_i, f)) V^T) from all its
 *     eigenpairs (dsyevd, or dsyevr when the table has no dsyevd), sym(X) =
 *     (X + X^T) / 2 (exactly symmetric), with f = floor when that matrix has
 *     a Cholesky factor, else (rounding: lambda_max / floor beyond about
 *     1 / (p eps)) the smallest f = 2^k p eps lambda_max, k >= 0, above floor
 *     for which it has one -- the rebuilt matrix always has one;
 *   floor == 0: unchanged when A has a Cholesky factor, else FEDMM_ELAPACK
 *     (singular or indefinite).
 * Only the lower triangle (column-major; upper, row-major) is read by the
 * Cholesky test.  clipped[s] (optional) = 1 when matrix s was rebuilt.
 * work: fedmm_floor_eigenvalues_work(p) doubles, iwork:
 * fedmm_floor_eigenvalues_iwork(p) ints.  FEDMM_ENONFINITE on NaN/inf. */
size_t fedmm_floor_eigenvalues_work(fedmm_blas_int p);
size_t fedmm_floor_eigenvalues_iwork(fedmm_blas_int p);
int fedmm_floor_eigenvalues(fedmm_blas_int p, int64_t n_matrices, double *A, double floor,
                            int *clipped, double *work, fedmm_blas_int *iwork,
                            const fedmm_blas_t *blas);

/* Gaussian mixture with G components in R^p, data rows y (sample_size p).
 * Statistic (q doubles, the layout of fedmm.models.GaussianMixture):
 *   [mean_j rho_l(y_j)]_l (G), [mean_j rho_l(y_j) y_j]_l (G x p, row-major),
 *   full only: [mean_j rho_l(y_j) y_j y_j^T]_l (G x p x p, row-major),
 * with the responsibilities rho_l(y) = pi_l N(y; mu_l, Sigma_l) / sum_u ...
 * computed per row by log-sum-exp from
 *   tied: logits y^T Sigma^{-1} mu_l + log pi_l - 1/2 mu_l^T Sigma^{-1} mu_l
 *         (one GEMM of the rows with the natural means),
 *   full: logits -1/2 ||y^T L_l^{-T} - mu_l^T L_l^{-T}||^2 + log pi_l - 1/2 ln det Sigma_l
 *         (one GEMM of the rows with the whitening matrices side by side),
 * rows processed in chunks of FEDMM_GMM_CHUNK (workspace independent of N);
 * the sums accumulate chunk after chunk (BLAS GEMMs with beta = 1 for the
 * products) and are divided by b at the end.  When a row costs at most 64
 * multiply-adds (G p tied, G p^2 full) the products are plain loops, row
 * after row, instead of BLAS calls.  The arithmetic depends on G, p, b
 * and the BLAS only: the same call gives the same numbers on any thread.
 * Parameter: d = G + G p + p^2 (tied) or G + G p + G p^2 (full) doubles
 * (pi, mu row-major, Sigma row-major: fedmm.models.GaussianMixture.theta_vector),
 * then the derived part
 *   tied: natural means Sigma^{-1} mu^T (p x G, column-major), offsets (G),
 *         L^{-T} (p x p, row-major; Sigma = L L^T), ln det Sigma (1);
 *   full: W = [L_1^{-T} ... L_G^{-T}] (p x G p, row-major), shifts
 *         [mu_l^T L_l^{-T}]_l (G p), offsets log pi_l - 1/2 ln det Sigma_l (G).
 * derive: Cholesky (dpotrf, lower triangle of the column-major view), dpotrs,
 * dtrtri; FEDMM_ELAPACK if a covariance is not positive definite, FEDMM_EINVAL
 * if a weight is not positive or the table has no dtrtri.
 * T (FedEM eq. (60)-(62)): pi = s1 / sum s1, mu_l = s2_l / s1_l, and
 *   tied: Sigma = known_covariance, or sym(M2 - sum_l s2_l mu_l^T)
 *         (second_moment = M2 = N^{-1} sum_i y_i y_i^T; FEDMM_EINVAL when NULL),
 *   full: Sigma_l = sym(s3_l / s1_l - mu_l mu_l^T),
 * each estimated covariance through fedmm_floor_eigenvalues(reg_covar); then
 * derive.  FEDMM_EINVAL if a weight of s is not positive.
 * project: the weights block onto the capped simplex of min_weight
 * (fedmm_project_capped_simplex); full: then, per component with s1_l and
 * s2_l fixed, the second-moment block onto {X symmetric : X - s2_l s2_l^T /
 * s1_l PSD}: s3_l <- s2_l s2_l^T / s1_l + proj_PSD(sym(s3_l) - s2_l s2_l^T /
 * s1_l) (fedmm_project_psd; the exact Euclidean projection of s3_l onto that
 * set), so that [[s1_l, s2_l^T], [s2_l, s3_l]] is PSD and T's covariance
 * s3_l / s1_l - mu_l mu_l^T too; sym(s3_l) is kept bit for bit when already
 * in it.  s1_l = 0 (min_weight = 0 only): s2_l <- 0, s3_l <- proj_PSD(sym
 * s3_l).  The output is in the convex set of those constraints; the
 * composition is not the joint Euclidean projection onto it.  Tied: the
 * weights only (T's floor keeps Sigma(s) <= M2 positive definite for any
 * positive weights).  FEDMM_ENONFINITE on NaN/inf.  No parameter projection (Theta-space
 * averages of weights and covariances are valid only while they stay in the
 * simplex and the positive-definite cone). */
#define FEDMM_GMM_TIED 0
#define FEDMM_GMM_FULL 1
#define FEDMM_GMM_CHUNK 256
typedef struct fedmm_gmm_model {
    fedmm_blas_int G;
    fedmm_blas_int p;
    int covariance;                 /* FEDMM_GMM_TIED or FEDMM_GMM_FULL */
    double reg_covar;               /* eigenvalue floor of T's covariances (>= 0) */
    double min_weight;              /* floor of the weights block (0 <= G min_weight < 1) */
    const double *second_moment;    /* tied: M2 (p x p), or NULL */
    const double *known_covariance; /* tied: fixed Sigma (p x p, positive definite), or NULL */
    const fedmm_blas_t *blas;       /* dgemm, dpotrf, dpotrs, dtrtri, dsyevd or dsyevr */
} fedmm_gmm_model_t;
int fedmm_gmm_model(const fedmm_gmm_model_t *ctx, fedmm_model_t *model);
/* Posterior probabilities of the components for n_samples rows (row-major
 * n_samples x p) under the derived parameter theta (theta_size doubles, as
 * the model's statistic reads it): rho (row-major n_samples x G) =
 * softmax_l(logit_l(y)), with logits omitting the terms common to all
 * components (tied: -1/2 y^T Sigma^{-1} y - 1/2 ln det Sigma; both: -(p/2)
 * ln 2 pi); log_norm[j] = log sum_l exp(logit_l(y_j)) when not NULL.  Rows
 * go in chunks of FEDMM_GMM_CHUNK: one GEMM per chunk (all components'
 * whitened rows for "full"), no temporary of size N x G p.  work:
 * fedmm_gmm_responsibilities_work(ctx) doubles.  FEDMM_EINVAL on NULL or
 * negative arguments. */
size_t fedmm_gmm_responsibilities_work(const fedmm_gmm_model_t *ctx);
int fedmm_gmm_responsibilities(const fedmm_gmm_model_t *ctx, const double *theta, const double *data,
                               int64_t n_samples, double *rho, double *log_norm, double *work);

/* Poisson counts with a latent log-intensity shift h on a finite support
 * (FedMM paper App. C.1): data rows are one count Z each (sample_size 1).
 * Posterior of h_k given (Z, theta): proportional to w_k exp(Z h_k - e^theta e^{h_k}).
 *   joint:          S = (Z, -E[e^h | Z, theta]) (q = 2), T(s) = ln(s1 / (lam - s2));
 *   explicit mean:  S = -E[e^h | Z, theta] (q = 1),      T(s) = ln(mean_count / (lam - s)).
 * Statistic per row: logits Z h_k + log w_k - e^theta e^{h_k}, shifted by
 * their maximum, e_k = exp(.), E[e^h | Z] = (sum_k e_k e^{h_k}) / sum_k e_k;
 * the means are sums in row order divided by b.  Parameter: d = 1 (theta),
 * theta_size = 2 (theta, e^theta).  project: the last block clipped to
 * [-max_k e^{h_k}, -min_k e^{h_k}], joint: s1 <- max(s1, min_mean).
 * T: FEDMM_EINVAL unless s1 > 0 and lam - s2 > 0. */
#define FEDMM_POISSON_JOINT 0
#define FEDMM_POISSON_EXPLICIT_MEAN 1
typedef struct fedmm_poisson_model {
    int64_t K;                 /* support size */
    const double *support;     /* h_k (K) */
    const double *log_prior;   /* log w_k (K) */
    const double *exp_support; /* e^{h_k} (K) */
    double lam;                /* prior strength > 0 */
    double min_mean;           /* joint: floor of s1 in project (> 0) */
    double mean_count;         /* explicit mean: E_pi[Z] > 0, or NaN while unknown (T: FEDMM_EINVAL) */
    int parameterization;      /* FEDMM_POISSON_JOINT or FEDMM_POISSON_EXPLICIT_MEAN */
} fedmm_poisson_model_t;
int fedmm_poisson_model(const fedmm_poisson_model_t *ctx, fedmm_model_t *model);

/* The toy of FedMM paper Remark 1, l(Z, theta) = Z theta + 1/theta: q = d =
 * theta_size = 1, data rows are one positive sample Z each.  Statistic: the
 * minibatch mean (sum in row order, divided by b); T(s) = 1 / sqrt(s)
 * (FEDMM_EINVAL unless s > 0); project: s <- max(s, floor); project_theta:
 * theta <- max(theta, floor). */
typedef struct fedmm_inverse_toy_model {
    double floor; /* > 0 */
} fedmm_inverse_toy_model_t;
int fedmm_inverse_toy_model(const fedmm_inverse_toy_model_t *ctx, fedmm_model_t *model);

/* ---- non-smooth problems, FedMLS (nonsmooth.c) ---- */
/* Losses l(z, y) of a linear prediction z = a_j^T w (FedMLS paper §4):
 * hinge max(0, 1 - y z) with subderivative -y [y z < 1]; l1 |z - y| with
 * subderivative sign(z - y). */
#define FEDMM_LOSS_HINGE 0
#define FEDMM_LOSS_L1 1

/* The local loop of one FedMLS round (FedMLS paper Algorithm 1 lines 7-12,
 * eq. (9)) for n clients, client i independently:
 *     u_0 = U[i] (z_{k-1}^i),  for t = 1..n_steps:
 *       g   = scale_i * sum_{j in batch_t(i)} l'(a_j^T u, y_j) a_j
 *       u  <- u - (weight * g + u - V[i]) / (1 + t/2)
 *       u  <- u * min(1, radius / ||u||_2)           (skipped if radius <= 0)
 *       ua <- (1 - theta_t) ua + theta_t u,  theta_t = 2(t+1)/(t(t+3)), ua_0 = u_0
 * and on return U[i] = u_T, U_avg[i] = ua_T.  weight = 1/(n beta_k).
 * design: N x p row-major (row j = a_j), target: N; client i owns rows
 * offsets[i] .. offsets[i+1]-1 (offsets has n+1 entries, each client non-empty).
 * rows == NULL: full subgradients (scale unused, treated as 1).  Otherwise
 * rows is n_steps x row_stride row-major; step t uses for client i the global
 * row indices rows[(t-1)*row_stride + b], row_offsets[i] <= b < row_offsets[i+1]
 * (each must lie in client i's range), scaled by scale[i] (m_i / b_i for an
 * unbiased estimate).  V, U, U_avg: n x p row-major; work: p doubles.
 * FEDMM_EINVAL on a bad loss code, NULL pointer, negative or non-finite weight,
 * or an index outside its client's range (checked before any output is written). */
int fedmm_fedmls_local_round(int loss, size_t n, size_t p, const double *design,
                             const double *target, const int64_t *offsets, size_t n_steps,
                             const int64_t *rows, size_t row_stride,
                             const int64_t *row_offsets, const double *scale,
                             double weight, double radius, const double *V, double *U,
                             double *U_avg, double *work);

/* The same loop resumed after first_step steps: steps t = first_step+1 ..
 * first_step+n_steps, with U[i] = u_{first_step} and U_avg[i] = ua_{first_step}
 * on entry (U_avg is only written from U when first_step == 0).  rows, when
 * given, holds the n_steps rows of these steps only (row r is step
 * first_step+1+r).  Running 0..T in one call or as consecutive calls
 * (first_step = 0, T1, T1+T2, ...) gives identical results bit for bit, so a
 * caller can run a long loop in slices of bounded work and check for
 * interrupts between them.  FEDMM_EINVAL as above, or if first_step + n_steps
 * overflows the step counter; the index checks cover this call's rows only. */
int fedmm_fedmls_local_steps(int loss, size_t n, size_t p, const double *design,
                             const double *target, const int64_t *offsets, size_t first_step,
                             size_t n_steps, const int64_t *rows, size_t row_stride,
                             const int64_t *row_offsets, const double *scale,
                             double weight, double radius, const double *V, double *U,
                             double *U_avg, double *work);

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_KERNELS_H */
