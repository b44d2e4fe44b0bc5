/* test_persist_names_model.c: the name index against a model. Random sequences of every way a
 * Name comes and goes (spawns with one, kiln_name_set, adds, in-place sets, removes, despawns,
 * moves between archetypes, command buffers, deferred sections, writes through kiln_get_mut,
 * tick advances), with and without allocation failures, checking after each step that every
 * name's look-up answers what the model holds and that a taken name is refused exactly when
 * another live entity holds it. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "kiln_persist.h"
#include "test_registry.h"
#include "test_support.h"

#define SLOTS 48
#define NAMES 10 /* few, so that names collide often */

typedef struct model {
    test_allocator alloc;
    kiln_world *world;
    kiln_component name, pos, vel, tag;
    kiln_entity e[SLOTS];     /* KILN_NULL_ENTITY: free slot */
    int name_of[SLOTS];       /* -1: no Name */
    bool unsure[NAMES];       /* written through a pointer this tick: the index may learn it at
                               * the next tick (documented), so not asked until then */
    uint64_t rng;
} model;

static uint32_t next(model *m) {
    m->rng ^= m->rng << 13, m->rng ^= m->rng >> 7, m->rng ^= m->rng << 17;
    return (uint32_t)(m->rng >> 16);
}

static void text(int n, kiln_name *dest) {
    memset(dest, 0, sizeof *dest);
    snprintf(dest->text, sizeof dest->text, "name-%d", n);
}

static int holder(const model *m, int n) {
    for (int s = 0; s < SLOTS; s++)
        if (m->e[s] && m->name_of[s] == n) return s;
    return -1;
}

static void open_model(model *m, uint64_t seed) {
    memset(m, 0, sizeof *m);
    test_allocator_init(&m->alloc);
    m->world = test_world_create(&m->alloc);
    ck_assert_int_eq(kiln_name_init(m->world, &m->name), KILN_OK);
    m->pos = test_register_position(m->world);
    m->vel = test_register_velocity(m->world);
    m->tag = test_register_tag(m->world, "Marked");
    for (int s = 0; s < SLOTS; s++) m->name_of[s] = -1;
    m->rng = seed * 2654435761u + 1;
}

/* The world as the model says: each slot's name, and each sure name's look-up. */
static void compare(model *m, const char *step, int i) {
    for (int s = 0; s < SLOTS; s++) {
        if (!m->e[s]) continue;
        const char *have = kiln_name_get(m->world, m->e[s]);
        if (m->name_of[s] < 0) {
            ck_assert_msg(have == NULL, "step %d (%s): slot %d named %s", i, step, s, have);
            continue;
        }
        kiln_name want;
        text(m->name_of[s], &want);
        ck_assert_msg(have && strcmp(have, want.text) == 0, "step %d (%s): slot %d", i, step, s);
    }
    for (int n = 0; n < NAMES; n++) {
        if (m->unsure[n]) continue;
        kiln_name t;
        text(n, &t);
        int h = holder(m, n);
        kiln_entity found = kiln_name_lookup(m->world, t.text);
        ck_assert_msg(found == (h >= 0 ? m->e[h] : KILN_NULL_ENTITY), "step %d (%s): %s found as %llu",
                      i, step, t.text, (unsigned long long)found);
    }
}

/* A name n may be written for slot s: the model's answer, which the world must give. */
static bool free_for(const model *m, int n, int s) {
    int h = holder(m, n);
    return h < 0 || h == s;
}

static int some_slot(model *m, bool live) {
    for (int tries = 0; tries < 4 * SLOTS; tries++) {
        int s = (int)(next(m) % SLOTS);
        if ((m->e[s] != KILN_NULL_ENTITY) == live) return s;
    }
    return -1;
}

/* One random step; returns its name. A step that fails for lack of memory must leave the
 * world as the model has it (the model is updated only on success). */
