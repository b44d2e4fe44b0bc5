/* bench_core.c: the kiln core benchmark cases and their plain-C baselines.
 * Each side of a case does the same work on the same values, and the case checks that kiln
 * ended with the same data as the baseline, so a fast but wrong core cannot pass. */
#include "bench_core.h"
#include "bench_access.h"
#include "bench_systems.h"
#include "bench_transform.h"
#include "bench_children.h"
#include "bench_names.h"
#include "bench_named_load.h"
#include "bench_persist.h"

#include "bench_fixture.h"
#include "bench_measure.h"
#include "bench_util.h"
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* spawn_one, spawn_batch                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* With config->cold both sides of a spawn case start from a trimmed heap, so each pays
 * first-touch page faults for exactly the memory it uses, whichever side ran before. */
typedef struct spawn_ctx {
    case_state state;
    int64_t n;
    bool cold;
    uint64_t kiln_hash, baseline_hash;
    int64_t kiln_rows;
} spawn_ctx;

/* Untimed, after a kiln spawn: records what check compares. */
static void spawn_record(spawn_ctx *c, kiln_world *world, const component_ids *ids) {
    kiln_query_desc qd = {.with = {ids->position, ids->velocity}};
    kiln_query *query = bench_query_new(&c->state, world, &qd);
    if (query == NULL) return;
    c->kiln_hash = bench_query_position_hash(query, &c->kiln_rows);
    kiln_query_destroy(query);
    if (kiln_entity_count(world) != c->n)
        bench_fail(&c->state, "kiln_entity_count is %lld after spawning %lld",
             (long long)kiln_entity_count(world), (long long)c->n);
}

static double spawn_one_kiln(void *ctx) {
    spawn_ctx *c = ctx;
    component_ids ids;
    kiln_world *world = bench_world_new(&c->state, &ids);
    if (world == NULL) return 0.0;
    kiln_component comps[2] = {ids.position, ids.velocity};
    position p;
    velocity v;
    const void *const values[2] = {&p, &v};
    kiln_entity e = KILN_NULL_ENTITY, last = KILN_NULL_ENTITY;

    if (c->cold) bench_trim_heap();
    double t0 = bench_now_ns();
    for (int64_t i = 0; i < c->n; i++) {
        p = bench_position_at(i);
        v = bench_velocity_at(i);
        kiln_result r = kiln_spawn_with(world, comps, values, 2, &e);
        if (r != KILN_OK) {
            bench_check_call(&c->state, world, r, "kiln_spawn_with");
            break;
        }
        last ^= e;
    }
    double t1 = bench_now_ns();

    bench_consume(last);
    if (c->state.verify) spawn_record(c, world, &ids);
    kiln_world_destroy(world);
    return t1 - t0;
}

/* The baseline of both spawn cases: presized arrays, allocated and filled. */
static double spawn_baseline(void *ctx) {
    spawn_ctx *c = ctx;
    if (c->cold) bench_trim_heap();
    double t0 = bench_now_ns();
    position *p = malloc((size_t)c->n * sizeof *p);
    velocity *v = malloc((size_t)c->n * sizeof *v);
    if (p == NULL || v == NULL) {
        fprintf(stderr, "core_bench: out of memory\n");
        exit(2);
    }
    bench_fill2(p, v, 0, c->n);
    double t1 = bench_now_ns();

    bench_consume(bench_float_bits(p[c->n - 1].x) ^ bench_float_bits(v[c->n / 2].x));
    if (c->state.verify) c->baseline_hash = bench_array_position_hash(p, c->n);
    free(p);
    free(v);
    return t1 - t0;
}

static double spawn_batch_kiln(void *ctx) {
    spawn_ctx *c = ctx;
    component_ids ids;
    kiln_world *world = bench_world_new(&c->state, &ids);
    if (world == NULL) return 0.0;
    kiln_component comps[2] = {ids.position, ids.velocity};
    /* Systems create their queries up front; the query is matched when the archetype
     * appears, which is part of the timed spawn. */
    kiln_query_desc qd = {.with = {ids.position, ids.velocity}};
    kiln_query *query = bench_query_new(&c->state, world, &qd);
    if (query == NULL) {
        kiln_world_destroy(world);
        return 0.0;
    }

    if (c->cold) bench_trim_heap();
    double t0 = bench_now_ns();
    kiln_result r = kiln_spawn_batch(world, comps, 2, (int32_t)c->n, NULL);
    if (r == KILN_OK) bench_query_fill2(query);
    double t1 = bench_now_ns();

    bench_check_call(&c->state, world, r, "kiln_spawn_batch");
    if (c->state.verify) spawn_record(c, world, &ids);
    kiln_world_destroy(world);
    return t1 - t0;
}

