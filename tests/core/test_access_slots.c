/* test_access_slots.c: Check suite for the archetype slots behind get, has, add and remove:
 * component ids past the direct slots, the changed column at every position of a move, and
 * edges that once cached are reused in both directions. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "access_fixture.h"
#include "kiln.h"
#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

static access_fixture F;

static void setup(void) { access_fixture_setup(&F); }

static void teardown(void) { access_fixture_teardown(&F); }

KILN_TEST_GROUP_WITH(slots, .setup = setup, .teardown = teardown, .timeout = 30);

/* Registers "Fill<i>" 4-byte components until the registry holds count ids. */
static void register_until(kiln_component count) {
    char name[32];
    while ((kiln_component)kiln_component_count(F.w) < count) {
        snprintf(name, sizeof name, "Fill%d", kiln_component_count(F.w));
        kiln_component id;
        ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = name,
                                                     .size = sizeof(int32_t)}, &id),
                         KILN_OK);
    }
}

/* Entities carry their index as every component's value; each add and remove is checked
 * against what the entity should hold afterwards. */
static void assert_holds(kiln_entity e, const kiln_component *ids, const bool *has, int n,
                         int32_t value) {
    for (int i = 0; i < n; i++) {
        ck_assert_msg(kiln_has(F.w, e, ids[i]) == has[i], "component %u", (unsigned)ids[i]);
        const int32_t *v = kiln_get(F.w, e, ids[i]);
        if (!has[i]) {
            ck_assert_ptr_null(v);
            continue;
        }
        ck_assert_ptr_nonnull(v);
        ck_assert_int_eq(*v, value);
    }
}

KILN_TEST(slots, ids_past_the_direct_slots_add_remove_and_read_like_low_ones) {
    register_until(1100);
    kiln_component ids[] = {3, 700, 1023, 1024, 1025, 1090};
    enum { N = sizeof ids / sizeof ids[0], E = 6 };
    kiln_entity es[E];
    bool has[E][N];
    memset(has, 0, sizeof has);
    for (int k = 0; k < E; k++) es[k] = spawn_one(F.w);
    /* adds in a different order for each entity, then removes from the middle out */
    for (int step = 0; step < N; step++)
        for (int k = 0; k < E; k++) {
            int i = (step + k) % N;
            ck_assert_int_eq(kiln_add(F.w, es[k], ids[i], &(int32_t){k}), KILN_OK);
            has[k][i] = true;
            for (int j = 0; j < E; j++) assert_holds(es[j], ids, has[j], N, j);
        }
    for (int step = 0; step < N; step++)
        for (int k = 0; k < E; k++) {
            int i = (N / 2 + step * (k % 2 ? 1 : N - 1)) % N;
            bool removed = false;
            ck_assert_int_eq(kiln_remove(F.w, es[k], ids[i], &removed), KILN_OK);
            ck_assert(removed);
            has[k][i] = false;
            for (int j = 0; j < E; j++) assert_holds(es[j], ids, has[j], N, j);
        }
    /* all back in the empty archetype; adding the first id again reuses its archetype */
    int32_t archetypes = archetype_count(F.w);
    for (int k = 0; k < E; k++) {
        ck_assert_int_eq(kiln_entity_components(F.w, es[k], NULL, 0), 0);
        ck_assert_int_eq(kiln_add(F.w, es[k], ids[0], &(int32_t){k}), KILN_OK);
        ck_assert_int_eq(*(const int32_t *)kiln_get(F.w, es[k], ids[0]), k);
    }
    ck_assert_int_eq(archetype_count(F.w), archetypes);
}

