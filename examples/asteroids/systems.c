/* systems.c: the asteroid game's C systems (move, orbit, collide on a uniform grid) and the
 * field generator. Invariant: results never depend on thread timing (hits are sorted). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "systems.h"

#define TWO_PI 6.28318530717958647692f
#define CELL_SIZE 16.0f /* at least the largest ship radius plus the largest asteroid radius */

/* ---- field generation ------------------------------------------------------------------- */

/* splitmix64: small, fast and the same on every platform. */
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* A float in [0, 1). */
static float random_unit(uint64_t *state) {
    return (float)(next_random(state) >> 40) / 16777216.0f;
}

float game_asteroid_radius(int32_t size) {
    static const float radius[] = {1.0f, 1.5f, 2.5f, 4.0f};
    return radius[size < 1 ? 0 : size > 3 ? 3 : size];
}

static kiln_result spawn_moon(kiln_world *world, const game_ids *ids, kiln_entity parent,
                              float parent_radius, uint64_t *rng) {
    kiln_parent link = {parent};
    kiln_local_transform local = kiln_transform_local_identity();
    Orbit orbit = {
        .radius = parent_radius + 2.0f + 6.0f * random_unit(rng),
        .speed = (0.5f + 1.5f * random_unit(rng)) * (random_unit(rng) < 0.5f ? -1.0f : 1.0f),
        .angle = TWO_PI * random_unit(rng),
    };
    kiln_component types[] = {ids->transform.parent, ids->transform.local, ids->orbit};
    const void *values[] = {&link, &local, &orbit};
    return kiln_spawn_with(world, types, values, 3, NULL);
}

kiln_result game_field_populate(kiln_world *world, const game_ids *ids, uint64_t seed,
                                int32_t count, int32_t moons) {
    kiln_component types[] = {ids->position, ids->velocity, ids->asteroid, ids->transform.local,
                              ids->transform.world};
    kiln_entity *rocks = malloc(sizeof *rocks * (size_t)(count > 0 ? count : 1));
    if (!rocks) return KILN_ERR_OUT_OF_MEMORY;
    /* One batch sizes storage once; the values are filled in below. */
    kiln_result r = kiln_spawn_batch(world, types, 5, count, rocks);
    uint64_t rng = seed;
    for (int32_t i = 0; i < count && r == KILN_OK; i++) {
        float u = random_unit(&rng);
        int32_t size = u < 0.5f ? 1 : u < 0.8f ? 2 : 3;
        float x = FIELD_SIZE * random_unit(&rng), y = FIELD_SIZE * random_unit(&rng);
        float heading = TWO_PI * random_unit(&rng);
        float speed = (4.0f + 12.0f * random_unit(&rng)) * (float)(4 - size) * 0.5f;
        *(Position *)kiln_get_mut(world, rocks[i], ids->position) = (Position){x, y};
        *(Velocity *)kiln_get_mut(world, rocks[i], ids->velocity) =
            (Velocity){speed * cosf(heading), speed * sinf(heading)};
        *(Asteroid *)kiln_get_mut(world, rocks[i], ids->asteroid) =
            (Asteroid){game_asteroid_radius(size), size};
        kiln_local_transform *local = kiln_get_mut(world, rocks[i], ids->transform.local);
        *local = kiln_transform_local_identity();
        local->position[0] = x;
        local->position[1] = y;
        /* Spawning the moon is a structural change: the pointers above are dead after it. */
        if (size == 3 && moons > 0) {
            r = spawn_moon(world, ids, rocks[i], game_asteroid_radius(size), &rng);
            moons--;
        }
    }
    free(rocks);
    return r;
}

/* ---- state ------------------------------------------------------------------------------ */

/* A ship as the grid holds it: a copy, so the parallel sweep reads no world storage. */
typedef struct grid_ship {
    kiln_entity entity;
    float x, y, radius;
    int32_t next; /* next ship in the same cell, or -1 */
} grid_ship;

struct game_systems {
    kiln_world *world;
    game_ids ids;
    kiln_query *movers; /* Position, Velocity, optional LocalTransform */
    kiln_query *moons;  /* Orbit, LocalTransform */
    kiln_query *rocks;  /* Position, Asteroid */
    kiln_query *ships;  /* Position, Ship */

