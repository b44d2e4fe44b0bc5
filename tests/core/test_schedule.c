/* test_schedule.c: Check suite for the schedule: staging by declared access and before/after,
 * build errors, threads, per-system buffers applied in declaration order, and determinism. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* An atomic read as a plain call, so failed assertions print readably. */
static int loaded(atomic_int *value) { return atomic_load(value); }

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void spin_ns(int64_t ns) {
    int64_t end = now_ns() + ns;
    while (now_ns() < end) {
    }
}

static void noop(const kiln_system_ctx *ctx) { (void)ctx; }

/* Systems on worker threads count failures instead of asserting (Check is not thread-safe);
 * the test asserts the count afterwards. */
#define EXPECT_OK(errors, ...)                                                                   \
    do {                                                                                         \
        if ((__VA_ARGS__) != KILN_OK) atomic_fetch_add((errors), 1);                             \
    } while (0)

static void add_system(kiln_schedule *s, kiln_system_desc desc) {
    kiln_result r = kiln_schedule_add(s, &desc);
    ck_assert_msg(r == KILN_OK, "adding %s: %s", desc.name ? desc.name : "(null)",
                  kiln_result_name(r));
}

/* The schedule's describe text (static storage: one at a time). */
static const char *describe(kiln_schedule *s) {
    static char buf[1024];
    size_t n = kiln_schedule_describe(s, buf, sizeof buf);
    ck_assert_uint_lt(n, sizeof buf);
    ck_assert_uint_eq(n, strlen(buf));
    return buf;
}

static int32_t stage_of(kiln_schedule *s, const char *name) {
    int32_t i = kiln_schedule_find(s, name);
    ck_assert_msg(i >= 0, "no system %s", name);
    kiln_system_info info;
    ck_assert(kiln_schedule_system_info_get(s, i, &info));
    return info.stage;
}

static int64_t runs_of(kiln_schedule *s, const char *name) {
    int32_t i = kiln_schedule_find(s, name);
    ck_assert_msg(i >= 0, "no system %s", name);
    kiln_system_info info;
    ck_assert(kiln_schedule_system_info_get(s, i, &info));
    return info.runs;
}

/* A world with three components to declare access on. */
typedef struct fixture {
    kiln_world *world;
    kiln_component p, q, r;
} fixture;

static fixture fixture_make(void) {
    fixture f;
    f.world = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(f.world);
    f.p = test_register_position(f.world);
    f.q = test_register_velocity(f.world);
    kiln_component_desc rd = test_position_desc();
    rd.name = "Rotation";
    ck_assert_int_eq(kiln_component_register(f.world, &rd, &f.r), KILN_OK);
    return f;
}

/* ------------------------------------------------------------------------------------------ */
/* staging                                                                                    */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(staging);

KILN_TEST(staging, systems_that_only_read_share_a_stage) {
    fixture f = fixture_make();
    kiln_schedule *s = kiln_schedule_create(f.world, NULL);
    ck_assert_ptr_nonnull(s);
    add_system(s, (kiln_system_desc){.name = "a", .run = noop, .reads = {f.p}});
    add_system(s, (kiln_system_desc){.name = "b", .run = noop, .reads = {f.p, f.q}});
    add_system(s, (kiln_system_desc){.name = "c", .run = noop, .reads = {f.q, f.p}});
    add_system(s, (kiln_system_desc){.name = "d", .run = noop});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    ck_assert_str_eq(describe(s), "stage 0: a, b, c, d\n");
    kiln_schedule_destroy(s);
    kiln_world_destroy(f.world);
}

KILN_TEST(staging, a_writer_and_a_reader_run_in_declaration_order) {
    fixture f = fixture_make();
    kiln_schedule *s = kiln_schedule_create(f.world, NULL);
    /* reader declared first runs first */
    add_system(s, (kiln_system_desc){.name = "read_p", .run = noop, .reads = {f.p}});
    add_system(s, (kiln_system_desc){.name = "write_p", .run = noop, .writes = {f.p}});
    /* writer declared first runs first; writing implies reading */
    add_system(s, (kiln_system_desc){.name = "write_q", .run = noop, .writes = {f.q}});
    add_system(s, (kiln_system_desc){.name = "read_q", .run = noop, .reads = {f.q}});
    add_system(s, (kiln_system_desc){.name = "write_q_again", .run = noop, .writes = {f.q}});
    ck_assert_int_eq(kiln_schedule_stage_count(s), 3);
    ck_assert_str_eq(describe(s),
                     "stage 0: read_p, write_q\n"
                     "stage 1: write_p, read_q\n"
                     "stage 2: write_q_again\n");
    ck_assert_int_eq(stage_of(s, "read_p"), 0);
    ck_assert_int_eq(stage_of(s, "write_p"), 1);
    ck_assert_int_eq(stage_of(s, "write_q_again"), 2);
    kiln_schedule_destroy(s);
    kiln_world_destroy(f.world);
}

KILN_TEST(staging, the_staging_rule_saves_a_stage_over_joining_the_last_stage) {
    /* "Join the last stage unless conflicting" would give A | B, C | D: three stages. */
    fixture f = fixture_make();
    kiln_schedule *s = kiln_schedule_create(f.world, NULL);
    add_system(s, (kiln_system_desc){.name = "A", .run = noop, .writes = {f.p}});
    add_system(s, (kiln_system_desc){.name = "B", .run = noop, .reads = {f.p}});
    add_system(s, (kiln_system_desc){.name = "C", .run = noop, .writes = {f.q}});
    add_system(s, (kiln_system_desc){.name = "D", .run = noop, .reads = {f.q}});
    ck_assert_int_eq(kiln_schedule_stage_count(s), 2);
    ck_assert_str_eq(describe(s), "stage 0: A, C\nstage 1: B, D\n");
    kiln_schedule_destroy(s);
    kiln_world_destroy(f.world);
}

