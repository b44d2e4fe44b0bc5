/* test_stage_refusals.c: Check suite for misuse refused in every build, release included: registering
 * off a running stage's thread, the frame's own steps from a running system, unbalanced defer ends. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "refusal_fixture.h"
#include "test_registry.h"
#include "test_support.h"

static refusal_fixture F;

static void setup(void) { refusal_fixture_setup(&F); }
static void teardown(void) { refusal_fixture_teardown(&F); }

static void idle(const kiln_system_ctx *ctx) { (void)ctx; }

/* Runs one frame of fn (main_thread or a worker system) beside an idle worker system, so that
 * the stage is shared, on a pool of two workers. */
static kiln_result run_stage(kiln_system_fn fn, bool main_thread) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "caller", .run = fn,
                                                             .main_thread = main_thread}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "idle", .run = idle}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    kiln_result r = kiln_schedule_run(s, 0.0);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    return r;
}

KILN_TEST_GROUP_WITH(registration, .setup = setup, .teardown = teardown, .timeout = 60);

/* ------------------------------------------------------------------------------------------ */
/* registering from a thread other than the stage's                                           */
/* ------------------------------------------------------------------------------------------ */

enum { CALLS = 5 };
static kiln_result got[CALLS];
static char messages[CALLS][320];

/* Each registering call once, every one refused: the registries they grow are read by every
 * thread without a lock, so only the stage's thread (a main_thread system) may write them. */
static void register_everything(void) {
    kiln_component c = 0;
    kiln_event_type ev = {0};
    kiln_query *q = NULL;
    got[0] = kiln_component_register(F.world, &(kiln_component_desc){.name = "Late", .size = 4}, &c);
    snprintf(messages[0], sizeof messages[0], "%s", kiln_world_error(F.world));
    got[1] = kiln_event_register(F.world, &(kiln_component_desc){.name = "Late", .size = 4}, &ev);
    snprintf(messages[1], sizeof messages[1], "%s", kiln_world_error(F.world));
    got[2] = kiln_query_create(F.world, &(kiln_query_desc){.with = {F.a}}, &q);
    snprintf(messages[2], sizeof messages[2], "%s", kiln_world_error(F.world));
    kiln_query_destroy(F.query);
    got[3] = strstr(kiln_world_error(F.world), "kiln_query_destroy: ") ? KILN_ERR_INVALID_ARGUMENT : KILN_OK;
    snprintf(messages[3], sizeof messages[3], "%s", kiln_world_error(F.world));
    got[4] = kiln_random_init(F.world);
    snprintf(messages[4], sizeof messages[4], "%s", kiln_world_error(F.world));
}

static void assert_all_refused(void) {
    static const char *const calls[CALLS] = {"kiln_component_register", "kiln_event_register",
                                             "kiln_query_create", "kiln_query_destroy", "kiln_random_init"};
    for (int i = 0; i < CALLS; i++) {
        char want[320];
        snprintf(want, sizeof want, "%s: called from a worker system, job or thread while a schedule runs a "
                 "stage; nothing was changed: register types and make or destroy queries before the run or from "
                 "a main_thread system", calls[i]);
        ck_assert_msg(got[i] == KILN_ERR_INVALID_ARGUMENT, "%s gave %d", calls[i], got[i]);
        ck_assert_str_eq(messages[i], want);
    }
    refusal_fixture_unchanged(&F);
}

static void *register_on_thread(void *arg) {
    (void)arg;
    register_everything();
    return NULL;
}

static void start_registering_thread(const kiln_system_ctx *ctx) {
    (void)ctx;
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, register_on_thread, NULL), 0);
    ck_assert_int_eq(pthread_join(thread, NULL), 0);
}

KILN_TEST(registration, a_thread_a_system_started_registering_while_a_stage_runs_is_refused_changing_nothing) {
    ck_assert_int_eq(run_stage(start_registering_thread, false), KILN_OK);
    assert_all_refused();
    /* outside the run each works */
    kiln_component c;
    ck_assert_int_eq(kiln_component_register(F.world, &(kiln_component_desc){.name = "Late", .size = 4}, &c),
                     KILN_OK);
    ck_assert_int_eq(kiln_random_init(F.world), KILN_OK);
}

static void job_registers(void *arg) {
    (void)arg;
    register_everything();
}

/* A job of the schedule's pool, on a worker or taken up by the stage's own thread as the
 * main_thread system waits for it: refused wherever it runs. */
static void submit_registering_job(const kiln_system_ctx *ctx) {
    kiln_counter counter = {0};
    ck_assert_int_eq(kiln_jobs_submit(ctx->jobs, &(kiln_job){job_registers, NULL}, 1, &counter), KILN_OK);
    kiln_jobs_wait(ctx->jobs, &counter);
}

