/* test_archetype_growth.c: Check suite for an archetype's columns growing and shrinking. Each
 * column's values and ticks grow on their own through the allocator's resize (hook-moved
 * columns through a new block), so a growth that fails part way must leave every row, value,
 * tick and byte count whole, and a block whose alignment changes must slide its rows (a hook
 * whose blocks are not 8-byte aligned asserts).
 * kiln_world_trim shrinks an archetype under a quarter of its room to twice its rows (an
 * empty one of large rows to none): the rows left keep their values and ticks, a hook-moved
 * column moves through its hook, a trim the allocator refuses changes nothing visible and is
 * tried again later, nothing is trimmed while deferred or iterating, a schedule run trims once
 * the world grew enough, propagation rebuilds after a trim, and removals themselves never trim
 * (add/remove back and forth allocates nothing). */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS and MAP_NORESERVE */
#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kiln.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"

/* Asserts call returned KILN_OK, printing the world's message otherwise. */
#define ASSERT_OK(call)                                                                      \
    do {                                                                                     \
        kiln_result r_ = (call);                                                             \
        ck_assert_msg(r_ == KILN_OK, "%s returned %s (%s)", #call, kiln_result_name(r_),     \
                      kiln_world_error(F.w));                                                \
    } while (0)

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

/* A hook whose blocks are only 4-byte aligned (from its first block, or once the world is
 * made: misaligned_fn offsets a malloc'd block by 4 once calls reach from) breaks kiln's 8-byte
 * loads and stores: instead of undefined behaviour, the allocation that returns one asserts
 * naming the contract (and world creation, in builds without assertions, returns NULL). */
typedef struct misaligned_alloc {
    int calls, from;
} misaligned_alloc;

static void *misaligned_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    misaligned_alloc *a = ud;
    uint8_t *old = NULL;
    if (ptr) old = (uint8_t *)ptr - (((uintptr_t)ptr & 7) == 4 ? 4 : 0);
    if (nsize == 0) {
        free(old);
        return NULL;
    }
    uint8_t *raw = malloc(nsize + 4);
    if (!raw) return NULL;
    uint8_t *block = raw + (a->calls++ >= a->from ? 4 : 0);
    if (ptr) {
        memcpy(block, ptr, osize < nsize ? osize : nsize);
        free(old);
    }
    return block;
}

KILN_TEST_SIGNAL(growth, a_hook_returning_4_byte_aligned_blocks_aborts_world_creation_naming_it, SIGABRT) {
    static misaligned_alloc a = {0, 0};
    test_expect_abort("the allocator hook returned a block not aligned to 8 bytes");
    kiln_world *w = kiln_world_create(&(kiln_world_desc){.alloc = misaligned_fn, .alloc_ud = &a});
    ck_assert_ptr_null(w); /* not reached with assertions on */
}

KILN_TEST_SIGNAL(growth, a_hook_misaligning_a_later_block_aborts_at_that_allocation, SIGABRT) {
    static misaligned_alloc a = {0, INT32_MAX};
    kiln_world *w = kiln_world_create(&(kiln_world_desc){.alloc = misaligned_fn, .alloc_ud = &a});
    ck_assert_ptr_nonnull(w);
    kiln_component pos = test_register_position(w);
    a.from = a.calls; /* every block from here on */
    test_expect_abort("the allocator hook returned a block not aligned to 8 bytes");
    for (int i = 0; i < 1000; i++) kiln_spawn_with(w, &pos, NULL, 1, NULL);
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

#ifdef MAP_NORESERVE
/* Blocks of 1 GiB or more are address space only (MAP_NORESERVE), so columns of rows of
 * gigabytes cost nothing while nothing writes them. */
static void *lazy_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    const size_t big = (size_t)1 << 30;
    if (nsize == 0) {
        if (ptr && osize >= big) munmap(ptr, osize);
        else free(ptr);
        return NULL;
    }
    if (nsize < big && (!ptr || osize < big)) return realloc(ptr, nsize);
    void *p = nsize < big ? malloc(nsize)
                          : mmap(NULL, nsize, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == NULL || p == MAP_FAILED) return NULL;
    if (ptr) {
        memcpy(p, ptr, osize < nsize ? osize : nsize);
        lazy_fn(ud, ptr, osize, 0);
    }
    return p;
}

