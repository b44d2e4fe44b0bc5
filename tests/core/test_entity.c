/* test_entity.c: Check suite for entity handles: spawn, despawn, liveness, generations, format.
 * A handle is alive only while its slot holds that generation; nothing brings a stale one back. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* An empty world on the counting allocator (test_support.h), made afresh around every test of a
 * group using it; teardown asserts every byte came back. */
static test_world_fixture F;

static void setup(void) { test_world_fixture_setup(&F); }

static void teardown(void) { test_world_fixture_teardown(&F); }

static kiln_entity spawn_one(kiln_world *world) {
    kiln_entity e = KILN_NULL_ENTITY;
    ck_assert_int_eq(kiln_spawn(world, &e), KILN_OK);
    ck_assert_uint_ne(e, KILN_NULL_ENTITY);
    return e;
}

/* ------------------------------------------------------------------------------------------ */
/* spawn / despawn                                                                            */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(lifecycle, .setup = setup, .teardown = teardown);

KILN_TEST(lifecycle, new_world_has_no_entities) {
    ck_assert_ptr_nonnull(F.w);
    ck_assert_int_eq(kiln_entity_count(F.w), 0);
    ck_assert_int_eq(kiln_world_entities(F.w, NULL, 0), 0);
}

KILN_TEST(lifecycle, spawn_returns_distinct_live_handles) {
    enum { N = 200 };
    kiln_entity e[N];
    for (int i = 0; i < N; i++) {
        e[i] = spawn_one(F.w);
        ck_assert(kiln_is_alive(F.w, e[i]));
        ck_assert_int_eq(kiln_entity_count(F.w), i + 1);
        ck_assert(!test_contains(e, i, e[i]));
    }
    for (int i = 0; i < N; i++) ck_assert(kiln_is_alive(F.w, e[i]));
}

KILN_TEST(lifecycle, spawned_handles_carry_a_generation_of_at_least_one) {
    for (int i = 0; i < 50; i++) {
        kiln_entity e = spawn_one(F.w);
        ck_assert_uint_ge(kiln_entity_generation(e), 1);
        ck_assert_uint_le(kiln_entity_generation(e), KILN_ENTITY_GENERATION_MAX);
    }
}

KILN_TEST(lifecycle, handles_stay_below_two_to_the_53) {
    for (int i = 0; i < 1000; i++) {
        kiln_entity e = spawn_one(F.w);
        ck_assert_uint_lt(e, (uint64_t)1 << 53);
        /* nothing but index and generation is encoded */
        ck_assert_uint_eq(kiln_entity_make(kiln_entity_index(e), kiln_entity_generation(e)), e);
        ck_assert(kiln_is_alive(F.w, (kiln_entity)(double)e));
        if (i % 3 == 0) ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    }
}

KILN_TEST(lifecycle, despawn_makes_entity_dead_and_lowers_count) {
    kiln_entity a = spawn_one(F.w);
    kiln_entity b = spawn_one(F.w);
    ck_assert_int_eq(kiln_despawn(F.w, a), KILN_OK);
    ck_assert(!kiln_is_alive(F.w, a));
    ck_assert(kiln_is_alive(F.w, b));
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
    ck_assert_int_eq(kiln_despawn(F.w, b), KILN_OK);
    ck_assert(!kiln_is_alive(F.w, b));
    ck_assert_int_eq(kiln_entity_count(F.w), 0);
}

KILN_TEST(lifecycle, despawn_reuses_index_with_new_generation) {
    kiln_entity keep = spawn_one(F.w);
    kiln_entity e = spawn_one(F.w);
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    kiln_entity f = spawn_one(F.w);
    ck_assert_uint_eq(kiln_entity_index(f), kiln_entity_index(e));
    ck_assert_uint_eq(kiln_entity_generation(f), kiln_entity_generation(e) + 1);
    ck_assert_uint_ne(f, e);
    ck_assert(kiln_is_alive(F.w, f));
    ck_assert(kiln_is_alive(F.w, keep));
    kiln_world_stats stats;
    kiln_world_stats_get(F.w, &stats);
    ck_assert_int_eq(stats.entity_slots, 2);
}

