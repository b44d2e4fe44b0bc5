/* access.c: per-entity component access: add, remove, set, get (spawning and despawning are
 * in spawn.c; deferred calls are handed to defer.c). Invariant: every call checks all of its
 * inputs and reserves all memory before it changes anything, so a failure leaves the world
 * exactly as it was. */
#include "access.h"

#include <stdlib.h>
#include <string.h>

#include "archetype.h"
#include "component.h"
#include "defer.h"
#include "entity.h"
#include "guard.h"

static const char *ename(kiln_entity e, char *buf) { return kiln_entity_format(e, buf, 24); }

kiln_result kl_fail_dead_as(kiln_world *world, const char *call, const char *role, kiln_entity e) {
    char eb[24];
    if (e == KILN_NULL_ENTITY)
        return kl_fail(world, KILN_ERR_DEAD_ENTITY, "%s: %s is null", call, role);
    return kl_fail(world, KILN_ERR_DEAD_ENTITY, "%s: %s %s is not alive", call, role, ename(e, eb));
}

kiln_result kl_fail_dead(kiln_world *world, const char *call, kiln_entity e) {
    return kl_fail_dead_as(world, call, "entity", e);
}

kiln_result kl_fail_unknown_on(kiln_world *world, const char *call, kiln_entity e,
                               kiln_component c) {
    char eb[24];
    return kl_fail(world, KILN_ERR_UNKNOWN_COMPONENT,
                   "%s: entity %s: component #%u is not registered", call, ename(e, eb),
                   (unsigned)c);
}

static kiln_result missing(kiln_world *world, const char *call, kiln_entity e,
                           const kl_component *c) {
    char eb[24];
    return kl_fail(world, KILN_ERR_MISSING_COMPONENT, "%s: entity %s has no %s", call,
                   ename(e, eb), c->names);
}

kiln_result kl_fail_in_hook(kiln_world *world, const char *call) {
    if (world->in_check_of)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: called from a component's check hook while %s "
                       "checks %s; a check hook reads the world and must not change it", call, world->in_check_of,
                       strcmp(world->in_check_of, "kiln_load") == 0 ? "the values it loads" : "a value");
    return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: called from a component's destroy or move "
                   "hook while the world changes; record it into a command buffer instead", call);
}

static kiln_result oom(kiln_world *world, const char *call) {
    return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
}

kiln_result kl_fail_no_room(kiln_world *world, const char *call, const kl_archetype *arch,
                            int64_t rows) {
    if ((int64_t)arch->count + rows > KL_ROWS_MAX)
        return kl_fail(world, KILN_ERR_LIMIT, "%s: an archetype holds at most %u entities", call,
                       (unsigned)KL_ROWS_MAX);
    return oom(world, call);
}

/* Resolves entity and component for a call, failing with the world error set. */
static inline __attribute__((always_inline)) kiln_result resolve(kiln_world *world, const char *call, kiln_entity e, kiln_component c,
                           kl_record **rec, const kl_component **comp) {
    *rec = kl_record_of(world, e);
    if (!*rec) return kl_fail_dead(world, call, e);
    *comp = kl_component_get(world, c);
    if (!*comp) return kl_fail_unknown_on(world, call, e, c);
    return KILN_OK;
}

bool kiln_is_alive(const kiln_world *world, kiln_entity entity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return kl_record_of(world, entity) != NULL;
}

/* Destroys the value in col at row and writes value over it, stamping it changed. */
static void replace(kiln_world *world, kl_column *col, int32_t row, void *value, bool move) {
    const kl_component *c = col->component;
    void *dst = col->data + (size_t)row * col->stride;
    if (value == dst) { /* writing a value onto itself: keep it, just stamp */
        col->ticks[row] = kl_row_tick_now(world);
        kl_column_touch(col, world->tick);
        return;
    }
    /* row is computed: a hook changing the world would leave it stale (kl_in_hook) */
    world->in_hook++;
    if (c->destroy) c->destroy(dst, 1, c->hook_ctx);
    kl_column_write(col, row, value, move, world->tick, kl_row_tick_now(world), false);
    world->in_hook--;
}

/* Where a move along a plain edge starts, read once by plain_edge. */
typedef struct plain_move {
    kl_record *rec;
    uint64_t bits;  /* rec's, read already */
    kl_archetype *src;
    const kl_edge *edge;
    size_t to;      /* the row the entity takes in edge->to: its count */
    uint32_t flags; /* edge's, read already */
} plain_move;

