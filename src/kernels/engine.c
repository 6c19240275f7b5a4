/* SPDX-License-Identifier: BSD-3-Clause
 *
 * engine.c -- the FedMM round, compiled, for any model that fills a
 * fedmm_model_t (FedMM paper, Algorithm 2, and Algorithm 4 as a compression).
 *
 * A client round (lines 5-11) and the server step (lines 13-17) are written
 * once here, against the model interface; the Python reference backend
 * (fedmm.algorithms.Client.step / Server.aggregate) performs the same
 * operations in the same order on the same operands, with the model's own
 * compiled callbacks, so both backends give the same numbers bit for bit.
 * Elementwise updates follow NumPy's evaluation of the Python expressions
 * (a product, then a sum: no fused multiply-add).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <float.h>
#include <math.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "fedmm_kernels.h"
#include "internal.h"

/* doubles per int64 / per fedmm_blas_int rounded up, for workspaces carved from doubles */
#define DOUBLES_FOR_INTS(n) (((size_t)(n) * sizeof(fedmm_blas_int) + sizeof(double) - 1) / sizeof(double))

void fedmm_weighted_sum(int64_t m, size_t q, const double *weights, const double *const *rows,
                        double *out)
{
    memset(out, 0, q * sizeof(double));
    for (int64_t k = 0; k < m; ++k) {
        const double w = weights[k], *x = rows[k];
        for (size_t j = 0; j < q; ++j) out[j] = out[j] + w * x[j];
    }
}

void fedmm_weighted_sum_columns(int64_t m, size_t lo, size_t hi, const double *weights,
                                const double *const *rows, double *out)
{
    for (size_t j = lo; j < hi; ++j) out[j] = 0.0;
    for (int64_t k = 0; k < m; ++k) {
        const double w = weights[k], *x = rows[k];
        for (size_t j = lo; j < hi; ++j) out[j] = out[j] + w * x[j];
    }
}

/* sum of squares of (a - b) * 2^-e in the fixed order (s0 + s1) + (s2 + s3)
 * (e = 0: the plain sum; the scaling by a power of two is exact) */
static double sum_squares(size_t n, const double *a, const double *b, int e)
{
    /* four partial sums, combined as (s0 + s1) + (s2 + s3): a fixed order */
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    size_t j = 0;
    if (e == 0) {
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
    } else {
        for (; j + 4 <= n; j += 4) {
            const double d0 = ldexp(a[j] - b[j], -e), d1 = ldexp(a[j + 1] - b[j + 1], -e);
            const double d2 = ldexp(a[j + 2] - b[j + 2], -e), d3 = ldexp(a[j + 3] - b[j + 3], -e);
            s0 += d0 * d0;
            s1 += d1 * d1;
            s2 += d2 * d2;
            s3 += d3 * d3;
        }
        for (; j < n; ++j) {
            const double d0 = ldexp(a[j] - b[j], -e);
            s0 += d0 * d0;
        }
    }
    return (s0 + s1) + (s2 + s3);
}

/* Below this plain sum, some squares may have underflowed (|d| < 2^-511
 * gives d * d < 2^-1022); at or above it, the lost terms are far below half
 * an ulp of the sum. */
#define SQDIST_SAFE_MIN 0x1p-900

double fedmm_squared_distance(size_t n, const double *a, const double *b)
{
    const double plain = sum_squares(n, a, b, 0);
    if (isnan(plain) || (isfinite(plain) && plain >= SQDIST_SAFE_MIN)) return plain;
    /* the plain sum overflowed or may have underflowed: scale by the power of
     * two of max |a_j - b_j| (as dnrm2 does), so that every scaled square is
     * in [0, 4) and the sum in [0, 4n), then scale back once */
    double amax = 0.0;
    for (size_t j = 0; j < n; ++j) {
        const double d = fabs(a[j] - b[j]);
        if (d > amax) amax = d;
    }
    if (amax == 0.0) return plain;           /* +0.0: every difference is zero */
    if (isinf(amax)) return amax;            /* a difference overflowed: inf */
    if (isfinite(plain) && amax >= 0x1p-450) /* no square can have underflowed */
        return plain;
    int e;
    (void)frexp(amax, &e); /* amax in [2^(e-1), 2^e) */
    const double ssq = sum_squares(n, a, b, e);
    /* ssq * 2^(2e), rounded once: inf when the true value exceeds DBL_MAX */
    return ldexp(ssq, 2 * e);
}

