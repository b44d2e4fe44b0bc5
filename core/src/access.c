/* access.c: spawning, despawning and per-entity component access. Invariant: every call
 * checks all of its inputs and reserves all memory before it changes anything, so a failure
 * leaves the world exactly as it was. */
#include <stdlib.h>
#include <string.h>

#include "archetype.h"
#include "component.h"
#include "entity.h"

#define KL_SPAWN_MAX 256

static const char *ename(kiln_entity e, char *buf) { return kiln_entity_format(e, buf, 24); }

static kiln_result dead(kiln_world *world, const char *call, kiln_entity e) {
    char eb[24];
    if (e == KILN_NULL_ENTITY)
        return kl_fail(world, KILN_ERR_DEAD_ENTITY, "%s: entity is null", call);
    return kl_fail(world, KILN_ERR_DEAD_ENTITY, "%s: entity %s is not alive", call, ename(e, eb));
}

static kiln_result unknown(kiln_world *world, const char *call, kiln_component c) {
    return kl_fail(world, KILN_ERR_UNKNOWN_COMPONENT, "%s: component #%u is not registered", call,
                   (unsigned)c);
}

static kiln_result missing(kiln_world *world, const char *call, kiln_entity e,
                           const kl_component *c) {
    char eb[24];
    return kl_fail(world, KILN_ERR_MISSING_COMPONENT, "%s: entity %s has no %s", call,
                   ename(e, eb), c->names);
}

static kiln_result oom(kiln_world *world, const char *call) {
    return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
}

static void assert_not_iterating(const kiln_world *world) {
    KILN_ASSERT(world->iterating == 0,
                "structural change (spawn, despawn, add, remove) while a query iterates");
    (void)world;
}

/* Resolves entity and component for a call, failing with the world error set. */
static kiln_result resolve(kiln_world *world, const char *call, kiln_entity e, kiln_component c,
                           kl_record **rec, const kl_component **comp) {
    *rec = kl_record_of(world, e);
    if (!*rec) return dead(world, call, e);
    *comp = kl_component_get(world, c);
    if (!*comp) return unknown(world, call, c);
    return KILN_OK;
}

bool kiln_is_alive(const kiln_world *world, kiln_entity entity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return kl_record_of(world, entity) != NULL;
}

kiln_result kiln_spawn(kiln_world *world, kiln_entity *dest) {
    return kiln_spawn_with(world, NULL, NULL, 0, dest);
}

typedef struct spawn_term {
    kiln_component id;
    int32_t input; /* index in the caller's list */
} spawn_term;

static int compare_terms(const void *a, const void *b) {
    kiln_component x = ((const spawn_term *)a)->id, y = ((const spawn_term *)b)->id;
    return (x > y) - (x < y);
}

/* Validates a component list and finds (or creates) its archetype; column[i] receives the
 * column of the caller's i-th component (-1 for a tag) when column is not NULL. */
static kl_archetype *archetype_for(kiln_world *world, const char *call,
                                   const kiln_component *components, int32_t count,
                                   int32_t *column, kiln_result *result) {
    *result = KILN_ERR_INVALID_ARGUMENT;
    if (count < 0 || count > KL_SPAWN_MAX || (count > 0 && components == NULL)) {
        kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: component count %d out of range (0 to %d)",
                call, (int)count, KL_SPAWN_MAX);
        return NULL;
    }
    if (count == 0) return world->archetypes[0];
    if (count <= KL_SPAWN_CACHE && count == world->spawn_key_count &&
        memcmp(components, world->spawn_key, sizeof(kiln_component) * (size_t)count) == 0) {
        if (column) memcpy(column, world->spawn_column, sizeof(int32_t) * (size_t)count);
        return world->spawn_arch;
    }
    spawn_term terms[KL_SPAWN_MAX];
    kiln_component types[KL_SPAWN_MAX];
    for (int32_t i = 0; i < count; i++) {
        if (!kl_component_get(world, components[i])) {
            *result = unknown(world, call, components[i]);
            return NULL;
        }
        terms[i].id = components[i];
        terms[i].input = i;
    }
    qsort(terms, (size_t)count, sizeof terms[0], compare_terms);
    for (int32_t i = 0; i < count; i++) {
        if (i > 0 && terms[i].id == terms[i - 1].id) {
            kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: %s is listed twice", call,
                    kl_component_get(world, terms[i].id)->names);
            return NULL;
        }
        types[i] = terms[i].id;
    }
    kl_archetype *arch = kl_archetype_ensure(world, types, count, call);
    if (!arch) {
        *result = KILN_ERR_OUT_OF_MEMORY;
        return NULL;
    }
    int32_t cols[KL_SPAWN_MAX];
    for (int32_t i = 0; i < count; i++) cols[terms[i].input] = arch->column_of[i];
    if (column) memcpy(column, cols, sizeof(int32_t) * (size_t)count);
    if (count <= KL_SPAWN_CACHE) {
        memcpy(world->spawn_key, components, sizeof(kiln_component) * (size_t)count);
        memcpy(world->spawn_column, cols, sizeof(int32_t) * (size_t)count);
        world->spawn_key_count = count;
        world->spawn_arch = arch;
    }
    return arch;
}

