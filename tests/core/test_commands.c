/* test_commands.c: Check suite for command buffers: recording, placeholders, ordered apply, ticks,
 * and failures that a later apply resumes from. The world changes only at apply. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands_fixture.h"
#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* The fixture world and buffer (commands_fixture.h), made afresh around every test of a group
 * using it; teardown checks that every byte came back and no value was destroyed twice. */
static commands_fixture F;

static void setup(void) { commands_fixture_setup(&F); }

static void teardown(void) { commands_fixture_teardown(&F); }

static void assert_same_stats(const kiln_world_stats *a, const kiln_world_stats *b) {
    ck_assert_int_eq(a->entities, b->entities);
    ck_assert_int_eq(a->entity_slots, b->entity_slots);
    ck_assert_int_eq(a->archetypes, b->archetypes);
    ck_assert_int_eq(a->components, b->components);
    ck_assert_int_eq(a->queries, b->queries);
    ck_assert_int_eq(a->bytes, b->bytes);
    ck_assert_int_eq(a->allocations, b->allocations);
}

/* ------------------------------------------------------------------------------------------ */
/* recording                                                                                  */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(record, .setup = setup, .teardown = teardown);

KILN_TEST(record, recording_leaves_the_world_untouched_until_apply) {
    kiln_entity a = spawn_pos(&F, 1, 2);
    kiln_entity b = KILN_NULL_ENTITY;
    ASSERT_OK(kiln_spawn_with(F.w, (kiln_component[]){F.pos, F.vel},
                              (const void *[]){&(test_position){3, 4}, &(test_velocity){5, 6}}, 2,
                              &b));
    kiln_world_stats before, after;
    kiln_world_stats_get(F.w, &before);
    uint64_t digest = test_world_digest(F.w);
    kiln_tick tick = kiln_tick_current(F.w);

    kiln_entity p = KILN_NULL_ENTITY;
    test_owned v = test_owned_make(1);
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, &(test_position){7, 8}));
    ASSERT_OK(kiln_commands_add(F.cmd, a, F.vel, &(test_velocity){9, 9}));
    ASSERT_OK(kiln_commands_set(F.cmd, b, F.pos, &(test_position){0, 0}));
    ASSERT_OK(kiln_commands_remove(F.cmd, b, F.vel));
    ASSERT_OK(kiln_commands_add(F.cmd, b, F.owned, &v));
    ASSERT_OK(kiln_commands_despawn(F.cmd, a));

    /* The buffer keeps its own accounting: not even the world's memory counters move. */
    kiln_world_stats_get(F.w, &after);
    assert_same_stats(&before, &after);
    ck_assert_uint_eq(test_world_digest(F.w), digest);
    ck_assert_uint_eq(kiln_tick_current(F.w), tick);
    ck_assert_int_eq(kiln_entity_count(F.w), 2);
    ck_assert_str_eq(kiln_world_error(F.w), "");
    ck_assert_int_eq(kiln_commands_count(F.cmd), 7);

    int64_t applied = -1;
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 7);
    ck_assert(!kiln_is_alive(F.w, a));
    test_assert_position(F.w, b, F.pos, 0, 0);
    ck_assert(!kiln_has(F.w, b, F.vel));
    ck_assert(kiln_has(F.w, b, F.owned));
    test_assert_position(F.w, kiln_commands_resolve(F.cmd, p), F.pos, 7, 8);
    ck_assert_uint_ne(test_world_digest(F.w), digest);
}

KILN_TEST(record, spawn_records_a_placeholder_that_is_never_alive_and_accepts_adds) {
    kiln_entity p = KILN_NULL_ENTITY, q = KILN_NULL_ENTITY;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_spawn(F.cmd, &q));
    ck_assert(kiln_is_placeholder(p));
    ck_assert(kiln_is_placeholder(q));
    ck_assert_uint_ne(p, q);
    ck_assert(!kiln_is_alive(F.w, p));
    ck_assert(!kiln_has(F.w, p, F.pos));
    ck_assert_ptr_null(kiln_get(F.w, p, F.pos));
    ck_assert_uint_eq(kiln_commands_resolve(F.cmd, p), KILN_NULL_ENTITY);

    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, &(test_position){1, 2}));
    ASSERT_OK(kiln_commands_add(F.cmd, q, F.vel, NULL));
    ck_assert_int_eq(kiln_commands_count(F.cmd), 4);
    ck_assert(!kiln_is_alive(F.w, p));
    ck_assert_int_eq(kiln_entity_count(F.w), 0);
}

