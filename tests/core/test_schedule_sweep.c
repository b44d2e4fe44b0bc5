/* test_schedule_sweep.c: Check suite for frames attacked from inside: worker systems setting
 * and removing resources at the same moment, schedules run from inside systems, the frame's
 * own steps called mid-stage, and undeclared resource or event access from worker systems. */
#include <check.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "schedule_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* resources from worker systems                                                              */
/* ------------------------------------------------------------------------------------------ */

/* An allocator (thread-safe: it counts with atomics and allocates with realloc) that can make
 * two threads meet inside it, so the interleaving a race needs happens on every run instead of
 * once in a few hundred. Once armed, the requests for new blocks are numbered from 1:
 * MEET holds request 1 until request 2 arrives; HOLD_SECOND holds request 2 until a block is
 * freed. A hold gives up after 300 ms, so a fixed kiln (which serializes the two threads
 * before they get here) is only slowed down. */
typedef enum gate_mode { GATE_MEET = 1, GATE_HOLD_SECOND } gate_mode;

typedef struct gate_alloc {
    atomic_llong bytes;
    atomic_int mode; /* 0: not armed */
    atomic_int requests;
    atomic_int frees;
} gate_alloc;

static void wait_until(atomic_int *value, int at_least) {
    int64_t until = test_now_ns() + 300 * 1000000LL;
    while (atomic_load(value) < at_least && test_now_ns() < until) {
    }
}

static void *gate_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    gate_alloc *g = ud;
    if (nsize == 0) {
        if (ptr) {
            atomic_fetch_sub(&g->bytes, (long long)osize);
            if (atomic_load(&g->mode)) atomic_fetch_add(&g->frees, 1);
        }
        free(ptr);
        return NULL;
    }
    int mode = atomic_load(&g->mode);
    if (ptr == NULL && mode) {
        int n = atomic_fetch_add(&g->requests, 1) + 1;
        if (mode == GATE_MEET && n == 1) wait_until(&g->requests, 2);
        if (mode == GATE_HOLD_SECOND && n == 2) wait_until(&g->frees, 1);
    }
    void *p = realloc(ptr, nsize);
    if (p) atomic_fetch_add(&g->bytes, (long long)nsize - (long long)(ptr ? osize : 0));
    return p;
}

#define SWEEP_TYPES 20

/* A world on a gate allocator with SWEEP_TYPES int resources R0.. and a pool of two workers. */
typedef struct sweep {
    gate_alloc gate;
    kiln_world *world;
    kiln_jobs *jobs;
    kiln_schedule *schedule;
    kiln_component r[SWEEP_TYPES];
    atomic_int started; /* systems of the frame that reached their meeting point */
} sweep;

static sweep S;

static void sweep_setup(void) {
    memset(&S, 0, sizeof S);
    S.world = kiln_world_create(&(kiln_world_desc){.alloc = gate_fn, .alloc_ud = &S.gate});
    ck_assert_ptr_nonnull(S.world);
    for (int i = 0; i < SWEEP_TYPES; i++) {
        char name[16];
        snprintf(name, sizeof name, "R%d", i);
        ck_assert_int_eq(kiln_component_register(S.world,
                                                 &(kiln_component_desc){.name = name, .size = 4,
                                                                        .align = 4},
                                                 &S.r[i]),
                         KILN_OK);
    }
    S.jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(S.jobs);
    S.schedule = kiln_schedule_create(S.world, &(kiln_schedule_desc){.jobs = S.jobs});
    ck_assert_ptr_nonnull(S.schedule);
}

static void sweep_teardown(void) {
    kiln_schedule_destroy(S.schedule);
    kiln_jobs_destroy(S.jobs);
    kiln_world_destroy(S.world);
    ck_assert_int_eq(atomic_load(&S.gate.bytes), 0);
}

/* What a resource system does: user is the index of its resource; set (value index + 100),
 * or remove when negative (-1 - index). Both systems of a frame arm the gate and wait for each
 * other first, so they run on two threads at once. */
static void touch_resource(const kiln_system_ctx *ctx) {
    int i = (int)(intptr_t)ctx->user;
    atomic_fetch_add(&S.started, 1);
    wait_until(&S.started, 2);
    if (i >= 0) {
        int v = i + 100;
        kiln_resource_set(ctx->world, S.r[i], &v);
    } else {
        kiln_resource_remove(ctx->world, S.r[-1 - i], NULL);
    }
}

