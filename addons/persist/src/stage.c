/* stage.c: a parsed save, checked against the world and committed: schemas matched by name,
 * handles mapped, values converted and re-pointed, then check hooks. Invariant: every
 * failure after the first spawn is undone, so a load lands whole or not at all. */
#include <stdio.h>
#include <string.h>

#include "../../transform/src/transform_links.h" /* rows that came back: the children index */
#include "component.h"
#include "persist_internal.h"
#include "resource.h"

static kiln_result fail(kiln_world *world, kiln_result code, const char *fmt, const char *a,
                        const char *b, const char *c) {
    char detail[200];
    snprintf(detail, sizeof detail, fmt, a, b, c);
    return kl_fail(world, code, "kiln_load: %s", detail);
}

static kiln_result oom(kiln_world *world) {
    return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
}

/* ---- types ---- */

static int rank_signed(kiln_type t) {
    switch (t) {
    case KILN_TYPE_INT8: return 1;
    case KILN_TYPE_INT16: return 2;
    case KILN_TYPE_INT32: return 3;
    case KILN_TYPE_INT64: return 4;
    default: return 0;
    }
}
static int rank_unsigned(kiln_type t) {
    switch (t) {
    case KILN_TYPE_UINT8: return 1;
    case KILN_TYPE_UINT16: return 2;
    case KILN_TYPE_UINT32: return 3;
    case KILN_TYPE_UINT64: return 4;
    default: return 0;
    }
}

bool pz_widens(kiln_type from, kiln_type to) {
    if (from == to) return true;
    int fs = rank_signed(from), fu = rank_unsigned(from);
    int ts = rank_signed(to), tu = rank_unsigned(to);
    if (fs && ts) return ts > fs;
    if (fu && tu) return tu > fu;
    if (fu && ts) return ts > fu;
    if (to == KILN_TYPE_FLOAT) return fs == 1 || fs == 2 || fu == 1 || fu == 2;
    if (to == KILN_TYPE_DOUBLE) return (fs && fs <= 3) || (fu && fu <= 3) || from == KILN_TYPE_FLOAT;
    return false;
}

void pz_convert(kiln_type from, const uint8_t *src, kiln_type to, uint8_t *dst) {
    int64_t i = 0;
    uint64_t u = 0;
    double d = 0;
    bool is_float = false, is_unsigned = false;
    switch (from) {
    case KILN_TYPE_INT8: { int8_t v; memcpy(&v, src, 1); i = v; break; }
    case KILN_TYPE_INT16: { int16_t v; memcpy(&v, src, 2); i = v; break; }
    case KILN_TYPE_INT32: { int32_t v; memcpy(&v, src, 4); i = v; break; }
    case KILN_TYPE_INT64: memcpy(&i, src, 8); break;
    case KILN_TYPE_UINT8: { uint8_t v; memcpy(&v, src, 1); u = v; is_unsigned = true; break; }
    case KILN_TYPE_UINT16: { uint16_t v; memcpy(&v, src, 2); u = v; is_unsigned = true; break; }
    case KILN_TYPE_UINT32: { uint32_t v; memcpy(&v, src, 4); u = v; is_unsigned = true; break; }
    case KILN_TYPE_UINT64: memcpy(&u, src, 8); is_unsigned = true; break;
    case KILN_TYPE_FLOAT: {
        uint32_t b;
        memcpy(&b, src, 4);
        if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu)) { /* a NaN: its bits, not a conversion */
            uint64_t wide = (uint64_t)(b >> 31) << 63 | UINT64_C(0x7ff) << 52 | (uint64_t)(b & 0x7fffffu) << 29;
            memcpy(dst, &wide, 8); /* the only widening of a float is to a double */
            return;
        }
        float v;
        memcpy(&v, &b, 4);
        d = v;
        is_float = true;
        break;
    }
    default: memcpy(dst, src, kiln_type_size(from)); return; /* same type */
    }
    if (!is_float) d = is_unsigned ? (double)u : (double)i;
    if (is_unsigned) i = (int64_t)u;
    switch (to) {
    case KILN_TYPE_INT16: { int16_t v = (int16_t)i; memcpy(dst, &v, 2); break; }
    case KILN_TYPE_INT32: { int32_t v = (int32_t)i; memcpy(dst, &v, 4); break; }
    case KILN_TYPE_INT64: memcpy(dst, &i, 8); break;
    case KILN_TYPE_UINT16: { uint16_t v = (uint16_t)i; memcpy(dst, &v, 2); break; }
    case KILN_TYPE_UINT32: { uint32_t v = (uint32_t)i; memcpy(dst, &v, 4); break; }
    case KILN_TYPE_UINT64: { uint64_t v = (uint64_t)i; memcpy(dst, &v, 8); break; }
    case KILN_TYPE_FLOAT: { float v = (float)d; memcpy(dst, &v, 4); break; }
    case KILN_TYPE_DOUBLE: memcpy(dst, &d, 8); break;
    default: memcpy(dst, src, kiln_type_size(to)); break;
    }
}

/* ---- resolving schemas ---- */

static const kiln_field *world_field(const kiln_component_info *info, const char *name) {
    for (int32_t f = 0; f < info->field_count; f++)
        if (strcmp(info->fields[f].name, name) == 0) return &info->fields[f];
    return NULL;
}

