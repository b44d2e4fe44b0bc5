/* test_commands_batch.c: Check suite for applying runs of same-shape spawns as one batch: the
 * world, handles, ticks and memory equal those of the same spawns made one by one. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands_fixture.h"
#include "kiln.h"
#include "test_registry.h"
#include "test_support.h"

#define ASSERT_OK_IN(w, call)                                                                \
    do {                                                                                     \
        kiln_result r_ = (call);                                                             \
        ck_assert_msg(r_ == KILN_OK, "%s returned \"%s\" (%s)", #call, kiln_result_name(r_), \
                      kiln_world_error(w));                                                  \
    } while (0)

/* The values unit i gets: every seventh Velocity is left to the defaults. */
static test_position pos_of(int64_t i) { return (test_position){(float)i, (float)-i}; }
static test_velocity vel_of(int64_t i) { return (test_velocity){(float)(2 * i), 1}; }
static bool vel_given(int64_t i) { return i % 7 != 3; }

/* Two worlds built alike: one gets spawns through a buffer, the other the same spawns made
 * directly with kiln_spawn_with, which is what applying one by one amounts to. */
typedef struct pair {
    test_allocator alloc[2];
    kiln_world *w[2];
    kiln_component pos[2], vel[2], checked[2];
    kiln_commands *cmd;
} pair;

/* What the Checked component's check hook saw: the world's entity count at each call. */
typedef struct check_log {
    int64_t counts[4096];
    int32_t calls;
} check_log;

static kiln_result log_check(const kiln_world *world, kiln_entity entity, const void *value,
                             void *ctx, char *why, size_t why_size) {
    (void)entity, (void)value, (void)why, (void)why_size;
    check_log *log = ctx;
    if (log && log->calls < 4096) log->counts[log->calls++] = kiln_entity_count(world);
    return KILN_OK;
}

/* history: 0 nothing; 1 freed slots on the free list (scattered despawns); 2 the spawn cache
 * holding another shape. Both worlds stand at tick 3. */
static void pair_make(pair *p, int history, check_log *logs) {
    memset(p, 0, sizeof *p);
    for (int s = 0; s < 2; s++) {
        test_allocator_init(&p->alloc[s]);
        kiln_world *w = p->w[s] = test_world_create(&p->alloc[s]);
        p->pos[s] = test_register_position(w);
        p->vel[s] = test_register_velocity(w);
        ASSERT_OK_IN(w, kiln_component_register(w, &(kiln_component_desc){.name = "Checked", .size = 4,
                                                    .check = log_check, .hook_ctx = logs ? &logs[s] : NULL},
                                                &p->checked[s]));
        kiln_tick_advance(w);
        kiln_tick_advance(w);
        kiln_entity e[60];
        for (int i = 0; i < 60; i++) ASSERT_OK_IN(w, kiln_spawn_with(w, &p->pos[s], NULL, 1, &e[i]));
        if (history == 1)
            for (int i = 0; i < 60; i += 1 + i % 3) ASSERT_OK_IN(w, kiln_despawn(w, e[(i * 37) % 60]));
        if (history == 2)
            ASSERT_OK_IN(w, kiln_spawn_with(w, (kiln_component[]){p->vel[s], p->pos[s]}, NULL, 2, NULL));
    }
    p->cmd = kiln_commands_create(p->w[0]);
    ck_assert_ptr_nonnull(p->cmd);
}

static void pair_free(pair *p) {
    kiln_commands_destroy(p->cmd);
    for (int s = 0; s < 2; s++) {
        kiln_world_destroy(p->w[s]);
        ck_assert_int_eq(p->alloc[s].live_bytes, 0);
        ck_assert_int_eq(p->alloc[s].bad_osize, 0);
    }
}

/* Records unit i into p's buffer: a spawn, its Position and its Velocity (NULL value for the
 * defaults); with_checked adds the Checked component too. */
