/* SPDX-License-Identifier: BSD-3-Clause
 *
 * The worker pool of fedmm_kernels.h under many small jobs (0..16 items of
 * uneven cost, back to back) for 1..4 threads, with and without a spin:
 * every item runs exactly once per job, on a worker index below
 * fedmm_pool_size, and every write of a job is visible to the caller when
 * fedmm_pool_run returns.  Under ThreadSanitizer any data race aborts.
 * Prints "OK <size of a 4-thread pool>". */
#include <stdio.h>
#include "fedmm_kernels.h"

#define MAX_ITEMS 16

typedef struct {
    int64_t job;
    int n_threads;
    int64_t value[MAX_ITEMS];
    int calls[MAX_ITEMS];
    int bad_worker;
} job_t;

static void task(void *arg, int64_t k, int worker)
{
    job_t *job = (job_t *)arg;
    volatile int64_t spin = 0;
    for (int64_t j = 0; j < (k % 5) * 200; j++) spin += j;
    job->value[k] = 1000 * job->job + k;
    job->calls[k] += 1;
    if (worker < 0 || worker >= job->n_threads) job->bad_worker = 1;
}

int main(void)
{
    int bad = 0, size4 = 0;
    for (int n_threads = 1; n_threads <= 4; n_threads++) {
        for (int64_t spin_ns = 0; spin_ns <= 20000; spin_ns += 20000) {
            fedmm_pool_t *pool = NULL;
            if (fedmm_pool_create(n_threads, spin_ns, &pool) != FEDMM_OK) return 2;
            if (n_threads == 4) size4 = fedmm_pool_size(pool);
            job_t job = {0};
            job.n_threads = fedmm_pool_size(pool);
            for (int64_t r = 0; r < 2000; r++) {
                int64_t n = r % (MAX_ITEMS + 1);
                job.job = r;
                for (int64_t k = 0; k < MAX_ITEMS; k++) job.calls[k] = 0;
                if (fedmm_pool_run(pool, n, task, &job) != FEDMM_OK) bad++;
                for (int64_t k = 0; k < n; k++) bad += job.calls[k] != 1 || job.value[k] != 1000 * r + k;
                for (int64_t k = n; k < MAX_ITEMS; k++) bad += job.calls[k] != 0;
            }
            bad += job.bad_worker;
            fedmm_pool_destroy(pool);
        }
    }
    fedmm_pool_t *pool = (fedmm_pool_t *)&bad;
    bad += fedmm_pool_create(0, 0, &pool) != FEDMM_EINVAL || pool != NULL;
    bad += fedmm_pool_create(2, -1, &pool) != FEDMM_EINVAL;
    bad += fedmm_pool_create(2, 0, NULL) != FEDMM_EINVAL;
    bad += fedmm_pool_run(NULL, 3, task, NULL) != FEDMM_EINVAL;
    bad += fedmm_pool_size(NULL) != 0;
    fedmm_pool_destroy(NULL);
    if (bad) {
        printf("BAD %d\n", bad);
        return 1;
    }
    printf("OK %d\n", size4);
    return 0;
}
