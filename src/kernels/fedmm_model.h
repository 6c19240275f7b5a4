/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_model.h -- the compiled surrogate model: the vtable the round engine calls (engine.c).
 *
 * One family of the public C API; fedmm_kernels.h includes every family
 * header and states the conventions they share (status codes, column-major
 * matrices, caller-provided workspaces).  This header compiles on its own.
 */
#ifndef FEDMM_MODEL_H
#define FEDMM_MODEL_H

#include "fedmm_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- compiled surrogate models (the vtable of the round engine, engine.c) ---- */
/* A surrogate model as the compiled round engine sees it (FedMM paper,
 * MM-1/MM-2): a statistic S of q doubles, the map T, the projection Pi onto
 * the surrogate domain, and the oracle S̄(Z, theta) averaged over a minibatch.
 * Any model that fills this struct (in C, in Cython, or as numba cfuncs) runs
 * inside fedmm_client_round / fedmm_server_step without Python.
 *
 * The compiled parameter is one buffer of theta_size doubles: its first d
 * entries are the flat parameter (Python's model.theta_vector(theta)), the
 * rest are quantities derived from them that the oracle needs (for example a
 * column-major copy of a dictionary, or the Cholesky factors of covariances).
 * A client's data are n_samples rows of sample_size doubles (row-major).
 * Every callback returns FEDMM_OK or a negative FEDMM_E* code, must not keep
 * pointers across calls, and must be reentrant: clients run on several
 * threads at once with separate workspaces.
 *
 *   statistic(ctx, theta, data, n_samples, idx, b, memory, out, n_unconverged, work)
 *       out[0..q) = b^{-1} sum_{j<b} S̄(data row idx[j], theta); idx == NULL
 *       means the rows 0..b-1 (b == n_samples).  memory: the client's
 *       per-sample memory, n_samples rows of memory_size doubles (warm
 *       starts of an inner solver), read and written at the rows idx; NULL
 *       when memory_size == 0 or the model runs without it.  *n_unconverged
 *       is incremented by the inner solver's unconverged columns (may stay
 *       untouched).  work: statistic_work(ctx, b) doubles.
 *   project(ctx, s, work)       s <- Pi(s) in place; NULL: S is the whole space.
 *   T(ctx, s, theta, work)      theta[0..theta_size) = T(s) with its derived
 *                               part; theta holds the previous parameter on
 *                               entry (a warm start for iterative T).
 *   derive(ctx, theta, work)    theta[d..theta_size) from theta[0..d); NULL
 *                               when theta_size == d.
 *   project_theta(ctx, theta, work)
 *                               theta[0..d) <- projection onto Theta (the
 *                               parameter-space baseline); NULL: identity.
 * server_work doubles serve project, T, derive and project_theta (a model
 * that needs integer workspace carves it from these doubles). */
typedef size_t (*fedmm_statistic_work_fn)(const void *ctx, int64_t b);
typedef int (*fedmm_statistic_fn)(const void *ctx, const double *theta, const double *data,
                                  int64_t n_samples, const int64_t *idx, int64_t b,
                                  double *memory, double *out, int64_t *n_unconverged,
                                  double *work);
typedef int (*fedmm_inplace_fn)(const void *ctx, double *x, double *work);
typedef int (*fedmm_map_fn)(const void *ctx, const double *s, double *theta, double *work);
typedef struct fedmm_model {
    const void *ctx;
    int64_t q;
    int64_t d;
    int64_t theta_size;
    int64_t sample_size;
    int64_t memory_size;
    size_t server_work;
    fedmm_statistic_work_fn statistic_work;
    fedmm_statistic_fn statistic;
    fedmm_inplace_fn project;       /* s <- Pi(s) */
    fedmm_map_fn T;
    fedmm_inplace_fn derive;        /* theta[d..theta_size) from theta[0..d) */
    fedmm_inplace_fn project_theta; /* theta[0..d) onto Theta */
} fedmm_model_t;

/* Checks the sizes and mandatory callbacks of a model (FEDMM_EINVAL if not). */
int fedmm_model_check(const fedmm_model_t *model);

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_MODEL_H */
