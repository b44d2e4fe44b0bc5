/* test_persist_semantic.c: Check suite for well-formed saves that say something hostile or
 * lossy: names without an end, booleans that are not 0 or 1, NaNs of either sign, text JSON
 * cannot hold, resources replaced before a later failure. Every refusal leaves the world as it was. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(values);

KILN_TEST(values, a_name_filling_all_64_bytes_without_an_end_is_refused_by_every_path) {
    char name64[65];
    memset(name64, 'n', 64);
    name64[64] = 0;
    char text[1024];
    snprintf(text, sizeof text,
             "{\"kiln\": 1, \"tick\": 0, \"components\": [{\"name\": \"Name\", \"size\": 64, \"fields\": "
             "[{\"name\": \"text\", \"type\": \"char\", \"offset\": 0, \"count\": 64}]}], "
             "\"entities\": [{\"id\": 4294967296, \"components\": {\"Name\": {\"text\": \"%s\"}}}]}", name64);
    kiln_world *w = kiln_world_create(NULL);
    kiln_entity other;
    ck_assert_int_eq(kiln_spawn(w, &other), KILN_OK);
    uint64_t before = kiln_world_hash(w);
    ck_assert_int_eq(pf_load_text(w, text), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_load: entity 1v1 (0v1 in the file) component 'Name': "
                                          "a name has at most 63 bytes (this one has no end)");
    ck_assert_uint_eq(kiln_world_hash(w), before);
    ck_assert_int_eq(kiln_entity_count(w), 1);
    /* the same bytes written through the C API are refused by the same check */
    kiln_component name_id;
    ck_assert_int_eq(kiln_name_init(w, &name_id), KILN_OK);
    kiln_name raw;
    memset(raw.text, 'n', sizeof raw.text);
    ck_assert_int_eq(kiln_add(w, other, name_id, &raw), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(kiln_name_get(w, other));
    kiln_world_destroy(w);
}

KILN_TEST(values, a_boolean_byte_other_than_0_or_1_in_a_binary_save_is_refused_naming_the_field) {
    static const kiln_field flag_fields[] = {{"count", KILN_TYPE_INT32, 0, 0}, {"on", KILN_TYPE_BOOL, 4, 2}};
    kiln_world *a = kiln_world_create(NULL);
    kiln_component flag = pf_register(a, "Flag", 8, flag_fields, 2);
    struct { int32_t count; bool on[2]; uint8_t pad[2]; } v = {0x5a5a5a5a, {true, false}, {0, 0}};
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(a, &flag, (const void *[]){&v}, 1, &e), KILN_OK);
    pf_bytes saved;
    pf_save(a, KILN_PERSIST_BINARY, &saved);
    /* the value's bytes are the only place the count's pattern appears */
    size_t at = 0;
    for (size_t i = 0; i + 4 <= saved.size && !at; i++)
        if (memcmp(saved.data + i, &v.count, 4) == 0) at = i;
    ck_assert_uint_gt(at, 0);
    ck_assert_int_eq(saved.data[at + 4], 1);
    saved.data[at + 5] = 7;
    kiln_world *b = kiln_world_create(NULL);
    pf_register(b, "Flag", 8, flag_fields, 2);
    ck_assert_int_eq(kiln_load(b, saved.data, saved.size, NULL), KILN_ERR_INVALID_ARGUMENT);
    char want[120];
    snprintf(want, sizeof want, "kiln_load: at byte %zu: field 'Flag.on' holds 7, not a boolean (0 or 1)", at + 5);
    ck_assert_str_eq(kiln_world_error(b), want);
    ck_assert_int_eq(kiln_entity_count(b), 0);
    saved.data[at + 5] = 0;
    ck_assert_int_eq(kiln_load(b, saved.data, saved.size, NULL), KILN_OK);
    ck_assert_uint_eq(kiln_world_hash(a), kiln_world_hash(b));
    pf_bytes_free(&saved);
    kiln_world_destroy(a);
    kiln_world_destroy(b);
}

/* A hand-edited JSON schema may lay one field over another (offsets that overlap): a value
 * read field by field then ends with the later field's bytes in a bool. The binary loader
 * checks the bools of the bytes it stages; JSON must too, or a load hands C code a bool that
 * holds 255, and the world's own binary save cannot be loaded again. */
