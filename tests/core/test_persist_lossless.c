/* test_persist_lossless.c: Check suite for what a JSON round trip must keep (every NaN's bits,
 * every byte of a char array) and for references a file cannot resolve (refused, not nulled). */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* The saved JSON as a NUL-terminated string without the white space between tokens (a JSON
 * save holds no NUL byte: it writes one in a string as an escape). */
static char *text_of(const pf_bytes *b) {
    char *s = malloc(b->size + 1);
    size_t n = 0;
    bool quoted = false;
    for (size_t i = 0; i < b->size; i++) {
        char c = (char)b->data[i];
        if (quoted && c == '\\') {
            s[n++] = c;
            s[n++] = (char)b->data[++i];
            continue;
        }
        if (c == '"') quoted = !quoted;
        if (quoted || (c != ' ' && c != '\n')) s[n++] = c;
    }
    s[n] = 0;
    return s;
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(nan);

typedef struct floats { uint32_t f[6]; uint32_t pad; uint64_t d[6]; } floats; /* bit patterns */
/* d at 28 on i386, where uint64_t aligns to 4 in a struct */
static const kiln_field float_fields[] = {{"f", KILN_TYPE_FLOAT, 0, 6},
                                          {"d", KILN_TYPE_DOUBLE, offsetof(floats, d), 6}};

KILN_TEST(nan, every_nan_keeps_its_sign_and_payload_bits_through_json_and_hashes_the_same) {
    kiln_world *a = kiln_world_create(NULL);
    kiln_component id = pf_register(a, "Floats", sizeof(floats), float_fields, 2);
    floats v = {{0x7fc00000u, 0xffc00000u, 0x7fc00001u, 0xff800001u, 0x7fbfffffu, 0x7f800000u}, 0,
                {0x7ff8000000000000u, 0xfff8000000000000u, 0x7ff8000000000123u, 0xfff0000000000001u,
                 0x7ff7ffffffffffffu, 0xfff0000000000000u}};
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(a, &id, (const void *[]){&v}, 1, &e), KILN_OK);
    pf_bytes saved;
    pf_save(a, KILN_PERSIST_JSON, &saved);
    char *text = text_of(&saved);
    /* readable: the usual NaNs and infinities by name, any other NaN with its mantissa bits */
    ck_assert_msg(strstr(text, "[\"nan\",\"-nan\",\"nan(0x400001)\",\"-nan(0x1)\",\"nan(0x3fffff)\",\"inf\"]"),
                  "%s", text);
    ck_assert_msg(strstr(text, "[\"nan\",\"-nan\",\"nan(0x8000000000123)\",\"-nan(0x1)\","
                               "\"nan(0x7ffffffffffff)\",\"-inf\"]"), "%s", text);
    kiln_world *b = kiln_world_create(NULL);
    pf_register(b, "Floats", sizeof(floats), float_fields, 2);
    ck_assert_msg(kiln_load(b, saved.data, saved.size, NULL) == KILN_OK, "%s", kiln_world_error(b));
    const floats *got = kiln_get(b, e, id);
    for (int k = 0; k < 6; k++) {
        ck_assert_msg(got->f[k] == v.f[k], "float %d: %08x, saved %08x", k, got->f[k], v.f[k]);
        ck_assert_msg(got->d[k] == v.d[k], "double %d: %016llx, saved %016llx", k, (unsigned long long)got->d[k],
                      (unsigned long long)v.d[k]);
    }
    ck_assert_uint_eq(kiln_world_hash(a), kiln_world_hash(b));
    pf_bytes again;
    pf_save(b, KILN_PERSIST_JSON, &again);
    ck_assert_uint_eq(again.size, saved.size);
    ck_assert(memcmp(again.data, saved.data, saved.size) == 0);
    free(text);
    pf_bytes_free(&saved);
    pf_bytes_free(&again);
    kiln_world_destroy(a);
    kiln_world_destroy(b);
}

/* A one-entity JSON save of Floats whose f[0] (double: d[0]) is the JSON value given. */
static void floats_doc(char *dest, size_t size, const char *f0, const char *d0) {
    snprintf(dest, size,
             "{\"kiln\": 1, \"tick\": 0, \"components\": [{\"name\": \"Floats\", \"size\": 80, \"fields\": ["
             "{\"name\": \"f\", \"type\": \"float\", \"offset\": 0, \"count\": 6}, "
             "{\"name\": \"d\", \"type\": \"double\", \"offset\": 32, \"count\": 6}]}], "
             "\"entities\": [{\"id\": 4294967296, \"components\": {\"Floats\": "
             "{\"f\": [%s, 0, 0, 0, 0, 0], \"d\": [%s, 0, 0, 0, 0, 0]}}}]}", f0, d0);
}

