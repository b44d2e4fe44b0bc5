/* snapshot.c: kiln_snapshot_*: the world's slots, rows and plain resources copied into one
 * block and put back. Invariant: a restore checks and allocates everything it needs before it
 * changes anything, so it either lands whole or leaves the world as it was. */
#include <stdio.h>
#include <string.h>

#include "../../transform/src/transform_links.h" /* rows that came back: the children index */
#include "persist_internal.h"
#include "resource.h"

typedef struct snap_column {
    kiln_component id;
    uint32_t stride;
    uint8_t *data;      /* count * stride bytes */
    kiln_row_tick *ticks; /* count, counted from the snapshot's tick_base */
} snap_column;

typedef struct snap_group {
    uint32_t archetype; /* archetype id: archetypes live as long as their world */
    int32_t count;
    int32_t column_count;
    kiln_entity *entities;
    snap_column *columns;
} snap_group;

typedef struct snap_resource {
    kiln_component id;
    uint32_t size;
    uint8_t *value;
} snap_resource;

struct kiln_snapshot {
    kl_allocator alloc;     /* a copy of the world's hook, so the snapshot may outlive it */
    const kiln_world *world;
    uint64_t world_seed;    /* its hash_seed: a world made later at the same address differs */
    void *block;
    size_t block_size, used;
    kiln_tick tick, tick_base; /* the world's, restored together with the rows */
    uint32_t slot_count, free_head;
    int64_t alive;
    kl_record *records;
    int32_t group_count, resource_count;
    snap_group *groups;
    snap_resource *resources;
};

#define ALIGN16(n) (((n) + 15) & ~(size_t)15)

/* Bytes the current world needs in a snapshot; fails naming a value with hooks. */
static kiln_result measure(kiln_world *world, const char *call, size_t *dest) {
    size_t n = ALIGN16(sizeof(kl_record) * kl_slot_count(world));
    int32_t groups = 0;
    for (int32_t a = 0; a < world->archetype_count; a++) {
        const kl_archetype *arch = world->archetypes[a];
        if (arch->count == 0) continue;
        groups++;
        n += ALIGN16(sizeof(kiln_entity) * (size_t)arch->count) + ALIGN16(sizeof(snap_column) * (size_t)arch->column_count);
        for (int32_t c = 0; c < arch->column_count; c++) {
            const kl_column *col = &arch->columns[c];
            if (!col->plain) {
                char buf[24];
                return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                               "%s: entity %s component '%s' has hooks (it owns something) and "
                               "cannot be copied", call, kiln_entity_format(arch->entities[0], buf, sizeof buf),
                               col->component->names);
            }
            n += ALIGN16((size_t)col->stride * (size_t)arch->count) + ALIGN16(sizeof(kiln_row_tick) * (size_t)arch->count);
        }
    }
    n += ALIGN16(sizeof(snap_group) * (size_t)groups);
    int32_t count = kiln_component_count(world);
    n += ALIGN16(sizeof(snap_resource) * (size_t)count);
    for (kiln_component id = 1; id <= (kiln_component)count; id++) {
        const kl_component *c = kl_component_get(world, id);
        if (kiln_resource_has(world, id) && !c->destroy && !c->move) n += ALIGN16(c->size);
    }
    *dest = n;
    return KILN_OK;
}

static void *carve(kiln_snapshot *s, size_t size) {
    void *p = (uint8_t *)s->block + s->used;
    s->used += ALIGN16(size);
    return p;
}

/* Whether snap was taken of world: the address alone would take a world made where a
 * destroyed one was (a snapshot may outlive its world) for it, archetype ids and strides too. */
static bool of_world(const kiln_snapshot *snap, const kiln_world *world) {
    return snap->world == world && snap->world_seed == world->hash_seed;
}

