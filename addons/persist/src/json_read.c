/* json_read.c: the JSON loader: a jansson tree checked value by value into the staged
 * document, in the file's layout, the same as the binary parser fills. Invariant: a failure
 * names the JSON path of the value ("entities[2].components.Position.x") and what it expected. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "persist_internal.h"
#include "scene_internal.h"

/* The shared JSON reader (jvalue.c), call "kiln_load", entity fields as saved handles. */
typedef struct jr {
    pz_json js;
    pz_doc *doc;
    pz_schema_names names;
} jr;

/* How often a load with keep_going asks its caller (kiln_persist.h). */
enum { ASK_EVERY_BYTES = 64 << 10, ASK_EVERY_ENTITIES = 4096 };

static void *arena(jr *j, size_t size) {
    void *p = pz_alloc(&j->doc->arena, size);
    if (!p && j->js.r == KILN_OK) j->js.r = kl_fail(j->js.world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
    return p;
}

static bool hex_blob(jr *j, const json_t *v, pz_blob *dest, size_t want) {
    if (!pz_json_expect(&j->js, v, json_is_string(v), "a hex string")) return false;
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (n % 2 || n / 2 > UINT32_MAX || (want != SIZE_MAX && n / 2 != want))
        return pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "a hex string of %zu bytes expected", want == SIZE_MAX ? n / 2 : want);
    uint8_t *p = arena(j, n / 2 + 1);
    if (!p) return false;
    for (size_t i = 0; i < n; i++) {
        int c = s[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "a hex string expected (bad digit at %zu)", i);
        p[i / 2] = (uint8_t)(p[i / 2] << 4 | d);
    }
    dest->data = p;
    dest->size = (uint32_t)(n / 2);
    return true;
}

/* ---- values ---- */

static bool field(jr *j, const json_t *v, const pz_field *f, uint8_t *value) {
    uint8_t *p = value + f->offset;
    if (f->type == KILN_TYPE_CHAR) {
        if (!pz_json_expect(&j->js, v, json_is_string(v), "a string")) return false;
        size_t n = json_string_length(v);
        if (n > f->count) return pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "a string of at most %u bytes expected", (unsigned)f->count);
        memcpy(p, json_string_value(v), n);
        return true;
    }
    if (f->count == 1) return pz_json_element(&j->js, v, f->type, p);
    if (!pz_json_expect_array(&j->js, v, f->count)) return false;
    for (uint32_t k = 0; k < f->count; k++) {
        size_t mark = pz_json_index(&j->js, k);
        bool ok = pz_json_element(&j->js, json_array_get(v, k), f->type, p + k * kiln_type_size(f->type));
        pz_json_pop(&j->js, mark);
        if (!ok) return false;
    }
    return true;
}

/* A value of schema s into value (s->size zeroed bytes) or blob; the fields it leaves out to
 * omitted (bit f: the schema's field f). */
static bool value(jr *j, const json_t *v, const pz_schema *s, uint8_t *out, pz_blob *blob, uint64_t *omitted) {
    *omitted = 0;
    if (j->js.r != KILN_OK) return false; /* an allocation for out or blob failed */
    if (s->size == 0) return pz_json_expect(&j->js, v, json_is_true(v), "true (a tag)");
    if (s->codec) return hex_blob(j, v, blob, SIZE_MAX);
    if (s->field_count == 0) {
        pz_blob b;
        if (!hex_blob(j, v, &b, s->size)) return false;
        memcpy(out, b.data, s->size);
        return true;
    }
    if (!pz_json_expect(&j->js, v, json_is_object(v), "an object of fields")) return false;
    const char *key;
    json_t *fv;
    json_object_foreach((json_t *)v, key, fv) {
        const pz_field *f = NULL;
        for (int32_t k = 0; k < s->field_count && !f; k++)
            if (strcmp(s->fields[k].name, key) == 0) f = &s->fields[k];
        size_t mark = pz_json_key(&j->js, key);
        bool ok = f ? field(j, fv, f, out) : pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "'%s' has no such field", s->name);
        pz_json_pop(&j->js, mark);
        if (!ok) return false;
    }
    /* a schema may lay a field over a bool (hand-edited offsets): what is read for the bool
     * is the bytes staged, so they hold 0 or 1, as the binary loader checks them */
    for (int32_t k = 0; k < s->field_count; k++) {
        const pz_field *f = &s->fields[k];
        for (uint32_t e = 0; f->type == KILN_TYPE_BOOL && e < f->count; e++)
            if (out[f->offset + e] > 1)
                return pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT,
                                    "field '%s' holds %u, not a boolean (0 or 1): a field of the schema overlaps it",
                                    f->name, (unsigned)out[f->offset + e]);
    }
    /* every key is a distinct field: fewer keys than fields means some are left out */
    if (json_object_size(v) < (size_t)s->field_count)
        for (int32_t k = 0; k < s->field_count; k++)
            if (!json_object_get(v, s->fields[k].name)) *omitted |= (uint64_t)1 << k;
    return true;
}

