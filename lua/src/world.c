/* world.c: the kiln.World class itself: creating one (kiln.world, or a host's world pushed
 * with kiln_lua_push_world), closing it, defining components, ticks. The other World methods
 * are added by the file of their concept (entities.c, query.c, systems.c, ...). */
#include <string.h>

#include "kiln_transform.h"
#include "klua.h"
#include "refs.h"

/* ---- lifetime ---------------------------------------------------------------------------- */

/* A host's world destroyed while Lua holds its World (which the docs forbid, but a careless
 * host does): its teardown hook releases the World first, so later methods raise "attempt to
 * use a closed world" and lua_close frees only Lua's own. The core keeps a hook until the
 * world goes, so the hook's ctx is the world's shared block (a resource: freed after the hooks
 * ran, from the world's allocator), never the userdata; its host_kw names the World that
 * holds the world now (NULL: none). */
static const char host_worlds_key = 0; /* registry[&key]: kw (light userdata) -> its World */

/* Releases the World kw at world_idx (its userdata: the argument of close and of __gc). */
static void release(lua_State *L, klua_world *kw, int world_idx) {
    if (kw->closed && !kw->release_owed) return;
    kw->release_owed = false; /* (the teardown hook's: its world is gone, kw->world NULL) */
    /* No collector step until the world is marked closed: a finalizer run in between (a
     * dropped query's, or a script's calling a method) found it freed but not closed. (Inside
     * a finalizer, w_gc's own, the collector takes no step and lua_gc answers -1.) */
    bool collecting = lua_gc(L, LUA_GCISRUNNING) == 1;
    if (collecting) lua_gc(L, LUA_GCSTOP);
    if (kw->on_release) { /* the mod manager closes the mods' states while the world lives */
        void (*fn)(void *) = kw->on_release;
        kw->on_release = NULL;
        fn(kw->on_release_ud);
    }
    if (!kw->host) kiln_schedule_destroy(kw->schedule); /* a view's is the host's */
    kw->schedule = NULL;
    klua_free_systems(kw); /* those left never joined: the others' fini freed them */
    if (kw->owned) {
        kiln_world_destroy(kw->world); /* Lua-valued hooks still see L here */
    } else if (kw->shared && kw->shared->values_ref == kw->values_box_ref) {
        kw->shared->L = NULL; /* the host keeps the world; its Lua values die with us (unless
                               * a World pushed since took the block over) */
    }
    if (kw->shared) klua_values_drop(L, kw, world_idx);
    kiln_jobs_destroy(kw->jobs);
    kw->jobs = NULL;
    void *ud;
    lua_Alloc fa = lua_getallocf(L, &ud);
    while (kw->queries) { /* their queries went with the world; the finalizers see it closed */
        klua_query_link *next = kw->queries->next;
        fa(ud, kw->queries, sizeof *kw->queries, 0);
        kw->queries = next;
    }
    if (kw->lua_valued) {
        fa(ud, kw->lua_valued, (size_t)kw->lua_valued_cap, 0);
        kw->lua_valued = NULL;
        kw->lua_valued_cap = 0; /* klua_is_lua_valued then answers false, reading nothing */
    }
    if (kw->scratch) {
        fa(ud, kw->scratch, kw->scratch_size, 0);
        kw->scratch = NULL;
        kw->scratch_size = 0;
    }
    klua_unref(L, LUA_REGISTRYINDEX, kw->names_ref);
    kw->names_ref = LUA_NOREF;
    memset(kw->name_ptr, 0, sizeof kw->name_ptr); /* the names may go now */
    klua_comp_free(L, kw);                         /* and the field keys with them */
    /* the guard may still sit in a closing slot: it must not point at a dead world */
    klua_getref(L, LUA_REGISTRYINDEX, kw->gc_guard_ref);
    klua_world **guard = klua_toobject(L, -1, KLUA_GC_GUARD); /* the registry is the host's to change */
    if (guard) *guard = NULL;
    lua_pop(L, 1);
    klua_unref(L, LUA_REGISTRYINDEX, kw->gc_guard_ref);
    kw->gc_guard_ref = LUA_NOREF;
    if (kw->gc_held) { /* no step here: the world is being released */
        kw->gc_held = false;
        lua_gc(L, LUA_GCRESTART);
    }
    if (!kw->owned && kw->shared && kw->shared->host_kw == kw) kw->shared->host_kw = NULL; /* the hook goes inert */
    kw->world = NULL;
    kw->closed = true;
    if (collecting) lua_gc(L, LUA_GCRESTART);
}

