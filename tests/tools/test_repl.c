/* test_repl.c: the `kiln` command end to end: scripts and -e, REPL transcripts through a
 * pipe (printing, errors, :step, :watch, multi-line input), completion and Ctrl-C through a
 * pseudo-terminal, and the token file `--connect` reads. */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln_process.h"
#include "suite_main.h"

/* Whether the kiln command runs LuaJIT (test-jit-tools builds it so): where LuaJIT's own answers
 * differ, the command's do, and a case states both (docs/lua-api.md, LuaJIT). */
static bool kiln_runs_luajit(void) {
    int code;
    const char *args[] = {"kiln", "-e", "io.write(_VERSION)", NULL};
    return strcmp(run(NULL, args, &code), "Lua 5.1") == 0 && code == 0;
}

START_TEST(expressions_print_their_value_and_statements_print_nothing) {
    ck_assert_str_eq(repl("x = 40 + 2\nx\n'a' .. 'b'\n{1, 2, k = 'v'}\n"), "42\n\"ab\"\n{1, 2, k = \"v\"}\n");
}
END_TEST

/* Piped, what a statement prints goes out byte for byte: past a NUL byte too (everything after
 * one was lost, the values printed after it as well). */
START_TEST(printed_nul_bytes_and_what_follows_them_go_out_piped) {
    const char *out = repl("print('before\\0after', 42)\n");
    static const char want[] = "before\0after\t42\n";
    ck_assert_msg(run_length == sizeof want - 1 && memcmp(out, want, run_length) == 0, "%zu bytes: %s", run_length, out);
}
END_TEST

START_TEST(an_entity_prints_with_its_components) {
    const char *out = repl("world:component('Position', 'float x, y;')\n"
                           "world:component('Frozen')\n"
                           "e = world:spawn{Position = {x = 1.5, y = -2}, Frozen = true}\n"
                           "e\nworld:despawn(e)\ne\n");
    ck_assert_str_eq(out, "5\n6\n"
                          "entity 0v1 (alive, 2 components)\n  Frozen\n  Position { x = 1.5, y = -2 }\n"
                          "4294967296\n");
}
END_TEST

/* LuaJIT has no integer subtype (10 / 2 is the number 5, read back so) and no math.mininteger. */
START_TEST(numbers_print_so_they_read_back_exactly) {
    bool jit = kiln_runs_luajit(); /* first: it runs kiln, whose output takes the one buffer */
    ck_assert_str_eq(repl("12345.678\n2^53\n0.1 + 0.2\n10 / 2\n1 / 0\n-1 / 0\nmath.mininteger\n5000000000\n"),
                     jit ? "12345.678\n9007199254740992.0\n0.30000000000000004\n5\n"
                           "math.huge\n-math.huge\nnil\n5000000000\n"
                         : "12345.678\n9007199254740992.0\n0.30000000000000004\n5.0\n"
                           "math.huge\n-math.huge\nmath.mininteger\n5000000000\n");
}
END_TEST

START_TEST(only_live_entities_print_as_handles_and_handles_read_back) {
    const char *out = repl("world:component('Link', 'entity to;')\n"
                           "a = world:spawn{}\nb = world:spawn{Link = {to = a}}\n"
                           "world:entities()\n{first = a, n = 5000000000}\n"
                           "kiln.entity('1v1') == b\n"
                           "world:despawn(a)\nb\nworld:entities()\n"
                           "kiln.entity('1 v1')\n");
    ck_assert_ptr_nonnull(strstr(out, "{0v1, 1v1}\n{first = 0v1, n = 5000000000}\ntrue\n"));
    ck_assert_ptr_nonnull(strstr(out, "entity 1v1 (alive, 1 components)\n  Link { to = 0v1 (dead) }\n{1v1}\n"));
    ck_assert_ptr_nonnull(strstr(out, "bad argument #1 to 'kiln.entity' (handle text like \"12v3\" expected, got \"1 v1\")"));
}
END_TEST

START_TEST(a_query_prints_as_a_table_capped_with_a_more_line) {
    const char *out = repl("world:component('P', 'int32 n;')\n"
                           "for i = 1, 25 do world:spawn{P = {n = i}} end\n"
                           "world:query{'P'}\n");
    ck_assert_ptr_nonnull(strstr(out, "entity  P.n\n------  ---\n0v1     1\n"));
    ck_assert_ptr_nonnull(strstr(out, "19v1    20\n... 5 more\n"));
}
END_TEST

START_TEST(a_component_prints_its_schema_and_systems_print_as_a_table) {
    const char *out = repl("world:component('Health', 'int32 hp, max;')\n"
                           "world:component_info('Health')\n"
                           "world:system{name = 'regen', writes = {'Health'}, run = function() end}\n"
                           ":step 2\n:systems\n");
    ck_assert_ptr_nonnull(strstr(out, "component Health (8 bytes): int32 hp; int32 max;\n"));
    ck_assert_ptr_nonnull(strstr(out, "system  stage  kind  enabled  runs"));
    ck_assert_ptr_nonnull(strstr(out, "regen   0      lua   yes      2"));
}
END_TEST