KILN_TEST(slots, a_round_trip_along_one_edge_creates_no_archetype_the_second_time) {
    register_until(1500);
    kiln_component ids[] = {F.vel, 1200, 1499};
    for (int i = 0; i < 3; i++) {
        kiln_entity e = spawn_at(F.w, F.pos, 1, 2);
        ck_assert_int_eq(kiln_add(F.w, e, ids[i], NULL), KILN_OK);
        ck_assert_int_eq(kiln_remove(F.w, e, ids[i], NULL), KILN_OK);
        int32_t seen = archetype_count(F.w);
        for (int round = 0; round < 3; round++) {
            ck_assert_int_eq(kiln_add(F.w, e, ids[i], NULL), KILN_OK);
            ck_assert_int_eq(kiln_remove(F.w, e, ids[i], NULL), KILN_OK);
        }
        ck_assert_int_eq(archetype_count(F.w), seen);
        test_assert_position(F.w, e, F.pos, 1, 2);
    }
}

/* A long session's late ids: every combination of 8 of them, walked one add or remove at a
 * time from an entity that holds a higher one (windows grow down and up). Each new archetype
 * takes memory for what it holds (under 4 KiB), not a slot and an edge per id up to the
 * highest it meets (32 KiB each once ids passed 512, 2026-12-06). */
KILN_TEST(slots, archetypes_of_late_ids_cost_what_they_hold_not_the_highest_id) {
    register_until(1100);
    kiln_component ids[] = {1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1050};
    enum { N = sizeof ids / sizeof ids[0] };
    bool has[N] = {false};
    kiln_entity e = spawn_one(F.w);
    ck_assert_int_eq(kiln_add(F.w, e, ids[N - 1], &(int32_t){7}), KILN_OK);
    has[N - 1] = true;
    kiln_world_stats before, after;
    kiln_world_stats_get(F.w, &before);
    for (unsigned mask = 1; mask < 256; mask++) {
        unsigned bit = (mask ^ (mask >> 1)) ^ ((mask - 1) ^ ((mask - 1) >> 1)), b = 0;
        while ((1u << b) != bit) b++;
        if (has[b]) ck_assert_int_eq(kiln_remove(F.w, e, ids[b], NULL), KILN_OK);
        else ck_assert_int_eq(kiln_add(F.w, e, ids[b], &(int32_t){7}), KILN_OK);
        has[b] = !has[b];
        assert_holds(e, ids, has, N, 7);
    }
    kiln_world_stats_get(F.w, &after);
    int64_t made = after.archetypes - before.archetypes;
    ck_assert_int_eq(made, 255);
    ck_assert_int_lt((after.bytes - before.bytes) / made, 4096);
}

/* kiln_archetype_exists answers for exactly the list asked, ascending, and makes nothing. */
KILN_TEST(slots, archetype_exists_names_only_held_archetypes_and_makes_none) {
    register_until(1100);
    kiln_entity e = spawn_at(F.w, F.pos, 1, 2);
    ck_assert_int_eq(kiln_add(F.w, e, 1050, &(int32_t){1}), KILN_OK);
    int32_t seen = archetype_count(F.w);
    kiln_component held[] = {F.pos < 1050 ? F.pos : 1050, F.pos < 1050 ? 1050 : F.pos};
    kiln_component reversed[] = {held[1], held[0]}, twice[] = {held[0], held[0]};
    ck_assert(kiln_archetype_exists(F.w, held, 2));
    ck_assert(kiln_archetype_exists(F.w, held, 0)); /* the empty one */
    ck_assert(!kiln_archetype_exists(F.w, reversed, 2));
    ck_assert(!kiln_archetype_exists(F.w, twice, 2));
    ck_assert(!kiln_archetype_exists(F.w, (kiln_component[]){1050}, 1));
    ck_assert(!kiln_archetype_exists(F.w, (kiln_component[]){held[0], held[1], 1099}, 3));
    ck_assert_int_eq(archetype_count(F.w), seen);
    ck_assert_int_eq(kiln_remove(F.w, e, F.pos, NULL), KILN_OK);
    ck_assert(kiln_archetype_exists(F.w, (kiln_component[]){1050}, 1));
}

