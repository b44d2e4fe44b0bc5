/* test_transform.c: Check suite for the hierarchy and transform propagation (kiln_transform.h).
 * Expected matrices come from a model of the tree computed with cglm, never from the world. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

#define MAX_NODES 512
#define TAG_COUNT 4

/* A node of a tree described on the test side: parent is an index into the same array (-1 for
 * a root); nodes are listed parents first. */
typedef struct node {
    int parent;
    bool has_local;
    kiln_local_transform local;
} node;

typedef struct scene {
    test_allocator alloc;
    pthread_mutex_t lock;  /* the hook must be thread-safe once systems run on a pool */
    kiln_world *world;
    kiln_transform_ids ids;
    kiln_component tags[TAG_COUNT];
} scene;

static void *scene_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    scene *s = ud;
    pthread_mutex_lock(&s->lock);
    void *result = test_allocator_fn(&s->alloc, ptr, osize, nsize);
    pthread_mutex_unlock(&s->lock);
    return result;
}

/* The scene must not move while its world lives (the hook holds its address). */
static void scene_open(scene *s) {
    test_allocator_init(&s->alloc);
    pthread_mutex_init(&s->lock, NULL);
    s->world = kiln_world_create(&(kiln_world_desc){.alloc = scene_alloc_fn, .alloc_ud = s});
    ck_assert_ptr_nonnull(s->world);
    ck_assert_int_eq(kiln_transform_init(s->world, &s->ids), KILN_OK);
    static const char *names[TAG_COUNT] = {"TagA", "TagB", "TagC", "TagD"};
    for (int i = 0; i < TAG_COUNT; i++) s->tags[i] = test_register_tag(s->world, names[i]);
}

static void scene_close(scene *s) {
    kiln_world_destroy(s->world);
    pthread_mutex_destroy(&s->lock);
    ck_assert_int_eq(s->alloc.live_bytes, 0);
    ck_assert_int_eq(s->alloc.bad_osize, 0);
}

static uint32_t lcg_next(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8;
}