KILN_TEST(record, resolve_after_apply_gives_the_live_entity_with_its_values) {
    kiln_entity p, q;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, &(test_position){1, 2}));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.vel, &(test_velocity){3, 4}));
    ASSERT_OK(kiln_commands_spawn(F.cmd, &q));
    ASSERT_OK(kiln_commands_add(F.cmd, q, F.vel, &(test_velocity){5, 6}));
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));

    kiln_entity e = kiln_commands_resolve(F.cmd, p);
    kiln_entity f = kiln_commands_resolve(F.cmd, q);
    ck_assert_uint_ne(e, KILN_NULL_ENTITY);
    ck_assert_uint_ne(f, KILN_NULL_ENTITY);
    ck_assert_uint_ne(e, f);
    ck_assert(!kiln_is_placeholder(e));
    ck_assert(kiln_is_alive(F.w, e));
    ck_assert(kiln_is_alive(F.w, f));
    test_assert_position(F.w, e, F.pos, 1, 2);
    test_assert_velocity(F.w, e, F.vel, 3, 4);
    test_assert_velocity(F.w, f, F.vel, 5, 6);
    ck_assert(!kiln_has(F.w, f, F.pos));
    ck_assert_int_eq(kiln_entity_count(F.w), 2);
}

KILN_TEST(record, recording_while_a_query_iterates_is_allowed_and_applies_after_the_loop) {
    for (int i = 0; i < 4; i++) spawn_pos(&F, (float)i, 0);
    kiln_query *q = NULL;
    ASSERT_OK(kiln_query_create(F.w, &(kiln_query_desc){.with = {F.pos}}, &q));
    kiln_iter it;
    int64_t seen = 0;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) {
        for (int32_t row = 0; row < it.count; row++, seen++) {
            const test_position *p = (const test_position *)kiln_iter_column(&it, 0) + row;
            ASSERT_OK(kiln_commands_add(F.cmd, it.entities[row], F.vel,
                                        &(test_velocity){p->x, -p->x}));
        }
    }
    ck_assert_int_eq(seen, 4);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 4);
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    kiln_entity list[4];
    ck_assert_int_eq(kiln_world_entities(F.w, list, 4), 4);
    for (int i = 0; i < 4; i++) {
        const test_position *p = kiln_get(F.w, list[i], F.pos);
        ck_assert_ptr_nonnull(p);
        test_assert_velocity(F.w, list[i], F.vel, p->x, -p->x);
    }
    kiln_query_destroy(q);
}

/* ------------------------------------------------------------------------------------------ */
/* apply                                                                                      */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(apply, .setup = setup, .teardown = teardown);

KILN_TEST(apply, apply_runs_commands_in_recording_order_and_counts_them) {
    kiln_entity a = spawn_pos(&F, 0, 0);
    kiln_entity b = KILN_NULL_ENTITY;
    ASSERT_OK(kiln_spawn_with(F.w, (kiln_component[]){F.pos, F.vel}, NULL, 2, &b));
    kiln_entity p, q;
    ASSERT_OK(kiln_commands_set(F.cmd, a, F.pos, &(test_position){1, 1}));
    ASSERT_OK(kiln_commands_set(F.cmd, a, F.pos, &(test_position){2, 2}));  /* set, set */
    ASSERT_OK(kiln_commands_remove(F.cmd, b, F.vel));
    ASSERT_OK(kiln_commands_add(F.cmd, b, F.vel, &(test_velocity){3, 3}));  /* remove, add */
    ASSERT_OK(kiln_commands_add(F.cmd, a, F.vel, &(test_velocity){4, 4}));
    ASSERT_OK(kiln_commands_remove(F.cmd, a, F.vel));                       /* add, remove */
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, &(test_position){5, 5}));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, &(test_position){6, 6}));  /* add, add */
    ASSERT_OK(kiln_commands_spawn(F.cmd, &q));
    ASSERT_OK(kiln_commands_add(F.cmd, q, F.pos, &(test_position){7, 7}));
    ASSERT_OK(kiln_commands_despawn(F.cmd, q));                             /* spawn, despawn */
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.vel, &(test_velocity){8, 8}));
    ck_assert_int_eq(kiln_commands_count(F.cmd), 13);

    int64_t applied = -1;
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 13);
    test_assert_position(F.w, a, F.pos, 2, 2);
    ck_assert(!kiln_has(F.w, a, F.vel));
    test_assert_velocity(F.w, b, F.vel, 3, 3);
    kiln_entity e = kiln_commands_resolve(F.cmd, p);
    test_assert_position(F.w, e, F.pos, 6, 6);
    test_assert_velocity(F.w, e, F.vel, 8, 8);
    kiln_entity f = kiln_commands_resolve(F.cmd, q);
    ck_assert_uint_ne(f, KILN_NULL_ENTITY);
    ck_assert(!kiln_is_alive(F.w, f));
    ck_assert_int_eq(kiln_entity_count(F.w), 3);
}

