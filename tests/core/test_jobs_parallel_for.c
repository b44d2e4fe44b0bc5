/* test_jobs_parallel_for.c: Check suite for kiln_parallel_for: with no pool, an inline pool or
 * workers, every matching row is visited exactly once, and its marks reach the change ticks. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_fixture.h"
#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* parallel_for                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* Per-row bookkeeping: how often the row was visited and which entity it belongs to. */
typedef struct visits {
    int32_t count;
    uint32_t index;
} visits;

typedef struct pfor_world {
    kiln_world *world;
    kiln_component visits, pos, skip, big;
    kiln_component tags[3];
    kiln_query *query; /* with Visits, without Skip */
    kiln_entity *matching;
    int64_t matching_count;
    kiln_entity *other; /* Visits + Skip, or no Visits at all */
    int64_t other_count;
    int32_t archetypes; /* matching archetypes, all non-empty */
} pfor_world;

#define PFOR_BIG 20000

static kiln_component register_visits(kiln_world *world) {
    kiln_component id;
    ck_assert_int_eq(kiln_component_register(
                         world,
                         &(kiln_component_desc){.name = "Visits", .size = sizeof(visits)}, &id),
                     KILN_OK);
    return id;
}

static void pfor_spawn(pfor_world *p, const kiln_component *components, int32_t count,
                       bool matching) {
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(p->world, components, NULL, count, &e), KILN_OK);
    visits *v = kiln_get_mut(p->world, e, p->visits);
    if (v) *v = (visits){0, kiln_entity_index(e)};
    if (matching) p->matching[p->matching_count++] = e;
    else p->other[p->other_count++] = e;
}

/* Eight small archetypes with Visits (every subset of three tags), one large one, and
 * rows the query must not visit: Visits with Skip, and Position alone. */
static void pfor_setup(pfor_world *p, kiln_world *world) {
    memset(p, 0, sizeof *p);
    p->world = world;
    p->visits = register_visits(world);
    p->pos = test_register_position(world);
    p->skip = test_register_tag(world, "Skip");
    p->big = test_register_tag(world, "Big");
    p->tags[0] = test_register_tag(world, "T0");
    p->tags[1] = test_register_tag(world, "T1");
    p->tags[2] = test_register_tag(world, "T2");
    p->matching = malloc(sizeof(kiln_entity) * (PFOR_BIG + 1000));
    p->other = malloc(sizeof(kiln_entity) * 1000);
    ck_assert_ptr_nonnull(p->matching);
    ck_assert_ptr_nonnull(p->other);
    for (int i = 0; i < 8 * 37; i++) {
        kiln_component list[4] = {p->visits};
        int32_t n = 1;
        for (int t = 0; t < 3; t++)
            if (((i % 8) >> t) & 1) list[n++] = p->tags[t];
        pfor_spawn(p, list, n, true);
        if (i % 5 == 0) pfor_spawn(p, (kiln_component[]){p->visits, p->skip}, 2, false);
        if (i % 7 == 0) pfor_spawn(p, &p->pos, 1, false);
    }
    kiln_entity *big = p->matching + p->matching_count;
    ck_assert_int_eq(kiln_spawn_batch(world, (kiln_component[]){p->visits, p->big}, 2, PFOR_BIG,
                                      big),
                     KILN_OK);
    for (int i = 0; i < PFOR_BIG; i++) {
        visits *v = kiln_get_mut(world, big[i], p->visits);
        *v = (visits){0, kiln_entity_index(big[i])};
    }
    p->matching_count += PFOR_BIG;
    /* despawn a few so the archetypes have had rows swapped around */
    for (int64_t i = 3; i < p->matching_count; i += 97) {
        ck_assert_int_eq(kiln_despawn(world, p->matching[i]), KILN_OK);
        p->matching[i] = p->matching[--p->matching_count];
    }
    p->archetypes = 9;
    ck_assert_int_eq(kiln_query_create(world,
                                       &(kiln_query_desc){.with = {p->visits},
                                                          .without = {p->skip}},
                                       &p->query),
                     KILN_OK);
    ck_assert_int_eq(kiln_query_count(p->query), p->matching_count);
}

