/* test_transform_propagate.c: Check suite for transform propagation: world matrices against a
 * cglm model of random forests, roots, cycles, depth limits and change ticks. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"
#include "transform_fixture.h"

/* The scene (transform_fixture.h) opened afresh around every test of a group using it. */
static scene F;

static void setup(void) { scene_open(&F); }

static void teardown(void) { scene_close(&F); }

/* ------------------------------------------------------------------------------------------ */
/* setup                                                                                      */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(propagation, .setup = setup, .teardown = teardown, .timeout = 60);

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
    /* root -> a -> b -> c -> d, plus a sibling branch at each level */
    node nodes[9];
    int parents[9] = {-1, 0, 1, 2, 3, 0, 1, 2, 3};
    for (int i = 0; i < 9; i++) nodes[i] = (node){parents[i], true, sample_local(i + 1)};
    kiln_entity h[9];
    build_in_order(&F, nodes, 9, h);
    kiln_transform_propagate_stats stats;
    propagate_ok(&F, &stats);
    ck_assert_int_eq(stats.added, 9);
    ck_assert_int_eq(stats.computed, 9);
    assert_scene_matches_model(&F, nodes, 9, h);

    /* the deepest one, spelled out: W(d) = L(root) L(a) L(b) L(c) L(d) */
    mat4 expected = GLM_MAT4_IDENTITY_INIT, l;
    for (int i = 0; i <= 4; i++) {
        reference_local(&nodes[i].local, l);
        glm_mat4_mul(expected, l, expected);
    }
    assert_matrix_near(world_matrix(&F, h[4]), expected, "deepest");
}

KILN_TEST(propagation, a_random_forest_matches_the_cglm_model) {
    static node nodes[120];
    kiln_entity h[120];
    int with_local = make_tree(nodes, 120, 7u);
    build_in_order(&F, nodes, 120, h);
    kiln_transform_propagate_stats stats;
    propagate_ok(&F, &stats);
    ck_assert_int_eq(stats.added, with_local);
    assert_scene_matches_model(&F, nodes, 120, h);
}

KILN_TEST(propagation, a_parent_without_local_transform_passes_identity_and_gets_no_world_transform) {
    kiln_local_transform root_local = sample_local(1), child_local = sample_local(2);
    kiln_entity root = spawn_node(&F, KILN_NULL_ENTITY, &root_local);
    kiln_entity pivot = spawn_node(&F, root, NULL); /* Parent only */
    kiln_entity child = spawn_node(&F, pivot, &child_local);
    /* a bare entity (no Parent, no LocalTransform) as a parent is an identity root */
    kiln_entity bare;
    ck_assert_int_eq(kiln_spawn(F.world, &bare), KILN_OK);
    kiln_entity orphan = spawn_node(&F, bare, &child_local);
    kiln_transform_propagate_stats stats;
    propagate_ok(&F, &stats);
    ck_assert(!kiln_has(F.world, pivot, F.ids.world));
    ck_assert(!kiln_has(F.world, bare, F.ids.world));
    ck_assert_int_eq(stats.added, 3);
    ck_assert_int_eq(stats.computed, 3);
    mat4 r, c, expected;
    reference_local(&root_local, r);
    reference_local(&child_local, c);
    glm_mat4_mul(r, c, expected);
    assert_matrix_near(world_matrix(&F, child), expected, "child under a pivot");
    assert_matrix_near(world_matrix(&F, orphan), c, "child of a bare entity");

    /* the pivot still relays its own parent's changes */
    kiln_tick_advance(F.world);
    kiln_local_transform moved = sample_local(9);
    ck_assert_int_eq(kiln_set(F.world, root, F.ids.local, &moved), KILN_OK);
    propagate_ok(&F, &stats);
    reference_local(&moved, r);
    glm_mat4_mul(r, c, expected);
    assert_matrix_near(world_matrix(&F, child), expected, "child after the root moved");
    ck_assert(!kiln_has(F.world, pivot, F.ids.world));

    /* and a change of the pivot's own Parent, with no structural change anywhere */
    kiln_local_transform other_local = sample_local(11);
    kiln_entity other = spawn_node(&F, KILN_NULL_ENTITY, &other_local);
    propagate_ok(&F, NULL);
    kiln_tick_advance(F.world);
    propagate_ok(&F, NULL);
    kiln_tick_advance(F.world);
    ck_assert_int_eq(kiln_set(F.world, pivot, F.ids.parent, &(kiln_parent){other}), KILN_OK);
    propagate_ok(&F, &stats);
    ck_assert_int_eq(stats.updated, 1);
    reference_local(&other_local, r);
    glm_mat4_mul(r, c, expected);
    assert_matrix_near(world_matrix(&F, child), expected, "child after the pivot moved");
}

