/* access.c: spawning, despawning and per-entity component access (deferred calls are
 * handed to defer.c). Invariant: every call checks all of its inputs and reserves all memory
 * before it changes anything, so a failure leaves the world exactly as it was. */
#include "access.h"

#include <stdlib.h>
#include <string.h>

#include "archetype.h"
#include "component.h"
#include "defer.h"
#include "entity.h"
#include "guard.h"

static const char *ename(kiln_entity e, char *buf) { return kiln_entity_format(e, buf, 24); }

kiln_result kl_fail_dead(kiln_world *world, const char *call, kiln_entity e) {
    char eb[24];
    if (e == KILN_NULL_ENTITY)
        return kl_fail(world, KILN_ERR_DEAD_ENTITY, "%s: entity is null", call);
    return kl_fail(world, KILN_ERR_DEAD_ENTITY, "%s: entity %s is not alive", call, ename(e, eb));
}

static kiln_result unknown(kiln_world *world, const char *call, kiln_component c) {
    return kl_fail(world, KILN_ERR_UNKNOWN_COMPONENT, "%s: component #%u is not registered", call,
                   (unsigned)c);
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

static kiln_result oom(kiln_world *world, const char *call) {
    return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
}

/* Why rows more rows do not fit in arch: the row limit, else memory. */
static kiln_result no_room(kiln_world *world, const char *call, const kl_archetype *arch,
                           int64_t rows) {
    if ((int64_t)arch->count + rows > KL_ROWS_MAX)
        return kl_fail(world, KILN_ERR_LIMIT, "%s: an archetype holds at most %u entities", call,
                       (unsigned)KL_ROWS_MAX);
    return oom(world, call);
}

/* Immediate structural changes must not run under an active iteration; iteration defers the
 * world, so reaching this with one active means raw misuse (e.g. a buffer applied in a loop). */
static void assert_not_iterating(const kiln_world *world) {
    KILN_ASSERT(atomic_load_explicit(&world->iterating, memory_order_relaxed) == 0,
                "structural change while a query iterates");
    (void)world;
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

/* ---- component lists ------------------------------------------------------------------ */

typedef struct spawn_term {
    kiln_component id;
    int32_t input; /* index in the caller's list */
} spawn_term;

static int compare_terms(const void *a, const void *b) {
    kiln_component x = ((const spawn_term *)a)->id, y = ((const spawn_term *)b)->id;
    return (x > y) - (x < y);
}

/* Checks a component list (range, known ids, no repeats) and sorts it into terms. */
static kiln_result check_list(kiln_world *world, const char *call, const kiln_component *components,
                              int32_t count, spawn_term *terms) {
    if (count < 0 || count > KL_SPAWN_MAX || (count > 0 && components == NULL))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "%s: component count %d out of range (0 to %d)", call, (int)count,
                       KL_SPAWN_MAX);
    for (int32_t i = 0; i < count; i++) {
        if (!kl_component_get(world, components[i])) return unknown(world, call, components[i]);
        terms[i].id = components[i];
        terms[i].input = i;
    }
    qsort(terms, (size_t)count, sizeof terms[0], compare_terms);
    for (int32_t i = 1; i < count; i++)
        if (terms[i].id == terms[i - 1].id)
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: %s is listed twice", call,
                           kl_component_get(world, terms[i].id)->names);
    return KILN_OK;
}

/* Finds (or creates) the archetype of a component list; column[i] receives the column of the
 * caller's i-th component (-1 for a tag) when column is not NULL. */
static kl_archetype *archetype_lookup(kiln_world *world, const char *call,
                                      const kiln_component *components, int32_t count,
                                      int32_t *column, kiln_result *result);

