/* main.c: the `kiln` command: runs scripts with the kiln module loaded (like `lua`), and an
 * interactive REPL with editing, history and completion, local or attached to a game's
 * console. A script error or Ctrl-C ends the statement, never the REPL. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <readline.h>
#include <history.h>
#include <lauxlib.h>
#include <lualib.h>

#include "kiln_lua.h"

static lua_State *global_L;          /* for the signal handler and completion callback */
static volatile sig_atomic_t interrupted;
static int remote_fd = -1;           /* connected console, or -1 */

/* ---- interruption: Ctrl-C stops the running statement through a hook ------------------- */

static void stop_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted");
}

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
    if (global_L) lua_sethook(global_L, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

static void catch_sigint(bool on) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on ? on_sigint : SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
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

/* Sends line to the session; returns its status ("ok", "more", ...) in a static buffer
 * and prints the text. NULL when the console connection is gone. */
static const char *feed(lua_State *L, const char *line) {
    static char status[32];
    if (remote_fd >= 0) {
        char *st, *text;
        if (!send_all(remote_fd, line, strlen(line)) || !send_all(remote_fd, "\n", 1) ||
            !read_frame(remote_fd, &st, &text))
            return NULL;
        snprintf(status, sizeof status, "%s", st);
        if (text[0]) printf("%s\n", text);
        free(st);
        free(text);
        return status;
    }
    int top = lua_gettop(L);
    lua_getglobal(L, "_KILN_SESSION");
    lua_getfield(L, -1, "feed");
    lua_insert(L, -2);
    lua_pushstring(L, line);
    interrupted = 0;
    catch_sigint(true);
    int rc = lua_pcall(L, 2, 2, 0);
    catch_sigint(false);
    lua_sethook(L, NULL, 0, 0);
    if (rc != LUA_OK) {
        fprintf(stdout, "%s\n", lua_tostring(L, -1));
        snprintf(status, sizeof status, "error");
        lua_getglobal(L, "_KILN_SESSION");
        lua_getfield(L, -1, "reset");
        lua_insert(L, -2);
        lua_pcall(L, 1, 0, 0);
    } else {
        snprintf(status, sizeof status, "%s", lua_tostring(L, -2));
        const char *text = lua_tostring(L, -1);
        if (text && text[0] && strcmp(status, "run") != 0) printf("%s\n", text);
    }
    lua_settop(L, top);
    fflush(stdout);
    return status;
}

/* :run: step the world at fps until :pause, an empty line or Ctrl-C. */
static void run_frames(lua_State *L, double fps) {
    interrupted = 0;
    catch_sigint(true);
    printf("running at %g frames per second: Enter or :pause stops\n", fps);
    fflush(stdout);
    struct timespec last;
    clock_gettime(CLOCK_MONOTONIC, &last);
    double since_print = 0;
    while (!interrupted) {
        fd_set set;
        FD_ZERO(&set);
        FD_SET(STDIN_FILENO, &set);
        struct timeval tv = {0, (suseconds_t)(1e6 / fps)};
        int ready = select(STDIN_FILENO + 1, &set, NULL, NULL, &tv);
        if (ready > 0) {
            char buf[256];
            if (!fgets(buf, sizeof buf, stdin)) break;
            if (buf[0] == '\n' || strncmp(buf, ":pause", 6) == 0) break;
        }
        if (interrupted) break;
        lua_getglobal(L, "_KILN_SESSION");
        lua_getfield(L, -1, "step");
        lua_insert(L, -2);
        lua_pushinteger(L, 1);
        int rc = lua_pcall(L, 2, 2, 0);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        since_print += (double)(now.tv_sec - last.tv_sec) + (double)(now.tv_nsec - last.tv_nsec) / 1e9;
        last = now;
        if (rc != LUA_OK) {
            printf("%s\n", lua_tostring(L, -1));
            lua_pop(L, 1);
            break;
        }
        if (since_print >= 1.0) {
            printf("%s\n", lua_tostring(L, -1));
            since_print = 0;
        }
        lua_pop(L, 2);
        fflush(stdout);
    }
    catch_sigint(false);
    lua_sethook(L, NULL, 0, 0);
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

static char **complete(const char *text, int start, int end) {
    (void)start;
    clear_candidates();
    char *prefix = strndup(rl_line_buffer, (size_t)end);
    if (!prefix) return NULL;
    if (remote_fd >= 0) {
        char *st, *body;
        size_t n = strlen(prefix) + 16;
        char *req = malloc(n);
        snprintf(req, n, ":complete %s\n", prefix);
        if (send_all(remote_fd, req, strlen(req)) && read_frame(remote_fd, &st, &body)) {
            for (char *line = body, *nl; *line; line = nl + 1) {
                nl = strchr(line, '\n');
                if (!nl) nl = line + strlen(line);
                if (nl > line) add_candidate(line, (size_t)(nl - line));
                if (!*nl) break;
            }
            free(st);
            free(body);
        }
        free(req);
    } else {
        lua_State *L = global_L;
        int top = lua_gettop(L);
        lua_getglobal(L, "_KILN_SESSION");
        lua_getfield(L, -1, "complete");
        lua_insert(L, -2);
        lua_pushstring(L, prefix);
        if (lua_pcall(L, 2, 1, 0) == LUA_OK && lua_istable(L, -1)) {
            lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
            for (lua_Integer i = 1; i <= n; i++) {
                lua_rawgeti(L, -1, i);
                size_t len;
                const char *s = lua_tolstring(L, -1, &len);
                if (s) add_candidate(s, len);
                lua_pop(L, 1);
            }
        }
        lua_settop(L, top);
    }
    free(prefix);
    rl_attempted_completion_over = 1;
    if (candidate_count == 0) return NULL;
    return rl_completion_matches(text, next_candidate);
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

static char *read_line(const char *prompt, bool tty) {
    if (tty) return readline(prompt);
    static char *buf;
    static size_t cap;
    ssize_t n = getline(&buf, &cap, stdin);
    if (n < 0) return NULL;
    if (n > 0 && buf[n - 1] == '\n') buf[n - 1] = '\0';
    return strdup(buf);
}

static int repl(lua_State *L) {
    bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    char *hist = history_path();
    if (tty) {
        rl_readline_name = "kiln";
        rl_attempted_completion_function = complete;
        rl_basic_word_break_characters = " \t\n\"'(){}[],=+-*/<>~;#";
        rl_completion_append_character = '\0';
        using_history();
        if (hist) read_history(hist);
        printf("kiln %s on %s (:help for commands)\n", KILN_VERSION_STRING, LUA_RELEASE);
    }
    bool more = false;
    for (;;) {
        char *line = read_line(more ? ">> " : "> ", tty);
        if (!line) break;
        if (tty && line[0]) {
            add_history(line);
            if (hist) append_history(1, hist);
        }
        const char *st = feed(L, line);
        free(line);
        if (!st) {
            printf("console connection closed\n");
            return 1;
        }
        more = strcmp(st, "more") == 0;
        if (strcmp(st, "quit") == 0) break;
        if (strcmp(st, "run") == 0 && remote_fd < 0) {
            lua_getglobal(L, "_KILN_SESSION");
            lua_getfield(L, -1, "feed");
            lua_pop(L, 2);
            run_frames(L, 60.0);
        }
    }
    if (tty && hist) write_history(hist);
    free(hist);
    clear_candidates();
    return 0;
}

/* ---- scripts and arguments -------------------------------------------------------------- */

static int traceback(lua_State *L) {
    luaL_traceback(L, L, lua_tostring(L, 1), 1);
    return 1;
}

/* Runs the chunk on the stack top (or reports its load error) with nargs arguments pushed
 * above it. */
static int run_chunk_args(lua_State *L, int status, int nargs) {
    if (status == LUA_OK) {
        int base = lua_gettop(L) - nargs; /* the chunk */
        lua_pushcfunction(L, traceback);
        lua_insert(L, base);
        catch_sigint(true);
        status = lua_pcall(L, nargs, LUA_MULTRET, base);
        catch_sigint(false);
    }
    if (status != LUA_OK) {
        fprintf(stderr, "kiln: %s\n", lua_tostring(L, -1));
        lua_settop(L, 0);
        return 1;
    }
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

/* Starts the session the REPL feeds, with `world` made when the script made none. */
static int setup_session(lua_State *L) {
    static const char code[] =
        "local kiln = require 'kiln'\n"
        "if rawget(_G, 'world') == nil then world = kiln.world() end\n"
        "_KILN_SESSION = kiln.session(_G)\n";
    return run_chunk(L, luaL_loadbuffer(L, code, sizeof code - 1, "=kiln"));
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
        int status = luaL_loadfile(L, argv[i]);
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
        if (setup_session(L) == 0) rc = repl(L);
        if (remote_fd >= 0) close(remote_fd);
    }
    lua_close(L);
    return rc;
}
