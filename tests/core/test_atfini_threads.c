/* test_atfini_threads.c: Check suite for addon state (the teardown hook table, Name's index) set up by a
 * main-thread system while worker systems read it (run it under ThreadSanitizer: make test-tsan). */
#include <check.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"
#include "transform_fixture.h"

enum { CHILDREN = 8, FRAMES = 4, HOOKS_PER_FRAME = 6, HOOKS = FRAMES * HOOKS_PER_FRAME };

typedef struct family {
    scene s;
    kiln_entity parent, children[CHILDREN], plain;
    int frame;
    atomic_int started, done; /* the main-thread system began, and finished, this frame's work */
    atomic_int wrong;         /* worker answers otherwise than expected */
    atomic_int reads;         /* worker rounds that ran */
    int ran[HOOKS];           /* how often each registered hook ran */
} family;

static family F;

/* HOOKS distinct teardown hooks, each counting its runs in the slot its ctx points to. */
#define HOOK(n) static void hook_##n(kiln_world *w, void *ctx) { (void)w; ++*(int *)ctx; }
#define HOOKS4(n) HOOK(n##0) HOOK(n##1) HOOK(n##2) HOOK(n##3)
HOOKS4(1) HOOKS4(2) HOOKS4(3) HOOKS4(4) HOOKS4(5) HOOKS4(6)
#define REF4(n) hook_##n##0, hook_##n##1, hook_##n##2, hook_##n##3
static const kiln_fini_fn hooks[HOOKS] = {REF4(1), REF4(2), REF4(3), REF4(4), REF4(5), REF4(6)};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void setup(void) {
    memset(&F, 0, sizeof F);
    scene_open(&F.s);
    kiln_world *w = F.s.world;
    ck_assert_int_eq(kiln_spawn(w, &F.parent), KILN_OK);
    ck_assert_int_eq(kiln_spawn(w, &F.plain), KILN_OK);
    for (int i = 0; i < CHILDREN; i++) {
        ck_assert_int_eq(kiln_spawn(w, &F.children[i]), KILN_OK);
        ck_assert_int_eq(kiln_add(w, F.children[i], F.s.ids.parent, &(kiln_parent){F.parent}), KILN_OK);
    }
}

static void teardown(void) { scene_close(&F.s); }

/* The main-thread system waits (bounded: the pool may have run the worker inline first) until
 * the worker reads, so that its work overlaps the reads whatever the scheduler does. */
static void wait_for_reader(void) {
    atomic_store(&F.started, 1);
    int64_t deadline = now_ns() + 2000000000;
    while (atomic_load(&F.reads) == 0 && now_ns() < deadline) sched_yield();
}

