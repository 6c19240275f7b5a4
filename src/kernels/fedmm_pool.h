/* SPDX-License-Identifier: BSD-3-Clause
 *
 * fedmm_pool.h -- the worker pool of the round engine (pool.c).
 *
 * One family of the public C API; fedmm_kernels.h includes every family
 * header and states the conventions they share (status codes, column-major
 * matrices, caller-provided workspaces).  This header compiles on its own.
 */
#ifndef FEDMM_POOL_H
#define FEDMM_POOL_H

#include "fedmm_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- worker pool (pool.c) ------------------------------------------------ */
/* A small pool of persistent worker threads that run the items 0..n_items-1
 * of a job: fedmm_pool_run(pool, n_items, fn, ctx) calls fn(ctx, k, worker)
 * once for every k, on the calling thread (worker 0) and the pool's
 * n_threads - 1 threads (workers 1..n_threads-1), and returns when every
 * call has returned.  Items go to whichever thread asks next (one shared
 * atomic counter: a dynamic schedule); fn must therefore make its results
 * depend on k only, never on worker (worker only picks a per-thread
 * workspace), and then a job gives the same results, bit for bit, for
 * every n_threads and every interleaving.  The caller never waits for a
 * thread that has not started an item: a worker that the operating system
 * has not scheduled yet simply finds no item left.  A job that took
 * longer than the calling thread alone would have (a worker lost its core
 * in the middle of an item: another process keeps that core busy) makes
 * the next 1, 2, 4, ..., 256 jobs (doubling while that goes on) run on the
 * calling thread alone; a job that gains from the workers resets it.  Who
 * runs an item never changes the results.
 *
 * Waits: a thread with nothing to do spins for at most spin_ns nanoseconds
 * (a CPU pause per test), then sleeps on a condition variable (a futex on
 * Linux) and uses no CPU until the next job or the end of the job it waits
 * for.  So idle workers between the jobs of a busy caller cost nothing to
 * a process on another core, and a short spin_ns (a few microseconds)
 * keeps the wake-up latency of back-to-back jobs low.
 *
 * Worker threads block every signal: signals go to the other threads of
 * the process (a Python program's main thread gets Ctrl-C).  A pool may
 * serve one job at a time: fedmm_pool_run must not be called concurrently
 * on one pool, nor from inside fn.  Builds without POSIX threads (the meson
 * option threads=none) run every job on the calling thread, and
 * fedmm_pool_size is then 1.
 *
 * fedmm_pool_create: n_threads >= 1 (the caller included), spin_ns >= 0;
 * FEDMM_EINVAL otherwise, FEDMM_ENOMEM when a thread cannot be started (no
 * pool is then left behind).  fedmm_pool_destroy(NULL) does nothing; it
 * joins the workers, so none outlives it. */
typedef struct fedmm_pool fedmm_pool_t;
typedef void (*fedmm_pool_task_fn)(void *ctx, int64_t item, int worker);
int fedmm_pool_create(int n_threads, int64_t spin_ns, fedmm_pool_t **pool);
void fedmm_pool_destroy(fedmm_pool_t *pool);
int fedmm_pool_size(const fedmm_pool_t *pool);
int fedmm_pool_run(fedmm_pool_t *pool, int64_t n_items, fedmm_pool_task_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* FEDMM_POOL_H */
