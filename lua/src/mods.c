/* mods.c: the mod manager (kiln.mods): loading mods into states of their own, their books
 * (systems, components, entities, failures), reload in place, unload, poll. Invariant: no
 * lifecycle change happens while a frame runs or a mod's code is on the C stack. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mods.h"

#define DEFAULT_MEMORY ((size_t)64 << 20)
#define DEFAULT_INSTRUCTIONS 10000000
#define DEFAULT_ENTITIES 1000000
#define MAX_MODS KLUA_MODS_MAX

enum { MODS_UV_WORLD = 1, MODS_UV_COUNT = MODS_UV_WORLD };

/* ---- memory of the manager's own books (the host's allocator) ---------------------------- */

bool klua_mods_grow(klua_mods *mods, void **p, int *cap, int need, size_t item) {
    if (need <= *cap) return true;
    int ncap = *cap ? *cap * 2 : 8;
    while (ncap < need) ncap *= 2;
    void *q = klua_mods_alloc(mods, *p, (size_t)*cap * item, (size_t)ncap * item);
    if (!q) return false;
    *p = q;
    *cap = ncap;
    return true;
}


/* A frame runs, or some mod's code is on the C stack: no lifecycle change now. */
const char *klua_mods_busy(klua_mods *mods) {
    if (mods->kw->closed) return "the world is closed";
    if (mods->kw->run_L || mods->kw->current || kiln_is_deferred(mods->kw->world))
        return "not during a frame or a query loop; call it between frames";
    /* guest_depth counts every entry into mod code, a loading top level (not listed yet)
     * included, and each method of the manager under way (mods_class.c): host code they
     * reach (a granted function, the log, a finalizer an allocation runs) must not unload,
     * reload, load or close under them */
    if (mods->kw->guest_depth > mods->held) return "not while a mod's code runs";
    for (int i = 0; i < mods->count; i++)
        if (mods->list[i]->mem.depth > 0) return "not while a mod's code runs";
    if (mods->held > 1) return "not from inside another mods call";
    return NULL;
}

/* ---- what a mod's view of the world asks of the manager ---------------------------------- */

static kiln_component hook_before_spawn(lua_State *L, klua_world *kw, int64_t bytes, const kiln_component *comps,
                                        int32_t count) {
    klua_mod *mod = kw->mod;
    int64_t live = klua_mod_live(mod, kw->world);
    if (live + klua_mod_pending_spawns(mod, kw->world) >= mod->mods->entities)
        klua_raise(L, "mod '%s' has %I live entities, its limit", mod->name, (lua_Integer)mod->mods->entities);
    /* its values and ticks, its handle and its record (kiln_query_bytes counts the same) */
    mod->spawn_bytes = bytes + (int64_t)(sizeof(kiln_entity) + sizeof(uint64_t));
    klua_mod_check_held(L, mod, kw->world, mod->spawn_bytes, "a spawn");
    klua_mod_check_archetypes(L, mod, !klua_mod_spawn_lands(mod, comps, count),
                              "world:spawn"); /* last: a spawn refused otherwise is not counted */
    mod->rows.spawn_at = mod->rows.changes; /* counted above (klua_mod_live) */
    return mod->tag;
}

static void hook_after_spawn(lua_State *L, klua_world *kw, kiln_entity e) {
    klua_mod *mod = kw->mod;
    if (kiln_is_deferred(kw->world)) {
        mod->pending_spawns++;
        mod->pending_bytes += mod->spawn_bytes;
    } else {
        klua_mod_count_spawn(mod, kw->world);
    }
    if (!mod->loading) { /* code of another mod's that a top level called (an export) */
        if (mod->mods->loading) klua_mod_note_guest_spawn(L, mod->mods->loading, kw->world, e);
        return;
    }
    if (mod->load_spawn_count == mod->load_spawn_cap) {
        int64_t ncap = mod->load_spawn_cap ? mod->load_spawn_cap * 2 : 64;
        void *p = klua_mods_alloc(mod->mods, mod->load_spawns, (size_t)mod->load_spawn_cap * sizeof *mod->load_spawns,
                                  (size_t)ncap * sizeof *mod->load_spawns);
        if (!p) {
            kiln_unspawn(kw->world, e); /* the spawn never returned its handle */
            klua_no_memory(L);
        }
        mod->load_spawns = p;
        mod->load_spawn_cap = ncap;
    }
    mod->load_spawns[mod->load_spawn_count] = (klua_mod_spawn){e, mod->load_spawn_count};
    mod->load_spawn_count++;
}

static int declared_index(const klua_mod *mod, uint32_t id, bool event) {
    for (int i = 0; i < mod->declared_count; i++)
        if (mod->declared[i] == id && mod->declared_event[i] == event) return i;
    return -1;
}

/* A name new to the world is a registration the world keeps for good, whatever becomes of
 * the mod: all mods together may make mods->components of them (kept on the host's World, so
 * a new manager over the same world does not start afresh). */
static void hook_before_declare(lua_State *L, klua_world *kw, const char *name, bool event, bool existed) {
    klua_mod *mod = kw->mod;
    /* one it declared already takes no new place (a mod at its limit was never reloaded) */
    uint32_t id = event ? kiln_event_lookup(kw->world, name).id : kiln_component_lookup(kw->world, name);
    if (mod->declared_count == KLUA_MOD_MAX_COMPONENTS && declared_index(mod, id, event) < 0)
        klua_raise(L, "mod '%s' declares more than %d components and event types", mod->name,
                   KLUA_MOD_MAX_COMPONENTS);
    klua_world *host = mod->mods->kw;
    if (!existed && host->mod_types >= mod->mods->components)
        klua_fail(L, event ? "world:event" : "world:component", "mod '%s' may not register %s '%s': mods have "
                  "registered %d new components and event types in this world, the mods' limit (components)",
                  mod->name, event ? "event type" : "component", klua_quote(L, name, strlen(name)),
                  (int)host->mod_types);
    /* the flag that it is a mod's (hook_declared), made room for while a refusal can still raise */
    kiln_component next = (kiln_component)kiln_component_count(host->world) + 1;
    if (!existed && !event && !klua_flags_room(mod->mods->host, host, next)) klua_no_memory(L);
}

