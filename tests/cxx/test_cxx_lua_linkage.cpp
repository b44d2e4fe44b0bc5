// test_cxx_lua_linkage.cpp: a C++ host of LuaJIT, whose lua.h declares no C linkage, including
// kiln_lua.h before lua.hpp: it links only if kiln_lua.h gives lua.h C linkage itself.
#include "kiln_lua.h"

#include <check.h>

#include "cxx_suite.h"
#include <lua.hpp>

START_TEST(lua_h_declared_by_kiln_lua_h_links_against_a_c_lua) {
    lua_State *L = luaL_newstate();
    ck_assert_ptr_nonnull(L);
    lua_pushinteger(L, 42);
    ck_assert_int_eq(lua_tointeger(L, -1), 42);
    lua_settop(L, 0);
    lua_close(L);
}
END_TEST

int main() {
    const TTest *const tests[] = {
        lua_h_declared_by_kiln_lua_h_links_against_a_c_lua,
    };
    return cxx_run_suite("cxx_lua_linkage", tests, sizeof tests / sizeof *tests);
}
