/* scene.c: kiln_instantiate and kiln_instance_*: a versioned JSON scene read whole, checked
 * (keys, types, names, numbers, prefabs, parent cycles, limits), then spawned as one tree.
 * Invariant: nothing is spawned before the whole document is checked and the instance's memory
 * is held, so a refused scene leaves the world as it was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* the header-only form, as hash.c: nothing to link */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kiln_transform.h"
#include "scene_internal.h"

struct kiln_instance {
    kl_allocator alloc;         /* a copy of the world's hook */
    pz_arena arena;
    const char *name, *properties;
    int64_t root_count, spawned_count;
    kiln_entity *roots, *spawned;
    int64_t name_cap;           /* a power of two, at least twice the names */
    const char **names;         /* open addressing on the name's hash; NULL: empty */
    kiln_entity *named;
    uint64_t name_seed;         /* the world's: a file cannot pick names that share a slot */
    const kiln_world *world;    /* with name_seed, tells its world from one made at its address */
};

/* The slot of name in the instance's table: where it is, or the empty slot it would take. */
static int64_t name_slot(const kiln_instance *inst, const char *name) {
    int64_t mask = inst->name_cap - 1;
    uint64_t h = XXH3_64bits_withSeed(name, strlen(name), inst->name_seed);
    for (int64_t i = (int64_t)(h & (uint64_t)mask);; i = (i + 1) & mask)
        if (!inst->names[i] || strcmp(inst->names[i], name) == 0) return i;
}

void kiln_instance_destroy(kiln_instance *instance) {
    if (!instance) return;
    pz_arena_free(&instance->arena);
    kl_allocator alloc = {.fn = instance->alloc.fn, .ud = instance->alloc.ud};
    kl_free(&alloc, instance, sizeof *instance);
}

static int64_t copy_out(const kiln_entity *from, int64_t n, kiln_entity *dest, int64_t capacity) {
    for (int64_t i = 0; dest && i < n && i < capacity; i++) dest[i] = from[i];
    return n;
}

int64_t kiln_instance_roots(const kiln_instance *instance, kiln_entity *dest, int64_t capacity) {
    return instance ? copy_out(instance->roots, instance->root_count, dest, capacity) : 0;
}

int64_t kiln_instance_spawned(const kiln_instance *instance, kiln_entity *dest, int64_t capacity) {
    return instance ? copy_out(instance->spawned, instance->spawned_count, dest, capacity) : 0;
}

kiln_entity kiln_instance_entity(const kiln_instance *instance, const char *name) {
    if (!instance || !name || !instance->name_cap) return KILN_NULL_ENTITY;
    int64_t i = name_slot(instance, name);
    return instance->names[i] ? instance->named[i] : KILN_NULL_ENTITY;
}

const char *kiln_instance_name(const kiln_instance *instance) { return instance ? instance->name : ""; }
const char *kiln_instance_properties(const kiln_instance *instance) { return instance ? instance->properties : "{}"; }

kiln_result kiln_instance_despawn(kiln_world *world, kiln_instance *instance) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (!instance) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_instance_despawn: instance is NULL");
    if (instance->world != world || instance->name_seed != world->hash_seed) /* its handles name others here */
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_instance_despawn: the instance is of another world");
    if (world->in_hook) return pz_check_idle(world, "kiln_instance_despawn"); /* deferred: queues */
    for (int64_t i = instance->spawned_count; i-- > 0;)
        if (kiln_is_alive(world, instance->spawned[i])) {
            kiln_result r = kiln_despawn(world, instance->spawned[i]);
            if (r != KILN_OK) return r;
        }
    return KILN_OK;
}

/* ---- reading ---- */

