/* test_access.c: Check suite for component access: add, remove, has, get, get_mut, set, spawn_with,
 * spawn_batch, change ticks and lifecycle hooks. Each value is destroyed exactly once. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

static kiln_entity spawn_one(kiln_world *world) {
    kiln_entity e = KILN_NULL_ENTITY;
    ck_assert_int_eq(kiln_spawn(world, &e), KILN_OK);
    return e;
}

static kiln_entity spawn_at(kiln_world *world, kiln_component pos, float x, float y) {
    kiln_entity e = spawn_one(world);
    ck_assert_int_eq(kiln_add(world, e, pos, &(test_position){x, y}), KILN_OK);
    return e;
}

static test_position position_of(kiln_world *world, kiln_entity e, kiln_component pos) {
    const test_position *p = kiln_get(world, e, pos);
    ck_assert_ptr_nonnull(p);
    return *p;
}

static int32_t archetype_count(kiln_world *world) {
    kiln_world_stats stats;
    kiln_world_stats_get(world, &stats);
    return stats.archetypes;
}

static void assert_message_names(kiln_world *world, const char *call, kiln_entity e,
                                 const char *component) {
    char name[32];
    const char *msg = kiln_world_error(world);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "kiln_%s: ", call); /* the exact public function, once */
    ck_assert_msg(strncmp(msg, prefix, strlen(prefix)) == 0,
                  "message \"%s\" does not start with \"%s\"", msg, prefix);
    if (e != KILN_NULL_ENTITY)
        ck_assert_msg(strstr(msg, test_entity_string(e, name)) != NULL,
                      "message \"%s\" does not name entity %s", msg, name);
    if (component != NULL)
        ck_assert_msg(strstr(msg, component) != NULL, "message \"%s\" does not name %s", msg,
                      component);
}

/* ------------------------------------------------------------------------------------------ */
/* snapshots: failures leave the world unchanged                                              */
/* ------------------------------------------------------------------------------------------ */

#define SNAP_MAX 8

typedef struct snapshot {
    int64_t count;
    kiln_world_stats stats;
    bool alive[SNAP_MAX];
    bool has[SNAP_MAX][SNAP_MAX];
    kiln_tick tick[SNAP_MAX][SNAP_MAX];
    unsigned char value[SNAP_MAX][SNAP_MAX][16];
} snapshot;

static void take_snapshot(kiln_world *w, const kiln_entity *e, int ne, const kiln_component *c,
                          int nc, snapshot *dest) {
    memset(dest, 0, sizeof *dest);
    dest->count = kiln_entity_count(w);
    kiln_world_stats_get(w, &dest->stats);
    for (int i = 0; i < ne; i++) {
        dest->alive[i] = kiln_is_alive(w, e[i]);
        for (int j = 0; j < nc; j++) {
            dest->has[i][j] = kiln_has(w, e[i], c[j]);
            dest->tick[i][j] = kiln_changed_tick(w, e[i], c[j]);
            const void *v = kiln_get(w, e[i], c[j]);
            kiln_component_info info;
            if (v != NULL && kiln_component_info_get(w, c[j], &info))
                memcpy(dest->value[i][j], v, info.size < 16 ? info.size : 16);
        }
    }
}