KILN_TEST(propagation, a_parent_losing_its_local_transform_becomes_identity_for_its_children) {
    kiln_local_transform gl = sample_local(1), pl = sample_local(2), cl = sample_local(3);
    /* a linked parent (grand -> parent -> child) and a root parent (root -> leaf) */
    kiln_entity grand = spawn_node(&F, KILN_NULL_ENTITY, &gl);
    kiln_entity parent = spawn_node(&F, grand, &pl);
    kiln_entity child = spawn_node(&F, parent, &cl);
    kiln_entity root = spawn_node(&F, KILN_NULL_ENTITY, &pl);
    kiln_entity leaf = spawn_node(&F, root, &cl);
    propagate_ok(&F, NULL);
    kiln_tick_advance(F.world);
    propagate_ok(&F, NULL);
    kiln_tick_advance(F.world);
    /* one at a time: each is a different structural change */
    mat4 g, c, expected;
    reference_local(&gl, g);
    reference_local(&cl, c);
    glm_mat4_mul(g, c, expected);
    ck_assert_int_eq(kiln_remove(F.world, root, F.ids.local, NULL), KILN_OK);
    kiln_tick_advance(F.world);
    propagate_ok(&F, NULL);
    assert_matrix_near(world_matrix(&F, leaf), c, "child of a root without local");
    kiln_tick_advance(F.world);
    ck_assert_int_eq(kiln_remove(F.world, parent, F.ids.local, NULL), KILN_OK);
    kiln_tick_advance(F.world);
    propagate_ok(&F, NULL);
    assert_matrix_near(world_matrix(&F, child), expected, "child of a linked parent without local");
}

KILN_TEST(propagation, missing_world_transforms_are_added_and_counted) {
    kiln_local_transform l = sample_local(3);
    kiln_entity with = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_world_transform zero = {{{0}}};
    ck_assert_int_eq(kiln_add(F.world, with, F.ids.world, &zero), KILN_OK);
    kiln_entity without[3];
    for (int i = 0; i < 3; i++) without[i] = spawn_node(&F, with, &l);
    kiln_transform_propagate_stats stats;
    propagate_ok(&F, &stats);
    ck_assert_int_eq(stats.added, 3);
    for (int i = 0; i < 3; i++) ck_assert(kiln_has(F.world, without[i], F.ids.world));
    mat4 m, expected;
    reference_local(&l, m);
    glm_mat4_mul(m, m, expected);
    assert_matrix_near(world_matrix(&F, without[2]), expected, "added");
    assert_matrix_near(world_matrix(&F, with), m, "existing");
    propagate_ok(&F, &stats);
    ck_assert_int_eq(stats.added, 0);
}

/* An entity whose WorldTransform would be its 257th component cannot get it: the call fails
 * with the limit's code and message (it said out of memory), adding to no entity. */
