/* bench_fixture.c: worlds, values and kernels shared by the core benchmark cases.
 * Invariant: kiln and the baseline fill and hash values with these same functions. */
#include "bench_fixture.h"

#include <string.h>

#include "bench_util.h"

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

uint32_t bench_float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* A hash of one position; summed over a set it is independent of row order. */
uint64_t bench_position_hash(const position *p) {
    return mix64((uint64_t)bench_float_bits(p->x) | (uint64_t)bench_float_bits(p->y) << 32);
}


BENCH_NOINLINE void bench_fill2(position *restrict p, velocity *restrict v, int64_t first,
                                 int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        p[i] = bench_position_at(first + i);
        v[i] = bench_velocity_at(first + i);
    }
}

BENCH_NOINLINE void bench_integrate2(position *restrict p, const velocity *restrict v,
                                      int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        p[i].x += v[i].x;
        p[i].y += v[i].y;
    }
}

BENCH_NOINLINE void bench_integrate3(position *restrict p, const velocity *restrict v,
                                      const mass *restrict m, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        p[i].x += v[i].x * m[i].m;
        p[i].y += v[i].y * m[i].m;
    }
}

kiln_world *bench_world_new(case_state *state, component_ids *ids) {
    kiln_world *world = kiln_world_create(NULL);
    if (world == NULL) {
        bench_fail(state, "kiln_world_create returned NULL");
        return NULL;
    }
    static const char *const tag_names[TAG_COUNT] = {"Tag0", "Tag1", "Tag2",
                                                     "Tag3", "Tag4", "Tag5"};
    kiln_component_desc desc = {.name = "Position", .size = sizeof(position)};
    bool ok = bench_check_call(state, world, kiln_component_register(world, &desc, &ids->position),
                         "kiln_component_register(Position)");
    desc = (kiln_component_desc){.name = "Velocity", .size = sizeof(velocity)};
    ok = ok && bench_check_call(state, world, kiln_component_register(world, &desc, &ids->velocity),
                          "kiln_component_register(Velocity)");
    desc = (kiln_component_desc){.name = "Mass", .size = sizeof(mass)};
    ok = ok && bench_check_call(state, world, kiln_component_register(world, &desc, &ids->mass),
                          "kiln_component_register(Mass)");
    for (int t = 0; t < TAG_COUNT && ok; t++) {
        desc = (kiln_component_desc){.name = tag_names[t], .size = 0};
        ok = bench_check_call(state, world, kiln_component_register(world, &desc, &ids->tags[t]),
                        "kiln_component_register(tag)");
    }
    if (!ok) {
        kiln_world_destroy(world);
        return NULL;
    }
    return world;
}

kiln_query *bench_query_new(case_state *state, kiln_world *world, const kiln_query_desc *desc) {
    kiln_query *query = NULL;
    if (!bench_check_call(state, world, kiln_query_create(world, desc, &query), "kiln_query_create"))
        return NULL;
    return query;
}

/* Writes position_at/velocity_at of a running counter into every row the query (with
 * Position and Velocity as terms 0 and 1) visits. */
void bench_query_fill2(kiln_query *query) {
    kiln_iter it;
    int64_t next = 0;
    kiln_query_iter(query, &it);
    while (kiln_query_next(&it)) {
        bench_fill2(kiln_iter_column(&it, 0), kiln_iter_column(&it, 1), next, it.count);
        next += it.count;
    }
}

/* Sum of position_hash over the query's term 0, and the rows visited. */
uint64_t bench_query_position_hash(kiln_query *query, int64_t *rows) {
    kiln_iter it;
    uint64_t sum = 0;
    int64_t seen = 0;
    kiln_query_iter(query, &it);
    while (kiln_query_next(&it)) {
        const position *p = kiln_iter_column(&it, 0);
        for (int32_t i = 0; i < it.count; i++) sum += bench_position_hash(&p[i]);
        seen += it.count;
    }
    *rows = seen;
    return sum;
}

uint64_t bench_array_position_hash(const position *p, int64_t count) {
    uint64_t sum = 0;
    for (int64_t i = 0; i < count; i++) sum += bench_position_hash(&p[i]);
    return sum;
}

/* Spawns n Position+Velocity entities with one batch and sets bench_position_at(i)/bench_velocity_at(i)
 * on the i-th handle, writing the handles to handles. */
bool bench_spawn_filled(case_state *state, kiln_world *world, const component_ids *ids,
                         int64_t n, kiln_entity *handles) {
    kiln_component comps[2] = {ids->position, ids->velocity};
    bool ok = bench_check_call(state, world, kiln_spawn_batch(world, comps, 2, (int32_t)n, handles),
                         "kiln_spawn_batch");
    for (int64_t i = 0; ok && i < n; i++) {
        position p = bench_position_at(i);
        velocity v = bench_velocity_at(i);
        ok = bench_check_call(state, world, kiln_set(world, handles[i], ids->position, &p), "kiln_set")
             && bench_check_call(state, world, kiln_set(world, handles[i], ids->velocity, &v),
                           "kiln_set");
    }
    return ok;
}