static void add_toucher(const char *name, int i) {
    kiln_component target = S.r[i >= 0 ? i : -1 - i];
    add_system(S.schedule, (kiln_system_desc){.name = name, .run = touch_resource,
                                              .user = (void *)(intptr_t)i, .writes = {target}});
}

/* Runs one frame with the gate armed in mode (the schedule built beforehand, so only the
 * systems' own requests reach the gate). */
static void run_gated(gate_mode mode) {
    ck_assert_int_gt(kiln_schedule_stage_count(S.schedule), 0);
    atomic_store(&S.gate.mode, (int)mode);
    ck_assert_int_eq(kiln_schedule_run(S.schedule, 0.0), KILN_OK);
    atomic_store(&S.gate.mode, 0);
}

static void assert_resource(int i, int value) {
    const int *v = kiln_resource_get(S.world, S.r[i]);
    ck_assert_msg(v != NULL, "resource R%d was lost", i);
    ck_assert_int_eq(*v, value);
}

KILN_TEST_GROUP_WITH(resources_from_workers, .setup = sweep_setup, .teardown = sweep_teardown,
                     .timeout = 30);

KILN_TEST(resources_from_workers, two_workers_setting_new_resources_at_once_keep_both) {
    add_toucher("first", 0);
    add_toucher("second", 1);
    ck_assert_int_eq(kiln_schedule_stage_count(S.schedule), 1);
    run_gated(GATE_MEET);
    assert_resource(0, 100);
    assert_resource(1, 101);
}

KILN_TEST(resources_from_workers, a_removal_beside_a_new_resource_growing_the_table_sticks) {
    int seven = 7;
    ck_assert_int_eq(kiln_resource_set(S.world, S.r[0], &seven), KILN_OK);
    add_toucher("remover", -1);
    add_toucher("grower", SWEEP_TYPES - 1); /* past the first table: it grows */
    ck_assert_int_eq(kiln_schedule_stage_count(S.schedule), 1);
    run_gated(GATE_HOLD_SECOND);
    ck_assert(!kiln_resource_has(S.world, S.r[0]));
    ck_assert_ptr_null(kiln_resource_get(S.world, S.r[0]));
    assert_resource(SWEEP_TYPES - 1, 100 + SWEEP_TYPES - 1);
}

/* ------------------------------------------------------------------------------------------ */
/* schedules run from inside systems                                                          */
/* ------------------------------------------------------------------------------------------ */

static schedule_fixture F;

static void fixture_setup(void) { schedule_fixture_setup(&F); }

static void fixture_teardown(void) { schedule_fixture_teardown(&F); }

/* What a system running another schedule saw: the run's result and the world's error. */
typedef struct nested_run {
    kiln_schedule *inner;
    atomic_int result; /* -1 until the system ran */
    char error[256];
    kiln_tick tick_after;
} nested_run;

static void run_inner(const kiln_system_ctx *ctx) {
    nested_run *n = ctx->user;
    kiln_result r = kiln_schedule_run(n->inner, 0.0);
    snprintf(n->error, sizeof n->error, "%s", kiln_world_error(ctx->world));
    n->tick_after = kiln_tick_current(ctx->world);
    atomic_store(&n->result, (int)r);
}

/* Runs one frame of an outer schedule whose only system (desc, its user set here) runs an
 * inner schedule holding one counting system; returns how often the inner system ran. */
static int frame_with_inner_run(kiln_system_desc desc, nested_run *n, kiln_jobs *jobs) {
    int inner_runs = 0;
    n->inner = kiln_schedule_create(F.world, NULL);
    ck_assert_ptr_nonnull(n->inner);
    add_system(n->inner, (kiln_system_desc){.name = "inner", .run = count_run, .user = &inner_runs,
                                            .main_thread = true});
    atomic_store(&n->result, -1);
    kiln_schedule *outer = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_ptr_nonnull(outer);
    desc.run = run_inner;
    desc.user = n;
    add_system(outer, desc);
    ck_assert_int_eq(kiln_schedule_run(outer, 0.0), KILN_OK);
    kiln_schedule_destroy(outer);
    kiln_schedule_destroy(n->inner);
    return inner_runs;
}

KILN_TEST_GROUP_WITH(nested_runs, .setup = fixture_setup, .teardown = fixture_teardown,
                     .timeout = 30);

