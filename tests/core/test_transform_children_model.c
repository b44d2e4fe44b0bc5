/* test_transform_children_model.c: the children index against a model. Random sequences of
 * links made and changed (spawns with a Parent, kiln_transform_set_parent plain and deferred,
 * a command buffer's set, Parent written through kiln_get_mut, seen from the next tick, a
 * handle never issued written so), unlinked, despawned (plain and recursive), moved between
 * archetypes, tree clones and tick advances, checking after each step every live entity's
 * children, and that a tree clone copies exactly the subtree the model holds; once more with
 * the look-ups running out of memory at random. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "kiln_persist.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"
#include "transform_fixture.h"

#define SLOTS 40

typedef struct model {
    test_allocator alloc;
    kiln_world *world;
    kiln_transform_ids ids;
    kiln_component tag;
    kiln_entity e[SLOTS];  /* KILN_NULL_ENTITY: free */
    kiln_entity parent[SLOTS]; /* the Parent value, KILN_NULL_ENTITY: none (may be dead) */
    bool junk[SLOTS];      /* the Parent value is a handle never issued (a clone refuses it) */
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

static void set_link(model *m, int s, kiln_entity parent) {
    m->parent[s] = parent;
    m->junk[s] = false;
}

static const char *step(model *m) {
    kiln_world *w = m->world;
    kiln_local_transform l = {{0, 0, 0}, {0, 0, 0, 1}, {1, 1, 1}};
    int s = some_slot(m, true), p = some_slot(m, true);
    switch (next(m) % 13) {
    case 0: case 1: { /* spawn, under a live parent or none */
        int f = some_slot(m, false);
        if (f < 0) return "skip";
        kiln_parent link = {p >= 0 && next(m) % 4 ? m->e[p] : KILN_NULL_ENTITY};
        int32_t count = link.entity ? 2 : 1;
        ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){m->ids.local, m->ids.parent},
                                         (const void *[]){&l, &link}, count, &m->e[f]), KILN_OK);
        set_link(m, f, link.entity);
        return "spawn";
    }
    case 2: /* relink */
        if (s < 0 || p < 0) return "skip";
        if (kiln_transform_set_parent(w, m->e[s], m->e[p]) == KILN_OK) set_link(m, s, m->e[p]);
        else ck_assert(below(m, p, s));
        return "set_parent";
    case 3: /* unlink */
        if (s < 0) return "skip";
        ck_assert_int_eq(kiln_transform_set_parent(w, m->e[s], KILN_NULL_ENTITY), KILN_OK);
        set_link(m, s, KILN_NULL_ENTITY);
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
    case 7: /* a link written through a pointer (no cycle), seen from the next tick on */
        if (s < 0 || p < 0 || !m->parent[s] || below(m, p, s)) return "skip";
        ((kiln_parent *)kiln_get_mut(w, m->e[s], m->ids.parent))->entity = m->e[p];
        set_link(m, s, m->e[p]);
        kiln_tick_advance(w);
        return "get_mut";
    case 8: { /* a tree clone copies the model's subtree, then goes */
        if (s < 0 || m->junk[s]) return "skip";
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
    case 9: { /* a relink through a command buffer */
        if (s < 0 || p < 0 || !m->parent[s] || below(m, p, s)) return "skip";
        kiln_commands *cmd = kiln_commands_create(w);
        ck_assert_ptr_nonnull(cmd);
        kiln_parent link = {m->e[p]};
        ck_assert_int_eq(kiln_commands_set(cmd, m->e[s], m->ids.parent, &link), KILN_OK);
        ck_assert_int_eq(kiln_commands_apply(cmd, w, NULL), KILN_OK);
        kiln_commands_destroy(cmd);
        set_link(m, s, m->e[p]);
        return "buffer_set";
    }
    case 10: /* a deferred relink: the look-ups before it lands see the links as they were */
        if (s < 0 || p < 0 || below(m, p, s)) return "skip";
        kiln_defer_begin(w);
        ck_assert_int_eq(kiln_transform_set_parent(w, m->e[s], m->e[p]), KILN_OK);
        compare(m, "deferred, before landing", -1);
        ck_assert_int_eq(kiln_defer_end(w), KILN_OK);
        set_link(m, s, m->e[p]);
        return "deferred";
    case 11: { /* a handle never issued, written through a pointer over a live parent's slot */
        if (s < 0 || p < 0 || !m->parent[s]) return "skip";
        kiln_entity junk = kiln_entity_make(kiln_entity_index(m->e[p]), kiln_entity_generation(m->e[p]) + 1000);
        ((kiln_parent *)kiln_get_mut(w, m->e[s], m->ids.parent))->entity = junk;
        m->parent[s] = junk, m->junk[s] = true;
        kiln_tick_advance(w);
        return "junk";
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

/* A look-up that runs out of memory at any allocation of its catch-up (the index's slots, its
 * marks of new archetypes, a rebuild after the last failure) says so (-1, dest untouched),
 * and the first that gets its memory is exact: never a wrong answer. */
KILN_TEST(children_model, a_look_up_out_of_memory_anywhere_answers_minus_one_then_exact) {
    scene s;
    scene_open(&s);
    kiln_world *w = s.world;
    kiln_transform_ids ids = s.ids;
    kiln_local_transform l = sample_local(1);
    enum { ROOTS = 6, MAX = 4096 };
    kiln_entity roots[ROOTS], moved = KILN_NULL_ENTITY;
    int32_t want[ROOTS] = {0};
    for (int r = 0; r < ROOTS; r++) roots[r] = spawn_node(&s, KILN_NULL_ENTITY, &l);
    static kiln_entity kids[MAX];
    int failures = 0;
    for (int round = 0; round < 8; round++) {
        char name[24];
        snprintf(name, sizeof name, "Round%d", round);
        kiln_component tag = test_register_tag(w, name); /* a new linked archetype each round */
        for (int i = 0; i < 60 << (round / 2); i++) {
            kiln_parent link = {roots[i % ROOTS]};
            kiln_entity e;
            ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){ids.local, ids.parent, tag},
                                             (const void *[]){&l, &link, NULL}, 3, &e), KILN_OK);
            want[i % ROOTS]++;
            if (i == 7) moved = e; /* under roots[1] */
        }
        /* a link set in place (noted by the check hook) and a despawn */
        ck_assert_int_eq(kiln_transform_set_parent(w, moved, roots[round % ROOTS]), KILN_OK);
        want[1]--, want[round % ROOTS]++;
        ck_assert_int_eq(kiln_despawn(w, moved), KILN_OK);
        want[round % ROOTS]--;
        if (round % 3 == 2) kiln_tick_advance(w);
        for (int64_t k = 0;; k++) {
            kids[0] = KILN_NULL_ENTITY;
            test_allocator_fail_after(&s.alloc, k);
            int32_t got = kiln_transform_children(w, roots[round % ROOTS], kids, MAX);
            test_allocator_fail_never(&s.alloc);
            if (got >= 0) break;
            failures++;
            ck_assert_str_eq(kiln_world_error(w), "kiln_transform_children: out of memory");
            ck_assert_uint_eq(kids[0], KILN_NULL_ENTITY);
        }
        for (int r = 0; r < ROOTS; r++) {
            int32_t got = kiln_transform_children(w, roots[r], kids, MAX);
            ck_assert_int_eq(got, want[r]);
            for (int32_t k = 0; k < got; k++) {
                ck_assert_uint_eq(((const kiln_parent *)kiln_get(w, kids[k], ids.parent))->entity, roots[r]);
                ck_assert(k == 0 || kids[k - 1] < kids[k]);
            }
        }
    }
    ck_assert_int_ge(failures, 3); /* the first build and growths of its slots */
    scene_close(&s);
}

