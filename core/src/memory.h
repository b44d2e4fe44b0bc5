/* memory.h: every byte the world allocates goes through these wrappers around its one
 * allocator hook; they keep the byte and call counts that kiln_world_stats_get reports. */
#ifndef KILN_MEMORY_H
#define KILN_MEMORY_H

#include <stdatomic.h>
#include <stddef.h>

#include "internal.h"

/* The counts are relaxed atomics: a worker thread filling a command buffer allocates through
 * the world's allocator while the main thread does too. */
typedef struct kl_allocator {
    kiln_alloc_fn fn;
    void *ud;
    _Atomic(int64_t) bytes;
    _Atomic(int64_t) calls;
} kl_allocator;

/* What every block from the hook must be aligned to: the widest scalar kiln's own structures
 * hold, and at least the 8 bytes kiln.h promises; values needing 16 are aligned inside blocks.
 * On i386 int64_t and double ask only 4, yet a world's 64-bit atomics need 8: a 4-byte aligned
 * hook passed the check there. */
typedef union kl_scalar {
    int64_t i;
    double d;
    void *p;
} kl_scalar;
#define KL_ALLOC_ALIGN (_Alignof(kl_scalar) > 8 ? _Alignof(kl_scalar) : 8)

static inline bool kl_aligned(const void *p) { return ((uintptr_t)p & (KL_ALLOC_ALIGN - 1)) == 0; }

/* The default hook: realloc/free from the C library. */
KL_HIDDEN void *kl_default_alloc(void *ud, void *ptr, size_t osize, size_t nsize);

/* Allocates size bytes (NULL on failure or overflow). Both assert (debug builds) that the hook
 * returned a block aligned to KL_ALLOC_ALIGN: a misaligned one is undefined behaviour later. */
KL_HIDDEN void *kl_alloc(kl_allocator *a, size_t size);
/* Resizes ptr from osize to nsize bytes; on failure returns NULL and ptr is untouched. */
KL_HIDDEN void *kl_realloc(kl_allocator *a, void *ptr, size_t osize, size_t nsize);
/* Frees ptr of size bytes; NULL is a no-op. */
KL_HIDDEN void kl_free(kl_allocator *a, void *ptr, size_t size);

/* Grows an array of elem-sized items so it holds at least need items, doubling (from
 * at least min). Returns false on failure with *ptr and *cap untouched. */
KL_HIDDEN bool kl_grow(kl_allocator *a, void **ptr, int64_t *cap, int64_t need, size_t elem,
                       int64_t min);

/* kl_grow, the items past the old capacity zeroed. */
KL_HIDDEN bool kl_grow_zeroed(kl_allocator *a, void **ptr, int64_t *cap, int64_t need, size_t elem,
                              int64_t min);

/* Resizes an array of elem-sized items from *cap to ncap items, down (0 frees it). Returns
 * false, *ptr and *cap untouched, when the allocator refuses; nothing is lost either way. */
KL_HIDDEN bool kl_shrink(kl_allocator *a, void **ptr, int64_t *cap, int64_t ncap, size_t elem);

/* size * count, or SIZE_MAX on overflow (which every allocation then refuses). */
KL_HIDDEN size_t kl_mul(size_t size, size_t count);

/* A table is an array that other threads may read while its owner grows it. Growing copies
 * the entries into a new table that the owner publishes with a release store; the old table
 * stays allocated, linked from the new one, until the owner frees the whole chain (at world
 * destroy), so a reader holding an old table never reads freed memory. Only the owner writes
 * entries, and only in the newest table. Replaced tables sum to less than the newest one. */
typedef struct kl_table {
    struct kl_table *older; /* the table this one replaced, or NULL */
    int64_t cap;            /* entries; never changes */
} kl_table;

#define KL_TABLE_HEADER ((sizeof(kl_table) + 15) & ~(size_t)15)

/* The entries of t (16-byte aligned after the header). */
static inline void *kl_table_entries(const kl_table *t) {
    return (char *)(uintptr_t)t + KL_TABLE_HEADER;
}

/* t itself when it holds at least need entries of elem bytes; otherwise a new table with
 * t's entries copied, zeroes after them, and t linked as older, for the caller to publish.
 * NULL when out of memory (t unchanged). t may be NULL. */
KL_HIDDEN kl_table *kl_table_reserve(kl_allocator *a, kl_table *t, int64_t need, size_t elem,
                                     int64_t min);

/* Frees t and every table it replaced. NULL is a no-op. */
KL_HIDDEN void kl_table_free(kl_allocator *a, kl_table *t, size_t elem);

#endif
