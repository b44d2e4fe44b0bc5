/* bench_persist.c: persistence against what it replaces: a memcpy of the same component bytes
 * (binary saves, snapshots), the same values through jansson from plain arrays (JSON), XXH3
 * over the same bytes laid out contiguously (hash). Every case checks the round trip. */
#include "bench_persist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bench_measure.h"
#include "bench_util.h"
#include "kiln_persist.h"
#include "kiln_transform.h"

enum { SAVE_BINARY, LOAD_BINARY, SAVE_JSON, LOAD_JSON, SNAPSHOT, RESTORE, HASH };

typedef struct vec3f { float x, y, z; } vec3f;
typedef struct link { kiln_entity target; } link;

typedef struct persist_ctx {
    case_state state;
    int which;
    int64_t n;
    kiln_world *world, *target;
    kiln_component pos, vel, link;
    kiln_transform_ids tf;
    kiln_entity *ents;
    /* the plain side: the same values as arrays, and where they are copied to */
    vec3f *pos_a, *vel_a;
    link *link_a;
    kiln_entity *parent_a;
    uint8_t *plain, *plain_copy;  /* contiguous copies of the arrays (48 bytes per entity) */
    size_t plain_size;
    uint8_t *buf;                 /* kiln's output and input */
    size_t used, cap;
    uint8_t *json_plain;          /* the baseline's JSON output */
    size_t json_used, json_cap;
    kiln_snapshot *snap;
    uint8_t *snap_a, *snap_b;     /* the snapshot's bytes, twice, for the memcpy baseline */
    size_t snap_size;
    uint64_t sink;
} persist_ctx;

static bool grow_write(uint8_t **buf, size_t *used, size_t *cap, const void *data, size_t size) {
    if (*used + size > *cap) {
        size_t ncap = *cap ? *cap * 2 : 1 << 20;
        while (ncap < *used + size) ncap *= 2;
        uint8_t *p = realloc(*buf, ncap);
        if (!p) return false;
        *buf = p;
        *cap = ncap;
    }
    memcpy(*buf + *used, data, size);
    *used += size;
    return true;
}

static bool write_buf(void *ud, const void *data, size_t size) {
    persist_ctx *c = ud;
    return grow_write(&c->buf, &c->used, &c->cap, data, size);
}

static int write_json_plain(const char *data, size_t size, void *ud) {
    persist_ctx *c = ud;
    return grow_write(&c->json_plain, &c->json_used, &c->json_cap, data, size) ? 0 : -1;
}

static kiln_world *open_world(persist_ctx *c) {
    static const kiln_field xyz[] = {{"x", KILN_TYPE_FLOAT, 0, 0}, {"y", KILN_TYPE_FLOAT, 4, 0},
                                     {"z", KILN_TYPE_FLOAT, 8, 0}};
    static const kiln_field target[] = {{"target", KILN_TYPE_ENTITY, 0, 0}};
    kiln_world *w = kiln_world_create(NULL);
    kiln_component_desc pd = {.name = "Position", .size = 12, .fields = xyz, .field_count = 3};
    kiln_component_desc vd = {.name = "Velocity", .size = 12, .fields = xyz, .field_count = 3};
    kiln_component_desc ld = {.name = "Link", .size = 8, .fields = target, .field_count = 1};
    if (!w || kiln_component_register(w, &pd, &c->pos) != KILN_OK ||
        kiln_component_register(w, &vd, &c->vel) != KILN_OK ||
        kiln_component_register(w, &ld, &c->link) != KILN_OK || kiln_transform_init(w, &c->tf) != KILN_OK)
        exit(2);
    return w;
}

/* 100k entities: every one with Position, Velocity and a Link to another; three in four with
 * a Parent (chains of four). The plain arrays hold the same values. */
static bool populate(persist_ctx *c) {
    kiln_component comps[4] = {c->pos, c->vel, c->link, c->tf.parent};
    for (int64_t i = 0; i < c->n; i++) {
        c->pos_a[i] = (vec3f){(float)i, (float)(i % 17) * 0.5f, -1.0f};
        c->vel_a[i] = (vec3f){1.0f / (float)(i + 1), 0.25f, (float)(i % 5)};
        c->link_a[i].target = i > 0 ? c->ents[(i * 7919) % i] : KILN_NULL_ENTITY;
        c->parent_a[i] = i % 4 ? c->ents[i - 1] : KILN_NULL_ENTITY;
        const void *vals[4] = {&c->pos_a[i], &c->vel_a[i], &c->link_a[i], &c->parent_a[i]};
        if (!bench_check_call(&c->state, c->world, kiln_spawn_with(c->world, comps, vals, i % 4 ? 4 : 3, &c->ents[i]),
                              "kiln_spawn_with"))
            return false;
    }
    size_t n = (size_t)c->n;
    c->plain_size = n * (sizeof(vec3f) * 2 + sizeof(link) + 2 * sizeof(kiln_entity));
    c->plain = bench_xmalloc(c->plain_size);
    c->plain_copy = bench_xmalloc(c->plain_size);
    uint8_t *p = c->plain;
    memcpy(p, c->pos_a, n * sizeof(vec3f)), p += n * sizeof(vec3f);
    memcpy(p, c->vel_a, n * sizeof(vec3f)), p += n * sizeof(vec3f);
    memcpy(p, c->link_a, n * sizeof(link)), p += n * sizeof(link);
    memcpy(p, c->parent_a, n * sizeof(kiln_entity)), p += n * sizeof(kiln_entity);
    memcpy(p, c->ents, n * sizeof(kiln_entity));
    memcpy(c->plain_copy, c->plain, c->plain_size);
    return true;
}

