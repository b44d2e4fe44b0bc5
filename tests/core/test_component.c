/* test_component.c: Check suite for component registration, lookup, layout and reflection.
 * A name maps to one layout for the world's life; every desc the caller passes is copied. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <check.h>
#include <ctype.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* An empty world on the counting allocator (test_support.h), made afresh around every test of a
 * group using it; teardown asserts every byte came back. */
static test_world_fixture F;

static void setup(void) { test_world_fixture_setup(&F); }

static void teardown(void) { test_world_fixture_teardown(&F); }

static bool contains_ignoring_case(const char *haystack, const char *needle) {
    size_t n = strlen(needle);
    for (const char *p = haystack; *p != '\0'; p++) {
        size_t i = 0;
        while (i < n && p[i] != '\0' &&
               tolower((unsigned char)p[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n) return true;
    }
    return false;
}

static kiln_result register_desc(kiln_world *world, kiln_component_desc desc,
                                 kiln_component *dest) {
    return kiln_component_register(world, &desc, dest);
}

/* Registers desc, expecting failure with code; checks the world did not change. */
static void expect_register_fails(kiln_world *world, kiln_component_desc desc,
                                  kiln_result code) {
    int32_t before = kiln_component_count(world);
    kiln_world_clear_error(world);
    kiln_component id = 4242;
    ck_assert_int_eq(kiln_component_register(world, &desc, &id), code);
    ck_assert_int_eq(kiln_component_count(world), before);
    ck_assert_str_ne(kiln_world_error(world), "");
    if (desc.name != NULL && desc.name[0] != '\0' && strlen(desc.name) <= KILN_MAX_NAME) {
        kiln_component existing = kiln_component_lookup(world, desc.name);
        if (code != KILN_ERR_LAYOUT_MISMATCH) ck_assert_uint_eq(existing, KILN_NO_COMPONENT);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* register / lookup / info                                                                   */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(register, .setup = setup, .teardown = teardown);

KILN_TEST(register, register_hands_out_ids_from_one_upward) {
    ck_assert_int_eq(kiln_component_count(F.w), 0);
    kiln_component pos = test_register_position(F.w);
    kiln_component vel = test_register_velocity(F.w);
    kiln_component tag = test_register_tag(F.w, "Frozen");
    ck_assert_uint_eq(pos, 1);
    ck_assert_uint_eq(vel, 2);
    ck_assert_uint_eq(tag, 3);
    ck_assert_int_eq(kiln_component_count(F.w), 3);
}

KILN_TEST(register, lookup_finds_a_registered_name_and_nothing_else) {
    kiln_component pos = test_register_position(F.w);
    kiln_component vel = test_register_velocity(F.w);
    ck_assert_uint_eq(kiln_component_lookup(F.w, "Position"), pos);
    ck_assert_uint_eq(kiln_component_lookup(F.w, "Velocity"), vel);
    ck_assert_uint_eq(kiln_component_lookup(F.w, "Pos"), KILN_NO_COMPONENT);
    ck_assert_uint_eq(kiln_component_lookup(F.w, "PositionX"), KILN_NO_COMPONENT);
    ck_assert_uint_eq(kiln_component_lookup(F.w, ""), KILN_NO_COMPONENT);
}

/* A name longer than any is none, and is not read to its end: a script's 24 MB string was
 * measured and hashed at every look-up. The name here runs up to an unreadable page, with no
 * NUL before it: reading past KILN_MAX_NAME + 1 bytes faults. */
KILN_TEST(register, lookup_reads_no_further_than_the_longest_name) {
    test_register_position(F.w);
    long page = sysconf(_SC_PAGESIZE);
    char *block = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(block, MAP_FAILED);
    ck_assert_int_eq(mprotect(block + page, (size_t)page, PROT_NONE), 0);
    char *name = block + page - 100;
    memset(name, 'P', 100);
    ck_assert_uint_eq(kiln_component_lookup(F.w, name), KILN_NO_COMPONENT);
    ck_assert_int_eq(kiln_event_lookup(F.w, name).id, 0);
    munmap(block, (size_t)page * 2);
}

KILN_TEST(register, info_describes_the_registered_component) {
    test_hook_log log = {0};
    kiln_component pos = test_register_position(F.w);
    kiln_component owned = test_register_owned(F.w, &log);
    kiln_component_info info;
    ck_assert(kiln_component_info_get(F.w, pos, &info));
    ck_assert_uint_eq(info.id, pos);
    ck_assert_str_eq(info.name, "Position");
    ck_assert_uint_eq(info.size, sizeof(test_position));
    ck_assert_uint_eq(info.align, alignof(test_position));
    ck_assert_uint_eq(info.stride, sizeof(test_position));
    ck_assert_int_eq(info.field_count, 2);
    ck_assert(!info.has_destroy);
    ck_assert(!info.has_move);
    ck_assert(kiln_component_info_get(F.w, owned, &info));
    ck_assert_str_eq(info.name, "Owned");
    ck_assert(info.has_destroy);
    ck_assert(info.has_move);
}

KILN_TEST(register, info_of_unknown_id_returns_false_and_leaves_dest_alone) {
    test_register_position(F.w);
    kiln_component_info info, untouched;
    memset(&info, 0x5a, sizeof info);
    memcpy(&untouched, &info, sizeof info);
    ck_assert(!kiln_component_info_get(F.w, KILN_NO_COMPONENT, &info));
    ck_assert(!kiln_component_info_get(F.w, 2, &info));
    ck_assert(!kiln_component_info_get(F.w, 100000, &info));
    ck_assert_mem_eq(&info, &untouched, sizeof info);
}

KILN_TEST(register, stride_is_size_rounded_up_to_alignment) {
    static const struct {
        size_t size, align, want_align, want_stride;
    } cases[] = {
        {12, 0, 4, 12},  {24, 0, 8, 24},  {48, 0, 16, 48}, {7, 0, 1, 7},  {6, 0, 2, 6},
        {64, 0, 16, 64}, {6, 4, 4, 8},    {3, 2, 2, 4},    {1, 16, 16, 16}, {8, 1, 1, 8},
        {20, 8, 8, 24},  {0, 0, 1, 0},
    };
    kiln_world *w = kiln_world_create(NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "Layout%zu", i);
        kiln_component id;
        ck_assert_int_eq(register_desc(w, (kiln_component_desc){.name = name,
                                                                .size = cases[i].size,
                                                                .align = cases[i].align},
                                       &id),
                         KILN_OK);
        kiln_component_info info;
        ck_assert(kiln_component_info_get(w, id, &info));
        ck_assert_msg(info.size == cases[i].size && info.align == cases[i].want_align &&
                          info.stride == cases[i].want_stride,
                      "size %zu align %zu: got align %zu stride %zu, want align %zu stride %zu",
                      cases[i].size, cases[i].align, info.align, info.stride, cases[i].want_align,
                      cases[i].want_stride);
    }
    kiln_world_destroy(w);
}

KILN_TEST(register, registering_an_identical_desc_again_returns_the_same_id) {
    test_hook_log log = {0};
    kiln_component pos = test_register_position(F.w);
    kiln_component owned = test_register_owned(F.w, &log);
    kiln_component again;
    ck_assert_int_eq(register_desc(F.w, test_position_desc(), &again), KILN_OK);
    ck_assert_uint_eq(again, pos);
    ck_assert_int_eq(register_desc(F.w, test_owned_desc(&log), &again), KILN_OK);
    ck_assert_uint_eq(again, owned);
    ck_assert_int_eq(kiln_component_count(F.w), 2);
}

KILN_TEST(register, identical_fields_match_by_content_not_by_pointer) {
    kiln_component pos = test_register_position(F.w);
    char x[] = "x", y[] = "y";
    kiln_field fields[2] = {
        {.name = x, .type = KILN_TYPE_FLOAT, .offset = 0},
        {.name = y, .type = KILN_TYPE_FLOAT, .offset = 4},
    };
    kiln_component_desc desc = test_position_desc();
    desc.fields = fields;
    kiln_component again;
    ck_assert_int_eq(kiln_component_register(F.w, &desc, &again), KILN_OK);
    ck_assert_uint_eq(again, pos);
}

/* Registers desc again, expecting a layout mismatch whose message names desc and says why. */
static void expect_mismatch(kiln_world *w, kiln_component_desc desc, const char *why) {
    kiln_component_info before, after;
    kiln_component existing = kiln_component_lookup(w, desc.name);
    ck_assert(kiln_component_info_get(w, existing, &before));
    expect_register_fails(w, desc, KILN_ERR_LAYOUT_MISMATCH);
    const char *msg = kiln_world_error(w);
    ck_assert_msg(strstr(msg, desc.name) != NULL, "message \"%s\" does not name %s", msg,
                  desc.name);
    ck_assert_msg(contains_ignoring_case(msg, "layout") || contains_ignoring_case(msg, "mismatch"),
                  "message \"%s\" does not say the layout differs", msg);
    ck_assert_msg(strstr(msg, why) != NULL, "message \"%s\" does not say \"%s\"", msg, why);
    ck_assert_uint_eq(kiln_component_lookup(w, desc.name), existing);
    ck_assert(kiln_component_info_get(w, existing, &after));
    ck_assert_uint_eq(after.size, before.size);
    ck_assert_uint_eq(after.align, before.align);
    ck_assert_int_eq(after.field_count, before.field_count);
    ck_assert_int_eq(after.has_destroy, before.has_destroy);
}

KILN_TEST(register, registering_a_name_with_another_layout_is_a_layout_mismatch) {
    test_hook_log log = {0};
    test_register_position(F.w);
    test_register_owned(F.w, &log);

    kiln_component_desc d = test_position_desc();
    d.size = 12;
    expect_mismatch(F.w, d, "registered with 8 bytes, given 12");

    d = test_position_desc();
    d.align = 8;
    expect_mismatch(F.w, d, "registered aligned to 4, given 8");

    d = test_position_desc();
    d.field_count = 1;
    expect_mismatch(F.w, d, "registered with 2 fields, given 1");

    d = test_position_desc();
    d.fields = NULL;
    d.field_count = 0;
    expect_mismatch(F.w, d, "registered with 2 fields, given 0");

    kiln_field swapped[2] = {
        {.name = "y", .type = KILN_TYPE_FLOAT, .offset = 0},
        {.name = "x", .type = KILN_TYPE_FLOAT, .offset = 4},
    };
    d = test_position_desc();
    d.fields = swapped;
    expect_mismatch(F.w, d, "field 0 is 'x' float[1] at offset 0, given 'y' float[1] at offset 0");

    kiln_field ints[2] = {
        {.name = "x", .type = KILN_TYPE_INT32, .offset = 0},
        {.name = "y", .type = KILN_TYPE_INT32, .offset = 4},
    };
    d = test_position_desc();
    d.fields = ints;
    expect_mismatch(F.w, d, "field 0 is 'x' float[1] at offset 0, given 'x' int32[1] at offset 0");

    kiln_field renamed[2] = {
        {.name = "x", .type = KILN_TYPE_FLOAT, .offset = 0},
        {.name = "z", .type = KILN_TYPE_FLOAT, .offset = 4},
    };
    d = test_position_desc();
    d.fields = renamed;
    expect_mismatch(F.w, d, "field 1 is 'y' float[1] at offset 4, given 'z' float[1] at offset 4");

    d = test_owned_desc(&log);
    d.move = NULL;
    expect_mismatch(F.w, d, "given another move hook than registered");

    d = test_owned_desc(&log);
    d.destroy = NULL;
    expect_mismatch(F.w, d, "given another destroy hook than registered");

    ck_assert_int_eq(kiln_component_count(F.w), 2);
}

KILN_TEST(register, a_tag_registered_again_with_a_size_is_a_layout_mismatch) {
    test_register_tag(F.w, "Frozen");
    kiln_component id;
    ck_assert_int_eq(register_desc(F.w, (kiln_component_desc){.name = "Frozen"}, &id), KILN_OK);
    expect_mismatch(F.w, (kiln_component_desc){.name = "Frozen", .size = 4}, "registered as a tag, given 4 bytes");
}

/* ------------------------------------------------------------------------------------------ */
/* invalid descs                                                                              */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(invalid, .setup = setup, .teardown = teardown);

KILN_TEST(invalid, names_must_have_one_to_63_bytes) {
    char name[KILN_MAX_NAME + 2];
    memset(name, 'n', KILN_MAX_NAME + 1);
    name[KILN_MAX_NAME + 1] = '\0';
    expect_register_fails(F.w, (kiln_component_desc){.name = name, .size = 4},
                          KILN_ERR_INVALID_ARGUMENT);
    expect_register_fails(F.w, (kiln_component_desc){.name = "", .size = 4},
                          KILN_ERR_INVALID_ARGUMENT);
    expect_register_fails(F.w, (kiln_component_desc){.name = NULL, .size = 4},
                          KILN_ERR_INVALID_ARGUMENT);
    name[KILN_MAX_NAME] = '\0';
    kiln_component id;
    ck_assert_int_eq(register_desc(F.w, (kiln_component_desc){.name = name, .size = 4}, &id),
                     KILN_OK);
    ck_assert_uint_eq(kiln_component_lookup(F.w, name), id);
}

KILN_TEST(invalid, alignment_above_16_or_not_a_power_of_two_is_rejected) {
    static const size_t bad[] = {3, 5, 6, 12, 24, 32, 64, 17};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_register_fails(F.w, (kiln_component_desc){.name = "Aligned", .size = 64,
                                                       .align = bad[i]},
                              KILN_ERR_INVALID_ARGUMENT);
    static const size_t good[] = {1, 2, 4, 8, 16};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "Aligned%zu", good[i]);
        kiln_component id;
        ck_assert_int_eq(register_desc(F.w, (kiln_component_desc){.name = name, .size = 64,
                                                                .align = good[i]},
                                       &id),
                         KILN_OK);
    }
    ck_assert_int_eq(kiln_component_count(F.w), 5);
}

KILN_TEST(invalid, fields_outside_the_component_are_rejected) {
    kiln_field past_end[] = {{.name = "x", .type = KILN_TYPE_FLOAT, .offset = 8}};
    expect_register_fails(F.w, (kiln_component_desc){.name = "C", .size = 8, .fields = past_end,
                                                   .field_count = 1},
                          KILN_ERR_INVALID_ARGUMENT);
    kiln_field straddles[] = {{.name = "x", .type = KILN_TYPE_DOUBLE, .offset = 4}};
    expect_register_fails(F.w, (kiln_component_desc){.name = "C", .size = 8, .fields = straddles,
                                                   .field_count = 1},
                          KILN_ERR_INVALID_ARGUMENT);
    kiln_field array[] = {{.name = "v", .type = KILN_TYPE_FLOAT, .offset = 0, .count = 3}};
    expect_register_fails(F.w, (kiln_component_desc){.name = "C", .size = 8, .fields = array,
                                                   .field_count = 1},
                          KILN_ERR_INVALID_ARGUMENT);
    kiln_field chars[] = {{.name = "s", .type = KILN_TYPE_CHAR, .offset = 0, .count = 17}};
    expect_register_fails(F.w, (kiln_component_desc){.name = "C", .size = 16, .fields = chars,
                                                   .field_count = 1},
                          KILN_ERR_INVALID_ARGUMENT);
    kiln_field huge[] = {{.name = "x", .type = KILN_TYPE_FLOAT, .offset = UINT32_MAX - 1}};
    expect_register_fails(F.w, (kiln_component_desc){.name = "C", .size = 8, .fields = huge,
                                                   .field_count = 1},
                          KILN_ERR_INVALID_ARGUMENT);
    kiln_field wrap[] = {{.name = "m", .type = KILN_TYPE_MAT4, .offset = 0, .count = UINT32_MAX}};
    expect_register_fails(F.w, (kiln_component_desc){.name = "C", .size = 64, .fields = wrap,
                                                   .field_count = 1},
                          KILN_ERR_INVALID_ARGUMENT);
    kiln_field on_tag[] = {{.name = "b", .type = KILN_TYPE_BOOL, .offset = 0}};
    expect_register_fails(F.w, (kiln_component_desc){.name = "C", .size = 0, .fields = on_tag,
                                                   .field_count = 1},
                          KILN_ERR_INVALID_ARGUMENT);
    /* exactly filling the component is fine */
    kiln_field fits[] = {{.name = "s", .type = KILN_TYPE_CHAR, .offset = 0, .count = 16}};
    kiln_component id;
    ck_assert_int_eq(register_desc(F.w, (kiln_component_desc){.name = "C", .size = 16,
                                                            .fields = fits, .field_count = 1},
                                   &id),
                     KILN_OK);
}

KILN_TEST(invalid, duplicate_field_names_are_rejected) {
    kiln_field dup[] = {
        {.name = "x", .type = KILN_TYPE_FLOAT, .offset = 0},
        {.name = "y", .type = KILN_TYPE_FLOAT, .offset = 4},
        {.name = "x", .type = KILN_TYPE_FLOAT, .offset = 8},
    };
    expect_register_fails(F.w, (kiln_component_desc){.name = "V3", .size = 12, .fields = dup,
                                                   .field_count = 3},
                          KILN_ERR_INVALID_ARGUMENT);
    char other_x[] = "x";
    kiln_field dup_by_content[] = {
        {.name = "x", .type = KILN_TYPE_FLOAT, .offset = 0},
        {.name = other_x, .type = KILN_TYPE_FLOAT, .offset = 4},
    };
    expect_register_fails(F.w, (kiln_component_desc){.name = "V2", .size = 8,
                                                   .fields = dup_by_content, .field_count = 2},
                          KILN_ERR_INVALID_ARGUMENT);
}

KILN_TEST(invalid, fields_with_a_bad_type_or_count_are_rejected) {
    kiln_field bad_type[] = {{.name = "x", .type = KILN_TYPE_COUNT, .offset = 0}};
    expect_register_fails(F.w, (kiln_component_desc){.name = "C", .size = 8, .fields = bad_type,
                                                   .field_count = 1},
                          KILN_ERR_INVALID_ARGUMENT);
    kiln_field wild_type[] = {{.name = "x", .type = (kiln_type)200, .offset = 0}};
    expect_register_fails(F.w, (kiln_component_desc){.name = "C", .size = 8, .fields = wild_type,
                                                   .field_count = 1},
                          KILN_ERR_INVALID_ARGUMENT);
    kiln_field no_name[] = {{.name = NULL, .type = KILN_TYPE_FLOAT, .offset = 0}};
    expect_register_fails(F.w, (kiln_component_desc){.name = "C", .size = 8, .fields = no_name,
                                                   .field_count = 1},
                          KILN_ERR_INVALID_ARGUMENT);
    expect_register_fails(F.w, (kiln_component_desc){.name = "C", .size = 8, .fields = NULL,
                                                   .field_count = 1},
                          KILN_ERR_INVALID_ARGUMENT);
    kiln_field one[] = {{.name = "x", .type = KILN_TYPE_FLOAT, .offset = 0}};
    expect_register_fails(F.w, (kiln_component_desc){.name = "C", .size = 8, .fields = one,
                                                   .field_count = -1},
                          KILN_ERR_INVALID_ARGUMENT);
}

KILN_TEST(invalid, more_than_max_fields_are_rejected) {
    enum { N = KILN_MAX_FIELDS + 1 };
    kiln_field fields[N];
    char names[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "f%d", i);
        fields[i] = (kiln_field){.name = names[i], .type = KILN_TYPE_UINT8, .offset = (uint32_t)i};
    }
    expect_register_fails(F.w, (kiln_component_desc){.name = "Wide", .size = N, .fields = fields,
                                                   .field_count = N},
                          KILN_ERR_INVALID_ARGUMENT);
    kiln_component id;
    ck_assert_int_eq(register_desc(F.w, (kiln_component_desc){.name = "Wide", .size = N,
                                                            .fields = fields,
                                                            .field_count = KILN_MAX_FIELDS},
                                   &id),
                     KILN_OK);
    kiln_component_info info;
    ck_assert(kiln_component_info_get(F.w, id, &info));
    ck_assert_int_eq(info.field_count, KILN_MAX_FIELDS);
}

