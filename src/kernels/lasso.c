/* SPDX-License-Identifier: BSD-3-Clause
 *
 * lasso.c -- batched LASSO on the Gram matrix and the dictionary-learning
 * statistics of the FedMM paper, eq. (16) and (18) (with the 1/2 convention
 * of eq. (28)):
 *
 *     h_j = argmin_h  1/2 ||z_j - D h||^2 + lam ||h||_1      (one per column)
 *     A   = H H^T / b,   B = Z H^T / b.
 *
 * Solvers (chosen by measurement, see benchmarks/bench_sparse.py): cyclic
 * coordinate descent on G = D^T D with the gradient g = D^T (z - D h) =
 * c - G h kept up to date, plus a Newton step on the support once the
 * support and signs stop changing (the LASSO solution restricted to its
 * support solves G_SS h_S = c_S - lam sign(h_S) exactly), which ends the
 * linear convergence tail of coordinate descent.  Every column stops on its
 * own duality gap, never on the size of the last step.  Also a feature-sign
 * active-set search (small supports, and dense ones through G^{-1}, with a
 * short path for a column whose support is every atom and whose Newton step
 * keeps every sign), and for overcomplete dictionaries a
 * homotopy (LARS-lasso) path from h = 0 with Cholesky up- and downdates of
 * the support's Gram block, ending exactly at lam.
 */
#include <math.h>
#include <string.h>

#include "fedmm_kernels.h"
#include "internal.h"

/* The K-length loops of list_axpy are compiled twice on x86-64 glibc Linux
 * (ifunc), for AVX2 and for the baseline, the loader picking one: the same
 * operations in the same order, so identical results (AVX2 without FMA). */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define LASSO_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef LASSO_CLONES
#define LASSO_CLONES
#endif

/* Relative accuracy to which the duality gap itself can be evaluated: a
 * requested tolerance below it could never be certified. */
#define LASSO_TOL_FLOOR 2.220446049250313e-13

/* Internal method code: active set while the support is small, then
 * coordinate descent from that point.  An active-set step costs about
 * K m + m^2 and a solve about m steps, while coordinate descent needs a
 * handful of O(K m) sweeps whatever m; measured crossovers: m ~ 9 at K = 15,
 * m between 15 and 35 at K = 50.  Cap: min(24, max(4, K/2)). */
#define LASSO_HYBRID 4

/* Interrupt polling (fedmm_interrupt_t): every iteration charges an upper
 * estimate of its multiply-adds, and poll runs once FEDMM_INTERRUPT_WORK of
 * them are spent.  Only the poll's answer can change the control flow (a
 * stop), so a run that is never stopped computes exactly what it computes
 * without an interrupt. */
typedef struct lasso_poll {
    const fedmm_interrupt_t *intr; /* NULL: never polls */
    int64_t step;                  /* charge of one sweep or active-set step: K^2 + 4K */
    int64_t solve;                 /* extra charge of a support factorization: K^3 / 3 */
    int64_t left;                  /* budget before the next poll */
    int stopped;                   /* poll asked to stop: every loop returns at once */
} lasso_poll_t;

static void lasso_poll_init(lasso_poll_t *pl, const fedmm_interrupt_t *intr, fedmm_blas_int K)
{
    pl->intr = intr != NULL && intr->poll != NULL ? intr : NULL;
    pl->step = (int64_t)K * K + 4 * (int64_t)K;
    pl->solve = (int64_t)K * K * K / 3;
    pl->left = FEDMM_INTERRUPT_WORK;
    pl->stopped = 0;
}

/* Charge `work` multiply-adds; nonzero when the run must stop. */
static int lasso_poll(lasso_poll_t *pl, int64_t work)
{
    if (pl->intr == NULL) return 0;
    if (pl->stopped) return 1;
    pl->left -= work;
    if (pl->left > 0) return 0;
    pl->left = FEDMM_INTERRUPT_WORK;
    if (pl->intr->poll(pl->intr->arg)) pl->stopped = 1;
    return pl->stopped;
}

static fedmm_blas_int lasso_hybrid_max_support(fedmm_blas_int K)
{
    const fedmm_blas_int half = K / 2 > 4 ? K / 2 : 4;
    return half < 24 ? half : 24;
}

static double soft_threshold(double u, double lam, int positive)
{
    if (u > lam) return u - lam;
    if (!positive && u < -lam) return u + lam;
    return 0.0;
}

/* g = c - G_{:,S} h_S over the nonzero entries of h (exact refresh). */
static void refresh_gradient(fedmm_blas_int K, const double *G, fedmm_blas_int ldg,
                             const double *c, const double *h, double *g)
{
    memcpy(g, c, (size_t)K * sizeof(double));
    for (fedmm_blas_int k = 0; k < K; ++k) {
        const double hk = h[k];
        if (hk == 0.0) continue;
        const double *Gk = G + (size_t)k * ldg;
        for (fedmm_blas_int i = 0; i < K; ++i) g[i] -= hk * Gk[i];
    }
}

/* y[i] += sgn a_j G[i, S[j]] for j = 0, 1, ..., m-1 in this order (a_j =
 * a[S[j]] when by_index, else a[j]; sgn = +-1, so sgn a_j is exact; S ==
 * NULL: S[j] = j, every column of G in turn): the
 * additions of a plain loop over j, four columns per pass over y (one load
 * and store of y[i] per four terms, added in the same order, so the result
 * is the plain loop's bit for bit). */
LASSO_CLONES static void list_axpy(fedmm_blas_int K, const double *G, fedmm_blas_int ldg, const int *S,
                                   fedmm_blas_int m, const double *a, int by_index, double sgn, double *y)
{
    fedmm_blas_int j = 0;
    for (; j + 4 <= m; j += 4) {
        const int s0 = S ? S[j] : (int)j, s1 = S ? S[j + 1] : (int)j + 1;
        const int s2 = S ? S[j + 2] : (int)j + 2, s3 = S ? S[j + 3] : (int)j + 3;
        const double *G0 = G + (size_t)s0 * ldg, *G1 = G + (size_t)s1 * ldg;
        const double *G2 = G + (size_t)s2 * ldg, *G3 = G + (size_t)s3 * ldg;
        const double a0 = sgn * (by_index ? a[s0] : a[j]);
        const double a1 = sgn * (by_index ? a[s1] : a[j + 1]);
        const double a2 = sgn * (by_index ? a[s2] : a[j + 2]);
        const double a3 = sgn * (by_index ? a[s3] : a[j + 3]);
        /* four rows per step, then two, so that GCC -O2 makes them 4-wide
         * (AVX2 clone) or 2-wide (baseline) vector operations; every row
         * keeps its order */
        fedmm_blas_int i = 0;
        for (; i + 4 <= K; i += 4) {
            double v0 = y[i], v1 = y[i + 1], v2 = y[i + 2], v3 = y[i + 3];
            v0 += a0 * G0[i];
            v1 += a0 * G0[i + 1];
            v2 += a0 * G0[i + 2];
            v3 += a0 * G0[i + 3];
            v0 += a1 * G1[i];
            v1 += a1 * G1[i + 1];
            v2 += a1 * G1[i + 2];
            v3 += a1 * G1[i + 3];
            v0 += a2 * G2[i];
            v1 += a2 * G2[i + 1];
            v2 += a2 * G2[i + 2];
            v3 += a2 * G2[i + 3];
            v0 += a3 * G3[i];
            v1 += a3 * G3[i + 1];
            v2 += a3 * G3[i + 2];
            v3 += a3 * G3[i + 3];
            y[i] = v0;
            y[i + 1] = v1;
            y[i + 2] = v2;
            y[i + 3] = v3;
        }
        for (; i + 2 <= K; i += 2) {
            double v = y[i], w = y[i + 1];
            v += a0 * G0[i];
            w += a0 * G0[i + 1];
            v += a1 * G1[i];
            w += a1 * G1[i + 1];
            v += a2 * G2[i];
            w += a2 * G2[i + 1];
            v += a3 * G3[i];
            w += a3 * G3[i + 1];
            y[i] = v;
            y[i + 1] = w;
        }
        if (i < K) y[i] = (((y[i] + a0 * G0[i]) + a1 * G1[i]) + a2 * G2[i]) + a3 * G3[i];
    }
    for (; j < m; ++j) {
        const int sj = S ? S[j] : (int)j;
        const double *Gj = G + (size_t)sj * ldg;
        const double aj = sgn * (by_index ? a[sj] : a[j]);
        fedmm_blas_int i = 0;
        for (; i + 4 <= K; i += 4) {
            const double v0 = y[i] + aj * Gj[i], v1 = y[i + 1] + aj * Gj[i + 1];
            const double v2 = y[i + 2] + aj * Gj[i + 2], v3 = y[i + 3] + aj * Gj[i + 3];
            y[i] = v0;
            y[i + 1] = v1;
            y[i + 2] = v2;
            y[i + 3] = v3;
        }
        for (; i + 2 <= K; i += 2) {
            const double v = y[i] + aj * Gj[i], w = y[i + 1] + aj * Gj[i + 1];
            y[i] = v;
            y[i + 1] = w;
        }
        if (i < K) y[i] += aj * Gj[i];
    }
}

/* g = c - G_{:,S} h_S over an index list S[0..m) (the active set). */
static void refresh_gradient_list(fedmm_blas_int K, const double *G, fedmm_blas_int ldg,
                                  const double *c, const double *h, const int *S,
                                  fedmm_blas_int m, double *g)
{
    memcpy(g, c, (size_t)K * sizeof(double));
    list_axpy(K, G, ldg, S, m, h, 1, -1.0, g);
}

/* Duality-gap measure for one column, to be compared with tol.
 *
 * With r = z - D h, g = D^T r and the dual point theta = s r, s = min(1,
 * lam / ||g||_inf) (positive LASSO: lam / max(g)), the gap is
 *     gap = 1/2 (1 - s)^2 ||r||^2 + lam ||h||_1 - s h^T g,
 * where ||r||^2 = ||z||^2 - c^T h - h^T g; we return gap / (1/2 ||z||^2).
 * When ||z||^2 is unknown (znorm2 < 0) we return the certified bound
 * (1-s)^2 + (lam ||h||_1 - s h^T g) / (1/2 L), L = c^T h + h^T g =
 * ||z||^2 - ||r||^2 <= ||z||^2 (valid when L > 0; HUGE_VAL when no bound). */