KILN_TEST(nested_runs, a_main_thread_system_may_not_run_another_schedule_of_its_world) {
    nested_run n;
    kiln_tick before = kiln_tick_current(F.world);
    int runs = frame_with_inner_run((kiln_system_desc){.name = "outer", .main_thread = true}, &n,
                                    NULL);
    ck_assert_int_eq(atomic_load(&n.result), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(runs, 0);
    ck_assert_str_eq(n.error, "kiln_schedule_run: called from a system of a schedule running on "
                              "this world; only an exclusive system may run another schedule");
    ck_assert_uint_eq(n.tick_after, before + 1); /* the outer frame's advance only */
    ck_assert(!kiln_is_deferred(F.world));
}

KILN_TEST(nested_runs, a_worker_system_may_not_run_another_schedule_of_its_world) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    ck_assert_ptr_nonnull(jobs);
    nested_run n;
    /* two worker systems, so the stage really goes to the pool */
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    int inner_runs = 0;
    n.inner = kiln_schedule_create(F.world, NULL);
    add_system(n.inner, (kiln_system_desc){.name = "inner", .run = count_run, .user = &inner_runs});
    atomic_store(&n.result, -1);
    add_system(s, (kiln_system_desc){.name = "outer", .run = run_inner, .user = &n});
    add_system(s, (kiln_system_desc){.name = "idle", .run = noop});
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(atomic_load(&n.result), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(inner_runs, 0);
    kiln_schedule_destroy(s);
    kiln_schedule_destroy(n.inner);
    kiln_jobs_destroy(jobs);
}

KILN_TEST(nested_runs, an_exclusive_system_may_run_another_schedule_which_runs_whole) {
    nested_run n;
    kiln_tick before = kiln_tick_current(F.world);
    int runs = frame_with_inner_run((kiln_system_desc){.name = "outer", .exclusive = true}, &n,
                                    NULL);
    ck_assert_int_eq(atomic_load(&n.result), KILN_OK);
    ck_assert_int_eq(runs, 1);
    ck_assert_uint_eq(n.tick_after, before + 2); /* each frame advances it once */
    ck_assert(!kiln_is_deferred(F.world));
}

/* The event update is the frame's own step: from a shared stage it is refused (test_stage_refusals.c). */
static void update_events(const kiln_system_ctx *ctx) { kiln_events_update(ctx->world); }

KILN_TEST(nested_runs, an_exclusive_system_may_update_events) {
    kiln_event_type hit;
    ck_assert_int_eq(kiln_event_register(F.world, &(kiln_component_desc){.name = "Hit", .size = 4,
                                                                        .align = 4},
                                         &hit),
                     KILN_OK);
    ck_assert_int_eq(kiln_event_emit(F.world, hit, &(int){1}), KILN_OK);
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    add_system(s, (kiln_system_desc){.name = "swap", .run = update_events, .exclusive = true});
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(kiln_event_count(F.world, hit), 0); /* two updates: the event is gone */
    kiln_schedule_destroy(s);
}

/* ------------------------------------------------------------------------------------------ */
/* declared access of resources and events (debug builds abort)                               */
/* ------------------------------------------------------------------------------------------ */

/* The abort must carry this message: the SIGABRT handler lets it proceed only when the
 * world's error holds it, else the test exits with 3. */
static const char *expected_abort;

static void on_abort(int sig) {
    (void)sig;
    if (expected_abort && strstr(kiln_world_error(F.world), expected_abort)) {
        signal(SIGABRT, SIG_DFL);
        return; /* abort raises again, now by default: the test dies of SIGABRT */
    }
    static const char msg[] = "abort without the expected message\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(3);
}

static kiln_event_type HIT;

static void access_setup(void) {
    schedule_fixture_setup(&F);
    ck_assert_int_eq(kiln_event_register(F.world, &(kiln_component_desc){.name = "Hit", .size = 4,
                                                                        .align = 4},
                                         &HIT),
                     KILN_OK);
    ck_assert_int_eq(kiln_resource_set(F.world, F.p, &(test_position){1, 2}), KILN_OK);
}

/* One frame of desc on a worker of a one-worker pool, expecting an abort naming message. */
static void worker_run_expecting_abort(kiln_system_desc desc, const char *message) {
    expected_abort = message;
    signal(SIGABRT, on_abort);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    add_system(s, desc);
    add_system(s, (kiln_system_desc){.name = "idle", .run = noop}); /* the stage goes to the pool */
    kiln_schedule_run(s, 0.0);
    ck_abort_msg("the run finished: expected \"%s\"", message);
}

static void get_position_resource(const kiln_system_ctx *ctx) { kiln_resource_get(ctx->world, F.p); }

static void set_position_resource(const kiln_system_ctx *ctx) {
    kiln_resource_set(ctx->world, F.p, &(test_position){3, 4});
}

static void remove_position_resource(const kiln_system_ctx *ctx) {
    kiln_resource_remove(ctx->world, F.p, NULL);
}

static void emit_hit(const kiln_system_ctx *ctx) { kiln_event_emit(ctx->world, HIT, &(int){1}); }

KILN_TEST_GROUP_WITH(declared_access, .setup = access_setup, .teardown = fixture_teardown,
                     .timeout = 30);

KILN_TEST_SIGNAL(declared_access, a_worker_reading_an_undeclared_resource_aborts, SIGABRT) {
    worker_run_expecting_abort((kiln_system_desc){.name = "peek", .run = get_position_resource,
                                                  .reads = {F.q}},
                               "kiln_resource_get: system 'peek' reads Position without "
                               "declaring it in reads or writes");
}

KILN_TEST_SIGNAL(declared_access, a_worker_setting_a_resource_it_only_reads_aborts, SIGABRT) {
    worker_run_expecting_abort((kiln_system_desc){.name = "scribble", .run = set_position_resource,
                                                  .reads = {F.p}},
                               "kiln_resource_set: system 'scribble' writes Position without "
                               "declaring it in writes");
}

KILN_TEST_SIGNAL(declared_access, a_worker_removing_an_undeclared_resource_aborts, SIGABRT) {
    worker_run_expecting_abort((kiln_system_desc){.name = "thief", .run = remove_position_resource},
                               "kiln_resource_remove: system 'thief' writes Position without "
                               "declaring it in writes");
}

KILN_TEST_SIGNAL(declared_access, a_worker_emitting_through_the_world_aborts, SIGABRT) {
    worker_run_expecting_abort((kiln_system_desc){.name = "shout", .run = emit_hit},
                               "kiln_event_emit: system 'shout' changes the world (event Hit) "
                               "from a worker thread; record it into ctx->commands");
}

static kiln_entity SPAWNED; /* with Position, spawned by the tests that need it */

static void spawn_positioned(void) {
    ck_assert_int_eq(kiln_spawn_with(F.world, &F.p, (const void *[]){&(test_position){1, 1}}, 1,
                                     &SPAWNED),
                     KILN_OK);
}

static void changed_tick_of_position(const kiln_system_ctx *ctx) {
    kiln_changed_tick(ctx->world, SPAWNED, F.p);
}

static void getter_of_position(const kiln_system_ctx *ctx) {
    kiln_getter g;
    if (kiln_getter_init(ctx->world, F.p, &g) == KILN_OK) kiln_getter_fini(&g);
}

static void set_position(const kiln_system_ctx *ctx) {
    kiln_set(ctx->world, SPAWNED, F.p, &(test_position){5, 5});
}

KILN_TEST_SIGNAL(declared_access, a_worker_reading_an_undeclared_change_tick_aborts, SIGABRT) {
    spawn_positioned();
    worker_run_expecting_abort((kiln_system_desc){.name = "ticks", .run = changed_tick_of_position},
                               "kiln_changed_tick: system 'ticks' reads Position without "
                               "declaring it in reads or writes");
}

KILN_TEST_SIGNAL(declared_access, a_worker_making_a_getter_of_an_undeclared_component_aborts,
                 SIGABRT) {
    worker_run_expecting_abort((kiln_system_desc){.name = "getter", .run = getter_of_position,
                                                  .reads = {F.q}},
                               "kiln_getter_init: system 'getter' reads Position without "
                               "declaring it in reads or writes");
}

KILN_TEST_SIGNAL(declared_access, a_worker_setting_through_the_world_aborts_even_when_declared,
                 SIGABRT) {
    spawn_positioned();
    worker_run_expecting_abort((kiln_system_desc){.name = "setter", .run = set_position,
                                                  .writes = {F.p}},
                               "kiln_set: system 'setter' changes the world (Position) from a "
                               "worker thread; record it into ctx->commands");
}

static void register_type(const kiln_system_ctx *ctx) {
    kiln_event_type t;
    kiln_event_register(ctx->world, &(kiln_component_desc){.name = "Late", .size = 4}, &t);
}

static void register_component(const kiln_system_ctx *ctx) {
    kiln_component c;
    kiln_component_register(ctx->world, &(kiln_component_desc){.name = "Late", .size = 4}, &c);
}

KILN_TEST_SIGNAL(declared_access, a_worker_registering_an_event_type_aborts, SIGABRT) {
    worker_run_expecting_abort((kiln_system_desc){.name = "definer", .run = register_type},
                               "kiln_event_register: system 'definer' changes the world (a type "
                               "registered) from a worker thread");
}

KILN_TEST_SIGNAL(declared_access, a_worker_registering_a_component_aborts, SIGABRT) {
    worker_run_expecting_abort((kiln_system_desc){.name = "definer", .run = register_component},
                               "kiln_component_register: system 'definer' changes the world (a "
                               "type registered) from a worker thread");
}

static void create_query(const kiln_system_ctx *ctx) {
    kiln_query *q = NULL;
    kiln_query_create(ctx->world, &(kiln_query_desc){.with = {F.p}}, &q);
    kiln_query_destroy(q);
}

KILN_TEST_SIGNAL(declared_access, a_worker_creating_a_query_aborts, SIGABRT) {
    worker_run_expecting_abort((kiln_system_desc){.name = "asker", .run = create_query,
                                                  .reads = {F.p}},
                               "kiln_query_create: system 'asker' changes the world (its list of "
                               "queries) from a worker thread");
}

/* What a worker may do with resources and events: what it declared, and emits recorded into
 * its own buffer (they land at the end of the stage). */
static void declared_resource_and_buffered_emit(const kiln_system_ctx *ctx) {
    test_position *p = kiln_resource_get(ctx->world, F.p);
    if (p) p->x += 1;
    kiln_resource_set(ctx->world, F.p, p);
    kiln_commands_emit(ctx->commands, HIT, &(int){7});
    for (int64_t i = 0; i < kiln_event_count(ctx->world, HIT); i++) kiln_event_get(ctx->world, HIT, i);
}

KILN_TEST(declared_access, a_worker_keeping_to_its_declared_resource_and_buffer_runs_clean) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    add_system(s, (kiln_system_desc){.name = "keeper", .run = declared_resource_and_buffered_emit,
                                     .writes = {F.p}});
    add_system(s, (kiln_system_desc){.name = "idle", .run = noop});
    for (int frame = 0; frame < 2; frame++)
        ck_assert_msg(kiln_schedule_run(s, 0.0) == KILN_OK, "%s", kiln_world_error(F.world));
    const test_position *p = kiln_resource_get(F.world, F.p);
    ck_assert_float_eq(p->x, 3);
    ck_assert_int_eq(kiln_event_count(F.world, HIT), 2); /* one per frame, both still readable */
    ck_assert_int_eq(*(const int *)kiln_event_get(F.world, HIT, 1), 7);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
}

