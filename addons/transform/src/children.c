/* children.c: the transform addon's children index and recursive despawn. The index is every
 * (parent, child) Parent link, sorted. It is rebuilt when a Parent value was written in the
 * tick it was built at or since, or rows came into the linked archetypes; rows that only left
 * them (despawns, Parent removed, moves out) leave the index standing, marked stale, and a
 * read then checks each pair against the child's link. */
#include <stdlib.h>
#include <string.h>

#include "defer.h"
#include "query.h"
#include "transform_links.h"
#include "transform_state.h"

static int compare_pairs(const void *a, const void *b) {
    const kl_child_pair *x = a, *y = b;
    if (x->parent != y->parent) return x->parent < y->parent ? -1 : 1;
    return (x->child > y->child) - (x->child < y->child);
}

/* Whether rows only left the linked archetypes since the build (none came in). */
static bool only_removed_since_build(const kl_transform_state *st) {
    for (int32_t i = 0, m = kl_query_match_count(st->linked); i < m; i++) {
        kl_column *col;
        const kl_archetype *a = kl_query_match_at(st->linked, i, 0, &col);
        kl_rows_mark s = (int64_t)a->id < st->pairs_seen_cap ? st->pairs_seen[a->id] : (kl_rows_mark){0, 0};
        if (kl_rows_came_since(a, s) != 0) return false;
    }
    return true;
}

/* Brings the children index up to date; exact: no stale pairs either (a rebuild when some
 * are). Reads the archetypes directly, not through an iteration, which would defer the world
 * and, ending, land what an earlier section left queued (out of memory) in this call. */
static kiln_result refresh_children(kiln_world *world, kl_transform_state *st, const char *call, bool exact) {
    /* A write later in the build's tick is stamped with that tick too: values are trusted
     * only while every write is older than the tick the index was built at. */
    if (st->pairs_built && kl_query_column_tick(st->linked, 0) < st->pairs_tick) {
        if (kl_query_structure_tick(st->linked) < st->pairs_tick && !(exact && st->pairs_stale)) return KILN_OK;
        if (!exact && only_removed_since_build(st)) {
            st->pairs_stale = true;
            return KILN_OK;
        }
    }
    int64_t n = kiln_query_count(st->linked);
    int32_t archetypes = world->archetype_count;
    if (!kl_transform_reserve(world, (void **)&st->pairs, &st->pair_cap, n, sizeof(kl_child_pair)) ||
        !kl_transform_reserve(world, (void **)&st->pairs_seen, &st->pairs_seen_cap, archetypes, sizeof(kl_rows_mark)))
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
    /* grown arrays hold garbage: an archetype made after this build must read as empty */
    memset(st->pairs_seen, 0, sizeof(kl_rows_mark) * (size_t)st->pairs_seen_cap);
    int64_t k = 0;
    for (int32_t i = 0, m = kl_query_match_count(st->linked); i < m; i++) {
        kl_column *col;
        const kl_archetype *a = kl_query_match_at(st->linked, i, 0, &col);
        const kiln_parent *pv = (const kiln_parent *)col->data;
        for (int32_t r = 0; r < a->count; r++) st->pairs[k++] = (kl_child_pair){pv[r].entity, a->entities[r]};
        st->pairs_seen[a->id] = kl_rows_mark_of(a);
    }
    if (k > 1) qsort(st->pairs, (size_t)k, sizeof(kl_child_pair), compare_pairs);
    st->pair_count = k;
    st->pairs_tick = world->tick;
    st->pairs_built = true;
    st->pairs_stale = false;
    return KILN_OK;
}

/* Whether the pair at i still stands: always, unless rows left since the build; then the
 * child must be alive and link to the pair's parent. */
static bool pair_stands(const kiln_world *world, const kl_transform_state *st, int64_t i) {
    if (!st->pairs_stale) return true;
    const kl_record *rec = kl_record_of(world, st->pairs[i].child);
    if (!rec) return false;
    const kl_column *pc = kl_archetype_column(world->archetypes[kl_record_archetype(rec)], st->ids.parent);
    return pc && ((const kiln_parent *)(pc->data + (size_t)kl_record_row(rec) * pc->stride))->entity ==
                     st->pairs[i].parent;
}

