/* SPDX-License-Identifier: BSD-3-Clause */
/* A C program solving small LASSOs with fedmm_lasso_gram and a
 * fedmm_lasso_options_t, without Python and without BLAS: with G = I the
 * solution is the soft threshold of C (the nonnegative one with positive).
 * Prints "OK" and exits 0 on success; prints the failed check and exits 1
 * otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fedmm_kernels.h"

#define CHECK(cond)                                                  \
    do {                                                             \
        if (!(cond)) {                                               \
            printf("FAILED: %s (line %d)\n", #cond, __LINE__);       \
            return 1;                                                \
        }                                                            \
    } while (0)

static double soft(double u, double lam, int positive)
{
    if (u > lam) return u - lam;
    if (!positive && u < -lam) return u + lam;
    return 0.0;
}

int main(void)
{
    enum { K = 3, B = 4 };
    const double G[K * K] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    const double C[K * B] = {2.0, -0.5, 0.25, -3.0, 1.5, 0.0, 0.75, -0.75, 4.0, 0.1, 0.2, -0.3};
    double H[K * B];
    int n_iter[B];
    int64_t n_bad = -1;
    double *work = (double *)malloc(fedmm_lasso_gram_work(K) * sizeof(double));
    CHECK(work != NULL);

    for (int method = FEDMM_LASSO_AUTO; method <= FEDMM_LASSO_HOMOTOPY; ++method)
        for (int positive = 0; positive <= 1; ++positive) {
            const fedmm_lasso_options_t opts = {0.5, positive, 1e-12, 100, 0, method};
            CHECK(fedmm_lasso_gram(K, B, G, K, C, K, NULL, &opts, H, K, n_iter, &n_bad, work) ==
                  FEDMM_OK);
            CHECK(n_bad == 0);
            for (int j = 0; j < K * B; ++j) CHECK(fabs(H[j] - soft(C[j], 0.5, positive)) <= 1e-12);
            for (int j = 0; j < B; ++j) CHECK(n_iter[j] >= 0 && n_iter[j] <= 100);
        }

    /* a warm start from the solution needs no more than one iteration per column */
    const fedmm_lasso_options_t warm = {0.5, 0, 1e-12, 100, 1, FEDMM_LASSO_CD};
    CHECK(fedmm_lasso_gram(K, B, G, K, C, K, NULL, &warm, H, K, n_iter, NULL, work) == FEDMM_OK);
    for (int j = 0; j < K * B; ++j) CHECK(fabs(H[j] - soft(C[j], 0.5, 0)) <= 1e-12);
    for (int j = 0; j < B; ++j) CHECK(n_iter[j] <= 1);

    /* options out of range */
    fedmm_lasso_options_t bad = {0.0, 0, 1e-12, 100, 0, FEDMM_LASSO_CD}; /* lam must be > 0 */
    CHECK(fedmm_lasso_gram(K, B, G, K, C, K, NULL, &bad, H, K, NULL, NULL, work) == FEDMM_EINVAL);
    bad.lam = 0.5;
    bad.method = FEDMM_LASSO_HOMOTOPY + 1;
    CHECK(fedmm_lasso_gram(K, B, G, K, C, K, NULL, &bad, H, K, NULL, NULL, work) == FEDMM_EINVAL);
    bad.method = FEDMM_LASSO_CD;
    bad.tol = -1.0;
    CHECK(fedmm_lasso_gram(K, B, G, K, C, K, NULL, &bad, H, K, NULL, NULL, work) == FEDMM_EINVAL);
    bad.tol = 1e-12;
    bad.max_iter = -1;
    CHECK(fedmm_lasso_gram(K, B, G, K, C, K, NULL, &bad, H, K, NULL, NULL, work) == FEDMM_EINVAL);
    CHECK(fedmm_lasso_gram(K, B, G, K, C, K, NULL, NULL, H, K, NULL, NULL, work) == FEDMM_EINVAL);
    free(work);
    printf("OK\n");
    return 0;
}
