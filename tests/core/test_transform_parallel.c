/* test_transform_parallel.c: Check suite for propagation split over a job pool: over random
 * forests with changes it writes the serial run's matrices bit for bit, ticks and stats too. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"
#include "transform_fixture.h"

/* Big enough that roots split into several ranges (4096 rows or more each) and every level
 * into several jobs (2048 nodes or more each): half roots, then three layers. */
#define FOREST 40000
#define ROOTS (FOREST / 2)
#define LAYERS 3

/* A world built, changed and propagated in lockstep with another one. */
typedef struct twin {
    scene s;
    kiln_entity *h;  /* handle per forest index (dead after a despawn) */
    int n;
} twin;

/* A forest: ROOTS roots, then LAYERS layers where each entity's parent is in the layer above
 * (now and then any earlier entity); one in eleven without LocalTransform, tags spreading
 * the rows. Parents always come earlier, so changes below never close a cycle. */
static void forest_build(twin *t, uint32_t seed) {
    scene_open(&t->s);
    t->n = FOREST;
    t->h = calloc(FOREST + 64, sizeof(kiln_entity));
    ck_assert_ptr_nonnull(t->h);
    uint32_t st = seed;
    int layer = (FOREST - ROOTS) / LAYERS;
    for (int i = 0; i < FOREST; i++) {
        int d = i < ROOTS ? 0 : 1 + (i - ROOTS) / layer;
        kiln_component comps[2];
        const void *values[2];
        int32_t count = 0;
        kiln_local_transform local = sample_local(i % 61);
        kiln_parent link = {KILN_NULL_ENTITY};
        if (lcg_next(&st) % 11 != 0) {
            comps[count] = t->s.ids.local;
            values[count++] = &local;
        }
        if (d > 0) {
            int above = d == 1 ? 0 : ROOTS + (d - 2) * layer, size = d == 1 ? ROOTS : layer;
            int p = lcg_next(&st) % 16 == 0 ? (int)(lcg_next(&st) % (uint32_t)i)
                                            : above + (int)(lcg_next(&st) % (uint32_t)size);
            link.entity = t->h[p];
            comps[count] = t->s.ids.parent;
            values[count++] = &link;
        }
        if (count == 0) { /* a bare entity now and then: identity for its children */
            ck_assert_int_eq(kiln_spawn(t->s.world, &t->h[i]), KILN_OK);
        } else {
            ck_assert_int_eq(kiln_spawn_with(t->s.world, comps, values, count, &t->h[i]), KILN_OK);
        }
        if (i % 5 == 0)
            ck_assert_int_eq(kiln_add(t->s.world, t->h[i], t->s.tags[i % TAG_COUNT], NULL), KILN_OK);
    }
}

static void forest_free(twin *t) {
    free(t->h);
    scene_close(&t->s);
}

/* One frame of changes, the same in every twin given the same seed: moved locals, a few
 * reparentings (to earlier entities), a despawn and a spawn. */
static void forest_change(twin *t, uint32_t seed) {
    uint32_t st = seed;
    kiln_world *w = t->s.world;
    for (int k = 0; k < t->n / 6; k++) {
        int i = (int)(lcg_next(&st) % (uint32_t)t->n);
        kiln_local_transform *l = kiln_get_mut(w, t->h[i], t->s.ids.local);
        if (!l) continue;
        kiln_local_transform moved = *l;
        moved.position[0] += 0.25f;
        moved.rotation[3] *= 1.0f + 1e-3f * (float)(k % 3);
        ck_assert_int_eq(kiln_set(w, t->h[i], t->s.ids.local, &moved), KILN_OK);
    }
    for (int k = 0; k < 5; k++) {
        int i = 1 + (int)(lcg_next(&st) % (uint32_t)(t->n - 1));
        int p = (int)(lcg_next(&st) % (uint32_t)i);
        if (kiln_is_alive(w, t->h[i]) && kiln_is_alive(w, t->h[p]))
            ck_assert_int_eq(kiln_transform_set_parent(w, t->h[i], t->h[p]), KILN_OK);
    }
    int victim = (int)(lcg_next(&st) % (uint32_t)t->n);
    if (kiln_is_alive(w, t->h[victim])) ck_assert_int_eq(kiln_despawn(w, t->h[victim]), KILN_OK);
    if (t->n < FOREST + 64) {
        int p = (int)(lcg_next(&st) % (uint32_t)t->n);
        kiln_local_transform local = sample_local(t->n % 61);
        t->h[t->n] = spawn_node(&t->s, kiln_is_alive(w, t->h[p]) ? t->h[p] : KILN_NULL_ENTITY, &local);
        t->n++;
    }
}