/* Whether component id is a mod's that no loaded mod owns (its registrar was unloaded, or loaded under an earlier
 * manager) and the host did not declare: the mod declaring it takes it as its own. Left to no one, its values on
 * others' entities counted against no mod's world_memory and stayed after every unload. */
static bool orphaned(const klua_mod *mod, uint32_t id) {
    klua_mods *mods = mod->mods;
    if (!klua_mod_registered(mods->kw, id) || klua_host_declared(mods->kw, id)) return false;
    for (int i = 0; i < mods->count; i++) {
        int k = declared_index(mods->list[i], id, false);
        if (k >= 0 && mods->list[i]->declared_first[k]) return false;
    }
    return true;
}

static void hook_declared(lua_State *L, klua_world *kw, uint32_t id, bool event, bool existed) {
    klua_mod *mod = kw->mod;
    if (!existed) mod->mods->kw->mod_types++;
    if (!existed && !event) klua_mark_mod_registered(mod->mods->kw, id);
    if (declared_index(mod, id, event) >= 0) return;
    if (mod->declared_count == KLUA_MOD_MAX_COMPONENTS)
        klua_raise(L, "mod '%s' declares more than %d components and event types", mod->name,
                   KLUA_MOD_MAX_COMPONENTS);
    bool adopted = existed && !event && orphaned(mod, id);
    mod->declared[mod->declared_count] = id;
    mod->declared_event[mod->declared_count] = event;
    mod->declared_adopted[mod->declared_count] = adopted;
    mod->declared_first[mod->declared_count++] = !existed || adopted;
}

static const char *hook_owner(klua_world *kw, uint32_t id, bool event, char *buf, size_t size) {
    klua_mod *self = kw->mod;
    const klua_mod *owner = id == 0 ? self : NULL;
    klua_mods *mods = self->mods;
    for (int i = 0; i < mods->count && !owner; i++) {
        int k = declared_index(mods->list[i], id, event);
        if (k >= 0 && mods->list[i]->declared_first[k]) owner = mods->list[i];
    }
    /* none loaded: a component a mod registered stays registered after it, and is not the host's
     * (it was named so); who registered an event type is not kept */
    if (owner) snprintf(buf, size, "mod '%s'", owner->name);
    else snprintf(buf, size, "%s", event ? "the host or a mod no longer loaded"
                  : klua_mod_registered(mods->kw, id) && !klua_host_declared(mods->kw, id) ? "a mod no longer loaded"
                  : "the host");
    return buf;
}

/* The owner of the system called name: a mod's name, or NULL for the host's. */
static const char *system_owner(klua_mods *mods, const char *name, const klua_mod *skip) {
    for (int i = 0; i < mods->count; i++) {
        klua_mod *m = mods->list[i];
        if (m == skip) continue;
        for (int k = 0; k < m->system_count; k++)
            if (strcmp(m->systems[k], name) == 0 && klua_mod_runs(m, name)) return m->name;
    }
    return NULL;
}

static bool remember_system(klua_mod *mod, const char *name) {
    for (int k = 0; k < mod->system_count; k++)
        if (strcmp(mod->systems[k], name) == 0) return true;
    /* a full list forgets the names the mod let go first: one adding and removing systems by
     * fresh names frame after frame grew it (host memory, scanned at every add) for good */
    if (mod->system_count == mod->system_cap) {
        int kept = 0;
        for (int k = 0; k < mod->system_count; k++)
            if (klua_mod_runs(mod, mod->systems[k])) memmove(mod->systems[kept++], mod->systems[k], sizeof *mod->systems);
        mod->system_count = kept;
    }
    if (!klua_mods_grow(mod->mods, (void **)&mod->systems, &mod->system_cap, mod->system_count + 1, sizeof *mod->systems))
        return false;
    strcpy(mod->systems[mod->system_count++], name);
    return true;
}

static void hook_add_system(lua_State *L, klua_world *kw, const kiln_system_desc *d) {
    klua_mod *mod = kw->mod;
    klua_mods *mods = mod->mods;
    const char *fname = "world:system";
    bool ours_before = mod->previous && system_owner(mods, d->name, NULL) == mod->previous->name;
    if (kiln_schedule_find(kw->schedule, d->name) >= 0 && !ours_before) {
        const char *owner = system_owner(mods, d->name, NULL);
        if (owner) klua_fail(L, fname, "a system named '%s' already exists (of mod '%s')", d->name, owner);
        klua_fail(L, fname, "a system named '%s' already exists (of the host)", d->name);
    }
    klua_mod_check_systems(L, mod, d, fname);
    if (!mod->loading) {
        if (!remember_system(mod, d->name)) klua_no_memory(L);
        if (kiln_schedule_add(kw->schedule, d) != KILN_OK) klua_fail_world(L, kw->world, fname);
        return;
    }
    for (int i = 0; i < mod->staged_count; i++)
        if (strcmp(mod->staged[i].name, d->name) == 0)
            klua_fail(L, fname, "a system named '%s' already exists", d->name);
    if (!klua_mods_grow(mods, (void **)&mod->staged, &mod->staged_cap, mod->staged_count + 1, sizeof *mod->staged))
        klua_no_memory(L);
    klua_mod_staged *st = &mod->staged[mod->staged_count];
    memset(st, 0, sizeof *st);
    st->desc = *d;
    strcpy(st->name, d->name);
    for (int k = 0; k < KILN_SYSTEM_MAX_ORDER; k++) {
        if (d->before[k]) snprintf(st->before[k], sizeof st->before[k], "%s", d->before[k]);
        if (d->after[k]) snprintf(st->after[k], sizeof st->after[k], "%s", d->after[k]);
    }
    mod->staged_count++;
}

