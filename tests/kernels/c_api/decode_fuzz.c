/* SPDX-License-Identifier: BSD-3-Clause */
/* Decoder fuzzing meant to run under AddressSanitizer: valid payloads are
 * truncated, extended, bit-flipped and overwritten with random bytes, each
 * copied into a heap buffer of exactly its length, and decoded.  The decoder
 * must return FEDMM_OK or FEDMM_EFORMAT (with a reason) and never touch
 * memory outside the buffer.  Prints "OK <accepted> <rejected>". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedmm_kernels.h"

#include "splitmix64.h"

static long accepted = 0, rejected = 0;

static int try_decode(const uint8_t *src, size_t n)
{
    uint8_t *buf = (uint8_t *)malloc(n ? n : 1);
    if (buf == NULL) return 2;
    memcpy(buf, src, n);
    fedmm_wire_header_t h;
    const char *reason = NULL;
    int st = fedmm_wire_read_header(buf, n, &h, &reason);
    if (st == FEDMM_OK) {
        double *out = (double *)malloc((size_t)h.q * sizeof(double));
        if (out == NULL) return 2;
        st = fedmm_wire_decode(buf, n, out, (size_t)h.q, &reason);
        free(out);
    }
    free(buf);
    if (st == FEDMM_OK) { ++accepted; return 0; }
    if (st == FEDMM_EFORMAT && reason != NULL && reason[0] != '\0') { ++rejected; return 0; }
    printf("bad status %d\n", st);
    return 1;
}

int main(void)
{
    splitmix_t st = {2024};
    fedmm_bitgen_t rng = {&st, sm_next64, sm_next32, sm_nextd, sm_next64};
    double x[300];
    uint8_t scratch[4096];
    for (int trial = 0; trial < 400; ++trial) {
        size_t q = 1 + sm_next64(&st) % 300;
        size_t block = 1 + sm_next64(&st) % q;
        int bits = 2 + (int)(sm_next64(&st) % 15);
        int norm = 1 + (int)(sm_next64(&st) % 2);
        int identity = trial % 5 == 0;
        for (size_t j = 0; j < q; ++j) x[j] = 2.0 * sm_nextd(&st) - 1.0;
        const fedmm_quantizer_t ident = {FEDMM_SCHEME_IDENTITY, 0, FEDMM_NORM_NONE, 0};
        const fedmm_quantizer_t dither = {FEDMM_SCHEME_DITHER, bits, norm, block};
        uint64_t nb = fedmm_wire_nbytes(identity ? &ident : &dither, q, 8);
        if (nb == 0 || nb + 64 > sizeof scratch) return 2;
        int s = identity ? fedmm_identity_encode_f64(x, q, scratch, (size_t)nb)
                         : fedmm_encode_f64(x, q, &dither, &rng, scratch, (size_t)nb);
        if (s != FEDMM_OK) return 2;
        if (try_decode(scratch, (size_t)nb)) return 1;
        for (size_t cut = 0; cut < nb; cut += 1 + nb / 40)
            if (try_decode(scratch, cut)) return 1;
        memset(scratch + nb, 0, 64);
        if (try_decode(scratch, (size_t)nb + 1 + sm_next64(&st) % 63)) return 1;
        for (int f = 0; f < 20; ++f) {
            uint8_t saved[4096];
            memcpy(saved, scratch, (size_t)nb);
            int nflips = 1 + (int)(sm_next64(&st) % 3);
            for (int k = 0; k < nflips; ++k) {
                uint64_t bit = sm_next64(&st) % (nb * 8);
                /* bias half the flips into the header */
                if (k == 0 && f % 2 == 0) bit = sm_next64(&st) % (FEDMM_WIRE_HEADER_NBYTES * 8);
                scratch[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            }
            if (try_decode(scratch, (size_t)nb)) return 1;
            memcpy(scratch, saved, (size_t)nb);
        }
        uint8_t noise[200];
        size_t nn = sm_next64(&st) % sizeof noise;
        for (size_t k = 0; k < nn; ++k) noise[k] = (uint8_t)sm_next64(&st);
        if (nn >= 5) memcpy(noise, "FMMQ\x01", 5);
        if (try_decode(noise, nn)) return 1;
    }
    printf("OK %ld %ld\n", accepted, rejected);
    return 0;
}
