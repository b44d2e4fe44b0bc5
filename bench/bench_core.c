/* bench_core.c: the kiln core benchmark cases and their plain-C baselines.
 * Each side of a case does the same work on the same values, and the case checks that kiln
 * ended with the same data as the baseline, so a fast but wrong core cannot pass. */
#include "bench_core.h"
#include "bench_systems.h"

#include "bench_util.h"
#include "kiln.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Components and values                                                                      */
/* ------------------------------------------------------------------------------------------ */

typedef struct position { float x, y; } position;
typedef struct velocity { float x, y; } velocity;
typedef struct mass { float m; } mass;

#define TAG_COUNT 6 /* 2^6 = 64 archetypes for iter_frag */
#define FRAG_ARCHETYPES (1 << TAG_COUNT)

typedef struct component_ids {
    kiln_component position;
    kiln_component velocity;
    kiln_component mass;
    kiln_component tags[TAG_COUNT];
} component_ids;

/* Cheap to compute, so the value arithmetic does not dilute the spawn ratios, and exact in
 * float for the entity counts used here. */
static inline position position_at(int64_t i) {
    return (position){(float)i, (float)i * 0.5f};
}

static inline velocity velocity_at(int64_t i) {
    return (velocity){(float)(i & 7) * 0.25f, 0.5f};
}

static inline mass mass_at(int64_t i) {
    return (mass){1.0f + (float)(i & 3) * 0.5f};
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* A hash of one position; summed over a set it is independent of row order. */
static uint64_t position_hash(const position *p) {
    return mix64((uint64_t)float_bits(p->x) | (uint64_t)float_bits(p->y) << 32);
}

/* ------------------------------------------------------------------------------------------ */
/* Kernels shared by kiln and the baseline: out of line, so both call the same code and only  */
/* the storage around them differs.                                                          */
/* ------------------------------------------------------------------------------------------ */

BENCH_NOINLINE static void fill2(position *restrict p, velocity *restrict v, int64_t first,
                                 int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        p[i] = position_at(first + i);
        v[i] = velocity_at(first + i);
    }
}

BENCH_NOINLINE static void integrate2(position *restrict p, const velocity *restrict v,
                                      int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        p[i].x += v[i].x;
        p[i].y += v[i].y;
    }
}

BENCH_NOINLINE static void integrate3(position *restrict p, const velocity *restrict v,
                                      const mass *restrict m, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        p[i].x += v[i].x * m[i].m;
        p[i].y += v[i].y * m[i].m;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Case state, failures and the measuring loop                                                */
/* ------------------------------------------------------------------------------------------ */

/* The first member of every case context. */
typedef struct case_state {
    bool verify;   /* this run is the untimed warm-up: record what check() compares */
    bool failed;
    char failure[200];
} case_state;

static bool fail(case_state *state, const char *format, ...) {
    if (!state->failed) {
        va_list args;
        va_start(args, format);
        vsnprintf(state->failure, sizeof state->failure, format, args);
        va_end(args);
        state->failed = true;
    }
    return false;
}

static bool check_call(case_state *state, const kiln_world *world, kiln_result result,
                       const char *call) {
    if (result == KILN_OK) return true;
    return fail(state, "%s: %s (%s)", call, kiln_result_name(result),
                world != NULL ? kiln_world_error(world) : "no world");
}

typedef double (*sample_fn)(void *ctx);
typedef bool (*check_fn)(void *ctx);

static void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count, size);
    if (p == NULL) {
        fprintf(stderr, "core_bench: out of memory\n");
        exit(2);
    }
    return p;
}

static void *xmalloc(size_t size) {
    void *p = malloc(size);
    if (p == NULL) {
        fprintf(stderr, "core_bench: out of memory\n");
        exit(2);
    }
    return p;
}

static double relative_spread(const double *sorted, int count, double median) {
    if (count < 2 || median <= 0.0) return 0.0;
    return (sorted[count - 1] - sorted[0]) / median;
}

/* Runs each side once untimed (the warm-up, with verify set, then check), then
 * config->reps timed samples of each side. A sample is the sum of `inner` timed runs, and
 * the runs of the two sides interleave one by one, swapping which goes first each time, so
 * noise and cache state on the shared machine hit both sides alike. Samples are divided by
 * units (entities or operations per sample). */
