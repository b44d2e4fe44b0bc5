/* clone.c: kiln_clone: a copy of an entity (and with tree, of its descendants) whose entity
 * fields that pointed inside the copied tree point to the copies. Invariant: everything is
 * checked and every value copied out before the first spawn, and a failed spawn takes back
 * the copies made so far. */
#include <stdio.h>
#include <string.h>

#include "kiln_transform.h"
#include "persist_internal.h"

typedef struct source {
    kiln_entity entity, copy;
    int32_t count;              /* components copied */
    kiln_component *types;
    void **values;              /* copied out: spawning may move the originals */
} source;

/* The entity and, with tree, its descendants (breadth first), into list; returns how many. */
static int64_t collect(kiln_world *world, pz_arena *arena, kiln_entity root, bool tree, source **dest) {
    int64_t cap = 16, n = 0;
    source *list = pz_alloc(arena, sizeof(source) * (size_t)cap);
    if (!list) return -1;
    list[n++].entity = root;
    for (int64_t i = 0; tree && i < n; i++) {
        int32_t kids = kiln_transform_children(world, list[i].entity, NULL, 0);
        if (kids <= 0) continue;
        if (n + kids > cap) {
            while (cap < n + kids) cap *= 2;
            source *grown = pz_alloc(arena, sizeof(source) * (size_t)cap);
            if (!grown) return -1;
            memcpy(grown, list, sizeof(source) * (size_t)n);
            list = grown;
        }
        kiln_entity *buf = pz_alloc(arena, sizeof(kiln_entity) * (size_t)kids);
        if (!buf) return -1;
        kiln_transform_children(world, list[i].entity, buf, kids);
        for (int32_t k = 0; k < kids; k++) list[n++] = (source){.entity = buf[k]};
    }
    *dest = list;
    return n;
}

/* Copies out the components of s (all but Name), refusing values with hooks. */
static kiln_result copy_out(kiln_world *world, pz_arena *arena, source *s, kiln_component name) {
    int32_t n = kiln_entity_components(world, s->entity, NULL, 0);
    s->types = pz_alloc(arena, sizeof(kiln_component) * ((size_t)n + 1));
    s->values = pz_alloc(arena, sizeof(void *) * ((size_t)n + 1));
    if (!s->types || !s->values) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_clone: out of memory");
    kiln_entity_components(world, s->entity, s->types, n);
    s->count = 0;
    for (int32_t i = 0; i < n; i++) {
        kiln_component_info info;
        kiln_component_info_get(world, s->types[i], &info);
        if (s->types[i] == name) continue;
        if (info.size && (info.has_destroy || info.has_move)) {
            char buf[24];
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                           "kiln_clone: entity %s component '%s' has hooks (it owns something) and "
                           "cannot be copied", kiln_entity_format(s->entity, buf, sizeof buf), info.name);
        }
        void *v = NULL;
        if (info.size) {
            v = pz_alloc(arena, info.size);
            if (!v) return kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_clone: out of memory");
            memcpy(v, kiln_get(world, s->entity, s->types[i]), info.size);
        }
        s->types[s->count] = s->types[i];
        s->values[s->count++] = v;
    }
    return KILN_OK;
}

/* Points the entity fields of every copy that name a cloned entity at its copy. */
static void remap(kiln_world *world, source *list, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        for (int32_t t = 0; t < list[i].count; t++) {
            kiln_component_info info;
            kiln_component_info_get(world, list[i].types[t], &info);
            if (!info.size || !pz_has_entity_fields(&info)) continue;
            uint8_t *v = kiln_get_mut(world, list[i].copy, list[i].types[t]);
            for (int32_t f = 0; f < info.field_count; f++) {
                const kiln_field *fd = &info.fields[f];
                if (fd->type != KILN_TYPE_ENTITY) continue;
                for (uint32_t k = 0; k < (fd->count ? fd->count : 1); k++) {
                    kiln_entity e;
                    memcpy(&e, v + fd->offset + 8 * (size_t)k, 8);
                    for (int64_t j = 0; e && j < n; j++)
                        if (list[j].entity == e) {
                            memcpy(v + fd->offset + 8 * (size_t)k, &list[j].copy, 8);
                            break;
                        }
                }
            }
        }
    }
}

kiln_result kiln_clone(kiln_world *world, kiln_entity entity, const kiln_clone_desc *desc, kiln_entity *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    char buf[24];
    if (kiln_is_deferred(world))
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "kiln_clone: the world is deferred or iterating");
    if (!kiln_is_alive(world, entity))
        return kl_fail(world, KILN_ERR_DEAD_ENTITY, "kiln_clone: entity %s is not alive",
                       kiln_entity_format(entity, buf, sizeof buf));
    pz_arena arena = {.alloc = &world->alloc};
    source *list = NULL;
    kiln_transform_ids ids;
    bool tree = desc && desc->tree && kiln_transform_ids_get(world, &ids);
    int64_t n = collect(world, &arena, entity, tree, &list);
    kiln_result r = n < 0 ? kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_clone: out of memory") : KILN_OK;
    kiln_component name = kiln_component_lookup(world, "Name");
    for (int64_t i = 0; i < n && r == KILN_OK; i++) r = copy_out(world, &arena, &list[i], name);
    int64_t spawned = 0;
    for (; r == KILN_OK && spawned < n; spawned++) {
        source *s = &list[spawned];
        r = kiln_spawn_with(world, s->types, (const void *const *)s->values, s->count, &s->copy);
        if (r != KILN_OK) {
            char msg[KL_ERROR_SIZE];
            snprintf(msg, sizeof msg, "%s", kiln_world_error(world));
            const char *detail = strstr(msg, ": ");
            kl_fail(world, r, "kiln_clone: %s", detail ? detail + 2 : msg);
        }
    }
    if (r == KILN_OK) {
        remap(world, list, n);
        if (dest) *dest = list[0].copy;
    } else {
        for (int64_t i = 0; i < spawned && i < n; i++)
            if (list[i].copy) kiln_despawn(world, list[i].copy);
    }
    pz_arena_free(&arena);
    return r;
}
