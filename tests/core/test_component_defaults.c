/* test_component_defaults.c: Check suite for component defaults and check hooks: a value given
 * nowhere starts as the registered default, and a refused value leaves the world unchanged. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* defaults and check hooks                                                                   */
/* ------------------------------------------------------------------------------------------ */

typedef struct health {
    int32_t hp, max;
} health;

static const kiln_field health_fields[] = {
    {.name = "hp", .type = KILN_TYPE_INT32, .offset = offsetof(health, hp)},
    {.name = "max", .type = KILN_TYPE_INT32, .offset = offsetof(health, max)},
};

static const health full_health = {100, 100};

/* Refuses an hp above max or below zero, naming the entity. */
static kiln_result health_check(const kiln_world *world, kiln_entity entity, const void *value,
                                void *ctx, char *why, size_t why_size) {
    (void)world;
    int *calls = ctx;
    (*calls)++;
    health h = value ? *(const health *)value : (health){0, 0};
    if (h.hp >= 0 && h.hp <= h.max) return KILN_OK;
    char eb[32];
    snprintf(why, why_size, "entity %s: hp %d is outside 0 to %d", test_entity_string(entity, eb),
             (int)h.hp, (int)h.max);
    return KILN_ERR_INVALID_ARGUMENT;
}

static kiln_component register_health(kiln_world *w, int *calls) {
    kiln_component id;
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){
                         .name = "Health", .size = sizeof(health), .fields = health_fields,
                         .field_count = 2, .defaults = &full_health, .check = health_check,
                         .hook_ctx = calls}, &id),
                     KILN_OK);
    return id;
}

static void assert_health(kiln_world *w, kiln_entity e, kiln_component c, int hp, int max) {
    const health *h = kiln_get(w, e, c);
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(h->hp, hp);
    ck_assert_int_eq(h->max, max);
}

KILN_TEST_GROUP(defaults_and_checks);

KILN_TEST(defaults_and_checks, a_component_without_a_value_gets_its_registered_defaults_everywhere) {
    kiln_world *w = kiln_world_create(NULL);
    int calls = 0;
    kiln_component c = register_health(w, &calls);
    kiln_component_info info;
    ck_assert(kiln_component_info_get(w, c, &info));
    ck_assert_ptr_nonnull(info.defaults);
    ck_assert_int_eq(memcmp(info.defaults, &full_health, sizeof full_health), 0);
    ck_assert(info.has_check);

    kiln_entity a, b, batch[3], d, p;
    ck_assert_int_eq(kiln_spawn(w, &a), KILN_OK);
    ck_assert_int_eq(kiln_add(w, a, c, NULL), KILN_OK);
    assert_health(w, a, c, 100, 100);
    ck_assert_int_eq(kiln_spawn_with(w, &c, NULL, 1, &b), KILN_OK);
    assert_health(w, b, c, 100, 100);
    ck_assert_int_eq(kiln_spawn_batch(w, &c, 1, 3, batch), KILN_OK);
    for (int i = 0; i < 3; i++) assert_health(w, batch[i], c, 100, 100);
    ck_assert_int_eq(kiln_set(w, a, c, &(health){5, 10}), KILN_OK);
    ck_assert_int_eq(kiln_set(w, a, c, NULL), KILN_OK); /* back to the defaults */
    assert_health(w, a, c, 100, 100);
    /* deferred, through a command buffer, and as a resource */
    kiln_defer_begin(w);
    ck_assert_int_eq(kiln_spawn_with(w, &c, (const void *[]){NULL}, 1, &d), KILN_OK);
    ck_assert_int_eq(kiln_defer_end(w), KILN_OK);
    assert_health(w, d, c, 100, 100);
    kiln_commands *cmd = kiln_commands_create(w);
    ck_assert_int_eq(kiln_commands_spawn(cmd, &p), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, p, c, NULL), KILN_OK);
    ck_assert_int_eq(kiln_commands_apply(cmd, w, NULL), KILN_OK);
    assert_health(w, kiln_commands_resolve(cmd, p), c, 100, 100);
    kiln_commands_destroy(cmd);
    ck_assert_int_eq(kiln_resource_set(w, c, NULL), KILN_OK);
    const health *r = kiln_resource_get(w, c);
    ck_assert_int_eq(r->hp, 100);
    /* a component without defaults still starts at zero */
    kiln_component pos = test_register_position(w);
    ck_assert_int_eq(kiln_add(w, a, pos, NULL), KILN_OK);
    test_assert_position(w, a, pos, 0.0f, 0.0f);
    ck_assert(kiln_component_info_get(w, pos, &info));
    ck_assert_ptr_null(info.defaults);
    kiln_world_destroy(w);
}

