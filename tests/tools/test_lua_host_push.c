/* test_lua_host_push.c: a host's world pushed into Lua: into one state it is the same World, another
 * state is refused while one holds it, and a world the host destroys under Lua closes its World. */
#include <check.h>
#include <lauxlib.h>
#include <lualib.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "kiln_lua.h"
#include "kiln_persist.h"
#include "suite_main.h"

static int push(lua_State *L) {
    return kiln_lua_push_world(L, lua_touserdata(L, 1), 0);
}

/* Pushes world as global name; the error message ("" when pushed) goes to dest. */
static void push_as(lua_State *L, kiln_world *world, const char *name, char *dest, size_t size) {
    lua_pushcfunction(L, push);
    lua_pushlightuserdata(L, world);
    int rc = lua_pcall(L, 1, 1, 0);
    snprintf(dest, size, "%s", rc == LUA_OK ? "" : lua_tostring(L, -1));
    if (rc == LUA_OK) lua_setglobal(L, name);
    else lua_pop(L, 1);
}

/* Runs chunk; what it returned, as a string, goes to dest. */
static void run(lua_State *L, const char *chunk, char *dest, size_t size) {
    ck_assert_msg(luaL_dostring(L, chunk) == LUA_OK, "%s", lua_tostring(L, -1));
    const char *s = lua_tostring(L, -1);
    snprintf(dest, size, "%s", s ? s : "(nil)");
    lua_settop(L, 0);
}

static lua_State *new_state(void) {
    lua_State *L = luaL_newstate();
    ck_assert_ptr_nonnull(L);
    luaL_openlibs(L);
    return L;
}

/* Pushed twice, the second World took the world's values table over: the first World's
 * values read as the second's, and despawning through one released the other's. */
START_TEST(a_world_pushed_twice_into_one_state_is_the_same_world_and_keeps_its_values) {
    kiln_world *world = kiln_world_create(NULL);
    lua_State *L = new_state();
    char err[256], out[256];
    push_as(L, world, "w1", err, sizeof err);
    ck_assert_str_eq(err, "");
    run(L, "w1:component('Brain', 'lua') a = w1:spawn{Brain = {who = 'one'}} return 'ok'", out, sizeof out);
    push_as(L, world, "w2", err, sizeof err);
    ck_assert_str_eq(err, "");
    run(L, "b = w2:spawn{Brain = {who = 'two'}} c = w2:spawn{Brain = {who = 'three'}}\n"
           "return tostring(rawequal(w1, w2)) .. ' ' .. w1:get(a, 'Brain').who", out, sizeof out);
    ck_assert_str_eq(out, "true one");
    run(L, "w1:despawn(a) collectgarbage() local v = w2:get(b, 'Brain') return type(v) == 'table' and v.who",
        out, sizeof out);
    ck_assert_str_eq(out, "two");
    lua_close(L);
    kiln_world_destroy(world);
}
END_TEST

/* Another state took the world's values table and state over: despawning in the first
 * released slots of the second's table, whose values then read as numbers. */
START_TEST(a_world_held_by_one_state_is_refused_to_another_until_that_one_closes) {
    kiln_world *world = kiln_world_create(NULL);
    lua_State *L1 = new_state(), *L2 = new_state();
    char err[256], out[256];
    push_as(L1, world, "w", err, sizeof err);
    run(L1, "w:component('Brain', 'lua') a = w:spawn{Brain = {who = 'one'}} return 'ok'", out, sizeof out);
    push_as(L2, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "kiln_lua_push_world: the world is held by another Lua state (one state at a time: "
                          "close that one first)");
    run(L1, "w:despawn(a) b = w:spawn{Brain = {who = 'still one'}} return w:get(b, 'Brain').who", out, sizeof out);
    ck_assert_str_eq(out, "still one");
    lua_close(L1);
    push_as(L2, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "");
    run(L2, "w:component('Brain', 'lua') local e = w:spawn{Brain = {who = 'two'}} return w:get(e, 'Brain').who",
        out, sizeof out);
    ck_assert_str_eq(out, "two");
    lua_close(L2);
    kiln_world_destroy(world);
}
END_TEST

/* The state that held the world closed and took its rows' script-only values with it; the rows
 * keep their refs. The next state's values table starts past them: those rows read nil, and
 * setting one or spawning anew names no other row's value (they took the next refs, so a set
 * freed its own new value and two rows then shared one). */