/* Notes that row r of group g leaves out fields of its type t. */
static bool note_omitted(jr *j, uint32_t g, int32_t t, int64_t r, uint64_t fields) {
    pz_doc *doc = j->doc;
    if (doc->omitted_count == doc->omitted_cap) {
        uint32_t cap = doc->omitted_cap ? doc->omitted_cap * 2 : 16;
        pz_omitted *grown = arena(j, sizeof(pz_omitted) * cap);
        if (!grown) return false;
        if (doc->omitted_count) memcpy(grown, doc->omitted, sizeof(pz_omitted) * doc->omitted_count);
        doc->omitted = grown;
        doc->omitted_cap = cap;
    }
    doc->omitted[doc->omitted_count++] = (pz_omitted){g, t, r, fields};
    return true;
}

/* ---- the document ---- */

static kiln_type type_named(const char *name) {
    for (int t = 1; t < KILN_TYPE_COUNT; t++)
        if (strcmp(kiln_type_name((kiln_type)t), name) == 0) return (kiln_type)t;
    return KILN_TYPE_NONE;
}

static const char *name_of(jr *j, const json_t *v) {
    if (!pz_json_expect(&j->js, v, json_is_string(v), "a name (string)")) return NULL;
    size_t n = json_string_length(v);
    if (n == 0 || n > KILN_MAX_NAME || strlen(json_string_value(v)) != n)
        return pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "a name of 1..63 bytes without NUL expected"), NULL;
    char *copy = arena(j, n + 1); /* the tree is freed before the commit */
    if (copy) memcpy(copy, json_string_value(v), n);
    return copy;
}

static bool schema_field(jr *j, const json_t *v, pz_schema *s, int32_t f) {
    if (!pz_json_expect(&j->js, v, json_is_object(v), "a field object")) return false;
    pz_field *fd = &s->fields[f];
    size_t mark = pz_json_key(&j->js, "name");
    fd->name = name_of(j, json_object_get(v, "name"));
    pz_json_pop(&j->js, mark);
    mark = pz_json_key(&j->js, "type");
    const json_t *t = json_object_get(v, "type");
    if (pz_json_expect(&j->js, t, pz_json_plain(t), "a type name") && (fd->type = type_named(json_string_value(t))) == KILN_TYPE_NONE)
        pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "unknown type '%.40s'", json_string_value(t));
    pz_json_pop(&j->js, mark);
    json_int_t off = 0, count = 0;
    mark = pz_json_key(&j->js, "offset");
    pz_json_integer_in(&j->js, json_object_get(v, "offset"), 0, 1 << 24, &off);
    pz_json_pop(&j->js, mark);
    mark = pz_json_key(&j->js, "count");
    pz_json_integer_in(&j->js, json_object_get(v, "count"), 1, 1 << 24, &count);
    pz_json_pop(&j->js, mark);
    if (j->js.r != KILN_OK) return false;
    fd->offset = (uint32_t)off;
    fd->count = (uint32_t)count;
    if ((uint64_t)off + (uint64_t)count * kiln_type_size(fd->type) > s->size)
        return pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "field '%s' lies outside its component", fd->name);
    for (int32_t g = 0; g < f; g++)
        if (strcmp(s->fields[g].name, fd->name) == 0)
            return pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "field '%s' appears twice", fd->name);
    return true;
}

