/* test_console_escapes.c: statements that try to leave their budget through the interpreter
 * itself: a budget spent inside a callback a C function may catch it in, LuaJIT's hook left
 * off by an error lua_load caught, a message handler Lua 5.4 runs with hooks off, a finalizer
 * set through LuaJIT's newproxy. Each is refused or stopped, and the next statement runs. */
#include <stdlib.h>

#include "console_fixture.h"

typedef struct game {
    lua_State *L;
    kiln_console *console;
} game;

/* A game whose state ran the Lua text state, its console opened with desc. */
static game *start_game_with(const char *state, kiln_console_desc desc) {
    game *g = calloc(1, sizeof *g);
    g->L = game_state(state);
    g->console = must_open_console(g->L, desc);
    return g;
}

static game *start_game(void) {
    return start_game_with("world = kiln.world()", (kiln_console_desc){.budget = 1000000});
}

static void stop_game(game *g) {
    kiln_console_close(g->console);
    lua_close(g->L);
    free(g);
}

static void frame(void *g) { kiln_console_poll(((game *)g)->console); }

/* Serves the console until an answer frame arrived on fd; "status:text" (static). */
static const char *answer(game *g, int fd) {
    static frames f;
    static char out[4096];
    ck_assert_msg(wait_answers(frame, g, fd, 1, 60000, &f, out, sizeof out, "") == 1, "answers: '%s'", out);
    return out;
}

/* Sends line and returns its answer. */
static const char *run(game *g, int fd, const char *line) {
    send_text(fd, line);
    send_text(fd, "\n");
    return answer(g, fd);
}

static int sign_in(game *g) {
    int fd = connect_with_token(g->console);
    ck_assert_str_eq(answer(g, fd), "ok:");
    return fd;
}

#define BUDGET_SPENT "error:console: the statement ran past its instruction budget"

START_TEST(a_budget_spent_inside_a_callback_still_stops_the_loop_after_it) {
    game *g = start_game();
    int fd = sign_in(g);
    static const char *const escapes[] = {
        /* LuaJIT: a hook's error caught by lua_load left the hook marked active, so no hook
         * ran again; a reader is refused there (and the refusal swallowed here) */
        "pcall(load, function() while true do end end) local i = 0 while true do i = i + 1 end",
        "local function s() while true do end end pcall(string.gsub, 'ab', '.', s) local i = 0 while true do i = i + 1 end",
        "pcall(tostring, setmetatable({}, {__tostring = function() while true do end end})) while true do end",
        "pcall(function() return setmetatable({}, {__index = function() while true do end end}).x end) while true do end",
        /* Lua 5.4 runs a handler with hooks off for an error the hook raised */
        "xpcall(error, function() while true do end end, 'x') local i = 0 while true do i = i + 1 end",
        "pcall(coroutine.wrap(function() while true do end end)) local i = 0 while true do i = i + 1 end",
    };
    for (size_t i = 0; i < sizeof escapes / sizeof *escapes; i++) {
        const char *a = run(g, fd, escapes[i]);
        ck_assert_msg(strcmp(a, BUDGET_SPENT) == 0, "%s: %s", escapes[i], a);
        ck_assert_str_eq(run(g, fd, "return 5"), "ok:5");
    }
    close(fd);
    stop_game(g);
}
END_TEST

/* a C function calling a C function (a library sort with rawequal as its order) runs no
 * instruction, and the clock was read only at instruction counts: the sort ran on past the
 * time limit; and a table whose length comes from __len was charged by its raw length */
START_TEST(c_functions_calling_c_functions_stop_at_the_time_limit) {
    game *g = calloc(1, sizeof *g);
    /* (the table is made outside any statement: filling it under ASan on a busy machine can
     * take the whole 300 ms) */
    g->L = game_state("world = kiln.world() t = {} for i = 1, 1000000 do t[i] = i end");
    g->console = must_open_console(g->L, (kiln_console_desc){.budget = 200000000, .statement_ms = 300});
    int fd = sign_in(g);
    ck_assert_str_eq(run(g, fd, "return #t"), "ok:1000000");
    ck_assert_str_eq(run(g, fd, "table.sort(t, rawequal)"), "error:console: the statement ran past its time limit (300 ms)");
    ck_assert_msg(strstr(run(g, fd, "table.insert(setmetatable({}, {__len = function() return 2^40 end, __index = rawlen, "
                                    "__newindex = rawequal}), 1, 0)"),
                         "table.insert: a table whose length comes from a __len metamethod is refused"), "len");
    ck_assert_str_eq(run(g, fd, "return 5"), "ok:5");
    close(fd);
    stop_game(g);
}
END_TEST

