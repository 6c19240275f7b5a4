/* SPDX-License-Identifier: BSD-3-Clause
 *
 * models_em.c -- the EM family as compiled surrogate models (fedmm_model_t):
 * the Gaussian mixture of FedEM App. F.1 (tied or full covariances), the
 * Poisson model with a latent log-intensity shift of FedMM App. C.1 and the
 * toy of FedMM Remark 1.
 *
 * The Python models call these callbacks (through fedmm.kernels.CompiledModel)
 * for their statistic, projection and T, and the round engine (engine.c)
 * calls them through the model struct: one piece of machine code per
 * operation, hence the same numbers on both backends.  No fused multiply-add
 * contraction, so that a helper inlined into two callers rounds alike.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <float.h>
#include <math.h>
#include <string.h>

#include "fedmm_kernels.h"
#include "internal.h"

/* doubles per fedmm_blas_int workspace, rounded up */
#define DOUBLES_FOR_INTS(n) (((size_t)(n) * sizeof(fedmm_blas_int) + sizeof(double) - 1) / sizeof(double))

/* ---- capped simplex --------------------------------------------------------- */

int fedmm_project_capped_simplex(int64_t n, const double *v, double floor, double *out, double *work)
{
    if (n < 1 || v == NULL || out == NULL || work == NULL || !(floor >= 0.0) ||
        !((double)n * floor < 1.0))
        return FEDMM_EINVAL;
    const double radius = 1.0 - (double)n * floor;
    double *u = work;
    for (int64_t i = 0; i < n; ++i) {
        if (!isfinite(v[i])) return FEDMM_ENONFINITE;
        u[i] = v[i] - floor;
    }
    for (int64_t a = 1; a < n; ++a) { /* insertion sort, decreasing */
        const double x = u[a];
        int64_t j = a - 1;
        while (j >= 0 && u[j] < x) {
            u[j + 1] = u[j];
            --j;
        }
        u[j + 1] = x;
    }
    /* tau = (sum_{k<=r} u_k - radius) / (r + 1) for the last r with u_r > tau_r (r = 0 always
     * qualifies: u_0 - (u_0 - radius) = radius > 0) */
    double cumulative = 0.0, tau = 0.0;
    for (int64_t k = 0; k < n; ++k) {
        cumulative += u[k];
        const double t = (cumulative - radius) / (double)(k + 1);
        if (u[k] - t > 0.0) tau = t;
    }
    for (int64_t i = 0; i < n; ++i) {
        const double x = (v[i] - floor) - tau;
        out[i] = (x > 0.0 ? x : 0.0) + floor;
    }
    return FEDMM_OK;
}

/* ---- eigenvalue floor --------------------------------------------------------- */

/* dsyevd (jobz 'V') needs 1 + 6p + 2p^2 doubles and 3 + 5p ints, plus NB p for its blocked
 * reduction; dsyevr needs 26p doubles and 10p ints (optimal (NB + 6) p), and 2p for isuppz. */
#define FLOOR_LWORK(p) (1 + 70 * (size_t)(p) + 2 * (size_t)(p) * (size_t)(p))
#define FLOOR_LIWORK(p) (3 + 10 * (size_t)(p))

size_t fedmm_floor_eigenvalues_work(fedmm_blas_int p)
{
    /* W (LAPACK's copy), V (eigenvectors), V scaled, eigenvalues, LAPACK's workspace */
    return 3 * (size_t)p * p + (size_t)p + FLOOR_LWORK(p);
}

size_t fedmm_floor_eigenvalues_iwork(fedmm_blas_int p)
{
    return 2 * (size_t)p + FLOOR_LIWORK(p);
}

