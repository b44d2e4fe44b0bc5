/* archetype.c: archetype tables and the graph between them. Invariant: rows [0, count) of
 * every column hold live values of the entities in entities[0, count), and each of those
 * entities' records points back at its row. */
#include "archetype.h"

#include <string.h>

#include "component.h"
#include "query.h"

/* The add and remove paths were measured with 56-byte columns (64 cost 10 instructions a
 * pair, 2026-12-05): a field added to kl_column must fit its padding. */
_Static_assert(sizeof(void *) != 8 || sizeof(kl_column) == 56, "kl_column is 56 bytes on 64-bit targets");

int32_t kl_archetype_type_index(const kl_archetype *arch, kiln_component component) {
    const kiln_component *t = arch->types;
    int32_t lo = 0, hi = arch->type_count;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (t[mid] < component) lo = mid + 1;
        else hi = mid;
    }
    return (lo < arch->type_count && t[lo] == component) ? lo : -1;
}

int32_t kl_archetype_slot_search(const kl_archetype *arch, kiln_component component) {
    int32_t t = kl_archetype_type_index(arch, component);
    if (t < 0) return KL_SLOT_ABSENT;
    return arch->column_of[t] >= 0 ? arch->column_of[t] : KL_SLOT_TAG;
}

/* A fresh array of count edge plans, none made yet; NULL when out of memory. */
static kl_edge *new_edges(kl_allocator *al, uint32_t count) {
    kl_edge *edges = kl_alloc(al, sizeof(kl_edge) * count);
    for (uint32_t c = 0; edges && c < count; c++) edges[c] = (kl_edge){NULL, NULL, 0};
    return edges;
}

/* The most ids arch's direct slots may cover (see KL_SLOTS_MIN). */
static uint32_t slots_most(const kl_archetype *arch) {
    if ((uint32_t)arch->type_count >= KL_SLOTS_MAX / KL_SLOTS_PER_TYPE) return KL_SLOTS_MAX;
    uint32_t most = (uint32_t)arch->type_count * KL_SLOTS_PER_TYPE;
    return most > KL_SLOTS_MIN ? most : KL_SLOTS_MIN;
}

/* Grows arch's direct slots (and their edge plans, once it has any) to a window over ids
 * [lo, hi) and those it covers already: a power of two wide (8 at least, slots_most(arch) at
 * most), from the window's start when it grows up, else ending where it did (reaching down
 * towards 0); new slots are filled from the type list. False when that passes
 * slots_most(arch) or memory runs out (arch unchanged). */
static bool cover_slots(kl_allocator *al, kl_archetype *arch, uint32_t lo, uint32_t hi) {
    uint32_t base = arch->slot_base, count = arch->slot_count;
    if (count) {
        if (lo >= base && hi - base <= count) return true;
        if (base < lo) lo = base;
        if (base + count > hi) hi = base + count;
    }
    uint32_t most = slots_most(arch), cap = 8;
    if (hi - lo > most) return false;
    while (cap < hi - lo) cap *= 2;
    if (cap > most) cap = most;
    uint32_t nbase = count && lo == base ? base : hi > cap ? hi - cap : 0;
    uint32_t shift = count ? base - nbase : 0; /* where the old slots land */
    kl_slot *slots = kl_alloc(al, sizeof(kl_slot) * cap);
    kl_edge *edges = NULL;
    if (!slots || (arch->edges_direct && (edges = new_edges(al, cap)) == NULL)) {
        kl_free(al, slots, sizeof(kl_slot) * cap);
        return false;
    }
    for (uint32_t c = 0; c < cap; c++) {
        if (c - shift < count) {
            slots[c] = arch->slots[c - shift];
        } else {
            slots[c].column = kl_archetype_slot_search(arch, nbase + c);
            slots[c].edge = 0;
        }
    }
    if (edges) {
        memcpy(edges + shift, arch->edges_direct, sizeof(kl_edge) * count);
        kl_free(al, arch->edges_direct, sizeof(kl_edge) * count);
        arch->edges_direct = edges;
    }
    kl_free(al, arch->slots, sizeof(kl_slot) * count);
    arch->slots = slots;
    arch->slot_base = nbase;
    arch->slot_count = cap;
    return true;
}