KILN_TEST(values, a_json_field_laid_over_a_boolean_cannot_leave_another_byte_in_it) {
    static const kiln_field flag_fields[] = {{"count", KILN_TYPE_INT32, 0, 0}, {"on", KILN_TYPE_BOOL, 4, 2}};
    kiln_world *w = kiln_world_create(NULL);
    pf_register(w, "Flag", 8, flag_fields, 2);
    kiln_entity before_e;
    ck_assert_int_eq(kiln_spawn(w, &before_e), KILN_OK);
    uint64_t before = kiln_world_hash(w);
    static const char doc[] =
        "{\"kiln\":1,\"tick\":1,\"components\":[{\"name\":\"Flag\",\"size\":8,\"fields\":["
        "{\"name\":\"on\",\"type\":\"bool\",\"offset\":4,\"count\":2},"
        "{\"name\":\"count\",\"type\":\"int32\",\"offset\":4,\"count\":1}]}],"
        "\"entities\":[{\"id\":4294967296,\"components\":{\"Flag\":{\"on\":[true,false],\"count\":1791}}}]}";
    ck_assert_int_eq(pf_load_text(w, doc), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_load: at entities[0].components.Flag: field 'on' holds 255, "
                                          "not a boolean (0 or 1): a field of the schema overlaps it");
    ck_assert_uint_eq(kiln_world_hash(w), before);
    ck_assert_int_eq(kiln_entity_count(w), 1);
    kiln_world_destroy(w);
}

KILN_TEST(values, nans_of_either_sign_and_negative_zero_survive_a_json_round_trip_hashing_the_same) {
    static const kiln_field fields[] = {{"f", KILN_TYPE_FLOAT, 0, 2}, {"d", KILN_TYPE_DOUBLE, 8, 3}};
    typedef struct { float f[2]; double d[3]; } floats;
    kiln_world *a = kiln_world_create(NULL);
    kiln_component id = pf_register(a, "Floats", sizeof(floats), fields, 2);
    volatile double zero = 0.0;
    floats v = {{-0.0f, (float)(zero / zero)}, {zero / zero, -(zero / zero), -0.0}};
    ck_assert(signbit(v.d[0]) != signbit(v.d[1]));
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(a, &id, (const void *[]){&v}, 1, &e), KILN_OK);
    pf_bytes saved;
    pf_save(a, KILN_PERSIST_JSON, &saved);
    kiln_world *b = kiln_world_create(NULL);
    pf_register(b, "Floats", sizeof(floats), fields, 2);
    ck_assert_int_eq(kiln_load(b, saved.data, saved.size, NULL), KILN_OK);
    const floats *got = kiln_get(b, e, id);
    for (int k = 0; k < 3; k++) ck_assert_int_eq(signbit(got->d[k]) != 0, signbit(v.d[k]) != 0);
    ck_assert_int_eq(signbit(got->f[1]) != 0, signbit(v.f[1]) != 0);
    ck_assert_uint_eq(kiln_world_hash(a), kiln_world_hash(b));
    pf_bytes_free(&saved);
    kiln_world_destroy(a);
    kiln_world_destroy(b);
}

/* A world holding a char array with text (or bytes) that JSON cannot write. */
static kiln_world *label_world(const char *bytes, size_t n, kiln_entity *e) {
    static const kiln_field fields[] = {{"text", KILN_TYPE_CHAR, 0, 16}};
    kiln_world *w = kiln_world_create(NULL);
    kiln_component label = pf_register(w, "Label", 16, fields, 1);
    char text[16] = {0};
    memcpy(text, bytes, n);
    ck_assert_int_eq(kiln_spawn_with(w, &label, (const void *[]){text}, 1, e), KILN_OK);
    return w;
}

KILN_TEST(values, a_json_save_refuses_text_it_cannot_hold_instead_of_dropping_the_field) {
    kiln_entity e;
    kiln_world *w = label_world("\xff\xfe", 2, &e);
    pf_bytes out = {0};
    kiln_save_desc json = {.format = KILN_PERSIST_JSON};
    ck_assert_int_eq(kiln_save(w, &json, pf_bytes_write, &out), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_save: entity 0v1 component 'Label' field 'text' is not "
                                          "UTF-8 text (JSON holds nothing else; save in binary)");
    pf_bytes_free(&out);
    ck_assert_int_eq(kiln_save(w, NULL, pf_bytes_write, &out), KILN_OK); /* binary holds any bytes */
    pf_bytes_free(&out);
    kiln_world_destroy(w);
}

