/* test_access_moves.c: Check suite for values on the move: change ticks across archetype moves,
 * destroy and move hooks, spawn_with / spawn_batch, and values that point into the world. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access_fixture.h"
#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* The fixture world (access_fixture.h), made afresh around every test of a group using it. */
static access_fixture F;

static void setup(void) { access_fixture_setup(&F); }

static void teardown(void) { access_fixture_teardown(&F); }

/* ------------------------------------------------------------------------------------------ */
/* ticks                                                                                      */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(ticks, .setup = setup, .teardown = teardown);

KILN_TEST(ticks, world_tick_starts_at_one_and_advance_increments_it) {
    kiln_world *w = kiln_world_create(NULL);
    ck_assert_uint_eq(kiln_tick_current(w), 1);
    ck_assert_uint_eq(kiln_tick_advance(w), 2);
    ck_assert_uint_eq(kiln_tick_current(w), 2);
    for (kiln_tick t = 3; t < 100; t++) ck_assert_uint_eq(kiln_tick_advance(w), t);
    ck_assert_uint_eq(kiln_tick_current(w), 99);
    kiln_world_destroy(w);
}

KILN_TEST(ticks, add_stamps_the_current_tick) {
    kiln_entity e = spawn_at(F.w, F.pos, 0.0f, 0.0f);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), 1);
    kiln_tick_advance(F.w);
    kiln_tick now = kiln_tick_advance(F.w);
    ck_assert_int_eq(kiln_add(F.w, e, F.vel, NULL), KILN_OK);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.vel), now);
}

KILN_TEST(ticks, moved_components_keep_their_ticks_across_archetype_moves) {
    kiln_component tag = test_register_tag(F.w, "Frozen");
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 1.0f); /* tick 1 */
    kiln_tick_advance(F.w);
    ck_assert_int_eq(kiln_add(F.w, e, F.vel, NULL), KILN_OK); /* tick 2 */
    kiln_tick_advance(F.w);
    ck_assert_int_eq(kiln_add(F.w, e, tag, NULL), KILN_OK); /* tick 3: moves F.pos and F.vel */
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), 1);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.vel), 2);
    kiln_tick_advance(F.w);
    ck_assert_int_eq(kiln_remove(F.w, e, tag, NULL), KILN_OK); /* moves them back */
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), 1);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.vel), 2);
    ck_assert_int_eq(kiln_remove(F.w, e, F.pos, NULL), KILN_OK);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.vel), 2);
}

KILN_TEST(ticks, set_and_add_replace_stamp_the_current_tick_and_get_does_not) {
    kiln_entity e = spawn_at(F.w, F.pos, 0.0f, 0.0f);
    kiln_tick t = kiln_tick_advance(F.w);
    ck_assert_int_eq(kiln_set(F.w, e, F.pos, &(test_position){1.0f, 1.0f}), KILN_OK);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), t);
    t = kiln_tick_advance(F.w);
    ck_assert_ptr_nonnull(kiln_get(F.w, e, F.pos));
    ck_assert(kiln_has(F.w, e, F.pos));
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), t - 1);
    ck_assert_int_eq(kiln_add(F.w, e, F.pos, NULL), KILN_OK);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), t);
    t = kiln_tick_advance(F.w);
    ck_assert_ptr_nonnull(kiln_get_mut(F.w, e, F.pos));
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), t);
}

KILN_TEST(ticks, changed_tick_is_zero_when_absent_dead_or_unknown) {
    kiln_entity e = spawn_at(F.w, F.pos, 0.0f, 0.0f);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.vel), 0);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, 4444), 0);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, KILN_NO_COMPONENT), 0);
    ck_assert_uint_eq(kiln_changed_tick(F.w, KILN_NULL_ENTITY, F.pos), 0);
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), 0);
}