static double lasso_gap(fedmm_blas_int K, const double *c, const double *h, const double *g,
                        double znorm2, double lam, int positive)
{
    double l1 = 0.0, hg = 0.0, ch = 0.0, gmax = 0.0;
    for (fedmm_blas_int k = 0; k < K; ++k) {
        const double gk = positive ? g[k] : fabs(g[k]);
        if (gk > gmax) gmax = gk;
        l1 += fabs(h[k]);
        hg += h[k] * g[k];
        ch += c[k] * h[k];
    }
    const double s = gmax > lam ? lam / gmax : 1.0;
    double lin = lam * l1 - s * hg;
    if (lin < 0.0) lin = 0.0; /* rounding: the gap is nonnegative */
    if (znorm2 > 0.0) {
        double r2 = znorm2 - ch - hg;
        if (r2 < 0.0) r2 = 0.0;
        return (0.5 * (1.0 - s) * (1.0 - s) * r2 + lin) / (0.5 * znorm2);
    }
    if (znorm2 == 0.0) return l1 == 0.0 ? 0.0 : HUGE_VAL;
    const double L = ch + hg;
    if (l1 == 0.0) return s == 1.0 ? 0.0 : HUGE_VAL;
    if (L <= 0.0) return HUGE_VAL;
    return (1.0 - s) * (1.0 - s) + lin / (0.5 * L);
}

/* Cholesky factor (lower, column-major, leading dimension ld) of G_SS for
 * the index list S[0..m).  Returns 0 when a pivot is not above
 * 1e-13 * G_kk (G_SS numerically singular, e.g. duplicated atoms). */
static int chol_factor(fedmm_blas_int m, const int *S, const double *G, fedmm_blas_int ldg,
                       double *L, fedmm_blas_int ld)
{
    for (fedmm_blas_int j = 0; j < m; ++j) {
        const double *Gj = G + (size_t)S[j] * ldg;
        double *Lj = L + (size_t)j * ld;
        for (fedmm_blas_int i = j; i < m; ++i) Lj[i] = Gj[S[i]];
    }
    for (fedmm_blas_int j = 0; j < m; ++j) {
        double *Lj = L + (size_t)j * ld;
        const double floor = 1e-13 * G[(size_t)S[j] * ldg + S[j]];
        for (fedmm_blas_int k = 0; k < j; ++k) {
            const double *Lk = L + (size_t)k * ld;
            const double ljk = Lk[j];
            for (fedmm_blas_int i = j; i < m; ++i) Lj[i] -= ljk * Lk[i];
        }
        if (!(Lj[j] > floor)) return 0;
        const double d = sqrt(Lj[j]);
        Lj[j] = d;
        for (fedmm_blas_int i = j + 1; i < m; ++i) Lj[i] /= d;
    }
    return 1;
}

/* Like chol_factor, but an index whose pivot fails (its atom is numerically
 * in the span of the previous ones, e.g. a duplicated atom) is dropped from
 * S instead of failing.  Left-looking, so every inner loop is a contiguous
 * axpy.  Returns the number of indices kept (S compacted in place). */
static fedmm_blas_int chol_factor_skip(fedmm_blas_int m, int *S, const double *G,
                                       fedmm_blas_int ldg, double *L, fedmm_blas_int ld)
{
    for (fedmm_blas_int j = 0; j < m; ++j) {
        const double *Gj = G + (size_t)S[j] * ldg;
        double *Lj = L + (size_t)j * ld;
        for (fedmm_blas_int i = j; i < m; ++i) Lj[i] = Gj[S[i]];
    }
    fedmm_blas_int j = 0;
    while (j < m) {
        double *Lj = L + (size_t)j * ld;
        for (fedmm_blas_int k = 0; k < j; ++k) {
            const double *Lk = L + (size_t)k * ld;
            const double ljk = Lk[j];
            for (fedmm_blas_int i = j; i < m; ++i) Lj[i] -= ljk * Lk[i];
        }
        if (Lj[j] > 1e-13 * G[(size_t)S[j] * ldg + S[j]]) {
            const double d = sqrt(Lj[j]);
            Lj[j] = d;
            for (fedmm_blas_int i = j + 1; i < m; ++i) Lj[i] /= d;
            ++j;
            continue;
        }
        /* drop position j: row j leaves the finished columns, the pending
         * columns (still holding G entries) shift one place up and left */
        for (fedmm_blas_int col = 0; col < j; ++col) {
            double *Lc = L + (size_t)col * ld;
            for (fedmm_blas_int r = j; r + 1 < m; ++r) Lc[r] = Lc[r + 1];
        }
        for (fedmm_blas_int col = j; col + 1 < m; ++col) {
            double *dst = L + (size_t)col * ld;
            const double *src = L + (size_t)(col + 1) * ld;
            for (fedmm_blas_int r = col; r + 1 < m; ++r) dst[r] = src[r + 1];
            S[col] = S[col + 1];
        }
        --m;
    }
    return m;
}

/* Extend the factor of G_SS (m x m) by the index S[m] (row m of L). */
static int chol_append(fedmm_blas_int m, const int *S, const double *G, fedmm_blas_int ldg,
                       double *L, fedmm_blas_int ld)
{
    const double *Gn = G + (size_t)S[m] * ldg;
    double d = Gn[S[m]];
    const double floor = 1e-13 * d;
    for (fedmm_blas_int j = 0; j < m; ++j) { /* solve L l = G_{S,new}, l stored as row m */
        const double *Lj = L + (size_t)j * ld;
        double v = Gn[S[j]];
        for (fedmm_blas_int k = 0; k < j; ++k) v -= L[(size_t)k * ld + m] * L[(size_t)k * ld + j];
        v /= Lj[j];
        L[(size_t)j * ld + m] = v;
        d -= v * v;
    }
    if (!(d > floor)) return 0;
    L[(size_t)m * ld + m] = sqrt(d);
    return 1;
}

/* Solve L L^T x = x in place. */
static void chol_solve(fedmm_blas_int m, const double *L, fedmm_blas_int ld, double *x)
{
    for (fedmm_blas_int j = 0; j < m; ++j) {
        const double *Lj = L + (size_t)j * ld;
        x[j] /= Lj[j];
        for (fedmm_blas_int i = j + 1; i < m; ++i) x[i] -= Lj[i] * x[j];
    }
    for (fedmm_blas_int j = m - 1; j >= 0; --j) {
        const double *Lj = L + (size_t)j * ld;
        double v = x[j];
        for (fedmm_blas_int i = j + 1; i < m; ++i) v -= Lj[i] * x[i];
        x[j] = v / Lj[j];
    }
}

/* f(h) - 1/2 ||z||^2 = 1/2 h^T G h - c^T h + lam ||h||_1, from g = c - G h. */
static double lasso_reduced_objective(fedmm_blas_int K, const double *c, const double *h,
                                      const double *g, double lam)
{
    double acc = 0.0, l1 = 0.0;
    for (fedmm_blas_int k = 0; k < K; ++k) {
        acc += h[k] * (g[k] + c[k]);
        l1 += fabs(h[k]);
    }
    return -0.5 * acc + lam * l1;
}

/* Newton step on the support: x = G_S'S'^{-1}(c_S' - lam sign(h_S')) where
 * S' drops the atoms of the support that are (numerically) in the span of
 * the previous ones (duplicated atoms); they go to 0.  h moves towards x up to
 * the first sign change (that coefficient becomes 0), and the move is kept
 * only if the objective decreases.  On entry g = c - G h; on exit g matches
 * h.  Returns 0 (h unchanged), 1 (full step) or 2 (cut at a sign change). */
static int support_newton(fedmm_blas_int K, const double *G, fedmm_blas_int ldg,
                          const double *c, double lam, int positive, double *h, double *g,
                          int *support, double *L, double *x, double *h_keep)
{
    fedmm_blas_int m = 0;
    for (fedmm_blas_int k = 0; k < K; ++k)
        if (h[k] != 0.0) support[m++] = (int)k;
    m = chol_factor_skip(m, support, G, ldg, L, K);
    if (m == 0) return 0;
    const double f_old = lasso_reduced_objective(K, c, h, g, lam);
    memcpy(h_keep, h, (size_t)K * sizeof(double));
    for (fedmm_blas_int i = 0; i < m; ++i) {
        const int k = support[i];
        x[i] = c[k] - (h[k] > 0.0 ? lam : -lam);
    }
    chol_solve(m, L, K, x);
    double t_min = 1.0;
    fedmm_blas_int i_min = -1;
    for (fedmm_blas_int i = 0; i < m; ++i) {
        const double hk = h[support[i]];
        if ((hk > 0.0) == (x[i] > 0.0) && x[i] != 0.0) continue;
        const double t = hk / (hk - x[i]);
        if (t < t_min) { t_min = t; i_min = i; }
    }
    if (t_min <= 0.0) return 0;
    /* dependent atoms (not in S') move linearly to 0 with the others */
    for (fedmm_blas_int k = 0; k < K; ++k) h[k] *= 1.0 - t_min;
    for (fedmm_blas_int i = 0; i < m; ++i) h[support[i]] = h_keep[support[i]] * (1.0 - t_min) + t_min * x[i];
    if (t_min == 1.0) {
        for (fedmm_blas_int i = 0; i < m; ++i) h[support[i]] = x[i];
    }
    if (i_min >= 0) h[support[i_min]] = 0.0;
    refresh_gradient(K, G, ldg, c, h, g);
    /* not worse up to the rounding of f: near the solution the true decrease
     * (1/2 dx^T G dx) is below it, and the caller's gap test arbitrates */
    if (lasso_reduced_objective(K, c, h, g, lam) <= f_old + 1e-13 * fabs(f_old))
        return i_min >= 0 ? 2 : 1;
    memcpy(h, h_keep, (size_t)K * sizeof(double));
    refresh_gradient(K, G, ldg, c, h, g);
    return 0;
}

/* Remove position j from the active set (S, theta) of size m and from the
 * Cholesky factor of G_SS: delete row j of L, then restore the lower
 * triangle with Givens rotations of adjacent columns (O(m^2), no refactor). */