KILN_TEST(registration, a_job_a_main_thread_system_waits_for_may_not_register) {
    ck_assert_int_eq(run_stage(submit_registering_job, true), KILN_OK);
    assert_all_refused();
}

static kiln_result main_thread_got[3];

static void register_on_the_stages_thread(const kiln_system_ctx *ctx) {
    kiln_component c;
    kiln_query *q = NULL;
    main_thread_got[0] = kiln_component_register(ctx->world, &(kiln_component_desc){.name = "Late", .size = 4}, &c);
    main_thread_got[1] = kiln_query_create(ctx->world, &(kiln_query_desc){.with = {c}}, &q);
    kiln_query_destroy(q);
    main_thread_got[2] = kiln_random_init(ctx->world);
}

KILN_TEST(registration, a_main_thread_system_may_register_while_workers_run) {
    ck_assert_int_eq(run_stage(register_on_the_stages_thread, true), KILN_OK);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(main_thread_got[i], KILN_OK);
    ck_assert_uint_ne(kiln_component_lookup(F.world, "Late"), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* the frame's own steps from a running system                                                */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(frame_steps, .setup = setup, .teardown = teardown, .timeout = 60);

static kiln_result step_result;
static kiln_tick tick_seen[2];
static int64_t events_seen[2];
static bool deferred_after;
static char step_message[320];

static void update_events(const kiln_system_ctx *ctx) {
    events_seen[0] = kiln_event_count(ctx->world, F.hit);
    kiln_events_update(ctx->world);
    snprintf(step_message, sizeof step_message, "%s", kiln_world_error(ctx->world));
    events_seen[1] = kiln_event_count(ctx->world, F.hit);
}

/* The event update swaps the buffers systems beside read: refused, the events stay. */
KILN_TEST(frame_steps, updating_events_from_a_running_system_is_refused_keeping_the_events) {
    ck_assert_int_eq(kiln_event_emit(F.world, F.hit, &(int32_t){1}), KILN_OK);
    ck_assert_int_eq(run_stage(update_events, true), KILN_OK);
    ck_assert_int_eq(events_seen[0], 1);
    ck_assert_int_eq(events_seen[1], 1);
    ck_assert_str_eq(step_message, "kiln_events_update: called from a running system that is not exclusive "
                                   "(systems beside it read events); nothing was changed");
}

static void advance_tick(const kiln_system_ctx *ctx) {
    tick_seen[0] = kiln_tick_advance(ctx->world);
    snprintf(step_message, sizeof step_message, "%s", kiln_world_error(ctx->world));
    tick_seen[1] = kiln_tick_current(ctx->world);
}

/* Workers beside stamp their writes with the tick: refused (0), the tick stays. */
KILN_TEST(frame_steps, advancing_the_tick_from_a_running_system_is_refused_keeping_the_tick) {
    kiln_tick before = kiln_tick_current(F.world);
    ck_assert_int_eq(run_stage(advance_tick, false), KILN_OK);
    ck_assert_uint_eq(tick_seen[0], 0);
    ck_assert_uint_eq(tick_seen[1], before + 1); /* the frame's own advance */
    ck_assert_uint_eq(kiln_tick_current(F.world), before + 1);
    ck_assert_str_eq(step_message, "kiln_tick_advance: called from a running system that is not exclusive "
                                   "(systems beside it stamp their writes with the tick); the tick stays");
}

static int64_t pending_after;

static void apply_a_buffer(const kiln_system_ctx *ctx) {
    kiln_commands *cmd = kiln_commands_create(ctx->world);
    kiln_entity placeholder;
    ck_assert_int_eq(kiln_commands_spawn(cmd, &placeholder), KILN_OK);
    step_result = kiln_commands_apply(cmd, ctx->world, NULL);
    snprintf(step_message, sizeof step_message, "%s", kiln_world_error(ctx->world));
    pending_after = kiln_commands_count(cmd);
    kiln_commands_destroy(cmd);
}

/* A buffer applied from a worker would change the world under the systems beside it. */
KILN_TEST(frame_steps, applying_a_buffer_from_a_running_system_is_refused_applying_nothing) {
    ck_assert_int_eq(run_stage(apply_a_buffer, false), KILN_OK);
    ck_assert_int_eq(step_result, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(pending_after, 1);
    ck_assert_str_eq(step_message, "kiln_commands_apply: called from a running system that is not exclusive "
                                   "(systems beside it read the world); nothing was applied: record into "
                                   "ctx->commands");
    refusal_fixture_unchanged(&F);
}

/* A system's unmatched end would close the schedule's own section: workers would then change
 * the world at once, and the end would apply the world's queue mid-stage. */
static void unmatched_end_then_spawn(const kiln_system_ctx *ctx) {
    step_result = kiln_defer_end(ctx->world);
    snprintf(step_message, sizeof step_message, "%s", kiln_world_error(ctx->world));
    deferred_after = kiln_is_deferred(ctx->world);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(ctx->world, &e), KILN_OK);
    tick_seen[0] = kiln_is_alive(ctx->world, e); /* queued, not yet alive */
}

KILN_TEST(frame_steps, a_systems_unmatched_defer_end_is_refused_and_the_stage_stays_deferred) {
    ck_assert_int_eq(run_stage(unmatched_end_then_spawn, true), KILN_OK);
    ck_assert_int_eq(step_result, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(step_message, "kiln_defer_end: called without kiln_defer_begin from a running system that "
                                   "is not exclusive (the open section is the schedule's); nothing was changed");
    ck_assert(deferred_after);
    ck_assert_uint_eq(tick_seen[0], 0);
    ck_assert_int_eq(kiln_entity_count(F.world), 2); /* the spawn landed at the stage's end */
    ck_assert(!kiln_is_deferred(F.world));
}

/* ------------------------------------------------------------------------------------------ */
/* sections and loops outside a run                                                           */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(sections, .setup = setup, .teardown = teardown);

/* More ends than begins would take the depth below zero, and a later begin would defer nothing. */
KILN_TEST(sections, an_end_without_a_begin_is_refused_and_a_later_begin_still_defers) {
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.world),
                     "kiln_defer_end: no deferred section is open (an end without kiln_defer_begin); nothing was "
                     "changed");
    ck_assert(!kiln_is_deferred(F.world));
    kiln_defer_begin(F.world);
    ck_assert(kiln_is_deferred(F.world));
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(F.world, &e), KILN_OK);
    ck_assert(!kiln_is_alive(F.world, e));
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    ck_assert(kiln_is_alive(F.world, e));
}