KILN_TEST(ticks, swap_removed_rows_keep_their_values_and_ticks) {
    enum { N = 6 };
    kiln_entity e[N];
    for (int i = 0; i < N; i++) {
        e[i] = spawn_at(F.w, F.pos, (float)i, (float)-i); /* entity i written at tick i + 1 */
        kiln_tick_advance(F.w);
    }
    ck_assert_int_eq(kiln_despawn(F.w, e[0]), KILN_OK);           /* last row fills row 0 */
    ck_assert_int_eq(kiln_add(F.w, e[2], F.vel, NULL), KILN_OK);    /* last row fills row 2 */
    ck_assert_int_eq(kiln_remove(F.w, e[1], F.pos, NULL), KILN_OK); /* and again */
    for (int i = 2; i < N; i++) {
        test_position p = position_of(F.w, e[i], F.pos);
        ck_assert_float_eq(p.x, (float)i);
        ck_assert_float_eq(p.y, (float)-i);
        ck_assert_uint_eq(kiln_changed_tick(F.w, e[i], F.pos), (kiln_tick)(i + 1));
    }
    ck_assert(kiln_is_alive(F.w, e[1]));
    ck_assert(!kiln_has(F.w, e[1], F.pos));
}

KILN_TEST(ticks, values_of_every_size_keep_their_bytes_and_ticks_through_add_and_remove) {
    static const size_t sizes[] = {1, 2, 3, 4, 6, 8, 12, 16, 20, 24, 64};
    enum { C = sizeof sizes / sizeof sizes[0], N = 5 };
    kiln_component ids[C], extra;
    for (int c = 0; c < C; c++) {
        char name[32];
        snprintf(name, sizeof name, "Sized%d", c);
        ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = name,
                                                      .size = sizes[c]}, &ids[c]), KILN_OK);
    }
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = "Extra",
                                                  .size = 4}, &extra), KILN_OK);
    kiln_entity e[N];
    for (int i = 0; i < N; i++) { /* entity i's bytes are i * 64 + c + offset, written at tick i + 1 */
        ck_assert_int_eq(kiln_spawn(F.w, &e[i]), KILN_OK);
        for (int c = 0; c < C; c++) {
            uint8_t v[64];
            for (size_t b = 0; b < sizes[c]; b++) v[b] = (uint8_t)(i * 64 + c + (int)b);
            ck_assert_int_eq(kiln_add(F.w, e[i], ids[c], v), KILN_OK);
        }
        kiln_tick_advance(F.w);
    }
    /* a middle row (the last row fills its hole), the last row (no hole), then back */
    int order[] = {1, 4, 0, 3, 2};
    for (int k = 0; k < N; k++) ck_assert_int_eq(kiln_add(F.w, e[order[k]], extra, NULL), KILN_OK);
    for (int k = 0; k < N; k++)
        ck_assert_int_eq(kiln_remove(F.w, e[order[N - 1 - k]], extra, NULL), KILN_OK);
    for (int i = 0; i < N; i++) {
        for (int c = 0; c < C; c++) {
            const uint8_t *v = kiln_get(F.w, e[i], ids[c]);
            ck_assert_ptr_nonnull(v);
            for (size_t b = 0; b < sizes[c]; b++)
                if (v[b] != (uint8_t)(i * 64 + c + (int)b))
                    ck_abort_msg("entity %d lost byte %zu of its %zu-byte value", i, b, sizes[c]);
            ck_assert_uint_eq(kiln_changed_tick(F.w, e[i], ids[c]), (kiln_tick)(i + 1));
        }
        ck_assert(!kiln_has(F.w, e[i], extra));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* hooks                                                                                      */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(hooks, .setup = setup, .teardown = teardown);

KILN_TEST(hooks, despawn_destroys_each_value_once) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(w, &log);
    kiln_component pos = test_register_position(w);
    kiln_entity e[4];
    for (int i = 0; i < 4; i++) {
        e[i] = spawn_at(w, pos, 0.0f, 0.0f);
        test_owned o = test_owned_make(i + 1);
        ck_assert_int_eq(kiln_add(w, e[i], owned, &o), KILN_OK);
    }
    ck_assert_int_eq(kiln_despawn(w, e[1]), KILN_OK);
    ck_assert_int_eq(log.destroyed, 1);
    ck_assert_int_eq(test_hook_log_count(&log, 2), 1);
    ck_assert_int_eq(kiln_despawn(w, e[1]), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(log.destroyed, 1);
    /* the other values survived the swap-remove */
    for (int i = 0; i < 4; i++) {
        if (i == 1) continue;
        const test_owned *o = kiln_get(w, e[i], owned);
        ck_assert_ptr_nonnull(o);
        ck_assert_int_eq(o->id, i + 1);
        ck_assert_int_eq(*o->payload, i + 1);
    }
    kiln_world_destroy(w);
    ck_assert_int_eq(log.destroyed, 4);
    for (int i = 1; i <= 4; i++) ck_assert_int_eq(test_hook_log_count(&log, i), 1);
    ck_assert_int_eq(log.bad_payload, 0);
}

KILN_TEST(hooks, world_destroy_destroys_every_live_value_once) {
    test_allocator a;
    test_allocator_init(&a);
    kiln_world *w = test_world_create(&a);
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(w, &log);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    enum { N = 300 };
    static kiln_entity e[N];
    for (int i = 0; i < N; i++) {
        test_owned o = test_owned_make(i + 1);
        ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){owned}, (const void *[]){&o}, 1,
                                         &e[i]),
                         KILN_OK);
        if (i % 3 == 1) ck_assert_int_eq(kiln_add(w, e[i], pos, NULL), KILN_OK);
        if (i % 5 == 2) ck_assert_int_eq(kiln_add(w, e[i], vel, NULL), KILN_OK);
        if (i % 7 == 3) ck_assert_int_eq(kiln_remove(w, e[i], pos, NULL), KILN_OK);
    }
    int64_t despawned = 0;
    for (int i = 0; i < N; i += 11, despawned++) ck_assert_int_eq(kiln_despawn(w, e[i]), KILN_OK);
    ck_assert_int_eq(log.destroyed, despawned);
    kiln_world_destroy(w);
    ck_assert_int_eq(log.destroyed, N);
    for (int i = 1; i <= N; i++) ck_assert_int_eq(test_hook_log_count(&log, i), 1);
    ck_assert_int_eq(test_hook_log_count(&log, -1), 0); /* destroyed twice */
    ck_assert_int_eq(test_hook_log_count(&log, -2), 0); /* destroyed after being moved */
    ck_assert_int_eq(log.bad_payload, 0);
    ck_assert_int_eq(a.live_bytes, 0);
}

