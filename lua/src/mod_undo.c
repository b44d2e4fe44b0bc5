/* mod_undo.c: what a mod's failed top level takes back besides its registrations (mods.c): the
 * components it added to entities there before it ran, the resources it set where there were
 * none, its emits, which wait until it succeeds, and its spawns, their slots as they were where
 * the handles went nowhere. Invariant: what it could not take back (despawns, removals, renames
 * and new parents on any entity there before it ran, the previous version's and kept ones too,
 * and removals of the resources there before it ran) is refused while a top level runs, so a
 * failed load leaves the world's entities and resources as they were. */
#include <stdlib.h>

#include "kiln_transform.h"
#include "mods.h"

/* A component this load registered: a failed load takes it off every entity (mods.c). */
static bool registered_by_load(const klua_mod *mod, kiln_component c) {
    if (!mod->loading || c == KILN_NO_COMPONENT) return false;
    for (int i = mod->previous ? mod->previous->declared_count : 0; i < mod->declared_count; i++)
        if (mod->declared[i] == c && !mod->declared_event[i] && mod->declared_first[i] && !mod->declared_adopted[i])
            return true;
    return false;
}

/* The loading mod whose failure would take back what the view does now, or NULL. Another mod's
 * code runs inside a top level only when the loading mod calls its exports. */
static klua_mod *loading_for(const klua_world *kw) {
    return ((const klua_mod *)kw->mod)->mods->loading;
}

void klua_mod_load_begin(klua_mod *mod) {
    mod->load_others = kiln_query_count(mod->spawned) > 0;
    mod->loading = true;
    mod->mods->loading = mod;
}

/* The set's slot to look at first for e: splitmix64's finaliser, so that handles that differ
 * in a few bits (neighbouring slots, generations) spread over the whole table. */
static int64_t first_slot(kiln_entity e, int64_t cap) {
    uint64_t h = e;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9u;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebu;
    return (int64_t)((h ^ (h >> 31)) & (uint64_t)(cap - 1));
}

static void set_put(kiln_entity *set, int64_t cap, kiln_entity e) {
    int64_t i = first_slot(e, cap);
    while (set[i] && set[i] != e) i = (i + 1) & (cap - 1);
    set[i] = e;
}

/* Puts e into the set, doubling it first to stay at most half full; false when out of memory
 * (the loading mod's: a top level making many spawns pays for the set as for its tables). */
static bool set_add(klua_mod *mod, kiln_entity e) {
    if ((mod->load_set_count + 1) * 2 > mod->load_set_cap) {
        int64_t ncap = mod->load_set_cap ? mod->load_set_cap * 2 : 64;
        kiln_entity *grown = klua_mod_mem_alloc(&mod->mem, NULL, 0, (size_t)ncap * sizeof *grown);
        if (!grown) return false;
        memset(grown, 0, (size_t)ncap * sizeof *grown);
        for (int64_t i = 0; i < mod->load_set_cap; i++)
            if (mod->load_set[i]) set_put(grown, ncap, mod->load_set[i]);
        klua_mod_mem_alloc(&mod->mem, mod->load_set, (size_t)mod->load_set_cap * sizeof *grown, 0);
        mod->load_set = grown;
        mod->load_set_cap = ncap;
    }
    set_put(mod->load_set, mod->load_set_cap, e);
    mod->load_set_count++;
    return true;
}

/* Puts the load's spawns the set lacks into it (each once, whatever the checks). */
static void fill_set(lua_State *L, klua_mod *mod) {
    for (; mod->load_set_from < mod->load_spawn_count; mod->load_set_from++)
        if (!set_add(mod, mod->load_spawns[mod->load_set_from].entity)) klua_no_memory(L);
}

void klua_mod_note_guest_spawn(lua_State *L, klua_mod *loading, kiln_world *world, kiln_entity e) {
    if (!kiln_is_alive(world, e) || set_add(loading, e)) return; /* (queued: nothing touches it until it lands) */
    kiln_unspawn(world, e); /* the spawn never returned its handle */
    klua_no_memory(L);
}

/* Whether e (alive) was spawned while the top level of loading ran: by it (which a failed load
 * takes back) or by code of another mod it called (which stays). Its tag alone does not tell:
 * the previous version's entities and those an unload kept carry it too. Each spawn goes into
 * the set once, so a top level checking each of n spawns pays O(n), not a walk per check. */
