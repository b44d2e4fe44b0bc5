/* propagate.c: transform propagation: roots chunk by chunk straight from their columns, then
 * entities with a Parent level by level from a cached schedule, both split over a job pool.
 * Invariant: a node's parent is a root or a node of an earlier level, so a level reads only
 * finished matrices and the result does not depend on how the work is split. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "defer.h"
#include "transform_state.h"

/* Every product here is rounded before it is added, as the SSE2 path's separate multiplies and
 * adds round it, whatever the compiler would contract: a fused a * b + c rounds once and gives
 * other bits, so a build that fuses (clang's default on FMA targets such as aarch64, which
 * takes the portable path; gcc in GNU C mode, a host's own build, with -mfma) propagated other
 * WorldTransforms and hashed apart from every other build. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* The small per-matrix helpers (load, compare, store, multiply) inline into their loops. */
#if defined(__GNUC__)
#define KL_KERNEL static inline __attribute__((always_inline))
#else
#define KL_KERNEL static inline
#endif

/* The four-matrix kernel stays out of line: inlined into the loops it leaves too few
 * registers and ran about 10% slower in the game's SSE2 build. */
#if defined(__GNUC__)
#define KL_GROUP static __attribute__((noinline))
#else
#define KL_GROUP static
#endif

#define KL_ROOT_RANGE 2048  /* least rows of roots per job */
#define KL_LEVEL_RANGE 2048 /* least nodes of one level per job */
#define KL_RANGES_PER_THREAD 4

typedef struct pass {
    kiln_world *world;
    kl_transform_state *st;
    kiln_tick since;          /* inputs written at or after it changed */
    kiln_tick now;
    uint32_t since_row;       /* since as rows store it (row >= since_row: changed); exact, as
                               * since - tick base, 0 when since is at or before the base */
    kiln_row_tick now_row;    /* now as rows store it */
    bool full;                /* recompute every entity */
    _Atomic int64_t computed;
    _Atomic int64_t updated;
} pass;

typedef struct level_job {
    pass *p;
    int32_t begin, end;
} level_job;

/* Four local matrices at a time: the quaternion arithmetic of glm_quat_mat4 (then the
 * scale, then the translation) runs once for four entities in SSE lanes, and the matrices
 * come out column by column through 4x4 transposes, as 16-byte stores the caller reloads
 * at the same size (a matrix stored float by float and reloaded as vectors stalls on store
 * forwarding: that stall cost a one-entity version more than the arithmetic). Fewer than
 * four entities fill the spare lanes with copies of the last one, so an entity's matrix is
 * the same bits whichever group, range or thread computes it. Without SSE2, the same
 * operations one lane at a time. */
#if defined(__SSE2__)
#include <emmintrin.h>
typedef struct cols {
    __m128 c[4];
} cols;

KL_KERNEL cols cols_load(const float *m) {
    return (cols){{_mm_loadu_ps(m), _mm_loadu_ps(m + 4), _mm_loadu_ps(m + 8), _mm_loadu_ps(m + 12)}};
}

KL_KERNEL void cols_store(float *m, cols v) {
    _mm_storeu_ps(m, v.c[0]);
    _mm_storeu_ps(m + 4, v.c[1]);
    _mm_storeu_ps(m + 8, v.c[2]);
    _mm_storeu_ps(m + 12, v.c[3]);
}

/* Bitwise equality (a -0.0 written over 0.0 is a change, as memcmp says). */
KL_KERNEL bool cols_same(cols v, const float *m) {
    __m128i e0 = _mm_cmpeq_epi32(_mm_castps_si128(v.c[0]), _mm_loadu_si128((const __m128i *)m));
    __m128i e1 = _mm_cmpeq_epi32(_mm_castps_si128(v.c[1]), _mm_loadu_si128((const __m128i *)(m + 4)));
    __m128i e2 = _mm_cmpeq_epi32(_mm_castps_si128(v.c[2]), _mm_loadu_si128((const __m128i *)(m + 8)));
    __m128i e3 = _mm_cmpeq_epi32(_mm_castps_si128(v.c[3]), _mm_loadu_si128((const __m128i *)(m + 12)));
    __m128i all = _mm_and_si128(_mm_and_si128(e0, e1), _mm_and_si128(e2, e3));
    return _mm_movemask_epi8(all) == 0xFFFF;
}

