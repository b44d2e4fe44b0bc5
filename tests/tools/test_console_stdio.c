/* test_console_stdio.c: a console in the process a game runs in: one started with stdout and
 * stderr closed (by a launcher or a daemon wrapper), whose sockets never take descriptors 0
 * to 2, which the game's printing still writes to; one that forks a helper, which inherits
 * none of its descriptors (nor of `kiln --connect`'s or its history's) when it runs another
 * program; and its accept seen from inside, failing as a signal or a reset makes it fail. */
#define _DEFAULT_SOURCE /* syscall (not _GNU_SOURCE: that makes accept take a union) */
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "console_fixture.h"

#define TOKEN "0123456789abcdef0123"

static bool free_fd(int fd) { return fcntl(fd, F_GETFD) == -1 && errno == EBADF; }

/* The game, in a child with 1 and 2 closed; its exit code says what went wrong (0: nothing). */
static int closed_stdio_game(void) {
    close(STDOUT_FILENO);
    close(STDERR_FILENO);
    lua_State *L = game_state("x = 41");
    char err[256];
    kiln_console *c = kiln_console_open(L, &(kiln_console_desc){.token = TOKEN}, err, sizeof err);
    if (!c) return 10;
    if (!free_fd(STDOUT_FILENO) || !free_fd(STDERR_FILENO)) return 11; /* the listener took one */
    int client = connect_port(kiln_console_port(c)); /* takes 1, the lowest free */
    if (client < 0) return 12;
    send_text(client, "token " TOKEN "\nreturn x + 1\n");
    char got[256] = "";
    size_t have = 0;
    for (int spin = 0; spin < 2000 && !strstr(got, "42"); spin++) {
        kiln_console_poll(c);
        if (!free_fd(STDERR_FILENO)) return 13; /* the client's connection took stderr */
        ssize_t n = recv(client, got + have, sizeof got - have - 1, MSG_DONTWAIT);
        if (n > 0) got[have += (size_t)n] = '\0';
        else pause_ms(1);
    }
    if (!strstr(got, "42")) return 14;
    close(client);
    kiln_console_close(c);
    lua_close(L);
    return 0;
}

START_TEST(sockets_stay_off_a_closed_stdout_and_stderr) {
    pid_t pid = fork();
    if (pid == 0) _exit(closed_stdio_game());
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    static const char *const why[] = {"", "", "", "", "", "", "", "", "", "", "the console did not open",
                                      "the listener took stdout or stderr", "no connection",
                                      "the client's connection took stderr", "no answer"};
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    ck_assert_msg(code == 0, "%s (status %d)", code > 0 && code < 15 ? why[code] : "the game died", status);
}
END_TEST

/* A game forks a helper (a crash reporter) that tidies up as the game does before it exits:
 * the token file is the parent's, whose console still serves; removed by the child, clients
 * that read it (kiln --connect) could no longer sign in. */
