/* resource.c: world-wide singletons keyed by component type. Invariant: a set resource owns
 * exactly one live value, destroyed once when replaced, removed or the world dies. */
#include "resource.h"

#include <string.h>

#include "component.h"
#include "guard.h"
#include "spin.h"

/* value is published (release) after the block is filled, so a worker system reading a
 * resource that a main-thread system sets for the first time sees NULL or the whole value. */
typedef struct kl_resource {
    _Atomic(uint8_t *) value; /* 16-byte aligned inside block; NULL when not set */
    void *block;
    size_t block_size;
    /* Its old value's destroy hook runs in place (kiln_resource_set replacing it): a set or
     * removal of it from the hook would destroy it twice or free it under the write. Written
     * under the lock (a growth copies entries), read by the thread running the hook. */
    bool replacing;
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

/* Adding or removing a resource (growing the table, changing an entry) holds the world's
 * resource lock: two worker systems may each set or remove a resource they write at once, and
 * one growing the table from an old copy would lose the other's entry. Readers take no lock. */
static void lock(kiln_world *world) {
    kl_spin_lock(&world->resource_lock);
}

static void unlock(kiln_world *world) {
    kl_spin_unlock(&world->resource_lock);
}

/* The entry of type in the newest table, or NULL when the table does not reach it. */
static kl_resource *entry(const kiln_world *world, kiln_component type) {
    kl_table *t = atomic_load_explicit(&((kiln_world *)world)->resources, memory_order_acquire);
    if (!t || type == 0 || type > (uint64_t)t->cap) return NULL;
    return (kl_resource *)kl_table_entries(t) + (type - 1);
}

static void mark_replacing(kiln_world *world, kiln_component type, bool on) {
    lock(world);
    entry(world, type)->replacing = on; /* the newest table's entry: a growth copied the flag */
    unlock(world);
}

/* KILN_OK, or the failure of a set or removal of type from its own destroy hook while
 * kiln_resource_set replaces its value, or of a removal while a call holds the resources. */
static kiln_result refused_from_hook(kiln_world *world, const char *call, const kl_component *c,
                                     kiln_component type, bool removal) {
    const kl_resource *r = entry(world, type);
    if (r && r->replacing)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: resource %s is being replaced (called "
                       "from the destroy hook of its old value)", call, c->names);
    if (removal && world->resources_held)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: resource %s is held by %s, whose destroy "
                       "hooks are running; remove it once it returns", call, c->names,
                       world->resources_held);
    return KILN_OK;
}

/* The set resource of type with its value, or NULL. */
static kl_resource *slot(const kiln_world *world, kiln_component type, uint8_t **value) {
    kl_resource *r = entry(world, type);
    if (!r) return NULL;
    *value = atomic_load_explicit(&r->value, memory_order_acquire);
    return *value ? r : NULL;
}

/* kiln_resource_set, running the type's check hook on value when checked. */
static kiln_result resource_set(kiln_world *world, kiln_component type, const void *value, bool checked) {
    kl_guard_check(world, "kiln_resource_set", KL_WRITE, type, 0);
    const kl_component *c = kl_component_get(world, type);
    if (!c) return unknown(world, "kiln_resource_set", type);
    if (checked) {
        kiln_result refused = kl_component_check(world, c, KILN_NULL_ENTITY, value, "kiln_resource_set");
        if (refused != KILN_OK) return refused;
    }
    if (world->resources_closed)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_resource_set: cannot set %s while the world is being destroyed (from "
                       "a destroy hook)",
                       c->names);
    kiln_result refused = refused_from_hook(world, "kiln_resource_set", c, type, false);
    if (refused != KILN_OK) return refused;
    uint8_t *current;
    kl_resource *r = slot(world, type, &current);
    if (r) {
        if (c->size == 0) return KILN_OK;
        if (current == value) return KILN_OK;
        if (c->destroy) {
            mark_replacing(world, type, true);
            c->destroy(current, 1, c->hook_ctx);
            mark_replacing(world, type, false);
        }
        write_value(current, c, value, true);
        return KILN_OK;
    }
    /* The value is written before the lock: a defaults copy or a user's bytes need none. */
    size_t size = (c->size ? c->size : 1) + 15;
    void *block = kl_alloc(&world->alloc, size);
    if (!block) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_resource_set: out of memory for %s", c->names);
    uint8_t *dst = (uint8_t *)(((uintptr_t)block + 15) & ~(uintptr_t)15);
    if (c->size) write_value(dst, c, value, false);
    lock(world);
    kl_table *table = atomic_load_explicit(&world->resources, memory_order_relaxed);
    kl_table *grown = kl_table_reserve(&world->alloc, table, type, sizeof(kl_resource), 16);
    if (!grown) {
        unlock(world);
        kl_free(&world->alloc, block, size);
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_resource_set: out of memory for %s", c->names);
    }
    if (grown != table) atomic_store_explicit(&world->resources, grown, memory_order_release);
    r = entry(world, type);
    r->block = block;
    r->block_size = size;
    atomic_store_explicit(&r->value, dst, memory_order_release);
    unlock(world);
    return KILN_OK;
}