#define SPLAT(v, i) _mm_shuffle_ps((v), (v), _MM_SHUFFLE(i, i, i, i))
/* p * l, column by column: ((p0 l.x + p1 l.y) + p2 l.z) + p3 l.w. */
KL_KERNEL cols cols_mul(cols p, cols l) {
    cols r;
    for (int j = 0; j < 4; j++) {
        __m128 v = _mm_mul_ps(p.c[0], SPLAT(l.c[j], 0));
        v = _mm_add_ps(v, _mm_mul_ps(p.c[1], SPLAT(l.c[j], 1)));
        v = _mm_add_ps(v, _mm_mul_ps(p.c[2], SPLAT(l.c[j], 2)));
        v = _mm_add_ps(v, _mm_mul_ps(p.c[3], SPLAT(l.c[j], 3)));
        r.c[j] = v;
    }
    return r;
}
#undef SPLAT

KL_GROUP void local4(const kiln_local_transform *const t[4], cols dest[4]) {
    /* rotation x y z w at offset 12, then w sx sy sz at offset 24: two loads inside each value */
    __m128 x = _mm_loadu_ps(t[0]->rotation), y = _mm_loadu_ps(t[1]->rotation);
    __m128 z = _mm_loadu_ps(t[2]->rotation), w = _mm_loadu_ps(t[3]->rotation);
    _MM_TRANSPOSE4_PS(x, y, z, w);
    __m128 w2 = _mm_loadu_ps(&t[0]->rotation[3]), sx = _mm_loadu_ps(&t[1]->rotation[3]);
    __m128 sy = _mm_loadu_ps(&t[2]->rotation[3]), sz = _mm_loadu_ps(&t[3]->rotation[3]);
    _MM_TRANSPOSE4_PS(w2, sx, sy, sz);
    const __m128 zero = _mm_setzero_ps(), one = _mm_set1_ps(1.0f);
    __m128 dot = _mm_add_ps(_mm_add_ps(_mm_add_ps(_mm_mul_ps(x, x), _mm_mul_ps(y, y)), _mm_mul_ps(z, z)),
                            _mm_mul_ps(w, w));
    __m128 norm = _mm_sqrt_ps(dot);
    __m128 s = _mm_and_ps(_mm_cmpgt_ps(norm, zero), _mm_div_ps(_mm_set1_ps(2.0f), norm));
    __m128 sxq = _mm_mul_ps(s, x), syq = _mm_mul_ps(s, y), szq = _mm_mul_ps(s, z), swq = _mm_mul_ps(s, w);
    __m128 xx = _mm_mul_ps(sxq, x), xy = _mm_mul_ps(sxq, y), wx = _mm_mul_ps(swq, x);
    __m128 yy = _mm_mul_ps(syq, y), yz = _mm_mul_ps(syq, z), wy = _mm_mul_ps(swq, y);
    __m128 zz = _mm_mul_ps(szq, z), xz = _mm_mul_ps(sxq, z), wz = _mm_mul_ps(swq, z);
    /* one column of the four matrices at a time, stored as soon as it is transposed */
    __m128 a0 = _mm_mul_ps(_mm_sub_ps(_mm_sub_ps(one, yy), zz), sx);
    __m128 a1 = _mm_mul_ps(_mm_add_ps(xy, wz), sx);
    __m128 a2 = _mm_mul_ps(_mm_sub_ps(xz, wy), sx);
    __m128 a3 = zero;
    _MM_TRANSPOSE4_PS(a0, a1, a2, a3);
    dest[0].c[0] = a0;
    dest[1].c[0] = a1;
    dest[2].c[0] = a2;
    dest[3].c[0] = a3;
    __m128 b0 = _mm_mul_ps(_mm_sub_ps(xy, wz), sy);
    __m128 b1 = _mm_mul_ps(_mm_sub_ps(_mm_sub_ps(one, xx), zz), sy);
    __m128 b2 = _mm_mul_ps(_mm_add_ps(yz, wx), sy);
    __m128 b3 = zero;
    _MM_TRANSPOSE4_PS(b0, b1, b2, b3);
    dest[0].c[1] = b0;
    dest[1].c[1] = b1;
    dest[2].c[1] = b2;
    dest[3].c[1] = b3;
    __m128 c0 = _mm_mul_ps(_mm_add_ps(xz, wy), sz);
    __m128 c1 = _mm_mul_ps(_mm_sub_ps(yz, wx), sz);
    __m128 c2 = _mm_mul_ps(_mm_sub_ps(_mm_sub_ps(one, xx), yy), sz);
    __m128 c3 = zero;
    _MM_TRANSPOSE4_PS(c0, c1, c2, c3);
    dest[0].c[2] = c0;
    dest[1].c[2] = c1;
    dest[2].c[2] = c2;
    dest[3].c[2] = c3;
    /* the translation column: position x y z, then 1 where rotation x sits in memory */
    const __m128 keep = _mm_castsi128_ps(_mm_set_epi32(0, -1, -1, -1));
    const __m128 w_one = _mm_set_ps(1.0f, 0.0f, 0.0f, 0.0f);
    for (int k = 0; k < 4; k++)
        dest[k].c[3] = _mm_or_ps(_mm_and_ps(_mm_loadu_ps(t[k]->position), keep), w_one);
}
#else
typedef struct cols {
    float v[16];
} cols;

