/* test_access_layouts.c: Check suite for the row move of kiln_add and kiln_remove over every
 * archetype layout: each set of up to six value columns (the moves of up to three shared
 * columns are written out, more go through a loop) and a tag, with the added or removed
 * component at each place in the column order, from a middle row (the last row fills the
 * hole) and from the last row. Values, change ticks, the records of the moved entity and of
 * the row that filled its hole, and the columns' latest ticks are checked after every move. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

enum {
    KINDS = 7,    /* six value components, then a tag */
    ENTITIES = 5, /* rows per archetype: middle rows and the last one both move */
    VALUE_MAX = 16,
};

static const size_t kind_size[KINDS] = {8, 4, 16, 12, 8, 2, 0};

/* What each entity should hold: presence, value bytes and change tick per kind. */
typedef struct layout_model {
    kiln_world *w;
    kiln_component id[KINDS];
    kiln_entity e[ENTITIES];
    bool has[ENTITIES][KINDS];
    uint8_t value[ENTITIES][KINDS][VALUE_MAX];
    kiln_tick tick[ENTITIES][KINDS];
} layout_model;

static void fill_value(uint8_t *bytes, int entity, int kind, int salt) {
    for (int k = 0; k < VALUE_MAX; k++) bytes[k] = (uint8_t)(entity * 31 + kind * 7 + k + salt);
}

/* Every entity's values, ticks and presence match the model (kiln_get reads through the
 * entity's record, so a stale record reads another row's bytes). */
static void check_entities(const layout_model *m) {
    for (int i = 0; i < ENTITIES; i++) {
        for (int c = 0; c < KINDS; c++) {
            ck_assert_int_eq(kiln_has(m->w, m->e[i], m->id[c]), m->has[i][c]);
            if (!m->has[i][c] || kind_size[c] == 0) continue; /* a tag has no tick */
            ck_assert_uint_eq(kiln_changed_tick(m->w, m->e[i], m->id[c]), m->tick[i][c]);
            const void *got = kiln_get(m->w, m->e[i], m->id[c]);
            ck_assert_ptr_nonnull(got);
            ck_assert_mem_eq(got, m->value[i][c], kind_size[c]);
        }
    }
}

/* Each value column's latest tick covers every row's tick in it (queries skip chunks by it). */
static void check_column_ticks(const layout_model *m) {
    for (int c = 0; c < KINDS - 1; c++) {
        kiln_query *q;
        ck_assert_int_eq(kiln_query_create(m->w, &(kiln_query_desc){.with = {m->id[c]}}, &q),
                         KILN_OK);
        kiln_iter it;
        kiln_query_iter(q, &it);
        while (kiln_query_next(&it))
            for (int32_t r = 0; r < it.count; r++)
                ck_assert_uint_le(kiln_iter_row_tick(&it, 0, r), kiln_iter_column_tick(&it, 0));
        kiln_iter_fini(&it);
        kiln_query_destroy(q);
    }
}

/* A world with the kinds registered in order (so ids, and columns, sort in that order) and
 * ENTITIES entities holding the kinds of mask, entity i written at its own tick. */
static void layout_setup(layout_model *m, unsigned mask) {
    memset(m, 0, sizeof *m);
    m->w = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(m->w);
    for (int c = 0; c < KINDS; c++) {
        char name[16];
        snprintf(name, sizeof name, "Kind%d", c);
        ck_assert_int_eq(kiln_component_register(m->w, &(kiln_component_desc){.name = name,
                                                     .size = kind_size[c]}, &m->id[c]),
                         KILN_OK);
    }
    for (int i = 0; i < ENTITIES; i++) {
        kiln_component list[KINDS];
        const void *values[KINDS];
        int32_t n = 0;
        kiln_tick now = kiln_tick_advance(m->w);
        for (int c = KINDS - 1; c >= 0; c--) { /* listed in reverse: the order is free */
            if (!(mask & 1u << c)) continue;
            m->has[i][c] = true;
            m->tick[i][c] = now;
            fill_value(m->value[i][c], i, c, 0);
            list[n] = m->id[c];
            values[n++] = kind_size[c] ? m->value[i][c] : NULL;
        }
        ck_assert_int_eq(kiln_spawn_with(m->w, list, values, n, &m->e[i]), KILN_OK);
    }
}

