/* test_console_backpressure.c: what one console client can make the game spend: a client
 * that reads its answers slowly costs a poll the bytes it sends, not its whole queue, a
 * statement cannot grow Lua's memory without bound in the few instructions its budget counts,
 * showing a long string answers its start, and connections without the token cannot hold the places the token's holder needs, nor
 * push out a client whose token came. */
#include <errno.h>
#include <stdlib.h>

#include "console_fixture.h"
#include "src/console.h"

#define TOKEN "0123456789abcdef0123"

/* A console over L (a new state with the standard libraries when L is NULL) with TOKEN and
 * what statement_bytes gives (0: the default). */
/* (statement_ms: the memory limit is what these cases meet; under LuaJIT the budget's hook
 * collects often, and a loaded machine stretched a statement past the default second) */
static kiln_console *open_console_bytes(lua_State **L, int64_t statement_bytes) {
    if (!*L) {
        *L = luaL_newstate();
        luaL_openlibs(*L);
    }
    return must_open_console(*L, (kiln_console_desc){.token = TOKEN, .statement_bytes = statement_bytes,
                                                     .statement_ms = statement_bytes ? 30000 : 0});
}

static kiln_console *open_console(lua_State **L) { return open_console_bytes(L, 0); }

/* A connection with a small receive buffer: the console's sends to it are a few KiB each. */
static int connect_small(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    int size = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* Receives exactly n bytes (or fewer if the console closes) while polling it. */
static size_t take(kiln_console *c, int fd, char *buf, size_t n) {
    size_t have = 0;
    for (int spin = 0; spin < 20000 && have < n; spin++) {
        kiln_console_poll(c);
        ssize_t r = recv(fd, buf + have, n - have, 0);
        if (r == 0) break;
        if (r > 0) have += (size_t)r;
        else pause_ms(1);
    }
    return have;
}

/* One answer of 14 MiB queued, read a few KiB a frame, as a client on a slow link (or one
 * that means harm) reads it: each poll used to move the whole unsent rest of the queue down
 * after each send, some milliseconds a poll per such client for as long as it reads. */
START_TEST(a_slow_reader_of_a_large_answer_costs_each_poll_only_what_it_sends) {
    lua_State *L = NULL;
    kiln_console *c = open_console(&L);
    int fd = connect_small(kiln_console_port(c));
    send_text(fd, "token " TOKEN "\nx = string.rep('a', 14 * 2^20)\nprint(x)\n"); /* (shown, x is cut) */
    char head[64];
    ck_assert_int_eq(take(c, fd, head, 10), 10);
    ck_assert(memcmp(head, "ok 0\nok 0\n", 10) == 0);
    ck_assert_int_eq(take(c, fd, head, 12), 12); /* "ok 14680064\n": the most one answer holds */
    ck_assert(memcmp(head, "ok 14680064\n", 12) == 0);
    char chunk[4096];
    size_t drained = 0, moved = klua_console_moved(c);
    for (int spin = 0; spin < 200000 && drained < (8u << 20); spin++) {
        ssize_t r = recv(fd, chunk, sizeof chunk, 0);
        ck_assert(r > 0 || (r < 0 && errno == EAGAIN));
        if (r > 0) drained += (size_t)r;
        kiln_console_poll(c);
    }
    ck_assert_uint_ge(drained, 8u << 20);
    /* counted, not timed: the bytes the console moved within its queues while 8 MiB went out
     * (none here; at most the queue once when an answer reuses the room sent bytes left).
     * Moving the unsent rest down after each send of a few KiB moved GiBs. */
    moved = klua_console_moved(c) - moved;
    ck_assert_msg(moved <= (16u << 20), "sending 8 MiB to a slow reader moved %zu bytes within the queue", moved);
    close(fd);
    kiln_console_close(c);
    lua_close(L);
}
END_TEST

/* Reads one answer frame "status len\ntext" whole into out (status:text), polling. */
static void answer_of(kiln_console *c, int fd, char *out, size_t size) {
    char head[64];
    size_t h = 0;
    while (h < sizeof head - 1 && take(c, fd, head + h, 1) == 1 && head[h] != '\n') h++;
    head[h] = '\0';
    char st[32];
    size_t len = 0;
    ck_assert_msg(sscanf(head, "%31s %zu", st, &len) == 2 && len < size - 40, "frame head '%s'", head);
    int o = snprintf(out, size, "%s:", st);
    ck_assert_uint_eq(take(c, fd, out + o, len), len);
    out[(size_t)o + len] = '\0';
}

/* The token line and a statement answering 42 that fd sent are answered: it signed in. */
static void signs_in_and_answers_42(kiln_console *c, int fd) {
    char out[256];
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "ok:");
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "ok:42");
}

