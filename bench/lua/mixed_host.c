/* mixed_host.c: the mixed_frame benchmark: a C system moves 100k entities, a Lua system rules 1,000
 * of them, one schedule run by world:progress, against the same frame in plain Lua, same lua_State.
 *
 * Usage: mixed_host [--json FILE] [--quick] [--workers N] [--script PATH] [--frames N] [--case NAME]
 *   --json FILE    append {"case": "mixed_frame", "ns", "baseline_ns", "ratio"} to FILE
 *   --case NAME    the case name reported (default mixed_frame; the LuaJIT build: jit_mixed_frame)
 *   --quick        fewer samples
 *   --workers N    job-pool threads for the world's schedule (default: cores minus one)
 *   --script PATH  the Lua half (default bench/lua/mixed_rules.lua, from the repository root)
 *   --frames N     run only N kiln frames and exit, with no baseline: for perf/callgrind
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiln.h"
#include "kiln_lua.h"

#define ENTITIES 100000
#define RULED 1000 /* entities that also have Health, spread evenly through the world */
#define DT (1.0 / 60.0)

typedef struct Position { float x, y; } Position;
typedef struct Velocity { float x, y; } Velocity;
typedef struct Health { float hp; int32_t hits; } Health;

typedef struct move_state {
    kiln_query *query; /* Position, Velocity */
    float dt;
} move_state;

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int count) {
    qsort(values, (size_t)count, sizeof *values, compare_doubles);
    return count % 2 ? values[count / 2] : (values[count / 2 - 1] + values[count / 2]) / 2;
}

static void die(const char *what, const char *detail) {
    fprintf(stderr, "mixed_host: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

/* ---- the native system ------------------------------------------------------------------ */

/* One range of rows, on whichever thread the pool gives it. Writes in place without marking
 * rows changed, as a C system that nobody watches for changes would. */
static void move_rows(kiln_iter *view, void *user) {
    const move_state *s = user;
    Position *p = kiln_iter_column(view, 0);
    const Velocity *v = kiln_iter_column(view, 1);
    for (int32_t i = 0; i < view->count; i++) {
        p[i].x += v[i].x * s->dt;
        p[i].y += v[i].y * s->dt;
    }
}

static void move_system(const kiln_system_ctx *ctx) {
    move_state *s = ctx->user;
    s->dt = (float)ctx->dt;
    if (kiln_parallel_for(ctx->jobs, s->query, 0, move_rows, s) != KILN_OK)
        die("parallel_for", kiln_world_error(ctx->world));
}

/* ---- world setup ------------------------------------------------------------------------- */

static kiln_component register_vec(kiln_world *w, const char *name) {
    static const kiln_field fields[] = {
        {.name = "x", .type = KILN_TYPE_FLOAT, .offset = 0},
        {.name = "y", .type = KILN_TYPE_FLOAT, .offset = 4},
    };
    kiln_component c;
    kiln_component_desc d = {.name = name, .size = sizeof(Position), .fields = fields, .field_count = 2};
    if (kiln_component_register(w, &d, &c) != KILN_OK) die("register", kiln_world_error(w));
    return c;
}

static uint64_t rng_next(uint64_t *state) { /* splitmix64 */
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *state, float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(rng_next(state) >> 11) / 9007199254740992.0);
}

/* Spawns ENTITIES with Position and Velocity, every ENTITIES/RULED-th of them with Health. */
static void populate(kiln_world *w, kiln_component pos, kiln_component vel, kiln_component hp) {
    uint64_t rng = 42;
    for (int32_t i = 0; i < ENTITIES; i++) {
        Position p = {uniform(&rng, -200, 200), uniform(&rng, -200, 200)};
        Velocity v = {uniform(&rng, -10, 10), uniform(&rng, -10, 10)};
        Health h = {100, 0};
        kiln_component comps[3] = {pos, vel, hp};
        const void *values[3] = {&p, &v, &h};
        bool ruled = i % (ENTITIES / RULED) == 0;
        kiln_entity e;
        if (kiln_spawn_with(w, comps, values, ruled ? 3 : 2, &e) != KILN_OK) die("spawn", kiln_world_error(w));
    }
}

/* ---- timing ----------------------------------------------------------------------------- */

/* world:progress(dt) through the Lua API, as a host's frame loop would call it; returns the
 * wall time. Raises (exits) when a system failed. */
static double kiln_frame(lua_State *L, int world_idx) {
    double t0 = now_ns();
    lua_getfield(L, world_idx, "progress");
    lua_pushvalue(L, world_idx);
    lua_pushnumber(L, DT);
    if (lua_pcall(L, 2, 2, 0) != LUA_OK) die("world:progress", lua_tostring(L, -1));
    double t = now_ns() - t0;
    if (!lua_toboolean(L, -2)) {
        lua_rawgeti(L, -1, 1);
        lua_getfield(L, -1, "message");
        die("a system failed", lua_tostring(L, -1));
    }
    lua_pop(L, 2);
    return t;
}

static double baseline_frame(lua_State *L, int baseline_idx) {
    double t0 = now_ns();
    lua_pushvalue(L, baseline_idx);
    lua_pushnumber(L, DT);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) die("baseline", lua_tostring(L, -1));
    return now_ns() - t0;
}