static void measure(const bench_config *config, void *ctx, sample_fn kiln, sample_fn baseline,
                    check_fn check, int inner, double units, bench_result *dest) {
    case_state *state = ctx;
    double k[BENCH_MAX_REPS], b[BENCH_MAX_REPS];
    int reps = config->reps < 1 ? 1 : config->reps > BENCH_MAX_REPS ? BENCH_MAX_REPS : config->reps;

    state->verify = true;
    kiln(ctx);
    baseline(ctx);
    state->verify = false;
    if (!state->failed && check != NULL) check(ctx);

    int done = 0, turn = 0;
    for (int r = 0; r < reps && !state->failed; r++) {
        double kt = 0.0, bt = 0.0;
        for (int j = 0; j < inner; j++, turn++) {
            if (turn % 2 == 0) {
                kt += kiln(ctx);
                bt += baseline(ctx);
            } else {
                bt += baseline(ctx);
                kt += kiln(ctx);
            }
        }
        k[r] = kt / units;
        b[r] = bt / units;
        if (config->verbose)
            fprintf(stderr, "  rep %d: kiln %.3f baseline %.3f\n", r, k[r], b[r]);
        done++;
    }
    if (!state->failed && check != NULL) check(ctx);

    dest->ns = bench_median(k, done);
    dest->spread = relative_spread(k, done, dest->ns);
    dest->baseline_ns = bench_median(b, done);
    dest->baseline_spread = relative_spread(b, done, dest->baseline_ns);
    dest->ratio = dest->baseline_ns > 0.0 ? dest->ns / dest->baseline_ns : 0.0;
    dest->ok = !state->failed;
    snprintf(dest->failure, sizeof dest->failure, "%s", state->failure);
}

/* A case whose setup failed reports why and no numbers. */
static void setup_failed(const case_state *state, bench_result *dest) {
    dest->ok = false;
    snprintf(dest->failure, sizeof dest->failure, "%s", state->failure);
}

/* ------------------------------------------------------------------------------------------ */
/* World helpers                                                                              */
/* ------------------------------------------------------------------------------------------ */

static kiln_world *world_new(case_state *state, component_ids *ids) {
    kiln_world *world = kiln_world_create(NULL);
    if (world == NULL) {
        fail(state, "kiln_world_create returned NULL");
        return NULL;
    }
    static const char *const tag_names[TAG_COUNT] = {"Tag0", "Tag1", "Tag2",
                                                     "Tag3", "Tag4", "Tag5"};
    kiln_component_desc desc = {.name = "Position", .size = sizeof(position)};
    bool ok = check_call(state, world, kiln_component_register(world, &desc, &ids->position),
                         "kiln_component_register(Position)");
    desc = (kiln_component_desc){.name = "Velocity", .size = sizeof(velocity)};
    ok = ok && check_call(state, world, kiln_component_register(world, &desc, &ids->velocity),
                          "kiln_component_register(Velocity)");
    desc = (kiln_component_desc){.name = "Mass", .size = sizeof(mass)};
    ok = ok && check_call(state, world, kiln_component_register(world, &desc, &ids->mass),
                          "kiln_component_register(Mass)");
    for (int t = 0; t < TAG_COUNT && ok; t++) {
        desc = (kiln_component_desc){.name = tag_names[t], .size = 0};
        ok = check_call(state, world, kiln_component_register(world, &desc, &ids->tags[t]),
                        "kiln_component_register(tag)");
    }
    if (!ok) {
        kiln_world_destroy(world);
        return NULL;
    }
    return world;
}

static kiln_query *query_new(case_state *state, kiln_world *world, const kiln_query_desc *desc) {
    kiln_query *query = NULL;
    if (!check_call(state, world, kiln_query_create(world, desc, &query), "kiln_query_create"))
        return NULL;
    return query;
}

/* Writes position_at/velocity_at of a running counter into every row the query (with
 * Position and Velocity as terms 0 and 1) visits. */
static void query_fill2(kiln_query *query) {
    kiln_iter it;
    int64_t next = 0;
    kiln_query_iter(query, &it);
    while (kiln_query_next(&it)) {
        fill2(kiln_iter_column(&it, 0), kiln_iter_column(&it, 1), next, it.count);
        next += it.count;
    }
}

/* Sum of position_hash over the query's term 0, and the rows visited. */
static uint64_t query_position_hash(kiln_query *query, int64_t *rows) {
    kiln_iter it;
    uint64_t sum = 0;
    int64_t seen = 0;
    kiln_query_iter(query, &it);
    while (kiln_query_next(&it)) {
        const position *p = kiln_iter_column(&it, 0);
        for (int32_t i = 0; i < it.count; i++) sum += position_hash(&p[i]);
        seen += it.count;
    }
    *rows = seen;
    return sum;
}

