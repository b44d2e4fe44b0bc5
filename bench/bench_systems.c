/* bench_systems.c: command buffers vs direct calls, and the schedule and job pool vs plain
 * calls and inline runs (propagation is bench_transform.c). Every sample
 * alternates kiln and baseline; results are medians per entity, pair, system or frame. */
#include "bench_systems.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "kiln.h"

typedef struct { float x, y; } vec2f;

/* A sample side: prepares untimed, then returns the ns it timed. */
typedef double (*side_fn)(void *ctx);

static void alternate(const bench_config *config, void *ctx, side_fn kiln, side_fn base,
                      double units, bench_result *dest) {
    double k[BENCH_MAX_REPS], b[BENCH_MAX_REPS];
    int reps = config->reps < 1 ? 1 : config->reps > BENCH_MAX_REPS ? BENCH_MAX_REPS : config->reps;
    kiln(ctx); /* warm-up */
    base(ctx);
    for (int r = 0; r < reps; r++) {
        if (r % 2 == 0) {
            k[r] = kiln(ctx) / units;
            b[r] = base(ctx) / units;
        } else {
            b[r] = base(ctx) / units;
            k[r] = kiln(ctx) / units;
        }
    }
    dest->ns = bench_median(k, reps);
    dest->baseline_ns = bench_median(b, reps);
    dest->ratio = dest->baseline_ns > 0 ? dest->ns / dest->baseline_ns : 0;
    dest->spread = dest->baseline_spread = 0;
    dest->ok = true;
}

static void failed(bench_result *dest, const char *why, const kiln_world *w) {
    dest->ok = false;
    snprintf(dest->failure, sizeof dest->failure, "%s%s%s", why, w ? ": " : "", w ? kiln_world_error(w) : "");
}

/* ---- command buffers ------------------------------------------------------------------ */

typedef struct cmd_ctx {
    int64_t n;
    kiln_world *world;
    kiln_component pos, vel, mass;
    kiln_commands *cmd;
    kiln_entity *ents;
    bool ok;
    bool calls; /* cmd_spawn_calls: kiln_commands_spawn and an add per component */
} cmd_ctx;

static void cmd_world(cmd_ctx *c) {
    kiln_world_destroy(c->world);
    c->world = kiln_world_create(NULL);
    kiln_component_register(c->world, &(kiln_component_desc){.name = "Position", .size = 8}, &c->pos);
    kiln_component_register(c->world, &(kiln_component_desc){.name = "Velocity", .size = 8}, &c->vel);
    kiln_component_register(c->world, &(kiln_component_desc){.name = "Mass", .size = 4}, &c->mass);
    kiln_commands_destroy(c->cmd);
    c->cmd = kiln_commands_create(c->world);
}

static double cmd_spawn_kiln(void *ctx) {
    cmd_ctx *c = ctx;
    cmd_world(c);
    double t = bench_now_ns();
    for (int64_t i = 0; i < c->n; i++) {
        vec2f p = {(float)i, 0}, v = {1, 1};
        kiln_entity ph;
        if (c->calls) {
            kiln_commands_spawn(c->cmd, &ph);
            kiln_commands_add(c->cmd, ph, c->pos, &p);
            kiln_commands_add(c->cmd, ph, c->vel, &v);
        } else {
            kiln_commands_spawn_with(c->cmd, (kiln_component[]){c->pos, c->vel}, (void *[]){&p, &v}, 2, &ph);
        }
    }
    int64_t applied;
    if (kiln_commands_apply(c->cmd, c->world, &applied) != KILN_OK || applied != 3 * c->n) c->ok = false;
    t = bench_now_ns() - t;
    if (kiln_entity_count(c->world) != c->n) c->ok = false;
    return t;
}

static double cmd_spawn_direct(void *ctx) {
    cmd_ctx *c = ctx;
    cmd_world(c);
    kiln_component comps[2] = {c->pos, c->vel};
    double t = bench_now_ns();
    for (int64_t i = 0; i < c->n; i++) {
        vec2f p = {(float)i, 0}, v = {1, 1};
        kiln_spawn_with(c->world, comps, (const void *[]){&p, &v}, 2, NULL);
    }
    t = bench_now_ns() - t;
    if (kiln_entity_count(c->world) != c->n) c->ok = false;
    return t;
}

