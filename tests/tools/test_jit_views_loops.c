/* test_jit_views_loops.c: a debug view (kiln.ffi_debug, LuaJIT) kept past its loop stays
 * refused however many loops of its query began since. 2^32 loops take minutes, so the query's
 * loop counter is set near there directly (white box); under Lua 5.4 there are no FFI views. */
#include "lua_host.h"
#include "src/klua.h"

/* The number of the Query global q's last FFI loop, after setting it to next - 1 (when given):
 * the next loop gets next. */
static uint64_t loop_counter(lua_State *L, uint64_t next) {
    lua_getglobal(L, "q");
    klua_query *kq = luaL_checkudata(L, -1, KLUA_QUERY);
    lua_pop(L, 1);
    uint64_t had = kq->ffi_gen;
    if (next) kq->ffi_gen = next - 1;
    return had;
}

/* Runs a loop of q: its view must work, the view kept from the first loop must be refused. */
static void loop_refuses_the_kept_view(lua_State *L) {
    run(L, "live, kept_ok, kept_err = false, nil, nil "
           "for e, p in q:each() do "
           "  live = pcall(function() return p.x end) "
           "  kept_ok, kept_err = pcall(function() return kept.x end) "
           "end");
    lua_getglobal(L, "live");
    ck_assert_msg(lua_toboolean(L, -1), "the running loop's own view was refused");
    lua_getglobal(L, "kept_ok");
    lua_getglobal(L, "kept_err");
    ck_assert_msg(!lua_toboolean(L, -2), "the view kept from loop 1 was taken as alive: it read %s",
                  lua_tostring(L, -1) ? lua_tostring(L, -1) : "a value");
    ck_assert_msg(strstr(lua_tostring(L, -1), "used after its loop ended"), "%s", lua_tostring(L, -1));
    lua_pop(L, 3);
}

START_TEST(a_view_kept_past_its_loop_stays_refused_when_the_loop_count_passes_2_to_the_32) {
    if (!KLUA_LUAJIT) return; /* table views: no loop counter to come round */
    host h;
    start(&h, "kiln.ffi_debug = true w:component('P', 'float x;') w:spawn{P = {x = 1}} "
              "q = w:query{'P'} for e, p in q:each() do kept = p end "
              "assert(type(kept) == 'table', 'not a debug view')");
    uint64_t first = loop_counter(h.L, 0);
    ck_assert_uint_ge(first, 1);
    /* the loop whose number is first's plus 2^32: a 32-bit counter gives it first's */
    loop_counter(h.L, ((uint64_t)1 << 32) + first);
    loop_refuses_the_kept_view(h.L);
    ck_assert_uint_eq(loop_counter(h.L, 0), ((uint64_t)1 << 32) + first);
    /* the last number Lua holds exactly under LuaJIT still names its own loop */
    loop_counter(h.L, ((uint64_t)1 << 53) - 1);
    loop_refuses_the_kept_view(h.L);
    stop(&h);
}
END_TEST

int main(void) {
    Suite *s = suite_create("jit_views_loops");
    TCase *tc = tcase_create("loops");
    tcase_add_test(tc, a_view_kept_past_its_loop_stays_refused_when_the_loop_count_passes_2_to_the_32);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
