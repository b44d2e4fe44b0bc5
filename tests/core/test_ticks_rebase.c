/* test_ticks_rebase.c: Check suite for 2-byte row ticks counted from a world tick base: change
 * ticks stay exact inside the window across many rebases and only ever read newer outside it. */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "kiln_transform.h"
#include "test_registry.h"
#include "test_support.h"
#include "transform_fixture.h"

#define TK "%" PRIu64 /* a kiln_tick in a message */

/* ------------------------------------------------------------------------------------------ */
/* a world and a model of its ticks                                                           */
/* ------------------------------------------------------------------------------------------ */

#define ROWS 48

/* The world, its Position and Velocity, ROWS entities with both, and what the test knows: the
 * tick each row was last written at, and the base the world must hold (rebases happen at
 * KILN_TICK_REBASE_AT past it, to KILN_TICK_WINDOW behind the tick, iterations open or not). */
typedef struct model {
    test_allocator alloc;
    kiln_world *w;
    kiln_component pos, vel;
    kiln_query *q;
    kiln_entity e[ROWS];
    kiln_tick truth[ROWS][2];
    kiln_tick base;
    int rebases;
} model;

static model M;

static void setup(void) {
    memset(&M, 0, sizeof M);
    test_allocator_init(&M.alloc);
    M.w = test_world_create(&M.alloc);
    M.pos = test_register_position(M.w);
    M.vel = test_register_velocity(M.w);
    ck_assert_int_eq(kiln_query_create(M.w, &(kiln_query_desc){.with = {M.pos, M.vel}}, &M.q),
                     KILN_OK);
    for (int i = 0; i < ROWS; i++) {
        ck_assert_int_eq(kiln_spawn_with(M.w, (kiln_component[]){M.pos, M.vel},
                                         (const void *[]){&(test_position){(float)i, 0},
                                                          &(test_velocity){1, 1}},
                                         2, &M.e[i]),
                         KILN_OK);
        M.truth[i][0] = M.truth[i][1] = 1;
    }
}

static void teardown(void) {
    kiln_query_destroy(M.q);
    kiln_world_destroy(M.w);
    ck_assert_int_eq(M.alloc.live_bytes, 0);
    ck_assert_int_eq(M.alloc.bad_osize, 0);
}

/* Advances the world one tick and the model with it (no iteration open). */
static kiln_tick advance(void) {
    kiln_tick t = kiln_tick_advance(M.w);
    if (t - M.base >= KILN_TICK_REBASE_AT) {
        M.base = t - KILN_TICK_WINDOW;
        M.rebases++;
    }
    return t;
}

/* What a row written at truth must read: itself, or the base when it is older. */
static kiln_tick expected(kiln_tick truth) { return truth > M.base ? truth : M.base; }

/* Fails the test with the message when bad (a plain branch: Check's assertions write to a pipe
 * each time, and the model checks run millions of times). */
#define EXPECT(ok, ...) do { if (!(ok)) ck_abort_msg(__VA_ARGS__); } while (0)

/* Every row reads as the model says, through kiln_changed_tick and through an iteration
 * (kiln_iter_row_tick, kiln_iter_changed_since at and around it, tick_base); ticks no older
 * than KILN_TICK_WINDOW are exact whatever the model's base. */