static bool schema(jr *j, const json_t *v, pz_schema *s) {
    if (!pz_json_expect(&j->js, v, json_is_object(v), "a component object")) return false;
    size_t mark = pz_json_key(&j->js, "name");
    s->name = name_of(j, json_object_get(v, "name"));
    pz_json_pop(&j->js, mark);
    json_int_t size = 0;
    mark = pz_json_key(&j->js, "size");
    pz_json_integer_in(&j->js, json_object_get(v, "size"), 0, 1 << 24, &size);
    pz_json_pop(&j->js, mark);
    s->size = (uint32_t)size;
    const json_t *codec = json_object_get(v, "codec");
    mark = pz_json_key(&j->js, "codec");
    if (codec && pz_json_expect(&j->js, codec, json_is_boolean(codec), "a boolean")) s->codec = json_is_true(codec);
    if (s->codec && s->size == 0) pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "a tag cannot have a codec");
    pz_json_pop(&j->js, mark);
    const json_t *fields = json_object_get(v, "fields");
    if (j->js.r != KILN_OK || !fields) return j->js.r == KILN_OK;
    mark = pz_json_key(&j->js, "fields");
    if (pz_json_expect(&j->js, fields, json_is_array(fields) && json_array_size(fields) <= KILN_MAX_FIELDS,
               "an array of at most 64 fields")) {
        s->field_count = (int32_t)json_array_size(fields);
        s->fields = arena(j, sizeof(pz_field) * ((size_t)s->field_count + 1));
        for (int32_t f = 0; f < s->field_count && s->fields; f++) {
            size_t m2 = pz_json_index(&j->js, (size_t)f);
            bool ok = schema_field(j, json_array_get(fields, (size_t)f), s, f);
            pz_json_pop(&j->js, m2);
            if (!ok) break;
        }
    }
    pz_json_pop(&j->js, mark);
    return j->js.r == KILN_OK;
}

static int ascending(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The sorted schema indices of one entity's components into types (room for the object's size:
 * its keys are distinct); returns how many. */
static int32_t entity_types(jr *j, const json_t *comps, uint32_t *types) {
    int32_t n = 0;
    const char *key;
    json_t *cv;
    json_object_foreach((json_t *)comps, key, cv) {
        int32_t idx = pz_schema_names_find(&j->names, key);
        if (idx < 0) return pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "'%.60s' is not in the components list", key), -1;
        int32_t k = n++;
        if (n > 16) { /* many: sorted once at the end (inserting each would be quadratic) */
            types[k] = (uint32_t)idx;
            continue;
        }
        while (k > 0 && types[k - 1] > (uint32_t)idx) types[k] = types[k - 1], k--;
        types[k] = (uint32_t)idx;
    }
    if (n > 16) qsort(types, (size_t)n, sizeof *types, ascending);
    return n;
}

static const json_t *entity_components(jr *j, const json_t *ent, json_int_t *id) {
    if (!pz_json_expect(&j->js, ent, json_is_object(ent), "an entity object")) return NULL;
    size_t mark = pz_json_key(&j->js, "id");
    pz_json_integer_in(&j->js, json_object_get(ent, "id"), 1, ((json_int_t)1 << 53) - 1, id);
    pz_json_pop(&j->js, mark);
    mark = pz_json_key(&j->js, "components");
    const json_t *comps = json_object_get(ent, "components");
    pz_json_expect(&j->js, comps, json_is_object(comps), "an object of components");
    pz_json_pop(&j->js, mark);
    return j->js.r == KILN_OK ? comps : NULL;
}

/* Pass 1: runs of entities with the same component set become groups. */
static bool plan_groups(jr *j, const json_t *ents, uint32_t *group_of, uint32_t *scratch) {
    pz_doc *doc = j->doc;
    size_t n = json_array_size(ents);
    uint32_t *prev = scratch, *cur = scratch + doc->schema_count + 1;
    int32_t prev_n = -1;
    for (size_t i = 0; i < n; i++) {
        size_t mark = pz_json_index(&j->js, i);
        json_int_t id;
        const json_t *comps = entity_components(j, json_array_get(ents, i), &id);
        size_t m2 = pz_json_key(&j->js, "components");
        int32_t tc = comps ? entity_types(j, comps, cur) : -1;
        pz_json_pop(&j->js, m2);
        pz_json_pop(&j->js, mark);
        if (tc < 0) return false;
        if (tc != prev_n || memcmp(cur, prev, sizeof(uint32_t) * (size_t)tc) != 0) {
            doc->group_count++;
            uint32_t *t = prev;
            prev = cur, cur = t;
            prev_n = tc;
        }
        group_of[i] = doc->group_count - 1;
    }
    return true;
}