/* Handles of one slot: its list of children is for the handle that is or will be alive. A link
 * to a dead handle of the slot, or to one never issued, does not take the list from a handle
 * a deferred spawn reserved, whose children are there when it lands. */
KILN_TEST(children_model, a_slot_list_stays_with_the_handle_that_will_be_alive) {
    for (int order = 0; order < 2; order++) { /* the dead link's row before the reserved one's, then after */
        scene s;
        scene_open(&s);
        kiln_world *w = s.world;
        kiln_local_transform l = sample_local(2);
        kiln_entity dead = spawn_node(&s, KILN_NULL_ENTITY, &l), got[4], rows[3], reserved;
        for (int k = 0; k < 3; k++) rows[k] = spawn_node(&s, dead, &l);
        kiln_entity x = rows[order], y = rows[1 - order], j = rows[2];
        ck_assert_int_eq(kiln_despawn(w, dead), KILN_OK); /* the three keep their dead links */
        kiln_defer_begin(w);
        ck_assert_int_eq(kiln_spawn(w, &reserved), KILN_OK);
        ck_assert_uint_eq(kiln_entity_index(reserved), kiln_entity_index(dead)); /* the slot dead left */
        ((kiln_parent *)kiln_get_mut(w, x, s.ids.parent))->entity = reserved;
        ((kiln_parent *)kiln_get_mut(w, j, s.ids.parent))->entity =
            kiln_entity_make(kiln_entity_index(dead), kiln_entity_generation(reserved) + 5);
        kiln_tick_advance(w); /* links written through a pointer: seen from the next tick */
        ck_assert_int_eq(kiln_transform_children(w, x, got, 4), 0); /* the index reads x, y, j */
        ck_assert_int_eq(kiln_defer_end(w), KILN_OK);
        ck_assert(kiln_is_alive(w, reserved));
        ck_assert_int_eq(kiln_transform_children(w, reserved, got, 4), 1);
        ck_assert_uint_eq(got[0], x);
        ck_assert_uint_eq(((const kiln_parent *)kiln_get(w, y, s.ids.parent))->entity, dead);
        ck_assert_int_eq(kiln_transform_children(w, dead, got, 4), 0); /* not alive */
        scene_close(&s);
    }
}