START_TEST(errors_print_a_message_and_traceback_and_the_repl_goes_on) {
    bool jit = kiln_runs_luajit();
    const char *out = repl("error('boom')\ndo error('bang') end\nnil + 1\n1 +\n2\nprint('still here')\n");
    /* an expression runs as `return error('boom')`, a tail call: Lua 5.4 keeps the chunk's frame
     * for one into C, LuaJIT drops it, and with it the position and the traceback's main chunk */
    const char *first = jit ? "boom\nstack traceback:\n" : "stdin:1: boom\nstack traceback:\n";
    ck_assert_msg(strncmp(out, first, strlen(first)) == 0, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "stdin:1: bang\nstack traceback:\n\t[C]: in function 'error'\n\tstdin:1: in "));
    ck_assert_ptr_nonnull(strstr(out, "attempt to perform arithmetic on a nil value"));
    ck_assert_ptr_nonnull(strstr(out, "\n3\nstill here\n"));
}
END_TEST

START_TEST(step_runs_the_schedule_and_watch_prints_after_every_step) {
    const char *out = repl("world:component('C', 'int32 n;')\n"
                           "e = world:spawn{C = {n = 0}}\n"
                           "world:system{name = 'inc', writes = {'C'}, query = {'C'}, each = function(e, c) c.n = c.n + 1 end}\n"
                           ":watch world:get(e, 'C').n\n:step\n:step 3\n:watch\n:unwatch 1\n:step\n");
    ck_assert_ptr_nonnull(strstr(out, "watching [1] world:get(e, 'C').n\n"));
    ck_assert_ptr_nonnull(strstr(out, "[1] world:get(e, 'C').n = 1\ntick 2, 1 entities\n"));
    ck_assert_ptr_nonnull(strstr(out, "[1] world:get(e, 'C').n = 4\ntick 5, 1 entities\n"));
    ck_assert_ptr_nonnull(strstr(out, "[1] world:get(e, 'C').n\nremoved\ntick 6, 1 entities\n"));
}
END_TEST

START_TEST(commands_help_stats_load_and_quit) {
    char path[] = "/tmp/kiln_load_XXXXXX";
    int fd = mkstemp(path);
    const char *code = "loaded = (loaded or 0) + 1\n";
    ck_assert_int_eq(write(fd, code, strlen(code)), (ssize_t)strlen(code));
    close(fd);
    char input[512];
    snprintf(input, sizeof input,
             ":help\n:stats\n:load %s\nloaded\n:bogus\n"
             "world:component('Big', 'float v[64];')\nfor i = 1, 20000 do world:spawn{Big = {}} end\n:stats\n"
             ":quit\nprint('not reached')\n", path);
    const char *out = repl(input);
    unlink(path);
    ck_assert_ptr_nonnull(strstr(out, ":step [n]"));
    ck_assert_ptr_nonnull(strstr(out, "entities   0\n"));
    const char *memory = strstr(out, "\nmemory     ");
    ck_assert_ptr_nonnull(memory);
    double amount;
    char unit[8];
    ck_assert_int_eq(sscanf(memory, "\nmemory %lf %7s", &amount, unit), 2);
    ck_assert_str_eq(unit, "KiB");
    ck_assert(amount >= 1 && amount < 1024);
    memory = strstr(memory + 1, "\nmemory     "); /* 20000 entities of 256 bytes */
    ck_assert_ptr_nonnull(memory);
    ck_assert_int_eq(sscanf(memory, "\nmemory %lf %7s", &amount, unit), 2);
    ck_assert_str_eq(unit, "MiB");
    ck_assert(amount >= 4.8 && amount < 1024);
    ck_assert_ptr_nonnull(strstr(out, "\n1\nunknown command :bogus"));
    ck_assert_ptr_null(strstr(out, "not reached"));
}
END_TEST

START_TEST(scripts_and_e_run_like_lua_and_keep_their_globals_with_i) {
    char path[] = "/tmp/kiln_script_XXXXXX";
    int fd = mkstemp(path);
    const char *code = "print('args', ...)\nw = kiln.world()\nfrom_script = 7\n";
    ck_assert_int_eq(write(fd, code, strlen(code)), (ssize_t)strlen(code));
    close(fd);
    int exit_code;
    const char *a1[] = {"kiln", path, "one", "two", NULL};
    ck_assert_str_eq(run(NULL, a1, &exit_code), "args\tone\ttwo\n");
    ck_assert_int_eq(exit_code, 0);
    const char *a2[] = {"kiln", "-e", "print(1 + 1)", NULL};
    ck_assert_str_eq(run(NULL, a2, &exit_code), "2\n");
    const char *a3[] = {"kiln", "-e", "error('bad')", NULL};
    ck_assert_ptr_nonnull(strstr(run(NULL, a3, &exit_code), "bad"));
    ck_assert_int_eq(exit_code, 1);
    const char *a4[] = {"kiln", "-i", path, NULL};
    ck_assert_str_eq(run("from_script\nworld == w\n", a4, &exit_code),
                     "args\nworld: the global `w` (0 entities)\n7\ntrue\n");
    unlink(path);
}
END_TEST

