/* SPDX-License-Identifier: BSD-3-Clause */
/* A C program using the fedmm kernels without Python: its own
 * bitgen_t-compatible generator (splitmix64), quantizer specs and their
 * check, block-p quantization, fedmm_quantizer_apply, a wire round trip, and
 * the decoder's validation.  Prints "OK" and exits 0 on success; prints the
 * failed check and exits 1 otherwise. */
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

    /* quantizer specs: (scheme, bits, norm, block) */
    const fedmm_quantizer_t blockp = {FEDMM_SCHEME_BLOCKP, 2, FEDMM_NORM_L2, BLOCK};
    const fedmm_quantizer_t dither8 = {FEDMM_SCHEME_DITHER, 8, FEDMM_NORM_LINF, BLOCK};
    const fedmm_quantizer_t identity = {FEDMM_SCHEME_IDENTITY, 0, FEDMM_NORM_NONE, 0};
    CHECK(fedmm_quantizer_check(&blockp, Q) == FEDMM_OK);
    CHECK(fedmm_quantizer_check(&dither8, Q) == FEDMM_OK);
    CHECK(fedmm_quantizer_check(&identity, Q) == FEDMM_OK);
    CHECK(fedmm_quantizer_check(&blockp, BLOCK - 1) == FEDMM_EINVAL); /* block > q */
    CHECK(fedmm_quantizer_check(&blockp, 0) == FEDMM_EINVAL);
    CHECK(fedmm_quantizer_check(NULL, Q) == FEDMM_EINVAL);
    {
        fedmm_quantizer_t bad = blockp;
        bad.bits = 3; /* block-p sends 2 bits */
        CHECK(fedmm_quantizer_check(&bad, Q) == FEDMM_EINVAL);
        bad = dither8;
        bad.bits = 17;
        CHECK(fedmm_quantizer_check(&bad, Q) == FEDMM_EINVAL);
        bad = dither8;
        bad.norm = FEDMM_NORM_NONE;
        CHECK(fedmm_quantizer_check(&bad, Q) == FEDMM_EINVAL);
        bad = identity;
        bad.block = 1;
        CHECK(fedmm_quantizer_check(&bad, Q) == FEDMM_EINVAL);
        CHECK(fedmm_quantize_f64(x, Q, &bad, &rng, v) == FEDMM_EINVAL);
        CHECK(fedmm_quantize_f64(x, Q, &identity, &rng, v) == FEDMM_EINVAL);
    }

    /* block-p (bits = 2, L2 norm): values in {-N, 0, N} with x's sign */
    splitmix_t st_q = {7};
    rng.state = &st_q;
    CHECK(fedmm_quantize_f64(x, Q, &blockp, &rng, v) == FEDMM_OK);
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

    /* fedmm_quantizer_apply: the same draws and values as fedmm_quantize_f64;
     * a copy for the identity (no generator needed) */
    splitmix_t st_a = {7};
    rng.state = &st_a;
    CHECK(fedmm_quantizer_apply(&blockp, x, Q, &rng, w) == FEDMM_OK);
    CHECK(memcmp(v, w, sizeof v) == 0 && st_a.s == st_q.s);
    CHECK(fedmm_quantizer_apply(&identity, x, Q, NULL, w) == FEDMM_OK);
    CHECK(memcmp(x, w, sizeof x) == 0);

    /* encode with the same generator state, decode: identical values */
    uint64_t nbytes = fedmm_wire_nbytes(&blockp, Q, 8);
    CHECK(nbytes == 32 + 16 * 8 + 250);
    CHECK(fedmm_wire_nbytes(&blockp, Q, 2) == 0);
    CHECK(fedmm_wire_nbytes(&identity, Q, 4) == 32 + 4 * Q);
    uint8_t *payload = (uint8_t *)malloc((size_t)nbytes);
    CHECK(payload != NULL);
    splitmix_t st_e = {7};
    rng.state = &st_e;
    CHECK(fedmm_encode_f64(x, Q, &blockp, &rng, payload, (size_t)nbytes - 1) == FEDMM_EINVAL);
    CHECK(fedmm_encode_f64(x, Q, &blockp, &rng, payload, (size_t)nbytes) == FEDMM_OK);
    CHECK(st_e.s == st_q.s); /* the same random numbers consumed */
    CHECK(memcmp(payload, FEDMM_WIRE_MAGIC, 4) == 0);
    const char *reason = NULL;
    CHECK(fedmm_wire_decode(payload, (size_t)nbytes, w, Q, &reason) == FEDMM_OK);
    CHECK(memcmp(v, w, sizeof v) == 0);

    /* the decoder takes the payload length and rejects short input */
    CHECK(fedmm_wire_decode(payload, (size_t)nbytes - 1, w, Q, &reason) == FEDMM_EFORMAT);
    CHECK(strstr(reason, "size") != NULL);
    fedmm_wire_header_t hdr;
    CHECK(fedmm_wire_read_header(payload, 31, &hdr, &reason) == FEDMM_EFORMAT);
    CHECK(fedmm_wire_read_header(payload, (size_t)nbytes, &hdr, &reason) == FEDMM_OK);
    CHECK(hdr.scheme == FEDMM_SCHEME_BLOCKP && hdr.bits == 2 && hdr.norm == FEDMM_NORM_L2 &&
          hdr.q == Q && hdr.block == BLOCK && hdr.value_nbytes == 8);
    free(payload);

    /* an identity spec encodes the identity payload (no generator needed) */
    uint64_t id_nbytes = fedmm_wire_nbytes(&identity, Q, 8);
    uint8_t *id1 = (uint8_t *)malloc((size_t)id_nbytes), *id2 = (uint8_t *)malloc((size_t)id_nbytes);
    CHECK(id1 != NULL && id2 != NULL);
    CHECK(fedmm_encode_f64(x, Q, &identity, NULL, id1, (size_t)id_nbytes) == FEDMM_OK);
    CHECK(fedmm_identity_encode_f64(x, Q, id2, (size_t)id_nbytes) == FEDMM_OK);
    CHECK(memcmp(id1, id2, (size_t)id_nbytes) == 0);
    CHECK(fedmm_wire_decode(id1, (size_t)id_nbytes, w, Q, &reason) == FEDMM_OK);
    CHECK(memcmp(x, w, sizeof x) == 0);
    free(id1);
    free(id2);

    /* 8-bit stochastic rounding, infinity norm: |v| <= max|x| per block */
    rng.state = &st;
    CHECK(fedmm_quantize_f64(x, Q, &dither8, &rng, v) == FEDMM_OK);
    for (int j = 0; j < Q; ++j) CHECK(fabs(v[j]) <= 1.0);

    /* NaN is reported, not propagated */
    x[5] = NAN;
    CHECK(fedmm_quantize_f64(x, Q, &blockp, &rng, v) == FEDMM_ENONFINITE);
    printf("OK\n");
    return 0;
}