/* The changed column first, in the middle and last among owned (hooked) and plain columns:
 * every other value moves with its tick, and each owned value is destroyed exactly once. */
static test_hook_log hook_log; /* static: large */

KILN_TEST(slots, the_changed_column_at_every_position_moves_the_others_intact) {
    memset(&hook_log, 0, sizeof hook_log);
    kiln_component owned = test_register_owned(F.w, &hook_log);
    kiln_component late;
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = "Late",
                                                 .size = sizeof(double)}, &late),
                     KILN_OK);
    /* ids ascending: pos < vel < owned < late; each in turn is the one added and removed */
    kiln_component order[] = {F.pos, F.vel, owned, late};
    for (int changed = 0; changed < 4; changed++) {
        kiln_entity es[3];
        for (int k = 0; k < 3; k++) {
            test_owned o = test_owned_make(100 + k);
            ck_assert_int_eq(kiln_spawn_with(F.w, (kiln_component[]){F.pos, F.vel, owned, late},
                                             (const void *[]){&(test_position){(float)k, 1},
                                                              &(test_velocity){2, (float)k}, &o,
                                                              &(double){k * 0.5}},
                                             4, &es[k]),
                             KILN_OK);
        }
        kiln_tick_advance(F.w);
        kiln_tick before = kiln_changed_tick(F.w, es[0], order[(changed + 1) % 4]);
        bool removed = false;
        ck_assert_int_eq(kiln_remove(F.w, es[0], order[changed], &removed), KILN_OK);
        ck_assert(removed && !kiln_has(F.w, es[0], order[changed]));
        ck_assert_uint_eq(kiln_changed_tick(F.w, es[0], order[(changed + 1) % 4]), before);
        for (int k = 0; k < 3; k++) {
            bool lost = k == 0;
            if (!(lost && changed == 0)) test_assert_position(F.w, es[k], F.pos, (float)k, 1);
            if (!(lost && changed == 1)) test_assert_velocity(F.w, es[k], F.vel, 2, (float)k);
            if (!(lost && changed == 2))
                ck_assert_int_eq(((const test_owned *)kiln_get(F.w, es[k], owned))->id, 100 + k);
            if (!(lost && changed == 3))
                ck_assert(*(const double *)kiln_get(F.w, es[k], late) == k * 0.5);
        }
        /* and back: the added value lands in its column, the others stay */
        test_owned again = changed == 2 ? test_owned_make(200) : (test_owned){0};
        const void *value = changed == 0   ? (const void *)&(test_position){9, 9}
                            : changed == 1 ? (const void *)&(test_velocity){9, 9}
                            : changed == 2 ? (const void *)&again
                                           : (const void *)&(double){9.0};
        ck_assert_int_eq(kiln_add(F.w, es[0], order[changed], value), KILN_OK);
        if (changed == 2) ck_assert_int_eq(((const test_owned *)kiln_get(F.w, es[0], owned))->id, 200);
        if (changed != 2) ck_assert_ptr_nonnull(kiln_get(F.w, es[0], order[changed]));
        for (int k = 0; k < 3; k++) ck_assert_int_eq(kiln_despawn(F.w, es[k]), KILN_OK);
    }
    for (int32_t id = 100; id < 103; id++) ck_assert_int_eq(test_hook_log_count(&hook_log, id), 4);
    ck_assert_int_eq(test_hook_log_count(&hook_log, 200), 1);
    ck_assert_int_eq(test_hook_log_count(&hook_log, -1), 0); /* destroyed twice */
    ck_assert_int_eq(test_hook_log_count(&hook_log, -2), 0); /* destroyed after a move */
    ck_assert_int_eq(hook_log.bad_payload, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* cached edges: the second add or remove along an edge takes its stored plan                 */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(edges, .setup = setup, .teardown = teardown);

/* Caches the edges between {Position} and {Position, c} with a round trip of a spare entity. */
static void cache_edge_to(kiln_component c) {
    kiln_entity spare = spawn_at(F.w, F.pos, 0, 0);
    ck_assert_int_eq(kiln_add(F.w, spare, c, NULL), KILN_OK);
    ck_assert_int_eq(kiln_remove(F.w, spare, c, NULL), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.w, spare), KILN_OK);
}