/* Points a staged desc's names at its own copies. Done when it is used, not when staged: the
 * staged array moves when it grows, and pointers into it would dangle. */
static const kiln_system_desc *staged_desc(klua_mod_staged *st) {
    st->desc.name = st->name;
    for (int k = 0; k < KILN_SYSTEM_MAX_ORDER; k++) {
        st->desc.before[k] = st->before[k][0] ? st->before[k] : NULL;
        st->desc.after[k] = st->after[k][0] ? st->after[k] : NULL;
    }
    return &st->desc;
}

/* Appends a failure to the host world's list (world:progress returns it); protected. */
typedef struct failure_args {
    klua_mods *mods;
    const char *mod, *system, *message;
    bool disabled;
} failure_args;

/* Runs protected on the host thread with the args and the host's World (pushed by the
 * caller: inside this call, klua_push_self's progress_idx would name this frame's slots). */
static int push_failure(lua_State *H) {
    failure_args *a = lua_touserdata(H, 1);
    if (lua_type(H, 2) != LUA_TUSERDATA) return 0;
    /* the mod chose the message (error(string.rep(...))): the host's list gets it bounded */
    size_t len = strlen(a->message);
    lua_pushfstring(H, "mod '%s': ", a->mod);
    lua_pushlstring(H, a->message, len > KLUA_MOD_ERROR ? KLUA_MOD_ERROR : len);
    lua_pushstring(H, len > KLUA_MOD_ERROR ? "..." : "");
    lua_concat(H, 3);
    size_t n;
    const char *message = lua_tolstring(H, -1, &n);
    klua_push_failure(H, 2, a->system, message, n, "", a->disabled, a->mod);
    return 0;
}

static void remove_systems(klua_mod *mod);

#if KLUA_LUAJIT
/* Lua 5.4 collects in full when an allocation would pass a mod's memory limit, and tries
 * again; LuaJIT raises at once. Its collector starts a cycle when the heap has doubled since
 * the last one, so a mod whose live data passed half its limit failed as soon as its garbage
 * filled the rest (at the smallest limit a bare state takes 150 of its 256 KiB: a system
 * making 100 KiB of short strings failed every run), and a mod somewhat lower failed or not
 * by where the collector's cycle stood. So the budget's hook, between two instructions,
 * collects once the state has grown halfway from the least it held since the last such
 * collection to the limit; half that room is left for what the next 1000 instructions make.
 * Not charged to the budget, as Lua 5.4's collections on a refused allocation are not: a mod
 * growing its live data to the limit meets a collection at each halving of the room left
 * (charged by the bytes walked, as collectgarbage() is, those took 10 million instructions
 * from a mod growing to 64 MiB). A mod that holds its live data at the limit and keeps making
 * garbage gets a collection every 1000 instructions, under Lua 5.4 one at every allocation:
 * the wall clock (opts.milliseconds) bounds both. */
static void hook_step(lua_State *L, klua_world *kw) {
    klua_mod_mem *m = &((klua_mod *)kw->mod)->mem;
    size_t room = m->limit > m->floor ? m->limit - m->floor : 0;
    if (m->used <= m->floor + room / 2) return;
    lua_gc(L, LUA_GCCOLLECT, 0);
    m->floor = m->used;
}
#endif

static void hook_failed(klua_world *kw, const char *system, const char *message, bool disabled, bool out_of_memory) {
    klua_mod *mod = kw->mod;
    klua_mods *mods = mod->mods;
    mod->failures++;
    snprintf(mod->error, sizeof mod->error, "system '%s': %s", system, message);
    /* a mod that keeps running out of memory is stopped; its state goes at the next sweep.
     * A run that failed otherwise is no strike, though an allocation was refused in it: Lua
     * 5.4 collects and tries again, and the run went on (it was counted one, so a mod whose
     * memory was full of garbage was disabled under Lua 5.4 for running past its budget) */
    mod->mem_strikes = out_of_memory && mod->mem.refused > 0 ? mod->mem_strikes + 1 : 0;
#if KLUA_LUAJIT
    /* Lua 5.4 collects in full when an allocation fails and tries again; LuaJIT raises at once,
     * so what the failed run left (garbage now) would fill the budget until the collector came
     * round, failing the mod's next runs, and its budget errors, for memory it no longer uses */
    if (mod->mem.refused > 0 && mod->L) {
        lua_gc(mod->L, LUA_GCCOLLECT, 0);
        mod->mem.floor = mod->mem.used;
    }
#endif
    mod->mem.refused = 0;
    if (mod->mem_strikes >= KLUA_MOD_MEM_STRIKES && mod->status == KLUA_MOD_RUNNING) {
        mod->status = KLUA_MOD_DISABLED;
        snprintf(mod->error, sizeof mod->error,
                 "disabled: its code ran out of its %zu bytes of memory %d times in a row (last in system '%s')",
                 mods->memory, KLUA_MOD_MEM_STRIKES, system);
        remove_systems(mod);
        disabled = true;
    }
    lua_State *H = klua_mods_host_thread(mods);
    if (!lua_checkstack(H, 6)) return;
    failure_args a = {mods, mod->name, system, mod->status == KLUA_MOD_DISABLED ? mod->error : message, disabled};
    lua_pushlightuserdata(H, &a);
    klua_push_self(H, mods->kw);
    if (klua_pcall_c(H, push_failure, 2, 0, 0) != LUA_OK) lua_pop(H, 1);
}

