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

#endif
