/* test_access.c: Check suite for component access: add, remove, has, get, get_mut and set.
 * A failed call leaves the world as it was; each value is destroyed exactly once. */
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
/* add                                                                                        */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(add, .setup = setup, .teardown = teardown);

KILN_TEST(add, add_stores_a_copy_of_the_value) {
    kiln_entity e = spawn_one(F.w);
    test_position p = {1.5f, -2.0f};
    ck_assert_int_eq(kiln_add(F.w, e, F.pos, &p), KILN_OK);
    p.x = 99.0f;
    ck_assert(kiln_has(F.w, e, F.pos));
    ck_assert(!kiln_has(F.w, e, F.vel));
    test_position got = position_of(F.w, e, F.pos);
    ck_assert_float_eq(got.x, 1.5f);
    ck_assert_float_eq(got.y, -2.0f);
    ck_assert_ptr_null(kiln_get(F.w, e, F.vel));
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
    kiln_entity other = spawn_at(F.w, F.pos, 0.0f, 0.0f);
    ck_assert_int_eq(kiln_add(F.w, other, F.vel, NULL), KILN_OK);
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 1.0f);
    ck_assert_int_eq(kiln_add(F.w, e, F.vel, &(test_velocity){2.0f, 2.0f}), KILN_OK);
    const void *before = kiln_get(F.w, e, F.pos);
    int32_t archetypes = archetype_count(F.w);
    kiln_entity order_before[2], order_after[2];
    ck_assert_int_eq(kiln_world_entities(F.w, order_before, 2), 2);
    kiln_tick_advance(F.w);
    kiln_tick_advance(F.w);
    kiln_tick now = kiln_tick_current(F.w);

    ck_assert_int_eq(kiln_add(F.w, e, F.pos, &(test_position){9.0f, 8.0f}), KILN_OK);
    ck_assert_ptr_eq(kiln_get(F.w, e, F.pos), before);
    ck_assert_int_eq(archetype_count(F.w), archetypes);
    ck_assert_int_eq(kiln_world_entities(F.w, order_after, 2), 2);
    ck_assert_mem_eq(order_after, order_before, sizeof order_before);
    test_position p = position_of(F.w, e, F.pos);
    ck_assert_float_eq(p.x, 9.0f);
    ck_assert_float_eq(p.y, 8.0f);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), now);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.vel), 1);
    ck_assert_uint_eq(kiln_changed_tick(F.w, other, F.pos), 1);
    p = position_of(F.w, other, F.pos);
    ck_assert_float_eq(p.x, 0.0f);
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
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 2.0f);
    kiln_component comps[] = {F.pos};
    snapshot before;
    take_snapshot(F.w, &e, 1, comps, 1, &before);
    /* F.vel is the last component registered */
    kiln_component unknown[] = {KILN_NO_COMPONENT, F.vel + 1, 9999, UINT32_MAX};
    for (int i = 0; i < 4; i++) {
        kiln_world_clear_error(F.w);
        ck_assert_int_eq(kiln_add(F.w, e, unknown[i], NULL), KILN_ERR_UNKNOWN_COMPONENT);
        assert_message_names(F.w, "add", KILN_NULL_ENTITY, NULL);
    }
    assert_unchanged(F.w, &e, 1, comps, 1, &before);
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

KILN_TEST_GROUP_WITH(remove, .setup = setup, .teardown = teardown);

KILN_TEST(remove, remove_reports_whether_the_component_was_there) {
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 2.0f);
    ck_assert_int_eq(kiln_add(F.w, e, F.vel, NULL), KILN_OK);
    bool removed = false;
    ck_assert_int_eq(kiln_remove(F.w, e, F.pos, &removed), KILN_OK);
    ck_assert(removed);
    ck_assert(!kiln_has(F.w, e, F.pos));
    ck_assert_ptr_null(kiln_get(F.w, e, F.pos));
    ck_assert(kiln_has(F.w, e, F.vel));
    removed = true;
    ck_assert_int_eq(kiln_remove(F.w, e, F.pos, &removed), KILN_OK);
    ck_assert(!removed);
    ck_assert_int_eq(kiln_remove(F.w, e, F.vel, NULL), KILN_OK);
    ck_assert(!kiln_has(F.w, e, F.vel));
}

KILN_TEST(remove, remove_of_an_absent_component_changes_nothing) {
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 2.0f);
    kiln_component comps[] = {F.pos, F.vel};
    snapshot before;
    take_snapshot(F.w, &e, 1, comps, 2, &before);
    bool removed = true;
    ck_assert_int_eq(kiln_remove(F.w, e, F.vel, &removed), KILN_OK);
    ck_assert(!removed);
    assert_unchanged(F.w, &e, 1, comps, 2, &before);
}

