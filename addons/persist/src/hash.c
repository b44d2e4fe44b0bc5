/* hash.c: kiln_world_hash: per archetype one XXH3 stream over its handles, then each
 * component's values column by column, rows in ascending slot order; archetype hashes summed.
 * Invariant: components enter in name order and by name, never by id, and rows in slot order,
 * so archetype order, row order and registration order never change the hash. */
#include <stdlib.h>
#include <string.h>

/* The header-only form: XXH3 inlined into the column loops. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "persist_internal.h"

#define CHUNK 8192      /* bytes gathered at a time (on the stack) before they are streamed */
#define VALUE_MAX 4096  /* larger values with entity fields stream a value at a time (stream_value) */
#define SMALL_SORT 32   /* archetypes up to this many unsorted rows sort on the stack */

typedef struct hash_column {
    const char *name;
    uint64_t name_hash;
    const kl_column *col;  /* NULL: a tag, or a value with hooks (counted by presence) */
    uint32_t size;
    bool entities;         /* has entity fields: references to dead entities hash as null */
    kiln_component_info info;
    int32_t range_count;   /* byte ranges the fields cover (padding never enters a hash) */
    const struct field_range *ranges; /* range_count of them, in offset order */
    uint32_t bytes;        /* bytes of one value that enter the hash */
} hash_column;

/* One run of bytes some field covers; a value has at most KILN_MAX_FIELDS of them (each field
 * is one run, and merging only joins runs). */
typedef struct field_range {
    uint32_t at, len;
} field_range;

static int by_name(const void *a, const void *b) {
    return strcmp(((const hash_column *)a)->name, ((const hash_column *)b)->name);
}

/* Writes to ranges (KILN_MAX_FIELDS of them) the byte ranges of a value its fields cover, in
 * offset order with overlapping and touching ones merged, and points hc at them; a value without
 * fields has no layout to go by and is one range, all of it. Returns the bytes covered. */
static uint32_t field_ranges(hash_column *hc, field_range *ranges) {
    const kiln_component_info *info = &hc->info;
    hc->ranges = ranges;
    hc->range_count = 1;
    ranges[0] = (field_range){0, hc->size};
    if (info->field_count == 0 || hc->size == 0) return hc->size;
    int32_t n = 0;
    for (int32_t f = 0; f < info->field_count && f < KILN_MAX_FIELDS; f++) {
        const kiln_field *fd = &info->fields[f];
        uint64_t at = fd->offset, len = (uint64_t)kiln_type_size(fd->type) * (fd->count ? fd->count : 1);
        if (at >= hc->size || len == 0) continue; /* registration keeps fields inside the value */
        if (len > hc->size - at) len = hc->size - at;
        field_range r = {(uint32_t)at, (uint32_t)len};
        int32_t k = n++; /* insertion sort: fields are usually declared in offset order already */
        for (; k > 0 && ranges[k - 1].at > r.at; k--) ranges[k] = ranges[k - 1];
        ranges[k] = r;
    }
    if (n == 0) return hc->size; /* no field with bytes: no layout to go by either */
    int32_t m = 0;
    uint32_t total = 0;
    for (int32_t k = 0; k < n; k++) {
        uint32_t end = ranges[k].at + ranges[k].len;
        if (m > 0 && ranges[k].at <= ranges[m - 1].at + ranges[m - 1].len) {
            if (end > ranges[m - 1].at + ranges[m - 1].len) ranges[m - 1].len = end - ranges[m - 1].at;
        } else {
            ranges[m++] = ranges[k];
        }
    }
    for (int32_t k = 0; k < m; k++) total += ranges[k].len;
    hc->range_count = m;
    return total;
}

/* ---- the canonical row order of an archetype ---- */

/* Rows in ascending slot order: the rows themselves when they already are (the usual case:
 * entities spawned or loaded in order), a sorted permutation, or, when no memory can be had
 * for one, a walk over the slot records (one per column, slower but allocation-free). */
