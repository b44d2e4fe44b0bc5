/* test_events.c: Check suite for events: registration, double-buffered reading, frame lifetime,
 * command-buffer emits, the schedule's update and ordering across threads, steady-state memory. */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_fixture.h"
#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* An empty world on the counting allocator (test_support.h), made afresh around every test of a
 * group using it; teardown asserts every byte came back. */
static test_world_fixture F;

static void setup(void) { test_world_fixture_setup(&F); }

static void teardown(void) { test_world_fixture_teardown(&F); }

/* An event type handle from a raw number, to probe ids that are not registered. */
#define EV(n) ((kiln_event_type){(uint32_t)(n)})

/* Event types and component ids are distinct types: passing one where the other is expected
 * does not compile. _Generic picks the kiln_component branch only if the types were the same
 * (as they were when kiln_event_type was a uint32_t typedef), failing this build. */
_Static_assert(_Generic((kiln_event_type){0}, kiln_component: 0, default: 1),
               "an event type must not be a component id");

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct hit {
    int32_t source; /* who emitted it */
    int32_t seq;    /* its number within the source's emits */
    int32_t frame;
} hit;

static const kiln_field hit_fields[] = {
    {.name = "source", .type = KILN_TYPE_INT32, .offset = offsetof(hit, source)},
    {.name = "seq", .type = KILN_TYPE_INT32, .offset = offsetof(hit, seq)},
    {.name = "frame", .type = KILN_TYPE_INT32, .offset = offsetof(hit, frame)},
};

static kiln_component_desc hit_desc(void) {
    return (kiln_component_desc){
        .name = "Hit", .size = sizeof(hit), .fields = hit_fields, .field_count = 3};
}

static kiln_event_type register_hit(kiln_world *world) {
    kiln_component_desc desc = hit_desc();
    kiln_event_type type = {0};
    kiln_result r = kiln_event_register(world, &desc, &type);
    ck_assert_msg(r == KILN_OK, "registering Hit: %s", kiln_world_error(world));
    ck_assert_uint_ne(type.id, 0);
    return type;
}

static kiln_event_type register_plain_event(kiln_world *world, const char *name, size_t size) {
    kiln_event_type type = {0};
    kiln_result r = kiln_event_register(world, &(kiln_component_desc){.name = name, .size = size}, &type);
    ck_assert_msg(r == KILN_OK, "registering %s: %s", name, kiln_world_error(world));
    return type;
}

static void emit_hit(kiln_world *world, kiln_event_type type, int32_t source, int32_t seq,
                     int32_t frame) {
    hit h = {source, seq, frame};
    kiln_result r = kiln_event_emit(world, type, &h);
    ck_assert_msg(r == KILN_OK, "emit: %s", kiln_world_error(world));
}

static hit hit_at(kiln_world *world, kiln_event_type type, int64_t i) {
    const hit *h = kiln_event_get(world, type, i);
    ck_assert_msg(h != NULL, "event %lld of %lld is missing", (long long)i,
                  (long long)kiln_event_count(world, type));
    return *h;
}

static void assert_hit(kiln_world *world, kiln_event_type type, int64_t i, int32_t source,
                       int32_t seq, int32_t frame) {
    hit h = hit_at(world, type, i);
    ck_assert_msg(h.source == source && h.seq == seq && h.frame == frame,
                  "event %lld is {%d, %d, %d}, expected {%d, %d, %d}", (long long)i, h.source,
                  h.seq, h.frame, source, seq, frame);
}

/* A world on the locked counting allocator (jobs_fixture.h): worker systems record into their
 * command buffers, which allocate through the world's hook from several threads at once. */
static kiln_world *locked_world_create(locked_allocator *a) {
    locked_init(a);
    kiln_world *world =
        kiln_world_create(&(kiln_world_desc){.alloc = locked_alloc_fn, .alloc_ud = a});
    ck_assert_ptr_nonnull(world);
    return world;
}

/* ------------------------------------------------------------------------------------------ */
/* registration                                                                               */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(registration, .setup = setup, .teardown = teardown);