KILN_TEST(invalid, a_failed_registration_leaves_the_name_free) {
    kiln_field bad[] = {{.name = "x", .type = KILN_TYPE_FLOAT, .offset = 6}};
    expect_register_fails(F.w, (kiln_component_desc){.name = "Position", .size = 8, .fields = bad,
                                                   .field_count = 1},
                          KILN_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(kiln_component_lookup(F.w, "Position"), KILN_NO_COMPONENT);
    kiln_component pos = test_register_position(F.w);
    ck_assert_uint_eq(pos, 1);
    kiln_component_info info;
    ck_assert(kiln_component_info_get(F.w, pos, &info));
    ck_assert_int_eq(info.field_count, 2);
}

/* ------------------------------------------------------------------------------------------ */
/* tags and reflection                                                                        */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(reflection, .setup = setup, .teardown = teardown);

KILN_TEST(reflection, a_tag_has_size_zero_and_no_value) {
    kiln_component tag = test_register_tag(F.w, "Frozen");
    kiln_component_info info;
    ck_assert(kiln_component_info_get(F.w, tag, &info));
    ck_assert_uint_eq(info.size, 0);
    ck_assert_uint_eq(info.stride, 0);
    ck_assert_uint_eq(info.align, 1);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(F.w, &e), KILN_OK);
    ck_assert_int_eq(kiln_add(F.w, e, tag, NULL), KILN_OK);
    ck_assert(kiln_has(F.w, e, tag));
    ck_assert_ptr_null(kiln_get(F.w, e, tag));
}

