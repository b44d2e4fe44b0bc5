/* transform.c: the transform addon (hierarchy, propagation; state behind kiln_world_atfini).
 * Invariant: within one propagation an entity's memo entry is written once (epoch), and after
 * it every WorldTransform whose inputs changed equals parent world * local. */
#include "kiln_transform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Core internals (the addon is built with -Icore/src): records, archetypes, query ticks. */
#include "archetype.h"
#include "query.h"
#include "world.h"

#define KL_MAX_DEPTH 256

typedef struct kl_memo {
    uint32_t epoch;
    uint16_t dirty;        /* the world matrix changed in this call */
    uint16_t depth;        /* ancestors above the entity */
    kiln_entity entity;    /* whose entry this is (a slot may be reused by another entity) */
    const float *matrix;   /* 16 floats, column-major */
} kl_memo;

typedef struct kl_child_pair {
    kiln_entity parent;
    kiln_entity child;
} kl_child_pair;

typedef struct kl_transform_state {
    kiln_transform_ids ids;
    kiln_query *compute;   /* LocalTransform + WorldTransform, optional Parent */
    kiln_query *missing;   /* LocalTransform without WorldTransform */
    kiln_query *linked;    /* Parent */
    kiln_tick last_tick;   /* tick of the previous propagation, 0 before the first */
    uint32_t epoch;
    kl_memo *memo;         /* per entity slot */
    int64_t memo_cap;
    float (*scratch)[16];  /* world matrices of entities still lacking WorldTransform */
    int64_t scratch_cap;
    kiln_entity *pending;
    int64_t pending_cap;
    kl_child_pair *pairs;  /* children index, sorted by (parent, child) */
    int64_t pair_count, pair_cap;
    kiln_tick pairs_tick;  /* tick the index was built at, 0 when never */
    bool pairs_built;
} kl_transform_state;

static const float identity[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};

static const kiln_field parent_fields[] = {
    {.name = "entity", .type = KILN_TYPE_ENTITY, .offset = offsetof(kiln_parent, entity)},
};
static const kiln_field local_fields[] = {
    {.name = "position", .type = KILN_TYPE_VEC3, .offset = offsetof(kiln_local_transform, position)},
    {.name = "rotation", .type = KILN_TYPE_QUAT, .offset = offsetof(kiln_local_transform, rotation)},
    {.name = "scale", .type = KILN_TYPE_VEC3, .offset = offsetof(kiln_local_transform, scale)},
};
static const kiln_field world_fields[] = {
    {.name = "matrix", .type = KILN_TYPE_MAT4, .offset = offsetof(kiln_world_transform, matrix)},
};

/* The teardown hook; also the key under which the state is found again. */
static void transform_fini(kiln_world *world, void *ctx) {
    kl_transform_state *st = ctx;
    kl_allocator *a = &world->alloc;
    kiln_query_destroy(st->compute);
    kiln_query_destroy(st->missing);
    kiln_query_destroy(st->linked);
    kl_free(a, st->memo, sizeof(kl_memo) * (size_t)st->memo_cap);
    kl_free(a, st->scratch, sizeof(float[16]) * (size_t)st->scratch_cap);
    kl_free(a, st->pending, sizeof(kiln_entity) * (size_t)st->pending_cap);
    kl_free(a, st->pairs, sizeof(kl_child_pair) * (size_t)st->pair_cap);
    kl_free(a, st, sizeof *st);
}

/* The world's transform state, or NULL before kiln_transform_init. */
static kl_transform_state *state_of(const kiln_world *world) {
    return kiln_world_atfini_get(world, transform_fini);
}

static kiln_entity parent_of(const kiln_world *world, const kl_transform_state *st, kiln_entity e,
                             const kl_record *rec, bool *link_dead);

/* The Parent check hook: the rules of kiln_transform_set_parent for every way a Parent value
 * is written (kiln_add, kiln_set, spawns, command buffers). A null or dead parent is a root
 * (a parent may still be a handle reserved by a deferred spawn). */