KILN_TEST(lifecycle, stale_handle_stays_dead_after_its_slot_is_reused) {
    kiln_entity e = spawn_one(F.w);
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    kiln_entity f = spawn_one(F.w);
    ck_assert_uint_eq(kiln_entity_index(f), kiln_entity_index(e));
    ck_assert(!kiln_is_alive(F.w, e));
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_ERR_DEAD_ENTITY);
    ck_assert(kiln_is_alive(F.w, f));
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
    /* and so does every older or never-issued generation of that slot */
    uint32_t index = kiln_entity_index(f);
    ck_assert(!kiln_is_alive(F.w, kiln_entity_make(index, 0)));
    ck_assert(!kiln_is_alive(F.w, kiln_entity_make(index, kiln_entity_generation(f) + 1)));
    ck_assert(!kiln_is_alive(F.w, kiln_entity_make(index, KILN_ENTITY_GENERATION_MAX)));
}

KILN_TEST(lifecycle, the_generation_a_dead_slot_hands_out_next_is_not_alive_before_it_is_issued) {
    /* A dead slot's record holds the generation its next spawn will carry: a handle guessing
     * it is still dead until that spawn, and then alive. */
    kiln_entity keep = spawn_one(F.w);
    kiln_entity e = spawn_one(F.w);
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    kiln_entity next = kiln_entity_make(kiln_entity_index(e), kiln_entity_generation(e) + 1);
    ck_assert(!kiln_is_alive(F.w, next));
    ck_assert_int_eq(kiln_despawn(F.w, next), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(kiln_entity_components(F.w, next, NULL, 0), -1);
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
    ck_assert_uint_eq(spawn_one(F.w), next);
    ck_assert(kiln_is_alive(F.w, next) && kiln_is_alive(F.w, keep) && !kiln_is_alive(F.w, e));
}

KILN_TEST(lifecycle, null_entity_is_never_alive) {
    ck_assert(!kiln_is_alive(F.w, KILN_NULL_ENTITY));
    for (int i = 0; i < 10; i++) spawn_one(F.w);
    ck_assert(!kiln_is_alive(F.w, KILN_NULL_ENTITY));
    ck_assert_int_eq(kiln_despawn(F.w, KILN_NULL_ENTITY), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(kiln_entity_count(F.w), 10);
}

KILN_TEST(lifecycle, generation_zero_of_a_live_slot_is_not_alive) {
    kiln_entity e = spawn_one(F.w);
    ck_assert(!kiln_is_alive(F.w, kiln_entity_make(kiln_entity_index(e), 0)));
    ck_assert(!kiln_is_alive(F.w, kiln_entity_make(kiln_entity_index(e),
                                                 kiln_entity_generation(e) + 1)));
}

KILN_TEST(lifecycle, out_of_range_handles_are_not_alive) {
    kiln_entity e = spawn_one(F.w);
    uint32_t index = kiln_entity_index(e);
    uint32_t gen = kiln_entity_generation(e);
    ck_assert(!kiln_is_alive(F.w, kiln_entity_make(index + 1, gen)));
    ck_assert(!kiln_is_alive(F.w, kiln_entity_make(index + 1000, gen)));
    ck_assert(!kiln_is_alive(F.w, kiln_entity_make(1000000, 1)));
    ck_assert(!kiln_is_alive(F.w, kiln_entity_make(UINT32_MAX, 1)));
    ck_assert(!kiln_is_alive(F.w, kiln_entity_make(UINT32_MAX, KILN_ENTITY_GENERATION_MAX)));
    ck_assert(!kiln_is_alive(F.w, UINT64_MAX));
    ck_assert_int_eq(kiln_despawn(F.w, kiln_entity_make(UINT32_MAX, 1)), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
}

KILN_TEST(lifecycle, handles_with_bits_above_53_are_not_alive) {
    /* No handle the world issues has them, so such a number is not a live entity even when
     * its low 53 bits name one. */
    kiln_world *w = kiln_world_create(NULL);
    kiln_entity e = spawn_one(w);
    ck_assert(!kiln_is_alive(w, e | ((uint64_t)1 << 53)));
    ck_assert(!kiln_is_alive(w, e | ((uint64_t)1 << 63)));
    ck_assert_int_eq(kiln_despawn(w, e | ((uint64_t)1 << 60)), KILN_ERR_DEAD_ENTITY);
    ck_assert(kiln_is_alive(w, e));
    kiln_world_destroy(w);
}

KILN_TEST(lifecycle, despawn_of_dead_entity_fails_with_a_message_naming_it) {
    kiln_entity keep = spawn_one(F.w);
    kiln_entity e = spawn_one(F.w);
    ck_assert_str_eq(kiln_world_error(F.w), "");
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_ERR_DEAD_ENTITY);
    char name[32];
    const char *msg = kiln_world_error(F.w);
    ck_assert_msg(strstr(msg, test_entity_string(e, name)) != NULL,
                  "message \"%s\" does not name entity %s", msg, name);
    ck_assert_msg(strncmp(msg, "kiln_despawn: ", 14) == 0, "message \"%s\" does not name the call",
                  msg);
    ck_assert(kiln_is_alive(F.w, keep));
    ck_assert_int_eq(kiln_entity_count(F.w), 1);
    kiln_world_clear_error(F.w);
    ck_assert_str_eq(kiln_world_error(F.w), "");
}

KILN_TEST(lifecycle, despawn_swap_removes_the_row) {
    /* The last row of the archetype fills the hole, so the listing order changes predictably. */
    kiln_world *w = kiln_world_create(NULL);
    kiln_entity e[4];
    for (int i = 0; i < 4; i++) e[i] = spawn_one(w);
    kiln_entity list[4];
    ck_assert_int_eq(kiln_world_entities(w, list, 4), 4);
    for (int i = 0; i < 4; i++) ck_assert_uint_eq(list[i], e[i]);
    ck_assert_int_eq(kiln_despawn(w, e[0]), KILN_OK);
    ck_assert_int_eq(kiln_world_entities(w, list, 4), 3);
    ck_assert_uint_eq(list[0], e[3]);
    ck_assert_uint_eq(list[1], e[1]);
    ck_assert_uint_eq(list[2], e[2]);
    kiln_world_destroy(w);
}

/* ------------------------------------------------------------------------------------------ */
/* generation wrap                                                                            */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(generation_wrap, .setup = setup, .teardown = teardown, .timeout = 120);

KILN_TEST(generation_wrap, slot_whose_generation_would_wrap_is_retired) {
    kiln_entity other = spawn_one(F.w);
    kiln_entity e = spawn_one(F.w);
    uint32_t slot = kiln_entity_index(e);
    uint32_t last_gen = kiln_entity_generation(e);
    int64_t cycles = 0;
    /* plain checks in the loop: a Check assertion per cycle would dominate the run time */
    for (;;) {
        if (kiln_despawn(F.w, e) != KILN_OK)
            ck_abort_msg("despawn failed at cycle %lld", (long long)cycles);
        if (kiln_spawn(F.w, &e) != KILN_OK)
            ck_abort_msg("spawn failed at cycle %lld", (long long)cycles);
        cycles++;
        if (kiln_entity_index(e) != slot) break;
        if (kiln_entity_generation(e) != last_gen + 1)
            ck_abort_msg("generation went from %u to %u", (unsigned)last_gen,
                         (unsigned)kiln_entity_generation(e));
        last_gen = kiln_entity_generation(e);
        if (cycles > (int64_t)KILN_ENTITY_GENERATION_MAX + 1)
            ck_abort_msg("slot still reused after %lld cycles", (long long)cycles);
    }
    /* the slot lived through every generation before it was retired */
    ck_assert_uint_eq(last_gen, KILN_ENTITY_GENERATION_MAX);
    ck_assert(kiln_is_alive(F.w, e));
    ck_assert(kiln_is_alive(F.w, other));
    ck_assert_int_eq(kiln_entity_count(F.w), 2);
    for (uint32_t g = 0; g <= KILN_ENTITY_GENERATION_MAX; g += 4093)
        ck_assert(!kiln_is_alive(F.w, kiln_entity_make(slot, g)));
    ck_assert(!kiln_is_alive(F.w, kiln_entity_make(slot, 1)));
    ck_assert(!kiln_is_alive(F.w, kiln_entity_make(slot, KILN_ENTITY_GENERATION_MAX)));
    ck_assert_int_eq(kiln_despawn(F.w, kiln_entity_make(slot, KILN_ENTITY_GENERATION_MAX)),
                     KILN_ERR_DEAD_ENTITY);
    /* and it is never handed out again */
    for (int i = 0; i < 100; i++) {
        kiln_entity f = spawn_one(F.w);
        ck_assert_uint_ne(kiln_entity_index(f), slot);
        if (i % 2 == 0) ck_assert_int_eq(kiln_despawn(F.w, f), KILN_OK);
    }
    kiln_world_stats stats;
    kiln_world_stats_get(F.w, &stats);
    ck_assert_int_ge(stats.entity_slots, 3); /* the retired slot still counts */
}

/* ------------------------------------------------------------------------------------------ */
/* unspawn                                                                                    */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(unspawn, .setup = setup, .teardown = teardown, .timeout = 120);

static int destroyed;
static void count_destroy(void *ptr, int32_t count, void *ctx) { (void)ptr, (void)ctx, destroyed += count; }

/* Spawns from fresh slots and from freed ones are taken back latest first: the next spawns get
 * the same handles, in the same order, as if they had never happened. */
KILN_TEST(unspawn, spawns_taken_back_latest_first_leave_the_next_handles_as_they_were) {
    kiln_component held;
    kiln_component_desc d = {.name = "Held", .size = sizeof(int32_t), .destroy = count_destroy};
    ck_assert_int_eq(kiln_component_register(F.w, &d, &held), KILN_OK);
    kiln_entity e[6];
    for (int i = 0; i < 6; i++) e[i] = spawn_one(F.w);
    ck_assert_int_eq(kiln_despawn(F.w, e[1]), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.w, e[4]), KILN_OK); /* free list: 4, then 1 */
    kiln_world_stats before;
    kiln_world_stats_get(F.w, &before);
    kiln_entity first[4], again[4];
    int32_t v = 7;
    const void *values[] = {&v};
    for (int i = 0; i < 4; i++) ck_assert_int_eq(kiln_spawn_with(F.w, &held, values, 1, &first[i]), KILN_OK);
    ck_assert_uint_eq(kiln_entity_index(first[0]), kiln_entity_index(e[4])); /* two freed, two fresh */
    destroyed = 0;
    for (int i = 4; i-- > 0;) ck_assert_int_eq(kiln_unspawn(F.w, first[i]), KILN_OK);
    ck_assert_int_eq(destroyed, 4); /* the values' hooks ran, as a despawn's do */
    for (int i = 0; i < 4; i++) ck_assert(!kiln_is_alive(F.w, first[i]));
    ck_assert_int_eq(kiln_entity_count(F.w), 4);
    kiln_world_stats after;
    kiln_world_stats_get(F.w, &after);
    ck_assert_int_eq(after.entity_slots, before.entity_slots); /* the fresh slots went back too */
    for (int i = 0; i < 4; i++) again[i] = spawn_one(F.w);
    for (int i = 0; i < 4; i++) ck_assert_uint_eq(again[i], first[i]);
}

KILN_TEST(unspawn, a_dead_handle_is_refused_naming_kiln_unspawn) {
    kiln_entity e = spawn_one(F.w);
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    ck_assert_int_eq(kiln_unspawn(F.w, e), KILN_ERR_DEAD_ENTITY);
    char buf[24], want[64];
    snprintf(want, sizeof want, "kiln_unspawn: entity %s is not alive", kiln_entity_format(e, buf, sizeof buf));
    ck_assert_str_eq(kiln_world_error(F.w), want);
    kiln_entity next = spawn_one(F.w); /* the refusal gave nothing back: the slot's next generation */
    ck_assert_uint_eq(kiln_entity_generation(next), kiln_entity_generation(e) + 1);
}

/* In a deferred section the despawn is queued, as kiln_despawn's is, and the slot is spent. */
KILN_TEST(unspawn, a_deferred_unspawn_is_a_queued_despawn) {
    kiln_entity e = spawn_one(F.w);
    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_unspawn(F.w, e), KILN_OK);
    ck_assert(kiln_is_alive(F.w, e));
    kiln_defer_end(F.w);
    ck_assert(!kiln_is_alive(F.w, e));
    kiln_entity next = spawn_one(F.w);
    ck_assert_uint_eq(kiln_entity_index(next), kiln_entity_index(e));
    ck_assert_uint_eq(kiln_entity_generation(next), kiln_entity_generation(e) + 1);
}