static void assert_unchanged(kiln_world *w, const kiln_entity *e, int ne, const kiln_component *c,
                             int nc, const snapshot *before) {
    snapshot now;
    take_snapshot(w, e, ne, c, nc, &now);
    ck_assert_int_eq(now.count, before->count);
    ck_assert_int_eq(now.stats.entities, before->stats.entities);
    ck_assert_int_eq(now.stats.entity_slots, before->stats.entity_slots);
    ck_assert_int_eq(now.stats.archetypes, before->stats.archetypes);
    ck_assert_int_eq(now.stats.components, before->stats.components);
    for (int i = 0; i < ne; i++) {
        ck_assert_int_eq(now.alive[i], before->alive[i]);
        for (int j = 0; j < nc; j++) {
            ck_assert_msg(now.has[i][j] == before->has[i][j], "entity %d component %d presence",
                          i, j);
            ck_assert_msg(now.tick[i][j] == before->tick[i][j], "entity %d component %d tick", i,
                          j);
            ck_assert_msg(memcmp(now.value[i][j], before->value[i][j], 16) == 0,
                          "entity %d component %d value", i, j);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* add                                                                                        */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(add);

KILN_TEST(add, add_stores_a_copy_of_the_value) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity e = spawn_one(w);
    test_position p = {1.5f, -2.0f};
    ck_assert_int_eq(kiln_add(w, e, pos, &p), KILN_OK);
    p.x = 99.0f;
    ck_assert(kiln_has(w, e, pos));
    ck_assert(!kiln_has(w, e, vel));
    test_position got = position_of(w, e, pos);
    ck_assert_float_eq(got.x, 1.5f);
    ck_assert_float_eq(got.y, -2.0f);
    ck_assert_ptr_null(kiln_get(w, e, vel));
    kiln_world_destroy(w);
}

KILN_TEST(add, add_with_null_value_zero_initialises) {
    test_allocator a;
    test_allocator_init(&a); /* fills fresh memory with garbage */
    kiln_world *w = test_world_create(&a);
    test_hook_log log = {0};
    kiln_component pos = test_register_position(w);
    kiln_component owned = test_register_owned(w, &log);
    kiln_component big;
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = "Big", .size = 40},
                                             &big),
                     KILN_OK);
    kiln_entity dirty[20];
    for (int i = 0; i < 20; i++) dirty[i] = spawn_at(w, pos, 7.0f, 7.0f);
    for (int i = 0; i < 20; i += 2) ck_assert_int_eq(kiln_despawn(w, dirty[i]), KILN_OK);
    static const unsigned char zero[40];
    for (int i = 0; i < 30; i++) {
        kiln_entity e = spawn_one(w);
        ck_assert_int_eq(kiln_add(w, e, pos, NULL), KILN_OK);
        ck_assert_int_eq(kiln_add(w, e, owned, NULL), KILN_OK);
        ck_assert_int_eq(kiln_add(w, e, big, NULL), KILN_OK);
        ck_assert_mem_eq(kiln_get(w, e, pos), zero, sizeof(test_position));
        ck_assert_mem_eq(kiln_get(w, e, owned), zero, sizeof(test_owned));
        ck_assert_mem_eq(kiln_get(w, e, big), zero, 40);
    }
    kiln_world_destroy(w);
    ck_assert_int_eq(log.destroyed, 30);
    ck_assert_int_eq(test_hook_log_count(&log, 0), 30);
}

KILN_TEST(add, add_of_a_new_component_keeps_the_other_values) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log = {0};
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_component owned = test_register_owned(w, &log);
    kiln_component tag = test_register_tag(w, "Frozen");
    kiln_entity e = spawn_at(w, pos, 3.0f, 4.0f);
    test_owned o = test_owned_make(11);
    ck_assert_int_eq(kiln_add(w, e, owned, &o), KILN_OK);
    ck_assert_int_eq(kiln_add(w, e, vel, &(test_velocity){5.0f, 6.0f}), KILN_OK);
    ck_assert_int_eq(kiln_add(w, e, tag, NULL), KILN_OK);
    test_position p = position_of(w, e, pos);
    ck_assert_float_eq(p.x, 3.0f);
    ck_assert_float_eq(p.y, 4.0f);
    const test_velocity *v = kiln_get(w, e, vel);
    ck_assert_ptr_nonnull(v);
    ck_assert_float_eq(v->x, 5.0f);
    const test_owned *got = kiln_get(w, e, owned);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(got->id, 11);
    ck_assert_ptr_eq(got->payload, o.payload);
    ck_assert_int_eq(log.destroyed, 0);
    ck_assert(kiln_has(w, e, tag));
    kiln_world_destroy(w);
    ck_assert_int_eq(test_hook_log_count(&log, 11), 1);
}

KILN_TEST(add, add_of_a_present_component_replaces_it_in_place) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity other = spawn_at(w, pos, 0.0f, 0.0f);
    ck_assert_int_eq(kiln_add(w, other, vel, NULL), KILN_OK);
    kiln_entity e = spawn_at(w, pos, 1.0f, 1.0f);
    ck_assert_int_eq(kiln_add(w, e, vel, &(test_velocity){2.0f, 2.0f}), KILN_OK);
    const void *before = kiln_get(w, e, pos);
    int32_t archetypes = archetype_count(w);
    kiln_entity order_before[2], order_after[2];
    ck_assert_int_eq(kiln_world_entities(w, order_before, 2), 2);
    kiln_tick_advance(w);
    kiln_tick_advance(w);
    kiln_tick now = kiln_tick_current(w);

    ck_assert_int_eq(kiln_add(w, e, pos, &(test_position){9.0f, 8.0f}), KILN_OK);
    ck_assert_ptr_eq(kiln_get(w, e, pos), before);
    ck_assert_int_eq(archetype_count(w), archetypes);
    ck_assert_int_eq(kiln_world_entities(w, order_after, 2), 2);
    ck_assert_mem_eq(order_after, order_before, sizeof order_before);
    test_position p = position_of(w, e, pos);
    ck_assert_float_eq(p.x, 9.0f);
    ck_assert_float_eq(p.y, 8.0f);
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), now);
    ck_assert_uint_eq(kiln_changed_tick(w, e, vel), 1);
    ck_assert_uint_eq(kiln_changed_tick(w, other, pos), 1);
    p = position_of(w, other, pos);
    ck_assert_float_eq(p.x, 0.0f);
    kiln_world_destroy(w);
}

