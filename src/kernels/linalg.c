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

int fedmm_dictionary_update_unit_norm(fedmm_blas_int p, fedmm_blas_int K, const double *A,
                                      fedmm_blas_int lda, const double *B,
                                      fedmm_blas_int ldb, double eta, double tol,
                                      int max_iter, double *D, fedmm_blas_int ldd,
                                      int *n_iter, double *work)
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

/* ---- projection onto the PSD cone ------------------------------------------ */

/* LAPACK workspace sizes: dsyevr needs lwork >= 26K (optimal (NB+6)K with
 * NB the dsytrd block size, 32 or 64 in reference LAPACK and OpenBLAS),
 * liwork >= 10K; dsytrf runs blocked with lwork >= NB K; dsyevd (jobz 'V')
 * needs 1 + 6K + 2K^2 doubles and 3 + 5K ints, plus 2K + NB K for its
 * blocked reduction (the few-negative-eigenvalues path sizes its own
 * workspace: psd_negative_work below). */
#define PSD_LWORK(K) (70 * (size_t)(K) + 4 * (size_t)(K) * (size_t)(K) + 16)
#define PSD_LIWORK(K) (10 * (size_t)(K) + 3)

size_t fedmm_project_psd_iwork(fedmm_blas_int K)
{
    return 2 * (size_t)K + PSD_LIWORK(K);
}

/* Fewest negative eigenvalues (as a fraction of K) for which all eigenpairs
 * are computed (MRRR) rather than the few negative ones (bisection and
 * inverse iteration), measured in benchmarks/bench_psd.py. */
#define PSD_PARTIAL_MAX_FRACTION 4

/* Below this many eigenvectors the back-transformation applies the
 * Householder reflectors one by one (dorm2r): the blocked dormtr forms
 * triangular factors whose cost does not shrink with the number of vectors. */
#define PSD_UNBLOCKED_MAX_VECTORS 16

/* The eigenpairs of the symmetric W (lower triangle; overwritten) with
 * eigenvalues in (-K max|s| - 1, 0]: tridiagonal reduction (dsytrd), bisection
 * (dstebz), inverse iteration (dstein) and back-transformation, i.e. dsyevr's
 * RANGE='V' path without its set-up (scaling, workspace, the blocked
 * back-transformation for a handful of vectors).  Eigenvalues ascend in w,
 * eigenvectors go to V (K x m); returns m.  work >= 3K + max(NB K, 5K)
 * doubles, iwork >= 7K ints (*info != 0: a LAPACK failure). */
static fedmm_blas_int negative_eigenpairs(fedmm_blas_int K, double max_abs, double *W, double *V,
                                          double *w, double *work, fedmm_blas_int lwork,
                                          fedmm_blas_int *iwork, fedmm_blas_int *iwork2,
                                          const fedmm_blas_t *blas, fedmm_blas_int *info)
{
    double *d = work, *e = d + K, *tau = e + K, *rest = tau + K;
    const fedmm_blas_int lrest = lwork - 3 * K;
    blas->dsytrd("L", &K, W, &K, d, e, tau, rest, &lrest, info);
    if (*info != 0) return 0;
    const double vl = -(double)K * max_abs - 1.0, vu = 0.0;
    /* abstol = 2 * smallest normal: eigenvalues to full relative accuracy,
     * which dstein needs for accurate eigenvectors (LAPACK's advice) */
    const double abstol = 2.0 * DBL_MIN;
    const fedmm_blas_int unused = 0;
    fedmm_blas_int m = 0, nsplit = 0;
    fedmm_blas_int *iblock = iwork, *isplit = iwork + K; /* iwork: 2K (isuppz's room) */
    fedmm_blas_int *ifail = iwork2, *stein_iwork = iwork2 + K, *stebz_iwork = iwork2 + 2 * (size_t)K;
    blas->dstebz("V", "B", &K, &vl, &vu, &unused, &unused, &abstol, d, e, &m, &nsplit, w, iblock,
                 isplit, rest, stebz_iwork, info);
    if (*info != 0 || m == 0) return 0;
    blas->dstein(&K, d, e, &m, w, iblock, isplit, V, &K, rest, stein_iwork, ifail, info);
    if (*info != 0) return 0;
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
            const fedmm_blas_int rows = K - 1;
            blas->dorm2r("L", "N", &rows, &m, &rows, W + 1, &K, tau, V + 1, &K, rest, info);
        } else {
            blas->dormtr("L", "L", "N", &K, &m, W, &K, tau, V, &K, rest, &lrest, info);
        }
    }
    return m;
}

/* ---- few negative eigenvalues: pivoted Schur complement, rational Krylov -- */

/* The few-negative-eigenvalues path (negative_part): guard vectors beyond
 * the number of negative eigenvalues in the start block; the most negative
 * eigenvalues it takes on (more: the tridiagonal path is cheaper); its
 * expansion steps and the largest basis it builds (beyond them the
 * tridiagonal path takes over); the expansion steps with sym(A)^{-1} before
 * the Rayleigh-quotient shifts, the most shifted factorizations and the
 * pairs with a shift of their own; the
 * pivot threshold of the pivoted
 * continuation of Cholesky (a pivot is taken when it keeps at least this
 * fraction of its diagonal entry); the order below which its O(K^2 p) steps
 * run as plain loops rather than BLAS calls (whose fixed cost dominates at
 * K = 15); its tolerances relative to ||S||_F: the certificate's margin delta
 * and the Ritz residuals (divided by sqrt(number of negative eigenvalues)),
 * which bound its error by (2 sqrt(2) 1e-11 + sqrt(K) 1e-12) ||S||_F. */
#define PSD_SUBSPACE_GUARD 1
#define PSD_SUBSPACE_MAX_NEGATIVE(K) (4 + (K) / 8)
#define PSD_SUBSPACE_MAX_ITER 10
#define PSD_BASIS_MAX 32
#define PSD_KRYLOV_STEPS 2
#define PSD_MAX_SHIFTS 6
#define PSD_SHIFT_SLOTS 2
#define PSD_PIVOT_TOL 1e-3
#define PSD_LOOPS_MAX_K 24
#define PSD_SUBSPACE_TOL 1e-12
#define PSD_RESIDUAL_TOL 1e-11

