/* test_getter.c: Check suite for the fast read forms, prepared getters (one handle or a list)
 * and kiln_get_many: they answer exactly what kiln_get answers, for live, dead, stale, reserved
 * and malformed handles; a getter dies when used after a change. */
#include <check.h>
#include <signal.h>
#include <string.h>

#include "access_fixture.h"
#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

static access_fixture F;

static void setup(void) { access_fixture_setup(&F); }

static void teardown(void) { access_fixture_teardown(&F); }

KILN_TEST_GROUP_WITH(getter, .setup = setup, .teardown = teardown);

/* Handles of every kind: with and without Position, in several archetypes, despawned (stale),
 * reserved by a deferred spawn, null, out of range, with stray high bits, a placeholder. */
static int32_t every_kind_of_handle(kiln_component tag, kiln_entity *dest) {
    int32_t n = 0;
    for (int i = 0; i < 40; i++) dest[n++] = spawn_at(F.w, F.pos, (float)i, (float)-i);
    for (int i = 0; i < 5; i++) dest[n++] = spawn_one(F.w);
    for (int i = 0; i < 5; i++) {
        kiln_entity e = spawn_at(F.w, F.pos, 100.0f + (float)i, 0);
        ck_assert_int_eq(kiln_add(F.w, e, F.vel, &(test_velocity){1, 1}), KILN_OK);
        ck_assert_int_eq(kiln_add(F.w, e, tag, NULL), KILN_OK);
        dest[n++] = e;
    }
    for (int i = 0; i < 40; i += 7) {
        ck_assert_int_eq(kiln_despawn(F.w, dest[i]), KILN_OK); /* dest[i] is stale now */
        dest[n++] = spawn_at(F.w, F.pos, 7, 7);                  /* reuses its slot */
    }
    /* two dead slots: the deferred spawn below takes the first, the second stays dead and
     * its record holds the generation it hands out next */
    kiln_entity gone[2] = {spawn_at(F.w, F.pos, 1, 1), spawn_at(F.w, F.pos, 2, 2)};
    ck_assert_int_eq(kiln_despawn(F.w, gone[1]), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.w, gone[0]), KILN_OK);
    dest[n++] = kiln_entity_make(kiln_entity_index(gone[1]), kiln_entity_generation(gone[1]) + 1);
    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_spawn(F.w, &dest[n]), KILN_OK); /* reserved, not alive */
    ck_assert_uint_eq(kiln_entity_index(dest[n]), kiln_entity_index(gone[0]));
    n++;
    dest[n++] = KILN_NULL_ENTITY;
    dest[n++] = kiln_entity_make(1u << 20, 1);
    dest[n++] = dest[1] | ((kiln_entity)1 << 60);
    dest[n++] = dest[1] | ((kiln_entity)1 << 53); /* the bit just above the 21-bit generation */
    dest[n++] = kiln_entity_make(kiln_entity_index(dest[2]), kiln_entity_generation(dest[2]) + 1);
    dest[n++] = KILN_PLACEHOLDER_BIT | 3;
    return n;
}

KILN_TEST(getter, answers_exactly_what_kiln_get_answers_for_every_kind_of_handle) {
    kiln_component tag = test_register_tag(F.w, "Marked");
    kiln_entity handles[80];
    int32_t n = every_kind_of_handle(tag, handles);
    kiln_getter pos, vel, marked;
    ck_assert_int_eq(kiln_getter_init(F.w, F.pos, &pos), KILN_OK);
    ck_assert_int_eq(kiln_getter_init(F.w, F.vel, &vel), KILN_OK);
    ck_assert_int_eq(kiln_getter_init(F.w, tag, &marked), KILN_OK);
    int found = 0;
    for (int32_t i = 0; i < n; i++) {
        ck_assert_ptr_eq(kiln_getter_get(&pos, handles[i]), kiln_get(F.w, handles[i], F.pos));
        ck_assert_ptr_eq(kiln_getter_get(&vel, handles[i]), kiln_get(F.w, handles[i], F.vel));
        ck_assert_ptr_null(kiln_getter_get(&marked, handles[i])); /* tags have no value */
        found += kiln_getter_get(&pos, handles[i]) != NULL;
    }
    ck_assert_int_eq(found, 40 - 6 + 5 + 6); /* live ones with Position */
    const test_position *p = kiln_getter_get(&pos, handles[3]);
    ck_assert(p && p->x == 3.0f && p->y == -3.0f);
    ck_assert_ptr_null(kiln_getter_get(&pos, handles[0])); /* despawned */
    kiln_getter_fini(&pos);
    kiln_getter_fini(&vel);
    kiln_getter_fini(&marked);
    kiln_getter_fini(&marked); /* finished twice: a no-op */
    kiln_getter_fini(NULL);    /* as kiln_query_destroy(NULL) is */
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
}

