/* test_loops_lua_memory.c: query loops whose deferred changes land at their end, from a C host
 * whose WORLD allocator refuses growth after each number of grants in turn (found by the OOM
 * red-team pass): a loop that ends without raising has landed everything it queued. */
#include <stdio.h>
#include <string.h>

#include "kiln_persist.h"
#include "lua_host.h"

/* Four entities with Position only; q matches them until they get Velocity. */
static const char *const setup =
    "w:component('Position', 'float x, y;') w:component('Velocity', 'float x, y;')\n"
    "for i = 1, 4 do w:spawn{Position = {x = i}} end\n"
    "q = w:query{'Position', without = {'Velocity'}}";

/* Each loop spawns one entity and adds Velocity per row: 8 entities, none left in q. */
static const char *const loops[] = {
    "for e, p in q:each() do w:spawn{Position = {x = p.x}, Velocity = {}} w:add(e, 'Velocity', {}) end",
    "q:bulk(function(n, es) for i = 1, n do w:spawn{Position = {}, Velocity = {}} w:add(es[i], 'Velocity', {}) end end)",
#if !(defined(KLUA_LUAJIT) && KLUA_LUAJIT) /* LuaJIT has no <close>: a loop left by break ends later */
    "local n = 0 for e in q:each() do w:spawn{Position = {}, Velocity = {}} w:add(e, 'Velocity', {}) n = n + 1 if n == 4 then break end end",
#endif
};
enum { LOOPS = sizeof loops / sizeof *loops };

/* kiln_iter_fini dropped kiln_defer_end's result, so the binding could not raise: a q:each loop
 * that spawns and adds ended clean with 5 of 8 entities, the rest landing at some later end. A
 * loop's end that cannot land everything now raises "query:each: ... stay queued", and the next
 * loop's end lands the rest. */
START_TEST(a_loop_whose_changes_cannot_all_land_raises_at_its_end) {
    const char *code = loops[_i];
    int64_t end_failures = 0;
    for (int64_t n = 0;; n++) {
        ck_assert_int_lt(n, 200);
        host h;
        start(&h, setup);
        h.world_mem.left = n;
        int rc = luaL_dostring(h.L, code);
        h.world_mem.left = -1;
        if (rc == LUA_OK) {
            ck_assert_msg(kiln_entity_count(h.world) == 8, "loop %d granted %lld world allocations ended "
                          "clean with %lld entities of 8", _i, (long long)n, (long long)kiln_entity_count(h.world));
            run(h.L, "assert(q:count() == 0)");
            stop(&h);
            break;
        }
        const char *msg = lua_tostring(h.L, -1);
        ck_assert_ptr_nonnull(msg);
        if (strstr(msg, "the loop's changes that did not land stay queued")) {
            end_failures++;
            ck_assert_msg(strstr(msg, _i == 1 ? "query:bulk: " : "query:each: ") && strstr(msg, "out of memory"), "%s", msg);
            ck_assert_int_lt(kiln_entity_count(h.world), 8);
            lua_pop(h.L, 1);
            run(h.L, "for _ in q:each() do end assert(w:count() == 8 and q:count() == 0)");
        } else {
            lua_pop(h.L, 1); /* a spawn or add inside the loop ran out of memory: its error */
        }
        stop(&h);
    }
    ck_assert_int_gt(end_failures, 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("loops_lua_memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, a_loop_whose_changes_cannot_all_land_raises_at_its_end, 0, LOOPS);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
