/* fedmm_fedmls_local_steps_ex (structs) against the flat fedmm_fedmls_local_steps: bit for bit with full
 * subgradients and with minibatches, both losses, with and without the ball; NULL data refused.  Prints OK. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "fedmm_kernels.h"

#define N 12
#define P 4
#define NC 3
#define STEPS 5
#define BATCH 2

#define LCG_SEED 12345u
#include "lcg.h"

int main(void)
{
    double design[N * P], target[N], V[NC * P], U0[NC * P];
    const int64_t offsets[NC + 1] = {0, 4, 8, 12};
    int64_t rows[STEPS * NC * BATCH], row_offsets[NC + 1] = {0, 2, 4, 6};
    const double scale[NC] = {2.0, 2.0, 2.0};
    for (int j = 0; j < N * P; ++j) design[j] = uniform();
    for (int j = 0; j < N; ++j) target[j] = uniform() > 0 ? 1.0 : -1.0;
    for (int j = 0; j < NC * P; ++j) { V[j] = 0.1 * uniform(); U0[j] = uniform(); }
    for (int t = 0; t < STEPS; ++t)
        for (int i = 0; i < NC; ++i)
            for (int b = 0; b < BATCH; ++b) rows[t * NC * BATCH + i * BATCH + b] = offsets[i] + (t + 3 * b) % 4;
    for (int loss = 0; loss < 2; ++loss)
        for (int batched = 0; batched < 2; ++batched)
            for (int ball = 0; ball < 2; ++ball) {
                double U1[NC * P], A1[NC * P], U2[NC * P], A2[NC * P], work[P];
                memcpy(U1, U0, sizeof U1);
                memcpy(U2, U0, sizeof U2);
                const double radius = ball ? 0.5 : 0.0;
                const int s1 = fedmm_fedmls_local_steps(loss, NC, P, design, target, offsets, 0, STEPS,
                                                        batched ? rows : NULL, NC * BATCH,
                                                        batched ? row_offsets : NULL, batched ? scale : NULL,
                                                        0.7, radius, V, U1, A1, work);
                const fedmm_nonsmooth_data_t data = {loss, NC, P, design, target, offsets};
                const fedmm_minibatches_t batches = {rows, NC * BATCH, row_offsets, scale};
                const int s2 = fedmm_fedmls_local_steps_ex(&data, batched ? &batches : NULL, 0, STEPS, 0.7,
                                                           radius, V, U2, A2, work);
                if (s1 != FEDMM_OK || s2 != FEDMM_OK || memcmp(U1, U2, sizeof U1) || memcmp(A1, A2, sizeof A1)) {
                    printf("differ: loss %d batched %d ball %d (status %d %d)\n", loss, batched, ball, s1, s2);
                    return 1;
                }
                if (memcmp(U1, U0, sizeof U1) == 0) {
                    printf("no step taken\n");
                    return 1;
                }
            }
    double U[NC * P], A[NC * P], work[P];
    if (fedmm_fedmls_local_steps_ex(NULL, NULL, 0, 1, 1.0, 0.0, V, U, A, work) != FEDMM_EINVAL) {
        printf("NULL data accepted\n");
        return 1;
    }
    printf("OK\n");
    return 0;
}