static kiln_result resolve_fields(kiln_world *world, pz_schema *s, bool skip) {
    const kiln_component_info *info = &s->info;
    if (info->field_count == 0 || s->field_count == 0) {
        /* raw bytes: only the very same size can be taken as it is */
        if (s->field_count == 0 && info->field_count == 0 && s->size == info->size) return s->same = true, KILN_OK;
        return fail(world, KILN_ERR_LAYOUT_MISMATCH,
                    "component '%s' has no reflected fields on one side and a different layout%s%s",
                    s->name, "", "");
    }
    bool same = s->size == info->size && s->field_count == info->field_count;
    uint64_t covered = 0;
    for (int32_t f = 0; f < s->field_count; f++) {
        pz_field *fd = &s->fields[f];
        const kiln_field *t = world_field(info, fd->name);
        fd->target = t;
        if (t) covered |= (uint64_t)1 << (t - info->fields);
        if (!t) {
            same = false;
            if (skip) continue;
            return fail(world, KILN_ERR_UNKNOWN_COMPONENT,
                        "field '%s.%s' is not in this world's component%s", s->name, fd->name, "");
        }
        uint32_t tcount = t->count ? t->count : 1;
        if (!pz_widens(fd->type, t->type) || fd->count > tcount ||
            (fd->type != t->type && fd->count != tcount && t->type != KILN_TYPE_CHAR)) {
            char detail[160];
            snprintf(detail, sizeof detail,
                     "was %s[%u] in the file and is %s[%u] now (only a widening that loses nothing is converted)",
                     kiln_type_name(fd->type), (unsigned)fd->count, kiln_type_name(t->type), (unsigned)tcount);
            return fail(world, KILN_ERR_LAYOUT_MISMATCH, "field '%s.%s' %s", s->name, fd->name, detail);
        }
        if (fd->type != t->type || fd->count != tcount || fd->offset != t->offset) same = false;
    }
    s->same = same;
    /* the fields the component gained since the save take its defaults, as in a kiln_add */
    uint64_t all = info->field_count == 64 ? ~(uint64_t)0 : ((uint64_t)1 << info->field_count) - 1;
    s->missing = info->defaults ? all & ~covered : 0;
    return KILN_OK;
}

/* Checks s against s->info: the world's component of that name, or the layout the addon
 * would register it with. */
kiln_result pz_match_info(kiln_world *world, pz_schema *s, const kiln_load_desc *desc) {
    bool hooks = s->info.size > 0 && (s->info.has_destroy || s->info.has_move);
    if ((s->size == 0) != (s->info.size == 0))
        return fail(world, KILN_ERR_LAYOUT_MISMATCH, "component '%s' is a tag on one side only%s%s",
                    s->name, "", "");
    if (s->size == 0) return KILN_OK;
    if (s->codec != hooks)
        return fail(world, KILN_ERR_LAYOUT_MISMATCH, "component '%s' %s%s", s->name,
                    s->codec ? "was saved through a codec and is plain data now"
                             : "was saved as plain data and owns something now (it has hooks)", "");
    if (s->codec) {
        if (!desc->codec)
            return fail(world, KILN_ERR_INVALID_ARGUMENT,
                        "component '%s' was saved through a codec and no codec was given%s%s",
                        s->name, "", "");
        return KILN_OK;
    }
    return resolve_fields(world, s, desc->skip_unknown);
}

/* Checks s (its id found) against the world's component of that name. */
static kiln_result match_schema(kiln_world *world, pz_schema *s, const kiln_load_desc *desc) {
    kiln_component_info_get(world, s->id, &s->info);
    return pz_match_info(world, s, desc);
}

/* Matches every schema the world knows; the addon's own components it lacks are matched against
 * the layouts they would get and left pending (id 0) for register_pending, so a load its caller
 * refuses, or of another layout, registers nothing. */
static kiln_result resolve(kiln_world *world, pz_doc *doc, const kiln_load_desc *desc) {
    for (uint32_t i = 0; i < doc->schema_count; i++) {
        pz_schema *s = &doc->schemas[i];
        s->id = kiln_component_lookup(world, s->name);
        s->pending = !s->id && pz_addon_component(s->name);
        if (s->pending) {
            kiln_result r = pz_pending_match(world, s, desc);
            if (r != KILN_OK) return r;
            continue;
        }
        if (!s->id) {
            if (desc->skip_unknown) continue;
            return fail(world, KILN_ERR_UNKNOWN_COMPONENT,
                        "component '%s' is not registered in this world (skip_unknown skips it)%s%s",
                        s->name, "", "");
        }
        kiln_result r = match_schema(world, s, desc);
        if (r != KILN_OK) return r;
    }
    return KILN_OK;
}

/* Asks desc->owned about each owner mark the save puts on entities, with how many: one it
 * drops is skipped as an unknown one would be (its id 0). */
