/* test_world.c: Check suite for the world: isolation, memory accounting, out-of-memory recovery,
 * allocation-free steady state, stats and result names. Every byte goes through the hook. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

/* ------------------------------------------------------------------------------------------ */
/* isolation and lifetime                                                                     */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST_GROUP(lifetime);

KILN_TEST(lifetime, two_worlds_do_not_interfere) {
    kiln_world *a = kiln_world_create(NULL);
    kiln_world *b = kiln_world_create(&(kiln_world_desc){0});
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_ne(a, b);
    kiln_component pos = test_register_position(a);
    kiln_component vel = test_register_velocity(b);
    ck_assert_uint_eq(pos, 1);
    ck_assert_uint_eq(vel, 1);
    ck_assert_uint_eq(kiln_component_lookup(b, "Position"), KILN_NO_COMPONENT);
    ck_assert_uint_eq(kiln_component_lookup(a, "Velocity"), KILN_NO_COMPONENT);
    kiln_entity ea[3], eb;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(kiln_spawn_with(a, &pos, NULL, 1, &ea[i]), KILN_OK);
    ck_assert_int_eq(kiln_spawn(b, &eb), KILN_OK);
    ck_assert_int_eq(kiln_entity_count(a), 3);
    ck_assert_int_eq(kiln_entity_count(b), 1);
    ck_assert(!kiln_has(b, eb, vel));
    ck_assert(!kiln_is_alive(b, ea[2]));
    kiln_tick_advance(a);
    kiln_tick_advance(a);
    ck_assert_uint_eq(kiln_tick_current(a), 3);
    ck_assert_uint_eq(kiln_tick_current(b), 1);
    /* an error on one world leaves the other's message alone */
    ck_assert_int_eq(kiln_despawn(a, KILN_NULL_ENTITY), KILN_ERR_DEAD_ENTITY);
    ck_assert_str_ne(kiln_world_error(a), "");
    ck_assert_str_eq(kiln_world_error(b), "");
    kiln_world_destroy(a);
    /* b outlives a untouched */
    ck_assert(kiln_is_alive(b, eb));
    ck_assert_int_eq(kiln_add(b, eb, vel, &(test_velocity){1.0f, 2.0f}), KILN_OK);
    ck_assert_float_eq(((const test_velocity *)kiln_get(b, eb, vel))->y, 2.0f);
    kiln_world_destroy(b);
}

KILN_TEST(lifetime, destroying_null_is_a_noop) {
    kiln_world_destroy(NULL);
    kiln_query_destroy(NULL);
}

KILN_TEST(lifetime, world_create_returns_null_only_when_memory_runs_out_and_leaks_nothing) {
    for (int64_t k = 0;; k++) {
        ck_assert_int_lt(k, 1000);
        test_allocator a;
        test_allocator_init(&a);
        test_allocator_fail_after(&a, k);
        kiln_world *w = kiln_world_create(&(kiln_world_desc){.alloc = test_allocator_fn,
                                                             .alloc_ud = &a});
        if (w == NULL) {
            ck_assert_int_gt(a.failures, 0);
            ck_assert_int_eq(a.live_bytes, 0);
            ck_assert_int_eq(a.live_blocks, 0);
            continue;
        }
        test_allocator_fail_never(&a);
        ck_assert_int_ge(a.allocations, 1);
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn(w, &e), KILN_OK);
        kiln_world_destroy(w);
        ck_assert_int_eq(a.live_bytes, 0);
        break;
    }
}

KILN_TEST(lifetime, destroying_a_world_frees_every_byte) {
    test_allocator a;
    test_allocator_init(&a);
    kiln_world *w = test_world_create(&a);
    ck_assert_int_gt(a.live_bytes, 0);
    test_hook_log log = {0};
    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_component owned = test_register_owned(w, &log);
    kiln_component tag = test_register_tag(w, "Frozen");
    kiln_component all[] = {pos, vel, owned, tag};
    for (int i = 0; i < 2000; i++) {
        kiln_entity e;
        kiln_component comps[4];
        int32_t n = 0;
        for (int b = 0; b < 4; b++)
            if (i & (1 << b)) comps[n++] = all[b];
        ck_assert_int_eq(kiln_spawn_with(w, comps, NULL, n, &e), KILN_OK);
        if (i % 7 == 0) ck_assert_int_eq(kiln_despawn(w, e), KILN_OK);
        else if (i % 5 == 0) ck_assert_int_eq(kiln_remove(w, e, vel, NULL), KILN_OK);
    }
    ck_assert_int_eq(kiln_spawn_batch(w, all, 4, 300, NULL), KILN_OK);
    kiln_query *q1, *q2;
    ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {pos}}, &q1), KILN_OK);
    ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {vel}, .optional = {owned}},
                                       &q2),
                     KILN_OK);
    kiln_query_destroy(q1);
    ck_assert_int_eq(kiln_despawn(w, KILN_NULL_ENTITY), KILN_ERR_DEAD_ENTITY); /* a message */
    kiln_world_destroy(w); /* q2 still alive: the world frees it */
    ck_assert_int_eq(a.live_bytes, 0);
    ck_assert_int_eq(a.live_blocks, 0);
    ck_assert_int_eq(a.bad_osize, 0);
    ck_assert_int_eq(log.bad_payload, 0);
    ck_assert_int_eq(test_hook_log_count(&log, -1), 0);
}