KILN_TEST(staging, describe_truncates_and_returns_the_full_length) {
    fixture f = fixture_make();
    kiln_schedule *s = kiln_schedule_create(f.world, NULL);
    add_system(s, (kiln_system_desc){.name = "move", .run = noop, .writes = {f.p}});
    add_system(s, (kiln_system_desc){.name = "spin", .run = noop, .writes = {f.q}});
    add_system(s, (kiln_system_desc){.name = "collide", .run = noop, .reads = {f.p, f.q}});
    const char *full = "stage 0: move, spin\nstage 1: collide\n";
    char buf[64];
    ck_assert_uint_eq(kiln_schedule_describe(s, buf, sizeof buf), strlen(full));
    ck_assert_str_eq(buf, full);
    char small[10];
    memset(small, 'x', sizeof small);
    ck_assert_uint_eq(kiln_schedule_describe(s, small, sizeof small), strlen(full));
    ck_assert_str_eq(small, "stage 0: ");
    ck_assert_uint_eq(kiln_schedule_describe(s, NULL, 0), strlen(full));
    kiln_schedule *empty = kiln_schedule_create(f.world, NULL);
    ck_assert_uint_eq(kiln_schedule_describe(empty, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(kiln_schedule_stage_count(empty), 0);
    kiln_schedule_destroy(empty);
    kiln_schedule_destroy(s);
    kiln_world_destroy(f.world);
}

/* What an exclusive system saw of the world. */
typedef struct exclusive_probe {
    kiln_component p;
    kiln_entity victim;
    kiln_entity spawned;
    bool deferred;
    bool spawned_alive_at_once;
    bool victim_dead_at_once;
    bool added_at_once;
    int64_t seen_by_later;
} exclusive_probe;

static void exclusive_run(const kiln_system_ctx *ctx) {
    exclusive_probe *x = ctx->user;
    kiln_world *w = ctx->world;
    x->deferred = kiln_is_deferred(w);
    ck_assert_int_eq(kiln_spawn(w, &x->spawned), KILN_OK);
    x->spawned_alive_at_once = kiln_is_alive(w, x->spawned);
    ck_assert_int_eq(kiln_add(w, x->spawned, x->p, &(test_position){5.0f, 6.0f}), KILN_OK);
    x->added_at_once = kiln_has(w, x->spawned, x->p);
    if (kiln_is_alive(w, x->victim)) {
        ck_assert_int_eq(kiln_despawn(w, x->victim), KILN_OK);
        x->victim_dead_at_once = !kiln_is_alive(w, x->victim);
    }
}

static void after_exclusive_run(const kiln_system_ctx *ctx) {
    exclusive_probe *x = ctx->user;
    const test_position *p = kiln_get(ctx->world, x->spawned, x->p);
    if (p && p->x == 5.0f) x->seen_by_later++;
}

KILN_TEST(staging, an_exclusive_system_runs_alone_and_changes_the_world_directly) {
    fixture f = fixture_make();
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(f.world, &(kiln_schedule_desc){.jobs = jobs});
    exclusive_probe x = {.p = f.p};
    ck_assert_int_eq(kiln_spawn(f.world, &x.victim), KILN_OK);
    add_system(s, (kiln_system_desc){.name = "a", .run = noop, .reads = {f.p}});
    add_system(s, (kiln_system_desc){.name = "b", .run = noop, .reads = {f.q}});
    add_system(s, (kiln_system_desc){.name = "x", .run = exclusive_run, .user = &x,
                                     .exclusive = true});
    add_system(s, (kiln_system_desc){.name = "c", .run = after_exclusive_run, .user = &x,
                                     .reads = {f.p}});
    add_system(s, (kiln_system_desc){.name = "d", .run = noop});
    add_system(s, (kiln_system_desc){.name = "y", .run = noop, .exclusive = true});
    add_system(s, (kiln_system_desc){.name = "z", .run = noop, .exclusive = true});
    ck_assert_int_eq(kiln_schedule_stage_count(s), 5);
    ck_assert_str_eq(describe(s),
                     "stage 0: a, b\nstage 1: x\nstage 2: c, d\nstage 3: y\nstage 4: z\n");
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert(!x.deferred);
    ck_assert(x.spawned_alive_at_once);
    ck_assert(x.added_at_once);
    ck_assert(x.victim_dead_at_once);
    ck_assert_int_eq(x.seen_by_later, 1);
    ck_assert(!kiln_is_deferred(f.world));
    ck_assert(kiln_is_alive(f.world, x.spawned));
    ck_assert(!kiln_is_alive(f.world, x.victim));
    kiln_system_info info;
    ck_assert(kiln_schedule_system_info_get(s, kiln_schedule_find(s, "x"), &info));
    ck_assert(info.exclusive);
    ck_assert_int_eq(info.runs, 1);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(f.world);
}

KILN_TEST(staging, before_and_after_place_systems_even_relative_to_later_declared_ones) {
    fixture f = fixture_make();
    kiln_schedule *s = kiln_schedule_create(f.world, NULL);
    add_system(s, (kiln_system_desc){.name = "a", .run = noop, .after = {"c"}});
    add_system(s, (kiln_system_desc){.name = "b", .run = noop});
    add_system(s, (kiln_system_desc){.name = "c", .run = noop});
    ck_assert_str_eq(describe(s), "stage 0: b, c\nstage 1: a\n");
    ck_assert_int_eq(stage_of(s, "a"), 1);
    ck_assert_int_eq(stage_of(s, "c"), 0);
    kiln_schedule_destroy(s);

    s = kiln_schedule_create(f.world, NULL);
    add_system(s, (kiln_system_desc){.name = "a", .run = noop, .after = {"c"}});
    add_system(s, (kiln_system_desc){.name = "b", .run = noop, .before = {"c"}});
    add_system(s, (kiln_system_desc){.name = "c", .run = noop});
    add_system(s, (kiln_system_desc){.name = "d", .run = noop, .before = {"b", "a"}});
    ck_assert_int_eq(kiln_schedule_stage_count(s), 4);
    ck_assert_str_eq(describe(s), "stage 0: d\nstage 1: b\nstage 2: c\nstage 3: a\n");
    kiln_schedule_destroy(s);
    kiln_world_destroy(f.world);
}

KILN_TEST(staging, an_explicit_order_between_conflicting_systems_overrides_declaration_order) {
    fixture f = fixture_make();
    kiln_schedule *s = kiln_schedule_create(f.world, NULL);
    add_system(s, (kiln_system_desc){.name = "writer", .run = noop, .writes = {f.p}});
    add_system(s, (kiln_system_desc){.name = "reader", .run = noop, .reads = {f.p},
                                     .before = {"writer"}});
    ck_assert_str_eq(describe(s), "stage 0: reader\nstage 1: writer\n");
    kiln_schedule_destroy(s);

    s = kiln_schedule_create(f.world, NULL);
    add_system(s, (kiln_system_desc){.name = "first", .run = noop, .writes = {f.p},
                                     .after = {"second"}});
    add_system(s, (kiln_system_desc){.name = "second", .run = noop, .writes = {f.p}});
    add_system(s, (kiln_system_desc){.name = "third", .run = noop, .reads = {f.p}});
    ck_assert_str_eq(describe(s), "stage 0: second\nstage 1: first\nstage 2: third\n");
    kiln_schedule_destroy(s);
    kiln_world_destroy(f.world);
}

KILN_TEST(staging, a_before_after_cycle_is_an_error_naming_the_systems) {
    fixture f = fixture_make();
    kiln_schedule *s = kiln_schedule_create(f.world, NULL);
    add_system(s, (kiln_system_desc){.name = "bystander", .run = noop});
    add_system(s, (kiln_system_desc){.name = "alpha", .run = noop, .after = {"beta"}});
    add_system(s, (kiln_system_desc){.name = "beta", .run = noop, .after = {"alpha"}});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_ERR_INVALID_ARGUMENT);
    const char *err = kiln_world_error(f.world);
    ck_assert_msg(strstr(err, "alpha") && strstr(err, "beta"), "error: %s", err);
    ck_assert_msg(!strstr(err, "bystander"), "error: %s", err);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 0);
    kiln_system_info info;
    ck_assert(kiln_schedule_system_info_get(s, 0, &info));
    ck_assert_int_eq(info.stage, -1);
    kiln_schedule_destroy(s);

    /* a three-system cycle through before */
    kiln_world_clear_error(f.world);
    s = kiln_schedule_create(f.world, NULL);
    add_system(s, (kiln_system_desc){.name = "one", .run = noop, .before = {"two"}});
    add_system(s, (kiln_system_desc){.name = "two", .run = noop, .before = {"three"}});
    add_system(s, (kiln_system_desc){.name = "three", .run = noop, .before = {"one"}});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_ERR_INVALID_ARGUMENT);
    err = kiln_world_error(f.world);
    ck_assert_msg(strstr(err, "one") && strstr(err, "two") && strstr(err, "three"), "error: %s",
                  err);
    kiln_schedule_destroy(s);

    /* a system ordered after itself */
    kiln_world_clear_error(f.world);
    s = kiln_schedule_create(f.world, NULL);
    add_system(s, (kiln_system_desc){.name = "ouroboros", .run = noop, .after = {"ouroboros"}});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kiln_world_error(f.world), "ouroboros"));
    kiln_schedule_destroy(s);
    kiln_world_destroy(f.world);
}

KILN_TEST(staging, an_unknown_name_in_before_or_after_is_an_error_naming_both) {
    fixture f = fixture_make();
    kiln_schedule *s = kiln_schedule_create(f.world, NULL);
    add_system(s, (kiln_system_desc){.name = "mover", .run = noop, .after = {"ghost"}});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_ERR_INVALID_ARGUMENT);
    const char *err = kiln_world_error(f.world);
    ck_assert_msg(strstr(err, "mover") && strstr(err, "ghost"), "error: %s", err);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 0);
    /* declaring the missing system mends it */
    add_system(s, (kiln_system_desc){.name = "ghost", .run = noop});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: ghost\nstage 1: mover\n");
    kiln_schedule_destroy(s);

    kiln_world_clear_error(f.world);
    s = kiln_schedule_create(f.world, NULL);
    add_system(s, (kiln_system_desc){.name = "spinner", .run = noop});
    add_system(s, (kiln_system_desc){.name = "painter", .run = noop,
                                     .before = {"spinner", "phantom"}});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_ERR_INVALID_ARGUMENT);
    err = kiln_world_error(f.world);
    ck_assert_msg(strstr(err, "painter") && strstr(err, "phantom"), "error: %s", err);
    kiln_schedule_destroy(s);
    kiln_world_destroy(f.world);
}

