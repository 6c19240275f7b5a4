/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_lasso.h -- batched LASSO and the dictionary-learning statistics (lasso.c).
 *
 * One family of the public C API; fedmm_kernels.h includes every family
 * header and states the conventions they share (status codes, column-major
 * matrices, caller-provided workspaces).  This header compiles on its own.
 */
#ifndef FEDMM_LASSO_H
#define FEDMM_LASSO_H

#include "fedmm_common.h"
#include "fedmm_blas.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * G = D^T D, C = D^T Z.  G: K x K symmetric (both triangles), C: K x b, H:
 * K x b, column-major matrix views (fedmm_common.h): K = G->rows = G->cols =
 * C->rows = H->rows >= 1, b = C->cols = H->cols, each leading dimension >=
 * K.  Coordinate descent with the gradient kept up to date and a Newton step
 * on a stable support, or the active set (opts->method).  znorm2[j] =
 * ||z_j||^2 scales column j's stopping test; znorm2 == NULL uses a certified
 * bound from G, C alone.  n_iter[j] (optional) receives the iterations used;
 * *n_unconverged (optional) the number of columns that hit max_iter.
 * interrupt may be NULL (never stopped); otherwise FEDMM_EINTR when
 * interrupt->poll asked to stop: one column can run up to opts->max_iter
 * iterations of about K^2 multiply-adds each (hours with tol = 0 and a large
 * max_iter), so the check runs inside the column loops, every
 * FEDMM_INTERRUPT_WORK multiply-adds.  FEDMM_EINVAL when G, C or H is NULL,
 * the sizes disagree, or a size or leading dimension is negative or does not
 * fit a fedmm_blas_int.
 * work: fedmm_lasso_gram_work(K) doubles. */
size_t fedmm_lasso_gram_work(fedmm_blas_int K);
int fedmm_lasso_gram_ex(const fedmm_matrix_t *G, const fedmm_matrix_t *C, const double *znorm2,
                        const fedmm_lasso_options_t *opts, const fedmm_matrix_mut_t *H, int *n_iter,
                        int64_t *n_unconverged, double *work, const fedmm_interrupt_t *interrupt);
/* The flat forms of fedmm_lasso_gram_ex, kept for ABI compatibility (thin
 * wrappers: the same computation, bit for bit): G (K x K, ldg), C (K x b,
 * ldc) and H (K x b, ldh) passed as (pointer, leading dimension) with the
 * sizes K and b; fedmm_lasso_gram never stops (interrupt NULL). */
int fedmm_lasso_gram(fedmm_blas_int K, fedmm_blas_int b, const double *G,
                     fedmm_blas_int ldg, const double *C, fedmm_blas_int ldc,
                     const double *znorm2, const fedmm_lasso_options_t *opts, double *H,
                     fedmm_blas_int ldh, int *n_iter, int64_t *n_unconverged, double *work);
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

/* The outputs of fedmm_dictionary_statistics_ex: the arguments of the same
 * names of fedmm_dictionary_statistics (H is required; A, B, objective,
 * n_iter and n_unconverged may be NULL). */
typedef struct fedmm_dictionary_statistics_out {
    double *H;
    double *A;
    double *B;
    double *objective;
    int *n_iter;
    int64_t *n_unconverged;
} fedmm_dictionary_statistics_out_t;

/* fedmm_dictionary_statistics_interruptible with the dictionary D (p x K)
 * and the data Z (p x b) as matrix views and the outputs in one struct:
 * p = D->rows = Z->rows, K = D->cols, b = Z->cols, ldd = D->ld, ldz = Z->ld.
 * The same computation, bit for bit; FEDMM_EINVAL also when D, Z or out is
 * NULL, the row counts differ, or a size or leading dimension is negative
 * or does not fit a fedmm_blas_int.  interrupt may be NULL (never stopped). */
int fedmm_dictionary_statistics_ex(const fedmm_matrix_t *D, const fedmm_matrix_t *Z,
                                   const fedmm_lasso_options_t *opts, int64_t n_segments,
                                   const int64_t *offsets,
                                   const fedmm_dictionary_statistics_out_t *out, double *work,
                                   const fedmm_blas_t *blas, const fedmm_interrupt_t *interrupt);

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_LASSO_H */