static kiln_entity record_unit(pair *p, int64_t i, bool with_checked) {
    kiln_entity ph = KILN_NULL_ENTITY;
    test_position pv = pos_of(i);
    test_velocity vv = vel_of(i);
    ASSERT_OK_IN(p->w[0], kiln_commands_spawn(p->cmd, &ph));
    ck_assert_int_eq(kiln_commands_add(p->cmd, ph, p->pos[0], &pv), KILN_OK);
    ck_assert_int_eq(kiln_commands_add(p->cmd, ph, p->vel[0], vel_given(i) ? &vv : NULL), KILN_OK);
    if (with_checked)
        ck_assert_int_eq(kiln_commands_add(p->cmd, ph, p->checked[0], &(int32_t){(int32_t)i}), KILN_OK);
    return ph;
}

/* Makes unit i directly in the reference world. */
static kiln_entity direct_unit(pair *p, int64_t i, bool with_checked) {
    test_position pv = pos_of(i);
    test_velocity vv = vel_of(i);
    int32_t cv = (int32_t)i;
    kiln_entity e = KILN_NULL_ENTITY;
    ASSERT_OK_IN(p->w[1], kiln_spawn_with(p->w[1], (kiln_component[]){p->pos[1], p->vel[1], p->checked[1]},
                                          (const void *[]){&pv, vel_given(i) ? &vv : NULL, &cv},
                                          with_checked ? 3 : 2, &e));
    return e;
}

/* The two worlds are equal: entities in order with their components, ticks and values, the
 * slots and memory they hold, and the handle each hands out next. */
static void assert_same_worlds(pair *p) {
    ck_assert_uint_eq(test_world_digest(p->w[0]), test_world_digest(p->w[1]));
    kiln_world_stats a, b;
    kiln_world_stats_get(p->w[0], &a);
    kiln_world_stats_get(p->w[1], &b);
    ck_assert_int_eq(a.entities, b.entities);
    ck_assert_int_eq(a.entity_slots, b.entity_slots);
    ck_assert_int_eq(a.archetypes, b.archetypes);
    ck_assert_int_eq(a.bytes, b.bytes);
    ck_assert_int_eq(a.allocations, b.allocations);
}

static void assert_same_next_handles(pair *p) {
    kiln_entity next[2];
    for (int s = 0; s < 2; s++) ASSERT_OK_IN(p->w[s], kiln_spawn(p->w[s], &next[s]));
    ck_assert_uint_eq(next[0], next[1]);
}

/* Crosses a page of entity slots (4096) and several archetype growths. */
#define RUN 5000

KILN_TEST_GROUP_WITH(batch, .timeout = 60);

/* _i: the history of pair_make. */
KILN_TEST_LOOP(batch, a_run_of_spawns_lands_exactly_as_the_same_spawns_one_by_one, 0, 3) {
    pair p;
    pair_make(&p, _i, NULL);
    kiln_entity *ph = malloc(sizeof *ph * RUN), *ref = malloc(sizeof *ref * RUN);
    ck_assert(ph && ref);
    for (int64_t i = 0; i < RUN; i++) ph[i] = record_unit(&p, i, false);
    for (int64_t i = 0; i < RUN; i++) ref[i] = direct_unit(&p, i, false);
    int64_t applied = -1;
    ASSERT_OK_IN(p.w[0], kiln_commands_apply(p.cmd, p.w[0], &applied));
    ck_assert_int_eq(applied, 3 * RUN);
    for (int64_t i = 0; i < RUN; i++) ck_assert_uint_eq(kiln_commands_resolve(p.cmd, ph[i]), ref[i]);
    assert_same_worlds(&p);
    const test_velocity *v = kiln_get(p.w[0], ref[3], p.vel[0]);
    ck_assert(v && v->x == 0 && v->y == 0); /* no value given: the defaults (zeroes) */
    assert_same_next_handles(&p);
    free(ph);
    free(ref);
    pair_free(&p);
}

/* Units 50 to 59 of every hundred have a component with a check hook: the run breaks there,
 * those spawns go one by one (their check sees exactly the spawns before it alive), and the
 * run picks up after them. */
static bool checked_unit(int64_t i) { return i % 100 >= 50 && i % 100 < 60; }

