/* test_jobs.c: Check suite for the job pool and kiln_parallel_for: batches, inline pools, nested
 * waits, allocation-free submission and parallel iteration that visits every row exactly once. */
/* for pthread_setattr_default_np, to make thread creation fail on purpose */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* The counting allocator of test_support behind a mutex, so worker threads may use it. */
typedef struct locked_allocator {
    pthread_mutex_t lock;
    test_allocator inner;
} locked_allocator;

static void *locked_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    locked_allocator *l = ud;
    pthread_mutex_lock(&l->lock);
    void *p = test_allocator_fn(&l->inner, ptr, osize, nsize);
    pthread_mutex_unlock(&l->lock);
    return p;
}

static void locked_init(locked_allocator *l) {
    pthread_mutex_init(&l->lock, NULL);
    test_allocator_init(&l->inner);
}

static void locked_fini(locked_allocator *l) { pthread_mutex_destroy(&l->lock); }

/* A snapshot of the inner counters, read under the lock. */
static test_allocator locked_snapshot(locked_allocator *l) {
    pthread_mutex_lock(&l->lock);
    test_allocator copy = l->inner;
    pthread_mutex_unlock(&l->lock);
    return copy;
}

static void locked_fail_after(locked_allocator *l, int64_t n) {
    pthread_mutex_lock(&l->lock);
    test_allocator_fail_after(&l->inner, n);
    pthread_mutex_unlock(&l->lock);
}

static void locked_fail_never(locked_allocator *l) {
    pthread_mutex_lock(&l->lock);
    test_allocator_fail_never(&l->inner);
    pthread_mutex_unlock(&l->lock);
}

static kiln_jobs *pool_create(int32_t workers, locked_allocator *l) {
    kiln_jobs_desc desc = {.workers = workers, .alloc = locked_alloc_fn, .alloc_ud = l};
    kiln_jobs *jobs = kiln_jobs_create(&desc);
    ck_assert_ptr_nonnull(jobs);
    return jobs;
}

/* An atomic read as a plain call, so failed assertions print readably. */
static int loaded(atomic_int *value) { return atomic_load(value); }

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void spin_ns(int64_t ns) {
    int64_t end = now_ns() + ns;
    while (now_ns() < end) {
    }
}

static int count_distinct_threads(const pthread_t *threads, int n) {
    int distinct = 0;
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = pthread_equal(threads[i], threads[j]) != 0;
        distinct += !seen;
    }
    return distinct;
}

/* One job's record: how often it ran and on which thread. */
typedef struct job_slot {
    atomic_int runs;
    pthread_t thread;
    int64_t spin;
    atomic_int *total;
} job_slot;

static void slot_job(void *arg) {
    job_slot *s = arg;
    if (s->spin) spin_ns(s->spin);
    s->thread = pthread_self();
    atomic_fetch_add(&s->runs, 1);
    if (s->total) atomic_fetch_add(s->total, 1);
}

static void fill_slots(job_slot *slots, kiln_job *list, int n, int64_t spin, atomic_int *total) {
    for (int i = 0; i < n; i++) {
        atomic_init(&slots[i].runs, 0);
        slots[i].spin = spin;
        slots[i].total = total;
        list[i] = (kiln_job){slot_job, &slots[i]};
    }
}

/* How many of n slots did not run exactly once (one assertion instead of n: Check reports
 * every passing assertion to its parent, which is slow in a loop). */
static int slots_not_run_once(job_slot *slots, int n) {
    int bad = 0;
    for (int i = 0; i < n; i++) bad += atomic_load(&slots[i].runs) != 1;
    return bad;
}

/* A pool of that many workers, or no pool at all for NO_POOL. */
#define NO_POOL (-100)
static kiln_jobs *pool_or_none(int32_t workers) {
    if (workers == NO_POOL) return NULL;
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = workers});
    ck_assert_ptr_nonnull(jobs);
    return jobs;
}

static int32_t expected_default_workers(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    return (int32_t)n - 1;
}

/* ------------------------------------------------------------------------------------------ */
/* lifetime                                                                                   */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(lifetime, .timeout = 30);

KILN_TEST(lifetime, create_starts_the_requested_workers_and_destroy_frees_every_byte) {
    const int32_t counts[] = {KILN_JOBS_INLINE, 1, 3};
    for (int k = 0; k < 3; k++) {
        locked_allocator l;
        locked_init(&l);
        kiln_jobs *jobs = pool_create(counts[k], &l);
        ck_assert_int_eq(kiln_jobs_worker_count(jobs), counts[k] == KILN_JOBS_INLINE ? 0 : counts[k]);
        job_slot slots[16];
        kiln_job list[16];
        fill_slots(slots, list, 16, 0, NULL);
        kiln_counter counter = {0};
        ck_assert_int_eq(kiln_jobs_submit(jobs, list, 16, &counter), KILN_OK);
        kiln_jobs_wait(jobs, &counter);
        ck_assert_int_eq(slots_not_run_once(slots, 16), 0);
        ck_assert_int_gt(locked_snapshot(&l).allocations, 0);
        kiln_jobs_destroy(jobs);
        test_allocator after = locked_snapshot(&l);
        ck_assert_int_eq(after.live_bytes, 0);
        ck_assert_int_eq(after.live_blocks, 0);
        ck_assert_int_eq(after.bad_osize, 0);
        locked_fini(&l);
    }
}