KILN_TEST(add, add_of_a_present_component_destroys_the_old_value_once) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(w, &log);
    kiln_entity e = spawn_one(w);
    test_owned first = test_owned_make(1), second = test_owned_make(2);
    ck_assert_int_eq(kiln_add(w, e, owned, &first), KILN_OK);
    ck_assert_int_eq(kiln_add(w, e, owned, &second), KILN_OK);
    ck_assert_int_eq(log.destroyed, 1);
    ck_assert_int_eq(test_hook_log_count(&log, 1), 1);
    ck_assert_int_eq(test_hook_log_count(&log, 2), 0);
    const test_owned *got = kiln_get(w, e, owned);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(got->id, 2);
    ck_assert_ptr_eq(got->payload, second.payload);
    kiln_world_destroy(w);
    ck_assert_int_eq(log.destroyed, 2);
    ck_assert_int_eq(test_hook_log_count(&log, 2), 1);
    ck_assert_int_eq(log.bad_payload, 0);
}

KILN_TEST(add, add_to_a_dead_entity_fails_and_changes_nothing) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log = {0};
    kiln_component pos = test_register_position(w);
    kiln_component owned = test_register_owned(w, &log);
    kiln_entity live = spawn_at(w, pos, 1.0f, 2.0f);
    kiln_entity dead = spawn_one(w);
    ck_assert_int_eq(kiln_despawn(w, dead), KILN_OK);
    kiln_entity reused = spawn_one(w); /* takes the dead slot */
    kiln_entity ents[] = {live, dead, reused};
    kiln_component comps[] = {pos, owned};
    snapshot before;
    take_snapshot(w, ents, 3, comps, 2, &before);

    ck_assert_int_eq(kiln_add(w, dead, pos, &(test_position){5.0f, 5.0f}), KILN_ERR_DEAD_ENTITY);
    assert_message_names(w, "add", dead, NULL);
    test_owned o = test_owned_make(3);
    ck_assert_int_eq(kiln_add(w, dead, owned, &o), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(kiln_add(w, KILN_NULL_ENTITY, pos, NULL), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(kiln_add(w, kiln_entity_make(100000, 1), pos, NULL), KILN_ERR_DEAD_ENTITY);
    assert_unchanged(w, ents, 3, comps, 2, &before);
    ck_assert_int_eq(log.destroyed, 0); /* the caller still owns the value it offered */
    test_owned_release(&o);
    kiln_world_destroy(w);
}

KILN_TEST(add, add_of_an_unknown_component_fails_and_changes_nothing) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_entity e = spawn_at(w, pos, 1.0f, 2.0f);
    kiln_component comps[] = {pos};
    snapshot before;
    take_snapshot(w, &e, 1, comps, 1, &before);
    kiln_component unknown[] = {KILN_NO_COMPONENT, pos + 1, 9999, UINT32_MAX};
    for (int i = 0; i < 4; i++) {
        kiln_world_clear_error(w);
        ck_assert_int_eq(kiln_add(w, e, unknown[i], NULL), KILN_ERR_UNKNOWN_COMPONENT);
        assert_message_names(w, "add", KILN_NULL_ENTITY, NULL);
    }
    assert_unchanged(w, &e, 1, comps, 1, &before);
    kiln_world_destroy(w);
}