KILN_TEST(remove, removing_the_last_component_keeps_the_entity_alive) {
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 2.0f);
    ck_assert_int_eq(kiln_remove(F.w, e, F.pos, NULL), KILN_OK);
    ck_assert(kiln_is_alive(F.w, e));
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
    kiln_entity list[1];
    ck_assert_int_eq(kiln_world_entities(F.w, list, 1), 1);
    ck_assert_uint_eq(list[0], e);
    ck_assert_int_eq(kiln_add(F.w, e, F.pos, &(test_position){4.0f, 4.0f}), KILN_OK);
    ck_assert_float_eq(position_of(F.w, e, F.pos).x, 4.0f);
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
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 2.0f);
    kiln_entity dead = spawn_at(F.w, F.pos, 3.0f, 3.0f);
    ck_assert_int_eq(kiln_despawn(F.w, dead), KILN_OK);
    kiln_component comps[] = {F.pos};
    snapshot before;
    take_snapshot(F.w, &e, 1, comps, 1, &before);
    ck_assert_int_eq(kiln_remove(F.w, dead, F.pos, NULL), KILN_ERR_DEAD_ENTITY);
    assert_message_names(F.w, "remove", dead, NULL);
    ck_assert_int_eq(kiln_remove(F.w, e, 77, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    assert_message_names(F.w, "remove", KILN_NULL_ENTITY, "77");
    ck_assert_int_eq(kiln_remove(F.w, e, KILN_NO_COMPONENT, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    assert_unchanged(F.w, &e, 1, comps, 1, &before);
}

/* ------------------------------------------------------------------------------------------ */
/* has / get / get_mut                                                                        */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(get, .setup = setup, .teardown = teardown);

KILN_TEST(get, has_is_false_for_dead_entities_and_unknown_components) {
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 2.0f);
    ck_assert(kiln_has(F.w, e, F.pos));
    ck_assert(!kiln_has(F.w, e, KILN_NO_COMPONENT));
    ck_assert(!kiln_has(F.w, e, F.vel + 1));
    ck_assert(!kiln_has(F.w, e, 5000));
    ck_assert(!kiln_has(F.w, KILN_NULL_ENTITY, F.pos));
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    ck_assert(!kiln_has(F.w, e, F.pos));
    kiln_entity f = spawn_one(F.w); /* same slot, no components */
    ck_assert_uint_eq(kiln_entity_index(f), kiln_entity_index(e));
    ck_assert(!kiln_has(F.w, e, F.pos));
    ck_assert(!kiln_has(F.w, f, F.pos));
    ck_assert_str_eq(kiln_world_error(F.w), ""); /* absence is not an error */
}

KILN_TEST(get, get_returns_null_when_absent_dead_or_unknown) {
    kiln_component tag = test_register_tag(F.w, "Frozen");
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 2.0f);
    ck_assert_ptr_null(kiln_get(F.w, e, F.vel));
    ck_assert_ptr_null(kiln_get(F.w, e, tag));
    ck_assert_ptr_null(kiln_get(F.w, e, KILN_NO_COMPONENT));
    ck_assert_ptr_null(kiln_get(F.w, e, 12345));
    ck_assert_ptr_null(kiln_get(F.w, KILN_NULL_ENTITY, F.pos));
    ck_assert_ptr_nonnull(kiln_get(F.w, e, F.pos));
    ck_assert_int_eq(kiln_add(F.w, e, tag, NULL), KILN_OK);
    ck_assert_ptr_null(kiln_get(F.w, e, tag));
    ck_assert(kiln_has(F.w, e, tag));
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    ck_assert_ptr_null(kiln_get(F.w, e, F.pos));
}

KILN_TEST(get, get_mut_writes_persist_and_stamp_the_row) {
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 2.0f);
    ck_assert_int_eq(kiln_add(F.w, e, F.vel, NULL), KILN_OK);
    kiln_tick_advance(F.w);
    kiln_tick now = kiln_tick_advance(F.w);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), 1);
    const test_position *ro = kiln_get(F.w, e, F.pos);
    ck_assert_ptr_nonnull(ro);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), 1); /* reading is not writing */
    test_position *p = kiln_get_mut(F.w, e, F.pos);
    ck_assert_ptr_eq(p, ro);
    p->x = 42.0f;
    ck_assert_float_eq(position_of(F.w, e, F.pos).x, 42.0f);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), now);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.vel), 1);
}

