/* test_commands_spawn_with.c: Check suite for kiln_commands_spawn_with: what it records is what
 * kiln_commands_spawn and one kiln_commands_add per component record (values, defaults, hooks,
 * big values, placeholders), and a refused call, out of memory at any allocation included,
 * records nothing and takes no value over. */
#include <check.h>
#include <string.h>

#include "commands_fixture.h"
#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

static commands_fixture F;

static void setup(void) { commands_fixture_setup(&F); }

static void teardown(void) { commands_fixture_teardown(&F); }

KILN_TEST_GROUP_WITH(spawn_with, .setup = setup, .teardown = teardown, .timeout = 60);

/* 80 bytes: too big to sit in a command, so its value goes to the buffer's value blocks. */
typedef struct big { float f[20]; } big;

static kiln_component register_big(kiln_world *w) {
    kiln_component id;
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = "Big", .size = sizeof(big)}, &id),
                     KILN_OK);
    return id;
}

static big big_of(float base) {
    big b;
    for (int i = 0; i < 20; i++) b.f[i] = base + (float)i;
    return b;
}

/* Every kind of value in one call and in the three-call form: the same world after apply. */
KILN_TEST(spawn_with, lands_what_a_spawn_and_its_adds_land) {
    kiln_component health = register_health(F.w), bigc = register_big(F.w);
    kiln_component tag = test_register_tag(F.w, "Marked");
    kiln_entity ph[2];
    test_owned o = test_owned_make(7);
    big b = big_of(3);
    kiln_component list[6] = {F.pos, F.vel, health, F.owned, bigc, tag};
    void *values[6] = {&(test_position){1, 2}, NULL, &(int32_t){42}, &o, &b, NULL};
    ASSERT_OK(kiln_commands_spawn_with(F.cmd, list, values, 6, &ph[0]));
    ck_assert(kiln_is_placeholder(ph[0]));
    ck_assert_int_eq(o.id, -2); /* moved in through the hook */
    ck_assert_int_eq(kiln_commands_count(F.cmd), 7); /* a spawn and six adds, as the calls count */
    ASSERT_OK(kiln_commands_spawn_with(F.cmd, NULL, NULL, 0, &ph[1])); /* nothing but the spawn */
    int64_t applied = 0;
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, &applied));
    ck_assert_int_eq(applied, 8);
    kiln_entity e = kiln_commands_resolve(F.cmd, ph[0]);
    test_assert_position(F.w, e, F.pos, 1, 2);
    test_assert_velocity(F.w, e, F.vel, 0, 0);
    ck_assert_int_eq(*(const int32_t *)kiln_get(F.w, e, health), 42);
    ck_assert_int_eq(((const test_owned *)kiln_get(F.w, e, F.owned))->id, 7);
    ck_assert(memcmp(kiln_get(F.w, e, bigc), &b, sizeof b) == 0);
    ck_assert(kiln_has(F.w, e, tag));
    kiln_entity bare = kiln_commands_resolve(F.cmd, ph[1]);
    ck_assert(kiln_is_alive(F.w, bare));
    ck_assert_int_eq(kiln_world_entities(F.w, NULL, 0), 2);
}

static uint64_t digest_of(bool one_call) {
    commands_fixture f;
    commands_fixture_setup(&f);
    kiln_component health = register_health(f.w), bigc = register_big(f.w);
    for (int i = 0; i < 300; i++) {
        kiln_entity ph;
        big b = big_of((float)i);
        kiln_component list[4] = {f.pos, f.vel, bigc, health};
        void *values[4] = {&(test_position){(float)i, 1}, i % 3 ? &(test_velocity){2, (float)i} : NULL, &b,
                           &(int32_t){i}};
        int n = 1 + i % 4;
        if (one_call) {
            ck_assert_int_eq(kiln_commands_spawn_with(f.cmd, list, values, n, &ph), KILN_OK);
        } else {
            ck_assert_int_eq(kiln_commands_spawn(f.cmd, &ph), KILN_OK);
            for (int k = 0; k < n; k++) ck_assert_int_eq(kiln_commands_add(f.cmd, ph, list[k], values[k]), KILN_OK);
        }
        if (i % 50 == 49) ck_assert_int_eq(kiln_commands_apply(f.cmd, f.w, NULL), KILN_OK);
    }
    ck_assert_int_eq(kiln_commands_apply(f.cmd, f.w, NULL), KILN_OK);
    uint64_t digest = test_world_digest(f.w);
    commands_fixture_teardown(&f);
    return digest;
}

KILN_TEST(spawn_with, three_hundred_spawns_make_the_world_the_calls_one_by_one_make) {
    ck_assert(digest_of(true) == digest_of(false));
}

/* Each bad argument: the error names the call, nothing is recorded, the value stays the
 * caller's, and the batch's earlier placeholders still stand. */
