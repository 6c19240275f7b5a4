/* fedmm_check_range against a plain scan: every length 0..300, one or two offending values (NaN, +-inf,
 * beyond the bound, exactly at the bound) at every position, finite and infinite bounds.  Prints OK. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>

#include "fedmm_kernels.h"

static int reference(size_t n, const double *x, double bound)
{
    for (size_t j = 0; j < n; ++j) {
        if (!isfinite(x[j])) return FEDMM_ENONFINITE;
        if (fabs(x[j]) > bound) return FEDMM_ERANGE;
    }
    return FEDMM_OK;
}

#define LCG_SEED 0x9E3779B97F4A7C15u
#include "lcg.h"

int main(void)
{
    static double x[300];
    const double bounds[2] = {2.0, INFINITY};
    long checked = 0;
    for (int ib = 0; ib < 2; ++ib) {
        const double bound = bounds[ib];
        const double bad[6] = {NAN, INFINITY, -INFINITY, 3.0, -3.0, 2.0};
        for (size_t n = 0; n <= 300; ++n) {
            for (size_t j = 0; j < n; ++j) x[j] = 1.9 * uniform();
            if (fedmm_check_range(n, x, bound) != FEDMM_OK) { printf("clean n=%zu\n", n); return 1; }
            for (size_t pos = 0; pos < n; ++pos)
                for (int k = 0; k < 6; ++k)
                    for (int second = -1; second < 6; second += 3) {
                        const double keep = x[pos];
                        const size_t pos2 = (pos * 7 + 3) % n;
                        const double keep2 = x[pos2];
                        x[pos] = bad[k];
                        if (second >= 0) x[pos2] = bad[second];
                        const int want = reference(n, x, bound), got = fedmm_check_range(n, x, bound);
                        if (want != got) {
                            printf("n=%zu pos=%zu kind=%d second=%d bound=%g: want %d got %d\n", n, pos, k,
                                   second, bound, want, got);
                            return 1;
                        }
                        x[pos] = keep;
                        x[pos2] = keep2;
                        ++checked;
                    }
        }
    }
    printf(checked > 500000 ? "OK\n" : "too few cases\n");
    return 0;
}