    int32_t side;       /* grid cells per side */
    int32_t *heads;     /* side * side cells: first ship in the cell, or -1 */
    grid_ship *grid;
    int32_t grid_count, grid_cap;

    Collision *hits;    /* filled by the sweep from any thread; sorted before emitting */
    int32_t hit_cap;
    atomic_int hit_count;

    kiln_alloc_fn alloc; /* the grid's and the hits' memory */
    void *alloc_ud;
    int64_t dropped;     /* collide passes that dropped their collisions for want of memory */
};

static void *default_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    (void)ud;
    (void)osize;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, nsize);
}

game_systems *game_systems_create(kiln_world *world, const game_ids *ids, kiln_alloc_fn alloc,
                                  void *alloc_ud) {
    if (!alloc) alloc = default_alloc;
    game_systems *gs = alloc(alloc_ud, NULL, 0, sizeof *gs);
    if (!gs) return NULL;
    memset(gs, 0, sizeof *gs);
    gs->alloc = alloc;
    gs->alloc_ud = alloc_ud;
    gs->world = world;
    gs->ids = *ids;
    gs->side = (int32_t)(FIELD_SIZE / CELL_SIZE);
    gs->heads = alloc(alloc_ud, NULL, 0, sizeof *gs->heads * (size_t)gs->side * (size_t)gs->side);
    gs->hits = alloc(alloc_ud, NULL, 0, sizeof *gs->hits * 1024);
    if (gs->hits) gs->hit_cap = 1024;
    kiln_result r = KILN_ERR_OUT_OF_MEMORY;
    if (gs->heads && gs->hits &&
        (r = kiln_query_create(world, &(kiln_query_desc){.with = {ids->position, ids->velocity},
                                                         .optional = {ids->transform.local}},
                               &gs->movers)) == KILN_OK &&
        (r = kiln_query_create(world, &(kiln_query_desc){.with = {ids->orbit, ids->transform.local}},
                               &gs->moons)) == KILN_OK &&
        (r = kiln_query_create(world, &(kiln_query_desc){.with = {ids->position, ids->asteroid}},
                               &gs->rocks)) == KILN_OK &&
        (r = kiln_query_create(world, &(kiln_query_desc){.with = {ids->position, ids->ship}},
                               &gs->ships)) == KILN_OK)
        return gs;
    game_systems_destroy(gs);
    return NULL;
}

void game_systems_destroy(game_systems *gs) {
    if (!gs) return;
    kiln_query_destroy(gs->movers);
    kiln_query_destroy(gs->moons);
    kiln_query_destroy(gs->rocks);
    kiln_query_destroy(gs->ships);
    gs->alloc(gs->alloc_ud, gs->heads, sizeof *gs->heads * (size_t)gs->side * (size_t)gs->side, 0);
    gs->alloc(gs->alloc_ud, gs->grid, sizeof *gs->grid * (size_t)gs->grid_cap, 0);
    gs->alloc(gs->alloc_ud, gs->hits, sizeof *gs->hits * (size_t)gs->hit_cap, 0);
    gs->alloc(gs->alloc_ud, gs, sizeof *gs, 0);
}

int64_t game_systems_dropped(const game_systems *gs) { return gs->dropped; }

/* ---- move ------------------------------------------------------------------------------- */

static float wrap(float v) {
    if (v < 0.0f) v += FIELD_SIZE;
    if (v >= FIELD_SIZE) v -= FIELD_SIZE;
    return v;
}

/* One range of movers, on any thread: integrate, wrap, mirror into LocalTransform. */
static void move_rows(kiln_iter *view, void *user) {
    float dt = *(const float *)user;
    Position *p = view->columns[0];
    const Velocity *v = view->columns[1];
    kiln_local_transform *local = view->columns[2]; /* NULL for ships: they have none */
    for (int32_t i = 0; i < view->count; i++) {
        p[i].x = wrap(p[i].x + v[i].x * dt);
        p[i].y = wrap(p[i].y + v[i].y * dt);
        if (local) {
            local[i].position[0] = p[i].x;
            local[i].position[1] = p[i].y;
        }
    }
    /* every row was written: one mark of the range each */
    kiln_iter_mark_rows(view, 0, 0, view->count);
    if (local) kiln_iter_mark_rows(view, 2, 0, view->count);
}