KILN_TEST(lifetime, destroying_a_world_frees_its_resources_and_events_too) {
    test_allocator a;
    test_allocator_init(&a);
    kiln_world *w = test_world_create(&a);
    test_hook_log log = {0};
    kiln_component owned = test_register_owned(w, &log);
    kiln_component pos = test_register_position(w);
    test_owned first = test_owned_make(10), second = test_owned_make(11);
    ck_assert_int_eq(kiln_resource_set(w, owned, &first), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(w, owned, &second), KILN_OK);
    ck_assert_int_eq(kiln_resource_set(w, pos, &(test_position){1.0f, 2.0f}), KILN_OK);
    ck_assert_int_eq(test_hook_log_count(&log, 10), 1);
    kiln_event_type hit;
    kiln_component_desc desc = test_position_desc();
    desc.name = "Hit";
    ck_assert_int_eq(kiln_event_register(w, &desc, &hit), KILN_OK);
    for (int i = 0; i < 300; i++) {
        ck_assert_int_eq(kiln_event_emit(w, hit, &(test_position){(float)i, 0.0f}), KILN_OK);
        if (i % 100 == 99) kiln_events_update(w);
    }
    kiln_world_destroy(w);
    ck_assert_int_eq(test_hook_log_count(&log, 11), 1);
    ck_assert_int_eq(log.destroyed, 2);
    ck_assert_int_eq(a.live_bytes, 0);
    ck_assert_int_eq(a.bad_osize, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* stats, names, errors                                                                       */
/* ------------------------------------------------------------------------------------------ */

KILN_TEST(lifetime, stats_describe_the_world) {
    test_allocator a;
    test_allocator_init(&a);
    kiln_world *w = test_world_create(&a);
    kiln_world_stats s;
    kiln_world_stats_get(w, &s);
    ck_assert_int_eq(s.entities, 0);
    ck_assert_int_eq(s.entity_slots, 0);
    ck_assert_int_eq(s.archetypes, 1); /* the empty archetype */
    ck_assert_int_eq(s.components, 0);
    ck_assert_int_eq(s.queries, 0);
    ck_assert_msg(s.bytes == a.live_bytes && s.allocations == a.allocations,
                  "stats say %lld bytes in %lld allocations; the hook handed out %lld bytes in "
                  "%lld allocations",
                  (long long)s.bytes, (long long)s.allocations, (long long)a.live_bytes,
                  (long long)a.allocations);

    kiln_component pos = test_register_position(w);
    kiln_component vel = test_register_velocity(w);
    kiln_entity e[3];
    for (int i = 0; i < 3; i++) ck_assert_int_eq(kiln_spawn(w, &e[i]), KILN_OK);
    ck_assert_int_eq(kiln_add(w, e[0], pos, NULL), KILN_OK); /* {Position} */
    ck_assert_int_eq(kiln_add(w, e[0], vel, NULL), KILN_OK); /* {Position, Velocity} */
    ck_assert_int_eq(kiln_add(w, e[1], pos, NULL), KILN_OK);
    ck_assert_int_eq(kiln_despawn(w, e[2]), KILN_OK);
    kiln_query *q;
    ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {pos}}, &q), KILN_OK);
    kiln_world_stats_get(w, &s);
    ck_assert_int_eq(s.entities, 2);
    ck_assert_int_eq(s.entity_slots, 3);
    ck_assert_int_eq(s.archetypes, 3);
    ck_assert_int_eq(s.components, 2);
    ck_assert_int_eq(s.queries, 1);
    ck_assert_msg(s.bytes == a.live_bytes && s.allocations == a.allocations,
                  "stats say %lld bytes in %lld allocations; the hook handed out %lld bytes in "
                  "%lld allocations",
                  (long long)s.bytes, (long long)s.allocations, (long long)a.live_bytes,
                  (long long)a.allocations);
    kiln_query_destroy(q);
    kiln_world_stats_get(w, &s);
    ck_assert_int_eq(s.queries, 0);
    ck_assert_int_eq(s.bytes, a.live_bytes);
    kiln_world_destroy(w);
}