KILN_TEST(add, unknown_component_errors_name_the_call_entity_and_component_id) {
    /* "kiln_world_error() says what went wrong, naming the call, entity and component" */
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_entity e = spawn_at(w, pos, 1.0f, 2.0f);
    ck_assert_int_eq(kiln_add(w, e, 4321, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    assert_message_names(w, "add", e, "4321");
    ck_assert_int_eq(kiln_remove(w, e, 4321, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    assert_message_names(w, "remove", e, "4321");
    ck_assert_int_eq(kiln_set(w, e, 4321, &(test_position){0.0f, 0.0f}),
                     KILN_ERR_UNKNOWN_COMPONENT);
    assert_message_names(w, "set", e, "4321");
    kiln_world_destroy(w);
}

/* ------------------------------------------------------------------------------------------ */
/* remove                                                                                     */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(remove);

KILN_TEST(remove, remove_reports_whether_the_component_was_there) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity e = spawn_at(w, pos, 1.0f, 2.0f);
    ck_assert_int_eq(kiln_add(w, e, vel, NULL), KILN_OK);
    bool removed = false;
    ck_assert_int_eq(kiln_remove(w, e, pos, &removed), KILN_OK);
    ck_assert(removed);
    ck_assert(!kiln_has(w, e, pos));
    ck_assert_ptr_null(kiln_get(w, e, pos));
    ck_assert(kiln_has(w, e, vel));
    removed = true;
    ck_assert_int_eq(kiln_remove(w, e, pos, &removed), KILN_OK);
    ck_assert(!removed);
    ck_assert_int_eq(kiln_remove(w, e, vel, NULL), KILN_OK);
    ck_assert(!kiln_has(w, e, vel));
    kiln_world_destroy(w);
}

KILN_TEST(remove, remove_of_an_absent_component_changes_nothing) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity e = spawn_at(w, pos, 1.0f, 2.0f);
    kiln_component comps[] = {pos, vel};
    snapshot before;
    take_snapshot(w, &e, 1, comps, 2, &before);
    bool removed = true;
    ck_assert_int_eq(kiln_remove(w, e, vel, &removed), KILN_OK);
    ck_assert(!removed);
    assert_unchanged(w, &e, 1, comps, 2, &before);
    kiln_world_destroy(w);
}

KILN_TEST(remove, removing_the_last_component_keeps_the_entity_alive) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_entity e = spawn_at(w, pos, 1.0f, 2.0f);
    ck_assert_int_eq(kiln_remove(w, e, pos, NULL), KILN_OK);
    ck_assert(kiln_is_alive(w, e));
    ck_assert_int_eq(kiln_entity_count(w), 1);
    kiln_entity list[1];
    ck_assert_int_eq(kiln_world_entities(w, list, 1), 1);
    ck_assert_uint_eq(list[0], e);
    ck_assert_int_eq(kiln_add(w, e, pos, &(test_position){4.0f, 4.0f}), KILN_OK);
    ck_assert_float_eq(position_of(w, e, pos).x, 4.0f);
    kiln_world_destroy(w);
}

KILN_TEST(remove, remove_runs_the_destroy_hook_once) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(w, &log);
    kiln_component pos = test_register_position(w);
    kiln_entity e = spawn_at(w, pos, 0.0f, 0.0f);
    test_owned o = test_owned_make(5);
    ck_assert_int_eq(kiln_add(w, e, owned, &o), KILN_OK);
    ck_assert_int_eq(kiln_remove(w, e, owned, NULL), KILN_OK);
    ck_assert_int_eq(log.destroyed, 1);
    ck_assert_int_eq(test_hook_log_count(&log, 5), 1);
    ck_assert_int_eq(kiln_remove(w, e, owned, NULL), KILN_OK);
    ck_assert_int_eq(log.destroyed, 1);
    kiln_world_destroy(w);
    ck_assert_int_eq(log.destroyed, 1);
    ck_assert_int_eq(log.bad_payload, 0);
}