static void move_nothing(void *dst, void *src, int32_t count, void *ctx) {
    (void)dst, (void)src, (void)count, (void)ctx;
}

/* Two values of nearly 2 GiB (the largest a component may be) make a row of 2^32 bytes with
 * their ticks, handle and record: counted in 32 bits it was 0, and the first growth of their
 * archetype divided by it (SIGFPE). Their move hooks write nothing, so the rows are never
 * touched. */
KILN_TEST(growth, a_row_of_two_values_near_the_size_limit_spawns) {
    if (SIZE_MAX <= UINT32_MAX) return; /* two 2 GiB values cannot fit a 32-bit address space (i386) */
    kiln_world *w = kiln_world_create(&(kiln_world_desc){.alloc = lazy_fn});
    ck_assert_ptr_nonnull(w);
    kiln_component a, b;
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = "A", .size = 2147483632u,
                                                 .align = 16, .move = move_nothing}, &a), KILN_OK);
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = "B", .size = 2147483644u,
                                                 .align = 4, .move = move_nothing}, &b), KILN_OK);
    kiln_commands *cmd = kiln_commands_create(w);
    ck_assert_ptr_nonnull(cmd);
    char unread[16] = {0}; /* the hooks never read it */
    kiln_entity ph;
    ck_assert_int_eq(kiln_commands_spawn(cmd, &ph), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, ph, a, unread), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(cmd, ph, b, unread), KILN_OK);
    kiln_result r = kiln_commands_apply(cmd, w, NULL);
    if (r == KILN_OK) { /* (a strict overcommit policy refuses even address space) */
        kiln_entity e = kiln_commands_resolve(cmd, ph);
        ck_assert(kiln_has(w, e, a) && kiln_has(w, e, b));
        kiln_query *q = NULL;
        ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {a}}, &q), KILN_OK);
        ck_assert_int_eq(kiln_query_bytes(q), (int64_t)1 << 32);
        ck_assert_int_gt(kiln_world_trim(w), 0); /* to two rows' room */
        ck_assert(kiln_has(w, e, a) && kiln_has(w, e, b));
        kiln_query_destroy(q);
    } else {
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
    }
    kiln_commands_destroy(cmd);
    kiln_world_destroy(w);
}
#endif

/* ---- trimming ----------------------------------------------------------------------- */

KILN_TEST_GROUP_WITH(trim, .setup = setup, .teardown = teardown, .timeout = 60);

typedef struct big_row {
    uint8_t bytes[8192];
} big_row;

static kiln_component register_big(kiln_world *w) {
    kiln_component id = 0;
    ASSERT_OK(kiln_component_register(w, &(kiln_component_desc){.name = "Big", .size = sizeof(big_row),
                                                                  .align = 16}, &id));
    return id;
}

static int64_t world_bytes(void) {
    kiln_world_stats st;
    kiln_world_stats_get(F.w, &st);
    return st.bytes;
}

static void spawn_big(kiln_component big, kiln_component pos, kiln_entity *es, int n) {
    for (int i = 0; i < n; i++)
        ASSERT_OK(kiln_spawn_with(F.w, (kiln_component[]){big, pos}, (const void *[]){NULL, NULL}, 2, &es[i]));
}

/* A burst of large rows spawned and despawned keeps its room until a trim, which gives all of
 * it back (what it returns is what the world's count lost); the archetype takes spawns again. */
