/* slots.c: a load into a world that never held an entity keeps the saved handles, so a save
 * loaded into a fresh world is the same world (same hash, same bytes when saved again): rows
 * are placed straight at the saved handles. Invariant: everything that can fail (archetypes,
 * slot pages, rows) is reserved first; records and rows written past the slot count and the
 * archetypes' counts are not the world's until pz_slots_place publishes them. */
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "entity.h"
#include "persist_internal.h"

bool pz_slots_can_keep(const kiln_world *world, const pz_doc *doc, uint64_t slots) {
    /* a save with few entities at huge indices would cost memory for nothing; the free list
     * (in the file, so paid for by its size) counts as entities */
    uint64_t held = (uint64_t)doc->entity_count + (doc->has_free ? doc->free_count : 0);
    return kl_slot_count(world) == 0 && world->free_head == KL_NONE && held > 0 && slots <= 2 * held + 4096;
}

static int by_index(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

kiln_result pz_slots_check_free(kiln_world *world, pz_doc *doc) {
    uint32_t n = doc->has_free ? doc->free_count : 0;
    if (n == 0) return KILN_OK;
    /* sorted indices: a repeat lies beside its twin, a saved slot is found by bisection */
    uint32_t *sorted = pz_alloc(&doc->arena, sizeof(uint32_t) * n);
    if (!sorted) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
    for (uint32_t k = 0; k < n; k++) sorted[k] = kiln_entity_index(doc->free[k]);
    qsort(sorted, n, sizeof *sorted, by_index);
    for (uint32_t k = 1; k < n; k++)
        if (sorted[k] == sorted[k - 1])
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_load: slot %u appears twice in the free list",
                           (unsigned)sorted[k]);
    for (uint32_t g = 0; g < doc->group_count; g++)
        for (int64_t r = 0; r < doc->groups[g].count; r++) {
            uint32_t i = kiln_entity_index(doc->groups[g].handles[r]);
            if (bsearch(&i, sorted, n, sizeof *sorted, by_index))
                return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                               "kiln_load: slot %u is on the free list and holds a saved entity", (unsigned)i);
        }
    return KILN_OK;
}

/* The archetype of a group's resolved components (created when missing), written to dest. */
static kiln_result group_archetype(kiln_world *world, const pz_doc *doc, const pz_group *gr,
                                   kiln_component *types, kl_archetype **dest) {
    int32_t m = 0;
    for (int32_t t = 0; t < gr->type_count; t++) m += doc->schemas[gr->types[t]].id != 0;
    if (m > KL_SPAWN_MAX) /* (before sorting them: a group of thousands would sort for long) */
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_load: component count %d out of range (0 to %d)",
                       (int)m, KL_SPAWN_MAX);
    m = 0;
    for (int32_t t = 0; t < gr->type_count; t++) {
        kiln_component id = doc->schemas[gr->types[t]].id;
        if (!id) continue;
        int32_t j = m++; /* insertion keeps them ascending (ids are distinct: names are) */
        while (j > 0 && types[j - 1] > id) types[j] = types[j - 1], j--;
        types[j] = id;
    }
    *dest = kl_archetype_ensure(world, types, m, "kiln_load"); /* its failure says why */
    if (*dest) return KILN_OK;
    return (uint32_t)world->archetype_count >= KL_ARCHETYPES_MAX ? KILN_ERR_LIMIT : KILN_ERR_OUT_OF_MEMORY;
}