KILN_TEST(batch, a_component_with_a_check_hook_breaks_the_run_and_sees_each_spawn_one_by_one) {
    static check_log logs[2];
    memset(logs, 0, sizeof logs);
    pair p;
    pair_make(&p, 0, logs);
    kiln_entity *ph = malloc(sizeof *ph * RUN), *ref = malloc(sizeof *ref * RUN);
    ck_assert(ph && ref);
    for (int64_t i = 0; i < RUN; i++) ph[i] = record_unit(&p, i, checked_unit(i));
    for (int64_t i = 0; i < RUN; i++) ref[i] = direct_unit(&p, i, checked_unit(i));
    int64_t before = kiln_entity_count(p.w[0]);
    ck_assert_int_eq(logs[0].calls, 0); /* recording runs no hook */
    ASSERT_OK_IN(p.w[0], kiln_commands_apply(p.cmd, p.w[0], NULL));
    for (int64_t i = 0; i < RUN; i++) ck_assert_uint_eq(kiln_commands_resolve(p.cmd, ph[i]), ref[i]);
    assert_same_worlds(&p);
    static bool seen[RUN];
    memset(seen, 0, sizeof seen);
    for (int32_t c = 0; c < logs[0].calls; c++) {
        int64_t unit = logs[0].counts[c] - before; /* the spawns alive before it */
        ck_assert(unit >= 0 && unit < RUN && checked_unit(unit));
        seen[unit] = true;
    }
    for (int64_t i = 0; i < RUN; i++) ck_assert_msg(seen[i] == checked_unit(i), "unit %lld", (long long)i);
    free(ph);
    free(ref);
    pair_free(&p);
}

/* A despawn of a placeholder between spawns frees its slot for the very next spawn, and a
 * further add to a spawn's placeholder joins that spawn: the run stops at both. */
KILN_TEST(batch, commands_between_spawns_take_effect_in_order) {
    pair p;
    pair_make(&p, 0, NULL);
    kiln_entity ph[40], ref[40];
    for (int64_t i = 0; i < 40; i++) {
        ph[i] = record_unit(&p, i, i % 10 == 4);
        ref[i] = direct_unit(&p, i, i % 10 == 4);
        if (i % 10 == 9) { /* despawn an earlier one: the next spawn reuses its slot */
            ASSERT_OK_IN(p.w[0], kiln_commands_despawn(p.cmd, ph[i - 4]));
            ASSERT_OK_IN(p.w[1], kiln_despawn(p.w[1], ref[i - 4]));
        }
    }
    ASSERT_OK_IN(p.w[0], kiln_commands_apply(p.cmd, p.w[0], NULL));
    for (int64_t i = 0; i < 40; i++) {
        kiln_entity e = kiln_commands_resolve(p.cmd, ph[i]);
        ck_assert_uint_eq(e, ref[i]);
        if (i % 10 == 0 && i > 0) { /* took the slot of the despawned unit i - 5 */
            ck_assert_uint_eq(kiln_entity_index(e), kiln_entity_index(ref[i - 5]));
            ck_assert_uint_eq(kiln_entity_generation(e), kiln_entity_generation(ref[i - 5]) + 1);
        }
    }
    assert_same_worlds(&p);
    assert_same_next_handles(&p);
    pair_free(&p);
}

/* Refusing the apply's n-th allocation (archetype growth, a page of slots) stops the run
 * exactly where one by one stops: the world equals the spawns before it made directly, and
 * the next apply goes on to the world of all of them. */