static void pfor_teardown(pfor_world *p) {
    kiln_query_destroy(p->query);
    free(p->matching);
    free(p->other);
}

typedef struct visit_stats {
    atomic_int calls;
    atomic_int rows;
    atomic_int bad_entity;
    atomic_int not_deferred;
    kiln_world *world;
} visit_stats;

static void visit_rows(kiln_iter *view, void *user) {
    visit_stats *st = user;
    visits *v = kiln_iter_column(view, 0);
    for (int32_t r = 0; r < view->count; r++) {
        v[r].count++;
        if (kiln_entity_index(view->entities[r]) != v[r].index) atomic_fetch_add(&st->bad_entity, 1);
    }
    if (!kiln_is_deferred(st->world)) atomic_fetch_add(&st->not_deferred, 1);
    atomic_fetch_add(&st->calls, 1);
    atomic_fetch_add(&st->rows, view->count);
}

/* Runs parallel_for twice and checks each matching row was visited once per run and no
 * other row at all. Returns the number of callbacks of the first run. */
static int check_visits_once(pfor_world *p, kiln_jobs *jobs, int32_t min_rows) {
    int first_calls = 0;
    for (int run = 1; run <= 2; run++) {
        visit_stats st = {.world = p->world};
        ck_assert_int_eq(kiln_parallel_for(jobs, p->query, min_rows, visit_rows, &st), KILN_OK);
        ck_assert_int_eq(loaded(&st.rows), p->matching_count);
        ck_assert_int_eq(loaded(&st.bad_entity), 0);
        ck_assert_int_eq(loaded(&st.not_deferred), 0);
        ck_assert(!kiln_is_deferred(p->world));
        int64_t wrong = 0, visited_other = 0;
        for (int64_t i = 0; i < p->matching_count; i++) {
            const visits *v = kiln_get(p->world, p->matching[i], p->visits);
            wrong += v == NULL || v->count != run;
        }
        for (int64_t i = 0; i < p->other_count; i++) {
            const visits *v = kiln_get(p->world, p->other[i], p->visits);
            visited_other += v != NULL && v->count != 0;
        }
        ck_assert_int_eq(wrong, 0);
        ck_assert_int_eq(visited_other, 0);
        if (run == 1) first_calls = atomic_load(&st.calls);
    }
    for (int64_t i = 0; i < p->matching_count; i++)
        ((visits *)kiln_get_mut(p->world, p->matching[i], p->visits))->count = 0;
    return first_calls;
}

KILN_TEST_GROUP_WITH(parallel_for, .timeout = 60);

KILN_TEST(parallel_for, parallel_for_without_a_pool_visits_every_matching_row_once_inline) {
    kiln_world *world = kiln_world_create(NULL);
    pfor_world p;
    pfor_setup(&p, world);
    int calls = check_visits_once(&p, NULL, 0);
    ck_assert_int_ge(calls, p.archetypes); /* a view never spans two archetypes */
    check_visits_once(&p, NULL, 64);
    pfor_teardown(&p);
    kiln_world_destroy(world);
}

KILN_TEST(parallel_for, parallel_for_with_an_inline_pool_visits_every_matching_row_once) {
    kiln_world *world = kiln_world_create(NULL);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = KILN_JOBS_INLINE});
    pfor_world p;
    pfor_setup(&p, world);
    check_visits_once(&p, jobs, 0);
    check_visits_once(&p, jobs, 64);
    pfor_teardown(&p);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(world);
}

KILN_TEST(parallel_for, parallel_for_with_workers_splits_a_large_archetype_and_visits_every_row_once) {
    kiln_world *world = kiln_world_create(NULL);
    pfor_world p;
    pfor_setup(&p, world);
    const int32_t counts[] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = counts[k]});
        ck_assert_ptr_nonnull(jobs);
        /* the big archetype alone is far above min_rows: it must come in several ranges */
        int calls = check_visits_once(&p, jobs, 64);
        ck_assert_int_gt(calls, p.archetypes);
        check_visits_once(&p, jobs, 0);
        check_visits_once(&p, jobs, 1);
        kiln_jobs_destroy(jobs);
    }
    pfor_teardown(&p);
    kiln_world_destroy(world);
}

