/* test_query_match.c: Check suite for which rows a cached query visits: with, without and optional
 * terms, chunks, range views and change ticks. A query sees every matching archetype. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/src/query.h" /* kl_query_order_work */
#include "kiln.h"
#include "query_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* The fixture world (query_fixture.h), built afresh around every test of a group that uses it. */
static query_fixture F;

static void setup(void) { query_fixture_setup(&F); }

static void teardown(void) { query_fixture_teardown(&F); }

/* ------------------------------------------------------------------------------------------ */
/* matching                                                                                   */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(matching, .setup = setup, .teardown = teardown);

KILN_TEST(matching, with_terms_match_entities_having_all_of_them) {
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.pos, F.vel}});
    kiln_entity want[] = {F.pv[0], F.pv[1], F.pv[2], F.pv[3], F.pvt[0], F.pvt[1]};
    kiln_entity got[16];
    int64_t n = test_query_collect(q, got, 16);
    ck_assert(same_set(got, n, want, 6));
    ck_assert_int_eq(kiln_query_count(q), 6);
    kiln_query_destroy(q);
    q = make_query(F.world, (kiln_query_desc){.with = {F.pos}});
    ck_assert_int_eq(kiln_query_count(q), 9);
    kiln_query_destroy(q);
}

KILN_TEST(matching, without_terms_exclude_entities) {
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.pos}, .without = {F.vel}});
    kiln_entity got[16];
    int64_t n = test_query_collect(q, got, 16);
    ck_assert(same_set(got, n, F.p_only, 3));
    kiln_query_destroy(q);
    q = make_query(F.world, (kiln_query_desc){.with = {F.vel}, .without = {F.tag}});
    kiln_entity want[] = {F.pv[0], F.pv[1], F.pv[2], F.pv[3], F.v_only[0], F.v_only[1]};
    n = test_query_collect(q, got, 16);
    ck_assert(same_set(got, n, want, 6));
    kiln_query_destroy(q);
}

KILN_TEST(matching, optional_terms_give_null_columns_where_absent) {
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.pos}, .optional = {F.vel}});
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
            if (kiln_has(F.world, e, F.vel)) {
                ck_assert_ptr_nonnull(v);
                ck_assert_ptr_eq(&v[row], kiln_get(F.world, e, F.vel));
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
}

KILN_TEST(matching, tag_terms_match_but_have_null_columns) {
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.tag, F.pos}});
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
}

KILN_TEST(matching, chunk_entities_line_up_with_column_rows) {
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.vel, F.pos}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    int64_t rows = 0;
    while (kiln_query_next(&it)) {
        ck_assert_int_eq(it.term_count, 2);
        const test_velocity *v = kiln_iter_column(&it, 0);
        const test_position *p = kiln_iter_column(&it, 1);
        for (int32_t row = 0; row < it.count; row++, rows++) {
            kiln_entity e = it.entities[row];
            ck_assert(kiln_is_alive(F.world, e));
            ck_assert_ptr_eq(&v[row], kiln_get(F.world, e, F.vel));
            ck_assert_ptr_eq(&p[row], kiln_get(F.world, e, F.pos));
            ck_assert_float_eq(p[row].x, -p[row].y);
            ck_assert_float_eq(v[row].x, p[row].x);
        }
    }
    ck_assert_int_eq(rows, 6);
    kiln_query_destroy(q);
}

KILN_TEST(matching, writes_through_columns_are_visible_to_get) {
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.pos, F.vel}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) {
        test_position *p = kiln_iter_column(&it, 0);
        const test_velocity *v = kiln_iter_column(&it, 1);
        for (int32_t row = 0; row < it.count; row++) p[row].x += v[row].x + 100.0f;
    }
    for (int i = 0; i < 4; i++) {
        const test_position *p = kiln_get(F.world, F.pv[i], F.pos);
        ck_assert_float_eq(p->x, 2.0f * (float)(3 + i) + 100.0f);
    }
    ck_assert_float_eq(((const test_position *)kiln_get(F.world, F.p_only[0], F.pos))->x, 0.0f);
    kiln_query_destroy(q);
}

