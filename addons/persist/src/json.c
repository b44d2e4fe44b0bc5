/* json.c: the JSON format (jansson): the same content as the binary one, values by field
 * name. Invariant: the loader checks every JSON type before reading it and names the path
 * ("entities[3].components.Position.x") of the first value it cannot take. */
#include <string.h>

#include <jansson.h>

#include "persist_internal.h"
#include "scene_internal.h"

/* ---- writing ---- */

/* One element of a field: an entity as its handle (a dead one as the null handle, 0: it is
 * not saved), every other type as prefabs and scenes write it. */
static json_t *element(const kiln_world *world, kiln_type type, const uint8_t *p) {
    if (type != KILN_TYPE_ENTITY) return pz_json_write_element(type, p, NULL, NULL);
    kiln_entity e;
    memcpy(&e, p, sizeof e);
    return json_integer(kiln_is_alive(world, e) ? (json_int_t)e : 0);
}

/* Sets key of obj to v (taking v); false, with *r set to out of memory unless it holds a failure
 * already, when v is NULL or cannot be stored: a save never leaves a value out. */
static bool put(kiln_world *world, json_t *obj, const char *key, json_t *v, kiln_result *r) {
    if (v && json_object_set_new(obj, key, v) == 0) return true;
    if (*r == KILN_OK) *r = kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_save: out of memory writing JSON");
    return false;
}

static bool append(kiln_world *world, json_t *array, json_t *v, kiln_result *r) {
    if (v && json_array_append_new(array, v) == 0) return true;
    if (*r == KILN_OK) *r = kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_save: out of memory writing JSON");
    return false;
}

