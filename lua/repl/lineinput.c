/* lineinput.c: the REPL's line reading: libedit in callback mode in a terminal, read(2) into
 * a buffer otherwise, so every wait can time out (console watches) and Ctrl-C can end it. */
#include "lineinput.h"

#include <errno.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <readline.h>

#include "interrupt.h"
#include "termtext.h"

#define POLL_SECONDS 1.0 /* how often a console client shows the game's watches */

/* File state: libedit's callbacks (line accepted, completion) carry no user pointer. */
static kcmd_session *session; /* what completion and the watches ask */
static bool tty;

/* Lines from a pipe or file, read with read(2) so waiting can time out and be interrupted. */
static struct {
    char *buf;
    size_t len, cap;
    bool eof;
} pending;

/* The line libedit hands over in callback mode. */
static char *accepted;
static bool line_done;

/* Completion candidates for the word at the cursor, handed to libedit one by one. */
static char **candidates;
static size_t candidate_count, candidate_next;

/* ---- plain input ------------------------------------------------------------------------ */

/* Moves one line (without its newline) out of pending into a malloc'd string, or NULL. */
static char *take_line(void) {
    char *nl = pending.len ? memchr(pending.buf, '\n', pending.len) : NULL;
    if (!nl && !(pending.eof && pending.len > 0)) return NULL;
    size_t n = nl ? (size_t)(nl - pending.buf) : pending.len;
    char *line = strndup(pending.buf, n);
    size_t used = nl ? n + 1 : n;
    memmove(pending.buf, pending.buf + used, pending.len - used);
    pending.len -= used;
    return line;
}

/* Reads what stdin has into pending; false at end of input or on a read error. */
static bool fill_pending(void) {
    if (pending.cap - pending.len < 4096) {
        size_t cap = pending.cap ? pending.cap * 2 : 8192;
        char *p = realloc(pending.buf, cap);
        if (!p) return false;
        pending.buf = p;
        pending.cap = cap;
    }
    ssize_t r = read(STDIN_FILENO, pending.buf + pending.len, pending.cap - pending.len);
    if (r < 0 && errno == EINTR) return true;
    if (r <= 0) {
        pending.eof = true;
        return false;
    }
    pending.len += (size_t)r;
    return true;
}

/* ---- reading a line --------------------------------------------------------------------- */

/* Asks the console for the watches (":poll") and prints them above the prompt; false when
 * the connection is gone. */
static bool show_watches(void) {
    kcmd_answer a;
    if (!kcmd_session_ask(session, ":poll", &a)) return false;
    if (strcmp(a.status, "ok") == 0 && a.len > 0) {
        if (tty) printf("\r\n"); /* below the prompt and what is typed, which then show again */
        kcmd_put_text(stdout, a.text, a.len, tty);
        printf("\n");
        fflush(stdout);
        if (tty) rl_forced_update_display();
    }
    free(a.text);
    return true;
}

static void on_line(char *line) {
    accepted = line;
    line_done = true;
    rl_callback_handler_remove(); /* cooked mode while the statement runs */
}

kcmd_read_status kcmd_lineinput_read(const char *prompt, bool poll_watches, char **line) {
    *line = NULL;
    if (!tty && (*line = take_line())) return KCMD_READ_LINE;
    if (!tty && pending.eof) return KCMD_READ_END;
    double next_poll = kcmd_now_seconds() + POLL_SECONDS;
    kcmd_interrupt_clear();
    if (tty) {
        line_done = false;
        accepted = NULL;
        rl_callback_handler_install(prompt, on_line);
    }
    for (;;) {
        double wait = poll_watches ? next_poll - kcmd_now_seconds() : -1;
        if (poll_watches && wait < 0) wait = 0;
        int r = kcmd_wait_readable(STDIN_FILENO, wait);
        if (r < 0 && kcmd_interrupt_seen()) {
            kcmd_interrupt_clear();
            if (tty) {
                rl_callback_handler_remove();
                printf("^C\n");
                fflush(stdout);
            }
            return KCMD_READ_CANCELLED;
        }
        if (r == 0 && poll_watches) {
            if (!show_watches()) {
                if (tty) rl_callback_handler_remove();
                return KCMD_READ_CLOSED;
            }
            next_poll = kcmd_now_seconds() + POLL_SECONDS;
            continue;
        }
        if (r <= 0) continue;
        if (tty) {
            rl_callback_read_char();
            if (line_done) {
                *line = accepted;
                return accepted ? KCMD_READ_LINE : KCMD_READ_END;
            }
        } else {
            bool more = fill_pending();
            if ((*line = take_line())) return KCMD_READ_LINE;
            if (!more) return KCMD_READ_END;
        }
    }
}