KILN_TEST(lifetime, result_names_are_distinct_english_phrases) {
    ck_assert_str_eq(kiln_result_name(KILN_ERR_DEAD_ENTITY), "dead entity");
    kiln_result all[] = {KILN_OK,
                         KILN_ERR_INVALID_ARGUMENT,
                         KILN_ERR_DEAD_ENTITY,
                         KILN_ERR_MISSING_COMPONENT,
                         KILN_ERR_UNKNOWN_COMPONENT,
                         KILN_ERR_LAYOUT_MISMATCH,
                         KILN_ERR_OUT_OF_MEMORY,
                         KILN_ERR_LIMIT,
                         KILN_ERR_UNKNOWN_EVENT};
    int n = (int)(sizeof all / sizeof all[0]);
    for (int i = 0; i < n; i++) {
        const char *name = kiln_result_name(all[i]);
        ck_assert_ptr_nonnull(name);
        ck_assert_str_ne(name, "");
        for (int j = 0; j < i; j++) ck_assert_str_ne(name, kiln_result_name(all[j]));
    }
}

KILN_TEST(lifetime, world_error_is_empty_until_a_call_fails_and_clears_on_request) {
    kiln_world *w = kiln_world_create(NULL);
    ck_assert_str_eq(kiln_world_error(w), "");
    kiln_entity e;
    ck_assert_int_eq(kiln_spawn(w, &e), KILN_OK);
    ck_assert_str_eq(kiln_world_error(w), "");
    ck_assert_int_eq(kiln_add(w, e, 5, NULL), KILN_ERR_UNKNOWN_COMPONENT);
    ck_assert_str_ne(kiln_world_error(w), "");
    kiln_world_clear_error(w);
    ck_assert_str_eq(kiln_world_error(w), "");
    kiln_world_destroy(w);
}

/* ------------------------------------------------------------------------------------------ */
/* out of memory                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* A small populated world: e0 {Position}, e1 {Position, Velocity}, e2 {Owned, Position},
 * e3 {}, then filler bare entities, and a query over Position. */
typedef struct oom_fixture {
    test_allocator alloc;
    kiln_world *world;
    test_hook_log log;
    kiln_component pos, vel, owned, tag;
    kiln_component wide[40]; /* more columns than an archetype keeps lists for on the stack */
    kiln_entity e[4];
    kiln_entity wide_entity; /* holds wide[0..34] */
    kiln_query *query;
    kiln_entity out[128];
    kiln_query *made;
    kiln_component made_component;
    test_owned offered;
} oom_fixture;

static void oom_setup(oom_fixture *f, int64_t filler) {
    memset(f, 0, sizeof *f);
    test_allocator_init(&f->alloc);
    f->world = test_world_create(&f->alloc);
    kiln_world *w = f->world;
    f->pos = test_register_position(w);
    f->vel = test_register_velocity(w);
    f->owned = test_register_owned(w, &f->log);
    f->tag = test_register_tag(w, "Frozen");
    ck_assert_int_eq(kiln_spawn_with(w, &f->pos, (const void *[]){&(test_position){1.0f, 2.0f}},
                                     1, &f->e[0]),
                     KILN_OK);
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){f->pos, f->vel},
                                     (const void *[]){&(test_position){3.0f, 4.0f},
                                                      &(test_velocity){5.0f, 6.0f}},
                                     2, &f->e[1]),
                     KILN_OK);
    test_owned o = test_owned_make(1);
    ck_assert_int_eq(kiln_spawn_with(w, (kiln_component[]){f->owned, f->pos},
                                     (const void *[]){&o, &(test_position){7.0f, 8.0f}}, 2,
                                     &f->e[2]),
                     KILN_OK);
    ck_assert_int_eq(kiln_spawn(w, &f->e[3]), KILN_OK);
    for (int i = 0; i < 40; i++) {
        char name[32];
        snprintf(name, sizeof name, "Wide%d", i);
        ck_assert_int_eq(kiln_component_register(w, &(kiln_component_desc){.name = name,
                                                                            .size = 4},
                                                 &f->wide[i]),
                         KILN_OK);
    }
    ck_assert_int_eq(kiln_spawn_with(w, f->wide, NULL, 35, &f->wide_entity), KILN_OK);
    for (int64_t i = 0; i < filler; i++) {
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn(w, &e), KILN_OK);
    }
    ck_assert_int_eq(kiln_query_create(w, &(kiln_query_desc){.with = {f->pos}}, &f->query),
                     KILN_OK);
    kiln_tick_advance(w);
    f->offered = test_owned_make(2);
}

static void oom_teardown(oom_fixture *f, bool offered_taken) {
    if (!offered_taken) test_owned_release(&f->offered);
    kiln_world_destroy(f->world);
    ck_assert_int_eq(f->alloc.live_bytes, 0);
    ck_assert_int_eq(f->alloc.bad_osize, 0);
    ck_assert_int_eq(f->log.bad_payload, 0);
    ck_assert_int_eq(test_hook_log_count(&f->log, -1), 0);
    ck_assert_int_eq(test_hook_log_count(&f->log, -2), 0);
}