/* Writes code to a temporary script; returns its path (static buffer). */
static const char *script(const char *code) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/kiln_script_XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, code, strlen(code)), (ssize_t)strlen(code));
    close(fd);
    return path;
}

START_TEST(a_binary_chunk_is_refused_as_a_script) {
    /* string.dump output: bytecode is never loaded from a file (it can crash the VM) */
    const char *dump = script("local f = assert(io.open(arg[1], 'wb'))\n"
                              "f:write(string.dump(load('print(\"ran\")')))\nf:close()\n");
    char dumped[64];
    snprintf(dumped, sizeof dumped, "%s.out", dump);
    int exit_code;
    const char *a1[] = {"kiln", dump, dumped, NULL};
    run(NULL, a1, &exit_code);
    ck_assert_int_eq(exit_code, 0);
    const char *a2[] = {"kiln", dumped, NULL};
    bool jit = kiln_runs_luajit(); /* refused alike, in the loader's own words */
    const char *out = run(NULL, a2, &exit_code);
    ck_assert_ptr_nonnull(strstr(out, jit ? "kiln: attempt to load chunk with wrong mode"
                                          : "kiln: attempt to load a binary chunk (mode is 't')"));
    ck_assert_ptr_null(strstr(out, "ran"));
    ck_assert_int_eq(exit_code, 1);
    unlink(dumped);
    unlink(dump);
}
END_TEST

START_TEST(i_opens_on_the_world_the_script_made_and_says_which) {
    int exit_code;
    const char *returned = script("local w = kiln.world()\nw:spawn()\nw:spawn()\nreturn w\n");
    const char *a1[] = {"kiln", "-i", returned, NULL};
    ck_assert_str_eq(run("world:count()\n", a1, &exit_code), "world: the one the script returned (2 entities)\n2\n");
    unlink(returned);
    const char *own = script("world = kiln.world()\nworld:spawn()\nother = kiln.world()\n");
    const char *a2[] = {"kiln", "-i", own, NULL};
    ck_assert_str_eq(run("world:count()\n", a2, &exit_code), "world: the global `world` (1 entities)\n1\n");
    unlink(own);
    const char *two = script("a = kiln.world()\nb = kiln.world()\na:spawn()\n");
    const char *a3[] = {"kiln", "-i", two, NULL};
    ck_assert_str_eq(run("world:count()\n", a3, &exit_code),
                     "world: a new, empty one (`a`, `b` hold worlds: set `world` to the one you want)\n0\n");
    unlink(two);
    const char *a4[] = {"kiln", "-e", "return kiln.world()", "-i", NULL};
    ck_assert_str_eq(run("world:count()\n", a4, &exit_code), "world: the one the script returned (0 entities)\n0\n");
}
END_TEST

START_TEST(run_steps_at_the_rate_it_is_given) {
    int exit_code;
    const char *args[] = {"kiln", NULL};
    step steps[] = {{0, 0, ":run 20\n", NULL}, {1000, 0, "\nworld:tick()\n", NULL}};
    const char *out = run_steps(steps, 2, args, &exit_code);
    ck_assert_ptr_nonnull(strstr(out, "running at 20 frames per second"));
    const char *after = strstr(out, "paused\n");
    ck_assert_ptr_nonnull(after);
    int tick = 0;
    ck_assert_int_eq(sscanf(after, "paused\n%d", &tick), 1);
    /* one second at 20 frames per second (60 would be the default rate) */
    ck_assert_msg(tick >= 5 && tick <= 36, "tick %d after one second at 20 fps", tick);
}
END_TEST

START_TEST(ctrl_c_while_waiting_for_input_drops_the_statement_and_the_repl_goes_on) {
    int exit_code;
    const char *args[] = {"kiln", NULL};
    /* Ctrl-C once kiln runs (it printed "ready") and has had time to read the next line */
    step steps[] = {{0, 0, "print('ready')\nfor i = 1, 2 do\n", NULL}, {300, SIGINT, NULL, "ready\n"},
                    {300, 0, "print('fresh')\n", NULL}};
    const char *out = run_steps(steps, 3, args, &exit_code);
    ck_assert_int_eq(exit_code, 0);
    ck_assert_str_eq(out, "ready\nfresh\n");
}
END_TEST

/* ---- through a pseudo-terminal ------------------------------------------------------- */

/* A kiln in a terminal with the history file given; with file_limit, under that file size
 * limit (ulimit -f) and with SIGXFSZ ignored, so a write past it fails (EFBIG). */
static pid_t spawn_pty_limited(int *master, const char *history, rlim_t file_limit) {
    pid_t pid = forkpty(master, NULL, NULL, NULL);
    if (pid == 0) {
        setenv("KILN_HISTORY", history, 1);
        setenv("TERM", "dumb", 1);
        if (file_limit) {
            signal(SIGXFSZ, SIG_IGN);
            if (setrlimit(RLIMIT_FSIZE, &(struct rlimit){file_limit, file_limit}) != 0) _exit(126);
        }
        execl(KILN_BIN_PATH, "kiln", (char *)NULL);
        _exit(127);
    }
    return pid;
}

static pid_t spawn_pty_history(int *master, const char *history) { return spawn_pty_limited(master, history, 0); }

