/* test_query.c: Check suite for cached queries and iteration: terms, chunks, range views, change
 * ticks and the deferred world while iterating. A query sees every matching archetype. */
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

typedef struct fixture {
    test_allocator alloc;
    kiln_world *world;
    kiln_component pos, vel, tag;
    kiln_entity p_only[3];   /* Position */
    kiln_entity pv[4];       /* Position, Velocity */
    kiln_entity v_only[2];   /* Velocity */
    kiln_entity pvt[2];      /* Position, Velocity, Frozen */
    kiln_entity bare;        /* nothing */
} fixture;

static void fixture_setup(fixture *f) {
    test_allocator_init(&f->alloc);
    f->world = test_world_create(&f->alloc);
    f->pos = test_register_position(f->world);
    f->vel = test_register_velocity(f->world);
    f->tag = test_register_tag(f->world, "Frozen");
    kiln_world *w = f->world;
    float n = 0.0f;
    for (int i = 0; i < 3; i++, n++)
        ck_assert_int_eq(kiln_spawn_with(w, &f->pos, (const void *[]){&(test_position){n, -n}}, 1,
                                         &f->p_only[i]),
                         KILN_OK);
    for (int i = 0; i < 4; i++, n++)
        ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){f->pos, f->vel},
                                         (const void *[]){&(test_position){n, -n},
                                                          &(test_velocity){n, n}},
                                         2, &f->pv[i]),
                         KILN_OK);
    for (int i = 0; i < 2; i++, n++)
        ck_assert_int_eq(kiln_spawn_with(w, &f->vel, (const void *[]){&(test_velocity){n, n}}, 1,
                                         &f->v_only[i]),
                         KILN_OK);
    for (int i = 0; i < 2; i++, n++)
        ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){f->pos, f->vel, f->tag},
                                         (const void *[]){&(test_position){n, -n},
                                                          &(test_velocity){n, n}, NULL},
                                         3, &f->pvt[i]),
                         KILN_OK);
    ck_assert_int_eq(kiln_spawn(w, &f->bare), KILN_OK);
}

static void fixture_teardown(fixture *f) {
    kiln_world_destroy(f->world);
    ck_assert_int_eq(f->alloc.live_bytes, 0);
}

static kiln_query *make_query(kiln_world *world, kiln_query_desc desc) {
    kiln_query *q = NULL;
    kiln_result r = kiln_query_create(world, &desc, &q);
    ck_assert_msg(r == KILN_OK, "query_create failed: %s", kiln_world_error(world));
    ck_assert_ptr_nonnull(q);
    return q;
}

static bool same_set(const kiln_entity *got, int64_t n, const kiln_entity *want, int64_t m) {
    if (n != m) return false;
    for (int64_t i = 0; i < m; i++)
        if (!test_contains(got, n, want[i])) return false;
    return true;
}

/* ------------------------------------------------------------------------------------------ */
/* matching                                                                                   */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(matching);