static kiln_result check_parent(const kiln_world *world, kiln_entity entity, const void *value,
                                void *ctx, char *why, size_t why_size) {
    (void)ctx;
    const kl_transform_state *st = state_of(world);
    kiln_entity parent = value ? ((const kiln_parent *)value)->entity : KILN_NULL_ENTITY;
    if (!st || parent == KILN_NULL_ENTITY || entity == KILN_NULL_ENTITY) return KILN_OK;
    char cb[24], pb[24];
    if (parent == entity) {
        snprintf(why, why_size, "entity %s cannot be its own parent",
                 kiln_entity_format(entity, cb, sizeof cb));
        return KILN_ERR_INVALID_ARGUMENT;
    }
    /* Walk up from the new parent: meeting entity means the link would close a cycle. */
    kiln_entity cur = parent;
    for (int32_t depth = 0; cur != KILN_NULL_ENTITY; depth++) {
        if (cur == entity || depth > KL_MAX_DEPTH) {
            snprintf(why, why_size, "making %s a child of %s would create a %s",
                     kiln_entity_format(entity, cb, sizeof cb),
                     kiln_entity_format(parent, pb, sizeof pb),
                     cur == entity ? "cycle" : "parent chain deeper than 256");
            return KILN_ERR_INVALID_ARGUMENT;
        }
        const kl_record *rec = kl_record_of(world, cur);
        if (!rec) break;
        bool dead;
        cur = parent_of(world, st, cur, rec, &dead);
    }
    return KILN_OK;
}

kiln_result kiln_transform_init(kiln_world *world, kiln_transform_ids *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_transform_state *found = state_of(world);
    if (found) {
        if (dest) *dest = found->ids;
        return KILN_OK;
    }
    kiln_transform_ids ids;
    kiln_result r;
    static const kiln_local_transform identity_local = {{0, 0, 0}, {0, 0, 0, 1}, {1, 1, 1}};
    if ((r = kiln_component_register(world, &(kiln_component_desc){
             .name = "Parent", .size = sizeof(kiln_parent), .fields = parent_fields,
             .field_count = 1, .check = check_parent}, &ids.parent)) != KILN_OK ||
        (r = kiln_component_register(world, &(kiln_component_desc){
             .name = "LocalTransform", .size = sizeof(kiln_local_transform),
             .fields = local_fields, .field_count = 3, .defaults = &identity_local},
             &ids.local)) != KILN_OK ||
        (r = kiln_component_register(world, &(kiln_component_desc){
             .name = "WorldTransform", .size = sizeof(kiln_world_transform), .align = 16,
             .fields = world_fields, .field_count = 1}, &ids.world)) != KILN_OK)
        return r;
    kl_transform_state *st = kl_alloc(&world->alloc, sizeof *st);
    if (!st) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_transform_init: out of memory");
    memset(st, 0, sizeof *st);
    st->ids = ids;
    if ((r = kiln_query_create(world, &(kiln_query_desc){.with = {ids.local, ids.world},
                                                         .optional = {ids.parent}},
                               &st->compute)) != KILN_OK ||
        (r = kiln_query_create(world, &(kiln_query_desc){.with = {ids.local}, .without = {ids.world}},
                               &st->missing)) != KILN_OK ||
        (r = kiln_query_create(world, &(kiln_query_desc){.with = {ids.parent}}, &st->linked)) !=
            KILN_OK ||
        (r = kiln_world_atfini(world, transform_fini, st)) != KILN_OK) {
        transform_fini(world, st);
        return r;
    }
    if (dest) *dest = ids;
    return KILN_OK;
}

bool kiln_transform_ids_get(const kiln_world *world, kiln_transform_ids *dest) {
    KILN_ASSERT(world != NULL && dest != NULL, "world and dest are required");
    const kl_transform_state *st = state_of(world);
    if (!st) return false;
    *dest = st->ids;
    return true;
}