int fedmm_model_check(const fedmm_model_t *model)
{
    if (model == NULL || model->q < 1 || model->d < 1 || model->theta_size < model->d ||
        model->sample_size < 1 || model->memory_size < 0 || model->statistic == NULL ||
        model->statistic_work == NULL || model->T == NULL ||
        (model->theta_size > model->d && model->derive == NULL))
        return FEDMM_EINVAL;
    return FEDMM_OK;
}

int64_t fedmm_message_size(const fedmm_model_t *model, const fedmm_round_config_t *cfg)
{
    return cfg->space == FEDMM_SPACE_PARAMETER ? model->d : model->q;
}

static int check_config(const fedmm_model_t *model, const fedmm_round_config_t *cfg)
{
    if (fedmm_model_check(model) != FEDMM_OK || cfg == NULL ||
        (cfg->space != FEDMM_SPACE_STATISTIC && cfg->space != FEDMM_SPACE_PARAMETER) ||
        (cfg->mode != FEDMM_MODE_SELECT && cfg->mode != FEDMM_MODE_COMPRESS &&
         cfg->mode != FEDMM_MODE_COMPRESS_LOCAL) ||
        (cfg->oracle != FEDMM_ORACLE_MINIBATCH && cfg->oracle != FEDMM_ORACLE_FULL) ||
        (cfg->oracle == FEDMM_ORACLE_MINIBATCH && cfg->batch < 1) || !(cfg->p > 0.0 && cfg->p <= 1.0) ||
        !(cfg->control_variate_step >= 0.0) || !isfinite(cfg->control_variate_step) || !(cfg->statistic_max >= 0.0))
        return FEDMM_EINVAL;
    return FEDMM_OK;
}

size_t fedmm_client_round_work(const fedmm_model_t *model, const fedmm_round_config_t *cfg,
                               int64_t max_n_samples)
{
    const int64_t b = cfg->oracle == FEDMM_ORACLE_FULL || cfg->batch > max_n_samples ? max_n_samples
                                                                                       : cfg->batch;
    const size_t stat = model->statistic_work(model->ctx, b);
    /* S_i, Delta (message length <= max(q, d)), then T's parameter and the server workspace in
     * Theta-space (after the statistic: its workspace is free again) */
    const size_t n = (size_t)(model->q > model->d ? model->q : model->d);
    const size_t param = cfg->space == FEDMM_SPACE_PARAMETER
                             ? (size_t)model->q + (size_t)model->theta_size + model->server_work
                             : 0;
    return (size_t)model->q + n + (stat > param ? stat : param);
}

size_t fedmm_client_round_iwork(int64_t max_n_samples)
{
    /* the minibatch indices and the partial shuffle's workspace */
    return 2 * (size_t)(max_n_samples > 0 ? max_n_samples : 1);
}

