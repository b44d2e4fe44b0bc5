/* test_transform_hierarchy.c: Check suite for the hierarchy (set_parent, children, recursive
 * despawn), the access a system using it declares, and the transform system in a schedule. A
 * parent link never closes a cycle. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"
#include "transform_fixture.h"

/* The scene (transform_fixture.h) opened afresh around every test of a group using it. */
static scene F;

static void setup(void) { scene_open(&F); }

static void teardown(void) { scene_close(&F); }

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
/* hierarchy                                                                                  */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(hierarchy, .setup = setup, .teardown = teardown);

KILN_TEST(hierarchy, set_parent_rejects_dead_entities_and_leaves_the_world_unchanged) {
    kiln_entity a, b, dead;
    ck_assert_int_eq(kiln_spawn(F.world, &a), KILN_OK);
    ck_assert_int_eq(kiln_spawn(F.world, &b), KILN_OK);
    ck_assert_int_eq(kiln_spawn(F.world, &dead), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.world, dead), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, a, b), KILN_OK);
    kiln_tick tick = kiln_changed_tick(F.world, a, F.ids.parent);
    kiln_tick_advance(F.world);

    ck_assert_int_eq(kiln_transform_set_parent(F.world, dead, a), KILN_ERR_DEAD_ENTITY);
    ck_assert(!kiln_is_alive(F.world, dead));
    ck_assert_int_eq(kiln_transform_set_parent(F.world, a, dead), KILN_ERR_DEAD_ENTITY);
    ck_assert_str_ne(kiln_world_error(F.world), "");
    ck_assert_uint_eq(parent_link(&F, a), b);
    ck_assert_uint_eq(kiln_changed_tick(F.world, a, F.ids.parent), tick);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, b, dead), KILN_ERR_DEAD_ENTITY);
    ck_assert(!kiln_has(F.world, b, F.ids.parent));
    ck_assert_int_eq(kiln_transform_set_parent(F.world, KILN_NULL_ENTITY, a), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, dead, KILN_NULL_ENTITY), KILN_ERR_DEAD_ENTITY);
    assert_children(&F, b, &a, 1);
}

KILN_TEST(hierarchy, set_parent_rejects_a_self_link) {
    kiln_entity a, b;
    ck_assert_int_eq(kiln_spawn(F.world, &a), KILN_OK);
    ck_assert_int_eq(kiln_spawn(F.world, &b), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, a, a), KILN_ERR_INVALID_ARGUMENT);
    ck_assert(!kiln_has(F.world, a, F.ids.parent));
    ck_assert_int_eq(kiln_transform_set_parent(F.world, a, b), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, a, a), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(parent_link(&F, a), b);
    ck_assert_int_eq(kiln_transform_children(F.world, a, NULL, 0), 0);
}

/* A self link written through a pointer is a root, as propagation and despawn_recursive take
 * it: children listed the entity as its own child, and a script walking children looped. */
KILN_TEST(hierarchy, a_self_link_written_through_a_pointer_lists_no_child) {
    kiln_entity a, b;
    ck_assert_int_eq(kiln_spawn(F.world, &a), KILN_OK);
    ck_assert_int_eq(kiln_spawn(F.world, &b), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, a, b), KILN_OK);
    ck_assert_int_eq(kiln_transform_children(F.world, b, NULL, 0), 1);
    kiln_parent *p = kiln_get_mut(F.world, a, F.ids.parent);
    ck_assert_ptr_nonnull(p);
    p->entity = a;
    kiln_tick_advance(F.world);
    ck_assert_int_eq(kiln_transform_children(F.world, a, NULL, 0), 0);
    ck_assert_int_eq(kiln_transform_children(F.world, b, NULL, 0), 0);
    ck_assert_int_eq(kiln_transform_despawn_recursive(F.world, a), KILN_OK);
    ck_assert(!kiln_is_alive(F.world, a) && kiln_is_alive(F.world, b));
}

/* Release builds wrote through the NULL (a debug build asserted): now every build refuses. */
KILN_TEST(hierarchy, children_or_the_system_result_into_a_null_dest_with_a_capacity_are_refused) {
    kiln_entity a, b;
    ck_assert_int_eq(kiln_spawn(F.world, &a), KILN_OK);
    ck_assert_int_eq(kiln_spawn(F.world, &b), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, a, b), KILN_OK);
    ck_assert_int_eq(kiln_transform_children(F.world, b, NULL, 8), -1);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_transform_children: dest is NULL with capacity 8; nothing was "
                                                "written");
    ck_assert_int_eq(kiln_transform_children(F.world, b, NULL, 0), 1);
    ck_assert_int_eq(kiln_transform_system_result(F.world, NULL, 16), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_transform_system_result: dest is NULL with dest_size 16; the "
                                                "result stays for a later call");
    char msg[8];
    ck_assert_int_eq(kiln_transform_system_result(F.world, msg, sizeof msg), KILN_OK);
}