static bool spawn_check(void *ctx) {
    spawn_ctx *c = ctx;
    if (c->kiln_rows != c->n)
        return bench_fail(&c->state, "the query visited %lld rows, expected %lld",
                    (long long)c->kiln_rows, (long long)c->n);
    if (c->kiln_hash != c->baseline_hash)
        return bench_fail(&c->state, "spawned positions differ from the baseline");
    return true;
}

static void run_spawn_one(const bench_config *config, bench_result *dest) {
    spawn_ctx c = {.n = config->entities, .cold = config->cold};
    bench_measure(config, &c, spawn_one_kiln, spawn_baseline, spawn_check, 1, (double)c.n, dest);
}

static void run_spawn_batch(const bench_config *config, bench_result *dest) {
    spawn_ctx c = {.n = config->entities, .cold = config->cold};
    bench_measure(config, &c, spawn_batch_kiln, spawn_baseline, spawn_check, 1, (double)c.n, dest);
}

/* ------------------------------------------------------------------------------------------ */
/* iter2, iter3, iter_frag, iter2_mark                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef enum iter_kind { ITER2, ITER3, ITER_FRAG, ITER2_MARK, ITER2_MARK_EACH } iter_kind;

typedef struct iter_ctx {
    case_state state;
    iter_kind kind;
    int64_t n;
    int passes;              /* passes over all entities per timed sample */
    kiln_world *world;
    component_ids ids;
    kiln_query *query;
    /* baseline: one table per archetype (one for all but iter_frag) */
    int tables;
    int64_t rows[FRAG_ARCHETYPES];
    position *pos[FRAG_ARCHETYPES];
    velocity *vel[FRAG_ARCHETYPES];
    mass *mas[FRAG_ARCHETYPES];
} iter_ctx;

BENCH_NOINLINE static void iter2_kiln_pass(kiln_query *query) {
    kiln_iter it;
    kiln_query_iter(query, &it);
    while (kiln_query_next(&it))
        bench_integrate2(kiln_iter_column(&it, 0), kiln_iter_column(&it, 1), it.count);
}

BENCH_NOINLINE static void iter3_kiln_pass(kiln_query *query) {
    kiln_iter it;
    kiln_query_iter(query, &it);
    while (kiln_query_next(&it))
        bench_integrate3(kiln_iter_column(&it, 0), kiln_iter_column(&it, 1),
                   kiln_iter_column(&it, 2), it.count);
}

/* A system that writes every row of a chunk: the same kernel, then one mark of its rows. */
BENCH_NOINLINE static void iter2_mark_kiln_pass(kiln_query *query) {
    kiln_iter it;
    kiln_query_iter(query, &it);
    while (kiln_query_next(&it)) {
        bench_integrate2(kiln_iter_column(&it, 0), kiln_iter_column(&it, 1), it.count);
        kiln_iter_mark_rows(&it, 0, 0, it.count);
    }
}

/* iter2_mark_each: the mark inline in the user's loop, one a row (a loop that writes only
 * some rows marks them this way). */
BENCH_NOINLINE static void iter2_mark_each_kiln_pass(kiln_query *query) {
    kiln_iter it;
    kiln_query_iter(query, &it);
    while (kiln_query_next(&it)) {
        position *p = kiln_iter_column(&it, 0);
        const velocity *v = kiln_iter_column(&it, 1);
        for (int32_t i = 0; i < it.count; i++) {
            p[i].x += v[i].x;
            p[i].y += v[i].y;
            kiln_iter_mark_changed(&it, 0, i);
        }
    }
}

BENCH_NOINLINE static void iter2_baseline_pass(iter_ctx *c) {
    for (int t = 0; t < c->tables; t++) bench_integrate2(c->pos[t], c->vel[t], c->rows[t]);
}

