/* handles.c: a load's map from saved handles to new ones (stage.c remaps the references through
 * it). Invariant: every saved handle is checked (valid, below the slot count, once) before it maps. */
#include <stdio.h>
#include <string.h>

#include "persist_internal.h"

static uint64_t slot_of(const pz_handle_map *m, kiln_entity e) {
    return (e * 0x9E3779B97F4A7C15ull >> 17) & m->mask;
}

/* Direct: whether e is a handle of the file, and the slot to read (mask when it is not). */
static inline uint32_t direct_slot(const pz_handle_map *m, kiln_entity e, bool *found) {
    uint32_t idx = kiln_entity_index(e), high = (uint32_t)(e >> 32);
    uint32_t at = idx < m->mask ? idx : (uint32_t)m->mask;
    /* the high word holds the generation and must hold nothing else */
    *found = (high != 0) & (m->generation[at] == high);
    return at;
}

kiln_entity pz_map_get(const pz_handle_map *m, kiln_entity e) {
    if (e == KILN_NULL_ENTITY) return KILN_NULL_ENTITY;
    if (m->generation) {
        bool found;
        uint32_t at = direct_slot(m, e, &found);
        if (!found) return KILN_NULL_ENTITY;
        return m->values ? m->values[at] : e;
    }
    for (uint64_t i = slot_of(m, e);; i = (i + 1) & m->mask) {
        if (m->keys[i] == e) return m->values[i];
        if (m->keys[i] == KILN_NULL_ENTITY) return KILN_NULL_ENTITY;
    }
}

/* Whether e (not null) is a handle the file holds. */
bool pz_map_has(const pz_handle_map *m, kiln_entity e) {
    if (m->generation) {
        bool found;
        direct_slot(m, e, &found);
        return found;
    }
    for (uint64_t i = slot_of(m, e);; i = (i + 1) & m->mask) {
        if (m->keys[i] == e) return true;
        if (m->keys[i] == KILN_NULL_ENTITY) return false;
    }
}

static kiln_result twice(kiln_world *world, kiln_entity e) {
    char buf[24];
    return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_load: entity %s appears twice (or shares its slot)",
                   kiln_entity_format(e, buf, sizeof buf));
}

/* Null, generation 0 or stray high bits, or (from a version 2 header) a slot at or past the
 * header's slot count. */
static bool valid_handle(const pz_doc *doc, kiln_entity e) {
    return e != KILN_NULL_ENTITY && kiln_entity_generation(e) != 0 &&
           (e >> (KILN_ENTITY_INDEX_BITS + KILN_ENTITY_GENERATION_BITS)) == 0 &&
           (!doc->has_slots || kiln_entity_index(e) < doc->slots);
}

/* Names the first invalid saved handle; KILN_OK when there is none. */
static kiln_result check_handles(kiln_world *world, const pz_doc *doc) {
    for (uint32_t g = 0; g < doc->group_count; g++)
        for (int64_t r = 0; r < doc->groups[g].count; r++) {
            kiln_entity e = doc->groups[g].handles[r];
            if (valid_handle(doc, e)) continue;
            if (e != KILN_NULL_ENTITY && kiln_entity_generation(e) != 0 &&
                (e >> (KILN_ENTITY_INDEX_BITS + KILN_ENTITY_GENERATION_BITS)) == 0)
                return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                               "kiln_load: group %u row %lld holds handle %llx, at or past the header's slot count %u",
                               (unsigned)g, (long long)r, (unsigned long long)e, (unsigned)doc->slots);
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_load: group %u row %lld holds an invalid handle %llx",
                           (unsigned)g, (long long)r, (unsigned long long)e);
        }
    return KILN_OK;
}

/* The slot count the saved handles need: the header's (version 2), else the highest saved
 * index + 1, found in one branch-free pass (version 1, JSON). */
uint64_t pz_saved_slots(const pz_doc *doc) {
    if (doc->has_slots) return doc->slots;
    uint32_t max = 0;
    for (uint32_t g = 0; g < doc->group_count; g++) {
        const kiln_entity *h = doc->groups[g].handles;
        for (int64_t r = 0; r < doc->groups[g].count; r++) {
            uint32_t idx = kiln_entity_index(h[r]);
            max = idx > max ? idx : max;
        }
    }
    return doc->entity_count ? (uint64_t)max + 1 : 0;
}

/* Rows a pass of pz_map_build takes at a time (16 KiB of handles). */
#define MAP_BLOCK 2048

/* Whether the n handles at h are valid below limit (the generation 1 and up with nothing above
 * it, the index below limit), without a branch: each 32-bit half of a handle (the generation
 * part less one, so that 0 wraps past the top) is held against its bound, two handles at a
 * time, in whatever order the halves lie in memory; the comparisons are or-ed, so no
 * iteration waits for the one before. */
typedef uint32_t halves __attribute__((vector_size(16)));