/* Saves w in JSON with the allocator refusing after every count of grants in turn: each save
 * fails for lack of memory or writes exactly the bytes of a save with all the memory it wants. */
static void save_json_failing_everywhere(kiln_world *w, test_allocator *alloc) {
    pf_bytes whole;
    pf_save(w, KILN_PERSIST_JSON, &whole);
    int64_t n = 0;
    for (;; n++) {
        pf_bytes out = {0};
        kiln_save_desc json = {.format = KILN_PERSIST_JSON, .host_data = "host", .host_size = 4};
        test_allocator_fail_after(alloc, n);
        kiln_result r = kiln_save(w, &json, pf_bytes_write, &out);
        test_allocator_fail_never(alloc);
        if (r == KILN_OK) {
            pf_bytes want = {0};
            ck_assert_int_eq(kiln_save(w, &json, pf_bytes_write, &want), KILN_OK);
            ck_assert_msg(out.size == want.size && memcmp(out.data, want.data, out.size) == 0,
                          "a save granted %lld allocations succeeded with other bytes", (long long)n);
            pf_bytes_free(&want);
            pf_bytes_free(&out);
            break;
        }
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        pf_bytes_free(&out);
    }
    ck_assert_int_gt(n, 2);
    pf_bytes_free(&whole);
}

KILN_TEST(values, a_json_save_out_of_memory_anywhere_fails_instead_of_leaving_values_out) {
    static const kiln_field no_fields[] = {{"x", KILN_TYPE_INT32, 0, 0}};
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *w = test_world_create(&alloc);
    kiln_component raw, plain;
    kiln_component_desc rd = {.name = "Raw", .size = 12}; /* no reflected fields: a hex string */
    ck_assert_int_eq(kiln_component_register(w, &rd, &raw), KILN_OK);
    plain = pf_register(w, "Plain", 4, no_fields, 1);
    uint8_t bytes[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int32_t x = 5;
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){raw, plain}, (const void *[]){bytes, &x}, 2, &e), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(w, raw, bytes), KILN_OK);
    save_json_failing_everywhere(w, &alloc);
    kiln_world_destroy(w);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

/* The rule lives in RandomState's check hook, so a C host's kiln_resource_set is refused like a
 * script's world:resource and a load: the world's next save still loads. */
KILN_TEST(values, a_c_host_cannot_set_the_random_state_all_zero) {
    kiln_world *a = kiln_world_create(NULL);
    ck_assert_int_eq(kiln_random_seed(a, 42), KILN_OK);
    kiln_component state = kiln_component_lookup(a, "RandomState");
    kiln_random before = *kiln_random_world(a), zero = {{0}};
    ck_assert_int_eq(kiln_resource_set(a, state, &zero), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(a),
                     "kiln_resource_set: RandomState is all zero (xoshiro256** would give 0 forever)");
    ck_assert_int_eq(kiln_resource_set(a, state, NULL), KILN_ERR_INVALID_ARGUMENT); /* NULL: zeroes */
    ck_assert_mem_eq(kiln_random_world(a), &before, sizeof before);
    ck_assert_int_eq(kiln_resource_remove(a, state, NULL), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(a, state, &zero), KILN_ERR_INVALID_ARGUMENT);
    ck_assert(!kiln_resource_has(a, state));
    ck_assert_int_eq(kiln_resource_set(a, state, &before), KILN_OK);
    pf_bytes saved;
    pf_save(a, KILN_PERSIST_JSON, &saved);
    kiln_world *b = kiln_world_create(NULL);
    ck_assert_int_eq(kiln_load(b, saved.data, saved.size, NULL), KILN_OK);
    ck_assert_mem_eq(kiln_random_world(b), &before, sizeof before);
    pf_bytes_free(&saved);
    kiln_world_destroy(b);
    kiln_world_destroy(a);
}