static bool fill_groups(jr *j, const json_t *ents, const uint32_t *group_of) {
    pz_doc *doc = j->doc;
    size_t n = json_array_size(ents);
    doc->groups = arena(j, sizeof(pz_group) * ((size_t)doc->group_count + 1));
    if (!doc->groups) return false;
    for (size_t i = 0; i < n; i++) doc->groups[group_of[i]].count++;
    kiln_entity **handles = arena(j, sizeof(kiln_entity *) * ((size_t)doc->group_count + 1));
    if (!handles) return false;
    size_t start = 0;
    for (uint32_t g = 0; g < doc->group_count; g++) {
        pz_group *gr = &doc->groups[g];
        /* room for the group's own components (not every schema's: a group each is cheap) */
        const json_t *comps = json_object_get(json_array_get(ents, start), "components");
        size_t types = json_object_size(comps) + 1;
        gr->types = arena(j, sizeof(uint32_t) * types);
        gr->values = arena(j, sizeof(uint8_t *) * types);
        gr->blobs = arena(j, sizeof(pz_blob *) * types);
        gr->handles = handles[g] = arena(j, sizeof(kiln_entity) * (size_t)gr->count);
        if (j->js.r != KILN_OK) return false;
        gr->type_count = entity_types(j, comps, gr->types);
        for (int32_t t = 0; t < gr->type_count; t++) {
            const pz_schema *s = &doc->schemas[gr->types[t]];
            if (s->codec) gr->blobs[t] = arena(j, sizeof(pz_blob) * (size_t)gr->count);
            else if (s->size) gr->values[t] = arena(j, (size_t)s->size * (size_t)gr->count);
        }
        start += (size_t)gr->count;
    }
    int64_t *row = arena(j, sizeof(int64_t) * ((size_t)doc->group_count + 1));
    for (size_t i = 0; i < n && row; i++) {
        if (i % ASK_EVERY_ENTITIES == ASK_EVERY_ENTITIES - 1 && !pz_keep_going(j->js.world, doc, i, n, "entities")) {
            j->js.r = KILN_ERR_LIMIT;
            return false;
        }
        pz_group *gr = &doc->groups[group_of[i]];
        int64_t r = row[group_of[i]]++;
        const json_t *ent = json_array_get(ents, i);
        handles[group_of[i]][r] = (kiln_entity)json_integer_value(json_object_get(ent, "id"));
        const json_t *comps = json_object_get(ent, "components");
        for (int32_t t = 0; t < gr->type_count; t++) {
            const pz_schema *s = &doc->schemas[gr->types[t]];
            size_t mark = pz_json_index(&j->js, i);
            pz_json_key(&j->js, "components");
            pz_json_key(&j->js, s->name);
            uint64_t omitted;
            bool ok = value(j, json_object_get(comps, s->name), s,
                            gr->values[t] ? (uint8_t *)gr->values[t] + (size_t)r * s->size : NULL,
                            gr->blobs[t] ? &gr->blobs[t][r] : NULL, &omitted);
            pz_json_pop(&j->js, mark);
            if (!ok || (omitted && !note_omitted(j, group_of[i], t, r, omitted))) return false;
        }
    }
    return j->js.r == KILN_OK;
}

static bool resources(jr *j, const json_t *res) {
    pz_doc *doc = j->doc;
    if (!pz_json_expect(&j->js, res, json_is_object(res), "an object of resources")) return false;
    doc->resources = arena(j, sizeof(pz_resource) * (json_object_size(res) + 1));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)res, key, v) {
        if (!doc->resources) return false;
        size_t mark = pz_json_key(&j->js, key);
        int32_t idx = pz_schema_names_find(&j->names, key);
        pz_resource *r = &doc->resources[doc->resource_count];
        const pz_schema *s = idx >= 0 ? &doc->schemas[idx] : NULL;
        uint8_t *out = s && s->size && !s->codec ? arena(j, s->size) : NULL;
        bool ok = s ? value(j, v, s, out, &r->blob, &r->omitted)
                    : pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "not in the components list");
        pz_json_pop(&j->js, mark);
        if (!ok) return false;
        r->schema = (uint32_t)idx;
        r->value = out;
        doc->resource_count++;
    }
    return true;
}

