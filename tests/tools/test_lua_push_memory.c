/* test_lua_push_memory.c: kiln_lua_push_world out of memory at every allocation in turn, in
 * the Lua state or in the world: the push raises, and a retry gives a world all of whose
 * methods work (hierarchy included); or it succeeds with all of them working. */
#include "lua_host.h"

static int push_world(lua_State *L) {
    return kiln_lua_push_world(L, lua_touserdata(L, 1), 0);
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

/* Refusing in the Lua state (_i 0): the guard's metatable was published before it had its
 * __close, and a refusal in between left every held method of every world of the state
 * raising "got a non-closable value". In the world (_i 1): the transform addon's setup
 * failing for memory was ignored, the push succeeded and every hierarchy call after raised
 * "the world has no transforms", for good. */
START_TEST(a_push_out_of_memory_anywhere_raises_and_a_retry_gives_a_usable_world) {
    int64_t n = 0;
    for (;; n++) {
        host h;
        open_host(&h);
        run(h.L, "collectgarbage() collectgarbage()");
        budget *b = _i == 0 ? &h.lua_mem : &h.world_mem;
        bool pushed = push_failing_after(&h, b, n);
        if (!pushed) ck_assert_msg(push_failing_after(&h, b, -1), "the retry failed");
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
        open_host(&h);
        run(h.L, "collectgarbage() collectgarbage()");
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

/* Destroys the host's world (argument 1: the host) from a C function whose stack is full to
 * its last slot, with Lua's allocator refusing: the teardown hook finds no room to release the
 * World through a protected call (under LuaJIT the stack is full to its cap, and the hook may
 * find room left in it). */
static int destroy_on_a_full_stack(lua_State *L) {
    host *h = lua_touserdata(L, 1);
#if defined(KLUA_LUAJIT) && KLUA_LUAJIT /* its lua_checkstack raises out of memory: fill to its cap */
    while (lua_checkstack(L, 1)) lua_pushboolean(L, 1);
    h->lua_mem.left = 0;
#else
    h->lua_mem.left = 0;
    while (lua_checkstack(L, 1)) lua_pushboolean(L, 1);
#endif
    kiln_world_destroy(h->world);
    h->lua_mem.left = -1;
    return 0;
}

/* The hook's fallback: the World is closed anyway, so its methods and its query's raise instead
 * of reading the freed world, and its collection at lua_close frees what it held (its scratch,
 * schema cache and query links had leaked), so both allocators get every byte back. */
START_TEST(a_world_destroyed_under_lua_with_no_lua_memory_is_closed_and_gives_back_every_byte) {
    host h;
    start(&h, "w:component('Brain', 'lua') w:component('Pos', 'float x;')\n"
              "for i = 1, 20 do w:spawn{Brain = {n = i}, Pos = {x = i}} end q = w:query{'Pos'}");
    lua_pushcfunction(h.L, destroy_on_a_full_stack);
    lua_pushlightuserdata(h.L, &h);
    ck_assert_int_eq(lua_pcall(h.L, 1, 0, 0), LUA_OK);
    ck_assert_int_eq(h.world_mem.live, 0);
    run(h.L, "local ok, e = pcall(w.spawn, w, {}) assert(not ok and e == 'attempt to use a closed world', e)\n"
             "assert(not pcall(q.count, q)) assert(tostring(w) == 'kiln.World (closed)')");
    lua_close(h.L);
    ck_assert_int_eq(h.lua_mem.live, 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_push_memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, a_push_out_of_memory_anywhere_raises_and_a_retry_gives_a_usable_world, 0, 2);
    tcase_add_test(tc, kiln_world_out_of_lua_memory_anywhere_raises_and_a_retry_works);
    tcase_add_test(tc, a_world_destroyed_under_lua_with_no_lua_memory_is_closed_and_gives_back_every_byte);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