/* A tag added through a buffer (no value: the plain edge kiln_add takes, once cached) lands
 * as the same adds made directly: the two worlds hash alike (entities, values, ticks). */
KILN_TEST(apply, tag_adds_through_a_buffer_land_as_direct_adds_do) {
    test_allocator a2;
    test_allocator_init(&a2);
    test_hook_log log2;
    memset(&log2, 0, sizeof log2);
    kiln_world *w2 = test_world_create(&a2);
    kiln_component pos2 = test_register_position(w2);
    test_register_velocity(w2);
    test_register_owned(w2, &log2);
    kiln_world *ws[2] = {F.w, w2};
    kiln_component pos[2] = {F.pos, pos2};
    kiln_component tag[2] = {test_register_tag(F.w, "Frozen"), test_register_tag(w2, "Frozen")};
    kiln_entity es[2][8];
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < 8; i++)
            ASSERT_OK(kiln_spawn_with(ws[s], &pos[s], (const void *[]){&(test_position){(float)i, 1}}, 1, &es[s][i]));
        kiln_tick_advance(ws[s]);
        ASSERT_OK(kiln_add(ws[s], es[s][0], tag[s], NULL)); /* the edge, cached */
        kiln_tick_advance(ws[s]);
    }
    for (int i = 7; i >= 1; i -= 2) ASSERT_OK(kiln_commands_add(F.cmd, es[0][i], tag[0], NULL));
    for (int i = 7; i >= 1; i -= 2) ASSERT_OK(kiln_add(w2, es[1][i], tag[1], NULL));
    int64_t applied = -1;
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 4);
    for (int i = 0; i < 8; i++) {
        ck_assert(kiln_has(F.w, es[0][i], tag[0]) == (i == 0 || i % 2 == 1));
        test_assert_position(F.w, es[0][i], F.pos, (float)i, 1);
    }
    ck_assert_uint_eq(test_world_digest(F.w), test_world_digest(w2));
    kiln_world_destroy(w2);
    ck_assert_int_eq(a2.live_bytes, 0);
}

KILN_TEST(apply, apply_stamps_written_rows_with_the_tick_current_at_apply) {
    kiln_entity a = spawn_pos(&F, 0, 0);
    kiln_entity b = spawn_pos(&F, 0, 0);
    kiln_tick recorded = kiln_tick_current(F.w);
    kiln_entity p;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, &(test_position){1, 1}));
    ASSERT_OK(kiln_commands_add(F.cmd, a, F.vel, &(test_velocity){2, 2}));
    ASSERT_OK(kiln_commands_set(F.cmd, b, F.pos, &(test_position){3, 3}));
    kiln_tick_advance(F.w);
    kiln_tick now = kiln_tick_advance(F.w);
    ck_assert_uint_eq(kiln_tick_current(F.w), now);
    ck_assert_uint_gt(now, recorded);

    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    ck_assert_uint_eq(kiln_changed_tick(F.w, kiln_commands_resolve(F.cmd, p), F.pos), now);
    ck_assert_uint_eq(kiln_changed_tick(F.w, a, F.vel), now);
    ck_assert_uint_eq(kiln_changed_tick(F.w, b, F.pos), now);
    /* rows the buffer did not write keep their tick */
    ck_assert_uint_eq(kiln_changed_tick(F.w, a, F.pos), recorded);
}

/* Recording copies a value of at most 64 bytes by fixed, overlapping moves (commands.c,
 * copy_small) and a larger one through the general path: every size, the odd ones and those
 * past 64 included, must land byte for byte from a spawn's add, an add and a set. */