BENCH_NOINLINE static void iter3_baseline_pass(iter_ctx *c) {
    for (int t = 0; t < c->tables; t++) bench_integrate3(c->pos[t], c->vel[t], c->mas[t], c->rows[t]);
}

static void iter_kiln_pass(iter_ctx *c) {
    switch (c->kind) {
    case ITER2:
    case ITER_FRAG: iter2_kiln_pass(c->query); break;
    case ITER3: iter3_kiln_pass(c->query); break;
    case ITER2_MARK:
        kiln_tick_advance(c->world);
        iter2_mark_kiln_pass(c->query);
        break;
    case ITER2_MARK_EACH:
        kiln_tick_advance(c->world);
        iter2_mark_each_kiln_pass(c->query);
        break;
    }
}

static void iter_baseline_pass(iter_ctx *c) {
    if (c->kind == ITER3)
        iter3_baseline_pass(c);
    else
        iter2_baseline_pass(c);
}

/* One timed pass each; measure interleaves the passes of the two sides. */
static double iter_kiln(void *ctx) {
    iter_ctx *c = ctx;
    double t0 = bench_now_ns();
    iter_kiln_pass(c);
    return bench_now_ns() - t0;
}

static double iter_baseline(void *ctx) {
    iter_ctx *c = ctx;
    double t0 = bench_now_ns();
    iter_baseline_pass(c);
    return bench_now_ns() - t0;
}

/* Kiln and the baseline ran the same passes on the same values, so the positions must be
 * bitwise the same multiset; iter2_mark must also have stamped every row. */
static bool iter_check(void *ctx) {
    iter_ctx *c = ctx;
    int64_t rows = 0;
    uint64_t kiln_hash = bench_query_position_hash(c->query, &rows);
    uint64_t baseline_hash = 0;
    for (int t = 0; t < c->tables; t++) baseline_hash += bench_array_position_hash(c->pos[t], c->rows[t]);
    if (rows != c->n)
        return bench_fail(&c->state, "the query visited %lld rows, expected %lld", (long long)rows,
                    (long long)c->n);
    if (kiln_hash != baseline_hash)
        return bench_fail(&c->state, "positions after iterating differ from the baseline");
    if (c->kind == ITER2_MARK || c->kind == ITER2_MARK_EACH) {
        kiln_tick now = kiln_tick_current(c->world);
        kiln_iter it;
        int64_t stale = 0;
        kiln_query_iter(c->query, &it);
        while (kiln_query_next(&it)) {
            if (kiln_iter_column_tick(&it, 0) != now) stale += it.count;
            for (int32_t i = 0; i < it.count; i++)
                if (!kiln_iter_changed_since(&it, 0, i, now - 1)) stale++;
        }
        if (stale != 0)
            return bench_fail(&c->state, "%lld rows or chunk ticks not marked at tick %u",
                        (long long)stale, (unsigned)now);
    }
    return true;
}

static void iter_setup_baseline(iter_ctx *c) {
    int64_t first = 0;
    for (int t = 0; t < c->tables; t++) {
        int64_t rows = c->n / c->tables + (t < c->n % c->tables ? 1 : 0);
        c->rows[t] = rows;
        c->pos[t] = bench_xmalloc((size_t)rows * sizeof(position));
        c->vel[t] = bench_xmalloc((size_t)rows * sizeof(velocity));
        bench_fill2(c->pos[t], c->vel[t], first, rows);
        if (c->kind == ITER3) {
            c->mas[t] = bench_xmalloc((size_t)rows * sizeof(mass));
            for (int64_t i = 0; i < rows; i++) c->mas[t][i] = bench_mass_at(first + i);
        }
        first += rows;
    }
}