KILN_TEST(nan, a_spelled_out_payload_reads_to_its_bits_and_malformed_forms_are_refused_by_name) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component id = pf_register(w, "Floats", sizeof(floats), float_fields, 2);
    kiln_entity other;
    ck_assert_int_eq(kiln_spawn(w, &other), KILN_OK);
    char doc[1024];
    /* the long forms of the plain NaNs, upper-case digits */
    floats_doc(doc, sizeof doc, "\"-nan(0x400000)\"", "\"nan(0xABC)\"");
    ck_assert_msg(pf_load_text(w, doc) == KILN_OK, "%s", kiln_world_error(w));
    kiln_entity loaded = KILN_NULL_ENTITY;
    for (kiln_entity c = kiln_entity_make(1, 1); !loaded; c = kiln_entity_make(kiln_entity_index(c) + 1, 1))
        if (kiln_has(w, c, id)) loaded = c;
    const floats *got = kiln_get(w, loaded, id);
    ck_assert_uint_eq(got->f[0], 0xffc00000u);
    ck_assert_uint_eq(got->d[0], 0x7ff0000000000abcu);
    uint64_t before = kiln_world_hash(w);
    int64_t count = kiln_entity_count(w);
    static const struct { const char *f0, *d0, *error; } bad[] = {
        {"\"nan(0x0)\"", "0", "at entities[0].components.Floats.f[0]: \"nan(0x0)\" is not a float NaN "
                              "(its payload is 0x1 to 0x7fffff)"},
        {"\"nan(0x800000)\"", "0", "at entities[0].components.Floats.f[0]: \"nan(0x800000)\" is not a float NaN "
                                   "(its payload is 0x1 to 0x7fffff)"},
        {"0", "\"-nan(0x10000000000000)\"", "at entities[0].components.Floats.d[0]: \"-nan(0x10000000000000)\" is not "
                                            "a double NaN (its payload is 0x1 to 0xfffffffffffff)"},
        {"\"nan(12)\"", "0", "at entities[0].components.Floats.f[0]: \"nan(12)\" is not a number (NaNs are \"nan\", "
                             "\"-nan\" or \"nan(0x\" hex digits \")\")"},
        {"\"nan(0x)\"", "0", "at entities[0].components.Floats.f[0]: \"nan(0x)\" is not a number (NaNs are \"nan\", "
                             "\"-nan\" or \"nan(0x\" hex digits \")\")"},
        {"\"nan(0x1) \"", "0", "at entities[0].components.Floats.f[0]: \"nan(0x1) \" is not a number (NaNs are "
                               "\"nan\", \"-nan\" or \"nan(0x\" hex digits \")\")"},
        {"\"nan(0x1g)\"", "0", "at entities[0].components.Floats.f[0]: \"nan(0x1g)\" is not a number (NaNs are "
                               "\"nan\", \"-nan\" or \"nan(0x\" hex digits \")\")"},
        {"0", "\"nan(0x00000000000000000001)\"", "at entities[0].components.Floats.d[0]: \"nan(0x000000000000000000...\" "
                                                 "is not a number (NaNs are \"nan\", \"-nan\" or \"nan(0x\" hex digits \")\")"},
        {"\"NaN\"", "0", "at entities[0].components.Floats.f[0]: a number expected, got a string"},
        {"\"nan\\u0000(0x1)\"", "0", "at entities[0].components.Floats.f[0]: a number expected, got a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        floats_doc(doc, sizeof doc, bad[i].f0, bad[i].d0);
        ck_assert_int_eq(pf_load_text(w, doc), KILN_ERR_INVALID_ARGUMENT);
        char want[400];
        snprintf(want, sizeof want, "kiln_load: %s", bad[i].error);
        ck_assert_str_eq(kiln_world_error(w), want);
        ck_assert_uint_eq(kiln_world_hash(w), before);
        ck_assert_int_eq(kiln_entity_count(w), count);
    }
    kiln_world_destroy(w);
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(unsigned64);

static const kiln_field u64_fields[] = {{"u", KILN_TYPE_UINT64, 0, 5}};

KILN_TEST(unsigned64, a_uint64_past_int64_max_goes_to_json_as_digits_and_loads_back_to_its_bits) {
    kiln_world *a = kiln_world_create(NULL);
    kiln_component id = pf_register(a, "Big", 40, u64_fields, 1);
    const uint64_t v[5] = {0, INT64_MAX, (uint64_t)INT64_MAX + 1, UINT64_MAX - 1, UINT64_MAX};
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(a, &id, (const void *[]){v}, 1, &e), KILN_OK);
    pf_bytes saved;
    pf_save(a, KILN_PERSIST_JSON, &saved);
    char *text = text_of(&saved);
    ck_assert_msg(strstr(text, "[0,9223372036854775807,\"9223372036854775808\",\"18446744073709551614\","
                               "\"18446744073709551615\"]"), "%s", text);
    kiln_world *b = kiln_world_create(NULL);
    pf_register(b, "Big", 40, u64_fields, 1);
    ck_assert_msg(kiln_load(b, saved.data, saved.size, NULL) == KILN_OK, "%s", kiln_world_error(b));
    ck_assert(memcmp(kiln_get(b, e, id), v, sizeof v) == 0);
    ck_assert_uint_eq(kiln_world_hash(a), kiln_world_hash(b));
    free(text);
    pf_bytes_free(&saved);
    /* past 2^64 - 1 or negative: refused, naming the element; a bare number past INT64_MAX is
     * refused by the JSON parser, the message saying how such a value is written */
    static const struct { const char *u0, *error; } bad[] = {
        {"\"18446744073709551616\"", "an unsigned integer (at most 64 bits) expected"},
        {"\"-1\"", "an unsigned integer expected"},
        {"-1", "-1 is out of range"},
        {"9223372036854775808", "too big integer near '9223372036854775808' (no number past 9223372036854775807 "
                                "parses: a uint64 field takes one as a string of digits)"},
    };
    uint64_t before = kiln_world_hash(b);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char doc[600];
        snprintf(doc, sizeof doc,
                 "{\"kiln\": 1, \"tick\": 0, \"components\": [{\"name\": \"Big\", \"size\": 40, \"fields\": ["
                 "{\"name\": \"u\", \"type\": \"uint64\", \"offset\": 0, \"count\": 5}]}], "
                 "\"entities\": [{\"id\": 4294967297, \"components\": {\"Big\": {\"u\": [%s, 0, 0, 0, 0]}}}]}",
                 bad[i].u0);
        ck_assert_int_eq(pf_load_text(b, doc), KILN_ERR_INVALID_ARGUMENT);
        const char *msg = kiln_world_error(b), *where = "kiln_load: at entities[0].components.Big.u[0]: ";
        if (i < 3) ck_assert_msg(strncmp(msg, where, strlen(where)) == 0, "%s", msg);
        ck_assert_msg(strstr(msg, bad[i].error) != NULL, "%s", msg);
        ck_assert_uint_eq(kiln_world_hash(b), before);
        ck_assert_int_eq(kiln_entity_count(b), 1);
    }
    kiln_world_destroy(a);
    kiln_world_destroy(b);
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(text);