KILN_TEST(matching, with_terms_match_entities_having_all_of_them) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.pos, f.vel}});
    kiln_entity want[] = {f.pv[0], f.pv[1], f.pv[2], f.pv[3], f.pvt[0], f.pvt[1]};
    kiln_entity got[16];
    int64_t n = test_query_collect(q, got, 16);
    ck_assert(same_set(got, n, want, 6));
    ck_assert_int_eq(kiln_query_count(q), 6);
    kiln_query_destroy(q);
    q = make_query(f.world, (kiln_query_desc){.with = {f.pos}});
    ck_assert_int_eq(kiln_query_count(q), 9);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(matching, without_terms_exclude_entities) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.pos}, .without = {f.vel}});
    kiln_entity got[16];
    int64_t n = test_query_collect(q, got, 16);
    ck_assert(same_set(got, n, f.p_only, 3));
    kiln_query_destroy(q);
    q = make_query(f.world, (kiln_query_desc){.with = {f.vel}, .without = {f.tag}});
    kiln_entity want[] = {f.pv[0], f.pv[1], f.pv[2], f.pv[3], f.v_only[0], f.v_only[1]};
    n = test_query_collect(q, got, 16);
    ck_assert(same_set(got, n, want, 6));
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(matching, optional_terms_give_null_columns_where_absent) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.pos}, .optional = {f.vel}});
    ck_assert_int_eq(kiln_query_count(q), 9);
    kiln_iter it;
    kiln_query_iter(q, &it);
    int64_t with_vel = 0, without_vel = 0;
    while (kiln_query_next(&it)) {
        ck_assert_int_eq(it.term_count, 2);
        ck_assert_ptr_nonnull(kiln_iter_column(&it, 0));
        const test_velocity *v = kiln_iter_column(&it, 1);
        for (int32_t row = 0; row < it.count; row++) {
            kiln_entity e = it.entities[row];
            if (kiln_has(f.world, e, f.vel)) {
                ck_assert_ptr_nonnull(v);
                ck_assert_ptr_eq(&v[row], kiln_get(f.world, e, f.vel));
                with_vel++;
            } else {
                ck_assert_ptr_null(v);
                ck_assert_ptr_null(it.ticks[1]);
                ck_assert(!kiln_iter_changed_since(&it, 1, row, 0));
                ck_assert_uint_eq(kiln_iter_column_tick(&it, 1), 0);
                without_vel++;
            }
        }
    }
    ck_assert_int_eq(with_vel, 6);
    ck_assert_int_eq(without_vel, 3);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(matching, tag_terms_match_but_have_null_columns) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.tag, f.pos}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    int64_t rows = 0;
    while (kiln_query_next(&it)) {
        ck_assert_ptr_null(kiln_iter_column(&it, 0));
        ck_assert_ptr_nonnull(kiln_iter_column(&it, 1));
        rows += it.count;
    }
    ck_assert_int_eq(rows, 2);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(matching, chunk_entities_line_up_with_column_rows) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.vel, f.pos}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    int64_t rows = 0;
    while (kiln_query_next(&it)) {
        ck_assert_int_eq(it.term_count, 2);
        const test_velocity *v = kiln_iter_column(&it, 0);
        const test_position *p = kiln_iter_column(&it, 1);
        for (int32_t row = 0; row < it.count; row++, rows++) {
            kiln_entity e = it.entities[row];
            ck_assert(kiln_is_alive(f.world, e));
            ck_assert_ptr_eq(&v[row], kiln_get(f.world, e, f.vel));
            ck_assert_ptr_eq(&p[row], kiln_get(f.world, e, f.pos));
            ck_assert_float_eq(p[row].x, -p[row].y);
            ck_assert_float_eq(v[row].x, p[row].x);
        }
    }
    ck_assert_int_eq(rows, 6);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(matching, writes_through_columns_are_visible_to_get) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.pos, f.vel}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) {
        test_position *p = kiln_iter_column(&it, 0);
        const test_velocity *v = kiln_iter_column(&it, 1);
        for (int32_t row = 0; row < it.count; row++) p[row].x += v[row].x + 100.0f;
    }
    for (int i = 0; i < 4; i++) {
        const test_position *p = kiln_get(f.world, f.pv[i], f.pos);
        ck_assert_float_eq(p->x, 2.0f * (float)(3 + i) + 100.0f);
    }
    ck_assert_float_eq(((const test_position *)kiln_get(f.world, f.p_only[0], f.pos))->x, 0.0f);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(matching, query_created_before_an_archetype_sees_it_afterwards) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.vel}, .without = {f.pos}});
    ck_assert_int_eq(kiln_query_count(q), 2);
    kiln_component extra;
    ck_assert_int_eq(kiln_component_register(f.world, &(kiln_component_desc){.name = "Extra",
                                                                             .size = 4},
                                             &extra),
                     KILN_OK);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(f.world, (kiln_component[]){extra, f.vel}, NULL, 2, &e),
                     KILN_OK);
    ck_assert_int_eq(kiln_query_count(q), 3);
    kiln_entity got[8];
    int64_t n = test_query_collect(q, got, 8);
    ck_assert_int_eq(n, 3);
    ck_assert(test_contains(got, n, e));
    /* and follows entities that move into and out of its archetypes */
    ck_assert_int_eq(kiln_add(f.world, f.bare, f.vel, NULL), KILN_OK);
    ck_assert_int_eq(kiln_add(f.world, f.v_only[0], f.pos, NULL), KILN_OK);
    n = test_query_collect(q, got, 8);
    ck_assert_int_eq(n, 3);
    ck_assert(test_contains(got, n, f.bare));
    ck_assert(!test_contains(got, n, f.v_only[0]));
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(matching, empty_archetypes_are_skipped) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.pos}});
    for (int i = 0; i < 3; i++) ck_assert_int_eq(kiln_despawn(f.world, f.p_only[i]), KILN_OK);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(kiln_remove(f.world, f.pvt[i], f.tag, NULL), KILN_OK);
    ck_assert_int_eq(kiln_query_count(q), 6);
    kiln_iter it;
    kiln_query_iter(q, &it);
    int chunks = 0;
    int64_t rows = 0;
    while (kiln_query_next(&it)) {
        ck_assert_int_gt(it.count, 0);
        chunks++;
        rows += it.count;
    }
    ck_assert_int_eq(rows, 6);
    ck_assert_int_ge(chunks, 1);
    /* a query that matches only empty archetypes yields nothing at all */
    kiln_query *none = make_query(f.world, (kiln_query_desc){.with = {f.tag}});
    kiln_query_iter(none, &it);
    ck_assert(!kiln_query_next(&it));
    ck_assert_int_eq(kiln_query_count(none), 0);
    kiln_query_destroy(none);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(matching, query_count_and_iteration_allocate_nothing) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.pos}, .optional = {f.vel}});
    int64_t calls = f.alloc.calls;
    ck_assert_int_eq(kiln_query_count(q), 9);
    for (int round = 0; round < 3; round++) {
        kiln_iter it;
        kiln_query_iter(q, &it);
        while (kiln_query_next(&it))
            for (int32_t row = 0; row < it.count; row++) kiln_iter_mark_changed(&it, 0, row);
    }
    ck_assert_int_eq(f.alloc.calls, calls);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(matching, many_archetypes_are_all_matched) {
    test_allocator a;
    test_allocator_init(&a);
    kiln_world *w = test_world_create(&a);
    kiln_component pos = test_register_position(w);
    kiln_component tags[6];
    for (int i = 0; i < 6; i++) {
        char name[8] = {'T', (char)('0' + i), '\0'};
        tags[i] = test_register_tag(w, name);
    }
    kiln_query *q = make_query(w, (kiln_query_desc){.with = {pos}, .without = {tags[5]}});
    int64_t want = 0;
    for (int mask = 0; mask < 64; mask++) {
        kiln_component comps[7] = {pos};
        int32_t n = 1;
        for (int b = 0; b < 6; b++)
            if (mask & (1 << b)) comps[n++] = tags[b];
        ck_assert_int_eq(kiln_spawn_batch(w, comps, n, mask % 4 + 1, NULL), KILN_OK);
        if (!(mask & 32)) want += mask % 4 + 1;
    }
    ck_assert_int_eq(kiln_query_count(q), want);
    ck_assert_int_eq(test_query_collect(q, NULL, 0), want);
    kiln_query_destroy(q);
    kiln_world_destroy(w);
    ck_assert_int_eq(a.live_bytes, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* range views                                                                                */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(range);

KILN_TEST(range, iter_range_views_a_slice_of_the_chunk) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    ck_assert_int_eq(kiln_spawn_batch(w, &pos, 1, 10, NULL), KILN_OK);
    kiln_query *q = make_query(w, (kiln_query_desc){.with = {pos}, .optional = {vel}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_int_ge(it.count, 6);
    kiln_iter view;
    kiln_iter_range(&it, 2, 5, &view);
    ck_assert_int_eq(view.count, 3);
    ck_assert_int_eq(view.term_count, it.term_count);
    ck_assert_uint_eq(view.tick, it.tick);
    ck_assert_ptr_eq(view.entities, it.entities + 2);
    ck_assert_ptr_eq(view.columns[0], (test_position *)it.columns[0] + 2);
    ck_assert_ptr_eq(view.ticks[0], it.ticks[0] + 2);
    ck_assert_ptr_null(view.columns[1]);
    ck_assert_ptr_null(view.ticks[1]);
    kiln_iter_fini(&view);

    kiln_iter_range(&it, 0, it.count, &view);
    ck_assert_int_eq(view.count, it.count);
    ck_assert_ptr_eq(view.columns[0], it.columns[0]);
    kiln_iter_fini(&view);

    kiln_iter_range(&it, 4, 4, &view);
    ck_assert_int_eq(view.count, 0);
    kiln_iter_fini(&view);

    /* the main iteration carries on after its views are finished */
    int64_t rows = it.count;
    while (kiln_query_next(&it)) rows += it.count;
    ck_assert_int_eq(rows, 10);
    kiln_query_destroy(q);
    kiln_world_destroy(w);
}

KILN_TEST(range, marks_through_a_range_view_reach_the_column_tick_when_it_finishes) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_entity e[8];
    ck_assert_int_eq(kiln_spawn_batch(w, &pos, 1, 8, e), KILN_OK);
    kiln_tick_advance(w);
    kiln_tick now = kiln_tick_advance(w);
    kiln_query *q = make_query(w, (kiln_query_desc){.with = {pos}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_int_eq(it.count, 8);
    ck_assert_uint_eq(it.tick, now);
    ck_assert_uint_eq(kiln_iter_column_tick(&it, 0), 1);
    kiln_iter view;
    kiln_iter_range(&it, 3, 6, &view);
    kiln_iter_mark_changed(&view, 0, 1); /* chunk row 4 */
    ck_assert(kiln_iter_changed_since(&it, 0, 4, 1));
    ck_assert(!kiln_iter_changed_since(&it, 0, 3, 1));
    kiln_iter_fini(&view);
    ck_assert_uint_eq(kiln_iter_column_tick(&it, 0), now);
    kiln_entity marked = it.entities[4];
    while (kiln_query_next(&it)) {
    }
    ck_assert_uint_eq(kiln_changed_tick(w, marked, pos), now);
    for (int i = 0; i < 8; i++)
        if (e[i] != marked) ck_assert_uint_eq(kiln_changed_tick(w, e[i], pos), 1);
    kiln_query_destroy(q);
    kiln_world_destroy(w);
}

/* ------------------------------------------------------------------------------------------ */
/* change ticks                                                                               */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(ticks);

KILN_TEST(ticks, mark_changed_stamps_the_row_at_the_iteration_tick) {
    fixture f;
    fixture_setup(&f);
    kiln_tick_advance(f.world);
    kiln_tick now = kiln_tick_advance(f.world);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.pos}, .without = {f.vel}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    kiln_entity marked = KILN_NULL_ENTITY;
    while (kiln_query_next(&it)) {
        ck_assert_uint_eq(it.tick, now);
        if (marked == KILN_NULL_ENTITY) {
            kiln_iter_mark_changed(&it, 0, 0);
            marked = it.entities[0];
            ck_assert_uint_eq(it.ticks[0][0], now);
        }
    }
    ck_assert_uint_ne(marked, KILN_NULL_ENTITY);
    ck_assert_uint_eq(kiln_changed_tick(f.world, marked, f.pos), now);
    for (int i = 0; i < 3; i++)
        if (f.p_only[i] != marked)
            ck_assert_uint_eq(kiln_changed_tick(f.world, f.p_only[i], f.pos), 1);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(ticks, changed_since_is_strictly_greater) {
    fixture f;
    fixture_setup(&f);
    for (int i = 0; i < 4; i++) kiln_tick_advance(f.world); /* tick 5 */
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.pos}, .without = {f.vel}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_int_ge(it.count, 2);
    kiln_iter_mark_changed(&it, 0, 0);
    ck_assert(kiln_iter_changed_since(&it, 0, 0, 4));
    ck_assert(!kiln_iter_changed_since(&it, 0, 0, 5));
    ck_assert(!kiln_iter_changed_since(&it, 0, 0, 6));
    ck_assert(kiln_iter_changed_since(&it, 0, 1, 0)); /* written at tick 1 by spawn_with */
    ck_assert(!kiln_iter_changed_since(&it, 0, 1, 1));
    kiln_iter_fini(&it);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

static kiln_tick column_tick_of(const kiln_query *q, int32_t term) {
    kiln_iter it;
    kiln_tick latest = 0;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) {
        kiln_tick t = kiln_iter_column_tick(&it, term);
        if (t > latest) latest = t;
    }
    return latest;
}

KILN_TEST(ticks, column_tick_tracks_the_latest_write_in_the_column) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.pos}, .without = {f.vel}});
    ck_assert_uint_eq(column_tick_of(q, 0), 1);
    kiln_tick t = kiln_tick_advance(f.world);
    ck_assert_uint_eq(column_tick_of(q, 0), 1); /* nothing written since */
    ck_assert_ptr_nonnull(kiln_get(f.world, f.p_only[1], f.pos));
    ck_assert_uint_eq(column_tick_of(q, 0), 1); /* reading is not writing */
    ck_assert_ptr_nonnull(kiln_get_mut(f.world, f.p_only[1], f.pos));
    ck_assert_uint_eq(column_tick_of(q, 0), t);
    t = kiln_tick_advance(f.world);
    ck_assert_int_eq(kiln_set(f.world, f.p_only[2], f.pos, &(test_position){1.0f, 1.0f}), KILN_OK);
    ck_assert_uint_eq(column_tick_of(q, 0), t);
    t = kiln_tick_advance(f.world);
    ck_assert_int_eq(kiln_add(f.world, f.p_only[0], f.pos, NULL), KILN_OK);
    ck_assert_uint_eq(column_tick_of(q, 0), t);
    t = kiln_tick_advance(f.world);
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) kiln_iter_mark_changed(&it, 0, it.count - 1);
    ck_assert_uint_eq(column_tick_of(q, 0), t);
    kiln_tick_advance(f.world);
    kiln_tick_advance(f.world);
    ck_assert_uint_eq(column_tick_of(q, 0), t);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(ticks, column_tick_of_other_archetypes_is_untouched_by_a_write) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.pos}});
    kiln_tick t = kiln_tick_advance(f.world);
    ck_assert_ptr_nonnull(kiln_get_mut(f.world, f.pv[0], f.pos));
    kiln_iter it;
    kiln_query_iter(q, &it);
    int changed_chunks = 0, unchanged_rows = 0;
    while (kiln_query_next(&it)) {
        kiln_tick ct = kiln_iter_column_tick(&it, 0);
        bool holds_pv0 = test_contains(it.entities, it.count, f.pv[0]);
        if (holds_pv0) {
            ck_assert_uint_eq(ct, t);
            changed_chunks++;
        } else {
            ck_assert_uint_eq(ct, 1);
            unchanged_rows += it.count;
        }
    }
    ck_assert_int_eq(changed_chunks, 1);
    ck_assert_int_eq(unchanged_rows, 5);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

