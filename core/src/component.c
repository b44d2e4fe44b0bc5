/* component.c: registration and reflection of component types. Invariant: a name maps to
 * exactly one id, and an id's size, alignment, fields and hooks never change. */
#include "component.h"

#include <stdio.h>
#include <stdarg.h>
#include <string.h>

#include "command_buffer.h"
#include "defer.h"
#include "guard.h"

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
    if (d->owner && d->size)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: %s is an owner mark and must be a tag (size 0)",
                       call, n);
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

/* Writes why a registration again differs (false, for same_layout to return). */
static bool differs(char *why, size_t size, const char *format, ...) __attribute__((format(printf, 3, 4)));
static bool differs(char *why, size_t size, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    vsnprintf(why, size, format, ap);
    va_end(ap);
    return false;
}

/* Whether d (aligned to align) registers c again; if not, why names the first difference, so a
 * mod or host whose type changed in an update learns what changed, not only that something did. */
static bool same_layout(const kl_component *c, const kiln_component_desc *d, size_t align, char *why,
                        size_t size) {
    for (int32_t i = 0; i < d->field_count && i < c->field_count; i++) {
        const kiln_field *a = &c->fields[i], *b = &d->fields[i];
        uint32_t count = b->count ? b->count : 1;
        if (strcmp(a->name, b->name) != 0 || a->type != b->type || a->offset != b->offset || a->count != count)
            return differs(why, size, "field %d is '%s' %s[%u] at offset %u, given '%s' %s[%u] at offset %u",
                           (int)i, a->name, kiln_type_name(a->type), (unsigned)a->count, (unsigned)a->offset,
                           b->name, kiln_type_name(b->type), (unsigned)count, (unsigned)b->offset);
    }
    if ((c->size == 0) != (d->size == 0))
        return c->size ? differs(why, size, "registered with %u bytes, given a tag", (unsigned)c->size)
                       : differs(why, size, "registered as a tag, given %zu bytes", d->size);
    if (c->field_count != d->field_count)
        return differs(why, size, "registered with %d field%s, given %d", (int)c->field_count,
                       c->field_count == 1 ? "" : "s", (int)d->field_count);
    if (c->size != d->size)
        return differs(why, size, "registered with %u bytes, given %zu", (unsigned)c->size, d->size);
    if (c->align != align)
        return differs(why, size, "registered aligned to %u, given %zu", (unsigned)c->align, align);
    if (c->owner != d->owner)
        return differs(why, size, c->owner ? "registered as an owner mark, given as a plain tag"
                                           : "registered as a plain tag, given as an owner mark");
    const char *hook = c->destroy != d->destroy ? "destroy hook" : c->move != d->move ? "move hook"
                       : c->hook_ctx != d->hook_ctx ? "hook_ctx"
                       /* a check or defaults left NULL takes what is registered (a binding declaring a
                        * layout again knows nothing of an addon's hook); one given must be the same */
                       : d->check && c->check != d->check ? "check hook"
                       : d->defaults && (!c->defaults || memcmp(c->defaults, d->defaults, c->size) != 0) ? "defaults"
                       : NULL;
    return hook ? differs(why, size, "given another %s than registered", hook) : true;
}

static _Atomic(uint64_t) *name_slots(const kl_table *t) {
    return (_Atomic(uint64_t) *)kl_table_entries(t);
}

/* The look-up, counting the slots it reads into *slots_read: inlined in both callers, so the
 * count folds away where nobody reads it. */
static inline __attribute__((always_inline)) uint32_t find(const kiln_world *world, const kl_registry *reg,
                                                           const char *name, int64_t *slots_read) {
    /* a name past the longest is none: not read to its end (a script's 24 MB string was
     * measured and hashed at every call) */
    size_t len = name ? name_length(name) : KILN_MAX_NAME + 1;
    if (len > KILN_MAX_NAME) return 0;
    kl_table *t = atomic_load_explicit(&((kl_registry *)reg)->names, memory_order_acquire);
    if (!t) return 0;
    _Atomic(uint64_t) *slots = name_slots(t);
    /* seeded per world: names a mod picked to share a slot under a fixed hash spread */
    uint32_t h = kl_hash_name(name, len, world->hash_seed), mask = (uint32_t)t->cap - 1;
    /* The index is at most half full, so the walk meets an empty slot. */
    for (uint32_t i = h & mask;; i = (i + 1) & mask) {
        uint64_t slot = atomic_load_explicit(&slots[i], memory_order_acquire);
        ++*slots_read;
        if (slot == 0) return 0;
        if ((uint32_t)(slot >> 32) != h) continue;
        const kl_component *c = kl_registry_get(reg, (uint32_t)slot);
        if (c && strcmp(c->names, name) == 0) return c->id;
    }
}

