/* test_events_sweep.c: Check suite for events pushed to their edges: an event emitted again
 * from its own buffer while that buffer grows, floods of a million a frame, reads far out of
 * range. Freed blocks are scribbled on, so a read of one shows as wrong bytes. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* An allocator that writes 0xDD over every block it frees or moves, counting requests and
 * live bytes (single-threaded: these tests run no pool). */
typedef struct scribble_alloc {
    int64_t bytes, requests;
} scribble_alloc;

static void *scribble_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    scribble_alloc *a = ud;
    if (nsize == 0) {
        if (ptr) {
            memset(ptr, 0xDD, osize);
            a->bytes -= (int64_t)osize;
        }
        free(ptr);
        return NULL;
    }
    a->requests++;
    void *p = malloc(nsize);
    if (!p) return NULL;
    if (ptr) {
        memcpy(p, ptr, osize < nsize ? osize : nsize);
        memset(ptr, 0xDD, osize);
        free(ptr);
        a->bytes -= (int64_t)osize;
    }
    a->bytes += (int64_t)nsize;
    return p;
}

static scribble_alloc A;
static kiln_world *W;

static void setup(void) {
    memset(&A, 0, sizeof A);
    W = kiln_world_create(&(kiln_world_desc){.alloc = scribble_fn, .alloc_ud = &A});
    ck_assert_ptr_nonnull(W);
}

static void teardown(void) {
    kiln_world_destroy(W);
    ck_assert_int_eq(A.bytes, 0);
}

typedef struct note {
    char text[60];
    int32_t n;
} note;

static kiln_event_type register_note(void) {
    kiln_event_type t;
    ck_assert_int_eq(kiln_event_register(W, &(kiln_component_desc){.name = "Note",
                                                                   .size = sizeof(note),
                                                                   .align = 4},
                                         &t),
                     KILN_OK);
    return t;
}

KILN_TEST_GROUP_WITH(edges, .setup = setup, .teardown = teardown, .timeout = 60);

KILN_TEST(edges, an_event_emitted_again_from_its_own_growing_buffer_is_copied_whole) {
    kiln_event_type t = register_note();
    note v = {"echo", 0};
    for (int i = 0; i < 16; i++) {
        v.n = i;
        ck_assert_int_eq(kiln_event_emit(W, t, &v), KILN_OK);
    }
    /* the buffer holds 16: emitting its newest event again grows it under the value */
    ck_assert_int_eq(kiln_event_emit(W, t, kiln_event_get(W, t, 15)), KILN_OK);
    const note *copy = kiln_event_get(W, t, 16);
    ck_assert_ptr_nonnull(copy);
    ck_assert_str_eq(copy->text, "echo");
    ck_assert_int_eq(copy->n, 15);
    /* and every event of the frame, forwarded once more (the buffer grows again midway) */
    int64_t count = kiln_event_count(W, t);
    for (int64_t i = 0; i < count; i++) ck_assert_int_eq(kiln_event_emit(W, t, kiln_event_get(W, t, i)), KILN_OK);
    for (int64_t i = 0; i < count; i++) {
        const note *a = kiln_event_get(W, t, i), *b = kiln_event_get(W, t, count + i);
        ck_assert_int_eq(a->n, b->n);
        ck_assert_str_eq(b->text, "echo");
    }
}

KILN_TEST(edges, a_million_events_a_frame_are_all_read_and_later_floods_reuse_the_memory) {
    kiln_event_type t;
    ck_assert_int_eq(kiln_event_register(W, &(kiln_component_desc){.name = "Tick", .size = 4,
                                                                   .align = 4},
                                         &t),
                     KILN_OK);
    const int32_t flood = 1000000;
    int64_t requests_after_first = 0;
    for (int frame = 0; frame < 4; frame++) {
        for (int32_t i = 0; i < flood; i++) ck_assert_int_eq(kiln_event_emit(W, t, &i), KILN_OK);
        /* this frame's flood, after the previous one (still readable) */
        int64_t readable = kiln_event_count(W, t);
        ck_assert_int_eq(readable, frame == 0 ? flood : 2 * flood);
        ck_assert_int_eq(*(const int32_t *)kiln_event_get(W, t, readable - 1), flood - 1);
        ck_assert_ptr_null(kiln_event_get(W, t, readable));
        kiln_events_update(W);
        /* both buffers have grown by the end of the second frame; from then on none does */
        if (frame == 1) requests_after_first = A.requests;
        if (frame > 1) ck_assert_int_eq(A.requests, requests_after_first);
    }
    /* memory is bounded by the two largest frames: about 2 x 4 MB here, not 4 x */
    ck_assert_int_lt(A.bytes, 3 * 4 * (int64_t)flood + (1 << 16));
}

KILN_TEST(edges, reads_out_of_range_and_of_unknown_types_find_nothing) {
    kiln_event_type t = register_note();
    ck_assert_int_eq(kiln_event_emit(W, t, NULL), KILN_OK);
    ck_assert_ptr_null(kiln_event_get(W, t, -1));
    ck_assert_ptr_null(kiln_event_get(W, t, INT64_MIN));
    ck_assert_ptr_null(kiln_event_get(W, t, INT64_MAX));
    ck_assert_ptr_null(kiln_event_get(W, (kiln_event_type){t.id + 1}, 0));
    ck_assert_ptr_null(kiln_event_get(W, (kiln_event_type){UINT32_MAX}, 0));
    ck_assert_int_eq(kiln_event_count(W, (kiln_event_type){UINT32_MAX}), 0);
    ck_assert_int_eq(kiln_event_emit(W, (kiln_event_type){0}, NULL), KILN_ERR_UNKNOWN_EVENT);
    const note *zero = kiln_event_get(W, t, 0);
    ck_assert_int_eq(zero->n, 0);
    ck_assert_str_eq(zero->text, "");
}