/* ------------------------------------------------------------------------------------------ */
/* iteration lifetime and the structural lock                                                 */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(lifetime);

KILN_TEST(lifetime, iter_fini_ends_an_iteration_early) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.pos}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    kiln_iter_fini(&it);
    kiln_iter_fini(&it); /* safe on a finished iterator */
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(f.world, &e), KILN_OK); /* the world is unlocked again */
    ck_assert_int_eq(kiln_add(f.world, e, f.pos, NULL), KILN_OK);
    ck_assert_int_eq(kiln_query_count(q), 10);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(lifetime, a_finished_iteration_releases_the_world) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.pos}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) {
    }
    kiln_iter_fini(&it);
    ck_assert_int_eq(kiln_despawn(f.world, f.pv[0]), KILN_OK);
    /* an iteration with no match at all also releases it */
    kiln_component lonely;
    ck_assert_int_eq(kiln_component_register(f.world, &(kiln_component_desc){.name = "Lonely",
                                                                             .size = 4},
                                             &lonely),
                     KILN_OK);
    kiln_query *none = make_query(f.world, (kiln_query_desc){.with = {lonely}});
    kiln_query_iter(none, &it);
    ck_assert(!kiln_query_next(&it));
    ck_assert_int_eq(kiln_spawn(f.world, &f.bare), KILN_OK);
    kiln_query_destroy(none);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(lifetime, nested_iterations_are_allowed) {
    fixture f;
    fixture_setup(&f);
    kiln_query *outer = make_query(f.world, (kiln_query_desc){.with = {f.pos}});
    kiln_query *inner = make_query(f.world, (kiln_query_desc){.with = {f.vel}});
    kiln_iter a, b;
    int64_t pairs = 0;
    kiln_query_iter(outer, &a);
    while (kiln_query_next(&a)) {
        for (int32_t i = 0; i < a.count; i++) {
            kiln_query_iter(inner, &b);
            while (kiln_query_next(&b)) pairs += b.count;
        }
    }
    ck_assert_int_eq(pairs, 9 * 8);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(f.world, &e), KILN_OK);
    kiln_query_destroy(inner);
    kiln_query_destroy(outer);
    fixture_teardown(&f);
}

