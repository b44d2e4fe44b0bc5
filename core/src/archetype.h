/* archetype.h: archetype storage: one table per component set, columns of 16-byte-aligned
 * values with per-row ticks, swap-remove rows, and the cached add/remove graph edges. */
#ifndef KILN_ARCHETYPE_H
#define KILN_ARCHETYPE_H

#include <string.h>

#include "world.h"

/* The archetype with exactly these types (sorted ascending, no duplicates), created when
 * missing. Returns NULL with the world error set when out of memory. */
KL_HIDDEN kl_archetype *kl_archetype_ensure(kiln_world *world, const kiln_component *types,
                                            int32_t count, const char *call);

/* Why kl_archetype_ensure or kl_archetype_traverse returned NULL (the world error says it). */
static inline kiln_result kl_archetype_failure(const kiln_world *world) {
    return (uint32_t)world->archetype_count >= KL_ARCHETYPES_MAX ? KILN_ERR_LIMIT
                                                                 : KILN_ERR_OUT_OF_MEMORY;
}

/* The neighbour of arch with component added (absent from arch) / removed (present),
 * following or caching the edge. NULL with the world error set when out of memory. */
KL_HIDDEN kl_archetype *kl_archetype_traverse(kiln_world *world, kl_archetype *arch,
                                              kiln_component component, const char *call);

static inline kl_archetype *kl_archetype_neighbour(kiln_world *world, kl_archetype *arch,
                                                   kiln_component component, const char *call) {
    if (KL_LIKELY(component < arch->slot_count && arch->slots[component].edge != 0))
        return world->archetypes[arch->slots[component].edge - 1];
    return kl_archetype_traverse(world, arch, component, call);
}

/* Makes room for rows more rows; false when out of memory (arch unchanged). */
KL_HIDDEN bool kl_archetype_reserve(kiln_world *world, kl_archetype *arch, int64_t rows);

/* Like kl_archetype_reserve; each of the ptr_count pointers in ptrs that points into one of
 * arch's live values is moved along when the columns are reallocated. */
KL_HIDDEN bool kl_archetype_reserve_rebase(kiln_world *world, kl_archetype *arch, int64_t rows,
                                           void **ptrs, int32_t ptr_count);

/* Index of component in arch->types, or -1 (binary search). */
KL_HIDDEN int32_t kl_archetype_type_index(const kl_archetype *arch, kiln_component component);

/* kl_archetype_slot for ids beyond the archetype's direct slots. */
KL_HIDDEN int32_t kl_archetype_slot_search(const kl_archetype *arch, kiln_component component);

/* Where component lives in arch: its column (>= 0), KL_SLOT_TAG or KL_SLOT_ABSENT. */
static inline int32_t kl_archetype_slot(const kl_archetype *arch, kiln_component component) {
    if (KL_LIKELY(component < arch->slot_count)) return arch->slots[component].column;
    return kl_archetype_slot_search(arch, component);
}

static inline bool kl_archetype_has(const kl_archetype *arch, kiln_component component) {
    return kl_archetype_slot(arch, component) != KL_SLOT_ABSENT;
}

/* Copies one value of size bytes: the common small sizes without a library call. */
static inline void kl_copy_value(void *dst, const void *src, size_t size) {
    switch (size) {
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    case 12: memcpy(dst, src, 12); break;
    case 16: memcpy(dst, src, 16); break;
    default: memcpy(dst, src, size); break;
    }
}

/* The column holding component in arch, or NULL (absent, or a tag). */
static inline kl_column *kl_archetype_column(const kl_archetype *arch, kiln_component component) {
    int32_t c = kl_archetype_slot(arch, component);
    return c >= 0 ? &arch->columns[c] : NULL;
}

/* Appends a row for entity (room must be reserved); values are left uninitialised. */
KL_HIDDEN int32_t kl_archetype_push(kiln_world *world, kl_archetype *arch, kiln_entity entity);

/* Runs the destroy hooks of every value in row. */
KL_HIDDEN void kl_archetype_destroy_row(kl_archetype *arch, int32_t row);

/* Removes row whose values are already destroyed or moved out: the last row moves into it
 * and its entity's record is updated. */
KL_HIDDEN void kl_archetype_remove_row(kiln_world *world, kl_archetype *arch, int32_t row);

/* Moves the entity at src_row of src into a new row of dst, its neighbour along changed
 * (room must be reserved): when dst has changed, its value is written from value first (see
 * kl_column_write); the other components move with their ticks, and when src has changed
 * its value is destroyed. Updates records (record: the moving entity's); returns the row. */
KL_HIDDEN int32_t kl_archetype_move(kiln_world *world, kl_archetype *src, int32_t src_row,
                                    kl_archetype *dst, kiln_component changed, void *value,
                                    bool move, kl_record *record);

/* Writes value (or zeroes when NULL) into column at row, destroying nothing; stamps tick.
 * move: relocate value through the component's move hook when it has one, else copy. */
KL_HIDDEN void kl_column_write_slow(kl_column *col, int32_t row, void *value, bool move,
                                    kiln_tick tick);

/* Records that column was written at tick. */
static inline void kl_column_touch(kl_column *col, kiln_tick tick) {
    if (atomic_load_explicit(&col->latest, memory_order_relaxed) < tick)
        atomic_store_explicit(&col->latest, tick, memory_order_relaxed);
}

static inline void kl_column_write(kl_column *col, int32_t row, void *value, bool move,
                                   kiln_tick tick) {
    uint8_t *dst = col->data + (size_t)row * col->stride;
    size_t size = col->stride;
    /* the usual case: plain bytes from distinct memory, no padding to clear */
    if (value && col->plain && col->component->size == size &&
        ((const uint8_t *)value + size <= dst || dst + size <= (const uint8_t *)value)) {
        kl_copy_value(dst, value, size);
        col->ticks[row] = tick;
        kl_column_touch(col, tick);
        return;
    }
    kl_column_write_slow(col, row, value, move, tick);
}

/* Frees every archetype, running the destroy hooks of every live value. */
KL_HIDDEN void kl_archetypes_free(kiln_world *world);

#endif