static kiln_result health_check_other(const kiln_world *world, kiln_entity entity,
                                      const void *value, void *ctx, char *why, size_t why_size) {
    return health_check(world, entity, value, ctx, why, why_size);
}

KILN_TEST(defaults_and_checks, registering_again_with_other_defaults_or_check_is_a_layout_mismatch) {
    kiln_world *w = kiln_world_create(NULL);
    int calls = 0;
    kiln_component c = register_health(w, &calls), again;
    ck_assert_uint_eq(register_health(w, &calls), c);
    health other = {1, 1};
    kiln_component_desc d = {.name = "Health", .size = sizeof(health), .fields = health_fields,
                             .field_count = 2, .defaults = &other, .check = health_check,
                             .hook_ctx = &calls};
    ck_assert_int_eq(kiln_component_register(w, &d, &again), KILN_ERR_LAYOUT_MISMATCH);
    d.defaults = &full_health;
    d.check = health_check_other;
    ck_assert_int_eq(kiln_component_register(w, &d, &again), KILN_ERR_LAYOUT_MISMATCH);
    /* left NULL, check and defaults take what is registered (a binding declaring the layout
     * again knows nothing of them) */
    d.defaults = NULL;
    d.check = NULL;
    ck_assert_int_eq(kiln_component_register(w, &d, &again), KILN_OK);
    ck_assert_uint_eq(again, c);
    kiln_component_info info;
    ck_assert(kiln_component_info_get(w, c, &info));
    ck_assert(info.has_check);
    ck_assert_ptr_nonnull(info.defaults);
    /* a tag has no value, so neither defaults nor a check */
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = "T",
                                                 .defaults = &full_health}, &again),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = "T",
                                                 .check = health_check}, &again),
                     KILN_ERR_INVALID_ARGUMENT);
    kiln_world_destroy(w);
}