/* The largest trailing block (after unpivoted Cholesky stopped) that the
 * pivoted continuation takes on: its unblocked O(n^3) loop must stay cheaper
 * than the eigensolvers it replaces. */
static fedmm_blas_int psd_pivot_max(fedmm_blas_int K)
{
    if (K < PSD_LOOPS_MAX_K) return K;
    const fedmm_blas_int a = K / 3, b = 2 * PSD_SUBSPACE_MAX_NEGATIVE(K);
    return a > b ? a : b;
}

/* All eigenpairs of the small symmetric n x n matrix H (column-major, full;
 * destroyed) by cyclic Jacobi rotations: eigenvalues ascending in theta,
 * orthonormal eigenvectors in the columns of Z (n x n). */
static void jacobi_eigh(fedmm_blas_int n, double *H, double *Z, double *theta)
{
    for (fedmm_blas_int j = 0; j < n; ++j)
        for (fedmm_blas_int i = 0; i < n; ++i) Z[(size_t)j * n + i] = i == j ? 1.0 : 0.0;
    for (int sweep = 0; sweep < 60; ++sweep) {
        double off = 0.0, total = 0.0;
        for (fedmm_blas_int j = 0; j < n; ++j)
            for (fedmm_blas_int i = 0; i < n; ++i) {
                const double h = H[(size_t)j * n + i];
                total += h * h;
                if (i != j) off += h * h;
            }
        if (!(off > 1e-36 * total)) break;
        for (fedmm_blas_int p = 0; p + 1 < n; ++p) {
            for (fedmm_blas_int q = p + 1; q < n; ++q) {
                const double apq = H[(size_t)q * n + p];
                if (apq == 0.0) continue;
                const double app = H[(size_t)p * n + p], aqq = H[(size_t)q * n + q];
                const double tau = (aqq - app) / (2.0 * apq);
                const double t = (tau >= 0.0 ? 1.0 : -1.0) / (fabs(tau) + sqrt(1.0 + tau * tau));
                const double c = 1.0 / sqrt(1.0 + t * t), s = t * c;
                for (fedmm_blas_int k = 0; k < n; ++k) { /* H <- H J */
                    const double hp = H[(size_t)p * n + k], hq = H[(size_t)q * n + k];
                    H[(size_t)p * n + k] = c * hp - s * hq;
                    H[(size_t)q * n + k] = s * hp + c * hq;
                }
                for (fedmm_blas_int k = 0; k < n; ++k) { /* H <- J^T H */
                    const double hp = H[(size_t)k * n + p], hq = H[(size_t)k * n + q];
                    H[(size_t)k * n + p] = c * hp - s * hq;
                    H[(size_t)k * n + q] = s * hp + c * hq;
                }
                H[(size_t)q * n + p] = 0.0;
                H[(size_t)p * n + q] = 0.0;
                for (fedmm_blas_int k = 0; k < n; ++k) { /* Z <- Z J */
                    const double zp = Z[(size_t)p * n + k], zq = Z[(size_t)q * n + k];
                    Z[(size_t)p * n + k] = c * zp - s * zq;
                    Z[(size_t)q * n + k] = s * zp + c * zq;
                }
            }
        }
    }
    for (fedmm_blas_int i = 0; i < n; ++i) theta[i] = H[(size_t)i * n + i];
    for (fedmm_blas_int a = 0; a + 1 < n; ++a) { /* ascending, n small */
        fedmm_blas_int best = a;
        for (fedmm_blas_int b = a + 1; b < n; ++b)
            if (theta[b] < theta[best]) best = b;
        if (best == a) continue;
        const double tw = theta[a];
        theta[a] = theta[best];
        theta[best] = tw;
        for (fedmm_blas_int i = 0; i < n; ++i) {
            const double tz = Z[(size_t)a * n + i];
            Z[(size_t)a * n + i] = Z[(size_t)best * n + i];
            Z[(size_t)best * n + i] = tz;
        }
    }
}

/* Orthonormalize the K x p block Y in place (Gram-Schmidt, each column twice
 * against the previous ones); 0 when a column is (numerically) dependent. */
static int orthonormalize(fedmm_blas_int K, fedmm_blas_int p, double *Y)
{
    for (fedmm_blas_int c = 0; c < p; ++c) {
        double *y = Y + (size_t)c * K;
        double before = 0.0;
        for (fedmm_blas_int i = 0; i < K; ++i) before += y[i] * y[i];
        for (int pass = 0; pass < 2; ++pass) {
            for (fedmm_blas_int b = 0; b < c; ++b) {
                const double *q = Y + (size_t)b * K;
                double t = 0.0;
                for (fedmm_blas_int i = 0; i < K; ++i) t += q[i] * y[i];
                for (fedmm_blas_int i = 0; i < K; ++i) y[i] -= t * q[i];
            }
        }
        double after = 0.0;
        for (fedmm_blas_int i = 0; i < K; ++i) after += y[i] * y[i];
        if (!(after > 1e-20 * before) || !(after > 0.0) || !isfinite(after)) return 0;
        const double inv = 1.0 / sqrt(after);
        for (fedmm_blas_int i = 0; i < K; ++i) y[i] *= inv;
    }
    return 1;
}

/* The Rayleigh-Ritz matrix entries Hm[a, b] = Hm[b, a] = (q_a' S q_b + q_b' S q_a) / 2 for the columns
 * b = from .. nb-1 of the basis B (K x nb) and every a <= b, from SB = S B (Hm: leading dimension ld). */