KILN_TEST(lifetime, a_null_desc_starts_one_worker_per_core_but_one) {
    kiln_jobs *jobs = kiln_jobs_create(NULL);
    ck_assert_ptr_nonnull(jobs);
    ck_assert_int_eq(kiln_jobs_worker_count(jobs), expected_default_workers());
    atomic_int total = 0;
    job_slot slots[32];
    kiln_job list[32];
    fill_slots(slots, list, 32, 0, &total);
    kiln_counter counter = {0};
    ck_assert_int_eq(kiln_jobs_submit(jobs, list, 32, &counter), KILN_OK);
    kiln_jobs_wait(jobs, &counter);
    ck_assert_int_eq(loaded(&total), 32);
    kiln_jobs_destroy(jobs);

    jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = KILN_JOBS_DEFAULT});
    ck_assert_ptr_nonnull(jobs);
    ck_assert_int_eq(kiln_jobs_worker_count(jobs), expected_default_workers());
    kiln_jobs_destroy(jobs);

    /* a zero-filled desc is the default too, not an inline pool */
    jobs = kiln_jobs_create(&(kiln_jobs_desc){0});
    ck_assert_ptr_nonnull(jobs);
    ck_assert_int_eq(kiln_jobs_worker_count(jobs), expected_default_workers());
    kiln_jobs_destroy(jobs);

    /* counts below KILN_JOBS_INLINE or above 256 start nothing */
    ck_assert_ptr_null(kiln_jobs_create(&(kiln_jobs_desc){.workers = -2}));
    ck_assert_ptr_null(kiln_jobs_create(&(kiln_jobs_desc){.workers = 257}));
}

KILN_TEST(lifetime, destroying_null_is_a_noop) {
    kiln_jobs_destroy(NULL);
}

KILN_TEST(lifetime, create_returns_null_when_memory_runs_out_and_leaves_nothing_behind) {
    for (int64_t k = 0;; k++) {
        ck_assert_int_lt(k, 100);
        locked_allocator l;
        locked_init(&l);
        locked_fail_after(&l, k);
        kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2,
                                                             .alloc = locked_alloc_fn,
                                                             .alloc_ud = &l});
        if (jobs == NULL) {
            test_allocator snap = locked_snapshot(&l);
            ck_assert_int_gt(snap.failures, 0);
            ck_assert_int_eq(snap.live_bytes, 0);
            ck_assert_int_eq(snap.bad_osize, 0);
            locked_fini(&l);
            continue;
        }
        locked_fail_never(&l);
        ck_assert_int_eq(kiln_jobs_worker_count(jobs), 2);
        kiln_jobs_destroy(jobs);
        ck_assert_int_eq(locked_snapshot(&l).live_bytes, 0);
        locked_fini(&l);
        ck_assert_int_gt(k, 0); /* the pool itself needs memory */
        break;
    }
}

KILN_TEST(lifetime, create_returns_null_when_threads_cannot_be_had_and_frees_what_it_took) {
    /* A default thread stack larger than any address space makes pthread_create fail. */
    pthread_attr_t saved, huge;
    ck_assert_int_eq(pthread_getattr_default_np(&saved), 0);
    ck_assert_int_eq(pthread_attr_init(&huge), 0);
    ck_assert_int_eq(pthread_attr_setstacksize(&huge, (size_t)1 << 46), 0);
    ck_assert_int_eq(pthread_setattr_default_np(&huge), 0);
    locked_allocator l;
    locked_init(&l);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 3,
                                                         .alloc = locked_alloc_fn,
                                                         .alloc_ud = &l});
    ck_assert_int_eq(pthread_setattr_default_np(&saved), 0);
    pthread_attr_destroy(&huge);
    pthread_attr_destroy(&saved);
    ck_assert_ptr_null(jobs);
    test_allocator snap = locked_snapshot(&l);
    ck_assert_int_gt(snap.allocations, 0);
    ck_assert_int_eq(snap.live_bytes, 0);
    ck_assert_int_eq(snap.live_blocks, 0);
    ck_assert_int_eq(snap.bad_osize, 0); /* every block freed with the size it was given */
    locked_fini(&l);
}

KILN_TEST(lifetime, destroy_runs_the_jobs_still_queued) {
    const int32_t counts[] = {KILN_JOBS_INLINE, 2};
    for (int k = 0; k < 2; k++) {
        kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = counts[k]});
        ck_assert_ptr_nonnull(jobs);
        atomic_int total = 0;
        job_slot slots[64];
        kiln_job list[64];
        fill_slots(slots, list, 64, 0, &total);
        kiln_counter counter = {0};
        ck_assert_int_eq(kiln_jobs_submit(jobs, list, 64, &counter), KILN_OK);
        kiln_jobs_destroy(jobs); /* nobody waited */
        ck_assert_int_eq(loaded(&total), 64);
        ck_assert_int_eq(slots_not_run_once(slots, 64), 0);
        ck_assert_int_eq(__atomic_load_n(&counter.pending, __ATOMIC_ACQUIRE), 0);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* batches                                                                                    */
/* ------------------------------------------------------------------------------------------ */

#define BIG_BATCH 5000

KILN_TEST_GROUP_WITH(batches, .timeout = 30);