static void smallest_view(kiln_iter *view, void *user) {
    atomic_int *smallest = user;
    int seen = atomic_load(smallest);
    while (view->count < seen && !atomic_compare_exchange_weak(smallest, &seen, view->count)) {
    }
}

KILN_TEST(parallel_for, parallel_for_ranges_hold_at_least_min_rows_of_a_larger_chunk) {
    kiln_world *world = kiln_world_create(NULL);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 3});
    kiln_component v = register_visits(world);
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(world, &(kiln_query_desc){.with = {v}}, &q), KILN_OK);
    const int32_t rows[] = {1999, 2500, 4096};
    int32_t spawned = 0;
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(kiln_spawn_batch(world, &v, 1, rows[k] - spawned, NULL), KILN_OK);
        spawned = rows[k];
        ck_assert_int_eq(kiln_query_count(q), rows[k]);
        visit_stats st = {.world = world};
        ck_assert_int_eq(kiln_parallel_for(jobs, q, 1000, visit_rows, &st), KILN_OK);
        ck_assert_int_eq(loaded(&st.rows), rows[k]);
        atomic_int smallest = INT32_MAX;
        ck_assert_int_eq(kiln_parallel_for(jobs, q, 1000, smallest_view, &smallest), KILN_OK);
        ck_assert_msg(loaded(&smallest) >= 1000,
                      "%d rows, min_rows 1000: a range of %d rows", (int)rows[k],
                      atomic_load(&smallest));
    }
    kiln_query_destroy(q);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(world);
}

static void count_calls(kiln_iter *view, void *user) {
    (void)view;
    atomic_fetch_add((atomic_int *)user, 1);
}

KILN_TEST(parallel_for, parallel_for_over_an_empty_query_calls_nothing) {
    kiln_world *world = kiln_world_create(NULL);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_component pos = test_register_position(world);
    kiln_component vel = test_register_velocity(world);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(world, &pos, NULL, 1, &e), KILN_OK);
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(world, &(kiln_query_desc){.with = {vel}}, &q), KILN_OK);
    atomic_int calls = 0;
    ck_assert_int_eq(kiln_parallel_for(jobs, q, 0, count_calls, &calls), KILN_OK);
    ck_assert_int_eq(kiln_parallel_for(NULL, q, 0, count_calls, &calls), KILN_OK);
    /* an archetype that matched once but is empty now */
    ck_assert_int_eq(kiln_add(world, e, vel, NULL), KILN_OK);
    ck_assert_int_eq(kiln_despawn(world, e), KILN_OK);
    ck_assert_int_eq(kiln_parallel_for(jobs, q, 0, count_calls, &calls), KILN_OK);
    ck_assert_int_eq(kiln_parallel_for(NULL, q, 0, count_calls, &calls), KILN_OK);
    ck_assert_int_eq(loaded(&calls), 0);
    ck_assert(!kiln_is_deferred(world));
    kiln_query_destroy(q);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(world);
}

/* Marks rows of term 0 changed (and moves them), for chunks whose optional term 1 is present. */
static void mark_moving(kiln_iter *view, void *user) {
    (void)user;
    test_position *pos = kiln_iter_column(view, 0);
    const test_velocity *vel = kiln_iter_column(view, 1);
    if (vel == NULL) return;
    for (int32_t r = 0; r < view->count; r++) {
        pos[r].x += vel[r].x;
        kiln_iter_mark_changed(view, 0, r);
    }
}

typedef struct column_tick {
    kiln_tick with_vel, without_vel;
} column_tick;

static column_tick column_ticks(const kiln_query *q) {
    column_tick ct = {0, 0};
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) {
        if (kiln_iter_column(&it, 1)) ct.with_vel = kiln_iter_column_tick(&it, 0);
        else ct.without_vel = kiln_iter_column_tick(&it, 0);
    }
    return ct;
}

