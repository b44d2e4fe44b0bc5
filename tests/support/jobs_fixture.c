/* jobs_fixture.c: the job pool suites' locked allocator, pool makers and atomic reads. The lock
 * is what lets worker threads allocate through the (single-threaded) counting allocator. */
#include "jobs_fixture.h"

#include <check.h>

void *locked_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    locked_allocator *l = ud;
    pthread_mutex_lock(&l->lock);
    void *p = test_allocator_fn(&l->inner, ptr, osize, nsize);
    pthread_mutex_unlock(&l->lock);
    return p;
}

void locked_init(locked_allocator *l) {
    pthread_mutex_init(&l->lock, NULL);
    test_allocator_init(&l->inner);
}

void locked_fini(locked_allocator *l) { pthread_mutex_destroy(&l->lock); }

test_allocator locked_snapshot(locked_allocator *l) {
    pthread_mutex_lock(&l->lock);
    test_allocator copy = l->inner;
    pthread_mutex_unlock(&l->lock);
    return copy;
}

void locked_fail_after(locked_allocator *l, int64_t n) {
    pthread_mutex_lock(&l->lock);
    test_allocator_fail_after(&l->inner, n);
    pthread_mutex_unlock(&l->lock);
}

void locked_fail_never(locked_allocator *l) {
    pthread_mutex_lock(&l->lock);
    test_allocator_fail_never(&l->inner);
    pthread_mutex_unlock(&l->lock);
}

kiln_jobs *pool_create(int32_t workers, locked_allocator *l) {
    kiln_jobs_desc desc = {.workers = workers, .alloc = locked_alloc_fn, .alloc_ud = l};
    kiln_jobs *jobs = kiln_jobs_create(&desc);
    ck_assert_ptr_nonnull(jobs);
    return jobs;
}

int loaded(atomic_int *value) { return atomic_load(value); }

kiln_jobs *pool_or_none(int32_t workers) {
    if (workers == NO_POOL) return NULL;
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = workers});
    ck_assert_ptr_nonnull(jobs);
    return jobs;
}