/* Version 2: the slot count and the free list (each a handle below it). */
static void free_list(jr *j, const json_t *root) {
    pz_doc *doc = j->doc;
    json_int_t slots = 0;
    size_t mark = pz_json_key(&j->js, "slots");
    pz_json_integer_in(&j->js, json_object_get(root, "slots"), 0, UINT32_MAX, &slots);
    pz_json_pop(&j->js, mark);
    const json_t *list = json_object_get(root, "free");
    mark = pz_json_key(&j->js, "free");
    if (j->js.r == KILN_OK && pz_json_expect(&j->js, list, json_is_array(list), "an array of handles") &&
        json_array_size(list) <= (size_t)slots) {
        doc->free_count = (uint32_t)json_array_size(list);
        kiln_entity *free = arena(j, sizeof(kiln_entity) * ((size_t)doc->free_count + 1));
        for (uint32_t k = 0; k < doc->free_count && free && j->js.r == KILN_OK; k++) {
            size_t m2 = pz_json_index(&j->js, k);
            json_int_t e = 0;
            if (pz_json_integer_in(&j->js, json_array_get(list, k), 1, INT64_MAX, &e) &&
                (kiln_entity_generation((kiln_entity)e) == 0 ||
                 ((uint64_t)e >> (KILN_ENTITY_INDEX_BITS + KILN_ENTITY_GENERATION_BITS)) != 0 ||
                 kiln_entity_index((kiln_entity)e) >= (uint64_t)slots))
                pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "not a handle below the slot count %lld", (long long)slots);
            free[k] = (kiln_entity)e;
            pz_json_pop(&j->js, m2);
        }
        doc->free = free;
        doc->has_free = true;
        doc->slots = (uint32_t)slots;
        doc->has_slots = true;
    } else if (j->js.r == KILN_OK) {
        pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "%zu handles, more than the %lld slots", json_array_size(list),
                     (long long)slots);
    }
    pz_json_pop(&j->js, mark);
}

static bool document(jr *j, const json_t *root) {
    pz_doc *doc = j->doc;
    static const char *const keys[] = {"kiln", "tick", "slots", "free", "components", "entities", "resources", "host", NULL};
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)root, key, v) {
        bool known = false;
        for (int k = 0; keys[k] && !known; k++) known = strcmp(keys[k], key) == 0;
        if (!known) return pz_json_key(&j->js, key), pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "unknown key");
    }
    json_int_t version = 0, tick = 0;
    size_t mark = pz_json_key(&j->js, "kiln");
    if (pz_json_integer_in(&j->js, json_object_get(root, "kiln"), 0, INT32_MAX, &version) &&
        (version < 1 || version > KILN_PERSIST_JSON_VERSION))
        pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "version %lld is not supported (this build reads versions 1 and 2)",
                     (long long)version);
    pz_json_pop(&j->js, mark);
    if (j->js.r == KILN_OK && version >= 2) free_list(j, root);
    mark = pz_json_key(&j->js, "tick");
    pz_json_integer_in(&j->js, json_object_get(root, "tick"), 0, (json_int_t)KILN_SAVE_TICK_MAX, &tick);
    pz_json_pop(&j->js, mark);
    doc->tick = (kiln_tick)tick;
    const json_t *comps = json_object_get(root, "components");
    mark = pz_json_key(&j->js, "components");
    if (pz_json_expect(&j->js, comps, json_is_array(comps), "an array of components")) {
        doc->schema_count = (uint32_t)json_array_size(comps);
        doc->schemas = arena(j, sizeof(pz_schema) * ((size_t)doc->schema_count + 1));
        if (doc->schemas && !pz_schema_names_init(&j->names, doc, j->js.world))
            j->js.r = kl_fail(j->js.world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
        for (uint32_t i = 0; i < doc->schema_count && doc->schemas && j->js.r == KILN_OK; i++) {
            size_t m2 = pz_json_index(&j->js, i);
            bool ok = schema(j, json_array_get(comps, i), &doc->schemas[i]);
            if (ok && pz_schema_names_add(&j->names, i) >= 0)
                ok = pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "component '%s' appears twice", doc->schemas[i].name);
            pz_json_pop(&j->js, m2);
            if (!ok) break;
        }
    }
    pz_json_pop(&j->js, mark);
    if (j->js.r != KILN_OK) return false;
    const json_t *ents = json_object_get(root, "entities");
    mark = pz_json_key(&j->js, "entities");
    if (pz_json_expect(&j->js, ents, json_is_array(ents), "an array of entities")) {
        size_t n = json_array_size(ents);
        doc->entity_count = (int64_t)n;
        uint32_t *group_of = arena(j, sizeof(uint32_t) * (n + 1));
        uint32_t *scratch = arena(j, sizeof(uint32_t) * 2 * ((size_t)doc->schema_count + 1));
        if (group_of && scratch && plan_groups(j, ents, group_of, scratch)) fill_groups(j, ents, group_of);
        if (j->js.r == KILN_OK && doc->has_free && (uint64_t)doc->free_count + n > doc->slots) /* a slot each */
            pz_json_fail(&j->js, KILN_ERR_INVALID_ARGUMENT, "%zu entities and %u free slots are more than the %u slots", n,
                         (unsigned)doc->free_count, (unsigned)doc->slots);
    }
    pz_json_pop(&j->js, mark);
    const json_t *res = json_object_get(root, "resources");
    if (j->js.r == KILN_OK && res) {
        mark = pz_json_key(&j->js, "resources");
        resources(j, res);
        pz_json_pop(&j->js, mark);
    }
    const json_t *host = json_object_get(root, "host");
    if (j->js.r == KILN_OK && host) {
        mark = pz_json_key(&j->js, "host");
        doc->has_host = hex_blob(j, host, &doc->host, SIZE_MAX);
        pz_json_pop(&j->js, mark);
    }
    return j->js.r == KILN_OK;
}

