/* main.c: the `kiln` command: runs scripts with the kiln module loaded (like `lua`), then or
 * instead a REPL, local or attached to a game's console; an error or Ctrl-C never ends the REPL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "histfile.h"
#include "interrupt.h"
#include "kiln_lua.h"
#include "lineinput.h"
#include "remote.h"
#include "session.h"
#include "termtext.h"

/* ---- the interactive loop ------------------------------------------------------------- */

/* :run: step the world at fps until :pause, an empty line, the end of input or Ctrl-C. */
static void run_frames(lua_State *L, double fps) {
    printf("running at %g frames per second: Enter or :pause stops\n", fps);
    fflush(stdout);
    double period = 1.0 / fps, next = kcmd_now_seconds(), last_print = next;
    kcmd_interrupt_clear();
    for (;;) {
        double wait = next - kcmd_now_seconds();
        int r = kcmd_wait_readable(STDIN_FILENO, wait > 0 ? wait : 0);
        if (r < 0 && kcmd_interrupt_seen()) break;
        if (r > 0) {
            if (kcmd_lineinput_stop_running()) break;
            continue;
        }
        if (r != 0) continue;
        lua_getglobal(L, "_KILN_SESSION");
        lua_getfield(L, -1, "step");
        lua_insert(L, -2);
        lua_pushinteger(L, 1);
        int rc = kcmd_interrupt_pcall(L, 2, 2, 0);
        if (rc != LUA_OK) {
            printf("%s\n", lua_tostring(L, -1));
            lua_pop(L, 1);
            break;
        }
        double now = kcmd_now_seconds();
        next += period;
        if (next < now - period) next = now; /* frames slower than fps: do not catch up */
        if (now - last_print >= 1.0 || strcmp(lua_tostring(L, -2), "ok") != 0) {
            printf("%s\n", lua_tostring(L, -1));
            last_print = now;
        }
        lua_pop(L, 2);
        fflush(stdout);
        if (kcmd_interrupt_seen()) break;
    }
    printf("paused\n");
    fflush(stdout);
}

/* Reads, feeds and prints until the end of input, :quit or a lost console; 1 when the
 * console connection closed. */
static int repl(kcmd_session *session, const char *world_line) {
    bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    bool remote = session->remote_fd >= 0;
    kcmd_lineinput_open(session, tty);
    if (tty) {
        kcmd_history_open();
        printf("kiln %s on %s (:help for commands)\n", KILN_VERSION_STRING, LUA_RELEASE);
    }
    if (world_line) printf("%s\n", world_line);
    fflush(stdout);
    kcmd_interrupt_catch(true);
    bool more = false;
    int rc = 0;
    for (;;) {
        char *line;
        kcmd_read_status rs = kcmd_lineinput_read(more ? ">> " : "> ", remote && !more, &line);
        if (rs == KCMD_READ_END) break;
        if (rs == KCMD_READ_CLOSED) {
            printf("console connection closed\n");
            rc = 1;
            break;
        }
        if (rs == KCMD_READ_CANCELLED) {
            if (more) kcmd_session_reset(session);
            more = false;
            continue;
        }
        if (tty) kcmd_history_accept(line);
        kcmd_answer a;
        bool alive = kcmd_session_ask(session, line, &a);
        free(line);
        if (!alive) {
            printf("console connection closed\n");
            rc = 1;
            break;
        }
        if (a.len > 0 && strcmp(a.status, "run") != 0) {
            kcmd_put_text(stdout, a.text, a.len, isatty(STDOUT_FILENO)); /* a mod's or a game's text */
            printf("\n");
        }
        fflush(stdout);
        more = strcmp(a.status, "more") == 0;
        bool quit = strcmp(a.status, "quit") == 0;
        if (strcmp(a.status, "run") == 0 && !remote) run_frames(session->L, a.text ? atof(a.text) : 0);
        free(a.text);
        if (quit) break;
    }
    kcmd_interrupt_catch(false);
    if (tty) kcmd_history_close();
    kcmd_lineinput_close();
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
        kcmd_interrupt_catch(true);
        status = kcmd_interrupt_pcall(L, nargs, 1, base);
        kcmd_interrupt_catch(false);
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
            "  --token T       the console's token (default: read from the file the game\n"
            "                  printed, which only its user can read)\n"
            "  -v, --version   print the version\n"
            "  -h, --help      this text\n"
            "With no script and no -e, kiln opens the REPL with a fresh `world`.\n");
}

/* Starts the session the REPL feeds and picks its world (kept from the script when it
 * made one); *world_line gets the session's word on which (malloc'd), or NULL. */
static int setup_session(kcmd_session *session, char **world_line) {
    lua_State *L = session->L;
    static const char code[] =
        "local result, remote = ...\n"
        "local kiln = require 'kiln'\n"
        "_KILN_SESSION = kiln.session(_G)\n"
        "if not remote then return _KILN_SESSION:open_world(result) end\n";
    *world_line = NULL;
    if (luaL_loadbuffer(L, code, sizeof code - 1, "=kiln") != LUA_OK) return run_chunk(L, LUA_ERRSYNTAX);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &SCRIPT_RESULT_KEY);
    lua_pushboolean(L, session->remote_fd >= 0);
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
    luaL_openlibs(L);
    kcmd_interrupt_track_coroutines(L);
    luaL_requiref(L, "kiln", luaopen_kiln, 1);
    lua_pop(L, 1);

    bool interactive = false, ran = false;
    const char *connect_spec = NULL, *token = NULL;
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
        } else if (strcmp(argv[i], "--token") == 0) {
            if (++i >= argc) {
                usage(stderr);
                return 1;
            }
            token = argv[i];
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
        kcmd_session session = {.L = L, .remote_fd = -1};
        if (connect_spec) {
            session.remote_fd = kcmd_remote_connect(connect_spec);
            if (session.remote_fd < 0) {
                fprintf(stderr, "kiln: cannot connect to %s\n", connect_spec);
                lua_close(L);
                return 1;
            }
            char why[640];
            char *secret = kcmd_remote_token(connect_spec, token, why, sizeof why);
            char *refused = NULL;
            if (!secret || !kcmd_remote_login(session.remote_fd, secret, &refused)) {
                fprintf(stderr, "kiln: %s: %s\n", connect_spec, secret ? refused : why);
                free(refused);
                free(secret);
                close(session.remote_fd);
                lua_close(L);
                return 1;
            }
            free(secret);
            if (isatty(STDIN_FILENO)) printf("connected to %s\n", connect_spec);
        }
        char *world_line;
        if (setup_session(&session, &world_line) == 0) {
            bool say = world_line && (ran || isatty(STDIN_FILENO));
            rc = repl(&session, say ? world_line : NULL);
        } else {
            rc = 1;
        }
        free(world_line);
        if (session.remote_fd >= 0) close(session.remote_fd);
    }
    lua_close(L);
    return rc;
}