KILN_TEST(parallel_for, rows_marked_through_views_update_column_and_row_ticks) {
    const int32_t counts[] = {NO_POOL, KILN_JOBS_INLINE, 2};
    for (int k = 0; k < 3; k++) {
        kiln_world *world = kiln_world_create(NULL);
        kiln_jobs *jobs = pool_or_none(counts[k]);
        kiln_component pos = test_register_position(world);
        kiln_component vel = test_register_velocity(world);
        enum { N = 3000 };
        static kiln_entity moving[N], still[100];
        ck_assert_int_eq(kiln_spawn_batch(world, (kiln_component[]){pos, vel}, 2, N, moving),
                         KILN_OK);
        ck_assert_int_eq(kiln_spawn_batch(world, &pos, 1, 100, still), KILN_OK);
        for (int i = 0; i < N; i++)
            *(test_velocity *)kiln_get_mut(world, moving[i], vel) = (test_velocity){1.0f, 0.0f};
        kiln_query *q;
        ck_assert_int_eq(kiln_query_create(world,
                                           &(kiln_query_desc){.with = {pos}, .optional = {vel}},
                                           &q),
                         KILN_OK);
        column_tick before = column_ticks(q);
        ck_assert_uint_eq(before.with_vel, 1);
        ck_assert_uint_eq(before.without_vel, 1);
        for (int t = 0; t < 4; t++) kiln_tick_advance(world);
        ck_assert_uint_eq(kiln_tick_current(world), 5);
        ck_assert_int_eq(kiln_parallel_for(jobs, q, 100, mark_moving, NULL), KILN_OK);
        column_tick after = column_ticks(q);
        ck_assert_uint_eq(after.with_vel, 5);
        ck_assert_uint_eq(after.without_vel, 1);
        int wrong_tick = 0, wrong_value = 0;
        for (int i = 0; i < N; i++) {
            wrong_tick += kiln_changed_tick(world, moving[i], pos) != 5;
            wrong_value += ((const test_position *)kiln_get(world, moving[i], pos))->x != 1.0f;
        }
        for (int i = 0; i < 100; i++) wrong_tick += kiln_changed_tick(world, still[i], pos) != 1;
        ck_assert_int_eq(wrong_tick, 0);
        ck_assert_int_eq(wrong_value, 0);
        kiln_query_destroy(q);
        kiln_jobs_destroy(jobs);
        kiln_world_destroy(world);
    }
}

/* Inside the callback (on the calling thread): spawns one entity and adds a tag per row, and
 * checks the world is deferred and unchanged meanwhile. */
typedef struct structural {
    kiln_world *world;
    kiln_component visits, tag;
    int64_t count_before;
    pthread_t caller;
    int64_t rows;
    int64_t spawned_count;
    kiln_entity spawned[600];
    bool failed;
} structural;

static void spawn_inside(kiln_iter *view, void *user) {
    structural *s = user;
    visits *v = kiln_iter_column(view, 0);
    if (!pthread_equal(pthread_self(), s->caller) || !kiln_is_deferred(s->world)) s->failed = true;
    for (int32_t r = 0; r < view->count; r++) {
        v[r].count++;
        s->rows++;
        kiln_entity e = KILN_NULL_ENTITY;
        if (kiln_spawn_with(s->world, &s->visits, NULL, 1, &e) != KILN_OK) s->failed = true;
        if (e == KILN_NULL_ENTITY || kiln_is_alive(s->world, e)) s->failed = true;
        s->spawned[s->spawned_count++] = e;
        if (kiln_add(s->world, view->entities[r], s->tag, NULL) != KILN_OK) s->failed = true;
        if (kiln_has(s->world, view->entities[r], s->tag)) s->failed = true;
        if (kiln_entity_count(s->world) != s->count_before) s->failed = true;
    }
}