kiln_result pz_slots_reserve(kiln_world *world, pz_doc *doc, uint64_t slot_count, pz_place *place) {
    kiln_component *types = pz_alloc(&doc->arena, sizeof(kiln_component) * ((size_t)doc->schema_count + 1));
    place->archs = pz_alloc(&doc->arena, sizeof(kl_archetype *) * ((size_t)doc->group_count + 1));
    place->first = pz_alloc(&doc->arena, sizeof(int32_t) * ((size_t)doc->group_count + 1));
    if (!types || !place->archs || !place->first)
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
    for (uint32_t g = 0; g < doc->group_count; g++) {
        if (doc->groups[g].count > INT32_MAX)
            return kl_fail(world, KILN_ERR_LIMIT, "kiln_load: group %u holds too many entities", (unsigned)g);
        kiln_result r = group_archetype(world, doc, &doc->groups[g], types, &place->archs[g]);
        if (r != KILN_OK) return r;
    }
    /* Rows per archetype (two groups may land in one when skipped components set them apart). */
    kl_archetype **archs = place->archs;
    int64_t *rows = pz_alloc(&doc->arena, sizeof(int64_t) * ((size_t)world->archetype_count + 1));
    if (!rows) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
    for (uint32_t g = 0; g < doc->group_count; g++) rows[archs[g]->id] += doc->groups[g].count;
    for (uint32_t g = 0; g < doc->group_count; g++) {
        int64_t need = rows[archs[g]->id];
        if (need > (int64_t)KL_ROWS_MAX - (int64_t)archs[g]->count)
            return kl_fail(world, KILN_ERR_LIMIT, "kiln_load: group %u holds too many entities", (unsigned)g);
        if (need && !kl_archetype_reserve(world, archs[g], need))
            return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_load: out of memory");
        rows[archs[g]->id] = 0;
    }
    for (uint32_t g = 0; g < doc->group_count; g++) {
        place->first[g] = archs[g]->count + (int32_t)rows[archs[g]->id];
        rows[archs[g]->id] += doc->groups[g].count;
    }
    kiln_result r = kl_entities_reserve(world, (int64_t)slot_count, "kiln_load");
    if (r != KILN_OK) return r;
    place->pages = atomic_load_explicit(&world->pages, memory_order_acquire);
    return KILN_OK;
}

void pz_slots_place(kiln_world *world, pz_doc *doc, uint64_t slot_count, const uint32_t *saved,
                    const pz_place *place) {
    uint32_t slots = (uint32_t)slot_count;
    /* The slots no saved entity holds become free (generation 1), lowest first (none when
     * every slot is saved: the saved handles are distinct); the saved ones are alive. */
    kl_record *const *pages = place->pages;
    world->free_head = KL_NONE;
    if (doc->has_free) {
        /* the saved free list in its order; the slots neither saved nor on it stay retired */
        for (uint32_t i = 0; i < slots && doc->entity_count < (int64_t)slots; i++)
            if (!saved[i]) kl_record_set_dead(&pages[i >> KL_PAGE_BITS][i & (KL_PAGE_SIZE - 1)],
                                              KILN_ENTITY_GENERATION_MAX, KL_NONE);
        for (uint32_t k = doc->free_count; k-- > 0;) {
            uint32_t i = kiln_entity_index(doc->free[k]);
            kl_record_set_dead(&pages[i >> KL_PAGE_BITS][i & (KL_PAGE_SIZE - 1)],
                               kiln_entity_generation(doc->free[k]), world->free_head);
            world->free_head = i;
        }
    }
    for (uint32_t i = !doc->has_free && doc->entity_count < (int64_t)slots ? slots : 0; i-- > 0;) {
        if (saved[i]) continue;
        kl_record_set_dead(&pages[i >> KL_PAGE_BITS][i & (KL_PAGE_SIZE - 1)], 1, world->free_head);
        world->free_head = i;
    }
    kiln_tick tick = world->tick;
    for (uint32_t g = 0; g < doc->group_count; g++) {
        pz_group *gr = &doc->groups[g];
        kl_archetype *arch = place->archs[g];
        int32_t first = place->first[g];
        int32_t n = (int32_t)gr->count;
        if (first + n > arch->count) arch->count = first + n;
        arch->structure_tick = tick;
        /* every column is written by the caller; the rows' ticks are stamped here */
        for (int32_t c = 0; c < arch->column_count; c++) {
            kl_column *col = &arch->columns[c];
            kl_fill_row_ticks(col->ticks, first, first + n, kl_row_tick_now(world));
            kl_column_touch(col, tick);
        }
        gr->spawned = gr->handles;
        world->alive += n;
    }
    world->structure_version++;
    atomic_store_explicit(&world->slot_count, slots, memory_order_release);
}