KILN_TEST(apply, values_of_every_size_up_to_80_bytes_land_byte_for_byte) {
    for (uint32_t size = 1; size <= 80; size++) {
        char name[32];
        snprintf(name, sizeof name, "Bytes%u", (unsigned)size);
        kiln_component c;
        ASSERT_OK(kiln_component_register(F.w, &(kiln_component_desc){.name = name, .size = size}, &c));
        uint8_t first[80], second[80], want_first[80], want_second[80];
        for (uint32_t i = 0; i < size; i++) {
            first[i] = want_first[i] = (uint8_t)(size * 7u + i * 13u + 1u);
            second[i] = want_second[i] = (uint8_t)~first[i];
        }
        kiln_entity p, e;
        ASSERT_OK(kiln_spawn(F.w, &e));
        ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
        ASSERT_OK(kiln_commands_add(F.cmd, p, c, first));
        ASSERT_OK(kiln_commands_add(F.cmd, e, c, first));
        memset(first, 0, sizeof first); /* the buffer holds its own copy */
        ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
        kiln_entity spawned = kiln_commands_resolve(F.cmd, p);
        ck_assert_mem_eq(kiln_get(F.w, spawned, c), want_first, size);
        ck_assert_mem_eq(kiln_get(F.w, e, c), want_first, size);
        ASSERT_OK(kiln_commands_set(F.cmd, e, c, second));
        memset(second, 0, sizeof second);
        ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
        ck_assert_mem_eq(kiln_get(F.w, e, c), want_second, size);
        ck_assert_mem_eq(kiln_get(F.w, spawned, c), want_first, size);
    }
}

KILN_TEST(apply, apply_empties_the_buffer_and_a_second_apply_changes_nothing) {
    kiln_entity a = spawn_pos(&F, 0, 0);
    kiln_entity p;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, NULL));
    ASSERT_OK(kiln_commands_add(F.cmd, a, F.vel, &(test_velocity){1, 1}));
    ck_assert_int_eq(kiln_commands_count(F.cmd), 3);
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    ck_assert_int_eq(kiln_commands_count(F.cmd), 0);
    ck_assert_int_eq(kiln_entity_count(F.w), 2);

    kiln_tick_advance(F.w);
    uint64_t digest = test_world_digest(F.w);
    int64_t applied = -1;
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 0);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 0);
    ck_assert_uint_eq(test_world_digest(F.w), digest);
}

KILN_TEST(apply, despawn_of_an_entity_that_died_meanwhile_is_skipped_silently) {
    kiln_entity a = spawn_pos(&F, 0, 0);
    kiln_entity b = spawn_pos(&F, 0, 0);
    ASSERT_OK(kiln_commands_despawn(F.cmd, a));
    ASSERT_OK(kiln_commands_despawn(F.cmd, b));
    ASSERT_OK(kiln_commands_despawn(F.cmd, b)); /* dies in the command before */
    ASSERT_OK(kiln_commands_spawn(F.cmd, &(kiln_entity){0}));

    ASSERT_OK(kiln_despawn(F.w, a));
    kiln_entity c = spawn_bare(&F); /* takes a's slot with a new generation */
    ck_assert_uint_eq(kiln_entity_index(c), kiln_entity_index(a));
    kiln_world_clear_error(F.w);

    int64_t applied = -1;
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 4);
    ck_assert_str_eq(kiln_world_error(F.w), "");
    ck_assert(kiln_is_alive(F.w, c)); /* the stale handle did not reach the slot's new entity */
    ck_assert(!kiln_is_alive(F.w, b));
    ck_assert_int_eq(kiln_entity_count(F.w), 2);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 0);
}

KILN_TEST(apply, remove_of_an_absent_component_is_a_no_op) {
    kiln_entity a = spawn_pos(&F, 1, 2);
    kiln_tick before_tick = kiln_changed_tick(F.w, a, F.pos);
    kiln_tick_advance(F.w);
    kiln_world_stats before, after;
    kiln_world_stats_get(F.w, &before);
    ASSERT_OK(kiln_commands_remove(F.cmd, a, F.vel));
    ASSERT_OK(kiln_commands_remove(F.cmd, a, F.owned));
    int64_t applied = -1;
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 2);
    ck_assert(kiln_is_alive(F.w, a));
    test_assert_position(F.w, a, F.pos, 1, 2);
    ck_assert_uint_eq(kiln_changed_tick(F.w, a, F.pos), before_tick);
    ck_assert(!kiln_has(F.w, a, F.vel));
    kiln_world_stats_get(F.w, &after);
    ck_assert_int_eq(after.archetypes, before.archetypes);
    ck_assert_int_eq(after.entities, before.entities);
}

