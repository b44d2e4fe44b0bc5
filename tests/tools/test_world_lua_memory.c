/* test_world_lua_memory.c: World methods whose Lua state runs out of memory at every
 * allocation in turn (a host that caps its Lua heap, a mod at its memory limit). A call that
 * raises has not touched the world: a method's work lands last, and nothing it does after
 * (ending its collector hold included) may allocate. */
#include "kiln_persist.h"
#include "lua_host.h"

/* A world with plain, Lua-valued and entity components, an event, a hierarchy and a
 * resource; same() checks what the world's hash does not cover. */
static const char *const setup =
    "w:component('Position', 'float x, y;') w:component('Velocity', 'float x, y;')\n"
    "w:component('Script', 'lua') w:component('Target', 'entity who;') w:event('Hit', 'int32_t n;')\n"
    "e1 = w:spawn{Position = {x = 1}, Script = {a = 1}} e2 = w:spawn{Position = {x = 2}, Script = {b = {1, 2}}}\n"
    "e3 = w:spawn{Position = {x = 3}} e4 = w:spawn{Position = {}} w:set_parent(e4, e3)\n"
    "w:resource('cfg', {level = 1})\n"
    "tick0 = w:tick()\n"
    "function same()\n"
    "  assert(w:component_info('NewComp') == nil, 'NewComp was defined')\n"
    "  assert(not pcall(w.emit, w, 'Boom', {}), 'Boom was defined')\n"
    "  assert(w:resource('cfg').level == 1 and w:resource('cfg').list == nil, 'the resource changed')\n"
    "  assert(#w:systems() == 0, 'a system was added')\n"
    "  assert(w:tick() == tick0, 'the tick moved')\n"
    "  local v = w:get(e1, 'Script') assert(v.a == 1 and v.t == nil, 'the Lua value of e1 changed')\n"
    "end";

/* One call each; every one changes the world when it succeeds. */
static const char *const calls[] = {
    "w:spawn{Position = {x = 1}, Script = {a = 1, b = {2, {3}}}, Target = {who = e1}}",
    "w:spawn{Script = {a = 1}}",
    "w:spawn()",
    "w:add(e1, 'Velocity', {x = 2})",
    "w:add(e1, 'Script', {t = {1, 2, 3}})",
    "w:add(e3, 'Script', {t = {1, 2, 3}})",
    "w:add(e1, 'Target', {who = e2})",
    "w:set(e1, 'Position', {y = 3})",
    "w:set(e1, 'Script', {t = {1, 2, 3}})",
    "w:remove(e1, 'Script')",
    "w:remove(e1, 'Position')",
    "w:despawn(e2)",
    "w:despawn(e1)",
    "w:resource('cfg', {level = 2, list = {1, 2}})",
    "w:set_parent(e3, e1)",
    "w:set_parent(e4, e1)",
    "w:set_parent(e4, nil)",
    "w:despawn_recursive(e3)",
    "w:component('NewComp', 'float v; int32_t k[4];')",
    "w:event('Boom', 'int32_t n;')",
    "w:system{name = 'mover', writes = {'Position'}, run = function() end}",
    "w:advance_tick()",
};
enum { CALLS = sizeof calls / sizeof *calls };

START_TEST(a_world_method_out_of_lua_memory_anywhere_raises_before_it_changes_the_world) {
    int64_t n = 0;
    for (;; n++) {
        host h;
        start(&h, setup);
        run(h.L, "collectgarbage() collectgarbage()");
        uint64_t hash = kiln_world_hash(h.world);
        int64_t count = kiln_entity_count(h.world);
        int rc = call_failing_after(&h, calls[_i], n);
        if (rc != LUA_OK) {
            ck_assert_msg(rc == LUA_ERRMEM, "%s: %s", calls[_i], lua_tostring(h.L, -1));
            lua_pop(h.L, 1);
            ck_assert_msg(kiln_world_hash(h.world) == hash && kiln_entity_count(h.world) == count,
                          "%s, refused after %lld grants, changed the world", calls[_i], (long long)n);
            run(h.L, "same()");
        } else {
            ck_assert_msg(kiln_world_hash(h.world) != hash || luaL_dostring(h.L, "same()") != LUA_OK,
                          "%s changed nothing", calls[_i]);
        }
        stop(&h);
        if (rc == LUA_OK) break;
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("world_lua_memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, a_world_method_out_of_lua_memory_anywhere_raises_before_it_changes_the_world, 0, CALLS);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
