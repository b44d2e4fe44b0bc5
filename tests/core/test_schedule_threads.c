/* test_schedule_threads.c: Check suite for what the threads of a running schedule share: each
 * reads back the error message of its own failures, the schedule's list is described while it
 * grows, and kiln_parallel_for ranges are held to the access of the system that started them
 * on whatever thread runs them. Run it under ThreadSanitizer too. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

enum { CALLS = 4000 };

/* What the failing systems share: each fails its own way and compares what it reads back. */
typedef struct failing {
    kiln_world *world;
    kiln_component a, long_name;
    kiln_entity dead, has_a;
    char dead_message[256], missing_message[256]; /* what each failure says, read beforehand */
    atomic_int arrived;   /* systems that reached the rendezvous this run */
    atomic_int wrong;     /* read-backs that were another system's message (or a mix) */
    atomic_int read_back; /* read-backs made */
} failing;

static kiln_component register_sized(kiln_world *w, const char *name, size_t size) {
    kiln_component c;
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = name, .size = size}, &c),
                     KILN_OK);
    return c;
}

/* Waits (a second at most) for the other failing system, so both fail at the same time. */
static void rendezvous(failing *f) {
    atomic_fetch_add(&f->arrived, 1);
    int64_t start = test_now_ns();
    while (atomic_load(&f->arrived) < 2 && test_now_ns() - start < 1000000000) {
    }
}

static void compare(failing *f, const char *expected) {
    if (strcmp(kiln_world_error(f->world), expected) != 0) atomic_fetch_add(&f->wrong, 1);
    atomic_fetch_add(&f->read_back, 1);
}

/* Writes through a dead handle, again and again, reading the message back each time. */
static void fail_dead(const kiln_system_ctx *ctx) {
    failing *f = ctx->user;
    rendezvous(f);
    for (int i = 0; i < CALLS; i++)
        if (kiln_get_mut(ctx->world, f->dead, f->a) == NULL) compare(f, f->dead_message);
}

/* Writes a component its entity lacks (a longer message), again and again. */
static void fail_missing(const kiln_system_ctx *ctx) {
    failing *f = ctx->user;
    rendezvous(f);
    for (int i = 0; i < CALLS; i++)
        if (kiln_get_mut(ctx->world, f->has_a, f->long_name) == NULL) compare(f, f->missing_message);
}

static void failing_open(failing *f) {
    memset(f, 0, sizeof *f);
    f->world = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(f->world);
    f->a = register_sized(f->world, "A", 4);
    f->long_name = register_sized(f->world, "AComponentWithAVeryLongNameSoItsMessageIsLongerThanTheOther", 4);
    ck_assert_int_eq(kiln_spawn(f->world, &f->dead), KILN_OK);
    ck_assert_int_eq(kiln_despawn(f->world, f->dead), KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(f->world, &f->a, NULL, 1, &f->has_a), KILN_OK);
    ck_assert_ptr_null(kiln_get_mut(f->world, f->dead, f->a));
    snprintf(f->dead_message, sizeof f->dead_message, "%s", kiln_world_error(f->world));
    ck_assert_ptr_null(kiln_get_mut(f->world, f->has_a, f->long_name));
    snprintf(f->missing_message, sizeof f->missing_message, "%s", kiln_world_error(f->world));
    ck_assert_str_ne(f->dead_message, f->missing_message);
    kiln_world_clear_error(f->world);
}

/* Runs the two failing systems side by side (one on the main thread when main_thread is set)
 * for frames runs, and checks every read-back named its own system's failure. */
static void run_failing(bool main_thread, int frames) {
    static failing f;
    failing_open(&f);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *s = kiln_schedule_create(f.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "dead", .run = fail_dead, .user = &f,
                                                             .writes = {f.a}, .main_thread = main_thread}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "missing", .run = fail_missing,
                                                             .user = &f, .writes = {f.long_name}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    for (int frame = 0; frame < frames; frame++) {
        atomic_store(&f.arrived, 0);
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    }
    int read_back = atomic_load(&f.read_back), wrong = atomic_load(&f.wrong);
    ck_assert_int_eq(read_back, frames * 2 * CALLS);
    ck_assert_int_eq(wrong, 0);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(f.world);
}