static int64_t hook_spawn_room(klua_world *kw) {
    klua_mod *mod = kw->mod;
    int64_t live = klua_mod_live(mod, kw->world);
    int64_t room = mod->mods->entities - live - klua_mod_pending_spawns(mod, kw->world);
    return room > 0 ? room : 0;
}

static void hook_before_grow(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c, int64_t bytes,
                             const char *fname) {
    klua_mod *mod = kw->mod;
    kiln_world *world = kw->world;
    if (e == KILN_NULL_ENTITY && c == 0) { /* an event */
        klua_mod_check_held(L, mod, world, bytes, fname);
        mod->event_bytes += bytes;
        return;
    }
    /* a resource, or a value on another's entity: a mod's component counts against the mod
     * that registered it, whoever sets or adds it (the host's components are the host's) */
    int k = -1;
    klua_mod *payer = e != KILN_NULL_ENTITY && kiln_has(world, e, mod->tag) ? mod : NULL;
    for (int i = -1; i < mod->mods->count && !payer; i++) {
        klua_mod *m = i < 0 ? mod : mod->mods->list[i];
        k = declared_index(m, c, false);
        if (k >= 0 && m->declared_first[k]) payer = m;
    }
    if (e == KILN_NULL_ENTITY) {
        if (payer) klua_mod_check_held(L, payer, world, bytes, fname);
        return;
    }
    if (payer != mod || !kiln_has(world, e, mod->tag)) {
        if (payer && kiln_has(world, e, payer->tag)) payer = NULL; /* its own row counts it */
        kiln_query_desc others = {.with = {c}, .without = {payer ? payer->tag : 0}};
        if (payer && !payer->foreign[k] && kiln_query_create(world, &others, &payer->foreign[k]) != KILN_OK)
            klua_fail(L, fname, "%s", klua_core_detail(kiln_world_error(world)));
    }
    if (payer) klua_mod_check_held(L, payer, world, bytes, fname);
    klua_mod_check_archetypes(L, mod, !klua_mod_move_lands(mod, e, c, true),
                              fname); /* after: an add refused for its bytes is not counted */
    if (payer && kiln_is_deferred(world)) payer->pending_bytes += bytes;
}

/* A mod's queries hold C memory that grows with the archetypes they match (72 bytes each),
 * far past the few KiB of Lua memory a query takes: they are counted, and bounded. */
static void hook_query_made(lua_State *L, klua_world *kw, kiln_query *q, const char *fname) {
    klua_mod *mod = kw->mod;
    int64_t bytes = kiln_query_memory(q), limit = mod->mods->world_memory;
    if (kw->query_count >= mod->mods->queries || bytes > limit - klua_mod_held_bytes(mod, kw->world)) {
        /* the queries it dropped, not yet collected, go first. Charged as collectgarbage() is
         * (a refused query in a loop made a full collection an instruction), without raising
         * here (q is not destroyed yet): past the budget, the next instruction raises */
        kw->budget_used += (int64_t)(mod->mem.used / KLUA_COST_BYTES_PER_STEP);
        if (kw->budget_limit > 0 && kw->budget_used > kw->budget_limit && (lua_gethookmask(L) & LUA_MASKCOUNT))
            lua_sethook(L, lua_gethook(L), LUA_MASKCOUNT, 1);
        lua_gc(L, LUA_GCCOLLECT, 0);
    }
    if (kw->query_count >= mod->mods->queries) {
        kiln_query_destroy(q);
        klua_fail(L, fname, "mod '%s' holds %d live queries, its limit (queries)", mod->name,
                   (int)kw->query_count);
    }
    if (bytes > limit - klua_mod_held_bytes(mod, kw->world)) {
        kiln_query_destroy(q);
        klua_mod_check_held(L, mod, kw->world, bytes, fname); /* raises */
    }
}

static void hook_before_reshape(lua_State *L, klua_world *kw, kiln_entity e, kiln_component c, bool add,
                                const char *fname) {
    klua_mod_check_archetypes(L, kw->mod, !klua_mod_move_lands(kw->mod, e, c, add), fname);
}

static const klua_mod_hooks hooks = {hook_before_spawn, hook_after_spawn, hook_before_declare, hook_declared,
                                     hook_owner,        hook_add_system,  hook_failed,         hook_spawn_room,
                                     hook_before_grow,  hook_query_made,  hook_before_reshape,
#if KLUA_LUAJIT
                                     hook_step,
#else
                                     NULL,
#endif
                                     klua_mod_queue_remove,  klua_mod_queue_despawn_tree,  klua_mod_before_add,
                                     klua_mod_before_resource, klua_mod_before_change,     klua_mod_emits,
                                     klua_mod_dropped,         klua_mod_queue_plain_remove, klua_mod_queued};

/* ---- lifecycle ----------------------------------------------------------------------------- */

static void remove_systems(klua_mod *mod) {
    for (int k = 0; k < mod->system_count; k++)
        if (klua_mod_runs(mod, mod->systems[k]) && kiln_schedule_find(mod->mods->kw->schedule, mod->systems[k]) >= 0)
            kiln_schedule_remove(mod->mods->kw->schedule, mod->systems[k]);
}

