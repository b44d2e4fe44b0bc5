/* test_schedule_build.c: Check suite for building a schedule: staging by declared access,
 * before/after ordering, names that wait and cycles refused at add. Built schedules run. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "schedule_fixture.h"
#include "test_registry.h"
#include "test_support.h"

/* The fixture world (schedule_fixture.h), made afresh around every test of a group using it. */
static schedule_fixture F;

static void setup(void) { schedule_fixture_setup(&F); }

static void teardown(void) { schedule_fixture_teardown(&F); }

/* ------------------------------------------------------------------------------------------ */
/* staging                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* (the waiting-names case adds 400 systems of 16 constraints: over 3 s under TSan on a busy
 * machine, past Check's default of 4 s when CI shares it) */
KILN_TEST_GROUP_WITH(staging, .setup = setup, .teardown = teardown, .timeout = 30);

KILN_TEST(staging, systems_that_only_read_share_a_stage) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    ck_assert_ptr_nonnull(s);
    add_system(s, (kiln_system_desc){.name = "a", .run = noop, .reads = {F.p}});
    add_system(s, (kiln_system_desc){.name = "b", .run = noop, .reads = {F.p, F.q}});
    add_system(s, (kiln_system_desc){.name = "c", .run = noop, .reads = {F.q, F.p}});
    add_system(s, (kiln_system_desc){.name = "d", .run = noop});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    ck_assert_str_eq(describe(s), "stage 0: a, b, c, d\n");
    kiln_schedule_destroy(s);
}

KILN_TEST(staging, a_writer_and_a_reader_run_in_declaration_order) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    /* reader declared first runs first */
    add_system(s, (kiln_system_desc){.name = "read_p", .run = noop, .reads = {F.p}});
    add_system(s, (kiln_system_desc){.name = "write_p", .run = noop, .writes = {F.p}});
    /* writer declared first runs first; writing implies reading */
    add_system(s, (kiln_system_desc){.name = "write_q", .run = noop, .writes = {F.q}});
    add_system(s, (kiln_system_desc){.name = "read_q", .run = noop, .reads = {F.q}});
    add_system(s, (kiln_system_desc){.name = "write_q_again", .run = noop, .writes = {F.q}});
    ck_assert_int_eq(kiln_schedule_stage_count(s), 3);
    ck_assert_str_eq(describe(s),
                     "stage 0: read_p, write_q\n"
                     "stage 1: write_p, read_q\n"
                     "stage 2: write_q_again\n");
    ck_assert_int_eq(stage_of(s, "read_p"), 0);
    ck_assert_int_eq(stage_of(s, "write_p"), 1);
    ck_assert_int_eq(stage_of(s, "write_q_again"), 2);
    kiln_schedule_destroy(s);
}

KILN_TEST(staging, the_staging_rule_saves_a_stage_over_joining_the_last_stage) {
    /* "Join the last stage unless conflicting" would give A | B, C | D: three stages. */
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    add_system(s, (kiln_system_desc){.name = "A", .run = noop, .writes = {F.p}});
    add_system(s, (kiln_system_desc){.name = "B", .run = noop, .reads = {F.p}});
    add_system(s, (kiln_system_desc){.name = "C", .run = noop, .writes = {F.q}});
    add_system(s, (kiln_system_desc){.name = "D", .run = noop, .reads = {F.q}});
    ck_assert_int_eq(kiln_schedule_stage_count(s), 2);
    ck_assert_str_eq(describe(s), "stage 0: A, C\nstage 1: B, D\n");
    kiln_schedule_destroy(s);
}