/* A varied local transform: translation, rotation about a tilted axis, non-uniform scale. */
static kiln_local_transform sample_local(int i) {
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

/* translate * rotate * scale, built with cglm's own matrix operations (not the header's
 * kiln_transform_local_to_mat4, which is under test as much as the core). */
static void reference_local(const kiln_local_transform *t, mat4 dest) {
    vec3 pos = {t->position[0], t->position[1], t->position[2]};
    vec3 scale = {t->scale[0], t->scale[1], t->scale[2]};
    versor q = {t->rotation[0], t->rotation[1], t->rotation[2], t->rotation[3]};
    glm_mat4_identity(dest);
    glm_translate(dest, pos);
    glm_quat_rotate(dest, q, dest);
    glm_scale(dest, scale);
}

/* The expected world matrix of node i: parent world * local, identity standing in for a
 * missing parent or local. */
static void model_world(const node *nodes, int i, mat4 dest) {
    mat4 parent, local;
    if (nodes[i].parent >= 0) model_world(nodes, nodes[i].parent, parent);
    else glm_mat4_identity(parent);
    if (nodes[i].has_local) reference_local(&nodes[i].local, local);
    else glm_mat4_identity(local);
    glm_mat4_mul(parent, local, dest);
}

static void assert_matrix_near(const float *actual, mat4 expected, const char *what) {
    for (int c = 0; c < 4; c++)
        for (int r = 0; r < 4; r++) {
            float a = actual[c * 4 + r], e = expected[c][r];
            float tol = 1e-4f * (fabsf(e) > 1.0f ? fabsf(e) : 1.0f);
            ck_assert_msg(fabsf(a - e) <= tol, "%s: matrix[%d][%d] is %.7g, expected %.7g", what, c,
                          r, (double)a, (double)e);
        }
}

static const float *world_matrix(const scene *s, kiln_entity e) {
    const kiln_world_transform *wt = kiln_get(s->world, e, s->ids.world);
    char buf[32];
    ck_assert_msg(wt != NULL, "entity %s has no WorldTransform", test_entity_string(e, buf));
    return &wt->matrix[0][0];
}

/* Checks every node with a local against the model, and that nodes without one have no
 * WorldTransform. */
static void assert_scene_matches_model(const scene *s, const node *nodes, int n,
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

/* A random tree: a few roots, parents chosen among the previous five nodes (so branches run
 * several levels deep), some nodes without LocalTransform. */
static int make_tree(node *nodes, int n, uint32_t seed) {
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

/* Spawns the tree parents first, each entity with all its components at once. */
static void build_in_order(scene *s, const node *nodes, int n, kiln_entity *handles) {
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

/* Spawns the tree children first (reverse order, so every child has a lower handle than its
 * parent), then adds components node by node in a shuffled order, each node first getting a
 * seed-dependent set of tags, so archetypes are created in another order and rows land in
 * other places. Components are added in varying order per node. */
static void build_shuffled(scene *s, const node *nodes, int n, kiln_entity *handles, uint32_t seed) {
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

static kiln_entity spawn_node(scene *s, kiln_entity parent, const kiln_local_transform *local) {
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

static kiln_result propagate(scene *s, kiln_transform_propagate_stats *stats) {
    return kiln_transform_propagate(s->world, stats);
}

static void propagate_ok(scene *s, kiln_transform_propagate_stats *stats) {
    kiln_result r = propagate(s, stats);
    ck_assert_msg(r == KILN_OK, "propagate failed: %s", kiln_world_error(s->world));
}

/* True when msg mentions e as a whole token ("12v1" but not inside "112v1"). */
static bool names_entity(const char *msg, kiln_entity e) {
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

static int compare_handles(const void *a, const void *b) {
    kiln_entity x = *(const kiln_entity *)a, y = *(const kiln_entity *)b;
    return (x > y) - (x < y);
}

/* kiln_transform_children equals exactly the expected set, in handle order. */
static void assert_children(scene *s, kiln_entity parent, const kiln_entity *expected, int n) {
    kiln_entity sorted[64], got[64];
    ck_assert_int_le(n, 64);
    if (n > 0) memcpy(sorted, expected, sizeof(kiln_entity) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(kiln_entity), compare_handles);
    memset(got, 0, sizeof got);
    int32_t count = kiln_transform_children(s->world, parent, got, 64);
    ck_assert_int_eq(count, n);
    for (int i = 0; i < n; i++) {
        char a[32], b[32];
        ck_assert_msg(got[i] == sorted[i], "child %d is %s, expected %s", i,
                      test_entity_string(got[i], a), test_entity_string(sorted[i], b));
    }
}

static kiln_entity parent_link(const scene *s, kiln_entity child) {
    const kiln_parent *p = kiln_get(s->world, child, s->ids.parent);
    return p ? p->entity : KILN_NULL_ENTITY;
}

/* ------------------------------------------------------------------------------------------ */
/* setup                                                                                      */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(propagation, .timeout = 60);

KILN_TEST(propagation, transform_init_is_idempotent_and_registers_the_three_components) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_transform_ids ids, again;
    ck_assert(!kiln_transform_ids_get(world, &ids));
    ck_assert_int_eq(kiln_transform_init(world, &ids), KILN_OK);
    ck_assert_int_eq(kiln_transform_init(world, &again), KILN_OK);
    ck_assert_int_eq(kiln_transform_init(world, NULL), KILN_OK);
    ck_assert_uint_eq(again.parent, ids.parent);
    ck_assert_uint_eq(again.local, ids.local);
    ck_assert_uint_eq(again.world, ids.world);
    ck_assert_int_eq(kiln_component_count(world), 3);
    ck_assert_uint_eq(kiln_component_lookup(world, "Parent"), ids.parent);
    ck_assert_uint_eq(kiln_component_lookup(world, "LocalTransform"), ids.local);
    ck_assert_uint_eq(kiln_component_lookup(world, "WorldTransform"), ids.world);
    kiln_component_info info;
    ck_assert(kiln_component_info_get(world, ids.local, &info));
    ck_assert_uint_eq(info.size, sizeof(kiln_local_transform));
    ck_assert_int_eq(info.field_count, 3);
    ck_assert(kiln_component_info_get(world, ids.world, &info));
    ck_assert_uint_eq(info.size, sizeof(kiln_world_transform));
    ck_assert(kiln_transform_ids_get(world, &again));
    ck_assert_uint_eq(again.world, ids.world);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* propagation                                                                                */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST(propagation, world_matrix_is_parent_world_times_local_through_five_levels) {
    scene s;
    scene_open(&s);
    /* root -> a -> b -> c -> d, plus a sibling branch at each level */
    node nodes[9];
    int parents[9] = {-1, 0, 1, 2, 3, 0, 1, 2, 3};
    for (int i = 0; i < 9; i++) nodes[i] = (node){parents[i], true, sample_local(i + 1)};
    kiln_entity h[9];
    build_in_order(&s, nodes, 9, h);
    kiln_transform_propagate_stats stats;
    propagate_ok(&s, &stats);
    ck_assert_int_eq(stats.added, 9);
    ck_assert_int_eq(stats.computed, 9);
    assert_scene_matches_model(&s, nodes, 9, h);

    /* the deepest one, spelled out: W(d) = L(root) L(a) L(b) L(c) L(d) */
    mat4 expected = GLM_MAT4_IDENTITY_INIT, l;
    for (int i = 0; i <= 4; i++) {
        reference_local(&nodes[i].local, l);
        glm_mat4_mul(expected, l, expected);
    }
    assert_matrix_near(world_matrix(&s, h[4]), expected, "deepest");
    scene_close(&s);
}

KILN_TEST(propagation, a_random_forest_matches_the_cglm_model) {
    scene s;
    scene_open(&s);
    static node nodes[120];
    kiln_entity h[120];
    int with_local = make_tree(nodes, 120, 7u);
    build_in_order(&s, nodes, 120, h);
    kiln_transform_propagate_stats stats;
    propagate_ok(&s, &stats);
    ck_assert_int_eq(stats.added, with_local);
    assert_scene_matches_model(&s, nodes, 120, h);
    scene_close(&s);
}

KILN_TEST(propagation, a_parent_without_local_transform_passes_identity_and_gets_no_world_transform) {
    scene s;
    scene_open(&s);
    kiln_local_transform root_local = sample_local(1), child_local = sample_local(2);
    kiln_entity root = spawn_node(&s, KILN_NULL_ENTITY, &root_local);
    kiln_entity pivot = spawn_node(&s, root, NULL); /* Parent only */
    kiln_entity child = spawn_node(&s, pivot, &child_local);
    /* a bare entity (no Parent, no LocalTransform) as a parent is an identity root */
    kiln_entity bare;
    ck_assert_int_eq(kiln_spawn(s.world, &bare), KILN_OK);
    kiln_entity orphan = spawn_node(&s, bare, &child_local);
    kiln_transform_propagate_stats stats;
    propagate_ok(&s, &stats);
    ck_assert(!kiln_has(s.world, pivot, s.ids.world));
    ck_assert(!kiln_has(s.world, bare, s.ids.world));
    ck_assert_int_eq(stats.added, 3);
    ck_assert_int_eq(stats.computed, 3);
    mat4 r, c, expected;
    reference_local(&root_local, r);
    reference_local(&child_local, c);
    glm_mat4_mul(r, c, expected);
    assert_matrix_near(world_matrix(&s, child), expected, "child under a pivot");
    assert_matrix_near(world_matrix(&s, orphan), c, "child of a bare entity");

    /* the pivot still relays its own parent's changes */
    kiln_tick_advance(s.world);
    kiln_local_transform moved = sample_local(9);
    ck_assert_int_eq(kiln_set(s.world, root, s.ids.local, &moved), KILN_OK);
    propagate_ok(&s, &stats);
    reference_local(&moved, r);
    glm_mat4_mul(r, c, expected);
    assert_matrix_near(world_matrix(&s, child), expected, "child after the root moved");
    ck_assert(!kiln_has(s.world, pivot, s.ids.world));

    /* and a change of the pivot's own Parent, with no structural change anywhere */
    kiln_local_transform other_local = sample_local(11);
    kiln_entity other = spawn_node(&s, KILN_NULL_ENTITY, &other_local);
    propagate_ok(&s, NULL);
    kiln_tick_advance(s.world);
    propagate_ok(&s, NULL);
    kiln_tick_advance(s.world);
    ck_assert_int_eq(kiln_set(s.world, pivot, s.ids.parent, &(kiln_parent){other}), KILN_OK);
    propagate_ok(&s, &stats);
    ck_assert_int_eq(stats.updated, 1);
    reference_local(&other_local, r);
    glm_mat4_mul(r, c, expected);
    assert_matrix_near(world_matrix(&s, child), expected, "child after the pivot moved");
    scene_close(&s);
}

KILN_TEST(propagation, a_parent_losing_its_local_transform_becomes_identity_for_its_children) {
    scene s;
    scene_open(&s);
    kiln_local_transform gl = sample_local(1), pl = sample_local(2), cl = sample_local(3);
    /* a linked parent (grand -> parent -> child) and a root parent (root -> leaf) */
    kiln_entity grand = spawn_node(&s, KILN_NULL_ENTITY, &gl);
    kiln_entity parent = spawn_node(&s, grand, &pl);
    kiln_entity child = spawn_node(&s, parent, &cl);
    kiln_entity root = spawn_node(&s, KILN_NULL_ENTITY, &pl);
    kiln_entity leaf = spawn_node(&s, root, &cl);
    propagate_ok(&s, NULL);
    kiln_tick_advance(s.world);
    propagate_ok(&s, NULL);
    kiln_tick_advance(s.world);
    /* one at a time: each is a different structural change */
    mat4 g, c, expected;
    reference_local(&gl, g);
    reference_local(&cl, c);
    glm_mat4_mul(g, c, expected);
    ck_assert_int_eq(kiln_remove(s.world, root, s.ids.local, NULL), KILN_OK);
    kiln_tick_advance(s.world);
    propagate_ok(&s, NULL);
    assert_matrix_near(world_matrix(&s, leaf), c, "child of a root without local");
    kiln_tick_advance(s.world);
    ck_assert_int_eq(kiln_remove(s.world, parent, s.ids.local, NULL), KILN_OK);
    kiln_tick_advance(s.world);
    propagate_ok(&s, NULL);
    assert_matrix_near(world_matrix(&s, child), expected, "child of a linked parent without local");
    scene_close(&s);
}

KILN_TEST(propagation, missing_world_transforms_are_added_and_counted) {
    scene s;
    scene_open(&s);
    kiln_local_transform l = sample_local(3);
    kiln_entity with = spawn_node(&s, KILN_NULL_ENTITY, &l);
    kiln_world_transform zero = {{{0}}};
    ck_assert_int_eq(kiln_add(s.world, with, s.ids.world, &zero), KILN_OK);
    kiln_entity without[3];
    for (int i = 0; i < 3; i++) without[i] = spawn_node(&s, with, &l);
    kiln_transform_propagate_stats stats;
    propagate_ok(&s, &stats);
    ck_assert_int_eq(stats.added, 3);
    for (int i = 0; i < 3; i++) ck_assert(kiln_has(s.world, without[i], s.ids.world));
    mat4 m, expected;
    reference_local(&l, m);
    glm_mat4_mul(m, m, expected);
    assert_matrix_near(world_matrix(&s, without[2]), expected, "added");
    assert_matrix_near(world_matrix(&s, with), m, "existing");
    propagate_ok(&s, &stats);
    ck_assert_int_eq(stats.added, 0);
    scene_close(&s);
}

KILN_TEST(propagation, spawn_order_and_archetype_order_do_not_change_the_matrices) {
    static node nodes[150];
    kiln_entity ref_h[150], h[150];
    make_tree(nodes, 150, 42u);
    scene ref;
    scene_open(&ref);
    build_in_order(&ref, nodes, 150, ref_h);
    propagate_ok(&ref, NULL);
    assert_scene_matches_model(&ref, nodes, 150, ref_h);
    for (uint32_t seed = 1; seed <= 4; seed++) {
        scene s;
        scene_open(&s);
        build_shuffled(&s, nodes, 150, h, seed * 7919u);
        kiln_world_stats ws;
        kiln_world_stats_get(s.world, &ws);
        ck_assert_int_gt(ws.archetypes, 8); /* the tags really spread the rows */
        propagate_ok(&s, NULL);
        for (int i = 0; i < 150; i++) {
            if (!nodes[i].has_local) {
                ck_assert(!kiln_has(s.world, h[i], s.ids.world));
                continue;
            }
            ck_assert_msg(memcmp(world_matrix(&s, h[i]), world_matrix(&ref, ref_h[i]),
                                 sizeof(float) * 16) == 0,
                          "seed %u: node %d differs from the in-order build", seed, i);
        }
        scene_close(&s);
    }
    scene_close(&ref);
}

KILN_TEST(propagation, each_entity_is_computed_once_per_full_recompute) {
    scene s;
    scene_open(&s);
    static node nodes[200];
    kiln_entity h[200];
    int with_local = make_tree(nodes, 200, 99u);
    build_shuffled(&s, nodes, 200, h, 5u);
    kiln_transform_propagate_stats stats;
    propagate_ok(&s, &stats);
    ck_assert_int_eq(stats.computed, with_local);
    assert_scene_matches_model(&s, nodes, 200, h);

    /* a structural change to one entity forces a full recompute: still once each */
    kiln_tick_advance(s.world);
    ck_assert(nodes[1].has_local);
    ck_assert_int_eq(kiln_remove(s.world, h[1], s.ids.local, NULL), KILN_OK);
    ck_assert_int_eq(kiln_add(s.world, h[1], s.ids.local, &nodes[1].local), KILN_OK);
    propagate_ok(&s, &stats);
    ck_assert_int_eq(stats.computed, with_local);
    ck_assert_int_eq(stats.updated, 0); /* nothing actually moved */
    assert_scene_matches_model(&s, nodes, 200, h);
    scene_close(&s);
}

KILN_TEST(propagation, a_dead_parent_makes_the_child_a_root) {
    scene s;
    scene_open(&s);
    kiln_local_transform pl = sample_local(4), cl = sample_local(5), gl = sample_local(6);
    kiln_entity parent = spawn_node(&s, KILN_NULL_ENTITY, &pl);
    kiln_entity child = spawn_node(&s, parent, &cl);
    kiln_entity grandchild = spawn_node(&s, child, &gl);
    kiln_entity stale;
    ck_assert_int_eq(kiln_spawn(s.world, &stale), KILN_OK);
    ck_assert_int_eq(kiln_despawn(s.world, stale), KILN_OK);
    kiln_entity adopted = spawn_node(&s, stale, &cl); /* linked to a handle already dead */
    propagate_ok(&s, NULL);
    kiln_tick_advance(s.world);
    ck_assert_int_eq(kiln_despawn(s.world, parent), KILN_OK);
    propagate_ok(&s, NULL);
    mat4 c, g, expected;
    reference_local(&cl, c);
    reference_local(&gl, g);
    glm_mat4_mul(c, g, expected);
    assert_matrix_near(world_matrix(&s, child), c, "child of a dead parent");
    assert_matrix_near(world_matrix(&s, grandchild), expected, "grandchild");
    assert_matrix_near(world_matrix(&s, adopted), c, "linked to a stale handle");
    scene_close(&s);
}

/* Writes a Parent link through kiln_get_mut, the one path the Parent check does not guard,
 * to build the self links and cycles that propagation must survive. */
static void link_unchecked(scene *s, kiln_entity e, kiln_entity parent) {
    if (!kiln_has(s->world, e, s->ids.parent))
        ck_assert_int_eq(kiln_add(s->world, e, s->ids.parent, NULL), KILN_OK);
    kiln_parent *link = kiln_get_mut(s->world, e, s->ids.parent);
    ck_assert_ptr_nonnull(link);
    link->entity = parent;
}

KILN_TEST(propagation, a_parent_link_to_itself_makes_the_entity_a_root) {
    scene s;
    scene_open(&s);
    kiln_local_transform l = sample_local(7), cl = sample_local(8);
    kiln_entity e = spawn_node(&s, KILN_NULL_ENTITY, &l);
    link_unchecked(&s, e, e);
    kiln_entity child = spawn_node(&s, e, &cl);
    propagate_ok(&s, NULL);
    mat4 m, c, expected;
    reference_local(&l, m);
    reference_local(&cl, c);
    glm_mat4_mul(m, c, expected);
    assert_matrix_near(world_matrix(&s, e), m, "self-linked");
    assert_matrix_near(world_matrix(&s, child), expected, "its child");
    scene_close(&s);
}

/* A chain of n entities linked by writing Parent directly. root_first: handles and rows run
 * from the root down; otherwise from the leaf up. Returns the chain root first. */
static void build_chain(scene *s, kiln_entity *chain, int n, bool root_first) {
    kiln_local_transform l = kiln_transform_local_identity();
    l.position[0] = 1.0f;
    if (root_first) {
        for (int i = 0; i < n; i++) chain[i] = spawn_node(s, i ? chain[i - 1] : KILN_NULL_ENTITY, &l);
    } else {
        for (int i = n - 1; i >= 0; i--) ck_assert_int_eq(kiln_spawn(s->world, &chain[i]), KILN_OK);
        for (int i = n - 1; i >= 0; i--) {
            ck_assert_int_eq(kiln_add(s->world, chain[i], s->ids.local, &l), KILN_OK);
            if (i > 0)
                ck_assert_int_eq(kiln_add(s->world, chain[i], s->ids.parent, &(kiln_parent){chain[i - 1]}),
                                 KILN_OK);
        }
    }
}

KILN_TEST(propagation, a_chain_256_links_deep_propagates) {
    for (int order = 0; order < 2; order++) {
        scene s;
        scene_open(&s);
        kiln_entity chain[257];
        build_chain(&s, chain, 257, order == 0);
        propagate_ok(&s, NULL);
        const float *m = world_matrix(&s, chain[256]);
        ck_assert_float_eq_tol(m[12], 257.0f, 1e-3f);
        scene_close(&s);
    }
}

KILN_TEST(propagation, a_chain_deeper_than_256_fails_naming_an_entity_whatever_the_spawn_order) {
    /* Both orders are checked before failing, so the message tells which ones broke. */
    char problems[512] = "";
    for (int order = 0; order < 2; order++) {
        const char *label = order == 0 ? "root-first" : "leaf-first";
        scene s;
        scene_open(&s);
        kiln_entity chain[300];
        build_chain(&s, chain, 300, order == 0);
        kiln_result r = propagate(&s, NULL);
        const char *msg = kiln_world_error(s.world);
        bool named = false;
        for (int i = 257; i < 300; i++) named = named || names_entity(msg, chain[i]);
        size_t len = strlen(problems);
        if (r != KILN_ERR_INVALID_ARGUMENT)
            snprintf(problems + len, sizeof problems - len,
                     "[%s chain of 300: propagate returned \"%s\", expected invalid argument] ",
                     label, kiln_result_name(r));
        else if (!named)
            snprintf(problems + len, sizeof problems - len,
                     "[%s: error \"%s\" names no entity deeper than 256] ", label, msg);
        scene_close(&s);
    }
    ck_assert_msg(problems[0] == '\0', "%s", problems);
}

KILN_TEST(propagation, a_parent_cycle_written_directly_fails_naming_an_entity_in_it) {
    scene s;
    scene_open(&s);
    kiln_local_transform l = sample_local(2);
    kiln_entity a = spawn_node(&s, KILN_NULL_ENTITY, &l);
    kiln_entity b = spawn_node(&s, a, &l);
    kiln_entity c = spawn_node(&s, b, &l);
    propagate_ok(&s, NULL);
    kiln_tick_advance(s.world);
    /* close the loop a -> c behind the Parent check's back, through a pointer */
    link_unchecked(&s, a, c);
    ck_assert_int_eq(propagate(&s, NULL), KILN_ERR_INVALID_ARGUMENT);
    const char *msg = kiln_world_error(s.world);
    ck_assert_msg(names_entity(msg, a) || names_entity(msg, b) || names_entity(msg, c),
                  "error \"%s\" names none of the cycle", msg);

    link_unchecked(&s, a, b);
    kiln_world_clear_error(s.world);
    ck_assert_int_eq(propagate(&s, NULL), KILN_ERR_INVALID_ARGUMENT);
    msg = kiln_world_error(s.world);
    ck_assert_msg(names_entity(msg, a) || names_entity(msg, b), "error \"%s\" names none of the cycle",
                  msg);

    /* breaking the loop heals the hierarchy */
    ck_assert_int_eq(kiln_transform_set_parent(s.world, a, KILN_NULL_ENTITY), KILN_OK);
    propagate_ok(&s, NULL);
    mat4 m, expected;
    reference_local(&l, m);
    glm_mat4_mul(m, m, expected);
    glm_mat4_mul(expected, m, expected);
    assert_matrix_near(world_matrix(&s, c), expected, "c after the cycle broke");
    scene_close(&s);
}

KILN_TEST(propagation, entities_outside_a_cycle_are_still_updated) {
    scene s;
    scene_open(&s);
    kiln_local_transform l = sample_local(3);
    kiln_world_transform zero;
    memset(&zero, 0, sizeof zero);
    /* The cycle comes first in storage: same archetype, earlier rows. */
    kiln_component comps[3] = {s.ids.local, s.ids.world, s.ids.parent};
    kiln_entity x, y;
    const void *vx[3] = {&l, &zero, &(kiln_parent){KILN_NULL_ENTITY}};
    ck_assert_int_eq(kiln_spawn_with(s.world, comps, vx, 3, &x), KILN_OK);
    const void *vy[3] = {&l, &zero, &(kiln_parent){x}};
    ck_assert_int_eq(kiln_spawn_with(s.world, comps, vy, 3, &y), KILN_OK);
    link_unchecked(&s, x, y);
    kiln_entity root, kids[4];
    ck_assert_int_eq(kiln_spawn_with(s.world, comps, vx, 2, &root), KILN_OK);
    for (int i = 0; i < 4; i++) {
        const void *vk[3] = {&l, &zero, &(kiln_parent){root}};
        ck_assert_int_eq(kiln_spawn_with(s.world, comps, vk, 3, &kids[i]), KILN_OK);
    }
    ck_assert_int_eq(propagate(&s, NULL), KILN_ERR_INVALID_ARGUMENT);
    mat4 m, expected;
    reference_local(&l, m);
    glm_mat4_mul(m, m, expected);
    assert_matrix_near(world_matrix(&s, root), m, "root outside the cycle");
    for (int i = 0; i < 4; i++) assert_matrix_near(world_matrix(&s, kids[i]), expected, "child outside the cycle");
    scene_close(&s);
}

KILN_TEST(propagation, entities_outside_a_cycle_still_get_their_world_transform_when_deferred) {
    scene s;
    scene_open(&s);
    kiln_local_transform l = sample_local(5);
    kiln_entity x = spawn_node(&s, KILN_NULL_ENTITY, &l);
    kiln_entity y = spawn_node(&s, x, &l);
    link_unchecked(&s, x, y);
    kiln_entity root = spawn_node(&s, KILN_NULL_ENTITY, &l);
    kiln_entity kid = spawn_node(&s, root, &l);
    kiln_defer_begin(s.world);
    ck_assert_int_eq(propagate(&s, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_defer_end(s.world), KILN_OK);
    mat4 m, expected;
    reference_local(&l, m);
    glm_mat4_mul(m, m, expected);
    ck_assert_msg(kiln_has(s.world, root, s.ids.world) && kiln_has(s.world, kid, s.ids.world),
                  "entities outside the cycle got no WorldTransform");
    assert_matrix_near(world_matrix(&s, root), m, "root outside the cycle");
    assert_matrix_near(world_matrix(&s, kid), expected, "child outside the cycle");
    scene_close(&s);
}

KILN_TEST(propagation, unchanged_inputs_write_nothing_and_keep_change_ticks) {
    scene s;
    scene_open(&s);
    static node nodes[60];
    kiln_entity h[60];
    make_tree(nodes, 60, 3u);
    build_in_order(&s, nodes, 60, h);
    kiln_transform_propagate_stats stats;
    propagate_ok(&s, &stats);
    ck_assert_int_gt(stats.computed, 0);
    kiln_tick before[60];
    for (int i = 0; i < 60; i++) before[i] = kiln_changed_tick(s.world, h[i], s.ids.world);
    kiln_tick_advance(s.world);
    kiln_tick_advance(s.world);
    propagate_ok(&s, &stats);
    ck_assert_int_eq(stats.updated, 0);
    ck_assert_int_eq(stats.added, 0);
    for (int i = 0; i < 60; i++)
        ck_assert_uint_eq(kiln_changed_tick(s.world, h[i], s.ids.world), before[i]);
    kiln_tick_advance(s.world);
    propagate_ok(&s, &stats);
    ck_assert_int_eq(stats.computed, 0);
    ck_assert_int_eq(stats.updated, 0);
    /* rewriting a local with the same value recomputes it but writes nothing */
    kiln_tick_advance(s.world);
    ck_assert_int_eq(kiln_set(s.world, h[0], s.ids.local, &nodes[0].local), KILN_OK);
    propagate_ok(&s, &stats);
    ck_assert_int_ge(stats.computed, 1);
    ck_assert_int_eq(stats.updated, 0);
    ck_assert_uint_eq(kiln_changed_tick(s.world, h[0], s.ids.world), before[0]);
    scene_close(&s);
}

/* Whether node i descends from (or is) node top. */
static bool in_subtree(const node *nodes, int i, int top) {
    for (; i >= 0; i = nodes[i].parent)
        if (i == top) return true;
    return false;
}

KILN_TEST(propagation, changing_one_local_updates_exactly_that_entity_and_its_descendants) {
    scene s;
    scene_open(&s);
    static node nodes[80];
    kiln_entity h[80];
    make_tree(nodes, 80, 11u);
    build_shuffled(&s, nodes, 80, h, 17u);
    propagate_ok(&s, NULL);
    kiln_tick_advance(s.world);
    propagate_ok(&s, NULL);
    for (int pick = 1; pick < 80; pick += 9) {
        if (!nodes[pick].has_local) continue;
        kiln_tick_advance(s.world);
        nodes[pick].local.position[1] += 2.5f;
        nodes[pick].local.scale[2] *= 1.5f;
        ck_assert_int_eq(kiln_set(s.world, h[pick], s.ids.local, &nodes[pick].local), KILN_OK);
        /* Propagate a tick later: a change stamped with the tick of a propagation cannot be
         * told apart from one made after it, so it would be seen again next time. */
        kiln_tick t = kiln_tick_advance(s.world);
        kiln_transform_propagate_stats stats;
        propagate_ok(&s, &stats);
        int expected = 0;
        for (int i = 0; i < 80; i++) {
            if (!nodes[i].has_local) continue;
            bool inside = in_subtree(nodes, i, pick);
            expected += inside;
            ck_assert_msg((kiln_changed_tick(s.world, h[i], s.ids.world) == t) == inside,
                          "pick %d: node %d %s", pick, i,
                          inside ? "was not rewritten" : "was rewritten though outside the subtree");
        }
        ck_assert_int_eq(stats.updated, expected);
        ck_assert_int_eq(stats.computed, expected);
        assert_scene_matches_model(&s, nodes, 80, h);
    }
    scene_close(&s);
}

KILN_TEST(propagation, reparenting_moves_the_subtree_into_the_new_parents_space) {
    scene s;
    scene_open(&s);
    static node nodes[40];
    kiln_entity h[40];
    make_tree(nodes, 40, 23u);
    build_in_order(&s, nodes, 40, h);
    propagate_ok(&s, NULL);
    /* move node 20 (and what hangs below it) under node 13, a root */
    kiln_tick t = kiln_tick_advance(s.world);
    ck_assert_int_eq(nodes[13].parent, -1);
    ck_assert(!in_subtree(nodes, 13, 20));
    nodes[20].parent = 13;
    ck_assert_int_eq(kiln_transform_set_parent(s.world, h[20], h[13]), KILN_OK);
    propagate_ok(&s, NULL);
    assert_scene_matches_model(&s, nodes, 40, h);
    for (int i = 0; i < 40; i++)
        if (nodes[i].has_local && !in_subtree(nodes, i, 20))
            ck_assert_uint_lt(kiln_changed_tick(s.world, h[i], s.ids.world), t);
    /* and back to a root */
    nodes[20].parent = -1;
    kiln_tick_advance(s.world);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, h[20], KILN_NULL_ENTITY), KILN_OK);
    propagate_ok(&s, NULL);
    assert_scene_matches_model(&s, nodes, 40, h);
    scene_close(&s);
}

KILN_TEST(propagation, steady_state_propagation_allocates_nothing) {
    scene s;
    scene_open(&s);
    static node nodes[300];
    kiln_entity h[300];
    make_tree(nodes, 300, 5u);
    build_shuffled(&s, nodes, 300, h, 77u);
    propagate_ok(&s, NULL);
    kiln_entity kids[8];
    (void)kiln_transform_children(s.world, h[0], kids, 8);
    for (int frame = 0; frame < 3; frame++) { /* warm up */
        kiln_tick_advance(s.world);
        propagate_ok(&s, NULL);
    }
    int64_t allocations = s.alloc.allocations;
    for (int frame = 0; frame < 20; frame++) {
        kiln_tick_advance(s.world);
        int i = (frame * 31) % 300;
        if (nodes[i].has_local) {
            kiln_local_transform *l = kiln_get_mut(s.world, h[i], s.ids.local);
            ck_assert_ptr_nonnull(l);
            l->position[0] += 0.5f;
        }
        kiln_transform_propagate_stats stats;
        propagate_ok(&s, &stats);
        (void)kiln_transform_children(s.world, h[0], kids, 8);
    }
    ck_assert_int_eq(s.alloc.allocations, allocations);
    scene_close(&s);
}

KILN_TEST(propagation, propagation_in_a_deferred_world_queues_the_missing_world_transforms_with_their_values) {
    scene s;
    scene_open(&s);
    static node nodes[50];
    kiln_entity h[50];
    int with_local = make_tree(nodes, 50, 61u);
    build_shuffled(&s, nodes, 50, h, 13u);
    int present = 0;
    for (int i = 0; i < 50; i++) present += kiln_has(s.world, h[i], s.ids.world);
    ck_assert_int_lt(present, with_local);
    kiln_defer_begin(s.world);
    kiln_transform_propagate_stats stats;
    propagate_ok(&s, &stats);
    ck_assert_int_eq(stats.added, with_local - present);
    int now = 0;
    for (int i = 0; i < 50; i++) now += kiln_has(s.world, h[i], s.ids.world);
    ck_assert_int_eq(now, present); /* nothing added yet */
    ck_assert_int_eq(kiln_defer_end(s.world), KILN_OK);
    assert_scene_matches_model(&s, nodes, 50, h);
    scene_close(&s);
}

/* ------------------------------------------------------------------------------------------ */
/* hierarchy                                                                                  */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(hierarchy);

KILN_TEST(hierarchy, set_parent_rejects_dead_entities_and_leaves_the_world_unchanged) {
    scene s;
    scene_open(&s);
    kiln_entity a, b, dead;
    ck_assert_int_eq(kiln_spawn(s.world, &a), KILN_OK);
    ck_assert_int_eq(kiln_spawn(s.world, &b), KILN_OK);
    ck_assert_int_eq(kiln_spawn(s.world, &dead), KILN_OK);
    ck_assert_int_eq(kiln_despawn(s.world, dead), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, a, b), KILN_OK);
    kiln_tick tick = kiln_changed_tick(s.world, a, s.ids.parent);
    kiln_tick_advance(s.world);

    ck_assert_int_eq(kiln_transform_set_parent(s.world, dead, a), KILN_ERR_DEAD_ENTITY);
    ck_assert(!kiln_is_alive(s.world, dead));
    ck_assert_int_eq(kiln_transform_set_parent(s.world, a, dead), KILN_ERR_DEAD_ENTITY);
    ck_assert_str_ne(kiln_world_error(s.world), "");
    ck_assert_uint_eq(parent_link(&s, a), b);
    ck_assert_uint_eq(kiln_changed_tick(s.world, a, s.ids.parent), tick);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, b, dead), KILN_ERR_DEAD_ENTITY);
    ck_assert(!kiln_has(s.world, b, s.ids.parent));
    ck_assert_int_eq(kiln_transform_set_parent(s.world, KILN_NULL_ENTITY, a), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, dead, KILN_NULL_ENTITY), KILN_ERR_DEAD_ENTITY);
    assert_children(&s, b, &a, 1);
    scene_close(&s);
}

KILN_TEST(hierarchy, set_parent_rejects_a_self_link) {
    scene s;
    scene_open(&s);
    kiln_entity a, b;
    ck_assert_int_eq(kiln_spawn(s.world, &a), KILN_OK);
    ck_assert_int_eq(kiln_spawn(s.world, &b), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, a, a), KILN_ERR_INVALID_ARGUMENT);
    ck_assert(!kiln_has(s.world, a, s.ids.parent));
    ck_assert_int_eq(kiln_transform_set_parent(s.world, a, b), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, a, a), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(parent_link(&s, a), b);
    ck_assert_int_eq(kiln_transform_children(s.world, a, NULL, 0), 0);
    scene_close(&s);
}

KILN_TEST(hierarchy, set_parent_rejects_a_link_that_would_close_a_cycle) {
    scene s;
    scene_open(&s);
    kiln_entity e[5];
    for (int i = 0; i < 5; i++) ck_assert_int_eq(kiln_spawn(s.world, &e[i]), KILN_OK);
    for (int i = 1; i < 5; i++) ck_assert_int_eq(kiln_transform_set_parent(s.world, e[i], e[i - 1]), KILN_OK);
    for (int i = 1; i < 5; i++) {
        ck_assert_int_eq(kiln_transform_set_parent(s.world, e[0], e[i]), KILN_ERR_INVALID_ARGUMENT);
        ck_assert_str_ne(kiln_world_error(s.world), "");
        ck_assert(!kiln_has(s.world, e[0], s.ids.parent));
    }
    ck_assert_int_eq(kiln_transform_set_parent(s.world, e[1], e[4]), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(parent_link(&s, e[1]), e[0]);
    /* re-parenting within the tree is fine as long as no loop forms */
    ck_assert_int_eq(kiln_transform_set_parent(s.world, e[4], e[1]), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, e[2], e[3]), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, e[1], e[4]), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(parent_link(&s, e[2]), e[1]);
    ck_assert_uint_eq(parent_link(&s, e[1]), e[0]);
    assert_children(&s, e[1], (kiln_entity[]){e[2], e[4]}, 2);
    scene_close(&s);
}

KILN_TEST(hierarchy, set_parent_with_a_null_parent_removes_the_link) {
    scene s;
    scene_open(&s);
    kiln_local_transform pl = sample_local(1), cl = sample_local(2);
    kiln_entity p = spawn_node(&s, KILN_NULL_ENTITY, &pl);
    kiln_entity c = spawn_node(&s, KILN_NULL_ENTITY, &cl);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, c, p), KILN_OK);
    ck_assert_uint_eq(parent_link(&s, c), p);
    propagate_ok(&s, NULL);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, c, KILN_NULL_ENTITY), KILN_OK);
    ck_assert(!kiln_has(s.world, c, s.ids.parent));
    ck_assert_int_eq(kiln_transform_children(s.world, p, NULL, 0), 0);
    propagate_ok(&s, NULL);
    mat4 m;
    reference_local(&cl, m);
    assert_matrix_near(world_matrix(&s, c), m, "unlinked child");
    /* removing a link that is not there is fine too */
    ck_assert_int_eq(kiln_transform_set_parent(s.world, c, KILN_NULL_ENTITY), KILN_OK);
    scene_close(&s);
}

