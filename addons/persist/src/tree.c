/* tree.c: the flat tree of nodes that prefabs and scenes spawn: values in the world's layout,
 * entity fields naming nodes by number. Invariant: a spawn lands whole (entities, Parent links,
 * references, check hooks) or takes back everything it spawned. */
#include <stdio.h>
#include <string.h>

#include "kiln_transform.h"
#include "scene_internal.h"

const char *pz_tree_refuses(const kiln_component_info *info) {
    if (info->size && (info->has_destroy || info->has_move)) return "has hooks (it owns something) and cannot be copied";
    if (strcmp(info->name, "Parent") == 0) return "is given by the tree (children, parent), not as a component";
    return NULL;
}

int64_t pz_tree_add(pz_tree *tree, int64_t parent) {
    if (tree->count == tree->cap) {
        int64_t cap = tree->cap ? tree->cap * 2 : 16;
        pz_node *grown = pz_alloc(tree->arena, sizeof(pz_node) * (size_t)cap);
        if (!grown) return -1;
        if (tree->count) memcpy(grown, tree->nodes, sizeof(pz_node) * (size_t)tree->count);
        tree->nodes = grown;
        tree->cap = cap;
    }
    tree->nodes[tree->count] = (pz_node){.parent = parent};
    return tree->count++;
}

pz_value *pz_node_value(pz_tree *tree, pz_node *node, const kiln_component_info *info) {
    for (int32_t i = 0; i < node->count; i++)
        if (node->values[i].id == info->id) return &node->values[i];
    if (node->count == node->cap) {
        int32_t cap = node->cap ? node->cap * 2 : 4;
        pz_value *grown = pz_alloc(tree->arena, sizeof(pz_value) * (size_t)cap);
        if (!grown) return NULL;
        if (node->count) memcpy(grown, node->values, sizeof(pz_value) * (size_t)node->count);
        node->values = grown;
        node->cap = cap;
    }
    pz_value *v = &node->values[node->count];
    v->id = info->id;
    v->size = (uint32_t)info->size;
    v->bytes = NULL;
    if (info->size) {
        v->bytes = pz_alloc(tree->arena, info->size);
        if (!v->bytes) return NULL;
        if (info->defaults) memcpy(v->bytes, info->defaults, info->size);
    }
    node->count++;
    return v;
}

/* Calls fn on every entity slot of a value. */
static void each_entity(const kiln_component_info *info, uint8_t *value, void (*fn)(uint8_t *slot, void *ud), void *ud) {
    for (int32_t f = 0; f < info->field_count; f++) {
        const kiln_field *fd = &info->fields[f];
        if (fd->type != KILN_TYPE_ENTITY) continue;
        for (uint32_t k = 0; k < (fd->count ? fd->count : 1); k++) fn(value + fd->offset + 8 * (size_t)k, ud);
    }
}

static void shift_ref(uint8_t *slot, void *ud) {
    uint64_t e;
    memcpy(&e, slot, 8);
    if (e && e <= PZ_NODE_REF_MAX) {
        e += *(const uint64_t *)ud;
        memcpy(slot, &e, 8);
    }
}

/* Copies the values of nodes first.. (a scene may override them; the source tree's stay as
 * they were) and shifts their node references by by. */
static bool shift_values(kiln_world *world, pz_tree *tree, int64_t first, uint64_t by) {
    for (int64_t i = first; i < tree->count; i++) {
        pz_node *n = &tree->nodes[i];
        for (int32_t k = 0; k < n->count; k++) {
            kiln_component_info info;
            kiln_component_info_get(world, n->values[k].id, &info);
            if (!info.size) continue;
            uint8_t *copy = pz_alloc(tree->arena, info.size);
            if (!copy) return false;
            memcpy(copy, n->values[k].bytes, info.size);
            each_entity(&info, copy, shift_ref, &by);
            n->values[k].bytes = copy;
        }
    }
    return true;
}

bool pz_tree_append(kiln_world *world, pz_tree *tree, const pz_tree *src, int64_t parent) {
    int64_t first = tree->count;
    for (int64_t i = 0; i < src->count; i++) {
        const pz_node *from = &src->nodes[i];
        int64_t at = pz_tree_add(tree, from->parent < 0 ? parent : from->parent + first);
        if (at < 0) return false;
        pz_node *to = &tree->nodes[at];
        to->values = pz_alloc(tree->arena, sizeof(pz_value) * ((size_t)from->count + 1));
        if (!to->values) return false;
        to->cap = from->count + 1;
        to->count = from->count;
        for (int32_t k = 0; k < from->count; k++) to->values[k] = from->values[k];
    }
    return shift_values(world, tree, first, (uint64_t)first);
}

/* ---- spawning ---- */

typedef struct remap_ctx {
    const kiln_entity *spawned;
    int64_t count;
} remap_ctx;

static void zero_ref(uint8_t *slot, void *ud) {
    (void)ud;
    uint64_t e;
    memcpy(&e, slot, 8);
    if (e && e <= PZ_NODE_REF_MAX) memset(slot, 0, 8);
}

