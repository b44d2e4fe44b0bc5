/* test_schedule_run.c: Check suite for running a schedule: threads, enabling, system info, the
 * tick, the system context and per-system buffers applied in declaration order. */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_fixture.h"
#include "kiln.h"
#include "schedule_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* The fixture world (schedule_fixture.h), made afresh around every test of a group using it. */
static schedule_fixture F;

static void setup(void) { schedule_fixture_setup(&F); }

static void teardown(void) { schedule_fixture_teardown(&F); }

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
    if (l->spin) test_spin_ns(l->spin);
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

KILN_TEST_GROUP_WITH(running, .setup = setup, .teardown = teardown, .timeout = 30);

KILN_TEST(running, main_thread_systems_run_on_the_calling_thread_even_with_workers) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
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
    test_spin_ns(300000);
}

KILN_TEST(running, system_info_reports_declaration_stage_flags_and_timings) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    add_system(s, (kiln_system_desc){.name = "slow", .run = spin_300us, .writes = {F.p}});
    add_system(s, (kiln_system_desc){.name = "main", .run = spin_300us, .main_thread = true,
                                     .reads = {F.p}});
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
}

KILN_TEST(running, adding_a_system_after_a_run_rebuilds_the_stages_on_the_next_run) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    int a_runs = 0, b_runs = 0;
    add_system(s, (kiln_system_desc){.name = "a", .run = count_run, .user = &a_runs,
                                     .writes = {F.p}});
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(stage_of(s, "a"), 0);
    add_system(s, (kiln_system_desc){.name = "b", .run = count_run, .user = &b_runs,
                                     .reads = {F.p}});
    ck_assert_int_eq(kiln_schedule_system_count(s), 2);
    ck_assert_int_eq(stage_of(s, "a"), -1); /* not built since the add */
    ck_assert_int_eq(stage_of(s, "b"), -1);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(a_runs, 2);
    ck_assert_int_eq(b_runs, 1);
    ck_assert_int_eq(stage_of(s, "b"), 1);
    ck_assert_str_eq(describe(s), "stage 0: a\nstage 1: b\n");
    kiln_schedule_destroy(s);
}

KILN_TEST(running, find_returns_the_declaration_index_or_minus_one) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
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
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    tick_probe t[5] = {{0, 0}};
    add_system(s, (kiln_system_desc){.name = "w", .run = record_tick, .user = &t[0],
                                     .writes = {F.p}});
    add_system(s, (kiln_system_desc){.name = "w2", .run = record_tick, .user = &t[1],
                                     .writes = {F.q}});
    add_system(s, (kiln_system_desc){.name = "r", .run = record_tick, .user = &t[2],
                                     .reads = {F.p}, .main_thread = true});
    add_system(s, (kiln_system_desc){.name = "x", .run = record_tick, .user = &t[3],
                                     .exclusive = true});
    add_system(s, (kiln_system_desc){.name = "last", .run = record_tick, .user = &t[4]});
    ck_assert_int_eq(kiln_schedule_stage_count(s), 4);
    for (int frame = 1; frame <= 5; frame++) {
        kiln_tick before = kiln_tick_current(F.world);
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        ck_assert_uint_eq(kiln_tick_current(F.world), before + 1);
        for (int i = 0; i < 5; i++) {
            ck_assert_int_eq(t[i].runs, frame);
            ck_assert_uint_eq(t[i].seen, before + 1);
        }
    }
    /* even a schedule without systems advances it */
    kiln_schedule *empty = kiln_schedule_create(F.world, NULL);
    kiln_tick before = kiln_tick_current(F.world);
    ck_assert_int_eq(kiln_schedule_run(empty, 0.0), KILN_OK);
    ck_assert_uint_eq(kiln_tick_current(F.world), before + 1);
    kiln_schedule_destroy(empty);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
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
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *pooled = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    kiln_schedule *inline_s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = NULL});
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
        ck_assert_ptr_eq(c[i].world, F.world);
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

/* holds, read through kiln_get_many (on workers too) */
static bool holds_many(const kiln_world *w, kiln_entity e, kiln_component p, float x, float y) {
    const void *value = NULL;
    if (kiln_get_many(w, &e, 1, p, &value) != 1) return false;
    const test_position *v = value;
    return v->x == x && v->y == y;
}

