/* test_resource.c: Check suite for resources: set/get/has/remove, destroy hooks run exactly once,
 * unknown types, staging of systems by resource access, and out-of-memory on set. */
#include <check.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* An empty world on the counting allocator (test_support.h), made afresh around every test of a
 * group using it; teardown asserts every byte came back. */
static test_world_fixture F;

static void setup(void) { test_world_fixture_setup(&F); }

static void teardown(void) { test_world_fixture_teardown(&F); }

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct score {
    int64_t points;
    double multiplier;
} score;

static kiln_component register_score(kiln_world *world) {
    kiln_component id;
    ck_assert_int_eq(kiln_component_register(world, &(kiln_component_desc){.name = "Score",
                                                                           .size = sizeof(score)},
                                             &id),
                     KILN_OK);
    return id;
}

/* A second Owned-like type reporting to the same log, so two resources own payloads. */
static kiln_component register_owned_named(kiln_world *world, test_hook_log *log, const char *name) {
    kiln_component_desc desc = test_owned_desc(log);
    desc.name = name;
    kiln_component id;
    ck_assert_int_eq(kiln_component_register(world, &desc, &id), KILN_OK);
    return id;
}

static const test_owned *owned_resource(kiln_world *world, kiln_component type) {
    return kiln_resource_get(world, type);
}

/* ------------------------------------------------------------------------------------------ */
/* set, get, has, remove                                                                      */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(values, .setup = setup, .teardown = teardown);

KILN_TEST(values, resource_set_stores_a_copy_that_get_returns) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_component type = register_score(world);
    score value = {42, 1.5};
    ck_assert_int_eq(kiln_resource_set(world, type, &value), KILN_OK);
    value.points = -1; /* the world kept its own copy */
    ck_assert(kiln_resource_has(world, type));
    const score *got = kiln_resource_get(world, type);
    ck_assert_ptr_nonnull(got);
    ck_assert_ptr_ne(got, &value);
    ck_assert_int_eq(got->points, 42);
    ck_assert_double_eq(got->multiplier, 1.5);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

KILN_TEST(values, resource_get_is_null_and_has_is_false_when_not_set) {
    kiln_component type = register_score(F.w);
    kiln_component other = test_register_position(F.w);
    ck_assert_ptr_null(kiln_resource_get(F.w, type));
    ck_assert(!kiln_resource_has(F.w, type));
    ck_assert_str_eq(kiln_world_error(F.w), ""); /* absence is not an error */
    /* setting one resource does not set the others */
    ck_assert_int_eq(kiln_resource_set(F.w, other, &(test_position){1, 2}), KILN_OK);
    ck_assert_ptr_null(kiln_resource_get(F.w, type));
    ck_assert(!kiln_resource_has(F.w, type));
    /* nor do unknown ids answer */
    ck_assert_ptr_null(kiln_resource_get(F.w, KILN_NO_COMPONENT));
    ck_assert(!kiln_resource_has(F.w, KILN_NO_COMPONENT));
    ck_assert_ptr_null(kiln_resource_get(F.w, 999));
    ck_assert(!kiln_resource_has(F.w, 999));
}

KILN_TEST(values, resource_set_with_a_null_value_zeroes_it) {
    test_allocator alloc; /* fills fresh memory with garbage, so zeroes are really written */
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_component type = register_score(world);
    ck_assert_int_eq(kiln_resource_set(world, type, NULL), KILN_OK);
    const score *got = kiln_resource_get(world, type);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(got->points, 0);
    ck_assert_double_eq(got->multiplier, 0.0);
    /* and over an existing value too */
    ck_assert_int_eq(kiln_resource_set(world, type, &(score){7, 7.0}), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(world, type, NULL), KILN_OK);
    got = kiln_resource_get(world, type);
    ck_assert_int_eq(got->points, 0);
    kiln_world_destroy(world);
}

