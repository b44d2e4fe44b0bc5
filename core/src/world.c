/* world.c: world lifetime, the error message, ticks and introspection. Invariant: a world
 * owns every byte it allocated, and destroy returns all of them through the same hook. */
#include "world.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "archetype.h"
#include "commands.h"
#include "entity.h"
#include "events.h"
#include "../../addons/transform/src/transform.h" /* removed by the addon teardown hook */
#include "component.h"
#include "query.h"

kiln_result kl_fail(kiln_world *world, kiln_result code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(world->error, sizeof world->error, fmt, ap);
    va_end(ap);
    return code;
}

const char *kiln_result_name(kiln_result result) {
    switch (result) {
    case KILN_OK: return "ok";
    case KILN_ERR_INVALID_ARGUMENT: return "invalid argument";
    case KILN_ERR_DEAD_ENTITY: return "dead entity";
    case KILN_ERR_MISSING_COMPONENT: return "missing component";
    case KILN_ERR_UNKNOWN_COMPONENT: return "unknown component";
    case KILN_ERR_LAYOUT_MISMATCH: return "layout mismatch";
    case KILN_ERR_OUT_OF_MEMORY: return "out of memory";
    case KILN_ERR_LIMIT: return "limit reached";
    }
    return "unknown result";
}

kiln_world *kiln_world_create(const kiln_world_desc *desc) {
    kl_allocator alloc = {kl_default_alloc, NULL, 0, 0};
    if (desc && desc->alloc) {
        alloc.fn = desc->alloc;
        alloc.ud = desc->alloc_ud;
    }
    kiln_world *world = kl_alloc(&alloc, sizeof *world);
    if (!world) return NULL;
    memset(world, 0, sizeof *world);
    world->alloc = alloc;
    world->tick = 1;
    world->free_head = KL_NONE;
    world->spawn_key_count = -1;
    /* The empty archetype always exists, as id 0, so a bare spawn cannot fail on it later. */
    world->deferred = kl_commands_create(world, true, true);
    if (!world->deferred || !kl_archetype_ensure(world, NULL, 0, "world_create")) {
        kiln_world_destroy(world);
        return NULL;
    }
    return world;
}

void kiln_world_destroy(kiln_world *world) {
    if (world == NULL) return;
    KILN_ASSERT(world->iterating == 0, "world_destroy while a query iterates");
    kiln_commands_destroy(world->deferred); /* queued values are destroyed with it */
    kl_transform_free(world);
    kl_queries_free(world);
    kl_archetypes_free(world);
    kl_map_free(&world->alloc, &world->archetype_index);
    kl_resources_free(world);
    kl_events_free(world);
    kl_registry_free(world, &world->event_types);
    kl_registry_free(world, &world->components);
    kl_entities_free(world);
    kl_allocator alloc = world->alloc;
    kl_free(&alloc, world, sizeof *world);
}

const char *kiln_world_error(const kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return world->error;
}

void kiln_world_clear_error(kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    world->error[0] = '\0';
}

kiln_tick kiln_tick_current(const kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return world->tick;
}

kiln_tick kiln_tick_advance(kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return ++world->tick;
}

void kiln_world_stats_get(const kiln_world *world, kiln_world_stats *dest) {
    KILN_ASSERT(world != NULL && dest != NULL, "world and dest are required");
    dest->entities = world->alive;
    dest->entity_slots = kl_slot_count(world);
    dest->archetypes = world->archetype_count;
    dest->components = world->components.count;
    dest->queries = world->query_count;
    dest->bytes = world->alloc.bytes;
    dest->allocations = world->alloc.calls;
}

int64_t kiln_world_entities(const kiln_world *world, kiln_entity *dest, int64_t capacity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    KILN_ASSERT(capacity == 0 || dest != NULL, "dest is required when capacity > 0");
    int64_t n = 0;
    for (int32_t a = 0; a < world->archetype_count; a++) {
        const kl_archetype *arch = world->archetypes[a];
        for (int32_t r = 0; r < arch->count; r++, n++)
            if (n < capacity) dest[n] = arch->entities[r];
    }
    return n;
}

int64_t kiln_entity_count(const kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return world->alive;
}

char *kiln_entity_format(kiln_entity entity, char *buf, size_t size) {
    if (buf && size) {
        snprintf(buf, size, "%uv%u", (unsigned)kiln_entity_index(entity),
                 (unsigned)kiln_entity_generation(entity));
    }
    return buf;
}
