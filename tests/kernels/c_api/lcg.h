/* SPDX-License-Identifier: BSD-3-Clause */
/* The C API tests' input generator: a 64-bit linear congruential generator (Knuth's MMIX constants).
 * A test defines LCG_SEED before including this header and calls uniform(), in [-1, 1). */
#ifndef FEDMM_TEST_LCG_H
#define FEDMM_TEST_LCG_H

#include <stdint.h>

static uint64_t lcg_state = LCG_SEED;
static double uniform(void) /* in [-1, 1) */
{
    lcg_state = lcg_state * 6364136223846793005u + 1442695040888963407u;
    return (double)(lcg_state >> 11) * 0x1.0p-52 - 1.0;
}

#endif
