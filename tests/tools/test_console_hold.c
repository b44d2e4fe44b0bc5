/* test_console_hold.c: a console the host closes or polls again from inside one of its
 * statements, and two consoles on one state whose statements call into each other. */
#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "console_fixture.h"

/* A game with up to two consoles on its state: `console` served every frame, `other` too
 * while open. Its Lua globals poll_again, close_console, poll_other, close_other and
 * open_other do what they say, as a host's functions might when a statement calls them. */
typedef struct game {
    lua_State *L;
    kiln_console *console, *other;
} game;

static game *current_game(lua_State *L) { return lua_touserdata(L, lua_upvalueindex(1)); }

static int poll_again(lua_State *L) {
    lua_pushinteger(L, kiln_console_poll(current_game(L)->console));
    return 1;
}

static int close_console(lua_State *L) {
    game *g = current_game(L);
    kiln_console_close(g->console);
    g->console = NULL; /* the host lets go of it; the poll running ends it */
    return 0;
}

static int poll_other(lua_State *L) {
    lua_pushinteger(L, kiln_console_poll(current_game(L)->other));
    return 1;
}

static int close_other(lua_State *L) {
    game *g = current_game(L);
    kiln_console_close(g->other);
    g->other = NULL;
    return 0;
}

static kiln_console *open_console(game *g, int64_t budget) {
    return must_open_console(g->L, (kiln_console_desc){.budget = budget});
}

static int open_other(lua_State *L) {
    game *g = current_game(L);
    g->other = open_console(g, 1000000);
    return 0;
}

static game *start_game(bool two) {
    game *g = calloc(1, sizeof *g);
    g->L = game_state("world = kiln.world() world:component('P', 'float x;') world:spawn{P = {}}");
    static const luaL_Reg fns[] = {{"poll_again", poll_again}, {"close_console", close_console},
                                   {"poll_other", poll_other}, {"close_other", close_other},
                                   {"open_other", open_other},  {NULL, NULL}};
    for (const luaL_Reg *f = fns; f->name; f++) {
        lua_pushlightuserdata(g->L, g);
        lua_pushcclosure(g->L, f->func, 1);
        lua_setglobal(g->L, f->name);
    }
    g->console = open_console(g, 1000000);
    if (two) g->other = open_console(g, 1000000);
    return g;
}

static void stop_game(game *g) {
    kiln_console_close(g->console);
    kiln_console_close(g->other);
    lua_close(g->L);
    free(g);
}

/* One frame: the world advances, then each open console is served. */
static void frame(void *game_) {
    game *g = game_;
    ck_assert_int_eq(luaL_dostring(g->L, "world:progress(1/60)"), LUA_OK);
    if (g->console) kiln_console_poll(g->console);
    if (g->other) kiln_console_poll(g->other);
}

/* Runs frames until count answer frames arrived on fd, or it closed; returns them as
 * "status:text|status:text|", then "closed" when the console closed the connection. */
static char *answers(game *g, int fd, int count) {
    static frames f;
    static char out[1 << 14];
    wait_answers(frame, g, fd, count, 3000, &f, out, sizeof out, "|");
    if (f.closed) strncat(out, "closed", sizeof out - strlen(out) - 1);
    return out;
}

static int sign_in(game *g, kiln_console *c) {
    int fd = connect_with_token(c);
    ck_assert_str_eq(answers(g, fd, 1), "ok:|");
    return fd;
}

/* The statement budget is kiln_console_desc.instructions, as every other budget is named;
 * budget, its older name, is the same field, so a host written against it keeps working. */
START_TEST(the_statement_budget_is_set_by_instructions_or_its_older_name_budget) {
    for (int k = 0; k < 3; k++) {
        game *g = start_game(false);
        kiln_console_close(g->console);
        kiln_console_desc d = {0};
        if (k == 0) d.instructions = 100000;
        if (k == 1) d.budget = 100000; /* k == 2: the default, 100 million */
        g->console = must_open_console(g->L, d);
        int fd = sign_in(g, g->console);
        send_text(fd, "local n = 0 for i = 1, 200000 do n = n + 1 end return n\n");
        const char *a = answers(g, fd, 1);
        if (k < 2)
            ck_assert_msg(strstr(a, "error:console: the statement ran past its instruction budget") == a, "%d: %s", k, a);
        else
            ck_assert_str_eq(a, "ok:200000|");
        close(fd);
        stop_game(g);
    }
}
END_TEST

START_TEST(a_statement_polling_its_own_console_serves_nothing_inside) {
    game *g = start_game(false);
    int fd = sign_in(g, g->console);
    /* both lines arrive before the poll: the second must wait for the first to end */
    send_text(fd, "inside = poll_again() return inside\nreturn 'second'\n");
    ck_assert_str_eq(answers(g, fd, 2), "ok:0|ok:\"second\"|");
    close(fd);
    stop_game(g);
}
END_TEST

