/* bench_named_load.c: a binary save of 100k named entities (Position and a Name each) loaded
 * into a fresh world without Name, against the same load into a fresh world that has it: the
 * first gives the entities their Names after the rest of the load, the cost this case watches. */
#include "bench_named_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_measure.h"
#include "bench_util.h"
#include "kiln_persist.h"

typedef struct named_ctx {
    case_state state;
    int64_t n;
    kiln_world *source, *first, *later; /* first: loaded without Name; later: with it */
    uint8_t *buf;
    size_t used, cap;
    uint64_t want;                      /* the source's hash */
} named_ctx;

static bool write_buf(void *ud, const void *data, size_t size) {
    named_ctx *c = ud;
    if (c->used + size > c->cap) {
        size_t cap = c->cap ? c->cap * 2 : (size_t)1 << 20;
        while (cap < c->used + size) cap *= 2;
        uint8_t *p = realloc(c->buf, cap);
        if (!p) return false;
        c->buf = p, c->cap = cap;
    }
    memcpy(c->buf + c->used, data, size);
    c->used += size;
    return true;
}

/* A fresh world with Position, and Name too when named. */
static kiln_world *open_world(bool named) {
    static const kiln_field xyz[] = {{"x", KILN_TYPE_FLOAT, 0, 0}, {"y", KILN_TYPE_FLOAT, 4, 0},
                                     {"z", KILN_TYPE_FLOAT, 8, 0}};
    kiln_world *w = kiln_world_create(NULL);
    kiln_component_desc pd = {.name = "Position", .size = 12, .fields = xyz, .field_count = 3};
    kiln_component pos;
    if (!w || kiln_component_register(w, &pd, &pos) != KILN_OK || (named && kiln_name_init(w, NULL) != KILN_OK))
        exit(2);
    return w;
}

static bool populate(named_ctx *c) {
    c->source = open_world(true);
    kiln_component ids[2];
    ids[0] = kiln_component_lookup(c->source, "Position");
    if (kiln_name_init(c->source, &ids[1]) != KILN_OK) return bench_fail(&c->state, "kiln_name_init failed");
    for (int64_t i = 0; i < c->n; i++) {
        float p[3] = {(float)i, (float)(i % 13), 1.0f};
        kiln_name name;
        memset(&name, 0, sizeof name);
        snprintf(name.text, sizeof name.text, "unit-%lld", (long long)i);
        kiln_entity e;
        if (!bench_check_call(&c->state, c->source, kiln_spawn_with(c->source, ids, (const void *[]){p, &name}, 2, &e),
                              "kiln_spawn_with"))
            return false;
    }
    c->want = kiln_world_hash(c->source);
    kiln_save_desc sd = {.format = KILN_PERSIST_BINARY};
    return bench_check_call(&c->state, c->source, kiln_save(c->source, &sd, write_buf, c), "kiln_save");
}

/* One side: a fresh world (untimed), then the timed load. */
static double load_into(named_ctx *c, kiln_world **slot, bool named) {
    kiln_world_destroy(*slot);
    *slot = open_world(named);
    double t0 = bench_now_ns();
    kiln_result r = kiln_load(*slot, c->buf, c->used, NULL);
    double t1 = bench_now_ns();
    if (r != KILN_OK) bench_check_call(&c->state, *slot, r, "kiln_load");
    return t1 - t0;
}

static double first_sample(void *ctx) {
    named_ctx *c = ctx;
    return load_into(c, &c->first, false);
}

static double later_sample(void *ctx) {
    named_ctx *c = ctx;
    return load_into(c, &c->later, true);
}

/* Both loads gave the saved world, names found. */
static bool check(void *ctx) {
    named_ctx *c = ctx;
    char last[32];
    snprintf(last, sizeof last, "unit-%lld", (long long)(c->n - 1));
    kiln_world *sides[2] = {c->first, c->later};
    for (int i = 0; i < 2; i++)
        if (!sides[i] || kiln_world_hash(sides[i]) != c->want || kiln_name_lookup(sides[i], last) == KILN_NULL_ENTITY)
            return bench_fail(&c->state, "the %s load differs from the saved world", i ? "later" : "first");
    return true;
}

void run_load_named_first(const bench_config *config, bench_result *dest) {
    named_ctx *c = bench_xcalloc(1, sizeof *c);
    c->n = config->small_entities;
    if (populate(c)) bench_measure(config, c, first_sample, later_sample, check, 1, (double)c->n, dest);
    else bench_setup_failed(&c->state, dest);
    kiln_world_destroy(c->source);
    kiln_world_destroy(c->first);
    kiln_world_destroy(c->later);
    free(c->buf);
    free(c);
}