START_TEST(script_only_values_a_closed_state_left_read_nil_in_the_next_and_share_nothing) {
    kiln_world *world = kiln_world_create(NULL);
    lua_State *L1 = new_state();
    char err[256], out[256], chunk[512];
    push_as(L1, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "");
    run(L1, "w:component('Brain', 'lua') local a = w:spawn{Brain = {who = 'one'}}\n"
            "local b = w:spawn{Brain = {who = 'two'}} return a .. ', ' .. b", out, sizeof out);
    lua_close(L1);
    lua_State *L2 = new_state();
    push_as(L2, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "");
    snprintf(chunk, sizeof chunk, "a, b = %s w:component('Brain', 'lua') return 'ok'", out);
    run(L2, chunk, out, sizeof out);
    run(L2, "local before = tostring(w:get(a, 'Brain')) w:set(a, 'Brain', {who = 'new a'})\n"
            "e = w:spawn{Brain = {who = 'e'}}\n"
            "return before .. ' ' .. w:get(a, 'Brain').who .. ' ' .. tostring(w:get(b, 'Brain')) .. ' ' ..\n"
            "  w:get(e, 'Brain').who", out, sizeof out);
    ck_assert_str_eq(out, "nil new a nil e");
    run(L2, "w:despawn(b) w:despawn(a) collectgarbage() f = w:spawn{Brain = {who = 'f'}}\n"
            "return w:get(e, 'Brain').who .. ' ' .. w:get(f, 'Brain').who", out, sizeof out);
    ck_assert_str_eq(out, "e f");
    lua_close(L2);
    kiln_world_destroy(world);
}
END_TEST

typedef struct counts {
    int runs, finis;
} counts;

static void count_fini(kiln_world *world, void *user) {
    (void)world;
    ((counts *)user)->finis++;
}

static void count_run(const kiln_system_ctx *ctx) { ((counts *)ctx->user)->runs++; }

/* The host's World lives until lua_close: the host popped it and a script dropped the global,
 * and the collector took it, destroying the schedule of kiln_lua_schedule under the host (its
 * C systems' fini ran; its next frame used freed memory). Pushed again, it is the same World,
 * values and all. */
START_TEST(a_host_world_dropped_by_host_and_script_keeps_its_schedule_until_lua_close) {
    kiln_world *world = kiln_world_create(NULL);
    lua_State *L = new_state();
    char err[256], out[256];
    push_as(L, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "");
    lua_getglobal(L, "w");
    kiln_schedule *sched = kiln_lua_schedule(L, -1);
    lua_pop(L, 1);
    counts c = {0, 0};
    ck_assert_int_eq(kiln_schedule_add(sched, &(kiln_system_desc){.name = "host", .run = count_run,
                                                                   .fini = count_fini, .user = &c}), KILN_OK);
    run(L, "w:component('Brain', 'lua') a = w:spawn{Brain = {who = 'one'}} w = nil\n"
           "collectgarbage() collectgarbage() return 'ok'", out, sizeof out);
    ck_assert_int_eq(c.finis, 0);
    ck_assert_int_eq(kiln_schedule_run(sched, 0.016), KILN_OK);
    ck_assert_int_eq(c.runs, 1);
    push_as(L, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "");
    run(L, "return w:get(a, 'Brain').who", out, sizeof out);
    ck_assert_str_eq(out, "one");
    lua_close(L);
    ck_assert_int_eq(c.finis, 1); /* lua_close destroyed the schedule */
    kiln_world_destroy(world);
}
END_TEST

/* A host state opened without a library the module needs: the push says which, not "attempt
 * to index a nil value" from inside the module's Lua layer; opened, the push works. */
START_TEST(a_state_without_a_needed_standard_library_is_told_which_when_the_world_is_pushed) {
    kiln_world *world = kiln_world_create(NULL);
    lua_State *L = luaL_newstate();
    ck_assert_ptr_nonnull(L);
    luaL_requiref(L, LUA_GNAME, luaopen_base, 1);
    luaL_requiref(L, LUA_TABLIBNAME, luaopen_table, 1);
    luaL_requiref(L, LUA_MATHLIBNAME, luaopen_math, 1);
    lua_settop(L, 0);
    char err[256], out[256];
    push_as(L, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "kiln: the standard library 'string' is missing (kiln needs string, table and math as "
                          "globals: open them before loading kiln, as luaL_openlibs does)");
    luaL_requiref(L, LUA_STRLIBNAME, luaopen_string, 1);
    lua_settop(L, 0);
    push_as(L, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "");
    run(L, "w:component('Pos', 'float x;') return tostring(w:get(w:spawn{Pos = {x = 2}}, 'Pos').x == 2)", out,
        sizeof out);
    ck_assert_str_eq(out, "true");
    lua_close(L);
    kiln_world_destroy(world);
}
END_TEST

