/* bench_access.c: the core benchmark cases for single-entity access: random gets and sets,
 * despawns, and the bytes an entity costs. Each checks that kiln ended with the baseline's data. */
#include "bench_access.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_fixture.h"
#include "bench_measure.h"
#include "bench_util.h"
#include "kiln.h"

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
    kiln_getter getter;     /* get_prepared: made once, after every spawn */
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

#define GET_BLOCK 256 /* handles per kiln_get_many call in get_random */

/* A block reader of the batched cases: fills values for n handles, returns how many it found. */
typedef int32_t (*read_block_fn)(get_random_ctx *c, const kiln_entity *handles, int32_t n,
                                 const void **values);

static int32_t read_block_get_many(get_random_ctx *c, const kiln_entity *handles, int32_t n,
                                   const void **values) {
    return kiln_get_many(c->world, handles, n, c->ids.position, values);
}

static int32_t read_block_getter_many(get_random_ctx *c, const kiln_entity *handles, int32_t n,
                                      const void **values) {
    return kiln_getter_get_many(&c->getter, handles, n, values);
}

/* The batched reads, a block of handles at a time through read (named by what, for a failure). */
static double read_in_blocks(get_random_ctx *c, read_block_fn read, const char *what) {
    const kiln_entity *handles = c->shuffled;
    const void *values[GET_BLOCK];
    uint64_t sum = 0;
    int64_t missing = 0, begin, end;
    next_slice(c, &c->kiln_slice, &begin, &end);

    double t0 = bench_now_ns();
    for (int64_t i = begin; i < end; i += GET_BLOCK) {
        int32_t n = end - i < GET_BLOCK ? (int32_t)(end - i) : GET_BLOCK;
        missing += n - read(c, handles + i, n, values);
        for (int32_t k = 0; k < n; k++) {
            const position *p = values[k];
            if (p != NULL) sum += bench_float_bits(p->x) + bench_float_bits(p->y);
        }
    }
    double t1 = bench_now_ns();

    if (missing != 0) bench_fail(&c->state, "%s found %lld live entities missing", what,
                           (long long)missing);
    if (c->state.verify) c->kiln_sum = sum;
    bench_consume(sum);
    return t1 - t0;
}

/* get_random: the reads through kiln_get_many. */
static double get_random_kiln(void *ctx) {
    return read_in_blocks(ctx, read_block_get_many, "kiln_get_many");
}

/* get_prepared_many: the reads through kiln_getter_get_many. */
static double get_prepared_many_kiln(void *ctx) {
    return read_in_blocks(ctx, read_block_getter_many, "kiln_getter_get_many");
}

/* get_single: one kiln_get call per handle. */
static double get_single_kiln(void *ctx) {
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
        sum += bench_float_bits(p->x) + bench_float_bits(p->y);
    }
    double t1 = bench_now_ns();

    if (missing != 0) bench_fail(&c->state, "kiln_get returned NULL for %lld live entities",
                           (long long)missing);
    if (c->state.verify) c->kiln_sum = sum;
    bench_consume(sum);
    return t1 - t0;
}

/* get_prepared: the same reads through a prepared getter, inline. */
static double get_prepared_kiln(void *ctx) {
    get_random_ctx *c = ctx;
    const kiln_getter *getter = &c->getter;
    const kiln_entity *handles = c->shuffled;
    uint64_t sum = 0;
    int64_t missing = 0, begin, end;
    next_slice(c, &c->kiln_slice, &begin, &end);

    double t0 = bench_now_ns();
    for (int64_t i = begin; i < end; i++) {
        const position *p = kiln_getter_get(getter, handles[i]);
        if (p == NULL) {
            missing++;
            continue;
        }
        sum += bench_float_bits(p->x) + bench_float_bits(p->y);
    }
    double t1 = bench_now_ns();

    if (missing != 0) bench_fail(&c->state, "kiln_getter_get returned NULL for %lld live entities",
                           (long long)missing);
    if (c->state.verify) c->kiln_sum = sum;
    bench_consume(sum);
    return t1 - t0;
}

/* The value set_single writes for the i-th handle of the shuffled order. */
static position set_value_at(int64_t i) { return (position){(float)i, (float)(i & 1023) * 0.5f}; }