static bool same_types(const kl_archetype *a, const kiln_component *types, int32_t count) {
    return a->type_count == count && memcmp(a->types, types, sizeof(kiln_component) * (size_t)count) == 0;
}

static size_t archetype_block_size(int32_t type_count, int32_t column_count) {
    return sizeof(kl_archetype) + sizeof(kl_column) * (size_t)column_count +
           sizeof(kiln_component) * (size_t)type_count + sizeof(int32_t) * (size_t)type_count;
}

static kl_archetype *lookup(const kiln_world *world, const kiln_component *types, int32_t count,
                            uint32_t hash) {
    uint32_t cursor = 0, id1;
    while ((id1 = kl_map_next(&world->archetype_index, hash, &cursor)) != 0) {
        kl_archetype *a = world->archetypes[id1 - 1];
        if (same_types(a, types, count)) return a;
    }
    return NULL;
}

kl_archetype *kl_archetype_find(const kiln_world *world, const kiln_component *types, int32_t count) {
    return lookup(world, types, count, kl_hash_u32s(types, count));
}

kl_archetype *kl_archetype_ensure(kiln_world *world, const kiln_component *types, int32_t count,
                                  const char *call) {
    uint32_t hash = kl_hash_u32s(types, count);
    kl_archetype *found = lookup(world, types, count, hash);
    if (found) return found;

    if ((uint32_t)world->archetype_count >= KL_ARCHETYPES_MAX) {
        kl_fail(world, KILN_ERR_LIMIT, "%s: too many archetypes (limit %u)", call,
                (unsigned)KL_ARCHETYPES_MAX);
        return NULL;
    }
    /* Past it, what holds an entity's components in one array (a save, a load, a clone) would
     * refuse it or overrun: an entity then could be made, but not saved and loaded back. */
    if (count > KL_TYPES_MAX) {
        kl_fail(world, KILN_ERR_LIMIT, "%s: an entity holds at most %d components", call, KL_TYPES_MAX);
        return NULL;
    }
    int32_t columns = 0;
    for (int32_t i = 0; i < count; i++)
        if (kl_component_get(world, types[i])->size > 0) columns++;

    /* Everything that can fail is reserved first, so failure leaves no trace. */
    size_t block = archetype_block_size(count, columns);
    kl_archetype *a = NULL;
    if (!kl_grow(&world->alloc, (void **)&world->archetypes, &world->archetype_cap,
                 world->archetype_count + 1, sizeof(kl_archetype *), 16) ||
        !kl_map_reserve(&world->alloc, &world->archetype_index, 1) ||
        !kl_queries_reserve(world) || (a = kl_alloc(&world->alloc, block)) == NULL) {
        kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory creating an archetype", call);
        return NULL;
    }
    memset(a, 0, block);
    a->column_count = columns;
    a->type_count = count;
    a->columns = (kl_column *)(a + 1);
    a->types = (kiln_component *)(a->columns + columns);
    a->column_of = (int32_t *)(a->types + count);
    if (count) memcpy(a->types, types, sizeof(kiln_component) * (size_t)count);
    for (int32_t i = 0, c = 0; i < count; i++)
        a->column_of[i] = kl_component_get(world, types[i])->size > 0 ? c++ : -1;
    /* direct slots for the types it holds (so its remove edges never hash): all of them when
     * their ids lie close enough, else the lowest that do */
    uint32_t lo = count ? types[0] : 0, hi = lo;
    for (int32_t i = 0; i < count && types[i] - lo < slots_most(a); i++) hi = types[i] + 1;
    if (hi > lo && !cover_slots(&world->alloc, a, lo, hi)) {
        kl_free(&world->alloc, a, block);
        kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory creating an archetype", call);
        return NULL;
    }
    a->id = (uint32_t)world->archetype_count;
    a->hash = hash;
    int32_t c = 0;
    for (int32_t i = 0; i < count; i++) {
        const kl_component *comp = kl_component_get(world, types[i]);
        if (comp->size == 0) continue;
        a->columns[c].component = comp;
        a->columns[c].stride = comp->stride;
        a->columns[c].id = comp->id;
        a->columns[c].plain = !comp->destroy && !comp->move;
        if (comp->destroy) a->has_destroy = true;
        if (!a->columns[c].plain) a->has_hooks = true;
        if (comp->check) a->has_check = true;
        atomic_init(&a->columns[c].latest, 0);
        atomic_init(&a->columns[c].in_place, 0);
        a->row_bytes += (uint64_t)comp->stride + sizeof(kiln_row_tick);
        c++;
    }
    a->eight = columns > 0 && !a->has_hooks;
    for (int32_t i = 0; i < columns; i++) a->eight &= a->columns[i].stride == 8;
    a->row_bytes += sizeof(kiln_entity) + sizeof(kl_record);
    world->archetypes[world->archetype_count++] = a;
    kl_map_put(&world->alloc, &world->archetype_index, hash, a->id + 1);
    kl_queries_match(world, a);
    return a;
}

