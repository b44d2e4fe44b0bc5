/* test_mods_indexes.c: a mod churning the links and names the world indexes, counted from a C
 * host: the rows of Parent the children index read and the slots the name index read, per turn
 * of the mod's loop. An index rebuilt per look-up (4000 links, 4000 names) shows here as
 * thousands a turn; mods_indexes_spec.lua, which cannot read the counters, checks the rest. */
#include <check.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../addons/transform/src/transform_links.h" /* kl_transform_links_read */
#include "kiln_lua.h"
#include "kiln_persist.h" /* kiln_name_slots_read */
#include "suite_main.h"

/* mods_indexes_spec.lua's CHURN in a system, and a system after it printing its turns. */
static const char churn[] =
    "local r1, r2, c = world:spawn{}, world:spawn{}, world:spawn{}\n"
    "world:set_parent(c, r1)\n"
    "world:name(c, 'start')\n"
    "for i = 1, 4000 do world:set_parent(world:spawn{}, r1) end\n"
    "for i, e in ipairs(world:children(r1)) do if e ~= c then world:name(e, 'kid' .. i) end end\n"
    "local turns = 0\n"
    "world:system{name = 'churn', writes = {'Parent', 'Name'}, run = function(w)\n"
    "  turns = 0\n"
    "  while true do\n"
    "    turns = turns + 1\n"
    "    w:set_parent(c, turns % 2 == 0 and r1 or r2)\n"
    "    local n = #w:children(r2)\n"
    "    w:name(c, 'n' .. turns)\n"
    "    local e = w:lookup('n' .. turns)\n"
    "  end\n"
    "end}\n"
    "world:system{name = 'turns', after = {'churn'}, run = function() print(turns) end}\n";

START_TEST(a_mod_churning_links_and_names_reads_a_few_index_entries_a_turn) {
    char dir[64], path[128];
    snprintf(dir, sizeof dir, "/tmp/kiln-mods-indexes-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/churn.lua", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(churn, f);
    fclose(f);
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    luaL_requiref(L, "kiln", luaopen_kiln, 0);
    lua_setglobal(L, "kiln");
    lua_pushstring(L, path);
    lua_setglobal(L, "path");
    /* 4000 links read at each look-up took minutes of the budget: the clock ends such a run
     * (the frame's is off, so the count of turns always runs) */
    const char *setup = "w = kiln.world{transforms = true}\n"
                        "mods = kiln.mods(w, {instructions = 2000000, milliseconds = 2000, frame_milliseconds = -1})\n"
                        "assert(mods:load(path))";
    ck_assert_msg(luaL_dostring(L, setup) == LUA_OK, "%s", lua_tostring(L, -1));
    lua_getglobal(L, "w");
    kiln_world *world = kiln_lua_check_world(L, -1);
    lua_pop(L, 1);
    int64_t links = kl_transform_links_read(world), names = kiln_name_slots_read(world);
    const char *frames = "local turns = 0\n"
                         "for _ = 1, 3 do assert(#select(2, w:progress(1 / 60)) == 1) end\n"
                         "for _, line in ipairs(mods:log('churn')) do turns = turns + tonumber(line) end\n"
                         "return turns";
    ck_assert_msg(luaL_dostring(L, frames) == LUA_OK, "%s", lua_tostring(L, -1));
    int64_t turns = lua_tointeger(L, -1);
    links = kl_transform_links_read(world) - links;
    names = kiln_name_slots_read(world) - names;
    ck_assert_int_gt(turns, 3000); /* about 41,000 a frame of 2,000,000 instructions */
    ck_assert_msg(links <= 4 * turns && names <= 16 * turns, "%lld turns read %lld links and %lld name slots",
                  (long long)turns, (long long)links, (long long)names);
    ck_assert_int_eq(luaL_dostring(L, "mods:close() w:close()"), LUA_OK);
    lua_close(L);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("mods_indexes");
    TCase *tc = tcase_create("indexes");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, a_mod_churning_links_and_names_reads_a_few_index_entries_a_turn);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