/* The spawn cache's hit path stays small (no large frame to set up and probe). */
static inline kl_archetype *archetype_for(kiln_world *world, const char *call,
                                          const kiln_component *components, int32_t count,
                                          int32_t *column, kiln_result *result) {
    if (count > 0 && count <= KL_SPAWN_CACHE && count == world->spawn_key_count && components) {
        int32_t i = 0;
        while (i < count && components[i] == world->spawn_key[i]) i++;
        if (i == count) {
            if (column)
                for (i = 0; i < count; i++) column[i] = world->spawn_column[i];
            return world->spawn_arch;
        }
    }
    return archetype_lookup(world, call, components, count, column, result);
}

__attribute__((noinline)) static kl_archetype *archetype_lookup(kiln_world *world, const char *call,
                                      const kiln_component *components, int32_t count,
                                      int32_t *column, kiln_result *result) {
    spawn_term terms[KL_SPAWN_MAX];
    *result = check_list(world, call, components, count, terms);
    if (*result != KILN_OK) return NULL;
    if (count <= 0) return world->archetypes[0];
    kiln_component types[KL_SPAWN_MAX];
    for (int32_t i = 0; i < count; i++) types[i] = terms[i].id;
    kl_archetype *arch = kl_archetype_ensure(world, types, count, call);
    if (!arch) {
        *result = kl_archetype_failure(world);
        return NULL;
    }
    int32_t cols[KL_SPAWN_MAX];
    for (int32_t i = 0; i < count; i++) cols[terms[i].input] = arch->column_of[i];
    if (column) memcpy(column, cols, sizeof(int32_t) * (size_t)count);
    if (count <= KL_SPAWN_CACHE) {
        memcpy(world->spawn_key, components, sizeof(kiln_component) * (size_t)count);
        memcpy(world->spawn_column, cols, sizeof(int32_t) * (size_t)count);
        world->spawn_key_count = count;
        world->spawn_arch = arch;
        world->spawn_plain = true;
        for (int32_t i = 0; i < count; i++) {
            const kl_column *col = cols[i] >= 0 ? &arch->columns[cols[i]] : NULL;
            if (col && !(col->plain && col->component->size == col->stride))
                world->spawn_plain = false;
        }
    }
    return arch;
}

/* Runs the check hooks of a component list's values for a spawn of entity (null: fresh). */
static kiln_result check_values(kiln_world *world, const char *call, const kiln_component *components,
                                void *const *values, int32_t count, kiln_entity entity) {
    for (int32_t i = 0; i < count; i++) {
        const kl_component *c = kl_component_get(world, components[i]);
        if (!c->check) continue;
        kiln_result r = kl_component_check(world, c, entity, values ? values[i] : NULL, call);
        if (r != KILN_OK) return r;
    }
    return KILN_OK;
}

kiln_result kl_spawn_check(kiln_world *world, const char *call, const kiln_component *components,
                           const void *const *values, int32_t count, kiln_entity entity) {
    spawn_term terms[KL_SPAWN_MAX];
    kiln_result r = check_list(world, call, components, count, terms);
    if (r != KILN_OK) return r;
    return check_values(world, call, components, (void *const *)values, count, entity);
}

/* Points a freshly taken or reserved slot at a new row of arch (room reserved). */
static inline __attribute__((always_inline)) int32_t place(kiln_world *world, kl_archetype *arch,
                                                          kiln_entity e) {
    int32_t row = kl_archetype_push(world, arch, e);
    kl_record_set_alive(kl_record_at(world, kiln_entity_index(e)), kiln_entity_generation(e),
                        arch->id, (uint32_t)row);
    world->alive++;
    return row;
}

/* ---- immediate operations -------------------------------------------------------------- */

static inline void write_value(kiln_world *world, kl_column *col, int32_t row, void *value, bool move) {
    kl_column_write(col, row, value, move, world->tick, kl_row_tick_now(world));
}