KILN_TEST(registration, event_register_copies_the_name_size_and_fields) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    char name[16] = "Damage";
    kiln_field fields[2] = {
        {.name = "amount", .type = KILN_TYPE_FLOAT, .offset = 0},
        {.name = "target", .type = KILN_TYPE_ENTITY, .offset = 8},
    };
    kiln_event_type type = {0};
    ck_assert_int_eq(kiln_event_register(world, &(kiln_component_desc){.name = name, .size = 16,
                                                                      .fields = fields,
                                                                      .field_count = 2},
                                         &type),
                     KILN_OK);
    ck_assert_uint_ne(type.id, 0);
    /* the world kept copies */
    strcpy(name, "Garbage");
    fields[0].name = "nothing";
    ck_assert_uint_eq(kiln_event_lookup(world, "Damage").id, type.id);
    ck_assert_uint_eq(kiln_event_lookup(world, "Garbage").id, 0);
    kiln_component_info info;
    ck_assert(kiln_event_info_get(world, type, &info));
    ck_assert_str_eq(info.name, "Damage");
    ck_assert_uint_eq(info.size, 16);
    ck_assert_uint_eq(info.align, 16);
    ck_assert_int_eq(info.field_count, 2);
    ck_assert_str_eq(info.fields[0].name, "amount");
    ck_assert_int_eq(info.fields[1].type, KILN_TYPE_ENTITY);
    ck_assert_uint_eq(info.fields[1].offset, 8);
    ck_assert(!info.has_destroy && !info.has_move);
    ck_assert(!kiln_event_info_get(world, EV(type.id + 1), &info));
    ck_assert(!kiln_event_info_get(world, EV(0), &info));
    ck_assert_uint_eq(kiln_event_lookup(world, NULL).id, 0);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

static void noop_destroy(void *ptr, int32_t count, void *ctx) {
    (void)ptr;
    (void)count;
    (void)ctx;
}

static void noop_move(void *dst, void *src, int32_t count, void *ctx) {
    memcpy(dst, src, (size_t)count * 8);
    (void)ctx;
}

