/* test_access_rows.c: Check suite for the row work of despawn and batch spawns: the last row
 * fills a despawned one in every column width with its tick and record, the record of a moved
 * last row keeps its slot's generation along every swap-remove, and a batch of fresh slots
 * crossing record pages gets one live record per handle. */
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
KILN_TEST_GROUP_WITH(moved_records, .setup = setup, .teardown = teardown, .timeout = 30);
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

/* Archetypes of one to three columns whose first or second column is neither 8 nor 16 bytes
 * wide (the plain despawn writes out those two widths and hands any other, from that column
 * on, to its out-of-line copy): the last row fills each hole with every value and tick. */
KILN_TEST(despawn_rows, the_last_row_fills_the_hole_whatever_width_comes_first) {
    kiln_component four = register_bytes("Four", 4, 4), twelve = register_bytes("Twelve", 12, 4);
    kiln_component sixteen = register_bytes("Sixteen", 16, 16);
    /* ids ascend in registration order, so each list is its archetype's column order */
    const kiln_component lists[][3] = {{four, twelve, 0}, {twelve, 0, 0}, {F.pos, four, 0},
                                       {sixteen, 0, 0}, {F.pos, F.vel, four}};
    const uint32_t sizes[][3] = {{4, 12, 0}, {12, 0, 0}, {8, 4, 0}, {16, 0, 0}, {8, 8, 4}};
    const int counts[] = {2, 1, 2, 1, 3};
    for (int l = 0; l < 5; l++) {
        kiln_entity es[ROWS];
        kiln_tick ticks[ROWS];
        for (int i = 0; i < ROWS; i++) {
            uint8_t values[3][16];
            const void *list[3];
            for (int k = 0; k < counts[l]; k++) {
                fill_value(values[k], i + l, k, sizes[l][k]);
                list[k] = values[k];
            }
            ticks[i] = kiln_tick_advance(F.w);
            ck_assert_int_eq(kiln_spawn_with(F.w, lists[l], list, counts[l], &es[i]), KILN_OK);
        }
        for (int d = 0; d < ROWS; d += 3) { /* rows 0, 3, 6 and 9 go, the last row fills each */
            ck_assert_int_eq(kiln_despawn(F.w, es[d]), KILN_OK);
            for (int i = 0; i < ROWS; i++) {
                ck_assert(kiln_is_alive(F.w, es[i]) == (i > d || i % 3 != 0));
                if (!kiln_is_alive(F.w, es[i])) continue;
                for (int k = 0; k < counts[l]; k++) {
                    uint8_t want[16];
                    fill_value(want, i + l, k, sizes[l][k]);
                    ck_assert_msg(memcmp(kiln_get(F.w, es[i], lists[l][k]), want,
                                         sizes[l][k]) == 0,
                                  "list %d, entity %d, column %d", l, i, k);
                    ck_assert_uint_eq(kiln_changed_tick(F.w, es[i], lists[l][k]), ticks[i]);
                }
            }
        }
    }
}

enum { RECYCLED = 6 };

/* RECYCLED entities with Position (x = i), each in a slot handed out again i + 1 times (at
 * generation 2 or later), in rows 0 to RECYCLED - 1 of their archetype. */
static void spawn_recycled(kiln_world *w, kiln_component pos, kiln_entity *es) {
    for (int i = 0; i < RECYCLED; i++) {
        kiln_entity e = spawn_one(w);
        uint32_t first = kiln_entity_generation(e);
        for (int k = 0; k <= i; k++) { /* the slot comes back at the next generation */
            ck_assert_int_eq(kiln_despawn(w, e), KILN_OK);
            e = spawn_one(w);
        }
        ck_assert_uint_eq(kiln_entity_generation(e), first + (uint32_t)i + 1);
        ck_assert_int_eq(kiln_add(w, e, pos, &(test_position){(float)i, 1.0f}), KILN_OK);
        es[i] = e;
    }
}

/* Each of the entities not gone answers through its handle (not through a handle of the slot's
 * earlier generation) with its own Position and the expected presence of with, and every row
 * holding a Position is the row its entity's record names (not a row past the end that still
 * holds the same bytes). */
static void assert_recycled(kiln_world *w, kiln_component pos, kiln_component with,
                            const kiln_entity *es, const bool *gone, const bool *has) {
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {pos}}, &q), KILN_OK);
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it))
        for (int32_t r = 0; r < it.count; r++)
            ck_assert_ptr_eq(kiln_get(w, it.entities[r], pos),
                             (const uint8_t *)it.columns[0] + (size_t)r * sizeof(test_position));
    kiln_query_destroy(q);
    for (int i = 0; i < RECYCLED; i++) {
        kiln_entity older = kiln_entity_make(kiln_entity_index(es[i]),
                                             kiln_entity_generation(es[i]) - 1);
        ck_assert(!kiln_is_alive(w, older));
        ck_assert_msg(kiln_is_alive(w, es[i]) == !gone[i], "entity %d", i);
        if (gone[i]) continue;
        test_assert_position(w, es[i], pos, (float)i, 1.0f);
        ck_assert_msg(kiln_has(w, es[i], with) == has[i], "entity %d", i);
    }
}

/* A swap-remove writes the moved last row's record without reading it: along a plain despawn,
 * a plain add and remove (first along a new edge, then along the cached one) and the same
 * with a move hook (the hooked despawn and the hooked move), the entity that filled the hole
 * keeps its slot's generation and its archetype. */
KILN_TEST(moved_records, a_moved_last_row_keeps_its_generation_and_archetype) {
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(F.w, &log);
    for (int hooked = 0; hooked < 2; hooked++) {
        kiln_entity es[RECYCLED];
        bool gone[RECYCLED] = {false}, has[RECYCLED] = {false};
        spawn_recycled(F.w, F.pos, es);
        if (hooked) /* every row moves through the move hook from now on */
            for (int i = 0; i < RECYCLED; i++) {
                test_owned o = test_owned_make(i + 1);
                ck_assert_int_eq(kiln_add(F.w, es[i], owned, &o), KILN_OK);
            }
        ck_assert_int_eq(kiln_despawn(F.w, es[1]), KILN_OK); /* the last row fills row 1 */
        gone[1] = true;
        assert_recycled(F.w, F.pos, F.vel, es, gone, has);
        /* rows 0 5 2 3 4: each add leaves from a row the last row then fills */
        const int adds[] = {0, 5, 4};
        for (int j = 0; j < 3; j++) {
            ck_assert_int_eq(kiln_add(F.w, es[adds[j]], F.vel, &(test_velocity){1, 2}), KILN_OK);
            has[adds[j]] = true;
            assert_recycled(F.w, F.pos, F.vel, es, gone, has);
        }
        ck_assert_int_eq(kiln_remove(F.w, es[0], F.vel, NULL), KILN_OK); /* 4 fills row 0 */
        has[0] = false;
        assert_recycled(F.w, F.pos, F.vel, es, gone, has);
        for (int i = 0; i < RECYCLED; i++)
            if (!gone[i]) ck_assert_int_eq(kiln_despawn(F.w, es[i]), KILN_OK);
    }
    ck_assert_int_eq(kiln_entity_count(F.w), 0);
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