static kiln_result spawn_values(kiln_world *world, const char *call, const kiln_component *components,
                                void *const *values, int32_t count, bool move, kiln_entity reserved,
                                kiln_entity *dest, int32_t *column, void **vals) {
    kiln_result r = KILN_OK;
    kl_archetype *arch = archetype_for(world, call, components, count, column, &r);
    if (!arch) return r;
    if (arch->has_check && (r = check_values(world, call, components, values, count, reserved)) != KILN_OK)
        return r;
    if (reserved == KILN_NULL_ENTITY) {
        r = kl_entities_reserve(world, 1, call);
        if (r != KILN_OK) return r;
    }
    for (int32_t i = 0; i < count; i++) vals[i] = values ? values[i] : NULL;
    if (arch->count == arch->capacity && !kl_archetype_reserve_rebase(world, arch, 1, vals, count))
        return no_room(world, call, arch, 1);

    kiln_entity e = reserved ? reserved : kl_entity_take(world);
    int32_t row = place(world, arch, e);
    for (int32_t i = 0; i < count; i++) {
        if (column[i] < 0) continue;
        write_value(world, &arch->columns[column[i]], row, vals[i], move);
    }
    if (dest) *dest = e;
    return KILN_OK;
}

/* The usual spawn in one pass: the component list is the spawn cache's, its archetype has
 * room and no check hook, and a slot is free (or reserved): the values go straight from
 * values[] to the cached columns, with no copy of the column and value lists. False (nothing
 * done) otherwise; spawn_values then takes the general path. */
static inline __attribute__((always_inline)) bool spawn_cached(kiln_world *world,
                                                               const kiln_component *components,
                                                               void *const *values, int32_t count,
                                                               bool move, kiln_entity reserved,
                                                               kiln_entity *dest) {
    if (count <= 0 || count != world->spawn_key_count || components == NULL) return false;
    for (int32_t i = 0; i < count; i++)
        if (components[i] != world->spawn_key[i]) return false;
    kl_archetype *arch = world->spawn_arch;
    if (arch->has_check || arch->count == arch->capacity) return false;
    if (reserved == KILN_NULL_ENTITY &&
        !(world->free_head != KL_NONE ||
          (int64_t)kl_slot_count(world) < (int64_t)world->page_count * KL_PAGE_SIZE))
        return false;
    kiln_entity e = reserved ? reserved : kl_entity_take(world);
    int32_t row = place(world, arch, e);
    kiln_tick tick = world->tick;
    kiln_row_tick stamp = kl_row_tick_now(world);
    bool plain = world->spawn_plain && values != NULL;
    for (int32_t i = 0; i < count; i++) {
        int32_t c = world->spawn_column[i];
        if (c < 0) continue;
        kl_column *col = &arch->columns[c];
        const uint8_t *value = plain ? values[i] : NULL;
        uint8_t *dst = col->data + (size_t)row * col->stride;
        size_t size = col->stride;
        /* plain bytes from outside the new row (a pointer into it can only be stale): value is
         * at least size bytes before or after dst */
        if (value && (uintptr_t)value - (uintptr_t)dst + (size - 1) >= 2 * size - 1) {
            if (size == 8) memcpy(dst, value, 8); /* the usual widths first */
            else if (size == 16) memcpy(dst, value, 16);
            else kl_copy_value(dst, value, size);
            col->ticks[row] = stamp;
            kl_column_touch(col, tick);
        } else {
            kl_column_write(col, row, values ? values[i] : NULL, move, tick, stamp);
        }
    }
    if (dest) *dest = e;
    return true;
}

/* kl_spawn_values past the spawn cache: out of line, so the cached path sets up no frame. */
__attribute__((noinline)) static kiln_result spawn_general(kiln_world *world, const char *call,
                                                           const kiln_component *components,
                                                           void *const *values, int32_t count,
                                                           bool move, kiln_entity reserved,
                                                           kiln_entity *dest) {
    if (count >= 0 && count <= KL_SPAWN_CACHE) { /* small frames for the usual spawn */
        int32_t column[KL_SPAWN_CACHE];
        void *vals[KL_SPAWN_CACHE];
        return spawn_values(world, call, components, values, count, move, reserved, dest, column, vals);
    }
    int32_t column[KL_SPAWN_MAX];
    void *vals[KL_SPAWN_MAX];
    return spawn_values(world, call, components, values, count, move, reserved, dest, column, vals);
}