static int floor_eigenvalues_one(fedmm_blas_int p, double *A, double floor, int *clipped, double *work,
                                 fedmm_blas_int *iwork, const fedmm_blas_t *blas)
{
    const size_t pp = (size_t)p * p;
    double *W = work, *V = W + pp, *VL = V + pp, *w = VL + pp, *lapack_work = w + p;
    fedmm_blas_int lwork = (fedmm_blas_int)FLOOR_LWORK(p), liwork = (fedmm_blas_int)FLOOR_LIWORK(p);
    fedmm_blas_int *isuppz = iwork, *lapack_iwork = iwork + 2 * (size_t)p;
    *clipped = 0;
    for (size_t k = 0; k < pp; ++k)
        if (!isfinite(A[k])) return FEDMM_ENONFINITE;
    /* all eigenvalues above the floor iff A - floor I is positive definite (cheap test) */
    memcpy(W, A, pp * sizeof(double));
    for (fedmm_blas_int i = 0; i < p; ++i) W[(size_t)i * p + i] -= floor;
    fedmm_blas_int info = 0;
    blas->dpotrf("L", &p, W, &p, &info);
    if (info == 0) return FEDMM_OK;
    if (info < 0 || floor == 0.0) return FEDMM_ELAPACK; /* singular or indefinite, no floor */
    memcpy(W, A, pp * sizeof(double));
    if (blas->dsyevd != NULL) {
        blas->dsyevd("V", "L", &p, W, &p, w, lapack_work, &lwork, lapack_iwork, &liwork, &info);
        if (info != 0) return FEDMM_ELAPACK;
        memcpy(V, W, pp * sizeof(double));
    } else {
        const double vl = 0.0, vu = 0.0, abstol = 0.0;
        fedmm_blas_int il = 1, iu = p, m = 0;
        blas->dsyevr("V", "A", "L", &p, W, &p, &vl, &vu, &il, &iu, &abstol, &m, w, V, &p, isuppz,
                     lapack_work, &lwork, lapack_iwork, &liwork, &info);
        if (info != 0 || m != p) return FEDMM_ELAPACK;
    }
    /* X = (V diag(max(lambda, f))) V^T, then A = (X + X^T) / 2, with f = floor first.  Rounding in the
     * eigenpairs and in the product perturbs the eigenvalues of the rebuilt matrix by up to about
     * p eps lambda_max, so when lambda_max / floor exceeds about 1 / (p eps) the rebuilt matrix may
     * have no Cholesky factor although every max(lambda_i, f) is positive: f is then raised to
     * 2^k p eps lambda_max, k = 0, 1, ..., until the Cholesky factorization of the rebuilt matrix
     * succeeds (the relative guard: the rebuilt matrix's condition number is then at most about
     * 1 / (2^k p eps), so a few doublings suffice; f never exceeds lambda_max / 2). */
    double top = w[0];
    for (fedmm_blas_int j = 1; j < p; ++j)
        if (w[j] > top) top = w[j];
    const double one = 1.0, zero = 0.0;
    double f = floor, relative = (double)p * DBL_EPSILON;
    for (;;) {
        for (fedmm_blas_int j = 0; j < p; ++j) {
            const double lambda = w[j] > f ? w[j] : f;
            for (fedmm_blas_int i = 0; i < p; ++i) VL[(size_t)j * p + i] = V[(size_t)j * p + i] * lambda;
        }
        blas->dgemm("N", "T", &p, &p, &p, &one, VL, &p, V, &p, &zero, W, &p);
        for (fedmm_blas_int j = 0; j < p; ++j)
            for (fedmm_blas_int i = 0; i < p; ++i)
                A[(size_t)j * p + i] = 0.5 * (W[(size_t)j * p + i] + W[(size_t)i * p + j]);
        memcpy(W, A, pp * sizeof(double));
        blas->dpotrf("L", &p, W, &p, &info);
        if (info == 0) break;
        while (relative < 1.0 && !(relative * top > f)) relative = 2.0 * relative;
        if (info < 0 || !(relative < 1.0)) return FEDMM_ELAPACK;
        f = relative * top;
        relative = 2.0 * relative;
    }
    *clipped = 1;
    return FEDMM_OK;
}

int fedmm_floor_eigenvalues(fedmm_blas_int p, int64_t n_matrices, double *A, double floor, int *clipped,
                            double *work, fedmm_blas_int *iwork, const fedmm_blas_t *blas)
{
    if (p < 1 || n_matrices < 0 || A == NULL || work == NULL || iwork == NULL || blas == NULL ||
        blas->dpotrf == NULL || blas->dgemm == NULL || (blas->dsyevd == NULL && blas->dsyevr == NULL) ||
        !(floor >= 0.0) || !isfinite(floor))
        return FEDMM_EINVAL;
    for (int64_t s = 0; s < n_matrices; ++s) {
        int one_clipped = 0;
        const int status = floor_eigenvalues_one(p, A + (size_t)s * p * p, floor, &one_clipped, work, iwork,
                                                 blas);
        if (status != FEDMM_OK) return status;
        if (clipped) clipped[s] = one_clipped;
    }
    return FEDMM_OK;
}

/* ---- Gaussian mixture ----------------------------------------------------------- */

typedef struct gmm_sizes {
    size_t G, p, Gp, pp, q, d, theta_size;
    int full;
} gmm_sizes_t;

static gmm_sizes_t gmm_sizes(const fedmm_gmm_model_t *c)
{
    gmm_sizes_t z;
    z.G = (size_t)c->G;
    z.p = (size_t)c->p;
    z.Gp = z.G * z.p;
    z.pp = z.p * z.p;
    z.full = c->covariance == FEDMM_GMM_FULL;
    z.q = z.G + z.Gp + (z.full ? z.G * z.pp : 0);
    z.d = z.G + z.Gp + (z.full ? z.G * z.pp : z.pp);
    /* tied: natural means, offsets, L^{-T}, ln det; full: W, shifts, offsets */
    z.theta_size = z.d + (z.full ? z.p * z.Gp + z.Gp + z.G : z.Gp + z.G + z.pp + 1);
    return z;
}

static size_t gmm_statistic_work(const void *ctx, int64_t b)
{
    const fedmm_gmm_model_t *c = ctx;
    const gmm_sizes_t z = gmm_sizes(c);
    const size_t chunk = (size_t)(b < 1 ? 1 : (b < FEDMM_GMM_CHUNK ? b : FEDMM_GMM_CHUNK));
    /* the gathered rows (p x chunk), the logits / responsibilities (G x chunk), and for "full"
     * the whitened rows, then the responsibility-weighted rows (G p x chunk) */
    return chunk * (z.p + z.G + (z.full ? z.Gp : 0));
}