/* set_single: one kiln_set call per handle. */
static double set_single_kiln(void *ctx) {
    get_random_ctx *c = ctx;
    kiln_world *world = c->world;
    kiln_component pos_id = c->ids.position;
    const kiln_entity *handles = c->shuffled;
    int64_t failed = 0, begin, end;
    next_slice(c, &c->kiln_slice, &begin, &end);

    double t0 = bench_now_ns();
    for (int64_t i = begin; i < end; i++) {
        position p = set_value_at(i);
        failed += kiln_set(world, handles[i], pos_id, &p) != KILN_OK;
    }
    double t1 = bench_now_ns();

    if (failed != 0) bench_fail(&c->state, "kiln_set failed for %lld live entities", (long long)failed);
    return t1 - t0;
}

static double set_single_baseline(void *ctx) {
    get_random_ctx *c = ctx;
    const kiln_entity *handles = c->shuffled;
    const uint32_t *sparse = c->sparse;
    position *dense = c->dense;
    int64_t begin, end;
    next_slice(c, &c->baseline_slice, &begin, &end);

    double t0 = bench_now_ns();
    for (int64_t i = begin; i < end; i++) dense[sparse[kiln_entity_index(handles[i])]] = set_value_at(i);
    double t1 = bench_now_ns();
    bench_consume(dense[c->n / 2].x == 0.0f);
    return t1 - t0;
}

/* Every entity holds what the baseline holds for it. */
static bool set_single_check(void *ctx) {
    get_random_ctx *c = ctx;
    for (int64_t i = 0; i < c->n; i++) {
        const position *p = kiln_get(c->world, c->shuffled[i], c->ids.position);
        const position *want = &c->dense[c->sparse[kiln_entity_index(c->shuffled[i])]];
        if (p == NULL || bench_float_bits(p->x) != bench_float_bits(want->x) ||
            bench_float_bits(p->y) != bench_float_bits(want->y))
            return bench_fail(&c->state, "kiln_set left entity %lld other than the baseline", (long long)i);
    }
    return true;
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
        sum += bench_float_bits(p->x) + bench_float_bits(p->y);
    }
    double t1 = bench_now_ns();

    if (c->state.verify) c->baseline_sum = sum;
    bench_consume(sum);
    return t1 - t0;
}

static bool get_random_check(void *ctx) {
    get_random_ctx *c = ctx;
    if (c->kiln_sum != c->baseline_sum)
        return bench_fail(&c->state, "kiln_get read other values than the baseline");
    return true;
}

typedef enum get_form { GET_MANY, GET_SINGLE, GET_PREPARED, GET_PREPARED_MANY, SET_SINGLE } get_form;

static void run_get(const bench_config *config, bench_result *dest, get_form form) {
    get_random_ctx *c = bench_xcalloc(1, sizeof *c);
    c->n = config->entities;
    kiln_entity *handles = bench_xmalloc((size_t)c->n * sizeof *handles);
    c->world = bench_world_new(&c->state, &c->ids);
    if (c->world != NULL && bench_spawn_filled(&c->state, c->world, &c->ids, c->n, handles)) {
        uint32_t max_index = 0;
        for (int64_t i = 0; i < c->n; i++)
            if (kiln_entity_index(handles[i]) > max_index) max_index = kiln_entity_index(handles[i]);
        c->sparse = bench_xmalloc(((size_t)max_index + 1) * sizeof *c->sparse);
        c->dense = bench_xmalloc((size_t)c->n * sizeof *c->dense);
        for (int64_t i = 0; i < c->n; i++) {
            c->sparse[kiln_entity_index(handles[i])] = (uint32_t)i;
            c->dense[i] = bench_position_at(i);
        }
        c->shuffled = handles;
        handles = NULL;
        bench_shuffle_u64(c->shuffled, (size_t)c->n, 0x6b696c6eu);
        bool prepared = form == GET_PREPARED || form == GET_PREPARED_MANY;
        double (*kiln_side)(void *) = form == GET_PREPARED        ? get_prepared_kiln
                                      : form == GET_PREPARED_MANY ? get_prepared_many_kiln
                                      : form == GET_SINGLE        ? get_single_kiln
                                      : form == SET_SINGLE        ? set_single_kiln
                                                                  : get_random_kiln;
        if (prepared && !bench_check_call(&c->state, c->world,
                                          kiln_getter_init(c->world, c->ids.position, &c->getter),
                                          "kiln_getter_init"))
            bench_setup_failed(&c->state, dest);
        else if (form == SET_SINGLE)
            bench_measure(config, c, kiln_side, set_single_baseline, set_single_check, GET_SLICES,
                          (double)c->n, dest);
        else
            bench_measure(config, c, kiln_side, get_random_baseline, get_random_check, GET_SLICES,
                          (double)c->n, dest);
        kiln_getter_fini(&c->getter);
    } else {
        bench_setup_failed(&c->state, dest);
    }
    kiln_world_destroy(c->world);
    free(handles);
    free(c->shuffled);
    free(c->sparse);
    free(c->dense);
    free(c);
}