/* Closes the mod's state once none of its systems is left in the schedule. */
static bool close_state(klua_mod *mod) {
    if (!mod->L) return true;
    kiln_schedule *sched = mod->mods->kw->schedule;
    for (int k = 0; k < mod->system_count; k++)
        if (sched && klua_mod_runs(mod, mod->systems[k]) && kiln_schedule_find(sched, mod->systems[k]) >= 0) {
            kiln_schedule_remove(sched, mod->systems[k]);
            if (kiln_schedule_find(sched, mod->systems[k]) >= 0) return false; /* leaves at frame end */
        }
    lua_close(mod->L);
    mod->L = NULL;
    mod->kw = NULL;
    return true;
}

static void free_mod(klua_mods *mods, klua_mod *mod) {
    klua_mods_alloc(mods, mod->staged, (size_t)mod->staged_cap * sizeof *mod->staged, 0);
    klua_mods_alloc(mods, mod->load_spawns, (size_t)mod->load_spawn_cap * sizeof *mod->load_spawns, 0);
    klua_mod_load_free(mod);
    klua_mods_alloc(mods, mod->systems, (size_t)mod->system_cap * sizeof *mod->systems, 0);
    klua_mods_alloc(mods, mod, sizeof *mod, 0);
}

/* Destroys the queries over mod's components on others' entities, except those keep holds
 * too (a reload's new version takes over its predecessor's). */
static void release_foreign(klua_mod *mod, const klua_mod *keep) {
    for (int k = 0; k < KLUA_MOD_MAX_COMPONENTS; k++) {
        bool shared = keep && keep->foreign[k] == mod->foreign[k];
        if (mod->foreign[k] && !shared) kiln_query_destroy(mod->foreign[k]);
    }
}

/* Takes component c off every entity and its resource out of the world: what a mod that
 * registered c leaves behind when it goes (the registration itself stays for good). others
 * (may be NULL): the mod's query over c on entities not its own, made when it first put c on
 * one, which a world out of memory for a new query still has. */
static void drop_component(kiln_world *world, kiln_component c, kiln_query *others) {
    kiln_resource_remove(world, c, NULL);
    kiln_query *q = NULL;
    if (kiln_query_create(world, &(kiln_query_desc){.with = {c}}, &q) != KILN_OK && !(q = others)) return;
    kiln_iter it;
    kiln_query_iter(q, &it);
    while (kiln_query_next(&it))
        for (int32_t r = 0; r < it.count; r++) kiln_remove(world, it.entities[r], c, NULL);
    if (q != others) kiln_query_destroy(q);
}

/* Adds the staged systems (replacing the previous version's of the same name in place) and
 * removes the previous version's others. New names go first, so a refusal among them undoes
 * cleanly, and so does a cycle the new order closes (checked whole before any replace); a
 * replace refused for memory leaves the previous version without systems, which the caller reports. */
typedef enum commit_result { COMMIT_OK, COMMIT_UNDONE, COMMIT_BROKEN } commit_result;

static commit_result commit_systems(klua_mod *mod) {
    kiln_schedule *sched = mod->kw->schedule;
    kiln_world *world = mod->kw->world;
    /* the list of its systems has room for all of them first, so remembering one cannot fail
     * once the schedule has it (a replace failing then would stop the previous version) */
    if (mod->staged_count > 0 &&
        !klua_mods_grow(mod->mods, (void **)&mod->systems, &mod->system_cap, mod->staged_count, sizeof *mod->systems)) {
        snprintf(mod->error, sizeof mod->error, "not enough memory");
        return COMMIT_UNDONE;
    }
    /* decided before the first pass adds anything: a name pass 0 added is no replace */
    for (int i = 0; i < mod->staged_count; i++)
        mod->staged[i].replace = mod->previous && kiln_schedule_find(sched, mod->staged[i].name) >= 0;
    /* pass 0 adds the new names; pass 1 takes the replaced ones' constraints off (fini NULL:
     * the old version's leave, the new one's stays for pass 2), so no replace meets the old
     * version's order in a cycle; pass 2 puts them in whole. The whole new order is checked
     * first: once pass 1 has begun, the old version's systems are gone. */
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1 && mod->previous && !klua_mod_order_check(mod)) {
            remove_systems(mod); /* the new names pass 0 added */
            return COMMIT_UNDONE;
        }
        for (int k = 0; pass == 1 && mod->previous && k < mod->previous->system_count; k++) {
            const char *name = mod->previous->systems[k]; /* its others leave first */
            bool kept = false;
            for (int i = 0; i < mod->staged_count && !kept; i++) kept = strcmp(mod->staged[i].name, name) == 0;
            if (!kept && klua_mod_runs(mod->previous, name)) kiln_schedule_remove(sched, name);
        }
        for (int i = 0; i < mod->staged_count; i++) {
            klua_mod_staged *st = &mod->staged[i];
            bool replace = st->replace;
            if (replace != (pass > 0)) continue;
            kiln_system_desc bare = *staged_desc(st);
            memset(bare.before, 0, sizeof bare.before);
            memset(bare.after, 0, sizeof bare.after);
            bare.fini = NULL;
            kiln_result r = pass == 1 ? kiln_schedule_replace(sched, &bare)
                            : replace ? kiln_schedule_replace(sched, staged_desc(st))
                                      : kiln_schedule_add(sched, staged_desc(st));
            st->bare = r == KILN_OK && pass == 1;
            if (r == KILN_OK && pass < 2 && !remember_system(mod, st->name)) {
                if (pass == 0) kiln_schedule_remove(sched, st->name); /* (a bare one: below) */
                r = KILN_ERR_OUT_OF_MEMORY;
            }
            if (r != KILN_OK) {
                snprintf(mod->error, sizeof mod->error, "its system '%s' was refused: %s", st->name,
                         klua_core_detail(kiln_world_error(world)));
                for (int k = 0; k < mod->staged_count; k++) /* their fini is not the schedule's */
                    if (mod->staged[k].bare && kiln_schedule_remove(sched, mod->staged[k].name) == KILN_OK)
                        mod->staged[k].desc.fini(world, mod->staged[k].desc.user);
                remove_systems(mod); /* the new version's, added or replaced so far */
                if (pass == 0) return COMMIT_UNDONE;
                remove_systems(mod->previous);
                return COMMIT_BROKEN;
            }
        }
    }
    return COMMIT_OK;
}