static kiln_result ask_owned(kiln_world *world, pz_doc *doc, const kiln_load_desc *desc) {
    if (!desc->owned) return KILN_OK;
    int64_t *holders = pz_alloc(&doc->arena, sizeof(int64_t) * ((size_t)doc->schema_count + 1));
    if (!holders) return oom(world);
    memset(holders, 0, sizeof(int64_t) * ((size_t)doc->schema_count + 1));
    for (uint32_t g = 0; g < doc->group_count; g++)
        for (int32_t t = 0; t < doc->groups[g].type_count; t++)
            holders[doc->groups[g].types[t]] += doc->groups[g].count;
    for (uint32_t i = 0; i < doc->schema_count; i++) {
        pz_schema *s = &doc->schemas[i];
        if (!s->id || !s->info.owner || holders[i] == 0) continue;
        char why[160] = "";
        bool drop = false;
        if (!desc->owned(desc->ud, s->id, holders[i], &drop, why, sizeof why))
            return kl_fail(world, KILN_ERR_LIMIT, "kiln_load: %s", why[0] ? why : "refused by the caller");
        if (drop) s->id = 0;
    }
    return KILN_OK;
}

/* ---- codec values ---- */

typedef struct decoded_column {
    uint8_t *values;   /* rows values of the world's layout */
    int64_t rows;      /* decoded so far (to discard on failure) */
} decoded_column;

typedef struct decoded {
    decoded_column **groups;    /* per group, per type */
    decoded_column *resources;  /* per resource */
} decoded;

static void discard_all(pz_doc *doc, const kiln_load_desc *desc, decoded *dec) {
    for (uint32_t g = 0; g < doc->group_count; g++) {
        const pz_group *gr = &doc->groups[g];
        for (int32_t t = 0; t < gr->type_count; t++) {
            decoded_column *dc = &dec->groups[g][t];
            const pz_schema *s = &doc->schemas[gr->types[t]];
            for (int64_t r = 0; r < dc->rows; r++)
                desc->codec->discard(desc->codec->ud, s->id, dc->values + (size_t)r * s->info.size);
            dc->rows = 0;
        }
    }
    for (uint32_t k = 0; k < doc->resource_count; k++) {
        decoded_column *dc = &dec->resources[k];
        if (dc->rows) desc->codec->discard(desc->codec->ud, doc->schemas[doc->resources[k].schema].id, dc->values);
        dc->rows = 0;
    }
}

static kiln_result decode_one(kiln_world *world, const kiln_load_desc *desc, const pz_schema *s,
                              const pz_blob *b, uint8_t *dest, kiln_entity e) {
    char why[160] = "";
    kiln_result r = desc->codec->decode(desc->codec->ud, s->id, b->data, b->size, dest, why, sizeof why);
    if (r == KILN_OK) return KILN_OK;
    char buf[24];
    if (e)
        return kl_fail(world, r, "kiln_load: entity %s component '%s': %s",
                       kiln_entity_format(e, buf, sizeof buf), s->name, why[0] ? why : "refused");
    return kl_fail(world, r, "kiln_load: resource '%s': %s", s->name, why[0] ? why : "refused");
}


static kiln_result decode_all(kiln_world *world, pz_doc *doc, const kiln_load_desc *desc, decoded *dec) {
    dec->groups = pz_alloc(&doc->arena, sizeof(decoded_column *) * ((size_t)doc->group_count + 1));
    dec->resources = pz_alloc(&doc->arena, sizeof(decoded_column) * ((size_t)doc->resource_count + 1));
    if (!dec->groups || !dec->resources) return oom(world);
    for (uint32_t g = 0; g < doc->group_count; g++) {
        dec->groups[g] = pz_alloc(&doc->arena, sizeof(decoded_column) * ((size_t)doc->groups[g].type_count + 1));
        if (!dec->groups[g]) return oom(world);
    }
    kiln_result r = KILN_OK;
    for (uint32_t g = 0; g < doc->group_count && r == KILN_OK; g++) {
        const pz_group *gr = &doc->groups[g];
        for (int32_t t = 0; t < gr->type_count && r == KILN_OK; t++) {
            const pz_schema *s = &doc->schemas[gr->types[t]];
            if (!s->codec || !s->id || !s->size || !desc->codec) continue;
            decoded_column *dc = &dec->groups[g][t];
            dc->values = pz_alloc(&doc->arena, s->info.size * (size_t)gr->count);
            if (!dc->values) { r = oom(world); break; }
            for (int64_t row = 0; row < gr->count && r == KILN_OK; row++) {
                r = decode_one(world, desc, s, &gr->blobs[t][row], dc->values + (size_t)row * s->info.size, gr->handles[row]);
                if (r == KILN_OK) dc->rows++;
            }
        }
    }
    for (uint32_t k = 0; k < doc->resource_count && r == KILN_OK; k++) {
        const pz_schema *s = &doc->schemas[doc->resources[k].schema];
        if (!s->codec || !s->id || !s->size || !desc->codec) continue;
        decoded_column *dc = &dec->resources[k];
        dc->values = pz_alloc(&doc->arena, s->info.size);
        if (!dc->values) { r = oom(world); break; }
        r = decode_one(world, desc, s, &doc->resources[k].blob, dc->values, KILN_NULL_ENTITY);
        if (r == KILN_OK) dc->rows = 1;
    }
    if (r != KILN_OK && desc->codec) discard_all(doc, desc, dec);
    return r;
}