/* ------------------------------------------------------------------------------------------ */
/* errors                                                                                     */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(errors, .timeout = 120);

KILN_TEST(errors, two_worker_systems_failing_at_once_each_read_their_own_message) {
    run_failing(false, 8);
}

KILN_TEST(errors, a_main_thread_system_reads_its_own_message_while_a_worker_fails) {
    run_failing(true, 8);
}

/* Fails, reads its message back, then clears it (on whatever thread: the pool's waiting main
 * thread may take it). */
static void fail_on_worker(const kiln_system_ctx *ctx) {
    failing *f = ctx->user;
    ck_assert_ptr_null(kiln_get_mut(ctx->world, f->has_a, f->long_name));
    ck_assert_str_eq(kiln_world_error(ctx->world), f->missing_message);
    kiln_world_clear_error(ctx->world);
    ck_assert_str_eq(kiln_world_error(ctx->world), "");
}

static void noop(const kiln_system_ctx *ctx) { (void)ctx; }

KILN_TEST(errors, after_a_run_the_world_error_is_the_main_threads_own) {
    static failing f;
    failing_open(&f);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(f.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "w", .run = fail_on_worker, .user = &f,
                                                             .writes = {f.long_name}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "n", .run = noop, .reads = {f.a}}),
                     KILN_OK);
    ck_assert_ptr_null(kiln_get_mut(f.world, f.dead, f.a));
    for (int frame = 0; frame < 4; frame++) ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    /* the worker's failures and its clear stayed its own, on the main thread too */
    ck_assert_str_eq(kiln_world_error(f.world), f.dead_message);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(f.world);
}

/* A main-thread system A that waits for a job of its own runs whatever the queue holds
 * meanwhile: here a worker system B, queued behind W, which holds the pool's one worker until B
 * has run. B's failure went to A's buffer (the main thread's): A read B's message after its
 * wait, and B read A's before failing. */
typedef struct helping {
    failing f;
    pthread_t main;
    atomic_bool w_started, b_done;
    bool b_on_main, w_timed_out;
    char b_before[256], b_after[256], a_after[256];
} helping;

static bool wait_flag(atomic_bool *flag) {
    int64_t start = test_now_ns();
    while (!atomic_load(flag))
        if (test_now_ns() - start > 5000000000) return false;
    return true;
}

static void hold_worker(const kiln_system_ctx *ctx) {
    helping *h = ctx->user;
    atomic_store(&h->w_started, true);
    h->w_timed_out = !wait_flag(&h->b_done);
}

static void fail_while_helping(const kiln_system_ctx *ctx) {
    helping *h = ctx->user;
    h->b_on_main = pthread_equal(pthread_self(), h->main);
    snprintf(h->b_before, sizeof h->b_before, "%s", kiln_world_error(ctx->world));
    ck_assert_ptr_null(kiln_get_mut(ctx->world, h->f.dead, h->f.a));
    snprintf(h->b_after, sizeof h->b_after, "%s", kiln_world_error(ctx->world));
    atomic_store(&h->b_done, true);
}

static void job_noop(void *arg) { (void)arg; }

static void fail_then_wait(const kiln_system_ctx *ctx) {
    helping *h = ctx->user;
    ck_assert(wait_flag(&h->w_started)); /* W has the worker: B waits in the queue */
    ck_assert_ptr_null(kiln_get_mut(ctx->world, h->f.has_a, h->f.long_name));
    kiln_counter counter = {0};
    ck_assert_int_eq(kiln_jobs_submit(ctx->jobs, &(kiln_job){job_noop, NULL}, 1, &counter), KILN_OK);
    kiln_jobs_wait(ctx->jobs, &counter); /* takes B first: the queue is first in, first out */
    snprintf(h->a_after, sizeof h->a_after, "%s", kiln_world_error(ctx->world));
}

