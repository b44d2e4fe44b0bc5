/* bench_transform.c: transform propagation against the loop a user would write: cglm's
 * glm_quat_mat4, glm_scale and a translation per entity over plain arrays, level by level
 * for trees. Every case checks kiln's WorldTransforms against the arrays it raced. */
#include "bench_transform.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_measure.h"
#include "bench_util.h"
#include "kiln_transform.h"

#define DEPTH 4 /* levels of the trees of the changed and unchanged cases */

typedef struct prop_ctx {
    case_state state;
    int64_t n;
    int depth;               /* 1: roots only; DEPTH: trees, entity i's parent is i - 1 unless i % DEPTH == 0 */
    bool change;             /* each sample moves every local first (untimed) */
    float wobble;
    kiln_world *world;
    kiln_transform_ids ids;
    kiln_query *locals;      /* LocalTransform, to move them */
    kiln_jobs *jobs;         /* the parallel case's pool, else NULL */
    kiln_entity *ents;
    /* the plain side, level by level: entity i is level i % depth, entry i / depth of it */
    kiln_local_transform *local[DEPTH];
    int32_t *parent[DEPTH];  /* index into the level above */
    mat4 *out[DEPTH];
    int64_t per_level;
    float kiln_wobble, plain_wobble;
} prop_ctx;

/* The user's compose: rotation, scale, translation, with cglm's own calls. */
static inline void plain_compose(const kiln_local_transform *t, mat4 dest) {
    versor q = {t->rotation[0], t->rotation[1], t->rotation[2], t->rotation[3]};
    vec3 s = {t->scale[0], t->scale[1], t->scale[2]};
    glm_quat_mat4(q, dest);
    glm_scale(dest, s);
    dest[3][0] = t->position[0];
    dest[3][1] = t->position[1];
    dest[3][2] = t->position[2];
}

static void move_plain(prop_ctx *c) {
    c->plain_wobble = -c->plain_wobble;
    for (int d = 0; d < c->depth; d++)
        for (int64_t j = 0; j < c->per_level; j++) c->local[d][j].position[0] += c->plain_wobble;
}

static void move_kiln(prop_ctx *c) {
    c->kiln_wobble = -c->kiln_wobble; /* a real change every time, back and forth */
    kiln_iter it;
    kiln_query_iter(c->locals, &it);
    while (kiln_query_next(&it)) {
        kiln_local_transform *l = it.columns[0];
        for (int32_t r = 0; r < it.count; r++) {
            l[r].position[0] += c->kiln_wobble;
            kiln_iter_mark_changed(&it, 0, r);
        }
    }
}

static double plain_sample(void *ctx) {
    prop_ctx *c = ctx;
    if (c->change) move_plain(c);
    double t = bench_now_ns();
    const kiln_local_transform *l0 = c->local[0];
    mat4 *o0 = c->out[0];
    for (int64_t j = 0; j < c->per_level; j++) plain_compose(&l0[j], o0[j]);
    for (int d = 1; d < c->depth; d++) {
        const kiln_local_transform *l = c->local[d];
        const int32_t *par = c->parent[d];
        mat4 *up = c->out[d - 1], *o = c->out[d];
        for (int64_t j = 0; j < c->per_level; j++) {
            mat4 m;
            plain_compose(&l[j], m);
            glm_mat4_mul(up[par[j]], m, o[j]);
        }
    }
    t = bench_now_ns() - t;
    bench_consume((uint64_t)c->out[c->depth - 1][c->per_level - 1][3][0]);
    return t;
}

/* One propagation, timed; jobs NULL runs inline. Checks that it rewrote what moved. */
static double kiln_run(prop_ctx *c, kiln_jobs *jobs) {
    kiln_tick_advance(c->world);
    if (c->change) move_kiln(c);
    kiln_transform_propagate_stats stats;
    double t = bench_now_ns();
    kiln_result r = kiln_transform_propagate_parallel(c->world, jobs, &stats);
    t = bench_now_ns() - t;
    if (!bench_check_call(&c->state, c->world, r, "kiln_transform_propagate")) return t;
    if (c->change && stats.updated != c->n)
        bench_fail(&c->state, "%lld of %lld WorldTransforms rewritten", (long long)stats.updated,
                   (long long)c->n);
    if (!c->change && stats.computed != 0)
        bench_fail(&c->state, "%lld entities recomputed with nothing changed", (long long)stats.computed);
    return t;
}

static double kiln_sample(void *ctx) { return kiln_run(ctx, ((prop_ctx *)ctx)->jobs); }

static double kiln_inline_sample(void *ctx) { return kiln_run(ctx, NULL); }

/* kiln's matrices agree with the plain arrays (within float noise: glm_scale vs the header's
 * compose, glm_mat4_mul on copies); in the parallel case both sides are kiln. */