/* Finds the cached plain edge (see KL_EDGE_PLAIN) along which an add (kind KL_EDGE_ADD) or a
 * remove (KL_EDGE_REMOVE) of component moves entity, with room in the neighbour: such a move
 * needs no registry, no slot of the neighbour and no hook, and cannot fail. False when there
 * is none; the general path then decides, and reports any error. */
static inline __attribute__((always_inline)) bool
plain_edge(kiln_world *world, kiln_entity entity, kiln_component component, uint32_t kind,
           plain_move *dest) {
    uint64_t bits;
    kl_record *r = kl_record_live(world, entity, &bits);
    if (KL_UNLIKELY(!r)) return false;
    kl_archetype *a = world->archetypes[kl_bits_archetype(bits)];
    uint32_t i = component - a->slot_base;
    if (KL_UNLIKELY(i >= a->slot_count || !a->edges_direct)) return false;
    const kl_edge *edge = &a->edges_direct[i];
    uint32_t flags = edge->flags;
    if ((flags & ~KL_EDGE_EIGHT) != (kind | KL_EDGE_PLAIN)) return false;
    int32_t to = edge->to->count;
    if (to == edge->to->capacity) return false;
    kl_assert_not_iterating(world);
    *dest = (plain_move){r, bits, a, edge, (size_t)to, flags};
    return true;
}

/* add_plain's write and move, with the shared columns' width when known (see
 * kl_move_plain_column), so each form keeps what it needs in registers. */
static inline __attribute__((always_inline)) void add_along(kiln_world *world,
                                                            const plain_move *m,
                                                            const void *value, size_t width) {
    kiln_tick tick = world->tick;
    kl_column *col = m->edge->column;
    kl_archetype *dst = m->edge->to;
    if (col) {
        /* a plain value (no padding, no hooks), from anywhere, a row of a column included */
        kl_copy_over(col->data + m->to * col->stride, value, col->stride);
        col->ticks[m->to] = kl_row_tick_now(world);
        kl_column_touch_appended(col, tick);
    }
    kl_archetype_move_plain(world, m->src, m->rec, m->bits, dst, m->to, tick, col, NULL, width);
}

/* An add of value along a plain edge, when there is one (and a value to write, or a tag):
 * true when done, false when the general path must decide (a NULL value there writes the
 * defaults). The value is written first (it may be read from a row the move relocates), then
 * the row moves. */
static inline __attribute__((always_inline)) bool add_plain(kiln_world *world, kiln_entity entity,
                                                            kiln_component component,
                                                            const void *value) {
    plain_move m;
    if (!plain_edge(world, entity, component, KL_EDGE_ADD, &m)) return false;
    if (KL_UNLIKELY(!value) && m.edge->column) return false;
    if (m.flags & KL_EDGE_EIGHT) add_along(world, &m, value, 8);
    else add_along(world, &m, value, 0);
    return true;
}

/* remove_plain's move, with the shared columns' width when known (see add_along). */
static inline __attribute__((always_inline)) void remove_along(kiln_world *world,
                                                               const plain_move *m,
                                                               size_t width) {
    kl_archetype_move_plain(world, m->src, m->rec, m->bits, m->edge->to, m->to, world->tick,
                            NULL, m->edge->column, width);
}

/* A remove along a plain edge, when there is one: true when done (*removed set), false when
 * the general path must decide. */
static inline __attribute__((always_inline)) bool remove_plain(kiln_world *world,
                                                               kiln_entity entity,
                                                               kiln_component component,
                                                               bool *removed) {
    plain_move m;
    if (!plain_edge(world, entity, component, KL_EDGE_REMOVE, &m)) return false;
    /* *removed written in each form (now: the pointer is not kept through the move); written
     * before the branch, GCC hoisted the two forms' common start above it and spilled two of
     * its values (168.5 instructions and 23 stores a remove against 164.5 and 21.5) */
    if (m.flags & KL_EDGE_EIGHT) {
        if (removed) *removed = true;
        remove_along(world, &m, 8);
    } else {
        if (removed) *removed = true;
        remove_along(world, &m, 0);
    }
    return true;
}