static bool spawned_while_loading(lua_State *L, klua_world *kw, klua_mod *loading, kiln_entity e) {
    if (kiln_has(kw->world, e, loading->tag)) {
        if (!loading->load_others) return true; /* no entity had its tag before its top level */
        fill_set(L, loading);
    }
    if (!loading->load_set) return false; /* no spawn in it yet */
    for (int64_t i = first_slot(e, loading->load_set_cap); loading->load_set[i];
         i = (i + 1) & (loading->load_set_cap - 1))
        if (loading->load_set[i] == e) return true;
    return false;
}

void klua_mod_before_remove(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c, const char *fname) {
    if (c == KILN_NO_COMPONENT && kiln_is_alive(kw->world, e)) klua_mod_check_despawn(L, kw, e, fname); /* any time */
    klua_mod *loading = loading_for(kw);
    if (!loading || registered_by_load(loading, c)) return;
    if (!kiln_is_alive(kw->world, e) || spawned_while_loading(L, kw, loading, e)) return; /* (the call's own error) */
    char eb[24];
    klua_entity_str(e, eb);
    if (c == KILN_NO_COMPONENT)
        klua_fail(L, fname, "a mod's top level may despawn only the entities spawned while it runs (entity %s was "
                  "there before, and a failed load of mod '%s' could not bring it back); do it from a system",
                  eb, loading->name);
    klua_fail(L, fname, "a mod's top level may remove from the entities there before it ran only the components it "
              "registers (entity %s is one, and a failed load of mod '%s' could not put the value back); do it from "
              "a system", eb, loading->name);
}

int64_t klua_mod_before_despawn_tree(lua_State *L, klua_world *kw, kiln_entity root, const char *fname) {
    klua_mod_before_remove(L, kw, root, KILN_NO_COMPONENT, fname);
    kiln_transform_ids ids;
    /* (deferred, the despawn queues one record an entity: the walk counts them) */
    if ((!loading_for(kw) && !klua_mods_any_readonly(kw) && !kiln_is_deferred(kw->world)) ||
        !kiln_is_alive(kw->world, root) || !kiln_transform_ids_get(kw->world, &ids))
        return 1;
    /* breadth first through the index the despawn walks. An entity has one parent, so only
     * the root can come round again (links written through a pointer may close a cycle);
     * the live count bounds the walk all the same. The list is the mod's memory. */
    int64_t cap = 64, n = 0, limit = kiln_entity_count(kw->world);
    kiln_entity *list = lua_newuserdatauv(L, (size_t)cap * sizeof *list, 0);
    for (int64_t head = 0; head <= n && n < limit; head++) {
        kiln_entity at = head ? list[head - 1] : root;
        int32_t k = kiln_transform_children(kw->world, at, NULL, 0);
        if (k < 0) klua_fail_world(L, kw->world, fname);
        if (n + k > cap) {
            while (n + k > cap) cap *= 2;
            kiln_entity *grown = lua_newuserdatauv(L, (size_t)cap * sizeof *list, 0);
            memcpy(grown, list, (size_t)n * sizeof *list);
            lua_replace(L, -2);
            list = grown;
        }
        k = kiln_transform_children(kw->world, at, list + n, k);
        if (k < 0) klua_fail_world(L, kw->world, fname);
        for (int64_t i = n, end = n + k; i < end; i++) {
            if (list[i] == root) continue;
            klua_mod_before_remove(L, kw, list[i], KILN_NO_COMPONENT, fname);
            list[n++] = list[i];
        }
    }
    lua_pop(L, 1);
    return n + 1;
}

void klua_mod_before_add(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c) {
    klua_mod *loading = loading_for(kw);
    if (!loading || registered_by_load(loading, c) || !kiln_is_alive(kw->world, e) ||
        spawned_while_loading(L, kw, loading, e))
        return;
    if (loading->load_add_count == loading->load_add_cap) { /* the loading mod's memory */
        int64_t ncap = loading->load_add_cap ? loading->load_add_cap * 2 : 32;
        void *p = klua_mod_mem_alloc(&loading->mem, loading->load_adds,
                                     (size_t)loading->load_add_cap * sizeof *loading->load_adds,
                                     (size_t)ncap * sizeof *loading->load_adds);
        if (!p) klua_no_memory(L);
        loading->load_adds = p;
        loading->load_add_cap = ncap;
    }
    loading->load_adds[loading->load_add_count++] = (klua_mod_added){e, c};
}

