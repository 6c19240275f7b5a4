/* SPDX-License-Identifier: BSD-3-Clause
 *
 * pool.c -- the worker pool of fedmm_kernels.h: persistent threads, a
 * dynamic schedule through one atomic item counter, and waits that spin
 * briefly and then sleep on a condition variable.
 *
 * Protocol (every field below is the pool's; "lock" is pool->lock):
 *   - A job is published under the lock: fn, ctx, n_items, next = 0,
 *     n_done = 0, then generation + 1, then sleeping workers are signalled.
 *   - A worker that sees a new generation registers under the lock
 *     (n_registered + 1) and copies the job; it then claims chunks of items
 *     with fetch_add(next, chunk) until one starts at or past n_items, counts
 *     each finished chunk's items in n_done, and unregisters (n_registered - 1,
 *     no lock).
 *   - The caller works on the items too, then waits until n_done == n_items.
 *     The worker that finishes the last item signals it under the lock.
 *   - The next job is published only once n_registered == 0 (checked under
 *     the lock, where registrations happen), so that no worker still holds
 *     the previous job's counters when they are reset.
 * Results: fn's writes happen before its n_done increment (release), which
 * the caller reads with acquire before returning.
 */
#include "fedmm_kernels.h"

#include <stdlib.h>

#if !defined(FEDMM_NO_THREADS) && !(defined(__GNUC__) || defined(__clang__))
#define FEDMM_NO_THREADS 1 /* the atomics below are the GCC/Clang builtins */
#endif

#ifdef FEDMM_NO_THREADS

struct fedmm_pool {
    int n_threads;
};

int fedmm_pool_create(int n_threads, int64_t spin_ns, fedmm_pool_t **pool)
{
    if (pool == NULL) return FEDMM_EINVAL;
    *pool = NULL;
    if (n_threads < 1 || spin_ns < 0) return FEDMM_EINVAL;
    fedmm_pool_t *p = (fedmm_pool_t *)malloc(sizeof(*p));
    if (p == NULL) return FEDMM_ENOMEM;
    p->n_threads = 1;
    *pool = p;
    return FEDMM_OK;
}

void fedmm_pool_destroy(fedmm_pool_t *pool) { free(pool); }

int fedmm_pool_size(const fedmm_pool_t *pool) { return pool == NULL ? 0 : pool->n_threads; }

int fedmm_pool_run(fedmm_pool_t *pool, int64_t n_items, fedmm_pool_task_fn fn, void *ctx)
{
    if (pool == NULL || fn == NULL || n_items < 0) return FEDMM_EINVAL;
    for (int64_t k = 0; k < n_items; k++) fn(ctx, k, 0);
    return FEDMM_OK;
}

#else /* POSIX threads */

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#define FETCH_ADD(x, v) __atomic_fetch_add(&(x), (v), __ATOMIC_ACQ_REL)

/* Longest stretch of jobs the caller runs alone after jobs that lost time waiting (see fedmm_pool_run). */
#define FEDMM__POOL_SOLO_MAX 256

/* the counters written by every thread, each on its own cache line pair */
#define FEDMM__POOL_PAD 128

struct fedmm_pool {
    int n_threads;
    int64_t spin_ns;
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* workers sleep here between jobs */
    pthread_cond_t done; /* the caller sleeps here until n_done == n_items */
    /* the job (written under the lock while n_registered == 0) */
    fedmm_pool_task_fn fn;
    void *ctx;
    int64_t n_items;
    uint64_t generation; /* written under the lock; read atomically outside it */
    int shutdown;        /* written under the lock */
    int n_sleeping;      /* under the lock: workers waiting on wake */
    /* the caller's own: jobs still to run alone, and the length of the next such stretch */
    int64_t solo_left;
    int64_t solo_next;
    char pad0[FEDMM__POOL_PAD];
    int64_t next; /* the next unclaimed item */
    char pad1[FEDMM__POOL_PAD];
    int64_t n_done; /* finished items */
    char pad2[FEDMM__POOL_PAD];
    int n_registered; /* workers holding the current job */
    char pad3[FEDMM__POOL_PAD];
};

