/* jobs.h: what the rest of the core uses of the job pool beyond the public API: scratch
 * buffers handed out under the pool's lock, so concurrent parallel-fors allocate nothing
 * in steady state. */
#ifndef KILN_JOBS_H
#define KILN_JOBS_H

#include <pthread.h>

#include "internal.h"

/* A reusable scratch block of at least size bytes from the pool's allocator (NULL when out
 * of memory). Give it back with kl_jobs_scratch_release. Thread-safe. */
KL_HIDDEN void *kl_jobs_scratch_acquire(kiln_jobs *jobs, size_t size);
KL_HIDDEN void kl_jobs_scratch_release(kiln_jobs *jobs, void *block);

/* A thread running a schedule's stage, counting the jobs it takes up in kiln_jobs_wait meanwhile, so
 * the stage tells its main_thread system's own calls from those of a job run in its wait. */
typedef struct kl_jobs_watcher {
    pthread_t thread;
    int32_t inline_jobs; /* written and read by that thread only */
    struct kl_jobs_watcher *next;
} kl_jobs_watcher;

/* Watches the calling thread into w (its count at 0) until kl_jobs_unwatch: pools shared by the
 * schedules of several worlds keep a watcher each; one thread's nested stages each count. */
KL_HIDDEN void kl_jobs_watch(kiln_jobs *jobs, kl_jobs_watcher *w);
KL_HIDDEN void kl_jobs_unwatch(kiln_jobs *jobs, kl_jobs_watcher *w);

#endif
