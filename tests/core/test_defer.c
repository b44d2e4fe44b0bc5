/* test_defer.c: Check suite for the deferred world: sections and query loops queue structural
 * calls, check them at once and apply them in order at the end; failures reserve nothing. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* fixture and helpers                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Every test gets a world on the counting allocator with Position, Velocity and Owned.
 * Teardown checks that every byte came back and no value was destroyed twice. */
typedef struct fixture {
    test_allocator alloc;
    kiln_world *w;
    kiln_component pos, vel, owned;
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
}

static void teardown(void) {
    kiln_world_destroy(F.w);
    ck_assert_int_eq(F.alloc.live_blocks, 0);
    ck_assert_int_eq(F.alloc.live_bytes, 0);
    ck_assert_int_eq(F.alloc.bad_osize, 0);
    ck_assert_int_eq(F.log.bad_payload, 0);
    /* -1: a value destroyed twice; -2: a moved-from value destroyed */
    ck_assert_int_eq(test_hook_log_count(&F.log, -1), 0);
    ck_assert_int_eq(test_hook_log_count(&F.log, -2), 0);
}

#define ASSERT_OK_IN(world, call)                                                        \
    do {                                                                                 \
        kiln_result r_ = (call);                                                         \
        ck_assert_msg(r_ == KILN_OK, "%s returned \"%s\" (world: \"%s\")", #call,        \
                      kiln_result_name(r_), kiln_world_error(world));                    \
    } while (0)

#define ASSERT_OK(call) ASSERT_OK_IN(F.w, call)

static kiln_entity spawn_pos(float x, float y) {
    kiln_entity e = KILN_NULL_ENTITY;
    ASSERT_OK(kiln_spawn_with(F.w, &F.pos, (const void *[]){&(test_position){x, y}}, 1, &e));
    return e;
}

static kiln_entity spawn_pos_vel(float x, float y) {
    kiln_entity e = KILN_NULL_ENTITY;
    ASSERT_OK(kiln_spawn_with(F.w, (kiln_component[]){F.pos, F.vel},
                              (const void *[]){&(test_position){x, y}, &(test_velocity){y, x}},
                              2, &e));
    return e;
}

static kiln_entity spawn_owned(int32_t id) {
    test_owned v = test_owned_make(id);
    kiln_entity e = KILN_NULL_ENTITY;
    ASSERT_OK(kiln_spawn_with(F.w, &F.owned, (const void *[]){&v}, 1, &e));
    return e;
}

static kiln_query *make_query(kiln_query_desc desc) {
    kiln_query *q = NULL;
    ASSERT_OK(kiln_query_create(F.w, &desc, &q));
    return q;
}


static int64_t entity_slots(const kiln_world *w) {
    kiln_world_stats stats;
    kiln_world_stats_get(w, &stats);
    return stats.entity_slots;
}

/* ------------------------------------------------------------------------------------------ */
/* sections                                                                                   */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(section, .setup = setup, .teardown = teardown);

KILN_TEST(section, calls_in_a_section_are_queued_and_land_in_order_at_the_end) {
    kiln_entity a = spawn_pos(0, 0);
    kiln_entity b = spawn_pos_vel(0, 0);
    kiln_entity c = spawn_pos(0, 0);
    uint64_t digest = test_world_digest(F.w);

    kiln_defer_begin(F.w);
    ASSERT_OK(kiln_add(F.w, a, F.vel, &(test_velocity){1, 1}));
    ASSERT_OK(kiln_add(F.w, a, F.vel, &(test_velocity){2, 2}));      /* add, add */
    ASSERT_OK(kiln_set(F.w, a, F.pos, &(test_position){3, 3}));
    ASSERT_OK(kiln_set(F.w, a, F.pos, &(test_position){4, 4}));      /* set, set */
    ASSERT_OK(kiln_remove(F.w, b, F.vel, NULL));
    ASSERT_OK(kiln_add(F.w, b, F.vel, &(test_velocity){5, 5}));      /* remove, add */
    ASSERT_OK(kiln_set(F.w, b, F.pos, &(test_position){6, 6}));
    ASSERT_OK(kiln_remove(F.w, b, F.pos, NULL));                     /* set, remove */
    ASSERT_OK(kiln_despawn(F.w, c));
    kiln_entity e = KILN_NULL_ENTITY;
    ASSERT_OK(kiln_spawn(F.w, &e));
    ASSERT_OK(kiln_add(F.w, e, F.pos, &(test_position){7, 7}));
    ASSERT_OK(kiln_remove(F.w, e, F.pos, NULL));
    ASSERT_OK(kiln_add(F.w, e, F.vel, &(test_velocity){8, 8}));      /* spawn, add, remove, add */
    ck_assert_uint_eq(test_world_digest(F.w), digest);
    ck_assert_int_eq(kiln_entity_count(F.w), 3);
    ASSERT_OK(kiln_defer_end(F.w));

    test_assert_velocity(F.w, a, F.vel, 2, 2);
    test_assert_position(F.w, a, F.pos, 4, 4);
    test_assert_velocity(F.w, b, F.vel, 5, 5);
    ck_assert(!kiln_has(F.w, b, F.pos));
    ck_assert(!kiln_is_alive(F.w, c));
    ck_assert(kiln_is_alive(F.w, e));
    ck_assert(!kiln_has(F.w, e, F.pos));
    test_assert_velocity(F.w, e, F.vel, 8, 8);
    ck_assert_int_eq(kiln_entity_count(F.w), 3);
}