static void fill(kiln_world *world, kiln_snapshot *s) {
    s->used = 0;
    s->world = world;
    s->world_seed = world->hash_seed;
    s->tick = world->tick;
    s->tick_base = world->tick_base;
    s->slot_count = kl_slot_count(world);
    s->free_head = world->free_head;
    s->alive = world->alive;
    s->records = carve(s, sizeof(kl_record) * s->slot_count);
    for (uint32_t p = 0; p * KL_PAGE_SIZE < s->slot_count; p++) {
        uint32_t n = s->slot_count - p * KL_PAGE_SIZE;
        memcpy(s->records + (size_t)p * KL_PAGE_SIZE, world->pages[p], sizeof(kl_record) * (n < KL_PAGE_SIZE ? n : KL_PAGE_SIZE));
    }
    s->group_count = 0;
    for (int32_t a = 0; a < world->archetype_count; a++) s->group_count += world->archetypes[a]->count > 0;
    s->groups = carve(s, sizeof(snap_group) * (size_t)s->group_count);
    int32_t g = 0;
    for (int32_t a = 0; a < world->archetype_count; a++) {
        const kl_archetype *arch = world->archetypes[a];
        if (arch->count == 0) continue;
        snap_group *sg = &s->groups[g++];
        sg->archetype = arch->id;
        sg->count = arch->count;
        sg->column_count = arch->column_count;
        sg->entities = carve(s, sizeof(kiln_entity) * (size_t)arch->count);
        memcpy(sg->entities, arch->entities, sizeof(kiln_entity) * (size_t)arch->count);
        sg->columns = carve(s, sizeof(snap_column) * (size_t)arch->column_count);
        for (int32_t c = 0; c < arch->column_count; c++) {
            const kl_column *col = &arch->columns[c];
            snap_column *sc = &sg->columns[c];
            sc->id = col->id;
            sc->stride = col->stride;
            sc->data = carve(s, (size_t)col->stride * (size_t)arch->count);
            memcpy(sc->data, col->data, (size_t)col->stride * (size_t)arch->count);
            sc->ticks = carve(s, sizeof(kiln_row_tick) * (size_t)arch->count);
            memcpy(sc->ticks, col->ticks, sizeof(kiln_row_tick) * (size_t)arch->count);
        }
    }
    int32_t count = kiln_component_count(world);
    s->resources = carve(s, sizeof(snap_resource) * (size_t)count);
    s->resource_count = 0;
    for (kiln_component id = 1; id <= (kiln_component)count; id++) {
        const kl_component *c = kl_component_get(world, id);
        if (!kiln_resource_has(world, id) || c->destroy || c->move) continue;
        snap_resource *r = &s->resources[s->resource_count++];
        r->id = id;
        r->size = c->size;
        r->value = carve(s, c->size);
        if (c->size) memcpy(r->value, kiln_resource_get(world, id), c->size);
    }
}

static kiln_result take(kiln_world *world, kiln_snapshot *s, const char *call) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kiln_result r = pz_check_idle(world, call);
    if (r != KILN_OK) return r;
    size_t need = 0;
    r = measure(world, call, &need);
    if (r != KILN_OK) return r;
    if (need > s->block_size || !s->block) {
        void *block = kl_alloc(&s->alloc, need ? need : 16);
        if (!block) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory (%zu bytes)", call, need);
        kl_free(&s->alloc, s->block, s->block_size);
        s->block = block;
        s->block_size = need ? need : 16;
    }
    fill(world, s);
    return KILN_OK;
}

kiln_result kiln_snapshot_create(kiln_world *world, kiln_snapshot **dest) {
    KILN_ASSERT(world != NULL && dest != NULL, "world and dest are required");
    kiln_snapshot *s = kl_alloc(&world->alloc, sizeof *s);
    if (!s) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_snapshot_create: out of memory");
    memset(s, 0, sizeof *s);
    s->alloc.fn = world->alloc.fn;
    s->alloc.ud = world->alloc.ud;
    kiln_result r = take(world, s, "kiln_snapshot_create");
    if (r != KILN_OK) {
        kl_free(&world->alloc, s, sizeof *s);
        return r;
    }
    /* the struct itself came from the world's counts; from now on the snapshot's own */
    atomic_fetch_sub_explicit(&world->alloc.bytes, (int64_t)sizeof *s, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->alloc.bytes, (int64_t)sizeof *s, memory_order_relaxed);
    *dest = s;
    return KILN_OK;
}

kiln_result kiln_snapshot_update(kiln_world *world, kiln_snapshot *snap) {
    KILN_ASSERT(snap != NULL, "snap is NULL");
    if (!of_world(snap, world))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_snapshot_update: the snapshot is of another world");
    return take(world, snap, "kiln_snapshot_update");
}

void kiln_snapshot_destroy(kiln_snapshot *snap) {
    if (!snap) return;
    kl_allocator alloc = snap->alloc;
    kl_free(&alloc, snap->block, snap->block_size);
    kl_free(&alloc, snap, sizeof *snap);
}

size_t kiln_snapshot_bytes(const kiln_snapshot *snap) { return snap ? snap->block_size + sizeof *snap : 0; }

int64_t kiln_snapshot_count(const kiln_world *world, const kiln_snapshot *snap, kiln_component component) {
    KILN_ASSERT(world != NULL && snap != NULL, "world and snap are required");
    /* another world's groups name archetypes by its indexes: refused in every build, as a
     * restore refuses it (an assertion is gone under NDEBUG and the loop would read past
     * world->archetypes); the message is the world's mutable state, const or not */
    if (!of_world(snap, world)) {
        kl_fail((kiln_world *)world, KILN_ERR_INVALID_ARGUMENT, "kiln_snapshot_count: the snapshot is of another world");
        return -1;
    }
    int64_t n = 0;
    for (int32_t g = 0; g < snap->group_count; g++)
        if (kl_archetype_has(world->archetypes[snap->groups[g].archetype], component)) n += snap->groups[g].count;
    return n;
}


/* ---- restoring ---- */

static bool in_snapshot(const kiln_snapshot *s, kiln_component id) {
    for (int32_t k = 0; k < s->resource_count; k++)
        if (s->resources[k].id == id) return true;
    return false;
}