typedef struct {
    fedmm_pool_t *pool;
    int worker;
} worker_arg_t;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spin until *word != old or spin_ns elapse; nonzero when it changed.  The
 * clock is read every 64 pauses only. */
static int spin_while_u64(const uint64_t *word, uint64_t old, int64_t spin_ns)
{
    if (spin_ns <= 0) return __atomic_load_n(word, __ATOMIC_ACQUIRE) != old;
    int64_t deadline = now_ns() + spin_ns;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != old) return 1;
            cpu_relax();
        }
        if (now_ns() >= deadline) return 0;
    }
}

static int spin_until_i64(const int64_t *word, int64_t target, int64_t spin_ns)
{
    if (spin_ns <= 0) return __atomic_load_n(word, __ATOMIC_ACQUIRE) == target;
    int64_t deadline = now_ns() + spin_ns;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (__atomic_load_n(word, __ATOMIC_ACQUIRE) == target) return 1;
            cpu_relax();
        }
        if (now_ns() >= deadline) return 0;
    }
}

/* Items claimed at once: about 16 claims per thread and job, so that jobs of many short items (a
 * round of many small clients) do not turn the shared counter into the bottleneck, while the last
 * claims stay short enough to balance the threads. */
static int64_t chunk_of(int64_t n_items, int n_threads)
{
    int64_t chunk = n_items / (16 * (int64_t)n_threads);
    return chunk < 1 ? 1 : (chunk > 64 ? 64 : chunk);
}

/* Claim and run items of the job, chunk at a time, until none is left; returns how many it ran. */
static int64_t work_on(fedmm_pool_t *pool, fedmm_pool_task_fn fn, void *ctx, int64_t n_items, int worker)
{
    const int64_t chunk = chunk_of(n_items, pool->n_threads);
    for (int64_t ran = 0;;) {
        int64_t k = FETCH_ADD(pool->next, chunk);
        if (k >= n_items) return ran;
        const int64_t end = k + chunk < n_items ? k + chunk : n_items;
        for (int64_t j = k; j < end; j++) fn(ctx, j, worker);
        ran += end - k;
        if (FETCH_ADD(pool->n_done, end - k) + (end - k) == n_items && worker != 0) {
            pthread_mutex_lock(&pool->lock); /* the caller may sleep on done */
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->lock);
        }
    }
}

static void *worker_main(void *arg)
{
    fedmm_pool_t *pool = ((worker_arg_t *)arg)->pool;
    int worker = ((worker_arg_t *)arg)->worker;
    free(arg);
    uint64_t seen = 0;
    for (;;) {
        if (!spin_while_u64(&pool->generation, seen, pool->spin_ns)) {
            pthread_mutex_lock(&pool->lock);
            pool->n_sleeping++;
            while (pool->generation == seen && !pool->shutdown) pthread_cond_wait(&pool->wake, &pool->lock);
            pool->n_sleeping--;
        } else {
            pthread_mutex_lock(&pool->lock);
        }
        if (pool->shutdown) {
            pthread_mutex_unlock(&pool->lock);
            return NULL;
        }
        /* register for the current job (a later one than seen, perhaps not the next) */
        seen = pool->generation;
        fedmm_pool_task_fn fn = pool->fn;
        void *ctx = pool->ctx;
        int64_t n_items = pool->n_items;
        FETCH_ADD(pool->n_registered, 1);
        pthread_mutex_unlock(&pool->lock);
        work_on(pool, fn, ctx, n_items, worker);
        FETCH_ADD(pool->n_registered, -1);
    }
}

static void stop_workers(fedmm_pool_t *pool, int n_started)
{
    pthread_mutex_lock(&pool->lock);
    pool->shutdown = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 0; i < n_started; i++) pthread_join(pool->threads[i], NULL);
}

