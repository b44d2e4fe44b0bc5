/* export.c: kiln_export: a scene (the JSON kiln_instantiate reads) of some roots and their
 * descendants, numbered in pre-order. Invariant: the world is only read, and every reference
 * in the output is an entity number of the same document or null. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "kiln_transform.h"
#include "scene_internal.h"

typedef struct exporter {
    kiln_world *world;
    pz_arena arena;
    bool has_tf;
    kiln_transform_ids tf;
    kiln_component name_id;
    kiln_entity *list;          /* entities in pre-order; number = index + 1 */
    int64_t *parent;            /* per entity: the parent's number, 0 for a root */
    int64_t count, cap;
    kiln_entity *keys;          /* handle -> number: open addressing */
    int64_t *numbers;
    int64_t mask;
    kiln_entity *all;           /* every live entity, by handle */
    int64_t all_count;
    struct link *links;         /* (parent, child) of every live Parent link, sorted */
    int64_t link_count;
    const kiln_export_desc *desc;
    int64_t since_asked;        /* entities of work before the first is written, since an ask */
} exporter;

/* The export's own children index: kiln_transform_children rebuilds the addon's after any
 * Parent change in the current tick, which would make a large export quadratic. */
typedef struct link {
    kiln_entity parent, child;
} link;

static int by_handle(const void *a, const void *b) {
    kiln_entity x = *(const kiln_entity *)a, y = *(const kiln_entity *)b;
    return (x > y) - (x < y);
}

static int by_link(const void *a, const void *b) {
    const link *x = a, *y = b;
    if (x->parent != y->parent) return x->parent < y->parent ? -1 : 1;
    return (x->child > y->child) - (x->child < y->child);
}

static const char *call = "kiln_export";