KILN_TEST(errors, a_system_run_by_a_waiting_system_keeps_its_failures_apart) {
    static helping h;
    memset(&h, 0, sizeof h);
    failing_open(&h.f);
    h.main = pthread_self();
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    kiln_schedule *s = kiln_schedule_create(h.f.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "W", .run = hold_worker, .user = &h}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "B", .run = fail_while_helping,
                                                             .user = &h, .writes = {h.f.a}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "A", .run = fail_then_wait, .user = &h,
                                                             .writes = {h.f.long_name}, .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert(!h.w_timed_out);
    ck_assert(h.b_on_main);
    ck_assert_str_eq(h.a_after, h.f.missing_message);
    ck_assert_str_eq(h.b_before, "");
    ck_assert_str_eq(h.b_after, h.f.dead_message);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(h.f.world);
}

/* ------------------------------------------------------------------------------------------ */
/* describe                                                                                   */
/* A thread of a system's own that fails (claiming an error slot) and exits, then the next one
 * the system starts, given the exited one's pthread_t (glibc hands its stack out again). */
typedef struct reused {
    failing f;
    pthread_t first, next;
    bool same_id;
    char next_read[256]; /* what the next thread read as its message before failing at all */
} reused;

static void *fail_and_exit(void *arg) {
    reused *r = arg;
    kiln_get_mut(r->f.world, r->f.dead, r->f.a);
    return NULL;
}

static void *read_own_error(void *arg) {
    reused *r = arg;
    snprintf(r->next_read, sizeof r->next_read, "%s", kiln_world_error(r->f.world));
    return NULL;
}

static void start_two_threads(const kiln_system_ctx *ctx) {
    reused *r = ctx->user;
    ck_assert_int_eq(pthread_create(&r->first, NULL, fail_and_exit, r), 0);
    ck_assert_int_eq(pthread_join(r->first, NULL), 0);
    for (int attempt = 0; attempt < 20 && !r->same_id; attempt++) {
        ck_assert_int_eq(pthread_create(&r->next, NULL, read_own_error, r), 0);
        ck_assert_int_eq(pthread_join(r->next, NULL), 0);
        r->same_id = pthread_equal(r->first, r->next);
    }
}

KILN_TEST(errors, a_thread_given_an_exited_threads_id_does_not_read_its_message) {
    static reused r;
    failing_open(&r.f);
    r.same_id = false;
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    kiln_schedule *s = kiln_schedule_create(r.f.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "starter", .run = start_two_threads,
                                                             .user = &r, .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_msg(r.same_id, "no later thread was given the exited thread's pthread_t: the case is not made");
    ck_assert_str_eq(r.next_read, ""); /* not the exited thread's "dead entity" message */
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(r.f.world);
}

/* ------------------------------------------------------------------------------------------ */

typedef struct growing {
    kiln_schedule *schedule;
    atomic_int added;
    atomic_int bad; /* descriptions that did not list the stage running */
} growing;

/* Adds disabled systems: the schedule's list grows (and moves) under the describer. */
static void adder(const kiln_system_ctx *ctx) {
    growing *g = ctx->user;
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof name, "n%d", atomic_fetch_add(&g->added, 1));
        ck_assert_int_eq(kiln_schedule_add(g->schedule, &(kiln_system_desc){.name = name, .run = noop,
                                                                            .disabled = true}),
                         KILN_OK);
    }
}

static void describer(const kiln_system_ctx *ctx) {
    growing *g = ctx->user;
    for (int i = 0; i < 200; i++) {
        char text[256];
        kiln_schedule_describe(g->schedule, text, sizeof text);
        if (strncmp(text, "stage 0: ", 9) != 0 || !strstr(text, "describer")) atomic_fetch_add(&g->bad, 1);
    }
}

KILN_TEST_GROUP_WITH(describe, .timeout = 120);