/* A slot at its last generation would be retired by a despawn; an unspawn puts it back on the
 * free list at that generation, as it was before the spawn took it. */
KILN_TEST(unspawn, a_slot_at_its_last_generation_goes_back_unretired) {
    kiln_entity e = spawn_one(F.w);
    while (kiln_entity_generation(e) < KILN_ENTITY_GENERATION_MAX) {
        if (kiln_despawn(F.w, e) != KILN_OK || kiln_spawn(F.w, &e) != KILN_OK) ck_abort_msg("cycling failed");
    }
    ck_assert_int_eq(kiln_unspawn(F.w, e), KILN_OK);
    ck_assert(!kiln_is_alive(F.w, e));
    kiln_entity again = spawn_one(F.w);
    ck_assert_uint_eq(again, e);
    ck_assert_int_eq(kiln_despawn(F.w, again), KILN_OK); /* now retired, as a despawn does */
    ck_assert_uint_ne(kiln_entity_index(spawn_one(F.w)), kiln_entity_index(e));
}

/* ------------------------------------------------------------------------------------------ */
/* format                                                                                     */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(format, .setup = setup, .teardown = teardown);

KILN_TEST(format, entity_format_writes_index_v_generation) {
    char buf[24];
    ck_assert_ptr_eq(kiln_entity_format(kiln_entity_make(12, 3), buf, sizeof buf), buf);
    ck_assert_str_eq(buf, "12v3");
    kiln_entity_format(kiln_entity_make(0, 1), buf, sizeof buf);
    ck_assert_str_eq(buf, "0v1");
    kiln_entity_format(KILN_NULL_ENTITY, buf, sizeof buf);
    ck_assert_str_eq(buf, "0v0");
    kiln_entity_format(kiln_entity_make(UINT32_MAX, KILN_ENTITY_GENERATION_MAX), buf, sizeof buf);
    ck_assert_str_eq(buf, "4294967295v2097151");
}

