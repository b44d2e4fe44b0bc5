/* bench_names.c: entity names against what a game would write by hand. A world holds n named
 * entities; each sample is a frame (the tick advances) that spawns 1000 entities with a Name,
 * each checked unique through the world's name index, against the same spawns of a 64-byte
 * component without a check, each name first checked and entered in a plain hash set of the
 * world's names (open addressing, the same hash), in a world of n such entities. The spawned
 * are despawned (and their names erased from the set) after each sample, untimed. */
#include "bench_names.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_measure.h"
#include "bench_util.h"
#include "kiln_persist.h"

enum { BATCH = 1000 };

/* The baseline's set of names: open addressing, linear probing, tombstones on erase. */
typedef struct name_set {
    uint64_t *hashes; /* 0 empty, 1 erased */
    const char **texts;
    size_t mask;
} name_set;

typedef struct side {
    kiln_world *world;
    kiln_component c;
    kiln_entity spawned[BATCH];
    name_set *set;     /* the baseline's; NULL for the named side */
    char (*texts)[64]; /* the set's own copies of the names */
} side;

typedef struct names_ctx {
    case_state state;
    int64_t n;
    side named, plain;
    int64_t serial; /* makes every spawned name new */
} names_ctx;

static uint64_t hash_text(const char *t) {
    uint64_t h = 1469598103934665603ull;
    for (; *t; t++) h = (h ^ (uint8_t)*t) * 1099511628211ull;
    return h | 2; /* never 0 or 1 */
}

/* Enters text unless the set holds it; false when it does. */
static bool set_enter(name_set *set, const char *text) {
    uint64_t h = hash_text(text);
    size_t i = h & set->mask, free_at = SIZE_MAX;
    for (; set->hashes[i]; i = (i + 1) & set->mask) {
        if (set->hashes[i] == 1 && free_at == SIZE_MAX) free_at = i;
        else if (set->hashes[i] == h && strcmp(set->texts[i], text) == 0) return false;
    }
    if (free_at == SIZE_MAX) free_at = i;
    set->hashes[free_at] = h;
    set->texts[free_at] = text;
    return true;
}

/* Whether the set holds text. */
static bool set_has(const name_set *set, const char *text) {
    uint64_t h = hash_text(text);
    for (size_t i = h & set->mask; set->hashes[i]; i = (i + 1) & set->mask)
        if (set->hashes[i] == h && strcmp(set->texts[i], text) == 0) return true;
    return false;
}

static void set_erase(name_set *set, const char *text) {
    uint64_t h = hash_text(text);
    for (size_t i = h & set->mask; set->hashes[i]; i = (i + 1) & set->mask)
        if (set->hashes[i] == h && strcmp(set->texts[i], text) == 0) {
            set->hashes[i] = 1;
            return;
        }
}

static bool open_side(names_ctx *c, side *s, bool named) {
    s->world = kiln_world_create(&(kiln_world_desc){0});
    if (!s->world) return bench_fail(&c->state, "kiln_world_create failed");
    kiln_result r;
    if (named) r = kiln_name_init(s->world, &s->c);
    else r = kiln_component_register(s->world, &(kiln_component_desc){.name = "Label", .size = sizeof(kiln_name)}, &s->c);
    if (!bench_check_call(&c->state, s->world, r, named ? "kiln_name_init" : "kiln_component_register")) return false;
    if (!named) { /* the set at most a quarter full: room for n + a batch and tombstones */
        size_t cap = 64;
        while (cap < 4 * (size_t)(c->n + BATCH)) cap *= 2;
        s->set = bench_xcalloc(1, sizeof *s->set);
        s->set->hashes = bench_xcalloc(cap, sizeof(uint64_t));
        s->set->texts = bench_xcalloc(cap, sizeof(char *));
        s->set->mask = cap - 1;
        s->texts = bench_xcalloc((size_t)c->n, sizeof *s->texts);
    }
    for (int64_t i = 0; i < c->n; i++) {
        kiln_name v;
        memset(&v, 0, sizeof v);
        snprintf(v.text, sizeof v.text, "resident-%lld", (long long)i);
        if (s->set) {
            memcpy(s->texts[i], v.text, sizeof v.text);
            set_enter(s->set, s->texts[i]);
        }
        if (!bench_check_call(&c->state, s->world, kiln_spawn_with(s->world, &s->c, (const void *[]){&v}, 1, NULL),
                              "kiln_spawn_with"))
            return false;
    }
    return true;
}