KL_KERNEL cols cols_load(const float *m) {
    cols r;
    memcpy(r.v, m, sizeof r.v);
    return r;
}

KL_KERNEL void cols_store(float *m, cols v) { memcpy(m, v.v, sizeof v.v); }

KL_KERNEL bool cols_same(cols v, const float *m) { return memcmp(v.v, m, sizeof v.v) == 0; }

KL_KERNEL cols cols_mul(cols p, cols l) {
    cols r;
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 4; i++) {
            float v = p.v[i] * l.v[4 * j];
            v = v + p.v[4 + i] * l.v[4 * j + 1];
            v = v + p.v[8 + i] * l.v[4 * j + 2];
            v = v + p.v[12 + i] * l.v[4 * j + 3];
            r.v[4 * j + i] = v;
        }
    return r;
}

KL_GROUP void local4(const kiln_local_transform *const t[4], cols dest[4]) {
    for (int k = 0; k < 4; k++) {
        const kiln_local_transform *l = t[k];
        float x = l->rotation[0], y = l->rotation[1], z = l->rotation[2], w = l->rotation[3];
        float norm = sqrtf(((x * x + y * y) + z * z) + w * w);
        float s = norm > 0.0f ? 2.0f / norm : 0.0f;
        float sxq = s * x, syq = s * y, szq = s * z, swq = s * w;
        float xx = sxq * x, xy = sxq * y, wx = swq * x;
        float yy = syq * y, yz = syq * z, wy = swq * y;
        float zz = szq * z, xz = sxq * z, wz = swq * z;
        float sx = l->scale[0], sy = l->scale[1], sz = l->scale[2];
        const float v[16] = {
            ((1.0f - yy) - zz) * sx, (xy + wz) * sx, (xz - wy) * sx, 0.0f,
            (xy - wz) * sy, ((1.0f - xx) - zz) * sy, (yz + wx) * sy, 0.0f,
            (xz + wy) * sz, (yz - wx) * sz, ((1.0f - xx) - yy) * sz, 0.0f,
            l->position[0], l->position[1], l->position[2], 1.0f,
        };
        memcpy(dest[k].v, v, sizeof v);
    }
}
#endif

/* ---- roots ------------------------------------------------------------------------------ */

/* Composes the n (1..4) gathered rows and writes those whose matrix changed. */
KL_KERNEL int64_t root_group(kiln_iter *view, const int32_t *rows, int n) {
    const kiln_local_transform *local = view->columns[0];
    kiln_world_transform *out = view->columns[1];
    const kiln_local_transform *t[4];
    for (int k = 0; k < 4; k++) t[k] = &local[rows[k < n ? k : n - 1]];
    cols m[4];
    local4(t, m);
    int64_t updated = 0;
    for (int k = 0; k < n; k++) {
        float *o = out[rows[k]].matrix[0];
        if (!cols_same(m[k], o)) {
            cols_store(o, m[k]);
            kiln_iter_mark_changed(view, 1, rows[k]);
            updated++;
        }
    }
    return updated;
}

/* Rows of roots (LocalTransform + WorldTransform, no Parent): a plain loop over the columns;
 * a chunk whose locals did not change is skipped without reading its rows. */