KILN_TEST(hierarchy, set_parent_rejects_a_link_that_would_close_a_cycle) {
    kiln_entity e[5];
    for (int i = 0; i < 5; i++) ck_assert_int_eq(kiln_spawn(F.world, &e[i]), KILN_OK);
    for (int i = 1; i < 5; i++) ck_assert_int_eq(kiln_transform_set_parent(F.world, e[i], e[i - 1]), KILN_OK);
    for (int i = 1; i < 5; i++) {
        ck_assert_int_eq(kiln_transform_set_parent(F.world, e[0], e[i]), KILN_ERR_INVALID_ARGUMENT);
        ck_assert_str_ne(kiln_world_error(F.world), "");
        ck_assert(!kiln_has(F.world, e[0], F.ids.parent));
    }
    ck_assert_int_eq(kiln_transform_set_parent(F.world, e[1], e[4]), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(parent_link(&F, e[1]), e[0]);
    /* re-parenting within the tree is fine as long as no loop forms */
    ck_assert_int_eq(kiln_transform_set_parent(F.world, e[4], e[1]), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, e[2], e[3]), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, e[1], e[4]), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(parent_link(&F, e[2]), e[1]);
    ck_assert_uint_eq(parent_link(&F, e[1]), e[0]);
    assert_children(&F, e[1], (kiln_entity[]){e[2], e[4]}, 2);
}

KILN_TEST(hierarchy, set_parent_with_a_null_parent_removes_the_link) {
    kiln_local_transform pl = sample_local(1), cl = sample_local(2);
    kiln_entity p = spawn_node(&F, KILN_NULL_ENTITY, &pl);
    kiln_entity c = spawn_node(&F, KILN_NULL_ENTITY, &cl);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, c, p), KILN_OK);
    ck_assert_uint_eq(parent_link(&F, c), p);
    propagate_ok(&F, NULL);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, c, KILN_NULL_ENTITY), KILN_OK);
    ck_assert(!kiln_has(F.world, c, F.ids.parent));
    ck_assert_int_eq(kiln_transform_children(F.world, p, NULL, 0), 0);
    propagate_ok(&F, NULL);
    mat4 m;
    reference_local(&cl, m);
    assert_matrix_near(world_matrix(&F, c), m, "unlinked child");
    /* removing a link that is not there is fine too */
    ck_assert_int_eq(kiln_transform_set_parent(F.world, c, KILN_NULL_ENTITY), KILN_OK);
}

KILN_TEST(hierarchy, children_lists_exactly_the_children_in_handle_order) {
    kiln_entity p, q, kids[6], scratch[4];
    ck_assert_int_eq(kiln_spawn(F.world, &p), KILN_OK);
    ck_assert_int_eq(kiln_spawn(F.world, &q), KILN_OK);
    /* freed slots are reused with a higher generation, so handle order differs from index
     * and spawn order */
    for (int i = 0; i < 4; i++) ck_assert_int_eq(kiln_spawn(F.world, &scratch[i]), KILN_OK);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(kiln_despawn(F.world, scratch[i]), KILN_OK);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(kiln_spawn(F.world, &kids[i]), KILN_OK);
    ck_assert_int_eq(kiln_transform_children(F.world, p, NULL, 0), 0);
    for (int i = 5; i >= 0; i--) ck_assert_int_eq(kiln_transform_set_parent(F.world, kids[i], p), KILN_OK);
    assert_children(&F, p, kids, 6);
    assert_children(&F, q, NULL, 0);

    /* re-parenting moves a child from one list to the other */
    ck_assert_int_eq(kiln_transform_set_parent(F.world, kids[2], q), KILN_OK);
    assert_children(&F, p, (kiln_entity[]){kids[0], kids[1], kids[3], kids[4], kids[5]}, 5);
    assert_children(&F, q, &kids[2], 1);

    /* a despawned child leaves the list, in a later tick as in the same one */
    kiln_tick_advance(F.world);
    ck_assert_int_eq(kiln_despawn(F.world, kids[4]), KILN_OK);
    assert_children(&F, p, (kiln_entity[]){kids[0], kids[1], kids[3], kids[5]}, 4);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, kids[1], KILN_NULL_ENTITY), KILN_OK);
    assert_children(&F, p, (kiln_entity[]){kids[0], kids[3], kids[5]}, 3);
    /* a Parent written directly counts too */
    ck_assert_int_eq(kiln_set(F.world, kids[0], F.ids.parent, &(kiln_parent){q}), KILN_OK);
    assert_children(&F, p, (kiln_entity[]){kids[3], kids[5]}, 2);
    assert_children(&F, q, (kiln_entity[]){kids[0], kids[2]}, 2);
    /* grandchildren are not children */
    ck_assert_int_eq(kiln_transform_set_parent(F.world, kids[1], kids[3]), KILN_OK);
    assert_children(&F, p, (kiln_entity[]){kids[3], kids[5]}, 2);
    assert_children(&F, kids[3], &kids[1], 1);
    /* a dead parent has none */
    ck_assert_int_eq(kiln_despawn(F.world, q), KILN_OK);
    ck_assert_int_eq(kiln_transform_children(F.world, q, NULL, 0), 0);
}