KILN_TEST(hierarchy, children_lists_exactly_the_children_in_handle_order) {
    scene s;
    scene_open(&s);
    kiln_entity p, q, kids[6], scratch[4];
    ck_assert_int_eq(kiln_spawn(s.world, &p), KILN_OK);
    ck_assert_int_eq(kiln_spawn(s.world, &q), KILN_OK);
    /* freed slots are reused with a higher generation, so handle order differs from index
     * and spawn order */
    for (int i = 0; i < 4; i++) ck_assert_int_eq(kiln_spawn(s.world, &scratch[i]), KILN_OK);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(kiln_despawn(s.world, scratch[i]), KILN_OK);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(kiln_spawn(s.world, &kids[i]), KILN_OK);
    ck_assert_int_eq(kiln_transform_children(s.world, p, NULL, 0), 0);
    for (int i = 5; i >= 0; i--) ck_assert_int_eq(kiln_transform_set_parent(s.world, kids[i], p), KILN_OK);
    assert_children(&s, p, kids, 6);
    assert_children(&s, q, NULL, 0);

    /* re-parenting moves a child from one list to the other */
    ck_assert_int_eq(kiln_transform_set_parent(s.world, kids[2], q), KILN_OK);
    assert_children(&s, p, (kiln_entity[]){kids[0], kids[1], kids[3], kids[4], kids[5]}, 5);
    assert_children(&s, q, &kids[2], 1);

    /* a despawned child leaves the list, in a later tick as in the same one */
    kiln_tick_advance(s.world);
    ck_assert_int_eq(kiln_despawn(s.world, kids[4]), KILN_OK);
    assert_children(&s, p, (kiln_entity[]){kids[0], kids[1], kids[3], kids[5]}, 4);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, kids[1], KILN_NULL_ENTITY), KILN_OK);
    assert_children(&s, p, (kiln_entity[]){kids[0], kids[3], kids[5]}, 3);
    /* a Parent written directly counts too */
    ck_assert_int_eq(kiln_set(s.world, kids[0], s.ids.parent, &(kiln_parent){q}), KILN_OK);
    assert_children(&s, p, (kiln_entity[]){kids[3], kids[5]}, 2);
    assert_children(&s, q, (kiln_entity[]){kids[0], kids[2]}, 2);
    /* grandchildren are not children */
    ck_assert_int_eq(kiln_transform_set_parent(s.world, kids[1], kids[3]), KILN_OK);
    assert_children(&s, p, (kiln_entity[]){kids[3], kids[5]}, 2);
    assert_children(&s, kids[3], &kids[1], 1);
    /* a dead parent has none */
    ck_assert_int_eq(kiln_despawn(s.world, q), KILN_OK);
    ck_assert_int_eq(kiln_transform_children(s.world, q, NULL, 0), 0);
    scene_close(&s);
}