typedef struct reading {
    pz_json j;
    const kiln_instantiate_desc *desc;
    kiln_instance *inst;
    const json_t *list;
    int64_t count;               /* scene entities */
    int64_t *parent;             /* per entity: its parent's number, 0 for none */
    const pz_tree **prefab;      /* per entity: its prefab's tree, or NULL */
    int64_t *base;               /* per entity: its root node's index */
    int64_t *number_to_node;     /* entity number -> node index + 1 (the ref map) */
    int32_t *height;             /* per entity: links from its root node down to its deepest
                                  * prefab node (0 without a prefab) */
    int32_t *prefab_height;      /* per desc prefab: that height, -1 until first used */
    int64_t nodes;
} reading;

static void *arena(reading *rd, size_t size) {
    void *p = pz_alloc(&rd->inst->arena, size);
    if (!p) pz_json_fail(&rd->j, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return p;
}

static const char *copy_text(reading *rd, const char *s, size_t n) {
    char *c = arena(rd, n + 1);
    if (c) memcpy(c, s, n);
    return c;
}

static bool header(reading *rd, const json_t *root) {
    pz_json *j = &rd->j;
    static const char *const keys[] = {"version", "name", "properties", "entities", NULL};
    if (!pz_json_keys(j, root, keys)) return false;
    const json_t *v = json_object_get(root, "version");
    size_t mark = pz_json_key(j, "version");
    if (pz_json_expect(j, v, json_is_integer(v), "an integer") && json_integer_value(v) != KILN_SCENE_VERSION)
        pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "version %lld is not supported (this build reads version %d)",
                     (long long)json_integer_value(v), KILN_SCENE_VERSION);
    pz_json_pop(j, mark);
    if (j->r != KILN_OK) return false;
    v = json_object_get(root, "name");
    mark = pz_json_key(j, "name");
    if (v && pz_json_expect(j, v, pz_json_plain(v), "a string without NUL bytes")) rd->inst->name = copy_text(rd, json_string_value(v), json_string_length(v));
    pz_json_pop(j, mark);
    v = json_object_get(root, "properties");
    mark = pz_json_key(j, "properties");
    if (v && pz_json_expect(j, v, json_is_object(v), "an object")) {
        char *text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!text) pz_json_fail(j, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        else {
            rd->inst->properties = copy_text(rd, text, strlen(text));
            free(text);
        }
    }
    pz_json_pop(j, mark);
    rd->list = json_object_get(root, "entities");
    mark = pz_json_key(j, "entities");
    if (pz_json_expect(j, rd->list, json_is_array(rd->list), "an array of entities") &&
        json_array_size(rd->list) > KILN_SCENE_MAX_ENTITIES)
        pz_json_fail(j, KILN_ERR_LIMIT, "%zu entities are more than %d", json_array_size(rd->list), KILN_SCENE_MAX_ENTITIES);
    pz_json_pop(j, mark);
    return j->r == KILN_OK;
}

/* Links from a tree's roots down to its deepest node (parents come before their children,
 * and a prefab nests at most KILN_PREFAB_MAX_DEPTH deep, so the walks up stay short). */
static int32_t tree_height(const pz_tree *t) {
    int32_t height = 0;
    for (int64_t i = 0; i < t->count; i++) {
        int32_t depth = 0;
        for (int64_t at = t->nodes[i].parent; at >= 0; at = t->nodes[at].parent) depth++;
        if (depth > height) height = depth;
    }
    return height;
}

/* The tree of the prefab given as name, its height in *height; NULL (the error set) when
 * there is none usable. */
static const pz_tree *find_prefab(reading *rd, const char *name, int32_t *height) {
    const kiln_instantiate_desc *d = rd->desc;
    for (int32_t i = 0; d && i < d->prefab_count; i++) {
        if (!d->prefab_names || !d->prefab_names[i] || strcmp(d->prefab_names[i], name) != 0) continue;
        const pz_tree *t = d->prefabs ? pz_prefab_tree(d->prefabs[i], rd->j.world) : NULL;
        if (!t) pz_json_fail(&rd->j, KILN_ERR_INVALID_ARGUMENT, "prefab '%.60s' was made for another world (or is NULL)", name);
        else {
            if (rd->prefab_height[i] < 0) rd->prefab_height[i] = tree_height(t);
            *height = rd->prefab_height[i];
        }
        return t;
    }
    pz_json_fail(&rd->j, KILN_ERR_INVALID_ARGUMENT, "unknown prefab '%.60s'", name);
    return NULL;
}

