/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_random.h -- counter-based Philox streams and sampling without replacement (random.c).
 *
 * One family of the public C API; fedmm_kernels.h includes every family
 * header and states the conventions they share (status codes, column-major
 * matrices, caller-provided workspaces).  This header compiles on its own.
 */
#ifndef FEDMM_RANDOM_H
#define FEDMM_RANDOM_H

#include "fedmm_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- counter-based random streams and sampling (random.c) ---------------- */
/* Philox4x64-10 with NumPy's state layout semantics: numpy.random.Philox with
 * key `key` and counter `counter` (buffer empty) produces the same uint64,
 * uint32 and double draws as fedmm_philox_seek(st, key, counter) followed by
 * the fedmm_philox_next_* functions (the next draw first increments the
 * 256-bit counter, then yields the four outputs of its block in order; a
 * 32-bit draw returns the low half of a 64-bit draw and keeps the high half
 * for the next 32-bit draw).  fedmm_philox_bitgen fills a fedmm_bitgen_t so
 * that every kernel taking a generator can draw from it. */
typedef struct fedmm_philox {
    uint64_t counter[4];
    uint64_t key[2];
    uint64_t buffer[4];
    int buffer_pos;
    int has_uint32;
    uint32_t uinteger;
} fedmm_philox_t;
void fedmm_philox_seek(fedmm_philox_t *state, const uint64_t key[2], const uint64_t counter[4]);
uint64_t fedmm_philox_next_uint64(void *state);
uint32_t fedmm_philox_next_uint32(void *state);
double fedmm_philox_next_double(void *state);
void fedmm_philox_bitgen(fedmm_philox_t *state, fedmm_bitgen_t *bitgen);

/* b distinct indices drawn uniformly from 0..n-1, in the order of a partial
 * Fisher-Yates shuffle: out[i] is a uniform pick among the n - i indices
 * not yet taken, by masked rejection on next_uint32 (n - 1 - i < 2^32) or
 * next_uint64.  work: n int64 (overwritten).  0 <= b <= n. */
int fedmm_sample_without_replacement(fedmm_bitgen_t *rng, int64_t n, int64_t b, int64_t *out,
                                     int64_t *work);

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_RANDOM_H */
