/* jobs_fixture.h: what the job pool suites share: the counting allocator behind a mutex (so
 * worker threads may use it), pools made on it, and atomic reads that assert readably. */
#ifndef KILN_JOBS_FIXTURE_H
#define KILN_JOBS_FIXTURE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "kiln.h"
#include "test_support.h"

/*
 * Functions in this header:
 *   locked_alloc_fn, locked_init, locked_fini, locked_snapshot, locked_fail_after,
 *   locked_fail_never, pool_create, pool_or_none, loaded.
 */

/* The counting allocator of test_support behind a mutex, so worker threads may use it. */
typedef struct locked_allocator {
    pthread_mutex_t lock;
    test_allocator inner;
} locked_allocator;

/* The kiln_alloc_fn; ud is the locked_allocator. */
void *locked_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize);
void locked_init(locked_allocator *l);
void locked_fini(locked_allocator *l);
/* A snapshot of the inner counters, read under the lock. */
test_allocator locked_snapshot(locked_allocator *l);
/* test_allocator_fail_after / _fail_never under the lock. */
void locked_fail_after(locked_allocator *l, int64_t n);
void locked_fail_never(locked_allocator *l);

/* A pool of that many workers allocating through l, asserting creation. */
kiln_jobs *pool_create(int32_t workers, locked_allocator *l);

/* A pool of that many workers on the default allocator, or no pool at all for NO_POOL. */
#define NO_POOL (-100)
kiln_jobs *pool_or_none(int32_t workers);

/* An atomic read as a plain call, so failed assertions print readably. */
int loaded(atomic_int *value);

#endif /* KILN_JOBS_FIXTURE_H */