START_TEST(a_forked_child_closing_the_console_leaves_the_token_file_to_its_parent) {
    char dir[] = "/tmp/kiln_fork_XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/token", dir);
    lua_State *L = game_state(NULL);
    kiln_console *c = must_open_console(L, (kiln_console_desc){.token_path = path});
    pid_t pid = fork();
    if (pid == 0) {
        kiln_console_close(c);
        lua_close(L);
        _exit(0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    bool kept = access(path, F_OK) == 0;
    kiln_console_close(c);
    bool removed = access(path, F_OK) != 0;
    lua_close(L);
    unlink(path);
    rmdir(dir);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child ended with status %d", status);
    ck_assert_msg(kept, "the child's close removed the token file of the parent's console");
    ck_assert_msg(removed, "the parent's close left its token file");
}
END_TEST

/* The console's accept seen from inside (these stand in for the C library's): how many
 * descriptors it got, and how many of them were not close-on-exec from the moment they
 * existed, which a fork and exec by another thread of the game (a shader compiler started,
 * a crash reporter) took at that moment: the client stayed connected in that program after
 * the console dropped it. */
static int accepted, accepted_open_to_exec;

long syscall(long number, ...); /* declared here too: a LuaJIT host build includes unistd.h first */

static int note_accepted(int fd) {
    if (fd >= 0) {
        accepted++;
        if (!(fcntl(fd, F_GETFD) & FD_CLOEXEC)) accepted_open_to_exec++;
    }
    return fd;
}

int accept(int fd, struct sockaddr *restrict addr, socklen_t *restrict len) {
    return note_accepted((int)syscall(SYS_accept4, fd, addr, len, 0));
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags); /* (a GNU extension) */
/* When set, the next accept4 fails with it, once a connection waits to be taken (so one
 * stands behind the failure): EINTR, a signal came during the call (a game's threads take
 * them: a profiler's timer, a debugger); ECONNABORTED, the connection at the head of the
 * queue was reset (BSD says so); EPROTO, Linux passing on such a connection's network error. */
static int accept_fails_with;

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
    if (accept_fails_with) {
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, 5000);
        errno = accept_fails_with;
        accept_fails_with = 0;
        return -1;
    }
    return note_accepted((int)syscall(SYS_accept4, fd, addr, len, flags));
}

START_TEST(a_client_connection_is_close_on_exec_from_the_moment_it_is_accepted) {
    lua_State *L = game_state("x = 41");
    kiln_console *c = must_open_console(L, (kiln_console_desc){.token = TOKEN});
    int client = connect_port(kiln_console_port(c));
    ck_assert_int_ge(client, 0);
    accepted = accepted_open_to_exec = 0;
    for (int spin = 0; spin < 2000 && accepted == 0; spin++) {
        kiln_console_poll(c);
        if (accepted == 0) pause_ms(1);
    }
    close(client);
    kiln_console_close(c);
    lua_close(L);
    ck_assert_int_eq(accepted, 1);
    ck_assert_msg(accepted_open_to_exec == 0, "the connection was open to exec until the console set its flag");
}
END_TEST

static void poll_console(void *c) { kiln_console_poll(c); }

/* A client signs in on c and asks for x + 1; returns the answers it got ("" when none). */
static const char *sign_in_and_ask(kiln_console *c, int client) {
    static frames f;
    static char out[256];
    send_text(client, "return x + 1\n");
    wait_answers(poll_console, c, client, 2, 2000, &f, out, sizeof out, "|");
    return out;
}

/* accept4 failing for the call, not for the connection behind it: the console neither stops
 * accepting (a client waited for the next poll) nor closes its listener. */
START_TEST(an_interrupted_or_aborted_accept_goes_on_to_the_connection_behind_it) {
    static const int errs[] = {EINTR, ECONNABORTED, EPROTO};
    lua_State *L = game_state("x = 41");
    kiln_console *c = must_open_console(L, (kiln_console_desc){.token = TOKEN});
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        int client = connect_with_token(c);
        accepted = 0;
        accept_fails_with = errs[i];
        kiln_console_poll(c);
        int first = accepted;
        const char *got = sign_in_and_ask(c, client);
        close(client);
        ck_assert_msg(first == 1, "%s: the connection behind it was left for another poll", strerror(errs[i]));
        ck_assert_msg(strcmp(got, "ok:|ok:42|") == 0, "%s: then %s", strerror(errs[i]), got);
    }
    kiln_console_close(c);
    lua_close(L);
}
END_TEST

/* A client that connects and resets (SO_LINGER 0) before the console takes it: the console
 * takes the one behind it in the same poll and serves it. */
