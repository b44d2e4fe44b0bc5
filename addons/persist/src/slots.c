/* slots.c: a load into a world that never held an entity keeps the saved handles, so a save
 * loaded into a fresh world is the same world (same hash, same bytes when saved again).
 * Invariant: only runs right after the groups were spawned into fresh slots 0..n-1. */
#include "entity.h"
#include "persist_internal.h"

/* The highest saved slot index, or -1 when the handles are too sparse to keep. */
static int64_t max_index(const pz_doc *doc) {
    int64_t max = -1;
    for (uint32_t g = 0; g < doc->group_count; g++)
        for (int64_t i = 0; i < doc->groups[g].count; i++) {
            int64_t idx = kiln_entity_index(doc->groups[g].handles[i]);
            if (idx > max) max = idx;
        }
    /* a save with few entities at huge indices would cost memory for nothing */
    return max < 2 * doc->entity_count + 4096 ? max : -1;
}

bool pz_slots_can_keep(const kiln_world *world, const pz_doc *doc) {
    return kl_slot_count(world) == 0 && world->free_head == KL_NONE && doc->entity_count > 0 &&
           max_index(doc) >= 0;
}

kiln_result pz_slots_keep(kiln_world *world, pz_doc *doc) {
    uint32_t slots = (uint32_t)max_index(doc) + 1;
    uint32_t have = kl_slot_count(world);
    if (slots > have) {
        kiln_result r = kl_entities_reserve(world, (int64_t)(slots - have), "kiln_load");
        if (r != KILN_OK) return r;
    }
    /* Where each group's rows are, read before any record changes. */
    uint32_t *arch_of = pz_alloc(&doc->arena, sizeof(uint32_t) * ((size_t)doc->group_count + 1));
    uint32_t *first = pz_alloc(&doc->arena, sizeof(uint32_t) * ((size_t)doc->group_count + 1));
    if (!arch_of || !first) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
    for (uint32_t g = 0; g < doc->group_count; g++) {
        const kl_record *rec = kl_record_of(world, doc->groups[g].spawned[0]);
        arch_of[g] = kl_record_archetype(rec);
        first[g] = kl_record_row(rec);
    }
    for (uint32_t i = 0; i < slots; i++) {
        kl_record *rec = &world->pages[i >> KL_PAGE_BITS][i & (KL_PAGE_SIZE - 1)];
        kl_record_set_dead(rec, 1, KL_NONE);
    }
    for (uint32_t g = 0; g < doc->group_count; g++) {
        pz_group *gr = &doc->groups[g];
        kl_archetype *arch = world->archetypes[arch_of[g]];
        for (int64_t i = 0; i < gr->count; i++) {
            kiln_entity h = gr->handles[i];
            uint32_t row = first[g] + (uint32_t)i;
            kl_record *rec = kl_record_at(world, kiln_entity_index(h));
            kl_record_set_alive(rec, kiln_entity_generation(h), arch_of[g], row);
            arch->entities[row] = h;
            gr->spawned[i] = h;
        }
    }
    /* The slots no saved entity holds become free, lowest first. */
    world->free_head = KL_NONE;
    for (uint32_t i = slots; i-- > 0;) {
        kl_record *rec = kl_record_at(world, i);
        if (kl_record_alive(rec)) continue;
        kl_record_set_dead(rec, kl_record_generation(rec), world->free_head);
        world->free_head = i;
    }
    atomic_store_explicit(&world->slot_count, slots, memory_order_release);
    return KILN_OK;
}