int fedmm_client_round(const fedmm_model_t *model, const fedmm_round_config_t *cfg,
                       fedmm_client_t *client, uint64_t t, int coin, const double *theta,
                       const double *ref, double *out, int *sent, int64_t *n_unconverged,
                       double *work, int64_t *iwork)
{
    if (check_config(model, cfg) != FEDMM_OK || client == NULL || client->data == NULL ||
        client->n_samples < 1 || client->V == NULL || theta == NULL || ref == NULL || out == NULL ||
        sent == NULL || n_unconverged == NULL || work == NULL || iwork == NULL)
        return FEDMM_EINVAL;
    const size_t n = (size_t)fedmm_message_size(model, cfg);
    double *stat = work;                   /* q */
    double *delta = stat + model->q;       /* n */
    double *scratch = delta + (model->q > model->d ? model->q : model->d);
    fedmm_philox_t state;
    fedmm_bitgen_t rng;
    const uint64_t counter[4] = {0, t, 0, 0};
    fedmm_philox_seek(&state, client->key, counter);
    fedmm_philox_bitgen(&state, &rng);
    *sent = 0;
    int u = 1;
    if (cfg->mode == FEDMM_MODE_COMPRESS_LOCAL)
        u = fedmm_philox_next_double(&state) < cfg->p;
    else if (cfg->mode == FEDMM_MODE_COMPRESS)
        u = coin != 0;
    const int64_t *idx = NULL;
    int64_t b = client->n_samples;
    if (cfg->oracle == FEDMM_ORACLE_MINIBATCH) {
        b = cfg->batch < client->n_samples ? cfg->batch : client->n_samples;
        const int status =
            fedmm_sample_without_replacement(&rng, client->n_samples, b, iwork, iwork + b);
        if (status != FEDMM_OK) return status;
        idx = iwork;
    }
    int status = model->statistic(model->ctx, theta, client->data, client->n_samples, idx, b,
                                  client->memory, stat, n_unconverged, scratch);
    if (status != FEDMM_OK) return status;
    const double *local = stat;
    if (cfg->space == FEDMM_SPACE_PARAMETER) {
        /* theta_{t+1,i} = T(Pi(S_{t+1,i})): Pi is the identity on plain oracles, but keeps T defined */
        double *s = scratch, *param = s + model->q, *server_work = param + model->theta_size;
        memcpy(s, stat, (size_t)model->q * sizeof(double));
        if (model->project != NULL) {
            status = model->project(model->ctx, s, server_work);
            if (status != FEDMM_OK) return status;
        }
        memcpy(param, theta, (size_t)model->theta_size * sizeof(double)); /* T's warm start */
        status = model->T(model->ctx, s, param, server_work);
        if (status != FEDMM_OK) return status;
        local = param;
    }
    /* Delta = (L - ref) - V */
    for (size_t j = 0; j < n; ++j) delta[j] = (local[j] - ref[j]) - client->V[j];
    if (!u) return FEDMM_OK; /* (U/p) Quant(Delta) = 0: nothing sent, V unchanged */
    status = fedmm_quantizer_apply(&client->quantizer, delta, n, &rng, out);
    if (status != FEDMM_OK) return status;
    if (cfg->control_variate_step != 0.0) {
        const double v_step = cfg->control_variate_step / cfg->p;
        for (size_t j = 0; j < n; ++j) client->V[j] = client->V[j] + v_step * out[j];
    }
    *sent = 1;
    return FEDMM_OK;
}

