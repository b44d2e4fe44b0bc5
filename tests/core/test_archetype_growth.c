/* test_archetype_growth.c: Check suite for an archetype's columns growing. Each column's
 * values and ticks grow on their own through the allocator's resize (hook-moved columns
 * through a new block), so a growth that fails part way must leave every row, value, tick
 * and byte count whole, and a block whose alignment changes must slide its rows. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

static test_world_fixture F;
static test_hook_log LOG;

static void setup(void) {
    memset(&LOG, 0, sizeof LOG);
    test_world_fixture_setup(&F);
}

static void teardown(void) { test_world_fixture_teardown(&F); }

KILN_TEST_GROUP_WITH(growth, .setup = setup, .teardown = teardown, .timeout = 60);

static kiln_entity spawn_three(kiln_world *w, const kiln_component *list, int32_t i, kiln_result *r) {
    test_position p = {(float)i, (float)-i};
    test_velocity v = {(float)(i * 2), 0.5f};
    test_owned o = test_owned_make(i + 1);
    kiln_entity e = KILN_NULL_ENTITY;
    *r = kiln_spawn_with(w, list, (const void *[]){&p, &v, &o}, 3, &e);
    if (*r != KILN_OK) test_owned_release(&o);
    return e;
}

static void assert_three(kiln_world *w, const kiln_component *list, kiln_entity e, int32_t i) {
    test_assert_position(w, e, list[0], (float)i, (float)-i);
    test_assert_velocity(w, e, list[1], (float)(i * 2), 0.5f);
    const test_owned *o = kiln_get(w, e, list[2]);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(o->id, i + 1);
    ck_assert_int_eq(*o->payload, i + 1);
}

/* A spawn that grows the columns (Position, Velocity: resized; Owned: moved by its hook)
 * refused at every allocation it makes: each refusal leaves the world as it was, the next
 * try from the same state succeeds, and every block comes back with its size at the end. */
KILN_TEST(growth, a_growth_refused_at_any_allocation_leaves_the_world_whole) {
    kiln_component list[3] = {test_register_position(F.w), test_register_velocity(F.w),
                              test_register_owned(F.w, &LOG)};
    kiln_entity es[300];
    int32_t n = 0;
    int32_t grown = 0;
    kiln_result r;
    while (n < 300) {
        if (n == 8 || n == 16 || n == 64 || n == 256) { /* full: this spawn grows every array */
            uint64_t before = test_world_digest(F.w);
            for (int64_t k = 0;; k++) {
                test_allocator_fail_after(&F.alloc, k);
                kiln_entity e = spawn_three(F.w, list, n, &r);
                test_allocator_fail_never(&F.alloc);
                if (r == KILN_OK) {
                    es[n] = e;
                    ck_assert_int_ge(k, 3); /* values, ticks, entities at least */
                    break;
                }
                ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
                ck_assert_msg(test_world_digest(F.w) == before, "refused at allocation %lld: the world changed",
                              (long long)k);
                ck_assert_int_eq(kiln_entity_count(F.w), n);
                ck_assert_int_eq(F.alloc.bad_osize, 0);
            }
            grown++;
        } else {
            es[n] = spawn_three(F.w, list, n, &r);
            ck_assert_int_eq(r, KILN_OK);
        }
        n++;
    }
    ck_assert_int_eq(grown, 4);
    for (int32_t i = 0; i < n; i++) assert_three(F.w, list, es[i], i);
    ck_assert_int_eq(LOG.bad_payload, 0);
    ck_assert_int_eq(LOG.destroyed, 0); /* moved, never destroyed on the way */
    ck_assert_int_eq(F.alloc.bad_osize, 0);
}

/* A spawn whose value is read from the row of another entity of the same archetype, as its
 * columns grow: the value follows its column, a refused growth included. */
KILN_TEST(growth, a_value_read_from_the_growing_archetype_follows_its_column) {
    kiln_component pos = test_register_position(F.w), vel = test_register_velocity(F.w);
    kiln_component list[2] = {pos, vel};
    kiln_entity first;
    ck_assert_int_eq(kiln_spawn_with(F.w, list, (const void *[]){&(test_position){7, 8}, &(test_velocity){9, 10}},
                                     2, &first),
                     KILN_OK);
    for (int i = 1; i < 200; i++) {
        const void *values[2] = {kiln_get(F.w, first, pos), kiln_get(F.w, first, vel)};
        kiln_entity e;
        if (i == 64) { /* full: refuse the fifth array, the last to grow (both columns moved) */
            uint64_t before = test_world_digest(F.w);
            test_allocator_fail_after(&F.alloc, 4);
            ck_assert_int_eq(kiln_spawn_with(F.w, list, values, 2, &e), KILN_ERR_OUT_OF_MEMORY);
            test_allocator_fail_never(&F.alloc);
            ck_assert(test_world_digest(F.w) == before);
            values[0] = kiln_get(F.w, first, pos);
            values[1] = kiln_get(F.w, first, vel);
        }
        ck_assert_int_eq(kiln_spawn_with(F.w, list, values, 2, &e), KILN_OK);
        test_assert_position(F.w, e, pos, 7, 8);
        test_assert_velocity(F.w, e, vel, 9, 10);
    }
}

/* An allocator whose resized blocks land 8 bytes off where the last one did (16-byte
 * alignment, then 8, then 16...): a column's rows must slide to its aligned start. */
