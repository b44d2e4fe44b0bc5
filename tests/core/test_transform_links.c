/* test_transform_links.c: Check suite for hostile Parent links: placeholders, handles the world
 * never handed out, deep chains and cycles. A refused link leaves the world exactly as it was. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"
#include "transform_fixture.h"

static scene F;

static void setup(void) { scene_open(&F); }

static void teardown(void) { scene_close(&F); }

static void assert_children_count(scene *s, kiln_entity parent, int32_t n) {
    ck_assert_int_eq(kiln_transform_children(s->world, parent, NULL, 0), n);
}

static kiln_entity parent_link(const scene *s, kiln_entity child) {
    const kiln_parent *p = kiln_get(s->world, child, s->ids.parent);
    return p ? p->entity : KILN_NULL_ENTITY;
}

/* Expects r to be a refusal with a message that starts with call and mentions what. */
static void assert_refused(scene *s, kiln_result r, kiln_result code, const char *call, const char *what) {
    ck_assert_int_eq(r, code);
    const char *msg = kiln_world_error(s->world);
    ck_assert_msg(strncmp(msg, call, strlen(call)) == 0 && strstr(msg, what) != NULL,
                  "message \"%s\" is not \"%s ... %s ...\"", msg, call, what);
}

/* Every way a Parent value is written with value, on child (alive, without a Parent): each
 * refused with a message naming what, the world's hash and digest unchanged. */
static void assert_every_write_refuses(scene *s, kiln_entity child, kiln_entity value, const char *what) {
    uint64_t hash = kiln_world_hash(s->world), digest = test_world_digest(s->world);
    kiln_parent p = {value};
    assert_refused(s, kiln_add(s->world, child, s->ids.parent, &p), KILN_ERR_INVALID_ARGUMENT, "kiln_add: ", what);
    kiln_entity spawned = KILN_NULL_ENTITY;
    assert_refused(s, kiln_spawn_with(s->world, &s->ids.parent, (const void *[]){&p}, 1, &spawned),
                   KILN_ERR_INVALID_ARGUMENT, "kiln_spawn_with: ", what);
    assert_refused(s, kiln_component_check(s->world, child, s->ids.parent, &p), KILN_ERR_INVALID_ARGUMENT,
                   "kiln_component_check: ", what);
    assert_refused(s, kiln_transform_set_parent(s->world, child, value), KILN_ERR_DEAD_ENTITY,
                   "kiln_transform_set_parent: ", what);
    kiln_defer_begin(s->world); /* deferred: refused when called, nothing queued */
    assert_refused(s, kiln_add(s->world, child, s->ids.parent, &p), KILN_ERR_INVALID_ARGUMENT, "kiln_add: ", what);
    assert_refused(s, kiln_set(s->world, child, s->ids.parent, &p), KILN_ERR_INVALID_ARGUMENT, "kiln_set: ", what);
    ck_assert_int_eq(kiln_defer_end(s->world), KILN_OK);
    kiln_commands *cmd = kiln_commands_create(s->world);
    ck_assert_ptr_nonnull(cmd);
    ck_assert_int_eq(kiln_commands_add(cmd, child, s->ids.parent, &p), KILN_OK);
    /* a buffer's apply rewrites only its own batch's placeholders, and names any other */
    assert_refused(s, kiln_commands_apply(cmd, s->world, NULL), KILN_ERR_INVALID_ARGUMENT,
                   "kiln_commands_apply: ",
                   kiln_is_placeholder(value) ? "which is not from this buffer's current batch" : what);
    ck_assert_int_eq(kiln_commands_count(cmd), 1);
    kiln_commands_destroy(cmd);
    ck_assert(!kiln_has(s->world, child, s->ids.parent));
    ck_assert_uint_eq(kiln_world_hash(s->world), hash);
    ck_assert_uint_eq(test_world_digest(s->world), digest);
}

KILN_TEST_GROUP_WITH(links, .setup = setup, .teardown = teardown);

KILN_TEST(links, a_parent_placeholder_of_the_same_batch_becomes_its_entity_when_the_buffer_applies) {
    kiln_local_transform l = sample_local(1);
    kiln_entity child = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_commands *cmd = kiln_commands_create(F.world);
    ck_assert_ptr_nonnull(cmd);
    kiln_entity ph, kid;
    ck_assert_int_eq(kiln_commands_spawn(cmd, &ph), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, ph, F.ids.local, &l), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn(cmd, &kid), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, kid, F.ids.parent, &(kiln_parent){ph}), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, child, F.ids.parent, &(kiln_parent){ph}), KILN_OK);
    int64_t applied = -1;
    ck_assert_int_eq(kiln_commands_apply(cmd, F.world, &applied), KILN_OK);
    ck_assert_int_eq(applied, 5);
    kiln_entity top = kiln_commands_resolve(cmd, ph), made = kiln_commands_resolve(cmd, kid);
    ck_assert(kiln_is_alive(F.world, top) && kiln_is_alive(F.world, made));
    ck_assert(parent_link(&F, made) == top && parent_link(&F, child) == top);
    kiln_commands_destroy(cmd);
    assert_children_count(&F, top, 2);
    propagate_ok(&F, NULL);
}