typedef struct label { char text[16]; } label;
static const kiln_field label_fields[] = {{"text", KILN_TYPE_CHAR, 0, 16}};

KILN_TEST(text, a_char_array_keeps_every_byte_after_a_nul_through_json_and_hashes_the_same) {
    kiln_world *a = kiln_world_create(NULL);
    kiln_component id = pf_register(a, "Label", sizeof(label), label_fields, 1);
    static const label values[] = {
        {"ab\0cd\0\0e"},                                   /* bytes after the first NUL */
        {"full sixteen byt"},                              /* no end at all (16 bytes) */
        {"\0\0\0x"},                                       /* empty text, then a byte */
        {"plain"},
    };
    kiln_entity e[4];
    for (int i = 0; i < 4; i++) ck_assert_int_eq(kiln_spawn_with(a, &id, (const void *[]){&values[i]}, 1, &e[i]), KILN_OK);
    pf_bytes saved;
    pf_save(a, KILN_PERSIST_JSON, &saved);
    char *text = text_of(&saved);
    ck_assert_msg(strstr(text, "\"ab\\u0000cd\\u0000\\u0000e\""), "%s", text); /* trailing NULs left out */
    ck_assert_msg(strstr(text, "\"\\u0000\\u0000\\u0000x\""), "%s", text);
    ck_assert_msg(strstr(text, "\"plain\""), "%s", text);
    kiln_world *b = kiln_world_create(NULL);
    pf_register(b, "Label", sizeof(label), label_fields, 1);
    ck_assert_msg(kiln_load(b, saved.data, saved.size, NULL) == KILN_OK, "%s", kiln_world_error(b));
    for (int i = 0; i < 4; i++) ck_assert(memcmp(kiln_get(b, e[i], id), &values[i], sizeof(label)) == 0);
    ck_assert_uint_eq(kiln_world_hash(a), kiln_world_hash(b));
    /* non-UTF-8 after the NUL fails the save as it does before it */
    label odd = {"ok\0\xff"};
    ck_assert_int_eq(kiln_set(a, e[3], id, &odd), KILN_OK);
    pf_bytes out = {0};
    ck_assert_int_eq(kiln_save(a, &(kiln_save_desc){.format = KILN_PERSIST_JSON}, pf_bytes_write, &out),
                     KILN_ERR_INVALID_ARGUMENT);
    char want[160];
    char buf[24];
    snprintf(want, sizeof want, "kiln_save: entity %s component 'Label' field 'text' is not UTF-8 text (JSON holds "
             "nothing else; save in binary)", kiln_entity_format(e[3], buf, sizeof buf));
    ck_assert_str_eq(kiln_world_error(a), want);
    free(text);
    pf_bytes_free(&out);
    pf_bytes_free(&saved);
    kiln_world_destroy(a);
    kiln_world_destroy(b);
}

