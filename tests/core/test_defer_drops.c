/* test_defer_drops.c: Check suite for queued changes dropped as they land (a deferred section,
 * a loop, a system's buffer; a kiln_despawn_unless whose entity gained a kept component): each
 * is counted, its reason kept and its hook told, in bounded memory. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* A world on the counting allocator with Position, Velocity, Owned and Gated, whose check
 * hook refuses every value while gate_closed is set (so a value that passed when queued is
 * refused when it lands). Teardown checks every byte came back and no value died twice. */
typedef struct fixture {
    test_allocator alloc;
    kiln_world *w;
    kiln_component pos, vel, owned, gated;
    test_hook_log log;
    bool gate_closed;
} fixture;

static fixture F;

static kiln_result gate_check(const kiln_world *world, kiln_entity entity, const void *value, void *ctx,
                              char *why, size_t why_size) {
    (void)world, (void)entity, (void)value, (void)ctx;
    if (!F.gate_closed) return KILN_OK;
    snprintf(why, why_size, "the gate is closed");
    return KILN_ERR_INVALID_ARGUMENT;
}

static void setup(void) {
    memset(&F, 0, sizeof F);
    test_allocator_init(&F.alloc);
    F.w = test_world_create(&F.alloc);
    F.pos = test_register_position(F.w);
    F.vel = test_register_velocity(F.w);
    F.owned = test_register_owned(F.w, &F.log);
    kiln_component_desc d = {.name = "Gated", .size = sizeof(int32_t), .check = gate_check};
    ck_assert_int_eq(kiln_component_register(F.w, &d, &F.gated), KILN_OK);
}

static void teardown(void) {
    kiln_world_destroy(F.w);
    ck_assert_int_eq(F.alloc.live_blocks, 0);
    ck_assert_int_eq(F.alloc.live_bytes, 0);
    ck_assert_int_eq(test_hook_log_count(&F.log, -1), 0);
    ck_assert_int_eq(test_hook_log_count(&F.log, -2), 0);
}

static kiln_entity spawn_pos(void) {
    kiln_entity e = KILN_NULL_ENTITY;
    ck_assert_int_eq(kiln_spawn_with(F.w, &F.pos, (const void *[]){&(test_position){1, 2}}, 1, &e), KILN_OK);
    return e;
}

/* The world's drop count, checking the last drop's code and that its message holds each of
 * the parts given (NULL-ended). */
static int64_t dropped_with(kiln_result code, const char *const *parts) {
    int64_t n = -1;
    const char *msg = NULL;
    ck_assert_int_eq(kiln_world_dropped(F.w, &n, &msg), code);
    ck_assert_ptr_nonnull(msg);
    for (; *parts; parts++) ck_assert_msg(strstr(msg, *parts), "\"%s\" lacks \"%s\"", msg, *parts);
    return n;
}

/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP_WITH(drops, .setup = setup, .teardown = teardown);

KILN_TEST(drops, a_world_that_dropped_nothing_reports_none) {
    int64_t n = -1;
    const char *msg = NULL;
    ck_assert_int_eq(kiln_world_dropped(F.w, &n, &msg), KILN_OK);
    ck_assert_int_eq(n, 0);
    ck_assert_str_eq(msg, "");
    ck_assert_int_eq(kiln_world_dropped(F.w, NULL, NULL), KILN_OK); /* both optional */
}

KILN_TEST(drops, a_queued_add_that_lands_on_a_despawned_entity_is_counted_with_its_reason) {
    kiln_entity e = spawn_pos();
    test_owned v = test_owned_make(7);
    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    ck_assert_int_eq(kiln_add(F.w, e, F.owned, &v), KILN_OK); /* e is alive until the queue lands */
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
    ck_assert(!kiln_is_alive(F.w, e));
    char eb[24];
    const char *parts[] = {"kiln_defer_end: command 2 (add Owned) on entity ", kiln_entity_format(e, eb, sizeof eb),
                           "entity is not alive; dropped", NULL};
    ck_assert_int_eq(dropped_with(KILN_ERR_DEAD_ENTITY, parts), 1);
    ck_assert_int_eq(test_hook_log_count(&F.log, 7), 1); /* its value was destroyed, once */
}

KILN_TEST(drops, a_despawn_of_an_entity_already_dead_is_no_drop) {
    kiln_entity e = spawn_pos();
    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
    int64_t n = -1;
    ck_assert_int_eq(kiln_world_dropped(F.w, &n, NULL), KILN_OK);
    ck_assert_int_eq(n, 0);
}

