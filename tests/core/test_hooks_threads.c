/* test_hooks_threads.c: Check suite for check hooks (Name's, Parent's) run by a system while other
 * systems run beside it on a pool. A hook reads what its system declared; under ThreadSanitizer (make
 * test-tsan) the hooks must not race with the systems beside them, and a hook whose reads were not declared aborts. */
#include <check.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"
#include "transform_fixture.h"

enum { NAMED = 64, FRAMES = 8 };

typedef struct town {
    scene s;
    kiln_component name;
    kiln_entity named[NAMED], fresh[FRAMES], dead;
    int frame;
    atomic_int wrong; /* calls that answered otherwise than expected */
} town;

static town T;

static kiln_name name_value(const char *prefix, int i) {
    kiln_name n;
    memset(&n, 0, sizeof n);
    snprintf(n.text, sizeof n.text, "%s%d", prefix, i);
    return n;
}

static void setup(void) {
    memset(&T, 0, sizeof T);
    scene_open(&T.s);
    ck_assert_int_eq(kiln_name_init(T.s.world, &T.name), KILN_OK);
    for (int i = 0; i < NAMED; i++) {
        kiln_name n = name_value("citizen", i);
        ck_assert_int_eq(kiln_spawn_with(T.s.world, &T.name, (const void *[]){&n}, 1, &T.named[i]), KILN_OK);
    }
    for (int f = 0; f < FRAMES; f++) ck_assert_int_eq(kiln_spawn(T.s.world, &T.fresh[f]), KILN_OK);
    ck_assert_int_eq(kiln_spawn(T.s.world, &T.dead), KILN_OK);
    ck_assert_int_eq(kiln_despawn(T.s.world, T.dead), KILN_OK);
}

static void teardown(void) { scene_close(&T.s); }

/* A worker system writing every Name in place (the same text again), stamping rows and columns. */
static void rewrite_names(const kiln_system_ctx *ctx) {
    for (int i = 0; i < NAMED; i++) {
        kiln_name *n = kiln_get_mut(ctx->world, T.named[i], T.name);
        if (!n) atomic_fetch_add(&T.wrong, 1);
        else *n = name_value("citizen", i);
    }
}

/* A main-thread system naming this frame's fresh entity: Name's check runs now, on this thread. */
static void name_fresh(const kiln_system_ctx *ctx) {
    kiln_name n = name_value("newcomer", T.frame);
    if (kiln_add(ctx->world, T.fresh[T.frame], T.name, &n) != KILN_OK) atomic_fetch_add(&T.wrong, 1);
}

/* Runs FRAMES frames of the schedule of systems (on a pool of two workers), each frame's number in T.frame. */
static void run_frames(const kiln_system_desc *systems, int count) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *sched = kiln_schedule_create(T.s.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_ptr_nonnull(sched);
    for (int i = 0; i < count; i++) ck_assert_int_eq(kiln_schedule_add(sched, &systems[i]), KILN_OK);
    for (T.frame = 0; T.frame < FRAMES; T.frame++) ck_assert_int_eq(kiln_schedule_run(sched, 0.0), KILN_OK);
    kiln_schedule_destroy(sched);
    kiln_jobs_destroy(jobs);
}

KILN_TEST_GROUP_WITH(hooks_threads, .setup = setup, .teardown = teardown, .timeout = 120);

/* Without the declaration the schedule would run the two side by side, the check reading the Name
 * column (to catch its index up) while the worker writes it. */
KILN_TEST_SIGNAL(hooks_threads, naming_from_a_system_not_declaring_name_beside_a_name_writer_aborts_naming_it,
                 SIGABRT) {
    test_expect_abort("Name's check: system 'namer' reads Name without declaring it");
    kiln_system_desc systems[] = {
        {.name = "rewriter", .run = rewrite_names, .writes = {T.name}},
        {.name = "namer", .run = name_fresh, .main_thread = true},
    };
    run_frames(systems, 2);
    ck_abort_msg("the run finished: expected Name's check to abort");
}