KILN_TEST(parallel_for, structural_calls_in_a_callback_on_the_calling_thread_land_after_the_loop) {
    const int32_t counts[] = {NO_POOL, KILN_JOBS_INLINE};
    for (int k = 0; k < 2; k++) {
        kiln_world *world = kiln_world_create(NULL);
        kiln_jobs *jobs = pool_or_none(counts[k]);
        static structural s;
        memset(&s, 0, sizeof s);
        s.world = world;
        s.visits = register_visits(world);
        s.tag = test_register_tag(world, "Seen");
        kiln_component other = test_register_tag(world, "Other");
        kiln_entity originals[300];
        for (int i = 0; i < 300; i++) {
            kiln_component list[2] = {s.visits, other};
            ck_assert_int_eq(kiln_spawn_with(world, list, NULL, i % 2 ? 2 : 1, &originals[i]),
                             KILN_OK);
            ((visits *)kiln_get_mut(world, originals[i], s.visits))->count = 0;
        }
        kiln_query *q;
        ck_assert_int_eq(kiln_query_create(world, &(kiln_query_desc){.with = {s.visits}}, &q),
                         KILN_OK);
        s.count_before = kiln_entity_count(world);
        s.caller = pthread_self();
        ck_assert_int_eq(kiln_parallel_for(jobs, q, 16, spawn_inside, &s), KILN_OK);
        ck_assert(!s.failed);
        ck_assert(!kiln_is_deferred(world));
        /* the spawned rows matched the query but were not visited: they landed afterwards */
        ck_assert_int_eq(s.rows, 300);
        ck_assert_int_eq(s.spawned_count, 300);
        ck_assert_int_eq(kiln_entity_count(world), 600);
        int wrong = 0;
        for (int i = 0; i < 300; i++) {
            wrong += !kiln_has(world, originals[i], s.tag);
            wrong += ((const visits *)kiln_get(world, originals[i], s.visits))->count != 1;
            wrong += !kiln_is_alive(world, s.spawned[i]);
            wrong += !kiln_has(world, s.spawned[i], s.visits);
        }
        ck_assert_int_eq(wrong, 0);
        kiln_query_destroy(q);
        kiln_jobs_destroy(jobs);
        kiln_world_destroy(world);
    }
}

KILN_TEST(parallel_for, parallel_for_out_of_memory_fails_before_any_row_runs) {
    kiln_world *world = kiln_world_create(NULL);
    pfor_world p;
    pfor_setup(&p, world);
    /* k == 0 refuses the first request of a fresh pool, k == 1 the one after, and so on, until
     * the pool holds everything a run needs */
    for (int64_t k = 0;; k++) {
        ck_assert_int_lt(k, 20);
        locked_allocator l;
        locked_init(&l);
        kiln_jobs *jobs = pool_create(2, &l);
        locked_fail_after(&l, k);
        visit_stats st = {.world = world};
        kiln_world_clear_error(world);
        kiln_result r = kiln_parallel_for(jobs, p.query, 64, visit_rows, &st);
        locked_fail_never(&l);
        ck_assert(!kiln_is_deferred(world));
        if (r == KILN_OK) {
            ck_assert_int_eq(loaded(&st.rows), p.matching_count);
            kiln_jobs_destroy(jobs);
            locked_fini(&l);
            ck_assert_int_gt(k, 0);
            break;
        }
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        ck_assert_int_gt(locked_snapshot(&l).failures, 0);
        ck_assert_int_eq(loaded(&st.calls), 0);
        ck_assert_str_ne(kiln_world_error(world), "");
        /* the world is usable, and the pool works once memory is back */
        ck_assert_int_eq(kiln_parallel_for(jobs, p.query, 64, visit_rows, &st), KILN_OK);
        ck_assert_int_eq(loaded(&st.rows), p.matching_count);
        kiln_jobs_destroy(jobs);
        ck_assert_int_eq(locked_snapshot(&l).live_bytes, 0);
        locked_fini(&l);
        for (int64_t i = 0; i < p.matching_count; i++)
            ((visits *)kiln_get_mut(world, p.matching[i], p.visits))->count = 0;
    }
    pfor_teardown(&p);
    kiln_world_destroy(world);
}

