/* component.c: registration and reflection of component types. Invariant: a name maps to
 * exactly one id, and an id's size, alignment, fields and hooks never change. */
#include "component.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} type_table[KILN_TYPE_COUNT] = {
    [KILN_TYPE_NONE] = {"none", 0},       [KILN_TYPE_BOOL] = {"bool", sizeof(bool)},
    [KILN_TYPE_INT8] = {"int8", 1},       [KILN_TYPE_INT16] = {"int16", 2},
    [KILN_TYPE_INT32] = {"int32", 4},     [KILN_TYPE_INT64] = {"int64", 8},
    [KILN_TYPE_UINT8] = {"uint8", 1},     [KILN_TYPE_UINT16] = {"uint16", 2},
    [KILN_TYPE_UINT32] = {"uint32", 4},   [KILN_TYPE_UINT64] = {"uint64", 8},
    [KILN_TYPE_FLOAT] = {"float", 4},     [KILN_TYPE_DOUBLE] = {"double", 8},
    [KILN_TYPE_ENTITY] = {"entity", 8},   [KILN_TYPE_CHAR] = {"char", 1},
    [KILN_TYPE_VEC2] = {"vec2", 8},       [KILN_TYPE_VEC3] = {"vec3", 12},
    [KILN_TYPE_VEC4] = {"vec4", 16},      [KILN_TYPE_QUAT] = {"quat", 16},
    [KILN_TYPE_MAT4] = {"mat4", 64},
};

const char *kiln_type_name(kiln_type type) {
    if ((unsigned)type >= KILN_TYPE_COUNT) return "invalid";
    return type_table[type].name;
}

size_t kiln_type_size(kiln_type type) {
    if ((unsigned)type >= KILN_TYPE_COUNT) return 0;
    return type_table[type].size;
}

const char *kl_component_name(const kiln_world *world, kiln_component id, char *buf,
                              size_t size) {
    const kl_component *c = kl_component_get(world, id);
    if (c) return c->names;
    snprintf(buf, size, "component #%u", (unsigned)id);
    return buf;
}

static bool is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

static size_t default_align(size_t size) {
    if (size == 0) return 1;
    size_t a = 16;
    while (size % a != 0) a /= 2;
    return a;
}

static size_t name_length(const char *name) {
    size_t n = 0;
    while (n <= KILN_MAX_NAME && name[n] != '\0') n++;
    return n;
}

/* Checks the desc; on success writes the resolved alignment and the bytes the names need. */
static kiln_result validate(kiln_world *world, const kiln_component_desc *d, size_t *align,
                            size_t *names_size, const char *call) {
    if (d->name == NULL)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: name is NULL", call);
    size_t len = name_length(d->name);
    if (len == 0 || len > KILN_MAX_NAME)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "%s: name must be 1 to %d bytes", call, KILN_MAX_NAME);
    const char *n = d->name;
    if (d->size > UINT32_MAX / 2)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: %s size %zu too large", call,
                       n, d->size);
    size_t a = d->align ? d->align : default_align(d->size);
    if (!is_pow2(a))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "%s: %s alignment %zu is not a power of two", call, n, a);
    if (a > 16)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "%s: %s alignment %zu exceeds 16", call, n, a);
    if (d->field_count < 0 || d->field_count > KILN_MAX_FIELDS ||
        (d->field_count > 0 && d->fields == NULL))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "%s: %s field_count %d invalid (0 to %d, with fields)", call, n,
                       (int)d->field_count, KILN_MAX_FIELDS);
    if (d->size == 0 && (d->field_count > 0 || d->destroy || d->move || d->check || d->defaults))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "%s: %s is a tag (size 0) and cannot have fields, hooks or defaults",
                       call, n);
    size_t total = len + 1;
    for (int32_t i = 0; i < d->field_count; i++) {
        const kiln_field *f = &d->fields[i];
        if (f->name == NULL || name_length(f->name) == 0 || name_length(f->name) > KILN_MAX_NAME)
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s field %d needs a name of 1 to %d bytes", call, n,
                           (int)i, KILN_MAX_NAME);
        if (f->type <= KILN_TYPE_NONE || f->type >= KILN_TYPE_COUNT)
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s field %s has invalid type %d", call, n, f->name,
                           (int)f->type);
        uint64_t count = f->count ? f->count : 1;
        uint64_t end = (uint64_t)f->offset + count * kiln_type_size(f->type);
        if (end > d->size)
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s field %s (offset %u, %llu bytes) lies outside "
                           "its %zu bytes", call,
                           n, f->name, (unsigned)f->offset,
                           (unsigned long long)(end - f->offset), d->size);
        for (int32_t j = 0; j < i; j++)
            if (strcmp(d->fields[j].name, f->name) == 0)
                return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                               "%s: %s has two fields named %s", call, n, f->name);
        total += name_length(f->name) + 1;
    }
    *align = a;
    *names_size = total;
    return KILN_OK;
}

