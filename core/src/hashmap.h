/* hashmap.h: an open-addressed multimap from nonzero 32-bit keys to nonzero 32-bit values,
 * used for archetype graph edges and archetype type sets (keyed by hash). */
#ifndef KILN_HASHMAP_H
#define KILN_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

#include "memory.h"

typedef struct kl_map {
    uint64_t *slots; /* key << 32 | value; 0 is an empty slot */
    uint32_t cap;    /* a power of two, or 0 */
    uint32_t count;
} kl_map;

/* The first value stored under key, or 0. */
KL_HIDDEN uint32_t kl_map_get(const kl_map *map, uint32_t key);

/* Walks every value stored under key: start with *cursor = 0; returns 0 when done. */
KL_HIDDEN uint32_t kl_map_next(const kl_map *map, uint32_t key, uint32_t *cursor);

/* How many slots a walk of every value under key reads (kl_map_next up to its first empty
 * slot): the run of occupied slots from key's home, counted for tests of hostile keys. */
KL_HIDDEN uint32_t kl_map_run(const kl_map *map, uint32_t key);

/* Makes room so that extra more puts cannot fail. False when out of memory. */
KL_HIDDEN bool kl_map_reserve(kl_allocator *a, kl_map *map, uint32_t extra);

/* Adds key -> value (duplicate keys are allowed). False when out of memory. */
KL_HIDDEN bool kl_map_put(kl_allocator *a, kl_map *map, uint32_t key, uint32_t value);

/* Empties the map, keeping its slots: as many puts as it held then cannot fail. */
KL_HIDDEN void kl_map_clear(kl_map *map);

KL_HIDDEN void kl_map_free(kl_allocator *a, kl_map *map);

/* Hashes never return 0, so they can be keys. */
KL_HIDDEN uint32_t kl_hash_u32(uint32_t x);
KL_HIDDEN uint32_t kl_hash_u32s(const uint32_t *xs, int32_t count);

/* A seed for the hash tables keyed by text a mod or a file chooses (entity, component, event,
 * system and a scene's names): drawn from where its caller's object sits (address randomisation)
 * and the monotonic clock, so no one outside the process knows it and no input is made to
 * collide on purpose. Two objects made one after the other at one address get different seeds
 * (each call waits for the clock to pass its reading: at most one tick).
 * Tables seeded with it may lay out differently in every run: none of them may be walked in
 * slot order into anything the world outputs. */
KL_HIDDEN uint64_t kl_hash_seed(const void *owner);

/* The hash of the len bytes of name s under seed (the world's hash_seed, for component, event
 * and system names, which a mod chooses): XXH3, so names picked to share a slot under one seed
 * spread under any other. Never 0. */
KL_HIDDEN uint32_t kl_hash_name(const char *s, size_t len, uint64_t seed);

#endif
