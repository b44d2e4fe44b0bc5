/* test_name_hash.c: Check suite for the hash of component and system names: seeded per world,
 * so names picked to collide cost what any names cost, and nothing the world outputs depends on
 * the seed (stages, errors, saves); names of one full hash are still told apart. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln.h"
#include "kiln_persist.h"
#include "persist_fixture.h"
#include "schedule_fixture.h"
#include "test_registry.h"
#include "test_support.h"
#include "../../core/src/component.h"      /* kl_registry_find, world->hash_seed */
#include "../../core/src/schedule_order.h" /* kl_schedule_name_slots */

/* hashmap.c's hash of a name under a seed (the world's hash_seed) */
uint32_t kl_hash_name(const char *s, size_t len, uint64_t seed);

/* A world hashing names with seed: set before anything is registered or named. */
static kiln_world *seeded_world(uint64_t seed) {
    kiln_world *world = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(world);
    world->hash_seed = seed;
    return world;
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(collisions);

/* hashmap.c's mixer (never 0 from a nonzero input); a kl_map places key k at kl_hash_u32(k) */
uint32_t kl_hash_u32(uint32_t x);

/* The hash kiln used for these names: FNV-1a 32, then the mixer. It is public, so a mod can
 * ship names picked offline to share its low bits, which piled them into one run of slots:
 * 4,000 such component names cost 160 M instructions to register and 81 M to look up (3.6 M and
 * 0.7 M for ordinary names), 4,000 system names 189 M to add. */
static uint32_t fixed_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return kl_hash_u32(h);
}

enum { PICKED = 1000, HOME_MASK = 2047 }; /* both tables hold 1,000 names in 2,048 slots */

/* Fills names with PICKED names whose slot under the fixed hash is 1 in a table of 2,048:
 * the component index (at the hash) or, placed, the schedule's kl_map (at its mix). */
static void pick_names(char (*names)[16], bool placed, long *next) {
    for (int i = 0; i < PICKED; i++) {
        uint32_t h;
        do {
            snprintf(names[i], sizeof names[i], "m%ld", (*next)++);
            h = fixed_hash(names[i]);
        } while (((placed ? kl_hash_u32(h) : h) & HOME_MASK) != 1u);
    }
}

/* About 1.5 slots a name found, 2.5 a name missed, at the index's half load; piled into one
 * run, a name found read half the run, a name missed all of it. */
KILN_TEST(collisions, component_names_picked_to_collide_under_a_fixed_hash_read_a_few_slots_each) {
    static char names[PICKED][16], absent[PICKED][16];
    long next = 0;
    pick_names(names, false, &next);
    pick_names(absent, false, &next);
    kiln_world *world = kiln_world_create(NULL);
    for (int i = 0; i < PICKED; i++) {
        kiln_component_desc d = {.name = names[i], .size = 4};
        ck_assert_int_eq(kiln_component_register(world, &d, NULL), KILN_OK);
    }
    int64_t found = 0, missed = 0;
    for (int i = 0; i < PICKED; i++) {
        ck_assert_uint_eq(kl_registry_find(world, &world->components, names[i], &found), (uint32_t)i + 1);
        ck_assert_uint_eq(kl_registry_find(world, &world->components, absent[i], &missed), 0);
    }
    ck_assert_msg(found < 4 * PICKED && missed < 8 * PICKED, "%lld slots read finding %d names, %lld missing as many",
                  (long long)found, PICKED, (long long)missed);
    ck_assert_int_ge(found, PICKED); /* each reads its own slot */
    kiln_world_destroy(world);
}

KILN_TEST(collisions, system_names_picked_to_collide_under_a_fixed_hash_read_a_few_slots_each) {
    static char names[PICKED][16];
    long next = 0;
    pick_names(names, true, &next);
    kiln_world *world = kiln_world_create(NULL);
    kiln_schedule *s = kiln_schedule_create(world, NULL);
    for (int i = 0; i < PICKED; i++)
        ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = names[i], .run = noop}), KILN_OK);
    int64_t read = 0;
    for (int i = 0; i < PICKED; i++) {
        ck_assert_int_eq(kiln_schedule_find(s, names[i]), i);
        read += kl_schedule_name_slots(s, names[i]); /* what every look-up of the name walks */
    }
    /* about 2.5 a name at the map's half load; piled, about PICKED / 2 */
    ck_assert_msg(read < 8 * PICKED, "%lld slots read looking up %d names", (long long)read, PICKED);
    kiln_schedule_destroy(s);
    kiln_world_destroy(world);
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP_WITH(seeds, .timeout = 30);

static const uint64_t SEEDS[] = {1, 0x9e3779b97f4a7c15u, ~(uint64_t)0};
enum { SEED_COUNT = 3, KINDS = 24, SYSTEMS = 160 };