KILN_TEST(values, writes_through_resource_get_persist) {
    kiln_component type = register_score(F.w);
    ck_assert_int_eq(kiln_resource_set(F.w, type, &(score){1, 1.0}), KILN_OK);
    score *s = kiln_resource_get(F.w, type);
    s->points += 99;
    /* unrelated world activity does not disturb it */
    kiln_component pos = test_register_position(F.w);
    for (int i = 0; i < 100; i++) {
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(F.w, &pos, NULL, 1, &e), KILN_OK);
    }
    const score *again = kiln_resource_get(F.w, type);
    ck_assert_int_eq(again->points, 100);
}

KILN_TEST(values, resource_values_are_aligned_for_their_type) {
    kiln_component wide, byte;
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = "Wide", .size = 48,
                                                                           .align = 16},
                                             &wide),
                     KILN_OK);
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = "Byte", .size = 1}, &byte),
                     KILN_OK);
    ck_assert_int_eq(kiln_resource_set(F.w, byte, &(unsigned char){9}), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(F.w, wide, NULL), KILN_OK);
    ck_assert_uint_eq((uintptr_t)kiln_resource_get(F.w, wide) % 16, 0);
    ck_assert_uint_eq(*(const unsigned char *)kiln_resource_get(F.w, byte), 9);
}

KILN_TEST(values, a_tag_resource_is_set_but_has_no_value) {
    kiln_component paused = test_register_tag(F.w, "Paused");
    ck_assert(!kiln_resource_has(F.w, paused));
    ck_assert_int_eq(kiln_resource_set(F.w, paused, NULL), KILN_OK);
    ck_assert(kiln_resource_has(F.w, paused));
    ck_assert_ptr_null(kiln_resource_get(F.w, paused));
    ck_assert_int_eq(kiln_resource_set(F.w, paused, NULL), KILN_OK);
    ck_assert(kiln_resource_has(F.w, paused));
    bool removed = false;
    ck_assert_int_eq(kiln_resource_remove(F.w, paused, &removed), KILN_OK);
    ck_assert(removed);
    ck_assert(!kiln_resource_has(F.w, paused));
}

KILN_TEST(values, resources_are_separate_from_component_values) {
    kiln_component pos = test_register_position(F.w);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(F.w, &pos, (const void *[]){&(test_position){1, 1}}, 1, &e), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(F.w, pos, &(test_position){5, 5}), KILN_OK);
    ck_assert_float_eq(((const test_position *)kiln_get(F.w, e, pos))->x, 1.0f);
    ck_assert_float_eq(((const test_position *)kiln_resource_get(F.w, pos))->x, 5.0f);
    /* the resource is no entity: queries do not see it */
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(F.w, &(kiln_query_desc){.with = {pos}}, &q), KILN_OK);
    ck_assert_int_eq(kiln_query_count(q), 1);
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    ck_assert_float_eq(((const test_position *)kiln_resource_get(F.w, pos))->y, 5.0f);
    kiln_query_destroy(q);
}

KILN_TEST(values, resource_remove_reports_whether_it_was_set) {
    kiln_component type = register_score(F.w);
    bool removed = true;
    ck_assert_int_eq(kiln_resource_remove(F.w, type, &removed), KILN_OK);
    ck_assert(!removed);
    ck_assert_int_eq(kiln_resource_set(F.w, type, &(score){3, 0}), KILN_OK);
    ck_assert_int_eq(kiln_resource_remove(F.w, type, &removed), KILN_OK);
    ck_assert(removed);
    ck_assert(!kiln_resource_has(F.w, type));
    ck_assert_ptr_null(kiln_resource_get(F.w, type));
    ck_assert_int_eq(kiln_resource_remove(F.w, type, NULL), KILN_OK);
    /* it can be set again after a remove */
    ck_assert_int_eq(kiln_resource_set(F.w, type, &(score){4, 0}), KILN_OK);
    ck_assert_int_eq(((const score *)kiln_resource_get(F.w, type))->points, 4);
}

/* ------------------------------------------------------------------------------------------ */
/* destroy hooks                                                                              */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(hooks);