void run_get_random(const bench_config *config, bench_result *dest) { run_get(config, dest, GET_MANY); }

void run_get_single(const bench_config *config, bench_result *dest) { run_get(config, dest, GET_SINGLE); }

void run_set_single(const bench_config *config, bench_result *dest) { run_get(config, dest, SET_SINGLE); }

void run_get_prepared(const bench_config *config, bench_result *dest) {
    run_get(config, dest, GET_PREPARED);
}

void run_get_prepared_many(const bench_config *config, bench_result *dest) {
    run_get(config, dest, GET_PREPARED_MANY);
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
    kiln_world *world = bench_world_new(&c->state, &ids);
    if (world == NULL) return 0.0;
    kiln_component comps[2] = {ids.position, ids.velocity};
    if (!bench_check_call(&c->state, world,
                    kiln_spawn_batch(world, comps, 2, (int32_t)c->n, c->handles),
                    "kiln_spawn_batch")) {
        kiln_world_destroy(world);
        return 0.0;
    }

    double t0 = bench_now_ns();
    for (int64_t i = 0; i < c->n; i++) {
        kiln_result r = kiln_despawn(world, c->handles[i]);
        if (r != KILN_OK) {
            bench_check_call(&c->state, world, r, "kiln_despawn");
            break;
        }
    }
    double t1 = bench_now_ns();

    if (c->state.verify) {
        if (kiln_entity_count(world) != 0)
            bench_fail(&c->state, "%lld entities alive after despawning all",
                 (long long)kiln_entity_count(world));
        for (int64_t i = 0; i < c->n; i += 997)
            if (kiln_is_alive(world, c->handles[i])) {
                bench_fail(&c->state, "entity %lld alive after kiln_despawn", (long long)i);
                break;
            }
    }
    kiln_world_destroy(world);
    return t1 - t0;
}

static double despawn_baseline(void *ctx) {
    despawn_ctx *c = ctx;
    plain_table *t = &c->table;
    bench_fill2(t->pos, t->vel, 0, c->n);
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
    if (c->state.verify && t->count != 0) bench_fail(&c->state, "baseline despawn left rows");
    return t1 - t0;
}

void run_despawn(const bench_config *config, bench_result *dest) {
    despawn_ctx c = {.n = config->entities};
    c.handles = bench_xmalloc((size_t)c.n * sizeof *c.handles);
    c.sparse = bench_xmalloc((size_t)c.n * sizeof *c.sparse);
    c.table.entity = bench_xmalloc((size_t)c.n * sizeof(uint32_t));
    c.table.pos = bench_xmalloc((size_t)c.n * sizeof(position));
    c.table.vel = bench_xmalloc((size_t)c.n * sizeof(velocity));
    bench_measure(config, &c, despawn_kiln, despawn_baseline, NULL, 1, (double)c.n, dest);
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
void run_bytes_per_entity(const bench_config *config, bench_result *dest) {
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
        kiln_world *world = bench_world_new(&state, &ids);
        if (world == NULL) break;
        kiln_world_stats stats0;
        kiln_world_stats_get(world, &stats0);
        bench_trim_heap();
        int64_t rss0 = bench_rss_bytes();
        kiln_component comps[2] = {ids.position, ids.velocity};
        for (int64_t i = 0; i < n; i++) {
            position p = bench_position_at(i);
            velocity v = bench_velocity_at(i);
            const void *const values[2] = {&p, &v};
            kiln_entity e;
            if (!bench_check_call(&state, world, kiln_spawn_with(world, comps, values, 2, &e),
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
            bench_fail(&state, "kiln_world_stats_get counts %lld entities, expected %lld",
                 (long long)stats.entities, (long long)n);
        kiln_world_destroy(world);
        if (rss0 < 0 || rss1 < 0) bench_fail(&state, "cannot read /proc/self/statm");
        rss[done] = (double)(rss1 - rss0) / (double)n;
        alloc[done] = (double)(stats.bytes - stats0.bytes) / (double)n;
        done++;
    }
    bench_memory_policy(!config->cold);
    dest->ns = bench_median(rss, done);
    dest->spread = bench_relative_spread(rss, done, dest->ns);
    dest->alloc_bytes = bench_median(alloc, done);
    dest->baseline_ns = (double)(sizeof(position) + sizeof(velocity));
    dest->ratio = dest->ns / dest->baseline_ns;
    dest->ok = !state.failed && done > 0;
    snprintf(dest->failure, sizeof dest->failure, "%s", state.failure);
}