KILN_TEST(links, placeholders_and_handles_the_world_never_handed_out_are_refused_by_every_write) {
    kiln_local_transform l = sample_local(2);
    kiln_entity child = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity live = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity gone;
    ck_assert_int_eq(kiln_spawn(F.world, &gone), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.world, gone), KILN_OK);
    propagate_ok(&F, NULL);
    kiln_commands *cmd = kiln_commands_create(F.world);
    kiln_entity ph;
    ck_assert_int_eq(kiln_commands_spawn(cmd, &ph), KILN_OK);
    assert_every_write_refuses(&F, child, ph, "parent placeholder 0 is a command buffer placeholder");
    kiln_commands_destroy(cmd);
    /* a placeholder's bit on a live entity's handle, as a script could write it */
    assert_every_write_refuses(&F, child, live | KILN_PLACEHOLDER_BIT, "is a command buffer placeholder");
    /* stray bits above the generation */
    char msg[64];
    snprintf(msg, sizeof msg, "parent 0x%016llx is not an entity handle", (unsigned long long)(live | (UINT64_C(1) << 60)));
    assert_every_write_refuses(&F, child, live | (UINT64_C(1) << 60), msg);
    assert_every_write_refuses(&F, child, kiln_entity_make(kiln_entity_index(live), 0), "is not an entity handle");
    /* a slot the world has not reached, a generation a live slot has not reached, and the
     * generation a dead slot hands out next: each would come alive as some later spawn */
    char b[32];
    kiln_entity unreached = kiln_entity_make(100000, 1);
    snprintf(msg, sizeof msg, "parent %s was never spawned in this world", test_entity_string(unreached, b));
    assert_every_write_refuses(&F, child, unreached, msg);
    assert_every_write_refuses(&F, child, kiln_entity_make(kiln_entity_index(live), kiln_entity_generation(live) + 1),
                               "was never spawned in this world");
    kiln_entity next = kiln_entity_make(kiln_entity_index(gone), kiln_entity_generation(gone) + 1);
    assert_every_write_refuses(&F, child, next, "was never spawned in this world");
    kiln_entity reuse;
    ck_assert_int_eq(kiln_spawn(F.world, &reuse), KILN_OK);
    ck_assert_uint_eq(reuse, next); /* the link would have named this entity */
    /* an entity of another, larger world: a slot this one has not reached */
    scene other;
    scene_open(&other);
    kiln_entity far = KILN_NULL_ENTITY;
    for (int i = 0; i < 300; i++) ck_assert_int_eq(kiln_spawn(other.world, &far), KILN_OK);
    assert_every_write_refuses(&F, child, far, "was never spawned in this world");
    scene_close(&other);
}

KILN_TEST(links, reparenting_inside_a_query_loop_lands_after_it_and_drops_a_cycle_closed_there) {
    kiln_local_transform l = sample_local(12);
    kiln_entity a = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity b = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity kids[6];
    for (int i = 0; i < 6; i++) kids[i] = spawn_node(&F, a, &l);
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(F.world, &(kiln_query_desc){.with = {F.ids.parent}}, &q), KILN_OK);
    kiln_iter it;
    kiln_query_iter(q, &it);
    int seen = 0;
    while (kiln_query_next(&it))
        for (int32_t r = 0; r < it.count; r++, seen++) {
            ck_assert_int_eq(kiln_transform_set_parent(F.world, it.entities[r], b), KILN_OK);
            ck_assert_uint_eq(((const kiln_parent *)it.columns[0])[r].entity, a); /* not yet */
        }
    ck_assert_int_eq(seen, 6);
    assert_children_count(&F, b, 6);
    /* two links each fine alone, a loop together: the second is dropped when the loop ends */
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_int_eq(kiln_transform_set_parent(F.world, a, kids[0]), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, kids[0], a), KILN_OK);
    while (kiln_query_next(&it)) {}
    ck_assert_uint_eq(parent_link(&F, a), kids[0]);
    ck_assert_uint_eq(parent_link(&F, kids[0]), b);
    kiln_query_destroy(q);
    propagate_ok(&F, NULL);
}

KILN_TEST(links, a_stale_parent_is_a_dead_link_and_a_deferred_spawn_is_a_parent) {
    kiln_local_transform l = sample_local(3);
    kiln_entity child = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity gone;
    ck_assert_int_eq(kiln_spawn(F.world, &gone), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.world, gone), KILN_OK);
    kiln_entity reuse;
    ck_assert_int_eq(kiln_spawn(F.world, &reuse), KILN_OK);
    ck_assert_uint_eq(kiln_entity_index(reuse), kiln_entity_index(gone));
    /* a handle whose slot moved on can never name an entity again: a root, as documented */
    ck_assert_int_eq(kiln_add(F.world, child, F.ids.parent, &(kiln_parent){gone}), KILN_OK);
    ck_assert_int_eq(kiln_transform_children(F.world, reuse, NULL, 0), 0);
    propagate_ok(&F, NULL);
    mat4 m;
    reference_local(&l, m);
    assert_matrix_near(world_matrix(&F, child), m, "child of a stale handle");
    /* a handle reserved by a deferred spawn is the parent that spawn makes */
    kiln_defer_begin(F.world);
    kiln_entity later;
    ck_assert_int_eq(kiln_spawn(F.world, &later), KILN_OK);
    ck_assert_int_eq(kiln_set(F.world, child, F.ids.parent, &(kiln_parent){later}), KILN_OK);
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    ck_assert_uint_eq(parent_link(&F, child), later);
    ck_assert_int_eq(kiln_transform_children(F.world, later, NULL, 0), 1);
}

