/* hashmap.c: linear probing over a power-of-two slot array kept at most 3/4 full; entries
 * are never removed one by one (archetypes, edges and names live as long as the world; a
 * schedule's index of system names is cleared whole and put again when systems leave). */
#include "hashmap.h"

#include <time.h>
/* the header-only form, as persist's names.c and hash.c: nothing to link */
#define XXH_INLINE_ALL
#include <xxhash.h>

static uint32_t mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

uint32_t kl_hash_u32(uint32_t x) {
    uint32_t h = mix(x);
    return h ? h : 1u;
}

uint32_t kl_hash_u32s(const uint32_t *xs, int32_t count) {
    uint32_t h = 0x9e3779b9u ^ (uint32_t)count;
    for (int32_t i = 0; i < count; i++) h = mix(h ^ xs[i]) + 0x9e3779b9u;
    return h ? h : 1u;
}

/* splitmix64's finaliser: a bijection of 64 bits, so distinct inputs give distinct outputs. */
static uint64_t finalise(uint64_t h) {
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

/* The monotonic clock in nanoseconds, read only once it has moved past the reading returned:
 * a later call in this process (on any thread) reads a larger number. */
static uint64_t clock_once(void) {
    struct timespec now = {0, 0};
    if (clock_gettime(CLOCK_MONOTONIC, &now) != 0) return 0;
    uint64_t ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec, later = ns;
    while (later == ns && clock_gettime(CLOCK_MONOTONIC, &now) == 0) /* at most one tick */
        later = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    return ns;
}

/* The owner's address and a clock reading no other call gets: for one address, two seeds made
 * one after the other differ (the finaliser is a bijection of the clock's part), so an object
 * made later at the address of a dead one never takes its seed. */
uint64_t kl_hash_seed(const void *owner) {
    return finalise(finalise((uint64_t)(uintptr_t)owner ^ 0x9e3779b97f4a7c15ull) + clock_once());
}

uint32_t kl_hash_name(const char *s, size_t len, uint64_t seed) {
    uint64_t h = XXH3_64bits_withSeed(s, len, seed);
    uint32_t x = (uint32_t)(h ^ (h >> 32));
    return x ? x : 1u;
}

uint32_t kl_map_next(const kl_map *map, uint32_t key, uint32_t *cursor) {
    if (map->cap == 0) return 0;
    uint32_t mask = map->cap - 1;
    /* cursor counts probes made so far, so a walk resumes where it stopped */
    for (uint32_t i = *cursor; i < map->cap; i++) {
        uint64_t s = map->slots[(mix(key) + i) & mask];
        if (s == 0) break;
        if ((uint32_t)(s >> 32) == key) {
            *cursor = i + 1;
            return (uint32_t)s;
        }
    }
    *cursor = map->cap;
    return 0;
}

uint32_t kl_map_run(const kl_map *map, uint32_t key) {
    uint32_t mask = map->cap - 1, n = 1;
    if (map->cap == 0) return 0;
    while (n <= map->cap && map->slots[(mix(key) + n - 1) & mask] != 0) n++;
    return n;
}

uint32_t kl_map_get(const kl_map *map, uint32_t key) {
    uint32_t cursor = 0;
    return kl_map_next(map, key, &cursor);
}

static void insert(kl_map *map, uint64_t slot) {
    uint32_t mask = map->cap - 1;
    uint32_t i = mix((uint32_t)(slot >> 32)) & mask;
    while (map->slots[i] != 0) i = (i + 1) & mask;
    map->slots[i] = slot;
    map->count++;
}

bool kl_map_reserve(kl_allocator *a, kl_map *map, uint32_t extra) {
    uint64_t need = (uint64_t)map->count + extra;
    if (need * 4 <= (uint64_t)map->cap * 3) return true;
    uint64_t ncap = map->cap ? map->cap : 16;
    while (need * 4 > ncap * 3) ncap *= 2;
    if (ncap > (1u << 31)) return false;
    uint64_t *slots = kl_alloc(a, kl_mul(sizeof(uint64_t), (size_t)ncap));
    if (!slots) return false;
    for (uint64_t i = 0; i < ncap; i++) slots[i] = 0;
    kl_map old = *map;
    map->slots = slots;
    map->cap = (uint32_t)ncap;
    map->count = 0;
    for (uint32_t i = 0; i < old.cap; i++)
        if (old.slots[i]) insert(map, old.slots[i]);
    kl_free(a, old.slots, sizeof(uint64_t) * old.cap);
    return true;
}

bool kl_map_put(kl_allocator *a, kl_map *map, uint32_t key, uint32_t value) {
    KILN_ASSERT(key != 0 && value != 0, "map keys and values are nonzero");
    if (!kl_map_reserve(a, map, 1)) return false;
    insert(map, ((uint64_t)key << 32) | value);
    return true;
}

void kl_map_clear(kl_map *map) {
    for (uint32_t i = 0; i < map->cap; i++) map->slots[i] = 0;
    map->count = 0;
}

void kl_map_free(kl_allocator *a, kl_map *map) {
    kl_free(a, map->slots, sizeof(uint64_t) * map->cap);
    map->slots = NULL;
    map->cap = map->count = 0;
}
