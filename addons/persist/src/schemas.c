/* schemas.c: the schemas of a staged document found by name, for both loaders: an open-addressing
 * table on the document's arena. Invariant: a file of n schemas costs O(n) to check and index. */
#include <string.h>

/* the header-only form, as names.c and hash.c: nothing to link */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "persist_internal.h"

/* Seeded with the world's hash_seed: a file cannot pick schema names that share a slot (under
 * a fixed hash, names made to collide offline made a load of n schemas cost n^2 / 2 reads). */
static uint64_t hash_of(const pz_schema_names *names, const char *s) {
    return XXH3_64bits_withSeed(s, strlen(s), names->seed);
}

bool pz_schema_names_init(pz_schema_names *names, pz_doc *doc, const kiln_world *world) {
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)doc->schema_count) cap *= 2;
    names->slots = pz_alloc(&doc->arena, sizeof(uint32_t) * (size_t)cap);
    names->mask = (uint32_t)(cap - 1);
    names->doc = doc;
    names->seed = world->hash_seed;
    names->slots_read = 0;
    return names->slots != NULL;
}

/* The slot of name: where it is, or the empty one where it would go. */
static uint32_t slot_of(pz_schema_names *names, const char *name) {
    const pz_schema *schemas = names->doc->schemas;
    uint32_t i = (uint32_t)hash_of(names, name) & names->mask;
    while (++names->slots_read, names->slots[i] && strcmp(schemas[names->slots[i] - 1].name, name) != 0)
        i = (i + 1) & names->mask;
    return i;
}

int32_t pz_schema_names_add(pz_schema_names *names, uint32_t schema) {
    uint32_t i = slot_of(names, names->doc->schemas[schema].name);
    if (names->slots[i]) return (int32_t)names->slots[i] - 1;
    names->slots[i] = schema + 1;
    return -1;
}

int32_t pz_schema_names_find(pz_schema_names *names, const char *name) {
    uint32_t at = names->slots[slot_of(names, name)];
    return at ? (int32_t)at - 1 : -1;
}
