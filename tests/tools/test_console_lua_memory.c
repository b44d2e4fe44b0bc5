/* test_console_lua_memory.c: a console served while the game's Lua state runs out of memory at
 * every allocation in turn. kiln_console_poll is called from the game's C code, outside any
 * protected call, so nothing in it may raise: a client signing in and sending a statement
 * gets its answer, an error frame or a closed connection with the reason, and the console
 * serves the next client once memory is back. Consoles opened and closed without end leave
 * the state's memory as it was. */
#include <stdio.h>

#include "console_client.h"
#include "lua_host.h"

static const char token[] = "0123456789abcdef0123456789abcdef";

/* Reads the frames the console sent on fd (non-blocking) into out as "status:text|...";
 * returns whether the console closed the connection. */
static bool read_frames(int fd, char *out, size_t size) {
    static frames f;
    memset(&f, 0, sizeof f);
    out[0] = '\0';
    for (int spin = 0; spin < 50 && !f.closed; spin++) {
        size_t had = f.have;
        frames_recv(&f, fd);
        if (f.have == had && !f.closed) pause_ms(1);
    }
    while (frames_take(&f, out, size, "|")) {}
    ck_assert_msg(f.have == 0, "not a whole frame: %s", f.buf);
    return f.closed;
}

/* Polls until the console has had time to serve what was sent. */
static void serve(kiln_console *c) {
    for (int i = 0; i < 20; i++) {
        kiln_console_poll(c);
        pause_ms(1);
    }
}

START_TEST(a_console_served_out_of_lua_memory_anywhere_answers_or_closes_and_serves_on) {
    int64_t n = 0;
    for (;; n++) {
        host h;
        start(&h, "world = w w:component('Position', 'float x, y;') for i = 1, 5 do w:spawn{Position = {}} end");
        char err[256];
        kiln_console *c = kiln_console_open(h.L, &(kiln_console_desc){.token = token}, err, sizeof err);
        ck_assert_msg(c != NULL, "%s", err);
        int fd = connect_port(kiln_console_port(c));
        ck_assert_int_ge(fd, 0);
        char lines[128];
        snprintf(lines, sizeof lines, "token %s\nreturn world:count() * 7\n", token);
        send_text(fd, lines);
        pause_ms(2);
        h.lua_mem.left = n;
        serve(c);
        h.lua_mem.left = -1;
        /* the game runs on outside the statement: on its own allocator, and not taken for a
         * statement (which makes no mod manager: its mods would run under budgets of their own) */
        void *ud;
        ck_assert_msg(lua_getallocf(h.L, &ud) == budget_alloc && ud == &h.lua_mem,
                      "after %lld grants, the state kept the statement budget's allocator", (long long)n);
        if (luaL_dostring(h.L, "kiln.mods(w):close()") != LUA_OK)
            ck_abort_msg("after %lld grants: %s", (long long)n, lua_tostring(h.L, -1));
        char got[4096];
        bool closed = read_frames(fd, got, sizeof got);
        close(fd);
        bool whole = strcmp(got, "ok:|ok:35|") == 0;
        /* short of that: signed in and the statement refused for memory, or run with no memory
         * left to show its value (a statement that ran is answered ok), or not signed in and
         * closed with the reason */
        ck_assert_msg(whole || (strncmp(got, "ok:|error:", 10) == 0 && strstr(got, "memory")) ||
                          strcmp(got, "ok:|ok:(the statement ran; its values were not shown: not enough memory)|") == 0 ||
                          (closed && strstr(got, "error:console: the game cannot make a session")),
                      "refused after %lld grants: %s%s", (long long)n, got, closed ? " (closed)" : "");
        /* with memory back, a new client is served */
        fd = connect_port(kiln_console_port(c));
        ck_assert_int_ge(fd, 0);
        snprintf(lines, sizeof lines, "token %s\nreturn 6 * 7\n", token);
        send_text(fd, lines);
        serve(c);
        read_frames(fd, got, sizeof got);
        close(fd);
        ck_assert_msg(strcmp(got, "ok:|ok:42|") == 0, "after %lld grants, the next client got %s", (long long)n, got);
        kiln_console_close(c);
        stop(&h);
        if (whole) break;
    }
    ck_assert_int_gt(n, 3);
}
END_TEST

/* Polls c until fd got one answer, written to out as "status:text". */
static void one_answer(kiln_console *c, int fd, char *out, size_t size) {
    static frames f;
    memset(&f, 0, sizeof f);
    out[0] = '\0';
    for (int spin = 0; spin < 2000 && !f.closed; spin++) {
        kiln_console_poll(c);
        frames_recv(&f, fd);
        if (frames_take(&f, out, size, "")) return;
        if (spin > 20) pause_ms(1);
    }
    ck_abort_msg("no answer came (%s)", f.closed ? "closed" : "timed out");
}

static char fill_keys[2048]; /* each byte's address is one registry key (add_key_in_room) */

