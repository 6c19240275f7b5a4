/* SPDX-License-Identifier: BSD-3-Clause */
/* splitmix64: a tiny generator with NumPy's bitgen_t interface, for the C API tests
 * (a C user of fedmm passes any generator through fedmm_bitgen_t). */
#ifndef FEDMM_TEST_SPLITMIX64_H
#define FEDMM_TEST_SPLITMIX64_H

#include <stdint.h>

typedef struct { uint64_t s; } splitmix_t;

static uint64_t sm_next64(void *st)
{
    splitmix_t *g = (splitmix_t *)st;
    uint64_t z = (g->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static uint32_t sm_next32(void *st) { return (uint32_t)(sm_next64(st) >> 32); }
static double sm_nextd(void *st) { return (double)(sm_next64(st) >> 11) * 0x1p-53; }

#endif
