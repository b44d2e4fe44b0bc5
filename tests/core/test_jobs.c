/* test_jobs.c: Check suite for the job pool: lifetime, batches, inline pools, nested waits and
 * allocation-free submission. Every job of a batch runs exactly once. */
/* for pthread_setattr_default_np, to make thread creation fail on purpose */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jobs_fixture.h"
#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

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
    if (s->spin) test_spin_ns(s->spin);
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

/* The child's part of the tests below: 0 when it saw no workers (the parent's are no threads
 * here) and its jobs ran once each, waited for or not. */
static int forked_child_runs_and_destroys(kiln_jobs *jobs) {
    signal(SIGALRM, SIG_DFL); /* (Check's own handler would end the whole test) */
    alarm(5);                 /* a hang ends the child by SIGALRM, which its parent sees */
    if (kiln_jobs_worker_count(jobs) != 0) return 4;
    atomic_int total = 0;
    job_slot slots[64];
    kiln_job list[64];
    fill_slots(slots, list, 64, 0, &total);
    kiln_counter counter = {0};
    if (kiln_jobs_submit(jobs, list, 32, &counter) != KILN_OK) return 1;
    kiln_jobs_wait(jobs, &counter); /* no worker here: they ran in the submit */
    if (kiln_jobs_submit(jobs, list + 32, 32, &counter) != KILN_OK) return 2;
    kiln_jobs_destroy(jobs); /* nobody waited for these */
    return slots_not_run_once(slots, 64) == 0 ? 0 : 3;
}

/* Waits for the forked child pid, destroys the parent's pool, and checks the child exited 0. */
static void reap_then_destroy(pid_t pid, kiln_jobs *jobs) {
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    kiln_jobs_destroy(jobs);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child %s %d",
                  WIFEXITED(status) ? "exited with" : "was ended by signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

/* A game forks a helper (a crash reporter) that tidies up before it exits: the workers are
 * threads of the parent, which the child has none of, and joining them waited for good. */
KILN_TEST(lifetime, a_forked_child_runs_its_jobs_and_destroys_the_pool_without_the_parents_workers) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    /* the workers asleep on their condition when the fork comes, as in a game between frames
     * (the case that blocked: the child waited for those sleepers to wake) */
    struct timespec nap = {0, 50000000};
    nanosleep(&nap, NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(forked_child_runs_and_destroys(jobs));
    ck_assert_int_gt(pid, 0);
    reap_then_destroy(pid, jobs);
}

/* An allocator that, once armed, holds the first allocation made by a thread other than the
 * test's (the pool's ring growing, under the pool's lock) until released. */
typedef struct held_alloc {
    atomic_int armed, inside, release;
    pid_t parent;
} held_alloc;

static void *holding_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    held_alloc *h = ud;
    (void)osize;
    if (nsize > 0 && getpid() == h->parent && atomic_exchange(&h->armed, 0)) {
        atomic_store(&h->inside, 1);
        while (!atomic_load(&h->release)) sched_yield();
    }
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, nsize);
}

static void *submit_many(void *arg) {
    kiln_jobs *jobs = arg;
    static job_slot slots[100];
    static kiln_job list[100];
    static atomic_int total;
    static kiln_counter counter;
    fill_slots(slots, list, 100, 0, &total);
    kiln_jobs_submit(jobs, list, 100, &counter); /* the ring grows: the allocator holds the lock */
    kiln_jobs_wait(jobs, &counter);
    return NULL;
}

/* Forks while another thread of the game holds the pool's lock (its submit growing the ring, in
 * the allocator), runs child in the child, then lets the holder go and checks the child exited 0. */
static void fork_while_the_lock_is_held(int (*child)(kiln_jobs *)) {
    static held_alloc h;
    memset(&h, 0, sizeof h);
    h.parent = getpid();
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1, .alloc = holding_alloc, .alloc_ud = &h});
    ck_assert_ptr_nonnull(jobs);
    atomic_store(&h.armed, 1);
    pthread_t submitter;
    ck_assert_int_eq(pthread_create(&submitter, NULL, submit_many, jobs), 0);
    while (!atomic_load(&h.inside)) sched_yield();
    pid_t pid = fork();
    if (pid == 0) _exit(child(jobs));
    ck_assert_int_gt(pid, 0);
    atomic_store(&h.release, 1);
    ck_assert_int_eq(pthread_join(submitter, NULL), 0);
    reap_then_destroy(pid, jobs);
}

static int destroy_in_child(kiln_jobs *jobs) {
    signal(SIGALRM, SIG_DFL);
    alarm(5);
    kiln_jobs_destroy(jobs);
    return 0;
}

/* A fork while another thread of the game holds the pool's lock (submitting, a worker taking a
 * job) gives the child a lock nobody will release: its destroy took it, and hung. */
KILN_TEST(lifetime, a_forked_child_destroys_a_pool_whose_lock_another_thread_held_at_the_fork) {
    fork_while_the_lock_is_held(destroy_in_child);
}

/* A helper forked while another thread holds the pool's lock still uses the pool: with no worker
 * and no lock of its own to take, its submit and wait blocked on the lock for good. */
KILN_TEST(lifetime, a_forked_child_submits_and_waits_without_the_lock_another_thread_held_at_the_fork) {
    fork_while_the_lock_is_held(forked_child_runs_and_destroys);
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