/* A statement adds no key to the registry (the console and kiln made theirs when they opened):
 * one added there could grow the registry, and a growth refused raised (under LuaJIT it also
 * loses integer keys it moves, a game's own luaL_ref'd values among them). Keys the game adds, one more each time up to the brink
 * of the registry growing past 4 KiB, which is refused while the statement runs (no statement
 * this short needs so much): each statement runs, and leaves the game's allocator in place
 * (under LuaJIT the key that the JIT is off, added by the state's first count hook after the
 * statement's allocator was set, left that allocator set when refused). The last statement
 * runs after the game's own insert was refused: under LuaJIT that refusal hid the console's
 * luaL_ref'd session function and feed, and the statement answered "attempt to call a nil
 * value"; kiln's refs (refs.h) are now keys no refused growth hides. */
START_TEST(a_statement_adds_no_registry_key_and_runs_at_the_brink_of_the_registry_growing) {
    bool brink = false;
    for (int fill = 0; !brink; fill++) {
        ck_assert_msg(fill < (int)sizeof fill_keys, "the registry did not come to the brink of growing");
        host h;
        start(&h, "");
        char err[256], got[4096];
        kiln_console *c = kiln_console_open(h.L, &(kiln_console_desc){.token = token}, err, sizeof err);
        ck_assert_msg(c != NULL, "%s", err);
        int fd = connect_port(kiln_console_port(c));
        ck_assert_int_ge(fd, 0);
        char lines[128];
        snprintf(lines, sizeof lines, "token %s\n", token);
        send_text(fd, lines);
        one_answer(c, fd, got, sizeof got);
        ck_assert_str_eq(got, "ok:");
        for (int i = 0; i < fill && !brink; i++) brink = !add_key_in_room(&h, &fill_keys[i]);
        send_text(fd, "return 6 * 7\n");
        h.lua_mem.refuse_from = 4096;
        one_answer(c, fd, got, sizeof got);
        h.lua_mem.refuse_from = 0;
        void *ud;
        ck_assert_msg(lua_getallocf(h.L, &ud) == budget_alloc && ud == &h.lua_mem,
                      "with %d keys added, the state kept the statement budget's allocator (%s)", fill, got);
        ck_assert_msg(strcmp(got, "ok:42") == 0, "with %d keys added%s: %s", fill,
                      brink ? " (the registry at its brink)" : "", got);
        close(fd);
        kiln_console_close(c);
        stop(&h);
    }
}
END_TEST

/* Entries of the tables the registry holds (one level down), after a full collection: what
 * the consoles leave behind in the game's state. */
static int64_t registry_entries(lua_State *L) {
    lua_gc(L, LUA_GCCOLLECT, 0);
    int64_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, LUA_REGISTRYINDEX)) {
        if (lua_istable(L, -1)) {
            lua_pushnil(L);
            while (lua_next(L, -2)) {
                n++;
                lua_pop(L, 1);
            }
        }
        lua_pop(L, 1);
    }
    return n;
}

/* Opens a console on h's state, signs a client in that runs one statement, closes both. */
static void console_cycle(host *h) {
    char err[256];
    kiln_console *c = kiln_console_open(h->L, &(kiln_console_desc){.token = token}, err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    int fd = connect_port(kiln_console_port(c));
    ck_assert_int_ge(fd, 0);
    char lines[128];
    snprintf(lines, sizeof lines, "token %s\nx = (x or 0) + 1 return x\n", token);
    send_text(fd, lines);
    static frames f;
    memset(&f, 0, sizeof f);
    char got[256] = "";
    int answers = 0;
    for (int spin = 0; spin < 2000 && answers < 2 && !f.closed; spin++) {
        kiln_console_poll(c);
        frames_recv(&f, fd);
        while (frames_take(&f, got, sizeof got, "|")) answers++;
        if (answers < 2 && spin > 20) pause_ms(1);
    }
    close(fd);
    ck_assert_msg(answers == 2 && strncmp(got, "ok:|ok:", 7) == 0, "the client got %s", got);
    kiln_console_close(c);
}

/* Each console learns the game's C functions its budget charges (console_budget.c): learnt
 * again by the next console, they must not pile up in the state. */
START_TEST(consoles_opened_and_closed_again_and_again_leave_the_game_state_as_it_was) {
    host h;
    start(&h, "");
    for (int i = 0; i < 20; i++) console_cycle(&h);
    int64_t entries = registry_entries(h.L), bytes = h.lua_mem.live;
    for (int i = 0; i < 500; i++) console_cycle(&h);
    int64_t more_entries = registry_entries(h.L) - entries, more_bytes = h.lua_mem.live - bytes;
    ck_assert_msg(more_entries <= 0, "500 consoles left %lld more registry table entries", (long long)more_entries);
    ck_assert_msg(more_bytes < 16 * 1024, "500 consoles left %lld more bytes of Lua heap", (long long)more_bytes);
    stop(&h);
}
END_TEST

int main(void) {
    Suite *s = suite_create("console_lua_memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, a_console_served_out_of_lua_memory_anywhere_answers_or_closes_and_serves_on);
    tcase_add_test(tc, consoles_opened_and_closed_again_and_again_leave_the_game_state_as_it_was);
    tcase_add_test(tc, a_statement_adds_no_registry_key_and_runs_at_the_brink_of_the_registry_growing);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