/* ------------------------------------------------------------------------------------------ */
/* failures                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static const char *const command_kinds[] = {"add", "set", "remove"};

KILN_TEST_GROUP_WITH(failures, .setup = setup, .teardown = teardown);

KILN_TEST_LOOP(failures, add_set_or_remove_on_a_dead_entity_fails_naming_command_entity_and_component, 0, 3) {
    kiln_entity e[6];
    char buf[32];
    for (int i = 0; i < 6; i++) e[i] = spawn_pos(&F, (float)i, 0);
    ck_assert_str_eq(test_entity_string(e[5], buf), "5v1");
    ASSERT_OK(kiln_despawn(F.w, e[5]));

    ASSERT_OK(kiln_commands_add(F.cmd, e[0], F.vel, &(test_velocity){1, 1}));
    switch (_i) {
    case 0: ASSERT_OK(kiln_commands_add(F.cmd, e[5], F.pos, &(test_position){9, 9})); break;
    case 1: ASSERT_OK(kiln_commands_set(F.cmd, e[5], F.pos, &(test_position){9, 9})); break;
    default: ASSERT_OK(kiln_commands_remove(F.cmd, e[5], F.pos)); break;
    }
    ASSERT_OK(kiln_commands_add(F.cmd, e[1], F.vel, &(test_velocity){2, 2}));

    int64_t applied = -1;
    ck_assert_int_eq(kiln_commands_apply(F.cmd, F.w, &applied), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(applied, 1);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 2);
    test_assert_velocity(F.w, e[0], F.vel, 1, 1);   /* before the failure: applied */
    ck_assert(!kiln_has(F.w, e[1], F.vel)); /* after it: still pending */
    const char *msg = kiln_world_error(F.w);
    test_assert_names(msg, command_kinds[_i]);
    test_assert_names(msg, "5v1");
    test_assert_names(msg, "Position");

    /* the failing command stays at the front */
    kiln_world_clear_error(F.w);
    ck_assert_int_eq(kiln_commands_apply(F.cmd, F.w, &applied), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(applied, 0);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 2);
    test_assert_names(kiln_world_error(F.w), "5v1");
    ck_assert(!kiln_has(F.w, e[1], F.vel));
}

KILN_TEST(failures, set_of_an_absent_component_fails_and_a_later_apply_resumes_with_it) {
    kiln_entity a = spawn_bare(&F);
    char buf[32];
    ASSERT_OK(kiln_commands_set(F.cmd, a, F.pos, &(test_position){1, 1}));
    ASSERT_OK(kiln_commands_add(F.cmd, a, F.vel, &(test_velocity){2, 2}));
    int64_t applied = -1;
    ck_assert_int_eq(kiln_commands_apply(F.cmd, F.w, &applied), KILN_ERR_MISSING_COMPONENT);
    ck_assert_int_eq(applied, 0);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 2);
    ck_assert(!kiln_has(F.w, a, F.pos));
    ck_assert(!kiln_has(F.w, a, F.vel));
    const char *msg = kiln_world_error(F.w);
    test_assert_names(msg, "set");
    test_assert_names(msg, test_entity_string(a, buf));
    test_assert_names(msg, "Position");

    ASSERT_OK(kiln_add(F.w, a, F.pos, NULL));
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 2);
    test_assert_position(F.w, a, F.pos, 1, 1);
    test_assert_velocity(F.w, a, F.vel, 2, 2);
}

KILN_TEST(failures, add_of_a_component_registered_after_recording_fails_then_resumes_there) {
    kiln_entity a = spawn_pos(&F, 0, 0);
    kiln_component health = (kiln_component)kiln_component_count(F.w) + 1;
    int32_t hp = 42;
    char buf[32];
    kiln_entity p, q;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, &(test_position){1, 1}));
    ASSERT_OK(kiln_commands_add(F.cmd, a, F.vel, &(test_velocity){2, 2}));
    ASSERT_OK(kiln_commands_add_sized(F.cmd, p, health, &hp, sizeof hp));
    ASSERT_OK(kiln_commands_spawn(F.cmd, &q));
    ASSERT_OK(kiln_commands_add(F.cmd, q, F.pos, &(test_position){3, 3}));

    int64_t applied = -1;
    ck_assert_int_eq(kiln_commands_apply(F.cmd, F.w, &applied), KILN_ERR_UNKNOWN_COMPONENT);
    kiln_tick first = kiln_tick_current(F.w);
    ck_assert_int_eq(applied, 3);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 3);
    ck_assert_int_eq(kiln_entity_count(F.w), 2);
    kiln_entity e = kiln_commands_resolve(F.cmd, p);
    ck_assert(kiln_is_alive(F.w, e));
    test_assert_position(F.w, e, F.pos, 1, 1);
    test_assert_velocity(F.w, a, F.vel, 2, 2);
    ck_assert_uint_eq(kiln_commands_resolve(F.cmd, q), KILN_NULL_ENTITY);
    test_assert_names(kiln_world_error(F.w), "add");
    test_assert_names(kiln_world_error(F.w), test_entity_string(e, buf));

    /* the batch goes on: its placeholders are still accepted */
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.vel, &(test_velocity){4, 4}));
    ck_assert_uint_eq(register_health(F.w), health);
    kiln_tick_advance(F.w);
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 4);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 0);

    /* what the first apply did happened exactly once */
    ck_assert_int_eq(kiln_entity_count(F.w), 3);
    ck_assert_uint_eq(kiln_commands_resolve(F.cmd, p), e);
    ck_assert_uint_eq(kiln_changed_tick(F.w, a, F.vel), first);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), first);
    const int32_t *got = kiln_get(F.w, e, health);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(*got, 42);
    test_assert_velocity(F.w, e, F.vel, 4, 4);
    kiln_entity f = kiln_commands_resolve(F.cmd, q);
    ck_assert(kiln_is_alive(F.w, f));
    test_assert_position(F.w, f, F.pos, 3, 3);
}

