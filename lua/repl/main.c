/* main.c: the `kiln` command: runs scripts with the kiln module loaded (like `lua`), and an
 * interactive REPL with editing, history and completion, local or attached to a game's
 * console. A script error or Ctrl-C ends the statement or clears the line, never the REPL. */
#include <arpa/inet.h>
#include <errno.h>
#include <locale.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <readline.h>
#include <history.h>
#include <lauxlib.h>
#include <lualib.h>

#include "kiln_lua.h"

#define HISTORY_MAX 1000      /* entries kept in the history file */
#define POLL_SECONDS 1.0      /* how often a console client shows the game's watches */

static lua_State *global_L;          /* for the signal handler and completion callback */
static volatile sig_atomic_t interrupted;
static volatile sig_atomic_t lua_running; /* Ctrl-C stops Lua code rather than the line */
static int remote_fd = -1;           /* connected console, or -1 */

/* ---- interruption: Ctrl-C stops running Lua through a hook, or cancels the line ------- */

static void stop_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted");
}

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
    if (lua_running && global_L)
        lua_sethook(global_L, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* No SA_RESTART: a wait at the prompt returns EINTR, so Ctrl-C is seen at once. */
static void catch_sigint(bool on) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on ? on_sigint : SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

/* Calls the function below nargs arguments with Ctrl-C armed to stop it. */
static int pcall_interruptible(lua_State *L, int nargs, int nresults, int msgh) {
    interrupted = 0;
    lua_running = 1;
    int rc = lua_pcall(L, nargs, nresults, msgh);
    lua_running = 0;
    lua_sethook(L, NULL, 0, 0);
    return rc;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Waits until fd is readable or seconds pass (< 0: no limit). 1 readable, 0 timeout,
 * -1 interrupted by Ctrl-C, also when it came just before the wait (pselect closes that gap). */
static int wait_readable(int fd, double seconds) {
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &old);
    if (interrupted) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        return -1;
    }
    fd_set set;
    FD_ZERO(&set);
    FD_SET(fd, &set);
    struct timespec ts, *pts = NULL;
    if (seconds >= 0) {
        ts.tv_sec = (time_t)seconds;
        ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
        pts = &ts;
    }
    int r = pselect(fd + 1, &set, NULL, NULL, pts, &old);
    int err = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (r < 0) return err == EINTR ? -1 : 1; /* other errors: let the read report them */
    return r > 0 ? 1 : 0;
}

/* ---- talking to a console ------------------------------------------------------------- */

static int connect_to(const char *spec) {
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || (size_t)(colon - spec) >= sizeof host) return -1;
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    struct addrinfo hints = {0}, *res;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0) return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

static bool send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Reads one answer frame "<status> <len>\n<text>"; status and text are malloc'd. */
static bool read_frame(int fd, char **status, char **text) {
    char head[64];
    size_t h = 0;
    while (h < sizeof head - 1) {
        ssize_t r = recv(fd, head + h, 1, 0);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return false;
        }
        if (head[h] == '\n') break;
        h++;
    }
    head[h] = '\0';
    char st[32];
    size_t len;
    if (sscanf(head, "%31s %zu", st, &len) != 2 || len > (64u << 20)) return false;
    char *body = malloc(len + 1);
    if (!body) return false;
    size_t got = 0;
    while (got < len) {
        ssize_t r = recv(fd, body + got, len - got, 0);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            free(body);
            return false;
        }
        got += (size_t)r;
    }
    body[len] = '\0';
    *status = strdup(st);
    *text = body;
    return true;
}

/* ---- feeding lines to the session (local Lua, or the console) ------------------------- */

/* The answer to one line: status ("ok", "more", "run", ...) and the text the session gave. */
typedef struct answer {
    char status[32];
    char *text; /* malloc'd; for "run" the frame rate */
} answer;

