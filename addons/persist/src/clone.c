/* clone.c: kiln_clone: a copy of an entity (and with tree, of its descendants) whose entity
 * fields that pointed inside the copied tree point to the copies. Invariant: everything is
 * checked and every value copied out before the first spawn, and a failed spawn takes back
 * the copies made so far. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "kiln_transform.h"
#include "persist_internal.h"

typedef struct source {
    kiln_entity entity, copy;
    int32_t count;              /* components copied */
    kiln_component *types;
    void **values;              /* copied out: spawning may move the originals */
} source;

/* The first of the count (parent, child) pairs whose parent is not below parent (any sorted
 * pairs: copy_of looks up (original, copy) pairs with it). */
static int64_t first_child(const kiln_entity *pairs, int64_t count, kiln_entity parent) {
    int64_t lo = 0, hi = count;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (pairs[2 * mid] < parent) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The entity and, with tree, its live descendants (breadth first, children in handle order, as
 * kiln_transform_children lists them), into list; returns how many, -1 out of memory, -2 when
 * the root is its own descendant (Parent links written through a pointer closing a cycle:
 * every entity has one parent, so a walk down that comes back anywhere comes back there). */
static int64_t collect(kiln_world *world, pz_arena *arena, kiln_entity root, bool tree, source **dest) {
    int64_t cap = 16, n = 0;
    source *list = pz_alloc(arena, sizeof(source) * (size_t)cap);
    if (!list) return -1;
    list[n++].entity = root;
    kiln_entity *kids = NULL;
    int32_t kids_cap = 0;
    for (int64_t i = 0; tree && i < n; i++) {
        int32_t count = kiln_transform_children(world, list[i].entity, NULL, 0);
        if (count < 0) return -1;
        if (count > kids_cap) {
            kids_cap = count > 2 * kids_cap ? count : 2 * kids_cap;
            if (!(kids = pz_alloc(arena, sizeof(kiln_entity) * (size_t)kids_cap))) return -1;
        }
        kiln_transform_children(world, list[i].entity, kids, count); /* caught up: the same count */
        for (int32_t k = 0; k < count; k++) {
            if (kids[k] == root) return -2;
            if (n == cap) {
                source *grown = pz_alloc(arena, sizeof(source) * (size_t)cap * 2);
                if (!grown) return -1;
                memcpy(grown, list, sizeof(source) * (size_t)n);
                list = grown;
                cap *= 2;
            }
            list[n++] = (source){.entity = kids[k]};
        }
    }
    *dest = list;
    return n;
}

/* Copies out the components of s (all but Name and owner marks: a copy is its maker's),
 * refusing values with hooks. */
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
        if (s->types[i] == name || info.owner) continue;
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

static int by_entity(const void *a, const void *b) {
    kiln_entity x = ((const kiln_entity *)a)[0], y = ((const kiln_entity *)b)[0];
    return (x > y) - (x < y);
}

/* The copy of e when e was cloned, else e: copies holds (original, copy) pairs sorted. */
static kiln_entity copy_of(const kiln_entity *copies, int64_t n, kiln_entity e) {
    int64_t at = first_child(copies, n, e); /* the first pair whose first is not below e */
    return at < n && copies[2 * at] == e ? copies[2 * at + 1] : e;
}

/* Points the entity fields of value (of info) that name a cloned entity at its copy; true when
 * one changed. */
static bool remap_value(const kiln_component_info *info, const kiln_entity *copies, int64_t n, uint8_t *v) {
    bool changed = false;
    for (int32_t f = 0; f < info->field_count; f++) {
        const kiln_field *fd = &info->fields[f];
        if (fd->type != KILN_TYPE_ENTITY) continue;
        for (uint32_t k = 0; k < (fd->count ? fd->count : 1); k++) {
            kiln_entity e, to;
            memcpy(&e, v + fd->offset + 8 * (size_t)k, 8);
            if (!e || (to = copy_of(copies, n, e)) == e) continue;
            memcpy(v + fd->offset + 8 * (size_t)k, &to, 8);
            changed = true;
        }
    }
    return changed;
}

/* Points the entity fields of every copy that name a cloned entity at its copy (copies: room
 * for n pairs, allocated before the first spawn). A value that changed is set as kiln_set sets
 * it, so the component's check hook sees the copy and its remapped value (in list order:
 * parents before their children), and a refusal fails the clone (the caller takes the copies
 * back). The copied-out values are remapped in place: nothing reads them after. */
static kiln_result remap(kiln_world *world, kiln_entity *copies, source *list, int64_t n) {
    for (int64_t i = 0; i < n; i++) copies[2 * i] = list[i].entity, copies[2 * i + 1] = list[i].copy;
    qsort(copies, (size_t)n, 2 * sizeof(kiln_entity), by_entity);
    for (int64_t i = 0; i < n; i++) {
        for (int32_t t = 0; t < list[i].count; t++) {
            kiln_component_info info;
            kiln_component_info_get(world, list[i].types[t], &info);
            if (!info.size || !pz_has_entity_fields(&info)) continue;
            uint8_t *v = list[i].values[t];
            if (!remap_value(&info, copies, n, v)) continue;
            if (!info.has_check) { /* nothing to refuse it: written in place */
                memcpy(kiln_get_mut(world, list[i].copy, list[i].types[t]), v, info.size);
                continue;
            }
            kiln_result r = kiln_set(world, list[i].copy, list[i].types[t], v);
            if (r != KILN_OK) {
                char msg[KL_ERROR_SIZE], buf[24];
                snprintf(msg, sizeof msg, "%s", kiln_world_error(world));
                const char *detail = strstr(msg, ": ");
                return kl_fail(world, r, "kiln_clone: the copy of entity %s component '%s': %s",
                               kiln_entity_format(list[i].entity, buf, sizeof buf), info.name,
                               detail ? detail + 2 : msg);
            }
        }
    }
    return KILN_OK;
}

/* Whether desc's keep_going (when set) lets the clone go on after done of n entities: asked
 * every PZ_ASK_ITEMS while reading and while spawning, and once at the end (done == n). */
static kiln_result ask(kiln_world *world, const kiln_clone_desc *desc, int64_t done, int64_t n) {
    if ((done < n && done % PZ_ASK_ITEMS != PZ_ASK_ITEMS - 1) || !desc || !desc->keep_going ||
        desc->keep_going(desc->ud))
        return KILN_OK;
    return kl_fail(world, KILN_ERR_LIMIT, "kiln_clone: stopped by the caller after %lld of %lld entities",
                   (long long)done, (long long)n);
}

kiln_result kiln_clone(kiln_world *world, kiln_entity entity, const kiln_clone_desc *desc, kiln_entity *dest) {
    KILN_ASSERT(world != NULL, "world is NULL");
    char buf[24];
    kiln_result idle = pz_check_idle(world, "kiln_clone");
    if (idle != KILN_OK) return idle;
    if (!kiln_is_alive(world, entity)) return kl_fail_dead(world, "kiln_clone", entity);
    pz_arena arena = {.alloc = &world->alloc};
    source *list = NULL;
    kiln_transform_ids ids;
    bool tree = desc && desc->tree && kiln_transform_ids_get(world, &ids);
    int64_t n = collect(world, &arena, entity, tree, &list);
    kiln_result r = n == -1 ? kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_clone: out of memory")
                  : n == -2 ? kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                                      "kiln_clone: entity %s is its own descendant (a Parent cycle)",
                                      kiln_entity_format(entity, buf, sizeof buf))
                            : KILN_OK;
    kiln_component name = kiln_component_lookup(world, "Name");
    for (int64_t i = 0; i < n && r == KILN_OK; i++) {
        r = ask(world, desc, i, n);
        if (r == KILN_OK) r = copy_out(world, &arena, &list[i], name);
    }
    kiln_entity *copies = r == KILN_OK ? pz_alloc_raw(&arena, sizeof(kiln_entity) * 2 * (size_t)n) : NULL;
    if (r == KILN_OK && !copies) r = kl_fail(world, KILN_ERR_OUT_OF_MEMORY, "kiln_clone: out of memory");
    int64_t spawned = 0;
    for (; r == KILN_OK && spawned < n; spawned++) {
        source *s = &list[spawned];
        if ((r = ask(world, desc, spawned, n)) != KILN_OK) break;
        r = kiln_spawn_with(world, s->types, (const void *const *)s->values, s->count, &s->copy);
        if (r != KILN_OK) {
            char msg[KL_ERROR_SIZE];
            snprintf(msg, sizeof msg, "%s", kiln_world_error(world));
            const char *detail = strstr(msg, ": ");
            kl_fail(world, r, "kiln_clone: %s", detail ? detail + 2 : msg);
        }
    }
    if (r == KILN_OK) r = remap(world, copies, list, n);
    if (r == KILN_OK) r = ask(world, desc, n, n); /* past the caller's time: taken back, not lost */
    if (r == KILN_OK) {
        if (dest) *dest = list[0].copy;
    } else {
        for (int64_t i = spawned < n ? spawned : n; i-- > 0;) /* latest first: slots go back */
            if (list[i].copy) kiln_unspawn(world, list[i].copy);
    }
    pz_arena_free(&arena);
    return r;
}
