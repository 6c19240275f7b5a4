/* SPDX-License-Identifier: BSD-3-Clause */
/* A C program using the fedmm kernels without Python: its own
 * bitgen_t-compatible generator (splitmix64), block-p quantization, a wire
 * round trip, and the decoder's validation.  Prints "OK" and exits 0 on
 * success; prints the failed check and exits 1 otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedmm_kernels.h"

#include "splitmix64.h"

#define CHECK(cond)                                                  \
    do {                                                             \
        if (!(cond)) {                                               \
            printf("FAILED: %s (line %d)\n", #cond, __LINE__);       \
            return 1;                                                \
        }                                                            \
    } while (0)

int main(void)
{
    enum { Q = 1000, BLOCK = 64 };
    double x[Q], v[Q], w[Q];
    splitmix_t st = {12345};
    fedmm_bitgen_t rng = {&st, sm_next64, sm_next32, sm_nextd, sm_next64};
    for (int j = 0; j < Q; ++j) x[j] = 2.0 * sm_nextd(&st) - 1.0;
    for (int j = 128; j < 192; ++j) x[j] = 0.0; /* one zero block */

    /* block-p (bits = 2, L2 norm): values in {-N, 0, N} with x's sign */
    splitmix_t st_q = {7};
    rng.state = &st_q;
    CHECK(fedmm_quantize_f64(x, Q, BLOCK, 2, FEDMM_NORM_L2, &rng, v) == FEDMM_OK);
    for (int b = 0; b * BLOCK < Q; ++b) {
        int start = b * BLOCK, end = start + BLOCK < Q ? start + BLOCK : Q;
        double ss = 0.0;
        for (int j = start; j < end; ++j) ss += x[j] * x[j];
        double nrm = sqrt(ss);
        for (int j = start; j < end; ++j) {
            CHECK(v[j] == 0.0 || fabs(fabs(v[j]) - nrm) <= 1e-12 * nrm);
            CHECK(v[j] == 0.0 || (v[j] > 0) == (x[j] > 0));
            if (x[j] == 0.0) CHECK(v[j] == 0.0);
        }
    }

    /* encode with the same generator state, decode: identical values */
    uint64_t nbytes = fedmm_wire_nbytes(FEDMM_SCHEME_BLOCKP, Q, BLOCK, 2, FEDMM_NORM_L2, 8);
    CHECK(nbytes == 32 + 16 * 8 + 250);
    uint8_t *payload = (uint8_t *)malloc((size_t)nbytes);
    CHECK(payload != NULL);
    splitmix_t st_e = {7};
    rng.state = &st_e;
    CHECK(fedmm_encode_f64(x, Q, BLOCK, 2, FEDMM_NORM_L2, FEDMM_SCHEME_BLOCKP, &rng, payload,
                           (size_t)nbytes) == FEDMM_OK);
    CHECK(memcmp(payload, FEDMM_WIRE_MAGIC, 4) == 0);
    const char *reason = NULL;
    CHECK(fedmm_wire_decode(payload, (size_t)nbytes, w, Q, &reason) == FEDMM_OK);
    CHECK(memcmp(v, w, sizeof v) == 0);

    /* the decoder takes the payload length and rejects short input */
    CHECK(fedmm_wire_decode(payload, (size_t)nbytes - 1, w, Q, &reason) == FEDMM_EFORMAT);
    CHECK(strstr(reason, "size") != NULL);
    fedmm_wire_header_t hdr;
    CHECK(fedmm_wire_read_header(payload, 31, &hdr, &reason) == FEDMM_EFORMAT);

    /* 8-bit stochastic rounding, infinity norm: |v| <= max|x| per block */
    rng.state = &st;
    CHECK(fedmm_quantize_f64(x, Q, BLOCK, 8, FEDMM_NORM_LINF, &rng, v) == FEDMM_OK);
    for (int j = 0; j < Q; ++j) CHECK(fabs(v[j]) <= 1.0);

    /* NaN is reported, not propagated */
    x[5] = NAN;
    CHECK(fedmm_quantize_f64(x, Q, BLOCK, 2, FEDMM_NORM_L2, &rng, v) == FEDMM_ENONFINITE);
    free(payload);
    printf("OK\n");
    return 0;
}