static void active_remove(fedmm_blas_int m, fedmm_blas_int j, int *S, double *theta, double *L,
                          fedmm_blas_int ld)
{
    for (fedmm_blas_int i = j; i + 1 < m; ++i) {
        S[i] = S[i + 1];
        theta[i] = theta[i + 1];
    }
    /* shift rows j+1..m-1 up by one in every column */
    for (fedmm_blas_int col = 0; col < m; ++col) {
        double *Lc = L + (size_t)col * ld;
        const fedmm_blas_int first = col > j ? col - 1 : j;
        for (fedmm_blas_int r = first; r + 1 < m; ++r) Lc[r] = Lc[r + 1];
    }
    /* rows k >= j now have one entry above the diagonal, at column k + 1 */
    for (fedmm_blas_int k = j; k + 1 < m; ++k) {
        double *Lk = L + (size_t)k * ld;
        double *Lk1 = L + (size_t)(k + 1) * ld;
        const double a = Lk[k], b = Lk1[k];
        const double r = hypot(a, b);
        const double cs = a / r, sn = b / r;
        Lk[k] = r;
        for (fedmm_blas_int i = k + 1; i + 1 < m; ++i) {
            const double u = Lk[i], v = Lk1[i];
            Lk[i] = cs * u + sn * v;
            Lk1[i] = -sn * u + cs * v;
        }
    }
}

/* Nearly full supports (the codes of the FedMM experiments use 14 or 15 of
 * K = 15 atoms) make every active-set column refactor an almost K x K
 * matrix.  When G itself is well conditioned, its inverse M = G^{-1}, formed
 * once per call, gives every Newton step on a support S whose complement R
 * has at most INVERSE_MAX_COMPLEMENT atoms without any factorization, by the
 * Schur complement of the inverse:
 *     (G_SS)^{-1} = M_SS - M_SR (M_RR)^{-1} M_RS,
 * at O(K |S| + |R|^3) per step.  G counts as well conditioned when every
 * pivot of its Cholesky factor keeps more than INVERSE_MIN_PIVOT of its
 * diagonal entry (each atom keeps that fraction of its squared norm outside
 * the span of the previous ones), so the solves lose at most a few digits;
 * the duality gap certifies the result as on every other path. */
#define INVERSE_MAX_COMPLEMENT 4
#define INVERSE_MIN_PIVOT 1e-4
#define INVERSE_MAX_K 64

typedef struct lasso_inverse {
    int state;   /* 0: not formed yet, 1: Mr holds G^{-1}, -1: unavailable */
    int dense;   /* the previous column's solution had a nearly full support */
    double *M;   /* K x K workspace inverse_form writes */
    const double *Mr; /* G^{-1} once state == 1: M, or the caller's precomputed one */
    const fedmm__gram_t *gram; /* NULL, or G^{-1} precomputed from the same G (fedmm__gram_form) */
    double *y;   /* K */
    double *Lr;  /* INVERSE_MAX_COMPLEMENT^2 */
    double *w;   /* INVERSE_MAX_COMPLEMENT */
    int *R;      /* K */
} lasso_inverse_t;

/* Form M = G^{-1} (both triangles) in inv->M, using L (K x K) as scratch. */
static void inverse_form(fedmm_blas_int K, const double *G, fedmm_blas_int ldg, double *L,
                         lasso_inverse_t *inv)
{
    inv->state = -1;
    if (K > INVERSE_MAX_K) return;
    for (fedmm_blas_int j = 0; j < K; ++j) { /* Cholesky with the conditioning test */
        const double *Gj = G + (size_t)j * ldg;
        double *Lj = L + (size_t)j * K;
        for (fedmm_blas_int i = j; i < K; ++i) Lj[i] = Gj[i];
        for (fedmm_blas_int k = 0; k < j; ++k) {
            const double *Lk = L + (size_t)k * K;
            const double ljk = Lk[j];
            for (fedmm_blas_int i = j; i < K; ++i) Lj[i] -= ljk * Lk[i];
        }
        if (!(Lj[j] > INVERSE_MIN_PIVOT * Gj[j])) return;
        const double d = sqrt(Lj[j]);
        Lj[j] = d;
        for (fedmm_blas_int i = j + 1; i < K; ++i) Lj[i] /= d;
    }
    /* M = L^{-T} L^{-1}: for every j, rows j..K-1 of column j (the rest
     * mirrored below), by chol_solve's operations on L^{-1} e_j minus those
     * on its leading zeros (exact no-ops: L_ii > 0) and the back substitution
     * of rows above j, which nothing reads.  The K solves run side by side,
     * X[i K + j] holding row i of solve j (j <= i): every entry sees the
     * operations of its own solve in their order (bit for bit), and the
     * inner loops run over j, independent and contiguous. */
    double *X = inv->M;
    memset(X, 0, (size_t)K * K * sizeof(double));
    for (fedmm_blas_int i = 0; i < K; ++i) X[(size_t)i * K + i] = 1.0;
    for (fedmm_blas_int c = 0; c < K; ++c) { /* forward: L y = e_j */
        const double *Lc = L + (size_t)c * K;
        double *Xc = X + (size_t)c * K;
        const double d = Lc[c];
        for (fedmm_blas_int j = 0; j <= c; ++j) Xc[j] /= d;
        for (fedmm_blas_int i = c + 1; i < K; ++i) {
            const double l = Lc[i];
            double *Xi = X + (size_t)i * K;
            for (fedmm_blas_int j = 0; j <= c; ++j) Xi[j] -= l * Xc[j];
        }
    }
    for (fedmm_blas_int c = K - 1; c >= 0; --c) { /* back: L^T x = y */
        const double *Lc = L + (size_t)c * K;
        double *Xc = X + (size_t)c * K;
        for (fedmm_blas_int i = c + 1; i < K; ++i) {
            const double l = Lc[i];
            const double *Xi = X + (size_t)i * K;
            for (fedmm_blas_int j = 0; j <= c; ++j) Xc[j] -= l * Xi[j];
        }
        const double d = Lc[c];
        for (fedmm_blas_int j = 0; j <= c; ++j) Xc[j] /= d;
    }
    /* X[i K + j] = M_ij (j <= i) is the upper triangle of the column-major
     * M; mirror it (exact symmetry) */
    for (fedmm_blas_int j = 0; j < K; ++j)
        for (fedmm_blas_int i = j + 1; i < K; ++i)
            inv->M[(size_t)j * K + i] = inv->M[(size_t)i * K + j];
    inv->Mr = inv->M;
    inv->state = 1;
}

/* The lazy formation point of G^{-1} (first column of a call that needs it):
 * inverse_form, or, when the caller precomputed it from the same G with
 * inverse_form (fedmm__gram_form), its result taken as it is, so that the
 * columns see the same state and the same M bit for bit at the same point.
 * inverse_form's scratch L is dead afterwards (every reader writes it
 * first), so skipping it changes nothing else. */
static void inverse_get(fedmm_blas_int K, const double *G, fedmm_blas_int ldg, double *L,
                        lasso_inverse_t *inv)
{
    if (inv->gram == NULL) {
        inverse_form(K, G, ldg, L, inv);
        return;
    }
    inv->state = inv->gram->M_state;
    inv->Mr = inv->gram->M_state == 1 ? inv->gram->M : NULL;
}

/* x[0..m) <- (G_SS)^{-1} x[0..m) for the support S[0..m) from M = G^{-1};
 * the complement R must have at most INVERSE_MAX_COMPLEMENT atoms.  Returns
 * 0 if M_RR is numerically singular (the caller factors G_SS instead). */
static int inverse_solve(fedmm_blas_int K, fedmm_blas_int m, const int *S, lasso_inverse_t *inv,
                         double *x)
{
    const double *M = inv->Mr;
    double *y = inv->y;
    memset(y, 0, (size_t)K * sizeof(double));
    list_axpy(K, M, K, S, m, x, 0, 1.0, y); /* y = M_{:,S} x_S */
    const fedmm_blas_int r = K - m;
    if (r == 0) {
        for (fedmm_blas_int j = 0; j < m; ++j) x[j] = y[S[j]];
        return 1;
    }
    /* R = complement of S, in increasing order (flags in inv->R, then compacted) */
    int *R = inv->R;
    for (fedmm_blas_int k = 0; k < K; ++k) R[k] = 1;
    for (fedmm_blas_int j = 0; j < m; ++j) R[S[j]] = 0;
    fedmm_blas_int n = 0;
    for (fedmm_blas_int k = 0; k < K; ++k)
        if (R[k]) R[n++] = (int)k;
    int Rs[INVERSE_MAX_COMPLEMENT];
    for (fedmm_blas_int a = 0; a < r; ++a) Rs[a] = R[a];
    double *w = inv->w;
    for (fedmm_blas_int a = 0; a < r; ++a) w[a] = y[Rs[a]];
    if (!chol_factor(r, Rs, M, K, inv->Lr, INVERSE_MAX_COMPLEMENT)) return 0;
    chol_solve(r, inv->Lr, INVERSE_MAX_COMPLEMENT, w); /* w = M_RR^{-1} y_R */
    for (fedmm_blas_int j = 0; j < m; ++j) {
        const double *Mrow = M + S[j]; /* M[S[j], R[a]] = Mrow[R[a] * K] */
        double v = y[S[j]];
        for (fedmm_blas_int a = 0; a < r; ++a) v -= Mrow[(size_t)Rs[a] * K] * w[a];
        x[j] = v;
    }
    return 1;
}

/* Active-set (feature-sign search, Lee, Battle, Raina, Ng 2007) solve of one
 * column from h (support = nonzeros of h, whose G_SS must be nonsingular,
 * else the start is h = 0).  Alternates (a) adding the zero coefficient with
 * the largest KKT violation |g_k| > lam, signed like g_k, and (b) Newton
 * steps x = G_SS^{-1}(c_S - lam sign_S) cut at the first sign change (the
 * objective decreases along the segment; the coefficient reaching zero
 * leaves S).  Finite termination in exact arithmetic.  g is kept exact.
 * Returns the steps used (>= 0) when the gap test passed, or -1 - steps when
 * it hands over to coordinate descent (singular G_SS, the iteration cap, or
 * a support about to exceed max_support). */