static void root_rows(kiln_iter *view, void *user) {
    pass *p = user;
    if (!p->full && kiln_iter_column_tick(view, 0) < p->since) return;
    const kiln_row_tick *local_tick = view->ticks[0];
    uint32_t since = p->full ? 0 : p->since_row;
    int64_t computed = 0, updated = 0;
    int32_t rows[4];
    int n = 0;
    int32_t r = 0;
    if (p->full) /* every row: no need to read the ticks */
        for (; r + 4 <= view->count; r += 4) {
            rows[0] = r, rows[1] = r + 1, rows[2] = r + 2, rows[3] = r + 3;
            updated += root_group(view, rows, 4);
            computed += 4;
        }
    for (; r < view->count; r++) {
        if (local_tick[r] < since) continue;
        rows[n++] = r;
        if (n == 4) {
            updated += root_group(view, rows, 4);
            computed += 4;
            n = 0;
        }
    }
    if (n > 0) {
        updated += root_group(view, rows, n);
        computed += n;
    }
    atomic_fetch_add_explicit(&p->computed, computed, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->updated, updated, memory_order_relaxed);
}

/* ---- levels ----------------------------------------------------------------------------- */

/* Composes the n (1..4) gathered nodes with their parents and writes those that changed. */
KL_KERNEL int64_t level_group(pass *p, const int32_t *idx, int n) {
    const kl_node *nodes = p->st->nodes;
    uint8_t *dirty = p->st->node_dirty;
    const kiln_local_transform *t[4];
    for (int k = 0; k < 4; k++) t[k] = nodes[idx[k < n ? k : n - 1]].local;
    cols m[4];
    local4(t, m);
    int64_t updated = 0;
    for (int k = 0; k < n; k++) {
        const kl_node *nd = &nodes[idx[k]];
        cols w = nd->parent ? cols_mul(cols_load(nd->parent), m[k]) : m[k];
        bool wrote = false;
        if (!nd->out_tick) { /* a scratch slot, queued with its value */
            cols_store(nd->out, w);
            wrote = true;
        } else if (!cols_same(w, nd->out)) {
            cols_store(nd->out, w);
            *nd->out_tick = p->now_row;
            kl_column_touch(nd->out_column, p->now);
            updated++;
            wrote = true;
        }
        dirty[idx[k]] = wrote;
    }
    return updated;
}

static void level_rows(pass *p, int32_t begin, int32_t end) {
    const kl_node *nodes = p->st->nodes;
    uint8_t *dirty = p->st->node_dirty;
    uint32_t since = p->since_row;
    kiln_row_tick now = p->now_row;
    bool full = p->full;
    int64_t computed = 0, updated = 0;
    int32_t idx[4];
    int n = 0;
    for (int32_t i = begin; i < end; i++) {
        const kl_node *nd = &nodes[i];
        bool changed = full || (nd->parent_node >= 0 && dirty[nd->parent_node]) ||
                       (nd->parent_out_tick && *nd->parent_out_tick == now) ||
                       (nd->link_tick && *nd->link_tick >= since) ||
                       (nd->local_tick && *nd->local_tick >= since) || (nd->local && !nd->out_tick);
        if (!nd->local || !changed) { /* no local: identity, relaying its parent's changes */
            dirty[i] = nd->local ? 0 : changed;
            continue;
        }
        idx[n++] = i;
        if (n == 4) {
            updated += level_group(p, idx, 4);
            computed += 4;
            n = 0;
        }
    }
    if (n > 0) {
        updated += level_group(p, idx, n);
        computed += n;
    }
    atomic_fetch_add_explicit(&p->computed, computed, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->updated, updated, memory_order_relaxed);
}

static void level_job_run(void *arg) {
    level_job *j = arg;
    level_rows(j->p, j->begin, j->end);
}

/* Runs every level in order, each split over the pool when it is large enough; a level
 * starts once the one above it is done. */
static void run_levels(pass *p, kiln_jobs *jobs, int32_t threads) {
    kl_transform_state *st = p->st;
    level_job *ranges = st->jobs_mem;
    kiln_job *list = (kiln_job *)(ranges + (size_t)threads * KL_RANGES_PER_THREAD);
    for (int32_t d = 0; d < st->level_count; d++) {
        int32_t begin = st->level_start[d], end = st->level_start[d + 1];
        int32_t count = end - begin;
        int32_t k = threads > 1 ? count / KL_LEVEL_RANGE : 1;
        if (k > threads * KL_RANGES_PER_THREAD) k = threads * KL_RANGES_PER_THREAD;
        if (k <= 1) {
            level_rows(p, begin, end);
            continue;
        }
        for (int32_t j = 0; j < k; j++) {
            ranges[j] = (level_job){p, begin + (int32_t)((int64_t)count * j / k),
                                    begin + (int32_t)((int64_t)count * (j + 1) / k)};
            list[j] = (kiln_job){level_job_run, &ranges[j]};
        }
        kiln_counter counter = {0};
        if (kiln_jobs_submit(jobs, list, k, &counter) != KILN_OK) {
            level_rows(p, begin, end); /* no room to queue: the same work inline */
            continue;
        }
        kiln_jobs_wait(jobs, &counter);
    }
}