KILN_TEST(hierarchy, children_with_a_small_capacity_writes_that_many_and_returns_the_full_count) {
    kiln_entity p, kids[10];
    ck_assert_int_eq(kiln_spawn(F.world, &p), KILN_OK);
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(kiln_spawn(F.world, &kids[i]), KILN_OK);
        ck_assert_int_eq(kiln_transform_set_parent(F.world, kids[i], p), KILN_OK);
    }
    ck_assert_int_eq(kiln_transform_children(F.world, p, NULL, 0), 10);
    kiln_entity out[10];
    kiln_entity sentinel = kiln_entity_make(12345, 7);
    for (int i = 0; i < 10; i++) out[i] = sentinel;
    ck_assert_int_eq(kiln_transform_children(F.world, p, out, 3), 10);
    kiln_entity sorted[10];
    memcpy(sorted, kids, sizeof sorted);
    qsort(sorted, 10, sizeof(kiln_entity), compare_handles);
    for (int i = 0; i < 3; i++) ck_assert_uint_eq(out[i], sorted[i]);
    for (int i = 3; i < 10; i++) ck_assert_uint_eq(out[i], sentinel);
}

KILN_TEST(hierarchy, despawn_recursive_despawns_the_subtree_and_nothing_else) {
    static node nodes[100];
    kiln_entity h[100];
    make_tree(nodes, 100, 31u);
    build_shuffled(&F, nodes, 100, h, 8u);
    kiln_entity outsider;
    ck_assert_int_eq(kiln_spawn(F.world, &outsider), KILN_OK);
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
    ck_assert_int_eq(kiln_transform_despawn_recursive(F.world, h[top]), KILN_OK);
    for (int i = 0; i < 100; i++)
        ck_assert_msg(kiln_is_alive(F.world, h[i]) == !in_subtree(nodes, i, top),
                      "node %d is %s", i, kiln_is_alive(F.world, h[i]) ? "alive" : "dead");
    ck_assert(kiln_is_alive(F.world, outsider));
    ck_assert_int_eq(kiln_entity_count(F.world), 101 - inside);
    ck_assert_int_eq(kiln_transform_despawn_recursive(F.world, h[top]), KILN_ERR_DEAD_ENTITY);
    /* a leaf goes alone */
    ck_assert_int_eq(kiln_transform_despawn_recursive(F.world, outsider), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(F.world), 100 - inside);
    propagate_ok(&F, NULL);
}

KILN_TEST(hierarchy, set_parent_and_despawn_recursive_are_deferred_inside_a_deferred_section) {
    kiln_entity p, c, g, other;
    ck_assert_int_eq(kiln_spawn(F.world, &p), KILN_OK);
    ck_assert_int_eq(kiln_spawn(F.world, &c), KILN_OK);
    ck_assert_int_eq(kiln_spawn(F.world, &g), KILN_OK);
    ck_assert_int_eq(kiln_spawn(F.world, &other), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, g, c), KILN_OK);
    kiln_defer_begin(F.world);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, c, p), KILN_OK);
    ck_assert(!kiln_has(F.world, c, F.ids.parent));
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    ck_assert_uint_eq(parent_link(&F, c), p);
    assert_children(&F, p, &c, 1);
    kiln_defer_begin(F.world);
    ck_assert_int_eq(kiln_transform_despawn_recursive(F.world, p), KILN_OK);
    ck_assert(kiln_is_alive(F.world, p) && kiln_is_alive(F.world, c) && kiln_is_alive(F.world, g));
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    ck_assert(!kiln_is_alive(F.world, p));
    ck_assert(!kiln_is_alive(F.world, c));
    ck_assert(!kiln_is_alive(F.world, g));
    ck_assert(kiln_is_alive(F.world, other));
}

/* The _unless form: a kept component anywhere in the subtree refuses the call whole; queued,
 * each despawn is checked as it lands, after an add queued before it. */
KILN_TEST(hierarchy, despawn_recursive_unless_keeps_a_subtree_holding_a_kept_component) {
    kiln_entity p, c, g;
    ck_assert_int_eq(kiln_spawn(F.world, &p), KILN_OK);
    ck_assert_int_eq(kiln_spawn(F.world, &c), KILN_OK);
    ck_assert_int_eq(kiln_spawn(F.world, &g), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, c, p), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, g, c), KILN_OK);
    kiln_component kept = F.ids.local;
    ck_assert_int_eq(kiln_add(F.world, g, kept, NULL), KILN_OK);
    ck_assert_int_eq(kiln_transform_despawn_recursive_unless(F.world, p, &kept, 1), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kiln_world_error(F.world), "holds LocalTransform"), "%s", kiln_world_error(F.world));
    ck_assert(kiln_is_alive(F.world, p) && kiln_is_alive(F.world, c) && kiln_is_alive(F.world, g));
    ck_assert_int_eq(kiln_remove(F.world, g, kept, NULL), KILN_OK);
    kiln_defer_begin(F.world);
    ck_assert_int_eq(kiln_add(F.world, c, kept, NULL), KILN_OK);
    ck_assert_int_eq(kiln_transform_despawn_recursive_unless(F.world, p, &kept, 1), KILN_OK);
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    ck_assert(kiln_is_alive(F.world, c)); /* its despawn was dropped as it landed */
    ck_assert(!kiln_is_alive(F.world, p) && !kiln_is_alive(F.world, g));
    int64_t dropped = 0;
    kiln_world_dropped(F.world, &dropped, NULL);
    ck_assert_int_eq(dropped, 1);
}