static int lasso_active_set(fedmm_blas_int K, const double *G, fedmm_blas_int ldg,
                            const double *c, double znorm2, double lam, int positive,
                            double tol, int max_iter, fedmm_blas_int max_support,
                            const double *inv_diag, double *h, double *g, double *x, double *L,
                            double *theta, int *S, lasso_inverse_t *inv, int first_step_ready,
                            lasso_poll_t *pl)
{
    fedmm_blas_int m = 0;
    for (fedmm_blas_int k = 0; k < K; ++k) { /* branch-free: position m < K is always free */
        const double hk = h[k];
        theta[m] = hk > 0.0 ? 1.0 : -1.0;
        S[m] = (int)k;
        m += hk != 0.0;
    }
    /* Nearly full support: Newton steps from G^{-1} (formed at the first
     * such column of the call), no factor of G_SS; have_L says whether L
     * holds the factor of the current G_SS (then it is kept up to date). */
    if (inv->state == 0 && K - m <= INVERSE_MAX_COMPLEMENT) inverse_get(K, G, ldg, L, inv);
    const int use_inverse = inv->state == 1;
    int have_L = 0;
    if (m > 0 && !(use_inverse && K - m <= INVERSE_MAX_COMPLEMENT)) {
        if (chol_factor(m, S, G, ldg, L, K)) {
            have_L = 1;
        } else {
            memset(h, 0, (size_t)K * sizeof(double));
            m = 0;
        }
    }
    if (m == 0) have_L = 1; /* the empty factor */
    /* g = c - G h is needed before the first Newton step only by the line
     * search over several breakpoints (and, with m = 0, by the KKT test):
     * a warm column that converges in one step skips one K x m product */
    int g_valid = m == 0;
    if (g_valid) refresh_gradient_list(K, G, ldg, c, h, S, m, g);
    int need_step = m > 0;
    for (int it = 0; it < max_iter; ++it) {
        if (lasso_poll(pl, pl->step)) return -1 - it; /* the caller sees pl->stopped */
        if (!need_step) {
            /* h is exact on S; a zero coefficient with |g_k| > lam violates KKT */
            fedmm_blas_int best = -1;
            double best_v = lam;
            for (fedmm_blas_int k = 0; k < K; ++k) {
                /* branch-free eligibility (zero coefficient, nonzero atom) */
                const double gk = positive ? g[k] : fabs(g[k]);
                const double v = (h[k] == 0.0 && inv_diag[k] > 0.0) ? gk : 0.0;
                if (v > best_v) { best_v = v; best = k; }
            }
            /* no violator: optimal up to rounding; the gap is the certificate
             * (above tol only through rounding: hand over) */
            if (best < 0) return lasso_gap(K, c, h, g, znorm2, lam, positive) <= tol ? it : -1 - it;
            /* dense support: coordinate descent is cheaper, unless G^{-1} makes the steps cheap */
            if (m >= max_support && !use_inverse) return -1 - it;
            S[m] = (int)best;
            theta[m] = g[best] > 0.0 ? 1.0 : -1.0;
            if (!have_L || chol_append(m, S, G, ldg, L, K)) {
                ++m;
            } else {
                /* d_best is (numerically) in the span of D_S (e.g. |S| = p < K):
                 * move along the null direction d = (theta_best, -theta_best w),
                 * w = G_SS^{-1} G_{S,best}.  D d = 0, so only lam ||h||_1 changes,
                 * at the rate lam (1 - theta_best theta_S^T w) < 0 at an exact
                 * point of S; stop when a coefficient of S reaches 0 and swap it
                 * for best (a simplex pivot). */
                const double tb = theta[m];
                for (fedmm_blas_int j = 0; j < m; ++j) x[j] = G[(size_t)best * ldg + S[j]];
                chol_solve(m, L, K, x);
                double t_min = HUGE_VAL;
                fedmm_blas_int j_min = -1;
                for (fedmm_blas_int j = 0; j < m; ++j) {
                    const double dj = -tb * x[j];
                    if (theta[j] * dj >= 0.0) continue;
                    const double t = fabs(h[S[j]]) / fabs(dj);
                    if (t < t_min) { t_min = t; j_min = j; }
                }
                if (j_min < 0) return -1 - it;
                for (fedmm_blas_int j = 0; j < m; ++j) h[S[j]] -= t_min * tb * x[j];
                h[S[j_min]] = 0.0;
                h[best] = tb * t_min;
                active_remove(m, j_min, S, theta, L, K);
                S[m - 1] = (int)best;
                theta[m - 1] = tb;
                if (!chol_append(m - 1, S, G, ldg, L, K)) return -1 - it;
                refresh_gradient_list(K, G, ldg, c, h, S, m, g);
                need_step = 1;
                continue;
            }
        }
        if (!(it == 0 && first_step_ready)) { /* else x holds it: lasso_full_support_step's, same operations */
            for (fedmm_blas_int j = 0; j < m; ++j) x[j] = c[S[j]] - lam * theta[j];
            if (!(use_inverse && K - m <= INVERSE_MAX_COMPLEMENT && inverse_solve(K, m, S, inv, x))) {
                if (!have_L) {
                    lasso_poll(pl, pl->solve); /* charged only: the loop head stops */
                    if (!chol_factor(m, S, G, ldg, L, K)) return -1 - it;
                    have_L = 1;
                }
                chol_solve(m, L, K, x);
            }
        }
        /* Where x changes the sign of coefficients of S, move to the lowest
         * of the breakpoints h + t_j (x - h) at which one of them reaches 0
         * (f is convex along the segment; the coefficients crossed before
         * t_j change sign, the one at t_j leaves S): the line search of Lee
         * et al. (2007) without its end point, whose new signs would need
         * another Newton step.  The first breakpoint alone (the positive
         * LASSO, where f is infinite past it) drops one coefficient per step:
         * a dozen steps per cold column on the ill-conditioned G (cond ~1e5)
         * of a dictionary just fitted to least-squares codes, 3-4 with the
         * search.  With d = x - h on S, G_SS d = g_S - lam theta (x solves
         * the Newton system), so
         *     f(h + t d) - f(h) = -t d^T g_S + t^2/2 d^T (g_S - lam theta)
         *                         + lam (sum_S |h + t d| - sum_S |h|). */
        fedmm_blas_int n_crossed = 0;
        double t_best = 1.0;
        fedmm_blas_int j_best = -1;
        for (fedmm_blas_int j = 0; j < m; ++j) { /* the first breakpoint */
            if (theta[j] * x[j] > 0.0) continue;
            ++n_crossed;
            const double hj = h[S[j]];
            const double t = hj == 0.0 ? 0.0 : hj / (hj - x[j]);
            if (t < t_best || j_best < 0) { t_best = t; j_best = j; }
        }
        if (n_crossed > 1 && !positive) { /* the lowest breakpoint */
            if (!g_valid) refresh_gradient_list(K, G, ldg, c, h, S, m, g);
            double q1 = 0.0, q2 = 0.0, l1_h = 0.0;
            for (fedmm_blas_int j = 0; j < m; ++j) {
                const double hj = h[S[j]], dj = x[j] - hj, gj = g[S[j]];
                q1 -= dj * gj;
                q2 += dj * (gj - lam * theta[j]);
                l1_h += fabs(hj);
            }
            double f_best = HUGE_VAL;
            for (fedmm_blas_int i = 0; i < m; ++i) {
                if (theta[i] * x[i] > 0.0) continue;
                const double hi = h[S[i]];
                const double t = hi == 0.0 ? 0.0 : hi / (hi - x[i]);
                double l1 = 0.0;
                for (fedmm_blas_int j = 0; j < m; ++j)
                    if (j != i) l1 += fabs(t == 1.0 ? x[j] : h[S[j]] + t * (x[j] - h[S[j]]));
                const double f = t * q1 + 0.5 * t * t * q2 + lam * (l1 - l1_h);
                if (f < f_best || (f == f_best && t < t_best)) { f_best = f; t_best = t; j_best = i; }
            }
        }
        for (fedmm_blas_int j = 0; j < m; ++j) {
            double *hj = h + S[j];
            *hj = t_best == 1.0 ? x[j] : *hj + t_best * (x[j] - *hj);
        }
        if (j_best >= 0) h[S[j_best]] = 0.0;
        /* coefficients past their breakpoint change sign; those at 0 leave S */
        int changed = j_best >= 0;
        for (fedmm_blas_int j = m - 1; j >= 0; --j) {
            const double hj = h[S[j]];
            if (hj != 0.0) {
                if ((hj > 0.0) != (theta[j] > 0.0)) {
                    theta[j] = -theta[j];
                    changed = 1;
                }
                continue;
            }
            changed = 1;
            if (have_L) {
                active_remove(m, j, S, theta, L, K);
            } else {
                for (fedmm_blas_int i = j; i + 1 < m; ++i) {
                    S[i] = S[i + 1];
                    theta[i] = theta[i + 1];
                }
            }
            --m;
        }
        need_step = changed && m > 0;
        /* g = c - G h is read by the KKT test, which runs only when no
         * further Newton step is due, and by the line search over several
         * breakpoints, which refreshes it itself from the same (h, S): a
         * step that leads to another step leaves it stale (one K x m
         * product less per cut, same numbers) */
        g_valid = !need_step;
        if (g_valid) refresh_gradient_list(K, G, ldg, c, h, S, m, g);
    }
    return -1 - max_iter;
}

/* lasso_active_set's first two iterations from a start h whose support is
 * all K atoms, when G^{-1} is at hand (inv->state == 1) and the Newton step
 * changes no sign: the step x = G^{-1}(c - lam sign(h)) (inverse_solve's
 * product with an empty complement), g = c - G x, then the KKT test (no zero
 * coefficient, so no violator) and the gap.  The same operations on the same
 * values as the general loop, without its bookkeeping, which is most of a
 * column's time when the codes are dense and the step keeps every sign
 * (nearly every column of a round at a well-conditioned dictionary).
 * Returns what lasso_active_set returns (1, or -2 when the gap hands over to
 * coordinate descent, or -1 - it when the poll stops the run), or
 * FULL_STEP_NONE with h untouched and the step in x when the step changes
 * a sign (x_j = 0 included): the general loop then starts from the same h
 * and takes that x as its first step. */
#define FULL_STEP_NONE (-0x40000000)

static int lasso_full_support_step(fedmm_blas_int K, const double *G, fedmm_blas_int ldg,
                                   const double *c, double znorm2, double lam, int positive,
                                   double tol, const lasso_inverse_t *inv, double *h, double *g,
                                   double *x, double *theta, lasso_poll_t *pl)
{
    for (fedmm_blas_int k = 0; k < K; ++k) {
        theta[k] = h[k] > 0.0 ? 1.0 : -1.0;
        g[k] = c[k] - lam * theta[k]; /* the Newton right-hand side, in g until x is formed */
    }
    memset(x, 0, (size_t)K * sizeof(double));
    list_axpy(K, inv->Mr, K, NULL, K, g, 0, 1.0, x);
    int crossed = 0;
    for (fedmm_blas_int k = 0; k < K; ++k) crossed |= !(theta[k] * x[k] > 0.0);
    if (crossed) return FULL_STEP_NONE; /* x is the general loop's first step (first_step_ready) */
    if (lasso_poll(pl, pl->step)) return -1; /* the charge of iteration 0, after the fact */
    memcpy(h, x, (size_t)K * sizeof(double));
    memcpy(g, c, (size_t)K * sizeof(double));
    list_axpy(K, G, ldg, NULL, K, h, 1, -1.0, g);
    if (lasso_poll(pl, pl->step)) return -2;
    return lasso_gap(K, c, h, g, znorm2, lam, positive) <= tol ? 1 : -2;
}

