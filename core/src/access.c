/* access.c: spawning, despawning and per-entity component access, immediate or deferred.
 * Invariant: every call checks all of its inputs and reserves all memory before it changes
 * anything, so a failure leaves the world exactly as it was. */
#include "access.h"

#include <stdlib.h>
#include <string.h>

#include "archetype.h"
#include "commands.h"
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

static kiln_result unknown_on(kiln_world *world, const char *call, kiln_entity e, kiln_component c) {
    char eb[24];
    return kl_fail(world, KILN_ERR_UNKNOWN_COMPONENT,
                   "%s: entity %s: component #%u is not registered", call, ename(e, eb),
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

/* Immediate structural changes must not run under an active iteration; iteration defers the
 * world, so reaching this with one active means raw misuse (e.g. a buffer applied in a loop). */
static void assert_not_iterating(const kiln_world *world) {
    KILN_ASSERT(atomic_load_explicit(&world->iterating, memory_order_relaxed) == 0,
                "structural change while a query iterates");
    (void)world;
}

static bool deferred(const kiln_world *world) {
    return atomic_load_explicit(&((kiln_world *)world)->defer_depth, memory_order_relaxed) > 0;
}

/* Where deferred calls are queued: the running main-thread system's buffer, or the world's. */
static kiln_commands *queue_of(const kiln_world *world) {
    return world->defer_target ? world->defer_target : world->deferred;
}

/* Resolves entity and component for a call, failing with the world error set. */
static kiln_result resolve(kiln_world *world, const char *call, kiln_entity e, kiln_component c,
                           kl_record **rec, const kl_component **comp) {
    *rec = kl_record_of(world, e);
    if (!*rec) return dead(world, call, e);
    *comp = kl_component_get(world, c);
    if (!*comp) return unknown_on(world, call, e, c);
    return KILN_OK;
}

bool kiln_is_alive(const kiln_world *world, kiln_entity entity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return kl_record_of(world, entity) != NULL;
}

/* ---- component lists ------------------------------------------------------------------ */

typedef struct spawn_term {
    kiln_component id;
    int32_t input; /* index in the caller's list */
} spawn_term;

static int compare_terms(const void *a, const void *b) {
    kiln_component x = ((const spawn_term *)a)->id, y = ((const spawn_term *)b)->id;
    return (x > y) - (x < y);
}

/* Checks a component list (range, known ids, no repeats) and sorts it into terms. */
static kiln_result check_list(kiln_world *world, const char *call, const kiln_component *components,
                              int32_t count, spawn_term *terms) {
    if (count < 0 || count > KL_SPAWN_MAX || (count > 0 && components == NULL))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "%s: component count %d out of range (0 to %d)", call, (int)count,
                       KL_SPAWN_MAX);
    for (int32_t i = 0; i < count; i++) {
        if (!kl_component_get(world, components[i])) return unknown(world, call, components[i]);
        terms[i].id = components[i];
        terms[i].input = i;
    }
    qsort(terms, (size_t)count, sizeof terms[0], compare_terms);
    for (int32_t i = 1; i < count; i++)
        if (terms[i].id == terms[i - 1].id)
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: %s is listed twice", call,
                           kl_component_get(world, terms[i].id)->names);
    return KILN_OK;
}

/* Finds (or creates) the archetype of a component list; column[i] receives the column of the
 * caller's i-th component (-1 for a tag) when column is not NULL. */
static kl_archetype *archetype_lookup(kiln_world *world, const char *call,
                                      const kiln_component *components, int32_t count,
                                      int32_t *column, kiln_result *result);

/* The spawn cache's hit path stays small (no large frame to set up and probe). */
static inline kl_archetype *archetype_for(kiln_world *world, const char *call,
                                          const kiln_component *components, int32_t count,
                                          int32_t *column, kiln_result *result) {
    if (count > 0 && count <= KL_SPAWN_CACHE && count == world->spawn_key_count && components) {
        int32_t i = 0;
        while (i < count && components[i] == world->spawn_key[i]) i++;
        if (i == count) {
            if (column)
                for (i = 0; i < count; i++) column[i] = world->spawn_column[i];
            return world->spawn_arch;
        }
    }
    return archetype_lookup(world, call, components, count, column, result);
}