static bool iter_setup_kiln(iter_ctx *c) {
    c->world = bench_world_new(&c->state, &c->ids);
    if (c->world == NULL) return false;
    kiln_query_desc qd = {.with = {c->ids.position, c->ids.velocity}};
    if (c->kind == ITER3) qd.with[2] = c->ids.mass;
    c->query = bench_query_new(&c->state, c->world, &qd);
    if (c->query == NULL) return false;

    kiln_component comps[2 + TAG_COUNT + 1] = {c->ids.position, c->ids.velocity};
    for (int t = 0; t < c->tables; t++) {
        int32_t count = 2;
        if (c->kind == ITER3) comps[count++] = c->ids.mass;
        for (int bit = 0; bit < TAG_COUNT && c->kind == ITER_FRAG; bit++)
            if (t & (1 << bit)) comps[count++] = c->ids.tags[bit];
        if (!bench_check_call(&c->state, c->world,
                        kiln_spawn_batch(c->world, comps, count, (int32_t)c->rows[t], NULL),
                        "kiln_spawn_batch"))
            return false;
    }
    /* Values follow the query's row order. iter_check compares multisets, which holds because
     * both sides give the g-th row bench_position_at(g), bench_velocity_at(g) and bench_mass_at(g). */
    kiln_iter it;
    int64_t next = 0;
    kiln_query_iter(c->query, &it);
    while (kiln_query_next(&it)) {
        bench_fill2(kiln_iter_column(&it, 0), kiln_iter_column(&it, 1), next, it.count);
        if (c->kind == ITER3) {
            mass *m = kiln_iter_column(&it, 2);
            for (int32_t i = 0; i < it.count; i++) m[i] = bench_mass_at(next + i);
        }
        next += it.count;
    }
    if (next != c->n)
        return bench_fail(&c->state, "the query visited %lld rows after spawning %lld",
                    (long long)next, (long long)c->n);
    if (c->kind == ITER_FRAG) {
        kiln_world_stats stats;
        kiln_world_stats_get(c->world, &stats);
        if (stats.archetypes < FRAG_ARCHETYPES)
            return bench_fail(&c->state, "only %d archetypes after spawning into %d",
                        (int)stats.archetypes, FRAG_ARCHETYPES);
    }
    return true;
}

static void run_iter(const bench_config *config, bench_result *dest, iter_kind kind) {
    iter_ctx *c = bench_xcalloc(1, sizeof *c);
    c->kind = kind;
    c->n = config->entities;
    c->tables = kind == ITER_FRAG ? FRAG_ARCHETYPES : 1;
    /* About 16M entity updates per sample (16 passes at 1M): over 10 ms, well above timer
     * and scheduler noise. */
    c->passes = (int)(16000000 / c->n);
    if (c->passes < 1) c->passes = 1;
    iter_setup_baseline(c);
    if (iter_setup_kiln(c))
        bench_measure(config, c, iter_kiln, iter_baseline, iter_check, c->passes,
                (double)c->n * c->passes, dest);
    else
        bench_setup_failed(&c->state, dest);
    kiln_query_destroy(c->query);
    kiln_world_destroy(c->world);
    for (int t = 0; t < c->tables; t++) {
        free(c->pos[t]);
        free(c->vel[t]);
        free(c->mas[t]);
    }
    free(c);
}

static void run_iter2(const bench_config *config, bench_result *dest) {
    run_iter(config, dest, ITER2);
}

static void run_iter3(const bench_config *config, bench_result *dest) {
    run_iter(config, dest, ITER3);
}

static void run_iter_frag(const bench_config *config, bench_result *dest) {
    run_iter(config, dest, ITER_FRAG);
}

static void run_iter2_mark(const bench_config *config, bench_result *dest) {
    run_iter(config, dest, ITER2_MARK);
}

static void run_iter2_mark_each(const bench_config *config, bench_result *dest) {
    run_iter(config, dest, ITER2_MARK_EACH);
}

/* ------------------------------------------------------------------------------------------ */
/* add_remove                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* The plain-C equivalent of two archetypes: struct-of-arrays tables and an index from entity
 * to (table, row), kept right across swap-removes through each table's entity column. */
typedef struct plain_location {
    uint32_t table;
    uint32_t row;
} plain_location;

typedef struct add_remove_ctx {
    case_state state;
    int64_t n;
    kiln_world *world;
    component_ids ids;
    kiln_entity *handles;
    kiln_query *query;
    plain_table tables[2];
    plain_location *where;
} add_remove_ctx;