KILN_TEST(registration, event_register_rejects_hooks) {
    kiln_event_type type = {77};
    ck_assert_int_eq(kiln_event_register(F.w, &(kiln_component_desc){.name = "Owning", .size = 8,
                                                                      .destroy = noop_destroy},
                                         &type),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_ne(kiln_world_error(F.w), "");
    ck_assert_int_eq(kiln_event_register(F.w, &(kiln_component_desc){.name = "Owning", .size = 8,
                                                                      .move = noop_move},
                                         &type),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(kiln_event_lookup(F.w, "Owning").id, 0);
    kiln_component_info info;
    ck_assert(!kiln_event_info_get(F.w, EV(1), &info));
    /* the same desc without hooks is fine */
    ck_assert_int_eq(kiln_event_register(F.w, &(kiln_component_desc){.name = "Owning", .size = 8}, &type),
                     KILN_OK);
    ck_assert_uint_eq(kiln_event_lookup(F.w, "Owning").id, type.id);
}

KILN_TEST(registration, event_register_rejects_bad_descs_like_component_register) {
    kiln_event_type type;
    char long_name[KILN_MAX_NAME + 2];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    ck_assert_int_eq(kiln_event_register(F.w, &(kiln_component_desc){.name = NULL, .size = 4}, &type),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_event_register(F.w, &(kiln_component_desc){.name = "", .size = 4}, &type),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_event_register(F.w, &(kiln_component_desc){.name = long_name, .size = 4}, &type),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_event_register(F.w, &(kiln_component_desc){.name = "Odd", .size = 8, .align = 3},
                                         &type),
                     KILN_ERR_INVALID_ARGUMENT);
    kiln_field outside = {.name = "far", .type = KILN_TYPE_FLOAT, .offset = 8};
    ck_assert_int_eq(kiln_event_register(F.w, &(kiln_component_desc){.name = "Far", .size = 8,
                                                                      .fields = &outside,
                                                                      .field_count = 1},
                                         &type),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(kiln_event_lookup(F.w, "Odd").id, 0);
    ck_assert_uint_eq(kiln_event_lookup(F.w, "Far").id, 0);
    kiln_component_info info;
    ck_assert(!kiln_event_info_get(F.w, EV(1), &info));
}

KILN_TEST(registration, registering_an_event_again_with_the_same_layout_returns_the_same_id) {
    kiln_event_type first = register_hit(F.w);
    kiln_event_type other = register_plain_event(F.w, "Other", 4);
    ck_assert_uint_ne(first.id, other.id);
    kiln_event_type again = {0};
    kiln_component_desc desc = hit_desc();
    ck_assert_int_eq(kiln_event_register(F.w, &desc, &again), KILN_OK);
    ck_assert_uint_eq(again.id, first.id);
    /* events emitted before the re-registration are still there */
    emit_hit(F.w, first, 1, 2, 3);
    ck_assert_int_eq(kiln_event_register(F.w, &desc, &again), KILN_OK);
    ck_assert_int_eq(kiln_event_count(F.w, first), 1);
    assert_hit(F.w, first, 0, 1, 2, 3);
}

KILN_TEST(registration, registering_an_event_again_with_another_layout_fails) {
    kiln_event_type type = register_hit(F.w);
    kiln_event_type out;
    kiln_component_desc bigger = hit_desc();
    bigger.size = sizeof(hit) + 4;
    ck_assert_int_eq(kiln_event_register(F.w, &bigger, &out), KILN_ERR_LAYOUT_MISMATCH);
    ck_assert_str_ne(kiln_world_error(F.w), "");
    kiln_component_desc fewer = hit_desc();
    fewer.field_count = 2;
    ck_assert_int_eq(kiln_event_register(F.w, &fewer, &out), KILN_ERR_LAYOUT_MISMATCH);
    kiln_component_desc aligned = hit_desc();
    aligned.align = 16;
    ck_assert_int_eq(kiln_event_register(F.w, &aligned, &out), KILN_ERR_LAYOUT_MISMATCH);
    kiln_component_info info;
    ck_assert(kiln_event_info_get(F.w, type, &info));
    ck_assert_uint_eq(info.size, sizeof(hit));
    ck_assert_int_eq(info.field_count, 3);
    ck_assert_uint_eq(kiln_event_lookup(F.w, "Hit").id, type.id);
}

KILN_TEST(registration, event_names_live_apart_from_component_names) {
    /* a component "Hit" of another layout does not stop an event "Hit", nor the reverse */
    kiln_component pos = test_register_position(F.w);
    kiln_component_desc comp = test_velocity_desc();
    comp.name = "Hit";
    kiln_component comp_hit;
    ck_assert_int_eq(kiln_component_register(F.w, &comp, &comp_hit), KILN_OK);
    kiln_event_type ev_hit = register_hit(F.w);
    kiln_event_type ev_pos = register_plain_event(F.w, "Position", 24);
    kiln_event_type ev_only = register_plain_event(F.w, "OnlyAnEvent", 4);
    ck_assert_uint_eq(kiln_component_lookup(F.w, "Hit"), comp_hit);
    ck_assert_uint_eq(kiln_event_lookup(F.w, "Hit").id, ev_hit.id);
    ck_assert_uint_eq(kiln_component_lookup(F.w, "Position"), pos);
    ck_assert_uint_eq(kiln_event_lookup(F.w, "Position").id, ev_pos.id);
    ck_assert_uint_eq(kiln_component_lookup(F.w, "OnlyAnEvent"), KILN_NO_COMPONENT);
    ck_assert_uint_eq(kiln_event_lookup(F.w, "Velocity").id, 0);
    ck_assert_int_eq(kiln_component_count(F.w), 2);
    kiln_component_info info;
    ck_assert(kiln_component_info_get(F.w, comp_hit, &info));
    ck_assert_uint_eq(info.size, sizeof(test_velocity));
    ck_assert(kiln_event_info_get(F.w, ev_hit, &info));
    ck_assert_uint_eq(info.size, sizeof(hit));
    /* a component registered after the events still registers */
    kiln_component late = test_register_tag(F.w, "OnlyAnEvent");
    ck_assert_uint_eq(kiln_component_lookup(F.w, "OnlyAnEvent"), late);
    ck_assert_uint_eq(kiln_event_lookup(F.w, "OnlyAnEvent").id, ev_only.id);
}

/* ------------------------------------------------------------------------------------------ */
/* emitting and reading                                                                       */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(reading, .setup = setup, .teardown = teardown);

KILN_TEST(reading, emitted_events_read_back_in_emit_order) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_event_type type = register_hit(world);
    ck_assert_int_eq(kiln_event_count(world, type), 0);
    ck_assert_ptr_null(kiln_event_get(world, type, 0));
    for (int32_t i = 0; i < 200; i++) emit_hit(world, type, 7, i, 0); /* grows several times */
    ck_assert_int_eq(kiln_event_count(world, type), 200);
    for (int32_t i = 0; i < 200; i++) assert_hit(world, type, i, 7, i, 0);
    ck_assert_ptr_null(kiln_event_get(world, type, 200));
    ck_assert_ptr_null(kiln_event_get(world, type, -1));
    /* a NULL value emits zeroes (the allocator fills fresh memory with garbage) */
    ck_assert_int_eq(kiln_event_emit(world, type, NULL), KILN_OK);
    assert_hit(world, type, 200, 0, 0, 0);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

KILN_TEST(reading, event_types_keep_separate_queues) {
    kiln_event_type a = register_hit(F.w);
    kiln_event_type b = register_plain_event(F.w, "Tick", sizeof(int64_t));
    for (int32_t i = 0; i < 5; i++) {
        emit_hit(F.w, a, 1, i, 0);
        int64_t v = 1000 + i;
        ck_assert_int_eq(kiln_event_emit(F.w, b, &v), KILN_OK);
    }
    emit_hit(F.w, a, 1, 5, 0);
    ck_assert_int_eq(kiln_event_count(F.w, a), 6);
    ck_assert_int_eq(kiln_event_count(F.w, b), 5);
    for (int32_t i = 0; i < 5; i++) {
        assert_hit(F.w, a, i, 1, i, 0);
        ck_assert_int_eq(*(const int64_t *)kiln_event_get(F.w, b, i), 1000 + i);
    }
    /* one update moves every type on */
    kiln_events_update(F.w);
    kiln_events_update(F.w);
    ck_assert_int_eq(kiln_event_count(F.w, a), 0);
    ck_assert_int_eq(kiln_event_count(F.w, b), 0);
}

KILN_TEST(reading, readers_see_the_previous_buffer_then_the_current_one) {
    kiln_event_type type = register_hit(F.w);
    for (int32_t i = 0; i < 3; i++) emit_hit(F.w, type, 1, i, 1);
    kiln_events_update(F.w);
    for (int32_t i = 0; i < 20; i++) emit_hit(F.w, type, 2, i, 2);
    ck_assert_int_eq(kiln_event_count(F.w, type), 23);
    for (int32_t i = 0; i < 3; i++) assert_hit(F.w, type, i, 1, i, 1);
    for (int32_t i = 0; i < 20; i++) assert_hit(F.w, type, 3 + i, 2, i, 2);
    ck_assert_ptr_null(kiln_event_get(F.w, type, 23));
    kiln_events_update(F.w);
    emit_hit(F.w, type, 3, 0, 3);
    ck_assert_int_eq(kiln_event_count(F.w, type), 21);
    assert_hit(F.w, type, 0, 2, 0, 2);
    assert_hit(F.w, type, 19, 2, 19, 2);
    assert_hit(F.w, type, 20, 3, 0, 3);
}

KILN_TEST(reading, an_event_is_readable_through_the_next_frame_and_gone_the_one_after) {
    kiln_event_type type = register_hit(F.w);
    for (int32_t frame = 0; frame < 12; frame++) {
        kiln_events_update(F.w);
        /* what frame - 1 emitted is still readable, frame - 2's is gone */
        int64_t expected_prev = frame > 0 ? ((frame - 1) % 4) + 1 : 0;
        ck_assert_int_eq(kiln_event_count(F.w, type), expected_prev);
        for (int64_t i = 0; i < expected_prev; i++) assert_hit(F.w, type, i, 0, (int32_t)i, frame - 1);
        int32_t n = frame % 4 + 1; /* 1, 2, 3, 4, 1, ... events per frame */
        for (int32_t i = 0; i < n; i++) emit_hit(F.w, type, 0, i, frame);
        ck_assert_int_eq(kiln_event_count(F.w, type), expected_prev + n);
        assert_hit(F.w, type, expected_prev + n - 1, 0, n - 1, frame);
    }
}

KILN_TEST(reading, event_values_are_aligned_for_their_type) {
    kiln_event_type wide, byte;
    ck_assert_int_eq(kiln_event_register(F.w, &(kiln_component_desc){.name = "Wide", .size = 32, .align = 16},
                                         &wide),
                     KILN_OK);
    ck_assert_int_eq(kiln_event_register(F.w, &(kiln_component_desc){.name = "Byte", .size = 1}, &byte),
                     KILN_OK);
    unsigned char value[32];
    for (int i = 0; i < 40; i++) {
        memset(value, i, sizeof value);
        ck_assert_int_eq(kiln_event_emit(F.w, byte, value), KILN_OK);
        ck_assert_int_eq(kiln_event_emit(F.w, wide, value), KILN_OK);
        if (i == 19) kiln_events_update(F.w);
    }
    for (int64_t i = 0; i < 40; i++) {
        const unsigned char *p = kiln_event_get(F.w, wide, i);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t)p % 16, 0);
        ck_assert_uint_eq(p[0], (unsigned)i);
        ck_assert_uint_eq(p[31], (unsigned)i);
        ck_assert_uint_eq(*(const unsigned char *)kiln_event_get(F.w, byte, i), (unsigned)i);
    }
}

KILN_TEST(reading, zero_sized_events_are_counted) {
    kiln_event_type ping = register_plain_event(F.w, "Ping", 0);
    for (int i = 0; i < 30; i++) ck_assert_int_eq(kiln_event_emit(F.w, ping, NULL), KILN_OK);
    ck_assert_int_eq(kiln_event_count(F.w, ping), 30);
    kiln_events_update(F.w);
    ck_assert_int_eq(kiln_event_emit(F.w, ping, NULL), KILN_OK);
    ck_assert_int_eq(kiln_event_count(F.w, ping), 31);
    kiln_events_update(F.w);
    ck_assert_int_eq(kiln_event_count(F.w, ping), 1);
}

KILN_TEST(reading, emit_of_an_unknown_type_fails_and_records_nothing) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_component pos = test_register_position(world);
    hit h = {1, 2, 3};
    /* no event type at all yet: neither 0, 1 nor a component's number is one */
    ck_assert_int_eq(kiln_event_emit(world, EV(0), &h), KILN_ERR_UNKNOWN_EVENT);
    ck_assert_int_eq(kiln_event_emit(world, EV(1), &h), KILN_ERR_UNKNOWN_EVENT);
    ck_assert_int_eq(kiln_event_emit(world, EV(pos), &h), KILN_ERR_UNKNOWN_EVENT);
    ck_assert_str_ne(kiln_world_error(world), "");
    kiln_event_type type = register_hit(world);
    int64_t bytes = alloc.live_bytes;
    ck_assert_int_ne(kiln_event_emit(world, EV(type.id + 1), &h), KILN_OK);
    ck_assert_int_ne(kiln_event_emit(world, EV(0xffffffffu), &h), KILN_OK);
    ck_assert_int_eq(alloc.live_bytes, bytes);
    ck_assert_int_eq(kiln_event_count(world, EV(type.id + 1)), 0);
    ck_assert_int_eq(kiln_event_count(world, EV(0)), 0);
    ck_assert_ptr_null(kiln_event_get(world, EV(type.id + 1), 0));
    ck_assert_int_eq(kiln_event_count(world, type), 0);
    /* through a command buffer as well */
    kiln_commands *cmd = kiln_commands_create(world);
    ck_assert_ptr_nonnull(cmd);
    ck_assert_int_ne(kiln_commands_emit(cmd, EV(type.id + 1), &h), KILN_OK);
    ck_assert_str_ne(kiln_commands_error(cmd), "");
    ck_assert_int_eq(kiln_commands_count(cmd), 0);
    ck_assert_int_eq(kiln_commands_apply(cmd, world, NULL), KILN_OK);
    ck_assert_int_eq(kiln_event_count(world, type), 0);
    kiln_commands_destroy(cmd);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

KILN_TEST(reading, emit_out_of_memory_fails_and_keeps_the_earlier_events) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_event_type type = register_hit(world);
    hit h = {9, 9, 9};
    test_allocator_fail_after(&alloc, 0);
    ck_assert_int_eq(kiln_event_emit(world, type, &h), KILN_ERR_OUT_OF_MEMORY);
    ck_assert_str_ne(kiln_world_error(world), "");
    ck_assert_int_eq(kiln_event_count(world, type), 0);
    test_allocator_fail_never(&alloc);
    /* one emit with memory, then refuse memory: emits go through until the buffer is full */
    int32_t n = 0;
    emit_hit(world, type, 1, n++, 0);
    int64_t before = alloc.allocations;
    for (;;) {
        test_allocator_fail_after(&alloc, 0);
        hit next = {1, n, 0};
        kiln_result r = kiln_event_emit(world, type, &next);
        test_allocator_fail_never(&alloc);
        if (r == KILN_ERR_OUT_OF_MEMORY) break;
        ck_assert_int_eq(r, KILN_OK);
        n++;
        ck_assert_int_lt(n, 100000);
    }
    ck_assert_int_gt(n, 1); /* some emits fit without memory */
    ck_assert_int_eq(alloc.allocations, before);
    ck_assert_int_eq(kiln_event_count(world, type), n);
    for (int32_t i = 0; i < n; i++) assert_hit(world, type, i, 1, i, 0);
    /* with memory back the same emit goes through */
    emit_hit(world, type, 1, n, 0);
    ck_assert_int_eq(kiln_event_count(world, type), n + 1);
    assert_hit(world, type, n, 1, n, 0);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* command buffers                                                                            */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(commands, .setup = setup, .teardown = teardown);

KILN_TEST(commands, commands_emit_lands_at_apply_in_order) {
    kiln_event_type type = register_hit(F.w);
    kiln_event_type other = register_plain_event(F.w, "Other", 4);
    kiln_component pos = test_register_position(F.w);
    kiln_commands *cmd = kiln_commands_create(F.w);
    ck_assert_ptr_nonnull(cmd);
    kiln_entity placeholder;
    for (int32_t i = 0; i < 40; i++) {
        hit h = {5, i, 0};
        ck_assert_int_eq(kiln_commands_emit(cmd, type, &h), KILN_OK);
        h.seq = -1; /* the buffer copied it */
        if (i == 10) {
            ck_assert_int_eq(kiln_commands_spawn(cmd, &placeholder), KILN_OK);
            ck_assert_int_eq(kiln_commands_add(cmd, placeholder, pos, &(test_position){1, 2}), KILN_OK);
        }
        if (i % 3 == 0) {
            int32_t v = i;
            ck_assert_int_eq(kiln_commands_emit(cmd, other, &v), KILN_OK);
        }
    }
    ck_assert_int_eq(kiln_commands_emit(cmd, type, NULL), KILN_OK);
    /* nothing lands before the apply; direct emits meanwhile land at once */
    ck_assert_int_eq(kiln_event_count(F.w, type), 0);
    emit_hit(F.w, type, 4, 0, 0);
    emit_hit(F.w, type, 4, 1, 0);
    ck_assert_int_eq(kiln_event_count(F.w, type), 2);
    int64_t applied = 0;
    ck_assert_int_eq(kiln_commands_apply(cmd, F.w, &applied), KILN_OK);
    ck_assert_int_eq(applied, 41 + 14 + 2);
    ck_assert_int_eq(kiln_commands_count(cmd), 0);
    ck_assert_int_eq(kiln_event_count(F.w, type), 43);
    assert_hit(F.w, type, 0, 4, 0, 0);
    assert_hit(F.w, type, 1, 4, 1, 0);
    for (int32_t i = 0; i < 40; i++) assert_hit(F.w, type, 2 + i, 5, i, 0);
    assert_hit(F.w, type, 42, 0, 0, 0); /* the NULL value: zeroes */
    ck_assert_int_eq(kiln_event_count(F.w, other), 14);
    for (int32_t i = 0; i < 14; i++) ck_assert_int_eq(*(const int32_t *)kiln_event_get(F.w, other, i), i * 3);
    ck_assert(kiln_has(F.w, kiln_commands_resolve(cmd, placeholder), pos));
    /* a second batch applies after the first, and a cleared batch never lands */
    hit late = {6, 0, 0};
    ck_assert_int_eq(kiln_commands_emit(cmd, type, &late), KILN_OK);
    ck_assert_int_eq(kiln_commands_apply(cmd, F.w, NULL), KILN_OK);
    assert_hit(F.w, type, 43, 6, 0, 0);
    ck_assert_int_eq(kiln_commands_emit(cmd, type, &late), KILN_OK);
    kiln_commands_clear(cmd);
    ck_assert_int_eq(kiln_commands_apply(cmd, F.w, NULL), KILN_OK);
    ck_assert_int_eq(kiln_event_count(F.w, type), 44);
    kiln_commands_destroy(cmd);
}

KILN_TEST(commands, commands_emit_into_a_buffer_destroyed_unapplied_leaks_nothing) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_event_type type = register_hit(world);
    kiln_commands *cmd = kiln_commands_create(world);
    ck_assert_ptr_nonnull(cmd);
    for (int32_t i = 0; i < 100; i++) {
        hit h = {1, i, 0};
        ck_assert_int_eq(kiln_commands_emit(cmd, type, &h), KILN_OK);
    }
    ck_assert_int_eq(kiln_commands_count(cmd), 100);
    kiln_commands_destroy(cmd);
    ck_assert_int_eq(kiln_event_count(world, type), 0);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* schedule                                                                                   */
/* ------------------------------------------------------------------------------------------ */

typedef struct probe {
    kiln_event_type type;
    int64_t seen[8]; /* kiln_event_count at each run */
    int32_t runs;
    int32_t emit;    /* events to emit per run */
    int32_t source;
    int32_t frame;
    bool use_commands;
    int64_t seen_after_emit[8];
} probe;

static void probe_system(const kiln_system_ctx *ctx) {
    probe *p = ctx->user;
    if (p->runs < 8) p->seen[p->runs] = kiln_event_count(ctx->world, p->type);
    for (int32_t i = 0; i < p->emit; i++) {
        hit h = {p->source, i, p->frame};
        kiln_result r = p->use_commands ? kiln_commands_emit(ctx->commands, p->type, &h)
                                        : kiln_event_emit(ctx->world, p->type, &h);
        if (r != KILN_OK) p->emit = -1000; /* checked by the test */
        /* yield now and then so worker and main-thread systems interleave */
        if (i % 16 == 0) sched_yield();
    }
    if (p->runs < 8) p->seen_after_emit[p->runs] = kiln_event_count(ctx->world, p->type);
    p->runs++;
}

KILN_TEST_GROUP_WITH(schedule, .setup = setup, .teardown = teardown, .timeout = 60);

KILN_TEST(schedule, schedule_run_updates_the_events_once_per_run_before_the_first_stage) {
    kiln_event_type type = register_hit(F.w);
    kiln_schedule *s = kiln_schedule_create(F.w, NULL);
    ck_assert_ptr_nonnull(s);
    probe first = {.type = type}, second = {.type = type}, third = {.type = type};
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "first", .run = probe_system,
                                                               .user = &first}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "second", .run = probe_system,
                                                               .user = &second, .after = {"first"}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "third", .run = probe_system,
                                                               .user = &third, .after = {"second"}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 3);
    emit_hit(F.w, type, 1, 0, 0); /* before run 1 */
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    /* run 1 updated once: the event moved to the previous buffer, still readable in every
     * stage (an update per stage would have dropped it by the third) */
    ck_assert_int_eq(first.seen[0], 1);
    ck_assert_int_eq(second.seen[0], 1);
    ck_assert_int_eq(third.seen[0], 1);
    ck_assert_int_eq(kiln_event_count(F.w, type), 1);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    /* run 2 updated again: gone */
    ck_assert_int_eq(first.seen[1], 0);
    ck_assert_int_eq(third.seen[1], 0);
    ck_assert_int_eq(kiln_event_count(F.w, type), 0);
    /* an emit between runs is seen by run 3 and run 4's first update drops it */
    emit_hit(F.w, type, 2, 0, 0);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(first.seen[2], 1);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(first.seen[3], 0);
    kiln_schedule_destroy(s);
}