static kiln_result oom(exporter *x) { return kl_fail(x->world, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", call); }

/* Counts items of the work before the first entity is written (indexing, sorting, numbering
 * every entity) and asks desc.progress, with 0 units, after every PZ_ASK_ITEMS of them: on a
 * million entities that work took a third of a second before the first ask, past a console
 * statement's time limit. A stop fails the export (the world is only read). */
static kiln_result worked(exporter *x, int64_t items) {
    if (!x->desc || !x->desc->progress || (x->since_asked += items) < PZ_ASK_ITEMS) return KILN_OK;
    x->since_asked = 0;
    if (x->desc->progress(x->desc->progress_ud, 0)) return KILN_OK;
    return kl_fail(x->world, KILN_ERR_LIMIT, "%s: stopped by desc.progress", call);
}

/* Merges the sorted runs src[lo, mid) and src[mid, hi) of size-byte elements into dst. */
static kiln_result merge(exporter *x, const char *src, char *dst, int64_t lo, int64_t mid, int64_t hi, size_t size,
                         int (*cmp)(const void *, const void *)) {
    int64_t i = lo, j = mid;
    for (int64_t k = lo; k < hi; k++) {
        const char *from = j >= hi || (i < mid && cmp(src + (size_t)i * size, src + (size_t)j * size) <= 0)
                               ? src + (size_t)i++ * size
                               : src + (size_t)j++ * size;
        memcpy(dst + (size_t)k * size, from, size);
        kiln_result r = worked(x, 1);
        if (r != KILN_OK) return r;
    }
    return KILN_OK;
}

/* qsort of n elements that asks as it goes (qsort cannot be stopped): runs of PZ_ASK_ITEMS
 * sorted by qsort, then merged pairwise, asking through worked. */
static kiln_result sort(exporter *x, void *base, int64_t n, size_t size, int (*cmp)(const void *, const void *)) {
    char *src = base;
    kiln_result r = KILN_OK;
    for (int64_t lo = 0; lo < n && r == KILN_OK; lo += PZ_ASK_ITEMS) {
        int64_t run = n - lo < PZ_ASK_ITEMS ? n - lo : PZ_ASK_ITEMS;
        qsort(src + (size_t)lo * size, (size_t)run, size, cmp);
        r = worked(x, run);
    }
    if (r != KILN_OK || n <= PZ_ASK_ITEMS) return r;
    char *dst = pz_alloc_raw(&x->arena, size * (size_t)n);
    if (!dst) return oom(x);
    for (int64_t width = PZ_ASK_ITEMS; width < n && r == KILN_OK; width *= 2) {
        for (int64_t lo = 0; lo < n && r == KILN_OK; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            r = merge(x, src, dst, lo, mid, hi, size, cmp);
        }
        char *t = src;
        src = dst, dst = t;
    }
    if (r == KILN_OK && src != base) memcpy(base, src, size * (size_t)n);
    return r;
}

static int64_t number_of(void *ud, kiln_entity e) {
    const exporter *x = ud;
    if (!x->keys) return 0;
    for (int64_t i = (int64_t)((e * 0x9E3779B97F4A7C15ull) >> 20) & x->mask;; i = (i + 1) & x->mask) {
        if (x->keys[i] == e) return x->numbers[i];
        if (!x->keys[i]) return 0;
    }
}

static kiln_result grow(exporter *x) {
    int64_t cap = x->cap ? x->cap * 2 : 64;
    kiln_entity *list = pz_alloc(&x->arena, sizeof(kiln_entity) * (size_t)cap);
    int64_t *parent = pz_alloc(&x->arena, sizeof(int64_t) * (size_t)cap);
    kiln_entity *keys = pz_alloc(&x->arena, sizeof(kiln_entity) * (size_t)cap * 2);
    int64_t *numbers = pz_alloc(&x->arena, sizeof(int64_t) * (size_t)cap * 2);
    if (!list || !parent || !keys || !numbers) return oom(x);
    if (x->count) {
        memcpy(list, x->list, sizeof(kiln_entity) * (size_t)x->count);
        memcpy(parent, x->parent, sizeof(int64_t) * (size_t)x->count);
    }
    x->list = list, x->parent = parent, x->keys = keys, x->numbers = numbers;
    x->cap = cap;
    x->mask = cap * 2 - 1;
    for (int64_t n = 0; n < x->count; n++) {
        int64_t i = (int64_t)((x->list[n] * 0x9E3779B97F4A7C15ull) >> 20) & x->mask;
        while (x->keys[i]) i = (i + 1) & x->mask;
        x->keys[i] = x->list[n];
        x->numbers[i] = n + 1;
    }
    return KILN_OK;
}

/* Adds e (under the entity numbered parent) and its descendants in pre-order, children by
 * handle. A loop over a stack, not a recursion: links written through a pointer can make a
 * chain as deep as the world is large. stack: room for link_count + 1 pending entries (each
 * entity is pushed once, by its one parent, before a second visit fails). */
typedef struct pending {
    kiln_entity entity;
    int64_t parent;
} pending;

static kiln_result add(exporter *x, kiln_entity root, int64_t root_parent, pending *stack) {
    char buf[24];
    int64_t depth = 0;
    stack[depth++] = (pending){root, root_parent};
    while (depth > 0) {
        pending top = stack[--depth];
        kiln_entity e = top.entity;
        if (number_of(x, e))
            return kl_fail(x->world, KILN_ERR_INVALID_ARGUMENT, "%s: entity %s is given twice (or is under another root)",
                           call, kiln_entity_format(e, buf, sizeof buf));
        if (x->count == x->cap && grow(x) != KILN_OK) return KILN_ERR_OUT_OF_MEMORY;
        int64_t n = x->count++;
        x->list[n] = e;
        x->parent[n] = top.parent;
        int64_t i = (int64_t)((e * 0x9E3779B97F4A7C15ull) >> 20) & x->mask;
        while (x->keys[i]) i = (i + 1) & x->mask;
        x->keys[i] = e;
        x->numbers[i] = n + 1;
        kiln_result r = worked(x, 1);
        if (r != KILN_OK) return r;
        int64_t lo = 0, hi = x->link_count;
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (x->links[mid].parent < e) lo = mid + 1;
            else hi = mid;
        }
        int64_t end = lo;
        while (end < x->link_count && x->links[end].parent == e) end++;
        /* the last child first, so the first is the next taken */
        for (int64_t k = end; k-- > lo;) stack[depth++] = (pending){x->links[k].child, n + 1};
    }
    return KILN_OK;
}

/* A live entity no root reached: its parents never end, so walking up as many steps as there
 * are entities lands in the cycle above it. */
static kiln_result unreached(exporter *x, kiln_entity e) {
    char buf[24];
    for (int64_t i = 0; i < x->all_count; i++) {
        const kiln_parent *p = kiln_get(x->world, e, x->tf.parent);
        if (!p || !kiln_is_alive(x->world, p->entity)) break;
        e = p->entity;
    }
    return kl_fail(x->world, KILN_ERR_INVALID_ARGUMENT,
                   "%s: entity %s is in a Parent cycle (written through a pointer): no root reaches it", call,
                   kiln_entity_format(e, buf, sizeof buf));
}

static bool is_root(exporter *x, kiln_entity e) {
    if (!x->has_tf) return true;
    const kiln_parent *p = kiln_get(x->world, e, x->tf.parent);
    return !p || !kiln_is_alive(x->world, p->entity);
}

/* Every live entity (by handle) and every live Parent link (sorted). */
static kiln_result index_world(exporter *x) {
    int64_t n = kiln_entity_count(x->world);
    x->all = pz_alloc(&x->arena, sizeof(kiln_entity) * ((size_t)n + 1));
    x->links = pz_alloc(&x->arena, sizeof(link) * ((size_t)n + 1));
    if (!x->all || !x->links) return oom(x);
    x->all_count = kiln_world_entities(x->world, x->all, n);
    kiln_result r = sort(x, x->all, x->all_count, sizeof(kiln_entity), by_handle);
    for (int64_t i = 0; r == KILN_OK && x->has_tf && i < x->all_count; i++) {
        const kiln_parent *p = kiln_get(x->world, x->all[i], x->tf.parent);
        if (p && kiln_is_alive(x->world, p->entity)) x->links[x->link_count++] = (link){p->entity, x->all[i]};
        r = worked(x, 1);
    }
    return r == KILN_OK ? sort(x, x->links, x->link_count, sizeof(link), by_link) : r;
}

static kiln_result collect(exporter *x, const kiln_export_desc *desc) {
    kiln_result r = index_world(x);
    if (r != KILN_OK) return r;
    pending *stack = pz_alloc(&x->arena, sizeof(pending) * ((size_t)x->link_count + 1));
    if (!stack) return oom(x);
    if (desc && desc->root_count > 0) {
        if (!desc->roots) return kl_fail(x->world, KILN_ERR_INVALID_ARGUMENT, "%s: roots is NULL", call);
        for (int32_t i = 0; i < desc->root_count && r == KILN_OK; i++) {
            if (!kiln_is_alive(x->world, desc->roots[i]))
                return kl_fail_dead_as(x->world, call, "root", desc->roots[i]);
            r = add(x, desc->roots[i], 0, stack);
        }
        return r;
    }
    for (int64_t i = 0; i < x->all_count && r == KILN_OK; i++)
        if ((r = worked(x, 1)) == KILN_OK && is_root(x, x->all[i])) r = add(x, x->all[i], 0, stack);
    /* every live entity, unless some sit in (or under) a Parent cycle that no root reaches */
    for (int64_t i = 0; r == KILN_OK && x->count < x->all_count && i < x->all_count; i++)
        if ((r = worked(x, 1)) == KILN_OK && !number_of(x, x->all[i])) r = unreached(x, x->all[i]);
    return r;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const kiln_component_info *)a)->name, ((const kiln_component_info *)b)->name);
}