KILN_TEST(staging, add_rejects_bad_systems_and_leaves_the_schedule_unchanged) {
    fixture f = fixture_make();
    kiln_schedule *s = kiln_schedule_create(f.world, NULL);
    add_system(s, (kiln_system_desc){.name = "writer", .run = noop, .writes = {f.p}});
    add_system(s, (kiln_system_desc){.name = "reader", .run = noop, .reads = {f.p}});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    const char *before = "stage 0: writer\nstage 1: reader\n";
    ck_assert_str_eq(describe(s), before);

    char long_name[KILN_MAX_NAME + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    const struct {
        kiln_system_desc desc;
        kiln_result code;
        const char *mentions; /* the message names this */
    } bad[] = {
        {{.name = "writer", .run = noop, .reads = {f.q}}, KILN_ERR_INVALID_ARGUMENT, "writer"},
        {{.name = "lazy", .run = NULL}, KILN_ERR_INVALID_ARGUMENT, "lazy"},
        {{.name = "stranger", .run = noop, .reads = {f.p, 99}}, KILN_ERR_UNKNOWN_COMPONENT,
         "stranger"},
        {{.name = "stranger", .run = noop, .writes = {f.r + 1}}, KILN_ERR_UNKNOWN_COMPONENT,
         "stranger"},
        {{.name = NULL, .run = noop}, KILN_ERR_INVALID_ARGUMENT, NULL},
        {{.name = "", .run = noop}, KILN_ERR_INVALID_ARGUMENT, NULL},
        {{.name = long_name, .run = noop}, KILN_ERR_INVALID_ARGUMENT, NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_world_clear_error(f.world);
        ck_assert_int_eq(kiln_schedule_add(s, &bad[i].desc), bad[i].code);
        ck_assert_str_ne(kiln_world_error(f.world), "");
        if (bad[i].mentions)
            ck_assert_msg(strstr(kiln_world_error(f.world), bad[i].mentions), "case %zu: %s", i,
                          kiln_world_error(f.world));
        ck_assert_int_eq(kiln_schedule_system_count(s), 2);
        ck_assert_int_eq(kiln_schedule_find(s, "lazy"), -1);
        ck_assert_int_eq(kiln_schedule_find(s, "stranger"), -1);
        /* still built: the stages are as they were */
        ck_assert_int_eq(stage_of(s, "reader"), 1);
        ck_assert_str_eq(describe(s), before);
    }
    ck_assert_int_eq(kiln_schedule_add(s, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_schedule_system_count(s), 2);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(runs_of(s, "writer"), 1);
    kiln_schedule_destroy(s);
    kiln_world_destroy(f.world);
}

static void count_run(const kiln_system_ctx *ctx) { (*(int *)ctx->user)++; }

KILN_TEST(staging, run_after_a_failed_build_returns_the_error_and_runs_nothing) {
    fixture f = fixture_make();
    kiln_schedule *s = kiln_schedule_create(f.world, NULL);
    int ran = 0;
    add_system(s, (kiln_system_desc){.name = "fine", .run = count_run, .user = &ran});
    add_system(s, (kiln_system_desc){.name = "lost", .run = count_run, .user = &ran,
                                     .after = {"nowhere"}});
    kiln_tick tick = kiln_tick_current(f.world);
    ck_assert_int_eq(kiln_schedule_build(s), KILN_ERR_INVALID_ARGUMENT);
    kiln_world_clear_error(f.world);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kiln_world_error(f.world), "nowhere"));
    ck_assert_int_eq(ran, 0);
    ck_assert_uint_eq(kiln_tick_current(f.world), tick);
    ck_assert(!kiln_is_deferred(f.world));
    ck_assert_int_eq(runs_of(s, "fine"), 0);
    /* a run that builds by itself fails the same way */
    kiln_schedule *t = kiln_schedule_create(f.world, NULL);
    add_system(t, (kiln_system_desc){.name = "x", .run = count_run, .user = &ran,
                                     .before = {"y"}});
    add_system(t, (kiln_system_desc){.name = "y", .run = count_run, .user = &ran,
                                     .before = {"x"}});
    ck_assert_int_eq(kiln_schedule_run(t, 0.0), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ran, 0);
    ck_assert_uint_eq(kiln_tick_current(f.world), tick);
    kiln_schedule_destroy(t);
    kiln_schedule_destroy(s);
    kiln_world_destroy(f.world);
}

KILN_TEST(staging, destroying_null_is_a_noop) {
    kiln_schedule_destroy(NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* running                                                                                    */
/* ------------------------------------------------------------------------------------------ */

#define MAX_SEEN 64

/* Threads a system ran on, one per run. */
typedef struct thread_log {
    pthread_t threads[MAX_SEEN];
    int count;
    int64_t spin;
    const char *name;
    char (*order)[16]; /* shared log of main-thread system names, in run order */
    int *order_count;
} thread_log;

static void log_thread(const kiln_system_ctx *ctx) {
    thread_log *l = ctx->user;
    if (l->spin) spin_ns(l->spin);
    if (l->count < MAX_SEEN) l->threads[l->count++] = pthread_self();
    if (l->order) snprintf(l->order[(*l->order_count)++], 16, "%s", l->name);
}

typedef struct run_args {
    kiln_schedule *s;
    kiln_result result;
    pthread_t self;
} run_args;

static void *run_on_thread(void *arg) {
    run_args *a = arg;
    a->self = pthread_self();
    a->result = kiln_schedule_run(a->s, 0.0);
    return NULL;
}

KILN_TEST_GROUP_WITH(running, .timeout = 30);

KILN_TEST(running, main_thread_systems_run_on_the_calling_thread_even_with_workers) {
    fixture f = fixture_make();
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(f.world, &(kiln_schedule_desc){.jobs = jobs});
    static char order[64][16];
    int order_count = 0;
    thread_log w[3], m[2];
    for (int i = 0; i < 3; i++) w[i] = (thread_log){.spin = 1000000};
    m[0] = (thread_log){.spin = 1000000, .name = "m0", .order = order, .order_count = &order_count};
    m[1] = (thread_log){.spin = 0, .name = "m1", .order = order, .order_count = &order_count};
    add_system(s, (kiln_system_desc){.name = "w0", .run = log_thread, .user = &w[0]});
    add_system(s, (kiln_system_desc){.name = "m0", .run = log_thread, .user = &m[0],
                                     .main_thread = true});
    add_system(s, (kiln_system_desc){.name = "w1", .run = log_thread, .user = &w[1]});
    add_system(s, (kiln_system_desc){.name = "m1", .run = log_thread, .user = &m[1],
                                     .main_thread = true});
    add_system(s, (kiln_system_desc){.name = "w2", .run = log_thread, .user = &w[2]});
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    enum { FRAMES = 10 };
    for (int frame = 0; frame < FRAMES; frame++) ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    pthread_t self = pthread_self();
    int off_main = 0;
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(w[i].count, FRAMES);
        for (int k = 0; k < FRAMES; k++) off_main += !pthread_equal(w[i].threads[k], self);
    }
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(m[i].count, FRAMES);
        for (int k = 0; k < FRAMES; k++) ck_assert(pthread_equal(m[i].threads[k], self));
    }
    ck_assert_int_gt(off_main, 0);
    /* main-thread systems of a stage run in declaration order */
    ck_assert_int_eq(order_count, 2 * FRAMES);
    for (int k = 0; k < order_count; k++) ck_assert_str_eq(order[k], k % 2 ? "m1" : "m0");

    /* "the calling thread" is whichever thread calls run */
    run_args a = {.s = s};
    pthread_t other;
    ck_assert_int_eq(pthread_create(&other, NULL, run_on_thread, &a), 0);
    ck_assert_int_eq(pthread_join(other, NULL), 0);
    ck_assert_int_eq(a.result, KILN_OK);
    ck_assert_int_eq(m[0].count, FRAMES + 1);
    ck_assert(pthread_equal(m[0].threads[FRAMES], a.self));
    ck_assert(pthread_equal(m[1].threads[FRAMES], a.self));
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(f.world);
}

KILN_TEST(running, disabled_systems_are_skipped_and_enable_toggles_without_rebuilding) {
    /* single-threaded with a counting allocator, to see that toggling builds nothing */
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_component p = test_register_position(world);
    kiln_component q = test_register_velocity(world);
    kiln_schedule *s = kiln_schedule_create(world, NULL);
    int x_runs = 0, y_runs = 0, z_runs = 0;
    add_system(s, (kiln_system_desc){.name = "x", .run = count_run, .user = &x_runs,
                                     .writes = {p}, .disabled = true});
    add_system(s, (kiln_system_desc){.name = "y", .run = count_run, .user = &y_runs,
                                     .reads = {p}});
    add_system(s, (kiln_system_desc){.name = "z", .run = count_run, .user = &z_runs,
                                     .reads = {q}});
    /* a disabled system still holds its stage */
    const char *stages = "stage 0: x, z\nstage 1: y\n";
    ck_assert_str_eq(describe(s), stages);
    kiln_system_info info;
    ck_assert(kiln_schedule_system_info_get(s, 0, &info));
    ck_assert(!info.enabled);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(x_runs, 0);
    ck_assert_int_eq(runs_of(s, "x"), 0);
    ck_assert_int_eq(y_runs, 3);
    ck_assert_int_eq(z_runs, 3);

    int64_t calls = alloc.calls;
    ck_assert_int_eq(kiln_schedule_enable(s, "x", true), KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 2);
    ck_assert_str_eq(describe(s), stages);
    ck_assert_int_eq(stage_of(s, "x"), 0);
    ck_assert_int_eq(alloc.calls, calls); /* nothing was rebuilt */
    ck_assert(kiln_schedule_system_info_get(s, 0, &info));
    ck_assert(info.enabled);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(x_runs, 1);
    ck_assert_int_eq(runs_of(s, "x"), 1);

    ck_assert_int_eq(kiln_schedule_enable(s, "y", false), KILN_OK);
    ck_assert_int_eq(kiln_schedule_enable(s, "z", false), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(x_runs, 2);
    ck_assert_int_eq(y_runs, 4);
    ck_assert_int_eq(z_runs, 4);
    ck_assert_int_eq(stage_of(s, "y"), 1);
    ck_assert_int_eq(alloc.calls, calls);

    kiln_world_clear_error(world);
    ck_assert_int_eq(kiln_schedule_enable(s, "nobody", true), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kiln_world_error(world), "nobody"));
    ck_assert_int_eq(kiln_schedule_enable(s, NULL, true), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(describe(s), stages);
    kiln_schedule_destroy(s);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

static void spin_300us(const kiln_system_ctx *ctx) {
    (void)ctx;
    spin_ns(300000);
}

KILN_TEST(running, system_info_reports_declaration_stage_flags_and_timings) {
    fixture f = fixture_make();
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(f.world, &(kiln_schedule_desc){.jobs = jobs});
    add_system(s, (kiln_system_desc){.name = "slow", .run = spin_300us, .writes = {f.p}});
    add_system(s, (kiln_system_desc){.name = "main", .run = spin_300us, .main_thread = true,
                                     .reads = {f.p}});
    add_system(s, (kiln_system_desc){.name = "alone", .run = spin_300us, .exclusive = true});
    add_system(s, (kiln_system_desc){.name = "off", .run = spin_300us, .disabled = true});
    ck_assert_int_eq(kiln_schedule_system_count(s), 4);
    kiln_system_info info;
    ck_assert(kiln_schedule_system_info_get(s, 0, &info));
    ck_assert_int_eq(info.stage, -1); /* not built yet */
    ck_assert_int_eq(info.runs, 0);
    ck_assert(!kiln_schedule_system_info_get(s, -1, &info));
    ck_assert(!kiln_schedule_system_info_get(s, 4, &info));
    for (int i = 0; i < 3; i++) ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);

    const struct {
        const char *name;
        int32_t stage;
        bool enabled, exclusive, main_thread;
        int64_t runs;
    } want[] = {
        {"slow", 0, true, false, false, 3},
        {"main", 1, true, false, true, 3},
        {"alone", 2, true, true, false, 3},
        {"off", 3, false, false, false, 0},
    };
    for (int32_t i = 0; i < 4; i++) {
        ck_assert(kiln_schedule_system_info_get(s, i, &info));
        ck_assert_str_eq(info.name, want[i].name);
        ck_assert_int_eq(info.index, i);
        ck_assert_int_eq(info.stage, want[i].stage);
        ck_assert(info.enabled == want[i].enabled);
        ck_assert(info.exclusive == want[i].exclusive);
        ck_assert(info.main_thread == want[i].main_thread);
        ck_assert_int_eq(info.runs, want[i].runs);
        if (want[i].runs) {
            ck_assert_int_ge(info.last_ns, 300000);
            ck_assert_int_ge(info.total_ns, 3 * 300000);
            ck_assert_int_ge(info.total_ns, info.last_ns);
            ck_assert_int_lt(info.last_ns, info.total_ns);
        } else {
            ck_assert_int_eq(info.last_ns, 0);
            ck_assert_int_eq(info.total_ns, 0);
        }
    }
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(f.world);
}

KILN_TEST(running, adding_a_system_after_a_run_rebuilds_the_stages_on_the_next_run) {
    fixture f = fixture_make();
    kiln_schedule *s = kiln_schedule_create(f.world, NULL);
    int a_runs = 0, b_runs = 0;
    add_system(s, (kiln_system_desc){.name = "a", .run = count_run, .user = &a_runs,
                                     .writes = {f.p}});
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(stage_of(s, "a"), 0);
    add_system(s, (kiln_system_desc){.name = "b", .run = count_run, .user = &b_runs,
                                     .reads = {f.p}});
    ck_assert_int_eq(kiln_schedule_system_count(s), 2);
    ck_assert_int_eq(stage_of(s, "a"), -1); /* not built since the add */
    ck_assert_int_eq(stage_of(s, "b"), -1);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(a_runs, 2);
    ck_assert_int_eq(b_runs, 1);
    ck_assert_int_eq(stage_of(s, "b"), 1);
    ck_assert_str_eq(describe(s), "stage 0: a\nstage 1: b\n");
    kiln_schedule_destroy(s);
    kiln_world_destroy(f.world);
}

KILN_TEST(running, find_returns_the_declaration_index_or_minus_one) {
    fixture f = fixture_make();
    kiln_schedule *s = kiln_schedule_create(f.world, NULL);
    ck_assert_int_eq(kiln_schedule_find(s, "a"), -1);
    add_system(s, (kiln_system_desc){.name = "a", .run = noop});
    add_system(s, (kiln_system_desc){.name = "bb", .run = noop});
    add_system(s, (kiln_system_desc){.name = "c", .run = noop});
    ck_assert_int_eq(kiln_schedule_find(s, "a"), 0);
    ck_assert_int_eq(kiln_schedule_find(s, "bb"), 1);
    ck_assert_int_eq(kiln_schedule_find(s, "c"), 2);
    ck_assert_int_eq(kiln_schedule_find(s, "b"), -1);
    ck_assert_int_eq(kiln_schedule_find(s, "bbb"), -1);
    ck_assert_int_eq(kiln_schedule_find(s, ""), -1);
    ck_assert_int_eq(kiln_schedule_find(s, NULL), -1);
    /* the schedule keeps its own copy of the name */
    char name[8] = "dyn";
    add_system(s, (kiln_system_desc){.name = name, .run = noop});
    strcpy(name, "zzz");
    ck_assert_int_eq(kiln_schedule_find(s, "dyn"), 3);
    ck_assert_int_eq(kiln_schedule_find(s, "zzz"), -1);
    kiln_schedule_destroy(s);
    kiln_world_destroy(f.world);
}

typedef struct tick_probe {
    kiln_tick seen;
    int runs;
} tick_probe;

static void record_tick(const kiln_system_ctx *ctx) {
    tick_probe *t = ctx->user;
    t->seen = kiln_tick_current(ctx->world);
    t->runs++;
}

KILN_TEST(running, the_world_tick_advances_once_per_run_before_the_first_stage) {
    fixture f = fixture_make();
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(f.world, &(kiln_schedule_desc){.jobs = jobs});
    tick_probe t[5] = {{0, 0}};
    add_system(s, (kiln_system_desc){.name = "w", .run = record_tick, .user = &t[0],
                                     .writes = {f.p}});
    add_system(s, (kiln_system_desc){.name = "w2", .run = record_tick, .user = &t[1],
                                     .writes = {f.q}});
    add_system(s, (kiln_system_desc){.name = "r", .run = record_tick, .user = &t[2],
                                     .reads = {f.p}, .main_thread = true});
    add_system(s, (kiln_system_desc){.name = "x", .run = record_tick, .user = &t[3],
                                     .exclusive = true});
    add_system(s, (kiln_system_desc){.name = "last", .run = record_tick, .user = &t[4]});
    ck_assert_int_eq(kiln_schedule_stage_count(s), 4);
    for (int frame = 1; frame <= 5; frame++) {
        kiln_tick before = kiln_tick_current(f.world);
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        ck_assert_uint_eq(kiln_tick_current(f.world), before + 1);
        for (int i = 0; i < 5; i++) {
            ck_assert_int_eq(t[i].runs, frame);
            ck_assert_uint_eq(t[i].seen, before + 1);
        }
    }
    /* even a schedule without systems advances it */
    kiln_schedule *empty = kiln_schedule_create(f.world, NULL);
    kiln_tick before = kiln_tick_current(f.world);
    ck_assert_int_eq(kiln_schedule_run(empty, 0.0), KILN_OK);
    ck_assert_uint_eq(kiln_tick_current(f.world), before + 1);
    kiln_schedule_destroy(empty);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(f.world);
}

typedef struct ctx_probe {
    kiln_world *world;
    kiln_jobs *jobs;
    double dt;
    const char *name;
    kiln_commands *commands;
    bool user_ok;
    int runs;
} ctx_probe;

static void record_ctx(const kiln_system_ctx *ctx) {
    ctx_probe *c = ctx->user;
    c->world = ctx->world;
    c->jobs = ctx->jobs;
    c->dt = ctx->dt;
    c->name = ctx->name;
    c->commands = ctx->commands;
    c->user_ok = ctx->user == c;
    c->runs++;
}

KILN_TEST(running, the_system_context_carries_world_dt_user_name_buffer_and_pool) {
    fixture f = fixture_make();
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *pooled = kiln_schedule_create(f.world, &(kiln_schedule_desc){.jobs = jobs});
    kiln_schedule *inline_s = kiln_schedule_create(f.world, &(kiln_schedule_desc){.jobs = NULL});
    ctx_probe c[3];
    memset(c, 0, sizeof c);
    char name[16] = "worker";
    add_system(pooled, (kiln_system_desc){.name = name, .run = record_ctx, .user = &c[0]});
    strcpy(name, "clobbered");
    add_system(pooled, (kiln_system_desc){.name = "main", .run = record_ctx, .user = &c[1],
                                          .main_thread = true});
    add_system(inline_s, (kiln_system_desc){.name = "solo", .run = record_ctx, .user = &c[2]});
    ck_assert_int_eq(kiln_schedule_run(pooled, 0.25), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(inline_s, 0.5), KILN_OK);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(c[i].runs, 1);
        ck_assert_ptr_eq(c[i].world, f.world);
        ck_assert(c[i].user_ok);
        ck_assert_ptr_nonnull(c[i].commands);
    }
    ck_assert_ptr_eq(c[0].jobs, jobs);
    ck_assert_ptr_eq(c[1].jobs, jobs);
    ck_assert_ptr_null(c[2].jobs);
    ck_assert_double_eq(c[0].dt, 0.25);
    ck_assert_double_eq(c[1].dt, 0.25);
    ck_assert_double_eq(c[2].dt, 0.5);
    ck_assert_str_eq(c[0].name, "worker");
    ck_assert_str_eq(c[1].name, "main");
    ck_assert_str_eq(c[2].name, "solo");
    ck_assert_ptr_ne(c[0].commands, c[1].commands);
    ck_assert_ptr_ne(c[0].commands, c[2].commands);
    /* each system keeps its buffer from frame to frame */
    kiln_commands *first = c[0].commands;
    ck_assert_int_eq(kiln_schedule_run(pooled, 0.125), KILN_OK);
    ck_assert_ptr_eq(c[0].commands, first);
    ck_assert_double_eq(c[0].dt, 0.125);
    kiln_schedule_destroy(inline_s);
    kiln_schedule_destroy(pooled);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(f.world);
}

/* Two worker systems and a main-thread system of one stage write the same values; the buffers
 * land in declaration order whatever finishes first. */
typedef struct race {
    kiln_component p;
    kiln_entity e1, e2;
    int frame;
    atomic_int stale_reads; /* values changed before the stage ended */
    int64_t wrong_seen;  /* the next stage saw something else than the last-declared write */
    atomic_int errors;
} race;

typedef struct racer {
    race *r;
    float id;
    bool slow_on_odd; /* spins on odd frames, else on even ones */
    bool plain;       /* main thread: writes through the plain world API */
} racer;

static bool holds(const kiln_world *w, kiln_entity e, kiln_component p, float x, float y) {
    const test_position *v = kiln_get(w, e, p);
    return v && v->x == x && v->y == y;
}

static void racer_run(const kiln_system_ctx *ctx) {
    racer *me = ctx->user;
    race *r = me->r;
    float frame = (float)r->frame;
    /* at the start of the stage every entity still holds last frame's final values */
    if (!holds(ctx->world, r->e1, r->p, 2.0f, frame - 1.0f)) atomic_fetch_add(&r->stale_reads, 1);
    if ((r->frame % 2 == 1) == me->slow_on_odd) spin_ns(2000000);
    test_position v = {me->id, frame};
    if (me->plain) {
        EXPECT_OK(&r->errors, kiln_set(ctx->world, r->e2, r->p, &v));
    } else {
        EXPECT_OK(&r->errors, kiln_commands_set(ctx->commands, r->e1, r->p, &v));
        if (me->id == 2.0f) EXPECT_OK(&r->errors, kiln_commands_set(ctx->commands, r->e2, r->p, &v));
    }
}

static void race_check(const kiln_system_ctx *ctx) {
    race *r = ctx->user;
    float frame = (float)r->frame;
    if (!holds(ctx->world, r->e1, r->p, 2.0f, frame)) r->wrong_seen++;
    if (!holds(ctx->world, r->e2, r->p, 3.0f, frame)) r->wrong_seen++;
}

KILN_TEST(running, buffers_apply_at_stage_end_in_declaration_order_whatever_finishes_first) {
    const int32_t counts[] = {KILN_JOBS_INLINE, 2, 3};
    for (int k = 0; k < 3; k++) {
        fixture f = fixture_make();
        kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = counts[k]});
        kiln_schedule *s = kiln_schedule_create(f.world, &(kiln_schedule_desc){.jobs = jobs});
        race r = {.p = f.p};
        ck_assert_int_eq(kiln_spawn_with(f.world, &f.p,
                                         (const void *[]){&(test_position){2.0f, 0.0f}}, 1,
                                         &r.e1),
                         KILN_OK);
        ck_assert_int_eq(kiln_spawn_with(f.world, &f.p,
                                         (const void *[]){&(test_position){3.0f, 0.0f}}, 1,
                                         &r.e2),
                         KILN_OK);
        /* declared: one (e1), two (e1, e2), three (main thread, e2); later declared wins */
        racer one = {&r, 1.0f, true, false}, two = {&r, 2.0f, false, false},
              three = {&r, 3.0f, true, true};
        add_system(s, (kiln_system_desc){.name = "one", .run = racer_run, .user = &one});
        add_system(s, (kiln_system_desc){.name = "two", .run = racer_run, .user = &two});
        add_system(s, (kiln_system_desc){.name = "three", .run = racer_run, .user = &three,
                                         .main_thread = true});
        add_system(s, (kiln_system_desc){.name = "check", .run = race_check, .user = &r,
                                         .reads = {f.p}, .after = {"one", "two", "three"}});
        ck_assert_str_eq(describe(s), "stage 0: one, two, three\nstage 1: check\n");
        for (r.frame = 1; r.frame <= 12; r.frame++) {
            ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
            ck_assert(holds(f.world, r.e1, f.p, 2.0f, (float)r.frame));
            ck_assert(holds(f.world, r.e2, f.p, 3.0f, (float)r.frame));
        }
        ck_assert_int_eq(loaded(&r.stale_reads), 0);
        ck_assert_int_eq(r.wrong_seen, 0);
        ck_assert_int_eq(loaded(&r.errors), 0);
        kiln_schedule_destroy(s);
        kiln_jobs_destroy(jobs);
        kiln_world_destroy(f.world);
    }
}