KILN_TEST(format, entity_format_formats_a_spawned_handle) {
    kiln_entity e = spawn_one(F.w);
    char buf[24], expected[48];
    snprintf(expected, sizeof expected, "%uv%u", (unsigned)kiln_entity_index(e),
             (unsigned)kiln_entity_generation(e));
    ck_assert_str_eq(kiln_entity_format(e, buf, sizeof buf), expected);
}

KILN_TEST(format, entity_format_never_writes_past_size) {
    char buf[16];
    memset(buf, '#', sizeof buf);
    kiln_entity_format(kiln_entity_make(123456, 789), buf, 5);
    for (size_t i = 5; i < sizeof buf; i++) ck_assert_int_eq(buf[i], '#');
    ck_assert_ptr_nonnull(memchr(buf, '\0', 5));
    ck_assert_int_eq(strncmp(buf, "123456v789", strlen(buf)), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* listing                                                                                    */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(listing, .setup = setup, .teardown = teardown);

KILN_TEST(listing, world_entities_lists_exactly_the_live_entities) {
    enum { N = 10 };
    kiln_entity e[N];
    for (int i = 0; i < N; i++) e[i] = spawn_one(F.w);
    ck_assert_int_eq(kiln_despawn(F.w, e[2]), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.w, e[5]), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.w, e[9]), KILN_OK);
    ck_assert_int_eq(kiln_world_entities(F.w, NULL, 0), 7);
    kiln_entity list[N];
    ck_assert_int_eq(kiln_world_entities(F.w, list, N), 7);
    for (int i = 0; i < N; i++) {
        bool dead = i == 2 || i == 5 || i == 9;
        ck_assert_int_eq(test_contains(list, 7, e[i]), !dead);
    }
}