/* ------------------------------------------------------------------------------------------ */
/* out of memory at every request of a build and of a frame                                   */
/* ------------------------------------------------------------------------------------------ */

static test_allocator A;
static kiln_world *W;

static void memory_setup(void) {
    test_allocator_init(&A);
    W = test_world_create(&A);
}

static void memory_teardown(void) {
    kiln_world_destroy(W);
    ck_assert_int_eq(A.live_bytes, 0);
    ck_assert_int_eq(A.bad_osize, 0);
}

/* A frame's worth of work through every kind of buffer: a main-thread system that spawns,
 * emits and sets a resource for the first time; a buffered system that records a spawn and
 * an emit; one that follows both and counts. */
typedef struct frame_parts {
    kiln_component pos;
    kiln_event_type hit;
    int later_runs;
    int own_failures; /* calls of the systems themselves that failed (they were told) */
} frame_parts;

static void main_thread_work(const kiln_system_ctx *ctx) {
    frame_parts *fp = ctx->user;
    kiln_entity e;
    fp->own_failures +=
        (kiln_spawn_with(ctx->world, &fp->pos, (const void *[]){&(test_position){1, 1}}, 1, &e) !=
         KILN_OK) +
        (kiln_event_emit(ctx->world, fp->hit, &(int){1}) != KILN_OK) +
        (kiln_resource_set(ctx->world, fp->pos, &(test_position){2, 2}) != KILN_OK);
}