static json_t *field_value(kiln_world *world, const kiln_field *f, const uint8_t *value, kiln_result *r) {
    uint32_t n = f->count ? f->count : 1;
    const uint8_t *p = value + f->offset;
    if (f->type == KILN_TYPE_CHAR) return pz_json_chars(p, n);
    if (n == 1) return element(world, f->type, p);
    json_t *a = json_array();
    for (uint32_t k = 0; k < n && a; k++)
        if (!append(world, a, element(world, f->type, p + k * kiln_type_size(f->type)), r)) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *value_json(kiln_world *world, const kiln_save_desc *desc, const kiln_component_info *info,
                          bool codec, kiln_entity e, const void *value, pz_bytes *bytes, kiln_result *r) {
    if (info->size == 0) return json_true();
    if (codec) {
        *r = pz_encode(world, desc, info->id, e, value, bytes, "kiln_save");
        return *r == KILN_OK ? pz_json_hex(world, bytes->data, bytes->size) : NULL;
    }
    if (info->field_count == 0) return pz_json_hex(world, value, info->size);
    json_t *o = json_object();
    for (int32_t f = 0; f < info->field_count && o; f++) {
        const kiln_field *fd = &info->fields[f];
        json_t *fv = field_value(world, fd, value, r);
        if (!fv && fd->type == KILN_TYPE_CHAR && *r == KILN_OK) { /* jansson takes UTF-8 only */
            char buf[24];
            if (e)
                *r = kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save: entity %s component '%s' field '%s' is not "
                             "UTF-8 text (JSON holds nothing else; save in binary)",
                             kiln_entity_format(e, buf, sizeof buf), info->name, fd->name);
            else
                *r = kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_save: resource '%s' field '%s' is not UTF-8 "
                             "text (JSON holds nothing else; save in binary)", info->name, fd->name);
        }
        if (!put(world, o, fd->name, fv, r)) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

static json_t *schema_json(kiln_world *world, const kiln_component_info *info, bool codec, kiln_result *r) {
    json_t *s = json_pack("{s:s, s:I}", "name", info->name, "size", (json_int_t)info->size);
    if (!s) return NULL;
    if (codec) return put(world, s, "codec", json_true(), r) ? s : (json_decref(s), NULL);
    json_t *fields = json_array();
    for (int32_t f = 0; f < info->field_count && fields; f++) {
        const kiln_field *fd = &info->fields[f];
        if (!append(world, fields, json_pack("{s:s, s:s, s:I, s:I}", "name", fd->name, "type",
                                             kiln_type_name(fd->type), "offset", (json_int_t)fd->offset,
                                             "count", (json_int_t)(fd->count ? fd->count : 1)), r)) {
            json_decref(fields);
            fields = NULL;
        }
    }
    if (!put(world, s, "fields", fields, r)) {
        json_decref(s);
        return NULL;
    }
    return s;
}

/* The units of work an entity of group g is (kiln_save_desc.progress): itself, then each value
 * and each element of its fields (a char array is one). */
/* The free list: the handles the next spawns get, in order (a dead slot not on it is retired). */
static json_t *free_json(kiln_world *world, kiln_result *r) {
    json_t *a = json_array();
    for (uint32_t i = world->free_head; i != KL_NONE && a;) {
        const kl_record *rec = kl_record_at(world, i);
        if (!append(world, a, json_integer((json_int_t)kiln_entity_make(i, kl_record_generation(rec))), r)) {
            json_decref(a);
            return NULL;
        }
        i = kl_record_next(rec);
    }
    return a;
}

static int64_t entity_units(const pz_plan *plan, int32_t g) {
    const int32_t *types = plan->group_types + (size_t)g * (size_t)plan->max_types;
    int64_t units = 1;
    for (int32_t t = 0; t < plan->group_type_count[g]; t++) {
        const kiln_component_info *info = &plan->info[types[t]];
        units++;
        for (int32_t f = 0; f < info->field_count; f++)
            units += info->fields[f].type == KILN_TYPE_CHAR || info->fields[f].count == 0 ? 1 : info->fields[f].count;
    }
    return units;
}

static kiln_result build(kiln_world *world, const kiln_save_desc *desc, const pz_plan *plan,
                         json_t *root, pz_bytes *bytes) {
    kiln_result r = KILN_OK;
    json_t *schemas = json_array(), *entities = json_array(), *resources = json_object();
    /* names first: one that is not UTF-8 would fail its put as if memory ran out */
    for (int32_t i = 0; i < plan->count && r == KILN_OK; i++) {
        bool resource = false;
        for (int32_t k = 0; k < plan->resource_count; k++) resource = resource || plan->resources[k] == i;
        r = pz_json_names(world, &plan->info[i], !plan->codec[i], resource ? "resource" : "component", "kiln_save");
    }
    /* every put runs, even after one failed: each takes its value, stored or freed */
    put(world, root, "kiln", json_integer(KILN_PERSIST_JSON_VERSION), &r);
    put(world, root, "tick", json_integer((json_int_t)world->tick), &r);
    put(world, root, "slots", json_integer((json_int_t)kl_slot_count(world)), &r);
    put(world, root, "free", free_json(world, &r), &r);
    put(world, root, "components", schemas, &r);
    put(world, root, "entities", entities, &r);
    put(world, root, "resources", resources, &r);
    if (r != KILN_OK) return r;
    for (int32_t i = 0; i < plan->count && r == KILN_OK; i++)
        append(world, schemas, schema_json(world, &plan->info[i], plan->codec[i], &r), &r);
    for (int32_t g = 0; g < plan->group_count && r == KILN_OK; g++) {
        const kl_archetype *arch = plan->groups[g];
        const int32_t *types = plan->group_types + (size_t)g * (size_t)plan->max_types;
        const kl_column *cols[KL_TYPES_MAX]; /* an archetype holds no more */
        int32_t tc = plan->group_type_count[g];
        for (int32_t t = 0; t < tc; t++)
            cols[t] = plan->info[types[t]].size ? kl_archetype_column(arch, plan->info[types[t]].id) : NULL;
        int64_t units = entity_units(plan, g);
        for (int32_t row = 0; row < arch->count && r == KILN_OK; row++) {
            if (row % 256 == 0) r = pz_progress(world, desc, units * (arch->count - row < 256 ? arch->count - row : 256));
            if (r != KILN_OK) break;
            kiln_entity e = arch->entities[row];
            json_t *ent = json_object(), *comps = json_object();
            put(world, ent, "id", json_integer((json_int_t)e), &r); /* both run: each takes its value */
            put(world, ent, "components", comps, &r);
            if (r != KILN_OK) {
                json_decref(ent);
                break;
            }
            if (!append(world, entities, ent, &r)) break; /* (ent freed with comps) */
            for (int32_t t = 0; t < tc && r == KILN_OK; t++) {
                const kiln_component_info *info = &plan->info[types[t]];
                const void *v = cols[t] ? cols[t]->data + (size_t)row * cols[t]->stride : NULL;
                put(world, comps, info->name, value_json(world, desc, info, plan->codec[types[t]], e, v, bytes, &r), &r);
            }
        }
    }
    for (int32_t k = 0; k < plan->resource_count && r == KILN_OK; k++) {
        const kiln_component_info *info = &plan->info[plan->resources[k]];
        if (!kiln_resource_has(world, info->id)) {
            r = pz_resource_gone(world, info->name);
            break;
        }
        put(world, resources, info->name,
            value_json(world, desc, info, plan->codec[plan->resources[k]], KILN_NULL_ENTITY,
                       kiln_resource_get(world, info->id), bytes, &r), &r);
    }
    if (r == KILN_OK && desc->host_data)
        put(world, root, "host", pz_json_hex(world, desc->host_data, desc->host_size), &r);
    return r;
}

static int dump_cb(const char *buffer, size_t size, void *data) {
    pz_put(data, buffer, size);
    return ((pz_out *)data)->failed ? -1 : 0;
}

kiln_result pz_save_json(kiln_world *world, const kiln_save_desc *desc, const pz_plan *plan, pz_out *out) {
    json_t *root = json_object();
    if (!root) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_save: out of memory");
    pz_bytes bytes = {.alloc = &world->alloc};
    kiln_result r = build(world, desc, plan, root, &bytes);
    pz_bytes_free(&bytes);
    if (r == KILN_OK && json_dump_callback(root, dump_cb, out, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0)
        r = out->failed ? KILN_OK /* reported by the caller's flush */
                        : kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_save: out of memory writing JSON");
    json_decref(root);
    if (r == KILN_OK) pz_put(out, "\n", 1);
    return r;
}