static int release_from_hook(lua_State *L) {
    klua_world *kw = lua_touserdata(L, 1);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &host_worlds_key);
    lua_rawgetp(L, -1, kw);
    release(L, kw, lua_gettop(L));
    return 0;
}

/* Releases kw on L under protection; false when it could not. Nothing here may raise: the
 * host's kiln_world_destroy is on the C stack, mid-teardown. 5.4's lua_checkstack returns its
 * memory error; LuaJIT's raises it, as making a C closure does, so there lua_cpcall makes the
 * whole call under protection (its two slots are in the stack's reserve). */
static bool release_protected(lua_State *L, klua_world *kw) {
    int top = lua_gettop(L);
#if KLUA_LUAJIT
    bool ok = lua_cpcall(L, release_from_hook, kw) == 0;
#else
    bool ok = lua_checkstack(L, 2);
    if (ok) {
        lua_pushlightuserdata(L, kw);
        ok = klua_pcall_c(L, release_from_hook, 1, 0, 0) == LUA_OK;
    }
#endif
    lua_settop(L, top);
    return ok && kw->closed;
}

static void host_world_fini(kiln_world *world, void *ctx) {
    (void)world;
    klua_shared *sh = ctx;
    klua_world *kw = sh->host_kw;
    lua_State *L = sh->L;
    sh->host_kw = NULL;
    if (!kw || kw->closed) return;
    if (!L || !release_protected(L, kw)) {
        /* no memory to release it now: no method reaches the freed world (nor do the Lua
         * values' hooks, which find no state), and its __gc, at the latest by lua_close,
         * frees what it still holds */
        sh->L = NULL;
        kw->shared = NULL;
        kw->world = NULL;
        kw->closed = kw->release_owed = true;
    }
}

/* Points the world's teardown hook at kw, registering it the first time Lua holds the world.
 * Raises (nothing changed) when it cannot be registered. */
static void link_host_world(lua_State *L, klua_world *kw, kiln_world *world) {
    if (!kiln_world_atfini_get(world, host_world_fini) &&
        kiln_world_atfini(world, host_world_fini, kw->shared) != KILN_OK)
        klua_fail_world(L, world, "kiln_lua_push_world");
    kw->shared->host_kw = kw; /* a World being collected, if any, no longer names it (release) */
}

static klua_world *to_world(lua_State *L, int idx) {
    klua_world *kw = luaL_testudata(L, idx, KLUA_WORLD);
    if (!kw) klua_typeerror(L, idx, "world:close", KLUA_WORLD);
    return kw;
}

static int w_close(lua_State *L) {
    klua_world *kw = to_world(L, 1);
    if (!kw->closed && kw->host) klua_fail(L, "world:close", "a mod cannot close the world");
    if (!kw->closed && !kw->owned)
        klua_fail(L, "world:close", "this world belongs to the host, which closes it");
    if (!kw->closed && kw->guest_depth > 0)
        klua_fail(L, "world:close", "cannot close the world while a mod's code or a mods call runs");
    if (!kw->closed && (kw->current || kw->run_L || kiln_is_deferred(kw->world)))
        klua_fail(L, "world:close", "cannot close the world while a query iterates or a system runs");
    release(L, kw, 1);
    return 0;
}

static int w_gc(lua_State *L) {
    /* a finalizer never raises: debug.setmetatable can hand it any userdata (LuaJIT would
     * raise its error out of the collection step) */
    klua_world *kw = klua_toobject(L, 1, KLUA_WORLD);
    /* the collector never finds a world in use (a system, a frame or a mod's code holds it on
     * a stack); a script calling __gc early from there would destroy the schedule under its
     * own frame: nothing happens then, and the world is released once it is collected */
    if (kw && (kw->current || kw->run_L || kw->guest_depth > 0)) return 0;
    if (kw) release(L, kw, 1);
    return 0;
}

