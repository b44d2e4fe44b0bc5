/* random.c: seeded randomness: xoshiro256** streams, seeded through splitmix64, forked from
 * (world seed, stream name, tick). Invariant: the seed and the main stream live in resources,
 * so saving, loading, snapshots and the hash carry them like any other state. */
#include <stdio.h>
#include <string.h>

#include "persist_internal.h"
#include "resource.h"

typedef struct random_seed {
    uint64_t seed;
} random_seed;

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static kiln_random from_seed(uint64_t seed) {
    kiln_random r;
    for (int i = 0; i < 4; i++) r.s[i] = splitmix(&seed);
    return r;
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t kiln_random_next(kiln_random *random) {
    uint64_t *s = random->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double kiln_random_double(kiln_random *random) {
    return (double)(kiln_random_next(random) >> 11) * 0x1.0p-53;
}

int64_t kiln_random_range(kiln_random *random, int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    uint64_t span = (uint64_t)hi - (uint64_t)lo; /* values: span + 1, which may wrap to 0 */
    if (span == UINT64_MAX) return (int64_t)kiln_random_next(random);
    uint64_t n = span + 1, limit = UINT64_MAX - UINT64_MAX % n; /* reject the biased tail */
    uint64_t x;
    do x = kiln_random_next(random);
    while (x >= limit);
    return (int64_t)((uint64_t)lo + x % n);
}

static const kiln_field seed_fields[] = {{"seed", KILN_TYPE_UINT64, 0, 0}};
static const kiln_field state_fields[] = {{"s", KILN_TYPE_UINT64, 0, 4}};

void pz_random_layout(const char *name, kiln_component_info *dest) {
    bool seed = strcmp(name, "RandomSeed") == 0;
    *dest = (kiln_component_info){.name = seed ? "RandomSeed" : "RandomState",
                                  .size = seed ? sizeof(random_seed) : sizeof(kiln_random),
                                  .fields = seed ? seed_fields : state_fields, .field_count = 1, .has_check = !seed};
}

/* RandomState's check hook: the one state refused, all zero, from which xoshiro256** draws 0
 * forever (so a save holding it would not load). kiln_resource_set, kiln_load and world:resource
 * all ask it. */
static kiln_result check_state(const kiln_world *world, kiln_entity entity, const void *value, void *ctx,
                               char *why, size_t why_size) {
    (void)world, (void)entity, (void)ctx;
    return pz_random_state_check(value, why, why_size);
}

kiln_result pz_random_state_check(const void *value, char *why, size_t why_size) {
    static const kiln_random zero;
    if (value && memcmp(value, &zero, sizeof zero) != 0) return KILN_OK;
    snprintf(why, why_size, "RandomState is all zero (xoshiro256** would give 0 forever)");
    return KILN_ERR_INVALID_ARGUMENT;
}

/* The two resources, registered on first use. */
static kiln_result ids(kiln_world *world, kiln_component *seed, kiln_component *state, const char *call) {
    /* natural alignment, as a script's schema of the same fields gets: a mod may declare them */
    kiln_component_desc sd = {.name = "RandomSeed", .size = sizeof(random_seed), .align = _Alignof(random_seed),
                              .fields = seed_fields, .field_count = 1};
    kiln_component_desc td = {.name = "RandomState", .size = sizeof(kiln_random), .align = _Alignof(kiln_random),
                              .fields = state_fields, .field_count = 1, .check = check_state};
    kiln_result r = kiln_component_register(world, &sd, seed);
    if (r == KILN_OK) r = kiln_component_register(world, &td, state);
    if (r != KILN_OK) {
        char msg[KL_ERROR_SIZE];
        snprintf(msg, sizeof msg, "%s", kiln_world_error(world));
        const char *detail = strstr(msg, ": ");
        return kl_fail(world, r, "%s: %s", call, detail ? detail + 2 : msg);
    }
    return KILN_OK;
}

kiln_result kiln_random_init(kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kiln_component seed_id, state_id;
    return ids(world, &seed_id, &state_id, "kiln_random_init");
}

kiln_result kiln_random_seed(kiln_world *world, uint64_t seed) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kiln_component seed_id, state_id;
    kiln_result r = ids(world, &seed_id, &state_id, "kiln_random_seed");
    if (r != KILN_OK) return r;
    random_seed sv = {seed};
    kiln_random state = from_seed(seed);
    bool had = kiln_resource_has(world, seed_id);
    if ((r = kiln_resource_set(world, seed_id, &sv)) != KILN_OK ||
        (r = kiln_resource_set(world, state_id, &state)) != KILN_OK) {
        if (!had) kiln_resource_remove(world, seed_id, NULL);
        return kl_fail(world, r, "kiln_random_seed: out of memory");
    }
    return KILN_OK;
}

kiln_random *kiln_random_world(kiln_world *world) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kiln_component seed_id, state_id;
    if (ids(world, &seed_id, &state_id, "kiln_random_world") != KILN_OK) return NULL;
    if (!kiln_resource_has(world, state_id)) {
        const random_seed *sv = kiln_resource_get(world, seed_id);
        kiln_random state = from_seed(sv ? sv->seed : 0);
        if (kiln_resource_set(world, state_id, &state) != KILN_OK) return NULL;
    }
    return kiln_resource_get(world, state_id);
}

kiln_random kiln_random_fork(const kiln_world *world, const char *stream, kiln_tick tick) {
    KILN_ASSERT(world != NULL, "world is NULL");
    kiln_component seed_id = kiln_component_lookup(world, "RandomSeed");
    /* unchecked: a system forking its stream reads the seed without declaring it */
    const random_seed *sv = seed_id ? kl_resource_peek(world, seed_id) : NULL;
    uint64_t x = sv ? sv->seed : 0;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the stream name */
    for (const char *p = stream ? stream : ""; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    uint64_t mix = splitmix(&x) ^ h;
    mix = splitmix(&mix) ^ ((uint64_t)tick * 0xD1B54A32D192ED03ull);
    return from_seed(mix);
}

kiln_random kiln_random_system(const kiln_system_ctx *ctx) {
    KILN_ASSERT(ctx != NULL, "ctx is NULL");
    return kiln_random_fork(ctx->world, ctx->name, kiln_tick_current(ctx->world));
}

kiln_component pz_random_register(kiln_world *world, const char *name) {
    kiln_component seed_id, state_id;
    if (ids(world, &seed_id, &state_id, "kiln_load") != KILN_OK) return KILN_NO_COMPONENT;
    return strcmp(name, "RandomSeed") == 0 ? seed_id : state_id;
}