kiln_result kl_spawn_values(kiln_world *world, const char *call, const kiln_component *components,
                            void *const *values, int32_t count, bool move, kiln_entity reserved,
                            kiln_entity *dest) {
    assert_not_iterating(world);
    if (KL_LIKELY(spawn_cached(world, components, values, count, move, reserved, dest)))
        return KILN_OK;
    return spawn_general(world, call, components, values, count, move, reserved, dest);
}

kiln_result kl_despawn_entity(kiln_world *world, const char *call, kiln_entity entity) {
    assert_not_iterating(world);
    kl_record *rec = kl_record_of(world, entity);
    if (!rec) return kl_fail_dead(world, call, entity);
    kl_archetype *arch = world->archetypes[kl_record_archetype(rec)];
    int32_t row = (int32_t)kl_record_row(rec);
    kl_archetype_destroy_row(arch, row);
    kl_archetype_remove_row(world, arch, row);
    world->alive--;
    kl_entity_retire(world, rec, entity); /* rec: records never move */
    return KILN_OK;
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
    if (c->destroy) c->destroy(dst, 1, c->hook_ctx);
    kl_column_write(col, row, value, move, world->tick, kl_row_tick_now(world));
}

/* Where a move along a plain edge starts, read once by plain_edge. */
typedef struct plain_move {
    kl_record *rec;
    uint64_t bits;  /* rec's, read already */
    kl_archetype *src;
    const kl_edge *edge;
    size_t to;      /* the row the entity takes in edge->to: its count */
} plain_move;

/* Finds the cached plain edge (see KL_EDGE_PLAIN) along which an add (kind KL_EDGE_ADD) or a
 * remove (KL_EDGE_REMOVE) of component moves entity, with room in the neighbour: such a move
 * needs no registry, no slot of the neighbour and no hook, and cannot fail. False when there
 * is none; the general path then decides, and reports any error. */
static inline __attribute__((always_inline)) bool
plain_edge(kiln_world *world, kiln_entity entity, kiln_component component, uint32_t kind,
           plain_move *dest) {
    kl_record *r = kl_record_of(world, entity);
    if (KL_UNLIKELY(!r)) return false;
    uint64_t bits = r->bits;
    kl_archetype *a = world->archetypes[kl_record_archetype(r)];
    if (KL_UNLIKELY(component >= a->slot_count || !a->edges_direct)) return false;
    const kl_edge *edge = &a->edges_direct[component];
    if (edge->flags != (kind | KL_EDGE_PLAIN)) return false;
    int32_t to = edge->to->count;
    if (to == edge->to->capacity) return false;
    assert_not_iterating(world);
    *dest = (plain_move){r, bits, a, edge, (size_t)to};
    return true;
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
    kiln_tick tick = world->tick;
    kl_column *col = m.edge->column;
    kl_archetype *dst = m.edge->to;
    if (col) {
        /* a plain value (no padding, no hooks), from anywhere, a row of a column included */
        kl_copy_over(col->data + m.to * col->stride, value, col->stride);
        col->ticks[m.to] = kl_row_tick_now(world);
        kl_column_touch(col, tick);
    }
    kl_archetype_move_plain(world, m.src, m.rec, m.bits, dst, m.to, tick, col, NULL);
    return true;
}

/* A remove along a plain edge, when there is one: true when done (*removed set), false when
 * the general path must decide. */