KILN_TEST(batches, every_job_of_a_large_batch_runs_exactly_once) {
    const int32_t counts[] = {KILN_JOBS_INLINE, 1, 3};
    job_slot *slots = malloc(sizeof *slots * BIG_BATCH);
    kiln_job *list = malloc(sizeof *list * BIG_BATCH);
    ck_assert_ptr_nonnull(slots);
    ck_assert_ptr_nonnull(list);
    for (int k = 0; k < 3; k++) {
        kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = counts[k]});
        ck_assert_ptr_nonnull(jobs);
        atomic_int total = 0;
        fill_slots(slots, list, BIG_BATCH, 0, &total);
        kiln_counter counter = {0};
        /* one counter over several submissions of uneven size, empty ones included */
        int submitted = 0, step = 1;
        while (submitted < BIG_BATCH) {
            int n = step < BIG_BATCH - submitted ? step : BIG_BATCH - submitted;
            ck_assert_int_eq(kiln_jobs_submit(jobs, list + submitted, n, &counter), KILN_OK);
            ck_assert_int_eq(kiln_jobs_submit(jobs, list, 0, &counter), KILN_OK);
            submitted += n;
            step = step * 3 + 1;
        }
        kiln_jobs_wait(jobs, &counter);
        ck_assert_int_eq(__atomic_load_n(&counter.pending, __ATOMIC_ACQUIRE), 0);
        ck_assert_int_eq(loaded(&total), BIG_BATCH);
        ck_assert_int_eq(slots_not_run_once(slots, BIG_BATCH), 0);
        /* waiting again on a finished counter returns at once */
        kiln_jobs_wait(jobs, &counter);
        kiln_jobs_destroy(jobs);
    }
    free(slots);
    free(list);
}

KILN_TEST(batches, separate_counters_each_wait_for_their_own_batch) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    atomic_int fast_total = 0, slow_total = 0;
    job_slot fast[8], slow[8];
    kiln_job fast_list[8], slow_list[8];
    fill_slots(fast, fast_list, 8, 0, &fast_total);
    fill_slots(slow, slow_list, 8, 2000000, &slow_total); /* 2 ms each */
    kiln_counter fast_counter = {0}, slow_counter = {0};
    ck_assert_int_eq(kiln_jobs_submit(jobs, slow_list, 8, &slow_counter), KILN_OK);
    ck_assert_int_eq(kiln_jobs_submit(jobs, fast_list, 8, &fast_counter), KILN_OK);
    kiln_jobs_wait(jobs, &fast_counter);
    ck_assert_int_eq(loaded(&fast_total), 8);
    kiln_jobs_wait(jobs, &slow_counter);
    ck_assert_int_eq(loaded(&slow_total), 8);
    kiln_jobs_destroy(jobs);
}

KILN_TEST(batches, an_inline_pool_runs_every_job_on_the_waiting_thread) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = KILN_JOBS_INLINE});
    ck_assert_ptr_nonnull(jobs);
    ck_assert_int_eq(kiln_jobs_worker_count(jobs), 0);
    job_slot slots[200];
    kiln_job list[200];
    fill_slots(slots, list, 200, 0, NULL);
    kiln_counter counter = {0};
    ck_assert_int_eq(kiln_jobs_submit(jobs, list, 100, &counter), KILN_OK);
    ck_assert_int_eq(kiln_jobs_submit(jobs, list + 100, 100, &counter), KILN_OK);
    kiln_jobs_wait(jobs, &counter);
    pthread_t self = pthread_self();
    for (int i = 0; i < 200; i++) {
        ck_assert_int_eq(loaded(&slots[i].runs), 1);
        ck_assert(pthread_equal(slots[i].thread, self));
    }
    kiln_jobs_destroy(jobs);
}

KILN_TEST(batches, workers_share_a_batch_of_slow_jobs) {
    /* Three workers plus the waiting thread; even on two cores the jobs spread. */
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 3});
    ck_assert_ptr_nonnull(jobs);
    enum { N = 48 };
    job_slot slots[N];
    kiln_job list[N];
    pthread_t threads[N];
    fill_slots(slots, list, N, 300000, NULL); /* 0.3 ms each */
    kiln_counter counter = {0};
    ck_assert_int_eq(kiln_jobs_submit(jobs, list, N, &counter), KILN_OK);
    kiln_jobs_wait(jobs, &counter);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(loaded(&slots[i].runs), 1);
        threads[i] = slots[i].thread;
    }
    ck_assert_int_ge(count_distinct_threads(threads, N), 2);
    kiln_jobs_destroy(jobs);
}

/* A job that, above the last level, submits fanout children to its own pool and waits. */
typedef struct nested_job {
    kiln_jobs *jobs;
    int level;
    atomic_int *leaves;
    atomic_int *nodes;
    atomic_int *errors; /* counted, not asserted: Check is not thread-safe */
} nested_job;

#define NEST_FANOUT 4
#define NEST_LEVELS 3

static void nested_run(void *arg) {
    nested_job *self = arg;
    atomic_fetch_add(self->nodes, 1);
    if (self->level == NEST_LEVELS) {
        atomic_fetch_add(self->leaves, 1);
        return;
    }
    nested_job children[NEST_FANOUT];
    kiln_job list[NEST_FANOUT];
    for (int i = 0; i < NEST_FANOUT; i++) {
        children[i] =
            (nested_job){self->jobs, self->level + 1, self->leaves, self->nodes, self->errors};
        list[i] = (kiln_job){nested_run, &children[i]};
    }
    kiln_counter counter = {0};
    if (kiln_jobs_submit(self->jobs, list, NEST_FANOUT, &counter) != KILN_OK)
        atomic_fetch_add(self->errors, 1);
    kiln_jobs_wait(self->jobs, &counter);
    /* the children live on this stack: they must all be done now */
    if (__atomic_load_n(&counter.pending, __ATOMIC_ACQUIRE) != 0) atomic_fetch_add(self->errors, 1);
}