/* ---- the level schedule ----------------------------------------------------------------- */

static bool is_node(const kl_transform_state *st, const kl_archetype *arch) {
    if (kl_archetype_column(arch, st->ids.parent)) return true;
    return kl_archetype_column(arch, st->ids.local) && !kl_archetype_column(arch, st->ids.world);
}

static kiln_result chain_error(kiln_world *world, kiln_entity e) {
    char eb[24];
    return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                   "kiln_transform_propagate: entity %s has a parent chain deeper than %d (a cycle?)",
                   kiln_entity_format(e, eb, sizeof eb), KL_MAX_DEPTH);
}

/* Walks up from e to an entity seen in this build or to the top of its chain, giving each
 * entity on the way its depth; nodes among them join st->order. A chain deeper than the
 * limit (a cycle) marks its entities failed and reports the first such entity. */
static void place_chain(kiln_world *world, kl_transform_state *st, kiln_entity e, int64_t *order_count,
                        kiln_result *result) {
    kiln_entity chain[KL_MAX_DEPTH + 1];
    int32_t n = 0;
    kiln_entity cur = e;
    const kl_memo *top = NULL;
    bool overflow = false;
    for (;;) {
        const kl_memo *m = &st->memo[kiln_entity_index(cur)];
        if (m->epoch == st->epoch && m->entity == cur) {
            top = m;
            break;
        }
        if (n == KL_MAX_DEPTH + 1) {
            overflow = true;
            break;
        }
        chain[n++] = cur;
        bool dead;
        kiln_entity parent = kl_transform_parent_of(world, st, cur, kl_record_of(world, cur), &dead);
        if (!parent) break;
        cur = parent;
    }
    int32_t base = top ? (top->depth < 0 ? -1 : top->depth + 1) : 0; /* depth of chain[n - 1] */
    if (overflow || base < 0 || base + n - 1 > KL_MAX_DEPTH) {
        if (overflow || base >= 0) {
            /* In a cycle, the walk ends going round it: name an entity of the cycle then. */
            kiln_entity named = e;
            for (int32_t i = 0; overflow && i < n - 1; i++)
                if (chain[i] == chain[n - 1]) named = chain[n - 1];
            if (*result == KILN_OK) *result = chain_error(world, named);
        }
    }
    for (int32_t i = n - 1; i >= 0; i--) {
        int32_t depth = overflow || base < 0 ? -1 : base + (n - 1 - i);
        if (depth > KL_MAX_DEPTH) depth = -1;
        kiln_entity x = chain[i];
        kl_memo *m = &st->memo[kiln_entity_index(x)];
        *m = (kl_memo){.epoch = st->epoch, .depth = depth, .entity = x, .node = -1};
        const kl_record *rec = kl_record_of(world, x);
        if (depth >= 0 && is_node(st, world->archetypes[kl_record_archetype(rec)])) {
            st->order[*order_count] = x;
            st->order_depth[*order_count] = depth;
            (*order_count)++;
        }
    }
}