KILN_TEST(hierarchy, children_with_a_small_capacity_writes_that_many_and_returns_the_full_count) {
    scene s;
    scene_open(&s);
    kiln_entity p, kids[10];
    ck_assert_int_eq(kiln_spawn(s.world, &p), KILN_OK);
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(kiln_spawn(s.world, &kids[i]), KILN_OK);
        ck_assert_int_eq(kiln_transform_set_parent(s.world, kids[i], p), KILN_OK);
    }
    ck_assert_int_eq(kiln_transform_children(s.world, p, NULL, 0), 10);
    kiln_entity out[10];
    kiln_entity sentinel = kiln_entity_make(12345, 7);
    for (int i = 0; i < 10; i++) out[i] = sentinel;
    ck_assert_int_eq(kiln_transform_children(s.world, p, out, 3), 10);
    kiln_entity sorted[10];
    memcpy(sorted, kids, sizeof sorted);
    qsort(sorted, 10, sizeof(kiln_entity), compare_handles);
    for (int i = 0; i < 3; i++) ck_assert_uint_eq(out[i], sorted[i]);
    for (int i = 3; i < 10; i++) ck_assert_uint_eq(out[i], sentinel);
    scene_close(&s);
}

KILN_TEST(hierarchy, despawn_recursive_despawns_the_subtree_and_nothing_else) {
    scene s;
    scene_open(&s);
    static node nodes[100];
    kiln_entity h[100];
    make_tree(nodes, 100, 31u);
    build_shuffled(&s, nodes, 100, h, 8u);
    kiln_entity outsider;
    ck_assert_int_eq(kiln_spawn(s.world, &outsider), KILN_OK);
    /* the first node heading a subtree of a fair size */
    int top = -1, inside = 0;
    for (int t = 1; t < 100 && top < 0; t++) {
        inside = 0;
        for (int i = 0; i < 100; i++) inside += in_subtree(nodes, i, t);
        if (inside > 5 && inside < 90) top = t;
    }
    ck_assert_int_ge(top, 1);
    ck_assert_int_gt(inside, 5);
    ck_assert_int_lt(inside, 90);
    ck_assert_int_eq(kiln_transform_despawn_recursive(s.world, h[top]), KILN_OK);
    for (int i = 0; i < 100; i++)
        ck_assert_msg(kiln_is_alive(s.world, h[i]) == !in_subtree(nodes, i, top),
                      "node %d is %s", i, kiln_is_alive(s.world, h[i]) ? "alive" : "dead");
    ck_assert(kiln_is_alive(s.world, outsider));
    ck_assert_int_eq(kiln_entity_count(s.world), 101 - inside);
    ck_assert_int_eq(kiln_transform_despawn_recursive(s.world, h[top]), KILN_ERR_DEAD_ENTITY);
    /* a leaf goes alone */
    ck_assert_int_eq(kiln_transform_despawn_recursive(s.world, outsider), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(s.world), 100 - inside);
    propagate_ok(&s, NULL);
    scene_close(&s);
}