KILN_TEST(schedule, a_main_thread_system_emit_lands_at_the_end_of_its_stage) {
    kiln_event_type type = register_hit(F.w);
    kiln_schedule *s = kiln_schedule_create(F.w, NULL);
    probe emitter = {.type = type, .emit = 3, .source = 1};
    probe reader = {.type = type};
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "emitter", .run = probe_system,
                                                               .user = &emitter, .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "reader", .run = probe_system,
                                                               .user = &reader, .after = {"emitter"}}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(emitter.emit, 3);
    /* the emitter's own emits were queued, not visible to itself */
    ck_assert_int_eq(emitter.seen_after_emit[0], 0);
    /* the next stage sees them */
    ck_assert_int_eq(reader.seen[0], 3);
    ck_assert_int_eq(kiln_event_count(F.w, type), 3);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(emitter.seen[1], 3);    /* last frame's, now previous */
    ck_assert_int_eq(reader.seen[1], 6);     /* plus this frame's */
    kiln_schedule_destroy(s);
}

#define SOURCES 6
#define FRAMES 6

typedef struct order_run {
    hit log[FRAMES][SOURCES * 64 * 2];
    int64_t count[FRAMES];
} order_run;

/* Runs FRAMES frames of one stage of alternating worker (commands) and main-thread
 * (kiln_event_emit) emitters, with a pool of workers (NO_POOL: none), and logs what
 * is readable after each run. */
