/* test_lua_host_tags.c: a C host's components named like a mod's tag. world:add, world:remove and
 * a command buffer's add and remove use one rule: an owner mark named "kiln.mod.*" is a mod's tag. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "lua_host.h"

#define REFUSED "is a mod's tag, which only its mod manager puts on the mod's entities"

/* Runs chunk in L; what it returned, as a string, goes to dest. */
static void run_chunk(lua_State *L, const char *chunk, char *dest, size_t size) {
    ck_assert_msg(luaL_dostring(L, chunk) == LUA_OK, "%s", lua_tostring(L, -1));
    const char *s = lua_tostring(L, -1);
    snprintf(dest, size, "%s", s ? s : "(nil)");
    lua_settop(L, 0);
}

/* Adds and removes tag on a new entity through the world, then through a command buffer:
 * "ok" for each path that took it, else the error. */
static const char *const BOTH_PATHS =
    "local tag = ...\n"
    "local e = w:spawn()\n"
    "local out = {}\n"
    "local ok, err = pcall(w.add, w, e, tag)\n"
    "out[1] = ok and (w:has(e, tag) and 'ok' or 'not added') or err\n"
    "ok, err = pcall(w.remove, w, e, tag)\n"
    "out[2] = ok and (w:has(e, tag) and 'not removed' or 'ok') or err\n"
    "local c = kiln.commands()\n"
    "c:add(e, tag)\n"
    "local n\n"
    "ok, err, n = c:apply(w)\n"
    "out[3] = ok and (w:has(e, tag) and 'ok' or 'not added') or err\n"
    "c:clear()\n"
    "c:remove(e, tag)\n"
    "ok, err = c:apply(w)\n"
    "out[4] = ok and 'ok' or err\n"
    "return table.concat(out, '|')\n";

static void both_paths(lua_State *L, const char *tag, char *dest, size_t size) {
    ck_assert_int_eq(luaL_loadstring(L, BOTH_PATHS), LUA_OK);
    lua_pushstring(L, tag);
    ck_assert_msg(lua_pcall(L, 1, 1, 0) == LUA_OK, "%s", lua_tostring(L, -1));
    snprintf(dest, size, "%s", lua_tostring(L, -1));
    lua_settop(L, 0);
}

/* A command buffer refused a mod's tag by its name as it was recorded, while world:add asked
 * the component's owner flag: a C host's plain "kiln.mod.plain" was taken by one and refused by
 * the other. */
START_TEST(a_name_like_a_mods_tag_is_judged_by_the_same_rule_on_every_path) {
    host h;
    open_host(&h);
    kiln_world *world = h.world;
    kiln_component plain, mark, team;
    ck_assert_int_eq(kiln_component_register(world, &(kiln_component_desc){.name = "kiln.mod.plain"}, &plain),
                     KILN_OK);
    ck_assert_int_eq(kiln_component_register(world, &(kiln_component_desc){.name = "kiln.mod.m", .owner = true}, &mark),
                     KILN_OK);
    ck_assert_int_eq(kiln_component_register(world, &(kiln_component_desc){.name = "Team", .owner = true}, &team),
                     KILN_OK);
    lua_State *L = h.L;
    ck_assert_int_eq(kiln_lua_push_world(L, world, 0), 1);
    lua_setglobal(L, "w");
    char out[1024];
    run_chunk(L, "w:component('kiln.modx') w:component('kiln.mod') return 'declared'", out, sizeof out);
    ck_assert_str_eq(out, "declared");
    /* only look like one: taken by every path */
    const char *similar[] = {"kiln.mod.plain", "Team", "kiln.modx", "kiln.mod"};
    for (size_t i = 0; i < sizeof similar / sizeof similar[0]; i++) {
        both_paths(L, similar[i], out, sizeof out);
        ck_assert_msg(strcmp(out, "ok|ok|ok|ok") == 0, "%s: %s", similar[i], out);
    }
    /* an owner mark named kiln.mod.*: refused by every path, with one message */
    both_paths(L, "kiln.mod.m", out, sizeof out);
    ck_assert_str_eq(out, "bad argument #2 to 'world:add' ('kiln.mod.m' " REFUSED ")|"
                          "bad argument #2 to 'world:remove' ('kiln.mod.m' " REFUSED ")|"
                          "commands:apply: command 1 (add kiln.mod.m) on entity 4v1: bad argument #2 to "
                          "'world:add' ('kiln.mod.m' " REFUSED ")|"
                          "commands:apply: command 1 (remove kiln.mod.m) on entity 4v1: bad argument #2 to "
                          "'world:remove' ('kiln.mod.m' " REFUSED ")");
    stop(&h);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_host_tags");
    TCase *tc = tcase_create("tags");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, a_name_like_a_mods_tag_is_judged_by_the_same_rule_on_every_path);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
