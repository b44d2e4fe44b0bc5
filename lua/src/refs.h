/* refs.h: the binding's references to Lua values held in a table (the registry, a World's
 * values table). Invariant: a held value's key is never an array-part candidate. */
#ifndef KLUA_REFS_H
#define KLUA_REFS_H

#include "klua.h"

/* In place of luaL_ref/luaL_unref, whose integer keys LuaJIT loses: a table growth refused
 * after its array part grew (lj_tab_resize) leaves the integer keys it was moving out of the
 * hash part unseen, so a ref read nil and was handed out again. Here a value lives under the
 * negative of its ref, which stays in the hash part under both interpreters; the table's
 * count and free list are under light-userdata keys.
 * klua_ref pops the value on top and returns its ref (> 0), or LUA_REFNIL for nil. Out of
 * memory it raises, with t as it was and the value popped.
 * klua_unref frees ref (a ref <= 0, or a slot holding nothing, is left alone); it allocates
 * nothing and never raises, so it is fit for __gc, close and hook paths.
 * klua_getref pushes ref's value (nil for a ref <= 0) and returns its type; a freed ref
 * reads its free-list link, so a holder sets its ref to LUA_NOREF as it unrefs. */
KLUA_HIDDEN int klua_ref(lua_State *L, int t);
KLUA_HIDDEN void klua_unref(lua_State *L, int t, int ref);
KLUA_HIDDEN int klua_getref(lua_State *L, int t, int ref);
/* Makes t's refs start after `after` (t holds none yet): the refs up to it read nil and free
 * nothing. May raise out of memory, t then as it was. */
KLUA_HIDDEN void klua_ref_start(lua_State *L, int t, int after);

#endif