KILN_TEST(remove, remove_from_a_dead_entity_or_of_an_unknown_component_fails) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_entity e = spawn_at(w, pos, 1.0f, 2.0f);
    kiln_entity dead = spawn_at(w, pos, 3.0f, 3.0f);
    ck_assert_int_eq(kiln_despawn(w, dead), KILN_OK);
    kiln_component comps[] = {pos};
    snapshot before;
    take_snapshot(w, &e, 1, comps, 1, &before);
    ck_assert_int_eq(kiln_remove(w, dead, pos, NULL), KILN_ERR_DEAD_ENTITY);
    assert_message_names(w, "remove", dead, NULL);
    ck_assert_int_eq(kiln_remove(w, e, 77, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    assert_message_names(w, "remove", KILN_NULL_ENTITY, "77");
    ck_assert_int_eq(kiln_remove(w, e, KILN_NO_COMPONENT, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    assert_unchanged(w, &e, 1, comps, 1, &before);
    kiln_world_destroy(w);
}

/* ------------------------------------------------------------------------------------------ */
/* has / get / get_mut                                                                        */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(get);

KILN_TEST(get, has_is_false_for_dead_entities_and_unknown_components) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_entity e = spawn_at(w, pos, 1.0f, 2.0f);
    ck_assert(kiln_has(w, e, pos));
    ck_assert(!kiln_has(w, e, KILN_NO_COMPONENT));
    ck_assert(!kiln_has(w, e, pos + 1));
    ck_assert(!kiln_has(w, e, 5000));
    ck_assert(!kiln_has(w, KILN_NULL_ENTITY, pos));
    ck_assert_int_eq(kiln_despawn(w, e), KILN_OK);
    ck_assert(!kiln_has(w, e, pos));
    kiln_entity f = spawn_one(w); /* same slot, no components */
    ck_assert_uint_eq(kiln_entity_index(f), kiln_entity_index(e));
    ck_assert(!kiln_has(w, e, pos));
    ck_assert(!kiln_has(w, f, pos));
    ck_assert_str_eq(kiln_world_error(w), ""); /* absence is not an error */
    kiln_world_destroy(w);
}

KILN_TEST(get, get_returns_null_when_absent_dead_or_unknown) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_component tag = test_register_tag(w, "Frozen");
    kiln_entity e = spawn_at(w, pos, 1.0f, 2.0f);
    ck_assert_ptr_null(kiln_get(w, e, vel));
    ck_assert_ptr_null(kiln_get(w, e, tag));
    ck_assert_ptr_null(kiln_get(w, e, KILN_NO_COMPONENT));
    ck_assert_ptr_null(kiln_get(w, e, 12345));
    ck_assert_ptr_null(kiln_get(w, KILN_NULL_ENTITY, pos));
    ck_assert_ptr_nonnull(kiln_get(w, e, pos));
    ck_assert_int_eq(kiln_add(w, e, tag, NULL), KILN_OK);
    ck_assert_ptr_null(kiln_get(w, e, tag));
    ck_assert(kiln_has(w, e, tag));
    ck_assert_int_eq(kiln_despawn(w, e), KILN_OK);
    ck_assert_ptr_null(kiln_get(w, e, pos));
    kiln_world_destroy(w);
}

KILN_TEST(get, get_mut_writes_persist_and_stamp_the_row) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity e = spawn_at(w, pos, 1.0f, 2.0f);
    ck_assert_int_eq(kiln_add(w, e, vel, NULL), KILN_OK);
    kiln_tick_advance(w);
    kiln_tick now = kiln_tick_advance(w);
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), 1);
    const test_position *ro = kiln_get(w, e, pos);
    ck_assert_ptr_nonnull(ro);
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), 1); /* reading is not writing */
    test_position *p = kiln_get_mut(w, e, pos);
    ck_assert_ptr_eq(p, ro);
    p->x = 42.0f;
    ck_assert_float_eq(position_of(w, e, pos).x, 42.0f);
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), now);
    ck_assert_uint_eq(kiln_changed_tick(w, e, vel), 1);
    kiln_world_destroy(w);
}

KILN_TEST(get, get_mut_of_an_absent_component_returns_null_and_says_why) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity e = spawn_at(w, pos, 1.0f, 2.0f);
    ck_assert_ptr_null(kiln_get_mut(w, e, vel));
    ck_assert_str_ne(kiln_world_error(w), "");
    assert_message_names(w, "get_mut", e, "Velocity");
    kiln_world_clear_error(w);
    ck_assert_ptr_null(kiln_get_mut(w, e, 999));
    ck_assert_str_ne(kiln_world_error(w), "");
    kiln_entity dead = spawn_at(w, pos, 0.0f, 0.0f);
    ck_assert_int_eq(kiln_despawn(w, dead), KILN_OK);
    kiln_world_clear_error(w);
    ck_assert_ptr_null(kiln_get_mut(w, dead, pos));
    assert_message_names(w, "get_mut", dead, NULL);
    ck_assert(!kiln_has(w, e, vel));
    ck_assert_int_eq(kiln_entity_count(w), 1);
    kiln_world_destroy(w);
}

KILN_TEST(get, pointers_stay_valid_until_a_structural_change) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity e = spawn_at(w, pos, 1.0f, 2.0f);
    ck_assert_int_eq(kiln_add(w, e, vel, NULL), KILN_OK);
    const test_position *p = kiln_get(w, e, pos);
    ck_assert_int_eq(kiln_set(w, e, pos, &(test_position){3.0f, 4.0f}), KILN_OK);
    ck_assert_int_eq(kiln_add(w, e, vel, &(test_velocity){5.0f, 6.0f}), KILN_OK); /* replace */
    ck_assert_ptr_eq(kiln_get_mut(w, e, pos), p);
    kiln_tick_advance(w);
    test_register_tag(w, "Later"); /* registering is not a structural change */
    for (int i = 0; i < 40; i++) {
        char name[32];
        snprintf(name, sizeof name, "More%d", i);
        ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = name,
                                                                            .size = 4},
                                                 &(kiln_component){0}),
                         KILN_OK);
    }
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {pos}}, &q), KILN_OK);
    ck_assert_int_eq(kiln_query_count(q), 1);
    ck_assert_ptr_eq(kiln_get(w, e, pos), p);
    ck_assert_float_eq(p->x, 3.0f);
    ck_assert_float_eq(p->y, 4.0f);
    kiln_query_destroy(q);
    kiln_world_destroy(w);
}

