/* test_commands_refused.c: Check suite for commands the world refuses for good (a spawn past the
 * archetype limit): a lenient queue drops them and lands the rest, a buffer keeps them until skipped. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

enum { TAGS = 16 };

/* An entity field: Link (no hooks) and OwnedLink (an Owned value beside it, destroyed through
 * Owned's hook, so a value dropped twice or never shows in the log). */
typedef struct owned_link {
    test_owned owned;
    kiln_entity target;
} owned_link;

/* A world on the counting allocator holding every archetype it may (65,472: one entity per tag
 * set but the last ones), so a spawn with all TAGS tags needs one past the limit; target has a
 * Position, linked a Link (to nothing); no OwnedLink archetype. Teardown checks every byte came back and no Owned value died twice. */
typedef struct fixture {
    test_allocator alloc;
    kiln_world *w;
    kiln_component tags[TAGS], pos, vel, owned, link, olink;
    kiln_entity target, linked; /* linked: a Link alone */
    test_hook_log log;
    int64_t drops; /* drop hook calls */
    kiln_result first_code; /* the first drop's code and message */
    char first[256];
    char heard[64][256]; /* the first 64 drops' messages */
    bool fail_after_recording; /* the system refuses the allocator every request once it recorded */
} fixture;

static fixture F;

static void hear(kiln_world *world, const char *system, kiln_result code, const char *message, void *ctx) {
    (void)world, (void)system, (void)ctx;
    if (F.drops < 64) snprintf(F.heard[F.drops], sizeof F.heard[0], "%s", message);
    if (F.drops++ > 0) return;
    F.first_code = code;
    snprintf(F.first, sizeof F.first, "%s", message);
}

static void olink_destroy(void *values, int32_t count, void *ctx) {
    kiln_component_desc owned = test_owned_desc(ctx);
    for (int32_t i = 0; i < count; i++) owned.destroy(&((owned_link *)values)[i].owned, 1, ctx);
}

static void register_links(void) {
    static const kiln_field link_fields[] = {{"target", KILN_TYPE_ENTITY, 0, 0}};
    static const kiln_field olink_fields[] = {{"target", KILN_TYPE_ENTITY, offsetof(owned_link, target), 0}};
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = "Link", .size = sizeof(kiln_entity),
                         .fields = link_fields, .field_count = 1}, &F.link), KILN_OK);
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = "OwnedLink",
                         .size = sizeof(owned_link), .align = _Alignof(owned_link), .fields = olink_fields,
                         .field_count = 1, .destroy = olink_destroy, .hook_ctx = &F.log}, &F.olink), KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(F.w, &F.link, NULL, 1, &F.linked), KILN_OK);
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
    register_links();
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

/* kiln_commands_skip's count, the skip asserted to succeed. */
static int64_t skip(kiln_commands *buf) {
    int64_t n = -1;
    ck_assert_int_eq(kiln_commands_skip(buf, &n), KILN_OK);
    return n;
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

/* A system running once whatever records is set to. */
static void (*records)(kiln_commands *buf);

static void recorder(const kiln_system_ctx *ctx) { records(ctx->commands); }

static void run_once(void (*fn)(kiln_commands *buf)) {
    records = fn;
    kiln_schedule *s = kiln_schedule_create(F.w, NULL);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "linker", .run = recorder,
                                                               .main_thread = true}), KILN_OK);
    ck_assert_msg(kiln_schedule_run(s, 0.0) == KILN_OK, "%s", kiln_world_error(F.w));
    kiln_schedule_destroy(s);
}

/* Every Link in the world names null or a live entity: never a placeholder's bits. */
static int64_t links_checked(void) {
    kiln_query *q = NULL;
    ck_assert_int_eq(kiln_query_create(F.w, &(kiln_query_desc){.with = {F.link}}, &q), KILN_OK);
    kiln_iter it;
    kiln_query_iter(q, &it);
    int64_t n = 0;
    while (kiln_query_next(&it)) {
        const kiln_entity *to = kiln_iter_column(&it, 0);
        for (int32_t r = 0; r < it.count; r++, n++)
            ck_assert_msg(to[r] == KILN_NULL_ENTITY || kiln_is_alive(F.w, to[r]), "Link to %llx",
                          (unsigned long long)to[r]);
    }
    kiln_query_destroy(q);
    return n;
}