KILN_TEST(values, a_random_state_of_all_zeros_is_refused_as_it_would_draw_0_forever) {
    kiln_world *a = kiln_world_create(NULL);
    ck_assert_int_eq(kiln_random_seed(a, 42), KILN_OK);
    pf_bytes saved;
    pf_save(a, KILN_PERSIST_JSON, &saved);
    /* the state's field renamed (as a later version might): loaded without it, it is zero */
    char *text = malloc(saved.size + 1);
    memcpy(text, saved.data, saved.size);
    text[saved.size] = 0;
    char *field = strstr(text, "\"name\": \"s\"");
    ck_assert_ptr_nonnull(field);
    field[9] = 't';
    char *value = strstr(text, "\"s\": [");
    ck_assert_ptr_nonnull(value);
    value[1] = 't';
    kiln_world *b = kiln_world_create(NULL);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(b, &e), KILN_OK);
    uint64_t before = kiln_world_hash(b);
    kiln_load_desc skip = {.skip_unknown = true};
    ck_assert_int_eq(kiln_load(b, text, strlen(text), &skip), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(b), "kiln_load: RandomState is all zero (xoshiro256** would give 0 forever)");
    ck_assert_uint_eq(kiln_world_hash(b), before);
    ck_assert_int_eq(kiln_load(b, saved.data, saved.size, NULL), KILN_OK);
    kiln_random *r = kiln_random_world(b);
    ck_assert_uint_ne(kiln_random_next(r) | kiln_random_next(r), 0);
    free(text);
    pf_bytes_free(&saved);
    kiln_world_destroy(a);
    kiln_world_destroy(b);
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(resources);

KILN_TEST(resources, out_of_memory_after_a_resource_was_replaced_puts_none_of_them_back_wrong) {
    /* the target holds both resources already: a load replaces them, and must not replace the
     * first and then fail on the second */
    static const kiln_field one_fields[] = {{"v", KILN_TYPE_INT64, 0, 0}};
    static const kiln_field two_fields[] = {{"w", KILN_TYPE_INT32, 0, 0}, {"best", KILN_TYPE_ENTITY, 8, 0}};
    kiln_world *a = kiln_world_create(NULL);
    kiln_component one = pf_register(a, "One", 8, one_fields, 1), two = pf_register(a, "Two", 16, two_fields, 2);
    int64_t v = 11;
    struct { int32_t w; kiln_entity best; } t = {22, KILN_NULL_ENTITY};
    ck_assert_int_eq(kiln_spawn(a, &t.best), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(a, one, &v), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(a, two, &t), KILN_OK);
    for (int f = 0; f < 2; f++) {
        pf_bytes saved;
        pf_save(a, f ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY, &saved);
        test_allocator alloc;
        test_allocator_init(&alloc);
        kiln_world *b = test_world_create(&alloc);
        kiln_component b_two = pf_register(b, "Two", 16, two_fields, 2), b_one = pf_register(b, "One", 8, one_fields, 1);
        int64_t bv = -1;
        struct { int32_t w; kiln_entity best; } bt = {-2, KILN_NULL_ENTITY};
        kiln_entity held;
        ck_assert_int_eq(kiln_spawn(b, &held), KILN_OK);
        ck_assert_int_eq(kiln_resource_set(b, b_one, &bv), KILN_OK);
        ck_assert_int_eq(kiln_resource_set(b, b_two, &bt), KILN_OK);
        uint64_t before = kiln_world_hash(b);
        int64_t n = 0;
        for (;; n++) {
            test_allocator_fail_after(&alloc, n);
            kiln_result r = kiln_load(b, saved.data, saved.size, NULL);
            test_allocator_fail_never(&alloc);
            if (r == KILN_OK) break;
            ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
            ck_assert_msg(kiln_world_hash(b) == before, "granted %lld: %s, and the world changed", (long long)n,
                          kiln_world_error(b));
            ck_assert_int_eq(*(const int64_t *)kiln_resource_get(b, b_one), -1);
            ck_assert_int_eq(*(const int32_t *)kiln_resource_get(b, b_two), -2);
        }
        ck_assert_int_eq(*(const int64_t *)kiln_resource_get(b, b_one), 11);
        ck_assert_int_eq(*(const int32_t *)kiln_resource_get(b, b_two), 22);
        pf_bytes_free(&saved);
        kiln_world_destroy(b);
        ck_assert_int_eq(alloc.live_bytes, 0);
    }
    kiln_world_destroy(a);
}