KILN_TEST(staging, describe_truncates_and_returns_the_full_length) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    add_system(s, (kiln_system_desc){.name = "move", .run = noop, .writes = {F.p}});
    add_system(s, (kiln_system_desc){.name = "spin", .run = noop, .writes = {F.q}});
    add_system(s, (kiln_system_desc){.name = "collide", .run = noop, .reads = {F.p, F.q}});
    const char *full = "stage 0: move, spin\nstage 1: collide\n";
    char buf[64];
    ck_assert_uint_eq(kiln_schedule_describe(s, buf, sizeof buf), strlen(full));
    ck_assert_str_eq(buf, full);
    char small[10];
    memset(small, 'x', sizeof small);
    ck_assert_uint_eq(kiln_schedule_describe(s, small, sizeof small), strlen(full));
    ck_assert_str_eq(small, "stage 0: ");
    ck_assert_uint_eq(kiln_schedule_describe(s, NULL, 0), strlen(full));
    kiln_schedule *empty = kiln_schedule_create(F.world, NULL);
    ck_assert_uint_eq(kiln_schedule_describe(empty, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(kiln_schedule_stage_count(empty), 0);
    kiln_schedule_destroy(empty);
    kiln_schedule_destroy(s);
}

/* What an exclusive system saw of the world. */
typedef struct exclusive_probe {
    kiln_component p;
    kiln_entity victim;
    kiln_entity spawned;
    bool deferred;
    bool spawned_alive_at_once;
    bool victim_dead_at_once;
    bool added_at_once;
    int64_t seen_by_later;
} exclusive_probe;

static void exclusive_run(const kiln_system_ctx *ctx) {
    exclusive_probe *x = ctx->user;
    kiln_world *w = ctx->world;
    x->deferred = kiln_is_deferred(w);
    ck_assert_int_eq(kiln_spawn(w, &x->spawned), KILN_OK);
    x->spawned_alive_at_once = kiln_is_alive(w, x->spawned);
    ck_assert_int_eq(kiln_add(w, x->spawned, x->p, &(test_position){5.0f, 6.0f}), KILN_OK);
    x->added_at_once = kiln_has(w, x->spawned, x->p);
    if (kiln_is_alive(w, x->victim)) {
        ck_assert_int_eq(kiln_despawn(w, x->victim), KILN_OK);
        x->victim_dead_at_once = !kiln_is_alive(w, x->victim);
    }
}

static void after_exclusive_run(const kiln_system_ctx *ctx) {
    exclusive_probe *x = ctx->user;
    const test_position *p = kiln_get(ctx->world, x->spawned, x->p);
    if (p && p->x == 5.0f) x->seen_by_later++;
}

KILN_TEST(staging, an_exclusive_system_runs_alone_and_changes_the_world_directly) {
    kiln_jobs *jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 2});
    kiln_schedule *s = kiln_schedule_create(F.world, &(kiln_schedule_desc){.jobs = jobs});
    exclusive_probe x = {.p = F.p};
    ck_assert_int_eq(kiln_spawn(F.world, &x.victim), KILN_OK);
    add_system(s, (kiln_system_desc){.name = "a", .run = noop, .reads = {F.p}});
    add_system(s, (kiln_system_desc){.name = "b", .run = noop, .reads = {F.q}});
    add_system(s, (kiln_system_desc){.name = "x", .run = exclusive_run, .user = &x,
                                     .exclusive = true});
    add_system(s, (kiln_system_desc){.name = "c", .run = after_exclusive_run, .user = &x,
                                     .reads = {F.p}});
    add_system(s, (kiln_system_desc){.name = "d", .run = noop});
    add_system(s, (kiln_system_desc){.name = "y", .run = noop, .exclusive = true});
    add_system(s, (kiln_system_desc){.name = "z", .run = noop, .exclusive = true});
    ck_assert_int_eq(kiln_schedule_stage_count(s), 5);
    ck_assert_str_eq(describe(s),
                     "stage 0: a, b\nstage 1: x\nstage 2: c, d\nstage 3: y\nstage 4: z\n");
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert(!x.deferred);
    ck_assert(x.spawned_alive_at_once);
    ck_assert(x.added_at_once);
    ck_assert(x.victim_dead_at_once);
    ck_assert_int_eq(x.seen_by_later, 1);
    ck_assert(!kiln_is_deferred(F.world));
    ck_assert(kiln_is_alive(F.world, x.spawned));
    ck_assert(!kiln_is_alive(F.world, x.victim));
    kiln_system_info info;
    ck_assert(kiln_schedule_system_info_get(s, kiln_schedule_find(s, "x"), &info));
    ck_assert(info.exclusive);
    ck_assert_int_eq(info.runs, 1);
    kiln_schedule_destroy(s);
    kiln_jobs_destroy(jobs);
}