KILN_TEST(hierarchy, plain_despawn_of_a_parent_leaves_the_children_alive_as_roots) {
    kiln_local_transform pl = sample_local(1), cl = sample_local(2);
    kiln_entity p = spawn_node(&F, KILN_NULL_ENTITY, &pl);
    kiln_entity kids[3];
    for (int i = 0; i < 3; i++) kids[i] = spawn_node(&F, p, &cl);
    kiln_entity grandchild = spawn_node(&F, kids[0], &cl);
    propagate_ok(&F, NULL);
    kiln_tick_advance(F.world);
    ck_assert_int_eq(kiln_despawn(F.world, p), KILN_OK);
    for (int i = 0; i < 3; i++) ck_assert(kiln_is_alive(F.world, kids[i]));
    ck_assert(kiln_is_alive(F.world, grandchild));
    ck_assert_int_eq(kiln_transform_children(F.world, p, NULL, 0), 0);
    assert_children(&F, kids[0], &grandchild, 1);
    propagate_ok(&F, NULL);
    mat4 c, expected;
    reference_local(&cl, c);
    glm_mat4_mul(c, c, expected);
    for (int i = 0; i < 3; i++) assert_matrix_near(world_matrix(&F, kids[i]), c, "orphaned child");
    assert_matrix_near(world_matrix(&F, grandchild), expected, "grandchild of an orphan");
}

/* ------------------------------------------------------------------------------------------ */
/* declared access                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* What the hierarchy systems work on: a parent and a child, linked or not yet. */
typedef struct family {
    kiln_entity parent, child;
    int32_t children_seen;
} family;

static void link_them(const kiln_system_ctx *ctx) {
    family *f = ctx->user;
    ck_assert_int_eq(kiln_transform_set_parent(ctx->world, f->child, f->parent), KILN_OK);
}

static void count_children(const kiln_system_ctx *ctx) {
    family *f = ctx->user;
    f->children_seen = kiln_transform_children(ctx->world, f->parent, NULL, 0);
}

static void add_parent_link(const kiln_system_ctx *ctx) {
    family *f = ctx->user;
    ck_assert_int_eq(kiln_add(ctx->world, f->child, F.ids.parent, &(kiln_parent){f->parent}), KILN_OK);
}

static void despawn_tree(const kiln_system_ctx *ctx) {
    family *f = ctx->user;
    ck_assert_int_eq(kiln_transform_despawn_recursive(ctx->world, f->parent), KILN_OK);
}

/* Runs one frame of a schedule holding desc (its user a fresh family: two roots), expecting
 * none of the debug checks to fail; returns the family. */
