/* test_schedule_access.c: Check suite for the debug-build check of C systems' declared access:
 * an undeclared read or write, or a worker system changing the world, aborts naming both. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "schedule_fixture.h"
#include "test_registry.h"
#include "test_support.h"

static schedule_fixture F;
static kiln_entity E; /* has Position and Velocity */

static void setup(void) {
    schedule_fixture_setup(&F);
    ck_assert_int_eq(kiln_spawn_with(F.world, (kiln_component[]){F.p, F.q},
                                     (const void *[]){&(test_position){1, 2},
                                                      &(test_velocity){3, 4}},
                                     2, &E),
                     KILN_OK);
}

static void teardown(void) { schedule_fixture_teardown(&F); }

/* The message an abort must carry: the SIGABRT handler lets the abort proceed only when the
 * world's error (what the default panic printed) holds it, else the test exits with 3. */
static const char *expected;

static void on_abort(int sig) {
    (void)sig;
    if (expected && strstr(kiln_world_error(F.world), expected)) {
        signal(SIGABRT, SIG_DFL);
        return; /* abort raises again, now by default: the test dies of SIGABRT */
    }
    static const char msg[] = "abort without the expected message\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(3);
}

/* Runs one frame of a schedule holding the single system desc (on a pool of one worker),
 * expecting an abort with message. The suites build with assertions on, so the checks are
 * compiled in (KILN_ACCESS_CHECKS follows NDEBUG). */
static void run_expecting_abort(kiln_system_desc desc, const char *message) {
    expected = message;
    signal(SIGABRT, on_abort);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    add_system(s, desc);
    kiln_schedule_run(s, 0.0);
    ck_abort_msg("the run finished: expected \"%s\"", message);
}

/* ------------------------------------------------------------------------------------------ */
/* what aborts                                                                                */
/* ------------------------------------------------------------------------------------------ */

static void read_velocity(const kiln_system_ctx *ctx) { kiln_get(ctx->world, E, F.q); }

static void read_velocity_many(const kiln_system_ctx *ctx) {
    const void *value;
    kiln_get_many(ctx->world, &E, 1, F.q, &value);
}

static void write_position(const kiln_system_ctx *ctx) { kiln_get_mut(ctx->world, E, F.p); }

static void add_rotation(const kiln_system_ctx *ctx) {
    kiln_add(ctx->world, E, F.r, &(test_position){0, 0});
}

static void despawn_it(const kiln_system_ctx *ctx) { kiln_despawn(ctx->world, E); }

static void iterate_position_velocity(const kiln_system_ctx *ctx) {
    kiln_query *q = ctx->user;
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) {
    }
}

KILN_TEST_GROUP_WITH(misuse, .setup = setup, .teardown = teardown, .timeout = 30);

KILN_TEST_SIGNAL(misuse, reading_an_undeclared_component_aborts_naming_system_and_component,
                 SIGABRT) {
    run_expecting_abort((kiln_system_desc){.name = "peek", .run = read_velocity,
                                           .reads = {F.p}},
                        "kiln_get: system 'peek' reads Velocity without declaring it in reads "
                        "or writes");
}

KILN_TEST_SIGNAL(misuse, get_many_of_an_undeclared_component_aborts_naming_both, SIGABRT) {
    run_expecting_abort((kiln_system_desc){.name = "gather", .run = read_velocity_many,
                                           .reads = {F.p}},
                        "kiln_get_many: system 'gather' reads Velocity without declaring it in "
                        "reads or writes");
}

KILN_TEST_SIGNAL(misuse, writing_a_component_declared_only_as_read_aborts, SIGABRT) {
    run_expecting_abort((kiln_system_desc){.name = "scribble", .run = write_position,
                                           .reads = {F.p}},
                        "kiln_get_mut: system 'scribble' writes Position without declaring it "
                        "in writes");
}

KILN_TEST_SIGNAL(misuse, a_worker_system_adding_a_component_aborts, SIGABRT) {
    run_expecting_abort((kiln_system_desc){.name = "grower", .run = add_rotation,
                                           .writes = {F.r}},
                        "kiln_add: system 'grower' changes the world (Rotation) from a worker "
                        "thread; record it into ctx->commands");
}