static uint64_t array_position_hash(const position *p, int64_t count) {
    uint64_t sum = 0;
    for (int64_t i = 0; i < count; i++) sum += position_hash(&p[i]);
    return sum;
}

/* Spawns n Position+Velocity entities with one batch and sets position_at(i)/velocity_at(i)
 * on the i-th handle, writing the handles to handles. */
static bool spawn_filled(case_state *state, kiln_world *world, const component_ids *ids,
                         int64_t n, kiln_entity *handles) {
    kiln_component comps[2] = {ids->position, ids->velocity};
    bool ok = check_call(state, world, kiln_spawn_batch(world, comps, 2, (int32_t)n, handles),
                         "kiln_spawn_batch");
    for (int64_t i = 0; ok && i < n; i++) {
        position p = position_at(i);
        velocity v = velocity_at(i);
        ok = check_call(state, world, kiln_set(world, handles[i], ids->position, &p), "kiln_set")
             && check_call(state, world, kiln_set(world, handles[i], ids->velocity, &v),
                           "kiln_set");
    }
    return ok;
}

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
    kiln_query *query = query_new(&c->state, world, &qd);
    if (query == NULL) return;
    c->kiln_hash = query_position_hash(query, &c->kiln_rows);
    kiln_query_destroy(query);
    if (kiln_entity_count(world) != c->n)
        fail(&c->state, "kiln_entity_count is %lld after spawning %lld",
             (long long)kiln_entity_count(world), (long long)c->n);
}