KILN_TEST(reflection, reflection_fields_are_copied_names_and_all) {
    const char *names[] = {"mass", "tint", "label", "owner", "basis"};
    kiln_field *fields = malloc(5 * sizeof *fields);
    char **copies = malloc(5 * sizeof *copies);
    ck_assert_ptr_nonnull(fields);
    ck_assert_ptr_nonnull(copies);
    for (int i = 0; i < 5; i++) {
        copies[i] = malloc(strlen(names[i]) + 1);
        ck_assert_ptr_nonnull(copies[i]);
        strcpy(copies[i], names[i]);
    }
    fields[0] = (kiln_field){.name = copies[0], .type = KILN_TYPE_DOUBLE, .offset = 0};
    fields[1] = (kiln_field){.name = copies[1], .type = KILN_TYPE_VEC4, .offset = 8};
    fields[2] = (kiln_field){.name = copies[2], .type = KILN_TYPE_CHAR, .offset = 24, .count = 16};
    fields[3] = (kiln_field){.name = copies[3], .type = KILN_TYPE_ENTITY, .offset = 40};
    fields[4] = (kiln_field){.name = copies[4], .type = KILN_TYPE_MAT4, .offset = 48};
    char *comp_name = malloc(8);
    ck_assert_ptr_nonnull(comp_name);
    strcpy(comp_name, "Body");
    kiln_component id;
    ck_assert_int_eq(register_desc(F.w, (kiln_component_desc){.name = comp_name, .size = 112,
                                                            .fields = fields, .field_count = 5},
                                   &id),
                     KILN_OK);
    /* scribble over and free everything the caller passed */
    for (int i = 0; i < 5; i++) {
        memset(copies[i], '?', strlen(copies[i]));
        free(copies[i]);
    }
    memset(fields, 0xee, 5 * sizeof *fields);
    free(fields);
    free(copies);
    strcpy(comp_name, "Xyzw");
    free(comp_name);

    ck_assert_uint_eq(kiln_component_lookup(F.w, "Body"), id);
    kiln_component_info info;
    ck_assert(kiln_component_info_get(F.w, id, &info));
    ck_assert_str_eq(info.name, "Body");
    ck_assert_int_eq(info.field_count, 5);
    ck_assert_ptr_nonnull(info.fields);
    static const kiln_type types[] = {KILN_TYPE_DOUBLE, KILN_TYPE_VEC4, KILN_TYPE_CHAR,
                                      KILN_TYPE_ENTITY, KILN_TYPE_MAT4};
    static const uint32_t offsets[] = {0, 8, 24, 40, 48};
    for (int i = 0; i < 5; i++) {
        ck_assert_str_eq(info.fields[i].name, names[i]);
        ck_assert_int_eq(info.fields[i].type, types[i]);
        ck_assert_uint_eq(info.fields[i].offset, offsets[i]);
    }
    ck_assert_uint_eq(info.fields[2].count, 16);
    ck_assert_uint_le(info.fields[0].count, 1);
}