KILN_TEST(hooks, archetype_moves_use_the_move_hook_instead_of_destroy) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(w, &log);
    kiln_component pos = test_register_position(w);
    kiln_entity e = spawn_one(w);
    test_owned o = test_owned_make(7);
    ck_assert_int_eq(kiln_add(w, e, owned, &o), KILN_OK);
    int64_t moved = log.moved;
    ck_assert_int_eq(kiln_add(w, e, pos, NULL), KILN_OK);
    ck_assert_int_gt(log.moved, moved);
    ck_assert_int_eq(log.destroyed, 0);
    const test_owned *got = kiln_get(w, e, owned);
    ck_assert_int_eq(got->id, 7);
    ck_assert_ptr_eq(got->payload, o.payload);
    moved = log.moved;
    ck_assert_int_eq(kiln_remove(w, e, pos, NULL), KILN_OK);
    ck_assert_int_gt(log.moved, moved);
    ck_assert_int_eq(log.destroyed, 0);
    got = kiln_get(w, e, owned);
    ck_assert_int_eq(got->id, 7);
    kiln_world_destroy(w);
    ck_assert_int_eq(log.destroyed, 1);
    ck_assert_int_eq(test_hook_log_count(&log, 7), 1);
}

KILN_TEST(hooks, swap_remove_relocates_the_last_row_with_the_move_hook) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(w, &log);
    kiln_entity e[3];
    for (int i = 0; i < 3; i++) {
        test_owned o = test_owned_make(i + 1);
        ck_assert_int_eq(kiln_spawn_with(w, &owned, (const void *[]){&o}, 1, &e[i]), KILN_OK);
    }
    int64_t moved = log.moved;
    ck_assert_int_eq(kiln_despawn(w, e[0]), KILN_OK);
    ck_assert_int_eq(log.destroyed, 1);
    ck_assert_int_eq(test_hook_log_count(&log, 1), 1);
    ck_assert_int_ge(log.moved, moved + 1);
    const test_owned *last = kiln_get(w, e[2], owned);
    ck_assert_int_eq(last->id, 3);
    ck_assert_int_eq(*last->payload, 3);
    kiln_world_destroy(w);
    ck_assert_int_eq(log.destroyed, 3);
    ck_assert_int_eq(test_hook_log_count(&log, -2), 0);
}