KILN_TEST(describe, a_worker_describes_the_schedule_while_a_main_thread_system_adds_systems) {
    static growing g;
    memset(&g, 0, sizeof g);
    kiln_world *w = kiln_world_create(NULL);
    kiln_component a = register_sized(w, "A", 4);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    g.schedule = kiln_schedule_create(w, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(g.schedule, &(kiln_system_desc){.name = "adder", .run = adder, .user = &g,
                                                                       .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(g.schedule, &(kiln_system_desc){.name = "describer", .run = describer,
                                                                       .user = &g, .reads = {a}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(g.schedule, &(kiln_system_desc){.name = "other", .run = noop, .reads = {a}}),
                     KILN_OK);
    for (int frame = 0; frame < 40; frame++) ck_assert_int_eq(kiln_schedule_run(g.schedule, 0.0), KILN_OK);
    ck_assert_int_eq(kiln_schedule_system_count(g.schedule), 3 + 40 * 8);
    int bad = atomic_load(&g.bad);
    ck_assert_int_eq(bad, 0);
    kiln_schedule_destroy(g.schedule);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(w);
}

/* More threads than cores, all taking the schedule's lock: each finds the others by name and
 * toggles a disabled system of its own. A waiter whose holder was taken off the processor
 * gives its slice away rather than spin through it (nothing here is timed: it must finish
 * with every answer right). */
enum { CROWD = 8 };

typedef struct crowd {
    kiln_schedule *schedule;
    atomic_int wrong;
} crowd;

static void crowd_member(const kiln_system_ctx *ctx) {
    crowd *c = ctx->user;
    char shadow[32];
    snprintf(shadow, sizeof shadow, "%s_off", ctx->name);
    for (int i = 0; i < 500; i++) {
        char other[32];
        snprintf(other, sizeof other, "c%d", i % CROWD);
        if (kiln_schedule_find(c->schedule, other) < 0) atomic_fetch_add(&c->wrong, 1);
        if (kiln_schedule_enable(c->schedule, shadow, i % 2 == 0) != KILN_OK) atomic_fetch_add(&c->wrong, 1);
    }
}

KILN_TEST(describe, more_threads_than_cores_share_the_schedules_lock) {
    static crowd c;
    memset(&c, 0, sizeof c);
    kiln_world *w = kiln_world_create(NULL);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = CROWD});
    c.schedule = kiln_schedule_create(w, &(kiln_schedule_desc){.jobs = jobs});
    for (int i = 0; i < CROWD; i++) {
        char name[32], off[32];
        snprintf(name, sizeof name, "c%d", i);
        snprintf(off, sizeof off, "c%d_off", i);
        ck_assert_int_eq(kiln_schedule_add(c.schedule, &(kiln_system_desc){.name = name, .run = crowd_member,
                                                                           .user = &c}),
                         KILN_OK);
        ck_assert_int_eq(kiln_schedule_add(c.schedule, &(kiln_system_desc){.name = off, .run = noop,
                                                                           .disabled = true}),
                         KILN_OK);
    }
    for (int frame = 0; frame < 10; frame++) ck_assert_int_eq(kiln_schedule_run(c.schedule, 0.0), KILN_OK);
    int wrong = atomic_load(&c.wrong);
    ck_assert_int_eq(wrong, 0);
    kiln_schedule_destroy(c.schedule);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(w);
}

/* ------------------------------------------------------------------------------------------ */
/* ranges                                                                                     */
/* ------------------------------------------------------------------------------------------ */

enum { RANGE_ROWS = 4000 };

/* Two worker systems, each with its own component and query. Y's ranges read Y's component
 * through kiln_get; X starts its own ranges once Y's are queued, so the thread waiting in
 * X's kiln_parallel_for takes Y's ranges first (the queue is first in, first out). */
typedef struct split {
    kiln_world *world;
    kiln_component cx, cy;
    kiln_query *qx, *qy;
    kiln_entity probe; /* an entity with cy */
    atomic_int y_running; /* a range of Y started this frame: the others wait in the queue */
    atomic_int rows_read;
} split;

static void spin_rows(kiln_iter *view, void *user) {
    (void)user;
    volatile int sum = 0;
    for (int i = 0; i < view->count * 200; i++) sum += i;
}

static void read_rows(kiln_iter *view, void *user) {
    split *sp = user;
    atomic_store(&sp->y_running, 1);
    spin_rows(view, NULL); /* ranges that last: the rest stay queued meanwhile */
    for (int i = 0; i < view->count; i++)
        if (kiln_get(view->world, sp->probe, sp->cy) != NULL) atomic_fetch_add(&sp->rows_read, 1);
}

static void run_x(const kiln_system_ctx *ctx) {
    split *sp = ctx->user;
    int64_t start = test_now_ns();
    while (!atomic_load(&sp->y_running) && test_now_ns() - start < 1000000000) {
    }
    ck_assert_int_eq(kiln_parallel_for(ctx->jobs, sp->qx, 16, spin_rows, sp), KILN_OK);
}

static void run_y(const kiln_system_ctx *ctx) {
    split *sp = ctx->user;
    ck_assert_int_eq(kiln_parallel_for(ctx->jobs, sp->qy, 16, read_rows, sp), KILN_OK);
}

static kiln_query *spawn_rows(kiln_world *w, kiln_component c, kiln_entity *last) {
    for (int i = 0; i < RANGE_ROWS; i++) ck_assert_int_eq(kiln_spawn_with(w, &c, NULL, 1, last), KILN_OK);
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {c}}, &q), KILN_OK);
    return q;
}

