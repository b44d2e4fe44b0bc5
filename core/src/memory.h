/* memory.h: every byte the world allocates goes through these wrappers around its one
 * allocator hook; they keep the byte and call counts that kiln_world_stats_get reports. */
#ifndef KILN_MEMORY_H
#define KILN_MEMORY_H

#include <stddef.h>

#include "internal.h"

typedef struct kl_allocator {
    kiln_alloc_fn fn;
    void *ud;
    int64_t bytes;
    int64_t calls;
} kl_allocator;

/* The default hook: realloc/free from the C library. */
KL_HIDDEN void *kl_default_alloc(void *ud, void *ptr, size_t osize, size_t nsize);

/* Allocates size bytes (NULL on failure or overflow). */
KL_HIDDEN void *kl_alloc(kl_allocator *a, size_t size);
/* Resizes ptr from osize to nsize bytes; on failure returns NULL and ptr is untouched. */
KL_HIDDEN void *kl_realloc(kl_allocator *a, void *ptr, size_t osize, size_t nsize);
/* Frees ptr of size bytes; NULL is a no-op. */
KL_HIDDEN void kl_free(kl_allocator *a, void *ptr, size_t size);

/* Grows an array of elem-sized items so it holds at least need items, doubling (from
 * at least min). Returns false on failure with *ptr and *cap untouched. */
KL_HIDDEN bool kl_grow(kl_allocator *a, void **ptr, int64_t *cap, int64_t need, size_t elem,
                       int64_t min);

/* size * count, or SIZE_MAX on overflow (which every allocation then refuses). */
KL_HIDDEN size_t kl_mul(size_t size, size_t count);

#endif
