/* test_persist_robust.c: Check suite for hostile input to the loaders: truncation at every
 * byte, bit flips, absurd counts, wrong versions and JSON of the wrong types, out of memory.
 * Every refused load leaves the world exactly as it was and says where the input is bad. */
#include <check.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* A target world that already holds a scene, and its fingerprint. */
typedef struct target {
    pf_world w;
    uint64_t hash;
    int64_t count;
} target;

static void target_open(target *t) {
    pf_open(&t->w, true);
    pf_populate(&t->w);
    t->hash = kiln_world_hash(t->w.world);
    t->count = kiln_entity_count(t->w.world);
}

static void assert_untouched(const target *t, const char *context) {
    ck_assert_msg(kiln_world_hash(t->w.world) == t->hash, "%s: the world changed", context);
    ck_assert_int_eq(kiln_entity_count(t->w.world), t->count);
}

static void scene(kiln_persist_format f, pf_bytes *dest) {
    pf_world a;
    pf_open(&a, false);
    pf_populate(&a);
    pf_save(a.world, f, dest);
    pf_close(&a);
}

/* Name's schema and an entity named text, for hand-written JSON saves. */
#define NAME_SCHEMA "{\"name\":\"Name\",\"size\":64,\"fields\":[{\"name\":\"text\",\"type\":\"char\",\"offset\":0,\"count\":64}]}"
#define NAMED(id, text) "{\"id\":" #id ",\"components\":{\"Name\":{\"text\":\"" text "\"}}}"

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP_WITH(hostile, .timeout = 60);

KILN_TEST_LOOP(hostile, a_save_cut_at_any_byte_is_refused_and_the_world_is_untouched, 0, 2) {
    pf_bytes saved;
    scene(_i ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY, &saved);
    target t;
    target_open(&t);
    /* the JSON text is whole without its final newline */
    size_t end = _i ? saved.size - 1 : saved.size;
    for (size_t len = 0; len < end; len++) {
        kiln_result r = kiln_load(t.w.world, saved.data, len, NULL);
        ck_assert_msg(r != KILN_OK, "a save cut to %zu of %zu bytes loaded", len, saved.size);
        ck_assert_msg(strncmp(kiln_world_error(t.w.world), "kiln_load: at ", 14) == 0,
                      "cut at %zu: '%s' does not say where", len, kiln_world_error(t.w.world));
        char context[32];
        snprintf(context, sizeof context, "cut at %zu", len);
        assert_untouched(&t, context);
    }
    ck_assert_int_eq(kiln_load(t.w.world, saved.data, saved.size, NULL), KILN_OK);
    pf_bytes_free(&saved);
    pf_close(&t.w);
}

/* A binary save cut inside its magic is a cut save, not some other input: the message says
 * so (it said "neither a kiln save nor a JSON document"). */