int fedmm_server_select(const uint64_t key[2], uint64_t t, int64_t n, int64_t count, double p,
                        int mode, int64_t *ids, int64_t *m, uint8_t *coins, int64_t *work)
{
    if (key == NULL || n < 1 || count > n || ids == NULL || m == NULL || work == NULL ||
        (mode == FEDMM_MODE_COMPRESS && coins == NULL) ||
        (mode != FEDMM_MODE_SELECT && mode != FEDMM_MODE_COMPRESS && mode != FEDMM_MODE_COMPRESS_LOCAL))
        return FEDMM_EINVAL;
    if (mode == FEDMM_MODE_COMPRESS_LOCAL) {
        for (int64_t i = 0; i < n; ++i) ids[i] = i;
        *m = n;
        return FEDMM_OK;
    }
    fedmm_philox_t state;
    fedmm_bitgen_t rng;
    const uint64_t counter[4] = {0, t, 0, 0};
    fedmm_philox_seek(&state, key, counter);
    int64_t k = 0;
    if (count >= 0) {
        fedmm_philox_bitgen(&state, &rng);
        const int status = fedmm_sample_without_replacement(&rng, n, count, ids, work);
        if (status != FEDMM_OK) return status;
        if ((double)count * (double)count < 4.0 * (double)n) {
            for (int64_t a = 1; a < count; ++a) { /* insertion sort: increasing ids */
                const int64_t v = ids[a];
                int64_t j = a - 1;
                while (j >= 0 && ids[j] > v) {
                    ids[j + 1] = ids[j];
                    --j;
                }
                ids[j + 1] = v;
            }
        } else { /* the same increasing ids in O(n): flag the drawn ones, then scan */
            memset(work, 0, (size_t)n * sizeof(int64_t));
            for (int64_t a = 0; a < count; ++a) work[ids[a]] = 1;
            int64_t a = 0;
            for (int64_t i = 0; i < n; ++i)
                if (work[i]) ids[a++] = i;
        }
        k = count;
        if (mode == FEDMM_MODE_COMPRESS) {
            memset(coins, 0, (size_t)n);
            for (int64_t a = 0; a < count; ++a) coins[ids[a]] = 1;
        }
    } else {
        if (!(p > 0.0 && p <= 1.0)) return FEDMM_EINVAL;
        for (int64_t i = 0; i < n; ++i) {
            const int u = fedmm_philox_next_double(&state) < p;
            if (mode == FEDMM_MODE_COMPRESS) coins[i] = (uint8_t)u;
            if (u) ids[k++] = i;
        }
    }
    if (mode == FEDMM_MODE_COMPRESS) {
        for (int64_t i = 0; i < n; ++i) ids[i] = i;
        k = n;
    }
    *m = k;
    return FEDMM_OK;
}

size_t fedmm_server_update_work(const fedmm_model_t *model, const fedmm_round_config_t *cfg)
{
    const size_t n = (size_t)fedmm_message_size(model, cfg);
    /* H (n), S' (q), theta' (theta_size), the model's workspace */
    return n + (size_t)model->q + (size_t)model->theta_size + model->server_work;
}

size_t fedmm_server_step_work(const fedmm_model_t *model, const fedmm_round_config_t *cfg, int64_t m)
{
    const size_t n = (size_t)fedmm_message_size(model, cfg);
    /* acc (n), the row pointers (m), then fedmm_server_update's workspace */
    return n + (size_t)(m > 0 ? m : 0) + fedmm_server_update_work(model, cfg);
}

/* The first offending value decides (non-finite or beyond bound), as a plain scan would say.  Every message
 * of every client is checked (a scan with two branches per value was 2% of a dictionary-learning round), so
 * blocks of CHECK_BLOCK values are screened first without branches, two lanes at a time with SSE2 where the
 * compiler targets it (cmpnle is true for NaN too); only a block that fails the screen is scanned value by
 * value. */
#define CHECK_BLOCK 64
static int check_block_fails(const double *x, double lim)
{
#if defined(__SSE2__)
    const __m128d sign = _mm_set1_pd(-0.0), l = _mm_set1_pd(lim);
    __m128d bad = _mm_setzero_pd();
    for (int j = 0; j < CHECK_BLOCK; j += 2)
        bad = _mm_or_pd(bad, _mm_cmpnle_pd(_mm_andnot_pd(sign, _mm_loadu_pd(x + j)), l));
    return _mm_movemask_pd(bad) != 0;
#else
    int bad = 0;
    for (int j = 0; j < CHECK_BLOCK; ++j) bad |= !(fabs(x[j]) <= lim);
    return bad;
#endif
}

static int check_range_scan(size_t n, const double *x, double bound)
{
    for (size_t j = 0; j < n; ++j) {
        if (!isfinite(x[j])) return FEDMM_ENONFINITE;
        if (fabs(x[j]) > bound) return FEDMM_ERANGE;
    }
    return FEDMM_OK;
}