/* _i == 1: the edge from {Position} to {Position, Health} is cached (and plain) before the
 * apply, so the apply's plain-edge shortcut is there to take: it must not, the recorded size
 * was never checked against the registered one. */
KILN_TEST_LOOP(failures, add_sized_with_a_size_the_world_disagrees_with_fails_at_apply, 0, 2) {
    kiln_entity a = spawn_pos(&F, 0, 0);
    kiln_component health = (kiln_component)kiln_component_count(F.w) + 1;
    int64_t wide = 7;
    ASSERT_OK(kiln_commands_add_sized(F.cmd, a, health, &wide, sizeof wide));
    ck_assert_uint_eq(register_health(F.w), health); /* 4 bytes, not 8 */
    if (_i == 1) {
        kiln_entity spare = spawn_pos(&F, 1, 1);
        ASSERT_OK(kiln_add(F.w, spare, health, NULL));
        ASSERT_OK(kiln_remove(F.w, spare, health, NULL));
        ASSERT_OK(kiln_despawn(F.w, spare));
    }
    int64_t applied = -1;
    ck_assert_int_ne(kiln_commands_apply(F.cmd, F.w, &applied), KILN_OK);
    ck_assert_int_eq(applied, 0);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 1);
    ck_assert(!kiln_has(F.w, a, health));
    ck_assert_str_ne(kiln_world_error(F.w), "");
}

KILN_TEST(failures, add_of_an_unregistered_component_fails_when_recorded) {
    kiln_entity a = spawn_pos(&F, 0, 0);
    kiln_component unknown = (kiln_component)kiln_component_count(F.w) + 1;
    ck_assert_str_eq(kiln_commands_error(F.cmd), "");
    ck_assert_int_eq(kiln_commands_add(F.cmd, a, unknown, &(test_velocity){1, 1}),
                     KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 0);
    test_assert_names(kiln_commands_error(F.cmd), "add");
    ck_assert_str_eq(kiln_world_error(F.w), ""); /* recording never touches the world */

    kiln_entity p;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ck_assert_int_eq(kiln_commands_add(F.cmd, p, unknown, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_int_eq(kiln_commands_add(F.cmd, p, KILN_NO_COMPONENT, NULL),
                     KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 1);

    /* registering it afterwards does not resurrect the rejected command */
    ck_assert_uint_eq(register_health(F.w), unknown);
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    ck_assert(!kiln_has(F.w, a, unknown));
    ck_assert(!kiln_has(F.w, kiln_commands_resolve(F.cmd, p), unknown));
}

static void assert_placeholder_rejected(kiln_commands *cmd, kiln_entity ph, kiln_component pos) {
    int64_t count = kiln_commands_count(cmd);
    ck_assert_int_eq(kiln_commands_add(cmd, ph, pos, &(test_position){1, 1}),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_ne(kiln_commands_error(cmd), "");
    ck_assert_int_eq(kiln_commands_set(cmd, ph, pos, &(test_position){1, 1}),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_commands_remove(cmd, ph, pos), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_commands_despawn(cmd, ph), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_commands_count(cmd), count);
}

KILN_TEST(failures, a_placeholder_of_another_buffer_is_rejected) {
    kiln_commands *other = kiln_commands_create(F.w);
    ck_assert_ptr_nonnull(other);
    kiln_entity pa;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &pa));
    assert_placeholder_rejected(other, pa, F.pos);
    ck_assert_uint_eq(kiln_commands_resolve(other, pa), KILN_NULL_ENTITY);
    ASSERT_OK(kiln_commands_apply(other, F.w, NULL));
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    ck_assert_uint_eq(kiln_commands_resolve(other, pa), KILN_NULL_ENTITY);
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
    kiln_commands_destroy(other);
}

/* The usual case: both buffers spawn, so the other buffer has placeholders of its own. */
KILN_TEST(failures, a_placeholder_of_another_buffer_is_rejected_when_that_buffer_spawns_too) {
    kiln_commands *other = kiln_commands_create(F.w);
    ck_assert_ptr_nonnull(other);
    kiln_entity pa, pb;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &pa));
    ASSERT_OK(kiln_commands_spawn(other, &pb));
    assert_placeholder_rejected(other, pa, F.pos);
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    ASSERT_OK(kiln_commands_apply(other, F.w, NULL));
    ck_assert_uint_eq(kiln_commands_resolve(other, pa), KILN_NULL_ENTITY);
    ck_assert_uint_eq(kiln_commands_resolve(F.cmd, pb), KILN_NULL_ENTITY);
    ck_assert_uint_ne(kiln_commands_resolve(F.cmd, pa), kiln_commands_resolve(other, pb));
    kiln_commands_destroy(other);
}