/* Whether a drop heard (of the first 64) says what. */
static bool heard(const char *what) {
    for (int64_t i = 0; i < F.drops && i < 64; i++)
        if (strstr(F.heard[i], what)) return true;
    return false;
}

static kiln_entity spawn_tags(kiln_commands *buf) {
    kiln_entity p;
    ck_assert_int_eq(kiln_commands_spawn_with(buf, F.tags, NULL, TAGS, &p), KILN_OK);
    return p;
}

/* A spawn past the limit (p), a spawn of a Link to p and a set of linked's Link to p. */
static void link_to_dropped(kiln_commands *buf) {
    kiln_entity p = spawn_tags(buf), q;
    ck_assert_int_eq(kiln_commands_spawn_with(buf, &F.link, (void *[]){&p}, 1, &q), KILN_OK);
    ck_assert_int_eq(kiln_commands_set(buf, F.linked, F.link, &p), KILN_OK);
}

/* A spawn past the limit (p) and a spawn of an OwnedLink (id 7) to p, whose archetype the full
 * world lacks. */
static void owned_link_to_dropped(kiln_commands *buf) {
    kiln_entity p = spawn_tags(buf), q;
    owned_link v = {test_owned_make(7), p};
    ck_assert_int_eq(kiln_commands_spawn_with(buf, &F.olink, (void *[]){&v}, 1, &q), KILN_OK);
}

KILN_TEST_GROUP_WITH(placeholders, .setup = setup_full, .teardown = teardown, .timeout = 300);

/* Before, the spawn and the set landed with the placeholder's raw bits in Link (a handle of no
 * entity, which a system copying Links spread): a value naming a dropped spawn is dropped. */
KILN_TEST(placeholders, a_value_naming_a_dropped_spawn_is_dropped_not_landed_raw) {
    int64_t entities = kiln_entity_count(F.w);
    run_once(link_to_dropped);
    ck_assert_int_eq(kiln_entity_count(F.w), entities);
    ck_assert_int_eq(links_checked(), 1); /* linked alone */
    ck_assert(*(const kiln_entity *)kiln_get(F.w, F.linked, F.link) == KILN_NULL_ENTITY);
    ck_assert_int_eq(dropped(), 1 + TAGS + 2 + 1);
    ck_assert(heard("(spawn) on placeholder 1: its add of Link cannot land: field 'target' holds placeholder 0, "
                    "whose spawn did not land; dropped"));
    const char *msg = NULL;
    ck_assert_int_eq(kiln_world_dropped(F.w, NULL, &msg), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(msg, "(set Link) on entity "), "%s", msg);
    ck_assert_msg(strstr(msg, ": field 'target' holds placeholder 0, whose spawn did not land; dropped"), "%s", msg);
}

/* Before, the spawn landed as an empty entity and its add alone was dropped (no OwnedLink
 * archetype past the limit): a spawn whose value cannot land is dropped whole, the value
 * destroyed once. */
KILN_TEST(placeholders, a_spawn_with_a_value_naming_a_dropped_spawn_is_dropped_whole) {
    int64_t entities = kiln_entity_count(F.w);
    run_once(owned_link_to_dropped);
    ck_assert_int_eq(kiln_entity_count(F.w), entities);
    ck_assert_int_eq(test_hook_log_count(&F.log, 7), 1);
    ck_assert_int_eq(dropped(), 1 + TAGS + 2); /* each command counts: the spawn and its add */
    const char *msg = NULL;
    ck_assert_int_eq(kiln_world_dropped(F.w, NULL, &msg), KILN_ERR_DEAD_ENTITY);
    ck_assert_msg(strstr(msg, "(add OwnedLink) on placeholder 1: its spawn did not land"), "%s", msg);
    ck_assert(heard("(spawn) on placeholder 1: its add of OwnedLink cannot land: field 'target' holds "
                    "placeholder 0, whose spawn did not land; dropped"));
}

/* A guessed placeholder (its spawn comes later) and one of an earlier batch cannot be rewritten
 * at their turn either: their spawns are dropped whole; one naming its own spawn lands. */
static kiln_entity earlier; /* a placeholder of the previous frame's batch */