static inline __attribute__((always_inline)) bool remove_plain(kiln_world *world,
                                                               kiln_entity entity,
                                                               kiln_component component,
                                                               bool *removed) {
    plain_move m;
    if (!plain_edge(world, entity, component, KL_EDGE_REMOVE, &m)) return false;
    kiln_tick tick = world->tick;
    if (removed) *removed = true; /* now: the pointer is not kept through the move */
    kl_archetype_move_plain(world, m.src, m.rec, m.bits, m.edge->to, m.to, tick, NULL,
                            m.edge->column);
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
    assert_not_iterating(world);
    kl_archetype *dst = kl_archetype_neighbour(world, arch, component, call);
    if (!dst) return kl_archetype_failure(world);
    if (dst->count == dst->capacity && !kl_archetype_reserve_rebase(world, dst, 1, &value, 1))
        return no_room(world, call, dst, 1);
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
    assert_not_iterating(world);
    kl_archetype *dst = kl_archetype_neighbour(world, arch, component, call);
    if (!dst) return kl_archetype_failure(world);
    if (dst->count == dst->capacity && !kl_archetype_reserve(world, dst, 1))
        return no_room(world, call, dst, 1);
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

static kiln_result spawn_with(kiln_world *world, const char *call, const kiln_component *components,
                              const void *const *values, int32_t count, kiln_entity *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, call, KL_STRUCTURAL, 0, 0);
    if (kl_deferred(world)) return kl_defer_spawn(world, call, components, values, count, dest);
    /* not deferred, so not iterating either (iteration defers the world): the usual spawn
     * lands here without a further call */
    if (KL_LIKELY(spawn_cached(world, components, (void *const *)values, count, false,
                               KILN_NULL_ENTITY, dest)))
        return KILN_OK;
    return spawn_general(world, call, components, (void *const *)values, count, false,
                         KILN_NULL_ENTITY, dest);
}

kiln_result kiln_spawn(kiln_world *world, kiln_entity *dest) {
    return spawn_with(world, "kiln_spawn", NULL, NULL, 0, dest);
}

kiln_result kiln_spawn_with(kiln_world *world, const kiln_component *components,
                            const void *const *values, int32_t count, kiln_entity *dest) {
    return spawn_with(world, "kiln_spawn_with", components, values, count, dest);
}

/* Fills rows [first, first + n) of every column of arch with the defaults (or zeroes),
 * stamped with the current tick. */
static void fill_defaults(kiln_world *world, kl_archetype *arch, int32_t first, int32_t n) {
    kiln_tick tick = world->tick;
    kiln_row_tick stamp = kl_row_tick_now(world);
    for (int32_t c = 0; c < arch->column_count && n > 0; c++) {
        kl_column *col = &arch->columns[c];
        uint8_t *data = col->data + (size_t)first * col->stride;
        const void *defaults = kl_component_initial(col->component);
        if (!defaults) {
            memset(data, 0, (size_t)n * col->stride);
        } else {
            size_t size = col->component->size;
            for (int32_t k = 0; k < n; k++) {
                memcpy(data + (size_t)k * col->stride, defaults, size);
                memset(data + (size_t)k * col->stride + size, 0, col->stride - size);
            }
        }
        kiln_row_tick *ticks = col->ticks + first;
        for (int32_t k = 0; k < n; k++) ticks[k] = stamp;
        kl_column_touch(col, tick);
    }
}