kiln_result kiln_resource_set(kiln_world *world, kiln_component type, const void *value) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return resource_set(world, type, value, true);
}

kiln_result kl_resource_put(kiln_world *world, kiln_component type, const void *value) {
    return resource_set(world, type, value, false);
}

void *kiln_resource_get(const kiln_world *world, kiln_component type) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_resource_get", KL_READ, type, 0);
    const kl_component *c = kl_component_get(world, type);
    uint8_t *value = NULL;
    if (!c || c->size == 0 || !slot(world, type, &value)) return NULL;
    return value;
}

void *kl_resource_peek(const kiln_world *world, kiln_component type) {
    const kl_component *c = kl_component_get(world, type);
    uint8_t *value = NULL;
    if (!c || c->size == 0 || !slot(world, type, &value)) return NULL;
    return value;
}

bool kiln_resource_has(const kiln_world *world, kiln_component type) {
    KILN_ASSERT(world != NULL, "world is NULL");
    uint8_t *value;
    return kl_component_get(world, type) && slot(world, type, &value) != NULL;
}

#if KILN_ACCESS_CHECKS
/* A removed resource's block kept poisoned (debug builds, see resource.h). */
typedef struct kl_resource_grave {
    struct kl_resource_grave *next;
    void *block;
    size_t block_size;
    uint8_t *value;
    size_t size;
    kiln_component type;
    int32_t ends_left; /* outermost run ends still to see before the block is freed */
} kl_resource_grave;

#define KL_POISON 0xdb

/* Keeps a removed value's block poisoned instead of freeing it, when a schedule runs: true
 * when kept (else, out of memory for the record or outside a run, the caller frees it). */
static bool bury(kiln_world *world, kiln_component type, void *block, size_t block_size,
                 uint8_t *value, size_t size) {
    if (!size || !atomic_load_explicit(&world->guard, memory_order_acquire)) return false;
    kl_resource_grave *g = kl_alloc(&world->alloc, sizeof *g);
    if (!g) return false;
    memset(value, KL_POISON, size);
    *g = (kl_resource_grave){NULL, block, block_size, value, size, type, 2};
    lock(world);
    g->next = atomic_load_explicit(&world->graves, memory_order_relaxed);
    atomic_store_explicit(&world->graves, g, memory_order_release);
    unlock(world);
    return true;
}

static bool poisoned(const kl_resource_grave *g) {
    for (size_t i = 0; i < g->size; i++)
        if (g->value[i] != KL_POISON) return false;
    return true;
}

/* Fails loudly on the first kept value written since its removal. Called with the lock held. */
static void check_graves(kiln_world *world, const kl_resource_grave *g, const char *system) {
    for (; g; g = g->next) {
        if (poisoned(g)) continue;
        const kl_component *c = kl_component_get(world, g->type);
        unlock(world);
        kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                "kiln_resource_remove: resource %s was written through a pointer after it was "
                "removed (seen %s%s%s); a kiln_resource_get pointer is valid only until the "
                "resource is removed",
                c ? c->names : "(unknown)", system ? "when system '" : "at the end of the run",
                system ? system : "", system ? "' returned" : "");
        kl_guard_panic(world);
        return;
    }
}