/* Refuses a negative value. */
static kiln_result refuse_negative(const kiln_world *world, kiln_entity entity,
                                   const void *value, void *ctx, char *why, size_t why_size) {
    (void)world, (void)entity;
    (*(int *)ctx)++;
    if (value == NULL || *(const int32_t *)value >= 0) return KILN_OK;
    snprintf(why, why_size, "%d is negative", (int)*(const int32_t *)value);
    return KILN_ERR_INVALID_ARGUMENT;
}

KILN_TEST(edges, an_add_along_a_cached_edge_still_runs_the_check_hook_and_a_refusal_changes_nothing) {
    int calls = 0;
    kiln_component checked;
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){
                         .name = "Checked", .size = sizeof(int32_t), .check = refuse_negative,
                         .hook_ctx = &calls}, &checked),
                     KILN_OK);
    cache_edge_to(checked);
    kiln_entity e = spawn_at(F.w, F.pos, 3, 4);
    int before = calls;
    snapshot snap;
    kiln_component comps[] = {F.pos, checked};
    take_snapshot(F.w, &e, 1, comps, 2, &snap);
    ck_assert_int_eq(kiln_add(F.w, e, checked, &(int32_t){-1}), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(calls, before + 1);
    ck_assert_str_eq(kiln_world_error(F.w), "kiln_add: -1 is negative");
    assert_unchanged(F.w, &e, 1, comps, 2, &snap);
    ck_assert_int_eq(kiln_add(F.w, e, checked, &(int32_t){7}), KILN_OK);
    ck_assert_int_eq(calls, before + 2);
    ck_assert_int_eq(*(const int32_t *)kiln_get(F.w, e, checked), 7);
    test_assert_position(F.w, e, F.pos, 3, 4);
}

KILN_TEST(edges, an_add_along_a_cached_edge_copies_a_value_that_the_move_itself_relocates) {
    cache_edge_to(F.vel);
    kiln_entity es[3];
    for (int k = 0; k < 3; k++) es[k] = spawn_at(F.w, F.pos, (float)k, (float)(10 + k));
    /* es[2] is the last row of {Position}: moving es[0] out swaps it into the hole, so the
     * value (read from its Position, same layout as a Velocity) must be taken first */
    ck_assert_int_eq(kiln_add(F.w, es[0], F.vel, kiln_get(F.w, es[2], F.pos)), KILN_OK);
    test_assert_velocity(F.w, es[0], F.vel, 2, 12);
    /* and from the moving entity's own row */
    ck_assert_int_eq(kiln_add(F.w, es[1], F.vel, kiln_get(F.w, es[1], F.pos)), KILN_OK);
    test_assert_velocity(F.w, es[1], F.vel, 1, 11);
    /* no value: zeroes, as the general path writes */
    ck_assert_int_eq(kiln_add(F.w, es[2], F.vel, NULL), KILN_OK);
    test_assert_velocity(F.w, es[2], F.vel, 0, 0);
    for (int k = 0; k < 3; k++) test_assert_position(F.w, es[k], F.pos, (float)k, (float)(10 + k));
}

/* A padded component (6 bytes in an 8-byte stride) takes no plain edge: the general path
 * zeroes its padding instead of copying the bytes past the caller's value. */