/* Every entity of b has a's WorldTransform (or lacks it like a), bit for bit, with the same
 * change tick. */
static void assert_twins_equal(const twin *a, const twin *b, const char *when) {
    ck_assert_int_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        bool alive = kiln_is_alive(a->s.world, a->h[i]);
        ck_assert(alive == kiln_is_alive(b->s.world, b->h[i]));
        if (!alive) continue;
        const void *wa = kiln_get(a->s.world, a->h[i], a->s.ids.world);
        const void *wb = kiln_get(b->s.world, b->h[i], b->s.ids.world);
        ck_assert_msg((wa == NULL) == (wb == NULL), "%s: entity %d has a WorldTransform in one run only",
                      when, i);
        if (!wa) continue;
        ck_assert_msg(memcmp(wa, wb, sizeof(kiln_world_transform)) == 0,
                      "%s: entity %d differs from the serial run", when, i);
        ck_assert_msg(kiln_changed_tick(a->s.world, a->h[i], a->s.ids.world) ==
                          kiln_changed_tick(b->s.world, b->h[i], b->s.ids.world),
                      "%s: entity %d was written in one run only", when, i);
    }
}

static void assert_stats_equal(const kiln_transform_propagate_stats *a,
                               const kiln_transform_propagate_stats *b, const char *when) {
    ck_assert_msg(a->updated == b->updated && a->computed == b->computed && a->added == b->added,
                  "%s: serial updated %lld computed %lld added %lld, parallel %lld %lld %lld", when,
                  (long long)a->updated, (long long)a->computed, (long long)a->added,
                  (long long)b->updated, (long long)b->computed, (long long)b->added);
}

/* ------------------------------------------------------------------------------------------ */
/* parallel                                                                                   */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(parallel, .timeout = 120);

/* The serial world and a pool-driven twin, frame after frame, some frames deferred. */
static void run_lockstep(int32_t workers, uint32_t seed) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = workers});
    ck_assert_ptr_nonnull(jobs);
    twin serial, parallel;
    forest_build(&serial, seed);
    forest_build(&parallel, seed);
    for (int frame = 0; frame < 6; frame++) {
        char when[48];
        snprintf(when, sizeof when, "%d workers, frame %d", (int)workers, frame);
        kiln_tick_advance(serial.s.world);
        kiln_tick_advance(parallel.s.world);
        if (frame > 0) {
            forest_change(&serial, seed * 31u + (uint32_t)frame);
            forest_change(&parallel, seed * 31u + (uint32_t)frame);
        }
        bool deferred = frame % 3 == 2; /* missing WorldTransforms queued with their values */
        if (deferred) {
            kiln_defer_begin(serial.s.world);
            kiln_defer_begin(parallel.s.world);
        }
        kiln_transform_propagate_stats a, b;
        ck_assert_int_eq(kiln_transform_propagate(serial.s.world, &a), KILN_OK);
        ck_assert_int_eq(kiln_transform_propagate_parallel(parallel.s.world, jobs, &b), KILN_OK);
        if (deferred) {
            ck_assert_int_eq(kiln_defer_end(serial.s.world), KILN_OK);
            ck_assert_int_eq(kiln_defer_end(parallel.s.world), KILN_OK);
        }
        assert_stats_equal(&a, &b, when);
        ck_assert_int_gt(b.computed, frame == 0 ? FOREST / 2 : 100); /* real work was split */
        assert_twins_equal(&serial, &parallel, when);
    }
    forest_free(&serial);
    forest_free(&parallel);
    kiln_jobs_destroy(jobs);
}

KILN_TEST(parallel, one_worker_writes_the_serial_matrices_bit_for_bit_over_changing_forests) {
    run_lockstep(1, 7u);
}

KILN_TEST(parallel, three_workers_write_the_serial_matrices_bit_for_bit_over_changing_forests) {
    run_lockstep(3, 12345u);
}