/* One entity's keys: name, parent, prefab (its components are read in the second pass). */
static bool entity_keys(reading *rd, int64_t i, const json_t *e) {
    pz_json *j = &rd->j;
    static const char *const keys[] = {"name", "parent", "prefab", "components", NULL};
    if (!pz_json_expect(j, e, json_is_object(e), "an entity object") || !pz_json_keys(j, e, keys)) return false;
    const json_t *v = json_object_get(e, "name");
    size_t mark = pz_json_key(j, "name");
    if (v && pz_json_expect(j, v, json_is_string(v), "a name (string)")) {
        size_t n = json_string_length(v);
        const char *s = json_string_value(v);
        if (n == 0 || n > KILN_NAME_MAX || strlen(s) != n) {
            pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "a name of 1..%d bytes without NUL expected", KILN_NAME_MAX);
        } else {
            int64_t slot = name_slot(rd->inst, s);
            if (rd->inst->names[slot])
                pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "name '%s' is given twice in the scene", s);
            else if ((rd->inst->names[slot] = copy_text(rd, s, n)) != NULL)
                rd->inst->named[slot] = (kiln_entity)(i + 1); /* a number until the spawn */
        }
    }
    pz_json_pop(j, mark);
    v = json_object_get(e, "parent");
    mark = pz_json_key(j, "parent");
    if (v && !json_is_null(v) && pz_json_expect(j, v, json_is_integer(v), "an entity number (integer) or null")) {
        json_int_t p = json_integer_value(v);
        if (p < 1 || p > rd->count)
            pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "entity %lld is not in the scene (1..%lld)", (long long)p,
                         (long long)rd->count);
        else if (p == i + 1)
            pz_json_fail(j, KILN_ERR_INVALID_ARGUMENT, "an entity cannot be its own parent");
        else rd->parent[i] = p;
    }
    pz_json_pop(j, mark);
    v = json_object_get(e, "prefab");
    mark = pz_json_key(j, "prefab");
    if (v && pz_json_expect(j, v, pz_json_plain(v), "a prefab name (string without NUL bytes)"))
        rd->prefab[i] = find_prefab(rd, json_string_value(v), &rd->height[i]);
    pz_json_pop(j, mark);
    if (j->r != KILN_OK) return false;
    rd->base[i] = rd->nodes;
    rd->number_to_node[i + 1] = rd->nodes + 1;
    rd->nodes += rd->prefab[i] ? rd->prefab[i]->count : 1;
    if (rd->nodes > KILN_SCENE_MAX_ENTITIES)
        return pz_json_fail(j, KILN_ERR_LIMIT, "the scene would spawn more than %d entities", KILN_SCENE_MAX_ENTITIES);
    return true;
}

/* Parent links must end at a root: a walk that comes back to an entity it passed is a cycle. */
static bool no_cycles(reading *rd) {
    uint8_t *state = arena(rd, (size_t)rd->count + 1); /* 0 new, 1 on this walk, 2 ends at a root */
    if (!state) return false;
    for (int64_t i = 0; i < rd->count; i++) {
        int64_t at = i;
        while (at >= 0 && state[at] == 0) {
            state[at] = 1;
            at = rd->parent[at] - 1;
        }
        if (at >= 0 && state[at] == 1) {
            size_t mark = pz_json_key(&rd->j, "entities");
            pz_json_index(&rd->j, (size_t)at);
            pz_json_key(&rd->j, "parent");
            pz_json_fail(&rd->j, KILN_ERR_INVALID_ARGUMENT, "parent links form a cycle through entity %lld",
                         (long long)(at + 1));
            pz_json_pop(&rd->j, mark);
            return false;
        }
        for (at = i; at >= 0 && state[at] == 1; at = rd->parent[at] - 1) state[at] = 2;
    }
    return true;
}