/* Everything that may fail, before any change: rows and resources made ready. */
static kiln_result prepare(kiln_world *world, const kiln_snapshot *s) {
    const char *call = "kiln_snapshot_restore";
    for (int32_t g = 0; g < s->group_count; g++) {
        const snap_group *sg = &s->groups[g];
        if (sg->archetype >= (uint32_t)world->archetype_count)
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: the snapshot does not fit this world", call);
        kl_archetype *arch = world->archetypes[sg->archetype];
        if (arch->capacity < sg->count && !kl_archetype_reserve(world, arch, sg->count))
            return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for rows", call);
    }
    int32_t made = 0;
    kiln_component made_ids[64];
    for (int32_t k = 0; k < s->resource_count; k++) {
        const snap_resource *r = &s->resources[k];
        if (kiln_resource_has(world, r->id)) continue;
        bool full = made == 64;
        if (full || kl_resource_put(world, r->id, r->size ? r->value : NULL) != KILN_OK) { /* the world held it */
            for (int32_t i = 0; i < made; i++) kiln_resource_remove(world, made_ids[i], NULL);
            if (full)
                return kl_fail(world, KILN_ERR_LIMIT, "%s: more than 64 resources were removed since the "
                               "snapshot (re-create some first)", call);
            return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for resources", call);
        }
        made_ids[made++] = r->id;
    }
    return KILN_OK;
}

kiln_result kiln_snapshot_restore(kiln_world *world, const kiln_snapshot *snap) {
    KILN_ASSERT(world != NULL && snap != NULL, "world and snap are required");
    const char *call = "kiln_snapshot_restore";
    if (!of_world(snap, world))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: the snapshot is of another world", call);
    kiln_result r = pz_check_idle(world, call);
    if (r == KILN_OK) r = prepare(world, snap);
    if (r != KILN_OK) return r;
    kiln_tick now = world->tick;
    /* Every row goes (their hooks run), then the snapshot's rows come back. The hooks run with
     * rows half gone, so structural calls from them fail (kl_in_hook), and with the resources
     * prepared above held: a removal from them fails too (resources_held). */
    world->in_hook++;
    world->resources_held = call;
    for (int32_t a = 0; a < world->archetype_count; a++) {
        kl_archetype *arch = world->archetypes[a];
        if (arch->count == 0) continue;
        if (arch->has_destroy)
            for (int32_t row = 0; row < arch->count; row++) kl_archetype_destroy_row(arch, row);
        kl_rows_taken(arch, 0); /* every row: from row 0 on */
        arch->removed += (uint64_t)arch->count - 1;
        arch->count = 0;
        arch->structure_tick = now;
    }
    world->resources_held = NULL;
    world->in_hook--;
    for (int32_t g = 0; g < snap->group_count; g++) {
        const snap_group *sg = &snap->groups[g];
        kl_archetype *arch = world->archetypes[sg->archetype];
        arch->count = sg->count;
        arch->structure_tick = now;
        memcpy(arch->entities, sg->entities, sizeof(kiln_entity) * (size_t)sg->count);
        for (int32_t c = 0; c < sg->column_count; c++) {
            const snap_column *sc = &sg->columns[c];
            kl_column *col = kl_archetype_column(arch, sc->id);
            memcpy(col->data, sc->data, (size_t)sc->stride * (size_t)sg->count);
            memcpy(col->ticks, sc->ticks, sizeof(kiln_row_tick) * (size_t)sg->count);
            kl_column_touch(col, now);
        }
    }
    for (uint32_t p = 0; p * KL_PAGE_SIZE < snap->slot_count; p++) {
        uint32_t n = snap->slot_count - p * KL_PAGE_SIZE;
        memcpy(world->pages[p], snap->records + (size_t)p * KL_PAGE_SIZE, sizeof(kl_record) * (n < KL_PAGE_SIZE ? n : KL_PAGE_SIZE));
    }
    atomic_store_explicit(&world->slot_count, snap->slot_count, memory_order_release);
    world->free_head = snap->free_head;
    world->alive = snap->alive;
    int32_t count = kiln_component_count(world);
    for (kiln_component id = 1; id <= (kiln_component)count; id++) {
        const kl_component *c = kl_component_get(world, id);
        if (kiln_resource_has(world, id) && !c->destroy && !c->move && !in_snapshot(snap, id))
            kiln_resource_remove(world, id, NULL);
    }
    for (int32_t k = 0; k < snap->resource_count; k++)
        if (snap->resources[k].size)
            memcpy(kiln_resource_get(world, snap->resources[k].id), snap->resources[k].value, snap->resources[k].size);
    world->structure_version++; /* rows came and went: what was counted before is stale */
    world->tick = snap->tick; /* every row is the snapshot's: its ticks count from its base */
    world->tick_epoch++;
    world->tick_base = snap->tick_base;
    pz_names_invalidate(world);
    kl_transform_links_invalidate(world);
    return KILN_OK;
}