int fedmm_pool_create(int n_threads, int64_t spin_ns, fedmm_pool_t **pool)
{
    if (pool == NULL) return FEDMM_EINVAL;
    *pool = NULL;
    if (n_threads < 1 || spin_ns < 0) return FEDMM_EINVAL;
    fedmm_pool_t *p = (fedmm_pool_t *)calloc(1, sizeof(*p));
    if (p == NULL) return FEDMM_ENOMEM;
    p->threads = (pthread_t *)calloc((size_t)n_threads, sizeof(pthread_t));
    if (p->threads == NULL) {
        free(p);
        return FEDMM_ENOMEM;
    }
    p->n_threads = n_threads;
    p->spin_ns = spin_ns;
    p->solo_next = 1;
    if (pthread_mutex_init(&p->lock, NULL) != 0) goto fail_mutex;
    if (pthread_cond_init(&p->wake, NULL) != 0) goto fail_wake;
    if (pthread_cond_init(&p->done, NULL) != 0) goto fail_done;
    /* the workers inherit a mask that blocks every signal */
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    int started = 0, status = FEDMM_OK;
    for (; started < n_threads - 1; started++) {
        worker_arg_t *arg = (worker_arg_t *)malloc(sizeof(*arg));
        if (arg == NULL) {
            status = FEDMM_ENOMEM;
            break;
        }
        arg->pool = p;
        arg->worker = started + 1;
        if (pthread_create(&p->threads[started], NULL, worker_main, arg) != 0) {
            free(arg);
            status = FEDMM_ENOMEM;
            break;
        }
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (status == FEDMM_OK) {
        *pool = p;
        return FEDMM_OK;
    }
    stop_workers(p, started);
    pthread_cond_destroy(&p->done);
fail_done:
    pthread_cond_destroy(&p->wake);
fail_wake:
    pthread_mutex_destroy(&p->lock);
fail_mutex:
    free(p->threads);
    free(p);
    return FEDMM_ENOMEM;
}

void fedmm_pool_destroy(fedmm_pool_t *pool)
{
    if (pool == NULL) return;
    stop_workers(pool, pool->n_threads - 1);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->lock);
    free(pool->threads);
    free(pool);
}

int fedmm_pool_size(const fedmm_pool_t *pool) { return pool == NULL ? 0 : pool->n_threads; }

int fedmm_pool_run(fedmm_pool_t *pool, int64_t n_items, fedmm_pool_task_fn fn, void *ctx)
{
    if (pool == NULL || fn == NULL || n_items < 0) return FEDMM_EINVAL;
    if (n_items <= 1 || pool->n_threads == 1 || pool->solo_left > 0) { /* nothing to share, or alone */
        if (n_items > 1 && pool->solo_left > 0) pool->solo_left--;
        for (int64_t k = 0; k < n_items; k++) fn(ctx, k, 0);
        return FEDMM_OK;
    }
    int64_t started = now_ns();
    pthread_mutex_lock(&pool->lock);
    /* workers still registered for the previous job are past its last item: let them leave */
    while (LOAD(pool->n_registered) != 0) {
        pthread_mutex_unlock(&pool->lock);
        sched_yield();
        pthread_mutex_lock(&pool->lock);
    }
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n_items = n_items;
    STORE(pool->next, 0);
    STORE(pool->n_done, 0);
    STORE(pool->generation, pool->generation + 1);
    int64_t wanted = n_items - 1 < pool->n_sleeping ? n_items - 1 : pool->n_sleeping;
    for (int64_t i = 0; i < wanted; i++) pthread_cond_signal(&pool->wake);
    pthread_mutex_unlock(&pool->lock);

    int64_t own = work_on(pool, fn, ctx, n_items, 0);
    int64_t worked = now_ns();
    if (!spin_until_i64(&pool->n_done, n_items, pool->spin_ns)) {
        pthread_mutex_lock(&pool->lock);
        while (LOAD(pool->n_done) != n_items) pthread_cond_wait(&pool->done, &pool->lock);
        pthread_mutex_unlock(&pool->lock);
    }
    /* A job that took longer than the caller alone would have (n_items at the caller's own pace)
     * waited on a worker that lost its core mid-item: the next solo_next jobs run here alone
     * (1, 2, 4, ..., FEDMM__POOL_SOLO_MAX while that goes on); a job that gains resets it. */
    if (own > 0) {
        double alone = (double)(worked - started) / (double)own * (double)n_items;
        if ((double)(now_ns() - started) > alone) {
            pool->solo_left = pool->solo_next;
            if (pool->solo_next < FEDMM__POOL_SOLO_MAX) pool->solo_next *= 2;
        } else {
            pool->solo_next = 1;
        }
    }
    return FEDMM_OK;
}

#endif