__attribute__((noinline)) static kl_archetype *archetype_lookup(kiln_world *world, const char *call,
                                      const kiln_component *components, int32_t count,
                                      int32_t *column, kiln_result *result) {
    spawn_term terms[KL_SPAWN_MAX];
    *result = check_list(world, call, components, count, terms);
    if (*result != KILN_OK) return NULL;
    if (count <= 0) return world->archetypes[0];
    kiln_component types[KL_SPAWN_MAX];
    for (int32_t i = 0; i < count; i++) types[i] = terms[i].id;
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

/* Points a freshly taken or reserved slot at a new row of arch (room reserved). */
static int32_t place(kiln_world *world, kl_archetype *arch, kiln_entity e) {
    int32_t row = kl_archetype_push(world, arch, e);
    kl_record *rec = kl_record_at(world, kiln_entity_index(e));
    rec->archetype = arch->id;
    rec->row = (uint32_t)row;
    world->alive++;
    return row;
}

/* ---- immediate operations -------------------------------------------------------------- */

/* Writes a spawned row's values; the common case (plain bytes into distinct memory) inline. */
static inline void write_value(kiln_world *world, kl_column *col, int32_t row, void *value, bool move) {
    const kl_component *c = col->component;
    uint8_t *dst = col->data + (size_t)row * col->stride;
    if (value && col->plain && c->size == col->stride &&
        ((const uint8_t *)value + c->size <= dst || dst + c->size <= (const uint8_t *)value)) {
        kl_copy_value(dst, value, c->size);
        col->ticks[row] = world->tick;
        kl_column_touch(col, world->tick);
        return;
    }
    kl_column_write(col, row, value, move, world->tick);
}

static kiln_result spawn_values(kiln_world *world, const char *call, const kiln_component *components,
                                void *const *values, int32_t count, bool move, kiln_entity reserved,
                                kiln_entity *dest, int32_t *column, void **vals) {
    kiln_result r = KILN_OK;
    kl_archetype *arch = archetype_for(world, call, components, count, column, &r);
    if (!arch) return r;
    if (reserved == KILN_NULL_ENTITY) {
        r = kl_entities_reserve(world, 1, call);
        if (r != KILN_OK) return r;
    }
    for (int32_t i = 0; i < count; i++) vals[i] = values ? values[i] : NULL;
    if (arch->count == arch->capacity && !kl_archetype_reserve_rebase(world, arch, 1, vals, count))
        return oom(world, call);

    kiln_entity e = reserved ? reserved : kl_entity_take(world);
    int32_t row = place(world, arch, e);
    for (int32_t i = 0; i < count; i++) {
        if (column[i] < 0) continue;
        write_value(world, &arch->columns[column[i]], row, vals[i], move);
    }
    if (dest) *dest = e;
    return KILN_OK;
}

kiln_result kl_spawn_values(kiln_world *world, const char *call, const kiln_component *components,
                            void *const *values, int32_t count, bool move, kiln_entity reserved,
                            kiln_entity *dest) {
    assert_not_iterating(world);
    if (count >= 0 && count <= KL_SPAWN_CACHE) { /* small frames for the usual spawn */
        int32_t column[KL_SPAWN_CACHE];
        void *vals[KL_SPAWN_CACHE];
        return spawn_values(world, call, components, values, count, move, reserved, dest, column, vals);
    }
    int32_t column[KL_SPAWN_MAX];
    void *vals[KL_SPAWN_MAX];
    return spawn_values(world, call, components, values, count, move, reserved, dest, column, vals);
}

kiln_result kl_despawn_entity(kiln_world *world, const char *call, kiln_entity entity) {
    assert_not_iterating(world);
    kl_record *rec = kl_record_of(world, entity);
    if (!rec) return dead(world, call, entity);
    kl_archetype *arch = world->archetypes[rec->archetype];
    int32_t row = (int32_t)rec->row;
    kl_archetype_destroy_row(arch, row);
    kl_archetype_remove_row(world, arch, row);
    kl_entity_release(world, entity);
    return KILN_OK;
}

/* Destroys the value in col at row and writes value over it, stamping it changed. */
static void replace(kiln_world *world, kl_column *col, int32_t row, void *value, bool move) {
    const kl_component *c = col->component;
    void *dst = col->data + (size_t)row * col->stride;
    if (value == dst) { /* writing a value onto itself: keep it, just stamp */
        col->ticks[row] = world->tick;
        kl_column_touch(col, world->tick);
        return;
    }
    if (c->destroy) c->destroy(dst, 1, c->hook_ctx);
    kl_column_write(col, row, value, move, world->tick);
}

kiln_result kl_add_value(kiln_world *world, const char *call, kiln_entity entity,
                         kiln_component component, void *value, bool move) {
    kl_record *rec;
    const kl_component *comp;
    kiln_result r = resolve(world, call, entity, component, &rec, &comp);
    if (r != KILN_OK) return r;
    kl_archetype *arch = world->archetypes[rec->archetype];
    int32_t t = kl_archetype_type_index(arch, component);
    if (t >= 0) {
        if (arch->column_of[t] >= 0)
            replace(world, &arch->columns[arch->column_of[t]], (int32_t)rec->row, value, move);
        return KILN_OK;
    }
    assert_not_iterating(world);
    kl_archetype *dst = kl_archetype_with(world, arch, component, call);
    if (!dst) return KILN_ERR_OUT_OF_MEMORY;
    if (!kl_archetype_reserve_rebase(world, dst, 1, &value, 1)) return oom(world, call);
    kl_archetype_move(world, arch, (int32_t)rec->row, dst, component, value, move);
    return KILN_OK;
}

kiln_result kl_remove_component(kiln_world *world, const char *call, kiln_entity entity,
                                kiln_component component, bool *removed) {
    kl_record *rec;
    const kl_component *comp;
    kiln_result r = resolve(world, call, entity, component, &rec, &comp);
    if (r != KILN_OK) return r;
    kl_archetype *arch = world->archetypes[rec->archetype];
    if (kl_archetype_type_index(arch, component) < 0) {
        if (removed) *removed = false;
        return KILN_OK;
    }
    assert_not_iterating(world);
    kl_archetype *dst = kl_archetype_without(world, arch, component, call);
    if (!dst) return KILN_ERR_OUT_OF_MEMORY;
    if (!kl_archetype_reserve(world, dst, 1)) return oom(world, call);
    kl_archetype_move(world, arch, (int32_t)rec->row, dst, KILN_NO_COMPONENT, NULL, false);
    if (removed) *removed = true;
    return KILN_OK;
}

/* The column of a live entity's component for a writing call, or NULL with the error set
 * (or *tag true: the component is a tag, present, with no value). */
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

kiln_result kl_set_value(kiln_world *world, const char *call, kiln_entity entity,
                         kiln_component component, void *value, bool move) {
    kiln_result r;
    bool tag;
    kl_column *col = writable(world, call, entity, component, &r, &tag);
    if (!col) return r;
    replace(world, col, (int32_t)kl_record_at(world, kiln_entity_index(entity))->row, value, move);
    return KILN_OK;
}

/* ---- deferred recording ---------------------------------------------------------------- */

/* Queues a command for a deferred world call; a failure (out of memory) is reported through
 * the world like any other. */
static kiln_result record(kiln_world *world, kiln_commands *q, kl_op op, kiln_entity e,
                          kiln_component c, const void *value) {
    kiln_result r = kl_commands_record(q, op, e, c, value, false);
    if (r != KILN_OK) kl_fail(world, r, "%s", kiln_commands_error(q));
    return r;
}

/* A deferred call's entity must be alive, or reserved by a deferred spawn. */
static kiln_result check_deferred_target(kiln_world *world, const char *call, kiln_entity e) {
    if (kl_record_of(world, e) || kl_record_reserved(world, e)) return KILN_OK;
    return dead(world, call, e);
}

static kiln_result defer_spawn(kiln_world *world, const char *call, const kiln_component *components,
                               const void *const *values, int32_t count, kiln_entity *dest) {
    spawn_term terms[KL_SPAWN_MAX];
    kiln_result r = check_list(world, call, components, count, terms);
    if (r != KILN_OK) return r;
    r = kl_entities_reserve(world, 1, call);
    if (r != KILN_OK) return r;
    kiln_commands *q = queue_of(world);
    int64_t before = kiln_commands_count(q);
    kiln_entity e = kl_entity_take(world);
    r = record(world, q, KL_OP_MATERIALIZE, e, 0, NULL);
    for (int32_t i = 0; i < count && r == KILN_OK; i++)
        r = record(world, q, KL_OP_ADD, e, components[i], values ? values[i] : NULL);
    if (r != KILN_OK) {
        /* Out of memory part-way: drop what this call queued and give the slot back. */
        kl_commands_truncate(q, before);
        kl_entity_release(world, e);
        return r;
    }
    if (dest) *dest = e;
    return KILN_OK;
}

/* ---- public calls ---------------------------------------------------------------------- */

kiln_result kiln_spawn(kiln_world *world, kiln_entity *dest) {
    return kiln_spawn_with(world, NULL, NULL, 0, dest);
}

kiln_result kiln_spawn_with(kiln_world *world, const kiln_component *components,
                            const void *const *values, int32_t count, kiln_entity *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (deferred(world)) return defer_spawn(world, "spawn", components, values, count, dest);
    return kl_spawn_values(world, "spawn", components, (void *const *)values, count, false,
                           KILN_NULL_ENTITY, dest);
}

kiln_result kiln_spawn_batch(kiln_world *world, const kiln_component *components, int32_t count,
                             int32_t n, kiln_entity *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (n < 0)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "spawn_batch: n is negative (%d)", (int)n);
    if (deferred(world)) {
        kiln_commands *q = queue_of(world);
        int64_t before = kiln_commands_count(q);
        for (int32_t i = 0; i < n; i++) {
            kiln_result r = defer_spawn(world, "spawn_batch", components, NULL, count,
                                        dest ? &dest[i] : NULL);
            if (r != KILN_OK) {
                /* All or nothing: give back every handle this call reserved. */
                kl_commands_unreserve_since(q, before);
                return r;
            }
        }
        return KILN_OK;
    }
    assert_not_iterating(world);
    kiln_result r = KILN_OK;
    kl_archetype *arch = archetype_for(world, "spawn_batch", components, count, NULL, &r);
    if (!arch) return r;
    r = kl_entities_reserve(world, n, "spawn_batch");
    if (r != KILN_OK) return r;
    if (!kl_archetype_reserve(world, arch, n)) return oom(world, "spawn_batch");

    int32_t first = arch->count;
    int32_t i = 0;
    /* Freed slots first, one by one; then fresh slots in one sweep over their records. */
    for (; i < n && world->free_head != KL_NONE; i++) {
        kiln_entity e = kl_entity_take(world);
        place(world, arch, e);
        if (dest) dest[i] = e;
    }
    if (i < n) {
        uint32_t index = kl_slot_count(world);
        int32_t row = arch->count;
        for (; i < n; i++, index++, row++) {
            kl_record *rec = &world->pages[index >> KL_PAGE_BITS][index & (KL_PAGE_SIZE - 1)];
            rec->generation = 1;
            rec->archetype = arch->id;
            rec->row = (uint32_t)row;
            kiln_entity e = kiln_entity_make(index, 1);
            arch->entities[row] = e;
            if (dest) dest[i] = e;
        }
        world->alive += row - arch->count;
        arch->count = row;
        arch->structure_tick = world->tick;
        atomic_store_explicit(&world->slot_count, index, memory_order_release);
    }
    for (int32_t c = 0; c < arch->column_count && n > 0; c++) {
        kl_column *col = &arch->columns[c];
        memset(col->data + (size_t)first * col->stride, 0, (size_t)n * col->stride);
        kiln_tick tick = world->tick;
        kiln_tick *ticks = col->ticks + first;
        for (int32_t k = 0; k < n; k++) ticks[k] = tick;
        kl_column_touch(col, tick);
    }
    return KILN_OK;
}