KILN_TEST(parallel, an_unchanged_world_computes_and_writes_nothing_on_a_pool_and_moving_frames_allocate_nothing) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    ck_assert_ptr_nonnull(jobs);
    twin t;
    forest_build(&t, 99u);
    kiln_transform_propagate_stats stats;
    ck_assert_int_eq(kiln_transform_propagate_parallel(t.s.world, jobs, &stats), KILN_OK);
    ck_assert_int_gt(stats.added, FOREST / 2);
    kiln_tick_advance(t.s.world);
    ck_assert_int_eq(kiln_transform_propagate_parallel(t.s.world, jobs, &stats), KILN_OK);
    kiln_tick *before = malloc(sizeof(kiln_tick) * FOREST);
    ck_assert_ptr_nonnull(before);
    for (int i = 0; i < FOREST; i++) before[i] = kiln_changed_tick(t.s.world, t.h[i], t.s.ids.world);
    for (int frame = 0; frame < 3; frame++) {
        kiln_tick_advance(t.s.world);
        int64_t allocations = t.s.alloc.allocations;
        ck_assert_int_eq(kiln_transform_propagate_parallel(t.s.world, jobs, &stats), KILN_OK);
        ck_assert_int_eq(stats.computed, 0);
        ck_assert_int_eq(stats.updated, 0);
        ck_assert_int_eq(stats.added, 0);
        ck_assert_int_eq(t.s.alloc.allocations, allocations);
    }
    for (int i = 0; i < FOREST; i++)
        ck_assert_uint_eq(kiln_changed_tick(t.s.world, t.h[i], t.s.ids.world), before[i]);
    /* rewriting locals with their own values recomputes them and still writes nothing */
    kiln_tick_advance(t.s.world);
    for (int i = 0; i < FOREST; i += 3) {
        const kiln_local_transform *l = kiln_get(t.s.world, t.h[i], t.s.ids.local);
        if (l) {
            kiln_local_transform same = *l;
            ck_assert_int_eq(kiln_set(t.s.world, t.h[i], t.s.ids.local, &same), KILN_OK);
        }
    }
    ck_assert_int_eq(kiln_transform_propagate_parallel(t.s.world, jobs, &stats), KILN_OK);
    ck_assert_int_gt(stats.computed, FOREST / 4);
    ck_assert_int_eq(stats.updated, 0);
    for (int i = 0; i < FOREST; i++)
        ck_assert_uint_eq(kiln_changed_tick(t.s.world, t.h[i], t.s.ids.world), before[i]);
    /* frames that move locals (no structural change) allocate nothing once warmed up */
    for (int frame = 0; frame < 4; frame++) {
        kiln_tick_advance(t.s.world);
        int64_t allocations = t.s.alloc.allocations;
        for (int i = frame; i < FOREST; i += 7) {
            const kiln_local_transform *l = kiln_get(t.s.world, t.h[i], t.s.ids.local);
            if (!l) continue;
            kiln_local_transform moved = *l;
            moved.position[1] += 1.0f;
            ck_assert_int_eq(kiln_set(t.s.world, t.h[i], t.s.ids.local, &moved), KILN_OK);
        }
        ck_assert_int_eq(kiln_transform_propagate_parallel(t.s.world, jobs, &stats), KILN_OK);
        ck_assert_int_gt(stats.updated, FOREST / 7);
        if (frame > 0) ck_assert_int_eq(t.s.alloc.allocations, allocations);
    }
    free(before);
    forest_free(&t);
    kiln_jobs_destroy(jobs);
}

KILN_TEST(parallel, a_cycle_fails_on_a_pool_as_it_does_inline_and_the_rest_still_matches) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    ck_assert_ptr_nonnull(jobs);
    twin serial, parallel;
    forest_build(&serial, 5u);
    forest_build(&parallel, 5u);
    ck_assert_int_eq(kiln_transform_propagate(serial.s.world, NULL), KILN_OK);
    ck_assert_int_eq(kiln_transform_propagate_parallel(parallel.s.world, jobs, NULL), KILN_OK);
    twin *both[2] = {&serial, &parallel};
    /* close a loop between a deep entity and one of its ancestors' layer, in both twins */
    int child = FOREST - 7, ancestor = ROOTS + 3;
    for (int k = 0; k < 2; k++) {
        kiln_tick_advance(both[k]->s.world);
        kiln_entity top = both[k]->h[ancestor];
        if (!kiln_has(both[k]->s.world, top, both[k]->s.ids.parent))
            ck_assert_int_eq(kiln_add(both[k]->s.world, top, both[k]->s.ids.parent, NULL), KILN_OK);
        link_unchecked(&both[k]->s, top, both[k]->h[child]);
        link_unchecked(&both[k]->s, both[k]->h[child], top);
        forest_change(both[k], 77u);
    }
    ck_assert_int_eq(kiln_transform_propagate(serial.s.world, NULL), KILN_ERR_INVALID_ARGUMENT);
    char serial_msg[256];
    snprintf(serial_msg, sizeof serial_msg, "%s", kiln_world_error(serial.s.world));
    ck_assert_int_eq(kiln_transform_propagate_parallel(parallel.s.world, jobs, NULL),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(parallel.s.world), serial_msg);
    ck_assert_msg(strstr(serial_msg, "kiln_transform_propagate: ") == serial_msg, "message \"%s\"", serial_msg);
    ck_assert_msg(names_entity(serial_msg, serial.h[child]) || names_entity(serial_msg, serial.h[ancestor]),
                  "error \"%s\" names neither entity of the cycle", serial_msg);
    assert_twins_equal(&serial, &parallel, "with a cycle");
    forest_free(&serial);
    forest_free(&parallel);
    kiln_jobs_destroy(jobs);
}