static void ritz_entries(fedmm_blas_int K, fedmm_blas_int from, fedmm_blas_int nb, const double *B,
                         const double *SB, double *Hm, fedmm_blas_int ld)
{
    for (fedmm_blas_int b = from; b < nb; ++b)
        for (fedmm_blas_int a = 0; a <= b; ++a) {
            const double *qa = B + (size_t)a * K, *sqb = SB + (size_t)b * K;
            const double *qb = B + (size_t)b * K, *sqa = SB + (size_t)a * K;
            double t = 0.0, u = 0.0;
            for (fedmm_blas_int i = 0; i < K; ++i) {
                t += qa[i] * sqb[i];
                u += qb[i] * sqa[i];
            }
            Hm[(size_t)b * ld + a] = Hm[(size_t)a * ld + b] = 0.5 * (t + u);
        }
}

/* SX = S X for the full symmetric K x K S and a K x p block X. */
static void symmetric_times(fedmm_blas_int K, fedmm_blas_int p, const double *S, const double *X,
                            double *SX, const fedmm_blas_t *blas)
{
    if (K >= PSD_LOOPS_MAX_K) {
        const double one = 1.0, zero = 0.0;
        blas->dgemm("N", "N", &K, &p, &K, &one, S, &K, X, &K, &zero, SX, &K);
        return;
    }
    for (fedmm_blas_int c = 0; c < p; ++c) {
        double *sx = SX + (size_t)c * K;
        const double *x = X + (size_t)c * K;
        for (fedmm_blas_int i = 0; i < K; ++i) sx[i] = 0.0;
        for (fedmm_blas_int j = 0; j < K; ++j) {
            const double xj = x[j];
            const double *s = S + (size_t)j * K;
            for (fedmm_blas_int i = 0; i < K; ++i) sx[i] += s[i] * xj;
        }
    }
}

/* The Cholesky factor of the symmetric positive definite n x n matrix in the
 * lower triangle of W (leading dimension ld), in place; returns LAPACK's info
 * (0, or the 1-based column j where the leading j x j block is not positive
 * definite, with the factor of the leading j - 1 columns in W).  Below
 * PSD_LOOPS_MAX_K a right-looking loop on contiguous columns: dpotrf's
 * per-column BLAS calls cost more than the arithmetic at K = 15. */
static fedmm_blas_int cholesky_lower_n(fedmm_blas_int n, fedmm_blas_int ld, double *W,
                                       const fedmm_blas_t *blas)
{
    fedmm_blas_int info = 0;
    if (n >= PSD_LOOPS_MAX_K) {
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
        for (fedmm_blas_int k = j + 1; k < n; ++k) { /* trailing update, column k */
            double *wk = W + (size_t)k * ld;
            const double c = wj[k];
            for (fedmm_blas_int i = k; i < n; ++i) wk[i] -= wj[i] * c;
        }
    }
    return 0;
}

static fedmm_blas_int cholesky_lower(fedmm_blas_int K, double *W, const fedmm_blas_t *blas)
{
    return cholesky_lower_n(K, K, W, blas);
}

/* The lower triangle of out (K x K, leading dimension K) += V V^T for the
 * K x m block V; plain loops below PSD_LOOPS_MAX_K (dsyrk's fixed cost). */
static void add_outer_lower(fedmm_blas_int K, fedmm_blas_int m, const double *V, double *out,
                            const fedmm_blas_t *blas)
{
    if (m <= 0) return;
    if (K >= PSD_LOOPS_MAX_K) {
        const double one = 1.0;
        blas->dsyrk("L", "N", &K, &m, &one, V, &K, &one, out, &K);
        return;
    }
    for (fedmm_blas_int c = 0; c < m; ++c) {
        const double *v = V + (size_t)c * K;
        for (fedmm_blas_int j = 0; j < K; ++j) {
            double *o = out + (size_t)j * K;
            const double vj = v[j];
            for (fedmm_blas_int i = j; i < K; ++i) o[i] += v[i] * vj;
        }
    }
}

/* Y <- (L L^T)^{-1} Y for the Cholesky factor L (lower triangle of W, n x n,
 * leading dimension K) and an n x p block Y (leading dimension K); rdiag: the
 * n reciprocals of L's diagonal. */
static int cholesky_solve(fedmm_blas_int K, fedmm_blas_int n, fedmm_blas_int p, const double *W,
                          const double *rdiag, double *Y, const fedmm_blas_t *blas)
{
    if (n >= PSD_LOOPS_MAX_K) {
        fedmm_blas_int info = 0;
        blas->dpotrs("L", &n, &p, W, &K, Y, &K, &info);
        return info == 0;
    }
    for (fedmm_blas_int c = 0; c < p; ++c) {
        double *y = Y + (size_t)c * K;
        for (fedmm_blas_int j = 0; j < n; ++j) { /* L z = y, column-oriented */
            const double *l = W + (size_t)j * K;
            const double zj = y[j] * rdiag[j];
            y[j] = zj;
            for (fedmm_blas_int i = j + 1; i < n; ++i) y[i] -= l[i] * zj;
        }
    }
    /* L^T y = z: the dot products of the p columns side by side */
    for (fedmm_blas_int j = n - 1; j >= 0; --j) {
        const double *l = W + (size_t)j * K;
        for (fedmm_blas_int c = 0; c < p; ++c) {
            double *y = Y + (size_t)c * K;
            double t0 = y[j], t1 = 0.0;
            fedmm_blas_int i = j + 1;
            for (; i + 1 < n; i += 2) {
                t0 -= l[i] * y[i];
                t1 -= l[i + 1] * y[i + 1];
            }
            if (i < n) t0 -= l[i] * y[i];
            y[j] = (t0 + t1) * rdiag[j];
        }
    }
    return 1;
}

/* The block elimination of S - shift I for the symmetric S (full, K x K)
 * whose leading jj x jj block S11 - shift I is positive definite: its
 * Cholesky factor L (leading dimension K) with the reciprocals rdiag of its
 * diagonal, G = (S11 - shift I)^{-1} S12 (jj x n2, leading dimension K), and
 * the Schur complement T = S22 - shift I - S21 G (n2 x n2, n2 = K - jj) by its
 * eigenvalues theta (ascending) and eigenvectors Zt (n2 x n2). */
typedef struct schur_block {
    fedmm_blas_int jj, n2;
    double *L, *rdiag, *G, *Zt, *theta, *t_inv;
} schur_block_t;

