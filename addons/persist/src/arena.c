/* arena.c: the addon's memory: an arena freed at once, a buffered writer and a growable byte
 * buffer, all on the world's allocator hook. Invariant: nothing here outlives one call. */
#include <string.h>

#include "persist_internal.h"

struct pz_chunk {
    pz_chunk *next;
    size_t size; /* bytes of this allocation, header included */
};

#define PZ_CHUNK_HEADER ((sizeof(pz_chunk) + 15) & ~(size_t)15)

void *pz_alloc_raw(pz_arena *arena, size_t size) {
    if (size > SIZE_MAX - PZ_CHUNK_HEADER - 16) return NULL;
    size_t total = PZ_CHUNK_HEADER + size;
    pz_chunk *c = kl_alloc(arena->alloc, total);
    if (!c) return NULL;
    c->next = arena->chunks;
    c->size = total;
    arena->chunks = c;
    return (uint8_t *)c + PZ_CHUNK_HEADER;
}

void *pz_alloc(pz_arena *arena, size_t size) {
    void *p = pz_alloc_raw(arena, size);
    if (p) memset(p, 0, size);
    return p;
}

void pz_arena_free(pz_arena *arena) {
    for (pz_chunk *c = arena->chunks, *next; c; c = next) {
        next = c->next;
        kl_free(arena->alloc, c, c->size);
    }
    arena->chunks = NULL;
}

bool pz_flush(pz_out *out) {
    if (!out->failed && out->used && !out->write(out->ud, out->buf, out->used)) out->failed = true;
    out->used = 0;
    return !out->failed;
}

void pz_put(pz_out *out, const void *data, size_t size) {
    out->offset += size;
    if (out->failed) return;
    if (size > sizeof out->buf - out->used) {
        if (!pz_flush(out)) return;
        if (size >= sizeof out->buf) {
            if (!out->write(out->ud, data, size)) out->failed = true;
            return;
        }
    }
    memcpy(out->buf + out->used, data, size);
    out->used += size;
}

bool pz_bytes_write(void *ud, const void *data, size_t size) {
    pz_bytes *b = ud;
    if (b->failed) return false;
    if (size > b->cap - b->size) {
        size_t ncap = b->cap ? b->cap : 256;
        while (ncap - b->size < size) {
            if (ncap > SIZE_MAX / 2) {
                b->failed = true;
                return false;
            }
            ncap *= 2;
        }
        uint8_t *p = kl_realloc(b->alloc, b->data, b->cap, ncap);
        if (!p) {
            b->failed = true;
            return false;
        }
        b->data = p;
        b->cap = ncap;
    }
    if (size) memcpy(b->data + b->size, data, size);
    b->size += size;
    return true;
}

void pz_bytes_free(pz_bytes *b) {
    kl_free(b->alloc, b->data, b->cap);
    b->data = NULL;
    b->size = b->cap = 0;
}

uint8_t *pz_scratch(pz_bytes *b, size_t size) {
    b->size = 0;
    if (size > b->cap) {
        uint8_t *p = kl_realloc(b->alloc, b->data, b->cap, size);
        if (!p) return NULL;
        b->data = p;
        b->cap = size;
    }
    return b->data ? b->data : (uint8_t *)b; /* size 0: any non-NULL pointer */
}