KILN_TEST(edges, an_add_along_a_cached_edge_zeroes_the_padding_of_a_padded_value) {
    kiln_component padded;
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = "Padded", .size = 6,
                                                                         .align = 4}, &padded),
                     KILN_OK);
    cache_edge_to(padded);
    uint8_t value[8] = {1, 2, 3, 4, 5, 6, 0xef, 0xbe}; /* bytes 6 and 7 are not the value's */
    kiln_entity e = spawn_at(F.w, F.pos, 1, 2);
    ck_assert_int_eq(kiln_add(F.w, e, padded, value), KILN_OK);
    const uint8_t *row = kiln_get(F.w, e, padded);
    ck_assert_mem_eq(row, value, 6);
    ck_assert_uint_eq(row[6], 0);
    ck_assert_uint_eq(row[7], 0);
}

KILN_TEST(edges, moves_along_cached_edges_keep_ticks_and_raise_the_column_tick) {
    cache_edge_to(F.vel);
    kiln_tick_advance(F.w); /* later than the spare's values in the neighbour's columns */
    kiln_entity e = spawn_at(F.w, F.pos, 5, 6);
    kiln_tick spawned = kiln_changed_tick(F.w, e, F.pos);
    kiln_tick_advance(F.w);
    kiln_tick now = kiln_tick_advance(F.w);
    ck_assert_int_eq(kiln_add(F.w, e, F.vel, &(test_velocity){1, 2}), KILN_OK);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), spawned);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.vel), now);
    /* the columns of {Position, Velocity} know which ticks arrived: the moved Position's
     * and the added Velocity's */
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(F.w, &(kiln_query_desc){.with = {F.pos, F.vel}}, &q),
                     KILN_OK);
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_uint_eq(kiln_iter_column_tick(&it, 0), spawned);
    ck_assert_uint_eq(kiln_iter_column_tick(&it, 1), now);
    kiln_iter_fini(&it);
    kiln_query_destroy(q);
    kiln_tick_advance(F.w);
    bool removed = false;
    ck_assert_int_eq(kiln_remove(F.w, e, F.vel, &removed), KILN_OK);
    ck_assert(removed && !kiln_has(F.w, e, F.vel));
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), spawned);
    test_assert_position(F.w, e, F.pos, 5, 6);
}

