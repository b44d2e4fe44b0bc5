/* memory.c: the allocator wrappers. Invariant: a.bytes equals the sum of the sizes of the
 * blocks currently handed out, so a destroyed world returns it to zero. */
#include "memory.h"

#include <stdint.h>
#include <stdlib.h>

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
    if (p) {
        a->bytes += (int64_t)size;
        a->calls++;
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
    if (p) {
        a->bytes += (int64_t)nsize - (int64_t)osize;
        a->calls++;
    }
    return p;
}

void kl_free(kl_allocator *a, void *ptr, size_t size) {
    if (ptr == NULL) return;
    a->fn(a->ud, ptr, size, 0);
    a->bytes -= (int64_t)size;
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