/* Up to this many multiply-adds per row (G p for the tied logits, G p^2 for the full whitening),
 * the statistic's products are plain loops (row by row, sums in index order) instead of BLAS
 * calls, whose fixed cost dominates at these sizes (FedEM Fig. 1: G = p = 2). */
#define GMM_SMALL 64

/* C (m x n) = A^T B with A (k x m) and B (k x n) column-major (leading dimensions k) */
static void gemm_tn_small(size_t m, size_t n, size_t k, const double *A, const double *B, double *C)
{
    for (size_t j = 0; j < n; ++j)
        for (size_t i = 0; i < m; ++i) {
            double acc = 0.0;
            for (size_t l = 0; l < k; ++l) acc += A[i * k + l] * B[j * k + l];
            C[j * m + i] = acc;
        }
}

/* C (m x n) = A B with A (m x k, leading dimension m) and B (k x n, leading dimension k) */
static void gemm_nn_small(size_t m, size_t n, size_t k, const double *A, const double *B, double *C)
{
    for (size_t j = 0; j < n; ++j)
        for (size_t i = 0; i < m; ++i) {
            double acc = 0.0;
            for (size_t l = 0; l < k; ++l) acc += A[l * m + i] * B[j * k + l];
            C[j * m + i] = acc;
        }
}

/* rho[0..G) <- softmax(rho[0..G) + offsets) (log-sum-exp shifted by the maximum) */
static void softmax_offsets(size_t G, const double *offsets, double *rho)
{
    double top = -INFINITY;
    for (size_t l = 0; l < G; ++l) {
        rho[l] = rho[l] + offsets[l];
        if (rho[l] > top) top = rho[l];
    }
    double total = 0.0;
    for (size_t l = 0; l < G; ++l) {
        rho[l] = exp(rho[l] - top);
        total += rho[l];
    }
    for (size_t l = 0; l < G; ++l) rho[l] = rho[l] / total;
}

static int gmm_statistic(const void *ctx, const double *theta, const double *data, int64_t n_samples,
                         const int64_t *idx, int64_t b, double *memory, double *out,
                         int64_t *n_unconverged, double *work)
{
    (void)memory;
    (void)n_unconverged;
    const fedmm_gmm_model_t *c = ctx;
    const gmm_sizes_t z = gmm_sizes(c);
    if (b < 1 || b > n_samples) return FEDMM_EINVAL;
    const size_t G = z.G, p = z.p, Gp = z.Gp;
    const fedmm_blas_int bG = c->G, bp = c->p, bGp = (fedmm_blas_int)Gp;
    const double one = 1.0, zero = 0.0;
    memset(out, 0, z.q * sizeof(double));
    double *weights = out, *means = out + G, *second = out + G + Gp;
    for (int64_t start = 0; start < b; start += FEDMM_GMM_CHUNK) {
        const size_t n = (size_t)(b - start < FEDMM_GMM_CHUNK ? b - start : FEDMM_GMM_CHUNK);
        const fedmm_blas_int bn = (fedmm_blas_int)n;
        /* the chunk's rows: row-major n x p, i.e. column-major p x n */
        const double *Y;
        double *gathered = work;
        if (idx == NULL) {
            Y = data + (size_t)start * p;
        } else {
            for (size_t j = 0; j < n; ++j) {
                const int64_t row = idx[(size_t)start + j];
                if (row < 0 || row >= n_samples) return FEDMM_EINVAL;
                memcpy(gathered + j * p, data + (size_t)row * p, p * sizeof(double));
            }
            Y = gathered;
        }
        double *rho = work + n * p; /* G x n */
        const int small = (z.full ? Gp * p : Gp) <= GMM_SMALL;
        if (!z.full) {
            const double *natural = theta + z.d, *offsets = natural + Gp;
            /* logits (G x n) = (Sigma^{-1} mu^T)^T Y */
            if (small)
                gemm_tn_small(G, n, p, natural, Y, rho);
            else
                c->blas->dgemm("T", "N", &bG, &bn, &bp, &one, natural, &bp, Y, &bp, &zero, rho, &bG);
            for (size_t j = 0; j < n; ++j) {
                double *r = rho + j * G;
                softmax_offsets(G, offsets, r);
                for (size_t l = 0; l < G; ++l) weights[l] += r[l];
                if (small) /* means_l += rho_l y, row after row */
                    for (size_t l = 0; l < G; ++l)
                        for (size_t i = 0; i < p; ++i) means[l * p + i] += r[l] * Y[j * p + i];
            }
            /* means (p x G column-major = G x p row-major) += Y rho^T */
            if (!small) c->blas->dgemm("N", "T", &bp, &bG, &bn, &one, Y, &bp, rho, &bG, &one, means, &bp);
        } else {
            const double *W = theta + z.d, *shifts = W + p * Gp, *offsets = shifts + Gp;
            double *R = rho + n * G; /* Gp x n */
            /* whitened rows of every component (Gp x n) = W^T Y; W is stored row-major p x Gp */
            if (small)
                gemm_nn_small(Gp, n, p, W, Y, R);
            else
                c->blas->dgemm("N", "N", &bGp, &bn, &bp, &one, W, &bGp, Y, &bp, &zero, R, &bGp);
            for (size_t j = 0; j < n; ++j) {
                double *r = rho + j * G, *white = R + j * Gp;
                const double *y = Y + j * p;
                for (size_t l = 0; l < G; ++l) {
                    double quad = 0.0;
                    for (size_t k = 0; k < p; ++k) {
                        const double e = white[l * p + k] - shifts[l * p + k];
                        quad += e * e;
                    }
                    r[l] = -0.5 * quad;
                }
                softmax_offsets(G, offsets, r);
                /* the whitened column is consumed: it becomes [rho_l y]_l */
                for (size_t l = 0; l < G; ++l) {
                    weights[l] += r[l];
                    for (size_t i = 0; i < p; ++i) {
                        const double v = r[l] * y[i];
                        white[l * p + i] = v;
                        means[l * p + i] += v;
                    }
                }
            }
            /* second (p x Gp column-major = G x p x p row-major) += Y [rho_l y]^T */
            if (small)
                for (size_t j = 0; j < n; ++j)
                    for (size_t a = 0; a < Gp; ++a)
                        for (size_t k = 0; k < p; ++k) second[a * p + k] += R[j * Gp + a] * Y[j * p + k];
            else
                c->blas->dgemm("N", "T", &bp, &bGp, &bn, &one, Y, &bp, R, &bGp, &one, second, &bp);
        }
    }
    const double count = (double)b;
    for (size_t k = 0; k < z.q; ++k) out[k] = out[k] / count;
    return FEDMM_OK;
}