KILN_TEST(batches, a_job_may_submit_and_wait_on_nested_jobs_without_deadlock) {
    const int32_t counts[] = {KILN_JOBS_INLINE, 1, 2};
    for (int k = 0; k < 3; k++) {
        kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = counts[k]});
        ck_assert_ptr_nonnull(jobs);
        atomic_int leaves = 0, nodes = 0, errors = 0;
        nested_job roots[NEST_FANOUT];
        kiln_job list[NEST_FANOUT];
        for (int i = 0; i < NEST_FANOUT; i++) {
            roots[i] = (nested_job){jobs, 1, &leaves, &nodes, &errors};
            list[i] = (kiln_job){nested_run, &roots[i]};
        }
        kiln_counter counter = {0};
        ck_assert_int_eq(kiln_jobs_submit(jobs, list, NEST_FANOUT, &counter), KILN_OK);
        kiln_jobs_wait(jobs, &counter);
        ck_assert_int_eq(loaded(&errors), 0);
        /* 4 + 16 + 64 nodes, 64 leaves */
        ck_assert_int_eq(loaded(&leaves), NEST_FANOUT * NEST_FANOUT * NEST_FANOUT);
        ck_assert_int_eq(loaded(&nodes),
                         NEST_FANOUT + NEST_FANOUT * NEST_FANOUT +
                             NEST_FANOUT * NEST_FANOUT * NEST_FANOUT);
        kiln_jobs_destroy(jobs);
    }
}

KILN_TEST(batches, several_pools_coexist_without_sharing_workers) {
    kiln_jobs *a = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_jobs *b = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    kiln_jobs *c = kiln_jobs_create(&(kiln_jobs_desc){.workers = KILN_JOBS_INLINE});
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(kiln_jobs_worker_count(a), 2);
    ck_assert_int_eq(kiln_jobs_worker_count(b), 1);
    ck_assert_int_eq(kiln_jobs_worker_count(c), 0);
    enum { N = 24 };
    job_slot sa[N], sb[N], sc[N];
    kiln_job la[N], lb[N], lc[N];
    atomic_int ta = 0, tb = 0, tc = 0;
    fill_slots(sa, la, N, 200000, &ta);
    fill_slots(sb, lb, N, 200000, &tb);
    fill_slots(sc, lc, N, 0, &tc);
    kiln_counter ca = {0}, cb = {0}, cc = {0};
    ck_assert_int_eq(kiln_jobs_submit(a, la, N, &ca), KILN_OK);
    ck_assert_int_eq(kiln_jobs_submit(b, lb, N, &cb), KILN_OK);
    ck_assert_int_eq(kiln_jobs_submit(c, lc, N, &cc), KILN_OK);
    kiln_jobs_wait(b, &cb);
    kiln_jobs_wait(a, &ca);
    kiln_jobs_wait(c, &cc);
    ck_assert_int_eq(loaded(&ta), N);
    ck_assert_int_eq(loaded(&tb), N);
    ck_assert_int_eq(loaded(&tc), N);
    /* apart from the waiting thread, no thread ran jobs of both pools */
    pthread_t self = pthread_self();
    int inline_elsewhere = 0, shared = 0;
    for (int i = 0; i < N; i++) {
        inline_elsewhere += !pthread_equal(sc[i].thread, self);
        if (pthread_equal(sa[i].thread, self)) continue;
        for (int j = 0; j < N; j++) shared += pthread_equal(sa[i].thread, sb[j].thread) != 0;
    }
    ck_assert_int_eq(inline_elsewhere, 0);
    ck_assert_int_eq(shared, 0);
    /* destroying one pool leaves the others working */
    kiln_jobs_destroy(a);
    fill_slots(sb, lb, N, 0, &tb);
    ck_assert_int_eq(kiln_jobs_submit(b, lb, N, &cb), KILN_OK);
    kiln_jobs_wait(b, &cb);
    ck_assert_int_eq(loaded(&tb), 2 * N);
    kiln_jobs_destroy(b);
    kiln_jobs_destroy(c);
}

/* ------------------------------------------------------------------------------------------ */
/* memory                                                                                     */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(memory, .timeout = 30);

KILN_TEST(memory, steady_state_submission_allocates_nothing) {
    const int32_t counts[] = {KILN_JOBS_INLINE, 2};
    enum { N = 300 };
    job_slot slots[N];
    kiln_job list[N];
    for (int k = 0; k < 2; k++) {
        locked_allocator l;
        locked_init(&l);
        kiln_jobs *jobs = pool_create(counts[k], &l);
        atomic_int total = 0;
        fill_slots(slots, list, N, 0, &total);
        kiln_counter counter = {0};
        /* warm-up: the queue grows to hold a whole batch */
        ck_assert_int_eq(kiln_jobs_submit(jobs, list, N, &counter), KILN_OK);
        kiln_jobs_wait(jobs, &counter);
        test_allocator warm = locked_snapshot(&l);
        ck_assert_int_gt(warm.allocations, 0);
        for (int round = 0; round < 50; round++) {
            /* in pieces as well as whole */
            ck_assert_int_eq(kiln_jobs_submit(jobs, list, N / 2, &counter), KILN_OK);
            ck_assert_int_eq(kiln_jobs_submit(jobs, list + N / 2, N - N / 2, &counter), KILN_OK);
            kiln_jobs_wait(jobs, &counter);
            ck_assert_int_eq(kiln_jobs_submit(jobs, list, N, &counter), KILN_OK);
            kiln_jobs_wait(jobs, &counter);
        }
        ck_assert_int_eq(loaded(&total), N * 101);
        test_allocator after = locked_snapshot(&l);
        ck_assert_int_eq(after.calls, warm.calls);
        ck_assert_int_eq(after.live_bytes, warm.live_bytes);
        kiln_jobs_destroy(jobs);
        ck_assert_int_eq(locked_snapshot(&l).live_bytes, 0);
        locked_fini(&l);
    }
}

