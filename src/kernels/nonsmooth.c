/* SPDX-License-Identifier: BSD-3-Clause */
/* FedMLS local round (FedMLS paper, Algorithm 1 lines 7-12 / eq. (9)) for
 * piecewise-linear losses of a linear prediction; see fedmm_kernels.h. */
#include <math.h>
#include <stdint.h>

#include "fedmm_kernels.h"

/* One subderivative of the loss in the prediction z. */
static double loss_slope(int loss, double z, double y)
{
    if (loss == FEDMM_LOSS_HINGE)
        return (y * z < 1.0) ? -y : 0.0;
    double r = z - y;
    return (r > 0.0) - (r < 0.0);
}

int fedmm_fedmls_local_steps(int loss, size_t n, size_t p, const double *design,
                             const double *target, const int64_t *offsets, size_t first_step,
                             size_t n_steps, const int64_t *rows, size_t row_stride,
                             const int64_t *row_offsets, const double *scale,
                             double weight, double radius, const double *V, double *U,
                             double *U_avg, double *work)
{
    if (n_steps > SIZE_MAX - 3 - first_step)
        return FEDMM_EINVAL; /* the step counter t + 3 must not wrap */
    if (loss != FEDMM_LOSS_HINGE && loss != FEDMM_LOSS_L1)
        return FEDMM_EINVAL;
    if (!design || !target || !offsets || !V || !U || !U_avg || !work || p == 0)
        return FEDMM_EINVAL;
    if (rows && (!row_offsets || !scale))
        return FEDMM_EINVAL;
    if (!isfinite(weight) || weight < 0.0)
        return FEDMM_EINVAL;
    const int project = radius > 0.0 && isfinite(radius);
    /* validate the index structure before touching any output */
    for (size_t i = 0; i < n; ++i) {
        if (offsets[i] < 0 || offsets[i + 1] <= offsets[i])
            return FEDMM_EINVAL;
        if (rows) {
            if (row_offsets[i] < 0 || row_offsets[i + 1] <= row_offsets[i] ||
                (size_t)row_offsets[i + 1] > row_stride)
                return FEDMM_EINVAL;
            for (size_t t = 0; t < n_steps; ++t)
                for (int64_t b = row_offsets[i]; b < row_offsets[i + 1]; ++b) {
                    int64_t j = rows[t * row_stride + (size_t)b];
                    if (j < offsets[i] || j >= offsets[i + 1])
                        return FEDMM_EINVAL;
                }
        }
    }
    double *g = work;
    for (size_t i = 0; i < n; ++i) {
        double *u = U + i * p;
        double *u_avg = U_avg + i * p;
        const double *v = V + i * p;
        if (first_step == 0)
            for (size_t c = 0; c < p; ++c)
                u_avg[c] = u[c];
        for (size_t t = first_step + 1; t <= first_step + n_steps; ++t) {
            /* g = (minibatch) subgradient of f_i at u */
            for (size_t c = 0; c < p; ++c)
                g[c] = 0.0;
            int64_t lo, hi;
            const int64_t *idx = NULL;
            if (rows) {
                idx = rows + (t - first_step - 1) * row_stride;
                lo = row_offsets[i];
                hi = row_offsets[i + 1];
            } else {
                lo = offsets[i];
                hi = offsets[i + 1];
            }
            for (int64_t b = lo; b < hi; ++b) {
                size_t j = (size_t)(idx ? idx[b] : b);
                const double *a = design + j * p;
                double z = 0.0;
                for (size_t c = 0; c < p; ++c)
                    z += a[c] * u[c];
                double s = loss_slope(loss, z, target[j]);
                if (s != 0.0)
                    for (size_t c = 0; c < p; ++c)
                        g[c] += s * a[c];
            }
            const double gw = rows ? weight * scale[i] : weight;
            const double step = 1.0 / (1.0 + 0.5 * (double)t);
            double norm2 = 0.0;
            for (size_t c = 0; c < p; ++c) {
                u[c] -= step * (gw * g[c] + u[c] - v[c]);
                norm2 += u[c] * u[c];
            }
            if (project && norm2 > radius * radius) {
                double f = radius / sqrt(norm2);
                for (size_t c = 0; c < p; ++c)
                    u[c] *= f;
            }
            const double theta = 2.0 * (double)(t + 1) / ((double)t * (double)(t + 3));
            for (size_t c = 0; c < p; ++c)
                u_avg[c] = (1.0 - theta) * u_avg[c] + theta * u[c];
        }
    }
    return FEDMM_OK;
}

int fedmm_fedmls_local_round(int loss, size_t n, size_t p, const double *design,
                             const double *target, const int64_t *offsets, size_t n_steps,
                             const int64_t *rows, size_t row_stride,
                             const int64_t *row_offsets, const double *scale,
                             double weight, double radius, const double *V, double *U,
                             double *U_avg, double *work)
{
    return fedmm_fedmls_local_steps(loss, n, p, design, target, offsets, 0, n_steps, rows,
                                    row_stride, row_offsets, scale, weight, radius, V, U, U_avg,
                                    work);
}

int fedmm_fedmls_local_steps_ex(const fedmm_nonsmooth_data_t *data, const fedmm_minibatches_t *batches,
                                size_t first_step, size_t n_steps, double weight, double radius,
                                const double *V, double *U, double *U_avg, double *work)
{
    if (data == NULL)
        return FEDMM_EINVAL;
    const int64_t *rows = batches != NULL ? batches->rows : NULL;
    return fedmm_fedmls_local_steps(data->loss, data->n_clients, data->p, data->design, data->target,
                                    data->offsets, first_step, n_steps, rows,
                                    rows ? batches->row_stride : 0, rows ? batches->row_offsets : NULL,
                                    rows ? batches->scale : NULL, weight, radius, V, U, U_avg, work);
}
