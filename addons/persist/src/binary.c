/* binary.c: the compact format: a header, schemas by name, groups of entities with their
 * values column by column, resources, host bytes; little-endian. Invariant: the parser reads
 * nothing before checking it is inside the input, and says at which byte it stopped. */
#include <stdio.h>
#include <string.h>

#include "persist_internal.h"

#define ENDIAN_MARK 0x01020304u

/* ---- writing ---- */

static void put32(pz_out *out, uint32_t v) { pz_put(out, &v, 4); }
static void put64(pz_out *out, uint64_t v) { pz_put(out, &v, 8); }
static void put8(pz_out *out, uint8_t v) { pz_put(out, &v, 1); }
static void put_name(pz_out *out, const char *name) {
    size_t n = strlen(name);
    put8(out, (uint8_t)n);
    pz_put(out, name, n);
}

static void put_schema(pz_out *out, const kiln_component_info *info, bool codec) {
    put_name(out, info->name);
    put32(out, (uint32_t)info->size);
    put8(out, codec ? 1 : 0);
    uint16_t fc = codec ? 0 : (uint16_t)info->field_count;
    pz_put(out, &fc, 2);
    for (int32_t f = 0; f < fc; f++) {
        const kiln_field *fd = &info->fields[f];
        put_name(out, fd->name);
        put8(out, (uint8_t)fd->type);
        put32(out, fd->count ? fd->count : 1);
        put32(out, fd->offset);
    }
}

static kiln_result put_blob(kiln_world *world, const kiln_save_desc *desc, pz_out *out,
                            pz_bytes *bytes, kiln_component c, kiln_entity e, const void *value) {
    kiln_result r = pz_encode(world, desc, c, e, value, bytes, "kiln_save");
    if (r != KILN_OK) return r;
    put32(out, (uint32_t)bytes->size);
    pz_put(out, bytes->data, bytes->size);
    return KILN_OK;
}

/* A column whose values hold entity fields: runs of rows go out as they are when every
 * reference in them is live (the usual case), else through a copy with the dead ones nulled. */
static kiln_result put_references(kiln_world *world, const pz_live *live, const kiln_component_info *info,
                                  const kl_column *col, int32_t count, pz_out *out, pz_bytes *bytes) {
    size_t size = info->size;
    int32_t chunk = size <= 8192 ? (int32_t)(65536 / size) : 1;
    for (int32_t row = 0; row < count; row += chunk) {
        int32_t m = count - row < chunk ? count - row : chunk;
        const uint8_t *src = col->data + (size_t)row * col->stride;
        if (col->stride == size && pz_live_rows(live, info, src, size, (size_t)m)) {
            pz_put(out, src, size * (size_t)m);
            continue;
        }
        uint8_t *v = pz_scratch(bytes, size * (size_t)m);
        if (!v) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_save: out of memory");
        if (col->stride == size) memcpy(v, src, size * (size_t)m);
        else
            for (int32_t i = 0; i < m; i++) memcpy(v + (size_t)i * size, src + (size_t)i * col->stride, size);
        pz_null_dead_rows(live, info, v, size, (size_t)m);
        pz_put(out, v, size * (size_t)m);
    }
    return KILN_OK;
}