KILN_TEST(get, get_mut_of_an_absent_component_returns_null_and_says_why) {
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 2.0f);
    ck_assert_ptr_null(kiln_get_mut(F.w, e, F.vel));
    ck_assert_str_ne(kiln_world_error(F.w), "");
    assert_message_names(F.w, "get_mut", e, "Velocity");
    kiln_world_clear_error(F.w);
    ck_assert_ptr_null(kiln_get_mut(F.w, e, 999));
    ck_assert_str_ne(kiln_world_error(F.w), "");
    kiln_entity dead = spawn_at(F.w, F.pos, 0.0f, 0.0f);
    ck_assert_int_eq(kiln_despawn(F.w, dead), KILN_OK);
    kiln_world_clear_error(F.w);
    ck_assert_ptr_null(kiln_get_mut(F.w, dead, F.pos));
    assert_message_names(F.w, "get_mut", dead, NULL);
    ck_assert(!kiln_has(F.w, e, F.vel));
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
}

KILN_TEST(get, pointers_stay_valid_until_a_structural_change) {
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 2.0f);
    ck_assert_int_eq(kiln_add(F.w, e, F.vel, NULL), KILN_OK);
    const test_position *p = kiln_get(F.w, e, F.pos);
    ck_assert_int_eq(kiln_set(F.w, e, F.pos, &(test_position){3.0f, 4.0f}), KILN_OK);
    ck_assert_int_eq(kiln_add(F.w, e, F.vel, &(test_velocity){5.0f, 6.0f}), KILN_OK); /* replace */
    ck_assert_ptr_eq(kiln_get_mut(F.w, e, F.pos), p);
    kiln_tick_advance(F.w);
    test_register_tag(F.w, "Later"); /* registering is not a structural change */
    for (int i = 0; i < 40; i++) {
        char name[32];
        snprintf(name, sizeof name, "More%d", i);
        ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = name,
                                                                            .size = 4},
                                                 &(kiln_component){0}),
                         KILN_OK);
    }
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(F.w, &(kiln_query_desc){.with = {F.pos}}, &q), KILN_OK);
    ck_assert_int_eq(kiln_query_count(q), 1);
    ck_assert_ptr_eq(kiln_get(F.w, e, F.pos), p);
    ck_assert_float_eq(p->x, 3.0f);
    ck_assert_float_eq(p->y, 4.0f);
    kiln_query_destroy(q);
}

/* ------------------------------------------------------------------------------------------ */
/* set                                                                                        */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(set, .setup = setup, .teardown = teardown);

KILN_TEST(set, set_overwrites_an_existing_value_and_stamps_it) {
    kiln_entity e = spawn_at(F.w, F.pos, 1.0f, 2.0f);
    const void *where = kiln_get(F.w, e, F.pos);
    kiln_tick now = kiln_tick_advance(F.w);
    test_position p = {7.0f, 8.0f};
    ck_assert_int_eq(kiln_set(F.w, e, F.pos, &p), KILN_OK);
    p.x = 0.0f;
    ck_assert_ptr_eq(kiln_get(F.w, e, F.pos), where);
    ck_assert_float_eq(position_of(F.w, e, F.pos).x, 7.0f);
    ck_assert_float_eq(position_of(F.w, e, F.pos).y, 8.0f);
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, F.pos), now);
}

