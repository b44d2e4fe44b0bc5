/* access_fixture.c: the component access suites' world, spawn and read helpers and snapshots.
 * Every helper asserts, so a failing step names itself. */
#include "access_fixture.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

void access_fixture_setup(access_fixture *f) {
    test_allocator_init(&f->alloc);
    f->w = test_world_create(&f->alloc);
    f->pos = test_register_position(f->w);
    f->vel = test_register_velocity(f->w);
}

void access_fixture_teardown(access_fixture *f) {
    kiln_world_destroy(f->w);
    f->w = NULL;
    ck_assert_int_eq(f->alloc.live_bytes, 0);
    ck_assert_int_eq(f->alloc.bad_osize, 0);
}

kiln_entity spawn_one(kiln_world *world) {
    kiln_entity e = KILN_NULL_ENTITY;
    ck_assert_int_eq(kiln_spawn(world, &e), KILN_OK);
    return e;
}

kiln_entity spawn_at(kiln_world *world, kiln_component pos, float x, float y) {
    kiln_entity e = spawn_one(world);
    ck_assert_int_eq(kiln_add(world, e, pos, &(test_position){x, y}), KILN_OK);
    return e;
}

test_position position_of(kiln_world *world, kiln_entity e, kiln_component pos) {
    const test_position *p = kiln_get(world, e, pos);
    ck_assert_ptr_nonnull(p);
    return *p;
}

int32_t archetype_count(kiln_world *world) {
    kiln_world_stats stats;
    kiln_world_stats_get(world, &stats);
    return stats.archetypes;
}

void assert_message_names(kiln_world *world, const char *call, kiln_entity e,
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

void take_snapshot(kiln_world *w, const kiln_entity *e, int ne, const kiln_component *c,
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

void assert_unchanged(kiln_world *w, const kiln_entity *e, int ne, const kiln_component *c,
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