size_t fedmm_gmm_responsibilities_work(const fedmm_gmm_model_t *ctx)
{
    const gmm_sizes_t z = gmm_sizes(ctx);
    return (size_t)FEDMM_GMM_CHUNK * (z.full ? z.Gp : 1);
}

int fedmm_gmm_responsibilities(const fedmm_gmm_model_t *ctx, const double *theta, const double *data,
                               int64_t n_samples, double *rho, double *log_norm, double *work)
{
    if (ctx == NULL || theta == NULL || (data == NULL && n_samples > 0) || (rho == NULL && n_samples > 0) ||
        work == NULL || n_samples < 0 || ctx->blas == NULL || ctx->blas->dgemm == NULL)
        return FEDMM_EINVAL;
    const gmm_sizes_t z = gmm_sizes(ctx);
    const size_t G = z.G, p = z.p, Gp = z.Gp;
    const fedmm_blas_int bG = ctx->G, bp = ctx->p, bGp = (fedmm_blas_int)Gp;
    const double one = 1.0, zero = 0.0;
    for (int64_t start = 0; start < n_samples; start += FEDMM_GMM_CHUNK) {
        const size_t n = (size_t)(n_samples - start < FEDMM_GMM_CHUNK ? n_samples - start : FEDMM_GMM_CHUNK);
        const fedmm_blas_int bn = (fedmm_blas_int)n;
        const double *Y = data + (size_t)start * p; /* row-major n x p = column-major p x n */
        double *r = rho + (size_t)start * G;       /* row-major n x G = column-major G x n */
        const double *offsets;
        if (!z.full) {
            const double *natural = theta + z.d;
            offsets = natural + Gp;
            /* logits (G x n) = (Sigma^{-1} mu^T)^T Y */
            ctx->blas->dgemm("T", "N", &bG, &bn, &bp, &one, natural, &bp, Y, &bp, &zero, r, &bG);
        } else {
            const double *W = theta + z.d, *shifts = W + p * Gp;
            offsets = shifts + Gp;
            /* every component's whitened rows at once (Gp x n, a cache-sized block) = W^T Y */
            ctx->blas->dgemm("N", "N", &bGp, &bn, &bp, &one, W, &bGp, Y, &bp, &zero, work, &bGp);
            for (size_t j = 0; j < n; ++j) {
                const double *white = work + j * Gp;
                double *rj = r + j * G;
                for (size_t l = 0; l < G; ++l) {
                    double quad = 0.0;
                    for (size_t k = 0; k < p; ++k) {
                        const double e = white[l * p + k] - shifts[l * p + k];
                        quad += e * e;
                    }
                    rj[l] = -0.5 * quad;
                }
            }
        }
        for (size_t j = 0; j < n; ++j) {
            double *rj = r + j * G;
            double top = -INFINITY;
            for (size_t l = 0; l < G; ++l) {
                rj[l] += offsets[l];
                if (rj[l] > top) top = rj[l];
            }
            double total = 0.0;
            for (size_t l = 0; l < G; ++l) {
                rj[l] = exp(rj[l] - top);
                total += rj[l];
            }
            const double inv = 1.0 / total;
            for (size_t l = 0; l < G; ++l) rj[l] *= inv;
            if (log_norm != NULL) log_norm[(size_t)start + j] = log(total) + top;
        }
    }
    return FEDMM_OK;
}

