/* test_persist_match.c: Check suite for loading into a world whose components differ from the
 * saved ones: fields matched by name, zero for missing ones, lossless widening, clear refusals. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

static const kiln_persist_format formats[] = {KILN_PERSIST_BINARY, KILN_PERSIST_JSON};

/* A save of the fixture's populated world in format. */
static void saved_scene(kiln_persist_format format, pf_bytes *dest, kiln_entity *e) {
    pf_world a;
    pf_open(&a, false);
    pf_populate(&a);
    pf_save(a.world, format, dest);
    memcpy(e, a.e, sizeof a.e);
    pf_close(&a);
}

/* Registers everything the scene uses except Position, with the fixture's layouts. */
static void reg_rest_frozen(kiln_world *w, bool with_score, bool frozen);
static void reg_rest(kiln_world *w, bool with_score) { reg_rest_frozen(w, with_score, true); }

static void reg_rest_frozen(kiln_world *w, bool with_score, bool frozen) {
    static const kiln_field vel[] = {{"dx", KILN_TYPE_DOUBLE, 0, 0}, {"dy", KILN_TYPE_DOUBLE, 8, 0}};
    static const kiln_field target[] = {{"target", KILN_TYPE_ENTITY, 0, 0}, {"pair", KILN_TYPE_ENTITY, 8, 2},
                                        {"weight", KILN_TYPE_INT32, 24, 0}};
    static const kiln_field label[] = {{"text", KILN_TYPE_CHAR, 0, 16}};
    static const kiln_field score[] = {{"points", KILN_TYPE_INT64, 0, 0}, {"best", KILN_TYPE_ENTITY, 8, 0}};
    pf_register(w, "Velocity", 16, vel, 2);
    pf_register(w, "Target", 32, target, 3);
    pf_register(w, "Label", 16, label, 1);
    if (frozen) pf_register(w, "Frozen", 0, NULL, 0);
    if (with_score) pf_register(w, "Score", 16, score, 2);
    ck_assert_int_eq(kiln_transform_init(w, NULL), KILN_OK);
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(match);

typedef struct pos_wide { double z; double x; float y; int32_t extra; } pos_wide;

KILN_TEST_LOOP(match, fields_match_by_name_widen_losslessly_and_missing_ones_are_zero, 0, 2) {
    pf_bytes saved;
    kiln_entity e[8];
    saved_scene(formats[_i], &saved, e);
    kiln_world *w = kiln_world_create(NULL);
    /* Position now: z and x as doubles in the other order, then y, then a new field */
    static const kiln_field f[] = {{"z", KILN_TYPE_DOUBLE, 0, 0}, {"x", KILN_TYPE_DOUBLE, 8, 0},
                                   {"y", KILN_TYPE_FLOAT, 16, 0}, {"extra", KILN_TYPE_INT32, 20, 0}};
    kiln_component pos = pf_register(w, "Position", sizeof(pos_wide), f, 4);
    reg_rest(w, true);
    kiln_result r = kiln_load(w, saved.data, saved.size, NULL);
    ck_assert_msg(r == KILN_OK, "%s", kiln_world_error(w));
    const pos_wide *p = kiln_get(w, e[5], pos);
    ck_assert_ptr_nonnull(p);
    ck_assert(p->x == 5.5 && p->z == (double)(-1.0f / 8.0f) && p->y == 5 * 2.25f && p->extra == 0);
    pf_bytes_free(&saved);
    kiln_world_destroy(w);
}

/* A float NaN widened to a double keeps its sign, its payload and whether it is signalling:
 * the payload moves to the double's high mantissa bits, as a quiet NaN's does in hardware. */
KILN_TEST_LOOP(match, a_float_nan_widened_to_a_double_keeps_every_bit, 0, 2) {
    static const uint32_t floats[] = {0x7f800001u, 0xff812345u, 0x7fc00001u, 0xffc00000u, 0x7f800000u, 0x80000001u};
    static const uint64_t doubles[] = {UINT64_C(0x7ff0000020000000), UINT64_C(0xfff02468a0000000),
                                       UINT64_C(0x7ff8000020000000), UINT64_C(0xfff8000000000000),
                                       UINT64_C(0x7ff0000000000000), UINT64_C(0xb6a0000000000000)};
    enum { N = sizeof floats / sizeof floats[0] };
    kiln_world *a = kiln_world_create(NULL);
    static const kiln_field narrow[] = {{"v", KILN_TYPE_FLOAT, 0, 0}};
    kiln_component fa = pf_register(a, "Bits", 4, narrow, 1);
    kiln_entity e[N];
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(kiln_spawn(a, &e[i]), KILN_OK);
        ck_assert_int_eq(kiln_add(a, e[i], fa, &floats[i]), KILN_OK);
    }
    pf_bytes saved;
    pf_save(a, formats[_i], &saved);
    kiln_world *b = kiln_world_create(NULL);
    static const kiln_field wide[] = {{"v", KILN_TYPE_DOUBLE, 0, 0}};
    kiln_component fb = pf_register(b, "Bits", 8, wide, 1);
    ck_assert_msg(kiln_load(b, saved.data, saved.size, NULL) == KILN_OK, "%s", kiln_world_error(b));
    for (int i = 0; i < N; i++) {
        uint64_t got;
        memcpy(&got, kiln_get(b, e[i], fb), 8);
        ck_assert_msg(got == doubles[i], "float 0x%08x became 0x%016llx, not 0x%016llx", (unsigned)floats[i],
                      (unsigned long long)got, (unsigned long long)doubles[i]);
    }
    pf_bytes_free(&saved);
    kiln_world_destroy(a);
    kiln_world_destroy(b);
}