/* ------------------------------------------------------------------------------------------ */
/* set                                                                                        */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(set);

KILN_TEST(set, set_overwrites_an_existing_value_and_stamps_it) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_entity e = spawn_at(w, pos, 1.0f, 2.0f);
    const void *where = kiln_get(w, e, pos);
    kiln_tick now = kiln_tick_advance(w);
    test_position p = {7.0f, 8.0f};
    ck_assert_int_eq(kiln_set(w, e, pos, &p), KILN_OK);
    p.x = 0.0f;
    ck_assert_ptr_eq(kiln_get(w, e, pos), where);
    ck_assert_float_eq(position_of(w, e, pos).x, 7.0f);
    ck_assert_float_eq(position_of(w, e, pos).y, 8.0f);
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), now);
    kiln_world_destroy(w);
}

KILN_TEST(set, set_of_an_absent_component_fails_with_an_exact_message) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity other = spawn_one(w);
    (void)other;
    kiln_entity e = spawn_one(w);
    ck_assert_int_eq(kiln_add(w, e, vel, &(test_velocity){1.0f, 1.0f}), KILN_OK);
    kiln_component comps[] = {pos, vel};
    snapshot before;
    take_snapshot(w, &e, 1, comps, 2, &before);
    ck_assert_int_eq(kiln_set(w, e, pos, &(test_position){3.0f, 3.0f}), KILN_ERR_MISSING_COMPONENT);
    char name[32], expected[96];
    snprintf(expected, sizeof expected, "kiln_set: entity %s has no Position",
             test_entity_string(e, name));
    ck_assert_str_eq(kiln_world_error(w), expected);
    assert_unchanged(w, &e, 1, comps, 2, &before);
    kiln_world_destroy(w);
}

KILN_TEST(set, set_destroys_the_old_value_once_and_takes_the_new_one) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(w, &log);
    kiln_entity e = spawn_one(w);
    test_owned first = test_owned_make(1), second = test_owned_make(2);
    ck_assert_int_eq(kiln_add(w, e, owned, &first), KILN_OK);
    ck_assert_int_eq(kiln_set(w, e, owned, &second), KILN_OK);
    ck_assert_int_eq(log.destroyed, 1);
    ck_assert_int_eq(test_hook_log_count(&log, 1), 1);
    const test_owned *got = kiln_get(w, e, owned);
    ck_assert_int_eq(got->id, 2);
    ck_assert_ptr_eq(got->payload, second.payload);
    kiln_world_destroy(w);
    ck_assert_int_eq(log.destroyed, 2);
    ck_assert_int_eq(test_hook_log_count(&log, 2), 1);
    ck_assert_int_eq(log.bad_payload, 0);
}

KILN_TEST(set, set_on_a_dead_entity_or_unknown_component_fails_and_destroys_nothing) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(w, &log);
    kiln_entity e = spawn_one(w);
    test_owned first = test_owned_make(1);
    ck_assert_int_eq(kiln_add(w, e, owned, &first), KILN_OK);
    kiln_entity dead = spawn_one(w);
    ck_assert_int_eq(kiln_despawn(w, dead), KILN_OK);
    kiln_component comps[] = {owned};
    snapshot before;
    take_snapshot(w, &e, 1, comps, 1, &before);
    test_owned offered = test_owned_make(9);
    ck_assert_int_eq(kiln_set(w, dead, owned, &offered), KILN_ERR_DEAD_ENTITY);
    assert_message_names(w, "set", dead, NULL);
    ck_assert_int_eq(kiln_set(w, e, owned + 1, &offered), KILN_ERR_UNKNOWN_COMPONENT);
    assert_message_names(w, "set", KILN_NULL_ENTITY, NULL);
    ck_assert_int_eq(kiln_set(w, e, KILN_NO_COMPONENT, &offered), KILN_ERR_UNKNOWN_COMPONENT);
    assert_unchanged(w, &e, 1, comps, 1, &before);
    ck_assert_int_eq(log.destroyed, 0);
    test_owned_release(&offered);
    kiln_world_destroy(w);
    ck_assert_int_eq(test_hook_log_count(&log, 1), 1);
}

/* ------------------------------------------------------------------------------------------ */
/* ticks                                                                                      */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(ticks);

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
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity e = spawn_at(w, pos, 0.0f, 0.0f);
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), 1);
    kiln_tick_advance(w);
    kiln_tick now = kiln_tick_advance(w);
    ck_assert_int_eq(kiln_add(w, e, vel, NULL), KILN_OK);
    ck_assert_uint_eq(kiln_changed_tick(w, e, vel), now);
    kiln_world_destroy(w);
}