/* Dropping the queue while a section is open would take changes the section still counts on. */
KILN_TEST(sections, clearing_the_queue_while_deferred_is_refused_dropping_nothing) {
    kiln_defer_begin(F.world);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(F.world, &e), KILN_OK);
    kiln_defer_clear(F.world);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_defer_clear: the world is deferred (a section, an iteration "
                                                "or a running stage is open); nothing was dropped");
    ck_assert(kiln_is_deferred(F.world));
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    ck_assert(kiln_is_alive(F.world, e));
}

/* The deferred world covers the plain API in a loop; a raw buffer applied there would move
 * rows under the iteration. */
KILN_TEST(sections, applying_a_buffer_while_a_query_iterates_is_refused_applying_nothing) {
    kiln_commands *cmd = kiln_commands_create(F.world);
    ck_assert_ptr_nonnull(cmd);
    kiln_entity p;
    ck_assert_int_eq(kiln_commands_spawn(cmd, &p), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, p, F.a, &(int32_t){8}), KILN_OK);
    kiln_iter it;
    kiln_query_iter(F.query, &it);
    int rows = 0;
    while (kiln_query_next(&it)) {
        rows += it.count;
        ck_assert_int_eq(kiln_commands_apply(cmd, F.world, NULL), KILN_ERR_INVALID_ARGUMENT);
    }
    ck_assert_int_eq(rows, 1);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_commands_apply: a query of the world is iterating (its rows "
                                                "would move under it); nothing was applied: apply after the loop");
    ck_assert_int_eq(kiln_commands_count(cmd), 2);
    refusal_fixture_unchanged(&F);
    ck_assert_int_eq(kiln_commands_apply(cmd, F.world, NULL), KILN_OK);
    ck_assert_int_eq(kiln_query_count(F.query), 2);
    kiln_commands_destroy(cmd);
}

/* Destroyed mid-loop, the iteration would read the freed query. */
KILN_TEST(sections, destroying_a_query_while_it_iterates_is_refused_keeping_it) {
    kiln_iter it;
    kiln_query_iter(F.query, &it);
    ck_assert(kiln_query_next(&it));
    kiln_query_destroy(F.query);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_query_destroy: the query is iterating (finish the loop, or "
                                                "kiln_iter_fini, first); nothing was destroyed");
    ck_assert_int_eq(it.count, 1);
    ck_assert(!kiln_query_next(&it));
    ck_assert_int_eq(kiln_query_count(F.query), 1); /* teardown destroys it */
}