/* Links set in place are noted for the next look-up; more notes than links make it read every
 * link again instead, so a flood of sets between look-ups holds no more memory than the index. */
KILN_TEST(children_model, a_flood_of_sets_in_place_between_look_ups_is_read_exactly) {
    scene s;
    scene_open(&s);
    kiln_world *w = s.world;
    kiln_local_transform l = sample_local(3);
    kiln_entity a = spawn_node(&s, KILN_NULL_ENTITY, &l), b = spawn_node(&s, KILN_NULL_ENTITY, &l);
    kiln_entity kids[100], got[101];
    for (int i = 0; i < 100; i++) kids[i] = spawn_node(&s, a, &l);
    for (int rounds = 0; rounds < 3; rounds++) {
        ck_assert_int_eq(kiln_transform_children(w, a, got, 101), 100);
        int64_t bytes = s.alloc.live_bytes;
        for (int n = 0; n < 30100; n++) /* ends with every kid under b */
            ck_assert_int_eq(kiln_transform_set_parent(w, kids[n % 100], (n / 100) % 2 ? a : b), KILN_OK);
        ck_assert_int_le(s.alloc.live_bytes - bytes, (int64_t)sizeof(kiln_entity) * 4096);
        int32_t n_a = kiln_transform_children(w, a, got, 101);
        ck_assert_int_eq(n_a, 0);
        ck_assert_int_eq(kiln_transform_children(w, b, got, 101), 100);
        for (int i = 0; i < 100; i++) ck_assert_uint_eq(got[i], kids[i]);
        for (int i = 0; i < 100; i++) ck_assert_int_eq(kiln_transform_set_parent(w, kids[i], a), KILN_OK);
    }
    scene_close(&s);
}

/* The children index and the name index over the same rows, looked up in turn while rows come
 * and go in one tick: each finds rows the other read first (an archetype then no longer knows
 * where rows left since its own read, and it reads the rows stamped since instead). */
