/* SPDX-License-Identifier: BSD-3-Clause
 *
 * linalg.c -- the server side of the dictionary-learning model of the FedMM
 * paper: the map T of eq. (17) with the 1/2 convention of eq. (28), and the
 * projection of the first statistic block onto the PSD cone (S = M_K^+ x
 * R^{p x K}).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "fedmm_kernels.h"
#include "internal.h"

/* ---- dictionary update: ridge -------------------------------------------- */

size_t fedmm_dictionary_update_ridge_work(fedmm_blas_int p, fedmm_blas_int K)
{
    return (size_t)K * K + (size_t)K * p;
}

int fedmm_dictionary_update_ridge(fedmm_blas_int p, fedmm_blas_int K, const double *A,
                                  fedmm_blas_int lda, const double *B, fedmm_blas_int ldb,
                                  double eta, double *D, fedmm_blas_int ldd, double *work,
                                  const fedmm_blas_t *blas)
{
    if (p < 1 || K < 1 || lda < K || ldb < p || ldd < p || !(eta >= 0.0) || A == NULL ||
        B == NULL || D == NULL || work == NULL || blas == NULL)
        return FEDMM_EINVAL;
    double *M = work;              /* A + 2 eta I, then its Cholesky factor */
    double *Dt = work + (size_t)K * K; /* D^T, K x p */
    for (fedmm_blas_int j = 0; j < K; ++j) {
        for (fedmm_blas_int i = 0; i < K; ++i) M[(size_t)j * K + i] = A[(size_t)j * lda + i];
        M[(size_t)j * K + j] += 2.0 * eta;
    }
    for (fedmm_blas_int j = 0; j < K; ++j)
        for (fedmm_blas_int i = 0; i < p; ++i) Dt[(size_t)i * K + j] = B[(size_t)j * ldb + i];
    fedmm_blas_int info = 0;
    blas->dpotrf("L", &K, M, &K, &info);
    if (info != 0) return FEDMM_ELAPACK;
    /* D (A + 2 eta I) = B  <=>  (A + 2 eta I) D^T = B^T  (the matrix is symmetric) */
    blas->dpotrs("L", &K, &p, M, &K, Dt, &K, &info);
    if (info != 0) return FEDMM_ELAPACK;
    for (fedmm_blas_int j = 0; j < K; ++j)
        for (fedmm_blas_int i = 0; i < p; ++i) D[(size_t)j * ldd + i] = Dt[(size_t)i * K + j];
    return FEDMM_OK;
}

/* ---- dictionary update: unit-norm columns (Mairal et al. 2010, Alg. 2) ---- */

/* v -= c[0] d[0] + ... + c[3] d[3], subtracted one term after the other. */
static void subtract_columns4(fedmm_blas_int p, const double *c, const double *const *d,
                              double *restrict v)
{
    const double c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
    const double *d0 = d[0], *d1 = d[1], *d2 = d[2], *d3 = d[3];
    for (fedmm_blas_int i = 0; i < p; ++i) {
        double t = v[i];
        t -= c0 * d0[i];
        t -= c1 * d1[i];
        t -= c2 * d2[i];
        t -= c3 * d3[i];
        v[i] = t;
    }
}

/* fedmm_dictionary_update_unit_norm_ex after its view checks. */
static int unit_norm_run(fedmm_blas_int p, fedmm_blas_int K, const double *A, fedmm_blas_int lda,
                         const double *B, fedmm_blas_int ldb, double eta, double tol, int max_iter,
                         double *D, fedmm_blas_int ldd, int *n_iter, double *work)
{
    if (p < 1 || K < 1 || lda < K || ldb < p || ldd < p || !(eta >= 0.0) || !(tol >= 0.0) ||
        max_iter < 0 || A == NULL || B == NULL || D == NULL || work == NULL)
        return FEDMM_EINVAL;
    double *v = work; /* p */
    int it = 0;
    int converged = 0;
    while (it < max_iter && !converged) {
        ++it;
        double max_step = 0.0;
        for (fedmm_blas_int j = 0; j < K; ++j) {
            const double *aj = A + (size_t)j * lda;
            const double *bj = B + (size_t)j * ldb;
            double *dj = D + (size_t)j * ldd;
            /* v = b_j - sum_{k != j} d_k A_kj: the column's linear term, four
             * columns per pass over v (same operations in the same order per
             * entry as one column at a time, a quarter of the loads and stores
             * of v; one column at a time ran up to 1.6x slower depending on how
             * v and D happened to be placed in memory) */
            memcpy(v, bj, (size_t)p * sizeof(double));
            const double *cols[4];
            double coef[4];
            int n_cols = 0;
            for (fedmm_blas_int k = 0; k < K; ++k) {
                if (k == j || aj[k] == 0.0) continue;
                cols[n_cols] = D + (size_t)k * ldd;
                coef[n_cols++] = aj[k];
                if (n_cols == 4) {
                    subtract_columns4(p, coef, cols, v);
                    n_cols = 0;
                }
            }
            for (int c = 0; c < n_cols; ++c)
                for (fedmm_blas_int i = 0; i < p; ++i) v[i] -= coef[c] * cols[c][i];
            /* minimize 1/2 (A_jj + 2 eta) ||d||^2 - v^T d over ||d|| <= 1:
             * d = u / max(1, ||u||) with u = v / (A_jj + 2 eta); an unused atom
             * (A_jj + 2 eta == 0) minimizes -v^T d: d = v / ||v||, or stays put. */
            const double denom = aj[j] + 2.0 * eta;
            double vnorm = 0.0;
            for (fedmm_blas_int i = 0; i < p; ++i) vnorm += v[i] * v[i];
            vnorm = sqrt(vnorm);
            double scale;
            if (denom > 0.0) {
                const double unorm = vnorm / denom;
                scale = unorm > 1.0 ? 1.0 / vnorm : 1.0 / denom;
            } else if (vnorm > 0.0) {
                scale = 1.0 / vnorm;
            } else { /* keep d_j, projected onto the unit ball */
                double dn = 0.0;
                for (fedmm_blas_int i = 0; i < p; ++i) dn += dj[i] * dj[i];
                dn = sqrt(dn);
                if (dn > 1.0) {
                    for (fedmm_blas_int i = 0; i < p; ++i) dj[i] /= dn;
                    if (dn - 1.0 > max_step) max_step = dn - 1.0;
                }
                continue;
            }
            double step = 0.0;
            for (fedmm_blas_int i = 0; i < p; ++i) {
                const double dn = v[i] * scale;
                step += (dn - dj[i]) * (dn - dj[i]);
                dj[i] = dn;
            }
            step = sqrt(step);
            if (step > max_step) max_step = step;
        }
        converged = max_step <= tol;
    }
    if (n_iter) *n_iter = it;
    return converged ? FEDMM_OK : FEDMM_ENOCONV;
}

int fedmm_dictionary_update_unit_norm_ex(const fedmm_matrix_t *A, const fedmm_matrix_t *B, double eta,
                                         double tol, int max_iter, const fedmm_matrix_mut_t *D, int *n_iter,
                                         double *work)
{
    if (A == NULL || B == NULL || D == NULL || A->cols != A->rows || B->cols != A->rows ||
        D->rows != B->rows || D->cols != A->rows || !fedmm__fits_blas_int(A->rows) ||
        !fedmm__fits_blas_int(B->rows) || !fedmm__fits_blas_int(A->ld) || !fedmm__fits_blas_int(B->ld) ||
        !fedmm__fits_blas_int(D->ld))
        return FEDMM_EINVAL;
    return unit_norm_run((fedmm_blas_int)B->rows, (fedmm_blas_int)A->rows, A->data, (fedmm_blas_int)A->ld,
                         B->data, (fedmm_blas_int)B->ld, eta, tol, max_iter, D->data, (fedmm_blas_int)D->ld,
                         n_iter, work);
}

/* The flat form, kept for ABI compatibility: packs its arguments into the
 * views of fedmm_dictionary_update_unit_norm_ex and calls it. */
int fedmm_dictionary_update_unit_norm(fedmm_blas_int p, fedmm_blas_int K, const double *A,
                                      fedmm_blas_int lda, const double *B,
                                      fedmm_blas_int ldb, double eta, double tol,
                                      int max_iter, double *D, fedmm_blas_int ldd,
                                      int *n_iter, double *work)
{
    const fedmm_matrix_t A_view = {A, K, K, lda};
    const fedmm_matrix_t B_view = {B, p, K, ldb};
    const fedmm_matrix_mut_t D_view = {D, p, K, ldd};
    return fedmm_dictionary_update_unit_norm_ex(&A_view, &B_view, eta, tol, max_iter, &D_view, n_iter, work);
}