/* Runs FRAMES frames of a worker and a main-thread system in one stage, on a pool of two workers. */
static void run_frames(kiln_system_fn worker, kiln_system_fn main_system, const kiln_component *reads) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *sched = kiln_schedule_create(F.s.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_ptr_nonnull(sched);
    kiln_system_desc reader = {.name = "reader", .run = worker};
    reader.writes[0] = reads[0];
    ck_assert_int_eq(kiln_schedule_add(sched, &reader), KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(sched, &(kiln_system_desc){.name = "setter", .run = main_system,
                                                                  .main_thread = true}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(sched), 1);
    for (F.frame = 0; F.frame < FRAMES; F.frame++) {
        atomic_store(&F.started, 0);
        atomic_store(&F.done, 0);
        atomic_store(&F.reads, 0);
        ck_assert_msg(kiln_schedule_run(sched, 0.0) == KILN_OK, "frame %d: %s", F.frame,
                      kiln_world_error(F.s.world));
    }
    kiln_schedule_destroy(sched);
    kiln_jobs_destroy(jobs);
}

KILN_TEST_GROUP_WITH(atfini_threads, .setup = setup, .teardown = teardown, .timeout = 120);

/* ------------------------------------------------------------------------------------------ */
/* the teardown hook table grows while workers look addon state up through it                */
/* ------------------------------------------------------------------------------------------ */

/* Runs round on a worker (bounded waits: the pool may have run the job inline first) once the
 * main-thread system started, again and again for as long as it works. */
static void read_rounds(kiln_world *w, void (*round)(kiln_world *w, int rounds)) {
    int64_t deadline = now_ns() + 2000000000;
    while (!atomic_load(&F.started) && now_ns() < deadline) sched_yield();
    deadline = now_ns() + 5000000000;
    for (int rounds = 0; (rounds < 50 || !atomic_load(&F.done)) && now_ns() < deadline; rounds++) {
        round(w, rounds);
        atomic_fetch_add(&F.reads, 1);
    }
}

/* The transform state (Parent's children index, the ids) and Name's, looked up through the
 * teardown hook table. */
static void read_addon_round(kiln_world *w, int rounds) {
    kiln_entity kids[CHILDREN];
    if (kiln_transform_children(w, F.parent, kids, CHILDREN) != CHILDREN) atomic_fetch_add(&F.wrong, 1);
    kiln_transform_ids ids;
    if (!kiln_transform_ids_get(w, &ids) || ids.parent != F.s.ids.parent) atomic_fetch_add(&F.wrong, 1);
    if (kiln_name_get(w, F.children[rounds % CHILDREN]) != NULL) atomic_fetch_add(&F.wrong, 1);
}

static void read_addon_state(const kiln_system_ctx *ctx) { read_rounds(ctx->world, read_addon_round); }

/* Main thread: the Name addon's first init (its state joins the table) and this frame's hooks. */
static void register_hooks(const kiln_system_ctx *ctx) {
    wait_for_reader();
    if (F.frame == 0 && kiln_name_init(ctx->world, NULL) != KILN_OK) atomic_fetch_add(&F.wrong, 1);
    for (int i = F.frame * HOOKS_PER_FRAME; i < (F.frame + 1) * HOOKS_PER_FRAME; i++) {
        if (kiln_world_atfini(ctx->world, hooks[i], &F.ran[i]) != KILN_OK) atomic_fetch_add(&F.wrong, 1);
        sched_yield(); /* let the reader run between registrations */
    }
    atomic_store(&F.done, 1);
}

KILN_TEST(atfini_threads, workers_read_addon_state_whole_while_a_main_thread_system_registers_teardown_hooks) {
    run_frames(read_addon_state, register_hooks, &F.s.ids.parent);
    ck_assert_int_eq(atomic_load(&F.wrong), 0);
    for (int i = 0; i < HOOKS; i++) ck_assert_ptr_eq(kiln_world_atfini_get(F.s.world, hooks[i]), &F.ran[i]);
    ck_assert_int_eq(kiln_name_set(F.s.world, F.plain, "hero"), KILN_OK);
    ck_assert_int_eq(kiln_name_lookup(F.s.world, "hero"), F.plain);
    kiln_world_destroy(F.s.world);
    F.s.world = NULL;
    for (int i = 0; i < HOOKS; i++) ck_assert_int_eq(F.ran[i], 1);
}

/* ------------------------------------------------------------------------------------------ */
/* kiln_name_init, retried after running out of memory, finishes while workers name things    */
/* ------------------------------------------------------------------------------------------ */

static kiln_component name_id;

/* Sets the Name resource (Name's check runs here, reading whether the index exists) and looks
 * names up. */
static void name_round(kiln_world *w, int rounds) {
    kiln_name town;
    memset(&town, 0, sizeof town);
    snprintf(town.text, sizeof town.text, "town");
    kiln_result r = kiln_resource_set(w, name_id, &town); /* refused until the index is made */
    if (r != KILN_OK && r != KILN_ERR_OUT_OF_MEMORY) atomic_fetch_add(&F.wrong, 1);
    if (kiln_name_lookup(w, "nobody") != KILN_NULL_ENTITY) atomic_fetch_add(&F.wrong, 1);
    if (kiln_name_get(w, F.children[rounds % CHILDREN]) != NULL) atomic_fetch_add(&F.wrong, 1);
}

/* Worker: name_round for as long as the main-thread system finishes kiln_name_init. */
static void name_things(const kiln_system_ctx *ctx) { read_rounds(ctx->world, name_round); }

static void finish_names(const kiln_system_ctx *ctx) {
    wait_for_reader();
    if (kiln_name_init(ctx->world, NULL) != KILN_OK) atomic_fetch_add(&F.wrong, 1);
    atomic_store(&F.done, 1);
}

KILN_TEST(atfini_threads, a_name_init_retried_by_a_main_thread_system_reaches_workers_whole) {
    /* Out of memory after Name is registered: the state is attached, its index not made (each
     * try on a fresh world, as a retry keeps what the last one did). */
    kiln_result r;
    for (int64_t n = 0;; n++) {
        ck_assert_msg(n < 64, "kiln_name_init never stopped between Name and its index");
        test_allocator_fail_after(&F.s.alloc, n);
        r = kiln_name_init(F.s.world, NULL);
        test_allocator_fail_never(&F.s.alloc);
        if (r != KILN_OK && kiln_component_lookup(F.s.world, "Name")) break;
        ck_assert_msg(r != KILN_OK, "kiln_name_init finished with %d allocations", (int)n);
        teardown();
        setup();
    }
    kiln_world *w = F.s.world;
    ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
    name_id = kiln_component_lookup(w, "Name");
    ck_assert_uint_ne(name_id, 0);
    ck_assert_int_eq(kiln_name_lookup(w, "nobody"), KILN_NULL_ENTITY);

    run_frames(name_things, finish_names, &name_id);
    ck_assert_int_eq(atomic_load(&F.wrong), 0);
    const kiln_name *n = kiln_resource_get(w, name_id);
    ck_assert_ptr_nonnull(n);
    ck_assert_str_eq(n->text, "town");
    ck_assert_int_eq(kiln_name_set(w, F.plain, "hero"), KILN_OK);
    ck_assert_int_eq(kiln_name_lookup(w, "hero"), F.plain);
}

/* ------------------------------------------------------------------------------------------ */
/* a worker system may not register one                                                       */
/* ------------------------------------------------------------------------------------------ */

static char worker_error[2][256];
static kiln_result worker_result[2];

/* Worker: the Name addon's first init and a hook of its own, each refused on this thread. */
static void register_from_worker(const kiln_system_ctx *ctx) {
    atomic_fetch_add(&F.reads, 1);
    if (F.frame != 0) return;
    worker_result[0] = kiln_name_init(ctx->world, NULL);
    snprintf(worker_error[0], sizeof worker_error[0], "%s", kiln_world_error(ctx->world));
    worker_result[1] = kiln_world_atfini(ctx->world, hooks[0], &F.ran[0]);
    snprintf(worker_error[1], sizeof worker_error[1], "%s", kiln_world_error(ctx->world));
}

static void idle(const kiln_system_ctx *ctx) { (void)ctx; }

KILN_TEST(atfini_threads, a_worker_system_registering_a_teardown_hook_is_refused_and_registers_nothing) {
    run_frames(register_from_worker, idle, &F.s.ids.local);
    static const char *const calls[2] = {"kiln_name_init", "kiln_world_atfini"};
    for (int i = 0; i < 2; i++) {
        char want[256];
        snprintf(want, sizeof want, "%s: called from a worker system, job or thread while a schedule runs a stage; "
                 "nothing was registered: initialise addons before the run or from a main_thread system", calls[i]);
        ck_assert_int_eq(worker_result[i], KILN_ERR_INVALID_ARGUMENT);
        ck_assert_str_eq(worker_error[i], want);
    }
    ck_assert_ptr_null(kiln_world_atfini_get(F.s.world, hooks[0]));
    ck_assert_uint_eq(kiln_component_lookup(F.s.world, "Name"), 0);
    /* outside the run both work */
    ck_assert_int_eq(kiln_world_atfini(F.s.world, hooks[0], &F.ran[0]), KILN_OK);
    ck_assert_int_eq(kiln_name_set(F.s.world, F.plain, "hero"), KILN_OK);
    ck_assert_int_eq(kiln_name_lookup(F.s.world, "hero"), F.plain);
}

/* Worker: the transform addon's first init, refused before it registers Parent or the others. */
static void init_transforms_from_worker(const kiln_system_ctx *ctx) {
    worker_result[0] = kiln_transform_init(ctx->world, NULL);
    snprintf(worker_error[0], sizeof worker_error[0], "%s", kiln_world_error(ctx->world));
}

KILN_TEST(atfini_threads, a_worker_system_initialising_transforms_is_refused_before_registering_a_type) {
    kiln_world *w = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(w);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *sched = kiln_schedule_create(w, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_int_eq(kiln_schedule_add(sched, &(kiln_system_desc){.name = "mod", .run = init_transforms_from_worker}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(sched, &(kiln_system_desc){.name = "host", .run = idle, .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(sched, 0.0), KILN_OK);
    kiln_schedule_destroy(sched);
    kiln_jobs_destroy(jobs);
    ck_assert_int_eq(worker_result[0], KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(worker_error[0], "kiln_transform_init: called from a worker system, job or thread while a schedule "
                                      "runs a stage; nothing was registered: initialise addons before the run or from "
                                      "a main_thread system");
    ck_assert_int_eq(kiln_component_count(w), 0);
    kiln_transform_ids ids;
    ck_assert(!kiln_transform_ids_get(w, &ids));
    ck_assert_int_eq(kiln_transform_init(w, &ids), KILN_OK);
    kiln_world_destroy(w);
}