static void check_rows(void) {
    kiln_tick now = kiln_tick_current(M.w);
    kiln_component comps[2] = {M.pos, M.vel};
    for (int i = 0; i < ROWS; i++)
        for (int c = 0; c < 2; c++) {
            kiln_tick got = kiln_changed_tick(M.w, M.e[i], comps[c]), truth = M.truth[i][c];
            EXPECT(got == expected(truth), "tick " TK ": row %d term %d reads " TK ", written at " TK ", base " TK,
                   now, i, c, got, truth, M.base);
            EXPECT(truth + KILN_TICK_WINDOW < now || got == truth,
                   "tick " TK ": row %d term %d written at " TK " (in the window) reads " TK, now, i, c,
                   truth, got);
            EXPECT(got >= truth, "tick " TK ": row %d term %d reads " TK ", older than " TK, now, i, c,
                   got, truth);
        }
    int seen = 0;
    kiln_iter it;
    kiln_query_iter(M.q, &it);
    while (kiln_query_next(&it)) {
        EXPECT(*it.tick_base == M.base, "tick " TK ": tick_base " TK ", the model " TK, now, *it.tick_base,
               M.base);
        for (int32_t row = 0; row < it.count; row++, seen++) {
            int i = (int)kiln_entity_index(it.entities[row]);
            EXPECT(i < ROWS && it.entities[row] == M.e[i], "an entity the test did not spawn");
            for (int c = 0; c < 2; c++) {
                kiln_tick want = expected(M.truth[i][c]);
                EXPECT(kiln_iter_row_tick(&it, c, row) == want, "tick " TK ": row %d term %d: " TK ", not " TK,
                       now, i, c, kiln_iter_row_tick(&it, c, row), want);
                EXPECT(kiln_iter_changed_since(&it, c, row, want - 1) &&
                       !kiln_iter_changed_since(&it, c, row, want),
                       "tick " TK ": row %d term %d: changed_since disagrees with " TK, now, i, c, want);
                /* never a missed change: a row written after since reads as changed */
                EXPECT(kiln_iter_changed_since(&it, c, row, M.truth[i][c] - 1),
                       "tick " TK ": row %d term %d: the change at " TK " is missed", now, i, c,
                       M.truth[i][c]);
            }
        }
    }
    ck_assert_int_eq(seen, ROWS);
}

/* Marks the rows i < ROWS_WRITTEN with i % step == phase through an iteration, term c. */
#define ROWS_WRITTEN 40 /* rows from there on are written once, at tick 1, by most tests */
static void mark_rows(int c, int step, int phase) {
    kiln_iter it;
    kiln_query_iter(M.q, &it);
    while (kiln_query_next(&it))
        for (int32_t row = 0; row < it.count; row++) {
            int i = (int)kiln_entity_index(it.entities[row]);
            if (i % step != phase || i >= ROWS_WRITTEN) continue;
            kiln_iter_mark_changed(&it, c, row);
            M.truth[i][c] = it.tick;
        }
}

/* ------------------------------------------------------------------------------------------ */
/* rebases                                                                                    */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(rebase, .setup = setup, .teardown = teardown, .timeout = 60);

KILN_TEST(rebase, change_ticks_stay_exact_in_the_window_and_never_read_older_across_many_rebases) {
    /* rows written at chosen ticks through every path that stamps: iteration marks, get_mut,
     * set, and moves (a remove and add again keeps the other column's tick) */
    uint32_t seed = 7u;
    for (kiln_tick t = 1; t < 260000;) {
        uint32_t r = lcg_next(&seed);
        int i = (int)(r % ROWS_WRITTEN);
        switch ((r >> 8) % 5) {
        case 0: mark_rows((int)(r >> 12) & 1, 7, i % 7); break;
        case 1:
            ck_assert_ptr_nonnull(kiln_get_mut(M.w, M.e[i], M.pos));
            M.truth[i][0] = t;
            break;
        case 2:
            ck_assert_int_eq(kiln_set(M.w, M.e[i], M.vel, &(test_velocity){2, 2}), KILN_OK);
            M.truth[i][1] = t;
            break;
        case 3:
            ck_assert_int_eq(kiln_remove(M.w, M.e[i], M.vel, NULL), KILN_OK);
            ck_assert_int_eq(kiln_add(M.w, M.e[i], M.vel, &(test_velocity){3, 3}), KILN_OK);
            M.truth[i][1] = t;
            break;
        default: break;
        }
        /* steps of 1 to about 5,000 ticks, some rows left untouched for 100,000 */
        int steps = (int)((r >> 16) % 4 == 0 ? (r >> 18) % 5000 : 1 + (r >> 18) % 40);
        for (int s = 0; s < steps; s++) t = advance();
        check_rows();
    }
    ck_assert_int_ge(M.rebases, 12);
    ck_assert_uint_lt(kiln_tick_current(M.w) - M.base, KILN_TICK_REBASE_AT);
}

/* Opens an iteration over M.q: its one chunk holds every row. */
static void open_all(kiln_iter *it) {
    kiln_query_iter(M.q, it);
    ck_assert(kiln_query_next(it));
    ck_assert_int_eq(it->count, ROWS);
}