KILN_TEST(propagation, a_world_transform_past_an_entitys_last_component_fails_with_the_limit) {
    kiln_local_transform l = sample_local(1);
    kiln_entity other = spawn_node(&F, KILN_NULL_ENTITY, &l), full = spawn_node(&F, KILN_NULL_ENTITY, &l);
    char name[16];
    for (int i = 0; kiln_entity_components(F.world, full, NULL, 0) < 256; i++) {
        snprintf(name, sizeof name, "Mark%d", i);
        ck_assert_int_eq(kiln_add(F.world, full, test_register_tag(F.world, name), NULL), KILN_OK);
    }
    ck_assert_int_eq(kiln_transform_propagate(F.world, NULL), KILN_ERR_LIMIT);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_transform_propagate: an entity holds at most 256 components");
    ck_assert(!kiln_has(F.world, full, F.ids.world) && !kiln_has(F.world, other, F.ids.world));
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
    static node nodes[200];
    kiln_entity h[200];
    int with_local = make_tree(nodes, 200, 99u);
    build_shuffled(&F, nodes, 200, h, 5u);
    kiln_transform_propagate_stats stats;
    propagate_ok(&F, &stats);
    ck_assert_int_eq(stats.computed, with_local);
    assert_scene_matches_model(&F, nodes, 200, h);

    /* a structural change to one entity forces a full recompute: still once each */
    kiln_tick_advance(F.world);
    ck_assert(nodes[1].has_local);
    ck_assert_int_eq(kiln_remove(F.world, h[1], F.ids.local, NULL), KILN_OK);
    ck_assert_int_eq(kiln_add(F.world, h[1], F.ids.local, &nodes[1].local), KILN_OK);
    propagate_ok(&F, &stats);
    ck_assert_int_eq(stats.computed, with_local);
    ck_assert_int_eq(stats.updated, 0); /* nothing actually moved */
    assert_scene_matches_model(&F, nodes, 200, h);
}

KILN_TEST(propagation, a_dead_parent_makes_the_child_a_root) {
    kiln_local_transform pl = sample_local(4), cl = sample_local(5), gl = sample_local(6);
    kiln_entity parent = spawn_node(&F, KILN_NULL_ENTITY, &pl);
    kiln_entity child = spawn_node(&F, parent, &cl);
    kiln_entity grandchild = spawn_node(&F, child, &gl);
    kiln_entity stale;
    ck_assert_int_eq(kiln_spawn(F.world, &stale), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.world, stale), KILN_OK);
    kiln_entity adopted = spawn_node(&F, stale, &cl); /* linked to a handle already dead */
    propagate_ok(&F, NULL);
    kiln_tick_advance(F.world);
    ck_assert_int_eq(kiln_despawn(F.world, parent), KILN_OK);
    propagate_ok(&F, NULL);
    mat4 c, g, expected;
    reference_local(&cl, c);
    reference_local(&gl, g);
    glm_mat4_mul(c, g, expected);
    assert_matrix_near(world_matrix(&F, child), c, "child of a dead parent");
    assert_matrix_near(world_matrix(&F, grandchild), expected, "grandchild");
    assert_matrix_near(world_matrix(&F, adopted), c, "linked to a stale handle");
}

KILN_TEST(propagation, a_parent_link_to_itself_makes_the_entity_a_root) {
    kiln_local_transform l = sample_local(7), cl = sample_local(8);
    kiln_entity e = spawn_node(&F, KILN_NULL_ENTITY, &l);
    link_unchecked(&F, e, e);
    kiln_entity child = spawn_node(&F, e, &cl);
    propagate_ok(&F, NULL);
    mat4 m, c, expected;
    reference_local(&l, m);
    reference_local(&cl, c);
    glm_mat4_mul(m, c, expected);
    assert_matrix_near(world_matrix(&F, e), m, "self-linked");
    assert_matrix_near(world_matrix(&F, child), expected, "its child");
}

/* A chain of n entities linked by writing Parent directly. root_first: handles and rows run
 * from the root down; otherwise from the leaf up. Returns the chain root first. The check
 * refuses a link that puts an entity deeper than 256 when it is made, the end of a subtree
 * moved along as well: those go through a pointer (root first, the links past 256; leaf up,
 * the links nearer the root than 256 below the leaf). */