/* A worker system spawns through its buffer; a later stage finds the entity. */
typedef struct spawn_chain {
    kiln_component p;
    kiln_commands *spawner_buffer;
    kiln_entity placeholder;
    kiln_query *query;
    int64_t rows_seen[8];
    kiln_entity resolved[8];
    bool resolved_alive[8];
    int frame;
    atomic_int errors;
} spawn_chain;

static void chain_spawn(const kiln_system_ctx *ctx) {
    spawn_chain *c = ctx->user;
    c->spawner_buffer = ctx->commands;
    EXPECT_OK(&c->errors, kiln_commands_spawn(ctx->commands, &c->placeholder));
    EXPECT_OK(&c->errors, kiln_commands_add(ctx->commands, c->placeholder, c->p,
                                            &(test_position){7.0f, (float)c->frame}));
    /* nothing has landed yet */
    if (kiln_query_count(c->query) != c->frame - 1) atomic_fetch_add(&c->errors, 1);
}

static void chain_find(const kiln_system_ctx *ctx) {
    spawn_chain *c = ctx->user;
    kiln_iter it;
    int64_t rows = 0;
    kiln_query_iter(c->query, &it);
    while (kiln_query_next(&it)) rows += it.count;
    c->rows_seen[c->frame] = rows;
    kiln_entity e = kiln_commands_resolve(c->spawner_buffer, c->placeholder);
    c->resolved[c->frame] = e;
    c->resolved_alive[c->frame] = holds(ctx->world, e, c->p, 7.0f, (float)c->frame);
}