/* The row of entity M.e[i] in it's chunk. */
static int32_t row_of(const kiln_iter *it, int i) {
    for (int32_t row = 0; row < it->count; row++)
        if (it->entities[row] == M.e[i]) return row;
    ck_abort_msg("entity %d is not in the chunk", i);
    return -1;
}

/* Every row, read through the open iteration it and kiln_changed_tick, is as the model says:
 * its tick or the base when that is newer, never older than its tick nor later than now, and
 * a change after any since before it is seen. */
static void check_open(const kiln_iter *it) {
    kiln_tick now = kiln_tick_current(M.w);
    kiln_component comps[2] = {M.pos, M.vel};
    EXPECT(*it->tick_base == M.base, "tick " TK ": the iteration reads base " TK ", the model " TK, now,
           *it->tick_base, M.base);
    for (int32_t row = 0; row < it->count; row++) {
        int i = (int)kiln_entity_index(it->entities[row]);
        for (int c = 0; c < 2; c++) {
            kiln_tick truth = M.truth[i][c], got = kiln_iter_row_tick(it, c, row);
            EXPECT(got == expected(truth) && got >= truth && got <= now,
                   "tick " TK ": row %d term %d written at " TK " reads " TK ", base " TK, now, i, c, truth,
                   got, M.base);
            EXPECT(kiln_changed_tick(M.w, M.e[i], comps[c]) == got, "tick " TK ": row %d term %d", now,
                   i, c);
            EXPECT(kiln_iter_changed_since(it, c, row, truth - 1) &&
                       !kiln_iter_changed_since(it, c, row, got),
                   "tick " TK ": row %d term %d: changed_since disagrees with " TK, now, i, c, got);
        }
    }
}

KILN_TEST(rebase, marks_through_an_iteration_held_open_across_rebases_read_as_its_tick_or_the_base) {
    /* the rebase no longer waits: marks through the open iterator read max(its tick, base),
     * exactly what a row written at its tick before the rebase reads */
    kiln_iter it;
    open_all(&it);
    kiln_tick opened_base = M.base;
    int late = 0, across = 0, reopened = 0;
    uint32_t seed = 11u;
    for (kiln_tick t = kiln_tick_current(M.w); t < 260000;) {
        uint32_t r = lcg_next(&seed);
        int i = (int)(r % ROWS_WRITTEN), c = (int)(r >> 8) & 1;
        uint32_t k = (r >> 9) % 256; /* a reopen now and then: some marks older than the base */
        if (k == 0) {
            kiln_iter_fini(&it);
            open_all(&it);
            opened_base = M.base;
            reopened++;
        } else if (k < 96) {
            kiln_iter_mark_changed(&it, c, row_of(&it, i));
            M.truth[i][c] = it.tick;
            late += it.tick <= M.base;               /* older than the base: reads the base */
            across += it.tick > M.base && M.base != opened_base; /* exact, after a rebase */
        } else if (k < 128) {
            ck_assert_ptr_nonnull(kiln_get_mut(M.w, M.e[i], M.pos));
            M.truth[i][0] = t;
        }
        uint32_t r2 = lcg_next(&seed); /* steps of 1 to about 5,000 ticks */
        int steps = (int)(r2 % 8 == 0 ? r2 % 5000 : 1 + r2 % 40);
        for (int s = 0; s < steps; s++) t = advance();
        check_open(&it);
    }
    kiln_iter_fini(&it);
    check_rows();
    ck_assert_int_ge(M.rebases, 12);
    ck_assert_int_gt(late, 0);
    ck_assert_int_gt(across, 0);
    ck_assert_int_gt(reopened, 0);
}