static int w_tostring(lua_State *L) {
    klua_world *kw = to_world(L, 1);
    if (kw->closed) lua_pushstring(L, "kiln.World (closed)");
    else lua_pushfstring(L, "kiln.World (%I entities)", (lua_Integer)kiln_entity_count(kw->world));
    return 1;
}

static void shared_destroy(void *ptr, int32_t count, void *ctx) {
    (void)ptr;
    (void)count;
    (void)ctx; /* the registry table itself is collected with the Lua state */
}

/* A weak registry entry finds the userdata at the top from C callbacks (systems run by a
 * host's kiln_schedule_run) without keeping the world alive. */
static void register_weak(lua_State *L, klua_world *kw) {
    if (luaL_getsubtable(L, LUA_REGISTRYINDEX, KLUA_REG_WORLDS) == 0) {
        lua_createtable(L, 0, 1);
        lua_pushstring(L, "v");
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
    }
    lua_pushlightuserdata(L, kw);
    lua_pushvalue(L, -3);
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

/* A host's World at idx lives until lua_close: the schedule the host reached with
 * kiln_lua_schedule (its C systems in it) is destroyed with the World, so neither the host
 * popping it nor a script dropping its last reference may let the collector take it. May
 * raise out of memory (the first time for kw only). */
static void anchor_host_world(lua_State *L, klua_world *kw, int idx) {
    idx = lua_absindex(L, idx);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &host_worlds_key) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &host_worlds_key);
    }
    lua_pushvalue(L, idx);
    lua_rawsetp(L, -2, kw);
    lua_pop(L, 1);
}

/* A zeroed kiln.World userdata with its state table. */
static klua_world *new_userdata(lua_State *L) {
    klua_world *kw = klua_newobject(L, sizeof *kw, KLUA_WORLD_UV_COUNT, KLUA_WORLD);
    memset(kw, 0, sizeof *kw);
    kw->names_ref = kw->gc_guard_ref = kw->values_box_ref = LUA_NOREF;
    lua_newtable(L);
    lua_newtable(L);
    lua_setfield(L, -2, KLUA_STATE_RESOURCES);
    lua_newtable(L);
    lua_setfield(L, -2, KLUA_STATE_SYSTEMS);
    lua_newtable(L);
    lua_setfield(L, -2, KLUA_STATE_RUNS);
    lua_newtable(L);
    lua_setfield(L, -2, KLUA_STATE_LOOPS);
    lua_setiuservalue(L, -2, KLUA_WORLD_UV_STATE);
    return kw;
}

/* A host's world that Lua already holds: one World per world, since the world's shared block
 * names one state and one values table, which a second World would take over (the first's
 * script-only values then read and released through the second's). Pushes the World this
 * state holds and returns true; raises when another state holds it; false when none does. */