static uint64_t next_random(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* In a world of seed: KINDS components and SYSTEMS systems reading and writing them (found by
 * name) before and after one another's names and names of no system, built; then an add that
 * would close a cycle. Writes the stages and the refusal into text. */
static void build_text(uint64_t seed, char *text, size_t size) {
    kiln_world *world = seeded_world(seed);
    char name[32];
    for (int k = 0; k < KINDS; k++) {
        snprintf(name, sizeof name, "Kind%d", k);
        ck_assert_int_eq(kiln_component_register(world, &(kiln_component_desc){.name = name, .size = 4}, NULL),
                         KILN_OK);
    }
    kiln_schedule *s = kiln_schedule_create(world, NULL);
    static char names[SYSTEMS][4][24]; /* per system: its name, two after names, a before name */
    uint64_t x = 0x2545f4914f6cdd1du;
    for (int i = 0; i < SYSTEMS; i++) {
        kiln_system_desc d = {.name = names[i][0], .run = noop};
        snprintf(names[i][0], sizeof names[i][0], "sys%d", i);
        snprintf(name, sizeof name, "Kind%d", (int)(next_random(&x) % KINDS));
        d.reads[0] = kiln_component_lookup(world, name);
        snprintf(name, sizeof name, "Kind%d", (int)(next_random(&x) % KINDS));
        if (next_random(&x) % 3 == 0) d.writes[0] = kiln_component_lookup(world, name);
        for (int k = 1; k <= 2 && i > 0; k++) { /* after earlier systems, or after names that wait */
            int to = (int)(next_random(&x) % (uint64_t)i);
            snprintf(names[i][k], sizeof names[i][k], next_random(&x) % 5 ? "sys%d" : "later%d", to);
            d.after[k - 1] = names[i][k];
        }
        snprintf(names[i][3], sizeof names[i][3], "sys%d", i + 1 + (int)(next_random(&x) % 8));
        d.before[0] = names[i][3];
        ck_assert_msg(kiln_schedule_add(s, &d) == KILN_OK, "%s", kiln_world_error(world));
    }
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    size_t n = kiln_schedule_describe(s, text, size);
    ck_assert_uint_lt(n, size);
    /* sys0 runs before sys1 .. sys8: one of them named before sys0 closes a cycle */
    kiln_system_desc closing = {.name = "closing", .run = noop, .after = {"sys0"}, .before = {"sys0"}};
    ck_assert_int_eq(kiln_schedule_add(s, &closing), KILN_ERR_INVALID_ARGUMENT);
    snprintf(text + n, size - n, "%s\n", kiln_world_error(world));
    kiln_schedule_destroy(s);
    kiln_world_destroy(world);
}

KILN_TEST(seeds, stages_and_a_cycle_refusal_are_the_same_under_every_seed) {
    static char first[1 << 14], other[1 << 14];
    build_text(SEEDS[0], first, sizeof first);
    ck_assert_ptr_nonnull(strstr(first, "stage 3: ")); /* constraints chain systems over stages */
    ck_assert_ptr_nonnull(strstr(first, "would form a cycle"));
    for (int k = 1; k < SEED_COUNT; k++) {
        build_text(SEEDS[k], other, sizeof other);
        ck_assert_str_eq(other, first);
    }
}

/* Saves, in format, a world of seed: 300 named entities over 40 components with fields, so the
 * component index and the name index lay out differently under every seed. */
static void save_seeded(uint64_t seed, kiln_persist_format format, pf_bytes *dest, uint64_t *hash) {
    kiln_world *world = seeded_world(seed);
    kiln_component name_id, ids[40];
    ck_assert_int_eq(kiln_name_init(world, &name_id), KILN_OK);
    kiln_field f[] = {{.name = "v", .type = KILN_TYPE_INT32, .offset = 0}};
    char name[32];
    for (int k = 0; k < 40; k++) {
        snprintf(name, sizeof name, "Part%d", k);
        ids[k] = pf_register(world, name, sizeof(int32_t), f, 1);
    }
    for (int i = 0; i < 300; i++) {
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn(world, &e), KILN_OK);
        for (int k = i % 7; k < 40; k += 5 + i % 3) {
            int32_t v = i * 41 + k;
            ck_assert_int_eq(kiln_add(world, e, ids[k], &v), KILN_OK);
        }
        snprintf(name, sizeof name, "unit%d", i);
        ck_assert_int_eq(kiln_name_set(world, e, name), KILN_OK);
    }
    pf_save(world, format, dest);
    *hash = kiln_world_hash(world);
    kiln_world_destroy(world);
}