static const char *step(model *m) {
    kiln_world *w = m->world;
    int n = (int)(next(m) % NAMES), s;
    kiln_name t;
    text(n, &t);
    kiln_result r;
    switch (next(m) % 12) {
    case 0: /* spawn with a Name and maybe Position */
        if ((s = some_slot(m, false)) < 0 || m->unsure[n]) return "skip";
        {
            kiln_component cs[2] = {m->name, m->pos};
            const void *vs[2] = {&t, NULL};
            kiln_entity e;
            r = kiln_spawn_with(w, cs, vs, 1 + (int32_t)(next(m) % 2), &e);
            if (r != KILN_ERR_OUT_OF_MEMORY) ck_assert_int_eq(r == KILN_OK, free_for(m, n, -1));
            if (r == KILN_OK) m->e[s] = e, m->name_of[s] = n;
        }
        return "spawn_with";
    case 1: /* a plain spawn */
        if ((s = some_slot(m, false)) < 0) return "skip";
        if (kiln_spawn(w, &m->e[s]) != KILN_OK) m->e[s] = KILN_NULL_ENTITY;
        return "spawn";
    case 2: case 3: /* kiln_name_set (adds or renames) */
        if ((s = some_slot(m, true)) < 0 || m->unsure[n]) return "skip";
        r = kiln_name_set(w, m->e[s], t.text);
        if (r != KILN_ERR_OUT_OF_MEMORY) ck_assert_int_eq(r == KILN_OK, free_for(m, n, s));
        if (r == KILN_OK) m->name_of[s] = n;
        return "name_set";
    case 4: /* kiln_set in place */
        if ((s = some_slot(m, true)) < 0 || m->name_of[s] < 0 || m->unsure[n]) return "skip";
        r = kiln_set(w, m->e[s], m->name, &t);
        if (r != KILN_ERR_OUT_OF_MEMORY) ck_assert_int_eq(r == KILN_OK, free_for(m, n, s));
        if (r == KILN_OK) m->name_of[s] = n;
        return "set";
    case 5: /* the name goes */
        if ((s = some_slot(m, true)) < 0) return "skip";
        if (kiln_remove(w, m->e[s], m->name, NULL) == KILN_OK) m->name_of[s] = -1;
        return "remove";
    case 6: /* despawn */
        if ((s = some_slot(m, true)) < 0) return "skip";
        if (kiln_despawn(w, m->e[s]) == KILN_OK) m->e[s] = KILN_NULL_ENTITY, m->name_of[s] = -1;
        return "despawn";
    case 7: /* moves between archetypes, the name kept */
        if ((s = some_slot(m, true)) < 0) return "skip";
        {
            kiln_component c = next(m) % 2 ? m->vel : m->tag;
            if (kiln_has(w, m->e[s], c)) kiln_remove(w, m->e[s], c, NULL);
            else kiln_add(w, m->e[s], c, NULL);
        }
        return "move";
    case 8: /* a command buffer of named spawns and renames, some refused at the apply */
        {
            kiln_commands *cmd = kiln_commands_create(w);
            if (!cmd) return "buffer";
            int k = 1 + (int)(next(m) % 3);
            for (int j = 0; j < k; j++) {
                int nj = (int)(next(m) % NAMES);
                if (m->unsure[nj]) continue;
                kiln_name tj;
                text(nj, &tj);
                kiln_component cs[1] = {m->name};
                void *vs[1] = {&tj};
                kiln_entity ph;
                kiln_commands_spawn_with(cmd, cs, vs, 1, &ph);
            }
            /* and a rename in place of a named entity: a set, checked when it lands */
            int s2 = some_slot(m, true), n2 = (int)(next(m) % NAMES);
            kiln_name t2;
            text(n2, &t2);
            if (s2 >= 0 && m->name_of[s2] >= 0 && !m->unsure[n2] && !m->unsure[m->name_of[s2]])
                kiln_commands_set(cmd, m->e[s2], m->name, &t2);
            else s2 = -1;
            /* one command at a time, so that the model follows each */
            while (kiln_commands_count(cmd) > 0) {
                int64_t before = kiln_commands_count(cmd);
                r = kiln_commands_apply(cmd, w, NULL);
                if (r == KILN_OK || kiln_commands_count(cmd) == before) break;
            }
            kiln_commands_destroy(cmd);
            test_allocator_fail_never(&m->alloc); /* the test's own query below */
            /* the model learns the spawns from the world: each new named entity takes a slot */
            kiln_iter it;
            kiln_query *q;
            ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {m->name}}, &q), KILN_OK);
            kiln_query_iter(q, &it);
            while (kiln_query_next(&it))
                for (int32_t row = 0; row < it.count; row++) {
                    bool known = false;
                    for (int j = 0; j < SLOTS; j++) known |= m->e[j] == it.entities[row];
                    if (known) continue;
                    int free_slot = -1;
                    for (int j = 0; j < SLOTS && free_slot < 0; j++)
                        if (!m->e[j]) free_slot = j;
                    ck_assert_int_ge(free_slot, 0);
                    int nn;
                    ck_assert_int_eq(sscanf(((const kiln_name *)it.columns[0])[row].text, "name-%d", &nn), 1);
                    ck_assert_msg(holder(m, nn) < 0, "a buffer's spawn repeated name-%d", nn);
                    m->e[free_slot] = it.entities[row], m->name_of[free_slot] = nn;
                }
            kiln_query_destroy(q);
            if (s2 >= 0 && m->e[s2]) { /* the set landed or was refused as the model says */
                const char *have = kiln_name_get(w, m->e[s2]);
                if (have && strcmp(have, t2.text) == 0) {
                    ck_assert_msg(free_for(m, n2, s2), "a buffer's set repeated %s", t2.text);
                    m->name_of[s2] = n2;
                }
            }
        }
        return "buffer";
    case 9: /* a deferred rename: checked when queued, landing at the end of the section */
        if ((s = some_slot(m, true)) < 0 || m->unsure[n]) return "skip";
        kiln_defer_begin(w);
        r = kiln_name_set(w, m->e[s], t.text);
        kiln_defer_end(w);
        /* what an allocation failure left queued lands at the next section's end: now */
        test_allocator_fail_never(&m->alloc);
        kiln_defer_begin(w);
        kiln_defer_end(w);
        if (r == KILN_OK && kiln_get(w, m->e[s], m->name) &&
            strcmp(((const kiln_name *)kiln_get(w, m->e[s], m->name))->text, t.text) == 0)
            m->name_of[s] = n;
        else if (r != KILN_ERR_OUT_OF_MEMORY && r != KILN_OK) ck_assert(!free_for(m, n, s));
        return "deferred";
    case 10: /* written through a pointer, to a name no one holds */
        if ((s = some_slot(m, true)) < 0 || m->name_of[s] < 0 || !free_for(m, n, s)) return "skip";
        {
            kiln_name *v = kiln_get_mut(w, m->e[s], m->name);
            if (!v) return "get_mut";
            m->unsure[m->name_of[s]] = true; /* the old name may still be found this tick */
            *v = t;
            m->name_of[s] = n, m->unsure[n] = true;
        }
        return "get_mut";
    default:
        kiln_tick_advance(w);
        memset(m->unsure, 0, sizeof m->unsure);
        return "tick";
    }
}