/* ---- the kiln side ---- */

static double kiln_sample(void *ctx) {
    persist_ctx *c = ctx;
    kiln_save_desc sd = {.format = c->which == SAVE_JSON ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY};
    double t0 = 0, t1 = 0;
    kiln_result r = KILN_OK;
    const char *call = "kiln_save";
    switch (c->which) {
    case SAVE_BINARY:
    case SAVE_JSON:
        c->used = 0;
        t0 = bench_now_ns();
        r = kiln_save(c->world, &sd, write_buf, c);
        t1 = bench_now_ns();
        break;
    case LOAD_BINARY:
    case LOAD_JSON:
        kiln_world_destroy(c->target);
        c->target = open_world(c);
        call = "kiln_load";
        t0 = bench_now_ns();
        r = kiln_load(c->target, c->buf, c->used, NULL);
        t1 = bench_now_ns();
        if (r != KILN_OK) bench_check_call(&c->state, c->target, r, call);
        return t1 - t0;
    case SNAPSHOT:
        call = "kiln_snapshot_update";
        t0 = bench_now_ns();
        r = kiln_snapshot_update(c->world, c->snap);
        t1 = bench_now_ns();
        break;
    case RESTORE:
        call = "kiln_snapshot_restore";
        t0 = bench_now_ns();
        r = kiln_snapshot_restore(c->world, c->snap);
        t1 = bench_now_ns();
        break;
    case HASH:
        t0 = bench_now_ns();
        c->sink += kiln_world_hash(c->world);
        t1 = bench_now_ns();
        break;
    }
    bench_check_call(&c->state, c->world, r, call);
    return t1 - t0;
}

/* ---- the plain side ---- */

static json_t *vec_json(const vec3f *v) {
    json_t *o = json_object();
    json_object_set_new(o, "x", json_real(v->x));
    json_object_set_new(o, "y", json_real(v->y));
    json_object_set_new(o, "z", json_real(v->z));
    return o;
}