static void run_schedule_frames(twin *t, kiln_jobs *jobs, int frames, uint32_t seed) {
    kiln_schedule *schedule = kiln_schedule_create(t->s.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_ptr_nonnull(schedule);
    kiln_system_desc desc;
    kiln_transform_system_desc(t->s.world, &desc);
    ck_assert_int_eq(kiln_schedule_add(schedule, &desc), KILN_OK);
    for (int frame = 0; frame < frames; frame++) {
        kiln_tick_advance(t->s.world);
        if (frame > 0) forest_change(t, seed + (uint32_t)frame);
        ck_assert_int_eq(kiln_schedule_run(schedule, 0.016), KILN_OK);
    }
    kiln_schedule_destroy(schedule);
}

KILN_TEST(parallel, the_propagation_system_on_a_pool_matches_the_system_run_inline) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1});
    ck_assert_ptr_nonnull(jobs);
    twin serial, parallel;
    forest_build(&serial, 21u);
    forest_build(&parallel, 21u);
    run_schedule_frames(&serial, NULL, 5, 400u);
    run_schedule_frames(&parallel, jobs, 5, 400u);
    assert_twins_equal(&serial, &parallel, "system");
    /* and both agree with a plain propagation: nothing is left to change */
    kiln_tick_advance(parallel.s.world);
    kiln_transform_propagate_stats stats;
    ck_assert_int_eq(kiln_transform_propagate(parallel.s.world, &stats), KILN_OK);
    ck_assert_int_eq(stats.updated, 0);
    ck_assert_int_eq(stats.added, 0);
    forest_free(&serial);
    forest_free(&parallel);
    kiln_jobs_destroy(jobs);
}

/* A main-thread system that shares the propagation's stage (it only reads Parent) and takes
 * subtrees away each frame with kiln_transform_despawn_recursive. */
typedef struct pruner {
    twin *t;
    int next;
} pruner;

static void prune_system(const kiln_system_ctx *ctx) {
    pruner *p = ctx->user;
    for (int k = 0; k < 8 && p->next < p->t->n; p->next += 97, k++)
        if (kiln_is_alive(ctx->world, p->t->h[p->next]))
            ck_assert_int_eq(kiln_transform_despawn_recursive(ctx->world, p->t->h[p->next]), KILN_OK);
}

KILN_TEST(parallel, a_recursive_despawn_beside_the_propagation_system_shares_no_scratch_with_it) {
    /* The two run at once (the propagation on the pool, the pruner on the calling thread):
     * the despawn must not use the propagation's scratch (ThreadSanitizer sees it if so). */
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    twin t;
    forest_build(&t, 33u);
    kiln_schedule *schedule = kiln_schedule_create(t.s.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_ptr_nonnull(schedule);
    kiln_system_desc desc;
    kiln_transform_system_desc(t.s.world, &desc);
    ck_assert_int_eq(kiln_schedule_add(schedule, &desc), KILN_OK);
    pruner p = {&t, ROOTS / 3};
    ck_assert_int_eq(kiln_schedule_add(schedule, &(kiln_system_desc){.name = "prune", .run = prune_system, .user = &p,
                                                                       .reads = {t.s.ids.parent}, .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(schedule), 1);
    for (int frame = 0; frame < 4; frame++) {
        forest_change(&t, 900u + (uint32_t)frame);
        ck_assert_msg(kiln_schedule_run(schedule, 0.016) == KILN_OK, "%s", kiln_world_error(t.s.world));
    }
    kiln_tick_advance(t.s.world);
    kiln_transform_propagate_stats stats;
    ck_assert_int_eq(kiln_transform_propagate(t.s.world, &stats), KILN_OK);
    kiln_schedule_destroy(schedule);
    forest_free(&t);
    kiln_jobs_destroy(jobs);
}
