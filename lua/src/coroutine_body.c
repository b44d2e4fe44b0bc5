/* coroutine_body.c: a coroutine's body under a protected call of its own (Lua 5.4), for the
 * budgets that face hostile code (mods, the console); see klua_coroutine_body in klua.h. */
#include "klua.h"

#if !KLUA_LUAJIT
static int body_finish(lua_State *L, int status, lua_KContext ctx) {
    (void)ctx;
    if (status != LUA_OK && status != LUA_YIELD) return lua_error(L);
    return lua_gettop(L);
}

int klua_coroutine_body(lua_State *L) {
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    return body_finish(L, lua_pcallk(L, lua_gettop(L) - 1, LUA_MULTRET, 0, 0, body_finish), 0);
}
#else
typedef int klua_coroutine_body_unused; /* ISO C wants a declaration in every translation unit */
#endif
