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

/* The bytes of a getter's block for count archetypes: a data pointer and a stride each. */
static size_t block_size(uint64_t count) {
    return (sizeof(const uint8_t *) + sizeof(size_t)) * (size_t)count;
}

kiln_result kiln_getter_init(kiln_world *world, kiln_component component, kiln_getter *dest) {
    KILN_ASSERT(world != NULL && dest != NULL, "world and dest are required");
    memset(dest, 0, sizeof *dest);
    if (!kl_component_get(world, component))
        return kl_fail(world, KILN_ERR_UNKNOWN_COMPONENT,
                       "kiln_getter_init: component #%u is not registered", (unsigned)component);
    kl_guard_check(world, "kiln_getter_init", KL_READ, component, 0);
    int32_t n = world->archetype_count;
    /* two arrays in one block, so that an archetype's data and stride load side by side
     * without the multiply an array of pairs would need for its index */
    const uint8_t **data = kl_alloc(&world->alloc, block_size((uint64_t)n));
    if (!data)
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_getter_init: out of memory");
    size_t *strides = (size_t *)(data + n);
    for (int32_t a = 0; a < n; a++) {
        const kl_column *col = kl_archetype_column(world->archetypes[a], component);
        data[a] = col ? col->data : NULL;
        strides[a] = col ? col->stride : 0;
    }
    dest->pages = (const uint64_t *const *)atomic_load_explicit(&world->pages, memory_order_acquire);
    dest->slot_count = kl_slot_count(world);
    dest->archetype_count = (uint64_t)n;
    dest->data = data;
    dest->strides = strides;
    dest->world = world;
    dest->component = component;
    dest->version = world->structure_version;
    /* the block is the getter's from now on, freed through a copy of the hook: a getter
     * finished after its world's destroy (a holder's teardown order) reads no freed world */
    atomic_fetch_sub_explicit(&world->alloc.bytes, (int64_t)block_size((uint64_t)n), memory_order_relaxed);
    dest->alloc = world->alloc.fn;
    dest->alloc_ud = world->alloc.ud;
    return KILN_OK;
}

void kiln_getter_fini(kiln_getter *getter) {
    if (getter == NULL) return;
    if (getter->alloc && getter->data)
        getter->alloc(getter->alloc_ud, (void *)getter->data, block_size(getter->archetype_count), 0);
    memset(getter, 0, sizeof *getter);
}

void kiln_getter_check(const kiln_getter *getter) {
    KILN_ASSERT(getter != NULL && getter->world != NULL, "getter is not initialised");
    KILN_ASSERT(getter->world->structure_version == getter->version,
                "kiln_getter used after a structural change of its world");
    (void)getter;
}

/* Handles whose records are requested before any of them is read (as kiln_get_many): enough
 * to keep the memory system busy, few enough that the records are still cached when read. */
#define GETTER_AHEAD 32

/* kiln_getter_get_many through a stale getter: every dest NULL, the world error. Out of line: the
 * check costs a 256-handle call about 20 instructions of its 9,900 (callgrind), none a handle. */
__attribute__((noinline, cold)) static int32_t refuse_stale(const kiln_getter *getter, int32_t count,
                                                            const void **dest) {
    for (int32_t i = 0; i < count; i++) dest[i] = NULL;
    kl_fail(getter->world, KILN_ERR_INVALID_ARGUMENT, "kiln_getter_get_many: the getter is stale (its world "
            "changed structure since kiln_getter_init); every dest is NULL");
    return 0;
}

int32_t kiln_getter_get_many(const kiln_getter *getter, const kiln_entity *entities,
                             int32_t count, const void **dest) {
    KILN_ASSERT(count >= 0, "count is negative");
    KILN_ASSERT(count <= 0 || (entities != NULL && dest != NULL),
                "entities and dest are required when count > 0");
    kiln_getter_check(getter);
    /* stale: its pages and columns may be freed; release builds refuse too, once a call (not a handle) */
    if (KL_UNLIKELY(getter->world->structure_version != getter->version)) return refuse_stale(getter, count, dest);
    /* a copy the loop keeps in registers: the stores to dest may alias the caller's getter */
    const kiln_getter g = *getter;
    int32_t found = 0;
    /* ptrdiff_t indexes: with int32_t ones GCC walks entities and dest by two pointers since the
     * record read is atomic, an instruction more a handle (callgrind) */
    for (int32_t start = 0; start < count; start += GETTER_AHEAD) {
        int32_t end = count - start > GETTER_AHEAD ? start + GETTER_AHEAD : count;
        for (ptrdiff_t i = start; i < end; i++) {
            uint32_t index = (uint32_t)entities[i];
            if (index < g.slot_count)
                __builtin_prefetch(&g.pages[index >> KL_PAGE_BITS][index & (KL_PAGE_SIZE - 1)]);
        }
        for (ptrdiff_t i = start; i < end; i++) {
            const void *value = kiln_getter_get(&g, entities[i]);
            if (value) {
                __builtin_prefetch(value); /* the caller reads it next */
                found++;
            }
            dest[i] = value;
        }
    }
    return found;
}