/* theta[d..theta_size) from theta[0..d): Cholesky factors, inverses, natural parameters */
static int gmm_derive(const void *ctx, double *theta, double *work)
{
    const fedmm_gmm_model_t *c = ctx;
    const gmm_sizes_t z = gmm_sizes(c);
    const size_t G = z.G, p = z.p, Gp = z.Gp, pp = z.pp;
    fedmm_blas_int bp = c->p, bG = c->G, info = 0;
    if (c->blas->dtrtri == NULL) return FEDMM_EINVAL;
    const double *w = theta, *mu = theta + G, *cov = theta + G + Gp;
    for (size_t l = 0; l < G; ++l)
        if (!(w[l] > 0.0) || !isfinite(w[l])) return FEDMM_EINVAL;
    for (size_t k = 0; k < z.d; ++k)
        if (!isfinite(theta[k])) return FEDMM_ENONFINITE;
    if (!z.full) {
        double *natural = theta + z.d, *offsets = natural + Gp, *Linv = offsets + G, *log_det = Linv + pp;
        memcpy(Linv, cov, pp * sizeof(double));
        c->blas->dpotrf("L", &bp, Linv, &bp, &info);
        if (info != 0) return FEDMM_ELAPACK;
        double half = 0.0;
        for (size_t i = 0; i < p; ++i) half += log(Linv[i * p + i]);
        *log_det = 2.0 * half;
        /* Sigma^{-1} mu^T: mu row-major (G x p) is mu^T column-major (p x G) */
        memcpy(natural, mu, Gp * sizeof(double));
        c->blas->dpotrs("L", &bp, &bG, Linv, &bp, natural, &bp, &info);
        if (info != 0) return FEDMM_ELAPACK;
        for (size_t l = 0; l < G; ++l) {
            double quad = 0.0;
            for (size_t i = 0; i < p; ++i) quad += mu[l * p + i] * natural[l * p + i];
            offsets[l] = log(w[l]) - 0.5 * quad;
        }
        /* L^{-1} column-major is L^{-T} row-major */
        c->blas->dtrtri("L", "N", &bp, Linv, &bp, &info);
        if (info != 0) return FEDMM_ELAPACK;
        for (size_t j = 1; j < p; ++j)
            for (size_t i = 0; i < j; ++i) Linv[j * p + i] = 0.0; /* above the diagonal */
        return FEDMM_OK;
    }
    double *W = theta + z.d, *shifts = W + p * Gp, *offsets = shifts + Gp;
    double *L = work; /* p x p */
    for (size_t l = 0; l < G; ++l) {
        memcpy(L, cov + l * pp, pp * sizeof(double));
        c->blas->dpotrf("L", &bp, L, &bp, &info);
        if (info != 0) return FEDMM_ELAPACK;
        double half = 0.0;
        for (size_t i = 0; i < p; ++i) half += log(L[i * p + i]);
        offsets[l] = log(w[l]) - 0.5 * (2.0 * half);
        c->blas->dtrtri("L", "N", &bp, L, &bp, &info);
        if (info != 0) return FEDMM_ELAPACK;
        /* W[i, l p + k] = (L_l^{-T})_{ik} = (L_l^{-1})_{ki}, zero for k < i */
        for (size_t i = 0; i < p; ++i)
            for (size_t k = 0; k < p; ++k) W[i * Gp + l * p + k] = k >= i ? L[i * p + k] : 0.0;
        for (size_t k = 0; k < p; ++k) {
            double acc = 0.0;
            for (size_t i = 0; i <= k; ++i) acc += mu[l * p + i] * W[i * Gp + l * p + k];
            shifts[l * p + k] = acc;
        }
    }
    return FEDMM_OK;
}

static size_t gmm_project_work(const fedmm_gmm_model_t *c);

static size_t gmm_server_work(const fedmm_gmm_model_t *c)
{
    const gmm_sizes_t z = gmm_sizes(c);
    /* T: the unsymmetrized covariance (p x p) and the eigenvalue floor's workspaces; derive:
     * one Cholesky factor (p x p); project: gmm_project_work */
    const size_t floor = z.pp + fedmm_floor_eigenvalues_work(c->p) +
                         DOUBLES_FOR_INTS(fedmm_floor_eigenvalues_iwork(c->p));
    const size_t project = gmm_project_work(c);
    return (floor > project ? floor : project) + 1;
}