KILN_TEST(batch, out_of_memory_in_the_middle_of_a_run_stops_where_one_by_one_stops) {
    int64_t failures = 0;
    for (int64_t n = 0;; n++) {
        ck_assert_int_lt(n, 64);
        pair p;
        pair_make(&p, 1, NULL);
        static kiln_entity ph[RUN], ref[RUN];
        for (int64_t i = 0; i < RUN; i++) ph[i] = record_unit(&p, i, false);
        test_allocator_fail_after(&p.alloc[0], n);
        int64_t applied = -1;
        kiln_result r = kiln_commands_apply(p.cmd, p.w[0], &applied);
        test_allocator_fail_never(&p.alloc[0]);
        if (r == KILN_OK) {
            ck_assert_int_eq(applied, 3 * RUN);
        } else {
            failures++;
            ck_assert_int_eq(r, KILN_ERR_OUT_OF_MEMORY);
            ck_assert_int_eq(applied % 3, 0); /* a spawn and its adds land together */
            ck_assert_int_eq(kiln_commands_count(p.cmd), 3 * RUN - applied);
            for (int64_t i = 0; i < applied / 3; i++) ref[i] = direct_unit(&p, i, false);
            /* (memory may differ: a failed page of slots leaves the page table it grew) */
            ck_assert_uint_eq(test_world_digest(p.w[0]), test_world_digest(p.w[1]));
            ck_assert_uint_eq(kiln_commands_resolve(p.cmd, ph[applied / 3]), KILN_NULL_ENTITY);
            int64_t rest = -1;
            ASSERT_OK_IN(p.w[0], kiln_commands_apply(p.cmd, p.w[0], &rest));
            ck_assert_int_eq(applied + rest, 3 * RUN);
            for (int64_t i = applied / 3; i < RUN; i++) ref[i] = direct_unit(&p, i, false);
        }
        if (r == KILN_OK)
            for (int64_t i = 0; i < RUN; i++) ref[i] = direct_unit(&p, i, false);
        for (int64_t i = 0; i < RUN; i++) ck_assert_uint_eq(kiln_commands_resolve(p.cmd, ph[i]), ref[i]);
        ck_assert_uint_eq(test_world_digest(p.w[0]), test_world_digest(p.w[1]));
        pair_free(&p);
        if (r == KILN_OK) break;
    }
    ck_assert_int_ge(failures, 5); /* column growths and a page of slots, mid-run */
}

/* ------------------------------------------------------------------------------------------ */
/* hooks                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static commands_fixture F;

static void setup(void) { commands_fixture_setup(&F); }

static void teardown(void) { commands_fixture_teardown(&F); }

KILN_TEST_GROUP_WITH(hooks, .setup = setup, .teardown = teardown);

/* Spawns of one shape with a move-hooked component are never copied bytewise: each value
 * goes through the move hook into its row, once. (The archetype has room from the start, so
 * no row moves in between.) */
KILN_TEST(hooks, spawns_with_a_move_hooked_component_move_each_value_into_the_world_once) {
    enum { N = 300 };
    kiln_entity gone[N], ph[N];
    for (int i = 0; i < N; i++) {
        test_owned v = test_owned_make(1000 + i);
        ASSERT_OK(kiln_spawn_with(F.w, (kiln_component[]){F.owned, F.pos},
                                  (const void *[]){&v, &(test_position){0, 0}}, 2, &gone[i]));
    }
    for (int i = 0; i < N; i++) ASSERT_OK(kiln_despawn(F.w, gone[i]));
    for (int i = 0; i < N; i++) {
        test_owned v = test_owned_make(1 + i);
        ASSERT_OK(kiln_commands_spawn(F.cmd, &ph[i]));
        ASSERT_OK(kiln_commands_add(F.cmd, ph[i], F.owned, &v));
        ASSERT_OK(kiln_commands_add(F.cmd, ph[i], F.pos, &(test_position){(float)i, 0}));
    }
    int64_t moved = F.log.moved;
    ASSERT_OK(kiln_commands_apply(F.cmd, F.w, NULL));
    ck_assert_int_eq(F.log.moved - moved, N);
    for (int i = 0; i < N; i++) {
        kiln_entity e = kiln_commands_resolve(F.cmd, ph[i]);
        ck_assert_uint_eq(kiln_entity_index(e), kiln_entity_index(gone[N - 1 - i])); /* free list */
        const test_owned *o = kiln_get(F.w, e, F.owned);
        ck_assert(o && o->id == 1 + i && *o->payload == 1 + i);
        test_assert_position(F.w, e, F.pos, (float)i, 0);
    }
}