/* ---- committing ---- */

void pz_convert_row(const pz_schema *s, const uint8_t *src, uint8_t *dst) {
    memset(dst, 0, s->info.size);
    for (int32_t f = 0; f < s->field_count; f++) {
        const pz_field *fd = &s->fields[f];
        const kiln_field *t = fd->target;
        if (!t) continue;
        size_t fsz = kiln_type_size(fd->type), tsz = kiln_type_size(t->type);
        if (fd->type == t->type) {
            memcpy(dst + t->offset, src + fd->offset, fsz * fd->count);
            continue;
        }
        for (uint32_t k = 0; k < fd->count; k++)
            pz_convert(fd->type, src + fd->offset + k * fsz, t->type, dst + t->offset + k * tsz);
    }
}

/* The world's fields of s that take the defaults in a value leaving out the schema's fields
 * omitted (JSON), besides those the schema lacks. */
static uint64_t defaulted(const pz_schema *s, uint64_t omitted) {
    uint64_t fields = s->missing;
    for (int32_t f = 0; omitted && s->info.defaults && f < s->field_count; f++)
        if (omitted >> f & 1 && s->fields[f].target) fields |= (uint64_t)1 << (s->fields[f].target - s->info.fields);
    return fields;
}

/* Writes the component's defaults over the world's fields (bit f: field f) of rows values
 * stride bytes apart; after the remap, so default entity fields land as given. */
static void fill_defaults(const pz_schema *s, uint64_t fields, uint8_t *base, size_t stride, size_t rows) {
    const uint8_t *defaults = s->info.defaults;
    for (int32_t f = 0; f < s->info.field_count; f++) {
        if (!(fields >> f & 1)) continue;
        const kiln_field *t = &s->info.fields[f];
        size_t size = kiln_type_size(t->type) * (t->count ? t->count : 1);
        for (size_t r = 0; r < rows; r++) memcpy(base + r * stride + t->offset, defaults + t->offset, size);
    }
}

/* Writes n references stride bytes apart from src to dst (the same place, or a copy's)
 * through the map; returns true when one of them (not null) names no entity of the file (it
 * is written as null, and the load fails: see name_outside). */
static bool remap_run(const pz_handle_map *m, const uint8_t *src, uint8_t *dst, size_t stride, size_t n) {
    /* noted without a branch (the bits of a reference the map does not hold, a mask away),
     * named by a second look only when set */
    uint64_t outside = 0;
    if (m->generation) { /* the direct map in a loop of its own: one load per reference */
        const uint32_t *gen = m->generation;
        uint32_t limit = (uint32_t)m->mask;
        const kiln_entity *values = m->values;
        if (!values) { /* the handles stay */
            for (size_t r = 0; r < n; r++, src += stride, dst += stride) {
                kiln_entity e;
                memcpy(&e, src, 8);
                uint32_t idx = kiln_entity_index(e), high = (uint32_t)(e >> 32);
                uint32_t at = idx < limit ? idx : limit;
                bool found = (high != 0) & (gen[at] == high);
                kiln_entity kept = found ? e : KILN_NULL_ENTITY;
                outside |= e ^ kept; /* e itself when it is lost */
                memcpy(dst, &kept, 8);
            }
            return outside != 0;
        }
        for (size_t r = 0; r < n; r++, src += stride, dst += stride) {
            kiln_entity e;
            memcpy(&e, src, 8);
            uint32_t idx = kiln_entity_index(e), high = (uint32_t)(e >> 32);
            uint32_t at = idx < limit ? idx : limit;
            bool found = (high != 0) & (gen[at] == high);
            outside |= e & ((uint64_t)found - 1); /* e itself when it is lost */
            e = found ? values[at] : KILN_NULL_ENTITY;
            memcpy(dst, &e, 8);
        }
        return outside != 0;
    }
    for (size_t r = 0; r < n; r++, src += stride, dst += stride) {
        kiln_entity e, to;
        memcpy(&e, src, 8);
        to = pz_map_get(m, e);
        outside |= (uint64_t)((e != KILN_NULL_ENTITY) & (to == KILN_NULL_ENTITY));
        memcpy(dst, &to, 8);
    }
    return outside != 0;
}

/* True when every 8 bytes of a value of info are one entity reference (Parent, a link): its
 * column is copied and remapped in one loop, as one run of references. */
static bool only_references(const kiln_component_info *info) {
    if (info->size == 0 || info->size % 8 || info->size > 8 * 64) return false;
    uint64_t covered = 0;
    for (int32_t f = 0; f < info->field_count; f++) {
        const kiln_field *fd = &info->fields[f];
        uint32_t n = fd->count ? fd->count : 1;
        if (fd->type != KILN_TYPE_ENTITY || fd->offset % 8) return false;
        for (uint32_t k = 0; k < n; k++) {
            uint32_t slot = fd->offset / 8 + k;
            if (slot >= 64 || (covered >> slot & 1)) return false;
            covered |= (uint64_t)1 << slot;
        }
    }
    return covered == (info->size == 8 * 64 ? ~(uint64_t)0 : ((uint64_t)1 << (info->size / 8)) - 1);
}