KILN_TEST(rebase, mark_rows_stamps_exactly_its_range_as_per_row_marks_would_across_rebases) {
    /* random ranges of the chunk, some through an iteration held open over rebases (the stamp
     * is then the base), checked against the model after each step; the column's latest tick
     * follows the marks as kiln_iter_mark_changed's do */
    uint32_t seed = 29u;
    int ranges = 0, empty = 0, held = 0;
    for (kiln_tick t = kiln_tick_current(M.w); t < 200000;) {
        uint32_t r = lcg_next(&seed);
        int c = (int)(r & 1);
        bool hold = (r >> 1) % 4 == 0;
        kiln_iter it;
        kiln_query_iter(M.q, &it);
        ck_assert(kiln_query_next(&it));
        ck_assert_int_eq(it.count, ROWS); /* one chunk: every row */
        int32_t a = (int32_t)((r >> 3) % (ROWS + 1)), b = (int32_t)((r >> 9) % (ROWS + 1));
        int32_t begin = a < b ? a : b, end = a < b ? b : a;
        if (hold) {
            for (int s = 0; s < 20000; s++) t = advance(); /* rebases under the open iteration */
            held++;
        }
        kiln_iter_mark_rows(&it, c, begin, end);
        for (int32_t row = begin; row < end; row++) {
            int i = (int)kiln_entity_index(it.entities[row]);
            M.truth[i][c] = it.tick;
        }
        if (end > begin)
            ck_assert_uint_ge(kiln_iter_column_tick(&it, c), it.tick);
        ranges += end > begin;
        empty += end == begin;
        kiln_iter_fini(&it);
        check_rows();
        uint32_t r2 = lcg_next(&seed);
        int steps = (int)(r2 % 8 == 0 ? r2 % 5000 : 1 + r2 % 40);
        for (int s = 0; s < steps; s++) t = advance();
    }
    ck_assert_int_ge(M.rebases, 8);
    ck_assert_int_gt(ranges, 0);
    ck_assert_int_gt(empty, 0);
    ck_assert_int_gt(held, 0);
}

KILN_TEST(rebase, a_change_seen_inside_an_open_iteration_is_not_missed_across_rebases) {
    while (kiln_tick_current(M.w) < 40000) advance();
    kiln_iter it;
    open_all(&it);
    kiln_tick since = 39999; /* a system that last ran at the tick before */
    ck_assert_ptr_nonnull(kiln_get_mut(M.w, M.e[6], M.pos));
    kiln_iter_mark_changed(&it, 1, row_of(&it, 7));
    while (kiln_tick_current(M.w) < 50000) advance(); /* one rebase, at 49,152 */
    ck_assert_int_eq(M.rebases, 1);
    ck_assert_uint_eq(*it.tick_base, 49152 - KILN_TICK_WINDOW);
    ck_assert(kiln_iter_changed_since(&it, 0, row_of(&it, 6), since));
    ck_assert(!kiln_iter_changed_since(&it, 0, row_of(&it, 6), 40000));
    ck_assert_uint_eq(kiln_iter_row_tick(&it, 1, row_of(&it, 7)), 40000);
    ck_assert(!kiln_iter_changed_since(&it, 0, row_of(&it, 45), since)); /* written at 1 */
    kiln_iter_mark_changed(&it, 0, row_of(&it, 8)); /* at the iteration's tick, in the window */
    ck_assert_uint_eq(kiln_iter_row_tick(&it, 0, row_of(&it, 8)), 40000);
    /* four more rebases: 40,000 is older than the base now, and reads as it */
    while (kiln_tick_current(M.w) < 120000) advance();
    ck_assert_int_eq(M.rebases, 5);
    ck_assert_uint_eq(*it.tick_base, M.base);
    kiln_iter_mark_changed(&it, 0, row_of(&it, 9));
    for (int i = 6; i <= 9; i++) {
        int c = i == 7;
        ck_assert_uint_eq(kiln_iter_row_tick(&it, c, row_of(&it, i)), M.base);
        ck_assert(kiln_iter_changed_since(&it, c, row_of(&it, i), since));
    }
    kiln_iter_fini(&it);
    ck_assert_uint_eq(kiln_changed_tick(M.w, M.e[9], M.pos), M.base);
    ck_assert_uint_eq(kiln_changed_tick(M.w, M.e[5], M.pos), M.base);
}

/* The column tick of the one term of a query over the archetype holding only e's components. */
static kiln_tick column_tick_of(kiln_query *q) {
    kiln_iter it;
    kiln_query_iter(q, &it);
    ck_assert(kiln_query_next(&it));
    ck_assert_int_eq(it.count, 1);
    kiln_tick t = kiln_iter_column_tick(&it, 0);
    kiln_iter_fini(&it);
    return t;
}

