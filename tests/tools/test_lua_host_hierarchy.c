/* test_lua_host_hierarchy.c: a host world whose own "Parent" keeps the transform addon out,
 * pushed to Lua: the hierarchy methods raise a clear error, in and out of systems. */
#include <check.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "kiln_lua.h"
#include "kiln_transform.h"

/* Runs chunk with the pushed world as global w; returns what it returned as a string. */
static void run(lua_State *L, const char *chunk, char *dest, size_t size) {
    ck_assert_msg(luaL_loadstring(L, chunk) == LUA_OK, "%s", lua_tostring(L, -1));
    ck_assert_msg(lua_pcall(L, 0, 1, 0) == LUA_OK, "%s", lua_tostring(L, -1));
    const char *s = lua_tostring(L, -1);
    snprintf(dest, size, "%s", s ? s : "(nil)");
    lua_pop(L, 1);
}

START_TEST(hierarchy_methods_of_a_world_without_the_transform_addon_raise_clearly) {
    kiln_world *world = kiln_world_create(NULL);
    ck_assert_ptr_nonnull(world);
    /* the host's own Parent, of another layout: the addon cannot register its own */
    kiln_component own;
    ck_assert_int_eq(kiln_component_register(world, &(kiln_component_desc){.name = "Parent", .size = 4}, &own),
                     KILN_OK);
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    ck_assert_int_eq(kiln_lua_push_world(L, world, 0), 1);
    lua_setglobal(L, "w");
    kiln_transform_ids ids;
    ck_assert(!kiln_transform_ids_get(world, &ids));
    char out[512];
    run(L, "local a, b = w:spawn(), w:spawn()\n"
           "local ok, err = pcall(w.set_parent, w, a, b)\n"
           "return tostring(ok) .. ' ' .. tostring(err)", out, sizeof out);
    ck_assert_msg(strstr(out, "false world:set_parent: ") == out && strstr(out, "transform") != NULL, "%s", out);
    /* inside a system, where the access check names the component */
    run(L, "local msgs = {}\n"
           "w:system{name = 'link', writes = {'Parent'}, run = function(world)\n"
           "  local a, b = world:spawn(), world:spawn()\n"
           "  for _, f in ipairs{function() world:set_parent(a, b) end, function() world:children(a) end} do\n"
           "    local ok, err = pcall(f)\n"
           "    msgs[#msgs + 1] = tostring(ok) .. ' ' .. tostring(err)\n"
           "  end\n"
           "end}\n"
           "w:progress(0)\n"
           "return table.concat(msgs, '|')", out, sizeof out);
    ck_assert_msg(strstr(out, "false world:set_parent: ") == out && strstr(out, "|false world:children: ") != NULL,
                  "%s", out);
    lua_close(L);
    kiln_world_destroy(world);
}
END_TEST

static Suite *host_suite(void) {
    Suite *s = suite_create("lua_host_hierarchy");
    TCase *tc = tcase_create("host");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, hierarchy_methods_of_a_world_without_the_transform_addon_raise_clearly);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(host_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