KILN_TEST(matching, query_created_before_an_archetype_sees_it_afterwards) {
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.vel}, .without = {F.pos}});
    ck_assert_int_eq(kiln_query_count(q), 2);
    kiln_component extra;
    ck_assert_int_eq(kiln_component_register(F.world, &(kiln_component_desc){.name = "Extra",
                                                                             .size = 4},
                                             &extra),
                     KILN_OK);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(F.world, (kiln_component[]){extra, F.vel}, NULL, 2, &e),
                     KILN_OK);
    ck_assert_int_eq(kiln_query_count(q), 3);
    kiln_entity got[8];
    int64_t n = test_query_collect(q, got, 8);
    ck_assert_int_eq(n, 3);
    ck_assert(test_contains(got, n, e));
    /* and follows entities that move into and out of its archetypes */
    ck_assert_int_eq(kiln_add(F.world, F.bare, F.vel, NULL), KILN_OK);
    ck_assert_int_eq(kiln_add(F.world, F.v_only[0], F.pos, NULL), KILN_OK);
    n = test_query_collect(q, got, 8);
    ck_assert_int_eq(n, 3);
    ck_assert(test_contains(got, n, F.bare));
    ck_assert(!test_contains(got, n, F.v_only[0]));
    kiln_query_destroy(q);
}

KILN_TEST(matching, empty_archetypes_are_skipped) {
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.pos}});
    int32_t matched = kiln_query_archetype_count(q);
    ck_assert_int_ge(matched, 2);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(kiln_despawn(F.world, F.p_only[i]), KILN_OK);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(kiln_remove(F.world, F.pvt[i], F.tag, NULL), KILN_OK);
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
    kiln_query *none = make_query(F.world, (kiln_query_desc){.with = {F.tag}});
    kiln_query_iter(none, &it);
    ck_assert(!kiln_query_next(&it));
    ck_assert_int_eq(kiln_query_count(none), 0);
    /* emptied archetypes stay matched: what a walk of the query visits */
    ck_assert_int_ge(kiln_query_archetype_count(none), 1);
    ck_assert_int_eq(kiln_query_archetype_count(q), matched);
    kiln_query_destroy(none);
    kiln_query_destroy(q);
}

/* kiln_query_bytes counts every value of a matched row (a component the query does not name
 * included), each value's change tick, the handle and its 8-byte slot record; tags take none. */
KILN_TEST(matching, query_bytes_counts_whole_rows_of_every_matched_archetype) {
    kiln_component_info pos, vel;
    ck_assert(kiln_component_info_get(F.world, F.pos, &pos) && kiln_component_info_get(F.world, F.vel, &vel));
    int64_t handle = (int64_t)sizeof(kiln_entity) + 8, tick = (int64_t)sizeof(kiln_row_tick);
    int64_t p_row = handle + (int64_t)pos.stride + tick, pv_row = p_row + (int64_t)vel.stride + tick;
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.pos}});
    ck_assert_int_eq(kiln_query_bytes(q), 3 * p_row + (4 + 2) * pv_row);
    kiln_query_destroy(q);
    q = make_query(F.world, (kiln_query_desc){.with = {F.tag}});
    ck_assert_int_eq(kiln_query_bytes(q), 2 * pv_row); /* Velocity, which it does not name, too */
    kiln_despawn(F.world, F.pvt[0]);
    ck_assert_int_eq(kiln_query_bytes(q), pv_row);
    kiln_query_destroy(q);
    q = make_query(F.world, (kiln_query_desc){.with = {F.vel}, .without = {F.pos}});
    ck_assert_int_eq(kiln_query_bytes(q), 2 * (handle + (int64_t)vel.stride + tick));
    kiln_query_destroy(q);
}

