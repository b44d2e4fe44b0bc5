/* prefab.c: kiln_prefab_*: a tree of component values built from a desc or read from JSON, and
 * spawned any number of times. Invariant: a prefab is checked whole when it is made, so a spawn
 * can fail only on what the world says then (a check hook, memory), and then takes all back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "entity.h"
#include "scene_internal.h"

struct kiln_prefab {
    kl_allocator alloc;         /* a copy of the world's hook, so the prefab may outlive it */
    const kiln_world *world;
    uint64_t world_seed;        /* its hash_seed: a world made later at the same address differs */
    pz_arena arena;
    pz_tree tree;
};

static kiln_prefab *prefab_new(kiln_world *world) {
    kiln_prefab *p = kl_alloc(&world->alloc, sizeof *p);
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    p->alloc.fn = world->alloc.fn;
    p->alloc.ud = world->alloc.ud;
    /* the block is the prefab's from now on: counted on its own hook, not the world's */
    atomic_fetch_sub_explicit(&world->alloc.bytes, (int64_t)sizeof *p, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->alloc.bytes, (int64_t)sizeof *p, memory_order_relaxed);
    p->world = world;
    p->world_seed = world->hash_seed;
    p->arena.alloc = &p->alloc;
    p->tree.arena = &p->arena;
    return p;
}

void kiln_prefab_destroy(kiln_prefab *prefab) {
    if (!prefab) return;
    pz_arena_free(&prefab->arena);
    kl_allocator alloc = {.fn = prefab->alloc.fn, .ud = prefab->alloc.ud};
    kl_free(&alloc, prefab, sizeof *prefab);
}

int64_t kiln_prefab_nodes(const kiln_prefab *prefab) { return prefab ? prefab->tree.count : 0; }

/* The address alone would take a world made where the prefab's dead world was for it: its
 * component ids name other components there (of the same sizes, the spawn's check passes). */
const pz_tree *pz_prefab_tree(const kiln_prefab *prefab, const kiln_world *world) {
    return prefab && prefab->world == world && prefab->world_seed == world->hash_seed ? &prefab->tree : NULL;
}

/* ---- from a desc ---- */

typedef struct builder {
    kiln_world *world;
    kiln_prefab *prefab;
} builder;

static kiln_result add_desc(builder *b, const kiln_prefab_desc *d, int64_t parent, int depth) {
    kiln_world *world = b->world;
    pz_tree *tree = &b->prefab->tree;
    const char *call = "kiln_prefab_create";
    int64_t number = tree->count + 1;
    if (depth > KILN_PREFAB_MAX_DEPTH)
        return kl_fail(world, KILN_ERR_LIMIT, "%s: node %lld: prefabs nest at most %d deep", call, (long long)number,
                       KILN_PREFAB_MAX_DEPTH);
    if (tree->count >= KILN_PREFAB_MAX_NODES)
        return kl_fail(world, KILN_ERR_LIMIT, "%s: more than %d nodes", call, KILN_PREFAB_MAX_NODES);
    if (d->component_count < 0 || d->child_count < 0 || (d->component_count && !d->components) ||
        (d->child_count && !d->children))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: node %lld: a negative count or a NULL list", call,
                       (long long)number);
    int64_t at = pz_tree_add(tree, parent);
    if (at < 0) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
    for (int32_t i = 0; i < d->component_count; i++) {
        kiln_component_info info;
        if (!kiln_component_info_get(world, d->components[i], &info))
            return kl_fail(world, KILN_ERR_UNKNOWN_COMPONENT, "%s: node %lld: component id %u is not registered",
                           call, (long long)number, (unsigned)d->components[i]);
        const char *why = pz_tree_refuses(&info);
        if (why) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: node %lld component '%s' %s", call,
                                (long long)number, info.name, why);
        for (int32_t k = 0; k < i; k++)
            if (d->components[k] == d->components[i])
                return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: node %lld: component '%s' is given twice",
                               call, (long long)number, info.name);
        if (info.owner) continue; /* left off: what a prefab spawns is its caller's */
        pz_value *v = pz_node_value(tree, &tree->nodes[at], &info);
        if (!v) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
        if (info.size && d->values && d->values[i]) memcpy(v->bytes, d->values[i], info.size);
    }
    for (int32_t c = 0; c < d->child_count; c++) {
        kiln_result r = add_desc(b, &d->children[c], at, depth + 1);
        if (r != KILN_OK) return r;
    }
    return KILN_OK;
}