START_TEST(a_client_reset_before_its_accept_leaves_the_console_serving) {
    lua_State *L = game_state("x = 41");
    kiln_console *c = must_open_console(L, (kiln_console_desc){.token = TOKEN});
    for (int round = 0; round < 3; round++) {
        int gone = connect_port(kiln_console_port(c));
        ck_assert_int_ge(gone, 0);
        ck_assert_int_eq(setsockopt(gone, SOL_SOCKET, SO_LINGER, &(struct linger){1, 0}, sizeof(struct linger)), 0);
        close(gone);
        int client = connect_with_token(c);
        accepted = 0;
        kiln_console_poll(c);
        int first = accepted;
        const char *got = sign_in_and_ask(c, client);
        close(client);
        ck_assert_msg(first >= 1, "round %d: nothing was accepted in the poll after the reset", round);
        ck_assert_msg(strcmp(got, "ok:|ok:42|") == 0, "round %d: %s", round, got);
    }
    kiln_console_close(c);
    lua_close(L);
}
END_TEST

/* The token file's fresh descriptor, seen at the fchmod that follows its making: open to exec,
 * a program another thread started then held the game's secret file open. */
static int chmodded, chmodded_open_to_exec;

int fchmod(int fd, mode_t mode) {
    chmodded++;
    if (!(fcntl(fd, F_GETFD) & FD_CLOEXEC)) chmodded_open_to_exec++;
    return (int)syscall(SYS_fchmod, fd, mode);
}

START_TEST(the_token_file_is_close_on_exec_from_the_moment_it_is_made) {
    char dir[] = "/tmp/kiln_cloexec_XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/token", dir);
    lua_State *L = game_state(NULL);
    chmodded = chmodded_open_to_exec = 0;
    kiln_console *c = must_open_console(L, (kiln_console_desc){.token_path = path});
    kiln_console_close(c);
    lua_close(L);
    rmdir(dir);
    ck_assert_int_eq(chmodded, 1);
    ck_assert_msg(chmodded_open_to_exec == 0, "the token file was open to exec when it was made");
}
END_TEST

/* How many of pid's sockets a program it ran would inherit, read from /proc (-1: it has none). */
static int sockets_open_to_exec(pid_t pid) {
    int found = 0, open_to_exec = 0;
    for (int fd = 3; fd < 64; fd++) {
        char p[64], link[32] = "", info[256] = "";
        snprintf(p, sizeof p, "/proc/%d/fd/%d", (int)pid, fd);
        if (readlink(p, link, sizeof link - 1) < 7 || strncmp(link, "socket:", 7) != 0) continue;
        snprintf(p, sizeof p, "/proc/%d/fdinfo/%d", (int)pid, fd);
        FILE *f = fopen(p, "r");
        const char *flags = f && fread(info, 1, sizeof info - 1, f) > 0 ? strstr(info, "flags:") : NULL;
        if (f) fclose(f);
        found++;
        open_to_exec += !flags || !(strtoul(flags + 6, NULL, 8) & O_CLOEXEC);
    }
    return found ? open_to_exec : -1;
}

/* `kiln --connect`, once the console accepted it (and while it waits for a line on a pipe that
 * stays open): its connection would stay open in a program it ran (a :shell, an editor). */
START_TEST(kiln_connect_holds_its_connection_close_on_exec) {
    lua_State *L = game_state(NULL);
    kiln_console *c = must_open_console(L, (kiln_console_desc){.token = TOKEN});
    char spec[32];
    snprintf(spec, sizeof spec, "127.0.0.1:%d", kiln_console_port(c));
    int in[2];
    ck_assert_int_eq(pipe(in), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], STDIN_FILENO);
        execl(KILN_BIN_PATH, "kiln", "--connect", spec, "--token", TOKEN, (char *)NULL);
        _exit(127);
    }
    accepted = 0;
    for (int spin = 0; spin < 5000 && accepted == 0; spin++) {
        kiln_console_poll(c);
        if (accepted == 0) pause_ms(1);
    }
    int open_to_exec = sockets_open_to_exec(pid);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(in[0]);
    close(in[1]);
    kiln_console_close(c);
    lua_close(L);
    ck_assert_int_eq(accepted, 1);
    ck_assert_msg(open_to_exec == 0, "kiln --connect: %d socket(s) open to exec (-1: none found)", open_to_exec);
}
END_TEST