KILN_TEST(running, a_system_sees_entities_spawned_through_buffers_in_an_earlier_stage) {
    const int32_t counts[] = {KILN_JOBS_INLINE, 2};
    for (int k = 0; k < 2; k++) {
        fixture f = fixture_make();
        kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = counts[k]});
        kiln_schedule *s = kiln_schedule_create(f.world, &(kiln_schedule_desc){.jobs = jobs});
        spawn_chain c = {.p = f.p};
        ck_assert_int_eq(kiln_query_create(f.world, &(kiln_query_desc){.with = {f.p}}, &c.query),
                         KILN_OK);
        add_system(s, (kiln_system_desc){.name = "find", .run = chain_find, .user = &c,
                                         .reads = {f.p}, .after = {"spawn"}});
        add_system(s, (kiln_system_desc){.name = "spawn", .run = chain_spawn, .user = &c});
        add_system(s, (kiln_system_desc){.name = "idle", .run = noop});
        for (c.frame = 1; c.frame <= 5; c.frame++) {
            ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
            ck_assert_int_eq(c.rows_seen[c.frame], c.frame);
            ck_assert(c.resolved_alive[c.frame]);
        }
        ck_assert_int_eq(kiln_entity_count(f.world), 5);
        ck_assert_int_eq(loaded(&c.errors), 0);
        for (int i = 1; i <= 5; i++)
            for (int j = 1; j < i; j++) ck_assert(c.resolved[i] != c.resolved[j]);
        kiln_query_destroy(c.query);
        kiln_schedule_destroy(s);
        kiln_jobs_destroy(jobs);
        kiln_world_destroy(f.world);
    }
}