kiln_result kiln_prefab_create(kiln_world *world, const kiln_prefab_desc *desc, kiln_prefab **dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (!desc || !dest) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_prefab_create: desc or dest is NULL");
    kiln_prefab *p = prefab_new(world);
    if (!p) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_prefab_create: out of memory");
    builder b = {world, p};
    kiln_result r = add_desc(&b, desc, -1, 1);
    if (r != KILN_OK) {
        kiln_prefab_destroy(p);
        return r;
    }
    *dest = p;
    return KILN_OK;
}

/* ---- from JSON ---- */

static const char *const prefab_keys[] = {"components", "children", NULL};

/* Pass 1: the shape (keys, children lists, depth) and the node count. */
static bool count_nodes(pz_json *j, const json_t *v, int depth, int64_t *count) {
    if (!pz_json_expect(j, v, json_is_object(v), "a prefab object")) return false;
    if (!pz_json_keys(j, v, prefab_keys)) return false;
    if (depth > KILN_PREFAB_MAX_DEPTH)
        return pz_json_fail(j, KILN_ERR_LIMIT, "prefabs nest at most %d deep", KILN_PREFAB_MAX_DEPTH);
    if (++*count > KILN_PREFAB_MAX_NODES) return pz_json_fail(j, KILN_ERR_LIMIT, "more than %d nodes", KILN_PREFAB_MAX_NODES);
    const json_t *kids = json_object_get(v, "children");
    if (!kids) return true;
    size_t mark = pz_json_key(j, "children");
    bool ok = pz_json_expect(j, kids, json_is_array(kids), "an array of prefabs");
    for (size_t i = 0; ok && i < json_array_size(kids); i++) {
        size_t m2 = pz_json_index(j, i);
        ok = count_nodes(j, json_array_get(kids, i), depth + 1, count);
        pz_json_pop(j, m2);
    }
    pz_json_pop(j, mark);
    return ok;
}