static kiln_result entity_json(exporter *x, int64_t n, json_t *out) {
    kiln_world *world = x->world;
    kiln_entity e = x->list[n];
    char buf[24];
    int32_t count = kiln_entity_components(world, e, NULL, 0);
    kiln_component *ids = pz_alloc(&x->arena, sizeof(kiln_component) * ((size_t)count + 1));
    kiln_component_info *infos = pz_alloc(&x->arena, sizeof(kiln_component_info) * ((size_t)count + 1));
    if (!ids || !infos) return oom(x);
    kiln_entity_components(world, e, ids, count);
    int32_t kept = 0;
    for (int32_t i = 0; i < count; i++) {
        kiln_component_info_get(world, ids[i], &infos[kept]);
        if (x->has_tf && ids[i] == x->tf.parent) continue;
        if (infos[kept].size && (infos[kept].has_destroy || infos[kept].has_move))
            return kl_fail(world, KILN_ERR_INVALID_ARGUMENT,
                           "%s: entity %s component '%s' has hooks (it owns something) and cannot be exported", call,
                           kiln_entity_format(e, buf, sizeof buf), infos[kept].name);
        kiln_result named = pz_json_names(world, &infos[kept], true, "component", call);
        if (named != KILN_OK) return named;
        kept++;
    }
    qsort(infos, (size_t)kept, sizeof *infos, by_name);
    json_t *ent = json_object(), *comps = json_object();
    bool ok = ent && comps;
    const char *name = x->name_id ? kiln_name_get(world, e) : NULL, *bad = NULL;
    const kiln_component_info *bad_info = NULL;
    if (ok && name) {
        json_t *text = json_string(name);
        if (!text) { /* not UTF-8: the Name component below says so */
            for (int32_t i = 0; i < kept && !bad_info; i++)
                if (infos[i].id == x->name_id) bad_info = &infos[i], bad = "text";
            ok = false;
        }
        ok = ok && json_object_set_new(ent, "name", text) == 0;
    }
    if (ok && x->parent[n]) ok = json_object_set_new(ent, "parent", json_integer(x->parent[n])) == 0;
    for (int32_t i = 0; ok && i < kept; i++) {
        json_t *v = pz_json_write_value(world, &infos[i], kiln_get(world, e, infos[i].id), number_of, x, &bad);
        if (bad) bad_info = &infos[i];
        ok = v && json_object_set_new(comps, infos[i].name, v) == 0;
    }
    if (!ok && bad_info) {
        json_decref(comps);
        json_decref(ent);
        return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: entity %s component '%s' field '%s' is not UTF-8 text",
                       call, kiln_entity_format(e, buf, sizeof buf), bad_info->name, bad);
    }
    if (ok) ok = json_object_set_new(ent, "components", comps) == 0;
    else json_decref(comps);
    if (ok) ok = json_array_append_new(out, ent) == 0;
    else json_decref(ent);
    return ok ? KILN_OK : oom(x);
}

