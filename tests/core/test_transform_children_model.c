/* test_transform_children_model.c: the children index against a model. Random sequences of
 * links made and changed (spawns with a Parent, kiln_transform_set_parent, Parent written
 * through kiln_get_mut), unlinked, despawned (plain and recursive), moved between archetypes,
 * tree clones and tick advances, checking after each step every live entity's children, and
 * that a tree clone copies exactly the subtree the model holds. */
#include <check.h>
#include <string.h>

#include "kiln_persist.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"

#define SLOTS 40

typedef struct model {
    test_allocator alloc;
    kiln_world *world;
    kiln_transform_ids ids;
    kiln_component tag;
    kiln_entity e[SLOTS];  /* KILN_NULL_ENTITY: free */
    kiln_entity parent[SLOTS]; /* the Parent value, KILN_NULL_ENTITY: none (may be dead) */
    uint64_t rng;
} model;

static uint32_t next(model *m) {
    m->rng ^= m->rng << 13, m->rng ^= m->rng >> 7, m->rng ^= m->rng << 17;
    return (uint32_t)(m->rng >> 16);
}

static int slot_of(const model *m, kiln_entity e) {
    for (int s = 0; s < SLOTS; s++)
        if (e && m->e[s] == e) return s;
    return -1;
}

static int some_slot(model *m, bool live) {
    for (int tries = 0; tries < 4 * SLOTS; tries++) {
        int s = (int)(next(m) % SLOTS);
        if ((m->e[s] != KILN_NULL_ENTITY) == live) return s;
    }
    return -1;
}

/* Whether linking slot s under p would close a cycle (p is s or below it). */
static bool below(const model *m, int p, int s) {
    for (int depth = 0; p >= 0 && depth <= SLOTS; depth++) {
        if (p == s) return true;
        p = slot_of(m, m->parent[p]);
    }
    return false;
}

/* The live descendants of slot s, s included, marked in in. */
static int subtree(const model *m, int s, bool in[SLOTS]) {
    memset(in, 0, sizeof(bool) * SLOTS);
    in[s] = true;
    int n = 1;
    for (bool grew = true; grew;) {
        grew = false;
        for (int c = 0; c < SLOTS; c++) {
            int p = slot_of(m, m->parent[c]);
            if (m->e[c] && !in[c] && p >= 0 && in[p]) in[c] = grew = true, n++;
        }
    }
    return n;
}

static void compare(model *m, const char *step, int i) {
    for (int s = 0; s < SLOTS; s++) {
        if (!m->e[s]) continue;
        kiln_entity want[SLOTS], have[SLOTS + 1];
        int n = 0;
        for (int c = 0; c < SLOTS; c++)
            if (m->e[c] && m->parent[c] == m->e[s]) want[n++] = m->e[c];
        for (int a = 1; a < n; a++) /* ordered by handle */
            for (int b = a; b > 0 && want[b - 1] > want[b]; b--) {
                kiln_entity t = want[b];
                want[b] = want[b - 1], want[b - 1] = t;
            }
        int32_t got = kiln_transform_children(m->world, m->e[s], have, SLOTS + 1);
        ck_assert_msg(got == n, "step %d (%s): slot %d has %d children, the model %d", i, step, s, got, n);
        for (int k = 0; k < n; k++) ck_assert_msg(have[k] == want[k], "step %d (%s): slot %d child %d", i, step, s, k);
    }
}

