/* test_persist_rollback.c: Check suite for loads that fail late, after the file was parsed:
 * a save with names and the random resources, corrupted at every byte, into a world that never
 * registered them. Every refused load leaves the schema, the resources and the content as they
 * were: no component, query or resource of the file's registered. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* What a load that fails must leave as it was. */
typedef struct print {
    int32_t components, queries;
    uint64_t names, resources; /* FNV-1a of the component names, of the ids with a resource */
    uint64_t hash;
    int64_t entities, slots;
    kiln_tick tick;
} print;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}

static print print_of(kiln_world *w) {
    kiln_world_stats st;
    kiln_world_stats_get(w, &st);
    print p = {.components = kiln_component_count(w), .queries = st.queries, .names = 0xcbf29ce484222325ull,
               .resources = 0xcbf29ce484222325ull, .hash = kiln_world_hash(w), .entities = st.entities,
               .slots = st.entity_slots, .tick = kiln_tick_current(w)};
    for (kiln_component c = 1; c <= (kiln_component)p.components; c++) {
        kiln_component_info info;
        ck_assert(kiln_component_info_get(w, c, &info));
        p.names = fnv(p.names, info.name, strlen(info.name) + 1);
        if (kiln_resource_has(w, c)) p.resources = fnv(p.resources, &c, sizeof c);
    }
    return p;
}

static void assert_same(const print *a, const print *b, const char *what, size_t at, const char *error) {
    ck_assert_msg(a->components == b->components && a->names == b->names, "%s at %zu: %d components, were %d (%s)",
                  what, at, b->components, a->components, error);
    ck_assert_msg(a->queries == b->queries, "%s at %zu: %d queries, were %d (%s)", what, at, b->queries,
                  a->queries, error);
    ck_assert_msg(a->resources == b->resources, "%s at %zu: the resources changed (%s)", what, at, error);
    ck_assert_msg(a->hash == b->hash && a->entities == b->entities && a->slots == b->slots && a->tick == b->tick,
                  "%s at %zu: the content changed (%s)", what, at, error);
}

/* The target: a world with the fixture's components (populate: its scene too), no names. */
static void target_open(pf_world *t, bool populate, test_allocator *alloc) {
    pf_open_on(t, true, alloc);
    if (populate) pf_populate(t);
}

/* Mutation m of byte b: for JSON, digits become other digits (handles, counts, values the
 * parser takes) and other bytes a few chosen ones; for binary, bit patterns. */
static bool mutate(bool json, int m, uint8_t b, uint8_t *dest) {
    if (json) {
        static const char other[] = {'"', '1', '-', '}'};
        if (b >= '0' && b <= '9') *dest = (uint8_t)('0' + (b - '0' + 1 + m * 4) % 10);
        else *dest = (uint8_t)other[m];
        return *dest != b;
    }
    static const uint8_t flip[] = {0xff, 0x01, 0x80};
    *dest = m == 3 ? 0 : b ^ flip[m];
    return *dest != b;
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP_WITH(rollback, .timeout = 120);

/* Loops: binary and JSON, into a fresh world (the saved handles kept) and a populated one. */
KILN_TEST_LOOP(rollback, a_load_refused_after_parsing_registers_nothing_and_leaves_the_world, 0, 4) {
    bool json = _i % 2, populate = _i >= 2;
    pf_bytes saved;
    pf_save_named(json ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY, &saved);
    uint8_t *copy = malloc(saved.size);
    pf_world t;
    target_open(&t, populate, NULL);
    print before = print_of(t.world);
    int64_t late = 0, loaded = 0;
    for (size_t at = 0; at < saved.size; at++)
        for (int m = 0; m < 4; m++) {
            memcpy(copy, saved.data, saved.size);
            if (!mutate(json, m, saved.data[at], &copy[at])) continue;
            kiln_result r = kiln_load(t.world, copy, saved.size, NULL);
            if (r == KILN_OK) { /* a value changed into another valid one */
                loaded++;
                pf_close(&t);
                target_open(&t, populate, NULL);
                continue;
            }
            const char *error = kiln_world_error(t.world);
            if (strncmp(error, "kiln_load: at ", 14) != 0) late++;
            print after = print_of(t.world);
            assert_same(&before, &after, json ? "json" : "binary", at, error);
        }
    ck_assert_msg(late > 20, "only %lld loads failed after parsing", (long long)late);
    pf_close(&t);
    free(copy);
    pf_bytes_free(&saved);
}

/* Out of memory anywhere in the load: the content, the resources and the tick as they were.
 * Past the point where the addon's components are registered (the last step, which only
 * memory can stop), they may stay registered, with no value: nothing else may. */
KILN_TEST_LOOP(rollback, a_load_out_of_memory_leaves_the_world_but_the_last_registrations, 0, 4) {
    bool json = _i % 2, populate = _i >= 2;
    pf_bytes saved;
    pf_save_named(json ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY, &saved);
    test_allocator alloc;
    test_allocator_init(&alloc);
    int64_t n = 0, registered = 0;
    for (;; n++) {
        pf_world t;
        target_open(&t, populate, &alloc);
        print before = print_of(t.world);
        test_allocator_fail_after(&alloc, n);
        kiln_result r = kiln_load(t.world, saved.data, saved.size, NULL);
        test_allocator_fail_never(&alloc);
        if (r == KILN_OK) {
            pf_close(&t);
            break;
        }
        ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
        print after = print_of(t.world);
        /* registered last: once a failure leaves them, every later one does */
        ck_assert_msg(after.components != before.components || registered == 0,
                      "allocation %lld: the registry is as it was after a failure that left it changed", (long long)n);
        if (after.components != before.components) {
            registered++;
            ck_assert_int_ge(kiln_component_lookup(t.world, "Name") | kiln_component_lookup(t.world, "RandomSeed"), 1);
            after.components = before.components, after.names = before.names, after.queries = before.queries;
        }
        assert_same(&before, &after, "out of memory", (size_t)n, kiln_world_error(t.world));
        ck_assert_int_eq(kiln_name_lookup(t.world, "hero"), KILN_NULL_ENTITY);
        pf_close(&t);
    }
    ck_assert_int_gt(n, 10);
    ck_assert_msg(registered < n / 2, "%lld of %lld failures left registrations", (long long)registered, (long long)n);
    ck_assert_int_eq(alloc.live_bytes, 0);
    pf_bytes_free(&saved);
}
