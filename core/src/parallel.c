/* parallel.c: kiln_parallel_for, a query's rows cut into ranges run as jobs. Invariant: the
 * world stays deferred and marked as iterating from before the first range starts until
 * after the last one ends, so no row moves underneath a job. */
#include <string.h>

#include "defer.h"
#include "guard.h"
#include "jobs.h"
#include "query.h"
#include "world.h"

#define KL_DEFAULT_MIN_ROWS 1024

typedef struct range_job {
    const kiln_iter *chunk;
    int32_t begin, end;
    kiln_chunk_fn fn;
    void *user;
    const struct kl_system *system; /* the system that called kiln_parallel_for (debug checks) */
} range_job;

/* Runs as the system that started it, whatever thread takes it (one waiting in another
 * system's kiln_jobs_wait included), so the debug checks hold the range to that system's
 * access and refuse changes to the world from it. */
static void run_range(void *arg) {
    range_job *r = arg;
    kl_guard_frame frame;
    kl_guard_enter(r->chunk->world, r->system, true, &frame);
    kiln_iter view;
    kiln_iter_range(r->chunk, r->begin, r->end, &view);
    r->fn(&view, r->user);
    kiln_iter_fini(&view);
    kl_guard_leave(&frame);
}

static void run_inline(const kiln_query *query, kiln_chunk_fn fn, void *user) {
    kiln_iter it;
    kiln_query_iter(query, &it);
    while (kiln_query_next(&it)) {
        kiln_iter view;
        kiln_iter_range(&it, 0, it.count, &view);
        fn(&view, user);
        kiln_iter_fini(&view);
    }
}

kiln_result kiln_parallel_for(kiln_jobs *jobs, const kiln_query *query, int32_t min_rows,
                              kiln_chunk_fn fn, void *user) {
    KILN_ASSERT(query != NULL && fn != NULL, "query and fn are required");
    if (jobs == NULL || kiln_jobs_worker_count(jobs) == 0) {
        run_inline(query, fn, user);
        return KILN_OK;
    }
    kiln_world *world = kl_query_world(query);
    if (min_rows <= 0) min_rows = KL_DEFAULT_MIN_ROWS;
    int64_t rows = kiln_query_count(query);
    int32_t chunks = kl_query_chunk_count(query);
    if (rows == 0) return KILN_OK;
    /* Aim for many ranges per thread: the queue hands them out as threads free up, so the
     * last one to finish (and a worker that woke late) costs at most one small range. */
    int64_t threads = kiln_jobs_worker_count(jobs) + 1;
    int64_t size = (rows + threads * 16 - 1) / (threads * 16);
    if (size < min_rows) size = min_rows;
    int64_t max_ranges = chunks + rows / size + 1;
    size_t bytes = sizeof(kiln_iter) * (size_t)chunks + (sizeof(range_job) + sizeof(kiln_job)) *
                                                           (size_t)max_ranges;
    uint8_t *scratch = kl_jobs_scratch_acquire(jobs, bytes);
    if (!scratch) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_parallel_for: out of memory");
    kiln_iter *snapshots = (kiln_iter *)scratch;
    range_job *ranges = (range_job *)(snapshots + chunks);
    kiln_job *list = (kiln_job *)(ranges + max_ranges);

    /* Hold the world deferred and iterating across the whole run: the iteration below ends
     * before the jobs start. */
    kiln_defer_begin(world);
    atomic_fetch_add_explicit(&world->iterating, 1, memory_order_relaxed);
    const struct kl_system *caller = kl_guard_system(world);
    int32_t n_chunks = 0, n_ranges = 0;
    kiln_iter it;
    kiln_query_iter(query, &it);
    while (kiln_query_next(&it) && n_chunks < chunks) {
        snapshots[n_chunks] = it;
        /* k ranges of at least size rows each, the remainder spread over them. */
        int64_t k = it.count / size;
        if (k < 1) k = 1;
        for (int64_t j = 0; j < k; j++) {
            int64_t b = it.count * j / k, e = it.count * (j + 1) / k;
            ranges[n_ranges] =
                (range_job){&snapshots[n_chunks], (int32_t)b, (int32_t)e, fn, user, caller};
            list[n_ranges] = (kiln_job){run_range, &ranges[n_ranges]};
            n_ranges++;
        }
        n_chunks++;
    }
    kiln_iter_fini(&it);
    kiln_counter counter = {0};
    kiln_result r = kiln_jobs_submit(jobs, list, n_ranges, &counter);
    if (r == KILN_OK) kiln_jobs_wait(jobs, &counter);
    else kl_fail(world, r, "kiln_parallel_for: out of memory queueing jobs");
    atomic_fetch_sub_explicit(&world->iterating, 1, memory_order_relaxed);
    kl_jobs_scratch_release(jobs, scratch);
    kiln_result end = kl_defer_end(world, "kiln_parallel_for");
    return r != KILN_OK ? r : end;
}
