/* live.c: which references name live entities, asked for whole columns at a time (saves and
 * the hash write dead references as null). Invariant: read-only; the world is never changed. */
#include <string.h>

#include "persist_internal.h"

void pz_live_open(pz_live *live, const kiln_world *world, int64_t references) {
    memset(live, 0, sizeof *live);
    live->world = world;
    live->pages = atomic_load_explicit(&((kiln_world *)(uintptr_t)world)->pages, memory_order_acquire);
    live->archetypes = world->archetypes;
    live->slots = kl_slot_count(world);
    /* Many references: one sweep over the live handles builds a table of generations by slot,
     * so each reference costs one load instead of a record and a row handle. */
    if (references < 1024 || references * 4 < world->alive) return;
    live->alloc = &((kiln_world *)(uintptr_t)world)->alloc; /* counted, not a change */
    size_t table = sizeof(kiln_entity) * ((size_t)live->slots + 1);
    live->bytes = table + (size_t)world->archetype_count;
    live->handles = kl_alloc(live->alloc, live->bytes);
    if (!live->handles) return; /* no memory: the records answer, only slower */
    memset(live->handles, 0, table);
    live->ascending = (uint8_t *)live->handles + table;
    for (int32_t a = 0; a < world->archetype_count; a++) {
        const kl_archetype *arch = world->archetypes[a];
        uint32_t last = 0, down = 0;
        for (int32_t r = 0; r < arch->count; r++) {
            kiln_entity e = arch->entities[r];
            uint32_t index = kiln_entity_index(e);
            live->handles[index] = e;
            down |= index < last;
            last = index;
        }
        live->ascending[a] = down == 0;
    }
}

void pz_live_close(pz_live *live) {
    if (live->handles) kl_free(live->alloc, live->handles, live->bytes);
    live->handles = NULL;
    live->ascending = NULL;
}

/* True for null and for a live entity. */
static inline bool live_or_null(const pz_live *live, kiln_entity e) {
    uint32_t index = kiln_entity_index(e);
    if (live->handles) {
        /* branch-free: a dead slot holds null, and so does the entry past the end */
        uint32_t at = index < live->slots ? index : live->slots;
        return (live->handles[at] == e) | (e == KILN_NULL_ENTITY);
    }
    if (e == KILN_NULL_ENTITY) return true;
    if (index >= live->slots) return false;
    const kl_record *rec = &live->pages[index >> KL_PAGE_BITS][index & (KL_PAGE_SIZE - 1)];
    return kl_record_alive(rec) && live->archetypes[kl_record_archetype(rec)]->entities[kl_record_row(rec)] == e;
}

/* Whether the n references stride bytes apart from p are all null or live. */
static bool live_run(const pz_live *live, const uint8_t *p, size_t stride, size_t n) {
    bool all = true;
    if (live->handles) { /* the same test, with the table's presence known to the loop */
        pz_live table = *live;
        size_t r = 0;
        bool more = true; /* two chains, so the loads of consecutive references overlap */
        for (; r + 2 <= n; r += 2, p += 2 * stride) {
            kiln_entity e0, e1;
            memcpy(&e0, p, 8);
            memcpy(&e1, p + stride, 8);
            all &= live_or_null(&table, e0);
            more &= live_or_null(&table, e1);
        }
        if (r < n) {
            kiln_entity e;
            memcpy(&e, p, 8);
            all &= live_or_null(&table, e);
        }
        return all & more;
    }
    for (size_t r = 0; r < n; r++, p += stride) {
        kiln_entity e;
        memcpy(&e, p, 8);
        all &= live_or_null(live, e);
    }
    return all;
}

bool pz_live_rows(const pz_live *live, const kiln_component_info *info, const uint8_t *base,
                  size_t stride, size_t rows) {
    bool all = true;
    for (int32_t f = 0; f < info->field_count; f++) {
        const kiln_field *fd = &info->fields[f];
        if (fd->type != KILN_TYPE_ENTITY) continue;
        for (uint32_t k = 0; k < (fd->count ? fd->count : 1); k++)
            all &= live_run(live, base + fd->offset + 8 * (size_t)k, stride, rows);
    }
    return all;
}

void pz_null_dead_rows(const pz_live *live, const kiln_component_info *info, uint8_t *base,
                       size_t stride, size_t rows) {
    for (int32_t f = 0; f < info->field_count; f++) {
        const kiln_field *fd = &info->fields[f];
        if (fd->type != KILN_TYPE_ENTITY) continue;
        for (uint32_t k = 0; k < (fd->count ? fd->count : 1); k++) {
            uint8_t *p = base + fd->offset + 8 * (size_t)k;
            for (size_t r = 0; r < rows; r++, p += stride) {
                kiln_entity e;
                memcpy(&e, p, 8);
                if (!live_or_null(live, e)) memset(p, 0, 8);
            }
        }
    }
}

void pz_null_dead_refs(const pz_live *live, uint8_t *p, size_t n) {
    for (size_t r = 0; r < n; r++, p += 8) {
        kiln_entity e;
        memcpy(&e, p, 8);
        if (!live_or_null(live, e)) memset(p, 0, 8);
    }
}

int64_t pz_entity_slots(const kiln_component_info *info) {
    int64_t n = 0;
    for (int32_t f = 0; f < info->field_count; f++)
        if (info->fields[f].type == KILN_TYPE_ENTITY) n += info->fields[f].count ? info->fields[f].count : 1;
    return n;
}
