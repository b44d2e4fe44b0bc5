/* test_persist_schema_names.c: Check suite (white box) for the table both loaders find a file's
 * component names in: hashed with the world's seed, so names a file picked to collide under a
 * fixed hash cost what any names cost. Built with -Icore/src (Makefile, premake5.lua). */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"
#include "../../addons/persist/src/persist_internal.h"

KILN_TEST_GROUP(schema_names);

enum { PICKED = 2000, HOME_MASK = 4095 }; /* 2,000 names: a table of 4,096 slots */

/* The hash the table used: FNV-1a 64, public, so a save or scene file could ship names picked
 * offline to share its low bits. */
static uint64_t fixed_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* A document of PICKED schemas whose names all lie in slot 7 under the fixed hash, on the
 * world's allocator. */
static void picked_doc(kiln_world *world, pz_doc *doc) {
    memset(doc, 0, sizeof *doc);
    doc->arena.alloc = &world->alloc;
    doc->schema_count = PICKED;
    doc->schemas = pz_alloc(&doc->arena, sizeof(pz_schema) * PICKED);
    ck_assert_ptr_nonnull(doc->schemas);
    long next = 0;
    for (int i = 0; i < PICKED; i++) {
        char name[24];
        do snprintf(name, sizeof name, "c%ld", next++);
        while ((fixed_hash(name) & HOME_MASK) != 7u);
        char *copy = pz_alloc(&doc->arena, strlen(name) + 1);
        ck_assert_ptr_nonnull(copy);
        doc->schemas[i].name = strcpy(copy, name);
    }
}

/* At half load a name added or found reads about two slots; piled into one run under the fixed
 * hash, the adds alone read PICKED^2 / 2 = 2,000,000. */
KILN_TEST(schema_names, names_picked_to_collide_under_a_fixed_hash_read_a_few_slots_each) {
    kiln_world *world = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(world);
    pz_doc doc;
    picked_doc(world, &doc);
    pz_schema_names names;
    ck_assert(pz_schema_names_init(&names, &doc, world));
    for (uint32_t i = 0; i < PICKED; i++) ck_assert_int_eq(pz_schema_names_add(&names, i), -1);
    for (uint32_t i = 0; i < PICKED; i++) ck_assert_int_eq(pz_schema_names_find(&names, doc.schemas[i].name), (int32_t)i);
    ck_assert_int_eq(pz_schema_names_find(&names, "absent"), -1);
    ck_assert_msg(names.slots_read < 16 * PICKED, "%lld slots read adding and finding %d names",
                  (long long)names.slots_read, PICKED);
    ck_assert_int_ge(names.slots_read, 2 * PICKED); /* each reads its own slot, twice */
    pz_arena_free(&doc.arena);
    kiln_world_destroy(world);
}

/* A name given twice is still found as the earlier schema, under any seed. */
KILN_TEST(schema_names, a_name_given_twice_is_the_earlier_schema) {
    kiln_world *world = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(world);
    pz_doc doc;
    picked_doc(world, &doc);
    doc.schemas[PICKED - 1].name = doc.schemas[3].name;
    pz_schema_names names;
    ck_assert(pz_schema_names_init(&names, &doc, world));
    for (uint32_t i = 0; i + 1 < PICKED; i++) ck_assert_int_eq(pz_schema_names_add(&names, i), -1);
    ck_assert_int_eq(pz_schema_names_add(&names, PICKED - 1), 3);
    pz_arena_free(&doc.arena);
    kiln_world_destroy(world);
}