bool kiln_archetype_exists(const kiln_world *world, const kiln_component *types, int32_t count) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (count < 0 || (count > 0 && types == NULL)) return false;
    for (int32_t i = 1; i < count; i++)
        if (types[i] <= types[i - 1]) return false; /* no archetype holds that list */
    return lookup(world, types, count, kl_hash_u32s(types, count)) != NULL;
}

/* Builds the sorted type list of arch with component added or removed into buf. */
static int32_t neighbour_types(const kl_archetype *arch, kiln_component component, bool add,
                               kiln_component *buf) {
    int32_t n = 0;
    bool placed = !add;
    for (int32_t i = 0; i < arch->type_count; i++) {
        kiln_component t = arch->types[i];
        if (!placed && component < t) {
            buf[n++] = component;
            placed = true;
        }
        if (!add && t == component) continue;
        buf[n++] = t;
    }
    if (!placed) buf[n++] = component;
    return n;
}

/* The move plan from arch to its neighbour dst along component. */
static kl_edge plan_edge(const kiln_world *world, const kl_archetype *arch,
                         kiln_component component, kl_archetype *dst) {
    bool add = kl_archetype_slot(arch, component) == KL_SLOT_ABSENT;
    kl_edge edge = {dst, add ? kl_archetype_column(dst, component)
                             : kl_archetype_column(arch, component),
                    add ? KL_EDGE_ADD : KL_EDGE_REMOVE};
    const kl_component *c = kl_component_get(world, component);
    if (!arch->has_hooks && !dst->has_hooks && !(add && c->check) && c->size == c->stride) {
        edge.flags |= KL_EDGE_PLAIN;
        /* the shared columns: those of the archetype without the component */
        bool eight = true;
        const kl_archetype *fewer = add ? arch : dst;
        for (int32_t i = 0; i < fewer->column_count; i++) eight &= fewer->columns[i].stride == 8;
        if (eight) edge.flags |= KL_EDGE_EIGHT;
    }
    return edge;
}

/* Remembers that arch's neighbour along component is dst (and dst's is arch): in the
 * direct slots when its window covers the id or may grow to, else in the edge map. Caching is an optimisation: when it
 * cannot be stored, the next move searches again. */
static void cache_edge(kiln_world *world, kl_archetype *arch, kiln_component component,
                       kl_archetype *dst) {
    if (cover_slots(&world->alloc, arch, component, component + 1)) {
        uint32_t i = component - arch->slot_base;
        arch->slots[i].edge = dst->id + 1;
        /* the plans beside the slots are made with the first edge (the array may fail alone:
         * moves then take the general path) */
        if (!arch->edges_direct) arch->edges_direct = new_edges(&world->alloc, arch->slot_count);
        if (arch->edges_direct) arch->edges_direct[i] = plan_edge(world, arch, component, dst);
    }
    else if (kl_map_get(&arch->edges, component) == 0)
        kl_map_put(&world->alloc, &arch->edges, component, dst->id + 1);
}