KILN_TEST(section, a_deferred_spawn_returns_a_real_handle_that_comes_alive_at_the_end) {
    kiln_entity before = spawn_pos(0, 0);
    kiln_defer_begin(F.w);
    kiln_entity e = KILN_NULL_ENTITY, f = KILN_NULL_ENTITY;
    ASSERT_OK(kiln_spawn(F.w, &e));
    ASSERT_OK(kiln_spawn_with(F.w, (kiln_component[]){F.vel, F.pos},
                              (const void *[]){&(test_velocity){3, 4}, &(test_position){5, 6}}, 2,
                              &f));
    ck_assert_uint_ne(e, KILN_NULL_ENTITY);
    ck_assert_uint_ne(f, KILN_NULL_ENTITY);
    ck_assert_uint_ne(e, f);
    ck_assert_uint_ne(e, before);
    ck_assert(!kiln_is_placeholder(e));
    ck_assert(!kiln_is_placeholder(f));
    ck_assert(!kiln_is_alive(F.w, e));
    ck_assert(!kiln_is_alive(F.w, f));
    ASSERT_OK(kiln_add(F.w, e, F.pos, &(test_position){1, 2}));
    ck_assert(!kiln_has(F.w, e, F.pos));
    ck_assert_ptr_null(kiln_get(F.w, f, F.pos));
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
    ck_assert_int_eq(kiln_world_entities(F.w, NULL, 0), 1);
    ASSERT_OK(kiln_defer_end(F.w));

    ck_assert(kiln_is_alive(F.w, e));
    ck_assert(kiln_is_alive(F.w, f));
    test_assert_position(F.w, e, F.pos, 1, 2);
    ck_assert(!kiln_has(F.w, e, F.vel));
    test_assert_position(F.w, f, F.pos, 5, 6);
    test_assert_velocity(F.w, f, F.vel, 3, 4);
    ck_assert_uint_eq(kiln_changed_tick(F.w, f, F.pos), kiln_tick_current(F.w));
    ck_assert_int_eq(kiln_entity_count(F.w), 3);
    kiln_entity list[3];
    ck_assert_int_eq(kiln_world_entities(F.w, list, 3), 3);
    ck_assert(test_contains(list, 3, e));
    ck_assert(test_contains(list, 3, f));
}

KILN_TEST(section, reads_in_a_section_answer_the_current_state) {
    kiln_entity a = spawn_pos(1, 1);
    kiln_entity b = spawn_pos_vel(2, 2);
    kiln_tick spawned = kiln_tick_current(F.w);
    kiln_query *q = make_query((kiln_query_desc){.with = {F.pos}});
    kiln_tick_advance(F.w);

    kiln_defer_begin(F.w);
    ASSERT_OK(kiln_set(F.w, a, F.pos, &(test_position){9, 9}));
    test_assert_position(F.w, a, F.pos, 1, 1);
    ck_assert_uint_eq(kiln_changed_tick(F.w, a, F.pos), spawned);
    ASSERT_OK(kiln_add(F.w, a, F.vel, &(test_velocity){3, 3}));
    ck_assert(!kiln_has(F.w, a, F.vel));
    ck_assert_ptr_null(kiln_get(F.w, a, F.vel));
    ck_assert_uint_eq(kiln_changed_tick(F.w, a, F.vel), 0);

    bool removed = false;
    ASSERT_OK(kiln_remove(F.w, b, F.vel, &removed));
    ck_assert(removed); /* it is there now */
    ck_assert(kiln_has(F.w, b, F.vel));
    removed = true;
    ASSERT_OK(kiln_remove(F.w, a, F.vel, &removed));
    ck_assert(!removed); /* the queued add has not landed */
    removed = true;
    ASSERT_OK(kiln_remove(F.w, a, F.owned, &removed));
    ck_assert(!removed);

    ASSERT_OK(kiln_despawn(F.w, b));
    ck_assert(kiln_is_alive(F.w, b));
    test_assert_position(F.w, b, F.pos, 2, 2);
    ck_assert_int_eq(kiln_entity_count(F.w), 2);
    ck_assert_int_eq(kiln_query_count(q), 2);
    test_position *p = kiln_get_mut(F.w, a, F.pos);
    ck_assert_ptr_nonnull(p);
    ck_assert(p->x == 1 && p->y == 1);
    ASSERT_OK(kiln_defer_end(F.w));

    test_assert_position(F.w, a, F.pos, 9, 9);
    ck_assert_uint_eq(kiln_changed_tick(F.w, a, F.pos), kiln_tick_current(F.w));
    ck_assert(!kiln_has(F.w, a, F.vel)); /* add, then remove */
    ck_assert(!kiln_is_alive(F.w, b));
    ck_assert_int_eq(kiln_query_count(q), 1);
    kiln_query_destroy(q);
}