static kiln_result put_group(kiln_world *world, const kiln_save_desc *desc, const pz_plan *plan,
                             const pz_live *live, int32_t g, pz_out *out, pz_bytes *bytes) {
    const kl_archetype *arch = plan->groups[g];
    const int32_t *types = plan->group_types + (size_t)g * (size_t)plan->max_types;
    int32_t tc = plan->group_type_count[g];
    kiln_result r = pz_progress(world, desc, arch->count);
    if (r != KILN_OK) return r;
    put32(out, (uint32_t)tc);
    for (int32_t t = 0; t < tc; t++) put32(out, (uint32_t)types[t]);
    put64(out, (uint64_t)arch->count);
    /* zeros up to an 8-byte offset: a loader reads the handles where they lie */
    while (out->offset % 8) put8(out, 0);
    pz_put(out, arch->entities, sizeof(kiln_entity) * (size_t)arch->count);
    for (int32_t t = 0; t < tc; t++) {
        const kiln_component_info *info = &plan->info[types[t]];
        if (info->size == 0) continue;
        const kl_column *col = kl_archetype_column(arch, info->id);
        if (plan->codec[types[t]]) {
            for (int32_t row = 0; row < arch->count; row++) {
                r = put_blob(world, desc, out, bytes, info->id, arch->entities[row],
                                         col->data + (size_t)row * col->stride);
                if (r != KILN_OK) return r;
            }
        } else if (pz_has_entity_fields(info)) {
            r = put_references(world, live, info, col, arch->count, out, bytes);
            if (r != KILN_OK) return r;
        } else if (col->stride == info->size) {
            pz_put(out, col->data, info->size * (size_t)arch->count);
        } else {
            for (int32_t row = 0; row < arch->count; row++)
                pz_put(out, col->data + (size_t)row * col->stride, info->size);
        }
    }
    return KILN_OK;
}

/* The references a save checks (entity fields of plain components). */
static int64_t references(const pz_plan *plan) {
    int64_t n = 0;
    for (int32_t g = 0; g < plan->group_count; g++) {
        const int32_t *types = plan->group_types + (size_t)g * (size_t)plan->max_types;
        for (int32_t t = 0; t < plan->group_type_count[g]; t++)
            if (!plan->codec[types[t]]) n += plan->groups[g]->count * pz_entity_slots(&plan->info[types[t]]);
    }
    return n;
}

/* The length of the world's free list. */
static uint32_t free_length(const kiln_world *world) {
    uint32_t n = 0;
    for (uint32_t i = world->free_head; i != KL_NONE; i = kl_record_next(kl_record_at(world, i))) n++;
    return n;
}

/* The free list, the handles the next spawns get in order; a dead slot not on it is retired. */
static void put_free_list(pz_out *out, const kiln_world *world) {
    for (uint32_t i = world->free_head; i != KL_NONE;) {
        const kl_record *rec = kl_record_at(world, i);
        put64(out, kiln_entity_make(i, kl_record_generation(rec)));
        i = kl_record_next(rec);
    }
}

kiln_result pz_save_binary(kiln_world *world, const kiln_save_desc *desc, const pz_plan *plan,
                           pz_out *out) {
    pz_put(out, PZ_MAGIC, PZ_MAGIC_SIZE);
    put32(out, KILN_PERSIST_VERSION);
    put32(out, ENDIAN_MARK);
    put64(out, world->tick); /* (versions 1 and 2: 32 bits) */
    put32(out, (uint32_t)plan->count);
    put32(out, (uint32_t)plan->group_count);
    put32(out, (uint32_t)plan->resource_count);
    put64(out, (uint64_t)world->alive);
    put32(out, kl_slot_count(world)); /* every slot: (versions 2 and 3: the highest live one + 1) */
    put32(out, free_length(world));
    put_free_list(out, world);
    for (int32_t i = 0; i < plan->count; i++) put_schema(out, &plan->info[i], plan->codec[i]);
    pz_bytes bytes = {.alloc = &world->alloc};
    kiln_result r = KILN_OK;
    pz_live live;
    pz_live_open(&live, world, references(plan));
    for (int32_t g = 0; g < plan->group_count && r == KILN_OK; g++)
        r = put_group(world, desc, plan, &live, g, out, &bytes);
    pz_live_close(&live);
    for (int32_t k = 0; k < plan->resource_count && r == KILN_OK; k++) {
        int32_t i = plan->resources[k];
        const kiln_component_info *info = &plan->info[i];
        if (!kiln_resource_has(world, info->id)) {
            r = pz_resource_gone(world, info->name);
            break;
        }
        put32(out, (uint32_t)i);
        const void *value = kiln_resource_get(world, info->id);
        if (info->size == 0) continue;
        if (plan->codec[i]) {
            r = put_blob(world, desc, out, &bytes, info->id, KILN_NULL_ENTITY, value);
        } else {
            uint8_t *v = pz_scratch(&bytes, info->size);
            if (!v) {
                r = kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_save: out of memory");
                break;
            }
            memcpy(v, value, info->size);
            pz_null_dead(world, info, v);
            pz_put(out, v, info->size);
        }
    }
    pz_bytes_free(&bytes);
    if (r != KILN_OK) return r;
    put8(out, desc->host_data ? 1 : 0);
    if (desc->host_data) {
        put64(out, (uint64_t)desc->host_size);
        pz_put(out, desc->host_data, desc->host_size);
    }
    return KILN_OK;
}