static void link_guessed(kiln_commands *buf) {
    kiln_entity own, guess, old, later;
    ck_assert_int_eq(kiln_commands_spawn(buf, &own), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(buf, own, F.link, &own), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn(buf, &guess), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(buf, guess, F.link, &(kiln_entity){guess + 1}), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn_with(buf, &F.link, (void *[]){&earlier}, 1, &old), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn(buf, &later), KILN_OK);
    earlier = own;
}

KILN_TEST(placeholders, a_spawn_with_a_guessed_or_stale_placeholder_is_dropped_whole) {
    earlier = KILN_NULL_ENTITY;
    int64_t entities = kiln_entity_count(F.w);
    run_once(link_guessed); /* own, old (a Link to null) and later land */
    ck_assert_int_eq(kiln_entity_count(F.w), entities + 3);
    ck_assert_int_eq(dropped(), 2); /* guess: the spawn and its add */
    ck_assert(heard("command 3 (spawn) on placeholder 1: its add of Link cannot land: field 'target' holds "
                    "placeholder 2 whose spawn comes later in the buffer; dropped"));
    run_once(link_guessed); /* now earlier is the first frame's own */
    ck_assert_int_eq(kiln_entity_count(F.w), entities + 3 + 2);
    ck_assert_int_eq(links_checked(), 1 + 2 + 1); /* linked, each frame's own, the first old */
    ck_assert_int_eq(dropped(), 2 + 4);
    ck_assert(heard("command 5 (spawn) on placeholder 2: its add of Link cannot land: field 'target' holds "
                    "placeholder 0, which is not from this buffer's current batch; dropped"));
}

/* Hit: an event with an entity field. */
static kiln_event_type hit;

static void register_hit(void) {
    static const kiln_field fields[] = {{"target", KILN_TYPE_ENTITY, 0, 0}};
    ck_assert_int_eq(kiln_event_register(F.w, &(kiln_component_desc){.name = "Hit", .size = sizeof(kiln_entity),
                                                                     .fields = fields, .field_count = 1}, &hit),
                     KILN_OK);
}

/* A spawn past the limit (p), an emit of a Hit on p, then one on target. */
static void hit_dropped(kiln_commands *buf) {
    kiln_entity p = spawn_tags(buf);
    ck_assert_int_eq(kiln_commands_emit(buf, hit, &p), KILN_OK);
    ck_assert_int_eq(kiln_commands_emit(buf, hit, &F.target), KILN_OK);
}

/* An emit's value is rewritten as an add's is: one naming a dropped spawn is dropped, never
 * emitted with the placeholder's raw bits; the next emit lands. */
KILN_TEST(placeholders, an_emit_naming_a_dropped_spawn_is_dropped_not_emitted_raw) {
    register_hit();
    run_once(hit_dropped);
    ck_assert_int_eq(kiln_event_count(F.w, hit), 1);
    ck_assert(*(const kiln_entity *)kiln_event_get(F.w, hit, 0) == F.target);
    ck_assert_int_eq(dropped(), 1 + TAGS + 1);
    const char *msg = NULL;
    ck_assert_int_eq(kiln_world_dropped(F.w, NULL, &msg), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(msg, "system 'linker': command 18 (emit Hit): field 'target' holds placeholder 0, whose spawn "
                             "did not land; dropped"), "%s", msg); /* before: "(emit Hit) on entity 0v0" */
}

