/* SPDX-License-Identifier: BSD-3-Clause
 *
 * random.c -- counter-based random streams and sampling without replacement.
 *
 * fedmm draws the randomness of party i at round t from Philox4x64-10
 * (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2,
 * 3", SC 2011) keyed by the party and started at counter (0, t, 0, 0).  The
 * Python layer uses numpy.random.Philox for it; the compiled round kernels
 * (engine.c) cannot create NumPy objects without the GIL, so this file
 * carries a replica of that generator: same rounds, same counter increment,
 * same four-output buffer and the same buffered upper half for 32-bit draws,
 * so that both produce the same numbers from the same state
 * (tests/test_rounds_kernels.py checks it against NumPy).
 */
#include <string.h>

#include "fedmm_kernels.h"

/* Philox4x64 multipliers and Weyl key increments (Random123). */
#define PHILOX_M0 UINT64_C(0xD2E7470EE14C6C93)
#define PHILOX_M1 UINT64_C(0xCA5A826395121157)
#define PHILOX_W0 UINT64_C(0x9E3779B97F4A7C15)
#define PHILOX_W1 UINT64_C(0xBB67AE8584CAA73B)

/* 64 x 64 -> 128-bit product: low half returned, high half in *hi. */
static inline uint64_t mulhilo64(uint64_t a, uint64_t b, uint64_t *hi)
{
#if defined(__SIZEOF_INT128__)
    const unsigned __int128 prod = (unsigned __int128)a * b;
    *hi = (uint64_t)(prod >> 64);
    return (uint64_t)prod;
#else
    const uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32;
    const uint64_t b_lo = b & 0xffffffffu, b_hi = b >> 32;
    const uint64_t ll = a_lo * b_lo, lh = a_lo * b_hi, hl = a_hi * b_lo, hh = a_hi * b_hi;
    const uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
    *hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
    return (mid << 32) | (ll & 0xffffffffu);
#endif
}

/* The 10-round bijection of one counter under one key. */
static void philox4x64_10(const uint64_t counter[4], const uint64_t key[2], uint64_t out[4])
{
    uint64_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint64_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint64_t hi0, hi1;
        const uint64_t lo0 = mulhilo64(PHILOX_M0, c0, &hi0);
        const uint64_t lo1 = mulhilo64(PHILOX_M1, c2, &hi1);
        const uint64_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void fedmm_philox_seek(fedmm_philox_t *state, const uint64_t key[2], const uint64_t counter[4])
{
    memcpy(state->key, key, sizeof state->key);
    memcpy(state->counter, counter, sizeof state->counter);
    memset(state->buffer, 0, sizeof state->buffer);
    state->buffer_pos = 4; /* empty: the next draw advances the counter first */
    state->has_uint32 = 0;
    state->uinteger = 0;
}

uint64_t fedmm_philox_next_uint64(void *st)
{
    fedmm_philox_t *state = (fedmm_philox_t *)st;
    if (state->buffer_pos < 4) return state->buffer[state->buffer_pos++];
    for (int i = 0; i < 4; ++i) /* 256-bit counter increment */
        if (++state->counter[i] != 0) break;
    philox4x64_10(state->counter, state->key, state->buffer);
    state->buffer_pos = 1;
    return state->buffer[0];
}

uint32_t fedmm_philox_next_uint32(void *st)
{
    fedmm_philox_t *state = (fedmm_philox_t *)st;
    if (state->has_uint32) {
        state->has_uint32 = 0;
        return state->uinteger;
    }
    const uint64_t next = fedmm_philox_next_uint64(st);
    state->has_uint32 = 1;
    state->uinteger = (uint32_t)(next >> 32);
    return (uint32_t)(next & 0xffffffffu);
}

double fedmm_philox_next_double(void *st)
{
    return (double)(fedmm_philox_next_uint64(st) >> 11) * (1.0 / 9007199254740992.0);
}

void fedmm_philox_bitgen(fedmm_philox_t *state, fedmm_bitgen_t *bitgen)
{
    bitgen->state = state;
    bitgen->next_uint64 = fedmm_philox_next_uint64;
    bitgen->next_uint32 = fedmm_philox_next_uint32;
    bitgen->next_double = fedmm_philox_next_double;
    bitgen->next_raw = fedmm_philox_next_uint64;
}

/* Uniform integer in [0, max] by masked rejection (at most 2 expected draws):
 * 32-bit draws while max fits in 32 bits, 64-bit draws otherwise. */
static uint64_t bounded_uint64(fedmm_bitgen_t *rng, uint64_t max)
{
    if (max == 0) return 0;
    uint64_t mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    uint64_t value;
    if (max <= UINT64_C(0xffffffff)) {
        do value = rng->next_uint32(rng->state) & mask; while (value > max);
    } else {
        do value = rng->next_uint64(rng->state) & mask; while (value > max);
    }
    return value;
}

int fedmm_sample_without_replacement(fedmm_bitgen_t *rng, int64_t n, int64_t b, int64_t *out,
                                     int64_t *work)
{
    if (rng == NULL || n < 0 || b < 0 || b > n || (b > 0 && (out == NULL || work == NULL)))
        return FEDMM_EINVAL;
    if (b == 0) return FEDMM_OK;
    for (int64_t i = 0; i < n; ++i) work[i] = i;
    /* partial Fisher-Yates: position i takes a uniform pick of the n - i left */
    for (int64_t i = 0; i < b; ++i) {
        const int64_t j = i + (int64_t)bounded_uint64(rng, (uint64_t)(n - 1 - i));
        const int64_t picked = work[j];
        work[j] = work[i];
        work[i] = picked;
        out[i] = picked;
    }
    return FEDMM_OK;
}
