/* SPDX-License-Identifier: BSD-3-Clause
 *
 * rounds.c -- a whole FedMM client round of dictionary learning in one call.
 *
 * FedMM paper, Algorithm 2 lines 5-11 with the minibatch oracle of eq. (18):
 * the client draws its minibatch, solves the LASSO codes of the minibatch at
 * theta_t (warm-started from the codes it remembers), forms
 *     S_{t+1,i} = (H H^T / b, Z H^T / b),
 *     Delta     = S_{t+1,i} - S_t - V_{t,i},
 * quantizes Delta and updates its control variate
 *     V_{t+1,i} = V_{t,i} + (alpha / p) Quant(Delta).
 * The Python client (fedmm.algorithms.federated.Client) does the same steps
 * one NumPy call at a time; this kernel does them without the GIL, so the
 * clients of one round run on several threads at once.  Every step calls
 * the same kernels, in the same order, on the same operands as the Python
 * path, and the random stream is consumed identically (minibatch draw, then
 * the quantizer), so both paths give the same numbers bit for bit.
 */
/* Same numbers as NumPy's separate multiply and add: no FMA contraction. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <string.h>

#include "fedmm_kernels.h"

size_t fedmm_dictionary_client_round_work(fedmm_blas_int p, fedmm_blas_int K, int64_t batch)
{
    const size_t q = (size_t)K * K + (size_t)p * K;
    const size_t stats = fedmm_dictionary_statistics_work(p, K, (fedmm_blas_int)batch, 0);
    /* parameter space: theta_i (column-major), then the workspace of the
     * projection or of the ridge update (used one after the other) */
    const size_t psd = fedmm_project_psd_work(K), ridge = fedmm_dictionary_update_ridge_flat_work(p, K);
    const size_t param = (size_t)p * K + (psd > ridge ? psd : ridge);
    return (size_t)p * batch + (size_t)K * batch + q /* stat */ + q /* delta */ +
           (stats > param ? stats : param);
}

size_t fedmm_dictionary_client_round_iwork(fedmm_blas_int K, int64_t batch, int64_t n_samples)
{
    return (size_t)batch + (size_t)n_samples + (fedmm_project_psd_iwork(K) + 1) / 2;
}

/* theta_i = T(Pi(S_i)) of the statistic stat (row-major blocks), written
 * row-major (p, K) into theta: the baseline's local parameter, computed as
 * DictionaryLearning.theta_vector(T(project(S))) does. */
static int local_parameter(fedmm_blas_int p, fedmm_blas_int K, double *stat, double eta,
                           double *theta, double *work, fedmm_blas_int *iwork,
                           const fedmm_blas_t *blas)
{
    double *Dt = work, *rest = work + (size_t)p * K; /* theta_i column-major */
    int status = fedmm_project_psd(K, 1, stat, stat, rest, iwork, NULL, blas);
    if (status != FEDMM_OK) return status;
    status = fedmm_dictionary_update_ridge_flat(p, K, stat, eta, Dt, p, rest, blas);
    if (status != FEDMM_OK) return status;
    for (fedmm_blas_int i = 0; i < p; ++i)
        for (fedmm_blas_int k = 0; k < K; ++k) theta[(size_t)i * K + k] = Dt[(size_t)k * p + i];
    return FEDMM_OK;
}