/* One concatenation is one instruction however long its strings: doubling a string in a loop
 * of 30 builds a GiB in about a hundred counted instructions, and the copies and page faults
 * of the last few held the game for many times the statement's time limit (27 s for the
 * line below on a busy two-core machine), past any hook. A statement's growth of Lua's memory
 * is bounded instead: the doubling stops at the limit, with an error saying so. */
START_TEST(a_statement_cannot_double_a_string_past_the_console_memory_limit) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    /* a long time limit: the memory limit is the one under test (under ASan on a busy
     * machine the copies up to 256 MiB took past the default second) */
    kiln_console *c = must_open_console(L, (kiln_console_desc){.token = TOKEN, .statement_ms = 20000});
    int fd = connect_port(kiln_console_port(c));
    ck_assert_int_ge(fd, 0);
    send_text(fd, "token " TOKEN "\n"
                  "local s = ('x'):rep(2^20) for i = 1, 10 do s = s .. s end return #s\n"
                  "s = ('x'):rep(2^20) .. 'y' return #s\n");
    char out[256];
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "ok:");
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "error:console: the statement grew Lua's memory past its limit (256 MiB)");
    answer_of(c, fd, out, sizeof out); /* the next statement runs under a fresh limit */
    ck_assert_str_eq(out, "ok:1048577");
    /* LuaJIT builds each concatenation in a buffer of the state's that a full collection only
     * halves: after the 128 MiB string, one collection left 64 MiB of it (66,805 KiB counted,
     * seen once in a LuaJIT run); four leave 8 */
    for (int i = 0; i < 4; i++) lua_gc(L, LUA_GCCOLLECT, 0);
    ck_assert_int_lt(lua_gc(L, LUA_GCCOUNT, 0), 64 << 10); /* KiB: the GiB string never was */
    close(fd);
    kiln_console_close(c);
    lua_close(L);
}
END_TEST

/* Showing a value costs what is shown: a string of 17 MiB (a Lua component a tampered save
 * brought, say) was written whole into its answer, past the 16 MiB a client may have waiting,
 * and the client was dropped. It shows its start and its length, and the client stays. */
START_TEST(showing_a_long_string_answers_its_start_and_keeps_the_client) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    ck_assert_int_eq(luaL_dostring(L, "long = ('x'):rep(17 * 2^20)"), LUA_OK);
    kiln_console *c = open_console(&L);
    int fd = connect_port(kiln_console_port(c));
    ck_assert_int_ge(fd, 0);
    send_text(fd, "token " TOKEN "\nlong\nreturn 5\n");
    char out[1024];
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "ok:");
    answer_of(c, fd, out, sizeof out);
    ck_assert_msg(strncmp(out, "ok:\"xxx", 7) == 0 && strstr(out, "xxx\"... (17825792 bytes, cut)"), "%s", out);
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "ok:5");
    close(fd);
    kiln_console_close(c);
    lua_close(L);
}
END_TEST

/* Signs in under statement_bytes (0: the default), sends statement and "return 5": the
 * statement's answer must be its first 14 MiB of x and note, and the client's next
 * statement must be answered. */
