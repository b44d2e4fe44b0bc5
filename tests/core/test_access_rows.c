/* test_access_rows.c: Check suite for the row work of despawn and batch spawns: the last row
 * fills a despawned one in every column width with its tick and record, and a batch of fresh
 * slots crossing record pages gets one live record per handle. */
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

KILN_TEST_GROUP_WITH(despawn_rows, .setup = setup, .teardown = teardown, .timeout = 30);
KILN_TEST_GROUP_WITH(batch_rows, .setup = setup, .teardown = teardown, .timeout = 60);

static kiln_component register_bytes(const char *name, uint32_t size, uint32_t align) {
    kiln_component id;
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = name,
                                                 .size = size, .align = align}, &id),
                     KILN_OK);
    return id;
}

/* Entity i's value of component k (size bytes): every byte names both. */
static void fill_value(uint8_t *dest, int i, int k, uint32_t size) {
    for (uint32_t b = 0; b < size; b++) dest[b] = (uint8_t)(i * 31 + k * 7 + b);
}

enum { WIDTHS = 6, ROWS = 12 };

/* Position and Velocity (8 bytes), then 12, 16, 4 and 24: the plain despawn copies the first
 * two in place and hands the rest, from the 12-byte column on, to its out-of-line copy. */
static void spawn_widths(kiln_component *ids, uint32_t *sizes, kiln_entity *es, kiln_tick *ticks) {
    ids[0] = F.pos, sizes[0] = 8;
    ids[1] = F.vel, sizes[1] = 8;
    ids[2] = register_bytes("Twelve", 12, 4), sizes[2] = 12;
    ids[3] = register_bytes("Sixteen", 16, 16), sizes[3] = 16;
    ids[4] = register_bytes("Four", 4, 4), sizes[4] = 4;
    ids[5] = register_bytes("TwentyFour", 24, 8), sizes[5] = 24;
    for (int i = 0; i < ROWS; i++) {
        uint8_t values[WIDTHS][24];
        const void *list[WIDTHS];
        for (int k = 0; k < WIDTHS; k++) {
            fill_value(values[k], i, k, sizes[k]);
            list[k] = values[k];
        }
        ticks[i] = kiln_tick_advance(F.w);
        ck_assert_int_eq(kiln_spawn_with(F.w, ids, list, WIDTHS, &es[i]), KILN_OK);
    }
}

/* Every entity not in gone holds its own values and spawn ticks; the gone ones are dead. */
static void assert_rows(const kiln_component *ids, const uint32_t *sizes, const kiln_entity *es,
                        const kiln_tick *ticks, const bool *gone) {
    int64_t alive = 0;
    for (int i = 0; i < ROWS; i++) {
        ck_assert(kiln_is_alive(F.w, es[i]) == !gone[i]);
        if (gone[i]) continue;
        alive++;
        for (int k = 0; k < WIDTHS; k++) {
            uint8_t want[24];
            fill_value(want, i, k, sizes[k]);
            const void *got = kiln_get(F.w, es[i], ids[k]);
            ck_assert_ptr_nonnull(got);
            ck_assert_msg(memcmp(got, want, sizes[k]) == 0, "entity %d, %u-byte value", i,
                          (unsigned)sizes[k]);
            ck_assert_uint_eq(kiln_changed_tick(F.w, es[i], ids[k]), ticks[i]);
        }
    }
    ck_assert_int_eq(kiln_entity_count(F.w), alive);
}

/* Despawns from the middle, the front and the end: each time the last row moves into the
 * hole with every value and tick, and its entity's handle still finds it. */