KILN_TEST(memory, submit_out_of_memory_queues_nothing) {
    locked_allocator l;
    locked_init(&l);
    kiln_jobs *jobs = pool_create(0, &l);
    atomic_int total = 0;
    job_slot slots[100];
    kiln_job list[100];
    fill_slots(slots, list, 100, 0, &total);
    kiln_counter counter = {0};
    locked_fail_after(&l, 0);
    ck_assert_int_eq(kiln_jobs_submit(jobs, list, 100, &counter), KILN_ERR_OUT_OF_MEMORY);
    ck_assert_int_gt(locked_snapshot(&l).failures, 0);
    ck_assert_int_eq(__atomic_load_n(&counter.pending, __ATOMIC_ACQUIRE), 0);
    kiln_jobs_wait(jobs, &counter); /* nothing pending: returns at once */
    ck_assert_int_eq(loaded(&total), 0);
    locked_fail_never(&l);
    ck_assert_int_eq(kiln_jobs_submit(jobs, list, 100, &counter), KILN_OK);
    kiln_jobs_wait(jobs, &counter);
    ck_assert_int_eq(loaded(&total), 100);
    kiln_jobs_destroy(jobs);
    ck_assert_int_eq(loaded(&total), 100); /* the refused batch never ran */
    ck_assert_int_eq(locked_snapshot(&l).live_bytes, 0);
    locked_fini(&l);
}

/* ------------------------------------------------------------------------------------------ */
/* parallel_for                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* Per-row bookkeeping: how often the row was visited and which entity it belongs to. */
typedef struct visits {
    int32_t count;
    uint32_t index;
} visits;

typedef struct pfor_world {
    kiln_world *world;
    kiln_component visits, pos, skip, big;
    kiln_component tags[3];
    kiln_query *query; /* with Visits, without Skip */
    kiln_entity *matching;
    int64_t matching_count;
    kiln_entity *other; /* Visits + Skip, or no Visits at all */
    int64_t other_count;
    int32_t archetypes; /* matching archetypes, all non-empty */
} pfor_world;

#define PFOR_BIG 20000

static kiln_component register_visits(kiln_world *world) {
    kiln_component id;
    ck_assert_int_eq(kiln_component_register(
                         world,
                         &(kiln_component_desc){.name = "Visits", .size = sizeof(visits)}, &id),
                     KILN_OK);
    return id;
}

static void pfor_spawn(pfor_world *p, const kiln_component *components, int32_t count,
                       bool matching) {
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(p->world, components, NULL, count, &e), KILN_OK);
    visits *v = kiln_get_mut(p->world, e, p->visits);
    if (v) *v = (visits){0, kiln_entity_index(e)};
    if (matching) p->matching[p->matching_count++] = e;
    else p->other[p->other_count++] = e;
}

/* Eight small archetypes with Visits (every subset of three tags), one large one, and
 * rows the query must not visit: Visits with Skip, and Position alone. */
static void pfor_setup(pfor_world *p, kiln_world *world) {
    memset(p, 0, sizeof *p);
    p->world = world;
    p->visits = register_visits(world);
    p->pos = test_register_position(world);
    p->skip = test_register_tag(world, "Skip");
    p->big = test_register_tag(world, "Big");
    p->tags[0] = test_register_tag(world, "T0");
    p->tags[1] = test_register_tag(world, "T1");
    p->tags[2] = test_register_tag(world, "T2");
    p->matching = malloc(sizeof(kiln_entity) * (PFOR_BIG + 1000));
    p->other = malloc(sizeof(kiln_entity) * 1000);
    ck_assert_ptr_nonnull(p->matching);
    ck_assert_ptr_nonnull(p->other);
    for (int i = 0; i < 8 * 37; i++) {
        kiln_component list[4] = {p->visits};
        int32_t n = 1;
        for (int t = 0; t < 3; t++)
            if (((i % 8) >> t) & 1) list[n++] = p->tags[t];
        pfor_spawn(p, list, n, true);
        if (i % 5 == 0) pfor_spawn(p, (kiln_component[]){p->visits, p->skip}, 2, false);
        if (i % 7 == 0) pfor_spawn(p, &p->pos, 1, false);
    }
    kiln_entity *big = p->matching + p->matching_count;
    ck_assert_int_eq(kiln_spawn_batch(world, (kiln_component[]){p->visits, p->big}, 2, PFOR_BIG,
                                      big),
                     KILN_OK);
    for (int i = 0; i < PFOR_BIG; i++) {
        visits *v = kiln_get_mut(world, big[i], p->visits);
        *v = (visits){0, kiln_entity_index(big[i])};
    }
    p->matching_count += PFOR_BIG;
    /* despawn a few so the archetypes have had rows swapped around */
    for (int64_t i = 3; i < p->matching_count; i += 97) {
        ck_assert_int_eq(kiln_despawn(world, p->matching[i]), KILN_OK);
        p->matching[i] = p->matching[--p->matching_count];
    }
    p->archetypes = 9;
    ck_assert_int_eq(kiln_query_create(world,
                                       &(kiln_query_desc){.with = {p->visits},
                                                          .without = {p->skip}},
                                       &p->query),
                     KILN_OK);
    ck_assert_int_eq(kiln_query_count(p->query), p->matching_count);
}

static void pfor_teardown(pfor_world *p) {
    kiln_query_destroy(p->query);
    free(p->matching);
    free(p->other);
}

typedef struct visit_stats {
    atomic_int calls;
    atomic_int rows;
    atomic_int bad_entity;
    atomic_int not_deferred;
    kiln_world *world;
} visit_stats;