KILN_TEST(trim, an_emptied_archetype_of_large_rows_gives_all_its_room_back) {
    kiln_component big = register_big(F.w), pos = test_register_position(F.w);
    kiln_entity seed;
    spawn_big(big, pos, &seed, 1);
    ASSERT_OK(kiln_despawn(F.w, seed));
    ck_assert_int_gt(kiln_world_trim(F.w), 0);
    int64_t before = world_bytes();
    enum { N = 2000 };
    static kiln_entity es[N];
    spawn_big(big, pos, es, N);
    for (int i = 0; i < N; i++) ASSERT_OK(kiln_despawn(F.w, es[i]));
    int64_t held = world_bytes();
    ck_assert_int_gt(held - before, (int64_t)N * (int64_t)sizeof(big_row)); /* removals kept it */
    ck_assert_int_eq(kiln_world_trim(F.w), held - world_bytes());
    ck_assert_int_le(world_bytes(), before);
    ck_assert_int_eq(kiln_world_trim(F.w), 0); /* nothing left to give */
    spawn_big(big, pos, es, 10);
    ck_assert_int_eq(kiln_entity_count(F.w), 10);
    ck_assert_int_eq(F.alloc.bad_osize, 0);
}

/* After most rows moved to a neighbour, a trim shrinks the archetype they left; the rows that
 * stay keep their values, their change ticks and a hook-moved component's owned block (moved
 * through the hook), and the rows can come back. */
KILN_TEST(trim, the_rows_left_behind_keep_their_values_and_ticks) {
    kiln_component pos = test_register_position(F.w), owned = test_register_owned(F.w, &LOG);
    kiln_component tag = test_register_tag(F.w, "Marked");
    enum { N = 4096, KEEP = 100 };
    static kiln_entity es[N];
    for (int i = 0; i < N; i++) {
        test_owned o = test_owned_make(i + 1);
        ASSERT_OK(kiln_spawn_with(F.w, (kiln_component[]){pos, owned},
                                  (const void *[]){&(test_position){(float)i, 1}, &o}, 2, &es[i]));
        if (i % 2 == 0) kiln_tick_advance(F.w);
    }
    kiln_tick ticks[KEEP];
    for (int i = 0; i < KEEP; i++) ticks[i] = kiln_changed_tick(F.w, es[i * 40], pos);
    for (int i = 0; i < N; i++)
        if (i % 40 != 0 || i / 40 >= KEEP) ASSERT_OK(kiln_add(F.w, es[i], tag, NULL));
    int64_t moved = LOG.moved;
    ck_assert_int_gt(kiln_world_trim(F.w), 0);
    ck_assert_int_eq(LOG.moved - moved, KEEP); /* each survivor's Owned, through its hook */
    for (int i = 0; i < KEEP; i++) {
        kiln_entity e = es[i * 40];
        ck_assert(!kiln_has(F.w, e, tag));
        test_assert_position(F.w, e, pos, (float)(i * 40), 1);
        const test_owned *o = kiln_get(F.w, e, owned);
        ck_assert(o && o->id == i * 40 + 1 && *o->payload == i * 40 + 1);
        ck_assert_uint_eq(kiln_changed_tick(F.w, e, pos), ticks[i]);
    }
    for (int i = 0; i < N; i++) ASSERT_OK(kiln_remove(F.w, es[i], tag, NULL)); /* and back */
    for (int i = 0; i < N; i++) {
        const test_owned *o = kiln_get(F.w, es[i], owned);
        ck_assert(o && o->id == i + 1 && *o->payload == i + 1);
    }
    ck_assert_int_eq(F.alloc.bad_osize, 0);
}

/* A hook-moved column shrinks into a new block: refused, the trim gives back what else it
 * could, every value stays as it was, and the next trim takes the rest. */