KILN_TEST(defaults_and_checks, a_check_hook_refuses_values_on_every_write_path_and_leaves_the_world_unchanged) {
    kiln_world *w = kiln_world_create(NULL);
    int calls = 0;
    kiln_component c = register_health(w, &calls);
    kiln_component pos = test_register_position(w);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(w, &pos, NULL, 1, &e), KILN_OK);
    health bad = {150, 100};
    char eb[32], expected[128];
    test_entity_string(e, eb);

    ck_assert_int_eq(kiln_add(w, e, c, &bad), KILN_ERR_INVALID_ARGUMENT);
    snprintf(expected, sizeof expected, "kiln_add: entity %s: hp 150 is outside 0 to 100", eb);
    ck_assert_str_eq(kiln_world_error(w), expected);
    ck_assert(!kiln_has(w, e, c));
    ck_assert_int_eq(kiln_add(w, e, c, &(health){50, 100}), KILN_OK);
    ck_assert_int_eq(kiln_set(w, e, c, &bad), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strncmp(kiln_world_error(w), "kiln_set: ", 10) == 0, "%s", kiln_world_error(w));
    assert_health(w, e, c, 50, 100);
    ck_assert_int_eq(kiln_add(w, e, c, &bad), KILN_ERR_INVALID_ARGUMENT); /* replace in place */
    assert_health(w, e, c, 50, 100);

    int64_t before = kiln_entity_count(w);
    kiln_entity f;
    ck_assert_int_eq(kiln_spawn_with(w, &c, (const void *[]){&bad}, 1, &f), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strncmp(kiln_world_error(w), "kiln_spawn_with: ", 17) == 0, "%s",
                  kiln_world_error(w));
    ck_assert_int_eq(kiln_entity_count(w), before);

    /* deferred: refused when called, nothing queued */
    kiln_defer_begin(w);
    ck_assert_int_eq(kiln_set(w, e, c, &bad), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_spawn_with(w, &c, (const void *[]){&bad}, 1, &f), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_defer_end(w), KILN_OK);
    assert_health(w, e, c, 50, 100);
    ck_assert_int_eq(kiln_entity_count(w), before);

    /* a command buffer records without the world and is refused when applied */
    kiln_commands *cmd = kiln_commands_create(w);
    ck_assert_int_eq(kiln_commands_set(cmd, e, c, &bad), KILN_OK);
    ck_assert_int_eq(kiln_commands_apply(cmd, w, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strncmp(kiln_world_error(w), "kiln_commands_apply: ", 21) == 0, "%s",
                  kiln_world_error(w));
    assert_health(w, e, c, 50, 100);
    kiln_commands_destroy(cmd);

    /* on demand, for values written in place */
    ck_assert_int_eq(kiln_component_check(w, e, c, &bad), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strncmp(kiln_world_error(w), "kiln_component_check: ", 22) == 0, "%s",
                  kiln_world_error(w));
    ck_assert_int_eq(kiln_component_check(w, e, c, &(health){1, 2}), KILN_OK);
    ck_assert_int_eq(kiln_component_check(w, e, pos, &bad), KILN_OK); /* no hook */
    ck_assert_int_eq(kiln_component_check(w, e, 999, &bad), KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_int_gt(calls, 8);
    kiln_world_destroy(w);
}

/* A check hook that changes the world anyway (the world is const to it; a cast gets past that). */
typedef struct meddler {
    kiln_world *world;
    int calls;
    kiln_result result;  /* what its despawn of the checked entity returned */
    char message[256];   /* the world's message then */
} meddler;

static kiln_result despawning_check(const kiln_world *world, kiln_entity entity, const void *value, void *ctx,
                                    char *why, size_t why_size) {
    (void)world, (void)value, (void)why, (void)why_size;
    meddler *m = ctx;
    if (m->calls++ == 0) {
        m->result = kiln_despawn(m->world, entity);
        snprintf(m->message, sizeof m->message, "%s", kiln_world_error(m->world));
    }
    return KILN_OK;
}

/* kiln_add found the entity's row before asking the check: a despawn from the hook moved
 * another entity into that row and shrank the archetype, and the add then moved a row past
 * its end (ASan: SEGV in add_value). Changes from a check hook are refused as from a destroy hook. */
KILN_TEST(defaults_and_checks, a_check_hook_changing_the_world_is_refused_and_the_checked_add_lands) {
    kiln_world *w = kiln_world_create(NULL);
    meddler m = {.world = w};
    kiln_component pos, hp;
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = "Pos", .size = 8}, &pos), KILN_OK);
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = "Hp", .size = 4,
                                                                       .check = despawning_check, .hook_ctx = &m},
                                             &hp),
                     KILN_OK);
    kiln_entity es[4];
    for (int i = 0; i < 4; i++) ck_assert_int_eq(kiln_spawn_with(w, &pos, NULL, 1, &es[i]), KILN_OK);
    ck_assert_int_eq(kiln_add(w, es[0], hp, &(int32_t){5}), KILN_OK);
    ck_assert_int_eq(m.result, KILN_ERR_INVALID_ARGUMENT);
    test_assert_names(m.message, "kiln_despawn: called from a component's check hook while kiln_add checks a value");
    ck_assert_int_eq(kiln_entity_count(w), 4);
    ck_assert_int_eq(*(const int32_t *)kiln_get(w, es[0], hp), 5);
    for (int i = 1; i < 4; i++) ck_assert(kiln_has(w, es[i], pos) && !kiln_has(w, es[i], hp));
    kiln_world_destroy(w);
}
