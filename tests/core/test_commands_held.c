/* test_commands_held.c: Check suite for spawns that hold the adds recorded right after them in
 * their own slot: each held add is still one command for counts, `applied`, resuming after a
 * failure, running out of memory, reading a queued value back and truncation. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "../../core/src/commands.h" /* kl_commands_truncate, kl_commands_value_at */
#include "commands_fixture.h"
#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* The fixture world and buffer (commands_fixture.h), made afresh around every test. */
static commands_fixture F;

static void setup(void) { commands_fixture_setup(&F); }

static void teardown(void) { commands_fixture_teardown(&F); }

/* A 4-byte component whose check hook refuses while the flag it is given is set. */
static kiln_result gate_check(const kiln_world *world, kiln_entity entity, const void *value,
                              void *ctx, char *why, size_t why_size) {
    (void)world, (void)entity, (void)value;
    if (!*(const bool *)ctx) return KILN_OK;
    snprintf(why, why_size, "the gate is closed");
    return KILN_ERR_INVALID_ARGUMENT;
}

static kiln_component register_gate(kiln_world *w, bool *closed) {
    kiln_component id = KILN_NO_COMPONENT;
    kiln_component_desc desc = {.name = "Gate", .size = 4, .check = gate_check, .hook_ctx = closed};
    ck_assert_int_eq(kiln_component_register(w, &desc, &id), KILN_OK);
    return id;
}

KILN_TEST_GROUP_WITH(held, .setup = setup, .teardown = teardown);

/* Spawns with two 8-byte values (held), a third add that no longer fits (a command of its
 * own), an add to a live entity between: every call is one command. */
KILN_TEST(held, each_held_add_counts_as_one_command_recorded_and_applied) {
    kiln_component health = register_health(F.w);
    kiln_entity live = spawn_bare(&F), ph[4];
    for (int i = 0; i < 4; i++) {
        ASSERT_OK(kiln_commands_spawn(F.cmd, &ph[i]));
        ASSERT_OK(kiln_commands_add(F.cmd, ph[i], F.pos, &(test_position){(float)i, 1}));
        if (i != 2) ASSERT_OK(kiln_commands_add(F.cmd, ph[i], F.vel, &(test_velocity){2, (float)i}));
        if (i == 1) ASSERT_OK(kiln_commands_add(F.cmd, ph[i], health, &(int32_t){77}));
        if (i == 2) ASSERT_OK(kiln_commands_add(F.cmd, live, F.vel, &(test_velocity){5, 6}));
    }
    ck_assert_int_eq(kiln_commands_count(F.cmd), 13);
    int64_t applied = -1;
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 13);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 0);
    for (int i = 0; i < 4; i++) {
        kiln_entity e = kiln_commands_resolve(F.cmd, ph[i]);
        test_assert_position(F.w, e, F.pos, (float)i, 1);
        if (i != 2) test_assert_velocity(F.w, e, F.vel, 2, (float)i);
        else ck_assert(!kiln_has(F.w, e, F.vel));
        ck_assert(kiln_has(F.w, e, health) == (i == 1));
    }
    ck_assert_int_eq(*(const int32_t *)kiln_get(F.w, kiln_commands_resolve(F.cmd, ph[1]), health), 77);
    test_assert_velocity(F.w, live, F.vel, 5, 6);
}

/* The add after two held ones is refused: the spawn lands with the held adds (three
 * commands applied), the refused add is command 1 of what is left, and the next apply resumes
 * with it. */