/* Rewrites the entity fields of rows values stride bytes apart through the map; true when
 * one names no entity of the file (see remap_run). */
static bool remap_rows(const kiln_component_info *info, const pz_handle_map *m, uint8_t *base,
                       size_t stride, size_t rows) {
    bool outside = false;
    for (int32_t f = 0; f < info->field_count; f++) {
        const kiln_field *fd = &info->fields[f];
        if (fd->type != KILN_TYPE_ENTITY) continue;
        uint32_t n = fd->count ? fd->count : 1;
        for (uint32_t k = 0; k < n; k++) {
            uint8_t *p = base + fd->offset + 8 * (size_t)k;
            outside |= remap_run(m, p, p, stride, rows);
        }
    }
    return outside;
}

/* How a reference prints in a message: a handle as 12v3, anything else in hex. */
static const char *reference_text(kiln_entity e, char *buf, size_t size) {
    if ((e >> (KILN_ENTITY_INDEX_BITS + KILN_ENTITY_GENERATION_BITS)) == 0 && kiln_entity_generation(e) != 0)
        return kiln_entity_format(e, buf, size);
    snprintf(buf, size, "0x%016llx", (unsigned long long)e);
    return buf;
}

/* The first reference (not null) of value (info's layout in the world: the file's fields
 * converted, those it lacks zero) that names no entity of the file: its field in dest (with
 * an index for arrays) and the reference; KILN_NULL_ENTITY when there is none. */
static kiln_entity first_outside(const kiln_component_info *info, const pz_handle_map *m, const uint8_t *value,
                                 char *dest, size_t size) {
    for (int32_t f = 0; f < info->field_count; f++) {
        const kiln_field *fd = &info->fields[f];
        if (fd->type != KILN_TYPE_ENTITY) continue;
        for (uint32_t k = 0; k < (fd->count ? fd->count : 1); k++) {
            kiln_entity e = pz_rd64(value + fd->offset + 8 * (size_t)k);
            if (e == KILN_NULL_ENTITY || pz_map_has(m, e)) continue;
            if (fd->count > 1) snprintf(dest, size, "%s[%u]", fd->name, (unsigned)k);
            else snprintf(dest, size, "%s", fd->name);
            return e;
        }
    }
    return KILN_NULL_ENTITY;
}

/* A save writes null for a reference to an entity it does not hold, so one in a file was
 * written by hand or damaged: fails naming the first (entity in the file, component, field and
 * the reference), read again from the file's values now that remap_run noted one. */
static kiln_result name_outside(kiln_world *world, pz_doc *doc, const pz_handle_map *m) {
    for (uint32_t g = 0; g < doc->group_count; g++) {
        const pz_group *gr = &doc->groups[g];
        for (int32_t t = 0; t < gr->type_count; t++) {
            const pz_schema *s = &doc->schemas[gr->types[t]];
            if (!s->id || !s->size || s->codec || !pz_has_entity_fields(&s->info)) continue;
            uint8_t *value = pz_alloc_raw(&doc->arena, s->info.size);
            if (!value) return oom(world);
            for (int64_t r = 0; r < gr->count; r++) {
                const uint8_t *src = gr->values[t] + (size_t)r * s->size;
                if (s->same) memcpy(value, src, s->info.size);
                else pz_convert_row(s, src, value);
                char field[KILN_MAX_NAME + 16], eb[24], rb[24];
                kiln_entity e = first_outside(&s->info, m, value, field, sizeof field);
                if (e == KILN_NULL_ENTITY) continue;
                return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                               "kiln_load: entity %s component '%s' field '%s' points to %s, an entity the file "
                               "does not hold (a save writes null there)",
                               kiln_entity_format(gr->handles[r], eb, sizeof eb), s->name, field,
                               reference_text(e, rb, sizeof rb));
            }
        }
    }
    return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_load: a reference points to an entity the file does not hold");
}

/* Writes group gr's column t; true when a reference in it names no entity of the file. */
static bool write_column(const pz_schema *s, const pz_group *gr, int32_t t, kl_column *col,
                         int32_t first, decoded_column *dc, const pz_handle_map *m) {
    uint8_t *base = col->data + (size_t)first * col->stride;
    size_t size = s->info.size;
    size_t count = (size_t)gr->count;
    if (s->codec) {
        for (size_t r = 0; r < count; r++) {
            memcpy(base + r * col->stride, dc->values + r * size, size);
            memset(base + r * col->stride + size, 0, col->stride - size);
        }
        dc->rows = 0; /* the world owns them now */
        return false;
    }
    const uint8_t *src = gr->values[t];
    bool refs = pz_has_entity_fields(&s->info);
    if (s->same && col->stride == size && only_references(&s->info))
        return remap_run(m, src, base, 8, count * (size / 8));
    if (s->same && col->stride == size && refs) {
        /* copied and remapped a run at a time, so the remap reads what is still in cache */
        size_t run = size <= 4096 ? 16384 / size : 1;
        bool outside = false;
        for (size_t r = 0; r < count; r += run) {
            size_t m_rows = count - r < run ? count - r : run;
            memcpy(base + r * size, src + r * size, size * m_rows);
            outside |= remap_rows(&s->info, m, base + r * size, size, m_rows);
        }
        return outside;
    }
    if (s->same && col->stride == size) memcpy(base, src, size * count);
    else if (s->same)
        for (size_t r = 0; r < count; r++) {
            memcpy(base + r * col->stride, src + r * size, size);
            memset(base + r * col->stride + size, 0, col->stride - size);
        }
    else
        for (size_t r = 0; r < count; r++) {
            pz_convert_row(s, src + r * s->size, base + r * col->stride);
            memset(base + r * col->stride + size, 0, col->stride - size);
        }
    bool outside = refs && remap_rows(&s->info, m, base, col->stride, count);
    if (s->missing) fill_defaults(s, s->missing, base, col->stride, count);
    return outside;
}

