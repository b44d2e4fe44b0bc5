/* test_persist_hash.c: Check suite for what enters kiln_world_hash: the bytes a component's fields
 * cover and nothing else (padding, however scattered or far into a large value), whole values without fields. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persist_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* Nine {char, int} pairs: nine separate byte ranges, each followed by three bytes of padding. */
typedef struct nine_pairs {
    struct {
        char c;
        int32_t i;
    } p[9];
} nine_pairs;

/* A tag, padding, then doubles: over 4 KiB (gathered a value at a time), and over the hash's
 * 8 KiB pieces (streamed in pieces); the last one with entity references behind the padding. */
typedef struct big_value {
    char tag;
    double d[600];
} big_value;
typedef struct very_big_value {
    char tag;
    double d[1500];
} very_big_value;
typedef struct big_refs {
    char tag;
    kiln_entity refs[4];
    double d[1500];
} big_refs;

enum { KINDS = 4 };
static const char *const kind_names[KINDS] = {"nine ranges", "over 4 KiB", "over 8 KiB", "over 8 KiB with references"};

typedef struct hash_kind {
    size_t size;
    kiln_field fields[18];
    int32_t field_count;
    size_t value_at;  /* a byte a field covers */
} hash_kind;

static hash_kind kind_of(int k) {
    static const char *const names[18] = {"c0", "i0", "c1", "i1", "c2", "i2", "c3", "i3", "c4",
                                          "i4", "c5", "i5", "c6", "i6", "c7", "i7", "c8", "i8"};
    hash_kind h = {0};
    if (k == 0) {
        h.size = sizeof(nine_pairs);
        for (int p = 0; p < 9; p++) {
            h.fields[2 * p] = (kiln_field){names[2 * p], KILN_TYPE_INT8, (uint32_t)offsetof(nine_pairs, p[p].c), 0};
            h.fields[2 * p + 1] = (kiln_field){names[2 * p + 1], KILN_TYPE_INT32, (uint32_t)offsetof(nine_pairs, p[p].i), 0};
        }
        h.field_count = 18;
        h.value_at = offsetof(nine_pairs, p[8].i);
    } else if (k == 1 || k == 2) {
        /* d's offset is the ABI's: 8 where double aligns to 8, 4 on i386, where the value then ends in d */
        h.size = k == 1 ? sizeof(big_value) : sizeof(very_big_value);
        size_t at = k == 1 ? offsetof(big_value, d) : offsetof(very_big_value, d);
        h.fields[0] = (kiln_field){"tag", KILN_TYPE_INT8, 0, 0};
        h.fields[1] = (kiln_field){"d", KILN_TYPE_DOUBLE, (uint32_t)at, k == 1 ? 600 : 1500};
        h.field_count = 2;
        h.value_at = h.size - 1;
    } else {
        h.size = sizeof(big_refs);
        /* declared out of offset order: the ranges are sorted before they are merged */
        h.fields[0] = (kiln_field){"d", KILN_TYPE_DOUBLE, (uint32_t)offsetof(big_refs, d), 1500};
        h.fields[1] = (kiln_field){"refs", KILN_TYPE_ENTITY, (uint32_t)offsetof(big_refs, refs), 4};
        h.fields[2] = (kiln_field){"tag", KILN_TYPE_INT8, 0, 0};
        h.field_count = 3;
        h.value_at = offsetof(big_refs, d[700]);
    }
    return h;
}

/* A value whose padding holds pad and whose field bytes hold a pattern (and, for references,
 * the world's entities). */
static void fill_value(const hash_kind *h, uint8_t *v, uint8_t pad, const kiln_entity *refs) {
    memset(v, pad, h->size);
    for (int32_t f = 0; f < h->field_count; f++) {
        const kiln_field *fd = &h->fields[f];
        size_t n = kiln_type_size(fd->type) * (fd->count ? fd->count : 1);
        if (fd->type == KILN_TYPE_ENTITY) {
            memcpy(v + fd->offset, refs, n);
            continue;
        }
        for (size_t b = 0; b < n; b++) v[fd->offset + b] = (uint8_t)(fd->offset + b * 7 + 1);
    }
}

/* A world with three entities holding the value (rows out of slot order when shuffled) and the
 * value as a resource; pad fills every padding byte, and the byte at flip is xor'ed with 0x5a. */