/* Adds kind to the entities in order (with a value, or zeroes when salt is 0), then removes
 * it in another order, a tick apart, checking everything after each move. */
static void add_then_remove(layout_model *m, int kind, int salt) {
    static const int add_order[ENTITIES] = {1, 4, 0, 3, 2};
    static const int remove_order[ENTITIES] = {3, 0, 2, 4, 1};
    for (int k = 0; k < ENTITIES; k++) {
        int i = add_order[k];
        kiln_tick now = kiln_tick_advance(m->w);
        uint8_t value[VALUE_MAX] = {0};
        if (salt) fill_value(value, i, kind, salt);
        const void *given = salt && kind_size[kind] ? value : NULL; /* a tag takes none */
        ck_assert_int_eq(kiln_add(m->w, m->e[i], m->id[kind], given), KILN_OK);
        m->has[i][kind] = true;
        m->tick[i][kind] = now;
        memcpy(m->value[i][kind], value, sizeof value);
        check_entities(m);
    }
    check_column_ticks(m);
    for (int k = 0; k < ENTITIES; k++) {
        int i = remove_order[k];
        kiln_tick_advance(m->w);
        bool removed = false;
        ck_assert_int_eq(kiln_remove(m->w, m->e[i], m->id[kind], &removed), KILN_OK);
        ck_assert(removed);
        m->has[i][kind] = false;
        check_entities(m);
    }
    check_column_ticks(m);
}

/* Every layout of the seven kinds, both ways: 2-3 s under ASan, past Check's 4 s default on a busy
 * machine (a CI run timed out). */
KILN_TEST_GROUP_WITH(layouts, .timeout = 60);

KILN_TEST(layouts, add_and_remove_move_every_layout_with_values_ticks_and_records) {
    for (unsigned mask = 0; mask < 1u << KINDS; mask++) {
        for (int kind = 0; kind < KINDS; kind++) {
            if (mask & 1u << kind) continue;
            layout_model m;
            layout_setup(&m, mask);
            add_then_remove(&m, kind, 0);  /* the first moves cache the edges: general path */
            add_then_remove(&m, kind, 77); /* along the cached edges, a value to write */
            kiln_world_destroy(m.w);
        }
    }
}

KILN_TEST(layouts, a_removed_kind_leaves_the_others_in_place_in_every_layout) {
    /* the removed component present from the start: it sits at each place among the others */
    for (unsigned mask = 1; mask < 1u << KINDS; mask++) {
        for (int kind = 0; kind < KINDS; kind++) {
            if (!(mask & 1u << kind)) continue;
            layout_model m;
            layout_setup(&m, mask);
            for (int round = 0; round < 2; round++) {
                for (int i = ENTITIES - 1; i >= 0; i -= 2) { /* the last row, then middle ones */
                    kiln_tick_advance(m.w);
                    ck_assert_int_eq(kiln_remove(m.w, m.e[i], m.id[kind], NULL), KILN_OK);
                    m.has[i][kind] = false;
                    check_entities(&m);
                }
                for (int i = ENTITIES - 1; i >= 0; i -= 2) {
                    kiln_tick now = kiln_tick_advance(m.w);
                    fill_value(m.value[i][kind], i, kind, round + 1);
                    const void *given = kind_size[kind] ? m.value[i][kind] : NULL;
                    ck_assert_int_eq(kiln_add(m.w, m.e[i], m.id[kind], given), KILN_OK);
                    m.has[i][kind] = true;
                    m.tick[i][kind] = now;
                    check_entities(&m);
                }
                check_column_ticks(&m);
            }
            kiln_world_destroy(m.w);
        }
    }
}