/* A main-thread system that uses the plain world API inside a schedule. */
typedef struct plain_probe {
    kiln_component p, q;
    kiln_entity spawned;
    kiln_entity existing, doomed;
    bool handle_at_once, alive_inside, deferred, buffered, has_q_inside, doomed_alive_inside;
    bool later_sees_spawn, later_sees_add, later_sees_despawn;
} plain_probe;

static void plain_main(const kiln_system_ctx *ctx) {
    plain_probe *pp = ctx->user;
    kiln_world *w = ctx->world;
    pp->deferred = kiln_is_deferred(w);
    ck_assert_int_eq(kiln_spawn(w, &pp->spawned), KILN_OK);
    pp->handle_at_once = pp->spawned != KILN_NULL_ENTITY && !kiln_is_placeholder(pp->spawned);
    pp->alive_inside = kiln_is_alive(w, pp->spawned);
    ck_assert_int_eq(kiln_add(w, pp->spawned, pp->p, &(test_position){3.0f, 4.0f}), KILN_OK);
    ck_assert_int_eq(kiln_add(w, pp->existing, pp->q, &(test_velocity){1.0f, 1.0f}), KILN_OK);
    pp->has_q_inside = kiln_has(w, pp->existing, pp->q);
    ck_assert_int_eq(kiln_despawn(w, pp->doomed), KILN_OK);
    pp->doomed_alive_inside = kiln_is_alive(w, pp->doomed);
    pp->buffered = kiln_commands_count(ctx->commands) > 0;
}

static void plain_later(const kiln_system_ctx *ctx) {
    plain_probe *pp = ctx->user;
    pp->later_sees_spawn = holds(ctx->world, pp->spawned, pp->p, 3.0f, 4.0f);
    pp->later_sees_add = kiln_has(ctx->world, pp->existing, pp->q);
    pp->later_sees_despawn = !kiln_is_alive(ctx->world, pp->doomed);
}