static void visit_rows(kiln_iter *view, void *user) {
    visit_stats *st = user;
    visits *v = kiln_iter_column(view, 0);
    for (int32_t r = 0; r < view->count; r++) {
        v[r].count++;
        if (kiln_entity_index(view->entities[r]) != v[r].index) atomic_fetch_add(&st->bad_entity, 1);
    }
    if (!kiln_is_deferred(st->world)) atomic_fetch_add(&st->not_deferred, 1);
    atomic_fetch_add(&st->calls, 1);
    atomic_fetch_add(&st->rows, view->count);
}

/* Runs parallel_for twice and checks each matching row was visited once per run and no
 * other row at all. Returns the number of callbacks of the first run. */
static int check_visits_once(pfor_world *p, kiln_jobs *jobs, int32_t min_rows) {
    int first_calls = 0;
    for (int run = 1; run <= 2; run++) {
        visit_stats st = {.world = p->world};
        ck_assert_int_eq(kiln_parallel_for(jobs, p->query, min_rows, visit_rows, &st), KILN_OK);
        ck_assert_int_eq(loaded(&st.rows), p->matching_count);
        ck_assert_int_eq(loaded(&st.bad_entity), 0);
        ck_assert_int_eq(loaded(&st.not_deferred), 0);
        ck_assert(!kiln_is_deferred(p->world));
        int64_t wrong = 0, visited_other = 0;
        for (int64_t i = 0; i < p->matching_count; i++) {
            const visits *v = kiln_get(p->world, p->matching[i], p->visits);
            wrong += v == NULL || v->count != run;
        }
        for (int64_t i = 0; i < p->other_count; i++) {
            const visits *v = kiln_get(p->world, p->other[i], p->visits);
            visited_other += v != NULL && v->count != 0;
        }
        ck_assert_int_eq(wrong, 0);
        ck_assert_int_eq(visited_other, 0);
        if (run == 1) first_calls = atomic_load(&st.calls);
    }
    for (int64_t i = 0; i < p->matching_count; i++)
        ((visits *)kiln_get_mut(p->world, p->matching[i], p->visits))->count = 0;
    return first_calls;
}

KILN_TEST_GROUP_WITH(parallel_for, .timeout = 60);

KILN_TEST(parallel_for, parallel_for_without_a_pool_visits_every_matching_row_once_inline) {
    kiln_world *world = kiln_world_create(NULL);
    pfor_world p;
    pfor_setup(&p, world);
    int calls = check_visits_once(&p, NULL, 0);
    ck_assert_int_ge(calls, p.archetypes); /* a view never spans two archetypes */
    check_visits_once(&p, NULL, 64);
    pfor_teardown(&p);
    kiln_world_destroy(world);
}

KILN_TEST(parallel_for, parallel_for_with_an_inline_pool_visits_every_matching_row_once) {
    kiln_world *world = kiln_world_create(NULL);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = KILN_JOBS_INLINE});
    pfor_world p;
    pfor_setup(&p, world);
    check_visits_once(&p, jobs, 0);
    check_visits_once(&p, jobs, 64);
    pfor_teardown(&p);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(world);
}

KILN_TEST(parallel_for, parallel_for_with_workers_splits_a_large_archetype_and_visits_every_row_once) {
    kiln_world *world = kiln_world_create(NULL);
    pfor_world p;
    pfor_setup(&p, world);
    const int32_t counts[] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = counts[k]});
        ck_assert_ptr_nonnull(jobs);
        /* the big archetype alone is far above min_rows: it must come in several ranges */
        int calls = check_visits_once(&p, jobs, 64);
        ck_assert_int_gt(calls, p.archetypes);
        check_visits_once(&p, jobs, 0);
        check_visits_once(&p, jobs, 1);
        kiln_jobs_destroy(jobs);
    }
    pfor_teardown(&p);
    kiln_world_destroy(world);
}

static void smallest_view(kiln_iter *view, void *user) {
    atomic_int *smallest = user;
    int seen = atomic_load(smallest);
    while (view->count < seen && !atomic_compare_exchange_weak(smallest, &seen, view->count)) {
    }
}

KILN_TEST(parallel_for, parallel_for_ranges_hold_at_least_min_rows_of_a_larger_chunk) {
    kiln_world *world = kiln_world_create(NULL);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 3});
    kiln_component v = register_visits(world);
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(world, &(kiln_query_desc){.with = {v}}, &q), KILN_OK);
    const int32_t rows[] = {1999, 2500, 4096};
    int32_t spawned = 0;
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(kiln_spawn_batch(world, &v, 1, rows[k] - spawned, NULL), KILN_OK);
        spawned = rows[k];
        ck_assert_int_eq(kiln_query_count(q), rows[k]);
        visit_stats st = {.world = world};
        ck_assert_int_eq(kiln_parallel_for(jobs, q, 1000, visit_rows, &st), KILN_OK);
        ck_assert_int_eq(loaded(&st.rows), rows[k]);
        atomic_int smallest = INT32_MAX;
        ck_assert_int_eq(kiln_parallel_for(jobs, q, 1000, smallest_view, &smallest), KILN_OK);
        ck_assert_msg(loaded(&smallest) >= 1000,
                      "%d rows, min_rows 1000: a range of %d rows", (int)rows[k],
                      atomic_load(&smallest));
    }
    kiln_query_destroy(q);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(world);
}

static void count_calls(kiln_iter *view, void *user) {
    (void)view;
    atomic_fetch_add((atomic_int *)user, 1);
}