KILN_TEST(hooks, resource_set_replaces_and_destroys_the_old_value_exactly_once) {
    test_hook_log log;
    memset(&log, 0, sizeof log);
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_component owned = test_register_owned(world, &log);
    test_owned first = test_owned_make(1);
    ck_assert_int_eq(kiln_resource_set(world, owned, &first), KILN_OK);
    ck_assert_int_eq(log.destroyed, 0);
    test_owned second = test_owned_make(2);
    ck_assert_int_eq(kiln_resource_set(world, owned, &second), KILN_OK);
    ck_assert_int_eq(test_hook_log_count(&log, 1), 1);
    ck_assert_int_eq(test_hook_log_count(&log, 2), 0);
    ck_assert_int_eq(log.destroyed, 1);
    ck_assert_int_eq(log.bad_payload, 0);
    const test_owned *got = owned_resource(world, owned);
    ck_assert_int_eq(got->id, 2);
    ck_assert_int_eq(*got->payload, 2);
    for (int32_t id = 3; id <= 10; id++) {
        test_owned next = test_owned_make(id);
        ck_assert_int_eq(kiln_resource_set(world, owned, &next), KILN_OK);
        ck_assert_int_eq(test_hook_log_count(&log, id - 1), 1);
    }
    ck_assert_int_eq(log.destroyed, 9);
    /* a NULL value replaces too: the old one is destroyed, the new one is zeroes */
    ck_assert_int_eq(kiln_resource_set(world, owned, NULL), KILN_OK);
    ck_assert_int_eq(test_hook_log_count(&log, 10), 1);
    ck_assert_ptr_null(owned_resource(world, owned)->payload);
    kiln_world_destroy(world);
    ck_assert_int_eq(log.bad_payload, 0);
    for (int32_t id = 1; id <= 10; id++) ck_assert_int_eq(test_hook_log_count(&log, id), 1);
    ck_assert_int_eq(test_hook_log_count(&log, -1), 0); /* no double destroy */
    ck_assert_int_eq(test_hook_log_count(&log, -2), 0); /* no destroy of a moved-from value */
    ck_assert_int_eq(alloc.live_bytes, 0);
}

KILN_TEST(hooks, resource_remove_destroys_the_value_exactly_once) {
    test_hook_log log;
    memset(&log, 0, sizeof log);
    kiln_world *world = kiln_world_create(NULL);
    kiln_component owned = test_register_owned(world, &log);
    test_owned v = test_owned_make(5);
    ck_assert_int_eq(kiln_resource_set(world, owned, &v), KILN_OK);
    bool removed = false;
    ck_assert_int_eq(kiln_resource_remove(world, owned, &removed), KILN_OK);
    ck_assert(removed);
    ck_assert_int_eq(test_hook_log_count(&log, 5), 1);
    ck_assert_int_eq(log.destroyed, 1);
    ck_assert_int_eq(kiln_resource_remove(world, owned, &removed), KILN_OK);
    ck_assert(!removed);
    ck_assert_int_eq(log.destroyed, 1);
    kiln_world_destroy(world);
    ck_assert_int_eq(log.destroyed, 1); /* nothing left to destroy at world end */
    ck_assert_int_eq(log.bad_payload, 0);
}

