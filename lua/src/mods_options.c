/* mods_options.c: kiln.mods' options table and a C host's kiln_lua_mods_desc, read and checked.
 * Invariant: everything is checked before the manager is made, so a bad option makes none. */
#include "mods.h"

/* The least a mod's Lua memory and its instruction budgets may be (kiln.mods and a C desc) */
#define MIN_MEMORY 262144
#define MIN_INSTRUCTIONS 1000
#define MIN_TEXT_(n) #n
#define MIN_TEXT(n) MIN_TEXT_(n)

static int64_t int_option(lua_State *L, int t, const char *key, int64_t min, int64_t max, const char *fname) {
    int64_t v = 0;
    if (lua_getfield(L, t, key) != LUA_TNIL) {
        int ok = 0;
        lua_Integer n = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &ok) : 0;
        if (!ok || n < min) klua_argerror(L, t, fname, "%s must be an integer of at least %I", key, (lua_Integer)min);
        if (n > max) klua_argerror(L, t, fname, "%s must be at most %I", key, (lua_Integer)max);
        v = n;
    }
    lua_pop(L, 1);
    return v;
}

/* Whether the function at idx is one of the host's debug library (package.loaded.debug). */
static bool is_debug_function(lua_State *L, int idx) {
    bool hit = false;
    if (lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE) == LUA_TTABLE &&
        lua_getfield(L, -1, "debug") == LUA_TTABLE) {
        lua_pushnil(L);
        while (!hit && lua_next(L, -2)) {
            hit = lua_rawequal(L, -1, idx);
            lua_pop(L, 1);
        }
    }
    return hit; /* the caller resets the stack */
}

/* Raises unless the value at idx can be granted to mods: nil, booleans, numbers, strings,
 * functions (proxied) but none of the debug library, and tables of those without
 * metatables, nested at most 32 deep. */
static void check_grant(lua_State *L, int idx, int depth, const char *fname) {
    idx = lua_absindex(L, idx);
    int t = lua_type(L, idx);
    if (t == LUA_TFUNCTION) {
        int top = lua_gettop(L);
        bool debug = is_debug_function(L, idx);
        lua_settop(L, top);
        if (debug) klua_argerror(L, 2, fname, "allow holds a function of the debug library, which mods never get");
    } else if (t == LUA_TTABLE) {
        if (depth >= 32) klua_argerror(L, 2, fname, "allow nests tables deeper than 32 (a cycle?)");
        if (lua_getmetatable(L, idx)) klua_argerror(L, 2, fname, "allow holds a table with a metatable");
        luaL_checkstack(L, 4, "allow nests too deep");
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            check_grant(L, -2, depth + 1, fname);
            check_grant(L, -1, depth + 1, fname);
            lua_pop(L, 1);
        }
    } else if (t == LUA_TUSERDATA || t == LUA_TLIGHTUSERDATA || t == LUA_TTHREAD) {
        klua_argerror(L, 2, fname, "allow holds a %s, which cannot be granted to mods", luaL_typename(L, idx));
    }
}

void klua_mods_read_options(lua_State *L, kiln_lua_mods_desc *desc, const char **readonly, const char *fname) {
    static const char *const keys[] = {"memory", "instructions", "frame_instructions", "milliseconds",
                                       "frame_milliseconds", "entities", "world_memory", "queries",
                                       "archetypes", "components", "systems", "allow", "seed", "log", "readonly",
                                       NULL};
    if (!lua_istable(L, 2)) klua_typeerror(L, 2, fname, "table");
    klua_check_keys(L, 2, 2, fname, keys, false);
    desc->memory = (size_t)int_option(L, 2, "memory", MIN_MEMORY, INT64_MAX, fname);
    desc->instructions = int_option(L, 2, "instructions", MIN_INSTRUCTIONS, INT64_MAX, fname);
    desc->frame_instructions = int_option(L, 2, "frame_instructions", MIN_INSTRUCTIONS, INT64_MAX, fname);
    desc->milliseconds = (int32_t)int_option(L, 2, "milliseconds", -1, INT32_MAX, fname);
    desc->frame_milliseconds = (int32_t)int_option(L, 2, "frame_milliseconds", -1, INT32_MAX, fname);
    desc->entities = int_option(L, 2, "entities", 1, INT64_MAX, fname);
    desc->world_memory = int_option(L, 2, "world_memory", 1, INT64_MAX, fname);
    desc->queries = (int32_t)int_option(L, 2, "queries", 1, INT32_MAX, fname);
    desc->archetypes = (int32_t)int_option(L, 2, "archetypes", 1, INT32_MAX, fname);
    desc->components = (int32_t)int_option(L, 2, "components", 1, INT32_MAX, fname);
    desc->systems = (int32_t)int_option(L, 2, "systems", 1, KILN_SCHEDULE_MAX_SYSTEMS, fname);
    desc->readonly = klua_mods_readonly_option(L, 2, readonly, fname);
    if (lua_getfield(L, 2, "seed") != LUA_TNIL) {
        if (!lua_isinteger(L, -1)) klua_argerror(L, 2, fname, "seed must be an integer");
        desc->seed = (uint64_t)lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 2, "allow") != LUA_TNIL && !lua_istable(L, -1))
        klua_argerror(L, 2, fname, "allow must be a table of globals to grant");
    if (lua_istable(L, -1)) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            if (lua_type(L, -2) != LUA_TSTRING) klua_argerror(L, 2, fname, "allow's keys must be global names");
            lua_pop(L, 1);
        }
        check_grant(L, -1, 0, fname);
    }
    if (lua_getfield(L, 2, "log") != LUA_TNIL && !lua_isfunction(L, -1))
        klua_argerror(L, 2, fname, "log must be a function(mod, line)");
}

void klua_mods_check_desc(lua_State *L, const kiln_lua_mods_desc *d) {
    static const char *const fmt = "kiln_lua_mods_push: desc.%s must be 0 (the default) or %s";
    if (d->memory && d->memory < MIN_MEMORY) luaL_error(L, fmt, "memory", "at least " MIN_TEXT(MIN_MEMORY));
    if (d->instructions && d->instructions < MIN_INSTRUCTIONS)
        luaL_error(L, fmt, "instructions", "at least " MIN_TEXT(MIN_INSTRUCTIONS));
    if (d->frame_instructions && d->frame_instructions < MIN_INSTRUCTIONS)
        luaL_error(L, fmt, "frame_instructions", "at least " MIN_TEXT(MIN_INSTRUCTIONS));
    static const char *const clock = "kiln_lua_mods_push: desc.%s must be -1 (none), 0 (the default) or positive";
    if (d->milliseconds < -1) luaL_error(L, clock, "milliseconds");
    if (d->frame_milliseconds < -1) luaL_error(L, clock, "frame_milliseconds");
    if (d->entities < 0) luaL_error(L, fmt, "entities", "positive");
    if (d->world_memory < 0) luaL_error(L, fmt, "world_memory", "positive");
    if (d->queries < 0) luaL_error(L, fmt, "queries", "positive");
    if (d->archetypes < 0) luaL_error(L, fmt, "archetypes", "positive");
    if (d->components < 0) luaL_error(L, fmt, "components", "positive");
    if (d->systems < 0 || d->systems > KILN_SCHEDULE_MAX_SYSTEMS)
        luaL_error(L, fmt, "systems", "from 1 to " MIN_TEXT(KILN_SCHEDULE_MAX_SYSTEMS));
}

