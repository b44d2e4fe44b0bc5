/* entity.c: slot allocation with a free list threaded through dead records, in pages that
 * never move. Invariant: a record is on the free list exactly when it is dead and its
 * generation is not exhausted; slots below slot_count always have a page. */
#include "entity.h"

#include <string.h>

/* A page table with its header; the entries follow it. */
typedef struct kl_page_table {
    struct kl_page_table *next;
    uint32_t cap;
} kl_page_table;

static kl_record **table_entries(kl_page_table *t) { return (kl_record **)(t + 1); }

/* Makes sure pages cover need slots, replacing the page table when it is full. */
static bool ensure_pages(kiln_world *world, int64_t need) {
    int64_t pages_needed = (need + KL_PAGE_SIZE - 1) >> KL_PAGE_BITS;
    if (pages_needed <= world->page_count) return true;
    if (pages_needed > world->page_cap) {
        int64_t ncap = world->page_cap ? (int64_t)world->page_cap * 2 : 16;
        while (ncap < pages_needed) ncap *= 2;
        kl_page_table *t = kl_alloc(&world->alloc, sizeof *t + sizeof(kl_record *) * (size_t)ncap);
        if (!t) return false;
        t->cap = (uint32_t)ncap;
        t->next = world->tables;
        kl_record **entries = table_entries(t);
        memset(entries, 0, sizeof(kl_record *) * (size_t)ncap);
        if (world->page_count)
            memcpy(entries, world->pages, sizeof(kl_record *) * world->page_count);
        /* The old table stays allocated: a reader may still hold it. */
        world->tables = t;
        world->page_cap = (uint32_t)ncap;
        atomic_store_explicit(&world->pages, entries, memory_order_release);
    }
    kl_record **pages = world->pages;
    while (world->page_count < pages_needed) {
        kl_record *page = kl_alloc(&world->alloc, sizeof(kl_record) * KL_PAGE_SIZE);
        if (!page) return false; /* the pages made so far stay: they only add capacity */
        pages[world->page_count++] = page;
    }
    return true;
}

kiln_result kl_entities_reserve_slow(kiln_world *world, int64_t n, const char *call) {
    /* Walk the free list only as far as needed (one step for a single spawn). */
    int64_t fresh_needed = n;
    for (uint32_t i = world->free_head; i != KL_NONE && fresh_needed > 0;
         i = kl_record_next(kl_record_at(world, i)))
        fresh_needed--;
    if (fresh_needed <= 0) return KILN_OK;
    int64_t need = (int64_t)kl_slot_count(world) + fresh_needed;
    if (need > (int64_t)UINT32_MAX)
        return kl_fail(world, KILN_ERR_LIMIT, "%s: no entity slots left (limit 2^32-1)", call);
    if (!ensure_pages(world, need))
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for entity slots", call);
    return KILN_OK;
}

void kl_entity_release(kiln_world *world, kiln_entity entity) {
    kl_record *r = kl_record_at(world, kiln_entity_index(entity));
    if (kl_record_alive(r)) world->alive--;
    kl_entity_retire(world, r, entity);
}

void kl_entity_untake(kiln_world *world, kiln_entity entity) {
    uint32_t index = kiln_entity_index(entity);
    kl_record *r = kl_record_at(world, index);
    uint32_t generation = kiln_entity_generation(entity);
    if (generation == 1 && index + 1 == kl_slot_count(world)) {
        /* A fresh slot (a released one has a later generation): the slot count goes back. */
        kl_record_set_dead(r, generation, KL_NONE);
        atomic_store_explicit(&world->slot_count, index, memory_order_release);
        return;
    }
    kl_record_set_dead(r, generation, world->free_head); /* no generation spent */
    world->free_head = index;
}

void kl_entities_free(kiln_world *world) {
    for (uint32_t p = 0; p < world->page_count; p++)
        kl_free(&world->alloc, world->pages[p], sizeof(kl_record) * KL_PAGE_SIZE);
    for (kl_page_table *t = world->tables, *next; t; t = next) {
        next = t->next;
        kl_free(&world->alloc, t, sizeof *t + sizeof(kl_record *) * t->cap);
    }
    world->tables = NULL;
    world->pages = NULL;
    world->page_count = world->page_cap = 0;
}
