/* bench_children.c: the children index against what a game would write by hand. A world holds
 * n entities in trees of a root and three children; each sample is a frame (the tick advances)
 * that spawns 250 such trees, looking each root's children up (kiln_transform_children) right
 * after its tree spawned, against the same spawns with an unchecked link component, each
 * child's handle entered in a plain array of its root's children and read back from there.
 * The spawned are despawned after each sample, untimed. */
#include "bench_children.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_measure.h"
#include "bench_util.h"
#include "kiln_transform.h"

enum { TREES = 250, KIDS = 3, BATCH = TREES * (KIDS + 1) };

typedef struct side {
    kiln_world *world;
    kiln_component local, link;
    bool indexed;                      /* the transform addon's Parent and its index */
    kiln_entity spawned[BATCH];
    kiln_entity table[TREES][KIDS];    /* the baseline's children, by tree */
} side;

typedef struct children_ctx {
    case_state state;
    int64_t n;
    side indexed, plain;
    int64_t found;                     /* children read back, checked against what was spawned */
} children_ctx;

static kiln_result spawn_node(side *s, kiln_entity parent, kiln_entity *dest) {
    static const kiln_local_transform l = {{0, 0, 0}, {0, 0, 0, 1}, {1, 1, 1}};
    kiln_parent link = {parent};
    return kiln_spawn_with(s->world, (kiln_component[]){s->local, s->link}, (const void *[]){&l, &link},
                           parent ? 2 : 1, dest);
}

static bool open_side(children_ctx *c, side *s, bool indexed) {
    s->world = kiln_world_create(&(kiln_world_desc){0});
    if (!s->world) return bench_fail(&c->state, "kiln_world_create failed");
    s->indexed = indexed;
    kiln_result r;
    if (indexed) {
        kiln_transform_ids ids;
        r = kiln_transform_init(s->world, &ids);
        s->local = ids.local, s->link = ids.parent;
    } else {
        r = kiln_component_register(s->world, &(kiln_component_desc){.name = "Local", .size = sizeof(kiln_local_transform)},
                                    &s->local);
        if (r == KILN_OK)
            r = kiln_component_register(s->world, &(kiln_component_desc){.name = "Link", .size = sizeof(kiln_parent)},
                                        &s->link);
    }
    if (!bench_check_call(&c->state, s->world, r, "setup")) return false;
    for (int64_t i = 0; i < c->n / (KIDS + 1); i++) {
        kiln_entity root;
        r = spawn_node(s, KILN_NULL_ENTITY, &root);
        for (int k = 0; k < KIDS && r == KILN_OK; k++) r = spawn_node(s, root, NULL);
        if (!bench_check_call(&c->state, s->world, r, "kiln_spawn_with")) return false;
    }
    return true;
}

static double frame(children_ctx *c, side *s) {
    kiln_tick_advance(s->world);
    kiln_result r = KILN_OK;
    int64_t found = 0;
    double t0 = bench_now_ns();
    for (int t = 0; t < TREES && r == KILN_OK; t++) {
        kiln_entity *tree = &s->spawned[t * (KIDS + 1)], kids[KIDS];
        r = spawn_node(s, KILN_NULL_ENTITY, &tree[0]);
        for (int k = 0; k < KIDS && r == KILN_OK; k++) {
            r = spawn_node(s, tree[0], &tree[1 + k]);
            if (!s->indexed) s->table[t][k] = tree[1 + k];
        }
        if (s->indexed) {
            found += kiln_transform_children(s->world, tree[0], kids, KIDS);
        } else {
            memcpy(kids, s->table[t], sizeof kids);
            found += KIDS;
        }
        for (int k = 0; k < KIDS; k++) /* every child read back (kiln's in handle order) */
            found += kids[0] == tree[1 + k] || kids[1] == tree[1 + k] || kids[2] == tree[1 + k] ? 0 : BATCH;
    }
    double t1 = bench_now_ns();
    bench_check_call(&c->state, s->world, r, "kiln_spawn_with");
    if (s->indexed) c->found = found;
    for (int i = BATCH - 1; i >= 0 && r == KILN_OK; i--) r = kiln_despawn(s->world, s->spawned[i]);
    bench_check_call(&c->state, s->world, r, "kiln_despawn");
    return t1 - t0;
}

static double kiln_sample(void *ctx) {
    children_ctx *c = ctx;
    return frame(c, &c->indexed);
}

static double baseline_sample(void *ctx) {
    children_ctx *c = ctx;
    return frame(c, &c->plain);
}

/* The last frame read every tree's children back, and a look-up now still finds a tree's. */
static bool check(void *ctx) {
    children_ctx *c = ctx;
    kiln_world *w = c->indexed.world;
    kiln_entity root, kid, got[2];
    bool ok = spawn_node(&c->indexed, KILN_NULL_ENTITY, &root) == KILN_OK &&
              spawn_node(&c->indexed, root, &kid) == KILN_OK &&
              kiln_transform_children(w, root, got, 2) == 1 && got[0] == kid;
    kiln_despawn(w, kid);
    kiln_despawn(w, root);
    return (ok && c->found == TREES * KIDS) ||
           bench_fail(&c->state, "the children index lost a child (%lld of %d read back)", (long long)c->found,
                      TREES * KIDS);
}

void run_tree_spawn(const bench_config *config, bench_result *dest) {
    children_ctx *c = bench_xcalloc(1, sizeof *c);
    c->n = config->small_entities;
    if (open_side(c, &c->indexed, true) && open_side(c, &c->plain, false))
        bench_measure(config, c, kiln_sample, baseline_sample, check, 1, BATCH, dest);
    else bench_setup_failed(&c->state, dest);
    kiln_world_destroy(c->indexed.world);
    kiln_world_destroy(c->plain.world);
    free(c);
}