/* Fills node i for entity e; its parent's node, if any, is filled already. */
static void fill_node(kiln_world *world, kl_transform_state *st, kiln_entity e, int32_t i) {
    const kl_record *rec = kl_record_of(world, e);
    const kl_archetype *arch = world->archetypes[kl_record_archetype(rec)];
    size_t row = kl_record_row(rec);
    kl_column *lc = kl_archetype_column(arch, st->ids.local);
    kl_column *wc = kl_archetype_column(arch, st->ids.world);
    kl_column *pc = kl_archetype_column(arch, st->ids.parent);
    kl_node n = {.parent_node = -1};
    n.link_tick = pc ? &pc->ticks[row] : NULL;
    if (lc) {
        n.local = (const kiln_local_transform *)(lc->data + row * lc->stride);
        n.local_tick = &lc->ticks[row];
        if (wc) {
            n.out = (float *)(wc->data + row * wc->stride);
            n.out_tick = &wc->ticks[row];
            n.out_column = wc;
        } else { /* lacking WorldTransform in a deferred world: computed into scratch */
            n.out = st->scratch[st->pending_count];
            st->pending[st->pending_count++] = e;
        }
    }
    bool dead;
    kiln_entity parent = kl_transform_parent_of(world, st, e, rec, &dead);
    if (parent) {
        const kl_memo *pm = &st->memo[kiln_entity_index(parent)];
        if (pm->node >= 0) {
            const kl_node *pn = &st->nodes[pm->node];
            n.parent_node = pm->node;
            n.parent = pn->out ? pn->out : pn->parent;
        } else { /* a root, or an entity without LocalTransform (identity) */
            const kl_record *prec = kl_record_of(world, parent);
            const kl_archetype *parch = world->archetypes[kl_record_archetype(prec)];
            kl_column *plc = kl_archetype_column(parch, st->ids.local);
            kl_column *pwc = kl_archetype_column(parch, st->ids.world);
            if (plc && pwc) {
                n.parent = (const float *)(pwc->data + (size_t)kl_record_row(prec) * pwc->stride);
                n.parent_out_tick = &pwc->ticks[kl_record_row(prec)];
            }
        }
    }
    st->nodes[i] = n;
}

/* Rebuilds the level schedule: every entity with a Parent, and (deferred) every entity
 * lacking its WorldTransform, sorted by depth. Entities of a failing chain are left out. */
/* Room in the schedule's arrays for total nodes. */
static bool reserve_levels(kiln_world *world, kl_transform_state *st, int64_t total) {
    return kl_transform_reserve(world, (void **)&st->order, &st->order_cap, total * 2, sizeof(kiln_entity)) &&
           kl_transform_reserve(world, (void **)&st->order_depth, &st->order_depth_cap, total,
                                sizeof(int32_t)) &&
           kl_transform_reserve(world, (void **)&st->nodes, &st->node_cap, total, sizeof(kl_node)) &&
           kl_transform_reserve(world, (void **)&st->node_dirty, &st->dirty_cap, total, 1);
}

static kiln_result build_levels(kiln_world *world, kl_transform_state *st, bool deferred) {
    st->nodes_valid = false;
    st->pending_count = 0;
    int64_t linked = kiln_query_count(st->linked);
    int64_t missing = deferred ? kiln_query_count(st->missing) : 0;
    int64_t total = linked + missing;
    if (!reserve_levels(world, st, total))
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_transform_propagate: out of memory");
    if (++st->epoch == 0) { /* wrapped: forget every old mark */
        memset(st->memo, 0, sizeof(kl_memo) * (size_t)st->memo_cap);
        st->epoch = 1;
    }
    kiln_result result = KILN_OK;
    int64_t count = 0;
    kiln_query *sources[2] = {st->linked, deferred ? st->missing : NULL};
    for (int s = 0; s < 2 && sources[s]; s++) {
        kiln_iter it;
        kiln_query_iter(sources[s], &it);
        while (kiln_query_next(&it))
            for (int32_t r = 0; r < it.count; r++) {
                kiln_entity e = it.entities[r];
                const kl_memo *m = &st->memo[kiln_entity_index(e)];
                if (m->epoch != st->epoch || m->entity != e) place_chain(world, st, e, &count, &result);
            }
    }
    /* Counting sort by depth, keeping gather order within a level (deterministic). */
    int32_t levels = 0;
    memset(st->level_start, 0, sizeof st->level_start);
    for (int64_t k = 0; k < count; k++) {
        int32_t d = st->order_depth[k];
        st->level_start[d + 1]++;
        if (d + 1 > levels) levels = d + 1;
    }
    for (int32_t d = 0; d < levels; d++) st->level_start[d + 1] += st->level_start[d];
    /* order is still NULL while no entity ever needed a level (offsetting NULL is undefined). */
    kiln_entity *sorted = count > 0 ? st->order + total : NULL;
    int32_t cursor[KL_MAX_DEPTH + 1];
    memcpy(cursor, st->level_start, sizeof(int32_t) * (size_t)(levels > 0 ? levels : 1));
    for (int64_t k = 0; k < count; k++) {
        int32_t idx = cursor[st->order_depth[k]]++;
        sorted[idx] = st->order[k];
        st->memo[kiln_entity_index(st->order[k])].node = idx;
    }
    for (int64_t k = 0; k < count; k++) fill_node(world, st, sorted[k], (int32_t)k);
    st->node_count = count;
    st->level_count = levels;
    st->nodes_valid = result == KILN_OK;
    return result;
}