int fedmm_check_range(size_t n, const double *x, double bound)
{
    const double lim = bound < DBL_MAX ? bound : DBL_MAX; /* also refuses +-inf when bound is infinite */
    size_t j0 = 0;
    for (; j0 + CHECK_BLOCK <= n; j0 += CHECK_BLOCK) {
        if (check_block_fails(x + j0, lim)) return check_range_scan(n - j0, x + j0, bound);
    }
    return check_range_scan(n - j0, x + j0, bound);
}

double fedmm_message_bound(const fedmm_round_config_t *cfg)
{
    return cfg->space == FEDMM_SPACE_STATISTIC && cfg->statistic_max > 0.0 ? cfg->statistic_max : INFINITY;
}

int fedmm_server_step(const fedmm_model_t *model, const fedmm_round_config_t *cfg, int64_t m,
                      const double *weights, const double *values, double gamma, double *S,
                      double *V, double *theta, double *dist, double *work)
{
    if (check_config(model, cfg) != FEDMM_OK || m < 0 ||
        (m > 0 && (weights == NULL || values == NULL)) || V == NULL || theta == NULL ||
        dist == NULL || work == NULL || !isfinite(gamma) ||
        (cfg->space == FEDMM_SPACE_STATISTIC && S == NULL))
        return FEDMM_EINVAL;
    const size_t n = (size_t)fedmm_message_size(model, cfg);
    double *acc = work;
    const double **rows = (const double **)(acc + n); /* m pointers in m doubles */
    double *update_work = acc + n + (m > 0 ? m : 0);
    /* the messages within the range the model handles (S-space), as Server._decode requires */
    const double bound = fedmm_message_bound(cfg);
    for (int64_t k = 0; k < m; ++k) {
        rows[k] = values + (size_t)k * n;
        const int status = fedmm_check_range(n, rows[k], bound);
        if (status != FEDMM_OK) return status;
    }
    /* acc = sum_k (mu_i / p) Quant_i in client order */
    fedmm_weighted_sum(m, n, weights, rows, acc);
    return fedmm_server_update(model, cfg, acc, gamma, S, V, theta, dist, update_work);
}