static const char *step(model *m) {
    kiln_world *w = m->world;
    kiln_local_transform l = {{0, 0, 0}, {0, 0, 0, 1}, {1, 1, 1}};
    int s = some_slot(m, true), p = some_slot(m, true);
    switch (next(m) % 10) {
    case 0: case 1: { /* spawn, under a live parent or none */
        int f = some_slot(m, false);
        if (f < 0) return "skip";
        kiln_parent link = {p >= 0 && next(m) % 4 ? m->e[p] : KILN_NULL_ENTITY};
        int32_t count = link.entity ? 2 : 1;
        ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){m->ids.local, m->ids.parent},
                                         (const void *[]){&l, &link}, count, &m->e[f]), KILN_OK);
        m->parent[f] = link.entity;
        return "spawn";
    }
    case 2: /* relink */
        if (s < 0 || p < 0) return "skip";
        if (kiln_transform_set_parent(w, m->e[s], m->e[p]) == KILN_OK) m->parent[s] = m->e[p];
        else ck_assert(below(m, p, s));
        return "set_parent";
    case 3: /* unlink */
        if (s < 0) return "skip";
        ck_assert_int_eq(kiln_transform_set_parent(w, m->e[s], KILN_NULL_ENTITY), KILN_OK);
        m->parent[s] = KILN_NULL_ENTITY;
        return "unlink";
    case 4: /* a plain despawn: the children keep a dead link */
        if (s < 0) return "skip";
        ck_assert_int_eq(kiln_despawn(w, m->e[s]), KILN_OK);
        m->e[s] = KILN_NULL_ENTITY;
        return "despawn";
    case 5: { /* a recursive despawn */
        if (s < 0) return "skip";
        bool in[SLOTS];
        subtree(m, s, in);
        ck_assert_int_eq(kiln_transform_despawn_recursive(w, m->e[s]), KILN_OK);
        for (int c = 0; c < SLOTS; c++)
            if (in[c]) {
                ck_assert(!kiln_is_alive(w, m->e[c]));
                m->e[c] = KILN_NULL_ENTITY;
            }
        return "despawn_recursive";
    }
    case 6: /* a move between archetypes, links kept */
        if (s < 0) return "skip";
        if (kiln_has(w, m->e[s], m->tag)) kiln_remove(w, m->e[s], m->tag, NULL);
        else ck_assert_int_eq(kiln_add(w, m->e[s], m->tag, NULL), KILN_OK);
        return "move";
    case 7: /* a link written through a pointer (no cycle) */
        if (s < 0 || p < 0 || !m->parent[s] || below(m, p, s)) return "skip";
        ((kiln_parent *)kiln_get_mut(w, m->e[s], m->ids.parent))->entity = m->e[p];
        m->parent[s] = m->e[p];
        return "get_mut";
    case 8: { /* a tree clone copies the model's subtree, then goes */
        if (s < 0) return "skip";
        bool in[SLOTS];
        int want = subtree(m, s, in);
        int64_t before = kiln_entity_count(w);
        kiln_entity copy;
        ck_assert_int_eq(kiln_clone(w, m->e[s], &(kiln_clone_desc){.tree = true}, &copy), KILN_OK);
        ck_assert_int_eq(kiln_entity_count(w) - before, want);
        ck_assert_int_eq(kiln_transform_despawn_recursive(w, copy), KILN_OK);
        ck_assert_int_eq(kiln_entity_count(w), before);
        return "clone";
    }
    default:
        kiln_tick_advance(w);
        return "tick";
    }
}

KILN_TEST_GROUP_WITH(children_model, .timeout = 120);

KILN_TEST(children_model, children_follow_every_way_a_link_comes_and_goes) {
    for (uint64_t seed = 1; seed <= 40; seed++) {
        model m;
        memset(&m, 0, sizeof m);
        test_allocator_init(&m.alloc);
        m.world = test_world_create(&m.alloc);
        ck_assert_int_eq(kiln_transform_init(m.world, &m.ids), KILN_OK);
        m.tag = test_register_tag(m.world, "Marked");
        m.rng = seed * 2654435761u + 1;
        for (int i = 0; i < 400; i++) {
            const char *name = step(&m);
            compare(&m, name, i);
        }
        kiln_world_destroy(m.world);
        ck_assert_int_eq(m.alloc.live_bytes, 0);
    }
}

/* A snapshot restore brings links back with their own ticks, none newer than the index: the
 * index tells rows that came back by the linked archetypes' counts of rows in and out. */
KILN_TEST(children_model, a_restore_brings_children_back) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *w = test_world_create(&alloc);
    kiln_transform_ids ids;
    ck_assert_int_eq(kiln_transform_init(w, &ids), KILN_OK);
    kiln_local_transform l = {{0, 0, 0}, {0, 0, 0, 1}, {1, 1, 1}};
    kiln_entity root, kids[3], got[4];
    ck_assert_int_eq(kiln_spawn_with(w, &ids.local, (const void *[]){&l}, 1, &root), KILN_OK);
    for (int i = 0; i < 3; i++) {
        kiln_parent link = {root};
        ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){ids.local, ids.parent}, (const void *[]){&l, &link},
                                         2, &kids[i]), KILN_OK);
    }
    kiln_tick_advance(w);
    kiln_snapshot *snap;
    ck_assert_int_eq(kiln_snapshot_create(w, &snap), KILN_OK);
    ck_assert_int_eq(kiln_transform_children(w, root, got, 4), 3);
    ck_assert_int_eq(kiln_despawn(w, kids[1]), KILN_OK);
    ck_assert_int_eq(kiln_transform_children(w, root, got, 4), 2);
    kiln_tick_advance(w);
    ck_assert_int_eq(kiln_snapshot_restore(w, snap), KILN_OK);
    ck_assert_int_eq(kiln_transform_children(w, root, got, 4), 3);
    for (int i = 0; i < 3; i++) ck_assert_uint_eq(got[i], kids[i]);
    kiln_snapshot_destroy(snap);
    kiln_world_destroy(w);
}