KILN_TEST(trim, a_refused_trim_changes_no_value_and_is_tried_again) {
    kiln_component pos = test_register_position(F.w), owned = test_register_owned(F.w, &LOG);
    enum { N = 1024 };
    static kiln_entity es[N];
    for (int i = 0; i < N; i++) {
        test_owned o = test_owned_make(i + 1);
        ASSERT_OK(kiln_spawn_with(F.w, (kiln_component[]){pos, owned},
                                  (const void *[]){&(test_position){(float)i, 2}, &o}, 2, &es[i]));
    }
    for (int i = 0; i < N - 10; i++) ASSERT_OK(kiln_despawn(F.w, es[i]));
    uint64_t digest = test_world_digest(F.w);
    test_allocator_fail_after(&F.alloc, 0);
    int64_t first = kiln_world_trim(F.w);
    test_allocator_fail_never(&F.alloc);
    ck_assert_int_gt(F.alloc.failures, 0);
    ck_assert_int_gt(first, 0); /* Position, the ticks and the handles shrank in place */
    ck_assert(test_world_digest(F.w) == digest);
    for (int i = N - 10; i < N; i++) {
        test_assert_position(F.w, es[i], pos, (float)i, 2);
        const test_owned *o = kiln_get(F.w, es[i], owned);
        ck_assert(o && o->id == i + 1 && *o->payload == i + 1);
    }
    ck_assert_int_gt(kiln_world_trim(F.w), 0); /* Owned's block, this time */
    ck_assert(test_world_digest(F.w) == digest);
    for (int i = 0; i < 100; i++) {
        test_owned o = test_owned_make(5000 + i);
        ASSERT_OK(kiln_spawn_with(F.w, (kiln_component[]){pos, owned},
                                  (const void *[]){&(test_position){0, 0}, &o}, 2, &es[i]));
    }
    ck_assert_int_eq(kiln_entity_count(F.w), 110);
    ck_assert_int_eq(F.alloc.bad_osize, 0);
}

/* While deferred or iterating, columns must stay where they are: a trim does nothing. */
KILN_TEST(trim, nothing_is_trimmed_while_deferred_or_iterating) {
    kiln_component big = register_big(F.w), pos = test_register_position(F.w);
    enum { N = 64 };
    kiln_entity es[N];
    spawn_big(big, pos, es, N);
    for (int i = 1; i < N; i++) ASSERT_OK(kiln_despawn(F.w, es[i]));
    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_world_trim(F.w), 0);
    ASSERT_OK(kiln_defer_end(F.w));
    kiln_query *q = NULL;
    ASSERT_OK(kiln_query_create(F.w, &(kiln_query_desc){.with = {big}}, &q));
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    const void *column = kiln_iter_column(&it, 0);
    ck_assert_int_eq(kiln_world_trim(F.w), 0);
    ck_assert_ptr_eq(kiln_iter_column(&it, 0), column);
    kiln_iter_fini(&it);
    kiln_query_destroy(q);
    ck_assert_int_gt(kiln_world_trim(F.w), 0);
}

static void noop_system(const kiln_system_ctx *ctx) { (void)ctx; }

/* A schedule run trims after its frame once the world grew by half again and 16 MiB since the
 * last trim: room rows left behind returns while the world grows elsewhere, without a call. */
KILN_TEST(trim, a_schedule_run_trims_once_the_world_grew_enough) {
    kiln_component big = register_big(F.w), pos = test_register_position(F.w);
    kiln_component vel = test_register_velocity(F.w);
    kiln_schedule *s = kiln_schedule_create(F.w, NULL);
    ck_assert_ptr_nonnull(s);
    ASSERT_OK(kiln_schedule_add(s, &(kiln_system_desc){.name = "noop", .run = noop_system}));
    enum { N = 3000 }; /* 24 MiB of Big */
    static kiln_entity es[N];
    spawn_big(big, pos, es, N);
    for (int i = 0; i < N; i++) ASSERT_OK(kiln_despawn(F.w, es[i]));
    ASSERT_OK(kiln_schedule_run(s, 0.016)); /* grew 24 MiB from nothing: trims */
    int64_t after = world_bytes();
    ck_assert_int_lt(after, (int64_t)N * (int64_t)sizeof(big_row) / 8);
    spawn_big(big, vel, es, 100); /* 0.8 MiB elsewhere: not enough to trim again */
    for (int i = 0; i < 100; i++) ASSERT_OK(kiln_despawn(F.w, es[i]));
    ASSERT_OK(kiln_schedule_run(s, 0.016));
#ifndef KL_TRIM_STRESS /* (a stress build trims after every run) */
    ck_assert_int_gt(world_bytes(), after + 100 * (int64_t)sizeof(big_row) / 2);
#endif
    kiln_schedule_destroy(s);
}

