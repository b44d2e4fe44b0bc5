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

/* The neighbour of arch with component added / removed, following or caching the edge.
 * NULL with the world error set when out of memory. */
KL_HIDDEN kl_archetype *kl_archetype_with(kiln_world *world, kl_archetype *arch,
                                          kiln_component component, const char *call);
KL_HIDDEN kl_archetype *kl_archetype_without(kiln_world *world, kl_archetype *arch,
                                             kiln_component component, const char *call);

/* Makes room for rows more rows; false when out of memory (arch unchanged). */
KL_HIDDEN bool kl_archetype_reserve(kiln_world *world, kl_archetype *arch, int64_t rows);

/* Like kl_archetype_reserve; each of the ptr_count pointers in ptrs that points into one of
 * arch's live values is moved along when the columns are reallocated. */
KL_HIDDEN bool kl_archetype_reserve_rebase(kiln_world *world, kl_archetype *arch, int64_t rows,
                                           void **ptrs, int32_t ptr_count);

/* Index of component in arch->types, or -1 (binary search for large archetypes). */
KL_HIDDEN int32_t kl_archetype_type_index_search(const kl_archetype *arch, kiln_component component);

static inline int32_t kl_archetype_type_index(const kl_archetype *arch, kiln_component component) {
    const kiln_component *t = arch->types;
    int32_t n = arch->type_count;
    if (n > 8) return kl_archetype_type_index_search(arch, component);
    for (int32_t i = 0; i < n; i++)
        if (t[i] == component) return i;
    return -1;
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
    int32_t t = kl_archetype_type_index(arch, component);
    if (t < 0 || arch->column_of[t] < 0) return NULL;
    return &arch->columns[arch->column_of[t]];
}

/* Appends a row for entity (room must be reserved); values are left uninitialised. */
KL_HIDDEN int32_t kl_archetype_push(kiln_world *world, kl_archetype *arch, kiln_entity entity);

/* Runs the destroy hooks of every value in row. */
KL_HIDDEN void kl_archetype_destroy_row(kl_archetype *arch, int32_t row);

/* Removes row whose values are already destroyed or moved out: the last row moves into it
 * and its entity's record is updated. */
KL_HIDDEN void kl_archetype_remove_row(kiln_world *world, kl_archetype *arch, int32_t row);

/* Moves the entity at src_row of src into a new row of dst (room must be reserved): added
 * (when not 0) is written from value first (see kl_column_write), shared components move
 * with their ticks, components dst lacks are destroyed. Updates records; returns the row. */
KL_HIDDEN int32_t kl_archetype_move(kiln_world *world, kl_archetype *src, int32_t src_row,
                                    kl_archetype *dst, kiln_component added, void *value,
                                    bool move);

/* Writes value (or zeroes when NULL) into column at row, destroying nothing; stamps tick.
 * move: relocate value through the component's move hook when it has one, else copy. */
KL_HIDDEN void kl_column_write(kl_column *col, int32_t row, void *value, bool move,
                               kiln_tick tick);

/* Records that column was written at tick. */
static inline void kl_column_touch(kl_column *col, kiln_tick tick) {
    if (atomic_load_explicit(&col->latest, memory_order_relaxed) < tick)
        atomic_store_explicit(&col->latest, tick, memory_order_relaxed);
}

/* Frees every archetype, running the destroy hooks of every live value. */
KL_HIDDEN void kl_archetypes_free(kiln_world *world);

#endif
