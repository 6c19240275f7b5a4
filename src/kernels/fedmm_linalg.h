/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_linalg.h -- dictionary updates and the PSD projection (linalg.c).
 *
 * One family of the public C API; fedmm_kernels.h includes every family
 * header and states the conventions they share (status codes, column-major
 * matrices, caller-provided workspaces).  This header compiles on its own.
 */
#ifndef FEDMM_LINALG_H
#define FEDMM_LINALG_H

#include "fedmm_common.h"
#include "fedmm_blas.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * after max_iter sweeps (D then holds the last iterate).  *n_iter (optional):
 * sweeps.  A: K x K, B: p x K, D: p x K, column-major matrix views
 * (fedmm_common.h): K = A->rows = A->cols = B->cols = D->cols >= 1, p =
 * B->rows = D->rows >= 1, leading dimensions lda >= K, ldb, ldd >= p.
 * FEDMM_EINVAL when A, B or D is NULL, the sizes disagree, a size or leading
 * dimension is negative or does not fit a fedmm_blas_int, eta or tol is
 * negative or NaN, or max_iter < 0.  work: p doubles. */
int fedmm_dictionary_update_unit_norm_ex(const fedmm_matrix_t *A, const fedmm_matrix_t *B, double eta,
                                         double tol, int max_iter, const fedmm_matrix_mut_t *D, int *n_iter,
                                         double *work);
/* The flat form of fedmm_dictionary_update_unit_norm_ex, kept for ABI
 * compatibility (a thin wrapper: the same computation, bit for bit): A (K x
 * K, lda), B (p x K, ldb) and D (p x K, ldd) passed as (pointer, leading
 * dimension) with the sizes p and K. */
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
 * negative eigenvalues by K - c + 1 (Cauchy interlacing) and: 2 -- when the
 * bound is <= K/4, only the
 * negative eigenpairs are computed (tridiagonal reduction, bisection and
 * inverse iteration, or dsyevr RANGE='V' on (-inf, 0]) and out = sym(A) -
 * sum_{lambda_i<0} lambda_i v_i v_i^T; 1 -- that range held no eigenvalue
 * (singular PSD), sym(A) is returned; 3 -- otherwise all eigenpairs (dsyevd
 * or dsyevr by size) and the update uses the smaller side of the spectrum;
 * 4 -- K >= 24 and Cholesky passed the first K/4 columns: the LDL^T of the
 * Schur complement of the rows where it stopped (dsytrf) counts at most 4
 * negative eigenvalues and shift-invert Lanczos finds them, accepted only
 * with a certificate (inertia count, residual, gap; error <= 8.5 K eps
 * ||sym(A)||_F), else paths 1-3.  blas->dtrsv may be NULL (loops instead).
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

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_LINALG_H */