KILN_TEST(running, main_thread_systems_using_the_plain_world_api_are_deferred_into_their_own_buffer) {
    enum { NO_POOL = -100 };
    const int32_t counts[] = {NO_POOL, KILN_JOBS_INLINE, 2};
    for (int k = 0; k < 3; k++) {
        fixture f = fixture_make();
        kiln_jobs *jobs =
            counts[k] == NO_POOL ? NULL : kiln_jobs_create(&(kiln_jobs_desc){.workers = counts[k]});
        kiln_schedule *s = kiln_schedule_create(f.world, &(kiln_schedule_desc){.jobs = jobs});
        plain_probe pp = {.p = f.p, .q = f.q};
        ck_assert_int_eq(kiln_spawn(f.world, &pp.existing), KILN_OK);
        ck_assert_int_eq(kiln_spawn(f.world, &pp.doomed), KILN_OK);
        add_system(s, (kiln_system_desc){.name = "plain", .run = plain_main, .user = &pp,
                                         .main_thread = true});
        add_system(s, (kiln_system_desc){.name = "worker", .run = spin_300us});
        add_system(s, (kiln_system_desc){.name = "later", .run = plain_later, .user = &pp,
                                         .after = {"plain"}, .main_thread = true});
        ck_assert_int_eq(kiln_schedule_stage_count(s), 2);
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        ck_assert(pp.deferred);
        ck_assert(pp.handle_at_once);
        ck_assert(!pp.alive_inside);
        ck_assert(!pp.has_q_inside);
        ck_assert(pp.doomed_alive_inside);
        ck_assert(pp.buffered);
        /* the buffer landed at the end of the stage, before the next one */
        ck_assert(pp.later_sees_spawn);
        ck_assert(pp.later_sees_add);
        ck_assert(pp.later_sees_despawn);
        ck_assert(!kiln_is_deferred(f.world));
        ck_assert(kiln_is_alive(f.world, pp.spawned));
        ck_assert_int_eq(kiln_entity_count(f.world), 2);
        /* outside a schedule the plain API is immediate again */
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn(f.world, &e), KILN_OK);
        ck_assert(kiln_is_alive(f.world, e));
        kiln_schedule_destroy(s);
        kiln_jobs_destroy(jobs);
        kiln_world_destroy(f.world);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* determinism                                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef struct life {
    int32_t hp;
    int32_t age;
} life;

typedef struct serial {
    uint32_t id;
    uint32_t origin;
} serial;

typedef struct sim {
    kiln_world *world;
    kiln_component pos, vel, life, serial, far, tagged;
    kiln_query *moving;   /* Position, Velocity */
    kiln_query *vels;     /* Velocity */
    kiln_query *lives;    /* Life */
    kiln_query *near;     /* Position, without Far */
    kiln_query *far_away; /* Position, Far */
    kiln_query *serials;  /* Serial */
    uint32_t serial_a, serial_b, frame;
    kiln_entity *scratch;
    int64_t scratch_cap;
    int64_t spawned, despawned;
    int64_t far_seen;
    atomic_int errors;
} sim;

static void sim_spawn_a(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    for (int i = 0; i < 4; i++) {
        uint32_t n = m->serial_a++;
        kiln_entity ph;
        EXPECT_OK(&m->errors, kiln_commands_spawn(ctx->commands, &ph));
        test_position p = {(float)(n % 17) - 8.0f, (float)(n % 5)};
        test_velocity v = {((float)(n % 7) - 3.0f) * 0.5f, ((float)(n % 3) - 1.0f) * 0.25f};
        life l = {20 + (int32_t)(n % 30), 0};
        serial s = {n, 1};
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->pos, &p));
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->vel, &v));
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->life, &l));
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->serial, &s));
    }
}

static void sim_spawn_b(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    for (int i = 0; i < 2; i++) {
        uint32_t n = m->serial_b++;
        kiln_entity ph;
        EXPECT_OK(&m->errors, kiln_commands_spawn(ctx->commands, &ph));
        test_position p = {(float)(n % 9) - 4.0f, -(float)(n % 4)};
        life l = {10 + (int32_t)(n % 40), 0};
        serial s = {n, 2};
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->pos, &p));
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->life, &l));
        EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, ph, m->serial, &s));
    }
}

static void move_rows(kiln_iter *view, void *user) {
    const double *dt = user;
    test_position *p = kiln_iter_column(view, 0);
    const test_velocity *v = kiln_iter_column(view, 1);
    for (int32_t r = 0; r < view->count; r++) {
        p[r].x += v[r].x * (float)*dt;
        p[r].y += v[r].y * (float)*dt;
        kiln_iter_mark_changed(view, 0, r);
    }
}

static void sim_move(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    double dt = ctx->dt;
    EXPECT_OK(&m->errors, kiln_parallel_for(ctx->jobs, m->moving, 8, move_rows, &dt));
}

static void gravity_rows(kiln_iter *view, void *user) {
    (void)user;
    test_velocity *v = kiln_iter_column(view, 0);
    for (int32_t r = 0; r < view->count; r++) {
        v[r].y -= 0.125f;
        if (v[r].y < -2.0f) v[r].y = 2.0f;
        kiln_iter_mark_changed(view, 0, r);
    }
}

static void sim_gravity(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    EXPECT_OK(&m->errors, kiln_parallel_for(ctx->jobs, m->vels, 8, gravity_rows, NULL));
}

static void age_rows(kiln_iter *view, void *user) {
    (void)user;
    life *l = kiln_iter_column(view, 0);
    for (int32_t r = 0; r < view->count; r++) {
        l[r].age++;
        if (l[r].age % 3 == 0) l[r].hp -= 1 + (int32_t)(kiln_entity_index(view->entities[r]) % 2);
        kiln_iter_mark_changed(view, 0, r);
    }
}

static void sim_age(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    EXPECT_OK(&m->errors, kiln_parallel_for(ctx->jobs, m->lives, 8, age_rows, NULL));
}

/* Despawns the dead through the buffer. */
static void sim_reap(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    kiln_iter it;
    kiln_query_iter(m->lives, &it);
    while (kiln_query_next(&it)) {
        const life *l = kiln_iter_column(&it, 0);
        for (int32_t r = 0; r < it.count; r++)
            if (l[r].hp <= 0 || l[r].age > 45) {
                EXPECT_OK(&m->errors, kiln_commands_despawn(ctx->commands, it.entities[r]));
                m->despawned++;
            }
    }
}

/* Tags entities that wandered far and takes their velocity away. */
static void sim_far(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    kiln_iter it;
    kiln_query_iter(m->near, &it);
    while (kiln_query_next(&it)) {
        const test_position *p = kiln_iter_column(&it, 0);
        for (int32_t r = 0; r < it.count; r++)
            if (p[r].x > 6.0f || p[r].x < -6.0f) {
                EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, it.entities[r], m->far, NULL));
                EXPECT_OK(&m->errors, kiln_commands_remove(ctx->commands, it.entities[r], m->vel));
            }
    }
}

/* Sends far entities home: a velocity towards the origin, the tag removed. */
static void sim_home(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    kiln_iter it;
    kiln_query_iter(m->far_away, &it);
    while (kiln_query_next(&it)) {
        const test_position *p = kiln_iter_column(&it, 0);
        for (int32_t r = 0; r < it.count; r++) {
            m->far_seen++;
            test_velocity v = {p[r].x > 0.0f ? -1.5f : 1.5f, 0.5f};
            EXPECT_OK(&m->errors, kiln_commands_add(ctx->commands, it.entities[r], m->vel, &v));
            EXPECT_OK(&m->errors, kiln_commands_remove(ctx->commands, it.entities[r], m->far));
        }
    }
}

/* The plain world API from the main thread: spawns, tags, untags and despawns. */
static void sim_main(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    kiln_world *w = ctx->world;
    m->frame++;
    if (m->frame % 3 == 0) {
        kiln_entity e;
        EXPECT_OK(&m->errors, kiln_spawn(w, &e));
        EXPECT_OK(&m->errors, kiln_add(w, e, m->pos, &(test_position){0.5f, (float)m->frame}));
        EXPECT_OK(&m->errors, kiln_add(w, e, m->tagged, NULL));
        m->spawned++;
    }
    kiln_iter it;
    kiln_query_iter(m->serials, &it);
    while (kiln_query_next(&it)) {
        const serial *s = kiln_iter_column(&it, 0);
        for (int32_t r = 0; r < it.count; r++) {
            kiln_entity e = it.entities[r];
            if (s[r].id % 11 == m->frame % 11) {
                EXPECT_OK(&m->errors, kiln_add(w, e, m->tagged, NULL));
            } else if (s[r].id % 7 == m->frame % 7) {
                EXPECT_OK(&m->errors, kiln_remove(w, e, m->tagged, NULL));
            }
            if (s[r].origin == 2 && s[r].id % 13 == m->frame % 13) {
                EXPECT_OK(&m->errors, kiln_despawn(w, e));
                m->despawned++;
            }
        }
    }
}