KILN_TEST(held, a_refused_add_after_held_adds_stops_the_apply_there_and_the_next_resumes) {
    bool closed = true;
    kiln_component gate = register_gate(F.w, &closed);
    kiln_entity p, q;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, &(test_position){1, 2}));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.vel, &(test_velocity){3, 4}));
    ASSERT_OK(kiln_commands_add(F.cmd, p, gate, &(int32_t){5}));
    ASSERT_OK(kiln_commands_spawn(F.cmd, &q));
    ASSERT_OK(kiln_commands_add(F.cmd, q, F.pos, &(test_position){7, 8}));
    int64_t applied = -1;
    ck_assert_int_eq(kiln_commands_apply(F.cmd, F.w, &applied), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(applied, 3);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 3);
    ck_assert_msg(strncmp(kiln_world_error(F.w), "kiln_commands_apply: command 1 (add Gate) on entity ", 52) == 0,
                  "%s", kiln_world_error(F.w));
    kiln_entity e = kiln_commands_resolve(F.cmd, p);
    test_assert_position(F.w, e, F.pos, 1, 2);
    test_assert_velocity(F.w, e, F.vel, 3, 4);
    ck_assert(!kiln_has(F.w, e, gate));
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
    closed = false;
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 3);
    ck_assert_int_eq(*(const int32_t *)kiln_get(F.w, e, gate), 5);
    test_assert_position(F.w, kiln_commands_resolve(F.cmd, q), F.pos, 7, 8);
    ck_assert_int_eq(kiln_entity_count(F.w), 2);
}

/* Truncation (a deferred call taking back what it queued) may cut inside a spawn's slot: the
 * adds before the cut stay held, those after are gone, and adds recorded afterwards land.
 * Values read back by index, inside and past the held adds. */
KILN_TEST(held, truncation_inside_a_spawn_keeps_the_adds_before_the_cut) {
    kiln_entity live = spawn_bare(&F), p, q;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, &(test_position){1, 2}));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.vel, &(test_velocity){3, 4}));
    ASSERT_OK(kiln_commands_add(F.cmd, live, F.pos, &(test_position){5, 6}));
    ck_assert_int_eq(kiln_commands_count(F.cmd), 4);
    ck_assert_ptr_null(kl_commands_value_at(F.cmd, 0)); /* the spawn */
    ck_assert(((test_position *)kl_commands_value_at(F.cmd, 1))->y == 2);
    ck_assert(((test_velocity *)kl_commands_value_at(F.cmd, 2))->x == 3);
    ck_assert(((test_position *)kl_commands_value_at(F.cmd, 3))->x == 5);
    ck_assert_ptr_null(kl_commands_value_at(F.cmd, 4));
    kl_commands_truncate(F.cmd, 2); /* the add to live and the held Velocity */
    ck_assert_int_eq(kiln_commands_count(F.cmd), 2);
    ck_assert_ptr_null(kl_commands_value_at(F.cmd, 2));
    ASSERT_OK(kiln_commands_spawn(F.cmd, &q));
    ASSERT_OK(kiln_commands_add(F.cmd, q, F.vel, &(test_velocity){9, 10}));
    ASSERT_OK(kiln_commands_add(F.cmd, q, F.pos, &(test_position){11, 12}));
    kl_commands_truncate(F.cmd, 4); /* q's Position */
    ASSERT_OK(kiln_commands_add(F.cmd, q, F.pos, &(test_position){13, 14}));
    ck_assert_int_eq(kiln_commands_count(F.cmd), 5);
    ck_assert(((test_position *)kl_commands_value_at(F.cmd, 4))->x == 13);
    int64_t applied = -1;
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 5);
    kiln_entity e = kiln_commands_resolve(F.cmd, p), f = kiln_commands_resolve(F.cmd, q);
    test_assert_position(F.w, e, F.pos, 1, 2);
    ck_assert(!kiln_has(F.w, e, F.vel));
    ck_assert(!kiln_has(F.w, live, F.pos));
    test_assert_velocity(F.w, f, F.vel, 9, 10);
    test_assert_position(F.w, f, F.pos, 13, 14);
}