KILN_TEST(rebase, a_moved_row_raises_its_new_column_tick_to_its_full_tick) {
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(M.w, &log);
    kiln_component plain = test_register_tag(M.w, "Plain"), hooked = test_register_tag(M.w, "Hooked");
    test_owned o = test_owned_make(1);
    ck_assert_int_eq(kiln_add(M.w, M.e[1], owned, &o), KILN_OK);
    while (kiln_tick_current(M.w) < 60000) advance();
    ck_assert_uint_gt(M.base, 0);
    ck_assert_ptr_nonnull(kiln_get_mut(M.w, M.e[0], M.pos));
    ck_assert_ptr_nonnull(kiln_get_mut(M.w, M.e[1], M.pos));
    while (kiln_tick_current(M.w) < 60010) advance();
    /* each row moves to an archetype of its own: the plain path, then the hooked one */
    ck_assert_int_eq(kiln_add(M.w, M.e[0], plain, NULL), KILN_OK);
    ck_assert_int_eq(kiln_add(M.w, M.e[1], hooked, NULL), KILN_OK);
    kiln_query *qp, *qh;
    ck_assert_int_eq(kiln_query_create(M.w, &(kiln_query_desc){.with = {M.pos, plain}}, &qp), KILN_OK);
    ck_assert_int_eq(kiln_query_create(M.w, &(kiln_query_desc){.with = {M.pos, hooked}}, &qh), KILN_OK);
    ck_assert_uint_eq(column_tick_of(qp), 60000);
    ck_assert_uint_eq(column_tick_of(qh), 60000);
    ck_assert_uint_eq(kiln_changed_tick(M.w, M.e[0], M.pos), 60000);
    ck_assert_uint_eq(kiln_changed_tick(M.w, M.e[1], M.pos), 60000);
    kiln_query_destroy(qp);
    kiln_query_destroy(qh);
    kiln_despawn(M.w, M.e[1]); /* its owned block goes back before the allocator is checked */
}

/* ------------------------------------------------------------------------------------------ */
/* persistence                                                                                */
/* ------------------------------------------------------------------------------------------ */

static bool append(void *ud, const void *data, size_t size) {
    char **buf = ud;
    size_t *len = (size_t *)(buf + 1);
    char *grown = realloc(*buf, *len + size);
    ck_assert_ptr_nonnull(grown);
    memcpy(grown + *len, data, size);
    *buf = grown;
    *len += size;
    return true;
}

KILN_TEST(rebase, a_load_with_a_far_later_tick_rebases_and_later_writes_read_exact) {
    /* a save made at tick 300,000 (after many rebases), with rows written near its end */
    kiln_world *src = kiln_world_create(NULL);
    kiln_component spos = test_register_position(src);
    kiln_entity s;
    ck_assert_int_eq(kiln_spawn_with(src, &spos, (const void *[]){&(test_position){1, 2}}, 1, &s),
                     KILN_OK);
    while (kiln_tick_current(src) < 300000) kiln_tick_advance(src);
    ck_assert_ptr_nonnull(kiln_get_mut(src, s, spos));
    struct { char *data; size_t size; } bytes = {NULL, 0};
    for (int format = 0; format < 2; format++) {
        bytes.size = 0;
        ck_assert_int_eq(kiln_save(src, &(kiln_save_desc){.format = (kiln_persist_format)format},
                                   append, &bytes),
                         KILN_OK);
        /* the model world's rows were written at ticks up to ~2,000 */
        for (int i = 0; i < ROWS; i += 3) {
            while (kiln_tick_current(M.w) < (kiln_tick)(100 + 40 * i + 3000 * format)) advance();
            ck_assert_ptr_nonnull(kiln_get_mut(M.w, M.e[i], M.pos));
            M.truth[i][0] = kiln_tick_current(M.w);
        }
        kiln_tick before = kiln_tick_current(M.w);
        ck_assert_int_eq(kiln_load(M.w, bytes.data, bytes.size, NULL), KILN_OK);
        kiln_tick now = kiln_tick_current(M.w);
        ck_assert_uint_eq(now, format == 0 ? 300000 : before);
        if (format == 0) M.base = now - KILN_TICK_WINDOW;
        check_rows(); /* old rows read as the base: newer than they are, never older */
        ck_assert_uint_eq(kiln_changed_tick(M.w, M.e[0], M.pos), format == 0 ? M.base : M.truth[0][0]);
        /* writes after the jump read exact, and stay so across further rebases */
        ck_assert_int_eq(kiln_set(M.w, M.e[1], M.pos, &(test_position){9, 9}), KILN_OK);
        M.truth[1][0] = now;
        ck_assert_uint_eq(kiln_changed_tick(M.w, M.e[1], M.pos), now);
        for (int k = 0; k < 40000; k++) advance();
        mark_rows(1, 5, 2);
        check_rows();
    }
    free(bytes.data);
    kiln_world_destroy(src);
}