typedef struct world_state {
    int64_t count, query_count;
    kiln_world_stats stats;
    int64_t destroyed;
    bool alive[4], has[4][4];
    kiln_tick tick[4][4];
    unsigned char value[4][4][sizeof(test_owned)];
} world_state;

static void read_state(oom_fixture *f, world_state *dest) {
    memset(dest, 0, sizeof *dest);
    kiln_component comps[4] = {f->pos, f->vel, f->owned, f->tag};
    dest->count = kiln_entity_count(f->world);
    dest->query_count = kiln_query_count(f->query);
    dest->destroyed = f->log.destroyed;
    kiln_world_stats_get(f->world, &dest->stats);
    for (int i = 0; i < 4; i++) {
        dest->alive[i] = kiln_is_alive(f->world, f->e[i]);
        for (int j = 0; j < 4; j++) {
            dest->has[i][j] = kiln_has(f->world, f->e[i], comps[j]);
            dest->tick[i][j] = kiln_changed_tick(f->world, f->e[i], comps[j]);
            const void *v = kiln_get(f->world, f->e[i], comps[j]);
            kiln_component_info info;
            if (v != NULL && kiln_component_info_get(f->world, comps[j], &info))
                memcpy(dest->value[i][j], v, info.size);
        }
    }
}

static void assert_same_state(oom_fixture *f, const world_state *before, int64_t k) {
    world_state now;
    read_state(f, &now);
    ck_assert_msg(now.count == before->count, "k=%lld: entity count changed", (long long)k);
    ck_assert_msg(now.query_count == before->query_count, "k=%lld: query count changed",
                  (long long)k);
    ck_assert_msg(now.destroyed == before->destroyed, "k=%lld: a destroy hook ran", (long long)k);
    ck_assert_msg(now.stats.entities == before->stats.entities &&
                      now.stats.entity_slots == before->stats.entity_slots &&
                      now.stats.components == before->stats.components &&
                      now.stats.queries == before->stats.queries,
                  "k=%lld: stats changed", (long long)k);
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(now.alive[i] == before->alive[i], "k=%lld: e%d liveness", (long long)k, i);
        for (int j = 0; j < 4; j++) {
            ck_assert_msg(now.has[i][j] == before->has[i][j], "k=%lld: e%d component %d presence",
                          (long long)k, i, j);
            ck_assert_msg(now.tick[i][j] == before->tick[i][j], "k=%lld: e%d component %d tick",
                          (long long)k, i, j);
            ck_assert_msg(memcmp(now.value[i][j], before->value[i][j], sizeof now.value[i][j]) == 0,
                          "k=%lld: e%d component %d value", (long long)k, i, j);
        }
    }
}

typedef kiln_result (*oom_op)(oom_fixture *f);
typedef void (*oom_check)(oom_fixture *f);

/* Fails allocation k (and every later one) for k = 0, 1, 2, ... until op succeeds. Each
 * failure must be KILN_ERR_OUT_OF_MEMORY with a message, leave the world as it was, and
 * leave it usable (op then succeeds with memory back). Returns the number of failures. */
static int64_t run_out_of_memory(oom_op op, oom_check check, int64_t filler,
                                 bool takes_offered) {
    for (int64_t k = 0; k < 10000; k++) {
        oom_fixture *f = malloc(sizeof *f);
        ck_assert_ptr_nonnull(f);
        oom_setup(f, filler);
        world_state before;
        read_state(f, &before);
        kiln_world_clear_error(f->world);
        test_allocator_fail_after(&f->alloc, k);
        kiln_result r = op(f);
        test_allocator_fail_never(&f->alloc);
        if (r == KILN_OK) {
            check(f);
            oom_teardown(f, takes_offered);
            free(f);
            return k;
        }
        ck_assert_msg(r == KILN_ERR_OUT_OF_MEMORY, "k=%lld: got %s (%s)", (long long)k,
                      kiln_result_name(r), kiln_world_error(f->world));
        ck_assert_msg(f->alloc.failures > 0, "k=%lld: out of memory without a refusal",
                      (long long)k);
        ck_assert_msg(kiln_world_error(f->world)[0] != '\0', "k=%lld: no message", (long long)k);
        assert_same_state(f, &before, k);
        r = op(f);
        ck_assert_msg(r == KILN_OK, "k=%lld: retry with memory back failed: %s", (long long)k,
                      kiln_world_error(f->world));
        check(f);
        oom_teardown(f, takes_offered);
        free(f);
    }
    ck_abort_msg("operation never succeeded");
    return -1;
}

static kiln_result op_register(oom_fixture *f) {
    kiln_field fields[] = {
        {.name = "current", .type = KILN_TYPE_INT32, .offset = 0},
        {.name = "max", .type = KILN_TYPE_INT32, .offset = 4},
        {.name = "label", .type = KILN_TYPE_CHAR, .offset = 8, .count = 24},
    };
    return kiln_component_register(f->world,
                                   &(kiln_component_desc){.name = "Health", .size = 32,
                                                          .fields = fields, .field_count = 3},
                                   &f->made_component);
}