int fedmm_server_update(const fedmm_model_t *model, const fedmm_round_config_t *cfg, const double *acc,
                        double gamma, double *S, double *V, double *theta, double *dist, double *work)
{
    if (check_config(model, cfg) != FEDMM_OK || acc == NULL || V == NULL || theta == NULL ||
        dist == NULL || work == NULL || !isfinite(gamma) ||
        (cfg->space == FEDMM_SPACE_STATISTIC && S == NULL))
        return FEDMM_EINVAL;
    const size_t n = (size_t)fedmm_message_size(model, cfg), q = (size_t)model->q;
    const size_t d = (size_t)model->d, theta_size = (size_t)model->theta_size;
    double *H = work, *S_new = H + n, *theta_new = S_new + q;
    double *model_work = theta_new + theta_size;
    int status;
    /* H, S' (after Pi) and the new V within the range the model handles (S-space), theta' finite, as
     * Server.candidate_step requires (a refused step changes nothing) */
    const double bound = fedmm_message_bound(cfg);
    /* H = V_t + acc */
    for (size_t j = 0; j < n; ++j) H[j] = V[j] + acc[j];
    status = fedmm_check_range(n, H, bound);
    if (status != FEDMM_OK) return status;
    memcpy(theta_new, theta, theta_size * sizeof(double)); /* T's warm start */
    if (cfg->space == FEDMM_SPACE_STATISTIC) {
        for (size_t j = 0; j < q; ++j) {
            const double step = gamma * H[j];
            S_new[j] = S[j] + step;
        }
        for (size_t j = 0; j < q; ++j)
            if (!isfinite(S_new[j])) return FEDMM_ENONFINITE;
        if (cfg->project && model->project != NULL) {
            status = model->project(model->ctx, S_new, model_work);
            if (status != FEDMM_OK) return status;
        }
        status = fedmm_check_range(q, S_new, bound);
        if (status != FEDMM_OK) return status;
        status = model->T(model->ctx, S_new, theta_new, model_work);
        if (status != FEDMM_OK) return status;
    } else {
        for (size_t j = 0; j < d; ++j) {
            const double step = gamma * H[j];
            theta_new[j] = theta[j] + step;
        }
        for (size_t j = 0; j < d; ++j)
            if (!isfinite(theta_new[j])) return FEDMM_ENONFINITE;
        if (cfg->project && model->project_theta != NULL) {
            status = model->project_theta(model->ctx, theta_new, model_work);
            if (status != FEDMM_OK) return status;
        }
        if (model->derive != NULL) {
            status = model->derive(model->ctx, theta_new, model_work);
            if (status != FEDMM_OK) return status;
        }
    }
    status = fedmm_check_range(d, theta_new, INFINITY);
    if (status != FEDMM_OK) return status;
    if (cfg->control_variate_step != 0.0)
        for (size_t j = 0; j < n; ++j) {
            const double v = V[j] + cfg->control_variate_step * acc[j];
            if (!isfinite(v)) return FEDMM_ENONFINITE;
            if (fabs(v) > bound) return FEDMM_ERANGE;
        }
    /* commit */
    if (cfg->space == FEDMM_SPACE_STATISTIC) {
        dist[0] = fedmm_squared_distance(q, S_new, S);
        memcpy(S, S_new, q * sizeof(double));
    } else {
        dist[0] = 0.0;
    }
    dist[1] = fedmm_squared_distance(d, theta_new, theta);
    memcpy(theta, theta_new, theta_size * sizeof(double));
    if (cfg->control_variate_step != 0.0)
        for (size_t j = 0; j < n; ++j) V[j] = V[j] + cfg->control_variate_step * acc[j];
    return FEDMM_OK;
}

/* ---- dictionary learning -------------------------------------------------- */
/* The compiled parameter: the dictionary row-major (the flat parameter, p K),
 * its column-major copy (p K), then its Gram matrix D^T D and that matrix's
 * inverse (fedmm__gram_form, fedmm__gram_size(K) doubles), formed once per
 * parameter by T or derive instead of once per client statistic: every
 * client of a round (and of the start exchange) reads the same ones, and a
 * client's statistic is what it would be with its own, bit for bit. */

static size_t dictionary_statistic_work(const void *ctx, int64_t b)
{
    const fedmm_dictionary_model_t *c = ctx;
    /* Z (p x b), H (K x b), A (K x K), B^T (p x K column-major), the kernel's workspace */
    return (size_t)(c->p + c->K) * (size_t)b + (size_t)c->K * c->K + (size_t)c->p * c->K +
           fedmm_dictionary_statistics_work(c->p, c->K, (fedmm_blas_int)b, 0);
}