KILN_TEST(links, set_parent_links_entities_spawned_earlier_in_the_same_deferred_section) {
    kiln_local_transform l = sample_local(9);
    kiln_entity root = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_defer_begin(F.world);
    kiln_entity a, b;
    ck_assert_int_eq(kiln_spawn_with(F.world, &F.ids.local, (const void *[]){&l}, 1, &a), KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(F.world, &F.ids.local, (const void *[]){&l}, 1, &b), KILN_OK);
    ck_assert_msg(kiln_transform_set_parent(F.world, a, root) == KILN_OK, "%s", kiln_world_error(F.world));
    ck_assert_msg(kiln_transform_set_parent(F.world, b, a) == KILN_OK, "%s", kiln_world_error(F.world));
    assert_refused(&F, kiln_transform_set_parent(F.world, b, b), KILN_ERR_INVALID_ARGUMENT,
                   "kiln_transform_set_parent: ", "cannot be its own parent");
    /* together with b -> a, this one closes a loop: refused when the queue lands */
    ck_assert_int_eq(kiln_transform_set_parent(F.world, a, b), KILN_OK);
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    ck_assert_uint_eq(parent_link(&F, a), root);
    ck_assert_uint_eq(parent_link(&F, b), a);
    propagate_ok(&F, NULL);
    mat4 m, m2, m3;
    reference_local(&l, m);
    glm_mat4_mul(m, m, m2);
    glm_mat4_mul(m2, m, m3);
    assert_matrix_near(world_matrix(&F, b), m3, "grandchild spawned deferred");
    /* outside a section, a handle that is not alive is still refused */
    kiln_entity gone;
    ck_assert_int_eq(kiln_spawn(F.world, &gone), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.world, gone), KILN_OK);
    assert_refused(&F, kiln_transform_set_parent(F.world, gone, root), KILN_ERR_DEAD_ENTITY,
                   "kiln_transform_set_parent: ", "is not alive");
}

KILN_TEST(links, despawn_recursive_takes_an_entity_spawned_earlier_in_the_same_deferred_section) {
    kiln_entity root;
    ck_assert_int_eq(kiln_spawn(F.world, &root), KILN_OK);
    kiln_defer_begin(F.world);
    kiln_entity fresh;
    ck_assert_int_eq(kiln_spawn(F.world, &fresh), KILN_OK);
    ck_assert_msg(kiln_transform_despawn_recursive(F.world, fresh) == KILN_OK, "%s", kiln_world_error(F.world));
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    ck_assert(!kiln_is_alive(F.world, fresh));
    ck_assert_int_eq(kiln_entity_count(F.world), 1);
    assert_refused(&F, kiln_transform_despawn_recursive(F.world, fresh), KILN_ERR_DEAD_ENTITY,
                   "kiln_transform_despawn_recursive: ", "is not alive");
}

KILN_TEST(links, a_nan_local_stays_in_its_subtree_and_is_not_rewritten_every_frame) {
    kiln_local_transform l = sample_local(11), bad = l;
    bad.position[1] = NAN;
    bad.scale[0] = INFINITY;
    kiln_entity root = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity sick = spawn_node(&F, root, &bad);
    kiln_entity below = spawn_node(&F, sick, &l);
    kiln_entity sibling = spawn_node(&F, root, &l);
    propagate_ok(&F, NULL);
    ck_assert(isnan(world_matrix(&F, sick)[13]));
    ck_assert(isnan(world_matrix(&F, below)[13]));
    mat4 m, m2;
    reference_local(&l, m);
    glm_mat4_mul(m, m, m2);
    assert_matrix_near(world_matrix(&F, sibling), m2, "sibling of a NaN");
    kiln_tick_advance(F.world);
    kiln_transform_propagate_stats stats;
    propagate_ok(&F, &stats);
    ck_assert_int_eq(stats.updated, 0);
    ck_assert_int_eq(kiln_set(F.world, sick, F.ids.local, &l), KILN_OK);
    kiln_tick_advance(F.world);
    propagate_ok(&F, &stats);
    ck_assert_int_eq(stats.updated, 2);
    mat4 m3;
    glm_mat4_mul(m2, m, m3);
    assert_matrix_near(world_matrix(&F, below), m3, "healed grandchild");
}