KILN_TEST(section, nested_sections_apply_only_at_the_outermost_end) {
    kiln_entity a = spawn_pos(0, 0);
    kiln_entity e = KILN_NULL_ENTITY;
    ck_assert(!kiln_is_deferred(F.w));
    kiln_defer_begin(F.w);
    ASSERT_OK(kiln_spawn(F.w, &e));
    kiln_defer_begin(F.w);
    kiln_defer_begin(F.w);
    ASSERT_OK(kiln_add(F.w, a, F.vel, &(test_velocity){1, 1}));
    ASSERT_OK(kiln_defer_end(F.w));
    ck_assert(kiln_is_deferred(F.w));
    ck_assert(!kiln_has(F.w, a, F.vel));
    ASSERT_OK(kiln_despawn(F.w, a));
    ASSERT_OK(kiln_defer_end(F.w));
    ck_assert(kiln_is_deferred(F.w));
    ck_assert(kiln_is_alive(F.w, a));
    ck_assert(!kiln_has(F.w, a, F.vel));
    ck_assert(!kiln_is_alive(F.w, e));
    ASSERT_OK(kiln_defer_end(F.w));
    ck_assert(!kiln_is_deferred(F.w));
    ck_assert(!kiln_is_alive(F.w, a));
    ck_assert(kiln_is_alive(F.w, e));
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
}