static family run_family(kiln_system_desc desc, bool linked) {
    static family f;
    memset(&f, 0, sizeof f);
    ck_assert_int_eq(kiln_spawn(F.world, &f.parent), KILN_OK);
    ck_assert_int_eq(kiln_spawn(F.world, &f.child), KILN_OK);
    if (linked) ck_assert_int_eq(kiln_transform_set_parent(F.world, f.child, f.parent), KILN_OK);
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    desc.user = &f;
    ck_assert_int_eq(kiln_schedule_add(s, &desc), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    kiln_schedule_destroy(s);
    return f;
}

static void run_expecting_abort(kiln_system_desc desc, bool linked, const char *message) {
    test_expect_abort(message); /* an abort saying anything else fails the test */
    run_family(desc, linked);
    ck_abort_msg("the run finished: expected \"%s\"", message);
}

KILN_TEST_GROUP_WITH(declared, .setup = setup, .teardown = teardown, .timeout = 30);

KILN_TEST_SIGNAL(declared, set_parent_from_a_system_not_declaring_parent_aborts_naming_it, SIGABRT) {
    run_expecting_abort((kiln_system_desc){.name = "linker", .run = link_them, .main_thread = true}, false,
                        "kiln_transform_set_parent: system 'linker' reads Parent without declaring it");
}

KILN_TEST_SIGNAL(declared, adding_parent_from_a_system_not_declaring_parent_aborts_naming_it, SIGABRT) {
    run_expecting_abort((kiln_system_desc){.name = "adder", .run = add_parent_link, .main_thread = true}, false,
                        "Parent's check: system 'adder' reads Parent without declaring it");
}

KILN_TEST_SIGNAL(declared, children_from_a_system_not_declaring_parent_aborts_naming_it, SIGABRT) {
    run_expecting_abort((kiln_system_desc){.name = "counter", .run = count_children}, true,
                        "kiln_transform_children: system 'counter' reads Parent without declaring it");
}

KILN_TEST_SIGNAL(declared, despawn_recursive_from_a_system_not_declaring_parent_aborts_naming_it, SIGABRT) {
    run_expecting_abort((kiln_system_desc){.name = "reaper", .run = despawn_tree, .main_thread = true}, true,
                        "kiln_transform_despawn_recursive: system 'reaper' reads Parent without declaring it");
}

KILN_TEST(declared, systems_declaring_parent_link_count_and_despawn_trees) {
    family f = run_family((kiln_system_desc){.name = "linker", .run = link_them, .main_thread = true,
                                             .reads = {F.ids.parent}},
                          false);
    ck_assert_int_eq(parent_link(&F, f.child), f.parent);
    f = run_family((kiln_system_desc){.name = "adder", .run = add_parent_link, .main_thread = true,
                                      .writes = {F.ids.parent}},
                   false);
    ck_assert_int_eq(parent_link(&F, f.child), f.parent);
    f = run_family((kiln_system_desc){.name = "counter", .run = count_children, .reads = {F.ids.parent}}, true);
    ck_assert_int_eq(f.children_seen, 1);
    f = run_family((kiln_system_desc){.name = "reaper", .run = despawn_tree, .main_thread = true,
                                      .reads = {F.ids.parent}},
                   true);
    ck_assert(!kiln_is_alive(F.world, f.parent) && !kiln_is_alive(F.world, f.child));
}

/* ------------------------------------------------------------------------------------------ */
/* schedule                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void idle_system(const kiln_system_ctx *ctx) {
    int *runs = ctx->user;
    (*runs)++;
}

KILN_TEST_GROUP_WITH(schedule, .setup = setup, .teardown = teardown, .timeout = 60);

KILN_TEST(schedule, transform_system_desc_declares_its_access) {
    kiln_system_desc desc;
    memset(&desc, 0x5a, sizeof desc);
    kiln_transform_system_desc(F.world, &desc);
    ck_assert_str_eq(desc.name, "propagate_transforms");
    ck_assert(desc.run != NULL);
    ck_assert(!desc.exclusive);
    ck_assert(!desc.disabled);
    bool reads_parent = false, reads_local = false, writes_world = false;
    for (int i = 0; i < KILN_SYSTEM_MAX_ACCESS && desc.reads[i]; i++) {
        reads_parent = reads_parent || desc.reads[i] == F.ids.parent;
        reads_local = reads_local || desc.reads[i] == F.ids.local;
    }
    for (int i = 0; i < KILN_SYSTEM_MAX_ACCESS && desc.writes[i]; i++)
        writes_world = writes_world || desc.writes[i] == F.ids.world;
    ck_assert(reads_parent && reads_local && writes_world);
    ck_assert_ptr_null(desc.before[0]);
    ck_assert_ptr_null(desc.after[0]);
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
    kiln_component_info info;
    ck_assert(kiln_component_info_get(F.world, F.ids.local, &info));
    ck_assert_ptr_nonnull(info.defaults);
    kiln_local_transform identity = kiln_transform_local_identity();
    ck_assert_int_eq(memcmp(info.defaults, &identity, sizeof identity), 0);
    /* a parent at x = 10 and a child at local x = 1, both given only a position */
    kiln_entity parent, child;
    ck_assert_int_eq(kiln_spawn(F.world, &parent), KILN_OK);
    ck_assert_int_eq(kiln_add(F.world, parent, F.ids.local, NULL), KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(F.world, &F.ids.local, NULL, 1, &child), KILN_OK);
    place_at_x(&F, parent, 10.0f);
    place_at_x(&F, child, 1.0f);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, child, parent), KILN_OK);
    propagate_ok(&F, NULL);
    const float *m = world_matrix(&F, child);
    ck_assert_float_eq_tol(m[12], 11.0f, 1e-5f); /* column 3, row 0: x */
    ck_assert_float_eq_tol(m[0], 1.0f, 1e-5f);   /* unit scale, no rotation */
    ck_assert_float_eq_tol(m[5], 1.0f, 1e-5f);
    ck_assert_float_eq_tol(m[10], 1.0f, 1e-5f);
}

/* Expects call to have been refused with a message naming it and the link. */
static void assert_refused(scene *s, kiln_result r, const char *call, const char *what) {
    ck_assert_int_eq(r, KILN_ERR_INVALID_ARGUMENT);
    const char *msg = kiln_world_error(s->world);
    ck_assert_msg(strncmp(msg, call, strlen(call)) == 0 && strstr(msg, what) != NULL,
                  "message \"%s\" is not \"%s ... %s ...\"", msg, call, what);
}