static int gmm_T(const void *ctx, const double *s, double *theta, double *work)
{
    const fedmm_gmm_model_t *c = ctx;
    const gmm_sizes_t z = gmm_sizes(c);
    const size_t G = z.G, p = z.p, Gp = z.Gp, pp = z.pp;
    const double *sw = s, *sm = s + G;
    for (size_t k = 0; k < z.q; ++k)
        if (!isfinite(s[k])) return FEDMM_ENONFINITE;
    for (size_t l = 0; l < G; ++l)
        if (!(sw[l] > 0.0)) return FEDMM_EINVAL;
    double total = 0.0;
    for (size_t l = 0; l < G; ++l) total += sw[l];
    double *w = theta, *mu = theta + G, *cov = theta + G + Gp;
    for (size_t l = 0; l < G; ++l) w[l] = sw[l] / total;
    for (size_t l = 0; l < G; ++l)
        for (size_t i = 0; i < p; ++i) mu[l * p + i] = sm[l * p + i] / sw[l];
    double *X = work, *floor_work = X + pp;
    fedmm_blas_int *floor_iwork = (fedmm_blas_int *)(floor_work + fedmm_floor_eigenvalues_work(c->p));
    int status;
    if (!z.full) {
        if (c->known_covariance != NULL) {
            memcpy(cov, c->known_covariance, pp * sizeof(double));
            return gmm_derive(ctx, theta, work);
        }
        if (c->second_moment == NULL) return FEDMM_EINVAL;
        /* X = M2 - sum_l s2_l mu_l^T, then Sigma = (X + X^T) / 2 */
        for (size_t i = 0; i < p; ++i)
            for (size_t k = 0; k < p; ++k) {
                double acc = 0.0;
                for (size_t l = 0; l < G; ++l) acc += sm[l * p + i] * mu[l * p + k];
                X[i * p + k] = c->second_moment[i * p + k] - acc;
            }
        for (size_t i = 0; i < p; ++i)
            for (size_t k = 0; k < p; ++k) cov[i * p + k] = 0.5 * (X[i * p + k] + X[k * p + i]);
        status = fedmm_floor_eigenvalues(c->p, 1, cov, c->reg_covar, NULL, floor_work, floor_iwork, c->blas);
    } else {
        const double *s3 = s + G + Gp;
        for (size_t l = 0; l < G; ++l) {
            const double *m = mu + l * p, *second = s3 + l * pp;
            for (size_t i = 0; i < p; ++i)
                for (size_t k = 0; k < p; ++k) X[i * p + k] = second[i * p + k] / sw[l] - m[i] * m[k];
            for (size_t i = 0; i < p; ++i)
                for (size_t k = 0; k < p; ++k) cov[l * pp + i * p + k] = 0.5 * (X[i * p + k] + X[k * p + i]);
        }
        status = fedmm_floor_eigenvalues(c->p, (int64_t)G, cov, c->reg_covar, NULL, floor_work, floor_iwork,
                                         c->blas);
    }
    if (status != FEDMM_OK) return status;
    return gmm_derive(ctx, theta, work);
}

/* The projection of the statistic (see fedmm_kernels.h): the weights block onto the capped simplex,
 * then, "full", each component's second-moment block s3_l onto {X symmetric : X - s2_l s2_l^T / s1_l
 * PSD} with s1_l, s2_l fixed: X = s2 s2^T / s1 + proj_PSD(sym(s3_l) - s2 s2^T / s1), the exact
 * Euclidean projection of s3_l onto that translated cone (s1_l = 0, only when min_weight = 0: s2_l
 * onto 0 and s3_l onto the PSD cone, the exact projection of (s2_l, s3_l) onto the moment matrices'
 * fibre over s1_l = 0).  sym(s3_l) is kept bit for bit when proj_PSD leaves the difference unchanged
 * (valid statistics, exact EM). */
static size_t gmm_project_work(const fedmm_gmm_model_t *c)
{
    if (c->covariance != FEDMM_GMM_FULL) return (size_t)c->G;
    const size_t pp = (size_t)c->p * (size_t)c->p;
    const size_t psd = 2 * pp + fedmm_project_psd_work(c->p) + DOUBLES_FOR_INTS(fedmm_project_psd_iwork(c->p));
    return psd > (size_t)c->G ? psd : (size_t)c->G;
}

static int gmm_project(const void *ctx, double *s, double *work)
{
    const fedmm_gmm_model_t *c = ctx;
    const gmm_sizes_t z = gmm_sizes(c);
    int status = fedmm_project_capped_simplex((int64_t)z.G, s, c->min_weight, s, work);
    if (status != FEDMM_OK) return status;
    if (!z.full) return FEDMM_OK;
    const size_t p = z.p, pp = z.pp;
    for (size_t k = z.G; k < z.q; ++k)
        if (!isfinite(s[k])) return FEDMM_ENONFINITE;
    double *C = work, *P = C + pp, *psd_work = P + pp;
    fedmm_blas_int *psd_iwork = (fedmm_blas_int *)(psd_work + fedmm_project_psd_work(c->p));
    for (size_t l = 0; l < z.G; ++l) {
        const double s1 = s[l];
        double *s2 = s + z.G + l * p, *A = s + z.G + z.Gp + l * pp;
        for (size_t i = 0; i < p; ++i)
            for (size_t k = i + 1; k < p; ++k) {
                const double v = 0.5 * (A[i * p + k] + A[k * p + i]);
                A[i * p + k] = v;
                A[k * p + i] = v;
            }
        if (s1 > 0.0) {
            /* C = sym(s3) - s2 s2^T / s1 ((s2_i s2_k) / s1: exactly symmetric) */
            for (size_t i = 0; i < p; ++i)
                for (size_t k = 0; k < p; ++k) C[i * p + k] = A[i * p + k] - (s2[i] * s2[k]) / s1;
        } else {
            memset(s2, 0, p * sizeof(double));
            memcpy(C, A, pp * sizeof(double));
        }
        status = fedmm_project_psd(c->p, 1, C, P, psd_work, psd_iwork, NULL, c->blas);
        if (status != FEDMM_OK) return status;
        if (memcmp(C, P, pp * sizeof(double)) == 0) continue; /* already in the cone */
        if (!(s1 > 0.0)) {
            memcpy(A, P, pp * sizeof(double));
            continue;
        }
        for (size_t i = 0; i < p; ++i)
            for (size_t k = 0; k < p; ++k) A[i * p + k] = (s2[i] * s2[k]) / s1 + P[i * p + k];
    }
    return FEDMM_OK;
}