KILN_TEST(parallel_for, parallel_for_allocates_nothing_in_steady_state) {
    locked_allocator l;
    locked_init(&l);
    kiln_jobs *jobs = pool_create(2, &l);
    test_allocator wa;
    test_allocator_init(&wa);
    kiln_world *world = test_world_create(&wa);
    pfor_world p;
    pfor_setup(&p, world);
    visit_stats st = {.world = world};
    ck_assert_int_eq(kiln_parallel_for(jobs, p.query, 64, visit_rows, &st), KILN_OK);
    test_allocator pool_warm = locked_snapshot(&l);
    int64_t world_calls = wa.calls;
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(kiln_parallel_for(jobs, p.query, 64, visit_rows, &st), KILN_OK);
    ck_assert_int_eq(locked_snapshot(&l).calls, pool_warm.calls);
    ck_assert_int_eq(wa.calls, world_calls);
    pfor_teardown(&p);
    kiln_world_destroy(world);
    ck_assert_int_eq(wa.live_bytes, 0);
    kiln_jobs_destroy(jobs);
    ck_assert_int_eq(locked_snapshot(&l).live_bytes, 0);
    locked_fini(&l);
}

/* ------------------------------------------------------------------------------------------ */
/* errors                                                                                     */
/* ------------------------------------------------------------------------------------------ */

enum { FAIL_ROWS = 4096, FAIL_CALLS = 1000 };

/* Ranges of a kiln_parallel_for outside any schedule that fail at the same time: the range
 * holding the first row writes through a dead handle, every other one writes a component the
 * first row lacks (a longer message). */
typedef struct failing_ranges {
    kiln_world *world;
    kiln_component a, long_name;
    kiln_entity dead, first; /* first: the query's first row */
    char dead_message[256], missing_message[256];
    atomic_int started;
    atomic_int wrong;     /* read-backs that were another range's message (or a mix) */
    atomic_int read_back;
} failing_ranges;

static void fail_in_range(kiln_iter *view, void *user) {
    failing_ranges *f = user;
    /* the first two ranges to start wait (a second at most) for each other */
    if (atomic_fetch_add(&f->started, 1) < 2) {
        int64_t start = test_now_ns();
        while (atomic_load(&f->started) < 2 && test_now_ns() - start < 1000000000) {
        }
    }
    bool first = view->entities[0] == f->first;
    const char *expected = first ? f->dead_message : f->missing_message;
    for (int i = 0; i < FAIL_CALLS; i++) {
        void *got = first ? kiln_get_mut(f->world, f->dead, f->a)
                          : kiln_get_mut(f->world, f->first, f->long_name);
        if (got != NULL || strcmp(kiln_world_error(f->world), expected) != 0) atomic_fetch_add(&f->wrong, 1);
        atomic_fetch_add(&f->read_back, 1);
    }
}

static void succeed_in_range(kiln_iter *view, void *user) {
    failing_ranges *f = user;
    if (kiln_get(f->world, view->entities[0], f->a) == NULL) atomic_fetch_add(&f->wrong, 1);
}

/* f's world: A on FAIL_ROWS rows (f->first the query's first), a dead handle, a component no
 * row has, and the messages a write through each gives; returns the query of A. */
static kiln_query *failing_world(failing_ranges *f) {
    memset(f, 0, sizeof *f);
    f->world = kiln_world_create(NULL);
    ck_assert_int_eq(kiln_component_register(f->world, &(kiln_component_desc){.name = "A", .size = 4}, &f->a),
                     KILN_OK);
    ck_assert_int_eq(kiln_component_register(
                         f->world,
                         &(kiln_component_desc){
                             .name = "AComponentWithAVeryLongNameSoItsMessageIsLongerThanTheOther", .size = 4},
                         &f->long_name),
                     KILN_OK);
    ck_assert_int_eq(kiln_spawn(f->world, &f->dead), KILN_OK);
    ck_assert_int_eq(kiln_despawn(f->world, f->dead), KILN_OK);
    for (int i = 0; i < FAIL_ROWS; i++) {
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(f->world, &f->a, NULL, 1, &e), KILN_OK);
        if (i == 0) f->first = e;
    }
    ck_assert_ptr_null(kiln_get_mut(f->world, f->first, f->long_name));
    snprintf(f->missing_message, sizeof f->missing_message, "%s", kiln_world_error(f->world));
    ck_assert_ptr_null(kiln_get_mut(f->world, f->dead, f->a));
    snprintf(f->dead_message, sizeof f->dead_message, "%s", kiln_world_error(f->world));
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(f->world, &(kiln_query_desc){.with = {f->a}}, &q), KILN_OK);
    return q;
}

