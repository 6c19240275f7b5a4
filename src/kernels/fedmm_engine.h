/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_engine.h -- the FedMM round engine: aggregation, update sizes, client round, server step (engine.c).
 *
 * One family of the public C API; fedmm_kernels.h includes every family
 * header and states the conventions they share (status codes, column-major
 * matrices, caller-provided workspaces).  This header compiles on its own.
 */
#ifndef FEDMM_ENGINE_H
#define FEDMM_ENGINE_H

#include "fedmm_common.h"
#include "fedmm_model.h"
#include "fedmm_quantize.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- aggregation and update sizes (engine.c) ----------------------------- */
#define FEDMM_SPACE_STATISTIC 0
#define FEDMM_SPACE_PARAMETER 1

/* The server's aggregate of the decoded messages (FedMM Alg. 2 line 13):
 * out = sum_k weights[k] * rows[k] (each of length q), accumulated in the
 * order k = 0..m-1 as out = out + weights[k] * rows[k] (one rounding for the
 * product, one for the sum: no fused multiply-add), i.e. exactly what the
 * NumPy expression does.  m = 0 gives zeros. */
void fedmm_weighted_sum(int64_t m, size_t q, const double *weights, const double *const *rows,
                        double *out);
/* Columns [lo, hi) of fedmm_weighted_sum (out[j] for lo <= j < hi only, the
 * same operations in the same order: the same bits), so that disjoint column
 * ranges can be summed on different threads. */
void fedmm_weighted_sum_columns(int64_t m, size_t lo, size_t hi, const double *weights,
                                const double *const *rows, double *out);

/* ||a - b||^2 over n doubles, as four partial sums over j mod 4 (the tail
 * goes to the first) combined as (s0 + s1) + (s2 + s3): one fixed order of
 * operations, shared by every recorded update size (E^s, E^{p,s}, E^p).
 * That plain sum is returned whenever it is finite and >= 2^-900 (no square
 * can have over- or underflowed to matter).  Otherwise the differences are
 * scaled by the power of two 2^e of max |a_j - b_j| (exact), summed in the
 * same order and scaled back once by 2^(2e) (as LAPACK's dnrm2 scales):
 * finite whenever the true value is representable, +inf when it exceeds
 * DBL_MAX (or a difference a_j - b_j overflows), NaN if an input is NaN. */
double fedmm_squared_distance(size_t n, const double *a, const double *b);

/* ---- the FedMM round engine (engine.c) ---------------------------------- */
/* How a round runs (FedMM paper Alg. 2; Alg. 4 with mode COMPRESS*).
 *   space    FEDMM_SPACE_STATISTIC (FedMM: messages in S-space, length q) or
 *            FEDMM_SPACE_PARAMETER (the Theta-space baseline: messages are
 *            theta vectors, length d; the client sends T(Pi(S_i)));
 *   mode     FEDMM_MODE_SELECT (Alg. 2: the server contacts the active
 *            clients), FEDMM_MODE_COMPRESS (Alg. 4: every client computes;
 *            the coin U_i, drawn by the server, decides whether it sends),
 *            FEDMM_MODE_COMPRESS_LOCAL (Alg. 4, U_i ~ Bernoulli(p) drawn by
 *            the client as the first draw of its round stream);
 *   oracle   FEDMM_ORACLE_MINIBATCH (batch rows without replacement, batch
 *            capped at the client's n_samples) or FEDMM_ORACLE_FULL;
 *   project  apply Pi (or project_theta) in the server step;
 *   p        participation probability (m/n for a fixed count m);
 *   control_variate_step  alpha: V_i <- V_i + (alpha/p) Quant(Delta_i),
 *            V <- V + alpha sum_i (mu_i/p) Quant(Delta_i);
 *   statistic_max  S-space: the largest magnitude of an entry of a message,
 *            of H, of S' and of the new V that the server step accepts (the
 *            range the model's Pi and T handle; 0 or +inf: any finite
 *            value).  Theta-space: unused (finite values). */
#define FEDMM_MODE_SELECT 0
#define FEDMM_MODE_COMPRESS 1
#define FEDMM_MODE_COMPRESS_LOCAL 2
#define FEDMM_ORACLE_MINIBATCH 0
#define FEDMM_ORACLE_FULL 1
typedef struct fedmm_round_config {
    int space;
    int mode;
    int oracle;
    int project;
    int64_t batch;
    double p;
    double control_variate_step;
    double statistic_max;
} fedmm_round_config_t;

/* One client as the engine sees it: its data, per-sample memory (NULL or
 * n_samples x memory_size), control variate V (message length), the key of
 * its counter-based Philox streams (round t draws from counter (0, t, 0, 0))
 * and its compressor. */
typedef struct fedmm_client {
    const double *data;
    int64_t n_samples;
    double *memory;
    double *V;
    uint64_t key[2];
    fedmm_quantizer_t quantizer;
} fedmm_client_t;

/* Message length of a configuration: q (S-space) or d (Theta-space). */
int64_t fedmm_message_size(const fedmm_model_t *model, const fedmm_round_config_t *cfg);