static bool check_worlds(void *ctx) {
    prop_ctx *c = ctx;
    if (c->jobs) return true; /* both sides move the same world: checked by the stats */
    for (int64_t i = 0; i < c->n; i++) {
        const kiln_world_transform *w = kiln_get(c->world, c->ents[i], c->ids.world);
        if (!w) return bench_fail(&c->state, "entity %lld has no WorldTransform", (long long)i);
        const float *got = &w->matrix[0][0];
        const float *want = &c->out[i % c->depth][i / c->depth][0][0];
        for (int k = 0; k < 16; k++)
            if (fabsf(got[k] - want[k]) > 1e-3f * (1.0f + fabsf(want[k])))
                return bench_fail(&c->state, "entity %lld: element %d is %g, the plain loop %g",
                                  (long long)i, k, (double)got[k], (double)want[k]);
    }
    return true;
}

static void run_case(const bench_config *config, bench_result *dest, int depth, bool change, bool parallel) {
    prop_ctx *c = bench_xcalloc(1, sizeof *c);
    c->n = config->small_entities - config->small_entities % DEPTH;
    c->depth = depth;
    c->per_level = c->n / depth;
    c->change = change;
    c->kiln_wobble = c->plain_wobble = 0.5f;
    c->world = kiln_world_create(NULL);
    c->ents = bench_xmalloc(sizeof(kiln_entity) * (size_t)c->n);
    for (int d = 0; d < depth; d++) {
        c->local[d] = bench_xmalloc(sizeof(kiln_local_transform) * (size_t)c->per_level);
        c->parent[d] = bench_xmalloc(sizeof(int32_t) * (size_t)c->per_level);
        c->out[d] = aligned_alloc(32, sizeof(mat4) * (size_t)c->per_level);
        if (!c->out[d]) exit(2);
    }
    bool ok = c->world && bench_check_call(&c->state, c->world, kiln_transform_init(c->world, &c->ids),
                                           "kiln_transform_init");
    for (int64_t i = 0; ok && i < c->n; i++) {
        kiln_local_transform t = kiln_transform_local_identity();
        float a = (float)(i % 360) * 0.0174533f;
        versor q;
        glm_quatv(q, a, (vec3){0.0f, 0.6f, 0.8f});
        memcpy(t.rotation, q, sizeof q);
        t.position[0] = (float)(i % 7);
        t.position[1] = 1.0f;
        t.scale[0] = 1.0f + (float)(i % 3) * 0.25f;
        int d = (int)(i % depth);
        int64_t j = i / depth;
        c->local[d][j] = t;
        c->parent[d][j] = (int32_t)j;
        ok = bench_check_call(&c->state, c->world,
                              kiln_spawn_with(c->world, &c->ids.local, (const void *[]){&t}, 1, &c->ents[i]),
                              "kiln_spawn_with") &&
             (d == 0 || bench_check_call(&c->state, c->world,
                                         kiln_transform_set_parent(c->world, c->ents[i], c->ents[i - 1]),
                                         "kiln_transform_set_parent"));
    }
    if (ok) {
        kiln_query_create(c->world, &(kiln_query_desc){.with = {c->ids.local}}, &c->locals);
        /* settle: WorldTransform added everywhere, then nothing changed for two ticks */
        for (int k = 0; k < 3; k++) {
            kiln_transform_propagate(c->world, NULL);
            kiln_tick_advance(c->world);
        }
        bool change_now = c->change;
        c->change = false; /* the plain matrices of the settled world, nothing moved */
        plain_sample(c);
        c->change = change_now;
        if (parallel) c->jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1}); /* + the caller */
        if (parallel && !c->jobs) ok = bench_fail(&c->state, "kiln_jobs_create failed");
    }
    if (ok)
        bench_measure(config, c, kiln_sample, parallel ? kiln_inline_sample : plain_sample, check_worlds, 1,
                      (double)c->n, dest);
    else
        bench_setup_failed(&c->state, dest);
    kiln_jobs_destroy(c->jobs);
    kiln_query_destroy(c->locals);
    kiln_world_destroy(c->world);
    for (int d = 0; d < depth; d++) {
        free(c->local[d]);
        free(c->parent[d]);
        free(c->out[d]);
    }
    free(c->ents);
    free(c);
}

void run_propagate_roots(const bench_config *config, bench_result *dest) { run_case(config, dest, 1, true, false); }
void run_propagate_changed(const bench_config *config, bench_result *dest) { run_case(config, dest, DEPTH, true, false); }
void run_propagate_parallel(const bench_config *config, bench_result *dest) { run_case(config, dest, 1, true, true); }
void run_propagate_unchanged(const bench_config *config, bench_result *dest) { run_case(config, dest, DEPTH, false, false); }