KILN_TEST(hierarchy, parent_written_through_add_set_spawn_or_commands_follows_set_parent_rules) {
    kiln_local_transform l = sample_local(4);
    kiln_entity a = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity b = spawn_node(&F, a, &l);
    kiln_entity c = spawn_node(&F, b, &l);
    propagate_ok(&F, NULL);
    uint64_t before = test_world_digest(F.world);

    assert_refused(&F, kiln_add(F.world, a, F.ids.parent, &(kiln_parent){a}), "kiln_add: ",
                   "cannot be its own parent");
    assert_refused(&F, kiln_add(F.world, a, F.ids.parent, &(kiln_parent){c}), "kiln_add: ",
                   "would create a cycle");
    assert_refused(&F, kiln_set(F.world, b, F.ids.parent, &(kiln_parent){c}), "kiln_set: ",
                   "would create a cycle");
    assert_refused(&F, kiln_set(F.world, b, F.ids.parent, &(kiln_parent){b}), "kiln_set: ",
                   "cannot be its own parent");
    /* deferred: refused when called */
    kiln_defer_begin(F.world);
    assert_refused(&F, kiln_add(F.world, a, F.ids.parent, &(kiln_parent){b}), "kiln_add: ",
                   "would create a cycle");
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    /* a command buffer: refused when applied, the command kept */
    kiln_commands *cmd = kiln_commands_create(F.world);
    ck_assert_int_eq(kiln_commands_add(cmd, a, F.ids.parent, &(kiln_parent){c}), KILN_OK);
    assert_refused(&F, kiln_commands_apply(cmd, F.world, NULL), "kiln_commands_apply: ",
                   "would create a cycle");
    ck_assert_int_eq(kiln_commands_count(cmd), 1);
    kiln_commands_destroy(cmd);
    ck_assert_uint_eq(test_world_digest(F.world), before);

    /* links that close no cycle still go through every path, a dead parent makes a root */
    kiln_entity d;
    ck_assert_int_eq(kiln_spawn_with(F.world, (kiln_component[]){F.ids.local, F.ids.parent},
                                     (const void *[]){&l, &(kiln_parent){c}}, 2, &d),
                     KILN_OK);
    ck_assert_int_eq(kiln_set(F.world, c, F.ids.parent, &(kiln_parent){a}), KILN_OK);
    kiln_entity gone;
    ck_assert_int_eq(kiln_spawn(F.world, &gone), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.world, gone), KILN_OK);
    ck_assert_int_eq(kiln_add(F.world, a, F.ids.parent, &(kiln_parent){gone}), KILN_OK);
    ck_assert_int_eq(kiln_set(F.world, a, F.ids.parent, &(kiln_parent){KILN_NULL_ENTITY}), KILN_OK);
    propagate_ok(&F, NULL);
}