KILN_TEST(reflection, type_names_and_sizes_match_their_c_types) {
    ck_assert_str_eq(kiln_type_name(KILN_TYPE_FLOAT), "float");
    ck_assert_str_eq(kiln_type_name(KILN_TYPE_VEC3), "vec3");
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_NONE), 0);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_BOOL), sizeof(bool));
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_INT8), 1);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_INT16), 2);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_INT32), 4);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_INT64), 8);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_UINT8), 1);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_UINT16), 2);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_UINT32), 4);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_UINT64), 8);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_FLOAT), 4);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_DOUBLE), 8);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_ENTITY), sizeof(kiln_entity));
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_CHAR), 1);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_VEC2), 8);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_VEC3), 12);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_VEC4), 16);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_QUAT), 16);
    ck_assert_uint_eq(kiln_type_size(KILN_TYPE_MAT4), 64);
    for (int t = KILN_TYPE_BOOL; t < KILN_TYPE_COUNT; t++) {
        const char *name = kiln_type_name((kiln_type)t);
        ck_assert_ptr_nonnull(name);
        ck_assert_str_ne(name, "");
        for (int u = KILN_TYPE_BOOL; u < t; u++)
            ck_assert_str_ne(name, kiln_type_name((kiln_type)u));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* scale and storage                                                                          */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(storage, .timeout = 30);

KILN_TEST(storage, a_world_holds_at_least_1024_component_types) {
    test_allocator a;
    test_allocator_init(&a);
    kiln_world *w = test_world_create(&a);
    enum { N = 1024 };
    static kiln_component ids[N];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "C%04d", i);
        kiln_result r = register_desc(w, (kiln_component_desc){.name = name,
                                                               .size = (size_t)(i % 5) * 4},
                                      &ids[i]);
        if (r != KILN_OK) ck_abort_msg("registering %s failed: %s", name, kiln_world_error(w));
        if (ids[i] != (kiln_component)(i + 1)) ck_abort_msg("%s got id %u", name, (unsigned)ids[i]);
    }
    ck_assert_int_eq(kiln_component_count(w), N);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "C%04d", i);
        if (kiln_component_lookup(w, name) != ids[i]) ck_abort_msg("lookup of %s failed", name);
    }
    /* the high ids work in entities and queries too */
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(w, &e), KILN_OK);
    for (int i = N - 20; i < N; i++) ck_assert_int_eq(kiln_add(w, e, ids[i], NULL), KILN_OK);
    for (int i = N - 20; i < N; i++) ck_assert(kiln_has(w, e, ids[i]));
    ck_assert(!kiln_has(w, e, ids[0]));
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {ids[N - 1], ids[N - 9]}}, &q),
                     KILN_OK);
    ck_assert_int_eq(kiln_query_count(q), 1);
    kiln_query_destroy(q);
    kiln_world_destroy(w);
    ck_assert_int_eq(a.live_bytes, 0);
}