kl_archetype *kl_archetype_traverse(kiln_world *world, kl_archetype *arch,
                                    kiln_component component, const char *call) {
    uint32_t i = component - arch->slot_base;
    uint32_t id1 = i < arch->slot_count ? arch->slots[i].edge : kl_map_get(&arch->edges, component);
    if (id1) return world->archetypes[id1 - 1];

    bool add = !kl_archetype_has(arch, component);
    kiln_component small[32];
    kiln_component *buf = small;
    size_t bytes = sizeof(kiln_component) * (size_t)(arch->type_count + 1);
    if (arch->type_count + 1 > 32) {
        buf = kl_alloc(&world->alloc, bytes);
        if (!buf) {
            kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
            return NULL;
        }
    }
    int32_t n = neighbour_types(arch, component, add, buf);
    kl_archetype *dst = kl_archetype_ensure(world, buf, n, call);
    if (buf != small) kl_free(&world->alloc, buf, bytes);
    if (dst) {
        cache_edge(world, arch, component, dst);
        cache_edge(world, dst, component, arch);
    }
    return dst;
}

/* Relocates count values from src to dst (distinct blocks) through the move hook, or bytewise. */
static void relocate(const kl_component *c, void *dst, void *src, int32_t count) {
    if (count <= 0) return;
    if (c->move) c->move(dst, src, count, c->hook_ctx);
    else if (count == 1) kl_copy_value(dst, src, c->stride);
    else memcpy(dst, src, (size_t)c->stride * (size_t)count);
}

/* Rows worth keeping however few an archetype holds: small rows keep this many bytes of room,
 * rows larger than it none once the archetype is empty. (The fuzz build sets 0, and with
 * KL_TRIM_STRESS every schedule run trims: the fuzzer meets trims all the time.) */
#ifndef KL_TRIM_KEEP_BYTES
#define KL_TRIM_KEEP_BYTES 4096
#endif

static int32_t array_cap(const kl_archetype *arch, int32_t k);

/* The count below which a trim shrinks arch: a quarter of its largest array (an empty
 * archetype at the least), unless that is within what a trim keeps anyway. The largest, not
 * the capacity: an array whose shrink the allocator refused is tried again. */
static int32_t trim_threshold(const kl_archetype *arch) {
    int32_t most = 0;
    for (int32_t k = 0; k < 2 * arch->column_count + 1; k++)
        if (array_cap(arch, k) > most) most = array_cap(arch, k);
    if (most <= (int32_t)(KL_TRIM_KEEP_BYTES / arch->row_bytes)) return 0;
    return most / 4 > 1 ? most / 4 : 1;
}

bool kl_archetype_reserve(kiln_world *world, kl_archetype *arch, int64_t rows) {
    return kl_archetype_reserve_rebase(world, arch, rows, NULL, 0);
}

/* The bytes of a column block holding cap rows (15 more, to align its data to 16); SIZE_MAX,
 * which kl_alloc refuses, when that does not fit a size_t (only on 32-bit targets). */
static size_t data_bytes(const kl_column *col, int32_t cap) {
    if (cap == 0) return 0;
    size_t bytes = kl_mul(col->stride, (size_t)cap);
    return bytes > SIZE_MAX - 15 ? SIZE_MAX : bytes + 15;
}

static uint8_t *aligned16(void *block) {
    return (uint8_t *)(((uintptr_t)block + 15) & ~(uintptr_t)15);
}

/* The block col's values lie in (NULL: none). */
static void *col_block(const kl_column *col) {
    return col->data ? col->data - col->shift : NULL;
}

/* Makes block (NULL: none) col's, its values at the first 16-byte boundary in it. */
static void set_block(kl_column *col, void *block) {
    col->data = aligned16(block);
    col->shift = (uint8_t)(col->data - (uint8_t *)block);
}

/* Grows col's values to ncap rows. Without a move hook the block is resized in place by the
 * allocator (the C library moves a large block by remapping its pages, copying nothing), and
 * the rows slide when the new block's alignment differs; with one, they move through the hook
 * into a new block. On failure nothing of col changed. */
static bool grow_data(kl_allocator *al, kl_column *col, int32_t count, int32_t ncap) {
    size_t osize = data_bytes(col, col->data_cap), nsize = data_bytes(col, ncap);
    if (col->component->move) {
        void *block = kl_alloc(al, nsize);
        if (!block) return false;
        relocate(col->component, aligned16(block), col->data, count);
        kl_free(al, col_block(col), osize);
        set_block(col, block);
    } else {
        size_t at = col->shift;
        void *block = kl_realloc(al, col_block(col), osize, nsize);
        if (!block) return false;
        size_t now = (size_t)(aligned16(block) - (uint8_t *)block);
        if (now != at && count > 0)
            memmove((uint8_t *)block + now, (uint8_t *)block + at, (size_t)col->stride * (size_t)count);
        set_block(col, block);
    }
    col->data_cap = ncap;
    return true;
}