/* ---- projection onto the PSD cone ------------------------------------------ */

/* LAPACK workspace sizes: dsyevr needs lwork >= 26K (optimal (NB+6)K with
 * NB the dsytrd block size, 32 or 64 in reference LAPACK and OpenBLAS),
 * liwork >= 10K; dsytrf runs blocked with lwork >= NB K; dsyevd (jobz 'V')
 * needs 1 + 6K + 2K^2 doubles and 3 + 5K ints, plus 2K + NB K for its
 * blocked reduction. */
#define PSD_LWORK(K) (70 * (size_t)(K) + 4 * (size_t)(K) * (size_t)(K) + 16)
#define PSD_LIWORK(K) (10 * (size_t)(K) + 3)

size_t fedmm_project_psd_iwork(fedmm_blas_int K)
{
    return 2 * (size_t)K + PSD_LIWORK(K);
}

/* Only the negative eigenpairs are computed (bisection and inverse iteration)
 * rather than all of them when there are at most K / PSD_PARTIAL_MAX_FRACTION
 * (counted by bisection after the tridiagonal reduction).  That reduction is
 * tried when Cholesky's stopping column bounds the count by K /
 * PSD_PARTIAL_TRY_FRACTION, or at any bound below PSD_LOOPS_MAX_K: the bound
 * is loose (nearly-PSD draws with one negative eigenvalue stop Cholesky at
 * column 3 of 15 or 32 of 50, benchmarks/bench_psd.py), while arbitrary
 * symmetric input stops it within the first few columns. */
#define PSD_PARTIAL_MAX_FRACTION 4
#define PSD_PARTIAL_TRY_FRACTION 2
#define PSD_LOOPS_MAX_K 24
/* Cholesky as loops below this order too (as fast as dpotrf at K = 50, 35%
 * slower at 64): where it stops, the factor of the leading columns and the
 * Schur complement of the rest are in place (right-looking), which the
 * Lanczos path takes instead of a second factorization. */
#define PSD_CHOL_LOOPS_MAX_K 64

/* Below this many eigenvectors the back-transformation applies the
 * Householder reflectors one by one (loops): the blocked dormtr forms
 * triangular factors whose cost does not shrink with the number of vectors. */
#define PSD_UNBLOCKED_MAX_VECTORS 16

/* The eigenpairs of the symmetric W (lower triangle; overwritten) with
 * negative eigenvalues: tridiagonal reduction (dsytrd), bisection (dstebz),
 * inverse iteration (dstein), Rayleigh quotients and back-transformation, i.e. dsyevr's
 * RANGE='V' path without its set-up (scaling, workspace, the blocked
 * back-transformation for a handful of vectors).  Eigenvalues ascend in w,
 * eigenvectors go to V (K x m); returns m, or -1 (nothing computed) when
 * there are more than max_m of them.  work >= 3K + max(NB K, 5K)
 * doubles, iwork >= 7K ints (*info != 0: a LAPACK failure). */
static fedmm_blas_int negative_eigenpairs(fedmm_blas_int K, fedmm_blas_int max_m,
                                          double *W, double *V, double *w, double *work, fedmm_blas_int lwork,
                                          fedmm_blas_int *iwork, fedmm_blas_int *iwork2,
                                          const fedmm_blas_t *blas, fedmm_blas_int *info)
{
    double *d = work, *e = d + K, *tau = e + K, *rest = tau + K;
    const fedmm_blas_int lrest = lwork - 3 * K;
    blas->dsytrd("L", &K, W, &K, d, e, tau, rest, &lrest, info);
    if (*info != 0) return 0;
    /* the number of negative eigenvalues of the tridiagonal form (Sturm count
     * at 0, LAPACK's dlaneg recurrence): too many -> no bisection for them */
    {
        double pivmin = 1.0;
        for (fedmm_blas_int i = 0; i + 1 < K; ++i)
            if (e[i] * e[i] > pivmin) pivmin = e[i] * e[i];
        pivmin *= DBL_MIN;
        fedmm_blas_int count = 0;
        double t = 0.0;
        for (fedmm_blas_int i = 0; i < K; ++i) {
            t = i == 0 ? d[0] : d[i] - e[i - 1] * e[i - 1] / t;
            if (fabs(t) < pivmin) t = -pivmin;
            count += t < 0.0;
        }
        if (count > max_m && isfinite(pivmin)) return -1;
    }
    /* every eigenvalue is >= the Gershgorin bound gl of T: bisection on (vl, 0]
     * just below it, to 1e-8 |gl| (not to full relative accuracy: inverse
     * iteration still converges to the eigenvector of an eigenvalue that
     * close, and the Rayleigh quotients below restore the eigenvalues; 15%
     * of the time at K = 15, benchmarks/bench_psd.py) */
    double gl = HUGE_VAL;
    for (fedmm_blas_int i = 0; i < K; ++i)
        gl = fmin(gl, d[i] - (i > 0 ? fabs(e[i - 1]) : 0.0) - (i + 1 < K ? fabs(e[i]) : 0.0));
    const double vl = fmin(gl, 0.0) - fmax(1e-3 * fabs(gl), DBL_MIN), vu = 0.0;
    const double abstol = fmax(1e-8 * fabs(gl), 2.0 * DBL_MIN);
    const fedmm_blas_int unused = 0;
    fedmm_blas_int m = 0, nsplit = 0;
    fedmm_blas_int *iblock = iwork, *isplit = iwork + K; /* iwork: 2K (isuppz's room) */
    fedmm_blas_int *ifail = iwork2, *stein_iwork = iwork2 + K, *stebz_iwork = iwork2 + 2 * (size_t)K;
    blas->dstebz("V", "B", &K, &vl, &vu, &unused, &unused, &abstol, d, e, &m, &nsplit, w, iblock,
                 isplit, rest, stebz_iwork, info);
    if (*info != 0 || m == 0) return 0;
    if (m > max_m) return -1; /* too many for this path (W is destroyed, V untouched) */
    blas->dstein(&K, d, e, &m, w, iblock, isplit, V, &K, rest, stein_iwork, ifail, info);
    if (*info != 0) return 0;
    for (fedmm_blas_int c = 0; c < m; ++c) { /* Rayleigh quotients z^T T z */
        const double *z = V + (size_t)c * K;
        double rq = 0.0;
        for (fedmm_blas_int i = 0; i < K; ++i) {
            double tz = d[i] * z[i];
            if (i > 0) tz += e[i - 1] * z[i - 1];
            if (i + 1 < K) tz += e[i] * z[i + 1];
            rq += z[i] * tz;
        }
        w[c] = rq;
    }
    /* ascending order (dstebz's "B" orders by split block): selection sort of
     * the m pairs, m small */
    for (fedmm_blas_int a = 0; a + 1 < m; ++a) {
        fedmm_blas_int best = a;
        for (fedmm_blas_int b = a + 1; b < m; ++b)
            if (w[b] < w[best]) best = b;
        if (best != a) {
            const double tw = w[a];
            w[a] = w[best];
            w[best] = tw;
            double *va = V + (size_t)a * K, *vb = V + (size_t)best * K;
            for (fedmm_blas_int i = 0; i < K; ++i) {
                const double tv = va[i];
                va[i] = vb[i];
                vb[i] = tv;
            }
        }
    }
    /* V <- Q V, Q = H(1) ... H(K-1) from dsytrd ('L': reflector j in W(j+1:K, j)) */
    if (K > 1) {
        if (m <= PSD_UNBLOCKED_MAX_VECTORS) {
            /* dorm2r's order and arithmetic as plain loops: H(j) = I - tau_j v v^T,
             * v = (1, W(j+2:K, j)) on rows j+1..K, applied last to first (dorm2r's
             * two BLAS calls per reflector cost more than the arithmetic at K = 50) */
            for (fedmm_blas_int j = K - 2; j >= 0; --j) {
                const double t = tau[j];
                if (t == 0.0) continue;
                const double *v = W + (size_t)j * K; /* v[j + 1] = 1 implicitly */
                for (fedmm_blas_int c = 0; c < m; ++c) {
                    double *x = V + (size_t)c * K;
                    double dot = x[j + 1];
                    for (fedmm_blas_int i = j + 2; i < K; ++i) dot += v[i] * x[i];
                    const double f = t * dot;
                    x[j + 1] -= f;
                    for (fedmm_blas_int i = j + 2; i < K; ++i) x[i] -= f * v[i];
                }
            }
        } else {
            blas->dormtr("L", "L", "N", &K, &m, W, &K, tau, V, &K, rest, &lrest, info);
        }
    }
    return m;
}

