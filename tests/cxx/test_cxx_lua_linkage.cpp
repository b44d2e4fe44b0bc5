// test_cxx_lua_linkage.cpp: a C++ host of LuaJIT, whose lua.h declares no C linkage, including
// kiln_lua.h before lua.hpp: it links only if kiln_lua.h gives lua.h C linkage itself.
#include "kiln_lua.h"

#include <check.h>
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
    Suite *s = suite_create("cxx_lua_linkage");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, lua_h_declared_by_kiln_lua_h_links_against_a_c_lua);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