kiln_result kiln_despawn(kiln_world *world, kiln_entity entity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (deferred(world)) {
        kiln_result r = check_deferred_target(world, "despawn", entity);
        if (r != KILN_OK) return r;
        return record(world, queue_of(world), KL_OP_DESPAWN, entity, 0, NULL);
    }
    return kl_despawn_entity(world, "despawn", entity);
}

kiln_result kiln_add(kiln_world *world, kiln_entity entity, kiln_component component,
                     const void *value) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (deferred(world)) {
        kiln_result r = check_deferred_target(world, "add", entity);
        if (r != KILN_OK) return r;
        if (!kl_component_get(world, component)) return unknown_on(world, "add", entity, component);
        return record(world, queue_of(world), KL_OP_ADD, entity, component, value);
    }
    return kl_add_value(world, "add", entity, component, (void *)(uintptr_t)value, false);
}

kiln_result kiln_remove(kiln_world *world, kiln_entity entity, kiln_component component,
                        bool *removed) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (deferred(world)) {
        kiln_result r = check_deferred_target(world, "remove", entity);
        if (r != KILN_OK) return r;
        if (!kl_component_get(world, component)) return unknown_on(world, "remove", entity, component);
        r = record(world, queue_of(world), KL_OP_REMOVE, entity, component, NULL);
        if (r == KILN_OK && removed) *removed = kiln_has(world, entity, component);
        return r;
    }
    return kl_remove_component(world, "remove", entity, component, removed);
}

