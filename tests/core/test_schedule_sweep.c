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

/* The event update is the frame's own step: from a shared stage it would swap the buffers
 * under systems reading them (debug builds assert). */
static void update_events(const kiln_system_ctx *ctx) { kiln_events_update(ctx->world); }

KILN_TEST_SIGNAL(nested_runs, updating_events_from_a_system_that_is_not_exclusive_asserts,
                 SIGABRT) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    add_system(s, (kiln_system_desc){.name = "swap", .run = update_events, .main_thread = true});
    kiln_schedule_run(s, 0.0);
    ck_abort_msg("kiln_events_update from a main-thread system did not assert");
}

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