KILN_TEST(hooks, components_without_a_move_hook_relocate_bytewise) {
    enum { N = 50 };
    kiln_entity e[N];
    for (int i = 0; i < N; i++) e[i] = spawn_at(F.w, F.pos, (float)i, 0.5f);
    for (int i = 0; i < N; i += 2) ck_assert_int_eq(kiln_add(F.w, e[i], F.vel, NULL), KILN_OK);
    for (int i = 0; i < N; i += 5) ck_assert_int_eq(kiln_despawn(F.w, e[i]), KILN_OK);
    for (int i = 0; i < N; i++) {
        if (i % 5 == 0) continue;
        test_position p = position_of(F.w, e[i], F.pos);
        ck_assert_float_eq(p.x, (float)i);
        ck_assert_float_eq(p.y, 0.5f);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* spawn_with / spawn_batch                                                                   */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(spawn_with, .setup = setup, .teardown = teardown);

KILN_TEST(spawn_with, spawn_with_sets_every_value_in_one_archetype_move) {
    kiln_component tag = test_register_tag(F.w, "Frozen");
    int32_t archetypes = archetype_count(F.w);
    kiln_tick now = kiln_tick_advance(F.w);
    test_position p = {1.0f, 2.0f};
    test_velocity v = {3.0f, 4.0f};
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(F.w, (kiln_component[]){F.pos, F.vel, tag},
                                     (const void *[]){&p, &v, NULL}, 3, &e),
                     KILN_OK);
    ck_assert(kiln_is_alive(F.w, e));
    ck_assert_int_eq(archetype_count(F.w), archetypes + 1); /* no intermediate archetypes */
    ck_assert_float_eq(position_of(F.w, e, F.pos).y, 2.0f);
    const test_velocity *gv = kiln_get(F.w, e, F.vel);
    ck_assert_float_eq(gv->x, 3.0f);
    ck_assert(kiln_has(F.w, e, tag));
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), now);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.vel), now);
}

KILN_TEST(spawn_with, spawn_with_pairs_values_with_components_in_any_order) {
    kiln_entity a, b;
    ck_assert_int_eq(kiln_spawn_with(F.w, (kiln_component[]){F.vel, F.pos},
                                     (const void *[]){&(test_velocity){1.0f, 1.0f},
                                                      &(test_position){2.0f, 2.0f}},
                                     2, &a),
                     KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(F.w, (kiln_component[]){F.pos, F.vel},
                                     (const void *[]){&(test_position){3.0f, 3.0f},
                                                      &(test_velocity){4.0f, 4.0f}},
                                     2, &b),
                     KILN_OK);
    ck_assert_float_eq(position_of(F.w, a, F.pos).x, 2.0f);
    ck_assert_float_eq(((const test_velocity *)kiln_get(F.w, a, F.vel))->x, 1.0f);
    ck_assert_float_eq(position_of(F.w, b, F.pos).x, 3.0f);
    ck_assert_float_eq(((const test_velocity *)kiln_get(F.w, b, F.vel))->x, 4.0f);
}

KILN_TEST(spawn_with, spawn_with_null_values_zero_initialise) {
    test_allocator a;
    test_allocator_init(&a);
    kiln_world *w = test_world_create(&a);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    static const unsigned char zero[sizeof(test_position)];
    for (int i = 0; i < 20; i++) {
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){pos, vel}, NULL, 2, &e), KILN_OK);
        ck_assert_mem_eq(kiln_get(w, e, pos), zero, sizeof zero);
        ck_assert_mem_eq(kiln_get(w, e, vel), zero, sizeof zero);
        ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){pos, vel},
                                         (const void *[]){&(test_position){5.0f, 5.0f}, NULL}, 2,
                                         &e),
                         KILN_OK);
        ck_assert_float_eq(position_of(w, e, pos).x, 5.0f);
        ck_assert_mem_eq(kiln_get(w, e, vel), zero, sizeof zero);
        if (i % 2 == 0) ck_assert_int_eq(kiln_despawn(w, e), KILN_OK);
    }
    kiln_world_destroy(w);
}