static void check_register(oom_fixture *f) {
    ck_assert_uint_eq(kiln_component_lookup(f->world, "Health"), f->made_component);
    ck_assert_int_eq(kiln_component_count(f->world), 45);
    kiln_component_info info;
    ck_assert(kiln_component_info_get(f->world, f->made_component, &info));
    ck_assert_int_eq(info.field_count, 3);
    ck_assert_str_eq(info.fields[2].name, "label");
}

static kiln_result op_spawn(oom_fixture *f) {
    return kiln_spawn(f->world, &f->out[0]);
}

static void check_spawn(oom_fixture *f) {
    ck_assert(kiln_is_alive(f->world, f->out[0]));
    for (int i = 0; i < 4; i++) ck_assert_uint_ne(f->out[0], f->e[i]);
}

static kiln_result op_spawn_with(oom_fixture *f) {
    return kiln_spawn_with(f->world, (kiln_component[]){f->tag, f->vel, f->owned, f->pos},
                           (const void *[]){NULL, &(test_velocity){9.0f, 9.5f}, &f->offered,
                                            &(test_position){10.0f, 11.0f}},
                           4, &f->out[0]);
}

static void check_spawn_with(oom_fixture *f) {
    kiln_entity e = f->out[0];
    ck_assert(kiln_has(f->world, e, f->tag));
    ck_assert_float_eq(((const test_velocity *)kiln_get(f->world, e, f->vel))->y, 9.5f);
    ck_assert_float_eq(((const test_position *)kiln_get(f->world, e, f->pos))->x, 10.0f);
    ck_assert_int_eq(((const test_owned *)kiln_get(f->world, e, f->owned))->id, 2);
    ck_assert_int_eq(kiln_query_count(f->query), 4);
}

static kiln_result op_add(oom_fixture *f) {
    return kiln_add(f->world, f->e[2], f->vel, &(test_velocity){-1.0f, -2.0f});
}

static void check_add(oom_fixture *f) {
    ck_assert(kiln_has(f->world, f->e[2], f->vel));
    ck_assert_int_eq(((const test_owned *)kiln_get(f->world, f->e[2], f->owned))->id, 1);
    ck_assert_float_eq(((const test_position *)kiln_get(f->world, f->e[2], f->pos))->y, 8.0f);
    ck_assert_float_eq(((const test_velocity *)kiln_get(f->world, f->e[2], f->vel))->y, -2.0f);
}

static kiln_result op_add_tag(oom_fixture *f) {
    return kiln_add(f->world, f->e[1], f->tag, NULL);
}

static void check_add_tag(oom_fixture *f) {
    ck_assert(kiln_has(f->world, f->e[1], f->tag));
    ck_assert_float_eq(((const test_velocity *)kiln_get(f->world, f->e[1], f->vel))->x, 5.0f);
}

static kiln_result op_remove(oom_fixture *f) {
    bool removed = false;
    kiln_result r = kiln_remove(f->world, f->e[2], f->pos, &removed);
    if (r == KILN_OK) ck_assert(removed);
    return r;
}

static void check_remove(oom_fixture *f) {
    ck_assert(!kiln_has(f->world, f->e[2], f->pos));
    ck_assert_int_eq(((const test_owned *)kiln_get(f->world, f->e[2], f->owned))->id, 1);
    ck_assert_int_eq(kiln_query_count(f->query), 2);
    ck_assert_int_eq(f->log.destroyed, 0);
}

static kiln_result op_query_create(oom_fixture *f) {
    return kiln_query_create(f->world, &(kiln_query_desc){.with = {f->vel}, .optional = {f->owned}},
                             &f->made);
}

static void check_query_create(oom_fixture *f) {
    ck_assert_int_eq(kiln_query_count(f->made), 1);
    kiln_world_stats s;
    kiln_world_stats_get(f->world, &s);
    ck_assert_int_eq(s.queries, 2);
}

static kiln_result op_spawn_batch(oom_fixture *f) {
    return kiln_spawn_batch(f->world, (kiln_component[]){f->pos, f->tag}, 2, 100, f->out);
}

static void check_spawn_batch(oom_fixture *f) {
    ck_assert_int_eq(kiln_entity_count(f->world), 105);
    ck_assert_int_eq(kiln_query_count(f->query), 103);
    for (int i = 0; i < 100; i++) ck_assert(kiln_has(f->world, f->out[i], f->tag));
}

static kiln_result op_spawn_batch_wide(oom_fixture *f) {
    return kiln_spawn_batch(f->world, f->wide, 40, 20, f->out);
}