/* Plain reads even in a terminal: libedit's handler is removed while a statement runs. */
bool kcmd_lineinput_stop_running(void) {
    bool more = fill_pending(), stop = !more && pending.len == 0;
    char *line;
    while (!stop && (line = take_line())) {
        stop = line[0] == '\0' || strncmp(line, ":pause", 6) == 0;
        if (!stop) printf("running: Enter or :pause stops (ignored: %.60s)\n", line);
        free(line);
    }
    return stop;
}

/* ---- completion ------------------------------------------------------------------------- */

static void clear_candidates(void) {
    for (size_t i = 0; i < candidate_count; i++) free(candidates[i]);
    free(candidates);
    candidates = NULL;
    candidate_count = candidate_next = 0;
}

static void add_candidate(const char *s, size_t n) {
    char **p = realloc(candidates, sizeof *p * (candidate_count + 1));
    if (!p) return;
    candidates = p;
    candidates[candidate_count] = strndup(s, n);
    if (candidates[candidate_count]) candidate_count++;
}

static char *next_candidate(const char *text, int state) {
    (void)text;
    (void)state;
    if (candidate_next < candidate_count) return strdup(candidates[candidate_next++]);
    return NULL;
}

/* A candidate goes on the line as typed: none with a byte the terminal would obey or that
 * kcmd_put_text would show as an escape (C0 and C1 controls, DEL, NUL) or a tab. */
static bool plain_candidate(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\t' || kcmd_control_length(s + i, n - i) > 0) return false;
    return true;
}

/* Asks the session (local or over the console) for ":complete <line up to the cursor>". */
static char **complete(const char *text, int start, int end) {
    (void)start;
    clear_candidates();
    size_t n = (size_t)end + 16;
    char *request = malloc(n);
    if (!request) return NULL;
    snprintf(request, n, ":complete %.*s", end, rl_line_buffer);
    kcmd_answer a;
    if (kcmd_session_ask(session, request, &a) && a.text) {
        const char *stop = a.text + a.len;
        for (const char *line = a.text, *nl; strcmp(a.status, "ok") == 0 && line < stop; line = nl + 1) {
            nl = memchr(line, '\n', (size_t)(stop - line));
            if (!nl) nl = stop;
            if (nl > line && plain_candidate(line, (size_t)(nl - line))) add_candidate(line, (size_t)(nl - line));
        }
        free(a.text);
    }
    free(request);
    rl_attempted_completion_over = 1;
    if (candidate_count == 0) return NULL;
    return rl_completion_matches(text, next_candidate);
}

/* ---- opening and closing ---------------------------------------------------------------- */

void kcmd_lineinput_open(kcmd_session *for_session, bool in_tty) {
    session = for_session;
    tty = in_tty;
    if (!tty) return;
    setlocale(LC_CTYPE, ""); /* so libedit reads UTF-8 input */
    rl_readline_name = "kiln";
    rl_catch_signals = 0; /* Ctrl-C is ours: it clears the line */
    rl_attempted_completion_function = complete;
    rl_basic_word_break_characters = " \t\n\"'(){}[],=+-*/<>~;#";
    rl_completion_append_character = '\0';
}

void kcmd_lineinput_close(void) {
    clear_candidates();
    free(pending.buf);
    memset(&pending, 0, sizeof pending);
    session = NULL;
}