/* Fill sb for S - shift I (sb->L already holds the factor of S11 - shift I
 * when factored != 0); T: n2 x n2 scratch.  min_abs > 0: 0 when an
 * eigenvalue of T is within min_abs of zero (S - shift I nearly singular);
 * min_abs == 0: such eigenvalues are moved to +-DBL_EPSILON norm_f instead
 * (a shifted solve may be nearly singular: that is what makes it converge).
 * Returns 1, or 0 on failure. */
static int schur_factor(fedmm_blas_int K, const double *S, double shift, int factored,
                        double min_abs, double norm_f, schur_block_t *sb, double *T,
                        const fedmm_blas_t *blas)
{
    const fedmm_blas_int jj = sb->jj, n2 = sb->n2;
    if (!factored) {
        for (fedmm_blas_int j = 0; j < jj; ++j) {
            memcpy(sb->L + (size_t)j * K + j, S + (size_t)j * K + j, (size_t)(jj - j) * sizeof(double));
            sb->L[(size_t)j * K + j] -= shift;
        }
        if (cholesky_lower_n(jj, K, sb->L, blas) != 0) return 0;
    }
    for (fedmm_blas_int j = 0; j < jj; ++j) {
        const double d = sb->L[(size_t)j * K + j];
        if (!(d > 0.0)) return 0;
        sb->rdiag[j] = 1.0 / d;
    }
    for (fedmm_blas_int c = 0; c < n2; ++c)
        memcpy(sb->G + (size_t)c * K, S + (size_t)(jj + c) * K, (size_t)jj * sizeof(double));
    if (!cholesky_solve(K, jj, n2, sb->L, sb->rdiag, sb->G, blas)) return 0;
    for (fedmm_blas_int b = 0; b < n2; ++b)
        for (fedmm_blas_int a = 0; a < n2; ++a) {
            const double *s21 = S + (size_t)(jj + a) * K, *g = sb->G + (size_t)b * K;
            double t = S[(size_t)(jj + b) * K + jj + a] - (a == b ? shift : 0.0);
            for (fedmm_blas_int i = 0; i < jj; ++i) t -= s21[i] * g[i];
            T[(size_t)b * n2 + a] = t;
        }
    for (fedmm_blas_int b = 0; b < n2; ++b)
        for (fedmm_blas_int a = b + 1; a < n2; ++a)
            T[(size_t)b * n2 + a] = T[(size_t)a * n2 + b] =
                0.5 * (T[(size_t)b * n2 + a] + T[(size_t)a * n2 + b]);
    jacobi_eigh(n2, T, sb->Zt, sb->theta);
    for (fedmm_blas_int i = 0; i < n2; ++i) {
        double t = sb->theta[i];
        if (!(fabs(t) > min_abs)) {
            if (min_abs > 0.0 || !isfinite(t)) return 0;
            if (fabs(t) < DBL_EPSILON * norm_f) t = t < 0.0 ? -DBL_EPSILON * norm_f : DBL_EPSILON * norm_f;
        }
        sb->t_inv[i] = 1.0 / t;
    }
    return 1;
}

/* Y <- (S - shift I)^{-1} Y for the K x p block Y by block elimination with
 * sb (from schur_factor): Y1 = (S11 - shift)^{-1} X1 - G Y2, Y2 = T^{-1} (X2 -
 * S21 (S11 - shift)^{-1} X1).  r: n2 doubles, h: n2 doubles. */
static int schur_apply(fedmm_blas_int K, const double *S, const schur_block_t *sb, fedmm_blas_int p,
                       double *Y, double *r, double *h, const fedmm_blas_t *blas)
{
    const fedmm_blas_int jj = sb->jj, n2 = sb->n2;
    if (!cholesky_solve(K, jj, p, sb->L, sb->rdiag, Y, blas)) return 0;
    for (fedmm_blas_int c = 0; c < p; ++c) {
        double *q = Y + (size_t)c * K;
        for (fedmm_blas_int a = 0; a < n2; ++a) {
            const double *s21 = S + (size_t)(jj + a) * K;
            double t = q[jj + a];
            for (fedmm_blas_int i = 0; i < jj; ++i) t -= s21[i] * q[i];
            r[a] = t;
        }
        for (fedmm_blas_int b = 0; b < n2; ++b) {
            const double *zt = sb->Zt + (size_t)b * n2;
            double t = 0.0;
            for (fedmm_blas_int a = 0; a < n2; ++a) t += zt[a] * r[a];
            h[b] = t * sb->t_inv[b];
        }
        for (fedmm_blas_int a = 0; a < n2; ++a) {
            double t = 0.0;
            for (fedmm_blas_int b = 0; b < n2; ++b) t += sb->Zt[(size_t)b * n2 + a] * h[b];
            q[jj + a] = t;
        }
        for (fedmm_blas_int b = 0; b < n2; ++b) {
            const double *g = sb->G + (size_t)b * K;
            const double y = q[jj + b];
            for (fedmm_blas_int i = 0; i < jj; ++i) q[i] -= g[i] * y;
        }
    }
    return 1;
}

/* Unpivoted Cholesky of S stopped at 0-based column jj0 (the factor of the
 * leading jj0 x jj0 block in W): continue with symmetric pivoting on the
 * Schur complement of that block, taking at each step the remaining index
 * whose Schur-complement diagonal keeps the largest fraction (above
 * PSD_PIVOT_TOL) of its diagonal entry.  The indices go to perm (K entries:
 * the jj0 leading ones in place, then the pivots, then the rest); returns the
 * order jj of the positive definite leading block of S[perm, perm], or -1
 * when the trailing block would exceed limit (too many negative eigenvalues
 * for the path, or too large a block to pivot on cheaply).  work: 2 K^2 + K
 * doubles. */
