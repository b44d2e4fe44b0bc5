/* test_commands_refused.c: Check suite for commands the world refuses for good (a spawn past the
 * archetype limit): a lenient queue drops them and lands the rest, a buffer keeps them until skipped. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

enum { TAGS = 16 };

/* A world on the counting allocator holding every archetype it may (65,472: one entity per tag
 * set but the last ones), so a spawn with all TAGS tags needs one past the limit; target has a
 * Position. Teardown checks every byte came back and no Owned value died twice. */
typedef struct fixture {
    test_allocator alloc;
    kiln_world *w;
    kiln_component tags[TAGS], pos, vel, owned;
    kiln_entity target;
    test_hook_log log;
    int64_t drops; /* drop hook calls */
    kiln_result first_code; /* the first drop's code and message */
    char first[256];
    bool fail_after_recording; /* the system refuses the allocator every request once it recorded */
} fixture;

static fixture F;

static void hear(kiln_world *world, const char *system, kiln_result code, const char *message, void *ctx) {
    (void)world, (void)system, (void)ctx;
    if (F.drops++ > 0) return;
    F.first_code = code;
    snprintf(F.first, sizeof F.first, "%s", message);
}

static void setup_world(bool full) {
    memset(&F, 0, sizeof F);
    test_allocator_init(&F.alloc);
    F.w = test_world_create(&F.alloc);
    char name[16];
    for (int i = 0; i < TAGS; i++) {
        snprintf(name, sizeof name, "T%d", i);
        F.tags[i] = test_register_tag(F.w, name);
    }
    F.pos = test_register_position(F.w);
    F.vel = test_register_velocity(F.w);
    F.owned = test_register_owned(F.w, &F.log);
    ck_assert_int_eq(kiln_spawn_with(F.w, &F.pos, (const void *[]){&(test_position){0, 0}}, 1, &F.target),
                     KILN_OK);
    if (full) ck_assert_int_eq(test_spawn_tag_sets(F.w, F.tags, TAGS, NULL), KILN_ERR_LIMIT);
    kiln_world_drop_hook_set(F.w, hear, NULL, NULL, NULL);
}

static void setup_full(void) { setup_world(true); }
static void setup_small(void) { setup_world(false); }

static void teardown(void) {
    test_allocator_fail_never(&F.alloc);
    kiln_world_destroy(F.w);
    ck_assert_int_eq(F.alloc.live_blocks, 0);
    ck_assert_int_eq(F.alloc.live_bytes, 0);
    ck_assert_int_eq(test_hook_log_count(&F.log, -1), 0);
    ck_assert_int_eq(test_hook_log_count(&F.log, -2), 0);
}

static float target_x(void) {
    const test_position *p = kiln_get(F.w, F.target, F.pos);
    ck_assert_ptr_nonnull(p);
    return p->x;
}

static int64_t dropped(void) {
    int64_t n = -1;
    kiln_world_dropped(F.w, &n, NULL);
    return n;
}

/* Records, into buf, a spawn of a Position, a Velocity (both held in the spawn's slot) and
 * every tag (past the limit when the world is full), an Owned
 * value (id) and a Velocity for its placeholder, a despawn of it, then ordinary changes: a set
 * of target's Position to x and a spawn of a Position. */
static void record_frame(kiln_commands *buf, int32_t id, float x) {
    kiln_entity p, q;
    kiln_component all[2 + TAGS] = {F.pos, F.vel};
    void *values[2 + TAGS] = {&(test_position){1, 1}, &(test_velocity){1, 1}};
    memcpy(all + 2, F.tags, sizeof F.tags);
    ck_assert_int_eq(kiln_commands_spawn_with(buf, all, values, 2 + TAGS, &p), KILN_OK);
    test_owned v = test_owned_make(id);
    ck_assert_int_eq(kiln_commands_add(buf, p, F.owned, &v), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(buf, p, F.vel, &(test_velocity){1, 1}), KILN_OK);
    ck_assert_int_eq(kiln_commands_despawn(buf, p), KILN_OK);
    ck_assert_int_eq(kiln_commands_set(buf, F.target, F.pos, &(test_position){x, x}), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn_with(buf, &F.pos, (void *[]){&(test_position){x, 0}}, 1, &q), KILN_OK);
}

static int32_t frame;

static void maker(const kiln_system_ctx *ctx) {
    frame++;
    record_frame(ctx->commands, frame, (float)frame);
    if (F.fail_after_recording) test_allocator_fail_after(&F.alloc, 0);
}

