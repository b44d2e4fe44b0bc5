/* jobs.h: what the rest of the core uses of the job pool beyond the public API: scratch
 * buffers handed out under the pool's lock, so concurrent parallel-fors allocate nothing
 * in steady state. */
#ifndef KILN_JOBS_H
#define KILN_JOBS_H

#include "internal.h"

/* A reusable scratch block of at least size bytes from the pool's allocator (NULL when out
 * of memory). Give it back with kl_jobs_scratch_release. Thread-safe. */
KL_HIDDEN void *kl_jobs_scratch_acquire(kiln_jobs *jobs, size_t size);
KL_HIDDEN void kl_jobs_scratch_release(kiln_jobs *jobs, void *block);

/* While on, jobs the calling thread (the one running a schedule's stage) takes up in kiln_jobs_wait
 * are counted, so the stage can tell its own main_thread system from a job it runs meanwhile. */
KL_HIDDEN void kl_jobs_watch(kiln_jobs *jobs, bool on);
/* Whether the watched thread, which alone may ask, is running a job it took up in kiln_jobs_wait. */
KL_HIDDEN bool kl_jobs_running_inline(const kiln_jobs *jobs);

#endif