static void cmd_spawn_case(const bench_config *config, bench_result *dest, bool calls) {
    cmd_ctx c = {.n = config->small_entities, .ok = true, .calls = calls};
    alternate(config, &c, cmd_spawn_kiln, cmd_spawn_direct, (double)c.n, dest);
    if (!c.ok) failed(dest, "cmd_spawn: a spawn or apply failed", c.world);
    kiln_commands_destroy(c.cmd);
    kiln_world_destroy(c.world);
}

void run_cmd_spawn(const bench_config *config, bench_result *dest) { cmd_spawn_case(config, dest, false); }

void run_cmd_spawn_calls(const bench_config *config, bench_result *dest) { cmd_spawn_case(config, dest, true); }

static void cmd_population(cmd_ctx *c) {
    if (c->world) return;
    cmd_world(c);
    c->ents = malloc(sizeof(kiln_entity) * (size_t)c->n);
    kiln_spawn_batch(c->world, (kiln_component[]){c->pos, c->vel}, 2, (int32_t)c->n, c->ents);
}

static double cmd_add_remove_kiln(void *ctx) {
    cmd_ctx *c = ctx;
    cmd_population(c);
    double t = bench_now_ns();
    for (int64_t i = 0; i < c->n; i++) {
        float m = 1.0f;
        kiln_commands_add(c->cmd, c->ents[i], c->mass, &m);
        kiln_commands_remove(c->cmd, c->ents[i], c->mass);
    }
    if (kiln_commands_apply(c->cmd, c->world, NULL) != KILN_OK) c->ok = false;
    return bench_now_ns() - t;
}

static double cmd_add_remove_direct(void *ctx) {
    cmd_ctx *c = ctx;
    cmd_population(c);
    double t = bench_now_ns();
    for (int64_t i = 0; i < c->n; i++) {
        float m = 1.0f;
        kiln_add(c->world, c->ents[i], c->mass, &m);
        kiln_remove(c->world, c->ents[i], c->mass, NULL);
    }
    return bench_now_ns() - t;
}

void run_cmd_add_remove(const bench_config *config, bench_result *dest) {
    cmd_ctx c = {.n = config->small_entities, .ok = true};
    alternate(config, &c, cmd_add_remove_kiln, cmd_add_remove_direct, (double)c.n, dest);
    if (!c.ok) failed(dest, "cmd_add_remove: apply failed", c.world);
    free(c.ents);
    kiln_commands_destroy(c.cmd);
    kiln_world_destroy(c.world);
}

/* ---- schedule ------------------------------------------------------------------------ */

#define TRIVIAL_SYSTEMS 100
#define FRAMES 200

static void trivial(const kiln_system_ctx *ctx) { bench_consume((uint64_t)(uintptr_t)ctx->user); }
static void (*volatile direct_call)(const kiln_system_ctx *) = trivial;

typedef struct sched_ctx {
    kiln_world *world;
    kiln_schedule *schedule;
} sched_ctx;

static double sched_kiln(void *ctx) {
    sched_ctx *c = ctx;
    double t = bench_now_ns();
    for (int f = 0; f < FRAMES; f++) kiln_schedule_run(c->schedule, 1.0 / 60);
    return bench_now_ns() - t;
}

static double sched_direct(void *ctx) {
    (void)ctx;
    kiln_system_ctx sc = {0};
    double t = bench_now_ns();
    for (int f = 0; f < FRAMES; f++)
        for (int s = 0; s < TRIVIAL_SYSTEMS; s++) {
            sc.user = (void *)(uintptr_t)s;
            direct_call(&sc);
        }
    return bench_now_ns() - t;
}

void run_sched_overhead(const bench_config *config, bench_result *dest) {
    sched_ctx c = {kiln_world_create(NULL), NULL};
    c.schedule = kiln_schedule_create(c.world, NULL);
    for (int s = 0; s < TRIVIAL_SYSTEMS; s++) {
        char name[32];
        snprintf(name, sizeof name, "trivial%d", s);
        kiln_schedule_add(c.schedule, &(kiln_system_desc){.name = name, .run = trivial,
                                                          .user = (void *)(uintptr_t)s});
    }
    alternate(config, &c, sched_kiln, sched_direct, (double)FRAMES * TRIVIAL_SYSTEMS, dest);
    kiln_schedule_destroy(c.schedule);
    kiln_world_destroy(c.world);
}

/* Heavy work over one component's rows: a few dependent multiply-adds per value. */
typedef struct heavy_ctx {
    kiln_query *q;
    int rounds;
} heavy_ctx;

