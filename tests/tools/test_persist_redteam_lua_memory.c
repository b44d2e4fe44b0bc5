/* test_persist_redteam_lua_memory.c: world:export and prefab:spawn from a C host whose Lua state
 * runs out of memory at every allocation in turn (found by red-teaming the persistence paths
 * reached from Lua): each call lands whole or raises, leaving the world as it was, leaking nothing. */
#include <stdio.h>
#include <string.h>

#include "kiln_persist.h"
#include "lua_host.h"

/* Each failing export raises for memory and leaves the world as it was. The push of the
 * finished text could raise for memory after the text was collected, and the text was then
 * never freed: the state's allocator kept those bytes after lua_close. */
START_TEST(an_export_out_of_lua_memory_anywhere_raises_for_memory_and_leaks_nothing) {
    host h;
    start(&h, "w:component('Position', 'float x, y;') w:component('Link', 'entity target;')\n"
              "local root = w:spawn{Position = {x = 1}}\n"
              "for i = 1, 300 do local e = w:spawn{Position = {x = i}, Link = {target = root}} w:set_parent(e, root) end\n"
              "want = w:export()");
    uint64_t before = kiln_world_hash(h.world);
    int64_t n = 0;
    for (;; n++) {
        int rc = call_failing_after(&h, "got = w:export()", n);
        if (rc == LUA_OK) break;
        const char *msg = lua_tostring(h.L, -1);
        ck_assert_msg(raised_for_memory(h.L, rc) || (msg && strcmp(msg, "world:export: out of memory") == 0),
                      "an export granted %lld Lua allocations raised '%s'", (long long)n, msg ? msg : "?");
        lua_pop(h.L, 1);
        ck_assert_uint_eq(kiln_world_hash(h.world), before);
    }
    ck_assert_int_gt(n, 3);
    run(h.L, "assert(got == want)");
    lua_close(h.L);
    ck_assert_int_eq(h.lua_mem.live, 0);
    kiln_world_destroy(h.world);
    ck_assert_int_eq(h.world_mem.live, 0);
}
END_TEST

/* prefab:spawn of a prefab read from JSON spawned the copies, then made the table of their
 * roots: running out of Lua memory for that table raised with every copy left in the world. */
START_TEST(a_json_prefab_spawn_out_of_lua_memory_anywhere_leaves_the_world_as_it_was) {
    host h;
    start(&h, "w:component('Position', 'float x, y;')\n"
              "p = w:prefab('{\"components\": {\"Position\": {\"x\": 1}}, \"children\": [{}]}')");
    uint64_t before = kiln_world_hash(h.world);
    int64_t count = kiln_entity_count(h.world), n = 0;
    for (;; n++) {
        if (run_failing_after(&h, "roots = p:spawn(500)", n)) break;
        ck_assert_msg(kiln_entity_count(h.world) == count && kiln_world_hash(h.world) == before,
                      "a spawn granted %lld Lua allocations raised and left %lld entities", (long long)n,
                      (long long)(kiln_entity_count(h.world) - count));
    }
    ck_assert_int_gt(n, 0); /* (LuaJIT's spawn allocates only a few times) */
    run(h.L, "assert(#roots == 500)");
    ck_assert_int_eq(kiln_entity_count(h.world), count + 1000);
    stop(&h);
}
END_TEST

int main(void) {
    Suite *s = suite_create("persist_redteam_lua_memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, an_export_out_of_lua_memory_anywhere_raises_for_memory_and_leaks_nothing);
    tcase_add_test(tc, a_json_prefab_spawn_out_of_lua_memory_anywhere_leaves_the_world_as_it_was);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