static void build_chain(scene *s, kiln_entity *chain, int n, bool root_first) {
    kiln_local_transform l = kiln_transform_local_identity();
    l.position[0] = 1.0f;
    if (root_first) {
        for (int i = 0; i < n; i++) {
            chain[i] = spawn_node(s, i && i <= 256 ? chain[i - 1] : KILN_NULL_ENTITY, &l);
            if (i > 256) link_unchecked(s, chain[i], chain[i - 1]);
        }
    } else {
        for (int i = n - 1; i >= 0; i--) ck_assert_int_eq(kiln_spawn(s->world, &chain[i]), KILN_OK);
        for (int i = n - 1; i >= 0; i--) {
            ck_assert_int_eq(kiln_add(s->world, chain[i], s->ids.local, &l), KILN_OK);
            if (i > 0 && i < n - 256) link_unchecked(s, chain[i], chain[i - 1]);
            else if (i > 0)
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
    kiln_local_transform l = sample_local(2);
    kiln_entity a = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity b = spawn_node(&F, a, &l);
    kiln_entity c = spawn_node(&F, b, &l);
    propagate_ok(&F, NULL);
    kiln_tick_advance(F.world);
    /* close the loop a -> c behind the Parent check's back, through a pointer */
    link_unchecked(&F, a, c);
    ck_assert_int_eq(propagate(&F, NULL), KILN_ERR_INVALID_ARGUMENT);
    const char *msg = kiln_world_error(F.world);
    ck_assert_msg(names_entity(msg, a) || names_entity(msg, b) || names_entity(msg, c),
                  "error \"%s\" names none of the cycle", msg);

    link_unchecked(&F, a, b);
    kiln_world_clear_error(F.world);
    ck_assert_int_eq(propagate(&F, NULL), KILN_ERR_INVALID_ARGUMENT);
    msg = kiln_world_error(F.world);
    ck_assert_msg(names_entity(msg, a) || names_entity(msg, b), "error \"%s\" names none of the cycle",
                  msg);

    /* breaking the loop heals the hierarchy */
    ck_assert_int_eq(kiln_transform_set_parent(F.world, a, KILN_NULL_ENTITY), KILN_OK);
    propagate_ok(&F, NULL);
    mat4 m, expected;
    reference_local(&l, m);
    glm_mat4_mul(m, m, expected);
    glm_mat4_mul(expected, m, expected);
    assert_matrix_near(world_matrix(&F, c), expected, "c after the cycle broke");
}

KILN_TEST(propagation, entities_outside_a_cycle_are_still_updated) {
    kiln_local_transform l = sample_local(3);
    kiln_world_transform zero;
    memset(&zero, 0, sizeof zero);
    /* The cycle comes first in storage: same archetype, earlier rows. */
    kiln_component comps[3] = {F.ids.local, F.ids.world, F.ids.parent};
    kiln_entity x, y;
    const void *vx[3] = {&l, &zero, &(kiln_parent){KILN_NULL_ENTITY}};
    ck_assert_int_eq(kiln_spawn_with(F.world, comps, vx, 3, &x), KILN_OK);
    const void *vy[3] = {&l, &zero, &(kiln_parent){x}};
    ck_assert_int_eq(kiln_spawn_with(F.world, comps, vy, 3, &y), KILN_OK);
    link_unchecked(&F, x, y);
    kiln_entity root, kids[4];
    ck_assert_int_eq(kiln_spawn_with(F.world, comps, vx, 2, &root), KILN_OK);
    for (int i = 0; i < 4; i++) {
        const void *vk[3] = {&l, &zero, &(kiln_parent){root}};
        ck_assert_int_eq(kiln_spawn_with(F.world, comps, vk, 3, &kids[i]), KILN_OK);
    }
    ck_assert_int_eq(propagate(&F, NULL), KILN_ERR_INVALID_ARGUMENT);
    mat4 m, expected;
    reference_local(&l, m);
    glm_mat4_mul(m, m, expected);
    assert_matrix_near(world_matrix(&F, root), m, "root outside the cycle");
    for (int i = 0; i < 4; i++) assert_matrix_near(world_matrix(&F, kids[i]), expected, "child outside the cycle");
}

KILN_TEST(propagation, entities_outside_a_cycle_still_get_their_world_transform_when_deferred) {
    kiln_local_transform l = sample_local(5);
    kiln_entity x = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity y = spawn_node(&F, x, &l);
    link_unchecked(&F, x, y);
    kiln_entity root = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity kid = spawn_node(&F, root, &l);
    kiln_defer_begin(F.world);
    ck_assert_int_eq(propagate(&F, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    mat4 m, expected;
    reference_local(&l, m);
    glm_mat4_mul(m, m, expected);
    ck_assert_msg(kiln_has(F.world, root, F.ids.world) && kiln_has(F.world, kid, F.ids.world),
                  "entities outside the cycle got no WorldTransform");
    assert_matrix_near(world_matrix(&F, root), m, "root outside the cycle");
    assert_matrix_near(world_matrix(&F, kid), expected, "child outside the cycle");
}

KILN_TEST(propagation, unchanged_inputs_write_nothing_and_keep_change_ticks) {
    static node nodes[60];
    kiln_entity h[60];
    make_tree(nodes, 60, 3u);
    build_in_order(&F, nodes, 60, h);
    kiln_transform_propagate_stats stats;
    propagate_ok(&F, &stats);
    ck_assert_int_gt(stats.computed, 0);
    kiln_tick before[60];
    for (int i = 0; i < 60; i++) before[i] = kiln_changed_tick(F.world, h[i], F.ids.world);
    kiln_tick_advance(F.world);
    kiln_tick_advance(F.world);
    propagate_ok(&F, &stats);
    ck_assert_int_eq(stats.updated, 0);
    ck_assert_int_eq(stats.added, 0);
    for (int i = 0; i < 60; i++)
        ck_assert_uint_eq(kiln_changed_tick(F.world, h[i], F.ids.world), before[i]);
    kiln_tick_advance(F.world);
    propagate_ok(&F, &stats);
    ck_assert_int_eq(stats.computed, 0);
    ck_assert_int_eq(stats.updated, 0);
    /* rewriting a local with the same value recomputes it but writes nothing */
    kiln_tick_advance(F.world);
    ck_assert_int_eq(kiln_set(F.world, h[0], F.ids.local, &nodes[0].local), KILN_OK);
    propagate_ok(&F, &stats);
    ck_assert_int_ge(stats.computed, 1);
    ck_assert_int_eq(stats.updated, 0);
    ck_assert_uint_eq(kiln_changed_tick(F.world, h[0], F.ids.world), before[0]);
}


KILN_TEST(propagation, changing_one_local_updates_exactly_that_entity_and_its_descendants) {
    static node nodes[80];
    kiln_entity h[80];
    make_tree(nodes, 80, 11u);
    build_shuffled(&F, nodes, 80, h, 17u);
    propagate_ok(&F, NULL);
    kiln_tick_advance(F.world);
    propagate_ok(&F, NULL);
    for (int pick = 1; pick < 80; pick += 9) {
        if (!nodes[pick].has_local) continue;
        kiln_tick_advance(F.world);
        nodes[pick].local.position[1] += 2.5f;
        nodes[pick].local.scale[2] *= 1.5f;
        ck_assert_int_eq(kiln_set(F.world, h[pick], F.ids.local, &nodes[pick].local), KILN_OK);
        /* Propagate a tick later: a change stamped with the tick of a propagation cannot be
         * told apart from one made after it, so it would be seen again next time. */
        kiln_tick t = kiln_tick_advance(F.world);
        kiln_transform_propagate_stats stats;
        propagate_ok(&F, &stats);
        int expected = 0;
        for (int i = 0; i < 80; i++) {
            if (!nodes[i].has_local) continue;
            bool inside = in_subtree(nodes, i, pick);
            expected += inside;
            ck_assert_msg((kiln_changed_tick(F.world, h[i], F.ids.world) == t) == inside,
                          "pick %d: node %d %s", pick, i,
                          inside ? "was not rewritten" : "was rewritten though outside the subtree");
        }
        ck_assert_int_eq(stats.updated, expected);
        ck_assert_int_eq(stats.computed, expected);
        assert_scene_matches_model(&F, nodes, 80, h);
    }
}

KILN_TEST(propagation, reparenting_moves_the_subtree_into_the_new_parents_space) {
    static node nodes[40];
    kiln_entity h[40];
    make_tree(nodes, 40, 23u);
    build_in_order(&F, nodes, 40, h);
    propagate_ok(&F, NULL);
    /* move node 20 (and what hangs below it) under node 13, a root */
    kiln_tick t = kiln_tick_advance(F.world);
    ck_assert_int_eq(nodes[13].parent, -1);
    ck_assert(!in_subtree(nodes, 13, 20));
    nodes[20].parent = 13;
    ck_assert_int_eq(kiln_transform_set_parent(F.world, h[20], h[13]), KILN_OK);
    propagate_ok(&F, NULL);
    assert_scene_matches_model(&F, nodes, 40, h);
    for (int i = 0; i < 40; i++)
        if (nodes[i].has_local && !in_subtree(nodes, i, 20))
            ck_assert_uint_lt(kiln_changed_tick(F.world, h[i], F.ids.world), t);
    /* and back to a root */
    nodes[20].parent = -1;
    kiln_tick_advance(F.world);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, h[20], KILN_NULL_ENTITY), KILN_OK);
    propagate_ok(&F, NULL);
    assert_scene_matches_model(&F, nodes, 40, h);
}

KILN_TEST(propagation, steady_state_propagation_allocates_nothing) {
    static node nodes[300];
    kiln_entity h[300];
    make_tree(nodes, 300, 5u);
    build_shuffled(&F, nodes, 300, h, 77u);
    propagate_ok(&F, NULL);
    kiln_entity kids[8];
    (void)kiln_transform_children(F.world, h[0], kids, 8);
    for (int frame = 0; frame < 3; frame++) { /* warm up */
        kiln_tick_advance(F.world);
        propagate_ok(&F, NULL);
    }
    int64_t allocations = F.alloc.allocations;
    for (int frame = 0; frame < 20; frame++) {
        kiln_tick_advance(F.world);
        int i = (frame * 31) % 300;
        if (nodes[i].has_local) {
            kiln_local_transform *l = kiln_get_mut(F.world, h[i], F.ids.local);
            ck_assert_ptr_nonnull(l);
            l->position[0] += 0.5f;
        }
        kiln_transform_propagate_stats stats;
        propagate_ok(&F, &stats);
        (void)kiln_transform_children(F.world, h[0], kids, 8);
    }
    ck_assert_int_eq(F.alloc.allocations, allocations);
}

KILN_TEST(propagation, propagation_in_a_deferred_world_queues_the_missing_world_transforms_with_their_values) {
    static node nodes[50];
    kiln_entity h[50];
    int with_local = make_tree(nodes, 50, 61u);
    build_shuffled(&F, nodes, 50, h, 13u);
    int present = 0;
    for (int i = 0; i < 50; i++) present += kiln_has(F.world, h[i], F.ids.world);
    ck_assert_int_lt(present, with_local);
    kiln_defer_begin(F.world);
    kiln_transform_propagate_stats stats;
    propagate_ok(&F, &stats);
    ck_assert_int_eq(stats.added, with_local - present);
    int now = 0;
    for (int i = 0; i < 50; i++) now += kiln_has(F.world, h[i], F.ids.world);
    ck_assert_int_eq(now, present); /* nothing added yet */
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    assert_scene_matches_model(&F, nodes, 50, h);
}