KILN_TEST(storage, query_column_base_pointers_are_16_byte_aligned) {
    test_allocator a;
    test_allocator_init(&a);
    kiln_world *w = test_world_create(&a);
    kiln_component byte, odd, vec3, wide, tag;
    ck_assert_int_eq(register_desc(w, (kiln_component_desc){.name = "Byte", .size = 1}, &byte),
                     KILN_OK);
    ck_assert_int_eq(register_desc(w, (kiln_component_desc){.name = "Odd", .size = 3}, &odd),
                     KILN_OK);
    ck_assert_int_eq(register_desc(w, (kiln_component_desc){.name = "Vec3", .size = 12}, &vec3),
                     KILN_OK);
    ck_assert_int_eq(register_desc(w, (kiln_component_desc){.name = "Wide", .size = 16,
                                                            .align = 16},
                                   &wide),
                     KILN_OK);
    tag = test_register_tag(w, "Tag");
    kiln_component all[] = {byte, odd, vec3, wide, tag};
    /* every subset of the five, with a varying number of rows each */
    for (int mask = 1; mask < 32; mask++) {
        kiln_component comps[5];
        int32_t n = 0;
        for (int b = 0; b < 5; b++)
            if (mask & (1 << b)) comps[n++] = all[b];
        ck_assert_int_eq(kiln_spawn_batch(w, comps, n, 1 + mask * 7, NULL), KILN_OK);
    }
    kiln_component terms[] = {byte, odd, vec3, wide};
    int checked = 0;
    for (int t = 0; t < 4; t++) {
        kiln_query_desc desc = {.with = {terms[t]}};
        for (int o = 0, n = 0; o < 4; o++)
            if (o != t) desc.optional[n++] = terms[o];
        kiln_query *q;
        ck_assert_int_eq(kiln_query_create(w, &desc, &q), KILN_OK);
        kiln_iter it;
        kiln_query_iter(q, &it);
        while (kiln_query_next(&it)) {
            for (int32_t k = 0; k < it.term_count; k++) {
                if (it.columns[k] == NULL) continue;
                ck_assert_msg((uintptr_t)it.columns[k] % 16 == 0, "column %d at %p", k,
                              it.columns[k]);
                checked++;
            }
        }
        kiln_query_destroy(q);
    }
    ck_assert_int_gt(checked, 40);
    /* kiln_get honours the component's alignment */
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){odd, wide}, NULL, 2, &e), KILN_OK);
    ck_assert_uint_eq((uintptr_t)kiln_get(w, e, wide) % 16, 0);
    kiln_world_destroy(w);
}