/* The first pair whose parent is not below parent. */
static int64_t first_pair(const kl_transform_state *st, kiln_entity parent) {
    int64_t lo = 0, hi = st->pair_count;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (st->pairs[mid].parent < parent) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

_Static_assert(sizeof(kl_child_pair) == 2 * sizeof(kiln_entity), "a pair is two handles");

kiln_result kl_transform_links(kiln_world *world, const kiln_entity **pairs, int64_t *count, const char *call) {
    kl_transform_state *st = kl_transform_state_of(world);
    *pairs = NULL;
    *count = 0;
    if (!st) return KILN_OK;
    kiln_result r = refresh_children(world, st, call, true);
    if (r != KILN_OK) return r;
    *pairs = (const kiln_entity *)(const void *)st->pairs;
    *count = st->pair_count;
    return KILN_OK;
}

int32_t kiln_transform_children(kiln_world *world, kiln_entity parent, kiln_entity *dest, int32_t capacity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    KILN_ASSERT(capacity == 0 || dest != NULL, "dest is required when capacity > 0");
    kl_transform_state *st = kl_transform_state_of(world);
    if (!st || !kl_record_of(world, parent)) return 0;
    if (refresh_children(world, st, "kiln_transform_children", false) != KILN_OK) return -1;
    int32_t n = 0;
    for (int64_t i = first_pair(st, parent); i < st->pair_count && st->pairs[i].parent == parent; i++) {
        if (!pair_stands(world, st, i)) continue;
        if (n < capacity) dest[n] = st->pairs[i].child;
        n++;
    }
    return n;
}

kiln_result kiln_transform_despawn_recursive(kiln_world *world, kiln_entity root) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_transform_state *st = kl_transform_state_of(world);
    /* spawned earlier in this deferred section: nothing links to it yet but queued links */
    if (!kl_record_of(world, root) && kiln_is_deferred(world) && kl_record_reserved(world, root))
        return kl_defer_despawn(world, "kiln_transform_despawn_recursive", root);
    if (!kl_record_of(world, root)) {
        char eb[24];
        return kl_fail(world, KILN_ERR_DEAD_ENTITY, "kiln_transform_despawn_recursive: entity %s is not alive",
                       kiln_entity_format(root, eb, sizeof eb));
    }
    if (!st) return kiln_despawn(world, root);
    kiln_result r = refresh_children(world, st, "kiln_transform_despawn_recursive", false);
    if (r != KILN_OK) return r;
    /* Breadth-first over the index: root, its children, theirs, ... Every entity has one
     * parent, so it is one standing pair's child and the walk meets it once; only root can
     * come back (Parent links written through a pointer closing a cycle through it). The
     * list is the call's own: a main-thread system may run this while the propagation system
     * uses the addon's scratch on the pool. */
    int64_t total = st->pair_count + 1;
    size_t bytes = sizeof(kiln_entity) * (size_t)total;
    kiln_entity *list = kl_alloc(&world->alloc, bytes);
    if (!list) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_transform_despawn_recursive: out of memory");
    int64_t head = 0, n = 0;
    list[n++] = root;
    while (head < n) {
        kiln_entity e = list[head++];
        for (int64_t i = first_pair(st, e); i < st->pair_count && st->pairs[i].parent == e && n < total; i++)
            if (st->pairs[i].child != root && pair_stands(world, st, i)) list[n++] = st->pairs[i].child;
    }
    /* Deepest first, so no child ever sees a dead parent while its subtree is still alive.
     * Deferred, the despawns are queued: one that runs out of memory takes back those queued
     * before it, so the call leaves nothing behind. */
    bool deferred = kiln_is_deferred(world);
    int64_t mark = deferred ? kl_defer_mark(world) : 0;
    for (int64_t i = n - 1; i >= 0 && r == KILN_OK; i--) {
        r = deferred ? kl_defer_despawn(world, "kiln_transform_despawn_recursive", list[i])
                     : kiln_despawn(world, list[i]);
        if (r != KILN_OK && deferred) kl_defer_rollback(world, mark);
    }
    kl_free(&world->alloc, list, bytes);
    return r;
}
