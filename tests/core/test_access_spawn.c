/* test_access_spawn.c: Check suite for repeated spawns of one component list, which take the
 * spawn cache's one-pass path: every value, default, padding byte and tick as the first spawn,
 * in every width, and the columns' latest ticks. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "access_fixture.h"
#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

static access_fixture F;

static void setup(void) { access_fixture_setup(&F); }

static void teardown(void) { access_fixture_teardown(&F); }

KILN_TEST_GROUP_WITH(spawn_cache, .setup = setup, .teardown = teardown, .timeout = 30);

/* Six bytes aligned to four: a stride of eight, two padding bytes the world must zero. */
typedef struct padded { uint16_t a, b, c; } padded;

static kiln_component register_padded(void) {
    kiln_component id;
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = "Padded",
                                                 .size = sizeof(padded), .align = 4}, &id),
                     KILN_OK);
    return id;
}

static kiln_component register_health(void) {
    static const int32_t full = 100;
    kiln_component id;
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = "Health",
                                                 .size = sizeof(int32_t), .defaults = &full}, &id),
                     KILN_OK);
    return id;
}

/* Spawns past several column growths, one tick apart: Position given, Padded given, Health
 * left to its defaults, a tag. Each entity holds its own values, zeroed padding and its
 * spawn tick, whichever path wrote it. */
KILN_TEST(spawn_cache, repeated_spawns_write_each_value_default_padding_and_tick) {
    kiln_component pad = register_padded(), health = register_health();
    kiln_component tag = test_register_tag(F.w, "Marked");
    enum { N = 100 };
    kiln_entity es[N];
    kiln_tick ticks[N];
    kiln_component list[4] = {F.pos, pad, health, tag};
    for (int i = 0; i < N; i++) {
        test_position p = {(float)i, (float)-i};
        padded q = {(uint16_t)i, (uint16_t)(i * 2), (uint16_t)(i * 3)};
        const void *values[4] = {&p, &q, NULL, NULL};
        ticks[i] = kiln_tick_advance(F.w);
        ck_assert_int_eq(kiln_spawn_with(F.w, list, values, 4, &es[i]), KILN_OK);
    }
    for (int i = 0; i < N; i++) {
        test_assert_position(F.w, es[i], F.pos, (float)i, (float)-i);
        const uint8_t *q = kiln_get(F.w, es[i], pad);
        ck_assert_ptr_nonnull(q);
        padded want = {(uint16_t)i, (uint16_t)(i * 2), (uint16_t)(i * 3)};
        ck_assert_mem_eq(q, &want, sizeof want);
        ck_assert_msg(q[6] == 0 && q[7] == 0, "entity %d: padding not zeroed", i);
        ck_assert_int_eq(*(const int32_t *)kiln_get(F.w, es[i], health), 100);
        ck_assert(kiln_has(F.w, es[i], tag));
        ck_assert_uint_eq(kiln_changed_tick(F.w, es[i], F.pos), ticks[i]);
        ck_assert_uint_eq(kiln_changed_tick(F.w, es[i], pad), ticks[i]);
        ck_assert_uint_eq(kiln_changed_tick(F.w, es[i], health), ticks[i]);
    }
}

/* A value read from another entity of the same archetype is copied, also when the spawn
 * grows the columns under it; a NULL value list spawns defaults. */
KILN_TEST(spawn_cache, values_read_from_the_same_columns_and_null_lists_spawn_correctly) {
    kiln_component health = register_health();
    kiln_component list[2] = {F.pos, health};
    kiln_entity first;
    test_position p0 = {1.5f, 2.5f};
    int32_t h0 = 7;
    ck_assert_int_eq(kiln_spawn_with(F.w, list, (const void *[2]){&p0, &h0}, 2, &first), KILN_OK);
    for (int i = 0; i < 40; i++) {
        const void *values[2] = {kiln_get(F.w, first, F.pos), kiln_get(F.w, first, health)};
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(F.w, list, values, 2, &e), KILN_OK);
        test_assert_position(F.w, e, F.pos, 1.5f, 2.5f);
        ck_assert_int_eq(*(const int32_t *)kiln_get(F.w, e, health), 7);
        ck_assert_int_eq(kiln_spawn_with(F.w, list, NULL, 2, &e), KILN_OK);
        test_assert_position(F.w, e, F.pos, 0.0f, 0.0f);
        ck_assert_int_eq(*(const int32_t *)kiln_get(F.w, e, health), 100);
    }
    test_assert_position(F.w, first, F.pos, 1.5f, 2.5f);
    ck_assert_int_eq(kiln_entity_count(F.w), 81);
}

static kiln_result refuse_negative(const kiln_world *world, kiln_entity entity, const void *value,
                                   void *ctx, char *why, size_t why_size) {
    (void)world, (void)entity, (void)ctx;
    if (value && *(const int32_t *)value < 0) {
        strncpy(why, "negative", why_size);
        return KILN_ERR_INVALID_ARGUMENT;
    }
    return KILN_OK;
}

/* The check hook runs on every spawn of a cached list: a refused one leaves the world as it
 * was, and a later spawn of the list still works. */