static pid_t spawn_pty(int *master) { return spawn_pty_history(master, "/dev/null"); }

static void type_text(int fd, const char *text) {
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
}

/* Reads from the pty until want appears (or a timeout); returns whether it did. */
static bool expect(int fd, const char *want, char *seen, size_t size) {
    size_t have = strlen(seen);
    for (int spin = 0; spin < 300; spin++) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 20) > 0) {
            ssize_t r = read(fd, seen + have, size - have - 1);
            if (r > 0) {
                have += (size_t)r;
                seen[have] = '\0';
            }
        }
        if (strstr(seen, want)) return true;
    }
    return false;
}

START_TEST(tab_completes_methods_and_component_names_in_a_terminal) {
    int master;
    pid_t pid = spawn_pty(&master);
    char seen[1 << 14] = "";
    ck_assert_msg(expect(master, "> ", seen, sizeof seen), "no prompt: %s", seen);
    const char *define = "world:component('Velocity', 'float x, y;')\n";
    ck_assert_int_eq(write(master, define, strlen(define)), (ssize_t)strlen(define));
    ck_assert(expect(master, "> ", seen, sizeof seen));
    seen[0] = '\0';
    ck_assert_int_eq(write(master, "world:desp\t", 11), 11);
    ck_assert_msg(expect(master, "world:despawn", seen, sizeof seen), "method not completed: %s", seen);
    ck_assert_int_eq(write(master, "\x15", 1), 1); /* clear the line */
    seen[0] = '\0';
    const char *partial = "world:has(1, \"Vel\t";
    ck_assert_int_eq(write(master, partial, strlen(partial)), (ssize_t)strlen(partial));
    ck_assert_msg(expect(master, "Velocity", seen, sizeof seen), "component not completed: %s", seen);
    ck_assert_int_eq(write(master, "\x15:quit\n", 7), 7);
    int status;
    waitpid(pid, &status, 0);
    close(master);
}
END_TEST

/* What a statement prints (or a mod's log, or a console's answer) may hold escape sequences:
 * in a terminal they show as escapes instead of retitling the window, moving the cursor or
 * writing the clipboard; colours pass. */
/* Completion offers no name that would put a control character on the line: neither a C0
 * control nor a C1 one (UTF-8 0xC2 0x80-0x9F), which a terminal obeys too. */
START_TEST(completion_offers_no_name_holding_a_control_character) {
    int master;
    pid_t pid = spawn_pty(&master);
    char seen[1 << 14] = "";
    ck_assert(expect(master, "> ", seen, sizeof seen));
    type_text(master, "t = {['ok_\\194\\133x'] = 1, ['ok_\\27x'] = 2, ok_plain = 3}\n");
    ck_assert(expect(master, "> ", seen, sizeof seen));
    seen[0] = '\0';
    type_text(master, "t.ok_\t");
    ck_assert_msg(expect(master, "t.ok_plain", seen, sizeof seen), "not completed to the one plain name: %s", seen);
    type_text(master, "\n");
    ck_assert_msg(expect(master, "3\r\n", seen, sizeof seen), "%s", seen);
    seen[0] = '\0';
    type_text(master, "print('a\\0b')\n"); /* and a NUL byte shows as an escape, with what follows */
    ck_assert_msg(expect(master, "a\\0b\r\n", seen, sizeof seen), "%s", seen);
    type_text(master, ":quit\n");
    int status;
    waitpid(pid, &status, 0);
    close(master);
}
END_TEST

START_TEST(printed_control_characters_show_in_a_terminal_and_colours_pass) {
    int master;
    pid_t pid = spawn_pty(&master);
    char seen[1 << 14] = "";
    ck_assert(expect(master, "> ", seen, sizeof seen));
    type_text(master, "local c = string.char print('p' .. c(27) .. ']0;owned' .. c(7) .. 'q' .. c(27) .. "
                      "'[31mred' .. c(27) .. '[0m', c(194, 155) .. '1' .. c(8) .. 'end')\n");
    const char *want = "p\\27]0;owned\\7q\x1b[31mred\x1b[0m\t\\194\\1551\\8end";
    ck_assert_msg(expect(master, want, seen, sizeof seen), "not shown escaped: %s", seen);
    ck_assert_msg(!strstr(seen, "\x1b]0;owned"), "the terminal got the title sequence: %s", seen);
    type_text(master, ":quit\n");
    int status;
    waitpid(pid, &status, 0);
    close(master);
}
END_TEST

/* Sends statement to a REPL in a terminal, Ctrl-C once it runs, then after, whose output must
 * show want: the REPL goes on, and what the interrupted statement left is as it should be. */
static void interrupt_then(const char *statement, const char *after, const char *want) {
    int master;
    pid_t pid = spawn_pty(&master);
    char seen[1 << 14] = "";
    ck_assert(expect(master, "> ", seen, sizeof seen));
    ck_assert_int_eq(write(master, statement, strlen(statement)), (ssize_t)strlen(statement));
    struct timespec ts = {0, 200000000};
    nanosleep(&ts, NULL);
    kill(pid, SIGINT);
    ck_assert_msg(expect(master, "interrupted", seen, sizeof seen), "not interrupted: %s", seen);
    seen[0] = '\0';
    ck_assert_int_eq(write(master, after, strlen(after)), (ssize_t)strlen(after));
    ck_assert_msg(expect(master, want, seen, sizeof seen), "no '%s': %s", want, seen);
    ck_assert_int_eq(write(master, ":quit\n", 6), 6);
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(master);
}