/* Removals never trim: an entity moving back and forth between two archetypes (one full, one
 * holding a row at most) makes no allocation. */
KILN_TEST(trim, add_and_remove_back_and_forth_never_allocate) {
    kiln_component pos = test_register_position(F.w), tag = test_register_tag(F.w, "Flip");
    enum { N = 1000 };
    static kiln_entity es[N];
    for (int i = 0; i < N; i++)
        ASSERT_OK(kiln_spawn_with(F.w, (kiln_component[]){pos}, (const void *[]){&(test_position){0, 0}}, 1, &es[i]));
    ASSERT_OK(kiln_add(F.w, es[0], tag, NULL));
    ASSERT_OK(kiln_remove(F.w, es[0], tag, NULL));
    int64_t allocations = F.alloc.allocations, frees = F.alloc.frees;
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < N; i++) {
            ASSERT_OK(kiln_add(F.w, es[i], tag, NULL));
            ASSERT_OK(kiln_remove(F.w, es[i], tag, NULL));
        }
    ck_assert_int_eq(F.alloc.allocations, allocations);
    ck_assert_int_eq(F.alloc.frees, frees);
}

/* Propagation keeps pointers into the transform columns between calls, rebuilt after a
 * structural change: a trim that moves the columns is one, so the next propagation writes the
 * rows where they are now (under ASan a stale pointer would be a use after free). */
KILN_TEST(trim, propagation_after_a_trim_writes_the_moved_rows) {
    kiln_transform_ids ids;
    ASSERT_OK(kiln_transform_init(F.w, &ids));
    enum { N = 1000, KEEP = 5 };
    static kiln_entity kids[N];
    kiln_entity root;
    kiln_local_transform at = {.position = {1, 2, 3}, .rotation = {0, 0, 0, 1}, .scale = {1, 1, 1}};
    ASSERT_OK(kiln_spawn_with(F.w, (kiln_component[]){ids.local}, (const void *[]){&at}, 1, &root));
    for (int i = 0; i < N; i++) {
        kiln_local_transform l = {.position = {(float)i, 0, 0}, .rotation = {0, 0, 0, 1}, .scale = {1, 1, 1}};
        ASSERT_OK(kiln_spawn_with(F.w, (kiln_component[]){ids.local, ids.parent},
                                  (const void *[]){&l, &(kiln_parent){root}}, 2, &kids[i]));
    }
    ASSERT_OK(kiln_transform_propagate(F.w, NULL));
    for (int i = KEEP; i < N; i++) ASSERT_OK(kiln_despawn(F.w, kids[i]));
    kiln_tick_advance(F.w);
    ASSERT_OK(kiln_transform_propagate(F.w, NULL)); /* rebuilt after the despawns */
    kiln_tick_advance(F.w);
    ck_assert_int_gt(kiln_world_trim(F.w), 0);
    kiln_local_transform moved = {.position = {7, 0, 0}, .rotation = {0, 0, 0, 1}, .scale = {1, 1, 1}};
    ASSERT_OK(kiln_set(F.w, kids[2], ids.local, &moved));
    kiln_tick_advance(F.w);
    ASSERT_OK(kiln_transform_propagate(F.w, NULL));
    for (int i = 0; i < KEEP; i++) {
        const kiln_world_transform *wt = kiln_get(F.w, kids[i], ids.world);
        ck_assert_ptr_nonnull(wt);
        ck_assert_float_eq(wt->matrix[3][0], (i == 2 ? 7.0f : (float)i) + 1.0f);
        ck_assert_float_eq(wt->matrix[3][1], 2.0f);
    }
}