/* ---- reading ---- */

typedef struct reader {
    kiln_world *world;
    pz_doc *doc;
    const uint8_t *data;
    size_t size, pos;
    kiln_result r;
    uint32_t version;
    uint64_t *listed;      /* a bit per schema, set while a group's types are read */
} reader;

static bool fail(reader *rd, kiln_result code, const char *fmt, const char *what, int64_t n) {
    if (rd->r != KILN_OK) return false;
    char detail[160];
    snprintf(detail, sizeof detail, fmt, what, (long long)n);
    rd->r = kl_fail(rd->world, code, "kiln_load: at byte %zu: %s", rd->pos, detail);
    return false;
}

/* Makes sure n more bytes are there; what names what is being read. */
static bool need(reader *rd, uint64_t n, const char *what) {
    if (rd->r != KILN_OK) return false;
    if (n > rd->size - rd->pos) return fail(rd, KILN_ERR_INVALID_ARGUMENT, "truncated in %s%.0lld", what, 0);
    return true;
}

static uint8_t rd8(reader *rd, const char *what) {
    if (!need(rd, 1, what)) return 0;
    return rd->data[rd->pos++];
}
static uint32_t rd32(reader *rd, const char *what) {
    if (!need(rd, 4, what)) return 0;
    uint32_t v = pz_rd32(rd->data + rd->pos);
    rd->pos += 4;
    return v;
}
static uint64_t rd64(reader *rd, const char *what) {
    if (!need(rd, 8, what)) return 0;
    uint64_t v = pz_rd64(rd->data + rd->pos);
    rd->pos += 8;
    return v;
}
static const uint8_t *rdn(reader *rd, uint64_t n, const char *what) {
    if (!need(rd, n, what)) return NULL;
    const uint8_t *p = rd->data + rd->pos;
    rd->pos += (size_t)n;
    return p;
}

