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
        h.size = k == 1 ? sizeof(big_value) : sizeof(very_big_value);
        h.fields[0] = (kiln_field){"tag", KILN_TYPE_INT8, 0, 0};
        h.fields[1] = (kiln_field){"d", KILN_TYPE_DOUBLE, 8, (uint32_t)((h.size - 8) / 8)};
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