KILN_TEST_LOOP(match, a_narrowing_type_change_is_refused_naming_the_field, 0, 2) {
    pf_bytes saved;
    kiln_entity e[8];
    saved_scene(formats[_i], &saved, e);
    kiln_world *w = kiln_world_create(NULL);
    static const kiln_field f[] = {{"x", KILN_TYPE_FLOAT, 0, 0}, {"y", KILN_TYPE_FLOAT, 4, 0},
                                   {"z", KILN_TYPE_FLOAT, 8, 0}};
    pf_register(w, "Position", 12, f, 3);
    reg_rest(w, false);
    static const kiln_field narrow[] = {{"points", KILN_TYPE_INT32, 0, 0}, {"best", KILN_TYPE_ENTITY, 8, 0}};
    pf_register(w, "Score", 16, narrow, 2);
    ck_assert_int_eq(kiln_load(w, saved.data, saved.size, NULL), KILN_ERR_LAYOUT_MISMATCH);
    ck_assert_str_eq(kiln_world_error(w), "kiln_load: field 'Score.points' was int64[1] in the file and "
                                          "is int32[1] now (only a widening that loses nothing is converted)");
    ck_assert_int_eq(kiln_entity_count(w), 0);
    pf_bytes_free(&saved);
    kiln_world_destroy(w);
}

