/* test_index_threads.c: Check suite for the world's indexes read from systems running at once
 * on a pool: two systems looking children up and one looking names up (all reading, so the
 * schedule runs them side by side) over entities that have both a Parent and a Name, after
 * frames that spawned and despawned trees, so each look-up has catching up to do. Each answer
 * is checked; under ThreadSanitizer (make test-tsan) the catch-ups must not race. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"
#include "transform_fixture.h"

enum { TREES = 96, KIDS = 3, FRAMES = 12 };

typedef struct forest {
    scene s;
    kiln_component name;
    kiln_entity root[TREES], kid[TREES][KIDS];
    atomic_int wrong;  /* answers that did not match */
    atomic_int looked; /* look-ups made */
} forest;

static void name_of(char *dest, size_t size, int tree, int k, int frame) {
    snprintf(dest, size, "t%d.%d.f%d", tree, k, frame);
}

/* Spawns tree t of this frame: a named root and its named children. */
static void plant(forest *f, int t, int frame) {
    kiln_local_transform l = sample_local(t);
    char text[32];
    f->root[t] = spawn_node(&f->s, KILN_NULL_ENTITY, &l);
    name_of(text, sizeof text, t, -1, frame);
    ck_assert_int_eq(kiln_name_set(f->s.world, f->root[t], text), KILN_OK);
    for (int k = 0; k < KIDS; k++) {
        f->kid[t][k] = spawn_node(&f->s, f->root[t], &l);
        name_of(text, sizeof text, t, k, frame);
        ck_assert_int_eq(kiln_name_set(f->s.world, f->kid[t][k], text), KILN_OK);
    }
}

static void check_children(const kiln_system_ctx *ctx, int from) {
    forest *f = ctx->user;
    for (int t = from; t < TREES; t += 2) {
        kiln_entity got[KIDS + 1];
        int32_t n = kiln_transform_children(ctx->world, f->root[t], got, KIDS + 1);
        bool ok = n == KIDS;
        for (int k = 0; ok && k < KIDS; k++) ok = got[0] == f->kid[t][k] || got[1] == f->kid[t][k] || got[2] == f->kid[t][k];
        if (!ok) atomic_fetch_add(&f->wrong, 1);
        atomic_fetch_add(&f->looked, 1);
    }
}

static void children_even(const kiln_system_ctx *ctx) { check_children(ctx, 0); }

static void children_odd(const kiln_system_ctx *ctx) { check_children(ctx, 1); }

static int frame_now;

static void names(const kiln_system_ctx *ctx) {
    forest *f = ctx->user;
    for (int t = 0; t < TREES; t++) {
        char text[32];
        name_of(text, sizeof text, t, t % KIDS, frame_now);
        if (kiln_name_lookup(ctx->world, text) != f->kid[t][t % KIDS]) atomic_fetch_add(&f->wrong, 1);
        atomic_fetch_add(&f->looked, 1);
    }
}

KILN_TEST_GROUP_WITH(index_threads, .timeout = 120);

KILN_TEST(index_threads, children_and_names_looked_up_by_systems_side_by_side_are_exact) {
    static forest f;
    memset(&f, 0, sizeof f);
    scene_open(&f.s);
    ck_assert_int_eq(kiln_name_init(f.s.world, &f.name), KILN_OK);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *sched = kiln_schedule_create(f.s.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_ptr_nonnull(sched);
    kiln_component parent = f.s.ids.parent;
    ck_assert_int_eq(kiln_schedule_add(sched, &(kiln_system_desc){.name = "even", .run = children_even, .user = &f,
                                                                 .reads = {parent}}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(sched, &(kiln_system_desc){.name = "odd", .run = children_odd, .user = &f,
                                                                 .reads = {parent}}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(sched, &(kiln_system_desc){.name = "names", .run = names, .user = &f,
                                                                 .reads = {f.name}}), KILN_OK);
    for (int t = 0; t < TREES; t++) plant(&f, t, 0);
    for (int frame = 0; frame < FRAMES; frame++) {
        if (frame > 0) /* a third of the trees go and come back renamed: rows came and left */
            for (int t = frame % 3; t < TREES; t += 3) {
                ck_assert_int_eq(kiln_transform_despawn_recursive(f.s.world, f.root[t]), KILN_OK);
                plant(&f, t, frame);
            }
        frame_now = frame;
        if (frame > 0) /* names of the trees that stayed keep their first frame */
            for (int t = 0; t < TREES; t++)
                if (t % 3 != frame % 3) {
                    char text[32];
                    const char *have = kiln_name_get(f.s.world, f.kid[t][t % KIDS]);
                    name_of(text, sizeof text, t, t % KIDS, frame);
                    if (strcmp(have, text) != 0)
                        ck_assert_int_eq(kiln_name_set(f.s.world, f.kid[t][t % KIDS], text), KILN_OK);
                }
        ck_assert_int_eq(kiln_schedule_run(sched, 0.0), KILN_OK);
        kiln_tick_advance(f.s.world);
    }
    ck_assert_int_eq(atomic_load(&f.looked), FRAMES * 2 * TREES);
    ck_assert_int_eq(atomic_load(&f.wrong), 0);
    kiln_schedule_destroy(sched);
    kiln_jobs_destroy(jobs);
    scene_close(&f.s);
}