/* kl_add_value's body, inlined into kiln_add too: the public call pays one frame. */
static inline __attribute__((always_inline)) kiln_result add_value(kiln_world *world,
                                                                   const char *call,
                                                                   kiln_entity entity,
                                                                   kiln_component component,
                                                                   void *value, bool move) {
    kl_record *rec;
    const kl_component *comp;
    kiln_result r = resolve(world, call, entity, component, &rec, &comp);
    if (r != KILN_OK) return r;
    if (comp->check && (r = kl_component_check(world, comp, entity, value, call)) != KILN_OK)
        return r;
    kl_archetype *arch = world->archetypes[kl_record_archetype(rec)];
    int32_t slot = kl_archetype_slot(arch, component);
    if (slot != KL_SLOT_ABSENT) {
        if (slot >= 0) replace(world, &arch->columns[slot], (int32_t)kl_record_row(rec), value, move);
        return KILN_OK;
    }
    kl_assert_not_iterating(world);
    kl_archetype *dst = kl_archetype_neighbour(world, arch, component, call);
    if (!dst) return kl_archetype_failure(world, arch->type_count + 1);
    if (dst->count == dst->capacity && !kl_archetype_reserve_rebase(world, dst, 1, &value, 1))
        return kl_fail_no_room(world, call, dst, 1);
    int32_t added = kl_archetype_slot(dst, component);
    kl_archetype_move(world, arch, (int32_t)kl_record_row(rec), dst, added >= 0 ? added : -1, -1,
                      value, move, rec);
    return KILN_OK;
}

/* add_value out of line, for what the plain path does not take: the public call keeps a
 * small frame. */
__attribute__((noinline)) static kiln_result add_general(kiln_world *world, const char *call,
                                                         kiln_entity entity,
                                                         kiln_component component, void *value,
                                                         bool move) {
    return add_value(world, call, entity, component, value, move);
}

kiln_result kl_add_value(kiln_world *world, const char *call, kiln_entity entity,
                         kiln_component component, void *value, bool move) {
    return add_general(world, call, entity, component, value, move);
}

static inline __attribute__((always_inline)) kiln_result remove_component(kiln_world *world,
                                                                          const char *call,
                                                                          kiln_entity entity,
                                                                          kiln_component component,
                                                                          bool *removed) {
    kl_record *rec = kl_record_of(world, entity);
    if (!rec) return kl_fail_dead(world, call, entity);
    kl_archetype *arch = world->archetypes[kl_record_archetype(rec)];
    int32_t slot = kl_archetype_slot(arch, component);
    if (slot == KL_SLOT_ABSENT) {
        /* only an absent component can be unknown: components never unregister */
        if (!kl_component_get(world, component))
            return kl_fail_unknown_on(world, call, entity, component);
        if (removed) *removed = false;
        return KILN_OK;
    }
    kl_assert_not_iterating(world);
    kl_archetype *dst = kl_archetype_neighbour(world, arch, component, call);
    if (!dst) return kl_archetype_failure(world, arch->type_count - 1);
    if (dst->count == dst->capacity && !kl_archetype_reserve(world, dst, 1))
        return kl_fail_no_room(world, call, dst, 1);
    kl_archetype_move(world, arch, (int32_t)kl_record_row(rec), dst, -1, slot >= 0 ? slot : -1,
                      NULL, false, rec);
    if (removed) *removed = true;
    return KILN_OK;
}

/* remove_component out of line (see add_general). */
__attribute__((noinline)) static kiln_result remove_general(kiln_world *world, const char *call,
                                                            kiln_entity entity,
                                                            kiln_component component,
                                                            bool *removed) {
    return remove_component(world, call, entity, component, removed);
}

bool kl_add_plain(kiln_world *world, kiln_entity entity, kiln_component component,
                  const void *value) {
    return add_plain(world, entity, component, value);
}

bool kl_remove_plain(kiln_world *world, kiln_entity entity, kiln_component component) {
    return remove_plain(world, entity, component, NULL);
}

kiln_result kl_remove_component(kiln_world *world, const char *call, kiln_entity entity,
                                kiln_component component, bool *removed) {
    return remove_general(world, call, entity, component, removed);
}

/* The column of a live entity's component for a writing call, or NULL with the error set
 * (or *tag true: the component is a tag, present, with no value). */
static kl_column *writable(kiln_world *world, const char *call, kiln_entity entity,
                           kiln_component component, kiln_result *result, bool *tag) {
    kl_record *rec;
    const kl_component *comp;
    *tag = false;
    *result = resolve(world, call, entity, component, &rec, &comp);
    if (*result != KILN_OK) return NULL;
    kl_archetype *arch = world->archetypes[kl_record_archetype(rec)];
    int32_t slot = kl_archetype_slot(arch, component);
    if (slot == KL_SLOT_ABSENT) {
        *result = missing(world, call, entity, comp);
        return NULL;
    }
    if (slot == KL_SLOT_TAG) {
        *tag = true;
        return NULL;
    }
    return &arch->columns[slot];
}

/* A set into a column with no hooks and no check hook: true when written, false when the
 * general path must decide and report any error. One frame and no registry look-up; the write
 * is kl_column_write's, as replace makes it for such a column (no old value to destroy; a
 * value that is the row itself, padding and no value are its cases). 93 instructions a
 * kiln_set of a plain value instead of 188 through writable and replace (callgrind,
 * 2026-12-05). */