KILN_TEST_GROUP_WITH(ranges, .timeout = 120);

/* A thread waiting in X's kiln_parallel_for helps with Y's ranges: they are Y's reads. */
KILN_TEST(ranges, a_range_run_while_another_system_waits_is_checked_as_its_own_system) {
    static split sp;
    memset(&sp, 0, sizeof sp);
    sp.world = kiln_world_create(NULL);
    sp.cx = register_sized(sp.world, "CX", 4);
    sp.cy = register_sized(sp.world, "CY", 4);
    kiln_entity last;
    sp.qx = spawn_rows(sp.world, sp.cx, &last);
    sp.qy = spawn_rows(sp.world, sp.cy, &sp.probe);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(sp.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "X", .run = run_x, .user = &sp,
                                                             .writes = {sp.cx}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "Y", .run = run_y, .user = &sp,
                                                             .writes = {sp.cy}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    enum { FRAMES = 20 };
    for (int frame = 0; frame < FRAMES; frame++) {
        atomic_store(&sp.y_running, 0);
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    }
    int rows_read = atomic_load(&sp.rows_read);
    ck_assert_int_eq(rows_read, FRAMES * RANGE_ROWS);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(sp.world);
}

/* The abort must carry this message: the SIGABRT handler lets it proceed only when the
 * aborting thread's error holds it, else the test exits with 3. */
static const char *abort_expected;
static kiln_world *abort_world;

static void on_abort(int sig) {
    (void)sig;
    if (abort_expected && strstr(kiln_world_error(abort_world), abort_expected)) {
        signal(SIGABRT, SIG_DFL);
        return; /* abort raises again, now by default: the test dies of SIGABRT */
    }
    static const char msg[] = "abort without the expected message\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(3);
}

typedef struct tagging {
    kiln_query *q;
    kiln_component tag;
} tagging;

static void tag_rows(kiln_iter *view, void *user) {
    tagging *t = user;
    for (int i = 0; i < view->count; i++) kiln_add(view->world, view->entities[i], t->tag, NULL);
}

static void tag_in_ranges(const kiln_system_ctx *ctx) {
    tagging *t = ctx->user;
    kiln_parallel_for(ctx->jobs, t->q, 32, tag_rows, t);
}

/* Runs a frame in which a system (main-thread or exclusive, so it may change the world on its
 * own thread) adds a tag to every row from kiln_parallel_for ranges: the debug checks must
 * abort whichever thread the first range ran on. */
static void run_tagging_ranges(bool exclusive) {
    static tagging t;
    kiln_world *w = kiln_world_create(NULL);
    kiln_component a = register_sized(w, "A", 4);
    t.tag = register_sized(w, "T", 0);
    kiln_entity last;
    t.q = spawn_rows(w, a, &last);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(w, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "tagger", .run = tag_in_ranges, .user = &t,
                                                             .reads = {a}, .main_thread = !exclusive,
                                                             .exclusive = exclusive}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "other", .run = noop}), KILN_OK);
    abort_world = w;
    abort_expected = "kiln_add: system 'tagger' changes the world (T) from a kiln_parallel_for range";
    signal(SIGABRT, on_abort);
    kiln_schedule_run(s, 0.0);
    ck_abort_msg("the run finished: expected \"%s\"", abort_expected);
}

KILN_TEST_SIGNAL(ranges, a_main_thread_systems_range_changing_the_world_aborts_naming_it, SIGABRT) {
    run_tagging_ranges(false);
}

KILN_TEST_SIGNAL(ranges, an_exclusive_systems_range_changing_the_world_aborts_naming_it, SIGABRT) {
    run_tagging_ranges(true);
}