static bool same_layout(const kl_component *c, const kiln_component_desc *d, size_t align) {
    if (c->size != d->size || c->align != align || c->field_count != d->field_count ||
        c->destroy != d->destroy || c->move != d->move || c->hook_ctx != d->hook_ctx)
        return false;
    /* A check or defaults left NULL takes what is registered (a binding declaring a layout
     * again knows nothing of an addon's hook); one given must be the same. */
    if (d->check && c->check != d->check) return false;
    if (d->defaults && (!c->defaults || memcmp(c->defaults, d->defaults, c->size) != 0))
        return false;
    for (int32_t i = 0; i < d->field_count; i++) {
        const kiln_field *a = &c->fields[i], *b = &d->fields[i];
        if (strcmp(a->name, b->name) != 0 || a->type != b->type || a->offset != b->offset ||
            a->count != (b->count ? b->count : 1))
            return false;
    }
    return true;
}

uint32_t kl_registry_lookup(const kl_registry *reg, const char *name) {
    if (name == NULL) return 0;
    uint32_t cursor = 0, id;
    uint32_t h = kl_hash_str(name);
    while ((id = kl_map_next(&reg->names, h, &cursor)) != 0)
        if (strcmp(reg->items[id - 1]->names, name) == 0) return id;
    return 0;
}

kiln_component kiln_component_lookup(const kiln_world *world, const char *name) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return kl_registry_lookup(&world->components, name);
}

kiln_result kl_registry_add(kiln_world *world, kl_registry *reg, const kiln_component_desc *desc,
                            uint32_t *dest, const char *call) {
    if (desc == NULL)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: desc is NULL", call);
    size_t align = 1, names_size = 0;
    kiln_result r = validate(world, desc, &align, &names_size, call);
    if (r != KILN_OK) return r;

    uint32_t existing = kl_registry_lookup(reg, desc->name);
    if (existing) {
        if (!same_layout(reg->items[existing - 1], desc, align))
            return kl_fail(world, KILN_ERR_LAYOUT_MISMATCH,
                           "%s: %s is already registered with a different layout or hooks",
                           call, desc->name);
        if (dest) *dest = existing;
        return KILN_OK;
    }
    if (reg->count >= INT32_MAX - 1)
        return kl_fail(world, KILN_ERR_LIMIT, "%s: too many types", call);

    /* Reserve everything before changing anything, so out of memory changes nothing. */
    /* One block: the record, its fields, its defaults (16-byte aligned), then the names. */
    size_t fields_size = sizeof(kiln_field) * (size_t)desc->field_count;
    size_t defaults_at = (sizeof(kl_component) + fields_size + 15) & ~(size_t)15;
    size_t defaults_size = desc->defaults ? (desc->size + 15) & ~(size_t)15 : 0;
    size_t block = defaults_at + 15 + defaults_size + names_size;
    if (!kl_grow(&world->alloc, (void **)&reg->items, &reg->cap, reg->count + 1,
                 sizeof(kl_component *), 16) ||
        !kl_map_reserve(&world->alloc, &reg->names, 1))
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %s", call, desc->name);
    kl_component *c = kl_alloc(&world->alloc, block);
    if (!c)
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %s", call, desc->name);

    memset(c, 0, sizeof *c);
    c->block_size = block;
    c->id = (uint32_t)reg->count + 1;
    c->size = (uint32_t)desc->size;
    c->align = (uint32_t)align;
    c->stride = (uint32_t)((desc->size + align - 1) / align * align);
    c->destroy = desc->destroy;
    c->move = desc->move;
    c->check = desc->check;
    c->hook_ctx = desc->hook_ctx;
    c->field_count = desc->field_count;
    c->fields = (kiln_field *)(c + 1);
    uint8_t *defaults = (uint8_t *)(((uintptr_t)c + defaults_at + 15) & ~(uintptr_t)15);
    if (desc->defaults) {
        memcpy(defaults, desc->defaults, desc->size);
        c->defaults = defaults;
    }
    c->names = (char *)defaults + defaults_size;
    char *p = c->names;
    size_t len = strlen(desc->name);
    memcpy(p, desc->name, len + 1);
    p += len + 1;
    for (int32_t i = 0; i < desc->field_count; i++) {
        c->fields[i] = desc->fields[i];
        if (c->fields[i].count == 0) c->fields[i].count = 1;
        len = strlen(desc->fields[i].name);
        memcpy(p, desc->fields[i].name, len + 1);
        c->fields[i].name = p;
        p += len + 1;
    }
    reg->items[reg->count++] = c;
    kl_map_put(&world->alloc, &reg->names, kl_hash_str(c->names), c->id);
    if (dest) *dest = c->id;
    return KILN_OK;
}