KILN_TEST(spawn_with, spawn_with_duplicate_or_unknown_components_spawns_nothing) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log = {0};
    kiln_component pos = test_register_position(w);
    kiln_component owned = test_register_owned(w, &log);
    kiln_entity existing = spawn_at(w, pos, 1.0f, 1.0f);
    kiln_component comps[] = {pos, owned};
    snapshot before;
    take_snapshot(w, &existing, 1, comps, 2, &before);
    test_owned o = test_owned_make(1);
    kiln_entity e = KILN_NULL_ENTITY;
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){owned, pos, owned},
                                     (const void *[]){&o, NULL, &o}, 3, &e),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_ne(kiln_world_error(w), "");
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){owned, 99},
                                     (const void *[]){&o, NULL}, 2, &e),
                     KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){KILN_NO_COMPONENT}, NULL, 1, &e),
                     KILN_ERR_UNKNOWN_COMPONENT);
    assert_unchanged(w, &existing, 1, comps, 2, &before);
    ck_assert_int_eq(log.destroyed, 0);
    test_owned_release(&o);
    kiln_world_destroy(w);
}

KILN_TEST(spawn_with, spawn_with_takes_over_owned_values) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(w, &log);
    test_owned o = test_owned_make(4);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(w, &owned, (const void *[]){&o}, 1, &e), KILN_OK);
    ck_assert_ptr_eq(((const test_owned *)kiln_get(w, e, owned))->payload, o.payload);
    ck_assert_int_eq(kiln_despawn(w, e), KILN_OK);
    ck_assert_int_eq(test_hook_log_count(&log, 4), 1);
    kiln_world_destroy(w);
    ck_assert_int_eq(log.destroyed, 1);
}

KILN_TEST(spawn_with, spawn_batch_spawns_n_zeroed_entities_at_the_current_tick) {
    test_allocator a;
    test_allocator_init(&a);
    kiln_world *w = test_world_create(&a);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity first = spawn_at(w, pos, 3.0f, 3.0f);
    ck_assert_int_eq(kiln_add(w, first, vel, &(test_velocity){3.0f, 3.0f}), KILN_OK);
    kiln_tick now = kiln_tick_advance(w);
    enum { N = 500 };
    static kiln_entity e[N];
    ck_assert_int_eq(kiln_spawn_batch(w, (kiln_component[]){vel, pos}, 2, N, e), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(w), N + 1);
    static const unsigned char zero[sizeof(test_position)];
    for (int i = 0; i < N; i++) {
        ck_assert(kiln_is_alive(w, e[i]));
        ck_assert_uint_ne(e[i], first);
        ck_assert_mem_eq(kiln_get(w, e[i], pos), zero, sizeof zero);
        ck_assert_mem_eq(kiln_get(w, e[i], vel), zero, sizeof zero);
        ck_assert_uint_eq(kiln_changed_tick(w, e[i], pos), now);
    }
    for (int i = 1; i < N; i++) ck_assert(!test_contains(e, i, e[i]));
    ck_assert_float_eq(position_of(w, first, pos).x, 3.0f);
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {pos, vel}}, &q), KILN_OK);
    ck_assert_int_eq(kiln_query_count(q), N + 1);
    kiln_query_destroy(q);
    kiln_world_destroy(w);
    ck_assert_int_eq(a.live_bytes, 0);
}

KILN_TEST(spawn_with, spawn_batch_accepts_a_null_dest) {
    ck_assert_int_eq(kiln_spawn_batch(F.w, &F.pos, 1, 64, NULL), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(F.w), 64);
    kiln_entity list[64];
    ck_assert_int_eq(kiln_world_entities(F.w, list, 64), 64);
    for (int i = 0; i < 64; i++) ck_assert(kiln_has(F.w, list[i], F.pos));
}

