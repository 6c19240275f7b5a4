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

/* Below this many eigenvectors the back-transformation applies the
 * Householder reflectors one by one (loops): the blocked dormtr forms
 * triangular factors whose cost does not shrink with the number of vectors. */
#define PSD_UNBLOCKED_MAX_VECTORS 16

/* The eigenpairs of the symmetric W (lower triangle; overwritten) with
 * eigenvalues in (-K max|s| - 1, 0]: tridiagonal reduction (dsytrd), bisection
 * (dstebz), inverse iteration (dstein) and back-transformation, i.e. dsyevr's
 * RANGE='V' path without its set-up (scaling, workspace, the blocked
 * back-transformation for a handful of vectors).  Eigenvalues ascend in w,
 * eigenvectors go to V (K x m); returns m, or -1 (nothing computed) when
 * there are more than max_m of them.  work >= 3K + max(NB K, 5K)
 * doubles, iwork >= 7K ints (*info != 0: a LAPACK failure). */
static fedmm_blas_int negative_eigenpairs(fedmm_blas_int K, double max_abs, fedmm_blas_int max_m,
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
    if (m > max_m) return -1; /* too many for this path (W is destroyed, V untouched) */
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

/* ---- Cholesky: the positive definite test -------------------------------- */

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

size_t fedmm_project_psd_work(fedmm_blas_int K)
{
    return 2 * (size_t)K * K + (size_t)K + PSD_LWORK(K);
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
        m = negative_eigenpairs(K, max_abs, max_m, W, V, w, lapack_work, lwork,
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