/* One client's part of round t (Alg. 2 lines 5-11, Alg. 4 lines 4-8), what
 * fedmm.algorithms.Client.step computes:
 *   1. the stream Philox(key, (0, t, 0, 0)); COMPRESS_LOCAL: U = (next_double < p);
 *      COMPRESS: U = coin (the server's); SELECT: U = 1;
 *   2. idx = fedmm_sample_without_replacement(stream, n_samples, min(batch, n_samples))
 *      (minibatch oracle), or all rows (full oracle);
 *   3. S_i = model statistic at theta over idx (with the client's memory);
 *   4. L = S_i (S-space) or T(Pi(S_i))[0..d) (Theta-space);
 *   5. Delta = (L - ref) - V (ref: S_t, or theta_t[0..d));
 *   6. U = 0: *sent = 0 and nothing else changes; else out = Quant(Delta)
 *      drawn from the same stream (fedmm_quantizer_apply), *sent = 1, and
 *      V <- V + (alpha/p) out when alpha != 0.
 * work: fedmm_client_round_work(model, cfg, max n_samples) doubles; iwork:
 * fedmm_client_round_iwork(max n_samples) int64. */
size_t fedmm_client_round_work(const fedmm_model_t *model, const fedmm_round_config_t *cfg,
                               int64_t max_n_samples);
size_t fedmm_client_round_iwork(int64_t max_n_samples);
int fedmm_client_round(const fedmm_model_t *model, const fedmm_round_config_t *cfg,
                       fedmm_client_t *client, uint64_t t, int coin, const double *theta,
                       const double *ref, double *out, int *sent, int64_t *n_unconverged,
                       double *work, int64_t *iwork);

/* The server's selection of round t (Alg. 2 line 2), drawn from
 * Philox(key, (0, t, 0, 0)): count >= 0: count distinct clients
 * (fedmm_sample_without_replacement), sorted; count < 0: independent coins
 * next_double < p for i = 0..n-1.  SELECT: ids = the active clients;
 * COMPRESS: ids = all n clients and coins[i] = U_i; COMPRESS_LOCAL: ids = all
 * clients, nothing drawn.  ids: n int64, *m receives their number; coins: n
 * bytes (written for COMPRESS only; may be NULL otherwise); work: n int64. */
int fedmm_server_select(const uint64_t key[2], uint64_t t, int64_t n, int64_t count, double p,
                        int mode, int64_t *ids, int64_t *m, uint8_t *coins, int64_t *work);

/* The server's part of a round (Alg. 2 lines 13-17, then T for line 4):
 *   acc = sum_k weights[k] values[k]  (fedmm_weighted_sum, k in order;
 *         weights[k] = mu_i / p of the k-th sender, values m rows of the
 *         message length),  H = V + acc,
 *   S-space:     S' = S + gamma H; Pi(S') when cfg->project; theta = T(S');
 *                dist[0] = ||S' - S||^2;
 *   Theta-space: theta' = theta + gamma H; project_theta when cfg->project;
 *                derive; dist[0] = 0;
 *   dist[1] = ||theta'[0..d) - theta[0..d)||^2;  V <- V + alpha acc.
 * S, V and theta are updated in place (S unused in Theta-space), and only
 * when the step succeeds.  FEDMM_ENONFINITE when an entry of a message, of
 * H, of S' or theta' or of the new V is NaN or infinite; FEDMM_ERANGE when a
 * finite one of a message, of H, of S' (after Pi) or of the new V exceeds
 * cfg->statistic_max (S-space); the model's status when Pi or T fails.  work:
 * fedmm_server_step_work(model, cfg, m) doubles. */
size_t fedmm_server_step_work(const fedmm_model_t *model, const fedmm_round_config_t *cfg,
                              int64_t m);
/* fedmm_server_step after its first part: acc (the weighted sum of the
 * messages, already checked) given, then H = V + acc and the rest, the same
 * operations (fedmm_server_step calls it).  work:
 * fedmm_server_update_work(model, cfg) doubles. */
size_t fedmm_server_update_work(const fedmm_model_t *model, const fedmm_round_config_t *cfg);
int fedmm_server_update(const fedmm_model_t *model, const fedmm_round_config_t *cfg, const double *acc,
                        double gamma, double *S, double *V, double *theta, double *dist, double *work);
/* FEDMM_OK when every x_j is finite with |x_j| <= bound (bound may be
 * INFINITY); FEDMM_ENONFINITE on NaN or infinity, FEDMM_ERANGE on a finite
 * value beyond the bound. */
int fedmm_check_range(size_t n, const double *x, double bound);
/* The bound fedmm_server_step holds messages to: cfg->statistic_max in
 * S-space when positive, else INFINITY. */
double fedmm_message_bound(const fedmm_round_config_t *cfg);
int fedmm_server_step(const fedmm_model_t *model, const fedmm_round_config_t *cfg, int64_t m,
                      const double *weights, const double *values, double gamma, double *S,
                      double *V, double *theta, double *dist, double *work);

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_ENGINE_H */