static bool push_held(lua_State *L, kiln_world *world) {
    kiln_component t = kiln_component_lookup(world, "kiln.lua");
    const klua_shared *sh = t ? kiln_resource_get(world, t) : NULL;
    if (!sh || !sh->L) return false;
    if (sh->L != klua_main_thread(L))
        luaL_error(L, "kiln_lua_push_world: the world is held by another Lua state (one state at a time: "
                      "close that one first)");
    if (lua_getfield(L, LUA_REGISTRYINDEX, KLUA_REG_WORLDS) == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            klua_world *kw = luaL_testudata(L, -1, KLUA_WORLD);
            if (kw && !kw->closed && !kw->host && kw->world == world) {
                lua_replace(L, -3); /* the World where the table was, the key popped */
                lua_pop(L, 1);
                if (!kw->owned) { /* a push that raised left it bare */
                    if (kw->shared->host_kw != kw) link_host_world(L, kw, world);
                    anchor_host_world(L, kw, -1);
                }
                return true;
            }
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return false; /* its World is being collected: a new one takes the block over */
}

int klua_new_world(lua_State *L, kiln_world *world, bool owned, int32_t workers) {
    if (!owned && push_held(L, world)) return 1;
    klua_world *kw = new_userdata(L);
    /* an owned world is made once its userdata, whose __gc destroys it, is there: the Lua
     * state refusing the userdata or its tables left it made and owned by no one */
    if (owned && !(world = kiln_world_create(NULL))) klua_no_memory(L);
    kw->world = world;
    kw->owned = owned;
    kw->workers = workers;
    kw->max_failures = 0;

    /* The shared block lives in the world as a resource, so hooks can outlive Lua. */
    kiln_component_desc sd = {.name = "kiln.lua", .size = sizeof(klua_shared),
                              .destroy = shared_destroy};
    kiln_result r = kiln_component_register(world, &sd, &kw->shared_type);
    if (r == KILN_OK && !kiln_resource_has(world, kw->shared_type))
        r = kiln_resource_set(world, kw->shared_type, &(klua_shared){.L = NULL, .values_ref = LUA_NOREF});
    if (r != KILN_OK) {
        if (owned) kiln_world_destroy(world);
        kw->closed = true;
        kw->world = NULL;
        klua_fail_world(L, world, "kiln.world");
    }
    kw->shared = kiln_resource_get(world, kw->shared_type);
    klua_values_new(L, kw, -1);
    kw->shared->L = klua_main_thread(L); /* a coroutine that made the world may die first */
    lua_newtable(L);
    kw->names_ref = klua_ref(L, LUA_REGISTRYINDEX);
    kw->gc_guard_ref = klua_new_gc_guard(L, kw);
    /* The hierarchy: a host world whose own "Parent" keeps the addon out goes on without it
     * (hierarchy.c says so), but one that found no memory for it fails here: no later call
     * sets it up, so every set_parent would fail for good on a world said to be made. */
    if (kiln_transform_init(world, NULL) == KILN_ERR_OUT_OF_MEMORY) {
        const char *msg = lua_pushstring(L, klua_core_detail(kiln_world_error(world)));
        release(L, kw, lua_absindex(L, -2)); /* destroys an owned world; the host keeps its own */
        klua_fail(L, "kiln.world", "%s", msg);
    }
    register_weak(L, kw);
    if (!owned) {
        link_host_world(L, kw, world); /* first: an anchored World is always linked */
        anchor_host_world(L, kw, -1);
    }
    return 1;
}

void klua_new_world_view(lua_State *L, klua_world *host, const klua_mod_hooks *hooks, void *mod,
                         int *entry_depth) {
    klua_world *kw = new_userdata(L);
    kw->world = host->world;
    kw->owned = false;
    kw->host = host;
    kw->mod_hooks = hooks;
    kw->mod = mod;
    kw->entry_depth = entry_depth;
    kw->shared_type = host->shared_type;
    kw->shared = NULL; /* Lua-valued components are the host state's alone */
    kw->schedule = klua_schedule(L, host);
    kw->max_failures = host->max_failures;
    lua_newtable(L);
    kw->names_ref = klua_ref(L, LUA_REGISTRYINDEX);
    kw->gc_guard_ref = klua_new_gc_guard(L, kw);
    register_weak(L, kw);
}

/* kiln.world([opts]): opts are workers (0-64), max_failures (>= 0), instructions (>= 0) and
 * transforms. */
static int w_new(lua_State *L) {
    static const char *const keys[] = {"workers", "max_failures", "instructions", "transforms", NULL};
    const char *fname = "kiln.world";
    int32_t workers = 0;
    int32_t max_failures = 0;
    int64_t instructions = 0;
    bool transforms = false;
    if (!lua_isnoneornil(L, 1)) {
        if (!lua_istable(L, 1)) klua_typeerror(L, 1, fname, "table");
        klua_check_keys(L, 1, 1, fname, keys, false);
        int ok;
        lua_pushstring(L, "workers");
        if (lua_rawget(L, 1) != LUA_TNIL) {
            lua_Integer w = lua_tointegerx(L, -1, &ok);
            if (!ok || w < 0 || w > 64) klua_argerror(L, 1, fname, "workers must be an integer from 0 to 64");
            workers = (int32_t)w;
        }
        lua_pushstring(L, "max_failures");
        if (lua_rawget(L, 1) != LUA_TNIL) {
            lua_Integer m = lua_tointegerx(L, -1, &ok);
            if (!ok || m < 0 || m > INT32_MAX)
                klua_argerror(L, 1, fname, "max_failures must be a non-negative integer");
            max_failures = (int32_t)m;
        }
        lua_pushstring(L, "instructions");
        if (lua_rawget(L, 1) != LUA_TNIL) {
            lua_Integer n = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &ok) : (ok = 0);
            if (!ok || n < 0) klua_argerror(L, 1, fname, "instructions must be a non-negative integer");
            instructions = n;
        }
        lua_pushstring(L, "transforms");
        lua_rawget(L, 1);
        if (!lua_isnil(L, -1) && !lua_isboolean(L, -1)) klua_argerror(L, 1, fname, "transforms must be a boolean");
        transforms = lua_toboolean(L, -1);
        lua_pop(L, 4);
    }
    klua_new_world(L, NULL, true, workers);
    klua_world *kw = lua_touserdata(L, -1);
    kiln_world *world = kw->world;
    kw->max_failures = max_failures;
    kw->instructions = instructions;
    if (transforms) {
        /* the C propagation system, first in the schedule */
        kiln_system_desc d;
        kiln_transform_system_desc(world, &d);
        if (kiln_schedule_add(klua_schedule(L, kw), &d) != KILN_OK) klua_fail_world(L, world, fname);
    }
    return 1;
}