static void run(uint64_t seed, int steps, bool failing) {
    model m;
    open_model(&m, seed);
    for (int i = 0; i < steps; i++) {
        if (failing && next(&m) % 3 == 0) test_allocator_fail_after(&m.alloc, next(&m) % 6);
        const char *name = step(&m);
        test_allocator_fail_never(&m.alloc);
        compare(&m, name, i);
    }
    kiln_world_destroy(m.world);
    ck_assert_int_eq(m.alloc.live_bytes, 0);
}

KILN_TEST_GROUP_WITH(names_model, .timeout = 120);

KILN_TEST(names_model, look_ups_follow_every_way_a_name_comes_and_goes) {
    for (uint64_t seed = 1; seed <= 40; seed++) run(seed, 400, false);
}

KILN_TEST(names_model, allocation_failures_leave_names_and_look_ups_as_the_model_has_them) {
    for (uint64_t seed = 100; seed <= 140; seed++) run(seed, 300, true);
}

/* A value written in place moves no row: the check hook enters it, so it is found (and
 * refused to another entity) in the same tick. */
KILN_TEST(names_model, a_set_in_place_is_found_in_the_same_tick) {
    model m;
    open_model(&m, 1);
    kiln_entity a, b;
    ck_assert_int_eq(kiln_spawn(m.world, &a), KILN_OK);
    ck_assert_int_eq(kiln_spawn(m.world, &b), KILN_OK);
    ck_assert_int_eq(kiln_name_set(m.world, a, "first"), KILN_OK);
    ck_assert_uint_eq(kiln_name_lookup(m.world, "first"), a);
    kiln_name t = {"second"};
    ck_assert_int_eq(kiln_set(m.world, a, m.name, &t), KILN_OK);
    ck_assert_uint_eq(kiln_name_lookup(m.world, "second"), a);
    ck_assert_uint_eq(kiln_name_lookup(m.world, "first"), KILN_NULL_ENTITY);
    ck_assert_int_eq(kiln_name_set(m.world, b, "second"), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_name_set(m.world, b, "first"), KILN_OK);
    kiln_world_destroy(m.world);
}