KILN_TEST(matching, query_count_and_iteration_allocate_nothing) {
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.pos}, .optional = {F.vel}});
    int64_t calls = F.alloc.calls;
    ck_assert_int_eq(kiln_query_count(q), 9);
    ck_assert_int_eq(kiln_query_bytes(q), kiln_query_bytes(q)); /* (allocates nothing either) */
    for (int round = 0; round < 3; round++) {
        kiln_iter it;
        kiln_query_iter(q, &it);
        while (kiln_query_next(&it))
            for (int32_t row = 0; row < it.count; row++) kiln_iter_mark_changed(&it, 0, row);
    }
    ck_assert_int_eq(F.alloc.calls, calls);
    kiln_query_destroy(q);
}

/* A world over a, with Position (pos) and six tags T0..T5. */
static kiln_world *tagged_world(test_allocator *a, kiln_component *pos, kiln_component tags[6]) {
    test_allocator_init(a);
    kiln_world *w = test_world_create(a);
    *pos = test_register_position(w);
    for (int i = 0; i < 6; i++) tags[i] = test_register_tag(w, (char[]){'T', (char)('0' + i), '\0'});
    return w;
}

KILN_TEST(matching, many_archetypes_are_all_matched) {
    test_allocator a;
    kiln_component pos, tags[6];
    kiln_world *w = tagged_world(&a, &pos, tags);
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

/* kiln_query_memory is what the query's own blocks take (what destroying it gives back, less
 * its slot in the world's list of queries), and it grows with the archetypes it matches. */
KILN_TEST(matching, query_memory_is_its_own_blocks_and_grows_with_the_archetypes_it_matches) {
    test_allocator a;
    kiln_component pos, tags[6];
    kiln_world *w = tagged_world(&a, &pos, tags);
    kiln_component never = test_register_tag(w, "Never"); /* on no entity */
    int64_t slot = (int64_t)sizeof(kiln_query *);
    for (int round = 0; round < 2; round++) { /* an empty world, then 64 archetypes with pos */
        kiln_query *q = make_query(w, (kiln_query_desc){.with = {pos}});
        kiln_query *none = make_query(w, (kiln_query_desc){.with = {pos, never}});
        int64_t mem = kiln_query_memory(q), live = a.live_bytes;
        ck_assert_int_gt(mem, slot);
        ck_assert_int_eq(kiln_query_memory(q), mem); /* (allocates nothing) */
        ck_assert_int_eq(a.live_bytes, live);
        kiln_query_destroy(q);
        ck_assert_int_eq(live - a.live_bytes, mem - slot);
        if (round == 0) {
            for (int mask = 0; mask < 64; mask++) {
                kiln_component comps[7] = {pos};
                int32_t n = 1;
                for (int b = 0; b < 6; b++)
                    if (mask & (1 << b)) comps[n++] = tags[b];
                ck_assert_int_eq(kiln_spawn_batch(w, comps, n, 1, NULL), KILN_OK);
            }
        } else {
            ck_assert_int_ge(mem - kiln_query_memory(none), 64 * (int64_t)sizeof(void *));
        }
        kiln_query_destroy(none);
    }
    kiln_world_destroy(w);
    ck_assert_int_eq(a.live_bytes, 0);
}

KILN_TEST(matching, term_count_counts_with_and_optional_terms_in_order) {
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.vel, F.tag},
                                                          .optional = {F.pos}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_int_eq(it.term_count, 3);
    ck_assert_ptr_eq(kiln_iter_column(&it, 0), kiln_get(F.world, it.entities[0], F.vel));
    ck_assert_ptr_null(kiln_iter_column(&it, 1));
    ck_assert_ptr_eq(kiln_iter_column(&it, 2), kiln_get(F.world, it.entities[0], F.pos));
    kiln_iter_fini(&it);
    kiln_query_destroy(q);
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

KILN_TEST_GROUP_WITH(ticks, .setup = setup, .teardown = teardown);

KILN_TEST(ticks, mark_changed_stamps_the_row_at_the_iteration_tick) {
    kiln_tick_advance(F.world);
    kiln_tick now = kiln_tick_advance(F.world);
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.pos}, .without = {F.vel}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    kiln_entity marked = KILN_NULL_ENTITY;
    while (kiln_query_next(&it)) {
        ck_assert_uint_eq(it.tick, now);
        if (marked == KILN_NULL_ENTITY) {
            kiln_iter_mark_changed(&it, 0, 0);
            marked = it.entities[0];
            ck_assert_uint_eq(kiln_iter_row_tick(&it, 0, 0), now);
        }
    }
    ck_assert_uint_ne(marked, KILN_NULL_ENTITY);
    ck_assert_uint_eq(kiln_changed_tick(F.world, marked, F.pos), now);
    for (int i = 0; i < 3; i++)
        if (F.p_only[i] != marked)
            ck_assert_uint_eq(kiln_changed_tick(F.world, F.p_only[i], F.pos), 1);
    kiln_query_destroy(q);
}