typedef struct sink {
    kiln_write_fn write;
    void *ud;
    const kiln_export_desc *desc;
    size_t since_asked;
    bool failed, stopped;
} sink;

/* Whether desc.progress (when set) lets the export go on with units more; a stop fails it. */
static bool keep_going(kiln_world *world, const kiln_export_desc *desc, int64_t units, kiln_result *r) {
    if (!desc || !desc->progress || desc->progress(desc->progress_ud, units)) return true;
    *r = kl_fail(world, KILN_ERR_LIMIT, "%s: stopped by desc.progress", call);
    return false;
}

static int dump(const char *buffer, size_t size, void *data) {
    sink *s = data;
    if (!s->failed && !s->write(s->ud, buffer, size)) s->failed = true;
    if (!s->failed && s->desc && s->desc->progress && (s->since_asked += size) >= PZ_ASK_BYTES) {
        s->since_asked = 0;
        s->failed = s->stopped = !s->desc->progress(s->desc->progress_ud, 0);
    }
    return s->failed ? -1 : 0;
}

kiln_result kiln_export(kiln_world *world, const kiln_export_desc *desc, kiln_write_fn write, void *ud) {
    KILN_ASSERT(world != NULL, "world is NULL");
    if (!write) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: write is NULL", call);
    if (desc && desc->root_count < 0) return kl_fail(world, KILN_ERR_INVALID_ARGUMENT, "%s: root_count is negative", call);
    kiln_result r = pz_check_readable(world, call);
    if (r != KILN_OK) return r;
    exporter x = {.world = world, .arena = {.alloc = &world->alloc}, .desc = desc};
    pz_hold(world); /* progress and write may change the world: not under the entities listed */
    x.has_tf = kiln_transform_ids_get(world, &x.tf);
    x.name_id = kiln_component_lookup(world, "Name");
    r = grow(&x);
    if (r == KILN_OK) r = collect(&x, desc);
    json_t *root = r == KILN_OK ? json_object() : NULL;
    json_t *ents = r == KILN_OK ? json_array() : NULL;
    if (r == KILN_OK && (!root || !ents)) r = oom(&x);
    if (r == KILN_OK && (json_object_set_new(root, "version", json_integer(KILN_SCENE_VERSION)) != 0 ||
                         (desc && desc->name && json_object_set_new(root, "name", json_string(desc->name)) != 0)))
        r = oom(&x);
    for (int64_t n = 0; r == KILN_OK && n < x.count; n++) {
        int64_t batch = x.count - n < 256 ? x.count - n : 256;
        if (n % 256 == 0 && !keep_going(world, desc, batch, &r)) break;
        r = entity_json(&x, n, ents);
    }
    if (r == KILN_OK) {
        json_object_set_new(root, "entities", ents);
        ents = NULL;
        sink s = {write, ud, desc, 0, false, false};
        if (json_dump_callback(root, dump, &s, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0 || !write(ud, "\n", 1))
            r = s.stopped ? kl_fail(world, KILN_ERR_LIMIT, "%s: stopped by desc.progress", call)
                          : kl_fail(world, s.failed ? KILN_ERR_INVALID_ARGUMENT : KILN_ERR_OUT_OF_MEMORY, "%s: %s",
                                    call, s.failed ? "the writer refused the output" : "out of memory writing JSON");
    }
    json_decref(ents);
    json_decref(root);
    pz_arena_free(&x.arena);
    return pz_release(world, call, r);
}