/* Sends line to the session and fills out; false when the console connection is gone. */
static bool ask(lua_State *L, const char *line, answer *out) {
    out->text = NULL;
    if (remote_fd >= 0) {
        char *st, *text;
        if (!send_all(remote_fd, line, strlen(line)) || !send_all(remote_fd, "\n", 1) ||
            !read_frame(remote_fd, &st, &text))
            return false;
        snprintf(out->status, sizeof out->status, "%s", st);
        out->text = text;
        free(st);
        return true;
    }
    int top = lua_gettop(L);
    lua_getglobal(L, "_KILN_SESSION");
    lua_getfield(L, -1, "feed");
    lua_insert(L, -2);
    lua_pushstring(L, line);
    if (pcall_interruptible(L, 2, 2, 0) != LUA_OK) {
        snprintf(out->status, sizeof out->status, "error");
        out->text = strdup(lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
        lua_getglobal(L, "_KILN_SESSION");
        lua_getfield(L, -1, "reset");
        lua_insert(L, -2);
        lua_pcall(L, 1, 0, 0);
    } else {
        snprintf(out->status, sizeof out->status, "%s", lua_tostring(L, -2) ? lua_tostring(L, -2) : "error");
        out->text = strdup(lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
    }
    lua_settop(L, top);
    return true;
}

/* Drops a statement being continued (after Ctrl-C at a ">>" prompt). */
static void reset_statement(lua_State *L) {
    if (remote_fd >= 0) {
        answer a;
        if (ask(L, ":reset", &a)) free(a.text);
        return;
    }
    lua_getglobal(L, "_KILN_SESSION");
    lua_getfield(L, -1, "reset");
    lua_insert(L, -2);
    lua_pcall(L, 1, 0, 0);
}

/* ---- reading lines: libedit in a terminal, plain reads otherwise ---------------------- */

typedef enum read_status { READ_LINE, READ_CANCELLED, READ_END, READ_CLOSED } read_status;

/* Lines from a pipe or file, read with read(2) so waiting can time out and be interrupted. */
static struct {
    char *buf;
    size_t len, cap;
    bool eof;
} pending;

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

static bool show_watches(lua_State *L, bool tty);

/* The line libedit hands over in callback mode. */
static char *accepted;
static bool line_done;

static void on_line(char *line) {
    accepted = line;
    line_done = true;
    rl_callback_handler_remove(); /* cooked mode while the statement runs */
}

/* Reads one line into *line (malloc'd). Ctrl-C cancels the line being typed; over a
 * console, the game's watches print every POLL_SECONDS while the prompt waits. */
static read_status read_line(lua_State *L, const char *prompt, bool tty, bool poll_watches, char **line) {
    *line = NULL;
    if (!tty && (*line = take_line())) return READ_LINE;
    if (!tty && pending.eof) return READ_END;
    double next_poll = now_seconds() + POLL_SECONDS;
    interrupted = 0;
    if (tty) {
        line_done = false;
        accepted = NULL;
        rl_callback_handler_install(prompt, on_line);
    }
    for (;;) {
        double wait = poll_watches ? next_poll - now_seconds() : -1;
        if (poll_watches && wait < 0) wait = 0;
        int r = wait_readable(STDIN_FILENO, wait);
        if (r < 0 && interrupted) {
            interrupted = 0;
            if (tty) {
                rl_callback_handler_remove();
                printf("^C\n");
                fflush(stdout);
            }
            return READ_CANCELLED;
        }
        if (r == 0 && poll_watches) {
            if (!show_watches(L, tty)) {
                if (tty) rl_callback_handler_remove();
                return READ_CLOSED;
            }
            next_poll = now_seconds() + POLL_SECONDS;
            continue;
        }
        if (r <= 0) continue;
        if (tty) {
            rl_callback_read_char();
            if (line_done) {
                *line = accepted;
                return accepted ? READ_LINE : READ_END;
            }
        } else {
            bool more = fill_pending();
            if ((*line = take_line())) return READ_LINE;
            if (!more) return READ_END;
        }
    }
}

/* Asks the console for the watches (":poll") and prints them above the prompt; false when
 * the connection is gone. */
static bool show_watches(lua_State *L, bool tty) {
    answer a;
    if (!ask(L, ":poll", &a)) return false;
    if (strcmp(a.status, "ok") == 0 && a.text[0]) {
        if (tty) {
            /* below the prompt and what is typed, which then show again */
            printf("\r\n%s\n", a.text);
            fflush(stdout);
            rl_forced_update_display();
        } else {
            printf("%s\n", a.text);
            fflush(stdout);
        }
    }
    free(a.text);
    return true;
}

/* :run: step the world at fps until :pause, an empty line, the end of input or Ctrl-C. */
static void run_frames(lua_State *L, double fps) {
    printf("running at %g frames per second: Enter or :pause stops\n", fps);
    fflush(stdout);
    double period = 1.0 / fps, next = now_seconds(), last_print = next;
    interrupted = 0;
    for (;;) {
        double wait = next - now_seconds();
        int r = wait_readable(STDIN_FILENO, wait > 0 ? wait : 0);
        if (r < 0 && interrupted) break;
        if (r > 0) {
            bool more = fill_pending(), stop = !more && pending.len == 0;
            char *line;
            while (!stop && (line = take_line())) {
                stop = line[0] == '\0' || strncmp(line, ":pause", 6) == 0;
                if (!stop) printf("running: Enter or :pause stops (ignored: %.60s)\n", line);
                free(line);
            }
            if (stop) break;
            continue;
        }
        if (r != 0) continue;
        lua_getglobal(L, "_KILN_SESSION");
        lua_getfield(L, -1, "step");
        lua_insert(L, -2);
        lua_pushinteger(L, 1);
        int rc = pcall_interruptible(L, 2, 2, 0);
        if (rc != LUA_OK) {
            printf("%s\n", lua_tostring(L, -1));
            lua_pop(L, 1);
            break;
        }
        double now = now_seconds();
        next += period;
        if (next < now - period) next = now; /* frames slower than fps: do not catch up */
        if (now - last_print >= 1.0 || strcmp(lua_tostring(L, -2), "ok") != 0) {
            printf("%s\n", lua_tostring(L, -1));
            last_print = now;
        }
        lua_pop(L, 2);
        fflush(stdout);
        if (interrupted) break;
    }
    printf("paused\n");
    fflush(stdout);
}

/* ---- completion ------------------------------------------------------------------------- */

static char **candidates;
static size_t candidate_count, candidate_next;

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

/* Asks the session (local or over the console) for ":complete <line up to the cursor>". */
static char **complete(const char *text, int start, int end) {
    (void)start;
    clear_candidates();
    size_t n = (size_t)end + 16;
    char *request = malloc(n);
    if (!request) return NULL;
    snprintf(request, n, ":complete %.*s", end, rl_line_buffer);
    answer a;
    if (ask(global_L, request, &a)) {
        for (char *line = a.text, *nl; strcmp(a.status, "ok") == 0 && *line; line = nl + 1) {
            nl = strchr(line, '\n');
            if (!nl) nl = line + strlen(line);
            if (nl > line) add_candidate(line, (size_t)(nl - line));
            if (!*nl) break;
        }
        free(a.text);
    }
    free(request);
    rl_attempted_completion_over = 1;
    if (candidate_count == 0) return NULL;
    return rl_completion_matches(text, next_candidate);
}

/* ---- history: one line per entry, written as entries are accepted ---------------------- */

/* The entries, oldest first, no two equal: what libedit's list holds, and the file after
 * a rewrite. A repeated entry moves to the end. */
static struct {
    char *path;
    char **lines;
    size_t count;
} hist;

static void history_drop(size_t i) {
    free(hist.lines[i]);
    memmove(hist.lines + i, hist.lines + i + 1, sizeof *hist.lines * (hist.count - i - 1));
    hist.count--;
}

/* Adds line as the newest entry; true when an older one went (a repeat, or the oldest). */
static bool history_add(const char *line) {
    bool reshaped = false;
    for (size_t i = 0; i < hist.count; i++)
        if (strcmp(hist.lines[i], line) == 0) {
            history_drop(i);
            reshaped = true;
            break;
        }
    if (hist.count == HISTORY_MAX) {
        history_drop(0);
        reshaped = true;
    }
    char **p = realloc(hist.lines, sizeof *p * (hist.count + 1));
    char *copy = strdup(line);
    if (!p || !copy) {
        free(copy);
        if (p) hist.lines = p;
        return reshaped;
    }
    hist.lines = p;
    hist.lines[hist.count++] = copy;
    return reshaped;
}

/* Undoes the octal escapes (\040) of the files older versions wrote through libedit. */
static void unescape_octal(char *s) {
    char *out = s;
    for (char *in = s; *in;) {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' && in[3] >= '0' &&
            in[3] <= '7') {
            *out++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
            in += 4;
        } else if (in[0] == '\\' && in[1] == '\\') {
            *out++ = '\\';
            in += 2;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
}

/* Rewrites the file as the list (a regular file only: never replace /dev/null). */
static void history_rewrite(void) {
    struct stat st;
    if (!hist.path || stat(hist.path, &st) != 0 || !S_ISREG(st.st_mode)) return;
    FILE *f = fopen(hist.path, "w");
    if (!f) return;
    for (size_t i = 0; i < hist.count; i++) fprintf(f, "%s\n", hist.lines[i]);
    fclose(f);
}

static void libedit_reload(void) {
    clear_history();
    for (size_t i = 0; i < hist.count; i++) add_history(hist.lines[i]);
}

/* Loads the file, dropping repeats (a killed session leaves its entries appended). */
static void history_load(const char *path) {
    hist.path = path ? strdup(path) : NULL;
    FILE *f = hist.path ? fopen(hist.path, "r") : NULL;
    if (f) {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        bool first = true, legacy = false;
        while ((n = getline(&line, &cap, f)) >= 0) {
            if (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
            if (first && strcmp(line, "_HiStOrY_V2_") == 0) {
                legacy = true;
                first = false;
                continue;
            }
            first = false;
            if (legacy) unescape_octal(line);
            if (line[0]) history_add(line);
        }
        free(line);
        fclose(f);
        history_rewrite();
    }
    libedit_reload();
}

/* Records an accepted line at once, so a killed session loses nothing. */
static void history_accept(const char *line) {
    if (!line[0]) return;
    if (history_add(line)) {
        libedit_reload();
        history_rewrite();
        return;
    }
    add_history(line);
    FILE *f = hist.path ? fopen(hist.path, "a") : NULL;
    if (f) {
        fprintf(f, "%s\n", line);
        fclose(f);
    }
}

static void history_close(void) {
    history_rewrite();
    for (size_t i = 0; i < hist.count; i++) free(hist.lines[i]);
    free(hist.lines);
    free(hist.path);
    memset(&hist, 0, sizeof hist);
}

/* ---- the interactive loop ------------------------------------------------------------- */

static char *history_path(void) {
    const char *env = getenv("KILN_HISTORY");
    if (env) return strdup(env);
    const char *home = getenv("HOME");
    if (!home) return NULL;
    size_t n = strlen(home) + 32;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/.kiln_history", home);
    return p;
}

static int repl(lua_State *L, const char *world_line) {
    bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    if (tty) {
        setlocale(LC_CTYPE, ""); /* so libedit reads UTF-8 input */
        rl_readline_name = "kiln";
        rl_catch_signals = 0;     /* Ctrl-C is ours: it clears the line */
        rl_attempted_completion_function = complete;
        rl_basic_word_break_characters = " \t\n\"'(){}[],=+-*/<>~;#";
        rl_completion_append_character = '\0';
        using_history();
        char *path = history_path();
        history_load(path);
        free(path);
        printf("kiln %s on %s (:help for commands)\n", KILN_VERSION_STRING, LUA_RELEASE);
    }
    if (world_line) printf("%s\n", world_line);
    fflush(stdout);
    catch_sigint(true);
    bool more = false;
    int rc = 0;
    for (;;) {
        char *line;
        read_status rs = read_line(L, more ? ">> " : "> ", tty, remote_fd >= 0 && !more, &line);
        if (rs == READ_END) break;
        if (rs == READ_CLOSED) {
            printf("console connection closed\n");
            rc = 1;
            break;
        }
        if (rs == READ_CANCELLED) {
            if (more) reset_statement(L);
            more = false;
            continue;
        }
        if (tty) history_accept(line);
        answer a;
        bool alive = ask(L, line, &a);
        free(line);
        if (!alive) {
            printf("console connection closed\n");
            rc = 1;
            break;
        }
        if (a.text[0] && strcmp(a.status, "run") != 0) printf("%s\n", a.text);
        fflush(stdout);
        more = strcmp(a.status, "more") == 0;
        bool quit = strcmp(a.status, "quit") == 0;
        if (strcmp(a.status, "run") == 0 && remote_fd < 0) run_frames(L, atof(a.text));
        free(a.text);
        if (quit) break;
    }
    catch_sigint(false);
    if (tty) history_close();
    clear_candidates();
    free(pending.buf);
    return rc;
}

/* ---- scripts and arguments -------------------------------------------------------------- */

static int traceback(lua_State *L) {
    luaL_traceback(L, L, lua_tostring(L, 1), 1);
    return 1;
}

/* Registry key of what the last script or -e chunk returned first (the REPL may take it
 * as its world). */
static const char SCRIPT_RESULT_KEY = 0;

/* Runs the chunk on the stack top (or reports its load error) with nargs arguments pushed
 * above it. */
static int run_chunk_args(lua_State *L, int status, int nargs) {
    int base = lua_gettop(L) - nargs; /* the chunk */
    if (status == LUA_OK) {
        lua_pushcfunction(L, traceback);
        lua_insert(L, base);
        catch_sigint(true);
        status = pcall_interruptible(L, nargs, 1, base);
        catch_sigint(false);
    }
    if (status != LUA_OK) {
        fprintf(stderr, "kiln: %s\n", lua_tostring(L, -1));
        lua_settop(L, 0);
        return 1;
    }
    lua_rawsetp(L, LUA_REGISTRYINDEX, &SCRIPT_RESULT_KEY);
    lua_settop(L, 0);
    return 0;
}

static int run_chunk(lua_State *L, int status) { return run_chunk_args(L, status, 0); }

static void usage(FILE *out) {
    fprintf(out,
            "usage: kiln [options] [script [args]]\n"
            "  -e code         run code\n"
            "  -i              enter the REPL after running the script or code\n"
            "  --connect H:P   attach the REPL to a game's console (e.g. 127.0.0.1:7777)\n"
            "  -v, --version   print the version\n"
            "  -h, --help      this text\n"
            "With no script and no -e, kiln opens the REPL with a fresh `world`.\n");
}

/* Starts the session the REPL feeds and picks its world (kept from the script when it
 * made one); *world_line gets the session's word on which (malloc'd), or NULL. */
static int setup_session(lua_State *L, char **world_line) {
    static const char code[] =
        "local result, remote = ...\n"
        "local kiln = require 'kiln'\n"
        "_KILN_SESSION = kiln.session(_G)\n"
        "if not remote then return _KILN_SESSION:open_world(result) end\n";
    *world_line = NULL;
    if (luaL_loadbuffer(L, code, sizeof code - 1, "=kiln") != LUA_OK) return run_chunk(L, LUA_ERRSYNTAX);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &SCRIPT_RESULT_KEY);
    lua_pushboolean(L, remote_fd >= 0);
    lua_pushcfunction(L, traceback);
    lua_insert(L, -4);
    if (lua_pcall(L, 2, 1, -4) != LUA_OK) {
        fprintf(stderr, "kiln: %s\n", lua_tostring(L, -1));
        lua_settop(L, 0);
        return 1;
    }
    if (lua_isstring(L, -1)) *world_line = strdup(lua_tostring(L, -1));
    lua_settop(L, 0);
    return 0;
}

int main(int argc, char **argv) {
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "kiln: cannot create a Lua state\n");
        return 1;
    }
    global_L = L;
    luaL_openlibs(L);
    luaL_requiref(L, "kiln", luaopen_kiln, 1);
    lua_pop(L, 1);

    bool interactive = false, ran = false;
    const char *connect_spec = NULL;
    int i = 1, rc = 0;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "-e") == 0) {
            if (++i >= argc) {
                usage(stderr);
                return 1;
            }
            rc = run_chunk(L, luaL_loadstring(L, argv[i]));
            ran = true;
            if (rc) break;
        } else if (strcmp(argv[i], "-i") == 0) {
            interactive = true;
        } else if (strcmp(argv[i], "--connect") == 0) {
            if (++i >= argc) {
                usage(stderr);
                return 1;
            }
            connect_spec = argv[i];
        } else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--version") == 0) {
            printf("kiln %s (%s)\n", KILN_VERSION_STRING, LUA_RELEASE);
            return 0;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "kiln: unknown option %s\n", argv[i]);
            usage(stderr);
            return 1;
        } else {
            break;
        }
    }
    if (rc == 0 && i < argc) {
        /* script [args]: arg table as lua(1) builds it */
        lua_createtable(L, argc - i - 1, i + 1);
        for (int k = 0; k < argc; k++) {
            lua_pushstring(L, argv[k]);
            lua_rawseti(L, -2, k - i);
        }
        lua_setglobal(L, "arg");
        int status = luaL_loadfilex(L, argv[i], "t"); /* source only: no binary chunks */
        int nargs = 0;
        if (status == LUA_OK)
            for (int k = i + 1; k < argc; k++, nargs++) lua_pushstring(L, argv[k]);
        rc = run_chunk_args(L, status, nargs);
        ran = true;
    }
    if ((rc == 0 || interactive) && (!ran || interactive || connect_spec)) {
        if (connect_spec) {
            remote_fd = connect_to(connect_spec);
            if (remote_fd < 0) {
                fprintf(stderr, "kiln: cannot connect to %s\n", connect_spec);
                lua_close(L);
                return 1;
            }
            if (isatty(STDIN_FILENO)) printf("connected to %s\n", connect_spec);
        }
        char *world_line;
        if (setup_session(L, &world_line) == 0) {
            bool say = world_line && (ran || isatty(STDIN_FILENO));
            rc = repl(L, say ? world_line : NULL);
        } else {
            rc = 1;
        }
        free(world_line);
        if (remote_fd >= 0) close(remote_fd);
    }
    lua_close(L);
    return rc;
}