KILN_TEST(edges, stale_handles_along_cached_edges_fail_and_change_nothing) {
    cache_edge_to(F.vel);
    kiln_entity e = spawn_at(F.w, F.pos, 1, 1), other = spawn_at(F.w, F.pos, 2, 2);
    ck_assert_int_eq(kiln_add(F.w, other, F.vel, &(test_velocity){3, 3}), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    kiln_entity reused = spawn_at(F.w, F.pos, 4, 4); /* may take e's slot, a newer generation */
    snapshot snap;
    kiln_entity es[] = {other, reused};
    kiln_component comps[] = {F.pos, F.vel};
    take_snapshot(F.w, es, 2, comps, 2, &snap);
    ck_assert_int_eq(kiln_add(F.w, e, F.vel, &(test_velocity){9, 9}), KILN_ERR_DEAD_ENTITY);
    assert_message_names(F.w, "add", e, NULL);
    bool removed = true;
    ck_assert_int_eq(kiln_remove(F.w, e, F.vel, &removed), KILN_ERR_DEAD_ENTITY);
    assert_message_names(F.w, "remove", e, NULL);
    assert_unchanged(F.w, es, 2, comps, 2, &snap);
}

KILN_TEST(edges, many_round_trips_along_cached_edges_keep_every_value_through_growth) {
    enum { N = 300 };
    kiln_entity es[N];
    for (int k = 0; k < N; k++) es[k] = spawn_at(F.w, F.pos, (float)k, (float)-k);
    for (int round = 0; round < 3; round++) {
        /* odd entities first, then even ones, so holes open in the middle of both tables */
        for (int pass = 0; pass < 2; pass++)
            for (int k = 1 - pass; k < N; k += 2) {
                test_velocity v = {(float)round, (float)k};
                ck_assert_int_eq(kiln_add(F.w, es[k], F.vel, &v), KILN_OK);
            }
        for (int k = 0; k < N; k++) {
            test_assert_position(F.w, es[k], F.pos, (float)k, (float)-k);
            test_assert_velocity(F.w, es[k], F.vel, (float)round, (float)k);
        }
        for (int k = N - 1; k >= 0; k -= 3)
            ck_assert_int_eq(kiln_remove(F.w, es[k], F.vel, NULL), KILN_OK);
        for (int k = 0; k < N; k++) {
            ck_assert(kiln_has(F.w, es[k], F.vel) == ((N - 1 - k) % 3 != 0));
            test_assert_position(F.w, es[k], F.pos, (float)k, (float)-k);
        }
        for (int k = 0; k < N; k++) kiln_remove(F.w, es[k], F.vel, NULL);
    }
}

/* Components of several strides and alignments (plus a tag) that ride along while Extra is
 * added and removed; each entity's bytes are its own, so a value moved to the wrong row, or
 * a hole left unfilled, shows. */
enum { RIDERS = 10, RIDE_ENTITIES = 6 };
static const size_t rider_size[RIDERS] = {1, 2, 4, 8, 12, 16, 24, 5, 6, 0};
static const size_t rider_align[RIDERS] = {1, 2, 4, 8, 4, 16, 8, 1, 2, 0};

static uint8_t rider_byte(int entity, int rider, size_t b) {
    return (uint8_t)(entity * 31 + rider * 7 + (int)b + 1);
}

/* Every entity holds its riders' bytes, their spawn ticks, and Extra exactly when has[k]
 * (value extra[k], set at tick extra_tick[k]). */
static void assert_riders(const kiln_entity *es, const kiln_component *riders,
                          const kiln_tick *spawned, kiln_component extra, const bool *has,
                          const int32_t *extra_value, const kiln_tick *extra_tick) {
    for (int k = 0; k < RIDE_ENTITIES; k++) {
        for (int r = 0; r < RIDERS; r++) {
            ck_assert(kiln_has(F.w, es[k], riders[r]));
            if (rider_size[r] == 0) continue;
            const uint8_t *v = kiln_get(F.w, es[k], riders[r]);
            ck_assert_ptr_nonnull(v);
            for (size_t b = 0; b < rider_size[r]; b++)
                ck_assert_msg(v[b] == rider_byte(k, r, b), "entity %d rider %d byte %zu", k, r, b);
            ck_assert_uint_eq(kiln_changed_tick(F.w, es[k], riders[r]), spawned[k]);
        }
        ck_assert(kiln_has(F.w, es[k], extra) == has[k]);
        if (!has[k]) continue;
        ck_assert_int_eq(*(const int32_t *)kiln_get(F.w, es[k], extra), extra_value[k]);
        ck_assert_uint_eq(kiln_changed_tick(F.w, es[k], extra), extra_tick[k]);
    }
}

KILN_TEST(edges, values_of_every_stride_and_alignment_move_whether_or_not_the_entity_is_the_last_row) {
    kiln_component riders[RIDERS], extra;
    char name[32];
    for (int r = 0; r < RIDERS; r++) {
        snprintf(name, sizeof name, "Rider%d", r);
        ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){
                             .name = name, .size = rider_size[r], .align = rider_align[r]},
                             &riders[r]), KILN_OK);
    }
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){
                         .name = "Extra", .size = sizeof(int32_t)}, &extra), KILN_OK);
    uint8_t bytes[RIDE_ENTITIES][RIDERS][24];
    const void *values[RIDERS];
    kiln_entity es[RIDE_ENTITIES];
    kiln_tick spawned[RIDE_ENTITIES];
    for (int k = 0; k < RIDE_ENTITIES; k++) {
        for (int r = 0; r < RIDERS; r++) {
            for (size_t b = 0; b < rider_size[r]; b++) bytes[k][r][b] = rider_byte(k, r, b);
            values[r] = rider_size[r] ? bytes[k][r] : NULL;
        }
        spawned[k] = kiln_tick_advance(F.w);
        ck_assert_int_eq(kiln_spawn_with(F.w, riders, values, RIDERS, &es[k]), KILN_OK);
    }
    bool has[RIDE_ENTITIES] = {false};
    int32_t extra_value[RIDE_ENTITIES] = {0};
    kiln_tick extra_tick[RIDE_ENTITIES] = {0};
    /* rounds alternate the order, so some moves take the last row (no hole to fill) and
     * others a middle one (the last row fills it), in both directions of the edge, which
     * is cached after the first move */
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < RIDE_ENTITIES; i++) {
            int k = round % 2 ? RIDE_ENTITIES - 1 - i : i;
            extra_tick[k] = kiln_tick_advance(F.w);
            extra_value[k] = 100 * round + k;
            ck_assert_int_eq(kiln_add(F.w, es[k], extra, &extra_value[k]), KILN_OK);
            has[k] = true;
            assert_riders(es, riders, spawned, extra, has, extra_value, extra_tick);
        }
        for (int i = 0; i < RIDE_ENTITIES; i++) {
            int k = round / 2 ? RIDE_ENTITIES - 1 - i : i;
            kiln_tick_advance(F.w);
            bool removed = false;
            ck_assert_int_eq(kiln_remove(F.w, es[k], extra, &removed), KILN_OK);
            ck_assert(removed);
            has[k] = false;
            assert_riders(es, riders, spawned, extra, has, extra_value, extra_tick);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* limits                                                                                     */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(limits, .timeout = 300);

/* An entity record holds its archetype id in 16 bits, so a world has at most 65,472
 * archetypes: the one past that fails with KILN_ERR_LIMIT and changes nothing. */
KILN_TEST(limits, the_archetype_past_the_limit_fails_and_leaves_the_world_as_it_was) {
    kiln_world *w = kiln_world_create(NULL);
    enum { TAGS = 16 };
    kiln_component tags[TAGS];
    char name[16];
    for (int i = 0; i < TAGS; i++) {
        snprintf(name, sizeof name, "T%d", i);
        tags[i] = test_register_tag(w, name);
    }
    kiln_entity first = KILN_NULL_ENTITY;
    ck_assert_int_eq(kiln_spawn(w, &first), KILN_OK); /* the empty archetype */
    uint32_t mask = 0;
    /* one entity per tag set, until an archetype cannot be made (plain checks: fast) */
    kiln_result r = test_spawn_tag_sets(w, tags, TAGS, &mask);
    ck_assert_msg(r == KILN_ERR_LIMIT, "result %d after %u sets: %s", (int)r, (unsigned)mask,
                  kiln_world_error(w));
    ck_assert_msg(strstr(kiln_world_error(w), "kiln_spawn_with: too many archetypes (limit 65472)"),
                  "error \"%s\"", kiln_world_error(w));
    kiln_world_stats stats;
    kiln_world_stats_get(w, &stats);
    ck_assert_int_eq(stats.archetypes, 65472);
    ck_assert_int_eq(kiln_entity_count(w), 65472); /* nothing spawned by the failed call */
    /* existing archetypes still take entities and moves; a move into a new one fails the same
     * way: the empty set and masks 1 to 0xFFBF exist (every tag but T6), 0xFFFF does not */
    kiln_component most[TAGS - 1];
    for (int i = 0, n = 0; i < TAGS; i++)
        if (i != 6) most[n++] = tags[i];
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(w, most, NULL, TAGS - 1, &e), KILN_OK);
    ck_assert_int_eq(kiln_add(w, e, tags[6], NULL), KILN_ERR_LIMIT);
    ck_assert(kiln_is_alive(w, e) && !kiln_has(w, e, tags[6]) && kiln_has(w, e, tags[7]));
    ck_assert_int_eq(kiln_add(w, first, tags[TAGS - 1], NULL), KILN_OK);
    ck_assert(kiln_is_alive(w, first) && kiln_has(w, first, tags[TAGS - 1]));
    kiln_world_destroy(w);
}