KILN_TEST(hostile, a_save_cut_inside_its_magic_is_refused_as_truncated) {
    pf_bytes saved;
    scene(KILN_PERSIST_BINARY, &saved);
    target t;
    target_open(&t);
    for (size_t len = 1; len < 8; len++) {
        ck_assert_int_eq(kiln_load(t.w.world, saved.data, len, NULL), KILN_ERR_INVALID_ARGUMENT);
        ck_assert_str_eq(kiln_world_error(t.w.world), "kiln_load: at byte 0: truncated in the header");
        assert_untouched(&t, "cut in the magic");
    }
    ck_assert_int_eq(kiln_load(t.w.world, "KILX", 4, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(t.w.world), "kiln_load: at byte 0: neither a kiln save nor a JSON document");
    pf_bytes_free(&saved);
    pf_close(&t.w);
}

/* A caller that may stop a load (kiln_load_desc.keep_going): counts its questions. */
typedef struct asker {
    int calls, stop_at; /* stop_at: the call that answers false (0: none) */
} asker;

static bool ask(void *ud) {
    asker *a = ud;
    return ++a->calls != a->stop_at;
}

KILN_TEST_LOOP(hostile, flipped_bits_load_or_are_refused_leaving_the_world_untouched, 0, 2) {
    pf_bytes saved;
    scene(_i ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY, &saved);
    target t, twin;
    target_open(&t);
    target_open(&twin);
    kiln_snapshot *snap = NULL, *twin_snap = NULL;
    ck_assert_int_eq(kiln_snapshot_create(t.w.world, &snap), KILN_OK);
    ck_assert_int_eq(kiln_snapshot_create(twin.w.world, &twin_snap), KILN_OK);
    unsigned char *copy = malloc(saved.size);
    uint64_t state = 0x5eed + (uint64_t)_i;
    int refused = 0, loaded = 0;
    for (int round = 0; round < 1500; round++) {
        memcpy(copy, saved.data, saved.size);
        int flips = 1 + round % 3;
        for (int f = 0; f < flips; f++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            size_t bit = (size_t)(state >> 33) % (saved.size * 8);
            copy[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        }
        /* the same into a twin asked to keep going (the JSON text then reaches jansson in
         * pieces): a refusal must read the same as without the question, a load land the same */
        asker yes = {0, 0};
        kiln_load_desc ask_d = {.keep_going = ask, .ud = &yes};
        kiln_result asked = kiln_load(twin.w.world, copy, saved.size, &ask_d);
        kiln_result r = kiln_load(t.w.world, copy, saved.size, NULL);
        ck_assert_int_eq(asked, r);
        if (r != KILN_OK) ck_assert_str_eq(kiln_world_error(twin.w.world), kiln_world_error(t.w.world));
        ck_assert_int_eq(kiln_world_hash(twin.w.world), kiln_world_hash(t.w.world));
        if (asked == KILN_OK) ck_assert_int_eq(kiln_snapshot_restore(twin.w.world, twin_snap), KILN_OK);
        if (r != KILN_OK) {
            refused++;
            ck_assert_msg(strncmp(kiln_world_error(t.w.world), "kiln_load: ", 11) == 0, "%s",
                          kiln_world_error(t.w.world));
            assert_untouched(&t, "a refused flip");
        } else {
            loaded++;
            ck_assert_int_le(kiln_entity_count(t.w.world), t.count + 7);
            (void)kiln_world_hash(t.w.world); /* whatever landed is readable */
            ck_assert_int_eq(kiln_snapshot_restore(t.w.world, snap), KILN_OK);
        }
    }
    ck_assert_int_gt(refused, 0);
    free(copy);
    kiln_snapshot_destroy(snap);
    kiln_snapshot_destroy(twin_snap);
    pf_bytes_free(&saved);
    pf_close(&t.w);
    pf_close(&twin.w);
}

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

static void count_run(const kiln_system_ctx *ctx) { ++*(int *)ctx->user; }

/* A save at the last tick loads; advancing from it would write a save no load accepts, and a
 * frame run there would stamp its changes with the tick before. */
KILN_TEST(hostile, a_world_loaded_at_the_last_tick_refuses_to_advance_and_saves_a_loadable_tick) {
    pf_bytes saved, again;
    scene(KILN_PERSIST_BINARY, &saved);
    put64(saved.data + 16, KILN_SAVE_TICK_MAX);
    target t;
    target_open(&t);
    ck_assert_int_eq(kiln_load(t.w.world, saved.data, saved.size, NULL), KILN_OK);
    ck_assert_uint_eq(kiln_tick_current(t.w.world), KILN_TICK_MAX);
    ck_assert_uint_eq(kiln_tick_advance(t.w.world), 0);
    ck_assert_str_eq(kiln_world_error(t.w.world), "kiln_tick_advance: the world tick is at its last, 2^53 - 1");
    ck_assert_uint_eq(kiln_tick_current(t.w.world), KILN_TICK_MAX);
    int runs = 0;
    kiln_schedule *frame = kiln_schedule_create(t.w.world, NULL);
    ck_assert_ptr_nonnull(frame);
    ck_assert_int_eq(kiln_schedule_add(frame, &(kiln_system_desc){.name = "count", .run = count_run, .user = &runs}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(frame, 1.0 / 60), KILN_ERR_LIMIT);
    ck_assert_str_eq(kiln_world_error(t.w.world), "kiln_schedule_run: the world tick is at its last, 2^53 - 1");
    ck_assert_int_eq(runs, 0);
    ck_assert_uint_eq(kiln_tick_current(t.w.world), KILN_TICK_MAX);
    kiln_schedule_destroy(frame);
    pf_save(t.w.world, KILN_PERSIST_BINARY, &again);
    pf_world fresh;
    pf_open(&fresh, false);
    ck_assert_int_eq(kiln_load(fresh.world, again.data, again.size, NULL), KILN_OK);
    ck_assert_uint_eq(kiln_tick_current(fresh.world), KILN_TICK_MAX);
    pf_close(&fresh);
    pf_bytes_free(&again);
    pf_bytes_free(&saved);
    pf_close(&t.w);
}

KILN_TEST(hostile, a_wrong_version_or_absurd_counts_are_refused_with_the_byte) {
    pf_bytes saved;
    scene(KILN_PERSIST_BINARY, &saved);
    target t;
    target_open(&t);
    unsigned char *copy = malloc(saved.size);
    memcpy(copy, saved.data, saved.size);
    put32(copy + 8, 5);
    ck_assert_int_eq(kiln_load(t.w.world, copy, saved.size, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(t.w.world),
                     "kiln_load: at byte 12: version 5 is not supported (this build reads versions 1 to 4)");
    put32(copy + 8, 0);
    ck_assert_int_eq(kiln_load(t.w.world, copy, saved.size, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(t.w.world),
                     "kiln_load: at byte 12: version 0 is not supported (this build reads versions 1 to 4)");
    memcpy(copy, saved.data, saved.size);
    put64(copy + 36, (uint64_t)1 << 40); /* entities */
    ck_assert_int_eq(kiln_load(t.w.world, copy, saved.size, NULL), KILN_ERR_LIMIT);
    ck_assert_str_eq(kiln_world_error(t.w.world),
                     "kiln_load: at byte 52: the header's counts are larger than the input");
    memcpy(copy, saved.data, saved.size);
    put32(copy + 24, 0x7fffffff); /* schemas */
    ck_assert_int_eq(kiln_load(t.w.world, copy, saved.size, NULL), KILN_ERR_LIMIT);
    memcpy(copy, saved.data, saved.size);
    put64(copy + 16, KILN_SAVE_TICK_MAX + 1); /* a tick past what Lua numbers hold exactly */
    ck_assert_int_eq(kiln_load(t.w.world, copy, saved.size, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(t.w.world),
                     "kiln_load: at byte 24: the tick 9007199254740992 is past 2^53 - 1, the most a version 4 save holds");
    put64(copy + 16, UINT64_MAX); /* one the world would wrap from at its next tick */
    ck_assert_int_eq(kiln_load(t.w.world, copy, saved.size, NULL), KILN_ERR_INVALID_ARGUMENT);
    /* version 2's header, whose 32-bit tick took no more than 2^31 - 1 */
    memcpy(copy, saved.data, saved.size);
    put32(copy + 8, 2);
    put32(copy + 16, 0x80000000u);
    memmove(copy + 20, copy + 24, saved.size - 24);
    ck_assert_int_eq(kiln_load(t.w.world, copy, saved.size - 4, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(t.w.world),
                     "kiln_load: at byte 20: the tick 2147483648 is past 2^31 - 1, the most a version 2 save holds");
    memcpy(copy, saved.data, saved.size);
    memcpy(copy, "KILNSAVX", 8);
    ck_assert_int_eq(kiln_load(t.w.world, copy, saved.size, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(t.w.world), "kiln_load: at byte 0: neither a kiln save nor a JSON document");
    assert_untouched(&t, "absurd");
    free(copy);
    pf_bytes_free(&saved);
    pf_close(&t.w);
}

#define SCORE_SCHEMA "\"components\":[{\"name\":\"Score\",\"size\":16,\"fields\":[{\"name\":\"best\",\"type\":\"entity\",\"offset\":8,\"count\":1}]}]"
#define POS_SCHEMA "\"components\":[{\"name\":\"Position\",\"size\":12,\"fields\":[{\"name\":\"x\",\"type\":\"float\",\"offset\":0,\"count\":1}]}]"

static const struct {
    const char *doc, *message;
} bad_json[] = {
    {"{\"kiln\":3,\"tick\":1," POS_SCHEMA ",\"entities\":[]}",
     "kiln_load: at kiln: version 3 is not supported (this build reads versions 1 and 2)"},
    {"{\"kiln\":2,\"tick\":1," POS_SCHEMA ",\"entities\":[]}", "kiln_load: at slots: an integer expected, got nothing"},
    {"{\"kiln\":2,\"tick\":1,\"slots\":2,\"free\":[4294967297,8589934592,1]," POS_SCHEMA ",\"entities\":[]}",
     "kiln_load: at free: 3 handles, more than the 2 slots"},
    {"{\"kiln\":2,\"tick\":1,\"slots\":2,\"free\":[4294967298]," POS_SCHEMA ",\"entities\":[]}",
     "kiln_load: at free[0]: not a handle below the slot count 2"},
    {"{\"kiln\":2,\"tick\":1,\"slots\":2,\"free\":[1]," POS_SCHEMA ",\"entities\":[]}",
     "kiln_load: at free[0]: not a handle below the slot count 2"},
    {"{\"kiln\":2,\"tick\":1,\"slots\":1,\"free\":[4294967296]," POS_SCHEMA
     ",\"entities\":[{\"id\":4294967297,\"components\":{}}]}",
     "kiln_load: at entities: 1 entities and 1 free slots are more than the 1 slots"},
    {"{\"kiln\":2,\"tick\":1,\"slots\":3,\"free\":[4294967297]," POS_SCHEMA
     ",\"entities\":[{\"id\":4294967297,\"components\":{}}]}",
     "kiln_load: slot 1 is on the free list and holds a saved entity"},
    {"{\"kiln\":2,\"tick\":1,\"slots\":3,\"free\":[4294967296,8589934592]," POS_SCHEMA
     ",\"entities\":[{\"id\":4294967297,\"components\":{}}]}",
     "kiln_load: slot 0 appears twice in the free list"},
    {"{\"kiln\":1,\"tick\":\"one\"," POS_SCHEMA ",\"entities\":[]}",
     "kiln_load: at tick: an integer expected, got a string"},
    {"{\"kiln\":1,\"tick\":9007199254740992," POS_SCHEMA ",\"entities\":[]}",
     "kiln_load: at tick: 9007199254740992 is out of range"},
    {"{\"kiln\":1,\"tick\":18446744073709551615," POS_SCHEMA ",\"entities\":[]}",
     "kiln_load: at line 1 column 37 (byte 37): too big integer near '18446744073709551615' (no number past "
     "9223372036854775807 parses: a uint64 field takes one as a string of digits)"},
    {"{\"kiln\":1,\"tick\":1,\"components\":{},\"entities\":[]}",
     "kiln_load: at components: an array of components expected, got an object"},
    {"{\"kiln\":1,\"tick\":1," POS_SCHEMA ",\"entities\":[{\"id\":4294967296,\"components\":{\"Position\":{\"x\":\"fast\"}}}]}",
     "kiln_load: at entities[0].components.Position.x: a number expected, got a string"},
    {"{\"kiln\":1,\"tick\":1," POS_SCHEMA ",\"entities\":[{\"id\":\"e1\",\"components\":{}}]}",
     "kiln_load: at entities[0].id: an integer expected, got a string"},
    {"{\"kiln\":1,\"tick\":1," POS_SCHEMA ",\"entities\":[{\"id\":4294967296,\"components\":{\"Speed\":{}}}]}",
     "kiln_load: at entities[0].components: 'Speed' is not in the components list"},
    {"{\"kiln\":1,\"tick\":1," POS_SCHEMA ",\"entities\":[{\"id\":4294967296,\"components\":{\"Position\":{\"w\":1}}}]}",
     "kiln_load: at entities[0].components.Position.w: 'Position' has no such field"},
    {"{\"kiln\":1,\"tick\":1," POS_SCHEMA ",\"entities\":[],\"extra\":1}", "kiln_load: at extra: unknown key"},
    {"{\"kiln\":1,\"tick\":1,\"components\":[{\"name\":\"Position\",\"size\":12,\"fields\":[{\"name\":\"x\",\"type\":\"quad\",\"offset\":0,\"count\":1}]}],\"entities\":[]}",
     "kiln_load: at components[0].fields[0].type: unknown type 'quad'"},
    {"{\"kiln\":1,\"tick\":1,\"components\":[{\"name\":\"Position\",\"size\":12,\"fields\":[{\"name\":\"x\",\"type\":\"float\",\"offset\":10,\"count\":1}]}],\"entities\":[]}",
     "kiln_load: at components[0].fields[0]: field 'x' lies outside its component"},
    {"{\"kiln\":1,\"tick\":1," POS_SCHEMA ",\"entities\":[{\"id\":4294967296,\"components\":{}},{\"id\":4294967296,\"components\":{}}]}",
     "kiln_load: entity 0v1 appears twice (or shares its slot)"},
    {"{\"kiln\":1,\"tick\":1," POS_SCHEMA ",\"entities\":[{\"id\":4294967296,\"components\":{}},{\"id\":5,\"components\":{}}]}",
     "kiln_load: group 0 row 1 holds an invalid handle 5"},
    {"{\"kiln\":1,\"tick\":1," POS_SCHEMA ",\"entities\":[{\"id\":4294967296,\"components\":{}},{\"id\":0,\"components\":{}}]}",
     "kiln_load: at entities[1].id: 0 is out of range"},
    {"{\"kiln\":1,\"tick\":1," POS_SCHEMA ",\"entities\":[{\"id\":9007199254740993,\"components\":{}}]}",
     "kiln_load: at entities[0].id: 9007199254740993 is out of range"},
    {"{\"kiln\":1,\"tick\":1," POS_SCHEMA ",\"entities\":[{\"id\":4294967296,\"components\":{\"Position\":{\"x\":1e300}}}]}",
     "kiln_load: at entities[0].components.Position.x: 1e+300 is out of range for a float"},
    /* a saved handle past 64 bits, or not plain digits, is refused rather than clamped */
    {"{\"kiln\":1,\"tick\":1," SCORE_SCHEMA ",\"entities\":[{\"id\":4294967296,\"components\":{\"Score\":{\"best\":\"99999999999999999999\"}}}]}",
     "kiln_load: at entities[0].components.Score.best: an unsigned integer (at most 64 bits) expected"},
    {"{\"kiln\":1,\"tick\":1," SCORE_SCHEMA ",\"entities\":[{\"id\":4294967296,\"components\":{\"Score\":{\"best\":\"+5\"}}}]}",
     "kiln_load: at entities[0].components.Score.best: an unsigned integer expected"},
    {"{\"kiln\":1,\"tick\":1," POS_SCHEMA ",\"entities\":[{\"id\":4294967296,\"components\":{\"Position\":{\"x\":1}}}", 
     "kiln_load: at line 1 column 187 (byte 187): ']' expected near end of file"},
};

KILN_TEST(hostile, json_of_the_wrong_shape_is_refused_naming_the_path) {
    target t;
    target_open(&t);
    for (size_t i = 0; i < sizeof bad_json / sizeof bad_json[0]; i++) {
        kiln_result r = kiln_load(t.w.world, bad_json[i].doc, strlen(bad_json[i].doc), NULL);
        ck_assert_msg(r != KILN_OK, "document %zu loaded", i);
        ck_assert_str_eq(kiln_world_error(t.w.world), bad_json[i].message);
        assert_untouched(&t, bad_json[i].doc);
    }
    pf_close(&t.w);
}

/* snprintf writes 1.5e39 as "1,5e+39" under a decimal-comma LC_NUMERIC; the message must not. */
KILN_TEST(hostile, a_number_in_a_refusal_has_a_decimal_point_in_a_comma_locale) {
    static const char doc[] = "{\"kiln\":1,\"tick\":1," POS_SCHEMA ",\"entities\":[{\"id\":4294967296,"
                              "\"components\":{\"Position\":{\"x\":1.5e39}}}]}";
    if (!setlocale(LC_NUMERIC, "de_DE.UTF-8")) {
        fprintf(stderr, "skipped: no de_DE.UTF-8 locale (scripts/deps.sh installs it)\n");
        return;
    }
    char shown[32], message[160];
    snprintf(shown, sizeof shown, "%g", 1.5e39);
    target t;
    target_open(&t);
    kiln_result r = kiln_load(t.w.world, doc, sizeof doc - 1, NULL);
    snprintf(message, sizeof message, "%s", kiln_world_error(t.w.world));
    setlocale(LC_NUMERIC, "C");
    ck_assert_str_eq(shown, "1,5e+39"); /* the locale is in force */
    ck_assert_int_eq(r, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(message, "kiln_load: at entities[0].components.Position.x: 1.5e+39 is out of range for a float");
    assert_untouched(&t, "comma locale");
    pf_close(&t.w);
}

KILN_TEST(hostile, a_parent_cycle_in_the_file_is_refused_by_the_parent_check) {
    static const char doc[] =
        "{\"kiln\":1,\"tick\":1,\"components\":[{\"name\":\"Parent\",\"size\":8,\"fields\":[{\"name\":"
        "\"entity\",\"type\":\"entity\",\"offset\":0,\"count\":1}]}],\"entities\":["
        "{\"id\":4294967296,\"components\":{\"Parent\":{\"entity\":4294967297}}},"
        "{\"id\":4294967297,\"components\":{\"Parent\":{\"entity\":4294967296}}}]}";
    target t;
    target_open(&t);
    ck_assert_int_eq(kiln_load(t.w.world, doc, sizeof doc - 1, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kiln_world_error(t.w.world), "component 'Parent'") != NULL, "%s",
                  kiln_world_error(t.w.world));
    assert_untouched(&t, "cycle");
    pf_close(&t.w);
}

/* Odd loops load JSON; the last two a save with names and the random resources, which the
 * load registers, into a world whose free list has an order of its own. */
KILN_TEST_LOOP(hostile, running_out_of_memory_anywhere_in_a_load_leaves_the_world_untouched, 0, 4) {
    bool named = _i >= 2;
    pf_bytes saved;
    (named ? pf_save_named : scene)(_i % 2 ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY, &saved);
    test_allocator alloc;
    test_allocator_init(&alloc);
    target t;
    pf_open_on(&t.w, true, &alloc);
    pf_populate(&t.w);
    if (named) ck_assert_int_eq(kiln_despawn(t.w.world, t.w.e[2]), KILN_OK);
    t.hash = kiln_world_hash(t.w.world);
    t.count = kiln_entity_count(t.w.world);
    int64_t n = 0;
    for (;; n++) {
        test_allocator_fail_after(&alloc, n);
        kiln_result r = kiln_load(t.w.world, saved.data, saved.size, NULL);
        test_allocator_fail_never(&alloc);
        if (r == KILN_OK) break;
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        assert_untouched(&t, kiln_world_error(t.w.world));
        ck_assert_int_eq(kiln_name_lookup(t.w.world, "hero"), KILN_NULL_ENTITY);
    }
    ck_assert_int_gt(n, 3);
    ck_assert_int_eq(kiln_entity_count(t.w.world), t.count + 7);
    if (named) ck_assert_int_ne(kiln_name_lookup(t.w.world, "sidekick"), KILN_NULL_ENTITY);
    pf_bytes_free(&saved);
    pf_close(&t.w);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

KILN_TEST(hostile, saving_a_value_with_hooks_without_a_codec_names_entity_and_component) {
    kiln_world *w = kiln_world_create(NULL);
    test_hook_log log;
    memset(&log, 0, sizeof log);
    kiln_component owned = test_register_owned(w, &log);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(w, &e), KILN_OK);
    ck_assert_int_eq(kiln_add(w, e, owned, NULL), KILN_OK);
    pf_bytes out = {0};
    ck_assert_int_eq(kiln_save(w, NULL, pf_bytes_write, &out), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_save: entity 0v1 component 'Owned' has hooks (it owns "
                                          "something) and no codec was given to save it");
    pf_bytes_free(&out);
    kiln_world_destroy(w);
}

KILN_TEST_LOOP(hostile, running_out_of_memory_in_a_load_into_a_fresh_world_leaves_it_empty, 0, 2) {
    pf_bytes saved;
    scene(_i ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY, &saved);
    test_allocator alloc;
    test_allocator_init(&alloc);
    pf_world w;
    pf_open_on(&w, true, &alloc);
    uint64_t empty = kiln_world_hash(w.world);
    int64_t n = 0;
    for (;; n++) {
        test_allocator_fail_after(&alloc, n);
        kiln_result r = kiln_load(w.world, saved.data, saved.size, NULL);
        test_allocator_fail_never(&alloc);
        if (r == KILN_OK) break;
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        ck_assert_int_eq(kiln_entity_count(w.world), 0);
        ck_assert_uint_eq(kiln_world_hash(w.world), empty);
    }
    ck_assert_int_gt(n, 3);
    ck_assert_int_eq(kiln_entity_count(w.world), 7);
    pf_bytes_free(&saved);
    pf_close(&w);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

KILN_TEST(hostile, an_addon_component_saved_with_another_layout_is_refused_before_it_is_registered) {
    static const char *const docs[] = {
        "{\"kiln\":1,\"tick\":1,\"components\":[{\"name\":\"Name\",\"size\":4,\"fields\":[{\"name\":\"text\","
        "\"type\":\"int32\",\"offset\":0,\"count\":1}]}],\"entities\":[{\"id\":4294967296,\"components\":"
        "{\"Name\":{\"text\":5}}}]}",
        "{\"kiln\":1,\"tick\":1,\"components\":[{\"name\":\"RandomSeed\",\"size\":8,\"fields\":[{\"name\":\"seed\","
        "\"type\":\"double\",\"offset\":0,\"count\":1}]}],\"entities\":[],\"resources\":{\"RandomSeed\":{\"seed\":1}}}",
    };
    static const char *const fields[] = {"field 'Name.text'", "field 'RandomSeed.seed'"};
    for (int i = 0; i < 2; i++) {
        target t;
        target_open(&t);
        int32_t components = kiln_component_count(t.w.world);
        ck_assert_int_eq(kiln_load(t.w.world, docs[i], strlen(docs[i]), NULL), KILN_ERR_LAYOUT_MISMATCH);
        ck_assert_msg(strstr(kiln_world_error(t.w.world), fields[i]) != NULL, "%s", kiln_world_error(t.w.world));
        assert_untouched(&t, docs[i]);
        ck_assert_int_eq(kiln_component_count(t.w.world), components); /* neither Name nor the random pair */
        ck_assert_int_eq(kiln_component_lookup(t.w.world, "Name"), 0);
        ck_assert_int_eq(kiln_component_lookup(t.w.world, "RandomSeed"), 0);
        pf_close(&t.w);
    }
}

/* A name the file gives twice: the slots, entities and values are as they were, and the world
 * has no names, nor Name (registered only once everything else passed). */
KILN_TEST(hostile, a_load_refused_for_a_name_given_twice_leaves_the_hash_and_registers_no_name) {
    static const char doc[] = "{\"kiln\":1,\"tick\":1,\"components\":[" NAME_SCHEMA "],\"entities\":["
                              NAMED(4294967296, "twin") "," NAMED(4294967297, "solo") "," NAMED(4294967298, "twin") "]}";
    target t;
    target_open(&t);
    ck_assert_int_eq(kiln_load(t.w.world, doc, sizeof doc - 1, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kiln_world_error(t.w.world), "'twin'") != NULL, "%s", kiln_world_error(t.w.world));
    assert_untouched(&t, "twin names");
    ck_assert_int_eq(kiln_name_lookup(t.w.world, "solo"), KILN_NULL_ENTITY);
    ck_assert_int_eq(kiln_component_lookup(t.w.world, "Name"), 0);
    pf_close(&t.w);
}

/* A Name resource is asked Name's check as any resource is asked its hook: whether the world has
 * Name or the load registers it, a text with no end (64 bytes) and a name an entity of the file
 * holds are refused alike, and a refused load registers no Name. */
KILN_TEST(hostile, a_name_resource_is_refused_alike_whether_or_not_the_world_has_name) {
    static const char *const docs[] = {
        "{\"kiln\":1,\"tick\":1,\"components\":[" NAME_SCHEMA "],\"entities\":[" NAMED(4294967296, "bob")
        "],\"resources\":{\"Name\":{\"text\":\"bob\"}}}",
        "{\"kiln\":1,\"tick\":1,\"components\":[" NAME_SCHEMA "],\"entities\":[],\"resources\":{\"Name\":"
        "{\"text\":\"0123456789012345678901234567890123456789012345678901234567890123\"}}}",
    };
    static const char *const why[] = {"name 'bob' is taken by entity", "this one has no end"};
    for (int i = 0; i < 2; i++)
        for (int named = 0; named < 2; named++) {
            target t;
            target_open(&t);
            if (named) {
                ck_assert_int_eq(kiln_name_init(t.w.world, NULL), KILN_OK);
                t.hash = kiln_world_hash(t.w.world);
            }
            ck_assert_int_eq(kiln_load(t.w.world, docs[i], strlen(docs[i]), NULL), KILN_ERR_INVALID_ARGUMENT);
            ck_assert_msg(strstr(kiln_world_error(t.w.world), why[i]) != NULL, "doc %d, %s: %s", i,
                          named ? "with Name" : "without", kiln_world_error(t.w.world));
            assert_untouched(&t, why[i]);
            if (!named) ck_assert_int_eq(kiln_component_lookup(t.w.world, "Name"), 0);
            pf_close(&t.w);
        }
}

/* A JSON save of n entities whose only component is Parent: entity i (slot i) links to
 * link[i] (-1: no parent). */
static char *links_doc(const int *link, int n) {
    size_t cap = 256 + (size_t)n * 96, at = 0;
    char *doc = malloc(cap);
    at += (size_t)snprintf(doc + at, cap - at,
                           "{\"kiln\":1,\"tick\":1,\"components\":[{\"name\":\"Parent\",\"size\":8,\"fields\":"
                           "[{\"name\":\"entity\",\"type\":\"entity\",\"offset\":0,\"count\":1}]}],\"entities\":[");
    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(doc + at, cap - at, "%s{\"id\":%llu,\"components\":{\"Parent\":{\"entity\":%llu}}}",
                               i ? "," : "", (unsigned long long)kiln_entity_make((uint32_t)i, 1),
                               link[i] < 0 ? 0ull : (unsigned long long)kiln_entity_make((uint32_t)link[i], 1));
    snprintf(doc + at, cap - at, "]}");
    return doc;
}

/* The first entity the Parent check refuses when the links are checked one by one in file
 * order (a parent chain that holds the entity or has more than 256 nodes), or -1. */
static int first_refused(const int *link, int n) {
    for (int i = 0; i < n; i++) {
        if (link[i] < 0) continue;
        if (link[i] == i) return i;
        int cur = link[i], depth = 0;
        for (; cur >= 0; depth++, cur = link[cur] == cur ? -1 : link[cur])
            if (cur == i || depth >= 256) return i;
    }
    return -1;
}

KILN_TEST(hostile, a_load_refuses_parent_links_exactly_where_checking_them_one_by_one_does) {
    enum { N = 700 };
    int link[N];
    uint64_t state = 0x9a7e47;
    int loaded = 0, refused = 0;
    for (int round = 0; round < 40; round++) {
        /* chains around the depth limit, then random links (cycles among them) in later rounds */
        int chain = 250 + round % 12;
        for (int i = 0; i < N; i++) link[i] = i % chain ? i - 1 : -1;
        for (int k = 0; k < round / 4; k++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            int from = (int)((state >> 33) % N);
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            link[from] = (int)((state >> 33) % (N + 1)) - 1;
        }
        char *doc = links_doc(link, N);
        target t;
        pf_open(&t.w, false); /* a fresh world: the handles are kept, entity i stays slot i */
        t.hash = kiln_world_hash(t.w.world);
        t.count = 0;
        int want = first_refused(link, N);
        kiln_result r = kiln_load(t.w.world, doc, strlen(doc), NULL);
        if (want < 0) {
            ck_assert_msg(r == KILN_OK, "round %d: %s", round, kiln_world_error(t.w.world));
            loaded++;
        } else {
            refused++;
            char name[64];
            snprintf(name, sizeof name, "kiln_load: entity %dv1 (%dv1 in the file) component 'Parent'", want, want);
            ck_assert_int_eq(r, KILN_ERR_INVALID_ARGUMENT);
            ck_assert_msg(strncmp(kiln_world_error(t.w.world), name, strlen(name)) == 0, "round %d: wanted %s, got %s",
                          round, name, kiln_world_error(t.w.world));
            assert_untouched(&t, "refused links");
        }
        free(doc);
        pf_close(&t.w);
    }
    ck_assert_int_gt(loaded, 5);
    ck_assert_int_gt(refused, 5);
}

KILN_TEST(hostile, a_file_load_refuses_a_device_or_a_pipe_that_might_never_end) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_prefab *prefab = NULL;
    kiln_instance *inst = NULL;
    /* /dev/zero never ends: read whole, it would take all memory */
    ck_assert_int_eq(kiln_load_file(w, "/dev/zero", NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_load_file: /dev/zero is not a regular file");
    ck_assert_int_eq(kiln_prefab_load_file(w, "/dev/zero", NULL, &prefab), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_prefab_load_file: /dev/zero is not a regular file");
    ck_assert_int_eq(kiln_instantiate_file(w, "/dev/zero", NULL, &inst), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_instantiate_file: /dev/zero is not a regular file");
    ck_assert_int_eq(kiln_load_file(w, "/", NULL), KILN_ERR_INVALID_ARGUMENT); /* a folder */
    ck_assert_str_eq(kiln_world_error(w), "kiln_load_file: / is not a regular file");
    /* a pipe no one writes to: opening it to read would wait for a writer for good */
    char dir[] = "/tmp/kiln-pipe-XXXXXX", fifo[64], want[128];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/save.json", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    const char *calls[3] = {"kiln_load_file", "kiln_prefab_load_file", "kiln_instantiate_file"};
    for (int k = 0; k < 3; k++) {
        kiln_result r = k == 0   ? kiln_load_file(w, fifo, NULL)
                        : k == 1 ? kiln_prefab_load_file(w, fifo, NULL, &prefab)
                                 : kiln_instantiate_file(w, fifo, NULL, &inst);
        ck_assert_int_eq(r, KILN_ERR_INVALID_ARGUMENT);
        snprintf(want, sizeof want, "%s: %s is not a regular file", calls[k], fifo);
        ck_assert_str_eq(kiln_world_error(w), want);
    }
    ck_assert_int_eq(unlink(fifo), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    ck_assert_ptr_null(prefab);
    ck_assert_ptr_null(inst);
    ck_assert_int_eq(kiln_entity_count(w), 0);
    kiln_world_destroy(w);
}

/* Stops a load after `left` questions (a guard: a read that never ends fails the check). */
static bool ask_a_few(void *ud) { return --*(int *)ud > 0; }

/* A regular file can read on past its size: /proc/self/pagemap says 0 bytes and reads 8 for
 * every page of the address space (hundreds of GiB), as /dev/zero would. A file load reads
 * what the size said, and refuses a file with more. */
KILN_TEST(hostile, a_file_load_refuses_a_file_that_reads_on_past_its_size) {
    static const char path[] = "/proc/self/pagemap";
    if (access(path, R_OK) != 0) return; /* (no procfs here) */
    kiln_world *w = kiln_world_create(NULL);
    int left = 4; /* 4 MiB read: the size was passed long before */
    kiln_load_desc d = {.keep_going = ask_a_few, .ud = &left};
    ck_assert_int_eq(kiln_load_file(w, path, &d), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_load_file: /proc/self/pagemap reads on past its size (0 bytes): "
                                          "it is not a file of fixed size");
    kiln_prefab *prefab = NULL;
    kiln_instance *inst = NULL;
    ck_assert_int_eq(kiln_prefab_load_file(w, path, NULL, &prefab), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kiln_world_error(w), "kiln_prefab_load_file: /proc/self/pagemap reads on"));
    ck_assert_int_eq(kiln_instantiate_file(w, path, NULL, &inst), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(kiln_world_error(w), "kiln_instantiate_file: /proc/self/pagemap reads on"));
    ck_assert_ptr_null(prefab);
    ck_assert_ptr_null(inst);
    ck_assert_int_eq(kiln_entity_count(w), 0);
    kiln_world_destroy(w);
}

/* The bytes of the file at path (at most size - 1, NUL-terminated), or -1. */
static long slurp(const char *path, char *dest, size_t size) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t n = fread(dest, 1, size - 1, f);
    fclose(f);
    dest[n] = 0;
    return (long)n;
}

/* kiln_save_file writes path.tmp, then renames it: whatever had that name is replaced, never
 * written through. A link planted there to another file leaves that file as it was; a pipe
 * planted there does not make the save wait for a reader. */
KILN_TEST(hostile, a_file_save_writes_through_no_link_and_waits_on_no_pipe_at_its_temporary_name) {
    pf_world t;
    pf_open(&t, false);
    pf_populate(&t);
    int64_t entities = kiln_entity_count(t.world);
    uint64_t hash = kiln_world_hash(t.world);
    char dir[] = "/tmp/kiln-save-XXXXXX", path[64], tmp[72], victim[64], text[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/world.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    FILE *f = fopen(victim, "wb");
    ck_assert_ptr_nonnull(f);
    fputs("the victim's bytes", f);
    fclose(f);
    for (int k = 0; k < 2; k++) {
        if (k == 0) ck_assert_int_eq(symlink(victim, tmp), 0);
        else ck_assert_int_eq(mkfifo(tmp, 0600), 0);
        ck_assert_int_eq(kiln_save_file(t.world, path, &(kiln_save_desc){.format = KILN_PERSIST_JSON}), KILN_OK);
        ck_assert_int_eq(slurp(victim, text, sizeof text), 18);
        ck_assert_str_eq(text, "the victim's bytes");
        ck_assert_int_eq(access(tmp, F_OK), -1); /* renamed: nothing left at the name */
        pf_world back;
        pf_open(&back, k == 1);
        ck_assert_int_eq(kiln_load_file(back.world, path, NULL), KILN_OK);
        ck_assert_int_eq(kiln_entity_count(back.world), entities);
        ck_assert_uint_eq(kiln_world_hash(back.world), hash);
        pf_close(&back);
    }
    /* a folder at the name cannot be replaced: the save says so, and path is untouched */
    ck_assert_int_eq(mkdir(tmp, 0700), 0);
    ck_assert_int_eq(kiln_save_file(t.world, path, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strncmp(kiln_world_error(t.world), "kiln_save_file: cannot write ", 29) == 0, "%s",
                  kiln_world_error(t.world));
    ck_assert_int_eq(rmdir(tmp), 0);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(unlink(victim), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    pf_close(&t);
}

/* Another save to the same path, simulated from desc.progress: it unlinks path.tmp and starts
 * its own file there. The first save renamed that file, half written, over path and returned
 * KILN_OK: path no longer loaded, and the older save was gone. */
static const char *other_tmp;
static bool another_save_starts(void *ud, int64_t units) {
    (void)ud, (void)units;
    if (!other_tmp) return true;
    ck_assert_int_eq(unlink(other_tmp), 0);
    FILE *f = fopen(other_tmp, "wb");
    ck_assert_ptr_nonnull(f);
    fputs("KILN", f); /* the first bytes of another save, still being written */
    fclose(f);
    other_tmp = NULL;
    return true;
}

KILN_TEST(hostile, a_file_save_whose_temporary_file_another_save_took_fails_and_leaves_path_whole) {
    pf_world t;
    pf_open(&t, false);
    pf_populate(&t);
    uint64_t hash = kiln_world_hash(t.world);
    char dir[] = "/tmp/kiln-save-XXXXXX", path[64], tmp[72], text[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/world.bin", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ck_assert_int_eq(kiln_save_file(t.world, path, NULL), KILN_OK);
    other_tmp = tmp;
    ck_assert_int_eq(kiln_save_file(t.world, path, &(kiln_save_desc){.progress = another_save_starts}),
                     KILN_ERR_INVALID_ARGUMENT);
    char want[256];
    snprintf(want, sizeof want, "kiln_save_file: %s was replaced while the save ran (another save to the same "
             "path?); %s is left as it was", tmp, path);
    ck_assert_str_eq(kiln_world_error(t.world), want);
    ck_assert_int_eq(slurp(tmp, text, sizeof text), 4); /* the other save's file, left to it */
    pf_world back;
    pf_open(&back, false);
    ck_assert_int_eq(kiln_load_file(back.world, path, NULL), KILN_OK);
    ck_assert_uint_eq(kiln_world_hash(back.world), hash);
    pf_close(&back);
    ck_assert_int_eq(unlink(tmp), 0);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    pf_close(&t);
}

/* ---- a caller that may stop a load (kiln_load_desc.keep_going) ---------------------------- */

/* A save of n entities with a position each (a JSON text past 64 KiB for n in the thousands). */
static void many(int n, kiln_persist_format f, pf_bytes *dest) {
    pf_world a;
    pf_open(&a, false);
    for (int i = 0; i < n; i++) {
        pf_pos p = {(float)i, 0.5f * (float)i, 1};
        ck_assert_int_eq(kiln_spawn_with(a.world, &a.pos, (const void *const[]){&p}, 1, NULL), KILN_OK);
    }
    pf_save(a.world, f, dest);
    pf_close(&a);
}

/* Asked and always answered yes, the JSON loader reads the text in pieces: every cut of a
 * save is refused with the same message as without the question, and the whole loads the same. */
KILN_TEST_LOOP(hostile, a_load_asked_to_keep_going_reads_and_refuses_the_same, 0, 2) {
    pf_bytes saved;
    scene(_i ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY, &saved);
    target plain, asked;
    target_open(&plain);
    target_open(&asked);
    asker a = {0, 0};
    kiln_load_desc d = {.keep_going = ask, .ud = &a};
    for (size_t len = 0; len <= saved.size; len++) {
        kiln_result r1 = kiln_load(plain.w.world, saved.data, len, NULL);
        char plain_error[512];
        snprintf(plain_error, sizeof plain_error, "%s", kiln_world_error(plain.w.world));
        kiln_result r2 = kiln_load(asked.w.world, saved.data, len, &d);
        ck_assert_int_eq(r1, r2);
        if (r1 != KILN_OK) ck_assert_str_eq(kiln_world_error(asked.w.world), plain_error);
    }
    ck_assert_int_eq(kiln_world_hash(plain.w.world), kiln_world_hash(asked.w.world));
    ck_assert_int_gt(a.calls, 0);
    pf_bytes_free(&saved);
    pf_close(&plain.w);
    pf_close(&asked.w);
}

/* Told to stop at any of its questions, a load stops there with KILN_ERR_LIMIT, saying how far
 * it read, and the world is as it was; a JSON save is asked while its text is read (every
 * 64 KiB), while its entities are (every 4096), and once before it lands. */
KILN_TEST_LOOP(hostile, a_load_told_to_stop_stops_before_anything_lands, 0, 2) {
    pf_bytes saved;
    many(20000, _i ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY, &saved);
    target t;
    target_open(&t);
    asker count = {0, 0};
    kiln_load_desc d = {.keep_going = ask, .ud = &count};
    pf_world fresh;
    pf_open(&fresh, false);
    ck_assert_int_eq(kiln_load(fresh.world, saved.data, saved.size, &d), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(fresh.world), 20000);
    pf_close(&fresh);
    int text = 0, entities = 0, last = 0;
    for (int k = 1; k <= count.calls; k++) {
        asker a = {0, k};
        d.ud = &a;
        ck_assert_int_eq(kiln_load(t.w.world, saved.data, saved.size, &d), KILN_ERR_LIMIT);
        const char *e = kiln_world_error(t.w.world);
        ck_assert_msg(strncmp(e, "kiln_load: stopped by the caller after ", 39) == 0, "%s", e);
        if (strstr(e, "entities")) entities++;
        else if (k < count.calls) text++;
        else last++;
        char context[32];
        snprintf(context, sizeof context, "stopped at question %d", k);
        assert_untouched(&t, context);
    }
    ck_assert_int_eq(last, 1); /* the question before it lands, with all the bytes read */
    if (_i) {
        ck_assert_int_ge(text, (int)(saved.size / (64 << 10)) - 1);
        ck_assert_int_eq(entities, 20000 / 4096);
    } else {
        ck_assert_int_eq(count.calls, 1); /* binary: read in one pass, asked once */
    }
    pf_bytes_free(&saved);
    pf_close(&t.w);
}

/* kiln_load_file asks while it reads its file too (every MiB), before the text is parsed: a
 * caller with a time limit is not held by a file of gigabytes. */
KILN_TEST(hostile, a_file_load_told_to_stop_stops_while_it_reads_the_file) {
    pf_bytes saved;
    many(40000, KILN_PERSIST_JSON, &saved);
    ck_assert_uint_gt(saved.size, 2u << 20);
    char dir[] = "/tmp/kiln-read-XXXXXX", path[64], want[160];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/world.json", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(saved.data, 1, saved.size, f), saved.size);
    fclose(f);
    target t;
    target_open(&t);
    asker a = {0, 1};
    kiln_load_desc d = {.keep_going = ask, .ud = &a};
    ck_assert_int_eq(kiln_load_file(t.w.world, path, &d), KILN_ERR_LIMIT);
    snprintf(want, sizeof want, "kiln_load_file: stopped by the caller after %d of %zu bytes read", 1 << 20,
             saved.size);
    ck_assert_str_eq(kiln_world_error(t.w.world), want);
    assert_untouched(&t, "stopped while reading the file");
    asker from_file = {0, 0}, from_bytes = {0, 0}; /* always yes: the file adds a question a MiB */
    d.ud = &from_file;
    ck_assert_int_eq(kiln_load_file(t.w.world, path, &d), KILN_OK);
    pf_world other;
    pf_open(&other, false);
    d.ud = &from_bytes;
    ck_assert_int_eq(kiln_load(other.world, saved.data, saved.size, &d), KILN_OK);
    ck_assert_int_eq(from_file.calls - from_bytes.calls, (int)(saved.size >> 20));
    pf_close(&other);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    pf_bytes_free(&saved);
    pf_close(&t.w);
}