KILN_TEST(section, a_dead_entity_or_unknown_component_fails_at_once_in_a_section) {
    kiln_entity a = spawn_pos(1, 1);
    kiln_entity d = spawn_pos(2, 2);
    ASSERT_OK(kiln_despawn(F.w, d));
    kiln_component unknown = (kiln_component)kiln_component_count(F.w) + 1;
    uint64_t digest = test_world_digest(F.w);
    int64_t slots = entity_slots(F.w);
    char buf[32];
    test_entity_string(d, buf);

    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_add(F.w, d, F.pos, &(test_position){9, 9}), KILN_ERR_DEAD_ENTITY);
    test_assert_names(kiln_world_error(F.w), "add");
    test_assert_names(kiln_world_error(F.w), buf);
    ck_assert_int_eq(kiln_set(F.w, d, F.pos, &(test_position){9, 9}), KILN_ERR_DEAD_ENTITY);
    test_assert_names(kiln_world_error(F.w), "set");
    ck_assert_int_eq(kiln_remove(F.w, d, F.pos, NULL), KILN_ERR_DEAD_ENTITY);
    test_assert_names(kiln_world_error(F.w), "remove");
    ck_assert_int_eq(kiln_despawn(F.w, d), KILN_ERR_DEAD_ENTITY);
    test_assert_names(kiln_world_error(F.w), "despawn");
    ck_assert_int_eq(kiln_add(F.w, KILN_NULL_ENTITY, F.pos, NULL), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(kiln_add(F.w, a, unknown, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_int_eq(kiln_set(F.w, a, unknown, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_int_eq(kiln_remove(F.w, a, unknown, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    kiln_entity e = (kiln_entity)12345;
    ck_assert_int_eq(kiln_spawn_with(F.w, &unknown, NULL, 1, &e), KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_uint_eq(e, (kiln_entity)12345);
    kiln_entity batch[3] = {0, 0, 0};
    ck_assert_int_eq(kiln_spawn_batch(F.w, (kiln_component[]){F.pos, unknown}, 2, 3, batch),
                     KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_int_ne(kiln_spawn_with(F.w, (kiln_component[]){F.pos, F.pos}, NULL, 2, &e),
                     KILN_OK); /* a duplicate */
    ck_assert_uint_eq(e, (kiln_entity)12345);
    ck_assert_uint_eq(test_world_digest(F.w), digest);
    ASSERT_OK(kiln_defer_end(F.w));

    ck_assert_uint_eq(test_world_digest(F.w), digest);
    ck_assert_int_eq(entity_slots(F.w), slots);
    /* nothing was reserved: the next spawn takes the dead slot with the next generation */
    kiln_entity next = KILN_NULL_ENTITY;
    ASSERT_OK(kiln_spawn(F.w, &next));
    ck_assert_uint_eq(kiln_entity_index(next), kiln_entity_index(d));
    ck_assert_uint_eq(kiln_entity_generation(next), kiln_entity_generation(d) + 1);
}

KILN_TEST(section, a_queued_add_to_an_entity_despawned_earlier_in_the_section_is_dropped) {
    kiln_entity a = spawn_owned(1);
    kiln_entity keep = spawn_pos(0, 0);
    test_owned v2 = test_owned_make(2), v3 = test_owned_make(3);

    kiln_defer_begin(F.w);
    ASSERT_OK(kiln_despawn(F.w, a));
    ASSERT_OK(kiln_add(F.w, a, F.owned, &v2)); /* the world takes v2 over */
    ASSERT_OK(kiln_set(F.w, a, F.owned, &v3));
    ASSERT_OK(kiln_add(F.w, a, F.pos, &(test_position){1, 1}));
    ASSERT_OK(kiln_remove(F.w, a, F.owned, NULL));
    ASSERT_OK(kiln_despawn(F.w, a));
    ASSERT_OK(kiln_add(F.w, keep, F.vel, &(test_velocity){4, 4})); /* after the dropped ones */
    ck_assert_int_eq(F.log.destroyed, 0);
    ASSERT_OK(kiln_defer_end(F.w));

    ck_assert(!kiln_is_alive(F.w, a));
    ck_assert_int_eq(test_hook_log_count(&F.log, 1), 1); /* by the despawn */
    ck_assert_int_eq(test_hook_log_count(&F.log, 2), 1); /* dropped */
    ck_assert_int_eq(test_hook_log_count(&F.log, 3), 1); /* dropped */
    ck_assert_int_eq(F.log.destroyed, 3);
    test_assert_velocity(F.w, keep, F.vel, 4, 4);
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
    kiln_world_destroy(F.w);
    F.w = NULL;
    ck_assert_int_eq(F.log.destroyed, 3);
}

KILN_TEST(section, a_deferred_spawn_can_be_despawned_in_the_same_section) {
    kiln_defer_begin(F.w);
    kiln_entity e = KILN_NULL_ENTITY;
    test_owned v = test_owned_make(1);
    ASSERT_OK(kiln_spawn_with(F.w, &F.owned, (const void *[]){&v}, 1, &e));
    ASSERT_OK(kiln_add(F.w, e, F.pos, NULL));
    ASSERT_OK(kiln_despawn(F.w, e));
    ASSERT_OK(kiln_add(F.w, e, F.vel, NULL)); /* still reserved now; dropped when applied */
    ASSERT_OK(kiln_defer_end(F.w));
    ck_assert(!kiln_is_alive(F.w, e));
    ck_assert_int_eq(kiln_entity_count(F.w), 0);
    ck_assert_int_eq(test_hook_log_count(&F.log, 1), 1);
    ck_assert_int_eq(F.log.destroyed, 1);
}

KILN_TEST(section, values_passed_in_a_section_are_copied_when_the_call_is_made) {
    kiln_entity a = spawn_pos(0, 0);
    kiln_entity e = KILN_NULL_ENTITY;
    test_position p = {1, 2};
    test_velocity v = {3, 4};
    kiln_defer_begin(F.w);
    ASSERT_OK(kiln_set(F.w, a, F.pos, &p));
    ASSERT_OK(kiln_add(F.w, a, F.vel, &v));
    ASSERT_OK(kiln_spawn_with(F.w, &F.pos, (const void *[]){&p}, 1, &e));
    p = (test_position){-1, -1};
    v = (test_velocity){-1, -1};
    ASSERT_OK(kiln_defer_end(F.w));
    test_assert_position(F.w, a, F.pos, 1, 2);
    test_assert_velocity(F.w, a, F.vel, 3, 4);
    test_assert_position(F.w, e, F.pos, 1, 2);
}

KILN_TEST(section, spawn_batch_in_a_section_reserves_handles_that_come_alive_zeroed_at_the_end) {
    kiln_entity e[5];
    kiln_defer_begin(F.w);
    ASSERT_OK(kiln_spawn_batch(F.w, (kiln_component[]){F.pos, F.vel}, 2, 5, e));
    ASSERT_OK(kiln_spawn_batch(F.w, &F.pos, 1, 3, NULL));
    for (int i = 0; i < 5; i++) {
        ck_assert_uint_ne(e[i], KILN_NULL_ENTITY);
        ck_assert(!kiln_is_placeholder(e[i]));
        ck_assert(!kiln_is_alive(F.w, e[i]));
        for (int j = 0; j < i; j++) ck_assert_uint_ne(e[i], e[j]);
    }
    ASSERT_OK(kiln_set(F.w, e[1], F.pos, &(test_position){3, 4}));
    ck_assert_int_eq(kiln_entity_count(F.w), 0);
    ASSERT_OK(kiln_defer_end(F.w));

    ck_assert_int_eq(kiln_entity_count(F.w), 8);
    for (int i = 0; i < 5; i++) {
        ck_assert(kiln_is_alive(F.w, e[i]));
        if (i == 1) test_assert_position(F.w, e[i], F.pos, 3, 4);
        else test_assert_position(F.w, e[i], F.pos, 0, 0);
        test_assert_velocity(F.w, e[i], F.vel, 0, 0);
        ck_assert_uint_eq(kiln_changed_tick(F.w, e[i], F.vel), kiln_tick_current(F.w));
    }
    kiln_query *q = make_query((kiln_query_desc){.with = {F.pos}, .without = {F.vel}});
    ck_assert_int_eq(kiln_query_count(q), 3);
    kiln_query_destroy(q);
}

/* ------------------------------------------------------------------------------------------ */
/* query loops                                                                                */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(loops, .setup = setup, .teardown = teardown);

KILN_TEST(loops, is_deferred_is_true_inside_a_section_or_a_query_loop) {
    spawn_pos(0, 0);
    kiln_query *q = make_query((kiln_query_desc){.with = {F.pos}});
    kiln_iter it;
    ck_assert(!kiln_is_deferred(F.w));
    kiln_defer_begin(F.w);
    ck_assert(kiln_is_deferred(F.w));
    ASSERT_OK(kiln_defer_end(F.w));
    ck_assert(!kiln_is_deferred(F.w));

    int chunks = 0;
    kiln_query_iter(q, &it);
    ck_assert(kiln_is_deferred(F.w));
    while (kiln_query_next(&it)) {
        chunks++;
        ck_assert(kiln_is_deferred(F.w));
    }
    ck_assert_int_eq(chunks, 1);
    ck_assert(!kiln_is_deferred(F.w));

    kiln_query_iter(q, &it); /* stopped early */
    ck_assert(kiln_query_next(&it));
    kiln_iter_fini(&it);
    ck_assert(!kiln_is_deferred(F.w));

    kiln_defer_begin(F.w); /* a loop inside a section leaves the section deferred */
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) ck_assert(kiln_is_deferred(F.w));
    ck_assert(kiln_is_deferred(F.w));
    ASSERT_OK(kiln_defer_end(F.w));
    ck_assert(!kiln_is_deferred(F.w));
    kiln_query_destroy(q);
}

#define LOOP_ENTITIES 24

/* Entities with Position in two archetypes (half with Velocity too), so loops see two chunks. */
static void spawn_loop_entities(kiln_entity *dest) {
    for (int i = 0; i < LOOP_ENTITIES; i++)
        dest[i] = i % 2 ? spawn_pos_vel((float)i, 0) : spawn_pos((float)i, 0);
}

KILN_TEST(loops, despawning_every_entity_a_query_finds_lands_after_the_loop) {
    kiln_entity spawned[LOOP_ENTITIES], seen[LOOP_ENTITIES];
    spawn_loop_entities(spawned);
    kiln_query *q = make_query((kiln_query_desc){.with = {F.pos}});
    int64_t n = 0;
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it)) {
        for (int32_t row = 0; row < it.count; row++) {
            kiln_entity e = it.entities[row];
            ASSERT_OK(kiln_despawn(F.w, e));
            ck_assert(kiln_is_alive(F.w, e));
            ck_assert_int_eq(kiln_entity_count(F.w), LOOP_ENTITIES);
            ck_assert_int_eq(kiln_query_count(q), LOOP_ENTITIES);
            ck_assert(!test_contains(seen, n, e));
            ck_assert_int_lt(n, LOOP_ENTITIES);
            seen[n++] = e;
        }
    }
    ck_assert_int_eq(n, LOOP_ENTITIES);
    ck_assert_int_eq(kiln_entity_count(F.w), 0);
    ck_assert_int_eq(kiln_query_count(q), 0);
    for (int i = 0; i < LOOP_ENTITIES; i++) ck_assert(!kiln_is_alive(F.w, spawned[i]));
    kiln_query_destroy(q);
}

KILN_TEST(loops, adding_components_in_a_loop_moves_entities_after_the_loop) {
    kiln_entity spawned[LOOP_ENTITIES];
    spawn_loop_entities(spawned);
    kiln_query *all = make_query((kiln_query_desc){.with = {F.pos}});
    kiln_query *without = make_query((kiln_query_desc){.with = {F.pos}, .without = {F.owned}});
    kiln_query *with = make_query((kiln_query_desc){.with = {F.pos, F.owned}});
    int64_t n = 0;
    kiln_iter it;
    kiln_query_iter(without, &it);
    while (kiln_query_next(&it)) {
        const test_position *p = kiln_iter_column(&it, 0);
        for (int32_t row = 0; row < it.count; row++, n++) {
            kiln_entity e = it.entities[row];
            ASSERT_OK(kiln_add(F.w, e, F.owned, NULL));
            ASSERT_OK(kiln_add(F.w, e, F.vel, &(test_velocity){p[row].x, -p[row].x}));
            ck_assert(!kiln_has(F.w, e, F.owned));
            ck_assert_int_eq(kiln_query_count(with), 0);
        }
    }
    ck_assert_int_eq(n, LOOP_ENTITIES); /* each visited once, none twice after moving */
    ck_assert_int_eq(kiln_query_count(with), LOOP_ENTITIES);
    ck_assert_int_eq(kiln_query_count(without), 0);
    ck_assert_int_eq(kiln_query_count(all), LOOP_ENTITIES);
    for (int i = 0; i < LOOP_ENTITIES; i++) {
        ck_assert(kiln_has(F.w, spawned[i], F.owned));
        test_assert_position(F.w, spawned[i], F.pos, (float)i, 0);
        test_assert_velocity(F.w, spawned[i], F.vel, (float)i, (float)-i);
    }
    kiln_query_destroy(all);
    kiln_query_destroy(without);
    kiln_query_destroy(with);
}

KILN_TEST(loops, stopping_a_loop_early_lands_its_changes) {
    kiln_entity spawned[LOOP_ENTITIES];
    spawn_loop_entities(spawned);
    kiln_query *q = make_query((kiln_query_desc){.with = {F.pos}});
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    kiln_entity first = it.entities[0];
    ASSERT_OK(kiln_despawn(F.w, first));
    ck_assert(kiln_is_alive(F.w, first));
    kiln_iter_fini(&it);
    ck_assert(!kiln_is_alive(F.w, first));
    ck_assert_int_eq(kiln_entity_count(F.w), LOOP_ENTITIES - 1);
    kiln_iter_fini(&it); /* finishing again changes nothing */
    ck_assert_int_eq(kiln_entity_count(F.w), LOOP_ENTITIES - 1);
    kiln_query_destroy(q);
}

KILN_TEST(loops, a_loop_inside_a_section_lands_at_the_section_end) {
    kiln_entity spawned[LOOP_ENTITIES];
    spawn_loop_entities(spawned);
    kiln_query *q = make_query((kiln_query_desc){.with = {F.pos}});
    kiln_defer_begin(F.w);
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it))
        for (int32_t row = 0; row < it.count; row++) ASSERT_OK(kiln_despawn(F.w, it.entities[row]));
    ck_assert_int_eq(kiln_entity_count(F.w), LOOP_ENTITIES);
    ASSERT_OK(kiln_defer_end(F.w));
    ck_assert_int_eq(kiln_entity_count(F.w), 0);
    kiln_query_destroy(q);
}

KILN_TEST(loops, nested_loops_land_when_the_outermost_loop_ends) {
    kiln_entity spawned[LOOP_ENTITIES];
    spawn_loop_entities(spawned);
    kiln_query *outer_q = make_query((kiln_query_desc){.with = {F.pos}, .without = {F.vel}});
    kiln_query *inner_q = make_query((kiln_query_desc){.with = {F.vel}});
    kiln_iter outer, inner;
    int64_t visited = 0;
    kiln_query_iter(outer_q, &outer);
    while (kiln_query_next(&outer)) {
        kiln_query_iter(inner_q, &inner);
        while (kiln_query_next(&inner)) {
            for (int32_t row = 0; row < inner.count; row++, visited++)
                ASSERT_OK(kiln_despawn(F.w, inner.entities[row]));
        }
        ck_assert(kiln_is_deferred(F.w));
        ck_assert_int_eq(kiln_entity_count(F.w), LOOP_ENTITIES);
    }
    ck_assert_int_eq(visited, LOOP_ENTITIES / 2);
    ck_assert_int_eq(kiln_entity_count(F.w), LOOP_ENTITIES / 2);
    ck_assert_int_eq(kiln_query_count(inner_q), 0);
    kiln_query_destroy(outer_q);
    kiln_query_destroy(inner_q);
}

/* ------------------------------------------------------------------------------------------ */
/* out of memory                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* A fresh world on a with Position and Velocity and one live entity (so entity slots exist
 * and the deferred path is the only thing left to allocate). */
static kiln_world *oom_world(test_allocator *a, kiln_component *pos, kiln_component *vel,
                             kiln_entity *live) {
    test_allocator_init(a);
    kiln_world *w = test_world_create(a);
    *pos = test_register_position(w);
    *vel = test_register_velocity(w);
    ASSERT_OK_IN(w, kiln_spawn_with(w, pos, NULL, 1, live));
    return w;
}

static void oom_world_destroy(test_allocator *a, kiln_world *w) {
    kiln_world_destroy(w);
    ck_assert_int_eq(a->live_bytes, 0);
    ck_assert_int_eq(a->bad_osize, 0);
}

KILN_TEST_GROUP(out_of_memory);

typedef struct wide_value { double v[4]; } wide_value; /* past the 16 bytes a command holds */

/* _i == 0: the next slot is a fresh one; _i == 1: it is a dead slot on the free list. The
 * Wide value is too wide to be held in its command, so the queue needs value storage. */
KILN_TEST_LOOP(out_of_memory, out_of_memory_in_a_deferred_spawn_reserves_nothing, 0, 2) {
    int64_t failures = 0;
    for (int64_t n = 0;; n++) {
        ck_assert_int_lt(n, 64);
        test_allocator a;
        kiln_component pos, vel, wide;
        kiln_entity live;
        kiln_world *w = oom_world(&a, &pos, &vel, &live);
        ASSERT_OK_IN(w, kiln_component_register(w, &(kiln_component_desc){.name = "Wide",
                                                    .size = sizeof(wide_value)}, &wide));
        uint32_t expected_index = 1;
        if (_i == 1) {
            kiln_entity gone;
            ASSERT_OK_IN(w, kiln_spawn(w, &gone));
            ASSERT_OK_IN(w, kiln_despawn(w, gone));
            expected_index = kiln_entity_index(gone);
        }

        kiln_defer_begin(w);
        kiln_entity e = (kiln_entity)777;
        test_allocator_fail_after(&a, n);
        kiln_result r = kiln_spawn_with(w, (kiln_component[]){pos, wide},
                                        (const void *[]){&(test_position){1, 2},
                                                         &(wide_value){{3, 4}}},
                                        2, &e);
        test_allocator_fail_never(&a);
        if (r == KILN_OK) {
            ASSERT_OK_IN(w, kiln_defer_end(w));
            ck_assert(kiln_is_alive(w, e));
            test_assert_position(w, e, pos, 1, 2);
            ck_assert(((const wide_value *)kiln_get(w, e, wide))->v[1] == 4);
            oom_world_destroy(&a, w);
            break;
        }
        failures++;
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        ck_assert_uint_eq(e, (kiln_entity)777);
        ck_assert_str_ne(kiln_world_error(w), "");
        ck_assert_int_eq(kiln_entity_count(w), 1);
        ASSERT_OK_IN(w, kiln_defer_end(w));
        ck_assert_int_eq(kiln_entity_count(w), 1);
        ck_assert_int_eq(kiln_world_entities(w, NULL, 0), 1);
        kiln_entity next;
        ASSERT_OK_IN(w, kiln_spawn(w, &next));
        ck_assert_uint_eq(kiln_entity_index(next), expected_index);
        ck_assert(!kiln_has(w, next, pos)); /* nothing of the failed spawn landed on it */
        ck_assert_int_eq(kiln_entity_count(w), 2);
        oom_world_destroy(&a, w);
    }
    ck_assert_int_ge(failures, 2); /* the queue's command array and its value storage */
}

KILN_TEST(out_of_memory, out_of_memory_in_a_deferred_add_queues_nothing) {
    int64_t failures = 0;
    for (int64_t n = 0;; n++) {
        ck_assert_int_lt(n, 64);
        test_allocator a;
        kiln_component pos, vel;
        kiln_entity live;
        kiln_world *w = oom_world(&a, &pos, &vel, &live);
        kiln_defer_begin(w);
        test_allocator_fail_after(&a, n);
        kiln_result r = kiln_add(w, live, vel, &(test_velocity){1, 1});
        test_allocator_fail_never(&a);
        if (r == KILN_OK) {
            ASSERT_OK_IN(w, kiln_defer_end(w));
            test_assert_velocity(w, live, vel, 1, 1);
            oom_world_destroy(&a, w);
            break;
        }
        failures++;
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        ck_assert_str_ne(kiln_world_error(w), "");
        ASSERT_OK_IN(w, kiln_defer_end(w));
        ck_assert(!kiln_has(w, live, vel));
        ck_assert_int_eq(kiln_entity_count(w), 1);
        oom_world_destroy(&a, w);
    }
    ck_assert_int_ge(failures, 1);
}

#define OOM_BATCH 40

/* _i == 0: with dest; _i == 1: dest NULL. Every slot the failed batch took must be free
 * again: a batch of the same size spawned afterwards fits in the slots a world that never
 * saw the failure would use. */
KILN_TEST_LOOP(out_of_memory, out_of_memory_in_a_deferred_spawn_batch_reserves_nothing, 0, 2) {
    int64_t failures = 0;
    for (int64_t n = 0;; n++) {
        ck_assert_int_lt(n, 64);
        test_allocator a;
        kiln_component pos, vel;
        kiln_entity live;
        kiln_world *w = oom_world(&a, &pos, &vel, &live);
        kiln_entity out[OOM_BATCH];
        kiln_defer_begin(w);
        test_allocator_fail_after(&a, n);
        kiln_result r = kiln_spawn_batch(w, &pos, 1, OOM_BATCH, _i == 0 ? out : NULL);
        test_allocator_fail_never(&a);
        if (r == KILN_OK) {
            ASSERT_OK_IN(w, kiln_defer_end(w));
            ck_assert_int_eq(kiln_entity_count(w), 1 + OOM_BATCH);
            oom_world_destroy(&a, w);
            break;
        }
        failures++;
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        ASSERT_OK_IN(w, kiln_defer_end(w));
        ck_assert_int_eq(kiln_entity_count(w), 1);

        kiln_entity again[OOM_BATCH];
        ASSERT_OK_IN(w, kiln_spawn_batch(w, &pos, 1, OOM_BATCH, again));
        for (int i = 0; i < OOM_BATCH; i++) {
            uint32_t index = kiln_entity_index(again[i]);
            ck_assert_msg(index >= 1 && index <= OOM_BATCH,
                          "failure after %lld allocations: slot %u was never given back",
                          (long long)n, (unsigned)index);
        }
        ck_assert_int_eq(kiln_entity_count(w), 1 + OOM_BATCH);
        oom_world_destroy(&a, w);
    }
    ck_assert_int_ge(failures, 2);
}

KILN_TEST(out_of_memory, out_of_memory_at_the_end_of_a_section_keeps_the_rest_queued_for_the_next_end) {
    int64_t failures = 0;
    for (int64_t n = 0;; n++) {
        ck_assert_int_lt(n, 64);
        test_allocator a;
        kiln_component pos, vel;
        kiln_entity live;
        kiln_world *w = oom_world(&a, &pos, &vel, &live);
        kiln_entity e;
        kiln_defer_begin(w);
        ASSERT_OK_IN(w, kiln_spawn_with(w, &vel, (const void *[]){&(test_velocity){1, 2}}, 1, &e));
        ASSERT_OK_IN(w, kiln_add(w, live, vel, &(test_velocity){3, 4}));
        ASSERT_OK_IN(w, kiln_set(w, live, pos, &(test_position){5, 6}));
        test_allocator_fail_after(&a, n);
        kiln_result r = kiln_defer_end(w);
        test_allocator_fail_never(&a);
        ck_assert(!kiln_is_deferred(w));
        if (r != KILN_OK) {
            failures++;
            ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
            ck_assert_str_ne(kiln_world_error(w), "");
            kiln_defer_begin(w); /* the next outermost end retries */
            ASSERT_OK_IN(w, kiln_defer_end(w));
        }
        /* everything landed exactly once */
        ck_assert_int_eq(kiln_entity_count(w), 2);
        ck_assert(kiln_is_alive(w, e));
        test_assert_velocity(w, e, vel, 1, 2);
        test_assert_velocity(w, live, vel, 3, 4);
        test_assert_position(w, live, pos, 5, 6);
        oom_world_destroy(&a, w);
        if (r == KILN_OK) break;
    }
    ck_assert_int_ge(failures, 1);
}

/* kiln_iter_fini dropped the loop end's result: a loop whose changes could not all land ended with no
 * word. It returns the failure (also after kiln_query_next ended the loop), the rest queued for the
 * next end. _i == 0: the loop runs to its end; _i == 1: kiln_iter_fini ends it early. */
KILN_TEST_LOOP(out_of_memory, out_of_memory_at_the_end_of_a_loop_is_returned_and_keeps_the_rest_queued, 0, 2) {
    int64_t failures = 0;
    for (int64_t n = 0;; n++) {
        ck_assert_int_lt(n, 64);
        test_allocator a;
        kiln_component pos, vel; kiln_entity live, spawned[4];
        kiln_world *w = oom_world(&a, &pos, &vel, &live);
        for (int i = 0; i < 3; i++) ASSERT_OK_IN(w, kiln_spawn_with(w, &pos, NULL, 1, &spawned[i]));
        kiln_query *q;
        ASSERT_OK_IN(w, kiln_query_create(w, &(kiln_query_desc){.with = {pos}, .without = {vel}}, &q));
        kiln_iter it; kiln_query_iter(q, &it);
        int made = 0;
        while (kiln_query_next(&it)) {
            for (int32_t row = 0; row < it.count; row++) {
                ASSERT_OK_IN(w, kiln_spawn_with(w, &vel, (const void *[]){&(test_velocity){1, 2}}, 1, &spawned[made++ % 4]));
                ASSERT_OK_IN(w, kiln_add(w, it.entities[row], vel, &(test_velocity){3, 4}));
            }
            test_allocator_fail_after(&a, n); /* the one chunk: the next call ends the loop */
            if (_i == 1) break;
        }
        kiln_result r = kiln_iter_fini(&it);
        test_allocator_fail_never(&a);
        ck_assert_int_eq(made, 4);
        ck_assert(!kiln_is_deferred(w));
        ck_assert_int_eq(kiln_iter_fini(&it), r); /* asked again, the same answer */
        if (r != KILN_OK) {
            failures++;
            ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
            ck_assert_ptr_nonnull(strstr(kiln_world_error(w), _i == 0 ? "kiln_query_next" : "kiln_iter_fini"));
            ck_assert_int_lt(kiln_entity_count(w), 8);
            kiln_defer_begin(w); /* the next outermost end lands the rest */
            ASSERT_OK_IN(w, kiln_defer_end(w));
        }
        ck_assert_int_eq(kiln_entity_count(w), 8);
        ck_assert_int_eq(kiln_query_count(q), 0); /* every one of the loop's rows got Velocity */
        kiln_query_destroy(q);
        oom_world_destroy(&a, w);
        if (r == KILN_OK) break;
    }
    ck_assert_int_ge(failures, 1);
}

KILN_TEST(out_of_memory, values_left_queued_by_a_failed_end_are_destroyed_once_with_the_world) {
    test_hook_log log;
    memset(&log, 0, sizeof log);
    test_allocator a;
    kiln_component pos, vel;
    kiln_entity live;
    kiln_world *w = oom_world(&a, &pos, &vel, &live);
    kiln_component owned = test_register_owned(w, &log);
    test_owned v1 = test_owned_make(1), v2 = test_owned_make(2);
    kiln_entity e;
    kiln_defer_begin(w);
    ASSERT_OK_IN(w, kiln_spawn_with(w, &owned, (const void *[]){&v1}, 1, &e));
    ASSERT_OK_IN(w, kiln_add(w, live, owned, &v2));
    test_allocator_fail_after(&a, 0);
    ck_assert_int_eq(kiln_defer_end(w), KILN_ERR_OUT_OF_MEMORY);
    test_allocator_fail_never(&a);
    ck_assert(!kiln_is_alive(w, e));
    ck_assert_int_eq(log.destroyed, 0);
    oom_world_destroy(&a, w);
    ck_assert_int_eq(test_hook_log_count(&log, 1), 1);
    ck_assert_int_eq(test_hook_log_count(&log, 2), 1);
    ck_assert_int_eq(log.destroyed, 2);
    ck_assert_int_eq(log.bad_payload, 0);
}

/* kiln_defer_clear: what a failed end left is dropped, not landed later (a refused mod load). */
KILN_TEST(out_of_memory, a_queue_a_failed_end_left_is_cleared_values_destroyed_and_spawns_let_go) {
    test_hook_log log = {0};
    test_allocator a;
    kiln_component pos, vel; kiln_entity live, e;
    kiln_world *w = oom_world(&a, &pos, &vel, &live);
    kiln_component owned = test_register_owned(w, &log);
    test_owned v = test_owned_make(1);
    kiln_defer_begin(w);
    ASSERT_OK_IN(w, kiln_spawn(w, &e));
    ASSERT_OK_IN(w, kiln_add(w, live, owned, &v));
    test_allocator_fail_after(&a, 0);
    ck_assert_int_eq(kiln_defer_end(w), KILN_ERR_OUT_OF_MEMORY);
    test_allocator_fail_never(&a);
    kiln_defer_clear(w);
    ck_assert_int_eq(test_hook_log_count(&log, 1), 1); /* destroyed by the clear */
    kiln_defer_begin(w); ASSERT_OK_IN(w, kiln_defer_end(w)); /* nothing left to land */
    ck_assert(!kiln_is_alive(w, e) && !kiln_has(w, live, owned) && kiln_entity_count(w) == 1);
    oom_world_destroy(&a, w);
}

/* ------------------------------------------------------------------------------------------ */
