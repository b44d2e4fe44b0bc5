/* fuzz_hierarchy.c: the transform addon under the fuzzer: parent links, the children index,
 * recursive despawn and propagation, against world matrices the model composes itself. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_ops.h"

/* Alive, or (deferred) reserved by a spawn earlier in the section: what set_parent and
 * despawn_recursive take. */
static bool linkable(fz_ctx *c, const fz_ent *e) {
    return e && (e->state == FZ_ALIVE || (e->state == FZ_RESERVED && c->m.defer_depth > 0));
}

static kiln_result set_parent_want(fz_ctx *c, kiln_entity child, kiln_entity parent) {
    fz_ent *ce = model_find(&c->m, child);
    if (!linkable(c, ce)) return KILN_ERR_DEAD_ENTITY;
    if (parent == KILN_NULL_ENTITY) return KILN_OK;
    fz_ent *pe = model_find(&c->m, parent);
    if (!linkable(c, pe)) return KILN_ERR_DEAD_ENTITY;
    unsigned char v[FZ_VAL] = {0};
    kiln_parent p = {parent};
    memcpy(v, &p, sizeof p);
    return model_check_accepts(&c->m, child, FZ_PARENT, v) ? KILN_OK : KILN_ERR_INVALID_ARGUMENT;
}

static void op_set_parent(fz_ctx *c) {
    c->op_name = "kiln_transform_set_parent";
    kiln_entity child = fz_pick_entity(c);
    kiln_entity parent = (fz_byte(c) % 5 == 0) ? KILN_NULL_ENTITY : fz_pick_entity(c);
    kiln_result want = set_parent_want(c, child, parent);
    int64_t f0 = fuzz_alloc_failures();
    kiln_result r = kiln_transform_set_parent(c->w, child, parent);
    if (fz_oom_ok(c, r, f0)) return;
    /* Unlinking is kiln_remove, and names it. */
    fz_expect(c, r, want, parent == KILN_NULL_ENTITY && want != KILN_ERR_DEAD_ENTITY ? "kiln_remove"
                                                                                     : "kiln_transform_set_parent");
    if (r != KILN_OK) return;
    fz_ent *ce = model_find(&c->m, child);
    unsigned char v[FZ_VAL] = {0};
    kiln_parent p = {parent};
    memcpy(v, &p, sizeof p);
    if (c->m.defer_depth > 0) {
        fz_queue_push(c, &c->queue, parent ? OP_ADD : OP_REMOVE, child, FZ_PARENT, parent ? v : NULL);
    } else if (parent) {
        model_write(&c->m, ce, FZ_PARENT, v);
    } else if (ce->mask & (1u << FZ_PARENT)) {
        model_remove(&c->m, ce, FZ_PARENT);
    }
}

static int compare_handles(const void *a, const void *b) {
    kiln_entity x = *(const kiln_entity *)a, y = *(const kiln_entity *)b;
    return (x > y) - (x < y);
}

/* Children of parent in the model: live entities whose Parent value is parent, by handle. */
static int32_t model_children(fz_ctx *c, kiln_entity parent, kiln_entity *dest) {
    int32_t n = 0;
    fz_ent *pe = model_find(&c->m, parent);
    if (!pe || pe->state != FZ_ALIVE) return 0;
    for (int32_t i = 0; i < c->m.n_ents; i++) {
        fz_ent *e = &c->m.ents[i];
        kiln_parent p;
        memcpy(&p, e->val[FZ_PARENT], sizeof p);
        if (e->state == FZ_ALIVE && (e->mask & (1u << FZ_PARENT)) && p.entity == parent) dest[n++] = e->h;
    }
    qsort(dest, (size_t)n, sizeof dest[0], compare_handles);
    return n;
}

static void op_children(fz_ctx *c) {
    c->op_name = "kiln_transform_children";
    kiln_entity parent = fz_pick_entity(c);
    kiln_entity want[FZ_MAX_ENT], got[FZ_MAX_ENT];
    int32_t nw = model_children(c, parent, want);
    int64_t f0 = fuzz_alloc_failures();
    int32_t ng = kiln_transform_children(c->w, parent, got, FZ_MAX_ENT);
    if (ng == -1 && fuzz_alloc_failures() > f0) { /* out of memory, and saying so */
        if (strcmp(kiln_world_error(c->w), "kiln_transform_children: out of memory") != 0)
            fuzz_fail(c, "kiln_transform_children out of memory says '%s'", kiln_world_error(c->w));
        return;
    }
    if (ng != nw || memcmp(got, want, sizeof(kiln_entity) * (size_t)nw) != 0)
        fuzz_fail(c, "kiln_transform_children lists %d children, the model %d (or other ones)", ng, nw);
}

static void op_despawn_recursive(fz_ctx *c) {
    c->op_name = "kiln_transform_despawn_recursive";
    if (c->queue.count + FZ_MAX_ENT + 8 > c->queue.cap) return;
    kiln_entity root = fz_pick_entity(c);
    fz_ent *re = model_find(&c->m, root);
    kiln_result want = linkable(c, re) ? KILN_OK : KILN_ERR_DEAD_ENTITY;
    kiln_entity order[FZ_MAX_ENT];
    int32_t n = 0;
    if (want == KILN_OK) {
        order[n++] = root;
        for (int32_t head = 0; head < n; head++) {
            kiln_entity kids[FZ_MAX_ENT];
            int32_t k = model_children(c, order[head], kids);
            for (int32_t i = 0; i < k; i++) {
                bool seen = false;
                for (int32_t j = 0; j < n; j++) seen |= order[j] == kids[i];
                if (!seen) order[n++] = kids[i];
            }
        }
    }
    int64_t f0 = fuzz_alloc_failures();
    kiln_result r = kiln_transform_despawn_recursive(c->w, root);
    if (fz_oom_ok(c, r, f0)) return;
    fz_expect(c, r, want, "kiln_transform_despawn_recursive");
    if (r != KILN_OK) return;
    for (int32_t i = n - 1; i >= 0; i--) {
        if (c->m.defer_depth > 0) fz_queue_push(c, &c->queue, OP_DESPAWN, order[i], 0, NULL);
        else model_despawn(&c->m, model_find(&c->m, order[i]));
    }
}