KILN_TEST(ticks, changed_since_is_strictly_greater) {
    for (int i = 0; i < 4; i++) kiln_tick_advance(F.world); /* tick 5 */
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.pos}, .without = {F.vel}});
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
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.pos}, .without = {F.vel}});
    ck_assert_uint_eq(column_tick_of(q, 0), 1);
    kiln_tick t = kiln_tick_advance(F.world);
    ck_assert_uint_eq(column_tick_of(q, 0), 1); /* nothing written since */
    ck_assert_ptr_nonnull(kiln_get(F.world, F.p_only[1], F.pos));
    ck_assert_uint_eq(column_tick_of(q, 0), 1); /* reading is not writing */
    ck_assert_ptr_nonnull(kiln_get_mut(F.world, F.p_only[1], F.pos));
    ck_assert_uint_eq(column_tick_of(q, 0), t);
    t = kiln_tick_advance(F.world);
    ck_assert_int_eq(kiln_set(F.world, F.p_only[2], F.pos, &(test_position){1.0f, 1.0f}), KILN_OK);
    ck_assert_uint_eq(column_tick_of(q, 0), t);
    t = kiln_tick_advance(F.world);
    ck_assert_int_eq(kiln_add(F.world, F.p_only[0], F.pos, NULL), KILN_OK);
    ck_assert_uint_eq(column_tick_of(q, 0), t);
    t = kiln_tick_advance(F.world);
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) kiln_iter_mark_changed(&it, 0, it.count - 1);
    ck_assert_uint_eq(column_tick_of(q, 0), t);
    kiln_tick_advance(F.world);
    kiln_tick_advance(F.world);
    ck_assert_uint_eq(column_tick_of(q, 0), t);
    kiln_query_destroy(q);
}