int fedmm_dictionary_client_round(fedmm_blas_int p, fedmm_blas_int K, const double *D,
                                  fedmm_blas_int ldd, double lam, double tol, int max_iter,
                                  int method, const double *data, int64_t n_samples,
                                  int64_t batch, double *codes, fedmm_bitgen_t *rng, int space,
                                  const double *ref, double eta, double *V, double v_step,
                                  int scheme, int bits, int norm, size_t block, double *out,
                                  int64_t *n_unconverged, double *work, int64_t *iwork,
                                  const fedmm_blas_t *blas)
{
    if (p < 1 || K < 1 || D == NULL || ldd < p || data == NULL || n_samples < 1 || batch < 1 ||
        batch > n_samples || batch > (int64_t)0x7fffffff || rng == NULL || ref == NULL ||
        V == NULL || out == NULL || work == NULL || iwork == NULL || blas == NULL ||
        (space != FEDMM_SPACE_STATISTIC && space != FEDMM_SPACE_PARAMETER) ||
        (space == FEDMM_SPACE_PARAMETER && !(eta >= 0.0)) ||
        (scheme != FEDMM_SCHEME_IDENTITY && scheme != FEDMM_SCHEME_BLOCKP &&
         scheme != FEDMM_SCHEME_DITHER))
        return FEDMM_EINVAL;
    const fedmm_blas_int b = (fedmm_blas_int)batch;
    const size_t KK = (size_t)K * K, q = KK + (size_t)p * K;
    double *Z = work;                     /* p x b, the minibatch as columns */
    double *H = Z + (size_t)p * b;        /* K x b, codes */
    double *stat = H + (size_t)K * b;     /* q: A (K x K) then B^T (p x K, column-major) */
    double *delta = stat + q;             /* q */
    double *stats_work = delta + q;
    int64_t *idx = iwork;                 /* b */
    int64_t *sample_work = iwork + b;     /* n_samples */
    fedmm_blas_int *psd_iwork = (fedmm_blas_int *)(sample_work + n_samples);

    int status = fedmm_sample_without_replacement(rng, n_samples, batch, idx, sample_work);
    if (status != FEDMM_OK) return status;
    for (fedmm_blas_int c = 0; c < b; ++c) {
        memcpy(Z + (size_t)c * p, data + (size_t)idx[c] * p, (size_t)p * sizeof(double));
        if (codes) memcpy(H + (size_t)c * K, codes + (size_t)idx[c] * K, (size_t)K * sizeof(double));
    }
    const int64_t offsets[2] = {0, batch};
    double *A = stat, *Bt = stat + KK;
    const fedmm_lasso_options_t lasso = {lam, 0, tol, max_iter, codes != NULL, method};
    status = fedmm_dictionary_statistics(p, K, b, D, ldd, Z, p, &lasso, 1, offsets, H, A, Bt,
                                         NULL, NULL, n_unconverged, stats_work, blas);
    if (status != FEDMM_OK) return status;
    if (codes)
        for (fedmm_blas_int c = 0; c < b; ++c)
            memcpy(codes + (size_t)idx[c] * K, H + (size_t)c * K, (size_t)K * sizeof(double));
    /* S_{t+1,i} with its B block row-major (p, K), as the flat statistic */
    for (fedmm_blas_int i = 0; i < p; ++i)
        for (fedmm_blas_int k = 0; k < K; ++k) delta[KK + (size_t)i * K + k] = Bt[(size_t)k * p + i];
    memcpy(Bt, delta + KK, (size_t)p * K * sizeof(double));
    size_t n = q;
    const double *local = stat;
    if (space == FEDMM_SPACE_PARAMETER) { /* theta_{t+1,i} = T(Pi(S_{t+1,i})) */
        status = local_parameter(p, K, stat, eta, delta, stats_work, psd_iwork, blas);
        if (status != FEDMM_OK) return status;
        n = (size_t)p * K;
        local = delta;
    }
    /* Delta = (local value - reference) - V_{t,i} */
    for (size_t j = 0; j < n; ++j) delta[j] = (local[j] - ref[j]) - V[j];
    if (scheme == FEDMM_SCHEME_IDENTITY) {
        memcpy(out, delta, n * sizeof(double));
    } else {
        const fedmm_quantizer_t spec = {scheme, bits, norm, block};
        status = fedmm_quantize_f64(delta, n, &spec, rng, out);
        if (status != FEDMM_OK) return status;
    }
    if (v_step != 0.0)
        for (size_t j = 0; j < n; ++j) V[j] = V[j] + v_step * out[j];
    return FEDMM_OK;
}

void fedmm_weighted_sum(int64_t m, size_t q, const double *weights, const double *const *rows,
                        double *out)
{
    memset(out, 0, q * sizeof(double));
    for (int64_t k = 0; k < m; ++k) {
        const double w = weights[k], *x = rows[k];
        for (size_t j = 0; j < q; ++j) out[j] = out[j] + w * x[j];
    }
}