/* Cutting all of a spawn's held adds, then the spawn itself; the commands before stay. */
KILN_TEST(held, truncation_takes_held_adds_and_spawns_whole_from_the_end) {
    kiln_entity p, q;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, &(test_position){1, 2}));
    ASSERT_OK(kiln_commands_spawn(F.cmd, &q));
    ASSERT_OK(kiln_commands_add(F.cmd, q, F.pos, &(test_position){3, 4}));
    ASSERT_OK(kiln_commands_add(F.cmd, q, F.vel, &(test_velocity){5, 6}));
    kl_commands_truncate(F.cmd, 3); /* both of q's adds */
    ck_assert_int_eq(kiln_commands_count(F.cmd), 3);
    kl_commands_truncate(F.cmd, 1); /* q and p's Position */
    ck_assert_int_eq(kiln_commands_count(F.cmd), 1);
    int64_t applied = -1;
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 1);
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
    ck_assert(!kiln_has(F.w, kiln_commands_resolve(F.cmd, p), F.pos));
}

KILN_TEST_GROUP(held_out_of_memory);

/* Every allocation of an apply of spawns holding their adds refused in turn: a spawn lands
 * with all its held adds or not at all (0 or 3 applied of each), and the next apply lands
 * the rest exactly once. */
KILN_TEST(held_out_of_memory, a_spawn_and_its_held_adds_land_together_or_not_at_all) {
    enum { SPAWNS = 40 };
    int64_t failures = 0;
    for (int64_t n = 0;; n++) {
        ck_assert_int_lt(n, 64);
        commands_fixture f;
        commands_fixture_setup(&f);
        kiln_entity ph[SPAWNS];
        for (int i = 0; i < SPAWNS; i++) {
            ck_assert_int_eq(kiln_commands_spawn(f.cmd, &ph[i]), KILN_OK);
            ck_assert_int_eq(kiln_commands_add(f.cmd, ph[i], f.pos, &(test_position){(float)i, 0}), KILN_OK);
            ck_assert_int_eq(kiln_commands_add(f.cmd, ph[i], f.vel, &(test_velocity){0, (float)i}), KILN_OK);
        }
        int64_t applied;
        bool failed = apply_failing_at(&f, n, 3 * SPAWNS, &applied);
        if (failed) {
            failures++;
            ck_assert_int_eq(applied % 3, 0);
            ck_assert_int_eq(kiln_entity_count(f.w), applied / 3);
            apply_rest(&f, 3 * SPAWNS, applied);
        }
        ck_assert_int_eq(kiln_entity_count(f.w), SPAWNS);
        for (int i = 0; i < SPAWNS; i++) {
            kiln_entity e = kiln_commands_resolve(f.cmd, ph[i]);
            test_assert_position(f.w, e, f.pos, (float)i, 0);
            test_assert_velocity(f.w, e, f.vel, 0, (float)i);
        }
        commands_fixture_teardown(&f);
        if (!failed) break;
    }
    ck_assert_int_ge(failures, 1);
}

/* Truncation that drops the latest spawn whole: a command recorded in its place is never
 * taken for it, so a later add to that placeholder is a command of its own (and fails when
 * applied, its spawn gone). */
KILN_TEST(held, an_add_after_its_spawn_was_truncated_is_not_held_by_the_command_in_its_place) {
    kiln_entity live = spawn_bare(&F), p;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &p));
    kl_commands_truncate(F.cmd, 0);
    ASSERT_OK(kiln_commands_despawn(F.cmd, live));
    ASSERT_OK(kiln_commands_add(F.cmd, p, F.pos, &(test_position){1, 2}));
    ck_assert_int_eq(kiln_commands_count(F.cmd), 2);
    int64_t applied = -1;
    ck_assert_int_eq(kiln_commands_apply(F.cmd, F.w, &applied), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(applied, 1);
    ck_assert(!kiln_is_alive(F.w, live));
    ck_assert_int_eq(kiln_entity_count(F.w), 0);
    ck_assert_int_eq(kiln_commands_count(F.cmd), 1);
}
