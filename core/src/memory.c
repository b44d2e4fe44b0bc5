/* memory.c: the allocator wrappers and growable tables. Invariant: a.bytes equals the sum of
 * the sizes of the blocks currently handed out, so a destroyed world returns it to zero. */
#include "memory.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MISALIGNED                                                                             \
    "the allocator hook returned a block not aligned to 8 bytes (kiln_alloc_fn: align blocks " \
    "as malloc does)"

void *kl_default_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    (void)ud;
    (void)osize;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, nsize);
}

size_t kl_mul(size_t size, size_t count) {
    if (size != 0 && count > SIZE_MAX / size) return SIZE_MAX;
    return size * count;
}

void *kl_alloc(kl_allocator *a, size_t size) {
    if (size == 0 || size == SIZE_MAX) return NULL;
    void *p = a->fn(a->ud, NULL, 0, size);
    KILN_ASSERT(kl_aligned(p), MISALIGNED);
    if (p) {
        atomic_fetch_add_explicit(&a->bytes, (int64_t)size, memory_order_relaxed);
        atomic_fetch_add_explicit(&a->calls, 1, memory_order_relaxed);
    }
    return p;
}

void *kl_realloc(kl_allocator *a, void *ptr, size_t osize, size_t nsize) {
    if (ptr == NULL) return kl_alloc(a, nsize);
    if (nsize == 0) {
        kl_free(a, ptr, osize);
        return NULL;
    }
    if (nsize == SIZE_MAX) return NULL;
    void *p = a->fn(a->ud, ptr, osize, nsize);
    KILN_ASSERT(kl_aligned(p), MISALIGNED);
    if (p) {
        atomic_fetch_add_explicit(&a->bytes, (int64_t)nsize - (int64_t)osize, memory_order_relaxed);
        atomic_fetch_add_explicit(&a->calls, 1, memory_order_relaxed);
    }
    return p;
}

void kl_free(kl_allocator *a, void *ptr, size_t size) {
    if (ptr == NULL) return;
    a->fn(a->ud, ptr, size, 0);
    atomic_fetch_sub_explicit(&a->bytes, (int64_t)size, memory_order_relaxed);
}

bool kl_grow(kl_allocator *a, void **ptr, int64_t *cap, int64_t need, size_t elem, int64_t min) {
    if (need <= *cap) return true;
    int64_t ncap = *cap < min ? min : *cap;
    while (ncap < need) ncap *= 2;
    void *p = kl_realloc(a, *ptr, kl_mul(elem, (size_t)*cap), kl_mul(elem, (size_t)ncap));
    if (!p) return false;
    *ptr = p;
    *cap = ncap;
    return true;
}

bool kl_grow_zeroed(kl_allocator *a, void **ptr, int64_t *cap, int64_t need, size_t elem, int64_t min) {
    int64_t old = *cap;
    if (!kl_grow(a, ptr, cap, need, elem, min)) return false;
    if (*cap > old) memset((char *)*ptr + elem * (size_t)old, 0, elem * (size_t)(*cap - old));
    return true;
}

bool kl_shrink(kl_allocator *a, void **ptr, int64_t *cap, int64_t ncap, size_t elem) {
    void *p = kl_realloc(a, *ptr, kl_mul(elem, (size_t)*cap), kl_mul(elem, (size_t)ncap));
    if (!p && ncap) return false;
    *ptr = p;
    *cap = ncap;
    return true;
}

kl_table *kl_table_reserve(kl_allocator *a, kl_table *t, int64_t need, size_t elem, int64_t min) {
    int64_t cap = t ? t->cap : 0;
    if (need <= cap) return t;
    int64_t ncap = cap < min ? min : cap;
    while (ncap < need) ncap *= 2;
    size_t bytes = kl_mul(elem, (size_t)ncap);
    kl_table *n = kl_alloc(a, bytes > SIZE_MAX - KL_TABLE_HEADER ? SIZE_MAX : KL_TABLE_HEADER + bytes);
    if (!n) return NULL;
    n->older = t;
    n->cap = ncap;
    size_t used = elem * (size_t)cap;
    if (used) memcpy(kl_table_entries(n), kl_table_entries(t), used);
    memset((char *)kl_table_entries(n) + used, 0, bytes - used);
    return n;
}

void kl_table_free(kl_allocator *a, kl_table *t, size_t elem) {
    while (t) {
        kl_table *older = t->older;
        kl_free(a, t, KL_TABLE_HEADER + elem * (size_t)t->cap);
        t = older;
    }
}