/* The rows array k of an archetype holds. Its growable arrays are numbered for
 * kl_archetype_reserve_rebase: 2i is column i's ticks, 2i + 1 its data, 2 * column_count
 * the entities. */
static int32_t array_cap(const kl_archetype *arch, int32_t k) {
    if (k == 2 * arch->column_count) return arch->entity_cap;
    return k & 1 ? arch->columns[k >> 1].data_cap : arch->columns[k >> 1].tick_cap;
}

/* Grows array k of arch (holding fewer) to ncap rows; pointers into a column's data
 * (values a caller read from this archetype) follow their bytes. False, the array as it was,
 * when memory runs out. */
static bool grow_array(kiln_world *world, kl_archetype *arch, int32_t k, int64_t ncap,
                       void **ptrs, int32_t ptr_count) {
    kl_allocator *al = &world->alloc;
    if (k == 2 * arch->column_count) {
        kiln_entity *entities = kl_realloc(al, arch->entities,
                                           sizeof(kiln_entity) * (size_t)arch->entity_cap,
                                           kl_mul(sizeof(kiln_entity), (size_t)ncap));
        if (!entities) return false;
        arch->entities = entities;
        /* the archetype's capacity moves once all arrays hold ncap (its caller) */
        arch->entity_cap = (int32_t)ncap;
        return true;
    }
    kl_column *col = &arch->columns[k >> 1];
    if (!(k & 1)) {
        void *ticks = kl_realloc(al, col->ticks, sizeof(kiln_row_tick) * (size_t)col->tick_cap,
                                 kl_mul(sizeof(kiln_row_tick), (size_t)ncap));
        if (!ticks) return false;
        col->ticks = ticks;
        col->tick_cap = (int32_t)ncap;
        return true;
    }
    /* pointers into the column are kept as offsets while the block moves */
    uint64_t mine[4] = {0};
    KILN_ASSERT(ptr_count <= 256, "kl_archetype_reserve_rebase: at most 256 pointers");
    size_t used = (size_t)col->stride * (size_t)arch->count;
    for (int32_t i = 0; i < ptr_count; i++) {
        uint8_t *p = ptrs[i];
        if (p && col->data && p >= col->data && p < col->data + used) {
            ptrs[i] = (void *)(uintptr_t)(p - col->data);
            mine[i >> 6] |= 1ull << (i & 63);
        }
    }
    bool ok = grow_data(al, col, arch->count, (int32_t)ncap);
    for (int32_t i = 0; i < ptr_count; i++)
        if (mine[i >> 6] >> (i & 63) & 1) ptrs[i] = col->data + (uintptr_t)ptrs[i];
    world->structure_version++; /* the column may have moved: getters made before are stale */
    return ok;
}

bool kl_archetype_reserve_rebase(kiln_world *world, kl_archetype *arch, int64_t rows,
                                 void **ptrs, int32_t ptr_count) {
    int64_t need = (int64_t)arch->count + rows;
    if (need <= arch->capacity) return true;
    if (need > KL_ROWS_MAX) return false;
    int64_t ncap = arch->capacity ? (int64_t)arch->capacity * 2 : 8;
    if (ncap < need) ncap = need;
    if (ncap > KL_ROWS_MAX) ncap = KL_ROWS_MAX;

    /* Each array grows on its own and keeps its own capacity, so a failure part way leaves
     * every array whole; the archetype's capacity (what all of them hold) moves at the end.
     * The order alternates between growths, which saves copying: the array grown last is
     * most likely the heap's last block, which the C library extends where it lies, so it
     * grows first the next time, and each array after it can extend into the space the
     * array grown before it left (on a warm heap, a million one-by-one spawns of two 12-byte
     * values copy 22 MB instead of 36). It depends on the archetype's history only, not on
     * addresses, so equal worlds make equal allocations, failures included. */
    int32_t arrays = 2 * arch->column_count + 1;
    for (int32_t i = 0; i < arrays; i++) {
        int32_t k = arch->grow_down ? arrays - 1 - i : i;
        if (array_cap(arch, k) < ncap && !grow_array(world, arch, k, ncap, ptrs, ptr_count))
            return false;
    }
    arch->grow_down = !arch->grow_down;
    arch->capacity = (int32_t)ncap;
    arch->trim_below = trim_threshold(arch);
    world->structure_version++;
    return true;
}