KILN_TEST_LOOP(match, an_unknown_component_fails_unless_skipped, 0, 2) {
    pf_bytes saved;
    kiln_entity e[8];
    saved_scene(formats[_i], &saved, e);
    kiln_world *w = kiln_world_create(NULL);
    static const kiln_field f[] = {{"x", KILN_TYPE_FLOAT, 0, 0}, {"y", KILN_TYPE_FLOAT, 4, 0},
                                   {"z", KILN_TYPE_FLOAT, 8, 0}};
    kiln_component pos = pf_register(w, "Position", 12, f, 3);
    reg_rest(w, false); /* no Score */
    ck_assert_int_eq(kiln_load(w, saved.data, saved.size, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_load: component 'Score' is not registered in this world "
                                          "(skip_unknown skips it)");
    ck_assert_int_eq(kiln_entity_count(w), 0);
    kiln_load_desc d = {.skip_unknown = true};
    ck_assert_int_eq(kiln_load(w, saved.data, saved.size, &d), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(w), 7);
    ck_assert(((const float *)kiln_get(w, e[2], pos))[0] == 2.5f);
    pf_bytes_free(&saved);
    kiln_world_destroy(w);
}

KILN_TEST_LOOP(match, an_unknown_field_fails_unless_skipped, 0, 2) {
    pf_bytes saved;
    kiln_entity e[8];
    saved_scene(formats[_i], &saved, e);
    kiln_world *w = kiln_world_create(NULL);
    static const kiln_field f[] = {{"x", KILN_TYPE_FLOAT, 0, 0}, {"z", KILN_TYPE_FLOAT, 4, 0}};
    kiln_component pos = pf_register(w, "Position", 8, f, 2);
    reg_rest(w, true);
    ck_assert_int_eq(kiln_load(w, saved.data, saved.size, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_load: field 'Position.y' is not in this world's component");
    kiln_load_desc d = {.skip_unknown = true};
    ck_assert_int_eq(kiln_load(w, saved.data, saved.size, &d), KILN_OK);
    const float *p = kiln_get(w, e[3], pos);
    ck_assert(p[0] == 3.5f && p[1] == -1.0f / 6.0f);
    pf_bytes_free(&saved);
    kiln_world_destroy(w);
}

KILN_TEST_LOOP(match, a_tag_that_became_data_is_a_layout_mismatch, 0, 2) {
    pf_bytes saved;
    kiln_entity e[8];
    saved_scene(formats[_i], &saved, e);
    kiln_world *w = kiln_world_create(NULL);
    static const kiln_field f[] = {{"x", KILN_TYPE_FLOAT, 0, 0}, {"y", KILN_TYPE_FLOAT, 4, 0},
                                   {"z", KILN_TYPE_FLOAT, 8, 0}};
    static const kiln_field one[] = {{"v", KILN_TYPE_INT32, 0, 0}};
    pf_register(w, "Frozen", 4, one, 1);
    pf_register(w, "Position", 12, f, 3);
    reg_rest_frozen(w, true, false);
    ck_assert_int_eq(kiln_load(w, saved.data, saved.size, NULL), KILN_ERR_LAYOUT_MISMATCH);
    ck_assert_str_eq(kiln_world_error(w), "kiln_load: component 'Frozen' is a tag on one side only");
    pf_bytes_free(&saved);
    kiln_world_destroy(w);
}

KILN_TEST_LOOP(match, groups_that_differ_only_by_a_skipped_component_share_one_archetype, 0, 2) {
    typedef struct { int32_t v; kiln_entity to; } val; /* to at 4 on i386, where a uint64_t aligns to 4 */
    static const kiln_field f[] = {{"v", KILN_TYPE_INT32, 0, 0}, {"to", KILN_TYPE_ENTITY, offsetof(val, to), 0}};
    kiln_world *a = kiln_world_create(NULL);
    kiln_component va = pf_register(a, "Value", sizeof(val), f, 2), extra = pf_register(a, "Extra", sizeof(val), f, 2);
    kiln_entity e[6];
    for (int i = 0; i < 6; i++) {
        val v = {i * 10, i ? e[i - 1] : KILN_NULL_ENTITY};
        kiln_component both[2] = {va, extra};
        ck_assert_int_eq(kiln_spawn_with(a, both, (const void *[]){&v, &v}, i % 2 ? 1 : 2, &e[i]), KILN_OK);
    }
    pf_bytes saved;
    pf_save(a, formats[_i], &saved);
    kiln_world *b = kiln_world_create(NULL);
    kiln_component vb = pf_register(b, "Value", sizeof(val), f, 2);
    kiln_load_desc d = {.skip_unknown = true};
    ck_assert_int_eq(kiln_load(b, saved.data, saved.size, &d), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(b), 6);
    for (int i = 0; i < 6; i++) {
        const val *v = kiln_get(b, e[i], vb);
        ck_assert_ptr_nonnull(v);
        ck_assert_int_eq(v->v, i * 10);
        ck_assert(v->to == (i ? e[i - 1] : KILN_NULL_ENTITY));
    }
    /* the records follow the rows: despawning moves rows and the rest stay readable */
    ck_assert_int_eq(kiln_despawn(b, e[0]), KILN_OK);
    ck_assert_int_eq(((const val *)kiln_get(b, e[5], vb))->v, 50);
    kiln_entity fresh;
    ck_assert_int_eq(kiln_spawn(b, &fresh), KILN_OK);
    ck_assert(!kiln_is_alive(b, e[0]) && kiln_is_alive(b, fresh));
    pf_bytes_free(&saved);
    kiln_world_destroy(a);
    kiln_world_destroy(b);
}