START_TEST(a_statement_closing_its_console_ends_the_poll_then_the_console) {
    game *g = start_game(false);
    int port = kiln_console_port(g->console);
    int fd = sign_in(g, g->console);
    int bystander = sign_in(g, g->console);
    send_text(bystander, "return 1\n");
    send_text(fd, "close_console() after = 'ran'\nsecond = 'ran'\n");
    ck_assert_str_eq(answers(g, fd, 1), "closed"); /* its answer went with the console */
    ck_assert_ptr_null(g->console);
    ck_assert_str_eq(game_eval(g->L, "after"), "ran"); /* the statement itself finished */
    ck_assert_str_eq(game_eval(g->L, "second"), "nil");
    ck_assert_int_lt(connect_port(port), 0);          /* nobody listens any more */
    ck_assert_str_eq(game_eval(g->L, "world:count()"), "1"); /* the game runs on */
    close(fd);
    close(bystander);
    stop_game(g);
}
END_TEST

START_TEST(a_statement_polling_another_console_keeps_its_own_budget) {
    game *g = start_game(true);
    int fd = sign_in(g, g->console);
    int other = sign_in(g, g->other);
    send_text(other, "return 'served inside'\n");
    send_text(fd, "poll_other() while true do end\nreturn 3\n");
    char *a = answers(g, fd, 2);
    ck_assert_msg(strcmp(a, "error:console: the statement ran past its instruction budget|ok:3|") == 0, "%s", a);
    ck_assert_str_eq(answers(g, other, 1), "ok:\"served inside\"|");
    close(fd);
    close(other);
    stop_game(g);
}
END_TEST

START_TEST(a_statement_closing_another_console_keeps_its_own_budget) {
    game *g = start_game(true);
    int fd = sign_in(g, g->console);
    int other = sign_in(g, g->other);
    send_text(fd, "close_other() while true do end\nreturn 3\n");
    char *a = answers(g, fd, 2);
    ck_assert_msg(strcmp(a, "error:console: the statement ran past its instruction budget|ok:3|") == 0, "%s", a);
    ck_assert_ptr_null(g->other);
    close(fd);
    close(other);
    stop_game(g);
}
END_TEST

START_TEST(a_console_opened_inside_a_statement_keeps_that_statements_budget) {
    game *g = start_game(false);
    int fd = sign_in(g, g->console);
    send_text(fd, "open_other() while true do end\nreturn 3\n");
    char *a = answers(g, fd, 2);
    ck_assert_msg(strcmp(a, "error:console: the statement ran past its instruction budget|ok:3|") == 0, "%s", a);
    ck_assert_ptr_nonnull(g->other);
    close(fd);
    stop_game(g);
}
END_TEST

static void count_fd_limit_reports(void *user, const char *message) {
    if (strstr(message, "cannot accept a client") && strstr(message, "most open files")) ++*(int *)user;
}

/* Out of descriptors, accept fails and the client waits in the listen queue: the host hears
 * of it once for the burst (not once a poll), and the client gets in once a descriptor frees. */
START_TEST(a_console_out_of_descriptors_reports_it_once_and_accepts_when_one_frees) {
    int reports = 0;
    game *g = calloc(1, sizeof *g);
    g->L = game_state("world = kiln.world()");
    g->console = must_open_console(g->L, (kiln_console_desc){.log = count_fd_limit_reports, .log_user = &reports});
    int fd = connect_with_token(g->console); /* queued by the kernel: nothing accepted it yet */
    struct rlimit old;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
    struct rlimit low = old;
    low.rlim_cur = 256;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    int fill[256], filled = 0;
    for (int d; filled < 256 && (d = dup(0)) >= 0; filled++) fill[filled] = d;
    ck_assert_int_eq(errno, EMFILE);
    for (int k = 0; k < 5; k++) kiln_console_poll(g->console);
    ck_assert_int_eq(reports, 1);
    for (int i = 0; i < filled; i++) close(fill[i]);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
    ck_assert_str_eq(answers(g, fd, 1), "ok:|");
    ck_assert_int_eq(reports, 1);
    close(fd);
    stop_game(g);
}
END_TEST

static Suite *hold_suite(void) {
    Suite *s = suite_create("console_hold");
    TCase *tc = tcase_create("callbacks");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, the_statement_budget_is_set_by_instructions_or_its_older_name_budget);
    tcase_add_test(tc, a_statement_polling_its_own_console_serves_nothing_inside);
    tcase_add_test(tc, a_statement_closing_its_console_ends_the_poll_then_the_console);
    tcase_add_test(tc, a_statement_polling_another_console_keeps_its_own_budget);
    tcase_add_test(tc, a_statement_closing_another_console_keeps_its_own_budget);
    tcase_add_test(tc, a_console_opened_inside_a_statement_keeps_that_statements_budget);
    tcase_add_test(tc, a_console_out_of_descriptors_reports_it_once_and_accepts_when_one_frees);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_suite(hold_suite()); }
