/* test_persist_format.c: Check suite for the binary format's versions: version 1 saves still
 * load, version 2 headers carry the slot count and pad the handles to 8 bytes, both checked. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* A save written by hand: one schema Link {entity to}, one group of Links (the handles then
 * start 4 bytes past a multiple of 8: version 2 pads them). */
typedef struct handmade {
    unsigned char data[200 + 16 * 5001];  /* up to 5001 entities */
    size_t size;
    size_t pad_at;  /* where the handles' padding starts (version 2) */
} handmade;

static void put(handmade *h, const void *p, size_t n) {
    memcpy(h->data + h->size, p, n);
    h->size += n;
}
static void put8(handmade *h, uint8_t v) { put(h, &v, 1); }
static void put32(handmade *h, uint32_t v) { put(h, &v, 4); }
static void put64(handmade *h, uint64_t v) { put(h, &v, 8); }

/* count entities with handles and Link targets; slots is written only by version 2. */
static void handmade_save(handmade *h, uint32_t version, uint32_t slots, int count, const kiln_entity *handles,
                          const kiln_entity *targets) {
    h->size = 0;
    put(h, "KILNSAVE", 8);
    put32(h, version);
    put32(h, 0x01020304u);
    if (version >= 3) put64(h, 5); /* tick: 64 bits from version 3 on */
    else put32(h, 5);
    put32(h, 1);                  /* schemas */
    put32(h, 1);                  /* groups */
    put32(h, 0);                  /* resources */
    put64(h, (uint64_t)count);    /* entities */
    if (version >= 2) put32(h, slots);
    if (version >= 4) put32(h, 0); /* the free list: empty */
    put8(h, 4);
    put(h, "Link", 4);
    put32(h, 8);                  /* size */
    put8(h, 0);                   /* plain */
    put(h, &(uint16_t){1}, 2);    /* fields */
    put8(h, 2);
    put(h, "to", 2);
    put8(h, KILN_TYPE_ENTITY);
    put32(h, 1);                  /* count */
    put32(h, 0);                  /* offset */
    put32(h, 1);                  /* the group's types */
    put32(h, 0);
    put64(h, (uint64_t)count);
    h->pad_at = h->size;
    while (version >= 2 && h->size % 8) put8(h, 0);
    put(h, handles, sizeof(kiln_entity) * (size_t)count);
    put(h, targets, sizeof(kiln_entity) * (size_t)count);
    put8(h, 0);                   /* no host data */
}

static kiln_world *link_world(kiln_component *link) {
    static const kiln_field target[] = {{"to", KILN_TYPE_ENTITY, 0, 0}};
    kiln_world *w = kiln_world_create(NULL);
    ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = "Link", .size = 8,
                                                                        .fields = target, .field_count = 1},
                                             link),
                     KILN_OK);
    return w;
}

static kiln_entity target_of(kiln_world *w, kiln_component link, kiln_entity e) {
    const kiln_entity *t = kiln_get(w, e, link);
    ck_assert_ptr_nonnull(t);
    return *t;
}

static bool append(void *ud, const void *data, size_t size) { return pf_bytes_write(ud, data, size); }

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(format);