kiln_result kiln_component_register(kiln_world *world, const kiln_component_desc *desc,
                                    kiln_component *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return kl_registry_add(world, &world->components, desc, dest, "kiln_component_register");
}

void kl_component_describe(const kl_component *c, kiln_component_info *dest) {
    dest->id = c->id;
    dest->name = c->names;
    dest->size = c->size;
    dest->align = c->align;
    dest->stride = c->stride;
    dest->fields = c->fields;
    dest->field_count = c->field_count;
    dest->has_destroy = c->destroy != NULL;
    dest->has_move = c->move != NULL;
    dest->has_check = c->check != NULL;
    dest->defaults = c->defaults;
}

kiln_result kl_component_check(kiln_world *world, const kl_component *c, kiln_entity entity,
                               const void *value, const char *call) {
    if (!c->check) return KILN_OK;
    char why[KL_ERROR_SIZE - 64];
    why[0] = '\0';
    kiln_result r = c->check(world, entity, value ? value : c->defaults, c->hook_ctx, why, sizeof why);
    if (r == KILN_OK) return KILN_OK;
    why[sizeof why - 1] = '\0';
    if (why[0]) return kl_fail(world, r, "%s: %s", call, why);
    char eb[24];
    return kl_fail(world, r, "%s: %s refuses the value for entity %s", call, c->names,
                   kiln_entity_format(entity, eb, sizeof eb));
}

kiln_result kiln_component_check(kiln_world *world, kiln_entity entity, kiln_component component,
                                 const void *value) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const kl_component *c = kl_component_get(world, component);
    if (!c)
        return kl_fail(world, KILN_ERR_UNKNOWN_COMPONENT,
                       "kiln_component_check: component #%u is not registered", (unsigned)component);
    return kl_component_check(world, c, entity, value, "kiln_component_check");
}

bool kiln_component_info_get(const kiln_world *world, kiln_component component,
                             kiln_component_info *dest) {
    KILN_ASSERT(world != NULL && dest != NULL, "world and dest are required");
    const kl_component *c = kl_component_get(world, component);
    if (!c) return false;
    kl_component_describe(c, dest);
    return true;
}

int32_t kiln_component_count(const kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return world->components.count;
}

void kl_registry_free(kiln_world *world, kl_registry *reg) {
    for (int32_t i = 0; i < reg->count; i++)
        kl_free(&world->alloc, reg->items[i], reg->items[i]->block_size);
    kl_free(&world->alloc, reg->items, sizeof(kl_component *) * (size_t)reg->cap);
    kl_map_free(&world->alloc, &reg->names);
    memset(reg, 0, sizeof *reg);
}