/* Runs the check hooks of every loaded value, straight on the rows. */
static kiln_result check_values(kiln_world *world, pz_doc *doc) {
    for (uint32_t g = 0; g < doc->group_count; g++) {
        const pz_group *gr = &doc->groups[g];
        const kl_record *rec = kl_record_of(world, gr->spawned[0]);
        const kl_archetype *arch = world->archetypes[kl_record_archetype(rec)];
        for (int32_t t = 0; t < gr->type_count; t++) {
            const pz_schema *s = &doc->schemas[gr->types[t]];
            if (!s->id || !s->info.has_check) continue;
            const kl_component *c = kl_component_get(world, s->id);
            const kl_column *col = kl_archetype_column(arch, s->id);
            int64_t r = 0;
            /* the check over all rows at once when the component has one: only a refused row
             * (or no memory for it) goes through the hook itself, for its message */
            if (c->check_rows && col)
                r = c->check_rows(world, gr->spawned, col->data + (size_t)kl_record_row(rec) * col->stride, col->stride,
                                  gr->count, c->hook_ctx);
            if (r < 0) r = 0;
            for (; r < gr->count; r++) {
                kiln_entity e = gr->spawned[r];
                const void *value = col ? col->data + (size_t)(kl_record_row(rec) + r) * col->stride : NULL;
                char why[KL_ERROR_SIZE - 64];
                why[0] = '\0';
                kiln_result rc = c->check(world, e, value, c->hook_ctx, why, sizeof why);
                if (rc == KILN_OK) continue;
                why[sizeof why - 1] = '\0';
                char buf[24], old[24];
                if (!why[0]) snprintf(why, sizeof why, "%s refuses the value for entity %s", c->names,
                                      kiln_entity_format(e, buf, sizeof buf));
                return kl_fail(world, rc, "kiln_load: entity %s (%s in the file) component '%s': %s",
                               kiln_entity_format(e, buf, sizeof buf),
                               kiln_entity_format(gr->handles[r], old, sizeof old), s->name, why);
            }
        }
    }
    return KILN_OK;
}

/* Every plain resource's value in the world's layout, made before anything lands (its entity
 * fields are remapped when the new handles are known): setting them then cannot fail halfway,
 * with some replaced and the rest not. Writes the array to dest. */
static kiln_result stage_resources(kiln_world *world, pz_doc *doc, const pz_handle_map *m, uint8_t ***dest) {
    uint8_t **staged = pz_alloc(&doc->arena, sizeof(uint8_t *) * ((size_t)doc->resource_count + 1));
    if (!staged) return oom(world);
    for (uint32_t k = 0; k < doc->resource_count; k++) {
        const pz_schema *s = &doc->schemas[doc->resources[k].schema];
        /* (pending: registered last, s->info is the layout it will get) */
        if ((!s->id && !s->pending) || s->size == 0 || s->codec) continue;
        uint8_t *v = staged[k] = pz_alloc(&doc->arena, s->info.size);
        if (!v) return oom(world);
        if (s->same) memcpy(v, doc->resources[k].value, s->info.size);
        else pz_convert_row(s, doc->resources[k].value, v);
        char field[KILN_MAX_NAME + 16], rb[24];
        kiln_entity e = first_outside(&s->info, m, v, field, sizeof field); /* (before the defaults) */
        if (e != KILN_NULL_ENTITY)
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                           "kiln_load: resource '%s' field '%s' points to %s, an entity the file does not hold "
                           "(a save writes null there)", s->name, field, reference_text(e, rb, sizeof rb));
        uint64_t fields = defaulted(s, doc->resources[k].omitted);
        if (fields) fill_defaults(s, fields, v, 0, 1);
        /* a pending RandomState is registered last (pz_pending_land), so its check hook cannot
         * be asked yet: its rule is, here (the registered ones: check_resources) */
        char why[128];
        if (s->pending && strcmp(s->name, "RandomState") == 0 && pz_random_state_check(v, why, sizeof why) != KILN_OK)
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_load: %s", why);
    }
    *dest = staged;
    return KILN_OK;
}

/* Re-points every staged resource's entity fields at the spawned entities, then asks each
 * resource's check hook (kiln_resource_set's rule: RandomState refuses all zero), while the
 * load can still be undone. */