/* kl_shrink for the archetype's 32-bit capacities. */
static bool shrink_block(kl_allocator *al, void **block, int32_t *cap, size_t size, int32_t ncap) {
    int64_t cap64 = *cap;
    if (!kl_shrink(al, block, &cap64, ncap, size)) return false;
    *cap = (int32_t)cap64;
    return true;
}

/* Shrinks array k of arch to ncap rows (at least its count; 0 frees it). False, the array as
 * it was, when the allocator refuses. */
static bool shrink_array(kiln_world *world, kl_archetype *arch, int32_t k, int32_t ncap) {
    kl_allocator *al = &world->alloc;
    if (k == 2 * arch->column_count)
        return shrink_block(al, (void **)&arch->entities, &arch->entity_cap, sizeof(kiln_entity), ncap);
    kl_column *col = &arch->columns[k >> 1];
    if (!(k & 1)) return shrink_block(al, (void **)&col->ticks, &col->tick_cap, sizeof(kiln_row_tick), ncap);
    if (ncap == 0) {
        kl_free(al, col_block(col), data_bytes(col, col->data_cap));
        set_block(col, NULL);
        col->data_cap = 0;
        return true;
    }
    return grow_data(al, col, arch->count, ncap); /* moves the rows into a smaller block */
}

void kl_archetype_trim(kiln_world *world, kl_archetype *arch) {
    int64_t keep = (int64_t)arch->count * 2, floor = KL_TRIM_KEEP_BYTES / arch->row_bytes;
    if (keep < floor) keep = floor;
    int32_t arrays = 2 * arch->column_count + 1, least = INT32_MAX;
    bool shrunk = false;
    for (int32_t k = 0; k < arrays; k++) {
        if (array_cap(arch, k) > keep) shrunk |= shrink_array(world, arch, k, (int32_t)keep);
        if (array_cap(arch, k) < least) least = array_cap(arch, k);
    }
    arch->capacity = least; /* every array holds it, the refused ones more */
    if (shrunk) {
        /* its columns may have moved: getters made before are stale, and so is whatever was
         * built from its rows' addresses since its last structural change (propagation's
         * schedule), which its structure tick tells */
        world->structure_version++;
        arch->structure_tick = world->tick;
    }
    arch->trim_below = trim_threshold(arch);
}

void kl_archetype_destroy_row(kl_archetype *arch, int32_t row) {
    if (!arch->has_destroy) return;
    for (int32_t i = 0; i < arch->column_count; i++) {
        kl_column *col = &arch->columns[i];
        const kl_component *c = col->component;
        if (c->destroy) c->destroy(col->data + (size_t)row * col->stride, 1, c->hook_ctx);
    }
}

void kl_archetype_remove_row(kiln_world *world, kl_archetype *arch, int32_t row) {
    int32_t last = arch->count - 1;
    if (row != last) {
        for (int32_t i = 0; i < arch->column_count; i++) {
            kl_column *col = &arch->columns[i];
            uint8_t *to = col->data + (size_t)row * col->stride;
            uint8_t *from = col->data + (size_t)last * col->stride;
            if (col->plain) kl_copy_value(to, from, col->stride);
            else relocate(col->component, to, from, 1);
            col->ticks[row] = col->ticks[last];
        }
        kiln_entity moved = arch->entities[last];
        arch->entities[row] = moved;
        kl_record_put(world, moved, kl_record_bits(0, arch->id, (uint32_t)row));
    }
    arch->count = last;
    kl_rows_taken(arch, (size_t)row);
    arch->structure_tick = world->tick;
    world->structure_version++;
}