static uint64_t hash_with(const hash_kind *h, uint8_t pad, size_t flip, bool resource, bool shuffled) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_component id = pf_register(w, "Padded", h->size, h->fields, h->field_count);
    kiln_entity e[4];
    for (int i = 0; i < 4; i++) ck_assert_int_eq(kiln_spawn(w, &e[i]), KILN_OK);
    uint8_t *v = malloc(h->size);
    fill_value(h, v, pad, e);
    if (flip < h->size) v[flip] ^= 0x5a;
    if (resource) {
        ck_assert_int_eq(kiln_resource_set(w, id, v), KILN_OK);
    } else {
        for (int i = 0; i < 3; i++) ck_assert_int_eq(kiln_add(w, e[i], id, v), KILN_OK);
        if (shuffled) { /* the first row moves last: rows no longer in slot order */
            ck_assert_int_eq(kiln_remove(w, e[0], id, NULL), KILN_OK);
            ck_assert_int_eq(kiln_add(w, e[0], id, v), KILN_OK);
        }
    }
    ck_assert_int_eq(kiln_despawn(w, e[3]), KILN_OK); /* a dead reference: hashed as null */
    free(v);
    uint64_t hash = kiln_world_hash(w);
    kiln_world_destroy(w);
    return hash;
}

/* ------------------------------------------------------------------------------------------ */
KILN_TEST_GROUP(padding);

KILN_TEST_LOOP(padding, padding_bytes_never_change_the_hash_however_many_ranges_or_bytes_a_value_has, 0, KINDS) {
    hash_kind h = kind_of(_i);
    for (int place = 0; place < 3; place++) {
        bool resource = place == 2, shuffled = place == 1;
        const char *where = resource ? "resource" : shuffled ? "rows out of order" : "rows in order";
        uint64_t zeros = hash_with(&h, 0x00, SIZE_MAX, resource, shuffled);
        uint64_t other = hash_with(&h, 0xab, SIZE_MAX, resource, shuffled);
        ck_assert_msg(zeros == other, "%s, %s: padding changed the hash (%016llx, %016llx)", kind_names[_i], where,
                      (unsigned long long)zeros, (unsigned long long)other);
        uint64_t changed = hash_with(&h, 0x00, h.value_at, resource, shuffled);
        ck_assert_msg(changed != zeros, "%s, %s: a field byte that differs left the hash as it was", kind_names[_i],
                      where);
    }
}

KILN_TEST(padding, a_value_registered_without_fields_has_no_layout_so_all_its_bytes_are_hashed) {
    hash_kind h = kind_of(0);
    h.field_count = 0;
    uint64_t zeros = hash_with(&h, 0x00, SIZE_MAX, false, false);
    ck_assert_uint_ne(hash_with(&h, 0x00, 1, false, false), zeros); /* the padding after p[0].c */
    ck_assert_uint_ne(hash_with(&h, 0x00, 1, true, false), hash_with(&h, 0x00, SIZE_MAX, true, false));
}

/* ------------------------------------------------------------------------------------------ */
/* The slots: the hash covers the slot count and the free list, which decide the next handles. */

typedef struct byte_buf {
    uint8_t data[1 << 16];
    size_t size;
} byte_buf;

static bool to_buf(void *ud, const void *data, size_t size) {
    byte_buf *b = ud;
    if (size > sizeof b->data - b->size) return false;
    memcpy(b->data + b->size, data, size);
    b->size += size;
    return true;
}

static bool refusing; /* the check hook below refuses 13 while this is set */

static kiln_result no_thirteen(const kiln_world *world, kiln_entity entity, const void *value, void *ctx,
                               char *why, size_t why_size) {
    (void)world, (void)entity, (void)ctx;
    if (refusing && value && *(const int32_t *)value == 13) {
        snprintf(why, why_size, "13 is refused");
        return KILN_ERR_INVALID_ARGUMENT;
    }
    return KILN_OK;
}

static kiln_component count_component(kiln_world *w) {
    static const kiln_field fields[] = {{.name = "n", .type = KILN_TYPE_INT32}};
    kiln_component id;
    kiln_component_desc d = {.name = "Count", .size = sizeof(int32_t), .fields = fields, .field_count = 1,
                             .check = no_thirteen};
    ck_assert_int_eq(kiln_component_register(w, &d, &id), KILN_OK);
    return id;
}

/* Spawns count entities holding 1, 2, ..., count, then despawns those listed in order. */
static void build(kiln_world *w, kiln_component id, int32_t count, const int32_t *dead, int32_t dead_count,
                  kiln_entity *e) {
    for (int32_t i = 0; i < count; i++) {
        int32_t v = i + 1;
        const void *values[] = {&v};
        ck_assert_int_eq(kiln_spawn_with(w, &id, values, 1, &e[i]), KILN_OK);
    }
    for (int32_t k = 0; k < dead_count; k++) ck_assert_int_eq(kiln_despawn(w, e[dead[k]]), KILN_OK);
}