KILN_TEST(getter, an_unknown_component_fails_and_leaves_nothing_to_finish) {
    kiln_getter g;
    memset(&g, 0xab, sizeof g);
    ck_assert_int_eq(kiln_getter_init(F.w, 999, &g), KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_str_eq(kiln_world_error(F.w), "kiln_getter_init: component #999 is not registered");
    kiln_getter_fini(&g);
}

KILN_TEST(getter, out_of_memory_fails_cleanly_and_a_later_init_works) {
    spawn_at(F.w, F.pos, 1, 2);
    kiln_getter g;
    test_allocator_fail_after(&F.alloc, 0);
    ck_assert_int_eq(kiln_getter_init(F.w, F.pos, &g), KILN_ERR_OUT_OF_MEMORY);
    ck_assert_str_eq(kiln_world_error(F.w), "kiln_getter_init: out of memory");
    kiln_getter_fini(&g);
    test_allocator_fail_never(&F.alloc);
    ck_assert_int_eq(kiln_getter_init(F.w, F.pos, &g), KILN_OK);
    kiln_getter_fini(&g);
}

/* A holder may destroy its world first: fini read the freed world's allocator (ASan: a heap
 * use after free). Its block goes back through the world's hook all the same. */
KILN_TEST(getter, a_getter_finished_after_its_world_was_destroyed_frees_its_block) {
    spawn_at(F.w, F.pos, 1, 2);
    kiln_getter g;
    ck_assert_int_eq(kiln_getter_init(F.w, F.pos, &g), KILN_OK);
    int64_t blocks = F.alloc.live_blocks;
    kiln_world_destroy(F.w);
    F.w = NULL;
    ck_assert_int_eq(F.alloc.live_blocks, 1); /* the getter's */
    ck_assert_int_lt(F.alloc.live_blocks, blocks);
    kiln_getter_fini(&g);
    ck_assert_int_eq(F.alloc.live_blocks, 0);
    ck_assert_int_eq(F.alloc.bad_osize, 0);
    kiln_getter_fini(&g); /* finished: a no-op */
}

/* kiln_world_stats.bytes counts what the world holds ("Allocator" in c-api.md): a getter's
 * block is its holder's, like a snapshot's or a command buffer's, so the world's count stays
 * put while the hook's own count goes up by the block and back when the getter is finished. */
KILN_TEST(getter, a_getters_block_goes_through_the_hook_and_stays_out_of_the_worlds_bytes) {
    for (int i = 0; i < 3; i++) spawn_at(F.w, F.pos, (float)i, 0);
    kiln_world_stats before, made, finished;
    kiln_world_stats_get(F.w, &before);
    int64_t hook = F.alloc.live_bytes;
    kiln_getter g;
    ck_assert_int_eq(kiln_getter_init(F.w, F.pos, &g), KILN_OK);
    kiln_world_stats_get(F.w, &made);
    ck_assert_int_eq(F.alloc.live_bytes - hook,
                     (int64_t)((sizeof(void *) + sizeof(size_t)) * (size_t)made.archetypes)); /* the block */
    ck_assert_int_eq(made.bytes, before.bytes);
    kiln_getter_fini(&g);
    kiln_world_stats_get(F.w, &finished);
    ck_assert_int_eq(F.alloc.live_bytes, hook);
    ck_assert_int_eq(finished.bytes, before.bytes);
    ck_assert_int_eq(finished.bytes, F.alloc.live_bytes); /* the world's count is the hook's again */
}

/* Assertions are on in the test builds: a getter read after the world changed is caught. */
KILN_TEST_SIGNAL(getter, reading_through_a_getter_after_a_structural_change_aborts, SIGABRT) {
    kiln_entity e = spawn_at(F.w, F.pos, 1, 2);
    kiln_getter g;
    ck_assert_int_eq(kiln_getter_init(F.w, F.pos, &g), KILN_OK);
    ck_assert_ptr_nonnull(kiln_getter_get(&g, e));
    spawn_at(F.w, F.pos, 3, 4);
    kiln_getter_get(&g, e);
}

/* kiln_get_many over every kind of handle, shuffled and repeated past several blocks so that
 * neighbouring handles switch archetypes, kinds and blocks in every way. */
KILN_TEST(getter, get_many_answers_exactly_what_kiln_get_answers_for_every_kind_of_handle) {
    kiln_component tag = test_register_tag(F.w, "Marked");
    kiln_entity kinds[80];
    int32_t n = every_kind_of_handle(tag, kinds);
    enum { COUNT = 301 }; /* 9 blocks and a part */
    kiln_entity handles[COUNT];
    uint32_t state = 12345;
    for (int32_t i = 0; i < COUNT; i++) {
        state = state * 1103515245u + 12345u;
        handles[i] = kinds[(state >> 16) % (uint32_t)n];
    }
    const kiln_component components[] = {F.pos, F.vel, tag, 999, KILN_NO_COMPONENT};
    for (size_t c = 0; c < sizeof components / sizeof components[0]; c++) {
        const void *values[COUNT + 1];
        values[COUNT] = &values; /* past the end: must stay untouched */
        int32_t expected = 0;
        int32_t found = kiln_get_many(F.w, handles, COUNT, components[c], values);
        for (int32_t i = 0; i < COUNT; i++) {
            const void *want = kiln_get(F.w, handles[i], components[c]);
            ck_assert_msg(values[i] == want, "component %u, handle %d: %p, kiln_get %p",
                          (unsigned)components[c], (int)i, values[i], want);
            expected += want != NULL;
        }
        ck_assert_int_eq(found, expected);
        ck_assert_ptr_eq(values[COUNT], &values);
        if (components[c] == F.pos) ck_assert_int_gt(found, COUNT / 2);
        if (components[c] == F.vel) ck_assert_int_gt(found, 0);
        if (components[c] != F.pos && components[c] != F.vel) ck_assert_int_eq(found, 0);
    }
    /* a part of the array, read from an odd start */
    const void *part[7];
    ck_assert_int_eq(kiln_get_many(F.w, handles + 5, 7, F.pos, part),
                     (kiln_get(F.w, handles[5], F.pos) != NULL) +
                         (kiln_get(F.w, handles[6], F.pos) != NULL) +
                         (kiln_get(F.w, handles[7], F.pos) != NULL) +
                         (kiln_get(F.w, handles[8], F.pos) != NULL) +
                         (kiln_get(F.w, handles[9], F.pos) != NULL) +
                         (kiln_get(F.w, handles[10], F.pos) != NULL) +
                         (kiln_get(F.w, handles[11], F.pos) != NULL));
    for (int32_t i = 0; i < 7; i++) ck_assert_ptr_eq(part[i], kiln_get(F.w, handles[5 + i], F.pos));
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
}

KILN_TEST(getter, get_many_of_nothing_writes_nothing) {
    ck_assert_int_eq(kiln_get_many(F.w, NULL, 0, F.pos, NULL), 0);
    kiln_entity e = spawn_at(F.w, F.pos, 4, 5);
    const void *value = &e;
    ck_assert_int_eq(kiln_get_many(F.w, &e, 0, F.pos, &value), 0);
    ck_assert_ptr_eq(value, &e);
    ck_assert_int_eq(kiln_get_many(F.w, &e, 1, F.pos, &value), 1);
    const test_position *p = value;
    ck_assert(p->x == 4.0f && p->y == 5.0f);
}

/* Assertions are on in the test builds: a negative count is a caller's bug, caught. */
KILN_TEST_SIGNAL(getter, get_many_of_a_negative_count_aborts, SIGABRT) {
    kiln_entity e = spawn_at(F.w, F.pos, 1, 2);
    const void *value;
    kiln_get_many(F.w, &e, -1, F.pos, &value);
}

/* A shuffled list of every kind of handle, 301 long: 9 blocks of 32 and a part, so that
 * neighbouring handles switch archetypes, kinds and blocks in every way. */
static void shuffled_handles(kiln_component tag, kiln_entity *dest, int32_t count) {
    kiln_entity kinds[80];
    int32_t n = every_kind_of_handle(tag, kinds);
    uint32_t state = 777;
    for (int32_t i = 0; i < count; i++) {
        state = state * 1103515245u + 12345u;
        dest[i] = kinds[(state >> 16) % (uint32_t)n];
    }
}

KILN_TEST(getter, getter_get_many_answers_exactly_what_kiln_get_answers_for_every_kind_of_handle) {
    kiln_component tag = test_register_tag(F.w, "Marked");
    enum { COUNT = 301 };
    kiln_entity handles[COUNT];
    shuffled_handles(tag, handles, COUNT);
    const kiln_component components[] = {F.pos, F.vel, tag};
    for (size_t c = 0; c < sizeof components / sizeof components[0]; c++) {
        kiln_getter g;
        ck_assert_int_eq(kiln_getter_init(F.w, components[c], &g), KILN_OK);
        const void *values[COUNT + 1];
        values[COUNT] = &values; /* past the end: must stay untouched */
        int32_t expected = 0;
        int32_t found = kiln_getter_get_many(&g, handles, COUNT, values);
        for (int32_t i = 0; i < COUNT; i++) {
            const void *want = kiln_get(F.w, handles[i], components[c]);
            ck_assert_msg(values[i] == want, "component %u, handle %d: %p, kiln_get %p",
                          (unsigned)components[c], (int)i, values[i], want);
            ck_assert_ptr_eq(values[i], kiln_getter_get(&g, handles[i]));
            expected += want != NULL;
        }
        ck_assert_int_eq(found, expected);
        ck_assert_ptr_eq(values[COUNT], &values);
        if (components[c] == F.pos) ck_assert_int_gt(found, COUNT / 2);
        if (components[c] == F.vel) ck_assert_int_gt(found, 0);
        if (components[c] == tag) ck_assert_int_eq(found, 0);
        /* a part of the list from an odd start, ending inside a block */
        const void *part[40];
        int32_t part_found = kiln_getter_get_many(&g, handles + 5, 40, part);
        int32_t part_expected = 0;
        for (int32_t i = 0; i < 40; i++) {
            ck_assert_ptr_eq(part[i], values[5 + i]);
            part_expected += part[i] != NULL;
        }
        ck_assert_int_eq(part_found, part_expected);
        kiln_getter_fini(&g);
    }
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
}

KILN_TEST(getter, getter_get_many_of_nothing_writes_nothing) {
    kiln_entity e = spawn_at(F.w, F.pos, 4, 5);
    kiln_getter g;
    ck_assert_int_eq(kiln_getter_init(F.w, F.pos, &g), KILN_OK);
    ck_assert_int_eq(kiln_getter_get_many(&g, NULL, 0, NULL), 0);
    const void *value = &e;
    ck_assert_int_eq(kiln_getter_get_many(&g, &e, 0, &value), 0);
    ck_assert_ptr_eq(value, &e);
    ck_assert_int_eq(kiln_getter_get_many(&g, &e, 1, &value), 1);
    const test_position *p = value;
    ck_assert(p->x == 4.0f && p->y == 5.0f);
    kiln_getter_fini(&g);
}

/* Assertions are on in the test builds: a negative count is a caller's bug, caught. */
KILN_TEST_SIGNAL(getter, getter_get_many_of_a_negative_count_aborts, SIGABRT) {
    kiln_entity e = spawn_at(F.w, F.pos, 1, 2);
    kiln_getter g;
    ck_assert_int_eq(kiln_getter_init(F.w, F.pos, &g), KILN_OK);
    const void *value;
    kiln_getter_get_many(&g, &e, -1, &value);
}

/* A getter made before a despawn is stale: reading a list through it is caught as well. */
KILN_TEST_SIGNAL(getter, getter_get_many_after_a_structural_change_aborts, SIGABRT) {
    kiln_entity e[2] = {spawn_at(F.w, F.pos, 1, 2), spawn_at(F.w, F.pos, 3, 4)};
    kiln_getter g;
    ck_assert_int_eq(kiln_getter_init(F.w, F.pos, &g), KILN_OK);
    const void *values[2];
    ck_assert_int_eq(kiln_getter_get_many(&g, e, 2, values), 2);
    ck_assert_int_eq(kiln_despawn(F.w, e[1]), KILN_OK);
    kiln_getter_get_many(&g, e, 2, values);
}