kiln_result kiln_set(kiln_world *world, kiln_entity entity, kiln_component component,
                     const void *value) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (deferred(world)) {
        kiln_result r = check_deferred_target(world, "set", entity);
        if (r != KILN_OK) return r;
        /* Presence is not checked here: an add queued earlier in this section may bring the
         * component; a set whose component is absent when the queue lands is dropped. */
        if (!kl_component_get(world, component)) return unknown_on(world, "set", entity, component);
        return record(world, queue_of(world), KL_OP_SET, entity, component, value);
    }
    return kl_set_value(world, "set", entity, component, (void *)(uintptr_t)value, false);
}

int32_t kiln_entity_components(const kiln_world *world, kiln_entity entity, kiln_component *dest,
                               int32_t capacity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    KILN_ASSERT(capacity == 0 || dest != NULL, "dest is required when capacity > 0");
    const kl_record *rec = kl_record_of(world, entity);
    if (!rec) return -1;
    const kl_archetype *arch = world->archetypes[rec->archetype];
    for (int32_t i = 0; i < arch->type_count && i < capacity; i++) dest[i] = arch->types[i];
    return arch->type_count;
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
    int32_t row = (int32_t)kl_record_at(world, kiln_entity_index(entity))->row;
    col->ticks[row] = world->tick;
    kl_column_touch(col, world->tick);
    return col->data + (size_t)row * col->stride;
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

/* ---- deferred sections ----------------------------------------------------------------- */

void kiln_defer_begin(kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    atomic_fetch_add_explicit(&world->defer_depth, 1, memory_order_relaxed);
}

kiln_result kiln_defer_end(kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    int depth = atomic_fetch_sub_explicit(&world->defer_depth, 1, memory_order_relaxed);
    KILN_ASSERT(depth > 0, "kiln_defer_end without kiln_defer_begin");
    if (depth > 1) return KILN_OK;
    if (kiln_commands_count(world->deferred) == 0) return KILN_OK;
    return kiln_commands_apply(world->deferred, world, NULL);
}

bool kiln_is_deferred(const kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return deferred(world);
}
