/* test_session_lua_memory.c: a REPL session's commands that change the world (a statement,
 * :load, :reload, :step, :unload) with the Lua state out of memory at every allocation in
 * turn: a change that landed is never answered with an error or a raise (its answer is made
 * before the change, or a short one stands in); a call that raises or answers an error has
 * left the world as it was. */
#include <stdio.h>
#include <unistd.h>

#include "lua_host.h"

static const char *const calls[] = {
    "status, text = S:feed('world:spawn{Position = {x = 1}}')",
    "status, text = S:command(':load ' .. save_path)",
    "status, text = S:command(':reload m')",
    "status, text = S:command(':step 2')",
    "status, text = S:command(':unload m')",
};
enum { CALLS = sizeof calls / sizeof *calls };

START_TEST(a_session_command_out_of_lua_memory_anywhere_answers_ok_for_a_change_that_landed) {
    char dir[64], setup[2048];
    snprintf(dir, sizeof dir, "/tmp/kiln-session-mem-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(setup, sizeof setup,
             "dir = '%s' save_path = dir .. '/w.kiln' mod_path = dir .. '/m.lua'\n"
             "w:component('Position', 'float x, y;') for i = 1, 6 do w:spawn{Position = {x = i}} end\n"
             "w:save(save_path) local all = w:entities() w:despawn(all[1]) w:despawn(all[2])\n"
             "local f = assert(io.open(mod_path, 'w')) f:write('world:spawn{Position = {}}') f:close()\n"
             "mods = kiln.mods(w) assert(mods:load(mod_path))\n"
             "w:system{name = 'mover', writes = {'Position'}, run = function(w)\n"
             "  w:spawn{Position = {}} w:emit('Hit', {n = 1}) end}\n"
             "w:event('Hit', 'int32_t n;')\n"
             "env = setmetatable({world = w, mods = mods}, {__index = _G}) S = kiln.session(env)\n"
             "count0, tick0, mods0 = w:count(), w:tick(), #mods:list()\n"
             "function changed() return w:count() ~= count0 or w:tick() ~= tick0 or #mods:list() ~= mods0 end",
             dir);
    int64_t n = 0, short_answers = 0;
    for (bool whole = false; !whole; n++) {
        host h;
        start(&h, setup);
        run(h.L, "collectgarbage() collectgarbage()");
        int rc = call_failing_after(&h, calls[_i], n);
        if (rc != LUA_OK) {
            const char *msg = lua_tostring(h.L, -1);
            ck_assert_msg(luaL_dostring(h.L, "return changed()") == LUA_OK && !lua_toboolean(h.L, -1),
                          "%s, refused after %lld grants, raised (%s) after its change landed", calls[_i],
                          (long long)n, msg);
            lua_settop(h.L, 0);
        } else {
            run(h.L, "assert(status ~= 'error' or not changed(), 'answered an error for a change that landed: ' .. text)\n"
                     "assert(status ~= 'ok' or changed(), 'answered ok, nothing changed: ' .. text)");
            (void)luaL_dostring(h.L, "return status == 'ok' and not text:find('memory', 1, true)");
            whole = lua_toboolean(h.L, -1);
            lua_settop(h.L, 0);
            (void)luaL_dostring(h.L, "return status == 'ok' and text:find('no memory was left', 1, true) ~= nil or "
                                     "text:find('not shown: not enough memory', 1, true) ~= nil");
            short_answers += lua_toboolean(h.L, -1);
            lua_settop(h.L, 0);
        }
        run(h.L, "mods:close()");
        stop(&h);
    }
    ck_assert_int_gt(n, 2);
    (void)short_answers;
    char path[256];
    snprintf(path, sizeof path, "%s/w.kiln", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/m.lua", dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("session_lua_memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, a_session_command_out_of_lua_memory_anywhere_answers_ok_for_a_change_that_landed, 0,
                        CALLS);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