/* ---- one propagation -------------------------------------------------------------------- */

/* Adds the identity WorldTransform to the n entities of st->pending (undeferred), all or
 * none: each destination archetype is made and given room first, so the adds allocate
 * nothing; should one fail anyway, those before it are taken back. */
static kiln_result add_missing(kiln_world *world, kl_transform_state *st, int64_t n) {
    static const float identity[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    const kl_archetype *last = NULL;
    for (int64_t i = 0; i < n; i++) {
        kl_archetype *arch = world->archetypes[kl_record_archetype(kl_record_of(world, st->pending[i]))];
        if (arch == last) continue;
        last = arch;
        kl_archetype *dst = kl_archetype_traverse(world, arch, st->ids.world, "kiln_transform_propagate");
        if (!dst) return kl_archetype_failure(world, arch->type_count + 1); /* (the message says why) */
        if (!kl_archetype_reserve(world, dst, arch->count))
            return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_transform_propagate: out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        kiln_result r = kiln_add(world, st->pending[i], st->ids.world, identity);
        if (r == KILN_OK) continue;
        char why[KL_ERROR_SIZE];
        snprintf(why, sizeof why, "%s", kiln_world_error(world));
        while (i-- > 0) kiln_remove(world, st->pending[i], st->ids.world, NULL);
        const char *detail = strstr(why, ": ");
        return kl_fail(world, r, "kiln_transform_propagate: %s", detail ? detail + 2 : why);
    }
    return KILN_OK;
}

/* Queues the adds of WorldTransform for st->pending (deferred) before anything is computed,
 * so running out of memory leaves nothing queued and nothing written; fill_queued puts the
 * computed matrices into the queued values afterwards. *mark: the queue's length before. */
static kiln_result queue_missing(kiln_world *world, kl_transform_state *st, kiln_commands *q,
                                 bool own_buffer, int64_t *mark) {
    float identity[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    *mark = kiln_commands_count(q);
    for (int64_t i = 0; i < st->pending_count; i++) {
        kiln_result r = own_buffer ? kiln_commands_add(q, st->pending[i], st->ids.world, identity)
                                   : kiln_add(world, st->pending[i], st->ids.world, identity);
        if (r == KILN_OK && kiln_commands_count(q) == *mark + i + 1) continue;
        kl_commands_truncate(q, *mark);
        if (r == KILN_OK) r = KILN_ERR_INVALID_ARGUMENT; /* not queued where it was looked for */
        return kl_fail(world, r, "kiln_transform_propagate: %s",
                       r == KILN_ERR_OUT_OF_MEMORY ? "out of memory" : "cannot queue WorldTransform");
    }
    return KILN_OK;
}

static void fill_queued(kl_transform_state *st, kiln_commands *q, int64_t mark) {
    for (int64_t i = 0; i < st->pending_count; i++) {
        void *value = kl_commands_value_at(q, mark + i);
        if (value) memcpy(value, st->scratch[i], sizeof st->scratch[i]);
    }
}

kiln_result kl_transform_propagate(kiln_world *world, kiln_commands *queue, kiln_jobs *jobs,
                                   kiln_transform_propagate_stats *dest) {
    kl_transform_state *st = kl_transform_state_of(world);
    if (dest) memset(dest, 0, sizeof *dest);
    if (!st)
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                       "kiln_transform_propagate: call kiln_transform_init first");
    pass p = {.world = world, .st = st, .since = st->last_tick, .now = world->tick,
              .now_row = kl_row_tick_now(world), .full = st->last_tick == 0};
    p.since_row = p.since > world->tick_base ? p.since - world->tick_base : 0;
    bool deferred = queue != NULL || kiln_is_deferred(world);
    int32_t threads = jobs ? kiln_jobs_worker_count(jobs) + 1 : 1;
    kiln_transform_propagate_stats stats = {0, 0, 0};

    /* Entities lacking WorldTransform: added now (undeferred) or computed into scratch and
     * queued with their value (deferred). */
    int64_t missing = kiln_query_count(st->missing);
    int64_t memo_before = st->memo_cap;
    size_t job_bytes = (sizeof(level_job) + sizeof(kiln_job)) * (size_t)threads * KL_RANGES_PER_THREAD;
    if (!kl_transform_reserve(world, (void **)&st->pending, &st->pending_cap, missing, sizeof(kiln_entity)) ||
        !kl_transform_reserve(world, (void **)&st->memo, &st->memo_cap, kl_slot_count(world), sizeof(kl_memo)) ||
        !kl_transform_reserve(world, &st->jobs_mem, &st->jobs_mem_cap, (int64_t)job_bytes, 1) ||
        (deferred && !kl_transform_reserve(world, (void **)&st->scratch, &st->scratch_cap, missing,
                                           sizeof(float[16]))))
        return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_transform_propagate: out of memory");
    if (st->memo_cap > memo_before)
        memset(st->memo + memo_before, 0, sizeof(kl_memo) * (size_t)(st->memo_cap - memo_before));
    if (missing > 0 && !deferred) {
        int64_t n = 0;
        kiln_iter it;
        kiln_query_iter(st->missing, &it);
        while (kiln_query_next(&it))
            for (int32_t r = 0; r < it.count; r++) st->pending[n++] = it.entities[r];
        /* the schedule's room first: after the adds nothing may fail */
        if (!reserve_levels(world, st, kiln_query_count(st->linked)))
            return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_transform_propagate: out of memory");
        kiln_result r = add_missing(world, st, n);
        if (r != KILN_OK) return r;
        stats.added = n;
        p.full = true;
    }
    if (!p.full && (kl_query_structure_tick(st->compute) >= p.since ||
                    kl_query_structure_tick(st->linked) >= p.since))
        p.full = true;
    /* Nothing to do when no LocalTransform or Parent was written since the last call (a
     * dying parent shows as a structure change above, unless it had neither component and
     * so counted as identity, alive or dead). */
    bool links_changed = kl_query_column_tick(st->linked, 0) >= p.since;
    if (!p.full && !links_changed && kl_query_column_tick(st->compute, 0) < p.since &&
        kl_query_column_tick(st->compute, 2) < p.since && !(deferred && missing > 0)) {
        st->last_tick = world->tick;
        if (dest) *dest = stats;
        return KILN_OK;
    }
    /* A failing chain (a cycle) is reported, but every other entity is still updated. */
    kiln_result result = KILN_OK;
    if (!st->nodes_valid || p.full || links_changed || (deferred && missing > 0))
        result = build_levels(world, st, deferred && missing > 0);
    if (result == KILN_ERR_OUT_OF_MEMORY) return result;
    kiln_commands *q = queue ? queue : deferred ? kl_defer_queue(world) : NULL;
    int64_t mark = 0;
    if (deferred && st->pending_count > 0) {
        kiln_result r = queue_missing(world, st, q, queue != NULL, &mark);
        if (r != KILN_OK) {
            st->pending_count = 0;
            return r;
        }
    }
    if (p.full || kl_query_column_tick(st->roots, 0) >= p.since) {
        kiln_result r = kiln_parallel_for(threads > 1 ? jobs : NULL, st->roots, KL_ROOT_RANGE, root_rows, &p);
        if (r != KILN_OK) {
            /* the adds queued above still hold identity matrices: take them back */
            if (deferred && st->pending_count > 0) kl_commands_truncate(q, mark);
            st->pending_count = 0;
            return r == KILN_ERR_OUT_OF_MEMORY
                       ? kl_fail(world, r, "kiln_transform_propagate: out of memory")
                       : r;
        }
    }
    run_levels(&p, jobs, threads);
    stats.computed = atomic_load_explicit(&p.computed, memory_order_relaxed);
    stats.updated = atomic_load_explicit(&p.updated, memory_order_relaxed);
    if (deferred && st->pending_count > 0) {
        fill_queued(st, q, mark);
        stats.added += st->pending_count;
        st->pending_count = 0;
    }
    if (result == KILN_OK) st->last_tick = world->tick;
    if (dest) *dest = stats;
    return result;
}

kiln_result kiln_transform_propagate(kiln_world *world, kiln_transform_propagate_stats *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return kl_transform_propagate(world, NULL, NULL, dest);
}

kiln_result kiln_transform_propagate_parallel(kiln_world *world, kiln_jobs *jobs,
                                              kiln_transform_propagate_stats *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    return kl_transform_propagate(world, NULL, jobs, dest);
}