/* What the ready hook saw, and whether it lets the load land. */
typedef struct readiness {
    int64_t entities, calls, mapped_before_ready, mapped;
    bool refuse;
} readiness;

static bool ready_hook(void *ud, int64_t entities, char *why, size_t why_size) {
    readiness *r = ud;
    r->entities = entities;
    r->calls++;
    if (r->refuse) snprintf(why, why_size, "no room for the map of %lld entities", (long long)entities);
    return !r->refuse;
}

static void mapped_hook(void *ud, kiln_entity old_e, kiln_entity new_e) {
    readiness *r = ud;
    (void)old_e, (void)new_e;
    r->mapped++;
    if (r->calls == 0) r->mapped_before_ready++;
}

KILN_TEST(resources, the_ready_hook_sees_the_entity_count_before_anything_lands_and_may_refuse) {
    pf_world src;
    pf_open(&src, false);
    pf_populate(&src);
    pf_bytes saved;
    pf_save(src.world, KILN_PERSIST_BINARY, &saved);
    pf_world t;
    pf_open(&t, true);
    pf_populate(&t);
    uint64_t before = kiln_world_hash(t.world);
    int64_t count = kiln_entity_count(t.world);
    readiness r = {.refuse = true};
    kiln_load_desc d = {.ready = ready_hook, .mapped = mapped_hook, .ud = &r};
    ck_assert_int_eq(kiln_load(t.world, saved.data, saved.size, &d), KILN_ERR_OUT_OF_MEMORY);
    ck_assert_str_eq(kiln_world_error(t.world), "kiln_load: no room for the map of 7 entities");
    ck_assert_uint_eq(kiln_world_hash(t.world), before);
    ck_assert_int_eq(kiln_entity_count(t.world), count);
    ck_assert_int_eq(r.mapped, 0);
    r = (readiness){.refuse = false};
    ck_assert_int_eq(kiln_load(t.world, saved.data, saved.size, &d), KILN_OK);
    ck_assert_int_eq(r.calls, 1);
    ck_assert_int_eq(r.entities, 7);
    ck_assert_int_eq(r.mapped, 7);
    ck_assert_int_eq(r.mapped_before_ready, 0);
    pf_bytes_free(&saved);
    pf_close(&src);
    pf_close(&t);
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP_WITH(sizes, .timeout = 120);

/* A JSON save of schemas tag components c000001.. and entities entities, every other one holding
 * c000001 (so each is a group of its own). */
static char *many_schemas(int schemas, int entities) {
    size_t cap = (size_t)schemas * 40 + (size_t)entities * 60 + 256, n = 0;
    char *text = malloc(cap);
    n += (size_t)snprintf(text + n, cap - n, "{\"kiln\": 1, \"tick\": 0, \"components\": [");
    for (int i = 1; i <= schemas; i++)
        n += (size_t)snprintf(text + n, cap - n, "%s{\"name\": \"c%06d\", \"size\": 0}", i > 1 ? ", " : "", i);
    n += (size_t)snprintf(text + n, cap - n, "], \"entities\": [");
    for (int i = 1; i <= entities; i++)
        n += (size_t)snprintf(text + n, cap - n, "%s{\"id\": %lld, \"components\": {%s}}", i > 1 ? ", " : "",
                              (long long)((1ll << 32) + i), i % 2 ? "" : "\"c000001\": true");
    snprintf(text + n, cap - n, "]}");
    return text;
}

KILN_TEST(sizes, a_small_json_save_of_many_schemas_and_groups_takes_memory_in_proportion_to_its_size) {
    /* each group took room for every schema: 5000 groups of 5000 schemas, 500 MB from 380 KB */
    char *text = many_schemas(5000, 5000);
    size_t size = strlen(text);
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *w = test_world_create(&alloc);
    for (int i = 1; i <= 5000; i++) {
        char name[16];
        snprintf(name, sizeof name, "c%06d", i);
        kiln_component id;
        ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = name}, &id), KILN_OK);
    }
    int64_t base = alloc.live_bytes;
    alloc.peak_bytes = base;
    ck_assert_int_eq(kiln_load(w, text, size, NULL), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(w), 5000);
    ck_assert_msg(alloc.peak_bytes - base < (int64_t)size * 64, "a %zu-byte save took %lld bytes at its peak", size,
                  (long long)(alloc.peak_bytes - base));
    free(text);
    kiln_world_destroy(w);
}