void kl_columns_copy_row(kl_column *col, const kl_column *end, size_t to, size_t from) {
    for (; col < end; col++) {
        kl_copy_value(col->data + to * col->stride, col->data + from * col->stride, col->stride);
        col->ticks[to] = col->ticks[from];
    }
}

/* Moves one value of column s at from into column d at to (distinct archetypes). */
static inline void move_value(const kl_column *s, uint8_t *to, uint8_t *from) {
    if (KL_LIKELY(s->plain)) kl_copy_value(to, from, s->stride);
    else relocate(s->component, to, from, 1);
}

/* Moves row at of the n columns s[i] to row to of d[i] (the same components), with their
 * ticks, and fills the hole from row tail of s when it is not the last row. */
static void move_run(kl_column *s, kl_column *d, int32_t n, size_t at, size_t to, size_t tail,
                     kiln_tick base) {
    for (int32_t i = 0; i < n; i++) {
        size_t stride = s[i].stride;
        uint8_t *from = s[i].data + at * stride;
        move_value(&s[i], d[i].data + to * stride, from);
        kiln_row_tick tick = s[i].ticks[at];
        d[i].ticks[to] = tick;
        kl_column_touch_appended(&d[i], base + tick);
        if (at != tail) {
            move_value(&s[i], from, s[i].data + tail * stride);
            s[i].ticks[at] = s[i].ticks[tail];
        }
    }
}

void kl_move_bytes(uint8_t *to, uint8_t *from, const uint8_t *tail, size_t size) {
    memcpy(to, from, size);
    memmove(from, tail, size);
}

void kl_archetype_move_plain_call(kiln_world *world, kl_archetype *src, kl_record *record,
                                  kl_archetype *dst, const kl_column *added, kl_column *gone) {
    kl_archetype_move_plain(world, src, record, kl_record_load(record), dst, (size_t)dst->count,
                            world->tick, added, gone, 0);
}

void kl_archetype_move_hooked(kl_archetype *src, kl_archetype *dst, int32_t added, int32_t gone,
                              size_t at, size_t to, size_t tail, kiln_tick base) {
    kl_column *s = src->columns, *d = dst->columns;
    int32_t n = src->column_count;
    int32_t split = added >= 0 ? added : gone >= 0 ? gone : n;
    int32_t skip_src = gone >= 0, skip_dst = added >= 0;
    move_run(s, d, split, at, to, tail, base);
    move_run(s + split + skip_src, d + split + skip_dst, n - split - skip_src, at, to, tail, base);
}

void kl_archetype_drop_value(kl_archetype *src, int32_t gone, size_t at, size_t tail) {
    kl_column *col = &src->columns[gone];
    uint8_t *from = col->data + at * col->stride;
    const kl_component *c = col->component;
    if (c->destroy) c->destroy(from, 1, c->hook_ctx);
    if (at != tail) {
        move_value(col, from, col->data + tail * col->stride);
        col->ticks[at] = col->ticks[tail];
    }
}

void kl_column_write_slow(kl_column *col, int32_t row, void *value, bool move, kiln_tick tick,
                          kiln_row_tick stamp, bool appended) {
    uint8_t *dst = col->data + (size_t)row * col->stride;
    const kl_component *c = col->component;
    if (value && move && c->move) c->move(dst, value, 1, c->hook_ctx);
    else if (value == dst) { /* already in place */
    } else if (value && c->size == col->stride &&
               ((const uint8_t *)value + c->size <= dst || dst + c->size <= (const uint8_t *)value))
        kl_copy_value(dst, value, c->size); /* distinct memory: the usual case */
    else if (value) memmove(dst, value, c->size);
    else if (c->defaults) {
        memcpy(dst, c->defaults, c->size);
        value = dst; /* for the padding below */
    } else memset(dst, 0, col->stride);
    if (value && col->stride > c->size) memset(dst + c->size, 0, col->stride - c->size);
    col->ticks[row] = stamp;
    if (appended) kl_column_touch_appended(col, tick);
    else kl_column_touch(col, tick);
}

void kl_archetypes_trim(kiln_world *world) {
    for (int32_t a = 0; a < world->archetype_count; a++)
        if (world->archetypes[a]->count < world->archetypes[a]->trim_below)
            kl_archetype_trim(world, world->archetypes[a]);
}