START_TEST(ctrl_c_interrupts_a_runaway_statement_without_killing_the_repl) {
    interrupt_then("while true do end\n", "print('alive' .. 1)\n", "alive1");
}
END_TEST

/* The loop's closing value (C) must end its iteration as the error unwinds, or the world stays
 * deferred and a later spawn only queues: the hook raising at every call stopped it unrun. */
START_TEST(ctrl_c_in_a_query_loop_still_ends_the_loop_and_the_world_is_not_left_deferred) {
    interrupt_then("w = kiln.world(); w:component('P', 'float x;'); w:spawn{P = {x = 1}}; "
                   "for e in w:query{'P'}:each() do while true do end end\n",
                   "print('alive ' .. tostring(w:is_alive(w:spawn{P = {x = 2}})) .. ' ' .. w:count())\n",
                   "alive true 2");
}
END_TEST

/* Lua 5.4 hooks each thread apart: Ctrl-C hooked the REPL's, which waited in a resume while
 * the loop ran on in the coroutine, made by an earlier statement or by this one (through
 * wrap, inside another coroutine, a pcall swallowing the first stop). */
START_TEST(ctrl_c_stops_a_loop_in_a_coroutine_made_before_it_or_by_the_statement) {
    interrupt_then("co = coroutine.create(function() while true do end end)\nprint(coroutine.resume(co))\n",
                   "print('alive' .. 3, coroutine.status(co))\n", "alive3\tdead");
    interrupt_then("coroutine.wrap(function() coroutine.wrap(function() while true do pcall(function() "
                   "while true do end end) end end)() end)()\n", "print('alive' .. 4)\n", "alive4");
}
END_TEST

/* A statement resuming a coroutine through the library's own resume (kept from the replaced one's upvalue), which
 * resumes another through the REPL's, left the handler pointing at the first once it ended: collected, Ctrl-C
 * hooked freed memory, and the loop after it ran on. (LuaJIT's resume is the library's, with no upvalue.) */
START_TEST(ctrl_c_after_a_coroutine_the_library_resume_ran_still_stops_the_statement) {
    interrupt_then("local _, resume = debug.getupvalue(coroutine.resume, 1); resume = resume or coroutine.resume; "
                   "local co = coroutine.create(function() "
                   "coroutine.resume(coroutine.create(function() end)) end); resume(co); co = nil; collectgarbage(); "
                   "collectgarbage(); while true do end\n", "print('alive' .. 5)\n", "alive5");
}
END_TEST

START_TEST(ctrl_c_at_the_prompt_clears_the_line_and_never_ends_the_repl) {
    int master;
    pid_t pid = spawn_pty(&master);
    char seen[1 << 14] = "";
    ck_assert(expect(master, "> ", seen, sizeof seen));
    type_text(master, "half typed");
    ck_assert(expect(master, "half typed", seen, sizeof seen));
    kill(pid, SIGINT);
    ck_assert_msg(expect(master, "^C\r\n> ", seen, sizeof seen), "line not cleared: %s", seen);
    type_text(master, "for i = 1, 2 do\n");
    ck_assert(expect(master, ">> ", seen, sizeof seen));
    kill(pid, SIGINT); /* drops the statement being continued */
    seen[0] = '\0';
    ck_assert(expect(master, "> ", seen, sizeof seen));
    type_text(master, "print('alive' .. 2)\n");
    ck_assert_msg(expect(master, "alive2", seen, sizeof seen), "REPL gone: %s", seen);
    ck_assert_ptr_null(strstr(seen, "half typed"));
    type_text(master, ":quit\n");
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(master);
}
END_TEST

START_TEST(tab_completes_component_names_inside_a_spawn_table) {
    int master;
    pid_t pid = spawn_pty(&master);
    char seen[1 << 14] = "";
    ck_assert(expect(master, "> ", seen, sizeof seen));
    type_text(master, "world:component('Health', 'int32 hp, max;')\n");
    ck_assert(expect(master, "\n> ", seen, sizeof seen));
    seen[0] = '\0';
    type_text(master, "world:spawn{Hea\t");
    ck_assert_msg(expect(master, "world:spawn{Health", seen, sizeof seen), "not completed: %s", seen);
    type_text(master, " = {m\t");
    ck_assert_msg(expect(master, "{Health = {max", seen, sizeof seen), "field not completed: %s", seen);
    type_text(master, " = 3}}\nworld:get(world:entities()[1], 'Health').max\n");
    ck_assert_msg(expect(master, "\n3\r\n", seen, sizeof seen), "spawn failed: %s", seen);
    type_text(master, ":quit\n");
    int status;
    waitpid(pid, &status, 0);
    close(master);
}
END_TEST