static fedmm_blas_int pivoted_continuation(fedmm_blas_int K, const double *S, fedmm_blas_int jj0,
                                           const double *W, fedmm_blas_int limit, double *work,
                                           fedmm_blas_int *perm, const fedmm_blas_t *blas)
{
    const fedmm_blas_int n2 = K - jj0;
    double *G = work, *T = G + (size_t)K * n2, *rdiag = T + (size_t)n2 * n2;
    for (fedmm_blas_int i = 0; i < K; ++i) perm[i] = i;
    if (n2 > psd_pivot_max(K)) return -1;
    for (fedmm_blas_int j = 0; j < jj0; ++j) {
        const double d = W[(size_t)j * K + j];
        if (!(d > 0.0)) return -1;
        rdiag[j] = 1.0 / d;
    }
    for (fedmm_blas_int c = 0; c < n2; ++c)
        memcpy(G + (size_t)c * K, S + (size_t)(jj0 + c) * K, (size_t)jj0 * sizeof(double));
    if (jj0 > 0 && !cholesky_solve(K, jj0, n2, W, rdiag, G, blas)) return -1;
    /* the diagonal first: an entry below the threshold stays there (positive
     * pivots only lower the diagonal), so many of them end the path cheaply */
    fedmm_blas_int low = 0;
    for (fedmm_blas_int a = 0; a < n2; ++a) {
        const double *s12 = S + (size_t)(jj0 + a) * K, *g = G + (size_t)a * K;
        double t = s12[jj0 + a];
        for (fedmm_blas_int i = 0; i < jj0; ++i) t -= s12[i] * g[i];
        if (!(t > PSD_PIVOT_TOL * s12[jj0 + a])) ++low;
    }
    if (low > limit) return -1;
    if (jj0 > 0 && n2 >= PSD_LOOPS_MAX_K) { /* T = S22 - S12^T G */
        const double one = 1.0, minus_one = -1.0;
        for (fedmm_blas_int b = 0; b < n2; ++b)
            memcpy(T + (size_t)b * n2, S + (size_t)(jj0 + b) * K + jj0, (size_t)n2 * sizeof(double));
        blas->dgemm("T", "N", &n2, &n2, &jj0, &minus_one, S + (size_t)jj0 * K, &K, G, &K, &one, T, &n2);
    } else {
        for (fedmm_blas_int b = 0; b < n2; ++b)
            for (fedmm_blas_int a = 0; a < n2; ++a) {
                const double *s12 = S + (size_t)(jj0 + a) * K, *g = G + (size_t)b * K;
                double t = S[(size_t)(jj0 + b) * K + jj0 + a];
                for (fedmm_blas_int i = 0; i < jj0; ++i) t -= s12[i] * g[i];
                T[(size_t)b * n2 + a] = t;
            }
    }
    fedmm_blas_int k = 0;
    for (; k < n2; ++k) {
        fedmm_blas_int best = -1;
        double best_ratio = PSD_PIVOT_TOL;
        low = 0;
        for (fedmm_blas_int a = k; a < n2; ++a) {
            const double d = T[(size_t)a * n2 + a], s = S[(size_t)perm[jj0 + a] * K + perm[jj0 + a]];
            if (d > PSD_PIVOT_TOL * s) {
                if (d > best_ratio * s) {
                    best_ratio = d / s;
                    best = a;
                }
            } else {
                ++low;
            }
        }
        if (low > limit) return -1;
        if (best < 0) break;
        if (best != k) { /* swap indices k and best: columns, then rows */
            double *ck = T + (size_t)k * n2, *cb = T + (size_t)best * n2;
            for (fedmm_blas_int i = 0; i < n2; ++i) {
                const double t = ck[i];
                ck[i] = cb[i];
                cb[i] = t;
            }
            for (fedmm_blas_int j = 0; j < n2; ++j) {
                double *c = T + (size_t)j * n2;
                const double t = c[k];
                c[k] = c[best];
                c[best] = t;
            }
            const fedmm_blas_int t = perm[jj0 + k];
            perm[jj0 + k] = perm[jj0 + best];
            perm[jj0 + best] = t;
        }
        const double *ck = T + (size_t)k * n2;
        const double inv = 1.0 / ck[k];
        for (fedmm_blas_int j = k + 1; j < n2; ++j) { /* trailing update, full columns */
            double *c = T + (size_t)j * n2;
            const double f = ck[j] * inv;
            for (fedmm_blas_int i = k + 1; i < n2; ++i) c[i] -= ck[i] * f;
        }
    }
    return jj0 + k;
}

/* The negative part of the symmetric S (full, K x K) whose leading jj x jj
 * block S11 is positive definite (its Cholesky factor in W): returns the
 * number m of Ritz pairs (theta_i, u_i) with theta_i < -tau and sets V =
 * [sqrt(-theta_i) u_i] (K x m) and the lower triangle of S_out to out = S -
 * sum theta_i u_i u_i^T, or returns -1 when the path cannot vouch for its
 * result (the caller then takes another path).
 *
 * Accuracy: out is within 2 sqrt(2) ||R||_F + sqrt(K) delta of the
 * projection of S (Frobenius norm), R = [S u_i - theta_i u_i]: the projection
 * is 1-Lipschitz, S is within sqrt(2) ||R||_F of the block-diagonal
 * diag(Theta, C) (C: S compressed to the complement of the u_i), whose
 * projection is diag(0, C_+), and C >= -delta I because out + delta I =
 * [[delta I, R^T], [R, C + delta I]] (in the basis [U, U_perp]) has a Cholesky
 * factorization, which is checked.
 *
 * Method: with G = S11^{-1} S12 and the Schur complement T = S22 - S21 G
 * (order n2 = K - jj, small), S = [[I, 0], [G^T, I]] diag(S11, T) [[I, G], [0,
 * I]], so (S - s I)^{-1} costs two triangular solves and a solve with an
 * n2 x n2 matrix for any s < 0 (S11 - s I is positive definite), and S has
 * as many negative eigenvalues as T (Haynsworth).  A rational Krylov space is
 * grown from [-G; I] Z_T (T's eigenvectors, most negative first, = S^{-1} [0;
 * T Z_T]) and generic guard vectors: each step adds (S - s_i I)^{-1} x_i for
 * every unconverged negative Ritz pair (theta_i, x_i) of S on the space, s_i
 * = 0 for the first PSD_KRYLOV_STEPS steps and s_i = theta_i after them
 * (Rayleigh-quotient shifts: S11 - theta_i I refactored, cubic convergence).
 * Inverse subspace iteration with S^{-1} alone converges to the eigenvalues
 * nearest zero, which are often small positive ones rather than the negative
 * ones: the shifts make the convergence independent of the positive spectrum.
 * S_out: S on entry (overwritten); W: K x K; work: see PSD_LWORK. */