KILN_TEST(set, set_of_an_absent_component_fails_with_an_exact_message) {
    kiln_entity other = spawn_one(F.w);
    (void)other;
    kiln_entity e = spawn_one(F.w);
    ck_assert_int_eq(kiln_add(F.w, e, F.vel, &(test_velocity){1.0f, 1.0f}), KILN_OK);
    kiln_component comps[] = {F.pos, F.vel};
    snapshot before;
    take_snapshot(F.w, &e, 1, comps, 2, &before);
    ck_assert_int_eq(kiln_set(F.w, e, F.pos, &(test_position){3.0f, 3.0f}), KILN_ERR_MISSING_COMPONENT);
    char name[32], expected[96];
    snprintf(expected, sizeof expected, "kiln_set: entity %s has no Position",
             test_entity_string(e, name));
    ck_assert_str_eq(kiln_world_error(F.w), expected);
    assert_unchanged(F.w, &e, 1, comps, 2, &before);
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

/* A check hook refusing values whose first byte is 0xEE (set_writes_...'s checked component). */
static kiln_result refuse_ee(const kiln_world *world, kiln_entity e, const void *value, void *ctx,
                             char *why, size_t why_size) {
    (void)world, (void)e, (void)ctx;
    if (!value || ((const uint8_t *)value)[0] != 0xEE) return KILN_OK; /* NULL: zeroes */
    snprintf(why, why_size, "0xEE is refused");
    return KILN_ERR_INVALID_ARGUMENT;
}

/* Fills size bytes at dst from seed. */
static void pattern(uint8_t *dst, size_t size, int seed) {
    for (size_t i = 0; i < size; i++) dst[i] = (uint8_t)(seed * 31 + (int)i * 7 + 1);
}

/* kiln_set's short path (columns without hooks or a check hook) and its general one (a check
 * hook) write every layout, a padded one included: each value from a caller's buffer, from
 * another row of the column and from its own row, stamped, its column's latest tick raised,
 * the padding zero; no value writes the defaults; a refused value changes nothing. */
KILN_TEST(set, set_writes_every_layout_from_anywhere_and_stamps_it) {
    static const size_t sizes[] = {1, 2, 3, 4, 6, 8, 12, 16, 20, 24, 40, 6, 8};
    enum { KINDS = sizeof sizes / sizeof sizes[0] };
    kiln_world *w = kiln_world_create(NULL);
    uint8_t defaults[40];
    pattern(defaults, sizeof defaults, 99);
    for (int k = 0; k < KINDS; k++) {
        char name[16];
        snprintf(name, sizeof name, "C%d", k);
        kiln_component_desc d = {.name = name, .size = sizes[k]};
        if (k == KINDS - 2) d.align = 4;            /* 6 bytes in 8: padded */
        if (k == KINDS - 1) d.check = refuse_ee;    /* checked */
        if (k == 3) d.defaults = defaults;
        kiln_component c;
        ck_assert_int_eq(kiln_component_register(w, &d, &c), KILN_OK);
        kiln_entity e[3];
        uint8_t want[3][40], value[40];
        for (int i = 0; i < 3; i++) {
            pattern(want[i], sizes[k], k * 3 + i);
            ck_assert_int_eq(kiln_spawn_with(w, &c, (const void *[]){want[i]}, 1, &e[i]), KILN_OK);
        }
        kiln_tick now = kiln_tick_advance(w);
        pattern(value, sizeof value, 50 + k); /* a caller's buffer, non-zero past the value too */
        ck_assert_int_eq(kiln_set(w, e[0], c, value), KILN_OK);
        memcpy(want[0], value, sizes[k]);
        kiln_query *q; /* the column's latest tick, raised by that set alone */
        ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {c}}, &q), KILN_OK);
        kiln_iter it;
        kiln_query_iter(q, &it);
        ck_assert(kiln_query_next(&it));
        ck_assert_uint_eq(kiln_iter_column_tick(&it, 0), now);
        kiln_iter_fini(&it);
        kiln_query_destroy(q);
        ck_assert_int_eq(kiln_set(w, e[1], c, kiln_get(w, e[2], c)), KILN_OK); /* another row */
        memcpy(want[1], want[2], sizes[k]);
        ck_assert_int_eq(kiln_set(w, e[2], c, kiln_get(w, e[2], c)), KILN_OK); /* its own row */
        for (int i = 0; i < 3; i++) {
            ck_assert_msg(memcmp(kiln_get(w, e[i], c), want[i], sizes[k]) == 0, "kind %d row %d", k, i);
            ck_assert_uint_eq(kiln_changed_tick(w, e[i], c), now);
        }
        if (k == KINDS - 2) { /* the row's padding stays zero (the buffer's bytes 6, 7 are not) */
            const uint8_t *row = kiln_get(w, e[0], c);
            ck_assert(value[6] != 0 && row[6] == 0 && row[7] == 0);
        }
        kiln_tick_advance(w);
        memset(value, 0xEE, sizeof value); /* refused by the checked kind only */
        kiln_result r = kiln_set(w, e[0], c, value);
        if (k == KINDS - 1) {
            ck_assert_int_eq(r, KILN_ERR_INVALID_ARGUMENT);
            ck_assert(memcmp(kiln_get(w, e[0], c), want[0], sizes[k]) == 0);
            ck_assert_uint_eq(kiln_changed_tick(w, e[0], c), now);
        } else {
            ck_assert_int_eq(r, KILN_OK);
            ck_assert(memcmp(kiln_get(w, e[0], c), value, sizes[k]) == 0);
        }
        ck_assert_int_eq(kiln_set(w, e[1], c, NULL), KILN_OK); /* the defaults, or zeroes */
        memset(value, 0, sizeof value);
        ck_assert(memcmp(kiln_get(w, e[1], c), k == 3 ? defaults : value, sizes[k]) == 0);
    }
    kiln_world_destroy(w);
}