KILN_TEST(hierarchy, set_parent_and_despawn_recursive_are_deferred_inside_a_deferred_section) {
    scene s;
    scene_open(&s);
    kiln_entity p, c, g, other;
    ck_assert_int_eq(kiln_spawn(s.world, &p), KILN_OK);
    ck_assert_int_eq(kiln_spawn(s.world, &c), KILN_OK);
    ck_assert_int_eq(kiln_spawn(s.world, &g), KILN_OK);
    ck_assert_int_eq(kiln_spawn(s.world, &other), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, g, c), KILN_OK);
    kiln_defer_begin(s.world);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, c, p), KILN_OK);
    ck_assert(!kiln_has(s.world, c, s.ids.parent));
    ck_assert_int_eq(kiln_defer_end(s.world), KILN_OK);
    ck_assert_uint_eq(parent_link(&s, c), p);
    assert_children(&s, p, &c, 1);
    kiln_defer_begin(s.world);
    ck_assert_int_eq(kiln_transform_despawn_recursive(s.world, p), KILN_OK);
    ck_assert(kiln_is_alive(s.world, p) && kiln_is_alive(s.world, c) && kiln_is_alive(s.world, g));
    ck_assert_int_eq(kiln_defer_end(s.world), KILN_OK);
    ck_assert(!kiln_is_alive(s.world, p));
    ck_assert(!kiln_is_alive(s.world, c));
    ck_assert(!kiln_is_alive(s.world, g));
    ck_assert(kiln_is_alive(s.world, other));
    scene_close(&s);
}

