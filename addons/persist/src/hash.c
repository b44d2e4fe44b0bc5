/* hash.c: kiln_world_hash: XXH3 over each entity's handle and component bytes, summed over
 * entities so archetype and row order do not matter. Invariant: components enter every hash
 * in name order and by name, never by id. */
#include <stdlib.h>
#include <string.h>

/* The header-only form: XXH3 inlined into the row loop (small inputs are most of the work). */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "persist_internal.h"

#define ROW_BUFFER 1024

typedef struct hash_column {
    const char *name;
    uint64_t name_hash;
    const kl_column *col;  /* NULL: a tag, or a value with hooks (counted by presence) */
    uint32_t size;
    bool entities;         /* has entity fields: references to dead entities hash as null */
    kiln_component_info info;
    int32_t range_count;   /* byte ranges the fields cover (padding never enters a hash) */
    uint32_t range_at[8], range_len[8];
} hash_column;

static int by_name(const void *a, const void *b) {
    return strcmp(((const hash_column *)a)->name, ((const hash_column *)b)->name);
}

/* The byte ranges of a value its fields cover, merged; the whole value when it has no fields
 * or more than 8 separate ranges. Returns the bytes covered. */
static uint32_t field_ranges(hash_column *hc) {
    const kiln_component_info *info = &hc->info;
    hc->range_count = 1;
    hc->range_at[0] = 0;
    hc->range_len[0] = hc->size;
    if (info->field_count == 0 || hc->size == 0) return hc->size;
    uint8_t covered[KILN_MAX_FIELDS * 64];
    if (hc->size > sizeof covered) return hc->size;
    memset(covered, 0, hc->size);
    for (int32_t f = 0; f < info->field_count; f++) {
        const kiln_field *fd = &info->fields[f];
        memset(covered + fd->offset, 1, kiln_type_size(fd->type) * (fd->count ? fd->count : 1));
    }
    int32_t n = 0;
    uint32_t total = 0;
    for (uint32_t i = 0; i < hc->size;) {
        if (!covered[i]) { i++; continue; }
        uint32_t j = i;
        while (j < hc->size && covered[j]) j++;
        if (n == 8) { /* too scattered: the whole value */
            hc->range_count = 1, hc->range_at[0] = 0, hc->range_len[0] = hc->size;
            return hc->size;
        }
        hc->range_at[n] = i, hc->range_len[n] = j - i, n++;
        total += j - i;
        i = j;
    }
    hc->range_count = n;
    return total;
}

/* Appends one value to buf at *at: padding skipped, dead references as null. */
static void gather(const kiln_world *world, const hash_column *hc, const uint8_t *v, uint8_t *buf, size_t *at) {
    bool whole = hc->range_count == 1 && hc->range_len[0] == hc->size;
    if (whole) {
        memcpy(buf + *at, v, hc->size);
        if (hc->entities) pz_null_dead(world, &hc->info, buf + *at);
        *at += hc->size;
        return;
    }
    uint8_t value[ROW_BUFFER];
    if (hc->entities) {
        memcpy(value, v, hc->size);
        pz_null_dead(world, &hc->info, value);
        v = value;
    }
    for (int32_t k = 0; k < hc->range_count; k++) {
        memcpy(buf + *at, v + hc->range_at[k], hc->range_len[k]);
        *at += hc->range_len[k];
    }
}

/* The sum of the hashes of one archetype's rows: each row's handle and values (padding
 * skipped, dead references as null) in component name order, seeded by the archetype's names. */