KILN_TEST(spawn_with, spawn_batch_with_duplicate_or_unknown_components_spawns_nothing) {
    kiln_entity existing = spawn_at(F.w, F.pos, 1.0f, 1.0f);
    kiln_component comps[] = {F.pos, F.vel};
    snapshot before;
    take_snapshot(F.w, &existing, 1, comps, 2, &before);
    kiln_entity out[8];
    ck_assert_int_eq(kiln_spawn_batch(F.w, (kiln_component[]){F.pos, F.vel, F.pos}, 3, 8, out),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_ne(kiln_world_error(F.w), "");
    ck_assert_int_eq(kiln_spawn_batch(F.w, (kiln_component[]){F.vel, 31}, 2, 8, out),
                     KILN_ERR_UNKNOWN_COMPONENT);
    assert_unchanged(F.w, &existing, 1, comps, 2, &before);
}

/* ------------------------------------------------------------------------------------------ */
/* values that point into the world                                                           */
/* ------------------------------------------------------------------------------------------ */

/* A value is read as of the call: a pointer the world handed out (valid until this call's own
 * structural change) must be copied before the call moves or regrows anything. */

KILN_TEST_GROUP_WITH(aliasing, .setup = setup, .teardown = teardown);

KILN_TEST(aliasing, spawn_with_copies_values_read_from_an_entity_of_the_same_archetype) {
    test_allocator a;
    test_allocator_init(&a); /* freed blocks are poisoned, so a read after free shows */
    kiln_world *w = test_world_create(&a);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity proto;
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){pos, vel},
                                     (const void *[]){&(test_position){1.0f, 2.0f},
                                                      &(test_velocity){3.0f, 4.0f}},
                                     2, &proto),
                     KILN_OK);
    for (int i = 0; i < 100; i++) {
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){pos, vel},
                                         (const void *[]){kiln_get(w, proto, pos),
                                                          kiln_get(w, proto, vel)},
                                         2, &e),
                         KILN_OK);
        const test_position *p = kiln_get(w, e, pos);
        const test_velocity *v = kiln_get(w, e, vel);
        ck_assert_msg(p->x == 1.0f && p->y == 2.0f && v->x == 3.0f && v->y == 4.0f,
                      "clone %d got position (%g, %g) velocity (%g, %g)", i, (double)p->x,
                      (double)p->y, (double)v->x, (double)v->y);
    }
    kiln_world_destroy(w);
}

KILN_TEST(aliasing, add_copies_a_value_read_from_an_entity_of_the_target_archetype) {
    test_allocator a;
    test_allocator_init(&a);
    kiln_world *w = test_world_create(&a);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity proto;
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){pos, vel},
                                     (const void *[]){NULL, &(test_velocity){3.0f, 4.0f}}, 2,
                                     &proto),
                     KILN_OK);
    for (int i = 0; i < 100; i++) {
        kiln_entity e = spawn_at(w, pos, (float)i, 0.0f);
        ck_assert_int_eq(kiln_add(w, e, vel, kiln_get(w, proto, vel)), KILN_OK);
        const test_velocity *v = kiln_get(w, e, vel);
        ck_assert_msg(v->x == 3.0f && v->y == 4.0f, "entity %d got velocity (%g, %g)", i,
                      (double)v->x, (double)v->y);
    }
    kiln_world_destroy(w);
}

KILN_TEST(aliasing, add_copies_a_value_read_from_the_entitys_own_component) {
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 1.0f);
    kiln_entity other = spawn_at(F.w, F.pos, 2.0f, 2.0f); /* fills e's row when e moves out */
    /* Velocity has Position's layout: start moving the way it points */
    ck_assert_int_eq(kiln_add(F.w, e, F.vel, kiln_get(F.w, e, F.pos)), KILN_OK);
    const test_velocity *v = kiln_get(F.w, e, F.vel);
    ck_assert_msg(v->x == 1.0f && v->y == 1.0f, "got velocity (%g, %g), want (1, 1)",
                  (double)v->x, (double)v->y);
    ck_assert_float_eq(position_of(F.w, other, F.pos).x, 2.0f);
}

KILN_TEST(aliasing, set_and_add_of_a_value_onto_itself_keep_it) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(w, &log);
    kiln_entity e = spawn_one(w);
    test_owned o = test_owned_make(3);
    ck_assert_int_eq(kiln_add(w, e, owned, &o), KILN_OK);
    kiln_tick now = kiln_tick_advance(w);
    ck_assert_int_eq(kiln_set(w, e, owned, kiln_get(w, e, owned)), KILN_OK);
    ck_assert_int_eq(kiln_add(w, e, owned, kiln_get(w, e, owned)), KILN_OK);
    ck_assert_int_eq(log.destroyed, 0);
    const test_owned *got = kiln_get(w, e, owned);
    ck_assert_int_eq(got->id, 3);
    ck_assert_int_eq(*got->payload, 3);
    ck_assert_uint_eq(kiln_changed_tick(w, e, owned), now);
    kiln_world_destroy(w);
    ck_assert_int_eq(test_hook_log_count(&log, 3), 1);
}