static void buffered_work(const kiln_system_ctx *ctx) {
    frame_parts *fp = ctx->user;
    kiln_entity e;
    if (kiln_commands_spawn(ctx->commands, &e) != KILN_OK ||
        kiln_commands_add(ctx->commands, e, fp->pos, &(test_position){3, 3}) != KILN_OK)
        fp->own_failures++;
    fp->own_failures += kiln_commands_emit(ctx->commands, fp->hit, &(int){2}) != KILN_OK;
}

static void later_work(const kiln_system_ctx *ctx) { ((frame_parts *)ctx->user)->later_runs++; }

static kiln_schedule *frame_schedule(frame_parts *fp) {
    fp->pos = test_register_position(W);
    ck_assert_int_eq(kiln_event_register(W, &(kiln_component_desc){.name = "Hit", .size = 4,
                                                                   .align = 4},
                                         &fp->hit),
                     KILN_OK);
    kiln_schedule *s = kiln_schedule_create(W, NULL);
    ck_assert_ptr_nonnull(s);
    add_system(s, (kiln_system_desc){.name = "main", .run = main_thread_work, .user = fp,
                                     .writes = {fp->pos}, .main_thread = true});
    add_system(s, (kiln_system_desc){.name = "buffered", .run = buffered_work, .user = fp});
    add_system(s, (kiln_system_desc){.name = "later", .run = later_work, .user = fp,
                                     .after = {"main", "buffered"}});
    return s;
}