/* How deep parent is: its Parent links up to a root, as the Parent check counts them (a dead
 * parent or a self link ends the chain), counted up to KILN_TRANSFORM_MAX_DEPTH (a chain as
 * long or longer, or a cycle written through a pointer, takes no child). */
static int64_t world_depth(kiln_world *world, kiln_entity parent) {
    kiln_transform_ids ids;
    if (!kiln_transform_ids_get(world, &ids)) return 0; /* no Parent anywhere yet */
    int64_t depth = 0;
    for (kiln_entity at = parent; depth < KILN_TRANSFORM_MAX_DEPTH; depth++) {
        const kiln_parent *p = kiln_get(world, at, ids.parent);
        if (!p || !p->entity || p->entity == at || !kiln_is_alive(world, p->entity)) break;
        at = p->entity;
    }
    return depth;
}

/* No spawned entity may sit deeper than the transform addon's limit: each scene entity's
 * depth is the links above it in the scene (after the links above the desc's parent, plus
 * one, for a scene under one), and its prefab's nodes reach its height further down. Refuses
 * naming the entity where a chain first passes the limit (the least deep such, then the first
 * listed), before anything spawns: the Parent check would catch it only while linking. */
static bool within_depth(reading *rd) {
    kiln_world *world = rd->j.world;
    kiln_entity under = rd->desc ? rd->desc->parent : KILN_NULL_ENTITY;
    int64_t top = under && kiln_is_alive(world, under) ? world_depth(world, under) + 1 : 0;
    int64_t *depth = arena(rd, sizeof(int64_t) * ((size_t)rd->count + 1)); /* -1: not known yet */
    if (!depth) return false;
    for (int64_t i = 0; i < rd->count; i++) depth[i] = -1;
    int64_t worst = -1;
    for (int64_t i = 0; i < rd->count; i++) {
        int64_t at = i, links = 0; /* no cycles: every walk ends at a root or a known depth */
        for (; at >= 0 && depth[at] < 0; at = rd->parent[at] - 1) links++;
        int64_t d = (at >= 0 ? depth[at] + 1 : top) + links - 1;
        for (at = i; at >= 0 && depth[at] < 0; at = rd->parent[at] - 1) depth[at] = d--;
        if (depth[i] + rd->height[i] > KILN_TRANSFORM_MAX_DEPTH && (worst < 0 || depth[i] < depth[worst])) worst = i;
    }
    if (worst < 0) return true;
    size_t mark = pz_json_key(&rd->j, "entities");
    pz_json_index(&rd->j, (size_t)worst);
    if (rd->parent[worst]) pz_json_key(&rd->j, "parent");
    char ub[24], pb[48] = "";
    if (under && !rd->parent[worst]) snprintf(pb, sizeof pb, " under parent %s", kiln_entity_format(under, ub, sizeof ub));
    else if (under) snprintf(pb, sizeof pb, " (the scene under parent %s)", kiln_entity_format(under, ub, sizeof ub));
    if (rd->height[worst] && depth[worst] <= KILN_TRANSFORM_MAX_DEPTH)
        pz_json_fail(&rd->j, KILN_ERR_INVALID_ARGUMENT,
                     "entity %lld would be %lld deep%s and its prefab's nodes %lld deep: a parent chain deeper than %d",
                     (long long)(worst + 1), (long long)depth[worst], pb, (long long)(depth[worst] + rd->height[worst]),
                     KILN_TRANSFORM_MAX_DEPTH);
    else
        pz_json_fail(&rd->j, KILN_ERR_INVALID_ARGUMENT, "entity %lld would be %lld deep%s: a parent chain deeper than %d",
                     (long long)(worst + 1), (long long)depth[worst], pb, KILN_TRANSFORM_MAX_DEPTH);
    pz_json_pop(&rd->j, mark);
    return false;
}