KILN_TEST(staging, before_and_after_place_systems_even_relative_to_later_declared_ones) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    add_system(s, (kiln_system_desc){.name = "a", .run = noop, .after = {"c"}});
    add_system(s, (kiln_system_desc){.name = "b", .run = noop});
    add_system(s, (kiln_system_desc){.name = "c", .run = noop});
    ck_assert_str_eq(describe(s), "stage 0: b, c\nstage 1: a\n");
    ck_assert_int_eq(stage_of(s, "a"), 1);
    ck_assert_int_eq(stage_of(s, "c"), 0);
    kiln_schedule_destroy(s);

    s = kiln_schedule_create(F.world, NULL);
    add_system(s, (kiln_system_desc){.name = "a", .run = noop, .after = {"c"}});
    add_system(s, (kiln_system_desc){.name = "b", .run = noop, .before = {"c"}});
    add_system(s, (kiln_system_desc){.name = "c", .run = noop});
    add_system(s, (kiln_system_desc){.name = "d", .run = noop, .before = {"b", "a"}});
    ck_assert_int_eq(kiln_schedule_stage_count(s), 4);
    ck_assert_str_eq(describe(s), "stage 0: d\nstage 1: b\nstage 2: c\nstage 3: a\n");
    kiln_schedule_destroy(s);
}

KILN_TEST(staging, an_explicit_order_between_conflicting_systems_overrides_declaration_order) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    add_system(s, (kiln_system_desc){.name = "writer", .run = noop, .writes = {F.p}});
    add_system(s, (kiln_system_desc){.name = "reader", .run = noop, .reads = {F.p},
                                     .before = {"writer"}});
    ck_assert_str_eq(describe(s), "stage 0: reader\nstage 1: writer\n");
    kiln_schedule_destroy(s);

    s = kiln_schedule_create(F.world, NULL);
    add_system(s, (kiln_system_desc){.name = "first", .run = noop, .writes = {F.p},
                                     .after = {"second"}});
    add_system(s, (kiln_system_desc){.name = "second", .run = noop, .writes = {F.p}});
    add_system(s, (kiln_system_desc){.name = "third", .run = noop, .reads = {F.p}});
    ck_assert_str_eq(describe(s), "stage 0: second\nstage 1: first\nstage 2: third\n");
    kiln_schedule_destroy(s);
}

KILN_TEST(staging, a_before_after_cycle_is_an_error_naming_the_systems) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    add_system(s, (kiln_system_desc){.name = "bystander", .run = noop});
    add_system(s, (kiln_system_desc){.name = "alpha", .run = noop, .after = {"beta"}});
    kiln_system_desc beta = {.name = "beta", .run = noop, .after = {"alpha"}};
    ck_assert_int_eq(kiln_schedule_add(s, &beta), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.world),
                     "kiln_schedule_add: 'beta' -> 'alpha' -> 'beta' would form a cycle");
    ck_assert_int_eq(kiln_schedule_system_count(s), 2);
    ck_assert_int_eq(kiln_schedule_find(s, "beta"), -1);
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: bystander, alpha\n");

    /* a system ordered after itself */
    kiln_world_clear_error(F.world);
    kiln_system_desc self = {.name = "ouroboros", .run = noop, .after = {"ouroboros"}};
    ck_assert_int_eq(kiln_schedule_add(s, &self), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.world),
                     "kiln_schedule_add: 'ouroboros' -> 'ouroboros' would form a cycle");
    ck_assert_int_eq(kiln_schedule_system_count(s), 2);
    kiln_schedule_destroy(s);
}