KILN_TEST_GROUP_WITH(memory, .setup = memory_setup, .teardown = memory_teardown, .timeout = 60);

KILN_TEST(memory, a_build_out_of_memory_at_any_request_keeps_the_stages_it_had) {
    frame_parts fp = {0};
    kiln_schedule *s = frame_schedule(&fp);
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    char before[256];
    snprintf(before, sizeof before, "%s", describe(s));
    /* 40 systems more, so the build needs bigger arrays than it has */
    for (int i = 0; i < 40; i++) {
        char name[32];
        snprintf(name, sizeof name, "extra%d", i);
        add_system(s, (kiln_system_desc){.name = name, .run = noop, .writes = {fp.pos}});
    }
    bool built = false;
    for (int64_t grant = 0; !built && grant < 64; grant++) {
        test_allocator_fail_after(&A, grant);
        kiln_result r = kiln_schedule_build(s);
        test_allocator_fail_never(&A);
        if (r == KILN_OK) {
            built = true;
            break;
        }
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        ck_assert_str_eq(kiln_world_error(W), "kiln_schedule_build: out of memory");
        ck_assert_int_eq(kiln_schedule_system_count(s), 43);
    }
    ck_assert(built);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 41); /* the extras write one component */
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    kiln_schedule_destroy(s);
}

KILN_TEST(memory, a_frame_out_of_memory_at_any_request_reports_it_and_leaves_the_world_runnable) {
    frame_parts fp = {0};
    kiln_schedule *s = frame_schedule(&fp);
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    bool whole = false;
    for (int64_t grant = 0; !whole && grant < 200; grant++) {
        fp.own_failures = 0;
        int64_t failures_before = A.failures;
        test_allocator_fail_after(&A, grant);
        kiln_result r = kiln_schedule_run(s, 0.0);
        int64_t refused = A.failures - failures_before;
        test_allocator_fail_never(&A);
        ck_assert_msg(r == KILN_OK || r == KILN_ERR_OUT_OF_MEMORY, "grant %d: %s", (int)grant,
                      kiln_result_name(r));
        /* every system ran, nothing is left deferred or half-running */
        ck_assert_int_eq(fp.later_runs, (int)grant + 1);
        ck_assert(!kiln_is_deferred(W));
        for (int32_t i = 0; i < 3; i++) {
            kiln_system_info info;
            ck_assert(kiln_schedule_system_info_get(s, i, &info));
            ck_assert(!info.removing);
        }
        if (refused == 0) {
            ck_assert_int_eq(r, KILN_OK);
            whole = true;
        } else if (fp.own_failures == 0) {
            /* the frame's own request was refused (a buffer landing): the run says so */
            ck_assert_msg(r == KILN_ERR_OUT_OF_MEMORY, "grant %d: a refused request went unreported",
                          (int)grant);
            ck_assert_ptr_nonnull(strstr(kiln_world_error(W), "out of memory"));
        }
    }
    ck_assert(whole);
    /* the next frame is whole: 2 spawns, the resource, 2 events of this frame */
    int64_t entities = kiln_entity_count(W);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(W), entities + 2);
    ck_assert_ptr_nonnull(kiln_resource_get(W, fp.pos));
    ck_assert_int_ge(kiln_event_count(W, fp.hit), 2);
    kiln_schedule_destroy(s);
}