static double frame(names_ctx *c, side *s) {
    kiln_tick_advance(s->world);
    kiln_name v[BATCH];
    memset(v, 0, sizeof v);
    for (int i = 0; i < BATCH; i++) snprintf(v[i].text, sizeof v[i].text, "spawned-%lld", (long long)c->serial++);
    kiln_result r = KILN_OK;
    double t0 = bench_now_ns();
    for (int i = 0; i < BATCH && r == KILN_OK; i++) {
        if (s->set && !set_enter(s->set, v[i].text)) r = KILN_ERR_INVALID_ARGUMENT;
        else r = kiln_spawn_with(s->world, &s->c, (const void *[]){&v[i]}, 1, &s->spawned[i]);
    }
    double t1 = bench_now_ns();
    bench_check_call(&c->state, s->world, r, "kiln_spawn_with");
    for (int i = BATCH - 1; i >= 0 && r == KILN_OK; i--) {
        if (s->set) set_erase(s->set, v[i].text);
        r = kiln_despawn(s->world, s->spawned[i]);
    }
    bench_check_call(&c->state, s->world, r, "kiln_despawn");
    return t1 - t0;
}

static double kiln_sample(void *ctx) {
    names_ctx *c = ctx;
    return frame(c, &c->named);
}

static double baseline_sample(void *ctx) {
    names_ctx *c = ctx;
    return frame(c, &c->plain);
}

/* The named side found every name it spawned, and refuses one held. */
static bool check(void *ctx) {
    names_ctx *c = ctx;
    kiln_world *w = c->named.world;
    kiln_entity e;
    if (kiln_spawn(w, &e) != KILN_OK || kiln_name_set(w, e, "probe") != KILN_OK)
        return bench_fail(&c->state, "kiln_name_set: %s", kiln_world_error(w));
    char held[32];
    snprintf(held, sizeof held, "resident-%lld", (long long)(c->n / 2));
    bool ok = kiln_name_lookup(w, "probe") == e && kiln_name_lookup(w, held) != KILN_NULL_ENTITY &&
              kiln_name_set(w, e, held) == KILN_ERR_INVALID_ARGUMENT;
    kiln_despawn(w, e);
    return ok || bench_fail(&c->state, "the name index lost a name or let one be taken twice");
}

/* Each side looks every resident name up once, untimed, in turn name by name: the sides are
 * opened one after the other, and without this the timed frames began with the plain side's
 * set in the cache and the name index evicted by that setup. Until the twenty-seventh session
 * the name index's first catch-up in a new tick rebuilt it (every row read, the table written
 * afresh) by accident, which warmed it and evicted the plain side's set; the build that
 * stopped the rebuild read 2.0-2.3 against the old build's 1.1-1.5, each look-up one more
 * miss to memory (callgrind's cache model: 13,397 last-level misses in find_locked against
 * none). Warmed so, both builds read alike. */
static bool warm(names_ctx *c) {
    char text[64];
    kiln_tick_advance(c->named.world); /* past the tick the residents were spawned in */
    for (int64_t i = 0; i < c->n; i++) { /* one side, then the other, name by name */
        snprintf(text, sizeof text, "resident-%lld", (long long)i);
        if (kiln_name_lookup(c->named.world, text) == KILN_NULL_ENTITY)
            return bench_fail(&c->state, "kiln_name_lookup lost '%s'", text);
        if (!set_has(c->plain.set, text)) return bench_fail(&c->state, "the baseline's set lost '%s'", text);
    }
    return true;
}

void run_name_spawn(const bench_config *config, bench_result *dest) {
    names_ctx *c = bench_xcalloc(1, sizeof *c);
    c->n = config->small_entities;
    if (open_side(c, &c->named, true) && open_side(c, &c->plain, false) && warm(c))
        bench_measure(config, c, kiln_sample, baseline_sample, check, 1, BATCH, dest);
    else bench_setup_failed(&c->state, dest);
    kiln_world_destroy(c->named.world);
    kiln_world_destroy(c->plain.world);
    if (c->plain.set) free(c->plain.set->hashes), free(c->plain.set->texts), free(c->plain.set);
    free(c->plain.texts);
    free(c);
}