static void racer_run(const kiln_system_ctx *ctx) {
    racer *me = ctx->user;
    race *r = me->r;
    float frame = (float)r->frame;
    /* at the start of the stage every entity still holds last frame's final values */
    if (!holds(ctx->world, r->e1, r->p, 2.0f, frame - 1.0f)) atomic_fetch_add(&r->stale_reads, 1);
    if (!holds_many(ctx->world, r->e1, r->p, 2.0f, frame - 1.0f))
        atomic_fetch_add(&r->stale_reads, 1);
    if ((r->frame % 2 == 1) == me->slow_on_odd) test_spin_ns(2000000);
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
        schedule_fixture f;
        schedule_fixture_setup(&f);
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
        /* each reads Position (checked in debug builds); writes go through buffers */
        add_system(s, (kiln_system_desc){.name = "one", .run = racer_run, .user = &one,
                                         .reads = {f.p}});
        add_system(s, (kiln_system_desc){.name = "two", .run = racer_run, .user = &two,
                                         .reads = {f.p}});
        add_system(s, (kiln_system_desc){.name = "three", .run = racer_run, .user = &three,
                                         .reads = {f.p}, .main_thread = true});
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
        schedule_fixture f;
        schedule_fixture_setup(&f);
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
    const int32_t counts[] = {NO_POOL, KILN_JOBS_INLINE, 2};
    for (int k = 0; k < 3; k++) {
        schedule_fixture f;
        schedule_fixture_setup(&f);
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
                                         .reads = {f.p}, .after = {"plain"},
                                         .main_thread = true});
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

/* A main-thread system that applies a buffer itself, in a stage where a worker system holds a
 * value it read: the apply (not deferred like the plain API) would grow the column under the
 * worker, so it aborts. The two meet through flags, so the apply comes while the worker holds
 * its pointer. */
typedef struct apply_probe {
    kiln_component p;
    kiln_entity e;
    atomic_int read, applied;
    float seen;
} apply_probe;

static void hold_a_value(const kiln_system_ctx *ctx) {
    apply_probe *ap = ctx->user;
    const float *v = kiln_get(ctx->world, ap->e, ap->p);
    atomic_store(&ap->read, 1);
    while (!atomic_load(&ap->applied)) sched_yield();
    ap->seen = v ? v[0] : -1.0f; /* freed by the growth had the apply gone through */
}

static void apply_own_buffer(const kiln_system_ctx *ctx) {
    apply_probe *ap = ctx->user;
    while (!atomic_load(&ap->read)) sched_yield();
    for (int i = 0; i < 64; i++) {
        kiln_entity ph;
        kiln_commands_spawn(ctx->commands, &ph);
        kiln_commands_add(ctx->commands, ph, ap->p, (float[2]){2, 2});
    }
    kiln_commands_apply(ctx->commands, ctx->world, NULL);
    atomic_store(&ap->applied, 1);
}

KILN_TEST_SIGNAL(running, applying_a_buffer_from_a_system_beside_others_aborts, SIGABRT) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    static apply_probe ap;
    ap.p = F.p;
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(kiln_spawn_with(F.world, &F.p, (const void *[]){(float[2]){1, 1}}, 1, &ap.e),
                         KILN_OK);
    add_system(s, (kiln_system_desc){.name = "holder", .run = hold_a_value, .user = &ap,
                                     .reads = {F.p}});
    add_system(s, (kiln_system_desc){.name = "applier", .run = apply_own_buffer, .user = &ap,
                                     .main_thread = true});
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    kiln_schedule_run(s, 0.0);
}

/* A system that returns with a kiln_defer_begin unmatched would keep the world deferred for
 * good. The run ends what it left open (so what it queued lands), fails naming it, and the
 * world works after: structural calls are immediate again, and the next run is clean. */
typedef struct leak_probe {
    int sections;
    bool spawn; /* on the main thread: a spawn in the open section */
    kiln_entity spawned;
} leak_probe;

static void leave_sections_open(const kiln_system_ctx *ctx) {
    leak_probe *lp = ctx->user;
    for (int i = 0; i < lp->sections; i++) kiln_defer_begin(ctx->world);
    if (lp->spawn && lp->spawned == KILN_NULL_ENTITY) kiln_spawn(ctx->world, &lp->spawned);
}

KILN_TEST(running, a_system_leaving_a_deferred_section_open_fails_the_run_and_the_world_works_after) {
    static const struct {
        bool exclusive, main_thread, pool;
        int sections;
    } cases[] = {{false, true, false, 1}, {true, false, false, 2}, {false, false, true, 1}};
    for (int k = 0; k < 3; k++) {
        schedule_fixture f;
        schedule_fixture_setup(&f);
        kiln_jobs *jobs = cases[k].pool ? kiln_jobs_create(&(kiln_jobs_desc){.workers = 2}) : NULL;
        kiln_schedule *s = kiln_schedule_create(f.world, &(kiln_schedule_desc){.jobs = jobs});
        leak_probe lp = {.sections = cases[k].sections, .spawn = !cases[k].pool};
        add_system(s, (kiln_system_desc){.name = "leaky", .run = leave_sections_open, .user = &lp,
                                         .exclusive = cases[k].exclusive, .main_thread = cases[k].main_thread});
        add_system(s, (kiln_system_desc){.name = "beside", .run = spin_300us});
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_ERR_INVALID_ARGUMENT);
        char want[160];
        snprintf(want, sizeof want, "kiln_schedule_run: system 'leaky' returned with %d deferred section%s left open",
                 cases[k].sections, cases[k].sections > 1 ? "s" : "");
        ck_assert_msg(strncmp(kiln_world_error(f.world), want, strlen(want)) == 0, "case %d: %s", k,
                      kiln_world_error(f.world));
        ck_assert_msg(!kiln_is_deferred(f.world), "case %d: the world stayed deferred", k);
        if (lp.spawn) ck_assert(kiln_is_alive(f.world, lp.spawned)); /* what it queued landed */
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn(f.world, &e), KILN_OK);
        ck_assert(kiln_is_alive(f.world, e));
        lp.sections = 0;
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        ck_assert(!kiln_is_deferred(f.world));
        kiln_schedule_destroy(s);
        kiln_jobs_destroy(jobs);
        kiln_world_destroy(f.world);
    }
}