static int dictionary_statistic(const void *ctx, const double *theta, const double *data,
                                int64_t n_samples, const int64_t *idx, int64_t b, double *memory,
                                double *out, int64_t *n_unconverged, double *work)
{
    const fedmm_dictionary_model_t *c = ctx;
    const fedmm_blas_int p = c->p, K = c->K;
    if (b < 1 || b > n_samples || b > (int64_t)0x7fffffff) return FEDMM_EINVAL;
    const size_t KK = (size_t)K * K, pK = (size_t)p * K;
    double *Z = work, *H = Z + (size_t)p * b, *A = H + (size_t)K * b, *Bt = A + KK;
    double *stats_work = Bt + pK;
    /* the minibatch as columns: the data's own rows when they are the first b (no copy), else gathered */
    const double *Zb = idx == NULL ? data : Z;
    for (int64_t j = 0; j < b; ++j) {
        const int64_t row = idx == NULL ? j : idx[j];
        if (idx != NULL) memcpy(Z + (size_t)j * p, data + (size_t)row * p, (size_t)p * sizeof(double));
        if (memory) memcpy(H + (size_t)j * K, memory + (size_t)row * K, (size_t)K * sizeof(double));
    }
    const int64_t offsets[2] = {0, b};
    /* theta: the row-major dictionary, the column-major copy the solver reads, then its Gram matrix */
    fedmm_lasso_options_t opts = c->lasso;
    opts.warm_start = memory != NULL;
    fedmm__gram_t gram;
    fedmm__gram_view(K, theta + 2 * pK, &gram);
    int status = fedmm__dictionary_statistics_gram(p, K, (fedmm_blas_int)b, theta + pK, p, Zb, p, &opts, 1,
                                                   offsets, H, A, Bt, NULL, NULL, n_unconverged,
                                                   stats_work, c->blas, NULL, &gram);
    if (status != FEDMM_OK) return status;
    if (memory)
        for (int64_t j = 0; j < b; ++j) {
            const int64_t row = idx == NULL ? j : idx[j];
            memcpy(memory + (size_t)row * K, H + (size_t)j * K, (size_t)K * sizeof(double));
        }
    /* S = [vec(H H^T / b), vec(Z H^T / b)], both blocks row-major */
    memcpy(out, A, KK * sizeof(double));
    for (fedmm_blas_int i = 0; i < p; ++i)
        for (fedmm_blas_int k = 0; k < K; ++k) out[KK + (size_t)i * K + k] = Bt[(size_t)k * p + i];
    return FEDMM_OK;
}

static int dictionary_project(const void *ctx, double *s, double *work)
{
    const fedmm_dictionary_model_t *c = ctx;
    double *psd_work = work;
    fedmm_blas_int *iwork = (fedmm_blas_int *)(work + fedmm_project_psd_work(c->K));
    /* the A block is symmetric-invariant data: row- or column-major alike */
    return fedmm_project_psd(c->K, 1, s, s, psd_work, iwork, NULL, c->blas);
}

static int dictionary_T(const void *ctx, const double *s, double *theta, double *work)
{
    const fedmm_dictionary_model_t *c = ctx;
    const size_t pK = (size_t)c->p * c->K;
    double *D = theta + pK; /* column-major */
    const int status = fedmm_dictionary_update_ridge_flat(c->p, c->K, s, c->eta, D, c->p, work, c->blas);
    if (status != FEDMM_OK) return status;
    for (fedmm_blas_int i = 0; i < c->p; ++i)
        for (fedmm_blas_int k = 0; k < c->K; ++k) theta[(size_t)i * c->K + k] = D[(size_t)k * c->p + i];
    return fedmm__gram_form(c->p, c->K, D, c->p, theta + 2 * pK, work, c->blas);
}

static int dictionary_derive(const void *ctx, double *theta, double *work)
{
    const fedmm_dictionary_model_t *c = ctx;
    const size_t pK = (size_t)c->p * c->K;
    double *D = theta + pK;
    for (fedmm_blas_int i = 0; i < c->p; ++i)
        for (fedmm_blas_int k = 0; k < c->K; ++k) D[(size_t)k * c->p + i] = theta[(size_t)i * c->K + k];
    return fedmm__gram_form(c->p, c->K, D, c->p, theta + 2 * pK, work, c->blas);
}