typedef struct shifting_alloc {
    int64_t resizes;
    int64_t live;
} shifting_alloc;

/* Blocks carry a 16-byte header holding the shift and the size. */
static void *shifting_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    shifting_alloc *a = ud;
    uint8_t *old = NULL;
    size_t old_shift = 0;
    if (ptr) {
        memcpy(&old_shift, (uint8_t *)ptr - 8, sizeof old_shift);
        old = (uint8_t *)ptr - 16 - old_shift;
    }
    if (nsize == 0) {
        free(old);
        if (ptr) a->live--;
        return NULL;
    }
    size_t shift = ptr ? (old_shift ^ 8) : 0;
    uint8_t *raw = malloc(nsize + 24);
    if (!raw) return NULL;
    uint8_t *block = raw + 16 + shift;
    memcpy(block - 8, &shift, sizeof shift);
    if (ptr) {
        memcpy(block, ptr, osize < nsize ? osize : nsize);
        free(old);
        a->resizes++;
    } else {
        a->live++;
    }
    return block;
}

KILN_TEST(growth, rows_slide_when_a_resized_block_changes_its_alignment) {
    shifting_alloc a = {0, 0};
    kiln_world *w = kiln_world_create(&(kiln_world_desc){.alloc = shifting_fn, .alloc_ud = &a});
    ck_assert_ptr_nonnull(w);
    kiln_component pos = test_register_position(w), vel = test_register_velocity(w);
    kiln_component list[2] = {pos, vel};
    kiln_entity es[1000];
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(kiln_spawn_with(w, list,
                                         (const void *[]){&(test_position){(float)i, 1}, &(test_velocity){2, (float)i}},
                                         2, &es[i]),
                         KILN_OK);
        ck_assert_int_eq((uintptr_t)kiln_get(w, es[0], pos) % 16, 0); /* the column's first row */
    }
    ck_assert_int_gt(a.resizes, 10);
    for (int i = 0; i < 1000; i++) {
        test_assert_position(w, es[i], pos, (float)i, 1);
        test_assert_velocity(w, es[i], vel, 2, (float)i);
    }
    kiln_world_destroy(w);
    ck_assert_int_eq(a.live, 0);
}

/* A world destroyed right after growths refused part way (some arrays grown, others not)
 * frees every block at the size it has: the teardown checks every size and byte. */
KILN_TEST(growth, a_world_destroyed_after_a_partial_growth_frees_every_block_at_its_size) {
    kiln_component list[3] = {test_register_position(F.w), test_register_velocity(F.w),
                              test_register_owned(F.w, &LOG)};
    kiln_result r;
    for (int32_t i = 0; i < 8; i++) {
        spawn_three(F.w, list, i, &r);
        ck_assert_int_eq(r, KILN_OK);
    }
    for (int tries = 0; tries < 3; tries++) { /* each try grows one more array, then is refused */
        test_allocator_fail_after(&F.alloc, 1);
        spawn_three(F.w, list, 8, &r);
        test_allocator_fail_never(&F.alloc);
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
    }
    ck_assert_int_eq(kiln_entity_count(F.w), 8);
    kiln_world_destroy(F.w);
    F.w = NULL;
    ck_assert_int_eq(F.alloc.bad_osize, 0);
    ck_assert_int_eq(F.alloc.live_blocks, 0);
    ck_assert_int_eq(LOG.destroyed, 8);
}

/* An allocator that logs each resize: the block it was given and the one it returned. */
typedef struct order_log {
    int32_t count;
    uintptr_t in[16], out[16];
} order_log;

static void *order_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    order_log *log = ud;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    void *block = malloc(nsize);
    if (!block || !ptr) return block;
    memcpy(block, ptr, osize < nsize ? osize : nsize);
    if (log->count < 16) {
        log->in[log->count] = (uintptr_t)ptr;
        log->out[log->count++] = (uintptr_t)block;
    }
    free(ptr);
    return block;
}

/* Each growth takes the arrays in the reverse of the order before, so the array resized
 * last (most likely the heap's last block, which the allocator can extend where it lies)
 * is resized first the next time, and each after it can extend into the room the one
 * before it left. */
KILN_TEST(growth, each_growth_takes_the_arrays_in_the_reverse_of_the_last_order) {
    order_log log = {0};
    kiln_world *w = kiln_world_create(&(kiln_world_desc){.alloc = order_fn, .alloc_ud = &log});
    ck_assert_ptr_nonnull(w);
    kiln_component list[2] = {test_register_position(w), test_register_velocity(w)};
    const void *values[2] = {&(test_position){1, 2}, &(test_velocity){3, 4}};
    uintptr_t before[16];
    int32_t growths = 0;
    for (int32_t i = 0; i < 300; i++) {
        log.count = 0;
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn_with(w, list, values, 2, &e), KILN_OK);
        if (log.count == 0) continue;
        ck_assert_int_eq(log.count, 5); /* two columns' ticks and values, the entities */
        if (growths > 0)
            for (int32_t k = 0; k < 5; k++)
                ck_assert_msg(log.in[k] == before[4 - k], "growth %d: resize %d took another array",
                              growths, k);
        memcpy(before, log.out, sizeof before);
        growths++;
    }
    ck_assert_int_eq(growths, 6); /* at 8, 16, 32, 64, 128 and 256 rows (the first allocates) */
    kiln_world_destroy(w);
}
