/* transform_fixture.c: the transform suites' scene, trees and cglm model. Expected matrices
 * come from the model, never from the world under test. */
#include "transform_fixture.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *scene_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    scene *s = ud;
    pthread_mutex_lock(&s->lock);
    void *result = test_allocator_fn(&s->alloc, ptr, osize, nsize);
    pthread_mutex_unlock(&s->lock);
    return result;
}

void scene_open(scene *s) {
    test_allocator_init(&s->alloc);
    pthread_mutex_init(&s->lock, NULL);
    s->world = kiln_world_create(&(kiln_world_desc){.alloc = scene_alloc_fn, .alloc_ud = s});
    ck_assert_ptr_nonnull(s->world);
    ck_assert_int_eq(kiln_transform_init(s->world, &s->ids), KILN_OK);
    static const char *names[TAG_COUNT] = {"TagA", "TagB", "TagC", "TagD"};
    for (int i = 0; i < TAG_COUNT; i++) s->tags[i] = test_register_tag(s->world, names[i]);
}

void scene_close(scene *s) {
    kiln_world_destroy(s->world);
    pthread_mutex_destroy(&s->lock);
    ck_assert_int_eq(s->alloc.live_bytes, 0);
    ck_assert_int_eq(s->alloc.bad_osize, 0);
}

uint32_t lcg_next(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8;
}

kiln_local_transform sample_local(int i) {
    kiln_local_transform t;
    vec3 axis = {1.0f, (float)(i % 3), 0.5f};
    versor q;
    glm_quatv(q, 0.35f * (float)(i + 1), axis);
    t.position[0] = 0.7f * (float)i - 3.0f;
    t.position[1] = (float)((i * 37) % 11) * 0.25f - 1.0f;
    t.position[2] = 0.125f * (float)(i % 5);
    memcpy(t.rotation, q, sizeof t.rotation);
    t.scale[0] = 1.0f + 0.1f * (float)(i % 4);
    t.scale[1] = 0.8f + 0.05f * (float)(i % 3);
    t.scale[2] = 1.1f;
    return t;
}

void reference_local(const kiln_local_transform *t, mat4 dest) {
    vec3 pos = {t->position[0], t->position[1], t->position[2]};
    vec3 scale = {t->scale[0], t->scale[1], t->scale[2]};
    versor q = {t->rotation[0], t->rotation[1], t->rotation[2], t->rotation[3]};
    glm_mat4_identity(dest);
    glm_translate(dest, pos);
    glm_quat_rotate(dest, q, dest);
    glm_scale(dest, scale);
}

void model_world(const node *nodes, int i, mat4 dest) {
    mat4 parent, local;
    if (nodes[i].parent >= 0) model_world(nodes, nodes[i].parent, parent);
    else glm_mat4_identity(parent);
    if (nodes[i].has_local) reference_local(&nodes[i].local, local);
    else glm_mat4_identity(local);
    glm_mat4_mul(parent, local, dest);
}

void assert_matrix_near(const float *actual, mat4 expected, const char *what) {
    for (int c = 0; c < 4; c++)
        for (int r = 0; r < 4; r++) {
            float a = actual[c * 4 + r], e = expected[c][r];
            float tol = 1e-4f * (fabsf(e) > 1.0f ? fabsf(e) : 1.0f);
            ck_assert_msg(fabsf(a - e) <= tol, "%s: matrix[%d][%d] is %.7g, expected %.7g", what, c,
                          r, (double)a, (double)e);
        }
}

const float *world_matrix(const scene *s, kiln_entity e) {
    const kiln_world_transform *wt = kiln_get(s->world, e, s->ids.world);
    char buf[32];
    ck_assert_msg(wt != NULL, "entity %s has no WorldTransform", test_entity_string(e, buf));
    return &wt->matrix[0][0];
}

void assert_scene_matches_model(const scene *s, const node *nodes, int n,
                                const kiln_entity *handles) {
    for (int i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof what, "node %d", i);
        if (!nodes[i].has_local) {
            ck_assert_msg(!kiln_has(s->world, handles[i], s->ids.world),
                          "%s has no LocalTransform but got a WorldTransform", what);
            continue;
        }
        mat4 expected;
        model_world(nodes, i, expected);
        assert_matrix_near(world_matrix(s, handles[i]), expected, what);
    }
}

int make_tree(node *nodes, int n, uint32_t seed) {
    uint32_t st = seed;
    for (int i = 0; i < n; i++) {
        nodes[i].parent = (i == 0 || i % 13 == 0) ? -1 : (int)(i - 1 - (int)(lcg_next(&st) % (uint32_t)(i < 5 ? i : 5)));
        nodes[i].has_local = (i % 7) != 3;
        nodes[i].local = sample_local(i);
    }
    int with_local = 0;
    for (int i = 0; i < n; i++) with_local += nodes[i].has_local;
    return with_local;
}