static kiln_result need_init(kiln_world *world, const char *call) {
    return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: call kiln_transform_init first", call);
}

/* The live parent of a live entity's record, or null (no Parent, dead parent, self link);
 * *link_dead is set when a Parent exists but does not lead to a live parent. */
static kiln_entity parent_of(const kiln_world *world, const kl_transform_state *st, kiln_entity e,
                             const kl_record *rec, bool *link_dead) {
    *link_dead = false;
    const kl_column *pc = kl_archetype_column(world->archetypes[rec->archetype], st->ids.parent);
    if (!pc) return KILN_NULL_ENTITY;
    kiln_entity p = ((const kiln_parent *)(pc->data + (size_t)rec->row * pc->stride))->entity;
    if (p == e || !kl_record_of(world, p)) {
        *link_dead = true;
        return KILN_NULL_ENTITY;
    }
    return p;
}

typedef struct propagation {
    kiln_world *world;
    kl_transform_state *st;
    kiln_tick since;
    bool full;
    int64_t scratch_used;
    kiln_transform_propagate_stats stats;
} propagation;

static bool changed(const kl_column *col, uint32_t row, kiln_tick since) {
    return col && col->ticks[row] >= since;
}

/* Computes (once per call) the world matrix of e and of the ancestors it needs. */
static kiln_result resolve(propagation *p, kiln_entity e) {
    kiln_world *world = p->world;
    kl_transform_state *st = p->st;
    kiln_entity chain[KL_MAX_DEPTH + 1];
    bool dead_link[KL_MAX_DEPTH + 1];
    int32_t n = 0;
    kiln_entity cur = e;
    const kl_memo *top = NULL;
    for (;;) {
        const kl_memo *m = &st->memo[kiln_entity_index(cur)];
        if (m->epoch == st->epoch) {
            top = m;
            break;
        }
        if (n == KL_MAX_DEPTH + 1) {
            char eb[24];
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                           "kiln_transform_propagate: entity %s has a parent chain deeper than %d "
                           "(a cycle?)",
                           kiln_entity_format(e, eb, sizeof eb), KL_MAX_DEPTH);
        }
        const kl_record *rec = kl_record_of(world, cur);
        chain[n] = cur;
        kiln_entity parent = parent_of(world, st, cur, rec, &dead_link[n]);
        n++;
        if (!parent) break;
        cur = parent;
    }
    if (top && top->entity != cur) top = NULL; /* the slot's entry is another entity's */
    const float *parent_matrix = top ? top->matrix : identity;
    bool parent_dirty = top ? top->dirty != 0 : false;
    int32_t depth = top ? top->depth + 1 : 0; /* of chain[n - 1] */
    if (depth + n - 1 > KL_MAX_DEPTH) {
        char eb[24];
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_transform_propagate: entity %s has a parent chain deeper than %d "
                       "(a cycle?)",
                       kiln_entity_format(e, eb, sizeof eb), KL_MAX_DEPTH);
    }
    for (int32_t i = n - 1; i >= 0; i--) {
        kiln_entity x = chain[i];
        const kl_record *rec = kl_record_of(world, x);
        kl_archetype *arch = world->archetypes[rec->archetype];
        kl_column *local = kl_archetype_column(arch, st->ids.local);
        kl_column *wt = kl_archetype_column(arch, st->ids.world);
        kl_column *pc = kl_archetype_column(arch, st->ids.parent);
        bool dirty = p->full || parent_dirty || dead_link[i] || changed(local, rec->row, p->since) ||
                     changed(pc, rec->row, p->since);
        kl_memo *m = &st->memo[kiln_entity_index(x)];
        m->epoch = st->epoch;
        m->entity = x;
        m->depth = (uint16_t)(depth + (n - 1 - i));
        if (!local) { /* identity for its children */
            m->matrix = parent_matrix;
            m->dirty = dirty;
        } else {
            float *out;
            if (wt) out = (float *)(wt->data + (size_t)rec->row * wt->stride);
            else out = st->scratch[p->scratch_used++];
            bool wrote = false;
            if (dirty || !wt) {
                mat4 parent_m, local_m, world_m;
                memcpy(parent_m, parent_matrix, sizeof parent_m);
                kiln_transform_local_to_mat4(
                    (const kiln_local_transform *)(local->data + (size_t)rec->row * local->stride),
                    local_m);
                glm_mat4_mul(parent_m, local_m, world_m);
                p->stats.computed++;
                if (!wt) {
                    memcpy(out, world_m, sizeof world_m);
                    wrote = true;
                } else if (memcmp(out, world_m, sizeof world_m) != 0) {
                    memcpy(out, world_m, sizeof world_m);
                    wt->ticks[rec->row] = world->tick;
                    kl_column_touch(wt, world->tick);
                    p->stats.updated++;
                    wrote = true;
                }
            }
            m->matrix = out;
            m->dirty = wrote;
        }
        parent_matrix = m->matrix;
        parent_dirty = m->dirty != 0;
    }
    return KILN_OK;
}