/* ---- few negative eigenvalues: shift-invert Lanczos, certified ------------ */

/* The negative eigenpairs of a nearly PSD matrix without the O(K^3)
 * tridiagonal reduction.  Where Cholesky stopped (column n1 + 1 > K/4), the
 * leading n1 x n1 block is positive definite, so S = [L11 0; L21 I] diag(I,
 * C) [L11^T L21^T; 0 I] with C = S22 - L21 L21^T, and S has as many negative
 * eigenvalues m as C (Haynsworth; counted from C's LDL^T, dsytrf on the few
 * trailing rows).  Lanczos on S^{-1} (shift 0; triangular solves with that
 * factorization, full reorthogonalization) finds them as the m most
 * negative eigenvalues of S^{-1}: on the nearly-PSD family of
 * benchmarks/bench_psd.py in at most ~22 steps at K = 50 and 200, where
 * Lanczos on S itself needs ~K.  The result is
 * certified, never hoped for: with Y (K x m, orthonormal) and Theta the
 * Rayleigh-Ritz pairs of S on span(Y) and R = S Y - Y Theta, S is within
 * ||E||_F = sqrt(2) ||R||_F of A0 = Y Theta Y^T + B, B = (I - YY^T) S (I -
 * YY^T); when S has exactly m negative eigenvalues and max Theta < -||E||_F,
 * B has no eigenvalue below -||E||_F and ||B_-||_F <= ||E||_F (Hoffman-
 * Wielandt), so ||proj(S) - (S - Y Theta Y^T)||_F <= 3 ||E||_F.  The pairs
 * are accepted when ||R||_F <= 2 K eps ||S||_F (error <= 8.5 K eps ||S||_F)
 * and max Theta < -2 sqrt(2) ||R||_F; otherwise (no count, more than
 * PSD_LANCZOS_MAX_NEG negatives, a singular D, growth in L21 or D, no
 * convergence within PSD_LANCZOS_STEPS(m) steps) the caller takes the exact
 * path. */
#define PSD_LANCZOS_MAX_NEG 4
#define PSD_LANCZOS_STEPS(m) (32 + 4 * (m))
/* Convergence test: the Ritz pair (mu, z) of S^{-1} has ||S z - z/mu|| <=
 * |beta s_k| ||S||_2 / |mu|; Lanczos stops for the (exact) check when
 * |beta s_k| / |mu| <= PSD_LANCZOS_EST K eps, a bound loose by the ratio of
 * ||S||_F to ||S q|| for a typical q (~sqrt K). */
#define PSD_LANCZOS_EST 4.0
/* A failed check whose estimate was below this: the residual has reached the
 * floor set by the solves' rounding, the exact path takes over. */
#define PSD_LANCZOS_FLOOR 1e-2
/* The leading block of the factorization stops where a row of L21 would
 * exceed this many times max|s| in squared norm (a small Cholesky pivot just
 * before the one that failed): the solves' rounding grows with it. */
#define PSD_LANCZOS_MAX_L21 32.0
/* Bunch-Kaufman's element growth is small in practice; a D entry above this
 * many times K max|s| makes the inertia count suspect: exact path. */
#define PSD_LDL_MAX_GROWTH 64.0

/* The solves' two loops are compiled twice on x86-64 glibc Linux (ifunc), for AVX2 and
 * for the baseline, the loader picking one (the same operations in the same
 * order: identical results; no FMA). */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define PSD_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef PSD_CLONES
#define PSD_CLONES
#endif

/* y[0..n) -= c x[0..n) (restrict: vectorizable) */
PSD_CLONES static void sub_scaled(fedmm_blas_int n, double c, const double *restrict x, double *restrict y)
{
    for (fedmm_blas_int i = 0; i < n; ++i) y[i] -= c * x[i];
}

/* x[0..n) . y[0..n) (fedmm__dot4: four partial sums), compiled into each
 * clone, where AVX2 runs the four chains as one vector */
PSD_CLONES static double dot4(fedmm_blas_int n, const double *restrict x, const double *restrict y)
{
    return fedmm__dot4(n, x, y);
}

/* b <- S^{-1} b with S = L D L^T from dsytrf (uplo 'L', ipiv as LAPACK's),
 * dsytrs' order of operations as plain loops (dsytrs issues two BLAS calls
 * per column, more than the arithmetic at K = 50). */
static void ldl_solve(fedmm_blas_int n, const double *F, const fedmm_blas_int *ipiv, double *b)
{
    fedmm_blas_int k = 0;
    while (k < n) { /* L D x = b */
        const double *fk = F + (size_t)k * n;
        if (ipiv[k] > 0) {
            const fedmm_blas_int kp = ipiv[k] - 1;
            if (kp != k) {
                const double t = b[k];
                b[k] = b[kp];
                b[kp] = t;
            }
            const double bk = b[k];
            sub_scaled(n - k - 1, bk, fk + k + 1, b + k + 1);
            b[k] = bk / fk[k];
            k += 1;
        } else {
            const double *fk1 = fk + n;
            const fedmm_blas_int kp = -ipiv[k + 1] - 1;
            if (kp != k + 1) {
                const double t = b[k + 1];
                b[k + 1] = b[kp];
                b[kp] = t;
            }
            const double b0 = b[k], b1 = b[k + 1];
            sub_scaled(n - k - 2, b0, fk + k + 2, b + k + 2);
            sub_scaled(n - k - 2, b1, fk1 + k + 2, b + k + 2);
            const double akm1k = fk[k + 1], akm1 = fk[k] / akm1k, ak = fk1[k + 1] / akm1k;
            const double denom = akm1 * ak - 1.0;
            const double bkm1 = b0 / akm1k, bkk = b1 / akm1k;
            b[k] = (ak * bkm1 - bkk) / denom;
            b[k + 1] = (akm1 * bkk - bkm1) / denom;
            k += 2;
        }
    }
    k = n - 1;
    while (k >= 0) { /* L^T x = b */
        const double *fk = F + (size_t)k * n;
        const double t = b[k] - dot4(n - k - 1, fk + k + 1, b + k + 1);
        b[k] = t;
        if (ipiv[k] > 0) {
            const fedmm_blas_int kp = ipiv[k] - 1;
            if (kp != k) {
                b[k] = b[kp];
                b[kp] = t;
            }
            k -= 1;
        } else {
            const double *fkm1 = fk - n;
            b[k - 1] -= dot4(n - k - 1, fkm1 + k + 1, b + k + 1);
            const fedmm_blas_int kp = -ipiv[k] - 1;
            if (kp != k) {
                b[k] = b[kp];
                b[kp] = t;
            }
            k -= 2;
        }
    }
}

/* The eigenvalues (left on the diagonal of H) and orthonormal eigenvectors Z
 * of the symmetric m x m H (cyclic Jacobi; m <= PSD_LANCZOS_MAX_NEG). */