/* A host's buffer fails at an emit naming a later spawn, emitting nothing, until it is skipped. */
KILN_TEST(placeholders, an_emit_naming_a_later_spawn_fails_a_buffers_apply_until_skipped) {
    register_hit();
    kiln_commands *buf = kiln_commands_create(F.w);
    ck_assert_ptr_nonnull(buf);
    kiln_entity p, later;
    ck_assert_int_eq(kiln_commands_spawn(buf, &p), KILN_OK);
    kiln_entity guess = p + 1;
    ck_assert_int_eq(kiln_commands_emit(buf, hit, &guess), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn(buf, &later), KILN_OK);
    ck_assert_int_eq(kiln_commands_apply(buf, F.w, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.w), "kiln_commands_apply: command 1 (emit Hit): field 'target' holds "
                                            "placeholder 1 whose spawn comes later in the buffer");
    ck_assert_int_eq(kiln_event_count(F.w, hit), 0);
    ck_assert_int_eq(kiln_commands_count(buf), 2);
    ck_assert_int_eq(skip(buf), 1);
    ck_assert_int_eq(kiln_commands_apply(buf, F.w, NULL), KILN_OK);
    ck_assert_int_eq(kiln_event_count(F.w, hit), 0);
    ck_assert(kiln_is_alive(F.w, kiln_commands_resolve(buf, later)));
    ck_assert_int_eq(dropped(), 0);
    kiln_commands_destroy(buf);
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
    ck_assert_int_eq(skip(buf), 3); /* the spawn and the two adds it holds */
    ck_assert_int_eq(kiln_commands_apply(buf, F.w, NULL), KILN_ERR_DEAD_ENTITY);
    ck_assert_str_eq(kiln_world_error(F.w),
                     "kiln_commands_apply: command 1 (add T0) on placeholder 0: its spawn did not land");
    int64_t skipped = 3;
    kiln_result r;
    while ((r = kiln_commands_apply(buf, F.w, NULL)) == KILN_ERR_DEAD_ENTITY) skipped += skip(buf);
    ck_assert_msg(r == KILN_OK, "%s", kiln_world_error(F.w));
    ck_assert_int_eq(skipped, 3 + TAGS + 2); /* the despawn of the never spawned is no failure */
    ck_assert_int_eq(test_hook_log_count(&F.log, 4), 1);
    ck_assert_int_eq(target_x(), 8);
    ck_assert_int_eq(dropped(), 0); /* a host's buffer drops nothing by itself */
    ck_assert_int_eq(skip(buf), 0);
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
    ck_assert_int_eq(skip(buf), 1);
    ck_assert_int_eq(test_hook_log_count(&F.log, 6), 1);
    ck_assert_int_eq(kiln_commands_count(buf), 1);
    ck_assert_int_eq(kiln_commands_apply(buf, F.w, NULL), KILN_OK);
    ck_assert_int_eq(target_x(), 3);
    ck_assert_int_eq(test_hook_log_count(&F.log, 6), 1);
    kiln_commands_destroy(buf);
}

/* A host's buffer with a value naming a skipped spawn's placeholder: its apply fails there
 * saying so (before: "whose spawn comes later in the buffer"), the value as recorded. */
KILN_TEST(strict, a_value_naming_a_skipped_spawn_fails_saying_it_did_not_land) {
    kiln_commands *buf = kiln_commands_create(F.w);
    ck_assert_ptr_nonnull(buf);
    kiln_entity p = spawn_tags(buf);
    ck_assert_int_eq(kiln_commands_set(buf, F.linked, F.link, &p), KILN_OK);
    ck_assert_int_eq(kiln_commands_apply(buf, F.w, NULL), KILN_ERR_LIMIT);
    kiln_result r;
    do skip(buf); /* the spawn, then each of its tags */
    while ((r = kiln_commands_apply(buf, F.w, NULL)) == KILN_ERR_DEAD_ENTITY);
    ck_assert_int_eq(r, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kiln_world_error(F.w), "(set Link) on entity ") &&
                      strstr(kiln_world_error(F.w), ": field 'target' holds placeholder 0, whose spawn did not land"),
                  "%s", kiln_world_error(F.w));
    ck_assert_int_eq(kiln_commands_count(buf), 1);
    ck_assert_int_eq(skip(buf), 1);
    ck_assert_int_eq(kiln_commands_apply(buf, F.w, NULL), KILN_OK);
    ck_assert(*(const kiln_entity *)kiln_get(F.w, F.linked, F.link) == KILN_NULL_ENTITY);
    ck_assert_int_eq(dropped(), 0);
    kiln_commands_destroy(buf);
}

/* ------------------------------------------------------------------------------------------ */

/* Gate: a value its check refuses while gate_closed (the world moved on after the call). */
static bool gate_closed;

static int64_t gate_asked; /* gate_check's calls */

static kiln_result gate_check(const kiln_world *world, kiln_entity entity, const void *value, void *ctx,
                              char *why, size_t why_size) {
    (void)world, (void)entity, (void)value, (void)ctx;
    gate_asked++;
    if (!gate_closed) return KILN_OK;
    snprintf(why, why_size, "the gate is closed");
    return KILN_ERR_INVALID_ARGUMENT;
}