KILN_TEST(seeds, saves_and_world_hashes_are_byte_identical_under_every_seed) {
    for (kiln_persist_format format = KILN_PERSIST_BINARY; format <= KILN_PERSIST_JSON; format++) {
        pf_bytes first, other;
        uint64_t first_hash, other_hash;
        save_seeded(SEEDS[0], format, &first, &first_hash);
        for (int k = 1; k < SEED_COUNT; k++) {
            save_seeded(SEEDS[k], format, &other, &other_hash);
            ck_assert_uint_eq(other.size, first.size);
            ck_assert_msg(memcmp(other.data, first.data, first.size) == 0, "format %d, seed %d", (int)format, k);
            ck_assert_uint_eq(other_hash, first_hash);
            pf_bytes_free(&other);
        }
        pf_bytes_free(&first);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Names of one full hash: the schedule's maps are keyed by the 32-bit hash of a name, so two
 * names of one key share entries; every reader compares the names themselves.                */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(one_hash, .timeout = 30);

typedef struct named_hash {
    uint32_t hash;
    int32_t n;
} named_hash;

static int compare_hash(const void *a, const void *b) {
    uint32_t x = ((const named_hash *)a)->hash, y = ((const named_hash *)b)->hash;
    return (x > y) - (x < y);
}

/* The i-th name of a series of six-letter names, pseudo-random. */
static void series_name(uint32_t i, char name[16]) {
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15u;
    for (int k = 0; k < 6; k++) {
        x ^= x >> 29;
        x *= 0xbf58476d1ce4e5b9u;
        name[k] = (char)('a' + (x >> 40) % 26);
    }
    snprintf(name + 6, 10, "%u", (unsigned)(i % 10));
}

static uint32_t key_of(const kiln_world *world, const char *name) {
    return kl_hash_name(name, strlen(name), world->hash_seed);
}

/* Writes two distinct names of one key under world's seed into a and b. */
static void colliding_names(const kiln_world *world, char a[16], char b[16]) {
    enum { TRIES = 1 << 19 }; /* a 32-bit hash repeats among them about 32 times */
    named_hash *h = malloc(sizeof *h * TRIES);
    ck_assert_ptr_nonnull(h);
    char name[16];
    for (int32_t i = 0; i < TRIES; i++) {
        series_name((uint32_t)i, name);
        h[i] = (named_hash){key_of(world, name), i};
    }
    qsort(h, TRIES, sizeof *h, compare_hash);
    for (int32_t k = 1; k < TRIES; k++) {
        if (h[k].hash != h[k - 1].hash) continue;
        series_name((uint32_t)h[k - 1].n, a);
        series_name((uint32_t)h[k].n, b);
        if (strcmp(a, b) != 0) break;
    }
    free(h);
    ck_assert_msg(strcmp(a, b) != 0 && key_of(world, a) == key_of(world, b), "no two names of one key");
}

/* A system after one name is not after another of the same key: the check reads each
 * system's list, and a cycle through either name is still seen. */
KILN_TEST(one_hash, names_of_one_hash_do_not_stand_for_each_other_in_the_cycle_check) {
    kiln_world *world = seeded_world(0x5eed);
    char one[16] = "", other[16] = "";
    colliding_names(world, one, other);
    kiln_schedule *s = kiln_schedule_create(world, NULL);
    /* one -> p (one waiting), then other after p: no cycle, though p's after list holds a
     * name of other's key */
    kiln_system_desc p = {.name = "p", .run = noop, .after = {one}};
    ck_assert_int_eq(kiln_schedule_add(s, &p), KILN_OK);
    kiln_system_desc later = {.name = other, .run = noop, .after = {"p"}};
    ck_assert_msg(kiln_schedule_add(s, &later) == KILN_OK, "%s", kiln_world_error(world));
    /* one after p closes one -> p -> one */
    kiln_system_desc closing = {.name = one, .run = noop, .after = {"p"}};
    ck_assert_int_eq(kiln_schedule_add(s, &closing), KILN_ERR_INVALID_ARGUMENT);
    char want[128];
    snprintf(want, sizeof want, "kiln_schedule_add: '%s' -> 'p' -> '%s' would form a cycle", one, one);
    ck_assert_str_eq(kiln_world_error(world), want);
    /* and the same through a replace of p: p after other, other after p */
    kiln_system_desc turned = {.name = "p", .run = noop, .after = {other}};
    ck_assert_int_eq(kiln_schedule_replace(s, &turned), KILN_ERR_INVALID_ARGUMENT);
    snprintf(want, sizeof want, "kiln_schedule_replace: 'p' -> '%s' -> 'p' would form a cycle", other);
    ck_assert_str_eq(kiln_world_error(world), want);
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    kiln_schedule_destroy(s);
    kiln_world_destroy(world);
}

/* Two systems whose names share a key are two systems: neither is refused as a duplicate of the
 * other, each is found, ordered, replaced and removed as itself. */
KILN_TEST(one_hash, systems_whose_names_share_a_key_are_found_ordered_and_removed_apart) {
    kiln_world *world = seeded_world(0x5eed);
    char one[16] = "", other[16] = "";
    colliding_names(world, one, other);
    kiln_schedule *s = kiln_schedule_create(world, NULL);
    add_system(s, (kiln_system_desc){.name = "first", .run = noop});
    add_system(s, (kiln_system_desc){.name = other, .run = noop, .after = {"first"}});
    add_system(s, (kiln_system_desc){.name = one, .run = noop});
    ck_assert_int_eq(kiln_schedule_find(s, other), 1);
    ck_assert_int_eq(kiln_schedule_find(s, one), 2);
    /* a third of either name is a duplicate of that one */
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = one, .run = noop}), KILN_ERR_INVALID_ARGUMENT);
    /* one runs at stage 0, other at 1 (after first): so after one is 1, after other 2, and
     * before other leaves one at 0 */
    add_system(s, (kiln_system_desc){.name = "after_one", .run = noop, .after = {one}});
    add_system(s, (kiln_system_desc){.name = "after_other", .run = noop, .after = {other}});
    add_system(s, (kiln_system_desc){.name = "before_other", .run = noop, .before = {other}});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    char want[256];
    snprintf(want, sizeof want, "stage 0: first, %s, before_other\nstage 1: %s, after_one\nstage 2: after_other\n",
             one, other);
    ck_assert_str_eq(describe(s), want);
    /* a replace of one leaves other where it was; other's removal leaves one */
    add_system(s, (kiln_system_desc){.name = "last", .run = noop, .after = {"after_other"}});
    ck_assert_int_eq(kiln_schedule_replace(s, &(kiln_system_desc){.name = one, .run = noop, .after = {"last"}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_remove(s, other), KILN_OK);
    ck_assert_int_eq(kiln_schedule_find(s, other), -1);
    ck_assert_int_eq(kiln_schedule_find(s, one), 1);
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    snprintf(want, sizeof want, "stage 0: first, after_other, before_other\nstage 1: last\nstage 2: %s\n"
             "stage 3: after_one\n", one);
    ck_assert_str_eq(describe(s), want);
    kiln_schedule_destroy(s);
    kiln_world_destroy(world);
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP_WITH(reuse, .timeout = 60);

/* An allocator giving a world's own block (the one request of its size while none is out) the
 * same static memory every time, everything else to the C library: each world sits at one address. */
typedef struct one_address {
    _Alignas(64) unsigned char block[sizeof(kiln_world)];
    bool taken;
} one_address;

static void *at_one_address(void *ud, void *ptr, size_t osize, size_t nsize) {
    (void)osize;
    one_address *a = ud;
    if (ptr == a->block) { /* never grown: freed with the world */
        ck_assert_uint_eq(nsize, 0);
        a->taken = false;
        return NULL;
    }
    if (!ptr && nsize == sizeof(kiln_world) && !a->taken) {
        a->taken = true;
        return a->block;
    }
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, nsize);
}

/* A coarse monotonic clock, switched on by a test: it moves on once every COARSE_READS reads, as
 * a clock of coarse resolution would between worlds made back to back (Linux's never does). */
int __real_clock_gettime(clockid_t clock, struct timespec *now);
int __wrap_clock_gettime(clockid_t clock, struct timespec *now);
enum { COARSE_READS = 16 };
static bool coarse_clock;
static unsigned coarse_reads;

int __wrap_clock_gettime(clockid_t clock, struct timespec *now) {
    if (!coarse_clock || clock != CLOCK_MONOTONIC) return __real_clock_gettime(clock, now);
    *now = (struct timespec){.tv_sec = 1, .tv_nsec = (long)(coarse_reads++ / COARSE_READS)};
    return 0;
}

static int by_value(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

/* The seed tells a world from a dead one at its address (prefabs, snapshots, scene instances
 * made for it): worlds made back to back at one address, faster than a coarse clock ticks (the
 * wrapped clock above), never share one. */
KILN_TEST(reuse, worlds_made_back_to_back_at_one_address_get_different_seeds) {
    static one_address a;
    enum { ROUNDS = 4000 };
    static uint64_t seeds[ROUNDS];
    coarse_clock = true;
    for (int i = 0; i < ROUNDS; i++) {
        kiln_world *w = kiln_world_create(&(kiln_world_desc){.alloc = at_one_address, .alloc_ud = &a});
        ck_assert_ptr_eq(w, (void *)a.block);
        seeds[i] = w->hash_seed;
        kiln_world_destroy(w);
    }
    coarse_clock = false;
    ck_assert_uint_ge(coarse_reads, ROUNDS); /* the seed read the clock that did not tick */
    qsort(seeds, ROUNDS, sizeof seeds[0], by_value);
    for (int i = 1; i < ROUNDS; i++) ck_assert_msg(seeds[i] != seeds[i - 1], "two worlds share the seed %llx",
                                                   (unsigned long long)seeds[i]);
}