static kiln_schedule *maker_schedule(void) {
    frame = 0;
    kiln_schedule *s = kiln_schedule_create(F.w, NULL);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "maker", .run = maker, .main_thread = true,
                                                               .reads = {F.pos}}),
                     KILN_OK);
    return s;
}

/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(lenient, .setup = setup_full, .teardown = teardown, .timeout = 300);

/* Before, the spawn stayed at the head of the system's buffer and every later change of the
 * system waited behind it, frame after frame, while the buffer grew. */
KILN_TEST(lenient, a_systems_spawn_past_the_archetype_limit_is_dropped_and_its_later_changes_land) {
    kiln_schedule *s = maker_schedule();
    int64_t entities = kiln_entity_count(F.w);
    for (int32_t f = 1; f <= 3; f++) {
        ck_assert_msg(kiln_schedule_run(s, 0.0) == KILN_OK, "frame %d: %s", f, kiln_world_error(F.w));
        ck_assert_int_eq(target_x(), (float)f);                   /* its set landed this frame */
        ck_assert_int_eq(kiln_entity_count(F.w), entities + f);  /* and its ordinary spawn */
        ck_assert_int_eq(test_hook_log_count(&F.log, f), 1);      /* the Owned value destroyed once */
    }
    ck_assert_int_eq(F.first_code, KILN_ERR_LIMIT);
    ck_assert_msg(strstr(F.first, "kiln_schedule_run: system 'maker': command 1 (spawn) on placeholder 0: "
                                  "too many archetypes (limit 65472); dropped"), "%s", F.first);
    /* per frame: the spawn, its 18 adds, Owned and Velocity; the despawn of the dead is no drop */
    ck_assert_int_eq(dropped(), 3 * 21);
    ck_assert_int_eq(F.drops, 3 * 21);
    const char *msg = NULL;
    ck_assert_int_eq(kiln_world_dropped(F.w, NULL, &msg), KILN_ERR_DEAD_ENTITY);
    ck_assert_msg(strstr(msg, "(add Velocity) on placeholder 0: its spawn did not land; dropped"), "%s", msg);
    kiln_schedule_destroy(s);
}

/* The commands naming a dropped spawn's placeholder land on no entity: its placeholder never
 * resolves, so they are dropped, never applied to the next spawn of the buffer. */
KILN_TEST(lenient, changes_aimed_at_a_dropped_spawn_touch_no_other_entity) {
    kiln_schedule *s = maker_schedule();
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    kiln_query *q = NULL;
    ck_assert_int_eq(kiln_query_create(F.w, &(kiln_query_desc){.with = {F.vel}}, &q), KILN_OK);
    ck_assert_int_eq(kiln_query_count(q), 0);
    kiln_query_destroy(q);
    ck_assert(!kiln_has(F.w, F.target, F.owned));
    kiln_schedule_destroy(s);
}

/* A deferred spawn reserves its handle at once: dropped, the handle stays dead for good (its
 * generation spent), and the rest of the queue lands. */
KILN_TEST(lenient, a_deferred_spawn_past_the_limit_is_dropped_and_its_handle_stays_dead) {
    kiln_entity e;
    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_spawn_with(F.w, F.tags, NULL, TAGS, &e), KILN_OK);
    test_owned v = test_owned_make(9);
    ck_assert_int_eq(kiln_add(F.w, e, F.owned, &v), KILN_OK);
    ck_assert_int_eq(kiln_set(F.w, F.target, F.pos, &(test_position){5, 5}), KILN_OK);
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
    ck_assert(!kiln_is_alive(F.w, e));
    ck_assert_int_eq(target_x(), 5);
    ck_assert_int_eq(test_hook_log_count(&F.log, 9), 1);
    ck_assert_int_eq(F.first_code, KILN_ERR_LIMIT);
    ck_assert_msg(strstr(F.first, "kiln_defer_end: command 1 (spawn) on entity "), "%s", F.first);
    ck_assert_int_eq(dropped(), 1 + TAGS + 1);
    kiln_entity next;
    ck_assert_int_eq(kiln_spawn_with(F.w, &F.pos, NULL, 1, &next), KILN_OK);
    ck_assert(next != e && !kiln_is_alive(F.w, e));
    ck_assert_int_eq(kiln_entity_index(next), kiln_entity_index(e)); /* the slot, a new generation */
}

/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(memory, .setup = setup_small, .teardown = teardown, .timeout = 60);