/* a = G_{:,S} x over the index list S[0..m), eight columns per pass over a
 * (one load and store of a per eight axpys). */
static void gram_columns_times(fedmm_blas_int K, const double *G, fedmm_blas_int ldg,
                               const int *S, fedmm_blas_int m, const double *x, double *a)
{
    memset(a, 0, (size_t)K * sizeof(double));
    fedmm_blas_int j = 0;
    for (; j + 8 <= m; j += 8) {
        const double *G0 = G + (size_t)S[j] * ldg, *G1 = G + (size_t)S[j + 1] * ldg;
        const double *G2 = G + (size_t)S[j + 2] * ldg, *G3 = G + (size_t)S[j + 3] * ldg;
        const double *G4 = G + (size_t)S[j + 4] * ldg, *G5 = G + (size_t)S[j + 5] * ldg;
        const double *G6 = G + (size_t)S[j + 6] * ldg, *G7 = G + (size_t)S[j + 7] * ldg;
        const double x0 = x[j], x1 = x[j + 1], x2 = x[j + 2], x3 = x[j + 3];
        const double x4 = x[j + 4], x5 = x[j + 5], x6 = x[j + 6], x7 = x[j + 7];
        for (fedmm_blas_int i = 0; i < K; ++i)
            a[i] += ((x0 * G0[i] + x1 * G1[i]) + (x2 * G2[i] + x3 * G3[i])) +
                    ((x4 * G4[i] + x5 * G5[i]) + (x6 * G6[i] + x7 * G7[i]));
    }
    for (; j + 4 <= m; j += 4) {
        const double *G0 = G + (size_t)S[j] * ldg, *G1 = G + (size_t)S[j + 1] * ldg;
        const double *G2 = G + (size_t)S[j + 2] * ldg, *G3 = G + (size_t)S[j + 3] * ldg;
        const double x0 = x[j], x1 = x[j + 1], x2 = x[j + 2], x3 = x[j + 3];
        for (fedmm_blas_int i = 0; i < K; ++i)
            a[i] += (x0 * G0[i] + x1 * G1[i]) + (x2 * G2[i] + x3 * G3[i]);
    }
    for (; j < m; ++j) {
        const double *Gj = G + (size_t)S[j] * ldg;
        const double xj = x[j];
        for (fedmm_blas_int i = 0; i < K; ++i) a[i] += xj * Gj[i];
    }
}

/* The homotopy keeps the Cholesky factor G_AA = U^T U as the upper
 * triangular U (column-major, leading dimension ld; U = L^T), so that every
 * loop runs over a contiguous column: U^T y = b by dot products down the
 * columns, U x = y by axpys on them, and a new atom appends one column. */

/* y[0..m) <- U^{-T} y[0..m) (forward substitution). */
static void hom_forward(fedmm_blas_int m, const double *U, fedmm_blas_int ld, double *y)
{
    for (fedmm_blas_int j = 0; j < m; ++j) {
        const double *Uj = U + (size_t)j * ld;
        y[j] = (y[j] - fedmm__dot4(j, Uj, y)) / Uj[j];
    }
}

/* x[0..m) <- U^{-1} x[0..m) (back substitution, column axpys). */
static void hom_back(fedmm_blas_int m, const double *U, fedmm_blas_int ld, double *x)
{
    for (fedmm_blas_int j = m - 1; j >= 0; --j) {
        const double *Uj = U + (size_t)j * ld;
        const double xj = x[j] / Uj[j];
        x[j] = xj;
        for (fedmm_blas_int i = 0; i < j; ++i) x[i] -= xj * Uj[i];
    }
}

/* Append the atom S[m] to the factor of G_SS (m x m): column m of U solves
 * U^T u = G_{S,new}, U_mm = sqrt(G_new,new - u^T u).  Returns 0 (U
 * unchanged in its first m columns) when the pivot is not above 1e-13
 * G_new,new: the atom is numerically in the span of the others. */
static int hom_append(fedmm_blas_int m, const int *S, const double *G, fedmm_blas_int ldg,
                      double *U, fedmm_blas_int ld)
{
    const double *Gn = G + (size_t)S[m] * ldg;
    double *Um = U + (size_t)m * ld;
    for (fedmm_blas_int j = 0; j < m; ++j) Um[j] = Gn[S[j]];
    hom_forward(m, U, ld, Um);
    const double d = Gn[S[m]] - fedmm__dot4(m, Um, Um);
    if (!(d > 1e-13 * Gn[S[m]])) return 0;
    Um[m] = sqrt(d);
    return 1;
}

/* Remove position j from (S, theta) of size m and from U: delete column j,
 * then return the Hessenberg block to upper triangular form with Givens
 * rotations of adjacent rows (O(m^2), no refactorization). */
static void hom_remove(fedmm_blas_int m, fedmm_blas_int j, int *S, double *theta, double *U,
                       fedmm_blas_int ld)
{
    for (fedmm_blas_int i = j; i + 1 < m; ++i) {
        S[i] = S[i + 1];
        theta[i] = theta[i + 1];
        memcpy(U + (size_t)i * ld, U + (size_t)(i + 1) * ld, (size_t)(i + 2) * sizeof(double));
    }
    for (fedmm_blas_int k = j; k + 1 < m; ++k) { /* zero U[k+1, k] against U[k, k] */
        double *Uk = U + (size_t)k * ld;
        const double a = Uk[k], b = Uk[k + 1];
        const double r = hypot(a, b);
        const double cs = a / r, sn = b / r;
        Uk[k] = r;
        Uk[k + 1] = 0.0;
        for (fedmm_blas_int col = k + 1; col + 1 < m; ++col) {
            double *Uc = U + (size_t)col * ld;
            const double u = Uc[k], v = Uc[k + 1];
            Uc[k] = cs * u + sn * v;
            Uc[k + 1] = -sn * u + cs * v;
        }
    }
}

/* Homotopy (LARS-lasso: Osborne, Presnell, Turlach 2000; Efron et al. 2004)
 * path of one column from h = 0 at lam_0 = ||c||_inf (positive: max c) down
 * to lam.  On the path h_A(t) = G_AA^{-1}(c_A - t theta_A) on the active set
 * A with signs theta, so as t decreases by gamma
 *     h_A += gamma u,  u = G_AA^{-1} theta_A,    g -= gamma a,  a = G_{:,A} u
 * (g = c - G h; a_A = theta_A), until the next event: an inactive atom's
 * |g_k| reaches t (it joins, signed like g_k: gamma = (t - g_k) / (1 - a_k)
 * or (t + g_k) / (1 + a_k)), an active coefficient reaches 0 (it leaves: the
 * lasso modification), or t reaches lam.  The factor G_AA = U^T U gains a
 * column on a join (hom_append) and is downdated by Givens rotations on a
 * leave (hom_remove); y = U^{-T} theta_A only gains an entry on a join, so a
 * step costs K |A| + |A|^2 / 2 + O(K).  At t = lam the support's system is
 * solved once more from the factor (no drift from the summed steps), g
 * refreshed, and the KKT conditions of the inactive atoms and the duality
 * gap checked.  Returns the steps used when they pass, or -1 - steps to hand
 * over to the active set from h (a join the factor cannot take, e.g. a
 * duplicated atom, the cap, or a failed check); g = c - G h then.
 * y, a: K doubles, flags: K ints (scratch). */
