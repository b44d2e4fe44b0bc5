/* kiln_lua.h: the Lua 5.4 embedding API of kiln: open the module, hand a host-owned world
 * to Lua, and reach the schedule Lua systems run in so C systems can join it. */
#ifndef KILN_LUA_H
#define KILN_LUA_H

#include <lua.h>

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Functions in this header:
 *   luaopen_kiln, kiln_lua_push_world, kiln_lua_check_world, kiln_lua_schedule.
 */

/* The module loader: `local kiln = require "kiln"`. Pushes the module table. */
int luaopen_kiln(lua_State *L);

/* Pushes a kiln.World for a world the host owns: closing the Lua state (or world:close())
 * detaches Lua from it without destroying it; the host destroys it with kiln_world_destroy
 * after closing Lua (or after world:close()). Components the host registered are visible
 * to Lua by name, with their reflected fields. workers sizes the job pool the world's
 * schedule runs C systems on (0: inline). Returns 1 (the world on the stack), or raises a
 * Lua error when out of memory. Loads the kiln module if it was not loaded. */
int kiln_lua_push_world(lua_State *L, kiln_world *world, int32_t workers);

/* The kiln_world of the kiln.World at index idx; raises a Lua error for another value or a
 * closed world. */
kiln_world *kiln_lua_check_world(lua_State *L, int idx);

/* The schedule Lua systems of the kiln.World at idx run in (created on first use). C
 * systems added here with kiln_schedule_add run in the same frames as Lua systems, on the
 * world's job pool, by world:progress(dt). NULL when out of memory (raises instead). */
kiln_schedule *kiln_lua_schedule(lua_State *L, int idx);

#ifdef __cplusplus
}
#endif
#endif /* KILN_LUA_H */