static void jacobi_eigen(fedmm_blas_int m, double *H, double *Z)
{
    for (fedmm_blas_int j = 0; j < m; ++j)
        for (fedmm_blas_int i = 0; i < m; ++i) Z[(size_t)j * m + i] = i == j;
    for (int sweep = 0; sweep < 50; ++sweep) {
        double off = 0.0, diag = 0.0;
        for (fedmm_blas_int j = 0; j < m; ++j) {
            diag += H[(size_t)j * m + j] * H[(size_t)j * m + j];
            for (fedmm_blas_int i = j + 1; i < m; ++i) off += H[(size_t)j * m + i] * H[(size_t)j * m + i];
        }
        if (!(off > DBL_EPSILON * DBL_EPSILON * 1e-4 * diag)) return;
        for (fedmm_blas_int p = 0; p < m; ++p) {
            for (fedmm_blas_int q = p + 1; q < m; ++q) {
                const double hpq = H[(size_t)q * m + p];
                if (hpq == 0.0) continue;
                const double hpp = H[(size_t)p * m + p], hqq = H[(size_t)q * m + q];
                const double theta = (hqq - hpp) / (2.0 * hpq);
                const double t = (theta >= 0.0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                const double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
                for (fedmm_blas_int k = 0; k < m; ++k) { /* columns p, q */
                    double *hp = H + (size_t)p * m, *hq = H + (size_t)q * m;
                    const double a = hp[k], b = hq[k];
                    hp[k] = c * a - s * b;
                    hq[k] = s * a + c * b;
                }
                for (fedmm_blas_int k = 0; k < m; ++k) { /* rows p, q */
                    const double a = H[(size_t)k * m + p], b = H[(size_t)k * m + q];
                    H[(size_t)k * m + p] = c * a - s * b;
                    H[(size_t)k * m + q] = s * a + c * b;
                }
                for (fedmm_blas_int k = 0; k < m; ++k) {
                    double *zp = Z + (size_t)p * m, *zq = Z + (size_t)q * m;
                    const double a = zp[k], b = zq[k];
                    zp[k] = c * a - s * b;
                    zq[k] = s * a + c * b;
                }
            }
        }
    }
}

/* Orthonormalizes the m columns of Y (K x m) by modified Gram-Schmidt, twice;
 * returns 0 when a column has (numerically) no component of its own. */
static int orthonormalize(fedmm_blas_int K, fedmm_blas_int m, double *Y)
{
    for (int pass = 0; pass < 2; ++pass) {
        for (fedmm_blas_int j = 0; j < m; ++j) {
            double *yj = Y + (size_t)j * K;
            for (fedmm_blas_int i = 0; i < j; ++i) {
                const double *yi = Y + (size_t)i * K;
                double dot = 0.0;
                for (fedmm_blas_int r = 0; r < K; ++r) dot += yi[r] * yj[r];
                for (fedmm_blas_int r = 0; r < K; ++r) yj[r] -= dot * yi[r];
            }
            double nrm = 0.0;
            for (fedmm_blas_int r = 0; r < K; ++r) nrm += yj[r] * yj[r];
            nrm = sqrt(nrm);
            if (!(nrm > 0.5)) return 0; /* Ritz vectors are unit vectors: no cancellation expected */
            for (fedmm_blas_int r = 0; r < K; ++r) yj[r] /= nrm;
        }
    }
    return 1;
}


/* Number of eigenvalues of the symmetric tridiagonal T (diagonal a, off-diagonal
 * b, size k) below x: the signs of the LDL^T pivots of T - x I (Sturm). */
static fedmm_blas_int tridiag_count_below(fedmm_blas_int k, const double *a, const double *b, double x,
                                          double pivmin)
{
    fedmm_blas_int count = 0;
    double t = a[0] - x;
    if (fabs(t) < pivmin) t = -pivmin;
    count += t < 0.0;
    for (fedmm_blas_int i = 1; i < k; ++i) {
        t = a[i] - x - b[i - 1] * b[i - 1] / t;
        if (fabs(t) < pivmin) t = -pivmin;
        count += t < 0.0;
    }
    return count;
}

/* x <- an eigenvector (unit norm) of the tridiagonal T for its eigenvalue
 * near mu, orthogonal to the n_prev unit vectors P (k x n_prev): inverse
 * then Rayleigh quotient iteration from the all-ones vector, Gaussian elimination with
 * partial pivoting on T - mu I (a zero pivot replaced by tiny); returns the
 * last Rayleigh quotient.  scratch: 3 k doubles.  Only a Ritz vector to be
 * verified, so no convergence test. */
static double tridiag_rqi(fedmm_blas_int k, const double *a, const double *b, double mu, double tiny,
                          const double *P, fedmm_blas_int n_prev, double *x, double *scratch)
{
    /* U of the LU factors: diagonal u0, superdiagonals u1, u2 (the
     * elimination is redone per step: O(k)) */
    double *u0 = scratch, *u1 = u0 + k, *u2 = u1 + k;
    for (fedmm_blas_int i = 0; i < k; ++i) x[i] = 1.0;
    double mu_prev = HUGE_VAL;
    for (int it = 0; it < 10; ++it) {
        /* factor and solve together (the factorization is cheap) */
        double d = a[0] - mu, e = k > 1 ? b[0] : 0.0, f = 0.0, rhs = x[0];
        for (fedmm_blas_int i = 0; i + 1 < k; ++i) {
            /* row i: (d, e, f) in columns i, i+1, i+2; row i+1: (b_i, a_{i+1} - mu, b_{i+1}) */
            const double c0 = b[i], c1 = a[i + 1] - mu, c2 = i + 2 < k ? b[i + 1] : 0.0;
            double rhs1 = x[i + 1];
            if (fabs(c0) > fabs(d)) { /* swap rows i and i+1 */
                const double m = d / c0;
                u0[i] = c0;
                u1[i] = c1;
                u2[i] = c2;
                const double r = rhs;
                x[i] = rhs1;
                rhs1 = r - m * rhs1;
                d = e - m * c1;
                e = f - m * c2;
            } else {
                if (d == 0.0) d = tiny;
                const double m = c0 / d;
                u0[i] = d;
                u1[i] = e;
                u2[i] = f;
                x[i] = rhs;
                rhs1 -= m * rhs;
                d = c1 - m * e;
                e = c2 - m * f;
            }
            f = 0.0;
            rhs = rhs1;
        }
        if (d == 0.0) d = tiny;
        u0[k - 1] = d;
        x[k - 1] = rhs;
        /* back substitution with U (x holds the forward-eliminated right-hand side) */
        x[k - 1] /= u0[k - 1];
        if (k > 1) x[k - 2] = (x[k - 2] - u1[k - 2] * x[k - 1]) / u0[k - 2];
        for (fedmm_blas_int i = k - 3; i >= 0; --i)
            x[i] = (x[i] - u1[i] * x[i + 1] - u2[i] * x[i + 2]) / u0[i];
        double nrm = 0.0, big = 0.0;
        for (fedmm_blas_int i = 0; i < k; ++i) big = fmax(big, fabs(x[i]));
        if (!(big > 0.0) || !isfinite(big)) big = 1.0;
        for (fedmm_blas_int i = 0; i < k; ++i) {
            x[i] /= big;
            nrm += x[i] * x[i];
        }
        nrm = sqrt(nrm);
        for (fedmm_blas_int i = 0; i < k; ++i) x[i] /= nrm;
        for (fedmm_blas_int c = 0; c < n_prev; ++c) { /* apart from the previous ones */
            const double *pc = P + (size_t)c * k;
            double dot = 0.0;
            for (fedmm_blas_int i = 0; i < k; ++i) dot += pc[i] * x[i];
            for (fedmm_blas_int i = 0; i < k; ++i) x[i] -= dot * pc[i];
        }
        nrm = 0.0;
        for (fedmm_blas_int i = 0; i < k; ++i) nrm += x[i] * x[i];
        nrm = sqrt(nrm);
        if (!(nrm > 0.0)) return mu;
        double rq = 0.0;
        for (fedmm_blas_int i = 0; i < k; ++i) {
            x[i] /= nrm;
            double tx = a[i] * x[i];
            if (i > 0) tx += b[i - 1] * x[i - 1];
            if (i + 1 < k) tx += b[i] * x[i + 1];
            rq += x[i] * tx;
        }
        /* two steps at the given shift (a start far from the eigenvector can
         * have a worse Rayleigh quotient than the shift), then Rayleigh
         * quotient steps until it settles */
        if (it >= 1) {
            if (fabs(rq - mu_prev) <= 4.0 * DBL_EPSILON * fabs(rq)) return rq;
            mu_prev = rq;
            mu = rq;
        }
    }
    return mu_prev;
}

/* Workspace of lanczos_negative_eigenpairs: doubles and ints. */
#define PSD_LANCZOS_LWORK(K) ((size_t)(K) * (size_t)(K) + 64 * (size_t)(K) + 16)

/* The certified negative eigenpairs of the symmetric S (full storage, both
 * triangles; max_abs = max|s| > 0), see above: returns m >= 1 with the
 * eigenvalues ascending in w and the eigenvectors in V (K x m), or -1 (the
 * caller takes the exact path; W, V and w are scratch then).  W: K x K, V: K
 * x K, work: max(PSD_LANCZOS_LWORK(K), 64 K) doubles, iwork: 8 K ints. */
/* From this order on the block solve calls dtrsv and dgemv (a third faster
 * at K = 200), below it plain loops (BLAS's per-call cost: 10% slower at K =
 * 50). */
#define PSD_LANCZOS_BLAS_SOLVE_K 100

/* b <- S^{-1} b for the block factorization S = [L11 0; L21 I] [I 0; 0 C]
 * [L11^T L21^T; 0 I] (C = S22 - L21 L21^T, the Schur complement): L (K x
 * n1, columns of F, leading dimension K) from Cholesky, C = L D L^T in Cf
 * (n2 x n2, dsytrf's format with ipiv); dinv: the reciprocals of L11's
 * diagonal. */
static void block_solve(fedmm_blas_int K, fedmm_blas_int n1, const double *F, const double *dinv,
                        const double *Cf, const fedmm_blas_int *ipiv, double *b, const fedmm_blas_t *blas)
{
    if (K >= PSD_LANCZOS_BLAS_SOLVE_K && blas->dtrsv != NULL) {
        const fedmm_blas_int n2 = K - n1, inc = 1;
        const double one = 1.0, minus_one = -1.0;
        blas->dtrsv("L", "N", "N", &n1, F, &K, b, &inc);
        blas->dgemv("N", &n2, &n1, &minus_one, F + n1, &K, b, &inc, &one, b + n1, &inc);
        ldl_solve(n2, Cf, ipiv, b + n1);
        blas->dgemv("T", &n2, &n1, &minus_one, F + n1, &K, b + n1, &inc, &one, b, &inc);
        blas->dtrsv("L", "T", "N", &n1, F, &K, b, &inc);
        return;
    }
    for (fedmm_blas_int k = 0; k < n1; ++k) { /* [L11 0; L21 I] y = b */
        const double *fk = F + (size_t)k * K;
        const double bk = b[k] * dinv[k];
        b[k] = bk;
        sub_scaled(K - k - 1, bk, fk + k + 1, b + k + 1);
    }
    ldl_solve(K - n1, Cf, ipiv, b + n1);
    for (fedmm_blas_int k = n1 - 1; k >= 0; --k) { /* [L11^T L21^T; 0 I] x = z */
        const double *fk = F + (size_t)k * K;
        b[k] = (b[k] - dot4(K - k - 1, fk + k + 1, b + k + 1)) * dinv[k];
    }
}

/* The certified negative eigenpairs of the symmetric S (full storage, both
 * triangles; max_abs = max|s| > 0) whose leading n1 x n1 block is positive
 * definite (Cholesky got that far), see above: returns m >= 1 with the
 * eigenvalues ascending in w and the eigenvectors in V (K x m), or -1 (the
 * caller takes the exact path; W, V and w are scratch then).  The factor:
 * with have_schur, W holds the Cholesky loops' stopped state (L11, L21 and C
 * in place); otherwise a second Cholesky, of S + sigma diag(0, I) (sigma =
 * 2^40 max|s|), gives L11
 * and L21 (blocked, 40% of dsytrf's time at K = 200), C = S22 - L21 L21^T
 * (dsyrk) its LDL^T (dsytrf on n2 = K - n1 rows) and, by Haynsworth's
 * inertia additivity, the number of negative eigenvalues of S (those of C).
 * W: K x K, V: K x K, work: PSD_LANCZOS_LWORK(K) doubles, iwork: 6 K ints. */
static fedmm_blas_int lanczos_negative_eigenpairs(fedmm_blas_int K, fedmm_blas_int n1, int have_schur,
                                                   const double *S, double max_abs, double *W, double *V, double *w,
                                                   double *work, fedmm_blas_int *iwork,
                                                   const fedmm_blas_t *blas)
{
    /* everything below in units of s = max_abs: the operator is (S/s)^{-1} */
    const double s = max_abs, inv_s = 1.0 / s;
    double fro2 = 0.0; /* ||S/s||_F^2 */
    for (size_t k = 0; k < (size_t)K * K; ++k) fro2 += (S[k] * inv_s) * (S[k] * inv_s);
    const double fro = sqrt(fro2), tol = 2.0 * (double)K * DBL_EPSILON * fro;
    /* sigma only has to make the trailing Cholesky succeed (L11 and L21 do
     * not depend on it, C is formed from S22 and L21): C has eigenvalues far
     * below -||S|| when (S^{-1})_22 has one near zero */
    if (!(max_abs < 0x1p900)) return -1;
    const double sigma = ldexp(max_abs, 40);
    fedmm_blas_int n2 = K - n1;
    fedmm_blas_int info = 0;
    fedmm_blas_int *ipiv = iwork;
    if (!have_schur) {
        for (fedmm_blas_int j = 0; j < K; ++j) {
            memcpy(W + (size_t)j * K + j, S + (size_t)j * K + j, (size_t)(K - j) * sizeof(double));
            if (j >= n1) W[(size_t)j * K + j] += sigma;
        }
        blas->dpotrf("L", &K, W, &K, &info);
        if (info != 0) return -1; /* C has an eigenvalue below -sigma: no reliable count */
    }
    const fedmm_blas_int n1_full = n1;
    /* back off from small pivots: the largest n1 with every row of L21 (rows
     * from n1 on, columns before n1; rows of the positive definite block
     * have squared norms <= max|s|) within PSD_LANCZOS_MAX_L21 max|s| */
    {
        double *acc = work; /* n2 running squared row norms */
        memset(acc, 0, (size_t)n2 * sizeof(double));
        fedmm_blas_int cut = n1;
        for (fedmm_blas_int k = 0; k < n1 && cut == n1; ++k) {
            const double *lk = W + (size_t)k * K + n1;
            for (fedmm_blas_int i = 0; i < n2; ++i) {
                acc[i] += lk[i] * lk[i];
                if (acc[i] > PSD_LANCZOS_MAX_L21 * max_abs) cut = k;
            }
        }
        n1 = cut;
        n2 = K - n1;
        if (n1 < 1) return -1;
    }
    double *Cf = work; /* C, n2 x n2, then its LDL^T */
    if (have_schur && n1 == n1_full) { /* in place after the Cholesky loops */
        for (fedmm_blas_int j = 0; j < n2; ++j)
            memcpy(Cf + (size_t)j * n2 + j, W + (size_t)(n1 + j) * K + n1 + j, (size_t)(n2 - j) * sizeof(double));
    } else {
        const double one = 1.0, minus_one = -1.0;
        for (fedmm_blas_int j = 0; j < n2; ++j)
            memcpy(Cf + (size_t)j * n2 + j, S + (size_t)(n1 + j) * K + n1 + j, (size_t)(n2 - j) * sizeof(double));
        blas->dsyrk("L", "N", &n2, &n1, &minus_one, W + n1, &K, &one, Cf, &n2);
    }
    {
        fedmm_blas_int lw = 64 * n2;
        blas->dsytrf("L", &n2, Cf, &n2, ipiv, Cf + (size_t)n2 * n2, &lw, &info);
    }
    if (info != 0) return -1; /* singular D (or a LAPACK error): no certified count */
    /* inertia of D: 1 x 1 blocks by sign, 2 x 2 blocks [a b; b c] by the sign
     * of (a/b)(c/b) - 1 (dsytrs' denominator; negative: one of each sign) */
    fedmm_blas_int m = 0;
    double d_max = 0.0;
    for (fedmm_blas_int k = 0; k < n2;) {
        const double *fk = Cf + (size_t)k * n2;
        if (ipiv[k] > 0) {
            m += fk[k] < 0.0;
            if (fabs(fk[k]) > d_max) d_max = fabs(fk[k]);
            k += 1;
        } else {
            const double a = fk[k], b = fk[k + 1], c = fk[n2 + k + 1];
            if (b == 0.0) return -1;
            const double det = (a / b) * (c / b) - 1.0;
            if (!(det != 0.0)) return -1;
            m += det < 0.0 ? 1 : (a + c < 0.0 ? 2 : 0);
            d_max = fmax(d_max, fmax(fabs(a), fmax(fabs(b), fabs(c))));
            k += 2;
        }
    }
    if (m < 1 || m > PSD_LANCZOS_MAX_NEG || !(d_max <= PSD_LDL_MAX_GROWTH * K * max_abs)) return -1;
    work += (size_t)n2 * n2;
    double *dinv = work; /* 1 / L_kk: no division on the solves' critical path */
    for (fedmm_blas_int k = 0; k < n1; ++k) dinv[k] = 1.0 / W[(size_t)k * K + k];
    work += n1;

    fedmm_blas_int max_steps = PSD_LANCZOS_STEPS(m);
    if (max_steps > K - 1) max_steps = K - 1;
    const fedmm_blas_int nk = max_steps;
    double *alpha = work, *beta = alpha + nk, *theta = beta + nk, *Z = theta + nk; /* Z: nk x m */
    double *h = Z + (size_t)nk * m;                     /* nk + 1 */
    double *tri_work = h + nk + 1;                      /* 3 nk */
    double *Y = tri_work + 3 * (size_t)nk;              /* K x m */
    double *SY = Y + (size_t)K * m;                     /* K x m */
    double *Hm = SY + (size_t)K * m, *Zm = Hm + (size_t)m * m; /* m x m */
    double *Q = V; /* the Lanczos basis, K x (nk + 1) */

    double b2 = 0.0;
    for (fedmm_blas_int i = 0; i < K; ++i) {
        Q[i] = 1.0 + (double)i / (double)K; /* deterministic start, no zero component */
        b2 += Q[i] * Q[i];
    }
    const double b_inv = 1.0 / sqrt(b2);
    for (fedmm_blas_int i = 0; i < K; ++i) Q[i] *= b_inv;
    const fedmm_blas_int one_i = 1;
    const double one = 1.0, zero = 0.0, minus_one = -1.0;
    fedmm_blas_int next_check = m + 6, prev_k = 0;
    int have_theta = 0; /* theta holds the last check's Ritz values */
    double prev_est = 0.0;
    for (fedmm_blas_int j = 0; j < nk; ++j) {
        const double *qj = Q + (size_t)j * K;
        double *x = Q + (size_t)(j + 1) * K;
        for (fedmm_blas_int i = 0; i < K; ++i) x[i] = qj[i] * s; /* (S/s)^{-1} q = S^{-1} (s q) */
        block_solve(K, n1, W, dinv, Cf, ipiv, x, blas);
        /* full reorthogonalization, classical Gram-Schmidt twice: alpha_j is
         * the q_j coefficient, the others remove what three-term recurrence
         * and rounding leave */
        const fedmm_blas_int cols = j + 1;
        double a = 0.0;
        for (int pass = 0; pass < 2; ++pass) {
            if (K >= PSD_LANCZOS_BLAS_SOLVE_K) {
                blas->dgemv("T", &K, &cols, &one, Q, &K, x, &one_i, &zero, h, &one_i);
                blas->dgemv("N", &K, &cols, &minus_one, Q, &K, h, &one_i, &one, x, &one_i);
            } else { /* as loops (the two BLAS calls cost more at K = 50) */
                for (fedmm_blas_int c = 0; c < cols; ++c) h[c] = dot4(K, Q + (size_t)c * K, x);
                for (fedmm_blas_int c = 0; c < cols; ++c) sub_scaled(K, h[c], Q + (size_t)c * K, x);
            }
            a += h[j];
        }
        alpha[j] = a;
        double bn = 0.0;
        for (fedmm_blas_int i = 0; i < K; ++i) bn += x[i] * x[i];
        bn = sqrt(bn);
        beta[j] = bn;
        const fedmm_blas_int k = j + 1; /* size of T */
        if (!isfinite(bn)) return -1;
        const int breakdown = !(bn > DBL_EPSILON * fabs(a));
        if (k >= m && (k >= next_check || breakdown || k == nk)) {
            /* the m smallest eigenvalues of T (S^{-1}'s negative end) by
             * bisection, all below zero, and inverse-iteration vectors */
            double glo = 0.0, tnorm = 0.0;
            for (fedmm_blas_int i = 0; i < k; ++i) {
                const double r = (i > 0 ? fabs(beta[i - 1]) : 0.0) + (i + 1 < k ? fabs(beta[i]) : 0.0);
                glo = fmin(glo, alpha[i] - r);
                tnorm = fmax(tnorm, fabs(alpha[i]) + r);
            }
            const double pivmin = DBL_MIN * fmax(1.0, tnorm * tnorm), tiny = DBL_EPSILON * tnorm;
            int ready = tnorm > 0.0 && isfinite(tnorm) &&
                        tridiag_count_below(k, alpha, beta, 0.0, pivmin) == m;
            double est_max = 0.0;
            for (fedmm_blas_int i = 0; ready && i < m; ++i) {
                /* the start: the last check's Ritz value (they move little
                 * between checks), else bisection to 1e-3 relative; then
                 * inverse and Rayleigh quotient iteration */
                double mu0 = theta[i];
                if (!have_theta || !(mu0 < 0.0) || (i > 0 && !(mu0 > theta[i - 1]))) {
                    double lo = (i > 0 ? theta[i - 1] : glo) - tiny, hi = 0.0; /* above the i-th */
                    for (int it = 0; it < 100 && hi - lo > 1e-3 * fmax(fabs(lo), fabs(hi)); ++it) {
                        const double mid = 0.5 * (lo + hi);
                        if (tridiag_count_below(k, alpha, beta, mid, pivmin) > i) hi = mid; else lo = mid;
                    }
                    mu0 = 0.5 * (lo + hi);
                }
                double *z = Z + (size_t)i * k;
                theta[i] = tridiag_rqi(k, alpha, beta, mu0, tiny, Z, i, z, tri_work);
                if (!(theta[i] < 0.0)) ready = 0;
                const double est = fabs(bn * z[k - 1]) / (PSD_LANCZOS_EST * K * DBL_EPSILON * fabs(theta[i]));
                est_max = fmax(est_max, est);
            }
            have_theta = ready;
            if (ready && est_max > 1.0 && !breakdown) {
                /* not yet: the next check where the geometric decrease of the
                 * estimate since the last check predicts convergence */
                fedmm_blas_int ahead = 2;
                if (prev_est > est_max && prev_k < k) {
                    const double rate = log(prev_est / est_max) / (double)(k - prev_k);
                    const double steps = 0.8 * log(est_max) / rate;
                    ahead = steps < 1.0 ? 1 : (steps > 8.0 ? 8 : (fedmm_blas_int)steps);
                }
                prev_est = est_max;
                prev_k = k;
                next_check = k + ahead;
                ready = 0;
            } else if (!ready) {
                next_check = k + 2;
            }
            if (ready) {
                /* Ritz vectors, then Rayleigh-Ritz of S/s on their span and the residual */
                blas->dgemm("N", "N", &K, &m, &k, &one, Q, &K, Z, &k, &zero, Y, &K);
                if (orthonormalize(K, m, Y)) {
                    blas->dgemm("N", "N", &K, &m, &K, &inv_s, S, &K, Y, &K, &zero, SY, &K);
                    blas->dgemm("T", "N", &m, &m, &K, &one, Y, &K, SY, &K, &zero, Hm, &m);
                    for (fedmm_blas_int c = 0; c < m; ++c)
                        for (fedmm_blas_int r = c + 1; r < m; ++r) {
                            const double avg = 0.5 * (Hm[(size_t)c * m + r] + Hm[(size_t)r * m + c]);
                            Hm[(size_t)c * m + r] = avg;
                            Hm[(size_t)r * m + c] = avg;
                        }
                    jacobi_eigen(m, Hm, Zm);
                    /* Y <- Y Zm, SY <- SY Zm row by row (h: m doubles of room) */
                    for (fedmm_blas_int r = 0; r < K; ++r) {
                        for (int which = 0; which < 2; ++which) {
                            double *M = which ? SY : Y;
                            for (fedmm_blas_int c = 0; c < m; ++c) {
                                double t = 0.0;
                                for (fedmm_blas_int l = 0; l < m; ++l) t += M[(size_t)l * K + r] * Zm[(size_t)c * m + l];
                                h[c] = t;
                            }
                            for (fedmm_blas_int c = 0; c < m; ++c) M[(size_t)c * K + r] = h[c];
                        }
                    }
                    double r2 = 0.0, th_max = -HUGE_VAL;
                    for (fedmm_blas_int c = 0; c < m; ++c) {
                        const double th = Hm[(size_t)c * m + c];
                        if (th > th_max) th_max = th;
                        const double *yc = Y + (size_t)c * K, *syc = SY + (size_t)c * K;
                        for (fedmm_blas_int r = 0; r < K; ++r) {
                            const double d = syc[r] - th * yc[r];
                            r2 += d * d;
                        }
                    }
                    const double rn = sqrt(r2);
                    if (rn <= tol && th_max < -2.0 * sqrt(2.0) * rn) {
                        /* certified: ascending eigenvalues (times s) and vectors to V */
                        for (fedmm_blas_int c = 0; c < m; ++c) w[c] = Hm[(size_t)c * m + c];
                        for (fedmm_blas_int c = 0; c < m; ++c) h[c] = (double)c;
                        for (fedmm_blas_int a0 = 0; a0 + 1 < m; ++a0) /* selection sort of m indices */
                            for (fedmm_blas_int b0 = a0 + 1; b0 < m; ++b0)
                                if (w[b0] < w[a0]) {
                                    const double tw = w[a0], th2 = h[a0];
                                    w[a0] = w[b0];
                                    h[a0] = h[b0];
                                    w[b0] = tw;
                                    h[b0] = th2;
                                }
                        for (fedmm_blas_int c = 0; c < m; ++c) {
                            memcpy(V + (size_t)c * K, Y + (size_t)h[c] * K, (size_t)K * sizeof(double));
                            w[c] *= s;
                        }
                        return m;
                    }
                    /* converged to the factorization's accuracy and still no
                     * certificate: more steps will not help */
                    if (est_max <= PSD_LANCZOS_FLOOR) return -1;
                }
                next_check = k + 1;
            }
        }
        if (breakdown) return -1;
        const double inv_b = 1.0 / bn;
        for (fedmm_blas_int i = 0; i < K; ++i) x[i] *= inv_b;
    }
    return -1;
}

/* ---- Cholesky: the positive definite test -------------------------------- */

/* The Cholesky factor of the symmetric positive definite n x n matrix in the
 * lower triangle of W (leading dimension ld), in place; returns LAPACK's info
 * (0, or the 1-based column j where the leading j x j block is not positive
 * definite, with the factor of the leading j - 1 columns in W).  Below
 * PSD_CHOL_LOOPS_MAX_K a right-looking loop on contiguous columns (dpotrf's
 * per-column BLAS calls cost more than the arithmetic at K = 15), which
 * leaves the Schur complement of the leading j - 1 columns in the trailing
 * block when it stops. */
static fedmm_blas_int cholesky_lower_n(fedmm_blas_int n, fedmm_blas_int ld, double *W,
                                       const fedmm_blas_t *blas)
{
    fedmm_blas_int info = 0;
    if (n >= PSD_CHOL_LOOPS_MAX_K) {
        blas->dpotrf("L", &n, W, &ld, &info);
        return info;
    }
    for (fedmm_blas_int j = 0; j < n; ++j) {
        double *wj = W + (size_t)j * ld;
        const double d = wj[j];
        if (!(d > 0.0)) return j + 1;
        const double l = sqrt(d), r = 1.0 / l;
        wj[j] = l;
        for (fedmm_blas_int i = j + 1; i < n; ++i) wj[i] *= r;
        for (fedmm_blas_int k = j + 1; k < n; ++k) /* trailing update, column k */
            sub_scaled(n - k, wj[k], wj + k, W + (size_t)k * ld + k);
    }
    return 0;
}

static fedmm_blas_int cholesky_lower(fedmm_blas_int K, double *W, const fedmm_blas_t *blas)
{
    return cholesky_lower_n(K, K, W, blas);
}

size_t fedmm_project_psd_work(fedmm_blas_int K)
{
    return 2 * (size_t)K * K + (size_t)K + PSD_LWORK(K);
}

static int update_from_eigenpairs(fedmm_blas_int K, fedmm_blas_int m, double *V, const double *w,
                                  double *out, int partial, int code, int *path, const fedmm_blas_t *blas);

/* One K x K matrix (column-major, leading dimension K). */
static int project_psd_one(fedmm_blas_int K, const double *A, double *out, double *work,
                           fedmm_blas_int *iwork, int *path, const fedmm_blas_t *blas)
{
    double *W = work;                        /* K x K scratch for LAPACK */
    double *V = W + (size_t)K * K;           /* eigenvectors, K x K */
    double *w = V + (size_t)K * K;           /* eigenvalues */
    double *lapack_work = w + K;
    fedmm_blas_int lwork = (fedmm_blas_int)PSD_LWORK(K);
    fedmm_blas_int liwork = (fedmm_blas_int)PSD_LIWORK(K);
    fedmm_blas_int *isuppz = iwork;          /* 2K */
    fedmm_blas_int *lapack_iwork = iwork + 2 * (size_t)K;

    /* out = (A + A^T) / 2, pairwise so that out may alias A */
    double max_abs = 0.0;
    for (fedmm_blas_int j = 0; j < K; ++j) {
        for (fedmm_blas_int i = j; i < K; ++i) {
            const double s = 0.5 * (A[(size_t)j * K + i] + A[(size_t)i * K + j]);
            if (!isfinite(s)) return FEDMM_ENONFINITE;
            out[(size_t)j * K + i] = s;
            out[(size_t)i * K + j] = s;
            if (fabs(s) > max_abs) max_abs = fabs(s);
        }
    }
    /* LAPACK's bisection squares entries: a tiny
     * matrix underflows there (a 1e-200 matrix lost its negative part to 6e-4
     * relative), so project 2^e A instead (exact) and scale back.  Huge matrices
     * need no such care: up to 1e300 the paths below are exact to 1e-10 relative
     * (tests/kernels/test_linalg.py), dsyevd scaling internally. */
    if (max_abs > 0.0 && max_abs < 0x1p-256) {
        const int e = -ilogb(max_abs);
        for (size_t k = 0; k < (size_t)K * K; ++k) out[k] = ldexp(out[k], e);
        const int status = project_psd_one(K, out, out, work, iwork, path, blas);
        for (size_t k = 0; k < (size_t)K * K; ++k) out[k] = ldexp(out[k], -e);
        return status;
    }
    /* positive definite: Cholesky succeeds and the matrix is its own projection */
    for (fedmm_blas_int j = 0; j < K; ++j)
        memcpy(W + (size_t)j * K + j, out + (size_t)j * K + j, (size_t)(K - j) * sizeof(double));
    fedmm_blas_int info = cholesky_lower(K, W, blas);
    if (info == 0) {
        *path = 0;
        return FEDMM_OK;
    }
    if (info < 0) return FEDMM_ELAPACK;
    /* Cholesky stopped at column info: the leading (info-1) x (info-1) block is
     * positive definite, so by Cauchy interlacing (lambda_{1+K-j}(A) >=
     * lambda_1(A_j) > 0 for the leading j x j block A_j) at most K - info + 1
     * eigenvalues are negative.  Few at most -> only the negative eigenpairs
     * (value range, so their number need not be known); a looser bound -> the
     * same when bisection counts few; otherwise all of them. */
    const fedmm_blas_int neg_bound = K - info + 1;
    /* a Cholesky that got past the first quarter (nearly PSD; arbitrary
     * symmetric input stops within the first few columns): certified
     * shift-invert Lanczos for few negative eigenvalues, else on below */
    if (K >= PSD_LOOPS_MAX_K && info - 1 > K / 4 && blas->dsytrf != NULL) { /* PSD_LANCZOS_LWORK <= PSD_LWORK */
        const fedmm_blas_int m_neg =
            lanczos_negative_eigenpairs(K, info - 1, K < PSD_CHOL_LOOPS_MAX_K, out, max_abs, W, V, w,
                                        lapack_work, isuppz, blas);
        if (m_neg > 0) return update_from_eigenpairs(K, m_neg, V, w, out, 1, 4, path, blas);
    }
    int partial = neg_bound * PSD_PARTIAL_MAX_FRACTION <= K;
    const int try_partial = partial || neg_bound * PSD_PARTIAL_TRY_FRACTION <= K || K < PSD_LOOPS_MAX_K;
    fedmm_blas_int m = 0;
    for (fedmm_blas_int j = 0; j < K; ++j)
        memcpy(W + (size_t)j * K + j, out + (size_t)j * K + j, (size_t)(K - j) * sizeof(double));
    if (try_partial && blas->dsytrd != NULL && blas->dstebz != NULL && blas->dstein != NULL &&
        blas->dormtr != NULL) {
        const fedmm_blas_int max_m =
            partial ? K : (K < 2 * PSD_PARTIAL_MAX_FRACTION ? 1 : K / PSD_PARTIAL_MAX_FRACTION);
        partial = 1;
        m = negative_eigenpairs(K, max_m, W, V, w, lapack_work, lwork,
                                isuppz, lapack_iwork, blas, &info);
        if (info != 0 || m < 0) { /* bisection or inverse iteration in trouble, or too many
                                     negative eigenvalues: all eigenpairs instead */
            partial = 0;
            m = 0;
            for (fedmm_blas_int j = 0; j < K; ++j)
                memcpy(W + (size_t)j * K + j, out + (size_t)j * K + j, (size_t)(K - j) * sizeof(double));
        }
    } else if (partial) {
        /* Gershgorin: every eigenvalue lies in [-K max|s|, K max|s|]; RANGE='V'
         * returns the eigenpairs in (vl, 0] */
        const double vl = -(double)K * max_abs - 1.0, vu = 0.0, abstol = 0.0;
        fedmm_blas_int il = 1, iu = K;
        blas->dsyevr("V", "V", "L", &K, W, &K, &vl, &vu, &il, &iu, &abstol, &m, w, V, &K, isuppz,
                     lapack_work, &lwork, lapack_iwork, &liwork, &info);
        if (info != 0) return FEDMM_ELAPACK;
    }
    if (!partial && blas->dsyevd != NULL) {
        /* all eigenpairs: dsyevd (implicit QL/QR for small K, divide and
         * conquer for large K) beats dsyevr's MRRR here at K = 15, 50 and 200
         * (benchmarks/bench_psd.py) */
        blas->dsyevd("V", "L", &K, W, &K, w, lapack_work, &lwork, lapack_iwork, &liwork, &info);
        if (info != 0) return FEDMM_ELAPACK;
        m = K;
        for (fedmm_blas_int j = 0; j < K; ++j) /* dsyevd leaves the eigenvectors in W */
            memcpy(V + (size_t)j * K, W + (size_t)j * K, (size_t)K * sizeof(double));
    } else if (!partial) {
        const double vl = 0.0, vu = 0.0, abstol = 0.0;
        fedmm_blas_int il = 1, iu = K;
        blas->dsyevr("V", "A", "L", &K, W, &K, &vl, &vu, &il, &iu, &abstol, &m, w, V, &K, isuppz,
                     lapack_work, &lwork, lapack_iwork, &liwork, &info);
        if (info != 0) return FEDMM_ELAPACK;
    }
    if (partial && m == 0) { /* singular PSD: no eigenvalue below zero */
        *path = 1;
        return FEDMM_OK;
    }
    return update_from_eigenpairs(K, m, V, w, out, partial, partial ? 2 : 3, path, blas);
}

/* out (holding S, lower triangle read) <- proj(S) from m eigenpairs of S
 * (ascending w, vectors in V; all of them unless partial, else those below
 * zero), exactly symmetric; *path = code. */
static int update_from_eigenpairs(fedmm_blas_int K, fedmm_blas_int m, double *V, const double *w,
                                  double *out, int partial, int code, int *path, const fedmm_blas_t *blas)
{
    *path = code;
    /* eigenvalues ascend: w[0..n_below) < 0 <= w[n_below..m) */
    fedmm_blas_int n_below = 0;
    while (n_below < m && w[n_below] < 0.0) ++n_below;
    const fedmm_blas_int n_above = m - n_below;
    const int from_positive = !partial && n_above < n_below;
    const fedmm_blas_int first = from_positive ? n_below : 0;
    const fedmm_blas_int count = from_positive ? n_above : n_below;
    /* the columns used, scaled by sqrt(|lambda|), packed to the front of V */
    for (fedmm_blas_int j = 0; j < count; ++j) {
        const double scale = sqrt(fabs(w[first + j]));
        const double *src = V + (size_t)(first + j) * K;
        double *dst = V + (size_t)j * K;
        for (fedmm_blas_int i = 0; i < K; ++i) dst[i] = scale * src[i];
    }
    const double one = 1.0, zero = 0.0;
    if (from_positive) { /* out = sum_{lambda > 0} lambda v v^T */
        if (count > 0) {
            blas->dsyrk("L", "N", &K, &count, &one, V, &K, &zero, out, &K);
        } else {
            memset(out, 0, (size_t)K * K * sizeof(double));
        }
    } else if (count > 0) { /* out = S - sum_{lambda < 0} lambda v v^T */
        blas->dsyrk("L", "N", &K, &count, &one, V, &K, &one, out, &K);
    }
    for (fedmm_blas_int j = 0; j < K; ++j)
        for (fedmm_blas_int i = j + 1; i < K; ++i) out[(size_t)i * K + j] = out[(size_t)j * K + i];
    return FEDMM_OK;
}

int fedmm_project_psd(fedmm_blas_int K, int64_t n_matrices, const double *A, double *out,
                      double *work, fedmm_blas_int *iwork, int *path, const fedmm_blas_t *blas)
{
    if (K < 1 || n_matrices < 0 || A == NULL || out == NULL || work == NULL || iwork == NULL ||
        blas == NULL)
        return FEDMM_EINVAL;
    for (int64_t s = 0; s < n_matrices; ++s) {
        int one_path = 0;
        const int status = project_psd_one(K, A + (size_t)s * K * K, out + (size_t)s * K * K,
                                           work, iwork, &one_path, blas);
        if (status != FEDMM_OK) return status;
        if (path) path[s] = one_path;
    }
    return FEDMM_OK;
}

/* ---- the ridge T of a flat statistic, and one server step of FedMM --------- */

size_t fedmm_dictionary_update_ridge_flat_work(fedmm_blas_int p, fedmm_blas_int K)
{
    return (size_t)K * K + (size_t)p * K + fedmm_dictionary_update_ridge_work(p, K);
}

int fedmm_dictionary_update_ridge_flat(fedmm_blas_int p, fedmm_blas_int K, const double *s,
                                       double eta, double *D, fedmm_blas_int ldd, double *work,
                                       const fedmm_blas_t *blas)
{
    if (p < 1 || K < 1 || s == NULL || D == NULL || ldd < p || work == NULL || blas == NULL)
        return FEDMM_EINVAL;
    const size_t KK = (size_t)K * K;
    double *A = work, *B = work + KK, *rest = B + (size_t)p * K;
    /* sym(A) = (A + A^T) / 2 and B column-major, from the row-major blocks of s */
    for (fedmm_blas_int j = 0; j < K; ++j)
        for (fedmm_blas_int i = 0; i < K; ++i)
            A[(size_t)j * K + i] = 0.5 * (s[(size_t)i * K + j] + s[(size_t)j * K + i]);
    for (fedmm_blas_int j = 0; j < K; ++j)
        for (fedmm_blas_int i = 0; i < p; ++i) B[(size_t)j * p + i] = s[KK + (size_t)i * K + j];
    return fedmm_dictionary_update_ridge(p, K, A, K, B, p, eta, D, ldd, rest, blas);
}

size_t fedmm_dictionary_sa_step_work(fedmm_blas_int p, fedmm_blas_int K)
{
    const size_t psd = fedmm_project_psd_work(K), ridge = fedmm_dictionary_update_ridge_flat_work(p, K);
    return psd > ridge ? psd : ridge;
}

int fedmm_dictionary_sa_step(fedmm_blas_int p, fedmm_blas_int K, const double *S, const double *H,
                             double gamma, double eta, int project, double *S_new, double *D,
                             double *work, fedmm_blas_int *iwork, const fedmm_blas_t *blas)
{
    if (p < 1 || K < 1 || S == NULL || H == NULL || S_new == NULL || D == NULL || work == NULL ||
        iwork == NULL || blas == NULL || !(eta >= 0.0) || !isfinite(gamma))
        return FEDMM_EINVAL;
    const size_t q = (size_t)K * K + (size_t)p * K;
    for (size_t j = 0; j < q; ++j) {
        const double step = gamma * H[j]; /* NumPy's S + gamma * H: product, then sum */
        S_new[j] = S[j] + step;
    }
    for (size_t j = 0; j < q; ++j)
        if (!isfinite(S_new[j])) return FEDMM_ENONFINITE;
    if (project) {
        /* the A block is symmetric-invariant data: row- or column-major alike */
        const int status = fedmm_project_psd(K, 1, S_new, S_new, work, iwork, NULL, blas);
        if (status != FEDMM_OK) return status;
    }
    return fedmm_dictionary_update_ridge_flat(p, K, S_new, eta, D, p, work, blas);
}