/* A host that destroys its world while Lua still holds the World (the docs forbid it, but a
 * careless host does it): the World is closed with the world, so a method raises instead of
 * reading freed memory, and the Lua values and the query the script kept go with Lua. */
START_TEST(a_world_the_host_destroys_under_lua_is_closed_and_its_methods_raise) {
    kiln_world *world = kiln_world_create(NULL);
    lua_State *L = new_state();
    char err[256], out[256];
    push_as(L, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "");
    run(L, "w:component('Brain', 'lua') w:component('Pos', 'float x;')\n"
           "a = w:spawn{Brain = {who = 'one'}, Pos = {x = 1}} q = w:query{'Pos'} return q:count()",
        out, sizeof out);
    ck_assert_str_eq(out, "1");
    kiln_world_destroy(world);
    run(L, "local ok, e = pcall(w.spawn, w, {}) return tostring(ok) .. ' ' .. e", out, sizeof out);
    ck_assert_str_eq(out, "false attempt to use a closed world");
    run(L, "local ok, e = pcall(w.get, w, a, 'Brain') return tostring(ok) .. ' ' .. e", out, sizeof out);
    ck_assert_str_eq(out, "false attempt to use a closed world");
    run(L, "return tostring(w)", out, sizeof out);
    ck_assert_str_eq(out, "kiln.World (closed)");
    run(L, "local ok = pcall(q.count, q) q = nil w = nil collectgarbage() collectgarbage() return tostring(ok)", out,
        sizeof out);
    ck_assert_str_eq(out, "false");
    lua_close(L);
}
END_TEST

/* Destroyed under Lua, then lua_close: the close frees only Lua's own (the World, its values). */
START_TEST(a_world_the_host_destroys_before_lua_close_leaves_lua_close_nothing_of_it) {
    kiln_world *world = kiln_world_create(NULL);
    lua_State *L = new_state();
    char err[256], out[256];
    push_as(L, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "");
    run(L, "w:component('Brain', 'lua') for i = 1, 10 do w:spawn{Brain = {n = i}} end return 'ok'", out,
        sizeof out);
    kiln_world_destroy(world);
    lua_close(L);
}
END_TEST

/* Lua lets go first, then the host destroys the world: the teardown hook left behind names no
 * World; a world pushed into one state after another is closed with the state that holds it. */
START_TEST(a_world_lua_let_go_of_first_is_destroyed_by_the_host_with_no_hook_left_on_lua) {
    kiln_world *world = kiln_world_create(NULL);
    char err[256], out[256];
    lua_State *L = new_state();
    push_as(L, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "");
    run(L, "w:component('Brain', 'lua') w:spawn{Brain = {who = 'one'}} return 'ok'", out, sizeof out);
    lua_close(L);
    L = new_state();
    push_as(L, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "");
    run(L, "w:component('Mind', 'lua') b = w:spawn{Mind = {who = 'two'}} return w:get(b, 'Mind').who", out, sizeof out);
    ck_assert_str_eq(out, "two");
    kiln_world_destroy(world);
    run(L, "return select(2, pcall(w.get, w, b, 'Mind'))", out, sizeof out);
    ck_assert_str_eq(out, "attempt to use a closed world");
    lua_close(L);
    world = kiln_world_create(NULL);
    L = new_state();
    push_as(L, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "");
    lua_close(L);
    kiln_world_destroy(world);
}
END_TEST

/* The C functions a coroutine calls: push (upvalue 1: the world) and destroy the world. */
static int push_here(lua_State *L) {
    return kiln_lua_push_world(L, lua_touserdata(L, lua_upvalueindex(1)), 0);
}

static int destroy_here(lua_State *L) {
    kiln_world_destroy(lua_touserdata(L, lua_upvalueindex(1)));
    return 0;
}

/* A coroutine pushed the world and then, from a C function it called, the host destroyed it:
 * the teardown hook releases the World on the main thread, which waits in the resume below the
 * coroutine. The coroutine goes on with the World closed, and the main thread's stack is as it
 * was (the values under the call still there); under ASan nothing is read out of bounds. */