KILN_TEST(failures, placeholders_of_a_previous_batch_are_rejected_and_stop_resolving) {
    kiln_entity p, q, r;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, &(test_position){1, 1}));
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    kiln_entity e = kiln_commands_resolve(F.cmd, p);
    ck_assert(kiln_is_alive(F.w, e)); /* resolves until the buffer records again */

    ASSERT_OK(kiln_commands_spawn(F.cmd, &q));
    ck_assert_uint_eq(kiln_commands_resolve(F.cmd, p), KILN_NULL_ENTITY);
    assert_placeholder_rejected(F.cmd, p, F.vel);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 1);
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    ck_assert(kiln_is_alive(F.w, kiln_commands_resolve(F.cmd, q)));
    ck_assert(!kiln_has(F.w, e, F.vel));
    ck_assert_int_eq(kiln_entity_count(F.w), 2);

    /* a cleared batch ends too */
    ASSERT_OK(kiln_commands_spawn(F.cmd, &r));
    kiln_commands_clear(F.cmd);
    ck_assert_uint_eq(kiln_commands_resolve(F.cmd, r), KILN_NULL_ENTITY);
    assert_placeholder_rejected(F.cmd, r, F.pos);
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    ck_assert_int_eq(kiln_entity_count(F.w), 2);
}

/* An add straight after the spawn it targets takes a lean path that trusts the buffer's
 * latest placeholder: that trust ends with the batch (a complete apply, a clear) and with
 * the world. */
KILN_TEST(failures, the_latest_placeholder_is_refused_right_after_its_batch_ends) {
    kiln_entity p, q;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, &(test_position){1, 1}));
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    assert_placeholder_rejected(F.cmd, p, F.vel); /* no spawn in between */
    ck_assert(!kiln_has(F.w, kiln_commands_resolve(F.cmd, p), F.vel));

    ASSERT_OK(kiln_commands_spawn(F.cmd, &q));
    ck_assert_uint_ne(q, p);
    ASSERT_OK(kiln_commands_add(F.cmd, q, F.pos, &(test_position){2, 2}));
    kiln_commands_clear(F.cmd);
    assert_placeholder_rejected(F.cmd, q, F.vel);
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    ck_assert_int_eq(kiln_entity_count(F.w), 1);

    kiln_world *w = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(w);
    kiln_component pos = test_register_position(w);
    kiln_commands *other = kiln_commands_create(w);
    ck_assert_ptr_nonnull(other);
    ASSERT_OK(kiln_commands_spawn(other, &q));
    ASSERT_OK(kiln_commands_add(other, q, pos, &(test_position){3, 3}));
    kiln_world_destroy(w); /* the buffer is detached */
    ck_assert_int_eq(kiln_commands_add(other, q, pos, &(test_position){4, 4}), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_commands_error(other), "kiln_commands_add: the buffer's world was destroyed");
    ck_assert_int_eq(kiln_commands_spawn(other, &q), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_commands_count(other), 0);
    kiln_commands_destroy(other);
}

/* Before batch tags were unique per world, a placeholder's buffer id wrapped after 16,384
 * buffers and its batch number after 65,536 batches, so an old placeholder could name a
 * spawn of a later batch. */