/* ------------------------------------------------------------------------------------------ */
/* records                                                                                    */
/* ------------------------------------------------------------------------------------------ */

enum { STALE = 2048 };

/* A main-thread system spawns (each deferred spawn takes a freed slot at once, writing its
 * record) while a worker system probes the handles those slots held before: the worker reads
 * the records the main thread writes. */
typedef struct probing {
    kiln_world *world;
    kiln_component a;
    kiln_entity stale[STALE]; /* despawned: their slots are on the free list */
    kiln_entity spawned[STALE];
    kiln_getter getter;
    atomic_int arrived;
    atomic_int found; /* stale handles that answered as alive */
} probing;

/* Waits (a second at most) for the other system, so the two overlap. */
static void probing_rendezvous(probing *p) {
    atomic_fetch_add(&p->arrived, 1);
    int64_t start = test_now_ns();
    while (atomic_load(&p->arrived) < 2 && test_now_ns() - start < 1000000000) {
    }
}

static void spawner(const kiln_system_ctx *ctx) {
    probing *p = ctx->user;
    probing_rendezvous(p);
    for (int i = 0; i < STALE; i++) ck_assert_int_eq(kiln_spawn(ctx->world, &p->spawned[i]), KILN_OK);
}

static void prober(const kiln_system_ctx *ctx) {
    probing *p = ctx->user;
    probing_rendezvous(p);
    const void *got[64];
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < STALE; i++)
            if (kiln_is_alive(ctx->world, p->stale[i]) || kiln_get(ctx->world, p->stale[i], p->a) ||
                kiln_getter_get(&p->getter, p->stale[i]))
                atomic_fetch_add(&p->found, 1);
        for (int i = 0; i < STALE; i += 64)
            atomic_fetch_add(&p->found, kiln_get_many(ctx->world, p->stale + i, 64, p->a, got) +
                                            kiln_getter_get_many(&p->getter, p->stale + i, 64, got));
    }
}

KILN_TEST_GROUP_WITH(records, .timeout = 120);

KILN_TEST(records, a_worker_probes_stale_handles_while_a_main_thread_system_spawns_into_their_slots) {
    static probing p;
    memset(&p, 0, sizeof p);
    p.world = kiln_world_create(NULL);
    p.a = register_sized(p.world, "A", 4);
    for (int i = 0; i < STALE; i++) ck_assert_int_eq(kiln_spawn_with(p.world, &p.a, NULL, 1, &p.stale[i]), KILN_OK);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(p.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "spawner", .run = spawner, .user = &p,
                                                             .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "prober", .run = prober, .user = &p,
                                                             .reads = {p.a}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    for (int frame = 0; frame < 4; frame++) {
        /* this frame's stale handles: last frame's spawns (the first frame: the first rows) */
        if (frame > 0) memcpy(p.stale, p.spawned, sizeof p.stale);
        for (int i = 0; i < STALE; i++) ck_assert_int_eq(kiln_despawn(p.world, p.stale[i]), KILN_OK);
        ck_assert_int_eq(kiln_getter_init(p.world, p.a, &p.getter), KILN_OK);
        atomic_store(&p.arrived, 0);
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        kiln_getter_fini(&p.getter);
        for (int i = 0; i < STALE; i++) ck_assert(kiln_is_alive(p.world, p.spawned[i]));
    }
    int found = atomic_load(&p.found);
    ck_assert_int_eq(found, 0);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(p.world);
}

/* ------------------------------------------------------------------------------------------ */
/* structural calls from a thread that is not the stage's                                     */
/* ------------------------------------------------------------------------------------------ */

/* A system's own helper thread (no system runs there, so the debug checks see none; release
 * builds check no thread at all) changing the world while a stage runs: each call would queue
 * into a buffer, or take an entity slot, beside the stage's thread. Each is refused, naming the
 * call and what it would change, and the world stays as it was. */
typedef struct stranger {
    kiln_world *world;
    kiln_component a, kept;
    kiln_event_type ev;
    kiln_entity e;
    kiln_result got[9];
    char spawn_message[256], add_message[256], despawn_message[256], emit_message[256], unless_message[256];
} stranger;

static void *stranger_calls(void *arg) {
    stranger *t = arg;
    int32_t v = 5;
    kiln_entity spawned = KILN_NULL_ENTITY, batch[2];
    t->got[0] = kiln_spawn(t->world, &spawned);
    snprintf(t->spawn_message, sizeof t->spawn_message, "%s", kiln_world_error(t->world));
    t->got[1] = kiln_spawn_with(t->world, &t->a, (const void *[]){&v}, 1, NULL);
    t->got[2] = kiln_spawn_batch(t->world, &t->a, 1, 2, batch);
    t->got[3] = kiln_add(t->world, t->e, t->a, &v);
    snprintf(t->add_message, sizeof t->add_message, "%s", kiln_world_error(t->world));
    t->got[4] = kiln_set(t->world, t->e, t->a, &v);
    t->got[5] = kiln_remove(t->world, t->e, t->a, NULL);
    t->got[6] = kiln_despawn(t->world, t->e);
    snprintf(t->despawn_message, sizeof t->despawn_message, "%s", kiln_world_error(t->world));
    t->got[7] = kiln_event_emit(t->world, t->ev, &v);
    snprintf(t->emit_message, sizeof t->emit_message, "%s", kiln_world_error(t->world));
    t->got[8] = kiln_despawn_unless(t->world, t->e, &t->kept, 1); /* a kept list goes its own way */
    snprintf(t->unless_message, sizeof t->unless_message, "%s", kiln_world_error(t->world));
    return NULL;
}

static void start_stranger(const kiln_system_ctx *ctx) {
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, stranger_calls, ctx->user), 0);
    ck_assert_int_eq(pthread_join(thread, NULL), 0);
}

