/* mods_embed.c: the mod manager's methods for a C host (kiln_lua_mods_load...), each a call
 * of the kiln.Mods method run protected, its failure copied into the caller's buffer.
 * Invariant: the Lua stack is as it was when a call returns. */
#include <stdio.h>
#include <string.h>

#include "mods.h"

/* Copies the messages of the table at the top (by name) into err, one a line; false when
 * there was any. */
static bool list_failures(lua_State *L, char *err, size_t size) {
    bool none = true;
    size_t used = 0;
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        none = false;
        if (err && size > used)
            used += (size_t)snprintf(err + used, size - used, "%s%s", used ? "\n" : "", lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    return none;
}

/* Calls mods:method(arg [, extra]) protected; true when it returned a true first value,
 * else false with the message (or, for load_dir, the failures) in err. A reload that
 * succeeded lists there the dependents whose own reload failed (their old versions run on). */
static bool call_method(lua_State *L, int mods_idx, const char *method, const char *arg, int extra,
                        char *err, size_t size) {
    mods_idx = lua_absindex(L, mods_idx);
    int top = lua_gettop(L);
    if (err && size) err[0] = '\0';
    if (!lua_checkstack(L, 6) || !luaL_testudata(L, mods_idx, KLUA_MODS)) {
        if (err && size) snprintf(err, size, "kiln.Mods expected");
        return false;
    }
    luaL_getmetatable(L, KLUA_MODS);
    lua_getfield(L, -1, "__index");
    lua_getfield(L, -1, method);
    lua_pushvalue(L, mods_idx);
    lua_pushstring(L, arg);
    int nargs = 2;
    if (extra) {
        lua_createtable(L, 0, 1);
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "keep");
        nargs++;
    }
    bool ok = false;
    if (lua_pcall(L, nargs, 2, 0) != LUA_OK) {
        if (err && size) snprintf(err, size, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
    } else if (strcmp(method, "load_dir") == 0 && !lua_isnil(L, -2)) { /* nil: a folder it cannot read */
        ok = list_failures(L, err, size);
    } else if (lua_toboolean(L, -2)) {
        ok = true;
        if (strcmp(method, "reload") == 0 && lua_istable(L, -1)) list_failures(L, err, size);
    } else if (err && size) {
        snprintf(err, size, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "failed");
    }
    lua_settop(L, top);
    return ok;
}

bool kiln_lua_mods_load(lua_State *L, int mods_idx, const char *path, char *err, size_t size) {
    return call_method(L, mods_idx, "load", path, 0, err, size);
}

bool kiln_lua_mods_load_dir(lua_State *L, int mods_idx, const char *dir, char *err, size_t size) {
    return call_method(L, mods_idx, "load_dir", dir, 0, err, size);
}

bool kiln_lua_mods_unload(lua_State *L, int mods_idx, const char *name, bool keep, char *err, size_t size) {
    return call_method(L, mods_idx, "unload", name, keep, err, size);
}

bool kiln_lua_mods_reload(lua_State *L, int mods_idx, const char *name, char *err, size_t size) {
    return call_method(L, mods_idx, "reload", name, 0, err, size);
}

bool kiln_lua_mods_readonly(lua_State *L, int mods_idx, const char *name, char *err, size_t size) {
    return call_method(L, mods_idx, "readonly", name, 0, err, size);
}

int kiln_lua_mods_poll(lua_State *L, int mods_idx, char *err, size_t size) {
    mods_idx = lua_absindex(L, mods_idx);
    int top = lua_gettop(L);
    if (err && size) err[0] = '\0';
    if (!lua_checkstack(L, 6) || !luaL_testudata(L, mods_idx, KLUA_MODS)) {
        if (err && size) snprintf(err, size, "kiln.Mods expected");
        return -1;
    }
    luaL_getmetatable(L, KLUA_MODS);
    lua_getfield(L, -1, "__index");
    lua_getfield(L, -1, "poll");
    lua_pushvalue(L, mods_idx);
    int result = -1;
    if (lua_pcall(L, 1, 2, 0) != LUA_OK) {
        if (err && size) snprintf(err, size, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
    } else {
        result = (int)lua_rawlen(L, -2);
        lua_pushnil(L);
        if (lua_next(L, -2)) {
            if (err && size) snprintf(err, size, "%s", lua_tostring(L, -1));
            result = -1;
        }
    }
    lua_settop(L, top);
    return result;
}
