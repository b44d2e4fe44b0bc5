/* components.c: registration of the asteroid game's components with reflected fields.
 * The field tables must match the structs in components.h exactly: Lua sees only these. */
#include <stddef.h>

#include "components.h"

#define FIELD(st, member, kind) {.name = #member, .type = kind, .offset = offsetof(st, member)}

static const kiln_field position_fields[] = {
    FIELD(Position, x, KILN_TYPE_FLOAT),
    FIELD(Position, y, KILN_TYPE_FLOAT),
};
static const kiln_field velocity_fields[] = {
    FIELD(Velocity, x, KILN_TYPE_FLOAT),
    FIELD(Velocity, y, KILN_TYPE_FLOAT),
};
static const kiln_field asteroid_fields[] = {
    FIELD(Asteroid, radius, KILN_TYPE_FLOAT),
    FIELD(Asteroid, size, KILN_TYPE_INT32),
};
static const kiln_field ship_fields[] = {
    FIELD(Ship, radius, KILN_TYPE_FLOAT),
    FIELD(Ship, hull, KILN_TYPE_FLOAT),
    FIELD(Ship, incoming, KILN_TYPE_FLOAT),
    FIELD(Ship, wave, KILN_TYPE_INT32),
};
static const kiln_field orbit_fields[] = {
    FIELD(Orbit, radius, KILN_TYPE_FLOAT),
    FIELD(Orbit, speed, KILN_TYPE_FLOAT),
    FIELD(Orbit, angle, KILN_TYPE_FLOAT),
};
static const kiln_field score_fields[] = {
    FIELD(Score, points, KILN_TYPE_INT64),
    FIELD(Score, damage, KILN_TYPE_DOUBLE),
    FIELD(Score, destroyed, KILN_TYPE_INT32),
    FIELD(Score, launched, KILN_TYPE_INT32),
    FIELD(Score, lost, KILN_TYPE_INT32),
    FIELD(Score, wave, KILN_TYPE_INT32),
};
static const kiln_field collision_fields[] = {
    FIELD(Collision, ship, KILN_TYPE_ENTITY),
    FIELD(Collision, asteroid, KILN_TYPE_ENTITY),
    FIELD(Collision, tick, KILN_TYPE_UINT32),
};

#define COUNT(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))
#define DESC(type, table) \
    (&(kiln_component_desc){.name = #type, .size = sizeof(type), .fields = table, \
                            .field_count = COUNT(table)})

kiln_result game_components_register(kiln_world *world, game_ids *dest) {
    kiln_result r;
    if ((r = kiln_transform_init(world, &dest->transform)) != KILN_OK) return r;
    if ((r = kiln_component_register(world, DESC(Position, position_fields), &dest->position)) ||
        (r = kiln_component_register(world, DESC(Velocity, velocity_fields), &dest->velocity)) ||
        (r = kiln_component_register(world, DESC(Asteroid, asteroid_fields), &dest->asteroid)) ||
        (r = kiln_component_register(world, DESC(Ship, ship_fields), &dest->ship)) ||
        (r = kiln_component_register(world, DESC(Orbit, orbit_fields), &dest->orbit)) ||
        (r = kiln_component_register(world, DESC(Score, score_fields), &dest->score)) ||
        (r = kiln_event_register(world, DESC(Collision, collision_fields), &dest->collision)))
        return r;
    return kiln_resource_set(world, dest->score, NULL);
}