KILN_TEST_GROUP_WITH(errors, .timeout = 120);

KILN_TEST(errors, ranges_failing_at_once_leave_the_first_ranges_whole_message) {
    static failing_ranges f;
    kiln_query *q = failing_world(&f);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    enum { RUNS = 8 };
    for (int run = 0; run < RUNS; run++) {
        kiln_world_clear_error(f.world);
        atomic_store(&f.started, 0);
        ck_assert_int_eq(kiln_parallel_for(jobs, q, 256, fail_in_range, &f), KILN_OK);
        /* whichever thread ran which range, and whichever failed last */
        ck_assert_str_eq(kiln_world_error(f.world), f.dead_message);
    }
    int wrong = atomic_load(&f.wrong), read_back = atomic_load(&f.read_back);
    ck_assert_int_eq(read_back, RUNS * FAIL_ROWS / 256 * FAIL_CALLS);
    ck_assert_int_eq(wrong, 0);
    /* ranges that fail nothing leave the caller's message as it was */
    ck_assert_ptr_null(kiln_get_mut(f.world, f.first, f.long_name));
    ck_assert_int_eq(kiln_parallel_for(jobs, q, 256, succeed_in_range, &f), KILN_OK);
    ck_assert_str_eq(kiln_world_error(f.world), f.missing_message);
    kiln_jobs_destroy(jobs);
    kiln_query_destroy(q);
    kiln_world_destroy(f.world);
}

/* Without a pool (jobs NULL, or an inline pool) the chunks run one after another on the
 * caller's thread. Each chunk here fails through a dead handle of its own: the caller read the
 * last chunk's message, where with workers it reads the first failing range's in row order. */
typedef struct chunk_failures {
    kiln_world *world;
    kiln_component a;
    kiln_entity dead[2];
    char message[2][256]; /* of a write through each dead handle */
    int calls;            /* chunks run so far (in row order: one thread) */
    bool fail;
} chunk_failures;

static void fail_per_chunk(kiln_iter *view, void *user) {
    (void)view;
    chunk_failures *c = user;
    int k = c->calls++ % 2;
    if (c->fail) ck_assert_ptr_null(kiln_get_mut(c->world, c->dead[k], c->a));
}

KILN_TEST(errors, without_a_pool_the_caller_gets_the_first_failing_chunks_message) {
    chunk_failures c = {.world = kiln_world_create(NULL)};
    kiln_component b;
    ck_assert_int_eq(kiln_component_register(c.world, &(kiln_component_desc){.name = "A", .size = 4}, &c.a), KILN_OK);
    ck_assert_int_eq(kiln_component_register(c.world, &(kiln_component_desc){.name = "B", .size = 4}, &b), KILN_OK);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(kiln_spawn(c.world, &c.dead[k]), KILN_OK);
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(c.world, (kiln_component[]){c.a, b}, NULL, k + 1, &e), KILN_OK);
    }
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(kiln_despawn(c.world, c.dead[k]), KILN_OK);
        ck_assert_ptr_null(kiln_get_mut(c.world, c.dead[k], c.a));
        snprintf(c.message[k], sizeof c.message[k], "%s", kiln_world_error(c.world));
    }
    ck_assert_str_ne(c.message[0], c.message[1]);
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(c.world, &(kiln_query_desc){.with = {c.a}}, &q), KILN_OK);
    kiln_jobs *inline_pool = kiln_jobs_create(&(kiln_jobs_desc){.workers = KILN_JOBS_INLINE});
    kiln_jobs *pools[2] = {NULL, inline_pool};
    for (int p = 0; p < 2; p++) {
        c.fail = true, c.calls = 0;
        kiln_world_clear_error(c.world);
        ck_assert_int_eq(kiln_parallel_for(pools[p], q, 0, fail_per_chunk, &c), KILN_OK);
        ck_assert_int_eq(c.calls, 2); /* {A} and {A, B}: two chunks */
        ck_assert_msg(strcmp(kiln_world_error(c.world), c.message[0]) == 0, "pool %d: %s", p,
                      kiln_world_error(c.world));
        /* chunks that fail nothing leave the caller's message as it was */
        c.fail = false;
        ck_assert_int_eq(kiln_parallel_for(pools[p], q, 0, fail_per_chunk, &c), KILN_OK);
        ck_assert_str_eq(kiln_world_error(c.world), c.message[0]);
    }
    kiln_jobs_destroy(inline_pool);
    kiln_query_destroy(q);
    kiln_world_destroy(c.world);
}