/* Tens of thousands of batches: slow under the sanitizers, so a group with a long timeout. */
KILN_TEST_GROUP_WITH(aliasing, .setup = setup, .teardown = teardown, .timeout = 300);

KILN_TEST(aliasing, a_placeholder_kept_past_65536_batches_is_still_rejected) {
    kiln_entity old, now = KILN_NULL_ENTITY;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &old));
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    kiln_entity first = kiln_commands_resolve(F.cmd, old);
    for (int i = 0; i < 65536 + 3; i++) {
        ASSERT_OK(kiln_commands_spawn(F.cmd, &now));
        ck_assert_uint_ne(now, old);
        ASSERT_OK(kiln_commands_despawn(F.cmd, now)); /* keeps the world small */
        ck_assert_uint_eq(kiln_commands_resolve(F.cmd, old), KILN_NULL_ENTITY);
        if (i % 4096 == 0 || i >= 65536 - 1) assert_placeholder_rejected(F.cmd, old, F.pos);
        ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    }
    ck_assert(kiln_is_alive(F.w, first));
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
}

KILN_TEST(aliasing, a_placeholder_is_rejected_by_every_later_buffer_past_16384_of_them) {
    kiln_entity mine;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &mine));
    for (int i = 0; i < 16384 + 3; i++) {
        kiln_commands *other = kiln_commands_create(F.w);
        ck_assert_ptr_nonnull(other);
        kiln_entity theirs;
        ASSERT_OK(kiln_commands_spawn(other, &theirs));
        ck_assert_uint_ne(theirs, mine);
        if (i % 4096 == 0 || i >= 16384 - 1) assert_placeholder_rejected(other, mine, F.pos);
        ck_assert_uint_eq(kiln_commands_resolve(other, mine), KILN_NULL_ENTITY);
        kiln_commands_destroy(other);
    }
    ASSERT_OK(kiln_commands_add(F.cmd, mine, F.pos, &(test_position){4, 2}));
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    test_assert_position(F.w, kiln_commands_resolve(F.cmd, mine), F.pos, 4, 2);
}

KILN_TEST(failures, apply_to_another_world_fails_with_invalid_argument) {
    kiln_world *other = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(other);
    ck_assert_uint_eq(test_register_position(other), F.pos);
    ck_assert_uint_eq(test_register_velocity(other), F.vel);
    kiln_entity a = spawn_pos(&F, 0, 0);
    kiln_entity p;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, NULL));
    ASSERT_OK(kiln_commands_add(F.cmd, a, F.vel, NULL));
    uint64_t mine = test_world_digest(F.w), theirs = test_world_digest(other);

    int64_t applied = -1;
    ck_assert_int_eq(kiln_commands_apply(F.cmd, other, &applied), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(applied, 0);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 3);
    ck_assert_str_ne(kiln_world_error(other), "");
    ck_assert_int_eq(kiln_entity_count(other), 0);
    ck_assert_uint_eq(test_world_digest(other), theirs);
    ck_assert_uint_eq(test_world_digest(F.w), mine);

    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 3);
    ck_assert(kiln_has(F.w, a, F.vel));
    kiln_world_destroy(other);
}

/* ------------------------------------------------------------------------------------------ */
/* misuse                                                                                     */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(misuse, .setup = setup, .teardown = teardown);

/* The buffer a check hook destroys while its apply still walks it. */
static kiln_commands *doomed;

static kiln_result destroy_the_buffer(const kiln_world *w, kiln_entity e, const void *value, void *ctx,
                                      char *why, size_t why_size) {
    (void)w, (void)e, (void)value, (void)ctx, (void)why, (void)why_size;
    kiln_commands_destroy(doomed);
    return KILN_OK;
}

/* Freed under its apply, the buffer would be read after the free: the destroy asserts. */
KILN_TEST_SIGNAL(misuse, destroying_a_buffer_from_a_hook_its_apply_runs_aborts_naming_the_call, SIGABRT) {
    kiln_component c;
    ASSERT_OK(kiln_component_register(F.w, &(kiln_component_desc){.name = "Doom", .size = sizeof(int),
                                                                  .check = destroy_the_buffer}, &c));
    kiln_entity e = spawn_pos(&F, 0, 0);
    doomed = kiln_commands_create(F.w);
    ASSERT_OK(kiln_commands_add(doomed, e, c, &(int){1}));
    ASSERT_OK(kiln_commands_add(doomed, e, c, &(int){2}));
    test_expect_abort("kiln_commands_destroy: the buffer is being applied");
    kiln_commands_apply(doomed, F.w, NULL);
}