void kl_resource_graves_check(kiln_world *world, const char *system) {
    if (!atomic_load_explicit(&world->graves, memory_order_acquire)) return;
    lock(world);
    check_graves(world, atomic_load_explicit(&world->graves, memory_order_relaxed), system);
    unlock(world);
}

/* Frees the kept blocks (all of them: at world destroy) whose time is up. */
static void free_graves(kiln_world *world, bool all) {
    lock(world);
    kl_resource_grave *g = atomic_load_explicit(&world->graves, memory_order_relaxed), *kept = NULL;
    while (g) {
        kl_resource_grave *next = g->next;
        if (all || --g->ends_left == 0) {
            kl_free(&world->alloc, g->block, g->block_size);
            kl_free(&world->alloc, g, sizeof *g);
        } else {
            g->next = kept;
            kept = g;
        }
        g = next;
    }
    atomic_store_explicit(&world->graves, kept, memory_order_release);
    unlock(world);
}

void kl_resource_graves_age(kiln_world *world) {
    if (!atomic_load_explicit(&world->graves, memory_order_acquire)) return;
    kl_resource_graves_check(world, NULL);
    free_graves(world, false);
}
#else
static bool bury(kiln_world *world, kiln_component type, void *block, size_t block_size,
                 uint8_t *value, size_t size) {
    (void)world, (void)type, (void)block, (void)block_size, (void)value, (void)size;
    return false;
}

void kl_resource_graves_check(kiln_world *world, const char *system) { (void)world, (void)system; }
void kl_resource_graves_age(kiln_world *world) { (void)world; }
#endif

/* Empties the entry (under the lock, in the newest table), then destroys and frees the value
 * outside it: a destroy hook may set or remove other resources. */
static void release(kiln_world *world, const kl_component *c, kiln_component type) {
    lock(world);
    uint8_t *value;
    kl_resource *r = slot(world, type, &value);
    void *block = r ? r->block : NULL;
    size_t block_size = r ? r->block_size : 0;
    if (r) {
        atomic_store_explicit(&r->value, NULL, memory_order_relaxed);
        r->block = NULL;
    }
    unlock(world);
    if (!block) return;
    if (c->destroy && c->size) c->destroy(value, 1, c->hook_ctx);
    if (!bury(world, type, block, block_size, value, c->size))
        kl_free(&world->alloc, block, block_size);
}

kiln_result kiln_resource_remove(kiln_world *world, kiln_component type, bool *removed) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_resource_remove", KL_WRITE, type, 0);
    const kl_component *c = kl_component_get(world, type);
    if (!c) return unknown(world, "kiln_resource_remove", type);
    kiln_result refused = refused_from_hook(world, "kiln_resource_remove", c, type, true);
    if (refused != KILN_OK) return refused;
    uint8_t *value;
    bool was_set = slot(world, type, &value) != NULL;
    if (removed) *removed = was_set;
    if (was_set) release(world, c, type);
    return KILN_OK;
}

void kl_resources_free(kiln_world *world) {
    /* Sets are refused from here on, so the table neither grows nor refills behind the loop;
     * a destroy hook's removal of a later resource destroys it there, once. */
    world->resources_closed = true;
    kl_table *t = atomic_load_explicit(&world->resources, memory_order_relaxed);
    for (int64_t i = 1; t && i <= t->cap; i++) {
        uint8_t *value;
        if (slot(world, (kiln_component)i, &value))
            release(world, kl_component_get(world, (kiln_component)i), (kiln_component)i);
    }
    kl_table_free(&world->alloc, t, sizeof(kl_resource));
#if KILN_ACCESS_CHECKS
    free_graves(world, true);
#endif
    atomic_store_explicit(&world->resources, NULL, memory_order_relaxed);
}
