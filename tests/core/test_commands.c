/* test_commands.c: Check suite for command buffers: recording, placeholders, ordered apply, ticks,
 * failures and resumption, value ownership, steady-state memory and cross-thread determinism. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* fixture and helpers                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Every test gets a world on the counting allocator with Position, Velocity and Owned, and an
 * empty buffer. Teardown checks that every byte came back and no value was destroyed twice. */
typedef struct fixture {
    test_allocator alloc;
    kiln_world *w;
    kiln_component pos, vel, owned;
    kiln_commands *cmd;
    test_hook_log log;
} fixture;

static fixture F;

static void setup(void) {
    memset(&F, 0, sizeof F);
    test_allocator_init(&F.alloc);
    F.w = test_world_create(&F.alloc);
    F.pos = test_register_position(F.w);
    F.vel = test_register_velocity(F.w);
    F.owned = test_register_owned(F.w, &F.log);
    F.cmd = kiln_commands_create(F.w);
    ck_assert_ptr_nonnull(F.cmd);
}

static void teardown(void) {
    kiln_commands_destroy(F.cmd);
    kiln_world_destroy(F.w);
    ck_assert_int_eq(F.alloc.live_blocks, 0);
    ck_assert_int_eq(F.alloc.live_bytes, 0);
    ck_assert_int_eq(F.alloc.bad_osize, 0);
    ck_assert_int_eq(F.log.bad_payload, 0);
    /* -1: a value destroyed twice; -2: a moved-from value destroyed */
    ck_assert_int_eq(test_hook_log_count(&F.log, -1), 0);
    ck_assert_int_eq(test_hook_log_count(&F.log, -2), 0);
}

#define ASSERT_OK(call)                                                                      \
    do {                                                                                     \
        kiln_result r_ = (call);                                                             \
        ck_assert_msg(r_ == KILN_OK, "%s returned \"%s\" (world: \"%s\", buffer: \"%s\")", \
                      #call, kiln_result_name(r_), F.w ? kiln_world_error(F.w) : "",        \
                      F.cmd ? kiln_commands_error(F.cmd) : "");                              \
    } while (0)

static kiln_entity spawn_pos(float x, float y) {
    kiln_entity e = KILN_NULL_ENTITY;
    ASSERT_OK(kiln_spawn_with(F.w, &F.pos, (const void *[]){&(test_position){x, y}}, 1, &e));
    return e;
}

static kiln_entity spawn_bare(void) {
    kiln_entity e = KILN_NULL_ENTITY;
    ASSERT_OK(kiln_spawn(F.w, &e));
    return e;
}

static kiln_entity spawn_owned(int32_t id) {
    test_owned v = test_owned_make(id);
    kiln_entity e = KILN_NULL_ENTITY;
    ASSERT_OK(kiln_spawn_with(F.w, &F.owned, (const void *[]){&v}, 1, &e));
    return e;
}


static void assert_same_stats(const kiln_world_stats *a, const kiln_world_stats *b) {
    ck_assert_int_eq(a->entities, b->entities);
    ck_assert_int_eq(a->entity_slots, b->entity_slots);
    ck_assert_int_eq(a->archetypes, b->archetypes);
    ck_assert_int_eq(a->components, b->components);
    ck_assert_int_eq(a->queries, b->queries);
    ck_assert_int_eq(a->bytes, b->bytes);
    ck_assert_int_eq(a->allocations, b->allocations);
}

/* Registers a 4-byte "Health" component and returns its id. */
static kiln_component register_health(kiln_world *w) {
    kiln_component_desc desc = {.name = "Health", .size = sizeof(int32_t)};
    kiln_component id = KILN_NO_COMPONENT;
    ck_assert_int_eq(kiln_component_register(w, &desc, &id), KILN_OK);
    return id;
}

/* ------------------------------------------------------------------------------------------ */
/* recording                                                                                  */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(record, .setup = setup, .teardown = teardown);