int fedmm_dictionary_model(const fedmm_dictionary_model_t *ctx, fedmm_model_t *model)
{
    if (ctx == NULL || model == NULL || ctx->p < 1 || ctx->K < 1 || !(ctx->lasso.lam > 0.0) ||
        ctx->lasso.positive != 0 || !(ctx->eta >= 0.0) || !(ctx->lasso.tol >= 0.0) ||
        ctx->lasso.max_iter < 1 || ctx->blas == NULL)
        return FEDMM_EINVAL;
    const size_t psd = fedmm_project_psd_work(ctx->K) + DOUBLES_FOR_INTS(fedmm_project_psd_iwork(ctx->K));
    const size_t ridge = fedmm_dictionary_update_ridge_flat_work(ctx->p, ctx->K);
    const size_t gram = (size_t)ctx->K * ctx->K; /* fedmm__gram_form's workspace */
    size_t server_work = psd > ridge ? psd : ridge;
    if (gram > server_work) server_work = gram;
    static const fedmm__model_ops_t ops = {dictionary_statistic_work, dictionary_statistic, dictionary_project,
                                           dictionary_T, dictionary_derive, NULL};
    const int64_t d = (int64_t)ctx->p * ctx->K;
    fedmm__model_fill(model, ctx, &ops,
                      (fedmm__model_sizes_t){(int64_t)ctx->K * ctx->K + d, d,
                                             2 * d + (int64_t)fedmm__gram_size(ctx->K), ctx->p, ctx->K,
                                             server_work});
    return FEDMM_OK;
}

/* ---- per-sample models (numba cfuncs and other plain functions) ------------ */

static size_t sample_statistic_work(const void *ctx, int64_t b)
{
    (void)b;
    return (size_t)((const fedmm_sample_model_t *)ctx)->q; /* one sample's statistic */
}

static int sample_statistic(const void *ctx, const double *theta, const double *data, int64_t n_samples,
                            const int64_t *idx, int64_t b, double *memory, double *out,
                            int64_t *n_unconverged, double *work)
{
    (void)memory;
    (void)n_unconverged;
    const fedmm_sample_model_t *c = ctx;
    if (b < 1 || b > n_samples) return FEDMM_EINVAL;
    const size_t q = (size_t)c->q;
    memset(out, 0, q * sizeof(double));
    for (int64_t j = 0; j < b; ++j) {
        const int64_t row = idx == NULL ? j : idx[j];
        const int status = c->sample_statistic(c->constants, theta, data + (size_t)row * c->sample_size, work);
        if (status != 0) return status < 0 ? status : FEDMM_EINVAL;
        for (size_t k = 0; k < q; ++k) out[k] = out[k] + work[k];
    }
    const double count = (double)b;
    for (size_t k = 0; k < q; ++k) out[k] = out[k] / count;
    return FEDMM_OK;
}

static int sample_T(const void *ctx, const double *s, double *theta, double *work)
{
    (void)work;
    const fedmm_sample_model_t *c = ctx;
    const int status = c->T(c->constants, s, theta);
    return status == 0 ? FEDMM_OK : (status < 0 ? status : FEDMM_EINVAL);
}

static int sample_project(const void *ctx, double *s, double *work)
{
    (void)work;
    const fedmm_sample_model_t *c = ctx;
    const int status = c->project(c->constants, s);
    return status == 0 ? FEDMM_OK : (status < 0 ? status : FEDMM_EINVAL);
}

int fedmm_sample_model(const fedmm_sample_model_t *ctx, fedmm_model_t *model)
{
    if (ctx == NULL || model == NULL || ctx->q < 1 || ctx->d < 1 || ctx->sample_size < 1 ||
        ctx->sample_statistic == NULL || ctx->T == NULL)
        return FEDMM_EINVAL;
    static const fedmm__model_ops_t ops = {sample_statistic_work, sample_statistic, sample_project, sample_T,
                                           NULL, NULL};
    static const fedmm__model_ops_t ops_unprojected = {sample_statistic_work, sample_statistic, NULL, sample_T,
                                                       NULL, NULL};
    fedmm__model_fill(model, ctx, ctx->project != NULL ? &ops : &ops_unprojected,
                      (fedmm__model_sizes_t){ctx->q, ctx->d, ctx->d, ctx->sample_size, 0, 0});
    return FEDMM_OK;
}