uint32_t kl_registry_find(const kiln_world *world, const kl_registry *reg, const char *name,
                          int64_t *slots_read) {
    return find(world, reg, name, slots_read);
}

uint32_t kl_registry_lookup(const kiln_world *world, const kl_registry *reg, const char *name) {
    int64_t slots_read = 0;
    return find(world, reg, name, &slots_read);
}

/* Stores c's name in the index t (which has room); readers may be walking t. */
static void index_name(kl_table *t, const kl_component *c) {
    _Atomic(uint64_t) *slots = name_slots(t);
    uint32_t h = c->name_hash, mask = (uint32_t)t->cap - 1, i = h & mask;
    while (atomic_load_explicit(&slots[i], memory_order_relaxed) != 0) i = (i + 1) & mask;
    atomic_store_explicit(&slots[i], (uint64_t)h << 32 | c->id, memory_order_release);
}

/* Frees a table made for a registration that failed (nobody has seen it). */
static void discard(kl_allocator *a, kl_table *t, const kl_table *current, size_t elem) {
    if (t == NULL || t == current) return;
    t->older = NULL;
    kl_table_free(a, t, elem);
}

kiln_component kiln_component_lookup(const kiln_world *world, const char *name) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return kl_registry_lookup(world, &world->components, name);
}

kiln_result kl_registry_add(kiln_world *world, kl_registry *reg, const kiln_component_desc *desc,
                            uint32_t *dest, const char *call) {
    if (desc == NULL)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: desc is NULL", call);
    size_t align = 1, names_size = 0;
    kiln_result r = validate(world, desc, &align, &names_size, call);
    if (r != KILN_OK) return r;

    uint32_t existing = kl_registry_lookup(world, reg, desc->name);
    if (existing) {
        char why[KILN_MAX_NAME * 2 + 192];
        if (!same_layout(kl_registry_get(reg, existing), desc, align, why, sizeof why))
            return kl_fail(world, KILN_ERR_LAYOUT_MISMATCH,
                           "%s: %s is already registered with a different layout or hooks (%s)",
                           call, desc->name, why);
        if (dest) *dest = existing;
        return KILN_OK;
    }
    /* Only this thread writes reg, so relaxed loads see its own latest values. */
    int32_t count = atomic_load_explicit(&reg->count, memory_order_relaxed);
    if (count >= INT32_MAX - 1)
        return kl_fail(world, KILN_ERR_LIMIT, "%s: too many types", call);

    /* Reserve everything before changing anything, so out of memory changes nothing. */
    /* One block: the record, its fields, its defaults (16-byte aligned), then the names. */
    size_t fields_size = sizeof(kiln_field) * (size_t)desc->field_count;
    size_t defaults_at = (sizeof(kl_component) + fields_size + 15) & ~(size_t)15;
    size_t defaults_size = desc->defaults ? (desc->size + 15) & ~(size_t)15 : 0;
    size_t block = defaults_at + 15 + defaults_size + names_size;
    kl_allocator *a = &world->alloc;
    kl_table *items = atomic_load_explicit(&reg->items, memory_order_relaxed);
    kl_table *names = atomic_load_explicit(&reg->names, memory_order_relaxed);
    kl_table *new_items = kl_table_reserve(a, items, count + 1, sizeof(kl_component *), 16);
    /* A new index is built empty and filled after the record is published. */
    kl_table *new_names = names && (int64_t)(count + 1) * 2 <= names->cap
                              ? names
                              : kl_table_reserve(a, NULL, names ? names->cap * 2 : 32,
                                                 sizeof(uint64_t), 32);
    kl_component *c = new_items && new_names ? kl_alloc(a, block) : NULL;
    if (!c) {
        discard(a, new_items, items, sizeof(kl_component *));
        discard(a, new_names, names, sizeof(uint64_t));
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %s", call, desc->name);
    }

    memset(c, 0, sizeof *c);
    c->block_size = block;
    c->id = (uint32_t)count + 1;
    c->size = (uint32_t)desc->size;
    c->align = (uint32_t)align;
    c->stride = (uint32_t)((desc->size + align - 1) / align * align);
    c->destroy = desc->destroy;
    c->move = desc->move;
    c->check = desc->check;
    c->hook_ctx = desc->hook_ctx;
    c->owner = desc->owner;
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
    c->name_hash = kl_hash_name(p, len, world->hash_seed);
    p += len + 1;
    for (int32_t i = 0; i < desc->field_count; i++) {
        c->fields[i] = desc->fields[i];
        if (c->fields[i].count == 0) c->fields[i].count = 1;
        if (c->fields[i].type == KILN_TYPE_ENTITY) c->entity_slots += c->fields[i].count;
        len = strlen(desc->fields[i].name);
        memcpy(p, desc->fields[i].name, len + 1);
        c->fields[i].name = p;
        p += len + 1;
    }
    c->cmd_known = (uint8_t)(1 | (c->entity_slots ? 2 : 0));
    c->cmd_inline = !c->move && !c->destroy && !c->check && c->entity_slots == 0;
    c->cmd_small = c->cmd_inline && c->size >= 1 && c->size <= KL_INLINE ? (uint8_t)c->size : UINT8_MAX;

    /* Publish in the order readers rely on: the record in its table, the table, the count
     * (a reader seeing the count sees both), then the name (a reader finding the name finds
     * an id already counted). */
    ((kl_component **)kl_table_entries(new_items))[count] = c;
    if (new_items != items) atomic_store_explicit(&reg->items, new_items, memory_order_release);
    atomic_store_explicit(&reg->count, count + 1, memory_order_release);
    if (new_names != names) {
        new_names->older = names;
        kl_component *const *all = kl_table_entries(new_items);
        for (int32_t i = 0; i <= count; i++) index_name(new_names, all[i]);
        atomic_store_explicit(&reg->names, new_names, memory_order_release);
    } else {
        index_name(names, c);
    }
    if (dest) *dest = c->id;
    return KILN_OK;
}