KILN_TEST(record, recording_leaves_the_world_untouched_until_apply) {
    kiln_entity a = spawn_pos(1, 2);
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
    for (int i = 0; i < 4; i++) spawn_pos((float)i, 0);
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
    kiln_entity a = spawn_pos(0, 0);
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

KILN_TEST(apply, apply_stamps_written_rows_with_the_tick_current_at_apply) {
    kiln_entity a = spawn_pos(0, 0);
    kiln_entity b = spawn_pos(0, 0);
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

KILN_TEST(apply, apply_empties_the_buffer_and_a_second_apply_changes_nothing) {
    kiln_entity a = spawn_pos(0, 0);
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
    kiln_entity a = spawn_pos(0, 0);
    kiln_entity b = spawn_pos(0, 0);
    ASSERT_OK(kiln_commands_despawn(F.cmd, a));
    ASSERT_OK(kiln_commands_despawn(F.cmd, b));
    ASSERT_OK(kiln_commands_despawn(F.cmd, b)); /* dies in the command before */
    ASSERT_OK(kiln_commands_spawn(F.cmd, &(kiln_entity){0}));

    ASSERT_OK(kiln_despawn(F.w, a));
    kiln_entity c = spawn_bare(); /* takes a's slot with a new generation */
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
    kiln_entity a = spawn_pos(1, 2);
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
    for (int i = 0; i < 6; i++) e[i] = spawn_pos((float)i, 0);
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
    kiln_entity a = spawn_bare();
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
    kiln_entity a = spawn_pos(0, 0);
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

KILN_TEST(failures, add_sized_with_a_size_the_world_disagrees_with_fails_at_apply) {
    kiln_entity a = spawn_pos(0, 0);
    kiln_component health = (kiln_component)kiln_component_count(F.w) + 1;
    int64_t wide = 7;
    ASSERT_OK(kiln_commands_add_sized(F.cmd, a, health, &wide, sizeof wide));
    ck_assert_uint_eq(register_health(F.w), health); /* 4 bytes, not 8 */
    int64_t applied = -1;
    ck_assert_int_ne(kiln_commands_apply(F.cmd, F.w, &applied), KILN_OK);
    ck_assert_int_eq(applied, 0);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 1);
    ck_assert(!kiln_has(F.w, a, health));
    ck_assert_str_ne(kiln_world_error(F.w), "");
}

KILN_TEST(failures, add_of_an_unregistered_component_fails_when_recorded) {
    kiln_entity a = spawn_pos(0, 0);
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

KILN_TEST(failures, apply_to_another_world_fails_with_invalid_argument) {
    kiln_world *other = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(other);
    ck_assert_uint_eq(test_register_position(other), F.pos);
    ck_assert_uint_eq(test_register_velocity(other), F.vel);
    kiln_entity a = spawn_pos(0, 0);
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
/* value ownership                                                                            */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(ownership, .setup = setup, .teardown = teardown);

/* _i == 0: the buffer is cleared; _i == 1: it is destroyed. */
KILN_TEST_LOOP(ownership, clearing_or_destroying_destroys_each_pending_value_once, 0, 2) {
    kiln_entity a = spawn_owned(10);
    kiln_entity b = spawn_bare();
    test_owned v1 = test_owned_make(1), v2 = test_owned_make(2), v3 = test_owned_make(3);
    kiln_entity p;
    ASSERT_OK(kiln_commands_set(F.cmd, a, F.owned, &v1));
    ASSERT_OK(kiln_commands_add(F.cmd, b, F.owned, &v2));
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.owned, &v3));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.owned, NULL));
    ck_assert_int_eq(F.log.destroyed, 0);

    if (_i == 0) {
        kiln_commands_clear(F.cmd);
        ck_assert_int_eq(kiln_commands_count(F.cmd), 0);
    } else {
        kiln_commands_destroy(F.cmd);
        F.cmd = NULL;
    }
    ck_assert_int_eq(test_hook_log_count(&F.log, 1), 1);
    ck_assert_int_eq(test_hook_log_count(&F.log, 2), 1);
    ck_assert_int_eq(test_hook_log_count(&F.log, 3), 1);
    /* the add without a value holds none (the defaults are given when it lands) */
    ck_assert_int_eq(test_hook_log_count(&F.log, 0), 0);
    ck_assert_int_eq(F.log.destroyed, 3);
    ck_assert_int_eq(test_hook_log_count(&F.log, 10), 0);

    if (F.cmd != NULL) { /* clearing or destroying again finds nothing left */
        kiln_commands_clear(F.cmd);
        ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
        kiln_commands_destroy(F.cmd);
        F.cmd = NULL;
        ck_assert_int_eq(F.log.destroyed, 3);
    }
    const test_owned *kept = kiln_get(F.w, a, F.owned);
    ck_assert_ptr_nonnull(kept);
    ck_assert_int_eq(kept->id, 10);
    ck_assert(!kiln_has(F.w, b, F.owned));
    kiln_world_destroy(F.w);
    F.w = NULL;
    ck_assert_int_eq(F.log.destroyed, 4);
    ck_assert_int_eq(test_hook_log_count(&F.log, 10), 1);
}

