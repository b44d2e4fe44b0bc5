/* test_release_refusals.c: Check suite linked with the library built as a release build builds it (NDEBUG):
 * a worker system's misuse a debug build aborts on (declared access) is refused there, changing nothing. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "test_registry.h"
#include "test_support.h"

typedef struct fixture {
    kiln_world *world;
    kiln_component a;
    kiln_query *query;
    kiln_entity e;
} fixture;

static fixture F;

static void setup(void) {
    memset(&F, 0, sizeof F);
    F.world = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(F.world);
    ck_assert_int_eq(kiln_component_register(F.world, &(kiln_component_desc){.name = "A", .size = 4}, &F.a),
                     KILN_OK);
    ck_assert_int_eq(kiln_query_create(F.world, &(kiln_query_desc){.with = {F.a}}, &F.query), KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(F.world, &F.a, (const void *[]){&(int32_t){7}}, 1, &F.e), KILN_OK);
}

static void teardown(void) {
    kiln_query_destroy(F.query);
    kiln_world_destroy(F.world);
}

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
    ck_assert_int_eq(kiln_component_count(F.world), 1);
    ck_assert_uint_eq(kiln_event_lookup(F.world, "Late").id, 0);
    ck_assert_int_eq(kiln_query_count(F.query), 1);
    ck_assert_int_eq(kiln_entity_count(F.world), 1);
    ck_assert_int_eq(*(const int32_t *)kiln_get(F.world, F.e, F.a), 7);
}

/* The same library without a schedule: what a release build does with asserted misuse outside a run. */
KILN_TEST(release, an_unbalanced_defer_end_is_refused_leaving_the_depth_at_zero) {
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_ERR_INVALID_ARGUMENT);
    kiln_defer_begin(F.world);
    ck_assert(kiln_is_deferred(F.world));
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(F.world, &e), KILN_OK);
    ck_assert(!kiln_is_alive(F.world, e));
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    ck_assert(kiln_is_alive(F.world, e));
}