/* the parser runs no hook and is quadratic on an and-chain (100k terms took 18 s): a text
 * with a name (the session's own compile) goes to it in pieces, the clock read between them
 * (under LuaJIT it is charged instead); one without is charged its jump lists first */
START_TEST(a_slow_parse_stops_at_the_statement_s_limits) {
    game *g = start_game();
    int fd = sign_in(g);
    ck_assert_msg(strstr(run(g, fd, "f = load('return ' .. ('a and '):rep(250000) .. 'a')"),
                         "load could take"), "unnamed");
    const char *named = run(g, fd, "f = load('return ' .. ('a and '):rep(250000) .. 'a', '=named')");
    ck_assert_msg(strcmp(named, "error:console: the statement ran past its time limit (1000 ms)") == 0 ||
                      strstr(named, "load could take"), "%s", named);
    /* a statement continued line by line is compiled again at each line */
    ck_assert_str_eq(run(g, fd, "x = a and"), "more:");
    static char line[60002];
    for (int i = 0; i < 10000; i++) memcpy(line + 6 * i, "a and ", 6);
    const char *a = "more:";
    int lines = 0;
    while (strcmp(a, "more:") == 0 && lines < 40) {
        a = run(g, fd, line);
        lines++;
    }
    ck_assert_msg(strncmp(a, "error:", 6) == 0 && strstr(a, "console: "), "after %d lines: %s", lines, a);
    ck_assert_str_eq(run(g, fd, "return 5"), "ok:5");
    close(fd);
    stop_game(g);
}
END_TEST

#if !defined(KLUA_LUAJIT) || !KLUA_LUAJIT /* (LuaJIT's load is charged its whole text: below) */
/* The load refused left no f, and the session answers the next statement; then closes it. */
static void end_session(game *g, int fd) {
    ck_assert_str_eq(game_eval(g->L, "f == nil"), "true");
    ck_assert_str_eq(run(g, fd, "return 5"), "ok:5");
    close(fd);
    stop_game(g);
}

/* A long text's jump lists are charged as load reads it, a piece at a time, the clock read
 * between pieces: counted whole before the call, the scan of 16 MB ran 0.33 s (5 s under
 * ASan) past a 100 ms limit, no hook reading the clock. The budget stops the read at the piece
 * that spends it (2 * sqrt(what is left) words in), not at the end of the text. */
START_TEST(a_long_text_is_charged_as_load_reads_it_stopping_at_the_piece_that_spends_the_budget) {
    game *g = start_game_with("world = kiln.world() text = 'return ' .. ('a and '):rep(1000000) .. 'a'",
                              (kiln_console_desc){.budget = 4000000, .statement_ms = 60000});
    int fd = sign_in(g);
    const char *a = run(g, fd, "f = load(text) return 1");
    size_t at = 0, n = 0;
    const char *head = "error:console: _G.load could take ";
    ck_assert_msg(strncmp(a, head, strlen(head)) == 0, "%s", a);
    const char *read = strstr(a, "read to byte ");
    ck_assert_msg(read && sscanf(read, "read to byte %zu of %zu", &at, &n) == 2, "%s", a);
    ck_assert_int_eq(n, 6000008);
    /* the read charged first (a step per 8 bytes: 750,000), 2 * sqrt(what is left, about
     * 3.25e6) = 3,600 words of 6 bytes, then at most the rest of the piece it was found in */
    ck_assert_msg(at > 6 * 3500 && at <= 7 + 6 * 3700 + 512, "%s", a);
    end_session(g, fd);
}
END_TEST
#endif

#if !defined(KLUA_LUAJIT) || !KLUA_LUAJIT /* (LuaJIT's load is charged its whole text) */
/* A piece ends after a word, never inside one: a word longer than a piece (1,532 bytes from
 * byte 7, "bb...band", its last 3 bytes at a piece's 512-byte mark) and a jump word at one
 * (the "and" at bytes 510-512) are each counted once and whole, as in the text read in one
 * piece: 72 jump words, 72 * 72 / 4 = 1296 steps, all charged at the last piece (whose
 * refusal, the budget spent before the parse, names them). Cut at the marks, the first text
 * counted a 73rd "and" and the second 71. */