int fedmm_gmm_model(const fedmm_gmm_model_t *ctx, fedmm_model_t *model)
{
    if (ctx == NULL || model == NULL || ctx->G < 1 || ctx->p < 1 || ctx->blas == NULL ||
        ctx->blas->dgemm == NULL || ctx->blas->dpotrf == NULL || ctx->blas->dpotrs == NULL ||
        ctx->blas->dtrtri == NULL || (ctx->blas->dsyevd == NULL && ctx->blas->dsyevr == NULL) ||
        (ctx->covariance != FEDMM_GMM_TIED && ctx->covariance != FEDMM_GMM_FULL) ||
        !(ctx->reg_covar >= 0.0) || !isfinite(ctx->reg_covar) || !(ctx->min_weight >= 0.0) ||
        !((double)ctx->G * ctx->min_weight < 1.0) ||
        (ctx->covariance == FEDMM_GMM_FULL && (ctx->second_moment != NULL || ctx->known_covariance != NULL)))
        return FEDMM_EINVAL;
    /* the BLAS dimensions G p (and G p^2 for the full statistic) must fit the BLAS integer */
    const double Gpp = (double)ctx->G * ctx->p * (ctx->covariance == FEDMM_GMM_FULL ? ctx->p : 1);
    if (Gpp > 2147483647.0) return FEDMM_EINVAL;
    const gmm_sizes_t z = gmm_sizes(ctx);
    static const fedmm__model_ops_t ops = {gmm_statistic_work, gmm_statistic, gmm_project, gmm_T, gmm_derive,
                                           NULL};
    fedmm__model_fill(model, ctx, &ops,
                      (fedmm__model_sizes_t){(int64_t)z.q, (int64_t)z.d, (int64_t)z.theta_size, ctx->p, 0,
                                             gmm_server_work(ctx)});
    return FEDMM_OK;
}

/* ---- Poisson with a latent log-intensity shift -------------------------------------- */

static size_t poisson_statistic_work(const void *ctx, int64_t b)
{
    (void)b;
    return (size_t)((const fedmm_poisson_model_t *)ctx)->K;
}

static int poisson_statistic(const void *ctx, const double *theta, const double *data, int64_t n_samples,
                             const int64_t *idx, int64_t b, double *memory, double *out,
                             int64_t *n_unconverged, double *work)
{
    (void)memory;
    (void)n_unconverged;
    const fedmm_poisson_model_t *c = ctx;
    if (b < 1 || b > n_samples) return FEDMM_EINVAL;
    const int64_t K = c->K;
    const double rate = theta[1]; /* e^theta */
    double *logits = work;
    double count = 0.0, shift = 0.0;
    for (int64_t j = 0; j < b; ++j) {
        const int64_t row = idx == NULL ? j : idx[j];
        if (row < 0 || row >= n_samples) return FEDMM_EINVAL;
        const double Z = data[row];
        double top = -INFINITY;
        for (int64_t k = 0; k < K; ++k) {
            logits[k] = (Z * c->support[k] + c->log_prior[k]) - rate * c->exp_support[k];
            if (logits[k] > top) top = logits[k];
        }
        double total = 0.0, weighted = 0.0;
        for (int64_t k = 0; k < K; ++k) {
            const double e = exp(logits[k] - top);
            total += e;
            weighted += e * c->exp_support[k];
        }
        count += Z;
        shift += weighted / total; /* E[e^h | Z, theta] */
    }
    const double n = (double)b;
    if (c->parameterization == FEDMM_POISSON_JOINT) {
        out[0] = count / n;
        out[1] = -(shift / n);
    } else {
        out[0] = -(shift / n);
    }
    return FEDMM_OK;
}

static int poisson_T(const void *ctx, const double *s, double *theta, double *work)
{
    (void)work;
    const fedmm_poisson_model_t *c = ctx;
    double s1, s2;
    if (c->parameterization == FEDMM_POISSON_JOINT) {
        s1 = s[0];
        s2 = s[1];
    } else {
        if (!(c->mean_count > 0.0) || !isfinite(c->mean_count)) return FEDMM_EINVAL; /* not known yet */
        s1 = c->mean_count;
        s2 = s[0];
    }
    if (!isfinite(s1) || !isfinite(s2)) return FEDMM_ENONFINITE;
    const double denom = c->lam - s2;
    if (!(s1 > 0.0) || !(denom > 0.0)) return FEDMM_EINVAL;
    theta[0] = log(s1 / denom);
    theta[1] = exp(theta[0]);
    return FEDMM_OK;
}

