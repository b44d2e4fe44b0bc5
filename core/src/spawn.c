/* spawn.c: spawning and despawning entities: component lists, the spawn cache and its one-pass
 * spawn, batches, the swap-remove of a despawn. Invariant: every call checks all of its inputs
 * and reserves all memory before it changes anything, so a failure leaves the world as it was. */
#include "access.h"

#include <stdlib.h>
#include <string.h>

#include "archetype.h"
#include "component.h"
#include "defer.h"
#include "entity.h"
#include "guard.h"

static kiln_result unknown(kiln_world *world, const char *call, kiln_component c) {
    return kl_fail(world, KILN_ERR_UNKNOWN_COMPONENT, "%s: component #%u is not registered", call,
                   (unsigned)c);
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
        *result = kl_archetype_failure(world, count);
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
        int32_t n = 0;
        world->spawn_touched = 0; /* before the first tick */
        for (int32_t i = 0; i < count; i++) {
            kl_column *col = cols[i] >= 0 ? &arch->columns[cols[i]] : NULL;
            if (!col) continue;
            if (!(col->plain && col->component->size == col->stride)) world->spawn_plain = false;
            world->spawn_data[n].column = col;
            world->spawn_data[n++].input = (size_t)i;
        }
        world->spawn_data[n].column = NULL;
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
    kl_column_write(col, row, value, move, world->tick, kl_row_tick_now(world), true);
}

/* checked: the caller asked each value's check hook already (a command apply, as it merges
 * a spawn's adds), so the archetype's checks are not asked again. */
static kiln_result spawn_values(kiln_world *world, const char *call, const kiln_component *components,
                                void *const *values, int32_t count, bool move, bool checked,
                                kiln_entity reserved, kiln_entity *dest, int32_t *column, void **vals) {
    kiln_result r = KILN_OK;
    kl_archetype *arch = archetype_for(world, call, components, count, column, &r);
    if (!arch) return r;
    if (arch->has_check && !checked &&
        (r = check_values(world, call, components, values, count, reserved)) != KILN_OK)
        return r;
    if (reserved == KILN_NULL_ENTITY) {
        r = kl_entities_reserve(world, 1, call);
        if (r != KILN_OK) return r;
    }
    for (int32_t i = 0; i < count; i++) vals[i] = values ? values[i] : NULL;
    if (arch->count == arch->capacity && !kl_archetype_reserve_rebase(world, arch, 1, vals, count))
        return kl_fail_no_room(world, call, arch, 1);

    kiln_entity e = reserved ? reserved : kl_entity_take(world);
    int32_t row = place(world, arch, e);
    for (int32_t i = 0; i < count; i++) {
        if (column[i] < 0) continue;
        write_value(world, &arch->columns[column[i]], row, vals[i], move);
    }
    if (dest) *dest = e;
    return KILN_OK;
}

/* Copies a caller's value of 8, 12 or 16 bytes into a row in 4-byte pieces, every piece read
 * before any is written (so a value inside the row, a stale pointer, copies its own bytes);
 * false, with nothing copied, for another size. The caller has usually just written the value
 * field by field: a wider read spanning two of those stores cannot take its bytes from them
 * and waits until they reach the cache (a failed store-to-load forward, about 3 ns on the
 * AMD Zen 5 machine of 2026-12-02), while each 4-byte read lies inside one store of 4 bytes
 * or more. */
static inline __attribute__((always_inline)) bool copy_fresh(uint8_t *dst, const uint8_t *value,
                                                             size_t size) {
/* the pieces stay 4-byte reads: GCC would merge neighbouring ones into one wide read */
#define KL_PIECES(...) __asm__("" : __VA_ARGS__)
    uint32_t a, b, c, d;
    if (size == 8) {
        memcpy(&a, value, 4);
        memcpy(&b, value + 4, 4);
        KL_PIECES("+r"(a), "+r"(b));
        memcpy(dst, &a, 4);
        memcpy(dst + 4, &b, 4);
    } else if (size == 16) {
        memcpy(&a, value, 4);
        memcpy(&b, value + 4, 4);
        memcpy(&c, value + 8, 4);
        memcpy(&d, value + 12, 4);
        KL_PIECES("+r"(a), "+r"(b), "+r"(c), "+r"(d));
        memcpy(dst, &a, 4);
        memcpy(dst + 4, &b, 4);
        memcpy(dst + 8, &c, 4);
        memcpy(dst + 12, &d, 4);
    } else if (size == 12) {
        memcpy(&a, value, 4);
        memcpy(&b, value + 4, 4);
        memcpy(&c, value + 8, 4);
        KL_PIECES("+r"(a), "+r"(b), "+r"(c));
        memcpy(dst, &a, 4);
        memcpy(dst + 4, &b, 4);
        memcpy(dst + 8, &c, 4);
    } else {
        return false;
    }
    return true;
#undef KL_PIECES
}

