/* core_demo.c: a small tour of the kiln core: components, spawning, a query that moves
 * entities, change ticks and an error message. Built by `make demo`. */
#include <stdio.h>

#include "kiln.h"

typedef struct Position { float x, y; } Position;
typedef struct Velocity { float x, y; } Velocity;

static const kiln_field position_fields[] = {
    {.name = "x", .type = KILN_TYPE_FLOAT, .offset = offsetof(Position, x)},
    {.name = "y", .type = KILN_TYPE_FLOAT, .offset = offsetof(Position, y)},
};

int main(void) {
    kiln_world *world = kiln_world_create(NULL);
    if (!world) return 1;
    kiln_component pos, vel, frozen;
    kiln_component_register(world, &(kiln_component_desc){.name = "Position", .size = sizeof(Position),
        .fields = position_fields, .field_count = 2}, &pos);
    kiln_component_register(world, &(kiln_component_desc){.name = "Velocity", .size = sizeof(Velocity)}, &vel);
    kiln_component_register(world, &(kiln_component_desc){.name = "Frozen"}, &frozen);

    for (int i = 0; i < 1000; i++) {
        Position p = {(float)i, 0};
        Velocity v = {1, (float)(i % 3)};
        kiln_entity e;
        kiln_spawn_with(world, (kiln_component[]){pos, vel}, (const void *[]){&p, &v}, 2, &e);
        if (i % 10 == 0) kiln_add(world, e, frozen, NULL);
    }

    kiln_query *moving;
    kiln_query_create(world, &(kiln_query_desc){.with = {pos, vel}, .without = {frozen}}, &moving);
    for (int frame = 0; frame < 60; frame++) {
        kiln_tick_advance(world);
        kiln_iter it;
        kiln_query_iter(moving, &it);
        while (kiln_query_next(&it)) {
            Position *p = it.columns[0];
            const Velocity *v = it.columns[1];
            for (int32_t row = 0; row < it.count; row++) {
                p[row].x += v[row].x / 60.0f;
                p[row].y += v[row].y / 60.0f;
                kiln_iter_mark_changed(&it, 0, row);
            }
        }
    }

    kiln_world_stats stats;
    kiln_world_stats_get(world, &stats);
    printf("entities %lld, moving %lld, archetypes %d, bytes %lld\n", (long long)stats.entities,
           (long long)kiln_query_count(moving), stats.archetypes, (long long)stats.bytes);

    kiln_entity first = kiln_entity_make(1, 1);
    const Position *p = kiln_get(world, first, pos);
    printf("entity 1v1 at (%.2f, %.2f), changed at tick %u\n", p->x, p->y,
           (unsigned)kiln_changed_tick(world, first, pos));

    kiln_despawn(world, first);
    if (kiln_set(world, first, pos, &(Position){0, 0}) != KILN_OK)
        printf("expected error: %s\n", kiln_world_error(world));
    kiln_query_destroy(moving);
    kiln_world_destroy(world);
    return 0;
}