KILN_TEST(drops, a_queued_set_of_an_absent_component_and_a_value_refused_when_it_lands_are_counted) {
    kiln_entity e = spawn_pos();
    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_set(F.w, e, F.vel, &(test_velocity){1, 1}), KILN_OK);
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
    const char *absent[] = {"(set Velocity)", "entity has no Velocity; dropped", NULL};
    ck_assert_int_eq(dropped_with(KILN_ERR_MISSING_COMPONENT, absent), 1);
    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_add(F.w, e, F.gated, &(int32_t){3}), KILN_OK); /* passes its check now */
    F.gate_closed = true;
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
    ck_assert(!kiln_has(F.w, e, F.gated));
    const char *refused[] = {"kiln_defer_end: command 1 (add Gated)", "the gate is closed; dropped", NULL};
    ck_assert_int_eq(dropped_with(KILN_ERR_INVALID_ARGUMENT, refused), 2);
}

/* kiln_despawn_unless: refused at once while the entity holds a kept component; queued, it
 * is checked again as it lands, after an add queued before it brought one (its list copied). */
KILN_TEST(drops, a_despawn_unless_is_refused_now_and_again_as_it_lands) {
    kiln_entity e = spawn_pos();
    kiln_component keep[2] = {F.gated, F.vel};
    ck_assert_int_eq(kiln_despawn_unless(F.w, e, keep, 2), KILN_OK); /* holds neither: gone */
    ck_assert(!kiln_is_alive(F.w, e));
    e = spawn_pos();
    ck_assert_int_eq(kiln_add(F.w, e, F.vel, &(test_velocity){1, 1}), KILN_OK);
    ck_assert_int_eq(kiln_despawn_unless(F.w, e, keep, 2), KILN_ERR_INVALID_ARGUMENT);
    char eb[24];
    char want[96];
    snprintf(want, sizeof want, "kiln_despawn_unless: entity %s holds Velocity", kiln_entity_format(e, eb, sizeof eb));
    ck_assert_str_eq(kiln_world_error(F.w), want);
    ck_assert(kiln_is_alive(F.w, e));
    ck_assert_int_eq(kiln_remove(F.w, e, F.vel, NULL), KILN_OK);
    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_add(F.w, e, F.gated, &(int32_t){1}), KILN_OK);
    ck_assert_int_eq(kiln_despawn_unless(F.w, e, keep, 2), KILN_OK); /* Gated is still queued */
    keep[0] = keep[1] = F.pos; /* the queued despawn copied the list */
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
    ck_assert(kiln_is_alive(F.w, e));
    ck_assert(kiln_has(F.w, e, F.gated));
    const char *parts[] = {"kiln_defer_end: command 2 (despawn) on entity ", eb,
                           "entity holds Gated, which this despawn must keep; dropped", NULL};
    ck_assert_int_eq(dropped_with(KILN_ERR_INVALID_ARGUMENT, parts), 1);
    kiln_defer_begin(F.w); /* an empty list: a plain despawn */
    ck_assert_int_eq(kiln_despawn_unless(F.w, e, NULL, 0), KILN_OK);
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
    ck_assert(!kiln_is_alive(F.w, e));
}

/* ---- a system's buffer, and the hook ------------------------------------------------------ */

typedef struct heard {
    int64_t calls;
    char system[64];
    kiln_result code;
    char message[256];
    bool try_change;    /* try a spawn from the hook, */
    kiln_result change; /* which returned this */
} heard;

static void hear(kiln_world *world, const char *system, kiln_result code, const char *message, void *ctx) {
    heard *h = ctx;
    h->calls++;
    snprintf(h->system, sizeof h->system, "%s", system ? system : "(queue)");
    h->code = code;
    snprintf(h->message, sizeof h->message, "%s", message);
    kiln_entity spawned;
    if (h->try_change) h->change = kiln_spawn(world, &spawned);
}

static void despawn_then_add(const kiln_system_ctx *ctx) {
    kiln_entity e = *(kiln_entity *)ctx->user;
    ck_assert_int_eq(kiln_despawn(ctx->world, e), KILN_OK);
    ck_assert_int_eq(kiln_add(ctx->world, e, F.vel, &(test_velocity){0, 0}), KILN_OK);
}

KILN_TEST(drops, a_systems_dropped_change_names_the_system_to_the_hook) {
    kiln_entity e = spawn_pos();
    heard h = {0};
    kiln_drop_fn old = (kiln_drop_fn)1;
    void *old_ctx = (void *)1;
    kiln_world_drop_hook_set(F.w, hear, &h, &old, &old_ctx);
    ck_assert(old == NULL && old_ctx == NULL);
    kiln_schedule *s = kiln_schedule_create(F.w, NULL);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "reaper", .run = despawn_then_add,
                                                               .user = &e, .main_thread = true}),
                     KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(h.calls, 1);
    ck_assert_str_eq(h.system, "reaper");
    ck_assert_int_eq(h.code, KILN_ERR_DEAD_ENTITY);
    ck_assert_msg(strstr(h.message, "kiln_schedule_run: system 'reaper': command 2 (add Velocity)"), "%s", h.message);
    const char *parts[] = {h.message, NULL};
    ck_assert_int_eq(dropped_with(KILN_ERR_DEAD_ENTITY, parts), 1);
    kiln_drop_fn back = NULL;
    void *back_ctx = NULL;
    kiln_world_drop_hook_set(F.w, NULL, NULL, &back, &back_ctx);
    ck_assert(back == hear && back_ctx == &h);
    kiln_schedule_destroy(s);
}