static uint64_t hash_archetype(const kiln_world *world, const kl_archetype *arch, hash_column *cols) {
    int32_t n = arch->type_count;
    for (int32_t t = 0; t < n; t++) {
        const kl_component *c = kl_component_get(world, arch->types[t]);
        cols[t].name = c->names;
        cols[t].name_hash = XXH3_64bits(c->names, strlen(c->names));
        bool plain = c->size > 0 && !c->destroy && !c->move;
        cols[t].col = plain ? kl_archetype_column(arch, arch->types[t]) : NULL;
        cols[t].size = plain ? c->size : 0;
        kiln_component_info_get(world, arch->types[t], &cols[t].info);
        cols[t].entities = plain && pz_has_entity_fields(&cols[t].info);
    }
    qsort(cols, (size_t)n, sizeof *cols, by_name);
    uint64_t signature = 0x6b696c6eull, row_bytes = 8;
    for (int32_t t = 0; t < n; t++) {
        signature = XXH3_64bits_withSeed(&cols[t].name_hash, 8, signature);
        row_bytes += field_ranges(&cols[t]);
    }
    uint64_t sum = 0;
    uint8_t buf[ROW_BUFFER];
    if (row_bytes <= ROW_BUFFER) {
        for (int32_t r = 0; r < arch->count; r++) {
            memcpy(buf, &arch->entities[r], 8);
            size_t at = 8;
            for (int32_t t = 0; t < n; t++)
                if (cols[t].size) gather(world, &cols[t], cols[t].col->data + (size_t)r * cols[t].col->stride, buf, &at);
            sum += XXH3_64bits_withSeed(buf, at, signature);
        }
        return sum;
    }
    /* rows too large for the buffer: streamed value by value */
    XXH3_state_t st;
    XXH3_INITSTATE(&st); /* a seeded reset reads the state's last seed */
    for (int32_t r = 0; r < arch->count; r++) {
        XXH3_64bits_reset_withSeed(&st, signature);
        XXH3_64bits_update(&st, &arch->entities[r], 8);
        for (int32_t t = 0; t < n; t++) {
            const hash_column *hc = &cols[t];
            if (!hc->size) continue;
            const uint8_t *v = hc->col->data + (size_t)r * hc->col->stride;
            size_t at = 0;
            if (hc->size <= ROW_BUFFER) gather(world, hc, v, buf, &at), v = buf;
            else at = hc->size; /* a huge value: raw */
            XXH3_64bits_update(&st, v, at);
        }
        sum += XXH3_64bits_digest(&st);
    }
    return sum;
}

uint64_t kiln_world_hash(const kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    int32_t max_types = 1;
    for (int32_t a = 0; a < world->archetype_count; a++)
        if (world->archetypes[a]->type_count > max_types) max_types = world->archetypes[a]->type_count;
    hash_column small[64];
    kl_allocator *alloc = &((kiln_world *)(uintptr_t)world)->alloc; /* counted, not a change */
    size_t bytes = sizeof(hash_column) * (size_t)max_types;
    hash_column *cols = max_types <= 64 ? small : kl_alloc(alloc, bytes);
    uint64_t entities = 0;
    for (int32_t a = 0; a < world->archetype_count && cols; a++)
        if (world->archetypes[a]->count > 0) entities += hash_archetype(world, world->archetypes[a], cols);
    if (cols != small) kl_free(alloc, cols, bytes);
    uint64_t resources = 0;
    int32_t count = kiln_component_count(world);
    for (kiln_component id = 1; id <= (kiln_component)count; id++) {
        if (!kiln_resource_has(world, id)) continue;
        const kl_component *c = kl_component_get(world, id);
        uint64_t seed = XXH3_64bits(c->names, strlen(c->names));
        bool plain = c->size > 0 && !c->destroy && !c->move;
        const uint8_t *v = plain ? kiln_resource_get(world, id) : NULL;
        uint8_t buf[ROW_BUFFER];
        kiln_component_info info;
        kiln_component_info_get(world, id, &info);
        if (v && c->size <= ROW_BUFFER && pz_has_entity_fields(&info)) {
            memcpy(buf, v, c->size);
            pz_null_dead(world, &info, buf);
            v = buf;
        }
        if (!v) {
            resources += seed;
            continue;
        }
        hash_column hc = {.size = c->size, .info = info};
        field_ranges(&hc);
        XXH3_state_t st;
        XXH3_INITSTATE(&st); /* a seeded reset reads the state's last seed */
        XXH3_64bits_reset_withSeed(&st, seed);
        for (int32_t k = 0; k < hc.range_count; k++) XXH3_64bits_update(&st, v + hc.range_at[k], hc.range_len[k]);
        resources += XXH3_64bits_digest(&st);
    }
    uint64_t total[4] = {entities, resources, world->tick, (uint64_t)world->alive};
    return XXH3_64bits(total, sizeof total);
}