static void run_emitters(int workers, order_run *out) {
    kiln_world *world = kiln_world_create(NULL);
    kiln_event_type type = register_hit(world);
    kiln_jobs *jobs = NULL;
    if (workers != NO_POOL) {
        jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = workers});
        ck_assert_ptr_nonnull(jobs);
    }
    kiln_schedule *s = kiln_schedule_create(world, &(kiln_schedule_desc){.jobs = jobs});
    ck_assert_ptr_nonnull(s);
    probe probes[SOURCES];
    for (int32_t i = 0; i < SOURCES; i++) {
        bool worker = i % 2 == 0;
        probes[i] = (probe){.type = type, .emit = 20 + 9 * i, .source = i + 1, .use_commands = worker};
        char name[32];
        snprintf(name, sizeof name, "%s%d", worker ? "worker" : "main", (int)i);
        ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = name, .run = probe_system,
                                                                   .user = &probes[i],
                                                                   .main_thread = !worker}),
                         KILN_OK);
    }
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    for (int32_t frame = 0; frame < FRAMES; frame++) {
        for (int32_t i = 0; i < SOURCES; i++) probes[i].frame = frame;
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        int64_t n = kiln_event_count(world, type);
        ck_assert_int_le(n, SOURCES * 64 * 2);
        out->count[frame] = n;
        for (int64_t i = 0; i < n; i++) out->log[frame][i] = hit_at(world, type, i);
    }
    for (int32_t i = 0; i < SOURCES; i++) ck_assert_int_eq(probes[i].emit, 20 + 9 * i);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(world);
}