KILN_TEST(hierarchy, plain_despawn_of_a_parent_leaves_the_children_alive_as_roots) {
    scene s;
    scene_open(&s);
    kiln_local_transform pl = sample_local(1), cl = sample_local(2);
    kiln_entity p = spawn_node(&s, KILN_NULL_ENTITY, &pl);
    kiln_entity kids[3];
    for (int i = 0; i < 3; i++) kids[i] = spawn_node(&s, p, &cl);
    kiln_entity grandchild = spawn_node(&s, kids[0], &cl);
    propagate_ok(&s, NULL);
    kiln_tick_advance(s.world);
    ck_assert_int_eq(kiln_despawn(s.world, p), KILN_OK);
    for (int i = 0; i < 3; i++) ck_assert(kiln_is_alive(s.world, kids[i]));
    ck_assert(kiln_is_alive(s.world, grandchild));
    ck_assert_int_eq(kiln_transform_children(s.world, p, NULL, 0), 0);
    assert_children(&s, kids[0], &grandchild, 1);
    propagate_ok(&s, NULL);
    mat4 c, expected;
    reference_local(&cl, c);
    glm_mat4_mul(c, c, expected);
    for (int i = 0; i < 3; i++) assert_matrix_near(world_matrix(&s, kids[i]), c, "orphaned child");
    assert_matrix_near(world_matrix(&s, grandchild), expected, "grandchild of an orphan");
    scene_close(&s);
}

