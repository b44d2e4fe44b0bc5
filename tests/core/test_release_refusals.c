/* test_release_refusals.c: Check suite linked with the library built as a release build builds it (NDEBUG):
 * misuse a debug build aborts on (declared access, destroying what is in use) is refused there, changing nothing. */
#include <check.h>
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

enum { CALLS = 7 };
static const char *const calls[CALLS] = {"kiln_component_register", "kiln_event_register", "kiln_query_create",
                                         "kiln_query_destroy", "kiln_random_init", "kiln_spawn", "kiln_add"};
static kiln_result got[CALLS];
static char messages[CALLS][320];

static void keep(int i, kiln_result r) {
    got[i] = r;
    snprintf(messages[i], sizeof messages[i], "%s", kiln_world_error(F.world));
}

/* A worker system (declaring A written: no debug check would pass it either way) registering,
 * making and destroying a query, initialising an addon and changing the world through it. */
static void misbehave(const kiln_system_ctx *ctx) {
    kiln_world *w = ctx->world;
    kiln_component c = 0;
    kiln_event_type ev = {0};
    kiln_query *q = NULL;
    kiln_entity e = KILN_NULL_ENTITY;
    keep(0, kiln_component_register(w, &(kiln_component_desc){.name = "Late", .size = 4}, &c));
    keep(1, kiln_event_register(w, &(kiln_component_desc){.name = "Late", .size = 4}, &ev));
    keep(2, kiln_query_create(w, &(kiln_query_desc){.with = {F.a}}, &q));
    kiln_query_destroy(F.query);
    keep(3, strstr(kiln_world_error(w), "kiln_query_destroy: ") ? KILN_ERR_INVALID_ARGUMENT : KILN_OK);
    keep(4, kiln_random_init(w));
    keep(5, kiln_spawn(w, &e));
    keep(6, kiln_add(w, F.e, F.a, &(int32_t){9}));
}

KILN_TEST_GROUP_WITH(release, .setup = setup, .teardown = teardown, .timeout = 60);

KILN_TEST(release, a_worker_system_registering_or_changing_the_world_is_refused_changing_nothing) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "mod", .run = misbehave, .writes = {F.a}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "idle", .run = idle}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    for (int i = 0; i < CALLS; i++) {
        char want[128];
        snprintf(want, sizeof want, "%s: called from a worker system, job or thread while a schedule runs a stage",
                 calls[i]);
        ck_assert_msg(got[i] == KILN_ERR_INVALID_ARGUMENT, "%s gave %d", calls[i], got[i]);
        ck_assert_msg(strncmp(messages[i], want, strlen(want)) == 0, "%s", messages[i]);
    }
    refusal_fixture_unchanged(&F);
}

/* ------------------------------------------------------------------------------------------ */
/* destroying what is still in use (a debug build asserts)                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct destroyer {
    kiln_schedule *schedule;
    char messages[3][256];
} destroyer;

/* A system destroying its own buffer, its schedule and its world mid-run: each refused, so the
 * run goes on with them (the buffer lands at the end of the stage). */
static void destroy_everything(const kiln_system_ctx *ctx) {
    destroyer *d = ctx->user;
    kiln_entity placeholder;
    ck_assert_int_eq(kiln_commands_spawn(ctx->commands, &placeholder), KILN_OK);
    kiln_commands_destroy(ctx->commands);
    snprintf(d->messages[0], sizeof d->messages[0], "%s", kiln_world_error(ctx->world));
    kiln_schedule_destroy(d->schedule);
    snprintf(d->messages[1], sizeof d->messages[1], "%s", kiln_world_error(ctx->world));
    kiln_world_destroy(ctx->world);
    snprintf(d->messages[2], sizeof d->messages[2], "%s", kiln_world_error(ctx->world));
}

KILN_TEST(release, a_system_destroying_its_buffer_schedule_or_world_is_refused_and_the_run_goes_on) {
    static destroyer d;
    memset(&d, 0, sizeof d);
    d.schedule = kiln_schedule_create(F.world, NULL);
    ck_assert_int_eq(kiln_schedule_add(d.schedule, &(kiln_system_desc){.name = "wrecker", .run = destroy_everything,
                                                                       .user = &d, .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(d.schedule, 0.0), KILN_OK);
    ck_assert_str_eq(d.messages[0], "kiln_commands_destroy: the buffer is a system's own (ctx->commands), which its "
                                    "schedule destroys; nothing was destroyed");
    ck_assert_str_eq(d.messages[1], "kiln_schedule_destroy: the schedule is running (a call from one of its "
                                    "systems); nothing was destroyed");
    ck_assert_str_eq(d.messages[2], "kiln_world_destroy: a schedule of the world is running (a call from a system); "
                                    "nothing was destroyed");
    ck_assert_int_eq(kiln_entity_count(F.world), 2);
    ck_assert_int_eq(kiln_schedule_run(d.schedule, 0.0), KILN_OK); /* all still whole */
    ck_assert_int_eq(kiln_entity_count(F.world), 3);
    kiln_schedule_destroy(d.schedule);
}

KILN_TEST(release, destroying_a_world_that_has_a_schedule_or_a_loop_is_refused_keeping_it) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    ck_assert_ptr_nonnull(s);
    kiln_world_destroy(F.world);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_world_destroy: the world still has schedules "
                                                "(kiln_schedule_destroy them first); nothing was destroyed");
    kiln_schedule_destroy(s);
    kiln_iter it;
    kiln_query_iter(F.query, &it);
    ck_assert(kiln_query_next(&it));
    kiln_world_destroy(F.world);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_world_destroy: a query of the world iterates; nothing was "
                                                "destroyed");
    ck_assert(!kiln_query_next(&it));
    ck_assert_int_eq(*(const int32_t *)kiln_get(F.world, F.e, F.a), 7); /* teardown destroys it */
}