KILN_TEST(parallel_for, parallel_for_over_an_empty_query_calls_nothing) {
    kiln_world *world = kiln_world_create(NULL);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_component pos = test_register_position(world);
    kiln_component vel = test_register_velocity(world);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(world, &pos, NULL, 1, &e), KILN_OK);
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(world, &(kiln_query_desc){.with = {vel}}, &q), KILN_OK);
    atomic_int calls = 0;
    ck_assert_int_eq(kiln_parallel_for(jobs, q, 0, count_calls, &calls), KILN_OK);
    ck_assert_int_eq(kiln_parallel_for(NULL, q, 0, count_calls, &calls), KILN_OK);
    /* an archetype that matched once but is empty now */
    ck_assert_int_eq(kiln_add(world, e, vel, NULL), KILN_OK);
    ck_assert_int_eq(kiln_despawn(world, e), KILN_OK);
    ck_assert_int_eq(kiln_parallel_for(jobs, q, 0, count_calls, &calls), KILN_OK);
    ck_assert_int_eq(kiln_parallel_for(NULL, q, 0, count_calls, &calls), KILN_OK);
    ck_assert_int_eq(loaded(&calls), 0);
    ck_assert(!kiln_is_deferred(world));
    kiln_query_destroy(q);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(world);
}

/* Marks rows of term 0 changed (and moves them), for chunks whose optional term 1 is present. */
static void mark_moving(kiln_iter *view, void *user) {
    (void)user;
    test_position *pos = kiln_iter_column(view, 0);
    const test_velocity *vel = kiln_iter_column(view, 1);
    if (vel == NULL) return;
    for (int32_t r = 0; r < view->count; r++) {
        pos[r].x += vel[r].x;
        kiln_iter_mark_changed(view, 0, r);
    }
}

typedef struct column_tick {
    kiln_tick with_vel, without_vel;
} column_tick;

static column_tick column_ticks(const kiln_query *q) {
    column_tick ct = {0, 0};
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) {
        if (kiln_iter_column(&it, 1)) ct.with_vel = kiln_iter_column_tick(&it, 0);
        else ct.without_vel = kiln_iter_column_tick(&it, 0);
    }
    return ct;
}

KILN_TEST(parallel_for, rows_marked_through_views_update_column_and_row_ticks) {
    const int32_t counts[] = {NO_POOL, KILN_JOBS_INLINE, 2};
    for (int k = 0; k < 3; k++) {
        kiln_world *world = kiln_world_create(NULL);
        kiln_jobs *jobs = pool_or_none(counts[k]);
        kiln_component pos = test_register_position(world);
        kiln_component vel = test_register_velocity(world);
        enum { N = 3000 };
        static kiln_entity moving[N], still[100];
        ck_assert_int_eq(kiln_spawn_batch(world, (kiln_component[]){pos, vel}, 2, N, moving),
                         KILN_OK);
        ck_assert_int_eq(kiln_spawn_batch(world, &pos, 1, 100, still), KILN_OK);
        for (int i = 0; i < N; i++)
            *(test_velocity *)kiln_get_mut(world, moving[i], vel) = (test_velocity){1.0f, 0.0f};
        kiln_query *q;
        ck_assert_int_eq(kiln_query_create(world,
                                           &(kiln_query_desc){.with = {pos}, .optional = {vel}},
                                           &q),
                         KILN_OK);
        column_tick before = column_ticks(q);
        ck_assert_uint_eq(before.with_vel, 1);
        ck_assert_uint_eq(before.without_vel, 1);
        for (int t = 0; t < 4; t++) kiln_tick_advance(world);
        ck_assert_uint_eq(kiln_tick_current(world), 5);
        ck_assert_int_eq(kiln_parallel_for(jobs, q, 100, mark_moving, NULL), KILN_OK);
        column_tick after = column_ticks(q);
        ck_assert_uint_eq(after.with_vel, 5);
        ck_assert_uint_eq(after.without_vel, 1);
        int wrong_tick = 0, wrong_value = 0;
        for (int i = 0; i < N; i++) {
            wrong_tick += kiln_changed_tick(world, moving[i], pos) != 5;
            wrong_value += ((const test_position *)kiln_get(world, moving[i], pos))->x != 1.0f;
        }
        for (int i = 0; i < 100; i++) wrong_tick += kiln_changed_tick(world, still[i], pos) != 1;
        ck_assert_int_eq(wrong_tick, 0);
        ck_assert_int_eq(wrong_value, 0);
        kiln_query_destroy(q);
        kiln_jobs_destroy(jobs);
        kiln_world_destroy(world);
    }
}

/* Inside the callback (on the calling thread): spawns one entity and adds a tag per row, and
 * checks the world is deferred and unchanged meanwhile. */
typedef struct structural {
    kiln_world *world;
    kiln_component visits, tag;
    int64_t count_before;
    pthread_t caller;
    int64_t rows;
    int64_t spawned_count;
    kiln_entity spawned[600];
    bool failed;
} structural;

static void spawn_inside(kiln_iter *view, void *user) {
    structural *s = user;
    visits *v = kiln_iter_column(view, 0);
    if (!pthread_equal(pthread_self(), s->caller) || !kiln_is_deferred(s->world)) s->failed = true;
    for (int32_t r = 0; r < view->count; r++) {
        v[r].count++;
        s->rows++;
        kiln_entity e = KILN_NULL_ENTITY;
        if (kiln_spawn_with(s->world, &s->visits, NULL, 1, &e) != KILN_OK) s->failed = true;
        if (e == KILN_NULL_ENTITY || kiln_is_alive(s->world, e)) s->failed = true;
        s->spawned[s->spawned_count++] = e;
        if (kiln_add(s->world, view->entities[r], s->tag, NULL) != KILN_OK) s->failed = true;
        if (kiln_has(s->world, view->entities[r], s->tag)) s->failed = true;
        if (kiln_entity_count(s->world) != s->count_before) s->failed = true;
    }
}