KILN_TEST(staging, an_unknown_name_in_before_or_after_waits_for_a_system_of_that_name) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    int ran = 0;
    add_system(s, (kiln_system_desc){.name = "mover", .run = count_run, .user = &ran,
                                     .after = {"ghost"}});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: mover\n");
    kiln_system_info info;
    ck_assert(kiln_schedule_system_info_get(s, 0, &info));
    ck_assert_int_eq(info.unresolved, 1);
    ck_assert_int_eq(info.after_count, 1);
    ck_assert_str_eq(info.after[0], "ghost");
    ck_assert_ptr_null(info.after[1]);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(ran, 1);
    /* declaring the missing system puts the constraint in force */
    add_system(s, (kiln_system_desc){.name = "ghost", .run = noop});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: ghost\nstage 1: mover\n");
    ck_assert(kiln_schedule_system_info_get(s, 0, &info));
    ck_assert_int_eq(info.unresolved, 0);
    kiln_schedule_destroy(s);
}

/* A cycle through names no system holds yet can never be met: the add whose own constraints
 * close it is refused then, not the later system that takes the name. Before, a system
 * ordered both before and after an absent name was accepted and kept every later system of
 * that name out, whoever added it (a hostile mod could keep the host's names). */
KILN_TEST(staging, a_cycle_through_waiting_names_refuses_the_add_that_closes_it_not_the_name) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    kiln_system_desc trap = {.name = "trap", .run = noop, .before = {"victim"}, .after = {"victim"}};
    ck_assert_int_eq(kiln_schedule_add(s, &trap), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.world),
                     "kiln_schedule_add: 'trap' -> 'victim' -> 'trap' would form a cycle");
    ck_assert_int_eq(kiln_schedule_system_count(s), 0);

    /* the same through three systems and two waiting names: b closes b -> a -> x -> w -> y -> b */
    add_system(s, (kiln_system_desc){.name = "a", .run = noop, .before = {"x"}});
    add_system(s, (kiln_system_desc){.name = "w", .run = noop, .after = {"x"}, .before = {"y"}});
    kiln_system_desc b = {.name = "b", .run = noop, .after = {"y"}, .before = {"a"}};
    kiln_world_clear_error(F.world);
    ck_assert_int_eq(kiln_schedule_add(s, &b), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.world),
                     "kiln_schedule_add: 'b' -> 'a' -> 'x' -> 'w' -> 'y' -> 'b' would form a cycle");
    ck_assert_int_eq(kiln_schedule_find(s, "b"), -1);

    /* so systems of the waiting names, declaring nothing, always come in, and order */
    add_system(s, (kiln_system_desc){.name = "victim", .run = noop});
    add_system(s, (kiln_system_desc){.name = "y", .run = noop});
    add_system(s, (kiln_system_desc){.name = "x", .run = noop});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    ck_assert_str_eq(describe(s), "stage 0: a, victim\nstage 1: x\nstage 2: w\nstage 3: y\n");

    /* a replace is checked the same way, and a refused one keeps the old system */
    kiln_system_desc a2 = {.name = "a", .run = noop, .before = {"x"}, .after = {"ghost_x"}};
    ck_assert_int_eq(kiln_schedule_replace(s, &a2), KILN_OK);
    add_system(s, (kiln_system_desc){.name = "g", .run = noop, .before = {"ghost_y"}});
    kiln_system_desc g2 = {.name = "g", .run = noop, .before = {"ghost_x"}, .after = {"y"}};
    kiln_world_clear_error(F.world);
    ck_assert_int_eq(kiln_schedule_replace(s, &g2), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.world),
                     "kiln_schedule_replace: 'g' -> 'ghost_x' -> 'a' -> 'x' -> 'w' -> 'y' -> 'g' "
                     "would form a cycle");
    kiln_system_info info;
    ck_assert(kiln_schedule_system_info_get(s, kiln_schedule_find(s, "g"), &info));
    ck_assert_str_eq(info.before[0], "ghost_y");
    ck_assert_int_eq(info.after_count, 0);
    kiln_schedule_destroy(s);
}

/* Bytes the world holds for a schedule of 400 systems, each naming 16 absent systems when
 * waiting is true. */