KILN_TEST(hooks, world_destroy_destroys_each_remaining_resource_exactly_once) {
    test_hook_log log;
    memset(&log, 0, sizeof log);
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_component a = register_owned_named(world, &log, "OwnedA");
    kiln_component b = register_owned_named(world, &log, "OwnedB");
    kiln_component c = register_owned_named(world, &log, "OwnedC");
    kiln_component score_id = register_score(world);
    ck_assert_int_eq(kiln_resource_set(world, a, NULL), KILN_OK); /* a zero value, replaced next */
    test_owned va = test_owned_make(10), vb = test_owned_make(20), vc = test_owned_make(30);
    ck_assert_int_eq(kiln_resource_set(world, a, &va), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(world, b, &vb), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(world, c, &vc), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(world, score_id, &(score){1, 1}), KILN_OK);
    ck_assert_int_eq(kiln_resource_remove(world, b, NULL), KILN_OK);
    /* an entity owning a value is destroyed with the world as well, separately */
    kiln_entity e;
    test_owned ve = test_owned_make(40);
    ck_assert_int_eq(kiln_spawn_with(world, &a, (const void *[]){&ve}, 1, &e), KILN_OK);
    int64_t destroyed = log.destroyed;
    kiln_world_destroy(world);
    ck_assert_int_eq(log.destroyed, destroyed + 3);
    ck_assert_int_eq(test_hook_log_count(&log, 10), 1);
    ck_assert_int_eq(test_hook_log_count(&log, 20), 1);
    ck_assert_int_eq(test_hook_log_count(&log, 30), 1);
    ck_assert_int_eq(test_hook_log_count(&log, 40), 1);
    ck_assert_int_eq(log.bad_payload, 0);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

/* A destroy hook that, when the world dies, sets resources (one whose id lies past the table
 * as it was, one already destroyed) and removes one not destroyed yet. */
typedef struct teardown_meddler {
    kiln_world *world;
    kiln_component late, early, other;
    kiln_result set_late, set_early, remove_other;
    bool removed_other;
    char message[256];
    int32_t runs;
} teardown_meddler;

static void meddle_on_destroy(void *ptr, int32_t count, void *ctx) {
    (void)ptr, (void)count;
    teardown_meddler *m = ctx;
    if (m->runs++ > 0) return;
    m->set_early = kiln_resource_set(m->world, m->early, &(score){7, 7});
    m->set_late = kiln_resource_set(m->world, m->late, &(score){8, 8});
    snprintf(m->message, sizeof m->message, "%s", kiln_world_error(m->world));
    m->remove_other = kiln_resource_remove(m->world, m->other, &m->removed_other);
}

KILN_TEST(hooks, a_destroy_hook_changing_resources_while_the_world_dies_leaks_nothing) {
    test_hook_log log;
    memset(&log, 0, sizeof log);
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    teardown_meddler m = {.world = world, .set_late = -1, .set_early = -1, .remove_other = -1};
    m.early = register_score(world);
    kiln_component meddler;
    ck_assert_int_eq(kiln_component_register(world, &(kiln_component_desc){
                                                        .name = "Meddler", .size = 8,
                                                        .destroy = meddle_on_destroy,
                                                        .hook_ctx = &m},
                                             &meddler),
                     KILN_OK);
    m.other = register_owned_named(world, &log, "OwnedLater");
    /* a type whose id lies far past the resource table's first capacity */
    for (int32_t i = 0; i < 40; i++) {
        char name[32];
        snprintf(name, sizeof name, "Filler%d", (int)i);
        ck_assert_int_eq(kiln_component_register(world, &(kiln_component_desc){.name = name, .size = 16},
                                                 &m.late),
                         KILN_OK);
    }
    ck_assert_int_eq(kiln_resource_set(world, m.early, &(score){1, 1}), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(world, meddler, NULL), KILN_OK);
    test_owned v = test_owned_make(3);
    ck_assert_int_eq(kiln_resource_set(world, m.other, &v), KILN_OK);
    kiln_world_destroy(world);
    ck_assert_int_eq(m.runs, 1);
    /* changes are refused while the world dies, with a message saying why */
    ck_assert_int_eq(m.set_early, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(m.set_late, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(m.message, "kiln_resource_set: cannot set Filler39 while the world is being "
                                "destroyed (from a destroy hook)");
    /* a removal of one not destroyed yet still destroys it, once */
    ck_assert_int_eq(m.remove_other, KILN_OK);
    ck_assert(m.removed_other);
    ck_assert_int_eq(test_hook_log_count(&log, 3), 1);
    ck_assert_int_eq(log.destroyed, 1);
    ck_assert_int_eq(alloc.live_blocks, 0);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

/* kiln_resource_set replacing a value runs the old value's destroy hook in place, then writes
 * the new one there: a set of the same resource from that hook destroyed it twice (or recursed),
 * a removal freed the block the write then went to. Both fail; another resource may change. */
typedef struct self_meddler {
    kiln_world *world;
    kiln_component self, other;
    int32_t destroyed;
    kiln_result set_self, remove_self, set_other;
    char message[256];
} self_meddler;

static void meddle_with_self(void *ptr, int32_t count, void *ctx) {
    self_meddler *m = ctx;
    m->destroyed += count;
    if (*(const int64_t *)ptr != 1) return; /* only while the first value goes */
    m->set_self = kiln_resource_set(m->world, m->self, &(int64_t){3});
    snprintf(m->message, sizeof m->message, "%s", kiln_world_error(m->world));
    m->remove_self = kiln_resource_remove(m->world, m->self, NULL);
    m->set_other = kiln_resource_set(m->world, m->other, &(score){5, 5});
}

KILN_TEST(hooks, a_resource_changed_from_its_own_destroy_hook_while_replaced_is_refused) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    self_meddler m = {.world = world, .set_self = -1, .remove_self = -1, .set_other = -1};
    m.other = register_score(world);
    ck_assert_int_eq(kiln_component_register(world, &(kiln_component_desc){.name = "SelfMeddler", .size = 8,
                                                                           .destroy = meddle_with_self,
                                                                           .hook_ctx = &m}, &m.self),
                     KILN_OK);
    ck_assert_int_eq(kiln_resource_set(world, m.self, &(int64_t){1}), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(world, m.self, &(int64_t){2}), KILN_OK);
    ck_assert_int_eq(m.set_self, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(m.message, "kiln_resource_set: resource SelfMeddler is being replaced (called from the "
                                "destroy hook of its old value)");
    ck_assert_int_eq(m.remove_self, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(m.set_other, KILN_OK); /* another resource is no part of the replace */
    ck_assert_int_eq(m.destroyed, 1);
    ck_assert_int_eq(*(const int64_t *)kiln_resource_get(world, m.self), 2);
    ck_assert_int_eq(((const score *)kiln_resource_get(world, m.other))->points, 5);
    /* once the replace is done, the flag is gone: the hook's own resource changes again */
    ck_assert_int_eq(kiln_resource_set(world, m.self, &(int64_t){4}), KILN_OK);
    ck_assert_int_eq(m.destroyed, 2);
    bool removed = false;
    ck_assert_int_eq(kiln_resource_remove(world, m.self, &removed), KILN_OK);
    ck_assert(removed && m.destroyed == 3);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_blocks, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* failures                                                                                   */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(failures);

KILN_TEST(failures, an_unknown_component_id_fails_with_the_world_unchanged) {
    test_hook_log log;
    memset(&log, 0, sizeof log);
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_component owned = test_register_owned(world, &log);
    kiln_component type = register_score(world);
    ck_assert_int_eq(kiln_resource_set(world, type, &(score){8, 8}), KILN_OK);
    kiln_event_type ev;
    ck_assert_int_eq(kiln_event_register(world, &(kiln_component_desc){.name = "OnlyEvent", .size = 4}, &ev),
                     KILN_OK);
    int64_t bytes = alloc.live_bytes, allocations = alloc.allocations;
    kiln_component unknown[] = {KILN_NO_COMPONENT, type + 1, 1000, 0xffffffffu};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        kiln_world_clear_error(world);
        test_owned v = test_owned_make(77);
        ck_assert_int_eq(kiln_resource_set(world, unknown[i], &v), KILN_ERR_UNKNOWN_COMPONENT);
        ck_assert_str_ne(kiln_world_error(world), "");
        test_owned_release(&v); /* the caller still owns a value a failed set did not take */
        kiln_world_clear_error(world);
        bool removed = true;
        ck_assert_int_eq(kiln_resource_remove(world, unknown[i], &removed), KILN_ERR_UNKNOWN_COMPONENT);
        ck_assert_str_ne(kiln_world_error(world), "");
        ck_assert(!kiln_resource_has(world, unknown[i]));
        ck_assert_ptr_null(kiln_resource_get(world, unknown[i]));
    }
    ck_assert_int_eq(log.destroyed, 0);
    ck_assert_int_eq(alloc.live_bytes, bytes);
    ck_assert_int_eq(alloc.allocations, allocations);
    ck_assert_int_eq(kiln_component_count(world), 2);
    ck_assert(!kiln_resource_has(world, owned));
    ck_assert_int_eq(((const score *)kiln_resource_get(world, type))->points, 8);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

KILN_TEST(failures, resource_set_out_of_memory_leaves_the_resource_absent) {
    test_hook_log log;
    memset(&log, 0, sizeof log);
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_component owned = test_register_owned(world, &log);
    /* a high id, so the first set has to grow the world's resource table too */
    kiln_component high = KILN_NO_COMPONENT;
    for (int i = 0; i < 40; i++) {
        char name[32];
        snprintf(name, sizeof name, "Filler%d", i);
        high = test_register_tag(world, name);
    }
    kiln_component big;
    ck_assert_int_eq(kiln_component_register(world, &(kiln_component_desc){.name = "Big", .size = 256},
                                             &big),
                     KILN_OK);
    ck_assert_uint_gt(big, high);
    kiln_component targets[2] = {owned, big};
    for (int t = 0; t < 2; t++) {
        kiln_component type = targets[t];
        int64_t failures = alloc.failures;
        for (int64_t k = 0;; k++) {
            ck_assert_int_lt(k, 100);
            test_owned v = test_owned_make(100 + (int32_t)t);
            unsigned char raw[256];
            memset(raw, 0x42, sizeof raw);
            const void *value = type == owned ? (const void *)&v : raw;
            int64_t destroyed = log.destroyed;
            test_allocator_fail_after(&alloc, k);
            kiln_result r = kiln_resource_set(world, type, value);
            test_allocator_fail_never(&alloc);
            if (r == KILN_OK) {
                if (type != owned) test_owned_release(&v);
                break;
            }
            ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
            ck_assert_str_ne(kiln_world_error(world), "");
            ck_assert(!kiln_resource_has(world, type));
            ck_assert_ptr_null(kiln_resource_get(world, type));
            ck_assert_int_eq(log.destroyed, destroyed); /* the value was not taken, nor destroyed */
            ck_assert_int_eq(*v.payload, 100 + t);
            test_owned_release(&v);
        }
        ck_assert_int_gt(alloc.failures, failures); /* the set did need memory */
        ck_assert(kiln_resource_has(world, type));
        if (type == owned) ck_assert_int_eq(((const test_owned *)kiln_resource_get(world, type))->id, 100);
        else ck_assert_uint_eq(((const unsigned char *)kiln_resource_get(world, type))[255], 0x42);
    }
    kiln_world_destroy(world);
    ck_assert_int_eq(test_hook_log_count(&log, 100), 1);
    ck_assert_int_eq(alloc.live_bytes, 0);
    ck_assert_int_eq(alloc.bad_osize, 0);
}

KILN_TEST(failures, replacing_and_removing_a_resource_need_no_memory) {
    test_hook_log log;
    memset(&log, 0, sizeof log);
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_component owned = test_register_owned(world, &log);
    test_owned v = test_owned_make(1);
    ck_assert_int_eq(kiln_resource_set(world, owned, &v), KILN_OK);
    test_allocator_fail_after(&alloc, 0);
    for (int32_t id = 2; id < 20; id++) {
        test_owned next = test_owned_make(id);
        ck_assert_int_eq(kiln_resource_set(world, owned, &next), KILN_OK);
    }
    ck_assert_int_eq(kiln_resource_remove(world, owned, NULL), KILN_OK);
    ck_assert_int_eq(alloc.failures, 0);
    test_allocator_fail_never(&alloc);
    ck_assert_int_eq(log.destroyed, 19);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* schedule                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void add_score(const kiln_system_ctx *ctx) {
    kiln_component *type = ctx->user;
    score *s = kiln_resource_get(ctx->world, *type);
    if (s) s->points += 1;
}

static void read_score(const kiln_system_ctx *ctx) {
    (void)ctx;
}

/* A resource's check hook: refuses negative points, naming them. */
static kiln_result check_points(const kiln_world *world, kiln_entity entity, const void *value, void *ctx,
                                char *why, size_t why_size) {
    (void)world, (void)ctx;
    ck_assert_uint_eq(entity, KILN_NULL_ENTITY);
    const score *s = value;
    if (!s || s->points >= 0) return KILN_OK;
    snprintf(why, why_size, "Score refuses %lld points", (long long)s->points);
    return KILN_ERR_INVALID_ARGUMENT;
}

KILN_TEST(failures, resource_set_runs_the_check_hook_and_a_refusal_changes_nothing) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_component type;
    ck_assert_int_eq(kiln_component_register(world, &(kiln_component_desc){.name = "Score", .size = sizeof(score),
                                                                           .check = check_points},
                                             &type),
                     KILN_OK);
    int64_t bytes = alloc.live_bytes;
    ck_assert_int_eq(kiln_resource_set(world, type, &(score){-1, 1}), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(world), "kiln_resource_set: Score refuses -1 points");
    ck_assert(!kiln_resource_has(world, type)); /* a first set refused: nothing allocated */
    ck_assert_int_eq(alloc.live_bytes, bytes);
    ck_assert_int_eq(kiln_resource_set(world, type, &(score){5, 1}), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(world, type, &(score){-2, 1}), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(((const score *)kiln_resource_get(world, type))->points, 5); /* a replace refused */
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

KILN_TEST_GROUP_WITH(schedule, .setup = setup, .teardown = teardown);

KILN_TEST(schedule, systems_declaring_resource_access_are_staged_like_component_access) {
    kiln_component score_id = register_score(F.w);
    kiln_component config = test_register_tag(F.w, "Config");
    ck_assert_int_eq(kiln_resource_set(F.w, score_id, &(score){0, 1}), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(F.w, config, NULL), KILN_OK);
    kiln_schedule *s = kiln_schedule_create(F.w, NULL);
    ck_assert_ptr_nonnull(s);
    /* two readers share a stage; the writer declared after them waits for them, and the
     * reader declared after the writer waits for it; the Config writer waits only for the
     * Config reader */
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "hud", .run = read_score,
                                                               .reads = {score_id}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "log", .run = read_score,
                                                               .reads = {score_id, config}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "scoring", .run = add_score,
                                                               .user = &score_id,
                                                               .writes = {score_id}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "save", .run = read_score,
                                                               .reads = {score_id}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "tweak", .run = read_score,
                                                               .writes = {config}}),
                     KILN_OK);
    char text[256];
    size_t len = kiln_schedule_describe(s, text, sizeof text);
    ck_assert_uint_eq(len, strlen(text));
    ck_assert_str_eq(text, "stage 0: hud, log\nstage 1: scoring, tweak\nstage 2: save\n");
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(((const score *)kiln_resource_get(F.w, score_id))->points, 2);
    kiln_schedule_destroy(s);
}

KILN_TEST(schedule, two_writers_of_one_resource_never_share_a_stage) {
    kiln_component score_id = register_score(F.w);
    kiln_component pos = test_register_position(F.w);
    kiln_schedule *s = kiln_schedule_create(F.w, NULL);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "a", .run = add_score,
                                                               .user = &score_id, .writes = {score_id}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "move", .run = read_score,
                                                               .writes = {pos}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "b", .run = add_score,
                                                               .user = &score_id, .writes = {score_id}}),
                     KILN_OK);
    char text[128];
    kiln_schedule_describe(s, text, sizeof text);
    ck_assert_str_eq(text, "stage 0: a, move\nstage 1: b\n");
    kiln_schedule_destroy(s);
}
