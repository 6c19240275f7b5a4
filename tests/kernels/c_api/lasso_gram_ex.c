/* fedmm_lasso_gram_ex (matrix views) against the flat fedmm_lasso_gram and fedmm_lasso_gram_interruptible:
 * bit for bit over every method, positive or not, cold or warm start, with and without the squared norms,
 * on padded leading dimensions (the padding must stay untouched); views that do not fit refused.  Prints OK. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fedmm_kernels.h"

#define P 9
#define K 6
#define B 7
#define LDG (K + 2)
#define LDC (K + 1)
#define LDH (K + 3)

#define LCG_SEED 20240611u
#include "lcg.h"

static int polls;
static int count_poll(void *arg)
{
    (void)arg;
    ++polls;
    return 0; /* never stops */
}

int main(void)
{
    double D[P * K], Z[P * B], G[LDG * K], C[LDC * B], zn[B], H0[LDH * B];
    for (int j = 0; j < P * K; ++j) D[j] = uniform();
    for (int j = 0; j < P * B; ++j) Z[j] = uniform();
    for (int j = 0; j < LDG * K; ++j) G[j] = 1e300; /* padding: read, it would wreck the solve */
    for (int j = 0; j < LDC * B; ++j) C[j] = 1e300;
    for (int a = 0; a < K; ++a)
        for (int c = 0; c < K; ++c) {
            double s = 0.0;
            for (int i = 0; i < P; ++i) s += D[i + a * P] * D[i + c * P];
            G[a + c * LDG] = s;
        }
    for (int j = 0; j < B; ++j) {
        double s = 0.0;
        for (int i = 0; i < P; ++i) s += Z[i + j * P] * Z[i + j * P];
        zn[j] = s;
        for (int a = 0; a < K; ++a) {
            double t = 0.0;
            for (int i = 0; i < P; ++i) t += D[i + a * P] * Z[i + j * P];
            C[a + j * LDC] = t;
        }
    }
    for (int j = 0; j < LDH * B; ++j) H0[j] = 0.3 * uniform();
    double *work = (double *)malloc(fedmm_lasso_gram_work(K) * sizeof(double));
    if (work == NULL) return 1;
    const fedmm_interrupt_t interrupt = {count_poll, NULL};
    const fedmm_matrix_t G_view = {G, K, K, LDG}, C_view = {C, K, B, LDC};
    int nonzero = 0;
    for (int method = FEDMM_LASSO_AUTO; method <= FEDMM_LASSO_HOMOTOPY; ++method)
        for (int positive = 0; positive < 2; ++positive)
            for (int warm = 0; warm < 2; ++warm)
                for (int norms = 0; norms < 2; ++norms) {
                    const fedmm_lasso_options_t opts = {0.05, positive, 1e-12, 200, warm, method};
                    double H1[LDH * B], H2[LDH * B], H3[LDH * B];
                    int it1[B], it2[B], it3[B];
                    int64_t bad1 = -1, bad2 = -1, bad3 = -1;
                    memcpy(H1, H0, sizeof H1);
                    memcpy(H2, H0, sizeof H2);
                    memcpy(H3, H0, sizeof H3);
                    const double *z = norms ? zn : NULL;
                    const int s1 = fedmm_lasso_gram(K, B, G, LDG, C, LDC, z, &opts, H1, LDH, it1, &bad1, work);
                    const int s2 = fedmm_lasso_gram_interruptible(K, B, G, LDG, C, LDC, z, &opts, H2, LDH, it2,
                                                                  &bad2, work, &interrupt);
                    const fedmm_matrix_mut_t H_view = {H3, K, B, LDH};
                    const int s3 = fedmm_lasso_gram_ex(&G_view, &C_view, z, &opts, &H_view, it3, &bad3, work,
                                                       &interrupt);
                    if (s1 != FEDMM_OK || s2 != FEDMM_OK || s3 != FEDMM_OK || memcmp(H1, H3, sizeof H1) ||
                        memcmp(H2, H3, sizeof H2) || memcmp(it1, it3, sizeof it1) || memcmp(it2, it3, sizeof it2) ||
                        bad1 != bad3 || bad2 != bad3) {
                        printf("differ: method %d positive %d warm %d norms %d (status %d %d %d)\n", method,
                               positive, warm, norms, s1, s2, s3);
                        return 1;
                    }
                    for (int j = 0; j < B; ++j)
                        for (int a = K; a < LDH; ++a)
                            if (memcmp(&H3[a + j * LDH], &H0[a + j * LDH], sizeof(double))) {
                                printf("padding of H written\n");
                                return 1;
                            }
                    /* the views reach the solver as they should (the flat forms go through them too): the
                     * codes satisfy the KKT conditions of the Gram-form LASSO on the unpadded G and C */
                    for (int j = 0; j < B; ++j)
                        for (int a = 0; a < K; ++a) {
                            double r = C[a + j * LDC];
                            for (int c = 0; c < K; ++c) r -= G[a + c * LDG] * H3[c + j * LDH];
                            const double h = H3[a + j * LDH];
                            const int ok = h > 0.0   ? fabs(r - 0.05) <= 1e-8
                                           : h < 0.0 ? !positive && fabs(r + 0.05) <= 1e-8
                                                     : r <= 0.05 + 1e-8 && (positive || r >= -0.05 - 1e-8);
                            if (!ok) {
                                printf("KKT violated: method %d positive %d column %d atom %d\n", method, positive,
                                       j, a);
                                return 1;
                            }
                            nonzero += h != 0.0;
                        }
                }
    if (nonzero == 0) {
        printf("every code zero: nothing was solved\n");
        return 1;
    }
    /* views that do not fit are refused before anything is read or written */
    const fedmm_lasso_options_t opts = {0.05, 0, 1e-12, 200, 0, FEDMM_LASSO_AUTO};
    double H[LDH * B];
    const fedmm_matrix_mut_t H_view = {H, K, B, LDH}, H_short = {H, K, B - 1, LDH},
                             H_rows = {H, K - 1, B, LDH};
    const fedmm_matrix_t G_wide = {G, K, K - 1, LDG}, C_rows = {C, K + 1, B, LDC},
                         G_huge = {G, K, K, (int64_t)1 << 40}, C_neg = {C, K, -1, LDC},
                         G_small_ld = {G, K, K, K - 1};
    if (fedmm_lasso_gram_ex(NULL, &C_view, NULL, &opts, &H_view, NULL, NULL, work, NULL) != FEDMM_EINVAL ||
        fedmm_lasso_gram_ex(&G_view, NULL, NULL, &opts, &H_view, NULL, NULL, work, NULL) != FEDMM_EINVAL ||
        fedmm_lasso_gram_ex(&G_view, &C_view, NULL, &opts, NULL, NULL, NULL, work, NULL) != FEDMM_EINVAL ||
        fedmm_lasso_gram_ex(&G_wide, &C_view, NULL, &opts, &H_view, NULL, NULL, work, NULL) != FEDMM_EINVAL ||
        fedmm_lasso_gram_ex(&G_view, &C_rows, NULL, &opts, &H_view, NULL, NULL, work, NULL) != FEDMM_EINVAL ||
        fedmm_lasso_gram_ex(&G_view, &C_view, NULL, &opts, &H_short, NULL, NULL, work, NULL) != FEDMM_EINVAL ||
        fedmm_lasso_gram_ex(&G_view, &C_view, NULL, &opts, &H_rows, NULL, NULL, work, NULL) != FEDMM_EINVAL ||
        fedmm_lasso_gram_ex(&G_huge, &C_view, NULL, &opts, &H_view, NULL, NULL, work, NULL) != FEDMM_EINVAL ||
        fedmm_lasso_gram_ex(&G_view, &C_neg, NULL, &opts, &H_view, NULL, NULL, work, NULL) != FEDMM_EINVAL ||
        fedmm_lasso_gram_ex(&G_small_ld, &C_view, NULL, &opts, &H_view, NULL, NULL, work, NULL) != FEDMM_EINVAL ||
        fedmm_lasso_gram_ex(&G_view, &C_view, NULL, NULL, &H_view, NULL, NULL, work, NULL) != FEDMM_EINVAL) {
        printf("a view that does not fit was accepted\n");
        return 1;
    }
    /* the flat forms refuse what they refused before (their sizes reach the views unchanged) */
    if (fedmm_lasso_gram(-1, B, G, LDG, C, LDC, NULL, &opts, H, LDH, NULL, NULL, work) != FEDMM_EINVAL ||
        fedmm_lasso_gram(K, -1, G, LDG, C, LDC, NULL, &opts, H, LDH, NULL, NULL, work) != FEDMM_EINVAL ||
        fedmm_lasso_gram(K, B, G, K - 1, C, LDC, NULL, &opts, H, LDH, NULL, NULL, work) != FEDMM_EINVAL ||
        fedmm_lasso_gram(K, B, G, LDG, NULL, LDC, NULL, &opts, H, LDH, NULL, NULL, work) != FEDMM_EINVAL ||
        fedmm_lasso_gram(K, 0, G, LDG, NULL, LDC, NULL, &opts, H, LDH, NULL, NULL, work) != FEDMM_OK) {
        printf("the flat form's checks changed\n");
        return 1;
    }
    free(work);
    printf("OK\n");
    return 0;
}