kiln_result kiln_spawn_with(kiln_world *world, const kiln_component *components,
                            const void *const *values, int32_t count, kiln_entity *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    assert_not_iterating(world);
    int32_t column[KL_SPAWN_MAX];
    kiln_result r;
    kl_archetype *arch = archetype_for(world, "spawn", components, count, column, &r);
    if (!arch) return r;
    r = kl_entities_reserve(world, 1, "spawn");
    if (r != KILN_OK) return r;
    if (!kl_archetype_reserve(world, arch, 1)) return oom(world, "spawn");

    kiln_entity e = kl_entity_take(world);
    int32_t row = kl_archetype_push(arch, e);
    for (int32_t i = 0; i < count; i++) {
        if (column[i] < 0) continue;
        kl_column_write(&arch->columns[column[i]], row, values ? values[i] : NULL, world->tick);
    }
    kl_record *rec = &world->records[kiln_entity_index(e)];
    rec->archetype = arch->id;
    rec->row = (uint32_t)row;
    if (dest) *dest = e;
    return KILN_OK;
}

kiln_result kiln_spawn_batch(kiln_world *world, const kiln_component *components, int32_t count,
                             int32_t n, kiln_entity *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    assert_not_iterating(world);
    if (n < 0)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "spawn_batch: n is negative (%d)", (int)n);
    kiln_result r;
    kl_archetype *arch = archetype_for(world, "spawn_batch", components, count, NULL, &r);
    if (!arch) return r;
    r = kl_entities_reserve(world, n, "spawn_batch");
    if (r != KILN_OK) return r;
    if (!kl_archetype_reserve(world, arch, n)) return oom(world, "spawn_batch");

    int32_t first = arch->count;
    for (int32_t i = 0; i < n; i++) {
        kiln_entity e = kl_entity_take(world);
        int32_t row = kl_archetype_push(arch, e);
        kl_record *rec = &world->records[kiln_entity_index(e)];
        rec->archetype = arch->id;
        rec->row = (uint32_t)row;
        if (dest) dest[i] = e;
    }
    for (int32_t c = 0; c < arch->column_count && n > 0; c++) {
        kl_column *col = &arch->columns[c];
        memset(col->data + (size_t)first * col->stride, 0, (size_t)n * col->stride);
        for (int32_t i = 0; i < n; i++) col->ticks[first + i] = world->tick;
        kl_column_touch(col, world->tick);
    }
    return KILN_OK;
}

kiln_result kiln_despawn(kiln_world *world, kiln_entity entity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    assert_not_iterating(world);
    kl_record *rec = kl_record_of(world, entity);
    if (!rec) return dead(world, "despawn", entity);
    kl_archetype *arch = world->archetypes[rec->archetype];
    int32_t row = (int32_t)rec->row;
    kl_archetype_destroy_row(arch, row);
    kl_archetype_remove_row(world, arch, row);
    kl_entity_release(world, entity);
    return KILN_OK;
}

/* Destroys the value in col at row and writes value over it, stamping it changed. */
static void replace(kiln_world *world, kl_column *col, int32_t row, const void *value) {
    const kl_component *c = col->component;
    void *dst = col->data + (size_t)row * col->stride;
    if (value == dst) { /* writing a value onto itself: keep it, just stamp */
        col->ticks[row] = world->tick;
        kl_column_touch(col, world->tick);
        return;
    }
    if (c->destroy) c->destroy(dst, 1, c->hook_ctx);
    kl_column_write(col, row, value, world->tick);
}