/* The common case straight from the chunk's columns: a root, or a child whose live parent
 * was already resolved in this call. Returns false to leave the row to resolve(). */
static bool row_fast(propagation *p, kiln_iter *it, int32_t r) {
    kl_transform_state *st = p->st;
    kiln_entity e = it->entities[r];
    const kl_memo *pm = NULL;
    if (it->columns[2]) {
        kiln_entity parent = ((const kiln_parent *)it->columns[2])[r].entity;
        if (parent == e || parent == KILN_NULL_ENTITY) return false;
        uint32_t pi = kiln_entity_index(parent);
        if (pi >= (uint32_t)st->memo_cap) return false;
        pm = &st->memo[pi];
        if (pm->epoch != st->epoch || pm->entity != parent) return false;
        if (pm->depth >= KL_MAX_DEPTH) return false; /* resolve reports the depth error */
    }
    bool dirty = p->full || (pm && pm->dirty) || it->ticks[0][r] >= p->since ||
                 (it->ticks[2] && it->ticks[2][r] >= p->since);
    float *out = (float *)((uint8_t *)it->columns[1] + (size_t)r * sizeof(kiln_world_transform));
    bool wrote = false;
    if (dirty) {
        mat4 parent_m, local_m, world_m;
        memcpy(parent_m, pm ? pm->matrix : identity, sizeof parent_m);
        kiln_transform_local_to_mat4(&((const kiln_local_transform *)it->columns[0])[r], local_m);
        glm_mat4_mul(parent_m, local_m, world_m);
        p->stats.computed++;
        if (memcmp(out, world_m, sizeof world_m) != 0) {
            memcpy(out, world_m, sizeof world_m);
            kiln_iter_mark_changed(it, 1, r);
            p->stats.updated++;
            wrote = true;
        }
    }
    kl_memo *m = &st->memo[kiln_entity_index(e)];
    m->epoch = st->epoch;
    m->entity = e;
    m->dirty = wrote;
    m->depth = (uint16_t)(pm ? pm->depth + 1 : 0);
    m->matrix = out;
    return true;
}

/* Grows an array of the transform state to hold need items (no shrink). */
static bool reserve(kiln_world *world, void **ptr, int64_t *cap, int64_t need, size_t elem) {
    return kl_grow(&world->alloc, ptr, cap, need, elem, 64);
}

/* Propagates; missing WorldTransforms go into queue when given (a system's own buffer, on
 * any thread), else through kiln_add (queued by a deferred world, immediate otherwise). */
