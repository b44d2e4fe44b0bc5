/* parallel.c: kiln_parallel_for, a query's rows cut into ranges run as jobs. Invariant: the
 * world stays deferred and marked as iterating from before the first range starts until
 * after the last one ends, so no row moves underneath a job. */
#include <stdio.h>
#include <string.h>

#include "defer.h"
#include "guard.h"
#include "jobs.h"
#include "query.h"
#include "spin.h"
#include "world.h"

#define KL_DEFAULT_MIN_ROWS 1024

/* The failures of a kiln_parallel_for's ranges. Each thread running a range writes into its own
 * error buffer: in a schedule run the one the run gave it (world->error for the thread running
 * the schedule), outside one a slot published for the call (the caller takes one too). After
 * the join the caller's buffer gets the message of the first range, in row order, that failed:
 * the same whatever thread ran what, and never left in another thread's buffer. Without a pool
 * each chunk is a range, run in row order on the caller's thread. */
typedef struct range_errors {
    kl_error_slots slots;     /* outside a schedule run: the call's own (else unused) */
    atomic_flag lock;         /* held to compare and copy a failed range's message */
    int32_t first;            /* the lowest range that failed, INT32_MAX for none */
    char text[KL_ERROR_SIZE]; /* its message */
} range_errors;

typedef struct range_job {
    const kiln_iter *chunk;
    int32_t begin, end;
    kiln_chunk_fn fn;
    void *user;
    const struct kl_system *system; /* the system that called kiln_parallel_for (debug checks) */
    range_errors *errors;           /* where the first failure is kept */
    int32_t index;                  /* the range's place in row order */
} range_job;

/* Keeps text, range index's message, when no earlier range's is kept. */
static void note_failure(range_errors *e, int32_t index, const char *text) {
    kl_spin_lock(&e->lock);
    if (index < e->first) {
        e->first = index;
        snprintf(e->text, sizeof e->text, "%s", text);
    }
    kl_spin_unlock(&e->lock);
}

/* Runs fn on rows [begin, end) of chunk and keeps its failure as range index's. The thread's
 * own message is set aside meanwhile: in a schedule run it is the message of the system this
 * thread runs (the caller, or another system waiting for its own jobs), and a range that
 * fails nothing leaves it as it was. */
static void run_view(const kiln_iter *chunk, int32_t begin, int32_t end, kiln_chunk_fn fn, void *user,
                     range_errors *errors, int32_t index) {
    kl_error_kept kept;
    kl_error_set_aside(chunk->world, &kept);
    kiln_iter view;
    kiln_iter_range(chunk, begin, end, &view);
    fn(&view, user);
    kiln_iter_fini(&view);
    if (kept.text && kept.text[0]) note_failure(errors, index, kept.text); /* else: lost */
    kl_error_put_back(&kept);
}

/* Runs as the system that started it, whatever thread takes it (one waiting in another
 * system's kiln_jobs_wait included), so the debug checks hold the range to that system's
 * access and refuse changes to the world from it. */
static void run_range(void *arg) {
    range_job *r = arg;
    kl_guard_frame frame;
    kl_guard_enter(r->chunk->world, r->system, true, &frame);
    run_view(r->chunk, r->begin, r->end, r->fn, r->user, r->errors, r->index);
    kl_guard_leave(&frame);
}

/* After the last range: the caller's thread reads the first failing range's message. */
static void report_first(kiln_world *world, const range_errors *errors) {
    char *mine = errors->first != INT32_MAX ? kl_error_text(world, true) : NULL;
    if (mine) memcpy(mine, errors->text, KL_ERROR_SIZE);
}

/* Without a pool: chunk after chunk on the caller's thread, each a range of its own, so the
 * message is the first failing one's here too (not the last's). */
static void run_inline(const kiln_query *query, kiln_chunk_fn fn, void *user) {
    range_errors errors = {.first = INT32_MAX};
    atomic_flag_clear(&errors.lock);
    int32_t index = 0;
    kiln_iter it;
    kiln_query_iter(query, &it);
    while (kiln_query_next(&it)) run_view(&it, 0, it.count, fn, user, &errors, index++);
    report_first(kl_query_world(query), &errors);
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
    /* In a schedule run its threads have error slots already; outside one, slots of our own. */
    bool own_slots = atomic_load_explicit(&world->error_slots, memory_order_acquire) == NULL;
    int32_t error_slots = own_slots ? (int32_t)threads + KL_ERROR_SPARE_SLOTS : 0;
    size_t bytes = sizeof(kiln_iter) * (size_t)chunks +
                   (sizeof(range_job) + sizeof(kiln_job)) * (size_t)max_ranges + sizeof(range_errors) +
                   sizeof(kl_error_slot) * (size_t)error_slots;
    uint8_t *scratch = kl_jobs_scratch_acquire(jobs, bytes);
    if (!scratch) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_parallel_for: out of memory");
    kiln_iter *snapshots = (kiln_iter *)scratch;
    range_job *ranges = (range_job *)(snapshots + chunks);
    kiln_job *list = (kiln_job *)(ranges + max_ranges);
    range_errors *errors = (range_errors *)(list + max_ranges);
    kl_error_slot *slots = (kl_error_slot *)(errors + 1);
    for (int32_t i = 0; i < error_slots; i++) {
        atomic_init(&slots[i].thread, 0);
        atomic_init(&slots[i].token, 0);
        slots[i].text[0] = '\0';
    }
    errors->slots = (kl_error_slots){0, error_slots, slots}; /* owner 0: the caller too */
    atomic_flag_clear(&errors->lock);
    errors->first = INT32_MAX;

    /* Hold the world deferred and iterating across the whole run: the iteration below ends
     * before the jobs start. */
    kl_defer_open(world);
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
            ranges[n_ranges] = (range_job){&snapshots[n_chunks], (int32_t)b, (int32_t)e, fn, user,
                                           caller, errors, n_ranges};
            list[n_ranges] = (kiln_job){run_range, &ranges[n_ranges]};
            n_ranges++;
        }
        n_chunks++;
    }
    kiln_iter_fini(&it);
    kiln_counter counter = {0};
    if (own_slots) atomic_store_explicit(&world->error_slots, &errors->slots, memory_order_release);
    kiln_result r = kiln_jobs_submit(jobs, list, n_ranges, &counter);
    if (r == KILN_OK) kiln_jobs_wait(jobs, &counter);
    /* every range has ended (the wait): our slots go, the first failure stays in the caller's */
    if (own_slots) atomic_store_explicit(&world->error_slots, NULL, memory_order_release);
    report_first(world, errors);
    if (r != KILN_OK) kl_fail(world, r, "kiln_parallel_for: out of memory queueing jobs");
    atomic_fetch_sub_explicit(&world->iterating, 1, memory_order_relaxed);
    kl_jobs_scratch_release(jobs, scratch);
    kiln_result end = kl_defer_end(world, "kiln_parallel_for");
    return r != KILN_OK ? r : end;
}