KILN_TEST(ticks, column_tick_of_other_archetypes_is_untouched_by_a_write) {
    kiln_query *q = make_query(F.world, (kiln_query_desc){.with = {F.pos}});
    kiln_tick t = kiln_tick_advance(F.world);
    ck_assert_ptr_nonnull(kiln_get_mut(F.world, F.pv[0], F.pos));
    kiln_iter it;
    kiln_query_iter(q, &it);
    int changed_chunks = 0, unchanged_rows = 0;
    while (kiln_query_next(&it)) {
        kiln_tick ct = kiln_iter_column_tick(&it, 0);
        bool holds_pv0 = test_contains(it.entities, it.count, F.pv[0]);
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
}

/* ------------------------------------------------------------------------------------------ */
/* order                                                                                      */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(order, .timeout = 60); /* bursts of 2,048 archetypes, also under sanitizers */

/* When visit_order makes its query: before the archetypes (they wait on its pending list and
 * settle at once at the first read), before them and counted after each add (settled one by
 * one), or after them (sorted at creation). */
enum { QUERY_FIRST, QUERY_FIRST_READ_BETWEEN, QUERY_LATE, QUERY_WHENS };

/* The handles a query over A visits in a world that made {A, C} (then emptied it) before
 * {A, B}, or not, the query made when `when` says. */
static void visit_order(bool make_ac_first, int when, kiln_entity *got) {
    bool made_late = when == QUERY_LATE;
    kiln_world *world = kiln_world_create(&(kiln_world_desc){0});
    ck_assert_ptr_nonnull(world);
    kiln_component a = test_register_tag(world, "A"), b = test_register_tag(world, "B");
    kiln_component c = test_register_tag(world, "C"), d = test_register_tag(world, "D");
    kiln_query *q = made_late ? NULL : make_query(world, (kiln_query_desc){.with = {a}});
    if (make_ac_first) { /* a mispredicted frame, taken back: the archetype stays */
        kiln_entity x;
        ck_assert_int_eq(kiln_spawn(world, &x), KILN_OK);
        ck_assert_int_eq(kiln_add(world, x, a, NULL), KILN_OK);
        ck_assert_int_eq(kiln_add(world, x, c, NULL), KILN_OK);
        ck_assert_int_eq(kiln_despawn(world, x), KILN_OK);
    }
    kiln_entity e[3];
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(kiln_spawn(world, &e[i]), KILN_OK);
        ck_assert_int_eq(kiln_add(world, e[i], a, NULL), KILN_OK);
    }
    kiln_component extra[3] = {d, c, b}; /* {A, D}, {A, C}, {A, B} */
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(kiln_add(world, e[i], extra[i], NULL), KILN_OK);
        if (when == QUERY_FIRST_READ_BETWEEN) ck_assert_int_eq(kiln_query_count(q), 3);
    }
    if (made_late) q = make_query(world, (kiln_query_desc){.with = {a}});
    ck_assert_int_eq(test_query_collect(q, got, 3), 3);
    for (int i = 0; i < 3; i++) got[i] = kiln_entity_index(got[i]) - kiln_entity_index(e[0]);
    kiln_query_destroy(q);
    kiln_world_destroy(world);
}

/* Archetypes are visited by their component ids, not by when they were made: a world that made
 * one more (a save loaded afresh makes only those that hold rows, a restore keeps those made
 * after its snapshot) visits the same rows in the same order. */
KILN_TEST(order, archetypes_are_visited_by_their_components_not_by_when_they_were_made) {
    kiln_entity want[3] = {2, 1, 0}; /* {A, B}, {A, C}, {A, D}: ids B < C < D */
    for (int first = 0; first < 2; first++)
        for (int when = 0; when < QUERY_WHENS; when++) {
            kiln_entity got[3];
            visit_order(first, when, got);
            for (int i = 0; i < 3; i++) ck_assert_uint_eq(got[i], want[i]);
        }
}

/* Tag masks: the archetypes {P} + tags that a burst makes, and the queries over P each joins. */
enum { BURST_TAGS = 11, BURST_ARCHETYPES = 1 << BURST_TAGS, BURST_QUERIES = 16 };

/* The canonical order of two tag masks (tags registered in bit order): by the sorted tag list,
 * a list that begins the other first. */
static int mask_order(const void *pa, const void *pb) {
    int a = *(const int *)pa, b = *(const int *)pb;
    for (int i = 0, j = 0;; i++, j++) {
        while (i < BURST_TAGS && !(a & (1 << i))) i++;
        while (j < BURST_TAGS && !(b & (1 << j))) j++;
        if (i == BURST_TAGS || j == BURST_TAGS) return (i < BURST_TAGS) - (j < BURST_TAGS);
        if (i != j) return i < j ? -1 : 1;
    }
}

/* Spawns one entity per mask, in masks' order, under BURST_QUERIES queries over P made before,
 * counting one of them every read_every spawns (0: never); checks that every query then visits
 * the archetypes in the canonical order, and returns the match entries the queries wrote to
 * keep that order. */