KILN_TEST(listing, world_entities_writes_no_more_than_capacity) {
    kiln_entity e[6];
    for (int i = 0; i < 6; i++) e[i] = spawn_one(F.w);
    kiln_entity list[6] = {0};
    list[3] = list[4] = list[5] = 77;
    ck_assert_int_eq(kiln_world_entities(F.w, list, 3), 6);
    for (int i = 0; i < 3; i++) ck_assert(test_contains(e, 6, list[i]));
    ck_assert_uint_eq(list[3], 77);
    ck_assert_uint_eq(list[4], 77);
    ck_assert_uint_eq(list[5], 77);
}

KILN_TEST(listing, world_entities_groups_by_archetype_in_row_order) {
    kiln_component pos = test_register_position(F.w);
    kiln_component vel = test_register_velocity(F.w);
    enum { N = 12 };
    kiln_entity e[N];
    for (int i = 0; i < N; i++) {
        kiln_component c = i % 3 == 0 ? pos : vel;
        if (i % 3 == 2) e[i] = spawn_one(F.w);
        else ck_assert_int_eq(kiln_spawn_with(F.w, &c, NULL, 1, &e[i]), KILN_OK);
    }
    kiln_entity list[N];
    ck_assert_int_eq(kiln_world_entities(F.w, list, N), N);
    /* within each archetype, rows keep spawn order; archetypes do not interleave */
    int32_t last_group = -1, groups_seen = 0;
    int64_t last_pos_in_group[3] = {-1, -1, -1};
    bool group_done[3] = {false, false, false};
    for (int k = 0; k < N; k++) {
        int i = 0;
        while (e[i] != list[k]) i++;
        int32_t group = i % 3;
        if (group != last_group) {
            ck_assert_msg(!group_done[group], "archetype listed in two runs");
            if (last_group >= 0) group_done[last_group] = true;
            last_group = group;
            groups_seen++;
        }
        ck_assert_int_gt(i, last_pos_in_group[group]);
        last_pos_in_group[group] = i;
    }
    ck_assert_int_eq(groups_seen, 3);
}