/* The world matrix propagation gives e: its parent's (identity for roots) times its local
 * matrix; an entity without LocalTransform relays its parent's. */
static void model_world_matrix(fz_ctx *c, fz_ent *e, mat4 dest, int depth) {
    glm_mat4_identity(dest);
    kiln_entity p = model_parent_of(&c->m, e);
    if (p && depth < 300) model_world_matrix(c, model_find(&c->m, p), dest, depth + 1);
    if (!(e->mask & (1u << FZ_LOCAL))) {
        if (!p) glm_mat4_identity(dest);
        return;
    }
    kiln_local_transform lt;
    memcpy(&lt, e->val[FZ_LOCAL], sizeof lt);
    mat4 local, out;
    kiln_transform_local_to_mat4(&lt, local);
    glm_mat4_mul(dest, local, out);
    glm_mat4_copy(out, dest);
}

static void op_propagate(fz_ctx *c, bool parallel) {
    c->op_name = parallel ? "kiln_transform_propagate_parallel" : "kiln_transform_propagate";
    if (c->queue.count + FZ_MAX_ENT + 8 > c->queue.cap) return;
    /* Deferred, a failure part-way leaves some WorldTransform adds queued, whose values the
     * model cannot know: no failure is injected there (an undeferred one is checked). */
    bool paused = c->m.defer_depth > 0;
    if (paused) fuzz_alloc_pause(true);
    int64_t f0 = fuzz_alloc_failures();
    kiln_transform_propagate_stats stats;
    kiln_result r = parallel ? kiln_transform_propagate_parallel(c->w, fuzz_jobs(), &stats)
                             : kiln_transform_propagate(c->w, &stats);
    if (paused) fuzz_alloc_pause(false);
    bool oom = fz_oom_partial_ok(c, r, f0);
    if (!oom) fz_expect(c, r, KILN_OK, "kiln_transform_propagate");
    fz_model *m = &c->m;
    if (oom) {
        /* WorldTransform is derived data: a failed propagation may have added or rewritten
         * some; take them from the world (everything else must be as the model says). */
        for (int32_t i = 0; i < m->n_ents; i++) {
            fz_ent *e = &m->ents[i];
            if (e->state != FZ_ALIVE) continue;
            const void *p = kiln_get(c->w, e->h, c->id[FZ_WORLD]);
            if (p) {
                e->mask |= 1u << FZ_WORLD;
                memcpy(e->val[FZ_WORLD], p, sizeof(kiln_world_transform));
                e->tick_unknown[FZ_WORLD] = true;
            } else if (e->mask & (1u << FZ_WORLD)) {
                fuzz_fail(c, "a failed propagation removed a WorldTransform");
            }
        }
        return;
    }
    model_propagate(c, m->defer_depth > 0);
}

void model_propagate(fz_ctx *c, bool deferred) {
    fz_model *m = &c->m;
    /* Every live entity with a LocalTransform gets its matrix (queued when deferred). */
    static mat4 mats[FZ_MAX_ENT];
    uint32_t group = ++c->groups;
    for (int32_t i = 0; i < m->n_ents; i++)
        if (m->ents[i].state == FZ_ALIVE) model_world_matrix(c, &m->ents[i], mats[i], 0);
    for (int32_t i = 0; i < m->n_ents; i++) {
        fz_ent *e = &m->ents[i];
        if (e->state != FZ_ALIVE || !(e->mask & (1u << FZ_LOCAL))) continue;
        unsigned char v[FZ_VAL] = {0};
        memcpy(v, mats[i], sizeof(float) * 16);
        if (e->mask & (1u << FZ_WORLD)) {
            memcpy(e->val[FZ_WORLD], v, sizeof(float) * 16);
            e->tick_unknown[FZ_WORLD] = true;
        } else if (deferred) {
            fz_queue_push(c, &c->queue, OP_ADD, e->h, FZ_WORLD, v)->group = group;
        } else {
            model_write(m, e, FZ_WORLD, v);
            e->tick_unknown[FZ_WORLD] = true;
        }
    }
}

void fuzz_op_hierarchy(fz_ctx *c, uint8_t sub) {
    switch (sub % 6) {
    case 0: case 1: op_set_parent(c); break;
    case 2: op_children(c); break;
    case 3: op_despawn_recursive(c); break;
    case 4: op_propagate(c, false); break;
    case 5: op_propagate(c, true); break;
    }
}

/* Parent links and LocalTransform values are compared with the rest of the components; what
 * is left is that every Parent value the model holds is one the check hook allowed. */
void fuzz_hierarchy_check(fz_ctx *c) {
    for (int32_t i = 0; i < c->m.n_ents; i++) {
        fz_ent *e = &c->m.ents[i];
        if (e->state != FZ_ALIVE) continue;
        kiln_entity cur = e->h;
        for (int depth = 0; cur; depth++) {
            if (depth > 300) fuzz_fail(c, "the model holds a Parent cycle through entity %llx", (unsigned long long)e->h);
            cur = model_parent_of(&c->m, model_find(&c->m, cur));
        }
    }
}