/* Moves entity id from its table to table dst (appending), swap-removing the hole. */
static inline void plain_move(plain_table *tables, plain_location *where, uint32_t id,
                              uint32_t dst_index, const mass *value) {
    plain_location from = where[id];
    plain_table *src = &tables[from.table], *dst = &tables[dst_index];
    int64_t d = dst->count++;
    dst->entity[d] = id;
    dst->pos[d] = src->pos[from.row];
    dst->vel[d] = src->vel[from.row];
    if (dst->mas != NULL) dst->mas[d] = value != NULL ? *value : src->mas[from.row];
    int64_t last = --src->count;
    if (from.row != last) {
        uint32_t moved = src->entity[last];
        src->entity[from.row] = moved;
        src->pos[from.row] = src->pos[last];
        src->vel[from.row] = src->vel[last];
        if (src->mas != NULL) src->mas[from.row] = src->mas[last];
        where[moved].row = from.row;
    }
    where[id] = (plain_location){dst_index, (uint32_t)d};
}

static double add_remove_kiln(void *ctx) {
    add_remove_ctx *c = ctx;
    kiln_world *world = c->world;
    kiln_component mass_id = c->ids.mass;

    double t0 = bench_now_ns();
    for (int64_t i = 0; i < c->n; i++) {
        mass m = bench_mass_at(i);
        kiln_result r = kiln_add(world, c->handles[i], mass_id, &m);
        if (r != KILN_OK) {
            bench_check_call(&c->state, world, r, "kiln_add");
            return 0.0;
        }
    }
    double t1 = bench_now_ns();

    if (c->state.verify) {
        for (int64_t i = 0; i < c->n; i++) {
            const mass *m = kiln_get(world, c->handles[i], mass_id);
            if (m == NULL || m->m != bench_mass_at(i).m) {
                bench_fail(&c->state, "entity %lld has no Mass or a wrong one after kiln_add",
                     (long long)i);
                break;
            }
        }
    }

    double t2 = bench_now_ns();
    for (int64_t i = 0; i < c->n; i++) {
        kiln_result r = kiln_remove(world, c->handles[i], mass_id, NULL);
        if (r != KILN_OK) {
            bench_check_call(&c->state, world, r, "kiln_remove");
            return 0.0;
        }
    }
    double t3 = bench_now_ns();

    if (c->state.verify) {
        for (int64_t i = 0; i < c->n; i++) {
            if (kiln_has(world, c->handles[i], mass_id)) {
                bench_fail(&c->state, "entity %lld still has Mass after kiln_remove", (long long)i);
                break;
            }
        }
    }
    return (t1 - t0) + (t3 - t2);
}

static double add_remove_baseline(void *ctx) {
    add_remove_ctx *c = ctx;
    double t0 = bench_now_ns();
    for (int64_t i = 0; i < c->n; i++) {
        mass m = bench_mass_at(i);
        plain_move(c->tables, c->where, (uint32_t)i, 1, &m);
    }
    for (int64_t i = 0; i < c->n; i++) plain_move(c->tables, c->where, (uint32_t)i, 0, NULL);
    double t1 = bench_now_ns();
    bench_consume((uint64_t)c->tables[0].count ^ c->where[c->n / 2].row);
    return t1 - t0;
}

static bool add_remove_check(void *ctx) {
    add_remove_ctx *c = ctx;
    int64_t rows = 0;
    uint64_t kiln_hash = bench_query_position_hash(c->query, &rows);
    uint64_t baseline_hash = bench_array_position_hash(c->tables[0].pos, c->tables[0].count);
    if (rows != c->n || c->tables[0].count != c->n)
        return bench_fail(&c->state, "%lld kiln rows and %lld baseline rows, expected %lld",
                    (long long)rows, (long long)c->tables[0].count, (long long)c->n);
    if (kiln_hash != baseline_hash)
        return bench_fail(&c->state, "positions after add/remove differ from the baseline");
    return true;
}