KILN_TEST(lifecycle, entity_slots_count_live_and_free_slots) {
    kiln_entity e[5];
    for (int i = 0; i < 5; i++) e[i] = spawn_one(F.w);
    ck_assert_int_eq(kiln_despawn(F.w, e[1]), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.w, e[3]), KILN_OK);
    kiln_world_stats stats;
    kiln_world_stats_get(F.w, &stats);
    ck_assert_int_eq(stats.entities, 3);
    ck_assert_int_eq(stats.entity_slots, 5);
    spawn_one(F.w);
    spawn_one(F.w);
    kiln_world_stats_get(F.w, &stats);
    ck_assert_int_eq(stats.entities, 5);
    ck_assert_int_eq(stats.entity_slots, 5);
    spawn_one(F.w);
    kiln_world_stats_get(F.w, &stats);
    ck_assert_int_eq(stats.entity_slots, 6);
}

KILN_TEST(lifecycle, many_spawns_and_despawns_keep_the_count_right) {
    test_allocator a;
    test_allocator_init(&a);
    kiln_world *w = test_world_create(&a);
    enum { N = 5000 };
    kiln_entity *e = malloc(N * sizeof *e);
    ck_assert_ptr_nonnull(e);
    for (int i = 0; i < N; i++) e[i] = spawn_one(w);
    for (int i = 0; i < N; i += 2) ck_assert_int_eq(kiln_despawn(w, e[i]), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(w), N / 2);
    for (int i = 0; i < N; i++) ck_assert_int_eq(kiln_is_alive(w, e[i]), i % 2 == 1);
    for (int i = 0; i < N; i += 2) e[i] = spawn_one(w);
    ck_assert_int_eq(kiln_entity_count(w), N);
    for (int i = 0; i < N; i++) ck_assert(kiln_is_alive(w, e[i]));
    kiln_world_stats stats;
    kiln_world_stats_get(w, &stats);
    ck_assert_int_eq(stats.entity_slots, N);
    free(e);
    kiln_world_destroy(w);
    ck_assert_int_eq(a.live_bytes, 0);
    ck_assert_int_eq(a.bad_osize, 0);
}