static int64_t schedule_bytes(kiln_schedule **out, bool waiting) {
    static char names[400][16], absent[400][KILN_SYSTEM_MAX_ORDER * 2][32]; /* (room for any int) */
    kiln_world_stats stats;
    kiln_world_stats_get(F.world, &stats);
    int64_t before = stats.bytes;
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    for (int i = 0; i < 400; i++) {
        kiln_system_desc d = {.run = noop};
        snprintf(names[i], sizeof names[i], "sys%d", i);
        d.name = names[i];
        for (int k = 0; waiting && k < KILN_SYSTEM_MAX_ORDER; k++) {
            snprintf(absent[i][k], sizeof absent[i][k], "b%d_%d", i, k);
            snprintf(absent[i][KILN_SYSTEM_MAX_ORDER + k], sizeof absent[i][k], "a%d_%d", i, k);
            d.before[k] = absent[i][k];
            d.after[k] = absent[i][KILN_SYSTEM_MAX_ORDER + k];
        }
        ck_assert_int_eq(kiln_schedule_add(s, &d), KILN_OK);
    }
    kiln_world_stats_get(F.world, &stats);
    *out = s;
    return stats.bytes - before;
}

/* Waiting names are nodes of the check: many of them cost memory in proportion to the
 * constraints, not to their square. */
