/* bench_fixture.h: the worlds, components, values and kernels the core benchmark cases
 * share; kiln and the baseline call the same out-of-line kernels on the same values.
 *
 * Functions in this header:
 *   bench_position_at, bench_velocity_at, bench_mass_at, bench_position_hash, bench_float_bits,
 *   bench_fill2, bench_integrate2, bench_integrate3, bench_world_new, bench_query_new,
 *   bench_query_fill2, bench_query_position_hash, bench_array_position_hash,
 *   bench_spawn_filled.
 */
#ifndef BENCH_FIXTURE_H
#define BENCH_FIXTURE_H

#include <stdint.h>

#include "bench_measure.h"
#include "kiln.h"

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
static inline position bench_position_at(int64_t i) {
    return (position){(float)i, (float)i * 0.5f};
}

static inline velocity bench_velocity_at(int64_t i) {
    return (velocity){(float)(i & 7) * 0.25f, 0.5f};
}

static inline mass bench_mass_at(int64_t i) {
    return (mass){1.0f + (float)(i & 3) * 0.5f};
}

/* A baseline's archetype: parallel arrays of entity ids and values. */
typedef struct plain_table {
    uint32_t *entity;
    position *pos;
    velocity *vel;
    mass *mas;       /* NULL for the table without Mass */
    int64_t count;
} plain_table;

/* The bits of a float, for hashing and for folding values into bench_consume. */
uint32_t bench_float_bits(float f);

/* A hash of one position; summed over a set it is independent of row order. */
uint64_t bench_position_hash(const position *p);

/* Kernels shared by kiln and the baseline: out of line, so both call the same code and only
 * the storage around them differs. */
void bench_fill2(position *restrict p, velocity *restrict v, int64_t first, int64_t count);
void bench_integrate2(position *restrict p, const velocity *restrict v, int64_t count);
void bench_integrate3(position *restrict p, const velocity *restrict v, const mass *restrict m,
                      int64_t count);

/* A world with Position, Velocity, Mass and TAG_COUNT tags registered (ids to ids), or NULL
 * with the failure recorded. */
kiln_world *bench_world_new(case_state *state, component_ids *ids);

/* A query of world, or NULL with the failure recorded. */
kiln_query *bench_query_new(case_state *state, kiln_world *world, const kiln_query_desc *desc);

/* Writes bench_position_at/bench_velocity_at of a running counter into every row the query
 * (with Position and Velocity as terms 0 and 1) visits. */
void bench_query_fill2(kiln_query *query);

/* Sum of bench_position_hash over the query's term 0, and the rows visited. */
uint64_t bench_query_position_hash(kiln_query *query, int64_t *rows);

/* Sum of bench_position_hash over count positions. */
uint64_t bench_array_position_hash(const position *p, int64_t count);

/* Spawns n Position+Velocity entities with one batch and sets bench_position_at(i) and
 * bench_velocity_at(i) on the i-th handle, writing the handles to handles. */
bool bench_spawn_filled(case_state *state, kiln_world *world, const component_ids *ids,
                        int64_t n, kiln_entity *handles);

#endif /* BENCH_FIXTURE_H */