kiln_result kiln_add(kiln_world *world, kiln_entity entity, kiln_component component,
                     const void *value) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_record *rec;
    const kl_component *comp;
    kiln_result r = resolve(world, "add", entity, component, &rec, &comp);
    if (r != KILN_OK) return r;
    kl_archetype *arch = world->archetypes[rec->archetype];
    int32_t t = kl_archetype_type_index(arch, component);
    if (t >= 0) {
        if (arch->column_of[t] >= 0)
            replace(world, &arch->columns[arch->column_of[t]], (int32_t)rec->row, value);
        return KILN_OK;
    }
    assert_not_iterating(world);
    kl_archetype *dst = kl_archetype_with(world, arch, component, "add");
    if (!dst) return KILN_ERR_OUT_OF_MEMORY;
    if (!kl_archetype_reserve(world, dst, 1)) return oom(world, "add");
    int32_t row = kl_archetype_move(world, arch, (int32_t)rec->row, dst);
    kl_column *col = kl_archetype_column(dst, component);
    if (col) kl_column_write(col, row, value, world->tick);
    return KILN_OK;
}

kiln_result kiln_remove(kiln_world *world, kiln_entity entity, kiln_component component,
                        bool *removed) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_record *rec;
    const kl_component *comp;
    kiln_result r = resolve(world, "remove", entity, component, &rec, &comp);
    if (r != KILN_OK) return r;
    kl_archetype *arch = world->archetypes[rec->archetype];
    if (kl_archetype_type_index(arch, component) < 0) {
        if (removed) *removed = false;
        return KILN_OK;
    }
    assert_not_iterating(world);
    kl_archetype *dst = kl_archetype_without(world, arch, component, "remove");
    if (!dst) return KILN_ERR_OUT_OF_MEMORY;
    if (!kl_archetype_reserve(world, dst, 1)) return oom(world, "remove");
    kl_archetype_move(world, arch, (int32_t)rec->row, dst);
    if (removed) *removed = true;
    return KILN_OK;
}

bool kiln_has(const kiln_world *world, kiln_entity entity, kiln_component component) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const kl_record *rec = kl_record_of(world, entity);
    if (!rec) return false;
    return kl_archetype_type_index(world->archetypes[rec->archetype], component) >= 0;
}

const void *kiln_get(const kiln_world *world, kiln_entity entity, kiln_component component) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const kl_record *rec = kl_record_of(world, entity);
    if (!rec) return NULL;
    const kl_column *col = kl_archetype_column(world->archetypes[rec->archetype], component);
    if (!col) return NULL;
    return col->data + (size_t)rec->row * col->stride;
}

/* The column of a live entity's component for a writing call, or NULL with the error set. */
static kl_column *writable(kiln_world *world, const char *call, kiln_entity entity,
                           kiln_component component, kiln_result *result, bool *tag) {
    kl_record *rec;
    const kl_component *comp;
    *tag = false;
    *result = resolve(world, call, entity, component, &rec, &comp);
    if (*result != KILN_OK) return NULL;
    kl_archetype *arch = world->archetypes[rec->archetype];
    int32_t t = kl_archetype_type_index(arch, component);
    if (t < 0) {
        *result = missing(world, call, entity, comp);
        return NULL;
    }
    if (arch->column_of[t] < 0) {
        *tag = true;
        return NULL;
    }
    return &arch->columns[arch->column_of[t]];
}

void *kiln_get_mut(kiln_world *world, kiln_entity entity, kiln_component component) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kiln_result r;
    bool tag;
    kl_column *col = writable(world, "get_mut", entity, component, &r, &tag);
    if (!col) {
        if (tag)
            kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "get_mut: %s is a tag and has no value",
                    kl_component_get(world, component)->names);
        return NULL;
    }
    int32_t row = (int32_t)world->records[kiln_entity_index(entity)].row;
    col->ticks[row] = world->tick;
    kl_column_touch(col, world->tick);
    return col->data + (size_t)row * col->stride;
}

kiln_result kiln_set(kiln_world *world, kiln_entity entity, kiln_component component,
                     const void *value) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kiln_result r;
    bool tag;
    kl_column *col = writable(world, "set", entity, component, &r, &tag);
    if (!col) return r;
    replace(world, col, (int32_t)world->records[kiln_entity_index(entity)].row, value);
    return KILN_OK;
}

kiln_tick kiln_changed_tick(const kiln_world *world, kiln_entity entity,
                            kiln_component component) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const kl_record *rec = kl_record_of(world, entity);
    if (!rec) return 0;
    const kl_column *col = kl_archetype_column(world->archetypes[rec->archetype], component);
    if (!col) return 0;
    return col->ticks[rec->row];
}