/* Exclusive: despawns old tagged entities directly. */
static void sim_cull(const kiln_system_ctx *ctx) {
    sim *m = ctx->user;
    kiln_world *w = ctx->world;
    int64_t n = 0;
    kiln_iter it;
    kiln_query_iter(m->lives, &it);
    while (kiln_query_next(&it)) {
        const life *l = kiln_iter_column(&it, 0);
        for (int32_t r = 0; r < it.count; r++)
            if (l[r].age > 30 && kiln_has(w, it.entities[r], m->tagged)) {
                if (n == m->scratch_cap) {
                    m->scratch_cap = m->scratch_cap ? m->scratch_cap * 2 : 64;
                    m->scratch = realloc(m->scratch, sizeof(kiln_entity) * (size_t)m->scratch_cap);
                    if (m->scratch == NULL) abort();
                }
                m->scratch[n++] = it.entities[r];
            }
    }
    for (int64_t i = 0; i < n; i++) EXPECT_OK(&m->errors, kiln_despawn(w, m->scratch[i]));
    m->despawned += n;
}

static kiln_component register_plain(kiln_world *w, const char *name, size_t size) {
    kiln_component id;
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = name, .size = size},
                                             &id),
                     KILN_OK);
    return id;
}

static kiln_query *query_make(kiln_world *w, kiln_query_desc desc) {
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(w, &desc, &q), KILN_OK);
    return q;
}

static uint64_t fnv(uint64_t h, const void *data, size_t size) {
    const uint8_t *b = data;
    for (size_t i = 0; i < size; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Hashes every live entity handle and, per registered component, presence, value bytes and
 * change tick, in the world's own listing order. */
static uint64_t world_checksum(const kiln_world *w) {
    int64_t n = kiln_world_entities(w, NULL, 0);
    kiln_entity *list = malloc(sizeof(kiln_entity) * (size_t)(n ? n : 1));
    ck_assert_ptr_nonnull(list);
    ck_assert_int_eq(kiln_world_entities(w, list, n), n);
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, &n, sizeof n);
    int32_t components = kiln_component_count(w);
    size_t sizes[16];
    ck_assert_int_lt(components, 16);
    for (kiln_component c = 1; c <= (kiln_component)components; c++) {
        kiln_component_info info;
        ck_assert(kiln_component_info_get(w, c, &info));
        sizes[c] = info.size;
    }
    for (int64_t i = 0; i < n; i++) {
        h = fnv(h, &list[i], sizeof list[i]);
        for (kiln_component c = 1; c <= (kiln_component)components; c++) {
            if (!kiln_has(w, list[i], c)) continue;
            h = fnv(h, &c, sizeof c);
            const void *value = kiln_get(w, list[i], c);
            if (value) h = fnv(h, value, sizes[c]);
            kiln_tick t = kiln_changed_tick(w, list[i], c);
            h = fnv(h, &t, sizeof t);
        }
    }
    free(list);
    return h;
}

#define SIM_FRAMES 200

typedef struct sim_result {
    uint64_t checksums[SIM_FRAMES];
    int64_t entities, spawned, despawned, far_seen, errors;
    int32_t stages;
    char stages_text[512];
} sim_result;

static void simulate(int32_t workers, sim_result *out) {
    kiln_jobs *jobs = workers < 0 ? NULL : kiln_jobs_create(&(kiln_jobs_desc){.workers = workers});
    sim m;
    memset(&m, 0, sizeof m);
    kiln_world *w = m.world = kiln_world_create(NULL);
    m.pos = test_register_position(w);
    m.vel = test_register_velocity(w);
    m.life = register_plain(w, "Life", sizeof(life));
    m.serial = register_plain(w, "Serial", sizeof(serial));
    m.far = test_register_tag(w, "Far");
    m.tagged = test_register_tag(w, "Tagged");
    m.moving = query_make(w, (kiln_query_desc){.with = {m.pos, m.vel}});
    m.vels = query_make(w, (kiln_query_desc){.with = {m.vel}});
    m.lives = query_make(w, (kiln_query_desc){.with = {m.life}});
    m.near = query_make(w, (kiln_query_desc){.with = {m.pos}, .without = {m.far}});
    m.far_away = query_make(w, (kiln_query_desc){.with = {m.pos, m.far}});
    m.serials = query_make(w, (kiln_query_desc){.with = {m.serial}});

    kiln_schedule *s = kiln_schedule_create(w, &(kiln_schedule_desc){.jobs = jobs});
    add_system(s, (kiln_system_desc){.name = "spawn_a", .run = sim_spawn_a, .user = &m});
    add_system(s, (kiln_system_desc){.name = "spawn_b", .run = sim_spawn_b, .user = &m});
    add_system(s, (kiln_system_desc){.name = "move", .run = sim_move, .user = &m,
                                     .reads = {m.vel}, .writes = {m.pos}});
    add_system(s, (kiln_system_desc){.name = "gravity", .run = sim_gravity, .user = &m,
                                     .writes = {m.vel}});
    add_system(s, (kiln_system_desc){.name = "age", .run = sim_age, .user = &m,
                                     .writes = {m.life}});
    add_system(s, (kiln_system_desc){.name = "reap", .run = sim_reap, .user = &m,
                                     .reads = {m.life}});
    add_system(s, (kiln_system_desc){.name = "far", .run = sim_far, .user = &m,
                                     .reads = {m.pos}});
    add_system(s, (kiln_system_desc){.name = "home", .run = sim_home, .user = &m,
                                     .reads = {m.pos}});
    add_system(s, (kiln_system_desc){.name = "main", .run = sim_main, .user = &m,
                                     .reads = {m.serial}, .main_thread = true});
    add_system(s, (kiln_system_desc){.name = "cull", .run = sim_cull, .user = &m,
                                     .exclusive = true, .before = {"spawn_a"}});
    out->stages = kiln_schedule_stage_count(s);
    snprintf(out->stages_text, sizeof out->stages_text, "%s", describe(s));
    for (int frame = 0; frame < SIM_FRAMES; frame++) {
        ck_assert_int_eq(kiln_schedule_run(s, 0.5), KILN_OK);
        out->checksums[frame] = world_checksum(w);
    }
    out->entities = kiln_entity_count(w);
    out->spawned = m.spawned + m.serial_a + m.serial_b;
    out->despawned = m.despawned;
    out->far_seen = m.far_seen;
    out->errors = atomic_load(&m.errors);
    kiln_schedule_destroy(s);
    kiln_query_destroy(m.moving);
    kiln_query_destroy(m.vels);
    kiln_query_destroy(m.lives);
    kiln_query_destroy(m.near);
    kiln_query_destroy(m.far_away);
    kiln_query_destroy(m.serials);
    kiln_world_destroy(w);
    kiln_jobs_destroy(jobs);
    free(m.scratch);
}

KILN_TEST_GROUP_WITH(determinism, .timeout = 120);

KILN_TEST(determinism, a_schedule_gives_byte_identical_worlds_whatever_the_worker_count) {
    static sim_result base, other;
    simulate(0, &base);
    /* the run did real work: spawns, despawns, far trips, several multi-system stages */
    ck_assert_int_ge(base.stages, 4);
    ck_assert_int_gt(base.entities, 100);
    ck_assert_int_gt(base.despawned, 200);
    ck_assert_int_gt(base.far_seen, 0);
    ck_assert_int_eq(base.errors, 0);
    const int32_t counts[] = {2, 3, -1};
    for (int k = 0; k < 3; k++) {
        simulate(counts[k], &other);
        ck_assert_str_eq(other.stages_text, base.stages_text);
        for (int frame = 0; frame < SIM_FRAMES; frame++)
            ck_assert_msg(other.checksums[frame] == base.checksums[frame],
                          "workers %d: the world differs from the inline one at frame %d",
                          (int)counts[k], frame);
        ck_assert_int_eq(other.errors, 0);
        ck_assert_int_eq(other.entities, base.entities);
        ck_assert_int_eq(other.despawned, base.despawned);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* runner                                                                                     */
/* ------------------------------------------------------------------------------------------ */