static kiln_result propagate(kiln_world *world, kiln_commands *queue, kiln_transform_propagate_stats *dest) {
    kl_transform_state *st = state_of(world);
    if (dest) memset(dest, 0, sizeof *dest);
    if (!st) return need_init(world, "kiln_transform_propagate");
    propagation p = {world, st, st->last_tick, st->last_tick == 0, 0, {0, 0, 0}};
    bool deferred = queue != NULL || kiln_is_deferred(world);

    /* Entities lacking WorldTransform: added now (undeferred) or computed into scratch and
     * queued with their value (deferred). */
    int64_t missing = kiln_query_count(st->missing);
    int64_t memo_before = st->memo_cap;
    if (!reserve(world, (void **)&st->pending, &st->pending_cap, missing, sizeof(kiln_entity)) ||
        !reserve(world, (void **)&st->memo, &st->memo_cap, kl_slot_count(world), sizeof(kl_memo)) ||
        (deferred && !reserve(world, (void **)&st->scratch, &st->scratch_cap, missing, sizeof(float[16]))))
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_transform_propagate: out of memory");
    if (st->memo_cap > memo_before)
        memset(st->memo + memo_before, 0, sizeof(kl_memo) * (size_t)(st->memo_cap - memo_before));
    if (missing > 0) {
        int64_t n = 0;
        kiln_iter it;
        kiln_query_iter(st->missing, &it);
        while (kiln_query_next(&it))
            for (int32_t r = 0; r < it.count; r++) st->pending[n++] = it.entities[r];
        if (!deferred) {
            for (int64_t i = 0; i < n; i++) {
                kiln_result r = kiln_add(world, st->pending[i], st->ids.world, identity);
                if (r != KILN_OK) return r;
            }
            p.full = true;
        }
    }
    if (!p.full && (kl_query_structure_tick(st->compute) >= p.since ||
                    kl_query_structure_tick(st->linked) >= p.since))
        p.full = true;
    /* Nothing to do when no LocalTransform or Parent was written since the last call (a
     * dying parent shows as a structure change above, unless it had neither component and
     * so counted as identity, alive or dead). */
    if (!p.full && kl_query_column_tick(st->compute, 0) < p.since &&
        kl_query_column_tick(st->compute, 2) < p.since && kl_query_column_tick(st->linked, 0) < p.since &&
        !(deferred && missing > 0)) {
        st->last_tick = world->tick;
        if (dest) *dest = p.stats;
        return KILN_OK;
    }
    if (++st->epoch == 0) { /* wrapped: forget every old mark */
        memset(st->memo, 0, sizeof(kl_memo) * (size_t)st->memo_cap);
        st->epoch = 1;
    }
    /* A failing chain (a cycle) is reported, but every other entity is still updated. */
    kiln_result result = KILN_OK;
    kiln_iter it;
    kiln_query_iter(st->compute, &it);
    while (kiln_query_next(&it)) {
        /* A chunk of roots whose locals did not change needs nothing (children that need
         * these roots resolve them on demand). */
        if (!p.full && it.ticks[2] == NULL && kiln_iter_column_tick(&it, 0) < p.since) continue;
        for (int32_t r = 0; r < it.count; r++) {
            kiln_entity e = it.entities[r];
            if (st->memo[kiln_entity_index(e)].epoch == st->epoch) continue;
            if (!row_fast(&p, &it, r)) {
                kiln_result rr = resolve(&p, e);
                if (rr != KILN_OK && result == KILN_OK) result = rr;
            }
        }
    }
    kiln_iter_fini(&it);
    if (deferred && missing > 0) {
        for (int64_t i = 0; i < missing; i++) {
            kiln_entity e = st->pending[i];
            kiln_result rr = KILN_OK;
            if (st->memo[kiln_entity_index(e)].epoch != st->epoch) rr = resolve(&p, e);
            if (rr == KILN_OK) {
                void *value = (void *)(uintptr_t)st->memo[kiln_entity_index(e)].matrix;
                if (queue) {
                    rr = kiln_commands_add(queue, e, st->ids.world, value);
                    if (rr != KILN_OK) kl_fail(world, rr, "%s", kiln_commands_error(queue));
                } else {
                    rr = kiln_add(world, e, st->ids.world, value);
                }
                if (rr == KILN_OK) p.stats.added++;
            }
            if (rr != KILN_OK && result == KILN_OK) result = rr;
        }
    } else if (!deferred) {
        p.stats.added = missing;
    }
    if (result == KILN_OK) st->last_tick = world->tick;
    if (dest) *dest = p.stats;
    return result;
}