KILN_TEST(staging, many_waiting_names_are_checked_in_memory_linear_in_the_constraints) {
    kiln_schedule *plain, *s;
    int64_t plain_bytes = schedule_bytes(&plain, false);
    int64_t bytes = schedule_bytes(&s, true);
    /* 400 + 6,400 nodes: a bit matrix of them would take 5.8 MB; the lists take under 1 MB */
    ck_assert_int_lt(bytes - plain_bytes, 1 << 20);
    /* and the check still sees through them: sys399 runs after a399_k and before b399_k */
    kiln_system_desc fine = {.name = "fine", .run = noop, .after = {"a399_0"}, .before = {"b399_0"}};
    ck_assert_int_eq(kiln_schedule_add(s, &fine), KILN_OK);
    kiln_system_desc closing = {.name = "closing", .run = noop, .after = {"b399_1"}, .before = {"a399_1"}};
    ck_assert_int_eq(kiln_schedule_add(s, &closing), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(kiln_world_error(F.world), "kiln_schedule_add: 'closing' -> 'a399_1' -> "
                                                "'sys399' -> 'b399_1' -> 'closing' would form a cycle");
    kiln_schedule_destroy(plain);
    kiln_schedule_destroy(s);
}

KILN_TEST(staging, add_rejects_bad_systems_and_leaves_the_schedule_unchanged) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    add_system(s, (kiln_system_desc){.name = "writer", .run = noop, .writes = {F.p}});
    add_system(s, (kiln_system_desc){.name = "reader", .run = noop, .reads = {F.p}});
    ck_assert_int_eq(kiln_schedule_build(s), KILN_OK);
    const char *before = "stage 0: writer\nstage 1: reader\n";
    ck_assert_str_eq(describe(s), before);

    char long_name[KILN_MAX_NAME + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    const struct {
        kiln_system_desc desc;
        kiln_result code;
        const char *mentions; /* the message names this */
    } bad[] = {
        {{.name = "writer", .run = noop, .reads = {F.q}}, KILN_ERR_INVALID_ARGUMENT, "writer"},
        {{.name = "lazy", .run = NULL}, KILN_ERR_INVALID_ARGUMENT, "lazy"},
        {{.name = "stranger", .run = noop, .reads = {F.p, 99}}, KILN_ERR_UNKNOWN_COMPONENT,
         "stranger"},
        {{.name = "stranger", .run = noop, .writes = {F.r + 1}}, KILN_ERR_UNKNOWN_COMPONENT,
         "stranger"},
        {{.name = NULL, .run = noop}, KILN_ERR_INVALID_ARGUMENT, NULL},
        {{.name = "", .run = noop}, KILN_ERR_INVALID_ARGUMENT, NULL},
        {{.name = long_name, .run = noop}, KILN_ERR_INVALID_ARGUMENT, NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_world_clear_error(F.world);
        ck_assert_int_eq(kiln_schedule_add(s, &bad[i].desc), bad[i].code);
        ck_assert_str_ne(kiln_world_error(F.world), "");
        if (bad[i].mentions)
            ck_assert_msg(strstr(kiln_world_error(F.world), bad[i].mentions), "case %zu: %s", i,
                          kiln_world_error(F.world));
        ck_assert_int_eq(kiln_schedule_system_count(s), 2);
        ck_assert_int_eq(kiln_schedule_find(s, "lazy"), -1);
        ck_assert_int_eq(kiln_schedule_find(s, "stranger"), -1);
        /* still built: the stages are as they were */
        ck_assert_int_eq(stage_of(s, "reader"), 1);
        ck_assert_str_eq(describe(s), before);
    }
    ck_assert_int_eq(kiln_schedule_add(s, NULL), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_schedule_system_count(s), 2);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(runs_of(s, "writer"), 1);
    kiln_schedule_destroy(s);
}

KILN_TEST(staging, run_after_a_failed_build_returns_the_error_and_runs_nothing) {
    /* names cannot fail a build any more: running out of memory can */
    test_allocator alloc;
    test_allocator_init(&alloc);
    kiln_world *world = test_world_create(&alloc);
    kiln_schedule *s = kiln_schedule_create(world, NULL);
    int ran = 0;
    add_system(s, (kiln_system_desc){.name = "fine", .run = count_run, .user = &ran});
    add_system(s, (kiln_system_desc){.name = "lost", .run = count_run, .user = &ran,
                                     .after = {"nowhere"}});
    kiln_tick tick = kiln_tick_current(world);
    test_allocator_fail_after(&alloc, 0);
    ck_assert_int_eq(kiln_schedule_build(s), KILN_ERR_OUT_OF_MEMORY);
    kiln_world_clear_error(world);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_ERR_OUT_OF_MEMORY);
    ck_assert_str_eq(kiln_world_error(world), "kiln_schedule_build: out of memory");
    ck_assert_int_eq(ran, 0);
    ck_assert_uint_eq(kiln_tick_current(world), tick);
    ck_assert(!kiln_is_deferred(world));
    ck_assert_int_eq(runs_of(s, "fine"), 0);
    test_allocator_fail_never(&alloc);
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(ran, 2);
    kiln_schedule_destroy(s);
    kiln_world_destroy(world);
    ck_assert_int_eq(alloc.live_bytes, 0);
}

/* A listing of many systems through kiln_schedule_system_info_get, after removals (which move
 * indices) and a late add that resolves a waiting name: every entry is the system declared
 * there, with its flags, its names as given and its unresolved count as of now. The listing
 * resolved each name by a walk of the list (time in the square of the systems); the adds'
 * cycle checks still sort the names each time, and the build closes the order (cubic), so
 * 1000 systems: 3000 took over a minute under TSan. */
KILN_TEST_GROUP_WITH(listing, .setup = setup, .teardown = teardown, .timeout = 60);

enum { LISTED = 1000 };
static char listed_names[LISTED + 1][24], listed_ghosts[LISTED][24]; /* room for any int */

static bool listed_live(int32_t i) { return i % 10 != 5; } /* the ones removed below */

KILN_TEST(listing, a_listing_of_thousands_of_systems_describes_each_one) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    for (int32_t i = 0; i < LISTED; i++) {
        snprintf(listed_names[i], sizeof listed_names[i], "s%d", (int)i);
        snprintf(listed_ghosts[i], sizeof listed_ghosts[i], "ghost%d", (int)i);
        kiln_system_desc d = {.name = listed_names[i], .run = noop, .disabled = i % 4 == 1,
                              .exclusive = i % 7 == 3, .main_thread = i % 11 == 2};
        if (i > 0) d.after[0] = listed_names[i - 1];
        if (i % 3 == 0) d.before[0] = listed_ghosts[i];
        ck_assert_int_eq(kiln_schedule_add(s, &d), KILN_OK);
    }
    for (int32_t i = 5; i < LISTED; i += 10) ck_assert_int_eq(kiln_schedule_remove(s, listed_names[i]), KILN_OK);
    add_system(s, (kiln_system_desc){.name = "ghost0", .run = noop});
    ck_assert_int_gt(kiln_schedule_stage_count(s), 1);
    int32_t count = kiln_schedule_system_count(s);
    ck_assert_int_eq(count, LISTED - LISTED / 10 + 1);
    int32_t index = 0;
    kiln_system_info info;
    for (int32_t i = 0; i < LISTED; i++) {
        if (!listed_live(i)) continue;
        ck_assert(kiln_schedule_system_info_get(s, index, &info));
        ck_assert_str_eq(info.name, listed_names[i]);
        ck_assert_int_eq(info.index, index);
        ck_assert_int_ge(info.stage, 0);
        ck_assert(info.enabled == (i % 4 != 1));
        ck_assert(info.exclusive == (i % 7 == 3));
        ck_assert(info.main_thread == (i % 11 == 2));
        ck_assert(!info.removing);
        ck_assert_int_eq(info.runs, 0);
        ck_assert_int_eq(info.after_count, i > 0);
        ck_assert_int_eq(info.before_count, i % 3 == 0);
        if (i > 0) ck_assert_str_eq(info.after[0], listed_names[i - 1]);
        ck_assert_ptr_null(info.after[info.after_count]);
        if (i % 3 == 0) ck_assert_str_eq(info.before[0], listed_ghosts[i]);
        ck_assert_ptr_null(info.before[info.before_count]);
        /* waiting: a removed predecessor, a ghost (but ghost0, added last) */
        int32_t unresolved = (i > 0 && !listed_live(i - 1)) + (i % 3 == 0 && i != 0);
        ck_assert_int_eq(info.unresolved, unresolved);
        if (i > 0 && listed_live(i - 1)) ck_assert_int_gt(info.stage, stage_of(s, listed_names[i - 1]));
        ck_assert_int_eq(kiln_schedule_find(s, listed_names[i]), index);
        index++;
    }
    ck_assert(kiln_schedule_system_info_get(s, index, &info));
    ck_assert_str_eq(info.name, "ghost0");
    ck_assert_int_gt(info.stage, stage_of(s, "s0"));
    ck_assert(!kiln_schedule_system_info_get(s, count, &info));
    for (int32_t i = 5; i < LISTED; i += 10) ck_assert_int_eq(kiln_schedule_find(s, listed_names[i]), -1);
    kiln_schedule_destroy(s);
}