static void answer_is_cut(int64_t statement_bytes, const char *statement, const char *note) {
    lua_State *L = NULL;
    kiln_console *c = open_console_bytes(&L, statement_bytes);
    int fd = connect_port(kiln_console_port(c));
    ck_assert_int_ge(fd, 0);
    send_text(fd, "token " TOKEN "\n");
    send_text(fd, statement);
    send_text(fd, "\nreturn 5\n");
    size_t size = (size_t)15 << 20;
    char *out = malloc(size);
    answer_of(c, fd, out, size);
    ck_assert_str_eq(out, "ok:");
    answer_of(c, fd, out, size);
    size_t len = strlen(out), want = 3 + ((size_t)14 << 20) + strlen(note);
    ck_assert_msg(len == want && strncmp(out, "ok:xxx", 6) == 0 && strcmp(out + len - strlen(note), note) == 0,
                  "%zu bytes (%zu wanted), ending %s", len, want, len > 80 ? out + len - 80 : out);
    answer_of(c, fd, out, size);
    ck_assert_str_eq(out, "ok:5");
    free(out);
    close(fd);
    kiln_console_close(c);
    lua_close(L);
}

/* What one statement prints costs its client at most one answer's limit: 20 MiB printed (past
 * the 16 MiB a client may have waiting) dropped the client ("too many answers waiting to be
 * read"). The answer keeps the first 14 MiB, says how many bytes were cut, and the client's
 * next statement is answered. */
START_TEST(a_statement_printing_past_the_answer_limit_is_cut_and_keeps_its_client) {
    /* 20 lines of 1 MiB and the 19 newlines between them: 20971539 bytes, 14680064 shown */
    answer_is_cut(0, "for i = 1, 20 do print(('x'):rep(2^20)) end", "\n... (6291475 bytes not shown)");
}
END_TEST

/* What is printed past the answer's limit is counted, not kept: a statement printing 400 MiB
 * (two hundred lines of 2 MiB, each garbage once printed) had every line kept until the
 * answer was joined, and the answer built whole before it was cut, so the game held it all;
 * under a memory limit of 64 MiB the statement ran out of memory ("its error was not shown:
 * not enough memory"). It is answered the first 14 MiB and the count of the rest, within
 * that limit. */
START_TEST(a_statement_printing_far_past_the_answer_limit_keeps_only_what_is_shown) {
    /* 200 lines of 2 MiB and a digit, the 199 newlines between them: 419430799 bytes, 14680064
     * shown */
    answer_is_cut(64 << 20, "local s = ('x'):rep(2^21) for i = 1, 200 do print(s .. i % 10) end",
                  "\n... (404750735 bytes not shown)");
}
END_TEST

/* The limit is the game's to set (a game saving large worlds through its console needs more):
 * statement_bytes gives it, and the message names it. */
START_TEST(statement_bytes_sets_the_limit) {
    lua_State *L = NULL;
    kiln_console *c = open_console_bytes(&L, 8 << 20);
    int fd = connect_port(kiln_console_port(c));
    ck_assert_int_ge(fd, 0);
    send_text(fd, "token " TOKEN "\n"
                  "local s = ('x'):rep(2^20) for i = 1, 4 do s = s .. s end return #s\n"
                  "local s = ('x'):rep(2^20) for i = 1, 2 do s = s .. s end return #s\n");
    char out[256];
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "ok:");
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "error:console: the statement grew Lua's memory past its limit (8 MiB)");
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "ok:4194304");
    close(fd);
    kiln_console_close(c);
    lua_close(L);
}
END_TEST

/* The limit is on what a statement keeps, not on its garbage: Lua 5.4 collects when the
 * limit refuses an allocation and tries again. LuaJIT raises at once, and its collector waits
 * until the heap has doubled: over a game holding 24 MiB, a statement making 14 MB of short
 * strings failed with the 8 MiB limit's error. The budget's hook collects for it. What a
 * statement keeps still meets the limit. */
START_TEST(a_statement_s_garbage_does_not_count_against_the_limit) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    ck_assert_int_eq(luaL_dostring(L, "KEEP = {} for i = 1, 24 * 1024 do KEEP[i] = ('k'):rep(1000) .. i end"), 0);
    lua_gc(L, LUA_GCCOLLECT, 0);
    kiln_console *c = open_console_bytes(&L, 8 << 20);
    int fd = connect_port(kiln_console_port(c));
    ck_assert_int_ge(fd, 0);
    send_text(fd, "token " TOKEN "\n"
                  "local n = 0 for i = 1, 100000 do n = n + #(('%099d'):format(i)) end return n\n"
                  "local t = {} for i = 1, 100000 do t[i] = ('%099d'):format(i) end return #t\n"
                  "return #KEEP\n");
    char out[256];
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "ok:");
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "ok:9900000");
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "error:console: the statement grew Lua's memory past its limit (8 MiB)");
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "ok:24576");
    close(fd);
    kiln_console_close(c);
    lua_close(L);
}
END_TEST