kiln_result kiln_spawn_batch(kiln_world *world, const kiln_component *components, int32_t count,
                             int32_t n, kiln_entity *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const char *call = "kiln_spawn_batch";
    kl_guard_check(world, call, KL_STRUCTURAL, 0, 0);
    if (n < 0)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: n is negative (%d)", call, (int)n);
    if (kl_deferred(world)) return kl_defer_spawn_batch(world, call, components, count, n, dest);
    assert_not_iterating(world);
    kiln_result r = KILN_OK;
    kl_archetype *arch = archetype_for(world, call, components, count, NULL, &r);
    if (!arch) return r;
    /* Every entity gets the same (default) values: one check each covers them all. */
    if (arch->has_check && n > 0 &&
        (r = check_values(world, call, components, NULL, count, KILN_NULL_ENTITY)) != KILN_OK)
        return r;
    if ((int64_t)arch->count + n > KL_ROWS_MAX) return no_room(world, call, arch, n);
    r = kl_entities_reserve(world, n, call);
    if (r != KILN_OK) return r;
    if (!kl_archetype_reserve(world, arch, n)) return no_room(world, call, arch, n);

    int32_t first = arch->count;
    int32_t i = 0;
    /* Freed slots first, one by one; then fresh slots in one sweep over their records. */
    for (; i < n && world->free_head != KL_NONE; i++) {
        kiln_entity e = kl_entity_take(world);
        place(world, arch, e);
        if (dest) dest[i] = e;
    }
    if (i < n) {
        uint32_t index = kl_slot_count(world);
        int32_t row = arch->count;
        for (; i < n; i++, index++, row++) {
            kl_record *rec = &world->pages[index >> KL_PAGE_BITS][index & (KL_PAGE_SIZE - 1)];
            kl_record_set_alive(rec, 1, arch->id, (uint32_t)row);
            kiln_entity e = kiln_entity_make(index, 1);
            arch->entities[row] = e;
            if (dest) dest[i] = e;
        }
        world->alive += row - arch->count;
        arch->count = row;
        arch->structure_tick = world->tick;
        world->structure_version++;
        atomic_store_explicit(&world->slot_count, index, memory_order_release);
    }
    fill_defaults(world, arch, first, n);
    return KILN_OK;
}

kiln_result kiln_despawn(kiln_world *world, kiln_entity entity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_despawn", KL_STRUCTURAL, 0, entity);
    if (kl_deferred(world)) return kl_defer_despawn(world, "kiln_despawn", entity);
    return kl_despawn_entity(world, "kiln_despawn", entity);
}

kiln_result kiln_add(kiln_world *world, kiln_entity entity, kiln_component component,
                     const void *value) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_add", KL_STRUCTURAL, component, 0);
    if (kl_deferred(world)) return kl_defer_write(world, "kiln_add", KL_OP_ADD, entity, component, value);
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
    return kl_set_value(world, "kiln_set", entity, component, (void *)(uintptr_t)value, false);
}

int32_t kiln_entity_components(const kiln_world *world, kiln_entity entity, kiln_component *dest,
                               int32_t capacity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    KILN_ASSERT(capacity == 0 || dest != NULL, "dest is required when capacity > 0");
    const kl_record *rec = kl_record_of(world, entity);
    if (!rec) return -1;
    const kl_archetype *arch = world->archetypes[kl_record_archetype(rec)];
    for (int32_t i = 0; i < arch->type_count && i < capacity; i++) dest[i] = arch->types[i];
    return arch->type_count;
}

bool kiln_has(const kiln_world *world, kiln_entity entity, kiln_component component) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const kl_record *rec = kl_record_of(world, entity);
    if (!rec) return false;
    return kl_archetype_has(world->archetypes[kl_record_archetype(rec)], component);
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
    const kl_record *rec = kl_record_of(world, entity);
    if (!rec) return NULL;
    const kl_archetype *arch = world->archetypes[kl_record_archetype(rec)];
    uint32_t row = kl_record_row(rec);
    /* ids beyond the direct slots leave through a tail call, so this path saves nothing */
    if (KL_UNLIKELY(component >= arch->slot_count)) return get_searched(arch, row, component);
    int32_t c = arch->slots[component].column;
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
            const kl_record *rec = kl_record_of(world, entities[i]);
            const uint8_t *value = NULL;
            if (rec) {
                uint32_t a = kl_record_archetype(rec);
                if (a != last) {
                    const kl_column *col = kl_archetype_column(world->archetypes[a], component);
                    last = a;
                    data = col ? col->data : NULL;
                    stride = col ? col->stride : 0;
                }
                if (data) {
                    value = data + (size_t)kl_record_row(rec) * stride;
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
    const kl_record *rec = kl_record_of(world, entity);
    if (!rec) return 0;
    const kl_column *col = kl_archetype_column(world->archetypes[kl_record_archetype(rec)], component);
    if (!col) return 0;
    return world->tick_base + col->ticks[kl_record_row(rec)];
}