void build_in_order(scene *s, const node *nodes, int n, kiln_entity *handles) {
    for (int i = 0; i < n; i++) {
        kiln_component comps[2];
        const void *values[2];
        int32_t count = 0;
        kiln_parent link = {nodes[i].parent >= 0 ? handles[nodes[i].parent] : KILN_NULL_ENTITY};
        if (nodes[i].has_local) {
            comps[count] = s->ids.local;
            values[count++] = &nodes[i].local;
        }
        if (nodes[i].parent >= 0) {
            comps[count] = s->ids.parent;
            values[count++] = &link;
        }
        ck_assert_int_eq(kiln_spawn_with(s->world, comps, values, count, &handles[i]), KILN_OK);
    }
}

void build_shuffled(scene *s, const node *nodes, int n, kiln_entity *handles, uint32_t seed) {
    for (int i = n - 1; i >= 0; i--) ck_assert_int_eq(kiln_spawn(s->world, &handles[i]), KILN_OK);
    int order[MAX_NODES];
    for (int i = 0; i < n; i++) order[i] = i;
    uint32_t st = seed;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(lcg_next(&st) % (uint32_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int k = 0; k < n; k++) {
        int i = order[k];
        uint32_t mask = lcg_next(&st) % (1u << TAG_COUNT);
        for (int t = 0; t < TAG_COUNT; t++)
            if (mask & (1u << t)) ck_assert_int_eq(kiln_add(s->world, handles[i], s->tags[t], NULL), KILN_OK);
        kiln_parent link = {nodes[i].parent >= 0 ? handles[nodes[i].parent] : KILN_NULL_ENTITY};
        bool parent_first = lcg_next(&st) & 1u;
        if (parent_first && nodes[i].parent >= 0)
            ck_assert_int_eq(kiln_add(s->world, handles[i], s->ids.parent, &link), KILN_OK);
        if (nodes[i].has_local)
            ck_assert_int_eq(kiln_add(s->world, handles[i], s->ids.local, &nodes[i].local), KILN_OK);
        if (!parent_first && nodes[i].parent >= 0)
            ck_assert_int_eq(kiln_add(s->world, handles[i], s->ids.parent, &link), KILN_OK);
        /* Some entities start with a (garbage) WorldTransform, the others get one added. */
        if (nodes[i].has_local && (lcg_next(&st) % 3u) == 0) {
            kiln_world_transform junk;
            memset(&junk, 0x3f, sizeof junk);
            ck_assert_int_eq(kiln_add(s->world, handles[i], s->ids.world, &junk), KILN_OK);
        }
    }
}

kiln_entity spawn_node(scene *s, kiln_entity parent, const kiln_local_transform *local) {
    kiln_component comps[2];
    const void *values[2];
    int32_t count = 0;
    kiln_parent link = {parent};
    if (local) {
        comps[count] = s->ids.local;
        values[count++] = local;
    }
    if (parent != KILN_NULL_ENTITY) {
        comps[count] = s->ids.parent;
        values[count++] = &link;
    }
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(s->world, comps, values, count, &e), KILN_OK);
    return e;
}

void link_unchecked(scene *s, kiln_entity e, kiln_entity parent) {
    if (!kiln_has(s->world, e, s->ids.parent))
        ck_assert_int_eq(kiln_add(s->world, e, s->ids.parent, NULL), KILN_OK);
    kiln_parent *link = kiln_get_mut(s->world, e, s->ids.parent);
    ck_assert_ptr_nonnull(link);
    link->entity = parent;
}

kiln_result propagate(scene *s, kiln_transform_propagate_stats *stats) {
    return kiln_transform_propagate(s->world, stats);
}

void propagate_ok(scene *s, kiln_transform_propagate_stats *stats) {
    kiln_result r = propagate(s, stats);
    ck_assert_msg(r == KILN_OK, "propagate failed: %s", kiln_world_error(s->world));
}

bool names_entity(const char *msg, kiln_entity e) {
    char buf[32];
    test_entity_string(e, buf);
    size_t len = strlen(buf);
    for (const char *p = strstr(msg, buf); p; p = strstr(p + 1, buf)) {
        bool left = p == msg || !(p[-1] >= '0' && p[-1] <= '9');
        bool right = !(p[len] >= '0' && p[len] <= '9');
        if (left && right) return true;
    }
    return false;
}

bool in_subtree(const node *nodes, int i, int top) {
    for (; i >= 0; i = nodes[i].parent)
        if (i == top) return true;
    return false;
}