KILN_TEST(ticks, moved_components_keep_their_ticks_across_archetype_moves) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_component tag = test_register_tag(w, "Frozen");
    kiln_entity e = spawn_at(w, pos, 1.0f, 1.0f); /* tick 1 */
    kiln_tick_advance(w);
    ck_assert_int_eq(kiln_add(w, e, vel, NULL), KILN_OK); /* tick 2 */
    kiln_tick_advance(w);
    ck_assert_int_eq(kiln_add(w, e, tag, NULL), KILN_OK); /* tick 3: moves pos and vel */
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), 1);
    ck_assert_uint_eq(kiln_changed_tick(w, e, vel), 2);
    kiln_tick_advance(w);
    ck_assert_int_eq(kiln_remove(w, e, tag, NULL), KILN_OK); /* moves them back */
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), 1);
    ck_assert_uint_eq(kiln_changed_tick(w, e, vel), 2);
    ck_assert_int_eq(kiln_remove(w, e, pos, NULL), KILN_OK);
    ck_assert_uint_eq(kiln_changed_tick(w, e, vel), 2);
    kiln_world_destroy(w);
}

KILN_TEST(ticks, set_and_add_replace_stamp_the_current_tick_and_get_does_not) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_entity e = spawn_at(w, pos, 0.0f, 0.0f);
    kiln_tick t = kiln_tick_advance(w);
    ck_assert_int_eq(kiln_set(w, e, pos, &(test_position){1.0f, 1.0f}), KILN_OK);
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), t);
    t = kiln_tick_advance(w);
    ck_assert_ptr_nonnull(kiln_get(w, e, pos));
    ck_assert(kiln_has(w, e, pos));
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), t - 1);
    ck_assert_int_eq(kiln_add(w, e, pos, NULL), KILN_OK);
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), t);
    t = kiln_tick_advance(w);
    ck_assert_ptr_nonnull(kiln_get_mut(w, e, pos));
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), t);
    kiln_world_destroy(w);
}

KILN_TEST(ticks, changed_tick_is_zero_when_absent_dead_or_unknown) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity e = spawn_at(w, pos, 0.0f, 0.0f);
    ck_assert_uint_eq(kiln_changed_tick(w, e, vel), 0);
    ck_assert_uint_eq(kiln_changed_tick(w, e, 4444), 0);
    ck_assert_uint_eq(kiln_changed_tick(w, e, KILN_NO_COMPONENT), 0);
    ck_assert_uint_eq(kiln_changed_tick(w, KILN_NULL_ENTITY, pos), 0);
    ck_assert_int_eq(kiln_despawn(w, e), KILN_OK);
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), 0);
    kiln_world_destroy(w);
}

KILN_TEST(ticks, swap_removed_rows_keep_their_values_and_ticks) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    enum { N = 6 };
    kiln_entity e[N];
    for (int i = 0; i < N; i++) {
        e[i] = spawn_at(w, pos, (float)i, (float)-i); /* entity i written at tick i + 1 */
        kiln_tick_advance(w);
    }
    ck_assert_int_eq(kiln_despawn(w, e[0]), KILN_OK);           /* last row fills row 0 */
    ck_assert_int_eq(kiln_add(w, e[2], vel, NULL), KILN_OK);    /* last row fills row 2 */
    ck_assert_int_eq(kiln_remove(w, e[1], pos, NULL), KILN_OK); /* and again */
    for (int i = 2; i < N; i++) {
        test_position p = position_of(w, e[i], pos);
        ck_assert_float_eq(p.x, (float)i);
        ck_assert_float_eq(p.y, (float)-i);
        ck_assert_uint_eq(kiln_changed_tick(w, e[i], pos), (kiln_tick)(i + 1));
    }
    ck_assert(kiln_is_alive(w, e[1]));
    ck_assert(!kiln_has(w, e[1], pos));
    kiln_world_destroy(w);
}

/* ------------------------------------------------------------------------------------------ */
/* hooks                                                                                      */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(hooks);

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
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    enum { N = 50 };
    kiln_entity e[N];
    for (int i = 0; i < N; i++) e[i] = spawn_at(w, pos, (float)i, 0.5f);
    for (int i = 0; i < N; i += 2) ck_assert_int_eq(kiln_add(w, e[i], vel, NULL), KILN_OK);
    for (int i = 0; i < N; i += 5) ck_assert_int_eq(kiln_despawn(w, e[i]), KILN_OK);
    for (int i = 0; i < N; i++) {
        if (i % 5 == 0) continue;
        test_position p = position_of(w, e[i], pos);
        ck_assert_float_eq(p.x, (float)i);
        ck_assert_float_eq(p.y, 0.5f);
    }
    kiln_world_destroy(w);
}