static void move_system(const kiln_system_ctx *ctx) {
    game_systems *gs = ctx->user;
    float dt = (float)ctx->dt;
    kiln_parallel_for(ctx->jobs, gs->movers, 4096, move_rows, &dt);
}

/* ---- orbit ------------------------------------------------------------------------------ */

/* A few hundred moons: one plain iteration, no need for the pool. */
static void orbit_system(const kiln_system_ctx *ctx) {
    game_systems *gs = ctx->user;
    float dt = (float)ctx->dt;
    kiln_iter it;
    kiln_query_iter(gs->moons, &it);
    while (kiln_query_next(&it)) {
        Orbit *orbit = it.columns[0];
        kiln_local_transform *local = it.columns[1];
        for (int32_t i = 0; i < it.count; i++) {
            orbit[i].angle = fmodf(orbit[i].angle + orbit[i].speed * dt + TWO_PI, TWO_PI);
            local[i].position[0] = orbit[i].radius * cosf(orbit[i].angle);
            local[i].position[1] = orbit[i].radius * sinf(orbit[i].angle);
        }
        kiln_iter_mark_rows(&it, 0, 0, it.count);
        kiln_iter_mark_rows(&it, 1, 0, it.count);
    }
}

/* ---- collide ---------------------------------------------------------------------------- */

/* The grid cell of a coordinate. Positions are the world's data, which a mod or a console may
 * write as any float: NaN and values outside the field go to the edge cells, since
 * converting them to int is undefined. */
static int32_t cell_of(const game_systems *gs, float v) {
    if (!(v >= 0.0f)) return 0;
    if (v >= FIELD_SIZE) return gs->side - 1;
    int32_t c = (int32_t)(v / CELL_SIZE);
    return c >= gs->side ? gs->side - 1 : c;
}

/* The shortest difference a - b across the wrapped edges. */
static float wrapped_delta(float a, float b) {
    float d = a - b;
    if (d > FIELD_SIZE * 0.5f) d -= FIELD_SIZE;
    else if (d < -FIELD_SIZE * 0.5f) d += FIELD_SIZE;
    return d;
}

/* Buckets the ships (a few hundred) into the grid; false when out of memory. */
static bool grid_build(game_systems *gs) {
    memset(gs->heads, 0xff, sizeof *gs->heads * (size_t)gs->side * (size_t)gs->side);
    gs->grid_count = 0;
    int64_t n = kiln_query_count(gs->ships);
    if (n > gs->grid_cap) {
        grid_ship *g = gs->alloc(gs->alloc_ud, gs->grid, sizeof *g * (size_t)gs->grid_cap, sizeof *g * (size_t)n);
        if (!g) return false;
        gs->grid = g;
        gs->grid_cap = (int32_t)n;
    }
    kiln_iter it;
    kiln_query_iter(gs->ships, &it);
    while (kiln_query_next(&it)) {
        const Position *p = it.columns[0];
        const Ship *ship = it.columns[1];
        for (int32_t i = 0; i < it.count; i++) {
            int32_t cell = cell_of(gs, p[i].y) * gs->side + cell_of(gs, p[i].x);
            gs->grid[gs->grid_count] =
                (grid_ship){it.entities[i], p[i].x, p[i].y, ship[i].radius, gs->heads[cell]};
            gs->heads[cell] = gs->grid_count++;
        }
    }
    return true;
}

/* One range of asteroids, on any thread: test each against the ships of the 3x3 cells around
 * it. Hits beyond hit_cap are counted but not stored; the caller retries with more room. */