KILN_TEST(ownership, applied_values_are_destroyed_by_the_world_once_and_never_by_the_buffer) {
    kiln_entity a = spawn_owned(10);
    kiln_entity b = spawn_bare();
    test_owned v1 = test_owned_make(1), v2 = test_owned_make(2), v3 = test_owned_make(3);
    kiln_entity p;
    ASSERT_OK(kiln_commands_add(F.cmd, b, F.owned, &v1));
    ASSERT_OK(kiln_commands_set(F.cmd, a, F.owned, &v2));
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.owned, &v3));
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    ck_assert_int_eq(test_hook_log_count(&F.log, 10), 1); /* replaced by the set */
    ck_assert_int_eq(F.log.destroyed, 1);

    kiln_commands_clear(F.cmd);
    kiln_commands_destroy(F.cmd);
    F.cmd = NULL;
    ck_assert_int_eq(F.log.destroyed, 1);
    ck_assert_int_eq(((const test_owned *)kiln_get(F.w, a, F.owned))->id, 2);

    ASSERT_OK(kiln_despawn(F.w, b));
    ck_assert_int_eq(test_hook_log_count(&F.log, 1), 1);
    ck_assert_int_eq(F.log.destroyed, 2);
    kiln_world_destroy(F.w);
    F.w = NULL;
    ck_assert_int_eq(test_hook_log_count(&F.log, 1), 1);
    ck_assert_int_eq(test_hook_log_count(&F.log, 2), 1);
    ck_assert_int_eq(test_hook_log_count(&F.log, 3), 1);
    ck_assert_int_eq(test_hook_log_count(&F.log, 10), 1);
    ck_assert_int_eq(F.log.destroyed, 4);
}