kiln_result kiln_transform_propagate(kiln_world *world, kiln_transform_propagate_stats *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return propagate(world, NULL, dest);
}

/* ---- hierarchy ------------------------------------------------------------------------- */

kiln_result kiln_transform_set_parent(kiln_world *world, kiln_entity child, kiln_entity parent) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_transform_state *st = state_of(world);
    if (!st) return need_init(world, "kiln_transform_set_parent");
    char cb[24], pb[24];
    if (!kl_record_of(world, child))
        return kl_fail(world, KILN_ERR_DEAD_ENTITY, "kiln_transform_set_parent: child %s is not alive",
                       kiln_entity_format(child, cb, sizeof cb));
    if (parent == KILN_NULL_ENTITY) return kiln_remove(world, child, st->ids.parent, NULL);
    if (!kl_record_of(world, parent))
        return kl_fail(world, KILN_ERR_DEAD_ENTITY, "kiln_transform_set_parent: parent %s is not alive",
                       kiln_entity_format(parent, pb, sizeof pb));
    /* Walk up from the new parent: meeting child means the link would close a cycle. */
    kiln_entity cur = parent;
    for (int32_t depth = 0; cur != KILN_NULL_ENTITY; depth++) {
        if (cur == child || depth > KL_MAX_DEPTH)
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                           "kiln_transform_set_parent: making %s a child of %s would create a cycle",
                           kiln_entity_format(child, cb, sizeof cb),
                           kiln_entity_format(parent, pb, sizeof pb));
        bool dead;
        cur = parent_of(world, st, cur, kl_record_of(world, cur), &dead);
    }
    kiln_parent value = {parent};
    return kiln_add(world, child, st->ids.parent, &value);
}

static int compare_pairs(const void *a, const void *b) {
    const kl_child_pair *x = a, *y = b;
    if (x->parent != y->parent) return x->parent < y->parent ? -1 : 1;
    return (x->child > y->child) - (x->child < y->child);
}

/* Rebuilds the children index when Parent components changed since it was built. */
static kiln_result refresh_children(kiln_world *world, kl_transform_state *st, const char *call) {
    if (st->pairs_built && kl_query_structure_tick(st->linked) < st->pairs_tick &&
        kl_query_column_tick(st->linked, 0) < st->pairs_tick)
        return KILN_OK;
    int64_t n = kiln_query_count(st->linked);
    if (!reserve(world, (void **)&st->pairs, &st->pair_cap, n, sizeof(kl_child_pair)))
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
    int64_t k = 0;
    kiln_iter it;
    kiln_query_iter(st->linked, &it);
    while (kiln_query_next(&it)) {
        const kiln_parent *pv = it.columns[0];
        for (int32_t r = 0; r < it.count; r++) st->pairs[k++] = (kl_child_pair){pv[r].entity, it.entities[r]};
    }
    if (k > 1) qsort(st->pairs, (size_t)k, sizeof(kl_child_pair), compare_pairs);
    st->pair_count = k;
    /* A change later in this same tick is stamped with this tick too, so the index is
     * trusted only while every Parent change is older than the tick it was built at. */
    st->pairs_tick = world->tick;
    st->pairs_built = true;
    return KILN_OK;
}