/* The text handed to jansson piece by piece, so that the caller is asked between pieces
 * whether to keep going (jansson reads a whole document in one call otherwise). */
typedef struct text_feed {
    kiln_world *world;
    const pz_doc *doc;
    const uint8_t *data;
    size_t size, at, asked_at;
    bool stopped;
} text_feed;

static size_t feed(void *buffer, size_t length, void *ud) {
    text_feed *f = ud;
    if (f->at - f->asked_at >= ASK_EVERY_BYTES) {
        f->asked_at = f->at;
        if (!pz_keep_going(f->world, f->doc, f->at, f->size, "bytes")) {
            f->stopped = true;
            return (size_t)-1; /* jansson's read error: the parse ends */
        }
    }
    size_t n = f->size - f->at < length ? f->size - f->at : length;
    memcpy(buffer, f->data + f->at, n);
    f->at += n;
    return n;
}

static bool scan_ask(void *ud, size_t done) {
    const text_feed *f = ud;
    return pz_keep_going(f->world, f->doc, done, f->size, "bytes");
}

kiln_result pz_parse_json(kiln_world *world, const uint8_t *data, size_t size, pz_doc *doc) {
    text_feed f = {world, doc, data, size, 0, 0, false};
    bool asking = doc->desc && doc->desc->keep_going;
    size_t deep = pz_json_too_deep(data, size, asking ? scan_ask : NULL, &f);
    if (deep == SIZE_MAX) return KILN_ERR_LIMIT; /* stopped: pz_keep_going set the message */
    if (deep < size)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_load: at byte %llu: arrays and objects nest more "
                       "than %d deep", (unsigned long long)deep, PZ_JSON_MAX_DEPTH);
    json_error_t err;
    json_t *root;
    if (asking) {
        root = json_load_callback(feed, &f, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
        if (f.stopped) {
            json_decref(root);
            return KILN_ERR_LIMIT;
        }
    } else {
        root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
    }
    if (!root)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_load: at line %d column %d (byte %d): %.120s%s",
                       err.line, err.column, err.position, err.text, pz_json_error_hint(&err));
    jr j = {.js = {.world = world, .call = "kiln_load"}, .doc = doc};
    if (!json_is_object(root)) {
        snprintf(j.js.path, sizeof j.js.path, "the top level");
        pz_json_expect(&j.js, root, false, "an object");
    } else {
        document(&j, root);
    }
    json_decref(root);
    return j.js.r;
}