static double spawn_one_kiln(void *ctx) {
    spawn_ctx *c = ctx;
    component_ids ids;
    kiln_world *world = world_new(&c->state, &ids);
    if (world == NULL) return 0.0;
    kiln_component comps[2] = {ids.position, ids.velocity};
    position p;
    velocity v;
    const void *const values[2] = {&p, &v};
    kiln_entity e = KILN_NULL_ENTITY, last = KILN_NULL_ENTITY;

    if (c->cold) bench_trim_heap();
    double t0 = bench_now_ns();
    for (int64_t i = 0; i < c->n; i++) {
        p = position_at(i);
        v = velocity_at(i);
        kiln_result r = kiln_spawn_with(world, comps, values, 2, &e);
        if (r != KILN_OK) {
            check_call(&c->state, world, r, "kiln_spawn_with");
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
    fill2(p, v, 0, c->n);
    double t1 = bench_now_ns();

    bench_consume(float_bits(p[c->n - 1].x) ^ float_bits(v[c->n / 2].x));
    if (c->state.verify) c->baseline_hash = array_position_hash(p, c->n);
    free(p);
    free(v);
    return t1 - t0;
}

static double spawn_batch_kiln(void *ctx) {
    spawn_ctx *c = ctx;
    component_ids ids;
    kiln_world *world = world_new(&c->state, &ids);
    if (world == NULL) return 0.0;
    kiln_component comps[2] = {ids.position, ids.velocity};
    /* Systems create their queries up front; the query is matched when the archetype
     * appears, which is part of the timed spawn. */
    kiln_query_desc qd = {.with = {ids.position, ids.velocity}};
    kiln_query *query = query_new(&c->state, world, &qd);
    if (query == NULL) {
        kiln_world_destroy(world);
        return 0.0;
    }

    if (c->cold) bench_trim_heap();
    double t0 = bench_now_ns();
    kiln_result r = kiln_spawn_batch(world, comps, 2, (int32_t)c->n, NULL);
    if (r == KILN_OK) query_fill2(query);
    double t1 = bench_now_ns();

    check_call(&c->state, world, r, "kiln_spawn_batch");
    if (c->state.verify) spawn_record(c, world, &ids);
    kiln_world_destroy(world);
    return t1 - t0;
}

static bool spawn_check(void *ctx) {
    spawn_ctx *c = ctx;
    if (c->kiln_rows != c->n)
        return fail(&c->state, "the query visited %lld rows, expected %lld",
                    (long long)c->kiln_rows, (long long)c->n);
    if (c->kiln_hash != c->baseline_hash)
        return fail(&c->state, "spawned positions differ from the baseline");
    return true;
}

static void run_spawn_one(const bench_config *config, bench_result *dest) {
    spawn_ctx c = {.n = config->entities, .cold = config->cold};
    measure(config, &c, spawn_one_kiln, spawn_baseline, spawn_check, 1, (double)c.n, dest);
}

static void run_spawn_batch(const bench_config *config, bench_result *dest) {
    spawn_ctx c = {.n = config->entities, .cold = config->cold};
    measure(config, &c, spawn_batch_kiln, spawn_baseline, spawn_check, 1, (double)c.n, dest);
}

/* ------------------------------------------------------------------------------------------ */
/* iter2, iter3, iter_frag, iter2_mark                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef enum iter_kind { ITER2, ITER3, ITER_FRAG, ITER2_MARK } iter_kind;

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
        integrate2(kiln_iter_column(&it, 0), kiln_iter_column(&it, 1), it.count);
}

BENCH_NOINLINE static void iter3_kiln_pass(kiln_query *query) {
    kiln_iter it;
    kiln_query_iter(query, &it);
    while (kiln_query_next(&it))
        integrate3(kiln_iter_column(&it, 0), kiln_iter_column(&it, 1),
                   kiln_iter_column(&it, 2), it.count);
}

/* Written the way a system would: the mark is inline in the user's loop. */
BENCH_NOINLINE static void iter2_mark_kiln_pass(kiln_query *query) {
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
    for (int t = 0; t < c->tables; t++) integrate2(c->pos[t], c->vel[t], c->rows[t]);
}

BENCH_NOINLINE static void iter3_baseline_pass(iter_ctx *c) {
    for (int t = 0; t < c->tables; t++) integrate3(c->pos[t], c->vel[t], c->mas[t], c->rows[t]);
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
    uint64_t kiln_hash = query_position_hash(c->query, &rows);
    uint64_t baseline_hash = 0;
    for (int t = 0; t < c->tables; t++) baseline_hash += array_position_hash(c->pos[t], c->rows[t]);
    if (rows != c->n)
        return fail(&c->state, "the query visited %lld rows, expected %lld", (long long)rows,
                    (long long)c->n);
    if (kiln_hash != baseline_hash)
        return fail(&c->state, "positions after iterating differ from the baseline");
    if (c->kind == ITER2_MARK) {
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
            return fail(&c->state, "%lld rows or chunk ticks not marked at tick %u",
                        (long long)stale, (unsigned)now);
    }
    return true;
}

static void iter_setup_baseline(iter_ctx *c) {
    int64_t first = 0;
    for (int t = 0; t < c->tables; t++) {
        int64_t rows = c->n / c->tables + (t < c->n % c->tables ? 1 : 0);
        c->rows[t] = rows;
        c->pos[t] = xmalloc((size_t)rows * sizeof(position));
        c->vel[t] = xmalloc((size_t)rows * sizeof(velocity));
        fill2(c->pos[t], c->vel[t], first, rows);
        if (c->kind == ITER3) {
            c->mas[t] = xmalloc((size_t)rows * sizeof(mass));
            for (int64_t i = 0; i < rows; i++) c->mas[t][i] = mass_at(first + i);
        }
        first += rows;
    }
}

static bool iter_setup_kiln(iter_ctx *c) {
    c->world = world_new(&c->state, &c->ids);
    if (c->world == NULL) return false;
    kiln_query_desc qd = {.with = {c->ids.position, c->ids.velocity}};
    if (c->kind == ITER3) qd.with[2] = c->ids.mass;
    c->query = query_new(&c->state, c->world, &qd);
    if (c->query == NULL) return false;

    kiln_component comps[2 + TAG_COUNT + 1] = {c->ids.position, c->ids.velocity};
    for (int t = 0; t < c->tables; t++) {
        int32_t count = 2;
        if (c->kind == ITER3) comps[count++] = c->ids.mass;
        for (int bit = 0; bit < TAG_COUNT && c->kind == ITER_FRAG; bit++)
            if (t & (1 << bit)) comps[count++] = c->ids.tags[bit];
        if (!check_call(&c->state, c->world,
                        kiln_spawn_batch(c->world, comps, count, (int32_t)c->rows[t], NULL),
                        "kiln_spawn_batch"))
            return false;
    }
    /* Values follow the query's row order. iter_check compares multisets, which holds because
     * both sides give the g-th row position_at(g), velocity_at(g) and mass_at(g). */
    kiln_iter it;
    int64_t next = 0;
    kiln_query_iter(c->query, &it);
    while (kiln_query_next(&it)) {
        fill2(kiln_iter_column(&it, 0), kiln_iter_column(&it, 1), next, it.count);
        if (c->kind == ITER3) {
            mass *m = kiln_iter_column(&it, 2);
            for (int32_t i = 0; i < it.count; i++) m[i] = mass_at(next + i);
        }
        next += it.count;
    }
    if (next != c->n)
        return fail(&c->state, "the query visited %lld rows after spawning %lld",
                    (long long)next, (long long)c->n);
    if (c->kind == ITER_FRAG) {
        kiln_world_stats stats;
        kiln_world_stats_get(c->world, &stats);
        if (stats.archetypes < FRAG_ARCHETYPES)
            return fail(&c->state, "only %d archetypes after spawning into %d",
                        (int)stats.archetypes, FRAG_ARCHETYPES);
    }
    return true;
}

static void run_iter(const bench_config *config, bench_result *dest, iter_kind kind) {
    iter_ctx *c = xcalloc(1, sizeof *c);
    c->kind = kind;
    c->n = config->entities;
    c->tables = kind == ITER_FRAG ? FRAG_ARCHETYPES : 1;
    /* About 16M entity updates per sample (16 passes at 1M): over 10 ms, well above timer
     * and scheduler noise. */
    c->passes = (int)(16000000 / c->n);
    if (c->passes < 1) c->passes = 1;
    iter_setup_baseline(c);
    if (iter_setup_kiln(c))
        measure(config, c, iter_kiln, iter_baseline, iter_check, c->passes,
                (double)c->n * c->passes, dest);
    else
        setup_failed(&c->state, dest);
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

/* ------------------------------------------------------------------------------------------ */
/* add_remove                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* The plain-C equivalent of two archetypes: struct-of-arrays tables and an index from entity
 * to (table, row), kept right across swap-removes through each table's entity column. */
typedef struct plain_table {
    uint32_t *entity;
    position *pos;
    velocity *vel;
    mass *mas;       /* NULL for the table without Mass */
    int64_t count;
} plain_table;

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
        mass m = mass_at(i);
        kiln_result r = kiln_add(world, c->handles[i], mass_id, &m);
        if (r != KILN_OK) {
            check_call(&c->state, world, r, "kiln_add");
            return 0.0;
        }
    }
    double t1 = bench_now_ns();

    if (c->state.verify) {
        for (int64_t i = 0; i < c->n; i++) {
            const mass *m = kiln_get(world, c->handles[i], mass_id);
            if (m == NULL || m->m != mass_at(i).m) {
                fail(&c->state, "entity %lld has no Mass or a wrong one after kiln_add",
                     (long long)i);
                break;
            }
        }
    }

    double t2 = bench_now_ns();
    for (int64_t i = 0; i < c->n; i++) {
        kiln_result r = kiln_remove(world, c->handles[i], mass_id, NULL);
        if (r != KILN_OK) {
            check_call(&c->state, world, r, "kiln_remove");
            return 0.0;
        }
    }
    double t3 = bench_now_ns();

    if (c->state.verify) {
        for (int64_t i = 0; i < c->n; i++) {
            if (kiln_has(world, c->handles[i], mass_id)) {
                fail(&c->state, "entity %lld still has Mass after kiln_remove", (long long)i);
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
        mass m = mass_at(i);
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
    uint64_t kiln_hash = query_position_hash(c->query, &rows);
    uint64_t baseline_hash = array_position_hash(c->tables[0].pos, c->tables[0].count);
    if (rows != c->n || c->tables[0].count != c->n)
        return fail(&c->state, "%lld kiln rows and %lld baseline rows, expected %lld",
                    (long long)rows, (long long)c->tables[0].count, (long long)c->n);
    if (kiln_hash != baseline_hash)
        return fail(&c->state, "positions after add/remove differ from the baseline");
    return true;
}

static void run_add_remove(const bench_config *config, bench_result *dest) {
    add_remove_ctx *c = xcalloc(1, sizeof *c);
    c->n = config->small_entities;
    c->handles = xmalloc((size_t)c->n * sizeof *c->handles);
    c->where = xmalloc((size_t)c->n * sizeof *c->where);
    for (int t = 0; t < 2; t++) {
        c->tables[t].entity = xmalloc((size_t)c->n * sizeof(uint32_t));
        c->tables[t].pos = xmalloc((size_t)c->n * sizeof(position));
        c->tables[t].vel = xmalloc((size_t)c->n * sizeof(velocity));
    }
    c->tables[1].mas = xmalloc((size_t)c->n * sizeof(mass));
    fill2(c->tables[0].pos, c->tables[0].vel, 0, c->n);
    for (int64_t i = 0; i < c->n; i++) {
        c->tables[0].entity[i] = (uint32_t)i;
        c->where[i] = (plain_location){0, (uint32_t)i};
    }
    c->tables[0].count = c->n;

    c->world = world_new(&c->state, &c->ids);
    kiln_query_desc qd = {.with = {c->ids.position, c->ids.velocity}};
    if (c->world != NULL && spawn_filled(&c->state, c->world, &c->ids, c->n, c->handles)
        && (c->query = query_new(&c->state, c->world, &qd)) != NULL)
        measure(config, c, add_remove_kiln, add_remove_baseline, add_remove_check, 1,
                2.0 * (double)c->n, dest);
    else
        setup_failed(&c->state, dest);

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
/* get_random                                                                                 */
/* ------------------------------------------------------------------------------------------ */

#define GET_SLICES 8 /* each sample is this many interleaved runs over a slice of handles */

typedef struct get_random_ctx {
    case_state state;
    int64_t n;
    kiln_world *world;
    component_ids ids;
    kiln_entity *shuffled;  /* every handle once, in random order */
    uint32_t *sparse;       /* baseline: slot index -> dense row */
    position *dense;
    int kiln_slice, baseline_slice;
    uint64_t kiln_sum, baseline_sum;
} get_random_ctx;

/* The next slice of the shuffled handles for one side; the verify run takes all of them. */
static void next_slice(get_random_ctx *c, int *slice, int64_t *begin, int64_t *end) {
    if (c->state.verify) {
        *begin = 0;
        *end = c->n;
        return;
    }
    *begin = c->n * *slice / GET_SLICES;
    *end = c->n * (*slice + 1) / GET_SLICES;
    *slice = (*slice + 1) % GET_SLICES;
}

static double get_random_kiln(void *ctx) {
    get_random_ctx *c = ctx;
    const kiln_world *world = c->world;
    kiln_component pos_id = c->ids.position;
    const kiln_entity *handles = c->shuffled;
    uint64_t sum = 0;
    int64_t missing = 0, begin, end;
    next_slice(c, &c->kiln_slice, &begin, &end);

    double t0 = bench_now_ns();
    for (int64_t i = begin; i < end; i++) {
        const position *p = kiln_get(world, handles[i], pos_id);
        if (p == NULL) {
            missing++;
            continue;
        }
        sum += float_bits(p->x) + float_bits(p->y);
    }
    double t1 = bench_now_ns();

    if (missing != 0) fail(&c->state, "kiln_get returned NULL for %lld live entities",
                           (long long)missing);
    if (c->state.verify) c->kiln_sum = sum;
    bench_consume(sum);
    return t1 - t0;
}

static double get_random_baseline(void *ctx) {
    get_random_ctx *c = ctx;
    const kiln_entity *handles = c->shuffled;
    const uint32_t *sparse = c->sparse;
    const position *dense = c->dense;
    uint64_t sum = 0;
    int64_t begin, end;
    next_slice(c, &c->baseline_slice, &begin, &end);

    double t0 = bench_now_ns();
    for (int64_t i = begin; i < end; i++) {
        const position *p = &dense[sparse[kiln_entity_index(handles[i])]];
        sum += float_bits(p->x) + float_bits(p->y);
    }
    double t1 = bench_now_ns();

    if (c->state.verify) c->baseline_sum = sum;
    bench_consume(sum);
    return t1 - t0;
}

static bool get_random_check(void *ctx) {
    get_random_ctx *c = ctx;
    if (c->kiln_sum != c->baseline_sum)
        return fail(&c->state, "kiln_get read other values than the baseline");
    return true;
}

static void run_get_random(const bench_config *config, bench_result *dest) {
    get_random_ctx *c = xcalloc(1, sizeof *c);
    c->n = config->entities;
    kiln_entity *handles = xmalloc((size_t)c->n * sizeof *handles);
    c->world = world_new(&c->state, &c->ids);
    if (c->world != NULL && spawn_filled(&c->state, c->world, &c->ids, c->n, handles)) {
        uint32_t max_index = 0;
        for (int64_t i = 0; i < c->n; i++)
            if (kiln_entity_index(handles[i]) > max_index) max_index = kiln_entity_index(handles[i]);
        c->sparse = xmalloc(((size_t)max_index + 1) * sizeof *c->sparse);
        c->dense = xmalloc((size_t)c->n * sizeof *c->dense);
        for (int64_t i = 0; i < c->n; i++) {
            c->sparse[kiln_entity_index(handles[i])] = (uint32_t)i;
            c->dense[i] = position_at(i);
        }
        c->shuffled = handles;
        handles = NULL;
        bench_shuffle_u64(c->shuffled, (size_t)c->n, 0x6b696c6eu);
        measure(config, c, get_random_kiln, get_random_baseline, get_random_check, GET_SLICES,
                (double)c->n, dest);
    } else {
        setup_failed(&c->state, dest);
    }
    kiln_world_destroy(c->world);
    free(handles);
    free(c->shuffled);
    free(c->sparse);
    free(c->dense);
    free(c);
}

/* ------------------------------------------------------------------------------------------ */
/* despawn                                                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct despawn_ctx {
    case_state state;
    int64_t n;
    kiln_entity *handles;
    plain_table table;
    uint32_t *sparse;     /* baseline: entity id -> row, UINT32_MAX when dead */
} despawn_ctx;

/* Each sample spawns a fresh world untimed and times despawning every entity in spawn
 * order (each swap-remove then moves a row from the back). */
static double despawn_kiln(void *ctx) {
    despawn_ctx *c = ctx;
    component_ids ids;
    kiln_world *world = world_new(&c->state, &ids);
    if (world == NULL) return 0.0;
    kiln_component comps[2] = {ids.position, ids.velocity};
    if (!check_call(&c->state, world,
                    kiln_spawn_batch(world, comps, 2, (int32_t)c->n, c->handles),
                    "kiln_spawn_batch")) {
        kiln_world_destroy(world);
        return 0.0;
    }

    double t0 = bench_now_ns();
    for (int64_t i = 0; i < c->n; i++) {
        kiln_result r = kiln_despawn(world, c->handles[i]);
        if (r != KILN_OK) {
            check_call(&c->state, world, r, "kiln_despawn");
            break;
        }
    }
    double t1 = bench_now_ns();

    if (c->state.verify) {
        if (kiln_entity_count(world) != 0)
            fail(&c->state, "%lld entities alive after despawning all",
                 (long long)kiln_entity_count(world));
        for (int64_t i = 0; i < c->n; i += 997)
            if (kiln_is_alive(world, c->handles[i])) {
                fail(&c->state, "entity %lld alive after kiln_despawn", (long long)i);
                break;
            }
    }
    kiln_world_destroy(world);
    return t1 - t0;
}

static double despawn_baseline(void *ctx) {
    despawn_ctx *c = ctx;
    plain_table *t = &c->table;
    fill2(t->pos, t->vel, 0, c->n);
    for (int64_t i = 0; i < c->n; i++) {
        t->entity[i] = (uint32_t)i;
        c->sparse[i] = (uint32_t)i;
    }
    t->count = c->n;

    double t0 = bench_now_ns();
    for (int64_t i = 0; i < c->n; i++) {
        uint32_t row = c->sparse[i];
        int64_t last = --t->count;
        if (row != last) {
            uint32_t moved = t->entity[last];
            t->entity[row] = moved;
            t->pos[row] = t->pos[last];
            t->vel[row] = t->vel[last];
            c->sparse[moved] = row;
        }
        c->sparse[i] = UINT32_MAX;
    }
    double t1 = bench_now_ns();

    bench_consume((uint64_t)t->count ^ c->sparse[c->n / 3]);
    if (c->state.verify && t->count != 0) fail(&c->state, "baseline despawn left rows");
    return t1 - t0;
}

static void run_despawn(const bench_config *config, bench_result *dest) {
    despawn_ctx c = {.n = config->entities};
    c.handles = xmalloc((size_t)c.n * sizeof *c.handles);
    c.sparse = xmalloc((size_t)c.n * sizeof *c.sparse);
    c.table.entity = xmalloc((size_t)c.n * sizeof(uint32_t));
    c.table.pos = xmalloc((size_t)c.n * sizeof(position));
    c.table.vel = xmalloc((size_t)c.n * sizeof(velocity));
    measure(config, &c, despawn_kiln, despawn_baseline, NULL, 1, (double)c.n, dest);
    free(c.handles);
    free(c.sparse);
    free(c.table.entity);
    free(c.table.pos);
    free(c.table.vel);
}

/* ------------------------------------------------------------------------------------------ */
/* bytes_per_entity                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* Resident bytes per Position+Velocity entity, spawned one at a time the common way (so
 * storage grows as it would in a game): the RSS delta from the empty world (components
 * registered) to the world holding n entities, next to the same delta of the world's
 * allocator accounting. The world's fixed overhead (about 16 KiB) is not per entity. */
static void run_bytes_per_entity(const bench_config *config, bench_result *dest) {
    case_state state = {0};
    int reps = config->reps < 3 ? config->reps : 3;
    if (reps < 1) reps = 1;
    double rss[BENCH_MAX_REPS], alloc[BENCH_MAX_REPS];
    int64_t n = config->entities;
    int done = 0;

    /* Fresh mappings for big blocks and a trimmed heap: the RSS delta then counts the pages
     * the world touches, not pages an earlier case left in the heap. */
    bench_memory_policy(false);
    for (int r = 0; r < reps && !state.failed; r++) {
        component_ids ids;
        kiln_world *world = world_new(&state, &ids);
        if (world == NULL) break;
        kiln_world_stats stats0;
        kiln_world_stats_get(world, &stats0);
        bench_trim_heap();
        int64_t rss0 = bench_rss_bytes();
        kiln_component comps[2] = {ids.position, ids.velocity};
        for (int64_t i = 0; i < n; i++) {
            position p = position_at(i);
            velocity v = velocity_at(i);
            const void *const values[2] = {&p, &v};
            kiln_entity e;
            if (!check_call(&state, world, kiln_spawn_with(world, comps, values, 2, &e),
                            "kiln_spawn_with"))
                break;
        }
        /* Trimmed again: free blocks the C library keeps after realloc growth depend on the
         * heap's history (which cases ran before), not on what the world holds. */
        bench_trim_heap();
        int64_t rss1 = bench_rss_bytes();
        kiln_world_stats stats;
        kiln_world_stats_get(world, &stats);
        if (!state.failed && stats.entities != n)
            fail(&state, "kiln_world_stats_get counts %lld entities, expected %lld",
                 (long long)stats.entities, (long long)n);
        kiln_world_destroy(world);
        if (rss0 < 0 || rss1 < 0) fail(&state, "cannot read /proc/self/statm");
        rss[done] = (double)(rss1 - rss0) / (double)n;
        alloc[done] = (double)(stats.bytes - stats0.bytes) / (double)n;
        done++;
    }
    bench_memory_policy(!config->cold);
    dest->ns = bench_median(rss, done);
    dest->spread = relative_spread(rss, done, dest->ns);
    dest->alloc_bytes = bench_median(alloc, done);
    dest->baseline_ns = (double)(sizeof(position) + sizeof(velocity));
    dest->ratio = dest->ns / dest->baseline_ns;
    dest->ok = !state.failed && done > 0;
    snprintf(dest->failure, sizeof dest->failure, "%s", state.failure);
}

/* ------------------------------------------------------------------------------------------ */
/* The case table                                                                             */
/* ------------------------------------------------------------------------------------------ */

static const bench_case cases[] = {
    {"spawn_one", BENCH_NS_PER_ENTITY, 6.0, false,
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
     "iter2 + kiln_iter_mark_changed per row vs the plain loop without tick stores",
     run_iter2_mark},
    {"add_remove", BENCH_NS_PER_OP, 2.0, false,
     "kiln_add then kiln_remove Mass vs a row move between two SoA tables and back",
     run_add_remove},
    {"get_random", BENCH_NS_PER_ENTITY, 1.5, false,
     "kiln_get Position in shuffled order vs sparse index -> dense array", run_get_random},
    {"despawn", BENCH_NS_PER_ENTITY, 5.0, false,
     "kiln_despawn in spawn order vs swap-remove with index fix-up", run_despawn},
    {"bytes_per_entity", BENCH_BYTES_PER_ENTITY, 44.0, true,
     "RSS delta per Position+Velocity entity (empty world -> n) vs 16 bytes of data", run_bytes_per_entity},
    {"cmd_spawn", BENCH_NS_PER_ENTITY, 1.5, false,
     "record + apply spawn with Position, Velocity (100k) vs kiln_spawn_with", run_cmd_spawn},
    {"cmd_add_remove", BENCH_NS_PER_OP, 1.5, false,
     "record + apply add+remove Mass (100k pairs) vs kiln_add + kiln_remove", run_cmd_add_remove},
    {"sched_overhead", BENCH_NS_PER_OP, 1000.0, false,
     "ns per trivial system per frame, 100 systems, inline vs calling them directly", run_sched_overhead},
    {"sched_parallel", BENCH_NS_PER_OP, 0.59, false,
     "two independent heavy systems on 2 threads (1 worker + caller) vs the same run inline",
     run_sched_parallel},
    {"parallel_for", BENCH_NS_PER_ENTITY, 0.59, false,
     "one heavy loop over 1M rows split across 2 threads vs inline", run_parallel_for},
    {"propagate_changed", BENCH_NS_PER_ENTITY, 1.5, false,
     "propagation, 100k in trees 4 deep, every local changed vs a plain recursive recompute",
     run_propagate_changed},
    {"propagate_unchanged", BENCH_NS_PER_ENTITY, 0.3, false,
     "propagation with nothing changed vs the plain recursive recompute", run_propagate_unchanged},
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