void klua_mod_before_change(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c, const void *value,
                            const char *fname) {
    klua_mod *loading = loading_for(kw);
    if (!loading || !kiln_is_alive(kw->world, e) || !kiln_has(kw->world, e, c)) return;
    kiln_transform_ids ids;
    bool link = kiln_transform_ids_get(kw->world, &ids) && c == ids.parent;
    if (!link && c != kiln_component_lookup(kw->world, "Name")) return; /* in place: stays, as a system's */
    kiln_component_info info;
    kiln_component_info_get(kw->world, c, &info);
    if (value && memcmp(value, kiln_get(kw->world, e, c), info.size) == 0) return; /* the same: no change */
    if (spawned_while_loading(L, kw, loading, e)) return;
    char eb[24];
    klua_entity_str(e, eb);
    klua_fail(L, fname, "a mod's top level may change the %s of only the entities spawned while it runs (entity %s "
              "had one before, and a failed load of mod '%s' could not give it back); do it from a system",
              link ? "parent" : "name", eb, loading->name);
}

/* Whether the top level of loading set resource c where there was none (by its code or by code
 * of another mod's it called): one it may remove again, as it may despawn its spawns. */
static bool made_while_loading(const klua_mod *loading, kiln_component c) {
    for (int i = 0; i < loading->load_resource_count; i++)
        if (loading->load_resources[i] == c) return true;
    return false;
}

void klua_mod_before_resource(lua_State *L, klua_world *kw, kiln_component c, bool set, const char *fname) {
    klua_mod *loading = loading_for(kw);
    if (!loading || made_while_loading(loading, c)) return;
    if (!set && registered_by_load(loading, c)) return; /* (set: recorded all the same, whoever declares it) */
    if (!set) {
        kiln_component_info info;
        kiln_component_info_get(kw->world, c, &info);
        klua_fail(L, fname, "a mod's top level may remove only the resources set while it runs and those of the "
                      "components it registers (resource %s was there before, and a failed load of mod '%s' could "
                      "not put the value back); do it from a system", info.name, loading->name);
    }
    /* each component once: the record stays under the world's count of components */
    if (loading->load_resource_count == loading->load_resource_cap) { /* the loading mod's memory */
        int ncap = loading->load_resource_cap ? loading->load_resource_cap * 2 : 8;
        size_t one = sizeof *loading->load_resources;
        void *p = klua_mod_mem_alloc(&loading->mem, loading->load_resources,
                                     (size_t)loading->load_resource_cap * one, (size_t)ncap * one);
        if (!p) klua_no_memory(L);
        loading->load_resources = p;
        loading->load_resource_cap = ncap;
    }
    loading->load_resources[loading->load_resource_count++] = c;
}

kiln_commands *klua_mod_emits(lua_State *L, klua_world *kw) {
    klua_mod *loading = loading_for(kw);
    if (!loading) return NULL;
    if (!loading->load_emits) loading->load_emits = kiln_commands_create(kw->world);
    if (!loading->load_emits) klua_no_memory(L);
    return loading->load_emits;
}

/* The records of a settled top level go: they counted against the mod's memory limit. */
static void free_adds(klua_mod *mod) {
    klua_mod_mem_alloc(&mod->mem, mod->load_adds, (size_t)mod->load_add_cap * sizeof *mod->load_adds, 0);
    mod->load_adds = NULL;
    mod->load_add_cap = mod->load_add_count = 0;
    klua_mod_mem_alloc(&mod->mem, mod->load_set, (size_t)mod->load_set_cap * sizeof *mod->load_set, 0);
    mod->load_set = NULL;
    mod->load_set_cap = mod->load_set_count = mod->load_set_from = 0;
    klua_mod_mem_alloc(&mod->mem, mod->load_resources, (size_t)mod->load_resource_cap * sizeof *mod->load_resources, 0);
    mod->load_resources = NULL;
    mod->load_resource_cap = mod->load_resource_count = 0;
}

void klua_mod_load_undo(klua_mod *mod, kiln_world *world) {
    /* the latest first, each while the entity still has the component */
    for (int64_t i = mod->load_add_count; i-- > 0;) {
        klua_mod_added a = mod->load_adds[i];
        if (kiln_is_alive(world, a.entity) && kiln_has(world, a.entity, a.component))
            kiln_remove(world, a.entity, a.component, NULL);
    }
    /* before its spawns go: a resource it made holds no handle of theirs then */
    for (int i = 0; i < mod->load_resource_count; i++) kiln_resource_remove(world, mod->load_resources[i], NULL);
    free_adds(mod);
    if (mod->load_emits) kiln_commands_clear(mod->load_emits);
}

/* ---- a failed top level's spawns ---- */

static int by_entity(const void *a, const void *b) {
    kiln_entity x = ((const klua_mod_spawn *)a)->entity, y = ((const klua_mod_spawn *)b)->entity;
    return (x > y) - (x < y);
}

static int by_place(const void *a, const void *b) {
    int64_t x = ((const klua_mod_spawn *)a)->at, y = ((const klua_mod_spawn *)b)->at;
    return (x > y) - (x < y);
}