START_TEST(a_text_read_in_pieces_is_charged_its_words_as_read_whole) {
    game *g = start_game_with("long_word = 'return ' .. ('b'):rep(1529) .. 'and' .. (' and a'):rep(72) "
                              "split_word = 'return ' .. ('1+'):rep(250) .. 'aa and a' .. (' and a'):rep(71)",
                              (kiln_console_desc){.budget = 1100, .statement_ms = 60000});
    int fd = sign_in(g);
    ck_assert_str_eq(game_eval(g->L, "long_word:find('and', 1, true) - 1 .. ' ' .. #long_word"), "1536 1971");
    ck_assert_str_eq(game_eval(g->L, "split_word:find('and', 1, true) - 1 .. ' ' .. #split_word"), "510 941");
    static const char *const texts[] = {"long_word", "split_word"}, *const sizes[] = {"1971", "941"};
    for (int i = 0; i < 2; i++) {
        char line[64], want[256];
        snprintf(line, sizeof line, "f = load(%s, '=%s') return 1", texts[i], texts[i]);
        snprintf(want, sizeof want, "error:console: _G.load could take 1.3e+03 steps (its jump lists read to byte "
                 "%s of %s), past what is left of the statement's instruction budget", sizes[i], sizes[i]);
        const char *a = run(g, fd, line);
        ck_assert_msg(strncmp(a, want, strlen(want)) == 0, "%s: %s", texts[i], a);
        ck_assert_str_eq(game_eval(g->L, "f == nil"), "true");
    }
    end_session(g, fd);
}
END_TEST
#endif

/* one C call that runs long, which no hook can stop: a JSON save of a game's world (a million
 * entities held the game 5.2 s and 1.2 GB past a 1 s statement) and the parse of a long text
 * given load without a name (60 MB: 3.8 s; Lua 5.4) now stop at the statement's time limit;
 * before, each ran to its end and the statement answered after it. 400k entities: on an idle
 * machine the JSON save of 100k to a file ended inside the 100 ms */
START_TEST(a_long_save_or_parse_stops_at_the_statement_s_time_limit) {
    game *g = calloc(1, sizeof *g);
    g->L = game_state("world = kiln.world() world:component('P', 'float x, y;') "
                      "for i = 1, 400000 do world:spawn{P = {x = i, y = i}} end text = ('x=1 '):rep(4000000)");
    g->console = must_open_console(g->L, (kiln_console_desc){.budget = 200000000, .statement_ms = 100});
    int fd = sign_in(g);
    const char *late = "error:console: the statement ran past its time limit (100 ms)";
    /* each statement is answered late either way: what tells is whether the call ended (read
     * by the game, outside any statement: over this heap a statement of one line took 56 ms of
     * the 100 under ASan on a loaded machine) */
    ck_assert_str_eq(run(g, fd, "saved = #world:save{format = 'json'}"), late);
    ck_assert_str_eq(game_eval(g->L, "saved == nil"), "true");
    char path[64], line[96];
    snprintf(path, sizeof path, "/tmp/kiln-console-late-%d.json", (int)getpid());
    snprintf(line, sizeof line, ":save %s", path);
    ck_assert_str_eq(run(g, fd, line), late);
    bool written = access(path, F_OK) == 0; /* (a save goes to path.tmp first) */
    unlink(path);
    ck_assert_msg(!written, "%s was written", path);
#if !defined(KLUA_LUAJIT) || !KLUA_LUAJIT /* (LuaJIT's load is charged its text, not read in pieces) */
    ck_assert_str_eq(run(g, fd, "f = load(text)"), late);
    ck_assert_str_eq(game_eval(g->L, "f == nil"), "true");
#endif
    /* the session goes on (answering each late statement), and the world the late calls left
     * saves whole (outside any statement: a save of 400,000 entities may take 100 ms under ASan
     * on a busy machine) */
    ck_assert_str_eq(game_eval(g->L, "world:count()"), "400000");
    ck_assert_int_eq(luaL_dostring(g->L, "return #world:save()"), LUA_OK);
    ck_assert_int_eq(lua_tointeger(g->L, -1), 6400118);
    lua_pop(g->L, 1);
    close(fd);
    stop_game(g);
}
END_TEST

/* a world's budget armed inside a statement replaced the statement's hook for its system
 * runs (a statement's own world with 1e12 instructions held the game for good), and a mod
 * manager made in a statement ran its mods under budgets of their own */