/* This thread's CPU time in ns: a shared machine's other jobs do not count. */
static int64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* CPU nanoseconds a refused load of text takes. */
static int64_t refusal_ns(const char *text) {
    kiln_world *w = kiln_world_create(NULL);
    int64_t t = thread_cpu_ns();
    ck_assert_int_eq(kiln_load(w, text, strlen(text), NULL), KILN_ERR_UNKNOWN_COMPONENT);
    t = thread_cpu_ns() - t;
    kiln_world_destroy(w);
    return t;
}

KILN_TEST(sizes, many_schemas_are_read_in_time_about_linear_in_their_number) {
    /* a name was checked against every earlier one: 8 times the schemas took 64 times as long.
     * The names table's own cost is counted in test_persist_schema_names; this one-sided bound
     * in CPU time (the loaded CI machine's preemptions do not count) guards the whole load. */
    char *small = many_schemas(5000, 0), *large = many_schemas(40000, 0);
    refusal_ns(small);
    int64_t a = refusal_ns(small), b = refusal_ns(large);
    ck_assert_msg(b < 24 * a + 50000000, "5000 schemas: %lld ns, 40000: %lld ns", (long long)a, (long long)b);
    free(small);
    free(large);
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(hash);

KILN_TEST(hash, a_dead_reference_in_a_value_over_4_kib_hashes_as_null_so_a_round_trip_keeps_the_hash) {
    /* a save writes it as null; the hash took the dead handle's bytes as they were */
    enum { BIG = 12000 }; /* over the hash's 8 KiB pieces too */
    static const kiln_field fields[] = {{"first", KILN_TYPE_ENTITY, 0, 0}, {"pad", KILN_TYPE_UINT8, 8, 8184},
                                        {"many", KILN_TYPE_ENTITY, 8192, 3}, {"tail", KILN_TYPE_UINT8, 8216, BIG - 8216}};
    for (int sorted = 0; sorted < 2; sorted++) {
        kiln_world *a = kiln_world_create(NULL);
        kiln_component big = pf_register(a, "Big", BIG, fields, 4);
        uint8_t *v = calloc(1, BIG);
        kiln_entity gone, kept, holder, other;
        ck_assert_int_eq(kiln_spawn(a, &gone), KILN_OK);
        ck_assert_int_eq(kiln_spawn(a, &kept), KILN_OK);
        memcpy(v, &gone, 8);
        memcpy(v + 8192, &kept, 8);
        memcpy(v + 8200, &gone, 8);
        memset(v + 8216, 7, BIG - 8216);
        ck_assert_int_eq(kiln_spawn_with(a, &big, (const void *[]){v}, 1, &holder), KILN_OK);
        ck_assert_int_eq(kiln_spawn_with(a, &big, (const void *[]){v}, 1, &other), KILN_OK);
        if (!sorted) { /* rows out of slot order: the hash walks them one by one */
            ck_assert_int_eq(kiln_despawn(a, holder), KILN_OK);
            ck_assert_int_eq(kiln_spawn_with(a, &big, (const void *[]){v}, 1, &holder), KILN_OK);
        }
        ck_assert_int_eq(kiln_resource_set(a, big, v), KILN_OK); /* resources hash the same way */
        ck_assert_int_eq(kiln_despawn(a, gone), KILN_OK);
        for (int f = 0; f < 2; f++) {
            pf_bytes saved;
            pf_save(a, f ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY, &saved);
            kiln_world *b = kiln_world_create(NULL);
            pf_register(b, "Big", BIG, fields, 4);
            ck_assert_int_eq(kiln_load(b, saved.data, saved.size, NULL), KILN_OK);
            const uint8_t *got = kiln_get(b, holder, big);
            kiln_entity first;
            memcpy(&first, got, 8);
            ck_assert_uint_eq(first, KILN_NULL_ENTITY);
            ck_assert_msg(kiln_world_hash(a) == kiln_world_hash(b), "%s, rows %s: the hash changed over a round trip",
                          f ? "json" : "binary", sorted ? "in order" : "out of order");
            pf_bytes_free(&saved);
            kiln_world_destroy(b);
        }
        free(v);
        kiln_world_destroy(a);
    }
}
