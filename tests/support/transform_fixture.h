/* transform_fixture.h: what the transform suites share: a scene (a world with transforms on a
 * thread-safe counting allocator), random trees, and a cglm model of their matrices. */
#ifndef KILN_TRANSFORM_FIXTURE_H
#define KILN_TRANSFORM_FIXTURE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "kiln.h"
#include "kiln_transform.h"
#include "test_support.h"

/*
 * Functions in this header:
 *   scene_open, scene_close, lcg_next, sample_local, reference_local, model_world,
 *   assert_matrix_near, world_matrix, assert_scene_matches_model, make_tree, build_in_order,
 *   build_shuffled, spawn_node, link_unchecked, propagate, propagate_ok, names_entity,
 *   in_subtree.
 */

#define MAX_NODES 512
#define TAG_COUNT 4

/* A node of a tree described on the test side: parent is an index into the same array (-1 for
 * a root); nodes are listed parents first. */
typedef struct node {
    int parent;
    bool has_local;
    kiln_local_transform local;
} node;

typedef struct scene {
    test_allocator alloc;
    pthread_mutex_t lock;  /* the hook must be thread-safe once systems run on a pool */
    kiln_world *world;
    kiln_transform_ids ids;
    kiln_component tags[TAG_COUNT];
} scene;

/* The scene must not move while its world lives (the hook holds its address). */
void scene_open(scene *s);

void scene_close(scene *s);

uint32_t lcg_next(uint32_t *state);

/* A varied local transform: translation, rotation about a tilted axis, non-uniform scale. */
kiln_local_transform sample_local(int i);

/* translate * rotate * scale, built with cglm's own matrix operations (not the header's
 * kiln_transform_local_to_mat4, which is under test as much as the core). */
void reference_local(const kiln_local_transform *t, mat4 dest);

/* The expected world matrix of node i: parent world * local, identity standing in for a
 * missing parent or local. */
void model_world(const node *nodes, int i, mat4 dest);

void assert_matrix_near(const float *actual, mat4 expected, const char *what);

const float *world_matrix(const scene *s, kiln_entity e);

/* Checks every node with a local against the model, and that nodes without one have no
 * WorldTransform. */
void assert_scene_matches_model(const scene *s, const node *nodes, int n,
                                const kiln_entity *handles);

/* A random tree: a few roots, parents chosen among the previous five nodes (so branches run
 * several levels deep), some nodes without LocalTransform. */
int make_tree(node *nodes, int n, uint32_t seed);

/* Spawns the tree parents first, each entity with all its components at once. */
void build_in_order(scene *s, const node *nodes, int n, kiln_entity *handles);

/* Spawns the tree children first (reverse order, so every child has a lower handle than its
 * parent), then adds components node by node in a shuffled order, each node first getting a
 * seed-dependent set of tags, so archetypes are created in another order and rows land in
 * other places. Components are added in varying order per node. */
void build_shuffled(scene *s, const node *nodes, int n, kiln_entity *handles, uint32_t seed);

kiln_entity spawn_node(scene *s, kiln_entity parent, const kiln_local_transform *local);

/* Links e to parent by writing its Parent through kiln_get_mut (adding Parent first when e has
 * none): the one path the Parent check does not guard, to build the self links and cycles that
 * propagation must survive. */
void link_unchecked(scene *s, kiln_entity e, kiln_entity parent);

kiln_result propagate(scene *s, kiln_transform_propagate_stats *stats);

void propagate_ok(scene *s, kiln_transform_propagate_stats *stats);

/* True when msg mentions e as a whole token ("12v1" but not inside "112v1"). */
bool names_entity(const char *msg, kiln_entity e);

/* Whether node i descends from (or is) node top. */
bool in_subtree(const node *nodes, int i, int top);

#endif /* KILN_TRANSFORM_FIXTURE_H */