/* The same entities as plain arrays, written as kiln writes them (one object per entity). */
static void json_write_plain(persist_ctx *c) {
    json_t *root = json_object(), *ents = json_array();
    json_object_set_new(root, "entities", ents);
    for (int64_t i = 0; i < c->n; i++) {
        json_t *comps = json_object();
        json_object_set_new(comps, "Link", json_pack("{s:I}", "target", (json_int_t)c->link_a[i].target));
        if (c->parent_a[i]) json_object_set_new(comps, "Parent", json_pack("{s:I}", "entity", (json_int_t)c->parent_a[i]));
        json_object_set_new(comps, "Position", vec_json(&c->pos_a[i]));
        json_object_set_new(comps, "Velocity", vec_json(&c->vel_a[i]));
        json_array_append_new(ents, json_pack("{s:I, s:o}", "id", (json_int_t)c->ents[i], "components", comps));
    }
    c->json_used = 0;
    json_dump_callback(root, write_json_plain, c, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
}

static void vec_read(const json_t *o, vec3f *v) {
    v->x = (float)json_number_value(json_object_get(o, "x"));
    v->y = (float)json_number_value(json_object_get(o, "y"));
    v->z = (float)json_number_value(json_object_get(o, "z"));
}

/* Parses kiln's JSON text and reads the same values into the plain arrays. */
static void json_read_plain(persist_ctx *c) {
    json_t *root = json_loadb((const char *)c->buf, c->used, 0, NULL);
    const json_t *ents = json_object_get(root, "entities");
    size_t n = json_array_size(ents);
    for (size_t i = 0; i < n && i < (size_t)c->n; i++) {
        const json_t *e = json_array_get(ents, i), *comps = json_object_get(e, "components");
        c->ents[i] = (kiln_entity)json_integer_value(json_object_get(e, "id"));
        vec_read(json_object_get(comps, "Position"), &c->pos_a[i]);
        vec_read(json_object_get(comps, "Velocity"), &c->vel_a[i]);
        c->link_a[i].target = (kiln_entity)json_integer_value(json_object_get(json_object_get(comps, "Link"), "target"));
        const json_t *p = json_object_get(comps, "Parent");
        c->parent_a[i] = p ? (kiln_entity)json_integer_value(json_object_get(p, "entity")) : 0;
    }
    json_decref(root);
}

static double baseline_sample(void *ctx) {
    persist_ctx *c = ctx;
    double t0 = bench_now_ns();
    switch (c->which) {
    case SAVE_BINARY: memcpy(c->plain_copy, c->plain, c->plain_size); break;
    case LOAD_BINARY: memcpy(c->plain, c->plain_copy, c->plain_size); break;
    case SAVE_JSON: json_write_plain(c); break;
    case LOAD_JSON: json_read_plain(c); break;
    case SNAPSHOT: memcpy(c->snap_b, c->snap_a, c->snap_size); break;
    case RESTORE: memcpy(c->snap_a, c->snap_b, c->snap_size); break;
    case HASH: c->sink += XXH3_64bits(c->plain, c->plain_size); break;
    }
    double t1 = bench_now_ns();
    bench_consume(c->sink + c->plain_copy[0] + (c->snap_a ? c->snap_a[0] : 0));
    return t1 - t0;
}

/* The case did what it claims: a save loads back as the same world, a restore is exact. */
static bool check(void *ctx) {
    persist_ctx *c = ctx;
    uint64_t want = kiln_world_hash(c->world);
    if (c->which == SAVE_BINARY || c->which == SAVE_JSON) {
        kiln_world *w = open_world(c);
        kiln_result r = kiln_load(w, c->buf, c->used, NULL);
        bool same = r == KILN_OK && kiln_world_hash(w) == want;
        kiln_world_destroy(w);
        if (!same) return bench_fail(&c->state, "the save did not load back as the same world");
    } else if (c->which == LOAD_BINARY || c->which == LOAD_JSON) {
        if (!c->target || kiln_world_hash(c->target) != want)
            return bench_fail(&c->state, "the loaded world differs from the saved one");
    } else if (c->which == RESTORE && kiln_entity_count(c->world) != c->n) {
        return bench_fail(&c->state, "the restored world lost entities");
    }
    return true;
}

static void run(const bench_config *config, bench_result *dest, int which) {
    persist_ctx *c = bench_xcalloc(1, sizeof *c);
    c->which = which;
    c->n = config->small_entities;
    size_t n = (size_t)c->n;
    c->ents = bench_xcalloc(n, sizeof(kiln_entity));
    c->pos_a = bench_xmalloc(n * sizeof(vec3f));
    c->vel_a = bench_xmalloc(n * sizeof(vec3f));
    c->link_a = bench_xmalloc(n * sizeof(link));
    c->parent_a = bench_xmalloc(n * sizeof(kiln_entity));
    c->world = open_world(c);
    bool ok = populate(c);
    if (ok && (which == LOAD_BINARY || which == LOAD_JSON)) {
        kiln_save_desc sd = {.format = which == LOAD_JSON ? KILN_PERSIST_JSON : KILN_PERSIST_BINARY};
        ok = bench_check_call(&c->state, c->world, kiln_save(c->world, &sd, write_buf, c), "kiln_save");
    }
    if (ok && (which == SNAPSHOT || which == RESTORE)) {
        ok = bench_check_call(&c->state, c->world, kiln_snapshot_create(c->world, &c->snap), "kiln_snapshot_create");
        c->snap_size = ok ? kiln_snapshot_bytes(c->snap) : 0;
        c->snap_a = bench_xcalloc(1, c->snap_size + 1);
        c->snap_b = bench_xcalloc(1, c->snap_size + 1);
    }
    if (ok) bench_measure(config, c, kiln_sample, baseline_sample, check, 1, (double)c->n, dest);
    else bench_setup_failed(&c->state, dest);
    kiln_snapshot_destroy(c->snap);
    kiln_world_destroy(c->target);
    kiln_world_destroy(c->world);
    free(c->ents), free(c->pos_a), free(c->vel_a), free(c->link_a), free(c->parent_a);
    free(c->plain), free(c->plain_copy), free(c->buf), free(c->json_plain), free(c->snap_a), free(c->snap_b);
    free(c);
}

void run_save_binary(const bench_config *config, bench_result *dest) { run(config, dest, SAVE_BINARY); }
void run_load_binary(const bench_config *config, bench_result *dest) { run(config, dest, LOAD_BINARY); }
void run_save_json(const bench_config *config, bench_result *dest) { run(config, dest, SAVE_JSON); }
void run_load_json(const bench_config *config, bench_result *dest) { run(config, dest, LOAD_JSON); }
void run_snapshot(const bench_config *config, bench_result *dest) { run(config, dest, SNAPSHOT); }
void run_restore(const bench_config *config, bench_result *dest) { run(config, dest, RESTORE); }
void run_world_hash(const bench_config *config, bench_result *dest) { run(config, dest, HASH); }
