/* resource.c: world-wide singletons keyed by component type. Invariant: a set resource owns
 * exactly one live value, destroyed once when replaced, removed or the world dies. */
#include "resource.h"

#include <string.h>

#include "component.h"

typedef struct kl_resource {
    void *block;      /* NULL when the resource is not set */
    uint8_t *value;   /* 16-byte aligned inside block */
    size_t block_size;
} kl_resource;

static kiln_result unknown(kiln_world *world, const char *call, kiln_component type) {
    return kl_fail(world, KILN_ERR_UNKNOWN_COMPONENT, "%s: component #%u is not registered", call,
                   (unsigned)type);
}

/* Writes value (NULL: the component's defaults) into a resource's storage; overlap only
 * arises when replacing a value with part of itself. */
static void write_value(uint8_t *dst, const kl_component *c, const void *value, bool overlap) {
    if (!value) value = kl_component_initial(c);
    if (!value) memset(dst, 0, c->size);
    else if (overlap) memmove(dst, value, c->size);
    else memcpy(dst, value, c->size);
}

static kl_resource *slot(const kiln_world *world, kiln_component type) {
    if (type == 0 || type > (uint64_t)world->resource_cap) return NULL;
    kl_resource *r = &world->resources[type - 1];
    return r->block ? r : NULL;
}

kiln_result kiln_resource_set(kiln_world *world, kiln_component type, const void *value) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const kl_component *c = kl_component_get(world, type);
    if (!c) return unknown(world, "kiln_resource_set", type);
    kl_resource *r = slot(world, type);
    if (r) {
        if (c->size == 0) return KILN_OK;
        if (r->value == value) return KILN_OK;
        if (c->destroy) c->destroy(r->value, 1, c->hook_ctx);
        write_value(r->value, c, value, true);
        return KILN_OK;
    }
    int64_t old_cap = world->resource_cap;
    if (!kl_grow(&world->alloc, (void **)&world->resources, &world->resource_cap, type,
                 sizeof(kl_resource), 16))
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_resource_set: out of memory for %s", c->names);
    if (world->resource_cap > old_cap)
        memset(&world->resources[old_cap], 0, sizeof(kl_resource) * (size_t)(world->resource_cap - old_cap));
    size_t size = (c->size ? c->size : 1) + 15;
    void *block = kl_alloc(&world->alloc, size);
    if (!block)
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_resource_set: out of memory for %s", c->names);
    r = &world->resources[type - 1];
    r->block = block;
    r->block_size = size;
    r->value = (uint8_t *)(((uintptr_t)block + 15) & ~(uintptr_t)15);
    if (c->size) write_value(r->value, c, value, false);
    return KILN_OK;
}

void *kiln_resource_get(const kiln_world *world, kiln_component type) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const kl_component *c = kl_component_get(world, type);
    kl_resource *r = slot(world, type);
    if (!c || !r || c->size == 0) return NULL;
    return r->value;
}

bool kiln_resource_has(const kiln_world *world, kiln_component type) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return kl_component_get(world, type) && slot(world, type) != NULL;
}

static void release(kiln_world *world, const kl_component *c, kl_resource *r) {
    if (c->destroy && c->size) c->destroy(r->value, 1, c->hook_ctx);
    kl_free(&world->alloc, r->block, r->block_size);
    r->block = NULL;
    r->value = NULL;
}

kiln_result kiln_resource_remove(kiln_world *world, kiln_component type, bool *removed) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const kl_component *c = kl_component_get(world, type);
    if (!c) return unknown(world, "kiln_resource_remove", type);
    kl_resource *r = slot(world, type);
    if (removed) *removed = r != NULL;
    if (r) release(world, c, r);
    return KILN_OK;
}

void kl_resources_free(kiln_world *world) {
    for (int64_t i = 0; i < world->resource_cap; i++)
        if (world->resources[i].block)
            release(world, kl_component_get(world, (kiln_component)(i + 1)), &world->resources[i]);
    kl_free(&world->alloc, world->resources, sizeof(kl_resource) * (size_t)world->resource_cap);
    world->resources = NULL;
    world->resource_cap = 0;
}