KILN_TEST(drops, the_hook_hears_the_worlds_queue_and_cannot_change_the_world_mid_apply) {
    kiln_entity e = spawn_pos();
    heard h = {.try_change = true, .change = KILN_OK};
    kiln_world_drop_hook_set(F.w, hear, &h, NULL, NULL);
    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    ck_assert_int_eq(kiln_remove(F.w, e, F.pos, NULL), KILN_OK);
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
    ck_assert_int_eq(h.calls, 1);
    ck_assert_str_eq(h.system, "(queue)");
    ck_assert_msg(strstr(h.message, "kiln_defer_end: command 2 (remove Position)"), "%s", h.message);
    ck_assert_int_eq(h.change, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_entity_count(F.w), 0);
}

/* ---- a flood ------------------------------------------------------------------------------ */

/* Queues n adds that land on an entity despawned first, in one section. */
static void queue_refused(int32_t n) {
    kiln_entity e = spawn_pos();
    kiln_defer_begin(F.w);
    ck_assert_int_eq(kiln_despawn(F.w, e), KILN_OK);
    for (int32_t i = 0; i < n; i++) ck_assert_int_eq(kiln_add(F.w, e, F.vel, &(test_velocity){1, 1}), KILN_OK);
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
}

KILN_TEST(drops, a_flood_of_100k_refused_changes_is_counted_in_flat_memory) {
    queue_refused(10000);
    kiln_world_stats before;
    kiln_world_stats_get(F.w, &before);
    for (int round = 1; round < 10; round++) queue_refused(10000);
    kiln_world_stats after;
    kiln_world_stats_get(F.w, &after);
    const char *parts[] = {"command 10001 (add Velocity)", NULL};
    ck_assert_int_eq(dropped_with(KILN_ERR_DEAD_ENTITY, parts), 100000);
    /* a count and one message: the rounds after the first held no more than it did */
    ck_assert_int_eq(after.bytes, before.bytes);
}

/* A spawn whose directly following adds cannot all land is dropped whole, the 257th component
 * (past what an entity holds) too: the move takes 256 at most, and the add after them, applied
 * alone, was dropped by itself, landing the entity short of it. */
static struct {
    kiln_result code;
    char message[512];
} first_drop;

static void keep_first_drop(kiln_world *world, const char *system, kiln_result code, const char *message, void *ctx) {
    (void)world, (void)system, (void)ctx;
    if (first_drop.code != KILN_OK) return;
    first_drop.code = code;
    snprintf(first_drop.message, sizeof first_drop.message, "%s", message);
}

KILN_TEST(drops, a_queued_spawn_with_adds_past_256_components_is_dropped_whole) {
    memset(&first_drop, 0, sizeof first_drop);
    kiln_world_drop_hook_set(F.w, keep_first_drop, NULL, NULL, NULL);
    enum { WIDE = 257 };
    kiln_component ids[WIDE];
    char name[16];
    for (int i = 0; i < WIDE; i++) {
        snprintf(name, sizeof name, "Wide%d", i);
        kiln_component_desc d = {.name = name, .size = sizeof(int32_t)};
        ck_assert_int_eq(kiln_component_register(F.w, &d, &ids[i]), KILN_OK);
    }
    kiln_world_stats before, after;
    kiln_world_stats_get(F.w, &before);
    ck_assert_int_eq(kiln_defer_begin(F.w), KILN_OK);
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(F.w, &e), KILN_OK);
    for (int32_t i = 0; i < WIDE; i++) ck_assert_int_eq(kiln_add(F.w, e, ids[i], &i), KILN_OK);
    ck_assert_int_eq(kiln_defer_end(F.w), KILN_OK);
    ck_assert(!kiln_is_alive(F.w, e));
    kiln_world_stats_get(F.w, &after);
    ck_assert_int_eq(after.entities, before.entities);
    ck_assert_int_eq(first_drop.code, KILN_ERR_LIMIT);
    ck_assert_msg(strstr(first_drop.message, "its add of Wide256 cannot land: an entity holds at most 256 components"),
                  "%s", first_drop.message);
    const char *parts[] = {"(add Wide256)", "entity is not alive; dropped", NULL}; /* then its adds, each */
    ck_assert_int_eq(dropped_with(KILN_ERR_DEAD_ENTITY, parts), 1 + WIDE);
}
