/* entity.h: the entity slot table: handing out, validating and retiring handles. A slot's
 * generation only grows; a slot whose generation is exhausted is never handed out again. */
#ifndef KILN_ENTITY_H
#define KILN_ENTITY_H

#include "world.h"

/* Makes sure n more slots can be taken without allocating; false when out of memory or the
 * 2^32 slot limit is reached (the world error is set, naming call). */
KL_HIDDEN kiln_result kl_entities_reserve_slow(kiln_world *world, int64_t n, const char *call);

static inline kiln_result kl_entities_reserve(kiln_world *world, int64_t n, const char *call) {
    /* one slot: a free one, or room left in the last page */
    if (n == 1 && (world->free_head != KL_NONE ||
                   (int64_t)kl_slot_count(world) < (int64_t)world->page_count * KL_PAGE_SIZE))
        return KILN_OK;
    return kl_entities_reserve_slow(world, n, call);
}

/* Takes a slot (room must be reserved) and returns its handle. The slot is reserved (not
 * alive) until the caller points its record at a row and counts it in world->alive. Inline:
 * the spawn of one entity takes one. */
static inline kiln_entity kl_entity_take(kiln_world *world) {
    uint32_t index, generation = 1; /* a fresh slot's first generation */
    kl_record *r;
    if (world->free_head != KL_NONE) {
        index = world->free_head;
        r = kl_record_at(world, index);
        world->free_head = kl_record_next(r);
        generation = kl_record_generation(r);
        kl_record_set_reserved(r, generation);
    } else {
        index = kl_slot_count(world);
        r = &world->pages[index >> KL_PAGE_BITS][index & (KL_PAGE_SIZE - 1)];
        kl_record_set_reserved(r, generation);
        atomic_store_explicit(&world->slot_count, index + 1, memory_order_release);
    }
    return kiln_entity_make(index, generation);
}

/* Releases the slot of a live or reserved entity: bumps its generation (retiring it when exhausted). */
KL_HIDDEN void kl_entity_release(kiln_world *world, kiln_entity entity);

/* Bumps the generation of entity's slot r (retiring the slot when it is exhausted) and frees
 * it, without counting: kl_entity_release for a caller that holds the record. */
static inline void kl_entity_retire(kiln_world *world, kl_record *r, kiln_entity entity) {
    uint32_t generation = kiln_entity_generation(entity);
    if (KL_UNLIKELY(generation >= KILN_ENTITY_GENERATION_MAX)) {
        /* Exhausted: retire the slot so no stale handle can ever match again. */
        kl_record_set_dead(r, KILN_ENTITY_GENERATION_MAX, KL_NONE);
        return;
    }
    kl_record_set_dead(r, generation + 1, world->free_head);
    world->free_head = kiln_entity_index(entity);
}

/* Undoes the latest kl_entity_take of entity exactly (slot count, free list, generation), for
 * a call that fails after taking it: the world is left as it was. Undo several takes latest
 * first. */
KL_HIDDEN void kl_entity_untake(kiln_world *world, kiln_entity entity);

/* Frees every record page and page table (at world destroy). */
KL_HIDDEN void kl_entities_free(kiln_world *world);

#endif