/* ---- components and ticks ----------------------------------------------------------------- */

static int w_component(lua_State *L) {
    klua_world *kw = klua_self(L);
    lua_pushinteger(L, klua_define(L, kw, false, "world:component"));
    return 1;
}

static int w_tick(lua_State *L) {
    klua_world *kw = klua_self(L);
    lua_pushinteger(L, kiln_tick_current(kw->world));
    return 1;
}

static int w_advance_tick(lua_State *L) {
    klua_world *kw = klua_self(L);
    /* A mod's books of the frame (its events' bytes, its frame_instructions, the reshapes
     * mods queued) are kept by the tick: a mod advancing it started them afresh. */
    if (kw->host) klua_fail(L, "world:advance_tick", "the host advances the tick");
    /* C systems on the pool beside a Lua system read the tick to stamp their writes. */
    if (kw->current && !kw->current->exclusive)
        klua_fail(L, "world:advance_tick", "system '%s' is not exclusive; only an exclusive system may advance the tick",
                  kw->current->name);
    kiln_tick tick = kiln_tick_advance(kw->world);
    if (tick == 0) klua_fail_world(L, kw->world, "world:advance_tick"); /* at KILN_TICK_MAX */
    lua_pushinteger(L, (lua_Integer)tick);
    return 1;
}

/* world:trim() -> the bytes given back: archetypes using under a quarter of their room shrink
 * (kiln_world_trim; 0 inside a frame or a query loop). The host's: a pass over every
 * archetype costs a mod one call. */
static int w_trim(lua_State *L) {
    klua_world *kw = klua_self(L);
    if (kw->host) klua_fail(L, "world:trim", "the host trims the world");
    lua_pushinteger(L, (lua_Integer)kiln_world_trim(kw->world));
    return 1;
}

static const luaL_Reg world_methods[] = {
    {"close", w_close},
    {"trim", w_trim},
    {"component", w_component},
    {"tick", w_tick},
    {"advance_tick", w_advance_tick},
    {NULL, NULL},
};

static const luaL_Reg world_meta[] = {
    {"__gc", w_gc},
    {"__close", w_close},
    {"__tostring", w_tostring},
    {NULL, NULL},
};

int klua_open_world(lua_State *L) {
    klua_createmeta(L, KLUA_WORLD, world_methods, world_meta);
    lua_pushcfunction(L, w_new);
    return 1;
}