static int lasso_homotopy(fedmm_blas_int K, const double *G, fedmm_blas_int ldg,
                          const double *c, double znorm2, double lam, int positive,
                          double tol, int max_iter, const double *inv_diag, double *h,
                          double *g, double *x, double *y, double *a, double *U, double *theta,
                          int *S, int *flags, lasso_poll_t *pl)
{
    memset(h, 0, (size_t)K * sizeof(double));
    memcpy(g, c, (size_t)K * sizeof(double));
    fedmm_blas_int best = -1;
    double t = 0.0;
    for (fedmm_blas_int k = 0; k < K; ++k) {
        flags[k] = 0;
        const double gk = positive ? g[k] : fabs(g[k]);
        if (inv_diag[k] > 0.0 && gk > t) { t = gk; best = k; }
    }
    if (!(t > lam)) return 0; /* lam >= lam_0: h = 0 is the solution */
    S[0] = (int)best;
    theta[0] = g[best] > 0.0 ? 1.0 : -1.0;
    U[0] = sqrt(G[(size_t)best * ldg + best]);
    y[0] = theta[0] / U[0];
    flags[best] = 1;
    fedmm_blas_int m = 1;
    fedmm_blas_int just_left = -1; /* may not rejoin at the next step (rounding) */
    int it = 0;
    for (; it < max_iter; ++it) {
        if (lasso_poll(pl, (int64_t)K * m + (int64_t)m * m + 4 * (int64_t)K))
            return -1 - it; /* the caller sees pl->stopped */
        /* an iteration stands for at most about K^2 + 4K multiply-adds (the
         * bound of max_iter): a step on a support above ~0.6 K counts twice */
        if ((int64_t)m * (K + m) > (int64_t)K * K + 4 * (int64_t)K && ++it >= max_iter) break;
        memcpy(x, y, (size_t)m * sizeof(double));
        hom_back(m, U, K, x); /* u = G_AA^{-1} theta_A */
        gram_columns_times(K, G, ldg, S, m, x, a);
        double gamma = t - lam;
        int event = 0; /* 0: reach lam, 1: join `who` with sign `sgn`, 2: leave position `who` */
        fedmm_blas_int who = -1;
        double sgn = 0.0;
        for (fedmm_blas_int j = 0; j < m; ++j) {
            if (theta[j] * x[j] >= 0.0) continue;
            const double step = -h[S[j]] / x[j];
            if (step < gamma) { gamma = step; event = 2; who = j; }
        }
        for (fedmm_blas_int k = 0; k < K; ++k) {
            if (flags[k] || k == just_left || !(inv_diag[k] > 0.0)) continue;
            /* step = num / den < gamma tested as num < gamma den (den > 0):
             * a division only for a new minimum */
            const double up = 1.0 - a[k];
            if (up > 0.0) {
                const double num = t - g[k];
                if (num < gamma * up) {
                    gamma = num > 0.0 ? num / up : 0.0;
                    event = 1; who = k; sgn = 1.0;
                }
            }
            if (!positive) {
                const double down = 1.0 + a[k];
                if (down > 0.0) {
                    const double num = t + g[k];
                    if (num < gamma * down) {
                        gamma = num > 0.0 ? num / down : 0.0;
                        event = 1; who = k; sgn = -1.0;
                    }
                }
            }
        }
        for (fedmm_blas_int j = 0; j < m; ++j) h[S[j]] += gamma * x[j];
        for (fedmm_blas_int k = 0; k < K; ++k) g[k] -= gamma * a[k];
        t -= gamma;
        just_left = -1;
        if (event == 0) break;
        if (event == 2) {
            const fedmm_blas_int k = S[who];
            h[k] = 0.0;
            flags[k] = 0;
            hom_remove(m, who, S, theta, U, K);
            --m;
            just_left = k;
            if (m == 0) { /* only through rounding: the active set restarts from 0 */
                memcpy(g, c, (size_t)K * sizeof(double));
                return -1 - it;
            }
            memcpy(y, theta, (size_t)m * sizeof(double));
            hom_forward(m, U, K, y);
        } else {
            S[m] = (int)who;
            theta[m] = sgn;
            if (!hom_append(m, S, G, ldg, U, K)) { /* numerically dependent atom */
                refresh_gradient_list(K, G, ldg, c, h, S, m, g);
                return -1 - it;
            }
            const double *Um = U + (size_t)m * K;
            y[m] = (sgn - fedmm__dot4(m, Um, y)) / Um[m];
            flags[who] = 1;
            ++m;
        }
    }
    if (it >= max_iter) {
        refresh_gradient_list(K, G, ldg, c, h, S, m, g);
        return -1 - max_iter;
    }
    /* t = lam: the exact solution of the support's system, signs unchanged */
    for (fedmm_blas_int j = 0; j < m; ++j) x[j] = c[S[j]] - lam * theta[j];
    hom_forward(m, U, K, x);
    hom_back(m, U, K, x);
    int signs_kept = 1;
    for (fedmm_blas_int j = 0; j < m; ++j)
        if (!(theta[j] * x[j] > 0.0)) signs_kept = 0;
    if (signs_kept)
        for (fedmm_blas_int j = 0; j < m; ++j) h[S[j]] = x[j];
    refresh_gradient_list(K, G, ldg, c, h, S, m, g);
    if (!signs_kept) return -1 - it;
    for (fedmm_blas_int k = 0; k < K; ++k) { /* the active set's KKT test */
        const double gk = positive ? g[k] : fabs(g[k]);
        if (!flags[k] && inv_diag[k] > 0.0 && gk > lam) return -1 - it;
    }
    return lasso_gap(K, c, h, g, znorm2, lam, positive) <= tol ? it + 1 : -1 - it;
}

/* Coordinate descent for one column from h (g = c - G h on entry).
 * Returns the sweeps used, or -1 - max_iter when the cap was hit.  Once the
 * gap test passes, one Newton step on the support is tried and kept when it
 * lowers the gap: it usually lands on the exact solution, so the codes
 * satisfy the KKT conditions to rounding error.  While sweeping, a Newton
 * step is also tried each time the support and signs survive a sweep. */
static int lasso_cd(fedmm_blas_int K, const double *G, fedmm_blas_int ldg, const double *c,
                    double znorm2, double lam, int positive, double tol, int max_iter,
                    const double *inv_diag, double *h, double *g, double *x, double *h_keep,
                    double *h_keep2, double *L, int *support, lasso_poll_t *pl)
{
    int newton_tried = 0; /* for the current support */
    int at_newton_point = 0; /* h is the full Newton point of its support */
    for (int it = 0; it < max_iter; ++it) {
        if (lasso_poll(pl, pl->step)) return -1 - max_iter; /* the caller sees pl->stopped */
        if (lasso_gap(K, c, h, g, znorm2, lam, positive) <= tol) {
            refresh_gradient(K, G, ldg, c, h, g); /* no drift in the certificate */
            const double gap = lasso_gap(K, c, h, g, znorm2, lam, positive);
            if (gap <= tol) {
                if (gap > 0.0 && !at_newton_point) {
                    /* polish: keep the Newton point only if it certifies better */
                    memcpy(h_keep2, h, (size_t)K * sizeof(double));
                    if (support_newton(K, G, ldg, c, lam, positive, h, g, support, L, x, h_keep) &&
                        !(lasso_gap(K, c, h, g, znorm2, lam, positive) <= gap)) {
                        memcpy(h, h_keep2, (size_t)K * sizeof(double));
                        refresh_gradient(K, G, ldg, c, h, g);
                    }
                }
                return it;
            }
        }
        int support_changed = 0;
        for (fedmm_blas_int k = 0; k < K; ++k) {
            const double hk = h[k];
            const double gk = g[k];
            /* most coordinates are zero and stay zero: one comparison */
            if (hk == 0.0 && (positive ? gk : fabs(gk)) <= lam) continue;
            const double inv = inv_diag[k];
            if (inv == 0.0) continue; /* zero atom */
            const double *Gk = G + (size_t)k * ldg;
            const double hn = soft_threshold(gk + Gk[k] * hk, lam, positive) * inv;
            if (hn == hk) continue;
            at_newton_point = 0;
            const double delta = hn - hk;
            h[k] = hn;
            for (fedmm_blas_int i = 0; i < K; ++i) g[i] -= delta * Gk[i];
            if ((hk > 0.0) != (hn > 0.0) || (hk < 0.0) != (hn < 0.0)) support_changed = 1;
        }
        if (support_changed) {
            newton_tried = 0;
        } else if (!newton_tried) {
            lasso_poll(pl, pl->solve); /* charged only: the loop head stops */
            const int step = support_newton(K, G, ldg, c, lam, positive, h, g, support, L, x, h_keep);
            newton_tried = step != 2; /* a cut step changed the support: retry later */
            at_newton_point = step == 1;
        }
    }
    refresh_gradient(K, G, ldg, c, h, g);
    if (lasso_gap(K, c, h, g, znorm2, lam, positive) <= tol) return max_iter;
    return -1 - max_iter;
}

/* One column.  work: 4K + K*K doubles, support: K ints.  Returns the
 * iterations used (active-set steps + sweeps), or -1 - max_iter when the
 * cap was hit. */
static int lasso_column(fedmm_blas_int K, const double *G, fedmm_blas_int ldg,
                        const double *c, double znorm2, double lam, int positive,
                        double tol, int max_iter, int warm, int method,
                        const double *inv_diag, double *h, double *work, int *support,
                        int *flags, double *hom_y, lasso_inverse_t *inv, lasso_poll_t *pl)
{
    double *g = work;
    double *x = work + K;
    double *h_keep = work + 2 * (size_t)K;
    double *theta = work + 3 * (size_t)K;
    double *L = work + 4 * (size_t)K;

    if (znorm2 == 0.0) { /* z = 0: h = 0 is the solution */
        memset(h, 0, (size_t)K * sizeof(double));
        return 0;
    }
    int zero_start = !warm;
    if (warm) {
        zero_start = 1;
        for (fedmm_blas_int k = 0; k < K; ++k) {
            if (!(G[(size_t)k * ldg + k] > 0.0)) h[k] = 0.0; /* zero atom */
            if (positive && h[k] < 0.0) h[k] = 0.0;
            if (h[k] != 0.0) zero_start = 0;
        }
    } else {
        memset(h, 0, (size_t)K * sizeof(double));
    }
    if (zero_start) { /* cold, or a warm start from nothing (a sample seen for the first time) */
        if (method != FEDMM_LASSO_CD && method != FEDMM_LASSO_HOMOTOPY && inv->dense) {
            /* cold start among dense solutions: start the active set from the
             * least-squares point G^{-1} c (any point is a valid start; from
             * it the sign-change cuts drop the few atoms left out in a few
             * steps, instead of adding nearly K atoms one at a time from 0) */
            if (inv->state == 0) inverse_get(K, G, ldg, work + 4 * (size_t)K, inv);
            if (inv->state == 1) {
                list_axpy(K, inv->Mr, K, NULL, K, c, 0, 1.0, h); /* h = 0 + M c */
                for (fedmm_blas_int k = 0; k < K; ++k)
                    if (inv_diag[k] == 0.0 || (positive && h[k] < 0.0)) h[k] = 0.0;
            }
        }
    }
    int used = 0;
    if (method == FEDMM_LASSO_HOMOTOPY) {
        /* the path starts at h = 0; a nonzero warm start goes to the active
         * set, which uses it */
        if (zero_start) {
            const int it = lasso_homotopy(K, G, ldg, c, znorm2, lam, positive, tol, max_iter,
                                          inv_diag, h, g, x, hom_y, h_keep, L, theta, support,
                                          flags, pl);
            if (it >= 0) return it;
            if (pl->stopped) return -1 - max_iter;
            used = -1 - it; /* hand over to the active set from where it stopped */
            if (used >= max_iter) used = max_iter - 1;
        }
        method = FEDMM_LASSO_ACTIVE_SET;
    }
    if (method != FEDMM_LASSO_CD) {
        /* the hybrid hands dense supports to coordinate descent: an active-set
         * step costs O(K m + m^2), a sweep O(K m), and dense supports need
         * many steps but few sweeps */
        const fedmm_blas_int max_support =
            method == LASSO_HYBRID ? lasso_hybrid_max_support(K) : K;
        int it = FULL_STEP_NONE, first_step_ready = 0;
        if (max_iter - used >= 2) {
            int full = 1;
            for (fedmm_blas_int k = 0; k < K; ++k) full &= h[k] != 0.0;
            /* G^{-1} formed where lasso_active_set would form it (K - m = 0) */
            if (full && inv->state == 0) inverse_get(K, G, ldg, L, inv);
            if (full && inv->state == 1) {
                it = lasso_full_support_step(K, G, ldg, c, znorm2, lam, positive, tol, inv, h, g, x,
                                             theta, pl);
                first_step_ready = it == FULL_STEP_NONE;
            }
        }
        if (it == FULL_STEP_NONE)
            it = lasso_active_set(K, G, ldg, c, znorm2, lam, positive, tol, max_iter - used,
                                  max_support, inv_diag, h, g, x, L, theta, support, inv,
                                  first_step_ready, pl);
        if (it >= 0) return used + it;
        if (pl->stopped) return -1 - max_iter;
        used += -1 - it; /* hand over to coordinate descent from where it stopped */
        if (used >= max_iter) used = max_iter - 1;
    }
    refresh_gradient(K, G, ldg, c, h, g);
    const int it = lasso_cd(K, G, ldg, c, znorm2, lam, positive, tol, max_iter - used, inv_diag,
                            h, g, x, h_keep, theta, L, support, pl);
    return it >= 0 ? used + it : -1 - max_iter;
}