/* The index used to tell a change by the Name query's count and ticks: a named spawn (checked
 * before its row lands) followed by a despawn in the same tick left both as they were when it
 * last looked, so the spawned name was never found. It now counts rows taken out. */
KILN_TEST(names_model, a_named_spawn_then_a_despawn_in_one_tick_is_found) {
    model m;
    open_model(&m, 1);
    kiln_entity e[3];
    const char *names[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        kiln_name t;
        memset(&t, 0, sizeof t);
        strcpy(t.text, names[i]);
        const void *vals[1] = {&t};
        ck_assert_int_eq(kiln_spawn_with(m.world, &m.name, vals, 1, &e[i]), KILN_OK);
    }
    ck_assert_int_eq(kiln_despawn(m.world, e[0]), KILN_OK);
    ck_assert_uint_eq(kiln_name_lookup(m.world, "c"), e[2]);
    ck_assert_uint_eq(kiln_name_lookup(m.world, "b"), e[1]);
    ck_assert_uint_eq(kiln_name_lookup(m.world, "a"), KILN_NULL_ENTITY);
    kiln_name t = {"c"};
    const void *vals[1] = {&t};
    ck_assert_int_eq(kiln_spawn_with(m.world, &m.name, vals, 1, NULL), KILN_ERR_INVALID_ARGUMENT);
    kiln_world_destroy(m.world);
}

/* The index read Names through a query iteration, whose end lands what the world has queued:
 * a look-up (or a check hook, in the middle of a spawn) landed an add that a section out of
 * memory had left queued. It waits for the next section's end, as documented. */
KILN_TEST(names_model, a_look_up_lands_nothing_left_queued) {
    model m;
    open_model(&m, 1);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(m.world, &e), KILN_OK);
    ck_assert_int_eq(kiln_name_set(m.world, e, "held"), KILN_OK);
    kiln_entity gone;
    ck_assert_int_eq(kiln_spawn(m.world, &gone), KILN_OK);
    ck_assert_int_eq(kiln_name_set(m.world, gone, "gone"), KILN_OK);
    kiln_defer_begin(m.world);
    ck_assert_int_eq(kiln_add(m.world, e, m.tag, NULL), KILN_OK);
    test_allocator_fail_after(&m.alloc, 0); /* the add makes an archetype: it cannot land */
    ck_assert_int_eq(kiln_defer_end(m.world), KILN_ERR_OUT_OF_MEMORY);
    test_allocator_fail_never(&m.alloc);
    ck_assert_int_eq(kiln_despawn(m.world, gone), KILN_OK); /* the index has to catch up */
    ck_assert_uint_eq(kiln_name_lookup(m.world, "held"), e);
    ck_assert(!kiln_has(m.world, e, m.tag));
    kiln_defer_begin(m.world);
    ck_assert_int_eq(kiln_defer_end(m.world), KILN_OK);
    ck_assert(kiln_has(m.world, e, m.tag));
    kiln_world_destroy(m.world);
}