static inline __attribute__((always_inline)) bool set_plain(kiln_world *world, kiln_entity entity,
                                                            kiln_component component,
                                                            const void *value) {
    uint64_t bits;
    if (KL_UNLIKELY(!kl_record_live(world, entity, &bits))) return false;
    kl_archetype *a = world->archetypes[kl_bits_archetype(bits)];
    uint32_t i = component - a->slot_base;
    if (KL_UNLIKELY(i >= a->slot_count)) return false;
    int32_t c = a->slots[i].column;
    if (c < 0) return false; /* absent or a tag: the general path tells which */
    kl_column *col = &a->columns[c];
    if (!col->plain || col->component->check) return false;
    kl_column_write(col, (int32_t)kl_bits_row(bits), (void *)(uintptr_t)value, false, world->tick,
                    kl_row_tick_now(world), false);
    return true;
}

kiln_result kl_set_value(kiln_world *world, const char *call, kiln_entity entity,
                         kiln_component component, void *value, bool move) {
    kiln_result r;
    bool tag;
    kl_column *col = writable(world, call, entity, component, &r, &tag);
    if (!col) return r; /* absent, or a tag: nothing to write */
    if (col->component->check &&
        (r = kl_component_check(world, col->component, entity, value, call)) != KILN_OK)
        return r;
    replace(world, col, (int32_t)kl_record_row(kl_record_at(world, kiln_entity_index(entity))), value, move);
    return KILN_OK;
}

/* ---- public calls ---------------------------------------------------------------------- */

kiln_result kiln_add(kiln_world *world, kiln_entity entity, kiln_component component,
                     const void *value) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_add", KL_STRUCTURAL, component, 0);
    if (kl_deferred(world)) return kl_defer_write(world, "kiln_add", KL_OP_ADD, entity, component, value);
    if (kl_in_hook(world)) return kl_fail_in_hook(world, "kiln_add");
    if (add_plain(world, entity, component, value)) return KILN_OK;
    return add_general(world, "kiln_add", entity, component, (void *)(uintptr_t)value, false);
}

/* kiln_remove in a deferred world, out of line (its frame stays off the immediate path). */
__attribute__((noinline)) static kiln_result remove_deferred(kiln_world *world,
                                                             kiln_entity entity,
                                                             kiln_component component,
                                                             bool *removed) {
    kiln_result r = kl_defer_write(world, "kiln_remove", KL_OP_REMOVE, entity, component, NULL);
    if (r == KILN_OK && removed) *removed = kiln_has(world, entity, component);
    return r;
}

kiln_result kiln_remove(kiln_world *world, kiln_entity entity, kiln_component component,
                        bool *removed) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_remove", KL_STRUCTURAL, component, 0);
    if (kl_deferred(world)) return remove_deferred(world, entity, component, removed);
    if (kl_in_hook(world)) return kl_fail_in_hook(world, "kiln_remove");
    if (remove_plain(world, entity, component, removed)) return KILN_OK;
    return remove_general(world, "kiln_remove", entity, component, removed);
}

kiln_result kiln_set(kiln_world *world, kiln_entity entity, kiln_component component,
                     const void *value) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (kl_deferred(world)) {
        /* queued like a command (a worker has no queue of its own), not written in place */
        kl_guard_check(world, "kiln_set", KL_STRUCTURAL, component, 0);
        return kl_defer_write(world, "kiln_set", KL_OP_SET, entity, component, value);
    }
    kl_guard_check(world, "kiln_set", KL_WRITE, component, 0);
    if (kl_in_hook(world)) return kl_fail_in_hook(world, "kiln_set");
    if (set_plain(world, entity, component, value)) return KILN_OK;
    return kl_set_value(world, "kiln_set", entity, component, (void *)(uintptr_t)value, false);
}

int32_t kiln_entity_components(const kiln_world *world, kiln_entity entity, kiln_component *dest,
                               int32_t capacity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (KL_UNLIKELY(dest == NULL && capacity > 0)) {
        kl_refuse_dest(world, "kiln_entity_components", capacity);
        return -1;
    }
    const kl_record *rec = kl_record_of(world, entity);
    if (!rec) return -1;
    const kl_archetype *arch = world->archetypes[kl_record_archetype(rec)];
    for (int32_t i = 0; i < arch->type_count && i < capacity; i++) dest[i] = arch->types[i];
    return arch->type_count;
}

