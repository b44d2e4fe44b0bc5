/* test_lua_release_refusals.c: a host's world pushed into Lua, linked with the library built as a release
 * build (NDEBUG): destroying it while Lua keeps its schedule (Lua systems, a mod manager) is refused, all whole. */
#include <check.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln_lua.h"
#include "suite_main.h"

static const char *const refused = "kiln_world_destroy: the world still has schedules (kiln_schedule_destroy them "
                                   "first); nothing was destroyed";

/* Runs chunk; what it returned, as a string, goes to dest. */
static void run(lua_State *L, const char *chunk, char *dest, size_t size) {
    ck_assert_msg(luaL_dostring(L, chunk) == LUA_OK, "%s", lua_tostring(L, -1));
    const char *s = lua_tostring(L, -1);
    snprintf(dest, size, "%s", s ? s : "(nil)");
    lua_settop(L, 0);
}

/* A state holding world as the global w. */
static lua_State *push_into_new_state(kiln_world *world) {
    lua_State *L = luaL_newstate();
    ck_assert_ptr_nonnull(L);
    luaL_openlibs(L);
    kiln_lua_push_world(L, world, 0);
    lua_setglobal(L, "w");
    return L;
}

/* Without the refusal, the destroy freed the world under the World's schedule: the teardown hook
 * closed the World (the next frame raised) and lua_close destroyed the schedule of a freed world. */
START_TEST(destroying_a_host_world_whose_lua_systems_live_is_refused_and_lua_runs_on) {
    kiln_world *world = kiln_world_create(NULL);
    lua_State *L = push_into_new_state(world);
    char out[256];
    run(L, "w:component('Pos', 'int32_t x;') w:component('Brain', 'lua') e = w:spawn{Pos = {x = 1}, Brain = {n = 1}}\n"
           "w:system{name = 'move', writes = {'Pos'}, query = {'Pos'}, each = function(_, p) p.x = p.x + 1 end}\n"
           "assert(w:progress(0)) return w:get(e, 'Pos').x",
        out, sizeof out);
    ck_assert_str_eq(out, "2");
    kiln_world_destroy(world);
    ck_assert_str_eq(kiln_world_error(world), refused);
    run(L, "assert(w:progress(0)) return w:get(e, 'Pos').x .. ' ' .. w:get(e, 'Brain').n", out, sizeof out);
    ck_assert_str_eq(out, "3 1");
    lua_close(L); /* destroys the schedule */
    kiln_world_clear_error(world);
    ck_assert_int_eq(kiln_entity_count(world), 1);
    kiln_world_destroy(world);
}
END_TEST

/* A mod manager keeps the World's schedule, which its mods' systems join, from kiln.mods on: a
 * host destroying the world under loaded mods is refused the same way, and the mods run on. */
START_TEST(destroying_a_host_world_with_mods_loaded_is_refused_and_the_mods_run_on) {
    char dir[] = "/tmp/kiln-release-mods-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/walker.lua", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("world:component('Step', 'int32_t n;') world:spawn{Step = {n = 0}}\n"
          "world:system{name = 'walk', writes = {'Step'}, query = {'Step'}, each = function(_, s) s.n = s.n + 1 end}\n",
          f);
    fclose(f);
    kiln_world *world = kiln_world_create(NULL);
    lua_State *L = push_into_new_state(world);
    lua_getglobal(L, "w");
    kiln_lua_mods_push(L, -1, NULL);
    char err[512], out[256];
    ck_assert_msg(kiln_lua_mods_load(L, lua_gettop(L), path, err, sizeof err), "%s", err);
    lua_setglobal(L, "mods");
    lua_settop(L, 0);
    run(L, "assert(w:progress(0)) local n for _, s in w:query{'Step'}:each() do n = s.n end return n", out, sizeof out);
    ck_assert_str_eq(out, "1");
    kiln_world_destroy(world);
    ck_assert_str_eq(kiln_world_error(world), refused);
    run(L, "assert(w:progress(0)) local n for _, s in w:query{'Step'}:each() do n = s.n end\n"
           "return n .. ' ' .. #mods:list()", out, sizeof out);
    ck_assert_str_eq(out, "2 1");
    lua_close(L); /* closes the mods' states, then destroys the schedule */
    ck_assert_int_eq(kiln_entity_count(world), 1); /* the mod's entity stays the host's world's */
    kiln_world_destroy(world);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_release_refusals");
    TCase *tc = tcase_create("refusals");
    tcase_add_test(tc, destroying_a_host_world_whose_lua_systems_live_is_refused_and_lua_runs_on);
    tcase_add_test(tc, destroying_a_host_world_with_mods_loaded_is_refused_and_the_mods_run_on);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