/* Names are bytes to the core; JSON holds UTF-8 only, so a name that is not (a Latin-1 host's
 * text) fails the JSON save or export saying so, not as if memory ran out, and leaves the
 * binary save to work. */
static kiln_result json_save(kiln_world *w, bool export) {
    pf_bytes out = {0};
    kiln_result r = export ? kiln_export(w, NULL, pf_bytes_write, &out)
                           : kiln_save(w, &(kiln_save_desc){.format = KILN_PERSIST_JSON}, pf_bytes_write, &out);
    pf_bytes_free(&out);
    return r;
}

KILN_TEST(text, a_name_that_is_not_utf8_fails_a_json_save_and_export_by_name) {
    static const kiln_field good[] = {{"v", KILN_TYPE_INT32, 0, 1}}, bad[] = {{"w\xe9", KILN_TYPE_INT32, 0, 1}};
    static const int32_t one = 1;
    struct { const char *name; const kiln_field *fields; bool resource; const char *says; } cases[] = {
        {"Gr\xfcn", good, false, "component 'Gr\xfcn' is named in bytes that are not UTF-8"},
        {"Ok", bad, false, "component 'Ok' field 'w\xe9' is named in bytes that are not UTF-8"},
        {"Sc\xf6re", good, true, "resource 'Sc\xf6re' is named in bytes that are not UTF-8"},
        {"\xed\xa0\x80", good, false, "component '\xed\xa0\x80' is named"}, /* a surrogate */
        {"\xc0\xaf", good, false, "component '\xc0\xaf' is named"},             /* an overlong '/' */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_world *w = kiln_world_create(NULL);
        kiln_component id = pf_register(w, cases[i].name, sizeof one, cases[i].fields, 1);
        if (cases[i].resource) ck_assert_int_eq(kiln_resource_set(w, id, &one), KILN_OK);
        else ck_assert_int_eq(kiln_spawn_with(w, &id, (const void *[]){&one}, 1, NULL), KILN_OK);
        for (int export = 0; export <= !cases[i].resource; export++) {
            ck_assert_int_eq(json_save(w, export), KILN_ERR_INVALID_ARGUMENT);
            ck_assert_msg(strstr(kiln_world_error(w), cases[i].says) &&
                              strstr(kiln_world_error(w), export ? "kiln_export: " : "kiln_save: "),
                          "%s", kiln_world_error(w));
        }
        pf_bytes saved = {0};
        ck_assert_int_eq(kiln_save(w, NULL, pf_bytes_write, &saved), KILN_OK);
        pf_bytes_free(&saved);
        kiln_world_destroy(w);
    }
    kiln_world *w = kiln_world_create(NULL); /* two-, three- and four-byte UTF-8 pass */
    kiln_component id = pf_register(w, "Gr\xc3\xbcn\xe2\x82\xac\xf0\x9f\x94\xa5", sizeof one, good, 1);
    ck_assert_int_eq(kiln_spawn_with(w, &id, (const void *[]){&one}, 1, NULL), KILN_OK);
    ck_assert_msg(json_save(w, false) == KILN_OK && json_save(w, true) == KILN_OK, "%s", kiln_world_error(w));
    kiln_world_destroy(w);
}

