/* test_persist_json_depth.c: Check suite for how deep JSON text may nest: saves, prefabs and
 * scenes nested past PZ_JSON_MAX_DEPTH (256) are refused before jansson parses them (its
 * recursion overflowed a small thread stack), naming the byte; valid deep text still reads. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_persist.h"
#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* head, then n '[' (each after a quoted "[" that is no nesting), a 1, n ']', then tail. */
static char *nested(const char *head, int n, const char *tail) {
    size_t size = strlen(head) + (size_t)n * 6 + strlen(tail) + 2;
    char *s = malloc(size), *p = s;
    ck_assert_ptr_nonnull(s);
    p += sprintf(p, "%s", head);
    for (int i = 0; i < n; i++) p += sprintf(p, i ? "[\"[\"," : "[");
    p += sprintf(p, "1");
    for (int i = 0; i < n; i++) *p++ = ']';
    sprintf(p, "%s", tail);
    return s;
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(depth);

KILN_TEST(depth, a_save_nested_past_256_is_refused_at_the_byte_and_the_world_is_untouched) {
    pf_world w;
    pf_open(&w, false);
    pf_populate(&w);
    uint64_t hash = kiln_world_hash(w.world);
    char *doc = nested("{\"kiln\":1,\"tick\":1,\"a\":", 300, "}");
    ck_assert_int_eq(kiln_load(w.world, doc, strlen(doc), NULL), KILN_ERR_INVALID_ARGUMENT);
    const char *at = strstr(doc, "[");
    /* under the top object, "a"'s arrays: its i-th (from 0) opens 1 + (i - 1) * 5 bytes after the
     * first; the one at i = 255 is the 257th level */
    size_t byte = (size_t)(at - doc) + 1 + 254 * 5;
    char want[128];
    snprintf(want, sizeof want, "kiln_load: at byte %zu: arrays and objects nest more than 256 deep", byte);
    ck_assert_str_eq(kiln_world_error(w.world), want);
    ck_assert_uint_eq(kiln_world_hash(w.world), hash);
    free(doc);
    /* 255 arrays under the top object: as deep as allowed, refused for its shape instead */
    doc = nested("{\"kiln\":1,\"tick\":1,\"a\":", 255, "}");
    ck_assert_int_ne(kiln_load(w.world, doc, strlen(doc), NULL), KILN_OK);
    ck_assert_ptr_null(strstr(kiln_world_error(w.world), "nest more than"));
    ck_assert_uint_eq(kiln_world_hash(w.world), hash);
    free(doc);
    pf_close(&w);
}

/* The world's last error names call and the nesting refused. */
static void assert_too_deep(kiln_world *world, const char *call) {
    const char *error = kiln_world_error(world);
    ck_assert_msg(strstr(error, call) && strstr(error, "nest more than 256 deep"), "%s", error);
}

KILN_TEST(depth, a_prefab_or_a_scene_nested_past_256_is_refused_naming_the_call) {
    pf_world w;
    pf_open(&w, false);
    uint64_t hash = kiln_world_hash(w.world);
    char *doc = nested("{\"components\":{},\"x\":", 400, "}");
    kiln_prefab *prefab = NULL;
    ck_assert_int_eq(kiln_prefab_load(w.world, doc, strlen(doc), NULL, &prefab), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(prefab);
    assert_too_deep(w.world, "kiln_prefab_load");
    free(doc);
    doc = nested("{\"version\":1,\"entities\":[],\"properties\":{\"p\":", 400, "}}");
    kiln_instance *inst = NULL;
    ck_assert_int_eq(kiln_instantiate(w.world, doc, strlen(doc), NULL, &inst), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(inst);
    assert_too_deep(w.world, "kiln_instantiate");
    ck_assert_uint_eq(kiln_world_hash(w.world), hash);
    free(doc);
    pf_close(&w);
}

KILN_TEST(depth, scene_properties_200_deep_still_instantiate) {
    pf_world w;
    pf_open(&w, false);
    char *doc = nested("{\"version\":1,\"entities\":[],\"properties\":{\"p\":", 200, "}}");
    kiln_instance *inst = NULL;
    ck_assert_msg(kiln_instantiate(w.world, doc, strlen(doc), NULL, &inst) == KILN_OK, "%s",
                  kiln_world_error(w.world));
    char *props = nested("{\"p\":", 200, "}"); /* as kept: compact JSON */
    ck_assert_str_eq(kiln_instance_properties(inst), props);
    free(props);
    kiln_instance_destroy(inst);
    free(doc);
    pf_close(&w);
}

/* A keep_going that counts its questions and says yes to the first yes_for of them. */
typedef struct asker {
    int asks, yes_for;
} asker;

static bool ask(void *ud) {
    asker *a = ud;
    return ++a->asks <= a->yes_for;
}

/* A backslash in a string as the last byte of a 64 KiB piece: the scan carries the escape into
 * the next piece instead of stepping past the piece's end, so it still asks after 65536 bytes (it
 * said "after 65537", and every later piece began a byte late). */
KILN_TEST(depth, the_depth_scan_asks_on_the_64_kib_grid_when_a_piece_ends_in_an_escape) {
    enum { PIECE = 64 << 10 };
    static const char head[] = "{\"kiln\":1,\"tick\":1,\"a\":\"";
    size_t size = PIECE + 100, at = sizeof head - 1;
    char *doc = malloc(size + 1);
    ck_assert_ptr_nonnull(doc);
    memcpy(doc, head, at);
    memset(doc + at, 'x', size - at);
    doc[PIECE - 1] = '\\'; /* the piece's last byte escapes the first of the next: a quote */
    doc[PIECE] = '"';
    memcpy(doc + size - 2, "\"}", 3);
    pf_world w;
    pf_open(&w, false);
    asker no = {0, 0};
    kiln_load_desc d = {.keep_going = ask, .ud = &no};
    ck_assert_int_eq(kiln_load(w.world, doc, size, &d), KILN_ERR_LIMIT);
    char want[128];
    snprintf(want, sizeof want, "kiln_load: stopped by the caller after %d of %zu bytes", PIECE, size);
    ck_assert_str_eq(kiln_world_error(w.world), want);
    ck_assert_int_eq(no.asks, 1);
    free(doc);
    pf_close(&w);
}

/* The depth scan reads the whole text before jansson does: over megabytes of it a caller with a
 * time limit (the console) is asked every 64 KiB there too, and its no stops the scan. */
KILN_TEST(depth, the_depth_scan_asks_keep_going_every_64_kib_and_stops_when_told) {
    enum { PAD = 4 << 20, PIECE = 64 << 10 };
    char *head = malloc(PAD + 64);
    ck_assert_ptr_nonnull(head);
    int at = sprintf(head, "{\"kiln\":1,\"tick\":1,\"a\":");
    memset(head + at, ' ', PAD);
    head[at + PAD] = '\0';
    char *doc = nested(head, 300, "}");
    size_t size = strlen(doc), deep = (size_t)at + PAD + 1 + 255 * 5; /* the 257th '[' */
    pf_world w;
    pf_open(&w, false);
    pf_populate(&w);
    uint64_t hash = kiln_world_hash(w.world);
    asker yes = {0, 1 << 30};
    kiln_load_desc d = {.keep_going = ask, .ud = &yes};
    ck_assert_int_eq(kiln_load(w.world, doc, size, &d), KILN_ERR_INVALID_ARGUMENT);
    assert_too_deep(w.world, "kiln_load");
    ck_assert_int_eq(yes.asks, (int)(deep / PIECE)); /* one at the start of every piece past the first */
    char want[128];
    asker no = {0, 0};
    d.ud = &no;
    ck_assert_int_eq(kiln_load(w.world, doc, size, &d), KILN_ERR_LIMIT);
    snprintf(want, sizeof want, "kiln_load: stopped by the caller after %d of %zu bytes", PIECE, size);
    ck_assert_str_eq(kiln_world_error(w.world), want);
    ck_assert_int_eq(no.asks, 1);
    /* a prefab's text (the reader prefabs and scenes share) alike */
    memcpy(head, "{\"x\":", 5);
    memset(head + 5, ' ', (size_t)at - 5);
    free(doc);
    doc = nested(head, 300, "}");
    kiln_prefab_load_desc pd = {.keep_going = ask, .ud = &yes};
    kiln_prefab *prefab = NULL;
    yes.asks = 0;
    ck_assert_int_eq(kiln_prefab_load(w.world, doc, size, &pd, &prefab), KILN_ERR_INVALID_ARGUMENT);
    assert_too_deep(w.world, "kiln_prefab_load");
    ck_assert_int_eq(yes.asks, (int)(deep / PIECE));
    no.asks = 0;
    pd.ud = &no;
    ck_assert_int_eq(kiln_prefab_load(w.world, doc, size, &pd, &prefab), KILN_ERR_LIMIT);
    ck_assert_ptr_null(prefab);
    snprintf(want, sizeof want, "kiln_prefab_load: stopped by the caller after %d of %zu bytes", PIECE, size);
    ck_assert_str_eq(kiln_world_error(w.world), want);
    ck_assert_int_eq(no.asks, 1);
    ck_assert_uint_eq(kiln_world_hash(w.world), hash);
    free(doc);
    free(head);
    pf_close(&w);
}