/* While a statement runs, the state's allocator is the console's wrapper. A system the
 * statement adds outlives it, and the console too: what it keeps to free itself with must be
 * the allocator under the wrapper, or its free runs the wrapper of a console closed since. */
START_TEST(a_system_a_statement_adds_outlives_the_console) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    luaL_requiref(L, "kiln", luaopen_kiln, 1);
    lua_pop(L, 1);
    ck_assert_int_eq(luaL_dostring(L, "world = kiln.world() world:component('P', 'float x;') "
                                      "world:spawn{P = {x = 1}}"), LUA_OK);
    kiln_console *c = open_console(&L);
    int fd = connect_port(kiln_console_port(c));
    ck_assert_int_ge(fd, 0);
    send_text(fd, "token " TOKEN "\n"
                  "world:system{name = 'grow', writes = {'P'}, query = {'P'}, each = function(e, p) p.x = p.x + 1 end}\n");
    char out[256];
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "ok:");
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "ok:");
    close(fd);
    kiln_console_close(c);
    ck_assert_int_eq(luaL_dostring(L, "world:progress(1) world:remove_system('grow') "
                                      "local n = 0 for _, p in world:query{'P'}:each() do n = p.x end return n"),
                     LUA_OK);
    ck_assert_int_eq((int)lua_tointeger(L, -1), 2);
    lua_close(L);
}
END_TEST

/* Anyone who can reach the port can open connections; without the token they run nothing, but
 * eight of them held every place, reopened every auth_ms, and the token's holder was refused
 * for as long as that went on. A client without its token now gives up its place instead. */
START_TEST(connections_without_the_token_cannot_hold_every_place) {
    lua_State *L = NULL;
    kiln_console *c = open_console(&L);
    int idle[8];
    for (int i = 0; i < 8; i++) {
        idle[i] = connect_port(kiln_console_port(c));
        ck_assert_int_ge(idle[i], 0);
        pause_ms(2);
        kiln_console_poll(c);
    }
    int fd = connect_port(kiln_console_port(c));
    ck_assert_int_ge(fd, 0);
    send_text(fd, "token " TOKEN "\nreturn 40 + 2\n");
    char out[256];
    signs_in_and_answers_42(c, fd);
    answer_of(c, idle[0], out, sizeof out); /* the oldest made room, and was told why */
    ck_assert_str_eq(out, "error:console: too many clients (8): one without a token made room");
    for (int i = 0; i < 8; i++) close(idle[i]);
    close(fd);
    kiln_console_close(c);
    lua_close(L);
}
END_TEST

/* A storm of new connections made room by pushing out the client without a token silent
 * longest: one that had connected and sent its token went before its line was read, for as
 * long as the storm lasted. Now a waiting token is read before room is made from its client,
 * whatever poll accepted it: both sign in, and the storm makes room from itself. */
START_TEST(a_storm_of_connections_cannot_push_out_a_client_whose_token_came) {
    lua_State *L = NULL;
    kiln_console *c = open_console(&L);
    int port = kiln_console_port(c);
    int early = connect_port(port); /* accepted a poll before its token comes */
    ck_assert_int_ge(early, 0);
    pause_ms(2);
    kiln_console_poll(c);
    send_text(early, "token " TOKEN "\nreturn 40 + 2\n");
    int late = connect_port(port); /* accepted in the storm's poll, its token already sent */
    ck_assert_int_ge(late, 0);
    send_text(late, "token " TOKEN "\nreturn 6 * 7\n");
    int storm[12]; /* (the listening queue holds them all before the poll) */
    for (int i = 0; i < 12; i++) ck_assert_int_ge(storm[i] = connect_port(port), 0);
    pause_ms(5);
    char out[256];
    signs_in_and_answers_42(c, early);
    signs_in_and_answers_42(c, late);
    answer_of(c, storm[0], out, sizeof out); /* the last 6 of the storm hold the places left */
    ck_assert_str_eq(out, "error:console: too many clients (8): one without a token made room");
    for (int i = 0; i < 12; i++) close(storm[i]);
    close(early);
    close(late);
    kiln_console_close(c);
    lua_close(L);
}
END_TEST