/* ------------------------------------------------------------------------------------------ */
/* deep chains and cycles written through pointers                                            */
/* ------------------------------------------------------------------------------------------ */

#define DEEP 100000

/* Caps the test process's stack at 1 MiB (each test runs in a process of its own), so a
 * walk that recurses once per link (100000 frames) crashes instead of passing by luck. */
static void small_stack(void) {
    struct rlimit lim;
    ck_assert_int_eq(getrlimit(RLIMIT_STACK, &lim), 0);
    lim.rlim_cur = 1 << 20;
    ck_assert_int_eq(setrlimit(RLIMIT_STACK, &lim), 0);
}

/* The children index read its links through a query iteration, whose end lands what the
 * world has queued: an add left queued by a section that ran out of memory landed inside
 * kiln_transform_children. It waits for the next section's end, as documented. */
KILN_TEST(links, a_look_up_of_children_lands_nothing_left_queued) {
    kiln_local_transform l = sample_local(1);
    kiln_entity a = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity b = spawn_node(&F, a, &l);
    kiln_component late = test_register_tag(F.world, "Late");
    kiln_defer_begin(F.world);
    ck_assert_int_eq(kiln_add(F.world, b, late, NULL), KILN_OK);
    test_allocator_fail_after(&F.alloc, 0); /* the add makes an archetype: it cannot land */
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_ERR_OUT_OF_MEMORY);
    test_allocator_fail_never(&F.alloc);
    kiln_entity kids[2];
    ck_assert_int_eq(kiln_transform_children(F.world, a, kids, 2), 1);
    ck_assert_uint_eq(kids[0], b);
    ck_assert(!kiln_has(F.world, b, late));
    kiln_defer_begin(F.world);
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    ck_assert(kiln_has(F.world, b, late));
}

/* The Parent check and propagation share one limit: 256 links above an entity are taken
 * and propagate; the 257th is refused when the link is made, by every way of writing it. */
KILN_TEST(links, a_chain_256_links_deep_is_taken_and_propagates_and_the_257th_link_is_refused) {
    kiln_local_transform l = kiln_transform_local_identity();
    l.position[0] = 1;
    kiln_entity chain[257], extra;
    for (int i = 0; i < 257; i++) {
        ck_assert_int_eq(kiln_spawn_with(F.world, &F.ids.local, (const void *[]){&l}, 1, &chain[i]), KILN_OK);
        if (i > 0) ck_assert_int_eq(kiln_transform_set_parent(F.world, chain[i], chain[i - 1]), KILN_OK);
    }
    ck_assert_int_eq(kiln_spawn_with(F.world, &F.ids.local, (const void *[]){&l}, 1, &extra), KILN_OK);
    propagate_ok(&F, NULL);
    ck_assert_float_eq_tol(world_matrix(&F, chain[256])[12], 257.0f, 1e-3f);
    uint64_t hash = kiln_world_hash(F.world), digest = test_world_digest(F.world);
    char want[160], cb[32], pb[32];
    snprintf(want, sizeof want, "making %s a child of %s would create a parent chain deeper than 256",
             test_entity_string(extra, cb), test_entity_string(chain[256], pb));
    assert_refused(&F, kiln_transform_set_parent(F.world, extra, chain[256]), KILN_ERR_INVALID_ARGUMENT,
                   "kiln_transform_set_parent: ", want);
    kiln_parent p = {chain[256]};
    assert_refused(&F, kiln_add(F.world, extra, F.ids.parent, &p), KILN_ERR_INVALID_ARGUMENT, "kiln_add: ", want);
    kiln_entity spawned = KILN_NULL_ENTITY;
    assert_refused(&F, kiln_spawn_with(F.world, &F.ids.parent, (const void *[]){&p}, 1, &spawned),
                   KILN_ERR_INVALID_ARGUMENT, "kiln_spawn_with: ", "parent chain deeper than 256");
    ck_assert_uint_eq(spawned, KILN_NULL_ENTITY);
    ck_assert_uint_eq(kiln_world_hash(F.world), hash);
    ck_assert_uint_eq(test_world_digest(F.world), digest);
    propagate_ok(&F, NULL);
    ck_assert_float_eq_tol(world_matrix(&F, chain[256])[12], 257.0f, 1e-3f);
}

KILN_TEST_GROUP_WITH(deep, .setup = setup, .teardown = teardown, .timeout = 120);