KILN_TEST(spawn_with, spawn_with_maps_many_components_in_any_order) {
    kiln_world *w = kiln_world_create(NULL);
    enum { N = 12 };
    kiln_component ids[N];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "Int%d", i);
        kiln_component_desc desc = {.name = name, .size = sizeof(int32_t)};
        ck_assert_int_eq(kiln_component_register(w, &desc, &ids[i]), KILN_OK);
    }
    static const int order[N] = {7, 2, 11, 0, 5, 9, 1, 10, 3, 8, 6, 4};
    int32_t values[N];
    kiln_component comps[N];
    const void *ptrs[N];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            int c = round == 1 ? i : order[i]; /* rounds 0 and 2 share a list: a cached shape */
            comps[i] = ids[c];
            values[i] = 100 * round + c;
            ptrs[i] = &values[i];
        }
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(w, comps, ptrs, N, &e), KILN_OK);
        for (int c = 0; c < N; c++) {
            const int32_t *v = kiln_get(w, e, ids[c]);
            ck_assert_ptr_nonnull(v);
            ck_assert_int_eq(*v, 100 * round + c);
        }
    }
    kiln_world_stats s;
    kiln_world_stats_get(w, &s);
    ck_assert_int_eq(s.archetypes, 2);
    kiln_world_destroy(w);
}

KILN_TEST(spawn_with, an_entity_keeps_its_values_through_many_components) {
    test_allocator a;
    test_allocator_init(&a);
    kiln_world *w = test_world_create(&a);
    enum { N = 40 };
    kiln_component ids[N];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "Wide%d", i);
        kiln_component_desc desc = {.name = name, .size = 8 + (size_t)(i % 3) * 4};
        ck_assert_int_eq(kiln_component_register(w, &desc, &ids[i]), KILN_OK);
    }
    kiln_entity e[3];
    for (int k = 0; k < 3; k++) ck_assert_int_eq(kiln_spawn(w, &e[k]), KILN_OK);
    /* add in a scrambled order, checking every value after every move */
    for (int step = 0; step < N; step++) {
        int c = (step * 17) % N;
        for (int k = 0; k < 3; k++) {
            int32_t v[4] = {c, k, -c, 7}; /* components hold the first 2, 3 or 4 */
            ck_assert_int_eq(kiln_add(w, e[k], ids[c], v), KILN_OK);
        }
        for (int k = 0; k < 3; k++) {
            for (int s2 = 0; s2 <= step; s2++) {
                int c2 = (s2 * 17) % N;
                const int32_t *v = kiln_get(w, e[k], ids[c2]);
                if (v == NULL || v[0] != c2 || v[1] != k)
                    ck_abort_msg("entity %d lost component %d after step %d", k, c2, step);
            }
        }
    }
    ck_assert_int_eq(kiln_spawn_batch(w, ids, N, 50, NULL), KILN_OK); /* > 32 columns to grow */
    for (int k = 0; k < 3; k++) {
        const int32_t *v = kiln_get(w, e[k], ids[N - 1]);
        ck_assert_int_eq(v[0], N - 1);
    }
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {ids[0], ids[N - 1], ids[20]}},
                                       &q),
                     KILN_OK);
    ck_assert_int_eq(kiln_query_count(q), 53);
    for (int i = 0; i < N; i += 3)
        ck_assert_int_eq(kiln_remove(w, e[1], ids[i], NULL), KILN_OK);
    for (int i = 0; i < N; i++) {
        const int32_t *v = kiln_get(w, e[1], ids[i]);
        if (i % 3 == 0) ck_assert_ptr_null(v);
        else ck_assert_int_eq(v[0], i);
    }
    kiln_query_destroy(q);
    kiln_world_destroy(w);
    ck_assert_int_eq(a.live_bytes, 0);
}