/* Fourteen connections that never sign in, opened before one poll, took the eight places in
 * the poll that accepted them; no room was made from a client in that poll, so the token's
 * holder, accepted next, was refused though nobody had signed in. Now the client without a
 * token that came first gives up its place, whatever poll accepted it. */
START_TEST(connections_accepted_in_one_poll_cannot_lock_out_the_token_holder) {
    lua_State *L = NULL;
    kiln_console *c = open_console(&L);
    int port = kiln_console_port(c);
    int idle[14]; /* (the listening queue holds them all before the poll) */
    for (int i = 0; i < 14; i++) ck_assert_int_ge(idle[i] = connect_port(port), 0);
    int fd = connect_port(port);
    ck_assert_int_ge(fd, 0);
    send_text(fd, "token " TOKEN "\nreturn 40 + 2\n");
    pause_ms(5);
    char out[256];
    signs_in_and_answers_42(c, fd);
    answer_of(c, idle[0], out, sizeof out); /* the first to come went first, told why */
    ck_assert_str_eq(out, "error:console: too many clients (8): one without a token made room");
    for (int i = 0; i < 14; i++) close(idle[i]);
    close(fd);
    kiln_console_close(c);
    lua_close(L);
}
END_TEST

/* Room is made only from clients without a token: a client that signed in keeps its place
 * and its session however many connections come after it, in one poll or over many (more
 * than the seven other places; checked when the last session was asked whether storms could
 * push out a client whose token came late, and they could not). */
START_TEST(connections_without_the_token_never_push_out_a_signed_in_client) {
    lua_State *L = NULL;
    kiln_console *c = open_console(&L);
    int port = kiln_console_port(c);
    int fd = connect_port(port);
    ck_assert_int_ge(fd, 0);
    send_text(fd, "token " TOKEN "\nkept = 40 return kept + 2\n");
    signs_in_and_answers_42(c, fd);
    int storm[40];
    for (int i = 0; i < 20; i++) ck_assert_int_ge(storm[i] = connect_port(port), 0); /* one poll */
    pause_ms(5);
    kiln_console_poll(c);
    for (int i = 20; i < 40; i++) { /* one a poll */
        ck_assert_int_ge(storm[i] = connect_port(port), 0);
        pause_ms(2);
        kiln_console_poll(c);
    }
    char out[256];
    answer_of(c, storm[0], out, sizeof out); /* the storm made room from itself */
    ck_assert_str_eq(out, "error:console: too many clients (8): one without a token made room");
    send_text(fd, "return kept + 2\n");
    answer_of(c, fd, out, sizeof out);
    ck_assert_str_eq(out, "ok:42");
    for (int i = 0; i < 40; i++) close(storm[i]);
    close(fd);
    kiln_console_close(c);
    lua_close(L);
}
END_TEST

int main(void) {
    Suite *s = suite_create("console_backpressure");
    TCase *tc = tcase_create("costs");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, a_slow_reader_of_a_large_answer_costs_each_poll_only_what_it_sends);
    tcase_add_test(tc, a_statement_cannot_double_a_string_past_the_console_memory_limit);
    tcase_add_test(tc, statement_bytes_sets_the_limit);
    tcase_add_test(tc, showing_a_long_string_answers_its_start_and_keeps_the_client);
    tcase_add_test(tc, a_statement_printing_past_the_answer_limit_is_cut_and_keeps_its_client);
    tcase_add_test(tc, a_statement_printing_far_past_the_answer_limit_keeps_only_what_is_shown);
    tcase_add_test(tc, a_statement_s_garbage_does_not_count_against_the_limit);
    tcase_add_test(tc, a_system_a_statement_adds_outlives_the_console);
    tcase_add_test(tc, connections_without_the_token_cannot_hold_every_place);
    tcase_add_test(tc, a_storm_of_connections_cannot_push_out_a_client_whose_token_came);
    tcase_add_test(tc, connections_accepted_in_one_poll_cannot_lock_out_the_token_holder);
    tcase_add_test(tc, connections_without_the_token_never_push_out_a_signed_in_client);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