static int poisson_derive(const void *ctx, double *theta, double *work)
{
    (void)ctx;
    (void)work;
    if (!isfinite(theta[0])) return FEDMM_ENONFINITE;
    theta[1] = exp(theta[0]);
    return FEDMM_OK;
}

static int poisson_project(const void *ctx, double *s, double *work)
{
    (void)work;
    const fedmm_poisson_model_t *c = ctx;
    double lo = -c->exp_support[0], hi = -c->exp_support[0];
    for (int64_t k = 1; k < c->K; ++k) {
        const double v = -c->exp_support[k];
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    double *shift = c->parameterization == FEDMM_POISSON_JOINT ? s + 1 : s;
    if (!isfinite(*shift) || !isfinite(s[0])) return FEDMM_ENONFINITE;
    /* min(max(x, lo), hi), as numpy.clip */
    double x = *shift > lo ? *shift : lo;
    *shift = x < hi ? x : hi;
    if (c->parameterization == FEDMM_POISSON_JOINT && c->min_mean > s[0]) s[0] = c->min_mean;
    return FEDMM_OK;
}

int fedmm_poisson_model(const fedmm_poisson_model_t *ctx, fedmm_model_t *model)
{
    if (ctx == NULL || model == NULL || ctx->K < 1 || ctx->support == NULL || ctx->log_prior == NULL ||
        ctx->exp_support == NULL || !(ctx->lam > 0.0) || !isfinite(ctx->lam) ||
        (ctx->parameterization != FEDMM_POISSON_JOINT && ctx->parameterization != FEDMM_POISSON_EXPLICIT_MEAN) ||
        (ctx->parameterization == FEDMM_POISSON_JOINT && !(ctx->min_mean > 0.0)) ||
        (ctx->parameterization == FEDMM_POISSON_EXPLICIT_MEAN && !isnan(ctx->mean_count) &&
         (!(ctx->mean_count > 0.0) || !isfinite(ctx->mean_count))))
        return FEDMM_EINVAL;
    for (int64_t k = 0; k < ctx->K; ++k)
        if (!isfinite(ctx->support[k]) || !isfinite(ctx->log_prior[k]) || !(ctx->exp_support[k] > 0.0) ||
            !isfinite(ctx->exp_support[k]))
            return FEDMM_EINVAL;
    static const fedmm__model_ops_t ops = {poisson_statistic_work, poisson_statistic, poisson_project, poisson_T,
                                           poisson_derive, NULL};
    fedmm__model_fill(model, ctx, &ops,
                      (fedmm__model_sizes_t){ctx->parameterization == FEDMM_POISSON_JOINT ? 2 : 1, 1, 2, 1, 0, 1});
    return FEDMM_OK;
}

/* ---- the toy of Remark 1 --------------------------------------------------------------- */

static size_t toy_statistic_work(const void *ctx, int64_t b)
{
    (void)ctx;
    (void)b;
    return 1;
}

static int toy_statistic(const void *ctx, const double *theta, const double *data, int64_t n_samples,
                         const int64_t *idx, int64_t b, double *memory, double *out, int64_t *n_unconverged,
                         double *work)
{
    (void)ctx;
    (void)theta;
    (void)memory;
    (void)n_unconverged;
    (void)work;
    if (b < 1 || b > n_samples) return FEDMM_EINVAL;
    double total = 0.0;
    if (idx == NULL) {
        for (int64_t j = 0; j < b; ++j) total += data[j];
    } else {
        for (int64_t j = 0; j < b; ++j) {
            if (idx[j] < 0 || idx[j] >= n_samples) return FEDMM_EINVAL;
            total += data[idx[j]];
        }
    }
    out[0] = total / (double)b;
    return FEDMM_OK;
}

static int toy_T(const void *ctx, const double *s, double *theta, double *work)
{
    (void)ctx;
    (void)work;
    if (!isfinite(s[0])) return FEDMM_ENONFINITE;
    if (!(s[0] > 0.0)) return FEDMM_EINVAL;
    theta[0] = 1.0 / sqrt(s[0]);
    return FEDMM_OK;
}

static int toy_project(const void *ctx, double *x, double *work)
{
    (void)work;
    const double floor = ((const fedmm_inverse_toy_model_t *)ctx)->floor;
    if (!isfinite(x[0])) return FEDMM_ENONFINITE;
    if (!(x[0] >= floor)) x[0] = floor; /* numpy.maximum(x, floor) */
    return FEDMM_OK;
}

int fedmm_inverse_toy_model(const fedmm_inverse_toy_model_t *ctx, fedmm_model_t *model)
{
    if (ctx == NULL || model == NULL || !(ctx->floor > 0.0) || !isfinite(ctx->floor)) return FEDMM_EINVAL;
    static const fedmm__model_ops_t ops = {toy_statistic_work, toy_statistic, toy_project, toy_T, NULL, toy_project};
    fedmm__model_fill(model, ctx, &ops, (fedmm__model_sizes_t){1, 1, 1, 1, 0, 1});
    return FEDMM_OK;
}