/* The runs and total time of a system so far, to average it over the timed frames. */
static void system_totals(kiln_schedule *sched, const char *name, int64_t *runs, int64_t *total_ns) {
    kiln_system_info info;
    int32_t i = kiln_schedule_find(sched, name);
    *runs = *total_ns = 0;
    if (i >= 0 && kiln_schedule_system_info_get(sched, i, &info)) {
        *runs = info.runs;
        *total_ns = info.total_ns;
    }
}

int main(int argc, char **argv) {
    const char *json_path = NULL, *script = "bench/lua/mixed_rules.lua", *case_name = "mixed_frame";
    bool quick = false;
    long workers = sysconf(_SC_NPROCESSORS_ONLN) - 1;
    long profile_frames = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--quick") == 0) {
            quick = true;
        } else if (i + 1 < argc && strcmp(a, "--json") == 0) {
            json_path = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--workers") == 0) {
            workers = strtol(argv[++i], NULL, 10);
        } else if (i + 1 < argc && strcmp(a, "--script") == 0) {
            script = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--case") == 0) {
            case_name = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--frames") == 0) {
            profile_frames = strtol(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: mixed_host [--json FILE] [--quick] [--workers N] [--script PATH] "
                            "[--frames N] [--case NAME]\n");
            return 2;
        }
    }
    if (workers < 0) workers = 0;
    if (workers > 64) workers = 64;

    kiln_world *world = kiln_world_create(NULL);
    if (!world) die("out of memory", NULL);
    kiln_component pos = register_vec(world, "Position"), vel = register_vec(world, "Velocity"), hp;
    static const kiln_field health_fields[] = {
        {.name = "hp", .type = KILN_TYPE_FLOAT, .offset = offsetof(Health, hp)},
        {.name = "hits", .type = KILN_TYPE_INT32, .offset = offsetof(Health, hits)},
    };
    kiln_component_desc hd = {.name = "Health", .size = sizeof(Health), .fields = health_fields, .field_count = 2};
    if (kiln_component_register(world, &hd, &hp) != KILN_OK) die("register", kiln_world_error(world));
    populate(world, pos, vel, hp);

    move_state move = {0};
    if (kiln_query_create(world, &(kiln_query_desc){.with = {pos, vel}}, &move.query) != KILN_OK)
        die("query", kiln_world_error(world));

    lua_State *L = luaL_newstate();
    if (!L) die("out of memory", NULL);
    luaL_openlibs(L);
    kiln_lua_push_world(L, world, (int32_t)workers);
    int world_idx = lua_gettop(L);
    kiln_schedule *sched = kiln_lua_schedule(L, world_idx);
    /* Declared first, so the Lua rules (which read Position) run in the stage after it. */
    kiln_system_desc sd = {.name = "move", .run = move_system, .user = &move,
                           .reads = {vel}, .writes = {pos}};
    if (kiln_schedule_add(sched, &sd) != KILN_OK) die("schedule_add", kiln_world_error(world));

    if (luaL_loadfile(L, script) != LUA_OK) die("loading the script", lua_tostring(L, -1));
    lua_pushvalue(L, world_idx);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) die("running the script", lua_tostring(L, -1));
    int script_idx = lua_gettop(L);
    lua_getfield(L, script_idx, "baseline");
    int baseline_idx = lua_gettop(L);
    lua_getfield(L, script_idx, "ruled");
    if (lua_tointeger(L, -1) != RULED) die("the script found the wrong number of ruled entities", NULL);
    lua_pop(L, 1);

    char stages[256];
    kiln_schedule_describe(sched, stages, sizeof stages);

    if (profile_frames > 0) {
        double t = 0;
        for (long f = 0; f < profile_frames; f++) t += kiln_frame(L, world_idx);
        fprintf(stderr, "mixed_host: %ld frames, %.3f ms/frame\n", profile_frames, t / 1e6 / (double)profile_frames);
    } else {
        /* A check that the frame does its work: one frame moves a sample entity by v * dt. */
        kiln_entity probe;
        kiln_world_entities(world, &probe, 1);
        Position before = *(const Position *)kiln_get(world, probe, pos);
        const Velocity *pv = kiln_get(world, probe, vel);
        kiln_frame(L, world_idx);
        const Position *after = kiln_get(world, probe, pos);
        if (fabsf(after->x - (before.x + pv->x * (float)DT)) > 1e-3f ||
            fabsf(after->y - (before.y + pv->y * (float)DT)) > 1e-3f)
            die("the native system did not move the probe entity", NULL);

        int repeats = quick ? 5 : 21, per_sample = quick ? 2 : 5;
        for (int w = 0; w < 3; w++) { /* warm-up */
            kiln_frame(L, world_idx);
            baseline_frame(L, baseline_idx);
        }
        int64_t move_runs0, move_ns0, rules_runs0, rules_ns0;
        system_totals(sched, "move", &move_runs0, &move_ns0);
        system_totals(sched, "rules", &rules_runs0, &rules_ns0);
        double *s = calloc((size_t)repeats, sizeof *s), *b = calloc((size_t)repeats, sizeof *b);
        if (!s || !b) die("out of memory", NULL);
        for (int r = 0; r < repeats; r++) {
            lua_gc(L, LUA_GCCOLLECT);
            s[r] = 0;
            for (int f = 0; f < per_sample; f++) s[r] += kiln_frame(L, world_idx);
            s[r] /= per_sample;
            lua_gc(L, LUA_GCCOLLECT);
            b[r] = 0;
            for (int f = 0; f < per_sample; f++) b[r] += baseline_frame(L, baseline_idx);
            b[r] /= per_sample;
        }
        double ns = median(s, repeats), base = median(b, repeats), ratio = ns / base;
        int64_t move_runs, move_total, rules_runs, rules_total;
        system_totals(sched, "move", &move_runs, &move_total);
        system_totals(sched, "rules", &rules_runs, &rules_total);
        double move_ms = (double)(move_total - move_ns0) / (double)(move_runs - move_runs0) / 1e6;
        double rules_ms = (double)(rules_total - rules_ns0) / (double)(rules_runs - rules_runs0) / 1e6;

        printf("kiln mixed frame: %d entities moved in C on %ld worker(s) + the calling thread, "
               "rules on %d in Lua; %d samples of %d frames (medians)\n",
               ENTITIES, workers, RULED, repeats, per_sample);
        printf("schedule: %s", stages);
        printf("%-44s %14s %14s %9s  %-10s %-13s %s\n", "case", "ns", "baseline_ns", "ratio", "unit", "goal",
               "result");
        printf("%-44s %14.0f %14.0f %9.3f  %-10s %-13s %s\n", case_name, ns, base, ratio, "ns/frame",
               "ratio <= 0.1", ratio <= 0.1 ? "PASS" : "MISS");
        printf("  per system (mean over the timed frames): move (C) %.3f ms, rules (Lua) %.3f ms\n", move_ms,
               rules_ms);
        if (json_path) {
            FILE *out = fopen(json_path, "a");
            if (!out) die("cannot append to", json_path);
            fprintf(out, "{\"case\": \"%s\", \"ns\": %.4f, \"baseline_ns\": %.4f, \"ratio\": %.4f}\n", case_name,
                    ns, base, ratio);
            if (fclose(out) != 0) die("cannot write", json_path);
        }
        free(s);
        free(b);
    }

    /* Lua lets go of the world (and destroys the schedule and job pool); the host owns it. */
    lua_close(L);
    kiln_query_destroy(move.query);
    kiln_world_destroy(world);
    return 0;
}