static void idle(const kiln_system_ctx *ctx) { (void)ctx; }

KILN_TEST_GROUP_WITH(strangers, .timeout = 60);

KILN_TEST(strangers, structural_calls_from_a_thread_other_than_the_stages_are_refused_changing_nothing) {
    static stranger t;
    memset(&t, 0, sizeof t);
    t.world = kiln_world_create(NULL);
    t.a = register_sized(t.world, "A", 4);
    t.kept = register_sized(t.world, "Kept", 4);
    ck_assert_int_eq(kiln_event_register(t.world, &(kiln_component_desc){.name = "Hit", .size = 4}, &t.ev), KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(t.world, &t.a, (const void *[]){&(int32_t){1}}, 1, &t.e), KILN_OK);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(t.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "host", .run = start_stranger, .user = &t}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "idle", .run = idle}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    for (int i = 0; i < 9; i++) ck_assert_msg(t.got[i] == KILN_ERR_INVALID_ARGUMENT, "call %d gave %d", i, t.got[i]);
    const char *tail = "while a schedule runs a stage";
    ck_assert_str_eq(t.spawn_message, "kiln_spawn: called from a worker system, job or thread while a schedule "
                                      "runs a stage (a spawn); nothing was changed: record it into ctx->commands, "
                                      "or a command buffer of the thread's own");
    ck_assert_ptr_nonnull(strstr(t.add_message, "kiln_add: called from a worker system, job or thread"));
    ck_assert_msg(strstr(t.add_message, "(A on entity 0v1)"), "%s", t.add_message);
    ck_assert_ptr_nonnull(strstr(t.despawn_message, "(entity 0v1)"));
    ck_assert_ptr_nonnull(strstr(t.despawn_message, tail));
    ck_assert_ptr_nonnull(strstr(t.emit_message, "kiln_event_emit: called from a worker system, job or thread"));
    ck_assert_ptr_nonnull(strstr(t.emit_message, "(event Hit)"));
    ck_assert_msg(strstr(t.unless_message, "kiln_despawn_unless: called from a worker system"), "%s", t.unless_message);
    ck_assert_int_eq(kiln_entity_count(t.world), 1);
    ck_assert_int_eq(*(const int32_t *)kiln_get(t.world, t.e, t.a), 1);
    ck_assert_int_eq(kiln_event_count(t.world, t.ev), 0);
    int64_t dropped = -1;
    kiln_world_dropped(t.world, &dropped, NULL);
    ck_assert_int_eq(dropped, 0);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(t.world);
}