KILN_TEST(hierarchy, a_cycle_that_only_appears_when_a_deferred_queue_lands_is_dropped_there) {
    kiln_local_transform l = sample_local(6);
    kiln_entity x = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_entity y = spawn_node(&F, KILN_NULL_ENTITY, &l);
    kiln_defer_begin(F.world);
    /* each link is fine against the world as it is now; together they close a loop */
    ck_assert_int_eq(kiln_add(F.world, x, F.ids.parent, &(kiln_parent){y}), KILN_OK);
    ck_assert_int_eq(kiln_add(F.world, y, F.ids.parent, &(kiln_parent){x}), KILN_OK);
    ck_assert_int_eq(kiln_defer_end(F.world), KILN_OK);
    ck_assert_uint_eq(((const kiln_parent *)kiln_get(F.world, x, F.ids.parent))->entity, y);
    ck_assert(!kiln_has(F.world, y, F.ids.parent));
    ck_assert_int_eq(kiln_is_deferred(F.world), false);
    propagate_ok(&F, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* the depth limit over a moved subtree                                                       */
/* ------------------------------------------------------------------------------------------ */

/* A chain of n nodes, dest[0] a root and dest[i] the child of dest[i - 1]. */
static void build_chain(scene *s, kiln_entity *dest, int n) {
    kiln_local_transform l = kiln_transform_local_identity();
    l.position[0] = 1;
    for (int i = 0; i < n; i++) dest[i] = spawn_node(s, i ? dest[i - 1] : KILN_NULL_ENTITY, &l);
}

/* Every way of linking child (alive, with or without a Parent) under parent refuses with a
 * message naming the limit, the world (hash and per-row ticks) unchanged. */
static void assert_every_link_refused(scene *s, kiln_entity child, kiln_entity parent) {
    uint64_t hash = kiln_world_hash(s->world), digest = test_world_digest(s->world);
    const char *what = "subtree would end deeper than 256";
    kiln_parent p = {parent};
    bool linked = kiln_has(s->world, child, s->ids.parent);
    assert_refused(s, kiln_transform_set_parent(s->world, child, parent), "kiln_transform_set_parent: ", what);
    if (linked) assert_refused(s, kiln_set(s->world, child, s->ids.parent, &p), "kiln_set: ", what);
    else assert_refused(s, kiln_add(s->world, child, s->ids.parent, &p), "kiln_add: ", what);
    assert_refused(s, kiln_component_check(s->world, child, s->ids.parent, &p), "kiln_component_check: ", what);
    kiln_defer_begin(s->world); /* refused when called, nothing queued */
    assert_refused(s, kiln_add(s->world, child, s->ids.parent, &p), "kiln_add: ", what);
    assert_refused(s, kiln_transform_set_parent(s->world, child, parent), "kiln_transform_set_parent: ", what);
    ck_assert_int_eq(kiln_defer_end(s->world), KILN_OK);
    ck_assert_uint_eq(kiln_world_hash(s->world), hash);
    ck_assert_uint_eq(test_world_digest(s->world), digest);
}

KILN_TEST(hierarchy, linking_a_chain_under_the_leaf_of_another_is_refused_when_its_leaf_would_pass_256) {
    static kiln_entity a[200], b[200];
    build_chain(&F, a, 200);
    build_chain(&F, b, 200);
    kiln_entity root = spawn_node(&F, KILN_NULL_ENTITY, NULL);
    propagate_ok(&F, NULL);
    /* b[0] alone would be 200 deep: the check above the parent took that; its leaf 399 */
    assert_every_link_refused(&F, b[0], a[199]);
    /* moved while linked (a set in place): refused the same, the old link kept */
    ck_assert_int_eq(kiln_transform_set_parent(F.world, b[0], root), KILN_OK);
    assert_every_link_refused(&F, b[0], a[199]);
    ck_assert_uint_eq(parent_link(&F, b[0]), root);
    /* a link somewhere in the middle of b moves a shorter subtree: its leaf decides */
    assert_every_link_refused(&F, b[100], a[157]); /* b[199]: 157 + 1 + 99 */
    ck_assert_int_eq(kiln_transform_set_parent(F.world, b[100], a[156]), KILN_OK); /* 256 */
    propagate_ok(&F, NULL);
    ck_assert(kiln_has(F.world, b[199], F.ids.world));
    ck_assert_float_eq_tol(world_matrix(&F, b[199])[12], 257.0f, 1e-3f);
}

KILN_TEST(hierarchy, a_moved_subtree_may_end_exactly_256_deep_and_not_257) {
    static kiln_entity a[130], b[129];
    build_chain(&F, a, 130); /* a[k] is k deep */
    build_chain(&F, b, 129); /* b[128] is 128 below b[0] */
    kiln_entity spare = spawn_node(&F, KILN_NULL_ENTITY, NULL);
    assert_every_link_refused(&F, b[0], a[128]); /* 128 + 1 + 128 = 257 */
    ck_assert_int_eq(kiln_transform_set_parent(F.world, b[0], a[127]), KILN_OK); /* 256 */
    propagate_ok(&F, NULL);
    ck_assert_float_eq_tol(world_matrix(&F, b[128])[12], 257.0f, 1e-3f);
    /* linked, moved one deeper by a set in place: 257 again */
    assert_every_link_refused(&F, b[0], a[128]);
    /* a leaf under the 256-deep leaf is refused by the walk above the parent, as before */
    kiln_parent p = {b[128]};
    assert_refused(&F, kiln_add(F.world, spare, F.ids.parent, &p), "kiln_add: ", "deeper than 256");
    ck_assert_uint_eq(parent_link(&F, b[0]), a[127]);
}

KILN_TEST(hierarchy, a_command_buffer_refuses_a_subtree_past_256_and_continues_once_it_fits) {
    static kiln_entity a[130], b[129];
    build_chain(&F, a, 130);
    build_chain(&F, b, 129);
    kiln_entity x = spawn_node(&F, KILN_NULL_ENTITY, NULL);
    kiln_commands *cmd = kiln_commands_create(F.world);
    ck_assert_ptr_nonnull(cmd);
    ck_assert_int_eq(kiln_commands_add(cmd, x, F.ids.parent, &(kiln_parent){a[0]}), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, b[0], F.ids.parent, &(kiln_parent){a[128]}), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, b[1], F.ids.parent, &(kiln_parent){x}), KILN_OK);
    /* the first lands, the second fails and stays with the one after it */
    kiln_world *w = F.world;
    int64_t applied = -1;
    assert_refused(&F, kiln_commands_apply(cmd, w, &applied), "kiln_commands_apply: ",
                   "subtree would end deeper than 256");
    ck_assert_int_eq(applied, 1);
    ck_assert_int_eq(kiln_commands_count(cmd), 2);
    ck_assert_uint_eq(parent_link(&F, x), a[0]);
    ck_assert(!kiln_has(w, b[0], F.ids.parent));
    ck_assert_uint_eq(parent_link(&F, b[1]), b[0]);
    uint64_t hash = kiln_world_hash(w), digest = test_world_digest(w);
    assert_refused(&F, kiln_commands_apply(cmd, w, &applied), "kiln_commands_apply: ",
                   "subtree would end deeper than 256"); /* again: nothing moved */
    ck_assert_int_eq(applied, 0);
    ck_assert_uint_eq(kiln_world_hash(w), hash);
    ck_assert_uint_eq(test_world_digest(w), digest);
    /* one link shorter, it fits exactly: the rest of the buffer applies */
    ck_assert_int_eq(kiln_despawn(w, b[128]), KILN_OK);
    ck_assert_int_eq(kiln_commands_apply(cmd, w, &applied), KILN_OK);
    ck_assert_int_eq(applied, 2);
    ck_assert_int_eq(kiln_commands_count(cmd), 0);
    ck_assert_uint_eq(parent_link(&F, b[0]), a[128]);
    ck_assert_uint_eq(parent_link(&F, b[1]), x);
    kiln_commands_destroy(cmd);
    propagate_ok(&F, NULL);
    ck_assert(kiln_has(w, b[127], F.ids.world));
}