static void run_add_remove(const bench_config *config, bench_result *dest) {
    add_remove_ctx *c = bench_xcalloc(1, sizeof *c);
    c->n = config->small_entities;
    c->handles = bench_xmalloc((size_t)c->n * sizeof *c->handles);
    c->where = bench_xmalloc((size_t)c->n * sizeof *c->where);
    for (int t = 0; t < 2; t++) {
        c->tables[t].entity = bench_xmalloc((size_t)c->n * sizeof(uint32_t));
        c->tables[t].pos = bench_xmalloc((size_t)c->n * sizeof(position));
        c->tables[t].vel = bench_xmalloc((size_t)c->n * sizeof(velocity));
    }
    c->tables[1].mas = bench_xmalloc((size_t)c->n * sizeof(mass));
    bench_fill2(c->tables[0].pos, c->tables[0].vel, 0, c->n);
    for (int64_t i = 0; i < c->n; i++) {
        c->tables[0].entity[i] = (uint32_t)i;
        c->where[i] = (plain_location){0, (uint32_t)i};
    }
    c->tables[0].count = c->n;

    c->world = bench_world_new(&c->state, &c->ids);
    kiln_query_desc qd = {.with = {c->ids.position, c->ids.velocity}};
    if (c->world != NULL && bench_spawn_filled(&c->state, c->world, &c->ids, c->n, c->handles)
        && (c->query = bench_query_new(&c->state, c->world, &qd)) != NULL)
        bench_measure(config, c, add_remove_kiln, add_remove_baseline, add_remove_check, 1,
                2.0 * (double)c->n, dest);
    else
        bench_setup_failed(&c->state, dest);

    kiln_query_destroy(c->query);
    kiln_world_destroy(c->world);
    for (int t = 0; t < 2; t++) {
        free(c->tables[t].entity);
        free(c->tables[t].pos);
        free(c->tables[t].vel);
        free(c->tables[t].mas);
    }
    free(c->where);
    free(c->handles);
    free(c);
}


/* ------------------------------------------------------------------------------------------ */
/* The case table                                                                             */
/* ------------------------------------------------------------------------------------------ */