KILN_TEST(rebase, a_snapshot_restored_after_rebases_gives_back_its_ticks_and_its_base) {
    for (int k = 0; k < 70000; k++) advance();
    mark_rows(0, 4, 1);
    for (int k = 0; k < 500; k++) advance();
    mark_rows(1, 3, 0);
    kiln_snapshot *snap;
    ck_assert_int_eq(kiln_snapshot_create(M.w, &snap), KILN_OK);
    kiln_tick snap_tick = kiln_tick_current(M.w);
    model saved = M;
    check_rows();
    /* rebases after the snapshot clamp the rows it holds */
    for (int k = 0; k < 120000; k++) advance();
    ck_assert_uint_gt(M.base, saved.truth[0][1]);
    mark_rows(0, 2, 0);
    check_rows();
    ck_assert_int_eq(kiln_snapshot_restore(M.w, snap), KILN_OK);
    memcpy(M.truth, saved.truth, sizeof M.truth);
    M.base = saved.base;
    ck_assert_uint_eq(kiln_tick_current(M.w), snap_tick);
    check_rows();
    /* and the restored world goes on: writes exact, rebases from the restored base */
    ck_assert_int_eq(kiln_set(M.w, M.e[3], M.vel, &(test_velocity){4, 4}), KILN_OK);
    M.truth[3][1] = kiln_tick_current(M.w);
    for (int k = 0; k < 50000; k++) advance();
    mark_rows(0, 6, 5);
    check_rows();
    kiln_snapshot_destroy(snap);
}

/* A JSON save that only moves a world's tick (to 2^32 - 3, loaded into it). */
static const char NEAR_2_32[] = "{\"kiln\":1,\"tick\":4294967293,\"components\":[],\"entities\":[]}";

KILN_TEST(rebase, a_world_run_past_2_32_ticks_keeps_its_ticks_exact_and_saves_them) {
    /* the tick is 64 bits: a world loaded near 2^32 runs on past it (a 32-bit tick wrapped or
     * stopped there, and a save could not hold a tick past 2^31 - 1) */
    ck_assert_msg(kiln_load(M.w, NEAR_2_32, sizeof NEAR_2_32 - 1, NULL) == KILN_OK, "%s", kiln_world_error(M.w));
    ck_assert_uint_eq(kiln_tick_current(M.w), 4294967293u);
    M.base = kiln_tick_current(M.w) - KILN_TICK_WINDOW;
    check_rows(); /* rows written at tick 1 read as the base */
    for (int k = 0; k < 8; k++) {
        advance();
        mark_rows(k % 2, 3, k % 3);
        check_rows();
    }
    ck_assert_uint_eq(kiln_tick_current(M.w), (kiln_tick)UINT32_MAX + 6);
    ck_assert_uint_gt(M.truth[2][1], UINT32_MAX);
    /* a save holds the tick whole, in both formats; the world loaded from it reads the same */
    for (int format = 0; format < 2; format++) {
        struct { char *data; size_t size; } bytes = {NULL, 0};
        ck_assert_int_eq(kiln_save(M.w, &(kiln_save_desc){.format = (kiln_persist_format)format}, append, &bytes),
                         KILN_OK);
        kiln_world *w = kiln_world_create(NULL);
        kiln_component pos = test_register_position(w), vel = test_register_velocity(w);
        ck_assert_msg(kiln_load(w, bytes.data, bytes.size, NULL) == KILN_OK, "%s", kiln_world_error(w));
        ck_assert_uint_eq(kiln_tick_current(w), kiln_tick_current(M.w));
        ck_assert_uint_eq(kiln_world_hash(w), kiln_world_hash(M.w));
        /* (a save holds no row ticks) a write there reads at its tick, past 2^32 */
        kiln_tick_advance(w);
        ck_assert_int_eq(kiln_set(w, M.e[5], vel, &(test_velocity){2, 2}), KILN_OK);
        ck_assert_uint_eq(kiln_changed_tick(w, M.e[5], vel), kiln_tick_current(M.w) + 1);
        ck_assert_uint_lt(kiln_changed_tick(w, M.e[5], pos), kiln_tick_current(M.w) + 1);
        kiln_world_destroy(w);
        free(bytes.data);
    }
    /* and it goes on: rebases past 2^32, writes exact */
    for (int k = 0; k < 70000; k++) advance();
    mark_rows(0, 2, 1);
    check_rows();
    ck_assert_int_ge(M.rebases, 1);
}