KILN_TEST(parallel_for, structural_calls_in_a_callback_on_the_calling_thread_land_after_the_loop) {
    const int32_t counts[] = {NO_POOL, KILN_JOBS_INLINE};
    for (int k = 0; k < 2; k++) {
        kiln_world *world = kiln_world_create(NULL);
        kiln_jobs *jobs = pool_or_none(counts[k]);
        static structural s;
        memset(&s, 0, sizeof s);
        s.world = world;
        s.visits = register_visits(world);
        s.tag = test_register_tag(world, "Seen");
        kiln_component other = test_register_tag(world, "Other");
        kiln_entity originals[300];
        for (int i = 0; i < 300; i++) {
            kiln_component list[2] = {s.visits, other};
            ck_assert_int_eq(kiln_spawn_with(world, list, NULL, i % 2 ? 2 : 1, &originals[i]),
                             KILN_OK);
            ((visits *)kiln_get_mut(world, originals[i], s.visits))->count = 0;
        }
        kiln_query *q;
        ck_assert_int_eq(kiln_query_create(world, &(kiln_query_desc){.with = {s.visits}}, &q),
                         KILN_OK);
        s.count_before = kiln_entity_count(world);
        s.caller = pthread_self();
        ck_assert_int_eq(kiln_parallel_for(jobs, q, 16, spawn_inside, &s), KILN_OK);
        ck_assert(!s.failed);
        ck_assert(!kiln_is_deferred(world));
        /* the spawned rows matched the query but were not visited: they landed afterwards */
        ck_assert_int_eq(s.rows, 300);
        ck_assert_int_eq(s.spawned_count, 300);
        ck_assert_int_eq(kiln_entity_count(world), 600);
        int wrong = 0;
        for (int i = 0; i < 300; i++) {
            wrong += !kiln_has(world, originals[i], s.tag);
            wrong += ((const visits *)kiln_get(world, originals[i], s.visits))->count != 1;
            wrong += !kiln_is_alive(world, s.spawned[i]);
            wrong += !kiln_has(world, s.spawned[i], s.visits);
        }
        ck_assert_int_eq(wrong, 0);
        kiln_query_destroy(q);
        kiln_jobs_destroy(jobs);
        kiln_world_destroy(world);
    }
}

KILN_TEST(parallel_for, parallel_for_out_of_memory_fails_before_any_row_runs) {
    kiln_world *world = kiln_world_create(NULL);
    pfor_world p;
    pfor_setup(&p, world);
    /* k == 0 refuses the first request of a fresh pool, k == 1 the one after, and so on, until
     * the pool holds everything a run needs */
    for (int64_t k = 0;; k++) {
        ck_assert_int_lt(k, 20);
        locked_allocator l;
        locked_init(&l);
        kiln_jobs *jobs = pool_create(2, &l);
        locked_fail_after(&l, k);
        visit_stats st = {.world = world};
        kiln_world_clear_error(world);
        kiln_result r = kiln_parallel_for(jobs, p.query, 64, visit_rows, &st);
        locked_fail_never(&l);
        ck_assert(!kiln_is_deferred(world));
        if (r == KILN_OK) {
            ck_assert_int_eq(loaded(&st.rows), p.matching_count);
            kiln_jobs_destroy(jobs);
            locked_fini(&l);
            ck_assert_int_gt(k, 0);
            break;
        }
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        ck_assert_int_gt(locked_snapshot(&l).failures, 0);
        ck_assert_int_eq(loaded(&st.calls), 0);
        ck_assert_str_ne(kiln_world_error(world), "");
        /* the world is usable, and the pool works once memory is back */
        ck_assert_int_eq(kiln_parallel_for(jobs, p.query, 64, visit_rows, &st), KILN_OK);
        ck_assert_int_eq(loaded(&st.rows), p.matching_count);
        kiln_jobs_destroy(jobs);
        ck_assert_int_eq(locked_snapshot(&l).live_bytes, 0);
        locked_fini(&l);
        for (int64_t i = 0; i < p.matching_count; i++)
            ((visits *)kiln_get_mut(world, p.matching[i], p.visits))->count = 0;
    }
    pfor_teardown(&p);
    kiln_world_destroy(world);
}

KILN_TEST(parallel_for, parallel_for_allocates_nothing_in_steady_state) {
    locked_allocator l;
    locked_init(&l);
    kiln_jobs *jobs = pool_create(2, &l);
    test_allocator wa;
    test_allocator_init(&wa);
    kiln_world *world = test_world_create(&wa);
    pfor_world p;
    pfor_setup(&p, world);
    visit_stats st = {.world = world};
    ck_assert_int_eq(kiln_parallel_for(jobs, p.query, 64, visit_rows, &st), KILN_OK);
    test_allocator pool_warm = locked_snapshot(&l);
    int64_t world_calls = wa.calls;
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(kiln_parallel_for(jobs, p.query, 64, visit_rows, &st), KILN_OK);
    ck_assert_int_eq(locked_snapshot(&l).calls, pool_warm.calls);
    ck_assert_int_eq(wa.calls, world_calls);
    pfor_teardown(&p);
    kiln_world_destroy(world);
    ck_assert_int_eq(wa.live_bytes, 0);
    kiln_jobs_destroy(jobs);
    ck_assert_int_eq(locked_snapshot(&l).live_bytes, 0);
    locked_fini(&l);
}

/* ------------------------------------------------------------------------------------------ */
/* runner                                                                                     */
/* ------------------------------------------------------------------------------------------ */
