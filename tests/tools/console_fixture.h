/* console_fixture.h: the game side shared by the console suites: a Lua state with kiln and a
 * setup script, a console opened or the test failed, clocks, and frames served until a
 * connection's answers came. Test code only (Check asserts). */
#ifndef KILN_TESTS_CONSOLE_FIXTURE_H
#define KILN_TESTS_CONSOLE_FIXTURE_H

#include <check.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "console_client.h"
#include "kiln_lua.h"
#include "suite_main.h"

/* A new state with the standard libraries and the global kiln, setup run in it (NULL: none). */
static inline lua_State *game_state(const char *setup) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    luaL_requiref(L, "kiln", luaopen_kiln, 1);
    lua_pop(L, 1);
    if (setup && luaL_dostring(L, setup) != LUA_OK) ck_abort_msg("game setup: %s", lua_tostring(L, -1));
    return L;
}

/* A console on L opened with desc; the test fails with the console's reason otherwise. */
static inline kiln_console *must_open_console(lua_State *L, kiln_console_desc desc) {
    char err[256];
    kiln_console *c = kiln_console_open(L, &desc, err, sizeof err);
    ck_assert_msg(c != NULL, "console_open: %s", err);
    return c;
}

/* A connection to c that has sent the token line and nothing else (its answer is to come). */
static inline int connect_with_token(kiln_console *c) {
    int fd = connect_port(kiln_console_port(c));
    ck_assert_int_ge(fd, 0);
    char line[300];
    snprintf(line, sizeof line, "token %s\n", kiln_console_token(c));
    send_text(fd, line);
    return fd;
}

/* Lua's tostring of expr evaluated in the game's state, as text (static buffer). */
static inline const char *game_eval(lua_State *L, const char *expr) {
    static char text[256];
    char code[512];
    snprintf(code, sizeof code, "return tostring(%s)", expr);
    ck_assert_int_eq(luaL_dostring(L, code), LUA_OK);
    snprintf(text, sizeof text, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return text;
}

static inline double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* CPU time of this thread: what a poll does, whether or not a busy machine descheduled it. */
static inline double thread_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Runs frame(game) and takes the frames fd received until count were taken, the connection
 * closed or spins rounds passed (a pause of 1 ms after each round short of count), appending
 * each as "status:text" and sep to out (emptied first). Returns how many were taken: every
 * complete one, so more than count when more came at once. */
static inline int wait_answers(void (*frame)(void *), void *game, int fd, int count, int spins, frames *f,
                               char *out, size_t size, const char *sep) {
    memset(f, 0, sizeof *f);
    out[0] = '\0';
    int got = 0;
    for (int spin = 0; spin < spins && got < count && !f->closed; spin++) {
        frame(game);
        frames_recv(f, fd);
        while (frames_take(f, out, size, sep)) got++;
        if (got < count && !f->closed) pause_ms(1);
    }
    return got;
}

#endif