/* A system that starts an iteration and returns without finishing it leaves the world's
 * iteration count raised, its iterator gone with its stack: every later structural call and
 * run would be refused for good. The run ends it, fails naming the system and the query, and
 * the world works after. */
typedef struct open_loop {
    kiln_query *query;
    bool leave_open;
    bool spawn; /* on the main thread: a spawn queued in the open loop */
    kiln_entity spawned;
} open_loop;

static void leave_loop_open(const kiln_system_ctx *ctx) {
    open_loop *ol = ctx->user;
    kiln_iter it;
    kiln_query_iter(ol->query, &it);
    if (ol->spawn && ol->spawned == KILN_NULL_ENTITY) kiln_spawn(ctx->world, &ol->spawned);
    if (!ol->leave_open) kiln_iter_fini(&it);
}

KILN_TEST(running, a_system_leaving_an_iteration_open_fails_the_run_naming_the_query_and_the_world_works_after) {
    static const struct {
        bool exclusive, main_thread, pool;
    } cases[] = {{false, true, false}, {true, false, false}, {false, false, true}};
    for (int k = 0; k < 3; k++) {
        schedule_fixture f;
        schedule_fixture_setup(&f);
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(f.world, (kiln_component[]){f.p, f.q}, NULL, 2, &e), KILN_OK);
        kiln_query *q;
        ck_assert_int_eq(kiln_query_create(f.world, &(kiln_query_desc){.with = {f.p, f.q}, .without = {f.r}}, &q),
                         KILN_OK);
        kiln_jobs *jobs = cases[k].pool ? kiln_jobs_create(&(kiln_jobs_desc){.workers = 2}) : NULL;
        kiln_schedule *s = kiln_schedule_create(f.world, &(kiln_schedule_desc){.jobs = jobs});
        open_loop ol = {.query = q, .leave_open = true, .spawn = !cases[k].pool};
        add_system(s, (kiln_system_desc){.name = "open_loop", .run = leave_loop_open, .user = &ol,
                                         .reads = {f.p, f.q}, .exclusive = cases[k].exclusive,
                                         .main_thread = cases[k].main_thread});
        add_system(s, (kiln_system_desc){.name = "beside", .run = spin_300us});
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_ERR_INVALID_ARGUMENT);
        ck_assert_str_eq(kiln_world_error(f.world),
                         "kiln_schedule_run: system 'open_loop' returned with 1 iteration of [Position, "
                         "Velocity, without Rotation] not finished (kiln_query_next to false, or "
                         "kiln_iter_fini); ended now");
        ck_assert_msg(!kiln_is_deferred(f.world), "case %d: the world stayed deferred", k);
        if (ol.spawn) ck_assert(kiln_is_alive(f.world, ol.spawned)); /* what it queued landed */
        ck_assert_int_eq(kiln_despawn(f.world, e), KILN_OK); /* immediate: not iterating */
        ck_assert(!kiln_is_alive(f.world, e));
        ol.leave_open = false;
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        kiln_schedule_destroy(s);
        kiln_query_destroy(q); /* its own count is back to 0 too */
        kiln_jobs_destroy(jobs);
        kiln_world_destroy(f.world);
    }
}

/* A system's buffer belongs to its schedule, which applies it after the system returns: a
 * destroy from the system would leave the schedule a freed buffer, so it asserts. */
static void destroy_own_buffer(const kiln_system_ctx *ctx) { kiln_commands_destroy(ctx->commands); }

KILN_TEST_SIGNAL(running, destroying_a_system_buffer_aborts_naming_the_call, SIGABRT) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    add_system(s, (kiln_system_desc){.name = "destroyer", .run = destroy_own_buffer});
    test_expect_abort("kiln_commands_destroy: the buffer is a system's own (ctx->commands)");
    kiln_schedule_run(s, 0.0);
}