static kiln_result check_resources(kiln_world *world, pz_doc *doc, decoded *dec, uint8_t **staged,
                                   const pz_handle_map *m) {
    for (uint32_t k = 0; k < doc->resource_count; k++) {
        const pz_schema *s = &doc->schemas[doc->resources[k].schema];
        if (!s->id || s->size == 0) continue;
        const void *v = s->codec ? dec->resources[k].values : staged[k];
        if (!s->codec) {
            remap_rows(&s->info, m, staged[k], 0, 1);
            uint64_t fields = defaulted(s, doc->resources[k].omitted);
            if (fields) fill_defaults(s, fields, staged[k], 0, 1); /* again: the remap saw default entity fields */
        }
        kiln_result r = kl_component_check(world, kl_component_get(world, s->id), KILN_NULL_ENTITY, v, "kiln_load");
        if (r != KILN_OK) return r;
    }
    return KILN_OK;
}

/* Sets every resource of the file (they exist: made first, and checked, so nothing here fails). */
static void set_resources(kiln_world *world, pz_doc *doc, decoded *dec, uint8_t **staged) {
    for (uint32_t k = 0; k < doc->resource_count; k++) {
        const pz_schema *s = &doc->schemas[doc->resources[k].schema];
        if (!s->id || s->size == 0) continue;
        kl_resource_put(world, s->id, s->codec ? dec->resources[k].values : staged[k]);
        if (s->codec) dec->resources[k].rows = 0;
    }
}

/* Spawns every group (rows land contiguously, see kiln_spawn_batch); writes how many groups
 * spawned to done. */
static kiln_result spawn_groups(kiln_world *world, pz_doc *doc, uint32_t *done) {
    kiln_component *comps = pz_alloc(&doc->arena, sizeof(kiln_component) * ((size_t)doc->schema_count + 1));
    if (!comps) return oom(world);
    for (uint32_t g = 0; g < doc->group_count; g++) {
        pz_group *gr = &doc->groups[g];
        int32_t m = 0;
        for (int32_t t = 0; t < gr->type_count; t++)
            if (doc->schemas[gr->types[t]].id) comps[m++] = doc->schemas[gr->types[t]].id;
        kiln_entity *spawned = pz_alloc_raw(&doc->arena, sizeof(kiln_entity) * (size_t)gr->count);
        if (!spawned) return oom(world);
        gr->spawned = spawned;
        if (gr->count > KL_ROWS_MAX)
            return kl_fail(world, KILN_ERR_LIMIT, "kiln_load: group %u holds too many entities", (unsigned)g);
        kiln_result r = kiln_spawn_batch(world, comps, m, (int32_t)gr->count, spawned);
        if (r != KILN_OK) {
            char why[KL_ERROR_SIZE];
            snprintf(why, sizeof why, "%s", kiln_world_error(world));
            const char *detail = strstr(why, ": ");
            return kl_fail(world, r, "kiln_load: %s", detail ? detail + 2 : why);
        }
        *done = g + 1;
    }
    return KILN_OK;
}

/* Writes every group's values; true when a reference names no entity of the file. */
static bool write_groups(kiln_world *world, pz_doc *doc, decoded *dec, const pz_handle_map *m) {
    bool outside = false;
    for (uint32_t g = 0; g < doc->group_count; g++) {
        pz_group *gr = &doc->groups[g];
        const kl_record *rec = kl_record_of(world, gr->spawned[0]);
        kl_archetype *arch = world->archetypes[kl_record_archetype(rec)];
        for (int32_t t = 0; t < gr->type_count; t++) {
            const pz_schema *s = &doc->schemas[gr->types[t]];
            if (!s->id || s->size == 0) continue;
            outside |= write_column(s, gr, t, kl_archetype_column(arch, s->id), (int32_t)kl_record_row(rec),
                                    &dec->groups[g][t], m);
        }
    }
    return outside;
}

/* Gives the fields JSON values left out the defaults (after the rows are written and remapped). */
static void write_omitted(kiln_world *world, const pz_doc *doc) {
    for (uint32_t i = 0; i < doc->omitted_count; i++) {
        const pz_omitted *o = &doc->omitted[i];
        const pz_group *gr = &doc->groups[o->group];
        const pz_schema *s = &doc->schemas[gr->types[o->type]];
        if (!s->id || s->size == 0 || s->codec) continue;
        uint64_t fields = defaulted(s, o->fields) & ~s->missing; /* (write_column did those) */
        if (!fields) continue;
        const kl_record *rec = kl_record_of(world, gr->spawned[o->row]);
        const kl_column *col = kl_archetype_column(world->archetypes[kl_record_archetype(rec)], s->id);
        fill_defaults(s, fields, col->data + (size_t)kl_record_row(rec) * col->stride, 0, 1);
    }
}

/* Spawns every group: at the saved handles (place: where, written by build_map) in a world
 * that never held an entity, else in fresh slots (kiln_spawn_batch; place NULL). Writes how
 * many groups spawned to done. */
static kiln_result place_groups(kiln_world *world, pz_doc *doc, uint64_t slots, const pz_place *place,
                                pz_handle_map *m, uint32_t *done) {
    if (place) {
        pz_slots_place(world, doc, slots, m->generation, place);
        *done = doc->group_count;
        return KILN_OK;
    }
    kiln_result r = spawn_groups(world, doc, done);
    if (r != KILN_OK) return r;
    for (uint32_t g = 0; g < doc->group_count; g++) pz_map_group(m, &doc->groups[g]);
    return KILN_OK;
}