/* Pass 2: the nodes in pre-order with their values. */
static bool read_nodes(pz_json *j, const json_t *v, pz_tree *tree, int64_t parent) {
    int64_t at = pz_tree_add(tree, parent);
    if (at < 0) return pz_json_fail(j, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (tree->count % PZ_ASK_ITEMS == 0 && !pz_json_ask(j, (uint64_t)tree->count, (uint64_t)j->ref_max, "nodes"))
        return false;
    const json_t *comps = json_object_get(v, "components");
    if (comps) {
        size_t mark = pz_json_key(j, "components");
        bool ok = pz_json_read_components(j, comps, tree, &tree->nodes[at]);
        pz_json_pop(j, mark);
        if (!ok) return false;
    }
    const json_t *kids = json_object_get(v, "children");
    for (size_t i = 0; i < json_array_size(kids); i++) {
        size_t mark = pz_json_key(j, "children");
        pz_json_index(j, i);
        bool ok = read_nodes(j, json_array_get(kids, i), tree, at);
        pz_json_pop(j, mark);
        if (!ok) return false;
    }
    return true;
}

kiln_result kiln_prefab_load(kiln_world *world, const void *data, size_t size, const kiln_prefab_load_desc *desc,
                             kiln_prefab **dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    pz_json j = {.world = world, .call = "kiln_prefab_load", .ref_what = "the prefab",
                 .keep_going = desc ? desc->keep_going : NULL, .keep_ud = desc ? desc->ud : NULL};
    if (!dest) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_prefab_load: dest is NULL");
    json_t *root = pz_json_parse(&j, data, size);
    if (!root) return j.r;
    int64_t count = 0;
    kiln_prefab *p = NULL;
    if (count_nodes(&j, root, 1, &count)) {
        j.ref_max = count;
        p = prefab_new(world);
        if (!p) pz_json_fail(&j, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        else read_nodes(&j, root, &p->tree, -1);
    }
    json_decref(root);
    if (j.r != KILN_OK) {
        kiln_prefab_destroy(p);
        return j.r;
    }
    *dest = p;
    return KILN_OK;
}

kiln_result kiln_prefab_load_file(kiln_world *world, const char *path, const kiln_prefab_load_desc *desc,
                                  kiln_prefab **dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    pz_bytes bytes = {.alloc = &world->alloc};
    kiln_load_desc asking = {.keep_going = desc ? desc->keep_going : NULL, .ud = desc ? desc->ud : NULL,
                             .max_bytes = desc ? desc->max_bytes : 0};
    kiln_result r = pz_read_file(world, path, "kiln_prefab_load_file", &asking, &bytes);
    if (r == KILN_OK) {
        r = kiln_prefab_load(world, bytes.data, bytes.size, desc, dest);
        const char *msg = kiln_world_error(world);
        if (r != KILN_OK && strncmp(msg, "kiln_prefab_load:", 17) == 0) {
            char copy[KL_ERROR_SIZE];
            snprintf(copy, sizeof copy, "%s", msg + 16);
            kl_fail(world, r, "kiln_prefab_load_file%s", copy);
        }
    }
    pz_bytes_free(&bytes);
    return r;
}

/* ---- spawning ---- */

/* What decides the archetype a node lands in: its components (sorted) and whether it gets a
 * Parent. Nodes alike land in one archetype, copy after copy. */
typedef struct node_shape {
    kiln_component *types; /* count, then the Parent id when linked */
    int32_t count;
    bool linked;
} node_shape;

static int shape_compare(const void *a, const void *b) {
    const node_shape *x = a, *y = b;
    if (x->count != y->count) return x->count < y->count ? -1 : 1;
    if (x->linked != y->linked) return x->linked ? 1 : -1;
    for (int32_t i = 0; i < x->count; i++)
        if (x->types[i] != y->types[i]) return x->types[i] < y->types[i] ? -1 : 1;
    return 0;
}

/* Fails when count copies cannot fit before one is spawned: per archetype the copies land in,
 * the row limit (what it holds already counted), then entity slots (reserved here, so memory
 * for their records too). Without this a huge count spawned 2^27 entities before failing. */
static kiln_result check_room(kiln_world *world, const pz_tree *tree, int32_t count, const char *call) {
    kiln_result r = KILN_OK;
    size_t values = 0;
    for (int64_t i = 0; i < tree->count; i++) values += (size_t)tree->nodes[i].count + 1;
    size_t bytes = sizeof(node_shape) * (size_t)tree->count + sizeof(kiln_component) * values;
    node_shape *shapes = kl_alloc(&world->alloc, bytes);
    if (!shapes) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
    kiln_component parent = kiln_component_lookup(world, "Parent"), *next = (kiln_component *)(shapes + tree->count);
    for (int64_t i = 0; i < tree->count; i++) {
        const pz_node *n = &tree->nodes[i];
        node_shape *sh = &shapes[i];
        *sh = (node_shape){next, 0, n->parent >= 0};
        for (int32_t k = 0; k <= n->count; k++) {
            kiln_component id = k < n->count ? n->values[k].id : (sh->linked ? parent : 0);
            if (id == 0) continue; /* Parent not registered yet: no archetype has it */
            int32_t j = sh->count++;
            while (j > 0 && sh->types[j - 1] > id) sh->types[j] = sh->types[j - 1], j--;
            sh->types[j] = id;
        }
        next += sh->count;
    }
    qsort(shapes, (size_t)tree->count, sizeof *shapes, shape_compare);
    for (int64_t i = 0, run; i < tree->count && r == KILN_OK; i += run) {
        for (run = 1; i + run < tree->count && shape_compare(&shapes[i], &shapes[i + run]) == 0;) run++;
        const kl_archetype *arch = kl_archetype_find(world, shapes[i].types, shapes[i].count);
        int64_t held = arch ? arch->count : 0;
        if ((int64_t)count * run > (int64_t)KL_ROWS_MAX - held)
            r = kl_fail(world, KILN_ERR_LIMIT, "%s: %d copies put %lld entities in one archetype, which "
                        "holds %lld and has room for %u; nothing was spawned", call, (int)count,
                        (long long)count * run, (long long)held, (unsigned)KL_ROWS_MAX);
    }
    kl_free(&world->alloc, shapes, bytes);
    /* the rows first: slots for a count refused there would cost 8 bytes each for nothing */
    if (r == KILN_OK) r = kl_entities_reserve(world, (int64_t)count * tree->count, call);
    return r;
}

/* Whether desc's keep_going (when set) lets the spawn go on after done copies: asked once
 * PZ_ASK_ITEMS entities were spawned since the last ask, and after the last copy (so that a
 * caller whose time ran out during the spawns can have them taken back). */
static kiln_result spawn_asked(kiln_world *world, const kiln_prefab_spawn_desc *desc, const pz_tree *tree,
                               int32_t done, int32_t count, int64_t *since) {
    if (!desc || !desc->keep_going || ((*since += tree->count) < PZ_ASK_ITEMS && done < count)) return KILN_OK;
    *since = 0;
    if (desc->keep_going(desc->ud)) return KILN_OK;
    return kl_fail(world, KILN_ERR_LIMIT, "kiln_prefab_spawn: stopped by the caller after %lld of %lld entities",
                   (long long)done * tree->count, (long long)count * tree->count);
}

kiln_result kiln_prefab_spawn(kiln_world *world, const kiln_prefab *prefab, int32_t count,
                              const kiln_prefab_spawn_desc *desc, kiln_entity *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const char *call = "kiln_prefab_spawn";
    const pz_tree *tree = pz_prefab_tree(prefab, world);
    if (!tree) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: %s", call,
                              prefab ? "the prefab was made for another world" : "prefab is NULL");
    if (count < 0) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: count %d is negative", call, (int)count);
    if (count == 0) return KILN_OK;
    if ((int64_t)count * tree->count > INT32_MAX)
        return kl_fail(world, KILN_ERR_LIMIT, "%s: %d copies of %lld nodes are too many", call, (int)count,
                       (long long)tree->count);
    kiln_result r = pz_check_idle(world, call); /* before the count: it may fit later */
    if (r == KILN_OK) r = check_room(world, tree, count, call);
    if (r != KILN_OK) return r;
    size_t bytes = sizeof(kiln_entity) * (size_t)count * (size_t)tree->count;
    kiln_entity *all = kl_alloc(&world->alloc, bytes);
    if (!all) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
    int32_t done = 0;
    int64_t since = 0;
    while (done < count) {
        r = pz_tree_spawn(world, tree, KILN_NULL_ENTITY, call, all + (size_t)done * (size_t)tree->count);
        if (r != KILN_OK) break;
        done++;
        if ((r = spawn_asked(world, desc, tree, done, count, &since)) != KILN_OK) break;
    }
    if (r == KILN_OK) {
        for (int32_t i = 0; dest && i < count; i++) dest[i] = all[(size_t)i * (size_t)tree->count];
    } else {
        char msg[KL_ERROR_SIZE];
        snprintf(msg, sizeof msg, "%s", kiln_world_error(world));
        for (size_t i = (size_t)done * (size_t)tree->count; i-- > 0;) kiln_unspawn(world, all[i]);
        kl_fail(world, r, "%s", msg);
    }
    kl_free(&world->alloc, all, bytes);
    return r;
}