START_TEST(a_world_destroyed_from_a_coroutine_that_pushed_it_is_closed_and_both_threads_go_on) {
    kiln_world *world = kiln_world_create(NULL);
    lua_State *L = new_state();
    char out[256];
    lua_pushlightuserdata(L, world);
    lua_pushcclosure(L, push_here, 1);
    lua_setglobal(L, "push");
    lua_pushlightuserdata(L, world);
    lua_pushcclosure(L, destroy_here, 1);
    lua_setglobal(L, "destroy");
    run(L, "local before = 'kept'\n"
           "local co = coroutine.wrap(function()\n"
           "  local w = push() w:component('Brain', 'lua') local e = w:spawn{Brain = {who = 'one'}}\n"
           "  q = w:query{'Brain'} coroutine.yield(w:get(e, 'Brain').who)\n"
           "  destroy()\n"
           "  local ok, err = pcall(w.get, w, e, 'Brain')\n"
           "  return tostring(ok) .. ' ' .. err .. ' ' .. tostring(pcall(q.count, q))\n"
           "end)\n"
           "local first = co()\n"
           "local second = co()\n"
           "collectgarbage() collectgarbage()\n"
           "return first .. ' ' .. second .. ' ' .. before",
        out, sizeof out);
    ck_assert_str_eq(out, "one false attempt to use a closed world false kept");
    lua_close(L);
}
END_TEST

static jmp_buf recovery;
static char panic_message[256];

/* A host's panic function: keeps the message and jumps back to the host's recovery point. */
static int on_panic(lua_State *L) {
    const char *msg = lua_tostring(L, -1);
    snprintf(panic_message, sizeof panic_message, "%s", msg ? msg : "(not a string)");
    longjmp(recovery, 1);
}

/* kiln_lua_push_world raises a Lua error, as lua_* functions do: called outside any protected
 * call, the refusal reaches the host's panic function (lua_atpanic) with the message, and the
 * world and the state holding it are as they were. */
START_TEST(a_held_world_pushed_unprotected_reaches_the_panic_function_with_the_message) {
    kiln_world *world = kiln_world_create(NULL);
    lua_State *L1 = new_state(), *L2 = new_state();
    char err[256], out[256];
    push_as(L1, world, "w", err, sizeof err);
    ck_assert_str_eq(err, "");
    run(L1, "w:component('Brain', 'lua') a = w:spawn{Brain = {who = 'one'}} return 'ok'", out, sizeof out);
    uint64_t before = kiln_world_hash(world);
    lua_atpanic(L2, on_panic);
    panic_message[0] = '\0';
    if (setjmp(recovery) == 0) {
        kiln_lua_push_world(L2, world, 0); /* no lua_pcall around it */
        ck_abort_msg("pushed into a second state");
    }
    ck_assert_str_eq(panic_message, "kiln_lua_push_world: the world is held by another Lua state (one state at a "
                                    "time: close that one first)");
    ck_assert_uint_eq(kiln_world_hash(world), before);
    run(L1, "return w:get(a, 'Brain').who", out, sizeof out);
    ck_assert_str_eq(out, "one");
    lua_close(L2);
    lua_close(L1);
    kiln_world_destroy(world);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_host_push");
    TCase *tc = tcase_create("push");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, a_world_pushed_twice_into_one_state_is_the_same_world_and_keeps_its_values);
    tcase_add_test(tc, a_world_held_by_one_state_is_refused_to_another_until_that_one_closes);
    tcase_add_test(tc, a_held_world_pushed_unprotected_reaches_the_panic_function_with_the_message);
    tcase_add_test(tc, script_only_values_a_closed_state_left_read_nil_in_the_next_and_share_nothing);
    tcase_add_test(tc, a_host_world_dropped_by_host_and_script_keeps_its_schedule_until_lua_close);
    tcase_add_test(tc, a_state_without_a_needed_standard_library_is_told_which_when_the_world_is_pushed);
    tcase_add_test(tc, a_world_the_host_destroys_under_lua_is_closed_and_its_methods_raise);
    tcase_add_test(tc, a_world_the_host_destroys_before_lua_close_leaves_lua_close_nothing_of_it);
    tcase_add_test(tc, a_world_lua_let_go_of_first_is_destroyed_by_the_host_with_no_hook_left_on_lua);
    tcase_add_test(tc, a_world_destroyed_from_a_coroutine_that_pushed_it_is_closed_and_both_threads_go_on);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