/* The values of the cached spawn of entity e at row of arch from the k-th column of the
 * cache's list on, one by one (padding to clear, hooks, defaults, a value of the wrong
 * width); then e to dest. Out of line: the usual spawn keeps its values in registers. */
__attribute__((noinline)) static void spawn_cached_rest(kiln_world *world,
                                                        const struct kl_spawn_column *k,
                                                        int32_t row, void *const *values,
                                                        bool move, kiln_entity e,
                                                        kiln_entity *dest) {
    kiln_tick tick = world->tick;
    kiln_row_tick stamp = kl_row_tick_now(world);
    for (; k->column; k++)
        kl_column_write(k->column, row, values ? values[k->input] : NULL, move, tick, stamp, true);
    if (dest) *dest = e;
}

/* Raises the latest tick of every column of the spawn cache to tick. */
__attribute__((noinline)) static void spawn_touch(kiln_world *world, kiln_tick tick) {
    for (const struct kl_spawn_column *p = world->spawn_data; p->column; p++)
        kl_column_touch_appended(p->column, tick);
    world->spawn_touched = tick;
}

/* The usual spawn in one pass: the component list is the spawn cache's, its archetype has
 * room and no check hook, and a slot is free (or reserved): the slot's record is written once,
 * and the values go straight from values[] to the cached columns, with no copy of the column
 * and value lists. False (nothing done) otherwise; spawn_values then takes the general path. */
static inline __attribute__((always_inline)) bool spawn_cached(kiln_world *world,
                                                               const kiln_component *components,
                                                               void *const *values, int32_t count,
                                                               bool move, kiln_entity reserved,
                                                               kiln_entity *dest) {
    if (count <= 0 || count != world->spawn_key_count || components == NULL) return false;
    if (count <= 2) { /* the usual lists: one compare */
        uint64_t a = components[0], b = world->spawn_key[0];
        if (count == 2) {
            memcpy(&a, components, sizeof a);
            memcpy(&b, world->spawn_key, sizeof b);
        }
        if (a != b) return false;
    } else {
        for (int32_t i = 0; i < count; i++)
            if (components[i] != world->spawn_key[i]) return false;
    }
    kl_archetype *arch = world->spawn_arch;
    int32_t row = arch->count;
    if (arch->has_check || row == arch->capacity) return false;
    /* The slot's record is written once, alive at its row. */
    kiln_entity e = reserved;
    uint32_t id = arch->id;
    if (reserved != KILN_NULL_ENTITY) {
        kl_record_set_alive(kl_record_at(world, kiln_entity_index(reserved)),
                            kiln_entity_generation(reserved), id, (uint32_t)row);
    } else if (world->free_head != KL_NONE) {
        uint32_t index = world->free_head;
        kl_record *r = kl_record_at(world, index);
        uint32_t generation = kl_record_generation(r);
        world->free_head = kl_record_next(r);
        kl_record_set_alive(r, generation, id, (uint32_t)row);
        e = kiln_entity_make(index, generation);
    } else {
        uint32_t index = kl_slot_count(world);
        if ((int64_t)index >= (int64_t)world->page_count * KL_PAGE_SIZE) return false;
        kl_record_set_alive(&world->pages[index >> KL_PAGE_BITS][index & (KL_PAGE_SIZE - 1)], 1,
                            id, (uint32_t)row);
        /* after the record: a reader that sees the slot sees it whole */
        atomic_store_explicit(&world->slot_count, index + 1, memory_order_release);
        e = kiln_entity_make(index, 1);
    }
    kiln_tick tick = world->tick;
    kiln_row_tick stamp = (kiln_row_tick)(tick - world->tick_base);
    arch->entities[row] = e;
    arch->count = row + 1;
    arch->structure_tick = tick;
    world->structure_version++;
    world->alive++;
    /* Values copy as plain bytes when every listed column allows it (8, 12 and 16 bytes in
     * 4-byte pieces, see copy_fresh; other widths of at most 64 bytes when the value lies
     * outside the row); from the first other one (NULL for the defaults, a larger width) on,
     * spawn_cached_rest writes them. */
    if (KL_UNLIKELY(!world->spawn_plain || values == NULL)) {
        spawn_cached_rest(world, world->spawn_data, row, values, move, e, dest);
        return true;
    }
    /* The columns' latest ticks once a tick: they only grow, so touched at this tick they
     * stay at it or later. */
    if (KL_UNLIKELY(world->spawn_touched != tick)) spawn_touch(world, tick);
    const struct kl_spawn_column *p = world->spawn_data;
    for (kl_column *col; (col = p->column) != NULL; p++) {
        const uint8_t *value = values[p->input];
        size_t size = col->stride;
        uint8_t *dst = col->data + (size_t)row * size;
        if (KL_UNLIKELY(!value) ||
            (!copy_fresh(dst, value, size) &&
             ((uintptr_t)value - (uintptr_t)dst + (size - 1) < 2 * size - 1 ||
              !kl_copy_small(dst, value, size)))) {
            spawn_cached_rest(world, p, row, values, move, e, dest);
            return true;
        }
        col->ticks[row] = stamp;
    }
    if (dest) *dest = e;
    return true;
}