KILN_TEST(format, a_version_1_save_loads_with_its_handles_and_references_and_saves_again_as_version_2) {
    /* slots 0, 2 and 5 (generations 1, 3, 1); 5 points at 2, 2 at a stale handle of 0, 0 at 5 */
    kiln_entity e0 = kiln_entity_make(0, 1), e2 = kiln_entity_make(2, 3), e5 = kiln_entity_make(5, 1);
    kiln_entity handles[3] = {e0, e2, e5};
    kiln_entity targets[3] = {e5, kiln_entity_make(0, 2), e2};
    handmade v1;
    handmade_save(&v1, 1, 0, 3, handles, targets);
    kiln_component link;
    kiln_world *w = link_world(&link);
    /* a save writes null for a reference to an entity it does not hold: the stale one is refused */
    ck_assert_int_eq(kiln_load(w, v1.data, v1.size, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_load: entity 2v3 component 'Link' field 'to' points to 0v2, an "
                                          "entity the file does not hold (a save writes null there)");
    ck_assert_int_eq(kiln_entity_count(w), 0);
    kiln_world_destroy(w); /* (its slots were used and given back: a fresh world keeps the handles) */
    w = link_world(&link);
    targets[1] = KILN_NULL_ENTITY;
    handmade_save(&v1, 1, 0, 3, handles, targets);
    ck_assert_msg(kiln_load(w, v1.data, v1.size, NULL) == KILN_OK, "%s", kiln_world_error(w));
    ck_assert_int_eq(kiln_entity_count(w), 3);
    ck_assert(kiln_is_alive(w, e0) && kiln_is_alive(w, e2) && kiln_is_alive(w, e5));
    ck_assert_uint_eq(target_of(w, link, e0), e5);
    ck_assert_uint_eq(target_of(w, link, e2), KILN_NULL_ENTITY);
    ck_assert_uint_eq(target_of(w, link, e5), e2);
    ck_assert_uint_eq(kiln_tick_current(w), 5);
    /* saved again: version 4, and the same world when loaded */
    pf_bytes again = {0};
    ck_assert_int_eq(kiln_save(w, NULL, append, &again), KILN_OK);
    uint32_t version;
    memcpy(&version, again.data + 8, 4);
    ck_assert_uint_eq(version, KILN_PERSIST_VERSION);
    ck_assert_uint_eq(version, 4);
    kiln_world *w2 = link_world(&link);
    ck_assert_msg(kiln_load(w2, again.data, again.size, NULL) == KILN_OK, "%s", kiln_world_error(w2));
    ck_assert_uint_eq(kiln_world_hash(w2), kiln_world_hash(w));
    /* into a world that holds entities, version 1 remaps like version 2 */
    kiln_world *used = link_world(&link);
    kiln_entity first;
    ck_assert_int_eq(kiln_spawn(used, &first), KILN_OK);
    kiln_load_desc d = {0};
    ck_assert_msg(kiln_load(used, v1.data, v1.size, &d) == KILN_OK, "%s", kiln_world_error(used));
    ck_assert_int_eq(kiln_entity_count(used), 4);
    pf_bytes_free(&again);
    kiln_world_destroy(w);
    kiln_world_destroy(w2);
    kiln_world_destroy(used);
}

KILN_TEST(format, version_2_pads_handles_to_8_bytes_a_non_zero_pad_byte_is_refused_and_it_saves_as_version_4) {
    kiln_entity handles[2] = {kiln_entity_make(0, 1), kiln_entity_make(1, 1)};
    kiln_entity targets[2] = {handles[1], KILN_NULL_ENTITY};
    handmade v2;
    handmade_save(&v2, 2, 2, 2, handles, targets);
    ck_assert_uint_eq(v2.pad_at % 8, 4);
    kiln_component link;
    kiln_world *w = link_world(&link);
    ck_assert_msg(kiln_load(w, v2.data, v2.size, NULL) == KILN_OK, "%s", kiln_world_error(w));
    ck_assert_uint_eq(target_of(w, link, handles[0]), handles[1]);
    ck_assert_uint_eq(kiln_tick_current(w), 5);
    /* the writer pads the same way, with its 64-bit tick and its free list's length (version
     * 4): the same bytes come back as a handmade version 4 save */
    handmade v3;
    handmade_save(&v3, 4, 2, 2, handles, targets);
    ck_assert_uint_eq(v3.pad_at % 8, 4);
    pf_bytes again = {0};
    ck_assert_int_eq(kiln_save(w, NULL, append, &again), KILN_OK);
    ck_assert_uint_eq(again.size, v3.size);
    ck_assert(memcmp(again.data, v3.data, v3.size) == 0);
    pf_bytes_free(&again);
    kiln_world_destroy(w);

    v2.data[v2.pad_at] = 7;
    w = link_world(&link);
    ck_assert_int_eq(kiln_load(w, v2.data, v2.size, NULL), KILN_ERR_INVALID_ARGUMENT);
    char expect[96];
    snprintf(expect, sizeof expect, "kiln_load: at byte %zu: a group's padding holds a non-zero byte",
             v2.pad_at + (8 - v2.pad_at % 8) % 8);
    ck_assert_str_eq(kiln_world_error(w), expect);
    ck_assert_int_eq(kiln_entity_count(w), 0);
    kiln_world_destroy(w);
}

KILN_TEST(format, the_header_slot_count_bounds_every_handle_and_the_entity_count) {
    kiln_entity handles[2] = {kiln_entity_make(0, 1), kiln_entity_make(4, 1)};
    kiln_entity targets[2] = {KILN_NULL_ENTITY, KILN_NULL_ENTITY};
    handmade v2;
    handmade_save(&v2, 2, 4, 2, handles, targets); /* slot 4 is past a count of 4 */
    kiln_component link;
    kiln_world *w = link_world(&link);
    ck_assert_int_eq(kiln_load(w, v2.data, v2.size, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w),
                     "kiln_load: group 0 row 1 holds handle 100000004, at or past the header's slot count 4");
    ck_assert_int_eq(kiln_entity_count(w), 0);
    handmade_save(&v2, 2, 1, 2, handles, targets);
    ck_assert_int_eq(kiln_load(w, v2.data, v2.size, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(w), "kiln_load: at byte 44: the header's slot count 1 is below its entity count");
    /* trailing free slots: the loaded world has the header's slot count */
    handmade_save(&v2, 2, 9, 2, handles, targets);
    ck_assert_msg(kiln_load(w, v2.data, v2.size, NULL) == KILN_OK, "%s", kiln_world_error(w));
    ck_assert(kiln_is_alive(w, handles[1]));
    kiln_world_destroy(w);
}

KILN_TEST(format, a_save_in_an_unaligned_buffer_loads_the_same_world) {
    pf_world a, b;
    pf_open(&a, false);
    pf_populate(&a);
    pf_bytes saved;
    pf_save(a.world, KILN_PERSIST_BINARY, &saved);
    unsigned char *odd = malloc(saved.size + 1);
    memcpy(odd + 1, saved.data, saved.size);
    pf_open(&b, false);
    ck_assert_msg(kiln_load(b.world, odd + 1, saved.size, NULL) == KILN_OK, "%s", kiln_world_error(b.world));
    ck_assert_uint_eq(kiln_world_hash(b.world), kiln_world_hash(a.world));
    pf_bytes again;
    pf_save(b.world, KILN_PERSIST_BINARY, &again);
    ck_assert_uint_eq(again.size, saved.size);
    ck_assert(memcmp(again.data, saved.data, saved.size) == 0);
    free(odd);
    pf_bytes_free(&saved);
    pf_bytes_free(&again);
    pf_close(&a);
    pf_close(&b);
}

/* Handles are checked a block of 2048 rows at a time, two at a time within a block: a defect
 * in any position (a block's first or last row, the odd row after the pairs) is named, and
 * the failed load leaves nothing behind that a later load of a good file would trip on. */
KILN_TEST(format, every_handle_of_a_large_group_is_checked_wherever_it_lies) {
    enum { N = 5001 };
    static kiln_entity handles[N], targets[N];
    static handmade save;
    static const int rows[] = {0, 1, 2, 3, 2047, 2048, 2049, 4095, 4096, 4097, 5000};
    kiln_component link;
    kiln_world *w = link_world(&link);
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
        for (int defect = 0; defect < 5; defect++) {
            int at = rows[k];
            for (int i = 0; i < N; i++) handles[i] = kiln_entity_make((uint32_t)i, 1), targets[i] = KILN_NULL_ENTITY;
            kiln_entity bad = handles[at];
            if (defect == 0) bad = (kiln_entity)at; /* generation 0 */
            if (defect == 1) bad = handles[at] | (uint64_t)1 << 53; /* a bit above the generation */
            if (defect == 2) bad = kiln_entity_make(N, 1); /* at the slot count */
            if (defect == 3) bad = handles[at == 0 ? 1 : at - 1]; /* a slot twice */
            if (defect == 4) bad = kiln_entity_make((uint32_t)at, KILN_ENTITY_GENERATION_MAX); /* valid */
            handles[at] = bad;
            handmade_save(&save, 2, N, N, handles, targets);
            kiln_result r = kiln_load(w, save.data, save.size, NULL);
            char expect[128];
            if (defect == 0 || defect == 1)
                snprintf(expect, sizeof expect, "kiln_load: group 0 row %d holds an invalid handle %llx", at,
                         (unsigned long long)bad);
            else if (defect == 2)
                snprintf(expect, sizeof expect,
                         "kiln_load: group 0 row %d holds handle %llx, at or past the header's slot count %d", at,
                         (unsigned long long)bad, N);
            else if (defect == 3)
                snprintf(expect, sizeof expect, "kiln_load: entity %uv1 appears twice (or shares its slot)",
                         (unsigned)kiln_entity_index(bad));
            if (defect == 4) {
                ck_assert_msg(r == KILN_OK, "row %d: %s", at, kiln_world_error(w));
                ck_assert(kiln_is_alive(w, bad));
                ck_assert_int_eq(kiln_entity_count(w), N);
                kiln_world_destroy(w);
                w = link_world(&link);
                continue;
            }
            ck_assert_int_eq(r, KILN_ERR_INVALID_ARGUMENT);
            ck_assert_str_eq(kiln_world_error(w), expect);
            ck_assert_int_eq(kiln_entity_count(w), 0);
        }
    /* the good file still loads into the world all those loads failed in */
    for (int i = 0; i < N; i++) handles[i] = kiln_entity_make((uint32_t)i, 1);
    for (int i = 0; i < N; i++) targets[i] = handles[(i * 7) % N];
    handmade_save(&save, 2, N, N, handles, targets);
    ck_assert_msg(kiln_load(w, save.data, save.size, NULL) == KILN_OK, "%s", kiln_world_error(w));
    ck_assert_int_eq(kiln_entity_count(w), N);
    for (int i = 0; i < N; i += 997) ck_assert_uint_eq(target_of(w, link, handles[i]), handles[(i * 7) % N]);
    kiln_world_destroy(w);
}

/* A world with a free list out of slot order, a slot reused at a later generation, a trailing
 * free slot and a retired one (its generations spent): what the next spawns get depends on all. */
static kiln_world *freelist_world(kiln_component *link) {
    kiln_world *w = link_world(link);
    kiln_entity e[12];
    for (int i = 0; i < 12; i++) ck_assert_int_eq(kiln_spawn(w, &e[i]), KILN_OK);
    for (int i = 0; i < 12; i++) ck_assert_int_eq(kiln_add(w, e[i], *link, &e[(i + 1) % 12]), KILN_OK);
    kiln_entity r = e[5];
    ck_assert_int_eq(kiln_despawn(w, r), KILN_OK);
    bool reused = true;
    for (uint32_t g = 2; g <= KILN_ENTITY_GENERATION_MAX; g++) { /* slot 5 until it retires */
        kiln_spawn(w, &r);
        reused &= kiln_entity_index(r) == 5 && kiln_despawn(w, r) == KILN_OK;
    }
    ck_assert(reused);
    ck_assert_int_eq(kiln_despawn(w, e[3]), KILN_OK);
    ck_assert_int_eq(kiln_despawn(w, e[8]), KILN_OK);
    ck_assert_int_eq(kiln_despawn(w, e[11]), KILN_OK); /* the last slot */
    kiln_entity again;
    ck_assert_int_eq(kiln_spawn(w, &again), KILN_OK); /* slot 11 at generation 2 */
    ck_assert_int_eq(kiln_despawn(w, again), KILN_OK);
    ck_assert_int_eq(kiln_despawn(w, e[1]), KILN_OK);
    return w;
}

KILN_TEST_LOOP(format, a_save_loaded_into_a_fresh_world_spawns_the_handles_the_saved_world_would_next, 0, 2) {
    kiln_persist_format format = _i ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY;
    kiln_component link;
    kiln_world *a = freelist_world(&link);
    pf_bytes saved;
    pf_save(a, format, &saved);
    kiln_world *b = link_world(&link);
    ck_assert_msg(kiln_load(b, saved.data, saved.size, NULL) == KILN_OK, "%s", kiln_world_error(b));
    pf_bytes again;
    pf_save(b, format, &again);
    ck_assert_msg(again.size == saved.size && memcmp(again.data, saved.data, saved.size) == 0,
                  "%s: saved again, the bytes differ", _i ? "json" : "binary");
    for (int k = 0; k < 6; k++) { /* the free list (4 slots) then fresh slots */
        kiln_entity x, y;
        ck_assert_int_eq(kiln_spawn(a, &x), KILN_OK);
        ck_assert_int_eq(kiln_spawn(b, &y), KILN_OK);
        ck_assert_msg(x == y, "%s: spawn %d got %llx in the saved world, %llx in the loaded one", _i ? "json" : "binary",
                      k, (unsigned long long)x, (unsigned long long)y);
        ck_assert_uint_ne(kiln_entity_index(x), 5); /* the retired slot stays retired */
    }
    ck_assert(!kiln_is_alive(b, kiln_entity_make(5, KILN_ENTITY_GENERATION_MAX)));
    ck_assert_uint_eq(kiln_world_hash(a), kiln_world_hash(b));
    pf_bytes_free(&saved);
    pf_bytes_free(&again);
    kiln_world_destroy(a);
    kiln_world_destroy(b);
}

KILN_TEST(format, a_version_4_free_list_that_names_a_bad_slot_is_refused_into_any_world) {
    kiln_entity handles[2] = {kiln_entity_make(0, 1), kiln_entity_make(2, 1)};
    kiln_entity targets[2] = {KILN_NULL_ENTITY, KILN_NULL_ENTITY};
    handmade v4;
    handmade_save(&v4, 4, 4, 2, handles, targets);
    /* a free list of two handles in place of the empty one (its length at byte 48, then it) */
    static const struct {
        kiln_entity free[2];
        const char *message;
    } bad[] = {
        {{0x300000001ull, 0x100000003ull}, NULL}, /* a good one: slot 1 at generation 3, then slot 3 */
        {{0x100000001ull, 0x100000004ull}, "kiln_load: at byte 60: free list entry 1 is not a handle below the slot count"},
        {{0x000000001ull, 0x100000003ull}, "kiln_load: at byte 52: free list entry 0 is not a handle below the slot count"},
        {{0x100000001ull, 0x200000001ull}, "kiln_load: slot 1 appears twice in the free list"},
        {{0x100000001ull, 0x100000002ull}, "kiln_load: slot 2 is on the free list and holds a saved entity"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        for (int used = 0; used < 2; used++) {
            handmade h;
            memcpy(h.data, v4.data, 48);
            h.size = 48;
            put32(&h, 2);
            put(&h, bad[k].free, sizeof bad[k].free); /* 16 bytes: the handles' padding stays as it was */
            put(&h, v4.data + 52, v4.size - 52);
            kiln_component link;
            kiln_world *w = link_world(&link);
            kiln_entity first;
            if (used) ck_assert_int_eq(kiln_spawn(w, &first), KILN_OK);
            kiln_result r = kiln_load(w, h.data, h.size, NULL);
            if (!bad[k].message) {
                ck_assert_msg(r == KILN_OK, "%s", kiln_world_error(w));
                kiln_entity next;
                ck_assert_int_eq(kiln_spawn(w, &next), KILN_OK);
                if (!used) ck_assert_uint_eq(next, 0x300000001ull);
            } else {
                ck_assert_int_eq(r, KILN_ERR_INVALID_ARGUMENT);
                ck_assert_str_eq(kiln_world_error(w), bad[k].message);
                ck_assert_int_eq(kiln_entity_count(w), used);
            }
            kiln_world_destroy(w);
        }
}