/* Loads the mod at path (a new one, or the next version of previous). On failure returns
 * NULL with the reason in err, and the world as it was (entities its top level spawned are
 * despawned; values it set stay). */
klua_mod *klua_mods_load(klua_mods *mods, const char *path, klua_mod *previous, char *err, size_t size) {
    kiln_world *world = mods->kw->world;
    klua_mod *mod = klua_mods_alloc(mods, NULL, 0, sizeof *mod);
    if (!mod) {
        snprintf(err, size, "not enough memory");
        return NULL;
    }
    memset(mod, 0, sizeof *mod);
    mod->mods = mods;
    mod->status = KLUA_MOD_RUNNING;
    if (!klua_mod_describe(mod, path)) goto fail;
    if (previous && strcmp(previous->name, mod->name) != 0) {
        snprintf(mod->error, sizeof mod->error, "its name changed to '%s'; unload and load it instead", mod->name);
        goto fail;
    }
    if (!previous && klua_mods_find(mods, mod->name)) {
        snprintf(mod->error, sizeof mod->error, "a mod named '%s' is already loaded", mod->name);
        goto fail;
    }
    if (!previous && mods->count >= MAX_MODS) {
        snprintf(mod->error, sizeof mod->error, "at most %d mods", MAX_MODS);
        goto fail;
    }
    for (int i = 0; i < mod->depend_count; i++) {
        klua_mod *dep = klua_mods_find(mods, mod->depends[i]);
        if (!dep || !dep->L) {
            snprintf(mod->error, sizeof mod->error, "it depends on '%s', which is not %s", mod->depends[i],
                     dep ? "running" : "loaded");
            goto fail;
        }
    }
    const char *back = previous ? klua_mod_depends_back(mods, mod) : NULL;
    if (back) { /* its dependents are reloaded after it: a circle would never end */
        snprintf(mod->error, sizeof mod->error, "it depends on '%s', which depends on it", back);
        goto fail;
    }
    if (previous) {
        /* its entities are the previous version's, counted against its limits from the top
         * level on (a reload counting only its own spawns could add a whole limit each time) */
        mod->tag = previous->tag;
        mod->spawned = previous->spawned;
    } else {
        char tag_name[KILN_MAX_NAME + 1];
        snprintf(tag_name, sizeof tag_name, KLUA_MOD_TAG_PREFIX "%.*s", KLUA_MOD_NAME_MAX, mod->name);
        /* an owner mark: the host's copies of its entities (clones, prefabs, scenes) are the host's */
        kiln_component_desc tag = {.name = tag_name, .owner = true};
        if (kiln_component_register(world, &tag, &mod->tag) != KILN_OK ||
            kiln_query_create(world, &(kiln_query_desc){.with = {mod->tag}}, &mod->spawned) != KILN_OK) {
            snprintf(mod->error, sizeof mod->error, "%s", klua_core_detail(kiln_world_error(world)));
            goto fail;
        }
        if (!klua_mod_kept_fit(mod, world)) goto fail; /* before its code runs: nothing to take back */
    }
    /* What a failed end left queued (kiln_defer_end) is the host's: it lands now, so what the
     * top level leaves queued is the mod's alone, dropped if the load is refused. */
    bool begun = kiln_defer_begin(world) == KILN_OK; /* out of memory past 32 threads' sections */
    if (!begun || kiln_defer_end(world) != KILN_OK) {
        snprintf(mod->error, sizeof mod->error, "%s: %s", begun ? "the world's queued changes could not land"
                 : "the world could not open a deferred section", klua_core_detail(kiln_world_error(world)));
        goto fail;
    }
    mod->generation = ++mods->generations; /* 64 bits: never back to 0, the host's */
    mod->L = klua_mod_state(mod);
    if (!mod->L) goto fail;
    mod->kw->mod_hooks = &hooks;
    mod->kw->mod = mod;
    mod->kw->entry_depth = &mod->mem.depth;
    mod->kw->instructions = mods->instructions;
    mod->kw->frame_limit = mods->frame_instructions;
    mod->kw->time_limit_ms = mods->milliseconds;
    mod->kw->frame_time_ms = mods->frame_milliseconds;
    mod->previous = previous;
    if (previous) {
        /* the components it declared stay its own */
        memcpy(mod->declared, previous->declared, sizeof mod->declared);
        memcpy(mod->declared_event, previous->declared_event, sizeof mod->declared_event);
        memcpy(mod->declared_first, previous->declared_first, sizeof mod->declared_first);
        memcpy(mod->declared_adopted, previous->declared_adopted, sizeof mod->declared_adopted);
        memcpy(mod->foreign, previous->foreign, sizeof mod->foreign);
        mod->declared_count = previous->declared_count;
    }
    klua_mod_watch(mod, mod->entry);
    klua_mod_load_begin(mod);
    bool ok = klua_mod_run_file(mod, mod->entry);
    mods->loading = NULL;
    mod->loading = false;
    mod->load_calls = mods->calls;
    klua_mods_end_loops(mods, mod->L, mod->kw, mod); /* loops its top level left open: its changes */
    if (ok && mod->mem.refused > 0 && mod->mem.used > mod->mem.limit) {
        snprintf(mod->error, sizeof mod->error, "its top level ran out of memory");
        ok = false;
    }
    commit_result committed = ok ? commit_systems(mod) : COMMIT_UNDONE;
    if (!ok || committed != COMMIT_OK) {
        kiln_defer_clear(world); /* its queued changes (a loop's end that failed) never land */
        klua_mod_load_undo(mod, world);
        /* the components this attempt registered belong to no mod now: off every entity, first,
         * so a handle of its spawns they held keeps no slot spent */
        for (int i = previous ? previous->declared_count : 0; i < mod->declared_count; i++)
            if (mod->declared_first[i] && !mod->declared_adopted[i] && !mod->declared_event[i] &&
                !klua_host_declared(mods->kw, mod->declared[i]))
                drop_component(world, mod->declared[i], mod->foreign[i]);
        klua_mod_load_unspawn(mod, world);
        if (committed == COMMIT_BROKEN) {
            previous->status = KLUA_MOD_DISABLED; /* its state goes at the next sweep */
            snprintf(previous->error, sizeof previous->error, "stopped: the reload's %.500s", mod->error);
        }
        goto fail;
    }
    mod->previous = NULL;
    mod->staged_count = 0;
    return mod; /* its spawns stay listed until the caller keeps the load */
fail:
    if (previous) klua_mod_carry_drops(previous, mod, true); /* its top level's drops: the old version's */
    snprintf(err, size, "mod '%s': %s", mod->name[0] ? mod->name : previous ? previous->name : path, mod->error);
    if (mod->L) lua_close(mod->L); /* none of its systems is in the schedule */
    if (!previous && mod->spawned) kiln_query_destroy(mod->spawned);
    release_foreign(mod, previous);
    free_mod(mods, mod);
    return NULL;
}