KILN_TEST_GROUP(slots);

KILN_TEST(slots, worlds_alike_but_for_their_free_lists_hash_apart_as_their_next_spawns_differ) {
    kiln_world *a = kiln_world_create(NULL), *b = kiln_world_create(NULL), *c = kiln_world_create(NULL);
    kiln_entity ea[4], eb[4], ec[4];
    build(a, count_component(a), 4, (const int32_t[]){0, 1}, 2, ea);
    build(b, count_component(b), 4, (const int32_t[]){1, 0}, 2, eb);
    build(c, count_component(c), 4, (const int32_t[]){0, 1}, 2, ec);
    ck_assert_uint_eq(kiln_world_hash(a), kiln_world_hash(c));
    ck_assert_uint_ne(kiln_world_hash(a), kiln_world_hash(b)); /* same rows, free list 1,0 against 0,1 */
    ck_assert_uint_eq(kiln_world_content_hash(a), kiln_world_content_hash(b)); /* the content alone */
    kiln_entity na, nb;
    ck_assert_int_eq(kiln_spawn(a, &na), KILN_OK);
    ck_assert_int_eq(kiln_spawn(b, &nb), KILN_OK);
    ck_assert_uint_ne(na, nb);
    /* a slot spent and freed again: the same rows and free list order, another generation */
    kiln_entity again;
    ck_assert_int_eq(kiln_spawn(c, &again), KILN_OK);
    ck_assert_int_eq(kiln_despawn(c, again), KILN_OK);
    kiln_world_destroy(b);
    b = kiln_world_create(NULL);
    build(b, count_component(b), 4, (const int32_t[]){0, 1}, 2, eb);
    ck_assert_uint_ne(kiln_world_hash(b), kiln_world_hash(c));
    ck_assert_uint_eq(kiln_world_content_hash(b), kiln_world_content_hash(c));
    ck_assert_uint_ne(kiln_world_content_hash(b), kiln_world_content_hash(a)); /* a spawned once more */
    kiln_world_destroy(a);
    kiln_world_destroy(b);
    kiln_world_destroy(c);
}

/* A load refused after it spawned (a check hook refuses a value) gives every slot back: the
 * world's next spawns get the handles they would have got, into a fresh world and a used one. */
KILN_TEST_LOOP(slots, a_load_refused_after_spawning_leaves_the_next_handles_as_they_were, 0, 2) {
    bool fresh = _i == 0;
    kiln_world *src = kiln_world_create(NULL);
    kiln_component sid = count_component(src);
    kiln_entity e[40];
    build(src, sid, 40, (const int32_t[]){3, 30, 7}, 3, e); /* holds 13, among others */
    byte_buf *buf = calloc(1, sizeof *buf);
    ck_assert_int_eq(kiln_save(src, NULL, to_buf, buf), KILN_OK);
    kiln_world *w = kiln_world_create(NULL), *twin = kiln_world_create(NULL);
    kiln_component wid = count_component(w);
    count_component(twin);
    kiln_entity we[6], te[6];
    if (!fresh) {
        build(w, wid, 6, (const int32_t[]){4, 1}, 2, we);
        build(twin, wid, 6, (const int32_t[]){4, 1}, 2, te);
    }
    uint64_t before = kiln_world_hash(w);
    refusing = true;
    ck_assert_int_eq(kiln_load(w, buf->data, buf->size, NULL), KILN_ERR_INVALID_ARGUMENT);
    refusing = false;
    ck_assert_msg(strstr(kiln_world_error(w), "13 is refused") != NULL, "%s", kiln_world_error(w));
    ck_assert_uint_eq(kiln_world_hash(w), before);
    for (int k = 0; k < 4; k++) {
        kiln_entity x, y;
        ck_assert_int_eq(kiln_spawn(w, &x), KILN_OK);
        ck_assert_int_eq(kiln_spawn(twin, &y), KILN_OK);
        ck_assert_msg(x == y, "%s world: spawn %d got %llx after the refused load, %llx without it",
                      fresh ? "a fresh" : "a used", k, (unsigned long long)x, (unsigned long long)y);
    }
    ck_assert_int_eq(kiln_load(w, buf->data, buf->size, NULL), KILN_OK); /* and it still loads */
    free(buf);
    kiln_world_destroy(src);
    kiln_world_destroy(w);
    kiln_world_destroy(twin);
}