/* Runs a terminal session that types lines, then quits or is killed. */
static void history_session(const char *path, const char *const *lines, bool killed) {
    int master;
    pid_t pid = spawn_pty_history(&master, path);
    char seen[1 << 14] = "";
    ck_assert(expect(master, "> ", seen, sizeof seen));
    for (int i = 0; lines[i]; i++) {
        seen[0] = '\0';
        type_text(master, lines[i]);
        type_text(master, "\n");
        ck_assert(expect(master, "> ", seen, sizeof seen));
    }
    if (killed) kill(pid, SIGKILL);
    else type_text(master, ":quit\n");
    int status;
    waitpid(pid, &status, 0);
    close(master);
}

static const char *file_text(const char *path) {
    static char text[4096];
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

START_TEST(history_keeps_each_entry_once_even_after_a_killed_session) {
    char path[] = "/tmp/kiln_history_XXXXXX";
    int fd = mkstemp(path);
    /* a file an older kiln wrote through libedit, with a repeat */
    const char *legacy = "_HiStOrY_V2_\nx\\040=\\0401\nold\nx\\040=\\0401\n";
    ck_assert_int_eq(write(fd, legacy, strlen(legacy)), (ssize_t)strlen(legacy));
    close(fd);
    const char *first[] = {"a = 1", "b = 2", "a = 1", NULL};
    history_session(path, first, true);
    ck_assert_str_eq(file_text(path), "old\nx = 1\nb = 2\na = 1\n");
    const char *second[] = {"b = 2", "c = 3", NULL};
    history_session(path, second, false);
    ck_assert_str_eq(file_text(path), "old\nx = 1\na = 1\nb = 2\nc = 3\n:quit\n");
    unlink(path);
}
END_TEST

/* Waits for the prompt, types text (which ends the session) and checks kiln exited with 0. */
static void type_and_quit(int master, pid_t pid, const char *text) {
    char seen[1 << 14] = "";
    ck_assert_msg(expect(master, "> ", seen, sizeof seen), "no prompt: %s", seen);
    type_text(master, text);
    int status;
    waitpid(pid, &status, 0);
    close(master);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
}

/* The history is rewritten whole when the REPL opens (dropping repeats) and closes: a rewrite
 * that cannot finish (a full disk, a file size limit) leaves the file as it was, not cut at
 * the point the writes failed, and leaves no temporary file behind. */
START_TEST(a_history_rewrite_that_cannot_finish_leaves_the_file_whole) {
    char dir[] = "/tmp/kiln-history-XXXXXX", path[64], text[4096] = "";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/history", dir);
    for (int i = 1; i <= 100; i++) /* 3.5 KiB, past the 1 KiB limit */
        snprintf(text + strlen(text), sizeof text - strlen(text), "print(%d) -- history line %d\n", i, i);
    FILE *f = fopen(path, "w");
    ck_assert(f && fputs(text, f) >= 0 && fclose(f) == 0);
    ck_assert_int_eq(chmod(path, 0600), 0);
    int master;
    pid_t pid = spawn_pty_limited(&master, path, 1024);
    type_and_quit(master, pid, ":quit\n");
    ck_assert_str_eq(file_text(path), text);
    struct stat st;
    ck_assert(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int entries = 0;
    for (struct dirent *de; (de = readdir(d));) entries += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    ck_assert_msg(entries == 1, "%d files in %s: a temporary one was left", entries, dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* KILN_HISTORY naming a pipe: the REPL neither waits for a writer before its first prompt nor
 * for a reader after each line. */
START_TEST(a_history_path_naming_a_pipe_never_blocks_the_repl) {
    char dir[] = "/tmp/kiln-history-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/pipe", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    int master;
    pid_t pid = spawn_pty_history(&master, path);
    type_and_quit(master, pid, "x = 1\n:quit\n");
    unlink(path);
    rmdir(dir);
}
END_TEST

/* A HOME that is empty or relative is no home: the history is kept nowhere, not in / (where
 * root may write) nor in the folder the REPL started in. */
START_TEST(an_empty_or_relative_home_keeps_no_history_file) {
    char dir[] = "/tmp/kiln-home-XXXXXX", path[96];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/rel/.kiln_history", dir);
    bool root_checks = geteuid() == 0 && access("/.kiln_history", F_OK) != 0;
    for (int empty = 0; empty <= root_checks; empty++) {
        int master;
        pid_t pid = forkpty(&master, NULL, NULL, NULL);
        if (pid == 0) {
            unsetenv("KILN_HISTORY");
            setenv("HOME", empty ? "" : "rel", 1);
            setenv("TERM", "dumb", 1);
            if (chdir(dir) != 0 || mkdir("rel", 0700) != 0) _exit(126);
            execl(KILN_BIN_PATH, "kiln", (char *)NULL);
            _exit(127);
        }
        type_and_quit(master, pid, "x = 1\n:quit\n");
        bool made = access(empty ? "/.kiln_history" : path, F_OK) == 0;
        if (empty && made) unlink("/.kiln_history");
        unlink(path);
        char rel[64];
        snprintf(rel, sizeof rel, "%s/rel", dir);
        rmdir(rel);
        ck_assert_msg(!made, "HOME=\"%s\" kept a history file", empty ? "" : "rel");
    }
    rmdir(dir);
    if (!root_checks) printf("an empty HOME: not checked (it needs root, and no /.kiln_history beforehand)\n");
}
END_TEST

/* `kiln --connect` without --token reads the game's token file, which may lie in /tmp where
 * anyone can put something at its name first: a pipe (waiting on it would hang the client),
 * a link, a file open to others or of another user is refused at once, with the reason. */
START_TEST(connect_refuses_a_token_file_that_is_not_the_users_own_private_file) {
    int listener = socket(AF_INET, SOCK_STREAM, 0); /* a "game" that accepts and never answers */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    ck_assert(bind(listener, (struct sockaddr *)&a, sizeof a) == 0 && listen(listener, 8) == 0 &&
              getsockname(listener, (struct sockaddr *)&a, &alen) == 0);
    char dir[] = "/tmp/kiln-token-XXXXXX", path[128], spec[64], victim[160];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("XDG_RUNTIME_DIR", dir, 1);
    snprintf(spec, sizeof spec, "127.0.0.1:%d", ntohs(a.sin_port));
    snprintf(path, sizeof path, "%s/kiln-console-%d.token", dir, ntohs(a.sin_port));
    snprintf(victim, sizeof victim, "%s/private", dir);
    const char *args[] = {"kiln", "--connect", spec, NULL};
    for (int kind = 0; kind < 4; kind++) {
        unlink(path);
        if (kind == 0) ck_assert_int_eq(mkfifo(path, 0600), 0);
        if (kind == 1 || kind == 3) {
            FILE *f = fopen(kind == 1 ? path : victim, "w");
            ck_assert_ptr_nonnull(f);
            fputs("0123456789abcdef0123456789abcdef\n", f);
            fclose(f);
            chmod(kind == 1 ? path : victim, kind == 1 ? 0644 : 0600);
        }
        if (kind == 2) { /* another user's file: only root can make one here */
            if (getuid() != 0) continue;
            FILE *f = fopen(path, "w");
            ck_assert_ptr_nonnull(f);
            fputs("0123456789abcdef0123456789abcdef\n", f);
            fclose(f);
            ck_assert_int_eq(chmod(path, 0600) | chown(path, 1, 1), 0);
        }
        if (kind == 3) ck_assert_int_eq(symlink(victim, path), 0);
        static const char *const why[] = {"not a regular file", "open to other users", "owned by another user",
                                          "Too many levels of symbolic links"};
        int code;
        const char *out = run("", args, &code);
        ck_assert_msg(code == 1 && strstr(out, why[kind]), "kind %d: kiln exited %d: %s", kind, code, out);
    }
    close(listener);
    unlink(path);
    unlink(victim);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* A console that signs the client in, then never answers (a game stalled in a long load, or a
 * hostile one trickling an endless frame): Ctrl-C must still get the user out of the wait
 * for the answer instead of being swallowed by the read. */
START_TEST(ctrl_c_while_an_attached_console_never_answers_ends_the_wait) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    ck_assert(bind(listener, (struct sockaddr *)&a, sizeof a) == 0 && listen(listener, 8) == 0 &&
              getsockname(listener, (struct sockaddr *)&a, &alen) == 0);
    char spec[64];
    snprintf(spec, sizeof spec, "127.0.0.1:%d", ntohs(a.sin_port));
    int in[2], o[2];
    const char *args[] = {"kiln", "--connect", spec, "--token", "0123456789abcdef", NULL};
    pid_t pid = spawn_kiln(args, &in[1], &o[0]);
    int game = accept(listener, NULL, NULL);
    ck_assert_int_ge(game, 0);
    char got[256];
    size_t have = 0;
    while (!memchr(got, '\n', have) && have < sizeof got) { /* the token line */
        ssize_t r = recv(game, got + have, sizeof got - have, 0);
        ck_assert_int_gt(r, 0);
        have += (size_t)r;
    }
    ck_assert_int_eq(send(game, "ok 0\n", 5, MSG_NOSIGNAL), 5);
    ck_assert_int_eq(write(in[1], "1 + 1\n", 6), 6);
    have = 0; /* the line reaches the game, whose answer never comes */
    while (!memchr(got, '\n', have) && have < sizeof got) {
        ssize_t r = recv(game, got + have, sizeof got - have, 0);
        ck_assert_int_gt(r, 0);
        have += (size_t)r;
    }
    ck_assert(have >= 6 && memcmp(got, "1 + 1\n", 6) == 0);
    kill(pid, SIGINT);
    int status = 0;
    bool ended = reap_within(pid, 3000, &status);
    char out[4096];
    ssize_t n = read(o[0], out, sizeof out - 1);
    out[n > 0 ? n : 0] = '\0';
    close(in[1]);
    close(o[0]);
    close(game);
    close(listener);
    ck_assert_msg(ended, "kiln was still waiting for the answer 3 s after Ctrl-C");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(out, "console connection closed"),
                  "kiln ended with status %d: %s", status, out);
}
END_TEST

/* A world's instruction budget bounds a system whatever it runs, a pcall in a loop included,
 * and Ctrl-C must not take that away: its hook replaced the budget's and removed itself at its
 * one error, which the pcall swallowed, so the loop ran on with no hook at all, for good. */
START_TEST(ctrl_c_in_a_budgeted_system_that_swallows_errors_still_ends_it) {
    const char *path = script("local w = kiln.world{instructions = 4000000000}\n"
                              "w:system{name = 'spin', run = function()\n"
                              "  while true do\n"
                              "    pcall(function() print('ready'); io.stdout:flush(); while true do end end)\n"
                              "  end\n"
                              "end}\n"
                              "local ok, failures = w:progress()\n"
                              "print('ended', ok, failures[1].message)\n");
    int in, from;
    const char *args[] = {"kiln", path, NULL};
    pid_t pid = spawn_kiln(args, &in, &from);
    char out[4096] = "";
    size_t have = 0;
    ssize_t r;
    while (!strstr(out, "ready\n") && (r = read(from, out + have, sizeof out - have - 1)) > 0)
        out[have += (size_t)r] = '\0';
    kill(pid, SIGINT);
    int status = 0;
    bool ended = reap_within(pid, 10000, &status);
    while ((r = read(from, out + have, sizeof out - have - 1)) > 0) out[have += (size_t)r] = '\0';
    close(in);
    close(from);
    unlink(path);
    ck_assert_msg(ended, "the system still ran 10 s after Ctrl-C, its budget gone: %s", out);
    ck_assert_msg(strstr(out, "ended\tfalse\t") && strstr(out, "interrupted"), "not interrupted: %s", out);
}
END_TEST

static Suite *repl_suite(void) {
    Suite *s = suite_create("repl");
    TCase *pipe_case = tcase_create("transcripts");
    tcase_set_timeout(pipe_case, 30);
    tcase_add_test(pipe_case, expressions_print_their_value_and_statements_print_nothing);
    tcase_add_test(pipe_case, an_entity_prints_with_its_components);
    tcase_add_test(pipe_case, printed_nul_bytes_and_what_follows_them_go_out_piped);
    tcase_add_test(pipe_case, a_query_prints_as_a_table_capped_with_a_more_line);
    tcase_add_test(pipe_case, a_component_prints_its_schema_and_systems_print_as_a_table);
    tcase_add_test(pipe_case, errors_print_a_message_and_traceback_and_the_repl_goes_on);
    tcase_add_test(pipe_case, step_runs_the_schedule_and_watch_prints_after_every_step);
    tcase_add_test(pipe_case, commands_help_stats_load_and_quit);
    tcase_add_test(pipe_case, scripts_and_e_run_like_lua_and_keep_their_globals_with_i);
    tcase_add_test(pipe_case, numbers_print_so_they_read_back_exactly);
    tcase_add_test(pipe_case, only_live_entities_print_as_handles_and_handles_read_back);
    tcase_add_test(pipe_case, i_opens_on_the_world_the_script_made_and_says_which);
    tcase_add_test(pipe_case, a_binary_chunk_is_refused_as_a_script);
    tcase_add_test(pipe_case, run_steps_at_the_rate_it_is_given);
    tcase_add_test(pipe_case, ctrl_c_while_waiting_for_input_drops_the_statement_and_the_repl_goes_on);
    tcase_add_test(pipe_case, connect_refuses_a_token_file_that_is_not_the_users_own_private_file);
    tcase_add_test(pipe_case, ctrl_c_while_an_attached_console_never_answers_ends_the_wait);
    tcase_add_test(pipe_case, ctrl_c_in_a_budgeted_system_that_swallows_errors_still_ends_it);
    suite_add_tcase(s, pipe_case);
    TCase *tty_case = tcase_create("terminal");
    tcase_set_timeout(tty_case, 30);
    tcase_add_test(tty_case, tab_completes_methods_and_component_names_in_a_terminal);
    tcase_add_test(tty_case, printed_control_characters_show_in_a_terminal_and_colours_pass);
    tcase_add_test(tty_case, completion_offers_no_name_holding_a_control_character);
    tcase_add_test(tty_case, ctrl_c_interrupts_a_runaway_statement_without_killing_the_repl);
    tcase_add_test(tty_case, ctrl_c_in_a_query_loop_still_ends_the_loop_and_the_world_is_not_left_deferred);
    tcase_add_test(tty_case, ctrl_c_stops_a_loop_in_a_coroutine_made_before_it_or_by_the_statement);
    tcase_add_test(tty_case, ctrl_c_after_a_coroutine_the_library_resume_ran_still_stops_the_statement);
    tcase_add_test(tty_case, ctrl_c_at_the_prompt_clears_the_line_and_never_ends_the_repl);
    tcase_add_test(tty_case, tab_completes_component_names_inside_a_spawn_table);
    tcase_add_test(tty_case, history_keeps_each_entry_once_even_after_a_killed_session);
    tcase_add_test(tty_case, a_history_rewrite_that_cannot_finish_leaves_the_file_whole);
    tcase_add_test(tty_case, an_empty_or_relative_home_keeps_no_history_file);
    tcase_add_test(tty_case, a_history_path_naming_a_pipe_never_blocks_the_repl);
    suite_add_tcase(s, tty_case);
    return s;
}

int main(void) { return run_suite(repl_suite()); } /* SIGPIPE ignored: a kiln that died fails a check */