static void list_remove(klua_mods *mods, klua_mod *mod) {
    for (int i = 0; i < mods->count; i++)
        if (mods->list[i] == mod) {
            memmove(mods->list + i, mods->list + i + 1, sizeof *mods->list * (size_t)(mods->count - i - 1));
            mods->count--;
            return;
        }
}

/* What an unload does once the world is clear of the mod (or keeps its data): what another loaded mod declared
 * too is that mod's now, keep or not; its systems leave, its state closes, it leaves the list. */
static void forget(klua_mods *mods, klua_mod *mod) {
    klua_mod_hand_over(mods, mod);
    remove_systems(mod);
    close_state(mod);
    if (mod->spawned) kiln_query_destroy(mod->spawned);
    release_foreign(mod, NULL);
    list_remove(mods, mod);
    free_mod(mods, mod);
    klua_mods_settle_proxies(mods); /* what its proxies held in the others' states */
}

/* Takes mod's components no one else declared (the host, another loaded mod) off the world
 * and despawns the entities of spawned (NULL: none). */
static bool clear_world(klua_mods *mods, klua_mod *mod, kiln_query *spawned, char *err, size_t size) {
    kiln_component drop[KLUA_MOD_MAX_COMPONENTS];
    int count = 0;
    for (int i = 0; i < mod->declared_count; i++) {
        if (mod->declared_event[i] || !mod->declared_first[i]) continue;
        bool shared = klua_host_declared(mods->kw, mod->declared[i]);
        for (int k = 0; k < mods->count && !shared; k++)
            shared = mods->list[k] != mod && declared_index(mods->list[k], mod->declared[i], false) >= 0;
        if (!shared) drop[count++] = mod->declared[i];
    }
    return klua_mod_clear(mods, spawned, mod->tag, drop, count, err, size);
}

bool klua_mods_unload(klua_mods *mods, klua_mod *mod, bool keep, char *err, size_t size) {
    if (!keep && !clear_world(mods, mod, mod->spawned, err, size)) return false;
    forget(mods, mod);
    return true;
}

void klua_mods_take_back(klua_mods *mods, klua_mod *mod) {
    klua_mod_load_undo(mod, mods->kw->world);
    klua_mod_load_unspawn(mod, mods->kw->world);
    /* the load fails anyway: the mod goes whatever is left, but entities an unload kept of it
     * before this load stay kept (its own spawns went above) */
    clear_world(mods, mod, mod->load_others ? NULL : mod->spawned, NULL, 0);
    forget(mods, mod);
}

/* Releases the states of disabled mods whose systems have left. */
void klua_mods_sweep(klua_mods *mods) {
    if (klua_mods_busy(mods)) return;
    for (int i = 0; i < mods->count; i++) {
        klua_mod *mod = mods->list[i];
        if (mod->status == KLUA_MOD_DISABLED && mod->L) close_state(mod);
    }
    klua_mods_settle_proxies(mods);
}