KILN_TEST(despawn_rows, the_last_row_fills_the_hole_in_every_column_width) {
    kiln_component ids[WIDTHS];
    uint32_t sizes[WIDTHS];
    kiln_entity es[ROWS];
    kiln_tick ticks[ROWS];
    bool gone[ROWS] = {false};
    spawn_widths(ids, sizes, es, ticks);
    kiln_tick_advance(F.w); /* a despawn stamps nothing: the moved rows keep their ticks */
    const int order[] = {5, 0, ROWS - 1, 7, 1, 2};
    for (size_t j = 0; j < sizeof order / sizeof order[0]; j++) {
        ck_assert_int_eq(kiln_despawn(F.w, es[order[j]]), KILN_OK);
        gone[order[j]] = true;
        assert_rows(ids, sizes, es, ticks, gone);
    }
    /* a despawned handle stays dead once its slot is handed out again */
    kiln_entity again = spawn_one(F.w);
    ck_assert(!kiln_is_alive(F.w, es[2]));
    ck_assert(kiln_is_alive(F.w, again));
    ck_assert_int_eq(kiln_despawn(F.w, es[2]), KILN_ERR_DEAD_ENTITY);
}

/* Freed slots first, then fresh ones from the middle of a record page across two page
 * boundaries: every handle is alive, distinct, at the spawn tick with zeroed values, and
 * despawning some of them afterwards moves the right rows. */
KILN_TEST(batch_rows, a_batch_of_fresh_slots_crossing_record_pages_makes_each_handle_live) {
    enum { BEFORE = 5000, FREED = 3, N = 9000 };
    static kiln_entity before[BEFORE], batch[N];
    for (int i = 0; i < BEFORE; i++) before[i] = spawn_at(F.w, F.pos, (float)i, 1.0f);
    for (int i = 0; i < FREED; i++) ck_assert_int_eq(kiln_despawn(F.w, before[10 * i]), KILN_OK);
    kiln_tick tick = kiln_tick_advance(F.w);
    kiln_component list[2] = {F.pos, F.vel};
    ck_assert_int_eq(kiln_spawn_batch(F.w, list, 2, N, batch), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(F.w), BEFORE - FREED + N);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(kiln_is_alive(F.w, batch[i]), "batch entity %d", i);
        if (i >= FREED) /* fresh slots: consecutive indices at their first generation */
            ck_assert_uint_eq(batch[i], kiln_entity_make(BEFORE + (uint32_t)(i - FREED), 1));
        test_assert_position(F.w, batch[i], F.pos, 0.0f, 0.0f);
        test_assert_velocity(F.w, batch[i], F.vel, 0.0f, 0.0f);
        ck_assert_uint_eq(kiln_changed_tick(F.w, batch[i], F.vel), tick);
    }
    for (int i = 0; i < FREED; i++) ck_assert(!kiln_is_alive(F.w, before[10 * i]));
    /* each handle's record names its own row: set through it, despawn, read the moved ones */
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(kiln_set(F.w, batch[i], F.pos, &(test_position){(float)i, 2.0f}), KILN_OK);
    for (int i = 0; i < N; i += 97) ck_assert_int_eq(kiln_despawn(F.w, batch[i]), KILN_OK);
    for (int i = 0; i < N; i++) {
        if (i % 97 == 0) {
            ck_assert(!kiln_is_alive(F.w, batch[i]));
            continue;
        }
        test_assert_position(F.w, batch[i], F.pos, (float)i, 2.0f);
    }
}

/* Without dest the same rows and records come to be. */
KILN_TEST(batch_rows, a_batch_without_dest_spawns_the_same_entities) {
    enum { N = 4100 };
    kiln_component list[2] = {F.pos, F.vel};
    spawn_one(F.w); /* the batch starts one record into the page */
    ck_assert_int_eq(kiln_spawn_batch(F.w, list, 2, N, NULL), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(F.w), N + 1);
    for (uint32_t i = 1; i <= N; i++) {
        kiln_entity e = kiln_entity_make(i, 1);
        ck_assert_msg(kiln_is_alive(F.w, e), "slot %u", (unsigned)i);
        test_assert_position(F.w, e, F.pos, 0.0f, 0.0f);
    }
    ck_assert(!kiln_is_alive(F.w, kiln_entity_make(N + 1, 1)));
}