KILN_TEST(deep, a_chain_100000_links_deep_fails_propagation_and_despawns_whole_without_recursing) {
    static kiln_entity chain[DEEP];
    kiln_local_transform l = kiln_transform_local_identity();
    for (int i = 0; i < DEEP; i++) {
        ck_assert_int_eq(kiln_spawn_with(F.world, &F.ids.local, (const void *[]){&l}, 1, &chain[i]), KILN_OK);
        if (i > 0) link_unchecked(&F, chain[i], chain[i - 1]);
    }
    kiln_entity bystander = spawn_node(&F, KILN_NULL_ENTITY, &l);
    small_stack();
    /* the check still refuses to extend it, and to close it */
    ck_assert_int_eq(kiln_transform_set_parent(F.world, bystander, chain[DEEP - 1]), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, chain[0], chain[DEEP - 1]), KILN_ERR_INVALID_ARGUMENT);
    kiln_result r = propagate(&F, NULL);
    ck_assert_int_eq(r, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kiln_world_error(F.world), "deeper than 256"));
    ck_assert(kiln_has(F.world, bystander, F.ids.world));
    ck_assert(kiln_has(F.world, chain[256], F.ids.world));
    ck_assert_int_eq(kiln_transform_children(F.world, chain[DEEP / 2], NULL, 0), 1);
    ck_assert_int_eq(kiln_transform_despawn_recursive(F.world, chain[0]), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(F.world), 1);
    propagate_ok(&F, NULL);
}

KILN_TEST(deep, a_root_with_100000_children_propagates_lists_and_despawns_them) {
    kiln_local_transform l = sample_local(13);
    kiln_entity root = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_parent link = {root};
    for (int i = 0; i < DEEP; i++) {
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(F.world, (kiln_component[]){F.ids.local, F.ids.parent},
                                         (const void *[]){&l, &link}, 2, &e), KILN_OK);
    }
    small_stack();
    kiln_transform_propagate_stats stats;
    propagate_ok(&F, &stats);
    ck_assert_int_eq(stats.added, DEEP + 1);
    assert_children_count(&F, root, DEEP);
    ck_assert_int_eq(kiln_transform_despawn_recursive(F.world, root), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(F.world), 0);
}

KILN_TEST(deep, a_cycle_written_through_a_pointer_is_refused_by_a_tree_clone_not_walked_forever) {
    kiln_local_transform l = sample_local(5);
    kiln_entity a = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity b = spawn_node(&F, a, &l);
    kiln_entity c = spawn_node(&F, b, &l);
    kiln_entity leaf = spawn_node(&F, c, &l);
    link_unchecked(&F, a, c); /* a -> c -> b -> a */
    kiln_tick_advance(F.world); /* the children index sees a link written so from the next tick */
    uint64_t hash = kiln_world_hash(F.world);
    /* before the walk knew to stop, it grew its list until memory ran out: a budget keeps the
     * test from taking the machine's */
    test_allocator_fail_after(&F.alloc, 20000);
    kiln_entity copy = KILN_NULL_ENTITY;
    for (int i = 0; i < 3; i++) {
        kiln_entity top = (kiln_entity[]){a, b, c}[i];
        assert_refused(&F, kiln_clone(F.world, top, &(kiln_clone_desc){.tree = true}, &copy),
                       KILN_ERR_INVALID_ARGUMENT, "kiln_clone: ", "is its own descendant");
    }
    test_allocator_fail_never(&F.alloc);
    ck_assert_uint_eq(kiln_world_hash(F.world), hash);
    /* a link onto the loop is refused as the loop it is, not as a deep chain */
    kiln_entity outside = spawn_node(&F, KILN_NULL_ENTITY, &l);
    hash = kiln_world_hash(F.world);
    char want[192], ob[32], bb[32];
    snprintf(want, sizeof want, "making %s a child of %s would create a parent chain that loops (a cycle "
             "written through a pointer)", test_entity_string(outside, ob), test_entity_string(b, bb));
    assert_refused(&F, kiln_transform_set_parent(F.world, outside, b), KILN_ERR_INVALID_ARGUMENT,
                   "kiln_transform_set_parent: ", want);
    assert_refused(&F, kiln_add(F.world, outside, F.ids.parent, &(kiln_parent){b}), KILN_ERR_INVALID_ARGUMENT,
                   "kiln_add: ", want);
    ck_assert_uint_eq(kiln_world_hash(F.world), hash);
    /* a self link too: a root with no children (the index lists no self link), so a clone of
     * the leaf, alone or as a tree, points its copy's Parent at the copy, which the Parent
     * check refuses as it refuses any self link, the world as it was */
    link_unchecked(&F, leaf, leaf);
    kiln_tick_advance(F.world);
    int64_t count = kiln_entity_count(F.world);
    hash = kiln_world_hash(F.world);
    for (int tree = 0; tree < 2; tree++) {
        assert_refused(&F, kiln_clone(F.world, leaf, &(kiln_clone_desc){.tree = tree}, &copy),
                       KILN_ERR_INVALID_ARGUMENT, "kiln_clone: the copy of entity ", "component 'Parent': entity ");
        ck_assert_msg(strstr(kiln_world_error(F.world), "cannot be its own parent") != NULL, "%s",
                      kiln_world_error(F.world));
        ck_assert_int_eq(kiln_entity_count(F.world), count);
        ck_assert_uint_eq(kiln_world_hash(F.world), hash);
    }
    ck_assert_int_eq(kiln_transform_despawn_recursive(F.world, a), KILN_OK);
    ck_assert(kiln_is_alive(F.world, leaf) && !kiln_is_alive(F.world, b));
}

/* A kiln_write_fn counting bytes and newlines. */
typedef struct byte_count {
    size_t bytes;
} byte_count;