/* ------------------------------------------------------------------------------------------ */
/* arguments out of bounds (a debug build asserts on most; every build refuses them now)      */
/* ------------------------------------------------------------------------------------------ */

static void error_is(const char *want) { ck_assert_str_eq(kiln_world_error(F.world), want); }

KILN_TEST(release, a_range_or_column_tick_outside_the_chunk_or_query_is_refused_changing_nothing) {
    kiln_tick before = kiln_changed_tick(F.world, F.e, F.a);
    kiln_iter it, view;
    kiln_query_iter(F.query, &it);
    ck_assert(kiln_query_next(&it));
    kiln_iter_range(&it, 0, 5000, &view);
    error_is("kiln_iter_range: rows [0, 5000) are not within the chunk (1 rows)");
    ck_assert_int_eq(view.count, 0);
    kiln_iter_range(&it, -1, 1, &view);
    error_is("kiln_iter_range: rows [-1, 1) are not within the chunk (1 rows)");
    ck_assert_int_eq(view.count, 0);
    ck_assert_uint_eq(kiln_iter_column_tick(&it, -1000), 0);
    error_is("kiln_iter_column_tick: term -1000 is not within the query's 1");
    ck_assert_int_eq(kiln_iter_fini(&it), KILN_OK);
    kiln_iter_range(&it, 0, 1, &view);
    error_is("kiln_iter_range: it has no current chunk");
    ck_assert_int_eq(view.count, 0);
    ck_assert_uint_eq(kiln_changed_tick(F.world, F.e, F.a), before);
    refusal_fixture_unchanged(&F);
}

KILN_TEST(release, despawn_unless_with_a_negative_count_or_no_keep_list_is_refused_despawning_nothing) {
    ck_assert_int_eq(kiln_despawn_unless(F.world, F.e, &F.a, -100000), KILN_ERR_INVALID_ARGUMENT);
    error_is("kiln_despawn_unless: count -100000 is negative");
    kiln_defer_begin(F.world);
    ck_assert_int_eq(kiln_despawn_unless(F.world, F.e, NULL, 2), KILN_ERR_INVALID_ARGUMENT);
    error_is("kiln_despawn_unless: keep is NULL with count 2");
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    refusal_fixture_unchanged(&F);
}

KILN_TEST(release, a_null_dest_with_a_capacity_is_refused_writing_nothing) {
    ck_assert_int_eq(kiln_entity_components(F.world, F.e, NULL, 4), -1);
    error_is("kiln_entity_components: dest is NULL with capacity 4; nothing was written");
    ck_assert_int_eq(kiln_world_entities(F.world, NULL, 3), -1);
    error_is("kiln_world_entities: dest is NULL with capacity 3; nothing was written");
    ck_assert_int_eq(kiln_entity_components(F.world, F.e, NULL, 0), 1); /* sizing stays allowed */
    ck_assert_int_eq(kiln_world_entities(F.world, NULL, 0), 1);
    refusal_fixture_unchanged(&F);
}

KILN_TEST(release, submitting_a_negative_count_of_jobs_is_refused_leaving_the_counter) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = KILN_JOBS_INLINE});
    ck_assert_ptr_nonnull(jobs);
    kiln_counter counter = {0};
    ck_assert_int_eq(kiln_jobs_submit(jobs, NULL, -2, &counter), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_jobs_submit(jobs, NULL, 3, &counter), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(counter.pending, 0);
    kiln_jobs_destroy(jobs);
}

KILN_TEST(release, get_many_through_a_stale_getter_is_refused_writing_nulls) {
    kiln_getter g;
    ck_assert_int_eq(kiln_getter_init(F.world, F.a, &g), KILN_OK);
    kiln_entity other;
    ck_assert_int_eq(kiln_spawn_with(F.world, &F.a, (const void *[]){&(int32_t){1}}, 1, &other), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.world, other), KILN_OK);
    const void *dest[2] = {&g, &g};
    ck_assert_int_eq(kiln_getter_get_many(&g, (kiln_entity[]){F.e, F.e}, 2, dest), 0);
    ck_assert_ptr_null(dest[0]);
    ck_assert_ptr_null(dest[1]);
    error_is("kiln_getter_get_many: the getter is stale (its world changed structure since kiln_getter_init); "
             "every dest is NULL");
    kiln_getter_fini(&g);
    refusal_fixture_unchanged(&F);
}