typedef struct row_order {
    const kiln_world *world;
    const kl_archetype *arch;
    bool sorted;
    uint32_t *perm;        /* count rows, or NULL (sorted, or walking the records) */
    uint32_t small[SMALL_SORT];
    uint64_t *keys;        /* the permutation's allocation: keys then scratch */
    size_t keys_bytes;
    int64_t at;            /* next position (sorted, perm) or slot index (walk) */
} row_order;

static bool ascending(const kl_archetype *arch) {
    const kiln_entity *e = arch->entities;
    int32_t n = arch->count, r = 1;
    uint32_t bad = 0;
    for (; r + 4 <= n; r += 4) /* four independent compares a step */
        bad |= (uint32_t)(kiln_entity_index(e[r]) < kiln_entity_index(e[r - 1])) |
               (uint32_t)(kiln_entity_index(e[r + 1]) < kiln_entity_index(e[r])) |
               (uint32_t)(kiln_entity_index(e[r + 2]) < kiln_entity_index(e[r + 1])) |
               (uint32_t)(kiln_entity_index(e[r + 3]) < kiln_entity_index(e[r + 2]));
    for (; r < n; r++) bad |= kiln_entity_index(e[r]) < kiln_entity_index(e[r - 1]);
    return bad == 0;
}

/* Sorts keys (slot index << 32 | row) by their slot index: LSD radix, 11 bits a pass, through
 * tmp (as large as keys). */