static bool count_bytes(void *ud, const void *data, size_t size) {
    (void)data;
    ((byte_count *)ud)->bytes += size;
    return true;
}

KILN_TEST(deep, a_chain_100000_links_deep_exports_without_recursing) {
    static kiln_entity chain[DEEP];
    kiln_local_transform l = kiln_transform_local_identity();
    for (int i = 0; i < DEEP; i++) {
        ck_assert_int_eq(kiln_spawn_with(F.world, &F.ids.local, (const void *[]){&l}, 1, &chain[i]), KILN_OK);
        if (i > 0) link_unchecked(&F, chain[i], chain[i - 1]);
    }
    small_stack();
    byte_count out = {0};
    ck_assert_msg(kiln_export(F.world, NULL, count_bytes, &out) == KILN_OK, "%s", kiln_world_error(F.world));
    ck_assert_uint_gt(out.bytes, (size_t)DEEP * 20);
    byte_count mid = {0};
    ck_assert_int_eq(kiln_export(F.world, &(kiln_export_desc){.roots = &chain[DEEP / 2], .root_count = 1},
                                 count_bytes, &mid),
                     KILN_OK);
    ck_assert_uint_gt(mid.bytes, (size_t)DEEP / 2 * 20);
    ck_assert_uint_lt(mid.bytes, out.bytes);
}

KILN_TEST(deep, an_export_of_every_root_refuses_entities_that_no_root_reaches) {
    kiln_local_transform l = sample_local(6);
    kiln_entity root = spawn_node(&F, KILN_NULL_ENTITY, &l);
    spawn_node(&F, root, &l);
    kiln_entity x = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity y = spawn_node(&F, x, &l);
    spawn_node(&F, y, &l);
    link_unchecked(&F, x, y); /* x <-> y, with a child under y: no root reaches them */
    byte_count out = {0};
    assert_refused(&F, kiln_export(F.world, NULL, count_bytes, &out), KILN_ERR_INVALID_ARGUMENT, "kiln_export: ",
                   "a Parent cycle");
    ck_assert_uint_eq(out.bytes, 0);
    ck_assert(names_entity(kiln_world_error(F.world), x) || names_entity(kiln_world_error(F.world), y));
    /* given as a root, the cycle is met from inside */
    assert_refused(&F, kiln_export(F.world, &(kiln_export_desc){.roots = &x, .root_count = 1}, count_bytes, &out),
                   KILN_ERR_INVALID_ARGUMENT, "kiln_export: ", "given twice");
    ck_assert_int_eq(kiln_export(F.world, &(kiln_export_desc){.roots = &root, .root_count = 1}, count_bytes, &out),
                     KILN_OK);
}

/* ------------------------------------------------------------------------------------------ */
/* out of memory                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* A scene for the allocation tests: a tree of 40 nodes built in shuffled order, then 8 more
 * with a LocalTransform and no WorldTransform yet (4 roots, 4 under node 3), one of them
 * (and a node of the tree) without a local. */
static void build_oom_scene(scene *s, kiln_entity *h) {
    static node nodes[40];
    make_tree(nodes, 40, 77u);
    build_shuffled(s, nodes, 40, h, 5u);
    for (int i = 0; i < 8; i++) {
        kiln_local_transform l = sample_local(100 + i);
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(s->world, &s->ids.local, (const void *[]){&l}, 1, &e), KILN_OK);
        if (i >= 4) ck_assert_int_eq(kiln_transform_set_parent(s->world, e, h[3]), KILN_OK);
        h[40 + i] = e;
    }
    /* an archetype of its own, so linking it makes a new one */
    ck_assert_int_eq(kiln_add(s->world, h[40], test_register_tag(s->world, "Solo"), NULL), KILN_OK);
}

typedef kiln_result (*oom_step)(scene *s, const kiln_entity *h);

/* Runs step on a fresh scene with the allocator refusing after k grants, k = 0, 1, ..., until
 * it succeeds: every failing run is out of memory, names its call and leaves the world's hash
 * (and the digest, ticks included) as it was. Returns the number of failing runs. */
static int every_allocation_fails_cleanly(oom_step step, bool prime, const char *call) {
    for (int k = 0; k < 10000; k++) {
        scene s;
        kiln_entity h[48];
        scene_open(&s);
        build_oom_scene(&s, h);
        if (prime) {
            propagate_ok(&s, NULL);
            kiln_tick_advance(s.world);
        }
        uint64_t hash = kiln_world_hash(s.world), digest = test_world_digest(s.world);
        test_allocator_fail_after(&s.alloc, k);
        kiln_result r = step(&s, h);
        test_allocator_fail_never(&s.alloc);
        if (r == KILN_OK) {
            scene_close(&s);
            return k;
        }
        ck_assert_msg(r == KILN_ERR_OUT_OF_MEMORY, "grant %d: %s", k, kiln_world_error(s.world));
        ck_assert_msg(strncmp(kiln_world_error(s.world), call, strlen(call)) == 0, "grant %d: %s", k,
                      kiln_world_error(s.world));
        ck_assert_msg(kiln_world_hash(s.world) == hash, "grant %d: %s changed the world", k, call);
        ck_assert_msg(test_world_digest(s.world) == digest, "grant %d: %s changed a tick", k, call);
        /* and the world still works: the same step now succeeds */
        ck_assert_int_eq(step(&s, h), KILN_OK);
        scene_close(&s);
    }
    ck_abort_msg("%s never succeeded", call);
    return -1;
}