static void check_spawn_batch_wide(oom_fixture *f) {
    ck_assert_int_eq(kiln_entity_count(f->world), 25);
    for (int i = 0; i < 20; i++) ck_assert(kiln_has(f->world, f->out[i], f->wide[39]));
    ck_assert(kiln_has(f->world, f->wide_entity, f->wide[34]));
}

static kiln_result op_add_to_wide(oom_fixture *f) {
    return kiln_add(f->world, f->wide_entity, f->pos, &(test_position){12.0f, 13.0f});
}

static void check_add_to_wide(oom_fixture *f) {
    ck_assert_float_eq(((const test_position *)kiln_get(f->world, f->wide_entity, f->pos))->x,
                       12.0f);
    for (int i = 0; i < 35; i++) ck_assert(kiln_has(f->world, f->wide_entity, f->wide[i]));
    ck_assert_int_eq(kiln_query_count(f->query), 4);
}

KILN_TEST_GROUP_WITH(out_of_memory, .timeout = 60);

KILN_TEST(out_of_memory, register_out_of_memory_leaves_the_world_unchanged) {
    ck_assert_int_ge(run_out_of_memory(op_register, check_register, 0, false), 1);
}

KILN_TEST(out_of_memory, spawn_out_of_memory_leaves_the_world_unchanged) {
    /* find a spawn that has to grow storage, then fail it */
    oom_fixture *probe = malloc(sizeof *probe);
    ck_assert_ptr_nonnull(probe);
    oom_setup(probe, 0);
    int64_t filler = -1;
    for (int64_t i = 0; i < 4096 && filler < 0; i++) {
        int64_t before = probe->alloc.allocations;
        kiln_entity e;
        ck_assert_int_eq(kiln_spawn(probe->world, &e), KILN_OK);
        if (probe->alloc.allocations > before) filler = i;
    }
    oom_teardown(probe, false);
    free(probe);
    ck_assert_int_ge(filler, 0);
    ck_assert_int_ge(run_out_of_memory(op_spawn, check_spawn, filler, false), 1);
}

KILN_TEST(out_of_memory, spawn_with_out_of_memory_leaves_the_world_unchanged) {
    ck_assert_int_ge(run_out_of_memory(op_spawn_with, check_spawn_with, 0, true), 1);
}

KILN_TEST(out_of_memory, add_out_of_memory_leaves_the_world_unchanged) {
    ck_assert_int_ge(run_out_of_memory(op_add, check_add, 0, false), 1);
    ck_assert_int_ge(run_out_of_memory(op_add_tag, check_add_tag, 0, false), 1);
}

KILN_TEST(out_of_memory, remove_out_of_memory_leaves_the_world_unchanged) {
    ck_assert_int_ge(run_out_of_memory(op_remove, check_remove, 0, false), 1);
}

KILN_TEST(out_of_memory, query_create_out_of_memory_leaves_the_world_unchanged) {
    ck_assert_int_ge(run_out_of_memory(op_query_create, check_query_create, 0, false), 1);
}

KILN_TEST(out_of_memory, spawn_batch_out_of_memory_leaves_the_world_unchanged) {
    ck_assert_int_ge(run_out_of_memory(op_spawn_batch, check_spawn_batch, 0, false), 1);
}

KILN_TEST(out_of_memory, wide_archetypes_out_of_memory_leave_the_world_unchanged) {
    ck_assert_int_ge(run_out_of_memory(op_spawn_batch_wide, check_spawn_batch_wide, 0, false), 1);
    ck_assert_int_ge(run_out_of_memory(op_add_to_wide, check_add_to_wide, 0, false), 1);
}

KILN_TEST(out_of_memory, despawn_and_set_need_no_memory) {
    /* Releasing things must work when the allocator has nothing left to give. */
    oom_fixture *f = malloc(sizeof *f);
    ck_assert_ptr_nonnull(f);
    oom_setup(f, 20);
    test_allocator_fail_after(&f->alloc, 0);
    ck_assert_int_eq(kiln_despawn(f->world, f->e[0]), KILN_OK);
    ck_assert_int_eq(kiln_despawn(f->world, f->e[2]), KILN_OK);
    ck_assert_int_eq(kiln_despawn(f->world, f->e[3]), KILN_OK);
    ck_assert_int_eq(kiln_set(f->world, f->e[1], f->pos, &(test_position){0.0f, 0.0f}), KILN_OK);
    ck_assert_int_eq(f->alloc.failures, 0);
    test_allocator_fail_never(&f->alloc);
    ck_assert_int_eq(kiln_entity_count(f->world), 22);
    ck_assert_int_eq(test_hook_log_count(&f->log, 1), 1);
    oom_teardown(f, false);
    free(f);
}

/* ------------------------------------------------------------------------------------------ */
/* steady state                                                                               */
/* ------------------------------------------------------------------------------------------ */