/* Out of memory may pass: the refused spawn and what follows it wait, in order, and land at the
 * next stage end; nothing is dropped. */
KILN_TEST(memory, a_stage_end_out_of_memory_keeps_the_rest_queued_and_lands_it_next_frame) {
    kiln_schedule *s = maker_schedule();
    F.fail_after_recording = true;
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_ERR_OUT_OF_MEMORY);
    test_allocator_fail_never(&F.alloc);
    ck_assert_int_eq(target_x(), 0); /* waiting behind the spawn */
    ck_assert_int_eq(dropped(), 0);
    F.fail_after_recording = false;
    int64_t entities = kiln_entity_count(F.w);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(target_x(), 2);                          /* both frames landed, in order */
    ck_assert_int_eq(kiln_entity_count(F.w), entities + 2);   /* each frame's despawned spawn, */
    ck_assert_int_eq(test_hook_log_count(&F.log, 1), 1);      /* whose Owned died with it */
    ck_assert_int_eq(test_hook_log_count(&F.log, 2), 1);
    ck_assert_int_eq(dropped(), 0);
    kiln_schedule_destroy(s);
}

/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(strict, .setup = setup_full, .teardown = teardown, .timeout = 300);

/* A host's own buffer keeps the spawn it cannot land, resumably; kiln_commands_skip gives it
 * up, then each command aimed at its placeholder fails in turn and is skipped alike. */
KILN_TEST(strict, a_buffer_keeps_a_spawn_past_the_limit_until_skipped) {
    kiln_commands *buf = kiln_commands_create(F.w);
    ck_assert_ptr_nonnull(buf);
    record_frame(buf, 4, 8);
    int64_t pending = kiln_commands_count(buf), applied = -1;
    ck_assert_int_eq(pending, 1 + 2 + TAGS + 4 + 1 + 1);
    for (int round = 0; round < 2; round++) { /* it stays, however often applied */
        ck_assert_int_eq(kiln_commands_apply(buf, F.w, &applied), KILN_ERR_LIMIT);
        ck_assert_int_eq(applied, 0);
        ck_assert_int_eq(kiln_commands_count(buf), pending);
    }
    ck_assert_int_eq(kiln_commands_skip(buf), 3); /* the spawn and the two adds it holds */
    ck_assert_int_eq(kiln_commands_apply(buf, F.w, NULL), KILN_ERR_DEAD_ENTITY);
    ck_assert_str_eq(kiln_world_error(F.w),
                     "kiln_commands_apply: command 1 (add T0) on placeholder 0: its spawn did not land");
    int64_t skipped = 3;
    kiln_result r;
    while ((r = kiln_commands_apply(buf, F.w, NULL)) == KILN_ERR_DEAD_ENTITY) skipped += kiln_commands_skip(buf);
    ck_assert_msg(r == KILN_OK, "%s", kiln_world_error(F.w));
    ck_assert_int_eq(skipped, 3 + TAGS + 2); /* the despawn of the never spawned is no failure */
    ck_assert_int_eq(test_hook_log_count(&F.log, 4), 1);
    ck_assert_int_eq(target_x(), 8);
    ck_assert_int_eq(dropped(), 0); /* a host's buffer drops nothing by itself */
    ck_assert_int_eq(kiln_commands_skip(buf), 0);
    kiln_commands_destroy(buf);
}

KILN_TEST(strict, skipping_a_refused_add_destroys_its_value_once_and_the_rest_lands) {
    kiln_commands *buf = kiln_commands_create(F.w);
    ck_assert_ptr_nonnull(buf);
    kiln_entity gone;
    ck_assert_int_eq(kiln_spawn(F.w, &gone), KILN_OK);
    test_owned v = test_owned_make(6);
    ck_assert_int_eq(kiln_commands_add(buf, gone, F.owned, &v), KILN_OK);
    ck_assert_int_eq(kiln_commands_set(buf, F.target, F.pos, &(test_position){3, 3}), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.w, gone), KILN_OK);
    ck_assert_int_eq(kiln_commands_apply(buf, F.w, NULL), KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(kiln_commands_skip(buf), 1);
    ck_assert_int_eq(test_hook_log_count(&F.log, 6), 1);
    ck_assert_int_eq(kiln_commands_count(buf), 1);
    ck_assert_int_eq(kiln_commands_apply(buf, F.w, NULL), KILN_OK);
    ck_assert_int_eq(target_x(), 3);
    ck_assert_int_eq(test_hook_log_count(&F.log, 6), 1);
    kiln_commands_destroy(buf);
}