static fedmm_blas_int negative_part(fedmm_blas_int K, double *S, double norm_f, fedmm_blas_int jj,
                                    double *W, double *V, double *work, const fedmm_blas_t *blas)
{
    const fedmm_blas_int n2 = K - jj;
    if (jj < 1 || n2 < 1) return -1;
    const fedmm_blas_int nb_max = K < PSD_BASIS_MAX ? K : PSD_BASIS_MAX;
    double *B = work;                       /* K x nb_max: orthonormal basis */
    double *SB = B + (size_t)K * nb_max;    /* K x nb_max: S B */
    double *X = SB + (size_t)K * nb_max;    /* K x nb_max: Ritz vectors */
    double *SX = X + (size_t)K * nb_max;    /* K x nb_max: S X */
    double *Hm = SX + (size_t)K * nb_max;   /* nb_max^2: B^T S B */
    double *Hc = Hm + (size_t)nb_max * nb_max; /* nb_max^2: its copy for Jacobi */
    double *Z = Hc + (size_t)nb_max * nb_max;  /* nb_max^2: Ritz coefficients */
    double *theta = Z + (size_t)nb_max * nb_max; /* nb_max */
    double *res = theta + nb_max;           /* nb_max: residual norms */
    double *prev_res = res + nb_max;        /* nb_max: the residuals one step before */
    double *T = prev_res + nb_max;          /* n2^2 scratch */
    double *r = T + (size_t)n2 * n2;        /* n2 */
    double *h = r + n2;                     /* n2 */
    double *F = h + n2;                     /* K x K: shifted factor, then the certificate */
    schur_block_t s0, sh[PSD_SHIFT_SLOTS]; /* S and S - theta_i I */
    s0.jj = jj;
    s0.n2 = n2;
    s0.L = W;
    s0.G = F + (size_t)K * K;
    s0.Zt = s0.G + (size_t)K * n2;
    s0.theta = s0.Zt + (size_t)n2 * n2;
    s0.t_inv = s0.theta + n2;
    s0.rdiag = s0.t_inv + n2;
    double *next = s0.rdiag + K;
    for (int k = 0; k < PSD_SHIFT_SLOTS; ++k) {
        sh[k].jj = jj;
        sh[k].n2 = n2;
        sh[k].L = k == 0 ? F : next; /* F: the certificate's too, once the slots are done */
        if (k > 0) next += (size_t)K * K;
        sh[k].G = next;
        sh[k].Zt = sh[k].G + (size_t)K * n2;
        sh[k].theta = sh[k].Zt + (size_t)n2 * n2;
        sh[k].t_inv = sh[k].theta + n2;
        sh[k].rdiag = sh[k].t_inv + n2;
        next = sh[k].rdiag + K;
    }

    if (!schur_factor(K, S, 0.0, 1, 1e-15 * norm_f, norm_f, &s0, T, blas)) return -1;
    fedmm_blas_int n_negative = 0; /* = the number of negative eigenvalues of S */
    for (fedmm_blas_int i = 0; i < n2; ++i) n_negative += s0.theta[i] < 0.0;
    if (n_negative > PSD_SUBSPACE_MAX_NEGATIVE(K)) return -1; /* too many for this path */
    const double res_tol = PSD_RESIDUAL_TOL * norm_f / sqrt((double)(n_negative > 0 ? n_negative : 1));
    const double delta = PSD_SUBSPACE_TOL * norm_f;
    const double tau = 0.5 * delta;
    fedmm_blas_int m = 0;
    if (n_negative > 0) {
        fedmm_blas_int nb = n_negative + PSD_SUBSPACE_GUARD;
        if (nb > nb_max) nb = nb_max;
        /* start block: [-G; I] Zt (T's eigenvectors, most negative first), then
         * generic vectors (an additive recurrence: no random numbers, the
         * result is deterministic) */
        for (fedmm_blas_int c = 0; c < nb && c < n2; ++c) {
            double *q = B + (size_t)c * K;
            const double *zt = s0.Zt + (size_t)c * n2;
            for (fedmm_blas_int i = 0; i < jj; ++i) q[i] = 0.0;
            for (fedmm_blas_int b = 0; b < n2; ++b) {
                const double *g = s0.G + (size_t)b * K;
                for (fedmm_blas_int i = 0; i < jj; ++i) q[i] -= g[i] * zt[b];
                q[jj + b] = zt[b];
            }
        }
        for (fedmm_blas_int c = n2; c < nb; ++c) {
            const double alpha = 0.6180339887498949 * (double)(c + 1) + 0.4142135623730950;
            double t = 0.0;
            for (fedmm_blas_int i = 0; i < K; ++i) {
                t += alpha;
                t -= floor(t);
                B[(size_t)c * K + i] = t - 0.5;
            }
        }
        if (!orthonormalize(K, nb, B)) return -1;
        symmetric_times(K, nb, S, B, SB, blas);
        ritz_entries(K, 0, nb, B, SB, Hm, nb_max);
        int residuals_ok = 0, n_shifts = 0, shift_set = 0;
        double shift[PSD_SHIFT_SLOTS] = {0.0};
        for (fedmm_blas_int c = 0; c < nb_max; ++c) prev_res[c] = HUGE_VAL;
        for (int it = 0;; ++it) {
            /* Rayleigh-Ritz of S on the basis */
            for (fedmm_blas_int b = 0; b < nb; ++b)
                for (fedmm_blas_int a = 0; a < nb; ++a)
                    Hc[(size_t)b * nb + a] = Hm[(size_t)b * nb_max + a];
            jacobi_eigh(nb, Hc, Z, theta);
            m = 0;
            while (m < nb && theta[m] < -tau) ++m;
            fedmm_blas_int q = m > n_negative ? m : n_negative; /* the pairs followed */
            if (q > nb) q = nb;
            /* restart: the basis becomes its nk lowest Ritz vectors (the pairs
             * followed and guards), which keeps the Rayleigh-Ritz problems
             * small and nearly diagonal */
            fedmm_blas_int nk = q + PSD_SUBSPACE_GUARD + 1;
            if (nk > nb) nk = nb;
            residuals_ok = 1;
            for (fedmm_blas_int c = 0; c < nk; ++c) {
                double *x = X + (size_t)c * K, *sx = SX + (size_t)c * K;
                for (fedmm_blas_int i = 0; i < K; ++i) x[i] = sx[i] = 0.0;
                for (fedmm_blas_int b = 0; b < nb; ++b) {
                    const double z = Z[(size_t)c * nb + b];
                    const double *qb = B + (size_t)b * K, *sqb = SB + (size_t)b * K;
                    for (fedmm_blas_int i = 0; i < K; ++i) {
                        x[i] += z * qb[i];
                        sx[i] += z * sqb[i];
                    }
                }
                double r2 = 0.0;
                for (fedmm_blas_int i = 0; i < K; ++i) {
                    const double d = sx[i] - theta[c] * x[i];
                    r2 += d * d;
                }
                res[c] = sqrt(r2);
                if (c < m && !(res[c] <= res_tol)) residuals_ok = 0;
            }
            memcpy(B, X, (size_t)K * nk * sizeof(double));
            memcpy(SB, SX, (size_t)K * nk * sizeof(double));
            for (fedmm_blas_int b = 0; b < nk; ++b)
                for (fedmm_blas_int a = 0; a < nk; ++a) Hm[(size_t)b * nb_max + a] = a == b ? theta[a] : 0.0;
            nb = nk;
            if (residuals_ok && m >= n_negative) break;
            if (it >= PSD_SUBSPACE_MAX_ITER) break;
            /* expansion: (S - s_c I)^{-1} x_c for the pairs not converged */
            const fedmm_blas_int nb_old = nb;
            for (fedmm_blas_int c = 0; c < q && nb < nb_max; ++c) {
                if (c < m && res[c] <= res_tol) continue;
                double *y = B + (size_t)nb * K;
                memcpy(y, X + (size_t)c * K, (size_t)K * sizeof(double));
                /* the shift: theta_c, factored for each of the first
                 * PSD_SHIFT_SLOTS pairs (its own slot) from step
                 * PSD_KRYLOV_STEPS on, and kept while the pair's residual
                 * falls a hundredfold per step (refactored otherwise, at most
                 * PSD_MAX_SHIFTS factorizations; below PSD_LOOPS_MAX_K, where a
                 * factorization costs less than a step, refactored every step:
                 * Rayleigh-quotient iteration); the other pairs take the
                 * nearest of 0 (S^{-1}) and the slots' shifts */
                const fedmm_blas_int slot = c < PSD_SHIFT_SLOTS ? c : -1;
                if (slot >= 0 && it >= (K < PSD_LOOPS_MAX_K ? 1 : PSD_KRYLOV_STEPS) && theta[c] < -tau &&
                    (K < PSD_LOOPS_MAX_K ||
                     (n_shifts < PSD_MAX_SHIFTS && (!(shift_set & (1 << slot)) || res[c] > 0.01 * prev_res[c])))) {
                    if (!schur_factor(K, S, theta[c], 0, 0.0, norm_f, &sh[slot], T, blas)) return -1;
                    shift[slot] = theta[c];
                    shift_set |= 1 << slot;
                    ++n_shifts;
                }
                const schur_block_t *op = &s0;
                double nearest = fabs(theta[c]);
                for (int k = 0; k < PSD_SHIFT_SLOTS; ++k)
                    if ((shift_set & (1 << k)) && (k == slot || fabs(theta[c] - shift[k]) < nearest)) {
                        op = &sh[k];
                        if (k == slot) break;
                        nearest = fabs(theta[c] - shift[k]);
                    }
                if (!schur_apply(K, S, op, 1, y, r, h, blas)) return -1;
                /* orthogonalize against the basis (twice), keep if independent */
                double before = 0.0;
                for (fedmm_blas_int i = 0; i < K; ++i) before += y[i] * y[i];
                if (!(before > 0.0) || !isfinite(before)) return -1;
                for (int pass = 0; pass < 2; ++pass)
                    for (fedmm_blas_int b = 0; b < nb; ++b) {
                        const double *qb = B + (size_t)b * K;
                        double t = 0.0;
                        for (fedmm_blas_int i = 0; i < K; ++i) t += qb[i] * y[i];
                        for (fedmm_blas_int i = 0; i < K; ++i) y[i] -= t * qb[i];
                    }
                double after = 0.0;
                for (fedmm_blas_int i = 0; i < K; ++i) after += y[i] * y[i];
                if (!(after > 1e-24 * before)) continue;
                const double inv = 1.0 / sqrt(after);
                for (fedmm_blas_int i = 0; i < K; ++i) y[i] *= inv;
                ++nb;
            }
            memcpy(prev_res, res, (size_t)nk * sizeof(double));
            if (nb == nb_old) break; /* nothing to add: the space is exhausted */
            symmetric_times(K, nb - nb_old, S, B + (size_t)nb_old * K, SB + (size_t)nb_old * K, blas);
            ritz_entries(K, nb_old, nb, B, SB, Hm, nb_max);
        }
        if (!residuals_ok) return -1;
    }
    for (fedmm_blas_int c = 0; c < m; ++c) {
        const double scale = sqrt(-theta[c]);
        for (fedmm_blas_int i = 0; i < K; ++i) V[(size_t)c * K + i] = scale * X[(size_t)c * K + i];
    }
    /* out = S - sum theta_i u_i u_i^T in S's lower triangle, and the
     * certificate: Cholesky of out + delta I, factored in F */
    add_outer_lower(K, m, V, S, blas);
    for (fedmm_blas_int j = 0; j < K; ++j) {
        memcpy(F + (size_t)j * K + j, S + (size_t)j * K + j, (size_t)(K - j) * sizeof(double));
        F[(size_t)j * K + j] += delta;
    }
    if (cholesky_lower(K, F, blas) != 0) return -1;
    return m;
}

