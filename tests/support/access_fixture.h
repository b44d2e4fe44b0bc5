/* access_fixture.h: what the component access suites share: a world with Position and Velocity
 * on the counting allocator, spawn and read helpers, and snapshots to prove a world unchanged. */
#ifndef KILN_ACCESS_FIXTURE_H
#define KILN_ACCESS_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln.h"
#include "test_support.h"

/*
 * Functions in this header:
 *   access_fixture_setup, access_fixture_teardown, spawn_one, spawn_at, position_of,
 *   archetype_count, assert_message_names, take_snapshot, assert_unchanged.
 */

/* A world on the counting allocator with Position (pos) and Velocity (vel) registered. */
typedef struct access_fixture {
    test_allocator alloc;
    kiln_world *w;
    kiln_component pos, vel;
} access_fixture;

void access_fixture_setup(access_fixture *f);
/* Destroys the world and asserts every byte came back through the right sizes. */
void access_fixture_teardown(access_fixture *f);

/* A new bare entity, asserting the spawn. */
kiln_entity spawn_one(kiln_world *world);

/* A new entity with Position (x, y). */
kiln_entity spawn_at(kiln_world *world, kiln_component pos, float x, float y);

/* The entity's Position, asserting it has one. */
test_position position_of(kiln_world *world, kiln_entity e, kiln_component pos);

/* How many archetypes the world holds (kiln_world_stats). */
int32_t archetype_count(kiln_world *world);

/* The world's error message starts "kiln_<call>: " and names e (unless null) and component
 * (unless NULL). */
void assert_message_names(kiln_world *world, const char *call, kiln_entity e,
                          const char *component);

#define SNAP_MAX 8

typedef struct snapshot {
    int64_t count;
    kiln_world_stats stats;
    bool alive[SNAP_MAX];
    bool has[SNAP_MAX][SNAP_MAX];
    kiln_tick tick[SNAP_MAX][SNAP_MAX];
    unsigned char value[SNAP_MAX][SNAP_MAX][16];
} snapshot;

/* Snapshots: a failed call leaves the world unchanged. take_snapshot records the entity count,
 * stats and, for each of the ne entities and nc components, presence, change tick and the first
 * 16 value bytes; assert_unchanged compares the world now against it. */
void take_snapshot(kiln_world *w, const kiln_entity *e, int ne, const kiln_component *c,
                   int nc, snapshot *dest);

void assert_unchanged(kiln_world *w, const kiln_entity *e, int ne, const kiln_component *c,
                      int nc, const snapshot *before);

#endif /* KILN_ACCESS_FIXTURE_H */