static kiln_component register_gate(void) {
    kiln_component gate;
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = "Gate", .size = sizeof(int32_t),
                                                                         .check = gate_check}, &gate), KILN_OK);
    gate_asked = 0;
    return gate;
}

KILN_TEST_GROUP_WITH(whole, .setup = setup_small, .teardown = teardown, .timeout = 300);

/* Before, the deferred spawn landed with its OwnedLink and without its Gate, which the queue
 * dropped alone: the spawn goes whole, its handle dead, the OwnedLink destroyed once. */
KILN_TEST(whole, a_deferred_spawn_whose_add_its_check_now_refuses_is_dropped_whole) {
    kiln_component gate = register_gate();
    gate_closed = false;
    int64_t entities = kiln_entity_count(F.w);
    kiln_entity e;
    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_spawn(F.w, &e), KILN_OK);
    owned_link v = {test_owned_make(8), F.target};
    ck_assert_int_eq(kiln_add(F.w, e, F.olink, &v), KILN_OK);
    ck_assert_int_eq(kiln_add(F.w, e, gate, &(int32_t){1}), KILN_OK);
    ck_assert_int_eq(kiln_set(F.w, F.target, F.pos, &(test_position){4, 4}), KILN_OK);
    gate_closed = true;
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
    ck_assert(!kiln_is_alive(F.w, e));
    ck_assert_int_eq(kiln_entity_count(F.w), entities);
    ck_assert_int_eq(test_hook_log_count(&F.log, 8), 1);
    ck_assert_int_eq(target_x(), 4);
    ck_assert_int_eq(dropped(), 3); /* the spawn and its two adds */
    ck_assert_msg(heard("kiln_defer_end: command 1 (spawn) on entity ") &&
                      heard(": its add of Gate cannot land: the gate is closed; dropped"), "%s", F.first);
    gate_closed = false;
}

enum { MANY = 64 }; /* the adds the apply merged into a spawn at most */
static kiln_component many[MANY + 1]; /* MANY tags and one more component */

static void register_many(void) {
    char name[16];
    for (int i = 0; i < MANY; i++) {
        snprintf(name, sizeof name, "B%d", i);
        many[i] = test_register_tag(F.w, name);
    }
}

/* Before, the apply merged at most 64 adds into a spawn and applied the 65th alone: the spawn
 * landed with 64 tags and without the Gate its check now refuses. All 65 go in one move. */
KILN_TEST(whole, a_deferred_spawn_of_65_components_whose_last_is_refused_is_dropped_whole) {
    register_many();
    kiln_component *comps = many;
    comps[MANY] = register_gate();
    gate_closed = false;
    int64_t entities = kiln_entity_count(F.w);
    kiln_entity e;
    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_spawn_with(F.w, comps, NULL, MANY + 1, &e), KILN_OK);
    gate_closed = true;
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
    gate_closed = false;
    ck_assert(!kiln_is_alive(F.w, e));
    ck_assert_int_eq(kiln_entity_count(F.w), entities);
    ck_assert_int_eq(dropped(), 1 + MANY + 1); /* as kiln_commands_count counts them */
    ck_assert_msg(heard(": its add of Gate cannot land: the gate is closed; dropped"), "%s", F.first);
}

static void spawn_many(kiln_commands *buf) {
    kiln_entity p;
    ck_assert_int_eq(kiln_commands_spawn_with(buf, many, NULL, MANY + 1, &p), KILN_OK);
}

/* Before, the first 64 landed in their archetype (made beforehand) and the 65th, a tag needing
 * an archetype past the limit, was dropped alone; the 65 need one archetype, past the limit. */
KILN_TEST(whole, a_systems_spawn_of_65_components_past_the_archetype_limit_is_dropped_whole) {
    register_many();
    many[MANY] = F.tags[0];
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn_with(F.w, many, NULL, MANY, &e), KILN_OK);
    ck_assert_int_eq(test_spawn_tag_sets(F.w, F.tags, TAGS, NULL), KILN_ERR_LIMIT);
    int64_t entities = kiln_entity_count(F.w);
    run_once(spawn_many);
    ck_assert_int_eq(kiln_entity_count(F.w), entities);
    ck_assert_int_eq(dropped(), 1 + MANY + 1);
    ck_assert_int_eq(F.first_code, KILN_ERR_LIMIT);
}