KILN_TEST(children_model, children_and_names_over_the_same_rows_keep_up_in_turn) {
    scene s;
    scene_open(&s);
    kiln_world *w = s.world;
    ck_assert_int_eq(kiln_name_init(w, NULL), KILN_OK);
    kiln_local_transform l = sample_local(4);
    enum { PARENTS = 4, KIDS = 64 };
    kiln_entity parents[PARENTS], kid[KIDS] = {0};
    int under[KIDS];
    for (int p = 0; p < PARENTS; p++) parents[p] = spawn_node(&s, KILN_NULL_ENTITY, &l);
    uint64_t rng = 0x2545F4914F6CDD1Dull;
    for (int step = 0; step < 3000; step++) {
        char text[24];
        int p = 0;
        for (int op = 0, ops = 1 + (int)(rng % 3); op < ops; op++) { /* spawns and despawns between reads */
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            int k = (int)(rng % KIDS);
            p = (int)((rng >> 8) % PARENTS);
            if (kid[k]) {
                ck_assert_int_eq(kiln_despawn(w, kid[k]), KILN_OK);
                kid[k] = KILN_NULL_ENTITY;
            } else {
                kid[k] = spawn_node(&s, parents[p], &l);
                under[k] = p;
                snprintf(text, sizeof text, "kid%d", k);
                ck_assert_int_eq(kiln_name_set(w, kid[k], text), KILN_OK);
            }
        }
        if (step % 500 == 499) kiln_tick_advance(w);
        if (step % 2) { /* the children of one parent */
            kiln_entity got[KIDS];
            int32_t n = kiln_transform_children(w, parents[p], got, KIDS), want = 0;
            for (int c = 0; c < KIDS; c++) {
                if (!kid[c] || under[c] != p) continue;
                want++;
                bool found = false;
                for (int32_t i = 0; i < n; i++) found = found || got[i] == kid[c];
                ck_assert_msg(found, "step %d: kid %d missing under parent %d", step, c, p);
            }
            ck_assert_int_eq(n, want);
        } else { /* one name */
            snprintf(text, sizeof text, "kid%d", (int)((rng >> 20) % KIDS));
            int c = (int)((rng >> 20) % KIDS);
            ck_assert_uint_eq(kiln_name_lookup(w, text), kid[c]);
        }
    }
    scene_close(&s);
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

/* Moves kid's link to parent through a query's column, marking the row. */
static void relink_in_iteration(kiln_iter *it, kiln_entity kid, kiln_entity parent, bool *done) {
    kiln_parent *links = kiln_iter_column(it, 0);
    for (int32_t r = 0; r < it->count; r++) {
        if (it->entities[r] != kid) continue;
        links[r].entity = parent;
        kiln_iter_mark_changed(it, 0, r);
        *done = true;
    }
}

/* Rows appended to the linked archetypes (spawns, rows moved in) are read as they come; the
 * once-per-tick scan of rows stamped since looks only at columns whose rows were written where
 * they were. A link written through a pointer in a tick that also spawned into its archetype
 * after a look-up, by kiln_get_mut or a query's marks, or by kiln_get_mut while an iteration
 * opened in an earlier tick marks a row (its marks are stamped with its own tick), is seen from
 * the next tick, both before 2^32 ticks and across it (the column keeps the low 32 bits). */
KILN_TEST(children_model, links_written_in_place_are_seen_among_appends) {
    static const char near_2_32[] = "{\"kiln\":1,\"tick\":4294967291,\"components\":[],\"entities\":[]}";
    for (int high = 0; high < 2; high++) {
        scene s;
        scene_open(&s);
        kiln_world *w = s.world;
        if (high)
            ck_assert_msg(kiln_load(w, near_2_32, sizeof near_2_32 - 1, NULL) == KILN_OK, "%s", kiln_world_error(w));
        kiln_local_transform l = sample_local(5);
        kiln_entity a = spawn_node(&s, KILN_NULL_ENTITY, &l), b = spawn_node(&s, KILN_NULL_ENTITY, &l);
        enum { KIDS = 9 };
        kiln_entity kids[KIDS], got[2 * KIDS + 12];
        for (int i = 0; i < KIDS; i++) kids[i] = spawn_node(&s, a, &l);
        kiln_query *q;
        ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {s.ids.parent}}, &q), KILN_OK);
        int under_b = 0, spawned = 0;
        for (int round = 0; round < KIDS; round++) {
            kiln_tick_advance(w);
            kiln_entity kid = kids[round], extra = spawn_node(&s, a, &l); /* an append this tick */
            spawned++;
            ck_assert_int_eq(kiln_transform_children(w, a, got, 2 * KIDS + 12), KIDS + spawned - under_b);
            bool done = false;
            kiln_iter it;
            switch (round % 3) {
            case 0: /* kiln_get_mut */
                ((kiln_parent *)kiln_get_mut(w, kid, s.ids.parent))->entity = b;
                done = true;
                break;
            case 1: /* a query's column, the row marked */
                kiln_query_iter(q, &it);
                while (kiln_query_next(&it)) relink_in_iteration(&it, kid, b, &done);
                break;
            default: /* an iteration opened a tick before marks a row of the same column */
                kiln_query_iter(q, &it);
                ck_assert(kiln_query_next(&it));
                kiln_tick_advance(w);
                ck_assert_int_eq(kiln_transform_children(w, a, got, 2 * KIDS + 12), KIDS + spawned - under_b);
                ((kiln_parent *)kiln_get_mut(w, kid, s.ids.parent))->entity = b;
                done = true;
                for (int32_t r = 0; r < it.count; r++) /* another row, the value it holds */
                    if (it.entities[r] != kid) {
                        kiln_iter_mark_changed(&it, 0, r);
                        break;
                    }
                ck_assert(it.marked != 0);
                kiln_iter_fini(&it);
                break;
            }
            ck_assert(done);
            under_b++;
            (void)extra;
            kiln_tick_advance(w); /* a link written through a pointer: seen from the next tick */
            ck_assert_int_eq(kiln_transform_children(w, b, got, 2 * KIDS + 12), under_b);
            for (int i = 0; i < under_b; i++) ck_assert_uint_eq(got[i], kids[i]);
            ck_assert_int_eq(kiln_transform_children(w, a, got, 2 * KIDS + 12), KIDS + spawned - under_b);
        }
        if (high) ck_assert_uint_gt(kiln_tick_current(w), UINT32_MAX);
        kiln_query_destroy(q);
        scene_close(&s);
    }
}