KILN_TEST(spawn_with, a_refused_call_records_nothing_and_takes_no_value) {
    kiln_entity first;
    ASSERT_OK(kiln_commands_spawn(F.cmd, &first));
    ASSERT_OK(kiln_commands_add(F.cmd, first, F.pos, &(test_position){5, 5}));
    test_owned o = test_owned_make(9);
    kiln_entity ph = 12345;
    struct {
        kiln_component list[3];
        int32_t count;
        kiln_result result;
        const char *says;
    } bad[] = {
        {{F.owned, 999, F.pos}, 3, KILN_ERR_UNKNOWN_COMPONENT, "component #999 is not registered"},
        {{F.owned, KILN_NO_COMPONENT}, 2, KILN_ERR_UNKNOWN_COMPONENT, "component #0 is not registered"},
        {{F.owned, F.pos, F.owned}, 3, KILN_ERR_INVALID_ARGUMENT, "Owned is listed twice"},
        {{F.owned}, -1, KILN_ERR_INVALID_ARGUMENT, "count -1"},
        {{F.owned}, 257, KILN_ERR_INVALID_ARGUMENT, "count 257"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        void *values[3] = {&o, &(test_position){1, 1}, &o};
        ck_assert_int_eq(kiln_commands_spawn_with(F.cmd, bad[k].list, values, bad[k].count, &ph), bad[k].result);
        ck_assert_msg(strstr(kiln_commands_error(F.cmd), "kiln_commands_spawn_with: ") != NULL &&
                          strstr(kiln_commands_error(F.cmd), bad[k].says) != NULL,
                      "case %zu: %s", k, kiln_commands_error(F.cmd));
        ck_assert_int_eq(kiln_commands_count(F.cmd), 2);
        ck_assert_int_eq(o.id, 9);
        ck_assert_int_eq(ph, 12345);
    }
    ck_assert_int_eq(kiln_commands_spawn_with(F.cmd, NULL, NULL, 1, &ph), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    test_assert_position(F.w, kiln_commands_resolve(F.cmd, first), F.pos, 5, 5);
    ck_assert_int_eq(kiln_world_entities(F.w, NULL, 0), 1);
    test_owned_release(&o);
}

/* Refused at every allocation it makes, on a buffer holding commands already, on one whose
 * batch was applied and on one whose command array is one short of full (its first growth is
 * to 64): each refusal records nothing and takes no value; the try that succeeds lands
 * everything. */
KILN_TEST(spawn_with, out_of_memory_at_any_allocation_records_nothing) {
    kiln_component bigc = register_big(F.w);
    kiln_entity doomed = spawn_bare(&F);
    for (int round = 0; round < 3; round++) {
        kiln_entity before;
        ASSERT_OK(kiln_commands_spawn(F.cmd, &before));
        ASSERT_OK(kiln_commands_add(F.cmd, before, F.vel, &(test_velocity){3, 4}));
        if (round == 1) ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL)); /* the next spawn starts a batch */
        for (int k = 0; round == 2 && k < 61; k++) ASSERT_OK(kiln_commands_despawn(F.cmd, doomed));
        int64_t pending = kiln_commands_count(F.cmd);
        for (int64_t n = 0;; n++) {
            test_owned o = test_owned_make(20 + round);
            big b[3] = {big_of(1), big_of(2), big_of(3)};
            kiln_component list[3] = {F.owned, bigc, F.pos};
            void *values[3] = {&o, &b[0], &(test_position){(float)n, 0}};
            kiln_entity ph = KILN_NULL_ENTITY;
            test_allocator_fail_after(&F.alloc, n);
            kiln_result r = kiln_commands_spawn_with(F.cmd, list, values, 3, &ph);
            test_allocator_fail_never(&F.alloc);
            if (r == KILN_OK) {
                ck_assert_int_eq(o.id, -2);
                ck_assert_int_eq(kiln_commands_count(F.cmd), pending + 4);
                ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
                kiln_entity e = kiln_commands_resolve(F.cmd, ph);
                ck_assert_int_eq(((const test_owned *)kiln_get(F.w, e, F.owned))->id, 20 + round);
                ck_assert(memcmp(kiln_get(F.w, e, bigc), &b[0], sizeof b[0]) == 0);
                test_assert_position(F.w, e, F.pos, (float)n, 0);
                if (round != 1) test_assert_velocity(F.w, kiln_commands_resolve(F.cmd, before), F.vel, 3, 4);
                break;
            }
            ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
            ck_assert_int_eq(ph, KILN_NULL_ENTITY);
            ck_assert_int_eq(o.id, 20 + round); /* still the caller's */
            ck_assert_int_eq(kiln_commands_count(F.cmd), pending);
            test_owned_release(&o);
            ck_assert_int_lt(n, 50);
        }
        kiln_commands_clear(F.cmd);
    }
    ck_assert_int_eq(kiln_world_entities(F.w, NULL, 0), 6); /* two a round; doomed despawned */
}

/* A buffer whose world was destroyed refuses the call in both of its paths (the two small
 * values the usual one holds, and an Owned value), naming it, and keeps the value. */
KILN_TEST(spawn_with, a_buffer_whose_world_was_destroyed_refuses_it) {
    kiln_world *w = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(w);
    kiln_component pos = test_register_position(w), vel = test_register_velocity(w);
    test_hook_log log;
    memset(&log, 0, sizeof log);
    kiln_component owned = test_register_owned(w, &log);
    kiln_commands *cmd = kiln_commands_create(w);
    ck_assert_ptr_nonnull(cmd);
    kiln_entity ph;
    ck_assert_int_eq(kiln_commands_spawn(cmd, &ph), KILN_OK); /* so the usual path would be open */
    kiln_world_destroy(w); /* the buffer is detached */
    test_owned o = test_owned_make(5);
    kiln_entity got = 777;
    ck_assert_int_eq(kiln_commands_spawn_with(cmd, (kiln_component[]){pos, vel},
                                              (void *[]){&(test_position){1, 2}, &(test_velocity){3, 4}}, 2, &got),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_commands_error(cmd), "kiln_commands_spawn_with: the buffer's world was destroyed");
    ck_assert_int_eq(kiln_commands_spawn_with(cmd, &owned, (void *[]){&o}, 1, &got), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(o.id, 5);
    ck_assert_int_eq(got, 777);
    ck_assert_int_eq(kiln_commands_count(cmd), 0);
    test_owned_release(&o);
    kiln_commands_destroy(cmd);
}