KILN_TEST(schedule, events_from_parallel_systems_land_in_declaration_order_with_0_and_2_workers) {
    static order_run runs[3];
    int pools[3] = {NO_POOL, KILN_JOBS_INLINE, 2};
    for (int k = 0; k < 3; k++) run_emitters(pools[k], &runs[k]);
    for (int32_t frame = 0; frame < FRAMES; frame++) {
        /* the expected log: last frame's events, then this one's, each by declaration order */
        hit expected[SOURCES * 64 * 2];
        int64_t n = 0;
        for (int32_t f = frame > 0 ? frame - 1 : 0; f <= frame; f++)
            for (int32_t src = 0; src < SOURCES; src++)
                for (int32_t i = 0; i < 20 + 9 * src; i++) expected[n++] = (hit){src + 1, i, f};
        for (int k = 0; k < 3; k++) {
            ck_assert_int_eq(runs[k].count[frame], n);
            for (int64_t i = 0; i < n; i++) {
                const hit *a = &runs[k].log[frame][i], *e = &expected[i];
                ck_assert_msg(a->source == e->source && a->seq == e->seq && a->frame == e->frame,
                              "pool %d, frame %d, event %lld: got {%d, %d, %d}, expected {%d, %d, %d}",
                              pools[k], frame, (long long)i, a->source, a->seq, a->frame, e->source,
                              e->seq, e->frame);
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* memory                                                                                     */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(memory, .timeout = 60);

KILN_TEST(memory, steady_state_emits_and_updates_allocate_nothing) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_event_type a = register_hit(world);
    kiln_event_type b = register_plain_event(world, "Small", 2);
    kiln_commands *cmd = kiln_commands_create(world);
    ck_assert_ptr_nonnull(cmd);
    int64_t allocations = 0;
    for (int32_t frame = 0; frame < 30; frame++) {
        if (frame == 5) allocations = alloc.allocations; /* after warming up */
        kiln_events_update(world);
        for (int32_t i = 0; i < 150; i++) emit_hit(world, a, 1, i, frame);
        for (int32_t i = 0; i < 70; i++) {
            ck_assert_int_eq(kiln_event_emit(world, b, NULL), KILN_OK);
            hit h = {2, i, frame};
            ck_assert_int_eq(kiln_commands_emit(cmd, a, &h), KILN_OK);
        }
        ck_assert_int_eq(kiln_commands_apply(cmd, world, NULL), KILN_OK);
        ck_assert_int_eq(kiln_event_count(world, a), frame ? 440 : 220);
    }
    ck_assert_int_eq(alloc.allocations, allocations);
    kiln_commands_destroy(cmd);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

KILN_TEST(memory, steady_state_schedule_frames_with_events_allocate_nothing) {
    locked_allocator alloc;
    kiln_world *world = locked_world_create(&alloc);
    kiln_event_type type = register_hit(world);
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    ck_assert_ptr_nonnull(jobs);
    kiln_schedule *s = kiln_schedule_create(world, &(kiln_schedule_desc){.jobs = jobs});
    probe w = {.type = type, .emit = 100, .source = 1, .use_commands = true};
    probe m = {.type = type, .emit = 50, .source = 2};
    probe r = {.type = type};
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "w", .run = probe_system, .user = &w}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "m", .run = probe_system, .user = &m,
                                                               .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "r", .run = probe_system, .user = &r,
                                                               .after = {"w", "m"}}),
                     KILN_OK);
    int64_t allocations = 0;
    for (int32_t frame = 0; frame < 25; frame++) {
        if (frame == 5) allocations = alloc.inner.allocations;
        ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
        ck_assert_int_eq(kiln_event_count(world, type), frame ? 300 : 150);
    }
    ck_assert_int_eq(alloc.inner.allocations, allocations);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.inner.live_bytes, 0);
    locked_fini(&alloc);
}

