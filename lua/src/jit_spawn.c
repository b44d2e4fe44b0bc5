/* jit_spawn.c: the C half of world:spawn's FFI path under LuaJIT (lua/kiln/ffi_spawn.lua):
 * components described for the Lua side, and a spawn it calls through FFI that never raises. */
#include <stddef.h>
#include <string.h>

#include "klua.h"

#if KLUA_LUAJIT

#define JIT_SPAWN_MAX 64 /* components in one spawn, as world:spawn's C path (entities.c) */

/* What ffi_spawn.lua calls through FFI (it declares the same struct). A function called
 * through FFI must not use the Lua API on the calling state: spawn only reads the state's hook
 * mask (one field; it touches no stack, allocates nothing and cannot raise). */
typedef struct jit_spawn_api {
    /* Spawns an entity with n components whose values lie at values[i] and returns its handle
     * as a number. Or 0, with nothing changed: world:spawn's C path must run instead (it
     * raises the error, or does what the FFI path does not: see can_spawn). It refuses when
     * *owner is not ticket (a spawn nested in the caller's, from a finalizer, filled the
     * scratch since: ffi_spawn.lua) and while state L has a debug hook set: a hook could raise
     * between this return and world:spawn's, and the entity made would have no handle. */
    double (*spawn)(void *kw, lua_State *L, const kiln_component *comps, const void *const *values, int32_t n,
                    const double *owner, double ticket);
} jit_spawn_api;

/* Whether the FFI path may spawn these components on kw now: not on a closed world or a
 * mod's view (its entities carry the mod's tag), not under an instruction budget (budgets
 * charge the C path's cost), not while a loop left by break may keep the world deferred
 * outside systems (the C path's wrapper ends it first), and inside a system only components
 * it declares in writes. ffi_spawn.lua never passes a component holding Lua values (they
 * have no reflected fields) or one with a check hook. */
static bool can_spawn(const klua_world *kw, const kiln_component *comps, int32_t n) {
    if (kw->closed || kw->mod_hooks || kw->host || kw->budget_limit != 0 || kw->instructions != 0) return false;
    if (!kw->current) return !kiln_is_deferred(kw->world);
    for (int32_t i = 0; i < n; i++)
        if (!klua_system_writes(kw, comps[i])) return false;
    return true;
}

static double jit_spawn(void *kw_ptr, lua_State *L, const kiln_component *comps, const void *const *values,
                        int32_t n, const double *owner, double ticket) {
    klua_world *kw = kw_ptr;
    if (*owner != ticket || lua_gethookmask(L) != 0) return 0;
    if (n < 0 || n > JIT_SPAWN_MAX || !can_spawn(kw, comps, n)) return 0;
    /* a refusal (memory, a limit) changes nothing: the C path then raises its message */
    kiln_entity e;
    if (kiln_spawn_with(kw->world, comps, values, n, &e) != KILN_OK) return 0;
    return (double)e; /* as the C path pushes it: an integer, a double under LuaJIT */
}

static const jit_spawn_api api = {jit_spawn};

/* spawn.world(w): the klua_world behind the World w as a light userdata (ffi_spawn.lua casts
 * it to a pointer and hands it to api.spawn), or nil for anything else, a closed World or a
 * mod's view. */
static int spawn_world(lua_State *L) {
    klua_world *kw = luaL_testudata(L, 1, KLUA_WORLD);
    if (kw && !kw->closed && !kw->host && !kw->mod_hooks) lua_pushlightuserdata(L, kw);
    else lua_pushnil(L);
    return 1;
}

/* spawn.describe(w, name): the component named name as the FFI path writes it: {id, size,
 * lua (holds Lua values), check (has a check hook), defaults (size bytes, or nil: zeroes),
 * fields = {{name, type, count, offset}...}}; nil when w is no open World or the name
 * names no component a script may spawn (world:spawn raises for it). */
static int spawn_describe(lua_State *L) {
    klua_world *kw = luaL_testudata(L, 1, KLUA_WORLD);
    size_t len;
    const char *name = lua_tolstring(L, 2, &len);
    if (!kw || kw->closed || kw->host || lua_type(L, 2) != LUA_TSTRING || !klua_name_ok(name, len)) return 0;
    kiln_component c = kiln_component_lookup(kw->world, name);
    kiln_component_info info;
    if (!c || c == kw->shared_type || !kiln_component_info_get(kw->world, c, &info) || klua_is_mod_tag(&info)) return 0;
    lua_createtable(L, 0, 6);
    if (kw->closed) return 0; /* by a finalizer making the table ran: the C path raises */
    lua_pushinteger(L, c);
    lua_setfield(L, -2, "id");
    lua_pushinteger(L, (lua_Integer)info.size);
    lua_setfield(L, -2, "size");
    lua_pushboolean(L, klua_is_lua_valued(kw, c));
    lua_setfield(L, -2, "lua");
    lua_pushboolean(L, info.has_check);
    lua_setfield(L, -2, "check");
    if (info.defaults && info.size) {
        lua_pushlstring(L, info.defaults, info.size);
        lua_setfield(L, -2, "defaults");
    }
    lua_createtable(L, info.field_count, 0);
    for (int32_t f = 0; f < info.field_count; f++) {
        if (kw->closed) return 0;
        klua_jit_push_field(L, &info.fields[f]);
        lua_rawseti(L, -2, f + 1);
    }
    lua_setfield(L, -2, "fields");
    return 1;
}

void klua_jit_open_spawn(lua_State *L, int layer_idx) {
    layer_idx = lua_absindex(L, layer_idx);
    /* only beside the FFI views: a state without the ffi library keeps the C path */
    lua_getfield(L, layer_idx, "views");
    bool ffi = lua_istable(L, -1);
    lua_pop(L, 1);
    if (!ffi) return;
    lua_createtable(L, 0, 4);
    lua_pushcfunction(L, spawn_world);
    lua_setfield(L, -2, "world");
    lua_pushcfunction(L, spawn_describe);
    lua_setfield(L, -2, "describe");
    lua_pushlightuserdata(L, (void *)&api);
    lua_setfield(L, -2, "api");
    lua_pushlightuserdata(L, klua_main_thread(L)); /* its hook mask is the whole state's */
    lua_setfield(L, -2, "state");
    lua_pushinteger(L, JIT_SPAWN_MAX);
    lua_setfield(L, -2, "max");
    /* where ffi_spawn.lua reads a world's budgets (int64_t), to leave budgeted worlds to the C
     * path before it runs any Lua a budget would charge */
    lua_pushinteger(L, (lua_Integer)offsetof(klua_world, instructions));
    lua_setfield(L, -2, "instructions_at");
    lua_pushinteger(L, (lua_Integer)offsetof(klua_world, budget_limit));
    lua_setfield(L, -2, "budget_limit_at");
    lua_setfield(L, layer_idx, "spawn");
    /* ffi_spawn.lua puts its world:spawn in the method table and tail-calls this one, the C
     * path: its bad-self message still says world:spawn */
    luaL_getmetatable(L, KLUA_WORLD);
    lua_getfield(L, -1, "__index");
    lua_getfield(L, -1, "spawn");
    if (lua_iscfunction(L, -1)) klua_name_replaced(L, -1, "spawn");
    lua_pop(L, 3);
}

#else
typedef int klua_jit_spawn_unused; /* ISO C wants a declaration in every translation unit */
#endif