static void point_ref(uint8_t *slot, void *ud) {
    const remap_ctx *cx = ud;
    uint64_t e;
    memcpy(&e, slot, 8);
    if (!e || e > PZ_NODE_REF_MAX) return;
    kiln_entity to = (int64_t)e <= cx->count ? cx->spawned[e - 1] : KILN_NULL_ENTITY;
    memcpy(slot, &to, 8);
}

static kiln_result failed(kiln_world *world, kiln_result r, const char *call) {
    char msg[KL_ERROR_SIZE];
    snprintf(msg, sizeof msg, "%s", kiln_world_error(world));
    const char *detail = strstr(msg, ": ");
    return kl_fail(world, r, "%s: %s", call, detail ? detail + 2 : msg);
}

static kiln_result spawn_node(kiln_world *world, pz_arena *scratch, const pz_node *n, const char *call,
                              kiln_entity *dest) {
    kiln_component *types = pz_alloc(scratch, sizeof(kiln_component) * ((size_t)n->count + 1));
    const void **values = pz_alloc(scratch, sizeof(void *) * ((size_t)n->count + 1));
    if (!types || !values) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
    for (int32_t k = 0; k < n->count; k++) {
        kiln_component_info info;
        kiln_component_info_get(world, n->values[k].id, &info);
        types[k] = info.id;
        values[k] = n->values[k].bytes;
        if (!info.size || !pz_has_entity_fields(&info)) continue;
        uint8_t *copy = pz_alloc(scratch, info.size); /* references land after every spawn */
        if (!copy) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call);
        memcpy(copy, n->values[k].bytes, info.size);
        each_entity(&info, copy, zero_ref, NULL);
        values[k] = copy;
    }
    return kiln_spawn_with(world, types, values, n->count, dest);
}

/* Points node references at the spawned entities and runs the check hooks of the values
 * that held any (the spawn checked them with null references). */
static kiln_result point_references(kiln_world *world, const pz_tree *tree, const kiln_entity *spawned) {
    remap_ctx cx = {spawned, tree->count};
    for (int64_t i = 0; i < tree->count; i++) {
        const pz_node *n = &tree->nodes[i];
        for (int32_t k = 0; k < n->count; k++) {
            kiln_component_info info;
            kiln_component_info_get(world, n->values[k].id, &info);
            if (!info.size || !pz_has_entity_fields(&info)) continue;
            uint8_t *v = kiln_get_mut(world, spawned[i], info.id);
            memcpy(v, n->values[k].bytes, info.size);
            each_entity(&info, v, point_ref, &cx);
            if (!info.has_check) continue;
            kiln_result r = kiln_component_check(world, spawned[i], info.id, v);
            if (r != KILN_OK) return r;
        }
    }
    return KILN_OK;
}

kiln_result pz_tree_spawn(kiln_world *world, const pz_tree *tree, kiln_entity parent, const char *call,
                          kiln_entity *dest) {
    kiln_result idle = pz_check_idle(world, call);
    if (idle != KILN_OK) return idle;
    char buf[24];
    if (parent && !kiln_is_alive(world, parent))
        return kl_fail(world, KILN_ERR_DEAD_ENTITY, "%s: parent %s is not alive", call,
                       kiln_entity_format(parent, buf, sizeof buf));
    /* A prefab outliving its world can meet another world at the same address. */
    for (int64_t i = 0; i < tree->count; i++)
        for (int32_t k = 0; k < tree->nodes[i].count; k++) {
            kiln_component_info info;
            const pz_value *v = &tree->nodes[i].values[k];
            if (!kiln_component_info_get(world, v->id, &info) || info.size != v->size || pz_tree_refuses(&info))
                return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                               "%s: node %lld holds a value of a component this world does not have as it was",
                               call, (long long)(i + 1));
        }
    bool links = parent != KILN_NULL_ENTITY;
    for (int64_t i = 0; i < tree->count && !links; i++) links = tree->nodes[i].parent >= 0;
    if (links && kiln_transform_init(world, NULL) != KILN_OK) return failed(world, KILN_ERR_OUT_OF_MEMORY, call);
    pz_arena scratch = {.alloc = &world->alloc};
    kiln_result r = KILN_OK;
    int64_t spawned = 0;
    for (; spawned < tree->count && r == KILN_OK; spawned++) {
        r = spawn_node(world, &scratch, &tree->nodes[spawned], call, &dest[spawned]);
        if (r != KILN_OK) break;
    }
    if (r == KILN_OK)
        for (int64_t i = 0; i < tree->count && r == KILN_OK; i++) {
            int64_t p = tree->nodes[i].parent;
            kiln_entity to = p >= 0 ? dest[p] : parent;
            if (to) r = kiln_transform_set_parent(world, dest[i], to);
        }
    if (r == KILN_OK) r = point_references(world, tree, dest);
    pz_arena_free(&scratch);
    if (r == KILN_OK) return KILN_OK;
    failed(world, r, call);
    char msg[KL_ERROR_SIZE];
    snprintf(msg, sizeof msg, "%s", kiln_world_error(world));
    for (int64_t i = spawned; i-- > 0;) kiln_unspawn(world, dest[i]);
    kl_fail(world, r, "%s", msg);
    return r;
}