KILN_TEST(text, a_hand_written_string_with_nuls_loads_and_one_too_long_is_refused) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component id = pf_register(w, "Label", sizeof(label), label_fields, 1);
    const char *doc = "{\"kiln\": 1, \"tick\": 0, \"components\": [{\"name\": \"Label\", \"size\": 16, \"fields\": "
                      "[{\"name\": \"text\", \"type\": \"char\", \"offset\": 0, \"count\": 16}]}], "
                      "\"entities\": [{\"id\": 4294967296, \"components\": {\"Label\": {\"text\": \"a\\u0000b\"}}}]}";
    ck_assert_msg(pf_load_text(w, doc) == KILN_OK, "%s", kiln_world_error(w));
    const label *got = kiln_get(w, kiln_entity_make(0, 1), id);
    ck_assert(memcmp(got->text, "a\0b\0\0\0\0\0\0\0\0\0\0\0\0\0", 16) == 0);
    const char *long_doc = "{\"kiln\": 1, \"tick\": 0, \"components\": [{\"name\": \"Label\", \"size\": 16, \"fields\": "
                           "[{\"name\": \"text\", \"type\": \"char\", \"offset\": 0, \"count\": 16}]}], "
                           "\"entities\": [{\"id\": 4294967296, \"components\": {\"Label\": "
                           "{\"text\": \"sixteen bytes\\u0000\\u0000\\u0000\\u0000\"}}}]}";
    uint64_t before = kiln_world_hash(w);
    kiln_world *fresh = kiln_world_create(NULL);
    pf_register(fresh, "Label", sizeof(label), label_fields, 1);
    ck_assert_int_eq(pf_load_text(fresh, long_doc), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(fresh), "kiln_load: at entities[0].components.Label.text: a string of at most "
                                              "16 bytes expected");
    ck_assert_int_eq(kiln_entity_count(fresh), 0);
    ck_assert_uint_eq(kiln_world_hash(w), before);
    kiln_world_destroy(fresh);
    kiln_world_destroy(w);
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(outside);

/* A world with one Link {entity to} entity and a Parent-linked pair, plus a resource with an
 * entity field: the saves below are edited to point outside the file. */
typedef struct link { kiln_entity to[2]; } link;
static const kiln_field link_fields[] = {{"to", KILN_TYPE_ENTITY, 0, 2}};

typedef struct outside_world {
    kiln_world *w;
    kiln_component link;
    kiln_transform_ids tf;
    kiln_entity parent, child;
} outside_world;

static void outside_open(outside_world *o) {
    o->w = kiln_world_create(NULL);
    o->link = pf_register(o->w, "Link", sizeof(link), link_fields, 1);
    ck_assert_int_eq(kiln_transform_init(o->w, &o->tf), KILN_OK);
}

static void outside_populate(outside_world *o) {
    ck_assert_int_eq(kiln_spawn(o->w, &o->parent), KILN_OK);
    link l = {{o->parent, KILN_NULL_ENTITY}};
    kiln_component types[2] = {o->link, o->tf.parent};
    kiln_parent p = {o->parent};
    ck_assert_int_eq(kiln_spawn_with(o->w, types, (const void *[]){&l, &p}, 2, &o->child), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(o->w, o->link, &l), KILN_OK);
}

/* Replaces the first occurrence of from in text (of room bytes) by to. */
static void edit(char *text, size_t room, const char *from, const char *to) {
    char *at = strstr(text, from);
    ck_assert_msg(at != NULL, "'%s' not in %s", from, text);
    size_t rest = strlen(at + strlen(from));
    ck_assert_uint_lt(strlen(text) + strlen(to), room);
    memmove(at + strlen(to), at + strlen(from), rest + 1);
    memcpy(at, to, strlen(to));
}