/* kiln_world_trim frees the blocks of event buffers that hold no event: a burst's room goes
 * back once two updates have emptied both buffers, while a buffer holding events keeps its
 * block and its events where they are. */
KILN_TEST(memory, a_trim_frees_empty_event_buffers_and_keeps_the_others) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_event_type burst = register_plain_event(world, "Burst", 4096);
    kiln_event_type kept = register_hit(world);
    int64_t before = alloc.live_bytes;
    for (int32_t i = 0; i < 1000; i++) ck_assert_int_eq(kiln_event_emit(world, burst, NULL), KILN_OK);
    emit_hit(world, kept, 1, 7, 0);
    ck_assert_int_gt(alloc.live_bytes - before, 1000 * 4096);
    ck_assert_int_lt(kiln_world_trim(world), 1000 * 4096); /* the burst is still readable */
    ck_assert_int_eq(kiln_event_count(world, burst), 1000);
    kiln_events_update(world);
    emit_hit(world, kept, 1, 8, 1);
    const hit *seven = kiln_event_get(world, kept, 0);
    ck_assert(seven && seven->seq == 7);
    kiln_events_update(world); /* the burst's both buffers are empty now */
    ck_assert_int_eq(kiln_event_count(world, burst), 0);
    const hit *eight = kiln_event_get(world, kept, 0);
    ck_assert(eight && eight->seq == 8);
    ck_assert_int_gt(kiln_world_trim(world), 1000 * 4096);
    ck_assert_ptr_eq(kiln_event_get(world, kept, 0), eight); /* not empty: kept in place */
    ck_assert_int_lt(alloc.live_bytes - before, 4096);
    for (int32_t i = 0; i < 3; i++) ck_assert_int_eq(kiln_event_emit(world, burst, NULL), KILN_OK);
    ck_assert_int_eq(kiln_event_count(world, burst), 3);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
    ck_assert_int_eq(alloc.bad_osize, 0);
}