/* The values and ticks of count rows of column s from row at to row to of column d (the same
 * component); the latest tick moved raises d's. */
static void move_block(kiln_world *world, kl_column *s, kl_column *d, int32_t at, int32_t to, int32_t count) {
    relocate(s->component, d->data + (size_t)to * d->stride, s->data + (size_t)at * s->stride, count);
    memmove(d->ticks + to, s->ticks + at, sizeof(kiln_row_tick) * (size_t)count);
    kiln_row_tick latest = 0;
    for (int32_t r = 0; r < count; r++) latest = d->ticks[to + r] > latest ? d->ticks[to + r] : latest;
    kl_column_touch_appended(d, world->tick_base + latest);
}

int32_t kl_archetype_move_rows(kiln_world *world, kl_archetype *src, int32_t first, int32_t count,
                               kl_archetype *dst) {
    KILN_ASSERT(first >= 0 && count >= 0 && first + count <= src->count, "moving rows src holds");
    KILN_ASSERT(dst->capacity - dst->count >= count, "rows reserved before the move");
    int32_t to = dst->count, end = first + count;
    /* the rows after the block, as many as fit in its hole, from src's end (never overlapping it) */
    int32_t fill = src->count - end < count ? src->count - end : count, tail = src->count - fill;
    world->in_hook++; /* rows are in two places while the move hooks run (kl_in_hook) */
    for (int32_t i = 0; i < src->column_count && count; i++) {
        kl_column *s = &src->columns[i], *d = kl_archetype_column(dst, s->id);
        KILN_ASSERT(d != NULL, "dst holds every column of src");
        move_block(world, s, d, first, to, count);
        if (fill) move_block(world, s, s, tail, first, fill);
    }
    world->in_hook--;
    for (int32_t r = 0; r < count; r++) {
        kiln_entity e = src->entities[first + r];
        dst->entities[to + r] = e;
        kl_record_set_place(kl_record_at(world, kiln_entity_index(e)), dst->id, (uint32_t)(to + r));
    }
    for (int32_t r = 0; r < fill; r++) {
        kiln_entity e = src->entities[tail + r];
        src->entities[first + r] = e;
        kl_record_set_place(kl_record_at(world, kiln_entity_index(e)), src->id, (uint32_t)(first + r));
    }
    for (int32_t r = end; r-- > first;) kl_rows_taken(src, (size_t)r);
    src->count -= count;
    dst->count = to + count;
    src->structure_tick = dst->structure_tick = world->tick;
    world->structure_version++;
    return to;
}

void kl_archetypes_destroy_values(kiln_world *world) {
    world->in_hook++; /* refuses the hooks' changes (kl_in_hook) */
    for (int32_t a = 0; a < world->archetype_count; a++) {
        kl_archetype *arch = world->archetypes[a];
        for (int32_t i = 0; i < arch->column_count && arch->count; i++) {
            const kl_component *c = arch->columns[i].component;
            if (c->destroy) c->destroy(arch->columns[i].data, arch->count, c->hook_ctx);
        }
    }
    world->in_hook--;
}

void kl_archetypes_free(kiln_world *world) {
    kl_allocator *al = &world->alloc;
    for (int32_t a = 0; a < world->archetype_count; a++) {
        kl_archetype *arch = world->archetypes[a];
        for (int32_t i = 0; i < arch->column_count; i++) {
            kl_column *col = &arch->columns[i];
            kl_free(al, col_block(col), data_bytes(col, col->data_cap));
            kl_free(al, col->ticks, sizeof(kiln_row_tick) * (size_t)col->tick_cap);
        }
        kl_free(al, arch->entities, sizeof(kiln_entity) * (size_t)arch->entity_cap);
        kl_map_free(al, &arch->edges);
        kl_free(al, arch->slots, sizeof(kl_slot) * arch->slot_count);
        kl_free(al, arch->edges_direct, sizeof(kl_edge) * arch->slot_count);
        kl_free(al, arch, archetype_block_size(arch->type_count, arch->column_count));
    }
    kl_free(al, world->archetypes, sizeof(kl_archetype *) * (size_t)world->archetype_cap);
    world->archetypes = NULL;
    world->archetype_count = world->archetype_cap = 0;
}
