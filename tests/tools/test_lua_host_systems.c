/* test_lua_host_systems.c: scripts a host's own C systems run on a pushed world: no Lua system
 * is current there, so the core's refusals beside running systems must reach the script; and
 * frames the host runs itself beside a script's open loop. */
#include <check.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"
#include "kiln_lua.h"
#include "suite_main.h"

typedef struct scripted {
    lua_State *L;
    const char *chunk;
    char out[512]; /* what the chunk returned, as a string */
} scripted;

static void run_script(const kiln_system_ctx *ctx) {
    scripted *s = ctx->user;
    int rc = luaL_dostring(s->L, s->chunk);
    const char *text = lua_tostring(s->L, -1);
    snprintf(s->out, sizeof s->out, "%s%s", rc == LUA_OK ? "" : "error: ", text ? text : "(nil)");
    lua_settop(s->L, 0);
}

static int push(lua_State *L) { return kiln_lua_push_world(L, lua_touserdata(L, 1), 0); }

/* A Lua state with world pushed: the global w, and on top of the stack. */
static lua_State *state_with_world(kiln_world *world) {
    lua_State *L = luaL_newstate();
    ck_assert_ptr_nonnull(L);
    luaL_openlibs(L);
    lua_pushcfunction(L, push);
    lua_pushlightuserdata(L, world);
    ck_assert_int_eq(lua_pcall(L, 1, 1, 0), LUA_OK);
    lua_pushvalue(L, -1);
    lua_setglobal(L, "w");
    return L;
}

/* Runs chunk from a main-thread C system of a schedule of the host's own, on world pushed as w. */
static void run_in_system(kiln_world *world, scripted *s) {
    kiln_schedule *sched = kiln_schedule_create(world, NULL);
    ck_assert_int_eq(kiln_schedule_add(sched, &(kiln_system_desc){.name = "scripted", .run = run_script,
                                                                   .user = s, .main_thread = true}), KILN_OK);
    ck_assert_int_eq(kiln_schedule_run(sched, 0.016), KILN_OK);
    kiln_schedule_destroy(sched);
}

/* The core refuses a hash beside running systems with 0, which no world hashes to: world:hash
 * returned that 0 as the hash, and a lockstep check compared it as one. */
START_TEST(a_hash_a_host_system_s_script_asks_for_beside_running_systems_raises_naming_why) {
    kiln_world *world = kiln_world_create(NULL);
    lua_State *L = state_with_world(world);
    lua_pop(L, 1);
    ck_assert_int_eq(luaL_dostring(L, "w:component('Pos', 'float x;') w:spawn{Pos = {x = 1}}"), LUA_OK);
    const char *refusal = ": called while a schedule runs systems that are not exclusive (they may write any "
                          "column meanwhile); call it from an exclusive system or between runs";
    const char *calls[] = {"hash", "content_hash"};
    for (int i = 0; i < 2; i++) {
        char chunk[128], want[512];
        snprintf(chunk, sizeof chunk, "return w:%s()", calls[i]);
        scripted s = {.L = L, .chunk = chunk};
        run_in_system(world, &s);
        snprintf(want, sizeof want, "error: world:%s%s", calls[i], refusal);
        ck_assert_str_eq(s.out, want);
    }
    lua_close(L);
    kiln_world_destroy(world);
}
END_TEST

/* The host runs the frames of the pushed world's schedule itself (kiln_lua_schedule). */
static kiln_schedule *host_schedule;

static int host_frame(lua_State *L) {
    kiln_result r = kiln_schedule_run(host_schedule, 0.016);
    lua_pushstring(L, r == KILN_OK ? "ok" : kiln_world_error(kiln_lua_check_world(L, lua_upvalueindex(1))));
    return 1;
}

/* A script's loop suspended in a coroutine, or a Lua each-system calling the host, left the
 * world iterating when the host ran its frame: the core asserted, and the game died. Now the
 * frame fails, naming why, and runs once the loop ended. */
START_TEST(a_host_frame_beside_a_script_s_open_loop_fails_naming_it_instead_of_aborting) {
    kiln_world *world = kiln_world_create(NULL);
    lua_State *L = state_with_world(world);
    host_schedule = kiln_lua_schedule(L, -1);
    lua_pushcclosure(L, host_frame, 1);
    lua_setglobal(L, "frame");
    const char *chunk =
        "w:component('Pos', 'float x;') w:spawn{Pos = {x = 1}} w:spawn{Pos = {x = 2}}\n"
        "local inner\n"
        "w:system{name = 'move', writes = {'Pos'}, query = {'Pos'},\n"
        "  each = function(e, p) p.x = p.x + 1 if not inner then inner = frame() end end}\n"
        "local co = coroutine.wrap(function() for e, p in w:query{'Pos'}:each() do coroutine.yield() end end)\n"
        "co()\n"
        "local beside = frame()\n"
        "co() co()\n"
        "local after = frame()\n"
        "local xs = {} for e, p in w:query{'Pos'}:each() do xs[#xs + 1] = string.format('%g', p.x) end\n"
        "return beside .. ' | ' .. after .. ' | ' .. inner .. ' | ' .. table.concat(xs, ' ')";
    ck_assert_msg(luaL_dostring(L, chunk) == LUA_OK, "%s", lua_tostring(L, -1));
    ck_assert_str_eq(lua_tostring(L, -1),
                     "kiln_schedule_run: a query of the world iterates (a loop left open); end it first | ok | "
                     "kiln_schedule_run: the schedule is already running (called from one of its systems) | 2 3");
    lua_close(L);
    kiln_world_destroy(world);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_host_systems");
    TCase *tc = tcase_create("systems");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, a_hash_a_host_system_s_script_asks_for_beside_running_systems_raises_naming_why);
    tcase_add_test(tc, a_host_frame_beside_a_script_s_open_loop_fails_naming_it_instead_of_aborting);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
