/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_nonsmooth.h -- the local loop of FedMLS on non-smooth problems (nonsmooth.c).
 *
 * One family of the public C API; fedmm_kernels.h includes every family
 * header and states the conventions they share (status codes, column-major
 * matrices, caller-provided workspaces).  This header compiles on its own.
 */
#ifndef FEDMM_NONSMOOTH_H
#define FEDMM_NONSMOOTH_H

#include "fedmm_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- non-smooth problems, FedMLS (nonsmooth.c) ---- */
/* Losses l(z, y) of a linear prediction z = a_j^T w (FedMLS paper §4):
 * hinge max(0, 1 - y z) with subderivative -y [y z < 1]; l1 |z - y| with
 * subderivative sign(z - y). */
#define FEDMM_LOSS_HINGE 0
#define FEDMM_LOSS_L1 1

/* The local loop of one FedMLS round (FedMLS paper Algorithm 1 lines 7-12,
 * eq. (9)) for n clients, client i independently:
 *     u_0 = U[i] (z_{k-1}^i),  for t = 1..n_steps:
 *       g   = scale_i * sum_{j in batch_t(i)} l'(a_j^T u, y_j) a_j
 *       u  <- u - (weight * g + u - V[i]) / (1 + t/2)
 *       u  <- u * min(1, radius / ||u||_2)           (skipped if radius <= 0)
 *       ua <- (1 - theta_t) ua + theta_t u,  theta_t = 2(t+1)/(t(t+3)), ua_0 = u_0
 * and on return U[i] = u_T, U_avg[i] = ua_T.  weight = 1/(n beta_k).
 * design: N x p row-major (row j = a_j), target: N; client i owns rows
 * offsets[i] .. offsets[i+1]-1 (offsets has n+1 entries, each client non-empty).
 * rows == NULL: full subgradients (scale unused, treated as 1).  Otherwise
 * rows is n_steps x row_stride row-major; step t uses for client i the global
 * row indices rows[(t-1)*row_stride + b], row_offsets[i] <= b < row_offsets[i+1]
 * (each must lie in client i's range), scaled by scale[i] (m_i / b_i for an
 * unbiased estimate).  V, U, U_avg: n x p row-major; work: p doubles.
 * FEDMM_EINVAL on a bad loss code, NULL pointer, negative or non-finite weight,
 * or an index outside its client's range (checked before any output is written). */
int fedmm_fedmls_local_round(int loss, size_t n, size_t p, const double *design,
                             const double *target, const int64_t *offsets, size_t n_steps,
                             const int64_t *rows, size_t row_stride,
                             const int64_t *row_offsets, const double *scale,
                             double weight, double radius, const double *V, double *U,
                             double *U_avg, double *work);

/* The same loop resumed after first_step steps: steps t = first_step+1 ..
 * first_step+n_steps, with U[i] = u_{first_step} and U_avg[i] = ua_{first_step}
 * on entry (U_avg is only written from U when first_step == 0).  rows, when
 * given, holds the n_steps rows of these steps only (row r is step
 * first_step+1+r).  Running 0..T in one call or as consecutive calls
 * (first_step = 0, T1, T1+T2, ...) gives identical results bit for bit, so a
 * caller can run a long loop in slices of bounded work and check for
 * interrupts between them.  FEDMM_EINVAL as above, or if first_step + n_steps
 * overflows the step counter; the index checks cover this call's rows only. */
int fedmm_fedmls_local_steps(int loss, size_t n, size_t p, const double *design,
                             const double *target, const int64_t *offsets, size_t first_step,
                             size_t n_steps, const int64_t *rows, size_t row_stride,
                             const int64_t *row_offsets, const double *scale,
                             double weight, double radius, const double *V, double *U,
                             double *U_avg, double *work);

/* The clients' data of a non-smooth problem: N rows (a_j, y_j) split among
 * n_clients clients, as in fedmm_fedmls_local_steps.  design: N x p
 * row-major (row j = a_j); target: N; client i owns rows offsets[i] ..
 * offsets[i+1]-1 (offsets has n_clients + 1 entries, each client non-empty). */
typedef struct fedmm_nonsmooth_data {
    int loss;               /* FEDMM_LOSS_HINGE or FEDMM_LOSS_L1 */
    size_t n_clients;
    size_t p;
    const double *design;
    const double *target;
    const int64_t *offsets;
} fedmm_nonsmooth_data_t;

/* The minibatches of the n_steps steps of one call: step first_step+1+r uses
 * for client i the global rows rows[r * row_stride + b], row_offsets[i] <= b <
 * row_offsets[i+1], scaled by scale[i] (m_i / b_i).  A NULL pointer to this
 * struct (or rows == NULL) means full subgradients. */
typedef struct fedmm_minibatches {
    const int64_t *rows;
    size_t row_stride;
    const int64_t *row_offsets;
    const double *scale;
} fedmm_minibatches_t;

/* fedmm_fedmls_local_steps with the data and the minibatches as structs: the
 * same computation, bit for bit; FEDMM_EINVAL as there, and when data is
 * NULL.  weight = 1/(n beta_k) and radius as in fedmm_fedmls_local_round;
 * V, U, U_avg: n_clients x p row-major; work: p doubles. */
int fedmm_fedmls_local_steps_ex(const fedmm_nonsmooth_data_t *data, const fedmm_minibatches_t *batches,
                                size_t first_step, size_t n_steps, double weight, double radius,
                                const double *V, double *U, double *U_avg, double *work);

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_NONSMOOTH_H */
