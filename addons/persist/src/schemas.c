/* schemas.c: the schemas of a staged document found by name, for both loaders: an open-addressing
 * table on the document's arena. Invariant: a file of n schemas costs O(n) to check and index. */
#include <string.h>

#include "persist_internal.h"

static uint64_t hash_of(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

bool pz_schema_names_init(pz_schema_names *names, pz_doc *doc) {
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)doc->schema_count) cap *= 2;
    names->slots = pz_alloc(&doc->arena, sizeof(uint32_t) * (size_t)cap);
    names->mask = (uint32_t)(cap - 1);
    names->doc = doc;
    return names->slots != NULL;
}

/* The slot of name: where it is, or the empty one where it would go. */
static uint32_t slot_of(const pz_schema_names *names, const char *name) {
    const pz_schema *schemas = names->doc->schemas;
    uint32_t i = (uint32_t)hash_of(name) & names->mask;
    while (names->slots[i] && strcmp(schemas[names->slots[i] - 1].name, name) != 0) i = (i + 1) & names->mask;
    return i;
}

int32_t pz_schema_names_add(pz_schema_names *names, uint32_t schema) {
    uint32_t i = slot_of(names, names->doc->schemas[schema].name);
    if (names->slots[i]) return (int32_t)names->slots[i] - 1;
    names->slots[i] = schema + 1;
    return -1;
}

int32_t pz_schema_names_find(const pz_schema_names *names, const char *name) {
    uint32_t at = names->slots[slot_of(names, name)];
    return at ? (int32_t)at - 1 : -1;
}