/* The place of e among the n sorted spawns, or -1. */
static int64_t place_of(const klua_mod_spawn *sorted, int64_t n, kiln_entity e) {
    const klua_mod_spawn key = {e, 0}, *p = e ? bsearch(&key, sorted, (size_t)n, sizeof key, by_entity) : NULL;
    return p ? p->at : -1;
}

/* Raises *held past every spawn an entity field of rows values (info's layout) names; rows of
 * the spawns themselves (owners, NULL for a resource) go with them and are passed over. */
static void note_held(const kiln_component_info *info, const uint8_t *values, int32_t rows,
                      const kiln_entity *owners, const klua_mod_spawn *sorted, int64_t n, int64_t *held) {
    for (int32_t r = 0; r < rows; r++) {
        if (owners && place_of(sorted, n, owners[r]) >= 0) continue;
        const uint8_t *row = values + (size_t)r * info->stride;
        for (int32_t f = 0; f < info->field_count; f++) {
            if (info->fields[f].type != KILN_TYPE_ENTITY) continue;
            for (uint32_t k = 0; k < info->fields[f].count; k++) {
                kiln_entity e;
                memcpy(&e, row + info->fields[f].offset + k * sizeof e, sizeof e);
                int64_t at = place_of(sorted, n, e);
                if (at >= *held) *held = at + 1;
            }
        }
    }
}

static bool has_entity_fields(const kiln_component_info *info) {
    for (int32_t f = 0; f < info->field_count; f++)
        if (info->fields[f].type == KILN_TYPE_ENTITY) return true;
    return false;
}

/* How many of the top level's spawns, from the first, may have left the mod: those before its
 * latest call out of it, and those up to the latest an entity field of the world (a row of
 * another entity, a resource) still holds. Out of memory to look: all of them. The spawns are
 * sorted by entity to look up meanwhile (no memory to take: a load may be taken back because
 * the host's ran out), then put back in order. */
static int64_t spawns_held(klua_mod *mod, kiln_world *world) {
    int64_t n = mod->load_spawn_count, held = mod->load_shown;
    /* a call out since its top level ended (a mod load_dir loaded after it): all may be seen */
    if (held >= n || mod->mods->calls != mod->load_calls) return n;
    klua_mod_spawn *sorted = mod->load_spawns;
    qsort(sorted, (size_t)n, sizeof *sorted, by_entity);
    for (kiln_component c = 1; c <= (kiln_component)kiln_component_count(world) && held < n; c++) {
        kiln_component_info info;
        if (!kiln_component_info_get(world, c, &info) || info.size == 0 || !has_entity_fields(&info)) continue;
        if (kiln_resource_has(world, c)) note_held(&info, kiln_resource_get(world, c), 1, NULL, sorted, n, &held);
        kiln_query *q;
        if (kiln_query_create(world, &(kiln_query_desc){.with = {c}}, &q) != KILN_OK) {
            held = n;
            break;
        }
        kiln_iter it;
        kiln_query_iter(q, &it);
        while (kiln_query_next(&it))
            note_held(&info, kiln_iter_column(&it, 0), it.count, it.entities, sorted, n, &held);
        kiln_query_destroy(q);
    }
    qsort(sorted, (size_t)n, sizeof *sorted, by_place);
    return held;
}

void klua_mod_load_unspawn(klua_mod *mod, kiln_world *world) {
    int64_t held = spawns_held(mod, world);
    bool back = true; /* each taken back so far: the slots are as before the next latest spawn */
    for (int64_t i = mod->load_spawn_count; i-- > 0;) {
        kiln_entity e = mod->load_spawns[i].entity;
        /* its own only: one it despawned spent its slot; host code it called (a granted function
         * restoring a snapshot) may have given the handle to an entity of the host's */
        if (!kiln_has(world, e, mod->tag)) {
            back = false;
            continue;
        }
        back = back && i >= held && kiln_unspawn(world, e) == KILN_OK;
        if (!back) kiln_despawn(world, e);
    }
}

void klua_mod_load_keep(klua_mod *mod, kiln_world *world) {
    free_adds(mod);
    mod->load_spawn_count = mod->load_shown = 0;
    if (!mod->load_emits || kiln_commands_count(mod->load_emits) == 0) return;
    /* an emit fails only for memory: the rest of them are dropped then, as a frame's would be */
    if (kiln_commands_apply(mod->load_emits, world, NULL) != KILN_OK) kiln_commands_clear(mod->load_emits);
}

void klua_mod_load_free(klua_mod *mod) {
    free_adds(mod);
    kiln_commands_destroy(mod->load_emits);
    mod->load_emits = NULL;
}