static kiln_result propagate_step(scene *s, const kiln_entity *h) {
    (void)h;
    return kiln_transform_propagate(s->world, NULL);
}

static kiln_result deferred_propagate_step(scene *s, const kiln_entity *h) {
    (void)h;
    kiln_defer_begin(s->world);
    kiln_result r = kiln_transform_propagate(s->world, NULL);
    /* the queue landing is the core's business (it keeps what it could not apply) */
    if (r == KILN_OK) test_allocator_fail_never(&s->alloc);
    ck_assert_int_eq(kiln_defer_end(s->world), KILN_OK);
    return r;
}

static kiln_result reparent_step(scene *s, const kiln_entity *h) {
    kiln_result r = kiln_transform_set_parent(s->world, h[40], h[12]);
    return r != KILN_OK ? r : kiln_transform_set_parent(s->world, h[10], h[44]);
}

static kiln_result despawn_step(scene *s, const kiln_entity *h) {
    return kiln_transform_despawn_recursive(s->world, h[3]);
}

KILN_TEST_GROUP_WITH(oom, .timeout = 120);

KILN_TEST(oom, children_out_of_memory_says_so_instead_of_answering_none) {
    scene s;
    kiln_entity h[48];
    scene_open(&s);
    build_oom_scene(&s, h);
    kiln_entity kids[64];
    kids[0] = KILN_NULL_ENTITY;
    test_allocator_fail_after(&s.alloc, 0);
    ck_assert_int_eq(kiln_transform_children(s.world, h[3], kids, 64), -1);
    ck_assert_str_eq(kiln_world_error(s.world), "kiln_transform_children: out of memory");
    ck_assert_uint_eq(kids[0], KILN_NULL_ENTITY);
    test_allocator_fail_never(&s.alloc);
    ck_assert_int_ge(kiln_transform_children(s.world, h[3], kids, 64), 4);
    scene_close(&s);
}

KILN_TEST(oom, a_first_propagation_out_of_memory_at_any_allocation_leaves_the_world_as_it_was) {
    ck_assert_int_gt(every_allocation_fails_cleanly(propagate_step, false, "kiln_transform_propagate: "), 0);
}

KILN_TEST(oom, a_deferred_propagation_out_of_memory_at_any_allocation_leaves_the_world_as_it_was) {
    ck_assert_int_gt(every_allocation_fails_cleanly(deferred_propagate_step, false, "kiln_transform_propagate: "), 0);
}

KILN_TEST(oom, a_reparent_out_of_memory_at_any_allocation_leaves_the_world_as_it_was) {
    ck_assert_int_gt(every_allocation_fails_cleanly(reparent_step, true, "kiln_"), 0);
}

KILN_TEST(oom, a_propagation_after_a_reparent_out_of_memory_leaves_the_world_as_it_was) {
    every_allocation_fails_cleanly(propagate_step, true, "kiln_transform_propagate: ");
}

KILN_TEST(oom, a_recursive_despawn_out_of_memory_at_any_allocation_leaves_the_world_as_it_was) {
    ck_assert_int_gt(every_allocation_fails_cleanly(despawn_step, true, "kiln_transform_despawn_recursive: "), 0);
}

/* ---- the propagation system, which queues missing WorldTransforms into its own buffer ---- */

/* What the propagation system writes, per entity of h: whether it has a WorldTransform, and
 * its matrix. */
typedef struct transform_state_of {
    bool has[54];
    kiln_world_transform value[54];
} transform_state_of;

static void world_transforms_of(const scene *s, const kiln_entity *h, int n, transform_state_of *dest) {
    memset(dest, 0, sizeof *dest);
    for (int i = 0; i < n; i++) {
        const kiln_world_transform *w = kiln_get(s->world, h[i], s->ids.world);
        dest->has[i] = w != NULL;
        if (w) dest->value[i] = *w;
    }
}

static bool same_transform(const transform_state_of *a, const transform_state_of *b, int i) {
    return a->has[i] == b->has[i] && (!a->has[i] || memcmp(&a->value[i], &b->value[i], sizeof a->value[i]) == 0);
}

/* -1 when every entity is as in b, else the first that is not. */
static int first_difference(const transform_state_of *a, const transform_state_of *b, int n) {
    for (int i = 0; i < n; i++)
        if (!same_transform(a, b, i)) return i;
    return -1;
}

/* Prime: propagate once, then spawn 6 more entities lacking a WorldTransform (so the system's
 * run needs its own buffer for those only). */