/* Doubles of the few-negative-eigenvalues path: the permuted matrix (K^2),
 * then the larger of pivoted_continuation's 2 K^2 + K and negative_part's
 * layout (basis of nb <= min(K, PSD_BASIS_MAX) vectors, trailing block n2 <=
 * psd_pivot_max(K)). */
static size_t psd_negative_work(fedmm_blas_int K)
{
    const size_t k = (size_t)K, nb = K < PSD_BASIS_MAX ? k : PSD_BASIS_MAX;
    const size_t n2 = (size_t)psd_pivot_max(K);
    const size_t pivot = 2 * k * k + k;
    const size_t part = 4 * k * nb + 3 * nb * nb + 3 * nb + 2 * n2 + k * k +
                        (1 + PSD_SHIFT_SLOTS) * (k * n2 + n2 * n2 + 2 * n2 + k) + (PSD_SHIFT_SLOTS - 1) * k * k + n2 * n2;
    return k * k + (pivot > part ? pivot : part);
}

size_t fedmm_project_psd_work(fedmm_blas_int K)
{
    const size_t lapack = PSD_LWORK(K), negative = psd_negative_work(K);
    return 2 * (size_t)K * K + (size_t)K + (lapack > negative ? lapack : negative);
}

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
    double max_abs = 0.0, sum_sq = 0.0;
    for (fedmm_blas_int j = 0; j < K; ++j) {
        for (fedmm_blas_int i = j; i < K; ++i) {
            const double s = 0.5 * (A[(size_t)j * K + i] + A[(size_t)i * K + j]);
            if (!isfinite(s)) return FEDMM_ENONFINITE;
            out[(size_t)j * K + i] = s;
            out[(size_t)i * K + j] = s;
            if (fabs(s) > max_abs) max_abs = fabs(s);
            sum_sq += (i == j ? 1.0 : 2.0) * s * s;
        }
    }
    /* LAPACK's bisection and the Schur-complement path square entries: a tiny
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
     * eigenvalues are negative.  No further test is needed to choose the path:
     * few at most -> only the negative eigenpairs (value range, so their number
     * need not be known); otherwise all of them. */
    const fedmm_blas_int neg_bound = K - info + 1;
    int partial = neg_bound * PSD_PARTIAL_MAX_FRACTION <= K;
    fedmm_blas_int m = 0;
    if (neg_bound <= psd_pivot_max(K) && isfinite(sum_sq)) {
        /* few negative eigenvalues: continue Cholesky with symmetric pivoting,
         * then the negative eigenpairs of the permuted matrix Sp (negative_part) */
        fedmm_blas_int *perm = isuppz; /* K ints, free until the paths below */
        double *Sp = lapack_work, *rest = Sp + (size_t)K * K;
        /* the unpivoted factor is kept up to its first small pivot (below the
         * pivoting threshold): a nearly singular leading block would make
         * the Schur complement large and negative on many indices */
        fedmm_blas_int jj0 = 0;
        while (jj0 < info - 1) {
            const double l = W[(size_t)jj0 * K + jj0];
            if (!(l * l > PSD_PIVOT_TOL * out[(size_t)jj0 * K + jj0])) break;
            ++jj0;
        }
        /* and backed off by as many columns as remain: pivoting over twice
         * the trailing block leaves a much smaller Schur complement (the
         * unpivoted order is arbitrary), which every later step pays for */
        {
            fedmm_blas_int back = K - jj0;
            if (K - jj0 + back > psd_pivot_max(K)) back = psd_pivot_max(K) - (K - jj0);
            if (back > jj0) back = jj0;
            if (back > 0) jj0 -= back;
        }
        const fedmm_blas_int jj = pivoted_continuation(K, out, jj0, W, PSD_SUBSPACE_MAX_NEGATIVE(K) + 2,
                                                       rest, perm, blas);
        int ok = jj > 0 && jj < K;
        if (ok) {
            for (fedmm_blas_int j = 0; j < K; ++j) {
                const double *src = out + (size_t)perm[j] * K;
                double *dst = Sp + (size_t)j * K;
                for (fedmm_blas_int i = 0; i < K; ++i) dst[i] = src[perm[i]];
            }
            if (jj > jj0) { /* the leading block changed: factor it (positive definite by construction) */
                for (fedmm_blas_int j = 0; j < jj; ++j)
                    memcpy(W + (size_t)j * K + j, Sp + (size_t)j * K + j, (size_t)(jj - j) * sizeof(double));
                ok = cholesky_lower_n(jj, K, W, blas) == 0;
            }
        }
        if (ok && negative_part(K, Sp, sqrt(sum_sq), jj, W, V, rest, blas) >= 0) {
            /* the result is in Sp's lower triangle, in the permuted order */
            for (fedmm_blas_int j = 0; j < K; ++j)
                for (fedmm_blas_int i = j; i < K; ++i)
                    out[(size_t)perm[i] * K + perm[j]] = out[(size_t)perm[j] * K + perm[i]] =
                        Sp[(size_t)j * K + i];
            *path = 4;
            return FEDMM_OK;
        }
    }
    for (fedmm_blas_int j = 0; j < K; ++j)
        memcpy(W + (size_t)j * K + j, out + (size_t)j * K + j, (size_t)(K - j) * sizeof(double));
    if (partial && blas->dsytrd != NULL && blas->dstebz != NULL && blas->dstein != NULL &&
        blas->dorm2r != NULL && blas->dormtr != NULL) {
        m = negative_eigenpairs(K, max_abs, W, V, w, lapack_work, lwork, isuppz, lapack_iwork, blas,
                                &info);
        if (info != 0) { /* bisection or inverse iteration in trouble: all eigenpairs instead */
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
    *path = partial ? 2 : 3;
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