double fedmm_squared_distance(size_t n, const double *a, const double *b)
{
    /* four partial sums, combined as (s0 + s1) + (s2 + s3): a fixed order */
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const double d0 = a[j] - b[j], d1 = a[j + 1] - b[j + 1];
        const double d2 = a[j + 2] - b[j + 2], d3 = a[j + 3] - b[j + 3];
        s0 += d0 * d0;
        s1 += d1 * d1;
        s2 += d2 * d2;
        s3 += d3 * d3;
    }
    for (; j < n; ++j) {
        const double d0 = a[j] - b[j];
        s0 += d0 * d0;
    }
    return (s0 + s1) + (s2 + s3);
}

size_t fedmm_dictionary_server_round_work(fedmm_blas_int p, fedmm_blas_int K, int64_t m)
{
    const size_t q = (size_t)K * K + (size_t)p * K;
    /* acc, H, S_new (q each), theta_new (p K), the row pointers, then the SA step's workspace */
    return 3 * q + (size_t)p * K + (size_t)(m > 0 ? m : 0) +
           fedmm_dictionary_sa_step_work(p, K);
}

int fedmm_dictionary_server_round(fedmm_blas_int p, fedmm_blas_int K, int space, int64_t m,
                                  const double *weights, const double *values, double gamma,
                                  double alpha, double eta, int project, double *S, double *V,
                                  double *theta, double *D, double *dist, double *work,
                                  fedmm_blas_int *iwork, const fedmm_blas_t *blas)
{
    if (p < 1 || K < 1 || m < 0 || (m > 0 && (weights == NULL || values == NULL)) || V == NULL ||
        theta == NULL || D == NULL || dist == NULL || work == NULL || iwork == NULL ||
        blas == NULL || !isfinite(gamma) || !(eta >= 0.0) ||
        (space != FEDMM_SPACE_STATISTIC && space != FEDMM_SPACE_PARAMETER) ||
        (space == FEDMM_SPACE_STATISTIC && S == NULL))
        return FEDMM_EINVAL;
    const size_t pK = (size_t)p * K, q = (size_t)K * K + pK;
    const size_t n = space == FEDMM_SPACE_STATISTIC ? q : pK; /* message length */
    double *acc = work, *H = acc + q, *S_new = H + q, *theta_new = S_new + q;
    const double **rows = (const double **)(theta_new + pK); /* m pointers in m doubles' room */
    double *step_work = theta_new + pK + (m > 0 ? m : 0);
    for (int64_t k = 0; k < m; ++k) rows[k] = values + (size_t)k * n;
    /* acc = sum_k (mu_i / p) Quant_i, in client order; H = V_t + acc */
    fedmm_weighted_sum(m, n, weights, rows, acc);
    for (size_t j = 0; j < n; ++j) H[j] = V[j] + acc[j];
    if (space == FEDMM_SPACE_STATISTIC) {
        const int status =
            fedmm_dictionary_sa_step(p, K, S, H, gamma, eta, project, S_new, D, step_work, iwork, blas);
        if (status != FEDMM_OK) return status;
        for (fedmm_blas_int i = 0; i < p; ++i) /* theta_vector: D row-major */
            for (fedmm_blas_int k = 0; k < K; ++k) theta_new[(size_t)i * K + k] = D[(size_t)k * p + i];
        dist[0] = fedmm_squared_distance(q, S_new, S);
        memcpy(S, S_new, q * sizeof(double));
    } else {
        /* theta_{t+1} = theta_t + gamma H (product, then sum); Theta is the whole space */
        for (size_t j = 0; j < pK; ++j) {
            const double step = gamma * H[j];
            theta_new[j] = theta[j] + step;
        }
        for (size_t j = 0; j < pK; ++j)
            if (!isfinite(theta_new[j])) return FEDMM_ENONFINITE;
        for (fedmm_blas_int i = 0; i < p; ++i)
            for (fedmm_blas_int k = 0; k < K; ++k) D[(size_t)k * p + i] = theta_new[(size_t)i * K + k];
        dist[0] = 0.0;
    }
    dist[1] = fedmm_squared_distance(pK, theta_new, theta);
    memcpy(theta, theta_new, pK * sizeof(double));
    if (alpha != 0.0)
        for (size_t j = 0; j < n; ++j) V[j] = V[j] + alpha * acc[j];
    return FEDMM_OK;
}
