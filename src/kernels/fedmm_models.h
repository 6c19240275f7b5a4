/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_models.h -- compiled models: dictionary learning, per-sample functions (engine.c), the EM family (models_em.c).
 *
 * One family of the public C API; fedmm_kernels.h includes every family
 * header and states the conventions they share (status codes, column-major
 * matrices, caller-provided workspaces).  This header compiles on its own.
 */
#ifndef FEDMM_MODELS_H
#define FEDMM_MODELS_H

#include "fedmm_common.h"
#include "fedmm_blas.h"
#include "fedmm_lasso.h"
#include "fedmm_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dictionary learning and per-sample models as compiled models (engine.c) ---- */
/* Dictionary learning as a compiled model (FedMM paper §2.3, §6 with the ridge
 * T of weight eta): q = K*K + p*K (blocks A then B, row-major), d = p*K (the
 * dictionary row-major), theta_size = 2 p K + K*K + 1 (+ K*K when K <= 64):
 * then the dictionary column-major, then D^T D and its inverse as the solver
 * uses them, formed once per parameter by T and derive (read by every
 * client's statistic instead of formed by each), memory_size = K (warm-start
 * codes).  The statistic gathers the minibatch and its codes and computes
 * what fedmm_dictionary_statistics does; project is fedmm_project_psd on the
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

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_MODELS_H */