/* ------------------------------------------------------------------------------------------ */
/* schedule                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void idle_system(const kiln_system_ctx *ctx) {
    int *runs = ctx->user;
    (*runs)++;
}

KILN_TEST_GROUP_WITH(schedule, .timeout = 60);

KILN_TEST(schedule, transform_system_desc_declares_its_access) {
    scene s;
    scene_open(&s);
    kiln_system_desc desc;
    memset(&desc, 0x5a, sizeof desc);
    kiln_transform_system_desc(s.world, &desc);
    ck_assert_str_eq(desc.name, "propagate_transforms");
    ck_assert(desc.run != NULL);
    ck_assert(!desc.exclusive);
    ck_assert(!desc.disabled);
    bool reads_parent = false, reads_local = false, writes_world = false;
    for (int i = 0; i < KILN_SYSTEM_MAX_ACCESS && desc.reads[i]; i++) {
        reads_parent = reads_parent || desc.reads[i] == s.ids.parent;
        reads_local = reads_local || desc.reads[i] == s.ids.local;
    }
    for (int i = 0; i < KILN_SYSTEM_MAX_ACCESS && desc.writes[i]; i++)
        writes_world = writes_world || desc.writes[i] == s.ids.world;
    ck_assert(reads_parent && reads_local && writes_world);
    ck_assert_ptr_null(desc.before[0]);
    ck_assert_ptr_null(desc.after[0]);
    scene_close(&s);
}

/* pool_workers < 0: no pool; else a kiln_jobs pool of that many workers. */
static void check_schedule_matches_direct(int pool_workers) {
    static node nodes[150];
    kiln_entity direct_h[150], sched_h[150];
    make_tree(nodes, 150, 1234u);
    scene direct, sched;
    scene_open(&direct);
    scene_open(&sched);
    build_shuffled(&direct, nodes, 150, direct_h, 3u);
    build_shuffled(&sched, nodes, 150, sched_h, 3u);
    kiln_jobs *jobs = NULL;
    if (pool_workers >= 0) {
        jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = pool_workers});
        ck_assert_ptr_nonnull(jobs);
    }
    kiln_schedule *schedule = kiln_schedule_create(sched.world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_ptr_nonnull(schedule);
    kiln_system_desc desc;
    kiln_transform_system_desc(sched.world, &desc);
    ck_assert_int_eq(kiln_schedule_add(schedule, &desc), KILN_OK);
    /* a second system in the same stage, so a pool really runs the propagation as a job */
    int idle_runs = 0;
    ck_assert_int_eq(kiln_schedule_add(schedule, &(kiln_system_desc){.name = "idle", .run = idle_system,
                                                                      .user = &idle_runs,
                                                                      .reads = {sched.tags[0]}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(schedule), 1);

    for (int frame = 0; frame < 4; frame++) {
        if (frame == 2) { /* move a few locals in both worlds */
            for (int i = 5; i < 150; i += 17) {
                if (!nodes[i].has_local) continue;
                nodes[i].local.position[2] -= 1.0f;
                ck_assert_int_eq(kiln_set(direct.world, direct_h[i], direct.ids.local, &nodes[i].local), KILN_OK);
                ck_assert_int_eq(kiln_set(sched.world, sched_h[i], sched.ids.local, &nodes[i].local), KILN_OK);
            }
        }
        kiln_tick_advance(direct.world);
        propagate_ok(&direct, NULL);
        ck_assert_msg(kiln_schedule_run(schedule, 1.0 / 60.0) == KILN_OK, "schedule_run: %s",
                      kiln_world_error(sched.world));
        for (int i = 0; i < 150; i++) {
            if (!nodes[i].has_local) {
                ck_assert(!kiln_has(sched.world, sched_h[i], sched.ids.world));
                continue;
            }
            /* the added ones too: they land with their computed value at the stage end */
            ck_assert_msg(kiln_has(sched.world, sched_h[i], sched.ids.world),
                          "frame %d: node %d got no WorldTransform from the system", frame, i);
            ck_assert_msg(memcmp(world_matrix(&sched, sched_h[i]), world_matrix(&direct, direct_h[i]),
                                 sizeof(float) * 16) == 0,
                          "frame %d, %d workers: node %d differs from a direct call", frame,
                          pool_workers, i);
        }
        assert_scene_matches_model(&sched, nodes, 150, sched_h);
    }
    ck_assert_int_eq(idle_runs, 4);
    kiln_schedule_destroy(schedule);
    kiln_jobs_destroy(jobs);
    scene_close(&direct);
    scene_close(&sched);
}

KILN_TEST(schedule, transform_system_in_a_schedule_matches_a_direct_call_without_a_pool) {
    check_schedule_matches_direct(-1);
}

KILN_TEST(schedule, transform_system_in_a_schedule_matches_a_direct_call_with_two_workers) {
    check_schedule_matches_direct(2);
}

/* Writes x into an entity's LocalTransform position in place, the way a binding fills only
 * the fields a script gave over the value the component started with. */
static void place_at_x(scene *s, kiln_entity e, float x) {
    kiln_local_transform *l = kiln_get_mut(s->world, e, s->ids.local);
    ck_assert_ptr_nonnull(l);
    l->position[0] = x;
}

KILN_TEST(hierarchy, local_transforms_added_without_a_value_start_as_the_identity) {
    scene s;
    scene_open(&s);
    kiln_component_info info;
    ck_assert(kiln_component_info_get(s.world, s.ids.local, &info));
    ck_assert_ptr_nonnull(info.defaults);
    kiln_local_transform identity = kiln_transform_local_identity();
    ck_assert_int_eq(memcmp(info.defaults, &identity, sizeof identity), 0);
    /* a parent at x = 10 and a child at local x = 1, both given only a position */
    kiln_entity parent, child;
    ck_assert_int_eq(kiln_spawn(s.world, &parent), KILN_OK);
    ck_assert_int_eq(kiln_add(s.world, parent, s.ids.local, NULL), KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(s.world, &s.ids.local, NULL, 1, &child), KILN_OK);
    place_at_x(&s, parent, 10.0f);
    place_at_x(&s, child, 1.0f);
    ck_assert_int_eq(kiln_transform_set_parent(s.world, child, parent), KILN_OK);
    propagate_ok(&s, NULL);
    const float *m = world_matrix(&s, child);
    ck_assert_float_eq_tol(m[12], 11.0f, 1e-5f); /* column 3, row 0: x */
    ck_assert_float_eq_tol(m[0], 1.0f, 1e-5f);   /* unit scale, no rotation */
    ck_assert_float_eq_tol(m[5], 1.0f, 1e-5f);
    ck_assert_float_eq_tol(m[10], 1.0f, 1e-5f);
    scene_close(&s);
}

/* Expects call to have been refused with a message naming it and the link. */
static void assert_refused(scene *s, kiln_result r, const char *call, const char *what) {
    ck_assert_int_eq(r, KILN_ERR_INVALID_ARGUMENT);
    const char *msg = kiln_world_error(s->world);
    ck_assert_msg(strncmp(msg, call, strlen(call)) == 0 && strstr(msg, what) != NULL,
                  "message \"%s\" is not \"%s ... %s ...\"", msg, call, what);
}

KILN_TEST(hierarchy, parent_written_through_add_set_spawn_or_commands_follows_set_parent_rules) {
    scene s;
    scene_open(&s);
    kiln_local_transform l = sample_local(4);
    kiln_entity a = spawn_node(&s, KILN_NULL_ENTITY, &l);
    kiln_entity b = spawn_node(&s, a, &l);
    kiln_entity c = spawn_node(&s, b, &l);
    propagate_ok(&s, NULL);
    uint64_t before = test_world_digest(s.world);

    assert_refused(&s, kiln_add(s.world, a, s.ids.parent, &(kiln_parent){a}), "kiln_add: ",
                   "cannot be its own parent");
    assert_refused(&s, kiln_add(s.world, a, s.ids.parent, &(kiln_parent){c}), "kiln_add: ",
                   "would create a cycle");
    assert_refused(&s, kiln_set(s.world, b, s.ids.parent, &(kiln_parent){c}), "kiln_set: ",
                   "would create a cycle");
    assert_refused(&s, kiln_set(s.world, b, s.ids.parent, &(kiln_parent){b}), "kiln_set: ",
                   "cannot be its own parent");
    /* deferred: refused when called */
    kiln_defer_begin(s.world);
    assert_refused(&s, kiln_add(s.world, a, s.ids.parent, &(kiln_parent){b}), "kiln_add: ",
                   "would create a cycle");
    ck_assert_int_eq(kiln_defer_end(s.world), KILN_OK);
    /* a command buffer: refused when applied, the command kept */
    kiln_commands *cmd = kiln_commands_create(s.world);
    ck_assert_int_eq(kiln_commands_add(cmd, a, s.ids.parent, &(kiln_parent){c}), KILN_OK);
    assert_refused(&s, kiln_commands_apply(cmd, s.world, NULL), "kiln_commands_apply: ",
                   "would create a cycle");
    ck_assert_int_eq(kiln_commands_count(cmd), 1);
    kiln_commands_destroy(cmd);
    ck_assert_uint_eq(test_world_digest(s.world), before);

    /* links that close no cycle still go through every path, a dead parent makes a root */
    kiln_entity d;
    ck_assert_int_eq(kiln_spawn_with(s.world, (kiln_component[]){s.ids.local, s.ids.parent},
                                     (const void *[]){&l, &(kiln_parent){c}}, 2, &d),
                     KILN_OK);
    ck_assert_int_eq(kiln_set(s.world, c, s.ids.parent, &(kiln_parent){a}), KILN_OK);
    kiln_entity gone;
    ck_assert_int_eq(kiln_spawn(s.world, &gone), KILN_OK);
    ck_assert_int_eq(kiln_despawn(s.world, gone), KILN_OK);
    ck_assert_int_eq(kiln_add(s.world, a, s.ids.parent, &(kiln_parent){gone}), KILN_OK);
    ck_assert_int_eq(kiln_set(s.world, a, s.ids.parent, &(kiln_parent){KILN_NULL_ENTITY}), KILN_OK);
    propagate_ok(&s, NULL);
    scene_close(&s);
}

KILN_TEST(hierarchy, a_cycle_that_only_appears_when_a_deferred_queue_lands_is_dropped_there) {
    scene s;
    scene_open(&s);
    kiln_local_transform l = sample_local(6);
    kiln_entity x = spawn_node(&s, KILN_NULL_ENTITY, &l);
    kiln_entity y = spawn_node(&s, KILN_NULL_ENTITY, &l);
    kiln_defer_begin(s.world);
    /* each link is fine against the world as it is now; together they close a loop */
    ck_assert_int_eq(kiln_add(s.world, x, s.ids.parent, &(kiln_parent){y}), KILN_OK);
    ck_assert_int_eq(kiln_add(s.world, y, s.ids.parent, &(kiln_parent){x}), KILN_OK);
    ck_assert_int_eq(kiln_defer_end(s.world), KILN_OK);
    ck_assert_uint_eq(((const kiln_parent *)kiln_get(s.world, x, s.ids.parent))->entity, y);
    ck_assert(!kiln_has(s.world, y, s.ids.parent));
    ck_assert_int_eq(kiln_is_deferred(s.world), false);
    propagate_ok(&s, NULL);
    scene_close(&s);
}