/* The log of a reloaded mod: the old version's lines, then what the new top level printed. */
static void carry_log(klua_mod *mod, const klua_mod *old) {
    char fresh[KLUA_MOD_LOG_LINES][KLUA_MOD_LOG_LINE];
    int64_t n = mod->log_total < KLUA_MOD_LOG_LINES ? mod->log_total : KLUA_MOD_LOG_LINES;
    for (int64_t i = 0; i < n; i++)
        memcpy(fresh[i], mod->log[(mod->log_next - n + i + KLUA_MOD_LOG_LINES) % KLUA_MOD_LOG_LINES],
               KLUA_MOD_LOG_LINE);
    int64_t total = old->log_total + mod->log_total;
    memcpy(mod->log, old->log, sizeof mod->log);
    mod->log_next = old->log_next;
    for (int64_t i = 0; i < n; i++) {
        memcpy(mod->log[mod->log_next], fresh[i], KLUA_MOD_LOG_LINE);
        mod->log_next = (mod->log_next + 1) % KLUA_MOD_LOG_LINES;
    }
    mod->log_total = total;
}

/* Reloads mod in place (its new version, or NULL with err). */
static klua_mod *reload_one(klua_mods *mods, klua_mod *old, char *err, size_t size) {
    bool running = old->L && old->status == KLUA_MOD_RUNNING;
    char path[KLUA_MOD_PATH];
    strcpy(path, old->path);
    if (!running) close_state(old); /* disabled: its state is gone; load it afresh under the same books */
    klua_mod *mod = klua_mods_load(mods, path, old, err, size);
    if (mod) klua_mod_load_keep(mod, mods->kw->world); /* (nothing below takes a reload back) */
    if (!mod) {
        if (running && old->status == KLUA_MOD_RUNNING)
            snprintf(old->error, sizeof old->error, "reload failed, the old version runs on: %s", err);
        else if (!running)
            snprintf(old->error, sizeof old->error, "reload failed: %s", err);
        return NULL;
    }
    if (running) {
        mod->failures = old->failures;
        klua_mod_carry_drops(mod, old, false); /* (its top level's drops are the new version's) */
        carry_log(mod, old);
    }
    for (int i = 0; i < mods->count; i++)
        if (mods->list[i] == old) mods->list[i] = mod;
    old->system_count = 0; /* replaced or removed by the commit */
    if (running) close_state(old);
    free_mod(mods, old);
    return mod;
}

static bool depends_on(const klua_mod *m, const klua_mod *dep) {
    for (int d = 0; d < m->depend_count; d++)
        if (strcmp(m->depends[d], dep->name) == 0) return true;
    return false;
}

/* Reloads mod in place, then the running mods that depend on it, directly or not (their
 * imports point into the old versions): each once, after all it depends on that reloads
 * (the depends of loaded mods form no circle: klua_mods_load refuses one). true, or false with err.
 * The dependents whose reload failed (their error says why) go to failed, *failed_count of them. */
bool klua_mods_reload(klua_mods *mods, klua_mod *old, char *err, size_t size, klua_mod **failed,
                      int *failed_count) {
    *failed_count = 0;
    klua_mod *mod = reload_one(mods, old, err, size);
    if (!mod) return false;
    bool due[KLUA_MODS_MAX] = {false}, done[KLUA_MODS_MAX] = {false};
    int n = mods->count < KLUA_MODS_MAX ? mods->count : KLUA_MODS_MAX;
    for (int i = 0; i < n; i++) due[i] = done[i] = mods->list[i] == mod;
    for (bool grew = true; grew;) {
        grew = false;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n && !due[i]; j++)
                if (due[j] && depends_on(mods->list[i], mods->list[j])) due[i] = grew = true;
    }
    for (bool moved = true; moved;) {
        moved = false;
        for (int i = 0; i < n; i++) {
            bool ready = due[i] && !done[i];
            for (int j = 0; j < n && ready; j++)
                ready = !(due[j] && !done[j] && depends_on(mods->list[i], mods->list[j]));
            if (!ready) continue;
            char sub[KLUA_MOD_ERROR];
            if (!reload_one(mods, mods->list[i], sub, sizeof sub)) {
                snprintf(err, size, "%s", sub);
                failed[(*failed_count)++] = mods->list[i]; /* failed: still listed, as it was */
            }
            done[i] = moved = true;
        }
    }
    return true;
}

/* Closes every mod's state (their systems leave; entities and components stay). */
void klua_mods_close_all(void *ud) {
    klua_mods *mods = ud;
    if (mods->closed) return;
    mods->closed = true;
    for (int i = mods->count - 1; i >= 0; i--) {
        klua_mod *mod = mods->list[i];
        remove_systems(mod);
        if (mod->L) {
            lua_close(mod->L); /* not running: closing comes from the host, between frames */
            mod->L = NULL;
        }
        if (mod->spawned && !mods->kw->closed) kiln_query_destroy(mod->spawned);
        if (!mods->kw->closed) release_foreign(mod, NULL);
        free_mod(mods, mod);
    }
    mods->count = 0;
    klua_mods_alloc(mods, mods->list, (size_t)mods->cap * sizeof *mods->list, 0);
    mods->list = NULL;
    mods->cap = 0;
    if (mods->kw->on_release_ud == mods) mods->kw->on_release = NULL, mods->kw->load_owned = NULL;
    klua_mods_unwatch_drops(mods);
}

/* The collector calls this only when nothing holds the manager (a frame, a mods call or a
 * mod's code holds it: the world on their stack keeps it), or with the world unreachable too,
 * whose release closes the mods when this did not. A script calling it early from code those
 * reach (a granted function, the log) would close mod states under their own C frames (a use
 * after free when the mod's call returned): it does nothing then. */
void klua_mods_collect(klua_mods *mods) {
    if (!mods->closed && (mods->kw->closed || (mods->held == 0 && !klua_mods_busy(mods))))
        klua_mods_close_all(mods);
}

void klua_mods_close(klua_mods *mods, lua_State *L) {
    klua_mods_close_all(mods);
    klua_mod_settle_proxies(L);
}