/* ------------------------------------------------------------------------------------------ */
/* transform propagation                                                                      */
/* ------------------------------------------------------------------------------------------ */

static scene S;

static void scene_setup(void) { scene_open(&S); }

static void scene_teardown(void) { scene_close(&S); }

KILN_TEST_GROUP_WITH(propagation, .setup = scene_setup, .teardown = scene_teardown, .timeout = 60);

/* Moves node pick (when it has a local transform) in a tick of its own and propagates in the
 * next: exactly pick's subtree is computed and stamped at that tick, and the scene matches. */
static void move_and_check(node *nodes, int n, const kiln_entity *h, int pick, int round) {
    if (!nodes[pick].has_local) return;
    kiln_transform_propagate_stats stats;
    kiln_tick_advance(S.world);
    nodes[pick].local.position[round % 3] += 1.5f;
    ck_assert_int_eq(kiln_set(S.world, h[pick], S.ids.local, &nodes[pick].local), KILN_OK);
    kiln_tick t = kiln_tick_advance(S.world);
    propagate_ok(&S, &stats);
    int inside = 0;
    for (int i = 0; i < n; i++) {
        if (!nodes[i].has_local) continue;
        bool in = in_subtree(nodes, i, pick);
        inside += in;
        ck_assert_msg((kiln_changed_tick(S.world, h[i], S.ids.world) == t) == in,
                      "round %d (tick " TK "): node %d of pick %d", round, t, i, pick);
    }
    ck_assert_int_eq(stats.computed, inside);
    ck_assert_int_eq(stats.updated, inside);
    assert_scene_matches_model(&S, nodes, n, h);
}

KILN_TEST(propagation, unchanged_rows_stay_skipped_and_changed_ones_found_across_rebases) {
    static node nodes[60];
    kiln_entity h[60];
    make_tree(nodes, 60, 5u);
    build_in_order(&S, nodes, 60, h);
    propagate_ok(&S, NULL); /* adds the WorldTransforms at this tick: seen once more next time */
    kiln_tick_advance(S.world);
    propagate_ok(&S, NULL);
    for (int round = 0; round < 12; round++) {
        /* 20,000 ticks of nothing: rebases happen, and the last propagation stays inside the
         * window (so it can tell rows apart exactly) */
        for (int k = 0; k < 20000; k++) kiln_tick_advance(S.world);
        kiln_transform_propagate_stats stats;
        propagate_ok(&S, &stats);
        ck_assert_int_eq(stats.computed, 0);
        ck_assert_int_eq(stats.updated, 0);
        move_and_check(nodes, 60, h, (round * 7 + 3) % 60, round);
    }
}

KILN_TEST(propagation, a_world_run_past_2_32_ticks_propagates_changed_rows_only) {
    static node nodes[40];
    kiln_entity h[40];
    make_tree(nodes, 40, 11u);
    build_in_order(&S, nodes, 40, h);
    propagate_ok(&S, NULL);
    ck_assert_msg(kiln_load(S.world, NEAR_2_32, sizeof NEAR_2_32 - 1, NULL) == KILN_OK, "%s",
                  kiln_world_error(S.world));
    propagate_ok(&S, NULL); /* the jump reads every row as changed at the base: once */
    kiln_tick_advance(S.world);
    for (int round = 0; round < 10; round++) {
        kiln_transform_propagate_stats stats;
        propagate_ok(&S, &stats);
        ck_assert_int_eq(stats.computed, 0);
        move_and_check(nodes, 40, h, (round * 11 + 2) % 40, round);
    }
    ck_assert_uint_gt(kiln_tick_current(S.world), UINT32_MAX);
}