typedef struct frame_world {
    kiln_world *world;
    kiln_component pos, vel, owned;
    kiln_query *moving, *all;
    kiln_entity e[600];
    int32_t next_id;
} frame_world;

static void run_frame(frame_world *fw) {
    kiln_world *w = fw->world;
    kiln_tick now = kiln_tick_current(w);
    kiln_iter it;
    kiln_query_iter(fw->moving, &it);
    bool first = true;
    while (kiln_query_next(&it)) {
        ck_assert_uint_ge(kiln_iter_column_tick(&it, 1), 1);
        test_position *p = kiln_iter_column(&it, 0);
        const test_velocity *v = kiln_iter_column(&it, 1);
        for (int32_t row = 0; row < it.count; row++) {
            p[row].x += v[row].x;
            kiln_iter_mark_changed(&it, 0, row);
        }
        /* writes queued by the deferred world land when the loop ends */
        ck_assert_int_eq(kiln_set(w, it.entities[0], fw->vel, &(test_velocity){0.5f, 0.5f}),
                         KILN_OK);
        if (first && it.count > 2) {
            kiln_iter view;
            kiln_iter_range(&it, 1, it.count, &view);
            kiln_iter_mark_changed(&view, 1, 0);
            kiln_iter_fini(&view);
            first = false;
        }
    }
    int64_t seen = 0;
    kiln_query_iter(fw->all, &it);
    while (kiln_query_next(&it))
        for (int32_t row = 0; row < it.count; row++)
            seen += kiln_iter_changed_since(&it, 0, row, now - 1) ? 1 : 0;
    ck_assert_int_ge(seen, 300);
    ck_assert_int_eq(kiln_query_count(fw->all), 600);
    for (int i = 0; i < 600; i += 37) {
        kiln_entity e = fw->e[i];
        test_position *p = kiln_get_mut(w, e, fw->pos);
        ck_assert_ptr_nonnull(p);
        p->y += 1.0f;
        ck_assert_int_eq(kiln_add(w, e, fw->pos, &(test_position){p->x, p->y}), KILN_OK);
        if (kiln_has(w, e, fw->vel))
            ck_assert_int_eq(kiln_set(w, e, fw->vel, &(test_velocity){1.0f, 1.0f}), KILN_OK);
        if (kiln_has(w, e, fw->owned)) {
            test_owned o = test_owned_make(++fw->next_id);
            ck_assert_int_eq(kiln_set(w, e, fw->owned, &o), KILN_OK);
            test_owned o2 = test_owned_make(++fw->next_id);
            ck_assert_int_eq(kiln_add(w, e, fw->owned, &o2), KILN_OK);
        }
        ck_assert_uint_eq(kiln_changed_tick(w, e, fw->pos), kiln_tick_current(w));
        ck_assert_ptr_nonnull(kiln_get(w, e, fw->pos));
        ck_assert(kiln_is_alive(w, e));
    }
    kiln_world_stats s;
    kiln_world_stats_get(w, &s);
    ck_assert_int_eq(kiln_entity_count(w), 600);
    kiln_tick_advance(w);
}

KILN_TEST_GROUP(steady_state);

KILN_TEST(steady_state, a_steady_frame_of_queries_and_writes_allocates_nothing) {
    test_allocator a;
    test_allocator_init(&a);
    test_hook_log log = {0};
    frame_world fw = {.next_id = 1000};
    fw.world = test_world_create(&a);
    fw.pos = test_register_position(fw.world);
    fw.vel = test_register_velocity(fw.world);
    fw.owned = test_register_owned(fw.world, &log);
    for (int i = 0; i < 600; i++) {
        kiln_component comps[3] = {fw.pos};
        int32_t n = 1;
        if (i % 2 == 0) comps[n++] = fw.vel;
        if (i % 3 == 0) comps[n++] = fw.owned;
        ck_assert_int_eq(kiln_spawn_with(fw.world, comps, NULL, n, &fw.e[i]), KILN_OK);
    }
    ck_assert_int_eq(kiln_query_create(fw.world, &(kiln_query_desc){.with = {fw.pos, fw.vel}},
                                       &fw.moving),
                     KILN_OK);
    ck_assert_int_eq(kiln_query_create(fw.world, &(kiln_query_desc){.with = {fw.pos},
                                                                    .optional = {fw.owned}},
                                       &fw.all),
                     KILN_OK);
    run_frame(&fw);
    run_frame(&fw);
    int64_t calls = a.calls;
    for (int i = 0; i < 5; i++) run_frame(&fw);
    ck_assert_msg(a.calls == calls, "%lld allocator calls in 5 steady frames",
                  (long long)(a.calls - calls));
    kiln_world_destroy(fw.world);
    ck_assert_int_eq(a.live_bytes, 0);
    ck_assert_int_eq(log.destroyed, 200 + (fw.next_id - 1000));
    ck_assert_int_eq(log.bad_payload, 0);
}