bool kiln_has(const kiln_world *world, kiln_entity entity, kiln_component component) {
    KILN_ASSERT(world != NULL, "world is NULL");
    uint64_t bits;
    if (!kl_record_live(world, entity, &bits)) return false;
    return kl_archetype_has(world->archetypes[kl_bits_archetype(bits)], component);
}

/* kiln_get of a component id beyond arch's direct slots. */
__attribute__((noinline)) static const void *get_searched(const kl_archetype *arch, uint32_t row,
                                                          kiln_component component) {
    const kl_column *col = kl_archetype_column(arch, component);
    return col ? col->data + (size_t)row * col->stride : NULL;
}

const void *kiln_get(const kiln_world *world, kiln_entity entity, kiln_component component) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_get", KL_READ, component, 0);
    uint64_t bits;
    if (!kl_record_live(world, entity, &bits)) return NULL;
    const kl_archetype *arch = world->archetypes[kl_bits_archetype(bits)];
    uint32_t row = kl_bits_row(bits);
    /* ids beyond the direct slots leave through a tail call, so this path saves nothing */
    uint32_t i = component - arch->slot_base;
    if (KL_UNLIKELY(i >= arch->slot_count)) return get_searched(arch, row, component);
    int32_t c = arch->slots[i].column;
    if (c < 0) return NULL;
    const kl_column *col = &arch->columns[c];
    return col->data + (size_t)row * col->stride;
}

/* Handles kiln_get_many looks up ahead of reading them: enough to keep the memory system busy,
 * few enough that their records are still cached when read. */
#define KL_GET_MANY_AHEAD 32

int32_t kiln_get_many(const kiln_world *world, const kiln_entity *entities, int32_t count,
                      kiln_component component, const void **dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    KILN_ASSERT(count >= 0, "count is negative");
    KILN_ASSERT(count <= 0 || (entities != NULL && dest != NULL),
                "entities and dest are required when count > 0");
    kl_guard_check(world, "kiln_get_many", KL_READ, component, 0);
    uint32_t slots = kl_slot_count(world);
    kl_record *const *pages = atomic_load_explicit(&((kiln_world *)world)->pages,
                                                   memory_order_acquire);
    /* the column of the archetype met last: scattered handles mostly share a few archetypes */
    uint32_t last = UINT32_MAX;
    const uint8_t *data = NULL;
    size_t stride = 0;
    int32_t found = 0;
    for (int32_t start = 0; start < count; start += KL_GET_MANY_AHEAD) {
        int32_t end = count - start > KL_GET_MANY_AHEAD ? start + KL_GET_MANY_AHEAD : count;
        /* every record of the block is requested before any is read, so their misses overlap */
        for (int32_t i = start; i < end; i++) {
            uint32_t index = kiln_entity_index(entities[i]);
            if (index < slots)
                __builtin_prefetch(&pages[index >> KL_PAGE_BITS][index & (KL_PAGE_SIZE - 1)]);
        }
        for (int32_t i = start; i < end; i++) {
            uint64_t bits;
            const uint8_t *value = NULL;
            if (kl_record_live(world, entities[i], &bits)) {
                uint32_t a = kl_bits_archetype(bits);
                if (a != last) {
                    const kl_column *col = kl_archetype_column(world->archetypes[a], component);
                    last = a;
                    data = col ? col->data : NULL;
                    stride = col ? col->stride : 0;
                }
                if (data) {
                    value = data + (size_t)kl_bits_row(bits) * stride;
                    __builtin_prefetch(value); /* the caller reads it next */
                    found++;
                }
            }
            dest[i] = value;
        }
    }
    return found;
}

void *kiln_get_mut(kiln_world *world, kiln_entity entity, kiln_component component) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_get_mut", KL_WRITE, component, 0);
    kiln_result r;
    bool tag;
    kl_column *col = writable(world, "kiln_get_mut", entity, component, &r, &tag);
    if (!col) {
        if (tag)
            kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_get_mut: %s is a tag and has no value",
                    kl_component_get(world, component)->names);
        return NULL;
    }
    int32_t row = (int32_t)kl_record_row(kl_record_at(world, kiln_entity_index(entity)));
    col->ticks[row] = kl_row_tick_now(world);
    kl_column_touch(col, world->tick);
    return col->data + (size_t)row * col->stride;
}

kiln_tick kiln_changed_tick(const kiln_world *world, kiln_entity entity,
                            kiln_component component) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_changed_tick", KL_READ, component, 0);
    uint64_t bits;
    if (!kl_record_live(world, entity, &bits)) return 0;
    const kl_column *col = kl_archetype_column(world->archetypes[kl_bits_archetype(bits)], component);
    if (!col) return 0;
    return world->tick_base + col->ticks[kl_bits_row(bits)];
}