KILN_TEST_SIGNAL(misuse, a_worker_system_despawning_aborts_naming_the_entity, SIGABRT) {
    char text[128], eb[24];
    snprintf(text, sizeof text, "kiln_despawn: system 'reaper' changes the world (entity %s)",
             kiln_entity_format(E, eb, sizeof eb));
    run_expecting_abort((kiln_system_desc){.name = "reaper", .run = despawn_it}, text);
}

KILN_TEST_SIGNAL(misuse, iterating_a_query_with_an_undeclared_term_aborts, SIGABRT) {
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(F.world, &(kiln_query_desc){.with = {F.p, F.q}}, &q),
                     KILN_OK);
    run_expecting_abort((kiln_system_desc){.name = "mover", .run = iterate_position_velocity,
                                           .user = q, .writes = {F.p}},
                        "kiln_query_iter: system 'mover' reads Velocity without declaring it");
}

/* Position serves as a resource type here: the system holds its pointer across a removal. */
static void spend_then_write(const kiln_system_ctx *ctx) {
    test_position *held = kiln_resource_get(ctx->world, F.p);
    kiln_resource_remove(ctx->world, F.p, NULL);
    if (held) held->x = 1; /* stale: the value died with the removal */
}

KILN_TEST_SIGNAL(misuse, writing_a_resource_through_a_pointer_kept_over_its_removal_aborts,
                 SIGABRT) {
    ck_assert_int_eq(kiln_resource_set(F.world, F.p, &(test_position){3, 4}), KILN_OK);
    run_expecting_abort((kiln_system_desc){.name = "spender", .run = spend_then_write,
                                           .writes = {F.p}},
                        "kiln_resource_remove: resource Position was written through a pointer "
                        "after it was removed (seen when system 'spender' returned); a "
                        "kiln_resource_get pointer is valid only until the resource is removed");
}

/* Frame 1: keeps the pointer; frame 2: writes through it (another system removed it since). */
static void cache_pointer(const kiln_system_ctx *ctx) {
    test_position **cached = ctx->user;
    if (!*cached) *cached = kiln_resource_get(ctx->world, F.p);
    else (*cached)->y = 2;
}

static void drop_resource(const kiln_system_ctx *ctx) {
    kiln_resource_remove(ctx->world, F.p, NULL);
}

KILN_TEST_SIGNAL(misuse, a_pointer_cached_over_frames_written_after_a_removal_aborts, SIGABRT) {
    ck_assert_int_eq(kiln_resource_set(F.world, F.p, &(test_position){3, 4}), KILN_OK);
    expected = "kiln_resource_remove: resource Position was written through a pointer after it "
               "was removed (seen when system 'cache' returned)";
    signal(SIGABRT, on_abort);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    static test_position *cached;
    add_system(s, (kiln_system_desc){.name = "cache", .run = cache_pointer, .user = &cached,
                                     .writes = {F.p}});
    add_system(s, (kiln_system_desc){.name = "drop", .run = drop_resource, .writes = {F.p},
                                     .after = {"cache"}});
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_ptr_nonnull(cached);
    ck_assert(!kiln_resource_has(F.world, F.p));
    kiln_schedule_run(s, 0.0);
    ck_abort_msg("the second run finished: expected \"%s\"", expected);
}

/* ------------------------------------------------------------------------------------------ */
/* what passes                                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef struct keeper {
    kiln_query *query;   /* Position, Velocity and a tag */
    kiln_component late; /* registered after the system was added */
    int runs;
} keeper;

/* Reads and writes what it declared, iterates a query with a tag term nobody declares, and
 * sets a resource of a type registered after it was added. */
static void within_bounds(const kiln_system_ctx *ctx) {
    keeper *k = ctx->user;
    const test_velocity *v = kiln_get(ctx->world, E, F.q);
    test_position *p = kiln_get_mut(ctx->world, E, F.p);
    if (v && p) p->x += v->x;
    kiln_iter it;
    kiln_query_iter(k->query, &it);
    while (kiln_query_next(&it)) {
    }
    kiln_resource_set(ctx->world, k->late, &(test_position){9, 9});
    k->runs++;
}