static bool valid_block(const kiln_entity *h, int64_t n, uint32_t limit) {
    const kiln_entity one_pair[2] = {(uint64_t)1 << 32, (uint64_t)1 << 32};
    const kiln_entity bound_pair[2] = {(uint64_t)KILN_ENTITY_GENERATION_MAX << 32 | limit,
                                       (uint64_t)KILN_ENTITY_GENERATION_MAX << 32 | limit};
    halves one, bound, over = {0, 0, 0, 0}, over2 = {0, 0, 0, 0};
    memcpy(&one, one_pair, sizeof one);
    memcpy(&bound, bound_pair, sizeof bound);
    int64_t r = 0;
    for (; r + 4 <= n; r += 4) {
        halves a, b;
        memcpy(&a, h + r, sizeof a);
        memcpy(&b, h + r + 2, sizeof b);
        over |= (halves)(a - one >= bound);
        over2 |= (halves)(b - one >= bound);
    }
    over |= over2;
    uint64_t wrong = over[0] | over[1] | over[2] | over[3];
    for (; r < n; r++) {
        uint64_t high = h[r] >> 32;
        wrong |= (uint64_t)(high - 1 >= KILN_ENTITY_GENERATION_MAX) | (uint64_t)((uint32_t)h[r] >= limit);
    }
    return wrong == 0;
}

/* Notes rows [begin, end) of handles h (valid) in gen; returns end, or the row whose slot was
 * noted already. */
static int64_t map_block(const kiln_entity *h, int64_t begin, int64_t end, uint32_t *gen) {
    for (int64_t r = begin; r < end; r++) {
        uint32_t idx = (uint32_t)h[r];
        if (gen[idx]) return r;
        gen[idx] = (uint32_t)(h[r] >> 32);
    }
    return end;
}

/* Whether the map is a direct table by slot (the saved indices are dense: the usual case). */
static bool dense(const pz_doc *doc, uint64_t slots) { /* (as pz_slots_can_keep counts) */
    uint64_t held = (uint64_t)doc->entity_count + (doc->has_free ? doc->free_count : 0);
    return slots <= 2 * held + 4096;
}

/* Checks every saved handle (valid, below slots, no slot twice) into the map; place: the
 * loaded entities keep their handles (so the direct map needs no new handles), and each row's
 * record and handle are written on the same pass (pz_slots_write_block). */
kiln_result pz_map_build(kiln_world *world, pz_doc *doc, uint64_t slots, const pz_place *place,
                             pz_handle_map *m) {
    bool keep = place != NULL;
    if (dense(doc, slots)) {
        m->mask = slots;
        m->generation = pz_alloc(&doc->arena, sizeof(uint32_t) * (m->mask + 1));
        m->values = keep ? NULL : pz_alloc_raw(&doc->arena, sizeof(kiln_entity) * m->mask);
        if (!m->generation || (!keep && !m->values)) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
        /* a block of handles at a time, while it is in L1: checked without a branch (an
         * invalid one is named by a second look), then mapped and, kept, placed */
        uint32_t *gen = m->generation, limit = (uint32_t)slots;
        for (uint32_t g = 0; g < doc->group_count; g++) {
            const kiln_entity *h = doc->groups[g].handles;
            pz_rows rows = keep ? pz_slots_rows(place, g) : (pz_rows){0};
            for (int64_t b = 0, n = doc->groups[g].count; b < n; b += MAP_BLOCK) {
                int64_t end = n - b < MAP_BLOCK ? n : b + MAP_BLOCK;
                if (!valid_block(h + b, end - b, limit)) return check_handles(world, doc);
                int64_t r = keep ? pz_slots_write_block(rows, h, b, end, gen) : map_block(h, b, end, gen);
                if (r < end) {
                    kiln_result bad = check_handles(world, doc);
                    return bad != KILN_OK ? bad : twice(world, h[r]);
                }
            }
        }
        return KILN_OK;
    }
    kiln_result bad = check_handles(world, doc);
    if (bad != KILN_OK) return bad;
    uint64_t cap = 16;
    while (cap < (uint64_t)doc->entity_count * 2) cap *= 2;
    m->mask = cap - 1;
    m->keys = pz_alloc(&doc->arena, sizeof(kiln_entity) * cap);
    m->values = pz_alloc(&doc->arena, sizeof(kiln_entity) * cap);
    if (!m->keys || !m->values) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
    for (uint32_t g = 0; g < doc->group_count; g++) {
        const pz_group *gr = &doc->groups[g];
        for (int64_t r = 0; r < gr->count; r++) {
            kiln_entity e = gr->handles[r];
            uint64_t i = slot_of(m, e);
            while (m->keys[i] != KILN_NULL_ENTITY && m->keys[i] != e) i = (i + 1) & m->mask;
            if (m->keys[i] == e) return twice(world, e);
            m->keys[i] = e;
        }
    }
    return KILN_OK;
}

/* Records the new handles of group gr (nothing to do when they are the saved ones). */
void pz_map_group(pz_handle_map *m, const pz_group *gr) {
    if (m->generation) {
        if (!m->values) return;
        for (int64_t i = 0; i < gr->count; i++) m->values[kiln_entity_index(gr->handles[i])] = gr->spawned[i];
        return;
    }
    for (int64_t r = 0; r < gr->count; r++) {
        kiln_entity old_e = gr->handles[r];
        uint64_t i = slot_of(m, old_e);
        while (m->keys[i] != old_e) i = (i + 1) & m->mask;
        m->values[i] = gr->spawned[r];
    }
}
