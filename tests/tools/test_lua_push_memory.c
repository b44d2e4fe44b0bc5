/* test_lua_push_memory.c: kiln_lua_push_world out of memory at every allocation in turn, in
 * the Lua state or in the world: the push raises, and a retry gives a world all of whose
 * methods work (hierarchy included); or it succeeds with all of them working. */
#include "lua_host.h"

static int push_world(lua_State *L) {
    return kiln_lua_push_world(L, lua_touserdata(L, 1), 0);
}

/* A Lua state with the kiln module loaded, and a world, on h's allocators; no World yet. */
static void open_unpushed(host *h) {
    memset(h, 0, sizeof *h);
    h->lua_mem.left = h->world_mem.left = -1;
    h->world = kiln_world_create(&(kiln_world_desc){.alloc = budget_alloc, .alloc_ud = &h->world_mem});
    ck_assert_ptr_nonnull(h->world);
    h->L = lua_newstate(budget_alloc, &h->lua_mem);
    ck_assert_ptr_nonnull(h->L);
    luaL_openlibs(h->L);
    luaL_requiref(h->L, "kiln", luaopen_kiln, 0);
    lua_setglobal(h->L, "kiln");
    run(h->L, "collectgarbage() collectgarbage()");
}

/* Pushes h's world as the global w with budget b refusing after n grants: whether it was. */
static bool push_failing_after(host *h, budget *b, int64_t n) {
    lua_pushcfunction(h->L, push_world);
    lua_pushlightuserdata(h->L, h->world);
    b->left = n;
    int rc = lua_pcall(h->L, 1, 1, 0);
    b->left = -1;
    if (rc != LUA_OK) {
        const char *msg = lua_tostring(h->L, -1);
        ck_assert_msg(raised_for_memory(h->L, rc) || (msg && strstr(msg, "out of memory")),
                      "refused after %lld grants: %s", (long long)n, msg);
        lua_pop(h->L, 1);
        return false;
    }
    lua_setglobal(h->L, "w");
    return true;
}

/* Every kind of method: a held one, a spawn, the hierarchy, a frame. */
static const char *const usable =
    "w:component('Position', 'float x, y;')\n"
    "local a = w:spawn{Position = {x = 1}} local b = w:spawn{Position = {}}\n"
    "w:set_parent(b, a) assert(#w:children(a) == 1)\n"
    "w:despawn_recursive(a) assert(w:count() == 0)\n"
    "assert(w:progress(0.1))\n"
    "local w2 = kiln.world() w2:component('Position', 'float x, y;') w2:spawn{Position = {}}\n"
    "w2:close()";

/* The guard's metatable was published before it had its __close: a refusal in between left
 * every held method of every world of the state raising "got a non-closable value". */
START_TEST(a_push_out_of_lua_memory_anywhere_raises_and_a_retry_gives_a_usable_world) {
    int64_t n = 0;
    for (;; n++) {
        host h;
        open_unpushed(&h);
        bool pushed = push_failing_after(&h, &h.lua_mem, n);
        if (!pushed) ck_assert_msg(push_failing_after(&h, &h.lua_mem, -1), "the retry failed");
        run(h.L, usable);
        stop(&h);
        if (pushed) break;
    }
    ck_assert_int_gt(n, 10);
}
END_TEST

/* The transform addon's setup failing for memory was ignored: the push succeeded and every
 * hierarchy call after raised "the world has no transforms", for good. */
START_TEST(a_push_out_of_world_memory_anywhere_raises_and_a_retry_gives_a_usable_world) {
    int64_t n = 0;
    for (;; n++) {
        host h;
        open_unpushed(&h);
        bool pushed = push_failing_after(&h, &h.world_mem, n);
        if (!pushed) ck_assert_msg(push_failing_after(&h, &h.world_mem, -1), "the retry failed");
        run(h.L, usable);
        stop(&h);
        if (pushed) break;
    }
    ck_assert_int_gt(n, 5);
}
END_TEST

/* kiln.world(), its world made on the default allocator: the same two ways to fail, seen
 * from Lua through the Lua allocator only. */
START_TEST(kiln_world_out_of_lua_memory_anywhere_raises_and_a_retry_works) {
    int64_t n = 0;
    for (;; n++) {
        host h;
        open_unpushed(&h);
        int rc = call_failing_after(&h, "w = kiln.world()", n);
        if (rc != LUA_OK) {
            ck_assert_msg(raised_for_memory(h.L, rc), "%s", lua_tostring(h.L, -1));
            lua_pop(h.L, 1);
            run(h.L, "w = kiln.world()");
        }
        run(h.L, usable);
        run(h.L, "w:close()");
        stop(&h);
        if (rc == LUA_OK) break;
    }
    ck_assert_int_gt(n, 10);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_push_memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, a_push_out_of_lua_memory_anywhere_raises_and_a_retry_gives_a_usable_world);
    tcase_add_test(tc, a_push_out_of_world_memory_anywhere_raises_and_a_retry_gives_a_usable_world);
    tcase_add_test(tc, kiln_world_out_of_lua_memory_anywhere_raises_and_a_retry_works);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