/* ------------------------------------------------------------------------------------------ */
/* hundreds of systems                                                                        */
/* ------------------------------------------------------------------------------------------ */

#define MANY 300

/* Each system stamps when it starts and ends from one shared clock of steps. */
typedef struct stamp {
    atomic_long start, end;
    atomic_int runs;
} stamp;

static atomic_long CLOCK;
static stamp STAMPS[MANY];

static void stamped(const kiln_system_ctx *ctx) {
    stamp *s = ctx->user;
    atomic_store(&s->start, atomic_fetch_add(&CLOCK, 1));
    atomic_fetch_add(&s->runs, 1);
    atomic_store(&s->end, atomic_fetch_add(&CLOCK, 1));
}

KILN_TEST_GROUP_WITH(many, .setup = fixture_setup, .teardown = fixture_teardown, .timeout = 60);

KILN_TEST(many, three_hundred_systems_on_a_pool_keep_every_order_and_conflict) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    kiln_component comps[3] = {F.p, F.q, F.r};
    char names[MANY][16];
    for (int i = 0; i < MANY; i++) snprintf(names[i], sizeof names[i], "s%d", i);
    for (int i = 0; i < MANY; i++) {
        kiln_system_desc d = {.name = names[i], .run = stamped, .user = &STAMPS[i],
                              .main_thread = i % 7 == 0};
        if (i % 3 == 0) d.writes[0] = comps[i % 9 / 3]; /* conflicts with its kind */
        else d.reads[0] = comps[i % 3];
        if (i % 10 == 5) d.after[0] = names[i - 5];       /* a backward order */
        if (i % 10 == 6 && i + 4 < MANY) d.before[0] = names[i + 4]; /* a forward one, unknown yet */
        add_system(s, d);
    }
    ck_assert_int_gt(kiln_schedule_stage_count(s), 1);
    for (int frame = 0; frame < 3; frame++) {
        atomic_store(&CLOCK, 0);
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        for (int i = 0; i < MANY; i++) {
            ck_assert_int_eq(atomic_load(&STAMPS[i].runs), frame + 1);
            if (i % 10 == 5) ck_assert_int_gt(STAMPS[i].start, STAMPS[i - 5].end);
            if (i % 10 == 6 && i + 4 < MANY) ck_assert_int_gt(STAMPS[i + 4].start, STAMPS[i].end);
            /* a writer and every earlier system touching its component never overlap */
            for (int j = 0; j < i; j++) {
                bool conflict = (i % 3 == 0 || j % 3 == 0) &&
                                (i % 3 == 0 ? comps[i % 9 / 3] : comps[i % 3]) ==
                                    (j % 3 == 0 ? comps[j % 9 / 3] : comps[j % 3]);
                if (conflict) ck_assert_int_gt(STAMPS[i].start, STAMPS[j].end);
            }
        }
    }
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
}

/* A system's unmatched kiln_defer_end is refused at the call: see test_stage_refusals.c. */

/* ------------------------------------------------------------------------------------------ */
/* a schedule destroyed while its systems' finis use it                                       */
/* ------------------------------------------------------------------------------------------ */

typedef struct fini_log {
    kiln_schedule *s;
    int finis[4];          /* per system a..d: times its fini ran */
    kiln_result removed;   /* what b's fini got removing a */
    int32_t found_c;       /* what b's fini found for c */
    kiln_result added;     /* what d's fini got adding e */
} fini_log;

static fini_log FL;

static void fini_a(kiln_world *w, void *u) { (void)w, (void)u, FL.finis[0]++; }
static void fini_c(kiln_world *w, void *u) { (void)w, (void)u, FL.finis[2]++; }

/* b's fini removes a (already gone) and looks for c */
static void fini_b(kiln_world *w, void *u) {
    (void)w, (void)u;
    FL.finis[1]++;
    FL.removed = kiln_schedule_remove(FL.s, "a");
    FL.found_c = kiln_schedule_find(FL.s, "c");
}