static void radix_sort(uint64_t *keys, uint64_t *tmp, size_t n, uint32_t max_index) {
    uint32_t counts[2048];
    uint64_t *src = keys, *dst = tmp;
    for (int shift = 0; shift < 32 && (shift == 0 || (max_index >> shift) != 0); shift += 11) {
        memset(counts, 0, sizeof counts);
        for (size_t i = 0; i < n; i++) counts[(src[i] >> (32 + shift)) & 2047]++;
        uint32_t sum = 0;
        for (int d = 0; d < 2048; d++) {
            uint32_t c = counts[d];
            counts[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) dst[counts[(src[i] >> (32 + shift)) & 2047]++] = src[i];
        uint64_t *swap = src;
        src = dst, dst = swap;
    }
    if (src != keys) memcpy(keys, src, n * sizeof *keys);
}

static void order_open(row_order *o, const pz_live *live, const kl_archetype *arch) {
    const kiln_world *world = live->world;
    memset(o, 0, sizeof *o);
    o->world = world;
    o->arch = arch;
    o->sorted = live->ascending ? live->ascending[arch->id] != 0 : ascending(arch);
    if (o->sorted) return;
    size_t n = (size_t)arch->count;
    uint64_t small_keys[2 * SMALL_SORT];
    uint64_t *keys = small_keys;
    if (n > SMALL_SORT) {
        kl_allocator *alloc = &((kiln_world *)(uintptr_t)world)->alloc; /* counted, not a change */
        o->keys_bytes = n * 2 * sizeof(uint64_t) + n * sizeof(uint32_t);
        keys = kl_alloc(alloc, o->keys_bytes);
        if (!keys) return; /* no permutation: walk the records */
        o->keys = keys;
    }
    uint32_t max_index = 0;
    for (size_t r = 0; r < n; r++) {
        uint32_t idx = kiln_entity_index(arch->entities[r]);
        if (idx > max_index) max_index = idx;
        keys[r] = (uint64_t)idx << 32 | r;
    }
    radix_sort(keys, keys + n, n, max_index);
    o->perm = n > SMALL_SORT ? (uint32_t *)(keys + 2 * n) : o->small;
    for (size_t r = 0; r < n; r++) o->perm[r] = (uint32_t)keys[r];
}

static void order_close(row_order *o) {
    if (o->keys) kl_free(&((kiln_world *)(uintptr_t)o->world)->alloc, o->keys, o->keys_bytes);
}

static void order_rewind(row_order *o) { o->at = 0; }

/* The next rows in canonical order, up to max of them; 0 at the end. */
static int32_t order_next(row_order *o, uint32_t *rows, int32_t max) {
    const kl_archetype *arch = o->arch;
    int32_t n = 0;
    if (o->sorted || o->perm) {
        for (; n < max && o->at < arch->count; n++, o->at++)
            rows[n] = o->sorted ? (uint32_t)o->at : o->perm[o->at];
        return n;
    }
    uint32_t slots = kl_slot_count(o->world);
    for (; n < max && o->at < (int64_t)slots; o->at++) {
        const kl_record *rec = kl_record_at(o->world, (uint32_t)o->at);
        if (kl_record_archetype(rec) == arch->id) rows[n++] = kl_record_row(rec);
    }
    return n;
}

/* ---- streaming ---- */

/* Writes the hashed bytes of one value (padding skipped, dead references as null) to dst. */
static void gather_value(const pz_live *live, const hash_column *hc, const uint8_t *v, uint8_t *dst) {
    uint8_t value[VALUE_MAX];
    if (hc->entities && hc->size <= VALUE_MAX) {
        memcpy(value, v, hc->size);
        pz_null_dead_rows(live, &hc->info, value, hc->size, 1);
        v = value;
    }
    for (int32_t k = 0; k < hc->range_count; k++) {
        memcpy(dst, v + hc->ranges[k].at, hc->ranges[k].len);
        dst += hc->ranges[k].len;
    }
}

/* The bytes of a value streamed from at, at most n of them, so that no reference is split. */
static size_t whole_references(const kiln_component_info *info, size_t at, size_t n) {
    for (int32_t f = 0; f < info->field_count; f++) {
        const kiln_field *fd = &info->fields[f];
        size_t end = at + n, count = fd->count ? fd->count : 1;
        if (fd->type != KILN_TYPE_ENTITY || end <= fd->offset) continue;
        size_t k = (end - fd->offset) / 8, start = fd->offset + 8 * k;
        if (k < count && start < end && start > at) n = start - at; /* ends before the split one */
    }
    return n;
}

/* One value too large to gather (its ranges in pieces of at most CHUNK bytes through buf), its
 * references to dead entities nulled as gather_value nulls them in smaller values. */
static void stream_value(const pz_live *live, XXH3_state_t *st, const hash_column *hc, const uint8_t *v,
                         uint8_t *buf) {
    for (int32_t r = 0; r < hc->range_count; r++) {
        size_t at = hc->ranges[r].at, end = at + hc->ranges[r].len;
        while (at < end) {
            size_t n = end - at < CHUNK ? end - at : CHUNK;
            if (!hc->entities) {
                XXH3_64bits_update(st, v + at, n);
                at += n;
                continue;
            }
            n = whole_references(&hc->info, at, n);
            memcpy(buf, v + at, n);
            for (int32_t f = 0; f < hc->info.field_count; f++) {
                const kiln_field *fd = &hc->info.fields[f];
                size_t count = fd->count ? fd->count : 1;
                if (fd->type != KILN_TYPE_ENTITY || fd->offset + 8 * count <= at || fd->offset >= at + n) continue;
                size_t first = fd->offset >= at ? 0 : (at - fd->offset + 7) / 8;
                size_t last = (at + n - fd->offset) / 8; /* one past the last whole one */
                if (last > count) last = count;
                if (last > first) pz_null_dead_refs(live, buf + fd->offset + 8 * first - at, last - first);
            }
            XXH3_64bits_update(st, buf, n);
            at += n;
        }
    }
}

/* The handles, in canonical order. */
static void stream_handles(XXH3_state_t *st, row_order *o, uint8_t *buf) {
    const kl_archetype *arch = o->arch;
    if (o->sorted) {
        XXH3_64bits_update(st, arch->entities, sizeof(kiln_entity) * (size_t)arch->count);
        return;
    }
    uint32_t rows[256];
    kiln_entity *out = (kiln_entity *)(void *)buf;
    order_rewind(o);
    for (int32_t n; (n = order_next(o, rows, 256)) > 0;) {
        for (int32_t i = 0; i < n; i++) out[i] = arch->entities[rows[i]];
        XXH3_64bits_update(st, out, sizeof(kiln_entity) * (size_t)n);
    }
}

/* One column's values, in canonical order. */
static void stream_column(const pz_live *live, XXH3_state_t *st, row_order *o, const hash_column *hc,
                          uint8_t *buf) {
    const kl_column *col = hc->col;
    int32_t count = o->arch->count;
    bool whole = hc->bytes == hc->size;
    if (o->sorted && whole && col->stride == hc->size) {
        if (!hc->entities) {
            XXH3_64bits_update(st, col->data, (size_t)hc->size * (size_t)count);
            return;
        }
        /* contiguous values with references: copied a chunk at a time, dead ones nulled */
        int32_t per = hc->size <= CHUNK ? (int32_t)(CHUNK / hc->size) : 0;
        for (int32_t r = 0; per && r < count; r += per) {
            int32_t m = count - r < per ? count - r : per;
            const uint8_t *src = col->data + (size_t)r * hc->size;
            if (!pz_live_rows(live, &hc->info, src, hc->size, (size_t)m)) {
                memcpy(buf, src, (size_t)m * hc->size);
                pz_null_dead_rows(live, &hc->info, buf, hc->size, (size_t)m);
                src = buf;
            }
            XXH3_64bits_update(st, src, (size_t)m * hc->size);
        }
        if (per) return;
    }
    /* any other layout: value by value through the canonical order */
    uint32_t rows[256];
    order_rewind(o);
    if (hc->bytes > CHUNK || (hc->entities && hc->size > VALUE_MAX)) { /* a value at a time */
        for (int32_t n; (n = order_next(o, rows, 256)) > 0;)
            for (int32_t i = 0; i < n; i++) stream_value(live, st, hc, col->data + (size_t)rows[i] * col->stride, buf);
        return;
    }
    int32_t per = (int32_t)(CHUNK / hc->bytes);
    if (per > 256) per = 256;
    for (int32_t n; (n = order_next(o, rows, per)) > 0;) {
        for (int32_t i = 0; i < n; i++)
            gather_value(live, hc, col->data + (size_t)rows[i] * col->stride, buf + (size_t)i * hc->bytes);
        XXH3_64bits_update(st, buf, (size_t)n * hc->bytes);
    }
}

/* The hash of one archetype: seeded by its component names, its handles then each value
 * column (in name order), rows in slot order. */
static uint64_t hash_archetype(const pz_live *live, const kl_archetype *arch, hash_column *cols,
                               uint8_t *buf) {
    const kiln_world *world = live->world;
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
    uint64_t signature = 0x6b696c6eull;
    for (int32_t t = 0; t < n; t++) signature = XXH3_64bits_withSeed(&cols[t].name_hash, 8, signature);
    row_order order;
    order_open(&order, live, arch);
    XXH3_state_t st;
    XXH3_INITSTATE(&st); /* a seeded reset reads the state's last seed */
    XXH3_64bits_reset_withSeed(&st, signature);
    stream_handles(&st, &order, buf);
    field_range ranges[KILN_MAX_FIELDS]; /* one column's at a time */
    for (int32_t t = 0; t < n; t++) {
        if (!cols[t].size) continue;
        cols[t].bytes = field_ranges(&cols[t], ranges);
        stream_column(live, &st, &order, &cols[t], buf);
    }
    order_close(&order);
    return XXH3_64bits_digest(&st);
}

static uint64_t hash_resources(const pz_live *live) {
    const kiln_world *world = live->world;
    uint64_t resources = 0;
    int32_t count = kiln_component_count(world);
    for (kiln_component id = 1; id <= (kiln_component)count; id++) {
        if (!kiln_resource_has(world, id)) continue;
        const kl_component *c = kl_component_get(world, id);
        uint64_t seed = XXH3_64bits(c->names, strlen(c->names));
        bool plain = c->size > 0 && !c->destroy && !c->move;
        const uint8_t *v = plain ? kiln_resource_get(world, id) : NULL;
        if (!v) {
            resources += seed;
            continue;
        }
        hash_column hc = {.size = c->size};
        kiln_component_info_get(world, id, &hc.info);
        hc.entities = pz_has_entity_fields(&hc.info);
        field_range ranges[KILN_MAX_FIELDS];
        hc.bytes = field_ranges(&hc, ranges);
        XXH3_state_t st;
        XXH3_INITSTATE(&st);
        XXH3_64bits_reset_withSeed(&st, seed);
        if (hc.bytes <= VALUE_MAX && !(hc.entities && hc.size > VALUE_MAX)) {
            uint8_t buf[VALUE_MAX];
            gather_value(live, &hc, v, buf);
            XXH3_64bits_update(&st, buf, hc.bytes);
        } else {
            _Alignas(16) uint8_t buf[CHUNK];
            stream_value(live, &st, &hc, v, buf);
        }
        resources += XXH3_64bits_digest(&st);
    }
    return resources;
}

/* The entity references the hash will check. */
static int64_t references(const kiln_world *world) {
    int64_t n = 0;
    for (int32_t a = 0; a < world->archetype_count; a++) {
        const kl_archetype *arch = world->archetypes[a];
        for (int32_t c = 0; c < arch->column_count && arch->count > 0; c++) {
            const kl_component *comp = arch->columns[c].component;
            for (int32_t f = 0; f < comp->field_count; f++)
                if (comp->fields[f].type == KILN_TYPE_ENTITY)
                    n += (int64_t)arch->count * (comp->fields[f].count ? comp->fields[f].count : 1);
        }
    }
    return n;
}

/* The slot count and the free list, in order with each slot's generation: what decides the
 * handles of the next spawns, so two worlds that hash the same spawn the same handles. */
static uint64_t hash_slots(const kiln_world *world) {
    XXH3_state_t st;
    XXH3_INITSTATE(&st);
    XXH3_64bits_reset(&st);
    uint32_t head[2] = {kl_slot_count(world), 0};
    XXH3_64bits_update(&st, head, sizeof head);
    uint32_t pair[2];
    for (uint32_t i = world->free_head; i != KL_NONE;) {
        const kl_record *r = kl_record_at(world, i);
        pair[0] = i;
        pair[1] = kl_record_generation(r);
        XXH3_64bits_update(&st, pair, sizeof pair);
        i = kl_record_next(r);
    }
    return XXH3_64bits_digest(&st);
}

static uint64_t hash_world(const kiln_world *world, bool slots, const char *call) {
    KILN_ASSERT(world != NULL, "world is NULL");
    /* Mid-change an entity sits in two rows, one half written, and beside a running stage's
     * systems a column may be written as it is read: refused with 0, which no world hashes to
     * (the message names call; it is no change to the world). */
    if (pz_check_readable((kiln_world *)(uintptr_t)world, call) != KILN_OK) return 0;
    int32_t max_types = 1;
    for (int32_t a = 0; a < world->archetype_count; a++)
        if (world->archetypes[a]->type_count > max_types) max_types = world->archetypes[a]->type_count;
    hash_column small[64];
    kl_allocator *alloc = &((kiln_world *)(uintptr_t)world)->alloc; /* counted, not a change */
    size_t bytes = sizeof(hash_column) * (size_t)max_types;
    hash_column *cols = max_types <= 64 ? small : kl_alloc(alloc, bytes);
    _Alignas(16) uint8_t buf[CHUNK];
    pz_live live;
    pz_live_open(&live, world, references(world));
    uint64_t entities = 0;
    for (int32_t a = 0; a < world->archetype_count && cols; a++)
        if (world->archetypes[a]->count > 0) entities += hash_archetype(&live, world->archetypes[a], cols, buf);
    if (cols != small) kl_free(alloc, cols, bytes);
    uint64_t total[5] = {entities, hash_resources(&live), world->tick, (uint64_t)world->alive,
                         slots ? hash_slots(world) : 0};
    pz_live_close(&live);
    uint64_t hash = XXH3_64bits(total, sizeof total);
    return hash ? hash : 1; /* 0 says refused */
}

uint64_t kiln_world_hash(const kiln_world *world) { return hash_world(world, true, "kiln_world_hash"); }

uint64_t kiln_world_content_hash(const kiln_world *world) {
    return hash_world(world, false, "kiln_world_content_hash");
}