/* kl_spawn_values past the spawn cache: out of line, so the cached path sets up no frame. */
__attribute__((noinline)) static kiln_result spawn_general(kiln_world *world, const char *call,
                                                           const kiln_component *components,
                                                           void *const *values, int32_t count,
                                                           bool move, bool checked, kiln_entity reserved,
                                                           kiln_entity *dest) {
    if (count >= 0 && count <= KL_SPAWN_CACHE) { /* small frames for the usual spawn */
        int32_t column[KL_SPAWN_CACHE];
        void *vals[KL_SPAWN_CACHE];
        return spawn_values(world, call, components, values, count, move, checked, reserved, dest, column, vals);
    }
    int32_t column[KL_SPAWN_MAX];
    void *vals[KL_SPAWN_MAX];
    return spawn_values(world, call, components, values, count, move, checked, reserved, dest, column, vals);
}

kiln_result kl_spawn_values(kiln_world *world, const char *call, const kiln_component *components,
                            void *const *values, int32_t count, bool move, kiln_entity reserved,
                            kiln_entity *dest) {
    kl_assert_not_iterating(world);
    if (KL_LIKELY(spawn_cached(world, components, values, count, move, reserved, dest)))
        return KILN_OK;
    return spawn_general(world, call, components, values, count, move, true, reserved, dest);
}

/* The despawn of an entity whose row has hooks to run: out of line, so the plain despawn
 * keeps to scratch registers. */
__attribute__((noinline)) static kiln_result despawn_hooked(kiln_world *world, kl_record *rec,
                                                            kiln_entity entity,
                                                            kl_archetype *arch, int32_t row) {
    world->in_hook++; /* the row is half gone while its hooks run (kl_in_hook) */
    kl_archetype_destroy_row(arch, row);
    kl_archetype_remove_row(world, arch, row);
    world->in_hook--;
    world->alive--;
    kl_entity_retire(world, rec, entity); /* rec: records never move */
    return KILN_OK;
}

/* kl_despawn_entity, inline in kiln_despawn: the record read once gives the archetype, the
 * row and (through the handle) the generation to retire. */
static inline __attribute__((always_inline)) kiln_result despawn_now(kiln_world *world,
                                                                     const char *call,
                                                                     kiln_entity entity) {
    kl_assert_not_iterating(world);
    uint64_t bits;
    kl_record *rec = kl_record_live(world, entity, &bits);
    if (!rec) return kl_fail_dead(world, call, entity);
    kl_archetype *arch = world->archetypes[kl_bits_archetype(bits)];
    size_t row = (size_t)(bits & (KL_ROWS_MAX - 1));
    if (KL_UNLIKELY(arch->has_hooks)) return despawn_hooked(world, rec, entity, arch, (int32_t)row);
    /* No hook can look: the slot goes first, so the row's copies keep few registers. */
    world->alive--;
    kl_entity_retire(world, rec, entity);
    kl_archetype_remove_row_plain(world, arch, bits & KL_PLACE_MASK);
    return KILN_OK;
}

kiln_result kl_despawn_entity(kiln_world *world, const char *call, kiln_entity entity) {
    return despawn_now(world, call, entity);
}

kiln_result kiln_unspawn(kiln_world *world, kiln_entity entity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_unspawn", KL_STRUCTURAL, 0, entity);
    if (kl_deferred(world)) return kl_defer_despawn(world, "kiln_unspawn", entity); /* slot spent */
    if (kl_in_hook(world)) return kl_fail_in_hook(world, "kiln_unspawn");
    kiln_result r = despawn_now(world, "kiln_unspawn", entity);
    if (r != KILN_OK) return r;
    uint32_t index = kiln_entity_index(entity), generation = kiln_entity_generation(entity);
    kl_record *rec = kl_record_at(world, index);
    if (world->free_head == index && kl_record_generation(rec) == generation + 1)
        world->free_head = kl_record_next(rec); /* the despawn's retire, taken back */
    else if (generation < KILN_ENTITY_GENERATION_MAX)
        return KILN_OK; /* (cannot happen: the despawn freed it last) */
    kl_entity_untake(world, entity);
    return KILN_OK;
}

