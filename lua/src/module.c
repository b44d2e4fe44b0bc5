/* module.c: luaopen_kiln and the embedding entry points: one module table over the classes
 * World, Query and Commands. Holds no state of its own; everything lives in the Lua state. */
#include "klua.h"

static int k_commands(lua_State *L) { return klua_commands_new(L); }

int luaopen_kiln(lua_State *L) {
    luaL_checkversion(L);
    lua_newtable(L);
    klua_open_world(L); /* pushes kiln.world */
    lua_setfield(L, -2, "world");
    klua_open_query(L);
    klua_open_commands(L);
    lua_pushcfunction(L, k_commands);
    lua_setfield(L, -2, "commands");
    lua_pushfstring(L, "%d.%d.%d", KILN_VERSION_MAJOR, KILN_VERSION_MINOR, KILN_VERSION_PATCH);
    lua_setfield(L, -2, "version");
    return 1;
}

int kiln_lua_push_world(lua_State *L, kiln_world *world, int32_t workers) {
    luaL_requiref(L, "kiln", luaopen_kiln, 0);
    lua_pop(L, 1);
    return klua_new_world(L, world, false, workers);
}