/* The depth check of a link knows how tall the entity's subtree is without walking it: at the
 * root of a wide tree, reparented back and forth plain and deferred, it reads no link; once a
 * tall branch came and went, the one check that needs the truth walks the tree once, and the
 * next read what that walk found. */
KILN_TEST(children_model, a_depth_check_at_a_wide_root_walks_its_subtree_only_when_unknown) {
    scene s;
    scene_open(&s);
    kiln_world *w = s.world;
    enum { WIDE = 3000 };
    kiln_entity root = spawn_node(&s, KILN_NULL_ENTITY, NULL), p1 = spawn_node(&s, KILN_NULL_ENTITY, NULL);
    kiln_entity p2 = spawn_node(&s, KILN_NULL_ENTITY, NULL), leaf = KILN_NULL_ENTITY, deep = p2, tall[61];
    for (int i = 0; i < WIDE; i++) leaf = spawn_node(&s, root, NULL);
    for (int i = 0; i < 200; i++) deep = spawn_node(&s, deep, NULL); /* 200 deep */
    tall[0] = spawn_node(&s, KILN_NULL_ENTITY, NULL);
    for (int i = 1; i < 61; i++) tall[i] = spawn_node(&s, tall[i - 1], NULL); /* 60 links tall */
    ck_assert_int_eq(kiln_transform_children(w, root, NULL, 0), WIDE);
    int64_t walked = kiln_transform_links_walked(w);
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(kiln_transform_set_parent(w, root, i % 2 ? p1 : p2), KILN_OK);
        kiln_defer_begin(w);
        ck_assert_int_eq(kiln_transform_set_parent(w, root, i % 2 ? p2 : p1), KILN_OK);
        ck_assert_int_eq(kiln_defer_end(w), KILN_OK);
    }
    ck_assert_int_le(kiln_transform_links_walked(w) - walked, 8); /* a walk each: 1.2 million */
    /* a branch 62 links below root: under deep (200 deep) its subtree would end at 263 */
    ck_assert_int_eq(kiln_transform_set_parent(w, tall[0], leaf), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(w, root, deep), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kiln_world_error(w), "subtree would end deeper than 256"));
    ck_assert_int_eq(kiln_transform_set_parent(w, tall[0], KILN_NULL_ENTITY), KILN_OK);
    walked = kiln_transform_links_walked(w);
    ck_assert_int_eq(kiln_transform_set_parent(w, root, deep), KILN_OK); /* the check walks */
    ck_assert_int_ge(kiln_transform_links_walked(w) - walked, WIDE);
    ck_assert_int_le(kiln_transform_links_walked(w) - walked, WIDE + 8);
    walked = kiln_transform_links_walked(w);
    ck_assert_int_eq(kiln_transform_set_parent(w, root, p1), KILN_OK);
    ck_assert_int_eq(kiln_transform_set_parent(w, root, deep), KILN_OK);
    ck_assert_int_eq(kiln_transform_links_walked(w) - walked, 0);
    scene_close(&s);
}