int32_t kiln_transform_children(kiln_world *world, kiln_entity parent, kiln_entity *dest, int32_t capacity) {
    KILN_ASSERT(world != NULL, "world is NULL");
    KILN_ASSERT(capacity == 0 || dest != NULL, "dest is required when capacity > 0");
    kl_transform_state *st = state_of(world);
    if (!st || !kl_record_of(world, parent)) return 0;
    if (refresh_children(world, st, "kiln_transform_children") != KILN_OK) return 0;
    /* lower bound of parent */
    int64_t lo = 0, hi = st->pair_count;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (st->pairs[mid].parent < parent) lo = mid + 1;
        else hi = mid;
    }
    int32_t n = 0;
    for (int64_t i = lo; i < st->pair_count && st->pairs[i].parent == parent; i++, n++) {
        if (n < capacity) dest[n] = st->pairs[i].child;
    }
    return n;
}

kiln_result kiln_transform_despawn_recursive(kiln_world *world, kiln_entity root) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kl_transform_state *st = state_of(world);
    if (!kl_record_of(world, root)) {
        char eb[24];
        return kl_fail(world, KILN_ERR_DEAD_ENTITY, "kiln_transform_despawn_recursive: entity %s is not alive",
                       kiln_entity_format(root, eb, sizeof eb));
    }
    if (!st) return kiln_despawn(world, root);
    kiln_result r = refresh_children(world, st, "kiln_transform_despawn_recursive");
    if (r != KILN_OK) return r;
    /* Breadth-first over the index into pending: root, its children, theirs, ... each entity
     * once, even when Parent links (written directly) form a cycle. */
    int64_t total = st->pair_count + 1;
    int64_t memo_before = st->memo_cap;
    if (!reserve(world, (void **)&st->pending, &st->pending_cap, total, sizeof(kiln_entity)) ||
        !reserve(world, (void **)&st->memo, &st->memo_cap, kl_slot_count(world), sizeof(kl_memo)))
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_transform_despawn_recursive: out of memory");
    if (st->memo_cap > memo_before)
        memset(st->memo + memo_before, 0, sizeof(kl_memo) * (size_t)(st->memo_cap - memo_before));
    if (++st->epoch == 0) {
        memset(st->memo, 0, sizeof(kl_memo) * (size_t)st->memo_cap);
        st->epoch = 1;
    }
    int64_t head = 0, n = 0;
    st->pending[n++] = root;
    st->memo[kiln_entity_index(root)] = (kl_memo){.epoch = st->epoch, .entity = root};
    while (head < n) {
        kiln_entity e = st->pending[head++];
        int64_t lo = 0, hi = st->pair_count;
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (st->pairs[mid].parent < e) lo = mid + 1;
            else hi = mid;
        }
        for (int64_t i = lo; i < st->pair_count && st->pairs[i].parent == e && n < total; i++) {
            kiln_entity child = st->pairs[i].child;
            kl_memo *m = &st->memo[kiln_entity_index(child)];
            if (m->epoch == st->epoch && m->entity == child) continue; /* seen: a cycle */
            *m = (kl_memo){.epoch = st->epoch, .entity = child};
            st->pending[n++] = child;
        }
    }
    /* Deepest first, so no child ever sees a dead parent while its subtree is still alive. */
    for (int64_t i = n - 1; i >= 0; i--) {
        r = kiln_despawn(world, st->pending[i]);
        if (r != KILN_OK) return r;
    }
    return KILN_OK;
}

static void propagate_system(const kiln_system_ctx *ctx) {
    /* Missing WorldTransforms are queued into this system's own buffer, on any thread. */
    propagate(ctx->world, ctx->commands, NULL);
}

void kiln_transform_system_desc(const kiln_world *world, kiln_system_desc *dest) {
    KILN_ASSERT(world != NULL && dest != NULL, "world and dest are required");
    const kl_transform_state *st = state_of(world);
    KILN_ASSERT(st != NULL, "kiln_transform_init first");
    memset(dest, 0, sizeof *dest);
    dest->name = "propagate_transforms";
    dest->run = propagate_system;
    dest->reads[0] = st->ids.parent;
    dest->reads[1] = st->ids.local;
    dest->writes[0] = st->ids.world;
}