KILN_TEST(hooks_threads, naming_from_a_system_declaring_name_runs_after_the_name_writer_and_lands) {
    kiln_system_desc systems[] = {
        {.name = "rewriter", .run = rewrite_names, .writes = {T.name}},
        {.name = "namer", .run = name_fresh, .main_thread = true, .reads = {T.name}},
    };
    run_frames(systems, 2);
    ck_assert_int_eq(atomic_load(&T.wrong), 0);
    for (int f = 0; f < FRAMES; f++) {
        char text[32];
        snprintf(text, sizeof text, "newcomer%d", f);
        ck_assert_int_eq(kiln_name_lookup(T.s.world, text), T.fresh[f]);
    }
    ck_assert_int_eq(kiln_name_lookup(T.s.world, "citizen7"), T.named[7]);
}

/* A worker looking a name up that no entity has: the look-up catches the index up (reading the
 * column) before it finds nothing, so it too needs the declaration. */
static void look_up_absent(const kiln_system_ctx *ctx) {
    if (kiln_name_lookup(ctx->world, "nobody") != KILN_NULL_ENTITY) atomic_fetch_add(&T.wrong, 1);
}

KILN_TEST_SIGNAL(hooks_threads, looking_a_name_up_from_a_system_not_declaring_name_aborts_naming_it, SIGABRT) {
    test_expect_abort("kiln_name_lookup: system 'seeker' reads Name without declaring it");
    kiln_system_desc systems[] = {
        {.name = "rewriter", .run = rewrite_names, .writes = {T.name}},
        {.name = "seeker", .run = look_up_absent},
    };
    run_frames(systems, 2);
    ck_abort_msg("the run finished: expected kiln_name_lookup to abort");
}

/* A worker setting the Name resource (Name's check on a worker: the index, the records of named
 * entities), beside a main-thread system spawning plain entities (taking slots, writing records). */
static void set_name_resource(const kiln_system_ctx *ctx) {
    kiln_name mine = name_value("town", T.frame), taken = name_value("citizen", T.frame);
    if (kiln_resource_set(ctx->world, T.name, &mine) != KILN_OK) atomic_fetch_add(&T.wrong, 1);
    if (kiln_resource_set(ctx->world, T.name, &taken) != KILN_ERR_INVALID_ARGUMENT) atomic_fetch_add(&T.wrong, 1);
}

static void spawn_plain(const kiln_system_ctx *ctx) {
    for (int i = 0; i < 16; i++)
        if (kiln_spawn(ctx->world, NULL) != KILN_OK) atomic_fetch_add(&T.wrong, 1);
}

KILN_TEST(hooks_threads, a_worker_setting_the_name_resource_beside_a_spawning_system_is_checked_exactly) {
    kiln_system_desc systems[] = {
        {.name = "mayor", .run = set_name_resource, .writes = {T.name}},
        {.name = "spawner", .run = spawn_plain, .main_thread = true},
    };
    run_frames(systems, 2);
    ck_assert_int_eq(atomic_load(&T.wrong), 0);
    const kiln_name *n = kiln_resource_get(T.s.world, T.name);
    ck_assert_ptr_nonnull(n);
    ck_assert_str_eq(n->text, "town7");
}

/* A worker setting the Parent resource to a despawned entity (Parent's check reads that slot's
 * record), beside a main-thread system whose spawns take freed slots, that one first. */
static void set_parent_resource(const kiln_system_ctx *ctx) {
    if (kiln_resource_set(ctx->world, T.s.ids.parent, &(kiln_parent){T.dead}) != KILN_OK)
        atomic_fetch_add(&T.wrong, 1);
    if (kiln_resource_set(ctx->world, T.s.ids.parent, &(kiln_parent){T.named[0] + ((uint64_t)1 << 40)}) !=
        KILN_ERR_INVALID_ARGUMENT) /* a generation never handed out */
        atomic_fetch_add(&T.wrong, 1);
}

KILN_TEST(hooks_threads, a_worker_setting_the_parent_resource_beside_a_spawning_system_is_checked_exactly) {
    kiln_system_desc systems[] = {
        {.name = "adopter", .run = set_parent_resource, .writes = {T.s.ids.parent}},
        {.name = "spawner", .run = spawn_plain, .main_thread = true},
    };
    run_frames(systems, 2);
    ck_assert_int_eq(atomic_load(&T.wrong), 0);
    const kiln_parent *p = kiln_resource_get(T.s.world, T.s.ids.parent);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(p->entity, T.dead);
}
