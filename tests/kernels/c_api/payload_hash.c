/* SPDX-License-Identifier: BSD-3-Clause */
/* Prints an FNV-1a hash of payloads, fused quantize outputs and the final
 * generator state for many (bits, block, norm, dtype) settings, drawn from a
 * splitmix64 generator: two builds of the kernels (any ISA, SIMD or not, any
 * optimization level) must print the same hash. */
#include <stdio.h>
#include <stdlib.h>

#include "fedmm_kernels.h"

#include "splitmix64.h"

int main(void)
{
    const size_t q = 20011;
    const size_t blocks[] = {1, 7, 256, 1000, 20011};
    splitmix_t st = {42};
    fedmm_bitgen_t rng = {&st, sm_next64, sm_next32, sm_nextd, sm_next64};
    double *x = (double *)malloc(q * sizeof(double));
    float *xf = (float *)malloc(q * sizeof(float));
    if (x == NULL || xf == NULL) return 2;
    for (size_t j = 0; j < q; ++j) {
        x[j] = (2.0 * sm_nextd(&st) - 1.0) * (j % 7 ? 1.0 : 1e-3);
        if (j >= 4000 && j < 6000) x[j] = (double)(int)(x[j] * 512.0) / 64.0; /* exact levels */
        if (j >= 8000 && j < 9000) x[j] *= 1e-310;                           /* tiny norms */
        if (j >= 12000 && j < 12600) x[j] = 0.0;                             /* zero blocks */
        xf[j] = (float)x[j];
    }
    double *out = (double *)malloc(q * sizeof(double));
    if (out == NULL) return 2;
    uint64_t h = 1469598103934665603ULL;
    for (int bits = 2; bits <= 16; ++bits)
        for (int b = 0; b < 5; ++b)
            for (int norm = FEDMM_NORM_L2; norm <= FEDMM_NORM_LINF; ++norm)
                for (int vb = 4; vb <= 8; vb += 4) {
                    const fedmm_quantizer_t spec = {FEDMM_SCHEME_DITHER, bits, norm, blocks[b]};
                    uint64_t nb = fedmm_wire_nbytes(&spec, q, vb);
                    uint8_t *p = (uint8_t *)malloc((size_t)nb);
                    if (p == NULL) return 2;
                    int status = vb == 8
                        ? fedmm_encode_f64(x, q, &spec, &rng, p, (size_t)nb)
                        : fedmm_encode_f32(xf, q, &spec, &rng, p, (size_t)nb);
                    if (status != FEDMM_OK) return 3;
                    for (uint64_t k = 0; k < nb; ++k) h = (h ^ p[k]) * 1099511628211ULL;
                    free(p);
                    status = vb == 8
                        ? fedmm_quantize_f64(x, q, &spec, &rng, out)
                        : fedmm_quantize_f32(xf, q, &spec, &rng, out);
                    if (status != FEDMM_OK) return 3;
                    const uint8_t *o = (const uint8_t *)out;
                    for (size_t k = 0; k < q * sizeof(double); ++k) h = (h ^ o[k]) * 1099511628211ULL;
                }
    h = (h ^ st.s) * 1099511628211ULL; /* the stream consumed */
    printf("%016llx\n", (unsigned long long)h);
    free(x);
    free(xf);
    free(out);
    return 0;
}
