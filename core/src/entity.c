/* entity.c: slot allocation with a free list threaded through dead records. Invariant: a
 * record is on the free list exactly when it is dead and its generation is not exhausted. */
#include "entity.h"

kiln_result kl_entities_reserve(kiln_world *world, int64_t n, const char *call) {
    /* Count free slots only when the fresh ones do not suffice (rare). */
    int64_t fresh_needed = n;
    if (world->free_head != KL_NONE) {
        uint32_t i = world->free_head;
        while (i != KL_NONE && fresh_needed > 0) {
            fresh_needed--;
            i = world->records[i].row;
        }
    }
    if (fresh_needed <= 0) return KILN_OK;
    int64_t need = (int64_t)world->slot_count + fresh_needed;
    if (need > (int64_t)UINT32_MAX)
        return kl_fail(world, KILN_ERR_LIMIT, "%s: no entity slots left (limit 2^32-1)", call);
    if (need > world->record_cap) {
        int64_t ncap = world->record_cap ? world->record_cap * 2 : 64;
        if (ncap < need) ncap = need;
        if (ncap > (int64_t)UINT32_MAX) ncap = UINT32_MAX;
        void *p = kl_realloc(&world->alloc, world->records,
                             sizeof(kl_record) * (size_t)world->record_cap,
                             kl_mul(sizeof(kl_record), (size_t)ncap));
        if (!p) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for entity slots", call);
        world->records = p;
        world->record_cap = ncap;
    }
    return KILN_OK;
}

kiln_entity kl_entity_take(kiln_world *world) {
    uint32_t index;
    kl_record *r;
    if (world->free_head != KL_NONE) {
        index = world->free_head;
        r = &world->records[index];
        world->free_head = r->row;
    } else {
        index = world->slot_count++;
        r = &world->records[index];
        r->generation = 1;
    }
    r->archetype = KL_RESERVED;
    r->row = KL_NONE;
    return kiln_entity_make(index, r->generation);
}

void kl_entity_release(kiln_world *world, kiln_entity entity) {
    uint32_t index = kiln_entity_index(entity);
    kl_record *r = &world->records[index];
    if (r->archetype != KL_RESERVED) world->alive--;
    r->archetype = KL_NONE;
    if (r->generation >= KILN_ENTITY_GENERATION_MAX) {
        /* Exhausted: retire the slot so no stale handle can ever match again. */
        r->generation = KILN_ENTITY_GENERATION_MAX;
        r->row = KL_NONE;
        return;
    }
    r->generation++;
    r->row = world->free_head;
    world->free_head = index;
}