START_TEST(a_statement_s_own_budgets_do_not_replace_its_own) {
    game *g = start_game();
    int fd = sign_in(g);
    ck_assert_str_eq(run(g, fd, "w = kiln.world{instructions = 1e12} w:system{name = 'spin', run = function() "
                                "while true do end end} w:progress(0)"),
                     BUDGET_SPENT);
    ck_assert_msg(strstr(run(g, fd, "kiln.mods(world, {instructions = 2^40, milliseconds = -1})"),
                         "kiln.mods: not available in a console statement"), "mods");
    ck_assert_str_eq(run(g, fd, "return 5"), "ok:5");
    close(fd);
    stop_game(g);
}
END_TEST

#if !defined(KLUA_LUAJIT) || !KLUA_LUAJIT
/* Lua 5.4 leaves hooks off in a coroutine the budget's hook stopped; its pending __close
 * handlers ran there unhooked when it was closed: at once by a coroutine.wrap function, or
 * by coroutine.close in the next statement (which then held the game for good) */
START_TEST(a_coroutine_the_budget_stopped_closes_its_variables_under_the_budget) {
    game *g = start_game();
    int fd = sign_in(g);
    ck_assert_str_eq(run(g, fd, "co = coroutine.create(function() local v <close> = setmetatable({}, {__close = "
                                "function() closed = true while true do end end}) while true do end end) "
                                "coroutine.resume(co)"),
                     BUDGET_SPENT);
    ck_assert_str_eq(run(g, fd, "return coroutine.status(co)"), "ok:\"dead\"");
    /* closed now, its handler stopped at its first instruction by the budget spent then */
    ck_assert_str_eq(run(g, fd, "return coroutine.close(co)"), "ok:false\n\"console: the statement ran past its instruction budget\"");
    ck_assert_str_eq(run(g, fd, "return closed"), "ok:nil");
    ck_assert_str_eq(run(g, fd, "pcall(coroutine.wrap(function() local v <close> = setmetatable({}, {__close = "
                                "function() while true do end end}) while true do end end))"),
                     BUDGET_SPENT);
    ck_assert_str_eq(run(g, fd, "return 5"), "ok:5");
    close(fd);
    stop_game(g);
}
END_TEST
#endif

#if defined(KLUA_LUAJIT) && KLUA_LUAJIT
START_TEST(luajit_hooks_stay_on_for_every_statement) {
    game *g = start_game();
    int fd = sign_in(g);
    /* a finalizer LuaJIT would run with hooks off, set through a proxy's metatable */
    ck_assert_msg(strstr(run(g, fd, "local p = newproxy(true) getmetatable(p).__gc = function() while true do end end "
                                     "p = nil collectgarbage()"),
                         "newproxy with a metatable is not available"), "newproxy");
    ck_assert_str_eq(run(g, fd, "return 2"), "ok:2");
    /* the game's own hook error, caught inside lua_load, left LuaJIT's hooks off for good:
     * the next statement is counted all the same */
    ck_assert_int_eq(luaL_dostring(g->L, "jit.off() debug.sethook(function() error('stop', 0) end, '', 100) "
                                         "load(function() while true do end end) debug.sethook()"),
                     LUA_OK);
    ck_assert_str_eq(run(g, fd, "while true do end"), BUDGET_SPENT);
    ck_assert_msg(strstr(run(g, fd, "return load(function() return nil end)"),
                         "load with a reader function is not available under LuaJIT"), "load");
    ck_assert_str_eq(run(g, fd, "return load('return 1')()"), "ok:1");
    close(fd);
    stop_game(g);
}
END_TEST
#endif

static Suite *console_escapes_suite(void) {
    Suite *s = suite_create("console_escapes");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, a_budget_spent_inside_a_callback_still_stops_the_loop_after_it);
    tcase_add_test(tc, c_functions_calling_c_functions_stop_at_the_time_limit);
    tcase_add_test(tc, a_statement_s_own_budgets_do_not_replace_its_own);
    tcase_add_test(tc, a_slow_parse_stops_at_the_statement_s_limits);
    tcase_add_test(tc, a_long_save_or_parse_stops_at_the_statement_s_time_limit);
#if !defined(KLUA_LUAJIT) || !KLUA_LUAJIT
    tcase_add_test(tc, a_long_text_is_charged_as_load_reads_it_stopping_at_the_piece_that_spends_the_budget);
    tcase_add_test(tc, a_text_read_in_pieces_is_charged_its_words_as_read_whole);
    tcase_add_test(tc, a_coroutine_the_budget_stopped_closes_its_variables_under_the_budget);
#endif
#if defined(KLUA_LUAJIT) && KLUA_LUAJIT
    tcase_add_test(tc, luajit_hooks_stay_on_for_every_statement);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_suite(console_escapes_suite()); }