KILN_TEST(hierarchy, without_memory_to_catch_the_children_index_up_the_subtree_check_is_still_exact) {
    static kiln_entity a[130], b[128];
    build_chain(&F, a, 130);
    build_chain(&F, b, 128);
    kiln_entity root = spawn_node(&F, KILN_NULL_ENTITY, NULL);
    ck_assert_int_eq(kiln_transform_set_parent(F.world, b[0], root), KILN_OK);
    ck_assert_int_eq(kiln_transform_children(F.world, b[0], NULL, 0), 1); /* the index caught up */
    for (int i = 0; i < 300; i++) spawn_node(&F, KILN_NULL_ENTITY, NULL);
    /* a leaf in a slot past the index's: catching up needs memory */
    kiln_entity z = spawn_node(&F, b[127], NULL);
    uint64_t hash = kiln_world_hash(F.world), digest = test_world_digest(F.world);
    test_allocator_fail_after(&F.alloc, 0);
    kiln_parent p = {a[128]}; /* z: 128 + 1 + 128 */
    assert_refused(&F, kiln_set(F.world, b[0], F.ids.parent, &p), "kiln_set: ", "subtree would end deeper than 256");
    ck_assert_uint_eq(kiln_world_hash(F.world), hash);
    ck_assert_uint_eq(test_world_digest(F.world), digest);
    p.entity = a[127];
    ck_assert_int_eq(kiln_set(F.world, b[0], F.ids.parent, &p), KILN_OK);
    test_allocator_fail_never(&F.alloc);
    ck_assert_uint_eq(parent_link(&F, b[0]), a[127]);
    assert_refused(&F, kiln_set(F.world, b[0], F.ids.parent, &(kiln_parent){a[128]}), "kiln_set: ",
                   "subtree would end deeper than 256");
    kiln_entity kids[2];
    ck_assert_int_eq(kiln_transform_children(F.world, b[127], kids, 2), 1);
    ck_assert_uint_eq(kids[0], z);
}

KILN_TEST(hierarchy, a_child_set_in_place_just_before_counts_in_the_subtree_check) {
    static kiln_entity a[256];
    build_chain(&F, a, 256); /* a[255] is 255 deep */
    kiln_entity r = spawn_node(&F, KILN_NULL_ENTITY, NULL), e = spawn_node(&F, KILN_NULL_ENTITY, NULL);
    kiln_entity c = spawn_node(&F, r, NULL), d = spawn_node(&F, r, NULL);
    ck_assert_int_eq(kiln_transform_children(F.world, e, NULL, 0), 0); /* the index caught up */
    /* values set in place, not yet read by the index: c under e, then d under c */
    ck_assert_int_eq(kiln_set(F.world, c, F.ids.parent, &(kiln_parent){e}), KILN_OK);
    kiln_parent p = {a[254]}; /* e 255 deep, c 256 */
    ck_assert_int_eq(kiln_component_check(F.world, e, F.ids.parent, &p), KILN_OK);
    ck_assert_int_eq(kiln_set(F.world, d, F.ids.parent, &(kiln_parent){c}), KILN_OK);
    assert_refused(&F, kiln_add(F.world, e, F.ids.parent, &p), "kiln_add: ", "subtree would end deeper than 256");
    p.entity = a[253];
    ck_assert_int_eq(kiln_add(F.world, e, F.ids.parent, &p), KILN_OK);
    propagate_ok(&F, NULL);
}

KILN_TEST(hierarchy, the_transform_system_keeps_a_failed_run_for_its_host_to_read) {
    static kiln_entity a[300];
    build_chain(&F, a, 257);
    kiln_local_transform l = kiln_transform_local_identity();
    for (int i = 257; i < 300; i++) {
        a[i] = spawn_node(&F, KILN_NULL_ENTITY, &l);
        link_unchecked(&F, a[i], a[i - 1]); /* past the limit: only a pointer gets there */
    }
    kiln_schedule *sched = kiln_schedule_create(F.world, NULL);
    ck_assert_ptr_nonnull(sched);
    kiln_system_desc d;
    kiln_transform_system_desc(F.world, &d);
    ck_assert_int_eq(kiln_schedule_add(sched, &d), KILN_OK);
    char msg[256];
    ck_assert_int_eq(kiln_transform_system_result(F.world, msg, sizeof msg), KILN_OK);
    ck_assert_str_eq(msg, "");
    ck_assert_int_eq(kiln_schedule_run(sched, 0), KILN_OK);
    ck_assert_int_eq(kiln_transform_system_result(F.world, msg, sizeof msg), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(msg, "deeper than 256") != NULL, "message \"%s\"", msg);
    ck_assert_int_eq(kiln_transform_system_result(F.world, NULL, 0), KILN_OK); /* read once */
    ck_assert(kiln_has(F.world, a[256], F.ids.world));
    ck_assert(!kiln_has(F.world, a[299], F.ids.world));
    /* fixed, the next run succeeds and says nothing */
    ck_assert_int_eq(kiln_set(F.world, a[257], F.ids.parent, &(kiln_parent){KILN_NULL_ENTITY}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(sched, 0), KILN_OK);
    ck_assert_int_eq(kiln_transform_system_result(F.world, msg, sizeof msg), KILN_OK);
    ck_assert(kiln_has(F.world, a[299], F.ids.world));
    kiln_schedule_destroy(sched);
}