KILN_TEST(layouts, a_value_added_as_null_along_a_cached_edge_takes_the_defaults) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component pos = test_register_position(w), health;
    static const int32_t full = 100;
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = "Health",
                         .size = sizeof full, .defaults = &full}, &health),
                     KILN_OK);
    kiln_entity e[3];
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(kiln_spawn_with(w, &pos, (const void *[]){&(test_position){1, 2}}, 1,
                                         &e[i]),
                         KILN_OK);
        ck_assert_int_eq(kiln_add(w, e[i], health, i == 0 ? &(int32_t){5} : NULL), KILN_OK);
    }
    ck_assert_int_eq(*(const int32_t *)kiln_get(w, e[0], health), 5);
    ck_assert_int_eq(*(const int32_t *)kiln_get(w, e[1], health), 100);
    ck_assert_int_eq(*(const int32_t *)kiln_get(w, e[2], health), 100);
    kiln_world_destroy(w);
}

KILN_TEST(layouts, a_despawn_fills_its_hole_with_the_last_row_in_every_layout) {
    static const int order[ENTITIES] = {1, 4, 0, 3, 2}; /* middle rows, the last, the first */
    for (unsigned mask = 0; mask < 1u << KINDS; mask++) {
        layout_model m;
        layout_setup(&m, mask);
        for (int k = 0; k < ENTITIES; k++) {
            int i = order[k];
            kiln_tick_advance(m.w);
            ck_assert_int_eq(kiln_despawn(m.w, m.e[i]), KILN_OK);
            ck_assert(!kiln_is_alive(m.w, m.e[i]));
            memset(m.has[i], 0, sizeof m.has[i]);
            check_entities(&m);
        }
        check_column_ticks(&m);
        kiln_world_destroy(m.w);
    }
}

KILN_TEST(layouts, a_despawn_moves_every_column_of_a_row_of_many_eight_byte_values) {
    enum { COLUMNS = 5, ROWS = 6 };
    kiln_world *w = kiln_world_create(NULL);
    kiln_component ids[COLUMNS];
    for (int c = 0; c < COLUMNS; c++) {
        char name[16];
        snprintf(name, sizeof name, "Wide%d", c);
        ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = name, .size = 8},
                                                 &ids[c]),
                         KILN_OK);
    }
    kiln_entity e[ROWS];
    uint64_t value[ROWS][COLUMNS];
    kiln_tick tick[ROWS];
    for (int i = 0; i < ROWS; i++) {
        const void *values[COLUMNS];
        tick[i] = kiln_tick_advance(w);
        for (int c = 0; c < COLUMNS; c++) {
            value[i][c] = (uint64_t)(i + 1) * 0x0101010101010101u + (uint64_t)c;
            values[c] = &value[i][c];
        }
        ck_assert_int_eq(kiln_spawn_with(w, ids, values, COLUMNS, &e[i]), KILN_OK);
    }
    bool alive[ROWS] = {true, true, true, true, true, true};
    static const int order[ROWS] = {0, 2, 5, 1, 4, 3};
    for (int k = 0; k < ROWS; k++) {
        kiln_tick_advance(w);
        ck_assert_int_eq(kiln_despawn(w, e[order[k]]), KILN_OK);
        alive[order[k]] = false;
        for (int i = 0; i < ROWS; i++) {
            ck_assert_int_eq(kiln_is_alive(w, e[i]), alive[i]);
            for (int c = 0; alive[i] && c < COLUMNS; c++) {
                const uint64_t *got = kiln_get(w, e[i], ids[c]);
                ck_assert_ptr_nonnull(got);
                ck_assert_uint_eq(*got, value[i][c]);
                ck_assert_uint_eq(kiln_changed_tick(w, e[i], ids[c]), tick[i]);
            }
        }
    }
    kiln_world_destroy(w);
}