KILN_TEST(spawn_cache, a_check_hook_refuses_a_repeated_spawn_and_changes_nothing) {
    kiln_component armor;
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = "Armor",
                                                 .size = sizeof(int32_t), .check = refuse_negative},
                                             &armor),
                     KILN_OK);
    kiln_component list[2] = {F.pos, armor};
    test_position p = {3, 4};
    kiln_entity e;
    for (int32_t v = 1; v <= 3; v++)
        ck_assert_int_eq(kiln_spawn_with(F.w, list, (const void *[2]){&p, &v}, 2, &e), KILN_OK);
    uint64_t digest = test_world_digest(F.w);
    int32_t bad = -1;
    ck_assert_int_eq(kiln_spawn_with(F.w, list, (const void *[2]){&p, &bad}, 2, &e),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(test_world_digest(F.w), digest);
    ck_assert_int_eq(kiln_entity_count(F.w), 3);
    int32_t good = 9;
    ck_assert_int_eq(kiln_spawn_with(F.w, list, (const void *[2]){&p, &good}, 2, &e), KILN_OK);
    ck_assert_int_eq(*(const int32_t *)kiln_get(F.w, e, armor), 9);
}

/* Widths 4, 8, 12, 16, 24 and 80 (past the 64 bytes the one-pass copy takes, so written one
 * by one from there on), each value's bytes its own, copied whole by every repeated spawn. */
KILN_TEST(spawn_cache, values_of_every_width_are_copied_whole) {
    enum { K = 6, N = 40 };
    static const uint32_t sizes[K] = {4, 8, 12, 16, 24, 80};
    static const char *names[K] = {"W4", "W8", "W12", "W16", "W24", "W80"};
    kiln_component ids[K];
    for (int k = 0; k < K; k++)
        ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = names[k],
                                                     .size = sizes[k], .align = 4}, &ids[k]),
                         KILN_OK);
    kiln_entity es[N];
    for (int i = 0; i < N; i++) {
        uint8_t values[K][80];
        const void *list[K];
        for (int k = 0; k < K; k++) {
            for (uint32_t b = 0; b < sizes[k]; b++) values[k][b] = (uint8_t)(i * 13 + k * 5 + b);
            list[k] = values[k];
        }
        ck_assert_int_eq(kiln_spawn_with(F.w, ids, list, K, &es[i]), KILN_OK);
    }
    for (int i = 0; i < N; i++)
        for (int k = 0; k < K; k++) {
            const uint8_t *got = kiln_get(F.w, es[i], ids[k]);
            ck_assert_ptr_nonnull(got);
            for (uint32_t b = 0; b < sizes[k]; b++)
                ck_assert_msg(got[b] == (uint8_t)(i * 13 + k * 5 + b), "entity %d, W%u byte %u",
                              i, (unsigned)sizes[k], (unsigned)b);
        }
}

/* The latest tick of term 0's column in the one archetype query matches. */
static kiln_tick column_tick(kiln_component component) {
    kiln_query *q = NULL;
    ck_assert_int_eq(kiln_query_create(F.w, &(kiln_query_desc){.with = {component}}, &q), KILN_OK);
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    kiln_tick t = kiln_iter_column_tick(&it, 0);
    ck_assert(!kiln_query_next(&it));
    kiln_query_destroy(q);
    return t;
}

/* A cached spawn raises its columns' latest ticks once a tick: also when the cache turns to
 * another list within that tick without a spawn that writes (a batch of none), whose columns
 * were last written at an earlier tick. */
KILN_TEST(spawn_cache, cached_spawns_raise_the_columns_latest_tick_at_each_tick) {
    kiln_component health = register_health();
    kiln_component moving[2] = {F.pos, F.vel}, living[2] = {F.pos, health};
    test_position p = {1, 2};
    test_velocity v = {3, 4};
    int32_t h = 5;
    const void *values[2] = {&p, &h}, *motion[2] = {&p, &v};
    kiln_entity e;
    kiln_tick_advance(F.w);
    ck_assert_int_eq(kiln_spawn_with(F.w, living, values, 2, &e), KILN_OK);
    kiln_tick t = kiln_tick_advance(F.w);
    ck_assert_int_eq(kiln_spawn_with(F.w, moving, motion, 2, &e), KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(F.w, moving, motion, 2, &e), KILN_OK); /* cached */
    ck_assert_int_eq(kiln_spawn_batch(F.w, living, 2, 0, NULL), KILN_OK); /* the cache turns */
    ck_assert_int_eq(kiln_spawn_with(F.w, living, values, 2, &e), KILN_OK); /* cached */
    ck_assert_uint_eq(kiln_changed_tick(F.w, e, health), t);
    ck_assert_uint_eq(column_tick(health), t);
    t = kiln_tick_advance(F.w);
    ck_assert_int_eq(kiln_spawn_with(F.w, living, values, 2, &e), KILN_OK);
    ck_assert_uint_eq(column_tick(health), t);
    ck_assert_uint_eq(column_tick(F.vel), t - 1);
}