/* kiln in a terminal rewrites its history file through a fresh file renamed over it, at start and
 * at the end: made open to exec, a program another thread ran then held it. Seen by strace (the
 * open's flags), so skipped without strace or where tracing is not allowed. */
START_TEST(the_repl_history_rewrite_opens_its_new_file_close_on_exec) {
    if (system("strace -qq -e trace=none true >/dev/null 2>&1") != 0) {
        printf("the history's new file: not checked (no strace, or tracing is not allowed here)\n");
        return;
    }
    char dir[] = "/tmp/kiln_cloexec_XXXXXX", path[64], trace[64], line[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/history", dir);
    snprintf(trace, sizeof trace, "%s/trace", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("print(1)\nprint(1)\n", f); /* a repeat: the start rewrites */
    fclose(f);
    int master;
    pid_t pid = forkpty(&master, NULL, NULL, NULL);
    if (pid == 0) {
        setenv("KILN_HISTORY", path, 1);
        setenv("TERM", "dumb", 1);
        setenv("LSAN_OPTIONS", "detect_leaks=0", 1); /* a sanitizer build's leak check cannot run traced */
        execlp("strace", "strace", "-f", "-qq", "-o", trace, "-e", "trace=openat,open", KILN_BIN_PATH, (char *)NULL);
        _exit(127);
    }
    char seen[4096] = "";
    size_t have = 0;
    ssize_t n;
    while (!strstr(seen, "> ") && have < sizeof seen - 1 && (n = read(master, seen + have, sizeof seen - 1 - have)) > 0)
        seen[have += (size_t)n] = '\0'; /* the prompt: a line typed before it could be flushed */
    ck_assert_int_eq(write(master, ":quit\n", 6), 6);
    while (read(master, line, sizeof line) > 0) continue; /* until kiln closes the terminal */
    int status, made = 0, made_open_to_exec = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    close(master);
    f = fopen(trace, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f))
        if (strstr(line, "/history.") && strstr(line, "O_EXCL")) {
            made++;
            made_open_to_exec += !strstr(line, "O_CLOEXEC");
        }
    fclose(f);
    unlink(trace);
    unlink(path);
    ck_assert_int_eq(rmdir(dir), 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "kiln under strace ended with status %d", status);
    ck_assert_msg(made >= 1, "no new history file was made");
    ck_assert_msg(made_open_to_exec == 0, "%d of %d new history files were made open to exec", made_open_to_exec, made);
}
END_TEST

static Suite *stdio_suite(void) {
    Suite *s = suite_create("console_stdio");
    TCase *tc = tcase_create("closed");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, sockets_stay_off_a_closed_stdout_and_stderr);
    suite_add_tcase(s, tc);
    TCase *forked = tcase_create("forked");
    tcase_set_timeout(forked, 20);
    tcase_add_test(forked, a_forked_child_closing_the_console_leaves_the_token_file_to_its_parent);
    tcase_add_test(forked, a_client_connection_is_close_on_exec_from_the_moment_it_is_accepted);
    tcase_add_test(forked, an_interrupted_or_aborted_accept_goes_on_to_the_connection_behind_it);
    tcase_add_test(forked, a_client_reset_before_its_accept_leaves_the_console_serving);
    tcase_add_test(forked, the_token_file_is_close_on_exec_from_the_moment_it_is_made);
    tcase_add_test(forked, kiln_connect_holds_its_connection_close_on_exec);
    tcase_add_test(forked, the_repl_history_rewrite_opens_its_new_file_close_on_exec);
    suite_add_tcase(s, forked);
    return s;
}

int main(void) { return run_suite(stdio_suite()); }