/* A main-thread system may change the world: its calls are queued into its own buffer. */
static void main_thread_changes(const kiln_system_ctx *ctx) {
    kiln_add(ctx->world, E, F.r, &(test_position){5, 5});
    kiln_set(ctx->world, E, F.q, &(test_velocity){7, 7});
}

/* An exclusive system may do anything. */
static void anything_goes(const kiln_system_ctx *ctx) {
    kiln_get(ctx->world, E, F.r);
    kiln_remove(ctx->world, E, F.r, NULL);
}

KILN_TEST_GROUP_WITH(allowed, .setup = setup, .teardown = teardown, .timeout = 30);

/* Removes the resource one frame, sets it again the next, each time through fresh pointers. */
static void churn_resource(const kiln_system_ctx *ctx) {
    int *frame = ctx->user;
    if (++*frame % 2) {
        test_position *p = kiln_resource_get(ctx->world, F.p);
        if (p) p->x += 1;
        kiln_resource_remove(ctx->world, F.p, NULL);
        ck_assert_ptr_null(kiln_resource_get(ctx->world, F.p));
    } else {
        kiln_resource_set(ctx->world, F.p, &(test_position){(float)*frame, 0});
        test_position *p = kiln_resource_get(ctx->world, F.p);
        p->y = 1;
    }
}

KILN_TEST(allowed, a_resource_removed_and_set_again_through_fresh_pointers_runs_clean) {
    ck_assert_int_eq(kiln_resource_set(F.world, F.p, &(test_position){0, 0}), KILN_OK);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    int frame = 0;
    add_system(s, (kiln_system_desc){.name = "churn", .run = churn_resource, .user = &frame,
                                     .writes = {F.p}});
    for (int i = 0; i < 6; i++)
        ck_assert_msg(kiln_schedule_run(s, 0.0) == KILN_OK, "%s", kiln_world_error(F.world));
    ck_assert_int_eq(frame, 6);
    const test_position *p = kiln_resource_get(F.world, F.p);
    ck_assert_ptr_nonnull(p);
    ck_assert_float_eq(p->x, 6);
    ck_assert_float_eq(p->y, 1);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
}

KILN_TEST(allowed, declared_access_main_thread_changes_and_exclusive_systems_run_clean) {
    kiln_component tag;
    ck_assert_int_eq(kiln_component_register(F.world, &(kiln_component_desc){.name = "Marked"},
                                             &tag),
                     KILN_OK);
    ck_assert_int_eq(kiln_add(F.world, E, tag, NULL), KILN_OK);
    keeper k = {0};
    ck_assert_int_eq(kiln_query_create(F.world,
                                       &(kiln_query_desc){.with = {F.p, F.q, tag}}, &k.query),
                     KILN_OK);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    add_system(s, (kiln_system_desc){.name = "keeper", .run = within_bounds, .user = &k,
                                     .reads = {F.q}, .writes = {F.p}});
    add_system(s, (kiln_system_desc){.name = "main", .run = main_thread_changes,
                                     .main_thread = true});
    add_system(s, (kiln_system_desc){.name = "boss", .run = anything_goes, .exclusive = true,
                                     .after = {"main"}});
    kiln_component_desc late = test_position_desc();
    late.name = "Late";
    ck_assert_int_eq(kiln_component_register(F.world, &late, &k.late), KILN_OK);

    for (int frame = 0; frame < 3; frame++)
        ck_assert_msg(kiln_schedule_run(s, 0.0) == KILN_OK, "%s", kiln_world_error(F.world));
    ck_assert_int_eq(k.runs, 3);
    ck_assert(!kiln_has(F.world, E, F.r)); /* added by main, removed by boss, each frame */
    ck_assert_ptr_nonnull(kiln_resource_get(F.world, k.late));
    /* outside any system nothing is checked */
    ck_assert_ptr_nonnull(kiln_get(F.world, E, F.q));
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_query_destroy(k.query);
}