/* What the teardown hooks saw, in order. */
typedef struct fini_log {
    int order[4];
    int count;
    int64_t entities_seen; /* the world was still whole when the first hook ran */
} fini_log;

typedef struct fini_ctx {
    fini_log *log;
    int id;
} fini_ctx;

static void fini_one(kiln_world *world, void *ctx) {
    fini_ctx *f = ctx;
    f->log->order[f->log->count++] = f->id;
    f->log->entities_seen = kiln_entity_count(world);
}

static void fini_two(kiln_world *world, void *ctx) { fini_one(world, ctx); }

KILN_TEST(lifetime, teardown_hooks_run_last_registered_first_with_the_world_still_whole) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    fini_log log = {{0}, 0, 0};
    fini_ctx one = {&log, 1}, two = {&log, 2};
    ck_assert_ptr_null(kiln_world_atfini_get(world, fini_one));
    ck_assert_int_eq(kiln_world_atfini(world, fini_one, &one), KILN_OK);
    ck_assert_int_eq(kiln_world_atfini(world, fini_two, &two), KILN_OK);
    ck_assert_ptr_eq(kiln_world_atfini_get(world, fini_one), &one);
    ck_assert_ptr_eq(kiln_world_atfini_get(world, fini_two), &two);
    /* one registration per hook: the hook is the key an addon finds its state by */
    ck_assert_int_eq(kiln_world_atfini(world, fini_one, &two), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(world),
                     "kiln_world_atfini: this teardown hook is already registered");
    ck_assert_ptr_eq(kiln_world_atfini_get(world, fini_one), &one);
    ck_assert_int_eq(kiln_spawn(world, NULL), KILN_OK);
    ck_assert_int_eq(log.count, 0);
    kiln_world_destroy(world);
    ck_assert_int_eq(log.count, 2);
    ck_assert_int_eq(log.order[0], 2);
    ck_assert_int_eq(log.order[1], 1);
    ck_assert_int_eq(log.entities_seen, 1);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

KILN_TEST(lifetime, teardown_hook_registration_out_of_memory_registers_nothing) {
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    fini_log log = {{0}, 0, 0};
    fini_ctx one = {&log, 1};
    test_allocator_fail_after(&alloc, 0);
    ck_assert_int_eq(kiln_world_atfini(world, fini_one, &one), KILN_ERR_OUT_OF_MEMORY);
    test_allocator_fail_never(&alloc);
    ck_assert_ptr_null(kiln_world_atfini_get(world, fini_one));
    kiln_world_destroy(world);
    ck_assert_int_eq(log.count, 0);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* destroying at the wrong time                                                               */
/* ------------------------------------------------------------------------------------------ */

/* Each would free what a caller still uses (a running schedule, a schedule's records, the
 * teardown under way): kiln_world_destroy asserts, naming what is wrong. */
KILN_TEST_GROUP(misuse);

static void destroy_the_world(const kiln_system_ctx *ctx) { kiln_world_destroy(ctx->world); }

KILN_TEST_SIGNAL(misuse, destroying_the_world_from_a_running_system_aborts, SIGABRT) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_schedule *s = kiln_schedule_create(w, NULL);
    ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = "quit", .run = destroy_the_world,
                                                               .main_thread = true}), KILN_OK);
    test_expect_abort("kiln_world_destroy: a schedule of the world is running");
    kiln_schedule_run(s, 0.0);
}

KILN_TEST_SIGNAL(misuse, destroying_the_world_before_its_schedules_aborts, SIGABRT) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_schedule *s = kiln_schedule_create(w, NULL);
    ck_assert_ptr_nonnull(s);
    test_expect_abort("kiln_world_destroy: the world still has schedules");
    kiln_world_destroy(w);
    kiln_schedule_destroy(s);
}

static void destroy_again(kiln_world *world, void *ctx) {
    (void)ctx;
    kiln_world_destroy(world);
}

KILN_TEST_SIGNAL(misuse, destroying_the_world_from_its_own_teardown_hook_aborts, SIGABRT) {
    kiln_world *w = kiln_world_create(NULL);
    ck_assert_int_eq(kiln_world_atfini(w, destroy_again, NULL), KILN_OK);
    test_expect_abort("kiln_world_destroy: the world is already being destroyed");
    kiln_world_destroy(w);
}

KILN_TEST(misuse, a_world_whose_schedules_were_destroyed_first_is_destroyed_cleanly) {
    kiln_world *w = kiln_world_create(NULL);
    kiln_schedule *a = kiln_schedule_create(w, NULL), *b = kiln_schedule_create(w, NULL);
    ck_assert_int_eq(kiln_schedule_run(a, 0.0), KILN_OK);
    kiln_schedule_destroy(b);
    kiln_schedule_destroy(a);
    kiln_world_destroy(w);
}