/* Measured choice (benchmarks/bench_sparse.py): on sparse solutions the
 * active set wins (3 steps for 3 atoms: 4x coordinate descent at p=64,
 * K=15), on dense ones coordinate descent does (1.5-3x); the hybrid takes
 * both.  When 2K > p (nearly square or overcomplete D) coordinate descent
 * crawls and the active set runs uncapped.  When K > p (overcomplete: the
 * supports grow towards p and the active set spends about two steps per atom
 * plus its sign-change cuts) the homotopy path wins: 6x at p=64, K=256
 * (support 64), 1.3x at p=64, K=100 (support 34), while it loses 15-30% to
 * the active set on small supports of undercomplete D.  p = 0 (unknown,
 * Gram-only call) gives the hybrid. */
static int lasso_auto_method(fedmm_blas_int p, fedmm_blas_int K)
{
    if (p > 0 && K > p) return FEDMM_LASSO_HOMOTOPY;
    return p > 0 && 2 * K > p ? FEDMM_LASSO_ACTIVE_SET : LASSO_HYBRID;
}

size_t fedmm_lasso_gram_work(fedmm_blas_int K)
{
    /* per column: g, x, h_keep, theta, L (K x K), inv_diag, support (K ints);
     * G^{-1} path: M (K x K), y, Lr, w, R (K ints); homotopy: flags (K ints), y (K) */
    const size_t ints = ((size_t)K + 1) / 2;
    return 5 * (size_t)K + (size_t)K * (size_t)K + ints + (size_t)K * (size_t)K + (size_t)K +
           INVERSE_MAX_COMPLEMENT * INVERSE_MAX_COMPLEMENT + INVERSE_MAX_COMPLEMENT + ints +
           ints + (size_t)K;
}

/* The solve loop shared by fedmm_lasso_gram and fedmm_dictionary_statistics;
 * arguments already checked, method already resolved (never AUTO).  gram:
 * NULL, or G^{-1} precomputed from this G (fedmm__gram_form; gram->G == G).
 * Returns FEDMM_OK, or FEDMM_EINTR when pl->intr asked to stop. */
static int lasso_gram_run(fedmm_blas_int K, fedmm_blas_int b, const double *G,
                           fedmm_blas_int ldg, const double *C, fedmm_blas_int ldc,
                           const double *znorm2, double lam, int positive, double tol,
                           int max_iter, int warm_start, int method, double *H,
                           fedmm_blas_int ldh, int *n_iter, int64_t *n_unconverged, double *work,
                           const fedmm__gram_t *gram, lasso_poll_t *pl)
{
    if (tol < LASSO_TOL_FLOOR) tol = LASSO_TOL_FLOOR;
    /* the int support list lives after the doubles of the work area */
    double *inv_diag = work + 4 * (size_t)K + (size_t)K * (size_t)K;
    int *support = (int *)(inv_diag + K);
    lasso_inverse_t inv;
    inv.state = method == FEDMM_LASSO_CD ? -1 : 0; /* formed on demand */
    inv.dense = 0;
    inv.gram = gram;
    inv.Mr = NULL;
    inv.M = inv_diag + K + ((size_t)K + 1) / 2;
    inv.y = inv.M + (size_t)K * K;
    inv.Lr = inv.y + K;
    inv.w = inv.Lr + INVERSE_MAX_COMPLEMENT * INVERSE_MAX_COMPLEMENT;
    inv.R = (int *)(inv.w + INVERSE_MAX_COMPLEMENT);
    int *flags = (int *)(inv.w + INVERSE_MAX_COMPLEMENT + ((size_t)K + 1) / 2);
    double *hom_y = inv.w + INVERSE_MAX_COMPLEMENT + 2 * (((size_t)K + 1) / 2);
    for (fedmm_blas_int k = 0; k < K; ++k) {
        const double gkk = G[(size_t)k * ldg + k];
        inv_diag[k] = gkk > 0.0 ? 1.0 / gkk : 0.0;
    }
    int64_t bad = 0;
    for (fedmm_blas_int j = 0; j < b; ++j) {
        const double zn = znorm2 ? znorm2[j] : -1.0;
        if (lasso_poll(pl, pl->step)) return FEDMM_EINTR; /* a column costs at least a step */
        const int it = lasso_column(K, G, ldg, C + (size_t)j * ldc, zn, lam, positive, tol,
                                    max_iter, warm_start, method, inv_diag, H + (size_t)j * ldh,
                                    work, support, flags, hom_y, &inv, pl);
        if (pl->stopped) return FEDMM_EINTR;
        fedmm_blas_int nnz = 0;
        for (fedmm_blas_int k = 0; k < K; ++k) nnz += H[(size_t)j * ldh + k] != 0.0;
        inv.dense = K - nnz <= INVERSE_MAX_COMPLEMENT;
        if (it < 0) ++bad;
        if (n_iter) n_iter[j] = it < 0 ? -1 - it : it;
    }
    if (n_unconverged) *n_unconverged = bad;
    return FEDMM_OK;
}

/* FEDMM_OK when the options are in range (fedmm_lasso_options_t). */
static int check_options(const fedmm_lasso_options_t *opts)
{
    if (opts == NULL || !(opts->lam > 0.0) || !(opts->tol >= 0.0) || opts->max_iter < 0 ||
        opts->method < 0 || opts->method > 3)
        return FEDMM_EINVAL;
    return FEDMM_OK;
}

/* fedmm_lasso_gram_ex after its view checks: the entry checks of the Gram-form solve, then the loop. */
static int lasso_gram_entry(fedmm_blas_int K, fedmm_blas_int b, const double *G, fedmm_blas_int ldg,
                            const double *C, fedmm_blas_int ldc, const double *znorm2,
                            const fedmm_lasso_options_t *opts, double *H, fedmm_blas_int ldh, int *n_iter,
                            int64_t *n_unconverged, double *work, const fedmm_interrupt_t *interrupt)
{
    if (K < 1 || b < 0 || ldg < K || ldc < K || ldh < K || check_options(opts) != FEDMM_OK ||
        G == NULL || H == NULL || work == NULL || (b > 0 && C == NULL))
        return FEDMM_EINVAL;
    int method = opts->method;
    if (method == FEDMM_LASSO_AUTO) method = lasso_auto_method(0, K);
    lasso_poll_t pl;
    lasso_poll_init(&pl, interrupt, K);
    return lasso_gram_run(K, b, G, ldg, C, ldc, znorm2, opts->lam, opts->positive, opts->tol,
                          opts->max_iter, opts->warm_start, method, H, ldh, n_iter,
                          n_unconverged, work, NULL, &pl);
}

int fedmm_lasso_gram_ex(const fedmm_matrix_t *G, const fedmm_matrix_t *C, const double *znorm2,
                        const fedmm_lasso_options_t *opts, const fedmm_matrix_mut_t *H, int *n_iter,
                        int64_t *n_unconverged, double *work, const fedmm_interrupt_t *interrupt)
{
    if (G == NULL || C == NULL || H == NULL || G->cols != G->rows || C->rows != G->rows ||
        H->rows != G->rows || H->cols != C->cols || !fedmm__fits_blas_int(G->rows) ||
        !fedmm__fits_blas_int(C->cols) || !fedmm__fits_blas_int(G->ld) || !fedmm__fits_blas_int(C->ld) ||
        !fedmm__fits_blas_int(H->ld))
        return FEDMM_EINVAL;
    return lasso_gram_entry((fedmm_blas_int)G->rows, (fedmm_blas_int)C->cols, G->data, (fedmm_blas_int)G->ld,
                            C->data, (fedmm_blas_int)C->ld, znorm2, opts, H->data, (fedmm_blas_int)H->ld,
                            n_iter, n_unconverged, work, interrupt);
}

/* The flat forms, kept for ABI compatibility: each packs its arguments into
 * the views of fedmm_lasso_gram_ex and calls it. */
int fedmm_lasso_gram(fedmm_blas_int K, fedmm_blas_int b, const double *G,
                     fedmm_blas_int ldg, const double *C, fedmm_blas_int ldc,
                     const double *znorm2, const fedmm_lasso_options_t *opts, double *H,
                     fedmm_blas_int ldh, int *n_iter, int64_t *n_unconverged, double *work)
{
    return fedmm_lasso_gram_interruptible(K, b, G, ldg, C, ldc, znorm2, opts, H, ldh, n_iter,
                                          n_unconverged, work, NULL);
}

int fedmm_lasso_gram_interruptible(fedmm_blas_int K, fedmm_blas_int b, const double *G,
                                   fedmm_blas_int ldg, const double *C, fedmm_blas_int ldc,
                                   const double *znorm2, const fedmm_lasso_options_t *opts,
                                   double *H, fedmm_blas_int ldh, int *n_iter,
                                   int64_t *n_unconverged, double *work,
                                   const fedmm_interrupt_t *interrupt)
{
    const fedmm_matrix_t G_view = {G, K, K, ldg};
    const fedmm_matrix_t C_view = {C, K, b, ldc};
    const fedmm_matrix_mut_t H_view = {H, K, b, ldh};
    return fedmm_lasso_gram_ex(&G_view, &C_view, znorm2, opts, &H_view, n_iter, n_unconverged, work, interrupt);
}

/* ---- dictionary statistics ---------------------------------------------- */

size_t fedmm_dictionary_statistics_work(fedmm_blas_int p, fedmm_blas_int K,
                                        fedmm_blas_int max_segment, int want_objective)
{
    size_t n = (size_t)K * K + (size_t)K * max_segment + (size_t)max_segment +
               fedmm_lasso_gram_work(K);
    if (want_objective) n += (size_t)p * max_segment;
    return n;
}