KILN_TEST_GROUP(deferred);

KILN_TEST(deferred, iteration_defers_the_world_until_it_ends) {
    fixture f;
    fixture_setup(&f);
    kiln_world *w = f.world;
    kiln_query *q = make_query(w, (kiln_query_desc){.with = {f.pos}});
    ck_assert(!kiln_is_deferred(w));
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_is_deferred(w));
    kiln_entity spawned = KILN_NULL_ENTITY;
    int64_t rows = 0;
    while (kiln_query_next(&it)) {
        if (spawned == KILN_NULL_ENTITY) {
            ck_assert_int_eq(kiln_spawn_with(w, &f.pos,
                                             (const void *[]){&(test_position){99.0f, 98.0f}}, 1,
                                             &spawned),
                             KILN_OK);
            ck_assert_uint_ne(spawned, KILN_NULL_ENTITY);
            ck_assert(!kiln_is_alive(w, spawned));
            ck_assert_int_eq(kiln_entity_count(w), 12);
        }
        for (int32_t row = 0; row < it.count; row++) ck_assert_uint_ne(it.entities[row], spawned);
        rows += it.count;
    }
    ck_assert_int_eq(rows, 9); /* the new entity was not visited */
    ck_assert(!kiln_is_deferred(w));
    ck_assert(kiln_is_alive(w, spawned));
    ck_assert_int_eq(kiln_entity_count(w), 13);
    ck_assert_float_eq(((const test_position *)kiln_get(w, spawned, f.pos))->x, 99.0f);
    ck_assert_int_eq(kiln_query_count(q), 10);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(deferred, rows_being_visited_never_move_during_iteration) {
    fixture f;
    fixture_setup(&f);
    kiln_world *w = f.world;
    kiln_query *q = make_query(w, (kiln_query_desc){.with = {f.pos}, .without = {f.vel}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_int_eq(it.count, 3);
    kiln_entity ents[3];
    test_position vals[3];
    memcpy(ents, it.entities, sizeof ents);
    memcpy(vals, it.columns[0], sizeof vals);
    const void *column = it.columns[0];
    ck_assert_int_eq(kiln_despawn(w, ents[0]), KILN_OK);
    ck_assert_int_eq(kiln_remove(w, ents[1], f.pos, NULL), KILN_OK);
    ck_assert_int_eq(kiln_add(w, ents[2], f.vel, NULL), KILN_OK);
    ck_assert(kiln_is_alive(w, ents[0]));
    ck_assert(kiln_has(w, ents[1], f.pos));
    ck_assert(!kiln_has(w, ents[2], f.vel));
    ck_assert_ptr_eq(it.columns[0], column);
    ck_assert_mem_eq(it.entities, ents, sizeof ents);
    ck_assert_mem_eq(it.columns[0], vals, sizeof vals);
    ck_assert_ptr_eq(kiln_get(w, ents[2], f.pos), (const test_position *)column + 2);
    while (kiln_query_next(&it)) {
    }
    ck_assert(!kiln_is_alive(w, ents[0]));
    ck_assert(kiln_is_alive(w, ents[1]));
    ck_assert(!kiln_has(w, ents[1], f.pos));
    ck_assert(kiln_has(w, ents[2], f.vel));
    ck_assert_float_eq(((const test_position *)kiln_get(w, ents[2], f.pos))->x, vals[2].x);
    ck_assert_int_eq(kiln_query_count(q), 0);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(deferred, reads_inside_a_loop_see_the_world_without_queued_changes) {
    fixture f;
    fixture_setup(&f);
    kiln_world *w = f.world;
    kiln_query *q = make_query(w, (kiln_query_desc){.with = {f.pos}, .without = {f.vel}});
    kiln_entity *e = f.p_only;
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_int_eq(kiln_set(w, e[0], f.pos, &(test_position){50.0f, 51.0f}), KILN_OK);
    ck_assert_float_eq(((const test_position *)kiln_get(w, e[0], f.pos))->x, 0.0f);
    ck_assert_int_eq(kiln_add(w, e[1], f.vel, &(test_velocity){7.0f, 7.0f}), KILN_OK);
    ck_assert(!kiln_has(w, e[1], f.vel));
    ck_assert_ptr_null(kiln_get(w, e[1], f.vel));
    ck_assert_uint_eq(kiln_changed_tick(w, e[1], f.vel), 0);
    bool removed = false;
    ck_assert_int_eq(kiln_remove(w, e[2], f.pos, &removed), KILN_OK);
    ck_assert(removed); /* it is there now */
    ck_assert(kiln_has(w, e[2], f.pos));
    kiln_iter_fini(&it);
    ck_assert_float_eq(((const test_position *)kiln_get(w, e[0], f.pos))->y, 51.0f);
    ck_assert(kiln_has(w, e[1], f.vel));
    ck_assert_float_eq(((const test_velocity *)kiln_get(w, e[1], f.vel))->x, 7.0f);
    ck_assert(!kiln_has(w, e[2], f.pos));
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(deferred, dead_entities_and_unknown_components_fail_at_once_inside_a_loop) {
    fixture f;
    fixture_setup(&f);
    kiln_world *w = f.world;
    kiln_entity dead = f.bare;
    ck_assert_int_eq(kiln_despawn(w, dead), KILN_OK);
    kiln_query *q = make_query(w, (kiln_query_desc){.with = {f.pos}});
    kiln_entity e = f.p_only[0];
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_int_eq(kiln_add(w, dead, f.pos, NULL), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(kiln_despawn(w, dead), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(kiln_set(w, dead, f.pos, &(test_position){1.0f, 1.0f}),
                     KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(kiln_remove(w, dead, f.pos, NULL), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(kiln_add(w, e, 999, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_int_eq(kiln_remove(w, e, 999, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_int_eq(kiln_set(w, e, 999, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    /* A deferred set does not check presence (an add queued earlier may bring the
     * component); it is dropped when the queue lands without the component. */
    ck_assert_int_eq(kiln_set(w, e, f.vel, &(test_velocity){1.0f, 1.0f}), KILN_OK);
    kiln_entity spawned;
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){f.pos, f.pos}, NULL, 2, &spawned),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){f.pos, 999}, NULL, 2, &spawned),
                     KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_int_eq(kiln_spawn_batch(w, (kiln_component[]){f.vel, 999}, 2, 3, NULL),
                     KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_str_ne(kiln_world_error(w), "");
    kiln_iter_fini(&it);
    ck_assert_int_eq(kiln_entity_count(w), 11);
    ck_assert(!kiln_has(w, e, f.vel));
    ck_assert_float_eq(((const test_position *)kiln_get(w, e, f.pos))->x, 0.0f);
    kiln_world_stats s;
    kiln_world_stats_get(w, &s);
    ck_assert_int_eq(s.entity_slots, 12);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(deferred, changes_land_when_the_outermost_iteration_ends) {
    fixture f;
    fixture_setup(&f);
    kiln_world *w = f.world;
    kiln_query *outer = make_query(w, (kiln_query_desc){.with = {f.pos}});
    kiln_query *inner = make_query(w, (kiln_query_desc){.with = {f.vel}});
    kiln_iter a, b;
    kiln_query_iter(outer, &a);
    ck_assert(kiln_query_next(&a));
    kiln_query_iter(inner, &b);
    while (kiln_query_next(&b)) {
    }
    ck_assert_int_eq(kiln_despawn(w, f.v_only[0]), KILN_OK);
    kiln_query_iter(inner, &b);
    ck_assert(kiln_query_next(&b));
    ck_assert_int_eq(kiln_despawn(w, f.v_only[1]), KILN_OK);
    kiln_iter_fini(&b);
    ck_assert(kiln_is_deferred(w)); /* the outer loop still runs */
    ck_assert(kiln_is_alive(w, f.v_only[0]));
    ck_assert(kiln_is_alive(w, f.v_only[1]));
    while (kiln_query_next(&a)) {
    }
    ck_assert(!kiln_is_deferred(w));
    ck_assert(!kiln_is_alive(w, f.v_only[0]));
    ck_assert(!kiln_is_alive(w, f.v_only[1]));
    ck_assert_int_eq(kiln_entity_count(w), 10);
    kiln_query_destroy(inner);
    kiln_query_destroy(outer);
    fixture_teardown(&f);
}

KILN_TEST(deferred, finishing_a_range_view_does_not_end_the_iteration) {
    fixture f;
    fixture_setup(&f);
    kiln_world *w = f.world;
    kiln_query *q = make_query(w, (kiln_query_desc){.with = {f.pos}});
    kiln_iter it, view;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    kiln_iter_range(&it, 0, it.count, &view);
    kiln_iter_fini(&view);
    ck_assert(kiln_is_deferred(w));
    ck_assert_int_eq(kiln_despawn(w, f.bare), KILN_OK);
    ck_assert(kiln_is_alive(w, f.bare));
    int64_t rows = it.count;
    while (kiln_query_next(&it)) rows += it.count;
    ck_assert_int_eq(rows, 9);
    ck_assert(!kiln_is_alive(w, f.bare));
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(deferred, a_queued_change_to_an_entity_that_died_first_is_dropped) {
    fixture f;
    fixture_setup(&f);
    kiln_world *w = f.world;
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(w, &log);
    kiln_query *q = make_query(w, (kiln_query_desc){.with = {f.pos}});
    kiln_entity e = f.p_only[1];
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_int_eq(kiln_despawn(w, e), KILN_OK);
    test_owned o = test_owned_make(5);
    ck_assert_int_eq(kiln_add(w, e, owned, &o), KILN_OK); /* e is still alive now */
    ck_assert_int_eq(kiln_set(w, e, f.pos, &(test_position){3.0f, 3.0f}), KILN_OK);
    ck_assert_int_eq(kiln_remove(w, e, f.pos, NULL), KILN_OK);
    ck_assert_int_eq(kiln_despawn(w, e), KILN_OK); /* a second despawn, dropped too */
    ck_assert_int_eq(log.destroyed, 0);
    kiln_iter_fini(&it);
    ck_assert(!kiln_is_alive(w, e));
    ck_assert_int_eq(kiln_entity_count(w), 11);
    ck_assert_int_eq(log.destroyed, 1);
    ck_assert_int_eq(test_hook_log_count(&log, 5), 1);
    kiln_query_destroy(q);
    fixture_teardown(&f);
    ck_assert_int_eq(log.destroyed, 1);
    ck_assert_int_eq(log.bad_payload, 0);
}

KILN_TEST(deferred, values_queued_inside_a_loop_are_copied_at_the_call) {
    fixture f;
    fixture_setup(&f);
    kiln_world *w = f.world;
    kiln_query *q = make_query(w, (kiln_query_desc){.with = {f.pos}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    test_velocity v = {1.0f, 2.0f};
    test_position p = {3.0f, 4.0f};
    ck_assert_int_eq(kiln_add(w, f.p_only[0], f.vel, &v), KILN_OK);
    ck_assert_int_eq(kiln_set(w, f.p_only[1], f.pos, &p), KILN_OK);
    kiln_entity spawned;
    ck_assert_int_eq(kiln_spawn_with(w, &f.vel, (const void *[]){&v}, 1, &spawned), KILN_OK);
    v.x = -100.0f;
    p.x = -100.0f;
    kiln_iter_fini(&it);
    ck_assert_float_eq(((const test_velocity *)kiln_get(w, f.p_only[0], f.vel))->x, 1.0f);
    ck_assert_float_eq(((const test_position *)kiln_get(w, f.p_only[1], f.pos))->x, 3.0f);
    ck_assert_float_eq(((const test_velocity *)kiln_get(w, spawned, f.vel))->x, 1.0f);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(deferred, entities_spawned_inside_a_loop_accept_adds_and_come_alive_after) {
    fixture f;
    fixture_setup(&f);
    kiln_world *w = f.world;
    kiln_query *q = make_query(w, (kiln_query_desc){.with = {f.vel}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    kiln_entity one, batch[5];
    ck_assert_int_eq(kiln_spawn(w, &one), KILN_OK);
    ck_assert_int_eq(kiln_add(w, one, f.pos, &(test_position){8.0f, 9.0f}), KILN_OK);
    ck_assert_int_eq(kiln_add(w, one, f.tag, NULL), KILN_OK);
    ck_assert_int_eq(kiln_spawn_batch(w, (kiln_component[]){f.pos, f.vel}, 2, 5, batch), KILN_OK);
    for (int i = 0; i < 5; i++) {
        ck_assert_uint_ne(batch[i], KILN_NULL_ENTITY);
        ck_assert_uint_ne(batch[i], one);
        ck_assert(!kiln_is_alive(w, batch[i]));
        for (int j = 0; j < i; j++) ck_assert_uint_ne(batch[i], batch[j]);
        for (int j = 0; j < 3; j++) ck_assert_uint_ne(batch[i], f.p_only[j]);
    }
    ck_assert(!kiln_is_alive(w, one));
    kiln_tick now = it.tick;
    while (kiln_query_next(&it)) {
    }
    ck_assert(kiln_is_alive(w, one));
    ck_assert(kiln_has(w, one, f.tag));
    ck_assert_float_eq(((const test_position *)kiln_get(w, one, f.pos))->y, 9.0f);
    ck_assert_uint_eq(kiln_changed_tick(w, one, f.pos), now);
    static const unsigned char zero[sizeof(test_position)];
    for (int i = 0; i < 5; i++) {
        ck_assert(kiln_is_alive(w, batch[i]));
        ck_assert_mem_eq(kiln_get(w, batch[i], f.pos), zero, sizeof zero);
        ck_assert(kiln_has(w, batch[i], f.vel));
    }
    ck_assert_int_eq(kiln_entity_count(w), 18);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

KILN_TEST(deferred, set_get_mut_and_add_inside_a_loop_keep_call_order) {
    fixture f;
    fixture_setup(&f);
    kiln_world *w = f.world;
    kiln_query *q = make_query(w, (kiln_query_desc){.with = {f.pos}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) {
        for (int32_t row = 0; row < it.count; row++) {
            kiln_entity e = it.entities[row];
            test_position *p = kiln_get_mut(w, e, f.pos); /* a write in place, not queued */
            ck_assert_ptr_eq(p, (test_position *)it.columns[0] + row);
            p->x = 1.0f;
            ck_assert_int_eq(kiln_set(w, e, f.pos, &(test_position){5.0f, 5.0f}), KILN_OK);
            ck_assert_int_eq(kiln_add(w, e, f.pos, &(test_position){6.0f, 6.0f}), KILN_OK);
            ck_assert_float_eq(((const test_position *)kiln_get(w, e, f.pos))->x, 1.0f);
        }
    }
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(((const test_position *)kiln_get(w, f.pv[i], f.pos))->x, 6.0f);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}

/* What stays a programmer error during iteration dies of SIGABRT (assertions are on in test
 * builds). */

static void start_iterating(fixture *f, kiln_iter *it) {
    fixture_setup(f);
    kiln_query *q = make_query(f->world, (kiln_query_desc){.with = {f->pos}});
    kiln_query_iter(q, it);
    ck_assert(kiln_query_next(it));
}

KILN_TEST_GROUP(misuse);

KILN_TEST_SIGNAL(misuse, applying_a_command_buffer_during_iteration_aborts, SIGABRT) {
    fixture f;
    kiln_iter it;
    fixture_setup(&f);
    kiln_commands *cmd = kiln_commands_create(f.world);
    ck_assert_ptr_nonnull(cmd);
    kiln_entity placeholder;
    ck_assert_int_eq(kiln_commands_spawn(cmd, &placeholder), KILN_OK);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.pos}});
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    kiln_commands_apply(cmd, f.world, NULL);
}

KILN_TEST_SIGNAL(misuse, destroying_the_query_during_iteration_aborts, SIGABRT) {
    fixture f;
    kiln_iter it;
    start_iterating(&f, &it);
    kiln_query_destroy((kiln_query *)it.query);
}

/* ------------------------------------------------------------------------------------------ */
/* create / destroy                                                                           */
/* ------------------------------------------------------------------------------------------ */

static void expect_create_fails(kiln_world *w, kiln_query_desc desc, kiln_result code) {
    kiln_world_stats before, after;
    kiln_world_stats_get(w, &before);
    kiln_world_clear_error(w);
    kiln_query *q = NULL;
    ck_assert_int_eq(kiln_query_create(w, &desc, &q), code);
    ck_assert_str_ne(kiln_world_error(w), "");
    kiln_world_stats_get(w, &after);
    ck_assert_int_eq(after.queries, before.queries);
}

KILN_TEST(lifetime, query_create_rejects_unknown_repeated_or_missing_terms) {
    fixture f;
    fixture_setup(&f);
    kiln_world *w = f.world;
    expect_create_fails(w, (kiln_query_desc){.with = {f.pos, 99}}, KILN_ERR_UNKNOWN_COMPONENT);
    expect_create_fails(w, (kiln_query_desc){.with = {f.pos}, .without = {1000}},
                        KILN_ERR_UNKNOWN_COMPONENT);
    expect_create_fails(w, (kiln_query_desc){.with = {f.pos}, .optional = {f.tag + 1}},
                        KILN_ERR_UNKNOWN_COMPONENT);
    expect_create_fails(w, (kiln_query_desc){.without = {f.pos}}, KILN_ERR_INVALID_ARGUMENT);
    expect_create_fails(w, (kiln_query_desc){.optional = {f.pos}}, KILN_ERR_INVALID_ARGUMENT);
    expect_create_fails(w, (kiln_query_desc){0}, KILN_ERR_INVALID_ARGUMENT);
    expect_create_fails(w, (kiln_query_desc){.with = {f.pos, f.pos}}, KILN_ERR_INVALID_ARGUMENT);
    expect_create_fails(w, (kiln_query_desc){.with = {f.pos}, .without = {f.pos}},
                        KILN_ERR_INVALID_ARGUMENT);
    expect_create_fails(w, (kiln_query_desc){.with = {f.pos}, .optional = {f.vel, f.vel}},
                        KILN_ERR_INVALID_ARGUMENT);
    expect_create_fails(w, (kiln_query_desc){.with = {f.vel}, .without = {f.tag},
                                             .optional = {f.tag}},
                        KILN_ERR_INVALID_ARGUMENT);
    fixture_teardown(&f);
}

KILN_TEST(lifetime, query_stats_count_live_queries_and_destroy_null_is_a_noop) {
    fixture f;
    fixture_setup(&f);
    kiln_world_stats stats;
    kiln_world_stats_get(f.world, &stats);
    ck_assert_int_eq(stats.queries, 0);
    kiln_query *a = make_query(f.world, (kiln_query_desc){.with = {f.pos}});
    kiln_query *b = make_query(f.world, (kiln_query_desc){.with = {f.pos}});
    ck_assert_ptr_ne(a, b);
    kiln_world_stats_get(f.world, &stats);
    ck_assert_int_eq(stats.queries, 2);
    kiln_query_destroy(a);
    kiln_query_destroy(NULL);
    kiln_world_stats_get(f.world, &stats);
    ck_assert_int_eq(stats.queries, 1);
    ck_assert_int_eq(kiln_query_count(b), 9);
    kiln_query_destroy(b);
    fixture_teardown(&f);
}

KILN_TEST(matching, term_count_counts_with_and_optional_terms_in_order) {
    fixture f;
    fixture_setup(&f);
    kiln_query *q = make_query(f.world, (kiln_query_desc){.with = {f.vel, f.tag},
                                                          .optional = {f.pos}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_int_eq(it.term_count, 3);
    ck_assert_ptr_eq(kiln_iter_column(&it, 0), kiln_get(f.world, it.entities[0], f.vel));
    ck_assert_ptr_null(kiln_iter_column(&it, 1));
    ck_assert_ptr_eq(kiln_iter_column(&it, 2), kiln_get(f.world, it.entities[0], f.pos));
    kiln_iter_fini(&it);
    kiln_query_destroy(q);
    fixture_teardown(&f);
}