/* A spawn p, an add of a Link naming p (applied after p lands, rewritten) and a Gate. */
static kiln_component gate_after_own;

static void gate_after_link_to_itself(kiln_commands *buf) {
    kiln_entity p;
    ck_assert_int_eq(kiln_commands_spawn(buf, &p), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(buf, p, F.link, &p), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(buf, p, gate_after_own, &(int32_t){1}), KILN_OK);
}

/* Before, the add naming p stopped the merge, and the Gate after it, applied alone, was
 * dropped alone: p landed with its Link and without its Gate. */
KILN_TEST(whole, a_spawn_whose_add_after_one_naming_it_is_refused_is_dropped_whole) {
    gate_after_own = register_gate();
    gate_closed = true;
    int64_t entities = kiln_entity_count(F.w);
    run_once(gate_after_link_to_itself);
    gate_closed = false;
    ck_assert_int_eq(kiln_entity_count(F.w), entities);
    ck_assert_int_eq(links_checked(), 1); /* linked alone */
    ck_assert_int_eq(dropped(), 3);
    ck_assert(heard("command 1 (spawn) on placeholder 0: its add of Gate cannot land: the gate is closed; dropped"));
}

/* A spawn and its Gate, which the check refuses at the apply. */
static void spawn_gated(kiln_commands *buf) {
    kiln_entity p;
    ck_assert_int_eq(kiln_commands_spawn(buf, &p), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(buf, p, gate_after_own, &(int32_t){1}), KILN_OK);
}

/* Before, the check was asked again for its reason once it had refused. */
KILN_TEST(whole, a_spawns_add_refused_by_its_check_asks_the_check_once) {
    gate_after_own = register_gate();
    gate_closed = true;
    run_once(spawn_gated);
    gate_closed = false;
    ck_assert_int_eq(gate_asked, 1);
    ck_assert_int_eq(dropped(), 2);
    ck_assert(heard("its add of Gate cannot land: the gate is closed; dropped"));
}

static int64_t count_with(kiln_component c);

/* A host's (strict) buffer lands a spawn and stops at its add the check refuses, reporting it:
 * the check is asked once for that apply, not once to merge the add and again to land it. */
KILN_TEST(whole, a_strict_buffers_refused_add_asks_the_check_once_per_apply) {
    gate_after_own = register_gate();
    gate_closed = true;
    int64_t entities = kiln_entity_count(F.w);
    kiln_commands *buf = kiln_commands_create(F.w);
    ck_assert_ptr_nonnull(buf);
    spawn_gated(buf);
    ck_assert_int_ne(kiln_commands_apply(buf, F.w, NULL), KILN_OK);
    ck_assert_int_eq(gate_asked, 1);
    ck_assert_int_eq(kiln_entity_count(F.w), entities + 1); /* the spawn landed, without its Gate */
    ck_assert_int_eq(count_with(gate_after_own), 0);
    ck_assert_msg(strstr(kiln_world_error(F.w), "command 1 (add Gate) on entity ") &&
                      strstr(kiln_world_error(F.w), ": the gate is closed"), "%s", kiln_world_error(F.w));
    ck_assert_int_eq(kiln_commands_skip(buf, NULL), KILN_OK);
    kiln_commands_destroy(buf);
    gate_closed = false;
}

/* Before, the check was asked as the add was merged into its spawn and again as the spawn
 * landed in the Gate's archetype: once is what the value needs, from a system's buffer and
 * from a host's (strict) one alike. */
KILN_TEST(whole, a_spawns_add_its_check_lets_through_asks_the_check_once) {
    gate_after_own = register_gate();
    gate_closed = false;
    run_once(spawn_gated);
    ck_assert_int_eq(gate_asked, 1);
    ck_assert_int_eq(count_with(gate_after_own), 1);
    kiln_commands *buf = kiln_commands_create(F.w);
    ck_assert_ptr_nonnull(buf);
    spawn_gated(buf);
    ck_assert_int_eq(kiln_commands_apply(buf, F.w, NULL), KILN_OK);
    kiln_commands_destroy(buf);
    ck_assert_int_eq(gate_asked, 2);
    ck_assert_int_eq(count_with(gate_after_own), 2);
    ck_assert_int_eq(dropped(), 0);
}