int fedmm_dictionary_statistics(fedmm_blas_int p, fedmm_blas_int K, fedmm_blas_int b,
                                const double *D, fedmm_blas_int ldd, const double *Z,
                                fedmm_blas_int ldz, const fedmm_lasso_options_t *opts,
                                int64_t n_segments, const int64_t *offsets, double *H,
                                double *A, double *B, double *objective, int *n_iter,
                                int64_t *n_unconverged, double *work, const fedmm_blas_t *blas)
{
    return fedmm_dictionary_statistics_interruptible(p, K, b, D, ldd, Z, ldz, opts, n_segments,
                                                     offsets, H, A, B, objective, n_iter,
                                                     n_unconverged, work, blas, NULL);
}

/* G = D^T D, both triangles (ld K): the upper triangle by dsyrk, mirrored so
 * that every column is whole.  The one place that forms the Gram matrix of
 * a dictionary (a call's own, or fedmm__gram_form's for many calls). */
static void dictionary_gram(fedmm_blas_int p, fedmm_blas_int K, const double *D, fedmm_blas_int ldd,
                            double *G, const fedmm_blas_t *blas)
{
    const double one = 1.0, zero = 0.0;
    blas->dsyrk("U", "T", &K, &p, &one, D, &ldd, &zero, G, &K);
    for (fedmm_blas_int j = 0; j < K; ++j)
        for (fedmm_blas_int i = j + 1; i < K; ++i) G[(size_t)j * K + i] = G[(size_t)i * K + j];
}

size_t fedmm__gram_size(fedmm_blas_int K)
{
    /* G, the inverse's state, then M when K allows it */
    return (size_t)K * K + 1 + (K <= INVERSE_MAX_K ? (size_t)K * K : 0);
}

int fedmm__gram_form(fedmm_blas_int p, fedmm_blas_int K, const double *D, fedmm_blas_int ldd,
                     double *out, double *work, const fedmm_blas_t *blas)
{
    if (p < 1 || K < 1 || ldd < p || D == NULL || out == NULL || work == NULL || blas == NULL)
        return FEDMM_EINVAL;
    double *G = out;
    dictionary_gram(p, K, D, ldd, G, blas);
    lasso_inverse_t inv;
    memset(&inv, 0, sizeof(inv));
    inv.M = out + (size_t)K * K + 1;
    inverse_form(K, G, K, work, &inv); /* the very computation a call would do (state -1 when K is too big) */
    out[(size_t)K * K] = (double)inv.state;
    return FEDMM_OK;
}

void fedmm__gram_view(fedmm_blas_int K, const double *buf, fedmm__gram_t *gram)
{
    gram->G = buf;
    gram->M_state = buf[(size_t)K * K] == 1.0 ? 1 : -1;
    gram->M = buf + (size_t)K * K + 1;
}

int fedmm_dictionary_statistics_interruptible(
    fedmm_blas_int p, fedmm_blas_int K, fedmm_blas_int b, const double *D, fedmm_blas_int ldd,
    const double *Z, fedmm_blas_int ldz, const fedmm_lasso_options_t *opts, int64_t n_segments,
    const int64_t *offsets, double *H, double *A, double *B, double *objective, int *n_iter,
    int64_t *n_unconverged, double *work, const fedmm_blas_t *blas,
    const fedmm_interrupt_t *interrupt)
{
    return fedmm__dictionary_statistics_gram(p, K, b, D, ldd, Z, ldz, opts, n_segments, offsets, H, A, B,
                                             objective, n_iter, n_unconverged, work, blas, interrupt, NULL);
}

int fedmm__dictionary_statistics_gram(
    fedmm_blas_int p, fedmm_blas_int K, fedmm_blas_int b, const double *D, fedmm_blas_int ldd,
    const double *Z, fedmm_blas_int ldz, const fedmm_lasso_options_t *opts, int64_t n_segments,
    const int64_t *offsets, double *H, double *A, double *B, double *objective, int *n_iter,
    int64_t *n_unconverged, double *work, const fedmm_blas_t *blas,
    const fedmm_interrupt_t *interrupt, const fedmm__gram_t *gram)
{
    if (p < 1 || K < 1 || b < 0 || ldd < p || ldz < p || n_segments < 0 || D == NULL ||
        H == NULL || work == NULL || blas == NULL || offsets == NULL ||
        check_options(opts) != FEDMM_OK || (gram != NULL && gram->G == NULL))
        return FEDMM_EINVAL;
    const double lam = opts->lam;
    int method = opts->method;
    fedmm_blas_int max_seg = 0;
    if (offsets[0] != 0 || offsets[n_segments] != b) return FEDMM_EINVAL;
    for (int64_t s = 0; s < n_segments; ++s) {
        if (offsets[s + 1] < offsets[s]) return FEDMM_EINVAL;
        if (offsets[s + 1] - offsets[s] > max_seg) max_seg = (fedmm_blas_int)(offsets[s + 1] - offsets[s]);
    }
    if (b > 0 && Z == NULL) return FEDMM_EINVAL;

    double *G_own = work;
    double *C = G_own + (size_t)K * K;
    double *zn = C + (size_t)K * max_seg;
    double *lasso_work = zn + max_seg;
    double *R = lasso_work + fedmm_lasso_gram_work(K);

    const double one = 1.0, zero = 0.0, minus_one = -1.0;
    /* G = D^T D: the caller's (formed by the same dictionary_gram from the same D), or our own */
    const double *G = G_own;
    if (gram != NULL)
        G = gram->G;
    else
        dictionary_gram(p, K, D, ldd, G_own, blas);

    if (method == FEDMM_LASSO_AUTO) method = lasso_auto_method(p, K);
    lasso_poll_t pl;
    lasso_poll_init(&pl, interrupt, K);
    int64_t bad_total = 0;
    /* Each segment goes through exactly the same calls as a one-segment call
     * on its own columns, so segmented and separate results agree bit for bit. */
    for (int64_t s = 0; s < n_segments; ++s) {
        const fedmm_blas_int j0 = (fedmm_blas_int)offsets[s];
        const fedmm_blas_int bs = (fedmm_blas_int)(offsets[s + 1] - offsets[s]);
        double *As = A ? A + (size_t)s * K * K : NULL;
        double *Bs = B ? B + (size_t)s * p * K : NULL;
        double *Hs = H + (size_t)j0 * K;
        const double *Zs = Z + (size_t)j0 * ldz;
        if (bs == 0) { /* an empty segment has zero statistics */
            if (As) memset(As, 0, (size_t)K * K * sizeof(double));
            if (Bs) memset(Bs, 0, (size_t)p * K * sizeof(double));
            continue;
        }
        for (fedmm_blas_int j = 0; j < bs; ++j) {
            const double *z = Zs + (size_t)j * ldz;
            double acc = 0.0;
            for (fedmm_blas_int i = 0; i < p; ++i) acc += z[i] * z[i];
            if (!isfinite(acc)) return FEDMM_ENONFINITE;
            zn[j] = acc;
        }
        /* C = D^T Z_s */
        blas->dgemm("T", "N", &K, &bs, &p, &one, D, &ldd, Zs, &ldz, &zero, C, &K);
        int64_t bad = 0;
        const int status = lasso_gram_run(K, bs, G, K, C, K, zn, lam, opts->positive, opts->tol,
                                          opts->max_iter, opts->warm_start, method, Hs, K,
                                          n_iter ? n_iter + j0 : NULL, &bad, lasso_work,
                                          gram != NULL && method != FEDMM_LASSO_CD ? gram : NULL, &pl);
        if (status != FEDMM_OK) return status;
        bad_total += bad;
        const double inv_b = 1.0 / (double)bs;
        if (As) { /* A = H H^T / b */
            blas->dsyrk("U", "N", &K, &bs, &inv_b, Hs, &K, &zero, As, &K);
            for (fedmm_blas_int j = 0; j < K; ++j)
                for (fedmm_blas_int i = j + 1; i < K; ++i) As[(size_t)j * K + i] = As[(size_t)i * K + j];
        }
        if (Bs) /* B = Z H^T / b */
            blas->dgemm("N", "T", &p, &K, &bs, &inv_b, Zs, &ldz, Hs, &K, &zero, Bs, &p);
        if (objective) { /* R = Z - D H, objective_j = 1/2 ||r_j||^2 + lam ||h_j||_1 */
            for (fedmm_blas_int j = 0; j < bs; ++j)
                memcpy(R + (size_t)j * p, Zs + (size_t)j * ldz, (size_t)p * sizeof(double));
            blas->dgemm("N", "N", &p, &bs, &K, &minus_one, D, &ldd, Hs, &K, &one, R, &p);
            for (fedmm_blas_int j = 0; j < bs; ++j) {
                const double *r = R + (size_t)j * p;
                const double *h = Hs + (size_t)j * K;
                double rr = 0.0, l1 = 0.0;
                for (fedmm_blas_int i = 0; i < p; ++i) rr += r[i] * r[i];
                for (fedmm_blas_int k = 0; k < K; ++k) l1 += fabs(h[k]);
                objective[j0 + j] = 0.5 * rr + lam * l1;
            }
        }
    }
    if (n_unconverged) *n_unconverged = bad_total;
    return FEDMM_OK;
}

/* ---- the struct-taking entry point (matrix views, one output struct) ------- */

int fedmm_dictionary_statistics_ex(const fedmm_matrix_t *D, const fedmm_matrix_t *Z,
                                   const fedmm_lasso_options_t *opts, int64_t n_segments,
                                   const int64_t *offsets,
                                   const fedmm_dictionary_statistics_out_t *out, double *work,
                                   const fedmm_blas_t *blas, const fedmm_interrupt_t *interrupt)
{
    if (D == NULL || Z == NULL || out == NULL || D->rows != Z->rows || !fedmm__fits_blas_int(D->rows) ||
        !fedmm__fits_blas_int(D->cols) || !fedmm__fits_blas_int(Z->cols) || !fedmm__fits_blas_int(D->ld) ||
        !fedmm__fits_blas_int(Z->ld))
        return FEDMM_EINVAL;
    return fedmm_dictionary_statistics_interruptible(
        (fedmm_blas_int)D->rows, (fedmm_blas_int)D->cols, (fedmm_blas_int)Z->cols, D->data,
        (fedmm_blas_int)D->ld, Z->data, (fedmm_blas_int)Z->ld, opts, n_segments, offsets, out->H, out->A,
        out->B, out->objective, out->n_iter, out->n_unconverged, work, blas, interrupt);
}