static const bench_case cases[] = {
    {"spawn_one", BENCH_NS_PER_ENTITY, 11.0, false,
     "kiln_spawn_with(Position, Velocity) one at a time vs malloc + fill of presized arrays",
     run_spawn_one},
    {"spawn_batch", BENCH_NS_PER_ENTITY, 3.0, false,
     "kiln_spawn_batch + fill through a query vs malloc + fill of presized arrays",
     run_spawn_batch},
    {"iter2", BENCH_NS_PER_ENTITY, 1.05, false,
     "query Position += Velocity vs the same loop over two arrays", run_iter2},
    {"iter3", BENCH_NS_PER_ENTITY, 1.05, false,
     "query Position += Velocity * Mass vs the same loop over three arrays", run_iter3},
    {"iter_frag", BENCH_NS_PER_ENTITY, 1.05, false,
     "iter2 over 64 archetypes (tags) vs the same loop over 64 array pairs", run_iter_frag},
    {"iter2_mark", BENCH_NS_PER_ENTITY, 1.25, false,
     "iter2 + kiln_iter_mark_rows per chunk vs the plain loop without tick stores",
     run_iter2_mark},
    {"iter2_mark_each", BENCH_NS_PER_ENTITY, 0.0, false,
     "(info) iter2 + kiln_iter_mark_changed per row inline vs the plain loop without tick stores",
     run_iter2_mark_each},
    {"add_remove", BENCH_NS_PER_OP, 3.0, false,
     "kiln_add then kiln_remove Mass vs a row move between two SoA tables and back",
     run_add_remove},
    {"get_random", BENCH_NS_PER_ENTITY, 1.5, false,
     "kiln_get_many Position, 256 shuffled handles a call, vs sparse index -> dense array",
     run_get_random},
    {"get_single", BENCH_NS_PER_ENTITY, 0.0, false,
     "(info) get_random through one kiln_get call per handle vs sparse index -> dense array",
     run_get_single},
    {"set_single", BENCH_NS_PER_ENTITY, 0.0, false,
     "(info) one kiln_set of Position per shuffled handle vs a write through sparse index -> dense array",
     run_set_single},
    {"get_prepared", BENCH_NS_PER_ENTITY, 1.2, false,
     "get_random through a prepared kiln_getter (inline) vs sparse index -> dense array",
     run_get_prepared},
    {"get_prepared_many", BENCH_NS_PER_ENTITY, 0.0, false,
     "(info) get_random through kiln_getter_get_many, 256 handles a call, vs sparse index -> dense array",
     run_get_prepared_many},
    {"despawn", BENCH_NS_PER_ENTITY, 5.0, false,
     "kiln_despawn in spawn order vs swap-remove with index fix-up", run_despawn},
    {"bytes_per_entity", BENCH_BYTES_PER_ENTITY, 40.0, true,
     "RSS delta per Position+Velocity entity (empty world -> n) vs 16 bytes of data", run_bytes_per_entity},
    {"cmd_spawn", BENCH_NS_PER_ENTITY, 1.5, false,
     "record (kiln_commands_spawn_with) + apply spawn with Position, Velocity (100k) vs kiln_spawn_with",
     run_cmd_spawn},
    {"cmd_spawn_calls", BENCH_NS_PER_ENTITY, 0.0, false,
     "(info) cmd_spawn recorded as kiln_commands_spawn and two kiln_commands_add", run_cmd_spawn_calls},
    {"cmd_add_remove", BENCH_NS_PER_OP, 1.5, false,
     "record + apply add+remove Mass (100k pairs) vs kiln_add + kiln_remove", run_cmd_add_remove},
    {"sched_overhead", BENCH_NS_PER_OP, 1000.0, false,
     "ns per trivial system per frame, 100 systems, inline vs calling them directly", run_sched_overhead},
    {"sched_parallel", BENCH_NS_PER_OP, 0.59, false,
     "two independent heavy systems on 2 threads (1 worker + caller) vs the same run inline",
     run_sched_parallel},
    {"parallel_for", BENCH_NS_PER_ENTITY, 0.59, false,
     "one heavy loop over 1M rows split across 2 threads vs inline", run_parallel_for},
    {"propagate_roots", BENCH_NS_PER_ENTITY, 1.3, false,
     "propagation, 100k moving roots vs a plain cglm compose loop (quat_mat4, scale, translation)",
     run_propagate_roots},
    {"propagate_changed", BENCH_NS_PER_ENTITY, 1.5, false,
     "propagation, 100k in trees 4 deep, every local changed vs the compose loop level by level",
     run_propagate_changed},
    {"propagate_parallel", BENCH_NS_PER_ENTITY, 0.6, false,
     "propagate_roots on 2 threads (1 worker + the caller) vs the same propagation inline",
     run_propagate_parallel},
    {"propagate_unchanged", BENCH_NS_PER_ENTITY, 0.3, false,
     "propagation with nothing changed vs the compose loop level by level over 100k",
     run_propagate_unchanged},
    {"save_binary", BENCH_NS_PER_ENTITY, 3.0, false,
     "kiln_save binary, 100k entities (4 components, entity field, Parents) vs memcpy of their bytes",
     run_save_binary},
    {"load_binary", BENCH_NS_PER_ENTITY, 3.0, false,
     "kiln_load of that save into a fresh world vs memcpy of the same bytes", run_load_binary},
    {"save_json", BENCH_NS_PER_ENTITY, 1.5, false,
     "kiln_save JSON vs the same values from plain arrays through jansson", run_save_json},
    {"load_json", BENCH_NS_PER_ENTITY, 1.5, false,
     "kiln_load JSON into a fresh world vs jansson parsing it into plain arrays", run_load_json},
    {"snapshot", BENCH_NS_PER_ENTITY, 2.0, false,
     "kiln_snapshot_update of that world vs memcpy of the snapshot's bytes", run_snapshot},
    {"restore", BENCH_NS_PER_ENTITY, 2.0, false,
     "kiln_snapshot_restore vs memcpy of the snapshot's bytes", run_restore},
    {"world_hash", BENCH_NS_PER_ENTITY, 2.0, false,
     "kiln_world_hash vs XXH3 over the same component bytes and handles laid out contiguously",
     run_world_hash},
    {"name_spawn", BENCH_NS_PER_ENTITY, 2.0, false,
     "a frame of 1000 spawns with a Name among 100k named vs unchecked spawns, each name entered "
     "in a plain hash set first", run_name_spawn},
    {"load_named_first", BENCH_NS_PER_ENTITY, 1.5, false,
     "kiln_load of 100k named entities (binary) into a world without Name vs the same load into one "
     "with Name", run_load_named_first},
    {"tree_spawn", BENCH_NS_PER_ENTITY, 2.0, false,
     "a frame of 250 trees (a root, 3 children) spawned among 100k in trees, each root's children "
     "looked up at once, vs unchecked links and a plain array of each root's children", run_tree_spawn},
};

const bench_case *bench_cases(int *count) {
    *count = (int)(sizeof cases / sizeof cases[0]);
    return cases;
}

const bench_case *bench_case_find(const char *name) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(cases[i].name, name) == 0) return &cases[i];
    return NULL;
}
