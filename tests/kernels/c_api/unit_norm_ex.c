/* fedmm_dictionary_update_unit_norm_ex (matrix views) against the flat fedmm_dictionary_update_unit_norm:
 * bit for bit with and without the ridge term, converged and stopped at max_iter, with an unused atom, on
 * padded leading dimensions (the padding must stay untouched); views that do not fit refused.  Prints OK. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "fedmm_kernels.h"

#define P 7
#define K 5
#define NB 11
#define LDA (K + 1)
#define LDB (P + 2)
#define LDD (P + 3)

#define LCG_SEED 777u
#include "lcg.h"

int main(void)
{
    /* A = H H^T / n, B = Z H^T / n for codes H (K x NB) whose last row is zero: atom K-1 is unused */
    double Hc[K * NB], Z[P * NB], A[LDA * K], Bm[LDB * K], D0[LDD * K];
    for (int j = 0; j < K * NB; ++j) Hc[j] = (j % K == K - 1) ? 0.0 : uniform();
    for (int j = 0; j < P * NB; ++j) Z[j] = uniform();
    for (int j = 0; j < LDA * K; ++j) A[j] = 1e300; /* padding: read, it would wreck the update */
    for (int j = 0; j < LDB * K; ++j) Bm[j] = 1e300;
    for (int a = 0; a < K; ++a)
        for (int c = 0; c < K; ++c) {
            double s = 0.0;
            for (int n = 0; n < NB; ++n) s += Hc[a + n * K] * Hc[c + n * K];
            A[a + c * LDA] = s / NB;
        }
    for (int i = 0; i < P; ++i)
        for (int c = 0; c < K; ++c) {
            double s = 0.0;
            for (int n = 0; n < NB; ++n) s += Z[i + n * P] * Hc[c + n * K];
            Bm[i + c * LDB] = s / NB;
        }
    for (int j = 0; j < LDD * K; ++j) D0[j] = uniform();
    const fedmm_matrix_t A_view = {A, K, K, LDA}, B_view = {Bm, P, K, LDB};
    const double etas[2] = {0.0, 0.1};
    const int caps[2] = {2, 1000};
    int saw_enoconv = 0, saw_ok = 0;
    for (int e = 0; e < 2; ++e)
        for (int c = 0; c < 2; ++c) {
            double D1[LDD * K], D2[LDD * K], work[P];
            int it1 = -1, it2 = -1;
            memcpy(D1, D0, sizeof D1);
            memcpy(D2, D0, sizeof D2);
            const int s1 = fedmm_dictionary_update_unit_norm(P, K, A, LDA, Bm, LDB, etas[e], 1e-12, caps[c], D1,
                                                             LDD, &it1, work);
            const fedmm_matrix_mut_t D_view = {D2, P, K, LDD};
            const int s2 = fedmm_dictionary_update_unit_norm_ex(&A_view, &B_view, etas[e], 1e-12, caps[c], &D_view,
                                                                &it2, work);
            if (s1 != s2 || it1 != it2 || memcmp(D1, D2, sizeof D1)) {
                printf("differ: eta %g max_iter %d (status %d %d, sweeps %d %d)\n", etas[e], caps[c], s1, s2, it1,
                       it2);
                return 1;
            }
            if (memcmp(D2, D0, sizeof D2) == 0) {
                printf("no sweep taken\n");
                return 1;
            }
            for (int j = 0; j < K; ++j)
                for (int i = P; i < LDD; ++i)
                    if (memcmp(&D2[i + j * LDD], &D0[i + j * LDD], sizeof(double))) {
                        printf("padding of D written\n");
                        return 1;
                    }
            /* the views reach the kernel as they should (the flat form goes through them too): columns in
             * the unit ball, and the unused atom (no ridge term, zero linear term) kept where it was */
            for (int j = 0; j < K; ++j) {
                double nrm = 0.0;
                for (int i = 0; i < P; ++i) nrm += D2[i + j * LDD] * D2[i + j * LDD];
                if (sqrt(nrm) > 1.0 + 1e-12) {
                    printf("column %d outside the unit ball\n", j);
                    return 1;
                }
            }
            if (etas[e] == 0.0) {
                double dn = 0.0;
                for (int i = 0; i < P; ++i) dn += D0[i + (K - 1) * LDD] * D0[i + (K - 1) * LDD];
                dn = sqrt(dn);
                for (int i = 0; i < P; ++i) {
                    const double kept = dn > 1.0 ? D0[i + (K - 1) * LDD] / dn : D0[i + (K - 1) * LDD];
                    if (D2[i + (K - 1) * LDD] != kept) {
                        printf("the unused atom moved\n");
                        return 1;
                    }
                }
            }
            saw_enoconv += s2 == FEDMM_ENOCONV;
            saw_ok += s2 == FEDMM_OK;
        }
    if (!saw_enoconv || !saw_ok) {
        printf("expected both a converged and a capped run (%d, %d)\n", saw_ok, saw_enoconv);
        return 1;
    }
    /* views that do not fit are refused before anything is read or written */
    double D[LDD * K], work[P];
    const fedmm_matrix_mut_t D_view = {D, P, K, LDD}, D_rows = {D, P - 1, K, LDD}, D_cols = {D, P, K + 1, LDD};
    const fedmm_matrix_t A_wide = {A, K, K + 1, LDA}, B_cols = {Bm, P, K - 1, LDB},
                         B_huge = {Bm, P, K, (int64_t)1 << 40}, A_neg = {A, -1, -1, LDA},
                         B_small_ld = {Bm, P, K, P - 1};
    if (fedmm_dictionary_update_unit_norm_ex(NULL, &B_view, 0.0, 1e-12, 10, &D_view, NULL, work) != FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm_ex(&A_view, NULL, 0.0, 1e-12, 10, &D_view, NULL, work) != FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm_ex(&A_view, &B_view, 0.0, 1e-12, 10, NULL, NULL, work) != FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm_ex(&A_wide, &B_view, 0.0, 1e-12, 10, &D_view, NULL, work) != FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm_ex(&A_view, &B_cols, 0.0, 1e-12, 10, &D_view, NULL, work) != FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm_ex(&A_view, &B_view, 0.0, 1e-12, 10, &D_rows, NULL, work) != FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm_ex(&A_view, &B_view, 0.0, 1e-12, 10, &D_cols, NULL, work) != FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm_ex(&A_view, &B_huge, 0.0, 1e-12, 10, &D_view, NULL, work) != FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm_ex(&A_neg, &B_view, 0.0, 1e-12, 10, &D_view, NULL, work) != FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm_ex(&A_view, &B_small_ld, 0.0, 1e-12, 10, &D_view, NULL, work) !=
            FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm_ex(&A_view, &B_view, -1.0, 1e-12, 10, &D_view, NULL, work) != FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm_ex(&A_view, &B_view, 0.0, NAN, 10, &D_view, NULL, work) != FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm_ex(&A_view, &B_view, 0.0, 1e-12, -1, &D_view, NULL, work) != FEDMM_EINVAL) {
        printf("a view or an option that does not fit was accepted\n");
        return 1;
    }
    /* the flat form refuses what it refused before */
    if (fedmm_dictionary_update_unit_norm(-1, K, A, LDA, Bm, LDB, 0.0, 1e-12, 10, D, LDD, NULL, work) !=
            FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm(P, 0, A, LDA, Bm, LDB, 0.0, 1e-12, 10, D, LDD, NULL, work) != FEDMM_EINVAL ||
        fedmm_dictionary_update_unit_norm(P, K, A, K - 1, Bm, LDB, 0.0, 1e-12, 10, D, LDD, NULL, work) !=
            FEDMM_EINVAL) {
        printf("the flat form's checks changed\n");
        return 1;
    }
    printf("OK\n");
    return 0;
}