KILN_TEST(outside, a_reference_to_an_entity_the_file_does_not_hold_fails_the_load_naming_the_field) {
    outside_world src;
    outside_open(&src);
    outside_populate(&src);
    pf_bytes saved;
    pf_save(src.w, KILN_PERSIST_JSON, &saved);
    char *good = text_of(&saved);
    char parent_id[32], stray[32];
    snprintf(parent_id, sizeof parent_id, "%llu", (unsigned long long)src.parent);
    snprintf(stray, sizeof stray, "%llu", (unsigned long long)kiln_entity_make(40, 1)); /* 40v1: no such entity */
    char from[64], to[64];
    static const struct { const char *key, *error; } cases[] = {
        {"\"to\":[", "kiln_load: entity 1v1 component 'Link' field 'to[0]' points to 40v1, an entity the file does "
                      "not hold (a save writes null there)"},
        {"\"Parent\":{\"entity\":", "kiln_load: entity 1v1 component 'Parent' field 'entity' points to 40v1, an "
                                     "entity the file does not hold (a save writes null there)"},
        {"\"resources\":{\"Link\":{\"to\":[", "kiln_load: resource 'Link' field 'to[0]' points to 40v1, an entity "
                                                "the file does not hold (a save writes null there)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t room = strlen(good) + 64;
        char *text = malloc(room);
        snprintf(text, room, "%s", good);
        snprintf(from, sizeof from, "%s%s", cases[i].key, parent_id);
        snprintf(to, sizeof to, "%s%s", cases[i].key, stray);
        edit(text, room, from, to);
        for (int fresh = 0; fresh < 2; fresh++) { /* keeping the saved handles, and remapped */
            outside_world dst;
            outside_open(&dst);
            kiln_entity first = KILN_NULL_ENTITY;
            if (!fresh) ck_assert_int_eq(kiln_spawn(dst.w, &first), KILN_OK);
            uint64_t before = kiln_world_hash(dst.w);
            ck_assert_int_eq(pf_load_text(dst.w, text), KILN_ERR_INVALID_ARGUMENT);
            ck_assert_str_eq(kiln_world_error(dst.w), cases[i].error);
            ck_assert_uint_eq(kiln_world_hash(dst.w), before);
            ck_assert_int_eq(kiln_entity_count(dst.w), fresh ? 0 : 1);
            ck_assert(!kiln_resource_has(dst.w, dst.link));
            kiln_world_destroy(dst.w);
        }
        free(text);
    }
    /* the same file unedited loads, links intact */
    outside_world dst;
    outside_open(&dst);
    ck_assert_msg(pf_load_text(dst.w, good) == KILN_OK, "%s", kiln_world_error(dst.w));
    ck_assert_uint_eq(((const kiln_parent *)kiln_get(dst.w, src.child, dst.tf.parent))->entity, src.parent);
    ck_assert_uint_eq(kiln_world_hash(dst.w), kiln_world_hash(src.w));
    kiln_world_destroy(dst.w);
    free(good);
    pf_bytes_free(&saved);
    kiln_world_destroy(src.w);
}

KILN_TEST(outside, a_binary_save_with_a_stray_reference_is_refused_as_json_is) {
    outside_world src;
    outside_open(&src);
    outside_populate(&src);
    pf_bytes saved;
    pf_save(src.w, KILN_PERSIST_BINARY, &saved);
    /* the child's group: its handle column [child], then the Link column [{parent, null}];
     * the Link's first reference is pointed at a slot past every saved one */
    kiln_entity stray = kiln_entity_make(40, 1), run[3] = {src.child, src.parent, KILN_NULL_ENTITY};
    int edited = 0;
    for (size_t i = 0; i + sizeof run <= saved.size && !edited; i++)
        if (memcmp(saved.data + i, run, sizeof run) == 0) memcpy(saved.data + i + 8, &stray, 8), edited = 1;
    ck_assert(edited);
    outside_world dst;
    outside_open(&dst);
    ck_assert_int_eq(kiln_load(dst.w, saved.data, saved.size, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kiln_world_error(dst.w), "points to 40v1, an entity the file does not hold") != NULL, "%s",
                  kiln_world_error(dst.w));
    ck_assert_int_eq(kiln_entity_count(dst.w), 0);
    kiln_world_destroy(dst.w);
    pf_bytes_free(&saved);
    kiln_world_destroy(src.w);
}