/* A job a worker system queued on the pool (no system runs it, so no debug check sees it) and the
 * stage's own thread took up while waiting for the stage: refused as on a worker thread, so a
 * worker system's calls are refused whichever thread runs them. The pool's one worker is held by
 * the system until the job ran, and the main-thread system waits for it to start, so the job can
 * only run on the stage's thread. */
typedef struct queued {
    kiln_world *world;
    pthread_t stage;
    atomic_bool held, ran;
    bool on_stage_thread;
    kiln_result got;
} queued;

static void queued_spawn(void *arg) {
    queued *q = arg;
    q->on_stage_thread = pthread_equal(pthread_self(), q->stage);
    q->got = kiln_spawn(q->world, NULL);
    atomic_store(&q->ran, true);
}

static void submit_and_hold(const kiln_system_ctx *ctx) {
    queued *q = ctx->user;
    kiln_counter counter = {0};
    atomic_store(&q->held, true);
    ck_assert_int_eq(kiln_jobs_submit(ctx->jobs, &(kiln_job){queued_spawn, q}, 1, &counter), KILN_OK);
    ck_assert(wait_flag(&q->ran));
    kiln_jobs_wait(ctx->jobs, &counter);
}

static void wait_for_holder(const kiln_system_ctx *ctx) {
    queued *q = ctx->user;
    q->stage = pthread_self();
    ck_assert(wait_flag(&q->held));
}

/* Runs a stage of a worker system (worker) and a main_thread one (main) sharing q, on a pool
 * of one worker, and checks that q's job ran on the stage's thread, refused, spawning nothing. */
static void run_pair(kiln_system_fn worker, kiln_system_fn main) {
    static queued q;
    memset(&q, 0, sizeof q);
    q.world = kiln_world_create(NULL);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    kiln_schedule *s = kiln_schedule_create(q.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "worker", .run = worker, .user = &q}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "main", .run = main, .user = &q,
                                                             .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert(atomic_load(&q.ran));
    ck_assert(q.on_stage_thread);
    ck_assert_int_eq(q.got, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_entity_count(q.world), 0);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(q.world);
}

KILN_TEST(strangers, a_job_a_worker_system_queued_is_refused_on_the_stages_own_thread) {
    run_pair(submit_and_hold, wait_for_holder);
}

/* The same job queued by a main-thread system and taken up by the stage's own thread as that
 * system waits for it (the pool's one worker is held by a worker system until the job ran):
 * refused there as on a worker, not recorded into the waiting system's buffer, so whether a
 * job's change is refused does not hang on which thread took it up. */
static void hold_until_ran(const kiln_system_ctx *ctx) {
    queued *q = ctx->user;
    atomic_store(&q->held, true);
    ck_assert(wait_flag(&q->ran));
}

static void submit_once_held(const kiln_system_ctx *ctx) {
    queued *q = ctx->user;
    q->stage = pthread_self();
    ck_assert(wait_flag(&q->held));
    kiln_counter counter = {0};
    ck_assert_int_eq(kiln_jobs_submit(ctx->jobs, &(kiln_job){queued_spawn, q}, 1, &counter), KILN_OK);
    kiln_jobs_wait(ctx->jobs, &counter);
}

KILN_TEST(strangers, a_job_a_main_thread_system_waits_for_is_refused_on_the_stages_own_thread) {
    run_pair(hold_until_ran, submit_once_held);
}

/* As above, after the main-thread system ran a schedule of another world on the same pool first
 * (its own stage on this thread, watched and unwatched meanwhile): the outer stage still counts
 * the job its thread takes up, and refuses it. */
static void nothing_here(const kiln_system_ctx *ctx) { (void)ctx; }

static void run_other_world_then_submit(const kiln_system_ctx *ctx) {
    kiln_world *other = kiln_world_create(NULL);
    kiln_schedule *s = kiln_schedule_create(other, &(kiln_schedule_desc){.jobs = ctx->jobs});
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "a", .run = nothing_here, .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "b", .run = nothing_here, .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    kiln_schedule_destroy(s);
    kiln_world_destroy(other);
    submit_once_held(ctx);
}

KILN_TEST(strangers, a_job_taken_up_after_another_worlds_schedule_ran_on_the_pool_is_refused_too) {
    run_pair(hold_until_ran, run_other_world_then_submit);
}