/* A spawn p of a Position, a spawn between, then an add of a Gate to p: not directly after p. */
static void gate_later(kiln_commands *buf) {
    kiln_entity p, q;
    ck_assert_int_eq(kiln_commands_spawn_with(buf, &F.pos, (void *[]){&(test_position){2, 2}}, 1, &p), KILN_OK);
    ck_assert_int_eq(kiln_commands_spawn(buf, &q), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(buf, p, gate_after_own, &(int32_t){1}), KILN_OK);
}

static int64_t count_with(kiln_component c) {
    kiln_query *q = NULL;
    ck_assert_int_eq(kiln_query_create(F.w, &(kiln_query_desc){.with = {c}}, &q), KILN_OK);
    int64_t n = kiln_query_count(q);
    kiln_query_destroy(q);
    return n;
}

/* The rule (kiln.h, Placeholders): only the adds directly following a spawn go with it; a later
 * command is a change of the entity the spawn became, refused alone like any other. */
KILN_TEST(whole, a_refused_add_not_directly_after_its_landed_spawn_is_dropped_alone) {
    gate_after_own = register_gate();
    gate_closed = true;
    int64_t entities = kiln_entity_count(F.w);
    run_once(gate_later);
    gate_closed = false;
    ck_assert_int_eq(kiln_entity_count(F.w), entities + 2);
    ck_assert_int_eq(count_with(F.pos), 2); /* target and p */
    ck_assert_int_eq(count_with(gate_after_own), 0);
    ck_assert_int_eq(dropped(), 1);
    const char *msg = NULL;
    ck_assert_int_eq(kiln_world_dropped(F.w, NULL, &msg), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(msg, "command 3 (add Gate) on entity ") && strstr(msg, ": the gate is closed; dropped"), "%s",
                  msg);
}

/* ------------------------------------------------------------------------------------------ */

/* Spy: its check skips spy_buf's first command while the apply runs, noting what it got. */
static kiln_commands *spy_buf;
static kiln_result spy_code;
static int64_t spy_skipped;
static char spy_error[256];

static kiln_result spy_check(const kiln_world *world, kiln_entity entity, const void *value, void *ctx, char *why,
                             size_t why_size) {
    (void)entity, (void)value, (void)ctx, (void)why, (void)why_size;
    spy_code = kiln_commands_skip(spy_buf, &spy_skipped);
    snprintf(spy_error, sizeof spy_error, "%s", kiln_world_error(world));
    return KILN_OK;
}

KILN_TEST_GROUP_WITH(midapply, .setup = setup_small, .teardown = teardown, .timeout = 60);

/* Before, it asserted (and with NDEBUG skipped the slot the apply stood on). */
KILN_TEST(midapply, kiln_commands_skip_from_a_hook_of_the_apply_is_refused_and_skips_nothing) {
    kiln_component spy;
    ck_assert_int_eq(kiln_component_register(F.w, &(kiln_component_desc){.name = "Spy", .size = sizeof(int32_t),
                                                                         .check = spy_check}, &spy), KILN_OK);
    spy_buf = kiln_commands_create(F.w);
    ck_assert_ptr_nonnull(spy_buf);
    ck_assert_int_eq(kiln_commands_add(spy_buf, F.target, spy, &(int32_t){1}), KILN_OK);
    ck_assert_int_eq(kiln_commands_set(spy_buf, F.target, F.pos, &(test_position){6, 6}), KILN_OK);
    spy_code = KILN_OK;
    spy_skipped = -1;
    ck_assert_int_eq(kiln_commands_apply(spy_buf, F.w, NULL), KILN_OK);
    ck_assert_int_eq(spy_code, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(spy_skipped, 0);
    ck_assert_msg(strstr(spy_error, "kiln_commands_skip: the buffer is being applied"), "%s", spy_error);
    ck_assert(kiln_has(F.w, F.target, spy)); /* nothing was skipped: both landed */
    ck_assert_int_eq(target_x(), 6);
    ck_assert_int_eq(kiln_commands_count(spy_buf), 0);
    kiln_commands_destroy(spy_buf);
}
