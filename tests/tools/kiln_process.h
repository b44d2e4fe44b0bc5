/* kiln_process.h: the kiln command run as a child through pipes, for the suites that run it
 * (the REPL's, the console's `kiln --connect`): started with its stdin and output on pipes,
 * fed timed steps, its output and exit code collected, reaped within a time. Test code only
 * (Check asserts). */
#ifndef KILN_TESTS_KILN_PROCESS_H
#define KILN_TESTS_KILN_PROCESS_H

#include <check.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* One step of a timed transcript: wait for after in the output (NULL: none), then wait_ms,
 * then signal and/or write input. (A Ctrl-C timed from the start alone raced kiln's own start
 * on a loaded machine: before it caught SIGINT, the signal ended it.) */
typedef struct step {
    int wait_ms;
    int signal; /* sent before the input, 0 for none */
    const char *input;
    const char *after;
} step;

static inline void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Starts kiln with args, its stdin the pipe *to, its stdout and stderr the pipe *from. */
static inline pid_t spawn_kiln(const char *const *args, int *to, int *from) {
    int in[2], o[2];
    ck_assert_int_eq(pipe(in), 0);
    ck_assert_int_eq(pipe(o), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(o[1], 1);
        dup2(o[1], 2);
        close(in[1]);
        close(o[0]);
        setenv("KILN_HISTORY", "/dev/null", 1);
        execv(KILN_BIN_PATH, (char *const *)args);
        _exit(127);
    }
    close(in[0]);
    close(o[1]);
    *to = in[1];
    *from = o[0];
    return pid;
}

/* Waits up to ms for the child pid to end, its wait status in *status; true when it did.
 * Past ms it is killed (SIGKILL) and reaped, so no test leaves one running. */
static inline bool reap_within(pid_t pid, int ms, int *status) {
    for (int waited = 0; waited < ms; waited += 20) {
        if (waitpid(pid, status, WNOHANG) == pid) return true;
        sleep_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
    return false;
}

/* Runs kiln with args, going through steps on its stdin; returns stdout+stderr (static
 * buffer). */
static size_t run_length; /* the bytes run_steps returned last (they may hold NUL bytes) */

static inline const char *run_steps(const step *steps, int count, const char *const *args, int *exit_code) {
    static char out[1 << 16];
    int in[2], o[2];
    pid_t pid = spawn_kiln(args, &in[1], &o[0]);
    size_t have = 0;
    out[0] = '\0';
    for (int i = 0; i < count; i++) {
        ssize_t got;
        while (steps[i].after && !strstr(out, steps[i].after) &&
               (got = read(o[0], out + have, sizeof out - have - 1)) > 0) {
            have += (size_t)got;
            out[have] = '\0';
        }
        sleep_ms(steps[i].wait_ms);
        if (steps[i].signal) kill(pid, steps[i].signal);
        if (steps[i].input) {
            ssize_t w = write(in[1], steps[i].input, strlen(steps[i].input));
            ck_assert_int_eq(w, (ssize_t)strlen(steps[i].input));
        }
    }
    close(in[1]);
    ssize_t r;
    while ((r = read(o[0], out + have, sizeof out - have - 1)) > 0) have += (size_t)r;
    out[have] = '\0';
    run_length = have;
    close(o[0]);
    int status;
    waitpid(pid, &status, 0);
    *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
}

/* Runs kiln with args, feeding input on stdin; returns stdout+stderr (static buffer). */
static inline const char *run(const char *input, const char *const *args, int *exit_code) {
    step one = {0, 0, input, NULL};
    return run_steps(&one, 1, args, exit_code);
}

static inline const char *repl(const char *input) {
    int code;
    const char *args[] = {"kiln", NULL};
    const char *out = run(input, args, &code);
    ck_assert_msg(code == 0, "kiln exited with %d: %s", code, out);
    return out;
}

#endif