/* A system calling kiln_parallel_for in a schedule run, where every pool thread has an error
 * slot of its own: only the ranges run on other threads than the system's fail (through the
 * dead handle), so the system's own slot sees their message only if kiln_parallel_for brings
 * it back. The system fails a call of its own first (the missing-component message). */
typedef struct schedule_caller {
    failing_ranges f;
    kiln_query *query;
    pthread_t thread;    /* the system's */
    bool fail;           /* false: every range succeeds */
    atomic_int failed;   /* ranges that failed */
    char before[256];    /* the system's message before kiln_parallel_for, and after it */
    char after[256];
    kiln_result result;
} schedule_caller;

static void fail_off_the_caller(kiln_iter *view, void *user) {
    (void)view;
    schedule_caller *c = user;
    /* the first two ranges wait (five seconds at most) for each other: two threads run them,
     * so at least one is not the system's */
    if (atomic_fetch_add(&c->f.started, 1) < 2) {
        int64_t start = test_now_ns();
        while (atomic_load(&c->f.started) < 2 && test_now_ns() - start < 5000000000) {
        }
    }
    if (!c->fail || pthread_equal(pthread_self(), c->thread)) return;
    if (kiln_get_mut(c->f.world, c->f.dead, c->f.a) != NULL ||
        strcmp(kiln_world_error(c->f.world), c->f.dead_message) != 0)
        atomic_fetch_add(&c->f.wrong, 1);
    atomic_fetch_add(&c->failed, 1);
}

static void call_parallel_for(const kiln_system_ctx *ctx) {
    schedule_caller *c = ctx->user;
    c->thread = pthread_self();
    atomic_store(&c->f.started, 0);
    if (kiln_get_mut(ctx->world, c->f.first, c->f.long_name) != NULL) atomic_fetch_add(&c->f.wrong, 1);
    snprintf(c->before, sizeof c->before, "%s", kiln_world_error(ctx->world));
    c->result = kiln_parallel_for(ctx->jobs, c->query, 256, fail_off_the_caller, c);
    snprintf(c->after, sizeof c->after, "%s", kiln_world_error(ctx->world));
}

KILN_TEST(errors, in_a_schedule_run_the_calling_system_gets_a_range_failure_from_another_thread) {
    static schedule_caller c;
    c.query = failing_world(&c.f);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    for (int k = 0; k < 2; k++) { /* a main-thread system (world->error), a pool one (a slot) */
        kiln_schedule *s = kiln_schedule_create(c.f.world, &(kiln_schedule_desc){.jobs = jobs});
        ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "caller", .run = call_parallel_for,
                                                                  .user = &c, .main_thread = k == 0,
                                                                  .writes = {c.f.a, c.f.long_name}}),
                         KILN_OK);
        for (int run = 0; run < 8; run++) {
            c.fail = true;
            atomic_store(&c.failed, 0);
            ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
            ck_assert_int_eq(c.result, KILN_OK);
            ck_assert_int_gt(atomic_load(&c.failed), 0);
            ck_assert_str_eq(c.before, c.f.missing_message);
            ck_assert_msg(strcmp(c.after, c.f.dead_message) == 0, "case %d run %d: %s", k, run, c.after);
        }
        /* ranges that fail nothing leave the system's message as it was */
        c.fail = false;
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        ck_assert_str_eq(c.after, c.f.missing_message);
        kiln_schedule_destroy(s);
    }
    ck_assert_int_eq(atomic_load(&c.f.wrong), 0);
    kiln_jobs_destroy(jobs);
    kiln_query_destroy(c.query);
    kiln_world_destroy(c.f.world);
}