/* Random links among a few entities and under a chain 250 deep, plain, deferred and set in
 * place, each refused exactly when the model says it closes a cycle or ends too deep. */
KILN_TEST(children_model, the_depth_check_refuses_exactly_what_the_model_does) {
    enum { N = 24, CHAIN = 250 };
    scene s;
    scene_open(&s);
    kiln_world *w = s.world;
    static kiln_entity chain[CHAIN];
    kiln_entity e[N];
    int up[N]; /* the model: -1 none, 0..N-1 a node, N + k chain[k] (k deep) */
    chain[0] = spawn_node(&s, KILN_NULL_ENTITY, NULL);
    for (int k = 1; k < CHAIN; k++) chain[k] = spawn_node(&s, chain[k - 1], NULL);
    for (int i = 0; i < N; i++) e[i] = spawn_node(&s, KILN_NULL_ENTITY, NULL), up[i] = -1;
    uint64_t rng = 0x9e3779b97f4a7c15u;
    for (int step = 0; step < 4000; step++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        int a = (int)(rng % N), b = (int)((rng >> 8) % (N + 40)), how = (int)((rng >> 20) % 4);
        if (b >= N) b = b - N < 20 ? N + (int)((rng >> 32) % CHAIN) : -1; /* deep parents are common */
        /* the model's verdict: b's depth + 1 + a's height must stay within 256, no cycle */
        int above = 0, cur = b, height = 0; /* above: the nodes from b up */
        bool cycle = false;
        for (; cur >= 0 && cur < N; cur = up[cur], above++) cycle |= cur == a;
        int depth = cur >= N ? above + cur - N : above - 1;
        for (int i = 0; i < N; i++) {
            int h = 0, c = i;
            while (c >= 0 && c < N && c != a) c = up[c], h++;
            if (c == a && h > height) height = h;
        }
        bool ok = b < 0 || (!cycle && depth + 1 + height <= 256);
        kiln_entity pe = b < 0 ? KILN_NULL_ENTITY : b < N ? e[b] : chain[b - N];
        kiln_result r;
        if (how == 0 && b >= 0 && kiln_has(w, e[a], s.ids.parent)) {
            r = kiln_set(w, e[a], s.ids.parent, &(kiln_parent){pe});
        } else if (how == 1) {
            kiln_defer_begin(w);
            r = kiln_transform_set_parent(w, e[a], pe);
            ck_assert_int_eq(kiln_defer_end(w), KILN_OK);
        } else {
            r = kiln_transform_set_parent(w, e[a], pe);
        }
        ck_assert_msg((r == KILN_OK) == ok, "step %d: %d under %d, depth %d height %d: %s", step, a, b, depth,
                      height, kiln_world_error(w));
        if (ok) up[a] = b;
    }
    scene_close(&s);
}