static void heavy_rows(kiln_iter *view, void *user) {
    int rounds = *(const int *)user;
    vec2f *p = view->columns[0];
    for (int32_t i = 0; i < view->count; i++) {
        float x = p[i].x, y = p[i].y;
        for (int r = 0; r < rounds; r++) {
            x = x * 0.999f + y * 0.001f;
            y = y * 0.999f - x * 0.001f;
        }
        p[i].x = x;
        p[i].y = y;
    }
}

static void heavy_system(const kiln_system_ctx *ctx) {
    heavy_ctx *h = ctx->user;
    kiln_parallel_for(NULL, h->q, 0, heavy_rows, &h->rounds); /* one thread per system */
}

typedef struct par_ctx {
    kiln_world *world;
    kiln_schedule *parallel, *inline_run;
    kiln_jobs *jobs;
    heavy_ctx a, b;
} par_ctx;

static double par_kiln(void *ctx) {
    par_ctx *c = ctx;
    double t = bench_now_ns();
    kiln_schedule_run(c->parallel, 0);
    return bench_now_ns() - t;
}

static double par_inline(void *ctx) {
    par_ctx *c = ctx;
    double t = bench_now_ns();
    kiln_schedule_run(c->inline_run, 0);
    return bench_now_ns() - t;
}

void run_sched_parallel(const bench_config *config, bench_result *dest) {
    par_ctx c = {0};
    c.world = kiln_world_create(NULL);
    kiln_component ca, cb;
    kiln_component_register(c.world, &(kiln_component_desc){.name = "A", .size = 8}, &ca);
    kiln_component_register(c.world, &(kiln_component_desc){.name = "B", .size = 8}, &cb);
    int32_t n = (int32_t)(config->entities / 4);
    kiln_spawn_batch(c.world, &ca, 1, n, NULL);
    kiln_spawn_batch(c.world, &cb, 1, n, NULL);
    kiln_query_create(c.world, &(kiln_query_desc){.with = {ca}}, &c.a.q);
    kiln_query_create(c.world, &(kiln_query_desc){.with = {cb}}, &c.b.q);
    c.a.rounds = c.b.rounds = 20;
    c.jobs = kiln_jobs_create(&(kiln_jobs_desc){.workers = 1}); /* + the caller: 2 threads */
    c.parallel = kiln_schedule_create(c.world, &(kiln_schedule_desc){.jobs = c.jobs});
    c.inline_run = kiln_schedule_create(c.world, NULL);
    kiln_schedule *both[2] = {c.parallel, c.inline_run};
    for (int i = 0; i < 2; i++) {
        kiln_schedule_add(both[i], &(kiln_system_desc){.name = "heavy_a", .run = heavy_system, .user = &c.a, .writes = {ca}});
        kiln_schedule_add(both[i], &(kiln_system_desc){.name = "heavy_b", .run = heavy_system, .user = &c.b, .writes = {cb}});
    }
    if (kiln_schedule_stage_count(c.parallel) != 1) failed(dest, "sched_parallel: expected one stage", c.world);
    else alternate(config, &c, par_kiln, par_inline, 1.0, dest);
    kiln_schedule_destroy(c.parallel);
    kiln_schedule_destroy(c.inline_run);
    kiln_jobs_destroy(c.jobs);
    kiln_world_destroy(c.world);
}

typedef struct pfor_ctx {
    kiln_jobs *jobs;
    kiln_query *q;
    int rounds;
} pfor_ctx;

static double pfor_kiln(void *ctx) {
    pfor_ctx *c = ctx;
    double t = bench_now_ns();
    kiln_parallel_for(c->jobs, c->q, 0, heavy_rows, &c->rounds);
    return bench_now_ns() - t;
}

static double pfor_inline(void *ctx) {
    pfor_ctx *c = ctx;
    double t = bench_now_ns();
    kiln_parallel_for(NULL, c->q, 0, heavy_rows, &c->rounds);
    return bench_now_ns() - t;
}

void run_parallel_for(const bench_config *config, bench_result *dest) {
    kiln_world *world = kiln_world_create(NULL);
    kiln_component ca;
    kiln_component_register(world, &(kiln_component_desc){.name = "A", .size = 8}, &ca);
    kiln_spawn_batch(world, &ca, 1, (int32_t)config->entities, NULL);
    pfor_ctx c = {kiln_jobs_create(&(kiln_jobs_desc){.workers = 1}), NULL, 10};
    kiln_query_create(world, &(kiln_query_desc){.with = {ca}}, &c.q);
    alternate(config, &c, pfor_kiln, pfor_inline, (double)config->entities, dest);
    kiln_jobs_destroy(c.jobs);
    kiln_world_destroy(world);
}