kiln_result kiln_component_register(kiln_world *world, const kiln_component_desc *desc,
                                    kiln_component *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_component_register", KL_REGISTER, 0, 0);
    if (kl_off_stage_thread(world)) return kl_fail_register_off_stage(world, "kiln_component_register");
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
    dest->owner = c->owner;
}

void kl_component_set_check_rows(kiln_world *world, kiln_component id, kl_check_rows_fn fn) {
    kl_component *c = (kl_component *)(uintptr_t)kl_component_get(world, id); /* ours to set */
    if (c && c->check) c->check_rows = fn;
}

kiln_result kl_component_ask(kiln_world *world, const kl_component *c, kiln_entity entity, const void *value,
                             const char *call, char *why, size_t why_size) {
    /* Deferred (a section, a loop, a stage, whose workers may ask at once) a change from the hook only queues.
     * Otherwise the caller holds the entity's row, or a command, across the hook: a change from it (the world is
     * const to the hook, but a cast gets past that) is refused as from a destroy hook (kl_in_hook), naming it. */
    if (kl_deferred(world) || atomic_load_explicit(&world->in_stage, memory_order_relaxed))
        return c->check(world, entity, value, c->hook_ctx, why, why_size);
    const char *outer = world->in_check_of;
    world->in_hook++;
    world->in_check_of = call;
    kiln_result r = c->check(world, entity, value, c->hook_ctx, why, why_size);
    world->in_check_of = outer;
    world->in_hook--;
    return r;
}

kiln_result kl_component_check(kiln_world *world, const kl_component *c, kiln_entity entity,
                               const void *value, const char *call) {
    if (!c->check) return KILN_OK;
    char why[KL_ERROR_SIZE - 64];
    why[0] = '\0';
    kiln_result r = kl_component_ask(world, c, entity, value ? value : c->defaults, call, why, sizeof why);
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
    return kl_registry_count(&world->components);
}

void kl_registry_free(kiln_world *world, kl_registry *reg) {
    kl_table *items = atomic_load_explicit(&reg->items, memory_order_relaxed);
    int32_t count = atomic_load_explicit(&reg->count, memory_order_relaxed);
    for (int32_t i = 0; i < count; i++) {
        kl_component *c = ((kl_component **)kl_table_entries(items))[i];
        kl_free(&world->alloc, c, c->block_size);
    }
    kl_table_free(&world->alloc, items, sizeof(kl_component *));
    kl_table_free(&world->alloc, atomic_load_explicit(&reg->names, memory_order_relaxed),
                  sizeof(uint64_t));
    atomic_store_explicit(&reg->items, NULL, memory_order_relaxed);
    atomic_store_explicit(&reg->names, NULL, memory_order_relaxed);
    atomic_store_explicit(&reg->count, 0, memory_order_relaxed);
}