/* The tree: each entity's node (or its prefab's nodes) with its parent and components. */
static bool build_tree(reading *rd, pz_tree *tree) {
    pz_json *j = &rd->j;
    for (int64_t i = 0; i < rd->count; i++) {
        if (i % PZ_ASK_ITEMS == PZ_ASK_ITEMS - 1 && !pz_json_ask(j, (uint64_t)i, (uint64_t)rd->count, "entities"))
            return false;
        int64_t parent = rd->parent[i] ? rd->base[rd->parent[i] - 1] : -1;
        bool ok = rd->prefab[i] ? pz_tree_append(j->world, tree, rd->prefab[i], parent) : pz_tree_add(tree, parent) >= 0;
        if (!ok) return pz_json_fail(j, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    j->ref_max = rd->count;
    j->ref_what = "the scene";
    j->ref_map = rd->number_to_node;
    for (int64_t i = 0; i < rd->count; i++) {
        if (i % PZ_ASK_ITEMS == PZ_ASK_ITEMS - 1 && !pz_json_ask(j, (uint64_t)i, (uint64_t)rd->count, "entities"))
            return false;
        const json_t *comps = json_object_get(json_array_get(rd->list, (size_t)i), "components");
        if (!comps) continue;
        size_t mark = pz_json_key(j, "entities");
        pz_json_index(j, (size_t)i);
        pz_json_key(j, "components");
        bool ok = pz_json_read_components(j, comps, tree, &tree->nodes[rd->base[i]]);
        pz_json_pop(j, mark);
        if (!ok) return false;
    }
    return true;
}

static bool prepare(reading *rd, const json_t *root) {
    if (!header(rd, root)) return false;
    rd->count = (int64_t)json_array_size(rd->list);
    size_t n = (size_t)rd->count + 1;
    kiln_instance *inst = rd->inst;
    inst->name_cap = 16;
    while (inst->name_cap < 2 * rd->count) inst->name_cap *= 2;
    inst->names = arena(rd, sizeof(char *) * (size_t)inst->name_cap);
    inst->named = arena(rd, sizeof(kiln_entity) * (size_t)inst->name_cap);
    rd->parent = arena(rd, sizeof(int64_t) * n);
    rd->prefab = arena(rd, sizeof(pz_tree *) * n);
    rd->base = arena(rd, sizeof(int64_t) * n);
    rd->number_to_node = arena(rd, sizeof(int64_t) * n);
    rd->height = arena(rd, sizeof(int32_t) * n);
    int32_t prefabs = rd->desc ? rd->desc->prefab_count : 0;
    rd->prefab_height = arena(rd, sizeof(int32_t) * ((size_t)prefabs + 1));
    if (rd->j.r != KILN_OK) return false;
    for (int32_t i = 0; i < prefabs; i++) rd->prefab_height[i] = -1;
    for (int64_t i = 0; i < rd->count; i++) {
        if (i % PZ_ASK_ITEMS == PZ_ASK_ITEMS - 1 && !pz_json_ask(&rd->j, (uint64_t)i, (uint64_t)rd->count, "entities"))
            return false;
        size_t mark = pz_json_key(&rd->j, "entities");
        pz_json_index(&rd->j, (size_t)i);
        bool ok = entity_keys(rd, i, json_array_get(rd->list, (size_t)i));
        pz_json_pop(&rd->j, mark);
        if (!ok) return false;
    }
    return no_cycles(rd) && within_depth(rd);
}

static kiln_instance *instance_new(kiln_world *world) {
    kiln_instance *inst = kl_alloc(&world->alloc, sizeof *inst);
    if (!inst) return NULL;
    memset(inst, 0, sizeof *inst);
    inst->alloc.fn = world->alloc.fn;
    inst->alloc.ud = world->alloc.ud;
    inst->name_seed = world->hash_seed;
    inst->world = world;
    atomic_fetch_sub_explicit(&world->alloc.bytes, (int64_t)sizeof *inst, memory_order_relaxed);
    atomic_fetch_add_explicit(&inst->alloc.bytes, (int64_t)sizeof *inst, memory_order_relaxed);
    inst->arena.alloc = &inst->alloc;
    inst->name = "";
    inst->properties = "{}";
    return inst;
}

kiln_result kiln_instantiate(kiln_world *world, const void *data, size_t size, const kiln_instantiate_desc *desc,
                             kiln_instance **dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    const char *call = "kiln_instantiate";
    if (!dest) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: dest is NULL", call);
    if (desc && desc->prefab_count < 0) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: prefab_count is negative", call);
    kiln_result idle = pz_check_idle(world, call);
    if (idle != KILN_OK) return idle;
    kiln_instance *inst = instance_new(world);
    if (!inst) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
    reading rd = {.j = {.world = world, .call = call, .keep_going = desc ? desc->keep_going : NULL,
                        .keep_ud = desc ? desc->ud : NULL},
                  .desc = desc, .inst = inst};
    pz_arena scratch = {.alloc = &world->alloc};
    pz_tree tree = {.arena = &scratch};
    json_t *root = pz_json_parse(&rd.j, data, size);
    if (root && prepare(&rd, root) && build_tree(&rd, &tree))
        pz_json_ask(&rd.j, (uint64_t)rd.count, (uint64_t)rd.count, "entities"); /* the last word before landing */
    json_decref(root);
    kiln_result r = rd.j.r;
    if (r == KILN_OK) {
        inst->spawned = pz_alloc(&inst->arena, sizeof(kiln_entity) * ((size_t)tree.count + 1));
        inst->roots = pz_alloc(&inst->arena, sizeof(kiln_entity) * ((size_t)rd.count + 1));
        if (!inst->spawned || !inst->roots) r = kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
    }
    if (r == KILN_OK) r = pz_tree_spawn(world, &tree, desc ? desc->parent : KILN_NULL_ENTITY, call, inst->spawned);
    if (r == KILN_OK && !pz_json_ask(&rd.j, (uint64_t)tree.count, (uint64_t)tree.count, "entities spawned")) {
        for (int64_t i = tree.count; i-- > 0;) kiln_unspawn(world, inst->spawned[i]); /* latest first */
        r = rd.j.r;
    }
    if (r == KILN_OK) {
        inst->spawned_count = tree.count;
        for (int64_t i = 0; i < rd.count; i++)
            if (!rd.parent[i]) inst->roots[inst->root_count++] = inst->spawned[rd.base[i]];
        for (int64_t s = 0; s < inst->name_cap; s++)
            if (inst->names[s]) inst->named[s] = inst->spawned[rd.base[inst->named[s] - 1]];
        *dest = inst;
    } else {
        kiln_instance_destroy(inst);
    }
    pz_arena_free(&scratch);
    return r;
}

kiln_result kiln_instantiate_file(kiln_world *world, const char *path, const kiln_instantiate_desc *desc,
                                  kiln_instance **dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    pz_bytes bytes = {.alloc = &world->alloc};
    kiln_load_desc asking = {.keep_going = desc ? desc->keep_going : NULL, .ud = desc ? desc->ud : NULL,
                             .max_bytes = desc ? desc->max_bytes : 0};
    kiln_result r = pz_read_file(world, path, "kiln_instantiate_file", &asking, &bytes);
    if (r == KILN_OK) {
        r = kiln_instantiate(world, bytes.data, bytes.size, desc, dest);
        const char *msg = kiln_world_error(world);
        if (r != KILN_OK && strncmp(msg, "kiln_instantiate:", 17) == 0) {
            char copy[KL_ERROR_SIZE];
            snprintf(copy, sizeof copy, "%s", msg + 16);
            kl_fail(world, r, "kiln_instantiate_file%s", copy);
        }
    }
    pz_bytes_free(&bytes);
    return r;
}