static void *arena(reader *rd, uint64_t size) {
    void *p = size < SIZE_MAX / 2 ? pz_alloc(&rd->doc->arena, (size_t)size) : NULL;
    if (!p && rd->r == KILN_OK) rd->r = kl_fail(rd->world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
    return p;
}

static void *arena_raw(reader *rd, uint64_t size) {
    void *p = size < SIZE_MAX / 2 ? pz_alloc_raw(&rd->doc->arena, (size_t)size) : NULL;
    if (!p && rd->r == KILN_OK) rd->r = kl_fail(rd->world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
    return p;
}

static const char *rd_name(reader *rd, const char *what) {
    uint8_t n = rd8(rd, what);
    if (rd->r != KILN_OK) return NULL;
    if (n == 0 || n > KILN_MAX_NAME) return fail(rd, KILN_ERR_INVALID_ARGUMENT, "%s has a name of %lld bytes (1..63 allowed)", what, n), NULL;
    const uint8_t *p = rdn(rd, n, what);
    char *s = p ? arena(rd, (uint64_t)n + 1) : NULL;
    if (!s) return NULL;
    memcpy(s, p, n);
    if (memchr(s, 0, n)) return fail(rd, KILN_ERR_INVALID_ARGUMENT, "%s has a NUL byte in its name%.0lld", what, 0), NULL;
    return s;
}

static bool rd_schema(reader *rd, pz_schema *s) {
    s->name = rd_name(rd, "a schema");
    s->size = rd32(rd, "a schema");
    uint8_t codec = rd8(rd, "a schema");
    uint16_t fc = 0;
    const uint8_t *p = rdn(rd, 2, "a schema");
    if (p) memcpy(&fc, p, 2);
    if (rd->r != KILN_OK) return false;
    if (codec > 1 || (codec && s->size == 0)) return fail(rd, KILN_ERR_INVALID_ARGUMENT, "schema '%s' has an unknown kind %lld", s->name, codec);
    if (s->size > (1u << 24)) return fail(rd, KILN_ERR_LIMIT, "schema '%s' has an absurd size %lld", s->name, s->size);
    if (fc > KILN_MAX_FIELDS) return fail(rd, KILN_ERR_LIMIT, "schema '%s' has %lld fields (at most 64)", s->name, fc);
    s->codec = codec == 1;
    s->field_count = fc;
    s->fields = arena(rd, sizeof(pz_field) * ((size_t)fc + 1));
    for (int32_t f = 0; f < fc && rd->r == KILN_OK; f++) {
        pz_field *fd = &s->fields[f];
        fd->name = rd_name(rd, "a field");
        uint8_t type = rd8(rd, "a field");
        fd->count = rd32(rd, "a field");
        fd->offset = rd32(rd, "a field");
        if (rd->r != KILN_OK) return false;
        if (type == KILN_TYPE_NONE || type >= KILN_TYPE_COUNT)
            return fail(rd, KILN_ERR_INVALID_ARGUMENT, "field '%s' has an unknown type %lld", fd->name, type);
        fd->type = (kiln_type)type;
        uint64_t end = (uint64_t)fd->offset + (uint64_t)kiln_type_size(fd->type) * fd->count;
        if (fd->count == 0 || end > s->size)
            return fail(rd, KILN_ERR_INVALID_ARGUMENT, "field '%s' lies outside its component (ends at %lld)", fd->name, (int64_t)end);
        for (int32_t g = 0; g < f; g++)
            if (strcmp(s->fields[g].name, fd->name) == 0)
                return fail(rd, KILN_ERR_INVALID_ARGUMENT, "field '%s' appears twice%.0lld", fd->name, 0);
    }
    return rd->r == KILN_OK;
}

static bool rd_blob(reader *rd, pz_blob *b, const char *what) {
    uint32_t n = rd32(rd, what);
    b->data = rdn(rd, n, what);
    b->size = n;
    return rd->r == KILN_OK;
}

/* Bool fields of count values of s at values (read from byte at) hold 0 or 1: C code reading
 * a bool holding anything else has undefined behaviour, and JSON could not say it. */
static bool check_bools(reader *rd, const pz_schema *s, const uint8_t *values, uint64_t count, size_t at) {
    for (int32_t f = 0; f < s->field_count && values; f++) {
        const pz_field *fd = &s->fields[f];
        if (fd->type != KILN_TYPE_BOOL) continue;
        for (uint64_t r = 0; r < count; r++)
            for (uint32_t k = 0; k < fd->count; k++) {
                size_t off = (size_t)r * s->size + fd->offset + k;
                if (values[off] <= 1) continue;
                char name[84];
                snprintf(name, sizeof name, "%.40s.%.40s", s->name, fd->name); /* (the message's room) */
                rd->pos = at + off;
                return fail(rd, KILN_ERR_INVALID_ARGUMENT, "field '%s' holds %lld, not a boolean (0 or 1)", name,
                            values[off]);
            }
    }
    return true;
}

static bool rd_group(reader *rd, pz_group *g, int64_t *entities_left) {
    uint32_t tc = rd32(rd, "a group");
    if (rd->r != KILN_OK) return false;
    if (tc > rd->doc->schema_count) return fail(rd, KILN_ERR_LIMIT, "a group lists %s%lld types, more than there are schemas", "", tc);
    g->type_count = (int32_t)tc;
    g->types = arena(rd, sizeof(uint32_t) * ((size_t)tc + 1));
    g->values = arena(rd, sizeof(uint8_t *) * ((size_t)tc + 1));
    g->blobs = arena(rd, sizeof(pz_blob *) * ((size_t)tc + 1));
    /* listed marks the group's schemas (one bit each), so a repeat is found in one pass */
    for (uint32_t t = 0; t < tc && rd->r == KILN_OK; t++) {
        uint32_t type = g->types[t] = rd32(rd, "a group's types");
        if (rd->r == KILN_OK && type >= rd->doc->schema_count)
            return fail(rd, KILN_ERR_INVALID_ARGUMENT, "a group names schema #%s%lld, which does not exist", "", type);
        if (rd->r == KILN_OK && (rd->listed[type / 64] >> (type % 64) & 1)) {
            for (uint32_t u = 0; u < t; u++) rd->listed[g->types[u] / 64] = 0;
            return fail(rd, KILN_ERR_INVALID_ARGUMENT, "a group lists '%s' twice%.0lld", rd->doc->schemas[type].name, 0);
        }
        if (rd->r == KILN_OK) rd->listed[type / 64] |= (uint64_t)1 << (type % 64);
    }
    for (uint32_t t = 0; t < tc && rd->r == KILN_OK; t++) rd->listed[g->types[t] / 64] = 0;
    uint64_t count = rd64(rd, "a group");
    if (rd->r != KILN_OK) return false;
    if (count == 0 || count > (uint64_t)*entities_left || count > (rd->size - rd->pos) / 8)
        return fail(rd, KILN_ERR_LIMIT, "a group claims %s%lld entities, more than the input holds", "", (int64_t)count);
    *entities_left -= (int64_t)count;
    g->count = (int64_t)count;
    if (rd->version >= 2) { /* zeros up to an 8-byte offset */
        const uint8_t *pad = rdn(rd, (8 - rd->pos % 8) % 8, "a group's padding");
        for (const uint8_t *p = pad; p && p < rd->data + rd->pos; p++)
            if (*p) return fail(rd, KILN_ERR_INVALID_ARGUMENT, "a group's padding holds a non-zero byte%s%.0lld", "", 0);
    }
    const uint8_t *handles = rdn(rd, count * 8, "a group's entity handles");
    if (!handles) return false;
    if ((uintptr_t)handles % _Alignof(kiln_entity) == 0) { /* read where they lie */
        g->handles = (const kiln_entity *)(const void *)handles;
    } else {
        kiln_entity *copy = arena_raw(rd, count * 8);
        if (!copy) return false;
        memcpy(copy, handles, count * 8);
        g->handles = copy;
    }
    for (uint32_t t = 0; t < tc && rd->r == KILN_OK; t++) {
        const pz_schema *s = &rd->doc->schemas[g->types[t]];
        if (s->size == 0) continue;
        if (!s->codec) {
            size_t at = rd->pos;
            g->values[t] = rdn(rd, count * s->size, s->name);
            if (!check_bools(rd, s, g->values[t], count, at)) return false;
            continue;
        }
        if (count > (rd->size - rd->pos) / 4)
            return fail(rd, KILN_ERR_INVALID_ARGUMENT, "truncated in the values of '%s'%.0lld", s->name, 0);
        g->blobs[t] = arena(rd, sizeof(pz_blob) * count);
        for (uint64_t i = 0; i < count && g->blobs[t]; i++)
            if (!rd_blob(rd, &g->blobs[t][i], s->name)) return false;
    }
    return rd->r == KILN_OK;
}

static bool rd_header(reader *rd) {
    const uint8_t *magic = rdn(rd, PZ_MAGIC_SIZE, "the header");
    if (!magic) return false;
    if (memcmp(magic, PZ_MAGIC, PZ_MAGIC_SIZE) != 0)
        return fail(rd, KILN_ERR_INVALID_ARGUMENT, "not a kiln save (bad magic)%s%.0lld", "", 0);
    uint32_t version = rd32(rd, "the header");
    if (rd->r == KILN_OK && (version < 1 || version > KILN_PERSIST_VERSION))
        return fail(rd, KILN_ERR_INVALID_ARGUMENT, "version %s%lld is not supported (this build reads versions 1 to 4)", "", version);
    rd->version = version;
    if (rd32(rd, "the header") != ENDIAN_MARK && rd->r == KILN_OK)
        return fail(rd, KILN_ERR_INVALID_ARGUMENT, "byte order mark is wrong%s%.0lld", "", 0);
    pz_doc *doc = rd->doc;
    doc->tick = version >= 3 ? rd64(rd, "the header") : rd32(rd, "the header");
    /* (see kiln_persist.h; versions 1 and 2 held at most 2^31 - 1) */
    if (doc->tick > (version >= 3 ? KILN_SAVE_TICK_MAX : 0x7fffffffu) && rd->r == KILN_OK) {
        char text[96];
        snprintf(text, sizeof text, "the tick %llu is past %s, the most a version %u save holds",
                 (unsigned long long)doc->tick, version >= 3 ? "2^53 - 1" : "2^31 - 1", (unsigned)version);
        return fail(rd, KILN_ERR_INVALID_ARGUMENT, "%s%.0lld", text, 0);
    }
    doc->schema_count = rd32(rd, "the header");
    doc->group_count = rd32(rd, "the header");
    doc->resource_count = rd32(rd, "the header");
    uint64_t entities = rd64(rd, "the header");
    if (version >= 2) { /* the saving world's highest live slot + 1 (version 1: found by a pass) */
        doc->slots = rd32(rd, "the header");
        doc->has_slots = true;
    }
    if (version >= 4) { /* the free list's length (its handles follow the header) */
        doc->free_count = rd32(rd, "the header");
        doc->has_free = true;
    }
    if (rd->r != KILN_OK) return false;
    /* every schema, group and resource takes at least 4 bytes, every entity 8 */
    uint64_t left = rd->size - rd->pos;
    if (doc->schema_count > left / 4 || doc->group_count > left / 4 ||
        doc->resource_count > left / 4 || entities > left / 8 || entities >= PZ_MAX_COUNT)
        return fail(rd, KILN_ERR_LIMIT, "the header's counts are larger than the input%s%.0lld", "", 0);
    if (doc->has_slots && doc->slots < entities) /* every entity has a slot of its own */
        return fail(rd, KILN_ERR_INVALID_ARGUMENT, "the header's slot count %s%lld is below its entity count", "", doc->slots);
    if (doc->has_free && doc->free_count > doc->slots - entities) /* free slots hold no entity */
        return fail(rd, KILN_ERR_INVALID_ARGUMENT, "the free list's length %s%lld is more than the slots no entity holds", "",
                    doc->free_count);
    doc->entity_count = (int64_t)entities;
    return true;
}

/* The free list (version 4): each a valid handle below the slot count. */
static void rd_free_list(reader *rd) {
    pz_doc *doc = rd->doc;
    if (!doc->has_free || !need(rd, 8 * (uint64_t)doc->free_count, "the free list")) return;
    kiln_entity *free = arena(rd, sizeof(kiln_entity) * ((size_t)doc->free_count + 1));
    for (uint32_t k = 0; k < doc->free_count && free; k++) {
        kiln_entity e = pz_rd64(rd->data + rd->pos);
        if (kiln_entity_generation(e) == 0 || (e >> (KILN_ENTITY_INDEX_BITS + KILN_ENTITY_GENERATION_BITS)) != 0 ||
            kiln_entity_index(e) >= doc->slots) {
            fail(rd, KILN_ERR_INVALID_ARGUMENT, "free list entry %s%lld is not a handle below the slot count", "", k);
            return;
        }
        free[k] = e;
        rd->pos += 8;
    }
    doc->free = free;
}

kiln_result pz_parse_binary(kiln_world *world, const uint8_t *data, size_t size, pz_doc *doc) {
    reader rd = {world, doc, data, size, 0, KILN_OK, 0, NULL};
    if (!rd_header(&rd)) return rd.r;
    rd_free_list(&rd);
    doc->schemas = arena(&rd, sizeof(pz_schema) * ((size_t)doc->schema_count + 1));
    doc->groups = arena(&rd, sizeof(pz_group) * ((size_t)doc->group_count + 1));
    doc->resources = arena(&rd, sizeof(pz_resource) * ((size_t)doc->resource_count + 1));
    pz_schema_names names;
    rd.listed = arena(&rd, sizeof(uint64_t) * ((size_t)doc->schema_count / 64 + 1));
    if (rd.r == KILN_OK && !pz_schema_names_init(&names, doc, world))
        rd.r = kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
    for (uint32_t i = 0; i < doc->schema_count && rd.r == KILN_OK; i++) {
        if (!rd_schema(&rd, &doc->schemas[i])) break;
        if (pz_schema_names_add(&names, i) >= 0)
            fail(&rd, KILN_ERR_INVALID_ARGUMENT, "schema '%s' appears twice%.0lld", doc->schemas[i].name, 0);
    }
    int64_t left = doc->entity_count;
    for (uint32_t g = 0; g < doc->group_count && rd.r == KILN_OK; g++) rd_group(&rd, &doc->groups[g], &left);
    if (rd.r == KILN_OK && left != 0)
        fail(&rd, KILN_ERR_INVALID_ARGUMENT, "the groups hold %s%lld fewer entities than the header says", "", left);
    for (uint32_t k = 0; k < doc->resource_count && rd.r == KILN_OK; k++) {
        pz_resource *res = &doc->resources[k];
        res->schema = rd32(&rd, "a resource");
        if (rd.r != KILN_OK) break;
        if (res->schema >= doc->schema_count) {
            fail(&rd, KILN_ERR_INVALID_ARGUMENT, "a resource names schema #%s%lld, which does not exist", "", res->schema);
            break;
        }
        const pz_schema *s = &doc->schemas[res->schema];
        if (s->size == 0) continue;
        if (s->codec) rd_blob(&rd, &res->blob, s->name);
        else {
            size_t at = rd.pos;
            res->value = rdn(&rd, s->size, s->name);
            if (!check_bools(&rd, s, res->value, 1, at)) break;
        }
    }
    uint8_t has_host = rd8(&rd, "the host data");
    if (rd.r == KILN_OK && has_host > 1) fail(&rd, KILN_ERR_INVALID_ARGUMENT, "the host data flag is %s%lld", "", has_host);
    if (rd.r == KILN_OK && has_host) {
        uint64_t n = rd64(&rd, "the host data");
        if (rd.r == KILN_OK && n > UINT32_MAX) fail(&rd, KILN_ERR_LIMIT, "the host data is %s%lld bytes long", "", (int64_t)n);
        doc->host.data = rdn(&rd, n, "the host data");
        doc->host.size = (uint32_t)n;
        doc->has_host = true;
    }
    if (rd.r == KILN_OK && rd.pos != size)
        fail(&rd, KILN_ERR_INVALID_ARGUMENT, "%s%lld bytes follow the end of the save", "", (int64_t)(size - rd.pos));
    return rd.r;
}