kiln_result pz_commit(kiln_world *world, pz_doc *doc, const kiln_load_desc *desc) {
    /* Whatever asks the caller (owned, host, ready) goes before slots are reserved, and the
     * addon's components are registered last (pz_pending_land): a refused load leaves even the
     * registry as it was. */
    kiln_result r = resolve(world, doc, desc);
    if (r == KILN_OK) r = ask_owned(world, doc, desc);
    if (r == KILN_OK) r = pz_slots_check_free(world, doc); /* (into any world: the same file is refused alike) */
    decoded dec = {0};
    if (r == KILN_OK) r = decode_all(world, doc, desc, &dec);
    if (r != KILN_OK) return r;
    if (doc->has_host && desc->host) {
        char why[160] = "";
        if (!desc->host(desc->ud, doc->host.data, doc->host.size, why, sizeof why)) {
            if (desc->codec) discard_all(doc, desc, &dec);
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_load: host data: %s", why[0] ? why : "refused");
        }
    }
    if (desc->ready) {
        char why[160] = "";
        if (!desc->ready(desc->ud, doc->entity_count, why, sizeof why)) {
            if (desc->codec) discard_all(doc, desc, &dec);
            return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: %s", why[0] ? why : "refused by the caller");
        }
    }
    pz_handle_map map = {0};
    uint64_t slots = pz_saved_slots(doc);
    bool keep = r == KILN_OK && pz_slots_can_keep(world, doc, slots); /* (a dense map then) */
    pz_place place = {0};
    if (keep) r = pz_slots_reserve(world, doc, slots, &place);
    if (r == KILN_OK) r = pz_map_build(world, doc, slots, keep ? &place : NULL, &map);
    /* Resources the world lacks are made first, so setting them later cannot fail. */
    kiln_component *created = pz_alloc(&doc->arena, sizeof(kiln_component) * ((size_t)doc->resource_count + 1));
    uint32_t created_count = 0, spawned_groups = 0;
    if (!created && r == KILN_OK) r = oom(world);
    for (uint32_t k = 0; k < doc->resource_count && r == KILN_OK; k++) {
        kiln_component id = doc->schemas[doc->resources[k].schema].id;
        if (!id || kiln_resource_has(world, id)) continue;
        r = kl_resource_put(world, id, NULL); /* a placeholder the file's value replaces: unchecked */
        if (r == KILN_OK) created[created_count++] = id;
        else r = oom(world);
    }
    uint8_t **staged = NULL;
    if (r == KILN_OK) r = stage_resources(world, doc, &map, &staged);
    if (r == KILN_OK && keep && !pz_slots_can_keep(world, doc, slots)) {
        /* a callback spawned meanwhile: fresh slots after all */
        keep = false;
        map.values = pz_alloc_raw(&doc->arena, sizeof(kiln_entity) * map.mask);
        if (!map.values) r = oom(world);
    }
    if (r == KILN_OK) r = place_groups(world, doc, slots, keep ? &place : NULL, &map, &spawned_groups);
    if (r == KILN_OK) {
        if (write_groups(world, doc, &dec, &map)) {
            r = name_outside(world, doc, &map);
        } else {
            write_omitted(world, doc);
            /* a check hook changing the world would move rows it walks: refused (kl_in_hook) */
            world->in_hook++;
            world->in_check_of = "kiln_load";
            r = check_values(world, doc);
            world->in_check_of = NULL;
            world->in_hook--;
        }
    }
    world->in_hook++;
    world->in_check_of = "kiln_load";
    if (r == KILN_OK) r = check_resources(world, doc, &dec, staged, &map);
    world->in_check_of = NULL;
    world->in_hook--;
    if (r == KILN_OK) r = pz_pending_land(world, doc, desc, created, &created_count);
    if (r != KILN_OK) {
        char msg[KL_ERROR_SIZE];
        snprintf(msg, sizeof msg, "%s", kiln_world_error(world));
        /* latest first, so every slot goes back as it was (a world that never held an entity
         * is empty again: the saved handles were placed, not taken) */
        for (uint32_t g = spawned_groups; g-- > 0;)
            for (int64_t i = doc->groups[g].count; i-- > 0;) kiln_unspawn(world, doc->groups[g].spawned[i]);
        if (keep && spawned_groups) {
            world->free_head = KL_NONE;
            atomic_store_explicit(&world->slot_count, 0, memory_order_release);
        }
        if (desc->codec && dec.groups) discard_all(doc, desc, &dec);
        for (uint32_t k = 0; k < created_count; k++) kiln_resource_remove(world, created[k], NULL);
        kl_fail(world, r, "%s", msg);
        return r;
    }
    set_resources(world, doc, &dec, staged);
    kl_tick_forward(world, doc->tick); /* rebases when the jump leaves rows too far behind */
    pz_names_invalidate(world);
    kl_transform_links_invalidate(world);
    for (uint32_t g = 0; g < doc->group_count && desc->mapped; g++)
        for (int64_t i = 0; i < doc->groups[g].count; i++)
            desc->mapped(desc->ud, doc->groups[g].handles[i], doc->groups[g].spawned[i]);
    return KILN_OK;
}