/* ---- public calls ---------------------------------------------------------------------- */

static kiln_result spawn_with(kiln_world *world, const char *call, const kiln_component *components,
                              const void *const *values, int32_t count, kiln_entity *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, call, KL_STRUCTURAL, 0, 0);
    if (kl_deferred(world)) return kl_defer_spawn(world, call, components, values, count, dest);
    if (kl_in_hook(world)) return kl_fail_in_hook(world, call);
    /* not deferred, so not iterating either (iteration defers the world): the usual spawn
     * lands here without a further call */
    if (KL_LIKELY(spawn_cached(world, components, (void *const *)values, count, false,
                               KILN_NULL_ENTITY, dest)))
        return KILN_OK;
    return spawn_general(world, call, components, (void *const *)values, count, false, false,
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
        kl_fill_row_ticks(col->ticks, first, (int64_t)first + n, stamp);
        kl_column_touch_appended(col, tick);
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
    if (kl_in_hook(world)) return kl_fail_in_hook(world, call);
    kl_assert_not_iterating(world);
    kiln_result r = KILN_OK;
    kl_archetype *arch = archetype_for(world, call, components, count, NULL, &r);
    if (!arch) return r;
    /* Every entity gets the same (default) values: one check each covers them all. */
    if (arch->has_check && n > 0 &&
        (r = check_values(world, call, components, NULL, count, KILN_NULL_ENTITY)) != KILN_OK)
        return r;
    if ((int64_t)arch->count + n > KL_ROWS_MAX) return kl_fail_no_room(world, call, arch, n);
    r = kl_entities_reserve(world, n, call);
    if (r != KILN_OK) return r;
    if (!kl_archetype_reserve(world, arch, n)) return kl_fail_no_room(world, call, arch, n);

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
        int32_t row = arch->count, fresh = n - i;
        kiln_entity *entities = arch->entities + row;
        kl_record **pages = world->pages;
        /* generation 1, in arch, at row 0: a record is this plus its row, a handle (index,
         * generation 1) the first plus its distance from it */
        uint64_t place = kl_record_bits(1, arch->id, 0);
        for (int32_t k = 0; k < fresh;) { /* page by page */
            uint32_t at = (index + (uint32_t)k) & (KL_PAGE_SIZE - 1);
            kl_record *page = pages[(index + (uint32_t)k) >> KL_PAGE_BITS];
            int32_t end = k + (int32_t)(KL_PAGE_SIZE - at);
            if (end > fresh) end = fresh;
            uint64_t bits = place + (uint64_t)(row + k), e = kiln_entity_make(index + (uint32_t)k, 1);
            for (; k < end; k++, at++, bits++, e++) {
                kl_record_store(&page[at], bits);
                entities[k] = e;
            }
        }
        if (dest) memcpy(dest + i, entities, sizeof(kiln_entity) * (size_t)fresh);
        world->alive += fresh;
        arch->count = row + fresh;
        arch->structure_tick = world->tick;
        world->structure_version++;
        atomic_store_explicit(&world->slot_count, index + (uint32_t)fresh, memory_order_release);
    }
    fill_defaults(world, arch, first, n);
    return KILN_OK;
}

kiln_result kiln_despawn(kiln_world *world, kiln_entity entity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_guard_check(world, "kiln_despawn", KL_STRUCTURAL, 0, entity);
    if (kl_deferred(world)) return kl_defer_despawn(world, "kiln_despawn", entity);
    if (kl_in_hook(world)) return kl_fail_in_hook(world, "kiln_despawn");
    return despawn_now(world, "kiln_despawn", entity);
}

kiln_result kiln_despawn_unless(kiln_world *world, kiln_entity entity, const kiln_component *keep, int32_t count) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const char *call = "kiln_despawn_unless";
    if (count < 0 || (keep == NULL && count > 0))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, count < 0 ? "%s: count %d is negative" :
                       "%s: keep is NULL with count %d", call, (int)count);
    kl_guard_check(world, call, KL_STRUCTURAL, 0, entity);
    for (int32_t k = 0; k < count; k++) {
        if (!kiln_has(world, entity, keep[k])) continue; /* (dead, or reserved: checked as it lands) */
        char eb[24], cb[32];
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: entity %s holds %s", call,
                       kiln_entity_format(entity, eb, sizeof eb), kl_component_name(world, keep[k], cb, sizeof cb));
    }
    if (kl_deferred(world)) return kl_defer_despawn_unless(world, call, entity, keep, count);
    if (kl_in_hook(world)) return kl_fail_in_hook(world, call);
    return despawn_now(world, call, entity);
}