static void fini_e(kiln_world *w, void *u) { (void)w, (void)u, FL.finis[3] += 10; }

/* d's fini adds a system e, whose own fini then runs too */
static void fini_d(kiln_world *w, void *u) {
    (void)w, (void)u;
    FL.finis[3]++;
    FL.added = kiln_schedule_add(FL.s, &(kiln_system_desc){.name = "e", .run = noop, .fini = fini_e});
}

KILN_TEST_GROUP_WITH(teardown, .setup = memory_setup, .teardown = memory_teardown, .timeout = 30);

KILN_TEST(teardown, finis_that_remove_find_and_add_systems_while_the_schedule_dies_run_once) {
    memset(&FL, 0, sizeof FL);
    FL.s = kiln_schedule_create(W, NULL);
    ck_assert_ptr_nonnull(FL.s);
    add_system(FL.s, (kiln_system_desc){.name = "a", .run = noop, .fini = fini_a});
    add_system(FL.s, (kiln_system_desc){.name = "b", .run = noop, .fini = fini_b});
    add_system(FL.s, (kiln_system_desc){.name = "c", .run = noop, .fini = fini_c});
    add_system(FL.s, (kiln_system_desc){.name = "d", .run = noop, .fini = fini_d});
    ck_assert_int_eq(kiln_schedule_run(FL.s, 0.0), KILN_OK);
    kiln_schedule_destroy(FL.s);
    ck_assert_int_eq(FL.finis[0], 1);
    ck_assert_int_eq(FL.finis[1], 1);
    ck_assert_int_eq(FL.finis[2], 1);
    ck_assert_int_eq(FL.finis[3], 11); /* d's, then e's */
    /* the dying schedule has no systems left to find or remove */
    ck_assert_int_eq(FL.removed, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(FL.found_c, -1);
    ck_assert_int_eq(FL.added, KILN_OK);
}

/* ------------------------------------------------------------------------------------------ */
/* system info read while the systems run                                                     */
/* ------------------------------------------------------------------------------------------ */

static kiln_schedule *WATCHED;

static void nap(const kiln_system_ctx *ctx) {
    (void)ctx;
    test_spin_ns(300 * 1000);
}

/* A main-thread overlay polling every system's counters while the workers beside it run. */
static void watch(const kiln_system_ctx *ctx) {
    int64_t *polls = ctx->user;
    int64_t until = test_now_ns() + 600 * 1000;
    while (test_now_ns() < until) {
        for (int32_t i = 0; i < 3; i++) {
            kiln_system_info info;
            if (kiln_schedule_system_info_get(WATCHED, i, &info) && info.runs >= 0) (*polls)++;
        }
    }
}

KILN_TEST(many, a_main_thread_system_may_read_the_info_of_systems_running_beside_it) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    WATCHED = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    int64_t polls = 0;
    add_system(WATCHED, (kiln_system_desc){.name = "a", .run = nap});
    add_system(WATCHED, (kiln_system_desc){.name = "b", .run = nap});
    add_system(WATCHED, (kiln_system_desc){.name = "watch", .run = watch, .user = &polls,
                                           .main_thread = true});
    ck_assert_int_eq(kiln_schedule_stage_count(WATCHED), 1);
    for (int frame = 0; frame < 5; frame++) ck_assert_int_eq(kiln_schedule_run(WATCHED, 0.0), KILN_OK);
    ck_assert_int_gt(polls, 0);
    for (int32_t i = 0; i < 3; i++) {
        kiln_system_info info;
        ck_assert(kiln_schedule_system_info_get(WATCHED, i, &info));
        ck_assert_int_eq(info.runs, 5);
        ck_assert_int_ge(info.total_ns, info.last_ns);
    }
    kiln_schedule_destroy(WATCHED);
    kiln_jobs_destroy(jobs);
}

/* The tick is the frame's own too: advancing it from a shared stage is refused (test_stage_refusals.c). */
static void advance(const kiln_system_ctx *ctx) { kiln_tick_advance(ctx->world); }

KILN_TEST(nested_runs, an_exclusive_system_may_advance_the_tick) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    add_system(s, (kiln_system_desc){.name = "ticker", .run = advance, .exclusive = true});
    kiln_tick before = kiln_tick_current(F.world);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_uint_eq(kiln_tick_current(F.world), before + 2);
    kiln_schedule_destroy(s);
}