static int64_t burst(const int *masks, int read_every) {
    kiln_world *w = kiln_world_create(&(kiln_world_desc){0});
    kiln_component p = test_register_tag(w, "P"), tags[BURST_TAGS];
    for (int b = 0; b < BURST_TAGS; b++) {
        char name[16];
        snprintf(name, sizeof name, "T%d", b);
        tags[b] = test_register_tag(w, name);
    }
    kiln_query *qs[BURST_QUERIES];
    for (int i = 0; i < BURST_QUERIES; i++) qs[i] = make_query(w, (kiln_query_desc){.with = {p}});
    static kiln_entity of_mask[BURST_ARCHETYPES], got[BURST_ARCHETYPES];
    for (int i = 0; i < BURST_ARCHETYPES; i++) {
        kiln_component comps[BURST_TAGS + 1] = {p};
        int32_t n = 1;
        for (int b = 0; b < BURST_TAGS; b++)
            if (masks[i] & (1 << b)) comps[n++] = tags[b];
        ck_assert_int_eq(kiln_spawn_batch(w, comps, n, 1, &of_mask[masks[i]]), KILN_OK);
        if (read_every && i % read_every == 0) ck_assert_int_eq(kiln_query_count(qs[i % BURST_QUERIES]), i + 1);
    }
    static int sorted[BURST_ARCHETYPES];
    for (int m = 0; m < BURST_ARCHETYPES; m++) sorted[m] = m;
    qsort(sorted, BURST_ARCHETYPES, sizeof(int), mask_order);
    int64_t work = 0;
    for (int i = 0; i < BURST_QUERIES; i++) {
        ck_assert_int_eq(kiln_query_archetype_count(qs[i]), BURST_ARCHETYPES);
        ck_assert_int_eq(test_query_collect(qs[i], got, BURST_ARCHETYPES), BURST_ARCHETYPES);
        for (int k = 0; k < BURST_ARCHETYPES; k++) ck_assert_uint_eq(got[k], of_mask[sorted[k]]);
        work += kl_query_order_work(qs[i]);
    }
    kiln_world_destroy(w);
    return work;
}

/* A burst of new archetypes each ordered before all the others costs what one in order does:
 * placing each at once moved every match after it, Q*N*N/2 entries for N archetypes under Q
 * queries (33 million here); settling them at the next read writes each about once, and the
 * bound below (N log N per query) leaves the old way 90 times over it. */
KILN_TEST(order, a_burst_of_archetypes_made_in_reverse_order_writes_each_match_about_once) {
    static int masks[BURST_ARCHETYPES];
    for (int m = 0; m < BURST_ARCHETYPES; m++) masks[m] = m;
    qsort(masks, BURST_ARCHETYPES, sizeof(int), mask_order);
    const int64_t bound = (int64_t)BURST_QUERIES * BURST_ARCHETYPES * BURST_TAGS;
    int64_t forward = burst(masks, 0);
    ck_assert_msg(forward <= bound, "in order: %lld entries written, bound %lld", (long long)forward,
                  (long long)bound);
    for (int i = 0; i < BURST_ARCHETYPES / 2; i++) {
        int t = masks[i];
        masks[i] = masks[BURST_ARCHETYPES - 1 - i];
        masks[BURST_ARCHETYPES - 1 - i] = t;
    }
    int64_t reverse = burst(masks, 0);
    ck_assert_msg(reverse <= bound, "in reverse order: %lld entries written, bound %lld",
                  (long long)reverse, (long long)bound);
}

/* However the archetypes came, and whenever the queries were read between them, every query
 * visits them in the canonical order (burst checks it). */
KILN_TEST(order, archetypes_made_in_any_order_and_read_between_are_visited_in_the_canonical_order) {
    static int masks[BURST_ARCHETYPES];
    for (int m = 0; m < BURST_ARCHETYPES; m++) masks[m] = m;
    uint64_t state = 0x5eed;
    for (int i = BURST_ARCHETYPES - 1; i > 0; i--) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((state >> 33) % (uint64_t)(i + 1)), t = masks[i];
        masks[i] = masks[j];
        masks[j] = t;
    }
    burst(masks, 37);
    burst(masks, 1);
}