/* A schedule's build grows as the cube of its systems (16,000 writers of 64 components took about
 * a minute): kiln_schedule_add takes KILN_SCHEDULE_MAX_SYSTEMS and refuses one more, changing
 * nothing; a place a removal frees takes one again. */
KILN_TEST(listing, a_schedule_takes_its_limit_of_systems_and_refuses_one_more) {
    kiln_schedule *s = kiln_schedule_create(F.world, NULL);
    char name[24];
    for (int i = 0; i < KILN_SCHEDULE_MAX_SYSTEMS; i++) {
        snprintf(name, sizeof name, "s%d", i);
        ck_assert_int_eq(kiln_schedule_add(s, &(kiln_system_desc){.name = name, .run = noop}), KILN_OK);
    }
    ck_assert_int_eq(kiln_schedule_system_count(s), 4096);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1);
    kiln_result r = kiln_schedule_add(s, &(kiln_system_desc){.name = "one_more", .run = noop, .writes = {F.p}});
    ck_assert_int_eq(r, KILN_ERR_LIMIT);
    const char *message = kiln_world_error(F.world);
    ck_assert_msg(strstr(message, "4096") && strstr(message, "KILN_SCHEDULE_MAX_SYSTEMS") &&
                  strstr(message, "one_more"), "%s", message);
    ck_assert_int_eq(kiln_schedule_system_count(s), 4096);
    ck_assert_int_eq(kiln_schedule_find(s, "one_more"), -1);
    ck_assert_int_eq(kiln_schedule_stage_count(s), 1); /* the writer of p would have made a stage */
    ck_assert_int_eq(kiln_schedule_run(s, 0.0), KILN_OK);
    ck_assert_int_eq(runs_of(s, "s4095"), 1);
    ck_assert_int_eq(kiln_schedule_remove(s, "s0"), KILN_OK);
    add_system(s, (kiln_system_desc){.name = "one_more", .run = noop});
    ck_assert_int_eq(kiln_schedule_system_count(s), 4096);
    kiln_schedule_destroy(s);
}

KILN_TEST(staging, destroying_null_is_a_noop) {
    kiln_schedule_destroy(NULL);
}
