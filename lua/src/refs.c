/* refs.c: references to Lua values under negative integer keys, made and freed without
 * losing one to a refused growth. Invariant: only klua_ref allocates, and before it counts. */
#include <limits.h>

#include "refs.h"

static const char count_key = 0; /* t[&count_key]: the highest ref made in t */
static const char free_key = 0;  /* t[&free_key]: the first free ref, 0 for none */

/* t[key] as an integer in [0, INT_MAX], 0 when absent or not such a number */
static lua_Integer counter(lua_State *L, int t, const void *key) {
    int ok = 0;
    lua_rawgetp(L, t, key);
    lua_Integer n = lua_tointegerx(L, -1, &ok);
    lua_pop(L, 1);
    return ok && n > 0 && n <= INT_MAX ? n : 0;
}

/* Makes both counters' keys when absent (this may raise: nothing else has changed yet), so
 * storing into them later allocates nothing. */
static void make_counters(lua_State *L, int t) {
    if (lua_rawgetp(L, t, &count_key) == LUA_TNIL) {
        lua_pushinteger(L, 0);
        lua_rawsetp(L, t, &count_key);
    }
    if (lua_rawgetp(L, t, &free_key) == LUA_TNIL) {
        lua_pushinteger(L, 0);
        lua_rawsetp(L, t, &free_key);
    }
    lua_pop(L, 2);
}

int klua_ref(lua_State *L, int t) {
    t = lua_absindex(L, t);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return LUA_REFNIL;
    }
    make_counters(L, t);
    lua_Integer head = counter(L, t, &free_key);
    if (head > 0 && lua_rawgeti(L, t, -head) == LUA_TNUMBER) { /* a free slot: its key is there */
        lua_Integer next = lua_tointeger(L, -1);
        lua_pop(L, 1);
        lua_rawseti(L, t, -head);
        lua_pushinteger(L, next > 0 && next <= INT_MAX ? next : 0);
        lua_rawsetp(L, t, &free_key);
        return (int)head;
    }
    if (head > 0) lua_pop(L, 1);
    lua_Integer n = counter(L, t, &count_key);
    if (n >= INT_MAX) luaL_error(L, "too many references in one table");
    lua_rawseti(L, t, -(n + 1)); /* a new key: out of memory raises here, t unchanged */
    lua_pushinteger(L, n + 1);
    lua_rawsetp(L, t, &count_key);
    return (int)(n + 1);
}

void klua_ref_start(lua_State *L, int t, int after) {
    t = lua_absindex(L, t);
    make_counters(L, t);
    lua_pushinteger(L, after > 0 ? after : 0);
    lua_rawsetp(L, t, &count_key); /* the key exists: no allocation */
}

void klua_unref(lua_State *L, int t, int ref) {
    if (ref <= 0) return;
    t = lua_absindex(L, t);
    int held = lua_rawgeti(L, t, -(lua_Integer)ref) != LUA_TNIL;
    lua_pop(L, 1);
    if (!held) return; /* never made here: its key is absent, and storing would allocate */
    lua_pushinteger(L, counter(L, t, &free_key));
    lua_rawseti(L, t, -(lua_Integer)ref);
    lua_pushinteger(L, ref);
    lua_rawsetp(L, t, &free_key); /* made by the klua_ref that made ref */
}

int klua_getref(lua_State *L, int t, int ref) {
    if (ref <= 0) {
        lua_pushnil(L);
        return LUA_TNIL;
    }
    return lua_rawgeti(L, t, -(lua_Integer)ref);
}