static void build_system_scene(scene *s, kiln_entity *h, bool prime) {
    build_oom_scene(s, h);
    if (prime) {
        propagate_ok(s, NULL);
        for (int i = 0; i < 6; i++) {
            kiln_local_transform l = sample_local(200 + i);
            ck_assert_int_eq(kiln_spawn_with(s->world, &s->ids.local, (const void *[]){&l}, 1, &h[48 + i]),
                             KILN_OK);
            if (i % 2) ck_assert_int_eq(kiln_transform_set_parent(s->world, h[48 + i], h[7]), KILN_OK);
        }
    }
}

/* Runs a schedule holding only the propagation system with the allocator refusing after k
 * grants, k = 0, 1, ..., until a run completes. A failed run says out of memory and leaves
 * each entity's WorldTransform as it was or as the completed propagation has it (the
 * system's buffer lands command by command: those it could not apply wait for the next run),
 * and the next run, with memory, completes the propagation exactly as an undisturbed one.
 * Returns the number of failing runs. */
static void *pool_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    scene *s = ud; /* the pool's bytes count (and fail) with the world's */
    pthread_mutex_lock(&s->lock);
    void *result = test_allocator_fn(&s->alloc, ptr, osize, nsize);
    pthread_mutex_unlock(&s->lock);
    return result;
}

static int every_system_allocation_fails_cleanly(bool prime, bool parallel) {
    int n = prime ? 54 : 48;
    scene ref;
    kiln_entity hr[54];
    scene_open(&ref);
    build_system_scene(&ref, hr, prime);
    propagate_ok(&ref, NULL);
    static transform_state_of expected, before, after;
    world_transforms_of(&ref, hr, n, &expected);
    scene_close(&ref);
    for (int k = 0; k < 10000; k++) {
        scene s;
        kiln_entity h[54];
        scene_open(&s);
        build_system_scene(&s, h, prime);
        kiln_jobs *jobs = NULL;
        if (parallel) {
            jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1, .alloc = pool_alloc_fn, .alloc_ud = &s});
            ck_assert_ptr_nonnull(jobs);
        }
        kiln_schedule *sched = kiln_schedule_create(s.world, &(kiln_schedule_desc){.jobs = jobs});
        kiln_system_desc desc;
        kiln_transform_system_desc(s.world, &desc);
        ck_assert_int_eq(kiln_schedule_add(sched, &desc), KILN_OK);
        ck_assert_int_eq(kiln_schedule_build(sched), KILN_OK);
        world_transforms_of(&s, h, n, &before);
        int64_t entities = kiln_entity_count(s.world);
        kiln_world_clear_error(s.world);
        test_allocator_fail_after(&s.alloc, k);
        kiln_result r = kiln_schedule_run(sched, 0.0);
        test_allocator_fail_never(&s.alloc);
        world_transforms_of(&s, h, n, &after);
        ck_assert_int_eq(kiln_entity_count(s.world), entities);
        if (s.alloc.failures == 0) {
            ck_assert_msg(r == KILN_OK && first_difference(&after, &expected, n) < 0,
                          "an undisturbed run did not propagate: %s", kiln_world_error(s.world));
            kiln_schedule_destroy(sched);
            kiln_jobs_destroy(jobs);
            scene_close(&s);
            return k;
        }
        for (int i = 0; i < n; i++)
            ck_assert_msg(same_transform(&after, &before, i) || same_transform(&after, &expected, i),
                          "grant %d: a failed run left entity %d's WorldTransform half-made (%s)", k,
                          i, kiln_world_error(s.world));
        ck_assert_msg(strstr(kiln_world_error(s.world), "out of memory") != NULL,
                      "grant %d: no clear error: \"%s\"", k, kiln_world_error(s.world));
        ck_assert_msg(kiln_schedule_run(sched, 0.0) == KILN_OK, "grant %d: the retry failed: %s", k,
                      kiln_world_error(s.world));
        world_transforms_of(&s, h, n, &after);
        int d = first_difference(&after, &expected, n);
        ck_assert_msg(d < 0, "grant %d: the run after a failed one left entity %d unpropagated (%s)", k, d,
                      kiln_world_error(s.world));
        kiln_schedule_destroy(sched);
        kiln_jobs_destroy(jobs);
        scene_close(&s);
    }
    ck_abort_msg("the propagation system never succeeded");
    return -1;
}

KILN_TEST(oom, the_propagation_system_out_of_memory_on_its_first_run_leaves_transforms_as_they_were) {
    ck_assert_int_gt(every_system_allocation_fails_cleanly(false, false), 0);
}

KILN_TEST(oom, the_propagation_system_out_of_memory_queueing_new_entities_leaves_transforms_as_they_were) {
    ck_assert_int_gt(every_system_allocation_fails_cleanly(true, false), 0);
}

KILN_TEST(oom, the_propagation_system_on_a_pool_out_of_memory_leaves_transforms_as_they_were) {
    ck_assert_int_gt(every_system_allocation_fails_cleanly(false, true), 0);
    ck_assert_int_gt(every_system_allocation_fails_cleanly(true, true), 0);
}