/* Rows are 27 bits of the record: a batch that would put more than 2^27 entities in one
 * archetype fails with KILN_ERR_LIMIT before it allocates anything. */
KILN_TEST(limits, a_batch_past_the_rows_of_one_archetype_fails_and_spawns_nothing) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component tag = test_register_tag(w, "Many");
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(w, &tag, NULL, 1, &e), KILN_OK);
    kiln_world_stats before;
    kiln_world_stats_get(w, &before);
    ck_assert_int_eq(kiln_spawn_batch(w, &tag, 1, 1 << 27, NULL), KILN_ERR_LIMIT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_spawn_batch: an archetype holds at most 134217728 entities");
    kiln_world_stats after;
    kiln_world_stats_get(w, &after);
    ck_assert_int_eq(after.bytes, before.bytes);
    ck_assert_int_eq(kiln_entity_count(w), 1);
    ck_assert(kiln_is_alive(w, e));
    kiln_world_destroy(w);
}

/* A spawn lists at most 256 components, and so does a load or a clone read an entity's: an
 * entity given a 257th by an add would save (a JSON save overran its stack array for it) but
 * never load back. So the 257th is refused like any limit, the entity left as it was. */
KILN_TEST(limits, an_entity_holds_at_most_256_components_and_one_holding_256_saves_and_loads_back) {
    enum { WIDE = 256 };
    kiln_world *w = kiln_world_create(NULL), *back = kiln_world_create(NULL);
    kiln_component ids[WIDE + 1];
    char name[16];
    for (int i = 0; i <= WIDE; i++) {
        snprintf(name, sizeof name, "Wide%d", i);
        ids[i] = pf_register(w, name, sizeof(int32_t), NULL, 0);
        pf_register(back, name, sizeof(int32_t), NULL, 0);
    }
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(w, &e), KILN_OK);
    for (int32_t i = 0; i < WIDE; i++) ck_assert_int_eq(kiln_add(w, e, ids[i], &i), KILN_OK);
    kiln_world_stats before, after;
    kiln_world_stats_get(w, &before);
    int32_t past = WIDE;
    ck_assert_int_eq(kiln_add(w, e, ids[WIDE], &past), KILN_ERR_LIMIT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_add: an entity holds at most 256 components");
    kiln_world_stats_get(w, &after);
    ck_assert_int_eq(after.archetypes, before.archetypes);
    ck_assert_int_eq(kiln_entity_components(w, e, NULL, 0), WIDE);
    ck_assert(!kiln_has(w, e, ids[WIDE]) && *(const int32_t *)kiln_get(w, e, ids[WIDE - 1]) == WIDE - 1);
    kiln_commands *cmd = kiln_commands_create(w); /* a buffer's add meets the same limit */
    ck_assert_int_eq(kiln_commands_add(cmd, e, ids[WIDE], &past), KILN_OK);
    ck_assert_int_eq(kiln_commands_apply(cmd, w, NULL), KILN_ERR_LIMIT);
    ck_assert(!kiln_has(w, e, ids[WIDE]));
    kiln_commands_destroy(cmd);
    for (int f = KILN_PERSIST_BINARY; f <= KILN_PERSIST_JSON; f++) {
        pf_bytes saved = {0};
        pf_save(w, (kiln_persist_format)f, &saved);
        ck_assert_int_eq(kiln_load(back, saved.data, saved.size, NULL), KILN_OK);
        pf_bytes_free(&saved);
    }
    kiln_entity loaded[2];
    ck_assert_int_eq(kiln_world_entities(back, loaded, 2), 2);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(kiln_entity_components(back, loaded[k], NULL, 0), WIDE);
        for (int32_t i = 0; i < WIDE; i++) ck_assert_int_eq(*(const int32_t *)kiln_get(back, loaded[k], ids[i]), i);
    }
    kiln_world_destroy(back);
    kiln_world_destroy(w);
}
