/* getter.c: prepared getters: a snapshot, per archetype, of where one component's values live,
 * read inline by kiln_getter_get. Invariant: a getter is valid while the world's structure
 * version is the one it was made at. */
#include <stddef.h>
#include <string.h>

#include "archetype.h"
#include "guard.h"

/* kiln.h restates the record layout and page size for the inline read: checked here. */
_Static_assert(sizeof(kl_record) == sizeof(uint64_t) && KL_PLACE_BITS == 43 && KL_ROW_BITS == 27,
               "kiln_getter_get reads a record as generation << 43 | archetype << 27 | row");
_Static_assert(KL_PAGE_BITS == 12, "kiln_getter_get (kiln.h) pages records 4096 at a time");
_Static_assert((KL_PLACE_RESERVED >> KL_ROW_BITS) == KL_ARCHETYPES_MAX &&
                   (KL_PLACE_DEAD >> KL_ROW_BITS) > KL_ARCHETYPES_MAX,
               "a slot that is not alive reads as an archetype beyond any count");

kiln_result kiln_getter_init(kiln_world *world, kiln_component component, kiln_getter *dest) {
    KILN_ASSERT(world != NULL && dest != NULL, "world and dest are required");
    memset(dest, 0, sizeof *dest);
    if (!kl_component_get(world, component))
        return kl_fail(world, KILN_ERR_UNKNOWN_COMPONENT,
                       "kiln_getter_init: component #%u is not registered", (unsigned)component);
    kl_guard_check(world, "kiln_getter_init", KL_READ, component, 0);
    int32_t n = world->archetype_count;
    kiln_getter_archetype *archs = kl_alloc(&world->alloc, sizeof *archs * (size_t)n);
    if (!archs)
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_getter_init: out of memory");
    for (int32_t a = 0; a < n; a++) {
        const kl_archetype *arch = world->archetypes[a];
        const kl_column *col = kl_archetype_column(arch, component);
        archs[a] = (kiln_getter_archetype){col ? col->data : NULL, col ? col->stride : 0};
    }
    dest->pages = (const uint64_t *const *)atomic_load_explicit(&world->pages, memory_order_acquire);
    dest->slot_count = kl_slot_count(world);
    dest->archetype_count = (uint32_t)n;
    dest->archetypes = archs;
    dest->world = world;
    dest->component = component;
    dest->version = world->structure_version;
    return KILN_OK;
}

void kiln_getter_fini(kiln_getter *getter) {
    KILN_ASSERT(getter != NULL, "getter is NULL");
    if (getter->world)
        kl_free(&getter->world->alloc, (void *)getter->archetypes,
                sizeof(kiln_getter_archetype) * getter->archetype_count);
    memset(getter, 0, sizeof *getter);
}

void kiln_getter_check(const kiln_getter *getter) {
    KILN_ASSERT(getter != NULL && getter->world != NULL, "getter is not initialised");
    KILN_ASSERT(getter->world->structure_version == getter->version,
                "kiln_getter used after a structural change of its world");
    (void)getter;
}