KILN_TEST(ownership, clearing_after_a_failed_apply_destroys_only_the_values_still_pending) {
    kiln_entity a = spawn_bare();
    kiln_entity b = spawn_bare();
    kiln_entity d = spawn_bare();
    ASSERT_OK(kiln_despawn(F.w, d));
    test_owned v1 = test_owned_make(1), v2 = test_owned_make(2), v3 = test_owned_make(3);
    ASSERT_OK(kiln_commands_add(F.cmd, a, F.owned, &v1));
    ASSERT_OK(kiln_commands_add(F.cmd, d, F.owned, &v2));
    ASSERT_OK(kiln_commands_add(F.cmd, b, F.owned, &v3));
    ck_assert_int_eq(kiln_commands_apply(F.cmd, F.w, NULL), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(F.log.destroyed, 0); /* the failing command still owns its value */

    kiln_commands_clear(F.cmd);
    ck_assert_int_eq(test_hook_log_count(&F.log, 1), 0);
    ck_assert_int_eq(test_hook_log_count(&F.log, 2), 1);
    ck_assert_int_eq(test_hook_log_count(&F.log, 3), 1);
    ck_assert(!kiln_has(F.w, b, F.owned));
    kiln_world_destroy(F.w);
    F.w = NULL;
    ck_assert_int_eq(test_hook_log_count(&F.log, 1), 1);
    ck_assert_int_eq(F.log.destroyed, 3);
}

KILN_TEST(ownership, a_value_that_failed_to_apply_lands_intact_when_a_later_apply_succeeds) {
    kiln_entity a = spawn_bare();
    test_owned v = test_owned_make(5);
    ASSERT_OK(kiln_commands_set(F.cmd, a, F.owned, &v));
    ck_assert_int_eq(kiln_commands_apply(F.cmd, F.w, NULL), KILN_ERR_MISSING_COMPONENT);
    ASSERT_OK(kiln_add(F.w, a, F.owned, NULL));
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    const test_owned *got = kiln_get(F.w, a, F.owned);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(got->id, 5);
    ck_assert_ptr_nonnull(got->payload);
    ck_assert_int_eq(*got->payload, 5);
    ck_assert_int_eq(test_hook_log_count(&F.log, 0), 1); /* the zero value it replaced */
    ck_assert_int_eq(test_hook_log_count(&F.log, 5), 0);
    kiln_world_destroy(F.w);
    F.w = NULL;
    ck_assert_int_eq(test_hook_log_count(&F.log, 5), 1);
}

KILN_TEST(ownership, values_with_a_move_hook_are_moved_into_the_buffer_and_then_the_world) {
    kiln_entity a = spawn_bare();
    test_position pv = {1, 2}; /* no move hook: copied, the caller's value untouched */
    ASSERT_OK(kiln_commands_add(F.cmd, a, F.pos, &pv));
    ck_assert(pv.x == 1 && pv.y == 2);

    test_owned v = test_owned_make(7);
    int32_t *payload = v.payload;
    ASSERT_OK(kiln_commands_add(F.cmd, a, F.owned, &v));
    ck_assert_int_eq(F.log.move_calls, 1);
    ck_assert_int_eq(F.log.moved, 1);
    ck_assert_ptr_null(v.payload); /* the caller's object is moved-from */
    ck_assert_int_eq(v.id, -2);

    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    ck_assert_int_eq(F.log.move_calls, 2); /* out of the buffer into the world's row */
    ck_assert_int_eq(F.log.destroyed, 0);
    const test_owned *got = kiln_get(F.w, a, F.owned);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(got->id, 7);
    ck_assert_ptr_eq(got->payload, payload);
    test_assert_position(F.w, a, F.pos, 1, 2);
}

/* The world goes first here: the buffer must not read the freed world (AddressSanitizer
 * reported exactly that before buffers were detached). */
KILN_TEST(ownership, a_buffer_outliving_its_world_is_detached_and_still_destroys_cleanly) {
    kiln_entity e = spawn_pos(1.0f, 2.0f);
    test_owned v = test_owned_make(7);
    ASSERT_OK(kiln_commands_add(F.cmd, e, F.owned, &v));
    kiln_commands *second = kiln_commands_create(F.w);
    ck_assert_ptr_nonnull(second);
    kiln_entity p;
    ck_assert_int_eq(kiln_commands_spawn(second, &p), KILN_OK);
    kiln_world_destroy(F.w);
    F.w = NULL;
    /* the pending value died with the world, once, and nothing is pending any more */
    ck_assert_int_eq(test_hook_log_count(&F.log, 7), 1);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 0);
    ck_assert_int_eq(kiln_commands_resolve(second, p), KILN_NULL_ENTITY);
    /* recording into a detached buffer fails and says why */
    ck_assert_int_eq(kiln_commands_spawn(F.cmd, &p), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_commands_error(F.cmd),
                     "kiln_commands_spawn: the buffer's world was destroyed");
    ck_assert_int_eq(kiln_commands_add(F.cmd, e, F.pos, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_commands_remove(second, e, F.pos), KILN_ERR_INVALID_ARGUMENT);
    kiln_commands_clear(F.cmd);
    kiln_commands_destroy(second);
    /* F.cmd is destroyed by the teardown, after its world, which must free every byte */
}

KILN_TEST(ownership, destroying_a_null_buffer_does_nothing) {
    kiln_commands_destroy(NULL);
    ck_assert_int_eq(kiln_entity_count(F.w), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* out of memory                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* A fresh world on a with Position and Velocity and one live bare entity. */
static kiln_world *oom_world(test_allocator *a, kiln_component *pos, kiln_component *vel,
                             kiln_entity *live) {
    test_allocator_init(a);
    kiln_world *w = test_world_create(a);
    *pos = test_register_position(w);
    *vel = test_register_velocity(w);
    ck_assert_int_eq(kiln_spawn(w, live), KILN_OK);
    return w;
}

static void oom_world_destroy(test_allocator *a, kiln_world *w, kiln_commands *cmd) {
    kiln_commands_destroy(cmd);
    kiln_world_destroy(w);
    ck_assert_int_eq(a->live_bytes, 0);
    ck_assert_int_eq(a->bad_osize, 0);
}

KILN_TEST_GROUP(out_of_memory);

/* Records spawn, add, add until the first failure, then applies what was recorded. */
KILN_TEST(out_of_memory, out_of_memory_while_recording_records_nothing_of_the_failing_call) {
    int64_t failures = 0;
    for (int64_t n = 0;; n++) {
        ck_assert_int_lt(n, 64);
        test_allocator a;
        kiln_component pos, vel;
        kiln_entity live;
        kiln_world *w = oom_world(&a, &pos, &vel, &live);
        kiln_commands *cmd = kiln_commands_create(w);
        ck_assert_ptr_nonnull(cmd);
        kiln_entity p = (kiln_entity)777;
        int ok = 0;
        test_allocator_fail_after(&a, n);
        kiln_result r = kiln_commands_spawn(cmd, &p);
        if (r == KILN_OK) ok++, r = kiln_commands_add(cmd, p, pos, &(test_position){1, 2});
        if (r == KILN_OK) ok++, r = kiln_commands_add(cmd, live, vel, &(test_velocity){3, 4});
        if (r == KILN_OK) ok++;
        test_allocator_fail_never(&a);
        if (r != KILN_OK) {
            failures++;
            ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
            ck_assert_str_ne(kiln_commands_error(cmd), "");
            if (ok == 0) ck_assert_uint_eq(p, (kiln_entity)777); /* dest untouched */
        }
        ck_assert_int_eq(kiln_commands_count(cmd), ok);
        int64_t applied = -1;
        ck_assert_int_eq(kiln_commands_apply(cmd, w, &applied), KILN_OK);
        ck_assert_int_eq(applied, ok);
        ck_assert_int_eq(kiln_entity_count(w), ok >= 1 ? 2 : 1);
        if (ok >= 1) ck_assert(kiln_is_alive(w, kiln_commands_resolve(cmd, p)));
        if (ok >= 2) test_assert_position(w, kiln_commands_resolve(cmd, p), pos, 1, 2);
        if (ok == 1) ck_assert(!kiln_has(w, kiln_commands_resolve(cmd, p), pos));
        if (ok == 3) test_assert_velocity(w, live, vel, 3, 4);
        else ck_assert(!kiln_has(w, live, vel));
        oom_world_destroy(&a, w, cmd);
        if (ok == 3) break;
    }
    ck_assert_int_ge(failures, 3); /* placeholders, commands, value storage */
}

KILN_TEST(out_of_memory, out_of_memory_during_apply_keeps_the_failing_command_for_the_next_apply) {
    int64_t failures = 0;
    for (int64_t n = 0;; n++) {
        ck_assert_int_lt(n, 64);
        test_allocator a;
        kiln_component pos, vel;
        kiln_entity live;
        kiln_world *w = oom_world(&a, &pos, &vel, &live);
        kiln_commands *cmd = kiln_commands_create(w);
        ck_assert_ptr_nonnull(cmd);
        kiln_entity p;
        ck_assert_int_eq(kiln_commands_spawn(cmd, &p), KILN_OK);
        ck_assert_int_eq(kiln_commands_add(cmd, p, pos, &(test_position){1, 2}), KILN_OK);
        ck_assert_int_eq(kiln_commands_add(cmd, live, vel, &(test_velocity){3, 4}), KILN_OK);
        ck_assert_int_eq(kiln_commands_add(cmd, live, pos, &(test_position){5, 6}), KILN_OK);
        test_allocator_fail_after(&a, n);
        int64_t applied = -1;
        kiln_result r = kiln_commands_apply(cmd, w, &applied);
        test_allocator_fail_never(&a);
        if (r != KILN_OK) {
            failures++;
            ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
            ck_assert_str_ne(kiln_world_error(w), "");
            ck_assert_int_eq(kiln_commands_count(cmd), 4 - applied);
            int64_t rest = -1;
            ck_assert_int_eq(kiln_commands_apply(cmd, w, &rest), KILN_OK);
            ck_assert_int_eq(applied + rest, 4);
        }
        /* everything landed exactly once */
        ck_assert_int_eq(kiln_commands_count(cmd), 0);
        ck_assert_int_eq(kiln_entity_count(w), 2);
        test_assert_position(w, kiln_commands_resolve(cmd, p), pos, 1, 2);
        test_assert_velocity(w, live, vel, 3, 4);
        test_assert_position(w, live, pos, 5, 6);
        oom_world_destroy(&a, w, cmd);
        if (r == KILN_OK) break;
    }
    ck_assert_int_ge(failures, 1);
}

/* ------------------------------------------------------------------------------------------ */
/* steady state                                                                               */
/* ------------------------------------------------------------------------------------------ */

#define FRAME_ENTITIES 64

/* One frame: every live entity is written, loses Velocity and is despawned; as many new
 * ones are spawned with Position and Velocity. */
static void run_frame(kiln_entity *live, int frame) {
    kiln_entity ph[FRAME_ENTITIES];
    for (int i = 0; i < FRAME_ENTITIES; i++) {
        ASSERT_OK(kiln_commands_set(F.cmd, live[i], F.pos, &(test_position){(float)frame, 0}));
        ASSERT_OK(kiln_commands_remove(F.cmd, live[i], F.vel));
        ASSERT_OK(kiln_commands_despawn(F.cmd, live[i]));
    }
    for (int i = 0; i < FRAME_ENTITIES; i++) {
        ASSERT_OK(kiln_commands_spawn(F.cmd, &ph[i]));
        ASSERT_OK(kiln_commands_add(F.cmd, ph[i], F.pos, &(test_position){(float)i, 0}));
        ASSERT_OK(kiln_commands_add(F.cmd, ph[i], F.vel, &(test_velocity){0, (float)i}));
    }
    int64_t applied = -1;
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, FRAME_ENTITIES * 6);
    for (int i = 0; i < FRAME_ENTITIES; i++) {
        live[i] = kiln_commands_resolve(F.cmd, ph[i]);
        ck_assert(kiln_is_alive(F.w, live[i]));
    }
    kiln_tick_advance(F.w);
}

KILN_TEST_GROUP_WITH(memory, .setup = setup, .teardown = teardown);

KILN_TEST(memory, a_buffer_reused_every_frame_stops_allocating_after_the_first_frames) {
    kiln_entity live[FRAME_ENTITIES];
    for (int i = 0; i < FRAME_ENTITIES; i++) {
        ASSERT_OK(kiln_spawn_with(F.w, (kiln_component[]){F.pos, F.vel}, NULL, 2, &live[i]));
    }
    int frame = 0;
    for (; frame < 3; frame++) run_frame(live, frame);
    int64_t calls = F.alloc.calls;
    for (; frame < 53; frame++) run_frame(live, frame);
    ck_assert_int_eq(F.alloc.calls, calls);
    ck_assert_int_eq(kiln_entity_count(F.w), FRAME_ENTITIES);
    test_assert_velocity(F.w, live[FRAME_ENTITIES - 1], F.vel, 0, (float)(FRAME_ENTITIES - 1));
}

/* ------------------------------------------------------------------------------------------ */
/* determinism across threads                                                                 */
/* ------------------------------------------------------------------------------------------ */

#define PRE_EXISTING 40

typedef struct recorder {
    kiln_commands *cmd;
    const kiln_entity *existing;
    kiln_component pos, vel, health, frozen;
    int side;
    pthread_barrier_t *start;
    kiln_result result;
} recorder;

#define RECORD(call)                  \
    do {                              \
        kiln_result r_ = (call);      \
        if (r_ != KILN_OK) return r_; \
    } while (0)

/* Side 0 and side 1 record different things, both touching pre-existing entities. Runs on
 * any thread: no Check assertions here. */
static kiln_result record_side(recorder *r) {
    const kiln_entity *ex = r->existing;
    kiln_entity p;
    if (r->side == 0) {
        for (int i = 0; i < 1000; i++) {
            RECORD(kiln_commands_spawn(r->cmd, &p));
            RECORD(kiln_commands_add(r->cmd, p, r->pos, &(test_position){(float)i, 2.0f * i}));
            if (i % 3 == 0)
                RECORD(kiln_commands_add(r->cmd, p, r->vel, &(test_velocity){(float)i, (float)-i}));
            if (i % 7 == 0) RECORD(kiln_commands_despawn(r->cmd, p));
        }
        for (int i = 0; i < 10; i++)
            RECORD(kiln_commands_set(r->cmd, ex[i], r->pos, &(test_position){100.0f + i, 0}));
        for (int32_t i = 10; i < 15; i++) RECORD(kiln_commands_add(r->cmd, ex[i], r->health, &i));
        for (int i = 35; i < 38; i++) RECORD(kiln_commands_despawn(r->cmd, ex[i]));
    } else {
        for (int32_t i = 0; i < 800; i++) {
            RECORD(kiln_commands_spawn(r->cmd, &p));
            RECORD(kiln_commands_add(r->cmd, p, r->vel, &(test_velocity){(float)-i, (float)i}));
            int32_t hp = 7 * i;
            RECORD(kiln_commands_add(r->cmd, p, r->health, &hp));
            if (i % 2) RECORD(kiln_commands_add(r->cmd, p, r->frozen, NULL));
        }
        for (int i = 20; i < 30; i++) RECORD(kiln_commands_remove(r->cmd, ex[i], r->vel));
        for (int i = 15; i < 20; i++)
            RECORD(kiln_commands_set(r->cmd, ex[i], r->pos, &(test_position){-1.0f * i, 1}));
        for (int i = 0; i < 5; i++)
            RECORD(kiln_commands_add(r->cmd, ex[i], r->vel, &(test_velocity){0.5f * i, 0}));
        int32_t hp = -1;
        RECORD(kiln_commands_add(r->cmd, ex[10], r->health, &hp)); /* after side 0's add */
        for (int i = 38; i < 40; i++) RECORD(kiln_commands_despawn(r->cmd, ex[i]));
    }
    return KILN_OK;
}

static void *record_thread(void *arg) {
    recorder *r = arg;
    pthread_barrier_wait(r->start);
    r->result = record_side(r);
    return NULL;
}

/* Builds a world, records both sides (on two threads, or one after the other on this one),
 * applies side 0 then side 1, and returns the world's digest. */
static uint64_t run_two_recorders(bool threaded, int64_t *entities) {
    kiln_world *w = kiln_world_create(NULL); /* the default allocator is thread-safe */
    ck_assert_ptr_nonnull(w);
    kiln_component pos = test_register_position(w), vel = test_register_velocity(w);
    kiln_component health = register_health(w), frozen = test_register_tag(w, "Frozen");
    kiln_entity existing[PRE_EXISTING];
    for (int i = 0; i < PRE_EXISTING; i++) {
        const void *values[] = {&(test_position){(float)i, (float)-i}, &(test_velocity){1, 1}};
        ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){pos, vel}, values, i < 20 ? 1 : 2,
                                         &existing[i]),
                         KILN_OK);
    }
    pthread_barrier_t start;
    recorder rec[2];
    for (int s = 0; s < 2; s++) {
        rec[s] = (recorder){.cmd = kiln_commands_create(w), .existing = existing, .pos = pos,
                            .vel = vel, .health = health, .frozen = frozen, .side = s,
                            .start = &start, .result = KILN_ERR_LIMIT};
        ck_assert_ptr_nonnull(rec[s].cmd);
    }
    if (threaded) {
        pthread_t threads[2];
        ck_assert_int_eq(pthread_barrier_init(&start, NULL, 2), 0);
        for (int s = 0; s < 2; s++)
            ck_assert_int_eq(pthread_create(&threads[s], NULL, record_thread, &rec[s]), 0);
        for (int s = 0; s < 2; s++) ck_assert_int_eq(pthread_join(threads[s], NULL), 0);
        pthread_barrier_destroy(&start);
    } else {
        for (int s = 0; s < 2; s++) rec[s].result = record_side(&rec[s]);
    }
    for (int s = 0; s < 2; s++) {
        ck_assert_msg(rec[s].result == KILN_OK, "side %d recorded with \"%s\": %s", s,
                      kiln_result_name(rec[s].result), kiln_commands_error(rec[s].cmd));
    }
    ck_assert_int_eq(kiln_entity_count(w), PRE_EXISTING); /* recording changed nothing */
    for (int s = 0; s < 2; s++) {
        kiln_result r = kiln_commands_apply(rec[s].cmd, w, NULL);
        ck_assert_msg(r == KILN_OK, "applying side %d: %s", s, kiln_world_error(w));
    }
    const int32_t *hp = kiln_get(w, existing[10], health);
    ck_assert_ptr_nonnull(hp);
    ck_assert_int_eq(*hp, -1); /* side 1 applied after side 0 */
    *entities = kiln_entity_count(w);
    uint64_t digest = test_world_digest(w);
    for (int s = 0; s < 2; s++) kiln_commands_destroy(rec[s].cmd);
    kiln_world_destroy(w);
    return digest;
}

KILN_TEST_GROUP_WITH(threads, .timeout = 30);

KILN_TEST(threads, buffers_recorded_on_two_threads_apply_to_identical_worlds) {
    int64_t expected_entities = 0, entities = 0;
    uint64_t reference = run_two_recorders(false, &expected_entities);
    /* 40 existing - 5 despawned + 1000 spawned - 143 despawned again + 800 spawned */
    ck_assert_int_eq(expected_entities, 40 - 5 + 1000 - 143 + 800);
    for (int run = 0; run < 20; run++) {
        uint64_t digest = run_two_recorders(true, &entities);
        ck_assert_int_eq(entities, expected_entities);
        ck_assert_msg(digest == reference, "run %d produced a different world", run);
    }
}

/* ------------------------------------------------------------------------------------------ */