static void sweep_rows(kiln_iter *view, void *user) {
    game_systems *gs = user;
    const Position *p = view->columns[0];
    const Asteroid *rock = view->columns[1];
    for (int32_t i = 0; i < view->count; i++) {
        int32_t cx = cell_of(gs, p[i].x), cy = cell_of(gs, p[i].y);
        for (int32_t dy = -1; dy <= 1; dy++) {
            int32_t row = ((cy + dy + gs->side) % gs->side) * gs->side;
            for (int32_t dx = -1; dx <= 1; dx++) {
                for (int32_t s = gs->heads[row + (cx + dx + gs->side) % gs->side]; s >= 0;
                     s = gs->grid[s].next) {
                    const grid_ship *ship = &gs->grid[s];
                    float ex = wrapped_delta(p[i].x, ship->x), ey = wrapped_delta(p[i].y, ship->y);
                    float reach = rock[i].radius + ship->radius;
                    if (ex * ex + ey * ey >= reach * reach) continue;
                    int slot = atomic_fetch_add_explicit(&gs->hit_count, 1, memory_order_relaxed);
                    if (slot < gs->hit_cap)
                        gs->hits[slot] = (Collision){ship->entity, view->entities[i], 0};
                }
            }
        }
    }
}

static int compare_hits(const void *a, const void *b) {
    const Collision *x = a, *y = b;
    if (x->ship != y->ship) return x->ship < y->ship ? -1 : 1;
    return (x->asteroid > y->asteroid) - (x->asteroid < y->asteroid);
}

/* Out of memory for the grid, the sweep's jobs or the hits, collide emits nothing that frame
 * (the rules see no collisions, the ships fly through) and counts the pass as dropped, so the
 * host can say so; the next frame tries again. */
static void collide_system(const kiln_system_ctx *ctx) {
    game_systems *gs = ctx->user;
    if (!grid_build(gs)) {
        gs->dropped++;
        return;
    }
    if (gs->grid_count == 0) return;
    for (;;) {
        atomic_store_explicit(&gs->hit_count, 0, memory_order_relaxed);
        if (kiln_parallel_for(ctx->jobs, gs->rocks, 4096, sweep_rows, gs) != KILN_OK) {
            gs->dropped++;
            return;
        }
        int n = atomic_load_explicit(&gs->hit_count, memory_order_relaxed);
        if (n <= gs->hit_cap) break;
        Collision *more = n <= INT32_MAX / 2 ? gs->alloc(gs->alloc_ud, gs->hits, sizeof *more * (size_t)gs->hit_cap,
                                                        sizeof *more * (size_t)n * 2) : NULL;
        if (!more) {
            gs->dropped++;
            return;
        }
        gs->hits = more;
        gs->hit_cap = n * 2;
    }
    /* The sweep found the hits in thread order; sorting makes the events deterministic. */
    int n = atomic_load_explicit(&gs->hit_count, memory_order_relaxed);
    qsort(gs->hits, (size_t)n, sizeof *gs->hits, compare_hits);
    kiln_tick tick = kiln_tick_current(ctx->world);
    for (int i = 0; i < n; i++) {
        gs->hits[i].tick = tick;
        kiln_commands_emit(ctx->commands, gs->ids.collision, &gs->hits[i]);
    }
}

/* ---- schedule --------------------------------------------------------------------------- */

kiln_result game_systems_add(game_systems *gs, kiln_schedule *schedule) {
    const game_ids *ids = &gs->ids;
    kiln_system_desc propagate;
    kiln_transform_system_desc(gs->world, &propagate);
    /* The order is declared, not left to declaration order among systems that conflict: a
     * mod's before/after overrides that, so a mod system "after hull, before move" ran hull
     * first; against declared order it closes a cycle and is refused. */
    propagate.after[0] = "move";
    propagate.after[1] = "orbit";
    kiln_result r;
    if ((r = kiln_schedule_add(schedule, &(kiln_system_desc){
             .name = "move", .run = move_system, .user = gs,
             .reads = {ids->velocity},
             .writes = {ids->position, ids->transform.local}})) != KILN_OK ||
        (r = kiln_schedule_add(schedule, &(kiln_system_desc){
             .name = "orbit", .run = orbit_system, .user = gs, .after = {"move"},
             .writes = {ids->orbit, ids->transform.local}})) != KILN_OK ||
        (r = kiln_schedule_add(schedule, &propagate)) != KILN_OK)
        return r;
    return kiln_schedule_add(schedule, &(kiln_system_desc){
        .name = "collide", .run = collide_system, .user = gs, .after = {"move"},
        .reads = {ids->position, ids->asteroid, ids->ship}});
}