/* ------------------------------------------------------------------------------------------ */
/* spawn_with / spawn_batch                                                                   */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(spawn_with);

KILN_TEST(spawn_with, spawn_with_sets_every_value_in_one_archetype_move) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_component tag = test_register_tag(w, "Frozen");
    int32_t archetypes = archetype_count(w);
    kiln_tick now = kiln_tick_advance(w);
    test_position p = {1.0f, 2.0f};
    test_velocity v = {3.0f, 4.0f};
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){pos, vel, tag},
                                     (const void *[]){&p, &v, NULL}, 3, &e),
                     KILN_OK);
    ck_assert(kiln_is_alive(w, e));
    ck_assert_int_eq(archetype_count(w), archetypes + 1); /* no intermediate archetypes */
    ck_assert_float_eq(position_of(w, e, pos).y, 2.0f);
    const test_velocity *gv = kiln_get(w, e, vel);
    ck_assert_float_eq(gv->x, 3.0f);
    ck_assert(kiln_has(w, e, tag));
    ck_assert_uint_eq(kiln_changed_tick(w, e, pos), now);
    ck_assert_uint_eq(kiln_changed_tick(w, e, vel), now);
    kiln_world_destroy(w);
}

KILN_TEST(spawn_with, spawn_with_pairs_values_with_components_in_any_order) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity a, b;
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){vel, pos},
                                     (const void *[]){&(test_velocity){1.0f, 1.0f},
                                                      &(test_position){2.0f, 2.0f}},
                                     2, &a),
                     KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){pos, vel},
                                     (const void *[]){&(test_position){3.0f, 3.0f},
                                                      &(test_velocity){4.0f, 4.0f}},
                                     2, &b),
                     KILN_OK);
    ck_assert_float_eq(position_of(w, a, pos).x, 2.0f);
    ck_assert_float_eq(((const test_velocity *)kiln_get(w, a, vel))->x, 1.0f);
    ck_assert_float_eq(position_of(w, b, pos).x, 3.0f);
    ck_assert_float_eq(((const test_velocity *)kiln_get(w, b, vel))->x, 4.0f);
    kiln_world_destroy(w);
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
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    ck_assert_int_eq(kiln_spawn_batch(w, &pos, 1, 64, NULL), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(w), 64);
    kiln_entity list[64];
    ck_assert_int_eq(kiln_world_entities(w, list, 64), 64);
    for (int i = 0; i < 64; i++) ck_assert(kiln_has(w, list[i], pos));
    kiln_world_destroy(w);
}

KILN_TEST(spawn_with, spawn_batch_with_duplicate_or_unknown_components_spawns_nothing) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity existing = spawn_at(w, pos, 1.0f, 1.0f);
    kiln_component comps[] = {pos, vel};
    snapshot before;
    take_snapshot(w, &existing, 1, comps, 2, &before);
    kiln_entity out[8];
    ck_assert_int_eq(kiln_spawn_batch(w, (kiln_component[]){pos, vel, pos}, 3, 8, out),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_ne(kiln_world_error(w), "");
    ck_assert_int_eq(kiln_spawn_batch(w, (kiln_component[]){vel, 31}, 2, 8, out),
                     KILN_ERR_UNKNOWN_COMPONENT);
    assert_unchanged(w, &existing, 1, comps, 2, &before);
    kiln_world_destroy(w);
}

/* ------------------------------------------------------------------------------------------ */
/* values that point into the world                                                           */
/* ------------------------------------------------------------------------------------------ */

/* A value is read as of the call: a pointer the world handed out (valid until this call's own
 * structural change) must be copied before the call moves or regrows anything. */

KILN_TEST_GROUP(aliasing);

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
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity e = spawn_at(w, pos, 1.0f, 1.0f);
    kiln_entity other = spawn_at(w, pos, 2.0f, 2.0f); /* fills e's row when e moves out */
    /* Velocity has Position's layout: start moving the way it points */
    ck_assert_int_eq(kiln_add(w, e, vel, kiln_get(w, e, pos)), KILN_OK);
    const test_velocity *v = kiln_get(w, e, vel);
    ck_assert_msg(v->x == 1.0f && v->y == 1.0f, "got velocity (%g, %g), want (1, 1)",
                  (double)v->x, (double)v->y);
    ck_assert_float_eq(position_of(w, other, pos).x, 2.0f);
    kiln_world_destroy(w);
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
